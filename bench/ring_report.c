/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-ring's report: markdown tables (stdout, --md) and one CSV row
 * per sample (--csv).
 *
 * Every number in a table is the median over runs with [min, max]. A ratio
 * between two contenders is computed run by run, between the two samples of
 * the same case that ran back to back, and only then summarised: a ratio is
 * never taken between medians measured minutes apart, possibly in different
 * placements.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench/ring_report.h"

/* Two probes further apart than this factor ran in different placements. */
#define PLACEMENT_FACTOR 1.5

typedef double (*obs_get)(const struct bench_obs *o);

static double get_mmsgs(const struct bench_obs *o)
{
	return o->mmsgs;
}

static double get_ns_per_msg(const struct bench_obs *o)
{
	return o->ns_per_msg;
}

static double get_p50(const struct bench_obs *o)
{
	return (double)o->lat.p50;
}

static double get_p99(const struct bench_obs *o)
{
	return (double)o->lat.p99;
}

static double get_p999(const struct bench_obs *o)
{
	return (double)o->lat.p999;
}

static double get_cpu_per_msg(const struct bench_obs *o)
{
	return o->cpu_ns_per_msg;
}

static double get_cpu_pct(const struct bench_obs *o)
{
	return 100.0 * o->cpu_util;
}

static double get_sleeps(const struct bench_obs *o)
{
	return o->sleeps_per_msg;
}

static double get_lost(const struct bench_obs *o)
{
	return (double)o->lost;
}

static double get_probe(const struct bench_obs *o)
{
	return o->probe_ns;
}

static struct bench_mmm point_mmm(const struct bench_point *pt, obs_get get)
{
	double v[BENCH_MAX_RUNS];

	for (unsigned i = 0; i < pt->n; i++)
		v[i] = get(&pt->obs[i]);
	return bench_mmm(v, pt->n);
}

/* Which pairs of interleaved samples a ratio is taken over. */
enum pairs {
	PAIRS_ALL,
	PAIRS_FAST,     /* both probes within PLACEMENT_FACTOR of the fastest probe */
	PAIRS_OTHER,    /* the rest: a slower placement, or a disturbed probe */
};

static bool pair_wanted(const struct bench_obs *a, const struct bench_obs *b, enum pairs which,
			double floor)
{
	bool fast = a->probe_ns <= floor * PLACEMENT_FACTOR && b->probe_ns <= floor * PLACEMENT_FACTOR;

	return which == PAIRS_ALL || (which == PAIRS_FAST) == fast;
}

/*
 * Run-by-run ratios get(a) / get(b) over the pairs `which` selects (`floor`:
 * the fastest probe of the whole run). Returns how many pairs there were.
 */
static unsigned pair_mmm(const struct bench_point *a, const struct bench_point *b, obs_get get,
			 enum pairs which, double floor, struct bench_mmm *out)
{
	double v[BENCH_MAX_RUNS];
	unsigned n = 0;

	for (unsigned i = 0; i < a->n && i < b->n; i++)
		if (pair_wanted(&a->obs[i], &b->obs[i], which, floor))
			v[n++] = get(&a->obs[i]) / get(&b->obs[i]);
	if (n > 0)
		*out = bench_mmm(v, n);
	return n;
}

/* The waker's cost over the runs in which it made FUTEX_WAKE calls at all:
 * "med [min, max]", or "—" when it never had to. */
static const char *fmt_cost(char *buf, size_t len, const struct bench_point *pt)
{
	double v[BENCH_MAX_RUNS];
	struct bench_mmm m;
	unsigned n = 0;

	for (unsigned i = 0; i < pt->n; i++)
		if (pt->obs[i].wake_cost.n > 0)
			v[n++] = (double)pt->obs[i].wake_cost.p50;
	if (n == 0)
		return "—";
	m = bench_mmm(v, n);
	snprintf(buf, len, "%.0f [%.0f, %.0f]", m.med, m.min, m.max);
	return buf;
}

