/* SPDX-License-Identifier: MIT */
/*
 * The router's routing state and its publishing: the message types, the
 * route list, and the snapshot the dispatchers read.
 *
 * Publishing (DESIGN invariant 5): every change (a route added or removed, a
 * group declared, a dispatcher started) rebuilds a complete snapshot: the
 * flat filter vector with its derived index (runtime/route/index.c), the
 * destination table and each dispatcher's uplink list. The snapshot is
 * swapped in with one rcu_xchg_pointer() and the old one is freed after
 * synchronize_rcu(). Dispatchers read it under the QSBR flavour of liburcu
 * (see docs/design.md for the measurement behind that choice): they never
 * take a lock and never wait for the control side.
 *
 * Ordering guarantees:
 *   R1 rcu_xchg_pointer() (release) pairs with A1 rcu_dereference() in the
 *      dispatchers: a dispatcher that sees a snapshot sees it fully built,
 *      including every ring it points to (initialised before the publish).
 *   R2 (type id store-release) pairs with A2 in group processes reading the
 *      type table: a type with a non-zero id has its name and size set.
 *
 * Concurrency: everything here runs with router->lock held; dispatchers
 * never take it. synchronize_rcu() runs under the lock, so publishes are
 * serialised; dispatchers pass a quiescent state after every pass and go
 * offline before sleeping, so a grace period takes about one pass.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/doorbell.h>

#include "runtime/control/proto.h"
#include "runtime/control/router_impl.h"
#include "shm/util.h"

void shoal__snapshot_free(struct shoal__snapshot *s)
{
	if (s == NULL)
		return;
	shoal__route_free(s->routes);
	for (int d = 0; d < SHOAL_MAX_NODES; d++)
		free(s->uplinks[d]);
	free(s);
}

static int snapshot_build(struct shoal_router *r, struct shoal__snapshot **out,
			  struct shoal_err *err)
{
	struct shoal__snapshot *s = calloc(1, sizeof(*s));
	struct shoal_filter *fv = NULL;
	int ret;

	if (s == NULL)
		return -ENOMEM;
	s->version = ++r->version;
	s->n_disp = (uint32_t)r->n_disp;
	if (r->n_routes > 0) {
		fv = malloc(r->n_routes * sizeof(*fv));
		if (fv == NULL) {
			free(s);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < r->n_routes; i++)
			fv[i] = r->routes[i].f;
	}
	ret = shoal__route_build(&s->routes, fv, r->n_routes, r->route_mode, err);
	free(fv);
	if (ret < 0) {
		free(s);
		return ret;
	}
	s->max_matches = shoal__route_max_matches(s->routes);
	s->n_groups = r->n_groups;
	for (int d = 0; d < r->n_disp; d++) {
		s->uplinks[d] = calloc((size_t)r->n_groups * SHOAL_MAX_WORKERS + 1,
				       sizeof(struct shoal__snap_uplink));
		if (s->uplinks[d] == NULL) {
			shoal__snapshot_free(s);
			return -ENOMEM;
		}
	}
	for (uint32_t g = 0; g < r->n_groups; g++) {
		struct shoal__group_slot *gs = &r->groups[g];
		struct shoal__snap_group *sg = &s->groups[g];
		int d_own = shoal__dispatcher_of_node(r, gs->node);

		if (!gs->used)
			continue;
		sg->used = true;
		sg->state = gs->host_down ? SHOAL_GROUP_FAILED :
					    (uint8_t)shoal_load_relaxed(&r->regg[g].state);
		sg->n_workers = gs->n_workers;
		sg->n_actors = gs->n_actors;
		sg->overflow = gs->overflow;
		sg->reg = &r->regg[g];
		sg->mbx = gs->hdr;
		/* The router's own records of the rings, never the mailbox's
		 * directory: a peer that damages the directory cannot make a
		 * dispatcher skip the group or write elsewhere. */
		for (unsigned w = 0; w < gs->n_workers; w++) {
			struct shoal__snap_uplink *u;

			for (int d = 0; d < r->n_disp; d++) {
				sg->in[w * SHOAL_MAX_NODES + (unsigned)d] = gs->in[w][d].mem;
				if (gs->in[w][d].mem != NULL)
					sg->in_len = gs->in[w][d].len;
			}
			u = &s->uplinks[d_own][s->n_uplinks[d_own]++];
			u->group = (uint16_t)g;
			u->worker = (uint16_t)w;
			u->mw = &gs->hdr->w[w];
			u->ring = gs->up[w].mem;
			u->len = gs->up[w].len;
		}
	}
	*out = s;
	return 0;
}

/* Routes listing type `id` that lead somewhere: not to a failed group, nor
 * to one of a host marked down. */
static uint32_t live_routes(const struct shoal_router *r, uint32_t id)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->n_routes; i++) {
		const struct shoal_filter *f = &r->routes[i].f;
		bool lists = false;

		for (uint32_t k = 0; k < f->n_types && k < SHOAL_FILTER_MAX_TYPES; k++)
			lists = lists || f->types[k] == id;
		if (lists && (f->mode == SHOAL_ROUTE_DISCARD ||
			      (f->group < r->n_groups &&
			       shoal_load_relaxed(&r->regg[f->group].state) != SHOAL_GROUP_FAILED &&
			       !r->groups[f->group].host_down)))
			n++;
	}
	return n;
}

