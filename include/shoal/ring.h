/* SPDX-License-Identifier: MIT */
/*
 * Single-producer single-consumer rings of variable-length records in shared
 * memory.
 *
 * A ring lives in a region of a segment (see shoal/segment.h): a control
 * block, then a power-of-two data area. A record is an 8-byte header (length,
 * tag) followed by the payload, padded to 8 bytes; a record never wraps.
 * The largest payload is capacity / 2 - 8 bytes, which guarantees that an
 * empty ring accepts any record whatever its current offset.
 *
 * At any time at most one producer handle and one consumer handle may be
 * attached to a ring. Handles are process-local, so a producer or consumer
 * that dies is replaced by attaching a new handle: a new consumer resumes at
 * the last released record, a new producer after the last committed one.
 *
 * Concurrency: one thread may use a producer handle while one other thread
 * (in any process) uses the consumer handle. shoal_ring_check(),
 * shoal_ring_stats() and walks (shoal_ring_walk_begin()) may run at any time
 * from any process, read-only.
 *
 * Progress: every call is wait-free. No call allocates, locks, logs or
 * sleeps (see shoal/doorbell.h for sleeping). The two attach calls make one
 * system call each (madvise, to map the ring's pages in before the data path
 * runs); no other call makes any.
 *
 * Concurrency table, per ring, for threads in any processes: "-" may run
 * together with no synchronisation by the caller, "X" may not, a letter may
 * with the note below. Rings never share anything with each other, and
 * shoal_ring_size() is a pure function.
 *
 *   [1] shoal_ring_init
 *   [2] shoal_ring_prod_attach
 *   [3] producer calls: shoal_ring_reserve, _reserve_run, _commit, _cancel,
 *       _enqueue, _enqueue_bulk, _enqueue_burst, _prod_error, _max_payload,
 *       _prod_condemned
 *   [4] shoal_ring_cons_attach
 *   [5] consumer calls: shoal_ring_peek, _peek_burst, _peek_run, _unpeek,
 *       _release, _dequeue, _empty, _cons_error
 *   [6] shoal_ring_condemn
 *   [7] readers: shoal_ring_stats, _check, _condemned, _records,
 *       _walk_begin, _walk_next
 *
 *        [1]  [2]  [3]  [4]  [5]  [6]  [7]
 *   [1]   X    X    X    X    X    X    X
 *   [2]   X    X    X    -    -    -    -
 *   [3]   X    X    X    -    -   (a)   -
 *   [4]   X    -    -    X    X    -    -
 *   [5]   X    -    -    X    X   (a)  (b)
 *   [6]   X    -   (a)   -   (a)   -    -
 *   [7]   X    -    -    -   (b)   -    -
 *
 * [3] with [3] is X even on one handle from two threads: one producer, in
 * one thread, at a time; [2] replaces a producer that is gone, never one
 * that runs. The same holds for [4] and [5] on the consumer side.
 * (a) A side condemns from its own thread after its last call (SIDE_PROD
 *     and SIDE_SETTLED after [3], SIDE_CONS after [5]), so that a reader of
 *     the mark sees that side's final counters; the other side's calls may
 *     run meanwhile.
 * (b) shoal_ring_check() returns -EAGAIN when the consumer released a
 *     record while it was read, and may rarely fail spuriously otherwise;
 *     shoal_ring_stats() values may be mutually inconsistent. Both read
 *     only.
 */
#ifndef SHOAL_RING_H
#define SHOAL_RING_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <shoal/api.h>

#define SHOAL_RING_MIN_CAPACITY 64u
#define SHOAL_RING_MAX_CAPACITY (1u << 30)
#define SHOAL_RING_REC_HDR 8u  /* bytes of record header */

/* Flags for shoal_ring_init(). */
#define SHOAL_RING_INIT_FLAGS 0u /* none defined yet: any bit is -EINVAL */

/* A record as seen by the consumer, or described by the producer. */
struct shoal_rec {
	const void *data;
	uint32_t len;
	uint16_t tag;   /* free for the caller */
};

