/* SPDX-License-Identifier: MIT */
/*
 * Sending: routed sends into the uplink, direct sends into another group's
 * ring (through the link table the link opener fills, runtime/control/
 * links.c), zero-copy reserve/commit, and the waits of the blocking forms.
 *
 * Progress guarantees: try_* sends and shoal_reserve are wait-free: a link
 * not open yet is asked for and reported as -EAGAIN. send, send_to,
 * shoal_connect and requests wait, and say so: bounded spin, then a futex
 * sleep on the doorbell the other side rings when it makes room, delivers,
 * or answers the link.
 *
 * Hot path: no allocation, lock, log or system call, except the FUTEX_WAKE
 * a doorbell makes when the other side announced sleep.
 */
#include <assert.h>
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

/* ---- sending ---------------------------------------------------------------- */

static const struct shoal__ltype *type_of(const struct shoal_group *g, uint32_t id)
{
	/* 0 is no type, and the id of an empty slot: never found. */
	if (SHOAL_UNLIKELY(id == 0))
		return NULL;
	for (uint32_t h = id & g->types_mask;; h = (h + 1) & g->types_mask) {
		if (g->types[h].id == id)
			return &g->types[h];
		if (g->types[h].id == 0)
			return NULL;
	}
}

uint64_t shoal_ctx_self(const struct shoal_ctx *ctx)
{
	if (ctx->cur != NULL)
		return ctx->cur->addr;
	return shoal_addr_make(ctx->g->id, SHOAL_SLOT_GROUP, ctx->g->gen);
}

/*
 * What the envelopes of one send have in common, worked out once (a burst
 * writes many): the sender, destination, flags, request id, the send time
 * (one clock read per send), and how trace ids are made. A handler's
 * messages carry its trace id (mask 0); others get new ones, unique per
 * system: group and worker (trace_base) and the worker's count of messages
 * sent, the k-th message of a send numbered `next + k`.
 */
struct env_common {
	uint64_t self, dest, rid, now;
	uint64_t trace, next, mask;
	uint32_t flags;
};

static inline void env_common(const struct shoal_ctx *ctx, struct env_common *ec, uint64_t self,
			      uint64_t dest, uint32_t flags, uint64_t rid, uint64_t now)
{
	bool carried = ctx->cur != NULL;

	ec->self = self;
	ec->dest = dest;
	ec->rid = rid;
	ec->flags = flags;
	ec->trace = carried ? ctx->cur_msg->m.env->trace_id : ctx->trace_base;
	ec->next = ctx->sent_routed + ctx->sent_direct + 1;
	ec->mask = carried ? 0 : (UINT64_C(1) << 40) - 1;
	ec->now = now;
}

/* The trace id of the k-th message of a send (0 for a single one). */
static inline uint64_t env_trace(const struct env_common *ec, uint64_t k)
{
	return ec->trace | ((ec->next + k) & ec->mask);
}

/*
 * The envelope of the k-th message of a send (0 for a single one), written
 * in place into its reserved record `dst`: the commit's R1 publishes it
 * with the payload, so it needs no copy through the stack.
 */
static inline void env_put(const struct env_common *ec, unsigned char *dst, uint32_t type,
			   uint32_t len, uint32_t k)
{
	struct shoal_envelope *env = (struct shoal_envelope *)(void *)dst;

	env->type = type;
	env->len = len;
	env->sender = ec->self;
	env->dest = ec->dest;
	env->trace_id = env_trace(ec, k);
	env->request_id = ec->rid;
	env->send_ns = ec->now;
	env->flags = ec->flags;
	env->reserved = 0;
}

/*
 * A payload of `len` bytes, w <= len <= 2 * w, copied as two copies of w
 * bytes, the second ending at len (they overlap unless len is 2 * w): a few
 * vector moves inline, where a call to memcpy() costs a call and a
 * dispatch on the length each time (17 instructions for 64 bytes,
 * bench/instr-count). Used for a burst's runs, whose width is chosen once
 * a run: for a single message, choosing it costs what memcpy()'s own
 * dispatch does (measured: no gain), so the single sends call memcpy().
 */
static inline __attribute__((always_inline)) void copy_pair(unsigned char *d,
							    const unsigned char *s, uint32_t len,
							    uint32_t w)
{
	memcpy(d, s, w);
	memcpy(d + len - w, s + len - w, w);
}

/* The width copy_pair() copies a payload of `len` in, or 0 for memcpy():
 * inline from 8 up to 64 bytes, the common size of a message. */
static inline uint32_t copy_width(uint32_t len)
{
	if (len < 8 || len > 64)
		return 0;
	return len >= 32 ? 32 : len >= 16 ? 16 : 8;
}

/* The envelope of a single message, made now. */
static void fill_env(struct shoal_ctx *ctx, unsigned char *dst, uint32_t type,
		     uint32_t len, uint64_t dest, uint32_t flags, uint64_t rid)
{
	struct env_common ec;

	env_common(ctx, &ec, shoal_ctx_self(ctx), dest, flags, rid, shoal__clock_ns(&ctx->clk));
	env_put(&ec, dst, type, len, 0);
}

static int check_type(struct shoal_ctx *ctx, uint32_t type, uint32_t len,
		      const struct shoal__ltype **out)
{
	const struct shoal__ltype *t = type_of(ctx->g, type);

	if (SHOAL_UNLIKELY(t == NULL))
		return -ENOMSG;
	if (SHOAL_UNLIKELY(len > t->max_size))
		return -EMSGSIZE;
	*out = t;
	return 0;
}

/* 0 while the wait may go on, else why it ends. */
static int wait_ended(const struct send_wait *sw)
{
	if (sw->rg != NULL) {
		/* Relaxed: the router sets these when the group fails, dies or
		 * comes back, then rings every worker's space_db. */
		uint32_t state = shoal_load_relaxed(&sw->rg->state);

		if (state == SHOAL_GROUP_FAILED)
			return -EHOSTDOWN;
		if (sw->incarnation && (state != SHOAL_GROUP_RUNNING ||
					shoal_load_relaxed(&sw->rg->gen) != sw->gen))
			return -EOWNERDEAD;
	}
	if (sw->deadline != UINT64_MAX && shoal__now_ns() >= sw->deadline)
		return -ETIMEDOUT;
	return 0;
}

/*
 * A direct ring whose reader gave it up: no room will come. The router
 * gives up the rings of a group whose process left only after it marked
 * the group (A3 in shoal_ring_condemned() orders that mark before the
 * give-up for us): a wait for that group ends as its state says, -EOWNERDEAD
 * or -EHOSTDOWN, and -EUCLEAN is left for a ring given up as damaged.
 */
static int condemned_why(const struct send_wait *sw)
{
	int end = wait_ended(sw);

	return end < 0 && end != -ETIMEDOUT ? end : -EUCLEAN;
}

/* How long the next sleep of a wait may be: -ETIMEDOUT past its deadline. */
static int64_t wait_slice(const struct send_wait *sw)
{
	uint64_t now;

	if (sw->deadline == UINT64_MAX)
		return SLEEP_SLICE_NS;
	now = shoal__now_ns();
	if (now >= sw->deadline)
		return -ETIMEDOUT;
	return sw->deadline - now < (uint64_t)SLEEP_SLICE_NS ? (int64_t)(sw->deadline - now) :
							      SLEEP_SLICE_NS;
}

struct waiter {
	struct shoal_ring_prod *p;
	uint32_t need;
	const struct send_wait *sw;
};

static bool room(void *arg)
{
	struct waiter *w = arg;
	void *dst = shoal_ring_reserve(w->p, w->need, 0);

	if (dst == NULL)
		return shoal_ring_prod_error(w->p) != 0 || wait_ended(w->sw) != 0;
	shoal_ring_cancel(w->p);
	return true;
}

/* The router found our uplink corrupted and had no room for another: no
 * send through it can succeed until the group restarts. */
static bool uplink_lost(const struct shoal_ctx *ctx)
{
	/* A4: pairs with R4 in damage.c replace_ring(). */
	return shoal_load_acquire(&ctx->mw->up_gen) == SHOAL__UP_GEN_NONE;
}

/* The router has given us a new uplink (see shoal__ctx_uplink_renew()). */
static bool uplink_replaced(void *arg)
{
	struct shoal_ctx *ctx = arg;

	/* A4: pairs with R4 in damage.c watch_once(). */
	return shoal_load_acquire(&ctx->mw->up_gen) != ctx->up_gen;
}

