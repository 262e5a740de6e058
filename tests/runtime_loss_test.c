/* SPDX-License-Identifier: MIT */
/*
 * Messages nobody will ever handle are counted (DESIGN invariant 6): those
 * queued in a mailbox when its group is marked failed, and those left in a
 * stopped consumer's mailbox when the system stops. Real processes, real
 * shared memory; the consumer is SIGSTOPped so that its queue stays full.
 * Also: groups that processes register without the router having declared
 * them are bounded, so that such registrations cannot take every slot, and
 * freed when their process leaves, what they held counted; and records a
 * killed process held while a request waited are counted.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/router.h>

#include "runtime/layout.h"
#include "runtime/control/supervisor.h"
#include "shm/ring_layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

#define N_QUEUED 100u

/* Registry counters of group `id`: delivered by any dispatcher, and lost. */
static void group_counts(int id, uint64_t *delivered, uint64_t *lost)
{
	struct shoal__registry reg;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	*delivered = 0;
	for (int d = 0; d < SHOAL_MAX_NODES; d++)
		*delivered += atomic_load(&reg.groups[id].stats[d].delivered);
	*lost = atomic_load(&reg.groups[id].lost_queued);
	shoal_seg_detach(&reg.seg);
}

/*
 * Start consumer "c" (stopped with SIGSTOP once attached) and queue
 * N_QUEUED messages for it. Returns its pid; *id is its group id.
 */
static pid_t queue_for_stopped_consumer(const char *system, int *id)
{
	static struct child cons = { .index = 0, .name = "c" };
	static struct child prod = { .index = 1, .name = "p", .n = N_QUEUED, .type = T_PING };
	uint64_t delivered = 0, lost;
	pid_t pc;

	assert_int_equal(rt_start_router(system, NULL, 0), 0);
	*id = rt_declare("c", 1, 1);
	rt_declare("p", 1, 1);
	rt_route(*id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pc = test_spawn(rt_consumer_main, &cons, sizeof(cons));
	rt_wait_attached(*id);
	rt_wait_ready(1);
	kill(pc, SIGSTOP);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 30000), 0);
	for (int i = 0; i < 3000 && delivered < N_QUEUED; i++) {
		group_counts(*id, &delivered, &lost);
		usleep(1000);
	}
	assert_int_equal(delivered, N_QUEUED);
	assert_int_equal(atomic_load(&rt_res->count[0]), 0);
	return pc;
}

/* Kill the stopped consumer and wait until the router has seen it leave. */
static void kill_stopped(pid_t pc, int id)
{
	kill(pc, SIGKILL);
	kill(pc, SIGCONT);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	for (int i = 0; i < 1000 && shoal_router_group_pid(rt_router, id) != 0; i++)
		shoal_router_wait_change(rt_router, 10000000);
	assert_int_equal(shoal_router_group_pid(rt_router, id), 0);
}

static void runtime_queued_messages_of_a_failed_group_are_counted(void **state)
{
	uint64_t delivered, lost;
	pid_t pc;
	int id;

	(void)state;
	pc = queue_for_stopped_consumer("loss-fail", &id);
	kill_stopped(pc, id);
	assert_int_equal(shoal_router_fail_group(rt_router, id), 0);
	group_counts(id, &delivered, &lost);
	assert_int_equal(lost, N_QUEUED);
	/* Counted once: failing it again adds nothing. */
	assert_int_equal(shoal_router_fail_group(rt_router, id), 0);
	group_counts(id, &delivered, &lost);
	assert_int_equal(lost, N_QUEUED);
	assert_int_equal(shoal__router_count_stranded(rt_router), 0);
	rt_stop_router();
}

/* Marked failed while its (stopped) process is still attached: counted
 * when that process leaves, not before (it could still drain some). */
static void runtime_queued_messages_of_a_group_failed_while_attached_are_counted(void **state)
{
	uint64_t delivered, lost;
	pid_t pc;
	int id;

	(void)state;
	pc = queue_for_stopped_consumer("loss-failatt", &id);
	assert_int_equal(shoal_router_fail_group(rt_router, id), 0);
	group_counts(id, &delivered, &lost);
	assert_int_equal(lost, 0);
	kill_stopped(pc, id);
	group_counts(id, &delivered, &lost);
	assert_int_equal(lost, N_QUEUED);
	rt_stop_router();
}

