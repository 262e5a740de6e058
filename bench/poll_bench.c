/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-poll: the cost of an empty shoal_poll(ctx, 0, 0) against the
 * number of direct peers writing to the polling worker, beside a plain
 * reference in the same run: a loop that checks N plain SPSC rings for a
 * new tail (one acquire load each), what polling N rings costs at the
 * least without a summary.
 *
 * One process, pinned to one CPU: a router, the consumer group `c` and up
 * to the largest peer count of sender groups `p0`, `p1`, ...; each sender
 * opens its direct link into `c` with one shoal_send_to(), and `c` drains
 * them, so its worker has one inbound ring per peer (plus its dispatcher's)
 * before the empty polls are timed. Every run times POLLS empty polls of
 * each contender, then POLLS polls that find one message each (a peer's
 * in turn) beside a plain loop that finds one moved tail among N,
 * interleaved; medians [min, max] over runs.
 */
#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/router.h>

#include "bench/bench.h"
#include "bench/procstat.h"
#include "shm/util.h"

#define PROG "shoal-bench-poll"
#define MSG 1u
#define MSG_BYTES 64u
#define MAX_PEERS 200u
#define MAX_COUNTS 16u
#define DISTURBED 0.05   /* a run whose CPU other tasks took this share of */

static const struct shoal_type types[] = { { MSG, MSG_BYTES, "poll-bench" } };

/* A plain SPSC ring's control block, as the reference polls it. */
struct plain_ring {
	_Alignas(64) _Atomic uint32_t tail;
	uint32_t head;
};

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	(void)a;
	(void)m;
}

static int attach(struct shoal_group **g, const char *system, const char *name)
{
	struct shoal_group_desc d = { .name = name, .types = types, .n_types = 1, .node = -1,
				      .on_message = on_message };
	struct shoal_err err = { "" };
	int ret = shoal_group_attach(g, &d, system, &err);

	if (ret < 0)
		fprintf(stderr, PROG ": attach %s: %s (%s)\n", name, shoal_strerror(ret), err.msg);
	return ret;
}

static double shoal_empty_ns(struct shoal_ctx *ctx, uint64_t polls)
{
	uint64_t t0 = shoal__now_ns();

	for (uint64_t i = 0; i < polls; i++)
		if (shoal_poll(ctx, 0, 0) != 0)
			return -1;   /* not empty: a bug, said by the caller */
	return (double)(shoal__now_ns() - t0) / (double)polls;
}

static double plain_empty_ns(struct plain_ring *r, uint32_t n, uint64_t polls)
{
	uint64_t t0 = shoal__now_ns(), found = 0;

	for (uint64_t i = 0; i < polls; i++)
		for (uint32_t k = 0; k < n; k++)
			found += atomic_load_explicit(&r[k].tail, memory_order_acquire) != r[k].head;
	if (found != 0)
		return -1;
	return (double)(shoal__now_ns() - t0) / (double)polls;
}

/*
 * One message a poll: peer i % n sends it (shoal_try_send_to()), then the
 * worker polls and must find exactly it, among the rings of n peers. The
 * send is timed too, the same at every n: what grows with n is the pass.
 */
static double shoal_one_ns(struct shoal_group **sender, uint32_t n, struct shoal_ctx *ctx,
			   uint64_t dest, const void *payload, uint64_t polls)
{
	uint64_t t0 = shoal__now_ns();

	for (uint64_t i = 0; i < polls; i++)
		if (shoal_try_send_to(shoal_group_worker(sender[i % n], 0), dest, MSG, payload,
				      MSG_BYTES) < 0 ||
		    shoal_poll(ctx, 0, 0) != 1)
			return -1;
	return (double)(shoal__now_ns() - t0) / (double)polls;
}

/* Its plain reference: ring i % n's tail moves, the loop checks the n
 * tails and takes the one that moved. */
