/* SPDX-License-Identifier: MIT */
/*
 * Routes change at run time while traffic flows at full speed: the test
 * thread adds and removes a route hundreds of times (each a full publish:
 * new vector, pointer swap, grace period, free) while the dispatcher routes
 * a producer's stream. The route that never changes must deliver every
 * message exactly once and in order; the flapping one must deliver a
 * strictly increasing subsequence. Run under the tsan setup (suite stress),
 * it also checks that no dispatcher reads a freed vector.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/router.h>

#include "tests/rtutil.h"
#include "tests/testutil.h"

static void increasing_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	const struct child *c = a->user;
	uint64_t *last = a->state;
	struct msg v;

	memcpy(&v, m->data, sizeof(v));
	if (*last != UINT64_MAX && v.seq <= *last)
		atomic_fetch_add(&rt_res->order_errors[c->index], 1);
	*last = v.seq;
	atomic_fetch_add(&rt_res->count[c->index], 1);
}

static int last_start(struct shoal_actor *a)
{
	uint64_t *last = malloc(sizeof(*last));

	*last = UINT64_MAX;
	a->state = last;
	return last == NULL;
}

static int flappy_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = { .name = c->name, .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = increasing_handler, .on_start = last_start,
				      .node = -1, .user = c };
	struct shoal_group *g;

	if (shoal_group_attach(&g, &d, NULL, NULL) < 0)
		return 10;
	shoal_group_run(g);
	shoal_group_detach(g);
	return atomic_load(&rt_res->order_errors[c->index]) == 0 ? 0 : 1;
}

static void router_routes_change_while_traffic_flows(void **state)
{
	struct child steady = { .index = 0, .name = "steady", .mode = 1 };
	struct child flappy = { .index = 1, .name = "flappy" };
	struct child prod = { .index = 2, .name = "prod", .n = test_scale(300000), .type = T_PING };
	pid_t pids[2], pp;
	int ids[2], changes = 0, status;
	uint64_t sent = 0;

	(void)state;
	assert_int_equal(rt_start_router("churn", NULL, 0), 0);
	ids[0] = rt_declare("steady", 1, 1);
	ids[1] = rt_declare("flappy", 1, 1);
	rt_declare("prod", 1, 1);
	rt_route(ids[0], T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pids[0] = test_spawn(rt_consumer_main, &steady, sizeof(steady));
	pids[1] = test_spawn(flappy_main, &flappy, sizeof(flappy));
	rt_wait_attached(ids[0]);
	rt_wait_attached(ids[1]);
	/* Streams of prod.n, numbered on, until the routes changed more than
	 * 10 times during them: how many changes fit in one stream depends on
	 * the machine (and a sanitizer) more than on the runtime. */
	for (int stream = 0; changes <= 10; stream++) {
		assert_true(stream < 100);
		prod.first = (uint64_t)stream * prod.n;
		pp = test_spawn(rt_producer_main, &prod, sizeof(prod));
		while (test_try_wait(pp, &status) == 0) {
			uint32_t id = rt_route(ids[1], T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY,
					       0, 0);

			usleep(200);
			assert_int_equal(shoal_router_remove_route(rt_router, id), 0);
			changes++;
			assert_true(changes < 1000000);
		}
		test_assert_exited(status, 0);
		sent += prod.n;
	}
	print_message("%d route changes during %llu messages\n", changes,
		      (unsigned long long)sent);
	rt_wait_count(0, sent, 60000);
	print_message("flapping route delivered %llu of %llu\n",
		      (unsigned long long)atomic_load(&rt_res->count[1]),
		      (unsigned long long)sent);
	rt_stop_and_reap(pids, 2);
	rt_stop_router();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(router_routes_change_while_traffic_flows),
	};

	rt_init();
	signal(SIGPIPE, SIG_IGN);
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
