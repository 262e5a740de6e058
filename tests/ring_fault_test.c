/* SPDX-License-Identifier: MIT */
/*
 * Hostile rings: a peer that writes garbage into the control block or the
 * record headers. Every case must be refused with -EUCLEAN and a reason, and
 * nothing may be read or written outside the ring (run under the asan setup:
 * the ring lives in a heap block of exactly its size, so any stray access is
 * reported).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/ring.h>

#include "shm/ring_layout.h"
#include "tests/testutil.h"

#define CAP 256u

struct ring_mem {
	struct shoal__ring *r;
	unsigned char *data;
	uint64_t len;
};

static struct ring_mem ring_new(void)
{
	struct ring_mem m;
	void *p;

	m.len = shoal_ring_size(CAP);
	assert_int_equal(posix_memalign(&p, 128, m.len), 0);
	assert_int_equal(shoal_ring_init(p, m.len, CAP, 0), 0);
	m.r = p;
	m.data = (unsigned char *)p + SHOAL__RING_DATA_OFF;
	return m;
}

static void put_hdr(struct ring_mem *m, uint32_t off, uint32_t len, uint16_t tag, uint16_t flags)
{
	uint64_t w = (uint64_t)len | ((uint64_t)tag << 32) | ((uint64_t)flags << 48);

	memcpy(m->data + off, &w, sizeof(w));
}

/* A corruption of the control block, applied to a ring holding 2 records. */
struct control_case {
	const char *name;
	void (*corrupt)(struct shoal__ring *r);
	const char *reason;   /* a phrase the error message must contain */
};

static void bad_magic(struct shoal__ring *r) { r->magic = 0x12345678; }
static void bad_version(struct shoal__ring *r) { r->version = 9; }
static void cap_not_pow2(struct shoal__ring *r) { r->capacity = 200; }
static void cap_past_region(struct shoal__ring *r) { r->capacity = 1u << 20; }
static void bad_data_off(struct shoal__ring *r) { r->data_off = 64; }
static void bad_max_payload(struct shoal__ring *r) { r->max_payload = CAP; }
static void unknown_flags(struct shoal__ring *r) { r->flags = 0x80; }
static void head_past_tail(struct shoal__ring *r) { atomic_store(&r->head, atomic_load(&r->tail) + 8); }
static void tail_too_far(struct shoal__ring *r) { atomic_store(&r->tail, atomic_load(&r->head) + CAP + 8); }
static void tail_misaligned(struct shoal__ring *r) { atomic_store(&r->tail, atomic_load(&r->tail) + 3); }

static const struct control_case control_cases[] = {
	{ "magic", bad_magic, "magic" },
	{ "version", bad_version, "version" },
	{ "capacity_not_pow2", cap_not_pow2, "power of two" },
	{ "capacity_past_region", cap_past_region, "runs past" },
	{ "data_off", bad_data_off, "data offset" },
	{ "max_payload", bad_max_payload, "max payload" },
	{ "unknown_flags", unknown_flags, "unknown flags" },
	{ "head_past_tail", head_past_tail, "more than its capacity" },
	{ "tail_too_far", tail_too_far, "more than its capacity" },
	{ "tail_misaligned", tail_misaligned, "aligned" },
};

static void ring_corrupted_control_is_refused(void **state)
{
	const struct control_case *cc = *state;
	struct ring_mem m = ring_new();
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	struct shoal_ring_stats st;
	struct shoal_err err = {{0}};

	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_enqueue(&p, "abc", 3, 0), 0);
	assert_int_equal(shoal_ring_enqueue(&p, "defg", 4, 0), 0);
	cc->corrupt(m.r);
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, cc->reason));
	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), -EUCLEAN);
	/* The handle, attached before, refuses everything now: a caller that
	 * kept it after the failed attach writes nothing into the ring. */
	assert_null(shoal_ring_reserve(&p, 3, 0));
	assert_int_not_equal(shoal_ring_enqueue(&p, "hij", 3, 0), 0);
	assert_int_equal(shoal_ring_prod_error(&p), -EUCLEAN);
	assert_int_equal(shoal_ring_stats(m.r, m.len, &st, NULL), -EUCLEAN);
	assert_int_equal(shoal_ring_check(m.r, m.len, &st, NULL), -EUCLEAN);
	free(m.r);
}