/*
 * Producer handle: process-local. Fields are private; the struct is public
 * so that it can live on the stack or inside the caller's structures.
 */
struct shoal_ring_prod {
	struct shoal__ring *r;
	unsigned char *data;
	uint32_t mask;
	uint32_t max_payload;
	uint32_t tail;        /* next free byte (reserved, not yet published) */
	uint32_t limit;       /* the inline reserve's bound for the tail: the end
			       * of the data area or the cached head's, the
			       * nearer; the tail itself in the error state */
	uint32_t tail_pub;    /* last published tail */
	uint32_t head_cache;  /* last head read from the consumer */
	/* Records (high half) and payload bytes (low half; fewer than the
	 * capacity, at most 2^30) reserved since the last commit: one store a
	 * record, not two, which a producer far from its consumer pays for
	 * (bench/SUITE.md, "One store a record less"). */
	uint64_t pending;
	/* The records and bytes committed, a private copy: the ring's may be
	 * overwritten by anyone who maps it, so a caller counting what a
	 * corrupted ring lost trusts this one. With the fields above, all
	 * that a commit writes: the handle's first 64 bytes. */
	uint64_t records_in;
	uint64_t bytes_in;
	bool full;            /* a commit only reads it, unless it was set */
	uint64_t full_events;
	uint32_t high_water;
	int err;
};

/* Consumer handle: process-local, fields private (see shoal_ring_prod). */
struct shoal_ring_cons {
	struct shoal__ring *r;
	const unsigned char *data;
	uint32_t mask;
	uint32_t max_payload;
	uint32_t head;        /* next byte to peek */
	uint32_t head_pub;    /* last released head */
	uint32_t head_prev;   /* head before the last peek (for unpeek) */
	uint32_t last_len;    /* payload bytes of the last peek */
	uint32_t tail_cache;  /* last tail read from the producer */
	uint32_t pending;     /* records peeked since the last release */
	uint64_t pending_bytes;
	uint64_t records_out;
	uint64_t bytes_out;
	uint64_t skipped;     /* records lost behind the head found at attach */
	int err;
};

/* Counters and indices, read from shared memory (see shoal_ring_stats()). */
struct shoal_ring_stats {
	uint32_t capacity;
	uint32_t max_payload;
	uint32_t head;
	uint32_t tail;
	uint32_t used;          /* tail - head, bytes */
	uint64_t records_in;
	uint64_t bytes_in;      /* payload bytes */
	uint64_t records_out;
	uint64_t bytes_out;
	uint64_t full_events;   /* reservations refused for lack of space (episodes) */
	uint32_t high_water;    /* most bytes in use seen by the producer when it
				 * reloaded the head (it does when the ring runs full) */
	int32_t producer_pid;   /* last attached producer, 0 if none */
	int32_t consumer_pid;
};

/* Bytes of shared memory a ring of `capacity` data bytes needs (0 if invalid). */
SHOAL_API uint64_t shoal_ring_size(uint32_t capacity);

/*
 * Initialise a ring in `mem` (`len` bytes, 128-byte aligned). `capacity` is
 * the data area size: a power of two between SHOAL_RING_MIN_CAPACITY and
 * SHOAL_RING_MAX_CAPACITY. Must not race with any handle on the same memory.
 * Returns 0, or -EINVAL (unknown flags, bad capacity, misaligned or short mem).
 */
SHOAL_API int shoal_ring_init(void *mem, uint64_t len, uint32_t capacity, uint32_t flags);

/*
 * Attach a producer or consumer handle to the ring in `mem` (`len` bytes),
 * validating the control block. The producer resumes after the last
 * committed record, the consumer at the last released one. Attaching maps
 * every page of the ring in now (madvise MADV_POPULATE_*, a system call) so
 * that the data path takes no page fault later.
 * Returns 0, or -EUCLEAN with a reason in *err if the ring is corrupted.
 */
