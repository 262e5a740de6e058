/* SPDX-License-Identifier: MIT */
/*
 * Doorbells across real processes. The race case makes a consumer go to
 * sleep (spin budget 0) for every single message while the producer rings
 * right around that moment; a lost wake-up shows as a wait that runs into
 * its one-second timeout while the message is already there.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/segment.h>

#include "tests/testutil.h"

struct race {
	struct shoal_doorbell db;
	_Alignas(64) _Atomic uint64_t sent;   /* messages published by the producer */
	_Alignas(64) _Atomic uint64_t acked;  /* messages the consumer has seen */
	_Atomic uint64_t lost;                /* waits that timed out with a message there */
	_Atomic uint64_t unfenced_sends;      /* publishes that skipped F2 */
	uint64_t rounds;
	int burst;                            /* producer does not wait for acks */
	int unfenced;                         /* the consumer polls, then unfences, as a
					       * streaming one does (shm/doorbell.h) */
	int quiet;                            /* the producer unfences after quiet notifies
					       * (shoal_doorbell_notify_quiet()); the consumer
					       * sleeps for one message in QUIET_EVERY */
};

#define QUIET_EVERY (SHOAL_UNFENCE_AFTER + 100)

static struct shoal_seg seg;

/* `size` zeroed bytes in a new segment `name` that forked children share
 * (race_free() removes it). */
static void *shared_new(const char *name, size_t size)
{
	uint64_t off;

	test_shm_dir_make(name);
	assert_int_equal(shoal_seg_create(&seg, name, 1 << 16, NULL, NULL), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "race", size, 64, &off), 0);
	return shoal_seg_ptr(&seg, off, size, 64);
}

static struct race *race_new(const char *name, uint64_t rounds, int burst)
{
	struct race *r = shared_new(name, sizeof(*r));

	shoal_doorbell_init(&r->db);
	r->rounds = rounds;
	r->burst = burst;
	return r;
}

static void race_free(void)
{
	shoal_seg_detach(&seg);
	test_shm_dir_remove();
}

struct waiter {
	struct race *r;
	uint64_t want;
};

static bool arrived(void *arg)
{
	struct waiter *w = arg;

	return atomic_load_explicit(&w->r->sent, memory_order_acquire) >= w->want;
}

static int race_consumer(void *arg)
{
	struct race *r = arg;
	struct waiter w = { r, 0 };
	uint64_t seed = 7;

	test_pin(1);
	while (atomic_load(&r->acked) < r->rounds) {
		w.want = atomic_load(&r->acked) + 1;
		if (r->quiet && w.want % QUIET_EVERY != 0) {
			while (!arrived(&w))
				__asm__ __volatile__("" ::: "memory");
			atomic_store(&r->acked, atomic_load(&r->sent));
			continue;
		}
		if (r->unfenced) {
			/* Poll a varied while with the producers unfenced: the
			 * prepare below takes it back at varied moments. */
			shoal_doorbell_unfence(&r->db);
			for (uint64_t d = test_rand(&seed) % 400; d > 0 && !arrived(&w); d--)
				__asm__ __volatile__("" ::: "memory");
		}
		for (;;) {
			shoal_doorbell_prepare(&r->db);
			if (arrived(&w)) {
				shoal_doorbell_cancel(&r->db);
				break;
			}
			int ret = shoal_doorbell_wait(&r->db, 1000000000);

			if (ret == -ETIMEDOUT && arrived(&w))
				atomic_fetch_add(&r->lost, 1);
			if (arrived(&w))
				break;
		}
		atomic_store(&r->acked, atomic_load(&r->sent));
	}
	return 0;
}

/* Publish message i and notify, after a varied delay (the moment of the
 * publish against the consumer's own steps is what the races are about). */
static bool publish_jittered(_Atomic uint64_t *sent, struct shoal_doorbell *db, uint64_t i,
			     uint64_t *seed, struct shoal_quiet *quiet)
{
	bool unfenced;

	for (uint64_t d = test_rand(seed) % 200; d > 0; d--)
		__asm__ __volatile__("" ::: "memory");
	atomic_store_explicit(sent, i, memory_order_release);
	unfenced = !shoal_doorbell_fence_needed(db);
	if (quiet != NULL)
		shoal_doorbell_notify_quiet(db, quiet);
	else
		shoal_doorbell_notify(db);
	return unfenced;
}