/* A corruption of a record header in a ring otherwise valid. */
struct record_case {
	const char *name;
	void (*corrupt)(struct ring_mem *m);
	const char *reason;
};

/* Two records at offsets 0 (len 16) and 24 (len 4) are published. */
static void len_past_tail(struct ring_mem *m) { put_hdr(m, 24, 40, 0, 0); }
static void len_over_max(struct ring_mem *m) { put_hdr(m, 0, 0xfffffff0u, 0, 0); }
static void len_past_end(struct ring_mem *m)
{
	/* A record near the end whose length runs past the data area. */
	atomic_store(&m->r->head, CAP - 16);
	atomic_store(&m->r->tail, CAP + 32);
	put_hdr(m, CAP - 16, 64, 0, 0);
}
static void len_past_end_later(struct ring_mem *m)
{
	/* The same, after a good record, with the tail past both: the tail
	 * read with the first bounds it no more, only the data area's end. */
	atomic_store(&m->r->head, CAP - 40);
	atomic_store(&m->r->tail, CAP + 64);
	put_hdr(m, CAP - 40, 16, 0, 0);
	put_hdr(m, CAP - 16, 64, 0, 0);
}
static void pad_short(struct ring_mem *m)
{
	atomic_store(&m->r->head, CAP - 32);
	atomic_store(&m->r->tail, CAP + 16);
	put_hdr(m, CAP - 32, 8, 0, SHOAL__REC_PAD);
}
static void pad_last(struct ring_mem *m)
{
	atomic_store(&m->r->head, CAP - 32);
	atomic_store(&m->r->tail, CAP);
	put_hdr(m, CAP - 32, 32 - SHOAL_RING_REC_HDR, 0, SHOAL__REC_PAD);
}
static void flags_unknown(struct ring_mem *m) { put_hdr(m, 0, 16, 0, 0x40); }

static const struct record_case record_cases[] = {
	{ "len_past_tail", len_past_tail, "past tail" },
	{ "len_over_max", len_over_max, "largest payload" },
	{ "len_past_end", len_past_end, "past the end" },
	{ "len_past_end_later", len_past_end_later, "past the end" },
	{ "pad_short", pad_short, "to the end" },
	{ "pad_last", pad_last, "not followed" },
	{ "flags_unknown", flags_unknown, "unknown flags" },
};

static void ring_corrupted_record_is_refused(void **state)
{
	const struct record_case *rc = *state;
	struct ring_mem m = ring_new();
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	struct shoal_ring_stats st;
	struct shoal_rec rec;
	struct shoal_err err = {{0}};
	int seen = 0;

	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_enqueue(&p, "0123456789abcdef", 16, 0), 0);
	assert_int_equal(shoal_ring_enqueue(&p, "wxyz", 4, 0), 0);
	rc->corrupt(&m);
	assert_int_equal(shoal_ring_check(m.r, m.len, &st, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, rc->reason));
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	while (shoal_ring_peek(&c, &rec)) {
		assert_true((const unsigned char *)rec.data + rec.len <= m.data + CAP);
		seen++;
		assert_true(seen <= 2);
	}
	assert_int_equal(shoal_ring_cons_error(&c), -EUCLEAN);
	/* The error is sticky: nothing more is read from this ring. */
	assert_false(shoal_ring_peek(&c, &rec));
	assert_int_equal(shoal_ring_dequeue(&c, &rec, sizeof(rec), NULL), -EUCLEAN);
	free(m.r);
}

/*
 * A header found bad puts the handle in its error state for good: mended
 * afterwards (by the producer, or by whoever wrote it), the record is still
 * refused by every consumer call, though the cached tail is past it and
 * its header would now pass every check.
 */
