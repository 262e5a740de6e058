/* SPDX-License-Identifier: MIT */
/*
 * The router's control side: the control socket, damage, and the public
 * calls. Placement and the dispatchers are in placement.c; types, routes and
 * publishing the routing snapshot in snapshot.c; the registry, the mailboxes
 * and the leftovers of a dead system in registry.c.
 *
 * Concurrency: every public call, the control thread and the watch thread
 * (damage, see below) take router->lock; dispatchers never do.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <numa.h>

#include <shoal/doorbell.h>
#include <shoal/numa.h>

#include "runtime/control/baseline.h"
#include "runtime/control/proto.h"
#include "runtime/control/router_impl.h"
#include "runtime/control/supervisor.h"
#include "shm/util.h"

#define WATCH_TICK_NS 50000000      /* the watch thread looks for damage this often */
#define WATCH_MAILBOX_TICKS 10      /* and checks whole mailboxes every 10 looks */

/* ---- small helpers ---------------------------------------------------- */

void shoal__wake_all_workers(struct shoal_router *r)
{
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *s = &r->groups[g];

		if (!s->used)
			continue;
		for (unsigned w = 0; w < s->n_workers; w++) {
			shoal_doorbell_notify(&s->hdr->w[w].in_db);
			shoal_doorbell_notify(&s->hdr->w[w].space_db);
		}
	}
}

void shoal__note_change(struct shoal_router *r)
{
	r->change_count++;
	pthread_cond_broadcast(&r->changed);
}

/* ---- damage (DESIGN invariant 10) ---------------------------------------- */

/*
 * A ring is condemned by whichever side found it corrupted (its handle went
 * into the sticky -EUCLEAN state, or it would not attach): the dispatchers
 * for the uplinks they read and the inbound rings they write, the workers
 * for the others (see shoal_ring_condemn()). The watch thread looks for the
 * marks on every ring in service, reports each once (counter and log line),
 * takes the ring out of service and gives its owner a fresh one:
 *
 *   inbound ring  a new in.W.dD.rN; the dispatcher moves to it at the next
 *                 publish; the worker finds it in its directory and reads
 *                 both (the old one until it is empty, if it still can).
 *   uplink        a new up.W.rN; the worker moves to it when the router has
 *                 published it (mw->up_gen, set after the grace period).
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
 * Everything here runs under router->lock, in the watch thread or in the
 * control thread (attach, leave), never in a dispatcher.
 */

/* Messages a retired ring still holds: bounded by what `len` bytes can. */
static uint64_t ring_left(const void *mem, uint64_t len)
{
	uint64_t in, out, max = len / (SHOAL_RING_REC_HDR + sizeof(struct shoal_envelope));

	if (shoal_ring_records(mem, len, &in, &out) < 0 || in <= out)
		return 0;
	return in - out < max ? in - out : max;
}

static void count_lost(struct shoal_router *r, int g, uint64_t n)
{
	struct shoal__reg_group *rg = &r->regg[g];

	/* Relaxed, here and for the other damage counters: the router's watch
	 * and control threads write them under router->lock; tools read them. */
	shoal_store_relaxed(&rg->lost_corrupt, shoal_load_relaxed(&rg->lost_corrupt) + n);
}

