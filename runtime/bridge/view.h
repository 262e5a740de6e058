/* SPDX-License-Identifier: MIT */
/*
 * The link view: the segment shoal.S.links in which a host's bridge keeps
 * its links' state and counters, for the tools (`shoal stat`, `top`,
 * `metrics`) to read without asking the bridge anything (DESIGN invariant
 * 7). An ABI between the bridge (its only writer) and the tools; private,
 * never installed. The registry stays the router's alone: the bridge is a
 * group, and writes only what it owns.
 *
 * Memory picture: one region of kind SHOAL__KIND_LINKS, a header, then
 * `n_links` rows, one per other host, in the order of the system file's
 * hosts. The bridge fills the header's names and every row's peer, role and
 * address, then publishes `magic` (release); after that it stores each
 * counter alone, relaxed, once per turn of its loop. A reader loads `magic`
 * (acquire) and then each field relaxed: every field is a value the bridge
 * wrote, but two fields may come from two turns (as with the registry's
 * dispatcher counters), which counters read over seconds do not mind.
 *
 * Lifecycle: the bridge creates the segment when it starts (removing one a
 * killed bridge left: its creator is dead), and unlinks it when it stops;
 * the router removes any left over when the system starts again. Counters
 * start from 0 with each bridge process, as its links do.
 *
 * Everything a reader takes from the segment is bounds-checked here
 * (shoal__links_view_take()): the tools include this header and read
 * through it, as they read the registry through runtime/layout.h.
 */
#ifndef SHOAL_RUNTIME_BRIDGE_VIEW_H
#define SHOAL_RUNTIME_BRIDGE_VIEW_H

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <shoal/api.h>
#include <shoal/segment.h>

#include "shm/atomic.h"

/* runtime/layout.h's kinds count up from SHOAL_SEG_KIND_USER + 1. */
#define SHOAL__KIND_LINKS     (SHOAL_SEG_KIND_USER + 16)
#define SHOAL__LINKS_MAGIC    UINT32_C(0x564b4c53)   /* "SLKV" */
#define SHOAL__LINKS_VERSION  1u
#define SHOAL__LINKS_MAX      64u                    /* rows: SHOAL__MAX_HOSTS - 1 fit */
#define SHOAL__LINKS_NAME_MAX 32u
#define SHOAL__LINKS_ADDR_MAX 64u

/* What a row counts, in this order in `c` (names: shoal__link_counter_name). */
enum shoal__link_counter {
	SHOAL__LC_RTT_NS,         /* smoothed round trip: a frame sent to its records acked */
	SHOAL__LC_FRAMES_SENT,
	SHOAL__LC_FRAMES_RECV,
	SHOAL__LC_RECORDS_SENT,   /* messages, first sends */
	SHOAL__LC_RECORDS_RECV,   /* messages accepted */
	SHOAL__LC_IN_FLIGHT,      /* messages queued or sent, not yet acked */
	SHOAL__LC_CREDITS,        /* bytes the link may still send before the peer's ack */
	SHOAL__LC_RESENT,
	SHOAL__LC_DUPLICATES,
	SHOAL__LC_GAPS,
	SHOAL__LC_REFUSED,        /* frames refused */
	SHOAL__LC_CONNECTS,
	SHOAL__LC_BROKEN,
	SHOAL__LC_LOST_LINK,      /* messages lost: the peer restarted before acking them */
	SHOAL__LC_LOST_DOWN,      /* messages lost: the host down past hosts.down_after */
	SHOAL__LC_CREDIT_WAITS,
	SHOAL__LC_DOWN_NS,        /* how long the link has not been up; 0 when up */
	SHOAL__LC_N
};

/* Names of the counters, as the tools print them (JSON keys, metric names). */
static const char *const shoal__link_counter_name[SHOAL__LC_N] = {
	"rtt_ns", "frames_sent", "frames_received", "messages_sent", "messages_received",
	"in_flight", "credits", "resent", "duplicates", "gaps", "refused", "connects",
	"broken", "lost_link", "lost_down", "credit_waits", "down_ns",
};

