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
#include <stddef.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
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

static long futex(_Atomic uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)uaddr, op, val, ts, NULL, 0);
}

void shoal_doorbell_init(struct shoal_doorbell *db)
{
	/* Relaxed: init runs before the doorbell is shared (segment R1 publishes). */
	shoal_store_relaxed(&db->state, DB_AWAKE);
	shoal_store_relaxed(&db->sleeps, 0);
	shoal_store_relaxed(&db->wakes, 0);
}

void shoal_doorbell_fence(void)
{
	/* F2: pairs with F1 in shoal_doorbell_prepare(): the records published
	 * before this fence are visible to a consumer that announced sleep
	 * after the state loads that follow it, or those loads see its
	 * announcement. */
	shoal_fence_full();
}

void shoal_doorbell_notify(struct shoal_doorbell *db)
{
	shoal_doorbell_fence();
	shoal_doorbell_wake(db);
}

void shoal_doorbell_wake(struct shoal_doorbell *db)
{
	/* Relaxed: ordered by F2 in shoal_doorbell_fence(); the exchange below
	 * decides who makes the system call. */
	if (SHOAL_LIKELY(shoal_load_relaxed(&db->state) == DB_AWAKE))
		return;
	/* Relaxed exchange: the state word carries no data, only the decision
	 * of which producer issues the wake (the first one to swap it). */
	if (shoal_exchange_relaxed(&db->state, DB_AWAKE) == DB_SLEEPING) {
		shoal_fetch_add_relaxed(&db->wakes, 1);
		futex(&db->state, FUTEX_WAKE, INT_MAX, NULL);
	}
}

void shoal_doorbell_prepare(struct shoal_doorbell *db)
{
	/* Relaxed store: F1 below orders it before the ring checks. */
	shoal_store_relaxed(&db->state, DB_SLEEPING);
	/* F1: pairs with F2 in shoal_doorbell_notify(). */
	shoal_fence_full();
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
	int ret = 0;

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
			ret = -ETIMEDOUT;
		else if (errno == EINTR)
			ret = -EINTR;
	}
	shoal_store_relaxed(&db->state, DB_AWAKE);
	return ret;
}

int shoal_doorbell_poll_wait(struct shoal_doorbell *db, uint64_t spin_ns, bool (*ready)(void *),
			     void *arg, int64_t timeout_ns)
{
	uint64_t start = shoal__now_ns();
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : start + (uint64_t)timeout_ns;

	for (;;) {
		uint64_t now = shoal__now_ns(), spin_end = now + spin_ns;
		int ret;

		/* Bounded spin: read the clock once every 64 polls. */
		for (;;) {
			for (int i = 0; i < 64; i++) {
				if (ready(arg))
					return 0;
				shoal_cpu_relax();
			}
			now = shoal__now_ns();
			if (now >= spin_end || now >= deadline)
				break;
		}
		if (now >= deadline)
			return -ETIMEDOUT;
		shoal_doorbell_prepare(db);
		if (ready(arg)) {
			shoal_doorbell_cancel(db);
			return 0;
		}
		ret = shoal_doorbell_wait(db, deadline == UINT64_MAX ? -1 :
					  (int64_t)(deadline - now));
		if (ret == -EINTR)
			return ret;
	}
}
