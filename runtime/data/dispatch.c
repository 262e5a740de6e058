/* SPDX-License-Identifier: MIT */
/*
 * Dispatchers: one thread per NUMA node in use, pinned to that node's CPUs.
 * Each drains the uplink rings of the groups placed on its node, matches
 * every message against the published routing snapshot, and copies it into
 * the inbound ring (of this dispatcher) of each matching group's worker.
 *
 * Why the sender's node: the dispatcher reads uplinks locally and writes
 * inbound rings that may be remote; remote stores drain through the store
 * buffer, while remote loads stall the pipeline, so the one unavoidable
 * cross-node transfer is done as a write.
 *
 * Memory picture (all process-local, owned by this thread):
 *   up[w * MAX_GROUPS + g]    consumer handle of each uplink + parking state
 *   ul[i]                     the snapshot's uplink i in up[]
 *   out[w * MAX_GROUPS + g]   producer handle of this dispatcher's inbound
 *                             ring of worker w of group g
 *   dirty[]                   outputs written since the last commit
 *   fc[i]                     where filter i of the vector sends a message,
 *                             when to one worker of a group of one, found
 *                             under the snapshot named there (hop_find())
 *
 * Ordering guarantees: ring R1/A1 and R2/A2 (shm/ring.c) order the message
 * bytes; doorbell F1/F2 (shm/doorbell.c) order sleeping. A1 here is the
 * rcu_dereference() of the snapshot, pairing with R1 rcu_xchg_pointer() in
 * snapshot.c shoal__publish().
 *
 * Progress guarantees: a pass is wait-free: a full destination never blocks
 * the dispatcher. A message sent with send() (blocking) that finds a
 * destination full parks its uplink: the message stays at the uplink's head,
 * unreleased, the destinations already served are remembered, and the pass
 * moves on; later passes retry only the remaining destinations. So a slow
 * consumer back-pressures exactly the senders that target it, and each
 * sender's order is kept. A try_send message is dropped for a full
 * destination and counted (DESIGN invariant 6).
 *
 * Damage (DESIGN invariant 10): a ring whose handle went into its sticky
 * -EUCLEAN state, or that does not even attach, is condemned (a mark in the
 * ring, see shoal_ring_condemn()) and counted once; from then on it is
 * skipped: an uplink reads as empty, and a copy for a corrupted inbound ring
 * is dropped and counted, never waited for, so one bad ring cannot park the
 * uplinks that feed it. The router's watch thread replaces a condemned ring
 * and republishes; the new pointer in the snapshot re-attaches the handle.
 * Detection costs one branch on paths that already failed (a NULL reserve,
 * an empty peek); an uplink whose handle went into its error state reads as
 * empty, and is found by a look at every uplink's state every CHECK_EVERY
 * turns and before each sleep (uplinks_check()); nothing is added when a
 * ring works.
 *
 * RCU (QSBR flavour): the thread is online while it runs passes and announces
 * a quiescent state after each; it goes offline only around the futex sleep.
 */
#include <assert.h>
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/doorbell.h>
#include <shoal/ring.h>

#include "runtime/data/dispatch.h"
#include "shm/clock.h"
#include "shm/util.h"

/*
 * Records per uplink per pass, routed in chunks. Each output a pass wrote is
 * committed, fenced and looked at for a wake-up once, after the pass, and
 * the uplink released once: at 100 groups a pass of 64 gave each output
 * about one record, so every record paid all of that. A pass of up to 256
 * gives each output several, at the price of up to 256 records' routing
 * (10-25 us here) before the first of them is committed, in a backlog only
 * (a pass takes what has arrived). Its records are found and copied 64 at
 * a time, so that a chunk's uplink records are still in the L1 when they
 * are copied (one pass of 256 in one piece: L1 read misses 5.25 -> 7.20 a
 * message at 100 groups, callgrind's cache simulation). bench/SUITE.md,
 * "Longer passes", has the measurements.
 */
#define PASS_CHUNK 64u
#define PASS_BUDGET (4 * PASS_CHUNK)
#define PARK_SLEEP_NS 200000      /* retry period while a blocking message waits */
#define IDLE_SLEEP_NS 100000000   /* re-check the stop flag this often when idle */
#define HELD_MAX 256              /* outputs with held wake-ups, listed */
#define CHECK_EVERY 64u           /* turns between looks for corrupted uplinks */

struct uplink {
	_Alignas(64) void *condemned; /* the ring we condemned last (counted once) */
	void *ring;                   /* what `c` is attached to (NULL: not attached) */
	struct shoal_ring_cons c;     /* at 16: see UP_LOOK_BYTES */
	bool parked;                  /* head record waits for a full destination */
	uint32_t n_done;              /* destinations already served for it */
	uint32_t cap_done;
	uint32_t *done;               /* (group << 16 | worker) pairs */
	struct shoal_quiet quiet;     /* how we wake its sender waiting for room */
	/* Counters of this uplink's worker block (written only by us). */
	uint64_t no_route, dropped_full, malformed;
};

struct output {
	_Alignas(64) void *ring;      /* whole lines: see OUT_BYTES */
	void *condemned;              /* the ring we condemned last (counted once) */
	struct shoal_doorbell *db;
	/* The snapshot under which output_of() last found `ring` to be the
	 * snapshot's and attached (0: never): hop_find() trusts the output
	 * under that snapshot without reading the snapshot's ring. */
	uint32_t snap;
	uint32_t unann;               /* our commits its consumer was not woken for */
	uint32_t hint;                /* our ring's bit in its consumer's ready summary */
	bool listed;                  /* in held[] */
	struct shoal_ring_prod p;
};

/* A look at an empty uplink (drain()) reads `ring` and the fields of `c`
 * that shoal_ring_empty() reads inline (the ring pointer, the head and the
 * cached tail): all in the uplink's first line, since every uplink starts
 * one (shoal__dispatcher_start()). */
#define UP_LOOK_BYTES (offsetof(struct uplink, c) + offsetof(struct shoal_ring_cons, tail_cache) + \
		       sizeof(uint32_t))
static_assert(UP_LOOK_BYTES <= 64, "an empty uplink is looked at in one line");
#define UP_BYTES ((size_t)SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS * sizeof(struct uplink))

/* Every output starts a line, so that one takes two lines, not three: the
 * array is 64-byte aligned (shoal__dispatcher_start()) and an output's
 * size a multiple of 64 (its alignment), at most 128 with its fields in
 * this order (the ring handle, 88 bytes on x86-64, last: in the order
 * before, its `limit` made it 192). */
static_assert(sizeof(struct output) <= 128, "an output is two cache lines");
#define OUT_BYTES ((size_t)SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS * sizeof(struct output))

struct shoal__dispatcher {
	struct shoal__dispatch_shared *sh;
	struct shoal_doorbell *bell;
	struct shoal_wake_mod wmod;   /* how we wake the consumers of our outputs */
	uint32_t held[HELD_MAX];      /* outputs whose wake-up we hold */
	uint32_t n_held;
	bool held_all;                /* more than the list holds: scan them all */
	int index;
	pthread_t thread;
	struct uplink *up;            /* 64-byte aligned: see UP_LOOK_BYTES */
	void *up_mem;                 /* what was allocated for up[] */
	struct output *out;           /* 64-byte aligned: an output is two lines */
	void *out_mem;                /* what was allocated for out[] */
	uint32_t n_dirty;
	bool prefetchw;               /* shoal__cpu_prefetchw(): see ask_lines() */
	/* The fewest records of a chunk that route_found() streams: the
	 * router's word in our registry entry (stats->stream_min), or none.
	 * One compare a chunk, as with a constant. */
	uint32_t stream_min;
	bool streamed;                /* a record streamed since the last commit (stream_rec()) */
	uint32_t *matches;
	uint32_t cap_matches;
	struct shoal__reg_dispatcher *stats;
	/* Local copies of the counters, stored with relaxed stores. */
	uint64_t batches, messages, delivered, no_route, dropped_full, dropped_dead, malformed,
		 discarded;
	uint64_t sleeps, busy_ns, corrupt, dropped_corrupt;
	/* The loop's two reads a turn (the spin budget, busy_ns): shm/clock.h,
	 * 11 ns a read here where CLOCK_MONOTONIC costs 25. */
	struct shoal__clock clk;
	uint32_t streak;   /* messages moved since the last sleep (shoal_doorbell_streak()) */
	/* Per filter of the vector that sends to a group of one worker
	 * (mode GROUP): its output and the address a message routed there
	 * carries, found by hop_find() under snapshot `snap` (0: not yet),
	 * where nothing about the filter or the group changes until the next
	 * snapshot. The address's generation too: the router bumps a group's
	 * generation only when a process attaches to it, and publishes a
	 * snapshot after (server.c), so each incarnation's messages are
	 * routed under a snapshot of its own. Indexed by the filter's index,
	 * so that a match goes to its output without reading the filter or
	 * the registry; grown with the vector (pass_buffers()). */
	struct fcache {
		uint32_t snap;
		struct output *o;
		uint64_t dest;    /* shoal_addr_make(g, SHOAL_SLOT_GROUP, gen) */
	} *fc;
	uint32_t cap_fc;
	uint32_t buf_version;         /* the snapshot pass_buffers() last sized for */
	uint64_t gstat_delivered[SHOAL_MAX_GROUPS];
	uint64_t gstat_corrupt[SHOAL_MAX_GROUPS];
	uint64_t gstat_full[SHOAL_MAX_GROUPS];
	uint64_t gstat_dead[SHOAL_MAX_GROUPS];
	/* The owner the gstat_* counters and parked uplinks' served keys of
	 * each slot are about (its registry first_gen), checked at each new
	 * snapshot (owners_check()). */
	uint32_t owner[SHOAL_MAX_GROUPS];
	uint32_t snap_version;        /* the last snapshot owners_check() saw */
	/* What publish_stats() last stored: stats_sig() and the snapshot
	 * version (snapshots count from 1). */
	uint64_t pub_sig;
	uint32_t pub_version;
	/* In the struct, not behind a pointer: one load less a push and a
	 * flushed output. */
	struct output *dirty[SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS];
	/* The snapshot's uplinks (snap_version's) in up[], in its order, NULL
	 * where not attached (uplinks_index()): a turn's look at each costs a
	 * load, not the slot's arithmetic nor the snapshot's entry. */
	struct uplink *ul[SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS];
	uint32_t ul_version;          /* the snapshot ul[] lists (0: none) */
};

