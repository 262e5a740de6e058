/* SPDX-License-Identifier: MIT */
/*
 * rcu_bench: which liburcu flavour should the dispatchers read the routing
 * snapshot under? Measured, not assumed (bench/rcu.md has the results and
 * the decision).
 *
 * The liburcu flavours share one API (rcu_read_lock(), synchronize_rcu(),
 * ...) mapped by macros onto per-flavour symbols, so one translation unit can
 * use only one of them. This file is therefore built once per flavour:
 *
 *   -DFLAVOR_QSBR  <urcu-qsbr.h>       pkg-config liburcu-qsbr
 *   -DFLAVOR_MEMB  <urcu/urcu-memb.h>  pkg-config liburcu (memb in 0.13)
 *   -DFLAVOR_MB    <urcu/urcu-mb.h>    pkg-config liburcu-mb
 *   -DFLAVOR_BP    <urcu-bp.h>         pkg-config liburcu-bp
 *
 * Each executable prints one CSV line per run; --summarize (any of them)
 * reads such lines from stdin, from several flavours and runs, and prints
 * the median and the min..max of every column, flavours side by side.
 *
 * What is measured mirrors the router (runtime/control/snapshot.c shoal__publish(),
 * runtime/dispatch.c dispatcher_main()): an immutable object published with
 * one rcu_xchg_pointer(), read with rcu_dereference() inside a read-side
 * critical section, and the old object "freed" (poisoned here) after
 * synchronize_rcu(). Two threads, pinned: the writer (the main thread) on
 * one CPU, one reader on another.
 *
 * Reader figures are per unit of the reader's own CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so time the reader spends preempted by other
 * processes does not count, while interrupts it takes (membarrier IPIs) do:
 * this kernel charges IRQ time to the interrupted task. Writer figures are
 * wall-clock latencies, as the control path sees them.
 *
 *   base_ns       rcu_dereference() + one dependent load, no read lock: the
 *                 floor every flavour shares.
 *   read_ns       rcu_read_lock() + rcu_dereference() + load +
 *                 rcu_read_unlock(); for QSBR plus rcu_quiescent_state()
 *                 every K sections (--qs-every, default 64), amortised.
 *   read_qs1_ns   QSBR only: a quiescent state after every section, which is
 *                 what dispatcher_main() does (one per pass).
 *   reads_*_mps   the reader's throughput alone, and while the writer
 *                 publishes and calls synchronize_rcu() back to back;
 *                 loss_per_gp_us turns the difference into reader time lost
 *                 per grace period, comparable across flavours whose grace
 *                 period rates differ a hundredfold.
 *   gp_busy_*     synchronize_rcu() latency while the reader runs that tight
 *                 loop; gp_idle_* while the reader sleeps on a futex (QSBR:
 *                 after rcu_thread_offline(), as the dispatcher does; the
 *                 others: registered, outside any read-side section).
 *   syscall_us,   getppid(), the floor of any system call here, and
 *   membarrier_*  membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), the system
 *                 call memb and bp grace periods are made of, with the reader
 *                 asleep (no IPI needed) and spinning on its CPU (an IPI is
 *                 needed), and the reader time each call costs.
 *                 Flavour-independent: properties of the machine.
 *   load1,        the load average, and the share of wall time the reader
 *   reader_share  actually ran: how noisy the machine was.
 *   violations    reads that found a poisoned (retired) object: must be 0,
 *                 or the benchmark (or liburcu) is broken. Exit status 1.
 *
 * Ordering guarantees:
 *   R1 rcu_xchg_pointer() in publish_and_wait() pairs with A1
 *      rcu_dereference() in the read loops: a reader that sees an object
 *      sees its val set to RB_GOOD.
 *   Grace period: synchronize_rcu() returns only after every read-side
 *      section (QSBR: every span between quiescent states) that could have
 *      seen the old object has ended, so poisoning it afterwards is never
 *      observed. The violation counter checks exactly that.
 *   R2 the store-release of ctl.seq in reader_cmd() pairs with A2 the
 *      load-acquire in reader_main(): the reader sees the command and its
 *      argument. R3 the store-release of ctl.done pairs with A3 in
 *      reader_wait(): the writer sees the results.
 *
 * Progress: the reader never blocks while online (QSBR) or inside a
 * read-side section, so synchronize_rcu() always completes. Between commands
 * the reader sleeps on a condition variable, offline.
 */
#define _LGPL_SOURCE            /* the inline read side, as runtime/ uses */