static void count_damage(struct shoal_router *r, int g, bool replaced)
{
	struct shoal__reg_group *rg = &r->regg[g];

	shoal_store_relaxed(&rg->damaged, shoal_load_relaxed(&rg->damaged) + 1);
	if (replaced)
		shoal_store_relaxed(&rg->replaced, shoal_load_relaxed(&rg->replaced) + 1);
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

static int retire(struct shoal_router *r, int g, unsigned w, bool uplink, void *mem, uint64_t len)
{
	struct shoal__retired *retired = shoal__grow(r->retired, &r->cap_retired, r->n_retired,
						     sizeof(*retired), 16);

	if (retired == NULL)
		return -ENOMEM;
	r->retired = retired;
	r->retired[r->n_retired++] = (struct shoal__retired){
		.group = (uint16_t)g, .worker = (uint16_t)w, .uplink = uplink,
		.state = SHOAL__RETIRED_OPEN, .mem = mem, .len = len,
	};
	return 0;
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
 * there is no room (the mailbox is then replaced at the next attach).
 */
static int replace_ring(struct shoal_router *r, int g, unsigned w, int d, unsigned side)
{
	struct shoal__group_slot *s = &r->groups[g];
	struct shoal__ring_ref *ref = d < 0 ? &s->up[w] : &s->in[w][d];
	struct shoal__ring_ref fresh = { .gen = ref->gen + 1 };
	char old[SHOAL_SEG_REGION_NAME_MAX], name[SHOAL_SEG_REGION_NAME_MAX];
	struct shoal_err err = { { 0 } };
	int ret;

	shoal__ring_name(old, w, d, ref->gen);
	(void)shoal_ring_check(ref->mem, ref->len, &(struct shoal_ring_stats){ 0 }, &err);
	shoal__ring_name(name, w, d, fresh.gen);
	ret = shoal__alloc_ring(s, name, d < 0 ? r->up_cap : s->in_cap, &fresh);
	if (ret == 0)
		ret = retire(r, g, w, d < 0, ref->mem, ref->len);
	count_damage(r, g, ret == 0);
	if (ret < 0) {
		s->mbx_bad = true;
		damage_log(r, g, "ring %s is corrupted (condemned by its %s%s%s); no room for a "
			   "new one (%s): the mailbox is replaced when the group restarts", old,
			   side & SHOAL_RING_SIDE_CONS ? "consumer" : "producer",
			   err.msg[0] ? ": " : "", err.msg, strerror(-ret));
		/* Never look at it again: it stays condemned. */
		ref->mem = NULL;
		return ret;
	}
	damage_log(r, g, "ring %s is corrupted (condemned by its %s%s%s); quarantined, replaced "
		   "by %s", old, side & SHOAL_RING_SIDE_CONS ? "consumer" : "producer",
		   err.msg[0] ? ": " : "", err.msg, name);
	*ref = fresh;
	return 0;
}

/*
 * The direct ring `base` of group g in service, in `name`: the latest of
 * base, base.r1, base.r2 ... the router allocated, a new one first if none
 * exists or the latest was condemned. Only the ring's producer asks for it
 * (one producer per ring), so a condemned ring it did not settle was left by
 * an earlier process of it: what it holds is counted here.
 */
int shoal__direct_ring(struct shoal_router *r, int g, const char *base,
		       char name[SHOAL_SEG_REGION_NAME_MAX])
{
	struct shoal__group_slot *s = &r->groups[g];
	const struct shoal_seg_region *last = NULL;
	unsigned side = 0;
	uint32_t gen;
	int ret;

	for (gen = 0;; gen++) {
		const struct shoal_seg_region *e = NULL;

		if (gen == 0)
			snprintf(name, SHOAL_SEG_REGION_NAME_MAX, "%s", base);
		else
			snprintf(name, SHOAL_SEG_REGION_NAME_MAX, "%.24s.r%u", base, gen);
		for (uint32_t i = 0; i < s->n_dir && e == NULL; i++)
			if (s->dir[i].kind == SHOAL_SEG_KIND_RING && strcmp(s->dir[i].name, name) == 0)
				e = &s->dir[i];
		if (e == NULL)
			break;
		last = e;
	}
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
	ret = shoal__alloc_ring(s, name, r->direct_cap, NULL);
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
	}
	/* Count what the old rings hold only once no dispatcher writes them. */
	ret = shoal__publish(r, err);
	for (uint32_t i = 0; i < n_old_dir; i++) {
		void *mem = (unsigned char *)keep.base + old_dir[i].off;
		bool counted = false;

		for (uint32_t k = 0; k < r->n_retired; k++)
			counted |= r->retired[k].mem == mem &&
				   r->retired[k].state == SHOAL__RETIRED_DONE;
		if (old_dir[i].kind == SHOAL_SEG_KIND_RING && !counted)
			lost += ring_left(mem, old_dir[i].len);
	}
	free(old_dir);
	for (uint32_t i = 0; i < r->n_retired; i++)
		if (r->retired[i].group == g)
			r->retired[i].state = SHOAL__RETIRED_DONE;   /* in the old mailbox */
	count_damage(r, g, true);
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

/* One look at every ring and mailbox in service. Called with r->lock held. */
static void watch_once(struct shoal_router *r, bool mailboxes)
{
	bool changed = false;

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
				/* R4: pairs with A4 in worker.c: the new uplink is in
				 * the directory and no dispatcher reads the old one. */
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

/* ---- control connections ---------------------------------------------- */

static int conn_group(const struct shoal_router *r, int fd)
{
	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used && r->groups[g].conn == fd)
			return (int)g;
	return -1;
}

/*
 * Count the records still queued in group g's inbound rings (those of the
 * dispatchers and the direct ones) into its lost_queued counter, for a
 * group no process will drain any more. Lock held. Returns the count. A
 * ring that fails its check (damaged) adds nothing here: that is the
 * damage report's to count.
 */
uint64_t shoal__group_count_stranded(struct shoal_router *r, int g)
{
	struct shoal__group_slot *s = &r->groups[g];
	uint32_t n = shoal_seg_dir_count(&s->mbx);
	uint64_t total = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct shoal_seg_region reg;
		struct shoal_ring_stats st;
		struct shoal_err err;
		const void *mem;
		int k;

		if (shoal_seg_region_at(&s->mbx, i, &reg) < 0 || reg.kind != SHOAL_SEG_KIND_RING ||
		    strncmp(reg.name, "in.", 3) != 0)
			continue;
		mem = shoal_seg_ptr(&s->mbx, reg.off, reg.len, 128);
		k = mem != NULL ? shoal_ring_check(mem, reg.len, &st, &err) : -EUCLEAN;
		if (k > 0)
			total += (uint64_t)k;
	}
	/* Relaxed: a counter for display; this thread is its only writer. */
	shoal_store_relaxed(&r->regg[g].lost_queued,
			    shoal_load_relaxed(&r->regg[g].lost_queued) + total);
	return total;
}

static void group_left(struct shoal_router *r, int g)
{
	struct shoal__group_slot *s = &r->groups[g];

	s->conn = -1;
	s->pid = 0;
	s->stop_wanted = false;
	shoal_store_relaxed(&r->regg[g].pid, 0);
	shoal__settle_retired(r, g);
	if (shoal_load_relaxed(&r->regg[g].state) != SHOAL_GROUP_FAILED)
		shoal_store_relaxed(&r->regg[g].state, SHOAL_GROUP_DOWN);
	else	/* failed while attached: nothing drains it now */
		shoal__group_count_stranded(r, g);
	/* Requesters waiting on this group re-check its state now. */
	shoal__wake_all_workers(r);
	shoal__note_change(r);
}

/*
 * One reply, built under router->lock and sent after it is released, on a
 * non-blocking socket: a peer that does not read can never hold the lock
 * (and with it the supervisor) in a send.
 */
union ctl_reply {
	struct shoal__ctl_hdr h;
	struct shoal__ctl_welcome w;
	struct shoal__ctl_ok ok;
	struct shoal__ctl_direct d;
	struct shoal__ctl_error e;
};

/* The pid of the process that opened connection `fd` (the kernel's record,
 * not the pid it claimed); 0 if unknown. */
static pid_t conn_peer_pid(int fd)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 ? cred.pid : 0;
}

