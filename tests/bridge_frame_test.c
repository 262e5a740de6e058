/* SPDX-License-Identifier: MIT */
/*
 * The link frame codec (runtime/bridge/frame.c): frames round-trip byte for
 * byte as docs/hosts.md lays them out, the encoder refuses what would not
 * fit, and every way a peer's bytes can be wrong is refused with its own
 * error and never read past the received length.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/message.h>

#include "runtime/bridge/frame.h"
#include "tests/testutil.h"

static unsigned char frame[4096];

/* Three records of 0, 5 and 56 + 8 bytes (an envelope and a payload). */
static uint32_t make_three(void)
{
	struct shoal__frame_enc e;
	unsigned char msg[sizeof(struct shoal_envelope) + 8];
	struct shoal_envelope env = { .type = 3, .len = 8, .sender = 1, .dest = 2 };

	memcpy(msg, &env, sizeof(env));
	memset(msg + sizeof(env), 0xee, 8);
	assert_int_equal(shoal__frame_begin(&e, frame, sizeof(frame), SHOAL__FRAME_DATA), 0);
	assert_int_equal(shoal__frame_add(&e, NULL, 0, 1), 0);
	assert_int_equal(shoal__frame_add(&e, "hello", 5, 2), 0);
	assert_int_equal(shoal__frame_add(&e, msg, sizeof(msg), 0xffff), 0);
	return shoal__frame_end(&e, 0x01020304u, 100, 77, 65536);
}

static void frame_round_trips_header_and_records(void **state)
{
	struct shoal__frame_hdr h;
	struct shoal__frame_iter it;
	struct shoal__frame_rec r;
	struct shoal_envelope env;
	uint32_t len = make_three();

	(void)state;
	assert_int_equal(len, SHOAL__FRAME_HDR + 8 + (8 + 8) + (8 + 64));
	assert_int_equal(shoal__frame_decode(frame, len, &h, NULL), 0);
	assert_int_equal(h.kind, SHOAL__FRAME_DATA);
	assert_int_equal(h.epoch, 0x01020304u);
	assert_int_equal(h.count, 3);
	assert_int_equal(h.first_seq, 100);
	assert_int_equal(h.ack, 77);
	assert_int_equal(h.credits, 65536);
	assert_int_equal(h.len, len);
	shoal__frame_iter_init(&it, frame, &h);
	assert_true(shoal__frame_next(&it, &r));
	assert_int_equal(r.len, 0);
	assert_int_equal(r.tag, 1);
	assert_true(shoal__frame_next(&it, &r));
	assert_int_equal(r.len, 5);
	assert_int_equal(r.tag, 2);
	assert_memory_equal(r.data, "hello", 5);
	assert_true(shoal__frame_next(&it, &r));
	assert_int_equal(r.len, 64);
	assert_int_equal(r.tag, 0xffff);
	/* The envelope sits 8-byte aligned, as in a ring. */
	assert_int_equal(((const unsigned char *)r.data - frame) % 8, 0);
	memcpy(&env, r.data, sizeof(env));
	assert_int_equal(env.type, 3);
	assert_int_equal(env.dest, 2);
	assert_false(shoal__frame_next(&it, &r));
}

/* The layout of docs/hosts.md, byte by byte, little-endian. */
static void frame_bytes_follow_the_documented_layout(void **state)
{
	static const unsigned char hdr[SHOAL__FRAME_HDR] = {
		'S', 'L', 'N', 'K', 1, 1, 0, 0,          /* magic, version, kind, flags */
		4, 3, 2, 1, 3, 0, 0, 0,                  /* epoch, count */
		100, 0, 0, 0, 0, 0, 0, 0,                /* first_seq */
		77, 0, 0, 0, 0, 0, 0, 0,                 /* ack */
		0, 0, 1, 0, 136, 0, 0, 0,                /* credits, len */
	};
	static const unsigned char rec1[16] = { 5, 0, 0, 0, 2, 0, 0, 0,
						'h', 'e', 'l', 'l', 'o', 0, 0, 0 };

	(void)state;
	assert_int_equal(make_three(), 136);
	assert_memory_equal(frame, hdr, sizeof(hdr));
	assert_memory_equal(frame + SHOAL__FRAME_HDR + 8, rec1, sizeof(rec1));
}

