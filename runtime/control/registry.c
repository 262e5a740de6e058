/* SPDX-License-Identifier: MIT */
/*
 * The system's registry and the groups' mailboxes: claiming the system's
 * names at start (a live system or a foreign file is refused, a dead
 * system's leftovers removed), creating the registry and doorbell segments,
 * declaring group slots, and laying out each mailbox and its rings.
 *
 * Groups registered at run time that the system never declared are freed
 * when their process leaves or dies (shoal__release_group(), from the
 * watch thread), so that a program that registers and leaves again and
 * again never runs out of slots or shared memory; the slot goes to the next
 * group that needs one, with `gen` going on (no address names two owners).
 *
 * Ordering guarantees:
 *   R3 (group count store-release, in shoal__declare_group()) pairs with A3
 *      in readers of the group table: a counted slot has its fields set.
 *   R5/R6 (slot_seq, in slot_rewrite_begin()/_end()) pair with A5/A6 in
 *      the tools' read of a slot (tools/sysview.c): a reader that sees the
 *      same even slot_seq before and after its reads saw one owner only.
 *   R7 (mbx_gen, in shoal__create_mailbox()) pairs with A7 in the link
 *      opener (links.c): the mailbox file is in place before its number.
 *   A ring enters a mailbox's directory only once initialised
 *      (shoal_seg_alloc_init(), R2 in shm/segment.c): a worker that rescans
 *      its directory never finds a ring it cannot use yet.
 *   Registry fields other than type ids and the group count are
 *   single-writer (the router, under router->lock) and read by others with
 *   relaxed loads: they are status for display and liveness checks,
 *   ordering nothing.
 *
 * Concurrency: called with router->lock held, or during start before the
 * router's threads run (shoal__claim_system(), shoal__create_registry()).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/numa.h>

#include "runtime/control/config.h"
#include "runtime/control/router_impl.h"
#include "shm/util.h"

#define MAILBOX_DIR_CAP 1024u
#define MAILBOX_DIRECT_RINGS 128u
#define MAILBOX_SPARE_RINGS 4u      /* room to replace condemned rings */
#define REGISTRY_SEG_SIZE (SHOAL__REG_SIZE + 8192)
#define BELL_SEG_SIZE (sizeof(struct shoal__bell) + 4096)
/*
 * Groups a process registers without the router (the system's file, or
 * shoal_router_group()) having declared them live as long as their process:
 * nobody restarts them, so what is queued for one that left is counted
 * (lost_released) and its slot and mailbox freed. A same-user process could
 * still register new names faster than they leave until every slot and
 * /dev/shm are taken (254 in 0.2 s, 2.6 GB); at most this many such groups
 * exist at once, which leaves the other slots to declared groups.
 */
#define MAX_RUNTIME_GROUPS 64u

uint64_t shoal__mailbox_size(uint32_t n_workers, uint32_t up_cap, uint32_t in_cap,
			     uint32_t direct_cap, uint32_t bridge_cap, bool bridge)
{
	/* A group's ring from the bridge, one a worker, beside the others;
	 * the bridge's own direct rings, all of the bridge's capacity. */
	uint64_t from_bridge = bridge_cap != 0 && !bridge ?
				       (uint64_t)n_workers * shoal_ring_size(bridge_cap) : 0;

	return shoal_seg_overhead(MAILBOX_DIR_CAP) + sizeof(struct shoal__mbx_hdr) +
	       (uint64_t)n_workers * (shoal_ring_size(up_cap) +
				      SHOAL_MAX_NODES * shoal_ring_size(in_cap)) +
	       (uint64_t)MAILBOX_DIRECT_RINGS * shoal_ring_size(bridge ? bridge_cap : direct_cap) +
	       from_bridge +
	       (uint64_t)MAILBOX_SPARE_RINGS * shoal_ring_size(in_cap > up_cap ? in_cap : up_cap);
}

uint64_t shoal__system_seg_size(uint64_t page)
{
	return shoal__align_up(REGISTRY_SEG_SIZE, page) + shoal__align_up(BELL_SEG_SIZE, page);
}

int shoal__find_group(const struct shoal_router *r, const char *name)
{
	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used && strcmp(r->groups[g].name, name) == 0)
			return (int)g;
	return -ENOENT;
}