/*
 * The slot of worker w of group g in up[] and out[]: worker-major, so that
 * the groups' first workers, the common case, lie one after the other. By
 * group (16 workers a group) they lay 2 KiB apart: at 100 groups the
 * outputs of worker 0 fell into 4 of a 48 KiB L1's 64 sets and evicted each
 * other between a pass's reserve, its commit and its wake-up check
 * (callgrind's cache simulation of dispatch_pass, 48 KiB 12-way: L1 read
 * misses a message 9.3 -> 6.7).
 */
#define SLOT(g, w) ((uint32_t)(w) * SHOAL_MAX_GROUPS + (uint32_t)(g))
/* The group and worker of output `o` of dispatcher `d`: its slot's (a
 * mask and a shift: SHOAL_MAX_GROUPS is a power of two). */
#define OUT_GROUP(d, o) ((uint32_t)((o) - (d)->out) % SHOAL_MAX_GROUPS)
#define OUT_WORKER(d, o) ((uint32_t)((o) - (d)->out) / SHOAL_MAX_GROUPS)
static_assert((SHOAL_MAX_GROUPS & (SHOAL_MAX_GROUPS - 1)) == 0, "OUT_GROUP(): a mask");

/* Remember output `slot` for wake_flush(); past the list, a full scan. */
static void note_held(struct shoal__dispatcher *d, uint32_t slot)
{
	struct output *o = &d->out[slot];

	if (o->listed)
		return;
	if (d->n_held < HELD_MAX) {
		d->held[d->n_held++] = slot;
		o->listed = true;
	} else {
		d->held_all = true;
	}
}

/*
 * Before we sleep: the held wake-ups of a conversation (a few outputs) are
 * made now; a fan-out's are left to the deadline (as shoal__wake_flush() in
 * send.c). Waking every held consumer each time the dispatcher idled cost
 * 100 groups their moderation: routed send 841 ns -> 15 us per call.
 */
static void wake_flush(struct shoal__dispatcher *d)
{
	bool make = d->n_held <= SHOAL_WAKE_FLUSH_MAX && !d->held_all;

	if (make && d->n_held > 0)
		shoal_doorbell_fence();   /* F2: after the commits of the held messages */
	for (uint32_t i = 0; i < d->n_held; i++) {
		struct output *o = &d->out[d->held[i]];

		o->listed = false;
		if (make && o->unann > 0 && o->ring != NULL) {
			shoal_doorbell_wake_hint(o->db, o->hint);
			o->unann = 0;
		}
	}
	d->n_held = 0;
	d->held_all = false;
}

static bool done_has(const struct uplink *u, uint32_t key)
{
	for (uint32_t i = 0; i < u->n_done; i++)
		if (u->done[i] == key)
			return true;
	return false;
}

/* Room for a message's destinations is reserved before a pass (done_reserve). */
static void done_add(struct uplink *u, uint32_t key)
{
	u->done[u->n_done++] = key;
}

/*
 * Make room to remember every destination of one message of `s`: at most
 * one per worker of each matching group. Grown per snapshot, never per
 * message; false without memory, and the uplink then waits for a later pass
 * (its messages stay queued: nothing is lost, nothing delivered twice).
 */
static bool done_reserve(struct uplink *u, const struct shoal__snapshot *s)
{
	uint32_t need = (s->max_matches ? s->max_matches : 1) * SHOAL_MAX_WORKERS;
	uint32_t *n;

	if (SHOAL_LIKELY(need <= u->cap_done))
		return true;
	n = realloc(u->done, need * sizeof(*n));
	if (n == NULL)
		return false;
	u->done = n;
	u->cap_done = need;
	return true;
}

/* Mark `ring` as given up by our side and count it, once per ring. */
static void condemn(struct shoal__dispatcher *d, void **last, void *ring, uint64_t len,
		    unsigned side)
{
	if (*last == ring)
		return;
	*last = ring;
	shoal_ring_condemn(ring, len, side);
	d->corrupt++;
}

/* The producer handle of worker w of group g's inbound ring; NULL when that
 * ring is missing, does not attach, or its handle saw corruption. */
static struct output *output_of(struct shoal__dispatcher *d, const struct shoal__snap_group *sg,
				uint32_t g, uint32_t w, uint32_t node)
{
	struct output *o = &d->out[SLOT(g, w)];
	void *ring = sg->in[w * SHOAL_MAX_NODES + node];

	if (SHOAL_UNLIKELY(o->ring != ring)) {
		if (ring == NULL)
			return NULL;
		if (shoal_ring_prod_attach(&o->p, ring, sg->in_len, NULL) < 0) {
			condemn(d, &o->condemned, ring, sg->in_len, SHOAL_RING_SIDE_PROD);
			return NULL;
		}
		o->ring = ring;
		o->db = &sg->mbx->w[w].in_db;
		o->hint = shoal_doorbell_ready_hint(shoal__ready_key_dispatcher(node));
		o->unann = 0;
	}
	o->snap = d->snap_version;
	return o;
}

enum deliver_result { DELIVERED, SKIPPED, FULL, CORRUPT };

/*
 * A copy for output `o` found no room (`len` bytes of record): why. Out of
 * line: the delivered case stays small.
 */
static __attribute__((noinline)) enum deliver_result
no_room(struct shoal__dispatcher *d, struct uplink *u, const struct shoal__snap_group *sg,
	struct output *o, uint32_t len)
{
	/* A corrupted ring never makes room: drop, never park on it. */
	if (shoal_ring_prod_error(&o->p)) {
		condemn(d, &o->condemned, o->ring, sg->in_len, SHOAL_RING_SIDE_PROD);
		return CORRUPT;
	}
	/* Larger than this group's rings can ever hold: waiting would wedge
	 * the uplink, so the copy is dropped and counted. */
	if (len > shoal_ring_max_payload(&o->p)) {
		d->malformed++;
		u->malformed++;
		return SKIPPED;
	}
	/* Its consumer may sleep on wake-ups we hold. */
	shoal_doorbell_notify(o->db);
	o->unann = 0;
	return FULL;
}

/* `k` records just written to output `o`. It is committed with the pass,
 * and its copies counted then (flush_outputs()), not each as written. Its
 * first records of the pass list it in dirty[]: its handle then counts
 * exactly these `k` uncommitted, since the pass commits every output it
 * lists and every copy into an output is followed by this call. No flag
 * of its own, set and cleared: two stores an output less. */
static inline void written(struct shoal__dispatcher *d, struct output *o, uint32_t k)
{
	if (shoal_ring_uncommitted(&o->p) == k)
		d->dirty[d->n_dirty++] = o;
}

/* Copy one message to worker w of group g, with `dest` set. */
static enum deliver_result deliver(struct shoal__dispatcher *d, struct uplink *u,
				   const struct shoal__snap_group *sg, uint32_t g, uint32_t w,
				   uint32_t node, const struct shoal_envelope *env,
				   const void *payload)
{
	struct output *o;
	unsigned char *dst;

	if (SHOAL_UNLIKELY(u->parked) && done_has(u, g << 16 | w))
		return SKIPPED;
	o = output_of(d, sg, g, w, node);
	if (SHOAL_UNLIKELY(o == NULL))
		return CORRUPT;
	dst = shoal_ring_reserve(&o->p, (uint32_t)sizeof(*env) + env->len, 0);
	if (SHOAL_UNLIKELY(dst == NULL))
		return no_room(d, u, sg, o, (uint32_t)sizeof(*env) + env->len);
	/* Two copies: the checked envelope (inline, of a constant size) and
	 * the payload. */
	memcpy(dst, env, sizeof(*env));
	memcpy(dst + sizeof(*env), payload, env->len);
	written(d, o, 1);
	return DELIVERED;
}