static void runtime_messages_stranded_at_stop_are_counted(void **state)
{
	uint64_t delivered, lost;
	pid_t pc;
	int id;

	(void)state;
	pc = queue_for_stopped_consumer("loss-stop", &id);
	/* A stopped consumer cannot drain: the stop times out, it is killed. */
	assert_int_equal(shoal_router_stop_groups(rt_router, 300000000), -ETIMEDOUT);
	kill_stopped(pc, id);
	assert_int_equal(shoal__router_count_stranded(rt_router), N_QUEUED);
	group_counts(id, &delivered, &lost);
	assert_int_equal(lost, N_QUEUED);
	rt_stop_router();
}

/* Attach groups r0, r1, ... and keep them until one is refused; report
 * how many attached in status[0] and the refusal in status[1]; then leave
 * them all, and report in status[2] that r0 registers again once the
 * router freed what they held. */
static int register_many_main(void *arg)
{
	struct shoal_group_desc d = { .n_workers = 1, .n_actors = 1, .node = -1,
				      .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = rt_count_handler };
	static struct shoal_group *held[SHOAL_MAX_GROUPS];
	int n = 0, ret = 0;

	(void)arg;
	while (n < SHOAL_MAX_GROUPS) {
		struct shoal_err err = { { 0 } };
		char name[16];

		snprintf(name, sizeof(name), "r%d", n);
		d.name = name;
		ret = shoal_group_attach(&held[n], &d, NULL, &err);
		if (ret < 0) {
			CHILD_CHECK(strstr(err.msg, "did not declare") != NULL);
			break;
		}
		n++;
	}
	atomic_store(&rt_res->status[0], n);
	atomic_store(&rt_res->status[1], ret);
	for (int i = 0; i < n; i++)
		shoal_group_detach(held[i]);
	d.name = "r0";
	for (int tries = 0; tries < 30000; tries++) {
		struct shoal_group *g;

		ret = shoal_group_attach(&g, &d, NULL, NULL);
		if (ret == 0) {
			shoal_group_detach(g);
			break;
		}
		usleep(1000);
	}
	atomic_store(&rt_res->status[2], ret);
	return 0;
}

static void runtime_undeclared_groups_are_bounded(void **state)
{
	int id;

	(void)state;
	assert_int_equal(rt_start_router("loss-bound", NULL, 0), 0);
	test_assert_exited(test_wait_pid(test_spawn(register_many_main, NULL, 0), 60000), 0);
	print_message("%d undeclared groups registered at once, the next refused: %s\n",
		      atomic_load(&rt_res->status[0]), strerror(-atomic_load(&rt_res->status[1])));
	assert_true(atomic_load(&rt_res->status[0]) >= 16);
	assert_true(atomic_load(&rt_res->status[0]) < SHOAL_MAX_GROUPS / 2);
	assert_int_equal(atomic_load(&rt_res->status[1]), -ENOSPC);
	assert_int_equal(atomic_load(&rt_res->status[2]), 0);
	/* Declared groups still have room. */
	id = rt_declare("declared", 1, 1);
	assert_true(id >= 0);
	rt_stop_router();
}

/* ---- run-time groups freed when they leave ------------------------------------- */

#define CYCLERS 30
#define CYCLES 10

/* Registers CYCLES groups of its own, one after the other: leaves each but
 * the last, and dies holding that one (no detach, no goodbye). */
