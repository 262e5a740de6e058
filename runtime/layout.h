/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory layout of a Shoal system: an ABI between the router, the
 * group processes and the tools. Private; never installed.
 *
 * Segments of system S (names relative to the shm directory):
 *   shoal.S.reg     registry: system header, message types, groups, dispatcher
 *                   counters. Written by the router only; mapped read-only by
 *                   groups and tools.
 *   shoal.S.bell    one doorbell per dispatcher; every group may ring them.
 *   shoal.S.g.NAME  a group's mailbox: created by the router on the group's
 *                   NUMA node, attached read-write by the group's process and
 *                   by direct senders. It outlives the group's process, so a
 *                   restarted process finds what was queued for it.
 * Control socket: S's socket is shoal.S.ctl in the same directory.
 *
 * Rings in a mailbox are known by their directory tag (struct shoal_seg_tag,
 * enum shoal__ring_role below), never by their name, which is for people:
 *   role            a   b   c   name        producer -> consumer
 *   RING_UPLINK     W   -   -   up.W        worker W -> its node's dispatcher
 *   RING_DISPATCHED W   D   -   in.W.dD     dispatcher D -> worker W
 *   RING_DIRECT     W   G   V   in.W.gG.V   worker V of group G -> worker W
 * (unused fields are 0). `gen` counts replacements of a condemned ring: 0
 * for the first, N for the Nth (named with ".rN" added). Every ring has
 * exactly one producer and one consumer (DESIGN invariant 3).
 */
#ifndef SHOAL_RUNTIME_LAYOUT_H
#define SHOAL_RUNTIME_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include <shoal/doorbell.h>
#include <shoal/message.h>
#include <shoal/router.h>
#include <shoal/segment.h>

#include "shm/atomic.h"

#define SHOAL__KIND_REGISTRY (SHOAL_SEG_KIND_USER + 1)
#define SHOAL__KIND_BELL     (SHOAL_SEG_KIND_USER + 2)
#define SHOAL__KIND_MAILBOX  (SHOAL_SEG_KIND_USER + 3)

/* struct shoal_seg_tag.role of a mailbox ring (the table above). */
enum shoal__ring_role {
	SHOAL__RING_UPLINK = 1,
	SHOAL__RING_DISPATCHED = 2,
	SHOAL__RING_DIRECT = 3,
};

/*
 * A worker's inbound ring's key in its ready summary, from which producer
 * and consumer compute the ring's hint alike (shoal_doorbell_ready_hint()):
 * a direct ring's is its producer's group and worker (b and c of its tag),
 * a dispatched ring's its dispatcher's (b), after every direct one.
 */
static inline uint32_t shoal__ready_key(uint16_t group, uint32_t worker)
{
	return (uint32_t)group * SHOAL_MAX_WORKERS + worker;
}

static inline uint32_t shoal__ready_key_dispatcher(uint32_t d)
{
	return (uint32_t)SHOAL_MAX_GROUPS * SHOAL_MAX_WORKERS + d;
}

#define SHOAL__REG_MAGIC UINT32_C(0x47455253)   /* "SREG" */
#define SHOAL__MBX_MAGIC UINT32_C(0x58424d53)   /* "SMBX" */
/* 2: damage, loss and set-aside fields; 3: rings known by tag, not name;
 * 4: slots of run-time groups freed and reused (slot_seq, released);
 * 5: first_gen and mbx_gen on the group's first line;
 * 6: dispatchers' CPU sets of any size, in their own table (cpus_off), and
 *    a latency histogram per worker (struct shoal__mbx_lat);
 * 7: groups of other hosts and their hosts marked down (remote_host, bridge,
 *    hosts_down);
 * 8: each dispatcher's streamed copies (stream_min, stream_probe_ns) */
#define SHOAL__LAYOUT_VERSION 8u
#define SHOAL__MAX_TYPES 1024u
#define SHOAL__SYSTEM_MAX 32u

/*
 * CPU numbers Shoal handles: below Linux's largest NR_CPUS. A CPU set in the
 * registry is `cpu_words` 64-bit words (bit c of word c / 64 is CPU c),
 * as many as the router's CPUs need, at most SHOAL__CPU_WORDS_MAX.
 */
