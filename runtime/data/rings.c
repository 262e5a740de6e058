/* SPDX-License-Identifier: MIT */
/*
 * A worker's ring table (struct shoal_ctx): set up at attach from its
 * mailbox (uplink, inbound rings, in-process forwarding rings), grown when
 * a new direct sender's ring appears in the directory, the uplink renewed
 * when the router replaced a condemned one, and the per-record crash
 * bookkeeping that sets a message aside after SHOAL__CRASHES_MAX deaths.
 * Part of the data plane: it reads the mailbox the router wrote and never
 * calls the router.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>

#include "runtime/data/worker.h"
#include "shm/util.h"

/* ---- rings of this worker ---------------------------------------------------- */

/* The key of a ring's ready hint, as its producer computes it
 * (runtime/layout.h); -1 for a ring of no hint. From the shared directory:
 * a wrong one only narrows a look wrongly, and the next look at every ring
 * finds what it missed. */
static int64_t ring_key(const struct shoal_seg_tag *tag)
{
	if (tag->role == SHOAL__RING_DISPATCHED && tag->b < SHOAL_MAX_NODES)
		return shoal__ready_key_dispatcher(tag->b);
	if (tag->role != SHOAL__RING_DIRECT || tag->b >= SHOAL_MAX_GROUPS ||
	    tag->c >= SHOAL_MAX_WORKERS)
		return -1;
	return shoal__ready_key((uint16_t)tag->b, tag->c);
}

/* Append ring in[i] to the list of its hint. */
static void hint_link(struct shoal_ctx *ctx, uint32_t i, uint32_t key)
{
	uint32_t b = key % SHOAL_DOORBELL_READY_HINTS;

	ctx->in[i].hint_next = 0;
	if (ctx->hint_last[b] == 0)
		ctx->hint_first[b] = i + 1;
	else
		ctx->in[ctx->hint_last[b] - 1].hint_next = i + 1;
	ctx->hint_last[b] = i + 1;
}

static int add_inring(struct shoal_ctx *ctx, void *mem, uint64_t len, int src_group, int64_t key)
{
	struct shoal__inring *in = shoal__grow(ctx->in, &ctx->cap_in, ctx->n_in, sizeof(*in), 8);

	if (in == NULL)
		return -ENOMEM;
	ctx->in = in;
	ctx->hot = NULL;   /* into the array it may have moved */
	/* Given up by its reader (a process of ours before): the router counts
	 * what it holds as lost, and a replacement follows in the directory.
	 * A ring only its producer gave up is still ours to drain, as the
	 * worker that held it when it was condemned does: the router counts
	 * it only once its reader gives up too, so skipping it here would
	 * lose what it holds without a count. */
	if (shoal_ring_condemned(mem, len) & SHOAL_RING_SIDE_CONS)
		return -EUCLEAN;
	if (shoal_ring_cons_attach(&ctx->in[ctx->n_in].c, mem, len, NULL) < 0) {
		/* The router replaces a ring it finds condemned. */
		shoal_ring_condemn(mem, len, SHOAL_RING_SIDE_CONS);
		return -EUCLEAN;
	}
	if (shoal_ring_cons_skipped(&ctx->in[ctx->n_in].c) != 0) {
		ctx->lost_corrupt += shoal_ring_cons_skipped(&ctx->in[ctx->n_in].c);
		/* Relaxed: the worker is the only writer of its counter line. */
		shoal_store_relaxed(&ctx->mw->lost_corrupt, ctx->lost_corrupt);
	}
	ctx->in[ctx->n_in].mem = mem;
	ctx->in[ctx->n_in].len = len;
	ctx->in[ctx->n_in].condemned = false;
	ctx->in[ctx->n_in].src_group = src_group;
	ctx->in[ctx->n_in].hint_next = 0;
	ctx->in[ctx->n_in].look = SHOAL_DOORBELL_READY_SET;
	if (key >= 0) {
		hint_link(ctx, ctx->n_in, (uint32_t)key);
		ctx->in[ctx->n_in].look = shoal_doorbell_ready_hint((uint32_t)key);
	}
	ctx->n_in++;
	return 0;
}

/*
 * Who writes inbound ring `tag` of ours (runtime/layout.h): the group of a
 * direct sender, or -1 for a dispatcher. The mailbox is writable by every
 * direct sender, so the group is checked like any shared value.
 */
static int ring_source(const struct shoal_seg_tag *tag)
{
	return tag->role == SHOAL__RING_DIRECT && tag->b < SHOAL_MAX_GROUPS ? (int)tag->b : -1;
}

/*
 * Attach the inbound rings the router added to our mailbox since the last
 * scan (those tagged as read by this worker): shoal__ctx_scan() calls this
 * when the directory's count moved.
 */
