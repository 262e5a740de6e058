/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-ring's plan (which samples, in which order) and its results,
 * as the driver (ring_bench.c) fills them and its report (ring_report.c)
 * prints them. Private to bench/.
 */
#ifndef SHOAL_BENCH_RING_REPORT_H
#define SHOAL_BENCH_RING_REPORT_H

#include <stdio.h>

#include "bench/report.h"

#define BENCH_MAX_CONTENDERS 8
#define BENCH_MAX_CASES 64
/* A sample in which a side waited this share of the time for its CPU was
 * disturbed by another task: it is run again, up to the mode's retries. */
#define BENCH_WAITED_DISTURBED 0.02

/* What the report needs from one sample. */
struct bench_obs {
	double mmsgs;             /* million messages (round trips, operations) per second */
	double ns_per_msg;        /* wall time per message */
	struct bench_pct lat;     /* ping-pong: round trip; wake, spin: send to receive */
	struct bench_pct wake_cost; /* wake, spin: side A's send + notify that woke B */
	double cpu_ns_per_msg;    /* side B's CPU time per message */
	double cpu_util;          /* side B's CPU time / wall time */
	double sleeps_per_msg;    /* side B's futex waits per message */
	uint64_t msgs;
	uint64_t lost;            /* wake-ups only a timeout delivered */
	double probe_ns;          /* placement probe round trip */
	double waited;            /* share of the sample either side waited for its CPU */
	int cpu[2];               /* where sides A and B ran (sched_getcpu) */
};

/* One contender in one case: its parameters and one observation per run. */
struct bench_point {
	const struct bench_contender *c;
	struct bench_params p;
	struct bench_obs *obs;
	unsigned n;
};

/* The contenders of a case measure the same thing; they run back to back,
 * in an order rotated every run, so that each pair of them shares a
 * placement as often as possible. pt[0] is Shoal, the reference of ratios. */
struct bench_case {
	struct bench_point pt[BENCH_MAX_CONTENDERS];
	unsigned n;
};

struct bench_plan {
	struct bench_case cases[BENCH_MAX_CASES];
	unsigned n_cases;
	unsigned runs;
	const char *mode;
	char command[512];
	double steal;             /* share of CPU time the hypervisor stole during the run */
	unsigned retries;         /* reruns allowed per disturbed sample */
	unsigned reruns;          /* reruns made */
	int cpu[2];
};

/* The whole report as markdown. */
void bench_report_md(FILE *f, const struct bench_plan *plan);

/* Every observation as one CSV row. Returns 0 or -errno. */
int bench_report_csv(const char *path, const struct bench_plan *plan);

#endif