/*
 * Wait for room in `p`, sleeping on `db` (rung by the consumer's side). For
 * an uplink we condemned, wait instead for the router to replace it (it
 * rings the same doorbell).
 */
static int wait_room(struct shoal_ctx *ctx, struct shoal_ring_prod *p, struct shoal_doorbell *db,
		     uint32_t need, const struct send_wait *sw)
{
	struct waiter w = { p, need, sw };

	/* With router.yield, the looks yield from the first: the room comes
	 * from a consumer behind, which on a CPU we share a spin would keep
	 * from running (a stream through a router 20 % slower, bench/SUITE.md,
	 * "What the routed stream waited for"). */
	uint64_t spin_ns = ctx->g->yield_ns > 0 ? 0 : ctx->g->spin_ns;

	for (;;) {
		bool condemned = p == &ctx->up && ctx->up_condemned;
		int64_t slice = wait_slice(sw);
		int ret, end;

		if (slice < 0)
			return (int)slice;
		ret = condemned ? shoal_doorbell_spin_yield_wait(db, spin_ns, ctx->g->yield_ns,
								 uplink_replaced, ctx, slice) :
				  shoal_doorbell_spin_yield_wait(db, spin_ns, ctx->g->yield_ns,
								 room, &w, slice);
		if (p == &ctx->up && shoal__ctx_uplink_renew(ctx))
			return 0;   /* our uplink was condemned: retry on the new one */
		if (p == &ctx->up && uplink_lost(ctx))
			return -EUCLEAN;
		if (p != &ctx->up && shoal_ring_prod_condemned(p))
			return condemned_why(sw);
		if (shoal_ring_prod_error(p) && !condemned)
			/* Our uplink went bad while we waited: shoal__reserve_in()
			 * condemns it and waits for its replacement. */
			return p == &ctx->up ? 0 : -EUCLEAN;
		/* The predicate also returns true on a give-up: check that first. */
		end = wait_ended(sw);
		if (end < 0)
			return end;
		if (ret == 0 && !condemned)
			return 0;
		if (shoal__stop_requested(ctx->g))
			return -ESHUTDOWN;
	}
}

/*
 * Reserve `ENV_SIZE + len` in `p`, waiting as `sw` says (NULL: do not wait).
 * `peer`, the consumer's doorbell if its wake-ups may be held, is rung when
 * the ring is full: a consumer asleep on held wake-ups would otherwise make
 * room only when the waker wakes it.
 */
void *shoal__reserve_in(struct shoal_ctx *ctx, struct shoal_ring_prod *p, struct shoal_doorbell *db,
			struct shoal_doorbell *peer, uint32_t len, const struct send_wait *sw,
			int *err)
{
	/* Its commit would publish the open reservation before it is filled. */
	if (SHOAL_UNLIKELY(p == ctx->res_p)) {
		*err = -EBUSY;
		return NULL;
	}
	for (;;) {
		void *dst = shoal_ring_reserve(p, ENV_SIZE + len, 0);
		int ret;

		if (SHOAL_LIKELY(dst != NULL))
			return dst;
		if (p == &ctx->up && shoal__ctx_uplink_renew(ctx))
			continue;
		if (p == &ctx->up && uplink_lost(ctx)) {
			*err = -EUCLEAN;
			return NULL;
		}
		if (p != &ctx->up && shoal_ring_prod_condemned(p)) {
			*err = sw != NULL ? condemned_why(sw) : -EUCLEAN;
			return NULL;
		}
		if (shoal_ring_prod_error(p)) {
			if (p == &ctx->up && !ctx->up_condemned) {
				/* The router replaces it; a blocking send waits for that. */
				shoal_ring_condemn(ctx->up_mem, ctx->up_len, SHOAL_RING_SIDE_PROD);
				ctx->up_condemned = true;
			}
			if (p == &ctx->up && sw != NULL) {
				ret = wait_room(ctx, p, db, ENV_SIZE + len, sw);
				if (ret == 0)
					continue;
				*err = ret;
				return NULL;
			}
			*err = -EUCLEAN;
			return NULL;
		}
		if (ENV_SIZE + len > shoal_ring_max_payload(p)) {
			*err = -EMSGSIZE;
			return NULL;
		}
		if (peer != NULL)
			shoal_doorbell_notify(peer);
		if (sw == NULL) {
			*err = -EAGAIN;
			return NULL;
		}
		ret = wait_room(ctx, p, db, ENV_SIZE + len, sw);
		if (ret < 0) {
			*err = ret;
			return NULL;
		}
	}
}

/* shoal__reserve_in()'s common case inline: room at once, no open
 * reservation in `p`; anything else goes the whole way. */
static inline void *reserve_fast(struct shoal_ctx *ctx, struct shoal_ring_prod *p,
				 struct shoal_doorbell *db, struct shoal_doorbell *peer, uint32_t len,
				 const struct send_wait *sw, int *err)
{
	if (SHOAL_LIKELY(p != ctx->res_p)) {
		void *dst = shoal_ring_reserve(p, ENV_SIZE + len, 0);

		if (SHOAL_LIKELY(dst != NULL))
			return dst;
	}
	return shoal__reserve_in(ctx, p, db, peer, len, sw, err);
}

/*
 * Whether a routed message of type `t` has somewhere to go: -EHOSTUNREACH
 * when no route lists it, -EHOSTDOWN when every route that does leads to a
 * failed group. Relaxed: hints the router sets at every publish; the
 * dispatcher still counts a message that a concurrent change leaves with no
 * route (no_route) or only failed groups (dropped_dead).
 */
static int routes_of(const struct shoal__ltype *t)
{
	if (shoal_load_relaxed(&t->reg->routes) == 0)
		return -EHOSTUNREACH;
	if (shoal_load_relaxed(&t->reg->live_routes) == 0)
		return -EHOSTDOWN;
	return 0;
}

static int send_routed(struct shoal_ctx *ctx, uint32_t type, const void *buf, uint32_t len,
		       bool wait)
{
	const struct shoal__ltype *t;
	unsigned char *dst;
	int ret = check_type(ctx, type, len, &t);

	/* Relaxed: a hint the router sets at publish; the dispatcher still
	 * counts a message that finds no route after a concurrent change. */
	if (ret == 0)
		ret = routes_of(t);
	if (ret == 0) {
		dst = reserve_fast(ctx, &ctx->up, &ctx->mw->up_db, NULL, len,
				   wait ? &WAIT_FOREVER : NULL, &ret);
		if (dst != NULL) {
			fill_env(ctx, dst, type, len, SHOAL_ADDR_NONE, wait ? 0 : SHOAL_ENV_TRY, 0);
			memcpy(dst + ENV_SIZE, buf, len);
			shoal_ring_commit(&ctx->up);
			shoal_doorbell_notify(ctx->bell);
			COUNT(ctx, sent_routed);
			return 0;
		}
	}
	if (!wait)
		COUNT(ctx, try_failed);
	return ret;
}

int shoal_send(struct shoal_ctx *ctx, uint32_t type, const void *buf, uint32_t len)
{
	return send_routed(ctx, type, buf, len, true);
}

int shoal_try_send(struct shoal_ctx *ctx, uint32_t type, const void *buf, uint32_t len)
{
	return send_routed(ctx, type, buf, len, false);
}

/* dout_ring()'s wake-up that the doorbell held (r: SHOAL_WAKE_HELD or
 * _HELD_FIRST): a first hold rings the waker, and the link is remembered
 * for shoal__wake_flush() (past the list, a full scan). */
static __attribute__((noinline)) void dout_held(struct shoal_ctx *ctx, struct shoal__dout *o,
						int r, uint32_t k)
{
	if (r == SHOAL_WAKE_HELD_FIRST)
		shoal_doorbell_notify(&ctx->g->bell->waker);
	if (o->unann == k) {
		if (ctx->n_held < SHOAL__HELD_MAX)
			ctx->held[ctx->n_held++] = o;
		else
			ctx->held_all = true;
	}
}

/*
 * Ring the consumer of a direct link after k commits, moderated
 * (shm/doorbell.c): a flood's wake-ups may be held, and the router's waker
 * (data/waker.c) makes them by the deadline. F2 first, unless its consumer
 * polls, or (`fenced`) the caller made one for several links. A request or
 * a response has someone waiting for it: never held.
 */
