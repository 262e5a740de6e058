/* SPDX-License-Identifier: MIT */
/*
 * The calls of shoal/group.h that the other runtime tests leave out, each
 * across real processes: this test process runs the router (and, where the
 * call is the router's or the asker's, a group of its own); the groups under
 * test are forked children (tests/rtutil.h). Every wait is bounded and waits
 * for a count, never for time to pass.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/router.h>

#include "runtime/layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"

#define WAIT_MS 30000

/* What the subscriber and the responder report, beside rt_res. */
struct api_res {
	_Atomic uint64_t by_type[8];     /* messages the subscriber handled, per type */
	_Atomic uint32_t cmd;            /* the test's order to the subscriber */
	_Atomic uint32_t ack;            /* the last order it carried out */
	_Atomic int32_t status[4];       /* what its calls returned */
	_Atomic int32_t eagain;          /* reservations a full ring refused */
	_Atomic uint64_t self, actor, sender;   /* seen by self_handler */
};

static struct api_res *api;

static void wait_u64(_Atomic uint64_t *v, uint64_t want, const char *what)
{
	for (int i = 0; i < WAIT_MS && atomic_load(v) < want; i++)
		usleep(1000);
	if (atomic_load(v) != want)
		fail_msg("%s: %llu, expected %llu", what, (unsigned long long)atomic_load(v),
			 (unsigned long long)want);
}

/* The counters of worker 0 of group `name`, from its mailbox. */
static void worker_counters(const char *name, struct shoal__mbx_worker *out)
{
	struct shoal_seg seg;
	struct shoal__mbx_hdr *h;

	rt_mailbox_map(name, &seg);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	memcpy(out, &h->w[0], sizeof(*out));
	shoal_seg_detach(&seg);
}

/* ---- zero-copy sends ----------------------------------------------------- */

/*
 * Child: sends c->n messages (seq 0, 1, ...) with shoal_reserve() and
 * shoal_commit(), routed (c->mode 0) or to actor 0 of "sink" (1). On the way it
 * checks what the contract promises: an oversized reservation fails and
 * leaves none behind, a second reservation before the commit is refused
 * without touching the first, a commit with nothing reserved does nothing.
 */
static int zero_copy_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t dest = SHOAL_ADDR_NONE;
	int32_t eagain = 0;
	void *buf, *again;

	g = rt_child_attach(c, NULL, rt_count_handler);
	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	if (c->mode == 1) {
		dest = shoal_group_lookup(g, "sink", 0);
		CHILD_CHECK(dest != SHOAL_ADDR_NONE);
	}
	CHILD_CHECK(shoal_reserve(ctx, dest, T_PING, 65, &buf) == -EMSGSIZE);
	shoal_commit(ctx);
	for (uint64_t i = 0; i < c->n; i++) {
		struct msg v = { .seq = i, .from = (uint32_t)c->index, .key = i };
		int ret = shoal_reserve(ctx, dest, T_PING, sizeof(v), &buf);

		if (ret == -EAGAIN) {
			/* Full: reserve never waits; the router or the sink makes room. */
			eagain++;
			i--;
			usleep(100);
			continue;
		}
		CHILD_CHECK(ret == 0);
		if (i == 0) {
			again = NULL;
			CHILD_CHECK(shoal_reserve(ctx, dest, T_PING, sizeof(v), &again) == -EBUSY);
			CHILD_CHECK(again == NULL);
		}
		memcpy(buf, &v, sizeof(v));
		shoal_commit(ctx);
	}
	shoal_commit(ctx);
	atomic_store(&api->eagain, eagain);
	shoal_group_detach(g);
	return 0;
}

struct zc_variant {
	const char *system;
	bool direct;
};

static const struct zc_variant zc_routed = { "ga-zc-routed", false };
static const struct zc_variant zc_direct = { "ga-zc-direct", true };

/* 8000 records of 96 bytes (header, envelope, struct msg) fit in 1 MiB. */
static const struct shoal_group_spec sink_spec = { .name = "sink", .node = -1,
						   .inbound_capacity = 1u << 20 };

