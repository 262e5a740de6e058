/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-iceoryx: Shoal against Eclipse iceoryx (2.x, C binding),
 * between two processes pinned to two CPUs, side by side in one run.
 *
 * Cases (64-byte messages; a case's contenders run back to back, in an
 * order rotated by one every run, so that they are compared on samples
 * taken a fraction of a second apart):
 *   pingpong        round trip, both sides busy polling:
 *                   shoal-direct   shoal_send_to() both ways between two
 *                                  groups, receive loop shoal_poll(ctx, 0, 0)
 *                   iceoryx-poll   two publisher/subscriber pairs (ping, pong),
 *                                  loan/publish, take/release in a busy loop
 *                   shoal-request  shoal_request() / shoal_respond(), for
 *                                  reference
 *                   plain          the limit: a plain fixed-slot SPSC ring
 *                                  each way (bench/plain_ring.h), 64-byte
 *                                  slots
 *                   plain-128      the same with 128-byte slots: the bytes
 *                                  a 64-byte Shoal message moves (record
 *                                  header, envelope, payload)
 *                   plain-summary  plain, each receiver polling a ready
 *                                  summary word that the sender sets, with
 *                                  Shoal's own doorbell calls
 *   pingpong-sleep  round trip through each library's blocking receive:
 *                   shoal-sleep    shoal_poll(ctx, 0, -1) with the smallest
 *                                  spin budget (1 ns); the doorbell still
 *                                  polls 64 times before it may sleep, which
 *                                  often covers a round trip (the report
 *                                  gives the sleeps per round trip)
 *                   iceoryx-waitset  iox_ws_wait() on the subscriber's
 *                                  HAS_DATA state (sleeps at once)
 *   tput            one-way throughput, receiver busy polling:
 *                   shoal-tput     shoal_try_send_to() in a loop, retried on
 *                                  -EAGAIN (nothing is dropped)
 *                   iceoryx-tput   loan/publish with WAIT_FOR_CONSUMER and the
 *                                  subscriber's queue BLOCK_PRODUCER (the
 *                                  publisher waits instead of dropping)
 *                   shoal-burst    shoal_try_send_to_burst() of 32
 *                   shoal-batch    the same, the receiver's handler on_batch
 *                   shoal-burst-nostream  shoal-burst with router.stream off
 *                                  (plain stores, as where lines are near),
 *                                  whatever --stream says: beside
 *                                  shoal-burst, what streaming is worth in
 *                                  the placement of the run
 *                   plain, plain-128  the plain ring, one release store a
 *                                  message (the consumer's: one a batch)
 *                   plain-burst, plain-burst-128  one release store a 32
 *                   ring-burst     Shoal's ring alone (shm/ring.h, a direct
 *                                  link's capacity), no runtime: runs of 32
 *                                  claimed, written record by record, one
 *                                  commit; read in runs: the ring's own
 *                                  batch of 32, which issue 12's burst
 *                                  target is stated against
 *
 * Processes: the parent starts its own iox-roudi (fork/exec, its own
 * process group, monitoring off, SIGTERM if the parent dies), waits until a
 * probe runtime can register, and stops it by pid at the end, on error and
 * on Ctrl-C (SIGTERM, SIGKILL after 5 s), then removes only the files of
 * RouDi's that did not exist before it started and RouDi left behind. For
 * every Shoal sample it starts a Shoal router in-process
 * (shoal_router_start()). It then forks side A (pinned to the first CPU:
 * ping, sender) and side B (second CPU: pong, receiver) and sleeps in
 * waitpid() while they run, so it never competes for the two CPUs. The
 * router stays idle: direct sends skip it. Every iceoryx sample registers
 * two fresh runtimes with RouDi and deregisters them at exit; a side that
 * was killed is deregistered by the parent (iox_forget()).
 *
 * Every sample: the two sides attach (Shoal groups or iceoryx ports), time
 * one empty receive call, create the Shoal direct rings while the receivers
 * are parked (see shoal_side()), warm up, run the placement probe (a cache
 * line bounced between the two CPUs), then measure while reading their
 * scheduler run delay (/proc/self/schedstat) and voluntary context switches
 * before and after: a sample in which either side waited for its CPU 2 % of
 * the time or more is "disturbed" and run again (up to 3 times, not with
 * --short or --smoke). A sample whose side failed (a timeout, iceoryx
 * aborting: on this machine, starvation by other load) is run again twice
 * at most, visibly; lost or corrupted messages never are.
 *
 * The barrier, the placement probe, the fork-and-reap with its watchdog, the
 * signal handlers, the messages and the histograms are shoal-bench-ring's
 * (bench/bench.h, harness.c, stats.c).
 *
 * Ordering guarantees (the control block, a shared anonymous mapping made
 * before the first fork):
 *   R1 (barrier arrival, fetch_add acq_rel) pairs with A1 (the other side's
 *      acquire load that sees the count reach the round), both in
 *      bench_barrier(): each side's setup happens before the other side goes
 *      on. The parameters were written by the parent before fork().
 *   The probe line carries no data: relaxed, only its transfer is timed.
 *   Each side writes only its own result slot; the parent reads both after
 *   waitpid() has reaped the writer (process exit orders them).
 * Progress: the barrier and the probe spin; a side that dies leaves its peer
 * spinning, and the parent kills the peer when it reaps the dead side, or
 * both when its watchdog fires.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal.h>

#include <iceoryx_binding_c/log.h>
#include <iceoryx_binding_c/publisher.h>
#include <iceoryx_binding_c/runtime.h>
#include <iceoryx_binding_c/subscriber.h>
#include <iceoryx_binding_c/wait_set.h>

#include "bench/plain_ring.h"
#include "bench/report.h"

#define PROG "shoal-bench-iceoryx"
#define ROUDI_PATH "/usr/bin/iox-roudi"

#define MSG_BYTES 64u
#define MSG_PING 1u
#define MSG_PONG 2u
#define MSG_HELLO 3u               /* creates a direct ring; not counted */

#define WARMUP_RT 2000u            /* round trips before a ping-pong is timed */
#define WARMUP_MSGS 8192u          /* messages before a throughput is timed */
#define EMPTY_POLLS 20000u         /* empty receive calls timed per side */
#define IOX_QUEUE 256u             /* iceoryx 2.0's largest subscriber queue */
#define SHOAL_DIRECT_CAP (32u * 1024)  /* 256 records of 128 B: the same depth */
#define MAX_RERUNS 3
#define MAX_FAILED_RETRIES 2
#define DISTURBED_SHARE 0.02       /* run delay / measured time */
#define CONNECT_TIMEOUT_NS (10 * INT64_C(1000000000))
#define ROUDI_READY_TIMEOUT_NS (10 * INT64_C(1000000000))
#define ROUDI_STOP_TIMEOUT_NS (5 * INT64_C(1000000000))

/* ---- contenders and cases ------------------------------------------------- */

enum contender {
	C_SHOAL_DIRECT,
	C_IOX_POLL,
	C_SHOAL_REQUEST,
	C_SHOAL_SLEEP,
	C_IOX_WAITSET,
	C_SHOAL_TPUT,
	C_IOX_TPUT,
	C_SHOAL_BURST,
	C_SHOAL_BATCH,
	C_SHOAL_BURST_NOSTREAM,
	C_PLAIN_PP,
	C_PLAIN_PP_REC,
	C_PLAIN_PP_SUM,
	C_PLAIN_TPUT,
	C_PLAIN_TPUT_REC,
	C_PLAIN_BURST,
	C_PLAIN_BURST_REC,
	C_RING_BURST,
	C_COUNT
};

enum kind { K_PINGPONG, K_TPUT };

enum lib_kind { L_SHOAL, L_IOX, L_PLAIN, L_RING };

/*
 * The plain contenders are the limit of this machine for each case, in the
 * same run (bench/plain_ring.h, as shoal-bench-ring's `plain`): 64-byte
 * slots carry the message as the two libraries do; PLAIN_REC_BYTES slots
 * carry what a 64-byte Shoal message moves, its 8-byte record header and
 * 56-byte envelope before the payload, so that the cost of those bytes is
 * measured apart from the rest of the runtime.
 */
#define PLAIN_REC_BYTES 128u
#define PLAIN_SLOTS 256u           /* the others' depth (IOX_QUEUE, SHOAL_DIRECT_CAP) */
#define BURST 32u                  /* messages per burst (shoal-burst, plain-burst) */

static const struct {
	const char *name;
	const char *what;
	enum kind kind;
	enum lib_kind lib;
	bool sleep;               /* receivers sleep (Shoal spin 1 ns / waitset) */
	uint32_t slot, batch;     /* plain: slot bytes, messages per publication */
	bool summary;             /* plain: a ready summary, as Shoal's poll reads */
	bool no_stream;           /* Shoal: router.stream off, whatever --stream says */
} contenders[C_COUNT] = {
	[C_SHOAL_DIRECT] = { "shoal-direct", "Shoal shoal_send_to() both ways, shoal_poll(ctx, 0, 0) loop",
			     K_PINGPONG, L_SHOAL, false },
	[C_IOX_POLL] = { "iceoryx-poll", "iceoryx loan/publish, take/release in a busy loop",
			 K_PINGPONG, L_IOX, false },
	[C_SHOAL_REQUEST] = { "shoal-request", "Shoal shoal_request() / shoal_respond()",
			      K_PINGPONG, L_SHOAL, false },
	[C_SHOAL_SLEEP] = { "shoal-sleep", "Shoal send_to, shoal_poll(ctx, 0, -1), spin budget 1 ns",
			    K_PINGPONG, L_SHOAL, true },
	[C_IOX_WAITSET] = { "iceoryx-waitset", "iceoryx loan/publish, iox_ws_wait() on HAS_DATA",
			    K_PINGPONG, L_IOX, true },
	[C_SHOAL_TPUT] = { "shoal-tput", "Shoal shoal_try_send_to() loop, retried on -EAGAIN",
			   K_TPUT, L_SHOAL, false },
	[C_IOX_TPUT] = { "iceoryx-tput", "iceoryx loan/publish, WAIT_FOR_CONSUMER + BLOCK_PRODUCER",
			 K_TPUT, L_IOX, false },
	[C_SHOAL_BURST] = { "shoal-burst", "Shoal shoal_try_send_to_burst() of 32, rest retried on -EAGAIN",
			    K_TPUT, L_SHOAL, false },
	[C_SHOAL_BATCH] = { "shoal-batch", "as shoal-burst, the receiver's handler on_batch",
			    K_TPUT, L_SHOAL, false },
	[C_SHOAL_BURST_NOSTREAM] = { "shoal-burst-nostream", "as shoal-burst, router.stream off: "
				     "the records written with plain stores", K_TPUT, L_SHOAL,
				     false, .no_stream = true },
	[C_PLAIN_PP] = { "plain", "the limit: a plain fixed-slot SPSC ring each way, 64-byte slots, "
			 "one release store per message", K_PINGPONG, L_PLAIN, false, MSG_BYTES, 1 },
	[C_PLAIN_PP_REC] = { "plain-128", "as plain, 128-byte slots: the bytes of a 64-byte Shoal "
			     "message (record header, envelope, payload)", K_PINGPONG, L_PLAIN, false,
			     PLAIN_REC_BYTES, 1 },
	[C_PLAIN_PP_SUM] = { "plain-summary", "as plain, each side's receiver polling a ready "
			     "summary word (Shoal's shoal_doorbell_ready_take()) that the sender "
			     "sets after publishing (shoal_doorbell_wake())", K_PINGPONG, L_PLAIN,
			     false, MSG_BYTES, 1, true },
	[C_PLAIN_TPUT] = { "plain", "the limit: a plain fixed-slot SPSC ring, 64-byte slots, one "
			   "release store per message, the consumer's per batch", K_TPUT, L_PLAIN,
			   false, MSG_BYTES, 1 },
	[C_PLAIN_TPUT_REC] = { "plain-128", "as plain, 128-byte slots (a Shoal message's bytes)",
			       K_TPUT, L_PLAIN, false, PLAIN_REC_BYTES, 1 },
	[C_PLAIN_BURST] = { "plain-burst", "as plain, one release store per 32 messages",
			    K_TPUT, L_PLAIN, false, MSG_BYTES, BURST },
	[C_PLAIN_BURST_REC] = { "plain-burst-128", "as plain-burst, 128-byte slots (a Shoal "
				"message's bytes)", K_TPUT, L_PLAIN, false, PLAIN_REC_BYTES, BURST },
	[C_RING_BURST] = { "ring-burst", "Shoal's ring alone (shm/ring.h, as a direct link's, "
			   "of its capacity), no runtime: 64-byte payloads claimed 32 as a run, each "
			   "record written whole, one commit; the receiver peeks runs and releases "
			   "each: the ring's own batch of 32, what issue 12's burst target is stated "
			   "against", K_TPUT, L_RING, false, MSG_BYTES, BURST },
};

#define CASE_MAX 10
static const struct {
	const char *name;
	const char *title;
	unsigned n;
	enum contender c[CASE_MAX];
	double share;             /* of --duration */
} cases[] = {
	{ "pingpong", "Ping-pong round trip, 64 B, both sides busy polling", 6,
	  { C_SHOAL_DIRECT, C_IOX_POLL, C_SHOAL_REQUEST, C_PLAIN_PP, C_PLAIN_PP_REC,
	    C_PLAIN_PP_SUM }, 1.0 },
	{ "pingpong-sleep", "Ping-pong round trip, 64 B, receivers sleep until woken", 2,
	  { C_SHOAL_SLEEP, C_IOX_WAITSET }, 0.5 },
	{ "tput", "One-way throughput, 64 B, receiver busy polling", 10,
	  { C_SHOAL_TPUT, C_IOX_TPUT, C_SHOAL_BURST, C_SHOAL_BATCH, C_SHOAL_BURST_NOSTREAM,
	    C_PLAIN_TPUT, C_PLAIN_TPUT_REC, C_PLAIN_BURST, C_PLAIN_BURST_REC, C_RING_BURST },
	  1.0 },
};

/* The plain contender each contender is measured against (the limit of
 * what it does: one message at a time, or bursts), or C_COUNT. */
static enum contender limit_of(enum contender c)
{
	switch (c) {
	case C_SHOAL_DIRECT:
	case C_IOX_POLL:
	case C_SHOAL_REQUEST:
	case C_PLAIN_PP_REC:
	case C_PLAIN_PP_SUM:
	case C_PLAIN_PP:
		return C_PLAIN_PP;
	case C_SHOAL_TPUT:
	case C_IOX_TPUT:
	case C_PLAIN_TPUT_REC:
	case C_PLAIN_TPUT:
		return C_PLAIN_TPUT;
	case C_SHOAL_BURST:
	case C_SHOAL_BATCH:
	case C_SHOAL_BURST_NOSTREAM:
	case C_PLAIN_BURST_REC:
	case C_RING_BURST:
	case C_PLAIN_BURST:
		return C_PLAIN_BURST;
	default:
		return C_COUNT;
	}
}
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ---- the control block ---------------------------------------------------- */

struct params {
	enum contender c;
	uint64_t duration_ns;
	int cpu[2];
	char system[32];          /* Shoal system name */
	char iox_name[2][64];     /* iceoryx runtime names of sides A and B */
	char iox_instance[64];    /* iceoryx service instance: fresh per sample */
};

struct side_res {
	uint64_t t_start;         /* A: measurement start (CLOCK_MONOTONIC) */
	uint64_t t_end;           /* B (tput): when the last message arrived */
	uint64_t span_ns;         /* this side's measured time */
	uint64_t msgs;            /* round trips (A) or messages (A sent, B got) */
	struct bench_pct lat;     /* A, ping-pong: round trip */
	uint64_t retries;         /* A, tput: sends refused (ring full, no chunk) */
	uint64_t lost;            /* B, tput: messages missing (must be 0) */
	double probe_ns;          /* A: placement probe round trip */
	double poll_ns;           /* one empty receive call */
	uint64_t waited_ns;       /* run delay during the measurement */
	uint64_t sleeps;          /* voluntary context switches during it */
	int cpu;                  /* sched_getcpu() after pinning */
	int err;
	char msg[200];
	char stage[32];           /* how far this side got: printed on failure */
};

struct ctl {
	_Alignas(128) _Atomic uint32_t arrived;   /* two-party barrier */
	_Alignas(128) _Atomic uint64_t probe;     /* the placement probe's line */
	_Alignas(128) struct params p;
	struct side_res res[2];
};

static struct ctl *ctl;
static pid_t parent_pid;

/* ---- messages and the round-trip histogram ---------------------------------- */

/* bench.h's messages at our size: 64 bytes, no line to read past the first. */
static uint64_t msg_sink;

static inline int msg_check(const void *msg, uint64_t expect)
{
	return bench_msg_check(msg, MSG_BYTES, expect, &msg_sink);
}

/* Side A's round trips during the measurement. */
static struct bench_hist hist;

/* ---- one side: failing, measuring, barrier, probe ----------------------------- */

struct side {
	int side;                 /* 0: A (ping, sender), 1: B (pong, receiver) */
	const struct params *p;
	struct side_res *res;
	uint64_t delay0, t0, nvcsw0;
};

__attribute__((format(printf, 3, 4)))
static int side_fail(struct side *s, int err, const char *fmt, ...)
{
	va_list ap;

	if (s->res->err != 0)
		return err;       /* keep the first reason */
	va_start(ap, fmt);
	vsnprintf(s->res->msg, sizeof(s->res->msg), fmt, ap);
	va_end(ap);
	s->res->err = err;
	return err;
}

/* This side's result slot: stage() records progress there. */
static struct side_res *stage_res;

static void stage(const char *what, uint32_t n)
{
	if (stage_res != NULL)
		snprintf(stage_res->stage, sizeof(stage_res->stage), "%s %u", what, n);
}

/* Voluntary context switches of the calling thread: its sleeps. */
static uint64_t nvcsw(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_nvcsw : 0;
}

static void measure_begin(struct side *s)
{
	stage("measuring", 0);
	s->delay0 = bench_run_delay_ns();
	s->nvcsw0 = nvcsw();
	s->t0 = shoal__now_ns();
}

static void measure_end(struct side *s)
{
	stage("measured", 0);
	s->res->span_ns = shoal__now_ns() - s->t0;
	s->res->sleeps = nvcsw() - s->nvcsw0;
	s->res->waited_ns = bench_run_delay_ns() - s->delay0;
}

static void barrier(uint32_t round)
{
	stage("barrier", round);
	bench_barrier(&ctl->arrived, round);
}

/* Barrier, placement probe, barrier: both sides then start measuring together. */
static void side_ready(struct side *s, uint32_t round)
{
	double probe_ns;

	barrier(round);
	probe_ns = bench_probe(&ctl->probe, s->side);
	if (s->side == 0)
		s->res->probe_ns = probe_ns;
	barrier(round + 1);
}

/* ---- one library's sample, both sides ------------------------------------------ */

/*
 * What side_run() needs from a library: calls on `x`, the library's state
 * of this side. Each returns 0 or a negative errno. side_run() and its
 * loops are always inlined into shoal_side() and iox_side(), which pass a
 * constant struct lib: the compiler then calls (or inlines) the library's
 * functions directly, so the timed loops carry no indirect call that the
 * code they replace did not have.
 */
#define SIDE_INLINE static inline __attribute__((always_inline))
struct lib {
	/* A, throughput: send message `seq`, retried while the library has no
	 * room for it (each retry counted in res->retries). */
	int (*send)(struct side *s, void *x, uint64_t seq);
	/* A, ping-pong: one round trip of message `seq`. */
	int (*round_trip)(void *x, uint64_t seq);
	/* A, ping-pong: send the last message (`seq` carries BENCH_STOP). */
	int (*send_last)(void *x, uint64_t seq);
	/* B: receive (ping-pong: and answer) the first `n` messages, the
	 * warm-up; with n == 0 the rest, up to the last one, then set
	 * res->msgs and res->t_end. */
	int (*receive)(struct side *s, void *x, uint64_t n);
	const char *(*err_str)(int err);
	const char *warm_fail[2];  /* a failed warm-up's message, before and after err_str() */
};

/* Messages (throughput) or round trips (ping-pong) before the measurement. */
static uint64_t warmup_count(enum contender c)
{
	return contenders[c].kind == K_TPUT ? WARMUP_MSGS : WARMUP_RT;
}

/* Side A, throughput: send from `seq` on until the sample's time is up,
 * then the last message. */
SIDE_INLINE int send_for(struct side *s, const struct lib *l, void *x, uint64_t seq)
{
	uint64_t first = seq, deadline = s->t0 + s->p->duration_ns;
	int ret = 0;

	for (; ret == 0; seq++) {
		if (seq % BENCH_CLOCK_EVERY == 0 && shoal__now_ns() >= deadline)
			break;
		ret = l->send(s, x, seq);
	}
	if (ret == 0)
		ret = l->send(s, x, seq | BENCH_STOP);
	s->res->msgs = seq - first + 1;
	measure_end(s);
	return ret;
}

/* Side A, ping-pong: timed round trips from `seq` on until the sample's
 * time is up, then the last message. */
SIDE_INLINE int round_trips_for(struct side *s, const struct lib *l, void *x, uint64_t seq)
{
	uint64_t deadline = s->t0 + s->p->duration_ns, t0, t1 = 0;
	int ret = 0;

	memset(&hist, 0, sizeof(hist));
	for (; ret == 0 && t1 < deadline; seq++) {
		t0 = shoal__now_ns();
		ret = l->round_trip(x, seq);
		t1 = shoal__now_ns();
		bench_hist_add(&hist, t1 - t0);
	}
	measure_end(s);
	s->res->msgs = hist.n;
	bench_hist_pct(&hist, &s->res->lat);
	if (ret == 0)
		ret = l->send_last(x, seq | BENCH_STOP);
	return ret;
}

/*
 * A side's sample once its ports are connected: warm up, meet at barriers
 * `round` and `round + 1` around the placement probe, measure, and meet at
 * `round + 2` once the last message was seen. On failure it leaves at
 * once: the parent kills the peer when it reaps this side.
 */
SIDE_INLINE int side_run(struct side *s, const struct lib *l, void *x, uint32_t round)
{
	enum contender c = s->p->c;
	bool tput = contenders[c].kind == K_TPUT;
	uint64_t warm = warmup_count(c);
	int ret = 0;

	stage("warm-up", 0);
	if (s->side == 0)
		for (uint64_t seq = 0; seq < warm && ret == 0; seq++)
			ret = tput ? l->send(s, x, seq) : l->round_trip(x, seq);
	else
		ret = l->receive(s, x, warm);
	if (ret < 0)
		return side_fail(s, ret, "%s%s%s", l->warm_fail[0], l->err_str(ret),
				 l->warm_fail[1]);
	s->res->retries = 0;
	side_ready(s, round);
	measure_begin(s);
	if (s->side == 0) {
		s->res->t_start = s->t0;
		ret = tput ? send_for(s, l, x, warm) : round_trips_for(s, l, x, warm);
	} else {
		ret = l->receive(s, x, 0);
		measure_end(s);
	}
	if (ret < 0)
		return side_fail(s, ret, "%s%s: %s", contenders[c].name,
				 s->side == 0 ? "" : " receiver", l->err_str(ret));
	barrier(round + 2);   /* the last message was seen: both may leave */
	return 0;
}

/* ---- Shoal sides ---------------------------------------------------------- */

static const struct shoal_type shoal_types[] = {
	{ MSG_PING, MSG_BYTES, "iox-bench-ping" },
	{ MSG_PONG, MSG_BYTES, "iox-bench-pong" },
	{ MSG_HELLO, MSG_BYTES, "iox-bench-hello" },
};

/* What the handler of this process saw. One worker: one thread. */
static struct {
	uint64_t expect;          /* next sequence number */
	uint64_t received;
	uint64_t reply_to;        /* B, ping-pong: actor 0 of "ping" */
	uint64_t t_end;
	bool answer;              /* B, ping-pong: answer every message */
	bool got, stop;
	int err;
} rx;

/* This side's Shoal state, for side_run(). */
struct shoal_conn {
	struct shoal_ctx *ctx;
	uint64_t peer;            /* the other side's group, actor 0 */
	enum contender c;
	bool sleep;               /* receive with shoal_poll(ctx, 0, -1) */
	unsigned char buf[MSG_BYTES];
};

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	int chk, ret;

	if (m->type == MSG_HELLO)
		return;
	chk = m->len == MSG_BYTES ? msg_check(m->data, rx.expect) : -EBADMSG;
	if (chk < 0) {
		rx.err = -EBADMSG;
		return;
	}
	rx.received++;
	if (chk == 1) {
		rx.t_end = shoal__now_ns();
		rx.stop = true;
		return;
	}
	rx.expect++;
	rx.got = true;
	if (!rx.answer)
		return;
	if (m->env->flags & SHOAL_ENV_REQUEST)
		ret = shoal_respond(a->ctx, m, MSG_PONG, m->data, m->len);
	else
		ret = shoal_send_to(a->ctx, rx.reply_to, MSG_PONG, m->data, m->len);
	if (ret < 0)
		rx.err = ret;
}

