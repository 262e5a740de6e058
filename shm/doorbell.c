/* SPDX-License-Identifier: MIT */
/*
 * Doorbell: a futex word in shared memory that lets an idle consumer sleep
 * and lets producers wake it only when it sleeps.
 *
 * Memory picture: one 64-byte line { state, sleeps, wakes }. `state` is
 * AWAKE (0) or SLEEPING (1); the consumer writes SLEEPING, producers and the
 * consumer write AWAKE.
 *
 * The protocol is a store-buffer (Dekker) pattern:
 *   consumer: state = SLEEPING; F1; look at the rings; if empty, futex_wait(state, SLEEPING)
 *   producer: publish records (ring R1); F2; if state == SLEEPING: exchange to
 *             AWAKE and, if it was SLEEPING, futex_wake
 * Ordering guarantees:
 *   F1 (consumer, after announcing) pairs with F2 (producer, after publishing):
 *      of the two loads that follow the fences, at least one sees the other
 *      side's store. Either the consumer sees the new records and cancels, or
 *      the producer sees SLEEPING and wakes it. futex_wait() itself re-checks
 *      state == SLEEPING atomically in the kernel, so a wake that lands between
 *      the consumer's last check and its sleep is not lost either.
 *   F4 (the consumer's membarrier(2) in prepare, after it takes back the
 *      `unfenced` word) stands for the F2 of producers that skipped it
 *      while that word was set; see shoal_doorbell_prepare() and
 *      docs/memory-ordering.md.
 * Several threads may wait on one doorbell (senders waiting for space in a
 * receiver's rings do): a notify wakes all of them, and each re-checks.
 *
 * Progress guarantees: notify is wait-free (one fence, one load; one exchange
 * and one system call only when the consumer sleeps). wait blocks by design.
 *
 * Untrusted memory: a hostile value in `state` can cause a spurious wake-up
 * or a futex wait that returns at once; neither reads or writes outside the
 * doorbell, and waits always carry the caller's timeout.
 */
#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>

#include "shm/atomic.h"
#include "shm/util.h"

#define DB_AWAKE SHOAL_DOORBELL_AWAKE
#define DB_SLEEPING SHOAL_DOORBELL_SLEEPING

static_assert(sizeof(struct shoal_doorbell) == 64, "doorbell ABI");
static_assert(offsetof(struct shoal_doorbell, state) == 0, "doorbell ABI");
static_assert(offsetof(struct shoal_doorbell, sleeps) == 8, "doorbell ABI");
static_assert(offsetof(struct shoal_doorbell, wakes) == 16, "doorbell ABI");
static_assert(offsetof(struct shoal_doorbell, held) == 24, "doorbell ABI");
static_assert(offsetof(struct shoal_doorbell, unfenced) == 32, "doorbell ABI");

#if defined(__SANITIZE_THREAD__)
#define ASYM_POSSIBLE 0   /* TSan cannot see membarrier(2): always fence */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ASYM_POSSIBLE 0
#endif
#endif
#ifndef ASYM_POSSIBLE
#define ASYM_POSSIBLE 1
#endif

/* This process gets the sleepers' barriers: it may skip F2. */
static _Atomic bool asym_joined;
/* The barrier command works here: 0 not asked yet, 1 yes, -1 no. */
static _Atomic int asym_usable;

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

static bool barrier_usable(void)
{
	int u = atomic_load_explicit(&asym_usable, memory_order_relaxed);

	if (u == 0) {
		long q = ASYM_POSSIBLE ? membarrier(MEMBARRIER_CMD_QUERY) : -1;
		long need = MEMBARRIER_CMD_GLOBAL_EXPEDITED |
			    MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;

		u = q >= 0 && (q & need) == need ? 1 : -1;
		atomic_store_explicit(&asym_usable, u, memory_order_relaxed);
	}
	return u > 0;
}

static long futex(_Atomic uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)uaddr, op, val, ts, NULL, 0);
}

/* Swap the state to AWAKE; the producer that swaps a sleeper out makes the
 * system call. Returns 1 if it did. */