#if defined(FLAVOR_QSBR)
#include <urcu-qsbr.h>
#define RB_FLAVOR "qsbr"
#define RB_QSBR 1
#elif defined(FLAVOR_MEMB)
#define URCU_API_MAP
#include <urcu/urcu-memb.h>
#define RB_FLAVOR "memb"
#elif defined(FLAVOR_MB)
#define URCU_API_MAP
#include <urcu/urcu-mb.h>
#define RB_FLAVOR "mb"
#elif defined(FLAVOR_BP)
#include <urcu-bp.h>
#define RB_FLAVOR "bp"
#else
#error "build with one of -DFLAVOR_QSBR, -DFLAVOR_MEMB, -DFLAVOR_MB, -DFLAVOR_BP"
#endif
#include <urcu/pointer.h>

#include <errno.h>
#include <inttypes.h>
#include <linux/membarrier.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm/util.h"

#ifndef RB_QSBR
#define RB_QSBR 0
#endif

/* liburcu 0.13 has no version macro; the build passes pkg-config's. */
#ifndef RB_URCU_VERSION
#define RB_URCU_VERSION "unknown"
#endif

/* QSBR's quiescent state and offline/online; no-ops for the other flavours,
 * whose readers are quiescent whenever they are outside a read section. */
#if RB_QSBR
#define RB_QUIESCENT() rcu_quiescent_state()
#define RB_OFFLINE() rcu_thread_offline()
#define RB_ONLINE() rcu_thread_online()
#else
#define RB_QUIESCENT() ((void)0)
#define RB_OFFLINE() ((void)0)
#define RB_ONLINE() ((void)0)
#endif

#define RB_CHUNK 4096u          /* reads between two looks at ctl.seq */
#define RB_GOOD UINT64_C(0x600d600d600d600d)
#define RB_POISON UINT64_C(0xdeaddeaddeaddead)
#define RB_MAX_SAMPLES (1u << 20)
#define RB_WARMUP_NS 5000000u     /* reader spin before each timed loop */
#define RB_EXIT_SKIP 77         /* meson: test skipped */

/* ---- the published object --------------------------------------------- */

struct rb_obj {
	_Alignas(64) _Atomic uint64_t val;
};

static struct rb_obj rb_pool[2];
static struct rb_obj *rb_snap;          /* RCU-protected */
static unsigned rb_cur;                 /* writer only: rb_pool index in rb_snap */

/* ---- writer / reader handshake ----------------------------------------- */

enum rb_cmd { RB_PARK, RB_BASE, RB_READ, RB_EXIT };

struct rb_ctl {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum rb_cmd cmd;                /* under mu, published by seq */
	unsigned k;                     /* quiescent state every k sections */
	_Alignas(64) _Atomic uint32_t seq;   /* writer: command number */
	_Alignas(64) _Atomic uint32_t ack;   /* reader: command being served */
	_Atomic uint32_t done;               /* reader: command finished */
	uint64_t reads, bad;                 /* results of the last command: */
	uint64_t ns, wall_ns;                /* reader CPU time, wall time */
};

static struct rb_ctl ctl = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
};

/* ---- options ------------------------------------------------------------ */

struct rb_opts {
	bool shrt;
	bool header;
	unsigned runs;
	unsigned k;
	int wcpu, rcpu;
	unsigned read_ms, busy_ms, idle_ms, sys_ms;
};

/* ---- small helpers ------------------------------------------------------ */

/* The calling thread's CPU time; wall time is shoal__now_ns(). */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000u),
		.tv_nsec = (long)(ns % 1000000000u),
	};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted samples, in microseconds. */
static double pct_us(const uint64_t *s, size_t n, unsigned pct)
{
	size_t rank;

	if (n == 0)
		return NAN;
	rank = (n * pct + 99) / 100;
	return (double)s[rank == 0 ? 0 : rank - 1] / 1000.0;
}

static int pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static long membarrier_call(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0, 0);
}

/* ---- the reader ---------------------------------------------------------- */

/*
 * RB_CHUNK read-side sections, a quiescent state every k of them (QSBR).
 * Returns the number of sections that found a poisoned object.
 */
static uint64_t read_chunk(unsigned k)
{
	uint64_t bad = 0;

	for (unsigned n = 0; n < RB_CHUNK; n += k) {
		for (unsigned i = 0; i < k; i++) {
			struct rb_obj *p;

			rcu_read_lock();
			/* A1: pairs with R1 rcu_xchg_pointer() in publish_and_wait(). */
			p = rcu_dereference(rb_snap);
			/* Relaxed: the value only says whether the object was retired;
			 * A1 and the grace period order it. */
			bad += atomic_load_explicit(&p->val, memory_order_relaxed) == RB_POISON;
			rcu_read_unlock();
		}
		RB_QUIESCENT();
	}
	return bad;
}

/* The floor: the same dereference and load without any RCU read side. Only
 * run while no writer publishes, so no grace period is needed. */
