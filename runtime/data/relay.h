/* SPDX-License-Identifier: MIT */
/*
 * What the bridge (runtime/bridge/bridge.c) needs of the data path to put
 * a record from another host into this host's system with its envelope as
 * it was: the sender's address (of the other host), request_id, trace_id,
 * send_ns, dest (docs/hosts.md). Private; never installed.
 *
 * Both calls are try_ forms of the worker that makes them (ctx's thread):
 * they never wait, and -EAGAIN (no room, or a direct link not open yet,
 * asked for) means "hold the record and try again": the link's credit then
 * pushes back on the other host's sender. The record is checked as one
 * read from a ring would be (DESIGN invariant 1): the caller has checked
 * that env->len bytes of payload follow; the type must be one of the
 * group's, within its size, the flags known. On failure nothing is
 * written and try_failed is counted.
 */
#ifndef SHOAL_RUNTIME_DATA_RELAY_H
#define SHOAL_RUNTIME_DATA_RELAY_H

#include <shoal/group.h>

/*
 * Into the destination's mailbox (a direct message or a response, env->dest
 * a group of this host), as shoal_try_send_to() would write it, but with
 * `env` as it is. Returns 0, or the errors of shoal_try_send_to(), -EINVAL
 * for a bad envelope, -EHOSTUNREACH for a dest of another host (a record is
 * carried once: it never goes out to a bridge again).
 */
int shoal__send_env(struct shoal_ctx *ctx, const struct shoal_envelope *env, const void *payload);

/*
 * Into the caller's uplink (a routed message: env->dest SHOAL_ADDR_NONE, no
 * request or response flags), as shoal_try_send() would write it, but with
 * `env` as it is; its host's router matches it as any other. Returns 0, or
 * the errors of shoal_try_send(), -EINVAL for a bad envelope.
 */
int shoal__send_routed_env(struct shoal_ctx *ctx, const struct shoal_envelope *env,
			   const void *payload);

/*
 * Whether group `group` of this host has a process attached (RUNNING), with
 * its incarnation in *gen: 1 if so, 0 if not, -EINVAL for no such group.
 * The bridge watches the responders of the requests it brought in with it
 * (a process that dies ends its requests, as for a local requester).
 */
int shoal__group_running(const struct shoal_ctx *ctx, int group, uint32_t *gen);

/*
 * Tell the router which hosts the bridge (ctx's group) has found away
 * longer than hosts.down_after, bit h for host h of the file, in its
 * mailbox's hosts_down (runtime/layout.h), which outlives the process: the
 * bits of `set` are set, those of `clear` cleared, the others kept as a
 * predecessor may have left them. Returns what it held before. Never
 * fails, never waits; the bridge's one worker only.
 */
uint64_t shoal__bridge_hosts_down(struct shoal_ctx *ctx, uint64_t set, uint64_t clear);

/*
 * Concurrency: as the try_ sends: one thread per ctx; any number of ctxs
 * of any processes at once.
 */

#endif
