/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's reload (SIGHUP, `shoal reload`): re-read the system file
 * and apply it while the system runs, or refuse it with nothing changed.
 *
 * What running programs and the links rely on cannot change: the system's
 * name, the router's settings, the hosts section, a message type they know,
 * and a group's workers, actors, node, mailbox and overflow
 * (check_reload()). Types and groups may be added. New groups are declared
 * before the routes are published, so that every route can name its group;
 * groups gone from the file then stop for good, and groups whose settings
 * changed restart. A group stopped on request stays stopped.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/sup_impl.h"
#include "shm/util.h"

static bool structural_change(const struct shoal__cfg_group *a, const struct shoal__cfg_group *b)
{
	return a->workers != b->workers || a->actors != b->actors || a->node != b->node ||
	       a->mailbox != b->mailbox || a->overflow != b->overflow;
}

static bool same_hosts(const struct shoal__config *a, const struct shoal__config *b)
{
	if (a->n_hosts != b->n_hosts || a->down_after_ns != b->down_after_ns ||
	    memcmp(&a->link, &b->link, sizeof(a->link)) != 0)
		return false;
	for (uint32_t i = 0; i < a->n_hosts; i++)
		if (strcmp(a->hosts[i].name, b->hosts[i].name) != 0 ||
		    strcmp(a->hosts[i].listen, b->hosts[i].listen) != 0 ||
		    strcmp(a->hosts[i].reach, b->hosts[i].reach) != 0)
			return false;
	return true;
}

static int check_reload(struct sup *s, const struct shoal__config *n, struct shoal_err *err)
{
	const struct shoal__config *o = s->cfg;

	if (strcmp(n->system, o->system) != 0)
		return shoal__fail(err, -EINVAL, "the system name changed (%s -> %s): restart it "
				   "instead", o->system, n->system);
	if (n->spin_ns != o->spin_ns || n->yield_ns != o->yield_ns ||
	    n->wake_deadline_ns != o->wake_deadline_ns ||
	    n->mode != o->mode || n->stream != o->stream ||
	    n->uplink_capacity != o->uplink_capacity ||
	    n->inbound_capacity != o->inbound_capacity ||
	    n->direct_capacity != o->direct_capacity)
		return shoal__fail(err, -EINVAL, "router settings cannot change while the system "
				   "runs: restart it instead");
	if (!same_hosts(o, n))
		return shoal__fail(err, -EINVAL, "the hosts section changed: the links are made "
				   "from it, restart the system on every host instead");
	/* Types may be added; one that running programs know cannot change. */
	for (uint32_t i = 0; i < n->n_types; i++)
		for (uint32_t j = 0; j < o->n_types; j++) {
			const struct shoal__cfg_type *a = &o->types[j], *b = &n->types[i];

			if ((a->id == b->id || strcmp(a->name, b->name) == 0) &&
			    (a->id != b->id || a->max_size != b->max_size ||
			     strcmp(a->name, b->name) != 0))
				return shoal__fail(err, -EINVAL, "message type %u '%s' (max %u bytes) "
						   "would become %u '%s' (max %u bytes): types "
						   "cannot change while the system runs", a->id,
						   a->name, a->max_size, b->id, b->name,
						   b->max_size);
		}
	for (uint32_t i = 0; i < n->n_groups; i++) {
		int old = shoal__config_group(s->cfg, n->groups[i].name);

		if (old >= 0 && structural_change(&s->cfg->groups[old], &n->groups[i]))
			return shoal__fail(err, -EINVAL, "group %s: workers, actors, node, mailbox "
					   "and overflow cannot change while it runs",
					   n->groups[i].name);
	}
	return 0;
}

/* A refused reload: free the outputs made for the first `upto` groups of
 * `n` that the running system does not have. */
static void free_new_outs(struct sup *s, const struct shoal__config *n, struct proc *np,
			  uint32_t upto)
{
	for (uint32_t i = 0; i < upto; i++)
		if (shoal__config_group(s->cfg, n->groups[i].name) < 0)
			shoal__sup_out_free(np[i].out);
}

/* Refuse a reload: say why, with the reason in *err. Returns `ret`. */
static int refuse_reload(struct sup *s, int ret, struct shoal_err *err)
{
	shoal__sup_event(s, "reload refused, nothing changed: %s",
			 err->msg[0] ? err->msg : strerror(-ret));
	return ret;
}

/*
 * Re-read the system file and apply it (SIGHUP, `shoal reload`). Returns 0,
 * or a negative errno with the reason in *err when the file is refused and
 * nothing changed.
 */