static int register_and_leave_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = { .n_workers = 1, .n_actors = 1, .node = -1,
				      .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = rt_count_handler };
	char name[16];

	for (int k = 0; k < CYCLES; k++) {
		struct shoal_err err = { { 0 } };
		struct shoal_group *g = NULL;
		int ret = -EAGAIN;

		snprintf(name, sizeof(name), "c%d-%d", c->index, k);
		d.name = name;
		/* At most 64 such groups at once: the others' may not be freed yet. */
		for (int tries = 0; tries < 30000 && ret == -EAGAIN; tries++) {
			ret = shoal_group_attach(&g, &d, NULL, &err);
			if (ret == -ENOSPC) {
				ret = -EAGAIN;
				usleep(1000);
			}
		}
		if (ret < 0) {
			fprintf(stderr, "%s: attach: %s\n", name, err.msg);
			return 10;
		}
		if (k == CYCLES - 1)
			_exit(0);
		shoal_group_detach(g);
	}
	return 0;
}

/* The registry's count of freed run-time groups and what they lost. */
/* Mailbox files of system `system`'s groups named `group`... left in the
 * test's shm directory. */
static int mailboxes_left(const char *system, const char *group)
{
	char prefix[64], *dir = strdup(test_seg_path("x")), *slash;
	struct dirent *e;
	int n = 0;
	DIR *d;

	assert_non_null(dir);
	slash = strrchr(dir, '/');
	assert_non_null(slash);
	*slash = '\0';
	d = opendir(dir);
	assert_non_null(d);
	snprintf(prefix, sizeof(prefix), "shoal.%s.g.%s", system, group);
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	free(dir);
	return n;
}

/*
 * 300 groups that nobody declared register and leave (one in ten by dying),
 * from 30 processes: more than the 64 such groups that may exist at once and
 * more than the registry's 256 slots. Each is freed when its process goes;
 * a new registration still works, and no mailbox file is left.
 */
static void runtime_undeclared_groups_are_freed_when_they_leave(void **state)
{
	struct shoal_router_stats st;
	struct child c[CYCLERS];
	pid_t pids[CYCLERS];
	uint64_t lost;

	(void)state;
	assert_int_equal(rt_start_router("loss-free", NULL, 0), 0);
	for (int i = 0; i < CYCLERS; i++) {
		c[i] = (struct child){ .index = i };
		pids[i] = test_spawn(register_and_leave_main, &c[i], sizeof(c[i]));
	}
	for (int i = 0; i < CYCLERS; i++)
		test_assert_exited(test_wait_pid(pids[i], 120000), 0);
	rt_wait_released(CYCLERS * CYCLES, &lost);
	assert_int_equal(lost, 0);
	assert_int_equal(mailboxes_left("loss-free", ""), 0);
	shoal_router_stats(rt_router, &st);
	assert_int_equal(st.groups, 0);
	pids[0] = test_spawn(register_and_leave_main, &c[0], sizeof(c[0]));
	test_assert_exited(test_wait_pid(pids[0], 120000), 0);
	rt_wait_released(CYCLERS * CYCLES + CYCLES, &lost);
	assert_int_equal(mailboxes_left("loss-free", ""), 0);
	rt_stop_router();
}

/*
 * Start group "rt", registered at run time and subscribed to T_PING, stop
 * it once attached, and queue N_QUEUED messages for it from declared group
 * "p". Returns its pid; *id is its group id.
 */
static pid_t queue_for_stopped_runtime_group(const char *system, int *id)
{
	static struct child cons = { .index = 0, .name = "rt", .has_sub = true,
				     .sub = { .n_types = 1, .types = { T_PING },
					      .mode = SHOAL_ROUTE_GROUP } };
	static struct child prod = { .index = 1, .name = "p", .n = N_QUEUED, .type = T_PING };
	uint64_t delivered = 0, lost;
	pid_t pc;

	assert_int_equal(rt_start_router(system, NULL, 0), 0);
	rt_declare("p", 1, 1);
	pc = test_spawn(rt_consumer_main, &cons, sizeof(cons));
	rt_wait_ready(1);
	*id = shoal_router_group_id(rt_router, "rt");
	assert_true(*id >= 0);
	kill(pc, SIGSTOP);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	for (int i = 0; i < 30000 && (group_counts(*id, &delivered, &lost),
				      delivered < N_QUEUED); i++)
		usleep(1000);
	assert_int_equal(delivered, N_QUEUED);
	return pc;
}

