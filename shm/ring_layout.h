/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory layout of a ring: an ABI between processes. Private to
 * shm/ (and the tests that corrupt it on purpose); never installed.
 */
#ifndef SHOAL_SHM_RING_LAYOUT_H
#define SHOAL_SHM_RING_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include <shoal/ring.h>

#include "shm/atomic.h"

#define SHOAL__RING_MAGIC   UINT32_C(0x474e4952) /* "RING" */
#define SHOAL__RING_VERSION 1u
#define SHOAL__RING_DATA_OFF 512u

/* Record header flags (struct shoal__rec_hdr.flags). */
#define SHOAL__REC_PAD 1u   /* filler up to the end of the data area */
#define SHOAL__REC_FLAGS SHOAL__REC_PAD

struct shoal__ring {
	/* Lines 0-1: written once by shoal_ring_init(), read-only after. */
	uint32_t magic;
	uint32_t version;
	uint32_t capacity;       /* data bytes, power of two */
	uint32_t flags;
	uint32_t max_payload;    /* capacity / 2 - record header */
	uint32_t data_off;       /* from the start of this struct */
	uint8_t pad0[SHOAL_FALSE_SHARING - 24];

	/* Lines 2-3: written by the producer only. */
	_Atomic uint32_t tail;            /* free-running byte index */
	_Atomic int32_t producer_pid;
	_Atomic uint64_t records_in;
	_Atomic uint64_t bytes_in;
	_Atomic uint64_t full_events;
	_Atomic uint32_t high_water;
	_Atomic uint32_t prod_condemned;  /* the producer gave the ring up (corrupted) */
	uint8_t pad1[SHOAL_FALSE_SHARING - 40];

	/* Lines 4-5: written by the consumer only. */
	_Atomic uint32_t head;            /* free-running byte index */
	_Atomic int32_t consumer_pid;
	_Atomic uint64_t records_out;
	_Atomic uint64_t bytes_out;
	_Atomic uint32_t cons_condemned;  /* the consumer gave the ring up (corrupted) */
	uint8_t pad2[SHOAL_FALSE_SHARING - 28];

	uint8_t pad3[SHOAL__RING_DATA_OFF - 3 * SHOAL_FALSE_SHARING];
	/* Data area at data_off. */
};

/* A record header: one 8-byte word so that a reader snapshots it in one load. */
struct shoal__rec_hdr {
	uint32_t len;     /* payload bytes */
	uint16_t tag;
	uint16_t flags;   /* SHOAL__REC_* */
};

static_assert(sizeof(struct shoal__ring) == SHOAL__RING_DATA_OFF, "ring control size");
static_assert(offsetof(struct shoal__ring, magic) == 0, "ring ABI");
static_assert(offsetof(struct shoal__ring, capacity) == 8, "ring ABI");
static_assert(offsetof(struct shoal__ring, max_payload) == 16, "ring ABI");
static_assert(offsetof(struct shoal__ring, data_off) == 20, "ring ABI");
static_assert(offsetof(struct shoal__ring, tail) == SHOAL__RING_TAIL_OFF, "ring ABI");
static_assert(offsetof(struct shoal__ring, records_in) == 136, "ring ABI");
static_assert(offsetof(struct shoal__ring, records_in) == SHOAL__RING_RECORDS_IN_OFF, "ring ABI");
static_assert(offsetof(struct shoal__ring, bytes_in) == SHOAL__RING_BYTES_IN_OFF, "ring ABI");
static_assert(offsetof(struct shoal__ring, high_water) == 160, "ring ABI");
static_assert(offsetof(struct shoal__ring, prod_condemned) == 164, "ring ABI");
static_assert(offsetof(struct shoal__ring, head) == 256, "ring ABI");
static_assert(offsetof(struct shoal__ring, cons_condemned) == 280, "ring ABI");
static_assert(offsetof(struct shoal__ring, records_out) == 264, "ring ABI");
static_assert(sizeof(struct shoal__rec_hdr) == 8, "record header ABI");
static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4, "atomic sizes");

#endif
