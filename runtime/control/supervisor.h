/* SPDX-License-Identifier: MIT */
/*
 * The supervisor behind `shoal run`: starts a router from a config file,
 * launches every group's process, restarts them by policy, reloads routes
 * on SIGHUP and stops everything in order on SIGINT/SIGTERM. Private.
 */
#ifndef SHOAL_RUNTIME_SUPERVISOR_H
#define SHOAL_RUNTIME_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <shoal/api.h>
#include <shoal/router.h>

#include "runtime/control/proto.h"

enum shoal__status_mode {
	SHOAL__STATUS_AUTO,   /* live line on a terminal, plain lines otherwise */
	SHOAL__STATUS_LIVE,
	SHOAL__STATUS_PLAIN,
	SHOAL__STATUS_QUIET,  /* events only */
};

/* How the system stands, for a service manager (shoal__sup_opts.notify). */
enum shoal__sup_state {
	SHOAL__SUP_READY,       /* every group is up; or a reload is over */
	SHOAL__SUP_RELOADING,   /* a reload begins */
	SHOAL__SUP_STOPPING,    /* the system's stop begins */
};

struct shoal__sup_opts {
	const char *config;          /* path of the YAML file */
	const char *name;            /* system name instead of the file's; NULL: the file's */
	int64_t duration_ns;         /* stop after this long; <= 0: until a signal */
	int status;                  /* enum shoal__status_mode */
	int64_t status_period_ns;    /* plain status line period; 0: 5 s */
	/* Events, status and group output (stdout): written through its file
	 * descriptor, never through stdio (what stdio holds is flushed first),
	 * by a thread of the supervisor's that a slow reader may block, never
	 * the supervisor itself; lines that find its queue full are dropped
	 * and counted (sup_out.c). */
	FILE *out;
	const char *log_dir;         /* groups' output to DIR/GROUP.log instead; NULL: to out */
	const char *host;            /* this host in the file's `hosts:` (--host); NULL: none */
	const char *bridge_program;  /* the `shoal` that runs `shoal bridge`; NULL: not built */
	/*
	 * Told how the system stands, from the supervisor's thread, with a
	 * line for a person in `text` (`shoal run` hands both to systemd's
	 * sd_notify); NULL: nobody is. READY once a process of every group has
	 * attached to the router (a group that gave up or was stopped on
	 * request does not count), then RELOADING and READY around each
	 * reload, and STOPPING once when the stop begins.
	 */
	void (*notify)(enum shoal__sup_state state, const char *text);
};

/*
 * Run the system until it is told to stop (or `duration_ns` passes, or a
 * group that gives up has on_give_up: stop). With `host`, only the groups
 * of that host run here; every group is declared, in the file's order, so
 * that group ids are the same on every host (docs/hosts.md), and a host
 * with peers runs the built-in group `bridge` besides. Returns the
 * process exit status: 0 when every group stopped cleanly and none failed,
 * 1 otherwise; or a negative errno (with *err) if it could not start
 * (-ENXIO: `host` does not fit the file, shoal__config_this_host()).
 */
int shoal__supervise(const struct shoal__sup_opts *o, struct shoal_err *err);

struct shoal__config;

/*
 * Load the system file `path` as shoal__config_load() does, under the name
 * `name` if not NULL (`shoal run --name`: one file runs twice side by side,
 * as two systems); the file's checks of its own name are repeated for the
 * given one. Returns 0, or a negative errno with the reason in *err.
 */
int shoal__sup_load_config(const char *path, const char *name, struct shoal__config **out,
			   struct shoal_err *err);

struct shoal_router;

/*
 * Lifecycle requests (`shoal stop`, `restart`, `reload`) arrive on the
 * router's control socket, from the system's owner only (server.c checks the
 * peer's credentials at accept). The control thread hands each one, with its
 * connection, to the supervisor as one shoal__admin_req written to a pipe;
 * from then on the connection is the supervisor's, to answer (DONE or ERROR)
 * and close.
 */
struct shoal__admin_req {
	int fd;                          /* the requester's connection, non-blocking */
	struct shoal__ctl_admin m;       /* checked by shoal__ctl_check() */
};

/*
 * server.c: hand router r's lifecycle requests to the pipe `fd` (its write
 * end, non-blocking); r NULL: nobody takes them (they are answered ENOTSUP).
 * One router per process can take them: the one `shoal run` supervises.
 */
void shoal__control_admin(const struct shoal_router *r, int fd);

/*
 * router.c: for every group that is neither running nor failed, count what
 * its inbound rings still hold, and what its uplinks hold unrouted, into its
 * lost_queued counter (the system is stopping and nothing will drain them).
 * Returns the total counted. Call it once, after the last group process has
 * ended and the dispatchers have routed what they could (a record they are
 * still moving could be counted twice or not at all).
 */
uint64_t shoal__router_count_stranded(struct shoal_router *r);

/*
 * router.c: bytes of records group `id`'s uplinks hold that the dispatchers
 * have not yet routed (0 for an unknown group, and for a condemned uplink:
 * the damage report counts what that held). The stop sequence waits for a
 * level's leftovers to reach the next level's mailboxes before stopping it.
 */
uint64_t shoal__router_uplink_bytes(struct shoal_router *r, int id);

/*
 * router.c, for a host with peers (docs/hosts.md). Every group of the file
 * is declared on every host, so that ids agree; a group of another host is
 * never attached here, and senders send its direct messages to the bridge.
 *  - group_on: declare a group (shoal_router_group()) that runs on host
 *    `host` (its index in the file), or here (-1). The host is in its
 *    registry slot from the moment the group is seen there: a sender never
 *    finds a group of another host without it (a reload's new groups, a
 *    slot another host's group held before).
 *  - bridge_rings: this host has a bridge (the group SHOAL__BRIDGE_GROUP):
 *    the direct rings to and from it have the inbound rings' capacity
 *    (at least the direct one), and mailboxes room for them. Call it
 *    before declaring the groups.
 *  - set_bridge: `id` is this host's bridge (-1: none), and a request to
 *    a group of another host spins `spin_ns` (hosts.link.spin), yielding,
 *    before it sleeps.
 *  - hosts_down: the hosts (bit = index in the file) the bridge `bridge`
 *    says its links to have been down past hosts.down_after; 0 when it has
 *    not said. Its word: the caller keeps the bits of the file's hosts.
 *  - mark_host: mark the groups `ids` (of another host) down, or up again:
 *    the next publish of the routes treats them as failed (the dispatcher
 *    counts their copies dropped_dead; a send only they would get fails
 *    with -EHOSTDOWN).
 *  - show_hosts: then, once the routes are published, show the marks in
 *    the registry: the state of a group marked down is SHOAL_GROUP_FAILED
 *    (direct sends to it fail with -EHOSTDOWN, requests waiting on it end
 *    with it: every worker is woken), else SHOAL_GROUP_DOWN.
 * None fails; none blocks beyond the router's lock.
 */
int shoal__router_group_on(struct shoal_router *r, const struct shoal_group_spec *spec, int host,
			  struct shoal_err *err);
void shoal__router_bridge_rings(struct shoal_router *r, bool bridge);
void shoal__router_set_bridge(struct shoal_router *r, int id, uint32_t spin_ns);
uint64_t shoal__router_hosts_down(struct shoal_router *r, int bridge);
void shoal__router_mark_host(struct shoal_router *r, const int *ids, uint32_t n, bool down);
void shoal__router_show_hosts(struct shoal_router *r);

#endif