struct shoal__links_hdr {
	_Atomic uint32_t magic;              /* SHOAL__LINKS_MAGIC; published last (release) */
	uint32_t version;
	char system[SHOAL__LINKS_NAME_MAX];
	char host[SHOAL__LINKS_NAME_MAX];    /* this host */
	int32_t bridge_pid;
	uint32_t n_links;                    /* rows that follow */
	_Atomic uint64_t refused_conns;      /* connections the hub refused */
	_Atomic uint64_t ucx_messages;       /* UCX log messages, said as the bridge's */
	uint8_t pad[128 - 96];
};

struct shoal__links_row {
	char peer[SHOAL__LINKS_NAME_MAX];    /* the other host */
	char addr[SHOAL__LINKS_ADDR_MAX];    /* where it is dialed, or this host listens */
	uint32_t role;                       /* enum shoal__link_role: 1 listen, 2 connect */
	_Atomic uint32_t state;              /* enum shoal__link_state: 1 down .. 3 up */
	_Atomic uint32_t peer_epoch;
	uint32_t pad0;
	_Atomic uint64_t c[SHOAL__LC_N];
	uint8_t pad1[256 - 112 - 8 * SHOAL__LC_N];
};

static_assert(sizeof(struct shoal__links_hdr) == 128, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, version) == 4, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, system) == 8, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, host) == 40, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, bridge_pid) == 72, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, n_links) == 76, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, refused_conns) == 80, "links view ABI");
static_assert(offsetof(struct shoal__links_hdr, ucx_messages) == 88, "links view ABI");
static_assert(sizeof(struct shoal__links_row) == 256, "links view ABI");
static_assert(offsetof(struct shoal__links_row, addr) == 32, "links view ABI");
static_assert(offsetof(struct shoal__links_row, role) == 96, "links view ABI");
static_assert(offsetof(struct shoal__links_row, state) == 100, "links view ABI");
static_assert(offsetof(struct shoal__links_row, peer_epoch) == 104, "links view ABI");
static_assert(offsetof(struct shoal__links_row, c) == 112, "links view ABI");

/* The region's size for n rows. */
static inline uint64_t shoal__links_size(uint32_t n)
{
	return sizeof(struct shoal__links_hdr) + (uint64_t)n * sizeof(struct shoal__links_row);
}

/* The segment's directory: the one region. */
#define SHOAL__LINKS_DIR_CAP 4u

/* The file the segment takes for n rows: its header and directory, the
 * region's alignment (64), the region (`shoal run --check` counts it). */
static inline uint64_t shoal__links_file_size(uint32_t n)
{
	return shoal_seg_overhead(SHOAL__LINKS_DIR_CAP) + 64 + shoal__links_size(n);
}

/* The segment's name for system `system`: 0, or -ENAMETOOLONG. */
static inline int shoal__name_links(char buf[SHOAL_SEG_NAME_MAX], const char *system)
{
	int n = snprintf(buf, SHOAL_SEG_NAME_MAX, "shoal.%s.links", system);

	return n > 0 && n < SHOAL_SEG_NAME_MAX ? 0 : -ENAMETOOLONG;
}

/* ---- reading, for the tools ---------------------------------------------- */

/* A row as read, in private memory; names terminated (escape before printing). */
struct shoal__link_view {
	char peer[SHOAL__LINKS_NAME_MAX];
	char addr[SHOAL__LINKS_ADDR_MAX];
	uint32_t role, state, peer_epoch;
	uint64_t c[SHOAL__LC_N];
};

struct shoal__links_view {
	bool present;                    /* the bridge's segment was there and read */
	char reason[SHOAL_ERR_MSG_MAX];  /* why not, when it was there but unreadable */
	char host[SHOAL__LINKS_NAME_MAX];
	int32_t bridge_pid;
	uint64_t refused_conns, ucx_messages;
	uint32_t n;
	struct shoal__link_view links[SHOAL__LINKS_MAX];
};

/* What shoal__links_copy() reads from and writes to. */
struct shoal__links_copy_arg {
	const struct shoal__links_hdr *hdr;
	uint32_t n;
	struct shoal__links_view *v;
};

