/* SPDX-License-Identifier: MIT */
/*
 * Receiving: the poll loop over a worker's inbound rings, delivery to its
 * actors, in-group forwarding to the worker that owns an actor, messages
 * deferred during a request, and the idle sleep.
 *
 * Ordering guarantees: those of the rings (R1/A1, R2/A2 in shm/ring.c) and
 * doorbells (F1/F2 in shm/doorbell.c); registry reads are relaxed snapshots
 * that order nothing: a stale one at worst makes a receiver drop a message
 * as stale (counted).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>

#include "runtime/data/relay.h"
#include "runtime/data/worker.h"
#include "shm/clock.h"
#include "shm/util.h"

/* ---- receiving ------------------------------------------------------------- */

/*
 * The latency histogram (struct shoal__mbx_lat in runtime/layout.h): from
 * a message's send_ns to the start of its handler, once per handler run (so
 * its count follows `handled`). The clock is read at most once per ring
 * batch: between batches lat_bound is 0 (as the context starts, and set
 * again by scan_rings() and handle_deferred() after each batch), so the
 * first handler of a batch reads the clock here (or take_batch(), before
 * the batch's first handler: lat_batch_bucket()). A message later in the
 * batch is measured against that read: it reads short by the time the
 * handlers before it in the batch took (at most POLL_BATCH - 1 of them; a
 * few microseconds for handlers that do not block). One sent after the read
 * (it came in while the batch ran) looks out of range against it and gets a
 * read of its own.
 *
 * In range: d = now - send_ns below both 2^SHOAL__LAT_MAX_BITS and now + 1.
 * A send_ns after now wraps d to more than now, so one compare against
 * lat_bound, the lower of the two, catches the future, the absurdly old
 * and a stale clock at once.
 */
__attribute__((noinline)) static uint64_t lat_clock(struct shoal_ctx *ctx, uint64_t send_ns)
{
	uint64_t now = shoal__clock_ns(&ctx->clk);

	ctx->lat_now = now;
	ctx->lat_bound = now < (UINT64_C(1) << SHOAL__LAT_MAX_BITS) ? now + 1 :
			 UINT64_C(1) << SHOAL__LAT_MAX_BITS;
	return now - send_ns;
}

/* n latencies in bucket b that add up to d_sum. Relaxed: the worker is
 * the only writer. */
static inline void lat_add(struct shoal__mbx_lat *h, uint32_t b, uint64_t n, uint64_t d_sum)
{
	shoal_store_relaxed(&h->bucket[b], shoal_load_relaxed(&h->bucket[b]) + n);
	shoal_store_relaxed(&h->sum_ns, shoal_load_relaxed(&h->sum_ns) + d_sum);
}

static inline void lat_record(struct shoal_ctx *ctx, uint64_t send_ns)
{
	struct shoal__mbx_lat *h = ctx->lat;
	uint64_t d = ctx->lat_now - send_ns;
	uint32_t b;

	if (SHOAL_UNLIKELY(d >= ctx->lat_bound)) {
		d = lat_clock(ctx, send_ns);
		if (d >= ctx->lat_bound && send_ns - ctx->lat_now < SHOAL__CLOCK_SLACK_NS) {
			/* Stamped by a clock a little ahead of ours: two
			 * threads' stamps agree only that closely
			 * (shm/clock.h). No wait, then. */
			d = 0;
		} else if (d >= ctx->lat_bound) {
			/* Relaxed: the worker is the only writer. */
			shoal_store_relaxed(&h->out_of_range,
					    shoal_load_relaxed(&h->out_of_range) + 1);
			return;
		}
	}
	b = shoal__lat_bucket(d);   /* < SHOAL__LAT_BUCKETS: d < 2^SHOAL__LAT_MAX_BITS */
	lat_add(h, b, 1, d);
}

/*
 * The one bucket the latencies of a batch fall in, whose send_ns lie in
 * [lo, hi], against the batch's clock read (made here if there is none
 * yet): when the two ends are in range and fall in one bucket, so does
 * every one between them (the buckets are ranges); else UINT32_MAX, and
 * each is recorded by lat_record() as it comes.
 */
static uint32_t lat_batch_bucket(struct shoal_ctx *ctx, uint64_t lo, uint64_t hi)
{
	uint64_t d_lo, d_hi;
	uint32_t b;

	if (ctx->lat_bound == 0)
		lat_clock(ctx, 0);   /* the batch's clock read */
	/* A send_ns after now wraps its d past lat_bound (lat_clock()). */
	d_lo = ctx->lat_now - hi;
	d_hi = ctx->lat_now - lo;
	if (SHOAL_UNLIKELY(d_lo >= ctx->lat_bound || d_hi >= ctx->lat_bound ||
			   (b = shoal__lat_bucket(d_lo)) != shoal__lat_bucket(d_hi)))
		return UINT32_MAX;
	return b;
}

__attribute__((always_inline)) static inline void invoke(struct shoal_ctx *ctx, uint16_t slot,
			  const struct shoal_envelope *env, const void *payload)
{
	struct shoal_group *g = ctx->g;
	struct shoal__held_msg held = { { env, payload, env->len, env->type }, NULL };
	struct shoal_msg *m = &held.m;
	struct shoal_actor *saved = ctx->cur;
	struct shoal__held_msg *saved_msg = ctx->cur_msg;

	ctx->cur = &g->actors[slot];
	ctx->cur_msg = &held;
	ctx->responded = false;
	if (SHOAL_LIKELY(g->desc.on_message != NULL)) {
		lat_record(ctx, env->send_ns);
		g->desc.on_message(ctx->cur, m);
		COUNT(ctx, handled);
	} else {
		COUNT(ctx, discarded);   /* a group that only sends: counted, not silent */
	}
	if ((env->flags & SHOAL_ENV_REQUEST) && !ctx->responded)
		shoal_respond_error(ctx, m, -ECANCELED);   /* lifecycle rule 5 */
	if (SHOAL_UNLIKELY(held.pin != NULL))
		free(held.pin);
	ctx->cur_msg = saved_msg;
	ctx->cur = saved;
}