/*
 * What a copy that was not delivered leaves: counted, remembered, or a
 * park (returns true). Out of line: the delivered case stays small.
 */
static __attribute__((noinline)) bool settle(struct shoal__dispatcher *d, struct uplink *u,
					     const struct shoal__snap_group *sg, uint32_t g,
					     uint32_t w, enum deliver_result res, uint32_t flags)
{
	if (res == CORRUPT) {
		/* Counted once: a retry must not deliver it to the ring that
		 * replaces this one. */
		d->dropped_corrupt++;
		d->gstat_corrupt[g]++;
		done_add(u, g << 16 | w);
	} else if (res == FULL && ((flags & SHOAL_ENV_TRY) || sg->overflow == SHOAL_OVERFLOW_DROP)) {
		d->dropped_full++;
		d->gstat_full[g]++;
		u->dropped_full++;
	} else if (res == FULL) {
		return true;
	}
	return false;
}

static uint32_t sender_hash(uint64_t sender)
{
	uint64_t x = sender * UINT64_C(0x9e3779b97f4a7c15);

	return (uint32_t)(x >> 32);
}

/*
 * What a pass reads once, from the snapshot and the dispatcher, and keeps
 * in locals: through memory, the stores of every copy could alias them.
 */
struct pass {
	const struct shoal__snapshot *s;
	const struct shoal__route_table *routes;
	const struct shoal_filter *filters;   /* the vector, for the matches' indices */
	uint32_t *matches;
	uint32_t cap_matches;
	uint32_t node;                        /* the dispatcher's index: its inbound rings */
	/* The quick match's descriptor of the last type seen. */
	struct shoal__route_memo memo;
	uint32_t version;                     /* the snapshot's */
};

/*
 * Copy a message to worker w of group g, with `dest` set: remembered when
 * `keep` (see dispatch_one()), or settled. Returns true if the uplink must
 * park on it.
 */
static inline bool route_to(struct shoal__dispatcher *d, struct uplink *u,
			    const struct shoal__snap_group *sg, uint32_t g, uint32_t w,
			    uint32_t node, const struct shoal_envelope *env, const void *payload,
			    bool keep)
{
	enum deliver_result res = deliver(d, u, sg, g, w, node, env, payload);

	if (SHOAL_LIKELY(res == DELIVERED)) {
		if (keep)
			done_add(u, g << 16 | w);
		return false;
	}
	return settle(d, u, sg, g, w, res, env->flags);
}

/*
 * The filters dispatch_one() does not route inline: a discard, a group not
 * in use or failed, a broadcast (a copy to every worker). Returns true if
 * the uplink must park on the message.
 */
static __attribute__((noinline)) bool route_other(struct shoal__dispatcher *d,
						  const struct pass *ps, struct uplink *u,
						  const struct shoal_filter *f,
						  struct shoal_envelope *env, const void *payload,
						  bool keep)
{
	const struct shoal__snap_group *sg = &ps->s->groups[f->group];
	uint32_t g = f->group;
	bool park = false;

	if (f->mode == SHOAL_ROUTE_DISCARD) {
		d->discarded++;   /* delivered nowhere, as asked: counted */
		return false;
	}
	if (!sg->used)
		return false;
	if (sg->state == SHOAL_GROUP_FAILED) {
		d->dropped_dead++;
		d->gstat_dead[g]++;
		return false;
	}
	/* Relaxed: as in dispatch_one(). */
	env->dest = shoal_addr_make((uint16_t)g, SHOAL_SLOT_ALL,
				    shoal_load_relaxed(&sg->reg->gen));
	for (uint32_t w = 0; w < sg->n_workers; w++)
		park |= route_to(d, u, sg, g, w, ps->node, env, payload,
				 keep || park || w + 1 < sg->n_workers);
	return park;
}

/*
 * Route one uplink record. Returns false if the uplink must park on it
 * (a blocking message found a destination full).
 */
static __attribute__((noinline)) bool dispatch_one(struct shoal__dispatcher *d, struct pass *ps,
						  struct uplink *u, const struct shoal_rec *rec)
{
	const struct shoal__snapshot *s = ps->s;
	struct shoal_envelope env;
	const unsigned char *payload = (const unsigned char *)rec->data + sizeof(env);
	const uint32_t *idx;
	uint32_t n;
	bool park = false;

	/* The ring bounded rec->len by its size; the envelope is another
	 * process's writing: copy it once, then check. */
	if (SHOAL_UNLIKELY(rec->len < sizeof(env)))
		goto malformed;
	memcpy(&env, rec->data, sizeof(env));
	if (SHOAL_UNLIKELY(env.len != rec->len - sizeof(env) || env.type == 0 ||
			   (env.flags & ~SHOAL_ENV_FLAGS)))
		goto malformed;
	/* A pass's messages are mostly of one type: its descriptor is looked
	 * up once, and the common shapes are matched inline. */
	n = shoal__route_match_memo(ps->routes, &ps->memo, env.type, payload, env.len,
				    ps->matches, ps->cap_matches, &idx);
	if (n == 0) {
		d->no_route++;
		u->no_route++;
		return true;
	}
	env.flags |= SHOAL_ENV_ROUTED;
	for (uint32_t i = 0; i < n; i++) {
		const struct shoal_filter *f = &ps->filters[idx[i]];
		const struct shoal__snap_group *sg = &s->groups[f->group];
		uint32_t g = f->group, w, gen;
		uint16_t slot;
		/* A copy delivered is remembered for the retry if this message
		 * parks: an earlier destination did, or a later one may. */
		bool keep = park || i + 1 < n;

		/* One copy to one worker is the common case, kept short here;
		 * the rest out of line. */
		if (SHOAL_UNLIKELY(f->mode > SHOAL_ROUTE_UNICAST || !sg->used ||
				   sg->state == SHOAL_GROUP_FAILED)) {
			park |= route_other(d, ps, u, f, &env, payload, keep);
			continue;
		}
		/* Relaxed: the generation names the incarnation that will read
		 * the message; a restart racing with this is caught as stale by
		 * the receiver, never delivered to the wrong actor. */
		gen = shoal_load_relaxed(&sg->reg->gen);
		if (f->mode == SHOAL_ROUTE_UNICAST) {
			uint64_t key = 0;

			(void)shoal_filter_key(f, payload, env.len, &key);
			slot = (uint16_t)(key % sg->n_actors);
			w = slot % sg->n_workers;
		} else {
			slot = SHOAL_SLOT_GROUP;
			/* Spread by sender; one worker needs no hash. */
			w = sg->n_workers > 1 ? sender_hash(env.sender) % sg->n_workers : 0;
		}
		env.dest = shoal_addr_make((uint16_t)g, slot, gen);
		park |= route_to(d, u, sg, g, w, ps->node, &env, payload, keep);
	}
	u->parked = park;
	if (!park)
		u->n_done = 0;
	return !park;
malformed:
	d->malformed++;
	u->malformed++;
	return true;
}

/*
 * The common record is routed in two steps (dispatch_pass()): first every
 * record's destination is found, then the records are copied in order. A
 * record takes them when it is well formed, its type is matched inline
 * (the quick match) to one filter, that filter sends it to one worker of a
 * group in use and not failed, and that worker's inbound ring is attached;
 * every other record, and the head record of a parked uplink, takes
 * dispatch_one() in its place. Split so, each loop keeps its state in
 * registers: 285 -> 230 instructions a message at 1 group, 342 -> 288 at
 * 100 (bench/instr-count).
 */
struct hop {
	struct output *o;     /* NULL: the record takes dispatch_one() */
	uint64_t dest;
	/* The envelope's words as the copy stores them: type and length
	 * (checked), flags (checked, with SHOAL_ENV_ROUTED) and `reserved`. */
	uint64_t type_len, flags_rsv;
};

/* Record `rec`'s destination: its output, with the rest in *h, or NULL
 * (h then unset) when the record takes dispatch_one(). Forced inline, as
 * route_found() is: both are inlined twice (dispatch_pass(), route_parked()),
 * and GCC, left to itself, called this one out of line from both (a
 * message at 1 / 100 groups 132.2 / 180.8 instructions, 109.2 / 157.8
 * forced: bench/instr-count). */
