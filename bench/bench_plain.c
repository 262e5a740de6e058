/* SPDX-License-Identifier: MIT */
/*
 * The plain fixed-slot SPSC ring (bench/plain_ring.h) as a contender: the
 * limit of a shared-memory ring between two pinned processes on this
 * machine, which Shoal's ring is measured against in the same runs.
 *
 * Slots are the payload's size, BENCH_BUF_BYTES of them per direction as
 * every contender has. Producer: waits for room for the whole batch,
 * writes the messages in place (template copy + stamp, as Shoal's producer
 * does), publishes the batch with one store. Consumer: takes what has
 * arrived, up to a batch, checks it as every contender does, releases it
 * with one store. Ping-pong: one message each way, published and released
 * one at a time.
 *
 * Side A produces on plain[0]; side B answers on plain[1].
 *
 * `plain-rec` is the same ring with slots of a Shoal record's size
 * (shoal_ring_stride(): an 8-byte header word, then the payload, rounded
 * to 8 bytes), the header written and checked with every message: what
 * the record format alone costs a ring with nothing else of Shoal's. Its
 * slot count is the largest power of two that fits the same 256 KiB.
 */
#include <errno.h>
#include <string.h>

#include <shoal/ring.h>

#include "bench/bench.h"
#include "bench/plain_ring.h"

static int prepare_slots(const struct bench_mem *m, uint32_t slot)
{
	uint32_t count = 1;

	while (2 * count * slot <= BENCH_BUF_BYTES)
		count *= 2;
	/* A fresh ring per sample; no side is alive, as plain_ring_init() requires. */
	for (int i = 0; i < 2; i++) {
		int ret = plain_ring_init(m->plain[i], m->plain_len, slot, count);

		if (ret < 0)
			return ret;
	}
	return 0;
}

static int plain_prepare(const struct bench_mem *m, const struct bench_params *p,
			 struct bench_fds *fds)
{
	(void)fds;
	return prepare_slots(m, p->payload);
}

static int plain_rec_prepare(const struct bench_mem *m, const struct bench_params *p,
			     struct bench_fds *fds)
{
	(void)fds;
	return prepare_slots(m, shoal_ring_stride(p->payload));
}

/* Where a message goes in slot `slot` of geometry g: at its start in a
 * payload-sized slot, else after the header word, which this writes. */
static inline void *msg_put(const struct plain_geom *g, void *slot, uint32_t payload)
{
	uint64_t hdr = payload;

	if (g->size == payload)
		return slot;
	memcpy(slot, &hdr, sizeof(hdr));
	return (unsigned char *)slot + sizeof(hdr);
}

static int prod_open(struct bench_side *s, int dir, struct plain_prod *p)
{
	int ret = plain_prod_attach(p, s->mem.plain[dir], s->mem.plain_len);

	return ret < 0 ? bench_fail(s, ret, "plain ring %d: bad geometry", dir) : 0;
}

static int cons_open(struct bench_side *s, int dir, struct plain_cons *c)
{
	int ret = plain_cons_attach(c, s->mem.plain[dir], s->mem.plain_len);

	return ret < 0 ? bench_fail(s, ret, "plain ring %d: bad geometry", dir) : 0;
}

/* Check n slots from the consumer's tail. Returns 0, 1 after the stop
 * message, or -EBADMSG. */
static int check_slots(struct bench_side *s, const struct plain_cons *c, uint32_t n,
		       uint64_t *expect)
{
	int ret = 0;

	for (uint32_t k = 0; k < n && ret == 0; k++) {
		const unsigned char *m = plain_cons_slot(c, k);
		uint64_t hdr;

		if (c->g.size != s->p->payload) {
			memcpy(&hdr, m, sizeof(hdr));
			if (hdr != s->p->payload)
				return bench_fail(s, -EBADMSG, "message %llu: bad header",
						  (unsigned long long)*expect);
			m += sizeof(hdr);
		}
		ret = bench_msg_check(m, s->p->payload, (*expect)++, &s->sink);
	}
	return ret < 0 ? bench_fail(s, ret, "message %llu: bad content",
				    (unsigned long long)*expect - 1) : ret;
}

/* Wait until the producer may write `n` slots. */
static inline void room_spin(struct plain_prod *p, uint32_t n)
{
	while (plain_prod_room(p, n) < n)
		bench_relax();
}

/* Wait for at least one slot; returns how many, up to `want`. */
static inline uint32_t avail_spin(struct plain_cons *c, uint32_t want)
{
	uint32_t n;

	while ((n = plain_cons_avail(c, want)) == 0)
		bench_relax();
	return n;
}

/* ---- throughput ---- */