/* shoal__pin_message() (below) for a handler of a batch (take_batch()):
 * every payload of the batch, in one allocation, each message pointed at
 * its copy. */
static void pin_batch(struct shoal__held_msg *h)
{
	struct shoal__batch *b = h->batch;
	size_t total = 0;
	unsigned char *copy;

	for (uint32_t k = 0; k < b->n; k++)
		total += b->m[k].len;
	if (b->pin != NULL || total == 0)
		return;
	copy = malloc(total);
	if (copy == NULL)
		return;
	b->pin = copy;
	for (uint32_t k = 0; k < b->n; k++) {
		memcpy(copy, b->m[k].data, b->m[k].len);
		b->m[k].data = copy;
		copy += b->m[k].len;
	}
	h->m.data = b->m[0].data;
}

/*
 * A handler's request polls, and its pass releases the rings it reads:
 * the record the handler has in hand among them, which its sender may then
 * overwrite while the handler waits. Before that, the payload is copied
 * into memory of ours and the handler's message points there (freed when
 * the handler returns), so that what it reads after the request is what it
 * was sent (group.h, lifecycle rule 4). Out of memory: left in place.
 */
void shoal__pin_message(struct shoal_ctx *ctx)
{
	struct shoal__held_msg *h = ctx->cur_msg;
	void *copy;

	if (h != NULL && h->batch != NULL) {
		pin_batch(h);
		return;
	}
	if (h == NULL || h->pin != NULL || h->m.len == 0)
		return;
	copy = malloc(h->m.len);
	if (copy == NULL)
		return;
	memcpy(copy, h->m.data, h->m.len);
	h->m.data = copy;
	h->pin = copy;
}

/*
 * Forwarding between the workers of this process goes through private
 * rings, lost if the process is killed. So that every message is handled,
 * redelivered, or counted as lost, never lost uncounted: the copies
 * forwarded from a record of a mailbox ring are committed only after that
 * record is released (shoal__poll_rings() ends its batch after such a
 * record), each copy counts in fwd_sent as it is written (before that
 * release), and fwd_taken counts it after it is handled. After the release,
 * what was sent and not handled is sent - taken, counted at the next
 * attach. A kill before the release redelivers the record and counts its
 * held copies as lost too: at most one record's copies per worker and kill
 * are both redelivered and counted, never one lost.
 */
static void fwd_commit(struct shoal_ctx *ctx, unsigned w)
{
	struct shoal_group *g = ctx->g;

	if (ctx->fwd_pend[w] == 0)
		return;
	ctx->fwd_any -= ctx->fwd_pend[w];
	ctx->fwd_pend[w] = 0;
	shoal_ring_commit(&ctx->fwd[w]);
	shoal_doorbell_notify(&g->mbx->w[w].in_db);
}

static void fwd_flush(struct shoal_ctx *ctx)
{
	for (unsigned w = 0; ctx->fwd_any > 0 && w < ctx->g->n_workers; w++)
		fwd_commit(ctx, w);
}

/*
 * Forward a message to the worker of this process that owns `slot`, or with
 * SHOAL_SLOT_ALL to every other worker. Waits while a ring is full.
 */
static void forward(struct shoal_ctx *ctx, uint16_t slot, const struct shoal_envelope *env,
		    const void *payload)
{
	struct shoal_group *g = ctx->g;
	unsigned first = slot == SHOAL_SLOT_ALL ? 0 : slot % g->n_workers;
	unsigned last = slot == SHOAL_SLOT_ALL ? g->n_workers : first + 1;

	for (unsigned w = first; w < last; w++) {
		struct shoal_envelope e = *env;
		unsigned char *dst;
		int err;

		if (w == ctx->w)
			continue;
		e.dest = shoal_addr_make(g->id, slot, g->gen);
		dst = shoal__reserve_in(ctx, &ctx->fwd[w], NULL, NULL, env->len, NULL, &err);
		if (dst == NULL && err == -EAGAIN) {
			/* Waiting tries and cancels reservations: publish this
			 * ring's first (a multicast to two of its actors). */
			fwd_commit(ctx, w);
			dst = shoal__reserve_in(ctx, &ctx->fwd[w], &g->mbx->w[w].space_db, NULL,
						env->len, &WAIT_FOREVER, &err);
		}
		if (dst == NULL) {
			COUNT(ctx, discarded);   /* only when stopping: counted, not silent */
			continue;
		}
		memcpy(dst, &e, sizeof(e));
		memcpy(dst + ENV_SIZE, payload, env->len);
		/* Relaxed: R1 in shoal_ring_commit() (fwd_commit()) orders it
		 * before the copy is visible, so taken never runs ahead of
		 * sent; R2 in shoal_ring_release() orders it before the
		 * mailbox record that made it is released. */
		COUNT(ctx, fwd_sent);
		ctx->fwd_pend[w]++;
		ctx->fwd_any++;
		if (!ctx->fwd_hold)
			fwd_commit(ctx, w);
	}
}

/* Deliver to one slot: here if this worker owns it, else forward. */
__attribute__((always_inline)) static inline void deliver_slot(struct shoal_ctx *ctx, uint16_t slot,
				const struct shoal_envelope *env, const void *payload)
{
	/* One worker owns every slot: no division (20-40 cycles) for it. */
	if (ctx->g->n_workers == 1 || slot % ctx->g->n_workers == ctx->w)
		invoke(ctx, slot, env, payload);
	else
		forward(ctx, slot, env, payload);
}

/* Every actor owned by this worker. */
static void deliver_local_all(struct shoal_ctx *ctx, const struct shoal_envelope *env,
			      const void *payload)
{
	for (uint32_t a = ctx->w; a < ctx->g->n_actors; a += ctx->g->n_workers)
		invoke(ctx, (uint16_t)a, env, payload);
}

