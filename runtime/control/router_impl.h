/* SPDX-License-Identifier: MIT */
/*
 * The router's control state (runtime/control/). Private. The dispatchers
 * never see it: they see only struct shoal__dispatch_shared and the
 * published snapshot (runtime/data/dispatch.h).
 */
#ifndef SHOAL_RUNTIME_ROUTER_IMPL_H
#define SHOAL_RUNTIME_ROUTER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <shoal/ring.h>
#include <shoal/router.h>

#include "runtime/data/dispatch.h"
#include "runtime/layout.h"
#include "runtime/route/route.h"

/*
 * A ring of a mailbox as the router allocated it: the router's own record,
 * never read back from the mailbox's directory (which a peer may damage).
 */
struct shoal__ring_ref {
	void *mem;                      /* in the router's mapping of the mailbox */
	uint64_t len;
	uint32_t gen;                   /* replacements: its tag's gen (runtime/layout.h) */
};

/* A condemned ring taken out of service, kept mapped until the router ends. */
enum { SHOAL__RETIRED_OPEN, SHOAL__RETIRED_WORKER, SHOAL__RETIRED_DONE };

struct shoal__retired {
	uint16_t group;
	uint16_t worker;
	bool uplink;
	uint8_t state;                  /* SHOAL__RETIRED_*: who still counts its records */
	/* A direct ring of a replaced mailbox: its producer, worker `worker`
	 * of group `src` in incarnation `src_gen`, may still write it. */
	bool direct;
	uint16_t src;
	uint32_t src_gen;
	void *mem;
	uint64_t len;
};

/* Router-local state of one group slot; guarded by router->lock. */
struct shoal__group_slot {
	bool used;
	char name[SHOAL_NAME_MAX];
	uint16_t n_workers;
	uint16_t n_actors;
	int node;
	uint32_t in_cap;                /* inbound ring bytes */
	uint8_t overflow;
	int conn;                       /* control connection of the attached process, -1 */
	/* A group of another host whose host is marked down: failed in what
	 * is published (snapshot.c) before its registry state says so
	 * (router.c shoal__router_show_hosts()), so that a sender that sees
	 * the state also sees the routes that go with it. */
	bool host_down;
	bool stop_wanted;               /* asked to stop: holds until a process leaves
					 * or shoal_router_resume_group() */
	bool runtime;                   /* registered by a process, never declared */
	pid_t pid;
	struct shoal_seg mbx;
	struct shoal__mbx_hdr *hdr;
	/* What the router put in the mailbox (DESIGN invariant 10). */
	struct shoal__ring_ref up[SHOAL_MAX_WORKERS];
	struct shoal__ring_ref in[SHOAL_MAX_WORKERS][SHOAL_MAX_NODES];
	struct shoal_seg_region *dir;   /* private copy of the directory it wrote */
	uint32_t n_dir, cap_dir;
	bool mbx_bad;                   /* damaged: replace it when the group next attaches */
	/* A run-time group whose process left (damage.c release_left()): since
	 * when the dispatchers took nothing more of its uplinks, and how much
	 * they had taken then. 0: not looked at since it left. */
	uint64_t stall_ns;
	uint64_t stall_out;
	/* A freed slot (registry.c shoal__release_group()): per group, the
	 * incarnation (gen) of its process that held a direct link into the
	 * freed mailbox, 0 for none. The slot is given to another group only
	 * once each of those processes is gone: until then it may still write
	 * into its old link, and would never notice a new owner. */
	uint32_t linked_gen[SHOAL_MAX_GROUPS];
};

struct shoal__route_entry {
	struct shoal_filter f;
	int owner;                      /* group that subscribed it, -1: the router's API */
};

