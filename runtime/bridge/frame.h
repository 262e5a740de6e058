/* SPDX-License-Identifier: MIT */
/*
 * Link frames between the bridges of two hosts: the encoder and the decoder
 * (docs/hosts.md, "A frame, byte by byte"). Pure C over byte buffers: no
 * UCX, no allocation, no system call, so the decoder can be fuzzed alone.
 *
 * A frame comes from another host: it is hostile input. shoal__frame_decode()
 * checks the header and every record's bounds before the caller sees any of
 * them; after it returns 0, shoal__frame_next() walks the records with no
 * further check needed and never reads outside the buffer.
 *
 * Private to the runtime; never installed.
 */
#ifndef SHOAL_RUNTIME_BRIDGE_FRAME_H
#define SHOAL_RUNTIME_BRIDGE_FRAME_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <shoal/api.h>
#include <shoal/message.h>

#define SHOAL__FRAME_MAGIC   UINT32_C(0x4b4e4c53)   /* "SLNK" */
#define SHOAL__FRAME_VERSION 1u
#define SHOAL__FRAME_HDR     40u                    /* header bytes */
#define SHOAL__FRAME_REC_HDR 8u                     /* record header bytes */
/* The largest record: a message of the largest type, envelope included. */
#define SHOAL__FRAME_REC_MAX (SHOAL_TYPE_MAX_SIZE + (uint32_t)sizeof(struct shoal_envelope))
/* The largest frame: room for one largest record, and a power of two. */
#define SHOAL__FRAME_MAX     (2u * SHOAL_TYPE_MAX_SIZE)
#define SHOAL__FRAME_FLAGS   0u                     /* none defined: any bit is refused */
#define SHOAL__FRAME_REC_FLAGS 0u

enum shoal__frame_kind {
	SHOAL__FRAME_DATA = 1,   /* count >= 1 records */
	SHOAL__FRAME_ACK = 2,    /* ack and credits only */
	SHOAL__FRAME_HELLO = 3,  /* first frame on a connection: epoch, ack, oldest kept */
};

/* A decoded header, in host byte order. */
struct shoal__frame_hdr {
	uint8_t kind;            /* enum shoal__frame_kind */
	uint16_t flags;
	uint32_t epoch;          /* the sender's, never 0 */
	uint32_t count;          /* records */
	uint64_t first_seq;      /* DATA: its first record's number; ACK: the sender's next;
				  * HELLO: the oldest the sender still holds */
	uint64_t ack;            /* the other direction: every record below it is released */
	uint32_t credits;        /* bytes of records accepted beyond ack */
	uint32_t len;            /* whole frame, header included */
};

/* One record of a decoded frame; `data` points into the frame's buffer. */
struct shoal__frame_rec {
	const void *data;
	uint32_t len;
	uint16_t tag;
};

/* A walk over the records of a frame shoal__frame_decode() accepted. */
struct shoal__frame_iter {
	const unsigned char *p;
	const unsigned char *end;
	uint32_t left;
};

/* An encoder writing one frame into a caller's buffer. */
struct shoal__frame_enc {
	unsigned char *buf;
	uint32_t cap;
	uint32_t len;
	uint32_t count;
	uint8_t kind;
};

/*
 * Bytes a record of `len` bytes takes in a frame: header and padding. Valid
 * for len <= SHOAL__FRAME_REC_MAX (no overflow); a pure function.
 */
static inline uint32_t shoal__frame_rec_size(uint32_t len)
{
	return SHOAL__FRAME_REC_HDR + ((len + 7u) & ~7u);
}

/* v at p, little-endian, any alignment: one store on a little-endian
 * host (a loop of byte stores was left a loop, 58 instructions). */
static inline void shoal__frame_put64(void *p, uint64_t v)
{
	uint64_t le = htole64(v);

	memcpy(p, &le, sizeof(le));
}