SHOAL_API int shoal_ring_prod_attach(struct shoal_ring_prod *p, void *mem, uint64_t len,
				     struct shoal_err *err);
SHOAL_API int shoal_ring_cons_attach(struct shoal_ring_cons *c, void *mem, uint64_t len,
				     struct shoal_err *err);

/*
 * Records a consumer found lost when it attached: counted in by the producer
 * and never taken out, yet behind the head it resumes at (another writer
 * moved the head forward, and the producer wrote over them). Attach takes
 * them out of the ring's counters; the caller counts them as lost.
 */
SHOAL_API uint64_t shoal_ring_cons_skipped(const struct shoal_ring_cons *c);

/* The ring's record layout (shm/ring.c), for the inline reserve below: the
 * bytes a record of `len` payload bytes takes (header and padding; `len`
 * at most SHOAL_RING_MAX_CAPACITY / 2), and its header as one 64-bit word. */
static inline uint32_t shoal__ring_rec_size(uint32_t len)
{
	return (len + SHOAL_RING_REC_HDR + 7u) & ~7u;
}

/* One record in a producer handle's `pending`, beside its payload bytes. */
#define SHOAL__RING_PENDING_REC (1ull << 32)

static inline uint64_t shoal__ring_hdr(uint32_t len, uint16_t tag, uint16_t flags)
{
	return (uint64_t)len | (uint64_t)tag << 32 | (uint64_t)flags << 48;
}

/* The part of shoal_ring_reserve() that is not inline: a record that would
 * cross the end of the data area, a ring the cached head says is full, an
 * oversized record, a handle in its error state. */
SHOAL_API void *shoal__ring_reserve_slow(struct shoal_ring_prod *p, uint32_t len, uint16_t tag);

/* The header word of each record of a run of `len`-byte payloads with `tag`. */
static inline uint64_t shoal_ring_run_hdr(uint32_t len, uint16_t tag)
{
	return shoal__ring_hdr(len, tag, 0);
}

/* Write header word `hdr` before the payload at `payload` (a relaxed 64-bit
 * store: published by the commit with the payload). */
static inline void shoal_ring_put_hdr(void *payload, uint64_t hdr)
{
	__atomic_store_n((uint64_t *)(void *)((unsigned char *)payload - SHOAL_RING_REC_HDR), hdr,
			 __ATOMIC_RELAXED);
}

/* shoal_ring_reserve() and shoal_ring_claim(), which differ only in
 * `put_hdr` (a constant in each). */
static inline __attribute__((always_inline)) void *
shoal__ring_take(struct shoal_ring_prod *p, uint32_t len, uint16_t tag, bool put_hdr)
{
	uint32_t tail = p->tail, need = shoal__ring_rec_size(len);

	/* len <= max_payload < 2^30 first, so `need` did not wrap; limit -
	 * tail is at most the capacity. */
	if (__builtin_expect(len <= p->max_payload && need <= p->limit - tail, 1)) {
		unsigned char *payload = p->data + (tail & p->mask) + SHOAL_RING_REC_HDR;

		if (put_hdr)
			shoal_ring_put_hdr(payload, shoal_ring_run_hdr(len, tag));
		p->tail = tail + need;
		p->pending += SHOAL__RING_PENDING_REC + len;
		return payload;
	}
	return shoal__ring_reserve_slow(p, len, tag);
}

/*
 * Reserve room for a record of `len` payload bytes, after any records already
 * reserved and not committed. Returns a pointer to write the payload to, or
 * NULL when the ring is full, when len exceeds the largest payload, or when
 * the handle saw corruption (shoal_ring_prod_error() tells which).
 * The record becomes visible at the next shoal_ring_commit().
 *
 * Inline for the common case (room before the end of the data area by the
 * cached head): one bound, the header, the private index, one private count
 * and the pointer, about a dozen instructions, where a call cost 40
 * (bench/instr-count). The bound `limit` folds the end of the data area,
 * the cached head and the error state into one compare (shm/ring.c
 * prod_set_limit()).
 */