static void deliver_group(struct shoal_ctx *ctx, const struct shoal_envelope *env,
			  const void *payload)
{
	struct shoal_group *g = ctx->g;
	struct shoal_outcome out = { .kind = SHOAL_ROUTE_UNICAST, .n = 1, .slots = { 0 } };
	struct shoal_msg m = { env, payload, env->len, env->type };

	if (g->desc.route != NULL)
		g->desc.route(&m, &out, g->desc.user);
	switch (out.kind) {
	case SHOAL_ROUTE_UNICAST:
	case SHOAL_ROUTE_MULTICAST:
		for (uint8_t i = 0; i < out.n && i < SHOAL_OUT_MAX_SLOTS; i++) {
			if (out.slots[i] >= g->n_actors) {
				COUNT(ctx, discarded);
				continue;
			}
			deliver_slot(ctx, out.slots[i], env, payload);
			if (out.kind == SHOAL_ROUTE_UNICAST)
				break;
		}
		break;
	case SHOAL_ROUTE_BROADCAST:
		deliver_local_all(ctx, env, payload);
		forward(ctx, SHOAL_SLOT_ALL, env, payload);
		break;
	default:
		COUNT(ctx, discarded);
		break;
	}
}

/* Keep a record aside while a request waits (lifecycle: handled later). */
static void defer(struct shoal_ctx *ctx, const void *rec, uint32_t len)
{
	struct shoal__deferred *d = malloc(sizeof(*d) + len);

	if (d == NULL) {
		COUNT(ctx, discarded);   /* out of memory: counted, not silent */
		return;
	}
	d->next = NULL;
	d->len = len;
	memcpy(d->rec, rec, len);
	/* Held in process memory from the ring's release on, as a forwarded
	 * copy is: counted the same way (see forward()), so that a kill
	 * counts it lost at the next attach. */
	COUNT(ctx, fwd_sent);
	if (ctx->def_tail)
		ctx->def_tail->next = d;
	else
		ctx->def_head = d;
	ctx->def_tail = d;
}

static void take_response(struct shoal_ctx *ctx, const struct shoal_envelope *env,
			  const void *payload)
{
	struct shoal_reply *r = ctx->wait_reply;

	ctx->wait_done = true;
	r->from_responder = true;
	if (env->flags & SHOAL_ENV_ERROR) {
		int32_t e = -EPROTO;

		if (env->len == sizeof(e))
			memcpy(&e, payload, sizeof(e));
		ctx->wait_status = e < 0 ? e : -EPROTO;
		return;
	}
	r->type = env->type;
	r->len = env->len < r->cap ? env->len : r->cap;
	if (r->len > 0)
		memcpy(r->buf, payload, r->len);
	ctx->wait_status = env->len > r->cap ? -EMSGSIZE : 0;
}

/*
 * Is this group its host's bridge, whose mailbox takes the direct messages
 * and responses for groups of other hosts (docs/hosts.md)? Relaxed:
 * router-written before any group process started.
 */
static bool relays(const struct shoal_group *g)
{
	return shoal_load_relaxed(&g->reg.hdr->bridge) == g->id + 1u;
}

/*
 * A record for a group of another host, in the bridge's mailbox: handed to
 * the bridge's handler as it is. Not as a message to one of its actors: a
 * request is answered by its responder on the far host, never here.
 */
static void relay(struct shoal_ctx *ctx, const struct shoal_envelope *env, const void *payload)
{
	struct shoal_group *g = ctx->g;
	struct shoal_msg m = { env, payload, env->len, env->type };

	if (g->desc.on_message == NULL) {
		COUNT(ctx, discarded);
		return;
	}
	g->desc.on_message(&g->actors[0], &m);
	COUNT(ctx, handled);
}

/*
 * Whether the checks of a record (handle_record(), batch_slot()) could
 * answer otherwise for envelope copy `a` than for copy `b` of a record of
 * the same length: they read type and len (one word), dest, and flags
 * (the word it shares with `reserved`, compared too: a difference there
 * only costs the checks).
 */
static inline bool env_checked_words_differ(const struct shoal_envelope *a,
					    const struct shoal_envelope *b)
{
	uint64_t a0, b0, a6, b6;

	_Static_assert(offsetof(struct shoal_envelope, len) ==
				       offsetof(struct shoal_envelope, type) + 4 &&
			       offsetof(struct shoal_envelope, reserved) ==
				       offsetof(struct shoal_envelope, flags) + 4,
		       "type and len, flags and reserved: one word each");
	memcpy(&a0, &a->type, sizeof(a0));
	memcpy(&b0, &b->type, sizeof(b0));
	memcpy(&a6, &a->flags, sizeof(a6));
	memcpy(&b6, &b->flags, sizeof(b6));
	return ((a0 ^ b0) | (a->dest ^ b->dest) | (a6 ^ b6)) != 0;
}

/* Handle one record (envelope + payload) from an inbound ring. Inline in
 * the pass: a call per record saved and restored six registers. */