/*
 * Whether the process that opened connection `fd` has ended (the kernel's
 * record of its peer, not the pid it claimed). A zombie counts as alive
 * until reaped, an unknown peer too: we only answer "dead" when sure.
 */
static bool conn_peer_dead(int fd)
{
	pid_t pid = conn_peer_pid(fd);

	return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

static int handle_hello(struct shoal_router *r, int fd, const struct shoal__ctl_hello *m,
			union ctl_reply *rep, size_t *rep_len, struct shoal_err *err)
{
	struct shoal_group_spec spec = { .name = m->group, .n_workers = m->n_workers,
					 .n_actors = m->n_actors, .node = m->node };
	const struct shoal__ctl_type *types = shoal__ctl_hello_types(m);
	const struct shoal_filter *subs = shoal__ctl_hello_subs(m);
	struct shoal__ctl_welcome *w = &rep->w;
	struct shoal__group_slot *s;
	uint32_t gen, id;
	int g, ret;

	if (conn_group(r, fd) >= 0)
		return shoal__fail(err, -EISCONN, "this connection already registered a group");
	for (uint32_t i = 0; i < m->n_types; i++) {
		ret = shoal__register_type(r, &types[i], err);
		if (ret < 0)
			return ret;
	}
	g = shoal__declare_group(r, &spec, true, err);
	if (g < 0)
		return g;
	s = &r->groups[g];
	if (s->conn >= 0 && conn_peer_dead(s->conn)) {
		/* Its process died but we have not seen the hang-up (late, or
		 * never while a child it forked holds the socket): it left. */
		fprintf(stderr, "shoal: group %s: process %d is gone, its connection dropped\n",
			s->name, (int)s->pid);
		shutdown(s->conn, SHUT_RDWR);   /* the control loop closes it */
		group_left(r, g);
	}
	if (s->conn >= 0)
		return shoal__fail(err, -EEXIST, "group %s is already running (pid %d)", s->name,
				   (int)s->pid);
	if (shoal_load_relaxed(&r->regg[g].state) == SHOAL_GROUP_FAILED)
		return shoal__fail(err, -EHOSTDOWN, "group %s was marked failed", s->name);
	ret = shoal__mailbox_repair(r, g, err);
	if (ret < 0)
		return ret;
	shoal__route_entry_remove(r, 0, g, false);
	for (uint32_t i = 0; i < m->n_subs; i++) {
		struct shoal_filter f = subs[i];

		f.group = (uint16_t)g;
		ret = shoal__route_entry_append(r, &f, g, &id, err);
		if (ret < 0)
			return ret;
	}
	s->conn = fd;
	s->pid = m->pid;
	/* A stop asked for before this process attached still applies. */
	shoal_store_relaxed(&s->hdr->stop, s->stop_wanted ? 1 : 0);
	gen = shoal_load_relaxed(&r->regg[g].gen) + 1;
	shoal_store_relaxed(&r->regg[g].gen, gen);
	shoal_store_relaxed(&r->regg[g].pid, m->pid);
	shoal_store_relaxed(&r->regg[g].attaches, shoal_load_relaxed(&r->regg[g].attaches) + 1);
	shoal_store_relaxed(&r->regg[g].state, SHOAL_GROUP_RUNNING);
	ret = shoal__publish(r, err);
	if (ret < 0)
		return ret;
	memset(w, 0, sizeof(*w));
	shoal__ctl_init(&w->h, SHOAL__CTL_WELCOME, sizeof(*w));
	w->group = (uint16_t)g;
	w->n_workers = s->n_workers;
	w->n_actors = s->n_actors;
	w->gen = gen;
	w->spin_ns = r->dp.spin_ns;
	shoal__name_registry(w->registry, r->system);
	shoal__name_bell(w->bell, r->system);
	shoal__name_mailbox(w->mailbox, r->system, s->name);
	*rep_len = sizeof(*w);
	shoal__note_change(r);
	return 0;
}

static void reply_ok(union ctl_reply *rep, size_t *rep_len, uint32_t id)
{
	memset(&rep->ok, 0, sizeof(rep->ok));
	shoal__ctl_init(&rep->ok.h, SHOAL__CTL_OK, sizeof(rep->ok));
	rep->ok.id = id;
	*rep_len = sizeof(rep->ok);
}

static int handle_open_direct(struct shoal_router *r, int g, const struct shoal__ctl_open_direct *m,
			      union ctl_reply *rep, size_t *rep_len, struct shoal_err *err)
{
	struct shoal__ctl_direct *reply = &rep->d;
	struct shoal__group_slot *dst;
	int ret;

	if (m->dst_group >= r->n_groups || !r->groups[m->dst_group].used)
		return shoal__fail(err, -EINVAL, "no group with id %u", m->dst_group);
	dst = &r->groups[m->dst_group];
	if (m->dst_worker >= dst->n_workers || m->src_worker >= r->groups[g].n_workers)
		return shoal__fail(err, -EINVAL, "worker out of range");
	memset(reply, 0, sizeof(*reply));
	shoal__ctl_init(&reply->h, SHOAL__CTL_DIRECT, sizeof(*reply));
	{
		char base[SHOAL_SEG_REGION_NAME_MAX];

		snprintf(base, sizeof(base), "in.%u.g%d.%u", m->dst_worker, g, m->src_worker);
		ret = shoal__direct_ring(r, (int)m->dst_group, base, reply->ring);
	}
	if (ret < 0)
		return shoal__fail(err, ret, "no room for a direct ring in group %s's mailbox",
				   dst->name);
	/* The receiver looks for new rings when it wakes. */
	shoal_doorbell_notify(&dst->hdr->w[m->dst_worker].in_db);
	*rep_len = sizeof(*reply);
	return 0;
}

/*
 * Send one reply without waiting. The kernel's socket buffer is the
 * connection's whole output queue: a group has one request in flight and
 * reads its reply before the next, so only a peer that does not read its
 * replies fills it. -EAGAIN then, and the caller drops the connection.
 */
static int conn_send(int fd, const void *msg, size_t len)
{
	ssize_t n;

	do
		n = send(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EIO;
}

static int conn_send_error(int fd, int code, const char *msg)
{
	struct shoal__ctl_error e;

	memset(&e, 0, sizeof(e));
	shoal__ctl_init(&e.h, SHOAL__CTL_ERROR, sizeof(e));
	e.err = code;
	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	return conn_send(fd, &e, sizeof(e));
}

/*
 * Handle one packet from `fd`. Returns < 0 to drop the connection: a failed
 * HELLO, a request before HELLO, or a reply the peer has no room for.
 */
static int handle_packet(struct shoal_router *r, int fd, const void *buf, size_t len)
{
	struct shoal_err err = { { 0 } };
	int op = shoal__ctl_check(buf, len, &err), g, ret = 0;
	union ctl_reply rep;
	size_t rep_len = 0;
	uint32_t id = 0;

	if (op < 0) {
		conn_send_error(fd, op, err.msg);
		return op;
	}
	pthread_mutex_lock(&r->lock);
	g = conn_group(r, fd);
	if (op != SHOAL__CTL_HELLO && g < 0) {
		ret = shoal__fail(&err, -ENOTCONN, "send HELLO first");
		goto out;
	}
	switch (op) {
	case SHOAL__CTL_HELLO:
		ret = handle_hello(r, fd, buf, &rep, &rep_len, &err);
		break;
	case SHOAL__CTL_SUB: {
		struct shoal_filter f = ((const struct shoal__ctl_sub *)buf)->f;

		f.group = (uint16_t)g;
		ret = shoal__route_entry_append(r, &f, g, &id, &err);
		if (ret == 0)
			ret = shoal__publish(r, &err);
		if (ret == 0)
			reply_ok(&rep, &rep_len, id);
		break;
	}
	case SHOAL__CTL_UNSUB:
		id = ((const struct shoal__ctl_unsub *)buf)->id;
		if (id == 0 || shoal__route_entry_remove(r, id, g, false) == 0)
			ret = shoal__fail(&err, -ENOENT, "this group has no route %u", id);
		else
			ret = shoal__publish(r, &err);
		if (ret == 0)
			reply_ok(&rep, &rep_len, id);
		break;
	case SHOAL__CTL_OPEN_DIRECT:
		ret = handle_open_direct(r, g, buf, &rep, &rep_len, &err);
		break;
	case SHOAL__CTL_BYE:
		group_left(r, g);
		reply_ok(&rep, &rep_len, 0);
		break;
	default:
		ret = shoal__fail(&err, -EBADMSG, "op %d is not a request", op);
		break;
	}
out:
	pthread_mutex_unlock(&r->lock);
	if (ret < 0 && err.msg[0] != '\0') {
		if (conn_send_error(fd, ret, err.msg) == -EAGAIN)
			return -EAGAIN;
	} else if (ret == 0 && rep_len > 0) {
		int sent = conn_send(fd, &rep, rep_len);

		if (sent < 0)
			return sent;
	}
	/* A failed HELLO ends the connection; a failed request does not. */
	return (ret < 0 && (op == SHOAL__CTL_HELLO || g < 0)) ? ret : 0;
}

static void conn_close(struct shoal_router *r, int ep, int fd)
{
	int g;

	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_lock(&r->lock);
	g = conn_group(r, fd);
	if (g >= 0)
		group_left(r, g);
	pthread_mutex_unlock(&r->lock);
	close(fd);
}

#define CONN_REFUSED (UINT64_C(1) << 32)
#define ACCEPT_BACKOFF_NS (100 * UINT64_C(1000000))
#define ACCEPT_LOG_NS (1000 * UINT64_C(1000000))

/* The control thread's own state (only it touches this). */
struct ctl_loop {
	int ep;
	int spare_fd;              /* held to answer a peer when out of descriptors */
	bool listening;            /* listen_fd is in the epoll set */
	uint64_t resume_ns;        /* re-arm listen_fd at this time; 0: armed */
	uint64_t logged_ns;        /* last "out of descriptors" line */
	uint64_t refused;          /* peers turned away since that line */
};

static void listen_arm(struct shoal_router *r, struct ctl_loop *c, bool on)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)r->listen_fd };

	if (on != c->listening &&
	    epoll_ctl(c->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, r->listen_fd, &ev) == 0)
		c->listening = on;
}

