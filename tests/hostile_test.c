/* SPDX-License-Identifier: MIT */
/*
 * Hostile memory on live segments (DESIGN invariant 10): while producers
 * send, a process writes garbage at random moments into a victim consumer's
 * inbound ring indices and record lengths, and into a victim producer's
 * uplink indices, in their mailbox files. The router (this process) must
 * survive; the other consumers must receive exactly what was sent to them
 * (less what the victim producer's condemned uplinks held, counted); the
 * victim consumer must receive every message not counted as lost or
 * dropped; `shoal stat` must say DAMAGED and exit 1; and a new process of
 * the victim receives everything sent to it (less what garbage its old
 * process never read back counted, as lost). Groups are forked children.
 *
 * A second case builds one such garbage write exactly: a consumer's head
 * moved forward to its tail while the consumer is stopped, so that the
 * producer overwrites a whole ring's worth it never read.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/ring.h>
#include <shoal/router.h>

#include "runtime/layout.h"
#include "shm/ring_layout.h"
#include "shm/segment_layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

#define STORM_MS 15000
#define BATCH_N 4000u
#define WAIT_MS 60000
#define HOSTILE 7            /* results slot of the hostile process */
/* Records one ring holds (rtutil's 64 KiB inbound and uplink rings, a
 * record header, an envelope and a struct msg each). */
#define RING_RECORDS \
	((uint64_t)(64u * 1024) / (8u + sizeof(struct shoal_envelope) + sizeof(struct msg)))

enum { IN_HEAD, IN_TAIL, IN_LEN, UP_HEAD, UP_TAIL, N_KINDS };

static const struct rt_damage no_damage;   /* a baseline: counted from the start */