void shoal__ctx_scan_new(struct shoal_ctx *ctx)
{
	uint32_t count = shoal_seg_dir_count(&ctx->g->mbx_seg);

	for (uint32_t i = ctx->dir_seen; i < count; i++) {
		struct shoal_seg_region r;
		void *mem;

		if (shoal_seg_region_at(&ctx->g->mbx_seg, i, &r) < 0)
			continue;   /* a damaged entry: the router replaces the mailbox */
		if (r.kind != SHOAL_SEG_KIND_RING || r.tag.a != ctx->w ||
		    (r.tag.role != SHOAL__RING_DISPATCHED && r.tag.role != SHOAL__RING_DIRECT))
			continue;
		mem = shoal_seg_ptr(&ctx->g->mbx_seg, r.off, r.len, 128);
		if (mem == NULL || add_inring(ctx, mem, r.len, ring_source(&r.tag), ring_key(&r.tag)) < 0)
			continue;   /* a corrupted ring is skipped, not trusted */
	}
	ctx->dir_seen = count;
}

/* Attach the uplink of generation `gen` to *p. */
static int uplink_attach(struct shoal_ctx *ctx, uint32_t gen, struct shoal_ring_prod *p,
			 void **mem, uint64_t *len, struct shoal_err *err)
{
	struct shoal_seg_tag tag = { .role = SHOAL__RING_UPLINK, .a = ctx->w, .gen = gen };
	struct shoal_seg_region r;

	if (shoal_seg_find_tag(&ctx->g->mbx_seg, SHOAL_SEG_KIND_RING, &tag, &r) < 0 ||
	    (*mem = shoal_seg_ptr(&ctx->g->mbx_seg, r.off, r.len, 128)) == NULL)
		return shoal__fail(err, -EUCLEAN, "mailbox has no uplink ring for worker %u "
				   "(generation %u)", ctx->w, gen);
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
	/* A4: pairs with R4 in damage.c watch_once(). */
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
 * What the previous process of this group held in its own memory and did
 * not handle died with it: copies forwarded between its workers (their
 * private rings) and records deferred during a request (poll.c defer()).
 * Count them (DESIGN invariant 6). Runs at attach, before any worker, when no other process of the group
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

bool shoal__set_aside_suspect(struct shoal_ctx *ctx, const struct shoal_rec *rec)
{
	ctx->suspect = 0;   /* it comes round once */
	if (ctx->suspect_crashes < SHOAL__CRASHES_MAX)
		return false;
	keep_aside(ctx, rec);
	COUNT(ctx, set_aside);
	return true;
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
	ctx->lat = &g->mbx->lat[w];
	ctx->bell = &g->bell->disp[g->reg.groups[g->id].dispatcher % SHOAL_MAX_NODES];
	ctx->next_rid = 1;
	ctx->ok_env.len = UINT32_MAX;   /* handle_record()'s memo: empty */
	ctx->trace_base = (uint64_t)(g->id + 1u) << 48 | (uint64_t)w << 40;
	shoal_doorbell_init(&ctx->link_db);
	shoal_wake_mod_init(&ctx->wmod, g->wake_deadline_ns);
	/* An empty poll reads one summary word, not every ring (poll.c). */
	shoal_doorbell_ready_on(&ctx->mw->in_db);
	/* Our publishes may skip F2 while their consumer polls; without the
	 * kernel's barrier they fence, as before (shm/doorbell.h). */
	(void)shoal_doorbell_asym_join();
	ctx->idle.spin_max_ns = g->spin_ns;
	ctx->idle.spin_ns = g->spin_ns;
	ctx->idle.yield_ns = g->yield_ns;
	/* A4: pairs with R4 in damage.c watch_once(). */
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
	if (w == 0)
		count_lost_forwards(g);
	if (g->n_workers < 2)
		return 0;
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
		ret = add_inring(ctx, mem, len, SHOAL__SRC_WORKERS, -1);
		if (ret < 0)
			return ret;
	}
	return 0;
}

void shoal__ctx_fini(struct shoal_ctx *ctx)
{
	struct shoal__deferred *d = ctx->def_head;
	uint64_t dropped = 0;

	/* Deferred records never handled (a detach during a request): lost,
	 * counted now, so the next attach does not count them again. */
	while (d != NULL) {
		struct shoal__deferred *next = d->next;

		free(d);
		d = next;
		dropped++;
	}
	ctx->def_head = ctx->def_tail = NULL;
	if (dropped > 0)
		/* Relaxed: our own worker block; no process of the group runs
		 * count_lost_forwards() while this one is attached. */
		shoal_store_relaxed(&ctx->mw->fwd_lost,
				    shoal_load_relaxed(&ctx->mw->fwd_lost) + dropped);
	for (int i = 0; i < SHOAL_MAX_GROUPS; i++)
		free(shoal_load_relaxed(&ctx->dout[i]));
	free(ctx->in);
	free(ctx->fwd);
}

/* The same, or a dead router (group.c: a clock read, and a poll() every
 * 50 ms): once per sleep slice, never per empty poll or spin. */
bool shoal__stop_requested(struct shoal_group *g)
{
	return shoal__stop_flagged(g) || shoal__router_gone(g);
}
