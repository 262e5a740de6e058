/* SPDX-License-Identifier: MIT */
/*
 * The waker: the thread of the router that makes held wake-ups once they
 * are due (wake moderation, shm/doorbell.c and docs/design.md). Producers,
 * in any process, hold a sleeping consumer's wake-up while their traffic is
 * heavy, marking its doorbell with the time of the first hold; the waker
 * scans every mailbox doorbell of the published snapshot, wakes those held
 * for 3/4 of the deadline, and scans again a quarter deadline later, so each
 * is made within the deadline. It is a thread of its own, not a duty of the
 * dispatchers: at 100 groups it makes tens of thousands of FUTEX_WAKE calls
 * a second, which in a dispatcher took the time routing needed (routed send
 * 841 ns -> 4.7-15 us per call at 100 groups).
 *
 * Sleeping: while something is held it sleeps a quarter deadline without
 * announcing it (its doorbell stays awake, so the many first holds of a
 * flood cost their producers one load, no system call); with nothing held
 * it announces sleep, scans once more (the F1/F2 pair with a producer's
 * mark-then-ring) and sleeps until a producer's first hold rings it.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include <shoal/doorbell.h>

#include "runtime/data/dispatch.h"
#include "shm/util.h"

#define WAKER_IDLE_NS INT64_C(5000000000)  /* a safety net: a stop and a first hold ring us */

struct shoal__waker {
	struct shoal__dispatch_shared *sh;
	pthread_t thread;
};

/* Wake what is due at `now`; true if something is still held. */
static bool scan(const struct shoal__snapshot *s, uint64_t now, uint64_t age)
{
	bool held = false;

	for (uint32_t g = 0; g < s->n_groups; g++) {
		const struct shoal__snap_group *sg = &s->groups[g];

		if (!sg->used || sg->mbx == NULL)
			continue;
		for (uint32_t w = 0; w < sg->n_workers && w < SHOAL_MAX_WORKERS; w++)
			held |= shoal_doorbell_wake_due(&sg->mbx->w[w].in_db, now, age) != UINT64_MAX;
	}
	return held;
}

static void pause_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	nanosleep(&ts, NULL);
}

static void *waker_main(void *arg)
{
	struct shoal__waker *wk = arg;
	struct shoal__dispatch_shared *sh = wk->sh;
	uint64_t deadline = sh->wake_deadline_ns, age = deadline / 4 * 3;

	rcu_register_thread();
	while (!atomic_load_explicit(&sh->stopping, memory_order_relaxed)) {
		struct shoal__snapshot *s;
		bool held;

		rcu_read_lock();
		/* A1: pairs with R1 rcu_xchg_pointer() in shoal__publish(). */
		s = SHOAL__SNAP_DEREF(sh->snap);
		held = age > 0 && scan(s, shoal__now_ns(), age);
		if (!held) {
			shoal_doorbell_prepare(sh->waker_bell);
			held = age > 0 && scan(s, shoal__now_ns(), age);
			if (held)
				shoal_doorbell_cancel(sh->waker_bell);
		}
		rcu_read_unlock();
		SHOAL__SNAP_QUIESCENT(sh->snap);
		rcu_thread_offline();
		if (held)
			pause_ns(deadline / 4);
		else
			shoal_doorbell_wait(sh->waker_bell, WAKER_IDLE_NS);
		rcu_thread_online();
	}
	rcu_unregister_thread();
	return NULL;
}

int shoal__waker_start(struct shoal__dispatch_shared *sh, const struct bitmask *cpus,
		       struct shoal__waker **out)
{
	struct shoal__waker *wk = calloc(1, sizeof(*wk));
	int ret;

	if (wk == NULL)
		return -ENOMEM;
	wk->sh = sh;
	ret = shoal__thread_start(&wk->thread, cpus, waker_main, wk, "shoal-waker");
	if (ret < 0) {
		free(wk);
		return ret;
	}
	*out = wk;
	return 0;
}

void shoal__waker_stop(struct shoal__waker *wk)
{
	if (wk == NULL)
		return;
	pthread_join(wk->thread, NULL);
	free(wk);
}