static uint64_t base_chunk(void)
{
	uint64_t bad = 0;

	for (unsigned n = 0; n < RB_CHUNK; n++) {
		struct rb_obj *p = rcu_dereference(rb_snap);

		bad += atomic_load_explicit(&p->val, memory_order_relaxed) == RB_POISON;
	}
	return bad;
}

struct rb_reader_arg {
	int cpu;
	_Atomic int status;             /* 1 running, < 0 -errno from setup */
};

static void *reader_main(void *argp)
{
	struct rb_reader_arg *arg = argp;
	uint32_t served = 0;
	int ret = pin_self(arg->cpu);

	if (ret < 0) {
		atomic_store_explicit(&arg->status, ret, memory_order_release);
		return NULL;
	}
	rcu_register_thread();
	/* Parked between commands: offline (QSBR), so grace periods never wait
	 * for a reader that sleeps. */
	RB_OFFLINE();
	atomic_store_explicit(&arg->status, 1, memory_order_release);
	pthread_mutex_lock(&ctl.mu);
	for (;;) {
		uint32_t s;
		enum rb_cmd cmd;
		unsigned k;
		uint64_t reads = 0, bad = 0, t0, t1, c0, c1;

		/* A2: pairs with R2 in reader_cmd(): cmd and k are set. */
		while ((s = atomic_load_explicit(&ctl.seq, memory_order_acquire)) == served)
			pthread_cond_wait(&ctl.cv, &ctl.mu);
		served = s;
		cmd = ctl.cmd;
		k = ctl.k;
		if (cmd == RB_EXIT)
			break;
		if (cmd == RB_PARK) {
			atomic_store_explicit(&ctl.ack, s, memory_order_relaxed);
			/* R3: pairs with A3 in reader_wait(). */
			atomic_store_explicit(&ctl.done, s, memory_order_release);
			continue;
		}
		pthread_mutex_unlock(&ctl.mu);
		RB_ONLINE();
		/* Warm up (a vCPU that was idle runs slowly for a while), then tell
		 * the writer the loop runs. */
		t0 = shoal__now_ns();
		while (shoal__now_ns() - t0 < RB_WARMUP_NS)
			bad += cmd == RB_BASE ? base_chunk() : read_chunk(k);
		/* Relaxed: the writer only waits for the number; nothing to order. */
		atomic_store_explicit(&ctl.ack, s, memory_order_relaxed);
		t0 = shoal__now_ns();
		c0 = thread_cpu_ns();
		do {
			bad += cmd == RB_BASE ? base_chunk() : read_chunk(k);
			reads += RB_CHUNK;
			/* Relaxed: a stop request; the next command is read under A2. */
		} while (atomic_load_explicit(&ctl.seq, memory_order_relaxed) == s);
		c1 = thread_cpu_ns();
		t1 = shoal__now_ns();
		RB_OFFLINE();
		ctl.reads = reads;
		ctl.ns = c1 - c0;
		ctl.wall_ns = t1 - t0;
		ctl.bad = bad;
		/* R3: pairs with A3 in reader_wait(): the results above. */
		atomic_store_explicit(&ctl.done, s, memory_order_release);
		pthread_mutex_lock(&ctl.mu);
	}
	pthread_mutex_unlock(&ctl.mu);
	rcu_unregister_thread();
	return NULL;
}

/* Give the reader a command; returns its number. */
static uint32_t reader_cmd(enum rb_cmd cmd, unsigned k)
{
	uint32_t s;

	pthread_mutex_lock(&ctl.mu);
	ctl.cmd = cmd;
	ctl.k = k;
	s = atomic_load_explicit(&ctl.seq, memory_order_relaxed) + 1;
	/* R2: pairs with A2 in reader_main(). */
	atomic_store_explicit(&ctl.seq, s, memory_order_release);
	pthread_cond_signal(&ctl.cv);
	pthread_mutex_unlock(&ctl.mu);
	return s;
}

/*
 * Wait until the reader has started (want_done false) or finished command s.
 * "At least s": the reader may already have served the RB_PARK that follows.
 */
static void reader_wait(uint32_t s, bool want_done)
{
	_Atomic uint32_t *w = want_done ? &ctl.done : &ctl.ack;

	/* A3: pairs with R3 in reader_main(). */
	while ((int32_t)(atomic_load_explicit(w, memory_order_acquire) - s) < 0)
		sleep_ns(10000);
}

/* Start a read loop and wait until the reader runs it. */
static uint32_t reader_start(enum rb_cmd cmd, unsigned k)
{
	uint32_t s = reader_cmd(cmd, k);

	reader_wait(s, false);
	return s;
}

/* Reader CPU and wall time over a run's timed windows. */
static uint64_t rb_cpu_sum, rb_wall_sum;

