/* SPDX-License-Identifier: MIT */
/*
 * Shoal's rings as contenders.
 *
 * "shoal": throughput (a batch of one: reserve, commit; peek, release; a
 * batch: a run claimed and each record written whole, header first, one
 * commit; peek_burst, one release) and ping-pong, busy polling on both
 * sides like rte_ring; the wake sample (consumer asleep on the doorbell:
 * prepare, look again, wait) and the spin sweep
 * (shoal_doorbell_poll_wait() at a given spin budget).
 * "shoal-db": the same throughput with shoal_doorbell_notify() after every
 * commit, as a producer must when its consumer may sleep; the consumer still
 * busy polls, so the difference is the cost of the notify itself.
 *
 * Side A produces on ring[0]; side B answers on ring[1] (ping-pong) and
 * sleeps on the doorbell (wake, spin).
 */
#include <errno.h>
#include <stdlib.h>

#include <shoal/doorbell.h>
#include <shoal/ring.h>

#include "bench/bench.h"

static int shoal_prepare(const struct bench_mem *m, const struct bench_params *p,
			 struct bench_fds *fds)
{
	(void)p;
	(void)fds;
	/* A fresh ring per sample; no side is alive, as shoal_ring_init() requires. */
	for (int i = 0; i < 2; i++) {
		int ret = shoal_ring_init(m->ring[i], m->ring_len, BENCH_BUF_BYTES, 0);

		if (ret < 0)
			return ret;
	}
	shoal_doorbell_init(m->db);
	return 0;
}

static int prod_open(struct bench_side *s, int dir, struct shoal_ring_prod *p)
{
	struct shoal_err err = { "" };
	int ret = shoal_ring_prod_attach(p, s->mem.ring[dir], s->mem.ring_len, &err);

	return ret < 0 ? bench_fail(s, ret, "producer attach: %s", err.msg) : 0;
}

static int cons_open(struct bench_side *s, int dir, struct shoal_ring_cons *c)
{
	struct shoal_err err = { "" };
	int ret = shoal_ring_cons_attach(c, s->mem.ring[dir], s->mem.ring_len, &err);

	return ret < 0 ? bench_fail(s, ret, "consumer attach: %s", err.msg) : 0;
}

/* Reserve one record, spinning while the ring is full. NULL: corrupted. */
static inline void *reserve_spin(struct shoal_ring_prod *p, uint32_t len)
{
	void *dst;

	while ((dst = shoal_ring_reserve(p, len, 0)) == NULL) {
		if (shoal_ring_prod_error(p))
			return NULL;
		bench_relax();
	}
	return dst;
}

/* Peek one record, spinning while the ring is empty. False: corrupted. */
static inline bool peek_spin(struct shoal_ring_cons *c, struct shoal_rec *rec)
{
	while (!shoal_ring_peek(c, rec)) {
		if (shoal_ring_cons_error(c))
			return false;
		bench_relax();
	}
	return true;
}

static int check_rec(struct bench_side *s, const struct shoal_rec *rec, uint64_t expect)
{
	int ret = rec->len == s->p->payload ?
		  bench_msg_check(rec->data, rec->len, expect, &s->sink) : -EBADMSG;

	return ret < 0 ? bench_fail(s, ret, "message %llu: bad length or content",
				    (unsigned long long)expect) : ret;
}

/* ---- throughput ---- */

/*
 * A batch of one, as a sender of single messages writes it: reserve, write,
 * commit. The loop of a batch (below) run with a batch of one was 1.3-1.5x
 * slower than this one, with the same calls (bench/SUITE.md, "A batch of
 * one written as one").
 */
static inline __attribute__((always_inline)) int send_ones(struct bench_side *s,
							  struct shoal_ring_prod *p,
							  const unsigned char *tmpl, bool notify)
{
	const uint32_t size = s->p->payload;
	uint64_t seq = 0;
	bool last = false;

	while (!last) {
		void *dst;

		last = bench_time_up(s, seq);
		dst = reserve_spin(p, size);
		if (dst == NULL)
			return bench_fail(s, -EUCLEAN, "reserve: ring corrupted");
		bench_copy(dst, tmpl, size);
		bench_msg_stamp(dst, size, seq++ | (last ? BENCH_STOP : 0));
		shoal_ring_commit(p);
		if (notify)
			shoal_doorbell_notify(s->mem.db);
	}
	s->res->msgs = seq;
	return 0;
}

