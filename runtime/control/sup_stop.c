/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's stop sequence: once the system is told to stop, its
 * groups stop by ascending stop order, each level asked to drain through
 * its mailbox and given the longest stop timeout among its groups, then
 * SIGKILLed. Before a level is asked, the dispatchers are given time to
 * route what the levels before it left in their uplinks (drain_before()).
 * At the end, the router's control thread is given time to see every
 * process leave, so that what their mailboxes still hold is counted.
 *
 * A single group stops the same way when a reload removes or changes it
 * (shoal__sup_stop_one()). Every wait here serves the groups' output
 * (sup_proc.c): a group blocked on a full pipe could not stop.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/sup_impl.h"
#include "shm/util.h"

/* The stop sequence gives up waiting for a level's leftovers to be routed
 * when no byte moved this long (drain_before()). */
#define STOP_STALL_NS (500 * UINT64_C(1000000))

void shoal__sup_begin_stop(struct sup *s, const char *why, bool failure)
{
	if (s->stop_requested)
		return;
	s->stop_requested = true;
	s->failure |= failure;
	shoal__sup_event(s, "stopping: %s", why);
	if (s->o->notify != NULL)
		s->o->notify(SHOAL__SUP_STOPPING, why);
}

static bool any_running(const struct sup *s, int32_t order)
{
	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if (s->procs[i].pid != 0 && s->cfg->groups[i].stop_order == order)
			return true;
	return false;
}

/* Wait for the processes of one stop level, reaping as they go. */
static void wait_level(struct sup *s, int32_t order, uint64_t deadline)
{
	uint64_t now;

	while (any_running(s, order) && (now = shoal__now_ns()) < deadline)
		shoal__sup_wait_groups(s, -1, (deadline - now) / 1000000 + 1);
}

/* Bytes the uplinks of the groups stopped before `order` still hold. */
static uint64_t left_before(struct sup *s, int32_t order)
{
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if (s->cfg->groups[i].stop_order < order)
			bytes += shoal__router_uplink_bytes(s->router, s->procs[i].id);
	return bytes;
}

/*
 * Before level `order` is asked to stop, let the dispatchers route what
 * the levels before it left in their uplinks: a group drains its mailbox
 * when asked, and a record still in an uplink then would reach it too late
 * (counted lost_queued at the end). Waits until those uplinks are empty,
 * `deadline`, or no byte moved for STOP_STALL_NS (a record parked for a
 * full mailbox of a group that has stopped: it moves no more).
 */
static void drain_before(struct sup *s, int32_t order, uint64_t deadline)
{
	uint64_t left = left_before(s, order), moved = shoal__now_ns(), now, was;

	while (left > 0 && (now = shoal__now_ns()) < deadline && now - moved < STOP_STALL_NS) {
		shoal__sup_wait_groups(s, -1, 1);
		was = left;
		left = left_before(s, order);
		if (left != was)
			moved = shoal__now_ns();
	}
	if (left > 0)
		shoal__sup_event(s, "stop: %llu bytes of messages sent by groups that have stopped "
				 "were not routed in time", (unsigned long long)left);
}

void shoal__sup_stop_all(struct sup *s)
{
	int32_t order = INT32_MIN;

	for (;;) {
		int32_t next = INT32_MAX;
		uint64_t timeout_ms = 0, deadline;
		bool found = false;

		for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
			int32_t o = s->cfg->groups[i].stop_order;

			s->procs[i].restart_at_ns = 0;
			if (o > order && o <= next) {
				next = o;
				found = true;
			}
		}
		if (!found)
			break;
		order = next;
		for (uint32_t i = 0; i < s->cfg->n_groups; i++)
			if (s->cfg->groups[i].stop_order == order && s->procs[i].pid != 0 &&
			    s->cfg->groups[i].stop_timeout_ms > timeout_ms)
				timeout_ms = s->cfg->groups[i].stop_timeout_ms;
		deadline = shoal__now_ns() + timeout_ms * 1000000u;
		if (any_running(s, order))
			drain_before(s, order, deadline);
		for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
			struct proc *p = &s->procs[i];

			if (s->cfg->groups[i].stop_order != order || p->pid == 0)
				continue;
			p->stopping = true;
			shoal_router_stop_group(s->router, p->id);
			shoal__sup_event(s, "group %s: stopping (order %d)", s->cfg->groups[i].name,
					 order);
		}
		wait_level(s, order, deadline);
		for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
			struct proc *p = &s->procs[i];

			if (s->cfg->groups[i].stop_order != order || p->pid == 0)
				continue;
			shoal__sup_event(s, "group %s: did not stop within %u ms; killing it",
					 s->cfg->groups[i].name, s->cfg->groups[i].stop_timeout_ms);
			s->failure = true;
			kill(p->pid, SIGKILL);
		}
		wait_level(s, order, shoal__now_ns() + 5000000000ull);
	}
	/* What the last level sent, for groups stopped before it. */
	drain_before(s, INT32_MAX, shoal__now_ns() + STOP_STALL_NS);
}

/*
 * Every process has ended; give the router's control thread (at most a
 * second) to see their connections close, so that what their mailboxes
 * still hold is counted as stranded.
 */
void shoal__sup_wait_detached(struct sup *s)
{
	uint64_t deadline = shoal__now_ns() + 1000000000u;

	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		while (shoal_router_group_pid(s->router, s->procs[i].id) != 0 &&
		       shoal__now_ns() < deadline)
			shoal_router_wait_change(s->router, 10000000);
}

/*
 * Stop group i's process at once, as the stop sequence stops a level:
 * asked through its mailbox, given its stop timeout, then SIGKILLed.
 */
void shoal__sup_stop_one(struct sup *s, uint32_t i)
{
	struct proc *p = &s->procs[i];
	uint64_t deadline = shoal__now_ns() + (uint64_t)s->cfg->groups[i].stop_timeout_ms * 1000000u;

	if (p->pid == 0)
		return;
	p->stopping = true;
	shoal_router_stop_group(s->router, p->id);
	while (p->pid != 0 && shoal__now_ns() < deadline)
		shoal__sup_wait_groups(s, (int)i, 100);
	if (p->pid != 0) {
		uint64_t kill_deadline = shoal__now_ns() + 5000000000ull;

		kill(p->pid, SIGKILL);
		while (p->pid != 0 && shoal__now_ns() < kill_deadline)
			shoal__sup_wait_groups(s, (int)i, 1000);
	}
}
