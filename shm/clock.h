/* SPDX-License-Identifier: MIT */
/*
 * A cheaper read of CLOCK_MONOTONIC for the stamps of the data path (a
 * message's send_ns, a handler's start for the latency histogram):
 * extrapolated from the CPU's time-stamp counter between reads of the
 * kernel's clock.
 *
 * Why: each send stamps its envelope and each handled batch reads the
 * clock for the latency histogram. CLOCK_MONOTONIC through the vDSO costs
 * 25 ns on this project's VM (kvm-clock: lfence, rdtsc, the pvclock page,
 * a scale), a bare rdtsc 11 ns (the ordering fence is most of the rest);
 * the round trip of shoal_send_to() both ways reads it four times
 * (docs/design.md, "The clock of the data path").
 *
 * How: a `struct shoal__clock` belongs to one thread (the runtime keeps one
 * per worker context). It anchors a kernel reading (ns, and the counter
 * read just before and after it), and for 100 us after that (`span`
 * ticks) answers anchor + ticks since x rate; past that, or if the counter
 * is behind the anchor (another CPU's counter, a reset), it reads the
 * kernel's clock again and anchors there. The rate is measured over the
 * last 100 ms, then again from there: the kernel's clock is slewed (NTP,
 * the hypervisor's kvm-clock), and a rate over all time would lag it. A
 * jump of the counter (an extrapolation more than 10 us off at the next
 * anchor) starts the rate again. Until a rate is known (1 ms), or on a
 * CPU without an invariant counter (CPUID 0x80000007 EDX bit 8), or not on
 * x86-64, every read is the kernel's.
 *
 * What it gives: a reading within about 100 ns of the kernel's clock
 * (measured on this project's VM: median 10-15 ns, 99.9 % within
 * 115-136 ns, the worst of 4 million 181 ns, each against the midpoint of
 * two kernel reads at most 200 ns apart), comparable across threads and
 * processes as CLOCK_MONOTONIC is, but not strictly monotonic: a
 * re-anchor may step back by that error. A latency measured between two
 * such stamps is so good to about 100 ns, and a stamp up to
 * SHOAL__CLOCK_SLACK_NS in a reader's future is its present. Timeouts and
 * deadlines keep shoal__now_ns().
 */
#ifndef SHOAL_SHM_CLOCK_H
#define SHOAL_SHM_CLOCK_H

#include <stdint.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "shm/util.h"

struct shoal__clock {
	uint64_t tsc;        /* the counter at the anchor */
	uint64_t ns;         /* the kernel's clock at the anchor */
	uint64_t span;       /* ticks the anchor answers for; 0: read the kernel's */
	uint64_t mult;       /* ns per tick, times 2^32 */
	uint64_t first_tsc;  /* where the rate is measured from */
	uint64_t first_ns;
};

/* An anchor answers for this long: the error grows with it (1 ms: up to
 * 300-650 ns on the VM), the cost of an anchor (45 ns) shrinks. */
#define SHOAL__CLOCK_SPAN_NS 100000u
/* Two clocks' readings agree within this (far more than the error above):
 * a stamp this far in a reader's future is its present. */
#define SHOAL__CLOCK_SLACK_NS 1000u

/* Zero it, or call this: the first reads are the kernel's. */
void shoal__clock_init(struct shoal__clock *c);

/* The slow path of shoal__clock_ns(): reads the kernel's clock, anchors. */
uint64_t shoal__clock_anchor(struct shoal__clock *c);

static inline uint64_t shoal__clock_ns(struct shoal__clock *c)
{
#if defined(__x86_64__)
	/* Unordered: the stamp may be taken a few instructions early or
	 * late, which a nanosecond clock for a message's send time allows. */
	uint64_t d = __rdtsc() - c->tsc;

	/* Unsigned: a counter behind the anchor is a huge d, re-anchored. */
	if (SHOAL_LIKELY(d < c->span))
		return c->ns + (uint64_t)(((unsigned __int128)d * c->mult) >> 32);
#endif
	return shoal__clock_anchor(c);
}

#endif
