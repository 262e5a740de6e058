/* SPDX-License-Identifier: MIT */
/*
 * A read-only view of a whole running system for the tools: the registry
 * (router, dispatchers, message types, groups) and, per group, its mailbox
 * (worker counters summed, and a snapshot of every ring), copied into private
 * memory once so that printing never touches shared memory.
 *
 * Taking a view never writes to shared memory and never trusts it: the
 * registry is attached with shoal__registry_attach() and each mailbox with
 * shoal__mailbox_hdr(), read-only and whoever owns them; every count read
 * back is bounded by the layout's limits before it drives a loop; names are
 * copied with a terminator and checked; a file that shrinks while it is read
 * is reported, not a crash (tools/snapshot.h). What does not add up is
 * recorded as a problem next to the data it concerns, in a reason whose
 * untrusted parts are already escaped (the names in the view are not: escape
 * them before printing).
 */
#ifndef SHOAL_TOOLS_SYSVIEW_H
#define SHOAL_TOOLS_SYSVIEW_H

#include <stdbool.h>
#include <stdint.h>

#include <shoal/api.h>
#include <shoal/message.h>
#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/layout.h"
#include "tools/json.h"
#include "tools/snapshot.h"

/* A doorbell's counters: futex waits its consumer entered, wakes its producers made. */
struct shoal__bell_counts {
	uint64_t sleeps, wakes;
};

struct shoal__disp_view {
	int32_t node;
	uint64_t cpus[SHOAL__CPU_WORDS_MAX];   /* its CPU set: the view's cpu_words words */
	uint64_t batches, messages, delivered, no_route, dropped_full, dropped_dead;
	uint64_t malformed, sleeps, busy_ns, discarded;
	uint64_t corrupt, dropped_corrupt;   /* rings condemned; copies dropped for them */
	uint32_t stream_min;                 /* fewest records a chunk streamed, 0: none */
	uint32_t stream_probe_ns;            /* router.stream auto's line round trip, 0: none */
	struct shoal__bell_counts doorbell;  /* when the view has_bells */
};

struct shoal__type_view {
	uint32_t id;
	uint32_t max_size;
	uint32_t routes;
	uint32_t live_routes;            /* of those, the ones not to a failed group */
	char name[SHOAL_NAME_MAX];
};

/* A mailbox's per-worker counters, summed over its workers. */
struct shoal__worker_sums {
	uint64_t sent_routed, sent_direct, received, handled;
	uint64_t try_failed, stale, malformed, discarded, fwd_lost, set_aside;
	uint64_t up_no_route, up_dropped_full, up_malformed;   /* dispatcher-written */
	uint64_t lost_corrupt;          /* left in an uplink condemned under the worker */
	uint64_t fwd_sent, fwd_taken;   /* copies held in process memory: made, handled */
	uint64_t crashes;               /* processes that died in a row on one record */
	/* Its doorbells: idle (in), uplink full (up), direct senders waiting (space). */
	struct shoal__bell_counts in_db, up_db, space_db;
};

/* What one dispatcher did for a group (the registry slot's counts for its
 * present owner). */
struct shoal__gstat_view {
	uint64_t delivered, dropped_full, dropped_dead, dropped_corrupt;
};

/*
 * A group's latency histogram (runtime/layout.h struct shoal__mbx_lat),
 * summed over its workers: `count` is the sum of the buckets.
 */
struct shoal__lat_sums {
	uint64_t bucket[SHOAL__LAT_BUCKETS];
	uint64_t count, sum_ns, out_of_range;
};

/* How long the oldest record of an inbound ring has waited, from its
 * envelope's send_ns to when the view read it. */
struct shoal__ring_age {
	bool known;                     /* the ring held a record with a send_ns in the past */
	uint64_t age_ns;
};

