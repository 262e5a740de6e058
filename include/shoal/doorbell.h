/* SPDX-License-Identifier: MIT */
/*
 * Doorbells: how a consumer sleeps when idle and how producers wake it.
 *
 * A doorbell is a 64-byte object in shared memory holding a futex word. The
 * consumer polls its rings for a bounded spin budget; when nothing arrives it
 * announces that it is about to sleep (shoal_doorbell_prepare()), checks its
 * rings one last time, and sleeps on the futex (shoal_doorbell_wait()).
 * A producer, after committing records, calls shoal_doorbell_notify(): a load
 * and a fence, and a FUTEX_WAKE system call only when the consumer announced
 * that it sleeps.
 *
 * No wake-up is lost: the consumer's announcement and the producer's commit
 * are each followed by a full fence before each reads the other's variable
 * (a store-buffer / Dekker pattern), so at least one of them sees the other.
 *
 * Concurrency: usually one waiter per doorbell; several may wait (a notify
 * wakes them all). Any number of producers, in any processes, may notify
 * concurrently.
 */
#ifndef SHOAL_DOORBELL_H
#define SHOAL_DOORBELL_H

#include <stdbool.h>
#include <stdint.h>

#include <shoal/api.h>

/* Default spin budget before sleeping, in nanoseconds; see docs/design.md. */
#define SHOAL_DOORBELL_SPIN_NS_DEFAULT 20000u

/* Values of struct shoal_doorbell.state. */
#define SHOAL_DOORBELL_AWAKE    0u
#define SHOAL_DOORBELL_SLEEPING 1u

/* Values of struct shoal_doorbell.ready (see shoal_doorbell_ready_on()). */
#define SHOAL_DOORBELL_READY_ON  1u   /* the consumer reads the summary */
#define SHOAL_DOORBELL_READY_SET 2u   /* published since the consumer took it: look at every ring */

/* Shared-memory ABI: 64 bytes, state at 0, ready at 4, sleeps at 8, wakes at
 * 16, held at 24. */
struct shoal_doorbell {
	_Alignas(64) _Atomic uint32_t state;   /* SHOAL_DOORBELL_AWAKE or _SLEEPING */
	_Atomic uint32_t ready;       /* the ready summary: 0, or READY_ON and READY_SET or hints */
	_Atomic uint64_t sleeps;      /* futex waits entered (consumer-written) */
	_Atomic uint64_t wakes;       /* FUTEX_WAKE calls made (producer-written, RMW) */
	_Atomic uint64_t held;        /* first held wake-up, shoal__now_ns() clock; 0: none */
	_Atomic uint32_t unfenced;    /* 1: producers may publish without F2 (consumer-written) */
	uint32_t pad32;
	uint64_t pad[3];
};

/* Initialise to awake with zero counters. */
SHOAL_API void shoal_doorbell_init(struct shoal_doorbell *db);

/*
 * Producer side, after a commit: wake the consumer if it announced sleep.
 * Costs a full fence and a load when the consumer is awake; a system call
 * otherwise. Never blocks.
 */
SHOAL_API void shoal_doorbell_notify(struct shoal_doorbell *db);

/*
 * Producer side, for many doorbells at once: after publishing to several
 * consumers, one shoal_doorbell_fence() then shoal_doorbell_wake() on each
 * doorbell does what shoal_doorbell_notify() on each would, with one fence
 * instead of one per doorbell. shoal_doorbell_wake() alone, without a fence
 * since the publish, can lose a wake-up.
 */
SHOAL_API void shoal_doorbell_fence(void);
SHOAL_API void shoal_doorbell_wake(struct shoal_doorbell *db);
/* shoal_doorbell_wake() that sets a ring's hint in the ready summary (below). */
SHOAL_API void shoal_doorbell_wake_hint(struct shoal_doorbell *db, uint32_t hint);

