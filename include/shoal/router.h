/* SPDX-License-Identifier: MIT */
/*
 * The router: owns a Shoal system. It creates the system's registry in
 * shared memory and its control socket, registers group processes, holds the
 * routing table (a flat vector of filters published with RCU), and runs one
 * dispatcher thread per NUMA node in use, each copying routed messages from
 * the uplink rings of the groups on its node into the inbound rings of the
 * matching groups.
 *
 * Lifecycle rules:
 *  1. If shoal_router_start() succeeds you must call shoal_router_destroy().
 *  2. Every other call may run from any thread while the router runs; route
 *     changes never pause dispatch.
 *  3. shoal_router_destroy() stops the threads and removes the socket and
 *     every segment of the system.
 */
#ifndef SHOAL_ROUTER_H
#define SHOAL_ROUTER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <shoal/api.h>
#include <shoal/filter.h>

struct shoal_router;

/* Group states, as shown in the registry and by the tools. */
enum shoal_group_state {
	SHOAL_GROUP_EMPTY = 0,       /* slot unused */
	SHOAL_GROUP_DOWN,            /* declared, no process attached: messages queue */
	SHOAL_GROUP_RUNNING,         /* a process is attached */
	SHOAL_GROUP_STOPPING,        /* asked to stop, draining */
	SHOAL_GROUP_FAILED,          /* will not come back: sends fail with -EHOSTDOWN */
	SHOAL_GROUP_STOPPED,         /* stopped on request, no process: messages queue */
};

#define SHOAL_MAX_GROUPS 256
#define SHOAL_MAX_WORKERS 16
#define SHOAL_MAX_NODES 8

struct bitmask;   /* libnuma's CPU set (<numa.h>) */

/* A described NUMA topology (for tests); NULL means read it with libnuma. */
struct shoal_topology {
	int n_nodes;
	/* CPUs of each node as a libnuma CPU set of any size (CPU numbers
	 * below 8192), or NULL for none. The router copies them at start. */
	const struct bitmask *cpu_sets[SHOAL_MAX_NODES];
};

/* Ring sizes a router uses when its options leave them 0. */
#define SHOAL_ROUTER_UPLINK_CAPACITY_DEFAULT  (256u * 1024)
#define SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT (256u * 1024)
#define SHOAL_ROUTER_DIRECT_CAPACITY_DEFAULT  (64u * 1024)
/* The wake deadline a router uses when its options leave it 0; see wake_deadline_ns. */
#define SHOAL_ROUTER_WAKE_DEADLINE_DEFAULT    4000000u

struct shoal_router_opts {
	const char *system;          /* system name: [A-Za-z0-9_-], 1..31 characters */
	mode_t mode;                 /* segments and socket; 0 means 0600 */
	uint64_t spin_ns;            /* idle spin budget before sleeping; 0: default */
	/* After the spin, how long an idle dispatcher or worker looks again,
	 * yielding the CPU between its looks (sched_yield()), before it
	 * sleeps; 0: not at all (the default). At most a second. */
	uint64_t yield_ns;
	/* Wake moderation: how long a message may wait for its consumer to
	 * wake, at most, when producers let messages gather instead of waking
	 * a consumer for each (docs/design.md); 0: the default above. */
	uint64_t wake_deadline_ns;
	uint32_t uplink_capacity;    /* bytes per uplink ring; 0: the default above */
	uint32_t inbound_capacity;   /* bytes per inbound ring, at least the uplink's;
				      * 0: the default above */
	uint32_t direct_capacity;    /* bytes per direct ring; 0: the default above */
	const struct shoal_topology *topology;
	/* Whether bursts of small messages are written with streamed
	 * (non-temporal) stores, which win where a cache line's trip between
	 * CPUs is long and lose where it is short (docs/design.md, "Streamed
	 * copies"): SHOAL_STREAM_AUTO (0, the default) times that trip at
	 * start and decides; ON and OFF say. */
	int stream;
};