/* shoal-batch's receiver: each message of the batch as on_message takes it. */
static void on_batch(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		on_message(a, &msgs[k]);
}

/* Handle messages until *flag (set by on_message) or, with flag NULL,
 * until `n` were received in all; stops at an error. */
static int shoal_wait(struct shoal_conn *x, const bool *flag, uint64_t n)
{
	while (flag != NULL ? !*flag : rx.received < n) {
		int k = shoal_poll(x->ctx, 0, x->sleep ? -1 : 0);

		if (k < 0)
			return k;
		if (rx.err != 0)
			return rx.err;
		if (k == 0)
			bench_relax();
	}
	return rx.err;
}

static double shoal_empty_poll_ns(struct shoal_ctx *ctx)
{
	uint64_t t0 = shoal__now_ns();

	for (unsigned i = 0; i < EMPTY_POLLS; i++)
		shoal_poll(ctx, 0, 0);
	return (double)(shoal__now_ns() - t0) / EMPTY_POLLS;
}

/* Side A: one round trip. */
static int shoal_round_trip(void *arg, uint64_t seq)
{
	struct shoal_conn *x = arg;
	int ret;

	bench_msg_stamp(x->buf, MSG_BYTES, seq);
	if (x->c == C_SHOAL_REQUEST) {
		unsigned char back[MSG_BYTES];
		struct shoal_reply reply = { .buf = back, .cap = sizeof(back) };

		/* 10 s: only a side starved by other load comes near it. */
		ret = shoal_request(x->ctx, x->peer, MSG_PING, x->buf, MSG_BYTES,
				    10 * INT64_C(1000000000), &reply);
		if (ret < 0)
			return ret;
		if (reply.len != MSG_BYTES || msg_check(back, seq) != 0)
			return -EBADMSG;
		rx.expect++;
		return 0;
	}
	rx.got = false;
	ret = shoal_send_to(x->ctx, x->peer, MSG_PING, x->buf, MSG_BYTES);
	if (ret < 0)
		return ret;
	return shoal_wait(x, &rx.got, 0);
}

