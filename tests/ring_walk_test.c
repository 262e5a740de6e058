/* SPDX-License-Identifier: MIT */
/*
 * The read-only ring walker (shoal_ring_walk_begin()/_next()) that the tools
 * use on live rings: every queued record in order, across the wrap point,
 * a consumer overtaking the walk, and garbage in the head, the tail and the
 * record headers, which must be reported as damage without a crash, a read
 * outside the ring or an endless walk. The ring lives in a heap block of
 * exactly its size, so the asan setup reports any stray read.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/ring.h>

#include "shm/ring_layout.h"
#include "tests/testutil.h"

#define WCAP 512u
/* Calls to shoal_ring_walk_next() a pass may take: one per 8 bytes, + end. */
#define MAX_CALLS (WCAP / 8 + 1)

/* A ring with a producer and a consumer attached, in an exact heap block. */
struct wring {
	struct shoal__ring *r;
	uint64_t len;
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
};

static void wring_open(struct wring *w)
{
	void *mem;

	w->len = shoal_ring_size(WCAP);
	assert_int_equal(posix_memalign(&mem, 128, w->len), 0);
	assert_int_equal(shoal_ring_init(mem, w->len, WCAP, 0), 0);
	w->r = mem;
	assert_int_equal(shoal_ring_prod_attach(&w->p, mem, w->len, NULL), 0);
	assert_int_equal(shoal_ring_cons_attach(&w->c, mem, w->len, NULL), 0);
}

/* Record i: `len` bytes, each (i * 7 + k) & 0xff, tagged 100 + i. */
static void put(struct wring *w, int i, uint32_t len)
{
	unsigned char buf[256];

	for (uint32_t k = 0; k < len; k++)
		buf[k] = (unsigned char)(i * 7 + (int)k);
	assert_int_equal(shoal_ring_enqueue(&w->p, buf, len, (uint16_t)(100 + i)), 0);
}

static void take(struct wring *w, int n)
{
	unsigned char buf[256];

	for (int i = 0; i < n; i++)
		assert_true(shoal_ring_dequeue(&w->c, buf, sizeof(buf), NULL) >= 0);
}

/* The header word of the record at data offset `off`, written as a peer would. */
static void poke_hdr(struct wring *w, uint32_t off, uint32_t len, uint16_t flags)
{
	uint64_t word = (uint64_t)len | ((uint64_t)flags << 48);

	memcpy((unsigned char *)w->r + SHOAL__RING_DATA_OFF + off, &word, sizeof(word));
}

/* What one pass found. */
struct pass {
	int ret;                        /* begin's error, or next's last return */
	bool begun;                     /* begin succeeded */
	int n;
	struct shoal_ring_walk walk;
	struct shoal_ring_walk_rec recs[MAX_CALLS];
	unsigned char bytes[MAX_CALLS][16];
	struct shoal_err err;
};

/* Walk one pass to its end or its first error, asserting that it ends. */
static void walk_pass(struct pass *ps, const void *mem, uint64_t len)
{
	unsigned calls = 0;

	memset(ps, 0, sizeof(*ps));
	ps->ret = shoal_ring_walk_begin(&ps->walk, mem, len, &ps->err);
	ps->begun = ps->ret == 0;
	while (ps->begun) {
		assert_true(++calls <= MAX_CALLS);
		ps->ret = shoal_ring_walk_next(&ps->walk, &ps->recs[ps->n], ps->bytes[ps->n],
					       sizeof(ps->bytes[0]), &ps->err);
		if (ps->ret <= 0)
			break;
		ps->n++;
	}
}

static void check_record(const struct pass *ps, int k, int i, uint32_t len)
{
	const struct shoal_ring_walk_rec *rec = &ps->recs[k];

	assert_int_equal(rec->len, len);
	assert_int_equal(rec->tag, 100 + i);
	assert_int_equal(rec->copied, len < sizeof(ps->bytes[0]) ? len : sizeof(ps->bytes[0]));
	for (uint32_t b = 0; b < rec->copied; b++)
		assert_int_equal(ps->bytes[k][b], (unsigned char)(i * 7 + (int)b));
}