#define SHOAL_STREAM_AUTO 0
#define SHOAL_STREAM_ON   1
#define SHOAL_STREAM_OFF  2

/* What a full mailbox does to a message routed with send() (blocking). */
#define SHOAL_OVERFLOW_BLOCK 0       /* the sender waits (back-pressure) */
#define SHOAL_OVERFLOW_DROP  1       /* the copy is dropped and counted */

/* What shoal_router_group() declares before (or without) a process attaching. */
struct shoal_group_spec {
	const char *name;
	uint16_t n_workers;          /* 0: 1 */
	uint16_t n_actors;           /* 0: 1 */
	int node;                    /* -1: the router places it */
	uint32_t inbound_capacity;   /* bytes per inbound ring; 0: the router's */
	uint8_t overflow;            /* SHOAL_OVERFLOW_* */
};

/* System-wide counters, summed over dispatchers and workers. */
struct shoal_router_stats {
	uint32_t groups;             /* declared */
	uint32_t running;            /* with a process attached */
	uint32_t failed;
	uint32_t routes;
	uint64_t routed;             /* messages taken from uplinks */
	uint64_t delivered;          /* copies written to inbound rings */
	uint64_t handled;            /* messages handled by actors */
	uint64_t sent_direct;
	uint64_t dropped;            /* full + dead destination + no route + malformed */
	uint64_t restarts;           /* attaches beyond the first */
	uint64_t lost;               /* lost to damage or death, counted: corrupted rings,
				      * copies lost with their process, freed groups */
	uint32_t damaged;            /* rings and mailboxes found corrupted */
};

/*
 * Create the system and start the router's threads. Returns 0, -EEXIST if
 * a live system of that name exists, -EINVAL for bad options, or an errno
 * from creating segments or the socket, with the reason in *err.
 */
SHOAL_API int shoal_router_start(struct shoal_router **r, const struct shoal_router_opts *opts,
				 struct shoal_err *err);

/*
 * Whether this router's system streams its copies (opts.stream): 1 or 0.
 * With *probe_ns (may be NULL) the line round trip that SHOAL_STREAM_AUTO
 * timed between two CPUs of node 0, in ns; 0 when it did not time one
 * (ON or OFF asked, or a single CPU). Never fails; may run at any time.
 */
SHOAL_API int shoal_router_stream(struct shoal_router *r, uint32_t *probe_ns);

/*
 * Declare a group so that routes can name it and messages queue for it
 * before its process attaches. Returns the group id (>= 0), or -EEXIST
 * (declared with other settings), -ENOSPC, -EINVAL.
 */
SHOAL_API int shoal_router_group(struct shoal_router *r, const struct shoal_group_spec *spec,
				 struct shoal_err *err);

/* Id of a declared group, or -ENOENT; -EINVAL for a NULL name. */
SHOAL_API int shoal_router_group_id(struct shoal_router *r, const char *name);

/*
 * Declare message type `id` (non-zero) with its name and largest payload,
 * as a system file's `types:` does: the tools print the name, and a program
 * that declares the same id with another name or size is refused at attach.
 * Returns 0 (also when the same declaration exists), -EEXIST (declared
 * otherwise), -ENOSPC (type table full), -EINVAL (id 0, name empty or too
 * long, max_size over SHOAL_TYPE_MAX_SIZE).
 */
SHOAL_API int shoal_router_declare_type(struct shoal_router *r, uint32_t id, const char *name,
					uint32_t max_size, struct shoal_err *err);

/*
 * Add a route (a filter whose `group` is a declared group id) and publish
 * the new vector; the id is returned in *id. Returns 0, -EINVAL (invalid
 * filter or group), -ENOSPC.
 */
SHOAL_API int shoal_router_add_route(struct shoal_router *r, const struct shoal_filter *f,
				     uint32_t *id, struct shoal_err *err);

/*
 * Replace every route added with shoal_router_add_route() (not the ones
 * groups subscribed themselves) by `n` new ones, in one publish: messages
 * see either the old set or the new one. Returns 0, or -EINVAL with the
 * reason (nothing changed).
 */
