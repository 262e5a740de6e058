/* SPDX-License-Identifier: MIT */
/*
 * Group process internals shared by the control plane (runtime/control/:
 * group.c attach and lifecycle, links.c the link opener) and the data plane
 * (runtime/data/: rings.c, send.c, poll.c, request.c). Private.
 *
 * The data plane sees a group through its link tables (struct shoal_ctx):
 * the uplink, the inbound rings, the direct links per peer worker and the
 * in-process forwarding rings. It never makes a control call: a direct link
 * it lacks is asked for (a bit in link_want), opened by the link opener
 * thread, and announced on link_db.
 */
#ifndef SHOAL_RUNTIME_GROUP_IMPL_H
#define SHOAL_RUNTIME_GROUP_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>
#include <shoal/ring.h>

#include "runtime/layout.h"
#include "shm/clock.h"
#include "shm/segment_layout.h"
#include "shm/util.h"

/* In-process rings between workers. Process-private: what they hold when
 * the process is killed is lost, and counted (fwd_lost) at the next attach. */
#define SHOAL__FWD_CAP (64u * 1024)

/* Processes that may die handling one mailbox record before the next sets
 * it aside (counted in set_aside) instead of handling it again. */
#define SHOAL__CRASHES_MAX 3u

/* A type this program declared, with its registry slot. */
struct shoal__ltype {
	uint32_t id;
	uint32_t max_size;
	struct shoal__reg_type *reg;
};

/* Another group's mailbox, mapped in this process for direct sends. */
struct shoal__peer {
	bool mapped;
	struct shoal_seg seg;
	struct shoal__mbx_hdr *hdr;
};

/*
 * This worker's producer side of a direct ring into (group, worker), and who
 * owns it. The data plane asks for it (a bit in shoal_ctx.link_want); the
 * link opener, which alone writes an entry while it is not READY, fills it
 * and stores READY or FAILED (release); from READY the data plane owns it
 * until it gives the ring up (back to NONE, then it may ask again).
 */
enum { SHOAL__LINK_NONE, SHOAL__LINK_READY, SHOAL__LINK_FAILED };

struct shoal__dout {
	_Atomic uint32_t state;          /* SHOAL__LINK_* */
	int err;                         /* FAILED: why (negative errno) */
	void *ring;
	struct shoal_ring_prod p;
	struct shoal__mbx_worker *dst;
	uint32_t unann;                  /* our commits its consumer was not woken for */
	uint32_t mbx_gen;                /* the registry's mbx_gen of the mailbox `dst` is in */
	uint32_t hint;                   /* our ring's bit in its consumer's ready summary */
};

/* A ring this worker consumes. */
#define SHOAL__SRC_WORKERS (-3)

struct shoal__inring {
	void *mem;
	uint64_t len;
	bool condemned;   /* found corrupted: we gave it up (shoal_ring_condemn()) */
	struct shoal_ring_cons c;
	int src_group;    /* the group whose workers write it; -1: a dispatcher;
			   * SHOAL__SRC_WORKERS: another worker of this process */
	uint32_t hint_next;   /* the next ring of its ready hint, index + 1; 0: none */
	uint32_t look;        /* the look whose pass reads it: its hint's bit, or READY_SET */
};

/* The message a handler runs with, and its payload's copy once a request
 * of the handler moved it out of its ring (poll.c shoal__pin_message()). */
struct shoal__held_msg {
	struct shoal_msg m;
	void *pin;
	struct shoal__batch *batch;   /* on_batch's: its first message is m */
};

/* The messages handed to on_batch (poll.c take_batch()): their envelopes'
 * checked copies, and their payloads' copy once a request of the handler
 * moved them out of their ring. */
#define SHOAL__BATCH_MAX 32u
struct shoal__batch {
	struct shoal_msg m[SHOAL__BATCH_MAX];
	struct shoal_envelope env[SHOAL__BATCH_MAX];
	void *pin;
	uint32_t n;
};

/* A message kept aside while the worker waits for a response. */
struct shoal__deferred {
	struct shoal__deferred *next;
	uint32_t len;
	/* Aligned as in a ring: payloads keep their 8-byte alignment. */
	_Alignas(8) unsigned char rec[];
};

#define SHOAL__HELD_MAX 64

struct shoal__relay_run;