/*
 * Wait until the consumer has seen message i - 1 and slept once (10 s at
 * most): done once a run, before message SLEEP_AT (a quiet run's consumer
 * sleeps only for every QUIET_EVERY-th: before that one), so that every run tries
 * a wake-up however busy the machine. Left to chance, a consumer that the
 * scheduler let run only late found a message each time it looked, never
 * slept, and the run proved nothing (CI, a loaded machine, ASan: "consumer
 * sleeps 0").
 */
#define SLEEP_AT 64u

static void await_sleep(struct race *r, uint64_t i)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (atomic_load(&r->acked) >= i - 1 && atomic_load(&r->db.sleeps) > 0)
			return;
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 10);
}

static int race_producer(void *arg)
{
	struct race *r = arg;
	struct shoal_quiet quiet = { 0, 0 };
	uint64_t seed = 3;

	test_pin(0);
	if ((r->unfenced || r->quiet) && shoal_doorbell_asym_join() != 0)
		return 1;
	for (uint64_t i = 1; i <= r->rounds; i++) {
		/* The message a quiet consumer sleeps for (and one in 64 of a
		 * flood to an unfencing one): often late enough that it is
		 * asleep, sometimes right at its prepare. A consumer that
		 * never slept would leave the race untried. */
		bool pause = r->quiet ? i % QUIET_EVERY == 0 : r->unfenced && r->burst && i % 64 == 0;

		for (uint64_t d = pause ? test_rand(&seed) % 1000000 : 0; d > 0; d--)
			__asm__ __volatile__("" ::: "memory");
		if (i == (r->quiet ? QUIET_EVERY : SLEEP_AT))
			await_sleep(r, i);
		if (publish_jittered(&r->sent, &r->db, i, &seed, r->quiet ? &quiet : NULL))
			atomic_fetch_add_explicit(&r->unfenced_sends, 1, memory_order_relaxed);
		if (!r->burst) {
			while (atomic_load(&r->acked) < i)
				sched_yield();
		} else if (test_rand(&seed) % 8 == 0) {
			sched_yield();
		}
	}
	return 0;
}

static void run_race(struct race *r)
{
	pid_t cons = test_spawn(race_consumer, r, 0);
	pid_t prod = test_spawn(race_producer, r, 0);

	test_assert_exited(test_wait_pid(prod, 120000), 0);
	test_assert_exited(test_wait_pid(cons, 120000), 0);
	print_message("rounds %llu, consumer sleeps %llu, wake calls %llu\n",
		      (unsigned long long)r->rounds,
		      (unsigned long long)atomic_load(&r->db.sleeps),
		      (unsigned long long)atomic_load(&r->db.wakes));
	assert_int_equal(atomic_load(&r->lost), 0);
	assert_int_equal(atomic_load(&r->acked), r->rounds);
	/* The race really was exercised: the consumer slept and was woken. */
	assert_true(atomic_load(&r->db.sleeps) > 0);
	assert_true(atomic_load(&r->db.wakes) > 0);
	if (r->unfenced || r->quiet) {
		print_message("publishes without F2: %llu\n",
			      (unsigned long long)atomic_load(&r->unfenced_sends));
		assert_true(atomic_load(&r->unfenced_sends) > 0);
	}
}

static void doorbell_no_lost_wakeup_ping_pong(void **state)
{
	(void)state;
	run_race(race_new("dbping", test_scale(20000), 0));
	race_free();
}

static void doorbell_no_lost_wakeup_burst(void **state)
{
	(void)state;
	run_race(race_new("dbburst", test_scale(200000), 1));
	race_free();
}

/* The same races with the consumer taking back an unfencing at each sleep,
 * so producers publish without F2 right up to its barrier. */
