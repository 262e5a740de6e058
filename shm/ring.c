/* SPDX-License-Identifier: MIT */
/*
 * Single-producer single-consumer ring of variable-length records.
 *
 * Memory picture (offsets from the ring's start, see ring_layout.h):
 *
 *     0   control, immutable after init: magic, version, capacity, max_payload
 *   128   producer line: tail, records_in, bytes_in, full_events, high_water
 *         (bytes in use, sampled when the producer reloads the head)
 *   256   consumer line: head, records_out, bytes_out
 *   512   data area: `capacity` bytes, a power of two
 *
 * The producer and consumer lines are 128 bytes apart so that the adjacent
 * line prefetcher does not make them false-share. Each side keeps a private
 * cache of the other side's index in its process-local handle and reads the
 * shared one only when the cache says "full" (producer) or "empty"
 * (consumer): in steady state each side writes only its own line. The
 * producer's handle also keeps `limit`, how far its tail may grow before
 * the end of the data area or the cached head (prod_set_limit()), so that
 * the inline reserve checks room with one compare.
 *
 * Index arithmetic: head and tail are free-running uint32_t byte counters;
 * `tail - head` (mod 2^32) is the number of bytes in use, never more than the
 * capacity (at most 2^30), and `index & (capacity - 1)` is the offset in the
 * data area. Every record starts 8-byte aligned with an 8-byte header
 * { len, tag, flags } written as one 64-bit word, followed by the payload
 * padded to 8 bytes. A record never wraps: when it does not fit before the end
 * of the data area, the producer fills the rest with a PAD record and starts
 * over at offset 0. A record takes at most capacity / 2 bytes, so whatever the
 * current offset, an empty ring always has room for it on one side or the
 * other of the wrap point. A run (shoal_ring_reserve_run(),
 * shoal_ring_peek_run()) is records with one header word, back to back and
 * never across the end: the consumer checks the first header by every rule
 * and each later one by being equal to it, so a run is validated as its
 * records would be one by one, with one compare each.
 *
 * Ordering guarantees:
 *   R1 (commit, tail store-release) pairs with A1 (consumer tail load-acquire):
 *      the consumer that sees a tail sees every record byte written before it.
 *   R2 (release, head store-release) pairs with A2 (producer head
 *      load-acquire): the producer overwrites bytes only after the consumer
 *      has finished reading them.
 * Counters are written with relaxed stores by their single writer and read by
 * tools with relaxed loads: they order nothing, and a tool may see them lag
 * the indices by one batch.
 *   A walk (a reader that is not the consumer) takes the tail with A1 like
 *   the consumer, copies a record with relaxed loads, then F1 (acquire
 *   fence) and a relaxed re-read of the head: a head that has not passed the
 *   record means the producer had not reused its bytes (it may only after
 *   R2 -> A2 for them), so the copy is whole. A check does the same after a
 *   record that fails its rules: past the head, the failure was the
 *   producer rewriting it (-EAGAIN), not damage. (The producer's payload stores
 *   are plain: docs/memory-ordering.md says what the C11 model makes of it.)
 *
 * Progress guarantees: every operation is wait-free (bounded steps, no loop
 * waits for the other side). A side killed at any instruction leaves the
 * shared indices at a published value: a new consumer resumes at `head`
 * (records peeked but not released are delivered again), a new producer at
 * `tail` (records reserved but not committed are lost: they were never sent).
 *
 * Untrusted memory: the other side may be buggy or hostile. Every index and
 * record header read from shared memory is checked before use (tail - head
 * within capacity, 8-byte alignment, record within the published bytes and
 * the data area, PAD exactly up to the end). A failed check puts the handle in
 * a sticky -EUCLEAN state; nothing is read or written outside the ring.
 *
 * Which calls may run concurrently: one producer-handle call and one
 * consumer-handle call at a time on a ring, plus any number of
 * shoal_ring_stats() / shoal_ring_check() / shoal_ring_condemned() /
 * shoal_ring_records() readers and walks (shoal_ring_walk_*()), each with
 * its own walk state. shoal_ring_condemn() is called by a side on
 * its own line only (SIDE_PROD and SIDE_SETTLED by the producer, SIDE_CONS
 * by the consumer).
 *
 * Condemned rings (DESIGN invariant 10): a side whose handle is in its
 * -EUCLEAN state marks the ring (R3/A3 below) so that its owner replaces it;
 * the record counters stay readable without validating the indices, so that
 * what the ring held can be counted as lost.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shoal/ring.h>

#include "shm/ring_layout.h"
#include "shm/util.h"

static inline struct shoal__rec_hdr hdr_unpack(uint64_t w)
{
	struct shoal__rec_hdr h = {
		.len = (uint32_t)w,
		.tag = (uint16_t)(w >> 32),
		.flags = (uint16_t)(w >> 48),
	};
	return h;
}

static inline _Atomic uint64_t *hdr_at(const unsigned char *data, uint32_t off)
{
	return (_Atomic uint64_t *)(uintptr_t)(data + off);
}

uint64_t shoal_ring_size(uint32_t capacity)
{
	if (capacity < SHOAL_RING_MIN_CAPACITY || capacity > SHOAL_RING_MAX_CAPACITY ||
	    !shoal__is_pow2_u64(capacity))
		return 0;
	return (uint64_t)SHOAL__RING_DATA_OFF + capacity;
}

/*
 * Map every page of the ring into this process now: a page fault is a trip
 * into the kernel, and the data path must not take one. MADV_POPULATE_* is
 * not enough everywhere: on a virtual machine measured for this (bench/
 * README.md), the first access to each page of a new mapping still cost
 * 12-17 us after it, and a read made the page's later writes cheap (20-30
 * ns). So after the advice every page is read once, through this mapping:
 * about 1 ms for a 256 KiB ring, paid at attach or creation, where the data
 * path would otherwise pay it message by message on the ring's first lap.
 * A read changes nothing another process could see.
 */
#if defined(__SANITIZE_THREAD__)
#define PREFAULT_READS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PREFAULT_READS 0
#endif
#endif
#ifndef PREFAULT_READS
/* Under TSan the advice alone: a consumer attaching beside a live producer
 * reads bytes the producer may be writing with plain stores (docs/
 * memory-ordering.md), a race by the C11 model whose value is thrown away,
 * which TSan would report. */
#define PREFAULT_READS 1
#endif

static void prefault(const void *mem, uint64_t len, int advice)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)mem & ~(page - 1);
	uintptr_t end = ((uintptr_t)mem + len + page - 1) & ~(page - 1);

	(void)madvise((void *)start, end - start, advice);
	for (uintptr_t a = (uintptr_t)mem; PREFAULT_READS && a < (uintptr_t)mem + len;
	     a = (a & ~(page - 1)) + page)
		/* Relaxed atomic: the other side may write this byte meanwhile. */
		(void)atomic_load_explicit((const _Atomic unsigned char *)a, memory_order_relaxed);
}

