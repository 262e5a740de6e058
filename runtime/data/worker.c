/* SPDX-License-Identifier: MIT */
/*
 * The data path of a group process: sends (routed through the uplink,
 * direct into another group's ring), the receive loop with in-group routing,
 * and request/response.
 *
 * Memory picture of one worker (struct shoal_ctx, used by one thread):
 *   up          producer of its uplink ring (-> its node's dispatcher)
 *   in[]        consumers of its inbound rings: one per dispatcher, one per
 *               direct sender (created on first use by the router), and one
 *               per other worker of this process (in-process forwarding)
 *   dout[g][w]  producers of the direct rings it opened into other groups
 *   fwd[w]      producers of the in-process rings to the other workers
 * Every ring has one producer and one consumer, so a dead process can never
 * wedge a ring it does not own (DESIGN invariant 3).
 *
 * Ordering guarantees: those of the rings (R1/A1, R2/A2 in shm/ring.c) and
 * doorbells (F1/F2 in shm/doorbell.c); registry reads (generation, state,
 * route counts) are relaxed snapshots that order nothing: a stale one at
 * worst makes a send fail early or a receiver drop a message as stale.
 *
 * Progress guarantees: try_* sends and shoal_reserve are wait-free. send,
 * send_to and request wait, and say so: bounded spin, then a futex sleep on
 * the doorbell the other side rings when it makes room or delivers.
 *
 * Hot path: no allocation, lock, log or system call, except the FUTEX_WAKE a
 * doorbell makes when the other side announced sleep.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>

#include "runtime/group_impl.h"
#include "runtime/control/proto.h"
#include "shm/util.h"

#define POLL_BATCH 32u
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

/* ---- counters ------------------------------------------------------------ */

/* Relaxed stores: the worker is the only writer of its counter line. */
#define COUNT(ctx, field) shoal_store_relaxed(&(ctx)->mw->field, ++(ctx)->field)

/* ---- rings of this worker ---------------------------------------------------- */

static int add_inring(struct shoal_ctx *ctx, void *mem, uint64_t len, int src_group)
{
	struct shoal__inring *in = shoal__grow(ctx->in, &ctx->cap_in, ctx->n_in, sizeof(*in), 8);

	if (in == NULL)
		return -ENOMEM;
	ctx->in = in;
	/* Quarantined: the router counted what it holds as lost, and a
	 * replacement follows in the directory. */
	if (shoal_ring_condemned(mem, len) != 0)
		return -EUCLEAN;
	if (shoal_ring_cons_attach(&ctx->in[ctx->n_in].c, mem, len, NULL) < 0) {
		/* The router replaces a ring it finds condemned. */
		shoal_ring_condemn(mem, len, SHOAL_RING_SIDE_CONS);
		return -EUCLEAN;
	}
	ctx->in[ctx->n_in].mem = mem;
	ctx->in[ctx->n_in].len = len;
	ctx->in[ctx->n_in].condemned = false;
	ctx->in[ctx->n_in].src_group = src_group;
	ctx->n_in++;
	return 0;
}

/* Who writes an inbound ring, from the rest of its name after "in.W.":
 * "gH.V" is worker V of group H (direct sends), "dD" dispatcher D (-1). */
static int ring_source(const char *rest)
{
	char *end;
	unsigned long h;

	if (rest[0] != 'g')
		return -1;
	h = strtoul(rest + 1, &end, 10);
	return end != rest + 1 && *end == '.' && h < SHOAL_MAX_GROUPS ? (int)h : -1;
}

/*
 * Attach the inbound rings the router added to our mailbox since the last
 * scan ("in.W.*" for this worker). Cheap when nothing changed: one load.
 */
void shoal__ctx_scan(struct shoal_ctx *ctx)
{
	uint32_t count = shoal_seg_dir_count(&ctx->g->mbx_seg);
	char prefix[16];
	size_t plen;

	if (SHOAL_LIKELY(count == ctx->dir_seen))
		return;
	plen = (size_t)snprintf(prefix, sizeof(prefix), "in.%u.", ctx->w);
	for (uint32_t i = ctx->dir_seen; i < count; i++) {
		struct shoal_seg_region r;
		void *mem;

		if (shoal_seg_region_at(&ctx->g->mbx_seg, i, &r) < 0)
			continue;   /* a damaged entry: the router replaces the mailbox */
		if (r.kind != SHOAL_SEG_KIND_RING || strncmp(r.name, prefix, plen) != 0)
			continue;
		mem = shoal_seg_ptr(&ctx->g->mbx_seg, r.off, r.len, 128);
		if (mem == NULL || add_inring(ctx, mem, r.len, ring_source(r.name + plen)) < 0)
			continue;   /* a corrupted ring is skipped, not trusted */
	}
	ctx->dir_seen = count;
}

/* Attach the uplink of generation `gen` (up.W, then up.W.rN) to *p. */
static int uplink_attach(struct shoal_ctx *ctx, uint32_t gen, struct shoal_ring_prod *p,
			 void **mem, uint64_t *len, struct shoal_err *err)
{
	char name[SHOAL_SEG_REGION_NAME_MAX];
	struct shoal_seg_region r;

	if (gen == 0)
		snprintf(name, sizeof(name), "up.%u", ctx->w);
	else
		snprintf(name, sizeof(name), "up.%u.r%u", ctx->w, gen);
	if (shoal_seg_find(&ctx->g->mbx_seg, SHOAL_SEG_KIND_RING, name, &r) < 0 ||
	    (*mem = shoal_seg_ptr(&ctx->g->mbx_seg, r.off, r.len, 128)) == NULL)
		return shoal__fail(err, -EUCLEAN, "mailbox has no uplink ring %s", name);
	*len = r.len;
	return shoal_ring_prod_attach(p, *mem, r.len, err);
}