static int shoal_send_retry(struct side *s, void *arg, uint64_t seq)
{
	struct shoal_conn *x = arg;
	int ret;

	bench_msg_stamp(x->buf, MSG_BYTES, seq);
	while ((ret = shoal_try_send_to(x->ctx, x->peer, MSG_PING, x->buf, MSG_BYTES)) == -EAGAIN) {
		s->res->retries++;
		bench_relax();
	}
	return ret;
}

/* shoal-burst: messages gather here and go BURST at a time (the last,
 * with BENCH_STOP, flushes; the warm-up is a multiple of BURST). */
static struct {
	struct shoal_burst_msg m[BURST];
	unsigned char buf[BURST][MSG_BYTES];
	uint32_t n;
} bq;

static int shoal_send_burst_retry(struct side *s, void *arg, uint64_t seq)
{
	struct shoal_conn *x = arg;
	uint32_t done = 0, sent;
	int ret = 0;

	bench_msg_stamp(bq.buf[bq.n], MSG_BYTES, seq);
	bq.m[bq.n] = (struct shoal_burst_msg){ MSG_PING, MSG_BYTES, bq.buf[bq.n] };
	if (++bq.n < BURST && !(seq & BENCH_STOP))
		return 0;
	while (done < bq.n) {
		ret = shoal_try_send_to_burst(x->ctx, x->peer, bq.m + done, bq.n - done, &sent);
		done += sent;
		if (ret == -EAGAIN) {
			s->res->retries++;
			bench_relax();
		} else if (ret < 0) {
			break;
		}
	}
	bq.n = 0;
	return ret == -EAGAIN ? 0 : ret;
}

static int shoal_send_last(void *arg, uint64_t seq)
{
	struct shoal_conn *x = arg;

	bench_msg_stamp(x->buf, MSG_BYTES, seq);
	return shoal_send_to(x->ctx, x->peer, MSG_PING, x->buf, MSG_BYTES);
}

static int shoal_receive(struct side *s, void *arg, uint64_t n)
{
	struct shoal_conn *x = arg;
	int ret;

	if (n > 0)
		return shoal_wait(x, NULL, n);
	rx.received = 0;
	ret = shoal_wait(x, &rx.stop, 0);
	s->res->msgs = rx.received;
	s->res->t_end = rx.t_end;
	return ret;
}

static const struct lib shoal_lib = {
	.send = shoal_send_retry,
	.round_trip = shoal_round_trip,
	.send_last = shoal_send_last,
	.receive = shoal_receive,
	.err_str = shoal_strerror,
	.warm_fail = { "warm-up: ", "" },
};

static const struct lib shoal_burst_lib = {
	.send = shoal_send_burst_retry,
	.round_trip = shoal_round_trip,
	.send_last = shoal_send_last,
	.receive = shoal_receive,
	.err_str = shoal_strerror,
	.warm_fail = { "warm-up: ", "" },
};

static int shoal_side(struct side *s)
{
	enum contender c = s->p->c;
	struct shoal_group_desc d = {
		.name = s->side == 0 ? "ping" : "pong", .types = shoal_types,
		.n_types = sizeof(shoal_types) / sizeof(shoal_types[0]), .node = -1,
		.on_message = on_message, .on_batch = c == C_SHOAL_BATCH ? on_batch : NULL,
	};
	struct shoal_err err = { { 0 } };
	struct shoal_conn x = { .c = c, .sleep = contenders[c].sleep };
	struct shoal_group *g;
	int ret;

	bench_msg_fill(x.buf, MSG_BYTES);
	stage("shoal_group_attach", 0);
	ret = shoal_group_attach(&g, &d, s->p->system, &err);
	if (ret < 0)
		return side_fail(s, ret, "shoal_group_attach: %s (%s)", shoal_strerror(ret), err.msg);
	x.ctx = shoal_group_worker(g, 0);
	barrier(1);   /* both groups attached: the peer's address is known */
	x.peer = shoal_group_lookup(g, s->side == 0 ? "pong" : "ping", 0);
	if (x.peer == SHOAL_ADDR_NONE) {
		ret = side_fail(s, -ENOENT, "shoal_group_lookup: no peer group");
		goto out;
	}
	rx.reply_to = x.peer;
	rx.answer = s->side == 1 && contenders[c].kind != K_TPUT;
	s->res->poll_ns = shoal_empty_poll_ns(x.ctx);
	barrier(2);
	/* Open the two direct links before anything is timed (the first
	 * send_to() waits for the router to create the ring). */
	if (s->side == 0)
		ret = shoal_send_to(x.ctx, x.peer, MSG_HELLO, x.buf, MSG_BYTES);
	barrier(3);
	if (s->side == 1 && ret == 0)
		ret = shoal_send_to(x.ctx, x.peer, MSG_HELLO, x.buf, MSG_BYTES);
	if (ret < 0) {
		side_fail(s, ret, "creating the direct ring: %s", shoal_strerror(ret));
		goto out;
	}
	barrier(4);
	ret = side_run(s, c == C_SHOAL_BURST || c == C_SHOAL_BATCH || c == C_SHOAL_BURST_NOSTREAM ?
			  &shoal_burst_lib : &shoal_lib,
		       &x, 5);
out:
	shoal_group_detach(g);
	return ret;
}

/* ---- plain sides: the limit ------------------------------------------------ */

static const char *errno_str(int err)
{
	return strerror(-err);
}

/* What a receiver of the plain and ring contenders has taken. */
struct rx_count {
	uint64_t expect, received, t_end;
};

/*
 * B: receive with `take` (which returns 1 after the last message, 0, or
 * an error) the first `n` messages, the warm-up; with n == 0 the rest, up
 * to the last one, then set res->msgs and res->t_end.
 */
static int receive_with(struct side *s, void *x, struct rx_count *rc, uint64_t n,
			int (*take)(void *x))
{
	int ret = 0;

	if (n > 0) {
		while (rc->received < n && ret == 0)
			ret = take(x);
		return ret < 0 ? ret : 0;
	}
	rc->received = 0;
	while (ret == 0)
		ret = take(x);
	s->res->msgs = rc->received;
	s->res->t_end = rc->t_end;
	return ret < 0 ? ret : 0;
}

/* Two plain rings in a shared anonymous mapping made before the first
 * fork and written once through (parent_init()), so that no sample pays
 * the first touch of its pages: ring 0 carries side A's messages, ring 1
 * side B's answers. sample_run() lays them out afresh for every sample. */
static unsigned char *plain_mem;
#define PLAIN_RING_LEN plain_ring_size(PLAIN_REC_BYTES, PLAIN_SLOTS)
/* plain-summary: the doorbell (its ready word) of ring i's receiver. */
#define PLAIN_DB(i) ((struct shoal_doorbell *)(plain_mem + 2 * PLAIN_RING_LEN) + (i))
/* ring-burst: a Shoal ring of a direct link's capacity, page-aligned after them. */
#define RING_OFF ((2 * PLAIN_RING_LEN + 2 * sizeof(struct shoal_doorbell) + 4095) & ~(size_t)4095)
#define RING_MEM (plain_mem + RING_OFF)
static uint64_t ring_len;        /* shoal_ring_size(SHOAL_DIRECT_CAP), set in parent_init() */
#define PLAIN_MEM_LEN (RING_OFF + ring_len)

/* This side's plain state, for side_run(). */
struct plain_conn {
	struct plain_prod p;      /* A: ring 0; B: ring 1 (its answers) */
	struct plain_cons c;      /* A: ring 1; B: ring 0 */
	uint32_t slot, batch;
	uint32_t pending;         /* A: written since the last publication */
	struct shoal_doorbell *out_db, *in_db;   /* plain-summary, else NULL */
	bool answer;              /* B, ping-pong: answer every message */
	struct rx_count rc;
	_Alignas(64) unsigned char tmpl[PLAIN_REC_BYTES];
};

/* Write message `seq` into the next free slot; publish when a batch is
 * full or it is the last. Counts the waits for room as retries. */
static int plain_send(struct side *s, void *arg, uint64_t seq)
{
	struct plain_conn *x = arg;
	void *dst;

	while (plain_prod_room(&x->p, x->pending + 1) < x->pending + 1) {
		if (s != NULL)
			s->res->retries++;
		bench_relax();
	}
	dst = plain_prod_slot(&x->p, x->pending);
	bench_copy(dst, x->tmpl, x->slot);
	bench_msg_stamp(dst, x->slot, seq);
	if (++x->pending == x->batch || (seq & BENCH_STOP)) {
		plain_prod_publish(&x->p, x->pending);
		x->pending = 0;
		if (x->out_db != NULL)
			shoal_doorbell_wake(x->out_db);
	}
	return 0;
}

/* Up to `want` slots to read: with a summary, only once it says "look". */
static uint32_t plain_avail(struct plain_conn *x, uint32_t want)
{
	if (x->in_db != NULL && !shoal_doorbell_ready_take(x->in_db) && x->c.head_seen == x->c.tail)
		return 0;
	return plain_cons_avail(&x->c, want);
}

static int plain_send_last(void *arg, uint64_t seq)
{
	return plain_send(NULL, arg, seq);
}

/* Take what has arrived, up to a burst: check each message, answer it
 * (ping-pong, side B). Returns 1 after the last message, 0, or -EBADMSG. */
static int plain_take(void *arg)
{
	struct plain_conn *x = arg;
	uint32_t n = plain_avail(x, BURST);
	int ret = 0;

	if (n == 0) {
		bench_relax();
		return 0;
	}
	for (uint32_t k = 0; k < n && ret == 0; k++) {
		const void *m = plain_cons_slot(&x->c, k);

		ret = bench_msg_check(m, x->slot, x->rc.expect, &msg_sink);
		if (ret < 0)
			break;
		x->rc.received++;
		if (ret == 1) {
			x->rc.t_end = shoal__now_ns();
			break;
		}
		x->rc.expect++;
		if (x->answer) {
			while (plain_prod_room(&x->p, 1) < 1)
				bench_relax();
			/* Answer first, release after: the answer is what A waits for. */
			bench_copy(plain_prod_slot(&x->p, 0), m, x->slot);
			plain_prod_publish(&x->p, 1);
			if (x->out_db != NULL)
				shoal_doorbell_wake(x->out_db);
		}
	}
	plain_cons_release(&x->c, n);
	return ret;
}

static int plain_round_trip(void *arg, uint64_t seq)
{
	struct plain_conn *x = arg;
	uint32_t n;
	int ret;

	plain_send(NULL, x, seq);
	while ((n = plain_avail(x, 1)) == 0)
		bench_relax();
	ret = bench_msg_check(plain_cons_slot(&x->c, 0), x->slot, seq, &msg_sink);
	plain_cons_release(&x->c, 1);
	return ret == 0 ? 0 : -EBADMSG;
}

static int plain_receive(struct side *s, void *arg, uint64_t n)
{
	return receive_with(s, arg, &((struct plain_conn *)arg)->rc, n, plain_take);
}

static const struct lib plain_lib = {
	.send = plain_send,
	.round_trip = plain_round_trip,
	.send_last = plain_send_last,
	.receive = plain_receive,
	.err_str = errno_str,
	.warm_fail = { "warm-up: ", "" },
};