static void ring_walk_returns_every_queued_record(void **state)
{
	static const uint32_t lens[] = { 5, 0, 1, 8, 100, 13 };
	struct wring w;
	struct pass ps;
	struct shoal_ring_stats st;

	(void)state;
	wring_open(&w);
	for (int i = 0; i < 6; i++)
		put(&w, i, lens[i]);
	take(&w, 1);
	walk_pass(&ps, w.r, w.len);
	assert_int_equal(ps.ret, 0);
	assert_int_equal(ps.n, 5);
	assert_int_equal(shoal_ring_stats(w.r, w.len, &st, NULL), 0);
	assert_int_equal(ps.walk.head, st.head);
	assert_int_equal(ps.walk.tail, st.tail);
	assert_int_equal(ps.walk.capacity, WCAP);
	assert_int_equal(ps.recs[0].index, st.head);
	for (int k = 0; k < 5; k++)
		check_record(&ps, k, k + 1, lens[k + 1]);
	/* At its end a pass stays there. */
	assert_int_equal(shoal_ring_walk_next(&ps.walk, &ps.recs[0], ps.bytes[0], 16, NULL), 0);
	free(w.r);
}

static void ring_walk_crosses_the_wrap_point(void **state)
{
	struct wring w;
	struct pass ps;
	struct shoal_ring_stats st;

	(void)state;
	wring_open(&w);
	/* Three records of 128 bytes: head and tail end at offset 384. */
	for (int i = 0; i < 3; i++)
		put(&w, i, 120);
	take(&w, 3);
	put(&w, 3, 40);    /* 384..432 */
	put(&w, 4, 150);   /* does not fit in the 80 bytes left: pad, then offset 0 */
	put(&w, 5, 3);
	walk_pass(&ps, w.r, w.len);
	assert_int_equal(ps.ret, 0);
	assert_int_equal(ps.n, 3);
	assert_int_equal(ps.recs[0].index, 384);
	assert_int_equal(ps.recs[1].index, WCAP);
	assert_int_equal(ps.recs[2].index, WCAP + 160);
	for (int k = 0; k < 3; k++)
		check_record(&ps, k, k + 3, k == 0 ? 40 : k == 1 ? 150 : 3);
	assert_int_equal(shoal_ring_check(w.r, w.len, &st, NULL), 3);
	free(w.r);
}

static void ring_walk_copies_no_more_than_asked(void **state)
{
	unsigned char buf[12];
	struct shoal_ring_walk rw;
	struct shoal_ring_walk_rec rec;
	struct wring w;

	(void)state;
	wring_open(&w);
	put(&w, 0, 100);
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(shoal_ring_walk_begin(&rw, w.r, w.len, NULL), 0);
	assert_int_equal(shoal_ring_walk_next(&rw, &rec, buf, 5, NULL), 1);
	assert_int_equal(rec.len, 100);
	assert_int_equal(rec.copied, 5);
	assert_int_equal(buf[4], 4);
	assert_int_equal(buf[5], 0xee);
	free(w.r);
}

/* A walk under way: three records of 24 bytes queued, the first returned. */
struct midwalk {
	struct wring w;
	struct shoal_ring_walk rw;
	struct shoal_ring_walk_rec rec;
	unsigned char buf[16];
	struct shoal_err err;
};

static int midwalk_next(struct midwalk *m)
{
	return shoal_ring_walk_next(&m->rw, &m->rec, m->buf, sizeof(m->buf), &m->err);
}

static void midwalk_start(struct midwalk *m)
{
	memset(m, 0, sizeof(*m));
	wring_open(&m->w);
	for (int i = 0; i < 3; i++)
		put(&m->w, i, 24);
	assert_int_equal(shoal_ring_walk_begin(&m->rw, m->w.r, m->w.len, NULL), 0);
	assert_int_equal(midwalk_next(m), 1);
	assert_int_equal(m->rec.tag, 100);
}

