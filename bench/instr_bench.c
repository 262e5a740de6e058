/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-instr: a fixed workload of the worker's data calls, for a
 * deterministic instruction count per message (this VM has no PMU, and its
 * timings are noisy). bench/instr-count runs it under callgrind, one
 * toggle per measured call, and divides by the counts printed here.
 *
 * One process: a router and group `a` (one worker) that routes TYPE to
 * itself and sends to its own actor 0 directly. Each round sends BATCH
 * messages with each form, every call accepted (the rings hold a round),
 * and drains them: direct ones with one poll, routed ones with polls until
 * the dispatcher delivered them all. The measured calls go through the
 * op_* wrappers (never inlined), so their names are what callgrind toggles.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/ring.h>
#include <shoal/router.h>

#include "bench/bench.h"
#include "bench/plain_fwd.h"
#include "bench/plain_ring.h"

#define PROG "shoal-bench-instr"
#define TYPE 1u
#define BYTES 64u
#define BATCH 32u

static const struct shoal_type types[] = { { TYPE, BYTES, "instr-bench" } };
static uint64_t handled;

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	(void)a;
	(void)m;
	handled++;
}

/* --on-batch: the group's on_batch, which the polls' runs go to. */
static void on_batch(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n)
{
	(void)a;
	(void)msgs;
	handled += n;
}

/* Neither inlined, nor merged with an identical wrapper, nor ending in a
 * tail call: each keeps its own frame for callgrind's toggle. */
#define NOINLINE __attribute__((noipa))
#define KEEP_FRAME(x)                                  \
	do {                                           \
		int ret_ = (x);                        \
		__asm__ __volatile__("" ::: "memory"); \
		return ret_;                           \
	} while (0)

NOINLINE static int op_send_to(struct shoal_ctx *c, uint64_t d, const void *b)
{
	KEEP_FRAME(shoal_try_send_to(c, d, TYPE, b, BYTES));
}

NOINLINE static int op_send(struct shoal_ctx *c, const void *b)
{
	KEEP_FRAME(shoal_try_send(c, TYPE, b, BYTES));
}

NOINLINE static int op_burst_to(struct shoal_ctx *c, uint64_t d, const struct shoal_burst_msg *m,
				uint32_t *sent)
{
	KEEP_FRAME(shoal_try_send_to_burst(c, d, m, BATCH, sent));
}

NOINLINE static int op_burst(struct shoal_ctx *c, const struct shoal_burst_msg *m, uint32_t *sent)
{
	KEEP_FRAME(shoal_try_send_burst(c, m, BATCH, sent));
}

NOINLINE static int op_poll_batch(struct shoal_ctx *c)
{
	KEEP_FRAME(shoal_poll(c, 0, 0));
}

NOINLINE static int op_poll_empty(struct shoal_ctx *c)
{
	KEEP_FRAME(shoal_poll(c, 0, 0));
}

/* A poll that finds one message, as each leg of a round trip does. */
NOINLINE static int op_poll_one(struct shoal_ctx *c)
{
	KEEP_FRAME(shoal_poll(c, 0, 0));
}

/*
 * The rings alone, beside the plain fixed-slot ring the benchmarks compare
 * them with (bench/plain_ring.h): a batch of BATCH 64-byte messages written
 * (a copy each, one publication) and read (a word of each summed, one
 * release), as shoal-bench-ring's throughput rows do. Each round puts two
 * batches into the Shoal ring: one read in runs, one with peek_burst.
 */
NOINLINE static int op_ring_put(struct shoal_ring_prod *p, const unsigned char (*b)[BYTES])
{
	const uint32_t stride = shoal_ring_stride(BYTES);

	/* Runs of records, as a producer of many messages of one size writes
	 * them: more than one only where a run meets the end of the ring. */
	for (uint32_t i = 0; i < BATCH;) {
		void *first;
		unsigned k = shoal_ring_reserve_run(p, BYTES, 0, BATCH - i, &first);

		if (k == 0)
			return -1;
		for (unsigned char *dst = first; k > 0; k--, i++, dst += stride)
			memcpy(dst, b[i], BYTES);
	}
	shoal_ring_commit(p);
	KEEP_FRAME(0);
}