static void frame_ack_and_hello_carry_no_records(void **state)
{
	static const uint8_t kinds[] = { SHOAL__FRAME_ACK, SHOAL__FRAME_HELLO };
	struct shoal__frame_enc e;
	struct shoal__frame_hdr h;

	(void)state;
	for (size_t i = 0; i < sizeof(kinds); i++) {
		assert_int_equal(shoal__frame_begin(&e, frame, SHOAL__FRAME_HDR, kinds[i]), 0);
		assert_int_equal(shoal__frame_add(&e, "x", 1, 0), -EINVAL);
		assert_int_equal(shoal__frame_end(&e, 9, UINT64_MAX, UINT64_MAX - 1, 0),
				 SHOAL__FRAME_HDR);
		assert_int_equal(shoal__frame_decode(frame, SHOAL__FRAME_HDR, &h, NULL), 0);
		assert_int_equal(h.kind, kinds[i]);
		assert_int_equal(h.count, 0);
		assert_true(h.first_seq == UINT64_MAX && h.ack == UINT64_MAX - 1);
	}
}

static void frame_add_refuses_what_does_not_fit(void **state)
{
	struct shoal__frame_enc e;
	unsigned char *big = calloc(1, SHOAL__FRAME_REC_MAX + 1);

	(void)state;
	assert_non_null(big);
	assert_int_equal(shoal__frame_begin(&e, frame, SHOAL__FRAME_HDR + 24, SHOAL__FRAME_DATA),
			 0);
	assert_true(shoal__frame_fits(&e, 16));
	assert_false(shoal__frame_fits(&e, 17));
	assert_int_equal(shoal__frame_add(&e, big, 17, 0), -ENOSPC);
	assert_int_equal(e.len, SHOAL__FRAME_HDR);
	assert_int_equal(shoal__frame_add(&e, big, 16, 0), 0);
	assert_int_equal(shoal__frame_add(&e, big, 0, 0), -ENOSPC);
	assert_int_equal(shoal__frame_add(&e, big, SHOAL__FRAME_REC_MAX + 1, 0), -EMSGSIZE);
	assert_int_equal(shoal__frame_begin(&e, frame, SHOAL__FRAME_HDR - 1, SHOAL__FRAME_DATA),
			 -EINVAL);
	assert_int_equal(shoal__frame_begin(&e, frame, SHOAL__FRAME_MAX + 1, SHOAL__FRAME_DATA),
			 -EINVAL);
	assert_int_equal(shoal__frame_begin(&e, frame, sizeof(frame), 0), -EINVAL);
	assert_int_equal(shoal__frame_begin(&e, frame, sizeof(frame), 4), -EINVAL);
	free(big);
}

/* The largest record travels alone in a frame of the largest size. */
static void frame_carries_the_largest_record(void **state)
{
	unsigned char *buf = calloc(1, SHOAL__FRAME_MAX);
	unsigned char *big = malloc(SHOAL__FRAME_REC_MAX);
	struct shoal__frame_enc e;
	struct shoal__frame_hdr h;
	struct shoal__frame_iter it;
	struct shoal__frame_rec r;
	uint32_t len;

	(void)state;
	assert_non_null(buf);
	assert_non_null(big);
	memset(big, 0x5a, SHOAL__FRAME_REC_MAX);
	assert_int_equal(shoal__frame_begin(&e, buf, SHOAL__FRAME_MAX, SHOAL__FRAME_DATA), 0);
	assert_int_equal(shoal__frame_add(&e, big, SHOAL__FRAME_REC_MAX, 7), 0);
	len = shoal__frame_end(&e, 1, 0, 0, 0);
	assert_int_equal(shoal__frame_decode(buf, len, &h, NULL), 0);
	shoal__frame_iter_init(&it, buf, &h);
	assert_true(shoal__frame_next(&it, &r));
	assert_int_equal(r.len, SHOAL__FRAME_REC_MAX);
	assert_memory_equal(r.data, big, SHOAL__FRAME_REC_MAX);
	free(big);
	free(buf);
}

/* Hostile frames: one change to a valid frame each, and the error it gets. */
static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

enum { OFF_REC0 = SHOAL__FRAME_HDR, OFF_REC1 = SHOAL__FRAME_HDR + 8,
       OFF_REC2 = SHOAL__FRAME_HDR + 24 };

