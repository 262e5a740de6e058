/* SPDX-License-Identifier: MIT */
/*
 * The data path of a group process, shared by the files of runtime/data/
 * that make it up: rings.c (a worker's ring table), send.c, poll.c and
 * request.c. Private.
 *
 * Memory picture of one worker (struct shoal_ctx, used by one thread):
 *   up          producer of its uplink ring (-> its node's dispatcher)
 *   in[]        consumers of its inbound rings: one per dispatcher, one per
 *               direct sender (created on first use by the router), and one
 *               per other worker of this process (in-process forwarding)
 *   dout[g][w]  producers of the direct rings into other groups, opened by
 *               the link opener (runtime/control/links.c) when asked
 *   fwd[w]      producers of the in-process rings to the other workers
 * Every ring has one producer and one consumer, so a dead process can never
 * wedge a ring it does not own (DESIGN invariant 3).
 */
#ifndef SHOAL_RUNTIME_DATA_WORKER_H
#define SHOAL_RUNTIME_DATA_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/group_impl.h"
#include "shm/util.h"

#define POLL_BATCH 32u
_Static_assert(POLL_BATCH <= SHOAL__BATCH_MAX, "a run fits on_batch's array");
#define SUMMARY_TRUST 1024u   /* empty polls per scan the ready summary did not ask for */
/* Rings up to which a pass that found records is followed by a look at
 * every ring rather than by a take of the ready summary (a fence, and a
 * line the producers write again): beyond, the summary's hints are cheaper
 * than a look at every ring (shoal-bench-poll, bench/SUITE.md). */
#define SCAN_ALL_MAX 8u
#define SLEEP_SLICE_NS 100000000        /* a waiting send or request re-checks this often */
/*
 * An idle worker sleeps this long between looks of its own. Every event it
 * waits for rings its doorbell (a message committed to one of its rings, a
 * stop from the router or from shoal_group_stop()), and the doorbell loses
 * no wake-up, so this slice is only a safety net; it is long because an
 * idle wake-up costs the spin budget plus a futex round trip, about 80 us
 * here: at 100 ms, 100 idle groups used 8% of a CPU (docs/design.md).
 */
#define IDLE_SLICE_NS UINT64_C(5000000000)
#define ENV_SIZE ((uint32_t)sizeof(struct shoal_envelope))


/* Relaxed stores: the worker is the only writer of its counter line. */
#define COUNT(ctx, field) shoal_store_relaxed(&(ctx)->mw->field, ++(ctx)->field)
#define COUNT_N(ctx, field, n) shoal_store_relaxed(&(ctx)->mw->field, (ctx)->field += (n))

/* How a blocking send waits (send.c). */
/*
 * What a blocking send gives up on besides a stop: its destination group
 * failing (-EHOSTDOWN), for a request the responder's incarnation ending
 * (-EOWNERDEAD), and a deadline (-ETIMEDOUT). A try_ send passes NULL.
 */
struct send_wait {
	const struct shoal__reg_group *rg;   /* destination group, or NULL */
	uint64_t deadline;                   /* UINT64_MAX: none */
	bool incarnation;                    /* give up when rg leaves generation gen */
	uint32_t gen;
};

static const struct send_wait WAIT_FOREVER = { NULL, UINT64_MAX, false, 0 };

/* A stop asked by the router or by shoal_group_stop(): two loads, for the
 * polling paths (an empty poll, a spin predicate). */
static inline bool shoal__stop_flagged(const struct shoal_group *g)
{
	/* Relaxed: a flag; the doorbell that accompanies it orders nothing
	 * either, we only need to see it eventually. */
	return atomic_load_explicit(&g->stop, memory_order_relaxed) ||
	       shoal_load_relaxed(&g->mbx->stop) != 0;
}

/* The mark of the record at `data` in mailbox ring `in` (rings.c
 * note_crash()): never 0, the mailbox header coming before any ring. */
static inline uint64_t shoal__rec_mark(const struct shoal_ctx *ctx,
				       const struct shoal__inring *in, const void *data)
{
	uint64_t ring = (uint64_t)((const char *)in->mem - (const char *)ctx->g->mbx);
	uint64_t off = (uint64_t)((const char *)data - (const char *)in->mem);

	return ring << 32 | (off & UINT32_MAX);
}

/* rings.c: the suspect record came round; true (counted, kept aside) when
 * SHOAL__CRASHES_MAX processes died handling it. */
bool shoal__set_aside_suspect(struct shoal_ctx *ctx, const struct shoal_rec *rec);

/* Whether to set the record of `len` bytes at `data`, whose mark is
 * `mark`, aside; else marks it as in hand (one relaxed store per record, on
 * the worker's own line). */
static inline bool shoal__set_aside(struct shoal_ctx *ctx, uint64_t mark, const void *data,
				    uint32_t len)
{
	if (SHOAL_UNLIKELY(mark == ctx->suspect)) {
		struct shoal_rec rec = { data, len, 0 };

		ctx->single = POLL_BATCH;   /* the batch it was first of, alone */
		if (shoal__set_aside_suspect(ctx, &rec))
			return true;
	}
	shoal_store_relaxed(&ctx->mw->inflight, mark);
	return false;
}

/* send.c: reserve ENV_SIZE + len in `p`, waiting on `db` as `sw` says (NULL:
 * not), ringing `peer` (the consumer's doorbell, if its wake-ups may be
 * held) when full. */
void *shoal__reserve_in(struct shoal_ctx *ctx, struct shoal_ring_prod *p,
			struct shoal_doorbell *db, struct shoal_doorbell *peer, uint32_t len,
			const struct send_wait *sw, int *err);
/* send.c: make the wake-ups this worker holds (before it goes idle). */
void shoal__wake_flush(struct shoal_ctx *ctx);
/* send.c: a direct send (sw NULL: try_), with envelope flags and request id. */
int shoal__send_direct(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		       uint32_t len, struct send_wait *sw, uint32_t flags, uint64_t rid);

/* A poll's source: every inbound ring, not only those one group feeds. */
#define SHOAL__ANY_SOURCE (-2)

/* poll.c: one pass over the rings (src: all, or those fed by group src and
 * this process's workers); returns messages handled. */
uint32_t shoal__poll_rings(struct shoal_ctx *ctx, uint32_t budget, int src);
/* poll.c: copy the payload of the message a handler has in hand out of
 * its ring, before a request's wait may release that ring. */
void shoal__pin_message(struct shoal_ctx *ctx);
/* poll.c: whether a ring poll_rings(src) reads holds a record. */
bool shoal__rings_ready_from(struct shoal_ctx *ctx, int src);

#endif