/*
 * accept() failed for want of a descriptor (EMFILE, ENFILE) or of memory.
 * The pending peer stays readable on listen_fd, so simply returning would
 * spin. Instead: give up the spare descriptor, accept the peer with it,
 * tell it why and close it (its attach fails with that reason and its
 * supervisor's policy decides); and if even that fails, stop watching
 * listen_fd for ACCEPT_BACKOFF_NS. Either way, say so on stderr (once a
 * second at most): the router has no other channel to the operator.
 */
static void accept_starved(struct shoal_router *r, struct ctl_loop *c, int e)
{
	uint64_t now = shoal__now_ns();
	char msg[SHOAL_ERR_MSG_MAX];
	int fd = -1;

	snprintf(msg, sizeof(msg), "the router of system %s cannot accept a connection: %s "
		 "(raise the open files limit, ulimit -n)", r->system, strerror(e));
	if (c->spare_fd >= 0) {
		close(c->spare_fd);
		c->spare_fd = -1;
		fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			conn_send_error(fd, -e, msg);
			close(fd);
		}
		c->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0) {
		listen_arm(r, c, false);
		c->resume_ns = now + ACCEPT_BACKOFF_NS;
	}
	c->refused++;
	if (now - c->logged_ns >= ACCEPT_LOG_NS) {
		fprintf(stderr, "shoal: %s; %llu peer%s turned away\n", msg,
			(unsigned long long)c->refused, c->refused == 1 ? "" : "s");
		c->logged_ns = now;
		c->refused = 0;
	}
}