static const char *fmt_med(char *buf, size_t len, const struct bench_point *pt, obs_get get,
			   int prec)
{
	snprintf(buf, len, "%.*f", prec, point_mmm(pt, get).med);
	return buf;
}

static const char *fmt_ns(char *buf, size_t len, uint64_t ns)
{
	if (ns == 0)
		snprintf(buf, len, "0");
	else if (ns < 1000)
		snprintf(buf, len, "%llu ns", (unsigned long long)ns);
	else
		snprintf(buf, len, "%g us", (double)ns / 1000);
	return buf;
}

/* Shoal's point divided by pt, run by run: "med [min, max]", or "—". */
static const char *fmt_ratio(char *buf, size_t len, const struct bench_case *cs,
			     const struct bench_point *pt, obs_get get)
{
	struct bench_mmm r;

	if (pt == &cs->pt[0] || pair_mmm(&cs->pt[0], pt, get, PAIRS_ALL, 0, &r) == 0)
		return "—";
	return bench_fmt_mmm(buf, len, r, 2);
}

static bool point_done(const struct bench_point *pt)
{
	return pt->n > 0;
}

static const struct bench_point *find_point(const struct bench_case *cs, const char *name)
{
	for (unsigned k = 0; cs != NULL && k < cs->n; k++)
		if (strcmp(cs->pt[k].c->name, name) == 0 && point_done(&cs->pt[k]))
			return &cs->pt[k];
	return NULL;
}

/* pt divided by the limit (the plain ring) of its case, run by run:
 * "med [min, max]", or "—" for the plain ring itself or without one. */
static const char *fmt_limit(char *buf, size_t len, const struct bench_case *cs,
			     const struct bench_point *pt, obs_get get)
{
	const struct bench_point *plain = find_point(cs, bench_plain.name);
	struct bench_mmm r;

	if (plain == NULL || pt == plain || pair_mmm(pt, plain, get, PAIRS_ALL, 0, &r) == 0)
		return "—";
	return bench_fmt_mmm(buf, len, r, 2);
}

/* ---- header ---- */

/* Did every sample run where it was pinned? */
static bool pinning_held(const struct bench_plan *plan)
{
	for (unsigned i = 0; i < plan->n_cases; i++)
		for (unsigned k = 0; k < plan->cases[i].n; k++) {
			const struct bench_point *pt = &plan->cases[i].pt[k];

			for (unsigned r = 0; r < pt->n; r++)
				if (pt->obs[r].cpu[0] != plan->cpu[0] ||
				    pt->obs[r].cpu[1] != plan->cpu[1])
					return false;
		}
	return true;
}

/* The fastest placement probe of the run: the best placement seen. */
static double probe_floor(const struct bench_plan *plan)
{
	double floor = 0;

	for (unsigned i = 0; i < plan->n_cases; i++)
		for (unsigned k = 0; k < plan->cases[i].n; k++) {
			const struct bench_point *pt = &plan->cases[i].pt[k];

			for (unsigned r = 0; r < pt->n; r++)
				if (floor == 0 || pt->obs[r].probe_ns < floor)
					floor = pt->obs[r].probe_ns;
		}
	return floor;
}

/* Every sample kept: their probes into v (if not NULL), how many, and in
 * *waited how many were disturbed. */
static unsigned samples_kept(const struct bench_plan *plan, double *v, unsigned *waited)
{
	unsigned n = 0;

	*waited = 0;
	for (unsigned i = 0; i < plan->n_cases; i++)
		for (unsigned k = 0; k < plan->cases[i].n; k++) {
			const struct bench_point *pt = &plan->cases[i].pt[k];

			for (unsigned r = 0; r < pt->n; r++, n++) {
				if (v != NULL)
					v[n] = pt->obs[r].probe_ns;
				*waited += pt->obs[r].waited >= BENCH_WAITED_DISTURBED;
			}
		}
	return n;
}