/* A batch: a run claimed, each record written whole before the next
 * (shoal_ring_claim_run()), one commit. */
static inline __attribute__((always_inline)) int send_batches(struct bench_side *s,
							     struct shoal_ring_prod *p,
							     const unsigned char *tmpl, bool notify)
{
	const uint32_t size = s->p->payload, batch = s->p->batch;
	uint64_t seq = 0;
	bool last = false;

	while (!last) {
		last = bench_time_up(s, seq);
		for (uint32_t i = 0; i < batch;) {
			void *first;
			unsigned k = shoal_ring_claim_run(p, size, 0, batch - i, &first);
			unsigned char *dst = first;

			if (k == 0) {
				if (shoal_ring_prod_error(p))
					return bench_fail(s, -EUCLEAN, "reserve: ring corrupted");
				bench_relax();
				continue;
			}
			for (; k > 0; k--, i++, seq++, dst += shoal_ring_stride(size)) {
				shoal_ring_put_hdr(dst, shoal_ring_run_hdr(size, 0));
				bench_copy(dst, tmpl, size);
				bench_msg_stamp(dst, size,
						seq | (last && i + 1 == batch ? BENCH_STOP : 0));
			}
		}
		shoal_ring_commit(p);
		if (notify)
			shoal_doorbell_notify(s->mem.db);
	}
	s->res->msgs = seq;
	return 0;
}

/* Always inlined so that `notify`, a constant in each caller, costs nothing
 * in the "shoal" row. */
static inline __attribute__((always_inline)) int tput_tx(struct bench_side *s, bool notify)
{
	_Alignas(64) unsigned char tmpl[BENCH_MAX_PAYLOAD];
	struct shoal_ring_prod p;
	int ret = prod_open(s, 0, &p);

	if (ret < 0)
		return ret;
	bench_msg_fill(tmpl, s->p->payload);
	bench_side_ready(s);
	return s->p->batch == 1 ? send_ones(s, &p, tmpl, notify) :
				  send_batches(s, &p, tmpl, notify);
}

static int shoal_tput_tx(struct bench_side *s)
{
	return tput_tx(s, false);
}

static int shoal_db_tput_tx(struct bench_side *s)
{
	return tput_tx(s, true);
}

/* A batch of one as a receiver of single messages takes it: peek, check,
 * release. */
static int take_ones(struct bench_side *s, struct shoal_ring_cons *c, uint64_t *taken)
{
	struct shoal_rec rec;
	uint64_t expect = 0;
	int ret = 0;

	do {
		if (!shoal_ring_peek(c, &rec)) {
			if (shoal_ring_cons_error(c))
				return bench_fail(s, -EUCLEAN, "peek: ring corrupted");
			bench_relax();
			continue;
		}
		ret = check_rec(s, &rec, expect++);
		shoal_ring_release(c);
	} while (ret == 0);
	*taken = expect;
	return ret;
}

/* A batch: peek_burst, check each, one release. */
static int take_batches(struct bench_side *s, struct shoal_ring_cons *c, uint64_t *taken)
{
	struct shoal_rec recs[BENCH_MAX_BATCH];
	uint64_t expect = 0;
	int ret = 0;

	do {
		unsigned n = shoal_ring_peek_burst(c, recs, s->p->batch);

		if (n == 0) {
			if (shoal_ring_cons_error(c))
				return bench_fail(s, -EUCLEAN, "peek: ring corrupted");
			bench_relax();
			continue;
		}
		/* The stop message is the producer's last: the last of its batch. */
		for (unsigned i = 0; i < n && ret >= 0; i++)
			ret = check_rec(s, &recs[i], expect++);
		shoal_ring_release(c);
	} while (ret == 0);
	*taken = expect;
	return ret;
}

static int shoal_tput_rx(struct bench_side *s)
{
	struct shoal_ring_cons c;
	uint64_t taken = 0;
	int ret = cons_open(s, 0, &c);

	if (ret < 0)
		return ret;
	bench_side_ready(s);
	ret = s->p->batch == 1 ? take_ones(s, &c, &taken) : take_batches(s, &c, &taken);
	s->res->t_end = shoal__now_ns();
	s->res->msgs = taken;
	return ret < 0 ? ret : 0;
}

