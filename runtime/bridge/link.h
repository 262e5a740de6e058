/* SPDX-License-Identifier: MIT */
/*
 * A link between the bridges of two hosts over UCP (docs/hosts.md, "Links"):
 * numbered records, packed into frames, acknowledged, resent after a
 * reconnect, bounded by the receiver's credit. Nothing here knows actors:
 * a record is bytes and a 16-bit tag.
 *
 * A host's links share one **hub**: one UCP context and worker, with one
 * listener that accepts every peer. A peer names itself in its HELLO (in
 * the active message's header: who sends it, and whom it means to reach),
 * and the hub hands the connection to the link of that name, or refuses
 * it, counted, when no link has that name, the link is the one that dials,
 * or it already has a live connection.
 *
 * Lifecycle rules:
 *  1. shoal__link_hub_create() and shoal__link_create() either return 0
 *     with an object that must be destroyed once (shoal__link_hub_destroy(),
 *     shoal__link_destroy()), or fail and leave nothing to undo. Every link
 *     of a hub is destroyed before the hub.
 *  2. A hub and its links are used by one thread at a time (the bridge's
 *     loop); hubs share no state, so two hubs may live in one process.
 *     A link made with shoal__link_create() alone has a hub of its own.
 *  3. Nothing happens between calls: UCP makes progress, frames are sent
 *     on their deadline, acks and keepalives go out, connections are
 *     accepted, dead ones noticed and reconnected only inside
 *     shoal__link_hub_poll() (or shoal__link_poll(), which polls the
 *     link's hub), and sends of full frames inside shoal__link_send() and
 *     shoal__link_flush(). The caller sleeps on the hub's fd after
 *     shoal__link_hub_arm() returned 0, until shoal__link_hub_deadline() at
 *     the latest. A link's connection failing never stalls another's.
 *  4. A record accepted by shoal__link_send() (or reserved and committed)
 *     is delivered to the peer's shoal__link_recv_peek() exactly once, in
 *     order, or counted in the sender's `lost_link` (the peer restarted
 *     before acknowledging it) or `dropped` (never sent, given up by
 *     shoal__link_drop_unsent()). Records the old peer never got go to
 *     the restarted one.
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
struct shoal__link_hub;

/* The UCP active-message id of link frames: each frame one message, eager,
 * sent with UCP_AM_SEND_FLAG_REPLY (the receiver tells connections apart by
 * it), with no AM header but on a HELLO, whose header is its identity. */
#define SHOAL__LINK_AM_ID 0x5348u

/* The longest host name a HELLO carries, NUL included. */
#define SHOAL__LINK_NAME_MAX 32u

/* A HELLO's active-message header: NUL-terminated names, zero-padded. */
struct shoal__link_hello_id {
	char from[SHOAL__LINK_NAME_MAX];   /* the sender's host */
	char to[SHOAL__LINK_NAME_MAX];     /* the host it means to reach */
};

/* What a hub is given at creation; a 0 field takes the default named. */
struct shoal__link_hub_opts {
	const char *name;          /* this host, said in HELLO; NULL or "": unnamed */
	const char *listen;        /* "IPv4:port" or "[IPv6]:port"; NULL: no listener */
	/* UCX_TLS for the hub's context; NULL: UCX's choice. The tests,
	 * whose hosts are namespaces of one machine, set "tcp" so that what
	 * they exercise is the transport between hosts, whatever else UCX
	 * finds on that machine (with NULL the tests pass too, 2026-12-03). */
	const char *transports;
	uint64_t hello_ns;         /* an accepted connection must name itself in this (1 s) */
};

/* The hub's own counters (shoal__link_hub_stats()). */
struct shoal__link_hub_stats {
	uint64_t accepted;         /* connections named by their HELLO, given to their link */
	uint64_t refused;          /* connections refused: unknown or duplicate peer ... */
	uint64_t stray;            /* frames of connections already closed, dropped */
	struct shoal_err last_refusal;   /* why the last connection was refused */
};