/*
 * Accept a connection. Only the system's owner may attach: peer
 * credentials, not the file mode alone (the socket may be reachable by
 * others). A refused peer is answered at its first request, so that it
 * reads the reason instead of a reset connection. Connections are
 * non-blocking: nothing a peer does (or fails to do) blocks this thread.
 */
static void conn_accept(struct shoal_router *r, struct ctl_loop *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			accept_starved(r, c, errno);
		return;
	}
	ev.data.u64 = (uint64_t)fd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != geteuid())
		ev.data.u64 |= CONN_REFUSED | (uint64_t)cred.uid << 33;
	if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
		char msg[SHOAL_ERR_MSG_MAX];
		int e = errno;

		snprintf(msg, sizeof(msg), "the router of system %s cannot watch a connection: %s",
			 r->system, strerror(e));
		conn_send_error(fd, -e, msg);
		fprintf(stderr, "shoal: %s\n", msg);
		close(fd);
	}
}

static void conn_refuse(struct shoal_router *r, int fd, uint64_t data, void *buf)
{
	char msg[160];

	(void)shoal__ctl_recv(fd, buf, SHOAL__CTL_MAX);
	snprintf(msg, sizeof(msg), "uid %u may not attach to system %s (owner uid %u)",
		 (unsigned)(data >> 33), r->system, (unsigned)geteuid());
	conn_send_error(fd, -EACCES, msg);
}

void *shoal__control_main(void *arg)
{
	struct shoal_router *r = arg;
	struct epoll_event ev = { .events = EPOLLIN }, evs[32];
	struct ctl_loop c = { .ep = epoll_create1(EPOLL_CLOEXEC),
			      .spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC) };
	void *buf = malloc(SHOAL__CTL_MAX);

	if (c.ep < 0 || buf == NULL)
		goto out;
	listen_arm(r, &c, true);
	ev.data.u64 = (uint64_t)r->wake_fd;
	epoll_ctl(c.ep, EPOLL_CTL_ADD, r->wake_fd, &ev);
	while (!atomic_load(&r->dp.stopping)) {
		int timeout = -1, n;

		if (c.resume_ns != 0) {
			uint64_t now = shoal__now_ns();

			if (now >= c.resume_ns) {
				c.resume_ns = 0;
				listen_arm(r, &c, true);
			} else {
				timeout = (int)((c.resume_ns - now) / 1000000) + 1;
			}
		}
		n = epoll_wait(c.ep, evs, 32, timeout);
		for (int i = 0; i < n; i++) {
			int fd = (int)(uint32_t)evs[i].data.u64, len;

			if (fd == r->wake_fd)
				continue;
			if (fd == r->listen_fd) {
				conn_accept(r, &c);
				continue;
			}
			if (evs[i].data.u64 & CONN_REFUSED) {
				if (evs[i].events & EPOLLIN)
					conn_refuse(r, fd, evs[i].data.u64, buf);
				epoll_ctl(c.ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
				continue;
			}
			if (evs[i].events & EPOLLIN) {
				len = shoal__ctl_recv(fd, buf, SHOAL__CTL_MAX);
				if (len == -EAGAIN)
					continue;
				if (len > 0 && handle_packet(r, fd, buf, (size_t)len) == 0)
					continue;
			}
			conn_close(r, c.ep, fd);
		}
	}
out:
	free(buf);
	if (c.spare_fd >= 0)
		close(c.spare_fd);
	if (c.ep >= 0)
		close(c.ep);
	return NULL;
}