static inline __attribute__((always_inline)) struct output *
hop_find(struct shoal__dispatcher *d, struct pass *ps, const struct shoal_rec *rec, struct hop *h)
{
	const unsigned char *p = rec->data, *payload = p + sizeof(struct shoal_envelope);
	const struct shoal_filter *f;
	const struct shoal__snap_group *sg;
	struct fcache *fc;
	uint32_t type, len, flags, i, g, w, gen;
	uint64_t type_len, flags_rsv, sender;
	uint16_t slot;
	struct output *o;

	/* The envelope is another process's writing: each field used is read
	 * once and checked, two to a word as the copy stores them, and the
	 * copy stores those words (copy_rec()), so that it carries what was
	 * checked. */
	if (SHOAL_UNLIKELY(rec->len < sizeof(struct shoal_envelope)))
		return NULL;
	type_len = shoal__get_word(p, offsetof(struct shoal_envelope, type));
	flags_rsv = shoal__get_word(p, offsetof(struct shoal_envelope, flags));
	type = (uint32_t)type_len;
	len = (uint32_t)(type_len >> 32);
	flags = (uint32_t)flags_rsv;
	/* Type 0 needs no test of its own here: its descriptor finds
	 * nothing (the memo starts with type 0 and that descriptor, and no
	 * filter lists type 0), so it goes to dispatch_one(), which counts
	 * it malformed. */
	if (SHOAL_UNLIKELY(len != rec->len - sizeof(struct shoal_envelope) ||
			   (flags & ~SHOAL_ENV_FLAGS)))
		return NULL;
	/* The same, from the record: in a run, the loop holds that one in a
	 * register, where the envelope's was spilled, a store a record. */
	len = rec->len - sizeof(struct shoal_envelope);
	/* One filter, or dispatch_one() matches it in full (every
	 * QUICK_NONE descriptor gives NOT_ONE). */
	i = shoal__route_quick_one(shoal__route_memo_q(ps->routes, &ps->memo, type), payload, len);
	if (SHOAL_UNLIKELY(i == SHOAL__ROUTE_NOT_ONE))
		return NULL;
	fc = &d->fc[i];
	h->type_len = type_len;
	h->flags_rsv = flags_rsv | SHOAL_ENV_ROUTED;
	if (fc->snap == ps->version) {
		h->dest = fc->dest;
		return fc->o;
	}
	f = &ps->filters[i];
	g = f->group;
	sg = &ps->s->groups[g];
	if (SHOAL_UNLIKELY(f->mode > SHOAL_ROUTE_UNICAST || !sg->used ||
			   sg->state == SHOAL_GROUP_FAILED))
		return NULL;
	if (f->mode == SHOAL_ROUTE_UNICAST) {
		uint64_t key = 0;

		(void)shoal_filter_key(f, payload, len, &key);
		slot = (uint16_t)(key % sg->n_actors);
		w = slot % sg->n_workers;
	} else {
		slot = SHOAL_SLOT_GROUP;
		w = 0;
		if (sg->n_workers > 1) {
			memcpy(&sender, p + offsetof(struct shoal_envelope, sender),
			       sizeof(sender));
			w = sender_hash(sender) % sg->n_workers;
		}
	}
	o = &d->out[SLOT(g, w)];
	/* An output not yet found attached to this snapshot's ring:
	 * dispatch_one() attaches it (or finds it corrupted). */
	if (SHOAL_UNLIKELY(o->snap != ps->version))
		return NULL;
	/* Relaxed: as in dispatch_one(). */
	gen = shoal_load_relaxed(&sg->reg->gen);
	h->dest = shoal_addr_make((uint16_t)g, slot, gen);
	if (f->mode == SHOAL_ROUTE_GROUP && sg->n_workers == 1)
		*fc = (struct fcache){ ps->version, o, h->dest };
	return o;
}

/* The record header and the envelope's first word (type and length) as
 * hop_find() checked them, for the record at `dst` of `len` bytes. */
static inline void put_head(unsigned char *dst, uint32_t len, const struct hop *h)
{
	shoal__put_pair(dst - SHOAL_RING_REC_HDR, shoal_ring_run_hdr(len, 0), h->type_len);
}

/*
 * Write a record of `len` bytes as hop_find() routed it, its header
 * included: the header and the envelope, the fields hop_find() checked or
 * set taken from *h and the others from the uplink's record at `src`, in
 * four 16-byte stores, then the payload. The envelope copied and those
 * fields stored over it took eight (the header's included): a far producer
 * pays for each store (bench/SUITE.md, "What the far dispatcher pays for:
 * its stores", "One store a record less"). The words' order:
 * runtime/layout.h.
 */
static inline void copy_rec(unsigned char *dst, const unsigned char *src, uint32_t len,
			    const struct hop *h)
{
	put_head(dst, len, h);
	shoal__put_pair(dst + offsetof(struct shoal_envelope, sender),
			shoal__get_word(src, offsetof(struct shoal_envelope, sender)), h->dest);
	memcpy(dst + offsetof(struct shoal_envelope, trace_id),
	       src + offsetof(struct shoal_envelope, trace_id), 2 * sizeof(uint64_t));
	shoal__put_pair(dst + offsetof(struct shoal_envelope, send_ns),
			shoal__get_word(src, offsetof(struct shoal_envelope, send_ns)), h->flags_rsv);
	memcpy(dst + sizeof(struct shoal_envelope), src + sizeof(struct shoal_envelope),
	       len - sizeof(struct shoal_envelope));
}

/*
 * copy_rec() with streamed stores (shm/util.h): each line of the record is
 * sent to memory without first being read into this core's cache, where a
 * store waits for it to come from the consumer's cache, which read it a
 * lap before. Far apart, that wait is most of a copy's cost: backlog ÷ the
 * plain forwarder, per-pair ratios to the build before (bench/SUITE.md,
 * "Streamed copies"), at 100 groups 0.83, at 1 group 0.89, lower in 12 of
 * 16 pairs each. Eight words and the payload, one 8-byte store each:
 * flush_outputs() fences them before the commits (S1).
 */
static inline void stream_rec(unsigned char *dst, const unsigned char *src, uint32_t len,
			      const struct hop *h)
{
	shoal__stream_word(dst - SHOAL_RING_REC_HDR, shoal_ring_run_hdr(len, 0));
	shoal__stream_word(dst, h->type_len);
	shoal__stream_word(dst + offsetof(struct shoal_envelope, sender),
			   shoal__get_word(src, offsetof(struct shoal_envelope, sender)));
	shoal__stream_word(dst + offsetof(struct shoal_envelope, dest), h->dest);
	shoal__stream_word(dst + offsetof(struct shoal_envelope, trace_id),
			   shoal__get_word(src, offsetof(struct shoal_envelope, trace_id)));
	shoal__stream_word(dst + offsetof(struct shoal_envelope, request_id),
			   shoal__get_word(src, offsetof(struct shoal_envelope, request_id)));
	shoal__stream_word(dst + offsetof(struct shoal_envelope, send_ns),
			   shoal__get_word(src, offsetof(struct shoal_envelope, send_ns)));
	shoal__stream_word(dst + offsetof(struct shoal_envelope, flags), h->flags_rsv);
	shoal__stream_copy(dst + sizeof(struct shoal_envelope), src + sizeof(struct shoal_envelope),
			   len - (uint32_t)sizeof(struct shoal_envelope));
}

/* Write a record as hop_find() routed it: streamed (`stream`, and up to
 * SHOAL__STREAM_MAX bytes; noted for the fence), else copied. */
static inline void put_rec(struct shoal__dispatcher *d, unsigned char *dst,
			   const unsigned char *src, uint32_t len, const struct hop *h, bool stream)
{
	if (stream && len <= SHOAL__STREAM_MAX) {
		stream_rec(dst, src, len, h);
		d->streamed = true;
	} else {
		copy_rec(dst, src, len, h);
	}
}

/*
 * A chunk of uplink records (peek_chunk()). Most chunks are one run of
 * records of one length a stride apart (a sender's messages of one type):
 * those are found from the run's first, where a record array cost two
 * stores a record to fill, which a far dispatcher pays for (bench/SUITE.md,
 * "A chunk as its run"). The others are listed in an array.
 */
struct chunk {
	const struct shoal_rec *recs;   /* each record, or NULL: one run */
	const unsigned char *data;      /* one run: its first record's payload */
	uint32_t len;                   /* one run: each record's length */
	bool one_len;                   /* every record of the first's length */
	/* The end of the uplink's bytes published after the chunk and before
	 * the data area's end (ask_next()). */
	const unsigned char *ahead_end;
};

/* Record i of chunk `ch`. */
static inline struct shoal_rec chunk_rec(const struct chunk *ch, uint32_t i)
{
	if (ch->recs != NULL)
		return ch->recs[i];
	return (struct shoal_rec){ .data = ch->data + (size_t)i * shoal_ring_stride(ch->len),
				   .len = ch->len };
}

/* Chunk `ch` from its record k on. */
static inline struct chunk chunk_from(const struct chunk *ch, uint32_t k)
{
	struct chunk c = *ch;

	if (c.recs != NULL)
		c.recs += k;
	else
		c.data += (size_t)k * shoal_ring_stride(c.len);
	return c;
}

/*
 * Ask for the lines that output `o`'s next copy and commit will use, as
 * soon as hop_find() has found it, while the rest of the chunk is routed:
 * for writing, the next record's first two lines (a 64-byte message's
 * record is 128 bytes) and the ring's commit line; to read, the doorbell
 * flush_outputs() looks at. Far from the consumers, each line is a
 * transfer from another core, which the copy's and the commit's stores
 * waited for one output after another; asked here, the chunk's transfers
 * overlap. Backlog at 100 groups ÷ the plain forwarder, far apart, ÷ the
 * build before in paired runs: 0.84, lower in 14 of 16 pairs; at 1 group,
 * which asks once a chunk (route_found()), 0.93, lower in 13 of 16
 * (bench/SUITE.md, "The output's lines asked for early").
 */