/* ---- ping-pong ---- */

static int shoal_ping(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char tmpl[BENCH_MAX_PAYLOAD];
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	struct shoal_rec rec;
	struct bench_hist *h;
	uint64_t seq, prev;
	bool last = false;
	int ret = prod_open(s, 0, &p);

	if (ret == 0)
		ret = cons_open(s, 1, &c);
	if (ret < 0)
		return ret;
	h = bench_ping_start(s, tmpl);
	if (h == NULL)
		return s->res->err;
	prev = s->res->t_start;
	for (seq = 0; !last && ret == 0; seq++) {
		void *dst = reserve_spin(&p, size);

		if (dst == NULL) {
			ret = bench_fail(s, -EUCLEAN, "reserve: ring corrupted");
			break;
		}
		last = prev >= s->deadline;
		bench_copy(dst, tmpl, size);
		bench_msg_stamp(dst, size, seq | (last ? BENCH_STOP : 0));
		shoal_ring_commit(&p);
		if (!peek_spin(&c, &rec)) {
			ret = bench_fail(s, -EUCLEAN, "peek: ring corrupted");
			break;
		}
		ret = check_rec(s, &rec, seq);
		shoal_ring_release(&c);
		bench_ping_lap(h, &prev);
	}
	return bench_ping_end(s, h, seq, prev, ret);
}

static int shoal_pong(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	struct shoal_rec rec;
	uint64_t expect = 0;
	int ret = cons_open(s, 0, &c);

	if (ret == 0)
		ret = prod_open(s, 1, &p);
	if (ret < 0)
		return ret;
	bench_side_ready(s);
	do {
		void *dst;

		if (!peek_spin(&c, &rec))
			return bench_fail(s, -EUCLEAN, "peek: ring corrupted");
		ret = check_rec(s, &rec, expect++);
		dst = reserve_spin(&p, size);
		if (dst == NULL)
			return bench_fail(s, -EUCLEAN, "reserve: ring corrupted");
		/* Answer first, release after: the reply is what side A waits for. */
		bench_copy(dst, rec.data, size);
		shoal_ring_commit(&p);
		shoal_ring_release(&c);
	} while (ret == 0);
	return ret < 0 ? ret : 0;
}

/* ---- waking a sleeping consumer ---- */

/* Side A of wake and spin: one message per gap, stamped with its send
 * time; notify after each commit. Also times commit + notify whenever the
 * notify had to make the FUTEX_WAKE call. */
static int shoal_wake_tx(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char tmpl[BENCH_MAX_PAYLOAD];
	struct shoal_doorbell *db = s->mem.db;
	struct shoal_ring_prod p;
	struct bench_hist *cost;
	uint64_t seq, prev;
	bool last = false;
	int ret = prod_open(s, 0, &p);

	if (ret < 0)
		return ret;
	cost = bench_hist_new();
	if (cost == NULL)
		return bench_fail(s, -ENOMEM, "no memory for the histogram");
	bench_msg_fill(tmpl, size);
	bench_side_ready(s);
	prev = s->res->t_start;
	for (seq = 0; !last; seq++) {
		uint64_t t = bench_wait_gap(prev, s->p->gap_ns), wakes;
		void *dst = reserve_spin(&p, size);

		if (dst == NULL) {
			ret = bench_fail(s, -EUCLEAN, "reserve: ring corrupted");
			break;
		}
		last = t >= s->deadline;
		bench_copy(dst, tmpl, size);
		bench_msg_stamp(dst, size, seq | (last ? BENCH_STOP : 0));
		bench_msg_set_time(dst, t);
		shoal_ring_commit(&p);
		/* Relaxed: a counter only producers change; this is the only one. */
		wakes = atomic_load_explicit(&db->wakes, memory_order_relaxed);
		shoal_doorbell_notify(db);
		prev = shoal__now_ns();
		if (atomic_load_explicit(&db->wakes, memory_order_relaxed) != wakes)
			bench_hist_add(cost, prev - t);
	}
	s->res->msgs = seq;
	bench_hist_pct(cost, &s->res->wake_cost);
	free(cost);
	return ret;
}

static bool ring_ready(void *arg)
{
	return !shoal_ring_empty(arg);
}