static int init_ring(void *mem, uint64_t len, void *arg)
{
	return shoal_ring_init(mem, len, *(const uint32_t *)arg, 0);
}

/* Remember a region the router added to a mailbox (mailbox_damage() in damage.c checks it). */
static int dir_note(struct shoal__group_slot *s, uint32_t kind, const char *name,
		    const struct shoal_seg_tag *tag, uint64_t off, uint64_t len)
{
	struct shoal_seg_region *dir = shoal__grow(s->dir, &s->cap_dir, s->n_dir, sizeof(*dir), 64);
	struct shoal_seg_region *e;

	if (dir == NULL)
		return -ENOMEM;
	s->dir = dir;
	e = &s->dir[s->n_dir++];
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->off = off;
	e->len = len;
	if (tag != NULL)
		e->tag = *tag;
	snprintf(e->name, sizeof(e->name), "%s", name);
	return 0;
}

/*
 * Add the ring `tag` names (runtime/layout.h) to a mailbox, initialised
 * before it enters the directory: a running worker scans the directory for
 * new rings at any moment, and one that found a ring not yet initialised
 * would skip it for good, losing what is sent into it. The ring is recorded
 * in `ref` (when given) and in the slot's private copy of the directory. An
 * existing ring of that identity is kept (direct rings are opened once per
 * pair of workers). The directory may hold what our copy does not (damage):
 * shoal_seg_alloc_init() then refuses a second ring of the same identity
 * (-EEXIST).
 */
int shoal__alloc_ring(struct shoal__group_slot *s, const struct shoal_seg_tag *tag, uint32_t cap,
		      struct shoal__ring_ref *ref)
{
	char name[SHOAL_SEG_REGION_NAME_MAX];
	uint64_t off, len = shoal_ring_size(cap);
	int ret;

	for (uint32_t i = 0; i < s->n_dir; i++)
		if (s->dir[i].kind == SHOAL_SEG_KIND_RING &&
		    shoal_seg_tag_equal(&s->dir[i].tag, tag))
			return 0;
	shoal__ring_name(name, tag);
	ret = shoal_seg_alloc_init(&s->mbx, SHOAL_SEG_KIND_RING, name, tag, len, 0, init_ring,
				   &cap, &off);
	if (ret < 0)
		return ret;
	ret = dir_note(s, SHOAL_SEG_KIND_RING, name, tag, off, len);
	if (ret < 0)
		return ret;
	if (ref != NULL) {
		ref->mem = (unsigned char *)s->mbx.base + off;
		ref->len = len;
	}
	return 0;
}

struct shoal_seg_tag shoal__ring_tag(unsigned w, int d, uint32_t gen)
{
	if (d < 0)
		return (struct shoal_seg_tag){ .role = SHOAL__RING_UPLINK, .a = w, .gen = gen };
	return (struct shoal_seg_tag){ .role = SHOAL__RING_DISPATCHED, .a = w, .b = (uint32_t)d,
				       .gen = gen };
}

void shoal__ring_name(char name[SHOAL_SEG_REGION_NAME_MAX], const struct shoal_seg_tag *tag)
{
	int n;

	if (tag->role == SHOAL__RING_UPLINK)
		n = snprintf(name, SHOAL_SEG_REGION_NAME_MAX, "up.%u", tag->a);
	else if (tag->role == SHOAL__RING_DISPATCHED)
		n = snprintf(name, SHOAL_SEG_REGION_NAME_MAX, "in.%u.d%u", tag->a, tag->b);
	else
		n = snprintf(name, SHOAL_SEG_REGION_NAME_MAX, "in.%u.g%u.%u", tag->a, tag->b,
			     tag->c);
	if (tag->gen != 0 && n > 0 && n < SHOAL_SEG_REGION_NAME_MAX)
		snprintf(name + n, (size_t)(SHOAL_SEG_REGION_NAME_MAX - n), ".r%u", tag->gen);
}