static inline void ask_lines(const struct output *o, bool w)
{
	const unsigned char *rec = shoal_ring_next_at(&o->p);

	shoal__prefetch_write(rec, w);
	shoal__prefetch_write(rec + 64, w);
	shoal__prefetch_write(shoal_ring_commit_at(&o->p), w);
	__builtin_prefetch(o->db);
}

/*
 * How many records ahead the hop loop asks for a record's payload line,
 * which hop_find() reads the key from (the envelope fills the record's
 * first line with its header). The chunk's records were published before
 * the peek, so no sender is writing those lines. Backlog at 1 group ÷ the
 * plain forwarder, far apart, ÷ the build before in paired runs: 0.80,
 * lower in 13 of 16 pairs (0.87 and 0.86 in two sets before); at 100
 * groups no change shows (bench/SUITE.md, "The output's lines asked for
 * early"). Four ahead helped less, sixteen no more.
 */
#define PAYLOAD_AHEAD 8u

static inline void ask_payload(const void *rec_data)
{
	__builtin_prefetch((const unsigned char *)rec_data + sizeof(struct shoal_envelope));
}

/*
 * Ask for the lines of the record one chunk after the one the hop loop is
 * at, `next` (`stride` bytes), when the uplink has published it: in a
 * backlog, each record of the next chunk is asked for while this chunk is
 * routed, one record a turn, where its lines came from the producer's CPU
 * only when the next pass's peek read them (a third of the pass's samples
 * there, perf). Backlog in the middle placement ÷ the build before, paired,
 * 12 alternations: at 1 group 0.896 (lower in 10 of 12), at 100 groups
 * 0.939 (11 of 12) (bench/SUITE.md, "The next chunk asked for"). A stream
 * that keeps the uplink nearly empty has nothing published so far ahead,
 * and asks for nothing; nor does a chunk of several runs (listed), whose
 * next records lie where their headers, unread, say.
 */
static inline void ask_next(const unsigned char *next, uint32_t stride, const unsigned char *end)
{
	if (next + stride <= end) {
		__builtin_prefetch(next);
		__builtin_prefetch(next + 64);
	}
}

/* Copy record `rec` as hop_find() routed it. Returns false if the uplink
 * must park on it (a blocking message found its destination full). */
static inline bool hop_copy(struct shoal__dispatcher *d, const struct pass *ps,
			    struct uplink *u, struct shoal_rec rec, const struct hop *h, bool stream)
{
	struct output *o = h->o;
	unsigned char *dst = shoal_ring_claim(&o->p, rec.len, 0);

	if (SHOAL_UNLIKELY(dst == NULL)) {
		uint32_t g = OUT_GROUP(d, o);
		const struct shoal__snap_group *sg = &ps->s->groups[g];
		enum deliver_result res = no_room(d, u, sg, o, rec.len);

		if (settle(d, u, sg, g, OUT_WORKER(d, o), res, (uint32_t)h->flags_rsv)) {
			u->parked = true;
			return false;
		}
		u->n_done = 0;
		return true;
	}
	put_rec(d, dst, rec.data, rec.len, h, stream);
	written(d, o, 1);
	return true;
}

/*
 * Copy records[0 .. n), every one routed by hop_find() to the same output
 * and of the same length, into one run claimed on that output
 * (shoal_ring_claim_run(): one space check and one index update for them
 * all, where shoal_ring_reserve() does both per record; the headers are
 * ours to write). When `stream` (a chunk of SHOAL__STREAM_MIN or more),
 * records of up to SHOAL__STREAM_MAX bytes are streamed one by one
 * (put_rec()). Others that lie one after the other in the uplink, as a run
 * claimed lies in the output, are copied with one memcpy(), the uplink's
 * record headers between them included; then each record gets its header
 * and hop_find()'s checked fields stored over it, so that the copy carries
 * what was checked whatever the sender rewrote meanwhile. Returns how many
 * were copied, fewer where the ring's end or its free room cut the run, 0
 * when none fit: hop_copy() then takes the rest one by one. Out of line,
 * so that the loop of single copies (100 groups) keeps its registers.
 */
static __attribute__((noinline)) uint32_t copy_run(struct shoal__dispatcher *d,
						  const struct chunk *ch,
						  const struct hop *hops, uint32_t n, bool stream)
{
	struct output *o = hops[0].o;
	const struct shoal_rec *recs = ch->recs, first_rec = chunk_rec(ch, 0);
	const unsigned char *src = first_rec.data;
	uint32_t len = first_rec.len, stride = shoal_ring_stride(len);
	void *first;
	unsigned m = shoal_ring_claim_run(&o->p, len, 0, n, &first);
	unsigned char *dst = first;

	if (m == 0)
		return 0;
	/* One run lies whole, a stride apart. Listed, the uplink's records
	 * follow one another in ring order, each one stride or more after
	 * the one before until the ring wraps, and those after a wrap lie
	 * before the first: the last one stride by stride after the first
	 * means that none is between them. */
	if ((!stream || len > SHOAL__STREAM_MAX) &&
	    (recs == NULL ||
	     (const unsigned char *)recs[m - 1].data == src + (size_t)(m - 1) * stride)) {
		memcpy(dst, src, (size_t)(m - 1) * stride + len);
		for (uint32_t i = 0; i < m; i++, dst += stride) {
			uint32_t flags = (uint32_t)hops[i].flags_rsv;

			put_head(dst, len, &hops[i]);
			memcpy(dst + offsetof(struct shoal_envelope, dest), &hops[i].dest,
			       sizeof(hops[i].dest));
			memcpy(dst + offsetof(struct shoal_envelope, flags), &flags, sizeof(flags));
		}
	} else {
		for (uint32_t i = 0; i < m; i++, dst += stride)
			put_rec(d, dst, chunk_rec(ch, i).data, len, &hops[i], stream);
	}
	written(d, o, m);
	return m;
}

/*
 * Copy records[0 .. n) in order, each as hop_find() routed it or through
 * dispatch_one(). Returns how many were taken: fewer than n when the
 * uplink parks on the next.
 */
static __attribute__((noinline)) uint32_t copy_each(struct shoal__dispatcher *d,
						   struct pass *ps, struct uplink *u,
						   const struct chunk *ch,
						   const struct hop *hops, uint32_t n, bool stream)
{
	uint32_t k = 0;

	for (; k < n; k++) {
		struct shoal_rec rec = chunk_rec(ch, k);

		if (!(hops[k].o != NULL ? hop_copy(d, ps, u, rec, &hops[k], stream)
					: dispatch_one(d, ps, u, &rec)))
			break;
	}
	return k;
}

/* F2 after the commits, unless every consumer written polls (shm/doorbell.h). */
static void fence_outputs(const struct shoal__dispatcher *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (shoal_doorbell_fence_needed(d->dirty[i]->db)) {
			shoal_doorbell_fence();
			return;
		}
	atomic_signal_fence(memory_order_seq_cst);   /* the compiler keeps the order */
}

/* After F2: wake the consumer of output `o`, or hold its wake-up. Out of
 * line: most outputs' consumers are awake (shoal_doorbell_wake_quiet()). */
static __attribute__((noinline)) void wake_output(struct shoal__dispatcher *d, struct output *o)
{
	int r = shoal_doorbell_wake_mod_hint(o->db, &d->wmod, o->unann, o->hint);

	if (r == SHOAL_WAKE_DONE)
		o->unann = 0;
	else
		note_held(d, (uint32_t)(o - d->out));
	if (r == SHOAL_WAKE_HELD_FIRST)
		shoal_doorbell_notify(d->sh->waker_bell);
}

/*
 * Commit every output written in this pass, then ring their doorbells: one
 * fence (F2) for all of them, since every commit precedes it. The wake-ups
 * are moderated: a flood holds them until a batch gathers or the waker
 * (waker.c) makes them by the deadline. Each output's consumer is looked at
 * inline first (shoal_doorbell_wake_quiet()), and the call made only when
 * there is something to do: at 100 groups, where nearly every message
 * flushes an output of its own, 190 -> 183 instructions a message
 * (bench/instr-count). Out of line, so that dispatch_pass()'s loops keep
 * their registers (inline, the same change cost 1 group 0.8 more).
 */
static __attribute__((noinline)) void flush_outputs(struct shoal__dispatcher *d)
{
	/* The count in a local: through memory, each commit's stores could
	 * alias it. */
	uint32_t n = d->n_dirty;
	uint64_t delivered = 0;

	/* S1: the streamed records before the tails that publish them
	 * (docs/memory-ordering.md). Only after a streamed copy: a fence
	 * also waits for the plain stores before it. */
	if (d->streamed) {
		shoal__stream_fence();
		d->streamed = false;
	}

	for (uint32_t i = 0; i < n; i++) {
		struct output *o = d->dirty[i];
		uint32_t k = shoal_ring_uncommitted(&o->p);

		shoal_ring_commit(&o->p);
		o->unann += k;
		delivered += k;
		d->gstat_delivered[OUT_GROUP(d, o)] += k;
	}
	d->delivered += delivered;
	fence_outputs(d, n);
	for (uint32_t i = 0; i < n; i++) {
		struct output *o = d->dirty[i];

		if (SHOAL_LIKELY(shoal_doorbell_wake_quiet(o->db, o->hint)))
			o->unann = 0;
		else
			wake_output(d, o);
	}
	d->n_dirty = 0;
}