/* ---- public calls ----------------------------------------------------- */

int shoal__open_socket(struct shoal_router *r, struct shoal_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (shoal__path_socket(r->sock_path, sizeof(r->sock_path), r->system) < 0 ||
	    strlen(r->sock_path) >= sizeof(sa.sun_path))
		return shoal__fail(err, -ENAMETOOLONG, "control socket path too long");
	strcpy(sa.sun_path, r->sock_path);
	r->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (r->listen_fd < 0)
		return shoal__fail(err, -errno, "socket: %s", strerror(errno));
	unlink(r->sock_path);
	if (bind(r->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    chmod(r->sock_path, r->mode) != 0 || listen(r->listen_fd, 64) != 0)
		return shoal__fail(err, -errno, "cannot listen on %s: %s", r->sock_path,
				   strerror(errno));
	r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->wake_fd < 0)
		return shoal__fail(err, -errno, "eventfd: %s", strerror(errno));
	return 0;
}

int shoal_router_start(struct shoal_router **out, const struct shoal_router_opts *opts,
		       struct shoal_err *err)
{
	return shoal__router_start_mode(out, opts, SHOAL__ROUTE_INDEXED, err);
}

int shoal__router_start_mode(struct shoal_router **out, const struct shoal_router_opts *opts,
			     int route_mode, struct shoal_err *err)
{
	struct shoal_router *r;
	int ret;

	if (opts == NULL)
		return shoal__fail(err, -EINVAL, "no router options");
	ret = shoal__check_name(opts->system, "system", err);
	if (ret < 0)
		return ret;
	if (opts->topology && (opts->topology->n_nodes < 1 ||
			       opts->topology->n_nodes > SHOAL_MAX_NODES))
		return shoal__fail(err, -EINVAL, "described topology has %d nodes (1..%d)",
				   opts->topology->n_nodes, SHOAL_MAX_NODES);
	if (route_mode < SHOAL__ROUTE_INDEXED || route_mode > SHOAL__ROUTE_CHAIN)
		return shoal__fail(err, -EINVAL, "unknown route mode %d", route_mode);
	if (opts->mode != 0 && ((opts->mode & ~0777u) != 0 || (opts->mode & 0600) != 0600))
		return shoal__fail(err, -EINVAL, "router mode %04o must be a permission mode that "
				   "lets the owner read and write", (unsigned)opts->mode);
	if ((opts->mode & 0007) != 0)
		return shoal__fail(err, -EINVAL, "router mode %04o gives every user access to "
				   "the system; allow the owner and at most its group (0600, "
				   "0640, 0660)", (unsigned)opts->mode);
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->route_mode = route_mode;
	snprintf(r->system, sizeof(r->system), "%s", opts->system);
	r->mode = opts->mode ? opts->mode : 0600;
	r->dp.spin_ns = opts->spin_ns ? opts->spin_ns : SHOAL_DOORBELL_SPIN_NS_DEFAULT;
	r->up_cap = opts->uplink_capacity ? opts->uplink_capacity :
					    SHOAL_ROUTER_UPLINK_CAPACITY_DEFAULT;
	r->in_cap = opts->inbound_capacity ? opts->inbound_capacity :
					     SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT;
	r->direct_cap = opts->direct_capacity ? opts->direct_capacity :
						SHOAL_ROUTER_DIRECT_CAPACITY_DEFAULT;
	r->listen_fd = r->wake_fd = -1;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->changed, NULL);
	if (!shoal_ring_size(r->up_cap) || !shoal_ring_size(r->in_cap) ||
	    !shoal_ring_size(r->direct_cap) || r->in_cap < r->up_cap) {
		ret = shoal__fail(err, -EINVAL, "ring capacities must be powers of two, and "
				  "inbound rings at least as large as uplinks");
		goto fail;
	}
	shoal__topology_read(r, opts->topology);
	ret = shoal__claim_system(r, err);
	if (ret < 0)
		goto fail;
	ret = shoal__create_registry(r, err);
	if (ret < 0)
		goto fail;
	ret = shoal__open_socket(r, err);
	if (ret < 0)
		goto fail;
	pthread_mutex_lock(&r->lock);
	ret = shoal__publish(r, err);
	pthread_mutex_unlock(&r->lock);
	if (ret < 0)
		goto fail;
	ret = pthread_create(&r->control, NULL, shoal__control_main, r);
	if (ret != 0) {
		ret = shoal__fail(err, -ret, "cannot start the control thread");
		goto fail;
	}
	r->control_started = true;
	ret = pthread_create(&r->watch, NULL, shoal__watch_main, r);
	if (ret != 0) {
		ret = shoal__fail(err, -ret, "cannot start the watch thread");
		goto fail;
	}
	r->watch_started = true;
	*out = r;
	return 0;