/*
 * Publishing without a fence per message. The fence (F2) after a commit
 * waits until the record's stores leave the store buffer: on this project's
 * test VM a fifth of a one-to-one stream's time. A consumer that polls
 * without sleeping does not need it, only a consumer on its way to sleep
 * does; so the sleeper pays instead, with one system-wide barrier
 * (membarrier(2) MEMBARRIER_CMD_GLOBAL_EXPEDITED: every CPU running a
 * process that joined makes a full fence) on its way to sleep, which stands
 * for the fence of every producer that skipped it.
 *
 * A producer process joins once (shoal_doorbell_asym_join(), before its
 * threads publish); it then skips F2 on a doorbell whose consumer said it
 * polls (shoal_doorbell_fence_needed() false). A consumer says so with
 * shoal_doorbell_unfence() once it has taken many records without sleeping
 * (shoal_doorbell_streak() counts them; the caller zeroes its count at each
 * prepare), and the next shoal_doorbell_prepare() takes it back before it
 * pays the barrier; shoal_doorbell_idle_wait() zeroes st->streak itself. So a
 * consumer that sleeps between every few messages pays nothing new, and one
 * that streams pays one barrier per sleep for thousands of fences saved.
 *
 * Without the kernel command (or under ThreadSanitizer, which cannot see
 * the barrier) nobody joins and every publish fences, as before.
 */
#define SHOAL_UNFENCE_AFTER 1024u   /* records taken without a sleep before unfencing */

SHOAL_API int shoal_doorbell_asym_join(void);
SHOAL_API bool shoal_doorbell_fence_needed(const struct shoal_doorbell *db);
SHOAL_API void shoal_doorbell_fence_for(const struct shoal_doorbell *db);
SHOAL_API void shoal_doorbell_unfence(struct shoal_doorbell *db);
SHOAL_API void shoal_doorbell_streak(struct shoal_doorbell *db, uint32_t *streak, uint32_t n);

/*
 * The same for a doorbell whose sleepers are rare and whose publisher
 * knows it: senders waiting for room, woken by the consumer after each
 * release. The publisher unfences the doorbell itself once
 * SHOAL_UNFENCE_AFTER of its notifies passed with no sleep on it (the
 * doorbell's sleeps counter did not move), with a full fence after the
 * store, so that a sleeper that does not see the word yet is seen by the
 * publisher's next look at `state` instead; the sleeper's prepare takes it
 * back as above. So a ring that streams with room to spare costs its
 * consumer no fence per release, and one whose senders keep waiting for
 * room stays fenced. One struct per publisher of the doorbell, zeroed.
 */
struct shoal_quiet {
	uint64_t sleeps;    /* the doorbell's sleeps counter at the last look */
	uint32_t count;     /* notifies since, with no sleep between */
};

SHOAL_API void shoal_doorbell_notify_quiet(struct shoal_doorbell *db, struct shoal_quiet *q);

/*
 * Wake moderation, as network cards moderate interrupts. When producers
 * flood many consumers that sleep (more processes than CPUs), waking one for
 * every message costs a system call and two context switches each. A
 * producer may instead hold a sleeping consumer's wake-up and let messages
 * gather: it marks the doorbell (`held`, the time of the first held
 * wake-up) and wakes the consumer only when SHOAL_WAKE_BATCH of its own
 * messages are unannounced there. A waker (any thread of any process that
 * scans the doorbells: the runtime's router runs one) makes each held
 * wake-up once it is `deadline` old, so a lone message waits at most that
 * long (plus the waker's own wake-up), whatever its producer does next.
 * Light traffic (at most SHOAL_WAKE_LIGHT_RATE messages a second to
 * sleepers, counted over the current window and the one before) is never
 * held: it keeps its latency.
 *
 * One shoal_wake_mod per producer thread; not shared.
 */
#define SHOAL_WAKE_BATCH 64u
/*
 * A producer about to idle makes the wake-ups it holds when they are this
 * few (a conversation, whose peer may be what it waits for); more (a
 * fan-out) it leaves to the waker. The runtime's workers and dispatchers do.
 */
#define SHOAL_WAKE_FLUSH_MAX 4u
#define SHOAL_WAKE_LIGHT_RATE 25000u

struct shoal_wake_mod {
	uint64_t window_ns;       /* traffic is judged light over this window */
	uint32_t light;           /* messages to sleepers per window that are light
				   * traffic (init: SHOAL_WAKE_LIGHT_RATE over the window) */
	uint64_t win_ns;          /* start of the current window */
	uint32_t count;           /* messages to sleepers in it */
	bool heavy;               /* the window before was not light */
	uint64_t wakes;           /* FUTEX_WAKE calls made */
	uint64_t held;            /* wake-ups held (not made at once) */
};

