/* SPDX-License-Identifier: MIT */
/*
 * The data path's clock (shm/clock.h): its readings stay within a
 * bound of CLOCK_MONOTONIC, in this process and in another, and it finds
 * its way back after the counter jumps either way or its rate is wrong.
 * Whether the counter is used at all (x86-64 with an invariant counter) is
 * printed: without it every reading is the kernel's, and the same bounds
 * hold.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/clock.h"
#include "tests/testutil.h"

/* Far looser than the clock's error (tens of ns): what the test asserts is
 * that readings are the kernel's time, not how close they come. */
#define TOLERANCE_NS 2000u
/* A bracket of two kernel reads longer than this was preempted: skipped. */
#define BRACKET_NS 20000u

/* Read until the clock answers from the counter (a baseline of 1 ms), for
 * at most 2 s; false if it never does (no invariant counter). */
static bool warm_up(struct shoal__clock *c)
{
	uint64_t end = shoal__now_ns() + 2000000000u;

	while (shoal__now_ns() < end) {
		(void)shoal__clock_ns(c);
		if (c->span != 0)
			return true;
	}
	return false;
}

/* For `ms` milliseconds and until `want` readings were checked (or 30 s
 * passed: a machine too busy to give that many brackets unpreempted),
 * every reading not preempted lies within the tolerance of a kernel
 * reading before it and one after; returns how many were checked. The
 * count is waited for, not expected of the time: a loaded machine
 * preempts many brackets, and a test must pass there. */
static unsigned within_kernel(struct shoal__clock *c, unsigned ms, unsigned want)
{
	uint64_t t0 = shoal__now_ns(), end = t0 + (uint64_t)ms * 1000000u;
	uint64_t cap = t0 + UINT64_C(30000000000);
	unsigned checked = 0;

	for (uint64_t now = t0; (now < end || checked < want) && now < cap; now = shoal__now_ns()) {
		uint64_t a = shoal__now_ns(), s = shoal__clock_ns(c), b = shoal__now_ns();

		if (b - a > BRACKET_NS)
			continue;
		if (s + TOLERANCE_NS < a || s > b + TOLERANCE_NS)
			fail_msg("clock read %llu, kernel %llu .. %llu", (unsigned long long)s,
				 (unsigned long long)a, (unsigned long long)b);
		checked++;
	}
	return checked;
}

static void clock_tracks_the_kernel_clock(void **state)
{
	struct shoal__clock c;
	bool counter;

	(void)state;
	shoal__clock_init(&c);
	counter = warm_up(&c);
	printf("# the counter is %s\n", counter ? "used" : "not usable here: kernel reads only");
	assert_true(within_kernel(&c, 200, 1000) >= 1000);
}

static void clock_tracks_the_kernel_clock_in_another_process(void **state)
{
	pid_t pid;
	int st;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct shoal__clock c;

		shoal__clock_init(&c);
		(void)warm_up(&c);
		_exit(within_kernel(&c, 100, 500) >= 500 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Each way the counter can stop matching the anchor: it ran ahead of the
 * anchor's span, it is behind the anchor (another CPU's, or reset), the
 * rate is wrong (a different counter frequency after a migration). */
static void clock_finds_the_kernel_clock_again_after_a_jump(void **state)
{
	static const struct {
		const char *what;
		int64_t tsc_shift;
		unsigned rate_times;
	} jumps[] = {
		{ "counter far ahead", -(INT64_C(1) << 40), 1 },
		{ "counter behind", INT64_C(1) << 40, 1 },
		{ "rate twice too fast", 0, 2 },
	};

	(void)state;
	for (unsigned i = 0; i < sizeof(jumps) / sizeof(jumps[0]); i++) {
		struct shoal__clock c;

		shoal__clock_init(&c);
		if (!warm_up(&c)) {
			printf("# %s: no invariant counter, nothing to jump\n", jumps[i].what);
			continue;
		}
		c.tsc += (uint64_t)jumps[i].tsc_shift;
		c.mult *= jumps[i].rate_times;
		c.first_tsc += (uint64_t)jumps[i].tsc_shift;
		if (jumps[i].rate_times != 1) {
			/* A wrong rate answers wrongly until the anchor's span
			 * ends (SHOAL__CLOCK_SPAN_NS: how long the clock may be
			 * wrong); then the jump is found and the rate measured
			 * again. */
			uint64_t end = shoal__now_ns() + 2 * SHOAL__CLOCK_SPAN_NS;

			while (shoal__now_ns() < end)
				(void)shoal__clock_ns(&c);
		} else {
			uint64_t a = shoal__now_ns(), s = shoal__clock_ns(&c), b = shoal__now_ns();

			assert_true(s + TOLERANCE_NS >= a && s <= b + TOLERANCE_NS);
		}
		{
			unsigned n;

			(void)warm_up(&c);
			n = within_kernel(&c, 50, 100);
			printf("# %s: %u readings within the bound after it\n", jumps[i].what, n);
			assert_true(n >= 100);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(clock_tracks_the_kernel_clock),
		cmocka_unit_test(clock_tracks_the_kernel_clock_in_another_process),
		cmocka_unit_test(clock_finds_the_kernel_clock_again_after_a_jump),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