/*
 * A group registered at run time holds N_QUEUED messages when its process
 * is killed: the router frees it and counts them (lost_released).
 */
static void runtime_queued_messages_of_a_freed_group_are_counted(void **state)
{
	uint64_t lost;
	struct tool_run t;
	pid_t pc;
	int id;

	(void)state;
	pc = queue_for_stopped_runtime_group("loss-freed", &id);
	kill(pc, SIGKILL);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	rt_wait_released(1, &lost);
	assert_int_equal(lost, N_QUEUED);
	assert_int_equal(mailboxes_left("loss-freed", "rt"), 0);
	/* Shown by the tools too. */
	if (tool_bin != NULL) {
		char want[64];

		snprintf(want, sizeof(want), "\"lost_released\": %u", N_QUEUED);
		tool_expect(&t, 0, (const char *const[]){ "stat", "--json", rt_sysname, NULL });
		assert_has(t.out, want);
		tool_free(&t);
	}
	rt_stop_router();
}

/*
 * A group registered at run time sends 1000 messages to declared consumer
 * "c", stopped: c's 64 KiB ring fills (744 records), the dispatcher parks on
 * the next one, and the rest waits in the sender's uplink when its process
 * leaves. Nothing will drain it while c is stopped, so after a while
 * without progress the router frees the group anyway, counting what its
 * uplink held (lost_released); c, continued, handles exactly the others.
 */
static void runtime_group_parked_on_a_stopped_destination_is_freed(void **state)
{
	struct child cons = { .index = 0, .name = "c" };
	struct child prod = { .index = 1, .name = "rtp", .n = 1000, .type = T_PING };
	struct shoal_router_stats st;
	uint64_t delivered, lost_q, lost;
	pid_t pc;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("loss-parked", NULL, 0), 0);
	id = rt_declare("c", 1, 1);
	rt_route(id, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pc = test_spawn(rt_consumer_main, &cons, sizeof(cons));
	rt_wait_attached(id);
	rt_wait_ready(0);
	kill(pc, SIGSTOP);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_released(1, &lost);
	group_counts(id, &delivered, &lost_q);
	print_message("c took %llu before the sender's group was freed; %llu counted\n",
		      (unsigned long long)delivered, (unsigned long long)lost);
	assert_true(lost > 0);
	assert_int_equal(delivered + lost, prod.n);
	assert_int_equal(mailboxes_left("loss-parked", "rtp"), 0);
	/* `shoal run`'s status line says it too. */
	shoal_router_stats(rt_router, &st);
	assert_int_equal(st.lost, lost);
	kill(pc, SIGCONT);
	rt_wait_count(0, delivered, 30000);
	rt_stop_and_reap(&pc, 1);
	assert_int_equal(atomic_load(&rt_res->count[0]), delivered);
	rt_stop_router();
}

/*
 * The same group's inbound ring found corrupted while it held the N_QUEUED
 * (its worker gives the ring up, the router counts them in lost_corrupt and
 * replaces the ring), then its process killed: freed, the group's losses
 * are counted once in lost_released, not its quarantined ring a second time.
 */
static void runtime_freed_group_counts_its_quarantined_ring_once(void **state)
{
	struct shoal__registry reg;
	struct shoal__ring *ring;
	struct shoal_seg_region r;
	struct shoal_seg seg;
	char name[SHOAL_SEG_NAME_MAX];
	uint64_t lost = 0;
	pid_t pc;
	int id;

	(void)state;
	pc = queue_for_stopped_runtime_group("loss-quar", &id);
	assert_int_equal(shoal__name_mailbox(name, rt_sysname, "rt"), 0);
	assert_int_equal(shoal_seg_attach(&seg, name, 0, NULL), 0);
	assert_int_equal(shoal_seg_find(&seg, SHOAL_SEG_KIND_RING, "in.0.d0", &r), 0);
	ring = shoal_seg_ptr(&seg, r.off, r.len, 128);
	atomic_store(&ring->tail, atomic_load(&ring->head) + ring->capacity + 8);
	shoal_seg_detach(&seg);
	kill(pc, SIGCONT);
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	for (int i = 0; i < 30000 && (lost = atomic_load(&reg.groups[id].lost_corrupt)) <
				      N_QUEUED; i++)
		usleep(1000);
	shoal_seg_detach(&reg.seg);
	assert_int_equal(lost, N_QUEUED);
	kill(pc, SIGKILL);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	rt_wait_released(1, &lost);
	assert_int_equal(lost, N_QUEUED);
	rt_stop_router();
}