struct shoal_ctx {
	struct shoal_group *g;
	unsigned w;
	struct shoal__mbx_worker *mw;
	struct shoal_ring_prod up;
	void *up_mem;                    /* the uplink `up` is attached to */
	uint64_t up_len;
	uint32_t up_gen;                 /* its generation (mw->up_gen when attached) */
	bool up_condemned;               /* we found it corrupted */
	struct shoal_doorbell *bell;     /* our dispatcher's doorbell */
	struct shoal_wake_mod wmod;      /* wake-ups of our direct links' consumers */
	struct shoal__dout *held[SHOAL__HELD_MAX];   /* links with held wake-ups */
	uint32_t n_held;
	bool held_all;                   /* more than the list holds: scan them all */
	struct shoal_idle idle;          /* how we wait for messages (spin, then sleep) */
	struct shoal_quiet space_quiet;  /* how we wake senders waiting for room */

	struct shoal__inring *in;        /* mailbox rings, then in-process ones */
	uint32_t n_in, cap_in;
	uint32_t dir_seen;               /* mailbox directory entries already scanned */
	uint32_t rr;                     /* ring to start the next pass at */
	bool released;                   /* a pass released records: ring space_db */
	uint32_t look;                   /* what the next pass reads without asking
					  * mw->in_db's summary: 0 (ask it), every
					  * ring (READY_SET) or the rings of hint bits */
	uint32_t quiet_polls;            /* passes the summary answered, mod 2^32 */
	struct shoal__inring *hot;       /* the ring a pass last took records from,
					  * while there are at most SCAN_ALL_MAX, or
					  * NULL: an empty poll reads its tail beside
					  * the summary (poll.c worth_a_pass()) */
	/* The rings of each ready hint (direct and dispatched rings: the
	 * shoal_doorbell_ready_hint() of their key, runtime/layout.h), a list
	 * through in[].hint_next: index + 1, 0 none. */
	uint32_t hint_first[SHOAL_DOORBELL_READY_HINTS], hint_last[SHOAL_DOORBELL_READY_HINTS];

	/* The last direct send's destination, checked (send.c send_memo()):
	 * type 0, none. */
	struct shoal__send_memo {
		uint64_t dest;
		uint32_t type, max_size;
		const struct shoal__reg_group *rg;
		struct shoal__dout *o;
	} memo;

	/* Direct links: per group, SHOAL_MAX_WORKERS entries, allocated and
	 * published (release) by the link opener on the first ask. */
	struct shoal__dout *_Atomic dout[SHOAL_MAX_GROUPS];
	_Atomic uint32_t link_want[SHOAL_MAX_GROUPS];   /* worker bits asked for */
	struct shoal_doorbell link_db;   /* rung by the opener after each answer */
	struct shoal_ring_prod *fwd;     /* [n_workers]: to other workers of this process */
	/* Copies forwarded from a mailbox ring record are committed only after
	 * that record is released (see forward() in runtime/data/poll.c). */
	bool fwd_hold;
	bool polling;                            /* inside poll_rings() */
	uint32_t fwd_pend[SHOAL_MAX_WORKERS];   /* reserved, not committed, per worker */
	uint32_t fwd_any;                        /* sum of fwd_pend */
	/* A record earlier processes died handling, and how many of them;
	 * after it came round, the records that go one by one (not in an
	 * on_batch call: poll.c take_batch()). */
	uint64_t suspect, suspect_crashes;
	uint32_t single;

	uint64_t trace_base;             /* group + 1 and worker, in new trace ids' high bits */

	/* Handler context. */
	struct shoal_actor *cur;
	struct shoal__held_msg *cur_msg; /* the message the handler was handed */
	bool responded;

	/* Zero-copy reservation. */
	struct shoal_ring_prod *res_p;
	struct shoal__dout *res_o;       /* its direct link; NULL: the uplink */

	/* A request waiting for its response. */
	uint64_t next_rid;
	uint64_t wait_rid;
	struct shoal_reply *wait_reply;
	int wait_status;
	bool wait_done;
	struct shoal__deferred *def_head, *def_tail;
	/* The outer pass's run in hand (poll.c): records of ring in[ring]
	 * peeked at once, `left` of them from `next` on not yet handled. */
	struct {
		const unsigned char *next;
		uint32_t len, stride, left, ring;
		bool active;
		bool taken_over;             /* a request's pass took it over */
	} run;

	/* The bridge's reader of its mailbox's runs (runtime/data/relay.h,
	 * shoal__relay_runs()); NULL: none, every record to the handler. */
	uint32_t (*relay_run)(void *user, const struct shoal__relay_run *r);
	void *relay_user;
	struct shoal__batch batch;       /* take_batch()'s, in the outer pass only */
	/* The last record handle_record() (poll.c) checked in full and handed
	 * to an actor of this worker, `ok_slot`: a record whose checked words
	 * repeat its envelope's goes to the same actor unchecked again. Its
	 * len starts at UINT32_MAX, which no record's checks let through. */
	struct shoal_envelope ok_env;
	uint16_t ok_slot;