__attribute__((always_inline)) static inline void handle_record(struct shoal_ctx *ctx,
								 const void *rec, uint32_t len)
{
	struct shoal_group *g = ctx->g;
	struct shoal_envelope env;
	const unsigned char *payload = (const unsigned char *)rec + ENV_SIZE;
	uint16_t slot;

	/* Untrusted: copy the envelope once, then validate the copy. */
	if (SHOAL_UNLIKELY(len < ENV_SIZE))
		goto malformed;
	memcpy(&env, rec, sizeof(env));
	/* The usual record: one like the last this worker checked in full
	 * and handed to an actor of its own (ctx->ok_env) goes to the same
	 * actor. Its length is checked here, the rest by the compare. */
	if (SHOAL_LIKELY(env.len == len - ENV_SIZE && !env_checked_words_differ(&env, &ctx->ok_env) &&
			 ctx->wait_rid == 0)) {
		COUNT(ctx, received);
		invoke(ctx, ctx->ok_slot, &env, payload);
		return;
	}
	if (SHOAL_UNLIKELY(!shoal__env_sane(&env, len)))
		goto malformed;
	if (env.flags & SHOAL_ENV_RESPONSE) {
		if (ctx->wait_rid != 0 && env.request_id == ctx->wait_rid && !ctx->wait_done) {
			COUNT(ctx, received);
			take_response(ctx, &env, payload);
		} else if (shoal_addr_group(env.dest) != g->id && relays(g)) {
			COUNT(ctx, received);
			relay(ctx, &env, payload);
		} else {
			COUNT(ctx, discarded);   /* a late response: its request gave up */
		}
		return;
	}
	if (ctx->wait_rid != 0) {
		defer(ctx, rec, len);
		return;
	}
	COUNT(ctx, received);
	if (shoal_addr_group(env.dest) != g->id) {
		if (!relays(g))
			goto malformed;
		relay(ctx, &env, payload);
		return;
	}
	slot = shoal_addr_slot(env.dest);
	if (slot < SHOAL_MAX_ACTORS && !(env.flags & SHOAL_ENV_ROUTED) &&
	    shoal_addr_gen(env.dest) != g->gen) {
		COUNT(ctx, stale);   /* for an actor of an earlier incarnation */
		return;
	}
	if (slot < g->n_actors) {
		if (g->n_workers == 1 || slot % g->n_workers == ctx->w) {
			ctx->ok_env = env;
			ctx->ok_slot = slot;
		}
		deliver_slot(ctx, slot, &env, payload);
	} else if (slot == SHOAL_SLOT_ALL)
		deliver_local_all(ctx, &env, payload);
	else if (slot == SHOAL_SLOT_GROUP)
		deliver_group(ctx, &env, payload);
	else
		goto malformed;
	return;
malformed:
	COUNT(ctx, malformed);
}

/* Handle messages deferred during a request, oldest first. */
static uint32_t handle_deferred(struct shoal_ctx *ctx, uint32_t budget)
{
	uint32_t n = 0;

	while (ctx->def_head != NULL && n < budget) {
		struct shoal__deferred *d = ctx->def_head;

		ctx->def_head = d->next;
		if (ctx->def_head == NULL)
			ctx->def_tail = NULL;
		handle_record(ctx, d->rec, d->len);
		COUNT(ctx, fwd_taken);
		free(d);
		n++;
	}
	ctx->lat_bound = 0;   /* these were a batch for lat_record() */
	return n;
}

/*
 * Does a wait for group `src` read ring `in`? The rings of the other
 * workers of this process always: a worker that stopped reading them could
 * stall the worker forwarding to it, which the responder may need.
 */
static inline bool reads(const struct shoal__inring *in, int src)
{
	return src == SHOAL__ANY_SOURCE || in->src_group == src ||
	       in->src_group == SHOAL__SRC_WORKERS;
}

/*
 * Whether a pass may find anything, and where (ctx->look): their ready
 * summary (shm/doorbell.h) says so, one word however many rings there
 * are, and which direct rings its hints name. After a pass that left
 * records (a budget, a ring not drained), or found some among at most
 * SCAN_ALL_MAX rings, the next one reads every ring regardless. A true
 * answer may have taken the summary: the pass must follow. Measured
 * (shoal-bench-iceoryx, empty shoal_poll(ctx, 0, 0)): 3.4 ns, against 9.7
 * ns scanning one ring; the ping-pong round trip unchanged.
 *
 * Among at most SCAN_ALL_MAX rings, the ring a pass last took records
 * from (ctx->hot) is watched beside the summary: its tail and the lines
 * of its next record (shoal_ring_watch_empty()), which its producer writes
 * before it marks the summary, travel to us with the summary's line,
 * where a take would ask for the tail only once the summary's line had
 * come, and for the record once the tail had (bench/SUITE.md, "The hot
 * ring"). A tail that moved makes a pass without taking the summary (its
 * exchange waits for the line, exclusive): of that ring's hint if the
 * summary shows nothing, else of every ring, so that the poll still finds
 * every message whose send returned before it began
 * (tests/hint_review_test.c), and a busy hot ring hides no other. The
 * summary is read first (acquire: the tail is read after it), so that a
 * mark seen means its producer's commit seen. Left set, it still stands
 * for every commit since its last take and brings one more pass later.
 * Past SCAN_ALL_MAX rings the watch stops: there a look at every ring
 * costs more than the take it saves.
 */
static inline bool worth_a_pass(struct shoal_ctx *ctx)
{
	bool shown;

	if (ctx->look != 0)
		return true;
	/* The summary is shared memory: a peer that damaged it would strand
	 * a busy poller; one pass in SUMMARY_TRUST reads every ring. */
	if ((++ctx->quiet_polls & (SUMMARY_TRUST - 1)) == 0) {
		ctx->look = SHOAL_DOORBELL_READY_SET;
		return true;
	}
	shown = shoal_doorbell_ready_shown(&ctx->mw->in_db);
	if (ctx->hot != NULL && !shoal_ring_watch_empty(&ctx->hot->c))
		ctx->look = shown ? SHOAL_DOORBELL_READY_SET : ctx->hot->look;
	else if (shown)
		ctx->look = shoal__doorbell_ready_take_slow(&ctx->mw->in_db);
	return ctx->look != 0;
}

/*
 * The records of a run are handled one by one from ctx->run, where a pass
 * inside one of their handlers finds them: a request's pass that reads the
 * same ring takes over the rest of the run (take_over()), so that the
 * run's records, then those after them, wait in the deferred list in ring
 * order; a plain poll in the handler leaves the ring to the run. Either
 * way the run ends there: the records after it come after the deferred.
 */
static uint32_t take_over(struct shoal_ctx *ctx)
{
	uint32_t n = ctx->run.left;

	for (; ctx->run.left > 0; ctx->run.left--, ctx->run.next += ctx->run.stride)
		defer(ctx, ctx->run.next, ctx->run.len);
	ctx->run.taken_over = true;
	return n;
}