static inline void dout_ring(struct shoal_ctx *ctx, struct shoal__dout *o, bool urgent,
			     uint32_t k, bool fenced)
{
	int r;

	o->unann = urgent ? SHOAL_WAKE_BATCH : o->unann + k;
	r = fenced ? shoal_doorbell_wake_mod_hint(&o->dst->in_db, &ctx->wmod, o->unann, o->hint) :
		     shoal_doorbell_notify_mod_hint(&o->dst->in_db, &ctx->wmod, o->unann, o->hint);
	if (SHOAL_LIKELY(r == SHOAL_WAKE_DONE))
		o->unann = 0;
	else
		dout_held(ctx, o, r, k);
}

/*
 * Publish the k records reserved in `p`, the uplink (o NULL: ring our
 * dispatcher) or o's direct ring (F2, then a moderated wake-up, never held
 * if `urgent`: a request or a response among them), and count them sent.
 */
static void publish(struct shoal_ctx *ctx, struct shoal_ring_prod *p, struct shoal__dout *o,
		    uint32_t k, bool urgent)
{
	shoal_ring_commit(p);
	if (o == NULL) {
		shoal_doorbell_notify(ctx->bell);
		COUNT_N(ctx, sent_routed, k);
	} else {
		dout_ring(ctx, o, urgent, k, false);
		COUNT_N(ctx, sent_direct, k);
	}
}

static void flush_one(struct shoal__dout *o)
{
	if (o->unann > 0) {
		shoal_doorbell_wake_hint(&o->dst->in_db, o->hint);
		o->unann = 0;
	}
}

/*
 * Before this worker goes idle: a conversation's held wake-ups (a few
 * links) are made now, since what it sent may be what it waits for an
 * answer to (a ping-pong of plain sends would otherwise take a deadline per
 * turn); a fan-out's (more than SHOAL_WAKE_FLUSH_MAX links) are left to the
 * router's waker: waking them all each time the worker idles would
 * bring back the wake-up per message that moderation removes.
 */
void shoal__wake_flush(struct shoal_ctx *ctx)
{
	if (ctx->n_held > 0 && ctx->n_held <= SHOAL_WAKE_FLUSH_MAX && !ctx->held_all) {
		shoal_doorbell_fence();   /* F2: after the commits of the held messages */
		for (uint32_t i = 0; i < ctx->n_held; i++)
			flush_one(ctx->held[i]);
	}
	ctx->n_held = 0;
	ctx->held_all = false;
}

/*
 * The number of workers of a destination group, read once from the
 * registry and bounded (DESIGN invariant 1): 0 if it is out of range.
 */
static uint32_t dest_workers(const struct shoal__reg_group *rg)
{
	uint16_t nw = rg->n_workers;

	return nw >= 1 && nw <= SHOAL_MAX_WORKERS ? nw : 0;
}

/* The worker (of `nw`) of a group that receives a message for `slot`. */
static uint32_t dest_worker(uint32_t nw, uint16_t slot, uint64_t self, uint64_t rid,
			    uint32_t flags)
{
	/* A group of one worker (the default) needs no division: the
	 * link's address waits on its result. */
	if (nw == 1)
		return 0;
	if (flags & SHOAL_ENV_RESPONSE)
		return (uint32_t)(rid >> 48) % nw;   /* the requester's worker */
	if (slot < SHOAL_MAX_ACTORS)
		return slot % nw;
	return (uint32_t)((self * UINT64_C(0x9e3779b97f4a7c15)) >> 32) % nw;
}

/* Ask the link opener (runtime/control/links.c) for the direct link into
 * worker `dw` of group `dg`: a bit and, for the first ask, a doorbell. */
static void link_ask(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw)
{
	uint32_t bit = 1u << dw;
	bool first;

	/* Release: our giving up of the entry (state NONE) happens before the
	 * opener, which takes the bit with acquire, rewrites it. */
	first = !(atomic_fetch_or_explicit(&ctx->link_want[dg], bit, memory_order_release) & bit);
	/* The process's first ask starts the opener (once: one thread
	 * creation); a failed start is tried again by the next ask. */
	if (SHOAL_UNLIKELY(shoal_load_acquire(&ctx->g->linker_state) != SHOAL__LINKER_RUNNING))
		(void)shoal__linker_start(ctx->g);
	if (first)
		shoal_doorbell_notify(&ctx->g->link_bell);
}

/* The entry of the direct link into (dg, dw), with its state in *state
 * (NONE, and NULL returned, before the entry array exists). */
static struct shoal__dout *link_entry(const struct shoal_ctx *ctx, uint16_t dg, uint32_t dw,
				      uint32_t *state)
{
	/* Acquire: pairs with the opener's release stores of the array and
	 * of the state (links.c). */
	struct shoal__dout *douts = shoal_load_acquire(&ctx->dout[dg]);

	if (douts == NULL) {
		*state = SHOAL__LINK_NONE;
		return NULL;
	}
	*state = shoal_load_acquire(&douts[dw].state);
	return &douts[dw];
}

/*
 * A direct ring found corrupted, by us or by its reader: count what we put
 * in it that was never read (its reader gave it up after its last release,
 * or reads no more), mark it settled so that the router does not count it
 * again, and forget it: the next send opens a fresh one through the router.
 */
static void dout_condemned(struct shoal_ctx *ctx, struct shoal__dout *o)
{
	/* Any ring is at least this long: enough for its control block. */
	uint64_t len = shoal_ring_size(SHOAL_RING_MIN_CAPACITY), in = o->p.records_in, out, ring_in;

	if (shoal_ring_prod_condemned(&o->p)) {
		if (shoal_ring_records(o->ring, len, &ring_in, &out) == 0 && in > out) {
			ctx->lost_corrupt += in - out;
			/* Relaxed: the worker is the only writer of its counter line. */
			shoal_store_relaxed(&ctx->mw->lost_corrupt, ctx->lost_corrupt);
		}
		shoal_ring_condemn(o->ring, len, SHOAL_RING_SIDE_SETTLED);
	} else if (shoal_ring_prod_error(&o->p)) {
		/* Its reader still drains it: nothing is lost, only replaced. */
		shoal_ring_condemn(o->ring, len, SHOAL_RING_SIDE_PROD);
	} else {
		return;
	}
	o->ring = NULL;
	/* Given up: the next send asks the opener for a fresh ring. */
	shoal_store_relaxed(&o->state, SHOAL__LINK_NONE);
}

/* Whether the open link `o` into the group of registry entry `rg` is still
 * into the mailbox in service: the router makes a new one for a new owner
 * of the slot or to replace a damaged one (registry.c, R7). Relaxed: one
 * more send into the old ring is counted as any other (dout_moved()). */
static inline bool dout_current(const struct shoal__reg_group *rg, const struct shoal__dout *o)
{
	return o->mbx_gen == shoal_load_relaxed(&rg->mbx_gen);
}

/*
 * Let go of the open link `o` into a mailbox no longer in service, so that
 * the next send opens one into its successor. What we wrote into the old
 * ring that its reader never took is counted here once the router gave the
 * ring up (dout_condemned()); before that, the router counts what the ring
 * holds when it does.
 */
static void dout_moved(struct shoal_ctx *ctx, struct shoal__dout *o)
{
	if (shoal_ring_prod_condemned(&o->p)) {
		dout_condemned(ctx, o);
		return;
	}
	o->ring = NULL;
	shoal_store_relaxed(&o->state, SHOAL__LINK_NONE);
}

/*
 * The direct ring from this worker to worker `dw` of group `dg`. Never
 * waits unless `may_wait`: NULL with -EAGAIN while the link opener opens
 * it (asked here), or with the reason it could not be opened (told once;
 * the next call asks again). A call that may wait opens a missing link
 * itself while the process has no opener thread and has not asked it for
 * this link: a process that only sends with waiting calls never starts a
 * thread (forked children of threaded parents must not, under sanitizers).
 */
