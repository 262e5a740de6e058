/* SPDX-License-Identifier: MIT */
/*
 * Damage (DESIGN invariant 10): condemned rings and damaged mailboxes, and
 * the watch thread that looks for them.
 *
 * A ring is condemned by whichever side found it corrupted (its handle went
 * into the sticky -EUCLEAN state, or it would not attach): the dispatchers
 * for the uplinks they read and the inbound rings they write, the workers
 * for the others (see shoal_ring_condemn()). The watch thread looks for the
 * marks on every ring in service, reports each once (counter and log line),
 * takes the ring out of service and gives its owner a fresh one:
 *
 *   inbound ring  a new one of the same tag with gen + 1 (in.W.dD.rN); the
 *                 dispatcher moves to it at the next publish; the worker
 *                 finds it in its directory and reads both (the old one
 *                 until it is empty, if it still can).
 *   uplink        a new one with gen + 1 (up.W.rN); the worker moves to it
 *                 when the router has published it (mw->up_gen, set after
 *                 the grace period).
 *
 * What a condemned ring held is counted as lost exactly once, by the last
 * side to let go of it: the router for an inbound ring whose worker gave up
 * on it, or for an uplink whose process is gone; the worker itself for an
 * uplink it wrote to until it moved (SHOAL_RING_SIDE_SETTLED).
 *
 * The mailbox itself (header, directory, the file's name) is compared with
 * what the router wrote; a damaged one is reported and replaced the next
 * time its group attaches, with what it held counted.
 *
 * Ordering guarantees:
 *   R4 (up_gen store-release, in watch_once()) pairs with A4 in rings.c and
 *      send.c: a worker that sees the new generation finds the new uplink in
 *      its directory, and no dispatcher reads the old one any more.
 *
 * Everything here runs under router->lock, in the watch thread or in the
 * control thread (attach, leave), never in a dispatcher.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shoal/doorbell.h>

#include "runtime/control/router_impl.h"
#include "shm/util.h"

#define WATCH_TICK_NS 50000000      /* the watch thread looks for damage this often */
#define WATCH_MAILBOX_TICKS 10      /* and checks whole mailboxes every 10 looks */

/*
 * Messages a retired ring still holds: what its producer committed less what
 * its consumer took, from their own counters. Not bounded by what the ring's
 * bytes can hold: a head moved forward by garbage, within bounds, makes the
 * producer write up to a ring's worth over records never read (one more for
 * each such write before the consumer releases again), and every one of
 * those is lost. Garbage in the counters themselves can only be told from
 * that by a bound that would cut real losses, so the count errs towards
 * counting (docs/design.md, "Known limits").
 */
static uint64_t ring_left(const void *mem, uint64_t len)
{
	uint64_t in, out;

	if (shoal_ring_records(mem, len, &in, &out) < 0 || in <= out)
		return 0;
	return in - out;
}

static void count_lost(struct shoal_router *r, int g, uint64_t n)
{
	struct shoal__reg_group *rg = &r->regg[g];

	/* Relaxed, here and for the other damage counters: the router's watch
	 * and control threads write them under router->lock; tools read them. */
	shoal_store_relaxed(&rg->lost_corrupt, shoal_load_relaxed(&rg->lost_corrupt) + n);
}

static void count_replaced(struct shoal_router *r, int g)
{
	struct shoal__reg_group *rg = &r->regg[g];

	shoal_store_relaxed(&rg->replaced, shoal_load_relaxed(&rg->replaced) + 1);
}

static void count_damage(struct shoal_router *r, int g, bool replaced)
{
	struct shoal__reg_group *rg = &r->regg[g];

	shoal_store_relaxed(&rg->damaged, shoal_load_relaxed(&rg->damaged) + 1);
	if (replaced)
		count_replaced(r, g);
}

