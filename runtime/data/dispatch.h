/* SPDX-License-Identifier: MIT */
/*
 * The dispatchers' view of the router (runtime/data/dispatch.c): the
 * published routing snapshot and the few words the control side shares with
 * them. A dispatcher reads nothing else of the router; the control side
 * (runtime/control/) builds snapshots, publishes them and owns everything
 * else. Private.
 */
#ifndef SHOAL_RUNTIME_DATA_DISPATCH_H
#define SHOAL_RUNTIME_DATA_DISPATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define _LGPL_SOURCE
#include <urcu-qsbr.h>

#include <shoal/doorbell.h>

#include "runtime/layout.h"
#include "runtime/route/route.h"

/*
 * What dispatchers need to know about one destination group. Part of a
 * published snapshot: immutable, and the mailbox mapping it points into
 * lives as long as the router (group slots are never unmapped while it runs).
 */
struct shoal__snap_group {
	bool used;
	uint8_t state;                  /* enum shoal_group_state at publish time */
	uint16_t n_workers;
	uint16_t n_actors;
	uint8_t overflow;               /* SHOAL_OVERFLOW_* */
	struct shoal__reg_group *reg;   /* for the generation, read at dispatch */
	struct shoal__mbx_hdr *mbx;
	/* Inbound ring of worker w fed by dispatcher d: in[w * n_disp + d]. */
	void *in[SHOAL_MAX_WORKERS * SHOAL_MAX_NODES];
	uint64_t in_len;
};

/* One uplink a dispatcher drains. */
struct shoal__snap_uplink {
	uint16_t group;
	uint16_t worker;
	void *ring;
	uint64_t len;
	struct shoal__mbx_worker *mw;
};

/* An immutable routing snapshot, published with one pointer swap. */
struct shoal__snapshot {
	uint32_t version;
	uint32_t n_disp;
	struct shoal__route_table *routes;
	uint32_t max_matches;
	uint32_t n_groups;            /* the slots of groups[] in use are below this */
	struct shoal__snap_group groups[SHOAL_MAX_GROUPS];
	uint32_t n_uplinks[SHOAL_MAX_NODES];
	struct shoal__snap_uplink *uplinks[SHOAL_MAX_NODES];
};

/*
 * liburcu is not built with ThreadSanitizer, so TSan cannot see that a grace
 * period orders a dispatcher's last read of a snapshot before the writer
 * frees it. Under TSan (only) these make that happens-before explicit: each
 * quiescent state is a release on the snapshot pointer, the end of a grace
 * period an acquire, and the publish and the dereference compiler atomics
 * (liburcu's are inline assembly, invisible to TSan).
 */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define SHOAL__SNAP_DEREF(p)     __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define SHOAL__SNAP_PUBLISH(p, v) __atomic_exchange_n(&(p), (v), __ATOMIC_ACQ_REL)
#define SHOAL__SNAP_QUIESCENT(p) __tsan_release((void *)&(p))
#define SHOAL__SNAP_GRACE(p)     __tsan_acquire((void *)&(p))
#else
#define SHOAL__SNAP_DEREF(p)     rcu_dereference(p)
#define SHOAL__SNAP_PUBLISH(p, v) rcu_xchg_pointer(&(p), (v))
#define SHOAL__SNAP_QUIESCENT(p) ((void)0)
#define SHOAL__SNAP_GRACE(p)     ((void)0)
#endif

/*
 * Shared between the control side and its dispatchers. The control side
 * writes; dispatchers only read (relaxed: each change is followed by a ring
 * of their doorbells, which orders it).
 */
struct shoal__dispatch_shared {
	struct shoal__snapshot *snap;   /* RCU-protected */
	atomic_bool stopping;
	atomic_bool held;               /* dispatchers pause (shoal_router_hold) */
	uint64_t spin_ns;               /* spin this long idle before sleeping */
	uint64_t yield_ns;              /* then look this long, yielding, before sleeping */
	uint64_t wake_deadline_ns;      /* how long a held wake-up may wait */
	struct shoal_doorbell *waker_bell;   /* rung by a first hold (waker.c) */
};

struct shoal__dispatcher;
struct bitmask;   /* libnuma's CPU set (<numa.h>), of any size */

/*
 * Start dispatcher `index`: it drains the uplinks that `sh->snap` lists for
 * it, sleeps on `bell`, and publishes its counters in `stats`, whose
 * stream_min (set before) says which chunks it streams. On success
 * the thread is named shoal-disp-<index> and pinned to `cpus` as
 * shoal__thread_start() pins.
 */
int shoal__dispatcher_start(struct shoal__dispatch_shared *sh, int index,
			    const struct bitmask *cpus,
			    struct shoal_doorbell *bell, struct shoal__reg_dispatcher *stats,
			    struct shoal__dispatcher **out);
/* Join a dispatcher after sh->stopping was set and its bell rung; free it. */
void shoal__dispatcher_stop(struct shoal__dispatcher *d);

/*
 * Start the waker (waker.c): it makes the wake-ups that producers hold
 * (shm/doorbell.c) once they are due, for every mailbox of `sh->snap`,
 * sleeping on sh->waker_bell when none is held. Thread shoal-waker, pinned
 * to `cpus`.
 */
struct shoal__waker;
int shoal__waker_start(struct shoal__dispatch_shared *sh, const struct bitmask *cpus,
		       struct shoal__waker **out);
/* Join the waker after sh->stopping was set and its bell rung; free it. */
void shoal__waker_stop(struct shoal__waker *w);

/*
 * A thread named `name`, pinned to `cpus` (a set of any size; the caller
 * keeps it). The kernel keeps the CPUs of the set this machine has online;
 * a set with none of them (or NULL, or empty) starts the thread unpinned: it
 * runs where the calling thread may. Returns 0, -ENOMEM (no memory for the
 * kernel's copy of the set) or another negative errno of pthread_create().
 */
int shoal__thread_start(pthread_t *t, const struct bitmask *cpus, void *(*fn)(void *),
			void *arg, const char *name);

#endif
