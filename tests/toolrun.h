/* SPDX-License-Identifier: MIT */
/*
 * Running the real `shoal` binary from a test and collecting what it
 * printed. The binary is the one in $SHOAL_BIN (main() sets tool_bin).
 * Every run has a deadline; a timeout or a death by signal fails the test.
 */
#ifndef SHOAL_TESTS_TOOLRUN_H
#define SHOAL_TESTS_TOOLRUN_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define TOOL_TIMEOUT_MS 20000

extern const char *tool_bin;

struct tool_run {
	pid_t pid;
	FILE *out_f, *err_f;
	int code;      /* exit code, after tool_wait() */
	char *out;
	char *err;
};

/* Start `shoal ARGS...` (NULL-terminated) with its output in temporary files. */
void tool_start(struct tool_run *r, const char *const *args);

/* Wait for it and collect its output; returns (and stores) its exit code. */
int tool_wait(struct tool_run *r);

/* Start and wait, `shoal` reading the shared memory in `shm` (another
 * host's: SHOAL_SHM_DIR, this process's set back after); its exit code. */
int tool_run_in(struct tool_run *r, const char *shm, const char *const *args);

/* Wait and require exit `code`, printing both streams if it differs. */
void tool_finish(struct tool_run *r, int code);

/* Start, wait, require exit `code`. */
void tool_expect(struct tool_run *r, int code, const char *const *args);

void tool_free(struct tool_run *r);

/* Fail unless `needle` is (is not) in `text`, showing the text. */
void assert_has(const char *text, const char *needle);
void assert_lacks(const char *text, const char *needle);

/* Occurrences of `needle` in `text`. */
unsigned count_of(const char *text, const char *needle);

/* A bad command line and what its error must say. */
struct tool_usage_case {
	const char *args[8];   /* NULL-terminated */
	const char *says;
};

/* Run each case: exit 2, `says` on stderr, nothing on stdout. */
void tool_expect_usage_errors(const struct tool_usage_case *cases, size_t n);

#endif
