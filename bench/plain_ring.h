/* SPDX-License-Identifier: MIT */
/*
 * The plain fixed-slot SPSC ring: the limit the benchmarks measure Shoal
 * against (shoal-bench-ring's `plain` contender, shoal-bench-system's plain
 * forwarder). It is what a careful program writes for one producer, one
 * consumer and messages of one size, and nothing else: no record header, no
 * variable length, no crash recovery, no condemned state. Whatever Shoal
 * costs above it is the price of those. Private to bench/; never a part of
 * Shoal.
 *
 * Memory picture (one region of shared memory, 128-byte aligned):
 *   bytes   0..127  head: slots the producer has published (its line)
 *   bytes 128..255  tail: slots the consumer has released (its line)
 *   bytes 256..383  slot size and slot count, written once by init
 *   then count x size bytes of slots.
 * The lines are 128 bytes apart, not 64, because the adjacent-line
 * prefetcher moves lines in pairs (SHOAL_FALSE_SHARING).
 *
 * Index arithmetic: head and tail are free-running uint32_t counts of
 * slots; count is a power of two; slot i lives at (i & (count - 1)) * size.
 * Full when head - tail == count, empty when head == tail. Every index
 * read from shared memory is masked before use, so a wrong one from a
 * broken peer can garble messages but never reach outside the slots.
 *
 * Each side keeps its own index and a cached copy of the other side's in
 * its process-local handle. The producer reads tail only when its copy
 * says there is not room for what it wants to write; the consumer reads
 * head only when its copy says the ring is empty. So in steady streaming
 * each side touches the other's line once per lap of the cached distance,
 * not once per message, and a batch is published with one release store.
 *
 * Ordering guarantees:
 *   R1 (producer: release store of head, plain_prod_publish()) pairs with
 *      A1 (consumer: acquire load of head, plain_cons_avail()): the slots'
 *      bytes are written before the consumer reads them.
 *   R2 (consumer: release store of tail, plain_cons_release()) pairs with
 *      A2 (producer: acquire load of tail, plain_prod_room()): the consumer
 *      has read the slots before the producer writes them again.
 * Progress: every call is wait-free; waiting for room or messages is the
 * caller's loop. One producer thread and one consumer thread at a time, in
 * any processes; init only while neither side runs.
 */
#ifndef SHOAL_BENCH_PLAIN_RING_H
#define SHOAL_BENCH_PLAIN_RING_H

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/atomic.h"

struct plain_ring {
	_Alignas(SHOAL_FALSE_SHARING) _Atomic uint32_t head;   /* written by the producer */
	_Alignas(SHOAL_FALSE_SHARING) _Atomic uint32_t tail;   /* written by the consumer */
	_Alignas(SHOAL_FALSE_SHARING) uint32_t slot_size;      /* written by init */
	uint32_t count;
};

static_assert(offsetof(struct plain_ring, tail) == SHOAL_FALSE_SHARING, "plain ring layout");
static_assert(sizeof(struct plain_ring) == 3 * SHOAL_FALSE_SHARING, "plain ring layout");

/* The ring's geometry, copied into each process-local handle at attach, so
 * that the hot path reads only its own index line and, rarely, the other's. */
struct plain_geom {
	struct plain_ring *r;
	unsigned char *slots;
	uint32_t size, mask;
};

struct plain_prod {
	struct plain_geom g;
	uint32_t head;            /* next slot to write */
	uint32_t tail_seen;       /* the consumer's tail, last read */
};

struct plain_cons {
	struct plain_geom g;
	uint32_t tail;            /* next slot to read */
	uint32_t head_seen;       /* the producer's head, last read */
};

/* Bytes a ring of `count` slots of `slot_size` bytes takes. */
static inline uint64_t plain_ring_size(uint32_t slot_size, uint32_t count)
{
	return sizeof(struct plain_ring) + (uint64_t)slot_size * count;
}

/* Whether a geometry is one this header accepts. */
static inline bool plain_ring_geometry_ok(uint32_t slot_size, uint32_t count, uint64_t len)
{
	return slot_size > 0 && slot_size % 8 == 0 && count > 0 && (count & (count - 1)) == 0 &&
	       plain_ring_size(slot_size, count) <= len;
}