static double plain_one_ns(struct plain_ring *r, uint32_t n, uint64_t polls)
{
	uint64_t t0 = shoal__now_ns(), found = 0;

	for (uint64_t i = 0; i < polls; i++) {
		struct plain_ring *w = &r[i % n];

		atomic_store_explicit(&w->tail, atomic_load_explicit(&w->tail, memory_order_relaxed) + 1,
				      memory_order_release);
		for (uint32_t k = 0; k < n; k++) {
			uint32_t t = atomic_load_explicit(&r[k].tail, memory_order_acquire);

			if (t != r[k].head) {
				r[k].head = t;
				found++;
			}
		}
	}
	if (found != polls)
		return -1;
	return (double)(shoal__now_ns() - t0) / (double)polls;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--peers LIST] [--runs N] [--polls N] [--cpu C] [--short]\n"
		"The cost of an empty shoal_poll(ctx, 0, 0) with 1 .. N direct peers writing to\n"
		"the worker, beside a plain reference (a loop checking N plain SPSC ring tails),\n"
		"then of a send and a poll that finds that one message among N peers' rings,\n"
		"beside a plain loop finding one moved tail among N; interleaved in one process\n"
		"pinned to one CPU; median [min, max] over runs.\n"
		"  --peers LIST  direct peer counts, ascending (default 1,10,100; at most %u)\n"
		"  --runs N      repetitions (default 7, at most %u)\n"
		"  --polls N     polls timed per run, contender and table (default 1000000)\n"
		"  --cpu C       the CPU to pin to (default 0)\n"
		"  --short       3 runs of 100000 polls\n"
		"Exit: 0, 1 (a failure, said on stderr), 2 (usage).\n",
		MAX_PEERS, BENCH_MAX_RUNS);
}