/* window_ns 0: never hold. The runtime passes its wake deadline. */
SHOAL_API void shoal_wake_mod_init(struct shoal_wake_mod *m, uint64_t window_ns);

/* What shoal_doorbell_wake_mod() did. */
#define SHOAL_WAKE_DONE       0   /* the consumer is awake, or was woken */
#define SHOAL_WAKE_HELD       1   /* held, on a doorbell already marked */
#define SHOAL_WAKE_HELD_FIRST 2   /* held, and the doorbell newly marked: the
				   * caller rings its waker's doorbell */

/*
 * After committing to db's consumer and a shoal_doorbell_fence(): wake it,
 * or hold the wake-up as above. `unannounced`: this producer's messages
 * committed there since it last returned SHOAL_WAKE_DONE for db, this
 * commit's included (SHOAL_WAKE_BATCH or more: never hold). Reset it on
 * SHOAL_WAKE_DONE.
 */
SHOAL_API int shoal_doorbell_wake_mod(struct shoal_doorbell *db, struct shoal_wake_mod *m,
				      uint32_t unannounced);

/*
 * shoal_doorbell_fence_for(db) then shoal_doorbell_wake_mod(): what a
 * producer does after each commit to one consumer, in one call. Returns as
 * shoal_doorbell_wake_mod().
 */
SHOAL_API int shoal_doorbell_notify_mod(struct shoal_doorbell *db, struct shoal_wake_mod *m,
					uint32_t unannounced);

/* The two calls above for a producer whose ring has a hint in the ready
 * summary (shoal_doorbell_ready_hint()): they set the hint, not READY_SET. */
SHOAL_API int shoal_doorbell_wake_mod_hint(struct shoal_doorbell *db, struct shoal_wake_mod *m,
					   uint32_t unannounced, uint32_t hint);
SHOAL_API int shoal_doorbell_notify_mod_hint(struct shoal_doorbell *db, struct shoal_wake_mod *m,
					     uint32_t unannounced, uint32_t hint);

/*
 * Whether shoal_doorbell_wake_mod_hint(db, m, n, hint) would only return
 * SHOAL_WAKE_DONE, storing nothing: the consumer is awake, and its ready
 * summary needs no store (it does not read one, or shows `hint` or
 * READY_SET already and the doorbell is not unfenced). A producer that
 * publishes to many consumers asks this first (after F2, as it would call
 * wake_mod), inline, and makes the call only when it returns false: the
 * loads are those of the call, in the line it reads anyway, without the
 * call. Relaxed: ordered by the caller's F2, as in the call.
 */
/* Whether the ready summary `r` (db's, loaded after F2) needs no store for
 * `look` (a hint or READY_SET): its consumer does not read it, or it shows
 * `look` or READY_SET already and no producer may skip F2. The one rule of
 * the producers' mark (shm/doorbell.c) and of the call below. */
static inline bool shoal__doorbell_ready_marked(const struct shoal_doorbell *db, uint32_t r,
						uint32_t look)
{
	return !(r & SHOAL_DOORBELL_READY_ON) ||
	       ((r & (look | SHOAL_DOORBELL_READY_SET)) != 0 &&
		__atomic_load_n((const uint32_t *)(const void *)&db->unfenced, __ATOMIC_RELAXED) == 0);
}

static inline bool shoal_doorbell_wake_quiet(const struct shoal_doorbell *db, uint32_t hint)
{
	uint32_t r = __atomic_load_n((const uint32_t *)(const void *)&db->ready, __ATOMIC_RELAXED);

	if (__atomic_load_n((const uint32_t *)(const void *)&db->state, __ATOMIC_RELAXED) !=
	    SHOAL_DOORBELL_AWAKE)
		return false;
	return shoal__doorbell_ready_marked(db, r, hint);
}

/*
 * Waker side: if db holds a wake-up at least `age_ns` old at `now`, make
 * it. Returns when db's held wake-up falls due (UINT64_MAX: none held).
 */
SHOAL_API uint64_t shoal_doorbell_wake_due(struct shoal_doorbell *db, uint64_t now,
					   uint64_t age_ns);