/*
 * The run in hand to the bridge (relay.h): as many of its records as the
 * bridge carries itself, from the first; the rest go on one by one. Not
 * where the run holds the suspect record: that one is looked at as
 * shoal__set_aside() does. Returns how many the bridge took.
 */
static __attribute__((noinline)) uint32_t relay_run(struct shoal_ctx *ctx, uint32_t i)
{
	struct shoal__relay_run r = { ctx->run.next, ctx->run.len, ctx->run.stride, ctx->run.left,
				      &ctx->mw->inflight,
				      shoal__rec_mark(ctx, &ctx->in[i], ctx->run.next) };
	uint32_t k;

	/* Unsigned: a suspect before the mark, or of another ring, is far. */
	if (ctx->suspect - r.mark < (uint64_t)r.n * r.stride)
		return 0;
	k = ctx->relay_run(ctx->relay_user, &r);
	if (k == 0)
		return 0;
	ctx->run.next += (size_t)k * r.stride;
	ctx->run.left -= k;
	COUNT_N(ctx, received, k);
	COUNT_N(ctx, handled, k);
	return k;
}

void shoal__relay_runs(struct shoal_ctx *ctx, shoal__relay_run_fn fn, void *user)
{
	ctx->relay_run = fn;
	ctx->relay_user = user;
}

void shoal__relay_latency(struct shoal_ctx *ctx, uint64_t send_ns)
{
	lat_record(ctx, send_ns);
}

/*
 * The actor a record copied for a batch (take_batch()) is for, checked as
 * handle_record() checks it, or UINT32_MAX for one that a batch does not
 * take: malformed, a request or a response, for another group, an actor
 * out of range, or a direct message of an earlier generation.
 */
static inline uint32_t batch_slot(const struct shoal_group *g, const struct shoal_envelope *env,
				  uint32_t len)
{
	uint32_t s;

	if (!shoal__env_sane(env, len) || (env->flags & (SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE)) ||
	    shoal_addr_group(env->dest) != g->id)
		return UINT32_MAX;
	s = shoal_addr_slot(env->dest);
	if (s == SHOAL_SLOT_GROUP && g->desc.route == NULL)
		return 0;   /* the group as a whole, without a router: actor 0 */
	if (s >= g->n_actors ||
	    (!(env->flags & SHOAL_ENV_ROUTED) && shoal_addr_gen(env->dest) != g->gen))
		return UINT32_MAX;
	return s;
}

/*
 * A batch: from the run's next record on, the plain messages for one
 * actor, handed to on_batch (group.h) in one call, or with `each` to
 * on_message one by one. Stops before anything else
 * (a request, a response, a message for another actor, for the
 * group's own router, a malformed or stale record, the suspect record of
 * earlier crashes): the pass takes that one, as it takes every record while
 * ctx->single says so. `mark` is the next record's. Each envelope is copied
 * and its copy checked, as handle_record() does, and the latency bucket
 * they share, if they do, is found once. on_batch's batch is counted
 * received and its latencies recorded before the call, marked in hand by
 * its first record's mark and counted handled after it; with `each`, each
 * message is counted received, its latency recorded and marked in hand by
 * its own mark before its handler and counted handled after it, as a
 * message alone is, so that the counters read as they did and a crash
 * finds the message that caused it. Returns how many it handed.
 *
 * The mailbox rings of a one-worker group only (pass_ring()): a kill in
 * the middle of a batch leaves its records to the next process, as for one
 * message. Several workers take their mailbox one record at a time, and
 * the copies they forward to each other are not redelivered but counted
 * lost (forward()), each unless counted taken after its handler: a batch
 * could not say which of its copies its handler had finished, and would
 * count those lost as well.
 */
static inline __attribute__((always_inline)) uint32_t take_batch(struct shoal_ctx *ctx,
								   uint64_t mark, bool each)
{
	struct shoal_group *g = ctx->g;
	struct shoal__batch *b = &ctx->batch;
	const unsigned char *rec = ctx->run.next;
	uint32_t len = ctx->run.len, stride = ctx->run.stride, n = 0, end = ctx->run.left;
	uint32_t slot = UINT32_MAX;
	struct shoal__held_msg held = { { NULL, NULL, 0, 0 }, NULL, b };
	struct shoal_actor *saved = ctx->cur;
	struct shoal__held_msg *saved_msg = ctx->cur_msg;
	uint64_t send_lo = UINT64_MAX, send_hi = 0, send_sum = 0, now;
	uint32_t bucket;

	if (ctx->single > 0) {
		ctx->single--;
		return 0;
	}
	if (len < ENV_SIZE)
		return 0;
	/* Unsigned: a suspect before the mark, or of another ring, is far. */
	if (ctx->suspect - mark < (uint64_t)end * stride)
		end = (uint32_t)((ctx->suspect - mark) / stride);
	for (; n < end; n++, rec += stride) {
		struct shoal_envelope *env = &b->env[n];

		memcpy(env, rec, sizeof(*env));
		/* The usual run, one sender's messages to one actor: a copy
		 * whose checked words are those of the copy before it passes
		 * as that one did, unchecked again. */
		if (n == 0 || env_checked_words_differ(env, env - 1)) {
			uint32_t s = batch_slot(g, env, len);

			if (s == UINT32_MAX || (n > 0 && s != slot))
				break;   /* refused, or not the first's actor's */
			slot = s;
		}
		b->m[n] = (struct shoal_msg){ env, rec + ENV_SIZE, env->len, env->type };
		send_lo = env->send_ns < send_lo ? env->send_ns : send_lo;
		send_hi = env->send_ns > send_hi ? env->send_ns : send_hi;
		send_sum += env->send_ns;
	}
	if (n == 0)
		return 0;
	bucket = lat_batch_bucket(ctx, send_lo, send_hi);
	now = ctx->lat_now;
	b->n = n;
	b->pin = NULL;
	ctx->run.next += (size_t)n * stride;
	ctx->run.left -= n;
	ctx->cur = &g->actors[slot];
	ctx->cur_msg = &held;
	if (each) {
		/* on_message, one by one, each counted received, its latency
		 * recorded and marked in hand before its handler and counted
		 * handled after it, as a message alone is; the message a
		 * handler's sends carry the trace of is its own. The batch's
		 * bucket holds while no handler's poll read the clock again. */
		for (uint32_t k = 0; k < n; k++, mark += stride) {
			COUNT(ctx, received);
			if (SHOAL_LIKELY(bucket != UINT32_MAX && ctx->lat_now == now &&
					 ctx->lat_bound != 0))
				lat_add(ctx->lat, bucket, 1, now - b->env[k].send_ns);
			else
				lat_record(ctx, b->env[k].send_ns);
			shoal_store_relaxed(&ctx->mw->inflight, mark);
			held.m = b->m[k];
			g->desc.on_message(ctx->cur, &b->m[k]);
			COUNT(ctx, handled);
		}
	} else {
		COUNT_N(ctx, received, n);
		if (SHOAL_LIKELY(bucket != UINT32_MAX))
			lat_add(ctx->lat, bucket, n, n * now - send_sum);
		else
			for (uint32_t k = 0; k < n; k++)
				lat_record(ctx, b->env[k].send_ns);
		shoal_store_relaxed(&ctx->mw->inflight, mark);
		held.m = b->m[0];
		g->desc.on_batch(ctx->cur, b->m, n);
		COUNT_N(ctx, handled, n);
	}
	if (SHOAL_UNLIKELY(b->pin != NULL))
		free(b->pin);
	ctx->cur_msg = saved_msg;
	ctx->cur = saved;
	return n;
}

