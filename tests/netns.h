/* SPDX-License-Identifier: MIT */
/*
 * Hosts for the tests of systems that span hosts: two or three network
 * namespaces, with link-local addresses (169.254.0.0/16) only, made and
 * removed by the test itself with iproute2's `ip`. Two hosts are joined by
 * a veth pair; three by a veth each to a bridge device (a switch) in a
 * namespace of its own, so that every host reaches every other on one
 * subnet, each at one address.
 *
 * Namespaces are named shoal-t<pid>-<tag>-a, -b, -c (and -sw for the
 * switch), so that parallel tests and runs never meet, and creating hosts
 * first removes those of test processes that no longer exist (a run killed
 * before its cleanup). Nothing is created in the namespace the test runs
 * in: each veth is made inside one test namespace with its other end
 * moved straight into another.
 */
#ifndef SHOAL_TESTS_NETNS_H
#define SHOAL_TESTS_NETNS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define TEST_NETNS_NAME_MAX 48
#define TEST_NETNS_MAX 3                   /* hosts */

struct test_netns {
	unsigned n;                        /* hosts: 2 or 3 */
	char ns[TEST_NETNS_MAX][TEST_NETNS_NAME_MAX];   /* namespace of side 0 (a), 1 (b) ... */
	char dev[TEST_NETNS_MAX][16];      /* the veth end in each */
	char addr[TEST_NETNS_MAX][16];     /* its IPv4 address, without the prefix */
	bool made[TEST_NETNS_MAX];
	char sw[TEST_NETNS_NAME_MAX];      /* three hosts: the switch's namespace */
	bool made_sw;
};

/*
 * Why this process cannot make namespaces (not root, no `ip`, no netns
 * support), or NULL when it can. The test skips with this reason.
 */
const char *test_netns_unavailable(void);

/*
 * Make the pair: namespaces, veth, addresses 169.254.<octet>.1 (side 0) and
 * .2 (side 1), every link up, loopback too, and wait until both veth ends
 * have their carrier. Returns 0, or -1 after saying why on stderr and
 * removing whatever it made.
 */
int test_netns_create(struct test_netns *n, const char *tag, unsigned octet);

/*
 * The same with `hosts` sides (2 or 3): side s at 169.254.<octet>.<s + 1>.
 * Three hosts meet at a switch (a bridge device in its own namespace).
 */
int test_netns_create_hosts(struct test_netns *n, const char *tag, unsigned octet,
			    unsigned hosts);

/* Remove every namespace (the veths go with them). Idempotent. */
void test_netns_destroy(struct test_netns *n);

/* Move the calling process into side `side`'s network namespace, and into
 * a mount namespace of its own with that namespace's sysfs (as `ip netns
 * exec` does): 0 or -errno. For a forked child, before it opens a socket. */
int test_netns_enter(const struct test_netns *n, int side);

/* Set side `side`'s veth end down or up: 0, or -1 (said on stderr). */
int test_netns_link(const struct test_netns *n, int side, bool up);

/*
 * Fork a child that enters side `side`'s namespace and runs argv[0] with
 * argv, its shared-memory folder `shm` ($SHOAL_SHM_DIR), UCX on TCP alone
 * (the transport between hosts, whatever else UCX finds on one machine),
 * and its output appended to the file `out`. Returns the child's pid, or
 * -1. The child exits 126 if it could not enter, 127 if it could not run.
 */
pid_t test_netns_spawn(const struct test_netns *n, int side, const char *shm, const char *out,
		       const char *const *argv);

/* The file at `path`, its first MiB, NUL-terminated ("" if it cannot be
 * read), to free(); NULL only when out of memory. */
char *test_netns_slurp(const char *path);

/* `$SHOAL_BIN run --status plain --host HOST FILE` in side's namespace, as
 * test_netns_spawn() runs a program: the child's pid, or -1. */
pid_t test_netns_run_host(const struct test_netns *n, int side, const char *host,
			  const char *shm, const char *out, const char *file);

/*
 * The folders of a test of `hosts` hosts named a, b, c: `dir`
 * (/tmp/shoal-test-TAG-PID) for its files, and for host s a shared-memory
 * folder at shm + s * shm_len (/dev/shm/shoal-test-TAG-PID-a ...) and the
 * path of its output at out + s * out_len (DIR/a.out ...). The folders are
 * made mode 0700. Returns 0, or -1.
 */
int test_netns_dirs(const char *tag, unsigned hosts, char *dir, size_t dir_len, char *shm,
		    size_t shm_len, char *out, size_t out_len);

/* A new file at `path` holding `text`: 0, or -1. */
int test_netns_write(const char *path, const char *text);

/* Each `shoal run` still in runs[0 .. n_runs) (0: none) killed with
 * SIGKILL and reaped, its slot set to 0: after a case, so that a case that
 * failed midway leaves the next one quiet hosts. */
void test_netns_stop_runs(pid_t *runs, unsigned n_runs);

/*
 * The end of a test of hosts: test_netns_stop_runs(), the namespaces
 * removed, then every path of `paths` (NULL-terminated) with all it holds.
 */
void test_netns_teardown(struct test_netns *n, pid_t *runs, unsigned n_runs,
			 const char *const *paths);

#endif