/*
 * A group address kept from a freed run-time group names that owner, not
 * the group its slot goes to next: a send to it says -ESTALE, whether or
 * not the new owner has the old one's name; the new owner's own address,
 * and a group address with gen 0 (whichever owner), reach the new owner.
 */
static void runtime_group_address_of_a_freed_group_is_stale_for_the_next(void **state)
{
	static struct child old = { .index = 0, .name = "old" };
	static struct child next = { .index = 1, .name = "next" };
	struct msg v = { .seq = 1 };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t kept, lost;
	pid_t pc;

	(void)state;
	assert_int_equal(rt_start_router("loss-stale", NULL, 0), 0);
	g = rt_attach_here("here", 1, 1);
	ctx = shoal_group_worker(g, 0);
	pc = test_spawn(rt_consumer_main, &old, sizeof(old));
	rt_wait_ready(1);
	kept = shoal_group_lookup(g, "old", SHOAL_SLOT_GROUP);
	assert_int_not_equal(kept, SHOAL_ADDR_NONE);
	kill(pc, SIGKILL);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	rt_wait_released(1, &lost);
	pc = test_spawn(rt_consumer_main, &next, sizeof(next));
	rt_wait_ready(2);
	assert_int_equal(shoal_addr_group(shoal_group_lookup(g, "next", SHOAL_SLOT_GROUP)),
			 shoal_addr_group(kept));
	assert_int_equal(shoal_try_send_to(ctx, kept, T_PING, &v, sizeof(v)), -ESTALE);
	assert_int_equal(shoal_send_to(ctx, kept, T_PING, &v, sizeof(v)), -ESTALE);
	assert_int_equal(shoal_send_to(ctx, shoal_group_lookup(g, "next", SHOAL_SLOT_GROUP), T_PING,
				       &v, sizeof(v)), 0);
	v.seq = 2;
	assert_int_equal(shoal_send_to(ctx, shoal_addr_make((uint16_t)shoal_addr_group(kept),
							    SHOAL_SLOT_GROUP, 0),
				       T_PING, &v, sizeof(v)), 0);
	rt_wait_count(1, 2, 10000);
	usleep(50000);
	assert_int_equal(atomic_load(&rt_res->count[1]), 2);
	kill(pc, SIGKILL);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	shoal_group_detach(g);
	rt_stop_router();
}

/* Group `id`'s registry count of delivered copies, once it reads `want`
 * (or after 3 s). */
static uint64_t delivered_settles_at(int id, uint64_t want)
{
	uint64_t delivered = 0, lost;

	for (int i = 0; i < 3000 && (group_counts(id, &delivered, &lost), delivered != want); i++)
		usleep(1000);
	return delivered;
}

/*
 * The dispatchers' counts of a freed run-time group's slot start again for
 * the group it goes to: the new owner is shown with what was delivered to
 * it, not with its predecessor's deliveries.
 */