static inline void *shoal_ring_reserve(struct shoal_ring_prod *p, uint32_t len, uint16_t tag)
{
	return shoal__ring_take(p, len, tag, true);
}

/*
 * shoal_ring_reserve() without the header, as shoal_ring_claim_run() is to
 * shoal_ring_reserve_run(): the caller writes the record's header before
 * the commit, shoal_ring_put_hdr(payload, shoal_ring_run_hdr(len, tag)),
 * or that word with the payload's first 8 bytes in one 16-byte store: a
 * store less a record, which a producer far from its consumer pays for
 * (bench/SUITE.md, "One store a record less"). Returns and fails as
 * shoal_ring_reserve(); a record whose header is not written before the
 * commit is garbage to the consumer (it condemns the ring).
 */
static inline void *shoal_ring_claim(struct shoal_ring_prod *p, uint32_t len, uint16_t tag)
{
	return shoal__ring_take(p, len, tag, false);
}

/*
 * Bytes from one record's payload to the next's in a run of records of `len`
 * payload bytes (shoal_ring_reserve_run(), shoal_ring_peek_run()): the
 * record's header and its padding included, a multiple of 8.
 */
static inline uint32_t shoal_ring_stride(uint32_t len)
{
	return shoal__ring_rec_size(len);
}

/*
 * Reserve a run: up to `n` records of `len` payload bytes, each with `tag`,
 * one after the other in the data area, after any records already reserved.
 * One space check for the run, one header store per record, and the handle's
 * index and counters written once, where n calls of shoal_ring_reserve()
 * would do each n times.
 *
 * Returns how many records were reserved, as many as fit (a burst), and sets
 * *first to the payload of the first: record i's payload is at
 * (unsigned char *)*first + i * shoal_ring_stride(len). A run never crosses
 * the end of the data area, so it may come back shorter than `n` with room
 * left: call again for the rest (it starts at offset 0). Returns 0, with
 * *first unchanged, when the ring is full, when n is 0, when len exceeds the
 * largest payload, or when the handle saw corruption (shoal_ring_prod_error()
 * tells which).
 * The records become visible at the next shoal_ring_commit(), with those
 * reserved before them; shoal_ring_cancel() drops them all. A producer call
 * ([3] in the table above); wait-free, no system call.
 */
SHOAL_API unsigned shoal_ring_reserve_run(struct shoal_ring_prod *p, uint32_t len, uint16_t tag,
					  unsigned n, void **first);

/*
 * shoal_ring_reserve_run() without the headers: the caller writes each
 * record's header before the commit, shoal_ring_put_hdr(payload,
 * shoal_ring_run_hdr(len, tag)) (or copies that word there). A producer
 * that writes each record whole, its header and then its payload, before
 * the next one writes every line of the run once, in order; the headers in
 * a loop first and the payloads after make two passes over the run's
 * lines, which a producer far from its consumer pays for (bench/SUITE.md,
 * "Bursts written record by record"). Returns, sets and fails as
 * shoal_ring_reserve_run(); records whose header is not written before the
 * commit are garbage to the consumer (it condemns the ring).
 */
SHOAL_API unsigned shoal_ring_claim_run(struct shoal_ring_prod *p, uint32_t len, uint16_t tag,
					unsigned n, void **first);

/* Records reserved since the last commit: what the next
 * shoal_ring_commit() publishes. */
static inline uint32_t shoal_ring_uncommitted(const struct shoal_ring_prod *p)
{
	return (uint32_t)(p->pending >> 32);
}

/* Where the producer's tail and record and byte counts are in a ring's
 * control block (shm/ring_layout.h asserts them), for the inline
 * shoal_ring_commit() below and shoal_ring_empty(). */
#define SHOAL__RING_TAIL_OFF 128u
#define SHOAL__RING_RECORDS_IN_OFF 136u
#define SHOAL__RING_BYTES_IN_OFF 144u