__attribute__((format(printf, 3, 4)))
static void damage_log(const struct shoal_router *r, int g, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	/* The one place the router writes to stderr: damage must be seen even
	 * by a program that never reads a counter, and it is rare and cold. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "shoal router %s: group %s: %s\n", r->system, r->groups[g].name, msg);
}

static int retire(struct shoal_router *r, const struct shoal__retired *t)
{
	struct shoal__retired *retired = shoal__grow(r->retired, &r->cap_retired, r->n_retired,
						     sizeof(*retired), 16);

	if (retired == NULL)
		return -ENOMEM;
	r->retired = retired;
	r->retired[r->n_retired] = *t;
	r->retired[r->n_retired++].state = SHOAL__RETIRED_OPEN;
	return 0;
}

uint64_t shoal__ring_drain_dead(void *mem, uint64_t len)
{
	unsigned side = shoal_ring_condemned(mem, len);
	struct shoal_ring_cons c;
	struct shoal_rec rec;
	uint64_t in, out, n = 0;

	if (side & SHOAL_RING_SIDE_SETTLED)
		return 0;   /* its producer counted it */
	/* Given up by its reader before: its counters say what it holds. A
	 * producer that finds out later counts it again (errs towards
	 * counting, docs/design.md "Known limits"). */
	if ((side & SHOAL_RING_SIDE_CONS) || shoal_ring_cons_attach(&c, mem, len, NULL) < 0) {
		n = ring_left(mem, len);
		shoal_ring_condemn(mem, len, SHOAL_RING_SIDE_CONS);
		return n;
	}
	/* Taken as its reader would, so that its counters stay exact for a
	 * producer that counts what it writes after this (send.c
	 * dout_condemned()); at most what it held when we came, so that a
	 * producer writing on cannot keep us here. */
	if (shoal_ring_records(mem, len, &in, &out) < 0 || in < out)
		in = out = 0;
	while (n < in - out && shoal_ring_peek(&c, &rec))
		n++;
	shoal_ring_release(&c);
	if (shoal_ring_cons_error(&c) != 0)
		n += ring_left(mem, len);
	shoal_ring_condemn(mem, len, SHOAL_RING_SIDE_CONS);
	/* What attach found behind the head: out of the counters already. */
	return n + shoal_ring_cons_skipped(&c);
}

/*
 * Count what retired rings hold once nobody else will. Called after a
 * publish (so no dispatcher touches them any more) and when a group's
 * process leaves (`gone`: group g has no process; -1 for none).
 */
void shoal__settle_retired(struct shoal_router *r, int gone)
{
	for (uint32_t i = 0; i < r->n_retired; i++) {
		struct shoal__retired *t = &r->retired[i];
		unsigned side;

		if (t->state == SHOAL__RETIRED_DONE)
			continue;
		side = shoal_ring_condemned(t->mem, t->len);
		if (t->direct) {
			/* We took what it held when we retired it: what is left was
			 * written since, and is final once its writer is gone. */
			if (side & SHOAL_RING_SIDE_SETTLED) {
				t->state = SHOAL__RETIRED_DONE;
			} else if ((int)t->src == gone || !r->groups[t->src].used ||
				   r->groups[t->src].conn < 0 ||
				   shoal_load_relaxed(&r->regg[t->src].gen) != t->src_gen) {
				count_lost(r, t->group, ring_left(t->mem, t->len));
				t->state = SHOAL__RETIRED_DONE;
			}
			continue;
		}
		if (!t->uplink) {
			/* Its worker reads it until empty, unless it gave up on it. */
			if (side & SHOAL_RING_SIDE_CONS) {
				count_lost(r, t->group, ring_left(t->mem, t->len));
				t->state = SHOAL__RETIRED_DONE;
			}
			continue;
		}
		if (side & SHOAL_RING_SIDE_SETTLED) {
			t->state = SHOAL__RETIRED_DONE;   /* the worker counted it */
		} else if (t->group == gone || r->groups[t->group].conn < 0) {
			/* Nobody writes it any more: its counters are final. */
			count_lost(r, t->group, ring_left(t->mem, t->len));
			t->state = SHOAL__RETIRED_DONE;
		} else {
			t->state = SHOAL__RETIRED_WORKER;
		}
	}
}

/*
 * Replace worker w's uplink (d < 0) or inbound ring from dispatcher d, which
 * `side` condemned. The caller publishes. Returns 0, or a negative errno when
 * there is no room (the mailbox is then replaced at the next attach; an
 * uplink's producer is told, SHOAL__UP_GEN_NONE, and its sends fail).
 */