/* The idle protocol written out (the wake sample): announce, look once
 * more, sleep. Returns 0 (woken, timed out or cancelled) or -EINTR. */
static int sleep_once(struct bench_side *s, struct shoal_ring_cons *c)
{
	int ret;

	shoal_doorbell_prepare(s->mem.db);
	if (!shoal_ring_empty(c)) {
		shoal_doorbell_cancel(s->mem.db);
		return 0;
	}
	ret = shoal_doorbell_wait(s->mem.db, BENCH_WAIT_TIMEOUT_NS);
	return ret == -ETIMEDOUT ? 0 : ret;
}

/* Take every message that has arrived and time it from its send stamp.
 * Returns 0, 1 after the stop message, or a negative errno. */
static int drain(struct bench_side *s, struct shoal_ring_cons *c, struct bench_hist *h,
		 uint64_t *expect)
{
	struct shoal_rec rec;
	int ret = 0;

	while (ret == 0 && shoal_ring_peek(c, &rec)) {
		uint64_t now = shoal__now_ns();

		ret = check_rec(s, &rec, (*expect)++);
		bench_lat_add(s, h, now - bench_msg_time(rec.data));
		shoal_ring_release(c);
	}
	if (ret == 0 && shoal_ring_cons_error(c))
		ret = bench_fail(s, -EUCLEAN, "peek: ring corrupted");
	return ret;
}

/* Side B of wake (poll_wait == false) and spin (true). */
static int sleepy_rx(struct bench_side *s, bool poll_wait)
{
	struct shoal_doorbell *db = s->mem.db;
	struct shoal_ring_cons c;
	struct bench_hist *h;
	uint64_t expect = 0, cpu0, sleeps0;
	int ret = cons_open(s, 0, &c);

	if (ret < 0)
		return ret;
	h = bench_hist_new();
	if (h == NULL)
		return bench_fail(s, -ENOMEM, "no memory for the histogram");
	bench_side_ready(s);
	cpu0 = bench_cpu_ns();
	/* Relaxed: the doorbell's counter, written only by this consumer. */
	sleeps0 = atomic_load_explicit(&db->sleeps, memory_order_relaxed);
	while (ret == 0) {
		ret = poll_wait ? shoal_doorbell_poll_wait(db, s->p->spin_ns, ring_ready, &c,
							   BENCH_WAIT_TIMEOUT_NS)
				: sleep_once(s, &c);
		if (ret == -ETIMEDOUT)
			ret = 0;
		if (ret == 0)
			ret = drain(s, &c, h, &expect);
	}
	s->res->cpu_ns = bench_cpu_ns() - cpu0;
	s->res->sleeps = atomic_load_explicit(&db->sleeps, memory_order_relaxed) - sleeps0;
	s->res->msgs = expect;
	s->res->t_end = shoal__now_ns();
	bench_hist_pct(h, &s->res->lat);
	free(h);
	return ret < 0 ? ret : 0;
}

static int shoal_wake_rx(struct bench_side *s)
{
	return sleepy_rx(s, false);
}

static int shoal_spin_rx(struct bench_side *s)
{
	return sleepy_rx(s, true);
}

const struct bench_contender bench_shoal = {
	.name = "shoal",
	.what = "Shoal SPSC record ring: batch 1 reserve+commit / peek+release; a batch "
		"claim_run+commit / peek_burst+release, busy poll; wake: doorbell prepare/wait; "
		"spin: doorbell poll_wait",
	.prepare = shoal_prepare,
	.role = {
		[BENCH_TPUT] = { shoal_tput_tx, shoal_tput_rx },
		[BENCH_PINGPONG] = { shoal_ping, shoal_pong },
		[BENCH_WAKE] = { shoal_wake_tx, shoal_wake_rx },
		[BENCH_SPIN] = { shoal_wake_tx, shoal_spin_rx },
	},
};

const struct bench_contender bench_shoal_db = {
	.name = "shoal-db",
	.what = "as shoal, plus shoal_doorbell_notify() after every commit (consumer still "
		"busy polls: the cost of the notify's fence)",
	.prepare = shoal_prepare,
	.role = {
		[BENCH_TPUT] = { shoal_db_tput_tx, shoal_tput_rx },
	},
};
