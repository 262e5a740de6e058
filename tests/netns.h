/* SPDX-License-Identifier: MIT */
/*
 * Hosts for the tests of systems that span hosts: two network namespaces
 * joined by a veth pair, with link-local addresses (169.254.0.0/16) only,
 * made and removed by the test itself with iproute2's `ip`.
 *
 * Namespaces are named shoal-t<pid>-<tag>-a and -b, so that parallel tests
 * and runs never meet, and creating a pair first removes the pairs of test
 * processes that no longer exist (a run killed before its cleanup). Nothing
 * is created in the namespace the test runs in: the veth pair is made
 * inside namespace a with its peer end moved straight into b.
 */
#ifndef SHOAL_TESTS_NETNS_H
#define SHOAL_TESTS_NETNS_H

#include <stdbool.h>

#define TEST_NETNS_NAME_MAX 48

struct test_netns {
	char ns[2][TEST_NETNS_NAME_MAX];   /* namespace of side 0 (a) and 1 (b) */
	char dev[2][16];                   /* the veth end in each */
	char addr[2][16];                  /* its IPv4 address, without the prefix */
	bool made[2];
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

/* Remove both namespaces (the veth goes with them). Idempotent. */
void test_netns_destroy(struct test_netns *n);

/* Move the calling process into side `side`'s network namespace, and into
 * a mount namespace of its own with that namespace's sysfs (as `ip netns
 * exec` does): 0 or -errno. For a forked child, before it opens a socket. */
int test_netns_enter(const struct test_netns *n, int side);

/* Set side `side`'s veth end down or up: 0, or -1 (said on stderr). */
int test_netns_link(const struct test_netns *n, int side, bool up);

#endif