int shoal_ring_init(void *mem, uint64_t len, uint32_t capacity, uint32_t flags)
{
	struct shoal__ring *r = mem;
	uint64_t need = shoal_ring_size(capacity);

	if (flags & ~SHOAL_RING_INIT_FLAGS)
		return -EINVAL;
	if (need == 0 || mem == NULL || len < need || ((uintptr_t)mem % SHOAL_FALSE_SHARING) != 0)
		return -EINVAL;
	/* Nobody may use the ring during init (contract), so plain stores. */
	memset(r, 0, SHOAL__RING_DATA_OFF);
	r->version = SHOAL__RING_VERSION;
	r->capacity = capacity;
	r->flags = flags;
	r->max_payload = capacity / 2 - SHOAL_RING_REC_HDR;
	r->data_off = SHOAL__RING_DATA_OFF;
	r->magic = SHOAL__RING_MAGIC;
	/* The creator (the router) often writes it too: its dispatchers. */
	prefault(mem, need, MADV_POPULATE_WRITE);
	return 0;
}

/*
 * Validate the control block: the immutable fields first, then the two
 * indices. Used by attach, stats and check, so every reader applies the same
 * rules to untrusted memory.
 */
/* What ring_validate() checked: each field read once, then used only here. */
struct ring_view {
	uint32_t capacity;
	uint32_t max_payload;
	uint32_t head;
	uint32_t tail;
};

/*
 * Read head and tail as a pair that makes sense (8-byte aligned, tail - head
 * within the capacity), retrying a few times: both sides may move between
 * the two loads of a live ring. Head first: the tail only grows, so it cannot
 * fall behind a head read before it. The last pair read is returned either
 * way, for the caller to check and report.
 */
static void read_indices(const struct shoal__ring *r, uint32_t cap, uint32_t *h, uint32_t *t)
{
	for (int tries = 0; tries <= 8; tries++) {
		/* Relaxed: the head orders nothing here; a walk re-reads it after
		 * each record, and a check after a record that fails (F1 in
		 * released_past()). */
		*h = shoal_load_relaxed(&r->head);
		/* A1: pairs with R1 in shoal_ring_commit(): every record byte
		 * before this tail is visible to a walk from here. Attach and
		 * stats need no order from it. */
		*t = shoal_load_acquire(&r->tail);
		if ((*h | *t) % 8 == 0 && *t - *h <= cap)
			return;
	}
}

static int ring_validate(const struct shoal__ring *r, uint64_t len, struct ring_view *v,
			 struct shoal_err *err)
{
	uint32_t cap, max, h, t;

	if (r == NULL || len < SHOAL__RING_DATA_OFF)
		return shoal__fail(err, -EUCLEAN, "ring region of %llu bytes is smaller than the "
				   "%u-byte control block", (unsigned long long)len,
				   SHOAL__RING_DATA_OFF);
	if (((uintptr_t)r % 8) != 0)
		return shoal__fail(err, -EUCLEAN, "ring region is not 8-byte aligned");
	if (r->magic != SHOAL__RING_MAGIC)
		return shoal__fail(err, -EUCLEAN, "ring magic is 0x%08x, expected 0x%08x",
				   r->magic, SHOAL__RING_MAGIC);
	if (r->version != SHOAL__RING_VERSION)
		return shoal__fail(err, -EUCLEAN, "ring layout version %u, expected %u",
				   r->version, SHOAL__RING_VERSION);
	cap = r->capacity;
	if (cap < SHOAL_RING_MIN_CAPACITY || cap > SHOAL_RING_MAX_CAPACITY ||
	    !shoal__is_pow2_u64(cap))
		return shoal__fail(err, -EUCLEAN, "ring capacity %u is not a power of two in "
				   "[%u, %u]", cap, SHOAL_RING_MIN_CAPACITY,
				   SHOAL_RING_MAX_CAPACITY);
	if (r->data_off != SHOAL__RING_DATA_OFF)
		return shoal__fail(err, -EUCLEAN, "ring data offset %u, expected %u",
				   r->data_off, SHOAL__RING_DATA_OFF);
	if ((uint64_t)SHOAL__RING_DATA_OFF + cap > len)
		return shoal__fail(err, -EUCLEAN, "ring of capacity %u runs past its %llu-byte "
				   "region", cap, (unsigned long long)len);
	max = r->max_payload;
	if (max != cap / 2 - SHOAL_RING_REC_HDR)
		return shoal__fail(err, -EUCLEAN, "ring max payload %u, expected %u", max,
				   cap / 2 - SHOAL_RING_REC_HDR);
	if (r->flags & ~SHOAL_RING_INIT_FLAGS)
		return shoal__fail(err, -EUCLEAN, "ring has unknown flags 0x%x", r->flags);
	read_indices(r, cap, &h, &t);
	if ((h | t) % 8 != 0)
		return shoal__fail(err, -EUCLEAN, "ring index not 8-byte aligned (head %u, "
				   "tail %u)", h, t);
	if (t - h > cap)
		return shoal__fail(err, -EUCLEAN, "ring holds %u bytes, more than its capacity "
				   "%u (head %u, tail %u)", t - h, cap, h, t);
	*v = (struct ring_view){ cap, max, h, t };
	return 0;
}

/*
 * The bound of the inline reserve (shoal_ring_reserve()): the tail may
 * grow up to the nearer of the end of the data area's current lap and
 * the cached head's end (a capacity past it), and not at all in the error
 * state, so that its one compare covers all three. Both ends are fixed
 * while the inline reserve grows the tail within a lap; set again wherever
 * the tail moves otherwise (a pad, a run, a cancel), the cached head
 * changes, or err is set. The run's (prod_run_room()) matters even though
 * a run stays within a lap: one that starts on the lap's end, where the
 * bound stops the inline reserve, starts the next lap without a pad, and a
 * tail past the bound left there makes `limit - tail` wrap to "room
 * without end" (tests/ring_test.c
 * ring_run_from_the_lap_end_leaves_reserve_no_room).
 */
static void prod_set_limit(struct shoal_ring_prod *p)
{
	uint32_t cap = p->mask + 1;
	uint32_t contig = cap - (p->tail & p->mask);
	uint32_t room = cap - (p->tail - p->head_cache);

	p->limit = p->tail + (p->err != 0 ? 0 : contig < room ? contig : room);
}