/* Lay out an empty ring in `mem` (`len` bytes, 128-byte aligned), with no
 * side attached. Returns 0, or -EINVAL (slot size not a multiple of 8,
 * count not a power of two, or too small a region) with nothing changed. */
static inline int plain_ring_init(void *mem, uint64_t len, uint32_t slot_size, uint32_t count)
{
	struct plain_ring *r = mem;

	if (!plain_ring_geometry_ok(slot_size, count, len))
		return -EINVAL;
	/* Relaxed: no side runs yet; whatever starts them (fork, a barrier)
	 * publishes these. */
	shoal_store_relaxed(&r->head, 0);
	shoal_store_relaxed(&r->tail, 0);
	r->slot_size = slot_size;
	r->count = count;
	return 0;
}

/* The geometry of the ring in `mem`: 0, or -EINVAL if it does not fit `len`. */
static inline int plain_attach(struct plain_geom *g, void *mem, uint64_t len)
{
	g->r = mem;
	if (!plain_ring_geometry_ok(g->r->slot_size, g->r->count, len))
		return -EINVAL;
	g->slots = (unsigned char *)(g->r + 1);
	g->size = g->r->slot_size;
	g->mask = g->r->count - 1;
	return 0;
}

static inline int plain_prod_attach(struct plain_prod *p, void *mem, uint64_t len)
{
	int ret = plain_attach(&p->g, mem, len);

	/* Relaxed: this side's own index, last written by this side (or
	 * init), ordered by whatever started it. */
	p->head = shoal_load_relaxed(&p->g.r->head);
	p->tail_seen = p->head;
	return ret;
}

static inline int plain_cons_attach(struct plain_cons *c, void *mem, uint64_t len)
{
	int ret = plain_attach(&c->g, mem, len);

	/* Relaxed: as in plain_prod_attach(). */
	c->tail = shoal_load_relaxed(&c->g.r->tail);
	c->head_seen = c->tail;
	return ret;
}

/* How many of the next `want` slots (at most the ring's count) the
 * producer may write now: `want`, or fewer when the ring is that full. */
static inline uint32_t plain_prod_room(struct plain_prod *p, uint32_t want)
{
	uint32_t room = p->g.mask + 1 - (p->head - p->tail_seen);

	if (room < want) {
		/* A2: pairs with R2 in plain_cons_release(): the slots are read
		 * before we write them again. */
		p->tail_seen = shoal_load_acquire(&p->g.r->tail);
		room = p->g.mask + 1 - (p->head - p->tail_seen);
	}
	return room < want ? room : want;
}

/* Slot k past the producer's head (k below what plain_prod_room() gave). */
static inline void *plain_prod_slot(const struct plain_prod *p, uint32_t k)
{
	return p->g.slots + (size_t)((p->head + k) & p->g.mask) * p->g.size;
}

/* Publish the next n written slots, with one store. */
static inline void plain_prod_publish(struct plain_prod *p, uint32_t n)
{
	p->head += n;
	/* R1: pairs with A1 in plain_cons_avail(): the slots before head. */
	shoal_store_release(&p->g.r->head, p->head);
}

/* How many slots, up to `want`, the consumer may read now; 0 when empty. */
static inline uint32_t plain_cons_avail(struct plain_cons *c, uint32_t want)
{
	uint32_t n = c->head_seen - c->tail;

	if (n == 0) {
		/* A1: pairs with R1 in plain_prod_publish(). */
		c->head_seen = shoal_load_acquire(&c->g.r->head);
		n = c->head_seen - c->tail;
	}
	return n < want ? n : want;
}

/* Slot k past the consumer's tail (k below what plain_cons_avail() gave). */
static inline const void *plain_cons_slot(const struct plain_cons *c, uint32_t k)
{
	return c->g.slots + (size_t)((c->tail + k) & c->g.mask) * c->g.size;
}

/* Hand the next n read slots back to the producer, with one store. */
static inline void plain_cons_release(struct plain_cons *c, uint32_t n)
{
	c->tail += n;
	/* R2: pairs with A2 in plain_prod_room(): done reading before tail. */
	shoal_store_release(&c->g.r->tail, c->tail);
}

#endif