static int plain_tput_tx(struct bench_side *s)
{
	const uint32_t size = s->p->payload, batch = s->p->batch;
	_Alignas(64) unsigned char tmpl[BENCH_MAX_PAYLOAD];
	struct plain_prod p;
	uint64_t seq = 0;
	bool last = false;
	int ret = prod_open(s, 0, &p);

	if (ret < 0)
		return ret;
	bench_msg_fill(tmpl, size);
	bench_side_ready(s);
	while (!last) {
		last = bench_time_up(s, seq);
		room_spin(&p, batch);
		for (uint32_t k = 0; k < batch; k++, seq++) {
			void *dst = msg_put(&p.g, plain_prod_slot(&p, k), size);

			bench_copy(dst, tmpl, size);
			bench_msg_stamp(dst, size, seq | (last && k + 1 == batch ? BENCH_STOP : 0));
		}
		plain_prod_publish(&p, batch);
	}
	s->res->msgs = seq;
	return 0;
}

static int plain_tput_rx(struct bench_side *s)
{
	struct plain_cons c;
	uint64_t expect = 0;
	int ret = cons_open(s, 0, &c);

	if (ret < 0)
		return ret;
	bench_side_ready(s);
	while (ret == 0) {
		uint32_t n = avail_spin(&c, s->p->batch);

		ret = check_slots(s, &c, n, &expect);
		plain_cons_release(&c, n);
	}
	s->res->t_end = shoal__now_ns();
	s->res->msgs = expect;
	return ret < 0 ? ret : 0;
}

/* ---- ping-pong ---- */

/* A ping-pong side's two rings: it reads ring `in` and answers on the other. */
static int pair_open(struct bench_side *s, int in, struct plain_cons *c, struct plain_prod *p)
{
	int ret = cons_open(s, in, c);

	return ret < 0 ? ret : prod_open(s, 1 - in, p);
}

static int plain_ping(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char tmpl[BENCH_MAX_PAYLOAD];
	struct plain_prod p;
	struct plain_cons c;
	struct bench_hist *h;
	uint64_t seq, prev, expect;
	bool last = false;
	int ret = pair_open(s, 1, &c, &p);

	if (ret < 0)
		return ret;
	h = bench_ping_start(s, tmpl);
	if (h == NULL)
		return s->res->err;
	prev = s->res->t_start;
	for (seq = 0; !last && ret == 0; seq++) {
		void *dst;

		last = prev >= s->deadline;
		room_spin(&p, 1);
		dst = msg_put(&p.g, plain_prod_slot(&p, 0), size);
		bench_copy(dst, tmpl, size);
		bench_msg_stamp(dst, size, seq | (last ? BENCH_STOP : 0));
		plain_prod_publish(&p, 1);
		avail_spin(&c, 1);
		expect = seq;
		ret = check_slots(s, &c, 1, &expect);
		plain_cons_release(&c, 1);
		bench_ping_lap(h, &prev);
	}
	return bench_ping_end(s, h, seq, prev, ret);
}

static int plain_pong(struct bench_side *s)
{
	struct plain_cons c;
	struct plain_prod p;
	uint64_t expect = 0;
	int ret = pair_open(s, 0, &c, &p);

	if (ret < 0)
		return ret;
	bench_side_ready(s);
	while (ret == 0) {
		avail_spin(&c, 1);
		ret = check_slots(s, &c, 1, &expect);
		room_spin(&p, 1);
		/* Answer first, release after: the reply is what side A waits for. */
		bench_copy(plain_prod_slot(&p, 0), plain_cons_slot(&c, 0), p.g.size);
		plain_prod_publish(&p, 1);
		plain_cons_release(&c, 1);
	}
	return ret < 0 ? ret : 0;
}

const struct bench_contender bench_plain = {
	.name = "plain",
	.what = "the limit: a plain fixed-slot SPSC ring written for this benchmark "
		"(bench/plain_ring.h): slots of the payload's size, head and tail on their own "
		"lines, each side caching the other's index, one release store per batch; "
		"busy poll",
	.prepare = plain_prepare,
	.role = {
		[BENCH_TPUT] = { plain_tput_tx, plain_tput_rx },
		[BENCH_PINGPONG] = { plain_ping, plain_pong },
	},
};

const struct bench_contender bench_plain_rec = {
	.name = "plain-rec",
	.what = "the plain ring with slots of a Shoal record's size (an 8-byte header word "
		"written and checked, then the payload): what the record format alone costs",
	.prepare = plain_rec_prepare,
	.role = {
		[BENCH_TPUT] = { plain_tput_tx, plain_tput_rx },
		[BENCH_PINGPONG] = { plain_ping, plain_pong },
	},
};