static void conditions_summary(FILE *f, const struct bench_plan *plan)
{
	static double v[BENCH_MAX_CASES * BENCH_MAX_CONTENDERS * BENCH_MAX_RUNS];
	unsigned near = 0, waited;
	unsigned n = samples_kept(plan, v, &waited);
	struct bench_mmm m;

	if (n == 0)
		return;
	fprintf(f, "- interference: a sample in which a side waited %.0f%% of the time or more "
		"for its CPU (other tasks; /proc/self/schedstat run delay) is run again, up to "
		"%u times: %u reruns; %u of the %u samples kept were still disturbed; the "
		"hypervisor stole %.1f%% of CPU time over the run (/proc/stat)\n",
		100 * BENCH_WAITED_DISTURBED, plan->retries, plan->reruns, waited, n,
		100 * plan->steal);
	m = bench_mmm(v, n);
	for (unsigned i = 0; i < n; i++)
		near += v[i] <= m.min * PLACEMENT_FACTOR;
	fprintf(f, "- placement probe (cache-line round trip between the two pinned processes, "
		"before every sample): median %.0f ns, min %.0f, max %.0f; %u of %u samples "
		"within %.1fx of the fastest\n", m.med, m.min, m.max, near, n, PLACEMENT_FACTOR);
}

static void report_header(FILE *f, const struct bench_plan *plan)
{
	fprintf(f, "## shoal-bench-ring\n\n");
	fprintf(f, "- command: `%s`\n", plan->command);
	fprintf(f, "- mode: %s, %u runs; the contenders of each case run back to back, in an "
		"order rotated every run\n", plan->mode, plan->runs);
	fprintf(f, "- pinning: side A (producer, ping-pong initiator) on CPU %d, side B "
		"(consumer, responder) on CPU %d; sched_getcpu() agreed in every sample: %s\n",
		plan->cpu[0], plan->cpu[1], pinning_held(plan) ? "yes" : "NO");
	bench_md_machine(f);
	conditions_summary(f, plan);
	fprintf(f, "- every contender buffers %u KiB per direction; the consumer checks the "
		"sequence number and reads one word of every 64-byte line of each payload\n\n",
		BENCH_BUF_BYTES / 1024);
}

static void report_legend(FILE *f, const struct bench_plan *plan)
{
	const struct bench_contender *seen[16];
	unsigned n = 0;

	fprintf(f, "Contenders:\n\n");
	for (unsigned i = 0; i < plan->n_cases; i++)
		for (unsigned k = 0; k < plan->cases[i].n; k++) {
			const struct bench_contender *c = plan->cases[i].pt[k].c;
			bool dup = false;

			for (unsigned j = 0; j < n; j++)
				dup |= seen[j] == c;
			if (dup || c == &bench_sys || n == 16)
				continue;
			seen[n++] = c;
			fprintf(f, "- `%s`: %s\n", c->name, c->what);
		}
	fprintf(f, "\n");
}

/* ---- sections ---- */

static bool has_kind(const struct bench_plan *plan, enum bench_kind kind)
{
	for (unsigned i = 0; i < plan->n_cases; i++)
		if (plan->cases[i].pt[0].p.kind == kind && point_done(&plan->cases[i].pt[0]))
			return true;
	return false;
}