enum shoal__link_role {
	SHOAL__LINK_LISTEN = 1,    /* wait for the peer: its hub's listener takes it */
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
	/* CONNECT: where the peer listens; LISTEN: where to listen, for a
	 * link alone (on a hub, the hub listens). "IPv4:port" or
	 * "[IPv6]:port", numeric. */
	const char *addr;
	/* The peer's host name, checked against its HELLO; NULL: whoever
	 * connects (a link alone). */
	const char *peer;
	const char *transports;    /* a link alone: its hub's (struct shoal__link_hub_opts) */
	uint32_t epoch;            /* 0: drawn at random (tests set it to fake a restart) */
	uint32_t window;           /* credit, bytes of records in frames (1 MiB) */
	/* Bytes of records queued beyond the peer's credit, sent as the
	 * credit comes back; 0: none, shoal__link_reserve() refuses at the
	 * credit. The bridge queues 4 windows for a host slow or away. */
	uint32_t backlog;
	uint32_t max_record;       /* largest record (what the window holds:
				    * shoal__link_max_record()) */
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
	uint64_t credit_waits;     /* shoal__link_send() calls refused -EAGAIN (and
				    * shoal__link_reserve() calls refused) */
	uint64_t over_credit;      /* records queued beyond the credit (opts.backlog) */
	uint64_t dropped;          /* records never sent, dropped (shoal__link_drop_unsent()) */
	uint64_t rtt_ns;           /* smoothed time from a frame sent to its records
				    * acked (the peer's hand-on included); 0: none yet */
	struct shoal_err last_refusal;   /* why the last frame was refused ("" if none) */
};

/* The largest record a window of `window` bytes holds (its frame size fits
 * it), at most SHOAL__FRAME_REC_MAX. Pure. */
static inline uint32_t shoal__link_max_record(uint32_t window)
{
	uint32_t m = window > SHOAL__FRAME_REC_HDR ? (window - SHOAL__FRAME_REC_HDR) & ~7u : 0;

	return m < SHOAL__FRAME_REC_MAX ? m : SHOAL__FRAME_REC_MAX;
}

/*
 * Create a hub: a UCP context and worker, and a listener when o->listen is
 * given. Returns 0 with *out set, or a negative errno with a reason in *err
 * (may be NULL): -EINVAL (bad address or name), -ENOMEM, -EADDRINUSE (the
 * address is taken), -EIO (UCX refused for another reason, named in *err).
 * A listening hub sets UCX_TCP_CM_REUSEADDR=y in the environment unless set
 * (link.c says why): do not create one while another thread reads it.
 */
int shoal__link_hub_create(struct shoal__link_hub **out, const struct shoal__link_hub_opts *o,
			   struct shoal_err *err);

/*
 * Stop taking connections: the listener is destroyed, the connection
 * requests not yet accepted are refused and the connections not yet named
 * are closed; links already handed their peer stay. Call it before the
 * links are destroyed at a stop: their peers reconnect at once, and UCX
 * 1.13 calls a destroyed listener's handler for a connection it accepted
 * before the destroy and read after it (link.c says more). Idempotent; a
 * hub that never listened is left as it is.
 */
void shoal__link_hub_stop_listening(struct shoal__link_hub *h);

/*
 * Free the hub: its connections not yet named are closed. Its links must
 * be destroyed first (a broken invariant aborts). Progresses UCP until its
 * requests are released: may wait, briefly (2 s at most). Never fails.
 */
void shoal__link_hub_destroy(struct shoal__link_hub *h);

/*
 * Add a link to the peer o->peer on hub `h`: a CONNECT link makes its first
 * connection attempt; a LISTEN link waits for the hub to hand it the peer's
 * connection. Allocates every buffer the link will use (about 6 x window +
 * backlog + 4 frames); nothing is allocated after. Returns 0 with *out set, or:
 *   -EINVAL  bad role, address, peer name, or sizes (max_record > what
 *            the window holds ...), a LISTEN link on a hub that does not
 *            listen, or a peer name that a link of the hub has already;
 *   -ENOSPC  the hub has SHOAL__LINK_HUB_MAX links already;
 *   -ENOMEM  out of memory.
 */