static void ring_error_stays_when_the_header_is_mended(void **state)
{
	struct ring_mem m = ring_new();
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	struct shoal_rec rec, recs[2];
	char buf[8];

	(void)state;
	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_enqueue(&p, "0123456789abcdef", 16, 0), 0);
	assert_int_equal(shoal_ring_enqueue(&p, "wxyz", 4, 0), 0);
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	put_hdr(&m, 24, 4, 0, 0x40);
	assert_true(shoal_ring_peek(&c, &rec));
	assert_int_equal(rec.len, 16);
	assert_false(shoal_ring_peek(&c, &rec));
	assert_int_equal(shoal_ring_cons_error(&c), -EUCLEAN);
	put_hdr(&m, 24, 4, 0, 0);
	assert_false(shoal_ring_peek(&c, &rec));
	assert_int_equal(shoal_ring_peek_burst(&c, recs, 2), 0);
	assert_int_equal(shoal_ring_peek_run(&c, &rec, 2), 0);
	assert_int_equal(shoal_ring_dequeue(&c, buf, sizeof(buf), NULL), -EUCLEAN);
	free(m.r);
}

static void ring_producer_refuses_head_past_tail(void **state)
{
	struct ring_mem m = ring_new();
	struct shoal_ring_prod p;
	char buf[64] = {0};

	(void)state;
	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
	while (shoal_ring_enqueue(&p, buf, sizeof(buf), 0) == 0)
		;
	/* A hostile consumer publishes a head beyond everything written. */
	atomic_store(&m.r->head, atomic_load(&m.r->tail) + 64);
	assert_null(shoal_ring_reserve(&p, sizeof(buf), 0));
	assert_int_equal(shoal_ring_prod_error(&p), -EUCLEAN);
	assert_int_equal(shoal_ring_enqueue(&p, buf, 8, 0), -EUCLEAN);
	free(m.r);
}

/*
 * A head moved forward by garbage, on a record boundary, while no consumer
 * is attached: the producer writes over the records it skipped. The next
 * consumer cannot deliver them, but it finds them counted in and never
 * taken out, and reports them lost (DESIGN invariant 6), exactly.
 */
static void ring_consumer_counts_records_a_forged_head_skipped(void **state)
{
	struct ring_mem m = ring_new();
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	uint64_t seq, in, out, next = 3;

	(void)state;
	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
	for (seq = 0; seq < 6; seq++)
		assert_int_equal(shoal_ring_enqueue(&p, &seq, sizeof(seq), 0), 0);
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_cons_skipped(&c), 0);
	assert_int_equal(shoal_ring_dequeue(&c, &seq, sizeof(seq), NULL), 8);
	assert_int_equal(seq, 0);
	/* Records 1 and 2 (16 bytes each) skipped; the producer fills the ring
	 * over them. */
	atomic_store(&m.r->head, atomic_load(&m.r->head) + 32);
	for (seq = 6; shoal_ring_enqueue(&p, &seq, sizeof(seq), 0) == 0; seq++)
		;
	assert_int_equal(shoal_ring_prod_error(&p), 0);
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_cons_skipped(&c), 2);
	assert_int_equal(shoal_ring_records(m.r, m.len, &in, &out), 0);
	assert_int_equal(out, 3);
	while (shoal_ring_dequeue(&c, &seq, sizeof(seq), NULL) == 8)
		assert_int_equal(seq, next++);
	assert_int_equal(next, in);
	assert_int_equal(shoal_ring_cons_error(&c), 0);
	/* Attached again: nothing more is missing. */
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_cons_skipped(&c), 0);
	/* Garbage in the producer's count: at most a ring's worth of records. */
	atomic_store(&m.r->records_in, UINT64_C(1) << 60);
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_cons_skipped(&c), CAP / 8);
	free(m.r);
}

/*
 * A side that gave up on a corrupted ring marks it, in its own line, and
 * the record counters stay readable even when the indices are garbage.
 */