int shoal_ring_prod_attach(struct shoal_ring_prod *p, void *mem, uint64_t len,
			   struct shoal_err *err)
{
	struct shoal__ring *r = mem;
	struct ring_view v;
	int ret = ring_validate(r, len, &v, err);

	/* A handle whose attach fails refuses every reserve, as one that saw
	 * corruption: a caller that keeps it (an earlier attach's, say) must
	 * not write into the ring through it. Its limit, the tail, gives the
	 * inline reserve no room, and the slow path sees err. */
	memset(p, 0, sizeof(*p));
	p->err = -EUCLEAN;
	if (ret < 0)
		return ret;
	/* Only validated values from here: the peer may change the control
	 * block at any time, and a mask read twice could span anything. */
	p->r = r;
	p->data = (unsigned char *)mem + SHOAL__RING_DATA_OFF;
	p->mask = v.capacity - 1;
	p->max_payload = v.max_payload;
	p->tail = p->tail_pub = v.tail;
	/* A2: pairs with R2 in shoal_ring_release(): bytes before head are free. */
	p->head_cache = shoal_load_acquire(&r->head);
	if (v.tail - p->head_cache > v.capacity || (p->head_cache % 8) != 0) {
		prod_set_limit(p);   /* err is set: no room */
		return shoal__fail(err, -EUCLEAN, "ring head %u moved past tail %u",
				   p->head_cache, v.tail);
	}
	p->err = 0;
	prod_set_limit(p);
	/* Relaxed: counters are only read by tools; the producer owns them. */
	p->records_in = shoal_load_relaxed(&r->records_in);
	p->bytes_in = shoal_load_relaxed(&r->bytes_in);
	p->full_events = shoal_load_relaxed(&r->full_events);
	p->high_water = shoal_load_relaxed(&r->high_water);
	shoal_store_relaxed(&r->producer_pid, (int32_t)getpid());
	prefault(mem, SHOAL__RING_DATA_OFF + (uint64_t)v.capacity, MADV_POPULATE_WRITE);
	return 0;
}

static int rec_read(const unsigned char *data, uint32_t cap, uint32_t pos, uint32_t end,
		    struct shoal__rec_hdr *h, uint32_t *need, struct shoal_err *err);

/*
 * Records that lie behind the head a consumer attaches at, never taken out:
 * what a head moved forward by garbage (within bounds, on a record boundary)
 * made the producer write over while no consumer was attached. The
 * producer's count says how many records it committed, the consumer's how
 * many were taken; the records between head and tail are the rest, and what
 * is missing from them was skipped. The count is stored before the tail
 * (shoal_ring_commit()), so after A1 of a tail it covers every record before
 * it; a larger count is either a skip or a producer between its two stores,
 * so the tail is read again, a few times, before the difference is believed.
 * A count beyond what the ring can hold is garbage in the counters, bounded
 * to a ring's worth (errs towards counting, as ring_left() in the router).
 * Returns 0 when the walk itself finds a broken record: the consumer's peek
 * will, and the whole ring is then condemned and counted.
 */
#define SKIP_TRIES 64

static uint64_t cons_skipped(const struct shoal__ring *r, const unsigned char *data,
			     uint32_t cap, uint32_t head, uint32_t tail, uint64_t out)
{
	struct shoal__rec_hdr h;
	uint64_t n = 0, in = 0;
	uint32_t pos = head, need, t;

	for (int tries = 0; tries < SKIP_TRIES; tries++) {
		for (; pos != tail; pos += need) {
			if (rec_read(data, cap, pos, tail, &h, &need, NULL) < 0)
				return 0;
			n += (h.flags & SHOAL__REC_PAD) ? 0 : 1;
		}
		/* Relaxed: ordered after A1 of `tail` (read_indices() or below),
		 * which R1 published after this count. */
		in = shoal_load_relaxed(&r->records_in);
		if (in < out || in - out <= n)
			return 0;
		/* A1: pairs with R1 in shoal_ring_commit(). */
		t = shoal_load_acquire(&r->tail);
		if (t - head > cap || (t % 8) != 0)
			return 0;
		if (t == tail)
			sched_yield();
		tail = t;
	}
	in -= out + n;
	return in < cap / 8 ? in : cap / 8;
}

int shoal_ring_cons_attach(struct shoal_ring_cons *c, void *mem, uint64_t len,
			   struct shoal_err *err)
{
	struct shoal__ring *r = mem;
	struct ring_view v;
	int ret = ring_validate(r, len, &v, err);

	if (ret < 0)
		return ret;
	/* Only validated values from here (see shoal_ring_prod_attach()). */
	memset(c, 0, sizeof(*c));
	c->r = r;
	c->data = (const unsigned char *)mem + SHOAL__RING_DATA_OFF;
	c->mask = v.capacity - 1;
	c->max_payload = v.max_payload;
	c->head = c->head_pub = c->tail_cache = v.head;
	/* Relaxed: the consumer owns these counters; tools only read them. */
	c->records_out = shoal_load_relaxed(&r->records_out);
	c->bytes_out = shoal_load_relaxed(&r->bytes_out);
	c->skipped = cons_skipped(r, c->data, v.capacity, v.head, v.tail, c->records_out);
	if (c->skipped != 0) {
		/* Taken out, as lost: the ring's counters say again what it holds. */
		c->records_out += c->skipped;
		shoal_store_relaxed(&r->records_out, c->records_out);
	}
	shoal_store_relaxed(&r->consumer_pid, (int32_t)getpid());
	prefault(mem, SHOAL__RING_DATA_OFF + (uint64_t)v.capacity, MADV_POPULATE_READ);
	return 0;
}

/* Refresh the cached head. Returns false (and sets the sticky error) if the
 * consumer published an impossible head. */
static bool prod_refresh(struct shoal_ring_prod *p)
{
	/* A2: pairs with R2 in shoal_ring_release(): the consumer is done with
	 * every byte before this head, so the producer may overwrite them. */
	uint32_t h = shoal_load_acquire(&p->r->head);

	if (SHOAL_UNLIKELY(p->tail_pub - h > p->mask + 1 || (h % 8) != 0)) {
		p->err = -EUCLEAN;
		prod_set_limit(p);
		return false;
	}
	p->head_cache = h;
	prod_set_limit(p);
	/* The high-water mark is sampled here, where the producer sees the
	 * real head: refreshes happen exactly when the ring runs full. */
	if (p->tail_pub - h > p->high_water) {
		p->high_water = p->tail_pub - h;
		/* Relaxed: single writer; a counter for tools. */
		shoal_store_relaxed(&p->r->high_water, p->high_water);
	}
	return true;
}

