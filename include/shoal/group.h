/* SPDX-License-Identifier: MIT */
/*
 * Group programs: a process that hosts one actor group of a Shoal system.
 *
 * A program describes its group (actors, workers, message types, handler,
 * in-group routing, routes to subscribe) and calls shoal_group_main(), which
 * attaches to the system's router, registers, and runs the worker loop until
 * the router tells it to stop. Programs that drive their own loop (load
 * generators, tests) use attach / poll / detach instead.
 *
 * Lifecycle rules:
 *  1. If shoal_group_attach() succeeds you must call shoal_group_detach().
 *  2. A worker context (struct shoal_ctx) is used by one thread at a time:
 *     its rings are single-producer single-consumer. shoal_group_run() gives
 *     each worker its own thread; handlers get the context of their worker.
 *  3. Handlers never run after shoal_group_run() or shoal_poll() returns.
 *  4. A message's `data` and `env` are valid only during the handler call.
 *     A handler's shoal_request() may move its message's `data` out of the
 *     ring it came in (the wait frees ring space its sender may reuse): read
 *     it through `m->data` after the call, not through a copy of the pointer.
 *  5. A request is answered in its handler (shoal_respond()); a request the
 *     handler leaves unanswered is answered with -ECANCELED for it.
 *  6. A message queued in the group's mailbox outlives its process: the next
 *     process handles it, possibly again if the dead one was handling it.
 *     A message that 3 processes in a row died handling is set aside by the
 *     next, counted (set_aside in shoal stat), and not handled. Messages
 *     passed between the workers of a killed process are counted lost
 *     (forward_lost).
 *
 * Errors (every send returns 0 or one of these):
 *  -EAGAIN       the destination (or, for routed sends, the path to the
 *                router) is full: try_* only
 *  -EHOSTUNREACH no route matches this message type
 *  -EMSGSIZE     payload larger than the type's max_size
 *  -ENOMSG       a type this program did not declare
 *  -ESTALE       the address belongs to an earlier incarnation of its group
 *  -EHOSTDOWN    the destination group failed and will not come back (for
 *                routed sends: every route of the type leads to failed
 *                groups); a blocking send waiting for room returns it as
 *                soon as the group is marked failed
 *  -EINVAL       a malformed address or argument
 *  -ESHUTDOWN    the system is stopping
 *  -EUCLEAN      corrupted shared memory was detected on this path
 */
#ifndef SHOAL_GROUP_H
#define SHOAL_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include <shoal/api.h>
#include <shoal/filter.h>
#include <shoal/message.h>

struct shoal_group;
struct shoal_ctx;

/* One actor: a slot of the group, with state the program owns. */
struct shoal_actor {
	struct shoal_ctx *ctx;       /* the worker running this actor */
	uint64_t addr;               /* this actor's address (current generation) */
	uint16_t slot;
	void *state;                 /* free for the program (set in on_start) */
	void *user;                  /* the descriptor's user pointer */
};

#define SHOAL_OUT_MAX_SLOTS 16

/*
 * An in-group router's decision for a message addressed to the group as a
 * whole: kind is SHOAL_ROUTE_UNICAST (slots[0]), SHOAL_ROUTE_MULTICAST
 * (slots[0 .. n)), SHOAL_ROUTE_BROADCAST or SHOAL_ROUTE_DISCARD (shoal/filter.h);
 * any other kind, and a slot past the group's actors, is counted as
 * discarded.
 */
struct shoal_outcome {
	uint8_t kind;                /* enum shoal_route */
	uint8_t n;
	uint16_t slots[SHOAL_OUT_MAX_SLOTS];
};