static int plain_side(struct side *s)
{
	enum contender c = s->p->c;
	struct plain_conn x = { .slot = contenders[c].slot, .batch = contenders[c].batch,
				.answer = s->side == 1 && contenders[c].kind == K_PINGPONG };
	unsigned char *in = plain_mem + (s->side == 0 ? PLAIN_RING_LEN : 0);
	unsigned char *out = plain_mem + (s->side == 0 ? 0 : PLAIN_RING_LEN);

	if (contenders[c].summary) {
		x.out_db = PLAIN_DB(s->side == 0 ? 0 : 1);
		x.in_db = PLAIN_DB(s->side == 0 ? 1 : 0);
	}
	bench_msg_fill(x.tmpl, x.slot);
	if (plain_prod_attach(&x.p, out, PLAIN_RING_LEN) < 0 ||
	    plain_cons_attach(&x.c, in, PLAIN_RING_LEN) < 0)
		return side_fail(s, -EINVAL, "plain ring: bad geometry");
	barrier(1);
	s->res->poll_ns = 0;
	return side_run(s, &plain_lib, &x, 2);
}

/* ---- ring-burst: Shoal's ring alone ------------------------------------------ */

/* This side's ring state, for side_run(). */
struct ring_conn {
	struct shoal_ring_prod p;     /* A */
	struct shoal_ring_cons c;     /* B */
	unsigned char *next;          /* A: the claimed record to write next */
	uint32_t left;                /* A: claimed records not yet written */
	uint32_t pending;             /* A: written since the last commit */
	struct rx_count rc;           /* B */
	_Alignas(64) unsigned char tmpl[MSG_BYTES];
};

/* Write message `seq` whole, header then payload, into the next claimed
 * record. */
static void ring_put(struct ring_conn *x, uint64_t seq)
{
	shoal_ring_put_hdr(x->next, shoal_ring_run_hdr(MSG_BYTES, 0));
	bench_copy(x->next, x->tmpl, MSG_BYTES);
	bench_msg_stamp(x->next, MSG_BYTES, seq);
	x->next += shoal_ring_stride(MSG_BYTES);
	x->left--;
}

/* Write message `seq` into the run claimed for the burst, claiming the
 * rest of the burst when it has none left; commit when the burst is
 * complete or it is the last (then the records claimed after it are
 * written too, as messages the receiver, stopped, does not read: a claimed
 * record must be whole when committed). A full ring is counted as a retry,
 * as the other contenders count it. */
static int ring_send(struct side *s, void *arg, uint64_t seq)
{
	struct ring_conn *x = arg;

	while (x->left == 0) {
		void *first;

		x->left = shoal_ring_claim_run(&x->p, MSG_BYTES, 0, BURST - x->pending, &first);
		x->next = first;
		if (x->left > 0)
			break;
		if (shoal_ring_prod_error(&x->p))
			return -EUCLEAN;
		if (s != NULL)
			s->res->retries++;
		bench_relax();
	}
	ring_put(x, seq);
	if (seq & BENCH_STOP)
		while (x->left > 0)
			ring_put(x, (seq & ~BENCH_STOP) + 1);
	if (++x->pending == BURST || (seq & BENCH_STOP)) {
		shoal_ring_commit(&x->p);
		x->pending = 0;
	}
	return 0;
}

static int ring_send_last(void *arg, uint64_t seq)
{
	return ring_send(NULL, arg, seq);
}

/* Take a run of up to a burst: check each message, release them. Returns
 * 1 after the last message, 0, -EBADMSG or -EUCLEAN. */
static int ring_take(void *arg)
{
	struct ring_conn *x = arg;
	struct shoal_rec first;
	unsigned n = shoal_ring_peek_run(&x->c, &first, BURST);
	const unsigned char *m = first.data;
	int ret = 0;

	if (n == 0) {
		if (shoal_ring_cons_error(&x->c))
			return -EUCLEAN;
		bench_relax();
		return 0;
	}
	if (first.len != MSG_BYTES)
		return -EBADMSG;
	for (unsigned k = 0; k < n && ret == 0; k++, m += shoal_ring_stride(MSG_BYTES)) {
		ret = bench_msg_check(m, MSG_BYTES, x->rc.expect, &msg_sink);
		if (ret < 0)
			break;
		x->rc.received++;
		x->rc.expect++;
		if (ret == 1)
			x->rc.t_end = shoal__now_ns();
	}
	shoal_ring_release(&x->c);
	return ret;
}

static int ring_receive(struct side *s, void *arg, uint64_t n)
{
	return receive_with(s, arg, &((struct ring_conn *)arg)->rc, n, ring_take);
}

static const struct lib ring_lib = {
	.send = ring_send,
	.send_last = ring_send_last,
	.receive = ring_receive,
	.err_str = errno_str,
	.warm_fail = { "warm-up: ", "" },
};

static int ring_side(struct side *s)
{
	struct ring_conn x = { 0 };
	struct shoal_err err = { { 0 } };
	int ret;

	bench_msg_fill(x.tmpl, MSG_BYTES);
	ret = s->side == 0 ? shoal_ring_prod_attach(&x.p, RING_MEM, ring_len, &err) :
			     shoal_ring_cons_attach(&x.c, RING_MEM, ring_len, &err);
	if (ret < 0)
		return side_fail(s, ret, "ring: %s", err.msg);
	barrier(1);
	s->res->poll_ns = 0;
	return side_run(s, &ring_lib, &x, 2);
}

/* ---- iceoryx sides -------------------------------------------------------- */

/* This side's iceoryx state, for side_run(). */
struct iox_side {
	iox_pub_storage_t pub_st;
	iox_sub_storage_t sub_st;
	iox_ws_storage_t ws_st;
	iox_pub_t pub;
	iox_sub_t sub;
	iox_ws_t ws;
	uint64_t seq;             /* B: the next message's sequence number */
	unsigned char tmpl[MSG_BYTES];
};

static void iox_close(struct iox_side *x)
{
	if (x->ws != NULL)
		iox_ws_deinit(x->ws);
	if (x->sub != NULL)
		iox_sub_deinit(x->sub);
	if (x->pub != NULL)
		iox_pub_deinit(x->pub);
	memset(x, 0, sizeof(*x));
}

/*
 * Register with RouDi and create this side's ports: side A publishes
 * "ping" and subscribes to "pong", side B the reverse (throughput: A only
 * publishes, B only subscribes). Waits until RouDi has connected them.
 */
static int iox_open(struct side *s, struct iox_side *x, bool tput, bool waitset)
{
	const char *out = s->side == 0 ? "ping" : "pong", *in = s->side == 0 ? "pong" : "ping";
	bool want_pub = !tput || s->side == 0, want_sub = !tput || s->side == 1;
	iox_pub_options_t po;
	iox_sub_options_t so;
	uint64_t deadline;

	/* Warnings too: iceoryx reports its SEVERE errors as warnings, then
	 * asserts. A run that goes well prints nothing. */
	iox_set_loglevel(Iceoryx_LogLevel_Warn);
	stage("iox_runtime_init", 0);
	iox_runtime_init(s->p->iox_name[s->side]);
	stage("iceoryx ports", 0);
	iox_pub_options_init(&po);
	po.historyCapacity = 0;
	po.subscriberTooSlowPolicy = ConsumerTooSlowPolicy_WAIT_FOR_CONSUMER;
	iox_sub_options_init(&so);
	so.queueCapacity = IOX_QUEUE;
	so.historyRequest = 0;
	so.queueFullPolicy = QueueFullPolicy_BLOCK_PRODUCER;
	if (want_pub)
		x->pub = iox_pub_init(&x->pub_st, "ShoalBench", s->p->iox_instance, out, &po);
	if (want_sub)
		x->sub = iox_sub_init(&x->sub_st, "ShoalBench", s->p->iox_instance, in, &so);
	if ((want_pub && x->pub == NULL) || (want_sub && x->sub == NULL))
		return side_fail(s, -ENOMEM, "iceoryx: cannot create the ports");
	if (waitset) {
		x->ws = iox_ws_init(&x->ws_st);
		if (x->ws == NULL || iox_ws_attach_subscriber_state(x->ws, x->sub,
								   SubscriberState_HAS_DATA, 0,
								   NULL) != WaitSetResult_SUCCESS)
			return side_fail(s, -ENOMEM, "iceoryx: cannot attach the waitset");
	}
	/* RouDi connects ports in its discovery loop (every 100 ms). */
	deadline = shoal__now_ns() + CONNECT_TIMEOUT_NS;
	while ((want_sub && iox_sub_get_subscription_state(x->sub) != SubscribeState_SUBSCRIBED) ||
	       (want_pub && !iox_pub_has_subscribers(x->pub))) {
		if (shoal__now_ns() >= deadline)
			return side_fail(s, -ETIMEDOUT, "iceoryx: RouDi did not connect the ports "
					 "within %d s", (int)(CONNECT_TIMEOUT_NS / 1000000000));
		usleep(1000);
	}
	return 0;
}

/* Take the next chunk, waiting by busy polling or on the waitset. */
static int iox_take(struct iox_side *x, const void **chunk)
{
	for (;;) {
		enum iox_ChunkReceiveResult r = iox_sub_take_chunk(x->sub, chunk);

		if (r == ChunkReceiveResult_SUCCESS)
			return 0;
		if (r != ChunkReceiveResult_NO_CHUNK_AVAILABLE)
			return -EIO;
		if (x->ws != NULL) {
			iox_notification_info_t info[2];
			uint64_t missed = 0;

			iox_ws_wait(x->ws, info, 2, &missed);
		} else {
			bench_relax();
		}
	}
}

static int iox_loan(struct iox_side *x, void **chunk, uint64_t *retries)
{
	for (;;) {
		enum iox_AllocationResult r = iox_pub_loan_chunk(x->pub, chunk, MSG_BYTES);

		if (r == AllocationResult_SUCCESS)
			return 0;
		if (r != AllocationResult_RUNNING_OUT_OF_CHUNKS &&
		    r != AllocationResult_TOO_MANY_CHUNKS_ALLOCATED_IN_PARALLEL)
			return -ENOMEM;
		(*retries)++;
		bench_relax();
	}
}

/* Loan a chunk, stamp message `seq` into it and publish it. */
static int iox_publish(struct iox_side *x, uint64_t seq, uint64_t *retries)
{
	void *chunk;
	int ret = iox_loan(x, &chunk, retries);

	if (ret < 0)
		return ret;
	memcpy(chunk, x->tmpl, MSG_BYTES);
	bench_msg_stamp(chunk, MSG_BYTES, seq);
	/* Blocks (yielding) while the subscriber's queue is full. */
	iox_pub_publish_chunk(x->pub, chunk);
	return 0;
}

/* Side A, throughput: chunks the pool could not lend count as retries. */
static int iox_send(struct side *s, void *x, uint64_t seq)
{
	return iox_publish(x, seq, &s->res->retries);
}

/* Send message `seq` without counting retries (ping-pong). */
static int iox_send_one(void *x, uint64_t seq)
{
	uint64_t unused = 0;

	return iox_publish(x, seq, &unused);
}

/* Side A: one round trip. */
static int iox_round_trip(void *arg, uint64_t seq)
{
	struct iox_side *x = arg;
	const void *in;
	int ret = iox_send_one(x, seq);

	if (ret == 0)
		ret = iox_take(x, &in);
	if (ret < 0)
		return ret;
	ret = msg_check(in, seq) == 0 ? 0 : -EBADMSG;
	iox_sub_release_chunk(x->sub, in);
	return ret;
}

/* Side B of a ping-pong: answer until the message with BENCH_STOP. */
static int iox_answer(struct iox_side *x, uint64_t until)
{
	for (;;) {
		const void *in;
		void *out;
		uint64_t unused = 0;
		int chk, ret = iox_take(x, &in);

		if (ret < 0)
			return ret;
		chk = msg_check(in, x->seq);
		if (chk != 0) {
			iox_sub_release_chunk(x->sub, in);
			return chk < 0 ? chk : 0;
		}
		ret = iox_loan(x, &out, &unused);
		if (ret < 0)
			return ret;
		memcpy(out, in, MSG_BYTES);
		iox_pub_publish_chunk(x->pub, out);
		iox_sub_release_chunk(x->sub, in);
		if (++x->seq == until)
			return 0;
	}
}

/* Side B of a throughput: take until the message with BENCH_STOP. */
static int iox_drain(struct iox_side *x, uint64_t until, uint64_t *t_end)
{
	for (;;) {
		const void *in;
		int chk, ret = iox_take(x, &in);

		if (ret < 0)
			return ret;
		chk = msg_check(in, x->seq);
		iox_sub_release_chunk(x->sub, in);
		if (chk < 0)
			return chk;
		++x->seq;
		if (chk == 1) {
			*t_end = shoal__now_ns();
			return 0;
		}
		if (x->seq == until)
			return 0;
	}
}

static int iox_receive(struct side *s, void *arg, uint64_t n)
{
	struct iox_side *x = arg;
	bool tput = contenders[s->p->c].kind == K_TPUT;
	uint64_t until = n > 0 ? n : UINT64_MAX, t_end = 0;
	int ret = tput ? iox_drain(x, until, &t_end) : iox_answer(x, until);

	if (n > 0)
		return ret;
	/* The last message counts: iox_answer() does not advance seq past it. */
	s->res->msgs = x->seq - warmup_count(s->p->c) + (tput ? 0 : 1);
	s->res->t_end = t_end;
	if (tput && iox_sub_has_lost_chunks(x->sub))
		s->res->lost++;
	return ret;
}