static void group_reserve_commit_delivers_intact_and_counts(void **state)
{
	const struct zc_variant *v = *state;
	struct child sink = { .index = 0, .name = "sink", .mode = 1 };   /* strict order */
	struct child zc = { .index = 1, .name = "zc", .n = test_scale(8000),
			    .mode = v->direct ? 1 : 0 };
	struct shoal_router_stats st;
	struct shoal__mbx_worker w;
	pid_t pid;
	int id;

	assert_int_equal(rt_start_router(v->system, NULL, 0), 0);
	/* A routed reservation is a try_send: a copy that finds the sink's
	 * inbound ring full is dropped (and counted). Room for every message
	 * makes the count exact. */
	id = shoal_router_group(rt_router, &sink_spec, NULL);
	assert_true(id >= 0);
	rt_declare("zc", 1, 1);
	if (!v->direct)
		rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pid = test_spawn(rt_consumer_main, &sink, sizeof(sink));
	rt_wait_attached(id);
	test_assert_exited(test_wait_pid(test_spawn(zero_copy_main, &zc, sizeof(zc)), 60000), 0);
	/* Every message once, in order: the sink's handler checks that each
	 * seq is the one after the last. */
	rt_wait_count(0, zc.n, WAIT_MS);
	assert_int_equal(atomic_load(&rt_res->order_errors[0]), 0);
	/* Counted as sent by the sender, as try_ failures only when refused. */
	worker_counters("zc", &w);
	assert_int_equal(atomic_load(v->direct ? &w.sent_direct : &w.sent_routed), zc.n);
	assert_int_equal(atomic_load(v->direct ? &w.sent_routed : &w.sent_direct), 0);
	assert_int_equal(atomic_load(&w.try_failed), 1 + atomic_load(&api->eagain));
	/* And by the router: its dispatcher publishes its counters when idle. */
	for (int i = 0; i < WAIT_MS; i++) {
		shoal_router_stats(rt_router, &st);
		if (st.handled >= zc.n && (v->direct || st.delivered >= zc.n))
			break;
		usleep(1000);
	}
	assert_int_equal(st.routed, v->direct ? 0 : zc.n);
	assert_int_equal(st.delivered, v->direct ? 0 : zc.n);
	assert_int_equal(st.sent_direct, v->direct ? zc.n : 0);
	assert_int_equal(st.handled, zc.n);
	assert_int_equal(st.dropped, 0);
	rt_stop_and_reap(&pid, 1);
	rt_stop_router();
}

/* ---- subscribing at run time ------------------------------------------------ */

/* Counts what it handles per type, reading payloads with SHOAL_MSG_GET. */
static void subscriber_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v;

	(void)a;
	if (SHOAL_MSG_GET(m, T_PING, &v) || SHOAL_MSG_GET(m, T_PONG, &v))
		atomic_fetch_add(&api->by_type[m->type], 1);
}

static struct shoal_filter filter_of(uint32_t type)
{
	struct shoal_filter f = { .types = { type }, .n_types = 1, .mode = SHOAL_ROUTE_GROUP };

	return f;
}

/*
 * Child "subber": attaches with no route, subscribes to T_PING and T_PONG,
 * then polls and carries out the test's orders: 1 unsubscribe T_PING, 2
 * subscribe to it again. Each order's results go to api->status.
 */
