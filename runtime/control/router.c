/* SPDX-License-Identifier: MIT */
/*
 * The router's public calls (include/shoal/router.h) and the helpers its
 * files share. The control side is split by job:
 *
 *   placement.c  the topology, the node of each group, one dispatcher per
 *                node in use
 *   snapshot.c   message types, routes, and publishing the routing snapshot
 *                the dispatchers read (DESIGN invariant 5)
 *   registry.c   the registry and doorbell segments, the groups' mailboxes
 *                and their rings, a dead system's leftovers at start
 *   damage.c     condemned rings and damaged mailboxes (DESIGN invariant
 *                10), and the watch thread
 *   server.c     the control socket and the control thread
 *
 * Concurrency: every public call, the control thread and the watch thread
 * take router->lock; dispatchers never do (they see only the published
 * snapshot and struct shoal__dispatch_shared).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>

#include "runtime/control/baseline.h"
#include "runtime/control/proto.h"
#include "runtime/control/router_impl.h"
#include "runtime/control/supervisor.h"
#include "shm/util.h"

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

/* A set of ring roles (enum shoal__ring_role), for next_ring(). */
#define ROLE(r) (1u << (r))

/*
 * Group g's rings whose role is in `roles` (ROLE() bits), one at a time:
 * *at starts at 0 and goes on past each ring returned. Returns the ring's
 * memory and sets *len, or NULL when there is no more. Lock held.
 */
static const void *next_ring(struct shoal__group_slot *s, uint32_t *at, uint32_t roles,
			     uint64_t *len)
{
	uint32_t n = shoal_seg_dir_count(&s->mbx);

	for (; *at < n; (*at)++) {
		struct shoal_seg_region reg;
		const void *mem;

		if (shoal_seg_region_at(&s->mbx, *at, &reg) < 0 || reg.kind != SHOAL_SEG_KIND_RING ||
		    reg.tag.role >= 32 || !(roles & ROLE(reg.tag.role)))
			continue;
		mem = shoal_seg_ptr(&s->mbx, reg.off, reg.len, 128);
		if (mem == NULL)
			continue;
		(*at)++;
		*len = reg.len;
		return mem;
	}
	return NULL;
}

/* Records queued in group g's rings whose role is in `roles`. Lock held.
 * A ring that fails its check (damaged) adds nothing: that is the damage
 * report's to count. */
static uint64_t queued_in(struct shoal_router *r, int g, uint32_t roles)
{
	uint64_t total = 0, len;
	const void *mem;
	uint32_t at = 0;

	while ((mem = next_ring(&r->groups[g], &at, roles, &len))) {
		struct shoal_ring_stats st;
		struct shoal_err err;
		int k = shoal_ring_check(mem, len, &st, &err);

		if (k > 0)
			total += (uint64_t)k;
	}
	return total;
}

/* Add n to group g's lost_queued counter. Lock held. */
static void count_lost_queued(struct shoal_router *r, int g, uint64_t n)
{
	/* Relaxed: a counter for display; this thread is its only writer. */
	shoal_store_relaxed(&r->regg[g].lost_queued,
			    shoal_load_relaxed(&r->regg[g].lost_queued) + n);
}

/*
 * Count the records still queued in group g's inbound rings (those of the
 * dispatchers and the direct ones) into its lost_queued counter, for a
 * group no process will drain any more. Lock held. Returns the count.
 */
uint64_t shoal__group_count_stranded(struct shoal_router *r, int g)
{
	uint64_t total = queued_in(r, g, ROLE(SHOAL__RING_DISPATCHED) | ROLE(SHOAL__RING_DIRECT));

	count_lost_queued(r, g, total);
	return total;
}

/* ---- public calls ----------------------------------------------------- */

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
	if (opts->yield_ns > UINT64_C(1000000000))
		return shoal__fail(err, -EINVAL, "router yield of %llu ns is longer than 1s",
				   (unsigned long long)opts->yield_ns);
	if (opts->stream < SHOAL_STREAM_AUTO || opts->stream > SHOAL_STREAM_OFF)
		return shoal__fail(err, -EINVAL, "stream mode %d is none of SHOAL_STREAM_AUTO, "
				   "_ON and _OFF", opts->stream);
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
	r->dp.yield_ns = opts->yield_ns;
	r->dp.wake_deadline_ns = opts->wake_deadline_ns ? opts->wake_deadline_ns :
							  SHOAL_ROUTER_WAKE_DEADLINE_DEFAULT;
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
	ret = shoal__topology_read(r, opts->topology, err);
	if (ret < 0)
		goto fail;
	ret = shoal__stream_choose(r, opts->stream, err);
	if (ret < 0)
		goto fail;
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
	/* With the dispatchers' CPUs (node 0's): the plain reference of
	 * shoal-bench-system pins its waker the same way. */
	ret = shoal__waker_start(&r->dp, r->node_cpus[0], &r->waker);
	if (ret < 0) {
		ret = shoal__fail(err, ret, "cannot start the waker thread");
		goto fail;
	}
	*out = r;
	return 0;