static int replace_ring(struct shoal_router *r, int g, unsigned w, int d, unsigned side)
{
	struct shoal__group_slot *s = &r->groups[g];
	struct shoal__ring_ref *ref = d < 0 ? &s->up[w] : &s->in[w][d];
	struct shoal__ring_ref fresh = { .gen = ref->gen + 1 };
	struct shoal_seg_tag old_tag = shoal__ring_tag(w, d, ref->gen);
	struct shoal_seg_tag tag = shoal__ring_tag(w, d, fresh.gen);
	char old[SHOAL_SEG_REGION_NAME_MAX], name[SHOAL_SEG_REGION_NAME_MAX];
	struct shoal_err err = { { 0 } };
	int ret;

	shoal__ring_name(old, &old_tag);
	(void)shoal_ring_check(ref->mem, ref->len, &(struct shoal_ring_stats){ 0 }, &err);
	shoal__ring_name(name, &tag);
	ret = shoal__alloc_ring(s, &tag, d < 0 ? r->up_cap : s->in_cap, &fresh);
	if (ret == 0)
		ret = retire(r, &(struct shoal__retired){ .group = (uint16_t)g,
							  .worker = (uint16_t)w, .uplink = d < 0,
							  .mem = ref->mem, .len = ref->len });
	if (ret < 0) {
		s->mbx_bad = true;
		damage_log(r, g, "ring %s is corrupted (condemned by its %s%s%s); no room for a "
			   "new one (%s): the mailbox is replaced when the group restarts", old,
			   side & SHOAL_RING_SIDE_CONS ? "consumer" : "producer",
			   err.msg[0] ? ": " : "", err.msg, strerror(-ret));
		/* Never look at it again: it stays condemned. */
		ref->mem = NULL;
		if (d < 0) {
			/* Its producer must not wait for a replacement that
			 * will not come: tell it (R4 as for a new uplink, the
			 * publish loop of watch_once() then leaves it). */
			ref->gen = SHOAL__UP_GEN_NONE;
			shoal_store_release(&s->hdr->w[w].up_gen, SHOAL__UP_GEN_NONE);
			shoal_doorbell_notify(&s->hdr->w[w].up_db);
		}
		/* Counted after what it tells is in place: a reader of the
		 * counter then finds the producer told. */
		count_damage(r, g, false);
		return ret;
	}
	damage_log(r, g, "ring %s is corrupted (condemned by its %s%s%s); quarantined, replaced "
		   "by %s", old, side & SHOAL_RING_SIDE_CONS ? "consumer" : "producer",
		   err.msg[0] ? ": " : "", err.msg, name);
	*ref = fresh;
	count_damage(r, g, true);
	return 0;
}

/* The capacity of a direct ring from group src_g into group g: the
 * bridge's (shoal__router_bridge_rings()) when either is this host's
 * bridge, else the router's direct capacity. */
static uint32_t direct_cap(const struct shoal_router *r, int g, int src_g)
{
	/* Relaxed: the router's own word (shoal__router_set_bridge()). */
	uint32_t b = shoal_load_relaxed(&r->reg->bridge);

	if (r->bridge_cap != 0 && b != 0 && ((uint32_t)g == b - 1 || (uint32_t)src_g == b - 1))
		return r->bridge_cap;
	return r->direct_cap;
}

/*
 * The direct ring from worker src_w of group src_g into worker w of group g
 * in service, named in `name`: the one of the highest gen the router
 * allocated, a new one first if none exists or the latest was condemned.
 * Only the ring's producer asks for it (one producer per ring), so a
 * condemned ring it did not settle was left by an earlier process of it:
 * what it holds is counted here.
 */
int shoal__direct_ring(struct shoal_router *r, int g, unsigned w, int src_g, unsigned src_w,
		       char name[SHOAL_SEG_REGION_NAME_MAX])
{
	struct shoal__group_slot *s = &r->groups[g];
	struct shoal_seg_tag tag = {
		.role = SHOAL__RING_DIRECT, .a = w, .b = (uint32_t)src_g, .c = src_w,
	};
	const struct shoal_seg_region *last = NULL;
	unsigned side = 0;
	int ret;

	for (;; tag.gen++) {
		const struct shoal_seg_region *e = NULL;

		for (uint32_t i = 0; i < s->n_dir && e == NULL; i++)
			if (s->dir[i].kind == SHOAL_SEG_KIND_RING &&
			    shoal_seg_tag_equal(&s->dir[i].tag, &tag))
				e = &s->dir[i];
		if (e == NULL)
			break;
		last = e;
	}
	shoal__ring_name(name, &tag);
	if (last != NULL) {
		void *mem = (unsigned char *)s->mbx.base + last->off;

		side = shoal_ring_condemned(mem, last->len);
		if (side == 0) {
			snprintf(name, SHOAL_SEG_REGION_NAME_MAX, "%s", last->name);
			return 0;
		}
		if ((side & SHOAL_RING_SIDE_CONS) && !(side & SHOAL_RING_SIDE_SETTLED))
			count_lost(r, g, ring_left(mem, last->len));
	}
	ret = shoal__alloc_ring(s, &tag, direct_cap(r, g, src_g), NULL);
	if (last != NULL) {
		count_damage(r, g, ret == 0);
		damage_log(r, g, "ring %s is corrupted (condemned by its %s); %s %s", last->name,
			   side & SHOAL_RING_SIDE_CONS ? "consumer" : "producer",
			   ret == 0 ? "quarantined, replaced by" : "no room to replace it:",
			   ret == 0 ? name : strerror(-ret));
	}
	return ret;
}