static __attribute__((noinline)) uint32_t take_batch_call(struct shoal_ctx *ctx, uint64_t mark)
{
	return take_batch(ctx, mark, false);
}

static __attribute__((noinline)) uint32_t take_batch_each(struct shoal_ctx *ctx, uint64_t mark)
{
	return take_batch(ctx, mark, true);
}

/* How take_runs() hands the runs of a ring on (take_batch()). */
enum run_batch {
	RUN_ONE_BY_ONE,   /* each record through handle_record() */
	RUN_BATCH_CALL,   /* batches to on_batch */
	RUN_BATCH_EACH,   /* batches checked at once, each message to on_message */
};

/*
 * Ask for the lines of what ring `c` published after the run just peeked,
 * up to as many bytes as the run (the next run, in a burst), while this
 * run's records are handled: they come from the sender's CPU then, not
 * one by one when the next peek reads them. `shoal-bench-iceoryx --short
 * --only tput` against the build before, middle placement, two sets:
 * `shoal-burst` 1.033x and 1.139x (higher in 8 of 10, 7 of 8),
 * `shoal-batch` 1.051x and 1.083x (8 of 10, 7 of 8), the plain contenders
 * 0.97-1.04x (bench/SUITE.md, "The next run asked for"). A ring its
 * sender keeps nearly empty has nothing published ahead: nothing is
 * asked.
 */
static inline void ask_next_run(const struct shoal_ring_cons *c, uint32_t run_bytes)
{
	const void *at;
	uint32_t ahead = shoal_ring_ahead(c, &at);

	if (ahead > run_bytes)
		ahead = run_bytes;
	for (uint32_t b = 0; b < ahead; b += 64)
		__builtin_prefetch((const unsigned char *)at + b);
}

/*
 * The outer pass over ring in[i]: runs of records of one length, up to
 * POLL_BATCH and `budget` records. Returns how many it took; *drained
 * says whether it stopped at the ring's end (else records may be left).
 * `batch`: other than RUN_ONE_BY_ONE for a mailbox ring of a one-worker
 * group (take_batch() says why only those); a constant where it is
 * inlined, so that each form's pass pays nothing for the others.
 */
static inline __attribute__((always_inline)) uint32_t
take_runs(struct shoal_ctx *ctx, uint32_t i, bool mailbox, uint32_t budget, bool *drained,
	  enum run_batch batch)
{
	/* A record whose handler forwards copies is released before they go
	 * (forward()): one at a time where that can happen. */
	bool one_by_one = mailbox && ctx->g->n_workers > 1;
	bool relay = ctx->relay_run != NULL && mailbox && !one_by_one && ctx->wait_rid == 0;
	uint32_t taken = 0, limit = budget < POLL_BATCH ? budget : POLL_BATCH;
	struct shoal_rec first;

	ctx->run.ring = i;
	ctx->run.taken_over = false;
	while (taken < limit) {
		struct shoal__inring *in = &ctx->in[i];
		unsigned got = shoal_ring_peek_run(&in->c, &first, one_by_one ? 1 : limit - taken);
		unsigned asked;
		uint64_t mark;

		if (got == 0) {
			*drained = true;
			break;
		}
		asked = one_by_one ? 1 : limit - taken;
		ctx->run.next = first.data;
		ctx->run.len = first.len;
		ctx->run.stride = shoal_ring_stride(first.len);
		/* A run cut short by the tail has nothing published after it. */
		if (got == asked)
			ask_next_run(&ctx->in[i].c, got * ctx->run.stride);
		ctx->run.left = got;
		ctx->run.active = true;
		if (SHOAL_UNLIKELY(relay))
			taken += relay_run(ctx, i);
		/* The run's records' marks, one stride apart (the ring's
		 * mapping stays where it is while the run lasts). */
		mark = shoal__rec_mark(ctx, in, ctx->run.next);
		while (ctx->run.left > 0) {
			const unsigned char *rec;
			uint32_t len;
			uint64_t m;

			/* A message alone goes to handle_record(). */
			if (batch != RUN_ONE_BY_ONE && ctx->run.left > 1) {
				uint32_t k = batch == RUN_BATCH_CALL ? take_batch_call(ctx, mark) :
								      take_batch_each(ctx, mark);

				if (k > 0) {
					mark += (uint64_t)k * ctx->run.stride;
					taken += k;
					continue;
				}
			}
			rec = ctx->run.next;
			len = ctx->run.len;
			m = mark;
			mark += ctx->run.stride;
			ctx->run.next = rec + ctx->run.stride;
			ctx->run.left--;
			taken++;
			if (mailbox && shoal__set_aside(ctx, m, rec, len))
				continue;
			handle_record(ctx, rec, len);
			if (!mailbox)
				COUNT(ctx, fwd_taken);
			else if (ctx->fwd_any > 0)
				goto out;   /* release it before its copies go */
		}
		/* A run shorter than asked may have met the tail: an inline
		 * look, not another call, says whether more came. */
		if (ctx->run.taken_over)
			break;
		if (got < asked && shoal_ring_empty(&ctx->in[i].c)) {
			*drained = true;
			break;
		}
	}
out:
	ctx->run.active = false;
	return taken;
}