/* What shoal_ring_commit() writes in the handle, in its first line. */
static_assert(offsetof(struct shoal_ring_prod, bytes_in) + sizeof(uint64_t) <= 64 &&
	      offsetof(struct shoal_ring_prod, pending) < 64 &&
	      offsetof(struct shoal_ring_prod, tail_pub) < 64,
	      "a commit writes one line of its handle");

static void prod_note_full(struct shoal_ring_prod *p)
{
	if (!p->full) {
		p->full = true;
		/* Relaxed: single writer; a counter for tools. */
		shoal_store_relaxed(&p->r->full_events, ++p->full_events);
	}
}

void *shoal__ring_reserve_slow(struct shoal_ring_prod *p, uint32_t len, uint16_t tag)
{
	uint32_t cap = p->mask + 1;
	uint32_t need, off, contig, total;

	if (SHOAL_UNLIKELY(len > p->max_payload || p->err))
		return NULL;
	need = shoal__ring_rec_size(len);
	off = p->tail & p->mask;
	contig = cap - off;
	total = need <= contig ? need : contig + need;
	if (SHOAL_UNLIKELY(total > cap - (p->tail - p->head_cache))) {
		if (!prod_refresh(p))
			return NULL;
		if (total > cap - (p->tail - p->head_cache)) {
			prod_note_full(p);
			return NULL;
		}
	}
	if (need > contig) {
		/* Relaxed: published by R1 at commit, like the payload. */
		shoal_store_relaxed(hdr_at(p->data, off),
				    shoal__ring_hdr(contig - SHOAL_RING_REC_HDR, 0, SHOAL__REC_PAD));
		p->tail += contig;
		off = 0;
	}
	/* Relaxed: published by R1 at commit. */
	shoal_store_relaxed(hdr_at(p->data, off), shoal__ring_hdr(len, tag, 0));
	p->tail += need;
	p->pending += SHOAL__RING_PENDING_REC + len;
	/* A pad moved the tail to the next lap. */
	prod_set_limit(p);
	return p->data + off + SHOAL_RING_REC_HDR;
}

/*
 * Records of `need` bytes that fit from the tail, at most `want`: before the
 * end of the data area and within the room the head leaves. The cached head
 * first; the shared one only when the cache leaves room for fewer than
 * `want` (as shoal_ring_reserve() reloads it only when a record does not
 * fit). Returns false if the consumer published an impossible head.
 */
static bool prod_run_room(struct shoal_ring_prod *p, uint32_t need, unsigned want, unsigned *k)
{
	uint32_t cap = p->mask + 1, contig = cap - (p->tail & p->mask);
	uint32_t room = cap - (p->tail - p->head_cache);

	if ((uint64_t)want * need > room) {
		if (!prod_refresh(p))
			return false;
		room = cap - (p->tail - p->head_cache);
	}
	if (contig < room)
		room = contig;
	/* The inline reserve's bound from this tail (prod_set_limit(), err is
	 * 0 here), still exact after the run moves it: the run stays within
	 * `room`. */
	p->limit = p->tail + room;
	/* One division per run, and only for a short one. */
	*k = (uint64_t)want * need <= room ? want : room / need;
	return true;
}

/* shoal_ring_claim_run(), inlined into it and into shoal_ring_reserve_run(). */
static inline unsigned claim_run(struct shoal_ring_prod *p, uint32_t len, uint16_t tag, unsigned n,
				 void **first)
{
	uint32_t cap = p->mask + 1, need, off;
	unsigned char *one = NULL;
	unsigned k;

	if (SHOAL_UNLIKELY(n == 0 || len > p->max_payload || p->err))
		return 0;
	need = shoal__ring_rec_size(len);
	off = p->tail & p->mask;
	if (need > cap - off) {
		/* Not one record before the end: the single reserve writes the
		 * pad, refreshes the head or counts the ring full, and puts the
		 * first record at offset 0; the run goes on after it. */
		one = shoal__ring_reserve_slow(p, len, tag);
		if (one == NULL)
			return 0;
		n--;
		off = p->tail & p->mask;
	}
	/* An impossible head makes the error sticky; a record reserved before
	 * it was found stays reserved, as with shoal_ring_reserve(). */
	if (!prod_run_room(p, need, n, &k))
		k = 0;
	if (k == 0 && one == NULL) {
		if (p->err == 0)
			prod_note_full(p);
		return 0;
	}
	/* k * need <= cap - off: the run stays in the data area. */
	p->tail += k * need;
	p->pending += k * (SHOAL__RING_PENDING_REC + len);
	*first = one != NULL ? one : p->data + off + SHOAL_RING_REC_HDR;
	return k + (one != NULL);
}

unsigned shoal_ring_claim_run(struct shoal_ring_prod *p, uint32_t len, uint16_t tag, unsigned n,
			      void **first)
{
	return claim_run(p, len, tag, n, first);
}

unsigned shoal_ring_reserve_run(struct shoal_ring_prod *p, uint32_t len, uint16_t tag, unsigned n,
				void **first)
{
	uint64_t hdr = shoal_ring_run_hdr(len, tag);
	uint32_t need = shoal__ring_rec_size(len);
	unsigned char *h, *end;
	void *run;
	unsigned k = claim_run(p, len, tag, n, &run);

	if (k == 0)
		return 0;
	/* Relaxed, one 64-bit store each: published by R1 at commit, like the
	 * payload. Four a step: one loop branch per four records. */
	h = (unsigned char *)run - SHOAL_RING_REC_HDR;
	end = h + (size_t)k * need;
	for (; (size_t)(end - h) >= 4 * (size_t)need; h += 4 * need) {
		shoal_store_relaxed(hdr_at(h, 0), hdr);
		shoal_store_relaxed(hdr_at(h, need), hdr);
		shoal_store_relaxed(hdr_at(h, 2 * need), hdr);
		shoal_store_relaxed(hdr_at(h, 3 * need), hdr);
	}
	for (; h != end; h += need)
		shoal_store_relaxed(hdr_at(h, 0), hdr);
	*first = run;
	return k;
}

void shoal_ring_cancel(struct shoal_ring_prod *p)
{
	/* Nothing was published: roll the private index back; the records
	 * and bytes reserved were counted in `pending` only. */
	p->tail = p->tail_pub;
	p->pending = 0;
	/* The tail may be back on the lap before a pad. */
	prod_set_limit(p);
}

static inline bool prod_check_lens(const struct shoal_ring_prod *p, const struct shoal_rec *recs,
				   unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (recs[i].len > p->max_payload)
			return false;
	return true;
}