static const struct lib iox_lib = {
	.send = iox_send,
	.round_trip = iox_round_trip,
	.send_last = iox_send_one,
	.receive = iox_receive,
	.err_str = errno_str,
	.warm_fail = { "iceoryx warm-up failed (", ")" },
};

static double iox_empty_poll_ns(struct iox_side *x)
{
	uint64_t t0 = shoal__now_ns();

	for (unsigned i = 0; i < EMPTY_POLLS; i++) {
		const void *in;

		if (iox_sub_take_chunk(x->sub, &in) == ChunkReceiveResult_SUCCESS)
			iox_sub_release_chunk(x->sub, in);
	}
	return (double)(shoal__now_ns() - t0) / EMPTY_POLLS;
}

static int iox_side(struct side *s)
{
	enum contender c = s->p->c;
	struct iox_side x = { 0 };
	int ret;

	bench_msg_fill(x.tmpl, MSG_BYTES);
	ret = iox_open(s, &x, contenders[c].kind == K_TPUT, contenders[c].sleep);
	if (ret == 0) {
		barrier(1);
		if (x.sub != NULL)
			s->res->poll_ns = iox_empty_poll_ns(&x);
		barrier(2);
		ret = side_run(s, &iox_lib, &x, 3);
	}
	iox_close(&x);
	return ret;
}

/* ---- a forked side ----------------------------------------------------------- */

static __attribute__((noreturn)) void side_main(int side, void *unused)
{
	struct side s = { .side = side, .p = &ctl->p, .res = &ctl->res[side] };
	enum lib_kind lib = contenders[s.p->c].lib;
	int ret;

	(void)unused;
	stage_res = s.res;
	ret = bench_child_init(s.p->cpu[side]);
	if (getppid() != parent_pid)
		_exit(1);   /* the parent died before PDEATHSIG was armed */
	if (ret < 0) {
		side_fail(&s, ret, "pinning to CPU %d: %s", s.p->cpu[side], strerror(-ret));
		_exit(1);
	}
	s.res->cpu = sched_getcpu();
	ret = lib == L_SHOAL ? shoal_side(&s) : lib == L_IOX ? iox_side(&s) :
	      lib == L_RING  ? ring_side(&s)  : plain_side(&s);
	if (ret < 0 && s.res->err == 0)
		side_fail(&s, ret, "%s", strerror(-ret));
	/* exit(), not _exit(), for iceoryx: the runtime deregisters from RouDi
	 * in a static destructor (else RouDi keeps the process registered). */
	if (lib == L_IOX)
		exit(ret < 0 ? 1 : 0);
	_exit(ret < 0 ? 1 : 0);
}

/* ---- the parent: signals, RouDi ------------------------------------------------ */

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	nanosleep(&ts, NULL);
}

/* Files RouDi creates (iceoryx 2.0 on Linux), checked before it starts so
 * that only what this run created is ever removed. */
#define ROUDI_FILES 5
static char roudi_file[ROUDI_FILES][300];
static bool roudi_file_existed[ROUDI_FILES];

static struct {
	pid_t pid;
	char cfg[64];             /* removed once RouDi has read it */
	int log_fd;               /* RouDi's stdout and stderr; the file is unlinked */
	char client_prefix[48];   /* our runtimes' /tmp/<name> sockets and locks */
	int left_behind;          /* files removed after RouDi */
} roudi = { .log_fd = -1 };

static void roudi_files_init(void)
{
	struct group *gr = getgrgid(getegid());

	snprintf(roudi_file[0], sizeof(roudi_file[0]), "/dev/shm/iceoryx_mgmt");
	/* The data segment is named after the user's group. */
	snprintf(roudi_file[1], sizeof(roudi_file[1]), "/dev/shm/%s",
		 gr != NULL ? gr->gr_name : "root");
	snprintf(roudi_file[2], sizeof(roudi_file[2]), "/tmp/roudi");
	snprintf(roudi_file[3], sizeof(roudi_file[3]), "/tmp/roudi.lock");
	snprintf(roudi_file[4], sizeof(roudi_file[4]), "/tmp/iox-unique-roudi.lock");
	for (int i = 0; i < ROUDI_FILES; i++)
		roudi_file_existed[i] = access(roudi_file[i], F_OK) == 0;
}

/* True if process `pid` runs a program whose name (comm, cut to 15
 * characters) starts with `prefix`. */
static bool proc_comm_is(pid_t pid, const char *prefix)
{
	char path[64], comm[32] = "";
	FILE *f;
	bool is;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "re");
	if (f == NULL)
		return false;
	is = fgets(comm, sizeof(comm), f) != NULL && strncmp(comm, prefix, strlen(prefix)) == 0;
	fclose(f);
	return is;
}

/* Pid of a running iox-roudi that is not ours, or 0. */
static pid_t other_roudi(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	while (d != NULL && found == 0 && (e = readdir(d)) != NULL) {
		pid_t pid = (pid_t)atoi(e->d_name);

		if (pid > 0 && pid != roudi.pid && proc_comm_is(pid, "iox-roudi"))
			found = pid;
	}
	if (d != NULL)
		closedir(d);
	return found;
}

/* Print what RouDi wrote since the last call (its start-up banner first). */
static void roudi_log_tail(void)
{
	static off_t shown;
	char buf[4096];
	ssize_t n;

	if (roudi.log_fd < 0)
		return;
	while ((n = pread(roudi.log_fd, buf, sizeof(buf) - 1, shown)) > 0) {
		buf[n] = '\0';
		if (shown == 0)
			fprintf(stderr, "%s: iox-roudi's output:\n", PROG);
		fputs(buf, stderr);
		shown += n;
	}
}

/* The RouDi configuration: one segment, one mempool of 128-byte chunks
 * (a 64-byte payload plus iceoryx's 40-byte chunk header). */
static const char roudi_config[] =
	"# written by " PROG ": one mempool for 64-byte messages\n"
	"[general]\nversion = 1\n\n[[segment]]\n\n"
	"[[segment.mempool]]\nsize = 128\ncount = 8192\n\n"
	"[[segment.mempool]]\nsize = 1024\ncount = 64\n";

static int write_temp(char *path, size_t len, const char *suffix, const char *text)
{
	int fd;

	snprintf(path, len, "/tmp/%s-%d-XXXXXX%s", PROG, (int)getpid(), suffix);
	fd = mkstemps(path, (int)strlen(suffix));
	if (fd < 0)
		return -errno;
	if (text != NULL && write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		close(fd);
		return -EIO;
	}
	return fd;
}

/*
 * Remove the files of `dir` whose names start with `prefix`; with `stale`,
 * only those where the prefix is followed by "PID-" and PID is not a
 * running shoal-bench-iceoryx (nor this one). Returns how many it removed.
 */
static int remove_prefixed(const char *dir, const char *prefix, bool stale)
{
	size_t plen = strlen(prefix);
	DIR *d = opendir(dir);
	struct dirent *e;
	int removed = 0;

	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[600], *end;
		long pid;

		if (strncmp(e->d_name, prefix, plen) != 0)
			continue;
		if (stale) {
			pid = strtol(e->d_name + plen, &end, 10);
			/* comm is cut to 15 characters. */
			if (pid <= 0 || *end != '-' || pid == (long)getpid() ||
			    proc_comm_is((pid_t)pid, "shoal-bench-ice"))
				continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) == 0)
			removed++;
	}
	if (d != NULL)
		closedir(d);
	return removed;
}

/*
 * Remove what an earlier run killed with SIGKILL left behind: its Shoal
 * system's segments (shoal.shbiox-PID-* in the segment directory), its
 * iceoryx runtimes' sockets (/tmp/shbioxPID-*) and its RouDi configuration
 * (/tmp/shoal-bench-iceoryx-PID-*), for PIDs that are no longer a running
 * benchmark. Its RouDi stopped itself (SIGTERM on the parent's death) and
 * removed its own files. Returns how many files were removed.
 */
static int remove_stale(void)
{
	char shm[256];

	if (shoal_seg_dir_path(shm, sizeof(shm)) < 0)
		snprintf(shm, sizeof(shm), "/dev/shm");
	return remove_prefixed(shm, "shoal.shbiox-", true) +
	       remove_prefixed("/tmp", "shbiox", true) +
	       remove_prefixed("/tmp", PROG "-", true);
}

/* Reap RouDi if it has exited; returns true if it is gone. */
static bool roudi_gone(int *status)
{
	if (roudi.pid <= 0)
		return true;
	if (waitpid(roudi.pid, status, WNOHANG) == roudi.pid) {
		roudi.pid = 0;
		return true;
	}
	return false;
}

/*
 * Register runtime `name` with RouDi in a short-lived child, which then
 * deregisters at exit (a static destructor). iox_runtime_init() retries on
 * its own until RouDi answers; the parent gives it ROUDI_READY_TIMEOUT_NS.
 * Returns 0, -EPROTO (the child failed), -ECHILD (RouDi exited),
 * -ETIMEDOUT, -EINTR (a signal) or -errno from fork().
 */
static int iox_register_once(const char *name)
{
	uint64_t deadline = shoal__now_ns() + ROUDI_READY_TIMEOUT_NS;
	int status = 0, ret = -ETIMEDOUT;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		iox_set_loglevel(Iceoryx_LogLevel_Off);
		iox_runtime_init(name);
		exit(0);   /* deregisters (static destructor) */
	}
	while (shoal__now_ns() < deadline && !bench_stop_signal()) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			pid = 0;
			ret = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPROTO;
			break;
		}
		if (roudi_gone(&status)) {
			ret = -ECHILD;
			break;
		}
		sleep_ns(2000000);
	}
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	return bench_stop_signal() ? -EINTR : ret;
}

/* Wait until RouDi accepts a runtime: a probe registers. Returns 0 or -errno. */
static int roudi_wait_ready(void)
{
	char name[64];

	snprintf(name, sizeof(name), "%sprobe", roudi.client_prefix);
	return iox_register_once(name);
}

static int roudi_start(void)
{
	int cfg_fd, log_fd, ret;

	snprintf(roudi.client_prefix, sizeof(roudi.client_prefix), "shbiox%d-", (int)getpid());
	roudi_files_init();
	cfg_fd = write_temp(roudi.cfg, sizeof(roudi.cfg), ".toml", roudi_config);
	if (cfg_fd < 0)
		return cfg_fd;
	close(cfg_fd);
	{
		char log[64];

		log_fd = write_temp(log, sizeof(log), ".log", NULL);
		if (log_fd < 0)
			return log_fd;
		/* Only descriptors refer to it: nothing to leave behind. */
		unlink(log);
	}
	fflush(NULL);
	roudi.pid = fork();
	if (roudi.pid < 0) {
		ret = -errno;
		roudi.pid = 0;
		close(log_fd);
		return ret;
	}
	if (roudi.pid == 0) {
		/* Its own process group: Ctrl-C reaches the benchmark, which
		 * stops RouDi last. SIGTERM (a clean shutdown) if we die. */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent_pid)
			_exit(127);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		dup2(log_fd, 1);
		dup2(log_fd, 2);
		close(log_fd);
		close_range(3, ~0u, 0);
		/*
		 * Monitoring off: RouDi removes a process whose keep-alive is
		 * late by 1.5 s, and on a busy 2-CPU machine a benchmark side's
		 * keep-alive thread can be starved that long; its peer would
		 * then wait forever. Dead sides are deregistered by the parent
		 * instead (iox_forget()).
		 */
		execl(ROUDI_PATH, "iox-roudi", "--log-level", "warning", "--monitoring-mode", "off",
		      "--config-file", roudi.cfg, (char *)NULL);
		_exit(127);
	}
	roudi.log_fd = log_fd;
	ret = roudi_wait_ready();
	/* RouDi has read its configuration (or failed to start). */
	unlink(roudi.cfg);
	roudi.cfg[0] = '\0';
	return ret;
}

/* Remove `path` if it is a file this run created (absent before RouDi). */
static void remove_if_ours(int i)
{
	if (!roudi_file_existed[i] && unlink(roudi_file[i]) == 0)
		roudi.left_behind++;
}

/* Stop RouDi (SIGTERM, then SIGKILL after a timeout), then remove what it
 * or our runtimes left behind. Safe to call twice. */
static void roudi_stop(void)
{
	int status;

	if (roudi.pid > 0) {
		uint64_t deadline = shoal__now_ns() + ROUDI_STOP_TIMEOUT_NS;

		kill(roudi.pid, SIGTERM);
		while (!roudi_gone(&status) && shoal__now_ns() < deadline)
			sleep_ns(10000000);
		if (roudi.pid > 0) {
			fprintf(stderr, "%s: iox-roudi (pid %d) ignored SIGTERM for %d s: SIGKILL\n",
				PROG, (int)roudi.pid, (int)(ROUDI_STOP_TIMEOUT_NS / 1000000000));
			kill(roudi.pid, SIGKILL);
			waitpid(roudi.pid, &status, 0);
			roudi.pid = 0;
		}
	}
	for (int i = 0; i < ROUDI_FILES && roudi.client_prefix[0] != '\0'; i++)
		remove_if_ours(i);
	if (roudi.client_prefix[0] != '\0')
		roudi.left_behind += remove_prefixed("/tmp", roudi.client_prefix, false);
	if (roudi.cfg[0] != '\0')
		unlink(roudi.cfg);
	roudi.cfg[0] = '\0';
}