static struct shoal__dout *dout_get(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw,
				    bool may_wait, int *err)
{
	struct shoal__dout *o;
	uint32_t st, failed = SHOAL__LINK_FAILED;

	/* dw comes from the registry's worker count: shared memory, bounded. */
	if (SHOAL_UNLIKELY(dg >= SHOAL_MAX_GROUPS || dw >= SHOAL_MAX_WORKERS)) {
		*err = -EUCLEAN;
		return NULL;
	}
	o = link_entry(ctx, dg, dw, &st);
	if (SHOAL_LIKELY(st == SHOAL__LINK_READY)) {
		if (SHOAL_LIKELY(dout_current(&ctx->g->reg.groups[dg], o)))
			return o;
		dout_moved(ctx, o);
		st = SHOAL__LINK_NONE;
	}
	if (st == SHOAL__LINK_NONE && may_wait &&
	    shoal_load_acquire(&ctx->g->linker_state) == SHOAL__LINKER_NONE &&
	    !(shoal_load_relaxed(&ctx->link_want[dg]) & (1u << dw))) {
		(void)shoal__link_open_here(ctx, dg, dw);
		o = link_entry(ctx, dg, dw, &st);
		if (st == SHOAL__LINK_READY)
			return o;
	}
	/* A failure is ours to take back to NONE; the CAS leaves an answer
	 * the opener gives meanwhile (to an earlier second ask) in place. */
	if (st == SHOAL__LINK_FAILED &&
	    atomic_compare_exchange_strong(&o->state, &failed, SHOAL__LINK_NONE)) {
		*err = o->err;
		return NULL;
	}
	link_ask(ctx, dg, dw);
	*err = -EAGAIN;
	return NULL;
}

/* Ask now for the links into workers [from, to) of `dg` not open yet, so
 * that a try_ send to every worker gets them in one round. */
static void dout_ask_rest(struct shoal_ctx *ctx, uint16_t dg, uint32_t from, uint32_t to)
{
	uint32_t st;

	for (uint32_t dw = from; dw < to && dw < SHOAL_MAX_WORKERS; dw++) {
		(void)link_entry(ctx, dg, dw, &st);
		if (st == SHOAL__LINK_NONE)
			link_ask(ctx, dg, dw);
	}
}

struct link_waiter {
	const struct shoal_ctx *ctx;
	uint16_t dg;
	uint32_t dw;
	const struct send_wait *sw;
};

static bool link_answered(void *arg)
{
	const struct link_waiter *lw = arg;
	uint32_t st;

	(void)link_entry(lw->ctx, lw->dg, lw->dw, &st);
	return st != SHOAL__LINK_NONE || wait_ended(lw->sw) != 0 ||
	       shoal__stop_flagged(lw->ctx->g);
}

/* As dout_get(), waiting for the link as `sw` says. */
static struct shoal__dout *dout_wait(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw,
				     const struct send_wait *sw, int *err)
{
	struct link_waiter lw = { ctx, dg, dw, sw };

	for (;;) {
		struct shoal__dout *o = dout_get(ctx, dg, dw, true, err);
		int64_t slice;

		if (o != NULL || *err != -EAGAIN)
			return o;
		slice = wait_slice(sw);
		if (slice < 0) {
			*err = (int)slice;
			return NULL;
		}
		(void)shoal_doorbell_poll_wait(&ctx->link_db, ctx->g->spin_ns, link_answered, &lw,
					       slice);
		*err = wait_ended(sw);
		if (*err < 0)
			return NULL;
		if (shoal__stop_requested(ctx->g)) {
			*err = -ESHUTDOWN;
			return NULL;
		}
	}
}

/*
 * Where a direct message goes: its destination group's registry entry, and
 * the mailbox that takes it: the group's own, or for a group of another
 * host, this host's bridge's (docs/hosts.md), which carries it there with
 * its envelope as it is.
 */
struct dest_to {
	const struct shoal__reg_group *rg;    /* the destination group's */
	const struct shoal__reg_group *mrg;   /* the mailbox's group */
	uint16_t mg;                          /* its id */
};

/*
 * A group of another host (registry entry `rg`): its messages go to the
 * bridge. Its generations are its host's, checked there (the far bridge
 * writes it into the group's mailbox as a local sender would). Returns the
 * bridge's group id, or -EINVAL (no such actor), -EHOSTUNREACH (no bridge),
 * -EHOSTDOWN (the bridge is marked failed). Out of line and returning a
 * value, so that check_dest() stays small and its answer in registers.
 */
static __attribute__((noinline, cold)) int remote_dest(struct shoal_ctx *ctx,
						       const struct shoal__reg_group *rg,
						       uint16_t slot)
{
	/* Relaxed: router-written before any group process started. */
	uint32_t b = shoal_load_relaxed(&ctx->g->reg.hdr->bridge);

	if (slot != SHOAL_SLOT_GROUP && slot != SHOAL_SLOT_ALL && slot >= rg->n_actors)
		return -EINVAL;
	/* A3, as in check_dest(). */
	if (b == 0 || b > SHOAL_MAX_GROUPS || b > shoal_load_acquire(&ctx->g->reg.hdr->n_groups))
		return -EHOSTUNREACH;
	switch (shoal_load_relaxed(&ctx->g->reg.groups[b - 1].state)) {
	case SHOAL_GROUP_EMPTY:
		return -EHOSTUNREACH;
	case SHOAL_GROUP_FAILED:
		return -EHOSTDOWN;
	default:
		return (int)b - 1;
	}
}

/* Running or stopping, the common case, in one test. */
static inline bool state_serves(uint32_t state)
{
	return state - SHOAL_GROUP_RUNNING <= SHOAL_GROUP_STOPPING - SHOAL_GROUP_RUNNING;
}

/*
 * Whether `dest` (slot `slot` of group rg) names the slot's owner now.
 * Actor addresses name one incarnation (see shoal/message.h); group
 * addresses any of the slot's current owner (gen 0: whichever owner),
 * never an earlier owner's. Relaxed: gen and first_gen share the line of
 * state; a change the router makes meanwhile is what a send just before
 * it would have met.
 */
static inline bool gen_current(const struct shoal__reg_group *rg, uint64_t dest, uint16_t slot)
{
	return slot < SHOAL_MAX_ACTORS ?
		       shoal_addr_gen(dest) == shoal_load_relaxed(&rg->gen) :
		       shoal_addr_gen(dest) - 1u >= shoal_load_relaxed(&rg->first_gen) - 1u;
}

/*
 * Validate a destination against the registry. Returns the destination's
 * registry entry, with where its message goes in *to, or NULL with the
 * error in *err.
 */
static inline const struct shoal__reg_group *check_dest(struct shoal_ctx *ctx, uint64_t dest,
							struct dest_to *to, int *err)
{
	int dg = shoal_addr_group(dest);
	uint16_t slot = shoal_addr_slot(dest);
	const struct shoal__reg_group *rg;
	uint32_t state;

	/* A3: pairs with R3 in registry.c shoal__declare_group(). */
	if (dg < 0 || dg >= SHOAL_MAX_GROUPS ||
	    (uint32_t)dg >= shoal_load_acquire(&ctx->g->reg.hdr->n_groups)) {
		*err = -EINVAL;
		return NULL;
	}
	rg = &ctx->g->reg.groups[dg];
	state = shoal_load_relaxed(&rg->state);
	if (SHOAL_UNLIKELY(!state_serves(state))) {
		switch (state) {
		case SHOAL_GROUP_EMPTY:
			*err = -EINVAL;
			return NULL;
		case SHOAL_GROUP_FAILED:
			*err = -EHOSTDOWN;
			return NULL;
		case SHOAL_GROUP_DOWN:
			/* Relaxed: router-written when the group was declared.
			 * A group of another host is always DOWN here (or
			 * FAILED while its host is marked down). */
			if (shoal_load_relaxed(&rg->remote_host) != 0) {
				int b = remote_dest(ctx, rg, slot);

				if (b < 0) {
					*err = b;
					return NULL;
				}
				to->rg = rg;
				to->mrg = &ctx->g->reg.groups[b];
				to->mg = (uint16_t)b;
				return rg;
			}
			break;
		default:
			break;
		}
	}
	if (slot != SHOAL_SLOT_GROUP && slot != SHOAL_SLOT_ALL && slot >= rg->n_actors) {
		*err = -EINVAL;
		return NULL;
	}
	if (!gen_current(rg, dest, slot)) {
		*err = -ESTALE;
		return NULL;
	}
	to->rg = rg;
	to->mrg = rg;
	to->mg = (uint16_t)dg;
	return rg;
}

/* dout_get()'s common case inline: the link is open, into the mailbox in
 * service of `rg`, group dg's registry entry (check_dest()'s answer). */