fail:
	shoal_router_destroy(r);
	return ret;
}

int shoal_router_group(struct shoal_router *r, const struct shoal_group_spec *spec,
		       struct shoal_err *err)
{
	int ret;

	pthread_mutex_lock(&r->lock);
	ret = shoal__declare_group(r, spec, false, err);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int shoal_router_group_id(struct shoal_router *r, const char *name)
{
	int ret;

	pthread_mutex_lock(&r->lock);
	ret = shoal__find_group(r, name);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int shoal_router_declare_type(struct shoal_router *r, uint32_t id, const char *name,
			      uint32_t max_size, struct shoal_err *err)
{
	struct shoal__ctl_type t = { .id = id, .max_size = max_size };
	int ret;

	if (id == 0 || name == NULL || name[0] == '\0' || strlen(name) >= sizeof(t.name))
		return shoal__fail(err, -EINVAL, "a message type needs an id other than 0 and a "
				   "name of 1 to %zu characters", sizeof(t.name) - 1);
	memcpy(t.name, name, strlen(name));
	pthread_mutex_lock(&r->lock);
	ret = shoal__register_type(r, &t, err);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int shoal_router_add_route(struct shoal_router *r, const struct shoal_filter *f, uint32_t *id,
			   struct shoal_err *err)
{
	uint32_t tmp;
	int ret;

	pthread_mutex_lock(&r->lock);
	ret = shoal__route_entry_append(r, f, -1, id ? id : &tmp, err);
	if (ret == 0)
		ret = shoal__publish(r, err);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int shoal_router_set_routes(struct shoal_router *r, const struct shoal_filter *f, uint32_t n,
			    struct shoal_err *err)
{
	struct shoal__route_entry *saved;
	uint32_t n_saved, id;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	saved = malloc((r->n_routes + 1) * sizeof(*saved));
	if (saved == NULL) {
		pthread_mutex_unlock(&r->lock);
		return -ENOMEM;
	}
	if (r->n_routes > 0)
		memcpy(saved, r->routes, r->n_routes * sizeof(*saved));
	n_saved = r->n_routes;
	shoal__route_entry_remove(r, 0, -1, false);
	for (uint32_t i = 0; i < n && ret == 0; i++)
		ret = shoal__route_entry_append(r, &f[i], -1, &id, err);
	if (ret == 0)
		ret = shoal__publish(r, err);
	if (ret < 0) {
		/* All or nothing: put the old set back (ids unchanged). */
		if (n_saved > 0)
			memcpy(r->routes, saved, n_saved * sizeof(*saved));
		r->n_routes = n_saved;
	}
	free(saved);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

void shoal_router_hold(struct shoal_router *r, bool hold)
{
	atomic_store(&r->dp.held, hold);
	for (int d = 0; d < SHOAL_MAX_NODES && !hold; d++)
		if (r->bell != NULL)
			shoal_doorbell_notify(&r->bell->disp[d]);
}

void shoal_router_stats(struct shoal_router *r, struct shoal_router_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&r->lock);
	st->groups = r->n_groups;
	st->routes = r->n_routes;
	for (int d = 0; d < r->n_disp; d++) {
		const struct shoal__reg_dispatcher *rd = &r->reg->disp[d];

		/* Relaxed: display counters. */
		st->routed += shoal_load_relaxed(&rd->messages);
		st->delivered += shoal_load_relaxed(&rd->delivered);
		st->dropped += shoal_load_relaxed(&rd->dropped_full) +
			       shoal_load_relaxed(&rd->dropped_dead) +
			       shoal_load_relaxed(&rd->no_route) + shoal_load_relaxed(&rd->malformed);
	}
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *s = &r->groups[g];
		uint32_t attaches = shoal_load_relaxed(&r->regg[g].attaches);

		if (!s->used)
			continue;
		st->running += s->conn >= 0;
		st->failed += shoal_load_relaxed(&r->regg[g].state) == SHOAL_GROUP_FAILED;
		st->dropped += shoal_load_relaxed(&r->regg[g].lost_queued);
		st->restarts += attaches > 1 ? attaches - 1 : 0;
		for (unsigned w = 0; w < s->n_workers; w++) {
			st->handled += shoal_load_relaxed(&s->hdr->w[w].handled);
			st->sent_direct += shoal_load_relaxed(&s->hdr->w[w].sent_direct);
		}
	}
	pthread_mutex_unlock(&r->lock);
}

int shoal_router_remove_route(struct shoal_router *r, uint32_t id)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&r->lock);
	if (id != 0 && shoal__route_entry_remove(r, id, -1, true) > 0)
		ret = shoal__publish(r, NULL);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

static bool any_attached(struct shoal_router *r)
{
	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used && r->groups[g].conn >= 0)
			return true;
	return false;
}

static void deadline_after(struct timespec *ts, int64_t ns)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ns / 1000000000;
	ts->tv_nsec += ns % 1000000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static void ask_stop(struct shoal_router *r, int g)
{
	struct shoal__group_slot *s = &r->groups[g];

	s->stop_wanted = true;
	shoal_store_relaxed(&s->hdr->stop, 1);
	if (s->conn >= 0)
		shoal_store_relaxed(&r->regg[g].state, SHOAL_GROUP_STOPPING);
	for (unsigned w = 0; w < s->n_workers; w++) {
		shoal_doorbell_notify(&s->hdr->w[w].in_db);
		shoal_doorbell_notify(&s->hdr->w[w].up_db);
		shoal_doorbell_notify(&s->hdr->w[w].space_db);
	}
}

int shoal_router_stop_group(struct shoal_router *r, int id)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&r->lock);
	if (id >= 0 && (uint32_t)id < r->n_groups && r->groups[id].used) {
		ask_stop(r, id);
		ret = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int shoal_router_stop_groups(struct shoal_router *r, int64_t timeout_ns)
{
	struct timespec ts;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	shoal_store_relaxed(&r->reg->state, 2);
	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used)
			ask_stop(r, (int)g);
	deadline_after(&ts, timeout_ns);
	while (any_attached(r) && ret == 0)
		ret = -pthread_cond_timedwait(&r->changed, &r->lock, &ts);
	pthread_mutex_unlock(&r->lock);
	return ret == 0 ? 0 : -ETIMEDOUT;
}