static void ring_condemned_ring_keeps_its_marks_and_counts(void **state)
{
	struct ring_mem m = ring_new();
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	char buf[16] = {0};
	uint64_t in, out;

	(void)state;
	assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
	assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(shoal_ring_enqueue(&p, buf, sizeof(buf), 0), 0);
	assert_int_equal(shoal_ring_dequeue(&c, buf, sizeof(buf), NULL), 16);
	assert_int_equal(shoal_ring_condemned(m.r, m.len), 0);
	atomic_store(&m.r->tail, 3);   /* garbage: attach and stats refuse the ring */
	assert_int_equal(shoal_ring_records(m.r, m.len, &in, &out), 0);
	assert_int_equal(in, 3);
	assert_int_equal(out, 1);
	shoal_ring_condemn(m.r, m.len, SHOAL_RING_SIDE_CONS);
	assert_int_equal(shoal_ring_condemned(m.r, m.len), SHOAL_RING_SIDE_CONS);
	shoal_ring_condemn(m.r, m.len, SHOAL_RING_SIDE_PROD);
	assert_int_equal(shoal_ring_condemned(m.r, m.len),
			 SHOAL_RING_SIDE_CONS | SHOAL_RING_SIDE_PROD);
	shoal_ring_condemn(m.r, m.len, SHOAL_RING_SIDE_SETTLED);
	assert_int_equal(shoal_ring_condemned(m.r, m.len), SHOAL_RING_SIDE_CONS |
			 SHOAL_RING_SIDE_PROD | SHOAL_RING_SIDE_SETTLED);
	/* Too short to hold a control block: nothing is read or written. */
	assert_int_equal(shoal_ring_condemned(m.r, 64), 0);
	assert_int_equal(shoal_ring_records(m.r, 64, &in, &out), -EUCLEAN);
	free(m.r);
}

/*
 * A run of four 16-byte records whose third header a hostile producer
 * rewrote: a run, or a burst, delivers the two before it, whatever the
 * forgery; the next peek refuses the forged one (sticky -EUCLEAN), and the
 * ring's counters say that two records went in and never came out, so their
 * loss is counted, not silent. Nothing outside the data area is read.
 */
static void ring_hostile_header_inside_a_run_is_refused(void **state)
{
	static const struct { uint32_t len; uint16_t tag, flags; } forged[] = {
		{ 0xfffffff0u, 7, 0 },              /* over the largest payload */
		{ CAP / 2 - 8, 7, 0 },              /* past the tail */
		{ 16, 7, 0x40 },                    /* unknown flags */
		{ 16, 7, SHOAL__REC_PAD },          /* a pad in mid-ring */
	};

	(void)state;
	for (size_t f = 0; f < 2 * sizeof(forged) / sizeof(forged[0]); f++) {
		struct ring_mem m = ring_new();
		struct shoal_ring_prod p;
		struct shoal_ring_cons c;
		struct shoal_rec run, recs[4];
		bool burst = f % 2;
		uint64_t in, out;
		void *first;

		assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
		assert_int_equal(shoal_ring_reserve_run(&p, 16, 7, 4, &first), 4);
		for (int i = 0; i < 4; i++)
			memset((char *)first + i * shoal_ring_stride(16), 'r', 16);
		shoal_ring_commit(&p);
		put_hdr(&m, 2 * shoal_ring_stride(16), forged[f / 2].len, forged[f / 2].tag,
			forged[f / 2].flags);
		assert_int_equal(shoal_ring_cons_attach(&c, m.r, m.len, NULL), 0);
		if (burst) {
			assert_int_equal(shoal_ring_peek_burst(&c, recs, 4), 2);
			run = recs[0];
			assert_ptr_equal(recs[1].data, m.data + shoal_ring_stride(16) + 8);
		} else {
			assert_int_equal(shoal_ring_peek_run(&c, &run, 4), 2);
		}
		assert_ptr_equal(run.data, m.data + SHOAL_RING_REC_HDR);
		assert_int_equal(run.len, 16);
		shoal_ring_release(&c);
		assert_int_equal(burst ? shoal_ring_peek_burst(&c, recs, 4) :
					 shoal_ring_peek_run(&c, &run, 4), 0);
		assert_int_equal(shoal_ring_cons_error(&c), -EUCLEAN);
		assert_int_equal(shoal_ring_peek_run(&c, &run, 4), 0);
		assert_int_equal(shoal_ring_records(m.r, m.len, &in, &out), 0);
		assert_int_equal(in, 4);
		assert_int_equal(out, 2);
		free(m.r);
	}
}

/*
 * Random garbage in the indices and the data area, many rounds: the consumer
 * may deliver garbage records or stop with -EUCLEAN, but every record it
 * returns lies inside the data area and it never loops forever.
 */