/* A pass inside a handler (a request waiting): one record at a time. */
static uint32_t take_one_by_one(struct shoal_ctx *ctx, uint32_t i, bool mailbox, uint32_t budget)
{
	uint32_t taken = 0;
	struct shoal_rec rec;

	while (taken < POLL_BATCH && taken < budget && shoal_ring_peek(&ctx->in[i].c, &rec)) {
		taken++;
		handle_record(ctx, rec.data, rec.len);
		if (!mailbox)
			COUNT(ctx, fwd_taken);
	}
	return taken;
}

/*
 * A corrupted ring is given up (the router replaces it and counts what it
 * held); one branch on a field of our own handle.
 */
static inline void check_ring(struct shoal__inring *in)
{
	if (SHOAL_UNLIKELY(shoal__ring_cons_err(&in->c) != 0) && !in->condemned) {
		in->condemned = true;
		shoal_ring_condemn(in->mem, in->len, SHOAL_RING_SIDE_CONS);
	}
}

/*
 * The pass over ring in[i], at most `budget` records: returns how many it
 * took, and sets *left when it may have left some.
 */
static inline __attribute__((always_inline)) uint32_t
pass_ring(struct shoal_ctx *ctx, uint32_t i, bool outer, int src, uint32_t budget, bool *left)
{
	struct shoal__inring *in = &ctx->in[i];
	bool mailbox = in->src_group != SHOAL__SRC_WORKERS, drained = false;
	uint32_t taken = 0;

	if (!reads(in, src))
		return 0;
	if (!outer && ctx->run.active && ctx->run.ring == i) {
		/* The ring whose run a handler of ours has in hand. */
		if (ctx->wait_rid == 0) {
			*left = true;
			return 0;   /* a poll in the handler: the run goes first */
		}
		taken = take_over(ctx);
	} else if (shoal_ring_empty(&in->c)) {
		/* Empty, the usual case of all rings but one: a look at
		 * its tail, inline, and no handler set-up. */
		check_ring(in);
		return 0;
	}
	if (outer)
		ctx->fwd_hold = mailbox;
	if (budget > taken) {
		/* Not while a request made outside a handler waits: the
		 * records then go aside (handle_record()). */
		bool batches = outer && mailbox && ctx->g->n_workers == 1 && ctx->wait_rid == 0;

		if (batches && SHOAL_UNLIKELY(ctx->g->desc.on_batch != NULL)) {
			taken += take_runs(ctx, i, mailbox, budget, &drained, RUN_BATCH_CALL);
		} else if (batches && ctx->g->desc.on_message != NULL) {
			taken += take_runs(ctx, i, mailbox, budget, &drained, RUN_BATCH_EACH);
		} else if (outer) {
			taken += take_runs(ctx, i, mailbox, budget, &drained, RUN_ONE_BY_ONE);
		} else {
			uint32_t room = budget - taken;
			uint32_t got = take_one_by_one(ctx, i, mailbox, room);

			drained = got < POLL_BATCH && got < room;
			taken += got;
		}
	}
	*left |= !drained;
	in = &ctx->in[i];
	/* The ring empty polls watch beside the summary (worth_a_pass()):
	 * this one, among few rings, or none once a pass of it took nothing
	 * (a ring given up, whose tail still looks moved, must not bring a
	 * pass each poll). */
	if (taken == 0 && ctx->hot == in)
		ctx->hot = NULL;
	if (taken > 0) {
		ctx->hot = ctx->n_in <= SCAN_ALL_MAX ? in : NULL;
		ctx->lat_bound = 0;   /* the next batch reads the clock afresh */
		shoal_ring_release(&in->c);
		if (outer && mailbox)
			shoal_store_relaxed(&ctx->mw->inflight, 0);
		ctx->released = true;
	}
	/* After the release above, so that the router counts exactly
	 * what is left. */
	check_ring(in);
	if (outer) {
		fwd_flush(ctx);
		ctx->fwd_hold = false;
	}
	return taken;
}

/*
 * The pass itself: every ring, or (a pass the ready summary asked for with
 * hints) the rings of those hints. Made twice (below): for a poll of every
 * source, the common one, and for a request's wait on one group.
 */