static void report_tput(FILE *f, const struct bench_plan *plan)
{
	char a[64], b[64], c[64], d[64], e[64];

	fprintf(f, "### Throughput, one producer process -> one consumer process\n\n"
		"Mmsg/s, Shoal ÷ contender and contender ÷ plain ring (the limit, `plain`; "
		"higher is better for Shoal and for the contender): median [min, max] over runs, "
		"ratios taken run by run between samples that ran back to back; ns/msg: "
		"median. Side A on CPU %d, side B on CPU %d.\n\n"
		"| payload (B) | batch | contender | Mmsg/s | ns/msg | Shoal ÷ contender "
		"| ÷ plain ring | probe (ns) |\n|---:|---:|---|---:|---:|---:|---:|---:|\n",
		plan->cpu[0], plan->cpu[1]);
	for (unsigned i = 0; i < plan->n_cases; i++) {
		const struct bench_case *cs = &plan->cases[i];

		if (cs->pt[0].p.kind != BENCH_TPUT)
			continue;
		for (unsigned k = 0; k < cs->n; k++) {
			const struct bench_point *pt = &cs->pt[k];

			if (!point_done(pt))
				continue;
			fprintf(f, "| %u | %u | %s | %s | %s | %s | %s | %s |\n", pt->p.payload,
				pt->p.batch, pt->c->name,
				bench_fmt_mmm(a, sizeof(a), point_mmm(pt, get_mmsgs), 2),
				fmt_med(b, sizeof(b), pt, get_ns_per_msg, 1),
				fmt_ratio(c, sizeof(c), cs, pt, get_mmsgs),
				fmt_limit(e, sizeof(e), cs, pt, get_mmsgs),
				fmt_med(d, sizeof(d), pt, get_probe, 0));
		}
	}
	fprintf(f, "\n");
}

static void report_pingpong(FILE *f, const struct bench_plan *plan)
{
	char a[64], b[64], c[64], d[64], e[64], g[64];

	fprintf(f, "### Ping-pong round trip, busy polling on both sides\n\n"
		"Round-trip percentiles of each run (ns): median [min, max] over runs. Shoal ÷ "
		"contender and contender ÷ plain ring (the limit, `plain`) on p50, run by run "
		"(lower is better for Shoal and for the contender). Initiator on CPU %d, "
		"responder on CPU %d.\n\n"
		"| payload (B) | contender | p50 | p99 | p99.9 | Shoal ÷ contender (p50) "
		"| ÷ plain ring (p50) | probe (ns) |\n|---:|---|---:|---:|---:|---:|---:|---:|\n",
		plan->cpu[0], plan->cpu[1]);
	for (unsigned i = 0; i < plan->n_cases; i++) {
		const struct bench_case *cs = &plan->cases[i];

		if (cs->pt[0].p.kind != BENCH_PINGPONG)
			continue;
		for (unsigned k = 0; k < cs->n; k++) {
			const struct bench_point *pt = &cs->pt[k];

			if (!point_done(pt))
				continue;
			fprintf(f, "| %u | %s | %s | %s | %s | %s | %s | %s |\n", pt->p.payload,
				pt->c->name, bench_fmt_mmm(a, sizeof(a), point_mmm(pt, get_p50), 0),
				bench_fmt_mmm(b, sizeof(b), point_mmm(pt, get_p99), 0),
				bench_fmt_mmm(c, sizeof(c), point_mmm(pt, get_p999), 0),
				fmt_ratio(d, sizeof(d), cs, pt, get_p50),
				fmt_limit(g, sizeof(g), cs, pt, get_p50),
				fmt_med(e, sizeof(e), pt, get_probe, 0));
		}
	}
	fprintf(f, "\n");
}

static void report_wake(FILE *f, const struct bench_plan *plan)
{
	char a[64], b[64], c[64], d[64], e[64], g[64], h[64], l[64];

	fprintf(f, "### Wake-up from sleep\n\n"
		"Side A sends one message every gap, stamped with CLOCK_MONOTONIC; side B sleeps "
		"(Shoal: doorbell prepare + wait; pipe, socket: blocking read) and measures send "
		"to receive. Latency and waker cost (ns): median [min, max] over runs of each "
		"run's percentile; the others are medians. \"waker cost\" is side A's send + "
		"notify when the notify made the FUTEX_WAKE call.\n\n"
		"| contender | gap | p50 | p99 | p99.9 | consumer CPU/msg (ns) | futex waits/msg "
		"| waker cost p50 | lost wake-ups |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (unsigned i = 0; i < plan->n_cases; i++) {
		const struct bench_case *cs = &plan->cases[i];

		if (cs->pt[0].p.kind != BENCH_WAKE)
			continue;
		for (unsigned k = 0; k < cs->n; k++) {
			const struct bench_point *pt = &cs->pt[k];
			bool shoal = pt->c == &bench_shoal;

			if (!point_done(pt))
				continue;
			fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", pt->c->name,
				fmt_ns(a, sizeof(a), pt->p.gap_ns),
				bench_fmt_mmm(b, sizeof(b), point_mmm(pt, get_p50), 0),
				bench_fmt_mmm(c, sizeof(c), point_mmm(pt, get_p99), 0),
				bench_fmt_mmm(d, sizeof(d), point_mmm(pt, get_p999), 0),
				fmt_med(e, sizeof(e), pt, get_cpu_per_msg, 0),
				shoal ? fmt_med(g, sizeof(g), pt, get_sleeps, 2) : "—",
				shoal ? fmt_cost(h, sizeof(h), pt) : "—",
				fmt_med(l, sizeof(l), pt, get_lost, 0));
		}
	}
	fprintf(f, "\n");
}

