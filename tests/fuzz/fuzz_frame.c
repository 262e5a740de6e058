/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: link frames, the bridge's trust boundary between hosts
 * (runtime/bridge/frame.c). The input is one frame as UCP delivers it.
 *
 * Properties checked, beyond "no crash, no read outside the frame":
 *  - shoal__frame_decode() returns 0 or one of its documented errors, with a
 *    terminated reason on failure, and the same answer whether or not it is
 *    asked for the reason;
 *  - an accepted frame has a known kind, no flags, a non-zero epoch, the
 *    length it says, and exactly `count` records (none unless DATA), each
 *    within SHOAL__FRAME_REC_MAX and inside the frame, laid end to end up
 *    to its last byte;
 *  - encoding the decoded header and records again gives a frame of the
 *    same length that decodes to the same header and records.
 *
 * The frame is copied into a buffer of exactly its size (malloc'd): ASan
 * then catches any read past its end.
 */
#include <errno.h>
#include <string.h>

#include "runtime/bridge/frame.h"
#include "tests/fuzz/fuzz.h"

/* Field by field: the struct has padding that decode does not write. */
static int same_hdr(const struct shoal__frame_hdr *a, const struct shoal__frame_hdr *b)
{
	return a->kind == b->kind && a->flags == b->flags && a->epoch == b->epoch &&
	       a->count == b->count && a->first_seq == b->first_seq && a->ack == b->ack &&
	       a->credits == b->credits && a->len == b->len;
}

static void check_accepted(const unsigned char *buf, size_t len, const struct shoal__frame_hdr *h)
{
	struct shoal__frame_iter it;
	struct shoal__frame_rec r;
	struct shoal__frame_enc e;
	struct shoal__frame_hdr h2;
	unsigned char *again = malloc(len);
	const unsigned char *expect = buf + SHOAL__FRAME_HDR;
	uint32_t n = 0;

	FUZZ_CHECK(again != NULL);
	FUZZ_CHECK(h->kind >= SHOAL__FRAME_DATA && h->kind <= SHOAL__FRAME_HELLO);
	FUZZ_CHECK(h->flags == 0 && h->epoch != 0 && h->len == len);
	FUZZ_CHECK((h->kind == SHOAL__FRAME_DATA) == (h->count != 0));
	FUZZ_CHECK(shoal__frame_begin(&e, again, (uint32_t)len, h->kind) == 0);
	shoal__frame_iter_init(&it, buf, h);
	while (shoal__frame_next(&it, &r)) {
		const unsigned char *d = r.data;

		FUZZ_CHECK(d == expect + SHOAL__FRAME_REC_HDR);
		FUZZ_CHECK(r.len <= SHOAL__FRAME_REC_MAX);
		FUZZ_CHECK(r.len <= (size_t)(buf + len - d));
		FUZZ_CHECK(shoal__frame_add(&e, r.data, r.len, r.tag) == 0);
		expect += shoal__frame_rec_size(r.len);
		n++;
	}
	FUZZ_CHECK(n == h->count);
	FUZZ_CHECK(expect == buf + len);
	FUZZ_CHECK(shoal__frame_end(&e, h->epoch, h->first_seq, h->ack, h->credits) == len);
	FUZZ_CHECK(shoal__frame_decode(again, len, &h2, NULL) == 0);
	FUZZ_CHECK(same_hdr(h, &h2));
	/* Header and record headers are the same bytes; only the padding,
	 * which the encoder zeroes, may differ. */
	FUZZ_CHECK(memcmp(buf, again, SHOAL__FRAME_HDR) == 0);
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shoal__frame_hdr h, h_quiet;
	struct shoal_err err;
	unsigned char *buf;
	int ret, ret_quiet;

	if (size > SHOAL__FRAME_MAX + 16)
		return 0;
	buf = fuzz_exact_copy(data, size);
	memset(&err, 0x5a, sizeof(err));
	ret = shoal__frame_decode(buf, size, &h, &err);
	ret_quiet = shoal__frame_decode(buf, size, &h_quiet, NULL);
	FUZZ_CHECK(ret == ret_quiet);
	if (ret < 0) {
		FUZZ_CHECK(ret == -EBADMSG || ret == -EPROTO || ret == -EPROTONOSUPPORT ||
			   ret == -EINVAL || ret == -EMSGSIZE);
		FUZZ_CHECK(memchr(err.msg, '\0', sizeof(err.msg)) != NULL && err.msg[0] != '\0');
	} else {
		FUZZ_CHECK(ret == 0);
		FUZZ_CHECK(same_hdr(&h, &h_quiet));
		check_accepted(buf, size, &h);
	}
	free(buf);
	return 0;
}