/* Stop the read loop s; its results are in ctl when this returns. */
static void reader_stop(uint32_t s)
{
	reader_cmd(RB_PARK, 0);
	reader_wait(s, true);
	rb_cpu_sum += ctl.ns;
	rb_wall_sum += ctl.wall_ns;
}

/* ---- the writer ---------------------------------------------------------- */

/* Publish the other object, wait a grace period, retire the old one. Returns
 * the synchronize_rcu() latency in ns. */
static uint64_t publish_and_wait(void)
{
	struct rb_obj *next = &rb_pool[rb_cur ^ 1u], *old;
	uint64_t t0, t1;

	/* Relaxed: next was retired a grace period ago, no reader can reach it;
	 * R1 below publishes the store. */
	atomic_store_explicit(&next->val, RB_GOOD, memory_order_relaxed);
	/* R1: pairs with A1 in read_chunk(). */
	old = rcu_xchg_pointer(&rb_snap, next);
	t0 = shoal__now_ns();
	synchronize_rcu();
	t1 = shoal__now_ns();
	/* Relaxed: after the grace period nobody reads old; a reader that does
	 * anyway counts a violation. */
	atomic_store_explicit(&old->val, RB_POISON, memory_order_relaxed);
	rb_cur ^= 1u;
	return t1 - t0;
}

/* Grace periods back to back for ms milliseconds (at most RB_MAX_SAMPLES). */
static size_t gp_loop(uint64_t *samples, unsigned ms)
{
	uint64_t end = shoal__now_ns() + (uint64_t)ms * 1000000u;
	size_t n = 0;

	while (n < RB_MAX_SAMPLES && (n < 16 || shoal__now_ns() < end))
		samples[n++] = publish_and_wait();
	qsort(samples, n, sizeof(*samples), cmp_u64);
	return n;
}