/* Rebuild and publish. Called with r->lock held. */
int shoal__publish(struct shoal_router *r, struct shoal_err *err)
{
	struct shoal__snapshot *s, *old;
	int ret = snapshot_build(r, &s, err);

	if (ret < 0)
		return ret;
	for (uint32_t t = 0; t < SHOAL__MAX_TYPES; t++) {
		uint32_t id = shoal_load_relaxed(&r->types[t].id);

		if (id == 0)
			continue;
		/* Relaxed: hints for send's no-route and dead-route checks. */
		shoal_store_relaxed(&r->types[t].routes, shoal__route_type_filters(s->routes, id));
		shoal_store_relaxed(&r->types[t].live_routes, live_routes(r, id));
	}
	/* R1: pairs with A1 (rcu_dereference) in the dispatchers. */
	old = SHOAL__SNAP_PUBLISH(r->dp.snap, s);
	shoal_store_relaxed(&r->reg->route_version, s->version);
	shoal_store_relaxed(&r->reg->n_routes, r->n_routes);
	if (old != NULL) {
		synchronize_rcu();
		SHOAL__SNAP_GRACE(r->dp.snap);
		shoal__snapshot_free(old);
	}
	/* A new dispatcher or new rings: make sure sleeping dispatchers look. */
	for (int d = 0; d < r->n_disp; d++)
		shoal_doorbell_notify(&r->bell->disp[d]);
	return 0;
}

/* Register a type, or check it against the registered one. */
int shoal__register_type(struct shoal_router *r, const struct shoal__ctl_type *t,
			 struct shoal_err *err)
{
	uint32_t free_slot = UINT32_MAX;

	/* As group attach and --check refuse it: it could never be sent. */
	if (t->max_size > SHOAL_TYPE_MAX_SIZE)
		return shoal__fail(err, -EINVAL, "message type %u: max size %u is over the limit "
				   "of %u bytes", t->id, t->max_size, SHOAL_TYPE_MAX_SIZE);
	for (uint32_t i = 0; i < SHOAL__MAX_TYPES; i++) {
		struct shoal__reg_type *rt = &r->types[i];
		uint32_t id = shoal_load_relaxed(&rt->id);

		if (id == t->id) {
			if (rt->max_size != t->max_size || strcmp(rt->name, t->name) != 0)
				return shoal__fail(err, -EEXIST, "message type %u is '%s' (max %u "
						   "bytes) in this system, '%s' (max %u bytes) in "
						   "this program", t->id, rt->name, rt->max_size,
						   t->name, t->max_size);
			return 0;
		}
		if (id == 0 && free_slot == UINT32_MAX)
			free_slot = i;
	}
	if (free_slot == UINT32_MAX)
		return shoal__fail(err, -ENOSPC, "the system already has %u message types",
				   SHOAL__MAX_TYPES);
	r->types[free_slot].max_size = t->max_size;
	memcpy(r->types[free_slot].name, t->name, sizeof(t->name));
	/* R2: pairs with A2 in group processes: name and size before the id. */
	shoal_store_release(&r->types[free_slot].id, t->id);
	return 0;
}

static bool same_filter(const struct shoal_filter *a, const struct shoal_filter *b)
{
	struct shoal_filter x = *a, y = *b;

	x.id = y.id = 0;
	return memcmp(&x, &y, sizeof(x)) == 0;
}

/* Append a route (no publish). Called with r->lock held. */
int shoal__route_entry_append(struct shoal_router *r, const struct shoal_filter *f, int owner,
			      uint32_t *id, struct shoal_err *err)
{
	struct shoal__route_entry *routes;
	int ret = shoal_filter_validate(f, err);

	if (ret < 0)
		return ret;
	if (f->group >= r->n_groups || !r->groups[f->group].used)
		return shoal__fail(err, -EINVAL, "route to group id %u, which is not declared",
				   f->group);
	for (uint32_t i = 0; i < r->n_routes; i++)
		if (r->routes[i].owner == owner && same_filter(&r->routes[i].f, f)) {
			*id = r->routes[i].f.id;
			return 0;
		}
	routes = shoal__grow(r->routes, &r->cap_routes, r->n_routes, sizeof(*routes), 64);
	if (routes == NULL)
		return -ENOMEM;
	r->routes = routes;
	r->routes[r->n_routes].f = *f;
	r->routes[r->n_routes].f.id = ++r->next_route_id;
	r->routes[r->n_routes].owner = owner;
	*id = r->routes[r->n_routes].f.id;
	r->n_routes++;
	return 0;
}

/* Remove routes matching (id, owner); id 0 means all of the owner's. */
uint32_t shoal__route_entry_remove(struct shoal_router *r, uint32_t id, int owner, bool any_owner)
{
	uint32_t kept = 0, removed = 0;

	for (uint32_t i = 0; i < r->n_routes; i++) {
		bool match = (id == 0 || r->routes[i].f.id == id) &&
			     (any_owner || r->routes[i].owner == owner);

		if (match)
			removed++;
		else
			r->routes[kept++] = r->routes[i];
	}
	r->n_routes = kept;
	return removed;
}