/* Compare a mailbox with what the router wrote into it. */
static int mailbox_damage(struct shoal_router *r, int g, struct shoal_err *err)
{
	struct shoal__group_slot *s = &r->groups[g];
	const struct shoal__mbx_hdr *h = s->hdr;
	int ret = shoal_seg_verify(&s->mbx, err);

	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < s->n_dir; i++) {
		struct shoal_seg_region e;

		if (shoal_seg_region_at(&s->mbx, i, &e) < 0 || e.kind != s->dir[i].kind ||
		    e.off != s->dir[i].off || e.len != s->dir[i].len ||
		    !shoal_seg_tag_equal(&e.tag, &s->dir[i].tag) ||
		    strcmp(e.name, s->dir[i].name) != 0)
			return shoal__fail(err, -EUCLEAN, "mailbox directory entry %u (%s) was "
					   "changed", i, s->dir[i].name);
	}
	if (h->magic != SHOAL__MBX_MAGIC || h->version != SHOAL__LAYOUT_VERSION ||
	    h->group != g || h->n_workers != s->n_workers || h->n_actors != s->n_actors)
		return shoal__fail(err, -EUCLEAN, "mailbox header damaged (magic 0x%08x, version "
				   "%u, group %u, %u workers, %u actors)", h->magic, h->version,
				   h->group, h->n_workers, h->n_actors);
	return 0;
}

/*
 * Direct ring `e` of group g's old mailbox (mapped at `base`), given up by
 * shoal__ring_drain_dead(): its producer, if its process still runs, may
 * write on until it finds that out (when the ring is full, send.c
 * dout_condemned() counts what it wrote since). Kept to count that, should
 * its process end first. A producer that cannot be retired (no memory) is
 * left to count it alone.
 */
static void retire_direct(struct shoal_router *r, int g, const struct shoal_seg_region *e,
			  void *base)
{
	uint32_t src = e->tag.b;

	if (src >= r->n_groups || !r->groups[src].used || r->groups[src].conn < 0)
		return;
	(void)retire(r, &(struct shoal__retired){
		.group = (uint16_t)g, .worker = (uint16_t)e->tag.c, .direct = true,
		.src = (uint16_t)src, .src_gen = shoal_load_relaxed(&r->regg[src].gen),
		.mem = (unsigned char *)base + e->off, .len = e->len });
}

/*
 * Give group g a new mailbox, keeping the old one mapped (dispatchers may
 * still hold handles into it) but unlinked. What its rings held is counted
 * as lost. Called with no process attached to the group.
 */
