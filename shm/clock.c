/* SPDX-License-Identifier: MIT */
/*
 * The data path's clock (clock.h): the anchors, and whether the counter
 * can be trusted at all.
 *
 * Ordering guarantees: none needed; a clock belongs to one thread.
 * Progress guarantees: wait-free (one vDSO read of the kernel's clock at
 * most).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "shm/clock.h"

/* A kernel read that took longer than this many ticks was preempted or
 * disturbed: its counter readings do not bracket it closely. */
#define ANCHOR_MAX_TICKS 1024u
/* An extrapolation this far from the kernel's clock means the counter
 * jumped (a migration, a reset): the rate's baseline starts again. */
#define JUMP_NS 10000u
/* The first rate is measured over this long; then each over RATE_NS,
 * measured again from there. */
#define FIRST_RATE_NS 1000000u
#define RATE_NS 100000000u

void shoal__clock_init(struct shoal__clock *c)
{
	memset(c, 0, sizeof(*c));
}

#if defined(__x86_64__)
/* The invariant time-stamp counter: constant rate in every power state. */
static bool counter_invariant(void)
{
	static _Atomic int known;

	return shoal__cpuid_bit(0x80000007u, false, 8, &known);
}

static void baseline(struct shoal__clock *c, uint64_t tsc, uint64_t ns)
{
	c->first_tsc = tsc;
	c->first_ns = ns;
	c->span = 0;
}

uint64_t shoal__clock_anchor(struct shoal__clock *c)
{
	uint64_t t0, t1, ns, tsc, mult;

	if (!counter_invariant()) {
		c->span = 0;
		return shoal__now_ns();
	}
	t0 = __rdtsc();
	ns = shoal__now_ns();
	t1 = __rdtsc();
	if (t1 < t0 || t1 - t0 > ANCHOR_MAX_TICKS)
		return ns;   /* no anchor from this read: the next read tries again */
	tsc = t0 + (t1 - t0) / 2;
	if (c->span != 0) {
		uint64_t pred = c->ns + (uint64_t)(((unsigned __int128)(tsc - c->tsc) * c->mult) >> 32);

		if (tsc < c->tsc || (pred > ns ? pred - ns : ns - pred) > JUMP_NS)
			baseline(c, tsc, ns);
	}
	if (c->first_ns == 0 || tsc <= c->first_tsc || ns < c->first_ns)
		baseline(c, tsc, ns);
	c->tsc = tsc;
	c->ns = ns;
	if (ns - c->first_ns < (c->span == 0 ? FIRST_RATE_NS : RATE_NS))
		return ns;   /* the rate as it was, or none yet (span 0) */
	mult = (uint64_t)(((unsigned __int128)(ns - c->first_ns) << 32) / (tsc - c->first_tsc));
	/* Between 10 GHz and 100 MHz, or the counter is not what we think. */
	if (mult < (UINT64_C(1) << 32) / 10 || mult > (UINT64_C(1) << 32) * 10) {
		baseline(c, tsc, ns);
		return ns;
	}
	c->mult = mult;
	c->span = (uint64_t)(((unsigned __int128)SHOAL__CLOCK_SPAN_NS << 32) / mult);
	if (ns - c->first_ns >= RATE_NS) {
		/* The next rate from here: the kernel's clock is slewed (NTP,
		 * the hypervisor), a rate over all time would lag it. */
		c->first_tsc = tsc;
		c->first_ns = ns;
	}
	return ns;
}
#else
uint64_t shoal__clock_anchor(struct shoal__clock *c)
{
	(void)c;
	return shoal__now_ns();
}
#endif