NOINLINE static int op_ring_take(struct shoal_ring_cons *c, uint64_t *sum)
{
	struct shoal_rec run;
	unsigned n = 0, k;
	uint64_t w;

	/* Runs of records of one size, as they were written; more than one
	 * where a run met the end of the ring. */
	while (n < BATCH && (k = shoal_ring_peek_run(c, &run, BATCH - n)) > 0) {
		const unsigned char *src = run.data;

		for (n += k; k > 0; k--, src += shoal_ring_stride(run.len)) {
			memcpy(&w, src, sizeof(w));
			*sum += w;
		}
	}
	shoal_ring_release(c);
	KEEP_FRAME((int)n);
}

/* The same batch read as records of any size: a record array, one entry
 * per record. */
NOINLINE static int op_ring_take_burst(struct shoal_ring_cons *c, uint64_t *sum)
{
	struct shoal_rec recs[BATCH];
	unsigned n = shoal_ring_peek_burst(c, recs, BATCH);
	uint64_t w;

	for (unsigned i = 0; i < n; i++) {
		memcpy(&w, recs[i].data, sizeof(w));
		*sum += w;
	}
	shoal_ring_release(c);
	KEEP_FRAME((int)n);
}

NOINLINE static int op_plain_put(struct plain_prod *p, const unsigned char (*b)[BYTES])
{
	if (plain_prod_room(p, BATCH) != BATCH)
		return -1;
	for (uint32_t i = 0; i < BATCH; i++)
		memcpy(plain_prod_slot(p, i), b[i], BYTES);
	plain_prod_publish(p, BATCH);
	KEEP_FRAME(0);
}

NOINLINE static int op_plain_take(struct plain_cons *c, uint64_t *sum)
{
	uint32_t n = plain_cons_avail(c, BATCH);
	uint64_t w;

	for (uint32_t i = 0; i < n; i++) {
		memcpy(&w, plain_cons_slot(c, i), sizeof(w));
		*sum += w;
	}
	plain_cons_release(c, n);
	KEEP_FRAME((int)n);
}

/* `rounds` batches through a Shoal ring and through a plain ring, in
 * process memory. 0, or -1 if a batch did not go through whole. */
static int rings(uint64_t rounds, const unsigned char (*payload)[BYTES], uint64_t *sum)
{
	uint64_t len = shoal_ring_size(64 * 1024), plen = plain_ring_size(BYTES, 1024);
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	struct plain_prod pp;
	struct plain_cons pc;
	void *mem = NULL, *pmem = NULL;
	int ret = -1;

	if (posix_memalign(&mem, 128, len) != 0 || posix_memalign(&pmem, 128, plen) != 0 ||
	    shoal_ring_init(mem, len, 64 * 1024, 0) < 0 ||
	    shoal_ring_prod_attach(&p, mem, len, NULL) < 0 ||
	    shoal_ring_cons_attach(&c, mem, len, NULL) < 0 ||
	    plain_ring_init(pmem, plen, BYTES, 1024) < 0 || plain_prod_attach(&pp, pmem, plen) < 0 ||
	    plain_cons_attach(&pc, pmem, plen) < 0)
		goto out;
	for (uint64_t k = 0; k < rounds; k++)
		if (op_ring_put(&p, payload) < 0 || op_ring_take(&c, sum) != (int)BATCH ||
		    op_ring_put(&p, payload) < 0 || op_ring_take_burst(&c, sum) != (int)BATCH ||
		    op_plain_put(&pp, payload) < 0 || op_plain_take(&pc, sum) != (int)BATCH)
			goto out;
	ret = 0;
out:
	free(mem);
	free(pmem);
	return ret;
}

