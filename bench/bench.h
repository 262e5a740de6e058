/* SPDX-License-Identifier: MIT */
/*
 * The cross-process ring benchmark: what the driver (ring_bench.c), the
 * harness (harness.c), the report (report.c) and the contenders (bench_*.c)
 * share. Private to bench/.
 *
 * One sample = one contender doing one measurement once. The driver fills a
 * struct bench_params, the harness forks two processes pinned to two CPUs
 * ("side A": producer or initiator, "side B": consumer or responder), both
 * attach the benchmark's Shoal segment by name, meet at a barrier, time a
 * cache-line ping-pong (the placement probe), meet again, and run the
 * contender's role for their side. Each side writes a struct bench_result
 * into the segment's control block; the driver turns the pair into one
 * struct bench_obs.
 */
#ifndef SHOAL_BENCH_H
#define SHOAL_BENCH_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <shoal/doorbell.h>
#include <shoal/segment.h>

#include "bench/procstat.h"
#include "shm/atomic.h"
#include "shm/util.h"

/* Every contender buffers this many bytes (ring data area, rte_ring slots,
 * pipe size, socket send buffer): the same cache footprint for all. */
#define BENCH_BUF_BYTES (256u * 1024)
#define BENCH_MAX_PAYLOAD 1024u
#define BENCH_MAX_BATCH 32u
/* Producers read the clock once per this many messages (a multiple of every
 * batch size), which keeps the clock off the per-message path. */
#define BENCH_CLOCK_EVERY 1024u
/* Flag in a message's sequence number: the producer's last message. */
#define BENCH_STOP (UINT64_C(1) << 63)
#define BENCH_SEQ_MASK (BENCH_STOP - 1)
/* A sleeping consumer gives up after this long: only a lost wake-up or a
 * dead producer gets there (the harness's watchdog catches the latter). */
#define BENCH_WAIT_TIMEOUT_NS INT64_C(1000000000)

enum bench_kind {
	BENCH_TPUT,       /* one-way throughput, busy polling */
	BENCH_PINGPONG,   /* round trip, busy polling */
	BENCH_WAKE,       /* consumer asleep, producer wakes it */
	BENCH_SPIN,       /* Shoal poll_wait at a spin budget and a message gap */
	BENCH_SYSCALL,    /* cost of one operation, side A only */
	BENCH_KINDS
};

/* Operations timed by BENCH_SYSCALL. */
enum bench_op {
	BENCH_OP_GETPPID,      /* a trivial system call */
	BENCH_OP_CLOCK,        /* clock_gettime(CLOCK_MONOTONIC), vDSO */
	BENCH_OP_FUTEX_WAKE,   /* FUTEX_WAKE on segment memory, nobody waiting */
	BENCH_OP_POLL_FLOOR,   /* the least poll_wait spins before it may sleep */
	BENCH_OPS
};

/* What one sample does. Written by the driver, read by both sides. */
struct bench_params {
	enum bench_kind kind;
	enum bench_op op;         /* BENCH_SYSCALL only */
	uint32_t payload;         /* bytes per message */
	uint32_t batch;           /* messages per commit / release / system call */
	uint64_t duration_ns;     /* how long side A keeps sending */
	uint64_t spin_ns;         /* BENCH_SPIN: the consumer's spin budget */
	uint64_t gap_ns;          /* BENCH_WAKE, BENCH_SPIN: idle time between messages */
	int cpu[2];               /* where sides A and B are pinned */
};

/* Latency percentiles of one side, in nanoseconds. */
struct bench_pct {
	uint64_t n;
	uint64_t p50;
	uint64_t p99;
	uint64_t p999;
};