static int replace_mailbox(struct shoal_router *r, int g, struct shoal_err *err)
{
	struct shoal__group_slot *s = &r->groups[g];
	struct shoal__mbx_hdr *old_hdr = s->hdr;
	struct shoal__ring_ref old_up[SHOAL_MAX_WORKERS], old_in[SHOAL_MAX_WORKERS][SHOAL_MAX_NODES];
	struct shoal_seg *old, keep = s->mbx;
	struct shoal_seg_region *old_dir = s->dir;
	uint32_t n_old_dir = s->n_dir;
	bool counters = s->hdr->magic == SHOAL__MBX_MAGIC;
	uint64_t lost = 0;
	int ret;

	old = realloc(r->old_mbx, (r->n_old_mbx + 1) * sizeof(*old));
	if (old == NULL)
		return -ENOMEM;
	r->old_mbx = old;
	s->dir = NULL;
	s->cap_dir = 0;
	shoal_seg_unlink(keep.path);
	memcpy(old_up, s->up, sizeof(old_up));
	memcpy(old_in, s->in, sizeof(old_in));
	ret = shoal__create_mailbox(r, s, (uint16_t)g, err);
	if (ret < 0) {
		/* Still mapped: nothing changed for the dispatchers. The name is
		 * gone, so the group cannot attach until a later try succeeds. */
		s->mbx = keep;
		s->hdr = old_hdr;
		memcpy(s->up, old_up, sizeof(old_up));
		memcpy(s->in, old_in, sizeof(old_in));
		free(s->dir);
		s->dir = old_dir;
		s->n_dir = n_old_dir;
		s->cap_dir = n_old_dir;
		s->mbx_bad = true;
		return ret;
	}
	r->old_mbx[r->n_old_mbx++] = keep;
	/* The workers' counters go on, when the old header can still be told
	 * apart from garbage; the router's own fields (up_gen) start over. */
	for (unsigned w = 0; counters && w < s->n_workers; w++) {
		struct shoal__mbx_worker *n = &s->hdr->w[w], *o = &old_hdr->w[w];

		/* Relaxed: counters, single writers, read for display. */
#define CARRY(field) shoal_store_relaxed(&n->field, shoal_load_relaxed(&o->field))
		CARRY(sent_routed);
		CARRY(sent_direct);
		CARRY(received);
		CARRY(handled);
		CARRY(try_failed);
		CARRY(stale);
		CARRY(malformed);
		CARRY(discarded);
		CARRY(lost_corrupt);
		CARRY(up_no_route);
		CARRY(up_dropped_full);
		CARRY(up_malformed);
#undef CARRY
		/* The latency histogram too: the tools' percentiles and top's
		 * rates read it as one series. */
		for (unsigned b = 0; b < SHOAL__LAT_BUCKETS; b++)
			shoal_store_relaxed(&s->hdr->lat[w].bucket[b],
					    shoal_load_relaxed(&old_hdr->lat[w].bucket[b]));
		shoal_store_relaxed(&s->hdr->lat[w].sum_ns,
				    shoal_load_relaxed(&old_hdr->lat[w].sum_ns));
		shoal_store_relaxed(&s->hdr->lat[w].out_of_range,
				    shoal_load_relaxed(&old_hdr->lat[w].out_of_range));
	}
	/* Count what the old rings hold only once no dispatcher writes them. */
	ret = shoal__publish(r, err);
	for (uint32_t i = 0; i < n_old_dir; i++) {
		void *mem = (unsigned char *)keep.base + old_dir[i].off;
		bool counted = false;

		for (uint32_t k = 0; k < r->n_retired; k++)
			counted |= r->retired[k].mem == mem &&
				   r->retired[k].state == SHOAL__RETIRED_DONE;
		if (old_dir[i].kind != SHOAL_SEG_KIND_RING || counted)
			continue;
		/* A direct sender may still write into its ring here: take what
		 * it holds, and give the ring up so that the sender finds out. */
		lost += old_dir[i].tag.role == SHOAL__RING_DIRECT ?
				shoal__ring_drain_dead(mem, old_dir[i].len) :
				ring_left(mem, old_dir[i].len);
	}
	for (uint32_t i = 0; i < r->n_retired; i++)
		if (r->retired[i].group == g)
			r->retired[i].state = SHOAL__RETIRED_DONE;   /* in the old mailbox */
	for (uint32_t i = 0; i < n_old_dir; i++)
		if (old_dir[i].kind == SHOAL_SEG_KIND_RING &&
		    old_dir[i].tag.role == SHOAL__RING_DIRECT)
			retire_direct(r, g, &old_dir[i], keep.base);
	free(old_dir);
	/* Senders waiting for room in the old rings find them given up. */
	for (unsigned w = 0; w < s->n_workers; w++)
		shoal_doorbell_notify(&old_hdr->w[w].space_db);
	/* Only the replacement: whoever set mbx_bad counted the damage. */
	count_replaced(r, g);
	count_lost(r, g, lost);
	damage_log(r, g, "mailbox replaced by a new one; %llu queued messages lost",
		   (unsigned long long)lost);
	return ret;
}

/*
 * Before a process attaches to group g: a damaged mailbox is replaced now,
 * while no process uses it. Lock held. Returns 0, or a negative errno (with
 * `err` set) when the replacement failed: the group cannot attach.
 */
int shoal__mailbox_repair(struct shoal_router *r, int g, struct shoal_err *err)
{
	struct shoal__group_slot *s = &r->groups[g];
	struct shoal_err why = { { 0 } };

	if (!s->mbx_bad && mailbox_damage(r, g, &why) < 0) {
		s->mbx_bad = true;
		count_damage(r, g, false);
		damage_log(r, g, "%s", why.msg);
	}
	return s->mbx_bad ? replace_mailbox(r, g, err) : 0;
}