/* Give every group an inbound ring per worker from dispatcher `d`. */
int shoal__add_dispatcher_rings(struct shoal_router *r, int d)
{
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *s = &r->groups[g];

		if (!s->used)
			continue;
		for (unsigned w = 0; w < s->n_workers; w++) {
			struct shoal_seg_tag tag = shoal__ring_tag(w, d, 0);
			int ret = shoal__alloc_ring(s, &tag, s->in_cap, &s->in[w][d]);

			if (ret < 0)
				return ret;
		}
	}
	return 0;
}

int shoal__create_mailbox(struct shoal_router *r, struct shoal__group_slot *s, uint16_t id,
			  struct shoal_err *err)
{
	struct shoal_seg_opts o = { .mode = r->mode, .dir_cap = MAILBOX_DIR_CAP, .numa_node = -1 };
	char seg_name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg_tag tag;
	uint64_t size, off;
	int ret;

	/* Bind the mailbox to its node before first touch: the router's
	 * writes below fault the pages in on that node, not on ours. */
	if (r->numa_real && s->node < shoal_numa_node_count())
		o.numa_node = s->node;
	size = shoal__mailbox_size(s->n_workers, r->up_cap, s->in_cap, r->direct_cap, r->bridge_cap,
				   r->bridge_cap != 0 && strcmp(s->name, SHOAL__BRIDGE_GROUP) == 0);
	shoal__name_mailbox(seg_name, r->system, s->name);
	ret = shoal_seg_create(&s->mbx, seg_name, size, &o, err);
	if (ret < 0)
		return ret;
	s->n_dir = 0;
	memset(s->up, 0, sizeof(s->up));
	memset(s->in, 0, sizeof(s->in));
	s->mbx_bad = false;
	ret = shoal_seg_alloc(&s->mbx, SHOAL__KIND_MAILBOX, "mailbox", sizeof(*s->hdr), 128, &off);
	if (ret == 0)
		ret = dir_note(s, SHOAL__KIND_MAILBOX, "mailbox", NULL, off, sizeof(*s->hdr));
	if (ret < 0)
		goto fail;
	s->hdr = shoal_seg_ptr(&s->mbx, off, sizeof(*s->hdr), 128);
	s->hdr->version = SHOAL__LAYOUT_VERSION;
	s->hdr->group = id;
	s->hdr->n_workers = s->n_workers;
	s->hdr->n_actors = s->n_actors;
	for (unsigned w = 0; w < s->n_workers; w++) {
		shoal_doorbell_init(&s->hdr->w[w].in_db);
		shoal_doorbell_init(&s->hdr->w[w].up_db);
		shoal_doorbell_init(&s->hdr->w[w].space_db);
		tag = shoal__ring_tag(w, -1, 0);
		ret = shoal__alloc_ring(s, &tag, r->up_cap, &s->up[w]);
		for (int d = 0; ret == 0 && d < r->n_disp; d++) {
			tag = shoal__ring_tag(w, d, 0);
			ret = shoal__alloc_ring(s, &tag, s->in_cap, &s->in[w][d]);
		}
		if (ret < 0)
			goto fail;
	}
	/* Readers check the magic last (segment R1 already covers the header;
	 * this covers a mailbox region read by a process attached earlier). */
	s->hdr->magic = SHOAL__MBX_MAGIC;
	/* R7: pairs with A7 in links.c open_link(): a link opener that reads
	 * this value maps this file or a later one, never the one before. */
	shoal_store_release(&r->regg[id].mbx_gen, shoal_load_relaxed(&r->regg[id].mbx_gen) + 1);
	return 0;
fail:
	shoal__fail(err, ret, "cannot lay out mailbox %s: %s", seg_name, strerror(-ret));
	shoal_seg_detach(&s->mbx);
	shoal_seg_unlink(seg_name);
	return ret;
}

/* The registry slot changes owner: readers re-read (R5/R6, A5/A6). */
static void slot_rewrite_begin(struct shoal__reg_group *rg)
{
	/* Relaxed: we are the only writer; the fence orders it before the
	 * rewrite (R5: pairs with A6, the reader's fence before its re-read). */
	shoal_store_relaxed(&rg->slot_seq, shoal_load_relaxed(&rg->slot_seq) + 1);
	shoal_fence_release();
}