/* What one side reports. Zeroed by the harness before every sample. */
struct bench_result {
	uint64_t t_start;         /* CLOCK_MONOTONIC: side A, when it starts sending */
	uint64_t t_end;           /* whoever sees the last message (B; A for ping-pong, syscall) */
	uint64_t msgs;            /* messages (round trips, operations) completed */
	struct bench_pct lat;     /* latency: B for wake/spin, A for ping-pong */
	struct bench_pct wake_cost; /* A, wake/spin: send + notify when it made FUTEX_WAKE */
	uint64_t cpu_ns;          /* getrusage user + system over the measurement */
	uint64_t sleeps;          /* futex waits entered (Shoal doorbell) */
	uint64_t lost;            /* wake-ups only the sleep timeout delivered */
	double probe_ns;          /* placement probe round trip (side A) */
	uint64_t waited_ns;       /* runnable but not running during the measurement */
	int cpu;                  /* sched_getcpu() after pinning */
	int err;                  /* 0 or -errno */
	char msg[160];            /* what failed, for the driver to print */
};

/*
 * The control block: a SHOAL_SEG_KIND_USER region of the segment. The
 * barrier and the probe line sit on their own lines so that neither
 * disturbs the other or the parameters both sides read.
 */
struct bench_ctl {
	_Alignas(128) _Atomic uint32_t arrived;   /* two-party barrier counter */
	_Alignas(128) _Atomic uint64_t probe;     /* the placement probe's line */
	_Alignas(128) struct bench_params params;
	struct bench_result res[2];
};

/* The benchmark's regions, found by name in a mapping of the segment. */
struct bench_mem {
	struct shoal_seg seg;
	struct bench_ctl *ctl;
	void *ring[2];            /* Shoal rings: [0] A -> B, [1] B -> A */
	uint64_t ring_len;
	struct shoal_doorbell *db; /* side B sleeps on it */
	void *rte[2];             /* rte_ring memory, same directions */
	uint64_t rte_len;
	void *plain[2];           /* plain fixed-slot rings (plain_ring.h), same directions */
	uint64_t plain_len;
};

/* Kernel transports' descriptors, made by the parent before it forks:
 * side s sends on tx[s] and receives on rx[s]; -1 when unused. */
struct bench_fds {
	int tx[2];
	int rx[2];
};

/* One side's process-local view while it runs its role. */
struct bench_side {
	int side;                  /* 0: A, 1: B */
	const struct bench_params *p;
	struct bench_result *res;
	struct bench_mem mem;
	int tx, rx;                /* this side's descriptors */
	uint64_t deadline;         /* side A: stop sending at this CLOCK_MONOTONIC time */
	uint64_t run_delay0;       /* run_delay_ns() before the measurement */
	uint64_t sink;             /* payload words read, so the reads cannot be elided */
};

typedef int (*bench_role_fn)(struct bench_side *s);

/*
 * A contender: how to set up fresh shared state for a sample (in the parent,
 * before it forks; descriptors it opens go into fds, which the harness
 * closes), and one role function per kind and side (NULL: this contender
 * is not measured for that kind).
 */
struct bench_contender {
	const char *name;
	const char *what;          /* one line for the report's legend */
	int (*prepare)(const struct bench_mem *m, const struct bench_params *p,
		       struct bench_fds *fds);
	bench_role_fn role[BENCH_KINDS][2];
};

extern const char *const bench_op_name[BENCH_OPS];

extern const struct bench_contender bench_shoal;
extern const struct bench_contender bench_shoal_db;
extern const struct bench_contender bench_pipe;
extern const struct bench_contender bench_sock;
extern const struct bench_contender bench_sys;
extern const struct bench_contender bench_plain;
extern const struct bench_contender bench_plain_rec;
#ifdef SHOAL_BENCH_RTE
extern const struct bench_contender bench_rte;
#endif

/* ---- time, spinning, failing ----
 *
 * The clock is shoal__now_ns() (shm/util.h), CLOCK_MONOTONIC, as Shoal's
 * own timeouts read it.
 */

/* Every contender's busy loops wait the same way. */
static inline void bench_relax(void)
{
	shoal_cpu_relax();
}

/* Side A: true once the sample's time is up. Reads the clock only when
 * `seq` is a multiple of BENCH_CLOCK_EVERY, i.e. at a batch boundary. */
static inline bool bench_time_up(const struct bench_side *s, uint64_t seq)
{
	return (seq % BENCH_CLOCK_EVERY) == 0 && shoal__now_ns() >= s->deadline;
}