struct shoal_group_desc {
	const char *name;            /* NULL: $SHOAL_GROUP */
	uint16_t n_actors;           /* 0: as the system declares the group, else 1 */
	uint16_t n_workers;          /* worker threads; 0: as declared, else 1 */
	int node;                    /* NUMA node wanted; -1: the router decides */
	const struct shoal_type *types;   /* every type this program sends or receives */
	uint32_t n_types;
	const struct shoal_filter *subs;  /* routes to this group, subscribed at attach */
	uint32_t n_subs;                  /* (their `group` field is ignored) */
	/* NULL for a group that only sends: a message that reaches it anyway
	 * is counted as discarded (a request answered -ECANCELED). */
	void (*on_message)(struct shoal_actor *a, const struct shoal_msg *m);
	int (*on_start)(struct shoal_actor *a);   /* optional; non-zero fails the attach */
	void (*on_stop)(struct shoal_actor *a);   /* optional */
	/* Optional in-group router for messages sent to the group as a whole;
	 * without it they go to actor 0. Runs in the receiving worker; `out`
	 * arrives set to SHOAL_ROUTE_UNICAST to actor 0. */
	void (*route)(const struct shoal_msg *m, struct shoal_outcome *out, void *user);
	void *user;
	/*
	 * Optional: several messages for one actor in one call, in the order
	 * they came (needs on_message, which keeps every other message). The
	 * poll hands a plain message (neither a request nor a response) sent to
	 * one of this worker's actors, and those that follow it in the same
	 * inbound ring for the same actor, up to 32, as one array: one call,
	 * and the counters and the crash mark once a batch. A message that came
	 * alone, requests, messages to the group as a whole that `route`
	 * decides, broadcasts and messages handled again after a crash (the 32
	 * records after the one a process died on) go to on_message, one by
	 * one; so does every message of a group of several workers (they take
	 * the mailbox one record at a time, each released before the copies it
	 * forwards, and count each copy as it is handled, so that a kill counts
	 * exactly what it lost: rule 6). Rule 4 holds for every message of the
	 * array: a shoal_request() inside on_batch may move all their payloads
	 * (read msgs[i].data after it). Messages sent from on_batch carry the
	 * first message's trace id. A message that kills its handler is set
	 * aside after one more crash than rule 6 says: the first kills the
	 * batch, then it is handled alone.
	 */
	void (*on_batch)(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n);
};

/* A response, filled by shoal_request(). */
struct shoal_reply {
	uint32_t type;
	uint32_t len;                /* payload bytes copied into buf */
	void *buf;                   /* caller's buffer */
	uint32_t cap;                /* its size */
	/* Set by shoal_request(): true when the responder answered (its
	 * response, or the error it sent with shoal_respond_error(), or
	 * -EMSGSIZE for a response too large for buf); false when the
	 * returned status is the requester's own (-ETIMEDOUT, -EOWNERDEAD, a
	 * send error). Tells a responder's -ETIMEDOUT from our own. */
	bool from_responder;
};

/*
 * Whether the reply a successful shoal_request() filled is of `type` and
 * exactly `size` bytes: the caller's check before it reads its buffer, as
 * SHOAL_MSG_GET is a handler's. A shorter reply leaves the end of the
 * buffer as it was; a longer one already failed with -EMSGSIZE.
 */
static inline bool shoal_reply_is(const struct shoal_reply *r, uint32_t type, uint32_t size)
{
	return r->type == type && r->len == size;
}

/* `if (ret == 0 && SHOAL_REPLY_IS(&reply, MSG_PONG, back))`: size of `obj`. */
#define SHOAL_REPLY_IS(r, type, obj) shoal_reply_is((r), (type), (uint32_t)sizeof(obj))

/*
 * Attach to system `system` (NULL: $SHOAL_SYSTEM) and register the group.
 * Runs on_start for every actor. Returns 0 or a negative errno with the
 * reason in *err: -ECONNREFUSED/-ENOENT (no router), -EACCES (refused by the
 * router: another user), -EEXIST (a type conflicts with the system's
 * declaration, or the group is already running), -EINVAL (bad descriptor,
 * or a bad $SHOAL_CTL_TIMEOUT_MS), -ETIMEDOUT (the router did not answer).
 * Blocks on the control socket, at most $SHOAL_CTL_TIMEOUT_MS (default
 * 30000) a step, as every control request of the group does (subscribe,
 * unsubscribe, a direct link's opening; detach waits at most 1 s);
 * allocates.
 */
SHOAL_API int shoal_group_attach(struct shoal_group **g, const struct shoal_group_desc *desc,
				 const char *system, struct shoal_err *err);

/* Worker context `w` (0 .. n_workers-1), or NULL. */
SHOAL_API struct shoal_ctx *shoal_group_worker(struct shoal_group *g, unsigned w);

