/* SPDX-License-Identifier: MIT */
#ifndef SHOAL_RUNTIME_DATA_RELAY_H
#define SHOAL_RUNTIME_DATA_RELAY_H

#include <stdbool.h>
#include <stdint.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>

/*
 * What the bridge (runtime/bridge/bridge.c) needs of the data path to put
 * a record from another host into this host's system with its envelope as
 * it was: the sender's address (of the other host), request_id, trace_id,
 * send_ns, dest (docs/hosts.md). Private; never installed.
 *
 * Both calls are try_ forms of the worker that makes them (ctx's thread):
 * they never wait, and -EAGAIN (no room, or a direct link not open yet,
 * asked for) means "hold the record and try again": the link's credit then
 * pushes back on the other host's sender. The record is checked as one
 * read from a ring would be (DESIGN invariant 1): the caller has checked
 * that env->len bytes of payload follow; the type must be one of the
 * group's, within its size, the flags known. On failure nothing is
 * written and try_failed is counted.
 *
 * Bursts: both write the record into its ring and leave it unpublished,
 * held in `rl` (zeroed at first, then the caller's across calls), so that
 * the records of a frame that go to one ring are published together: one
 * commit, one fence and one doorbell (shoal__relay_publish()), as
 * shoal_send_burst() does. A record for another ring than rl's, or one
 * whose ring needs the slow path (full, a link to open or renew), has
 * what rl holds published first. The caller publishes before it does
 * anything that may wait, and at the end of each batch: records held are
 * invisible to their consumer, and counted sent only then.
 */
struct shoal__dout;

struct shoal__relay {
	struct shoal_ring_prod *p;     /* the ring of the records held; NULL: none */
	struct shoal__dout *o;         /* its direct link; NULL: the uplink */
	uint32_t k;                    /* records held */
	bool urgent;                   /* a request or a response among them: never held
					* back by wake moderation */
	/* The last direct record held, when neither a request nor a
	 * response (shoal__send_env()): the next with the same dest,
	 * sender, type and flags goes to the same ring, checked only for
	 * what may have changed since. rg NULL: none. */
	const struct shoal__reg_group *rg;   /* its destination's entry */
	uint64_t dest, sender;
	uint32_t type, flags;
	uint32_t max_len;              /* its type's bound */
};

/* Publish what rl holds, and empty it. Never fails, never waits. */
void shoal__relay_publish(struct shoal_ctx *ctx, struct shoal__relay *rl);

/*
 * Into the destination's mailbox (a direct message or a response, env->dest
 * a group of this host), as shoal_try_send_to() would write it, but with
 * `env` as it is. Returns 0, or the errors of shoal_try_send_to(), -EINVAL
 * for a bad envelope, -EHOSTUNREACH for a dest of another host (a record is
 * carried once: it never goes out to a bridge again).
 */
int shoal__send_env(struct shoal_ctx *ctx, struct shoal__relay *rl,
		    const struct shoal_envelope *env, const void *payload);

/*
 * Into the caller's uplink (a routed message: env->dest SHOAL_ADDR_NONE, no
 * request or response flags), as shoal_try_send() would write it, but with
 * `env` as it is; its host's router matches it as any other. Returns 0, or
 * the errors of shoal_try_send(), -EINVAL for a bad envelope.
 */
int shoal__send_routed_env(struct shoal_ctx *ctx, struct shoal__relay *rl,
			   const struct shoal_envelope *env, const void *payload);

/*
 * Whether group `group` of this host has a process attached (RUNNING), with
 * its incarnation in *gen: 1 if so, 0 if not, -EINVAL for no such group.
 * The bridge watches the responders of the requests it brought in with it
 * (a process that dies ends its requests, as for a local requester).
 */
int shoal__group_running(const struct shoal_ctx *ctx, int group, uint32_t *gen);

/*
 * Tell the router which hosts the bridge (ctx's group) has found away
 * longer than hosts.down_after, bit h for host h of the file, in its
 * mailbox's hosts_down (runtime/layout.h), which outlives the process: the
 * bits of `set` are set, those of `clear` cleared, the others kept as a
 * predecessor may have left them. Returns what it held before. Never
 * fails, never waits; the bridge's one worker only.
 */