static unsigned wake_now(struct shoal_doorbell *db)
{
	/* A held wake-up is made by this one: take the mark. Acquire: pairs
	 * with the release CAS in wake_mod(), so the held messages are seen by
	 * the consumer we wake; F2 then orders our state check after it, as
	 * after a commit. */
	if (shoal_load_relaxed(&db->held) != 0 &&
	    atomic_exchange_explicit(&db->held, 0, memory_order_acquire) != 0)
		shoal_fence_full();
	/* The exchange decides which producer issues the wake (the first one
	 * to swap it). Release: a producer that skipped F2 and found a sleeper
	 * that did not see the unfencing (shoal_doorbell_notify_quiet())
	 * publishes before the wake; an x86 exchange is a full fence anyway. */
	if (atomic_exchange_explicit(&db->state, DB_AWAKE, memory_order_release) == DB_AWAKE)
		return 0;
	shoal_fetch_add_relaxed(&db->wakes, 1);
	futex(&db->state, FUTEX_WAKE, INT_MAX, NULL);
	return 1;
}

void shoal_doorbell_init(struct shoal_doorbell *db)
{
	/* Relaxed: init runs before the doorbell is shared (segment R1 publishes). */
	shoal_store_relaxed(&db->state, DB_AWAKE);
	shoal_store_relaxed(&db->ready, 0);
	shoal_store_relaxed(&db->sleeps, 0);
	shoal_store_relaxed(&db->wakes, 0);
	shoal_store_relaxed(&db->held, 0);
	shoal_store_relaxed(&db->unfenced, 0);
}

void shoal_doorbell_fence(void)
{
	/* F2: pairs with F1 in shoal_doorbell_prepare(): the records published
	 * before this fence are visible to a consumer that announced sleep
	 * after the state loads that follow it, or those loads see its
	 * announcement. */
	shoal_fence_full();
}

int shoal_doorbell_asym_join(void)
{
	if (atomic_load_explicit(&asym_joined, memory_order_relaxed))
		return 0;
	if (!barrier_usable())
		return -ENOTSUP;
	if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0)
		return -errno;
	/* Relaxed: the registration is the kernel's; the flag only lets this
	 * process's own publishers skip F2 from now on. */
	atomic_store_explicit(&asym_joined, true, memory_order_relaxed);
	return 0;
}

static inline bool fence_needed(const struct shoal_doorbell *db)
{
	/* Relaxed: if this load is older than the consumer's take-back in
	 * shoal_doorbell_prepare(), the barrier it makes after the take-back
	 * orders our publish before its look at the rings (it stands for the
	 * F2 we skip); if it is newer, it sees the take-back and we fence. */
	return !atomic_load_explicit(&asym_joined, memory_order_relaxed) ||
	       shoal_load_relaxed(&db->unfenced) == 0;
}

bool shoal_doorbell_fence_needed(const struct shoal_doorbell *db)
{
	return fence_needed(db);
}

/* The bodies of the producer's calls, inline here so that the exported
 * calls made after each commit (notify, notify_mod) are one call each. */
static inline void fence_for(const struct shoal_doorbell *db)
{
	if (fence_needed(db))
		shoal_fence_full();   /* F2, as shoal_doorbell_fence() */
	else
		atomic_signal_fence(memory_order_seq_cst);   /* the compiler keeps the order */
}

void shoal_doorbell_fence_for(const struct shoal_doorbell *db)
{
	fence_for(db);
}

void shoal_doorbell_unfence(struct shoal_doorbell *db)
{
	/* Relaxed: a producer that does not see it yet fences, which is
	 * always safe; the take-back in prepare() does not depend on it. */
	if (barrier_usable() && shoal_load_relaxed(&db->unfenced) == 0)
		shoal_store_relaxed(&db->unfenced, 1);
}

void shoal_doorbell_streak(struct shoal_doorbell *db, uint32_t *streak, uint32_t n)
{
	if (*streak < SHOAL_UNFENCE_AFTER && (*streak += n) >= SHOAL_UNFENCE_AFTER)
		shoal_doorbell_unfence(db);
}

