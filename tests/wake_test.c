/* SPDX-License-Identifier: MIT */
/*
 * Wake moderation across real processes (shm/doorbell.c): light traffic is
 * woken at once, a flood's wake-up is held on the doorbell until a batch
 * gathers or a waker makes it, and in a running system a lone message held
 * after a flood is handled although its producer never calls the runtime
 * again (the router's waker thread). How long that takes is the
 * benchmark's business (shoal-bench-system, bench/SUITE.md); here only
 * that it happens, with generous timeouts.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>
#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/group_impl.h"
#include "runtime/layout.h"
#include "shm/util.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"

/* ---- the doorbell alone: one consumer process, this process producing ---------- */

struct shared {
	struct shoal_doorbell db;
	_Alignas(64) _Atomic uint64_t sent;    /* messages "published" */
	_Alignas(64) _Atomic uint64_t acked;   /* messages the consumer saw */
	uint64_t rounds;
};

static struct shared *sh;

/* Light traffic, in messages per window: few, for a short test. */
#define LIGHT 16u

static bool arrived(void *arg)
{
	(void)arg;
	return atomic_load_explicit(&sh->sent, memory_order_acquire) >
	       atomic_load_explicit(&sh->acked, memory_order_relaxed);
}

/* Never spins: every message finds it asleep unless woken. */
static int consumer_main(void *arg)
{
	struct shoal_idle st = { 0 };

	(void)arg;
	while (atomic_load(&sh->acked) < sh->rounds) {
		int ret = shoal_doorbell_idle_wait(&sh->db, &st, arrived, NULL, 20000000000);

		if (ret == -ETIMEDOUT)
			return 3;   /* a wake-up was lost */
		if (ret == 0)
			atomic_fetch_add(&sh->acked, 1);
	}
	return 0;
}

static void wait_for(bool (*cond)(uint64_t), uint64_t arg)
{
	for (int i = 0; i < 100000 && !cond(arg); i++)
		usleep(100);
	assert_true(cond(arg));
}

static bool is_asleep(uint64_t unused)
{
	(void)unused;
	return atomic_load(&sh->db.state) == SHOAL_DOORBELL_SLEEPING;
}

static bool acked_is(uint64_t n)
{
	return atomic_load(&sh->acked) == n;
}

/* Publish one more message, then ring as a moderating producer does. */
static int publish(struct shoal_wake_mod *m, uint32_t unannounced)
{
	atomic_fetch_add_explicit(&sh->sent, 1, memory_order_release);
	shoal_doorbell_fence();
	return shoal_doorbell_wake_mod(&sh->db, m, unannounced);
}

static void doorbell_flood_is_held_until_a_batch_or_the_waker(void **state)
{
	struct shoal_wake_mod m;
	uint64_t held;
	pid_t pid;

	(void)state;
	memset(sh, 0, sizeof(*sh));
	shoal_doorbell_init(&sh->db);
	sh->rounds = LIGHT + 2 + SHOAL_WAKE_BATCH;
	pid = test_spawn(consumer_main, NULL, 0);
	/* One window for the whole test: the light/heavy judgement cannot
	 * roll over while the machine is slow. */
	shoal_wake_mod_init(&m, UINT64_C(3600000000000));
	m.light = LIGHT;

	/* Light traffic: every message wakes the sleeper at once. */
	for (uint64_t i = 1; i <= LIGHT; i++) {
		wait_for(is_asleep, 0);
		assert_int_equal(publish(&m, 1), SHOAL_WAKE_DONE);
		wait_for(acked_is, i);
	}
	/* Heavy: held, the doorbell marked once, the consumer left asleep. */
	wait_for(is_asleep, 0);
	assert_int_equal(publish(&m, 1), SHOAL_WAKE_HELD_FIRST);
	held = atomic_load(&sh->db.held);
	assert_true(held != 0);
	assert_int_equal(publish(&m, 2), SHOAL_WAKE_HELD);
	assert_int_equal(atomic_load(&sh->db.held), held);
	assert_int_equal(atomic_load(&sh->acked), LIGHT);
	/* The waker leaves a young hold alone and makes an old one. */
	assert_int_equal(shoal_doorbell_wake_due(&sh->db, held, 1000000000), held + 1000000000);
	assert_int_equal(atomic_load(&sh->db.held), held);
	assert_int_equal(shoal_doorbell_wake_due(&sh->db, held + 1000000000, 1000000000),
			 UINT64_MAX);
	assert_int_equal(atomic_load(&sh->db.held), 0);
	wait_for(acked_is, LIGHT + 2);
	/* A batch of unannounced messages wakes at once, and takes the mark. */
	wait_for(is_asleep, 0);
	for (uint32_t k = 1; k < SHOAL_WAKE_BATCH; k++)
		assert_int_equal(publish(&m, k), k == 1 ? SHOAL_WAKE_HELD_FIRST : SHOAL_WAKE_HELD);
	assert_int_equal(publish(&m, SHOAL_WAKE_BATCH), SHOAL_WAKE_DONE);
	assert_int_equal(atomic_load(&sh->db.held), 0);
	test_assert_exited(test_wait_pid(pid, 60000), 0);
	assert_int_equal(m.held, SHOAL_WAKE_BATCH + 1);
}