/* The consumer releases records under the walk: -EAGAIN, never a torn record. */
static void ring_walk_overtaken_by_the_consumer_starts_again(void **state)
{
	struct midwalk m;

	(void)state;
	midwalk_start(&m);
	take(&m.w, 2);
	assert_int_equal(midwalk_next(&m), -EAGAIN);
	assert_non_null(strstr(m.err.msg, "released"));
	assert_int_equal(midwalk_next(&m), -EAGAIN);
	assert_int_equal(shoal_ring_walk_begin(&m.rw, m.w.r, m.w.len, NULL), 0);
	assert_int_equal(midwalk_next(&m), 1);
	assert_int_equal(m.rec.tag, 102);
	assert_int_equal(midwalk_next(&m), 0);
	free(m.w.r);
}

/* Garbage written into the head while a walk is under way: the walk stops,
 * and the next pass reports the damage. */
static void ring_walk_head_garbled_mid_walk_is_damage_next_pass(void **state)
{
	struct midwalk m;

	(void)state;
	midwalk_start(&m);
	atomic_store(&m.w.r->head, 0x7777777u);
	assert_int_equal(midwalk_next(&m), -EAGAIN);
	assert_int_equal(shoal_ring_walk_begin(&m.rw, m.w.r, m.w.len, &m.err), -EUCLEAN);
	assert_non_null(strstr(m.err.msg, "head"));
	free(m.w.r);
}

/* Garbage a peer writes into a ring holding records of 16 and 4 bytes at 0 and 24. */
struct garbage_case {
	const char *name;
	void (*write)(struct wring *w);
	const char *reason;   /* a phrase the error message must contain */
};

static void head_misaligned(struct wring *w) { atomic_store(&w->r->head, 3); }
static void head_past_tail(struct wring *w) { atomic_store(&w->r->head, 48); }
static void tail_past_capacity(struct wring *w) { atomic_store(&w->r->tail, WCAP + 8); }
static void tail_huge(struct wring *w) { atomic_store(&w->r->tail, 0xfffffff8u); }
static void len_huge(struct wring *w) { poke_hdr(w, 0, 0xfffffff0u, 0); }
static void len_past_tail(struct wring *w) { poke_hdr(w, 24, 200, 0); }
static void flags_garbage(struct wring *w) { poke_hdr(w, 24, 4, 0x8001); }
static void pad_wrong_len(struct wring *w) { poke_hdr(w, 0, 16, SHOAL__REC_PAD); }
static void len_past_end(struct wring *w)
{
	atomic_store(&w->r->head, WCAP - 16);
	atomic_store(&w->r->tail, WCAP + 32);
	poke_hdr(w, WCAP - 16, 40, 0);
}
static void pad_then_nothing(struct wring *w)
{
	atomic_store(&w->r->head, WCAP - 32);
	atomic_store(&w->r->tail, WCAP);
	poke_hdr(w, WCAP - 32, 32 - SHOAL_RING_REC_HDR, SHOAL__REC_PAD);
}
static void capacity_past_region(struct wring *w) { w->r->capacity = 1u << 20; }

static const struct garbage_case garbage_cases[] = {
	{ "head_misaligned", head_misaligned, "aligned" },
	{ "head_past_tail", head_past_tail, "more than its capacity" },
	{ "tail_past_capacity", tail_past_capacity, "more than its capacity" },
	{ "tail_huge", tail_huge, "more than its capacity" },
	{ "len_huge", len_huge, "largest payload" },
	{ "len_past_tail", len_past_tail, "past tail" },
	{ "flags_garbage", flags_garbage, "unknown flags" },
	{ "pad_wrong_len", pad_wrong_len, "to the end" },
	{ "len_past_end", len_past_end, "past the end" },
	{ "pad_then_nothing", pad_then_nothing, "not followed" },
	{ "capacity_past_region", capacity_past_region, "runs past" },
};

static void ring_walk_reports_garbage_as_damage(void **state)
{
	const struct garbage_case *gc = *state;
	struct wring w;
	struct pass ps;

	wring_open(&w);
	put(&w, 0, 16);
	put(&w, 1, 4);
	gc->write(&w);
	walk_pass(&ps, w.r, w.len);
	assert_int_equal(ps.ret, -EUCLEAN);
	assert_non_null(strstr(ps.err.msg, gc->reason));
	/* The error is sticky and leaves the reason alone. */
	if (ps.begun)
		assert_int_equal(shoal_ring_walk_next(&ps.walk, &ps.recs[0], ps.bytes[0], 16, NULL),
				 -EUCLEAN);
	free(w.r);
}