int shoal_ring_enqueue(struct shoal_ring_prod *p, const void *buf, uint32_t len, uint16_t tag)
{
	void *dst;

	if (SHOAL_UNLIKELY(len > p->max_payload))
		return -EMSGSIZE;
	dst = shoal_ring_reserve(p, len, tag);
	if (SHOAL_UNLIKELY(dst == NULL))
		return p->err ? p->err : -EAGAIN;
	memcpy(dst, buf, len);
	shoal_ring_commit(p);
	return 0;
}

static int enqueue_n(struct shoal_ring_prod *p, const struct shoal_rec *recs, unsigned n,
		     bool all_or_nothing)
{
	unsigned i;

	if (SHOAL_UNLIKELY(!prod_check_lens(p, recs, n)))
		return -EMSGSIZE;
	for (i = 0; i < n; i++) {
		void *dst = shoal_ring_reserve(p, recs[i].len, recs[i].tag);

		if (dst == NULL)
			break;
		memcpy(dst, recs[i].data, recs[i].len);
	}
	if (p->err) {
		shoal_ring_cancel(p);
		return p->err;
	}
	if (i < n && all_or_nothing) {
		shoal_ring_cancel(p);
		return 0;
	}
	shoal_ring_commit(p);
	return (int)i;
}

int shoal_ring_enqueue_bulk(struct shoal_ring_prod *p, const struct shoal_rec *recs, unsigned n)
{
	return enqueue_n(p, recs, n, true);
}

int shoal_ring_enqueue_burst(struct shoal_ring_prod *p, const struct shoal_rec *recs, unsigned n)
{
	return enqueue_n(p, recs, n, false);
}

/* Refresh the cached tail. Returns false (sticky error) on an impossible tail. */
static bool cons_refresh(struct shoal_ring_cons *c)
{
	/* A1: pairs with R1 in shoal_ring_commit() (include/shoal/ring.h):
	 * every record byte before this tail is visible. */
	uint32_t t = shoal_load_acquire(&c->r->tail);

	if (SHOAL_UNLIKELY(t - c->head_pub > c->mask + 1 || (t % 8) != 0 ||
			   t - c->head > t - c->head_pub)) {
		c->err = -EUCLEAN;
		return false;
	}
	c->tail_cache = t;
	/* New records: their first two lines (a header, an envelope and
	 * the payload's start) are asked for together, not the second
	 * after the first is read. A far vCPU pair pays ~150 ns a line in
	 * turn (bench/SUITE.md, "A record's lines together"). */
	if (t != c->head) {
		const unsigned char *rec = c->data + (c->head & c->mask);

		__builtin_prefetch(rec);
		__builtin_prefetch(rec + 64);
	}
	return true;
}

/*
 * The record at *head of a consumer whose published end is `tail` (head !=
 * tail): its header read once, as one word, and checked against the ring's
 * rules; a PAD before it is checked and skipped, moving *head to the start of
 * the data area. Returns true with the header in *h, its offset in *off and
 * the bytes it takes in *need (within tail and the data area), or false if
 * the producer broke a rule. Inline in each peek, so that their loops keep
 * data, mask and max in registers.
 */
static inline bool cons_rec(const unsigned char *data, uint32_t mask, uint32_t max,
			    uint32_t *head, uint32_t tail, struct shoal__rec_hdr *h, uint32_t *off,
			    uint32_t *need)
{
	uint32_t cap = mask + 1, o = *head & mask;

	/* Relaxed: ordered by A1 (cons_refresh()); one 64-bit load so the
	 * header cannot change between the checks below and its use. */
	*h = hdr_unpack(shoal_load_relaxed(hdr_at(data, o)));
	if (h->flags & SHOAL__REC_PAD) {
		if (SHOAL_UNLIKELY(h->flags != SHOAL__REC_PAD ||
				   (uint64_t)h->len + SHOAL_RING_REC_HDR != cap - o ||
				   tail - *head <= cap - o))
			return false;
		*head += cap - o;
		o = 0;
		*h = hdr_unpack(shoal_load_relaxed(hdr_at(data, 0)));
	}
	if (SHOAL_UNLIKELY(h->flags != 0 || h->len > max))
		return false;
	*need = shoal__ring_rec_size(h->len);
	if (SHOAL_UNLIKELY(*need > tail - *head || *need > cap - o))
		return false;
	*off = o;
	return true;
}

/* True if the consumer has a record to peek: its cached tail, else the
 * shared one (A1). False when empty or on an impossible tail. */
static inline bool cons_ready(struct shoal_ring_cons *c)
{
	return c->head != c->tail_cache || (cons_refresh(c) && c->head != c->tail_cache);
}

bool shoal__ring_peek(struct shoal_ring_cons *c, struct shoal_rec *rec)
{
	uint32_t cap = c->mask + 1;
	struct shoal__rec_hdr h;
	uint32_t off, avail, need;

	if (SHOAL_UNLIKELY(c->err))
		return false;
	if (c->head == c->tail_cache && (!cons_refresh(c) || c->head == c->tail_cache))
		return false;
	c->head_prev = c->head;
	off = c->head & c->mask;
	avail = c->tail_cache - c->head;
	/* Relaxed: ordered by A1; one 64-bit load so the header cannot change
	 * between the checks below and its use. */
	h = hdr_unpack(shoal_load_relaxed(hdr_at(c->data, off)));
	if (h.flags & SHOAL__REC_PAD) {
		if (SHOAL_UNLIKELY(h.flags != SHOAL__REC_PAD ||
				   (uint64_t)h.len + SHOAL_RING_REC_HDR != cap - off ||
				   avail <= cap - off))
			goto corrupt;
		c->head += cap - off;
		avail -= cap - off;
		off = 0;
		h = hdr_unpack(shoal_load_relaxed(hdr_at(c->data, 0)));
	}
	if (SHOAL_UNLIKELY(h.flags != 0 || h.len > c->max_payload))
		goto corrupt;
	need = shoal__ring_rec_size(h.len);
	if (SHOAL_UNLIKELY(need > avail || need > cap - off))
		goto corrupt;
	rec->data = c->data + off + SHOAL_RING_REC_HDR;
	rec->len = h.len;
	rec->tag = h.tag;
	c->head += need;
	c->pending++;
	c->pending_bytes += h.len;
	c->last_len = h.len;
	return true;
corrupt:
	c->err = -EUCLEAN;
	return false;
}

/*
 * A record's length and tag into *out from its header word `w`, whose flags
 * are 0. On a little-endian machine the word's low six bytes are the length
 * and the tag, laid out as struct shoal_rec's len and tag, and its top two
 * (the flags, 0) fall on the padding after tag: one store instead of two,
 * and no shift, per record of a burst.
 */
static_assert(offsetof(struct shoal_rec, tag) == offsetof(struct shoal_rec, len) + 4 &&
	      sizeof(struct shoal_rec) >= offsetof(struct shoal_rec, len) + 8,
	      "len, tag and padding make one 8-byte word");