/*
 * A ready summary, for a consumer of many rings: one word that says whether
 * anything was published to it since it last looked, so that an empty poll
 * reads that word instead of every ring. Producers do nothing more than
 * they do already: shoal_doorbell_wake(), _notify() and _wake_mod() set it,
 * after their fence (F2), on a doorbell whose consumer opted in, and only
 * when it is clear (a load of the line they read anyway; a store once per
 * consumer pass, not per message); a producer that skipped F2 (below)
 * stores it whatever it loaded.
 *
 * A producer whose consumer reads many rings may say which ring it
 * published to: a hint, one of SHOAL_DOORBELL_READY_HINTS bits that the
 * consumer and the producer compute alike from the ring's key
 * (shoal_doorbell_ready_hint(); the runtime's key is the producing worker's
 * group and index). The _hint calls set that bit (an atomic or, once per
 * consumer pass) instead of READY_SET, which means "look at every ring" and
 * is what the other calls set; a producer that skipped F2 still stores
 * READY_SET. Several rings may share a bit: a hint narrows the look, and a
 * ring whose producer gives a wrong hint is found by the consumer's next
 * look at every ring.
 *
 * The consumer opts in once with shoal_doorbell_ready_on() (which also sets
 * the summary, so its next look scans). Then, before a scan whose emptiness
 * it will trust, it calls shoal_doorbell_ready_take(): when that returns 0
 * nothing was published since the last take returned non-zero and every
 * ring scanned after that take was found empty; otherwise it has cleared
 * the summary and made a full fence (F3, pairing with F2), so that the scan
 * that follows sees every commit the summary stood for, and a later commit
 * sets it again. Its answer says where to look: READY_SET, every ring (and
 * then nothing else is set), or the hint bits set since the last take, whose
 * rings are all the scan must read. A scan that leaves records behind (a
 * budget) must scan again without asking the summary.
 */
#define SHOAL_DOORBELL_READY_HINTS 29u
static inline uint32_t shoal_doorbell_ready_hint(uint32_t key)
{
	return UINT32_C(4) << (key % SHOAL_DOORBELL_READY_HINTS);
}

SHOAL_API void shoal_doorbell_ready_on(struct shoal_doorbell *db);
SHOAL_API uint32_t shoal__doorbell_ready_take_slow(struct shoal_doorbell *db);

/*
 * Whether the summary shows anything, without taking it: the inline load
 * that shoal_doorbell_ready_take() answers an empty look with. Acquire
 * (free on x86-64), so that a consumer that reads a ring's tail after it
 * sees that tail as new as the mark it saw (a producer commits, then
 * marks). A consumer that gets true and wants the answer takes it with
 * shoal__doorbell_ready_take_slow().
 */
static inline bool shoal_doorbell_ready_shown(const struct shoal_doorbell *db)
{
	return __atomic_load_n((const uint32_t *)(const void *)&db->ready, __ATOMIC_ACQUIRE) !=
	       SHOAL_DOORBELL_READY_ON;
}

static inline uint32_t shoal_doorbell_ready_take(struct shoal_doorbell *db)
{
	/* The common empty case is one load of a line that producers write
	 * only when it is clear. */
	if (!shoal_doorbell_ready_shown(db))
		return 0;
	return shoal__doorbell_ready_take_slow(db);
}

/*
 * Consumer side. Announce sleep; the caller must then check its rings once
 * more and call shoal_doorbell_cancel() if anything arrived, or
 * shoal_doorbell_wait() if not.
 */
SHOAL_API void shoal_doorbell_prepare(struct shoal_doorbell *db);
SHOAL_API void shoal_doorbell_cancel(struct shoal_doorbell *db);

/*
 * Sleep until notified, for at most `timeout_ns` (negative: no limit).
 * Returns 0 when woken (or when a notify came before the sleep began),
 * -ETIMEDOUT, or -EINTR on a signal. Leaves the doorbell awake.
 */
SHOAL_API int shoal_doorbell_wait(struct shoal_doorbell *db, int64_t timeout_ns);

/*
 * The whole consumer idle protocol: poll `ready(arg)` for up to `spin_ns`
 * nanoseconds, then prepare, check again, and sleep; repeat until ready()
 * returns true or `timeout_ns` passes (negative: no limit).
 * Returns 0 when ready, -ETIMEDOUT, or -EINTR. May sleep: hence _wait.
 */
SHOAL_API int shoal_doorbell_poll_wait(struct shoal_doorbell *db, uint64_t spin_ns,
				       bool (*ready)(void *arg), void *arg, int64_t timeout_ns);