/*
 * The dispatcher alone (--dispatch G), as shoal-bench-system's
 * dispatcher-alone sections shape it: G groups with no process attached
 * (their inbound rings keep what they get), group i taking the messages
 * whose key % G == i, and a producer group of this process. Each round
 * holds dispatch, fills the uplink with DISPATCH_FILL messages (keys
 * counting up, so G > 1 spreads every pass over the groups), resumes, and
 * waits until the router counts them routed: the dispatcher drains a
 * backlog in passes of 64, however the threads are scheduled.
 * bench/instr-count toggles on the dispatcher's pass (dispatch_pass() in
 * runtime/data/dispatch.c) and divides by the messages printed here.
 */
#define DISPATCH_FILL 1024u         /* messages per round: half a 256 KiB uplink */
#define DISPATCH_GROUPS_MAX 100u
#define DISPATCH_ROUNDS_MAX 64u     /* a run's messages: 8 MiB of one group's inbound ring */
#define DISPATCH_REC (BYTES + 64u)  /* ring bytes of a record: header, envelope, payload */

/* Inbound bytes per group: every message of the run, from the default up. */
static uint32_t dispatch_inbound(uint32_t groups, uint64_t rounds)
{
	uint64_t need = (rounds * DISPATCH_FILL / groups + 1) * DISPATCH_REC;
	uint32_t cap = SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT;

	while (cap < need)
		cap *= 2;
	return cap;
}

/* Wait (sleeping, not measured) until the router has routed `want`. */
static int routed_to(struct shoal_router *r, uint64_t want)
{
	struct shoal_router_stats st;

	for (int i = 0; i < 60000; i++) {
		shoal_router_stats(r, &st);
		if (st.routed >= want)
			return st.routed == want ? 0 : -1;
		usleep(1000);
	}
	return -1;
}

static int dispatch_alone(uint32_t groups, uint64_t rounds, int stream)
{
	struct shoal_group_desc desc = { .name = "p", .types = types, .n_types = 1, .node = -1,
					 .on_message = on_message };
	struct shoal_filter f[DISPATCH_GROUPS_MAX];
	struct shoal_router_opts o = { .stream = stream };
	struct shoal_router *r = NULL;
	struct shoal_group *g = NULL;
	struct shoal_err err = { "" };
	unsigned char payload[BYTES];
	uint64_t key = 0;
	struct shoal_ctx *c;
	const char *why = "setting up";
	char system[64];
	int ret = 1;

	memset(payload, 0x5a, sizeof(payload));
	snprintf(system, sizeof(system), "ibench-d-%d", (int)getpid());
	o.system = system;
	if (shoal_router_start(&r, &o, &err) < 0) {
		fprintf(stderr, PROG ": router: %s\n", err.msg);
		return 1;
	}
	for (uint32_t i = 0; i < groups; i++) {
		char name[16];
		struct shoal_group_spec spec = { .name = name, .node = -1,
						 .inbound_capacity = dispatch_inbound(groups, rounds) };
		int id;

		snprintf(name, sizeof(name), "c%u", i);
		id = shoal_router_group(r, &spec, &err);
		if (id < 0)
			goto out;
		f[i] = (struct shoal_filter){ .types = { TYPE }, .n_types = 1,
					      .mode = SHOAL_ROUTE_GROUP, .group = (uint16_t)id };
		f[i].key = (struct shoal_key){ .offset = 0, .width = 8, .op = SHOAL_KEY_MOD,
					       .a = groups, .b = i };
	}
	if (shoal_router_group(r, &(struct shoal_group_spec){ .name = "p", .node = -1 }, &err) < 0 ||
	    shoal_router_set_routes(r, f, groups, &err) < 0 ||
	    shoal_group_attach(&g, &desc, system, &err) < 0)
		goto out;
	c = shoal_group_worker(g, 0);
	why = "a send was refused or the dispatcher did not route it";
	err.msg[0] = '\0';
	for (uint64_t k = 0; k < rounds; k++) {
		shoal_router_hold(r, true);
		/* A pass that began before the hold ends in this sleep, before
		 * the fill, so every pass of the round finds a backlog. */
		usleep(10000);
		for (uint32_t i = 0; i < DISPATCH_FILL; i++, key++) {
			memcpy(payload, &key, sizeof(key));
			if (shoal_try_send(c, TYPE, payload, BYTES) < 0)
				goto out;
		}
		shoal_router_hold(r, false);
		if (routed_to(r, key) < 0)
			goto out;
	}
	printf("dispatch_pass %llu\n", (unsigned long long)key);
	ret = 0;
out:
	if (ret != 0)
		fprintf(stderr, PROG ": %s%s%s\n", why, err.msg[0] ? ": " : "", err.msg);
	if (g != NULL)
		shoal_group_detach(g);
	shoal_router_destroy(r);
	return ret;
}

