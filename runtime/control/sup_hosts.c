/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's side of a system on several hosts (docs/hosts.md): the
 * built-in group `bridge` that a host with peers runs, the routes of groups
 * on other hosts, turned into routes to that bridge, and the hosts the
 * bridge says are away, whose groups are marked down (and up again when
 * they come back). On a host without peers, or without hosts in its file,
 * none of this changes anything: the config's routes are applied as they are.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/sup_impl.h"
#include "shm/util.h"

#define BRIDGE_ARGC 5   /* shoal bridge --host NAME FILE */

/* ---- the bridge group ------------------------------------------------------------------------ */

/* Free what bridge_group() made of g, whichever of its strings it made. */
static void bridge_group_free(struct shoal__cfg_group *g)
{
	for (int i = 0; g->argv != NULL && i < BRIDGE_ARGC; i++)
		free(g->argv[i]);
	free(g->argv);
	free(g->program);
}

/*
 * The built-in group of a host with peers (docs/hosts.md): `shoal bridge
 * --host NAME FILE`, run by this very `shoal`, so that it reads the file as
 * the supervisor did. Appended after the file's groups, whose ids thus
 * stay the same on every host. It stops after them (it carries what they
 * send until they are gone), and restarts by the same policy code as any
 * group, with no retry limit: a host without its bridge is cut off.
 */
static int bridge_group(const struct sup *s, const struct shoal__config *c,
			struct shoal__cfg_group *g, struct shoal_err *err)
{
	static const char *const fixed[] = { "bridge", "--host" };
	char *path = realpath(c->path, NULL);
	int32_t last = 0;

	memset(g, 0, sizeof(*g));
	if (path == NULL)
		return shoal__fail(err, -errno, "%s: %s", c->path, strerror(errno));
	g->argv = calloc(BRIDGE_ARGC + 1, sizeof(char *));
	g->program = strdup(s->o->bridge_program);
	if (g->argv == NULL || g->program == NULL) {
		free(path);
		bridge_group_free(g);
		return shoal__fail(err, -ENOMEM, "out of memory");
	}
	g->argv[4] = path;
	g->argv[0] = strdup(g->program);
	g->argv[1] = strdup(fixed[0]);
	g->argv[2] = strdup(fixed[1]);
	g->argv[3] = strdup(c->hosts[s->host].name);
	if (g->argv[0] == NULL || g->argv[1] == NULL || g->argv[2] == NULL || g->argv[3] == NULL) {
		bridge_group_free(g);
		return shoal__fail(err, -ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < c->n_groups; i++)
		if (c->groups[i].stop_order > last)
			last = c->groups[i].stop_order;
	snprintf(g->name, sizeof(g->name), "%s", SHOAL__BRIDGE_GROUP);
	g->workers = 1;
	g->actors = 1;
	g->node = -1;
	g->restart = SHOAL__RESTART_ON_FAILURE;
	g->max_retries = -1;
	g->backoff_ms = 100;
	g->max_backoff_ms = 5000;
	g->stop_order = last + 1;
	g->stop_timeout_ms = 5000;
	g->host = s->host;
	return 0;
}

/* Append the bridge to c's groups when this host has peers. Returns 0, or a
 * negative errno with the reason in *err (c is unchanged). */
int shoal__sup_add_bridge(const struct sup *s, struct shoal__config *c,
			  struct shoal_err *err)
{
	struct shoal__cfg_group *groups, g;
	int ret;

	if (s->host < 0 || c->n_hosts < 2)
		return 0;
	if (s->o->bridge_program == NULL)
		return shoal__fail(err, -ENOTSUP, "%s lists other hosts, but this shoal is built "
				   "without the link layer (UCX): it has no bridge to run",
				   c->path);
	if (c->n_groups >= SHOAL_MAX_GROUPS)
		return shoal__fail(err, -ENOSPC, "%s: with its bridge, host %s would have more "
				   "than %d groups", c->path, s->o->host, SHOAL_MAX_GROUPS);
	ret = bridge_group(s, c, &g, err);
	if (ret < 0)
		return ret;
	groups = realloc(c->groups, (c->n_groups + 1) * sizeof(*groups));
	if (groups == NULL) {
		bridge_group_free(&g);
		return shoal__fail(err, -ENOMEM, "out of memory");
	}
	groups[c->n_groups] = g;
	c->groups = groups;
	c->n_groups++;
	return 0;
}

/* ---- routes to other hosts ------------------------------------------------------------------- */

/* The host of group i of c if it is another host's (its index), else -1. */
int shoal__sup_remote_host(const struct sup *s, const struct shoal__config *c, uint32_t i)
{
	return shoal__config_runs(c, s->host, i) ? -1 : c->groups[i].host;
}

/* Index of this host's bridge in c->groups (shoal__sup_add_bridge()), or -1. */
int shoal__sup_bridge_of(const struct sup *s, const struct shoal__config *c)
{
	return s->host >= 0 && c->n_hosts > 1 ? (int)c->n_groups - 1 : -1;
}

/* Is group i of c on a host marked down (s->hosts_down)? */
static bool host_down(const struct sup *s, const struct shoal__config *c, uint32_t i)
{
	return !shoal__config_runs(c, s->host, i) && (s->hosts_down >> c->groups[i].host & 1);
}

/*
 * Routes of groups on other hosts become routes to the bridge: one filter
 * per SHOAL_FILTER_MAX_TYPES of the types they name, matching any key, so
 * that a message reaches the bridge once whatever number of remote routes
 * it matches (the dispatcher delivers a copy per matching filter). The
 * bridge matches it against those routes to find the hosts that get it,
 * one copy each (docs/hosts.md). Routes of groups on a host marked down
 * are left to shoal__sup_apply_routes(). Appends to f[*n]; returns nothing.
 */
static void bridge_routes(const struct sup *s, const struct shoal__config *c, uint16_t bridge_id,
			  struct shoal_filter *f, uint32_t *n)
{
	struct shoal_filter *cur = NULL;