static int subscriber_main(void *arg)
{
	struct child *c = arg;
	struct shoal_filter ping = filter_of(T_PING), pong = filter_of(T_PONG);
	struct shoal_filter bad = filter_of(T_PING);
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint32_t ping_id = 0, pong_id = 0, id;
	int ret;

	g = rt_child_attach(c, "subber", subscriber_handler);
	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	bad.n_types = 0;
	CHILD_CHECK(shoal_subscribe(ctx, &bad, &id) == -EINVAL);
	CHILD_CHECK(shoal_unsubscribe(ctx, 12345) == -ENOENT);
	CHILD_CHECK(shoal_subscribe(ctx, &ping, &ping_id) == 0 && ping_id != 0);
	CHILD_CHECK(shoal_subscribe(ctx, &pong, &pong_id) == 0 && pong_id != ping_id);
	atomic_store(&rt_res->ready[c->index], 1);
	for (;;) {
		uint32_t cmd = atomic_load(&api->cmd);

		if (cmd == 1 && atomic_load(&api->ack) == 0) {
			atomic_store(&api->status[0], shoal_unsubscribe(ctx, ping_id));
			atomic_store(&api->ack, 1);
		} else if (cmd == 2 && atomic_load(&api->ack) == 1) {
			/* The old id is gone for good. */
			atomic_store(&api->status[1], shoal_unsubscribe(ctx, ping_id));
			atomic_store(&api->status[2], shoal_subscribe(ctx, &ping, &ping_id));
			atomic_store(&api->ack, 2);
		}
		ret = shoal_poll(ctx, 0, 10000000);
		if (ret < 0)
			break;
	}
	shoal_group_detach(g);
	return ret == -ESHUTDOWN ? 0 : 1;
}

/* Child "prod": c->n routed T_PING, then c->n T_PONG, from one uplink. */
static int ping_then_pong_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g;
	struct shoal_ctx *ctx;

	g = rt_child_attach(c, "prod", rt_count_handler);
	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	for (uint64_t i = 0; i < 2 * c->n; i++) {
		struct msg v = { .seq = i, .key = i };

		CHILD_CHECK(shoal_send(ctx, i < c->n ? T_PING : T_PONG, &v, sizeof(v)) == 0);
	}
	shoal_group_detach(g);
	return 0;
}

static void order(uint32_t cmd)
{
	atomic_store(&api->cmd, cmd);
	for (int i = 0; atomic_load(&api->ack) != cmd; i++) {
		assert_true(i < WAIT_MS);
		usleep(1000);
	}
}

/*
 * Unsubscribing stops one type while the others flow; subscribing again
 * resumes it. No wait on time: the producer sends its T_PINGs before its
 * T_PONGs through one uplink, one dispatcher and one inbound ring, so once
 * the subscriber has every T_PONG, any T_PING routed to it has arrived too.
 * A witness group keeps a route for T_PING throughout, so sends succeed.
 * The groups register when they attach: none is declared.
 */
static void group_unsubscribe_stops_one_type_and_subscribe_resumes_it(void **state)
{
	struct child subber = { .index = 0, .name = "subber" };
	struct child witness = { .index = 1, .name = "witness", .sub = filter_of(T_PING),
				 .has_sub = true };
	struct child prod = { .index = 2, .name = "prod", .n = test_scale(2000) };
	_Atomic uint64_t *ping = &api->by_type[T_PING], *pong = &api->by_type[T_PONG];
	uint64_t n = prod.n;
	pid_t pids[2];

	(void)state;
	assert_int_equal(rt_start_router("ga-sub", NULL, 0), 0);
	/* Both subscribe before they say ready: the witness at attach, from
	 * its descriptor, the subscriber at run time. */
	pids[0] = test_spawn(subscriber_main, &subber, sizeof(subber));
	pids[1] = test_spawn(rt_consumer_main, &witness, sizeof(witness));
	rt_wait_ready(2);

	test_assert_exited(test_wait_pid(test_spawn(ping_then_pong_main, &prod, sizeof(prod)),
					 60000), 0);
	wait_u64(pong, n, "subscribed: pongs");
	wait_u64(ping, n, "subscribed: pings");

	order(1);
	assert_int_equal(atomic_load(&api->status[0]), 0);
	test_assert_exited(test_wait_pid(test_spawn(ping_then_pong_main, &prod, sizeof(prod)),
					 60000), 0);
	wait_u64(pong, 2 * n, "unsubscribed from pings: pongs");
	assert_int_equal(atomic_load(ping), n);
	rt_wait_count(1, 2 * n, WAIT_MS);   /* the witness had them all */

	order(2);
	assert_int_equal(atomic_load(&api->status[1]), -ENOENT);
	assert_int_equal(atomic_load(&api->status[2]), 0);
	test_assert_exited(test_wait_pid(test_spawn(ping_then_pong_main, &prod, sizeof(prod)),
					 60000), 0);
	wait_u64(pong, 3 * n, "subscribed again: pongs");
	wait_u64(ping, 2 * n, "subscribed again: pings");
	rt_wait_count(1, 3 * n, WAIT_MS);
	rt_stop_and_reap(pids, 2);
	rt_stop_router();
}

