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
	uint32_t gen;                   /* replacements: named NAME, then NAME.rGEN */
};

/* A condemned ring taken out of service, kept mapped until the router ends. */
enum { SHOAL__RETIRED_OPEN, SHOAL__RETIRED_WORKER, SHOAL__RETIRED_DONE };

struct shoal__retired {
	uint16_t group;
	uint16_t worker;
	bool uplink;
	uint8_t state;                  /* SHOAL__RETIRED_*: who still counts its records */
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
	bool stop_wanted;               /* asked to stop: holds until a process leaves */
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
};

struct shoal__route_entry {
	struct shoal_filter f;
	int owner;                      /* group that subscribed it, -1: the router's API */
};

struct shoal_router {
	char system[SHOAL__SYSTEM_MAX];
	mode_t mode;
	uint32_t up_cap, in_cap, direct_cap;
	int route_mode;                 /* SHOAL__ROUTE_* */
	struct shoal_topology topo;
	bool numa_real;                 /* topology read from libnuma: bind memory */

	struct shoal_seg reg_seg, bell_seg;
	struct shoal__reg_hdr *reg;
	struct shoal__reg_type *types;
	struct shoal__reg_group *regg;
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

#endif