static inline __attribute__((always_inline)) uint32_t scan_rings(struct shoal_ctx *ctx,
								  uint32_t budget, int src)
{
	/* A handler's request polls from inside the outer pass: that inner
	 * pass only sets records aside for later (defer()), and leaves the
	 * outer record's marks and held forwards alone. */
	bool outer = !ctx->polling, left = false, all = true;
	uint32_t n = 0, i = 0, k = 0, bits = 0, next = 0;

	ctx->polling = true;
	shoal__ctx_scan(ctx);
	if (src == SHOAL__ANY_SOURCE) {
		all = ctx->look == 0 || (ctx->look & SHOAL_DOORBELL_READY_SET);
		bits = ctx->look;
		ctx->look = 0;
	}
	if (all) {
		/* The pass's first ring, one further each pass; no division
		 * (some 25 cycles of a poll's latency). */
		i = ctx->rr < ctx->n_in ? ctx->rr : 0;
		ctx->rr = i + 1;
		for (; k < ctx->n_in && n < budget; k++, i = i + 1 < ctx->n_in ? i + 1 : 0)
			n += pass_ring(ctx, i, outer, src, budget - n, &left);
	} else {
		/* Only the rings of the hints set: a list per bit. */
		for (bits >>= 2; bits != 0 && n < budget; bits &= bits - 1)
			for (next = ctx->hint_first[__builtin_ctz(bits)]; next != 0 && n < budget;) {
				i = next - 1;
				next = ctx->in[i].hint_next;
				n += pass_ring(ctx, i, outer, src, budget - n, &left);
			}
	}
	if (outer)
		ctx->polling = false;
	/* Records left (a budget, a ring not drained): the next pass reads
	 * every ring without asking the summary; so it does after records
	 * from a few rings, where that costs less than a take. */
	if (src == SHOAL__ANY_SOURCE &&
	    (left || n >= budget || (n > 0 && ctx->n_in <= SCAN_ALL_MAX)))
		ctx->look |= SHOAL_DOORBELL_READY_SET;
	/* Streaming without sleep: let our producers skip their fence. */
	if (n > 0 && ctx->idle.streak < SHOAL_UNFENCE_AFTER)
		shoal_doorbell_streak(&ctx->mw->in_db, &ctx->idle.streak, n);
	if (ctx->released) {
		/* Direct senders may sleep waiting for the space we just made. */
		ctx->released = false;
		shoal_doorbell_notify_quiet(&ctx->mw->space_db, &ctx->space_quiet);
	}
	return n;
}

/*
 * The pass over every source's rings, and over those of one group, each
 * with its source a constant (no look at each ring's source in the first).
 * Not inlined: an empty poll that the summary answers should not pay their
 * register saves.
 */
static __attribute__((noinline)) uint32_t scan_any(struct shoal_ctx *ctx, uint32_t budget)
{
	return scan_rings(ctx, budget, SHOAL__ANY_SOURCE);
}

static __attribute__((noinline)) uint32_t scan_from(struct shoal_ctx *ctx, uint32_t budget,
						    int src)
{
	return scan_rings(ctx, budget, src);
}

/* Drain the inbound rings written by group `src` (SHOAL__ANY_SOURCE: all). */
uint32_t shoal__poll_rings(struct shoal_ctx *ctx, uint32_t budget, int src)
{
	if (src != SHOAL__ANY_SOURCE)
		return scan_from(ctx, budget, src);
	return worth_a_pass(ctx) ? scan_any(ctx, budget) : 0;
}

/*
 * Whether a wait has anything to take. A plain poll in a handler leaves
 * the ring of the handler's run to the run (pass_ring()): what waits
 * there is not for it, and counting it would keep its timed wait from
 * ever sleeping.
 */
bool shoal__rings_ready_from(struct shoal_ctx *ctx, int src)
{
	bool in_run = ctx->polling && ctx->run.active && ctx->wait_rid == 0;

	shoal__ctx_scan(ctx);
	for (uint32_t k = 0; k < ctx->n_in; k++)
		if (reads(&ctx->in[k], src) && !(in_run && ctx->run.ring == k) &&
		    !shoal_ring_empty(&ctx->in[k].c))
			return true;
	return shoal__stop_flagged(ctx->g);
}

static bool rings_ready(void *arg)
{
	return shoal__rings_ready_from(arg, SHOAL__ANY_SOURCE);
}

/* shoal_poll() but its empty-poll shortcut: pass, and wait if asked. */
__attribute__((noinline)) static int poll_pass(struct shoal_ctx *ctx, uint32_t budget,
					       int64_t timeout_ns)
{
	/* Set at the first empty pass: a poll that finds work, or a busy
	 * poller's timeout 0, reads no clock. */
	uint64_t deadline = 0, now;
	uint32_t n;

	if (budget == 0)
		budget = UINT32_MAX;
	for (;;) {
		n = ctx->def_head != NULL ? handle_deferred(ctx, budget) : 0;
		n += shoal__poll_rings(ctx, budget - n, SHOAL__ANY_SOURCE);
		if (n > 0)
			return (int)n;
		if (shoal__stop_flagged(ctx->g))
			return -ESHUTDOWN;   /* stopped, and nothing left to drain */
		if (timeout_ns == 0)
			return 0;
		now = shoal__now_ns();
		if (deadline == 0)
			deadline = timeout_ns < 0 ? UINT64_MAX : now + (uint64_t)timeout_ns;
		if (now >= deadline)
			return 0;
		/* Before each sleep slice, not on an empty poll: a dead
		 * router sets the stop flag that the next pass returns on. */
		if (shoal__router_gone(ctx->g))
			continue;
		shoal__wake_flush(ctx);
		shoal_doorbell_idle_wait(&ctx->mw->in_db, &ctx->idle, rings_ready, ctx,
					 (int64_t)(deadline - now < IDLE_SLICE_NS ? deadline - now :
						   IDLE_SLICE_NS));
		/* The wait ends on a scan that found records (or a wake-up):
		 * pass over every ring whatever the summary says. */
		ctx->look = SHOAL_DOORBELL_READY_SET;
	}
}

int shoal_poll(struct shoal_ctx *ctx, uint32_t budget, int64_t timeout_ns)
{
	/* A busy poller's poll, here: what poll_pass() would do for it,
	 * without its frame and shoal__poll_rings()'s (bench/instr-count: an
	 * empty poll 99.7 instructions before the first, a poll finding one
	 * message 722 -> 681 before the second). A summary that says "look"
	 * is taken here: the pass looks then. */
	if (timeout_ns == 0 && ctx->def_head == NULL) {
		uint32_t n = worth_a_pass(ctx) ?
			scan_any(ctx, budget == 0 ? UINT32_MAX : budget) : 0;

		if (n > 0)
			return (int)n;
		return shoal__stop_flagged(ctx->g) ? -ESHUTDOWN : 0;
	}
	return poll_pass(ctx, budget, timeout_ns);
}