uint64_t shoal__bridge_hosts_down(struct shoal_ctx *ctx, uint64_t set, uint64_t clear);

/*
 * The bridge's idle sleep on its mailbox's doorbell, in steps, so that it
 * can wait for its links' events (not a futex) at the same time
 * (runtime/bridge/bridge.c, docs/memory-ordering.md): the worker's own idle
 * protocol (shoal_doorbell_idle_wait()) without its spin.
 *
 * shoal__idle_prepare() makes the wake-ups this worker holds, announces
 * the sleep (F1, and F4 if producers skipped F2) and looks at the rings
 * once more: true if nothing is there, the doorbell then SLEEPING, and the
 * caller must end with shoal__idle_wait() or shoal__idle_cancel(); false if
 * something came (the doorbell left awake). Meanwhile any thread may wake
 * the sleep with shoal_doorbell_wake() on shoal__idle_bell(). Never fails.
 * shoal__idle_wait() sleeps until woken or for timeout_ns (negative: no
 * limit), and returns as shoal_doorbell_wait(). Both on ctx's thread.
 */
bool shoal__idle_prepare(struct shoal_ctx *ctx);
void shoal__idle_cancel(struct shoal_ctx *ctx);
int shoal__idle_wait(struct shoal_ctx *ctx, int64_t timeout_ns);
struct shoal_doorbell *shoal__idle_bell(struct shoal_ctx *ctx);

/*
 * A record's envelope as a ring or a frame gave it (copied out first: the
 * writer is not trusted), against the record's length `len`: its payload
 * length says the rest, a type, only known flags. What every reader checks
 * before anything else (DESIGN invariant 1).
 */
static inline bool shoal__env_sane(const struct shoal_envelope *env, uint32_t len)
{
	return len >= sizeof(*env) && env->len == len - (uint32_t)sizeof(*env) &&
	       env->type != 0 && (env->flags & ~SHOAL_ENV_FLAGS) == 0;
}

/*
 * The bridge's mailbox read in runs: a run of records of one length that a
 * pass found in one of the bridge's mailbox rings (runtime/data/poll.c),
 * handed to the bridge at once, not one handler call each. The bridge takes
 * records from the first on, as long as it can carry each itself (in
 * bridge_out.c: a direct message for a group of another host whose link has
 * room, a routed copy for it); it stops at the first it cannot, which the
 * pass then hands to the handler as usual, with the rest of the run (a
 * response, a request to the bridge, anything to refuse or to wait for).
 * Not handed a run that holds the record earlier processes died on (the
 * pass looks at it). For each record it takes, before it reads it, it
 * marks it in hand: `inflight` = mark + i * stride for the i-th (the mark
 * a handler call has, runtime/data/worker.h shoal__set_aside()). The pass
 * counts what was taken as received and handled.
 */
struct shoal__relay_run {
	const unsigned char *data;     /* the first record: envelope, then payload */
	uint32_t len;                  /* each record's length */
	uint32_t stride;               /* from one record to the next */
	uint32_t n;                    /* records */
	_Atomic uint64_t *inflight;
	uint64_t mark;                 /* the first record's mark */
};

/* Returns how many of r's records, from the first, it took (0 to r->n). */
typedef uint32_t (*shoal__relay_run_fn)(void *user, const struct shoal__relay_run *r);

/* Have ctx's passes hand runs to `fn` (NULL: none). ctx's thread, before it polls. */
void shoal__relay_runs(struct shoal_ctx *ctx, shoal__relay_run_fn fn, void *user);

/* Count a message sent at `send_ns` into ctx's latency histogram, as the
 * pass does for each message it hands to a handler; from a run's reader. */
void shoal__relay_latency(struct shoal_ctx *ctx, uint64_t send_ns);

/*
 * Concurrency: as the try_ sends: one thread per ctx; any number of ctxs
 * of any processes at once.
 */

#endif