#define SHOAL__CPUS_MAX 8192u
#define SHOAL__CPU_WORDS_MAX (SHOAL__CPUS_MAX / 64)

/* Per-dispatcher counters, written by that dispatcher only. Its CPU set is
 * in the registry's CPU table (struct shoal__reg_hdr, cpus_off). Its node
 * and streamed copies are router-written before the dispatcher counts in
 * n_dispatchers (R8 in placement.c) and never change. */
struct shoal__reg_dispatcher {
	int32_t node;
	/* The fewest records of a chunk it writes with streamed stores, 0:
	 * none (router.stream, docs/design.md "Streamed copies"). */
	uint32_t stream_min;
	_Atomic uint64_t batches;        /* loop passes that moved at least one message */
	_Atomic uint64_t messages;       /* records taken from uplinks */
	_Atomic uint64_t delivered;      /* copies written into inbound rings */
	_Atomic uint64_t no_route;       /* messages that matched no filter */
	_Atomic uint64_t dropped_full;   /* try_send copies dropped: destination full */
	_Atomic uint64_t dropped_dead;   /* copies dropped: destination group failed */
	_Atomic uint64_t malformed;      /* records rejected: bad envelope */
	_Atomic uint64_t sleeps;         /* times it went to sleep idle */
	_Atomic uint64_t busy_ns;        /* time spent in passes that moved messages */
	_Atomic uint64_t discarded;      /* matches of SHOAL_ROUTE_DISCARD filters */
	_Atomic uint64_t corrupt;        /* rings it found corrupted and condemned */
	_Atomic uint64_t dropped_corrupt; /* copies dropped: destination ring corrupted */
	/* The line round trip that router.stream auto timed at the router's
	 * start (ns); 0: not timed (on or off asked, or one CPU). */
	uint32_t stream_probe_ns;
	uint32_t pad0;
	uint8_t pad1[SHOAL_FALSE_SHARING - 112];
};

/* The system's state in the registry header; the tools name them too. */
enum { SHOAL__SYS_RUNNING = 1, SHOAL__SYS_STOPPING = 2 };

struct shoal__reg_hdr {
	uint32_t magic;
	uint32_t version;
	char system[SHOAL__SYSTEM_MAX];
	int32_t router_pid;
	_Atomic uint32_t state;          /* SHOAL__SYS_* */
	uint32_t n_nodes;
	_Atomic uint32_t n_dispatchers;
	_Atomic uint32_t route_version;  /* publications of the filter vector */
	_Atomic uint32_t n_routes;
	_Atomic uint32_t n_groups;       /* slots ever used (a high-water mark) */
	uint32_t max_groups;
	uint32_t max_types;
	uint32_t types_off;              /* from the start of this struct */
	uint32_t groups_off;
	uint64_t spin_ns;
	/* Groups registered at run time that the router freed when their
	 * process left, and the messages they lost: still queued then, or
	 * counted lost in their slot before (lost_queued, lost_corrupt), which
	 * the next owner starts again from 0. Router-written. */
	_Atomic uint64_t lost_released;
	_Atomic uint32_t released;
	/* The CPU table: dispatcher d's CPU set (the CPUs of its node) is the
	 * cpu_words words at cpus_off + d * cpu_words * 8 from the start of
	 * this struct, written before n_dispatchers counts d (R8 in
	 * placement.c). Both are set before the magic and never change;
	 * readers check cpu_words is 1..SHOAL__CPU_WORDS_MAX and the table
	 * in the region. */
	uint32_t cpus_off;
	uint32_t cpu_words;
	/* 0, or 1 + the group id of this host's bridge (docs/hosts.md), to
	 * which direct messages for groups of other hosts go. Router-written
	 * before any group process starts. */
	_Atomic uint32_t bridge;
	/* How long a request to a group of another host spins, yielding the
	 * CPU, before it sleeps (hosts.link.spin, as the bridge does; at most
	 * a second). Router-written with `bridge`. */
	_Atomic uint32_t remote_spin_ns;
	/* router.yield: how long an idle dispatcher or worker looks again,
	 * yielding the CPU, after its spin and before it sleeps (at most a
	 * second). Router-written at creation. */
	uint32_t yield_ns;
	struct shoal__reg_dispatcher disp[SHOAL_MAX_NODES];
};