fail:
	shoal_router_destroy(r);
	return ret;
}

int shoal_router_group(struct shoal_router *r, const struct shoal_group_spec *spec,
		       struct shoal_err *err)
{
	return shoal__router_group_on(r, spec, -1, err);
}

int shoal__router_group_on(struct shoal_router *r, const struct shoal_group_spec *spec, int host,
			   struct shoal_err *err)
{
	int ret;

	pthread_mutex_lock(&r->lock);
	ret = shoal__declare_group(r, spec, false, host, err);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

void shoal__router_bridge_rings(struct shoal_router *r, bool bridge)
{
	r->bridge_cap = bridge ? shoal__bridge_ring_cap(r->in_cap, r->direct_cap) : 0;
}

void shoal__router_set_bridge(struct shoal_router *r, int id, uint32_t spin_ns)
{
	/* Relaxed: set before any group process starts (the supervisor
	 * declares the groups, then starts them); the attach's control reply
	 * orders it before a sender's first look. */
	shoal_store_relaxed(&r->reg->remote_spin_ns, id < 0 ? 0u : spin_ns);
	shoal_store_relaxed(&r->reg->bridge, id < 0 ? 0u : (uint32_t)id + 1);
}

uint64_t shoal__router_hosts_down(struct shoal_router *r, int bridge)
{
	uint64_t down = 0;

	pthread_mutex_lock(&r->lock);
	if (bridge >= 0 && (uint32_t)bridge < r->n_groups && r->groups[bridge].used &&
	    r->groups[bridge].hdr != NULL)
		/* Relaxed: a hint the bridge keeps up to date; the caller
		 * bounds it to the file's hosts (it is the bridge's word). */
		down = shoal_load_relaxed(&r->groups[bridge].hdr->hosts_down);
	pthread_mutex_unlock(&r->lock);
	return down;
}

void shoal__router_mark_host(struct shoal_router *r, const int *ids, uint32_t n, bool down)
{
	pthread_mutex_lock(&r->lock);
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= 0 && (uint32_t)ids[i] < r->n_groups && r->groups[ids[i]].used &&
		    shoal_load_relaxed(&r->regg[ids[i]].remote_host) != 0)
			r->groups[ids[i]].host_down = down;
	pthread_mutex_unlock(&r->lock);
}

void shoal__router_show_hosts(struct shoal_router *r)
{
	pthread_mutex_lock(&r->lock);
	for (uint32_t g = 0; g < r->n_groups; g++) {
		if (!r->groups[g].used || shoal_load_relaxed(&r->regg[g].remote_host) == 0)
			continue;
		/* Relaxed: senders read it as a hint, as they read live_routes,
		 * which the publish before this call already set; waiting
		 * requesters re-check it when woken below. */
		shoal_store_relaxed(&r->regg[g].state, r->groups[g].host_down ? SHOAL_GROUP_FAILED :
										 SHOAL_GROUP_DOWN);
	}
	shoal__wake_all_workers(r);
	shoal__note_change(r);
	pthread_mutex_unlock(&r->lock);
}