static const char *const kind_names[N_KINDS] = {
	"inbound head", "inbound tail", "record length", "uplink head", "uplink tail",
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* One garbage write of kind `k` into `ring` (or the ring that replaced it)
 * of group `group`'s mailbox. */
static void garble(const char *group, const char *ring, unsigned k)
{
	char mbx[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal_seg_region r = { 0 };
	struct shoal__ring *q;

	if (shoal__name_mailbox(mbx, rt_sysname, group) < 0 ||
	    shoal_seg_attach(&seg, mbx, 0, NULL) < 0)
		return;
	/* The ring in service: `ring`, or its latest replacement ring.rN. */
	if (shoal_seg_find(&seg, SHOAL_SEG_KIND_RING, ring, &r) == 0) {
		char rn[SHOAL_SEG_REGION_NAME_MAX];
		struct shoal_seg_region x;

		for (unsigned gen = 1; gen < 256; gen++) {
			snprintf(rn, sizeof(rn), "%s.r%u", ring, gen);
			if (shoal_seg_find(&seg, SHOAL_SEG_KIND_RING, rn, &x) == 0)
				r = x;
		}
	}
	if (r.len > 0 && (q = shoal_seg_ptr(&seg, r.off, r.len, 128)) != NULL &&
	    q->capacity > 0 && (q->capacity & (q->capacity - 1)) == 0) {
		uint32_t head = atomic_load(&q->head), tail = atomic_load(&q->tail);
		uint32_t bad = 0x7fffff00;

		if (k == IN_HEAD || k == UP_HEAD)          /* the reader ahead of the writer */
			atomic_store(&q->head, tail + 64);
		else if (k == IN_TAIL || k == UP_TAIL)     /* more than the ring holds */
			atomic_store(&q->tail, head + q->capacity + 8);
		else
			memcpy((unsigned char *)q + SHOAL__RING_DATA_OFF + (head & (q->capacity - 1)),
			       &bad, sizeof(bad));
		atomic_fetch_add(&rt_res->per_actor[HOSTILE][k], 1);
	}
	shoal_seg_detach(&seg);
}

struct hostile {
	uint64_t seed;
	int victim, vp;   /* group ids */
};

/* Whether the router has seen damage in both victims' rings yet. */
static bool both_damaged(const struct hostile *h)
{
	struct rt_damage dv, dp;

	rt_damage_of(h->victim, &dv);
	rt_damage_of(h->vp, &dp);
	return dv.damaged >= 1 && dv.replaced >= 1 && dp.damaged >= 1 && dp.replaced >= 1;
}

/*
 * The hostile process: a garbage write every 0.2-0.7 s for STORM_MS, and on
 * (up to STORM_MS more) until both victims had a write detected. A write is
 * not always seen: the ring's rightful writer may store over it first (a
 * forged head before the consumer's next release, a forged tail before the
 * producer's next commit), which heals it, and how often depends on timing.
 */
static int hostile_main(void *arg)
{
	struct hostile h = *(const struct hostile *)arg;
	uint64_t seed = h.seed, start = now_ms();

	while (now_ms() - start < STORM_MS ||
	       (now_ms() - start < 2 * STORM_MS && !both_damaged(&h))) {
		unsigned k = (unsigned)(test_rand(&seed) % N_KINDS);
		char ring[32];

		usleep(200000 + (useconds_t)(test_rand(&seed) % 500000));
		if (k <= IN_LEN)
			snprintf(ring, sizeof(ring), "in.%u.d0", (unsigned)(test_rand(&seed) % 2));
		else
			snprintf(ring, sizeof(ring), "up.0");
		garble(k <= IN_LEN ? "victim" : "vp", ring, k);
	}
	return 0;
}

/*
 * A batch from each producer. A vp process that finds its uplink garbled at
 * attach fails (exit 10), its uplink condemned; like a supervisor, start it
 * again: the router has given it a new uplink. Returns the attach failures.
 */
static unsigned send_batch(struct child *pa, struct child *vp)
{
	pid_t a = test_spawn(rt_producer_main, pa, sizeof(*pa)),
	      v = test_spawn(rt_producer_main, vp, sizeof(*vp));
	unsigned failed = 0;
	int st;

	test_assert_exited(test_wait_pid(a, 120000), 0);
	while ((st = test_wait_pid(v, 120000)) != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 10 &&
	       failed < 20) {
		failed++;
		usleep(50000);
		v = test_spawn(rt_producer_main, vp, sizeof(*vp));
	}
	test_assert_exited(st, 0);
	return failed;
}

/* Declare consumer group `c`, to which every ping goes. Returns its id. */
static int declare_consumer(const struct child *c)
{
	int id = rt_declare(c->name, c->workers, c->actors);

	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	return id;
}

/* What damage counted against the copies for a consumer: what group `id`
 * counted as lost, plus (`own`, for the ring owner itself) the copies the
 * dispatcher dropped for its rings, since `base`. */
static uint64_t counted(int id, bool own, const struct rt_damage *base)
{
	struct rt_damage d;

	if (id < 0)
		return 0;
	rt_damage_of(id, &d);
	return d.lost - base->lost + (own ? d.dropped_corrupt - base->dropped_corrupt : 0);
}

/*
 * Wait until count[child] + what damage counted reaches `want`, then
 * require it: exactly, or at most `excess` over. Counted is re-read each
 * time: the router counts a condemned ring once no dispatcher reads it any
 * more, which may be after the traffic ended. `victim` is the consumer's own
 * group if its rings were damaged (from `vbase` on), `producer` a damaged
 * sender's (its condemned uplinks' records reached no consumer); -1 for none.
 * Garbage that still reads as valid indices (a head moved back, a length
 * that spans several records) cannot be told from traffic: the ring's reader
 * (a worker, or the dispatcher for an uplink, whose copies reach every
 * consumer) may take records again, or count as lost records it also passed
 * on, at most a ring's worth per garbage write. It never falls short:
 * nothing is lost uncounted.
 */
static void expect_accounted(int child, uint64_t want, int victim, const struct rt_damage *vbase,
			     int producer, uint64_t excess)
{
	uint64_t got = 0, done = 0;

	for (int i = 0; i < WAIT_MS; i++) {
		done = counted(victim, true, vbase) + counted(producer, false, &no_damage);
		got = atomic_load(&rt_res->count[child]) + done;
		if (got >= want)
			break;
		usleep(1000);
	}
	usleep(200000);   /* nothing more arrives */
	done = counted(victim, true, vbase) + counted(producer, false, &no_damage);
	got = atomic_load(&rt_res->count[child]) + done;
	if (got > want && got - want <= excess)
		print_message("child %d: %llu over what was sent (at most %llu allowed)\n", child,
			      (unsigned long long)(got - want), (unsigned long long)excess);
	else if (got != want)
		fail_msg("child %d: %llu handled + %llu counted lost or dropped = %llu, expected "
			 "%llu (+%llu at most)",
			 child, (unsigned long long)atomic_load(&rt_res->count[child]),
			 (unsigned long long)done, (unsigned long long)got,
			 (unsigned long long)want, (unsigned long long)excess);
}

static void expect_exactly(int child, uint64_t want)
{
	expect_accounted(child, want, -1, NULL, -1, 0);
}

static void hostile_garbage_in_live_rings_stays_with_its_victims(void **state)
{
	struct child victim = { .index = 0, .name = "victim", .workers = 2, .actors = 2 };
	struct child c1 = { .index = 1, .name = "c1", .workers = 1, .actors = 1 };
	struct child c2 = { .index = 2, .name = "c2", .workers = 2, .actors = 2 };
	struct child pa = { .index = 3, .name = "pa", .n = BATCH_N, .type = T_PING };
	struct child vp = { .index = 4, .name = "vp", .n = BATCH_N, .type = T_PING };
	struct child again = { .index = 5, .name = "victim", .workers = 2, .actors = 2 };
	struct rt_damage dv, dp;
	uint64_t seed = test_seed(), sent = 0, writes = 0, in_writes = 0, up_writes = 0, had1,
		 had2;
	pid_t pids[3], hp;
	int idv, id1, id2, idp, status, rounds = 0;
	unsigned attach_failed = 0;

	(void)state;
	assert_int_equal(rt_start_router("hostile", NULL, 0), 0);
	idv = declare_consumer(&victim);
	id1 = declare_consumer(&c1);
	id2 = declare_consumer(&c2);
	rt_declare("pa", 1, 1);
	idp = rt_declare("vp", 1, 1);
	pids[0] = test_spawn(rt_consumer_main, &victim, sizeof(victim));
	rt_wait_attached(idv);
	pids[1] = test_spawn(rt_consumer_main, &c1, sizeof(c1));
	rt_wait_attached(id1);
	pids[2] = test_spawn(rt_consumer_main, &c2, sizeof(c2));
	rt_wait_attached(id2);

	print_message("hostile memory: seed %llu\n", (unsigned long long)seed);
	hp = test_spawn(hostile_main, &(struct hostile){ seed, idv, idp }, sizeof(struct hostile));
	while (test_try_wait(hp, &status) == 0) {
		pa.first = vp.first = sent;
		attach_failed += send_batch(&pa, &vp);
		sent += BATCH_N;
		rounds++;
	}
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (unsigned k = 0; k < N_KINDS; k++) {
		uint64_t n = atomic_load(&rt_res->per_actor[HOSTILE][k]);

		print_message("  %llu garbage writes into %s\n", (unsigned long long)n,
			      kind_names[k]);
		writes += n;
		if (k <= IN_LEN)
			in_writes += n;
		else
			up_writes += n;
	}
	assert_true(writes >= 10);

	/* Every copy from pa and vp, but those vp's condemned uplinks held
	 * (give or take what garbage that looked valid made its reader repeat). */
	expect_accounted(1, 2 * sent, -1, NULL, idp, up_writes * RING_RECORDS);
	expect_accounted(2, 2 * sent, -1, NULL, idp, up_writes * RING_RECORDS);
	expect_accounted(0, 2 * sent, idv, &no_damage, idp,
			 (in_writes + up_writes) * RING_RECORDS);
	rt_damage_of(idv, &dv);
	rt_damage_of(idp, &dp);
	print_message("%d rounds, %llu messages sent to each consumer; victim: %u damaged, "
		      "%u replaced, %llu lost, %llu copies dropped, %llu handled; vp: %u damaged, "
		      "%u replaced, %llu lost in its uplinks, %u attaches refused; "
		      "c1, c2: %llu handled\n", rounds,
		      (unsigned long long)(2 * sent), dv.damaged, dv.replaced,
		      (unsigned long long)dv.lost, (unsigned long long)dv.dropped_corrupt,
		      (unsigned long long)atomic_load(&rt_res->count[0]), dp.damaged, dp.replaced,
		      (unsigned long long)dp.lost, attach_failed,
		      (unsigned long long)atomic_load(&rt_res->count[1]));
	assert_true(dv.damaged >= 1 && dv.replaced >= 1);
	assert_true(dp.damaged >= 1 && dp.replaced >= 1);
	assert_true(shoal_router_group_pid(rt_router, id1) == pids[1]);
	assert_true(shoal_router_group_pid(rt_router, id2) == pids[2]);
	rt_tools_say_damaged();

	/* The victim restarts and receives again; the others go on. Garbage
	 * the old process never read back (a tail moved ahead while its ring
	 * stood idle) is found by the new one at attach: the copies put into
	 * that ring until the router replaced it are counted as lost. */
	kill(pids[0], SIGKILL);
	assert_int_not_equal(test_wait_pid(pids[0], 5000), -1);
	for (int i = 0; i < 5000 && shoal_router_group_pid(rt_router, idv) != 0; i++)
		usleep(1000);
	pids[0] = test_spawn(rt_consumer_main, &again, sizeof(again));
	rt_wait_attached(idv);
	rt_damage_of(idv, &dv);
	had1 = atomic_load(&rt_res->count[1]);
	had2 = atomic_load(&rt_res->count[2]);
	pa.first = sent;
	pa.n = BATCH_N;
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &pa, sizeof(pa)), 120000), 0);
	expect_accounted(5, BATCH_N, idv, &dv, -1, in_writes * RING_RECORDS);
	expect_exactly(1, had1 + BATCH_N);
	expect_exactly(2, had2 + BATCH_N);
	rt_stop_and_reap(pids, 3);
	rt_stop_router();
}