/* ---- a running system ------------------------------------------------------------- */

#define FLOOD 2000u

enum { ST_HELD = 1, ST_NOT_HELD, ST_FAILED };

static bool consumer_asleep(struct shoal_ctx *ctx, uint16_t dg)
{
	struct shoal__dout *o = atomic_load(&ctx->dout[dg]);

	return o != NULL && atomic_load(&o[0].dst->in_db.state) == SHOAL_DOORBELL_SLEEPING;
}

/* A direct message sent as part of a flood (the traffic judged heavy):
 * held if its consumer sleeps. */
static int send_in_flood(struct shoal_ctx *ctx, uint64_t dest, uint64_t seq)
{
	struct msg v = { .seq = seq, .key = seq };

	ctx->wmod.heavy = true;
	ctx->wmod.win_ns = shoal__now_ns();
	return shoal_send_to(ctx, dest, T_PING, &v, sizeof(v));
}

/*
 * Floods routed messages, then sends a lone direct message that is held
 * (its consumer asleep, the traffic forced heavy), a request (never held:
 * its wake-up delivers the held message too), and a last held message; then
 * it never calls the runtime again: only a waker can deliver that one. It
 * reports in sum_seq[] (a slot a producer does not otherwise use) how many
 * wake-ups its consumer's doorbell had had before the last message.
 */
static int lone_producer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, rt_count_handler);
	uint16_t dg = (uint16_t)shoal_addr_group(c->dest);
	struct shoal_reply r = { 0 };
	struct msg v = { 0 }, back;
	struct shoal_ctx *ctx;
	uint64_t held;
	int st;

	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	if (shoal_connect(ctx, c->dest, 10000000000) < 0)
		return 11;
	for (uint64_t i = 0; i < FLOOD; i++) {
		v.seq = v.key = i;
		if (shoal_send(ctx, T_PING, &v, sizeof(v)) < 0)
			return 12;
	}
	for (int i = 0; i < 100000 && !consumer_asleep(ctx, dg); i++)
		usleep(100);
	if (send_in_flood(ctx, c->dest, FLOOD) < 0)
		return 13;
	r.buf = &back;
	r.cap = sizeof(back);
	st = shoal_request(ctx, c->dest, T_REQ, &v, sizeof(v), 10000000000, &r) < 0 ?
		     ST_FAILED : 0;
	for (int i = 0; i < 100000 && !consumer_asleep(ctx, dg); i++)
		usleep(100);
	held = ctx->wmod.held;
	atomic_store(&rt_res->sum_seq[c->index],
		     atomic_load(&atomic_load(&ctx->dout[dg])[0].dst->in_db.wakes));
	if (send_in_flood(ctx, c->dest, FLOOD + 2) < 0)
		return 14;
	if (st == 0)
		st = ctx->wmod.held == held + 1 ? ST_HELD : ST_NOT_HELD;
	atomic_store(&rt_res->status[c->index], st);
	atomic_store(&rt_res->ready[c->index], 1);
	for (;;)
		pause();   /* silence: the test kills us */
}

static void runtime_lone_messages_after_a_flood_are_handled(void **state)
{
	struct child cons = { .index = 0, .name = "cons", .workers = 1, .actors = 1 };
	struct child prod = { .index = 1, .name = "prod" };
	struct shoal_seg mbx;
	pid_t pc, pp;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("wk-lone", NULL, 0600), 0);
	id = rt_declare("cons", 1, 1);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pc = test_spawn(rt_consumer_main, &cons, sizeof(cons));
	rt_wait_attached(id);
	prod.dest = shoal_addr_make((uint16_t)id, SHOAL_SLOT_GROUP, 0);
	pp = test_spawn(lone_producer_main, &prod, sizeof(prod));
	/* The flood, both lone messages and the request: all handled. */
	rt_wait_count(0, FLOOD + 3, 60000);
	rt_wait_ready(2);
	/* The last one was held, its producer went silent, and a wake-up
	 * came for it: the waker's (the consumer's own 5 s safety sleep
	 * would have made none). */
	assert_int_equal(atomic_load(&rt_res->status[1]), ST_HELD);
	rt_mailbox_map("cons", &mbx);
	assert_true(atomic_load(&shoal__mailbox_hdr(&mbx)->w[0].in_db.wakes) >
		    atomic_load(&rt_res->sum_seq[1]));
	shoal_seg_detach(&mbx);
	kill(pp, SIGKILL);
	assert_true(test_wait_pid(pp, 30000) >= 0);
	rt_stop_and_reap(&pc, 1);
	rt_stop_router();
}