/*
 * The lines a producer writes next, for one that asks for them early (a
 * prefetch for writing) while it does other work: where the next record
 * reserved or claimed begins, its header (unless a pad comes first, at
 * the data area's end), and where the next commit writes. Addresses only:
 * nothing is read or written through them here.
 */
static inline const void *shoal_ring_next_at(const struct shoal_ring_prod *p)
{
	return p->data + (p->tail & p->mask);
}

static inline const void *shoal_ring_commit_at(const struct shoal_ring_prod *p)
{
	return (const unsigned char *)p->r + SHOAL__RING_TAIL_OFF;
}

/*
 * Publish every record reserved since the last commit (one release store).
 * Inline: a single send commits once per message, and the call cost a
 * third of the commit's instructions (bench/instr-count).
 */
static inline void shoal_ring_commit(struct shoal_ring_prod *p)
{
	unsigned char *r = (unsigned char *)p->r;

	if (p->pending == 0)
		return;
	/* Room was found since the ring was last full: the next full is a
	 * new event (shm/ring.c prod_note_full()). */
	if (__builtin_expect(p->full, 0))
		p->full = false;
	p->records_in += p->pending >> 32;
	p->bytes_in += (uint32_t)p->pending;
	p->pending = 0;
	/* Relaxed: single-writer counters. The record count goes before the
	 * tail, so that R1 publishes it too: a consumer that attaches finds
	 * at least the records before the tail it sees counted in (shm/ring.c
	 * cons_skipped()). A producer killed between the two stores leaves
	 * its batch counted in but never published: counted lost, never
	 * silently gone. */
	__atomic_store_n((uint64_t *)(void *)(r + SHOAL__RING_RECORDS_IN_OFF), p->records_in,
			 __ATOMIC_RELAXED);
	__atomic_store_n((uint64_t *)(void *)(r + SHOAL__RING_BYTES_IN_OFF), p->bytes_in,
			 __ATOMIC_RELAXED);
	/* R1: pairs with A1 in shm/ring.c cons_refresh(): every header and
	 * payload byte of the reserved records is visible before the new
	 * tail. */
	__atomic_store_n((uint32_t *)(void *)(r + SHOAL__RING_TAIL_OFF), p->tail,
			 __ATOMIC_RELEASE);
	p->tail_pub = p->tail;
}

/* Drop every record reserved since the last commit. */
SHOAL_API void shoal_ring_cancel(struct shoal_ring_prod *p);

/*
 * Copy one record in and commit it. Returns 0, -EAGAIN when full, -EMSGSIZE
 * when len exceeds the largest payload, -EUCLEAN after corruption.
 */
SHOAL_API int shoal_ring_enqueue(struct shoal_ring_prod *p, const void *buf, uint32_t len,
				 uint16_t tag);

/*
 * Copy `n` records in and commit them together. `bulk` enqueues all or none
 * and returns n or 0; `burst` enqueues as many as fit and returns how many.
 * Both return -EMSGSIZE, enqueueing nothing, if any record is too large, and
 * -EUCLEAN after corruption.
 */
SHOAL_API int shoal_ring_enqueue_bulk(struct shoal_ring_prod *p, const struct shoal_rec *recs,
				      unsigned n);
SHOAL_API int shoal_ring_enqueue_burst(struct shoal_ring_prod *p, const struct shoal_rec *recs,
				       unsigned n);

/* The part of shoal_ring_empty() that is not inline: a tail that moved,
 * checked and taken as the consumer's view of the ring. */
SHOAL_API bool shoal__ring_empty_slow(struct shoal_ring_cons *c);

/*
 * True if the consumer has nothing left to peek (reads the producer's tail).
 * Inline for a consumer that looks at many rings: a tail still at our head
 * is an empty ring, which passes every check a moved tail gets.
 */
static inline bool shoal_ring_empty(struct shoal_ring_cons *c)
{
	const uint32_t *tail = (const uint32_t *)(const void *)((const unsigned char *)c->r +
								SHOAL__RING_TAIL_OFF);

	if (c->head != c->tail_cache)
		return false;
	/* Acquire: A1, as the slow path loads it (shm/ring.c). */
	if (__atomic_load_n(tail, __ATOMIC_ACQUIRE) == c->head)
		return true;
	return shoal__ring_empty_slow(c);
}

