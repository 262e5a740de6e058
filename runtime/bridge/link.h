/* SPDX-License-Identifier: MIT */
/*
 * A link between the bridges of two hosts over UCP (docs/hosts.md, "Links"):
 * numbered records, packed into frames, acknowledged, resent after a
 * reconnect, bounded by the receiver's credit. Nothing here knows actors:
 * a record is bytes and a 16-bit tag.
 *
 * Lifecycle rules:
 *  1. shoal__link_create() either returns 0 with a link that must be passed
 *     to shoal__link_destroy() once, or fails and leaves nothing to undo.
 *  2. A link is used by one thread at a time (the bridge's loop); it owns
 *     its own UCP context and worker, so links never share state.
 *  3. Nothing happens between calls: UCP makes progress, frames are sent
 *     on their deadline, acks and keepalives go out, dead connections are
 *     noticed and reconnected only inside shoal__link_poll() (and sends of
 *     full frames inside shoal__link_send() and shoal__link_flush()). The
 *     caller sleeps on shoal__link_fd() after shoal__link_arm() returned 0,
 *     until shoal__link_deadline() at the latest.
 *  4. A record accepted by shoal__link_send() is delivered to the peer's
 *     shoal__link_recv_peek() exactly once, in order, or counted in the
 *     sender's `lost_link` (the peer restarted before acknowledging it).
 *  5. The receiver acknowledges a record only when the caller releases it
 *     (shoal__link_recv_release()): a record is acked once it left the
 *     link, so a receiver that dies holding records loses none uncounted.
 *
 * Private to the bridge; never installed.
 */
#ifndef SHOAL_RUNTIME_BRIDGE_LINK_H
#define SHOAL_RUNTIME_BRIDGE_LINK_H

#include <stdint.h>

#include <shoal/api.h>

#include "runtime/bridge/frame.h"

struct shoal__link;

/* The UCP active-message id of link frames (each frame one message, eager,
 * no AM header). */
#define SHOAL__LINK_AM_ID 0x5348u

enum shoal__link_role {
	SHOAL__LINK_LISTEN = 1,    /* wait for the peer on `addr` */
	SHOAL__LINK_CONNECT = 2,   /* reach the peer at `addr`, reconnect with backoff */
};

enum shoal__link_state {
	SHOAL__LINK_DOWN = 1,      /* no connection: waiting for the peer or the next try */
	SHOAL__LINK_CONNECTING = 2,/* connection made, the peer's HELLO not yet seen */
	SHOAL__LINK_UP = 3,        /* HELLO exchanged: records flow */
};

/* What a link is given at creation; a 0 field takes the default named. */
struct shoal__link_opts {
	int role;                  /* enum shoal__link_role */
	const char *addr;          /* "IPv4:port" or "[IPv6]:port", numeric */
	/* UCX_TLS for this link's context; NULL: UCX's choice. The tests,
	 * whose hosts are namespaces of one machine, set "tcp" so that what
	 * they exercise is the transport between hosts, whatever else UCX
	 * finds on that machine (with NULL the tests pass too, 2026-12-03). */
	const char *transports;
	uint32_t epoch;            /* 0: drawn at random (tests set it to fake a restart) */
	uint32_t window;           /* credit, bytes of records in frames (1 MiB) */
	uint32_t max_record;       /* largest record (SHOAL__FRAME_REC_MAX); <= window */
	uint32_t flush_bytes;      /* send a frame once this much waits (16 KiB) */
	uint64_t flush_ns;         /* ... or once its first record waited this long (50 us) */
	uint64_t keepalive_ns;     /* send an ACK after this long without sending (100 ms) */
	uint64_t dead_ns;          /* drop a connection silent this long (1 s) */
	uint64_t backoff_ns;       /* first reconnect delay, doubled per failure (50 ms) */
	uint64_t max_backoff_ns;   /* (1 s) */
};

