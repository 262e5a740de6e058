/* SPDX-License-Identifier: MIT */
/*
 * What single operations cost on this machine, timed on side A while side B
 * idles: a trivial system call, the clock every sample reads, a FUTEX_WAKE
 * that finds nobody waiting (on the doorbell's word: a shared futex, as
 * shoal_doorbell_notify() wakes), and the least spinning
 * shoal_doorbell_poll_wait() does before it can go to sleep (spin budget 0).
 * They put the wake and spin results in proportion.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/ring.h>

#include "bench/bench.h"

/* Operations between two clock reads: enough to hide the clock's cost. */
#define OPS_PER_ROUND 256u

const char *const bench_op_name[BENCH_OPS] = {
	[BENCH_OP_GETPPID] = "getppid() system call",
	[BENCH_OP_CLOCK] = "clock_gettime(CLOCK_MONOTONIC)",
	[BENCH_OP_FUTEX_WAKE] = "FUTEX_WAKE, shared futex, no waiter",
	[BENCH_OP_POLL_FLOOR] = "poll_wait spin floor (budget 0, nothing ready)",
};

static int sys_prepare(const struct bench_mem *m, const struct bench_params *p,
		       struct bench_fds *fds)
{
	(void)p;
	(void)fds;
	shoal_doorbell_init(m->db);
	return shoal_ring_init(m->ring[0], m->ring_len, BENCH_BUF_BYTES, 0);
}

static bool ring_ready(void *arg)
{
	return !shoal_ring_empty(arg);
}

static void op_round(const struct bench_side *s, struct shoal_ring_cons *c)
{
	struct timespec ts;

	switch (s->p->op) {
	case BENCH_OP_GETPPID:
		for (unsigned i = 0; i < OPS_PER_ROUND; i++)
			syscall(SYS_getppid);
		break;
	case BENCH_OP_CLOCK:
		for (unsigned i = 0; i < OPS_PER_ROUND; i++)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		break;
	case BENCH_OP_FUTEX_WAKE:
		for (unsigned i = 0; i < OPS_PER_ROUND; i++)
			syscall(SYS_futex, (uint32_t *)&s->mem.db->state, FUTEX_WAKE, 1, NULL,
				NULL, 0);
		break;
	case BENCH_OP_POLL_FLOOR:
		/* Timeout 0: poll_wait spins its minimum, then returns -ETIMEDOUT
		 * where it would otherwise announce sleep. */
		for (unsigned i = 0; i < OPS_PER_ROUND; i++)
			shoal_doorbell_poll_wait(s->mem.db, 0, ring_ready, c, 0);
		break;
	case BENCH_OPS:
		break;
	}
}

static int sys_run(struct bench_side *s)
{
	struct shoal_err err = { "" };
	struct shoal_ring_cons c;
	uint64_t n = 0;
	int ret = shoal_ring_cons_attach(&c, s->mem.ring[0], s->mem.ring_len, &err);

	if (ret < 0)
		return bench_fail(s, ret, "consumer attach: %s", err.msg);
	bench_side_ready(s);
	do {
		op_round(s, &c);
		n += OPS_PER_ROUND;
	} while (shoal__now_ns() < s->deadline);
	s->res->t_end = shoal__now_ns();
	s->res->msgs = n;
	return 0;
}

static int sys_idle(struct bench_side *s)
{
	bench_side_ready(s);
	return 0;
}

const struct bench_contender bench_sys = {
	.name = "sys",
	.what = "single operations timed in a loop on side A",
	.prepare = sys_prepare,
	.role = {
		[BENCH_SYSCALL] = { sys_run, sys_idle },
	},
};
