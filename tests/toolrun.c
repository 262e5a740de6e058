/* SPDX-License-Identifier: MIT */
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/toolrun.h"

const char *tool_bin;

static char *slurp(FILE *f)
{
	long n;
	char *buf;

	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = calloc(1, (size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

void tool_start(struct tool_run *r, const char *const *args)
{
	char *argv[16] = { (char *)tool_bin };
	posix_spawn_file_actions_t fa;
	size_t n = 1;
	int ret;

	r->out_f = tmpfile();
	r->err_f = tmpfile();
	assert_non_null(r->out_f);
	assert_non_null(r->err_f);
	for (; args[n - 1] != NULL; n++) {
		assert_true(n < sizeof(argv) / sizeof(argv[0]) - 1);
		argv[n] = (char *)args[n - 1];
	}
	argv[n] = NULL;
	fflush(NULL);
	/* posix_spawn, not fork: a runtime test runs the router's threads
	 * here, and a forked copy of this process would inherit their locks
	 * (tests/spawn.c). posix_spawn's child shares this memory only until
	 * it execs and runs nothing but system calls until then. */
	assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
	assert_int_equal(posix_spawn_file_actions_adddup2(&fa, fileno(r->out_f), STDOUT_FILENO), 0);
	assert_int_equal(posix_spawn_file_actions_adddup2(&fa, fileno(r->err_f), STDERR_FILENO), 0);
	ret = posix_spawn(&r->pid, tool_bin, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (ret != 0)
		fail_msg("cannot start %s: %s", tool_bin, strerror(ret));
}

int tool_wait(struct tool_run *r)
{
	int status = test_wait_pid(r->pid, TOOL_TIMEOUT_MS);

	r->out = slurp(r->out_f);
	r->err = slurp(r->err_f);
	if (status == -1)
		fail_msg("shoal timed out; stderr:\n%s", r->err);
	if (WIFSIGNALED(status))
		fail_msg("shoal killed by signal %d; stdout:\n%s\nstderr:\n%s", WTERMSIG(status),
			 r->out, r->err);
	assert_true(WIFEXITED(status));
	r->code = WEXITSTATUS(status);
	return r->code;
}

int tool_run_in(struct tool_run *r, const char *shm, const char *const *args)
{
	const char *now = getenv("SHOAL_SHM_DIR");
	char *saved = now != NULL ? strdup(now) : NULL;

	assert_true(now == NULL || saved != NULL);
	setenv("SHOAL_SHM_DIR", shm, 1);
	tool_start(r, args);
	if (saved != NULL)
		setenv("SHOAL_SHM_DIR", saved, 1);
	else
		unsetenv("SHOAL_SHM_DIR");
	free(saved);
	return tool_wait(r);
}

void tool_finish(struct tool_run *r, int code)
{
	if (tool_wait(r) != code)
		fail_msg("exit %d, expected %d\nstdout:\n%s\nstderr:\n%s", r->code, code, r->out,
			 r->err);
}

void tool_expect(struct tool_run *r, int code, const char *const *args)
{
	tool_start(r, args);
	tool_finish(r, code);
}

void tool_free(struct tool_run *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

void assert_has(const char *text, const char *needle)
{
	if (strstr(text, needle) == NULL)
		fail_msg("expected \"%s\" in:\n%s", needle, text);
}

void assert_lacks(const char *text, const char *needle)
{
	if (strstr(text, needle) != NULL)
		fail_msg("did not expect \"%s\" in:\n%s", needle, text);
}

unsigned count_of(const char *text, const char *needle)
{
	unsigned n = 0;

	for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

void tool_expect_usage_errors(const struct tool_usage_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct tool_run r;

		tool_expect(&r, 2, cases[i].args);
		assert_has(r.err, cases[i].says);
		assert_int_equal(r.out[0], '\0');
		tool_free(&r);
	}
}