/* Counters and state (shoal__link_stats()). */
struct shoal__link_stats {
	uint32_t state;            /* enum shoal__link_state */
	uint32_t epoch;            /* ours */
	uint32_t peer_epoch;       /* 0 until the first HELLO */
	uint32_t peer_credits;     /* bytes the peer accepts beyond its ack */
	uint64_t down_since_ns;    /* CLOCK_MONOTONIC when it last stopped being UP (its
				    * creation if never UP). While not UP, a bridge
				    * compares its age with hosts.down_after (-EHOSTDOWN). */
	uint64_t next_seq;         /* number of the next record sent */
	uint64_t acked;            /* records the peer released: every number below */
	uint64_t unacked_bytes;    /* of records kept for the peer, in frame bytes */
	uint64_t recv_next;        /* number of the next record expected */
	uint64_t recv_held;        /* records received, not yet released */
	uint64_t frames_sent;
	uint64_t frames_recv;      /* frames accepted */
	uint64_t records_sent;     /* first sends, resends not included */
	uint64_t records_recv;     /* records accepted (duplicates not included) */
	uint64_t resent;           /* records sent again after a reconnect */
	uint64_t duplicates;       /* records received again, dropped */
	uint64_t gaps;             /* records skipped by the peer (counted lost there) */
	uint64_t refused;          /* frames refused: bad bytes, bad ack, stale epoch */
	uint64_t connects;         /* handshakes completed */
	uint64_t broken;           /* connections and attempts dropped: failed or silent */
	uint64_t lost_link;        /* records dropped unacked: the peer restarted */
	uint64_t credit_waits;     /* shoal__link_send() calls refused -EAGAIN */
	struct shoal_err last_refusal;   /* why the last frame was refused ("" if none) */
};

/*
 * Create a link: a UCP context and worker, and a listener (LISTEN) or a
 * first connection attempt (CONNECT). Allocates every buffer the link will
 * use (about 6 x window + 4 frames); nothing is allocated after. Returns 0
 * with *out set, or a negative errno with a reason in *err (may be NULL):
 *   -EINVAL      bad role, address, or sizes (max_record > window ...);
 *   -ENOMEM      out of memory;
 *   -EADDRINUSE  (LISTEN) the address is taken;
 *   -EIO         UCX refused for another reason (named in *err).
 * A LISTEN link sets UCX_TCP_CM_REUSEADDR=y in the environment unless set
 * (link.c says why): do not create one while another thread reads it.
 */
int shoal__link_create(struct shoal__link **out, const struct shoal__link_opts *o,
		       struct shoal_err *err);

/*
 * Close the connection (forced: frames in flight are dropped, records kept
 * are counted nowhere, since the link ends) and free everything. Progresses
 * UCP until its requests are released: may wait, briefly. Never fails.
 */
void shoal__link_destroy(struct shoal__link *l);

/*
 * Queue one record of `len` bytes for the peer. It goes out in a frame
 * when enough is queued (this call then sends, and may make system calls)
 * or at the flush deadline (shoal__link_poll()). Returns 0, or:
 *   -EAGAIN    no credit: the peer has not released enough (or no
 *              handshake yet); nothing was queued, try after a poll;
 *   -EMSGSIZE  len > max_record.
 */
int shoal__link_send(struct shoal__link *l, const void *data, uint32_t len, uint16_t tag);

/*
 * Send what is queued now, without waiting for the flush deadline. Returns
 * 0, or -EAGAIN when not connected or every frame buffer is in flight (the
 * records stay queued). May make system calls.
 */
int shoal__link_flush(struct shoal__link *l);

/*
 * Do everything due at `now_ns` (CLOCK_MONOTONIC; a reading older than the
 * link's last counts as that one): progress UCP (which receives frames),
 * accept or retry a connection, send due frames, acks and keepalives, drop
 * a dead connection. Every failure is the connection's: it is dropped,
 * counted in `broken` and tried again, so the call itself never fails.
 * Makes system calls; never sleeps.
 */
void shoal__link_poll(struct shoal__link *l, uint64_t now_ns);

/* The event fd of the link's UCP worker, for poll(2)/epoll. Never fails. */
int shoal__link_fd(const struct shoal__link *l);

/*
 * Arm the fd before sleeping on it: 0 when it will signal new events,
 * -EAGAIN when events are pending (poll again instead of sleeping).
 */
int shoal__link_arm(struct shoal__link *l);

/* The latest CLOCK_MONOTONIC time at which shoal__link_poll() must run. */
uint64_t shoal__link_deadline(const struct shoal__link *l);

/*
 * The oldest received record not yet released, in *rec (valid until the
 * release): 0, or -EAGAIN when none is held. Peeking twice gives the same
 * record. No system call.
 */
int shoal__link_recv_peek(struct shoal__link *l, struct shoal__frame_rec *rec);

/*
 * Release the record shoal__link_recv_peek() gave: it is acknowledged to the
 * peer with the next frame, and its room becomes credit again. Calling it
 * with no record held is a broken invariant (aborts).
 */
void shoal__link_recv_release(struct shoal__link *l);

/* Copy the link's counters and state into *st. Never fails. */
void shoal__link_stats(const struct shoal__link *l, struct shoal__link_stats *st);

/*
 * Concurrency: a link is single-threaded (rule 2): no two calls on one link
 * may run together ("X" everywhere); calls on different links may ("-").
 *
 *                 any call on link A   any call on link B
 *   link A              X                     -
 */

#endif
