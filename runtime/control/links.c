/* SPDX-License-Identifier: MIT */
/*
 * The link opener: the one thread of a group process that opens direct
 * links, so that the data plane never makes a control call.
 *
 * A worker that sends directly to a (group, worker) it has no link to sets
 * that worker's bit in its link_want[group] and rings link_bell (see
 * link_ask() in runtime/data/send.c); a try_ call returns -EAGAIN
 * meanwhile, a blocking one waits on its link_db. This thread takes the
 * bits, maps the peer's mailbox (once per peer), asks the router for the
 * ring over the control socket, attaches a producer handle, and answers
 * with the entry's state, READY or FAILED with the reason, then rings the
 * asking worker's link_db.
 *
 * Ordering: the ask is a release fetch-or on link_want, taken here with an
 * acquire exchange, so the asker's giving up of an earlier entry (state
 * NONE) happens before we rewrite it. Our answer is a release store of the
 * state (and of the per-group entry array the first time), read with
 * acquire by the data plane before it touches the entry. The entry keeps
 * the registry's mbx_gen read (A7) before the peer's mailbox is mapped:
 * the sender compares it at every send and asks again once it differs.
 *
 * Progress: asks are answered in the order the scan finds them; one answer
 * costs a control round trip (tens of microseconds). The thread sleeps on
 * link_bell when nothing is asked, so an idle group costs nothing here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/segment.h>

#include "runtime/group_impl.h"
#include "shm/atomic.h"
#include "shm/util.h"

/* How often the opener looks at its stop flag while idle. */
#define LINKER_IDLE_NS 1000000000

/* Whether our mapping `p` is still the mailbox file called `name` (the one
 * the registry names now). */
static bool peer_current(const struct shoal__peer *p, const char *name)
{
	const char *slash = strrchr(p->seg.path, '/');
	char path[sizeof(p->seg.path)];
	struct stat mapped, named;
	int n;

	if (slash == NULL)
		return false;
	n = snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - p->seg.path), p->seg.path,
		     name);
	return n > 0 && (size_t)n < sizeof(path) && fstat(p->seg.fd, &mapped) == 0 &&
	       lstat(path, &named) == 0 && mapped.st_ino == named.st_ino &&
	       mapped.st_dev == named.st_dev;
}

/*
 * Another group's mailbox, mapped on the first link into it, and again when
 * it is no longer the file in service: the router replaced it (damage.c) or
 * freed its group and gave the slot to another (registry.c). The old
 * mapping is left in place (only its descriptor closed) until the process
 * ends: a worker's link may still write there until it finds its ring given
 * up, and only that worker's thread may let go of its link. Lock held
 * (ctl_lock: the opener and a worker opening its own link may both map).
 */
static struct shoal__peer *peer_map(struct shoal_group *g, uint16_t dst_group)
{
	struct shoal__peer *p = &g->peers[dst_group];
	char name[SHOAL_SEG_NAME_MAX];

	/* The name in the registry is router-written; still bound it. */
	memcpy(name, g->reg.groups[dst_group].mailbox, sizeof(name));
	name[sizeof(name) - 1] = '\0';
	if (p->mapped && peer_current(p, name))
		return p;
	if (p->mapped) {
		close(p->seg.fd);
		p->mapped = false;
	}
	if (shoal_seg_attach(&p->seg, name, 0, NULL) != 0)
		return NULL;
	p->hdr = shoal__mailbox_hdr(&p->seg);
	if (p->hdr == NULL) {
		shoal_seg_detach(&p->seg);
		return NULL;
	}
	p->mapped = true;
	return p;
}

/* Open the link of `ctx` into worker `dw` of group `dg`: 0 or -errno. */
static int open_link(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw, struct shoal__dout *o)
{
	struct shoal_group *g = ctx->g;
	struct shoal__peer *peer;
	char ring[SHOAL_SEG_REGION_NAME_MAX];
	struct shoal_seg_region r;
	void *mem;
	uint32_t mbx_gen;
	int ret;

	/* A7: pairs with R7 in registry.c shoal__create_mailbox(): read before
	 * the mapping, so that a mailbox replaced meanwhile shows as a number
	 * the registry no longer holds (the sender opens the link again). */
	mbx_gen = shoal_load_acquire(&g->reg.groups[dg].mbx_gen);
	pthread_mutex_lock(&g->ctl_lock);
	peer = peer_map(g, dg);
	pthread_mutex_unlock(&g->ctl_lock);
	/* The peer's mailbox is writable by others: its count is untrusted. */
	if (peer == NULL || dw >= peer->hdr->n_workers)
		return -EUCLEAN;
	ret = shoal__open_direct(g, ctx->w, dg, (uint16_t)dw, ring, NULL);
	if (ret < 0)
		return ret;
	if (shoal_seg_find(&peer->seg, SHOAL_SEG_KIND_RING, ring, &r) < 0 ||
	    (mem = shoal_seg_ptr(&peer->seg, r.off, r.len, 128)) == NULL ||
	    shoal_ring_prod_attach(&o->p, mem, r.len, NULL) < 0)
		return -EUCLEAN;
	o->dst = &peer->hdr->w[dw];
	o->hint = shoal_doorbell_ready_hint(shoal__ready_key(g->id, ctx->w));
	o->ring = mem;
	o->mbx_gen = mbx_gen;
	return 0;
}

