/* SPDX-License-Identifier: MIT */
/*
 * Flow control and failure across real processes: blocking sends against a
 * slow consumer, try_send drops that are counted, a group killed with
 * SIGKILL whose queued messages are handled by its next process, in-group
 * routing (unicast, multicast, broadcast, discard) over two workers, and
 * direct sends to actor and group addresses.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/router.h>

#include "runtime/group_impl.h"
#include "runtime/layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

/* ---- consumers with behaviours of their own ------------------------------------ */

enum consumer_mode { SLOW = 10, HOLD, GATED };

static void behaving_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	const struct child *c = a->user;

	if (c->mode == HOLD)
		for (;;)
			pause();   /* never returns: the test kills this process */
	if (c->mode == GATED)
		while (!atomic_load(&rt_res->go))
			usleep(100);
	if (c->mode == SLOW) {
		struct timespec ts = { 0, 20000 };

		nanosleep(&ts, NULL);
	}
	rt_ordered_handler(a, m);
}

static int behaving_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = {
		.name = c->name, .n_workers = c->workers, .n_actors = c->actors, .node = -1,
		.types = rt_types, .n_types = RT_N_TYPES, .on_message = behaving_handler,
		.on_start = rt_ordered_start, .user = c,
	};
	struct shoal_group *g;
	struct shoal_err err = { { 0 } };

	if (shoal_group_attach(&g, &d, NULL, &err) < 0) {
		fprintf(stderr, "%s: %s\n", c->name, err.msg);
		return 10;
	}
	atomic_store(&rt_res->ready[c->index], 1);
	shoal_group_run(g);
	shoal_group_detach(g);
	return atomic_load(&rt_res->order_errors[c->index]) == 0 ? 0 : 1;
}

/* Registry counters of group `id`, summed over dispatchers. */
static void group_drops(int id, uint64_t *delivered, uint64_t *dropped_full)
{
	struct shoal__registry reg;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	*delivered = *dropped_full = 0;
	for (int d = 0; d < SHOAL_MAX_NODES; d++) {
		*delivered += atomic_load(&reg.groups[id].stats[d].delivered);
		*dropped_full += atomic_load(&reg.groups[id].stats[d].dropped_full);
	}
	shoal_seg_detach(&reg.seg);
}

/*
 * Start a router for `system`, declare consumer `c` (with `workers` and
 * `actors`) and a one-worker "prod", run `c` with `fn` and wait until it is
 * attached. Returns the consumer's group id; its pid in *pid.
 */
static int start_consumer(const char *system, int (*fn)(void *), struct child *c,
			  uint16_t workers, uint16_t actors, pid_t *pid)
{
	int id;

	assert_int_equal(rt_start_router(system, NULL, 0), 0);
	id = rt_declare(c->name, workers, actors);
	rt_declare("prod", 1, 1);
	*pid = test_spawn(fn, c, sizeof(*c));
	rt_wait_attached(id);
	return id;
}

static void runtime_blocking_send_waits_for_slow_consumer(void **state)
{
	struct child slow = { .index = 0, .name = "slow", .mode = SLOW };
	struct child prod = { .index = 1, .name = "prod", .n = test_scale(20000), .type = T_PING };
	uint64_t delivered, dropped;
	pid_t pc;
	int id;

	(void)state;
	id = start_consumer("fl-block", behaving_main, &slow, 1, 1, &pc);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	/* Far more than the rings hold: the producer must wait, not drop. */
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 120000), 0);
	rt_wait_count(0, prod.n, 60000);
	/* The dispatcher publishes its counts on its next pass, which may
	 * come after the consumer handled the last message: wait for them. */
	for (int i = 0; i < 30000 && (group_drops(id, &delivered, &dropped),
				      delivered < prod.n); i++)
		usleep(1000);
	assert_int_equal(delivered, prod.n);
	assert_int_equal(dropped, 0);
	rt_stop_and_reap(&pc, 1);
	rt_stop_router();
}

/*
 * try_send until c->n messages were accepted. Counting attempts instead let
 * a dispatcher starved of CPU for the whole loop see only what the uplink
 * held, which the consumer's ring of the same size took without a drop.
 */