static void ring_walk_refuses_a_region_shorter_than_its_control_block(void **state)
{
	struct shoal_ring_walk rw;
	struct wring w;

	(void)state;
	wring_open(&w);
	assert_int_equal(shoal_ring_walk_begin(&rw, w.r, SHOAL__RING_DATA_OFF - 8, NULL), -EUCLEAN);
	assert_int_equal(shoal_ring_walk_begin(&rw, NULL, w.len, NULL), -EUCLEAN);
	free(w.r);
}

/*
 * Random garbage in the indices and the record headers, many rounds: every
 * pass ends (walk_pass() bounds it), and every record it returns lies
 * between the pass's head and tail with a length a ring may hold.
 */
static void ring_walk_random_garbage_ends_inside(void **state)
{
	uint64_t seed = 0x3a1c, rounds = test_scale(20000);

	(void)state;
	for (uint64_t i = 0; i < rounds; i++) {
		struct wring w;
		struct pass ps;

		wring_open(&w);
		for (uint64_t k = test_rand(&seed) % 20; k > 0; k--)
			(void)shoal_ring_enqueue(&w.p, "garbage!", (uint32_t)(test_rand(&seed) % 9), 0);
		for (uint64_t k = test_rand(&seed) % 5; k > 0; k--) {
			uint64_t v = test_rand(&seed);
			uint32_t off = (uint32_t)(test_rand(&seed) % (WCAP / 8)) * 8;

			switch (test_rand(&seed) % 4) {
			case 0: poke_hdr(&w, off, (uint32_t)v, (uint16_t)(v >> 48)); break;
			case 1: atomic_store(&w.r->tail, (uint32_t)v & ~7u); break;
			case 2: atomic_store(&w.r->head, (uint32_t)v); break;
			default: poke_hdr(&w, off, (uint32_t)v % 64, 0); break;
			}
		}
		walk_pass(&ps, w.r, w.len);
		assert_true(ps.ret == 0 || ps.ret == -EUCLEAN);
		for (int k = 0; k < ps.n; k++) {
			assert_true(ps.recs[k].index - ps.walk.head < ps.walk.tail - ps.walk.head);
			assert_true(ps.recs[k].len <= WCAP / 2 - SHOAL_RING_REC_HDR);
			assert_true(ps.recs[k].copied <= ps.recs[k].len);
		}
		free(w.r);
	}
}

#define N_GARBAGE (sizeof(garbage_cases) / sizeof(garbage_cases[0]))

int main(void)
{
	struct CMUnitTest table[N_GARBAGE];
	char names[N_GARBAGE][80];
	const struct CMUnitTest fixed[] = {
		cmocka_unit_test(ring_walk_returns_every_queued_record),
		cmocka_unit_test(ring_walk_crosses_the_wrap_point),
		cmocka_unit_test(ring_walk_copies_no_more_than_asked),
		cmocka_unit_test(ring_walk_overtaken_by_the_consumer_starts_again),
		cmocka_unit_test(ring_walk_head_garbled_mid_walk_is_damage_next_pass),
		cmocka_unit_test(ring_walk_refuses_a_region_shorter_than_its_control_block),
		cmocka_unit_test(ring_walk_random_garbage_ends_inside),
	};
	int failed;

	for (size_t i = 0; i < N_GARBAGE; i++) {
		snprintf(names[i], sizeof(names[i]), "ring_walk_reports_garbage_as_damage/%s",
			 garbage_cases[i].name);
		table[i] = (struct CMUnitTest){ names[i], ring_walk_reports_garbage_as_damage,
						NULL, NULL, (void *)&garbage_cases[i] };
	}
	failed = cmocka_run_group_tests_name("ring_walk", fixed, NULL, NULL);
	failed += _cmocka_run_group_tests("ring_walk_garbage", table, N_GARBAGE, NULL, NULL);
	return failed ? 1 : 0;
}
