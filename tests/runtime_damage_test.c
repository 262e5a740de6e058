/* SPDX-License-Identifier: MIT */
/*
 * Damage on a live system (DESIGN invariant 10): garbage written into one
 * group's inbound ring, one producer's uplink (indices or record data), or a
 * mailbox's header, directory or file name, while the victim is stopped or
 * down, while traffic flows, or while a sender waits for room. The damage
 * must be detected and counted once, logged by the router, shown by the
 * tools (exit status 1, "DAMAGED"), the ring or mailbox replaced, and every
 * other message accounted for exactly: handled, or counted as lost or
 * dropped. The router runs in this process; groups are forked children.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#define WAIT_MS 30000

/* ---- reading and damaging a group's segments ------------------------------- */

/* Index of directory entry `name` in a mailbox. */
static uint32_t dirent_of(struct shoal_seg *seg, const char *name)
{
	struct shoal_seg_region r;

	for (uint32_t i = 0; shoal_seg_region_at(seg, i, &r) == 0; i++)
		if (strcmp(r.name, name) == 0)
			return i;
	fail_msg("no directory entry %s", name);
	return 0;
}

/* ---- helpers ------------------------------------------------------------------- */

/* Garble the length of the record at the head of `ring`, as a stray write would. */
static void garble_head_record(struct shoal__ring *ring)
{
	unsigned char *data = (unsigned char *)ring + SHOAL__RING_DATA_OFF;
	uint32_t off = atomic_load(&ring->head) & (ring->capacity - 1), bad = 0x7fffff00;

	memcpy(data + off, &bad, sizeof(bad));
}

/* Start a consumer group process for `c` (declared already); wait for it. */
static pid_t start_consumer(struct child *c, int id)
{
	pid_t p = test_spawn(rt_consumer_main, c, sizeof(*c));

	rt_wait_attached(id);
	return p;
}

/* A router for system `sys` with consumer c0 (running) and producer `prod`. */
static int start_c0(const char *sys, struct child *c0, const char *prod, int *prod_id, pid_t *p)
{
	int id, pi;

	assert_int_equal(rt_start_router(sys, NULL, 0), 0);
	id = rt_declare("c0", 1, 1);
	pi = rt_declare(prod, 1, 1);
	if (prod_id != NULL)
		*prod_id = pi;
	*p = start_consumer(c0, id);
	return id;
}

/* A router for system `sys` with consumers cons[0] and cons[1] running, every
 * ping routed to both. */
static void start_pair(const char *sys, struct child cons[2], int ids[2], pid_t pids[2])
{
	assert_int_equal(rt_start_router(sys, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		ids[i] = rt_declare(cons[i].name, 1, 1);
		rt_route(ids[i], T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	}
	for (int i = 0; i < 2; i++)
		pids[i] = start_consumer(&cons[i], ids[i]);
}

/* Group `id` never noticed damage: none found, nothing lost or dropped. */
static void assert_undamaged(int id)
{
	struct rt_damage d;

	rt_damage_of(id, &d);
	assert_int_equal(d.damaged, 0);
	assert_int_equal(d.lost + d.dropped_corrupt, 0);
}

/* Kill group `id`'s process `p` and wait until the router has seen it go. */
static void kill_group(pid_t p, int id)
{
	kill(p, SIGKILL);
	assert_int_not_equal(test_wait_pid(p, 5000), -1);
	for (int i = 0; i < 5000 && shoal_router_group_pid(rt_router, id) != 0; i++)
		usleep(1000);
}

/* Wait (a while, not for good) until group `id` shows at least `lost`
 * messages lost and `delivered` delivered; *d holds the last look. */
static void wait_counts(int id, uint64_t lost, uint64_t delivered, struct rt_damage *d)
{
	for (int i = 0; i < WAIT_MS; i++) {
		rt_damage_of(id, d);
		if (d->lost >= lost && d->delivered >= delivered)
			return;
		usleep(1000);
	}
}

static void send_all(struct child *prod)
{
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, prod, sizeof(*prod)),
					 120000), 0);
}

/* Which sides condemned `ring` (SHOAL_RING_SIDE_*). */
static unsigned condemned_by(const struct shoal__ring *ring)
{
	return shoal_ring_condemned(ring, shoal_ring_size(ring->capacity));
}

/* Records committed to `ring` and taken from it, from its counters. */
static void ring_counts(const struct shoal__ring *ring, uint64_t *in, uint64_t *out)
{
	assert_int_equal(shoal_ring_records(ring, shoal_ring_size(ring->capacity), in, out), 0);
}

/* Bytes of one T_PING record in a ring whose head record is one. */
static uint32_t ping_record_bytes(const struct shoal__ring *ring)
{
	uint32_t len;

	memcpy(&len, (const unsigned char *)ring + SHOAL__RING_DATA_OFF +
		     (atomic_load(&ring->head) & (ring->capacity - 1)), sizeof(len));
	return (len + 15) & ~7u;
}

/* Wait until `ring` has no room left for a record of `rec` bytes. Its
 * records are all `rec` bytes and it was filled from offset 0 and never
 * released, so it has not wrapped: full is less than `rec` bytes free. */
static void wait_ring_full(const struct shoal__ring *ring, uint32_t rec)
{
	for (int i = 0; i < WAIT_MS && ring->capacity - (atomic_load(&ring->tail) -
							  atomic_load(&ring->head)) >= rec; i++)
		usleep(1000);
	assert_true(ring->capacity - (atomic_load(&ring->tail) - atomic_load(&ring->head)) < rec);
}

/* The line of `log` that says `what` also says `group` before it and
 * `then` after it. */
static void assert_log_line(const char *log, const char *what, const char *group,
			    const char *then)
{
	const char *at = strstr(log, what), *line, *end;

	if (at == NULL)
		fail_msg("no log line says \"%s\"", what);
	for (line = at; line > log && line[-1] != '\n'; line--)
		;
	end = strchr(at, '\n');
	if (end == NULL)
		end = at + strlen(at);
	if (!memmem(line, (size_t)(at - line), group, strlen(group)) ||
	    !memmem(at, (size_t)(end - at), then, strlen(then)))
		fail_msg("log line \"%.*s\" lacks \"%s\" or \"%s\"", (int)(end - line), line,
			 group, then);
}