static inline struct shoal__dout *dout_ready(struct shoal_ctx *ctx,
					     const struct shoal__reg_group *rg, uint16_t dg,
					     uint32_t dw, struct send_wait *sw, int *err)
{
	if (SHOAL_LIKELY(dg < SHOAL_MAX_GROUPS && dw < SHOAL_MAX_WORKERS)) {
		uint32_t st;
		struct shoal__dout *o = link_entry(ctx, dg, dw, &st);

		if (SHOAL_LIKELY(st == SHOAL__LINK_READY && dout_current(rg, o)))
			return o;
	}
	return sw == NULL ? dout_get(ctx, dg, dw, false, err) : dout_wait(ctx, dg, dw, sw, err);
}

/*
 * The direct link into worker `w` of group `dg` (registry entry `rg`;
 * waiting as `sw` says, NULL: never), in *out, with room reserved there for
 * `len`: the record's address, or NULL with the error in *err. Always
 * inlined: see send_direct().
 */
static inline __attribute__((always_inline)) unsigned char *
direct_reserve(struct shoal_ctx *ctx, const struct shoal__reg_group *rg, uint16_t dg, uint32_t w,
	       uint32_t len, struct send_wait *sw, struct shoal__dout **out, int *err)
{
	struct shoal__dout *o = dout_ready(ctx, rg, dg, w, sw, err);
	unsigned char *dst;

	*out = o;
	if (o == NULL)
		return NULL;
	dst = reserve_fast(ctx, &o->p, &o->dst->space_db, &o->dst->in_db, len, sw, err);
	if (dst == NULL && *err == -EUCLEAN)
		dout_condemned(ctx, o);
	return dst;
}

/*
 * To SHOAL_SLOT_ALL: all or nothing. A record is reserved in the ring of
 * every worker of mailbox group `mg` (entry `mrg`: the destination's, or
 * the bridge's) before any is committed, so a refusal (or a wait that
 * gives up) leaves nothing delivered and a retry duplicates nothing.
 * `given`: as send_direct() says.
 */
static int send_all(struct shoal_ctx *ctx, const struct shoal__reg_group *mrg, uint16_t mg,
		    uint64_t dest, uint32_t nw, uint32_t type, const void *buf, uint32_t len,
		    struct send_wait *sw, uint32_t flags, uint64_t rid,
		    const struct shoal_envelope *given)
{
	struct shoal__dout *outs[SHOAL_MAX_WORKERS];
	unsigned char *dsts[SHOAL_MAX_WORKERS];
	struct env_common ec;
	uint32_t n;
	int ret = 0;

	for (n = 0; n < nw; n++) {
		dsts[n] = direct_reserve(ctx, mrg, mg, n, len, sw, &outs[n], &ret);
		if (dsts[n] == NULL) {
			if (ret == -EAGAIN && outs[n] == NULL)
				dout_ask_rest(ctx, mg, n + 1, nw);
			for (uint32_t i = 0; i < n; i++)
				shoal_ring_cancel(&outs[i]->p);
			return ret;
		}
	}
	if (given == NULL)
		env_common(ctx, &ec, shoal_ctx_self(ctx), dest, flags, rid, shoal__clock_ns(&ctx->clk));
	for (uint32_t i = 0; i < n; i++) {
		if (given != NULL)
			memcpy(dsts[i], given, sizeof(*given));
		else
			env_put(&ec, dsts[i], type, len, 0);
		memcpy(dsts[i] + ENV_SIZE, buf, len);
		shoal_ring_commit(&outs[i]->p);
	}
	/* One fence (F2) for every commit above, then moderated wake-ups. */
	shoal_doorbell_fence();
	for (uint32_t i = 0; i < n; i++)
		dout_ring(ctx, outs[i], flags & (SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE), 1, true);
	return 0;
}

/* ---- the bridge's relay bursts (relay.h) --------------------------------------- */

void shoal__relay_publish(struct shoal_ctx *ctx, struct shoal__relay *rl)
{
	if (rl->k > 0)
		publish(ctx, rl->p, rl->o, rl->k, rl->urgent);
	*rl = (struct shoal__relay){ NULL, NULL, 0, false };
}

/*
 * Room for a record of `len` in the ring rl holds records in, when the
 * next record goes there: o's direct ring (o NULL: the uplink), open and
 * current. Anything else (another ring, a link to open or renew, a full
 * ring: what may move or cancel a reservation) publishes what rl holds
 * first, and returns NULL: the single form's path follows, with nothing
 * held.
 */
static unsigned char *relay_reserve(struct shoal_ctx *ctx, struct shoal__relay *rl,
				    struct shoal_ring_prod *p, struct shoal__dout *o, uint32_t len)
{
	if (rl->k > 0 && rl->p == p && rl->o == o && p != ctx->res_p) {
		unsigned char *dst = shoal_ring_reserve(p, ENV_SIZE + len, 0);

		if (dst != NULL)
			return dst;
	}
	shoal__relay_publish(ctx, rl);
	return NULL;
}

/* The record just written at the ring's reserved end joins what rl holds
 * there (relay_reserve() published anything else). */
static void relay_hold(struct shoal__relay *rl, struct shoal_ring_prod *p, struct shoal__dout *o,
		       bool urgent)
{
	rl->p = p;
	rl->o = o;
	rl->k++;
	rl->urgent |= urgent;
}

/*
 * The last destination a direct send wrote to, remembered so that the next
 * send to it re-reads only what may have changed since: every field of the
 * registry and of the link that check_dest() and dout_ready() read, with
 * the same orders, but not the lookups that led to them. What is kept is
 * fixed while the context lives: the type table (built at join), the
 * group's registry entry (a fixed place in the mapped registry) and the
 * link's entry (its array is freed with the context). Only a plain group
 * of this host with one worker is remembered: the worker of a message to
 * a group of several depends on the sender, and a group of another host
 * goes through its bridge. A send that does not match goes the long way,
 * and is remembered if it succeeds. A try_send_to: 239.2 -> 200.2
 * instructions (bench/instr-count; docs/design.md, "The last destination,
 * remembered").
 */
static inline bool send_memo(const struct shoal_ctx *ctx, uint64_t dest, uint32_t type,
			     uint32_t len)
{
	const struct shoal__reg_group *rg = ctx->memo.rg;
	uint16_t slot = shoal_addr_slot(dest);

	/* Relaxed and acquire as in check_dest() and link_entry(). Type 0
	 * is refused, and none remembered: the test of rg is for it. */
	return dest == ctx->memo.dest && type == ctx->memo.type && rg != NULL &&
	       len <= ctx->memo.max_size && state_serves(shoal_load_relaxed(&rg->state)) &&
	       (slot >= SHOAL_MAX_ACTORS || slot < rg->n_actors) && gen_current(rg, dest, slot) &&
	       dest_workers(rg) == 1 &&
	       shoal_load_acquire(&ctx->memo.o->state) == SHOAL__LINK_READY &&
	       dout_current(rg, ctx->memo.o);
}

/*
 * A direct send. `sw` NULL: try_ (never waits); else wait as it says, its
 * rg set here (the destination's entry). To one worker's ring, or to every
 * worker's (send_all()). `given`: an envelope to write as it is (a record
 * the bridge brings from another host, shoal__send_env()), else one is
 * made here from flags and rid. Always inlined, with direct_reserve():
 * each caller's constants (`given`; for shoal_try_send_to() also sw, flags
 * and rid) remove their branches, and the compiler, left to itself, calls
 * one or the other out of line (bench/instr-count: 300 or 330 instructions
 * a try_send_to, 294 inlined, 261 with its own instance).
 */