static void report_spin(FILE *f, const struct bench_plan *plan)
{
	char a[64], b[64], c[64], d[64], e[64], g[64], h[64], k[64], l[64];

	fprintf(f, "### Spin budget: shoal_doorbell_poll_wait()\n\n"
		"Side A sends one message every gap; side B waits with poll_wait at the spin "
		"budget. Latency and waker cost (ns): median [min, max] over runs; consumer CPU "
		"(getrusage, user + system) per message and as a share of wall time, futex "
		"waits per message: medians. Waker cost: side A's send + notify when the notify "
		"made the FUTEX_WAKE call.\n\n"
		"| spin budget | gap | p50 | p99 | consumer CPU/msg (ns) | consumer CPU %% "
		"| futex waits/msg | waker cost p50 | lost wake-ups |\n"
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (unsigned i = 0; i < plan->n_cases; i++) {
		const struct bench_point *pt = &plan->cases[i].pt[0];

		if (pt->p.kind != BENCH_SPIN || !point_done(pt))
			continue;
		fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			fmt_ns(a, sizeof(a), pt->p.spin_ns), fmt_ns(b, sizeof(b), pt->p.gap_ns),
			bench_fmt_mmm(c, sizeof(c), point_mmm(pt, get_p50), 0),
			bench_fmt_mmm(d, sizeof(d), point_mmm(pt, get_p99), 0),
			fmt_med(e, sizeof(e), pt, get_cpu_per_msg, 0),
			fmt_med(g, sizeof(g), pt, get_cpu_pct, 1),
			fmt_med(h, sizeof(h), pt, get_sleeps, 2),
			fmt_cost(k, sizeof(k), pt),
			fmt_med(l, sizeof(l), pt, get_lost, 0));
	}
	fprintf(f, "\n");
}

static void report_sys(FILE *f, const struct bench_plan *plan)
{
	char a[64];

	fprintf(f, "### Single operations on this machine\n\n"
		"| operation | ns per operation |\n|---|---:|\n");
	for (unsigned i = 0; i < plan->n_cases; i++) {
		const struct bench_point *pt = &plan->cases[i].pt[0];

		if (pt->p.kind != BENCH_SYSCALL || !point_done(pt))
			continue;
		fprintf(f, "| %s | %s |\n", bench_op_name[pt->p.op],
			bench_fmt_mmm(a, sizeof(a), point_mmm(pt, get_ns_per_msg), 1));
	}
	fprintf(f, "\n");
}

/* ---- targets ---- */

static const struct bench_case *find_case(const struct bench_plan *plan, enum bench_kind kind,
					  uint32_t payload, uint32_t batch)
{
	for (unsigned i = 0; i < plan->n_cases; i++) {
		const struct bench_params *p = &plan->cases[i].pt[0].p;

		if (p->kind == kind && p->payload == payload && p->batch == batch)
			return &plan->cases[i];
	}
	return NULL;
}