/* Copy a validated region into the view: loads only (see `guard` below). */
static inline void shoal__links_copy(void *arg)
{
	struct shoal__links_copy_arg *a = arg;
	const struct shoal__links_row *rows = (const struct shoal__links_row *)(a->hdr + 1);

	memcpy(a->v->host, a->hdr->host, sizeof(a->v->host));
	a->v->host[sizeof(a->v->host) - 1] = '\0';
	a->v->bridge_pid = a->hdr->bridge_pid;
	/* Relaxed: counters, each read whole (the picture above). */
	a->v->refused_conns = shoal_load_relaxed(&a->hdr->refused_conns);
	a->v->ucx_messages = shoal_load_relaxed(&a->hdr->ucx_messages);
	for (uint32_t i = 0; i < a->n; i++) {
		struct shoal__link_view *l = &a->v->links[i];

		memcpy(l->peer, rows[i].peer, sizeof(l->peer));
		l->peer[sizeof(l->peer) - 1] = '\0';
		memcpy(l->addr, rows[i].addr, sizeof(l->addr));
		l->addr[sizeof(l->addr) - 1] = '\0';
		l->role = rows[i].role;
		l->state = shoal_load_relaxed(&rows[i].state);
		l->peer_epoch = shoal_load_relaxed(&rows[i].peer_epoch);
		for (unsigned k = 0; k < SHOAL__LC_N; k++)
			l->c[k] = shoal_load_relaxed(&rows[i].c[k]);
	}
	a->v->n = a->n;
}

/*
 * Read the link view of system `system` (in $SHOAL_SHM_DIR) into *v, never
 * trusting it: the segment is attached read-only, whoever owns it; the
 * region's kind, size, magic, version and row count are checked before
 * anything is copied. `guard` runs the copy (tools: shoal__snap_guard(),
 * which turns a file shrunk under the mapping into -EFAULT). A system
 * without a bridge has no such segment: v->present is false, v->reason "".
 * Never fails otherwise: what is wrong is in v->reason.
 */
static inline void shoal__links_view_take(struct shoal__links_view *v, const char *system,
					  int (*guard)(void (*fn)(void *arg), void *arg))
{
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal_seg_region r;
	struct shoal_err err;
	const struct shoal__links_hdr *h;
	struct shoal__links_copy_arg a = { .v = v };
	int ret;

	memset(v, 0, sizeof(*v));
	if (shoal__name_links(name, system) < 0)
		return;
	ret = shoal_seg_attach(&seg, name, SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN, &err);
	if (ret == -ENOENT)
		return;
	if (ret < 0) {
		snprintf(v->reason, sizeof(v->reason), "%s", err.msg);
		return;
	}
	ret = shoal_seg_find(&seg, SHOAL__KIND_LINKS, "links", &r);
	h = ret == 0 ? shoal_seg_ptr(&seg, r.off, sizeof(*h), 64) : NULL;
	/* A1: pairs with R1 in the bridge's view_open(): the header and the
	 * rows' names before the magic. */
	if (h == NULL || shoal_load_acquire(&h->magic) != SHOAL__LINKS_MAGIC ||
	    h->version != SHOAL__LINKS_VERSION) {
		snprintf(v->reason, sizeof(v->reason), "%s: no link view of this version", name);
	} else {
		a.hdr = h;
		a.n = h->n_links;
		if (a.n > SHOAL__LINKS_MAX || shoal__links_size(a.n) > r.len ||
		    shoal_seg_ptr(&seg, r.off, shoal__links_size(a.n), 64) == NULL)
			snprintf(v->reason, sizeof(v->reason), "%s: %u links do not fit its region",
				 name, a.n);
		else if (guard(shoal__links_copy, &a) < 0)
			snprintf(v->reason, sizeof(v->reason), "%s shrank while it was read", name);
		else
			v->present = true;
	}
	shoal_seg_detach(&seg);
}

/* "down", "connecting", "up"; "invalid" for another value (read from
 * shared memory: anything). */
static inline const char *shoal__link_state_name(uint32_t state)
{
	static const char *const names[] = { "invalid", "down", "connecting", "up" };

	return state < sizeof(names) / sizeof(names[0]) ? names[state] : names[0];
}

#endif