static void slot_rewrite_end(struct shoal__reg_group *rg)
{
	/* R6: pairs with A5, the reader's first load: the rewrite before. */
	shoal_store_release(&rg->slot_seq, shoal_load_relaxed(&rg->slot_seq) + 1);
}

/* Zero what the router counted for the slot's previous owner (its dispatcher
 * counters, stats[], are the dispatchers' own: they zero them when they
 * first see a snapshot with the new owner, dispatch.c owners_check()).
 * `gen` goes on. */
static void slot_clear(struct shoal__reg_group *rg)
{
	memset(rg->name, 0, sizeof(rg->name));
	memset(rg->mailbox, 0, sizeof(rg->mailbox));
	shoal_store_relaxed(&rg->pid, 0);
	shoal_store_relaxed(&rg->attaches, 0);
	shoal_store_relaxed(&rg->damaged, 0);
	shoal_store_relaxed(&rg->replaced, 0);
	shoal_store_relaxed(&rg->lost_corrupt, 0);
	shoal_store_relaxed(&rg->lost_queued, 0);
}

/* Whether freed slot g may go to another group: no process that held a
 * direct link into its old mailbox still runs (router_impl.h linked_gen). */
static bool slot_reusable(const struct shoal_router *r, uint32_t g)
{
	const struct shoal__group_slot *s = &r->groups[g];

	if (s->used)
		return false;
	for (uint32_t src = 0; src < r->n_groups; src++)
		if (s->linked_gen[src] != 0 && r->groups[src].used && r->groups[src].conn >= 0 &&
		    shoal_load_relaxed(&r->regg[src].gen) == s->linked_gen[src])
			return false;
	return true;
}

/* Note that the process of the group writing direct ring `tag` (if it runs)
 * may hold a link into freed slot s. */
static void note_linked(struct shoal_router *r, struct shoal__group_slot *s,
			const struct shoal_seg_tag *tag)
{
	uint32_t src = tag->b;

	if (src < r->n_groups && r->groups[src].used && r->groups[src].conn >= 0)
		s->linked_gen[src] = shoal_load_relaxed(&r->regg[src].gen);
}

/* Messages that group g's mailbox and its retired rings still hold, with
 * its process gone and no dispatcher reading it: lost. Direct rings are
 * given up (shoal__ring_drain_dead()), their writers noted. */
static uint64_t count_released(struct shoal_router *r, int g)
{
	struct shoal__group_slot *s = &r->groups[g];
	bool failed = shoal_load_relaxed(&r->regg[g].state) == SHOAL_GROUP_FAILED;
	uint64_t lost = 0, in, out, sent = 0, taken = 0, fwd_lost = 0;

	for (uint32_t i = 0; i < r->n_retired; i++) {
		struct shoal__retired *t = &r->retired[i];

		if (t->group != g || t->state == SHOAL__RETIRED_DONE)
			continue;
		if (t->direct) {
			lost += shoal__ring_drain_dead(t->mem, t->len);
			if (t->src < r->n_groups && r->groups[t->src].used &&
			    r->groups[t->src].conn >= 0 &&
			    shoal_load_relaxed(&r->regg[t->src].gen) == t->src_gen)
				s->linked_gen[t->src] = t->src_gen;
		} else if (!(shoal_ring_condemned(t->mem, t->len) & SHOAL_RING_SIDE_SETTLED) &&
			   shoal_ring_records(t->mem, t->len, &in, &out) == 0 && in > out) {
			lost += in - out;
		}
		t->state = SHOAL__RETIRED_DONE;
	}
	for (uint32_t i = 0; i < s->n_dir; i++) {
		const struct shoal_seg_region *e = &s->dir[i];
		void *mem = (unsigned char *)s->mbx.base + e->off;
		bool retired = false;

		/* A ring taken out of service was counted above, as retired. */
		for (uint32_t k = 0; k < r->n_retired && !retired; k++)
			retired = r->retired[k].mem == mem;
		if (e->kind != SHOAL_SEG_KIND_RING || retired)
			continue;
		if (e->tag.role == SHOAL__RING_DIRECT) {
			/* A failed group's inbound rings were counted (lost_queued)
			 * when it was marked failed with no process, or left. */
			uint64_t n = shoal__ring_drain_dead(mem, e->len);

			lost += failed ? 0 : n;
			note_linked(r, s, &e->tag);
		} else if ((e->tag.role == SHOAL__RING_UPLINK || !failed) &&
			   !(shoal_ring_condemned(mem, e->len) & SHOAL_RING_SIDE_SETTLED) &&
			   shoal_ring_records(mem, e->len, &in, &out) == 0 && in > out) {
			lost += in - out;
		}
	}
	/* Copies its last process held in its own memory (as rings.c counts
	 * them at the next attach, which will not come). */
	for (unsigned w = 0; s->hdr != NULL && w < s->n_workers; w++) {
		/* Relaxed: the writers are gone; the mailbox holds their last. */
		sent += shoal_load_relaxed(&s->hdr->w[w].fwd_sent);
		taken += shoal_load_relaxed(&s->hdr->w[w].fwd_taken);
		fwd_lost += shoal_load_relaxed(&s->hdr->w[w].fwd_lost);
	}
	return lost + (sent > taken + fwd_lost ? sent - taken - fwd_lost : 0);
}