struct target {
	const char *what;
	const char *ref;    /* the contender Shoal is divided by */
	enum bench_kind kind;
	uint32_t payload, batch;
	obs_get get;
	double goal;        /* 0: no goal, the row splits a gap */
	bool at_most;       /* the ratio must be <= goal (else >=) */
	const char *row;    /* the contender divided (NULL: Shoal's) */
};

/* Issue 12's targets against the limit, each followed by its split (what
 * the record format alone costs, what the rest of the ring costs), then
 * the ones against rte_ring. */
static const struct target targets[] = {
	{ "throughput 64 B, batch 32: Shoal ÷ plain ring", "plain", BENCH_TPUT, 64, 32,
	  get_mmsgs, 0.9, false, NULL },
	{ "  the record format: plain-rec ÷ plain ring", "plain", BENCH_TPUT, 64, 32,
	  get_mmsgs, 0, false, "plain-rec" },
	{ "  the rest: Shoal ÷ plain-rec", "plain-rec", BENCH_TPUT, 64, 32, get_mmsgs, 0, false,
	  NULL },
	{ "  at 56 B, Shoal's record one line: Shoal ÷ plain ring", "plain", BENCH_TPUT, 56, 32,
	  get_mmsgs, 0, false, NULL },
	{ "  at 56 B: Shoal ÷ plain-rec (its slot one line)", "plain-rec", BENCH_TPUT, 56, 32,
	  get_mmsgs, 0, false, NULL },
	{ "ping-pong 64 B round trip p50: Shoal ÷ plain ring", "plain", BENCH_PINGPONG, 64, 1,
	  get_p50, 1.2, true, NULL },
	{ "throughput 64 B, batch 32: Shoal ÷ rte_ring", "rte_ring", BENCH_TPUT, 64, 32,
	  get_mmsgs, 1.0, false, NULL },
	{ "throughput 64 B, batch 1: Shoal ÷ rte_ring", "rte_ring", BENCH_TPUT, 64, 1, get_mmsgs,
	  1.5, false, NULL },
	{ "ping-pong 64 B round trip p50: Shoal ÷ rte_ring", "rte_ring", BENCH_PINGPONG, 64, 1,
	  get_p50, 0.8, true, NULL },
};

static const char *fmt_pairs(char *buf, size_t len, const struct bench_point *a,
			     const struct bench_point *b, const struct target *t, enum pairs which,
			     double floor)
{
	struct bench_mmm r;
	unsigned n = pair_mmm(a, b, t->get, which, floor, &r);

	if (n == 0)
		return "—";
	snprintf(buf, len, "%.2f [%.2f, %.2f], %u pairs", r.med, r.min, r.max, n);
	return buf;
}

static void report_target(FILE *f, const struct bench_plan *plan, const struct target *t,
			  double floor)
{
	const struct bench_case *cs = find_case(plan, t->kind, t->payload, t->batch);
	const struct bench_point *shoal = find_point(cs, t->row ? t->row : "shoal");
	const struct bench_point *ref = find_point(cs, t->ref);
	char all[64], fast[64], other[64];
	struct bench_mmm r;
	bool met;

	if (t->goal > 0)
		fprintf(f, "| %s | %s %.1f | ", t->what, t->at_most ? "<=" : ">=", t->goal);
	else
		fprintf(f, "| %s | — | ", t->what);
	if (shoal == NULL || ref == NULL) {
		fprintf(f, "— | — | — | not measured (%s) |\n",
			ref == NULL && strcmp(t->ref, "rte_ring") == 0 ?
			"built without DPDK, or not run" : "not run");
		return;
	}
	pair_mmm(shoal, ref, t->get, PAIRS_ALL, floor, &r);
	met = t->at_most ? r.med <= t->goal : r.med >= t->goal;
	fprintf(f, "%s | %s | %s | %s |\n",
		fmt_pairs(all, sizeof(all), shoal, ref, t, PAIRS_ALL, floor),
		fmt_pairs(fast, sizeof(fast), shoal, ref, t, PAIRS_FAST, floor),
		fmt_pairs(other, sizeof(other), shoal, ref, t, PAIRS_OTHER, floor),
		t->goal == 0 ? "(a split)" : met ? "met" : "**not met**");
}

