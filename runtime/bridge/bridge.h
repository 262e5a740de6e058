/* SPDX-License-Identifier: MIT */
/*
 * The bridge of one host (docs/hosts.md): a group process that `shoal run
 * --host NAME` starts, as the built-in group `bridge`, when its file lists
 * other hosts, and restarts by the same policy code as any group. It opens
 * one link (runtime/bridge/link.h) to each other host, all on one hub (one
 * UCP worker and listener), the host whose name sorts first connecting, the
 * other listening, and says on its output each change of a link's state:
 * up, down, a connection attempt that failed, a frame or a connection
 * refused, records lost to a peer's restart, and UCX's own complaints. It
 * keeps the links' counters in shoal.S.links for the tools (view.h). It carries routed
 * messages: what the router gives it goes to each host whose groups' routes
 * match it, once per host; what a peer sends is sent on, routed, here
 * (bridge.c says how, and docs/hosts.md what is not carried yet).
 *
 * Lifecycle rules:
 *  1. shoal__bridge_run() attaches the group, opens the links and serves
 *     them until the router asks the group to stop; then it closes them,
 *     detaches, and returns. Nothing outlives the call.
 *  2. A failure to start (the file, the attach, a link that cannot be
 *     made) is returned; the supervisor restarts the process by policy.
 *
 * Private to the bridge; never installed.
 */
#ifndef SHOAL_RUNTIME_BRIDGE_BRIDGE_H
#define SHOAL_RUNTIME_BRIDGE_BRIDGE_H

#include <stdio.h>

#include <shoal/api.h>

struct shoal__bridge_opts {
	const char *config;          /* the system file, as `shoal run` read it */
	const char *host;            /* this host's name in its `hosts:` */
	const char *system;          /* the system's name; NULL: $SHOAL_SYSTEM */
	FILE *log;                   /* one line per link event */
};

/*
 * Run the bridge until the router stops its group. Returns 0, or a negative
 * errno with the reason in *err when it could not start: -ENXIO (the host
 * is not in the file, or has no other host to link to), an error of the
 * config, of shoal_group_attach(), of shoal__link_hub_create() or of
 * shoal__link_add(). Blocks; single-threaded.
 */
int shoal__bridge_run(const struct shoal__bridge_opts *o, struct shoal_err *err);

/*
 * Concurrency: one bridge per process (it is the process's group); the
 * call keeps no global state besides the process's UCX environment and
 * UCX's log, which it routes to `log` while it runs.
 */

#endif