/* Routes to group g, its own and the router API's: removed. */
static void remove_routes_to(struct shoal_router *r, int g)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < r->n_routes; i++)
		if (r->routes[i].owner != g && r->routes[i].f.group != (uint32_t)g)
			r->routes[kept++] = r->routes[i];
	r->n_routes = kept;
}

/* Room to keep one more old mailbox mapping (mailbox_bury()). */
static int old_mbx_room(struct shoal_router *r)
{
	struct shoal_seg *old = realloc(r->old_mbx, (r->n_old_mbx + 1) * sizeof(*old));

	if (old == NULL)
		return -ENOMEM;
	r->old_mbx = old;
	return 0;
}

/*
 * The freed mailbox's mapping becomes anonymous memory of the same size
 * rather than a hole: the file's pages go back to the system, while the
 * dispatchers' handles (runtime/data/dispatch.c), which know a ring by its
 * address, can neither touch an unmapped page nor meet a new mailbox at an
 * old address. Kept with the replaced mailboxes until the router ends (room
 * made by old_mbx_room()).
 */
static void mailbox_bury(struct shoal_router *r, struct shoal__group_slot *s)
{
	shoal_seg_unlink(s->mbx.name);
	/* On failure it stays the file's mapping, kept all the same. */
	if (mmap(s->mbx.base, s->mbx.size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED) {
		close(s->mbx.fd);
		s->mbx.fd = -1;
	}
	r->old_mbx[r->n_old_mbx++] = s->mbx;
	memset(&s->mbx, 0, sizeof(s->mbx));
	s->mbx.fd = -1;
}

int shoal__release_group(struct shoal_router *r, int g)
{
	struct shoal__group_slot *s = &r->groups[g];
	struct shoal__reg_group *rg = &r->regg[g];
	/* Relaxed: our own field, read back. */
	uint32_t state = shoal_load_relaxed(&rg->state);
	uint64_t lost;
	int ret;

	/* Room first: nothing below may fail once the group is gone. */
	ret = old_mbx_room(r);
	if (ret < 0)
		return ret;
	remove_routes_to(r, g);
	s->used = false;
	shoal_store_relaxed(&rg->state, SHOAL_GROUP_EMPTY);
	ret = shoal__publish(r, NULL);
	if (ret < 0) {
		/* Its routes stay removed: what is routed to it meanwhile is
		 * counted as no_route, and the next look tries again. */
		s->used = true;
		shoal_store_relaxed(&rg->state, state);
		return ret;
	}
	/* No dispatcher reads or writes its rings any more (the publish waited
	 * for that), and its process is gone: their counters are final, but
	 * for direct senders, which find their rings given up. */
	shoal__settle_retired(r, g);
	memset(s->linked_gen, 0, sizeof(s->linked_gen));
	/* Relaxed: counters of ours (router-written), read back. */
	lost = count_released(r, g) + shoal_load_relaxed(&rg->lost_queued) +
	       shoal_load_relaxed(&rg->lost_corrupt);
	for (unsigned w = 0; w < s->n_workers; w++)
		shoal_doorbell_notify(&s->hdr->w[w].space_db);
	slot_rewrite_begin(rg);
	slot_clear(rg);
	slot_rewrite_end(rg);
	mailbox_bury(r, s);
	/* Relaxed: counters for the tools; this thread is their only writer.
	 * After the burial: a reader that sees the group counted released
	 * finds its mailbox file gone. */
	shoal_store_relaxed(&r->reg->lost_released,
			    shoal_load_relaxed(&r->reg->lost_released) + lost);
	shoal_store_relaxed(&r->reg->released, shoal_load_relaxed(&r->reg->released) + 1);
	free(s->dir);
	s->dir = NULL;
	s->n_dir = s->cap_dir = 0;
	s->hdr = NULL;
	s->runtime = false;
	/* Requesters waiting on it re-check its state. */
	shoal__wake_all_workers(r);
	shoal__note_change(r);
	return 0;
}

static uint32_t runtime_groups(const struct shoal_router *r)
{
	uint32_t n = 0;

	for (uint32_t g = 0; g < r->n_groups; g++)
		n += r->groups[g].used && r->groups[g].runtime;
	return n;
}

/*
 * Declare a group slot: `runtime` for one a process registers (HELLO), not
 * the router's owner; `host`, the index in the file of the host it runs on
 * (-1: this one; the owner's word for a group declared before). Called
 * with r->lock held. Returns the id.
 */
int shoal__declare_group(struct shoal_router *r, const struct shoal_group_spec *spec,
			 bool runtime, int host, struct shoal_err *err)
{
	/* Relaxed, stored in the slot's rewrite: senders read it as they read
	 * the slot, which the group count's release (R3) publishes. */
	uint32_t remote = host < 0 ? 0u : (uint32_t)host + 1;
	uint16_t nw = spec->n_workers ? spec->n_workers : 1;
	uint16_t na = spec->n_actors ? spec->n_actors : 1;
	struct shoal__group_slot *s;
	struct shoal__reg_group *rg;
	int id, ret, d;

	ret = shoal__check_name(spec->name, "group", err);
	if (ret < 0)
		return ret;
	if (nw > SHOAL_MAX_WORKERS || na > SHOAL_MAX_ACTORS)
		return shoal__fail(err, -EINVAL, "group %s: %u workers, %u actors (limits %u, %u)",
				   spec->name, nw, na, SHOAL_MAX_WORKERS, SHOAL_MAX_ACTORS);
	if (spec->node >= r->n_nodes || spec->node < -1)
		return shoal__fail(err, -EINVAL, "group %s: NUMA node %d does not exist (%d nodes)",
				   spec->name, spec->node, r->n_nodes);
	if (spec->inbound_capacity != 0 && (!shoal_ring_size(spec->inbound_capacity) ||
					    spec->inbound_capacity < 4096))
		return shoal__fail(err, -EINVAL, "group %s: inbound capacity %u must be a power of "
				   "two of at least 4096", spec->name, spec->inbound_capacity);
	if (spec->overflow > SHOAL_OVERFLOW_DROP)
		return shoal__fail(err, -EINVAL, "group %s: unknown overflow policy %u", spec->name,
				   spec->overflow);
	id = shoal__find_group(r, spec->name);
	if (id >= 0) {
		s = &r->groups[id];
		/* A process that leaves a count at 0 takes the declared one. */
		if ((spec->n_workers && s->n_workers != nw) || (spec->n_actors && s->n_actors != na))
			return shoal__fail(err, -EEXIST, "group %s is declared with %u workers and "
					   "%u actors, not %u and %u", spec->name, s->n_workers,
					   s->n_actors, nw, na);
		if (!runtime) {
			s->runtime = false;   /* declared now: no longer counts as run-time */
			shoal_store_relaxed(&r->regg[id].remote_host, remote);
		}
		return id;
	}
	for (id = 0; id < (int)r->n_groups && !slot_reusable(r, (uint32_t)id); id++)
		;
	if (id >= SHOAL_MAX_GROUPS)
		return shoal__fail(err, -ENOSPC, "the system already has %d groups (freed slots "
				   "wait for the processes that sent to their groups to end)",
				   SHOAL_MAX_GROUPS);
	if (runtime && runtime_groups(r) >= MAX_RUNTIME_GROUPS)
		return shoal__fail(err, -ENOSPC, "system %s already has %u groups that it did not "
				   "declare (the limit): declare group %s in the system's file",
				   r->system, MAX_RUNTIME_GROUPS, spec->name);
	{
		char seg_name[SHOAL_SEG_NAME_MAX];

		if (shoal__name_mailbox(seg_name, r->system, spec->name) < 0)
			return shoal__fail(err, -ENAMETOOLONG, "group %s: its mailbox name "
					   "shoal.%s.g.%s would exceed %d characters", spec->name,
					   r->system, spec->name, SHOAL_SEG_NAME_MAX - 1);
	}
	s = &r->groups[id];
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", spec->name);
	s->n_workers = nw;
	s->n_actors = na;
	s->node = spec->node >= 0 ? spec->node : shoal__place_group(r);
	s->in_cap = spec->inbound_capacity ? spec->inbound_capacity : r->in_cap;
	s->overflow = spec->overflow;
	s->conn = -1;
	d = shoal__ensure_dispatcher(r, s->node, err);
	if (d < 0)
		return d;
	ret = shoal__create_mailbox(r, s, (uint16_t)id, err);
	if (ret < 0)
		return ret;
	s->used = true;
	s->runtime = runtime;
	s->stall_ns = s->stall_out = 0;
	rg = &r->regg[id];
	slot_rewrite_begin(rg);
	slot_clear(rg);
	shoal_store_relaxed(&rg->first_gen, shoal_load_relaxed(&rg->gen) + 1);
	memcpy(rg->name, s->name, sizeof(rg->name));
	rg->n_workers = nw;
	rg->n_actors = na;
	rg->node = s->node;
	rg->dispatcher = (uint32_t)d;
	shoal__name_mailbox(rg->mailbox, r->system, s->name);
	shoal_store_relaxed(&rg->state, SHOAL_GROUP_DOWN);
	shoal_store_relaxed(&rg->remote_host, remote);
	slot_rewrite_end(rg);
	if ((uint32_t)id == r->n_groups) {
		r->n_groups++;
		/* R3: pairs with A3 in readers of the group table (send.c,
		 * group.c, tools): a counted slot has its fields set. */
		shoal_store_release(&r->reg->n_groups, r->n_groups);
	}
	ret = shoal__publish(r, err);
	return ret < 0 ? ret : id;
}

/*
 * Walk the files of `system` in our segment directory (`dfd`, at `dir`). Any
 * of another user is hostile (only root can put one in a directory of ours):
 * refuse it, naming it, before anything reads it. With `remove`, unlink each
 * (a dead router's leftovers), failing on one that cannot go (a directory
 * that is not empty, say) rather than later on a confusing -EEXIST.
 */
static int scan_system_files(int dfd, const char *dir, const char *system, bool remove,
			     struct shoal_err *err)
{
	char prefix[64];
	struct dirent *e;
	struct stat st;
	int ret = 0, fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (d == NULL) {
		ret = shoal__fail(err, -errno, "cannot read %s: %s", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	snprintf(prefix, sizeof(prefix), "shoal.%s.", system);
	while (ret == 0 && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 ||
		    fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (st.st_uid != geteuid())
			ret = shoal__fail(err, -EPERM, "%s/%s is owned by uid %u, not by us (uid "
					  "%u): refused as hostile; system %s will not start "
					  "beside it", dir, e->d_name, (unsigned)st.st_uid,
					  (unsigned)geteuid(), system);
		else if (remove && unlinkat(dfd, e->d_name, S_ISDIR(st.st_mode) ?
					    AT_REMOVEDIR : 0) != 0 && errno != ENOENT)
			ret = shoal__fail(err, -errno, "cannot remove %s/%s, left over from "
					  "system %s: %s", dir, e->d_name, system,
					  strerror(errno));
	}
	closedir(d);
	return ret;
}

int shoal__claim_system(struct shoal_router *r, struct shoal_err *err)
{
	char reg_name[SHOAL_SEG_NAME_MAX], dir[256];
	int alive, ret, dfd = shoal_seg_dir_open(dir, sizeof(dir), true, err);

	if (dfd < 0)
		return dfd;
	/* Foreign files first: a planted registry must not be believed. */
	ret = scan_system_files(dfd, dir, r->system, false, err);
	if (ret == 0) {
		shoal__name_registry(reg_name, r->system);
		alive = shoal_seg_probe(reg_name, NULL);
		if (alive == 1)
			ret = shoal__fail(err, -EEXIST, "system %s is already running (its "
					  "router is alive)", r->system);
	}
	/* Dead or broken leftovers of this system's names: remove. */
	if (ret == 0)
		ret = scan_system_files(dfd, dir, r->system, true, err);
	close(dfd);
	return ret;
}

/* A region that does not fit in a segment sized for it: the filesystem is full. */
static int layout_fail(struct shoal_err *err, int ret, const char *what, const char *path)
{
	return shoal__fail(err, ret, "cannot lay out the %s in %s: %s%s", what, path,
			   strerror(-ret), ret == -ENOSPC ? " (the shared-memory filesystem is "
			   "full)" : "");
}

int shoal__create_registry(struct shoal_router *r, struct shoal_err *err)
{
	struct shoal_seg_opts o = { .mode = r->mode, .numa_node = -1, .dir_cap = 8 };
	char name[SHOAL_SEG_NAME_MAX];
	uint64_t off;
	int ret;

	shoal__name_registry(name, r->system);
	ret = shoal_seg_create(&r->reg_seg, name, REGISTRY_SEG_SIZE, &o, err);
	if (ret < 0)
		return ret;
	ret = shoal_seg_alloc(&r->reg_seg, SHOAL__KIND_REGISTRY, "registry", SHOAL__REG_SIZE, 128,
			      &off);
	if (ret < 0) {
		/* Not left behind: its creator (we) is alive, so the next
		 * start would take it for a running system. */
		layout_fail(err, ret, "registry", r->reg_seg.path);
		shoal_seg_detach(&r->reg_seg);
		shoal_seg_unlink(name);
		return ret;
	}
	r->reg = shoal_seg_ptr(&r->reg_seg, off, SHOAL__REG_SIZE, 128);
	r->reg->version = SHOAL__LAYOUT_VERSION;
	snprintf(r->reg->system, sizeof(r->reg->system), "%s", r->system);
	r->reg->router_pid = (int32_t)getpid();
	r->reg->n_nodes = (uint32_t)r->n_nodes;
	r->reg->max_groups = SHOAL_MAX_GROUPS;
	r->reg->max_types = SHOAL__MAX_TYPES;
	r->reg->types_off = sizeof(*r->reg);
	r->reg->groups_off = sizeof(*r->reg) + SHOAL__MAX_TYPES * sizeof(struct shoal__reg_type);
	r->reg->cpus_off = SHOAL__REG_CPUS_OFF;
	r->reg->cpu_words = r->cpu_words;
	r->reg->spin_ns = r->dp.spin_ns;
	r->reg->yield_ns = (uint32_t)r->dp.yield_ns;
	shoal_store_relaxed(&r->reg->state, SHOAL__SYS_RUNNING);
	r->types = (struct shoal__reg_type *)((char *)r->reg + r->reg->types_off);
	r->regg = (struct shoal__reg_group *)((char *)r->reg + r->reg->groups_off);
	r->cpus = (uint64_t *)((char *)r->reg + r->reg->cpus_off);
	r->reg->magic = SHOAL__REG_MAGIC;

	shoal__name_bell(name, r->system);
	ret = shoal_seg_create(&r->bell_seg, name, BELL_SEG_SIZE, &o, err);
	if (ret < 0)
		return ret;
	ret = shoal_seg_alloc(&r->bell_seg, SHOAL__KIND_BELL, "bell", sizeof(struct shoal__bell),
			      64, &off);
	if (ret < 0)
		return layout_fail(err, ret, "doorbells", r->bell_seg.path);
	r->bell = shoal_seg_ptr(&r->bell_seg, off, sizeof(*r->bell), 64);
	shoal_doorbell_init(&r->bell->waker);
	r->dp.waker_bell = &r->bell->waker;
	return 0;
}