/* ---- answering with an error ----------------------------------------------- */

/*
 * Answers a T_REQ with the error its key names (a positive key is passed
 * as is, so the call must turn it into -EINVAL); tries to answer a T_PING,
 * which is no request, and reports what that returned in api->status[3].
 */
static void error_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v;

	if (SHOAL_MSG_GET(m, T_PING, &v))
		atomic_store(&api->status[3], shoal_respond_error(a->ctx, m, -EPERM));
	else if (SHOAL_MSG_GET(m, T_REQ, &v))
		shoal_respond_error(a->ctx, m, (int)(int64_t)v.key);
}

static int error_responder_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g;
	int ret;

	g = rt_child_attach(c, "responder", error_handler);
	if (g == NULL)
		return 10;
	ret = shoal_group_run(g);
	shoal_group_detach(g);
	return ret == 0 ? 0 : 1;
}

static void group_respond_error_is_what_the_request_returns(void **state)
{
	static const int64_t answers[][2] = {   /* the responder's argument, what request says */
		{ -EPERM, -EPERM },
		{ -ENOSPC, -ENOSPC },
		{ -EHOSTDOWN, -EHOSTDOWN },
		{ -ETIMEDOUT, -ETIMEDOUT },  /* the responder's, told from our own */
		{ EPERM, -EINVAL },          /* not a negative errno */
	};
	struct child resp = { .index = 0, .name = "responder" };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	struct shoal__mbx_worker w;
	uint64_t dest;
	pid_t pid;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("ga-resperr", NULL, 0), 0);
	id = rt_declare("responder", 1, 1);
	atomic_store(&api->status[3], 1);
	pid = test_spawn(error_responder_main, &resp, sizeof(resp));
	rt_wait_attached(id);
	g = rt_attach_here("asker", 1, 1);
	ctx = shoal_group_worker(g, 0);
	dest = shoal_group_lookup(g, "responder", 0);
	assert_int_not_equal(dest, SHOAL_ADDR_NONE);
	for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
		struct msg v = { .seq = i, .key = (uint64_t)answers[i][0] }, out = { 0 };
		struct shoal_reply reply = { .buf = &out, .cap = sizeof(out) };

		assert_int_equal(shoal_request(ctx, dest, T_REQ, &v, sizeof(v), 20000000000ll,
					       &reply), answers[i][1]);
		assert_true(reply.from_responder);
	}
	/* An error of the requester's own: not from the responder. */
	{
		struct msg v = { 0 }, out = { 0 };
		struct shoal_reply reply = { .buf = &out, .cap = sizeof(out), .from_responder = true };

		assert_int_equal(shoal_request(ctx, shoal_addr_make(200, 0, 1), T_REQ, &v,
					       sizeof(v), 20000000000ll, &reply), -EINVAL);
		assert_false(reply.from_responder);
	}
	/*
	 * A message that is no request cannot be answered. It also tells when
	 * the responder is done with the last request: the -ECANCELED it would
	 * owe a request it had not answered goes out before it takes this one.
	 */
	assert_int_equal(shoal_send_to(ctx, dest, T_PING, &(struct msg){ 0 }, sizeof(struct msg)),
			 0);
	for (int i = 0; atomic_load(&api->status[3]) == 1; i++) {
		assert_true(i < WAIT_MS);
		usleep(1000);
	}
	assert_int_equal(atomic_load(&api->status[3]), -EINVAL);
	/* Each error was the only answer to its request: nothing late. */
	assert_true(shoal_poll(ctx, 0, 0) >= 0);
	worker_counters("asker", &w);
	assert_int_equal(atomic_load(&w.discarded), 0);
	assert_int_equal(atomic_load(&w.received), sizeof(answers) / sizeof(answers[0]));
	shoal_group_detach(g);
	rt_stop_and_reap(&pid, 1);
	rt_stop_router();
}