/*
 * Move to the uplink the router gave us in place of a condemned one, if it
 * did. What we committed to the old one and its dispatcher never took is
 * counted as lost here, exactly (the router published the new uplink only
 * after no dispatcher reads the old one), and the old one is marked settled
 * so that the router does not count it again. Returns true if we moved.
 * Slow path only: called when the uplink is full or corrupted.
 */
bool shoal__ctx_uplink_renew(struct shoal_ctx *ctx)
{
	/* A4: pairs with R4 in router.c watch_once(). */
	uint32_t gen = shoal_load_acquire(&ctx->mw->up_gen);
	struct shoal_ring_prod fresh;
	uint64_t in, out, len;
	void *mem;

	if (SHOAL_LIKELY(gen == ctx->up_gen) || ctx->res_p == &ctx->up ||
	    uplink_attach(ctx, gen, &fresh, &mem, &len, NULL) < 0)
		return false;
	if (shoal_ring_records(ctx->up_mem, ctx->up_len, &in, &out) == 0) {
		in = ctx->up.records_in;   /* ours, not the ring's (it may be garbage) */
		ctx->lost_corrupt += in > out ? in - out : 0;
		/* Relaxed: the worker is the only writer of its counter line. */
		shoal_store_relaxed(&ctx->mw->lost_corrupt, ctx->lost_corrupt);
	}
	shoal_ring_condemn(ctx->up_mem, ctx->up_len, SHOAL_RING_SIDE_SETTLED);
	ctx->up = fresh;
	ctx->up_mem = mem;
	ctx->up_len = len;
	ctx->up_gen = gen;
	ctx->up_condemned = false;
	return true;
}

static void fwd_ring(struct shoal_group *g, unsigned from, unsigned to, void **mem, uint64_t *len)
{
	*len = shoal_ring_size(SHOAL__FWD_CAP);
	*mem = (char *)g->fwd_mem + (from * g->n_workers + to) * *len;
}

/*
 * What the previous process of this group had forwarded between its workers
 * and not handled died with its private rings: count it (DESIGN invariant
 * 6). Runs at attach, before any worker, when no other process of the group
 * can run; sent is published before each commit and taken after each copy
 * is handled, so sent - taken - lost counted before is exactly what was
 * committed and never handled (see forward()).
 */
static void count_lost_forwards(struct shoal_group *g)
{
	uint64_t sent = 0, taken = 0, lost = 0;

	for (unsigned v = 0; v < g->n_workers && v < SHOAL_MAX_WORKERS; v++) {
		/* Relaxed: the writers are dead; the mailbox holds their last. */
		sent += shoal_load_relaxed(&g->mbx->w[v].fwd_sent);
		taken += shoal_load_relaxed(&g->mbx->w[v].fwd_taken);
		lost += shoal_load_relaxed(&g->mbx->w[v].fwd_lost);
	}
	if (sent > taken + lost)
		shoal_store_relaxed(&g->mbx->w[0].fwd_lost,
				    shoal_load_relaxed(&g->mbx->w[0].fwd_lost) +
				    (sent - taken - lost));
}

/*
 * A message that kills its handler would be redelivered to every new
 * process of the group, which would die of it in turn. So each worker marks
 * in its mailbox block the record it is handling (`inflight`: its ring's and
 * its own offsets in the mailbox, stable across processes), and clears the
 * mark when it releases the batch. A process that attaches and finds a mark
 * counts one more crash on that record; once SHOAL__CRASHES_MAX processes
 * died on it, the worker sets it aside when it comes round again: skipped,
 * released and counted (set_aside), its first bytes kept for `shoal dump`
 * (keep_aside()), and the group carries on. Relaxed
 * stores: only a later process reads them, after this one died.
 */
static void note_crash(struct shoal_ctx *ctx)
{
	uint64_t mark = shoal_load_relaxed(&ctx->mw->inflight);

	if (mark != 0) {
		if (mark == shoal_load_relaxed(&ctx->mw->crash_mark)) {
			shoal_store_relaxed(&ctx->mw->crashes,
					    shoal_load_relaxed(&ctx->mw->crashes) + 1);
		} else {
			shoal_store_relaxed(&ctx->mw->crash_mark, mark);
			shoal_store_relaxed(&ctx->mw->crashes, 1);
		}
		shoal_store_relaxed(&ctx->mw->inflight, 0);
	}
	ctx->suspect = shoal_load_relaxed(&ctx->mw->crash_mark);
	ctx->suspect_crashes = shoal_load_relaxed(&ctx->mw->crashes);
}

/* The mark of record `rec` of mailbox ring `in`: never 0 (the mailbox
 * header comes before any ring). */
static uint64_t rec_mark(const struct shoal_ctx *ctx, const struct shoal__inring *in,
			 const struct shoal_rec *rec)
{
	uint64_t ring = (uint64_t)((const char *)in->mem - (const char *)ctx->g->mbx);
	uint64_t off = (uint64_t)((const char *)rec->data - (const char *)in->mem);

	return ring << 32 | (off & UINT32_MAX);
}

/*
 * Keep a copy of the record set aside where `shoal dump` finds it: a
 * sequence count around the bytes (a seqlock; a sequence found odd, say
 * after a crash mid-write, is made odd again, never taken for stable).
 * The bytes are plain stores read concurrently by the tool: ordered by the
 * fences on x86-64 and ARMv8, a data race in the C11 model, which the
 * reader's sequence re-check turns into a retry, never a torn copy shown.
 */