/*
 * The peeks below, and the dequeue, look at an empty ring inline
 * (shoal_ring_empty()) and call these bodies only for records to take. A
 * consumer spins on them: with the look at the tail inside a call, a
 * Shoal ring's round trip took 1.7-1.8x a plain ring's, with it inline
 * 1.0x (bench/SUITE.md, "The empty look inline").
 */
SHOAL_API bool shoal__ring_peek(struct shoal_ring_cons *c, struct shoal_rec *rec);
SHOAL_API unsigned shoal__ring_peek_burst(struct shoal_ring_cons *c, struct shoal_rec *recs,
					  unsigned n);
SHOAL_API unsigned shoal__ring_peek_run(struct shoal_ring_cons *c, struct shoal_rec *first,
					unsigned n);
SHOAL_API int shoal__ring_dequeue(struct shoal_ring_cons *c, void *buf, uint32_t cap,
				  uint16_t *tag);

/*
 * Peek at the next record after those already peeked and not released.
 * Returns true and fills *rec, or false when the ring is empty or the handle
 * saw corruption (shoal_ring_cons_error() tells which). rec->data points into
 * shared memory and stays valid until shoal_ring_release(). Length and tag
 * are read once and validated: rec->len never runs past the ring.
 */
static inline bool shoal_ring_peek(struct shoal_ring_cons *c, struct shoal_rec *rec)
{
	return !shoal_ring_empty(c) && shoal__ring_peek(c, rec);
}

/* Peek up to `n` records. Returns how many (0 when empty or corrupted). */
static inline unsigned shoal_ring_peek_burst(struct shoal_ring_cons *c, struct shoal_rec *recs,
					     unsigned n)
{
	return shoal_ring_empty(c) ? 0 : shoal__ring_peek_burst(c, recs, n);
}

/*
 * Peek a run: up to `n` records after those already peeked, each with the
 * same length and tag, one after the other in the data area. Returns how
 * many (0 when the ring is empty, n is 0, or the handle saw corruption), and
 * fills *first with the first: record i's payload is at
 * (const unsigned char *)first->data + i * shoal_ring_stride(first->len),
 * and its length and tag are first's. A record of another length or tag, a
 * pad, or the published tail ends the run; the next peek starts there. The
 * first header is checked as shoal_ring_peek() checks it, and each later one
 * must equal it word for word: a run never reaches past the published bytes
 * nor the end of the data area. The records stay valid until
 * shoal_ring_release(); shoal_ring_unpeek() gives back the last of them.
 * A consumer call ([5] in the table above); wait-free, no system call.
 */
static inline unsigned shoal_ring_peek_run(struct shoal_ring_cons *c, struct shoal_rec *first,
					   unsigned n)
{
	return shoal_ring_empty(c) ? 0 : shoal__ring_peek_run(c, first, n);
}

/*
 * Give back the record returned by the last successful peek: the next peek
 * returns it again. Only that one record, and only before a release; other
 * calls are a no-op. For consumers that find they cannot take a record now.
 */
SHOAL_API void shoal_ring_unpeek(struct shoal_ring_cons *c);

/* Release every record peeked so far (one release store). */
SHOAL_API void shoal_ring_release(struct shoal_ring_cons *c);

/*
 * Copy the next record out and release it. Returns the payload length, -EAGAIN
 * when empty, -EMSGSIZE when `cap` is too small (the record stays), -EUCLEAN
 * after corruption. Records already peeked are released with it.
 */
static inline int shoal_ring_dequeue(struct shoal_ring_cons *c, void *buf, uint32_t cap,
				     uint16_t *tag)
{
	if (shoal_ring_empty(c))
		return c->err ? c->err : -EAGAIN;
	return shoal__ring_dequeue(c, buf, cap, tag);
}

