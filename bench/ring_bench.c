/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-ring: Shoal's rings against the limit (a plain fixed-slot SPSC
 * ring, bench/plain_ring.h), rte_ring, pipes and UNIX sockets, across two
 * pinned processes, in one run.
 *
 * The plan is a list of cases (throughput per payload and batch, ping-pong,
 * wake-up, spin budget x message gap, single operations); a case holds the
 * contenders that measure the same thing. Every run goes through every case
 * and runs its contenders back to back, rotating their order each run, so
 * that two contenders of a case are compared on samples taken seconds
 * apart: this VM changes the vCPUs' placement now and then, and a fixed
 * order would give one contender the better placement systematically.
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/ring_report.h"

#define MS(x) ((uint64_t)(x) * 1000000u)
#define US(x) ((uint64_t)(x) * 1000u)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define PROG "shoal-bench-ring"
#define EXIT_USAGE 2
#define EXIT_SKIP 77      /* meson's "skipped" */

/* Sample lengths per mode: how long side A keeps sending. */
struct bench_mode {
	const char *name;
	unsigned runs;
	unsigned retries;         /* reruns of a sample another task disturbed */
	uint64_t tput_ns, pingpong_ns, wake_ns, spin_ns, sys_ns;
};

enum { MODE_DEFAULT, MODE_SHORT, MODE_SMOKE };

static const struct bench_mode modes[] = {
	[MODE_DEFAULT] = { "default", 5, 3, MS(200), MS(300), MS(400), MS(200), MS(50) },
	/* No reruns in short and smoke: they keep their time bound (20 s, a
	 * few seconds) on a loaded machine, at the price of noisier numbers. */
	[MODE_SHORT] = { "short", 3, 0, MS(40), MS(60), MS(80), MS(40), MS(20) },
	[MODE_SMOKE] = { "smoke", 1, 0, MS(5), MS(5), MS(10), MS(5), MS(2) },
};

/* 56 beside 64: a Shoal record of a 56-byte payload is 64 bytes, one
 * cache line, as the fixed-slot rings' slot of a 64-byte one is; the rates
 * of every contender at the two sizes show what a slot that is a line is
 * worth (bench/SUITE.md, "A slot of one line"). */
static const uint32_t tput_payloads[] = { 16, 56, 64, 256, 1024 };
static const uint32_t tput_batches[] = { 1, 32 };
#define PINGPONG_PAYLOAD 64u
#define WAKE_PAYLOAD 64u
/* Long enough for the consumer to be asleep (and its vCPU idle) when the
 * next message comes. */
#define WAKE_GAP_NS US(200)
static const uint64_t spin_budgets[] = { 0, US(1), US(5), US(20), US(100) };
/* Gaps on both sides of every budget. */
static const uint64_t spin_gaps[] = { 500, US(2), US(10), US(50), US(200) };

/* Shoal first: the reference of "Shoal ÷ contender"; `plain` is the limit
 * every figure is also divided by. */
static const struct bench_contender *const tput_set[] = {
	&bench_shoal, &bench_shoal_db, &bench_plain, &bench_plain_rec,
#ifdef SHOAL_BENCH_RTE
	&bench_rte,
#endif
	&bench_pipe, &bench_sock,
};
static const struct bench_contender *const pingpong_set[] = {
	&bench_shoal, &bench_plain, &bench_plain_rec,
#ifdef SHOAL_BENCH_RTE
	&bench_rte,
#endif
	&bench_pipe, &bench_sock,
};
static_assert(COUNT(tput_set) <= BENCH_MAX_CONTENDERS &&
	      COUNT(pingpong_set) <= BENCH_MAX_CONTENDERS,
	      "a case's contenders must fit struct bench_case (ring_report.h)");
static const struct bench_contender *const wake_set[] = { &bench_shoal, &bench_pipe, &bench_sock };
static const struct bench_contender *const spin_set[] = { &bench_shoal };
static const struct bench_contender *const sys_set[] = { &bench_sys };

/* Sections, for --only. */
static const char *const section_name[BENCH_KINDS] = {
	[BENCH_TPUT] = "tput",
	[BENCH_PINGPONG] = "pingpong",
	[BENCH_WAKE] = "wake",
	[BENCH_SPIN] = "spin",
	[BENCH_SYSCALL] = "sys",
};