/*
 * Make RouDi forget runtime `name` of a side that was killed or crashed: a
 * short-lived child registers under the same name (RouDi then removes the
 * dead registration and its ports) and deregisters at exit. Without it
 * RouDi, monitoring off, keeps the dead pid and signals it at shutdown,
 * when the pid may belong to another process.
 */
static void iox_forget(const char *name)
{
	(void)iox_register_once(name);
}

/* ---- the parent: one sample ---------------------------------------------------- */

struct sample {
	struct side_res r[2];
	bool disturbed;
	unsigned reruns;
	bool pinned;              /* both sides ran on the CPUs asked for */
};

static unsigned sample_counter;
/* --stream, and how many Shoal samples streamed their copies (of how many;
 * shoal-burst-nostream's, which never do, not counted). */
static int stream_mode = SHOAL_STREAM_AUTO;
static unsigned stream_on, stream_samples;

static int sample_run(enum contender c, uint64_t duration_ns, const int cpu[2], struct sample *out)
{
	struct shoal_router *router = NULL;
	unsigned k = ++sample_counter;
	int ret = 0;

	/* No side is alive: plain writes, published to the children by fork(). */
	memset(ctl, 0, sizeof(*ctl));
	ctl->p.c = c;
	ctl->p.duration_ns = duration_ns;
	ctl->p.cpu[0] = cpu[0];
	ctl->p.cpu[1] = cpu[1];
	snprintf(ctl->p.system, sizeof(ctl->p.system), "shbiox-%d-%u", (int)getpid(), k);
	for (int i = 0; i < 2; i++)
		snprintf(ctl->p.iox_name[i], sizeof(ctl->p.iox_name[i]), "%s%u-%c",
			 roudi.client_prefix, k, 'a' + i);
	snprintf(ctl->p.iox_instance, sizeof(ctl->p.iox_instance), "s%d-%u", (int)getpid(), k);
	if (contenders[c].lib == L_PLAIN)
		for (int i = 0; i < 2; i++) {
			plain_ring_init(plain_mem + i * PLAIN_RING_LEN, PLAIN_RING_LEN,
					contenders[c].slot, PLAIN_SLOTS);
			shoal_doorbell_init(PLAIN_DB(i));
			shoal_doorbell_ready_on(PLAIN_DB(i));
		}
	if (contenders[c].lib == L_RING) {
		ret = shoal_ring_init(RING_MEM, ring_len, SHOAL_DIRECT_CAP, 0);
		if (ret < 0) {
			fprintf(stderr, "%s: shoal_ring_init: %s\n", PROG, shoal_strerror(ret));
			return ret;
		}
	}
	if (contenders[c].lib == L_SHOAL) {
		struct shoal_router_opts o = {
			.system = ctl->p.system,
			.direct_capacity = SHOAL_DIRECT_CAP,
			/* Sleeping variant: sleep on the doorbell at once. */
			.spin_ns = contenders[c].sleep ? 1 : 0,
			.stream = contenders[c].no_stream ? SHOAL_STREAM_OFF : stream_mode,
		};
		struct shoal_err err = { { 0 } };

		ret = shoal_router_start(&router, &o, &err);
		if (ret < 0) {
			fprintf(stderr, "%s: shoal_router_start: %s (%s)\n", PROG, shoal_strerror(ret),
				err.msg);
			return ret;
		}
		if (!contenders[c].no_stream) {
			stream_on += shoal_router_stream(router, NULL) == 1;
			stream_samples++;
		}
	}
	fflush(NULL);
	/* RouDi dying under the sides fails the sample: nothing iceoryx can run any more. */
	ret = bench_pair_run(side_main, NULL, duration_ns, &roudi.pid);
	if (router != NULL)
		shoal_router_destroy(router);
	memcpy(out->r, ctl->res, sizeof(out->r));
	if (ret < 0 && bench_stop_signal())
		return -EINTR;
	if (ret < 0 && (out->r[0].err == -EBADMSG || out->r[1].err == -EBADMSG))
		ret = -EBADMSG;   /* a side saw a wrong or torn message */
	if (ret == 0 && contenders[c].kind == K_TPUT &&
	    (out->r[1].msgs != out->r[0].msgs || out->r[1].lost != 0)) {
		fprintf(stderr, "%s: %s: %" PRIu64 " sent, %" PRIu64 " received%s\n", PROG,
			contenders[c].name, out->r[0].msgs, out->r[1].msgs,
			out->r[1].lost ? ", iceoryx reports lost chunks" : "");
		ret = -EBADMSG;
	}
	if (ret < 0) {
		fprintf(stderr, "%s: %s sample failed: %s\n", PROG, contenders[c].name,
			ret == -ETIMEDOUT ? "watchdog expired" :
			ret == -EBADMSG ? "messages lost or corrupted" : "a side failed");
		for (int i = 0; i < 2; i++)
			fprintf(stderr, "  side %c: %s%s(last stage: %s)\n", 'A' + i, out->r[i].msg,
				out->r[i].msg[0] ? " " : "",
				out->r[i].stage[0] ? out->r[i].stage : "not started");
		if (contenders[c].lib == L_IOX) {
			roudi_log_tail();
			for (int i = 0; i < 2 && roudi.pid > 0; i++)
				iox_forget(ctl->p.iox_name[i]);
		}
		return ret;
	}
	out->pinned = out->r[0].cpu == cpu[0] && out->r[1].cpu == cpu[1];
	out->disturbed = false;
	for (int i = 0; i < 2; i++)
		if (out->r[i].span_ns > 0 &&
		    (double)out->r[i].waited_ns >= DISTURBED_SHARE * (double)out->r[i].span_ns)
			out->disturbed = true;
	return 0;
}

/* ---- the parent: summaries and the report ------------------------------------------ */

/* Steal time (ms) of the whole machine so far. */
static double steal_ms(void)
{
	struct bench_cpustat c;

	bench_cpustat_read(&c);
	return (double)c.steal / 1e6;
}

struct plan {
	bool on[N_CASES];         /* --only */
	unsigned runs;
	uint64_t duration_ns;
	int cpu[2];
	bool reruns;              /* rerun disturbed samples */
	const char *csv, *md;
	char command[512];
};

/* What the run did besides its samples, for the report. */
struct tally {
	unsigned samples;         /* kept */
	unsigned disturbed;       /* kept although disturbed */
	unsigned pinned;          /* both sides ran on the CPUs asked for */
	unsigned reruns;          /* of disturbed samples */
	unsigned failed;          /* failed samples run again */
	double steal_ms;          /* the machine's steal time over the run */
};

static struct sample results[BENCH_MAX_RUNS][C_COUNT];

static double metric(const struct sample *s, enum contender c)
{
	if (contenders[c].kind == K_TPUT)
		return s->r[1].t_end > s->r[0].t_start ?
		       (double)s->r[1].msgs * 1e9 / (double)(s->r[1].t_end - s->r[0].t_start) : 0;
	return (double)s->r[0].lat.p50;
}

/* What the report needs besides the results. */
struct outputs {
	const struct plan *pl;
	const struct tally *t;
};

static int write_csv(const char *path, const void *arg)
{
	const struct plan *pl = ((const struct outputs *)arg)->pl;
	FILE *f = fopen(path, "we");

	if (f == NULL)
		return -errno;
	fprintf(f, "run,case,contender,cpu_a,cpu_b,pinned,probe_ns,p50_ns,p99_ns,p999_ns,"
		   "round_trips,msgs_sent,msgs_received,msgs_per_s,sender_retries,lost,"
		   "poll_a_ns,poll_b_ns,span_a_ns,span_b_ns,waited_a_ns,waited_b_ns,sleeps_a,"
		   "sleeps_b,disturbed,reruns\n");
	for (unsigned r = 0; r < pl->runs; r++)
		for (unsigned k = 0; k < N_CASES; k++)
			for (unsigned j = 0; j < cases[k].n && pl->on[k]; j++) {
				enum contender c = cases[k].c[j];
				const struct sample *s = &results[r][c];
				bool tput = contenders[c].kind == K_TPUT;

				fprintf(f, "%u,%s,%s,%d,%d,%d,%.1f,%" PRIu64 ",%" PRIu64 ",%" PRIu64
					",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.0f,%" PRIu64 ",%" PRIu64
					",%.1f,%.1f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
					",%" PRIu64 ",%" PRIu64 ",%d,%u\n", r + 1, cases[k].name, contenders[c].name,
					s->r[0].cpu, s->r[1].cpu, s->pinned, s->r[0].probe_ns,
					s->r[0].lat.p50, s->r[0].lat.p99, s->r[0].lat.p999,
					tput ? 0 : s->r[0].msgs, tput ? s->r[0].msgs : 0,
					tput ? s->r[1].msgs : 0, tput ? metric(s, c) : 0.0,
					s->r[0].retries, s->r[1].lost, s->r[0].poll_ns,
					s->r[1].poll_ns, s->r[0].span_ns, s->r[1].span_ns,
					s->r[0].waited_ns, s->r[1].waited_ns, s->r[0].sleeps,
					s->r[1].sleeps, s->disturbed, s->reruns);
			}
	return fclose(f) == 0 ? 0 : -errno;
}

/* Two probes of one placement: within 1.5x of each other. */
static bool same_placement(double pa, double pb)
{
	return pa > 0 && pb > 0 && pa <= 1.5 * pb && pb <= 1.5 * pa;
}

/*
 * Ratios a ÷ b per run (interleaved pairs) in all[]; those of pairs whose
 * two samples ran in one placement in same[], the others (a placement
 * change between the two samples) in mixed[].
 */
static void ratios(const struct plan *pl, enum contender a, enum contender b, double *all,
		   double *same, unsigned *n_same, double *mixed, unsigned *n_mixed)
{
	*n_same = *n_mixed = 0;
	for (unsigned r = 0; r < pl->runs; r++) {
		double ra = metric(&results[r][a], a), rb = metric(&results[r][b], b);

		all[r] = rb > 0 ? ra / rb : 0;
		if (same_placement(results[r][a].r[0].probe_ns, results[r][b].r[0].probe_ns))
			same[(*n_same)++] = all[r];
		else
			mixed[(*n_mixed)++] = all[r];
	}
}

/* Contender c ÷ the case's iceoryx contender `base`, over the pairs in one
 * placement when there are any, into buf. */
static void ratio_cell(char *buf, size_t len, const struct plan *pl, enum contender c,
		       enum contender base, bool tput)
{
	double all[BENCH_MAX_RUNS], f[BENCH_MAX_RUNS], s[BENCH_MAX_RUNS];
	unsigned nf, ns, n = pl->runs;

	if (c == base) {
		snprintf(buf, len, "1");
		return;
	}
	/* Pairs that straddle a placement change compare two machines: left
	 * out when there are others. */
	ratios(pl, c, base, all, f, &nf, s, &ns);
	bench_fmt_mmm(buf, len, nf > 0 ? bench_mmm_keep(f, nf) : bench_mmm_keep(all, n),
		      tput ? 2 : 3);
	if (ns > 0 && nf > 0) {
		size_t l = strlen(buf);

		snprintf(buf + l, len - l, " (%u of %u pairs)", nf, n);
	}
}

