/* SPDX-License-Identifier: MIT */
/*
 * Ring invariants, single process: one body per behaviour, run over a table
 * of variants (capacity x record length x starting offset), so that every
 * record size meets the wrap point at every 8-byte offset.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/ring.h>

#include "shm/ring_layout.h"
#include "tests/testutil.h"

struct variant {
	uint32_t cap;
	uint32_t len;    /* UINT32_MAX: the largest payload */
	uint32_t start;  /* byte offset of head and tail before the case runs */
};

struct fixture {
	void *mem;
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	uint32_t cap;
	uint32_t len;
};

static void fill_pattern(unsigned char *buf, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(seed * 31 + i * 7 + 1);
}

static int check_pattern(const unsigned char *buf, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (buf[i] != (unsigned char)(seed * 31 + i * 7 + 1))
			return 0;
	return 1;
}

static struct fixture *fixture_new(uint32_t cap)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(posix_memalign(&f->mem, 128, shoal_ring_size(cap)), 0);
	assert_int_equal(shoal_ring_init(f->mem, shoal_ring_size(cap), cap, 0), 0);
	assert_int_equal(shoal_ring_prod_attach(&f->p, f->mem, shoal_ring_size(cap), NULL), 0);
	assert_int_equal(shoal_ring_cons_attach(&f->c, f->mem, shoal_ring_size(cap), NULL), 0);
	f->cap = cap;
	return f;
}

static void fixture_free(struct fixture *f)
{
	free(f->mem);
	free(f);
}

/* Move head and tail to `start` with one filler record that is consumed. */
static void advance_to(struct fixture *f, uint32_t start)
{
	struct shoal_rec r;

	if (start == 0)
		return;
	assert_non_null(shoal_ring_reserve(&f->p, start - SHOAL_RING_REC_HDR, 0));
	shoal_ring_commit(&f->p);
	assert_true(shoal_ring_peek(&f->c, &r));
	shoal_ring_release(&f->c);
	assert_true(shoal_ring_empty(&f->c));
}

static int setup_variant(void **state)
{
	const struct variant *v = *state;
	struct fixture *f = fixture_new(v->cap);

	f->len = v->len == UINT32_MAX ? v->cap / 2 - SHOAL_RING_REC_HDR : v->len;
	/* A filler record can hold at most cap/2; two fillers reach the rest. */
	if (v->start > v->cap / 2) {
		advance_to(f, v->cap / 2);
		advance_to(f, v->start - v->cap / 2);
	} else {
		advance_to(f, v->start);
	}
	*state = f;
	return 0;
}

static int teardown_variant(void **state)
{
	fixture_free(*state);
	return 0;
}

/* Fill until full, check every refusal form, drain, check every byte. */
static void ring_fill_to_full_then_drain_in_order(void **state)
{
	struct fixture *f = *state;
	unsigned char buf[8192];
	struct shoal_rec rec, recs[2];
	uint32_t n = 0;
	void *dst;

	assert_false(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(shoal_ring_dequeue(&f->c, buf, sizeof(buf), NULL), -EAGAIN);
	while ((dst = shoal_ring_reserve(&f->p, f->len, (uint16_t)n)) != NULL) {
		fill_pattern(dst, f->len, n);
		shoal_ring_commit(&f->p);
		n++;
		assert_true(n <= f->cap / 8);
	}
	assert_true(n >= 1);   /* an empty ring always takes one record */
	assert_int_equal(shoal_ring_prod_error(&f->p), 0);
	fill_pattern(buf, f->len, 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, buf, f->len, 0), -EAGAIN);
	recs[0] = (struct shoal_rec){ .data = buf, .len = f->len };
	recs[1] = recs[0];
	assert_int_equal(shoal_ring_enqueue_burst(&f->p, recs, 2), 0);
	assert_int_equal(shoal_ring_enqueue_bulk(&f->p, recs, 2), 0);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(shoal_ring_peek(&f->c, &rec));
		assert_int_equal(rec.len, f->len);
		assert_int_equal(rec.tag, (uint16_t)i);
		assert_true(check_pattern(rec.data, rec.len, i));
		shoal_ring_release(&f->c);
	}
	assert_false(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(shoal_ring_cons_error(&f->c), 0);
	assert_true(shoal_ring_empty(&f->c));
}

/* A record that does not fit before the end wraps to offset 0 via a pad. */
static void ring_record_wraps_through_pad(void **state)
{
	struct fixture *f = *state;
	unsigned char buf[8192];
	struct shoal_rec rec;

	for (uint32_t i = 0; i < 3; i++) {
		fill_pattern(buf, f->len, 100 + i);
		assert_int_equal(shoal_ring_enqueue(&f->p, buf, f->len, 7), 0);
		assert_true(shoal_ring_peek(&f->c, &rec));
		assert_int_equal(rec.len, f->len);
		assert_int_equal(rec.tag, 7);
		assert_true(check_pattern(rec.data, rec.len, 100 + i));
		/* The record lies inside the data area, never across its end. */
		assert_true((const unsigned char *)rec.data + rec.len <=
			    (const unsigned char *)f->mem + SHOAL__RING_DATA_OFF + f->cap);
		shoal_ring_release(&f->c);
	}
	assert_true(shoal_ring_empty(&f->c));
}