/* Record why a role failed; returns `err` (a negative errno). */
__attribute__((format(printf, 3, 4)))
int bench_fail(struct bench_side *s, int err, const char *fmt, ...);

/* Meet the other side, run the placement probe, meet again; side A then
 * starts the clock (res->t_start, deadline). Call after setting up. */
void bench_side_ready(struct bench_side *s);

/*
 * Side A of a ping-pong, around its timed loop. bench_ping_start() fills
 * the message template `msg`, allocates the round-trip histogram and calls
 * bench_side_ready(); it returns the histogram, or NULL with the failure
 * recorded in s->res. bench_ping_end() records `rounds` round trips, the
 * last ending at `t_end`, and the percentiles of h, frees h, and returns
 * the loop's `ret` if negative, else 0.
 */
struct bench_hist *bench_ping_start(struct bench_side *s, void *msg);
int bench_ping_end(struct bench_side *s, struct bench_hist *h, uint64_t rounds, uint64_t t_end,
		   int ret);

/* This process's CPU time (getrusage: user + system), in nanoseconds. */
uint64_t bench_cpu_ns(void);

/* Spin until side A's next send time: `gap_ns` after `prev`. */
static inline uint64_t bench_wait_gap(uint64_t prev, uint64_t gap_ns)
{
	uint64_t now;

	while ((now = shoal__now_ns()) < prev + gap_ns)
		bench_relax();
	return now;
}

/* ---- messages ----
 *
 * A message is `payload` bytes (at least 16): its sequence number in the
 * first 8 bytes, the complement of the sequence number in the last 8, and a
 * fixed pattern in between. Wake-up messages carry side A's send time at offset 8.
 * Every contender writes every payload byte into the transport once and the
 * consumer reads one word of every 64-byte line of it, so the same bytes
 * cross between the CPUs whatever the transport.
 */

static inline void bench_msg_fill(void *msg, uint32_t payload)
{
	memset(msg, 0x5a, payload);
}

static inline void bench_msg_stamp(void *msg, uint32_t payload, uint64_t seq)
{
	uint64_t inv = ~seq;

	memcpy(msg, &seq, 8);
	memcpy((unsigned char *)msg + payload - 8, &inv, 8);
}

static inline uint64_t bench_msg_seq(const void *msg)
{
	uint64_t seq;

	memcpy(&seq, msg, 8);
	return seq;
}

/*
 * Copy a payload with its size known at compile time for the sizes the
 * benchmark uses, as a program with fixed-size messages does: the compiler
 * copies inline instead of calling memcpy(), as rte_ring's element copy is
 * inline. Used for Shoal's in-place writes, which would otherwise pay a
 * library call per message that a real sender does not pay.
 */
static inline __attribute__((always_inline)) void bench_copy(void *dst, const void *src,
							     uint32_t n)
{
	switch (n) {
	case 16:
		memcpy(dst, src, 16);
		break;
	case 56:
		memcpy(dst, src, 56);
		break;
	case 64:
		memcpy(dst, src, 64);
		break;
	case 256:
		memcpy(dst, src, 256);
		break;
	default:
		memcpy(dst, src, n);
		break;
	}
}

/* Fill a batch of messages laid out back to back (buffer-based contenders). */
static inline void bench_batch_fill(unsigned char *buf, uint32_t payload, uint32_t batch)
{
	memset(buf, 0x5a, (size_t)payload * batch);
}

/* Stamp a batch from `seq` on; the last message of the last batch says stop. */
static inline void bench_batch_stamp(unsigned char *buf, uint32_t payload, uint32_t batch,
				     uint64_t seq, bool last)
{
	for (uint32_t i = 0; i < batch; i++)
		bench_msg_stamp(buf + (size_t)i * payload, payload,
				(seq + i) | (last && i + 1 == batch ? BENCH_STOP : 0));
}

/* Wake-up messages: side A's CLOCK_MONOTONIC send time at offset 8. */
static inline void bench_msg_set_time(void *msg, uint64_t t)
{
	memcpy((unsigned char *)msg + 8, &t, 8);
}

static inline uint64_t bench_msg_time(const void *msg)
{
	uint64_t t;

	memcpy(&t, (const unsigned char *)msg + 8, 8);
	return t;
}