/*
 * Start system `name` with consumer `victim` (child 0, group id in *idv) and
 * a producer group "pa"; returns the consumer's pid once its worker holds
 * its rings (at head 0).
 */
static pid_t start_victim(const char *name, struct child *victim, int *idv)
{
	pid_t pid;

	assert_int_equal(rt_start_router(name, NULL, 0), 0);
	*idv = declare_consumer(victim);
	rt_declare("pa", 1, 1);
	pid = test_spawn(rt_consumer_main, victim, sizeof(*victim));
	rt_wait_ready(1);
	return pid;
}

/* Wait until the dispatcher has put `n` copies into group `id`'s rings. */
static void wait_delivered(int id, uint64_t n)
{
	struct rt_damage d = { 0 };

	for (int i = 0; i < WAIT_MS && (rt_damage_of(id, &d), d.delivered < n); i++)
		usleep(1000);
	assert_true(d.delivered == n);
}

/*
 * A consumer's head moved forward, within bounds, while the consumer cannot
 * read (stopped, or busy in a handler): the producer takes the bytes as
 * free and writes a whole ring's worth over records never read. When the
 * consumer goes on, its own head tells it the ring is corrupted, and what
 * the ring held is more than a ring's worth: every record of it must be
 * counted. (The count used to stop at a ring's worth: in `hostile`, the
 * victim or, through a garbled uplink, every consumer fell short by up to
 * 450 messages, about 1 run in 30 under load.)
 */