static void report_targets(FILE *f, const struct bench_plan *plan)
{
	double floor = probe_floor(plan);
	unsigned waited, n = samples_kept(plan, NULL, &waited);

	fprintf(f, "### Targets\n\n");
	bench_md_disturbed_warning(f, waited, n, "samples");
	fprintf(f, "Ratios of interleaved samples, run by run: median [min, max]. The verdict is "
		"on all pairs; the split shows the pairs whose two probes were both within "
		"%.1fx of the fastest probe of the run (%.0f ns) and the others. Side A on "
		"CPU %d, side B on CPU %d.\n\n"
		"| target | goal | all pairs | fastest placement | other placements | verdict |\n"
		"|---|---:|---:|---:|---:|---|\n", PLACEMENT_FACTOR, floor, plan->cpu[0],
		plan->cpu[1]);
	for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
		report_target(f, plan, &targets[i], floor);
	fprintf(f, "\n");
}

void bench_report_md(FILE *f, const struct bench_plan *plan)
{
	report_header(f, plan);
	report_legend(f, plan);
	if (has_kind(plan, BENCH_TPUT))
		report_tput(f, plan);
	if (has_kind(plan, BENCH_PINGPONG))
		report_pingpong(f, plan);
	if (has_kind(plan, BENCH_WAKE))
		report_wake(f, plan);
	if (has_kind(plan, BENCH_SPIN))
		report_spin(f, plan);
	if (has_kind(plan, BENCH_SYSCALL))
		report_sys(f, plan);
	if (has_kind(plan, BENCH_TPUT) || has_kind(plan, BENCH_PINGPONG))
		report_targets(f, plan);
}

/* ---- CSV ---- */

static void csv_row(FILE *f, const struct bench_point *pt, unsigned run)
{
	const struct bench_obs *o = &pt->obs[run];

	fprintf(f, "%s,%s,%u,%u,%llu,%llu,\"%s\",%u,%llu,%.4f,%.2f,%llu,%llu,%llu,%llu,%.1f,%.4f,"
		"%.4f,%llu,%.1f,%.4f,%d,%d\n", bench_kind_name[pt->p.kind], pt->c->name,
		pt->p.payload, pt->p.batch, (unsigned long long)pt->p.spin_ns,
		(unsigned long long)pt->p.gap_ns,
		pt->p.kind == BENCH_SYSCALL ? bench_op_name[pt->p.op] : "", run + 1,
		(unsigned long long)o->msgs, o->mmsgs, o->ns_per_msg,
		(unsigned long long)o->lat.p50, (unsigned long long)o->lat.p99,
		(unsigned long long)o->lat.p999, (unsigned long long)o->wake_cost.p50,
		o->cpu_ns_per_msg, o->cpu_util, o->sleeps_per_msg, (unsigned long long)o->lost,
		o->probe_ns, o->waited, o->cpu[0], o->cpu[1]);
}

int bench_report_csv(const char *path, const struct bench_plan *plan)
{
	FILE *f = fopen(path, "we");

	if (f == NULL)
		return -errno;
	fprintf(f, "kind,contender,payload,batch,spin_ns,gap_ns,op,run,msgs,mmsgs_per_s,"
		"ns_per_msg,p50_ns,p99_ns,p999_ns,wake_cost_p50_ns,cpu_ns_per_msg,cpu_util,"
		"sleeps_per_msg,lost,probe_ns,waited,cpu_a,cpu_b\n");
	for (unsigned i = 0; i < plan->n_cases; i++)
		for (unsigned k = 0; k < plan->cases[i].n; k++)
			for (unsigned r = 0; r < plan->cases[i].pt[k].n; r++)
				csv_row(f, &plan->cases[i].pt[k], r);
	if (fclose(f) != 0)
		return -errno;
	return 0;
}