static void run_unfenced_race(const char *name, uint64_t rounds, int burst, int quiet)
{
	struct race *r;

	if (shoal_doorbell_asym_join() != 0) {
		print_message("SKIP: publishing without F2 is off here (no membarrier GLOBAL_EXPEDITED, or ThreadSanitizer)\n");
		skip();
	}
	r = race_new(name, rounds, burst);
	r->unfenced = !quiet;
	r->quiet = quiet;
	run_race(r);
	race_free();
}

static void doorbell_unfenced_no_lost_wakeup_ping_pong(void **state)
{
	(void)state;
	run_unfenced_race("dbuping", test_scale(20000), 0, 0);
}

static void doorbell_unfenced_no_lost_wakeup_burst(void **state)
{
	(void)state;
	run_unfenced_race("dbuburst", test_scale(200000), 1, 0);
}

/* The producer unfences the doorbell itself after quiet notifies; the
 * consumer sleeps for one message in QUIET_EVERY, right after a quiet run. */
static void doorbell_quiet_publisher_no_lost_wakeup(void **state)
{
	(void)state;
	run_unfenced_race("dbquiet", test_scale(150) * QUIET_EVERY, 0, 1);
}

/* The ready summary: off until the consumer opts in; set by notify and
 * wake_mod after it did; a take clears it. */
static void doorbell_ready_summary_set_by_producers_taken_by_consumer(void **state)
{
	struct shoal_doorbell db;
	struct shoal_wake_mod m;

	(void)state;
	shoal_doorbell_init(&db);
	shoal_wake_mod_init(&m, 0);
	shoal_doorbell_notify(&db);
	assert_int_equal(atomic_load(&db.ready), 0);   /* nobody reads it: left alone */
	shoal_doorbell_ready_on(&db);
	assert_true(shoal_doorbell_ready_take(&db));    /* opting in asks for a first scan */
	assert_false(shoal_doorbell_ready_take(&db));
	shoal_doorbell_notify(&db);
	shoal_doorbell_notify(&db);
	assert_true(shoal_doorbell_ready_take(&db));
	assert_false(shoal_doorbell_ready_take(&db));
	shoal_doorbell_fence();
	assert_int_equal(shoal_doorbell_wake_mod(&db, &m, 1), SHOAL_WAKE_DONE);
	assert_true(shoal_doorbell_ready_take(&db));
	/* Garbage in the word costs a scan, never a missed one. */
	atomic_store(&db.ready, 0xdeadbeef);
	assert_true(shoal_doorbell_ready_take(&db));
	assert_false(shoal_doorbell_ready_take(&db));
}

/* Hints: a take answers the hints set since the last one, or READY_SET
 * (every ring) when a producer without a hint published too. */