void shoal_doorbell_notify_quiet(struct shoal_doorbell *db, struct shoal_quiet *q)
{
	/* Relaxed: a hint; a sleep we miss here shows up next time. */
	uint64_t sleeps = shoal_load_relaxed(&db->sleeps);

	shoal_doorbell_notify(db);
	if (sleeps != q->sleeps) {
		q->sleeps = sleeps;
		q->count = 0;
		return;
	}
	if (++q->count < SHOAL_UNFENCE_AFTER)
		return;
	q->count = 0;
	if (!atomic_load_explicit(&asym_joined, memory_order_relaxed) ||
	    shoal_load_relaxed(&db->unfenced) != 0)
		return;
	shoal_store_relaxed(&db->unfenced, 1);
	/* Pairs with F1 in a sleeper's prepare: either its load of `unfenced`
	 * sees our store (and it makes the barrier), or our later loads of
	 * `state`, all after this fence, see its SLEEPING and wake it. */
	shoal_fence_full();
}

/*
 * Set the ready summary of a consumer that reads it: `look`, READY_SET (look
 * at every ring) or a ring's hint bit (look at the rings of that bit).
 * Relaxed: ordered by the caller's F2, which pairs with F3 in
 * shoal_doorbell_ready_take(): the consumer's take either comes after our
 * fence in the fences' order (its scan then sees our commit) or our load
 * sees its clear (and we set it again). READY_SET is stored, not or-ed in:
 * racing producers store the same value, the hints it overwrites are
 * covered by it, and the consumer's exchange keeps any store that follows
 * it. A hint is or-ed in, since other producers' hints may be there; both
 * only when the word does not say it already (a load of the line they
 * read anyway; a write once per consumer pass, not per message).
 */
static inline void mark_ready(struct shoal_doorbell *db, uint32_t look)
{
	uint32_t r = shoal_load_relaxed(&db->ready);

	if (shoal__doorbell_ready_marked(db, r, look))
		return;
	/* Release, here and below, for a caller that skipped F2: the take
	 * that reads the mark sees the commit (free on x86-64). */
	if (look != SHOAL_DOORBELL_READY_SET && !(r & (look | SHOAL_DOORBELL_READY_SET)))
		/* An RMW reads the latest word, so a hint's is never stale. */
		atomic_fetch_or_explicit(&db->ready, look, memory_order_release);
	else
		/* Clear, or shown while unfenced: without F2 our load of
		 * `ready` may be older than our commit and than the
		 * consumer's clear, so store regardless. */
		shoal_store_release(&db->ready,
				    SHOAL_DOORBELL_READY_ON | SHOAL_DOORBELL_READY_SET);
}

void shoal_doorbell_ready_on(struct shoal_doorbell *db)
{
	/* Set: a producer that loaded the word before this store did not
	 * set it; the take that follows fences before the scan. */
	shoal_store_relaxed(&db->ready, SHOAL_DOORBELL_READY_ON | SHOAL_DOORBELL_READY_SET);
}

/* shoal_doorbell_ready_take() once the summary was found not clear. */
uint32_t shoal__doorbell_ready_take_slow(struct shoal_doorbell *db)
{
	uint32_t r = shoal_exchange_relaxed(&db->ready, SHOAL_DOORBELL_READY_ON);

	/* F3: pairs with F2 before mark_ready(); see there. */
	shoal_fence_full();
	/* A word without ON was damaged or never opted in, one with a bit
	 * past the hints damaged (a pass would read no hint's list for it):
	 * look everywhere. */
	if (!(r & SHOAL_DOORBELL_READY_ON) || (r & ~SHOAL_DOORBELL_READY_ON) == 0 ||
	    (r & ~(SHOAL_DOORBELL_READY_ON | SHOAL_DOORBELL_READY_SET |
		   ((UINT32_C(4) << SHOAL_DOORBELL_READY_HINTS) - 4))) != 0)
		return SHOAL_DOORBELL_READY_SET;
	return r & ~SHOAL_DOORBELL_READY_ON;
}

static inline void wake(struct shoal_doorbell *db, uint32_t look)
{
	mark_ready(db, look);
	/* Relaxed: ordered by F2 in shoal_doorbell_fence(); the exchange below
	 * decides who makes the system call. */
	if (SHOAL_LIKELY(shoal_load_relaxed(&db->state) == DB_AWAKE))
		return;
	(void)wake_now(db);
}