/* The stats and the walk agree with what was enqueued. */
static void ring_check_counts_pending_records(void **state)
{
	struct fixture *f = *state;
	struct shoal_ring_stats st;
	struct shoal_err err = {{0}};
	unsigned char buf[8192] = {0};
	int n = 0;

	while (shoal_ring_enqueue(&f->p, buf, f->len, 0) == 0)
		n++;
	assert_int_equal(shoal_ring_check(f->mem, shoal_ring_size(f->cap), &st, &err), n);
	assert_true(st.used <= f->cap);
	assert_int_equal(st.capacity, f->cap);
	assert_true(st.full_events >= 1);
	assert_true(st.high_water >= st.used);
}

/*
 * The same fill and drain in runs: runs of up to 3 records, one tag per run,
 * reserved until the ring refuses, every other run claimed instead
 * (shoal_ring_claim_run(): each record's header written here, before its
 * payload); read back by turns in runs of up to 8 and in bursts of up to 5.
 * Every record comes back once, in order, inside the data area, with its
 * run's tag.
 */
static void ring_runs_fill_to_full_then_drain_in_order(void **state)
{
	struct fixture *f = *state;
	const unsigned char *end = (const unsigned char *)f->mem + SHOAL__RING_DATA_OFF + f->cap;
	uint32_t stride = shoal_ring_stride(f->len), n = 0, got = 0;
	uint16_t tags[4096 / 8];
	struct shoal_ring_stats st;
	struct shoal_rec run;
	unsigned k;
	void *first;

	for (uint16_t r = 0;
	     (k = r % 2 ? shoal_ring_claim_run(&f->p, f->len, r, 1 + r % 3, &first) :
			  shoal_ring_reserve_run(&f->p, f->len, r, 1 + r % 3, &first)) > 0;
	     r++) {
		assert_true(k <= 1u + r % 3);
		for (unsigned i = 0; i < k; i++, n++) {
			unsigned char *rec = (unsigned char *)first + i * stride;

			if (r % 2)
				shoal_ring_put_hdr(rec, shoal_ring_run_hdr(f->len, r));
			fill_pattern(rec, f->len, n);
			tags[n] = r;
		}
		shoal_ring_commit(&f->p);
		assert_true(n <= f->cap / 8);
	}
	assert_true(n >= 1);
	assert_int_equal(shoal_ring_prod_error(&f->p), 0);
	first = NULL;
	assert_int_equal(shoal_ring_reserve_run(&f->p, f->len, 0, 2, &first), 0);
	assert_null(first);   /* untouched on a refusal */
	assert_int_equal(shoal_ring_stats(f->mem, shoal_ring_size(f->cap), &st, NULL), 0);
	assert_true(st.full_events >= 1);
	assert_int_equal(st.records_in - st.records_out, n);   /* the fillers went out */
	for (unsigned turn = 0;; turn++) {
		struct shoal_rec recs[5];

		k = turn % 2 ? shoal_ring_peek_burst(&f->c, recs, 5) :
			       shoal_ring_peek_run(&f->c, &run, 8);
		if (k == 0)
			break;
		assert_true(got + k <= n);
		for (unsigned i = 0; i < k; i++, got++) {
			struct shoal_rec r = turn % 2 ? recs[i] : run;

			if (turn % 2 == 0)
				r.data = (const unsigned char *)run.data + i * stride;
			assert_int_equal(r.len, f->len);
			assert_int_equal(r.tag, tags[got]);
			assert_true(check_pattern(r.data, r.len, got));
			assert_true((const unsigned char *)r.data + r.len <= end);
		}
		shoal_ring_release(&f->c);
	}
	assert_int_equal(got, n);
	assert_int_equal(shoal_ring_cons_error(&f->c), 0);
	assert_true(shoal_ring_empty(&f->c));
}

#define CAPS_N 3
static const uint32_t caps[CAPS_N] = { 64, 256, 4096 };
static const uint32_t lens[] = { 0, 1, 7, 8, 9, 24, 56, 100, UINT32_MAX };

static struct variant *variants;
static size_t n_variants;

static void build_variants(void)
{
	size_t max = 0;

	for (int c = 0; c < CAPS_N; c++)
		max += (caps[c] / 8) * (sizeof(lens) / sizeof(lens[0]));
	variants = calloc(max, sizeof(*variants));
	for (int c = 0; c < CAPS_N; c++) {
		/* Every 8-byte offset for small rings; a sample for the large one. */
		uint32_t step = caps[c] <= 256 ? 8 : 120;

		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			uint32_t len = lens[l];

			if (len != UINT32_MAX && len > caps[c] / 2 - SHOAL_RING_REC_HDR)
				continue;
			for (uint32_t s = 0; s < caps[c]; s += step) {
				uint32_t start = s & ~7u;

				/* A filler needs at least its header. */
				if (start != 0 && start < SHOAL_RING_REC_HDR)
					continue;
				variants[n_variants++] =
					(struct variant){ caps[c], len, start };
			}
		}
	}
}