/* List the k records of run `run` in r[]. Two stores a record, not three:
 * the dispatcher reads no record's tag, so it is left unset. */
static void list_run(struct shoal_rec *r, const struct shoal_rec *run, uint32_t k)
{
	const unsigned char *data = run->data;
	uint32_t stride = shoal_ring_stride(run->len);

	for (struct shoal_rec *end = r + k; r < end; r++, data += stride) {
		r->data = data;
		r->len = run->len;
	}
}

/*
 * Peek up to PASS_CHUNK records as chunk *ch: in runs of one length
 * (shoal_ring_peek_run(), a sender's messages of one type), one header
 * check each against the first, where shoal_ring_peek_burst() decodes and
 * bounds each one. A chunk of one run is kept as that run; one of several
 * is listed in recs[]; either way the chunk says where the bytes published
 * after it end (ask_next()). Returns how many records.
 */
static uint32_t peek_chunk(struct shoal_ring_cons *c, struct shoal_rec *recs, struct chunk *ch)
{
	uint32_t n, k, ahead;
	struct shoal_rec run, next;
	const void *at;

	n = shoal_ring_peek_run(c, &run, PASS_CHUNK);
	if (n == 0)
		return 0;
	*ch = (struct chunk){ .recs = NULL, .data = run.data, .len = run.len, .one_len = true };
	if (n < PASS_CHUNK && (k = shoal_ring_peek_run(c, &next, PASS_CHUNK - n)) > 0) {
		ch->recs = recs;
		list_run(recs, &run, n);
		do {
			ch->one_len &= next.len == run.len;
			list_run(recs + n, &next, k);
			n += k;
		} while (n < PASS_CHUNK && (k = shoal_ring_peek_run(c, &next, PASS_CHUNK - n)) > 0);
	}
	ahead = shoal_ring_ahead(c, &at);
	ch->ahead_end = (const unsigned char *)at + ahead;
	return n;
}

/*
 * Route chunk `ch` of n records, peeked by peek_chunk(): find every
 * record's destination, then copy them in order. Returns how many were
 * taken: fewer than n when the uplink parks on the next.
 */
static inline __attribute__((always_inline)) uint32_t
route_found(struct shoal__dispatcher *d, struct pass *ps, struct uplink *u,
	    const struct chunk *ch, uint32_t n)
{
	struct hop hops[PASS_CHUNK];
	struct chunk rest;
	uint32_t k = 0;
	/* The output whose lines were asked for last (ask_lines()): once for
	 * records that follow one another to it (every chunk at 1 group).
	 * `turns` counts the records whose output differs from the one
	 * before (the first's from NULL): 1 when, the first's not NULL,
	 * every record goes to the first's output, found without a second
	 * loop over hops[] (5 instructions a message at 1 group). */
	const struct output *last = NULL;
	uint32_t turns = 0;
	const bool w = d->prefetchw;
	/* A chunk of a few (a request's leg) is copied with plain stores,
	 * and every chunk where the router does not stream (d->stream_min). */
	const bool stream = n >= d->stream_min;

	if (ch->recs == NULL) {
		/* A loop of its own: with chunk_rec()'s test in it, a register
		 * spilled, a store a record. */
		const unsigned char *data = ch->data;
		uint32_t stride = shoal_ring_stride(ch->len);
		const unsigned char *next = data + (size_t)PASS_CHUNK * stride;

		for (uint32_t i = 0; i < n; i++, data += stride, next += stride) {
			struct shoal_rec rec = { .data = data, .len = ch->len };

			if (i + PAYLOAD_AHEAD < n)
				ask_payload(data + PAYLOAD_AHEAD * stride);
			ask_next(next, stride, ch->ahead_end);
			hops[i].o = hop_find(d, ps, &rec, &hops[i]);
			if (hops[i].o != last) {
				turns++;
				if ((last = hops[i].o) != NULL)
					ask_lines(last, w);
			}
		}
	} else {
		for (uint32_t i = 0; i < n; i++) {
			if (i + PAYLOAD_AHEAD < n)
				ask_payload(ch->recs[i + PAYLOAD_AHEAD].data);
			hops[i].o = hop_find(d, ps, &ch->recs[i], &hops[i]);
			if (hops[i].o != last) {
				turns++;
				if ((last = hops[i].o) != NULL)
					ask_lines(last, w);
			}
		}
	}
	/* A chunk whose records all go to one output (every chunk at 1
	 * group) is reserved as one run; what did not fit takes the loop
	 * below. */
	if (n > 1 && ch->one_len && turns == 1 && hops[0].o != NULL)
		k = copy_run(d, ch, hops, n, stream);
	rest = chunk_from(ch, k);
	return k + copy_each(d, ps, u, &rest, hops + k, n - k, stream);
}

/*
 * route_found() for a chunk that starts with a parked uplink's head. The
 * head goes first, alone, through dispatch_one() (it remembers the
 * destinations it was delivered to); while it cannot go, nothing after it
 * is looked at, and once it has gone, the rest of the chunk takes the
 * common path, a run where it can. With the head in the chunk, every retry
 * found each record's destination for nothing and a chunk that went copied
 * its records one by one (a sender's host's dispatcher, its bridge's ring
 * full: bench/SUITE.md, "Parked uplinks"). Out of line: the common chunk
 * pays nothing for it.
 */
static __attribute__((noinline)) uint32_t route_parked(struct shoal__dispatcher *d,
						       struct pass *ps, struct uplink *u,
						       const struct chunk *ch, uint32_t n)
{
	struct hop head = { .o = NULL };
	struct chunk rest;

	if (copy_each(d, ps, u, ch, &head, 1, false) == 0)
		return 0;
	rest = chunk_from(ch, 1);
	return 1 + route_found(d, ps, u, &rest, n - 1);
}

/*
 * Route the records waiting in uplink `u` (it is not empty), at most
 * PASS_BUDGET, a chunk at a time, commit the outputs and release them.
 * Returns records taken. Never inlined, and called only for an uplink with
 * records, so that its instructions are those of routing: bench/instr-count
 * toggles on it and divides by the messages routed.
 */
static __attribute__((noipa)) uint32_t dispatch_pass(struct shoal__dispatcher *d,
						     const struct shoal__snapshot *s,
						     const struct shoal__snap_uplink *su,
						     struct uplink *u)
{
	struct pass ps = { s, s->routes, shoal__route_filters(s->routes), d->matches,
			   d->cap_matches, (uint32_t)d->index, SHOAL__ROUTE_MEMO_INIT, s->version };
	struct shoal_rec recs[PASS_CHUNK];
	/* The handle before the peek: shoal_ring_unpeek() gives back one
	 * record, and a park gives back every record from the parked one on. */
	const struct shoal_ring_cons before = u->c;
	struct chunk ch;
	uint32_t n, got, k = 0;

	/* Chunk after chunk while each is full and taken whole. */
	do {
		n = peek_chunk(&u->c, recs, &ch);
		if (n == 0)
			got = 0;
		else if (SHOAL_UNLIKELY(k == 0 && u->parked))
			got = route_parked(d, &ps, u, &ch, n);
		else
			got = route_found(d, &ps, u, &ch, n);
		k += got;
	} while (got == PASS_CHUNK && k < PASS_BUDGET);
	if (SHOAL_UNLIKELY(got < n)) {
		/* Parked on record k: peek the k before it again, from the
		 * handle as it was, so that the release takes exactly those.
		 * Fewer only if the producer rewrote records already read:
		 * the handle is then in its error state, handled below. */
		uint32_t left = k, p = 1;

		u->c = before;
		for (k = 0; left > 0 && p > 0; k += p, left -= p)
			p = shoal_ring_peek_burst(&u->c, recs,
						  left < PASS_CHUNK ? left : PASS_CHUNK);
	}
	/* The outputs are committed before the uplink is released: a crash
	 * between the two re-delivers, never loses. */
	if (d->n_dirty > 0)
		flush_outputs(d);
	if (k > 0) {
		shoal_ring_release(&u->c);
		/* The sender may sleep on a full uplink. */
		shoal_doorbell_notify_quiet(&su->mw->up_db, &u->quiet);
		/* Relaxed: counters of this uplink's worker block; we are its
		 * only writer. */
		shoal_store_relaxed(&su->mw->up_no_route, u->no_route);
		shoal_store_relaxed(&su->mw->up_dropped_full, u->dropped_full);
		shoal_store_relaxed(&su->mw->up_malformed, u->malformed);
	}
	/* After the release: the mark tells the router our head is final.
	 * A parked record is lost with the ring (counted as it is condemned). */
	if (SHOAL_UNLIKELY(shoal_ring_cons_error(&u->c))) {
		u->parked = false;
		u->n_done = 0;
		condemn(d, &u->condemned, u->ring, su->len, SHOAL_RING_SIDE_CONS);
	}
	return k;
}