/* The entries of `ctx`'s links into group `dg`, allocated on first use and
 * published with release (the opener and the worker may race: one wins). */
static struct shoal__dout *douts_of(struct shoal_ctx *ctx, uint16_t dg)
{
	struct shoal__dout *douts = shoal_load_acquire(&ctx->dout[dg]), *none = NULL;

	if (douts != NULL)
		return douts;
	douts = calloc(SHOAL_MAX_WORKERS, sizeof(*douts));
	if (douts == NULL)
		return NULL;
	if (!atomic_compare_exchange_strong_explicit(&ctx->dout[dg], &none, douts,
						     memory_order_acq_rel, memory_order_acquire)) {
		free(douts);
		return none;
	}
	return douts;
}

/* Open entry `dw` of `douts` unless it is open, and store the answer. */
static int answer_one(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw, struct shoal__dout *douts)
{
	struct shoal__dout *o = &douts[dw];
	int ret;

	if (shoal_load_relaxed(&o->state) == SHOAL__LINK_READY)
		return 0;   /* asked twice: answered already */
	ret = open_link(ctx, dg, dw, o);
	o->err = ret;
	shoal_store_release(&o->state, ret == 0 ? SHOAL__LINK_READY : SHOAL__LINK_FAILED);
	return ret;
}

/* Answer the asks of `ctx` for group `dg` (the worker bits in `want`). */
static void answer(struct shoal_ctx *ctx, uint16_t dg, uint32_t want)
{
	struct shoal__dout *douts = douts_of(ctx, dg);

	if (douts == NULL) {
		/* Nothing to answer in: ask again later (the asker waits, or
		 * its try_ call keeps saying -EAGAIN). */
		atomic_fetch_or_explicit(&ctx->link_want[dg], want, memory_order_relaxed);
		return;
	}
	for (uint32_t dw = 0; dw < SHOAL_MAX_WORKERS; dw++)
		if (want & (1u << dw))
			(void)answer_one(ctx, dg, dw, douts);
	shoal_doorbell_notify(&ctx->link_db);
}

int shoal__link_open_here(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw)
{
	struct shoal__dout *douts = douts_of(ctx, dg);

	return douts != NULL ? answer_one(ctx, dg, dw, douts) : -ENOMEM;
}

/* Take and answer every ask; true if there was any. */
static bool answer_all(struct shoal_group *g)
{
	bool any = false;

	for (unsigned w = 0; w < g->n_workers; w++) {
		struct shoal_ctx *ctx = &g->ctx[w];

		for (uint16_t dg = 0; dg < SHOAL_MAX_GROUPS; dg++) {
			uint32_t want;

			if (shoal_load_relaxed(&ctx->link_want[dg]) == 0)
				continue;
			want = atomic_exchange_explicit(&ctx->link_want[dg], 0,
							memory_order_acquire);
			if (want != 0) {
				answer(ctx, dg, want);
				any = true;
			}
		}
	}
	return any;
}

static bool asked(void *arg)
{
	struct shoal_group *g = arg;

	if (atomic_load_explicit(&g->linker_stop, memory_order_relaxed))
		return true;
	for (unsigned w = 0; w < g->n_workers; w++)
		for (uint16_t dg = 0; dg < SHOAL_MAX_GROUPS; dg++)
			if (shoal_load_relaxed(&g->ctx[w].link_want[dg]) != 0)
				return true;
	return false;
}

static void *linker_main(void *arg)
{
	struct shoal_group *g = arg;

	while (!atomic_load_explicit(&g->linker_stop, memory_order_relaxed)) {
		if (!answer_all(g))
			(void)shoal_doorbell_poll_wait(&g->link_bell, 0, asked, g, LINKER_IDLE_NS);
	}
	return NULL;
}

int shoal__linker_start(struct shoal_group *g)
{
	uint32_t none = SHOAL__LINKER_NONE;
	int ret;

	/* One starter: the others' asks are in link_want, which the new
	 * thread reads first thing. */
	if (!atomic_compare_exchange_strong(&g->linker_state, &none, SHOAL__LINKER_STARTING))
		return 0;
	ret = -pthread_create(&g->linker, NULL, linker_main, g);
	if (ret < 0) {
		shoal_store_release(&g->linker_state, SHOAL__LINKER_NONE);
		return ret;
	}
	pthread_setname_np(g->linker, "shoal-links");
	shoal_store_release(&g->linker_state, SHOAL__LINKER_RUNNING);
	return 0;
}

void shoal__linker_stop(struct shoal_group *g)
{
	if (shoal_load_acquire(&g->linker_state) != SHOAL__LINKER_RUNNING)
		return;
	atomic_store(&g->linker_stop, true);
	shoal_doorbell_notify(&g->link_bell);
	pthread_join(g->linker, NULL);
	shoal_store_relaxed(&g->linker_state, SHOAL__LINKER_NONE);
}