/* Table-free cases: argument checks and single behaviours. */

static void ring_init_rejects_bad_arguments(void **state)
{
	void *mem;

	(void)state;
	assert_int_equal(posix_memalign(&mem, 128, 8192), 0);
	assert_int_equal(shoal_ring_init(mem, 8192, 256, 1), -EINVAL);
	assert_int_equal(shoal_ring_init(mem, 8192, 255, 0), -EINVAL);
	assert_int_equal(shoal_ring_init(mem, 8192, 32, 0), -EINVAL);
	assert_int_equal(shoal_ring_init(mem, 8192, 8192, 0), -EINVAL);   /* too short */
	assert_int_equal(shoal_ring_init((char *)mem + 8, 8000, 256, 0), -EINVAL);
	assert_int_equal(shoal_ring_init(mem, 8192, 4096, 0), 0);
	assert_int_equal(shoal_ring_size(100), 0);
	free(mem);
}

static void ring_oversized_record_is_emsgsize(void **state)
{
	struct fixture *f = fixture_new(256);
	unsigned char buf[512] = {0};
	uint32_t max = shoal_ring_max_payload(&f->p);
	struct shoal_rec recs[2] = { { buf, 8, 0 }, { buf, max + 1, 0 } };
	struct shoal_ring_stats st;

	(void)state;
	assert_int_equal(max, 256 / 2 - 8);
	assert_int_equal(shoal_ring_enqueue(&f->p, buf, max + 1, 0), -EMSGSIZE);
	assert_null(shoal_ring_reserve(&f->p, max + 1, 0));
	assert_int_equal(shoal_ring_enqueue_bulk(&f->p, recs, 2), -EMSGSIZE);
	assert_int_equal(shoal_ring_enqueue_burst(&f->p, recs, 2), -EMSGSIZE);
	assert_true(shoal_ring_empty(&f->c));   /* nothing half-enqueued */
	assert_int_equal(shoal_ring_stats(f->mem, shoal_ring_size(256), &st, NULL), 0);
	assert_int_equal(st.records_in, 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, buf, max, 0), 0);
	fixture_free(f);
}

