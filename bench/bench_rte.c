/* SPDX-License-Identifier: MIT */
/*
 * DPDK's rte_ring as a contender: an SP/SC element ring (RING_F_SP_ENQ |
 * RING_F_SC_DEQ, element size = payload) initialised with rte_ring_init()
 * in a region of the benchmark's Shoal segment, so that it sits in the same
 * kind of MAP_SHARED memory as Shoal's rings. No EAL: rte_ring_init() and
 * rte_ring_get_memsize_elem() come from librte_ring, enqueue and dequeue are
 * inline in DPDK's headers, and nothing here calls into the EAL.
 *
 * Built only when DPDK is installed; this file is compiled with DPDK's own
 * flags (rte_config.h, -march), as a DPDK application would be.
 *
 * Producer: stamps its batch in a local array, rte_ring_sp_enqueue_bulk_elem()
 * copies it in (all or nothing, spinning while full). Consumer:
 * rte_ring_sc_dequeue_burst_elem() copies up to a batch out, then the same
 * checks as every contender. The ring holds BENCH_BUF_BYTES of slots.
 */
#include <errno.h>

#include <rte_ring.h>

#include "bench/bench.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define RTE_VERSION_STR STR(RTE_VER_YEAR) "." STR(RTE_VER_MONTH) "." STR(RTE_VER_MINOR)

static int rte_prepare(const struct bench_mem *m, const struct bench_params *p,
		       struct bench_fds *fds)
{
	static const char *const names[2] = { "bench.ab", "bench.ba" };
	unsigned count = 1;
	ssize_t need;

	(void)fds;
	/* rte_ring_init() takes a power of two (without RING_F_EXACT_SZ):
	 * the largest that fits the buffer, as the plain ring's count. */
	while (2 * count * p->payload <= BENCH_BUF_BYTES)
		count *= 2;
	need = rte_ring_get_memsize_elem(p->payload, count);
	if (need < 0)
		return (int)need;
	if ((uint64_t)need > m->rte_len)
		return -ENOSPC;
	for (int i = 0; i < 2; i++) {
		int ret = rte_ring_init(m->rte[i], names[i], count, RING_F_SP_ENQ | RING_F_SC_DEQ);

		if (ret < 0)
			return ret;
	}
	return 0;
}

static int rte_tput_tx(struct bench_side *s)
{
	const uint32_t size = s->p->payload, batch = s->p->batch;
	_Alignas(64) unsigned char buf[BENCH_MAX_BATCH * BENCH_MAX_PAYLOAD];
	struct rte_ring *r = s->mem.rte[0];
	uint64_t seq = 0;
	bool last = false;

	bench_batch_fill(buf, size, batch);
	bench_side_ready(s);
	while (!last) {
		last = bench_time_up(s, seq);
		bench_batch_stamp(buf, size, batch, seq, last);
		seq += batch;
		while (rte_ring_sp_enqueue_bulk_elem(r, buf, size, batch, NULL) == 0)
			bench_relax();
	}
	s->res->msgs = seq;
	return 0;
}

/* Check n dequeued messages. Returns 0, 1 after the stop message, or -EBADMSG. */
static int check_batch(struct bench_side *s, const unsigned char *buf, unsigned n,
		       uint64_t *expect)
{
	const uint32_t size = s->p->payload;
	int ret = 0;

	for (unsigned i = 0; i < n && ret == 0; i++)
		ret = bench_msg_check(buf + (size_t)i * size, size, (*expect)++, &s->sink);
	return ret < 0 ? bench_fail(s, ret, "message %llu: bad content",
				    (unsigned long long)*expect - 1) : ret;
}

static int rte_tput_rx(struct bench_side *s)
{
	_Alignas(64) unsigned char buf[BENCH_MAX_BATCH * BENCH_MAX_PAYLOAD];
	struct rte_ring *r = s->mem.rte[0];
	uint64_t expect = 0;
	int ret = 0;

	bench_side_ready(s);
	while (ret == 0) {
		unsigned n = rte_ring_sc_dequeue_burst_elem(r, buf, s->p->payload, s->p->batch,
							    NULL);

		if (n == 0)
			bench_relax();
		else
			ret = check_batch(s, buf, n, &expect);
	}
	s->res->t_end = shoal__now_ns();
	s->res->msgs = expect;
	return ret < 0 ? ret : 0;
}

static void dequeue_one(struct rte_ring *r, void *buf, uint32_t size)
{
	while (rte_ring_sc_dequeue_burst_elem(r, buf, size, 1, NULL) == 0)
		bench_relax();
}

static void enqueue_one(struct rte_ring *r, const void *buf, uint32_t size)
{
	while (rte_ring_sp_enqueue_bulk_elem(r, buf, size, 1, NULL) == 0)
		bench_relax();
}

static int rte_ping(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char out[BENCH_MAX_PAYLOAD], in[BENCH_MAX_PAYLOAD];
	struct bench_hist *h = bench_ping_start(s, out);
	uint64_t seq, prev, expect;
	bool last = false;
	int ret = 0;

	if (h == NULL)
		return s->res->err;
	prev = s->res->t_start;
	for (seq = 0; !last && ret == 0; seq++) {
		last = prev >= s->deadline;
		bench_msg_stamp(out, size, seq | (last ? BENCH_STOP : 0));
		enqueue_one(s->mem.rte[0], out, size);
		dequeue_one(s->mem.rte[1], in, size);
		expect = seq;
		ret = check_batch(s, in, 1, &expect);
		bench_ping_lap(h, &prev);
	}
	return bench_ping_end(s, h, seq, prev, ret);
}

static int rte_pong(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char buf[BENCH_MAX_PAYLOAD];
	uint64_t expect = 0;
	int ret = 0;

	bench_side_ready(s);
	while (ret == 0) {
		dequeue_one(s->mem.rte[0], buf, size);
		ret = check_batch(s, buf, 1, &expect);
		enqueue_one(s->mem.rte[1], buf, size);
	}
	return ret < 0 ? ret : 0;
}

const struct bench_contender bench_rte = {
	.name = "rte_ring",
	.what = "DPDK " RTE_VERSION_STR " rte_ring SP/SC element ring (esize = payload), no EAL: "
		"sp_enqueue_bulk_elem / sc_dequeue_burst_elem, busy poll",
	.prepare = rte_prepare,
	.role = {
		[BENCH_TPUT] = { rte_tput_tx, rte_tput_rx },
		[BENCH_PINGPONG] = { rte_ping, rte_pong },
	},
};