/*
 * The dispatcher's limit (--forward G), in the same shape: the plain
 * forwarder of shoal-bench-system (bench/plain_fwd.h) from one plain ring to
 * G, in process memory, rings of the size shoal-bench-system gives them.
 * Each round writes DISPATCH_FILL messages of type key % G (the forwarder's
 * table sends type i to ring i) into its input, forwards them in passes of
 * 64, and empties the outputs. bench/instr-count toggles on op_fwd_pass.
 */
NOINLINE static int op_fwd_pass(struct plain_fwd *w)
{
	KEEP_FRAME((int)plain_fwd_pass(w));
}

static int forward_alone(uint32_t groups, uint64_t rounds)
{
	uint32_t slot = plain_fwd_slot(BYTES), count = 1;
	struct plain_fwd *w = calloc(1, sizeof(*w));
	struct plain_prod up;
	struct plain_cons out;
	unsigned char *mem = NULL;
	uint64_t len, key = 0, moved = 0;
	int ret = 1;

	while ((uint64_t)count * 2 * slot <= SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT)
		count *= 2;
	len = plain_ring_size(slot, count);
	len = (len + 127) & ~(uint64_t)127;
	if (w == NULL || posix_memalign((void **)&mem, 128, len * (groups + 1)) != 0)
		goto out;
	for (uint32_t i = 0; i <= groups; i++)
		if (plain_ring_init(mem + i * len, len, slot, count) < 0)
			goto out;
	if (plain_cons_attach(&w->in, mem, len) < 0 || plain_prod_attach(&up, mem, len) < 0)
		goto out;
	for (uint32_t g = 0; g < groups; g++) {
		if (plain_prod_attach(&w->out[g], mem + (g + 1) * len, len) < 0)
			goto out;
		w->table[g] = (uint16_t)g;
	}
	w->n_types = groups;
	w->max_len = slot - (uint32_t)sizeof(struct plain_fwd_hdr);
	for (uint64_t k = 0; k < rounds; k++) {
		for (uint32_t i = 0; i < DISPATCH_FILL; i++, key++) {
			struct plain_fwd_hdr h = { (uint32_t)(key % groups), BYTES };
			unsigned char *dst;

			if (plain_prod_room(&up, 1) == 0)
				goto out;
			dst = plain_prod_slot(&up, 0);
			memcpy(dst, &h, sizeof(h));
			memset(dst + sizeof(h), 0x5a, BYTES);
			memcpy(dst + sizeof(h), &key, sizeof(key));
			plain_prod_publish(&up, 1);
		}
		/* Only passes that find messages, as the dispatcher's measured
		 * pass is called only for an uplink with records. */
		for (uint32_t taken = 0; taken < DISPATCH_FILL;) {
			int n = op_fwd_pass(w);

			if (n <= 0)
				goto out;
			taken += (uint32_t)n;
		}
		moved += DISPATCH_FILL;
		for (uint32_t g = 0; g < groups; g++) {
			if (plain_cons_attach(&out, mem + (g + 1) * len, len) < 0)
				goto out;
			plain_cons_release(&out, plain_cons_avail(&out, count));
		}
	}
	if (moved != key || w->dropped != 0 || w->malformed != 0)
		goto out;
	printf("op_fwd_pass %llu\n", (unsigned long long)key);
	ret = 0;
out:
	if (ret != 0)
		fprintf(stderr, PROG ": the plain forwarder did not forward every message\n");
	free(mem);
	free(w);
	return ret;
}