int shoal_router_fail_group(struct shoal_router *r, int id)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&r->lock);
	if (id >= 0 && (uint32_t)id < r->n_groups && r->groups[id].used) {
		bool was_failed = shoal_load_relaxed(&r->regg[id].state) == SHOAL_GROUP_FAILED;

		shoal_store_relaxed(&r->regg[id].state, SHOAL_GROUP_FAILED);
		ret = shoal__publish(r, NULL);
		/* After the publish no dispatcher delivers to it any more: what
		 * its rings hold now is all it will ever hold, and no process may
		 * attach to drain it. A process still attached may drain some:
		 * group_left() counts when it leaves. */
		if (!was_failed && r->groups[id].conn < 0)
			shoal__group_count_stranded(r, id);
		shoal__wake_all_workers(r);
		shoal__note_change(r);
	}
	pthread_mutex_unlock(&r->lock);
	return ret;
}

uint64_t shoal__router_count_stranded(struct shoal_router *r)
{
	uint64_t total = 0;

	pthread_mutex_lock(&r->lock);
	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used && r->groups[g].conn < 0 &&
		    shoal_load_relaxed(&r->regg[g].state) != SHOAL_GROUP_FAILED)
			total += shoal__group_count_stranded(r, (int)g);
	pthread_mutex_unlock(&r->lock);
	return total;
}

pid_t shoal_router_group_pid(struct shoal_router *r, int id)
{
	pid_t pid = 0;

	pthread_mutex_lock(&r->lock);
	if (id >= 0 && (uint32_t)id < r->n_groups && r->groups[id].used)
		pid = r->groups[id].conn >= 0 ? r->groups[id].pid : 0;
	pthread_mutex_unlock(&r->lock);
	return pid;
}

int shoal_router_wait_change(struct shoal_router *r, int64_t timeout_ns)
{
	struct timespec ts;
	uint64_t seen;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	seen = r->change_count;
	deadline_after(&ts, timeout_ns);
	while (r->change_count == seen && ret == 0)
		ret = pthread_cond_timedwait(&r->changed, &r->lock, &ts);
	pthread_mutex_unlock(&r->lock);
	return ret == 0 ? 0 : -ETIMEDOUT;
}

void shoal_router_destroy(struct shoal_router *r)
{
	char name[SHOAL_SEG_NAME_MAX];
	uint64_t one = 1;

	if (r == NULL)
		return;
	atomic_store(&r->dp.stopping, true);
	if (r->control_started) {
		if (write(r->wake_fd, &one, sizeof(one)) < 0)
			pthread_cancel(r->control);
		pthread_join(r->control, NULL);
	}
	if (r->watch_started)
		pthread_join(r->watch, NULL);
	for (int d = 0; d < r->n_disp; d++) {
		shoal_doorbell_notify(&r->bell->disp[d]);
		shoal__dispatcher_stop(r->disp[d]);
	}
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *s = &r->groups[g];

		if (!s->used)
			continue;
		if (s->conn >= 0)
			close(s->conn);
		shoal__name_mailbox(name, r->system, s->name);
		shoal_seg_detach(&s->mbx);
		shoal_seg_unlink(name);
		free(s->dir);
	}
	for (uint32_t i = 0; i < r->n_old_mbx; i++)
		shoal_seg_detach(&r->old_mbx[i]);
	free(r->old_mbx);
	free(r->retired);
	shoal__snapshot_free(r->dp.snap);
	if (r->listen_fd >= 0) {
		close(r->listen_fd);
		unlink(r->sock_path);
	}
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	if (r->reg != NULL) {
		shoal__name_registry(name, r->system);
		shoal_seg_detach(&r->reg_seg);
		shoal_seg_unlink(name);
		shoal__name_bell(name, r->system);
		shoal_seg_detach(&r->bell_seg);
		shoal_seg_unlink(name);
	}
	free(r->routes);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->changed);
	free(r);
}