struct shoal_router {
	char system[SHOAL__SYSTEM_MAX];
	mode_t mode;
	uint32_t up_cap, in_cap, direct_cap;
	/* The capacity of the direct rings to and from this host's bridge
	 * (0: no bridge): they carry every message that crosses hosts
	 * direct, so they are sized as inbound rings, not as direct ones
	 * (shoal__router_bridge_rings()). */
	uint32_t bridge_cap;
	int route_mode;                 /* SHOAL__ROUTE_* */
	int n_nodes;
	/* Each node's CPUs (placement.c), as long as the router runs. A CPU
	 * set in the registry is cpu_words words: enough for this machine's
	 * possible CPUs and every CPU a described topology names. */
	struct bitmask *node_cpus[SHOAL_MAX_NODES];
	uint32_t cpu_words;
	bool numa_real;                 /* topology read from libnuma: bind memory */
	/* Whether the data path streams its copies (router.stream), and
	 * the line probe's round trip (ns) that chose it under
	 * SHOAL_STREAM_AUTO; 0: not probed (asked for, or one CPU). Set at
	 * start; the dispatchers find it in their registry entry, groups in
	 * the welcome. */
	bool stream;
	uint32_t stream_probe_ns;

	struct shoal_seg reg_seg, bell_seg;
	struct shoal__reg_hdr *reg;
	struct shoal__reg_type *types;
	struct shoal__reg_group *regg;
	uint64_t *cpus;                 /* the registry's CPU table */
	struct shoal__bell *bell;

	int listen_fd;
	int wake_fd;                    /* eventfd: wakes the control thread */
	char sock_path[256];
	pthread_t control;
	bool control_started;

	pthread_mutex_t lock;           /* everything below; never taken by dispatchers */
	pthread_cond_t changed;
	uint64_t change_count;
	struct shoal__group_slot groups[SHOAL_MAX_GROUPS];
	uint32_t n_groups;
	struct shoal__route_entry *routes;
	uint32_t n_routes, cap_routes;
	uint32_t next_route_id;
	uint32_t version;
	int n_disp;                     /* dispatchers started (one per node in use) */
	int disp_node[SHOAL_MAX_NODES];
	struct shoal__dispatcher *disp[SHOAL_MAX_NODES];
	struct shoal__waker *waker;     /* makes held wake-ups by the deadline */
	struct shoal__dispatch_shared dp;   /* what the dispatchers read */

	/* Damage: condemned rings and replaced mailboxes, kept mapped because
	 * dispatchers' handles may still point into them until the router ends. */
	struct shoal__retired *retired;
	uint32_t n_retired, cap_retired;
	struct shoal_seg *old_mbx;
	uint32_t n_old_mbx;
	pthread_t watch;
	bool watch_started;
	bool damage_unpublished;        /* a replacement waits for a publish that failed */

};

/*
 * Shared between the router's files (one heading per file that defines
 * them). Each runs with router->lock held, except during start and destroy,
 * when no other router thread runs, and the two thread mains, which take it.
 */
struct shoal__ctl_type;

/* router.c */
/* Ring every worker's doorbells: waiters re-check the groups' states. */
void shoal__wake_all_workers(struct shoal_router *r);
/* Count a change and wake shoal_router_wait_change(). */
void shoal__note_change(struct shoal_router *r);
/* Count what group g's inbound rings still hold as lost_queued; returns it. */
uint64_t shoal__group_count_stranded(struct shoal_router *r, int g);

/* placement.c */
/* The machine's NUMA topology, or `given` (a described one: memory is not
 * bound). Returns 0, -EINVAL (a described CPU beyond SHOAL__CPUS_MAX) or
 * -ENOMEM, with the reason in *err; shoal__topology_free() frees what it
 * made either way. */
int shoal__topology_read(struct shoal_router *r, const struct shoal_topology *given,
			 struct shoal_err *err);
void shoal__topology_free(struct shoal_router *r);
/* The node with the fewest groups (ties: the lowest). */
int shoal__place_group(const struct shoal_router *r);
/* The dispatcher of `node`, or -1 if none is started. */
int shoal__dispatcher_of_node(const struct shoal_router *r, int node);
/* The dispatcher of `node`, started (with its inbound rings) if it is not yet. */
int shoal__ensure_dispatcher(struct shoal_router *r, int node, struct shoal_err *err);
/* The line round trip from which SHOAL_STREAM_AUTO streams (ns): see
 * docs/design.md, "Streamed copies", for the measurements. */
#define SHOAL__STREAM_FAR_NS 300u
/* Whether the data path streams its copies (r->stream), as `mode`
 * (SHOAL_STREAM_*) says: AUTO times the line probe between CPUs of node 0
 * (r->stream_probe_ns). Before the router's threads run. Returns 0, or
 * -ENOMEM with the reason in *err. */