/* Attach uplink `u` to the snapshot's ring `su->ring` (not NULL); one that
 * does not attach is condemned and counted, and `u` left as it was. */
static void uplink_attach(struct shoal__dispatcher *d, const struct shoal__snap_uplink *su,
			  struct uplink *u)
{
	if (shoal_ring_cons_attach(&u->c, su->ring, su->len, NULL) < 0) {
		condemn(d, &u->condemned, su->ring, su->len, SHOAL_RING_SIDE_CONS);
		return;
	}
	/* Lost behind a head moved forward: counted with a corrupted ring's
	 * drops (their destinations are unknown). */
	d->dropped_corrupt += shoal_ring_cons_skipped(&u->c);
	u->ring = su->ring;
	u->parked = false;
	u->n_done = 0;
}

/*
 * Drain uplink `u` (of `su`) for at most PASS_BUDGET records. Returns
 * records taken, and sets *parked if the uplink is parked; `u` NULL, an
 * uplink not attached (uplinks_index()), takes none. An empty uplink,
 * most of them at 100 groups, costs the ring's inline empty check, in the
 * uplink's first line only (UP_LOOK_BYTES), and no call: 13 instructions
 * with drain_all()'s loop (objdump), where finding it in up[] by its slot,
 * comparing its ring with the snapshot's entry, and reading its parked
 * flag and its handle's error state (its second line) cost 26. A parked
 * uplink is never empty (its head record waits); a handle that went into
 * its error state reads as empty, and is condemned by uplinks_check(). At
 * 100 groups a turn looks at 101 uplinks for one pass of 64 messages (the
 * budget then):
 * outside dispatch_pass(), 48 -> 27 instructions a message routed
 * (callgrind toggled on drain_all() over shoal-bench-instr --dispatch 100,
 * 8 rounds less 4), and dispatch_pass()'s L1 read misses 6.64 -> 5.26 a
 * message (its lines are evicted less between passes).
 */
static inline uint32_t drain(struct shoal__dispatcher *d, const struct shoal__snapshot *s,
			     const struct shoal__snap_uplink *su, struct uplink *u, bool *parked)
{
	if (u == NULL || shoal_ring_empty(&u->c))
		return 0;
	*parked |= u->parked;
	if (SHOAL_UNLIKELY(!done_reserve(u, s)))
		return 0;
	return dispatch_pass(d, s, su, u);
}

/*
 * Condemn the uplinks whose handle went into its error state where a look
 * found it empty (drain() does not read the state). Called every
 * CHECK_EVERY turns and before each sleep: a corrupted uplink is condemned
 * within that many turns of a busy dispatcher, and before an idle one
 * sleeps.
 */
static void uplinks_check(struct shoal__dispatcher *d, const struct shoal__snapshot *s)
{
	for (uint32_t i = 0; i < s->n_uplinks[d->index]; i++) {
		const struct shoal__snap_uplink *su = &s->uplinks[d->index][i];
		struct uplink *u = d->ul[i];

		if (u != NULL && SHOAL_UNLIKELY(shoal__ring_cons_err(&u->c) != 0)) {
			/* A parked record is lost with the ring (counted
			 * as it is condemned), as in dispatch_pass(). */
			u->parked = false;
			u->n_done = 0;
			condemn(d, &u->condemned, u->ring, su->len, SHOAL_RING_SIDE_CONS);
		}
	}
}

/*
 * A slot that went to another group since the last snapshot we saw (router:
 * registry.c): what we counted for its old owner is not the new one's, and
 * a parked uplink's record was not delivered to the new one. Called once per
 * snapshot, before any pass reads it.
 */
static void owners_check(struct shoal__dispatcher *d, const struct shoal__snapshot *s)
{
	d->snap_version = s->version;
	for (uint32_t g = 0; g < s->n_groups; g++) {
		uint32_t first;

		if (!s->groups[g].used)
			continue;
		/* Relaxed: written before the publish of any snapshot that
		 * routes to the new owner, which our A1 dereference follows. */
		first = shoal_load_relaxed(&s->groups[g].reg->first_gen);
		if (first == d->owner[g])
			continue;
		d->owner[g] = first;
		d->gstat_delivered[g] = 0;
		d->gstat_corrupt[g] = 0;
		d->gstat_full[g] = 0;
		d->gstat_dead[g] = 0;
		for (uint32_t i = 0; i < SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS; i++) {
			struct uplink *u = &d->up[i];

			for (uint32_t k = 0; k < u->n_done;)
				if (u->done[k] >> 16 == g)
					u->done[k] = u->done[--u->n_done];
				else
					k++;
		}
	}
}

/*
 * Attach the snapshot's uplinks that are new to us, and list where each is
 * in up[], in the snapshot's order (ul[]), NULL for one with no ring or
 * whose ring did not attach (condemned: the router replaces it under a new
 * snapshot). Once per snapshot, at the first look at its uplinks (never
 * while dispatch is held: a held uplink is attached when dispatch resumes):
 * a ring changes only with the snapshot, so a turn looks at an uplink
 * without reading the snapshot's entry.
 */
static inline void uplinks_index(struct shoal__dispatcher *d, const struct shoal__snapshot *s)
{
	if (SHOAL_LIKELY(s->version == d->ul_version))
		return;
	d->ul_version = s->version;
	for (uint32_t i = 0; i < s->n_uplinks[d->index]; i++) {
		const struct shoal__snap_uplink *su = &s->uplinks[d->index][i];
		struct uplink *u = &d->up[SLOT(su->group, su->worker)];

		if (u->ring != su->ring && su->ring != NULL)
			uplink_attach(d, su, u);
		d->ul[i] = u->ring != NULL && u->ring == su->ring ? u : NULL;
	}
}

/*
 * The sum of the counters publish_stats() stores: each only ever grows, so
 * the sum moves whenever one of them does. The per-group ones move with
 * the dispatcher's own, and are zeroed only under a new snapshot.
 */
static uint64_t stats_sig(const struct shoal__dispatcher *d)
{
	return d->batches + d->messages + d->delivered + d->no_route + d->dropped_full +
	       d->dropped_dead + d->malformed + d->sleeps + d->busy_ns + d->discarded + d->corrupt +
	       d->dropped_corrupt;
}

/*
 * Store the counters for the tools, unless none moved since the last time
 * under the same snapshot: an idle pass then costs no stores to the
 * registry (at 100 groups, 990 instructions a call, bench/instr-count's
 * --dispatch 100 workload under callgrind).
 */
static void publish_stats(struct shoal__dispatcher *d, const struct shoal__snapshot *s)
{
	struct shoal__reg_dispatcher *st = d->stats;
	uint64_t sig = stats_sig(d);

	if (sig == d->pub_sig && s->version == d->pub_version)
		return;
	d->pub_sig = sig;
	d->pub_version = s->version;

	/* Relaxed: single-writer counters for the tools. */
	shoal_store_relaxed(&st->batches, d->batches);
	shoal_store_relaxed(&st->messages, d->messages);
	shoal_store_relaxed(&st->delivered, d->delivered);
	shoal_store_relaxed(&st->no_route, d->no_route);
	shoal_store_relaxed(&st->dropped_full, d->dropped_full);
	shoal_store_relaxed(&st->dropped_dead, d->dropped_dead);
	shoal_store_relaxed(&st->malformed, d->malformed);
	shoal_store_relaxed(&st->sleeps, d->sleeps);
	shoal_store_relaxed(&st->busy_ns, d->busy_ns);
	shoal_store_relaxed(&st->discarded, d->discarded);
	shoal_store_relaxed(&st->corrupt, d->corrupt);
	shoal_store_relaxed(&st->dropped_corrupt, d->dropped_corrupt);
	for (uint32_t g = 0; g < s->n_groups; g++) {
		struct shoal__reg_gstat *gs;

		if (!s->groups[g].used)
			continue;
		gs = &s->groups[g].reg->stats[d->index];
		shoal_store_relaxed(&gs->delivered, d->gstat_delivered[g]);
		shoal_store_relaxed(&gs->dropped_full, d->gstat_full[g]);
		shoal_store_relaxed(&gs->dropped_dead, d->gstat_dead[g]);
		shoal_store_relaxed(&gs->dropped_corrupt, d->gstat_corrupt[g]);
	}
}

/*
 * Size the buffers a pass indexes by what snapshot `s` holds: the matches
 * of one message, and fc[] (one entry a filter, new entries zeroed: found
 * under no snapshot). Checked once a snapshot; false without memory, and
 * the loop then drains nothing until a later one (nothing is lost).
 */
static bool pass_buffers(struct shoal__dispatcher *d, const struct shoal__snapshot *s)
{
	uint32_t n_fc;

	if (SHOAL_LIKELY(s->version == d->buf_version))
		return true;
	n_fc = shoal__route_count(s->routes);
	if (s->max_matches > d->cap_matches) {
		uint32_t *m = realloc(d->matches, s->max_matches * sizeof(*m));

		if (m == NULL)
			return false;
		d->matches = m;
		d->cap_matches = s->max_matches;
	}
	if (n_fc > d->cap_fc) {
		struct fcache *fc = realloc(d->fc, n_fc * sizeof(*fc));

		if (fc == NULL)
			return false;
		memset(fc + d->cap_fc, 0, (n_fc - d->cap_fc) * sizeof(*fc));
		d->fc = fc;
		d->cap_fc = n_fc;
	}
	d->buf_version = s->version;
	return true;
}

