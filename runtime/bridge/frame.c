/* SPDX-License-Identifier: MIT */
/*
 * Link frames: encoder and decoder (see frame.h and docs/hosts.md).
 *
 * Every multi-byte field is read and written byte by byte in little-endian
 * order, so a frame means the same on any host and no access is misaligned
 * whatever buffer UCP hands us. The decoder computes every bound in 64 bits
 * from values it has already checked, so no sum of peer-supplied lengths
 * can wrap.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "runtime/bridge/frame.h"
#include "shm/util.h"

static_assert(SHOAL__FRAME_MAX >= SHOAL__FRAME_HDR + SHOAL__FRAME_REC_HDR + SHOAL__FRAME_REC_MAX,
	      "a frame holds the largest record");
static_assert(SHOAL__FRAME_REC_MAX % 8 == 0, "record bound keeps 8-byte alignment");

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static int check_header(const unsigned char *b, size_t len, struct shoal__frame_hdr *h,
			struct shoal_err *err)
{
	uint32_t magic;
	uint8_t version;

	if (len < SHOAL__FRAME_HDR)
		return shoal__fail(err, -EBADMSG,
				   "frame of %zu bytes is shorter than its %u-byte header", len,
				   SHOAL__FRAME_HDR);
	magic = get32(b);
	if (magic != SHOAL__FRAME_MAGIC)
		return shoal__fail(err, -EPROTO, "bad magic 0x%08x: not a Shoal link frame", magic);
	version = b[4];
	if (version != SHOAL__FRAME_VERSION)
		return shoal__fail(err, -EPROTONOSUPPORT, "frame version %u, this build speaks %u",
				   version, SHOAL__FRAME_VERSION);
	h->kind = b[5];
	h->flags = get16(b + 6);
	h->epoch = get32(b + 8);
	h->count = get32(b + 12);
	h->first_seq = get64(b + 16);
	h->ack = get64(b + 24);
	h->credits = get32(b + 32);
	h->len = get32(b + 36);
	if (len > SHOAL__FRAME_MAX)
		return shoal__fail(err, -EMSGSIZE, "frame of %zu bytes, the limit is %u", len,
				   SHOAL__FRAME_MAX);
	if (h->len != len)
		return shoal__fail(err, -EBADMSG, "frame says %u bytes, %zu received", h->len, len);
	if (h->kind < SHOAL__FRAME_DATA || h->kind > SHOAL__FRAME_HELLO)
		return shoal__fail(err, -EINVAL, "unknown frame kind %u", h->kind);
	if (h->flags & ~SHOAL__FRAME_FLAGS)
		return shoal__fail(err, -EINVAL, "unknown frame flags 0x%x", h->flags);
	if (h->epoch == 0)
		return shoal__fail(err, -EBADMSG, "frame of epoch 0");
	if ((h->kind == SHOAL__FRAME_DATA) != (h->count != 0))
		return shoal__fail(err, -EBADMSG, "frame of kind %u with %u records", h->kind,
				   h->count);
	if (h->count > (len - SHOAL__FRAME_HDR) / SHOAL__FRAME_REC_HDR)
		return shoal__fail(err, -EBADMSG, "%u records cannot fit in %zu bytes", h->count,
				   len);
	return 0;
}

int shoal__frame_decode(const void *buf, size_t len, struct shoal__frame_hdr *h,
			struct shoal_err *err)
{
	const unsigned char *b = buf;
	uint64_t off = SHOAL__FRAME_HDR;
	int ret = check_header(b, len, h, err);

	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < h->count; i++) {
		uint32_t rlen, rflags;

		/* off <= len here: it started at the header's end and each step
		 * below was checked to end inside the frame. */
		if (len - off < SHOAL__FRAME_REC_HDR)
			return shoal__fail(err, -EBADMSG,
					   "record %u of %u: header past the frame's end", i,
					   h->count);
		rlen = shoal__frame_rec_len(b + off);
		rflags = shoal__frame_rec_flags(b + off);
		if (rlen > SHOAL__FRAME_REC_MAX)
			return shoal__fail(err, -EMSGSIZE, "record %u: %u bytes, the limit is %u",
					   i, rlen, SHOAL__FRAME_REC_MAX);
		if (rflags & ~SHOAL__FRAME_REC_FLAGS)
			return shoal__fail(err, -EINVAL, "record %u: unknown flags 0x%x", i,
					   rflags);
		if (shoal__frame_rec_size(rlen) > len - off)
			return shoal__fail(err, -EBADMSG,
					   "record %u: %u bytes past the frame's end", i, rlen);
		off += shoal__frame_rec_size(rlen);
	}
	if (off != len)
		return shoal__fail(err, -EBADMSG, "%llu bytes after the last record",
				   (unsigned long long)(len - off));
	return 0;
}