static const struct {
	const char *what;
	int off;             /* where to write `val`, -1: nothing */
	int width;           /* 1, 2 or 4 bytes */
	uint32_t val;
	int trim;            /* bytes received fewer (negative: more) than the frame */
	int expect;
} hostile[] = {
	{ "wrong magic", 0, 4, 0x4b4e4c54, 0, -EPROTO },
	{ "another version", 4, 1, 2, 0, -EPROTONOSUPPORT },
	{ "kind 0", 5, 1, 0, 0, -EINVAL },
	{ "kind 4", 5, 1, 4, 0, -EINVAL },
	{ "a flag", 6, 2, 1, 0, -EINVAL },
	{ "epoch 0", 8, 4, 0, 0, -EBADMSG },
	{ "no records in DATA", 12, 4, 0, 0, -EBADMSG },
	{ "records in an ACK", 5, 1, SHOAL__FRAME_ACK, 0, -EBADMSG },
	{ "count beyond the bytes", 12, 4, UINT32_MAX, 0, -EBADMSG },
	{ "one record too many", 12, 4, 4, 0, -EBADMSG },
	{ "one record too few", 12, 4, 2, 0, -EBADMSG },
	{ "len field larger", 36, 4, 144, 0, -EBADMSG },
	{ "len field smaller", 36, 4, 128, 0, -EBADMSG },
	{ "truncated", -1, 0, 0, 8, -EBADMSG },
	{ "bytes after the frame", -1, 0, 0, -8, -EBADMSG },
	{ "shorter than a header", -1, 0, 0, 136 - 39, -EBADMSG },
	{ "empty", -1, 0, 0, 136, -EBADMSG },
	{ "record past the end", OFF_REC2, 4, 65, 0, -EBADMSG },
	{ "record length 2^32-1", OFF_REC1, 4, UINT32_MAX, 0, -EMSGSIZE },
	{ "record longer than the limit", OFF_REC0, 4, SHOAL__FRAME_REC_MAX + 1, 0, -EMSGSIZE },
	{ "record flags", OFF_REC1 + 6, 2, 1, 0, -EINVAL },
	{ "record shorter: bytes left over", OFF_REC2, 4, 56, 0, -EBADMSG },
};

static void frame_decode_refuses_each_hostile_change(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		struct shoal__frame_hdr h;
		struct shoal_err err = { "" };
		uint32_t len = make_three();
		size_t got;
		unsigned char *copy;
		int ret;

		if (hostile[i].off >= 0) {
			unsigned char *p = frame + hostile[i].off;

			if (hostile[i].width == 1)
				p[0] = (unsigned char)hostile[i].val;
			else if (hostile[i].width == 2)
				p[0] = (unsigned char)hostile[i].val,
				p[1] = (unsigned char)(hostile[i].val >> 8);
			else
				put32(p, hostile[i].val);
		}
		got = (size_t)((int)len - hostile[i].trim);
		/* Exactly `got` bytes on the heap: a read past them is caught
		 * by the ASan and valgrind setups. */
		copy = malloc(got ? got : 1);
		assert_non_null(copy);
		memcpy(copy, frame, got);
		ret = shoal__frame_decode(copy, got, &h, &err);
		free(copy);
		if (ret != hostile[i].expect)
			fail_msg("%s: %d (%s), expected %d", hostile[i].what, ret, err.msg,
				 hostile[i].expect);
		if (err.msg[0] == '\0')
			fail_msg("%s: no reason given", hostile[i].what);
	}
}

static void frame_decode_refuses_a_frame_over_the_limit(void **state)
{
	unsigned char *buf = calloc(1, SHOAL__FRAME_MAX + 8);
	struct shoal__frame_hdr h;
	struct shoal__frame_enc e;

	(void)state;
	assert_non_null(buf);
	assert_int_equal(shoal__frame_begin(&e, buf, SHOAL__FRAME_HDR, SHOAL__FRAME_ACK), 0);
	shoal__frame_end(&e, 1, 0, 0, 0);
	put32(buf + 36, SHOAL__FRAME_MAX + 8);
	assert_int_equal(shoal__frame_decode(buf, SHOAL__FRAME_MAX + 8, &h, NULL), -EMSGSIZE);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(frame_round_trips_header_and_records),
		cmocka_unit_test(frame_bytes_follow_the_documented_layout),
		cmocka_unit_test(frame_ack_and_hello_carry_no_records),
		cmocka_unit_test(frame_add_refuses_what_does_not_fit),
		cmocka_unit_test(frame_carries_the_largest_record),
		cmocka_unit_test(frame_decode_refuses_each_hostile_change),
		cmocka_unit_test(frame_decode_refuses_a_frame_over_the_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