/* Register for membarrier(PRIVATE_EXPEDITED), as memb and bp do at start. */
static bool membarrier_setup(void)
{
	long mask = membarrier_call(MEMBARRIER_CMD_QUERY);

	return mask >= 0 && (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
	       membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

static long membarrier_once(void)
{
	return membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

/* The cheapest system call: the floor under every membarrier. */
static long getppid_once(void)
{
	return syscall(SYS_getppid);
}

/* Call fn back to back for ms milliseconds (at most RB_MAX_SAMPLES times),
 * each latency into samples, sorted. Returns the count, 0 if a call fails. */
static size_t time_calls(uint64_t *samples, unsigned ms, long (*fn)(void))
{
	uint64_t end = shoal__now_ns() + (uint64_t)ms * 1000000u;
	size_t n = 0;

	while (n < RB_MAX_SAMPLES && (n < 16 || shoal__now_ns() < end)) {
		uint64_t t0 = shoal__now_ns();

		if (fn() < 0)
			return 0;
		samples[n++] = shoal__now_ns() - t0;
	}
	qsort(samples, n, sizeof(*samples), cmp_u64);
	return n;
}

/* ---- one run --------------------------------------------------------------- */

/* Columns of a result line, in order. */
enum rb_colid {
	C_FLAVOR, C_RUN, C_WCPU, C_RCPU, C_QS_EVERY,
	C_BASE, C_READ, C_READ_QS1,
	C_READS_ALONE, C_READS_WRITER, C_SLOWDOWN, C_LOSS_PER_GP,
	C_GP_BUSY_P50, C_GP_BUSY_P99, C_GP_BUSY_MAX, C_GP_BUSY_RATE,
	C_GP_IDLE_P50, C_GP_IDLE_P99,
	C_SYSCALL, C_MB_BUSY_P50, C_MB_BUSY_P99, C_MB_IDLE_P50, C_MB_LOSS,
	C_LOAD1, C_SHARE, C_VIOLATIONS,
	RB_NCOLS
};

/* fmt prints the value; the first two columns are text. */
static const struct rb_col {
	const char *name;
	const char *fmt;
	const char *what;
} rb_cols[RB_NCOLS] = {
	[C_FLAVOR] = { "flavor", NULL, "liburcu flavour" },
	[C_RUN] = { "run", NULL, "run number" },
	[C_WCPU] = { "writer_cpu", "%.0f", "CPU of the writer (main thread)" },
	[C_RCPU] = { "reader_cpu", "%.0f", "CPU of the reader thread" },
	[C_QS_EVERY] = { "qs_every", "%.0f",
		"QSBR: read sections per rcu_quiescent_state() (K)" },
	[C_BASE] = { "base_ns", "%.2f",
		"rcu_dereference + load, no read side (ns)" },
	[C_READ] = { "read_ns", "%.2f",
		"lock + dereference + load + unlock, QSBR + QS every K (ns)" },
	[C_READ_QS1] = { "read_qs1_ns", "%.2f",
		"QSBR: same with a QS after every section (ns)" },
	[C_READS_ALONE] = { "reads_alone_mps", "%.1f",
		"reader throughput, no writer (M sections/s)" },
	[C_READS_WRITER] = { "reads_writer_mps", "%.1f",
		"reader throughput, writer publishing back to back (M/s)" },
	[C_SLOWDOWN] = { "slowdown_pct", "%.1f",
		"reader slowdown caused by that writer (%)" },
	[C_LOSS_PER_GP] = { "loss_per_gp_us", "%.3f",
		"reader time lost per grace period (us)" },
	[C_GP_BUSY_P50] = { "gp_busy_p50_us", "%.2f",
		"synchronize_rcu, reader busy, p50 (us)" },
	[C_GP_BUSY_P99] = { "gp_busy_p99_us", "%.2f",
		"synchronize_rcu, reader busy, p99 (us)" },
	[C_GP_BUSY_MAX] = { "gp_busy_max_us", "%.1f",
		"synchronize_rcu, reader busy, max (us)" },
	[C_GP_BUSY_RATE] = { "gp_busy_per_s", "%.0f",
		"grace periods per second, reader busy" },
	[C_GP_IDLE_P50] = { "gp_idle_p50_us", "%.2f",
		"synchronize_rcu, reader asleep (QSBR: offline), p50 (us)" },
	[C_GP_IDLE_P99] = { "gp_idle_p99_us", "%.2f",
		"synchronize_rcu, reader asleep, p99 (us)" },
	[C_SYSCALL] = { "syscall_us", "%.2f",
		"getppid() system call, p50 (us)" },
	[C_MB_BUSY_P50] = { "membarrier_busy_p50_us", "%.2f",
		"membarrier(PRIVATE_EXPEDITED), reader spinning, p50 (us)" },
	[C_MB_BUSY_P99] = { "membarrier_busy_p99_us", "%.2f",
		"membarrier(PRIVATE_EXPEDITED), reader spinning, p99 (us)" },
	[C_MB_IDLE_P50] = { "membarrier_idle_p50_us", "%.2f",
		"membarrier(PRIVATE_EXPEDITED), reader asleep, p50 (us)" },
	[C_MB_LOSS] = { "membarrier_loss_us", "%.2f",
		"reader time lost per membarrier (the IPI's cost to it) (us)" },
	[C_LOAD1] = { "load1", "%.2f",
		"1-minute load average when the run started" },
	[C_SHARE] = { "reader_share_pct", "%.1f",
		"reader CPU time / wall time in its timed loops (%)" },
	[C_VIOLATIONS] = { "violations", "%.0f",
		"reads of a retired object (must be 0)" },
};

static void print_header(const struct rb_opts *o)
{
	printf("# rcu_bench flavour=%s liburcu=%s writer_cpu=%d reader_cpu=%d qs_every=%u%s\n",
	       RB_FLAVOR, RB_URCU_VERSION, o->wcpu, o->rcpu, o->k,
	       o->shrt ? " short" : "");
#if defined(FLAVOR_MEMB)
	printf("# memb: sys_membarrier %s\n", urcu_memb_has_sys_membarrier ?
	       "used (read side: compiler barriers)" : "unavailable (read side: mfence)");
#elif defined(FLAVOR_BP)
	printf("# bp: sys_membarrier %s\n", urcu_bp_has_sys_membarrier ?
	       "used (read side: compiler barriers)" : "unavailable (read side: mfence)");
#endif
	for (size_t c = 0; c < RB_NCOLS; c++)
		printf("%s%s", c ? "," : "", rb_cols[c].name);
	printf("\n");
}

static void print_value(double v, const char *fmt)
{
	putchar(',');
	if (isnan(v))
		fputs("NA", stdout);
	else
		printf(fmt, v);
}

/* Run the reader loop alone for ms; returns ns per read section. */
static double read_alone(enum rb_cmd cmd, unsigned k, unsigned ms, uint64_t *bad)
{
	uint32_t s = reader_start(cmd, k);

	sleep_ns((uint64_t)ms * 1000000u);
	reader_stop(s);
	*bad += ctl.bad;
	return (double)ctl.ns / (double)ctl.reads;
}

/* Reader time lost per event, in us, from its rate alone (r0) and while
 * `events` happened during its timed window (the rates in sections/ns). */
static double loss_us(double r0, double r1, double events)
{
	return (1.0 - r1 / r0) * (double)ctl.ns / events / 1000.0;
}

/* One run of every measurement; prints one CSV line. Returns the number of
 * violations. */
static uint64_t run_once(const struct rb_opts *o, unsigned run, uint64_t *samples,
			 bool have_mb)
{
	unsigned k = RB_QSBR ? o->k : RB_CHUNK;  /* one no-op QS per chunk */
	double v[RB_NCOLS], r0;
	uint64_t bad = 0, t0, gp_ns;
	uint32_t s;
	size_t n;

	for (size_t c = 0; c < RB_NCOLS; c++)
		v[c] = NAN;
	v[C_WCPU] = o->wcpu;
	v[C_RCPU] = o->rcpu;
	if (getloadavg(&r0, 1) == 1)
		v[C_LOAD1] = r0;
	rb_cpu_sum = rb_wall_sum = 0;
	if (RB_QSBR)
		v[C_QS_EVERY] = o->k;

	/* (1) The read side alone. */
	v[C_BASE] = read_alone(RB_BASE, 1, o->read_ms, &bad);
	v[C_READ] = read_alone(RB_READ, k, o->read_ms, &bad);
	if (RB_QSBR)
		v[C_READ_QS1] = read_alone(RB_READ, 1, o->read_ms, &bad);

	/* (3) The reader's rate alone over the same window as below... */
	r0 = 1.0 / read_alone(RB_READ, k, o->busy_ms, &bad);
	v[C_READS_ALONE] = r0 * 1000.0;

	/* ...and (2, 3) while the writer publishes back to back: its grace
	 * periods with a busy reader, and what they cost the reader. */
	s = reader_start(RB_READ, k);
	t0 = shoal__now_ns();
	n = gp_loop(samples, o->busy_ms);
	gp_ns = shoal__now_ns() - t0;
	reader_stop(s);
	bad += ctl.bad;
	v[C_READS_WRITER] = (double)ctl.reads * 1000.0 / (double)ctl.ns;
	v[C_SLOWDOWN] = 100.0 * (1.0 - v[C_READS_WRITER] / v[C_READS_ALONE]);
	v[C_LOSS_PER_GP] = loss_us(r0, (double)ctl.reads / (double)ctl.ns, (double)n);
	v[C_GP_BUSY_P50] = pct_us(samples, n, 50);
	v[C_GP_BUSY_P99] = pct_us(samples, n, 99);
	v[C_GP_BUSY_MAX] = pct_us(samples, n, 100);
	v[C_GP_BUSY_RATE] = (double)n * 1e9 / (double)gp_ns;

	/* (2) Grace periods with the reader parked: asleep on a futex, and for
	 * QSBR offline, as a dispatcher is while it sleeps. */
	n = gp_loop(samples, o->idle_ms);
	v[C_GP_IDLE_P50] = pct_us(samples, n, 50);
	v[C_GP_IDLE_P99] = pct_us(samples, n, 99);

	/* What a membarrier costs on this machine: the caller with a CPU to
	 * interrupt and without, and the interrupted reader. */
	n = time_calls(samples, o->sys_ms, getppid_once);
	v[C_SYSCALL] = pct_us(samples, n, 50);
	if (have_mb) {
		n = time_calls(samples, o->sys_ms, membarrier_once);
		v[C_MB_IDLE_P50] = pct_us(samples, n, 50);
		s = reader_start(RB_READ, k);
		n = time_calls(samples, o->busy_ms, membarrier_once);
		reader_stop(s);
		bad += ctl.bad;
		v[C_MB_BUSY_P50] = pct_us(samples, n, 50);
		v[C_MB_BUSY_P99] = pct_us(samples, n, 99);
		if (n > 0)
			v[C_MB_LOSS] = loss_us(r0, (double)ctl.reads / (double)ctl.ns,
					       (double)n);
	}
	v[C_SHARE] = 100.0 * (double)rb_cpu_sum / (double)rb_wall_sum;
	v[C_VIOLATIONS] = (double)bad;

	printf("%s,%u", RB_FLAVOR, run);
	for (size_t c = C_WCPU; c < RB_NCOLS; c++)
		print_value(v[c], rb_cols[c].fmt);
	printf("\n");
	fflush(stdout);
	return bad;
}

/* ---- --summarize ------------------------------------------------------------ */

#define RB_MAX_FLAVORS 8
#define RB_MAX_RUNS 1024

struct rb_group {
	char name[16];
	size_t n;
	double *col[RB_NCOLS];          /* RB_MAX_RUNS values per column */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median, min and max of the non-NA values among n; false if none. */
static bool stats(double *vals, size_t n, double *med, double *lo, double *hi)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (!isnan(vals[i]))
			vals[m++] = vals[i];
	if (m == 0)
		return false;
	qsort(vals, m, sizeof(*vals), cmp_double);
	*med = m % 2 ? vals[m / 2] : (vals[m / 2 - 1] + vals[m / 2]) / 2.0;
	*lo = vals[0];
	*hi = vals[m - 1];
	return true;
}

static int summarize(void)
{
	struct rb_group g[RB_MAX_FLAVORS];
	size_t ng = 0;
	char line[1024];
	int ret = 0;

	memset(g, 0, sizeof(g));
	while (fgets(line, sizeof(line), stdin) != NULL) {
		char *save = NULL, *tok;
		struct rb_group *cur = NULL;
		size_t commas = 0;

		/* Result lines only: comments, headers and anything else (a
		 * driver's own notes) are skipped. */
		for (const char *c = line; *c != '\0'; c++)
			commas += *c == ',';
		tok = strtok_r(line, ",\n", &save);
		if (commas != RB_NCOLS - 1 || tok == NULL || tok[0] == '#' ||
		    strcmp(tok, rb_cols[0].name) == 0)
			continue;
		for (size_t i = 0; i < ng; i++)
			if (strcmp(g[i].name, tok) == 0)
				cur = &g[i];
		if (cur == NULL) {
			if (ng == RB_MAX_FLAVORS || strlen(tok) >= sizeof(g[0].name)) {
				fprintf(stderr, "rcu_bench: too many flavours in input\n");
				ret = 1;
				goto out;
			}
			cur = &g[ng++];
			snprintf(cur->name, sizeof(cur->name), "%s", tok);
			for (size_t c = 2; c < RB_NCOLS; c++) {
				cur->col[c] = calloc(RB_MAX_RUNS, sizeof(double));
				if (cur->col[c] == NULL) {
					fprintf(stderr, "rcu_bench: out of memory\n");
					ret = 1;
					goto out;
				}
			}
		}
		if (cur->n == RB_MAX_RUNS)
			continue;
		strtok_r(NULL, ",\n", &save);           /* run number */
		for (size_t c = 2; c < RB_NCOLS; c++) {
			tok = strtok_r(NULL, ",\n", &save);
			cur->col[c][cur->n] = tok == NULL || strcmp(tok, "NA") == 0 ?
					      NAN : strtod(tok, NULL);
		}
		cur->n++;
	}
	if (ng == 0) {
		fprintf(stderr, "rcu_bench: no result lines on stdin\n");
		ret = 1;
		goto out;
	}
	/* Metrics down, flavours across: median [min, max]. */
	printf("| metric |");
	for (size_t i = 0; i < ng; i++)
		printf(" %s (n=%zu) |", g[i].name, g[i].n);
	printf("\n|---|");
	for (size_t i = 0; i < ng; i++)
		printf("---|");
	printf("\n");
	for (size_t c = 2; c < RB_NCOLS; c++) {
		printf("| %s |", rb_cols[c].name);
		for (size_t i = 0; i < ng; i++) {
			double med, lo, hi;

			if (!stats(g[i].col[c], g[i].n, &med, &lo, &hi)) {
				printf(" n/a |");
				continue;
			}
			putchar(' ');
			printf(rb_cols[c].fmt, med);
			if (lo != hi) {
				printf(" [");
				printf(rb_cols[c].fmt, lo);
				printf(", ");
				printf(rb_cols[c].fmt, hi);
				printf("]");
			}
			printf(" |");
		}
		printf("\n");
	}
out:
	for (size_t i = 0; i < ng; i++)
		for (size_t c = 2; c < RB_NCOLS; c++)
			free(g[i].col[c]);
	return ret;
}

/* ---- main ---------------------------------------------------------------------- */

static void usage(FILE *f, const char *argv0)
{
	fprintf(f,
		"usage: %s [--short] [--runs N] [--qs-every K] [--cpus W,R] [--no-header]\n"
		"       %s --summarize < results.csv\n"
		"\n"
		"Measures the liburcu '%s' flavour: read-side cost, synchronize_rcu()\n"
		"latency with the reader busy and asleep, the reader's slowdown while a\n"
		"writer publishes, and membarrier() cost. Prints one CSV line per run.\n"
		"\n"
		"  --short       about 1 s per run, 1 run by default (smoke test)\n"
		"  --runs N      repeat N times (default 5, 1 with --short)\n"
		"  --qs-every K  QSBR: rcu_quiescent_state() every K read sections\n"
		"                (power of two, 1..%u; default 64)\n"
		"  --cpus W,R    pin the writer to CPU W and the reader to CPU R\n"
		"                (default: the first two CPUs this process may use)\n"
		"  --no-header   omit the comment and CSV header lines\n"
		"  --summarize   read result lines (any flavours) on stdin, print the\n"
		"                median [min, max] of every column as a Markdown table\n"
		"\n"
		"Columns:\n",
		argv0, argv0, RB_FLAVOR, RB_CHUNK);
	for (size_t c = 0; c < RB_NCOLS; c++)
		fprintf(f, "  %-23s %s\n", rb_cols[c].name, rb_cols[c].what);
	fprintf(f, "\nExit status: 0, 1 on error or violation, %d (skip) without two CPUs.\n",
		RB_EXIT_SKIP);
}

/* The first two CPUs in our affinity mask, for the default --cpus. */
static int default_cpus(int *w, int *r)
{
	cpu_set_t set;
	int found = 0;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -errno;
	for (int c = 0; c < CPU_SETSIZE && found < 2; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (found++ == 0)
			*w = c;
		else
			*r = c;
	}
	return found == 2 ? 0 : -ENODEV;
}

static bool parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = (unsigned)v;
	return true;
}

int main(int argc, char **argv)
{
	struct rb_opts o = { .header = true, .k = 64, .wcpu = -1, .rcpu = -1 };
	struct rb_reader_arg ra;
	unsigned runs = 0;
	uint64_t *samples = NULL, bad = 0;
	pthread_t reader;
	bool have_mb;
	int ret;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout, argv[0]);
			return 0;
		} else if (strcmp(a, "--summarize") == 0) {
			return summarize();
		} else if (strcmp(a, "--short") == 0) {
			o.shrt = true;
		} else if (strcmp(a, "--no-header") == 0) {
			o.header = false;
		} else if (strcmp(a, "--runs") == 0 && val != NULL &&
			   parse_uint(val, 1, 1000, &runs)) {
			i++;
		} else if (strcmp(a, "--qs-every") == 0 && val != NULL &&
			   parse_uint(val, 1, RB_CHUNK, &o.k) && (o.k & (o.k - 1)) == 0) {
			i++;
		} else if (strcmp(a, "--cpus") == 0 && val != NULL &&
			   sscanf(val, "%d,%d", &o.wcpu, &o.rcpu) == 2 &&
			   o.wcpu >= 0 && o.rcpu >= 0 && o.wcpu != o.rcpu &&
			   o.wcpu < CPU_SETSIZE && o.rcpu < CPU_SETSIZE) {
			i++;
		} else {
			fprintf(stderr, "rcu_bench: bad argument '%s'\n", a);
			usage(stderr, argv[0]);
			return 1;
		}
	}
	o.runs = runs ? runs : o.shrt ? 1 : 5;
	if (o.shrt) {
		o.read_ms = 50;
		o.busy_ms = 100;
		o.idle_ms = 50;
		o.sys_ms = 20;
	} else {
		o.read_ms = 250;
		o.busy_ms = 500;
		o.idle_ms = 250;
		o.sys_ms = 100;
	}
	if (o.wcpu < 0 && default_cpus(&o.wcpu, &o.rcpu) < 0) {
		fprintf(stderr, "rcu_bench: needs two usable CPUs, skipping\n");
		return RB_EXIT_SKIP;
	}
	ret = pin_self(o.wcpu);
	if (ret < 0) {
		fprintf(stderr, "rcu_bench: cannot pin the writer to CPU %d: %s, skipping\n",
			o.wcpu, strerror(-ret));
		return RB_EXIT_SKIP;
	}
	samples = malloc(RB_MAX_SAMPLES * sizeof(*samples));
	if (samples == NULL) {
		fprintf(stderr, "rcu_bench: out of memory\n");
		return 1;
	}

	atomic_init(&rb_pool[0].val, RB_GOOD);
	atomic_init(&rb_pool[1].val, RB_POISON);
	rb_snap = &rb_pool[0];          /* before the reader exists: no race */
	ra.cpu = o.rcpu;
	atomic_init(&ra.status, 0);
	ret = -pthread_create(&reader, NULL, reader_main, &ra);
	if (ret < 0) {
		fprintf(stderr, "rcu_bench: pthread_create: %s\n", strerror(-ret));
		free(samples);
		return 1;
	}
	while ((ret = atomic_load_explicit(&ra.status, memory_order_acquire)) == 0)
		sleep_ns(100000);
	if (ret < 0) {
		fprintf(stderr, "rcu_bench: cannot pin the reader to CPU %d: %s, skipping\n",
			o.rcpu, strerror(-ret));
		pthread_join(reader, NULL);
		free(samples);
		return RB_EXIT_SKIP;
	}

	if (o.header)
		print_header(&o);
	have_mb = membarrier_setup();
	for (unsigned r = 1; r <= o.runs; r++)
		bad += run_once(&o, r, samples, have_mb);

	reader_cmd(RB_EXIT, 0);
	pthread_join(reader, NULL);
	free(samples);
	if (bad != 0) {
		fprintf(stderr, "rcu_bench: %" PRIu64 " reads saw a retired object\n", bad);
		return 1;
	}
	return 0;
}