#define SHOAL__LINK_HUB_MAX 64u
int shoal__link_add(struct shoal__link_hub *h, struct shoal__link **out,
		    const struct shoal__link_opts *o, struct shoal_err *err);

/*
 * A link alone, on a hub of its own (named by nobody; listening on o->addr
 * for a LISTEN link) that shoal__link_destroy() frees with it. Returns what
 * shoal__link_hub_create() and shoal__link_add() return.
 */
int shoal__link_create(struct shoal__link **out, const struct shoal__link_opts *o,
		       struct shoal_err *err);

/*
 * Close the connection (forced: frames in flight are dropped, records kept
 * are counted nowhere, since the link ends) and free everything, with the
 * hub of a link alone. A connection UCX is still setting up (dialed, no
 * frame came on it yet, not failed) is closed only once a frame came or it
 * failed, or after 100 ms: closing it earlier can make UCX 1.13 abort in
 * its async thread (link.c says why). May progress UCP: may wait, briefly.
 * Never fails.
 */
void shoal__link_destroy(struct shoal__link *l);

/*
 * Queue one record of `len` bytes for the peer. It goes out in a frame
 * when enough is queued and the peer's credit takes it (this call then
 * sends, and may make system calls) or at the flush deadline
 * (shoal__link_poll()). Returns 0, or:
 *   -EAGAIN    no room: the peer has not released enough of its credit
 *              (or no handshake yet), and the backlog (opts.backlog) is
 *              full; nothing was queued, try after a poll;
 *   -EMSGSIZE  len > max_record.
 */
int shoal__link_send(struct shoal__link *l, const void *data, uint32_t len, uint16_t tag);

/*
 * shoal__link_send() in two steps, so that a record is written once, by
 * the caller, straight into the link's queue: reserve returns where its
 * `len` bytes go (8-aligned; the padding after them is zeroed already), or
 * NULL when shoal__link_send() would fail (no room, len > max_record;
 * counted in credit_waits) and nothing changed. Then the caller writes the
 * bytes and calls shoal__link_commit(), with no other call on the link
 * between: the record is queued as shoal__link_send() queues it. No
 * system call in reserve; commit may send, as shoal__link_send() does.
 */
void *shoal__link_reserve(struct shoal__link *l, uint32_t len, uint16_t tag);
void shoal__link_commit(struct shoal__link *l);

/*
 * Reserve and commit for a run of records of one length and tag, so that
 * what a record costs the queue is paid once a run: reserve_n returns where
 * the first's `len` bytes go, NULL as reserve does, and in *got how many of
 * up to `n` have room (at least 1; record i's bytes at the first's plus i
 * times shoal__frame_rec_size(len)). The caller writes the first k of them
 * (1 <= k <= *got) and calls shoal__link_commit_n(l, k): they are queued,
 * in order, as k reserves and commits would have queued them.
 */
void *shoal__link_reserve_n(struct shoal__link *l, uint32_t len, uint16_t tag, uint32_t n,
			    uint32_t *got);
void shoal__link_commit_n(struct shoal__link *l, uint32_t k);

/*
 * Give up the records queued and never sent on any connection (for a peer
 * that stays away): they are dropped, counted in `dropped`, and their
 * numbers taken by the next records queued, so the peer sees no gap.
 * Records sent once stay: the peer may have them, and is told on its
 * return. Returns how many were dropped. No system call.
 */
uint64_t shoal__link_drop_unsent(struct shoal__link *l);

/*
 * The link's state (enum shoal__link_state) and, in *down_since_ns, when it
 * last stopped being UP (as shoal__link_stats() says): what a caller
 * asks per turn, without copying the counters. Never fails.
 */
uint32_t shoal__link_state(const struct shoal__link *l, uint64_t *down_since_ns);