/* Wait (polling, not measured) until `want` messages were handled. */
static int drain_to(struct shoal_ctx *c, uint64_t want)
{
	for (int i = 0; i < 10000 && handled < want; i++)
		if (shoal_poll(c, 0, 1000000) < 0)
			return -1;
	return handled == want ? 0 : -1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--rounds N] [--on-batch] [--stream on|off]\n"
		   "                         [--dispatch G | --forward G]\n"
		   "A fixed workload of try_send_to, try_send, both bursts and polls, for\n"
		   "bench/instr-count (callgrind); prints how many messages each call made.\n"
		   "  --rounds N    rounds of %u messages per form (default 2000)\n"
		   "  --on-batch    the group has an on_batch handler (group.h)\n"
		   "  --stream on|off  the router's streamed copies (default on: the far\n"
		   "                placement's path; auto would time valgrind's time slices)\n"
		   "  --dispatch G  instead, the dispatcher alone routing to G groups (1-%u):\n"
		   "                N rounds of a backlog of %u messages\n"
		   "  --forward G   instead, the plain forwarder (the dispatcher's limit) to\n"
		   "                G rings (1-%u), in the same rounds\n"
		   "Exit: 0, 1 (a call failed, said on stderr), 2 (usage).\n", BATCH,
		DISPATCH_GROUPS_MAX, DISPATCH_FILL, DISPATCH_GROUPS_MAX);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = { { "rounds", required_argument, NULL, 'r' },
						   { "dispatch", required_argument, NULL, 'd' },
						   { "forward", required_argument, NULL, 'f' },
						   { "on-batch", no_argument, NULL, 'b' },
						   { "stream", required_argument, NULL, 's' },
						   { "help", no_argument, NULL, 'h' },
						   { NULL, 0, NULL, 0 } };
	struct shoal_group_desc desc = { .name = "a", .types = types, .n_types = 1, .node = -1,
					 .on_message = on_message };
	struct shoal_burst_msg msgs[BATCH];
	unsigned char payload[BATCH][BYTES];
	/* Streamed copies on unless --stream off, whatever the placement:
	 * the probe of `auto` under valgrind would time its time slices. */
	struct shoal_router_opts o = { .stream = SHOAL_STREAM_ON };
	struct shoal_router *r = NULL;
	struct shoal_group *g = NULL;
	struct shoal_err err = { "" };
	struct shoal_filter f = { .types = { TYPE }, .n_types = 1, .mode = SHOAL_ROUTE_GROUP };
	uint64_t rounds = 2000, empty = 0, self, sum = 0, dispatch = 0, forward = 0;
	struct shoal_ctx *c;
	char system[64];
	uint32_t sent;
	int opt, ret = 1;

	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (opt == 'r' && bench_parse_uint(optarg, 1, 1000000, &rounds) == 0)
			continue;
		if (opt == 'd' && bench_parse_uint(optarg, 1, DISPATCH_GROUPS_MAX, &dispatch) == 0)
			continue;
		if (opt == 'f' && bench_parse_uint(optarg, 1, DISPATCH_GROUPS_MAX, &forward) == 0)
			continue;
		if (opt == 'b') {
			desc.on_batch = on_batch;
			continue;
		}
		if (opt == 's' && bench_parse_stream(optarg, &o.stream) == 0 &&
		    o.stream != SHOAL_STREAM_AUTO)
			continue;
		if (opt == 'h') {
			usage(stdout);
			return 0;
		}
		if (opt == 'r' || opt == 'd' || opt == 'f' || opt == 's')
			return bench_bad_option(PROG, longopts, opt, optarg);
		usage(stderr);
		return 2;
	}
	if ((dispatch > 0 || forward > 0) && rounds > DISPATCH_ROUNDS_MAX) {
		fprintf(stderr, PROG ": --dispatch and --forward take at most %u rounds\n",
			DISPATCH_ROUNDS_MAX);
		return 2;
	}
	if (dispatch > 0 && forward > 0) {
		usage(stderr);
		return 2;
	}
	if (dispatch > 0)
		return dispatch_alone((uint32_t)dispatch, rounds, o.stream);
	if (forward > 0)
		return forward_alone((uint32_t)forward, rounds);
	memset(payload, 0x5a, sizeof(payload));
	for (uint32_t i = 0; i < BATCH; i++)
		msgs[i] = (struct shoal_burst_msg){ TYPE, BYTES, payload[i] };
	snprintf(system, sizeof(system), "ibench-%d", (int)getpid());
	o.system = system;
	if (shoal_router_start(&r, &o, &err) < 0) {
		fprintf(stderr, PROG ": router: %s\n", err.msg);
		return 1;
	}
	f.group = (uint16_t)shoal_router_group(r, &(struct shoal_group_spec){ .name = "a",
										.node = -1 },
					       &err);
	if ((int16_t)f.group < 0 || shoal_router_set_routes(r, &f, 1, &err) < 0 ||
	    shoal_group_attach(&g, &desc, system, &err) < 0) {
		fprintf(stderr, PROG ": setting up: %s\n", err.msg);
		goto out;
	}
	c = shoal_group_worker(g, 0);
	self = shoal_group_lookup(g, "a", 0);
	if (shoal_connect(c, self, 10 * INT64_C(1000000000)) < 0) {
		fprintf(stderr, PROG ": connect: no direct link\n");
		goto out;
	}
	for (uint64_t k = 0; k < rounds; k++) {
		uint64_t base = handled;

		for (uint32_t i = 0; i < BATCH; i++)
			if (op_send_to(c, self, payload[i]) < 0)
				goto refused;
		if (op_poll_batch(c) != (int)BATCH)
			goto refused;
		for (uint32_t i = 0; i < BATCH; i++)
			if (op_send(c, payload[i]) < 0)
				goto refused;
		if (drain_to(c, base + 2 * BATCH) < 0)
			goto refused;
		if (op_burst_to(c, self, msgs, &sent) < 0 || sent != BATCH ||
		    op_poll_batch(c) != (int)BATCH)
			goto refused;
		if (op_burst(c, msgs, &sent) < 0 || sent != BATCH ||
		    drain_to(c, base + 4 * BATCH) < 0)
			goto refused;
		for (uint32_t i = 0; i < BATCH; i++, empty++)
			if (op_poll_empty(c) != 0)
				goto refused;
		for (uint32_t i = 0; i < BATCH; i++)
			if (shoal_try_send_to(c, self, TYPE, payload[i], BYTES) < 0 ||
			    op_poll_one(c) != 1)
				goto refused;
	}
	if (rings(rounds, (const unsigned char (*)[BYTES])payload, &sum) < 0)
		goto refused;
	printf("op_send_to %llu\nop_send %llu\nop_burst_to %llu\nop_burst %llu\n"
	       "op_poll_batch %llu\nop_poll_empty %llu\nop_poll_one %llu\n",
	       (unsigned long long)(rounds * BATCH), (unsigned long long)(rounds * BATCH),
	       (unsigned long long)(rounds * BATCH), (unsigned long long)(rounds * BATCH),
	       (unsigned long long)(2 * rounds * BATCH), (unsigned long long)empty,
	       (unsigned long long)(rounds * BATCH));
	printf("op_ring_put %llu\nop_ring_take %llu\nop_ring_take_burst %llu\n"
	       "op_plain_put %llu\nop_plain_take %llu\n",
	       (unsigned long long)(2 * rounds * BATCH), (unsigned long long)(rounds * BATCH),
	       (unsigned long long)(rounds * BATCH), (unsigned long long)(rounds * BATCH),
	       (unsigned long long)(rounds * BATCH));
	/* Read, so that the reads of the rings are not optimised away. */
	if (sum == 1)
		printf("sum %llu\n", (unsigned long long)sum);
	ret = 0;
	goto out;
refused:
	fprintf(stderr, PROG ": a call was refused or a message did not arrive\n");
out:
	if (g != NULL)
		shoal_group_detach(g);
	shoal_router_destroy(r);
	return ret;
}