/*
 * Whether a run-time group whose process left may be freed: once the
 * dispatchers took every record its uplinks in service hold (a condemned one
 * is counted, not read), or once they took none for RELEASE_STALL_NS. A
 * record parked on a full destination keeps its uplink; a destination that
 * never drains would keep the group's slot and mailbox for ever, so after
 * that long without progress what its uplinks hold is counted
 * (lost_released, registry.c count_released()) and the group freed.
 */
#define RELEASE_STALL_NS (5 * UINT64_C(1000000000))

static bool release_due(struct shoal__group_slot *s, uint64_t now)
{
	uint64_t in, out, taken = 0;
	bool drained = true;

	for (unsigned w = 0; w < s->n_workers; w++) {
		const struct shoal__ring_ref *ref = &s->up[w];

		if (ref->mem == NULL || shoal_ring_condemned(ref->mem, ref->len) != 0 ||
		    shoal_ring_records(ref->mem, ref->len, &in, &out) < 0)
			continue;
		taken += out;
		drained = drained && in <= out;
	}
	if (drained)
		return true;
	if (s->stall_ns == 0 || taken != s->stall_out) {
		s->stall_ns = now;
		s->stall_out = taken;
		return false;
	}
	return now - s->stall_ns >= RELEASE_STALL_NS;
}

/* One look at every ring and mailbox in service. Called with r->lock held. */
static void watch_once(struct shoal_router *r, bool mailboxes)
{
	uint64_t now = shoal__now_ns();
	bool changed = false;

	/* A group registered at run time ends with its process, once the
	 * dispatchers took what it sent or stopped taking it (a failed
	 * release is tried again at the next look). */
	for (uint32_t g = 0; g < r->n_groups; g++) {
		if (!r->groups[g].used || !r->groups[g].runtime)
			continue;
		if (r->groups[g].conn >= 0)
			r->groups[g].stall_ns = 0;
		else if (release_due(&r->groups[g], now))
			(void)shoal__release_group(r, (int)g);
	}
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *s = &r->groups[g];
		struct shoal_err err = { { 0 } };

		if (!s->used)
			continue;
		for (unsigned w = 0; w < s->n_workers; w++) {
			unsigned side;

			for (int d = -1; d < r->n_disp; d++) {
				struct shoal__ring_ref *ref = d < 0 ? &s->up[w] : &s->in[w][d];

				if (ref->mem == NULL)
					continue;
				side = shoal_ring_condemned(ref->mem, ref->len);
				if (side != 0 && replace_ring(r, (int)g, w, d, side) == 0)
					changed = true;
			}
		}
		if (mailboxes && !s->mbx_bad && mailbox_damage(r, (int)g, &err) < 0) {
			s->mbx_bad = true;
			count_damage(r, (int)g, false);
			damage_log(r, (int)g, "%s; it is replaced when the group restarts", err.msg);
		}
	}
	if (changed || r->damage_unpublished) {
		struct shoal_err err = { { 0 } };

		/* On failure the next look retries: the refs are already new. */
		r->damage_unpublished = shoal__publish(r, &err) < 0;
		if (r->damage_unpublished)
			return;
		/* Workers move to a new uplink only once no dispatcher reads the
		 * old one (the grace period is behind us). */
		for (uint32_t g = 0; g < r->n_groups; g++) {
			struct shoal__group_slot *s = &r->groups[g];

			for (unsigned w = 0; s->used && w < s->n_workers; w++) {
				/* Relaxed: our own earlier store, read back. */
				if (shoal_load_relaxed(&s->hdr->w[w].up_gen) == s->up[w].gen)
					continue;
				/* R4: pairs with A4 in rings.c and send.c: the new
				 * uplink is in the directory and no dispatcher reads
				 * the old one. */
				shoal_store_release(&s->hdr->w[w].up_gen, s->up[w].gen);
				shoal_doorbell_notify(&s->hdr->w[w].up_db);
				shoal_doorbell_notify(&s->hdr->w[w].in_db);
			}
		}
	}
	shoal__settle_retired(r, -1);
}

void *shoal__watch_main(void *arg)
{
	struct shoal_router *r = arg;
	struct timespec tick = { 0, WATCH_TICK_NS };

	for (unsigned n = 0; !atomic_load(&r->dp.stopping); n++) {
		nanosleep(&tick, NULL);
		pthread_mutex_lock(&r->lock);
		watch_once(r, n % WATCH_MAILBOX_TICKS == 0);
		pthread_mutex_unlock(&r->lock);
	}
	return NULL;
}