struct shoal__reg_type {
	_Atomic uint32_t id;             /* 0: free; published last (release) */
	uint32_t max_size;
	_Atomic uint32_t routes;         /* filters listing this type, set at publish */
	_Atomic uint32_t live_routes;    /* of those, the ones not to a failed group */
	char name[SHOAL_NAME_MAX];
	uint8_t pad1[16];
};

struct shoal__reg_gstat {            /* one per dispatcher, written by it only */
	_Atomic uint64_t delivered;
	_Atomic uint64_t dropped_full;
	_Atomic uint64_t dropped_dead;
	_Atomic uint64_t dropped_corrupt; /* copies dropped: the inbound ring was corrupted */
};

struct shoal__reg_group {
	char name[SHOAL_NAME_MAX];
	_Atomic uint32_t state;          /* enum shoal_group_state */
	_Atomic uint32_t gen;            /* incarnation: bumped at every attach */
	_Atomic int32_t pid;
	uint16_t n_workers;
	uint16_t n_actors;
	int32_t node;
	/* On the line a direct sender reads (send.c check_dest()), so that
	 * checking these costs no cache miss. `first_gen`: the gen its owner's
	 * first process gets (router-written when the slot gets an owner): an
	 * address of an older gen names an earlier owner. `mbx_gen`: bumped
	 * (release) each time the router makes the slot a mailbox, new owner or
	 * replacement; a direct link opened into an older one is moved. */
	_Atomic uint32_t first_gen;
	_Atomic uint32_t mbx_gen;
	/* Odd while the router frees the slot or gives it to another group
	 * (registry.c): a reader that sees it change, or odd, re-reads. `gen`
	 * goes on across owners, so no address names two incarnations. */
	_Atomic uint32_t slot_seq;
	char mailbox[SHOAL_SEG_NAME_MAX];
	/* Damage (DESIGN invariant 10), written by the router's watch thread. */
	_Atomic uint32_t damaged;        /* rings and mailboxes found corrupted, ever */
	_Atomic uint32_t replaced;       /* of those, replaced by fresh ones */
	_Atomic uint64_t lost_corrupt;   /* messages they held, counted as lost */
		/* Messages left in its mailbox when it was marked failed, or when the
	 * system stopped with no process to drain them: lost, counted here
	 * (router-written). */
	_Atomic uint64_t lost_queued;
	uint32_t dispatcher;
	_Atomic uint32_t attaches;       /* processes that attached (restarts + 1) */
	/* 0: the group runs on this host; else 1 + the index of its host in
	 * the system file: its slot here is declared (ids agree on every host)
	 * but never attached, and direct messages for it go to the bridge.
	 * Router-written when the group is declared. While its host is marked
	 * down, `state` is SHOAL_GROUP_FAILED (sends fail with -EHOSTDOWN),
	 * DOWN again when the host comes back. */
	_Atomic uint32_t remote_host;
	uint8_t pad1[28];
	struct shoal__reg_gstat stats[SHOAL_MAX_NODES];
};

/* mw->up_gen when the router found the uplink in service corrupted and had
 * no room left in the mailbox for another: sends through the uplink fail
 * with -EUCLEAN until the group restarts (its mailbox is then replaced). */
#define SHOAL__UP_GEN_NONE UINT32_MAX