static int reload_file(struct sup *s, struct shoal_err *err)
{
	struct shoal__config_space space;
	struct shoal__config *n;
	struct proc *np;
	int ret;

	if (shoal__sup_tool_pending(s))
		return refuse_reload(s, shoal__fail(err, -EBUSY, "a group is being stopped or "
						    "restarted on request: reload once that is "
						    "done"), err);
	ret = shoal__sup_load_config(s->cfg->path, s->o->name, &n, err);
	if (ret < 0)
		return refuse_reload(s, ret, err);
	ret = check_reload(s, n, err);
	if (ret == 0)
		ret = shoal__config_check_cpus(n, s->host, err);
	if (ret == 0)
		ret = shoal__sup_add_bridge(s, n, err);
	if (ret == 0)
		ret = shoal__config_check_space(n, s->cfg, &space, err);
	if (ret == 0)
		ret = shoal__sup_declare_types(s, n, err);   /* only additions are left */
	if (ret < 0) {
		shoal__config_free(n);
		return refuse_reload(s, ret, err);
	}
	np = calloc(n->n_groups, sizeof(*np));
	if (np == NULL) {
		shoal__config_free(n);
		return refuse_reload(s, -ENOMEM, err);
	}
	/* Declare new groups first, so that every route can name its group. */
	for (uint32_t i = 0; i < n->n_groups; i++) {
		const struct shoal__cfg_group *g = &n->groups[i];
		struct shoal_group_spec spec = { g->name, g->workers, g->actors, g->node, g->mailbox,
						 g->overflow };
		int old = shoal__config_group(s->cfg, g->name);

		if (old >= 0) {
			np[i] = s->procs[old];
			continue;
		}
		np[i].pidfd = -1;
		np[i].waiter = -1;
		np[i].backoff_ms = g->backoff_ms;
		np[i].out = shoal__sup_out_new(s, g->name, s->log_dir);
		np[i].id = np[i].out == NULL ? -ENOMEM :
			   shoal__router_group_on(s->router, &spec, shoal__sup_remote_host(s, n, i),
						  err);
		if (np[i].id < 0) {
			ret = np[i].out == NULL ? -ENOMEM : np[i].id;
			free_new_outs(s, n, np, i + 1);
			free(np);
			shoal__config_free(n);
			shoal__sup_event(s, "reload refused: %s",
					 err->msg[0] ? err->msg : strerror(-ret));
			return ret;
		}
	}
	ret = shoal__sup_apply_routes(s, n, np, err);
	if (ret < 0) {
		free_new_outs(s, n, np, n->n_groups);
		free(np);
		shoal__config_free(n);
		return refuse_reload(s, ret, err);
	}
	shoal__sup_event(s, "reload: %u routes published", n->n_routes);
	/* Groups gone from the file stop for good; changed ones restart. */
	for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
		int now = shoal__config_group(n, s->cfg->groups[i].name);

		if (now < 0) {
			s->procs[i].retired = true;
			shoal__sup_event(s, "group %s: removed from the file",
					 s->cfg->groups[i].name);
			shoal__sup_stop_one(s, i);
		} else if (!shoal__config_group_same(&s->cfg->groups[i], &n->groups[now])) {
			shoal__sup_event(s, "group %s: settings changed; restarting it",
					 s->cfg->groups[i].name);
			shoal__sup_stop_one(s, i);
			np[now].pid = 0;
			np[now].pidfd = -1;
		}
	}
	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if (s->procs[i].retired)
			shoal__sup_out_free(s->procs[i].out);
	shoal__config_free(s->cfg);
	free(s->procs);
	s->cfg = n;
	s->procs = np;
	shoal__sup_name_width(s);
	/* A group stopped on request stays stopped (until `shoal restart`). */
	for (uint32_t i = 0; i < n->n_groups; i++)
		if (s->procs[i].pid == 0 && !s->procs[i].failed && !s->procs[i].held &&
		    shoal__config_runs(n, s->host, i)) {
			s->procs[i].stopping = false;
			shoal__sup_launch(s, i);
		}
	return 0;
}

/* reload_file(), between RELOADING and READY once the system was ready. */
int shoal__sup_reload(struct sup *s, struct shoal_err *err)
{
	int ret;

	if (s->ready)
		s->o->notify(SHOAL__SUP_RELOADING, "reloading its file");
	ret = reload_file(s, err);
	if (s->ready)
		s->o->notify(SHOAL__SUP_READY, ret == 0 ? "reloaded" :
			     "reload refused, nothing changed");
	return ret;
}