static void hostile_head_forged_ahead_counts_all_overwritten(void **state)
{
	struct child victim = { .index = 0, .name = "victim", .workers = 1, .actors = 1 };
	/* A ring's worth less 44, so that the forged head leaves the last 44
	 * slots before the wrap, then the whole ring, to be filled again. */
	struct child pa = { .index = 1, .name = "pa", .n = RING_RECORDS - 44, .type = T_PING };
	uint64_t first = pa.n, total;
	struct shoal__ring *q;
	struct shoal_seg seg;
	pid_t pid;
	int idv;

	(void)state;
	pid = start_victim("hostile_head", &victim, &idv);
	assert_int_equal(kill(pid, SIGSTOP), 0);

	/* `first` records wait unread; then the head jumps to the tail. */
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &pa, sizeof(pa)), 120000), 0);
	wait_delivered(idv, first);
	rt_mailbox_map("victim", &seg);
	q = rt_ring_of(&seg, "in.0.d0");
	atomic_store(&q->head, atomic_load(&q->tail));

	/* The producer fills the ring again over them; the rest waits in the
	 * uplink, the dispatcher parked on the full ring. */
	pa.first = first;
	pa.n = RING_RECORDS + 256;
	total = first + pa.n;
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &pa, sizeof(pa)), 120000), 0);
	wait_delivered(idv, first + RING_RECORDS);
	assert_int_equal(atomic_load(&q->tail) - atomic_load(&q->head), q->capacity);
	shoal_seg_detach(&seg);

	/* first + RING_RECORDS records lost, 256 handled from the new ring. */
	assert_int_equal(kill(pid, SIGCONT), 0);
	expect_accounted(0, total, idv, &no_damage, -1, 0);
	assert_int_equal(atomic_load(&rt_res->count[0]), total - first - RING_RECORDS);
	rt_stop_and_reap(&pid, 1);
	rt_stop_router();
}