static void ring_burst_takes_what_fits_bulk_takes_all_or_nothing(void **state)
{
	struct fixture *f = fixture_new(256);
	unsigned char buf[56] = {0};
	struct shoal_rec recs[8];
	int n;

	(void)state;
	for (int i = 0; i < 8; i++)
		recs[i] = (struct shoal_rec){ buf, 56, (uint16_t)i };
	/* 64 bytes each: 4 fit in 256. */
	assert_int_equal(shoal_ring_enqueue_bulk(&f->p, recs, 8), 0);
	assert_true(shoal_ring_empty(&f->c));
	n = shoal_ring_enqueue_burst(&f->p, recs, 8);
	assert_int_equal(n, 4);
	assert_int_equal(shoal_ring_enqueue_bulk(&f->p, recs, 1), 0);
	struct shoal_rec out[8];
	assert_int_equal(shoal_ring_peek_burst(&f->c, out, 8), 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(out[i].tag, i);
	shoal_ring_release(&f->c);
	assert_int_equal(shoal_ring_enqueue_bulk(&f->p, recs, 4), 4);
	fixture_free(f);
}

static void ring_reserved_records_are_invisible_until_commit(void **state)
{
	struct fixture *f = fixture_new(256);
	struct shoal_rec rec;

	(void)state;
	memset(shoal_ring_reserve(&f->p, 10, 1), 'a', 10);
	memset(shoal_ring_reserve(&f->p, 10, 2), 'b', 10);
	assert_false(shoal_ring_peek(&f->c, &rec));
	shoal_ring_cancel(&f->p);
	shoal_ring_commit(&f->p);   /* nothing left to commit */
	assert_false(shoal_ring_peek(&f->c, &rec));
	memset(shoal_ring_reserve(&f->p, 3, 3), 'c', 3);
	shoal_ring_commit(&f->p);
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(rec.tag, 3);
	assert_memory_equal(rec.data, "ccc", 3);
	fixture_free(f);
}

/* The ring's producer counters in shared memory, as tools read them. */
static void expect_counted(const struct fixture *f, uint64_t records, uint64_t bytes,
			   uint64_t full_events)
{
	struct shoal_ring_stats st;

	assert_int_equal(shoal_ring_stats(f->mem, shoal_ring_size(f->cap), &st, NULL), 0);
	assert_int_equal(st.records_in, records);
	assert_int_equal(st.bytes_in, bytes);
	assert_int_equal(st.full_events, full_events);
}

/*
 * Each way of reserving counts its records and payload bytes as
 * uncommitted until the commit, which publishes the counts with the
 * records; a cancel drops them uncounted. A refusal for lack of room is
 * one full event however often it is refused again, until a commit shows
 * that room was found.
 */
static void ring_counts_exactly_what_was_committed(void **state)
{
	struct fixture *f = fixture_new(256);
	struct shoal_rec rec;
	void *first;
	unsigned k;

	(void)state;
	assert_int_equal(shoal_ring_uncommitted(&f->p), 0);
	assert_non_null(shoal_ring_reserve(&f->p, 10, 0));
	assert_int_equal(shoal_ring_reserve_run(&f->p, 3, 0, 2, &first), 2);
	assert_int_equal(shoal_ring_uncommitted(&f->p), 3);
	shoal_ring_cancel(&f->p);
	assert_int_equal(shoal_ring_uncommitted(&f->p), 0);
	shoal_ring_commit(&f->p);
	expect_counted(f, 0, 0, 0);

	assert_non_null(shoal_ring_reserve(&f->p, 10, 0));
	first = shoal_ring_claim(&f->p, 0, 0);
	assert_non_null(first);
	shoal_ring_put_hdr(first, shoal_ring_run_hdr(0, 0));
	k = shoal_ring_claim_run(&f->p, 5, 0, 3, &first);
	assert_int_equal(k, 3);
	for (unsigned i = 0; i < k; i++)
		shoal_ring_put_hdr((unsigned char *)first + i * shoal_ring_stride(5),
				   shoal_ring_run_hdr(5, 0));
	assert_int_equal(shoal_ring_uncommitted(&f->p), 5);
	expect_counted(f, 0, 0, 0);   /* nothing before the commit */
	shoal_ring_commit(&f->p);
	assert_int_equal(shoal_ring_uncommitted(&f->p), 0);
	expect_counted(f, 5, 25, 0);

	/* Full: those took 80 bytes of 256; one 100-byte record (112 with
	 * its header) fits, the next does not. */
	assert_non_null(shoal_ring_reserve(&f->p, 100, 0));
	assert_null(shoal_ring_reserve(&f->p, 100, 0));
	assert_null(shoal_ring_claim(&f->p, 100, 0));
	assert_int_equal(shoal_ring_claim_run(&f->p, 100, 0, 2, &first), 0);
	expect_counted(f, 5, 25, 1);   /* one episode, the record not yet in */
	shoal_ring_commit(&f->p);
	expect_counted(f, 6, 125, 1);
	/* A commit since: a refusal now is a new episode. */
	assert_null(shoal_ring_reserve(&f->p, 100, 0));
	assert_null(shoal_ring_reserve(&f->p, 100, 0));
	expect_counted(f, 6, 125, 2);
	while (shoal_ring_peek(&f->c, &rec))
		;
	shoal_ring_release(&f->c);
	/* After a pad, which is not counted. */
	assert_non_null(shoal_ring_reserve(&f->p, 100, 0));
	shoal_ring_commit(&f->p);
	expect_counted(f, 7, 225, 2);
	fixture_free(f);
}

/*
 * shoal_ring_claim() leaves the header to its caller: the record is read
 * back with the length and tag the caller wrote, whether it was claimed
 * inline or, at the end of the data area, after a pad (the slow path).
 */
static void ring_claimed_record_carries_the_header_its_caller_wrote(void **state)
{
	struct fixture *f = fixture_new(256);
	struct shoal_rec rec;
	unsigned char *a;

	(void)state;
	for (uint16_t tag = 1; tag <= 6; tag++) {
		unsigned char want[56];

		/* 64-byte records: after the first, 136 bytes in and out
		 * leave 56 before the lap's end, so the second goes to offset
		 * 0 after a pad, and the fifth ends the lap exactly. */
		a = shoal_ring_claim(&f->p, 56, 0);
		assert_non_null(a);
		assert_true(a + 56 <= (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + f->cap);
		shoal_ring_put_hdr(a, shoal_ring_run_hdr(56, tag));
		memset(a, 'a' + tag, 56);
		shoal_ring_commit(&f->p);
		assert_true(shoal_ring_peek(&f->c, &rec));
		assert_int_equal(rec.len, 56);
		assert_int_equal(rec.tag, tag);
		assert_ptr_equal(rec.data, a);
		memset(want, 'a' + tag, sizeof(want));
		assert_memory_equal(rec.data, want, sizeof(want));
		shoal_ring_release(&f->c);
		if (tag == 1) {
			advance_to(f, 72);
			advance_to(f, 64);
		}
		if (tag == 2 || tag == 6)
			assert_ptr_equal(a, (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + 8);
	}
	assert_int_equal(shoal_ring_cons_error(&f->c), 0);
	fixture_free(f);
}

/*
 * shoal_ring_next_at() names where the next record's header goes, and
 * shoal_ring_commit_at() the word the commit publishes the tail in (the
 * dispatcher asks for those lines early): through a lap, at its exact end,
 * and with records reserved and not yet committed.
 */
static void ring_next_and_commit_lines_are_those_written(void **state)
{
	struct fixture *f = fixture_new(256);
	const unsigned char *data = (unsigned char *)f->mem + SHOAL__RING_DATA_OFF;
	uint32_t tail;

	(void)state;
	assert_true((const unsigned char *)shoal_ring_commit_at(&f->p) >=
		    (const unsigned char *)f->mem);
	assert_true((const unsigned char *)shoal_ring_commit_at(&f->p) + sizeof(uint32_t) <= data);
	for (unsigned i = 0; i < 6; i++) {
		const unsigned char *next = shoal_ring_next_at(&f->p);
		unsigned char *a;
		struct shoal_rec rec;

		/* 64-byte records: four a lap, the fifth at offset 0 again. */
		assert_ptr_equal(next, data + (i % 4) * 64);
		a = shoal_ring_reserve(&f->p, 56, (uint16_t)i);
		assert_ptr_equal(a, next + SHOAL_RING_REC_HDR);
		/* Reserved, not committed: the next goes after it. */
		assert_ptr_equal(shoal_ring_next_at(&f->p), data + ((i + 1) % 4) * 64);
		memcpy(&tail, shoal_ring_commit_at(&f->p), sizeof(tail));
		assert_int_equal(tail, i * 64);
		shoal_ring_commit(&f->p);
		memcpy(&tail, shoal_ring_commit_at(&f->p), sizeof(tail));
		assert_int_equal(tail, (i + 1) * 64);
		assert_true(shoal_ring_peek(&f->c, &rec));
		assert_ptr_equal(rec.data, a);
		shoal_ring_release(&f->c);
	}
	fixture_free(f);
}

/*
 * What the consumer is told lies published ahead of its peeks: the bytes
 * after the records peeked, as far as the tail it last read, never past the
 * data area's end; nothing committed after that read until it reads again.
 */
static void ring_ahead_is_what_is_published_after_the_peeks(void **state)
{
	struct fixture *f = fixture_new(256);
	const unsigned char *data = (unsigned char *)f->mem + SHOAL__RING_DATA_OFF;
	const void *at;
	struct shoal_rec rec;

	(void)state;
	assert_int_equal(shoal_ring_ahead(&f->c, &at), 0);
	assert_ptr_equal(at, data);
	for (unsigned i = 0; i < 3; i++) {
		assert_non_null(shoal_ring_reserve(&f->p, 56, 0));
		shoal_ring_commit(&f->p);
	}
	/* Not read yet: the tail the handle knows is the old one. */
	assert_int_equal(shoal_ring_ahead(&f->c, &at), 0);
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(shoal_ring_ahead(&f->c, &at), 128);
	assert_ptr_equal(at, data + 64);
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(shoal_ring_ahead(&f->c, &at), 0);
	assert_ptr_equal(at, data + 192);
	shoal_ring_release(&f->c);
	/* Two more, the second at offset 0 of the next lap: ahead stops at
	 * the data area's end. */
	for (unsigned i = 0; i < 2; i++) {
		assert_non_null(shoal_ring_reserve(&f->p, 56, 0));
		shoal_ring_commit(&f->p);
	}
	assert_false(shoal_ring_empty(&f->c));
	assert_int_equal(shoal_ring_ahead(&f->c, &at), 64);
	assert_ptr_equal(at, data + 192);
	fixture_free(f);
}

/*
 * A cancel that takes the tail back across a pad, onto the lap before it:
 * the inline reserve's bound is the old lap's end again, so the next record
 * goes where the cancelled pad was and is read back whole.
 */
static void ring_cancel_back_across_a_pad_reserves_on_the_old_lap(void **state)
{
	struct fixture *f = fixture_new(256);
	struct shoal_rec rec;
	unsigned char *a;

	(void)state;
	/* 200 bytes in and out (two fillers, a record takes at most 128): the
	 * tail is 56 bytes before the end. */
	advance_to(f, 128);
	advance_to(f, 72);
	/* 64 bytes do not fit: a pad, then the record at offset 0. */
	a = shoal_ring_reserve(&f->p, 56, 1);
	assert_ptr_equal(a, (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + 8);
	shoal_ring_cancel(&f->p);
	/* Back on the old lap, the same record still does not fit there. */
	a = shoal_ring_reserve(&f->p, 56, 1);
	assert_ptr_equal(a, (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + 8);
	shoal_ring_cancel(&f->p);
	/* 48 bytes fit before the end, then 8 more: the lap exactly. */
	a = shoal_ring_reserve(&f->p, 40, 2);
	assert_ptr_equal(a, (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + 208);
	memset(a, 'x', 40);
	assert_non_null(shoal_ring_reserve(&f->p, 0, 3));
	/* The lap is full to its end: the next one starts at offset 0. */
	a = shoal_ring_reserve(&f->p, 16, 4);
	assert_ptr_equal(a, (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + 8);
	memset(a, 'y', 16);
	shoal_ring_commit(&f->p);
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(rec.tag, 2);
	assert_int_equal(rec.len, 40);
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(rec.tag, 3);
	assert_true(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(rec.tag, 4);
	assert_memory_equal(rec.data, "yyyyyyyyyyyyyyyy", 16);
	assert_false(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(shoal_ring_cons_error(&f->c), 0);
	fixture_free(f);
}

/* A head the consumer could not have published, found when the cached one
 * says full: the handle's error is sticky, and every reserve after it is
 * refused, the inline one too. */
static void ring_impossible_head_refuses_every_later_reserve(void **state)
{
	struct fixture *f = fixture_new(256);
	struct shoal__ring *r = f->mem;
	void *first = NULL;

	(void)state;
	while (shoal_ring_reserve(&f->p, 56, 0) != NULL)
		;
	shoal_ring_commit(&f->p);
	/* Misaligned: no record boundary. */
	atomic_store_explicit(&r->head, 3, memory_order_relaxed);
	assert_null(shoal_ring_reserve(&f->p, 56, 0));
	assert_int_equal(shoal_ring_prod_error(&f->p), -EUCLEAN);
	/* A head that would leave room does not clear it. */
	atomic_store_explicit(&r->head, atomic_load(&r->tail), memory_order_relaxed);
	assert_null(shoal_ring_reserve(&f->p, 0, 0));
	assert_int_equal(shoal_ring_reserve_run(&f->p, 0, 0, 4, &first), 0);
	shoal_ring_cancel(&f->p);
	assert_null(shoal_ring_reserve(&f->p, 0, 0));
	assert_int_equal(shoal_ring_prod_error(&f->p), -EUCLEAN);
	fixture_free(f);
}

static void ring_dequeue_small_buffer_keeps_record(void **state)
{
	struct fixture *f = fixture_new(256);
	char out[16];
	uint16_t tag = 0;

	(void)state;
	assert_int_equal(shoal_ring_enqueue(&f->p, "hello, world", 12, 9), 0);
	assert_int_equal(shoal_ring_dequeue(&f->c, out, 4, &tag), -EMSGSIZE);
	assert_int_equal(shoal_ring_dequeue(&f->c, out, sizeof(out), &tag), 12);
	assert_int_equal(tag, 9);
	assert_memory_equal(out, "hello, world", 12);
	assert_int_equal(shoal_ring_dequeue(&f->c, out, sizeof(out), &tag), -EAGAIN);
	fixture_free(f);
}

static void ring_new_consumer_resumes_at_released_head(void **state)
{
	struct fixture *f = fixture_new(256);
	struct shoal_ring_cons c2;
	struct shoal_rec rec;
	uint32_t v;

	(void)state;
	for (v = 0; v < 3; v++)
		assert_int_equal(shoal_ring_enqueue(&f->p, &v, sizeof(v), 0), 0);
	assert_true(shoal_ring_peek(&f->c, &rec));
	shoal_ring_release(&f->c);          /* record 0 released */
	assert_true(shoal_ring_peek(&f->c, &rec));   /* record 1 peeked only */
	/* The first consumer "dies"; a successor attaches. */
	assert_int_equal(shoal_ring_cons_attach(&c2, f->mem, shoal_ring_size(256), NULL), 0);
	assert_true(shoal_ring_peek(&c2, &rec));
	memcpy(&v, rec.data, sizeof(v));
	assert_int_equal(v, 1);
	fixture_free(f);
}

static void ring_zero_length_record_round_trips(void **state)
{
	struct fixture *f = fixture_new(64);
	struct shoal_rec rec;
	int n = 0;

	(void)state;
	while (shoal_ring_reserve(&f->p, 0, 5) != NULL)
		n++;
	assert_int_equal(n, 64 / 8);   /* a header each: the whole ring */
	shoal_ring_commit(&f->p);
	while (shoal_ring_peek(&f->c, &rec)) {
		assert_int_equal(rec.len, 0);
		assert_int_equal(rec.tag, 5);
		n--;
	}
	assert_int_equal(n, 0);
	fixture_free(f);
}

static void ring_reserve_run_refuses_what_reserve_refuses(void **state)
{
	struct fixture *f = fixture_new(256);
	uint32_t max = shoal_ring_max_payload(&f->p);
	void *first = NULL;

	(void)state;
	assert_int_equal(shoal_ring_reserve_run(&f->p, 8, 0, 0, &first), 0);
	assert_int_equal(shoal_ring_reserve_run(&f->p, max + 1, 0, 1, &first), 0);
	assert_null(first);
	assert_int_equal(shoal_ring_prod_error(&f->p), 0);
	/* 64 bytes a record: 4 fit in 256, the rest of the run is refused. */
	assert_int_equal(shoal_ring_reserve_run(&f->p, 56, 3, 8, &first), 4);
	assert_ptr_equal(first, (unsigned char *)f->mem + SHOAL__RING_DATA_OFF + 8);
	assert_int_equal(shoal_ring_reserve_run(&f->p, 56, 3, 1, &first), 0);
	assert_true(shoal_ring_empty(&f->c));   /* nothing visible before commit */
	shoal_ring_cancel(&f->p);
	assert_int_equal(shoal_ring_reserve_run(&f->p, 56, 3, 2, &first), 2);
	shoal_ring_commit(&f->p);
	assert_false(shoal_ring_empty(&f->c));
	fixture_free(f);
}

/*
 * A run that ends on the lap's end, then one that starts the next lap
 * without a pad (the head left room for it): the inline reserve's bound
 * follows the tail onto the new lap, so that a full ring refuses the next
 * record instead of writing over the first run.
 */
static void ring_run_from_the_lap_end_leaves_reserve_no_room(void **state)
{
	struct fixture *f = fixture_new(256);
	unsigned char *data = (unsigned char *)f->mem + SHOAL__RING_DATA_OFF;
	struct shoal_rec rec;
	void *first = NULL;

	(void)state;
	advance_to(f, 128);
	/* Three asked, two fit before the end: the tail is on the lap's end. */
	assert_int_equal(shoal_ring_reserve_run(&f->p, 56, 1, 3, &first), 2);
	assert_ptr_equal(first, data + 128 + 8);
	/* The cached head leaves 128 bytes: two more, at offset 0. */
	assert_int_equal(shoal_ring_reserve_run(&f->p, 56, 2, 2, &first), 2);
	assert_ptr_equal(first, data + 8);
	/* Full: neither reserve finds room. */
	assert_null(shoal_ring_reserve(&f->p, 0, 3));
	assert_int_equal(shoal_ring_reserve_run(&f->p, 0, 3, 1, &first), 0);
	shoal_ring_commit(&f->p);
	for (uint16_t tag = 1; tag <= 4; tag++) {
		assert_true(shoal_ring_peek(&f->c, &rec));
		assert_int_equal(rec.tag, tag <= 2 ? 1 : 2);
		assert_int_equal(rec.len, 56);
	}
	assert_false(shoal_ring_peek(&f->c, &rec));
	assert_int_equal(shoal_ring_cons_error(&f->c), 0);
	fixture_free(f);
}

/* A run ends where the length or the tag changes; unpeek gives back the
 * last record of a run or of a burst. */
static void ring_peek_run_ends_at_another_length_or_tag(void **state)
{
	struct fixture *f = fixture_new(256);
	uint64_t v[2] = { 1, 2 }, in, out;
	struct shoal_rec run, recs[8];

	(void)state;
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 8, 1), 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 8, 1), 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 8, 2), 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 16, 2), 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 16, 2), 0);
	assert_int_equal(shoal_ring_peek_run(&f->c, &run, 0), 0);
	assert_int_equal(shoal_ring_peek_run(&f->c, &run, 8), 2);
	assert_int_equal(run.tag, 1);
	assert_int_equal(shoal_ring_peek_run(&f->c, &run, 8), 1);
	assert_int_equal(run.tag, 2);
	assert_int_equal(shoal_ring_peek_run(&f->c, &run, 8), 2);
	assert_int_equal(run.len, 16);
	assert_memory_equal((const unsigned char *)run.data + shoal_ring_stride(16), v, 16);
	shoal_ring_unpeek(&f->c);
	assert_int_equal(shoal_ring_peek_run(&f->c, &run, 8), 1);
	assert_int_equal(run.len, 16);
	assert_int_equal(shoal_ring_peek_run(&f->c, &run, 8), 0);
	shoal_ring_release(&f->c);
	assert_int_equal(shoal_ring_records(f->mem, shoal_ring_size(256), &in, &out), 0);
	assert_int_equal(out, 5);
	/* A burst gives back its last record the same way. */
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 8, 3), 0);
	assert_int_equal(shoal_ring_enqueue(&f->p, v, 16, 4), 0);
	assert_int_equal(shoal_ring_peek_burst(&f->c, recs, 8), 2);
	shoal_ring_unpeek(&f->c);
	assert_int_equal(shoal_ring_peek_burst(&f->c, recs, 8), 1);
	assert_int_equal(recs[0].len, 16);
	assert_int_equal(recs[0].tag, 4);
	shoal_ring_release(&f->c);
	assert_int_equal(shoal_ring_records(f->mem, shoal_ring_size(256), &in, &out), 0);
	assert_int_equal(out, 7);
	assert_true(shoal_ring_empty(&f->c));
	fixture_free(f);
}

/* The producer learns that its reader gave the ring up; its own mark is not that. */
static void ring_prod_condemned_sees_only_the_consumer_mark(void **state)
{
	struct fixture *f = fixture_new(4096);
	uint64_t len = shoal_ring_size(4096);

	(void)state;
	assert_false(shoal_ring_prod_condemned(&f->p));
	shoal_ring_condemn(f->mem, len, SHOAL_RING_SIDE_PROD);
	assert_false(shoal_ring_prod_condemned(&f->p));
	shoal_ring_condemn(f->mem, len, SHOAL_RING_SIDE_CONS);
	assert_true(shoal_ring_prod_condemned(&f->p));
	assert_int_equal(shoal_ring_condemned(f->mem, len),
			 SHOAL_RING_SIDE_PROD | SHOAL_RING_SIDE_CONS);
	fixture_free(f);
}

/*
 * Bursts over runs of equal headers broken by other lengths and tags, over
 * many laps of a small ring (so runs meet the end of the data area and its
 * pads): every record comes back once, in order, with its length, tag and
 * bytes, however a burst's size falls against the runs.
 */
static void ring_bursts_over_mixed_runs_return_every_record_in_order(void **state)
{
	static const uint32_t run_lens[] = { 0, 8, 9, 24, 56 };
	struct fixture *f = fixture_new(512);
	uint32_t seed = 12345, sent = 0, got = 0;
	uint32_t want_len[64], want_tag[64];

	(void)state;
	while (got < 20000) {
		/* A run of 1-5 records of one length and tag, if it fits. */
		uint32_t len = run_lens[(seed >> 8) % 5], k = 1 + (seed >> 12) % 5;
		uint16_t tag = (uint16_t)((seed >> 16) % 3);
		struct shoal_rec recs[9];
		unsigned n;

		seed = seed * 1103515245u + 12345u;
		for (uint32_t i = 0; i < k && sent - got < 64; i++) {
			unsigned char *dst = shoal_ring_reserve(&f->p, len, tag);

			if (dst == NULL)
				break;
			fill_pattern(dst, len, sent);
			want_len[sent % 64] = len;
			want_tag[sent % 64] = tag;
			sent++;
		}
		shoal_ring_commit(&f->p);
		n = shoal_ring_peek_burst(&f->c, recs, 1 + (seed >> 20) % 9);
		for (unsigned i = 0; i < n; i++, got++) {
			assert_true(got < sent);
			assert_int_equal(recs[i].len, want_len[got % 64]);
			assert_int_equal(recs[i].tag, want_tag[got % 64]);
			assert_true(check_pattern(recs[i].data, recs[i].len, got));
		}
		shoal_ring_release(&f->c);
		assert_int_equal(shoal_ring_cons_error(&f->c), 0);
	}
	assert_int_equal(shoal_ring_prod_error(&f->p), 0);
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest fixed[] = {
		cmocka_unit_test(ring_init_rejects_bad_arguments),
		cmocka_unit_test(ring_oversized_record_is_emsgsize),
		cmocka_unit_test(ring_burst_takes_what_fits_bulk_takes_all_or_nothing),
		cmocka_unit_test(ring_bursts_over_mixed_runs_return_every_record_in_order),
		cmocka_unit_test(ring_reserved_records_are_invisible_until_commit),
		cmocka_unit_test(ring_counts_exactly_what_was_committed),
		cmocka_unit_test(ring_claimed_record_carries_the_header_its_caller_wrote),
		cmocka_unit_test(ring_next_and_commit_lines_are_those_written),
		cmocka_unit_test(ring_ahead_is_what_is_published_after_the_peeks),
		cmocka_unit_test(ring_cancel_back_across_a_pad_reserves_on_the_old_lap),
		cmocka_unit_test(ring_impossible_head_refuses_every_later_reserve),
		cmocka_unit_test(ring_dequeue_small_buffer_keeps_record),
		cmocka_unit_test(ring_new_consumer_resumes_at_released_head),
		cmocka_unit_test(ring_zero_length_record_round_trips),
		cmocka_unit_test(ring_prod_condemned_sees_only_the_consumer_mark),
		cmocka_unit_test(ring_reserve_run_refuses_what_reserve_refuses),
		cmocka_unit_test(ring_run_from_the_lap_end_leaves_reserve_no_room),
		cmocka_unit_test(ring_peek_run_ends_at_another_length_or_tag),
	};
	struct CMUnitTest *table;
	size_t n = 0;
	int failed;

	build_variants();
	table = calloc(n_variants * 4, sizeof(*table));
	char (*names)[64] = calloc(n_variants * 4, 64);
	for (size_t i = 0; i < n_variants; i++) {
		static const struct {
			const char *name;
			CMUnitTestFunction fn;
		} bodies[4] = {
			{ "ring_fill_to_full_then_drain_in_order", ring_fill_to_full_then_drain_in_order },
			{ "ring_record_wraps_through_pad", ring_record_wraps_through_pad },
			{ "ring_check_counts_pending_records", ring_check_counts_pending_records },
			{ "ring_runs_fill_to_full_then_drain_in_order",
			  ring_runs_fill_to_full_then_drain_in_order },
		};
		for (int b = 0; b < 4; b++) {
			char *nm = names[n];

			snprintf(nm, 64, "%s/cap%u/len%d/at%u", bodies[b].name, variants[i].cap,
				 variants[i].len == UINT32_MAX ? -1 : (int)variants[i].len,
				 variants[i].start);
			table[n++] = (struct CMUnitTest){
				.name = nm,
				.test_func = bodies[b].fn,
				.setup_func = setup_variant,
				.teardown_func = teardown_variant,
				.initial_state = &variants[i],
			};
		}
	}
	failed = cmocka_run_group_tests_name("ring_fixed", fixed, NULL, NULL);
	failed += _cmocka_run_group_tests("ring_variants", table, n, NULL, NULL);
	free(table);
	free(names);
	free(variants);
	return failed ? 1 : 0;
}