/*
 * Send what is queued now, without waiting for the flush deadline. Returns
 * 0, or -EAGAIN when not connected or every frame buffer is in flight (the
 * records stay queued). May make system calls.
 */
int shoal__link_flush(struct shoal__link *l);

/*
 * As shoal__link_flush(), but only when every record sent before is
 * acknowledged (Nagle's rule): for a caller whose input ran dry, so that a
 * record alone (a request, its response) goes now instead of at the flush
 * deadline, while records that come with frames in flight still gather
 * into full frames. Returns 0 (sent, or nothing to do) or -EAGAIN as
 * shoal__link_flush().
 */
int shoal__link_flush_idle(struct shoal__link *l);

/*
 * Do everything due at `now_ns` (CLOCK_MONOTONIC; a reading older than the
 * hub's last counts as that one), for every link of the hub: progress UCP
 * once (which receives frames; shoal__link_hub_arm() says -EAGAIN while
 * more wait, so a caller polls again before it sleeps), accept connections and hand each to the link
 * its HELLO names (or refuse it, counted in the hub's `refused`), retry
 * connections, send due frames, acks and keepalives, drop dead
 * connections. Every failure is one connection's: it is dropped, counted
 * in its link's `broken` and tried again, so the call itself never fails.
 * Makes system calls; never sleeps.
 */
void shoal__link_hub_poll(struct shoal__link_hub *h, uint64_t now_ns);

/* The event fd of the hub's UCP worker, for poll(2)/epoll. Never fails. */
int shoal__link_hub_fd(const struct shoal__link_hub *h);

/*
 * Arm the fd before sleeping on it: 0 when it will signal new events,
 * -EAGAIN when events are pending (poll again instead of sleeping).
 */
int shoal__link_hub_arm(struct shoal__link_hub *h);

/* The latest CLOCK_MONOTONIC time at which shoal__link_hub_poll() must run. */
uint64_t shoal__link_hub_deadline(const struct shoal__link_hub *h);

/* Copy the hub's counters into *st. Never fails. */
void shoal__link_hub_stats(const struct shoal__link_hub *h, struct shoal__link_hub_stats *st);

/* The same calls on the hub of link `l` (every link of it is polled). */
void shoal__link_poll(struct shoal__link *l, uint64_t now_ns);
int shoal__link_fd(const struct shoal__link *l);
int shoal__link_arm(struct shoal__link *l);
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

/*
 * The same for up to `max` records at once, for a caller that takes a
 * frame's records in a loop: peek_n fills recs[0 .. n) with the oldest
 * records not yet released, all of one frame (fewer than max at its end),
 * and returns n (0: none held); release_n releases the first k of them
 * (1 <= k <= n; anything else aborts), after which the rest are peeked
 * again. A peek_n (or peek) replaces the one before it.
 */
uint32_t shoal__link_recv_peek_n(struct shoal__link *l, struct shoal__frame_rec *recs,
				 uint32_t max);
void shoal__link_recv_release_n(struct shoal__link *l, uint32_t k);

/* Copy the link's counters and state into *st. Never fails. */
void shoal__link_stats(const struct shoal__link *l, struct shoal__link_stats *st);

/*
 * Send UCX's log messages of this process (errors and warnings, or what
 * UCX_LOG_LEVEL lets through) to sink(arg, level, message) instead of
 * UCX's own printing on stderr: `level` is UCX's name for it ("ERROR",
 * "WARN" ...), `message` the text alone, without UCX's prefix or a
 * newline. sink NULL: UCX prints again. Process-wide; UCX may log from a
 * thread of its own, so the sink must be thread-safe. Call it before
 * creating hubs, from one thread. Never fails.
 */
void shoal__link_log_to(void (*sink)(void *arg, const char *level, const char *message),
			void *arg);

/*
 * Concurrency: a hub and its links are single-threaded (rule 2): no two
 * calls on one hub or its links may run together ("X"); calls on different
 * hubs may ("-"). shoal__link_max_record() may run with anything.
 *
 *                          hub H or its links   hub K or its links
 *   hub H or its links            X                     -
 */

#endif