static void runtime_slot_counts_start_again_for_its_next_owner(void **state)
{
	static struct child old = { .index = 0, .name = "old", .has_sub = true,
				    .sub = { .n_types = 1, .types = { T_PING },
					     .mode = SHOAL_ROUTE_GROUP } };
	static struct child next = { .index = 1, .name = "next", .has_sub = true,
				     .sub = { .n_types = 1, .types = { T_PING },
					      .mode = SHOAL_ROUTE_GROUP } };
	static struct child prod = { .index = 2, .name = "p", .n = N_QUEUED, .type = T_PING };
	uint64_t lost;
	pid_t pc;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("loss-owner", NULL, 0), 0);
	rt_declare("p", 1, 1);
	pc = test_spawn(rt_consumer_main, &old, sizeof(old));
	rt_wait_ready(1);
	id = shoal_router_group_id(rt_router, "old");
	assert_true(id >= 0);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(0, N_QUEUED, 10000);
	assert_int_equal(delivered_settles_at(id, N_QUEUED), N_QUEUED);
	kill(pc, SIGKILL);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	rt_wait_released(1, &lost);
	pc = test_spawn(rt_consumer_main, &next, sizeof(next));
	rt_wait_ready(2);
	assert_int_equal(shoal_router_group_id(rt_router, "next"), id);
	assert_int_equal(delivered_settles_at(id, 0), 0);
	prod.index = 3;
	prod.n = N_QUEUED / 2;
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(1, N_QUEUED / 2, 10000);
	assert_int_equal(delivered_settles_at(id, N_QUEUED / 2), N_QUEUED / 2);
	kill(pc, SIGKILL);
	assert_int_not_equal(test_wait_pid(pc, 10000), -1);
	rt_stop_router();
}

/*
 * A slot the router is giving to another owner (slot_seq odd, or changed
 * while read) is not what a lookup by name answers, nor what `shoal stat`
 * shows: never one owner's name with another's generation or counters.
 */
static void runtime_lookup_skips_a_slot_changing_owner(void **state)
{
	struct shoal__registry reg;
	struct shoal_group *g;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("loss-seq", NULL, 0), 0);
	/* Mapped read-write, as a test may: the router's slot_seq, moved by hand. */
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, 0, NULL), 0);
	g = rt_attach_here("here", 1, 1);
	id = rt_declare("named", 1, 1);
	assert_int_not_equal(shoal_group_lookup(g, "named", SHOAL_SLOT_GROUP), SHOAL_ADDR_NONE);
	atomic_fetch_add(&reg.groups[id].slot_seq, 1);
	assert_int_equal(shoal_group_lookup(g, "named", SHOAL_SLOT_GROUP), SHOAL_ADDR_NONE);
	atomic_fetch_add(&reg.groups[id].slot_seq, 1);
	assert_int_equal(shoal_addr_group(shoal_group_lookup(g, "named", SHOAL_SLOT_GROUP)), id);
	/* The tools read such a slot again; one that never settles is shown
	 * as corrupt, not as whatever it held mid-change. */
	if (tool_bin != NULL) {
		struct tool_run t;

		atomic_fetch_add(&reg.groups[id].slot_seq, 1);
		tool_expect(&t, 1, (const char *const[]){ "stat", rt_sysname, NULL });
		assert_has(t.out, "changed owner");
		tool_free(&t);
		atomic_fetch_add(&reg.groups[id].slot_seq, 1);
		tool_expect(&t, 0, (const char *const[]){ "stat", rt_sysname, NULL });
		tool_free(&t);
	}
	shoal_seg_detach(&reg.seg);
	shoal_group_detach(g);
	rt_stop_router();
}

/* ---- records deferred during a request ------------------------------------- */

#define N_DEFERRED 10u

/* Answers a request with N_DEFERRED plain messages to the requester, and
 * never with a response: its handler sleeps until the test kills it. */
static void stalling_responder(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v = { 0 };

	if (m->type != T_REQ)
		return;
	for (unsigned i = 0; i < N_DEFERRED; i++) {
		v.seq = i + 1;
		(void)shoal_send_to(a->ctx, m->env->sender, T_PING, &v, sizeof(v));
	}
	for (;;)
		pause();
}

static int stalling_responder_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, stalling_responder);

	if (g == NULL)
		return 1;
	return shoal_group_run(g) == 0 ? 0 : 1;
}

/* Requests from group r and waits (its messages before the response are
 * deferred: held in this process's memory) until killed. */
static int requester_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, NULL, rt_count_handler);
	struct shoal_reply reply = { 0 };
	struct msg v = { 0 };

	if (g == NULL)
		return 1;
	(void)shoal_request(shoal_group_worker(g, 0), shoal_group_lookup(g, "r", 0), T_REQ, &v,
			    sizeof(v), 60 * INT64_C(1000000000), &reply);
	return 0;
}