/*
 * Check one received message against the expected sequence number and read
 * the rest of its lines. Returns 0 for a message, 1 for the producer's last
 * one, -EBADMSG for a wrong sequence number or a torn message.
 */
static inline int bench_msg_check(const void *msg, uint32_t payload, uint64_t expect,
				  uint64_t *sink)
{
	const unsigned char *b = msg;
	uint64_t seq = bench_msg_seq(msg), inv, w;

	memcpy(&inv, b + payload - 8, 8);
	if ((seq & BENCH_SEQ_MASK) != expect || inv != ~seq)
		return -EBADMSG;
	for (uint32_t off = 64; off + 8 < payload; off += 64) {
		memcpy(&w, b + off, 8);
		*sink += w;
	}
	return (seq & BENCH_STOP) ? 1 : 0;
}

/* ---- latency histograms (stats.c) ----
 *
 * Log-linear buckets: exact below 2048 ns, then 256 buckets per power of
 * two (under 0.4 % error), so recording is an increment and a run of any
 * length needs no sample array and no sort.
 */
#define BENCH_HIST_EXACT 2048u
#define BENCH_HIST_SUB 256u
#define BENCH_HIST_BUCKETS (BENCH_HIST_EXACT + (32u - 11u) * BENCH_HIST_SUB)

struct bench_hist {
	uint64_t n;
	uint32_t count[BENCH_HIST_BUCKETS];
};

static inline uint32_t bench_hist_bucket(uint64_t ns)
{
	uint32_t msb;

	if (ns < BENCH_HIST_EXACT)
		return (uint32_t)ns;
	if (ns > UINT32_MAX)
		ns = UINT32_MAX;
	msb = 63u - (uint32_t)__builtin_clzll(ns);
	return BENCH_HIST_EXACT + (msb - 11u) * BENCH_HIST_SUB +
	       (uint32_t)((ns >> (msb - 8u)) & (BENCH_HIST_SUB - 1));
}

static inline void bench_hist_add(struct bench_hist *h, uint64_t ns)
{
	h->count[bench_hist_bucket(ns)]++;
	h->n++;
}

/* Side A of a ping-pong: record the round trip that ends now and began at
 * *prev, which becomes now. */
static inline void bench_ping_lap(struct bench_hist *h, uint64_t *prev)
{
	uint64_t now = shoal__now_ns();

	bench_hist_add(h, now - *prev);
	*prev = now;
}

/* A zeroed histogram (malloc'ed: 30 KiB), or NULL. */
struct bench_hist *bench_hist_new(void);
/* Fill p50, p99, p99.9 (the lower bound of each one's bucket). */
void bench_hist_pct(const struct bench_hist *h, struct bench_pct *out);

/* The most runs a benchmark repeats a sample: its reports summarise one
 * value per run. */
#define BENCH_MAX_RUNS 99u

/* Median, min and max of n doubles (n >= 1); reorders v. */
struct bench_mmm {
	double med, min, max;
};
struct bench_mmm bench_mmm(double *v, unsigned n);
/* The same of a copy, v left in its order; n <= BENCH_MAX_RUNS. */
struct bench_mmm bench_mmm_keep(const double *v, unsigned n);

/* Record one wake-up latency. A latency past half the sleep timeout means
 * the wake-up was lost and only the timeout delivered the message. */
static inline void bench_lat_add(struct bench_side *s, struct bench_hist *h, uint64_t ns)
{
	bench_hist_add(h, ns);
	if (ns >= (uint64_t)BENCH_WAIT_TIMEOUT_NS / 2)
		s->res->lost++;
}

/* ---- the harness (harness.c) ---- */

extern const char *const bench_kind_name[BENCH_KINDS];

/* The segment holds two Shoal rings, two rte_rings, two plain rings, a doorbell
 * and the control block. */
#define BENCH_SEG_SIZE (4u << 20)

/* Create the segment under a unique name and allocate the regions. */
int bench_seg_create(struct bench_mem *m, char *name, size_t name_len);
/* Detach and unlink. Safe to call twice. */
void bench_seg_destroy(struct bench_mem *m);