/* This group's id and current generation. */
SHOAL_API int shoal_group_id(const struct shoal_group *g);
SHOAL_API uint32_t shoal_group_generation(const struct shoal_group *g);

/* Address of actor `slot` of group `name` in the current generation, or 0. */
SHOAL_API uint64_t shoal_group_lookup(struct shoal_group *g, const char *name, uint16_t slot);

/*
 * The same from a worker context, as a handler has it (a->ctx), waiting up
 * to `timeout_ns` for the group to come up: registered and running
 * (0: do not wait, as a handler should; negative: no limit). Returns the
 * address, or SHOAL_ADDR_NONE when the time ran out or a stop was asked.
 * Sleeps in 1 ms steps while it waits: not for the data path.
 */
SHOAL_API uint64_t shoal_lookup(struct shoal_ctx *ctx, const char *name, uint16_t slot,
				int64_t timeout_ns);

/*
 * Run every worker (worker 0 on the calling thread, the others on new
 * threads) until the router says stop or shoal_group_stop() is called; then
 * drain what is queued, run on_stop, and return 0 (or a negative errno).
 */
SHOAL_API int shoal_group_run(struct shoal_group *g);

/* Ask the workers to stop. Async-signal-safe; callable from any thread. */
SHOAL_API void shoal_group_stop(struct shoal_group *g);

/* Leave the system (BYE to the router), free everything. Never fails. */
SHOAL_API void shoal_group_detach(struct shoal_group *g);

/*
 * Everything in one call: read --system NAME / --group NAME (defaults from
 * the environment; also -s, -g and --NAME=VALUE) and --help, attach, run,
 * detach. Every other argument is the program's own: it is left in argv
 * and is no error; nothing after a "--" is read. Installs SIGINT/SIGTERM
 * handlers that stop the group, and ignores SIGPIPE: a group whose output
 * reader went away loses that output, not its life. Returns a process
 * exit status.
 */
SHOAL_API int shoal_group_main(const struct shoal_group_desc *desc, int argc, char **argv);

/*
 * Handle pending messages on this worker: up to `budget` (0: no limit)
 * messages. If nothing is pending, wait up to `timeout_ns` (0: do not wait,
 * negative: until something arrives or stop), spinning the router's budget
 * first and then sleeping. Returns how many messages were handled, or
 * -ESHUTDOWN once a stop was requested and nothing is left.
 */
SHOAL_API int shoal_poll(struct shoal_ctx *ctx, uint32_t budget, int64_t timeout_ns);

/* Routed sends: the router decides the receivers. send() waits while the
 * path to the router is full. */
SHOAL_API int shoal_send(struct shoal_ctx *ctx, uint32_t type, const void *buf, uint32_t len);
SHOAL_API int shoal_try_send(struct shoal_ctx *ctx, uint32_t type, const void *buf,
			     uint32_t len);

/*
 * Direct sends to an actor or group address, skipping the router, through a
 * direct link from this worker into the destination worker. The first send
 * into a destination worker asks the group's link opener thread for that
 * link (a control round trip to the router, off the data path): send_to()
 * waits for it (or, in a process whose opener thread never started, makes
 * that round trip itself); try_send_to() never waits and returns -EAGAIN until it is
 * open (call shoal_connect() first where a refusal at the start matters).
 * send_to() waits while the destination ring is full (until room,
 * -EHOSTDOWN when the destination is marked failed, or -ESHUTDOWN). To
 * SHOAL_SLOT_ALL both are all or nothing: on an error no actor got the
 * message, so a retry never duplicates. To a group of another host
 * (docs/hosts.md) the link and the ring are into this host's bridge, which
 * carries the message there: a full ring is also a full way to that host,
 * and -EHOSTDOWN also means its host has been unreachable longer than
 * hosts.down_after.
 */
SHOAL_API int shoal_send_to(struct shoal_ctx *ctx, uint64_t dest, uint32_t type,
			    const void *buf, uint32_t len);
SHOAL_API int shoal_try_send_to(struct shoal_ctx *ctx, uint64_t dest, uint32_t type,
				const void *buf, uint32_t len);

/* One message of a burst. */
struct shoal_burst_msg {
	uint32_t type;
	uint32_t len;
	const void *buf;
};