static inline __attribute__((always_inline)) int
send_direct(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf, uint32_t len,
	    struct send_wait *sw, uint32_t flags, uint64_t rid,
	    const struct shoal_envelope *given, struct shoal__relay *rl)
{
	const struct shoal__reg_group *rg;
	const struct shoal__ltype *t = NULL;   /* none for an error response */
	struct shoal__dout *o;
	struct dest_to to;
	unsigned char *dst;
	uint16_t slot = shoal_addr_slot(dest);
	uint64_t self;
	int ret = 0;
	uint32_t nw, w;

	if (given == NULL && rl == NULL && send_memo(ctx, dest, type, len)) {
		rg = ctx->memo.rg;
		o = ctx->memo.o;
		if (sw != NULL)
			sw->rg = rg;
		self = shoal_ctx_self(ctx);
		dst = reserve_fast(ctx, &o->p, &o->dst->space_db, &o->dst->in_db, len, sw, &ret);
		if (dst == NULL) {
			if (ret == -EUCLEAN)
				dout_condemned(ctx, o);
			goto fail;
		}
		goto write;
	}
	if (!(flags & SHOAL_ENV_ERROR))
		ret = check_type(ctx, type, len, &t);
	rg = ret == 0 ? check_dest(ctx, dest, &to, &ret) : NULL;
	if (rg == NULL)
		goto fail;
	/* What a bridge brings from another host is for a group of its own
	 * host: one for a third host would go round (docs/hosts.md). */
	if (given != NULL && to.mrg != rg) {
		ret = -EHOSTUNREACH;
		goto fail;
	}
	nw = dest_workers(to.mrg);
	if (nw == 0) {
		ret = -EUCLEAN;
		goto fail;
	}
	if (sw != NULL)
		sw->rg = rg;
	if (slot == SHOAL_SLOT_ALL) {
		if (rl != NULL)
			shoal__relay_publish(ctx, rl);
		ret = send_all(ctx, to.mrg, to.mg, dest, nw, type, buf, len, sw, flags, rid, given);
		if (ret < 0)
			goto fail;
		COUNT(ctx, sent_direct);
		return 0;
	}
	self = given != NULL ? given->sender : shoal_ctx_self(ctx);
	w = dest_worker(nw, slot, self, rid, flags);
	dst = NULL;
	if (rl != NULL && rl->o != NULL) {
		/* The ring rl holds, if it is this one's and still in service. */
		uint32_t st = 0;

		o = to.mg < SHOAL_MAX_GROUPS && w < SHOAL_MAX_WORKERS ? link_entry(ctx, to.mg, w, &st)
								       : NULL;
		o = o != NULL && st == SHOAL__LINK_READY && dout_current(to.mrg, o) ? o : NULL;
		dst = relay_reserve(ctx, rl, o != NULL ? &o->p : NULL, o, len);
	} else if (rl != NULL) {
		shoal__relay_publish(ctx, rl);
	}
	if (dst == NULL)
		dst = direct_reserve(ctx, to.mrg, to.mg, w, len, sw, &o, &ret);
	if (dst == NULL)
		goto fail;
	if (given == NULL && rl == NULL && t != NULL && nw == 1 && to.mrg == rg)
		ctx->memo = (struct shoal__send_memo){ dest, type, t->max_size, rg, o };
write:
	if (given != NULL) {
		memcpy(dst, given, sizeof(*given));
	} else {
		struct env_common ec;

		env_common(ctx, &ec, self, dest, flags, rid, shoal__clock_ns(&ctx->clk));
		env_put(&ec, dst, type, len, 0);
	}
	memcpy(dst + ENV_SIZE, buf, len);
	if (rl != NULL) {
		relay_hold(rl, &o->p, o, flags & (SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE));
		if (given != NULL && t != NULL &&
		    !(flags & (SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE)))
			*rl = (struct shoal__relay){ rl->p, rl->o, rl->k, rl->urgent, rg, dest,
						     given->sender, type, flags, t->max_size };
		return 0;
	}
	shoal_ring_commit(&o->p);
	dout_ring(ctx, o, flags & (SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE), 1, false);
	COUNT(ctx, sent_direct);
	return 0;
fail:
	if (sw == NULL)
		COUNT(ctx, try_failed);
	return ret;
}

int shoal__send_direct(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		       uint32_t len, struct send_wait *sw, uint32_t flags, uint64_t rid)
{
	return send_direct(ctx, dest, type, buf, len, sw, flags, rid, NULL, NULL);
}

/*
 * A record like the one rl holds last (relay.h): the same ring, if the
 * destination still runs that incarnation and the ring is still open and
 * in service, with room. NULL: take the whole path.
 */
static inline unsigned char *relay_again(struct shoal_ctx *ctx, struct shoal__relay *rl,
					 const struct shoal_envelope *env)
{
	if (rl->rg == NULL || env->dest != rl->dest || env->sender != rl->sender ||
	    env->type != rl->type || env->flags != rl->flags || env->len > rl->max_len)
		return NULL;
	/* What check_dest() and link_entry() would find now (the link's
	 * state loaded with acquire, as link_entry() loads it). */
	if (!state_serves(shoal_load_relaxed(&rl->rg->state)) ||
	    !gen_current(rl->rg, env->dest, shoal_addr_slot(env->dest)) ||
	    shoal_load_acquire(&rl->o->state) != SHOAL__LINK_READY || !dout_current(rl->rg, rl->o) ||
	    rl->p == ctx->res_p)
		return NULL;
	return shoal_ring_reserve(rl->p, ENV_SIZE + env->len, 0);
}

/* shoal__send_env()'s whole path, out of line: the path of a record like
 * the one before saves no registers for it. */
static __attribute__((noinline)) int send_env_full(struct shoal_ctx *ctx, struct shoal__relay *rl,
						   const struct shoal_envelope *env,
						   const void *payload)
{
	return send_direct(ctx, env->dest, env->type, payload, env->len, NULL, env->flags,
			   env->request_id, env, rl);
}

int shoal__send_env(struct shoal_ctx *ctx, struct shoal__relay *rl,
		    const struct shoal_envelope *env, const void *payload)
{
	unsigned char *dst;

	/* Its bytes came from another host: checked as a ring's would be
	 * (DESIGN invariant 1), and an error response carries an int32. */
	if (env->dest == SHOAL_ADDR_NONE || env->type == 0 ||
	    (env->flags & ~(SHOAL_ENV_FLAGS & ~(SHOAL_ENV_ROUTED | SHOAL_ENV_TRY))) ||
	    ((env->flags & SHOAL_ENV_ERROR) && env->len != sizeof(int32_t))) {
		COUNT(ctx, try_failed);
		return -EINVAL;
	}
	dst = relay_again(ctx, rl, env);
	if (dst != NULL) {
		memcpy(dst, env, ENV_SIZE);
		memcpy(dst + ENV_SIZE, payload, env->len);
		rl->k++;
		return 0;
	}
	return send_env_full(ctx, rl, env, payload);
}

int shoal__send_routed_env(struct shoal_ctx *ctx, struct shoal__relay *rl,
			   const struct shoal_envelope *env, const void *payload)
{
	const struct shoal__ltype *t = NULL;
	unsigned char *dst;
	int ret = -EINVAL;

	/* As shoal__send_env(): a record as its producer put it in its
	 * uplink, before any router set dest and SHOAL_ENV_ROUTED. */
	if (env->dest == SHOAL_ADDR_NONE &&
	    !(env->flags & ~(SHOAL_ENV_FLAGS & ~SHOAL_ENV_ROUTED)) &&
	    !(env->flags & (SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE | SHOAL_ENV_ERROR)))
		ret = check_type(ctx, env->type, env->len, &t);
	if (ret == 0)
		ret = routes_of(t);
	if (ret == 0) {
		dst = relay_reserve(ctx, rl, &ctx->up, NULL, env->len);
		if (dst == NULL)
			dst = reserve_fast(ctx, &ctx->up, &ctx->mw->up_db, NULL, env->len, NULL, &ret);
		if (dst != NULL) {
			memcpy(dst, env, sizeof(*env));
			memcpy(dst + ENV_SIZE, payload, env->len);
			relay_hold(rl, &ctx->up, NULL, false);
			return 0;
		}
	}
	COUNT(ctx, try_failed);
	return ret;
}

uint64_t shoal__bridge_hosts_down(struct shoal_ctx *ctx, uint64_t set, uint64_t clear)
{
	/* Relaxed: a hint the router polls (runtime/control/router.c);
	 * nothing else is published with it, and the bridge's worker is its
	 * only writer, so a load and a store are enough. */
	uint64_t old = shoal_load_relaxed(&ctx->g->mbx->hosts_down);

	shoal_store_relaxed(&ctx->g->mbx->hosts_down, (old & ~clear) | set);
	return old;
}

/* ---- the bridge's idle sleep (relay.h) ----------------------------------------- */