/*
 * shoal_ring_empty() for a consumer that spins on an idle ring: the lines
 * its next record is written to (two: all of a record of up to 120 bytes
 * of payload that starts a line, the first 72 to 128 bytes of any other)
 * are asked for too, every look, so that when its producer commits they
 * travel to us with the tail rather than after it. Prefetches only, never
 * read before the tail says they are published: a line asked for before
 * its producer writes it is asked for again by the next look. On a far
 * vCPU pair this takes a cache line's transfer off the time from a commit
 * to the record's read (bench/SUITE.md, "The hot ring").
 */
static inline bool shoal_ring_watch_empty(struct shoal_ring_cons *c)
{
	const unsigned char *next = c->data + (c->head & c->mask);

	__builtin_prefetch(next);
	__builtin_prefetch(next + 64);
	return shoal_ring_empty(c);
}

/*
 * The bytes the producer has published after the records already peeked,
 * as this handle last read its tail, up to the end of the data area: sets
 * *at to the first and returns how many (0: none). Their headers are not
 * checked until they are peeked: for a consumer that asks for their lines
 * early (a prefetch), never to read them.
 */
static inline uint32_t shoal_ring_ahead(const struct shoal_ring_cons *c, const void **at)
{
	uint32_t off = c->head & c->mask, contig = c->mask + 1 - off, n = c->tail_cache - c->head;

	*at = c->data + off;
	return n < contig ? n : contig;
}

/* The sticky error of a handle: 0 or -EUCLEAN. */
SHOAL_API int shoal_ring_prod_error(const struct shoal_ring_prod *p);
SHOAL_API int shoal_ring_cons_error(const struct shoal_ring_cons *c);

/* shoal_ring_cons_error(), inline, for a consumer that checks many rings
 * on each pass (a call each cost a pass over 100 empty rings a third more). */
static inline int shoal__ring_cons_err(const struct shoal_ring_cons *c)
{
	return c->err;
}

/*
 * Condemning a corrupted ring. A side whose handle went into its -EUCLEAN
 * state (or that cannot attach) marks the ring as given up, each side in its
 * own line of the control block, so that whoever owns the ring (the router)
 * can quarantine it and hand out a fresh one. The mark is stored with release
 * after everything that side published (its index and counters), so a reader
 * that sees it with shoal_ring_condemned() sees that side's final values.
 * Both work on memory that need not pass validation: `len` only has to cover
 * the control block (otherwise condemn does nothing and condemned returns 0).
 * Wait-free, no system call.
 */
#define SHOAL_RING_SIDE_PROD 1u
#define SHOAL_RING_SIDE_CONS 2u
SHOAL_API void shoal_ring_condemn(void *mem, uint64_t len, unsigned side);

/*
 * SHOAL_RING_SIDE_SETTLED (producer only, with or after SIDE_PROD): the
 * producer has also counted, as lost, what it left in the ring.
 */
#define SHOAL_RING_SIDE_SETTLED 4u

/* Which sides condemned the ring: a mask of SHOAL_RING_SIDE_*. */
SHOAL_API unsigned shoal_ring_condemned(const void *mem, uint64_t len);

/*
 * True if the consumer condemned the ring this producer writes: it reads no
 * more, so waiting for room is pointless. One load of the consumer's line;
 * for slow paths (the ring is full).
 */
SHOAL_API bool shoal_ring_prod_condemned(const struct shoal_ring_prod *p);

/*
 * The records ever committed to and released from a ring, read from its
 * counters without validating its indices (which may be the corrupted part),
 * so that what a condemned ring held can be counted. Returns 0, or -EUCLEAN
 * if `len` does not cover the control block. Values are untrusted: bound them.
 */
SHOAL_API int shoal_ring_records(const void *mem, uint64_t len, uint64_t *in, uint64_t *out);

/* Largest payload a ring accepts. */
SHOAL_API uint32_t shoal_ring_max_payload(const struct shoal_ring_prod *p);