static int parse_peers(const char *arg, uint32_t *v, unsigned *n)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", arg);
	*n = 0;
	for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		uint64_t x;

		if (*n == MAX_COUNTS || bench_parse_uint(t, 1, MAX_PEERS, &x) < 0 ||
		    (*n > 0 && x <= v[*n - 1]))
			return -1;
		v[(*n)++] = (uint32_t)x;
	}
	return *n > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "peers", required_argument, NULL, 'p' }, { "runs", required_argument, NULL, 'r' },
		{ "polls", required_argument, NULL, 'n' }, { "cpu", required_argument, NULL, 'c' },
		{ "short", no_argument, NULL, 's' },       { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint32_t peers[MAX_COUNTS] = { 1, 10, 100 };
	unsigned n_counts = 3;
	uint64_t runs = 7, polls = 1000000, cpu = 0;
	struct shoal_group *sender[MAX_PEERS], *cg = NULL;
	struct shoal_router_opts o = { 0 };
	struct shoal_router *r = NULL;
	struct shoal_err err = { "" };
	struct plain_ring *plain;
	char system[64], name[16];
	unsigned char payload[MSG_BYTES] = { 0 };
	struct bench_mmm one[MAX_COUNTS][3];
	unsigned one_disturbed[MAX_COUNTS];
	uint32_t open = 0;
	int opt, ret = 1;

	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			if (parse_peers(optarg, peers, &n_counts) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'r':
			if (bench_parse_uint(optarg, 1, BENCH_MAX_RUNS, &runs) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'n':
			if (bench_parse_uint(optarg, 1000, UINT64_C(1) << 32, &polls) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'c':
			if (bench_parse_uint(optarg, 0, 1023, &cpu) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 's':
			runs = 3;
			polls = 100000;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (bench_pin((int)cpu) < 0) {
		fprintf(stderr, PROG ": cannot pin to CPU %llu\n", (unsigned long long)cpu);
		return 1;
	}
	plain = mmap(NULL, MAX_PEERS * sizeof(*plain), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (plain == MAP_FAILED) {
		perror(PROG ": mmap");
		return 1;
	}
	memset(plain, 0, MAX_PEERS * sizeof(*plain));
	snprintf(system, sizeof(system), "pbench-%d", (int)getpid());
	o.system = system;
	if (shoal_router_start(&r, &o, &err) < 0) {
		fprintf(stderr, PROG ": router: %s\n", err.msg);
		goto out;
	}
	/* Declared, not registered at run time: those are bounded. */
	for (uint32_t i = 0; i <= peers[n_counts - 1]; i++) {
		struct shoal_group_spec spec = { .name = name, .node = -1 };

		if (i == peers[n_counts - 1])
			snprintf(name, sizeof(name), "c");
		else
			snprintf(name, sizeof(name), "p%u", i);
		if (shoal_router_group(r, &spec, &err) < 0) {
			fprintf(stderr, PROG ": declaring %s: %s\n", name, err.msg);
			goto out;
		}
	}
	if (attach(&cg, system, "c") < 0)
		goto out;
	printf("## " PROG ": empty shoal_poll(ctx, 0, 0) against direct peers\n\n"
	       "One process pinned to CPU %llu (router idle in it); %llu runs x %llu empty polls "
	       "per contender, interleaved; median [min, max] ns per poll.\n\n"
	       "| direct peers | Shoal empty poll | plain: N ring tails | Shoal ÷ plain | disturbed |\n"
	       "|---:|---:|---:|---:|---:|\n",
	       (unsigned long long)cpu, (unsigned long long)runs, (unsigned long long)polls);
	for (unsigned k = 0; k < n_counts; k++) {
		double s[BENCH_MAX_RUNS], p[BENCH_MAX_RUNS], q[BENCH_MAX_RUNS];
		double os[BENCH_MAX_RUNS], op[BENCH_MAX_RUNS], oq[BENCH_MAX_RUNS];
		struct bench_mmm ms, mp, mq;
		unsigned disturbed = 0;
		uint64_t dest = shoal_group_lookup(cg, "c", 0);

		for (; open < peers[k]; open++) {
			snprintf(name, sizeof(name), "p%u", open);
			if (attach(&sender[open], system, name) < 0)
				goto out;
			int sret = shoal_send_to(shoal_group_worker(sender[open], 0), dest, MSG,
						 payload, sizeof(payload));

			if (sret < 0) {
				fprintf(stderr, PROG ": send_to from %s: %s\n", name,
					shoal_strerror(sret));
				goto out;
			}
		}
		/* Drain what the peers sent, and let the worker settle. */
		while (shoal_poll(shoal_group_worker(cg, 0), 0, 0) > 0)
			;
		for (uint64_t run = 0; run < runs; run++) {
			uint64_t w0 = bench_run_delay_ns(), t0 = shoal__now_ns();

			s[run] = shoal_empty_ns(shoal_group_worker(cg, 0), polls);
			p[run] = plain_empty_ns(plain, peers[k], polls);
			os[run] = shoal_one_ns(sender, peers[k], shoal_group_worker(cg, 0), dest,
					       payload, polls);
			op[run] = plain_one_ns(plain, peers[k], polls);
			disturbed += (double)(bench_run_delay_ns() - w0) >
				     DISTURBED * (double)(shoal__now_ns() - t0);
			if (s[run] < 0 || p[run] < 0) {
				fprintf(stderr, PROG ": a poll found a message where none was sent\n");
				goto out;
			}
			if (os[run] < 0 || op[run] < 0) {
				fprintf(stderr, PROG ": a poll did not find the one message sent\n");
				goto out;
			}
			q[run] = s[run] / p[run];
			oq[run] = os[run] / op[run];
		}
		ms = bench_mmm(s, (unsigned)runs);
		mp = bench_mmm(p, (unsigned)runs);
		mq = bench_mmm(q, (unsigned)runs);
		printf("| %u | %.1f [%.1f, %.1f] | %.1f [%.1f, %.1f] | %.2f [%.2f, %.2f] | %u of %llu |\n",
		       peers[k], ms.med, ms.min, ms.max, mp.med, mp.min, mp.max, mq.med, mq.min,
		       mq.max, disturbed, (unsigned long long)runs);
		one[k][0] = bench_mmm(os, (unsigned)runs);
		one[k][1] = bench_mmm(op, (unsigned)runs);
		one[k][2] = bench_mmm(oq, (unsigned)runs);
		one_disturbed[k] = disturbed;
		fflush(stdout);
	}
	printf("\n### One message a poll\n\n"
	       "Each poll finds one message, sent just before it by peer i %% N "
	       "(`shoal_try_send_to()`, timed too: the same at every N); the plain reference moves "
	       "ring i %% N's tail and checks the N tails. Same runs as above; ns per send and "
	       "poll.\n\n"
	       "| direct peers | Shoal send + poll | plain: one tail moved, N checked | Shoal ÷ plain "
	       "| Shoal ÷ Shoal at %u peer%s | disturbed |\n"
	       "|---:|---:|---:|---:|---:|---:|\n",
	       peers[0], peers[0] == 1 ? "" : "s");
	for (unsigned k = 0; k < n_counts; k++)
		printf("| %u | %.1f [%.1f, %.1f] | %.1f [%.1f, %.1f] | %.2f [%.2f, %.2f] | %.2f | %u of "
		       "%llu |\n",
		       peers[k], one[k][0].med, one[k][0].min, one[k][0].max, one[k][1].med,
		       one[k][1].min, one[k][1].max, one[k][2].med, one[k][2].min, one[k][2].max,
		       one[k][0].med / one[0][0].med, one_disturbed[k], (unsigned long long)runs);
	ret = 0;
out:
	for (uint32_t i = 0; i < open; i++)
		shoal_group_detach(sender[i]);
	if (cg != NULL)
		shoal_group_detach(cg);
	if (r != NULL)
		shoal_router_destroy(r);
	munmap(plain, MAX_PEERS * sizeof(*plain));
	return ret;
}