static void doorbell_ready_hints_name_the_rings_published_to(void **state)
{
	struct shoal_doorbell db;
	struct shoal_wake_mod m;
	uint32_t a = shoal_doorbell_ready_hint(3), b = shoal_doorbell_ready_hint(40);

	(void)state;
	assert_int_not_equal(a, b);
	assert_int_equal(shoal_doorbell_ready_hint(3 + SHOAL_DOORBELL_READY_HINTS), a);
	for (uint32_t k = 0; k < 2 * SHOAL_DOORBELL_READY_HINTS; k++) {
		uint32_t h = shoal_doorbell_ready_hint(k);

		assert_int_equal(h & (h - 1), 0);   /* one bit */
		assert_true(h > SHOAL_DOORBELL_READY_SET);
	}
	shoal_doorbell_init(&db);
	shoal_wake_mod_init(&m, 0);
	shoal_doorbell_fence();
	shoal_doorbell_wake_hint(&db, a);
	assert_int_equal(atomic_load(&db.ready), 0);   /* nobody reads it: left alone */
	shoal_doorbell_ready_on(&db);
	assert_int_equal(shoal_doorbell_ready_take(&db), SHOAL_DOORBELL_READY_SET);
	assert_int_equal(shoal_doorbell_ready_take(&db), 0);
	assert_int_equal(shoal_doorbell_notify_mod_hint(&db, &m, 1, a), SHOAL_WAKE_DONE);
	assert_int_equal(shoal_doorbell_ready_take(&db), a);
	assert_int_equal(shoal_doorbell_notify_mod_hint(&db, &m, 1, a), SHOAL_WAKE_DONE);
	shoal_doorbell_fence();
	assert_int_equal(shoal_doorbell_wake_mod_hint(&db, &m, 1, b), SHOAL_WAKE_DONE);
	shoal_doorbell_wake_hint(&db, b);
	assert_int_equal(shoal_doorbell_ready_take(&db), a | b);
	assert_int_equal(shoal_doorbell_ready_take(&db), 0);
	/* A publish without a hint means every ring, whatever hints came
	 * before or after it. */
	shoal_doorbell_notify_mod_hint(&db, &m, 1, a);
	shoal_doorbell_notify(&db);
	shoal_doorbell_notify_mod_hint(&db, &m, 1, b);
	assert_int_equal(shoal_doorbell_ready_take(&db), SHOAL_DOORBELL_READY_SET);
	assert_int_equal(shoal_doorbell_ready_take(&db), 0);
	/* A producer allowed to skip F2 whose hint is set already stores
	 * READY_SET: its load may predate the consumer's clear. */
	shoal_doorbell_notify_mod_hint(&db, &m, 1, a);
	atomic_store(&db.unfenced, 1);
	shoal_doorbell_wake_hint(&db, a);
	assert_int_equal(shoal_doorbell_ready_take(&db), SHOAL_DOORBELL_READY_SET);
	/* A word not opted in (damaged) is a look at every ring. */
	atomic_store(&db.ready, 0xdeadbee0);
	assert_int_equal(shoal_doorbell_ready_take(&db), SHOAL_DOORBELL_READY_SET);
}

/*
 * Across processes, a consumer that looks only at the summary (a scan
 * after each take that says so) sees every publish: the producer waits
 * for each to be seen, so one lost mark stalls the exchange for good.
 */