/*
 * Bursts: msgs[0..n) in one call, in order, each checked and sent as its
 * single form would (routed: send / try_send; direct: send_to / try_send_to
 * to `dest`), published together: one commit, one fence and one doorbell
 * check per burst instead of one per message, and one clock read (the
 * messages share their envelope's send_ns). Returns 0 when all were sent,
 * else why the burst stopped (the error the single form would return for
 * that message: a try_ burst stops with -EAGAIN where the ring is full, a
 * waiting one waits for room); *sent is how many were sent, from the first,
 * all published. A retry from msgs[*sent] duplicates nothing. A direct
 * burst goes through one ring: to SHOAL_SLOT_ALL it is -EINVAL.
 */
SHOAL_API int shoal_send_burst(struct shoal_ctx *ctx, const struct shoal_burst_msg *msgs,
			       uint32_t n, uint32_t *sent);
SHOAL_API int shoal_try_send_burst(struct shoal_ctx *ctx, const struct shoal_burst_msg *msgs,
				   uint32_t n, uint32_t *sent);
SHOAL_API int shoal_send_to_burst(struct shoal_ctx *ctx, uint64_t dest,
				  const struct shoal_burst_msg *msgs, uint32_t n, uint32_t *sent);
SHOAL_API int shoal_try_send_to_burst(struct shoal_ctx *ctx, uint64_t dest,
				      const struct shoal_burst_msg *msgs, uint32_t n,
				      uint32_t *sent);

/*
 * Open the direct links that sends to `dest` use (every worker's for
 * SHOAL_SLOT_ALL) and wait for them up to `timeout_ns` (negative: no
 * limit). Afterwards try_send_to() and shoal_reserve() to `dest` answer
 * without -EAGAIN for a link. Returns 0, an error of send_to() (-EINVAL,
 * -ESTALE, -EHOSTDOWN, -EUCLEAN: the link could not be opened), -ETIMEDOUT
 * or -ESHUTDOWN. May wait: not for use where waiting is not allowed.
 */
SHOAL_API int shoal_connect(struct shoal_ctx *ctx, uint64_t dest, int64_t timeout_ns);

/*
 * Zero-copy: reserve room for a `len`-byte payload of `type` to `dest`
 * (SHOAL_ADDR_NONE: routed) and return it in *buf; fill it, then
 * shoal_commit(). Never waits: the errors are those of the try_ forms. One
 * reservation at a time per context: a second one before shoal_commit()
 * returns -EBUSY and leaves the first in place, and so does any other send
 * of this context into the reserved ring (it would publish the reservation
 * before it is filled).
 */
SHOAL_API int shoal_reserve(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, uint32_t len,
			    void **buf);
SHOAL_API void shoal_commit(struct shoal_ctx *ctx);

/*
 * Send a request to `dest` and wait for the response, up to `timeout_ns`.
 * Meanwhile the worker reads only the rings of the responder's group (the
 * response comes on one of them) and of its own process's other workers:
 * their other messages are kept and handled after; other senders' messages
 * stay in their rings, so those senders feel
 * back-pressure (send() waits, try_send() says -EAGAIN). Returns 0
 * with the response in *reply; the responder's error (negative errno) if it
 * answered with one; -EOWNERDEAD if the responder's process died or
 * restarted (detected promptly, not at the timeout); -ETIMEDOUT; -EMSGSIZE if
 * the response did not fit reply->buf; or a send error. The timeout covers
 * the whole call: a wait for room in the responder's full ring ends at it
 * (-ETIMEDOUT) or when the responder dies (-EOWNERDEAD) or fails
 * (-EHOSTDOWN), with nothing sent. -ESHUTDOWN if the router died
 * meanwhile (noticed within about 100 ms), since nothing would then tell
 * the responder's death. A responder of another host (docs/hosts.md): the
 * request and its response go through the bridges; -EHOSTDOWN, promptly,
 * when its host is marked unreachable (longer than hosts.down_after), and
 * the death of its process is the error -EOWNERDEAD that its host's
 * bridge answers (reply->from_responder then true).
 */