int shoal__stream_choose(struct shoal_router *r, int mode, struct shoal_err *err);

/* snapshot.c */
/* Free a snapshot no dispatcher can see any more; NULL is ignored. */
void shoal__snapshot_free(struct shoal__snapshot *s);
/* Build a snapshot of the current state and publish it (DESIGN invariant 5). */
int shoal__publish(struct shoal_router *r, struct shoal_err *err);
/* Register a message type, or check it against the registered one. */
int shoal__register_type(struct shoal_router *r, const struct shoal__ctl_type *t,
			 struct shoal_err *err);
/* Append a route of `owner` (-1: the router's API); no publish. */
int shoal__route_entry_append(struct shoal_router *r, const struct shoal_filter *f, int owner,
			      uint32_t *id, struct shoal_err *err);
/* Remove routes matching (id, owner), id 0: all of the owner's; returns how many. */
uint32_t shoal__route_entry_remove(struct shoal_router *r, uint32_t id, int owner,
				   bool any_owner);

/* registry.c */
/* The id of the group called `name`, or -ENOENT. */
int shoal__find_group(const struct shoal_router *r, const char *name);
/* The tag of worker w's uplink (d < 0) or inbound ring from dispatcher d. */
struct shoal_seg_tag shoal__ring_tag(unsigned w, int d, uint32_t gen);
/* A ring's name for people, made from its tag; nothing reads it back. */
void shoal__ring_name(char name[SHOAL_SEG_REGION_NAME_MAX], const struct shoal_seg_tag *tag);
/* Add the ring `tag` names to a group's mailbox, initialised before a worker can see it. */
int shoal__alloc_ring(struct shoal__group_slot *s, const struct shoal_seg_tag *tag, uint32_t cap,
		      struct shoal__ring_ref *ref);
/* Give every group an inbound ring per worker from dispatcher `d`. */
int shoal__add_dispatcher_rings(struct shoal_router *r, int d);
/* Create and lay out group slot s's mailbox on its node. */
int shoal__create_mailbox(struct shoal_router *r, struct shoal__group_slot *s, uint16_t id,
			  struct shoal_err *err);
/* Free run-time group g, which has no process: count what it held, remove its
 * routes, unlink its mailbox. 0, or a negative errno with nothing changed. */
int shoal__release_group(struct shoal_router *r, int g);
/* Declare a group (`runtime`: registered by a process) that runs on host
 * `host` of the file (-1: this one); returns its id. */
int shoal__declare_group(struct shoal_router *r, const struct shoal_group_spec *spec,
			 bool runtime, int host, struct shoal_err *err);
/* Refuse a live system or foreign files; remove a dead system's leftovers. */
int shoal__claim_system(struct shoal_router *r, struct shoal_err *err);
/* Create the registry and doorbell segments of the system. */
int shoal__create_registry(struct shoal_router *r, struct shoal_err *err);

/* damage.c */
/* Count what retired rings hold once nobody else will (`gone`: a group that left). */
void shoal__settle_retired(struct shoal_router *r, int gone);
/* Read a ring whose reader is gone to its end (the router as its reader),
 * mark it given up by its reader, and return how many records it held. */
uint64_t shoal__ring_drain_dead(void *mem, uint64_t len);
/* Name in `name` the direct ring from worker src_w of group src_g to worker w of
 * group g in service, replacing a condemned one. */
int shoal__direct_ring(struct shoal_router *r, int g, unsigned w, int src_g, unsigned src_w,
		       char name[SHOAL_SEG_REGION_NAME_MAX]);
/* Before group g attaches: replace its mailbox if it is damaged. */
int shoal__mailbox_repair(struct shoal_router *r, int g, struct shoal_err *err);
/* The watch thread: looks for condemned rings and damaged mailboxes; takes the lock. */
void *shoal__watch_main(void *arg);

/* server.c */
/* Listen on the system's control socket; make the control thread's wake-up eventfd. */
int shoal__open_socket(struct shoal_router *r, struct shoal_err *err);
/* The control thread: serves the control connections; takes the lock per request. */
void *shoal__control_main(void *arg);

#endif