void shoal_doorbell_wake(struct shoal_doorbell *db)
{
	wake(db, SHOAL_DOORBELL_READY_SET);
}

void shoal_doorbell_wake_hint(struct shoal_doorbell *db, uint32_t hint)
{
	wake(db, hint);
}

void shoal_doorbell_notify(struct shoal_doorbell *db)
{
	fence_for(db);
	wake(db, SHOAL_DOORBELL_READY_SET);
}

void shoal_wake_mod_init(struct shoal_wake_mod *m, uint64_t window_ns)
{
	uint64_t light = window_ns / 1000 * SHOAL_WAKE_LIGHT_RATE / 1000000;

	memset(m, 0, sizeof(*m));
	m->window_ns = window_ns;
	m->light = light < 1 ? 1 : light > UINT32_MAX ? UINT32_MAX : (uint32_t)light;
}

/*
 * Whether a wake-up to a sleeper may be held: the traffic is not light.
 * (A rule on the time since the last message would not do: each wake-up
 * slows the producer, so a flood would look light and stay one wake-up per
 * message.)
 */
static bool heavy(struct shoal_wake_mod *m)
{
	uint64_t now = shoal__now_ns();

	if (now - m->win_ns >= m->window_ns) {
		m->heavy = m->count > m->light;
		m->win_ns = now;
		m->count = 0;
	}
	m->count++;
	return m->heavy || m->count > m->light;
}

/* wake_mod() for a consumer found asleep: wake it now, or hold. */
static __attribute__((noinline)) int wake_mod_sleeper(struct shoal_doorbell *db,
						      struct shoal_wake_mod *m,
						      uint32_t unannounced)
{
	uint64_t zero = 0;

	if (unannounced >= SHOAL_WAKE_BATCH || m->window_ns == 0 || !heavy(m)) {
		m->wakes += wake_now(db);
		return SHOAL_WAKE_DONE;
	}
	m->held++;
	/* Relaxed load: a hint (an older mark stands for ours). Release CAS:
	 * the waker that takes the mark (acquire) sees our commit, so the
	 * consumer it wakes does. The mark is a time, never 0. */
	if (shoal_load_relaxed(&db->held) != 0 ||
	    !atomic_compare_exchange_strong_explicit(&db->held, &zero, shoal__now_ns() | 1,
						     memory_order_release, memory_order_relaxed))
		return SHOAL_WAKE_HELD;
	return SHOAL_WAKE_HELD_FIRST;
}

static inline int wake_mod(struct shoal_doorbell *db, struct shoal_wake_mod *m,
			   uint32_t unannounced, uint32_t look)
{
	mark_ready(db, look);
	/* Relaxed: ordered by F2 in shoal_doorbell_fence(), as in wake(). */
	if (SHOAL_LIKELY(shoal_load_relaxed(&db->state) == DB_AWAKE))
		return SHOAL_WAKE_DONE;
	return wake_mod_sleeper(db, m, unannounced);
}

int shoal_doorbell_wake_mod(struct shoal_doorbell *db, struct shoal_wake_mod *m,
			    uint32_t unannounced)
{
	return wake_mod(db, m, unannounced, SHOAL_DOORBELL_READY_SET);
}

int shoal_doorbell_notify_mod(struct shoal_doorbell *db, struct shoal_wake_mod *m,
			      uint32_t unannounced)
{
	fence_for(db);
	return wake_mod(db, m, unannounced, SHOAL_DOORBELL_READY_SET);
}

int shoal_doorbell_wake_mod_hint(struct shoal_doorbell *db, struct shoal_wake_mod *m,
				 uint32_t unannounced, uint32_t hint)
{
	return wake_mod(db, m, unannounced, hint);
}

int shoal_doorbell_notify_mod_hint(struct shoal_doorbell *db, struct shoal_wake_mod *m,
				   uint32_t unannounced, uint32_t hint)
{
	fence_for(db);
	return wake_mod(db, m, unannounced, hint);
}