struct shoal__group_view {
	uint32_t id;
	uint32_t slot_seq;              /* the slot's owner changes with it (registry.c) */
	char name[SHOAL_NAME_MAX];      /* as read, terminated; escape before printing */
	bool name_ok;                   /* a valid group name */
	uint32_t state;                 /* enum shoal_group_state, unchecked */
	uint32_t gen;
	int32_t pid;
	uint16_t n_workers, n_actors;
	int32_t node;
	uint32_t dispatcher;
	uint32_t attaches;
	/* Registry counters, summed over dispatchers, and each one's. */
	uint64_t delivered, dropped_full, dropped_dead, dropped_corrupt;
	struct shoal__gstat_view per_disp[SHOAL_MAX_NODES];
	/* Damage (DESIGN invariant 10): rings and mailboxes found corrupted,
	 * how many were replaced, and the messages they held. A group with
	 * damage is "damaged" (its view is corrupt: the tools exit 1). */
	uint32_t damaged, replaced;
	uint64_t lost_corrupt;
	uint64_t lost_queued;            /* left queued when it failed or the system stopped */

	char mailbox[SHOAL_SEG_NAME_MAX];   /* segment name; "" if it cannot be told */
	uint64_t mailbox_size;
	bool have_counters;             /* mailbox attached, header valid: `w` is set */
	struct shoal__worker_sums w;
	/* Each worker's own counters, when the view was taken with opts.workers:
	 * n_worker_counts of them (the mailbox's worker count), else NULL. */
	struct shoal__worker_sums *workers;
	uint16_t n_worker_counts;
	bool have_rings;                /* `rings` holds the mailbox's snapshot */
	struct shoal__seg_snap rings;
	/* With `rings`: the age of each ring's oldest record, by the index of
	 * rings.regions (inbound rings only; unknown for the others). */
	struct shoal__ring_age *ages;
	/* With the counters: the latency histogram, or NULL. */
	struct shoal__lat_sums *lat;

	bool corrupt;                   /* something about this group does not add up */
	char reason[SHOAL_ERR_MSG_MAX]; /* the first such thing */
};

struct shoal__sys_view {
	char system[SHOAL__SYSTEM_MAX];
	char registry_path[256];
	struct shoal_seg_info registry;  /* the registry segment's header */
	int router_alive;               /* shoal_seg_probe(): 1, 0, or a negative errno */
	int32_t router_pid;
	uint32_t state;                 /* 1 running, 2 stopping */
	uint32_t n_nodes;
	uint32_t n_dispatchers;         /* bounded by SHOAL_MAX_NODES */
	uint32_t cpu_words;             /* of each CPU set; bounded by SHOAL__CPU_WORDS_MAX */
	uint32_t route_version;
	uint32_t n_routes;
	uint64_t spin_ns;
	uint64_t yield_ns;              /* router.yield: looks yielding the CPU after the spin */
	uint32_t released;              /* run-time groups freed when their process left */
	uint64_t lost_released;         /* messages they lost: queued then, or counted before */
	struct shoal__disp_view disp[SHOAL_MAX_NODES];
	/* The doorbell segment (shoal.S.bell) was read: each dispatcher's
	 * doorbell in disp[].doorbell, and the one of held wake-ups here. */
	bool have_bells;
	struct shoal__bell_counts waker;
	uint32_t n_types;
	struct shoal__type_view *types;
	uint32_t n_groups;              /* bounded by SHOAL_MAX_GROUPS */
	struct shoal__group_view *groups;
	uint64_t taken_ns;              /* CLOCK_MONOTONIC when the registry was read */

	bool corrupt;                   /* the registry itself does not add up */
	char reason[SHOAL_ERR_MSG_MAX];
};

struct shoal__sys_view_opts {
	bool mailboxes;                 /* attach every group's mailbox (counters) */
	bool rings;                     /* and snapshot its rings (implies mailboxes) */
	bool workers;                   /* and keep each worker's counters (implies mailboxes) */
	uint32_t check_retries;         /* for rings that fail their check */
};

/*
 * Take a view of system `system` (a system name) in $SHOAL_SHM_DIR.
 * Returns 0 (problems found are recorded in the view), or with a reason in
 * *err: -EINVAL (bad name), -ENOMEM, -EFAULT (the registry file shrank while
 * it was read), or what attaching the registry returned (-ENOENT: no such
 * system; -EPROTO, -EPROTONOSUPPORT, -EBADMSG, -EUCLEAN, -EACCES ...).
 * On success call shoal__sys_view_free().
 */