/* The requester's on_batch in the test's second form: never called while
 * its request waits, as nothing is. */
static void requester_batch(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		rt_count_handler(a, &msgs[k]);
}

/*
 * Messages a worker took out of its rings and keeps in its memory while a
 * request waits are lost with its process: the next process of the group
 * counts them (forward_lost), as it does forwarded copies. None of them
 * reaches a handler meanwhile, with on_batch set or not.
 */
static void deferred_lost(const char *system,
			  void (*on_batch)(struct shoal_actor *a, const struct shoal_msg *msgs,
					   uint32_t n))
{
	struct child resp = { .index = 0, .name = "r" };
	struct child req = { .index = 1, .name = "q", .on_batch = on_batch };
	struct shoal__mbx_hdr *h;
	struct shoal_group *g;
	struct shoal_seg seg;
	int rid, qid;
	pid_t pr, pq;

	assert_int_equal(rt_start_router(system, NULL, 0), 0);
	rid = rt_declare("r", 1, 1);
	qid = rt_declare("q", 1, 1);
	pr = test_spawn(stalling_responder_main, &resp, sizeof(resp));
	rt_wait_attached(rid);
	pq = test_spawn(requester_main, &req, sizeof(req));
	rt_wait_attached(qid);
	rt_mailbox_map("q", &seg);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	for (int i = 0; i < 30000 && atomic_load(&h->w[0].fwd_sent) < N_DEFERRED; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&h->w[0].fwd_sent), N_DEFERRED);
	assert_int_equal(atomic_load(&h->w[0].fwd_lost), 0);
	assert_int_equal(atomic_load(&h->w[0].handled), 0);
	assert_int_equal(atomic_load(&rt_res->sum_seq[1]), 0);
	kill(pq, SIGKILL);
	assert_int_not_equal(test_wait_pid(pq, 10000), -1);
	for (int i = 0; i < 1000 && shoal_router_group_pid(rt_router, qid) != 0; i++)
		shoal_router_wait_change(rt_router, 10000000);
	/* The group's next process counts what the killed one held. */
	g = rt_attach_here("q", 1, 1);
	assert_int_equal(atomic_load(&h->w[0].fwd_lost), N_DEFERRED);
	shoal_group_detach(g);
	shoal_seg_detach(&seg);
	kill(pr, SIGKILL);
	assert_int_not_equal(test_wait_pid(pr, 10000), -1);
	rt_stop_router();
}

static void runtime_records_deferred_during_a_request_are_counted_when_lost(void **state)
{
	(void)state;
	deferred_lost("loss-defer", NULL);
}

static void runtime_records_deferred_during_a_request_reach_no_batch(void **state)
{
	(void)state;
	deferred_lost("loss-deferb", requester_batch);
}

int main(void)
{
	tool_bin = getenv("SHOAL_BIN");
	const struct CMUnitTest tests[] = {
		RT_CASE(runtime_queued_messages_of_a_failed_group_are_counted),
		RT_CASE(runtime_queued_messages_of_a_group_failed_while_attached_are_counted),
		RT_CASE(runtime_messages_stranded_at_stop_are_counted),
		RT_CASE(runtime_undeclared_groups_are_bounded),
		RT_CASE(runtime_undeclared_groups_are_freed_when_they_leave),
		RT_CASE(runtime_queued_messages_of_a_freed_group_are_counted),
		RT_CASE(runtime_group_parked_on_a_stopped_destination_is_freed),
		RT_CASE(runtime_freed_group_counts_its_quarantined_ring_once),
		RT_CASE(runtime_group_address_of_a_freed_group_is_stale_for_the_next),
		RT_CASE(runtime_slot_counts_start_again_for_its_next_owner),
		RT_CASE(runtime_lookup_skips_a_slot_changing_owner),
		RT_CASE(runtime_records_deferred_during_a_request_are_counted_when_lost),
		RT_CASE(runtime_records_deferred_during_a_request_reach_no_batch),
	};

	rt_init();
	test_spawn_server_start();
	return cmocka_run_group_tests_name("runtime_loss", tests, NULL, NULL);
}