uint64_t shoal_doorbell_wake_due(struct shoal_doorbell *db, uint64_t now, uint64_t age_ns)
{
	/* Relaxed: untrusted and advisory; the exchange below decides. */
	uint64_t held = shoal_load_relaxed(&db->held);

	if (held == 0)
		return UINT64_MAX;
	if (now - held < age_ns && held <= now)
		return held + age_ns;
	(void)wake_now(db);
	return UINT64_MAX;
}

/* A sleeper whose barrier failed: its waits are cut short, so a publish
 * that skipped F2 is found by the next look, not the next wake-up. */
static _Thread_local bool barrier_failed;
#define BARRIER_FAILED_WAIT_NS 1000000

void shoal_doorbell_prepare(struct shoal_doorbell *db)
{
	/* Relaxed store: F1 below orders it before the ring checks. */
	shoal_store_relaxed(&db->state, DB_SLEEPING);
	/* F1: pairs with F2 in shoal_doorbell_notify(). */
	shoal_fence_full();
	/* Producers may have skipped F2: take the permission back, then make
	 * every CPU that runs a joined process fence (the F2 they skipped).
	 * A producer's load of `unfenced` older than our store is then
	 * ordered before our look at the rings with its commit; a newer one
	 * sees 0 and fences. Read from shared memory, not from our own
	 * memory of setting it: an earlier incarnation may have. */
	if (SHOAL_UNLIKELY(shoal_load_relaxed(&db->unfenced) != 0)) {
		shoal_store_relaxed(&db->unfenced, 0);
		barrier_failed = membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0;
	}
}

void shoal_doorbell_cancel(struct shoal_doorbell *db)
{
	/* Relaxed: going back to AWAKE only makes producers skip the wake. */
	shoal_store_relaxed(&db->state, DB_AWAKE);
}

int shoal_doorbell_wait(struct shoal_doorbell *db, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;
	uint64_t sleeps;
	bool cut = false;
	int ret = 0;

	if (SHOAL_UNLIKELY(barrier_failed)) {
		barrier_failed = false;
		cut = timeout_ns < 0 || timeout_ns > BARRIER_FAILED_WAIT_NS;
		if (cut)
			timeout_ns = BARRIER_FAILED_WAIT_NS;
	}
	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	/* Single writer (the consumer): plain increment through relaxed ops. */
	sleeps = shoal_load_relaxed(&db->sleeps);
	shoal_store_relaxed(&db->sleeps, sleeps + 1);
	/* The kernel sleeps only if state is still SLEEPING: a notify that
	 * already swapped it to AWAKE makes this return at once (EAGAIN). */
	if (futex(&db->state, FUTEX_WAIT, DB_SLEEPING, tsp) != 0) {
		if (errno == ETIMEDOUT)
			ret = cut ? 0 : -ETIMEDOUT;   /* cut short: a spurious wake-up */
		else if (errno == EINTR)
			ret = -EINTR;
	}
	shoal_store_relaxed(&db->state, DB_AWAKE);
	return ret;
}

/*
 * Poll ready(arg) until it returns true (true), for spin_ns or until
 * `deadline` (false); *now is the last clock reading. The clock is read
 * once every 64 polls, and with `yield` the CPU offered to other threads
 * then (sched_yield()).
 */
static bool spin(bool (*ready)(void *), void *arg, uint64_t spin_ns, uint64_t deadline,
		 uint64_t *now, bool yield)
{
	uint64_t spin_end = *now + spin_ns;

	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (ready(arg))
				return true;
			shoal_cpu_relax();
		}
		*now = shoal__now_ns();
		if (*now >= spin_end || *now >= deadline)
			return false;
		if (yield)
			sched_yield();
	}
}

/*
 * The looks before a sleep: a spin of `spin_ns` (`yield`: yielding between
 * its looks), then `yield_ns` of looks that yield (router.yield; none when
 * 0). Whether ready() turned true; *now as spin() leaves it.
 */
static bool looks(bool (*ready)(void *), void *arg, uint64_t spin_ns, bool yield,
		  uint64_t yield_ns, uint64_t deadline, uint64_t *now)
{
	return spin(ready, arg, spin_ns, deadline, now, yield) ||
	       (yield_ns > 0 && *now < deadline && spin(ready, arg, yield_ns, deadline, now, true));
}