/* ---- rings ------------------------------------------------------------------------ */

/*
 * A record length garbled in the inbound ring of c0 while it holds 200
 * messages, and the tail of prodB's idle uplink: c0's worker and the
 * dispatcher condemn them, the router replaces both; c0 loses exactly the
 * 200 (counted), prodB exactly what it wrote into its dead uplink before it
 * moved (counted), and every other message reaches every group.
 */
static void damage_corrupted_ring_and_uplink_are_replaced_others_never_notice(void **state)
{
	struct child cons[3] = {
		{ .index = 0, .name = "c0" }, { .index = 1, .name = "c1" },
		{ .index = 2, .name = "c2" },
	};
	struct child prodb = { .index = 3, .name = "prodB", .n = 3000, .type = T_PING,
			       .gated = true };
	struct child proda = { .index = 4, .name = "prodA", .n = 200, .type = T_PING };
	struct rt_damage d0, db, d1;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	pid_t pids[4];
	int ids[3], idb;
	uint64_t lost_b, both;

	(void)state;
	assert_int_equal(rt_start_router("dm-rings", NULL, 0), 0);
	for (int i = 0; i < 3; i++) {
		ids[i] = rt_declare(cons[i].name, 1, 1);
		rt_route(ids[i], T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	}
	idb = rt_declare("prodB", 1, 1);
	rt_declare("prodA", 1, 1);
	for (int i = 0; i < 3; i++)
		pids[i] = start_consumer(&cons[i], ids[i]);
	pids[3] = test_spawn(rt_producer_main, &prodb, sizeof(prodb));
	rt_wait_attached(idb);

	/* 200 messages wait in c0's inbound ring; garble the first one's length. */
	kill(pids[0], SIGSTOP);
	send_all(&proda);
	rt_wait_count(1, 200, WAIT_MS);
	wait_counts(ids[0], 0, 200, &d0);
	rt_mailbox_map("c0", &seg);
	ring = rt_ring_of(&seg, "in.0.d0");
	garble_head_record(ring);
	shoal_seg_detach(&seg);
	/* And the tail of prodB's idle uplink. */
	rt_mailbox_map("prodB", &seg);
	ring = rt_ring_of(&seg, "up.0");
	atomic_store(&ring->tail, atomic_load(&ring->head) + ring->capacity + 8);
	shoal_seg_detach(&seg);
	kill(pids[0], SIGCONT);

	rt_wait_damage(ids[0], 1, 1, &d0);
	rt_wait_damage(idb, 1, 1, &db);
	wait_counts(ids[0], 200, 0, &d0);
	assert_int_equal(d0.lost, 200);
	assert_int_equal(d0.dropped_corrupt, 0);
	rt_tools_say_damaged();

	/* Traffic goes on, through the new rings. */
	proda.first = 200;
	proda.n = 3000;
	send_all(&proda);
	atomic_store(&rt_res->go, 1);
	test_assert_exited(test_wait_pid(pids[3], 120000), 0);
	rt_damage_of(idb, &db);
	lost_b = db.lost;
	print_message("c0 lost %llu in its ring; prodB lost %llu in its uplink\n",
		      (unsigned long long)d0.lost, (unsigned long long)lost_b);
	assert_true(lost_b > 0 && lost_b < prodb.n);
	both = 3000 + prodb.n - lost_b;
	rt_wait_count(1, 200 + both, WAIT_MS);
	rt_wait_count(2, 200 + both, WAIT_MS);
	rt_wait_count(0, both, WAIT_MS);
	rt_damage_of(ids[1], &d1);
	assert_int_equal(d1.damaged, 0);
	rt_stop_and_reap(pids, 3);
	rt_stop_router();
}

/*
 * A garbage head in c0's inbound ring while c0 is stopped: the dispatcher
 * finds it when the ring runs full, drops (and counts) the copies for c0
 * instead of parking every sender on it, and the router gives c0 a new
 * ring. c1 gets every message; c0 gets every message not counted as dropped.
 */
static void damage_garbage_head_drops_counted_copies_never_parks(void **state)
{
	struct child c0 = { .index = 0, .name = "c0" }, c1 = { .index = 1, .name = "c1" };
	struct child prod = { .index = 2, .name = "prod", .n = 5000, .type = T_PING };
	struct rt_damage d0;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	pid_t pids[2], pp;
	int id0, id1;

	(void)state;
	assert_int_equal(rt_start_router("dm-head", NULL, 0), 0);
	id0 = rt_declare("c0", 1, 1);
	id1 = rt_declare("c1", 1, 1);
	rt_declare("prod", 1, 1);
	rt_route(id0, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	rt_route(id1, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pids[0] = start_consumer(&c0, id0);
	pids[1] = start_consumer(&c1, id1);
	kill(pids[0], SIGSTOP);
	rt_mailbox_map("c0", &seg);
	ring = rt_ring_of(&seg, "in.0.d0");
	atomic_store(&ring->head, atomic_load(&ring->head) + 4);
	shoal_seg_detach(&seg);
	pp = test_spawn(rt_producer_main, &prod, sizeof(prod));
	rt_wait_damage(id0, 1, 1, &d0);
	kill(pids[0], SIGCONT);
	test_assert_exited(test_wait_pid(pp, 120000), 0);
	rt_wait_count(1, prod.n, WAIT_MS);
	rt_damage_of(id0, &d0);
	print_message("c0: %llu copies dropped for its corrupted ring\n",
		      (unsigned long long)d0.dropped_corrupt);
	assert_true(d0.dropped_corrupt > 0);
	assert_int_equal(d0.lost, 0);
	rt_wait_count(0, prod.n - d0.dropped_corrupt, WAIT_MS);
	rt_tools_say_damaged();
	/* The new ring carries everything from now on. */
	prod.first = prod.n;
	prod.n = 2000;
	send_all(&prod);
	rt_wait_count(1, 5000 + 2000, WAIT_MS);
	rt_wait_count(0, 5000 + 2000 - d0.dropped_corrupt, WAIT_MS);
	rt_damage_of(id0, &d0);
	assert_int_equal(d0.dropped_corrupt, 5000 + 2000 - atomic_load(&rt_res->count[0]));
	rt_stop_and_reap(pids, 2);
	rt_stop_router();
}

/*
 * A garbled record in a direct ring holding 50 messages: the reader gives
 * the ring up; the next process of the sender gets a fresh ring from the
 * router, which counts the 50, and everything it sends arrives.
 */
static void damage_corrupted_direct_ring_is_replaced_for_its_sender(void **state)
{
	struct child c0 = { .index = 0, .name = "c0" };
	struct child ds = { .index = 1, .name = "ds", .n = 100, .type = T_PING };
	struct rt_damage d0;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	char name[SHOAL_SEG_REGION_NAME_MAX];
	pid_t p;
	int id0, ids;

	(void)state;
	id0 = start_c0("dm-direct", &c0, "ds", &ids, &p);
	ds.dest = shoal_addr_make((uint16_t)id0, SHOAL_SLOT_GROUP, 0);
	send_all(&ds);
	rt_wait_count(0, 100, WAIT_MS);
	kill(p, SIGSTOP);
	ds.first = 100;
	ds.n = 50;
	send_all(&ds);
	rt_mailbox_map("c0", &seg);
	snprintf(name, sizeof(name), "in.0.g%d.0", ids);
	ring = rt_ring_of(&seg, name);
	garble_head_record(ring);
	kill(p, SIGCONT);
	for (int i = 0; i < WAIT_MS && !(shoal_ring_condemned(ring, SHOAL__RING_DATA_OFF) &
					  SHOAL_RING_SIDE_CONS); i++)
		usleep(1000);
	assert_true(shoal_ring_condemned(ring, SHOAL__RING_DATA_OFF) & SHOAL_RING_SIDE_CONS);
	shoal_seg_detach(&seg);
	ds.first = 150;
	ds.n = 3000;
	send_all(&ds);
	rt_wait_count(0, 100 + 3000, WAIT_MS);
	rt_damage_of(id0, &d0);
	assert_true(d0.damaged >= 1);
	assert_true(d0.replaced >= 1);
	assert_int_equal(d0.lost, 50);
	rt_tools_say_damaged();
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/*
 * A router for `sys` with c0 running, every ping routed to it, and dispatch
 * held since before group prod was declared: the grace period of that
 * declaration ends any pass begun before the hold, so no dispatcher has
 * read or attached prod's uplink. prod's process sends its 100 and leaves.
 * Returns prod's uplink, mapped in *seg; the ids in *id0 and *idp.
 */
static struct shoal__ring *start_held_uplink(const char *sys, struct child *c0, int *id0,
					     pid_t *p, struct child *prod, int *idp,
					     struct shoal_seg *seg)
{
	struct shoal__ring *ring;
	uint64_t in, out;

	assert_int_equal(rt_start_router(sys, NULL, 0), 0);
	*id0 = rt_declare("c0", 1, 1);
	rt_route(*id0, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	*p = start_consumer(c0, *id0);
	shoal_router_hold(rt_router, true);
	*idp = rt_declare("prod", 1, 1);
	send_all(prod);
	rt_mailbox_map("prod", seg);
	ring = rt_ring_of(seg, "up.0");
	ring_counts(ring, &in, &out);
	assert_int_equal(in - out, 100);
	return ring;
}

/*
 * A garbled record length in prod's uplink while it holds 100 routed
 * messages (the dispatchers held, prod's process gone): the dispatcher
 * condemns it, the router replaces it and counts exactly the 100, says so
 * on its stderr naming the group and both rings, and the tools show
 * DAMAGED. prod's next process sends through the new uplink: every message
 * is handled, nothing more counted.
 */
static void damage_garbled_uplink_record_loses_exactly_what_it_held(void **state)
{
	struct child c0 = { .index = 0, .name = "c0" };
	struct child prod = { .index = 1, .name = "prod", .n = 100, .type = T_PING };
	struct rt_damage dp;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	char *log;
	pid_t p;
	int id0, idp;

	(void)state;
	ring = start_held_uplink("dm-updata", &c0, &id0, &p, &prod, &idp, &seg);
	garble_head_record(ring);
	rt_stderr_capture();
	shoal_router_hold(rt_router, false);

	rt_wait_damage(idp, 1, 1, &dp);
	assert_true(condemned_by(ring) & SHOAL_RING_SIDE_CONS);
	shoal_seg_detach(&seg);
	wait_counts(idp, 100, 0, &dp);
	log = rt_stderr_end();
	assert_non_null(log);
	print_message("router said: %s", log);
	assert_log_line(log, "ring up.0 is corrupted (condemned by its consumer", "group prod: ",
			"quarantined, replaced by up.0.r1");
	free(log);
	assert_int_equal(dp.damaged, 1);
	assert_int_equal(dp.replaced, 1);
	assert_int_equal(dp.lost, 100);
	assert_int_equal(atomic_load(&rt_res->count[0]), 0);
	rt_tools_say_damaged();

	prod.first = 100;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(0, 200, WAIT_MS);
	rt_damage_of(idp, &dp);
	assert_int_equal(dp.lost, 100);
	assert_int_equal(dp.damaged, 1);
	assert_undamaged(id0);
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/*
 * prod fills its uplink (the dispatchers held) and waits for room; garbage
 * moves the uplink's head past its tail. prod finds it when it looks for
 * room, condemns the uplink and waits; the router replaces it, prod counts
 * what it had written there (none of it was read) and goes on through the
 * new one. c0 and c1 get every other message, exactly.
 */
static void damage_uplink_head_forged_while_its_producer_fills_it(void **state)
{
	struct child cons[2] = { { .index = 0, .name = "c0" }, { .index = 1, .name = "c1" } };
	struct child prod = { .index = 2, .name = "prod", .n = 5000, .type = T_PING };
	struct rt_damage dp;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	uint64_t in, out;
	pid_t pids[2], pp;
	int ids[2], idp;

	(void)state;
	start_pair("dm-uphead", cons, ids, pids);
	shoal_router_hold(rt_router, true);
	idp = rt_declare("prod", 1, 1);   /* after the hold: see start_held_uplink() */
	pp = test_spawn(rt_producer_main, &prod, sizeof(prod));
	rt_wait_attached(idp);
	rt_mailbox_map("prod", &seg);
	ring = rt_ring_of(&seg, "up.0");
	for (int i = 0; i < WAIT_MS && atomic_load(&ring->tail) == 0; i++)
		usleep(1000);
	wait_ring_full(ring, ping_record_bytes(ring));
	atomic_store(&ring->head, atomic_load(&ring->tail) + 64);

	rt_wait_damage(idp, 1, 1, &dp);
	assert_true(condemned_by(ring) & SHOAL_RING_SIDE_PROD);
	shoal_router_hold(rt_router, false);
	test_assert_exited(test_wait_pid(pp, 120000), 0);
	/* prod moved: the old uplink's counters are final. */
	ring_counts(ring, &in, &out);
	shoal_seg_detach(&seg);
	print_message("%llu records were in the uplink, %llu taken from it\n",
		      (unsigned long long)in, (unsigned long long)out);
	assert_int_equal(out, 0);
	assert_true(in > 0 && in < prod.n);
	wait_counts(idp, in, 0, &dp);
	assert_int_equal(dp.lost, in);
	assert_int_equal(dp.damaged, 1);
	assert_int_equal(dp.replaced, 1);
	rt_wait_count(0, prod.n - in, WAIT_MS);
	rt_wait_count(1, prod.n - in, WAIT_MS);
	assert_undamaged(ids[0]);
	assert_undamaged(ids[1]);
	rt_tools_say_damaged();
	rt_stop_and_reap(pids, 2);
	rt_stop_router();
}

/*
 * c0 is stopped with 100 messages in its inbound ring; garbage moves the
 * ring's tail more than a ring's worth past its head. c0's worker finds it
 * when it resumes and gives the ring up; the router replaces it and counts
 * the 100. c1 never notices, and both get everything sent next, exactly.
 */
static void damage_inbound_tail_forged_while_its_consumer_is_stopped(void **state)
{
	struct child cons[2] = { { .index = 0, .name = "c0" }, { .index = 1, .name = "c1" } };
	struct child prod = { .index = 2, .name = "prod", .n = 100, .type = T_PING };
	struct rt_damage d0;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	pid_t pids[2];
	int ids[2];

	(void)state;
	start_pair("dm-intail", cons, ids, pids);
	rt_declare("prod", 1, 1);
	kill(pids[0], SIGSTOP);
	send_all(&prod);
	rt_wait_count(1, 100, WAIT_MS);
	wait_counts(ids[0], 0, 100, &d0);
	assert_int_equal(d0.delivered, 100);
	rt_mailbox_map("c0", &seg);
	ring = rt_ring_of(&seg, "in.0.d0");
	atomic_store(&ring->tail, atomic_load(&ring->head) + ring->capacity + 8);
	kill(pids[0], SIGCONT);

	rt_wait_damage(ids[0], 1, 1, &d0);
	assert_true(condemned_by(ring) & SHOAL_RING_SIDE_CONS);
	shoal_seg_detach(&seg);
	wait_counts(ids[0], 100, 0, &d0);
	assert_int_equal(d0.lost, 100);
	assert_int_equal(d0.damaged, 1);
	assert_int_equal(d0.replaced, 1);
	assert_int_equal(atomic_load(&rt_res->count[0]), 0);
	rt_tools_say_damaged();

	prod.first = 100;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(0, 200, WAIT_MS);
	rt_wait_count(1, 300, WAIT_MS);
	rt_damage_of(ids[0], &d0);
	assert_int_equal(d0.lost, 100);
	assert_int_equal(d0.dropped_corrupt, 0);
	assert_undamaged(ids[1]);
	rt_stop_and_reap(pids, 2);
	rt_stop_router();
}

/*
 * prod's uplink holds 100 messages that no dispatcher has attached to yet
 * (held since before prod was declared); garbage moves its head 40 records
 * forward, onto a record boundary. The dispatcher that attaches it starts
 * there and counts the 40 it can never deliver (dropped_corrupt: their
 * destinations are unknown); c0 gets the other 60 and everything after.
 */
static void damage_uplink_head_forged_before_its_dispatcher_attaches_is_counted(void **state)
{
	struct child c0 = { .index = 0, .name = "c0" };
	struct child prod = { .index = 1, .name = "prod", .n = 100, .type = T_PING };
	struct rt_damage dp;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	uint32_t head, rec;
	pid_t p;
	int id0, idp;

	(void)state;
	ring = start_held_uplink("dm-upskip", &c0, &id0, &p, &prod, &idp, &seg);
	head = atomic_load(&ring->head);
	rec = ping_record_bytes(ring);
	assert_true(100 * rec <= ring->capacity - (head & (ring->capacity - 1)));
	atomic_store(&ring->head, head + 40 * rec);
	shoal_seg_detach(&seg);
	shoal_router_hold(rt_router, false);

	rt_wait_count(0, 60, WAIT_MS);
	for (int i = 0; i < WAIT_MS && rt_dispatch_dropped_corrupt() < 40; i++)
		usleep(1000);
	assert_int_equal(rt_dispatch_dropped_corrupt(), 40);
	prod.first = 100;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(0, 260, WAIT_MS);
	/* Counted once: not again as lost by the router or the group. */
	assert_int_equal(rt_dispatch_dropped_corrupt(), 40);
	rt_damage_of(idp, &dp);
	assert_int_equal(dp.lost, 0);
	assert_undamaged(id0);
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/*
 * A registry that claims more workers than a group can have: a direct send
 * to an actor that would live on worker 20 fails with -EUCLEAN (the producer
 * exits 11), never indexes past its tables.
 */
static void damage_registry_worker_count_is_bounded_for_direct_sends(void **state)
{
	struct child c0 = { .index = 0, .name = "c0" };
	struct child prod = { .index = 1, .name = "prod", .n = 1, .type = T_PING };
	struct shoal__registry reg;
	pid_t p;
	int id;

	(void)state;
	id = start_c0("dm-nworkers", &c0, "prod", NULL, &p);
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, 0, NULL), 0);
	reg.groups[id].n_workers = 40;
	reg.groups[id].n_actors = 40;
	prod.dest = shoal_addr_make((uint16_t)id, 20, atomic_load(&reg.groups[id].gen));
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 11);
	reg.groups[id].n_workers = 1;
	reg.groups[id].n_actors = 1;
	shoal_seg_detach(&reg.seg);
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/* ---- mailboxes ------------------------------------------------------------------ */

struct mailbox_case {
	const char *name;
	void (*damage)(struct shoal_seg *seg);
	const char *said;   /* in the router's log line when it finds the damage */
};

static void mbx_magic(struct shoal_seg *seg)
{
	shoal__mailbox_hdr(seg)->magic = 0;
}

static void mbx_dir_offset(struct shoal_seg *seg)
{
	struct shoal__seg_hdr *h = seg->base;
	struct shoal__seg_dirent *e = (struct shoal__seg_dirent *)((char *)seg->base + h->dir_off);

	e[dirent_of(seg, "in.0.d0")].off = UINT64_C(1) << 40;
}

static void mbx_dir_count(struct shoal_seg *seg)
{
	struct shoal__seg_hdr *h = seg->base;

	atomic_store(&h->dir_count, 5000);
}

static void mbx_size(struct shoal_seg *seg)
{
	((struct shoal__seg_hdr *)seg->base)->size += 1u << 20;
}

static void mbx_unlinked(struct shoal_seg *seg)
{
	assert_int_equal(unlink(seg->path), 0);
}

static const struct mailbox_case mailbox_cases[] = {
	{ "magic", mbx_magic, "mailbox header damaged" },
	{ "dir_offset", mbx_dir_offset, "directory entry 2 is out of bounds" },
	{ "dir_count", mbx_dir_count, "directory moved or recounted" },
	{ "size", mbx_size, "is truncated" },
	{ "unlinked", mbx_unlinked, "was unlinked" },
};

/*
 * A group is down with 100 messages queued; its mailbox is damaged. When it
 * restarts, the router gives it a new mailbox (the 100 counted as lost), the
 * new process attaches, and what is sent next is handled exactly.
 */
static void damage_mailbox_is_replaced_when_its_group_restarts(void **state)
{
	const struct mailbox_case *mc = *state;
	struct child c1 = { .index = 0, .name = "c0" }, c2 = { .index = 1, .name = "c0" };
	struct child prod = { .index = 2, .name = "prod", .n = 100, .type = T_PING };
	struct rt_damage d;
	struct shoal_seg seg;
	char sys[32];
	pid_t p;
	int id;

	snprintf(sys, sizeof(sys), "dm-mbx-%s", mc->name);
	id = start_c0(sys, &c1, "prod", NULL, &p);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	kill_group(p, id);
	send_all(&prod);
	wait_counts(id, 0, 100, &d);
	assert_int_equal(d.delivered, 100);
	rt_mailbox_map("c0", &seg);
	mc->damage(&seg);
	shoal_seg_detach(&seg);

	p = start_consumer(&c2, id);
	rt_damage_of(id, &d);
	assert_int_equal(d.damaged, 1);   /* found at the attach or before: once */
	assert_int_equal(d.replaced, 1);
	assert_int_equal(d.lost, 100);
	rt_tools_say_damaged();
	prod.first = 100;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(1, 200, WAIT_MS);
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/* Whether worker 0 of `group`'s mailbox in service counted in its latency
 * histogram every message it says it handled (a replaced mailbox carries
 * both on, or neither). */
static bool latency_matches_handled(const char *group)
{
	struct shoal__mbx_hdr *h;
	struct shoal_seg seg;
	uint64_t n;
	bool same;

	rt_mailbox_map(group, &seg);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	n = atomic_load(&h->lat[0].out_of_range);
	for (unsigned b = 0; b < SHOAL__LAT_BUCKETS; b++)
		n += atomic_load(&h->lat[0].bucket[b]);
	same = n == atomic_load(&h->w[0].handled);
	if (!same)
		print_message("worker 0 of %s: %llu in its latency histogram, %llu handled\n",
			      group, (unsigned long long)n,
			      (unsigned long long)atomic_load(&h->w[0].handled));
	shoal_seg_detach(&seg);
	return same;
}

/*
 * The mailbox of c0 is damaged while 20 000 messages flow to it. The router
 * finds it and counts it once; c0's process goes on with the rings it has,
 * so no send stalls and every message is handled. When c0 restarts (100
 * queued meanwhile) the router replaces the mailbox, counts the 100 and
 * says so on its stderr, and the next messages are handled exactly.
 */
static void damage_mailbox_damaged_under_traffic_stalls_no_sender(void **state)
{
	const struct mailbox_case *mc = *state;
	struct child c1 = { .index = 0, .name = "c0" }, c2 = { .index = 1, .name = "c0" };
	struct child prod = { .index = 2, .name = "prod", .n = 20000, .type = T_PING };
	struct rt_damage d;
	struct shoal_seg seg;
	char sys[32];
	char *log;
	pid_t p, pp;
	int id;

	snprintf(sys, sizeof(sys), "dm-live-%s", mc->name);
	id = start_c0(sys, &c1, "prod", NULL, &p);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pp = test_spawn(rt_producer_main, &prod, sizeof(prod));
	for (int i = 0; i < WAIT_MS && atomic_load(&rt_res->count[0]) < 2000; i++)
		usleep(1000);
	rt_stderr_capture();
	rt_mailbox_map("c0", &seg);
	mc->damage(&seg);
	shoal_seg_detach(&seg);
	rt_wait_damage(id, 1, 0, &d);
	test_assert_exited(test_wait_pid(pp, 120000), 0);
	rt_wait_count(0, 20000, WAIT_MS);
	rt_damage_of(id, &d);
	assert_int_equal(d.damaged, 1);
	assert_int_equal(d.replaced, 0);
	assert_int_equal(d.lost + d.dropped_corrupt, 0);

	kill_group(p, id);
	prod.first = 20000;
	prod.n = 100;
	send_all(&prod);
	wait_counts(id, 0, 20100, &d);
	assert_int_equal(d.delivered, 20100);
	p = start_consumer(&c2, id);
	rt_damage_of(id, &d);
	log = rt_stderr_end();
	assert_non_null(log);
	print_message("router said: %s", log);
	assert_log_line(log, mc->said, "group c0: ", "; it is replaced when the group restarts");
	assert_log_line(log, "mailbox replaced", "group c0: ",
			"a new one; 100 queued messages lost");
	free(log);
	assert_int_equal(d.damaged, 1);
	assert_int_equal(d.replaced, 1);
	assert_int_equal(d.lost, 100);
	rt_tools_say_damaged();
	prod.first = 20100;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(1, 200, WAIT_MS);
	rt_damage_of(id, &d);
	assert_int_equal(atomic_load(&rt_res->count[0]) + atomic_load(&rt_res->count[1]) + d.lost +
			 d.dropped_corrupt, 20300);
	rt_stop_and_reap(&p, 1);
	/* Read once c0's process is gone: a worker counts a message in its
	 * histogram before the handler and as handled after it, so while it
	 * runs, `handled` may trail by the one whose handler just counted. */
	assert_true(latency_matches_handled("c0"));
	rt_stop_router();
}

/*
 * c0 is down and prod is parked in a blocking send on full rings (its
 * uplink full behind c0's full inbound ring); c0's mailbox is damaged.
 * When c0 restarts the router replaces the mailbox and counts what it held;
 * prod goes on: every message it sent is handled or counted, exactly.
 */
static void damage_mailbox_damaged_under_a_parked_sender_is_replaced(void **state)
{
	const struct mailbox_case *mc = *state;
	struct child c1 = { .index = 0, .name = "c0" }, c2 = { .index = 1, .name = "c0" };
	struct child prod = { .index = 2, .name = "prod", .n = 5000, .type = T_PING };
	struct rt_damage d;
	struct shoal_seg seg, up;
	struct shoal__ring *ring;
	uint64_t in, out;
	char sys[32];
	pid_t p, pp;
	int id;

	snprintf(sys, sizeof(sys), "dm-park-%s", mc->name);
	id = start_c0(sys, &c1, "prod", NULL, &p);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	kill_group(p, id);
	pp = test_spawn(rt_producer_main, &prod, sizeof(prod));
	/* c0's ring full, then prod's uplink behind it: the dispatcher is
	 * parked, prod waits, and what c0's ring holds is final. */
	rt_mailbox_map("c0", &seg);
	ring = rt_ring_of(&seg, "in.0.d0");
	for (int i = 0; i < WAIT_MS && atomic_load(&ring->tail) == 0; i++)
		usleep(1000);
	wait_ring_full(ring, ping_record_bytes(ring));
	ring_counts(ring, &in, &out);
	rt_mailbox_map("prod", &up);
	ring = rt_ring_of(&up, "up.0");
	wait_ring_full(ring, ping_record_bytes(ring));
	shoal_seg_detach(&up);
	mc->damage(&seg);
	shoal_seg_detach(&seg);
	rt_wait_damage(id, 1, 0, &d);

	p = start_consumer(&c2, id);
	test_assert_exited(test_wait_pid(pp, 120000), 0);
	for (int i = 0; i < WAIT_MS; i++) {
		rt_damage_of(id, &d);
		if (atomic_load(&rt_res->count[1]) + d.lost + d.dropped_corrupt >= prod.n)
			break;
		usleep(1000);
	}
	print_message("%s: %llu handled, %llu lost with the old mailbox, %llu dropped\n",
		      mc->name, (unsigned long long)atomic_load(&rt_res->count[1]),
		      (unsigned long long)d.lost, (unsigned long long)d.dropped_corrupt);
	assert_int_equal(atomic_load(&rt_res->count[1]) + d.lost + d.dropped_corrupt, prod.n);
	assert_true(in - out > 0);
	assert_int_equal(d.lost, in - out);
	assert_int_equal(d.damaged, 1);
	assert_int_equal(d.replaced, 1);
	/* The new mailbox carries the rest exactly. */
	prod.first = prod.n;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(1, 5000 + 200 - d.lost - d.dropped_corrupt, WAIT_MS);
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/*
 * A group is down with 100 messages queued; garbage moves the head of its
 * inbound ring 40 records forward, onto a record boundary. The next process
 * resumes there: the 40 it can never deliver are counted as lost at its
 * attach (the ring's counters say 100 went in), the other 60 are handled,
 * and what is sent next is handled exactly: sent = handled + counted.
 */
static void damage_head_moved_forward_while_down_is_counted_at_restart(void **state)
{
	struct child c1 = { .index = 0, .name = "c0" }, c2 = { .index = 1, .name = "c0" };
	struct child prod = { .index = 2, .name = "prod", .n = 100, .type = T_PING };
	struct rt_damage d;
	struct shoal_seg seg;
	struct shoal__ring *ring;
	uint32_t head, len;
	pid_t p;
	int id;

	(void)state;
	id = start_c0("dm-skip", &c1, "prod", NULL, &p);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	kill_group(p, id);
	send_all(&prod);
	wait_counts(id, 0, 100, &d);
	assert_int_equal(d.delivered, 100);
	rt_mailbox_map("c0", &seg);
	ring = rt_ring_of(&seg, "in.0.d0");
	head = atomic_load(&ring->head);
	/* Every record is a T_PING of one size: the first header says it. */
	memcpy(&len, (unsigned char *)ring + SHOAL__RING_DATA_OFF + (head & (ring->capacity - 1)),
	       sizeof(len));
	assert_true(100 * ((len + 15) & ~7u) <= ring->capacity - (head & (ring->capacity - 1)));
	atomic_store(&ring->head, head + 40 * ((len + 15) & ~7u));
	shoal_seg_detach(&seg);

	p = start_consumer(&c2, id);
	rt_wait_count(1, 60, WAIT_MS);
	rt_damage_of(id, &d);
	assert_int_equal(d.lost, 40);
	prod.first = 100;
	prod.n = 200;
	send_all(&prod);
	rt_wait_count(1, 260, WAIT_MS);
	rt_damage_of(id, &d);
	assert_int_equal(d.lost, 40);
	assert_int_equal(atomic_load(&rt_res->count[1]), 260);
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/*
 * Sends directly to c->dest: c->n messages, then once `go` is 1 another
 * c->first, then once `go` is 2 another c->mode (each count accepted ones).
 * A send refused (-EUCLEAN: the ring it wrote was given up) is tried again;
 * how many were refused is in status[].
 */
static int direct_phases_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, rt_count_handler);
	struct msg v = { .from = (uint32_t)c->index };
	uint64_t sent = 0, want = c->n;
	int32_t refused = 0;

	if (g == NULL)
		return 10;
	for (uint32_t phase = 0; phase < 3; phase++) {
		while (atomic_load(&rt_res->go) < phase)
			usleep(1000);
		while (sent < want) {
			int ret = shoal_send_to(shoal_group_worker(g, 0), c->dest, T_PING, &v,
						sizeof(v));

			if (ret == -EUCLEAN) {
				refused++;
				continue;
			}
			if (ret < 0) {
				fprintf(stderr, "direct sender: %s\n", shoal_strerror(ret));
				shoal_group_detach(g);
				return 11;
			}
			v.seq = ++sent;
			atomic_store(&rt_res->sum_seq[c->index], sent);
		}
		atomic_store(&rt_res->ready[c->index], phase + 1);
		want += phase == 0 ? c->first : (uint64_t)c->mode;
	}
	atomic_store(&rt_res->status[c->index], refused);
	shoal_group_detach(g);
	return 0;
}

/*
 * A direct sender keeps the mailbox of c0 mapped while the router replaces
 * it (damaged, then c0 restarts): the 50 it wrote while c0 was down are
 * counted by the router; its next send finds the registry's mailbox number
 * changed and moves to the new mailbox at once, so nothing more is lost and
 * no send is refused: sent = handled + counted, exactly.
 */
static void damage_direct_sends_into_a_replaced_mailbox_are_counted(void **state)
{
	struct child c1 = { .index = 0, .name = "c0" }, c2 = { .index = 1, .name = "c0" };
	struct child ds = { .index = 2, .name = "ds", .n = 100, .first = 50, .mode = 3000 };
	struct rt_damage d0, dd;
	struct shoal_seg seg;
	pid_t p, pd;
	int id0, ids;

	(void)state;
	id0 = start_c0("dm-replaced", &c1, "ds", &ids, &p);
	ds.dest = shoal_addr_make((uint16_t)id0, SHOAL_SLOT_GROUP, 0);
	pd = test_spawn(direct_phases_main, &ds, sizeof(ds));
	rt_wait_count(0, 100, WAIT_MS);
	kill_group(p, id0);
	atomic_store(&rt_res->go, 1);
	for (int i = 0; i < WAIT_MS && atomic_load(&rt_res->ready[2]) < 2; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&rt_res->ready[2]), 2);
	rt_mailbox_map("c0", &seg);
	mbx_magic(&seg);
	shoal_seg_detach(&seg);
	p = start_consumer(&c2, id0);
	rt_damage_of(id0, &d0);
	assert_int_equal(d0.replaced, 1);
	assert_int_equal(d0.lost, 50);
	atomic_store(&rt_res->go, 2);
	test_assert_exited(test_wait_pid(pd, 60000), 0);
	rt_damage_of(ids, &dd);
	assert_int_equal(atomic_load(&rt_res->status[2]), 0);
	assert_int_equal(dd.lost, 0);
	for (int i = 0; i < WAIT_MS && atomic_load(&rt_res->count[1]) < 3000; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&rt_res->count[1]), 3000);
	assert_int_equal(atomic_load(&rt_res->count[0]), 100);
	rt_damage_of(id0, &d0);
	assert_int_equal(d0.lost, 50);
	/* The sender's (nil) loss is shown, though its group was never damaged. */
	{
		const char *args[] = { "stat", "--json", rt_sysname, NULL };
		char want[64];
		struct tool_run t;

		snprintf(want, sizeof(want), "\"lost_sent\": %llu", (unsigned long long)dd.lost);
		tool_expect(&t, 1, args);
		assert_has(t.out, want);
		tool_free(&t);
	}
	rt_stop_and_reap(&p, 1);
	rt_stop_router();
}

/*
 * Sends routed messages once `go` is set, until a send fails (at most
 * 100 000): the error in status[], how many were sent in sum_seq[].
 */
static int send_until_refused_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, rt_count_handler);
	struct msg v = { .from = (uint32_t)c->index };
	uint64_t sent = 0;
	int ret = 0;

	if (g == NULL)
		return 10;
	atomic_store(&rt_res->ready[c->index], 1);
	while (!atomic_load(&rt_res->go))
		usleep(1000);
	while (sent < 100000 && (ret = shoal_send(shoal_group_worker(g, 0), T_PING, &v,
						  sizeof(v))) == 0)
		v.seq = ++sent;
	atomic_store(&rt_res->status[c->index], ret);
	atomic_store(&rt_res->sum_seq[c->index], sent);
	shoal_group_detach(g);
	return 0;
}

/*
 * The uplink in service corrupted again and again until the mailbox has no
 * room for another: the router says so in the worker's block, and a
 * blocking send of its producer fails with -EUCLEAN instead of waiting
 * forever for a replacement; what it sent into its dead uplink is counted.
 */
static void damage_uplink_with_no_room_left_fails_sends_never_waits(void **state)
{
	struct child sink = { .index = 0, .name = "sink" };
	struct child v = { .index = 1, .name = "v" };
	struct shoal_seg_region reg;
	struct shoal__mbx_hdr *h;
	struct shoal__ring *ring;
	struct shoal_seg seg;
	struct rt_damage d;
	pid_t ps, pv;
	int sid, vid;
	uint32_t k;

	(void)state;
	assert_int_equal(rt_start_router("dm-noroom", NULL, 0), 0);
	sid = rt_declare("sink", 1, 1);
	rt_route(sid, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	vid = rt_declare("v", 1, 1);
	ps = start_consumer(&sink, sid);
	pv = test_spawn(send_until_refused_main, &v, sizeof(v));
	rt_wait_attached(vid);
	rt_wait_ready(2);
	/* Garble the tail of the uplink in service (up.0, then up.0.rK) until
	 * the router cannot replace it: the dispatcher condemns each. */
	for (k = 0; k < 64; k++) {
		char name[32];

		snprintf(name, sizeof(name), k == 0 ? "up.0" : "up.0.r%u", k);
		rt_mailbox_map("v", &seg);
		assert_int_equal(shoal_seg_find(&seg, SHOAL_SEG_KIND_RING, name, &reg), 0);
		ring = shoal_seg_ptr(&seg, reg.off, reg.len, 128);
		atomic_store(&ring->tail, atomic_load(&ring->head) + ring->capacity + 8);
		shoal_seg_detach(&seg);
		rt_wait_damage(vid, k + 1, 0, &d);
		if (d.replaced == k)
			break;   /* no room for another */
	}
	print_message("%u uplinks replaced, the next had no room\n", k);
	assert_true(k < 64);
	rt_mailbox_map("v", &seg);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	assert_int_equal(atomic_load(&h->w[0].up_gen), SHOAL__UP_GEN_NONE);
	shoal_seg_detach(&seg);
	/* Its producer fills the uplink it still writes (condemned, read by
	 * nobody), then is refused. */
	atomic_store(&rt_res->go, 1);
	test_assert_exited(test_wait_pid(pv, WAIT_MS), 0);
	assert_int_equal(atomic_load(&rt_res->status[1]), -EUCLEAN);
	assert_true(atomic_load(&rt_res->sum_seq[1]) > 0);
	/* Nothing it sent was delivered; all of it is counted once it left. */
	wait_counts(vid, atomic_load(&rt_res->sum_seq[1]), 0, &d);
	assert_int_equal(d.lost, atomic_load(&rt_res->sum_seq[1]));
	assert_int_equal(atomic_load(&rt_res->count[0]), 0);
	rt_stop_and_reap(&ps, 1);
	rt_stop_router();
}

int main(int argc, char **argv)
{
	(void)argc;
	tool_bin = getenv("SHOAL_BIN");
	if (tool_bin == NULL) {
		fprintf(stderr, "SHOAL_BIN is not set\n");
		return 77;
	}
	(void)argv;
	rt_init();
	const struct CMUnitTest tests[] = {
		RT_CASE(damage_corrupted_ring_and_uplink_are_replaced_others_never_notice),
		RT_CASE(damage_garbage_head_drops_counted_copies_never_parks),
		RT_CASE(damage_garbled_uplink_record_loses_exactly_what_it_held),
		RT_CASE(damage_uplink_head_forged_while_its_producer_fills_it),
		RT_CASE(damage_inbound_tail_forged_while_its_consumer_is_stopped),
		RT_CASE(damage_uplink_head_forged_before_its_dispatcher_attaches_is_counted),
		RT_CASE(damage_corrupted_direct_ring_is_replaced_for_its_sender),
		RT_CASE(damage_registry_worker_count_is_bounded_for_direct_sends),
		RT_CASE(damage_uplink_with_no_room_left_fails_sends_never_waits),
		RT_CASE(damage_direct_sends_into_a_replaced_mailbox_are_counted),
		RT_CASE(damage_head_moved_forward_while_down_is_counted_at_restart),
		RT_CASE_PRESTATE(damage_mailbox_is_replaced_when_its_group_restarts,
				 (void *)&mailbox_cases[0]),
		RT_CASE_PRESTATE(damage_mailbox_is_replaced_when_its_group_restarts,
				 (void *)&mailbox_cases[1]),
		RT_CASE_PRESTATE(damage_mailbox_is_replaced_when_its_group_restarts,
				 (void *)&mailbox_cases[2]),
		RT_CASE_PRESTATE(damage_mailbox_is_replaced_when_its_group_restarts,
				 (void *)&mailbox_cases[3]),
		RT_CASE_PRESTATE(damage_mailbox_is_replaced_when_its_group_restarts,
				 (void *)&mailbox_cases[4]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_traffic_stalls_no_sender,
				 (void *)&mailbox_cases[0]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_traffic_stalls_no_sender,
				 (void *)&mailbox_cases[1]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_traffic_stalls_no_sender,
				 (void *)&mailbox_cases[2]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_traffic_stalls_no_sender,
				 (void *)&mailbox_cases[3]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_traffic_stalls_no_sender,
				 (void *)&mailbox_cases[4]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_a_parked_sender_is_replaced,
				 (void *)&mailbox_cases[0]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_a_parked_sender_is_replaced,
				 (void *)&mailbox_cases[1]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_a_parked_sender_is_replaced,
				 (void *)&mailbox_cases[2]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_a_parked_sender_is_replaced,
				 (void *)&mailbox_cases[3]),
		RT_CASE_PRESTATE(damage_mailbox_damaged_under_a_parked_sender_is_replaced,
				 (void *)&mailbox_cases[4]),
	};

	if (getenv("SHOAL_TEST_FILTER") != NULL)   /* one test, by name pattern */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