static inline void rec_len_tag(struct shoal_rec *out, uint64_t w)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy((unsigned char *)out + offsetof(struct shoal_rec, len), &w, sizeof(w));
#else
	out->len = (uint32_t)w;
	out->tag = (uint16_t)(w >> 32);
#endif
}

/*
 * shoal_ring_peek() n times, with the walk in locals: the handle's fields
 * are written once at the end, not once per record (63 instructions per
 * record of a 64-byte burst of 32 before, bench/instr-count). A record that
 * starts a stretch (the first, one after a pad or after the cached tail) is
 * checked as shoal_ring_peek() checks it. The records after it, up to the
 * published tail and the end of the data area, go through a shorter loop
 * that applies the same rules with fewer branches: its bounds are taken
 * once, so a header needs only "no flags, length within the largest
 * payload" (one compare: the flags are the word's top bits) and "within the
 * bounds" (one more). A header that fails either leaves the loop for the
 * full checks, which tell a pad from damage. A header equal, word for word,
 * to the one before it (a run, as most senders write) needs only the bound:
 * 14 instructions a record there, where the loop takes 20.
 */
unsigned shoal__ring_peek_burst(struct shoal_ring_cons *c, struct shoal_rec *recs, unsigned n)
{
	/* In locals: the stores into recs[] could alias the handle. */
	const unsigned char *data = c->data, *rec, *start, *end;
	uint32_t mask = c->mask, max = c->max_payload;
	uint32_t head = c->head, tail = c->tail_cache, off, need;
	uint64_t bytes = 0, w;
	struct shoal_rec *out = recs, *out_end = recs + n;
	struct shoal__rec_hdr h;

	if (SHOAL_UNLIKELY(c->err))
		return 0;
	while (out != out_end) {
		if (head == tail) {
			c->head = head;
			if (!cons_refresh(c) || head == c->tail_cache)
				break;
			tail = c->tail_cache;
		}
		if (SHOAL_UNLIKELY(!cons_rec(data, mask, max, &head, tail, &h, &off, &need))) {
			c->err = -EUCLEAN;
			break;
		}
		out->data = data + off + SHOAL_RING_REC_HDR;
		out->len = h.len;
		out->tag = h.tag;
		out++;
		head += need;
		bytes += h.len;
		/* The stretch: every byte from start to end is published and
		 * inside the data area (cons_rec() checked need against both). */
		start = rec = data + off + need;
		end = rec + (tail - head < mask + 1 - (off + need) ? tail - head
								     : mask + 1 - (off + need));
		w = shoal__ring_hdr(h.len, h.tag, 0);
		while (out != out_end && rec != end) {
			struct shoal_rec *run = out;

			/* A header equal to the last one passed its checks: only
			 * the bound is left, and no size to work out. */
			for (; out != out_end && need <= (size_t)(end - rec) &&
			       shoal_load_relaxed(hdr_at(rec, 0)) == w; out++, rec += need) {
				out->data = rec + SHOAL_RING_REC_HDR;
				rec_len_tag(out, w);
			}
			bytes += (uint64_t)(out - run) * (uint32_t)w;
			if (out == out_end || rec == end)
				break;
			/* Relaxed: ordered by A1, as in cons_rec(); one load. The
			 * size is compared as a number, never added to rec
			 * before it is known to fit. */
			w = shoal_load_relaxed(hdr_at(rec, 0));
			need = shoal__ring_rec_size((uint32_t)w);
			if (SHOAL_UNLIKELY((w & ~(UINT64_C(0xffff) << 32)) > max ||
					   need > (size_t)(end - rec)))
				break;
			out->data = rec + SHOAL_RING_REC_HDR;
			rec_len_tag(out, w);
			bytes += (uint32_t)w;
			out++;
			rec += need;
		}
		head += (uint32_t)(rec - start);
	}
	if (out != recs) {
		/* For shoal_ring_unpeek(): the last record, found from its length. */
		c->last_len = out[-1].len;
		c->head_prev = head - shoal__ring_rec_size(c->last_len);
	}
	c->head = head;
	c->pending += (uint32_t)(out - recs);
	c->pending_bytes += bytes;
	return (unsigned)(out - recs);
}

unsigned shoal__ring_peek_run(struct shoal_ring_cons *c, struct shoal_rec *first, unsigned n)
{
	const unsigned char *data = c->data, *run, *hdr, *stop;
	uint32_t head = c->head, tail, off, need, end;
	struct shoal__rec_hdr h;
	uint64_t word;
	unsigned i, k;

	if (SHOAL_UNLIKELY(c->err) || n == 0 || !cons_ready(c))
		return 0;
	tail = c->tail_cache;
	if (SHOAL_UNLIKELY(!cons_rec(data, c->mask, c->max_payload, &head, tail, &h, &off,
				     &need))) {
		c->err = -EUCLEAN;
		return 0;
	}
	/* The bytes published before the end of the data area bound the run,
	 * so every record of it lies inside both (need <= end: cons_rec()).
	 * One division per run, and only for a short one of more than one
	 * record: a poll at a low rate finds one, and a division is some 25
	 * cycles of its latency. */
	end = tail - head < c->mask + 1 - off ? tail - head : c->mask + 1 - off;
	k = (uint64_t)n * need <= end ? n : end < 2 * need ? 1 : end / need;
	/* Each later header must equal the first, checked one, word for word:
	 * the same length and tag, no flags. Its value is only compared, never
	 * used, so a header that changes between two reads can only move where
	 * the run ends. A header that differs ends the run (the next peek reads
	 * and checks it alone). */
	word = shoal__ring_hdr(h.len, h.tag, 0);
	run = data + off;
	hdr = run + need;
	stop = run + (size_t)k * need;
	/* Relaxed: ordered by A1, as in cons_rec(). Four a step, their
	 * differences or-ed, one branch per four; past a difference (or for
	 * the last few) one at a time, to find where the run ends. */
	for (; (size_t)(stop - hdr) >= 4 * (size_t)need; hdr += 4 * need)
		if (((shoal_load_relaxed(hdr_at(hdr, 0)) ^ word) |
		     (shoal_load_relaxed(hdr_at(hdr, need)) ^ word) |
		     (shoal_load_relaxed(hdr_at(hdr, 2 * need)) ^ word) |
		     (shoal_load_relaxed(hdr_at(hdr, 3 * need)) ^ word)) != 0)
			break;
	while (hdr != stop && shoal_load_relaxed(hdr_at(hdr, 0)) == word)
		hdr += need;
	/* A division only when a header ended the run early. */
	i = hdr == stop ? k : (unsigned)((size_t)(hdr - run) / need);
	first->data = run + SHOAL_RING_REC_HDR;
	first->len = h.len;
	first->tag = h.tag;
	c->head_prev = head + (i - 1) * need;
	c->head = head + i * need;
	c->last_len = h.len;
	c->pending += i;
	c->pending_bytes += (uint64_t)i * h.len;
	return i;
}