bool shoal__idle_prepare(struct shoal_ctx *ctx)
{
	struct shoal_doorbell *db = &ctx->mw->in_db;

	shoal__wake_flush(ctx);
	/* A new streak from here, as shoal_doorbell_idle_wait() starts one:
	 * prepare takes back the producers' permission to skip F2. */
	ctx->idle.streak = 0;
	shoal_doorbell_prepare(db);
	/* The last look after F1 (docs/memory-ordering.md): every ring, not
	 * the ready summary, and what a request set aside. */
	if (ctx->def_head != NULL || shoal__rings_ready_from(ctx, SHOAL__ANY_SOURCE)) {
		shoal_doorbell_cancel(db);
		/* What the look found may have no mark in the summary yet (its
		 * producer between commit and mark): the next poll reads every
		 * ring, as after poll.c's own wait. */
		ctx->look = SHOAL_DOORBELL_READY_SET;
		return false;
	}
	return true;
}

void shoal__idle_cancel(struct shoal_ctx *ctx)
{
	shoal_doorbell_cancel(&ctx->mw->in_db);
}

int shoal__idle_wait(struct shoal_ctx *ctx, int64_t timeout_ns)
{
	int ret = shoal_doorbell_wait(&ctx->mw->in_db, timeout_ns);

	/* Woken by a commit whose ready mark we may not see yet: the next
	 * poll scans every ring whatever the summary says, as after poll.c's
	 * wait. */
	ctx->look = SHOAL_DOORBELL_READY_SET;
	return ret;
}

struct shoal_doorbell *shoal__idle_bell(struct shoal_ctx *ctx)
{
	return &ctx->mw->in_db;
}

int shoal_send_to(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		  uint32_t len)
{
	struct send_wait sw = WAIT_FOREVER;

	return shoal__send_direct(ctx, dest, type, buf, len, &sw, 0, 0);
}

/* An instance of its own: without a wait, flags or a request id, the
 * compiler drops their branches from the hot path. */
int shoal_try_send_to(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		      uint32_t len)
{
	return send_direct(ctx, dest, type, buf, len, NULL, 0, 0, NULL, NULL);
}

/* ---- bursts ------------------------------------------------------------------ */

/* Where a burst goes: the uplink (o NULL) or one direct link. */
struct burst {
	struct shoal_ring_prod *p;
	struct shoal__dout *o;
	uint64_t dest;             /* SHOAL_ADDR_NONE: routed */
};

/* Publish the k records the burst reserved since its last publication:
 * one commit, one fence, one doorbell. */
static void burst_publish(struct shoal_ctx *ctx, const struct burst *b, uint32_t k,
			  bool streamed)
{
	if (k > 0) {
		/* S1: the streamed records before the tail that publishes
		 * them (docs/memory-ordering.md). */
		if (streamed)
			shoal__stream_fence();
		publish(ctx, b->p, b->o, k, false);
	}
}

/*
 * Write k messages of one type and length, msgs[0..k), the first the i-th
 * of its burst, into the records claimed from `dst` on, `stride` bytes
 * apart, each whole before the next: its header, its envelope in place,
 * then the payload, copied `w` bytes twice (copy_width(); 0: memcpy()).
 * Always inlined, once for each width, so that the loop's copy is a few
 * moves.
 */
static inline __attribute__((always_inline)) void
burst_fill_w(const struct env_common *ec, unsigned char *dst, uint32_t stride,
	     const struct shoal_burst_msg *msgs, uint32_t k, uint32_t type, uint32_t len,
	     uint32_t i, uint32_t w)
{
	uint64_t hdr = shoal_ring_run_hdr(ENV_SIZE + len, 0);

	for (uint32_t j = 0; j < k; j++, dst += stride) {
		shoal_ring_put_hdr(dst, hdr);
		env_put(ec, dst, type, len, i + j);
		if (w == 0)
			memcpy(dst + ENV_SIZE, msgs[j].buf, len);
		else
			copy_pair(dst + ENV_SIZE, msgs[j].buf, len, w);
	}
}

/*
 * burst_fill_w() with streamed stores (shm/util.h): the header, the
 * envelope's seven words and the payload, one 8-byte store each, every line
 * written without first being read into this core's cache. Far from its
 * receiver, whose cache holds the ring's lines from the lap before, a
 * burst's plain stores each waited for such a line. burst_publish() fences
 * them (S1) before the commit.
 */
static void burst_stream(const struct env_common *ec, unsigned char *dst, uint32_t stride,
			 const struct shoal_burst_msg *msgs, uint32_t k, uint32_t type,
			 uint32_t len, uint32_t i)
{
	const uint64_t hdr = shoal_ring_run_hdr(ENV_SIZE + len, 0);
	const uint64_t type_len = (uint64_t)type | (uint64_t)len << 32;

	for (uint32_t j = 0; j < k; j++, dst += stride) {
		shoal__stream_word(dst - SHOAL_RING_REC_HDR, hdr);
		shoal__stream_word(dst, type_len);
		shoal__stream_word(dst + offsetof(struct shoal_envelope, sender), ec->self);
		shoal__stream_word(dst + offsetof(struct shoal_envelope, dest), ec->dest);
		shoal__stream_word(dst + offsetof(struct shoal_envelope, trace_id),
				   env_trace(ec, (uint64_t)i + j));
		shoal__stream_word(dst + offsetof(struct shoal_envelope, request_id), ec->rid);
		shoal__stream_word(dst + offsetof(struct shoal_envelope, send_ns), ec->now);
		/* flags, and `reserved` 0 */
		shoal__stream_word(dst + offsetof(struct shoal_envelope, flags), ec->flags);
		shoal__stream_copy(dst + ENV_SIZE, msgs[j].buf, len);
	}
}

/* Write a burst's k messages of one type and length: streamed (`stream`,
 * and up to SHOAL__STREAM_MAX bytes a record), else with plain stores.
 * Returns whether it streamed them. */
static bool burst_fill(const struct env_common *ec, unsigned char *dst, uint32_t stride,
		       const struct shoal_burst_msg *msgs, uint32_t k, uint32_t type, uint32_t len,
		       uint32_t i, bool stream)
{
	if (stream && ENV_SIZE + len <= SHOAL__STREAM_MAX) {
		burst_stream(ec, dst, stride, msgs, k, type, len, i);
		return true;
	}
	switch (copy_width(len)) {
	case 32: burst_fill_w(ec, dst, stride, msgs, k, type, len, i, 32); break;
	case 16: burst_fill_w(ec, dst, stride, msgs, k, type, len, i, 16); break;
	case 8: burst_fill_w(ec, dst, stride, msgs, k, type, len, i, 8); break;
	default: burst_fill_w(ec, dst, stride, msgs, k, type, len, i, 0); break;
	}
	return false;
}

static_assert(offsetof(struct shoal_burst_msg, len) ==
		      offsetof(struct shoal_burst_msg, type) + sizeof(uint32_t),
	      "burst message: type, then len");

/* A burst message's type and length as one word: equal for a run. */
static inline uint64_t burst_key(const struct shoal_burst_msg *m)
{
	uint64_t key;

	memcpy(&key, &m->type, sizeof(key));
	return key;
}

/*
 * Send msgs[0..n) into b's ring, in order, each checked as its single form
 * checks it. Messages of one type and length in a row (a burst often is
 * all one) are one run: checked once, claimed with one room check
 * (shoal_ring_claim_run()) and written record by record, each whole before
 * the next (burst_fill_w()), one pass over the run's lines. A ring that
 * fills is published, then waited on as `sw` says (NULL: the burst stops
 * there). Returns 0 or why it stopped; *sent: how many were sent, all of
 * them published. The loop keeps what it needs in locals: its stores into
 * the ring may alias anything behind a pointer.
 */