	for (uint32_t i = 0; i < c->n_routes; i++) {
		const struct shoal_filter *r = &c->routes[i].f;

		if (shoal__config_runs(c, s->host, r->group) || r->mode == SHOAL_ROUTE_DISCARD ||
		    host_down(s, c, r->group))
			continue;
		for (uint32_t k = 0; k < r->n_types; k++) {
			bool seen = false;

			for (uint32_t j = 0; j < *n && !seen; j++)
				if (f[j].group == bridge_id && f[j].mode == SHOAL_ROUTE_GROUP)
					for (uint32_t t = 0; t < f[j].n_types && !seen; t++)
						seen = f[j].types[t] == r->types[k];
			if (seen)
				continue;
			if (cur == NULL || cur->n_types == SHOAL_FILTER_MAX_TYPES) {
				cur = &f[(*n)++];
				memset(cur, 0, sizeof(*cur));
				cur->group = bridge_id;
				cur->mode = SHOAL_ROUTE_GROUP;
				cur->key.op = SHOAL_KEY_ANY;
			}
			cur->types[cur->n_types++] = r->types[k];
		}
	}
}

/* The config's routes with group indices turned into router ids; those of
 * groups on other hosts go to the bridge (bridge_routes()), but those of a
 * host marked down stay routes to its groups, which are marked failed here
 * (shoal__sup_check_hosts()): the dispatcher counts what they would get as
 * dropped_dead, and a send that only they would get fails with -EHOSTDOWN,
 * as for failed groups of this host. */
int shoal__sup_apply_routes(struct sup *s, const struct shoal__config *c, const struct proc *procs,
			    struct shoal_err *err)
{
	/* At most one bridge filter per route: each names a type at least. */
	struct shoal_filter *f = calloc(2 * c->n_routes + 1, sizeof(*f));
	int bridge = shoal__sup_bridge_of(s, c);
	uint32_t n = 0;
	int ret;

	if (f == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->n_routes; i++) {
		if (!shoal__config_runs(c, s->host, c->routes[i].f.group) &&
		    !host_down(s, c, c->routes[i].f.group))
			continue;
		f[n] = c->routes[i].f;
		f[n++].group = (uint16_t)procs[c->routes[i].f.group].id;
	}
	if (bridge >= 0)
		bridge_routes(s, c, (uint16_t)procs[bridge].id, f, &n);
	ret = shoal_router_set_routes(s->router, f, n, err);
	free(f);
	return ret;
}

/* ---- hosts marked down ----------------------------------------------------------------------- */

/*
 * Take the bridge's word on which hosts have been away longer than
 * hosts.down_after (bounded to the file's other hosts: the bridge's
 * mailbox is shared memory), and mark their groups down, or up again, where
 * senders see it: the routes that go with it first
 * (shoal__sup_apply_routes()), then the groups' state.
 */
void shoal__sup_check_hosts(struct sup *s)
{
	int bridge = shoal__sup_bridge_of(s, s->cfg);
	uint64_t mask, down, changed;
	struct shoal_err err = { 0 };
	int *ids;

	if (bridge < 0)
		return;
	mask = s->cfg->n_hosts >= 64 ? UINT64_MAX : (UINT64_C(1) << s->cfg->n_hosts) - 1;
	mask &= ~(UINT64_C(1) << s->host);
	down = shoal__router_hosts_down(s->router, s->procs[bridge].id) & mask;
	changed = down ^ s->hosts_down;
	if (changed == 0)
		return;
	ids = calloc(s->cfg->n_groups, sizeof(*ids));
	if (ids == NULL)
		return;   /* looked at again at the next pass */
	for (uint32_t h = 0; h < s->cfg->n_hosts; h++) {
		bool now_down = down >> h & 1;
		uint32_t n = 0;

		if (!(changed >> h & 1))
			continue;
		for (uint32_t i = 0; i < s->cfg->n_groups; i++)
			if (shoal__sup_remote_host(s, s->cfg, i) == (int)h)
				ids[n++] = s->procs[i].id;
		shoal__router_mark_host(s->router, ids, n, now_down);
		shoal__sup_event(s, now_down ? "host %s: away longer than hosts.down_after; "
					       "sends to its groups fail with -EHOSTDOWN" :
					       "host %s: back; its groups reachable again",
				 s->cfg->hosts[h].name);
	}
	free(ids);
	s->hosts_down = down;
	if (shoal__sup_apply_routes(s, s->cfg, s->procs, &err) < 0)
		shoal__sup_event(s, "routes not republished after a host change: %s",
				 err.msg[0] ? err.msg : "out of memory");
	shoal__router_show_hosts(s->router);
}