static void ring_random_corruption_stays_inside(void **state)
{
	uint64_t seed = 0x5eed, rounds = test_scale(20000);

	(void)state;
	for (uint64_t i = 0; i < rounds; i++) {
		struct ring_mem m = ring_new();
		struct shoal_ring_prod p;
		struct shoal_ring_cons c;
		struct shoal_ring_stats st;
		struct shoal_rec rec;
		char buf[40] = {0};
		int peeks = 0;

		assert_int_equal(shoal_ring_prod_attach(&p, m.r, m.len, NULL), 0);
		for (uint64_t k = test_rand(&seed) % 12; k > 0; k--)
			(void)shoal_ring_enqueue(&p, buf, (uint32_t)(test_rand(&seed) % 40), 0);
		for (uint64_t k = test_rand(&seed) % 6; k > 0; k--) {
			uint64_t v = test_rand(&seed);
			uint32_t off = (uint32_t)(test_rand(&seed) % (CAP / 8)) * 8;

			switch (test_rand(&seed) % 4) {
			case 0: memcpy(m.data + off, &v, 8); break;
			case 1: atomic_store(&m.r->tail, (uint32_t)v & ~7u); break;
			case 2: atomic_store(&m.r->head, (uint32_t)v); break;
			default: m.data[off] = (unsigned char)v; break;
			}
		}
		(void)shoal_ring_check(m.r, m.len, &st, NULL);
		/* By rounds, one peek at a time, in runs, or in bursts: each
		 * record returned is checked. */
		if (shoal_ring_cons_attach(&c, m.r, m.len, NULL) == 0) {
			struct shoal_rec recs[8];
			unsigned k;

			while ((k = i % 3 == 0 ? shoal_ring_peek(&c, &rec) :
				    i % 3 == 1 ? shoal_ring_peek_run(&c, &rec, 8) :
						 shoal_ring_peek_burst(&c, recs, 8)) > 0) {
				for (unsigned j = 0; j < k; j++) {
					const unsigned char *d =
						i % 3 == 2 ? recs[j].data :
							     (const unsigned char *)rec.data +
								     j * shoal_ring_stride(rec.len);
					uint32_t len = i % 3 == 2 ? recs[j].len : rec.len;

					assert_true(d >= m.data);
					assert_true(d + len <= m.data + CAP);
					assert_true(++peeks <= (int)(CAP / 8));
				}
			}
		}
		free(m.r);
	}
}

#define N_CONTROL (sizeof(control_cases) / sizeof(control_cases[0]))
#define N_RECORD (sizeof(record_cases) / sizeof(record_cases[0]))

int main(void)
{
	struct CMUnitTest table[N_CONTROL + N_RECORD];
	char names[N_CONTROL + N_RECORD][80];
	const struct CMUnitTest fixed[] = {
		cmocka_unit_test(ring_error_stays_when_the_header_is_mended),
		cmocka_unit_test(ring_producer_refuses_head_past_tail),
		cmocka_unit_test(ring_consumer_counts_records_a_forged_head_skipped),
		cmocka_unit_test(ring_condemned_ring_keeps_its_marks_and_counts),
		cmocka_unit_test(ring_hostile_header_inside_a_run_is_refused),
		cmocka_unit_test(ring_random_corruption_stays_inside),
	};
	size_t n = 0;
	int failed;

	for (size_t i = 0; i < N_CONTROL; i++, n++) {
		snprintf(names[n], sizeof(names[n]), "ring_corrupted_control_is_refused/%s",
			 control_cases[i].name);
		table[n] = (struct CMUnitTest){ names[n], ring_corrupted_control_is_refused,
						NULL, NULL, (void *)&control_cases[i] };
	}
	for (size_t i = 0; i < N_RECORD; i++, n++) {
		snprintf(names[n], sizeof(names[n]), "ring_corrupted_record_is_refused/%s",
			 record_cases[i].name);
		table[n] = (struct CMUnitTest){ names[n], ring_corrupted_record_is_refused,
						NULL, NULL, (void *)&record_cases[i] };
	}
	failed = _cmocka_run_group_tests("ring_fault_table", table, n, NULL, NULL);
	failed += cmocka_run_group_tests_name("ring_fault", fixed, NULL, NULL);
	return failed ? 1 : 0;
}