/* Per-worker block of a mailbox. */
struct shoal__mbx_worker {
	struct shoal_doorbell in_db;     /* the worker sleeps here when idle */
	struct shoal_doorbell up_db;     /* the worker sleeps here while its uplink is full */
	struct shoal_doorbell space_db;  /* direct senders sleep here while its rings are full */
	uint8_t pad0[SHOAL_FALSE_SHARING - 64];
	/* Written by the worker only. */
	_Atomic uint64_t sent_routed;
	_Atomic uint64_t sent_direct;
	_Atomic uint64_t received;
	_Atomic uint64_t handled;
	_Atomic uint64_t try_failed;     /* try_* sends refused (full, no route ...) */
	_Atomic uint64_t stale;          /* messages dropped: addressed to an old generation */
	_Atomic uint64_t malformed;      /* records dropped: bad envelope */
	_Atomic uint64_t discarded;      /* in-group outcome DISCARD */
	/* Copies held in process memory: forwarded to the group's other
	 * workers, or deferred while a request waits (runtime/data/poll.c). */
	_Atomic uint64_t fwd_sent;       /* such copies made */
	_Atomic uint64_t fwd_taken;      /* such copies this worker handled */
	_Atomic uint64_t fwd_lost;       /* such copies lost with their process (attach, detach) */
	_Atomic uint64_t inflight;       /* mailbox record being handled (see runtime/data/rings.c) or 0 */
	_Atomic uint64_t crash_mark;     /* the record processes died handling (attach) */
	_Atomic uint64_t crashes;        /* how many in a row */
	_Atomic uint64_t set_aside;      /* records skipped after SHOAL__CRASHES_MAX crashes */
	_Atomic uint64_t lost_corrupt;   /* records left in an uplink condemned under it */
	/* Sixteen counters fill the line: no padding. */
	/* Written by the dispatcher that drains this worker's uplink. */
	_Atomic uint64_t up_no_route;
	_Atomic uint64_t up_dropped_full;
	_Atomic uint64_t up_malformed;
	/* Written by the router: the generation (tag.gen) of the uplink in
	 * service, once no dispatcher reads the one before it, or
	 * SHOAL__UP_GEN_NONE. */
	_Atomic uint32_t up_gen;
	uint8_t pad2[SHOAL_FALSE_SHARING - 28];
};

/*
 * The last record a worker set aside after SHOAL__CRASHES_MAX processes died
 * handling it (runtime/data/rings.c keep_aside()), its first SHOAL__ASIDE_KEEP bytes, so
 * that `shoal dump` can show what it was. Written by that worker only, under
 * a sequence count: odd while being written (R5/R6), 0 if never written.
 */
#define SHOAL__ASIDE_KEEP 232u

struct shoal__mbx_aside {
	_Atomic uint32_t seq;
	uint32_t len;                    /* the record's whole length (envelope + payload) */
	uint32_t kept;                   /* bytes of it in rec[] */
	uint32_t crashes;                /* processes that died handling it */
	uint64_t when_ns;                /* CLOCK_MONOTONIC when it was set aside */
	unsigned char rec[SHOAL__ASIDE_KEEP];
};

/*
 * How long messages waited, from their envelope's send_ns to the start of
 * their handler (runtime/data/poll.c lat_record()), one histogram per
 * worker, written by that worker only: a load and a store per field, no
 * atomic read-modify-write; the tools sum the workers. Each power of two of
 * nanoseconds is cut into SHOAL__LAT_SUB buckets of equal width (below
 * 2 * SHOAL__LAT_SUB ns every bucket is one nanosecond wide): bucket i holds
 * [shoal__lat_lower(i), shoal__lat_lower(i + 1)), at most 1/SHOAL__LAT_SUB
 * of its lower bound wide, so its midpoint is within 1/16 (6.25 %) of any
 * value in it. A latency of 2^SHOAL__LAT_MAX_BITS ns (18.3 minutes) or more,
 * or a send_ns after the reader's clock or before its zero (the envelope is
 * untrusted), counts in out_of_range instead. Zero in a new mailbox; a process of the group
 * that attaches goes on counting where the last one stopped.
 */
#define SHOAL__LAT_SUB_BITS 3u
#define SHOAL__LAT_SUB (1u << SHOAL__LAT_SUB_BITS)
#define SHOAL__LAT_MAX_BITS 40u
#define SHOAL__LAT_BUCKETS ((SHOAL__LAT_MAX_BITS - SHOAL__LAT_SUB_BITS + 1) * SHOAL__LAT_SUB)

struct shoal__mbx_lat {
	_Atomic uint64_t sum_ns;         /* of the latencies counted in bucket[] */
	_Atomic uint64_t out_of_range;
	_Atomic uint64_t bucket[SHOAL__LAT_BUCKETS];
	uint8_t pad0[SHOAL_FALSE_SHARING - 16];
};

/* The bucket of a latency of `ns` < 2^SHOAL__LAT_MAX_BITS nanoseconds:
 * branch-free, the data path runs it for every handler. */