/* One contender's row of case k's table. */
static void report_row(FILE *f, const struct plan *pl, unsigned k, enum contender c)
{
	char b1[96], b2[96], b3[96], b4[96], b5[96], b6[96], b7[96];
	bool tput = contenders[c].kind == K_TPUT;
	double v[BENCH_MAX_RUNS];
	unsigned dist = 0, n = pl->runs;

	for (unsigned r = 0; r < n; r++)
		dist += results[r][c].disturbed;
	for (unsigned r = 0; r < n; r++)
		v[r] = results[r][c].r[0].probe_ns;
	bench_fmt_mmm(b4, sizeof(b4), bench_mmm_keep(v, n), 0);
	ratio_cell(b5, sizeof(b5), pl, c, cases[k].c[1], tput);
	if (limit_of(c) == C_COUNT)
		snprintf(b7, sizeof(b7), "—");
	else
		ratio_cell(b7, sizeof(b7), pl, c, limit_of(c), tput);
	if (tput) {
		double ns_msg[BENCH_MAX_RUNS], ret_msg[BENCH_MAX_RUNS];

		for (unsigned r = 0; r < n; r++) {
			v[r] = metric(&results[r][c], c) / 1e6;
			ns_msg[r] = v[r] > 0 ? 1e3 / v[r] : 0;
			ret_msg[r] = results[r][c].r[0].msgs ?
				     (double)results[r][c].r[0].retries /
				     (double)results[r][c].r[0].msgs : 0;
		}
		bench_fmt_mmm(b1, sizeof(b1), bench_mmm_keep(v, n), 2);
		bench_fmt_mmm(b2, sizeof(b2), bench_mmm_keep(ns_msg, n), 1);
		bench_fmt_mmm(b3, sizeof(b3), bench_mmm_keep(ret_msg, n), 2);
		fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %u of %u |\n", contenders[c].name,
			b1, b2, b5, b7, b3, b4, dist, n);
		return;
	}
	for (unsigned r = 0; r < n; r++)
		v[r] = (double)results[r][c].r[0].lat.p50;
	bench_fmt_mmm(b1, sizeof(b1), bench_mmm_keep(v, n), 0);
	for (unsigned r = 0; r < n; r++)
		v[r] = (double)results[r][c].r[0].lat.p99;
	bench_fmt_mmm(b2, sizeof(b2), bench_mmm_keep(v, n), 0);
	for (unsigned r = 0; r < n; r++)
		v[r] = (double)results[r][c].r[0].lat.p999;
	bench_fmt_mmm(b3, sizeof(b3), bench_mmm_keep(v, n), 0);
	for (unsigned r = 0; r < n; r++)
		v[r] = results[r][c].r[0].msgs ?
		       (double)(results[r][c].r[0].sleeps + results[r][c].r[1].sleeps) /
		       (double)results[r][c].r[0].msgs : 0;
	bench_fmt_mmm(b6, sizeof(b6), bench_mmm_keep(v, n), 2);
	fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %u of %u |\n", contenders[c].name,
		b1, b2, b3, b5, b7, b6, b4, dist, n);
}

/* Case k's table and its legend. */
static void report_case(FILE *f, const struct plan *pl, unsigned k)
{
	bool tput = cases[k].c[0] == C_SHOAL_TPUT;

	fprintf(f, "### %s\n\n", cases[k].title);
	if (tput)
		fprintf(f, "| contender | Mmsg/s | ns/msg | ÷ iceoryx (rate)* | ÷ limit (rate)* "
			"| sender retries / msg | probe (ns) | disturbed |\n"
			"|---|---:|---:|---:|---:|---:|---:|---:|\n");
	else
		fprintf(f, "| contender | p50 (ns) | p99 (ns) | p99.9 (ns) | ÷ iceoryx (p50)* "
			"| ÷ limit (p50)* | sleeps / round trip | probe (ns) | disturbed |\n"
			"|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (unsigned j = 0; j < cases[k].n; j++)
		report_row(f, pl, k, cases[k].c[j]);
	fprintf(f, "\n");
	for (unsigned j = 0; j < cases[k].n; j++)
		fprintf(f, "- `%s`: %s\n", contenders[cases[k].c[j]].name,
			contenders[cases[k].c[j]].what);
	fprintf(f, "\n\\* per interleaved pair (same run), over the pairs whose two samples ran in "
		"one placement (probes within 1.5x) when there are any%s. The limit of a row is "
		"the plain ring doing what it does: `plain` for one message at a time%s.\n\n",
		tput ? "; above 1 the row is faster" : "; below 1 the row is faster",
		tput ? ", `plain-burst` for bursts" : "");
}

/* One empty receive call, side A's CPU. */
static void report_poll(FILE *f, const struct plan *pl)
{
	static const enum contender pc[] = { C_SHOAL_DIRECT, C_IOX_POLL };
	double v[BENCH_MAX_RUNS];
	char b[96];

	fprintf(f, "### One empty receive call (side A, before any traffic; ns)\n\n"
		"| contender | call | ns |\n|---|---|---:|\n");
	for (unsigned j = 0; j < 2; j++) {
		for (unsigned r = 0; r < pl->runs; r++)
			v[r] = results[r][pc[j]].r[0].poll_ns;
		fprintf(f, "| %s | %s | %s |\n", contenders[pc[j]].name,
			pc[j] == C_IOX_POLL ? "`iox_sub_take_chunk()`" : "`shoal_poll(ctx, 0, 0)`",
			bench_fmt_mmm(b, sizeof(b), bench_mmm_keep(v, pl->runs), 1));
	}
	fprintf(f, "\n");
}

/* The target: Shoal's direct ping-pong p50 at most 0.25x iceoryx's. The
 * verdict stands on comparable pairs when there are any. */
static void report_target(FILE *f, const struct plan *pl)
{
	double all[BENCH_MAX_RUNS], fa[BENCH_MAX_RUNS], s[BENCH_MAX_RUNS];
	unsigned nf, ns, nd = 0, n = pl->runs;
	char b1[96], b2[96], b3[96];
	struct bench_mmm m;

	ratios(pl, C_SHOAL_DIRECT, C_IOX_POLL, all, fa, &nf, s, &ns);
	m = bench_mmm_keep(all, n);
	for (unsigned r = 0; r < n; r++)
		nd += results[r][C_SHOAL_DIRECT].disturbed || results[r][C_IOX_POLL].disturbed;
	fprintf(f, "### Target: Shoal direct ping-pong p50 round trip at most 0.25x iceoryx's\n\n");
	bench_md_disturbed_warning(f, nd, n, "pairs of samples");
	fprintf(f, "Shoal ÷ iceoryx per interleaved pair (run): %s over %u pairs",
		bench_fmt_mmm(b1, sizeof(b1), m, 3), n);
	if (nf > 0)
		fprintf(f, "; pairs in one placement (probes within 1.5x): %s over %u",
			bench_fmt_mmm(b2, sizeof(b2), bench_mmm_keep(fa, nf), 3), nf);
	if (ns > 0)
		fprintf(f, "; pairs straddling a placement change (not comparable): %s over %u",
			bench_fmt_mmm(b3, sizeof(b3), bench_mmm_keep(s, ns), 3), ns);
	fprintf(f, "; %u pair(s) include a sample kept although disturbed.  \n", nd);
	if (n <= 20) {
		fprintf(f, "Per pair (ratio @ probe of the Shoal sample / of the iceoryx sample):");
		for (unsigned r = 0; r < n; r++)
			fprintf(f, " %.3f @ %.0f/%.0f ns%s", all[r],
				results[r][C_SHOAL_DIRECT].r[0].probe_ns,
				results[r][C_IOX_POLL].r[0].probe_ns, r + 1 < n ? ";" : ".  \n");
	}
	if (nf > 0) {
		m = bench_mmm_keep(fa, nf);
		fprintf(f, "**%s** on the %u pairs in one placement: median %.3f, %s.\n\n",
			m.med <= 0.25 ? "Met" : "Not met", nf, m.med,
			m.max <= 0.25 ? "every one at or under 0.25" :
			m.min > 0.25 ? "none at or under 0.25" : "some at or under 0.25");
	} else {
		fprintf(f, "**%s** (median over all pairs %.3f; no pair ran in one placement).\n\n",
			m.med <= 0.25 ? "Met" : "Not met", m.med);
	}
}

/* a ÷ b over the pairs in one placement when there are any, else all. */
static struct bench_mmm pair_ratio(const struct plan *pl, enum contender a, enum contender b)
{
	double all[BENCH_MAX_RUNS], f[BENCH_MAX_RUNS], s[BENCH_MAX_RUNS];
	unsigned nf, ns;

	ratios(pl, a, b, all, f, &nf, s, &ns);
	return nf > 0 ? bench_mmm_keep(f, nf) : bench_mmm_keep(all, pl->runs);
}

/*
 * The API against the limit, in the same run (the data path's targets),
 * and the limit split: what the bytes of a Shoal record cost a plain ring
 * (plain-128 ÷ plain), and what the rest of the runtime costs over a
 * plain ring that moves those bytes.
 */
static void report_limits(FILE *f, const struct plan *pl)
{
	static const struct {
		enum contender a, b;
		int goal;                 /* 1: at least `target`, -1: at most, 0: none */
		double target;
		const char *what;
	} rows[] = {
		{ C_SHOAL_DIRECT, C_PLAIN_PP, -1, 1.3, "API direct round trip p50 ÷ plain" },
		{ C_SHOAL_TPUT, C_PLAIN_TPUT, 1, 0.7, "API direct one-way (`try_send_to`) ÷ plain" },
		{ C_SHOAL_BURST, C_RING_BURST, 1, 0.9,
		  "API burst of 32 ÷ ring-burst (the ring's own batch of 32)" },
		{ C_SHOAL_BATCH, C_RING_BURST, 1, 0.9,
		  "API burst of 32, on_batch ÷ ring-burst" },
		{ C_SHOAL_BURST, C_PLAIN_BURST, 1, 0.9, "API burst of 32 ÷ plain-burst" },
		{ C_SHOAL_BATCH, C_PLAIN_BURST, 1, 0.9, "API burst of 32, on_batch ÷ plain-burst" },
		{ C_SHOAL_BURST_NOSTREAM, C_PLAIN_BURST, 0, 0,
		  "API burst of 32, router.stream off ÷ plain-burst" },
		{ C_SHOAL_BURST, C_SHOAL_BURST_NOSTREAM, 0, 0,
		  "streaming: API burst ÷ the same with router.stream off" },
		{ C_PLAIN_PP_REC, C_PLAIN_PP, 0, 0, "the bytes: plain-128 round trip ÷ plain" },
		{ C_PLAIN_PP_SUM, C_PLAIN_PP, 0, 0, "the summary: plain-summary round trip ÷ plain" },
		{ C_PLAIN_TPUT_REC, C_PLAIN_TPUT, 0, 0, "the bytes: plain-128 one-way ÷ plain" },
		{ C_PLAIN_BURST_REC, C_PLAIN_BURST, 0, 0, "the bytes: plain-burst-128 ÷ plain-burst" },
		{ C_RING_BURST, C_PLAIN_BURST, 0, 0, "the ring: ring-burst ÷ plain-burst" },
		{ C_SHOAL_DIRECT, C_PLAIN_PP_REC, 0, 0, "the rest: API round trip ÷ plain-128" },
		{ C_SHOAL_DIRECT, C_PLAIN_PP_SUM, 0, 0, "the rest: API round trip ÷ plain-summary" },
		{ C_SHOAL_TPUT, C_PLAIN_TPUT_REC, 0, 0, "the rest: API one-way ÷ plain-128" },
		{ C_SHOAL_BURST, C_PLAIN_BURST_REC, 0, 0, "the rest: API burst ÷ plain-burst-128" },
		{ C_SHOAL_BATCH, C_PLAIN_BURST_REC, 0, 0,
		  "the rest: API burst, on_batch ÷ plain-burst-128" },
	};
	char b[96];

	if (!pl->on[0] || !pl->on[2])
		return;
	fprintf(f, "### Against the limit, same run\n\n"
		"Per interleaved pair (run), over the pairs in one placement when there are any: "
		"median [min, max]. Rates: above 1 the first is faster; round trips: below 1.\n\n"
		"| ratio | median [min, max] | target | verdict |\n|---|---:|---:|---|\n");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct bench_mmm m = pair_ratio(pl, rows[i].a, rows[i].b);
		bool met = rows[i].goal > 0 ? m.med >= rows[i].target : m.med <= rows[i].target;

		bench_fmt_mmm(b, sizeof(b), m, 3);
		if (rows[i].goal == 0)
			fprintf(f, "| %s | %s | | |\n", rows[i].what, b);
		else
			fprintf(f, "| %s | %s | %s %.1f | %s |\n", rows[i].what, b,
				rows[i].goal > 0 ? "≥" : "≤", rows[i].target, met ? "met" : "**not met**");
	}
	fprintf(f, "\nThe issue's burst target is against the Shoal ring's own batch of 32 "
		"(`ring-burst`, the ring a direct link is, with no runtime); the plain ring's "
		"(`plain-burst`) is the stricter limit, reported beside it.\n\n");
}

static void write_md(FILE *f, const void *arg)
{
	const struct plan *pl = ((const struct outputs *)arg)->pl;
	const struct tally *t = ((const struct outputs *)arg)->t;

	fprintf(f, "## shoal-bench-iceoryx: Shoal vs Eclipse iceoryx %s, 64-byte messages, "
		"across processes\n\n", "2.0.3 (Debian, C binding)");
	fprintf(f, "Command: `%s`  \n", pl->command);
	fprintf(f, "Pinning: side A (ping, sender) on CPU %d, side B (pong, receiver) on CPU %d, "
		"held in %u of %u samples; the parent (Shoal router, idle) and iox-roudi "
		"unpinned and idle. %u runs x %.0f ms per ping-pong and throughput sample "
		"(%.0f ms sleeping ping-pong), contenders of a case interleaved, order rotated "
		"every run. Median over runs [min, max].\n\n", pl->cpu[0], pl->cpu[1], t->pinned,
		t->samples, pl->runs, (double)pl->duration_ns / 1e6,
		(double)pl->duration_ns * 0.5 / 1e6);
	fprintf(f, "Streamed copies (`--stream %s`, docs/design.md): on in %u of %u Shoal "
		"samples.\n\n", bench_stream_name(stream_mode), stream_on, stream_samples);
	for (unsigned k = 0; k < N_CASES; k++)
		if (pl->on[k])
			report_case(f, pl, k);
	if (!pl->on[0]) {
		fprintf(f, "Interference: %u of %u samples kept although disturbed, %u reruns, %u "
			"failed samples run again; machine steal time over the run %.0f ms.\n",
			t->disturbed, t->samples, t->reruns, t->failed, t->steal_ms);
		return;
	}
	report_poll(f, pl);
	report_target(f, pl);
	report_limits(f, pl);
	fprintf(f, "Interference: %u of %u samples kept although disturbed (a side waited for its "
		"CPU >= %.0f %% of the measured time), %u reruns of disturbed samples, %u failed "
		"samples run again (see stderr); machine steal time over the run %.0f ms.\n",
		t->disturbed, t->samples, DISTURBED_SHARE * 100, t->reruns, t->failed, t->steal_ms);
}