/*
 * Announce sleep, look once more, and sleep until woken or `deadline`;
 * *now is then read again. Returns 1 when ready() was true before the
 * sleep, 0 after a sleep, -EINTR.
 */
static int sleep_once(struct shoal_doorbell *db, bool (*ready)(void *), void *arg,
		      uint64_t deadline, uint64_t *now)
{
	int ret;

	shoal_doorbell_prepare(db);
	if (ready(arg)) {
		shoal_doorbell_cancel(db);
		return 1;
	}
	ret = shoal_doorbell_wait(db, deadline == UINT64_MAX ? -1 : (int64_t)(deadline - *now));
	*now = shoal__now_ns();
	return ret == -EINTR ? ret : 0;
}

/* looks(), then the sleep, until ready or the timeout. */
static int poll_wait(struct shoal_doorbell *db, uint64_t spin_ns, bool (*ready)(void *),
		     void *arg, int64_t timeout_ns, bool yield, uint64_t yield_ns)
{
	uint64_t now = shoal__now_ns();
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : now + (uint64_t)timeout_ns;

	for (;;) {
		int ret;

		if (looks(ready, arg, spin_ns, yield, yield_ns, deadline, &now))
			return 0;
		if (now >= deadline)
			return -ETIMEDOUT;
		ret = sleep_once(db, ready, arg, deadline, &now);
		if (ret != 0)
			return ret < 0 ? ret : 0;
	}
}

int shoal_doorbell_poll_wait(struct shoal_doorbell *db, uint64_t spin_ns, bool (*ready)(void *),
			     void *arg, int64_t timeout_ns)
{
	return poll_wait(db, spin_ns, ready, arg, timeout_ns, false, 0);
}

int shoal_doorbell_yield_wait(struct shoal_doorbell *db, uint64_t spin_ns, bool (*ready)(void *),
			      void *arg, int64_t timeout_ns)
{
	return poll_wait(db, spin_ns, ready, arg, timeout_ns, true, 0);
}

int shoal_doorbell_spin_yield_wait(struct shoal_doorbell *db, uint64_t spin_ns, uint64_t yield_ns,
				   bool (*ready)(void *), void *arg, int64_t timeout_ns)
{
	return poll_wait(db, spin_ns, ready, arg, timeout_ns, false, yield_ns);
}

/* A spin shorter than this is not worth its polls: the budget drops to 0. */
#define SPIN_MIN_NS 1000u

/*
 * Whether this thread was preempted since the last look: its involuntary
 * context switches grew. One system call, made only on the way to sleep,
 * which makes one anyway.
 */
static bool preempted(struct shoal_idle *st)
{
	struct rusage ru;
	bool grew;

	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return false;
	grew = ru.ru_nivcsw != st->nivcsw;
	st->nivcsw = ru.ru_nivcsw;
	return grew;
}

int shoal_doorbell_idle_wait(struct shoal_doorbell *db, struct shoal_idle *st,
			     bool (*ready)(void *), void *arg, int64_t timeout_ns)
{
	uint64_t now = shoal__now_ns();
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : now + (uint64_t)timeout_ns;

	for (;;) {
		uint64_t slept;
		bool contended;
		int ret;

		if (looks(ready, arg, st->spin_ns, false, st->yield_ns, deadline, &now))
			return 0;
		if (now >= deadline)
			return -ETIMEDOUT;
		/* The spin found nothing: spin less next time, and not at all
		 * while the CPUs are oversubscribed. */
		contended = preempted(st);
		st->spin_ns = contended || st->spin_ns / 2 < SPIN_MIN_NS ? 0 : st->spin_ns / 2;
		slept = now;
		st->streak = 0;   /* prepare takes the unfencing back */
		ret = sleep_once(db, ready, arg, deadline, &now);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		slept = now - slept;
		/* Woken sooner than a spin would have ended: spinning pays off
		 * again, unless it would steal the CPU. */
		if (slept < st->spin_max_ns && !contended)
			st->spin_ns = st->spin_max_ns;
	}
}