static int try_producer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, rt_count_handler);
	struct shoal_ctx *ctx;
	uint64_t ok = 0, full = 0;

	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	while (ok < c->n) {
		struct msg v = { .seq = ok };
		int ret = shoal_try_send(ctx, T_PING, &v, sizeof(v));

		if (ret == 0) {
			ok++;
		} else if (ret == -EAGAIN) {
			full++;
			usleep(50);   /* the uplink is full: let the dispatcher drain it */
		} else {
			return 11;
		}
	}
	atomic_store(&rt_res->last_seq[c->index], ok);
	atomic_store(&rt_res->sum_seq[c->index], full);
	shoal_group_detach(g);
	return 0;
}

static void runtime_try_send_drops_are_counted_never_silent(void **state)
{
	struct child gated = { .index = 0, .name = "gated", .mode = GATED };
	/* More than the uplink and the gated consumer's ring hold together
	 * (64 KiB each, about 740 of these): the dispatcher must drop. */
	struct child prod = { .index = 1, .name = "prod", .n = 5000 };
	uint64_t delivered, dropped, ok;
	pid_t pc;
	int id;

	(void)state;
	id = start_consumer("fl-try", behaving_main, &gated, 1, 1, &pc);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	test_assert_exited(test_wait_pid(test_spawn(try_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	ok = atomic_load(&rt_res->last_seq[1]);
	/* Let the dispatcher finish what the uplink still holds. */
	for (int i = 0; i < 5000; i++) {
		group_drops(id, &delivered, &dropped);
		if (delivered + dropped == ok)
			break;
		usleep(1000);
	}
	atomic_store(&rt_res->go, 1);
	print_message("try_send: %llu accepted (%llu refused at the sender), %llu delivered, "
		      "%llu dropped at the full destination\n", (unsigned long long)ok,
		      (unsigned long long)atomic_load(&rt_res->sum_seq[1]),
		      (unsigned long long)delivered, (unsigned long long)dropped);
	assert_true(dropped > 0);
	assert_int_equal(delivered + dropped, ok);
	rt_wait_count(0, delivered, 30000);
	/* The consumer checked order: drops leave gaps but never reorder. */
	shoal_router_stop_groups(rt_router, 10000000000);
	int status = test_wait_pid(pc, 10000);

	assert_true(status != -1 && WIFEXITED(status));
	rt_stop_router();
}

static void runtime_killed_group_queue_is_handled_by_its_next_process(void **state)
{
	struct child first = { .index = 0, .name = "worker", .mode = HOLD };
	struct child second = { .index = 1, .name = "worker", .mode = 1 };
	struct child prod = { .index = 2, .name = "prod", .n = 300, .type = T_PING };
	pid_t p1, p2;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("fl-kill", NULL, 0), 0);
	id = rt_declare("worker", 1, 1);
	rt_declare("prod", 1, 1);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	p1 = test_spawn(behaving_main, &first, sizeof(first));
	rt_wait_attached(id);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	/* The first process holds its first message forever: kill it. */
	usleep(50000);
	kill(p1, SIGKILL);
	assert_int_not_equal(test_wait_pid(p1, 5000), -1);
	for (int i = 0; i < 1000 && shoal_router_group_pid(rt_router, id) != 0; i++)
		usleep(1000);
	/* More messages arrive while the group is down: they queue. */
	prod.first = 300;
	prod.n = 200;
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	p2 = test_spawn(behaving_main, &second, sizeof(second));
	/* Every message, including the one the dead process held, exactly
	 * once and in order: 0 .. 499. */
	rt_wait_count(1, 500, 30000);
	rt_stop_and_reap(&p2, 1);
	rt_stop_router();
}

/* In-group router: kind 0 unicast to key % 4, 1 multicast {1, 2}, 2
 * broadcast, 3 discard. */
static void in_group_route(const struct shoal_msg *m, struct shoal_outcome *out, void *user)
{
	struct msg v;

	(void)user;
	memcpy(&v, m->data, sizeof(v));
	switch (v.kind) {
	case 0:
		*out = (struct shoal_outcome){ .kind = SHOAL_ROUTE_UNICAST, .n = 1,
					       .slots = { (uint16_t)(v.key % 4) } };
		break;
	case 1:
		*out = (struct shoal_outcome){ .kind = SHOAL_ROUTE_MULTICAST, .n = 2,
					       .slots = { 1, 2 } };
		break;
	case 2:
		out->kind = SHOAL_ROUTE_BROADCAST;
		break;
	default:
		out->kind = SHOAL_ROUTE_DISCARD;
		break;
	}
}

static int kinds_producer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = { .name = c->name, .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = rt_count_handler, .node = -1, .user = c };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	int ret = 0;

	if (shoal_group_attach(&g, &d, NULL, NULL) < 0)
		return 10;
	ctx = shoal_group_worker(g, 0);
	for (uint64_t i = 0; i < c->n && ret == 0; i++) {
		struct msg v = { .seq = i, .kind = (uint32_t)(i % 4), .key = i / 4 };

		ret = c->dest ? shoal_send_to(ctx, c->dest, T_PING, &v, sizeof(v))
			      : shoal_send(ctx, T_PING, &v, sizeof(v));
		if (ret == 0)
			atomic_store(&rt_res->last_seq[c->index], i + 1);
	}
	/* What stopped it, for tests that send until an error. */
	atomic_store(&rt_res->status[c->index], ret);
	atomic_store(&rt_res->ready[c->index], 2);
	shoal_group_detach(g);
	return ret == 0 ? 0 : 11;
}

static void runtime_in_group_routing_over_two_workers(void **state)
{
	struct child ig = { .index = 0, .name = "ig", .workers = 2, .actors = 4,
			    .route = in_group_route };
	struct child prod = { .index = 1, .name = "prod", .n = 400 };
	uint64_t want[4] = { 0 }, total = 0;
	pid_t pc;
	int id;

	(void)state;
	for (uint64_t i = 0; i < 400; i++) {
		switch (i % 4) {
		case 0: want[(i / 4) % 4]++; break;
		case 1: want[1]++; want[2]++; break;
		case 2: for (int a = 0; a < 4; a++) want[a]++; break;
		default: break;
		}
	}
	for (int a = 0; a < 4; a++)
		total += want[a];
	id = start_consumer("fl-ingroup", rt_consumer_main, &ig, 2, 4, &pc);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	test_assert_exited(test_wait_pid(test_spawn(kinds_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(0, total, 30000);
	for (int a = 0; a < 4; a++)
		assert_int_equal(atomic_load(&rt_res->per_actor[0][a]), want[a]);
	rt_stop_and_reap(&pc, 1);
	rt_stop_router();
}

/* Generation of group `id` now, from the registry. */
static uint32_t group_gen(int id)
{
	struct shoal__registry reg;
	uint32_t gen;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	gen = atomic_load(&reg.groups[id].gen);
	shoal_seg_detach(&reg.seg);
	return gen;
}

static void runtime_direct_send_reaches_actor_and_group(void **state)
{
	struct child ig = { .index = 0, .name = "dst", .workers = 2, .actors = 4 };
	struct child prod = { .index = 1, .name = "prod", .n = 100 };
	uint32_t gen;
	pid_t pc;
	int id;

	(void)state;
	id = start_consumer("fl-direct", rt_consumer_main, &ig, 2, 4, &pc);
	gen = group_gen(id);
	/* To actor 3 (owned by worker 1): all 100 land there. */
	prod.dest = shoal_addr_make((uint16_t)id, 3, gen);
	test_assert_exited(test_wait_pid(test_spawn(kinds_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(0, 100, 30000);
	assert_int_equal(atomic_load(&rt_res->per_actor[0][3]), 100);
	/* To the group (no in-group router): actor 0. */
	prod.dest = shoal_addr_make((uint16_t)id, SHOAL_SLOT_GROUP, 0);
	test_assert_exited(test_wait_pid(test_spawn(kinds_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(0, 200, 30000);
	assert_int_equal(atomic_load(&rt_res->per_actor[0][0]), 100);
	/* To every actor. */
	prod.dest = shoal_addr_make((uint16_t)id, SHOAL_SLOT_ALL, 0);
	test_assert_exited(test_wait_pid(test_spawn(kinds_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(0, 600, 30000);
	for (int a = 0; a < 4; a++)
		assert_int_equal(atomic_load(&rt_res->per_actor[0][a]),
				 a == 3 || a == 0 ? 200 : 100);
	rt_stop_and_reap(&pc, 1);
	rt_stop_router();
}

static void runtime_blocking_send_to_failed_target_returns_ehostdown(void **state)
{
	struct child stuck = { .index = 0, .name = "stuck", .mode = HOLD };
	struct child snd = { .index = 1, .name = "prod", .n = UINT64_MAX };   /* until an error */
	uint64_t seen = UINT64_MAX;
	pid_t ps, pq;
	int id;

	(void)state;
	id = start_consumer("fl-hostdown", behaving_main, &stuck, 1, 1, &ps);
	snd.dest = shoal_addr_make((uint16_t)id, 0, group_gen(id));
	pq = test_spawn(kinds_producer_main, &snd, sizeof(snd));
	/* The target holds its first message: the sender fills the ring and
	 * waits. Seen as a count that stays put for 300 ms. */
	for (int i = 0; i < 100; i++) {
		uint64_t now = atomic_load(&rt_res->last_seq[1]);

		if (now > 0 && now == seen)
			break;
		seen = now;
		usleep(300000);
	}
	assert_true(seen > 0 && atomic_load(&rt_res->ready[1]) == 0);
	kill(ps, SIGKILL);
	assert_int_not_equal(test_wait_pid(ps, 5000), -1);
	for (int i = 0; i < 5000 && shoal_router_group_pid(rt_router, id) != 0; i++)
		usleep(1000);
	/* Down is not failed: a restart would drain the ring, so it waits on. */
	usleep(200000);
	assert_int_equal(atomic_load(&rt_res->ready[1]), 0);
	assert_int_equal(shoal_router_fail_group(rt_router, id), 0);
	test_assert_exited(test_wait_pid(pq, 10000), 11);
	assert_int_equal(atomic_load(&rt_res->status[1]), -EHOSTDOWN);
	assert_int_equal(atomic_load(&rt_res->last_seq[1]), seen);
	rt_stop_router();
}

/* ---- a two-worker group killed while its workers forward to each other ---- */

#define FW_N 1500u

static _Atomic uint8_t *seen;      /* [FW_N], MAP_SHARED: which messages were handled */
static pthread_t fw_main_thread;   /* worker 0 runs on it */

/* Every message goes to the actor of the other worker: all are forwarded. */
static void fw_route(const struct shoal_msg *m, struct shoal_outcome *out, void *user)
{
	(void)m;
	(void)user;
	*out = (struct shoal_outcome){ .kind = SHOAL_ROUTE_UNICAST, .n = 1,
				       .slots = { pthread_equal(pthread_self(), fw_main_thread) } };
}

/* Slow: the forwarding worker outruns it and fills the ring between them. */
static void fw_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct timespec ts = { 0, 2000000 };
	struct msg v;

	memcpy(&v, m->data, sizeof(v));
	nanosleep(&ts, NULL);
	if (v.seq < FW_N)
		atomic_store(&seen[v.seq], 1);
	atomic_fetch_add(&rt_res->count[((const struct child *)a->user)->index], 1);
}

/* The same as an on_batch handler (mode 1). A group of several workers
 * gets no batches (group.h), so this is never called there: the test
 * checks that setting it changes no count. */
static void fw_batch(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		fw_handler(a, &msgs[k]);
}

static int fw_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = {
		.name = c->name, .n_workers = 2, .n_actors = 2, .node = -1, .types = rt_types,
		.n_types = RT_N_TYPES, .on_message = fw_handler, .route = fw_route, .user = c,
		.on_batch = c->mode == 1 ? fw_batch : NULL,
	};
	struct shoal_group *g;

	fw_main_thread = pthread_self();
	if (shoal_group_attach(&g, &d, NULL, NULL) < 0)
		return 10;
	shoal_group_run(g);
	shoal_group_detach(g);
	return 0;
}

/*
 * Messages of group `group` handled at least once; forwarded copies counted
 * lost, and records set aside, summed over its (up to 2) workers.
 */
static void tally(const char *group, uint64_t *handled, uint64_t *lost, uint64_t *aside)
{
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal__mbx_hdr *h;

	*handled = *lost = *aside = 0;
	for (unsigned i = 0; i < FW_N; i++)
		*handled += atomic_load(&seen[i]);
	assert_int_equal(shoal__name_mailbox(name, rt_sysname, group), 0);
	assert_int_equal(shoal_seg_attach(&seg, name, SHOAL_SEG_RDONLY, NULL), 0);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	for (unsigned w = 0; w < h->n_workers && w < 2; w++) {
		*lost += atomic_load(&h->w[w].fwd_lost);
		*aside += atomic_load(&h->w[w].set_aside);
	}
	shoal_seg_detach(&seg);
}

/*
 * kill -9 of a group whose workers forward to each other: what sat in the
 * process-private rings between them is counted (forward_lost), so every
 * accepted message is handled or counted, exactly.
 */
static void killed_two_workers(const char *system, int mode)
{
	struct child fw = { .index = 0, .name = "fw", .mode = mode };
	struct child prod = { .index = 1, .name = "prod", .n = FW_N, .type = T_PING };
	uint64_t handled = 0, lost = 0, aside;
	pid_t p1, p2, pp;
	int id;

	memset((void *)seen, 0, FW_N);
	id = start_consumer(system, fw_main, &fw, 2, 2, &p1);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pp = test_spawn(rt_producer_main, &prod, sizeof(prod));
	for (int i = 0; atomic_load(&rt_res->count[0]) < 50; i++) {
		assert_true(i < 30000);
		usleep(1000);
	}
	kill(p1, SIGKILL);
	assert_int_not_equal(test_wait_pid(p1, 5000), -1);
	for (int i = 0; i < 5000 && shoal_router_group_pid(rt_router, id) != 0; i++)
		usleep(1000);
	p2 = test_spawn(fw_main, &fw, sizeof(fw));
	test_assert_exited(test_wait_pid(pp, 60000), 0);   /* all FW_N accepted */
	for (int i = 0; i < 6000; i++) {
		tally("fw", &handled, &lost, &aside);
		if (handled + lost >= FW_N)
			break;
		usleep(10000);
	}
	usleep(100000);   /* nothing more may come: no duplicate count */
	tally("fw", &handled, &lost, &aside);
	print_message("%u accepted: %llu handled, %llu lost between workers and counted\n", FW_N,
		      (unsigned long long)handled, (unsigned long long)lost);
	assert_true(lost > 0);
	assert_int_equal(handled + lost, FW_N);
	assert_int_equal(aside, 0);
	rt_stop_and_reap(&p2, 1);
	rt_stop_router();
}

static void runtime_killed_two_worker_group_counts_lost_forwards(void **state)
{
	(void)state;
	killed_two_workers("fl-fwkill", 0);
}

/*
 * The same with on_batch set: a group of several workers takes its
 * mailbox and the copies between its workers a record at a time, so what a
 * kill left between the workers is counted lost exactly, as without it.
 * (Batching those copies once counted 1518 handled or lost of 1500: a
 * batch cannot say which of its copies its handler finished.)
 */
static void runtime_killed_two_worker_group_with_batches_counts_lost_forwards(void **state)
{
	(void)state;
	killed_two_workers("fl-fwkillb", 1);
}

/* ---- a message that kills its handler ---------------------------------------- */

#define POISON_N 20u
#define POISON_SEQ 5u

static void poison_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v;

	while (((const struct child *)a->user)->mode == 1 && !atomic_load(&rt_res->go))
		usleep(1000);   /* poison_batch() says why */
	memcpy(&v, m->data, sizeof(v));
	if (v.seq == POISON_SEQ) {
		atomic_fetch_add(&rt_res->per_actor[0][1], 1);
		raise(SIGKILL);   /* this message kills whoever handles it */
	}
	atomic_store(&seen[v.seq % FW_N], 1);
	atomic_fetch_add(&rt_res->count[((const struct child *)a->user)->index], 1);
}

/*
 * The same as an on_batch handler (mode 1): in that mode the first process's
 * first call, of either handler, waits for `go`, which the test sets once
 * the router delivered all 20, so that the rest wait in the ring and come
 * as batches after it, whatever the pace of the producer. Where each
 * crash came: per_actor[0][0] in a batch, [0][1] alone (poison_handler),
 * [0][2] the poison's index in the first batch it killed, plus one.
 */
static void poison_batch(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n)
{
	while (!atomic_load(&rt_res->go))
		usleep(1000);
	for (uint32_t k = 0; k < n; k++) {
		struct msg v;

		memcpy(&v, msgs[k].data, sizeof(v));
		if (v.seq == POISON_SEQ) {
			if (atomic_fetch_add(&rt_res->per_actor[0][0], 1) == 0)
				atomic_store(&rt_res->per_actor[0][2], k + 1);
			raise(SIGKILL);
		}
		atomic_store(&seen[v.seq % FW_N], 1);
		atomic_fetch_add(&rt_res->count[((const struct child *)a->user)->index], 1);
	}
}

static int poison_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = { .name = c->name, .node = -1, .types = rt_types,
				      .n_types = RT_N_TYPES, .on_message = poison_handler,
				      .on_batch = c->mode == 1 ? poison_batch : NULL,
				      .user = c };
	struct shoal_group *g;

	if (shoal_group_attach(&g, &d, NULL, NULL) < 0)
		return 10;
	shoal_group_run(g);
	shoal_group_detach(g);
	return 0;
}

/* The record worker 0 of `group` set aside: its envelope and payload. */
static void aside_of(const char *group, uint32_t *crashes, struct shoal_envelope *env,
		     struct msg *v)
{
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal__mbx_hdr *h;
	const struct shoal__mbx_aside *a;

	assert_int_equal(shoal__name_mailbox(name, rt_sysname, group), 0);
	assert_int_equal(shoal_seg_attach(&seg, name, SHOAL_SEG_RDONLY, NULL), 0);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	a = &h->aside[0];
	assert_true(atomic_load(&a->seq) != 0 && atomic_load(&a->seq) % 2 == 0);
	assert_int_equal(a->len, sizeof(*env) + sizeof(*v));
	assert_int_equal(a->kept, a->len);
	*crashes = a->crashes;
	memcpy(env, a->rec, sizeof(*env));
	memcpy(v, a->rec + sizeof(*env), sizeof(*v));
	shoal_seg_detach(&seg);
}

/*
 * Run `c` (poison_main) as group "poison" of system `system`, have 20
 * messages routed to it of which the 6th kills its handler, restart it after
 * each of SHOAL__CRASHES_MAX deaths (one more for a batch the poison killed
 * not as its first message; returned), and check
 * the rest: the poison set aside, counted, shown by `shoal dump`, every
 * other message handled; the last process is alive and well.
 */
static unsigned poison_run(const char *system, struct child *c)
{
	unsigned crashes = SHOAL__CRASHES_MAX;
	struct child prod = { .index = 1, .name = "prod", .n = POISON_N, .type = T_PING };
	uint64_t handled = 0, lost, aside;
	struct shoal_envelope env;
	const char *dump_args[] = { "dump", "--json", rt_sysname, "poison", NULL };
	struct tool_run r;
	char want[64];
	uint32_t kept_crashes;
	unsigned died = 0;
	struct msg v;
	pid_t pc;
	int id;

	memset((void *)seen, 0, FW_N);
	id = start_consumer(system, poison_main, c, 1, 1, &pc);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	/* All delivered: an on_batch group takes batches now (poison_batch()). */
	for (int i = 0; i < 30000; i++) {
		uint64_t delivered, full;

		group_drops(id, &delivered, &full);
		if (delivered >= POISON_N)
			break;
		usleep(1000);
	}
	atomic_store(&rt_res->go, 1);
	while (died < crashes) {
		int status = test_wait_pid(pc, 10000);

		assert_true(status != -1 && WIFSIGNALED(status));   /* died of message 5 */
		/* A batch that the poison killed, not as its first message:
		 * one more crash (below). */
		if (died++ == 0 && c->mode == 1 && atomic_load(&rt_res->per_actor[0][2]) > 1)
			crashes++;
		for (int i = 0; i < 5000 && shoal_router_group_pid(rt_router, id) != 0; i++)
			usleep(1000);
		pc = test_spawn(poison_main, c, sizeof(*c));
	}
	for (int i = 0; i < 1000 && handled < POISON_N - 1; i++) {
		tally("poison", &handled, &lost, &aside);
		usleep(10000);
	}
	tally("poison", &handled, &lost, &aside);
	assert_int_equal(handled, POISON_N - 1);
	assert_int_equal(atomic_load(&seen[POISON_SEQ]), 0);
	assert_int_equal(aside, 1);
	aside_of("poison", &kept_crashes, &env, &v);
	assert_int_equal(kept_crashes, SHOAL__CRASHES_MAX);
	assert_int_equal(env.type, T_PING);
	assert_int_equal(v.seq, POISON_SEQ);
	/* What `shoal dump` shows of it. */
	if (tool_bin == NULL)
		fail_msg("SHOAL_BIN must name the shoal binary (tests/meson.build sets it)");
	tool_expect(&r, 0, dump_args);
	snprintf(want, sizeof(want), "\"crashes\": %u", SHOAL__CRASHES_MAX);
	assert_has(r.out, "\"set_aside\": [");
	assert_has(r.out, want);
	assert_has(r.out, "\"type_name\": \"ping\"");
	tool_free(&r);
	rt_stop_and_reap(&pc, 1);
	rt_stop_router();
	return died;
}

/*
 * A message that kills its handler is handled again by each new process
 * (it may have been the process's fault, not the message's), until
 * SHOAL__CRASHES_MAX of them died of it: the next sets it aside, counted,
 * keeps a copy that `shoal dump` shows, and handles the rest.
 */
static void runtime_message_that_keeps_crashing_its_handler_is_set_aside(void **state)
{
	struct child c = { .index = 0, .name = "poison" };

	(void)state;
	atomic_store(&rt_res->go, 1);
	poison_run("fl-poison", &c);
	assert_int_equal(atomic_load(&rt_res->per_actor[0][1]), SHOAL__CRASHES_MAX);
}

/*
 * The same with on_batch: the batch the poison killed is marked by its
 * first message, so the next process takes that one and the batch's length
 * after it alone, through on_message, where the poison kills again with its
 * own mark; then SHOAL__CRASHES_MAX crashes in all on it, as above. One
 * crash more than without batches, unless the poison was its batch's
 * first; never a harmless message set aside in its place.
 */
static void runtime_message_that_crashes_a_batch_is_found_and_set_aside(void **state)
{
	struct child c = { .index = 0, .name = "poison", .mode = 1 };
	unsigned died, at;

	(void)state;
	died = poison_run("fl-poisonb", &c);
	at = (unsigned)atomic_load(&rt_res->per_actor[0][2]);
	print_message("%u crashes: %llu in a batch (the poison its message #%u), %llu alone\n",
		      died, (unsigned long long)atomic_load(&rt_res->per_actor[0][0]), at,
		      (unsigned long long)atomic_load(&rt_res->per_actor[0][1]));
	assert_int_equal(atomic_load(&rt_res->per_actor[0][0]), 1);
	assert_true(at >= 1);
	assert_int_equal(died, SHOAL__CRASHES_MAX + (at > 1 ? 1 : 0));
	assert_int_equal(atomic_load(&rt_res->per_actor[0][1]), died - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		RT_CASE(runtime_blocking_send_waits_for_slow_consumer),
		RT_CASE(runtime_try_send_drops_are_counted_never_silent),
		RT_CASE(runtime_killed_group_queue_is_handled_by_its_next_process),
		RT_CASE(runtime_in_group_routing_over_two_workers),
		RT_CASE(runtime_direct_send_reaches_actor_and_group),
		RT_CASE(runtime_blocking_send_to_failed_target_returns_ehostdown),
		RT_CASE(runtime_killed_two_worker_group_counts_lost_forwards),
		RT_CASE(runtime_killed_two_worker_group_with_batches_counts_lost_forwards),
		RT_CASE(runtime_message_that_keeps_crashing_its_handler_is_set_aside),
		RT_CASE(runtime_message_that_crashes_a_batch_is_found_and_set_aside),
	};

	rt_init();
	tool_bin = getenv("SHOAL_BIN");
	seen = mmap(NULL, FW_N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (seen == MAP_FAILED)
		abort();
	signal(SIGPIPE, SIG_IGN);
	if (getenv("SHOAL_TEST_FILTER") != NULL)   /* one test, by name pattern */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