/* ---- 100 group processes on the machine's few CPUs -------------------------------- */

#define HUNDRED 100u
#define PER 300u   /* messages per consumer and path */

enum { ROUTED, DIRECT };

/* What each consumer saw, per path (one sender per path: order holds). */
struct tally {
	_Atomic uint64_t count[HUNDRED][2];
	_Atomic uint64_t next[HUNDRED][2];   /* the sequence number expected next */
	_Atomic uint64_t errors[HUNDRED];    /* out of order, or for another consumer */
};

static struct tally *tl;
static char names[HUNDRED][16];   /* of the consumers (their struct child points here) */

static void hundred_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	const struct child *c = a->user;
	unsigned i = (unsigned)c->index;
	struct msg v;

	if (m->len != sizeof(v)) {
		atomic_fetch_add(&tl->errors[i], 1);
		return;
	}
	memcpy(&v, m->data, sizeof(v));
	if (v.key != i || v.kind > DIRECT || v.seq != atomic_load(&tl->next[i][v.kind])) {
		atomic_fetch_add(&tl->errors[i], 1);
		return;
	}
	atomic_store(&tl->next[i][v.kind], v.seq + 1);
	atomic_fetch_add(&tl->count[i][v.kind], 1);
}

static int hundred_consumer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, hundred_handler);
	int ret;

	if (g == NULL)
		return 10;
	ret = shoal_group_run(g);
	shoal_group_detach(g);
	return ret == 0 ? 0 : 1;
}

/* PER routed and PER direct messages to every consumer, round robin, as
 * fast as they go; then it leaves at once (its held wake-ups are the
 * router's waker to make). */
static int hundred_producer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, rt_count_handler);
	uint64_t dest[HUNDRED];
	struct shoal_ctx *ctx;

	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	for (unsigned i = 0; i < HUNDRED; i++) {
		char name[16];

		snprintf(name, sizeof(name), "c%u", i);
		dest[i] = shoal_group_lookup(g, name, SHOAL_SLOT_GROUP);
	}
	for (uint64_t seq = 0; seq < PER; seq++)
		for (unsigned i = 0; i < HUNDRED; i++) {
			struct msg v = { .seq = seq, .key = i, .kind = ROUTED };

			if (shoal_send(ctx, T_PING, &v, sizeof(v)) < 0)
				return 11;
			v.kind = DIRECT;
			if (shoal_send_to(ctx, dest[i], T_PING, &v, sizeof(v)) < 0)
				return 12;
		}
	shoal_group_detach(g);
	return 0;
}

static void runtime_hundred_groups_get_everything_once_in_order(void **state)
{
	static struct child cons[HUNDRED];
	struct child prod = { .index = 0, .name = "prod" };
	pid_t pids[HUNDRED], pp;
	int ids[HUNDRED];

	(void)state;
	memset(tl, 0, sizeof(*tl));
	assert_int_equal(rt_start_router("wk-100", NULL, 0600), 0);
	for (unsigned i = 0; i < HUNDRED; i++) {
		snprintf(names[i], sizeof(names[i]), "c%u", i);
		ids[i] = rt_declare(names[i], 1, 1);
		rt_route(ids[i], T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_EQ, i, 0);
	}
	for (unsigned i = 0; i < HUNDRED; i++) {
		cons[i] = (struct child){ .index = (int)i, .name = names[i] };
		pids[i] = test_spawn(hundred_consumer_main, &cons[i], sizeof(cons[i]));
	}
	for (unsigned i = 0; i < HUNDRED; i++)
		rt_wait_attached(ids[i]);
	pp = test_spawn(hundred_producer_main, &prod, sizeof(prod));
	test_assert_exited(test_wait_pid(pp, 240000), 0);
	for (unsigned i = 0; i < HUNDRED; i++)
		for (int k = 0; k < 60000 && (atomic_load(&tl->count[i][ROUTED]) < PER ||
					      atomic_load(&tl->count[i][DIRECT]) < PER); k++)
			usleep(1000);
	rt_stop_and_reap(pids, HUNDRED);
	for (unsigned i = 0; i < HUNDRED; i++) {
		assert_int_equal(atomic_load(&tl->errors[i]), 0);
		assert_int_equal(atomic_load(&tl->count[i][ROUTED]), PER);
		assert_int_equal(atomic_load(&tl->count[i][DIRECT]), PER);
	}
	rt_stop_router();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(doorbell_flood_is_held_until_a_batch_or_the_waker),
		cmocka_unit_test(runtime_lone_messages_after_a_flood_are_handled),
		cmocka_unit_test(runtime_hundred_groups_get_everything_once_in_order),
	};

	rt_init();
	/* Before the fork server starts: every child has these mappings, and
	 * gets the names as they are when it starts. */
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	tl = mmap(NULL, sizeof(*tl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || tl == MAP_FAILED)
		abort();
	test_spawn_share(names, sizeof(names));
	signal(SIGPIPE, SIG_IGN);
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