/*
 * Read a ring's indices and counters without attaching, from any process.
 * Values are a snapshot and may be mutually inconsistent under traffic.
 * Returns 0 or -EUCLEAN (with a reason) if the control block is invalid.
 */
SHOAL_API int shoal_ring_stats(const void *mem, uint64_t len, struct shoal_ring_stats *st,
			       struct shoal_err *err);

/*
 * Validate a ring found in shared memory, read-only: the control block, the
 * indices, and every record header between head and tail (walked at most
 * once around the ring). Never trusts an index or a length it reads.
 * Returns the number of records pending (>= 0), or -EUCLEAN with exactly what
 * is wrong in *err; *st is filled whenever the control block is valid (that
 * is, whenever shoal_ring_stats() would succeed), even if the walk fails.
 * Under live traffic a concurrent producer may make a check report records
 * it has just added. A record that fails its rules after the consumer
 * released it (the producer was writing the next lap over it while it was
 * read) returns -EAGAIN, not -EUCLEAN: call again. On a live ring -EUCLEAN
 * may still come, rarely (a rewritten header that still looked valid and
 * led the check astray, a head and tail read while both moved), so tools
 * retry that a few times before reporting corruption.
 */
SHOAL_API int shoal_ring_check(const void *mem, uint64_t len, struct shoal_ring_stats *st,
			       struct shoal_err *err);

/*
 * Walking the records of a live ring read-only, from any process, without
 * being its consumer: what tools use to show what a ring holds.
 *
 * shoal_ring_walk_begin() validates the control block as shoal_ring_stats()
 * does and takes the pass's bounds: the consumer's head, then the producer's
 * tail (load-acquire: every record before it is visible). Each
 * shoal_ring_walk_next() then reads one record header between them (once, as
 * one word), checks it against the same rules as shoal_ring_check(), and
 * copies the first bytes of its payload into the caller's memory with atomic
 * loads. Nothing read from the ring is trusted: the memory may be garbage,
 * and a walk never reads outside [mem, mem + len) nor takes more than
 * capacity / 8 steps.
 *
 * The consumer may release records while they are walked, and the producer
 * then reuse their bytes. After copying a record the walk reads the head
 * again: if it has passed the record, the copy may be torn and next returns
 * -EAGAIN instead of the record (a seqlock read, with the head as the
 * sequence). The caller then begins a new pass from the new head, a bounded
 * number of times. A record returned was intact while it was copied.
 */
struct shoal_ring_walk {
	/* Read-only for callers: the pass's bounds, as begin found them. */
	uint32_t capacity;
	uint32_t head;
	uint32_t tail;
	/* Private. */
	const struct shoal__ring *r;
	uint32_t pos;         /* the next record header */
	int err;              /* sticky: the first error next returned */
};

/* One record of a walk. */
struct shoal_ring_walk_rec {
	uint32_t index;       /* the ring index of its header */
	uint32_t len;         /* payload bytes */
	uint16_t tag;
	uint32_t copied;      /* payload bytes copied into the caller's buffer */
};

/*
 * Begin a pass over the ring in `mem` (`len` bytes). Returns 0, or -EUCLEAN
 * with a reason in *err (err may be NULL) if the control block is invalid or
 * its head and tail never made sense together in a few reads.
 */
SHOAL_API int shoal_ring_walk_begin(struct shoal_ring_walk *w, const void *mem, uint64_t len,
				    struct shoal_err *err);

/*
 * The next record of the pass: fills *rec and copies the first
 * min(cap, rec->len) payload bytes to `buf`. Returns 1 (a record), 0 (the
 * pass reached its tail), -EAGAIN (the consumer released records under the
 * walk: begin again) or -EUCLEAN (a record header breaks the ring's rules:
 * damage, with the rule and the index in *err). Padding is skipped. After an
 * error, every later call returns the same error and leaves *err alone.
 */
SHOAL_API int shoal_ring_walk_next(struct shoal_ring_walk *w, struct shoal_ring_walk_rec *rec,
				   void *buf, uint32_t cap, struct shoal_err *err);

#endif