int shoal__sys_view_take(struct shoal__sys_view *v, const char *system,
			 const struct shoal__sys_view_opts *opts, struct shoal_err *err);

void shoal__sys_view_free(struct shoal__sys_view *v);

/* True when the registry, a group or one of its rings looks corrupted. */
bool shoal__sys_view_corrupt(const struct shoal__sys_view *v);
bool shoal__group_view_corrupt(const struct shoal__group_view *g);

/* Groups by state, and restarts (attaches beyond the first), over the view. */
struct shoal__sys_counts {
	uint32_t declared;   /* slots in a valid state other than empty */
	uint32_t running;    /* running or stopping: a process is attached */
	uint32_t failed;
	uint32_t stopped;    /* stopped on request, no process */
	uint64_t restarts;
};

void shoal__sys_view_count(const struct shoal__sys_view *v, struct shoal__sys_counts *c);

/* Restarts of one group: its attaches beyond the first. */
uint32_t shoal__group_view_restarts(const struct shoal__group_view *g);

/*
 * Report why shoal__sys_view_take() failed with `ret`, through
 * shoal__cli_fail() (text on stderr, or the error document under --json).
 * Returns the exit code for it: SHOAL_EXIT_ATTACH.
 */
int shoal__sys_view_fail(const char *cmd, const char *system, int ret,
			 const struct shoal_err *err);

/* Group `id`, or NULL when the registry has no such slot. */
const struct shoal__group_view *shoal__sys_view_group(const struct shoal__sys_view *v, int id);

/* Message type `id`, or NULL. */
const struct shoal__type_view *shoal__sys_view_type(const struct shoal__sys_view *v,
						    uint32_t id);

/* Messages waiting in a group's inbound rings (shoal__ring_is_inbound()), and their bytes. */
void shoal__group_view_queued(const struct shoal__group_view *g, uint64_t *records,
			      uint64_t *bytes);

/*
 * The latency under which a fraction q (0 < q <= 1) of the histogram's
 * messages fall: the midpoint of the bucket that holds the q-th one, within
 * 6.25 % of its value (runtime/layout.h). 0 when the histogram is empty.
 */
uint64_t shoal__lat_quantile(const struct shoal__lat_sums *l, double q);

/* The age of the oldest record in a group's inbound rings; false if none
 * is known (no record waits, or none could be read). */
bool shoal__group_view_oldest(const struct shoal__group_view *g, uint64_t *age_ns);

/* "empty", "down", "running", "stopping", "failed", "stopped"; NULL for
 * another value. */
const char *shoal__group_state_name(uint32_t state);

/* Whether a mailbox ring of this tag feeds a worker (runtime/layout.h). */
bool shoal__ring_is_inbound(const struct shoal_seg_tag *tag);

/* "uplink", "dispatched", "direct"; NULL for another role. */
const char *shoal__ring_role_name(uint32_t role);

/* Who writes and who reads a mailbox ring, from its tag, in buf: e.g.
 * "dispatcher 0 -> worker 1, replacement 2". Returns buf. */
const char *shoal__ring_path(char *buf, size_t len, const struct shoal_seg_tag *tag);

/* A mailbox ring's identity as JSON members: role, worker, dispatcher or
 * from_group and from_worker, generation. */
void shoal__json_ring_tag(struct shoal__json *j, const struct shoal_seg_tag *tag);

/* "running", "stopping"; NULL for another value. */
const char *shoal__system_state_name(uint32_t state);

/* "alive", "dead" or "unknown", for a shoal_seg_probe() result. */
const char *shoal__alive_name(int alive);

/* The directory the user's segments live in: $SHOAL_SHM_DIR, or
 * /dev/shm/shoal-<euid> (shoal_seg_dir_path()). */
const char *shoal__shm_dir(void);

#endif