/* Install the parent's signal handlers (Ctrl-C, termination, watchdog). */
void bench_signals_init(void);
/* The signal that asked the benchmark to stop, or 0. */
int bench_stop_signal(void);

/*
 * Run one sample: prepare the contender's state, fork the two pinned
 * sides, wait for both (killing both if either fails, on a signal, or past
 * the watchdog) and copy their results to out[2].
 * Returns 0, -EINTR when a signal asked to stop, or -errno with a reason
 * printed on stderr.
 */
int bench_sample_run(const struct bench_mem *m, const struct bench_contender *c,
		     const struct bench_params *p, struct bench_result out[2]);

/* ---- the harness's pieces, for a driver with its own control block ----
 *
 * bench_sample_run() and bench_side_ready() are made of these; a benchmark
 * whose sides share other state (shoal-bench-iceoryx) uses them directly.
 */

/* Two-party barrier on `arrived` (zero before either side starts): returns
 * once both sides have called it with `round`; rounds go 1, 2, 3, ... */
void bench_barrier(_Atomic uint32_t *arrived, uint32_t round);

/* The placement probe on `line` (zero before either side starts), run by
 * both sides at once: side 0 returns the mean cache-line round trip in ns
 * (0 if none was timed), side 1 answers it and returns 0. */
double bench_probe(_Atomic uint64_t *line, int side);

/* Pin the calling thread to `cpu`. 0 or -errno. */
int bench_pin(int cpu);

/* A forked side's start: default actions for the signals that
 * bench_signals_init() catches, SIGKILL when the parent dies, pinned to
 * `cpu`. Returns 0, or -errno if it could not be pinned (the rest is done). */
int bench_child_init(int cpu);

/* A side's body: runs in the forked child and never returns. */
typedef void (*bench_child_fn)(int side, void *arg);

/*
 * Fork side 0 and side 1, each running child(side, arg), and wait for both,
 * killing both if either fails, on a signal, or when the watchdog (4x
 * `duration_ns` + 30 s) expires. `extra`, if not NULL, is another child of
 * the caller's (a server the sides use): its exit, whatever its status,
 * fails the sample too, and *extra is set to 0 once it is reaped.
 * Returns 0, -ECHILD (a side or *extra failed), -ETIMEDOUT (watchdog),
 * -EINTR (a signal) or -errno from fork(). Prints nothing.
 */
int bench_pair_run(bench_child_fn child, void *arg, uint64_t duration_ns, pid_t *extra);

/* Whether CPUs cpu[0] and cpu[1] are both in this process's affinity mask
 * (cpusets, offline CPUs): the benchmark can pin its sides there. */
bool bench_cpus_usable(const int cpu[2]);

/* Parse "A,B": two different CPU numbers below `limit`. 0 or -EINVAL. */
int bench_parse_cpus(const char *arg, int limit, int cpu[2]);

/* Parse "auto", "on" or "off" (a router's streamed copies: SHOAL_STREAM_*,
 * docs/design.md) into *mode. 0 or -EINVAL. */
int bench_parse_stream(const char *arg, int *mode);
/* The word of a SHOAL_STREAM_* mode, as bench_parse_stream() reads it. */
const char *bench_stream_name(int mode);

/* Parse a decimal number in [min, max] into *v. 0 or -EINVAL. */
int bench_parse_uint(const char *arg, uint64_t min, uint64_t max, uint64_t *v);

/* Parse a comma-separated subset of names[0 .. n): on[i] set for each
 * name given, cleared for the others. 0, or -EINVAL for an unknown name
 * or none at all. */
int bench_parse_names(const char *arg, const char *const *names, unsigned n, bool *on);

struct option;

/* Say on stderr which option of `longopts` (the one getopt_long returned as
 * `opt`) got the bad value `arg`. Returns 2, the usage exit status. */
int bench_bad_option(const char *prog, const struct option *longopts, int opt, const char *arg);

/* The command line, its words joined by spaces (cut at `len`). */
void bench_command_line(char *buf, size_t len, int argc, char **argv);

#endif