static bool uplinks_empty(struct shoal__dispatcher *d, const struct shoal__snapshot *s)
{
	for (uint32_t i = 0; i < s->n_uplinks[d->index]; i++) {
		struct uplink *u = d->ul[i];

		/* A parked uplink has nothing new to do until its destination
		 * drains: the timed sleep retries it. */
		if (u != NULL && !u->parked && !shoal_ring_empty(&u->c))
			return false;
	}
	return true;
}

int shoal__thread_start(pthread_t *t, const struct bitmask *cpus, void *(*fn)(void *),
			void *arg, const char *name)
{
	unsigned n = cpus != NULL ? (unsigned)cpus->size : 0;
	size_t size = CPU_ALLOC_SIZE(n);
	cpu_set_t *set = NULL;
	pthread_attr_t attr;
	int ret = -EINVAL;

	if (cpus != NULL && numa_bitmask_weight(cpus) > 0) {
		set = CPU_ALLOC(n);
		if (set == NULL)
			return -ENOMEM;
		CPU_ZERO_S(size, set);
		for (unsigned c = 0; c < n; c++)
			if (numa_bitmask_isbitset(cpus, c))
				CPU_SET_S(c, size, set);
	}
	/* Pinned before its first instruction, named before we return: both
	 * hold however late the new thread first runs. A set with none of
	 * this machine's online CPUs makes pthread_create() fail with EINVAL
	 * (sched_setaffinity(2)): the thread starts unpinned instead. */
	if (set != NULL && pthread_attr_init(&attr) == 0) {
		if (pthread_attr_setaffinity_np(&attr, size, set) == 0)
			ret = -pthread_create(t, &attr, fn, arg);
		pthread_attr_destroy(&attr);
	}
	CPU_FREE(set);
	if (ret == -EINVAL)
		ret = -pthread_create(t, NULL, fn, arg);
	if (ret == 0)
		pthread_setname_np(*t, name);   /* visible to ps, top, tests */
	return ret;
}

/*
 * A turn's drain of every uplink of snapshot `s`: records taken, and
 * *parked set if one is parked. Out of line, so that its loop keeps its
 * state in registers (in dispatcher_main(), an empty uplink cost two
 * instructions more, its index spilled).
 */
static __attribute__((noinline)) uint32_t drain_all(struct shoal__dispatcher *d,
						   const struct shoal__snapshot *s, bool *parked)
{
	const struct shoal__snap_uplink *ups = s->uplinks[d->index];
	uint32_t n_ups = s->n_uplinks[d->index], moved = 0;

	uplinks_index(d, s);
	for (uint32_t i = 0; i < n_ups; i++)
		moved += drain(d, s, &ups[i], d->ul[i], parked);
	return moved;
}

static void *dispatcher_main(void *arg)
{
	struct shoal__dispatcher *d = arg;
	struct shoal__dispatch_shared *sh = d->sh;
	struct shoal_doorbell *bell = d->bell;
	uint64_t idle_since = 0, loops = 0;
	/* How long an idle dispatcher looks before it sleeps, and for how
	 * much of it with a pause rather than a yield between looks: with
	 * router.yield, none (on a CPU it shares, a spin would keep its
	 * producers from running; bench/SUITE.md, "What the routed stream
	 * waited for"). */
	const uint64_t look_ns = sh->spin_ns + sh->yield_ns;
	const uint64_t pause_ns = sh->yield_ns > 0 ? 0 : sh->spin_ns;

	rcu_register_thread();
	while (!atomic_load_explicit(&sh->stopping, memory_order_relaxed)) {
		struct shoal__snapshot *s;
		uint32_t moved = 0;
		bool parked = false;
		uint64_t t0 = shoal__clock_ns(&d->clk);

		rcu_read_lock();
		/* A1: pairs with R1 rcu_xchg_pointer() in shoal__publish(). */
		s = SHOAL__SNAP_DEREF(sh->snap);
		if (SHOAL_UNLIKELY(s->version != d->snap_version))
			owners_check(d, s);
		/* Relaxed: a pause request; the doorbell rung on release wakes us. */
		if (!atomic_load_explicit(&sh->held, memory_order_relaxed) &&
		    pass_buffers(d, s)) {
			moved = drain_all(d, s, &parked);
			if ((loops & (CHECK_EVERY - 1)) == 0)
				uplinks_check(d, s);
		}
		if (moved > 0) {
			uint64_t t1 = shoal__clock_ns(&d->clk);

			/* Streaming without sleep: producers may skip F2. */
			if (d->streak < SHOAL_UNFENCE_AFTER)
				shoal_doorbell_streak(bell, &d->streak, moved);
			d->messages += moved;
			d->batches++;
			/* The clock may step back a little at an anchor. */
			d->busy_ns += t1 > t0 ? t1 - t0 : 0;
			idle_since = 0;
		}
		if ((++loops & 63) == 0 || moved == 0)
			publish_stats(d, s);
		if (moved > 0 || (idle_since = idle_since ? idle_since : t0,
				  t0 < idle_since + look_ns)) {
			rcu_read_unlock();
			SHOAL__SNAP_QUIESCENT(sh->snap);
			rcu_quiescent_state();
			if (moved == 0 && t0 < idle_since + pause_ns)
				shoal_cpu_relax();
			else if (moved == 0)
				sched_yield();
			continue;
		}
		/* Idle past the spin budget (moved == 0: the stats were just
		 * published): make a conversation's held wake-ups, announce
		 * sleep, look once more while still online (the snapshot is
		 * only safe to read online), then go offline for the futex
		 * wait. */
		wake_flush(d);
		d->streak = 0;   /* prepare takes the unfencing back */
		shoal_doorbell_prepare(bell);
		if (!atomic_load_explicit(&sh->held, memory_order_relaxed)) {
			uplinks_index(d, s);
			if (!uplinks_empty(d, s)) {
				shoal_doorbell_cancel(bell);
				rcu_read_unlock();
				SHOAL__SNAP_QUIESCENT(sh->snap);
				rcu_quiescent_state();
				continue;
			}
			/* After the last looks: what they found corrupted is
			 * condemned before we sleep. */
			uplinks_check(d, s);
		}
		rcu_read_unlock();
		d->sleeps++;
		SHOAL__SNAP_QUIESCENT(sh->snap);
		rcu_thread_offline();
		shoal_doorbell_wait(bell, parked ? PARK_SLEEP_NS : IDLE_SLEEP_NS);
		rcu_thread_online();
		idle_since = parked ? idle_since : 0;
	}
	rcu_unregister_thread();
	return NULL;
}

int shoal__dispatcher_start(struct shoal__dispatch_shared *sh, int index,
			    const struct bitmask *cpus,
			    struct shoal_doorbell *bell, struct shoal__reg_dispatcher *stats,
			    struct shoal__dispatcher **out)
{
	struct shoal__dispatcher *d = calloc(1, sizeof(*d));
	char name[16];
	int ret;

	if (d == NULL)
		return -ENOMEM;
	d->sh = sh;
	d->stream_min = stats->stream_min != 0 ? stats->stream_min : UINT32_MAX;
	d->bell = bell;
	shoal_wake_mod_init(&d->wmod, sh->wake_deadline_ns);
	/* Our outputs may skip F2 while their consumers poll (shm/doorbell.h). */
	(void)shoal_doorbell_asym_join();
	d->index = index;
	d->stats = stats;
	d->prefetchw = shoal__cpu_prefetchw();
	/* calloc(), not aligned_alloc() and a memset(): its fresh pages stay
	 * untouched until the dispatcher's first write, on its node. */
	d->up_mem = calloc(1, UP_BYTES + 64);
	d->out_mem = calloc(1, OUT_BYTES + 64);
	if (d->up_mem == NULL || d->out_mem == NULL) {
		ret = -ENOMEM;
		goto fail;
	}
	d->up = (struct uplink *)shoal__align_up((uintptr_t)d->up_mem, 64);
	d->out = (struct output *)shoal__align_up((uintptr_t)d->out_mem, 64);
	/* Pinned from its first instruction: its first touches land on its node. */
	snprintf(name, sizeof(name), "shoal-disp-%d", index);
	ret = shoal__thread_start(&d->thread, cpus, dispatcher_main, d, name);
	if (ret < 0)
		goto fail;
	*out = d;
	return 0;
fail:
	free(d->up_mem);
	free(d->out_mem);
	free(d);
	return ret;
}

void shoal__dispatcher_stop(struct shoal__dispatcher *d)
{
	if (d == NULL)
		return;
	pthread_join(d->thread, NULL);
	for (uint32_t i = 0; i < SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS; i++)
		free(d->up[i].done);
	free(d->up_mem);
	free(d->out_mem);
	free(d->matches);
	free(d->fc);
	free(d);
}