/* ---- the router's names ---------------------------------------------------- */

static void router_group_id_names_declared_and_attached_groups(void **state)
{
	struct shoal_group *g;
	int alpha, beta, late;

	(void)state;
	assert_int_equal(rt_start_router("ga-gid", NULL, 0), 0);
	alpha = rt_declare("alpha", 1, 1);
	beta = rt_declare("beta", 2, 4);
	assert_int_not_equal(alpha, beta);
	assert_int_equal(shoal_router_group_id(rt_router, "alpha"), alpha);
	assert_int_equal(shoal_router_group_id(rt_router, "beta"), beta);
	assert_int_equal(shoal_router_group_id(rt_router, "gamma"), -ENOENT);
	assert_int_equal(shoal_router_group_id(rt_router, NULL), -EINVAL);
	assert_int_equal(shoal_router_group_id(rt_router, ""), -ENOENT);
	assert_int_equal(shoal_router_group_id(rt_router, "alph"), -ENOENT);
	/* A group the router learns of when its process attaches, and frees
	 * once that process left (its watch thread looks every 50 ms). */
	g = rt_attach_here("late", 1, 1);
	late = shoal_router_group_id(rt_router, "late");
	assert_int_equal(late, shoal_group_id(g));
	shoal_group_detach(g);
	for (int i = 0; i < 30000 && shoal_router_group_id(rt_router, "late") == late; i++)
		usleep(1000);
	assert_int_equal(shoal_router_group_id(rt_router, "late"), -ENOENT);
	rt_stop_router();
}

/* ---- changing the routes as a whole ------------------------------------------ */

/*
 * set_routes replaces the routes the router was given, in one publish, and
 * leaves those the groups subscribed themselves. "pongs" had a route for
 * T_PING that the new set drops; "pings" subscribed to T_PING at attach.
 * The producer sends seq 0 .. n-1 as T_PING, then n .. 2n-1 as T_PONG, one
 * path, in order: when "pongs" has n messages, they are the T_PONGs only
 * if the last is 2n - 1 (a T_PING to it would have come first).
 */