static void keep_aside(struct shoal_ctx *ctx, const struct shoal_rec *rec)
{
	struct shoal__mbx_aside *a = &ctx->g->mbx->aside[ctx->w];
	uint32_t seq = shoal_load_relaxed(&a->seq) | 1u;   /* we are its only writer */
	uint32_t kept = rec->len < SHOAL__ASIDE_KEEP ? rec->len : SHOAL__ASIDE_KEEP;

	shoal_store_relaxed(&a->seq, seq);
	/* R5: pairs with A5 in tools/cmd_dump.c read_aside(): the odd
	 * sequence is visible before any byte below. */
	shoal_fence_release();
	a->len = rec->len;
	a->kept = kept;
	a->crashes = ctx->suspect_crashes;
	a->when_ns = shoal__now_ns();
	memcpy(a->rec, rec->data, kept);
	/* R6: pairs with A6 in read_aside(): the bytes before the even sequence. */
	shoal_store_release(&a->seq, seq + 1);
}

/* Whether to set record `rec` aside; else marks it as in hand. */
static bool set_aside(struct shoal_ctx *ctx, const struct shoal__inring *in,
		      const struct shoal_rec *rec)
{
	uint64_t mark = rec_mark(ctx, in, rec);

	if (SHOAL_UNLIKELY(mark == ctx->suspect)) {
		ctx->suspect = 0;   /* it comes round once */
		if (ctx->suspect_crashes >= SHOAL__CRASHES_MAX) {
			keep_aside(ctx, rec);
			COUNT(ctx, set_aside);
			return true;
		}
	}
	shoal_store_relaxed(&ctx->mw->inflight, mark);
	return false;
}

int shoal__ctx_init(struct shoal_group *g, unsigned w, struct shoal_err *err)
{
	struct shoal_ctx *ctx = &g->ctx[w];
	void *mem;
	uint64_t len;
	int ret;

	ctx->g = g;
	ctx->w = w;
	ctx->mw = &g->mbx->w[w];
	ctx->bell = &g->bell->disp[g->reg.groups[g->id].dispatcher % SHOAL_MAX_NODES];
	ctx->next_rid = 1;
	shoal_doorbell_init(&ctx->link_db);
	/* A4: pairs with R4 in router.c watch_once(). */
	ctx->up_gen = shoal_load_acquire(&ctx->mw->up_gen);
	ret = uplink_attach(ctx, ctx->up_gen, &ctx->up, &ctx->up_mem, &ctx->up_len, err);
	if (ret == -EUCLEAN && ctx->up_mem != NULL)
		/* The router replaces a ring it finds condemned: the next
		 * process of this group gets a fresh uplink (as add_inring). */
		shoal_ring_condemn(ctx->up_mem, ctx->up_len, SHOAL_RING_SIDE_PROD);
	if (ret < 0)
		return ret;
	/* Counters continue from what the previous incarnation published. */
	ctx->sent_routed = shoal_load_relaxed(&ctx->mw->sent_routed);
	ctx->sent_direct = shoal_load_relaxed(&ctx->mw->sent_direct);
	ctx->received = shoal_load_relaxed(&ctx->mw->received);
	ctx->handled = shoal_load_relaxed(&ctx->mw->handled);
	ctx->try_failed = shoal_load_relaxed(&ctx->mw->try_failed);
	ctx->stale = shoal_load_relaxed(&ctx->mw->stale);
	ctx->malformed = shoal_load_relaxed(&ctx->mw->malformed);
	ctx->discarded = shoal_load_relaxed(&ctx->mw->discarded);
	ctx->fwd_sent = shoal_load_relaxed(&ctx->mw->fwd_sent);
	ctx->fwd_taken = shoal_load_relaxed(&ctx->mw->fwd_taken);
	ctx->set_aside = shoal_load_relaxed(&ctx->mw->set_aside);
	ctx->lost_corrupt = shoal_load_relaxed(&ctx->mw->lost_corrupt);
	note_crash(ctx);
	shoal__ctx_scan(ctx);
	if (g->n_workers < 2)
		return 0;
	if (w == 0)
		count_lost_forwards(g);
	/* In-process forwarding rings, all allocated by the first worker. */
	if (g->fwd_mem == NULL) {
		size_t total = (size_t)g->n_workers * g->n_workers * shoal_ring_size(SHOAL__FWD_CAP);

		if (posix_memalign(&g->fwd_mem, 128, total) != 0)
			return -ENOMEM;
		for (unsigned a = 0; a < g->n_workers; a++)
			for (unsigned b = 0; b < g->n_workers; b++) {
				fwd_ring(g, a, b, &mem, &len);
				shoal_ring_init(mem, len, SHOAL__FWD_CAP, 0);
			}
	}
	ctx->fwd = calloc(g->n_workers, sizeof(*ctx->fwd));
	if (ctx->fwd == NULL)
		return -ENOMEM;
	for (unsigned o = 0; o < g->n_workers; o++) {
		if (o == w)
			continue;
		fwd_ring(g, w, o, &mem, &len);
		shoal_ring_prod_attach(&ctx->fwd[o], mem, len, NULL);
		fwd_ring(g, o, w, &mem, &len);
		ret = add_inring(ctx, mem, len, SHOAL__SRC_WORKERS);
		if (ret < 0)
			return ret;
	}
	return 0;
}

void shoal__ctx_fini(struct shoal_ctx *ctx)
{
	struct shoal__deferred *d = ctx->def_head;

	while (d != NULL) {
		struct shoal__deferred *next = d->next;

		free(d);
		d = next;
	}
	for (int i = 0; i < SHOAL_MAX_GROUPS; i++)
		free(shoal_load_relaxed(&ctx->dout[i]));
	free(ctx->in);
	free(ctx->fwd);
}