static inline uint32_t shoal__lat_bucket(uint64_t ns)
{
	uint32_t shift = 63u - (uint32_t)__builtin_clzll(ns | SHOAL__LAT_SUB) - SHOAL__LAT_SUB_BITS;

	return shift * SHOAL__LAT_SUB + (uint32_t)(ns >> shift);
}

/* The smallest latency bucket i holds (i <= SHOAL__LAT_BUCKETS: the end of
 * the last bucket is 2^SHOAL__LAT_MAX_BITS). */
static inline uint64_t shoal__lat_lower(uint32_t i)
{
	if (i < 2 * SHOAL__LAT_SUB)
		return i;
	return (uint64_t)(SHOAL__LAT_SUB + i % SHOAL__LAT_SUB) << (i / SHOAL__LAT_SUB - 1);
}

struct shoal__mbx_hdr {
	uint32_t magic;
	uint32_t version;
	uint16_t group;
	uint16_t n_workers;
	uint16_t n_actors;
	uint16_t pad0;
	_Atomic uint32_t stop;           /* router -> group: drain and leave */
	/* Only in the bridge's mailbox: bit h (of at most 64 hosts) set
	 * while the link to host h has been down longer than
	 * hosts.down_after. Bridge-written; the router reads it
	 * (runtime/control/router.c) and marks that host's groups down in the
	 * registry, where senders see it. */
	uint32_t pad2;
	_Atomic uint64_t hosts_down;
	uint8_t pad1[SHOAL_FALSE_SHARING - 32];
	struct shoal__mbx_worker w[SHOAL_MAX_WORKERS];
	struct shoal__mbx_aside aside[SHOAL_MAX_WORKERS];
	struct shoal__mbx_lat lat[SHOAL_MAX_WORKERS];
};

struct shoal__bell {
	struct shoal_doorbell disp[SHOAL_MAX_NODES];
	struct shoal_doorbell waker;     /* rung by a first held wake-up (data/waker.c) */
};

static_assert(sizeof(struct shoal__reg_dispatcher) == SHOAL_FALSE_SHARING, "registry ABI");
static_assert(offsetof(struct shoal__reg_dispatcher, stream_min) == 4, "registry ABI");
static_assert(offsetof(struct shoal__reg_dispatcher, stream_probe_ns) == 104, "registry ABI");
static_assert(offsetof(struct shoal__reg_hdr, disp) == SHOAL_FALSE_SHARING, "registry ABI");
static_assert(sizeof(struct shoal__reg_type) == 64, "registry ABI");
static_assert(offsetof(struct shoal__reg_group, stats) == 192, "registry ABI");
static_assert(offsetof(struct shoal__reg_group, first_gen) / 64 ==
	      offsetof(struct shoal__reg_group, gen) / 64 &&
	      offsetof(struct shoal__reg_group, mbx_gen) / 64 ==
	      offsetof(struct shoal__reg_group, gen) / 64, "check_dest() reads one line");
static_assert(sizeof(struct shoal__reg_group) == 192 + 32 * SHOAL_MAX_NODES, "registry ABI");
static_assert(sizeof(struct shoal__mbx_worker) == 4 * SHOAL_FALSE_SHARING, "mailbox ABI");
static_assert(offsetof(struct shoal__mbx_worker, sent_routed) == 2 * SHOAL_FALSE_SHARING,
	      "mailbox ABI");
static_assert(offsetof(struct shoal__mbx_worker, up_no_route) == 3 * SHOAL_FALSE_SHARING,
	      "mailbox ABI");
static_assert(offsetof(struct shoal__mbx_hdr, w) == SHOAL_FALSE_SHARING, "mailbox ABI");
static_assert(offsetof(struct shoal__mbx_hdr, hosts_down) == 24, "mailbox ABI");
static_assert(offsetof(struct shoal__reg_group, remote_host) == 160, "registry ABI");
static_assert(offsetof(struct shoal__reg_hdr, bridge) == 116, "registry ABI");
static_assert(offsetof(struct shoal__reg_hdr, remote_spin_ns) == 120, "registry ABI");
static_assert(offsetof(struct shoal__reg_hdr, yield_ns) == 124, "registry ABI");
static_assert(sizeof(struct shoal__mbx_aside) == 256, "mailbox ABI");
static_assert(offsetof(struct shoal__mbx_hdr, aside) ==
	      SHOAL_FALSE_SHARING + SHOAL_MAX_WORKERS * sizeof(struct shoal__mbx_worker),
	      "mailbox ABI");