static void router_set_routes_replaces_given_routes_keeps_subscriptions(void **state)
{
	struct child pongs = { .index = 0, .name = "pongs" };
	struct child pings = { .index = 1, .name = "pings", .sub = filter_of(T_PING),
			       .has_sub = true };
	struct child prod = { .index = 2, .n = test_scale(2000) };
	struct shoal_filter bad = filter_of(T_PONG), set;
	struct shoal_router_stats st;
	struct shoal_err err = { { 0 } };
	uint64_t n = prod.n;
	pid_t pids[2];
	int id;

	(void)state;
	assert_int_equal(rt_start_router("ga-setr", NULL, 0), 0);
	id = rt_declare("pongs", 1, 1);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pids[0] = test_spawn(rt_consumer_main, &pongs, sizeof(pongs));
	pids[1] = test_spawn(rt_consumer_main, &pings, sizeof(pings));
	rt_wait_ready(2);
	set = filter_of(T_PONG);
	set.group = (uint16_t)id;
	bad.n_types = 0;
	assert_int_equal(shoal_router_set_routes(rt_router, &bad, 1, &err), -EINVAL);
	assert_true(err.msg[0] != '\0');
	shoal_router_stats(rt_router, &st);
	assert_int_equal(st.routes, 2);   /* nothing changed: the given one, the subscribed one */
	assert_int_equal(shoal_router_set_routes(rt_router, &set, 1, NULL), 0);
	shoal_router_stats(rt_router, &st);
	assert_int_equal(st.routes, 2);   /* the new given one, the subscribed one */
	test_assert_exited(test_wait_pid(test_spawn(ping_then_pong_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(1, n, WAIT_MS);
	assert_int_equal(atomic_load(&rt_res->last_seq[1]), n - 1);
	rt_wait_count(0, n, WAIT_MS);
	assert_int_equal(atomic_load(&rt_res->last_seq[0]), 2 * n - 1);
	assert_int_equal(atomic_load(&rt_res->sum_seq[0]), n * (3 * n - 1) / 2);
	rt_stop_and_reap(pids, 2);
	rt_stop_router();
}

/* ---- holding dispatch ------------------------------------------------------- */

/* The dispatchers' published sleeps and messages taken from uplinks. */
static void disp_counters(uint64_t *sleeps, uint64_t *taken)
{
	struct shoal__registry reg;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	*sleeps = 0;
	*taken = 0;
	for (int d = 0; d < SHOAL_MAX_NODES; d++) {
		*sleeps += atomic_load(&reg.hdr->disp[d].sleeps);
		*taken += atomic_load(&reg.hdr->disp[d].messages);
	}
	shoal_seg_detach(&reg.seg);
}

/* A router, group `spec` with T_PING routed to it in its own process
 * (`sink`), attached, and a group "src" attached here (*g). Returns the
 * sink's pid. */
static pid_t sink_and_source(const char *sys, const struct shoal_group_spec *spec,
			     struct child *sink, struct shoal_group **g)
{
	pid_t pid;
	int id;

	assert_int_equal(rt_start_router(sys, NULL, 0), 0);
	id = shoal_router_group(rt_router, spec, NULL);
	assert_true(id >= 0);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pid = test_spawn(rt_consumer_main, sink, sizeof(*sink));
	rt_wait_attached(id);
	*g = rt_attach_here("src", 1, 1);
	return pid;
}

/*
 * While held, routed messages stay in the uplink. Told by the order of the
 * dispatcher's own counters, not by time: it publishes them at the top of
 * each idle pass, so once two more sleeps are published than when the
 * uplink was full, it has since decided to sleep with the uplink not empty
 * (the dispatcher's loop). Unheld it would have drained every message first
 * (the sink has room for all); held it has taken at most what a pass
 * already under way when the hold began could.
 */
static void router_hold_leaves_routed_messages_in_the_uplink(void **state)
{
	struct child sink = { .index = 1, .name = "sink" };
	struct shoal_router_stats st;
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	struct msg v = { 0 };
	uint64_t sent = 0, sleeps0, sleeps, taken;
	pid_t pid;
	int ret;

	(void)state;
	pid = sink_and_source("ga-hold", &sink_spec, &sink, &g);
	ctx = shoal_group_worker(g, 0);
	shoal_router_hold(rt_router, true);
	while ((ret = shoal_try_send(ctx, T_PING, &v, sizeof(v))) == 0 && sent < 100000)
		v.seq = ++sent;
	assert_int_equal(ret, -EAGAIN);
	disp_counters(&sleeps0, &taken);
	for (int i = 0; disp_counters(&sleeps, &taken), sleeps < sleeps0 + 2; i++) {
		assert_true(i < WAIT_MS);
		usleep(1000);
	}
	print_message("held: %llu of %llu messages taken\n", (unsigned long long)taken,
		      (unsigned long long)sent);
	assert_true(taken < sent);
	shoal_router_hold(rt_router, false);
	rt_wait_count(1, sent, WAIT_MS);
	shoal_router_stats(rt_router, &st);
	assert_int_equal(st.dropped, 0);
	shoal_group_detach(g);
	rt_stop_and_reap(&pid, 1);
	rt_stop_router();
}

/*
 * A backlog of 600 routed messages (the router held while the sender
 * filled its uplink, which holds 744) for one group whose process is
 * stopped and whose inbound ring holds 186 of them: the dispatcher's first
 * pass (up to 256 records, routed 64 at a time) fills the ring and parks on
 * the record that does not fit, in its third chunk, and gives back every
 * record from that one on, peeking again the 186 it took. Continued, the
 * group gets each message once, in order, and the dispatcher took exactly
 * 600.
 */
static void router_backlog_parked_mid_pass_delivers_each_once_in_order(void **state)
{
	static const struct shoal_group_spec small = { .name = "sink", .node = -1,
						       .inbound_capacity = 16384 };
	struct child sink = { .index = 1, .name = "sink", .mode = 1 };   /* strict order */
	struct shoal_router_stats st;
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	struct msg v = { 0 };
	uint64_t sleeps0, sleeps, taken0, taken, n = 600;
	pid_t pid;

	(void)state;
	pid = sink_and_source("ga-park", &small, &sink, &g);
	kill(pid, SIGSTOP);
	ctx = shoal_group_worker(g, 0);
	disp_counters(&sleeps0, &taken0);
	shoal_router_hold(rt_router, true);
	/* send(), not try_send(): a copy for a full group waits (a try_
	 * copy would be dropped and counted). */
	for (v.seq = 0; v.seq < n; v.seq++)
		assert_int_equal(shoal_send(ctx, T_PING, &v, sizeof(v)), 0);
	shoal_router_hold(rt_router, false);
	/* Parked: the dispatcher sleeps between its retries, and has taken
	 * what the stopped group's ring holds. */
	for (int i = 0; disp_counters(&sleeps, &taken), sleeps < sleeps0 + 3 || taken == taken0;
	     i++) {
		assert_true(i < WAIT_MS);
		usleep(1000);
	}
	print_message("parked after %llu of %llu messages\n",
		      (unsigned long long)(taken - taken0), (unsigned long long)n);
	assert_true(taken - taken0 < n);
	kill(pid, SIGCONT);
	rt_wait_count(1, n, WAIT_MS);
	assert_int_equal(atomic_load(&rt_res->order_errors[1]), 0);
	/* The dispatcher publishes what it took on its next pass, which may
	 * come after the sink handled the last message: wait for it too. */
	for (int i = 0; i < WAIT_MS && (disp_counters(&sleeps, &taken), taken - taken0 < n); i++)
		usleep(1000);
	assert_int_equal(taken - taken0, n);
	shoal_router_stats(rt_router, &st);
	assert_int_equal(st.dropped, 0);
	shoal_group_detach(g);
	rt_stop_and_reap(&pid, 1);
	rt_stop_router();
}

/* ---- stopping one group ----------------------------------------------------- */

static void router_stop_group_stops_that_group_only(void **state)
{
	struct child kids[2] = { { .index = 0, .name = "a" }, { .index = 1, .name = "b" } };
	pid_t pids[2];
	int ids[2];

	(void)state;
	assert_int_equal(rt_start_router("ga-stop1", NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		ids[i] = rt_declare(kids[i].name, 1, 1);
		pids[i] = test_spawn(rt_consumer_main, &kids[i], sizeof(kids[i]));
		rt_wait_attached(ids[i]);
	}
	assert_int_equal(shoal_router_stop_group(rt_router, 200), -ENOENT);
	assert_int_equal(shoal_router_stop_group(rt_router, -1), -ENOENT);
	assert_int_equal(shoal_router_stop_group(rt_router, ids[0]), 0);
	test_assert_exited(test_wait_pid(pids[0], WAIT_MS), 0);
	for (int i = 0; i < 1000 && shoal_router_group_pid(rt_router, ids[0]) != 0; i++)
		shoal_router_wait_change(rt_router, 10000000);
	assert_int_equal(shoal_router_group_pid(rt_router, ids[0]), 0);
	assert_int_equal(shoal_router_group_pid(rt_router, ids[1]), pids[1]);
	rt_stop_and_reap(&pids[1], 1);
	rt_stop_router();
}

/* ---- the worker's own address, and stopping from another thread ----------- */

static void self_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	atomic_store(&api->self, shoal_ctx_self(a->ctx));
	atomic_store(&api->actor, a->addr);
	atomic_store(&api->sender, m->env->sender);
}

static struct shoal_group *attach_self_group(void)
{
	static struct child c = { .index = 0 };

	return rt_child_attach(&c, "selfie", self_handler);
}

static void group_ctx_self_is_the_actor_in_a_handler_else_the_group(void **state)
{
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t group_addr, a1;

	(void)state;
	assert_int_equal(rt_start_router("ga-self", NULL, 0), 0);
	rt_declare("selfie", 1, 2);
	g = attach_self_group();
	assert_non_null(g);
	ctx = shoal_group_worker(g, 0);
	group_addr = shoal_addr_make((uint16_t)shoal_group_id(g), SHOAL_SLOT_GROUP,
				     shoal_group_generation(g));
	a1 = shoal_group_lookup(g, "selfie", 1);
	assert_int_equal(shoal_ctx_self(ctx), group_addr);
	assert_int_equal(shoal_send_to(ctx, a1, T_PING, &(struct msg){ 0 }, sizeof(struct msg)),
			 0);
	assert_int_equal(shoal_poll(ctx, 0, 0), 1);
	assert_int_equal(atomic_load(&api->self), a1);
	assert_int_equal(atomic_load(&api->actor), a1);
	assert_int_equal(atomic_load(&api->sender), group_addr);   /* sent from outside */
	assert_int_equal(shoal_ctx_self(ctx), group_addr);          /* the handler returned */
	shoal_group_detach(g);
	rt_stop_router();
}

static void *run_thread(void *arg)
{
	return (void *)(intptr_t)shoal_group_run(arg);
}

static void group_stop_from_another_thread_ends_run(void **state)
{
	struct shoal_group *g;
	pthread_t th;
	void *ret;

	(void)state;
	assert_int_equal(rt_start_router("ga-gstop", NULL, 0), 0);
	g = attach_self_group();
	assert_non_null(g);
	assert_int_equal(pthread_create(&th, NULL, run_thread, g), 0);
	shoal_group_stop(g);
	shoal_group_stop(g);   /* twice is once */
	assert_int_equal(pthread_join(th, &ret), 0);
	assert_int_equal((intptr_t)ret, 0);
	shoal_group_detach(g);
	rt_stop_router();
}

static int reset(void **state)
{
	(void)state;
	memset(api, 0, sizeof(*api));
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		{ "group_reserve_commit_routed_delivers_intact_and_counts",
		  group_reserve_commit_delivers_intact_and_counts, reset, NULL,
		  (void *)&zc_routed },
		{ "group_reserve_commit_direct_delivers_intact_and_counts",
		  group_reserve_commit_delivers_intact_and_counts, reset, NULL,
		  (void *)&zc_direct },
		cmocka_unit_test_setup(group_unsubscribe_stops_one_type_and_subscribe_resumes_it,
				       reset),
		cmocka_unit_test_setup(group_respond_error_is_what_the_request_returns, reset),
		cmocka_unit_test_setup(router_group_id_names_declared_and_attached_groups, reset),
		cmocka_unit_test_setup(router_set_routes_replaces_given_routes_keeps_subscriptions,
				       reset),
		cmocka_unit_test_setup(router_stop_group_stops_that_group_only, reset),
		cmocka_unit_test_setup(router_hold_leaves_routed_messages_in_the_uplink, reset),
		cmocka_unit_test_setup(router_backlog_parked_mid_pass_delivers_each_once_in_order,
				       reset),
		cmocka_unit_test_setup(group_ctx_self_is_the_actor_in_a_handler_else_the_group,
				       reset),
		cmocka_unit_test_setup(group_stop_from_another_thread_ends_run, reset),
	};

	rt_init();
	api = mmap(NULL, sizeof(*api), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (api == MAP_FAILED)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