void shoal_ring_release(struct shoal_ring_cons *c)
{
	struct shoal__ring *r = c->r;

	if (c->head == c->head_pub)
		return;
	/* Counters first, index last: a consumer killed between the two leaves
	 * counters ahead by one batch, never an index ahead of its counters'
	 * meaning for delivery. Relaxed: single writer, read only by tools. */
	c->records_out += c->pending;
	c->bytes_out += c->pending_bytes;
	c->pending = 0;
	c->pending_bytes = 0;
	shoal_store_relaxed(&r->records_out, c->records_out);
	shoal_store_relaxed(&r->bytes_out, c->bytes_out);
	/* R2: pairs with A2 in prod_refresh(): every read of the released
	 * records happens before the producer may reuse their bytes. */
	shoal_store_release(&r->head, c->head);
	c->head_pub = c->head;
}

void shoal_ring_unpeek(struct shoal_ring_cons *c)
{
	if (c->pending == 0 || c->head == c->head_prev)
		return;
	c->head = c->head_prev;
	c->pending--;
	c->pending_bytes -= c->last_len;
}

int shoal__ring_dequeue(struct shoal_ring_cons *c, void *buf, uint32_t cap, uint16_t *tag)
{
	struct shoal_rec rec;

	if (!shoal_ring_peek(c, &rec))
		return c->err ? c->err : -EAGAIN;
	if (rec.len > cap) {
		shoal_ring_unpeek(c);   /* the record stays for a larger buffer */
		return -EMSGSIZE;
	}
	memcpy(buf, rec.data, rec.len);
	if (tag)
		*tag = rec.tag;
	shoal_ring_release(c);
	return (int)rec.len;
}

bool shoal__ring_empty_slow(struct shoal_ring_cons *c)
{
	return !cons_refresh(c) || c->head == c->tail_cache;
}

int shoal_ring_prod_error(const struct shoal_ring_prod *p)
{
	return p->err;
}

int shoal_ring_cons_error(const struct shoal_ring_cons *c)
{
	return c->err;
}

uint64_t shoal_ring_cons_skipped(const struct shoal_ring_cons *c)
{
	return c->skipped;
}

void shoal_ring_condemn(void *mem, uint64_t len, unsigned side)
{
	struct shoal__ring *r = mem;

	if (r == NULL || len < SHOAL__RING_DATA_OFF || ((uintptr_t)r % 8) != 0)
		return;
	/* R3: pairs with A3 in shoal_ring_condemned(): this side's index and
	 * counters, stored before, are final for whoever sees the mark. Each
	 * side writes only the flag in its own line (the producer's is a mask:
	 * 1 condemned, 2 settled, so fetch_or). */
	if (side & (SHOAL_RING_SIDE_PROD | SHOAL_RING_SIDE_SETTLED))
		shoal_fetch_or_release(&r->prod_condemned,
				       (side & SHOAL_RING_SIDE_SETTLED) ? 3u : 1u);
	if (side & SHOAL_RING_SIDE_CONS)
		shoal_store_release(&r->cons_condemned, 1);
}

unsigned shoal_ring_condemned(const void *mem, uint64_t len)
{
	const struct shoal__ring *r = mem;
	unsigned side = 0;
	uint32_t prod;

	if (r == NULL || len < SHOAL__RING_DATA_OFF || ((uintptr_t)r % 8) != 0)
		return 0;
	/* A3: pairs with R3 in shoal_ring_condemn(). Any non-zero value counts:
	 * garbage in the flag condemns the ring, which is what garbage means. */
	prod = shoal_load_acquire(&r->prod_condemned);
	if (prod != 0)
		side |= SHOAL_RING_SIDE_PROD;
	if (prod == 3)
		side |= SHOAL_RING_SIDE_SETTLED;
	if (shoal_load_acquire(&r->cons_condemned) != 0)
		side |= SHOAL_RING_SIDE_CONS;
	return side;
}

bool shoal_ring_prod_condemned(const struct shoal_ring_prod *p)
{
	return (shoal_ring_condemned(p->r, SHOAL__RING_DATA_OFF) & SHOAL_RING_SIDE_CONS) != 0;
}

int shoal_ring_records(const void *mem, uint64_t len, uint64_t *in, uint64_t *out)
{
	const struct shoal__ring *r = mem;

	if (r == NULL || len < SHOAL__RING_DATA_OFF || ((uintptr_t)r % 8) != 0)
		return -EUCLEAN;
	/* Relaxed: counters; the caller orders them with shoal_ring_condemned()
	 * or reads them after both sides are gone. */
	*in = shoal_load_relaxed(&r->records_in);
	*out = shoal_load_relaxed(&r->records_out);
	return 0;
}

uint32_t shoal_ring_max_payload(const struct shoal_ring_prod *p)
{
	return p->max_payload;
}

int shoal_ring_stats(const void *mem, uint64_t len, struct shoal_ring_stats *st,
		     struct shoal_err *err)
{
	const struct shoal__ring *r = mem;
	struct ring_view v;
	int ret = ring_validate(r, len, &v, err);

	if (ret < 0)
		return ret;
	memset(st, 0, sizeof(*st));
	st->capacity = v.capacity;
	st->max_payload = v.max_payload;
	st->head = v.head;
	st->tail = v.tail;
	st->used = v.tail - v.head;
	/* Relaxed: counters order nothing; a snapshot for display. */
	st->records_in = shoal_load_relaxed(&r->records_in);
	st->bytes_in = shoal_load_relaxed(&r->bytes_in);
	st->records_out = shoal_load_relaxed(&r->records_out);
	st->bytes_out = shoal_load_relaxed(&r->bytes_out);
	st->full_events = shoal_load_relaxed(&r->full_events);
	st->high_water = shoal_load_relaxed(&r->high_water);
	st->producer_pid = shoal_load_relaxed(&r->producer_pid);
	st->consumer_pid = shoal_load_relaxed(&r->consumer_pid);
	return 0;
}

/*
 * The record at index `pos` of a pass that ends at `end`, read by a reader
 * that is not the consumer (check, walk): its header loaded once, as one
 * word, and checked against every rule of the ring (see the top of this
 * file). Returns 0 with the header in *h and the bytes the record takes in
 * *need (at least 8, at most end - pos), or -EUCLEAN with the broken rule in
 * *err. `cap` is a validated capacity and pos != end, so the header lies in
 * the data area.
 */