static_assert(sizeof(struct shoal__mbx_lat) % SHOAL_FALSE_SHARING == 0, "mailbox ABI");
static_assert(offsetof(struct shoal__mbx_hdr, lat) ==
	      offsetof(struct shoal__mbx_hdr, aside) +
	      SHOAL_MAX_WORKERS * sizeof(struct shoal__mbx_aside), "mailbox ABI");
static_assert(SHOAL__LAT_BUCKETS == 304, "mailbox ABI: the bucket scale");
/* The envelope's words, in this order: dispatch.c copy_rec() writes them
 * two at a time, stream_rec() and send.c burst_stream() one at a time, and
 * hop_find() reads type and length, and flags and `reserved`, as one word
 * each, the first field in its low half. */
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "envelope words: the first field low");
static_assert(sizeof(struct shoal_envelope) == 56, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, len) == 4, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, sender) == 8, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, dest) == 16, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, trace_id) == 24, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, request_id) == 32, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, send_ns) == 40, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, flags) == 48, "envelope ABI");
static_assert(offsetof(struct shoal_envelope, reserved) == 52, "envelope ABI");

/* Where the CPU table starts, and the registry's size with the table at its
 * largest (the router uses as much of it as its CPUs need). */
#define SHOAL__REG_CPUS_OFF (sizeof(struct shoal__reg_hdr) +                          \
			     SHOAL__MAX_TYPES * sizeof(struct shoal__reg_type) +       \
			     SHOAL_MAX_GROUPS * sizeof(struct shoal__reg_group))
#define SHOAL__REG_SIZE (SHOAL__REG_CPUS_OFF +                                         \
			 SHOAL_MAX_NODES * SHOAL__CPU_WORDS_MAX * sizeof(uint64_t))

/*
 * Bytes the router asks shoal_seg_create() for (runtime/control/registry.c):
 * one group's mailbox (its file is this rounded up to the filesystem's page),
 * and the registry and doorbell files of a system, each rounded up to `page`.
 * `bridge_cap`: the capacity of the direct rings to and from the host's
 * bridge (0: no bridge); `bridge`: the mailbox is the bridge's, whose
 * direct rings all have that capacity.
 */
uint64_t shoal__mailbox_size(uint32_t n_workers, uint32_t up_cap, uint32_t in_cap,
			     uint32_t direct_cap, uint32_t bridge_cap, bool bridge);

/* The capacity of the direct rings to and from a host's bridge: the
 * inbound rings', and at least the direct rings' (the router's sizing and
 * `shoal run --check`'s count use this one rule). */
static inline uint32_t shoal__bridge_ring_cap(uint32_t in_cap, uint32_t direct_cap)
{
	return in_cap > direct_cap ? in_cap : direct_cap;
}
uint64_t shoal__system_seg_size(uint64_t page);

/* Segment and socket names of a system (buffers of SHOAL_SEG_NAME_MAX). */
int shoal__name_registry(char *buf, const char *system);
int shoal__name_bell(char *buf, const char *system);
int shoal__name_mailbox(char *buf, const char *system, const char *group);
int shoal__path_socket(char *buf, size_t len, const char *system);

/* Check a system or group name: 1..31 characters of [A-Za-z0-9_-]. */
int shoal__check_name(const char *name, const char *what, struct shoal_err *err);

/* The registry views of an attached registry segment, bounds-checked.
 * `cpus`: the CPU table, hdr->cpu_words words per dispatcher. */
struct shoal__registry {
	struct shoal_seg seg;
	struct shoal__reg_hdr *hdr;
	struct shoal__reg_type *types;
	struct shoal__reg_group *groups;
	uint64_t *cpus;
};

/* Attach the registry of system `system` (a name) and validate its layout. */
int shoal__registry_attach(struct shoal__registry *reg, const char *system, uint32_t flags,
			   struct shoal_err *err);

/* Find mailbox header of an attached mailbox segment; NULL if invalid. */
struct shoal__mbx_hdr *shoal__mailbox_hdr(const struct shoal_seg *seg);

#endif