struct bench_opts {
	int mode;
	unsigned runs;            /* 0: the mode's */
	int cpu[2];
	bool sections[BENCH_KINDS]; /* --only */
	const char *csv;
	const char *md;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shoal-bench-ring [options]\n"
		"\n"
		"Cross-process ring benchmark: Shoal rings against the limit (`plain`, a plain\n"
		"fixed-slot SPSC ring: every Shoal figure is also shown as a ratio to it), DPDK\n"
		"rte_ring (when built with DPDK), pipes and AF_UNIX SOCK_SEQPACKET sockets,\n"
		"between two processes pinned to two CPUs, interleaved in the same runs.\n"
		"Results as markdown on stdout, progress on stderr.\n"
		"\n"
		"  --short          every case shorter, 3 runs, no reruns (under 20 s)\n"
		"  --smoke          every case a few milliseconds, 1 run: checks that it runs\n"
		"  --runs N         repeat every case N times (1-%u; default 5)\n"
		"  --cpus A,B       pin the producer / initiator to A, the consumer / responder\n"
		"                   to B (default 0,1)\n"
		"  --only LIST      sections to run, comma-separated: tput,pingpong,wake,spin,sys\n"
		"  --csv FILE       write one CSV row per sample\n"
		"  --md FILE        write the markdown report to FILE as well\n"
		"  --help           this text\n"
		"\n"
		"Exit status: 0 done, 1 a sample failed, 2 bad usage, 77 the two CPUs are\n"
		"not available (skipped), 128+n stopped by signal n.\n", BENCH_MAX_RUNS);
}

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "short", no_argument, NULL, 's' },
		{ "smoke", no_argument, NULL, 'S' },
		{ "runs", required_argument, NULL, 'r' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "only", required_argument, NULL, 'o' },
		{ "csv", required_argument, NULL, 'C' },
		{ "md", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*o = (struct bench_opts){ .mode = MODE_DEFAULT, .cpu = { 0, 1 } };
	for (unsigned k = 0; k < BENCH_KINDS; k++)
		o->sections[k] = true;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		uint64_t v;

		switch (opt) {
		case 'h':
			usage(stdout);
			exit(0);
		case 's':
			o->mode = MODE_SHORT;
			break;
		case 'S':
			o->mode = MODE_SMOKE;
			break;
		case 'r':
			if (bench_parse_uint(optarg, 1, BENCH_MAX_RUNS, &v) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			o->runs = (unsigned)v;
			break;
		case 'c':
			if (bench_parse_cpus(optarg, CPU_SETSIZE, o->cpu) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'o':
			if (bench_parse_names(optarg, section_name, BENCH_KINDS, o->sections) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'C':
			o->csv = optarg;
			break;
		case 'm':
			o->md = optarg;
			break;
		default:
			return -EINVAL;
		}
	}
	return optind == argc ? 0 : -EINVAL;
}

/* ---- the plan ---- */

static int plan_add(struct bench_plan *plan, const struct bench_params *p,
		    const struct bench_contender *const *set, unsigned n)
{
	struct bench_case *cs;

	if (plan->n_cases == BENCH_MAX_CASES || n > BENCH_MAX_CONTENDERS)
		return -ENOSPC;
	cs = &plan->cases[plan->n_cases++];
	cs->n = n;
	for (unsigned k = 0; k < n; k++) {
		cs->pt[k] = (struct bench_point){ .c = set[k], .p = *p };
		cs->pt[k].obs = calloc(plan->runs, sizeof(struct bench_obs));
		if (cs->pt[k].obs == NULL)
			return -ENOMEM;
	}
	return 0;
}

static void plan_free(struct bench_plan *plan)
{
	for (unsigned i = 0; i < plan->n_cases; i++)
		for (unsigned k = 0; k < plan->cases[i].n; k++)
			free(plan->cases[i].pt[k].obs);
	plan->n_cases = 0;
}

static int plan_tput(struct bench_plan *plan, const struct bench_mode *mode,
		     struct bench_params p)
{
	int ret = 0;

	p.kind = BENCH_TPUT;
	p.duration_ns = mode->tput_ns;
	for (size_t i = 0; i < COUNT(tput_payloads) && ret == 0; i++)
		for (size_t j = 0; j < COUNT(tput_batches) && ret == 0; j++) {
			p.payload = tput_payloads[i];
			p.batch = tput_batches[j];
			ret = plan_add(plan, &p, tput_set, COUNT(tput_set));
		}
	return ret;
}

static int plan_latency(struct bench_plan *plan, const struct bench_mode *mode,
			struct bench_params p, const bool *sections)
{
	int ret = 0;

	p.batch = 1;
	if (sections[BENCH_PINGPONG]) {
		p.kind = BENCH_PINGPONG;
		p.payload = PINGPONG_PAYLOAD;
		p.duration_ns = mode->pingpong_ns;
		ret = plan_add(plan, &p, pingpong_set, COUNT(pingpong_set));
	}
	if (ret == 0 && sections[BENCH_WAKE]) {
		p.kind = BENCH_WAKE;
		p.payload = WAKE_PAYLOAD;
		p.duration_ns = mode->wake_ns;
		p.gap_ns = WAKE_GAP_NS;
		ret = plan_add(plan, &p, wake_set, COUNT(wake_set));
	}
	return ret;
}

static int plan_spin(struct bench_plan *plan, const struct bench_mode *mode,
		     struct bench_params p)
{
	int ret = 0;

	p.kind = BENCH_SPIN;
	p.payload = WAKE_PAYLOAD;
	p.batch = 1;
	p.duration_ns = mode->spin_ns;
	for (size_t i = 0; i < COUNT(spin_budgets) && ret == 0; i++)
		for (size_t j = 0; j < COUNT(spin_gaps) && ret == 0; j++) {
			p.spin_ns = spin_budgets[i];
			p.gap_ns = spin_gaps[j];
			ret = plan_add(plan, &p, spin_set, COUNT(spin_set));
		}
	return ret;
}

static int plan_sys(struct bench_plan *plan, const struct bench_mode *mode,
		    struct bench_params p)
{
	int ret = 0;

	p.kind = BENCH_SYSCALL;
	p.payload = WAKE_PAYLOAD;
	p.batch = 1;
	p.duration_ns = mode->sys_ns;
	for (unsigned op = 0; op < BENCH_OPS && ret == 0; op++) {
		p.op = (enum bench_op)op;
		ret = plan_add(plan, &p, sys_set, COUNT(sys_set));
	}
	return ret;
}

static int plan_build(struct bench_plan *plan, const struct bench_opts *o)
{
	const struct bench_mode *mode = &modes[o->mode];
	struct bench_params p = { .cpu = { o->cpu[0], o->cpu[1] } };
	int ret = 0;

	plan->mode = mode->name;
	plan->runs = o->runs ? o->runs : mode->runs;
	plan->retries = mode->retries;
	plan->cpu[0] = o->cpu[0];
	plan->cpu[1] = o->cpu[1];
	if (o->sections[BENCH_TPUT])
		ret = plan_tput(plan, mode, p);
	if (ret == 0)
		ret = plan_latency(plan, mode, p, o->sections);
	if (ret == 0 && o->sections[BENCH_SPIN])
		ret = plan_spin(plan, mode, p);
	if (ret == 0 && o->sections[BENCH_SYSCALL])
		ret = plan_sys(plan, mode, p);
	return ret;
}

/* ---- running it ---- */

static void obs_fill(struct bench_obs *o, const struct bench_params *p,
		     const struct bench_result res[2])
{
	const struct bench_result *a = &res[0], *b = &res[1];
	/* The side that saw the last message: the consumer, except where side
	 * A works alone (syscall) or waits for the last answer itself. */
	const struct bench_result *e =
		p->kind == BENCH_SYSCALL || p->kind == BENCH_PINGPONG ? a : b;
	uint64_t msgs = e->msgs;
	double wall = (double)(e->t_end - a->t_start), n = msgs ? (double)msgs : 1.0;

	o->msgs = msgs;
	o->ns_per_msg = wall / n;
	o->mmsgs = n * 1e3 / wall;
	o->lat = p->kind == BENCH_PINGPONG ? a->lat : b->lat;
	o->wake_cost = a->wake_cost;
	o->cpu_ns_per_msg = (double)b->cpu_ns / n;
	o->cpu_util = (double)b->cpu_ns / wall;
	o->sleeps_per_msg = (double)b->sleeps / n;
	o->lost = b->lost;
	o->probe_ns = a->probe_ns;
	/* Capped: side B may wait after side A's clock stopped. */
	o->waited = (double)(a->waited_ns > b->waited_ns ? a->waited_ns : b->waited_ns) / wall;
	o->waited = o->waited < 1.0 ? o->waited : 1.0;
	o->cpu[0] = a->cpu;
	o->cpu[1] = b->cpu;
}

static void progress(unsigned run, unsigned runs, const struct bench_point *pt,
		     const struct bench_obs *o)
{
	const struct bench_params *p = &pt->p;

	fprintf(stderr, "[run %u/%u] %-10s %-15s ", run + 1, runs, bench_kind_name[p->kind],
		pt->c->name);
	switch (p->kind) {
	case BENCH_TPUT:
		fprintf(stderr, "%4u B x%-2u  %8.2f Mmsg/s  %7.1f ns/msg", p->payload, p->batch,
			o->mmsgs, o->ns_per_msg);
		break;
	case BENCH_PINGPONG:
		fprintf(stderr, "%4u B  rtt p50 %llu p99 %llu ns", p->payload,
			(unsigned long long)o->lat.p50, (unsigned long long)o->lat.p99);
		break;
	case BENCH_SPIN:
		fprintf(stderr, "spin %6llu ns ", (unsigned long long)p->spin_ns);
		/* fall through */
	case BENCH_WAKE:
		fprintf(stderr, "gap %6llu ns  p50 %llu p99 %llu ns  cpu/msg %.0f ns",
			(unsigned long long)p->gap_ns, (unsigned long long)o->lat.p50,
			(unsigned long long)o->lat.p99, o->cpu_ns_per_msg);
		break;
	default:
		fprintf(stderr, "%s  %.1f ns", bench_op_name[p->op], o->ns_per_msg);
		break;
	}
	fprintf(stderr, "  (probe %.0f ns", o->probe_ns);
	if (o->waited >= BENCH_WAITED_DISTURBED)
		fprintf(stderr, ", waited %.1f%% for the CPU", 100 * o->waited);
	fprintf(stderr, ")\n");
}

/* One sample of a point, run again while another task disturbs it and
 * reruns are left. */
static int point_sample(struct bench_plan *plan, const struct bench_mem *m,
			struct bench_point *pt, unsigned run)
{
	struct bench_obs *o = &pt->obs[pt->n];

	for (unsigned attempt = 0;; attempt++) {
		struct bench_result res[2];
		int ret = bench_sample_run(m, pt->c, &pt->p, res);

		if (ret < 0)
			return ret;
		obs_fill(o, &pt->p, res);
		progress(run, plan->runs, pt, o);
		if (bench_stop_signal())
			return -EINTR;
		if (o->waited < BENCH_WAITED_DISTURBED || attempt == plan->retries)
			break;
		plan->reruns++;
	}
	pt->n++;
	return 0;
}

static int plan_run(struct bench_plan *plan, const struct bench_mem *m)
{
	for (unsigned r = 0; r < plan->runs; r++)
		for (unsigned i = 0; i < plan->n_cases; i++) {
			struct bench_case *cs = &plan->cases[i];

			for (unsigned k = 0; k < cs->n; k++) {
				int ret = point_sample(plan, m, &cs->pt[(k + r) % cs->n], r);

				if (ret < 0)
					return ret;
			}
		}
	return 0;
}

static void write_md(FILE *f, const void *plan)
{
	bench_report_md(f, plan);
}

static int write_csv(const char *path, const void *plan)
{
	return bench_report_csv(path, plan);
}

int main(int argc, char **argv)
{
	static struct bench_plan plan;
	struct bench_opts o;
	struct bench_mem mem;
	char seg_name[SHOAL_SEG_NAME_MAX];
	int ret;

	if (parse_opts(argc, argv, &o) < 0) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!bench_cpus_usable(o.cpu)) {
		fprintf(stderr, PROG ": CPUs %d and %d are not both available to this process\n",
			o.cpu[0], o.cpu[1]);
		return EXIT_SKIP;
	}
	bench_command_line(plan.command, sizeof(plan.command), argc, argv);
	ret = plan_build(&plan, &o);
	if (ret < 0) {
		fprintf(stderr, "shoal-bench-ring: %s\n", strerror(-ret));
		plan_free(&plan);
		return EXIT_FAILURE;
	}
	bench_signals_init();
	ret = bench_seg_create(&mem, seg_name, sizeof(seg_name));
	if (ret == 0) {
		fprintf(stderr, "shoal-bench-ring: %s mode, %u runs, CPUs %d,%d, segment %s\n",
			plan.mode, plan.runs, o.cpu[0], o.cpu[1], seg_name);
		struct bench_cpustat c0, c1;

		bench_cpustat_read(&c0);
		ret = plan_run(&plan, &mem);
		bench_cpustat_read(&c1);
		plan.steal = c1.total > c0.total ?
			     (double)(c1.steal - c0.steal) / (double)(c1.total - c0.total) : 0;
		bench_seg_destroy(&mem);
	}
	if (ret == 0)
		ret = bench_write_outputs(PROG, o.md, o.csv, write_md, write_csv, &plan);
	plan_free(&plan);
	if (bench_stop_signal()) {
		fprintf(stderr, "shoal-bench-ring: stopped by signal %d; segment removed\n",
			bench_stop_signal());
		return 128 + bench_stop_signal();
	}
	return ret < 0 ? EXIT_FAILURE : 0;
}