static int burst_send(struct shoal_ctx *ctx, const struct burst *b,
		      const struct shoal_burst_msg *msgs, uint32_t n, struct send_wait *sw,
		      uint32_t *sent)
{
	struct shoal_ring_prod *p = b->p;
	const struct shoal__ltype *t = NULL;
	struct env_common ec;
	uint32_t i, pending = 0, tid = 0, tlim = 0, rest = 0;
	/* A burst of a few is written as single sends are (SHOAL__STREAM_MIN);
	 * every burst is, where the router does not stream (router.stream). */
	const bool stream = ctx->g->stream && n >= SHOAL__STREAM_MIN;
	bool streamed = false;
	int ret = 0;

	/* The messages of a burst share their send time: one clock read. */
	env_common(ctx, &ec, shoal_ctx_self(ctx), b->dest,
		   b->o == NULL && sw == NULL ? SHOAL_ENV_TRY : 0, 0, shoal__clock_ns(&ctx->clk));
	for (i = 0; i < n;) {
		uint32_t type = msgs[i].type, len = msgs[i].len, run = 1;
		void *dst = NULL;
		unsigned k;

		/* Looked up when the type changes, or for a length past the
		 * last one's size (which check_type() refuses). Before the
		 * first lookup every length is past it. */
		if (SHOAL_UNLIKELY(type != tid || len >= tlim)) {
			ret = check_type(ctx, type, len, &t);
			if (ret == 0 && b->o == NULL)
				ret = routes_of(t);
			if (ret < 0)
				break;
			tid = type;
			tlim = t->max_size + 1;
		}
		/* A run a full ring cut short goes on where it stopped, not
		 * looked for again: a long burst is read once. */
		if (rest > 0)
			run = rest;
		else
			while (i + run < n && burst_key(&msgs[i + run]) == burst_key(&msgs[i]))
				run++;
		if (run == 1) {
			/* Its header is burst_fill()'s to write, as a run's. */
			dst = shoal_ring_claim(p, ENV_SIZE + len, 0);
			k = dst != NULL;
		} else {
			k = shoal_ring_claim_run(p, ENV_SIZE + len, 0, run, &dst);
		}
		if (k == 0) {
			/* Full, or an error: what is reserved goes first (a wait
			 * cancels reservations), then the single form's path. */
			burst_publish(ctx, b, pending, streamed);
			pending = 0;
			streamed = false;
			dst = shoal__reserve_in(ctx, p,
						b->o == NULL ? &ctx->mw->up_db : &b->o->dst->space_db,
						b->o == NULL ? NULL : &b->o->dst->in_db, len, sw, &ret);
			if (dst == NULL)
				break;
			k = 1;
		}
		/* The i-th of the burst on: the messages before them are
		 * counted sent, or pending. */
		streamed |= burst_fill(&ec, dst, shoal_ring_stride(ENV_SIZE + len), msgs + i, k,
				       type, len, i, stream);
		pending += k;
		i += k;
		rest = run - k;
	}
	burst_publish(ctx, b, pending, streamed);
	*sent = i;
	if (ret == -EUCLEAN && b->o != NULL)
		dout_condemned(ctx, b->o);
	if (ret < 0 && sw == NULL)
		COUNT(ctx, try_failed);
	return ret;
}

static int send_burst(struct shoal_ctx *ctx, const struct shoal_burst_msg *msgs, uint32_t n,
		      uint32_t *sent, bool wait)
{
	struct burst b = { &ctx->up, NULL, SHOAL_ADDR_NONE };
	struct send_wait sw = WAIT_FOREVER;

	*sent = 0;
	if (SHOAL_UNLIKELY(ctx->res_p == &ctx->up))
		return -EBUSY;
	return burst_send(ctx, &b, msgs, n, wait ? &sw : NULL, sent);
}

int shoal_send_burst(struct shoal_ctx *ctx, const struct shoal_burst_msg *msgs, uint32_t n,
		     uint32_t *sent)
{
	return send_burst(ctx, msgs, n, sent, true);
}

int shoal_try_send_burst(struct shoal_ctx *ctx, const struct shoal_burst_msg *msgs, uint32_t n,
			 uint32_t *sent)
{
	return send_burst(ctx, msgs, n, sent, false);
}

static int send_to_burst(struct shoal_ctx *ctx, uint64_t dest, const struct shoal_burst_msg *msgs,
			 uint32_t n, uint32_t *sent, bool wait)
{
	struct send_wait sw = WAIT_FOREVER;
	struct burst b = { NULL, NULL, dest };
	const struct shoal__reg_group *rg;
	struct dest_to to;
	uint32_t nw;
	int ret = 0;

	*sent = 0;
	rg = check_dest(ctx, dest, &to, &ret);
	if (rg == NULL)
		goto fail;
	if (shoal_addr_slot(dest) == SHOAL_SLOT_ALL) {
		ret = -EINVAL;   /* a burst is one ring: send_to() each to all */
		goto fail;
	}
	nw = dest_workers(to.mrg);
	if (nw == 0) {
		ret = -EUCLEAN;
		goto fail;
	}
	sw.rg = rg;
	b.o = dout_ready(ctx, to.mrg, to.mg,
			 dest_worker(nw, shoal_addr_slot(dest), shoal_ctx_self(ctx), 0, 0),
			 wait ? &sw : NULL, &ret);
	if (b.o == NULL)
		goto fail;
	if (SHOAL_UNLIKELY(ctx->res_p == &b.o->p)) {
		ret = -EBUSY;
		goto fail;
	}
	b.p = &b.o->p;
	return burst_send(ctx, &b, msgs, n, wait ? &sw : NULL, sent);
fail:
	if (!wait)
		COUNT(ctx, try_failed);
	return ret;
}

int shoal_send_to_burst(struct shoal_ctx *ctx, uint64_t dest, const struct shoal_burst_msg *msgs,
			uint32_t n, uint32_t *sent)
{
	return send_to_burst(ctx, dest, msgs, n, sent, true);
}

int shoal_try_send_to_burst(struct shoal_ctx *ctx, uint64_t dest,
			    const struct shoal_burst_msg *msgs, uint32_t n, uint32_t *sent)
{
	return send_to_burst(ctx, dest, msgs, n, sent, false);
}

int shoal_connect(struct shoal_ctx *ctx, uint64_t dest, int64_t timeout_ns)
{
	struct send_wait sw = WAIT_FOREVER;
	struct dest_to to;
	uint32_t nw, w0, w1;
	int ret = 0;

	if (timeout_ns >= 0)
		sw.deadline = shoal__now_ns() + (uint64_t)timeout_ns;
	sw.rg = check_dest(ctx, dest, &to, &ret);
	if (sw.rg == NULL)
		return ret;
	nw = dest_workers(to.mrg);
	if (nw == 0)
		return -EUCLEAN;
	w0 = dest_worker(nw, shoal_addr_slot(dest), shoal_ctx_self(ctx), 0, 0);
	w1 = w0 + 1;
	if (shoal_addr_slot(dest) == SHOAL_SLOT_ALL) {
		w0 = 0;
		w1 = nw;
	}
	dout_ask_rest(ctx, to.mg, w0, w1);
	for (uint32_t w = w0; w < w1; w++)
		if (dout_wait(ctx, to.mg, w, &sw, &ret) == NULL)
			return ret;
	return 0;
}

int shoal_reserve(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, uint32_t len, void **buf)
{
	const struct shoal__ltype *t;
	const struct shoal__reg_group *rg;
	struct shoal__dout *o = NULL;
	struct shoal_ring_prod *p;
	struct dest_to to;
	unsigned char *dst;
	int ret;

	if (ctx->res_p != NULL)
		return -EBUSY;   /* one reservation at a time: commit the first */
	ret = check_type(ctx, type, len, &t);
	if (ret < 0)
		goto fail;
	if (dest == SHOAL_ADDR_NONE) {
		ret = routes_of(t);
		if (ret < 0)
			goto fail;
		p = &ctx->up;
	} else {
		rg = check_dest(ctx, dest, &to, &ret);
		if (rg == NULL || shoal_addr_slot(dest) == SHOAL_SLOT_ALL) {
			ret = rg == NULL ? ret : -EINVAL;   /* zero-copy is one ring */
			goto fail;
		}
		if (dest_workers(to.mrg) == 0) {
			ret = -EUCLEAN;
			goto fail;
		}
		o = dout_get(ctx, to.mg,
			     dest_worker(dest_workers(to.mrg), shoal_addr_slot(dest),
					 shoal_ctx_self(ctx), 0, 0), false, &ret);
		if (o == NULL)
			goto fail;
		p = &o->p;
	}
	dst = shoal__reserve_in(ctx, p, NULL, o == NULL ? NULL : &o->dst->in_db, len, NULL, &ret);
	if (dst == NULL)
		goto fail;
	fill_env(ctx, dst, type, len, dest, dest == SHOAL_ADDR_NONE ? SHOAL_ENV_TRY : 0, 0);
	ctx->res_p = p;
	ctx->res_o = o;
	*buf = dst + ENV_SIZE;
	return 0;
fail:
	COUNT(ctx, try_failed);
	return ret;
}

void shoal_commit(struct shoal_ctx *ctx)
{
	if (ctx->res_p == NULL)
		return;
	publish(ctx, ctx->res_p, ctx->res_o, 1, false);
	ctx->res_p = NULL;
}