/* A record header's length field, at p (little-endian, any alignment). */
static inline uint32_t shoal__frame_rec_len(const void *p)
{
	const unsigned char *b = p;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* A record header's tag field, at p. */
static inline uint16_t shoal__frame_rec_tag(const void *p)
{
	const unsigned char *b = p;

	return (uint16_t)(b[4] | b[5] << 8);
}

/* A record header's flags field, at p. */
static inline uint16_t shoal__frame_rec_flags(const void *p)
{
	const unsigned char *b = p;

	return (uint16_t)(b[6] | b[7] << 8);
}

/*
 * Check `len` bytes received from a peer as one frame and decode its header
 * into *h. Every record is checked too: its header lies inside the frame,
 * its length is at most SHOAL__FRAME_REC_MAX and its bytes end inside the
 * frame, its flags are 0, and the records end exactly at the frame's end.
 * Reads only buf[0, len). No allocation.
 *
 * Returns 0, or, with a reason in *err (may be NULL) and *h undefined:
 *   -EBADMSG          shorter than a header, `len` field other than the
 *                     bytes received, a record that overruns the frame,
 *                     bytes after the last record, a count that does not
 *                     fit its kind, or epoch 0;
 *   -EPROTO           wrong magic (not a Shoal link frame);
 *   -EPROTONOSUPPORT  another version;
 *   -EINVAL           unknown kind, frame or record flags;
 *   -EMSGSIZE         frame longer than SHOAL__FRAME_MAX, or a record
 *                     longer than SHOAL__FRAME_REC_MAX.
 */
int shoal__frame_decode(const void *buf, size_t len, struct shoal__frame_hdr *h,
			struct shoal_err *err);

/* Start a walk over the records of `buf`, a frame that decoded into *h. */
void shoal__frame_iter_init(struct shoal__frame_iter *it, const void *buf,
			    const struct shoal__frame_hdr *h);

/*
 * The next record of the walk into *rec; false after the last. Valid only
 * on a frame shoal__frame_decode() accepted, and while its buffer is.
 */
bool shoal__frame_next(struct shoal__frame_iter *it, struct shoal__frame_rec *rec);

/*
 * Start a frame of `kind` in buf[0, cap). Returns 0, or -EINVAL (unknown
 * kind, cap smaller than a header or larger than SHOAL__FRAME_MAX); nothing
 * is written on failure.
 */
int shoal__frame_begin(struct shoal__frame_enc *e, void *buf, uint32_t cap, uint8_t kind);

/*
 * Append a record of `len` bytes to a DATA frame. Returns 0; -ENOSPC if it
 * does not fit in what is left of the buffer (the frame is unchanged: send
 * it and start another); -EMSGSIZE if len > SHOAL__FRAME_REC_MAX; -EINVAL if
 * the frame is not DATA.
 */
int shoal__frame_add(struct shoal__frame_enc *e, const void *data, uint32_t len, uint16_t tag);

/*
 * Write one record at p as a frame holds it: header, `len` bytes of data,
 * zero padding; shoal__frame_rec_size(len) bytes in all. `flags` other
 * than 0 only for a writer's own layout (the link's send queue marks its
 * fillers), never in a frame. For a writer that lays records out itself
 * and sends them with shoal__frame_add_laid().
 */
static inline void shoal__frame_rec_write(void *p, const void *data, uint32_t len, uint16_t tag,
					  uint16_t flags)
{
	unsigned char *b = p;
	uint32_t size = shoal__frame_rec_size(len);

	/* Zero padding, so that a frame's bytes depend only on its content:
	 * the padding is under 8 bytes, so zeroing the record's last 8 (one
	 * store, not a memset() call of a computed length) before the header
	 * and the bytes are written over them leaves exactly it zero. */
	memset(b + size - SHOAL__FRAME_REC_HDR, 0, SHOAL__FRAME_REC_HDR);
	shoal__frame_put64(b, (uint64_t)len | (uint64_t)tag << 32 | (uint64_t)flags << 48);
	if (len && data)   /* an empty record may come with data NULL */
		memcpy(b + SHOAL__FRAME_REC_HDR, data, len);
}

/*
 * Count `n` records of `bytes` in all, written with shoal__frame_rec_write()
 * and sent right after the header from elsewhere (a gathered send): the
 * encoder's buffer then holds only the header. Returns 0, or -ENOSPC (the
 * frame is unchanged) when they do not fit in the frame's capacity, or
 * -EINVAL if the frame is not DATA.
 */
int shoal__frame_add_laid(struct shoal__frame_enc *e, uint32_t n, uint32_t bytes);

/*
 * Whether a record of `len` bytes fits in what is left of the frame: true
 * exactly when shoal__frame_add() of it on a DATA frame would succeed. Pure.
 */
static inline bool shoal__frame_fits(const struct shoal__frame_enc *e, uint32_t len)
{
	return len <= SHOAL__FRAME_REC_MAX && shoal__frame_rec_size(len) <= e->cap - e->len;
}

/*
 * Write the header and return the frame's length in bytes. A DATA frame
 * must hold at least one record, other kinds none, and `epoch` must not be
 * 0 (a broken invariant aborts). Never fails otherwise.
 */
uint32_t shoal__frame_end(struct shoal__frame_enc *e, uint32_t epoch, uint64_t first_seq,
			  uint64_t ack, uint32_t credits);

/*
 * Concurrency: every call works on the buffers and the encoder or walk it
 * is given and keeps no other state; calls on different buffers may run
 * together in any threads ("-"), calls on one encoder or walk may not ("X").
 *
 *                      decode  iter_*  enc (begin/add/end)
 *   decode               -       -       -
 *   iter_* (same walk)   -       X       -
 *   enc (same encoder)   -       -       X
 */

#endif
