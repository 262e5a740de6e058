/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the test programs: private segment directories, child
 * processes with deadlines, and a few assertions cmocka lacks.
 */
#ifndef SHOAL_TESTS_TESTUTIL_H
#define SHOAL_TESTS_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

/*
 * Point SHOAL_SHM_DIR at a fresh private directory under /dev/shm so that
 * tests running in parallel never see each other's segments. Returns the
 * directory; test_shm_dir_remove() deletes it and everything in it.
 */
const char *test_shm_dir_make(const char *test_name);
void test_shm_dir_remove(void);

/*
 * In the calling process (a child: see test_spawn), enter a private mount
 * namespace, mount a tmpfs of `bytes` (mode 0700) at directory `name` of
 * the test directory and point SHOAL_SHM_DIR at it: a shared-memory
 * filesystem that fills up. Returns its path, or NULL (said on stderr) when
 * this process may not mount: the caller exits 77 and the test skips.
 */
const char *test_small_shm(const char *name, size_t bytes);

/* Exit status of a child that could not set up what its test needs. */
#define TEST_CHILD_SKIP 77

/* Path of a segment name inside the test directory. */
const char *test_seg_path(const char *name);

/*
 * Wait for `pid` (a child of this process, or one the fork server started)
 * for at most `timeout_ms`; kill it with SIGKILL past that. Returns the wait
 * status, or -1 if it had to be killed.
 */
int test_wait_pid(pid_t pid, int timeout_ms);

/* Like waitpid(pid, status, WNOHANG) for the children test_wait_pid knows:
 * returns pid once it has exited (and reaps it), 0 while it runs, -1 (said
 * on stderr, and *status -1) if pid is no such child. */
pid_t test_try_wait(pid_t pid, int *status);

/*
 * Kill (SIGKILL) and reap every child test_spawn() started that no
 * test_wait_pid() or test_try_wait() has reaped yet: what a case that
 * failed half-way left running. Their own test_spawn() children die with
 * them (their parent-death signal).
 */
void test_kill_children(void);

/*
 * Run fn(arg) in a forked child process that exits with its return value.
 * Children must not use cmocka assertions (a failure would longjmp into the
 * copy of the test runner); they use CHILD_CHECK. Returns the pid.
 *
 * With len > 0 the child gets a private copy of the len bytes at arg; with
 * len 0 it gets arg itself, which must then point to memory the child has
 * too: anything when this process forks it; static data or a mapping made
 * before test_spawn_server_start() when the fork server does. Pointers
 * inside the copied bytes follow the same rule.
 *
 * Once the fork server runs, the child is forked by the server, not by this
 * process; a process with more than one thread and no server aborts here
 * (its children could hang, see testutil.c).
 */
pid_t test_spawn(int (*fn)(void *arg), void *arg, size_t len);

/*
 * Start the fork server (testutil.c). Call it from main while the test is
 * still one thread, after everything its children rely on exists: the
 * MAP_SHARED mappings they report through, the signal dispositions, the
 * test_spawn_share() registrations. Aborts if it cannot.
 */
void test_spawn_server_start(void);

/* A global whose current bytes every child of the fork server receives at
 * spawn time, at the same address (register before the server starts). */
void test_spawn_share(void *addr, size_t len);

/* In a child process: on failure, say where and exit 1. */
#define CHILD_CHECK(cond)                                                            \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: child check failed: %s\n", __FILE__,  \
				__LINE__, #cond);                                    \
			_exit(1);                                                    \
		}                                                                    \
	} while (0)

/* Pin the calling process to one CPU (modulo the CPUs online). */
void test_pin(int cpu);

/* Exit status of a child that must have exited normally with `code`. */
void test_assert_exited(int status, int code);

/* True when running under a sanitizer or valgrind (see meson test setups). */
int test_under_tool(void);

/* Scale an iteration count down under sanitizers and valgrind. */
uint64_t test_scale(uint64_t n);

/* The seed of a randomized test: SHOAL_TEST_SEED if set (to replay the
 * seed a failed run printed), else the time. */
uint64_t test_seed(void);

/* A fast deterministic PRNG (xorshift64*). */
static inline uint64_t test_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* FNV-1a over a buffer, the checksum records carry in the stress tests. */
static inline uint32_t test_checksum(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

#endif