int shoal_router_group_id(struct shoal_router *r, const char *name)
{
	int ret;

	if (name == NULL)
		return -EINVAL;
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

int shoal_router_stream(struct shoal_router *r, uint32_t *probe_ns)
{
	if (probe_ns != NULL)
		*probe_ns = r->stream_probe_ns;
	return r->stream;
}

void shoal_router_stats(struct shoal_router *r, struct shoal_router_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&r->lock);
	st->routes = r->n_routes;
	for (int d = 0; d < r->n_disp; d++) {
		const struct shoal__reg_dispatcher *rd = &r->reg->disp[d];

		/* Relaxed: display counters. */
		st->routed += shoal_load_relaxed(&rd->messages);
		st->delivered += shoal_load_relaxed(&rd->delivered);
		st->dropped += shoal_load_relaxed(&rd->dropped_full) +
			       shoal_load_relaxed(&rd->dropped_dead) +
			       shoal_load_relaxed(&rd->no_route) + shoal_load_relaxed(&rd->malformed);
		st->lost += shoal_load_relaxed(&rd->dropped_corrupt);
	}
	st->lost += shoal_load_relaxed(&r->reg->lost_released);
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *s = &r->groups[g];
		uint32_t attaches = shoal_load_relaxed(&r->regg[g].attaches);

		if (!s->used)
			continue;   /* a run-time group's slot, freed */
		st->groups++;
		st->running += s->conn >= 0;
		st->failed += shoal_load_relaxed(&r->regg[g].state) == SHOAL_GROUP_FAILED;
		st->dropped += shoal_load_relaxed(&r->regg[g].lost_queued);
		st->lost += shoal_load_relaxed(&r->regg[g].lost_corrupt);
		st->damaged += shoal_load_relaxed(&r->regg[g].damaged);
		st->restarts += attaches > 1 ? attaches - 1 : 0;
		for (unsigned w = 0; w < s->n_workers; w++) {
			st->handled += shoal_load_relaxed(&s->hdr->w[w].handled);
			st->sent_direct += shoal_load_relaxed(&s->hdr->w[w].sent_direct);
			st->lost += shoal_load_relaxed(&s->hdr->w[w].lost_corrupt) +
				    shoal_load_relaxed(&s->hdr->w[w].fwd_lost);
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
	else if (shoal_load_relaxed(&r->regg[g].state) != SHOAL_GROUP_FAILED)
		shoal_store_relaxed(&r->regg[g].state, SHOAL_GROUP_STOPPED);
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

int shoal_router_resume_group(struct shoal_router *r, int id)
{
	struct shoal__group_slot *s;

	pthread_mutex_lock(&r->lock);
	if (id < 0 || (uint32_t)id >= r->n_groups || !r->groups[id].used) {
		pthread_mutex_unlock(&r->lock);
		return -ENOENT;
	}
	s = &r->groups[id];
	/* An attached process keeps its stop flag: it was asked and may be
	 * draining already; group_left() in server.c settles the state. */
	s->stop_wanted = false;
	if (s->conn < 0) {
		shoal_store_relaxed(&s->hdr->stop, 0);
		if (shoal_load_relaxed(&r->regg[id].state) == SHOAL_GROUP_STOPPED)
			shoal_store_relaxed(&r->regg[id].state, SHOAL_GROUP_DOWN);
	}
	pthread_mutex_unlock(&r->lock);
	return 0;
}

int shoal_router_stop_groups(struct shoal_router *r, int64_t timeout_ns)
{
	struct timespec ts;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	shoal_store_relaxed(&r->reg->state, SHOAL__SYS_STOPPING);
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
		 * group_left() in server.c counts when it leaves. */
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
		    shoal_load_relaxed(&r->regg[g].state) != SHOAL_GROUP_FAILED) {
			/* What its uplinks still hold was sent and will never be
			 * routed: the stop sequence waited for the dispatchers
			 * until nothing moved (drain_before() in sup_stop.c). */
			uint64_t up = queued_in(r, (int)g, ROLE(SHOAL__RING_UPLINK));

			count_lost_queued(r, (int)g, up);
			total += shoal__group_count_stranded(r, (int)g) + up;
		}
	pthread_mutex_unlock(&r->lock);
	return total;
}

uint64_t shoal__router_uplink_bytes(struct shoal_router *r, int id)
{
	uint64_t total = 0, len;
	const void *mem;
	uint32_t at = 0;

	pthread_mutex_lock(&r->lock);
	if (id >= 0 && (uint32_t)id < r->n_groups && r->groups[id].used)
		while ((mem = next_ring(&r->groups[id], &at, ROLE(SHOAL__RING_UPLINK), &len))) {
			struct shoal_ring_stats st;
			struct shoal_err err;

			if (shoal_ring_stats(mem, len, &st, &err) == 0 && !shoal_ring_condemned(mem, len))
				total += st.used;
		}
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
	if (r->waker != NULL) {
		shoal_doorbell_notify(&r->bell->waker);
		shoal__waker_stop(r->waker);
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
	shoal__topology_free(r);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->changed);
	free(r);
}