SHOAL_API int shoal_router_set_routes(struct shoal_router *r, const struct shoal_filter *f,
				      uint32_t n, struct shoal_err *err);

/* Remove a route by id and publish. Returns 0 or -ENOENT. */
SHOAL_API int shoal_router_remove_route(struct shoal_router *r, uint32_t id);

/*
 * Ask every group process to stop (drain, then exit), wait up to
 * `timeout_ns` for them to leave. Returns 0, or -ETIMEDOUT if some did not.
 */
SHOAL_API int shoal_router_stop_groups(struct shoal_router *r, int64_t timeout_ns);

/*
 * Ask one group process to stop (graceful). The request holds for the next
 * process to attach if none is attached now, until one has left or
 * shoal_router_resume_group() withdraws it; a group with no process shows
 * stopped. Returns 0 or -ENOENT.
 */
SHOAL_API int shoal_router_stop_group(struct shoal_router *r, int id);

/*
 * Withdraw a stop asked with shoal_router_stop_group() before the process
 * it was meant for attached: the next process to attach runs, and a stopped
 * group shows down until then. Call it before starting a group's process
 * again (a supervisor's restart). A process attached now and asked to stop
 * goes on stopping. Returns 0 or -ENOENT.
 */
SHOAL_API int shoal_router_resume_group(struct shoal_router *r, int id);

/* Mark a group failed: its routes stay, sends to it fail with -EHOSTDOWN. */
SHOAL_API int shoal_router_fail_group(struct shoal_router *r, int id);

/*
 * Hold or resume dispatch. While held, dispatchers leave routed messages in
 * the uplinks (senders fill them, then wait or get -EAGAIN); direct sends
 * are not affected. For maintenance windows and for measuring the
 * dispatcher alone (bench/). Never fails.
 */
SHOAL_API void shoal_router_hold(struct shoal_router *r, bool hold);

/* Sum the system's counters. Never fails. */
SHOAL_API void shoal_router_stats(struct shoal_router *r, struct shoal_router_stats *st);

/* Pid of the process attached to group `id`, 0 if none. */
SHOAL_API pid_t shoal_router_group_pid(struct shoal_router *r, int id);

/*
 * Wait until the group process set changes (a process attached or left) or
 * `timeout_ns` passes. Returns 0 or -ETIMEDOUT. For supervisors and tests.
 */
SHOAL_API int shoal_router_wait_change(struct shoal_router *r, int64_t timeout_ns);

/* Stop the threads, remove the socket and every segment, free. */
SHOAL_API void shoal_router_destroy(struct shoal_router *r);

/*
 * Concurrency table, per router, for threads of one process ("-": may run
 * together with no synchronisation by the caller; "X": the caller orders
 * them).
 *
 *   [1] shoal_router_start           [2] shoal_router_destroy
 *   [3] shoal_router_group, _declare_type, _add_route, _set_routes,
 *       _remove_route, _fail_group: change the routes or groups and
 *       publish under the router's lock, then wait an RCU grace period
 *       (about one dispatcher pass)
 *   [4] shoal_router_group_id, _group_pid, _stats: take the lock
 *   [5] shoal_router_stop_group, _resume_group, _stop_groups, _wait_change:
 *       the last two wait on a condition variable, releasing the lock
 *       meanwhile
 *   [6] shoal_router_hold: an atomic store and doorbell rings, no lock;
 *       shoal_router_stream: reads what start chose, no lock
 *
 *          [2]  [3]  [4]  [5]  [6]
 *     [2]   X    X    X    X    X
 *     [3]   X    -    -    -    -
 *     [4]   X    -    -    -    -
 *     [5]   X    -    -    -    -
 *     [6]   X    -    -    -    -
 *
 * [1] makes a new router: "-" with calls on other routers; one live router
 * per system name (-EEXIST). Group processes' subscribe/unsubscribe take
 * the same lock through the control socket. [3] must not run on a thread
 * registered as a liburcu QSBR reader (it would wait for itself).
 */

#endif