/*
 * A ring its producer gave up (the dispatcher found it corrupted) while its
 * consumer's process was gone still holds what was queued before: the next
 * process reads it until empty, as the one that held it would have. (It used
 * to skip any condemned ring at attach, while the router counts an inbound
 * ring only once its reader gives up: what it held was lost uncounted.)
 */
static void hostile_ring_its_producer_gave_up_is_drained_by_the_next_process(void **state)
{
	struct child victim = { .index = 0, .name = "victim", .workers = 1, .actors = 1 };
	struct child again = { .index = 1, .name = "victim", .workers = 1, .actors = 1 };
	struct child pa = { .index = 2, .name = "pa", .n = 100, .type = T_PING };
	struct rt_damage d;
	struct shoal_seg seg;
	pid_t pid;
	int idv;

	(void)state;
	pid = start_victim("hostile_prod", &victim, &idv);
	kill(pid, SIGKILL);
	assert_int_not_equal(test_wait_pid(pid, 5000), -1);
	for (int i = 0; i < 5000 && shoal_router_group_pid(rt_router, idv) != 0; i++)
		usleep(1000);

	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &pa, sizeof(pa)), 120000), 0);
	wait_delivered(idv, pa.n);
	rt_mailbox_map("victim", &seg);
	shoal_ring_condemn(rt_ring_of(&seg, "in.0.d0"), SHOAL__RING_DATA_OFF, SHOAL_RING_SIDE_PROD);
	shoal_seg_detach(&seg);
	rt_wait_damage(idv, 1, 1, &d);

	pid = test_spawn(rt_consumer_main, &again, sizeof(again));
	rt_wait_attached(idv);
	expect_accounted(1, pa.n, idv, &no_damage, -1, 0);
	assert_int_equal(atomic_load(&rt_res->count[1]), pa.n);
	rt_stop_and_reap(&pid, 1);
	rt_stop_router();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hostile_head_forged_ahead_counts_all_overwritten),
		cmocka_unit_test(hostile_ring_its_producer_gave_up_is_drained_by_the_next_process),
		cmocka_unit_test(hostile_garbage_in_live_rings_stays_with_its_victims),
	};

	tool_bin = getenv("SHOAL_BIN");
	if (tool_bin == NULL) {
		fprintf(stderr, "SHOAL_BIN is not set\n");
		return 77;
	}
	rt_init();
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