	/* The latency histogram (runtime/data/poll.c lat_record()), the
	 * clock it read for this ring batch, and the bound a latency measured
	 * against it stays under: 0 until the batch's first handler reads it. */
	struct shoal__mbx_lat *lat;
	uint64_t lat_now, lat_bound;
	/* The stamps' clock: send_ns and lat_now (shm/clock.h). */
	struct shoal__clock clk;

	/* Counters, mirrored into mw with relaxed stores. */
	uint64_t sent_routed, sent_direct, received, handled, try_failed, stale, malformed,
		 discarded, fwd_sent, fwd_taken, set_aside, lost_corrupt;
};

struct shoal_group {
	struct shoal_group_desc desc;
	char name[SHOAL_NAME_MAX];
	char system[SHOAL__SYSTEM_MAX];
	uint16_t id;
	uint16_t n_workers;
	uint16_t n_actors;
	uint32_t gen;
	uint64_t spin_ns;
	uint64_t yield_ns;               /* router.yield: looks yielding the CPU after the spin */
	uint64_t wake_deadline_ns;       /* router.wake_deadline: how long a wake-up may be held */
	bool stream;                     /* bursts stream their copies (router.stream) */

	int ctl;
	int ctl_ms;                      /* how long a control request waits (group.c) */
	uint32_t ctl_owed;               /* replies late past ctl_ms, dropped when they come */
	pthread_mutex_t ctl_lock;        /* the control socket, ctl_owed and peer mappings */
	_Atomic uint64_t router_checked_ns;  /* last look at ctl for a hang-up */
	atomic_bool router_lost;         /* ctl hung up: the router is gone */

	struct shoal__registry reg;
	struct shoal_seg bell_seg, mbx_seg;
	struct shoal__bell *bell;
	struct shoal__mbx_hdr *mbx;

	struct shoal__ltype *types;      /* open addressing, types_mask + 1 slots */
	uint32_t types_mask;

	struct shoal__peer peers[SHOAL_MAX_GROUPS];   /* mapped by the link opener */
	/* The link opener thread (links.c), woken on link_bell by an ask. */
	pthread_t linker;
	_Atomic uint32_t linker_state;   /* SHOAL__LINKER_*: started by the first ask */
	atomic_bool linker_stop;
	struct shoal_doorbell link_bell;
	struct shoal_actor *actors;
	struct shoal_ctx *ctx;
	void *fwd_mem;                   /* n_workers^2 in-process rings */
	atomic_bool stop;
};

/* runtime/data/rings.c */
int shoal__ctx_init(struct shoal_group *g, unsigned w, struct shoal_err *err);
void shoal__ctx_fini(struct shoal_ctx *ctx);
void shoal__ctx_scan_new(struct shoal_ctx *ctx);

/* Take the rings the router added to our mailbox since the last look: one
 * load inline (the directory's count, A2 of shm/segment.c), a call only
 * when it moved. Every pass looks. */
static inline void shoal__ctx_scan(struct shoal_ctx *ctx)
{
	const struct shoal__seg_hdr *h = ctx->g->mbx_seg.base;

	if (SHOAL_UNLIKELY(shoal_load_acquire(&h->dir_count) != ctx->dir_seen))
		shoal__ctx_scan_new(ctx);
}
bool shoal__ctx_uplink_renew(struct shoal_ctx *ctx);
bool shoal__stop_requested(struct shoal_group *g);

/* group.c: control requests (serialised on ctl_lock). */
int shoal__open_direct(struct shoal_group *g, unsigned src_worker, uint16_t dst_group,
		       uint16_t dst_worker, char *ring, struct shoal_err *err);

/* links.c: the link opener thread. The first ask of the process starts it
 * (a process that never sends directly has none: a forked child that does
 * not need it never starts a thread); detach stops it before the workers'
 * contexts are torn down. Start returns 0 when it runs or another thread is
 * starting it, else -errno (the next ask tries again). */
enum { SHOAL__LINKER_NONE, SHOAL__LINKER_STARTING, SHOAL__LINKER_RUNNING };
int shoal__linker_start(struct shoal_group *g);
/* links.c: open ctx's link into (dg, dw) on the calling thread (ctx's own),
 * for a call that may wait, while no opener thread runs and the link is
 * not asked for: then nothing else writes the entry. 0 or -errno; the
 * answer is in the entry as the opener would leave it. */
int shoal__link_open_here(struct shoal_ctx *ctx, uint16_t dg, uint32_t dw);
void shoal__linker_stop(struct shoal_group *g);

/* group.c: true once the router is gone (its control socket hung up); the
 * group is then stopped. Looks at the socket at most every 50 ms. */
bool shoal__router_gone(struct shoal_group *g);

#endif