/* A stop asked by the router or by shoal_group_stop(): two loads, for the
 * polling paths (an empty poll, a spin predicate). */
static bool stop_flagged(const struct shoal_group *g)
{
	/* Relaxed: a flag; the doorbell that accompanies it orders nothing
	 * either, we only need to see it eventually. */
	return atomic_load_explicit(&g->stop, memory_order_relaxed) ||
	       shoal_load_relaxed(&g->mbx->stop) != 0;
}

/* The same, or a dead router (group.c: a clock read, and a poll() every
 * 50 ms): once per sleep slice, never per empty poll or spin. */
bool shoal__stop_requested(struct shoal_group *g)
{
	return stop_flagged(g) || shoal__router_gone(g);
}

/* ---- sending ---------------------------------------------------------------- */

static const struct shoal__ltype *type_of(const struct shoal_group *g, uint32_t id)
{
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

static uint64_t new_trace_id(struct shoal_ctx *ctx)
{
	/* Unique per system: group, worker and a per-worker counter. */
	return (uint64_t)(ctx->g->id + 1u) << 48 | (uint64_t)ctx->w << 40 |
	       ((ctx->sent_routed + ctx->sent_direct + 1) & ((UINT64_C(1) << 40) - 1));
}

static void fill_env(struct shoal_ctx *ctx, void *dst, uint32_t type, uint32_t len, uint64_t dest,
		     uint32_t flags, uint64_t rid)
{
	struct shoal_envelope env;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);   /* vDSO: no system call */
	env.type = type;
	env.len = len;
	env.sender = shoal_ctx_self(ctx);
	env.dest = dest;
	env.trace_id = ctx->cur != NULL ? ctx->cur_trace : new_trace_id(ctx);
	env.request_id = rid;
	env.send_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	env.flags = flags;
	env.reserved = 0;
	memcpy(dst, &env, sizeof(env));
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

/* The router has given us a new uplink (see shoal__ctx_uplink_renew()). */
static bool uplink_replaced(void *arg)
{
	struct shoal_ctx *ctx = arg;

	/* A4: pairs with R4 in router.c watch_once(). */
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

	for (;;) {
		bool condemned = p == &ctx->up && ctx->up_condemned;
		int64_t slice = wait_slice(sw);
		int ret, end;

		if (slice < 0)
			return (int)slice;
		ret = condemned ? shoal_doorbell_poll_wait(db, ctx->g->spin_ns, uplink_replaced, ctx,
							   slice) :
				  shoal_doorbell_poll_wait(db, ctx->g->spin_ns, room, &w, slice);
		if (p == &ctx->up && shoal__ctx_uplink_renew(ctx))
			return 0;   /* our uplink was condemned: retry on the new one */
		if (p != &ctx->up && shoal_ring_prod_condemned(p))
			return -EUCLEAN;   /* its reader gave it up: no room will come */
		if (shoal_ring_prod_error(p) && !condemned)
			/* Our uplink went bad while we waited: reserve_in()
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

/* Reserve `ENV_SIZE + len` in `p`, waiting as `sw` says (NULL: do not wait). */
static void *reserve_in(struct shoal_ctx *ctx, struct shoal_ring_prod *p, struct shoal_doorbell *db,
			uint32_t len, const struct send_wait *sw, int *err)
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
		if (p != &ctx->up && shoal_ring_prod_condemned(p)) {
			*err = -EUCLEAN;
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
		dst = reserve_in(ctx, &ctx->up, &ctx->mw->up_db, len, wait ? &WAIT_FOREVER : NULL,
				 &ret);
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

	/* Release: our giving up of the entry (state NONE) happens before the
	 * opener, which takes the bit with acquire, rewrites it. */
	if (!(atomic_fetch_or_explicit(&ctx->link_want[dg], bit, memory_order_release) & bit))
		shoal_doorbell_notify(&ctx->g->link_bell);
}

/* The entry of the direct link into (dg, dw) once the opener answered, else NULL. */
static struct shoal__dout *link_entry(const struct shoal_ctx *ctx, uint16_t dg, uint32_t dw)
{
	/* Acquire: pairs with the opener's release stores of the array and
	 * of the state (links.c answer()). */
	struct shoal__dout *douts = shoal_load_acquire(&ctx->dout[dg]);

	if (douts == NULL || shoal_load_acquire(&douts[dw].state) == SHOAL__LINK_NONE)
		return NULL;
	return &douts[dw];
}

/*
 * The direct ring from this worker to worker `dw` of group `dg`. Never
 * waits: NULL with -EAGAIN while the link opener opens it (asked here), or
 * with the reason it could not be opened (told once; the next call asks
 * again).
 */
static struct shoal__dout *dout_get(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw, int *err)
{
	struct shoal__dout *o;
	uint32_t failed = SHOAL__LINK_FAILED;

	/* dw comes from the registry's worker count: shared memory, bounded. */
	if (SHOAL_UNLIKELY(dg >= SHOAL_MAX_GROUPS || dw >= SHOAL_MAX_WORKERS)) {
		*err = -EUCLEAN;
		return NULL;
	}
	o = link_entry(ctx, dg, dw);
	if (SHOAL_LIKELY(o != NULL && shoal_load_relaxed(&o->state) == SHOAL__LINK_READY))
		return o;
	/* A failure is ours to take back to NONE; the CAS leaves an answer
	 * the opener gives meanwhile (to an earlier second ask) in place. */
	if (o != NULL && atomic_compare_exchange_strong(&o->state, &failed, SHOAL__LINK_NONE)) {
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
	for (uint32_t dw = from; dw < to && dw < SHOAL_MAX_WORKERS; dw++) {
		struct shoal__dout *o = link_entry(ctx, dg, dw);

		if (o == NULL)
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

	return link_entry(lw->ctx, lw->dg, lw->dw) != NULL || wait_ended(lw->sw) != 0 ||
	       stop_flagged(lw->ctx->g);
}

/* As dout_get(), waiting for the link opener as `sw` says. */
static struct shoal__dout *dout_wait(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw,
				     const struct send_wait *sw, int *err)
{
	struct link_waiter lw = { ctx, dg, dw, sw };

	for (;;) {
		struct shoal__dout *o = dout_get(ctx, dg, dw, err);
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

/*
 * Validate a destination against the registry. Returns the registry entry,
 * or NULL with the error in *err.
 */
static const struct shoal__reg_group *check_dest(struct shoal_ctx *ctx, uint64_t dest, int *err)
{
	int dg = shoal_addr_group(dest);
	uint16_t slot = shoal_addr_slot(dest);
	const struct shoal__reg_group *rg;

	/* A3: pairs with R3 in router.c declare_group(). */
	if (dg < 0 || dg >= SHOAL_MAX_GROUPS ||
	    (uint32_t)dg >= shoal_load_acquire(&ctx->g->reg.hdr->n_groups)) {
		*err = -EINVAL;
		return NULL;
	}
	rg = &ctx->g->reg.groups[dg];
	switch (shoal_load_relaxed(&rg->state)) {
	case SHOAL_GROUP_EMPTY:
		*err = -EINVAL;
		return NULL;
	case SHOAL_GROUP_FAILED:
		*err = -EHOSTDOWN;
		return NULL;
	default:
		break;
	}
	if (slot != SHOAL_SLOT_GROUP && slot != SHOAL_SLOT_ALL && slot >= rg->n_actors) {
		*err = -EINVAL;
		return NULL;
	}
	/* Actor addresses name one incarnation (see shoal/message.h). */
	if (slot < SHOAL_MAX_ACTORS && shoal_addr_gen(dest) != shoal_load_relaxed(&rg->gen)) {
		*err = -ESTALE;
		return NULL;
	}
	return rg;
}

/*
 * A direct send. `sw` NULL: try_ (never waits); else wait as it says, its
 * rg set here. To SHOAL_SLOT_ALL it is all or nothing: a record is reserved
 * in the ring of every worker of the destination before any is committed,
 * so a refusal (or a wait that gives up) leaves nothing delivered and a
 * retry duplicates nothing.
 */
static int send_direct(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		       uint32_t len, struct send_wait *sw, uint32_t flags, uint64_t rid)
{
	struct shoal__dout *outs[SHOAL_MAX_WORKERS];
	unsigned char *dsts[SHOAL_MAX_WORKERS];
	const struct shoal__reg_group *rg;
	const struct shoal__ltype *t;
	uint16_t dg = (uint16_t)shoal_addr_group(dest);
	int ret = 0;
	uint32_t nw, w0, w1, n = 0;

	if (!(flags & SHOAL_ENV_ERROR))
		ret = check_type(ctx, type, len, &t);
	rg = ret == 0 ? check_dest(ctx, dest, &ret) : NULL;
	if (rg == NULL)
		goto fail;
	nw = dest_workers(rg);
	if (nw == 0) {
		ret = -EUCLEAN;
		goto fail;
	}
	if (sw != NULL)
		sw->rg = rg;
	w0 = dest_worker(nw, shoal_addr_slot(dest), shoal_ctx_self(ctx), rid, flags);
	w1 = w0 + 1;
	if (shoal_addr_slot(dest) == SHOAL_SLOT_ALL) {
		w0 = 0;
		w1 = nw;
	}
	for (uint32_t w = w0; w < w1; w++, n++) {
		outs[n] = sw == NULL ? dout_get(ctx, dg, w, &ret) : dout_wait(ctx, dg, w, sw, &ret);
		if (outs[n] == NULL) {
			if (ret == -EAGAIN)
				dout_ask_rest(ctx, dg, w + 1, w1);
			goto cancel;
		}
		dsts[n] = reserve_in(ctx, &outs[n]->p, &outs[n]->dst->space_db, len, sw, &ret);
		if (dsts[n] == NULL) {
			if (ret == -EUCLEAN)
				dout_condemned(ctx, outs[n]);
			goto cancel;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		fill_env(ctx, dsts[i], type, len, dest, flags, rid);
		memcpy(dsts[i] + ENV_SIZE, buf, len);
		shoal_ring_commit(&outs[i]->p);
		shoal_doorbell_notify(&outs[i]->dst->in_db);
	}
	COUNT(ctx, sent_direct);
	return 0;
cancel:
	for (uint32_t i = 0; i < n; i++)
		shoal_ring_cancel(&outs[i]->p);
fail:
	if (sw == NULL)
		COUNT(ctx, try_failed);
	return ret;
}

int shoal_send_to(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		  uint32_t len)
{
	struct send_wait sw = WAIT_FOREVER;

	return send_direct(ctx, dest, type, buf, len, &sw, 0, 0);
}

int shoal_try_send_to(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		      uint32_t len)
{
	return send_direct(ctx, dest, type, buf, len, NULL, 0, 0);
}

int shoal_connect(struct shoal_ctx *ctx, uint64_t dest, int64_t timeout_ns)
{
	struct send_wait sw = WAIT_FOREVER;
	uint32_t nw, w0, w1;
	int ret = 0;

	if (timeout_ns >= 0)
		sw.deadline = shoal__now_ns() + (uint64_t)timeout_ns;
	sw.rg = check_dest(ctx, dest, &ret);
	if (sw.rg == NULL)
		return ret;
	nw = dest_workers(sw.rg);
	if (nw == 0)
		return -EUCLEAN;
	w0 = dest_worker(nw, shoal_addr_slot(dest), shoal_ctx_self(ctx), 0, 0);
	w1 = w0 + 1;
	if (shoal_addr_slot(dest) == SHOAL_SLOT_ALL) {
		w0 = 0;
		w1 = nw;
	}
	dout_ask_rest(ctx, (uint16_t)shoal_addr_group(dest), w0, w1);
	for (uint32_t w = w0; w < w1; w++)
		if (dout_wait(ctx, (uint16_t)shoal_addr_group(dest), w, &sw, &ret) == NULL)
			return ret;
	return 0;
}

int shoal_reserve(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, uint32_t len, void **buf)
{
	const struct shoal__ltype *t;
	const struct shoal__reg_group *rg;
	struct shoal_ring_prod *p;
	struct shoal_doorbell *db;
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
		db = ctx->bell;
	} else {
		struct shoal__dout *o;

		rg = check_dest(ctx, dest, &ret);
		if (rg == NULL || shoal_addr_slot(dest) == SHOAL_SLOT_ALL) {
			ret = rg == NULL ? ret : -EINVAL;   /* zero-copy is one ring */
			goto fail;
		}
		if (dest_workers(rg) == 0) {
			ret = -EUCLEAN;
			goto fail;
		}
		o = dout_get(ctx, (uint16_t)shoal_addr_group(dest),
			     dest_worker(dest_workers(rg), shoal_addr_slot(dest),
					 shoal_ctx_self(ctx), 0, 0), &ret);
		if (o == NULL)
			goto fail;
		p = &o->p;
		db = &o->dst->in_db;
	}
	dst = reserve_in(ctx, p, NULL, len, NULL, &ret);
	if (dst == NULL)
		goto fail;
	fill_env(ctx, dst, type, len, dest, dest == SHOAL_ADDR_NONE ? SHOAL_ENV_TRY : 0, 0);
	ctx->res_p = p;
	ctx->res_db = db;
	ctx->res_routed = dest == SHOAL_ADDR_NONE;
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
	shoal_ring_commit(ctx->res_p);
	shoal_doorbell_notify(ctx->res_db);
	if (ctx->res_routed)
		COUNT(ctx, sent_routed);
	else
		COUNT(ctx, sent_direct);
	ctx->res_p = NULL;
}

/* ---- receiving ------------------------------------------------------------- */

static void invoke(struct shoal_ctx *ctx, uint16_t slot, const struct shoal_envelope *env,
		   const void *payload)
{
	struct shoal_group *g = ctx->g;
	struct shoal_msg m = { env, payload, env->len, env->type };
	struct shoal_actor *saved = ctx->cur;

	ctx->cur = &g->actors[slot];
	ctx->cur_trace = env->trace_id;
	ctx->cur_req = (env->flags & SHOAL_ENV_REQUEST) ? env : NULL;
	ctx->responded = false;
	g->desc.on_message(ctx->cur, &m);
	if (ctx->cur_req != NULL && !ctx->responded)
		shoal_respond_error(ctx, &m, -ECANCELED);   /* lifecycle rule 5 */
	ctx->cur_req = NULL;
	ctx->cur = saved;
	COUNT(ctx, handled);
}

/*
 * Forwarding between the workers of this process goes through private
 * rings, lost if the process is killed. So that every message is handled,
 * redelivered, or counted as lost, and never both redelivered and counted:
 * the copies forwarded from a record of a mailbox ring are committed only
 * after that record is released (poll_rings() ends its batch after such a
 * record), and fwd_sent is published before the commit, fwd_taken after
 * the copy is handled. A kill before the release redelivers the record and
 * drops the uncommitted copies; after it, what was committed and not
 * handled is sent - taken, counted at the next attach. The one window left
 * is a kill between the release and the store of fwd_sent, a few
 * instructions: those copies are lost uncounted.
 */
static void fwd_commit(struct shoal_ctx *ctx, unsigned w)
{
	struct shoal_group *g = ctx->g;

	if (ctx->fwd_pend[w] == 0)
		return;
	ctx->fwd_sent += ctx->fwd_pend[w];
	/* Relaxed: R1 in shoal_ring_commit() below orders it before the
	 * copies become visible, so taken never runs ahead of sent. */
	shoal_store_relaxed(&ctx->mw->fwd_sent, ctx->fwd_sent);
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
		dst = reserve_in(ctx, &ctx->fwd[w], NULL, env->len, NULL, &err);
		if (dst == NULL && err == -EAGAIN) {
			/* Waiting tries and cancels reservations: publish this
			 * ring's first (a multicast to two of its actors). */
			fwd_commit(ctx, w);
			dst = reserve_in(ctx, &ctx->fwd[w], &g->mbx->w[w].space_db, env->len,
					 &WAIT_FOREVER, &err);
		}
		if (dst == NULL) {
			COUNT(ctx, discarded);   /* only when stopping: counted, not silent */
			continue;
		}
		memcpy(dst, &e, sizeof(e));
		memcpy(dst + ENV_SIZE, payload, env->len);
		ctx->fwd_pend[w]++;
		ctx->fwd_any++;
		if (!ctx->fwd_hold)
			fwd_commit(ctx, w);
	}
}

/* Deliver to one slot: here if this worker owns it, else forward. */
static void deliver_slot(struct shoal_ctx *ctx, uint16_t slot, const struct shoal_envelope *env,
			 const void *payload)
{
	if (slot % ctx->g->n_workers == ctx->w)
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
	struct shoal_outcome out = { .kind = SHOAL_OUT_UNICAST, .n = 1, .slots = { 0 } };
	struct shoal_msg m = { env, payload, env->len, env->type };

	if (g->desc.route != NULL)
		g->desc.route(&m, &out, g->desc.user);
	switch (out.kind) {
	case SHOAL_OUT_UNICAST:
	case SHOAL_OUT_MULTICAST:
		for (uint8_t i = 0; i < out.n && i < SHOAL_OUT_MAX_SLOTS; i++) {
			if (out.slots[i] >= g->n_actors) {
				COUNT(ctx, discarded);
				continue;
			}
			deliver_slot(ctx, out.slots[i], env, payload);
			if (out.kind == SHOAL_OUT_UNICAST)
				break;
		}
		break;
	case SHOAL_OUT_BROADCAST:
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

/* Handle one record (envelope + payload) from an inbound ring. */
static void handle_record(struct shoal_ctx *ctx, const void *rec, uint32_t len)
{
	struct shoal_group *g = ctx->g;
	struct shoal_envelope env;
	const unsigned char *payload = (const unsigned char *)rec + ENV_SIZE;
	uint16_t slot;

	/* Untrusted: copy the envelope once, then validate the copy. */
	if (SHOAL_UNLIKELY(len < ENV_SIZE))
		goto malformed;
	memcpy(&env, rec, sizeof(env));
	if (SHOAL_UNLIKELY(env.len != len - ENV_SIZE || env.type == 0 ||
			   (env.flags & ~SHOAL_ENV_FLAGS)))
		goto malformed;
	if (env.flags & SHOAL_ENV_RESPONSE) {
		if (ctx->wait_rid != 0 && env.request_id == ctx->wait_rid && !ctx->wait_done) {
			COUNT(ctx, received);
			take_response(ctx, &env, payload);
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
	if (shoal_addr_group(env.dest) != g->id)
		goto malformed;
	slot = shoal_addr_slot(env.dest);
	if (slot < SHOAL_MAX_ACTORS && !(env.flags & SHOAL_ENV_ROUTED) &&
	    shoal_addr_gen(env.dest) != g->gen) {
		COUNT(ctx, stale);   /* for an actor of an earlier incarnation */
		return;
	}
	if (slot < g->n_actors)
		deliver_slot(ctx, slot, &env, payload);
	else if (slot == SHOAL_SLOT_ALL)
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
		free(d);
		n++;
	}
	return n;
}

/* One pass over every inbound ring. Returns records handled. */
#define ANY_SOURCE (-2)

/*
 * Does a wait for group `src` read ring `in`? The rings of the other
 * workers of this process always: a worker that stopped reading them could
 * stall the worker forwarding to it, which the responder may need.
 */
static inline bool reads(const struct shoal__inring *in, int src)
{
	return src == ANY_SOURCE || in->src_group == src || in->src_group == SHOAL__SRC_WORKERS;
}

/* Drain the inbound rings written by group `src` (ANY_SOURCE: all). */
static uint32_t poll_rings(struct shoal_ctx *ctx, uint32_t budget, int src)
{
	/* A handler's request polls from inside the outer pass: that inner
	 * pass only sets records aside for later (defer()), and leaves the
	 * outer record's marks and held forwards alone. */
	bool outer = !ctx->polling;
	uint32_t n = 0;

	ctx->polling = true;
	shoal__ctx_scan(ctx);
	for (uint32_t k = 0; k < ctx->n_in && n < budget; k++) {
		struct shoal__inring *in = &ctx->in[(ctx->rr + k) % ctx->n_in];
		bool mailbox = in->src_group != SHOAL__SRC_WORKERS;
		struct shoal_rec rec;
		uint32_t taken = 0;

		if (!reads(in, src))
			continue;
		if (outer)
			ctx->fwd_hold = mailbox;
		while (taken < POLL_BATCH && n + taken < budget && shoal_ring_peek(&in->c, &rec)) {
			taken++;
			if (mailbox && outer && set_aside(ctx, in, &rec))
				continue;
			handle_record(ctx, rec.data, rec.len);
			if (!mailbox)
				COUNT(ctx, fwd_taken);
			else if (outer && ctx->fwd_any > 0)
				break;   /* release this record before its copies go */
		}
		if (taken > 0) {
			shoal_ring_release(&in->c);
			if (outer && mailbox)
				shoal_store_relaxed(&ctx->mw->inflight, 0);
			ctx->released = true;
			n += taken;
		}
		/* A corrupted ring is given up, after the release above (so that
		 * the router counts exactly what is left), and the router
		 * replaces it; one branch on a field of our own handle. */
		if (SHOAL_UNLIKELY(shoal_ring_cons_error(&in->c) != 0) && !in->condemned) {
			in->condemned = true;
			shoal_ring_condemn(in->mem, in->len, SHOAL_RING_SIDE_CONS);
		}
		if (outer) {
			fwd_flush(ctx);
			ctx->fwd_hold = false;
		}
	}
	if (outer)
		ctx->polling = false;
	ctx->rr++;
	if (ctx->released) {
		/* Direct senders may sleep waiting for the space we just made. */
		ctx->released = false;
		shoal_doorbell_notify(&ctx->mw->space_db);
	}
	return n;
}

static bool rings_ready_from(struct shoal_ctx *ctx, int src)
{
	shoal__ctx_scan(ctx);
	for (uint32_t k = 0; k < ctx->n_in; k++)
		if (reads(&ctx->in[k], src) && !shoal_ring_empty(&ctx->in[k].c))
			return true;
	return stop_flagged(ctx->g);
}

static bool rings_ready(void *arg)
{
	return rings_ready_from(arg, ANY_SOURCE);
}

int shoal_poll(struct shoal_ctx *ctx, uint32_t budget, int64_t timeout_ns)
{
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : shoal__now_ns() + (uint64_t)timeout_ns;
	uint32_t n;

	if (budget == 0)
		budget = UINT32_MAX;
	for (;;) {
		n = handle_deferred(ctx, budget);
		n += poll_rings(ctx, budget - n, ANY_SOURCE);
		if (n > 0)
			return (int)n;
		if (stop_flagged(ctx->g))
			return -ESHUTDOWN;   /* stopped, and nothing left to drain */
		uint64_t now = shoal__now_ns();

		if (now >= deadline)
			return 0;
		/* Before each sleep slice, not on an empty poll: a dead
		 * router sets the stop flag that the next pass returns on. */
		if (shoal__router_gone(ctx->g))
			continue;
		shoal_doorbell_poll_wait(&ctx->mw->in_db, ctx->g->spin_ns, rings_ready, ctx,
					 (int64_t)(deadline - now < IDLE_SLICE_NS ? deadline - now :
						   IDLE_SLICE_NS));
	}
}

/* ---- request / response ------------------------------------------------------ */

/*
 * A request in flight. The response comes direct, on a ring the responder's
 * group writes, so only those rings (and those of this process's other
 * workers, see reads()) are drained while it waits: their other messages
 * are set aside for later, and every other ring stays as it is,
 * back-pressuring its senders, so the worker's memory does not grow with
 * their traffic.
 */
struct req_wait {
	struct shoal_ctx *ctx;
	const struct shoal__reg_group *rg;
	uint32_t gen;
	int group;        /* the responder's */
};

static bool responder_gone(const struct req_wait *rw)
{
	/* Relaxed: the router updates these when the process dies or comes
	 * back, and rings our doorbell right after. */
	return shoal_load_relaxed(&rw->rg->state) != SHOAL_GROUP_RUNNING ||
	       shoal_load_relaxed(&rw->rg->gen) != rw->gen;
}

static bool response_ready(void *arg)
{
	struct req_wait *rw = arg;

	return rings_ready_from(rw->ctx, rw->group) || responder_gone(rw);
}

int shoal_request(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		  uint32_t len, int64_t timeout_ns, struct shoal_reply *reply)
{
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : shoal__now_ns() + (uint64_t)timeout_ns;
	struct req_wait rw = { ctx, NULL, 0, 0 };
	struct send_wait sw = { NULL, UINT64_MAX, true, 0 };
	int dg = shoal_addr_group(dest), ret;
	uint64_t rid;

	if (ctx->wait_rid != 0)
		return -EDEADLK;   /* one request at a time per worker */
	if (reply == NULL || dg < 0 || dg >= SHOAL_MAX_GROUPS)
		return -EINVAL;
	rw.rg = &ctx->g->reg.groups[dg];
	rw.group = dg;
	rw.gen = shoal_load_relaxed(&rw.rg->gen);
	if (shoal_load_relaxed(&rw.rg->state) != SHOAL_GROUP_RUNNING)
		return shoal_load_relaxed(&rw.rg->state) == SHOAL_GROUP_FAILED ? -EHOSTDOWN :
										-EOWNERDEAD;
	rid = (uint64_t)ctx->w << 48 | (ctx->next_rid++ & ((UINT64_C(1) << 48) - 1));
	/* Waiting for room in the responder's ring counts against the
	 * timeout and ends with the responder's incarnation, as the wait for
	 * the response below does. */
	sw.deadline = deadline;
	sw.gen = rw.gen;
	ret = send_direct(ctx, dest, type, buf, len, &sw, SHOAL_ENV_REQUEST, rid);
	if (ret < 0)
		return ret;
	ctx->wait_rid = rid;
	ctx->wait_reply = reply;
	ctx->wait_done = false;
	for (;;) {
		uint64_t now;

		poll_rings(ctx, UINT32_MAX, rw.group);
		if (ctx->wait_done) {
			ret = ctx->wait_status;
			break;
		}
		if (responder_gone(&rw)) {
			ret = -EOWNERDEAD;
			break;
		}
		now = shoal__now_ns();
		if (now >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		/* Without a router nothing tells us the responder died: a
		 * request with no timeout would wait forever. */
		if (shoal__router_gone(ctx->g)) {
			ret = -ESHUTDOWN;
			break;
		}
		shoal_doorbell_poll_wait(&ctx->mw->in_db, ctx->g->spin_ns, response_ready, &rw,
					 (int64_t)(deadline - now < SLEEP_SLICE_NS ? deadline - now :
						   SLEEP_SLICE_NS));
	}
	ctx->wait_rid = 0;
	ctx->wait_reply = NULL;
	return ret;
}

int shoal_respond(struct shoal_ctx *ctx, const struct shoal_msg *req, uint32_t type,
		  const void *buf, uint32_t len)
{
	struct send_wait sw = WAIT_FOREVER;
	int ret;

	if (req == NULL || !(req->env->flags & SHOAL_ENV_REQUEST))
		return -EINVAL;
	ret = send_direct(ctx, req->env->sender, type, buf, len, &sw, SHOAL_ENV_RESPONSE,
			  req->env->request_id);
	if (req->env == ctx->cur_req)
		ctx->responded = true;
	return ret;
}

int shoal_respond_error(struct shoal_ctx *ctx, const struct shoal_msg *req, int err)
{
	int32_t e = err < 0 ? err : -EINVAL;
	struct send_wait sw = WAIT_FOREVER;
	int ret;

	if (req == NULL || !(req->env->flags & SHOAL_ENV_REQUEST))
		return -EINVAL;
	ret = send_direct(ctx, req->env->sender, req->env->type, &e, sizeof(e), &sw,
			  SHOAL_ENV_RESPONSE | SHOAL_ENV_ERROR, req->env->request_id);
	if (req->env == ctx->cur_req)
		ctx->responded = true;
	return ret;
}