struct summary_race {
	struct shoal_doorbell db;
	_Alignas(64) _Atomic uint64_t sent;
	_Alignas(64) _Atomic uint64_t seen;
	_Atomic uint32_t stalled;
	uint64_t rounds;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define SUMMARY_STALL_NS (30 * UINT64_C(1000000000))

static int summary_consumer(void *arg)
{
	struct summary_race *r = arg;
	uint64_t start = now_ns();

	test_pin(1);
	while (atomic_load(&r->seen) < r->rounds) {
		if (shoal_doorbell_ready_take(&r->db))
			atomic_store(&r->seen, atomic_load_explicit(&r->sent, memory_order_acquire));
		else if (now_ns() - start > SUMMARY_STALL_NS) {
			atomic_store(&r->stalled, 1);
			return 1;
		}
	}
	return 0;
}

static int summary_producer(void *arg)
{
	struct summary_race *r = arg;
	uint64_t seed = test_seed(), start = now_ns();

	test_pin(0);
	for (uint64_t i = 1; i <= r->rounds; i++) {
		publish_jittered(&r->sent, &r->db, i, &seed, NULL);
		while (atomic_load(&r->seen) < i)
			if (now_ns() - start > SUMMARY_STALL_NS || atomic_load(&r->stalled))
				return 1;
	}
	return 0;
}

static void doorbell_ready_summary_never_hides_a_publish(void **state)
{
	struct summary_race *r;
	pid_t cons, prod;

	(void)state;
	r = shared_new("dbsum", sizeof(*r));
	shoal_doorbell_init(&r->db);
	shoal_doorbell_ready_on(&r->db);
	r->rounds = test_scale(200000);
	cons = test_spawn(summary_consumer, r, 0);
	prod = test_spawn(summary_producer, r, 0);
	test_assert_exited(test_wait_pid(prod, 120000), 0);
	test_assert_exited(test_wait_pid(cons, 120000), 0);
	assert_int_equal(atomic_load(&r->stalled), 0);
	assert_int_equal(atomic_load(&r->seen), r->rounds);
	race_free();
}

/*
 * Hints across processes: two producers, each with its own hint, and a
 * consumer that looks only at what its takes name (a producer's counter
 * when its hint or READY_SET came): each producer waits for each publish to
 * be seen, so one lost or wrong hint stalls it for good. Only the opt-in's
 * take may say READY_SET: a hint that fell back to it would pass unseen.
 */
struct hint_race {
	struct shoal_doorbell db;
	_Alignas(64) _Atomic uint64_t sent[2];
	_Alignas(64) _Atomic uint64_t seen[2];
	_Atomic uint32_t stalled;
	_Atomic uint64_t set_takes;
	uint32_t hint[2];
	uint64_t rounds;
};

static struct hint_race *hint_race_of;

static int hint_consumer(void *arg)
{
	struct hint_race *r = arg;
	uint64_t start = now_ns();

	test_pin(1);
	while (atomic_load(&r->seen[0]) < r->rounds || atomic_load(&r->seen[1]) < r->rounds) {
		uint32_t w = shoal_doorbell_ready_take(&r->db);

		if (w & SHOAL_DOORBELL_READY_SET)
			atomic_fetch_add(&r->set_takes, 1);
		for (int k = 0; k < 2; k++)
			if (w & (r->hint[k] | SHOAL_DOORBELL_READY_SET))
				atomic_store(&r->seen[k], atomic_load_explicit(&r->sent[k],
									      memory_order_acquire));
		if (w != 0)
			continue;
		if (now_ns() - start > SUMMARY_STALL_NS) {
			atomic_store(&r->stalled, 1);
			return 1;
		}
		sched_yield();   /* three processes on two CPUs */
	}
	return 0;
}

static int hint_producer(int k)
{
	struct hint_race *r = hint_race_of;
	struct shoal_wake_mod m;
	uint64_t seed = test_seed() + (uint64_t)k, start = now_ns();

	shoal_wake_mod_init(&m, 0);
	test_pin(k);
	for (uint64_t i = 1; i <= r->rounds; i++) {
		for (uint64_t d = test_rand(&seed) % 200; d > 0; d--)
			__asm__ __volatile__("" ::: "memory");
		atomic_store_explicit(&r->sent[k], i, memory_order_release);
		if (i % 2) {
			shoal_doorbell_notify_mod_hint(&r->db, &m, 1, r->hint[k]);
		} else {
			shoal_doorbell_fence();
			shoal_doorbell_wake_hint(&r->db, r->hint[k]);
		}
		while (atomic_load(&r->seen[k]) < i) {
			if (now_ns() - start > SUMMARY_STALL_NS || atomic_load(&r->stalled))
				return 1;
			sched_yield();
		}
	}
	return 0;
}

static int hint_producer0(void *arg)
{
	(void)arg;
	return hint_producer(0);
}

static int hint_producer1(void *arg)
{
	(void)arg;
	return hint_producer(1);
}

static void doorbell_ready_hints_never_hide_a_publish(void **state)
{
	struct hint_race *r;
	pid_t cons, p0, p1;
	int st[3];

	(void)state;
	r = shared_new("dbhint", sizeof(*r));
	shoal_doorbell_init(&r->db);
	shoal_doorbell_ready_on(&r->db);
	r->hint[0] = shoal_doorbell_ready_hint(1);
	r->hint[1] = shoal_doorbell_ready_hint(2);
	r->rounds = test_scale(100000);
	hint_race_of = r;
	cons = test_spawn(hint_consumer, r, 0);
	p0 = test_spawn(hint_producer0, NULL, 0);
	p1 = test_spawn(hint_producer1, NULL, 0);
	st[0] = test_wait_pid(p0, 120000);
	st[1] = test_wait_pid(p1, 120000);
	st[2] = test_wait_pid(cons, 120000);
	printf("rounds %llu, seen %llu and %llu of sent %llu and %llu, takes of every ring %llu\n",
	       (unsigned long long)r->rounds, (unsigned long long)atomic_load(&r->seen[0]),
	       (unsigned long long)atomic_load(&r->seen[1]),
	       (unsigned long long)atomic_load(&r->sent[0]),
	       (unsigned long long)atomic_load(&r->sent[1]),
	       (unsigned long long)atomic_load(&r->set_takes));
	for (int i = 0; i < 3; i++)
		test_assert_exited(st[i], 0);
	assert_int_equal(atomic_load(&r->stalled), 0);
	assert_int_equal(atomic_load(&r->seen[0]), r->rounds);
	assert_int_equal(atomic_load(&r->seen[1]), r->rounds);
	assert_int_equal(atomic_load(&r->set_takes), 1);
	race_free();
}

/* A producer that notifies an awake consumer makes no system call. */
static void doorbell_notify_skips_wake_when_awake(void **state)
{
	struct shoal_doorbell db;

	(void)state;
	shoal_doorbell_init(&db);
	for (int i = 0; i < 1000; i++)
		shoal_doorbell_notify(&db);
	assert_int_equal(atomic_load(&db.wakes), 0);
	/* After an announced sleep, exactly one of several notifies wakes. */
	shoal_doorbell_prepare(&db);
	shoal_doorbell_notify(&db);
	shoal_doorbell_notify(&db);
	assert_int_equal(atomic_load(&db.wakes), 1);
	/* The notify came first: the wait returns at once, not after 10 s. */
	assert_int_equal(shoal_doorbell_wait(&db, 10000000000), 0);
}

static void doorbell_wait_times_out(void **state)
{
	struct shoal_doorbell db;

	(void)state;
	shoal_doorbell_init(&db);
	shoal_doorbell_prepare(&db);
	assert_int_equal(shoal_doorbell_wait(&db, 1000000), -ETIMEDOUT);
	assert_int_equal(atomic_load(&db.sleeps), 1);
}

static bool never(void *arg)
{
	(void)arg;
	return false;
}

static void doorbell_poll_wait_times_out_after_spinning(void **state)
{
	struct shoal_doorbell db;

	(void)state;
	shoal_doorbell_init(&db);
	assert_int_equal(shoal_doorbell_poll_wait(&db, 1000, never, NULL, 5000000), -ETIMEDOUT);
	assert_true(atomic_load(&db.sleeps) >= 1);
}

static bool on_third_look(void *arg)
{
	unsigned *looks = arg;

	return ++*looks >= 3;
}

/* The yielding wait keeps poll_wait()'s contract: what turns ready during
 * its spin is found with no sleep, and a wait for nothing spins, sleeps
 * and times out. */
static void doorbell_yield_wait_finds_in_its_spin_or_sleeps(void **state)
{
	struct shoal_doorbell db;
	unsigned looks = 0;

	(void)state;
	shoal_doorbell_init(&db);
	assert_int_equal(shoal_doorbell_yield_wait(&db, 1000000, on_third_look, &looks,
						   5000000000), 0);
	assert_int_equal(looks, 3);
	assert_int_equal(atomic_load(&db.sleeps), 0);
	assert_int_equal(shoal_doorbell_yield_wait(&db, 1000, never, NULL, 5000000), -ETIMEDOUT);
	assert_true(atomic_load(&db.sleeps) >= 1);
}

static bool on_look_200(void *arg)
{
	unsigned *looks = arg;

	return ++*looks >= 200;
}

/* A wait with no spin (its 64 looks) and `yield_ns` of yielding looks. */
typedef int (*yielding_wait_fn)(struct shoal_doorbell *db, uint64_t yield_ns,
				bool (*ready)(void *), void *arg, int64_t timeout_ns);

static int idle_wait_of(struct shoal_doorbell *db, uint64_t yield_ns, bool (*ready)(void *),
			void *arg, int64_t timeout_ns)
{
	struct shoal_idle st = { .spin_max_ns = 0, .spin_ns = 0, .yield_ns = yield_ns };

	return shoal_doorbell_idle_wait(db, &st, ready, arg, timeout_ns);
}

static int spin_yield_wait_of(struct shoal_doorbell *db, uint64_t yield_ns,
			      bool (*ready)(void *), void *arg, int64_t timeout_ns)
{
	return shoal_doorbell_spin_yield_wait(db, 0, yield_ns, ready, arg, timeout_ns);
}

/*
 * A wait that looks again after its spin, yielding, for yield_ns: what
 * turns ready there is found with no sleep (a spin of 0 makes 64 looks,
 * fewer than 200), and without it the same wait sleeps. A wait for
 * nothing still sleeps once its looks are over.
 */
static void assert_looks_past_its_spin_then_sleeps(yielding_wait_fn wait)
{
	struct shoal_doorbell db;
	unsigned looks = 0;

	shoal_doorbell_init(&db);
	assert_int_equal(wait(&db, 1000000000, on_look_200, &looks, 5000000000), 0);
	assert_int_equal(looks, 200);
	assert_int_equal(atomic_load(&db.sleeps), 0);
	looks = 0;
	assert_int_equal(wait(&db, 0, on_look_200, &looks, 2000000), -ETIMEDOUT);
	assert_true(looks < 200);
	assert_true(atomic_load(&db.sleeps) >= 1);
	shoal_doorbell_init(&db);
	assert_int_equal(wait(&db, 5000000, never, NULL, 200000000), -ETIMEDOUT);
	assert_true(atomic_load(&db.sleeps) >= 1);
}

/* router.yield in a group's idle poll, and in its sends' and requests'
 * waits. */
static void doorbell_idle_and_spin_yield_waits_yield_after_their_spin(void **state)
{
	(void)state;
	assert_looks_past_its_spin_then_sleeps(idle_wait_of);
	assert_looks_past_its_spin_then_sleeps(spin_yield_wait_of);
}

static int sleeper_main(void *arg)
{
	struct race *r = arg;

	shoal_doorbell_prepare(&r->db);
	return shoal_doorbell_wait(&r->db, 30000000000) == 0 ? 0 : 1;
}

/*
 * One fence, then wake: what a producer ringing many doorbells does. The
 * sleeper counts its sleep before entering the futex; a wake that comes
 * before it is in finds the state AWAKE and the futex returns at once, so
 * the child ends well before its 30 s either way.
 */
static void doorbell_fence_then_wake_wakes_a_sleeper_in_another_process(void **state)
{
	struct race *r = race_new("dbwake", 0, 0);
	pid_t pid;

	(void)state;
	shoal_doorbell_fence();
	shoal_doorbell_wake(&r->db);   /* awake: nothing to do */
	assert_int_equal(atomic_load(&r->db.wakes), 0);
	pid = test_spawn(sleeper_main, r, 0);
	for (int i = 0; atomic_load(&r->db.sleeps) == 0; i++) {
		assert_true(i < 30000);
		usleep(1000);
	}
	shoal_doorbell_fence();
	shoal_doorbell_wake(&r->db);
	test_assert_exited(test_wait_pid(pid, 20000), 0);
	assert_int_equal(atomic_load(&r->db.wakes), 1);
	assert_int_equal(atomic_load(&r->db.state), SHOAL_DOORBELL_AWAKE);
	race_free();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(doorbell_notify_skips_wake_when_awake),
		cmocka_unit_test(doorbell_ready_summary_set_by_producers_taken_by_consumer),
		cmocka_unit_test(doorbell_ready_summary_never_hides_a_publish),
		cmocka_unit_test(doorbell_ready_hints_name_the_rings_published_to),
		cmocka_unit_test(doorbell_ready_hints_never_hide_a_publish),
		cmocka_unit_test(doorbell_wait_times_out),
		cmocka_unit_test(doorbell_poll_wait_times_out_after_spinning),
		cmocka_unit_test(doorbell_yield_wait_finds_in_its_spin_or_sleeps),
		cmocka_unit_test(doorbell_idle_and_spin_yield_waits_yield_after_their_spin),
		cmocka_unit_test(doorbell_fence_then_wake_wakes_a_sleeper_in_another_process),
		cmocka_unit_test(doorbell_no_lost_wakeup_ping_pong),
		cmocka_unit_test(doorbell_no_lost_wakeup_burst),
		cmocka_unit_test(doorbell_unfenced_no_lost_wakeup_ping_pong),
		cmocka_unit_test(doorbell_unfenced_no_lost_wakeup_burst),
		cmocka_unit_test(doorbell_quiet_publisher_no_lost_wakeup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