SHOAL_API int shoal_request(struct shoal_ctx *ctx, uint64_t dest, uint32_t type,
			    const void *buf, uint32_t len, int64_t timeout_ns,
			    struct shoal_reply *reply);

/* Answer request `req` (from the handler that received it). */
SHOAL_API int shoal_respond(struct shoal_ctx *ctx, const struct shoal_msg *req, uint32_t type,
			    const void *buf, uint32_t len);

/* Answer request `req` with an error (a negative errno). */
SHOAL_API int shoal_respond_error(struct shoal_ctx *ctx, const struct shoal_msg *req, int err);

/*
 * Subscribe this group to `f` at run time; returns the filter id in *id.
 * Both ask the router and wait for its answer: -ETIMEDOUT after
 * $SHOAL_CTL_TIMEOUT_MS (shoal_group_attach()).
 */
SHOAL_API int shoal_subscribe(struct shoal_ctx *ctx, const struct shoal_filter *f, uint32_t *id);
SHOAL_API int shoal_unsubscribe(struct shoal_ctx *ctx, uint32_t id);

/* The address of the worker's current actor (inside a handler) or group. */
SHOAL_API uint64_t shoal_ctx_self(const struct shoal_ctx *ctx);

/*
 * Concurrency table. Which calls may run at the same time, from two threads
 * of one process; "-" means yes, with no synchronisation by the caller, "X"
 * means no: the caller orders them. Calls in different processes may always
 * run together: each process has its own handles and the rings between
 * processes have one producer and one consumer each.
 *
 *   [1] data calls on a context: shoal_poll, shoal_send, shoal_try_send,
 *       shoal_send_to, shoal_try_send_to, the four _burst forms,
 *       shoal_connect, shoal_reserve,
 *       shoal_commit, shoal_request, shoal_respond, shoal_respond_error,
 *       shoal_ctx_self
 *   [2] shoal_subscribe, shoal_unsubscribe
 *   [3] shoal_group_worker, shoal_group_id, shoal_group_generation,
 *       shoal_group_lookup, shoal_lookup
 *   [4] shoal_group_stop
 *   [5] shoal_group_run
 *   [6] shoal_group_detach
 *
 *   same group   [1]same ctx  [1]other ctx  [2]  [3]  [4]  [5]  [6]
 *   [1]             X            -          -    -    -    X    X
 *   [2]             -            -          -    -    -    -    X
 *   [3]             -            -          -    -    -    -    X
 *   [4]             -            -          -    -    -    -    X
 *   [5]             X            X          -    -    -    X    X
 *   [6]             X            X          X    X    X    X    X
 *
 * Calls on two different groups of one process never conflict, and
 * shoal_group_attach() may run at any time (a group already attached
 * elsewhere is refused with -EEXIST). shoal_group_main() is attach, [5]
 * and [6] on the calling thread.
 *
 * Why, and the rules the table cannot show:
 *  - [1] on one context is one thread at a time (lifecycle rule 2): its
 *    rings are single-producer single-consumer and the context holds the
 *    producer and consumer handles. Two contexts share nothing on the data
 *    path; opening a direct ring or mapping a peer's mailbox (first send to
 *    a group) is the link opener thread's work, which the data calls only
 *    ask for and, when they may wait, wait for.
 *  - [5] runs every worker: while it runs, [1] is for handlers only, each on
 *    its own context (a->ctx). A handler must not use another worker's.
 *  - Between shoal_reserve() and shoal_commit(), a send of that context
 *    (a handler's too) into the reserved ring is refused with -EBUSY: it
 *    would publish the reservation before it is filled.
 *  - shoal_respond() and shoal_respond_error() take the message the
 *    handler was handed, from that handler, before it returns (rules 4, 5).
 *  - [2] only reads the context's group; calls are serialised by the
 *    group's control lock and block on the router's reply (which comes
 *    after the new routes are published and no dispatcher reads the old
 *    ones), so they may be called from a handler or any thread.
 *  - [3] read immutable fields or the registry (relaxed snapshots).
 *  - [4] is an atomic store and doorbell notifies: async-signal-safe. It is
 *    the only call that is; the others may lock or allocate.
 *  - [6] frees the group: nothing else on it, before or during; after
 *    shoal_group_run() has returned.
 */

#endif