static int rec_read(const unsigned char *data, uint32_t cap, uint32_t pos, uint32_t end,
		    struct shoal__rec_hdr *h, uint32_t *need, struct shoal_err *err)
{
	uint32_t off = pos & (cap - 1), avail = end - pos, max = cap / 2 - SHOAL_RING_REC_HDR;

	/* Relaxed: ordered by A1 in read_indices(); one load, so it cannot
	 * change between the checks below and its use. */
	*h = hdr_unpack(shoal_load_relaxed(hdr_at(data, off)));
	if (h->flags & ~SHOAL__REC_FLAGS)
		return shoal__fail(err, -EUCLEAN, "record at index %u has unknown flags 0x%x",
				   pos, h->flags);
	if (h->flags & SHOAL__REC_PAD) {
		*need = cap - off;
		if ((uint64_t)h->len + SHOAL_RING_REC_HDR != *need)
			return shoal__fail(err, -EUCLEAN, "pad record at offset %u has length "
					   "%u, expected %u (to the end)", off, h->len,
					   *need - SHOAL_RING_REC_HDR);
		if (avail <= *need)
			return shoal__fail(err, -EUCLEAN, "pad record at offset %u is not "
					   "followed by a record before tail %u", off, end);
		return 0;
	}
	if (h->len > max)
		return shoal__fail(err, -EUCLEAN, "record at index %u has length %u, more than "
				   "the largest payload %u", pos, h->len, max);
	*need = shoal__ring_rec_size(h->len);
	if (*need > cap - off)
		return shoal__fail(err, -EUCLEAN, "record at offset %u of length %u runs past "
				   "the end of the data area (%u bytes)", off, h->len, cap);
	if (*need > avail)
		return shoal__fail(err, -EUCLEAN, "record at index %u of length %u runs past "
				   "tail %u", pos, h->len, end);
	return 0;
}

/*
 * True if the consumer of the ring at `mem` has released the record at
 * `pos` since a reader found its head at `head0`: the record's bytes may
 * then have been rewritten under the reader. F1: the reader's loads of the
 * record complete before the head is read again. Pairs with R2 in
 * shoal_ring_release(), after which A2 lets the producer reuse the bytes: a
 * head still at or before the record means they were not reused while the
 * reader read them.
 */
static bool released_past(const void *mem, uint32_t head0, uint32_t pos)
{
	const struct shoal__ring *r = mem;
	uint32_t head;

	shoal_fence_acquire();
	/* Relaxed: ordered after the reads of the record by F1 above. */
	head = shoal_load_relaxed(&r->head);
	return head - head0 > pos - head0;
}

int shoal_ring_check(const void *mem, uint64_t len, struct shoal_ring_stats *st,
		     struct shoal_err *err)
{
	const unsigned char *data = (const unsigned char *)mem + SHOAL__RING_DATA_OFF;
	struct shoal__rec_hdr h;
	uint32_t pos, need;
	int ret, records = 0;

	ret = shoal_ring_stats(mem, len, st, err);
	if (ret < 0)
		return ret;
	/* Each step advances by at least 8 bytes and never past the tail, and
	 * tail - head <= cap, so the walk ends after at most cap / 8 steps. */
	for (pos = st->head; pos != st->tail; pos += need) {
		ret = rec_read(data, st->capacity, pos, st->tail, &h, &need, err);
		if (ret < 0) {
			/* A record that breaks the rules after the consumer
			 * passed it was being rewritten, not damaged. */
			if (released_past(mem, st->head, pos))
				ret = shoal__fail(err, -EAGAIN, "the consumer released the record at "
						  "index %u while it was checked", pos);
			return ret;
		}
		records += (h.flags & SHOAL__REC_PAD) ? 0 : 1;
	}
	return records;
}

int shoal_ring_walk_begin(struct shoal_ring_walk *w, const void *mem, uint64_t len,
			  struct shoal_err *err)
{
	struct ring_view v;
	int ret = ring_validate(mem, len, &v, err);

	if (ret < 0)
		return ret;
	/* ring_validate() read the pair through read_indices(): the tail with
	 * A1, so the records before it are visible to this pass. */
	*w = (struct shoal_ring_walk){
		.capacity = v.capacity,
		.head = v.head,
		.tail = v.tail,
		.r = mem,
		.pos = v.head,
	};
	return 0;
}

/*
 * Copy `n` bytes from `src` (8-byte aligned, inside a record padded to 8
 * bytes, so whole words never leave it) with relaxed atomic loads, word by
 * word: the producer may be rewriting them, and an atomic load makes that a
 * torn copy, which the caller detects, rather than a data race.
 */
static void copy_relaxed(unsigned char *dst, const unsigned char *src, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 8) {
		/* Relaxed: validated afterwards by the head re-read after F1. */
		uint64_t word = shoal_load_relaxed(hdr_at(src, i));

		memcpy(dst + i, &word, n - i < 8 ? n - i : 8);
	}
}

int shoal_ring_walk_next(struct shoal_ring_walk *w, struct shoal_ring_walk_rec *rec,
			 void *buf, uint32_t cap, struct shoal_err *err)
{
	const unsigned char *data = (const unsigned char *)w->r + SHOAL__RING_DATA_OFF;
	struct shoal__rec_hdr h;
	uint32_t need;
	int ret;

	if (w->err)
		return w->err;
	/* Every step moves at least 8 bytes and never past the tail, and
	 * tail - head <= capacity: at most capacity / 8 steps per pass. */
	for (; w->pos != w->tail; w->pos += need) {
		ret = rec_read(data, w->capacity, w->pos, w->tail, &h, &need, err);
		if (ret < 0)
			goto fail;
		if (h.flags & SHOAL__REC_PAD)
			continue;
		rec->index = w->pos;
		rec->len = h.len;
		rec->tag = h.tag;
		rec->copied = cap < h.len ? cap : h.len;
		copy_relaxed(buf, data + (w->pos & (w->capacity - 1)) + SHOAL_RING_REC_HDR,
			     rec->copied);
		if (released_past(w->r, w->head, w->pos)) {
			ret = -EAGAIN;
			goto fail;
		}
		w->pos += need;
		return 1;
	}
	return 0;
fail:
	/* A record that breaks the rules after the consumer passed it was
	 * being rewritten, not damaged. */
	if (ret == -EAGAIN || released_past(w->r, w->head, w->pos))
		ret = shoal__fail(err, -EAGAIN, "the consumer released the record at index "
				  "%u while it was read", w->pos);
	w->err = ret;
	return ret;
}