/*
 * shoal_doorbell_poll_wait(), but the spin yields the CPU (sched_yield())
 * between its looks: for a wait known to last tens of microseconds (an
 * answer from another host) on CPUs other threads may want. A thread
 * runnable on this CPU runs at once, and the CPU does not go idle, which
 * on a VM halts it and makes the next wake-up cost about 20 us.
 */
SHOAL_API int shoal_doorbell_yield_wait(struct shoal_doorbell *db, uint64_t spin_ns,
					bool (*ready)(void *arg), void *arg, int64_t timeout_ns);

/*
 * The two in turn: shoal_doorbell_poll_wait()'s spin for `spin_ns`, then
 * shoal_doorbell_yield_wait()'s looks for `yield_ns` (router.yield: on
 * CPUs that more processes share, the CPU goes to the one with work and
 * does not go idle), then the sleep; repeated as poll_wait's. With
 * yield_ns 0 it is shoal_doorbell_poll_wait().
 */
SHOAL_API int shoal_doorbell_spin_yield_wait(struct shoal_doorbell *db, uint64_t spin_ns,
					     uint64_t yield_ns, bool (*ready)(void *arg),
					     void *arg, int64_t timeout_ns);

/*
 * The idle protocol of a consumer that adapts its spinning (one struct per
 * consumer thread, zeroed, then spin_max_ns, spin_ns and yield_ns set): it
 * spins for spin_ns, which halves each time a spin finds nothing and goes
 * back to spin_max_ns when a sleep ended sooner than a spin would have,
 * unless the thread was preempted since the last sleep (the CPUs are
 * oversubscribed: spinning then only takes time from the producers). Then,
 * for yield_ns, it looks again with sched_yield() between its looks, as
 * shoal_doorbell_yield_wait() does (the CPU goes at once to a thread
 * runnable on it, and does not go idle). Then it sleeps as
 * shoal_doorbell_poll_wait() does, and returns as it does.
 */
struct shoal_idle {
	uint64_t spin_max_ns;   /* configured spin budget */
	uint64_t spin_ns;       /* current spin budget */
	uint64_t yield_ns;      /* looks yielding the CPU after the spin; 0: none */
	long nivcsw;            /* involuntary context switches at the last look */
	uint32_t streak;        /* records taken since the last sleep (shoal_doorbell_streak()) */
};

SHOAL_API int shoal_doorbell_idle_wait(struct shoal_doorbell *db, struct shoal_idle *st,
				       bool (*ready)(void *arg), void *arg, int64_t timeout_ns);

/*
 * Concurrency table, per doorbell, for threads in any processes: "-" may
 * run together with no synchronisation by the caller, "X" may not, "(a)"
 * may, with the cost below. Calls on different doorbells never conflict.
 *
 *   [1] shoal_doorbell_init
 *   [2] shoal_doorbell_notify, shoal_doorbell_notify_mod, shoal_doorbell_wake,
 *       shoal_doorbell_wake_mod (after a shoal_doorbell_fence(), which
 *       touches no doorbell), their _hint forms, shoal_doorbell_wake_quiet,
 *       shoal_doorbell_wake_due
 *   [3] shoal_doorbell_prepare, shoal_doorbell_cancel, shoal_doorbell_wait,
 *       shoal_doorbell_poll_wait, shoal_doorbell_yield_wait, shoal_doorbell_idle_wait
 *
 *        [1]  [2]  [3]
 *   [1]   X    X    X
 *   [2]   X    -    -
 *   [3]   X    -   (a)
 *
 * [1] runs before the doorbell is shared. [2] with [2]: producers race on
 * one exchange of the state word, and the one that swaps it makes the
 * FUTEX_WAKE; the wakes counter is an atomic add. [2] with [3] is the
 * protocol above, which loses no wake-up.
 *
 * (a) Several waiters share one state word: when one of them cancels, or
 * returns from its wait, it stores AWAKE while another may still sleep, and
 * the next notify sees AWAKE and wakes nobody. The other waiter then sleeps
 * until its timeout: with more than one waiter, always pass one (the
 * runtime's senders waiting for room wait in slices of 100 ms). The sleeps
 * counter, a plain increment by its waiter, may then miss some.
 */

#endif