/* ---- the parent: the run ---------------------------------------------------------- */

static void progress(const struct plan *pl, unsigned r, unsigned k, enum contender c,
		     const struct sample *s)
{
	fprintf(stderr, "run %u/%u %-15s %-16s %s %10.0f  probe %4.0f ns  waited A %.2f%% B "
		"%.2f%%%s\n", r + 1, pl->runs, cases[k].name, contenders[c].name,
		contenders[c].kind == K_TPUT ? "msg/s" : "p50 ns", metric(s, c), s->r[0].probe_ns,
		s->r[0].span_ns ? 100.0 * (double)s->r[0].waited_ns / (double)s->r[0].span_ns : 0,
		s->r[1].span_ns ? 100.0 * (double)s->r[1].waited_ns / (double)s->r[1].span_ns : 0,
		s->disturbed ? "  DISTURBED" : "");
}

/*
 * Contender c's sample of case k in run r, into results[r][c]. A sample
 * whose side failed (a timeout, iceoryx aborting) is usually starved by
 * other load on the two CPUs: it runs again, visibly, twice at most. Lost
 * or corrupted messages and Ctrl-C are never retried. A disturbed sample
 * runs again up to MAX_RERUNS times when reruns are on. Returns 0 or the
 * failed sample's negative errno.
 */
static int contender_sample(const struct plan *pl, unsigned r, unsigned k, enum contender c,
			    struct tally *t)
{
	uint64_t dur = (uint64_t)((double)pl->duration_ns * cases[k].share);
	struct sample *s = &results[r][c];
	unsigned tries = 0, fails = 0;
	int ret;

	for (;;) {
		ret = sample_run(c, dur, pl->cpu, s);
		if (ret < 0 && ret != -EBADMSG && ret != -EINTR && roudi.pid > 0 &&
		    fails < MAX_FAILED_RETRIES) {
			fails++;
			t->failed++;
			fprintf(stderr, "%s: running the %s sample again\n", PROG, contenders[c].name);
			continue;
		}
		if (ret < 0 || !s->disturbed || !pl->reruns || tries == MAX_RERUNS)
			break;
		tries++;
		t->reruns++;
	}
	if (ret < 0)
		return ret;
	s->reruns = tries;
	t->samples++;
	t->disturbed += s->disturbed;
	t->pinned += s->pinned;
	progress(pl, r, k, c, s);
	return 0;
}

/* Every run goes through every case; a case's contenders run back to back,
 * their order rotated by one every run. */
static int run_all(const struct plan *pl, struct tally *t)
{
	int ret = 0;

	for (unsigned r = 0; r < pl->runs && ret == 0; r++)
		for (unsigned k = 0; k < N_CASES && ret == 0; k++)
			for (unsigned j = 0; j < cases[k].n && ret == 0 && pl->on[k]; j++)
				ret = contender_sample(pl, r, k, cases[k].c[(j + r) % cases[k].n], t);
	return ret;
}

/* ---- main -------------------------------------------------------------------- */

#define EXIT_USAGE 2
#define EXIT_SKIP 77

static void usage(FILE *f)
{
	fputs("usage: " PROG " [--short | --smoke] [--runs N] [--duration MS] [--cpus A,B]\n"
	      "                            [--only LIST] [--stream MODE] [--csv FILE] [--md FILE]\n"
	      "Shoal against Eclipse iceoryx between two processes pinned to two CPUs, in one\n"
	      "run: ping-pong round trip (busy polling; sleeping receivers) and one-way\n"
	      "throughput, 64-byte messages, contenders interleaved, median [min, max] over\n"
	      "runs, Shoal ÷ iceoryx per interleaved pair, a placement probe per sample;\n"
	      "a plain SPSC ring (64- and 128-byte slots) and Shoal's ring alone in the\n"
	      "same runs: every row's ratio to the plain ring, and the API against both\n"
	      "in \"Against the limit, same run\".\n"
	      "Starts its own iox-roudi (" ROUDI_PATH ") and stops it at the end.\n"
	      "  --runs N       repetitions of every case (default 5, at most 99)\n"
	      "  --duration MS  measured time per sample (default 1000; sleeping ping-pong half)\n"
	      "  --short        3 runs of 250 ms, no reruns (under 30 s)\n"
	      "  --smoke        1 run of 100 ms, no reruns: checks that everything runs\n"
	      "  --cpus A,B     CPUs of side A (ping, sender) and B (pong, receiver); default 0,1\n"
	      "  --only LIST    run only some cases: pingpong,pingpong-sleep,tput\n"
	      "  --stream MODE  the router's streamed copies: auto (default: its line probe\n"
	      "                 decides at each sample's start), on, off\n"
	      "  --csv FILE     one row per sample\n"
	      "  --md FILE      the markdown report, also written to FILE\n"
	      "Exit: 0, 1 (a sample failed), 2 (usage), 77 (no iox-roudi or no two CPUs),\n"
	      "128+n (stopped by signal n).\n", f);
}

/* --only: a comma-separated list of case names. 0 or -EINVAL. */
static int parse_only(const char *arg, bool on[N_CASES])
{
	const char *names[N_CASES];

	for (unsigned k = 0; k < N_CASES; k++)
		names[k] = cases[k].name;
	return bench_parse_names(arg, names, N_CASES, on);
}

/* The command line into pl. Returns 0, or -EINVAL with the reason on
 * stderr. --help prints the usage and exits. */
static int parse_opts(int argc, char **argv, struct plan *pl)
{
	static const struct option opts[] = {
		{ "runs", required_argument, NULL, 'r' },
		{ "duration", required_argument, NULL, 'd' },
		{ "short", no_argument, NULL, 's' },
		{ "smoke", no_argument, NULL, 'S' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "csv", required_argument, NULL, 'C' },
		{ "md", required_argument, NULL, 'm' },
		{ "only", required_argument, NULL, 'o' },
		{ "stream", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool runs_set = false, dur_set = false;
	int c;

	*pl = (struct plan){ .on = { true, true, true }, .runs = 5, .duration_ns = 1000000000,
			     .cpu = { 0, 1 }, .reruns = true };
	bench_command_line(pl->command, sizeof(pl->command), argc, argv);
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		uint64_t v;

		switch (c) {
		case 'r':
			if (bench_parse_uint(optarg, 1, BENCH_MAX_RUNS, &v) < 0) {
				fprintf(stderr, "%s: --runs takes 1 to %u\n", PROG, BENCH_MAX_RUNS);
				return -EINVAL;
			}
			pl->runs = (unsigned)v;
			runs_set = true;
			break;
		case 'd':
			if (bench_parse_uint(optarg, 10, 60000, &v) < 0) {
				fprintf(stderr, "%s: --duration takes 10 to 60000 (ms)\n", PROG);
				return -EINVAL;
			}
			pl->duration_ns = v * 1000000u;
			dur_set = true;
			break;
		case 's':
			if (!runs_set)
				pl->runs = 3;
			if (!dur_set)
				pl->duration_ns = 250000000;
			pl->reruns = false;
			break;
		case 'S':
			pl->runs = 1;
			pl->duration_ns = 100000000;
			pl->reruns = false;
			break;
		case 'c':
			if (bench_parse_cpus(optarg, CPU_SETSIZE, pl->cpu) < 0) {
				fprintf(stderr, "%s: --cpus takes A,B: two different CPUs\n", PROG);
				return -EINVAL;
			}
			break;
		case 'C':
			pl->csv = optarg;
			break;
		case 'o':
			if (parse_only(optarg, pl->on) < 0) {
				fprintf(stderr, "%s: --only takes a list of pingpong, pingpong-sleep, "
					"tput\n", PROG);
				return -EINVAL;
			}
			break;
		case 'm':
			pl->md = optarg;
			break;
		case 'T':
			if (bench_parse_stream(optarg, &stream_mode) < 0) {
				fprintf(stderr, "%s: --stream takes auto, on or off\n", PROG);
				return -EINVAL;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* Whether this machine can run the benchmark: both CPUs, iox-roudi, and
 * no other RouDi. Says why not on stderr. */
static bool can_run(const struct plan *pl)
{
	pid_t other;

	if (!bench_cpus_usable(pl->cpu)) {
		fprintf(stderr, "%s: skipped: CPUs %d and %d are not both available to this "
			"process\n", PROG, pl->cpu[0], pl->cpu[1]);
		return false;
	}
	if (access(ROUDI_PATH, X_OK) != 0) {
		fprintf(stderr, "%s: skipped: %s not found (Debian package iceoryx)\n", PROG,
			ROUDI_PATH);
		return false;
	}
	other = other_roudi();
	if (other > 0) {
		/* iceoryx 2.0 allows one RouDi per machine (fixed names in
		 * /dev/shm and /tmp): ours cannot start, and we never use or
		 * disturb someone else's. */
		fprintf(stderr, "%s: skipped: another iox-roudi is running (pid %d); this "
			"benchmark starts its own\n", PROG, (int)other);
		return false;
	}
	return true;
}

/*
 * The parent before the first sample: what a killed run left removed, the
 * control block mapped, signals caught, iox-roudi started. Returns 0, or
 * the exit status to leave with (the reason on stderr).
 */
static int parent_init(const struct plan *pl)
{
	int stale, ret;

	parent_pid = getpid();
	stale = remove_stale();
	if (stale > 0)
		fprintf(stderr, "%s: removed %d file(s) left by an earlier run that was killed\n",
			PROG, stale);
	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ring_len = shoal_ring_size(SHOAL_DIRECT_CAP);
	plain_mem = mmap(NULL, PLAIN_MEM_LEN, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ctl == MAP_FAILED || plain_mem == MAP_FAILED) {
		fprintf(stderr, "%s: mmap: %s\n", PROG, strerror(errno));
		return EXIT_FAILURE;
	}
	memset(plain_mem, 0, PLAIN_MEM_LEN);   /* every page touched once, here */
	/* No SA_RESTART: waitpid() returns EINTR, and the parent kills the
	 * sample's processes and stops RouDi. */
	bench_signals_init();
	signal(SIGPIPE, SIG_IGN);
	ret = roudi_start();
	if (ret < 0) {
		int sig = bench_stop_signal();

		fprintf(stderr, "%s: %s: iox-roudi did not become ready: %s\n", PROG,
			ret == -EINTR ? "interrupted" : "skipped",
			ret == -ECHILD ? "it exited" : ret == -ETIMEDOUT ? "timed out" :
			strerror(-ret));
		if (ret != -EINTR)
			roudi_log_tail();
		roudi_stop();
		return sig ? 128 + sig : EXIT_SKIP;
	}
	fprintf(stderr, "%s: iox-roudi pid %d ready; %u runs, %.0f ms per sample, CPUs %d,%d\n",
		PROG, (int)roudi.pid, pl->runs, (double)pl->duration_ns / 1e6, pl->cpu[0],
		pl->cpu[1]);
	return 0;
}

int main(int argc, char **argv)
{
	struct plan pl;
	struct tally t = { 0 };
	double steal0;
	int ret;

	if (parse_opts(argc, argv, &pl) < 0)
		return EXIT_USAGE;
	if (!can_run(&pl))
		return EXIT_SKIP;
	ret = parent_init(&pl);
	if (ret != 0)
		return ret;
	steal0 = steal_ms();
	ret = run_all(&pl, &t);
	roudi_stop();
	t.steal_ms = steal_ms() - steal0;
	if (roudi.left_behind > 0)
		fprintf(stderr, "%s: removed %d file(s) left behind by iox-roudi or killed "
			"iceoryx runtimes\n", PROG, roudi.left_behind);
	if (ret == -EINTR || bench_stop_signal()) {
		fprintf(stderr, "%s: interrupted; iox-roudi stopped\n", PROG);
		return 128 + (bench_stop_signal() ? bench_stop_signal() : SIGINT);
	}
	if (ret < 0)
		return EXIT_FAILURE;
	ret = bench_write_outputs(PROG, pl.md, pl.csv, write_md, write_csv,
				  &(struct outputs){ &pl, &t });
	return ret < 0 ? EXIT_FAILURE : 0;
}