void shoal__frame_iter_init(struct shoal__frame_iter *it, const void *buf,
			    const struct shoal__frame_hdr *h)
{
	it->p = (const unsigned char *)buf + SHOAL__FRAME_HDR;
	it->end = (const unsigned char *)buf + h->len;
	it->left = h->count;
}

bool shoal__frame_next(struct shoal__frame_iter *it, struct shoal__frame_rec *rec)
{
	if (it->left == 0)
		return false;
	rec->len = shoal__frame_rec_len(it->p);
	rec->tag = shoal__frame_rec_tag(it->p);
	rec->data = it->p + SHOAL__FRAME_REC_HDR;
	it->p += shoal__frame_rec_size(rec->len);
	it->left--;
	return true;
}

int shoal__frame_begin(struct shoal__frame_enc *e, void *buf, uint32_t cap, uint8_t kind)
{
	if (kind < SHOAL__FRAME_DATA || kind > SHOAL__FRAME_HELLO || cap < SHOAL__FRAME_HDR ||
	    cap > SHOAL__FRAME_MAX)
		return -EINVAL;
	e->buf = buf;
	e->cap = cap;
	e->len = SHOAL__FRAME_HDR;
	e->count = 0;
	e->kind = kind;
	return 0;
}

int shoal__frame_add(struct shoal__frame_enc *e, const void *data, uint32_t len, uint16_t tag)
{
	if (e->kind != SHOAL__FRAME_DATA)
		return -EINVAL;
	if (len > SHOAL__FRAME_REC_MAX)
		return -EMSGSIZE;
	if (!shoal__frame_fits(e, len))
		return -ENOSPC;
	shoal__frame_rec_write(e->buf + e->len, data, len, tag, 0);
	e->len += shoal__frame_rec_size(len);
	e->count++;
	return 0;
}

int shoal__frame_add_laid(struct shoal__frame_enc *e, uint32_t n, uint32_t bytes)
{
	if (e->kind != SHOAL__FRAME_DATA)
		return -EINVAL;
	if (bytes > e->cap - e->len)
		return -ENOSPC;
	e->len += bytes;
	e->count += n;
	return 0;
}

uint32_t shoal__frame_end(struct shoal__frame_enc *e, uint32_t epoch, uint64_t first_seq,
			  uint64_t ack, uint32_t credits)
{
	unsigned char *b = e->buf;

	SHOAL_ASSERT((e->kind == SHOAL__FRAME_DATA) == (e->count != 0));
	SHOAL_ASSERT(epoch != 0);
	put32(b, SHOAL__FRAME_MAGIC);
	b[4] = SHOAL__FRAME_VERSION;
	b[5] = e->kind;
	put16(b + 6, 0);
	put32(b + 8, epoch);
	put32(b + 12, e->count);
	shoal__frame_put64(b + 16, first_seq);
	shoal__frame_put64(b + 24, ack);
	put32(b + 32, credits);
	put32(b + 36, e->len);
	return e->len;
}
