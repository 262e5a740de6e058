/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-system: the seed experiment across processes. A router runs in
 * this process; one producer process sends to G consumer groups, each in its
 * own process; consumer i takes the messages whose key % G == i. Routed
 * sends go through the router's dispatcher; direct sends name the consumer's
 * group address and skip the router. See bench/SUITE.md.
 *
 * What one run measures, for every group count G:
 *  - dispatch: the dispatcher alone, in each route mode (indexed: Shoal's
 *    filter vector and its index; flat: a scan of the vector; chain: one
 *    nested call per route, as elfo's router was), and each payload size,
 *    with no consumer process: the producer drains the inbound rings, of
 *    the configured size, so that the dispatcher writes into rings written
 *    before (steady state); the first lap over fresh rings is its own row.
 *    Streaming: a producer on CPU A keeps its uplink full with try_send
 *    retries while the dispatcher on CPU B drains it; the dispatcher
 *    thread's CPU time (/proc schedstat) per routed message. Backlog: the
 *    router holds dispatch (shoal_router_hold), the producer fills its
 *    uplink, the router resumes; the dispatcher's busy time (its counters)
 *    per message while it drains the backlog alone. Beside them, rotated
 *    with the route modes, the limit (`plain fwd`): a plain forwarder
 *    thread on CPU B moves the same messages from one plain SPSC ring
 *    (bench/plain_ring.h) to G by a table; tables give Shoal ÷ plain fwd.
 *  - tput: end to end, per payload size: send and try_send, routed (in each
 *    route mode) and direct. The producer's wall and CPU time per call, the
 *    dispatcher thread's CPU time per routed message, and the delivered
 *    rate (first call to the last consumer's end marker).
 *    Beside them, in the same run, the plain reference (`plain`): one
 *    producer process writes round robin into G plain SPSC rings (shoal/
 *    ring.h, in a mapping made before fork), one consumer process per ring
 *    polls it, then sleeps on its doorbell, and a waker thread of this
 *    process (pinned where the dispatcher is) makes held wake-ups by the
 *    deadline: Shoal's wake policy without Shoal. Also with a notify after
 *    every message (`send_wake_each`). Tables give Shoal ÷ plain per run.
 *  - lat: a paced producer at a fixed offered load (--rate); consumers
 *    record now - envelope send_ns into histograms in shared memory;
 *    p50 / p99 / p99.9 over all consumers.
 * With --idle it measures instead the CPU an idle system uses (router +
 * G groups, no traffic) once the spin budget has run out.
 *
 * Method: one system (router + G consumers + producer) per group count and
 * route mode per run; every point once per run, then the next run; the
 * order of route modes and of the points of a system rotated by one each
 * run. A placement probe (harness.c: a cache-line ping-pong between the
 * two CPUs) runs before every sample. A sample in which tasks outside the
 * benchmark used 10 % or more of the machine (/proc/stat busy time minus
 * the benchmark's own tasks' schedstat time) is marked disturbed and, in
 * full mode, run again (up to twice). Medians with [min, max] over runs;
 * ratios are taken run by run, then summarised the same way.
 *
 * Pinning: the producer on CPU A, the dispatcher on CPU B (a described
 * one-node topology pins it), consumers unpinned; the plain reference's
 * producer on CPU A and its waker on CPU B; the plain forwarder's filler
 * on CPU A and its thread on CPU B. With G + 2 polling threads on
 * the machine's CPUs the report says where they outnumber them.
 *
 * Ordering guarantees (the benchmark's shared block, not Shoal's):
 *   R1 (consumer: release store of end_id after its counters and histogram,
 *      in cons_end()) pairs with A1 (parent: acquire load of end_id) in
 *      sample_wait().
 *   R2 (producer: release store of done_seq after its result) pairs with A2
 *      (parent: acquire load of done_seq).
 *   R3 (parent: release store of cmd_seq after the command) pairs with A3
 *      (producer: acquire load of cmd_seq).
 *   R4 (parent: release store of fill_req after the request and the hold)
 *      pairs with A4 (filler), R5 (filler: release store of fill_done after
 *      fill_count) with A5 (parent), in fill_request() and filler_run().
 *   The plain reference's rings and doorbells order themselves (R1/A1,
 *   R2/A2 of shm/ring.c; F1/F2 of shm/doorbell.c); so do the plain
 *   forwarder's rings (R1/A1, R2/A2 of bench/plain_ring.h). Its hold, stop
 *   and counters are relaxed: requests and statistics, as the router's.
 *   Everything else the children read was written before fork().
 * Progress: every wait of the parent notices a dead child or Ctrl-C, and
 * fails when nothing has moved for STALL_NS or when it has run CAP_NS
 * (struct watch); then every child is killed and the router destroyed,
 * which removes the system's segments.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal.h>

#include "bench/plain_fwd.h"
#include "bench/plain_ring.h"
#include "bench/report.h"
#include "runtime/control/baseline.h"
#include "runtime/layout.h"

#define PROG "shoal-bench-system"

#define MSG_WORK 1u
#define MSG_END 2u
#define MSG_QUIT 3u               /* plain reference: the consumer leaves */
#define END_LEN 16u
#define MAX_GROUPS 128u
static_assert(MAX_GROUPS <= PLAIN_FWD_MAX_OUT, "the plain forwarder feeds every group");
#define MAX_LIST 16u
#define MAX_SIZES 4u
#define MAX_RUNS 20u
#define MIN_SIZE 16u
#define MAX_SIZE 16384u
#define N_ROUTE 3

/* A sample in which tasks outside the benchmark used this share of the
 * machine's CPU time was disturbed. /proc/stat counts in 10 ms ticks, so
 * the share is only trusted for samples of a few hundred milliseconds. */
#define FOREIGN_DISTURBED 0.10
/* Without consumers, the producer and the dispatcher have a CPU each: a
 * sample in which either waited this share of the time was disturbed (as
 * in shoal-bench-ring). */
#define WAITED_DISTURBED 0.02
/* T4: an idle system uses at most this share of one CPU. */
#define IDLE_TARGET_PCT 1.0

/* Waits (see struct watch): one fails when nothing the system does has
 * moved for STALL_NS, a hang; or, still moving, when the wait has run
 * CAP_NS. Both are generous: on this 2-CPU machine another user's load has
 * slowed a sample down a hundredfold (the dispatcher then gets a sliver of
 * its CPU), and a slow sample is still a sample. */
#define STALL_NS MS(60000)
#define CAP_NS MS(900000)

#define MS(x) ((uint64_t)(x) * 1000000u)
#define MIB(x) ((uint64_t)(x) << 20)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define EXIT_USAGE 2
#define EXIT_SKIP 77

static const char *const route_name[N_ROUTE] = { "indexed", "flat", "chain" };

/* ---- modes and plan -------------------------------------------------------------- */

enum { MODE_FULL, MODE_SHORT, MODE_SMOKE };

struct mode_cfg {
	const char *name;
	unsigned runs;
	unsigned reruns;          /* reruns of a disturbed sample */
	uint64_t tput_calls;      /* producer calls per throughput sample */
	uint64_t lat_ns;          /* latency sample length */
	uint64_t disp_bytes;      /* records one dispatcher-alone sample routes */
	uint32_t groups[MAX_LIST];
	unsigned n_groups;
	unsigned idle_runs;
	uint64_t idle_ns;         /* idle measurement window */
	uint32_t idle_groups[MAX_LIST];
	unsigned n_idle;
};

static const struct mode_cfg modes[] = {
	[MODE_FULL] = { "full", 5, 2, 100000, MS(1000), MIB(32),
			{ 1, 2, 5, 10, 20, 30, 50, 75, 100 }, 9, 3, MS(5000), { 1, 10, 100 }, 3 },
	[MODE_SHORT] = { "short", 3, 0, 20000, MS(250), MIB(8), { 1, 10, 100 }, 3,
			 2, MS(2000), { 3, 100 }, 2 },
	[MODE_SMOKE] = { "smoke", 1, 0, 2000, MS(50), MIB(1), { 1, 3 }, 2,
			 1, MS(300), { 2 }, 1 },
};

enum section { SEC_DISPATCH, SEC_BACKLOG, SEC_TPUT, SEC_LAT, SEC_IDLE };
enum path { ROUTED, DIRECT, PLAIN };
/* SEND_WAKE_EACH: the plain reference with a notify after every message. */
enum call { SEND, TRY_SEND, SEND_WAKE_EACH };

static const char *const section_name[] = { "dispatch", "backlog", "tput", "lat", "idle" };

struct opts {
	int mode;
	bool idle;
	unsigned runs;
	uint32_t groups[MAX_LIST];
	unsigned n_groups;
	uint32_t sizes[MAX_SIZES];
	unsigned n_sizes;
	bool route_on[N_ROUTE];
	bool sec_on[SEC_IDLE];    /* --only */
	int direct_route;         /* the system the direct points run in */
	uint64_t calls;
	uint64_t rate;
	int cpu[2];
	const char *csv;
	const char *md;
	char command[512];
};

/* One sample's observations. */
struct obs {
	uint64_t calls, accepted, refused, dropped, delivered, lost, misrouted;
	double call_ns;           /* producer wall time per call */
	double call_cpu_ns;       /* producer CPU time per call */
	double disp_ns;           /* dispatcher CPU time per routed message */
	double disp_busy_ns;      /* its busy wall time per message (its counters) */
	double lap_ns;            /* dispatcher alone: busy time per message, first lap */
	uint64_t lap_msgs;        /* the first lap's messages */
	double mps;               /* delivered messages per second */
	double rate;              /* calls per second (lat: the achieved offered load) */
	struct bench_pct lat;
	double idle_pct, idle_router_pct, idle_groups_pct, wakeups;
	double probe_ns;
	double waited;            /* producer's or dispatcher's run delay / wall */
	double foreign;           /* share of the machine used by other tasks */
	double foreign_ticks;     /* the same from /proc/stat ticks (a lower bound) */
	uint64_t forks;           /* tasks created on the machine during the sample */
	int cpu_prod, cpu_disp;   /* where they ran (-1: moved during the sample) */
	unsigned attempts;
	bool disturbed;
};

struct point {
	enum section sec;
	uint32_t groups;
	uint32_t size;
	int route;                /* route mode; -1 for direct and idle */
	enum path path;
	enum call call;
	struct obs obs[MAX_RUNS];
	unsigned n;
};

struct plan {
	struct point *pts;
	unsigned n, cap;
	const struct mode_cfg *mode;
	unsigned runs;
	unsigned reruns, disturbed;
	double steal;
	long ncpu;
	uint64_t wall_ns;
};

/* ---- shared with the children ---------------------------------------------------- */

enum cmd_kind { CMD_NONE, CMD_TPUT, CMD_LAT, CMD_QUIT };

struct cmd {
	uint32_t kind;
	uint32_t path;
	uint32_t call;
	uint32_t size;
	uint64_t calls;           /* messages to send */
	uint64_t gap_ns;          /* CMD_LAT: between scheduled sends */
	uint64_t id;              /* sample id, carried by the end markers */
};

struct prod_result {
	uint64_t t_start, t_sent;
	uint64_t cpu_ns;          /* the producer's CPU time from t_start to t_sent */
	uint64_t calls, accepted, refused;
	int32_t err;
	int32_t cpu;
	char msg[160];
};

struct cons_stat {
	_Alignas(128) _Atomic uint64_t received;   /* MSG_WORK handled */
	_Atomic uint64_t misrouted;                /* key % G != this consumer */
	_Atomic uint64_t end_id;                   /* id of the last end marker */
	_Atomic uint64_t end_ns;                   /* when it came */
};

struct shared {
	struct bench_ctl probe;                    /* harness.c's barrier and probe line */
	_Alignas(128) _Atomic uint32_t ready;      /* children attached */
	uint32_t groups;                           /* G of the running system */
	int cpu_prod;
	_Alignas(128) struct cmd cmd;
	_Atomic uint64_t cmd_seq;
	_Alignas(128) _Atomic uint64_t done_seq;
	struct prod_result pr;
	_Alignas(128) _Atomic uint32_t lat_on;     /* consumers record latencies */
	_Alignas(128) _Atomic uint32_t fill_state; /* filler: 1 warmed up */
	_Atomic uint32_t fill_go;                  /* parent: 2 leave */
	_Atomic uint64_t fill_req;                 /* parent asks for a fill or a stream */
	_Atomic uint64_t fill_done;                /* filler answers */
	bool fill_stream;                          /* stream fill_max messages, or fill */
	uint64_t fill_max;                         /* the held uplink with at most that */
	uint64_t fill_count;                       /* messages the request sent */
	uint32_t fill_size;
	struct cons_stat cons[MAX_GROUPS];
	struct bench_hist hist[MAX_GROUPS];
};

/* What the mappings of the systems without a router start with (sys_map()):
 * their rings are ring_len apart from ring_off. */
struct map_head {
	uint32_t groups;
	uint64_t ring_off, ring_len;
	size_t len;                      /* the whole mapping */
};

/* Ring i of such a mapping. */
static void *map_ring(const struct map_head *h, uint32_t i)
{
	return (unsigned char *)h + h->ring_off + (uint64_t)i * h->ring_len;
}

/*
 * The plain reference's mapping (MAP_SHARED, made before fork): the
 * doorbells, then G rings of PLAIN_RING_CAP data bytes.
 */
struct plain_bells {
	struct shoal_doorbell in_db;     /* its consumer sleeps on it */
	struct shoal_doorbell space_db;  /* the producer sleeps on it while the ring is full */
};

struct plain_shm {
	struct map_head h;
	struct shoal_doorbell waker;     /* rung by the producer on a first held wake-up */
	_Atomic uint32_t stop;           /* the waker leaves */
	struct plain_bells c[MAX_GROUPS];
};

/* The plain forwarder's mapping (MAP_SHARED, made before fork): its control and
 * counters, then the input ring and the G output rings. */
struct fwd_shm {
	struct map_head h;
	_Alignas(128) _Atomic uint32_t hold;   /* parent: take no messages */
	_Atomic uint32_t stop;                 /* parent: leave */
	/* Written by the forwarder only, read by the parent (disp_counters()). */
	_Alignas(128) _Atomic uint64_t messages;
	_Atomic uint64_t busy_ns;
	_Atomic uint64_t dropped;
	_Atomic uint64_t malformed;
};

static struct shared *sh;
static struct plain_shm *psh;   /* the plain system's, while it runs */
static struct fwd_shm *fsh;     /* the plain forwarder's, while it runs */
static pid_t parent_pid;

static struct shoal_type types[2] = {
	{ MSG_WORK, 64, "work" },
	{ MSG_END, END_LEN, "end" },
};

/* ---- small helpers ---------------------------------------------------------------- */

static void msleep(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* A child's start: die with the parent or at Ctrl-C, keep no descriptor of
 * the router's. Returns false if the parent is already gone. */
static bool child_init(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGALRM };

	for (size_t i = 0; i < COUNT(sigs); i++)
		signal(sigs[i], SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close_range(3, ~0u, 0);
	return getppid() == parent_pid;
}

static pid_t spawn(int (*fn)(const char *, uint32_t), const char *system, uint32_t i)
{
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0)
		_exit(child_init() ? fn(system, i) : 1);
	return pid < 0 ? -errno : pid;
}

/* ---- /proc: tasks' CPU time and run delay (procstat.c reads the files) ---------------- */

static void sstat_add(struct bench_schedstat *sum, const struct bench_schedstat *s)
{
	sum->run += s->run;
	sum->wait += s->wait;
	sum->slices += s->slices;
}

/* Sum over the threads of this process, except thread `skip` (0: none). */
static void sstat_self(pid_t skip, struct bench_schedstat *sum)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	memset(sum, 0, sizeof(*sum));
	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[300];
		struct bench_schedstat s;

		if (e->d_name[0] == '.' || atoi(e->d_name) == skip)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
		bench_schedstat_read(path, &s);
		sstat_add(sum, &s);
	}
	if (d != NULL)
		closedir(d);
}

/* A single-threaded process (group processes have one worker). */
static void sstat_pid(pid_t pid, struct bench_schedstat *s)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	bench_schedstat_read(path, s);
}

static void sstat_tid(pid_t tid, struct bench_schedstat *s)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	bench_schedstat_read(path, s);
}

/* The CPU task `tid` (a thread of this process, or another process) last
 * ran on (field 39 of /proc/TID/stat, which exists for every thread id),
 * and its state (field 3: R running, S sleeping, ...; '?' unknown) if
 * `state` is not NULL. */
static int task_where(pid_t tid, char *state)
{
	char path[64], buf[1024], *p;
	int cpu = -1;
	FILE *f;

	if (state != NULL)
		*state = '?';
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	f = fopen(path, "re");
	if (f == NULL)
		return -1;
	if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL) {
		/* Fields after the command: state is field 3, processor 39. */
		int field = 2;

		for (char *tok = strtok(p + 1, " "); tok != NULL; tok = strtok(NULL, " "))
			if (++field == 3 && state != NULL) {
				*state = tok[0];
			} else if (field == 39) {
				cpu = atoi(tok);
				break;
			}
	}
	fclose(f);
	return cpu;
}

static int task_cpu(pid_t tid)
{
	return task_where(tid, NULL);
}

/* ---- other tasks' CPU time ------------------------------------------------------------ */

/* Every task (thread) of the machine outside the benchmark, with its CPU
 * time, sorted by tid. */
struct task_run {
	int tid;
	uint64_t run;
};

struct taskset {
	struct task_run *v;
	size_t n, cap;
};

static int cmp_tid(const void *a, const void *b)
{
	const struct task_run *x = a, *y = b;

	return (x->tid > y->tid) - (x->tid < y->tid);
}

static void taskset_add(struct taskset *t, int tid, uint64_t run)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 512;
		struct task_run *n = realloc(t->v, cap * sizeof(*n));

		if (n == NULL)
			return;   /* an undercount, not a failure */
		t->v = n;
		t->cap = cap;
	}
	t->v[t->n++] = (struct task_run){ tid, run };
}

static void tasks_take(struct taskset *t, bool (*ours)(const void *, pid_t), const void *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	t->n = 0;
	while (d != NULL && (e = readdir(d)) != NULL) {
		int pid = atoi(e->d_name);
		char path[64];
		struct dirent *te;
		DIR *td;

		if (pid <= 0 || ours(arg, pid))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task", pid);
		td = opendir(path);
		while (td != NULL && (te = readdir(td)) != NULL) {
			char p2[96];
			struct bench_schedstat st;
			int tid = atoi(te->d_name);

			if (tid <= 0)
				continue;
			snprintf(p2, sizeof(p2), "/proc/%d/task/%d/schedstat", pid, tid);
			bench_schedstat_read(p2, &st);
			taskset_add(t, tid, st.run);
		}
		if (td != NULL)
			closedir(td);
	}
	if (d != NULL)
		closedir(d);
	qsort(t->v, t->n, sizeof(*t->v), cmp_tid);
}

/* CPU time other tasks used between two sets: tasks new in `b` count from
 * zero. Tasks that began and ended in between are not seen (see snap). */
static uint64_t tasks_delta(const struct taskset *a, const struct taskset *b)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < b->n; i++) {
		const struct task_run *was = bsearch(&b->v[i], a->v, a->n, sizeof(*a->v), cmp_tid);

		sum += was != NULL && was->run <= b->v[i].run ? b->v[i].run - was->run : b->v[i].run;
	}
	return sum;
}

/* ---- the system: router, group processes ------------------------------------------ */

/*
 * A deadline that moves with progress: a wait fails when the system's
 * progress measure (sys_progress()) has not changed for STALL_NS, or when
 * the wait has run `cap` (CAP_NS, or more for a long sample). One watch may
 * span several waits (the cycles of a backlog sample).
 */
struct watch {
	uint64_t start;           /* when the first wait began */
	uint64_t cap;             /* its limit, from start */
	uint64_t value;           /* the progress measure last seen */
	uint64_t moved;           /* when it last changed */
};

struct sys {
	struct shoal_router *r;
	struct shoal__registry reg;
	bool reg_ok;
	char name[32];
	uint32_t groups;
	int route;
	pid_t cons[MAX_GROUPS];
	pid_t prod;               /* producer or filler */
	pid_t disp_tid;
	uint64_t next_id;
	int cpu[2];
	/* A dispatcher-alone sample (NULL: the end-to-end system, consumers
	 * running): what it routes, for the diagnostics. */
	const struct point *alone;
	uint64_t alone_m0;        /* dispatcher's messages when it began */
	uint64_t alone_calls;     /* messages it routes */
	struct bench_schedstat alone_disp;  /* the dispatcher thread's schedstat then */
	const struct watch *watch; /* the wait under way, if any */
	/* The plain reference (r NULL): its mapping and its waker thread,
	 * which stands where the dispatcher does (disp_tid). */
	struct plain_shm *plain;
	pthread_t waker;
	bool waker_on;
	/* The plain forwarder (r NULL): its mapping and its thread, which
	 * stands where the dispatcher does (disp_tid). */
	struct fwd_shm *fwd;
	pthread_t fwd_thread;
	bool fwd_on;
};

/* The live system, for the error and signal paths. */
static struct sys cur;
static unsigned sys_count;
/* --router-yield: the routers' router.yield, and the plain reference's
 * consumers' look after their spin (ns; 0: none, the default). */
static uint64_t yield_ns;
/* --stream: the routers' router.stream, and how many of them streamed
 * their copies (of how many). */
static int stream_mode = SHOAL_STREAM_AUTO;
static unsigned stream_on, stream_routers;

static void disp_counters(const struct sys *s, uint64_t *msgs, uint64_t *busy, uint64_t *drops)
{
	const struct shoal__reg_dispatcher *d;

	if (s->fwd != NULL) {
		/* Relaxed: single-writer statistics, as the dispatcher's. */
		*msgs = shoal_load_relaxed(&s->fwd->messages);
		*busy = shoal_load_relaxed(&s->fwd->busy_ns);
		*drops = shoal_load_relaxed(&s->fwd->dropped);
		return;
	}
	if (!s->reg_ok) {
		*msgs = *busy = *drops = 0;   /* the plain reference: no dispatcher */
		return;
	}
	d = &s->reg.hdr->disp[0];
	/* Relaxed: single-writer statistics; the sample's end markers (A1)
	 * and the settle loop in sample_wait() bound how stale they are. */
	*msgs = shoal_load_relaxed(&d->messages);
	*busy = shoal_load_relaxed(&d->busy_ns);
	*drops = shoal_load_relaxed(&d->dropped_full);
}

/* Anything that moves while a system works, summed (each term only grows):
 * the dispatcher's messages, the consumers' messages and end markers, the
 * children's answers. A wait that sees it change is not hung. */
static uint64_t sys_progress(const struct sys *s)
{
	uint64_t v = atomic_load(&sh->ready) + atomic_load(&sh->fill_state), m = 0, b, d;

	/* Relaxed: a sum compared with itself, nothing is read through it. */
	v += shoal_load_relaxed(&sh->done_seq) + shoal_load_relaxed(&sh->fill_done);
	disp_counters(s, &m, &b, &d);
	v += m;
	for (uint32_t i = 0; i < s->groups; i++)
		v += shoal_load_relaxed(&sh->cons[i].received) +
		     shoal_load_relaxed(&sh->cons[i].end_id);
	return v;
}

/* Start a watch of `cap_ns` (CAP_NS and more for a long sample). */
static void watch_start(struct watch *w, const struct sys *s, uint64_t cap_ns)
{
	w->start = w->moved = shoal__now_ns();
	w->cap = cap_ns;
	w->value = sys_progress(s);
}

/* Forget a child the parent reaped; returns its role for messages. */
static const char *sys_forget(struct sys *s, pid_t pid)
{
	if (pid == s->prod) {
		s->prod = 0;
		return s->alone != NULL ? "the filler" : "the producer";
	}
	for (uint32_t i = 0; i < s->groups; i++)
		if (s->cons[i] == pid) {
			s->cons[i] = 0;
			return "a consumer";
		}
	return "a child";
}

/* The machine's load average and runnable tasks, from /proc/loadavg. */
static void loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "re");
	double l1 = 0, l5 = 0;
	char run[32] = "?";

	if (f == NULL || fscanf(f, "%lf %lf %*f %31s", &l1, &l5, run) != 3)
		snprintf(buf, len, "unknown");
	else
		snprintf(buf, len, "load average %.2f (1 min), %.2f (5 min); %s tasks runnable",
			 l1, l5, run);
	if (f != NULL)
		fclose(f);
}

/* What the system was doing, printed when a wait times out. */
static void sys_dump(const struct sys *s)
{
	struct shoal_router_stats st;
	uint64_t got = 0, m, b, d;
	char load[128];

	if (s->r == NULL && s->plain == NULL && s->fwd == NULL)
		return;
	memset(&st, 0, sizeof(st));
	if (s->r != NULL)
		shoal_router_stats(s->r, &st);
	loadavg(load, sizeof(load));
	if (s->alone != NULL) {
		const struct point *pt = s->alone;
		struct bench_schedstat ds = { 0 };
		char state;
		int cpu = task_where(s->disp_tid, &state);

		disp_counters(s, &m, &b, &d);
		sstat_tid(s->disp_tid, &ds);
		fprintf(stderr, PROG ": %s: %s alone (%s, %s, %u groups, %u B), no consumer "
			"running; router: %u group process attached (the filler)\n", s->name,
			s->fwd != NULL ? "plain forwarder" : "dispatcher",
			pt->sec == SEC_BACKLOG ? "backlog" : "stream",
			s->fwd != NULL ? "no route modes" : route_name[s->route], s->groups,
			pt->size, st.running);
		fprintf(stderr, PROG ":   dispatcher: routed %" PRIu64 " of the sample's %" PRIu64
			" messages (%" PRIu64 " in all), %" PRIu64 " dropped, %" PRIu64 " sleeps\n",
			m >= s->alone_m0 ? m - s->alone_m0 : 0, s->alone_calls, m, d,
			s->reg_ok ? shoal_load_relaxed(&s->reg.hdr->disp[0].sleeps) : 0);
		fprintf(stderr, PROG ":   dispatcher thread %d: state %c, last on CPU %d; since "
			"the sample began it ran %.2f s and waited %.2f s for a CPU\n",
			(int)s->disp_tid, state, cpu, (double)(ds.run - s->alone_disp.run) / 1e9,
			(double)(ds.wait - s->alone_disp.wait) / 1e9);
		fprintf(stderr, PROG ":   filler (pid %d): %s, %s; requests (fills, streams) %"
			PRIu64 ", answered %" PRIu64 ", last %" PRIu64 " messages\n", (int)s->prod,
			s->prod > 0 ? "running" : "gone",
			atomic_load(&sh->fill_state) == 0 ? "warming up" : "warmed up",
			shoal_load_relaxed(&sh->fill_req), shoal_load_relaxed(&sh->fill_done),
			sh->fill_count);
		fprintf(stderr, PROG ":   machine: %s\n", load);
		return;
	}
	for (uint32_t i = 0; i < s->groups; i++)
		got += shoal_load_relaxed(&sh->cons[i].received);
	if (s->plain != NULL)
		fprintf(stderr, PROG ": %s (plain reference, %u groups): waker thread %d%s\n",
			s->name, s->groups, (int)s->disp_tid, s->waker_on ? "" : " not started");
	else
		fprintf(stderr, PROG ": %s (route mode %s, %u groups): %u group processes attached; "
			"router: %" PRIu64 " routed, %" PRIu64 " delivered, %" PRIu64 " handled, %"
			PRIu64 " direct, %" PRIu64 " dropped\n", s->name, route_name[s->route],
			s->groups, st.running, st.routed, st.delivered, st.handled, st.sent_direct,
			st.dropped);
	fprintf(stderr, PROG ":   %u of %u processes ready; commands %" PRIu64 " sent, %" PRIu64
		" done; consumers received %" PRIu64 " since the system started\n",
		atomic_load(&sh->ready), s->groups + 1, shoal_load_relaxed(&sh->cmd_seq),
		shoal_load_relaxed(&sh->done_seq), got);
	fprintf(stderr, PROG ":   machine: %s\n", load);
	for (uint32_t i = 0; i < s->groups && i < 8; i++)
		fprintf(stderr, PROG ":   c%u (pid %d%s): received %" PRIu64 ", end marker %" PRIu64
			"\n", i, (int)s->cons[i], s->cons[i] > 0 ? "" : ", gone",
			shoal_load_relaxed(&sh->cons[i].received),
			shoal_load_relaxed(&sh->cons[i].end_id));
}

/*
 * One step of every wait: fail on Ctrl-C, past the deadline, or when a
 * child died; otherwise sleep `ms` (the parent must not compete for the
 * CPUs it measures). Returns 0 or a negative errno, with the reason printed.
 * Waits that may take long use watch_step().
 */
static int wait_step(struct sys *s, uint64_t deadline, const char *what, unsigned ms)
{
	int st;
	pid_t w;

	if (bench_stop_signal())
		return -EINTR;
	w = waitpid(-1, &st, WNOHANG);
	if (w > 0) {
		const char *who = sys_forget(s, w);

		fprintf(stderr, PROG ": %s (pid %d) %s %d while waiting for %s\n", who, (int)w,
			WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
			WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), what);
		if (sh->pr.msg[0] != '\0')
			fprintf(stderr, PROG ": producer: %s\n", sh->pr.msg);
		return -ECHILD;
	}
	if (shoal__now_ns() >= deadline) {
		const struct watch *wt = s->watch;
		double now = (double)shoal__now_ns();

		if (wt == NULL)
			fprintf(stderr, PROG ": timed out waiting for %s\n", what);
		else if (wt->moved + STALL_NS <= deadline)
			fprintf(stderr, PROG ": timed out waiting for %s: nothing moved for %.1f s "
				"(a hang; waiting for %.1f s in all)\n", what,
				(now - (double)wt->moved) / 1e9, (now - (double)wt->start) / 1e9);
		else
			fprintf(stderr, PROG ": timed out waiting for %s: still moving (last "
				"%.1f s ago), but the wait reached its limit of %.0f s\n", what,
				(now - (double)wt->moved) / 1e9, (double)wt->cap / 1e9);
		sys_dump(s);
		return -ETIMEDOUT;
	}
	msleep(ms);
	return 0;
}

/* wait_step() under watch `w`: its deadline moves with sys_progress(). */
static int watch_step(struct sys *s, struct watch *w, const char *what, unsigned ms)
{
	uint64_t v = sys_progress(s), stall, cap;
	int ret;

	if (v != w->value) {
		w->value = v;
		w->moved = shoal__now_ns();
	}
	stall = w->moved + STALL_NS;
	cap = w->start + w->cap;
	s->watch = w;
	ret = wait_step(s, stall < cap ? stall : cap, what, ms);
	s->watch = NULL;
	return ret;
}

/* Wait for up to `timeout_ns` for pid to exit; SIGKILL it after. */
static void reap(pid_t pid, uint64_t timeout_ns)
{
	uint64_t deadline = shoal__now_ns() + timeout_ns;
	int st;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (shoal__now_ns() >= deadline) {
			kill(pid, SIGKILL);
			deadline = shoal__now_ns() + MS(2000);
			while (waitpid(pid, &st, WNOHANG) == 0 && shoal__now_ns() < deadline)
				msleep(1);
			return;
		}
		msleep(1);
	}
}

/* SIGALRM while the router is destroyed: one of its threads hangs (a
 * dispatcher that never comes back to its stop flag). Report it and leave;
 * the next run removes the segments (sweep_leftovers()). */
static void on_destroy_hang(int sig)
{
	static const char msg[] = PROG ": the router's threads did not stop within 60 s "
				  "(a hung dispatcher?); exiting, its segments left to the "
				  "next run\n";

	(void)sig;
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(EXIT_FAILURE);
}

static void plain_release(struct sys *s);
static void fwd_release(struct sys *s);

/*
 * Stop the system: graceful asks the producer to leave and the groups to
 * drain (the plain reference's producer tells its consumers); otherwise (an error, Ctrl-C) every child is killed at once. Then
 * the router is destroyed, which removes the system's segments. Safe to
 * call on a partly started system and twice.
 */
static void sys_down(struct sys *s, bool graceful)
{
	uint64_t grace = graceful ? MS(5000) : 0;

	if (graceful && s->prod > 0) {
		sh->cmd.kind = CMD_QUIT;
		atomic_store_explicit(&sh->fill_go, 2, memory_order_relaxed);
		/* R3: pairs with A3 in producer_main(). */
		shoal_store_release(&sh->cmd_seq, shoal_load_relaxed(&sh->cmd_seq) + 1);
	}
	if (graceful && s->r != NULL)
		shoal_router_stop_groups(s->r, (int64_t)grace);
	if (!graceful) {
		if (s->prod > 0)
			kill(s->prod, SIGKILL);
		for (uint32_t i = 0; i < s->groups; i++)
			if (s->cons[i] > 0)
				kill(s->cons[i], SIGKILL);
	}
	if (s->prod > 0)
		reap(s->prod, grace);
	for (uint32_t i = 0; i < s->groups; i++)
		if (s->cons[i] > 0)
			reap(s->cons[i], grace);
	if (s->plain != NULL)
		plain_release(s);
	if (s->fwd != NULL)
		fwd_release(s);
	if (s->reg_ok)
		shoal_seg_detach(&s->reg.seg);
	if (s->r != NULL) {
		/* The destroy joins the dispatcher: a hung one must not hang
		 * the benchmark after the hang was reported. */
		struct sigaction sa = { .sa_handler = on_destroy_hang }, old;

		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, &old);
		alarm(60);
		shoal_router_destroy(s->r);
		alarm(0);
		sigaction(SIGALRM, &old, NULL);
	}
	memset(s, 0, sizeof(*s));
}

/* The id of this process's thread named `comm` (the dispatcher, the plain
 * reference's waker), found once it has its name. */
static pid_t find_thread(const char *comm)
{
	for (int tries = 0; tries < 1000; tries++) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *e;
		pid_t tid = 0;

		while (d != NULL && tid == 0 && (e = readdir(d)) != NULL) {
			char path[300], name[32] = "";
			FILE *f;

			snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
			f = fopen(path, "re");
			if (f == NULL)
				continue;
			if (fgets(name, sizeof(name), f) != NULL &&
			    strncmp(name, comm, strlen(comm)) == 0)
				tid = atoi(e->d_name);
			fclose(f);
		}
		if (d != NULL)
			closedir(d);
		if (tid > 0)
			return tid;
		msleep(1);
	}
	return 0;
}

/*
 * Start a router in route mode `route` with groups c0 .. c{G-1}, consumer i
 * taking MSG_WORK and MSG_END whose key % G == i, each group's inbound rings
 * of `in_cap` bytes (0: the default). Fills s; on failure s is torn down.
 */
static int router_up(struct sys *s, uint32_t groups, int route, uint32_t in_cap,
		     const int cpu[2])
{
	struct bitmask *disp_cpus = numa_bitmask_alloc((unsigned)cpu[1] + 1);
	struct shoal_topology topo = { .n_nodes = 1, .cpu_sets = { disp_cpus } };
	struct shoal_router_opts o = { .topology = &topo, .yield_ns = yield_ns,
				       .stream = stream_mode };
	struct shoal_filter f[MAX_GROUPS];
	struct shoal_err err = { "" };
	int ret;

	memset(s, 0, sizeof(*s));
	s->groups = groups;
	s->route = route;
	s->cpu[0] = cpu[0];
	s->cpu[1] = cpu[1];
	snprintf(s->name, sizeof(s->name), "sbench-%d-%u", (int)getpid(), ++sys_count);
	o.system = s->name;
	if (disp_cpus == NULL) {
		fprintf(stderr, PROG ": no memory for the dispatcher's CPU set\n");
		return -ENOMEM;
	}
	numa_bitmask_setbit(disp_cpus, (unsigned)cpu[1]);
	ret = shoal__router_start_mode(&s->r, &o, route, &err);
	numa_bitmask_free(disp_cpus);   /* the router keeps a copy */
	if (ret < 0) {
		s->r = NULL;
		fprintf(stderr, PROG ": starting router %s: %s (%s)\n", s->name,
			shoal_strerror(ret), err.msg);
		return ret;
	}
	stream_on += shoal_router_stream(s->r, NULL) == 1;
	stream_routers++;
	/* Nothing to route while the groups are declared one by one. */
	shoal_router_hold(s->r, true);
	for (uint32_t i = 0; i < groups; i++) {
		char name[32];
		struct shoal_group_spec spec = { .name = name, .node = -1, .inbound_capacity = in_cap };
		int id;

		snprintf(name, sizeof(name), "c%u", i);
		id = shoal_router_group(s->r, &spec, &err);
		if (id < 0) {
			ret = id;
			goto fail;
		}
		f[i] = (struct shoal_filter){ .types = { MSG_WORK, MSG_END }, .n_types = 2,
					      .mode = SHOAL_ROUTE_GROUP, .group = (uint16_t)id };
		f[i].key = (struct shoal_key){ .offset = 0, .width = 8, .op = SHOAL_KEY_MOD,
					       .a = groups, .b = i };
	}
	ret = shoal_router_set_routes(s->r, f, groups, &err);
	if (ret < 0)
		goto fail;
	ret = shoal__registry_attach(&s->reg, s->name, SHOAL_SEG_RDONLY, &err);
	if (ret < 0)
		goto fail;
	s->reg_ok = true;
	shoal_router_hold(s->r, false);
	s->disp_tid = find_thread("shoal-disp-0");
	if (s->disp_tid == 0) {
		snprintf(err.msg, sizeof(err.msg), "no dispatcher thread");
		ret = -ESRCH;
		goto fail;
	}
	return 0;
fail:
	fprintf(stderr, PROG ": setting up %s: %s (%s)\n", s->name, shoal_strerror(ret), err.msg);
	sys_down(s, false);
	return ret;
}

/* ---- consumers ---------------------------------------------------------------------- */

static uint32_t cons_index;
static uint64_t cons_received, cons_misrouted;

/* A sample's end marker (payload: key, sample id) came. */
static void cons_end(const void *data, uint32_t len)
{
	struct cons_stat *cs = &sh->cons[cons_index];
	uint64_t id = 0;

	if (len >= END_LEN)
		memcpy(&id, (const unsigned char *)data + 8, 8);
	/* Relaxed: published by the release below. */
	shoal_store_relaxed(&cs->end_ns, shoal__now_ns());
	/* R1: pairs with A1 in sample_wait(): this consumer's counters
	 * and histogram are complete for the sample before its id. */
	shoal_store_release(&cs->end_id, id);
}

/* A message handled; `bad`: it was not this consumer's to take. */
static void cons_work(bool bad)
{
	struct cons_stat *cs = &sh->cons[cons_index];

	if (bad)
		shoal_store_relaxed(&cs->misrouted, ++cons_misrouted);
	/* Relaxed: this consumer is the only writer; R1 publishes it. */
	shoal_store_relaxed(&cs->received, ++cons_received);
}

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	uint64_t key = 0;

	(void)a;
	if (m->type == MSG_END) {
		cons_end(m->data, m->len);
		return;
	}
	if (m->len >= 8)
		memcpy(&key, m->data, 8);
	/* Relaxed: a flag the parent sets while no message is in flight. */
	if (shoal_load_relaxed(&sh->lat_on))
		bench_hist_add(&sh->hist[cons_index], shoal__now_ns() - m->env->send_ns);
	cons_work(key % sh->groups != cons_index);
}

static int consumer_main(const char *system, uint32_t i)
{
	struct shoal_group_desc d = { .types = types, .n_types = COUNT(types), .node = -1,
				      .on_message = on_message };
	struct shoal_err err = { "" };
	struct shoal_group *g;
	char name[32];
	int ret;

	snprintf(name, sizeof(name), "c%u", i);
	d.name = name;
	cons_index = i;
	ret = shoal_group_attach(&g, &d, system, &err);
	if (ret < 0) {
		fprintf(stderr, PROG ": consumer %u: %s (%s)\n", i, shoal_strerror(ret), err.msg);
		return 1;
	}
	atomic_fetch_add_explicit(&sh->ready, 1, memory_order_relaxed);
	ret = shoal_group_run(g);
	shoal_group_detach(g);
	return ret < 0 ? 1 : 0;
}

/* ---- the producer ------------------------------------------------------------------- */

/* Shoal's producer and the plain reference's: the loops are the same, the
 * send is theirs. */
struct producer {
	/* Send `len` bytes of buf to consumer g on the command's path. */
	int (*send)(struct producer *p, const struct cmd *c, uint32_t type, uint32_t g,
		    uint32_t len, bool try);
	uint32_t groups;
	/* Shoal's */
	struct shoal_ctx *ctx;
	uint64_t addr[MAX_GROUPS];
	/* The plain reference's: a ring to each consumer, and its wake-ups */
	struct shoal_ring_prod out[MAX_GROUPS];
	uint32_t unann[MAX_GROUPS];   /* committed since the last SHOAL_WAKE_DONE */
	struct shoal_wake_mod mod;
	unsigned char buf[MAX_SIZE];
};

static int prod_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sh->pr.msg, sizeof(sh->pr.msg), fmt, ap);
	va_end(ap);
	sh->pr.err = err;
	return err;
}

static int send_one(struct producer *p, const struct cmd *c, uint32_t type, uint32_t g,
		    uint32_t len, bool try)
{
	if (c->path == ROUTED)
		return try ? shoal_try_send(p->ctx, type, p->buf, len)
			   : shoal_send(p->ctx, type, p->buf, len);
	return try ? shoal_try_send_to(p->ctx, p->addr[g], type, p->buf, len)
		   : shoal_send_to(p->ctx, p->addr[g], type, p->buf, len);
}

/* One end marker per group, after the sample's messages on the same path:
 * each sender's order is kept per destination, so a consumer sees its
 * marker after every message of the sample addressed to it. */
static int send_ends(struct producer *p, const struct cmd *c)
{
	for (uint32_t g = 0; g < p->groups; g++) {
		uint64_t key = g;
		int ret;

		memcpy(p->buf, &key, 8);
		memcpy(p->buf + 8, &c->id, 8);
		ret = p->send(p, c, MSG_END, g, END_LEN, false);
		if (ret < 0)
			return prod_fail(ret, "end marker to c%u: %s", g, shoal_strerror(ret));
	}
	return 0;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The producer's calls are made: close its figures (cpu -1 if it moved
 * off its CPU), then send the end markers. */
static int sample_sent(struct producer *p, const struct cmd *c, struct prod_result *res,
		       uint64_t cpu0, uint64_t refused)
{
	res->t_sent = shoal__now_ns();
	res->cpu_ns = thread_cpu_ns() - cpu0;
	if (sched_getcpu() != res->cpu)
		res->cpu = -1;
	res->calls = c->calls;
	res->refused = refused;
	res->accepted = c->calls - refused;
	return send_ends(p, c);
}

static int run_tput(struct producer *p, const struct cmd *c, struct prod_result *res)
{
	bool try = c->call == TRY_SEND;
	uint64_t refused = 0, cpu0 = thread_cpu_ns();
	uint32_t g = 0;

	res->cpu = sched_getcpu();
	res->t_start = shoal__now_ns();
	for (uint64_t i = 0; i < c->calls; i++) {
		int ret;

		memcpy(p->buf, &i, 8);
		ret = p->send(p, c, MSG_WORK, g, c->size, try);
		if (ret == -EAGAIN && try) {
			refused++;
		} else if (ret < 0) {
			return prod_fail(ret, "message %" PRIu64 ": %s", i, shoal_strerror(ret));
		}
		g = g + 1 == p->groups ? 0 : g + 1;
	}
	return sample_sent(p, c, res, cpu0, refused);
}

/* Sleep (or spin, when close) until `t`. */
static void wait_until(uint64_t t)
{
	uint64_t now = shoal__now_ns();

	if (now + 20000 < t) {
		struct timespec ts = { (time_t)((t - 20000) / 1000000000u),
				       (long)((t - 20000) % 1000000000u) };

		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	while (shoal__now_ns() < t)
		bench_relax();
}

/* Open loop: message i is due at start + i * gap, sent late if the producer
 * fell behind; its latency runs from its own send time (the envelope's). */
static int run_lat(struct producer *p, const struct cmd *c, struct prod_result *res)
{
	uint64_t next, cpu0 = thread_cpu_ns();
	uint32_t g = 0;

	res->cpu = sched_getcpu();
	res->t_start = next = shoal__now_ns();
	for (uint64_t i = 0; i < c->calls; i++, next += c->gap_ns) {
		int ret;

		wait_until(next);
		memcpy(p->buf, &i, 8);
		ret = p->send(p, c, MSG_WORK, g, c->size, false);
		if (ret < 0)
			return prod_fail(ret, "message %" PRIu64 ": %s", i, shoal_strerror(ret));
		g = g + 1 == p->groups ? 0 : g + 1;
	}
	return sample_sent(p, c, res, cpu0, 0);
}

/* A producer pinned to the producer's CPU, its buffer filled; NULL with
 * the reason in sh->pr. */
static struct producer *producer_new(uint32_t groups,
				     int (*send)(struct producer *, const struct cmd *, uint32_t,
						 uint32_t, uint32_t, bool))
{
	struct producer *p = calloc(1, sizeof(*p));

	if (p == NULL || bench_pin(sh->cpu_prod) < 0) {
		prod_fail(-ENOMEM, "pinning to CPU %d or allocating", sh->cpu_prod);
		free(p);
		return NULL;
	}
	p->send = send;
	p->groups = groups;
	memset(p->buf, 0x5a, sizeof(p->buf));
	return p;
}

/* Say ready, then run the parent's commands until CMD_QUIT. Returns 0, or
 * a failed command's negative errno (its reason in sh->pr). `seen`: the
 * command number when the producer started. */
static int serve(struct producer *p, uint64_t seen)
{
	int ret = 0;

	atomic_fetch_add_explicit(&sh->ready, 1, memory_order_relaxed);
	while (ret == 0) {
		uint64_t seq;
		struct cmd c;

		/* A3: pairs with R3 in the parent: the command before its number. */
		while ((seq = shoal_load_acquire(&sh->cmd_seq)) == seen)
			msleep(1);
		seen = seq;
		c = sh->cmd;
		if (c.kind == CMD_QUIT)
			break;
		memset(&sh->pr, 0, sizeof(sh->pr));
		ret = c.kind == CMD_LAT ? run_lat(p, &c, &sh->pr) : run_tput(p, &c, &sh->pr);
		/* R2: pairs with A2 in sample_wait(): the result before its number. */
		shoal_store_release(&sh->done_seq, seq);
	}
	return ret;
}

static int producer_main(const char *system, uint32_t groups)
{
	struct shoal_group_desc d = { .name = "producer", .types = types,
				      .n_types = COUNT(types), .node = -1,
				      .on_message = on_message };
	struct shoal_err err = { "" };
	uint64_t seen = shoal_load_relaxed(&sh->cmd_seq);
	struct producer *p = producer_new(groups, send_one);
	struct shoal_group *g;
	int ret;

	if (p == NULL)
		return 1;
	prctl(PR_SET_TIMERSLACK, 1UL);   /* pacing: wake when asked */
	ret = shoal_group_attach(&g, &d, system, &err);
	if (ret < 0) {
		prod_fail(ret, "attach: %s (%s)", shoal_strerror(ret), err.msg);
		free(p);
		return 1;
	}
	p->ctx = shoal_group_worker(g, 0);
	/* Warm-up: one routed and one direct message per group, so that the
	 * dispatcher and the direct rings are attached (and prefaulted) before
	 * any sample. */
	for (uint32_t i = 0; i < groups && ret == 0; i++) {
		char name[32];
		uint64_t key = i;
		struct cmd c = { .path = ROUTED };

		snprintf(name, sizeof(name), "c%u", i);
		p->addr[i] = shoal_group_lookup(g, name, SHOAL_SLOT_GROUP);
		memcpy(p->buf, &key, 8);
		ret = send_one(p, &c, MSG_WORK, i, 16, false);
		c.path = DIRECT;
		if (ret == 0)
			ret = send_one(p, &c, MSG_WORK, i, 16, false);
		if (ret < 0)
			prod_fail(ret, "warm-up to %s: %s", name, shoal_strerror(ret));
	}
	if (ret == 0)
		ret = serve(p, seen);
	shoal_group_detach(g);
	free(p);
	return ret < 0 ? 1 : 0;
}

/* ---- the plain reference ------------------------------------------------------------- */

/*
 * What a program would write with Shoal's rings and doorbells and nothing
 * else, under Shoal's wake policy: one plain SPSC ring per consumer, of the
 * capacity of Shoal's direct rings; each consumer takes up to a Shoal
 * worker's batch before each release, then sleeps with
 * shoal_doorbell_idle_wait() at Shoal's spin budget. The producer moderates
 * its wake-ups (shoal_doorbell_wake_mod(), as a direct send does in
 * dout_ring()) and a waker makes the held ones by Shoal's default deadline,
 * as the dispatchers do (wake_held() in runtime/data/dispatch.c). A full
 * ring is waited for as Shoal's send does: ring the consumer, then
 * poll_wait on the ring's space doorbell, which the consumer rings after
 * each release. No envelope, no routing, no link table, no registry. A
 * Shoal worker also makes the wake-ups it holds when it goes idle
 * (shoal__wake_flush() in shoal_poll()); the benchmark's producer only
 * sends and never polls, so it never does, and neither does this one.
 */
#define PLAIN_RING_CAP SHOAL_ROUTER_DIRECT_CAPACITY_DEFAULT
#define PLAIN_DEADLINE_NS ((uint64_t)SHOAL_ROUTER_WAKE_DEADLINE_DEFAULT)
#define PLAIN_BATCH 32u                             /* a Shoal worker's POLL_BATCH */
/* How often a waiting sender and an idle consumer look again on their
 * own, as Shoal's (SLEEP_SLICE_NS, IDLE_SLICE_NS of runtime/data/). */
#define PLAIN_SEND_SLICE_NS INT64_C(100000000)
#define PLAIN_IDLE_SLICE_NS INT64_C(5000000000)

static void *plain_ring(uint32_t g)
{
	return map_ring(&psh->h, g);
}

struct plain_wait {
	struct shoal_ring_prod *r;
	uint32_t len;
};

/* A waiting send's predicate: room for its record, or a broken ring. */
static bool plain_room(void *arg)
{
	const struct plain_wait *w = arg;

	if (shoal_ring_reserve(w->r, w->len, 0) == NULL)
		return shoal_ring_prod_error(w->r) != 0;
	shoal_ring_cancel(w->r);
	return true;
}

/* The plain reference's send to consumer g: always blocking (`try` is
 * not measured); wake-ups moderated, or with SEND_WAKE_EACH a notify after
 * every message. */
static int plain_send(struct producer *p, const struct cmd *c, uint32_t type, uint32_t g,
		      uint32_t len, bool try)
{
	struct shoal_ring_prod *r = &p->out[g];
	struct plain_bells *b = &psh->c[g];
	struct plain_wait w = { r, len };
	void *dst;

	(void)try;
	while ((dst = shoal_ring_reserve(r, len, (uint16_t)type)) == NULL) {
		if (shoal_ring_prod_error(r))
			return -EUCLEAN;
		if (len > shoal_ring_max_payload(r))
			return -EMSGSIZE;
		/* Full: a consumer whose wake-up is held must come and drain. */
		shoal_doorbell_notify(&b->in_db);
		(void)shoal_doorbell_poll_wait(&b->space_db, SHOAL_DOORBELL_SPIN_NS_DEFAULT,
					       plain_room, &w, PLAIN_SEND_SLICE_NS);
	}
	memcpy(dst, p->buf, len);
	shoal_ring_commit(r);
	if (c->call == SEND_WAKE_EACH) {
		shoal_doorbell_notify(&b->in_db);
		return 0;
	}
	/* The fence the commit needs before a moderated wake-up (F2 of
	 * shm/doorbell.c); the first hold rings the waker. */
	shoal_doorbell_fence();
	switch (shoal_doorbell_wake_mod(&b->in_db, &p->mod, ++p->unann[g])) {
	case SHOAL_WAKE_DONE:
		p->unann[g] = 0;
		break;
	case SHOAL_WAKE_HELD_FIRST:
		shoal_doorbell_notify(&psh->waker);
		break;
	default:
		break;
	}
	return 0;
}

static int plain_producer_main(const char *system, uint32_t groups)
{
	uint64_t seen = shoal_load_relaxed(&sh->cmd_seq);
	struct producer *p = producer_new(groups, plain_send);
	/* Warm-up and leaving: every message rung at once. */
	struct cmd now = { .call = SEND_WAKE_EACH };
	int ret = 0;

	(void)system;
	if (p == NULL)
		return 1;
	shoal_wake_mod_init(&p->mod, PLAIN_DEADLINE_NS);
	/* Warm-up: one message per ring, then the end markers of "sample 0",
	 * which reset each consumer's order check. */
	for (uint32_t i = 0; i < groups && ret == 0; i++) {
		struct shoal_err err = { "" };
		uint64_t key = i;

		ret = shoal_ring_prod_attach(&p->out[i], plain_ring(i), psh->h.ring_len, &err);
		if (ret < 0) {
			prod_fail(ret, "plain ring %u: %s", i, err.msg);
			break;
		}
		memcpy(p->buf, &key, 8);
		ret = plain_send(p, &now, MSG_WORK, i, 16, false);
		if (ret < 0)
			prod_fail(ret, "warm-up to plain ring %u: %s", i, shoal_strerror(ret));
	}
	if (ret == 0)
		ret = send_ends(p, &now);
	if (ret == 0)
		ret = serve(p, seen);
	for (uint32_t i = 0; i < groups && ret == 0; i++)
		ret = plain_send(p, &now, MSG_QUIT, i, 8, false);
	free(p);
	return ret < 0 ? 1 : 0;
}

static bool plain_ready(void *arg)
{
	return !shoal_ring_empty(arg);
}

/* Consumer i: each ring carries keys i, i + G, i + 2G, ... in a sample, so
 * a message that is not the next key of its ring (lost before it,
 * duplicated, out of order, or another ring's) is counted as misrouted. */
static int plain_consumer_main(const char *system, uint32_t i)
{
	struct shoal_idle idle = { .spin_max_ns = SHOAL_DOORBELL_SPIN_NS_DEFAULT,
				   .spin_ns = SHOAL_DOORBELL_SPIN_NS_DEFAULT, .yield_ns = yield_ns };
	struct shoal_err err = { "" };
	struct shoal_ring_cons c;
	uint64_t next = i;

	(void)system;
	cons_index = i;
	if (shoal_ring_cons_attach(&c, plain_ring(i), psh->h.ring_len, &err) < 0) {
		fprintf(stderr, PROG ": plain consumer %u: %s\n", i, err.msg);
		return 1;
	}
	atomic_fetch_add_explicit(&sh->ready, 1, memory_order_relaxed);
	for (;;) {
		struct shoal_rec rec;
		uint32_t n = 0;

		while (n < PLAIN_BATCH && shoal_ring_peek(&c, &rec)) {
			uint64_t key = 0;

			n++;
			if (rec.tag == MSG_QUIT)
				return 0;
			if (rec.tag == MSG_END) {
				cons_end(rec.data, rec.len);
				next = i;
				continue;
			}
			if (rec.len >= 8)
				memcpy(&key, rec.data, 8);
			cons_work(key != next);
			next = key + psh->h.groups;
		}
		if (n > 0) {
			shoal_ring_release(&c);
			/* The producer may sleep waiting for the room just made. */
			shoal_doorbell_notify(&psh->c[i].space_db);
			continue;
		}
		if (shoal_ring_cons_error(&c)) {
			fprintf(stderr, PROG ": plain consumer %u: ring corrupted\n", i);
			return 1;
		}
		(void)shoal_doorbell_idle_wait(&psh->c[i].in_db, &idle, plain_ready, &c,
					       PLAIN_IDLE_SLICE_NS);
	}
}

/*
 * The plain reference's waker: what Shoal's dispatcher does for held
 * wake-ups (wake_held()), and nothing else. It makes every wake-up held
 * for 3/4 of the deadline, looks again no sooner than a quarter deadline
 * later, and sleeps until then on its own doorbell, which the producer
 * rings when it marks a first hold. With no uplink to drain it has no
 * reason to spin, so it does not.
 */
static void *plain_waker(void *arg)
{
	const int *cpu = arg;
	uint64_t age = PLAIN_DEADLINE_NS / 4 * 3;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);   /* the main thread takes the signals */
	(void)bench_pin(*cpu);                    /* checked: samples record its CPU */
	for (;;) {
		uint64_t now, next = UINT64_MAX;
		int64_t slice = PLAIN_IDLE_SLICE_NS;

		/* Announced first, so that a hold marked after the scan (or
		 * the stop) rings us (F1/F2 of shm/doorbell.c). */
		shoal_doorbell_prepare(&psh->waker);
		/* Relaxed: plain_release() rings the doorbell after it. */
		if (atomic_load_explicit(&psh->stop, memory_order_relaxed)) {
			shoal_doorbell_cancel(&psh->waker);
			return NULL;
		}
		now = shoal__now_ns();
		for (uint32_t g = 0; g < psh->h.groups; g++) {
			uint64_t due = shoal_doorbell_wake_due(&psh->c[g].in_db, now, age);

			next = due < next ? due : next;
		}
		if (next != UINT64_MAX) {
			next = next < now + PLAIN_DEADLINE_NS / 4 ? now + PLAIN_DEADLINE_NS / 4 : next;
			slice = (int64_t)(next - now);
		}
		(void)shoal_doorbell_wait(&psh->waker, slice);
	}
}

/*
 * The start of a system without a router (the plain reference, the plain
 * forwarder): s reset for `groups`, named PREFIX-PID-N, and a shared
 * mapping made before any child is forked, in *map: a header of `head`
 * bytes that begins with a struct map_head, filled, then `n_rings` rings
 * of `ring` bytes, each 128-byte aligned. Returns 0, or -errno with the
 * reason printed.
 */
static int sys_map(struct sys *s, const char *prefix, uint32_t groups, size_t head,
		   uint64_t ring, uint32_t n_rings, const int cpu[2], void **map)
{
	uint64_t off = (head + 127) & ~(uint64_t)127, ring_len = (ring + 127) & ~(uint64_t)127;
	size_t len = off + n_rings * ring_len;
	struct map_head *h;
	int ret;

	memset(s, 0, sizeof(*s));
	s->groups = groups;
	s->route = -1;
	s->cpu[0] = cpu[0];
	s->cpu[1] = cpu[1];
	snprintf(s->name, sizeof(s->name), "%s-%d-%u", prefix, (int)getpid(), ++sys_count);
	h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED) {
		ret = -errno;
		*map = NULL;
		fprintf(stderr, PROG ": %s: mapping %zu bytes: %s\n", s->name, len, strerror(-ret));
		return ret;
	}
	*h = (struct map_head){ .groups = groups, .ring_off = off, .ring_len = ring_len,
				.len = len };
	*map = h;
	return 0;
}

/* Start the thread of such a system that stands where the dispatcher does
 * (the plain reference's waker, the plain forwarder), named `name`: *on
 * once it runs, s->disp_tid once it is found. Returns 0 or -errno. */
static int sys_thread(struct sys *s, pthread_t *t, bool *on, void *(*fn)(void *), void *arg,
		      const char *name)
{
	int ret = -pthread_create(t, NULL, fn, arg);

	if (ret < 0)
		return ret;
	*on = true;
	pthread_setname_np(*t, name);
	s->disp_tid = find_thread(name);
	return s->disp_tid > 0 ? 0 : -ESRCH;
}

/*
 * The plain reference's shared mapping (rings initialised, doorbells
 * awake) and its waker, pinned where the dispatcher would be. Fills s as
 * router_up() does; on failure s is torn down.
 */
static int plain_up(struct sys *s, uint32_t groups, const int cpu[2])
{
	void *map;
	int ret = sys_map(s, "plain", groups, sizeof(struct plain_shm),
			  shoal_ring_size(PLAIN_RING_CAP), groups, cpu, &map);

	if (ret < 0)
		return ret;
	psh = s->plain = map;
	shoal_doorbell_init(&psh->waker);
	for (uint32_t g = 0; g < groups && ret == 0; g++) {
		shoal_doorbell_init(&psh->c[g].in_db);
		shoal_doorbell_init(&psh->c[g].space_db);
		ret = shoal_ring_init(plain_ring(g), psh->h.ring_len, PLAIN_RING_CAP, 0);
	}
	if (ret == 0)
		ret = sys_thread(s, &s->waker, &s->waker_on, plain_waker, &s->cpu[1],
				 "plain-waker");
	if (ret < 0) {
		fprintf(stderr, PROG ": setting up %s: %s\n", s->name, strerror(-ret));
		sys_down(s, false);
	}
	return ret;
}

/* Stop the waker and unmap (sys_down(), once the children are gone). */
static void plain_release(struct sys *s)
{
	if (s->waker_on) {
		/* Relaxed: the notify's fence orders it (F2). */
		atomic_store_explicit(&s->plain->stop, 1, memory_order_relaxed);
		shoal_doorbell_notify(&s->plain->waker);
		pthread_join(s->waker, NULL);
	}
	munmap(s->plain, s->plain->h.len);
	psh = NULL;
}

/* ---- the dispatcher alone: the filler ------------------------------------------------- */

/*
 * The filler, on the producer's CPU, feeds the dispatcher alone and stands
 * in for the G consumers that do not run: it drains their inbound rings, so
 * that the dispatcher writes into rings of the configured size that it has
 * written before, as in a running system (see sample_dispatch()). It reads
 * each message's key, as a consumer reads its message, so that the lines it
 * drains move to its CPU as a consumer's would. It answers the parent's
 * requests one by one: fill the held uplink (backlog), or stream.
 */
struct filler {
	/* Send message i (key i, the sample's size): 0, -EAGAIN when the
	 * uplink is full, or another negative errno. */
	int (*send)(struct filler *f, uint64_t i);
	/* Take the messages waiting in group g's inbound ring, about `max`
	 * at most (whole bursts). */
	void (*drain)(struct filler *f, uint32_t g, uint32_t max);
	uint32_t groups, size;
	uint32_t next;            /* the group drained next */
	uint64_t sink;            /* keys read, so that the reads are made */
	struct shoal_ctx *ctx;
	struct shoal_seg mbx[MAX_GROUPS];
	struct shoal_ring_cons in[MAX_GROUPS];
	struct plain_prod up;             /* the plain forwarder's */
	struct plain_cons out[MAX_GROUPS];
	unsigned char buf[MAX_SIZE];
};

/* Streaming: the filler drains the next inbound ring at every refusal and
 * after every this many messages, so that no ring fills even when the
 * uplink never refuses; at most FILL_DRAIN_MAX messages at a time, so that
 * it is soon back to keeping the uplink full. */
#define FILL_DRAIN_EVERY 64u
#define FILL_DRAIN_MAX (8u * PLAIN_BATCH)

static void filler_drain_next(struct filler *f)
{
	f->drain(f, f->next, FILL_DRAIN_MAX);
	f->next = f->next + 1 == f->groups ? 0 : f->next + 1;
}

/* Backlog, the dispatcher held: drain every inbound ring, then send until
 * the uplink refuses or `max` messages are in (sh->fill_count). */
static int filler_fill(struct filler *f, uint64_t *i, uint64_t max)
{
	int ret = 0;

	for (uint32_t g = 0; g < f->groups; g++)
		f->drain(f, g, UINT32_MAX);
	sh->fill_count = 0;
	while (sh->fill_count < max && (ret = f->send(f, *i)) == 0) {
		(*i)++;
		sh->fill_count++;
	}
	return ret == -EAGAIN ? 0 : ret;
}

/* Streaming: send `n` messages, one per call, a refused one retried at
 * once, so that the uplink never runs dry while the dispatcher works. */
static int filler_stream(struct filler *f, uint64_t *i, uint64_t n)
{
	uint64_t k = 0;
	int ret = 0;

	while (k < n && ret == 0) {
		ret = f->send(f, *i);
		if (ret == 0) {
			(*i)++;
			if (++k % FILL_DRAIN_EVERY == 0)
				filler_drain_next(f);
		} else if (ret == -EAGAIN) {
			filler_drain_next(f);
			ret = 0;
		}
	}
	sh->fill_count = k;
	return ret;
}

/* The warm-up, then the parent's requests until it says leave. Returns 0
 * or a negative errno (the reason in sh->pr). */
static int filler_run(struct filler *f)
{
	uint64_t i = 0, seen = 0;
	int ret = 0;

	/* Warm-up: two messages per group, so that the dispatcher attaches
	 * every inbound ring before anything is measured. */
	while (i < 2u * f->groups && ret == 0) {
		ret = f->send(f, i);
		if (ret == 0)
			i++;
		else if (ret == -EAGAIN)
			ret = 0;
	}
	atomic_store_explicit(&sh->fill_state, 1, memory_order_relaxed);
	while (ret == 0) {
		uint64_t req;

		/* A4: pairs with R4 in fill_request(): the request's parameters
		 * (and, for a fill, the hold) before its number. */
		while ((req = shoal_load_acquire(&sh->fill_req)) == seen &&
		       atomic_load_explicit(&sh->fill_go, memory_order_relaxed) != 2)
			msleep(1);
		if (req == seen)
			break;
		seen = req;
		ret = sh->fill_stream ? filler_stream(f, &i, sh->fill_max)
				      : filler_fill(f, &i, sh->fill_max);
		/* R5: pairs with A5 in fill_request(): fill_count before the answer. */
		shoal_store_release(&sh->fill_done, seen);
	}
	if (ret < 0)
		prod_fail(ret, "filler: %s", shoal_strerror(ret));
	return ret;
}

/* A filler pinned to the producer's CPU, its buffer filled; NULL with the
 * reason in sh->pr. */
static struct filler *filler_new(uint32_t groups, int (*send)(struct filler *, uint64_t),
				 void (*drain)(struct filler *, uint32_t, uint32_t))
{
	struct filler *f = calloc(1, sizeof(*f));

	if (f == NULL || bench_pin(sh->cpu_prod) < 0) {
		prod_fail(-ENOMEM, "pinning to CPU %d or allocating", sh->cpu_prod);
		free(f);
		return NULL;
	}
	f->send = send;
	f->drain = drain;
	f->groups = groups;
	f->size = sh->fill_size;
	memset(f->buf, 0x5a, sizeof(f->buf));
	return f;
}

static int shoal_fill_send(struct filler *f, uint64_t i)
{
	memcpy(f->buf, &i, 8);
	return shoal_try_send(f->ctx, MSG_WORK, f->buf, f->size);
}

static void shoal_fill_drain(struct filler *f, uint32_t g, uint32_t max)
{
	struct shoal_rec recs[PLAIN_BATCH];
	uint32_t taken = 0;
	unsigned n;

	while (taken < max && (n = shoal_ring_peek_burst(&f->in[g], recs, PLAIN_BATCH)) > 0) {
		taken += n;
		for (unsigned k = 0; k < n; k++) {
			uint64_t key = 0;

			if (recs[k].len >= sizeof(struct shoal_envelope) + 8)
				memcpy(&key, (const unsigned char *)recs[k].data +
				       sizeof(struct shoal_envelope), 8);
			f->sink += key;
		}
		shoal_ring_release(&f->in[g]);
	}
}

/* Attach, as its consumer, the inbound ring group c<g> gets from the
 * dispatcher (worker 0, dispatcher 0): no process of c<g> runs. */
static int inbound_open(struct filler *f, const char *system, uint32_t g)
{
	struct shoal_seg_tag tag = { .role = SHOAL__RING_DISPATCHED };
	char seg[SHOAL_SEG_NAME_MAX], group[32];
	struct shoal_err err = { "" };
	struct shoal_seg_region reg;
	void *mem;
	int ret;

	snprintf(group, sizeof(group), "c%u", g);
	ret = shoal__name_mailbox(seg, system, group);
	if (ret == 0)
		ret = shoal_seg_attach(&f->mbx[g], seg, 0, &err);
	if (ret == 0)
		ret = shoal_seg_find_tag(&f->mbx[g], SHOAL_SEG_KIND_RING, &tag, &reg);
	mem = ret == 0 ? shoal_seg_ptr(&f->mbx[g], reg.off, reg.len, 128) : NULL;
	if (ret == 0 && mem == NULL)
		ret = -EUCLEAN;
	if (ret == 0)
		ret = shoal_ring_cons_attach(&f->in[g], mem, reg.len, &err);
	return ret < 0 ? prod_fail(ret, "inbound ring of %s: %s (%s)", group, shoal_strerror(ret),
				   err.msg) : 0;
}

static int filler_main(const char *system, uint32_t groups)
{
	struct shoal_group_desc d = { .name = "producer", .types = types,
				      .n_types = COUNT(types), .node = -1,
				      .on_message = on_message };
	struct filler *f = filler_new(groups, shoal_fill_send, shoal_fill_drain);
	struct shoal_err err = { "" };
	struct shoal_group *g;
	int ret;

	if (f == NULL)
		return 1;
	ret = shoal_group_attach(&g, &d, system, &err);
	if (ret < 0) {
		prod_fail(ret, "attach: %s (%s)", shoal_strerror(ret), err.msg);
		free(f);
		return 1;
	}
	f->ctx = shoal_group_worker(g, 0);
	for (uint32_t k = 0; k < groups && ret == 0; k++)
		ret = inbound_open(f, system, k);
	if (ret == 0)
		ret = filler_run(f);
	for (uint32_t k = 0; k < groups; k++)
		if (f->mbx[k].base != NULL)
			shoal_seg_detach(&f->mbx[k]);
	shoal_group_detach(g);
	free(f);
	return ret < 0 ? 1 : 0;
}

/* ---- the plain forwarder: the dispatcher's limit ------------------------------------- */

/*
 * The limit of the dispatcher alone, measured beside it in the same runs
 * (path PLAIN in the dispatch and backlog sections): a thread of this
 * process, pinned where the dispatcher runs, reads one plain SPSC ring
 * (bench/plain_ring.h) that the filler writes, looks each message's
 * destination up in a table (type -> ring, as a flat filter vector maps a
 * message type to its route) and copies the message into that one of G
 * plain rings, which the filler drains. Its passes (bench/plain_fwd.h)
 * are shaped as the dispatcher's: up to PLAIN_FWD_PASS messages, each
 * output published once per pass and the input released once per pass, a
 * full output a dropped and counted copy (try_send); its loop here times
 * each pass by two clock reads and pauses on a hold flag for the backlog
 * cycles. Each ring has as many slots as fit in the router's default ring
 * size (a power of two).
 */
/* Idle past the spin budget, the forwarder looks again this often: it has
 * no doorbell, and a millisecond keeps its idle CPU time out of the
 * figures (a few wake-ups per sample). */
#define FWD_IDLE_SLEEP_NS 1000000L

/* The forwarder thread's own state, in this process only: the forwarder
 * (bench/plain_fwd.h), its CPU and the counters of its loop. */
struct fwd {
	struct plain_fwd f;
	int cpu;
	uint64_t messages, busy_ns;
};

static struct fwd fwd;

/* Slots per ring: the most, a power of two, that fit in the router's
 * default ring size. */
static uint32_t fwd_count(uint32_t slot)
{
	uint32_t n = 1;

	while ((uint64_t)n * 2 * slot <= SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT)
		n *= 2;
	return n;
}

/* Ring i of the mapping: 0 the input, 1 + g group g's output. */
static void *fwd_ring(uint32_t i)
{
	return map_ring(&fsh->h, i);
}

static void fwd_publish(const struct fwd *w)
{
	/* Relaxed: single-writer statistics, read as the dispatcher's are. */
	shoal_store_relaxed(&fsh->messages, w->messages);
	shoal_store_relaxed(&fsh->busy_ns, w->busy_ns);
	shoal_store_relaxed(&fsh->dropped, w->f.dropped);
	shoal_store_relaxed(&fsh->malformed, w->f.malformed);
}

/* The forwarder's loop: the dispatcher's, from its counters to its idle
 * spin budget; past the budget it naps instead of waiting on a doorbell. */
static void *fwd_main(void *arg)
{
	struct fwd *w = arg;
	uint64_t idle_since = 0, loops = 0;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);   /* the main thread takes the signals */
	(void)bench_pin(w->cpu);                  /* checked: samples record its CPU */
	/* Relaxed: fwd_release() joins the thread after setting it. */
	while (!shoal_load_relaxed(&fsh->stop)) {
		uint64_t t0 = shoal__now_ns();
		uint32_t moved = 0;

		/* Relaxed: a pause request, as the router's hold; the parent
		 * waits for the counters to settle after setting it. */
		if (!shoal_load_relaxed(&fsh->hold))
			moved = plain_fwd_pass(&w->f);
		if (moved > 0) {
			w->messages += moved;
			w->busy_ns += shoal__now_ns() - t0;
			idle_since = 0;
		}
		if ((++loops & 63) == 0 || moved == 0)
			fwd_publish(w);
		if (moved > 0)
			continue;
		idle_since = idle_since ? idle_since : t0;
		if (t0 - idle_since < SHOAL_DOORBELL_SPIN_NS_DEFAULT) {
			bench_relax();
		} else {
			struct timespec ts = { 0, FWD_IDLE_SLEEP_NS };

			nanosleep(&ts, NULL);
		}
	}
	fwd_publish(w);
	return NULL;
}

/*
 * The plain forwarder's mapping (rings initialised), its table, and its
 * thread pinned where the dispatcher would be. Fills s as router_up()
 * does; on failure s is torn down.
 */
static int fwd_up(struct sys *s, uint32_t groups, uint32_t size, const int cpu[2])
{
	uint32_t slot = plain_fwd_slot(size), count = fwd_count(slot);
	void *map;
	int ret = sys_map(s, "fwd", groups, sizeof(struct fwd_shm), plain_ring_size(slot, count),
			  groups + 1, cpu, &map);

	if (ret < 0)
		return ret;
	fsh = s->fwd = map;
	memset(&fwd, 0, sizeof(fwd));
	for (uint32_t i = 0; i <= groups && ret == 0; i++)
		ret = plain_ring_init(fwd_ring(i), fsh->h.ring_len, slot, count);
	if (ret == 0)
		ret = plain_cons_attach(&fwd.f.in, fwd_ring(0), fsh->h.ring_len);
	for (uint32_t g = 0; g < groups && ret == 0; g++) {
		ret = plain_prod_attach(&fwd.f.out[g], fwd_ring(1 + g), fsh->h.ring_len);
		fwd.f.table[g] = (uint16_t)g;
	}
	fwd.f.n_types = groups;
	fwd.f.max_len = slot - (uint32_t)sizeof(struct plain_fwd_hdr);
	fwd.cpu = cpu[1];
	if (ret == 0)
		ret = sys_thread(s, &s->fwd_thread, &s->fwd_on, fwd_main, &fwd, "plain-fwd");
	if (ret < 0) {
		fprintf(stderr, PROG ": setting up %s: %s\n", s->name, strerror(-ret));
		sys_down(s, false);
	}
	return ret;
}

/* Stop the forwarder and unmap (sys_down(), once the filler is gone). */
static void fwd_release(struct sys *s)
{
	if (s->fwd_on) {
		/* Relaxed: the join waits for the thread to see it. */
		shoal_store_relaxed(&s->fwd->stop, 1);
		pthread_join(s->fwd_thread, NULL);
	}
	munmap(s->fwd, s->fwd->h.len);
	fsh = NULL;
}

/* The filler's hooks for the plain forwarder: message i has type i % G. */
static int plain_fill_send(struct filler *f, uint64_t i)
{
	struct plain_fwd_hdr h = { (uint32_t)(i % f->groups), f->size };
	unsigned char *dst;

	if (plain_prod_room(&f->up, 1) == 0)
		return -EAGAIN;
	dst = plain_prod_slot(&f->up, 0);
	memcpy(f->buf, &i, 8);
	memcpy(dst, &h, sizeof(h));
	memcpy(dst + sizeof(h), f->buf, f->size);
	plain_prod_publish(&f->up, 1);
	return 0;
}

static void plain_fill_drain(struct filler *f, uint32_t g, uint32_t max)
{
	uint32_t taken = 0, n;

	while (taken < max && (n = plain_cons_avail(&f->out[g], PLAIN_BATCH)) > 0) {
		taken += n;
		for (uint32_t k = 0; k < n; k++) {
			uint64_t key;

			memcpy(&key, (const unsigned char *)plain_cons_slot(&f->out[g], k) +
			       sizeof(struct plain_fwd_hdr), 8);
			f->sink += key;
		}
		plain_cons_release(&f->out[g], n);
	}
}

static int plain_filler_main(const char *system, uint32_t groups)
{
	struct filler *f = filler_new(groups, plain_fill_send, plain_fill_drain);
	int ret;

	(void)system;
	if (f == NULL)
		return 1;
	ret = plain_prod_attach(&f->up, fwd_ring(0), fsh->h.ring_len);
	for (uint32_t g = 0; g < groups && ret == 0; g++)
		ret = plain_cons_attach(&f->out[g], fwd_ring(1 + g), fsh->h.ring_len);
	if (ret < 0)
		prod_fail(ret, "the plain forwarder's rings: bad geometry");
	if (ret == 0)
		ret = filler_run(f);
	free(f);
	return ret < 0 ? 1 : 0;
}

/* ---- placement probe and interference ------------------------------------------------ */

/* harness.c's probe between two processes pinned to the benchmark's CPUs:
 * the mean round trip of one cache line, in ns (0 if it failed). */
static double probe(const int cpu[2])
{
	static struct bench_params params;
	pid_t pid[2] = { 0, 0 };
	uint64_t deadline = shoal__now_ns() + MS(5000);

	memset(&sh->probe, 0, sizeof(sh->probe));
	fflush(stdout);
	fflush(stderr);
	for (int side = 0; side < 2; side++) {
		pid[side] = fork();
		if (pid[side] == 0) {
			struct bench_side bs = { .side = side, .p = &params,
						 .res = &sh->probe.res[side] };

			if (!child_init() || bench_pin(cpu[side]) < 0)
				_exit(1);
			bs.mem.ctl = &sh->probe;
			bench_side_ready(&bs);
			_exit(0);
		}
	}
	for (int side = 0; side < 2; side++) {
		int st;

		if (pid[side] <= 0)
			continue;
		while (waitpid(pid[side], &st, WNOHANG) == 0) {
			if (shoal__now_ns() > deadline || bench_stop_signal()) {
				kill(pid[0], SIGKILL);
				kill(pid[1], SIGKILL);
			}
			msleep(1);
		}
	}
	return sh->probe.res[0].probe_ns;
}

/*
 * CPU accounting around a sample. Interference is judged two ways, since
 * neither alone is right: the CPU time of every other task that exists at
 * either end (exact, but blind to tasks that start and end in between,
 * such as a build's compilers), and the machine's busy time from /proc/stat
 * minus the benchmark's own (sees everything, but counts in ticks and
 * over-counts a CPU that wakes up often, as the benchmark's do).
 */
struct snap {
	uint64_t t, ours;
	struct bench_cpustat machine;
	struct bench_schedstat prod, disp;
	struct taskset tasks;
};

static bool is_ours(const void *arg, pid_t pid)
{
	const struct sys *s = arg;

	if (pid == parent_pid || pid == s->prod)
		return true;
	for (uint32_t i = 0; i < s->groups; i++)
		if (s->cons[i] == pid)
			return true;
	return false;
}

static void snap_take(const struct sys *s, struct snap *n)
{
	struct bench_schedstat self, c;

	sstat_self(0, &self);
	n->ours = self.run;
	for (uint32_t i = 0; i < s->groups; i++)
		if (s->cons[i] > 0) {
			sstat_pid(s->cons[i], &c);
			n->ours += c.run;
		}
	memset(&n->prod, 0, sizeof(n->prod));
	if (s->prod > 0) {
		sstat_pid(s->prod, &n->prod);
		n->ours += n->prod.run;
	}
	memset(&n->disp, 0, sizeof(n->disp));
	if (s->disp_tid > 0)
		sstat_tid(s->disp_tid, &n->disp);
	tasks_take(&n->tasks, is_ours, s);
	bench_cpustat_read(&n->machine);
	n->t = shoal__now_ns();
}

/* Tick-based share of the machine others used, a lower bound: each CPU's
 * count may be off by a tick at either end of the window. */
static double foreign_ticks(const struct plan *pl, double busy, double ours, double wall)
{
	double slack = 2e9 / (double)sysconf(_SC_CLK_TCK) * (double)pl->ncpu;

	return busy > ours + slack ? (busy - ours - slack) / (wall * (double)pl->ncpu) : 0;
}

/*
 * Judge a sample: disturbed if other tasks used FOREIGN_DISTURBED of the
 * machine, or if tasks were created during it and the machine's busy time
 * says so; with `alone` (no consumer runs), also if the producer or the
 * dispatcher waited BENCH_WAITED_DISTURBED of the time for its CPU.
 */
static void snap_judge(const struct plan *pl, const struct snap *a, const struct snap *b,
		       bool alone, struct obs *o)
{
	double wall = (double)(b->t - a->t);
	uint64_t wp = b->prod.wait - a->prod.wait, wd = b->disp.wait - a->disp.wait;

	o->foreign = (double)tasks_delta(&a->tasks, &b->tasks) / (wall * (double)pl->ncpu);
	o->foreign_ticks = foreign_ticks(pl, (double)(b->machine.busy - a->machine.busy),
					 (double)(b->ours - a->ours), wall);
	o->forks = b->machine.forks - a->machine.forks;
	o->waited = (double)(wp > wd ? wp : wd) / wall;
	o->disturbed = o->foreign >= FOREIGN_DISTURBED ||
		       (o->forks > 0 && o->foreign_ticks >= FOREIGN_DISTURBED) ||
		       (alone && o->waited >= WAITED_DISTURBED);
}

/* ---- samples ----------------------------------------------------------------------- */

static uint32_t record_bytes(uint32_t size)
{
	/* Ring record header (8) + envelope + payload, 8-byte aligned. */
	return (8u + (uint32_t)sizeof(struct shoal_envelope) + size + 7u) & ~7u;
}

/* Pause (on) or resume the dispatcher, or the plain forwarder. */
static void disp_hold(struct sys *s, bool on)
{
	if (s->fwd != NULL)
		/* Relaxed: a pause request; backlog_cycles() waits for the
		 * counters to settle after it. */
		shoal_store_relaxed(&s->fwd->hold, on);
	else
		shoal_router_hold(s->r, on);
}

/* Ask the filler for a fill of the held uplink (at most `max` messages) or
 * a stream of `max`, and wait for its answer, looking every `ms`. */
static int fill_request(struct sys *s, struct watch *w, bool stream, uint64_t max, unsigned ms)
{
	/* Relaxed: this thread is the only writer. */
	uint64_t seq = shoal_load_relaxed(&sh->fill_req) + 1;
	int ret = 0;

	sh->fill_stream = stream;
	sh->fill_max = max;
	/* R4: pairs with A4 in filler_run(). */
	shoal_store_release(&sh->fill_req, seq);
	/* A5: pairs with R5 in filler_run(). */
	while (ret == 0 && shoal_load_acquire(&sh->fill_done) != seq)
		ret = watch_step(s, w, stream ? "the filler's stream" :
				 "the filler to fill the held uplink", ms);
	return ret;
}

/*
 * Backlog cycles: hold dispatch, let the filler drain the inbound rings and
 * fill its uplink, resume, and add up the dispatcher's busy time (its
 * counters: wall time of the passes that moved messages) until `calls`
 * messages have been drained. A 64-byte sample is 128 cycles, each a
 * hand-over through sleeps to the filler and back; on a loaded machine they
 * take far longer than the dispatcher's work, so the waits are watched for
 * progress (`w`), not timed as a whole.
 */
static int backlog_cycles(struct sys *s, struct watch *w, uint64_t calls, uint64_t *msgs,
			  uint64_t *busy)
{
	uint64_t d;
	int ret = 0;

	*msgs = *busy = 0;
	while (ret == 0 && *msgs < calls) {
		uint64_t m0, b0, m1, b1, m_prev;

		/* A pass that began before the hold may still run: let it end
		 * (held, the dispatcher publishes its counters on every idle
		 * pass) before the filler writes, so that no record of the fill
		 * is routed before m0 is read. */
		disp_hold(s, true);
		disp_counters(s, &m0, &b0, &d);
		do {
			m_prev = m0;
			ret = watch_step(s, w, "the held dispatcher to settle", 2);
			disp_counters(s, &m0, &b0, &d);
		} while (ret == 0 && m0 != m_prev);
		if (ret == 0)
			ret = fill_request(s, w, false, calls - *msgs, 1);
		if (ret == 0 && sh->fill_count == 0) {
			fprintf(stderr, PROG ": the filler found its uplink full at once (fill %"
				PRIu64 ")\n", shoal_load_relaxed(&sh->fill_req));
			sys_dump(s);
			ret = -EIO;
		}
		if (ret < 0)
			break;
		disp_hold(s, false);
		for (disp_counters(s, &m1, &b1, &d); ret == 0 && m1 < m0 + sh->fill_count;
		     disp_counters(s, &m1, &b1, &d))
			ret = watch_step(s, w, "the dispatcher to drain the backlog", 1);
		*msgs += m1 - m0;
		*busy += b1 - b0;
	}
	disp_hold(s, false);
	return ret;
}

/* Streaming: the filler sends `calls` messages while the dispatcher routes
 * them; the messages routed and the dispatcher's busy time meanwhile. */
static int stream_run(struct sys *s, struct watch *w, uint64_t calls, uint64_t *msgs,
		      uint64_t *busy)
{
	uint64_t m0, b0, m1, b1, d;
	int ret;

	disp_counters(s, &m0, &b0, &d);
	ret = fill_request(s, w, true, calls, 10);
	for (disp_counters(s, &m1, &b1, &d); ret == 0 && m1 < m0 + calls;
	     disp_counters(s, &m1, &b1, &d))
		ret = watch_step(s, w, "the dispatcher to route the stream", 10);
	*msgs = m1 - m0;
	*busy = b1 - b0;
	return ret;
}

/* Messages that write every inbound ring of a G-group system once:
 * G x the records one ring of the configured size holds (the plain
 * forwarder's: G x its slots). */
static uint64_t lap_messages(const struct point *pt)
{
	uint32_t rec = record_bytes(pt->size);

	if (pt->path == PLAIN)
		return (uint64_t)pt->groups * fwd_count(plain_fwd_slot(pt->size));
	return (uint64_t)pt->groups * ((SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT + rec - 1) / rec);
}

/*
 * The dispatcher alone: no consumer process runs; the filler (CPU A) feeds
 * the dispatcher (CPU B) and drains the G inbound rings, which have the
 * configured size (the router's default). Two phases:
 *  - the first lap: the messages that write every inbound ring once, from
 *    fresh rings. It pays the first write to each page, 5-20 us a page on
 *    this VM even after MADV_POPULATE_WRITE (the hypervisor maps it then):
 *    what a restarted group's fresh rings cost, reported on its own row as
 *    busy time per message (the dispatcher's counters).
 *  - the steady state: the sample's messages, into rings written before,
 *    as a running system's dispatcher pays. Stream (SEC_DISPATCH): the
 *    filler sends one message per try_send, a refused one retried at once,
 *    so that the uplink never runs dry; the dispatcher thread's CPU time
 *    (schedstat) per message. Backlog (SEC_BACKLOG): backlog_cycles(), busy
 *    time per message.
 * The plain forwarder (path PLAIN) is measured the same way, with the
 * same number of messages; its rings are plain rings.
 */
static int sample_dispatch(const struct plan *pl, const struct opts *op, struct point *pt,
			   struct obs *o)
{
	struct sys *s = &cur;
	bool backlog = pt->sec == SEC_BACKLOG;
	uint64_t calls = pl->mode->disp_bytes / record_bytes(pt->size), warm = 2u * pt->groups;
	uint64_t lap = lap_messages(pt), msgs = 0, busy = 0, m0, b, d0, d1 = 0;
	static struct snap a, z;   /* static: the task lists are reused */
	struct watch w;
	int ret;

	calls = calls < 1000 ? 1000 : calls;
	ret = pt->path == PLAIN ? fwd_up(s, pt->groups, pt->size, op->cpu)
				: router_up(s, pt->groups, pt->route, 0, op->cpu);
	if (ret < 0)
		return ret;
	s->alone = pt;
	s->alone_calls = lap + calls;
	sstat_tid(s->disp_tid, &s->alone_disp);
	atomic_store(&sh->fill_state, 0);
	atomic_store(&sh->fill_go, 0);
	atomic_store(&sh->fill_req, 0);
	atomic_store(&sh->fill_done, 0);
	sh->fill_size = pt->size;
	sh->groups = pt->groups;
	memset(&sh->pr, 0, sizeof(sh->pr));
	s->prod = spawn(pt->path == PLAIN ? plain_filler_main : filler_main, s->name, pt->groups);
	if (s->prod < 0) {
		ret = (int)s->prod;
		s->prod = 0;
		goto out;
	}
	watch_start(&w, s, CAP_NS);
	disp_counters(s, &m0, &b, &d0);
	while (ret == 0 && (atomic_load(&sh->fill_state) == 0 || m0 < warm)) {
		ret = watch_step(s, &w, "the filler's warm-up", 1);
		disp_counters(s, &m0, &b, &d0);
	}
	s->alone_m0 = m0;
	if (ret == 0)
		ret = backlog ? backlog_cycles(s, &w, lap, &msgs, &busy)
			      : stream_run(s, &w, lap, &msgs, &busy);
	if (ret < 0)
		goto out;
	o->lap_msgs = msgs;
	o->lap_ns = (double)busy / (double)msgs;
	o->probe_ns = probe(op->cpu);
	snap_take(s, &a);
	watch_start(&w, s, CAP_NS);
	ret = backlog ? backlog_cycles(s, &w, calls, &msgs, &busy)
		      : stream_run(s, &w, calls, &msgs, &busy);
	snap_take(s, &z);
	disp_counters(s, &m0, &b, &d1);
	if (ret < 0)
		goto out;
	o->calls = o->accepted = msgs;
	o->dropped = d1 - d0;
	o->disp_busy_ns = (double)busy / (double)msgs;
	o->disp_ns = backlog ? o->disp_busy_ns : (double)(z.disp.run - a.disp.run) / (double)msgs;
	/* Where the filler and the dispatcher are now (both pinned): a
	 * failed pin or a moved thread shows as another CPU. */
	o->cpu_prod = task_cpu(s->prod);
	o->cpu_disp = task_cpu(s->disp_tid);
	/* The dispatcher's own CPU time does not count preemption, but a
	 * preempted filler lets the uplink run dry and the dispatcher spin:
	 * foreign load still disturbs the sample. */
	snap_judge(pl, &a, &z, true, o);
	if (d1 != d0)
		fprintf(stderr, PROG ": warning: %" PRIu64 " copies dropped (an inbound ring "
			"full: the filler did not drain it in time)\n", d1 - d0);
out:
	sys_down(s, ret == 0);
	return ret;
}

/*
 * Start the children of a system whose router (or plain mapping) is up:
 * the producer, then the G consumers, and wait until each consumer has
 * handled `warm` warm-up messages. The producer attaches first and sends
 * its warm-up while no consumer runs, so that the router creates every
 * direct ring before the consumers start and the timed samples include no
 * ring creation.
 */
static int children_start(struct sys *s, int (*prod)(const char *, uint32_t),
			  int (*cons)(const char *, uint32_t), uint64_t warm)
{
	struct watch w;
	int ret = 0;

	memset(sh->cons, 0, sizeof(sh->cons));
	atomic_store(&sh->ready, 0);
	atomic_store(&sh->cmd_seq, 0);
	atomic_store(&sh->done_seq, 0);
	memset(&sh->pr, 0, sizeof(sh->pr));
	sh->groups = s->groups;
	watch_start(&w, s, CAP_NS);
	s->prod = spawn(prod, s->name, s->groups);
	if (s->prod < 0) {
		ret = (int)s->prod;
		s->prod = 0;
	}
	while (ret == 0 && atomic_load(&sh->ready) < 1)
		ret = watch_step(s, &w, "the producer's warm-up", 1);
	for (uint32_t i = 0; i < s->groups && ret == 0; i++) {
		s->cons[i] = spawn(cons, s->name, i);
		if (s->cons[i] < 0) {
			ret = (int)s->cons[i];
			s->cons[i] = 0;
		}
	}
	while (ret == 0 && atomic_load(&sh->ready) < s->groups + 1)
		ret = watch_step(s, &w, "the group processes to attach", 2);
	for (uint32_t i = 0; i < s->groups && ret == 0; i++)
		while (ret == 0 && shoal_load_relaxed(&sh->cons[i].received) < warm)
			ret = watch_step(s, &w, "the warm-up messages", 1);
	if (ret < 0)
		sys_down(s, false);
	return ret;
}

/* Start the system for the end-to-end samples: router, producer, then the
 * G consumers; the warm-up is one routed and one direct message per
 * consumer. */
static int sys_start(struct sys *s, const struct opts *op, uint32_t groups, int route)
{
	int ret = router_up(s, groups, route, 0, op->cpu);

	return ret < 0 ? ret : children_start(s, producer_main, consumer_main, 2);
}

/* Start the plain reference: its mapping and waker, the producer, then the
 * G consumers; the warm-up is one message per consumer. */
static int plain_start(struct sys *s, const struct opts *op, uint32_t groups)
{
	int ret = plain_up(s, groups, op->cpu);

	return ret < 0 ? ret : children_start(s, plain_producer_main, plain_consumer_main, 1);
}

/* Run one command on the producer and wait until every consumer has its
 * end marker, under a watch of `cap_ns`. */
static int sample_wait(struct sys *s, const struct cmd *c, uint64_t cap_ns)
{
	struct watch w;
	uint64_t seq;
	int ret = 0;

	watch_start(&w, s, cap_ns);
	sh->cmd = *c;
	seq = shoal_load_relaxed(&sh->cmd_seq) + 1;
	/* R3: pairs with A3 in producer_main(). */
	shoal_store_release(&sh->cmd_seq, seq);
	/* A2: pairs with R2 in producer_main(). */
	while (ret == 0 && shoal_load_acquire(&sh->done_seq) != seq)
		ret = watch_step(s, &w, "the producer", 1);
	if (ret == 0 && sh->pr.err != 0) {
		fprintf(stderr, PROG ": producer: %s\n", sh->pr.msg);
		return -EIO;
	}
	for (uint32_t i = 0; i < s->groups && ret == 0; i++)
		/* A1: pairs with R1 in on_message(). */
		while (ret == 0 && shoal_load_acquire(&sh->cons[i].end_id) != c->id)
			ret = watch_step(s, &w, "the consumers' end markers", 1);
	return ret;
}

static void cons_totals(const struct sys *s, uint64_t *received, uint64_t *misrouted)
{
	*received = *misrouted = 0;
	for (uint32_t i = 0; i < s->groups; i++) {
		/* Relaxed: read after A1 (sample_wait) or while idle. */
		*received += shoal_load_relaxed(&sh->cons[i].received);
		*misrouted += shoal_load_relaxed(&sh->cons[i].misrouted);
	}
}

static int sample_e2e(const struct plan *pl, const struct opts *op, struct point *pt,
		      struct obs *o)
{
	struct sys *s = &cur;
	struct cmd c = { .kind = pt->sec == SEC_LAT ? CMD_LAT : CMD_TPUT, .path = pt->path,
			 .call = pt->call, .size = pt->size, .id = ++s->next_id };
	uint64_t r0, r1, x0, x1, m0, m1, b0, b1, d0, d1, t_end = 0, cap;
	static struct snap a, z;   /* static: the task lists are reused */
	int ret;

	if (c.kind == CMD_LAT) {
		c.gap_ns = 1000000000u / op->rate;
		c.calls = pl->mode->lat_ns / c.gap_ns;
		cap = CAP_NS + pl->mode->lat_ns;
		for (uint32_t i = 0; i < s->groups; i++)
			memset(&sh->hist[i], 0, sizeof(sh->hist[i]));
	} else {
		c.calls = op->calls;
		cap = CAP_NS + c.calls * 50000u;   /* 50 us per call: --messages may be large */
	}
	shoal_store_relaxed(&sh->lat_on, c.kind == CMD_LAT);
	o->probe_ns = probe(op->cpu);
	cons_totals(s, &r0, &x0);
	disp_counters(s, &m0, &b0, &d0);
	snap_take(s, &a);
	ret = sample_wait(s, &c, cap);
	snap_take(s, &z);
	shoal_store_relaxed(&sh->lat_on, 0);
	if (ret < 0)
		return ret;
	/* The dispatcher publishes its counters when it idles: wait for them
	 * to count this sample's messages and end markers. */
	disp_counters(s, &m1, &b1, &d1);
	if (pt->path == ROUTED) {
		struct watch w;

		watch_start(&w, s, CAP_NS);
		while (ret == 0 && m1 < m0 + sh->pr.accepted + s->groups) {
			ret = watch_step(s, &w, "the dispatcher's counters", 1);
			disp_counters(s, &m1, &b1, &d1);
		}
		if (ret < 0)
			return ret;
	}
	cons_totals(s, &r1, &x1);
	for (uint32_t i = 0; i < s->groups; i++) {
		uint64_t t = shoal_load_relaxed(&sh->cons[i].end_ns);

		t_end = t > t_end ? t : t_end;
	}
	o->calls = sh->pr.calls;
	o->accepted = sh->pr.accepted;
	o->refused = sh->pr.refused;
	o->dropped = d1 - d0;
	o->delivered = r1 - r0;
	o->misrouted = x1 - x0;
	o->lost = o->accepted - o->dropped > o->delivered ? o->accepted - o->dropped - o->delivered
							  : 0;
	o->call_ns = (double)(sh->pr.t_sent - sh->pr.t_start) / (double)o->calls;
	o->call_cpu_ns = (double)sh->pr.cpu_ns / (double)o->calls;
	if (pt->path == ROUTED && m1 > m0) {
		o->disp_ns = (double)(z.disp.run - a.disp.run) / (double)(m1 - m0);
		o->disp_busy_ns = (double)(b1 - b0) / (double)(m1 - m0);
	}
	o->mps = (double)o->delivered * 1e9 / (double)(t_end - sh->pr.t_start);
	o->rate = (double)o->calls * 1e9 / (double)(sh->pr.t_sent - sh->pr.t_start);
	if (c.kind == CMD_LAT) {
		struct bench_hist *h = bench_hist_new();

		if (h == NULL)
			return -ENOMEM;
		for (uint32_t i = 0; i < s->groups; i++) {
			h->n += sh->hist[i].n;
			for (uint32_t k = 0; k < BENCH_HIST_BUCKETS; k++)
				h->count[k] += sh->hist[i].count[k];
		}
		bench_hist_pct(h, &o->lat);
		free(h);
	}
	o->cpu_prod = sh->pr.cpu;
	o->cpu_disp = task_cpu(s->disp_tid);
	snap_judge(pl, &a, &z, false, o);
	return 0;
}

/* CPU used by an idle system: router threads (all but the main thread)
 * and the group processes, over the mode's window. */
static int sample_idle(const struct plan *pl, const struct opts *op, struct point *pt,
		       struct obs *o)
{
	static struct snap a, z;   /* static: the task lists are reused */
	struct sys *s = &cur;
	struct bench_schedstat r0, r1, g0 = { 0 }, g1 = { 0 }, c;
	double wall;
	int ret = sys_start(s, op, pt->groups, SHOAL__ROUTE_INDEXED);

	if (ret < 0)
		return ret;
	/* No traffic from here: the producer leaves, and everything gets far
	 * past the spin budget before the window opens. */
	sh->cmd.kind = CMD_QUIT;
	/* R3: pairs with A3 in producer_main(). */
	shoal_store_release(&sh->cmd_seq, shoal_load_relaxed(&sh->cmd_seq) + 1);
	reap(s->prod, MS(5000));
	s->prod = 0;
	msleep(500);
	o->probe_ns = probe(op->cpu);
	msleep(100);
	snap_take(s, &a);
	sstat_self(parent_pid, &r0);
	for (uint32_t i = 0; i < s->groups; i++)
		if (s->cons[i] > 0) {
			sstat_pid(s->cons[i], &c);
			sstat_add(&g0, &c);
		}
	while (ret == 0 && shoal__now_ns() < a.t + pl->mode->idle_ns)
		ret = wait_step(s, UINT64_MAX, "the idle window", 50);
	sstat_self(parent_pid, &r1);
	for (uint32_t i = 0; i < s->groups; i++)
		if (s->cons[i] > 0) {
			sstat_pid(s->cons[i], &c);
			sstat_add(&g1, &c);
		}
	snap_take(s, &z);
	if (ret == 0) {
		/* The router's threads: all of this process but its main
		 * thread, which only measures (and sleeps). */
		wall = (double)(z.t - a.t);
		o->idle_router_pct = 100.0 * (double)(r1.run - r0.run) / wall;
		o->idle_groups_pct = 100.0 * (double)(g1.run - g0.run) / wall;
		o->idle_pct = o->idle_router_pct + o->idle_groups_pct;
		o->wakeups = (double)(r1.slices - r0.slices + g1.slices - g0.slices) * 1e9 / wall;
		snap_judge(pl, &a, &z, false, o);
		o->cpu_prod = o->cpu_disp = -1;
	}
	sys_down(s, ret == 0);
	return ret;
}

/* ---- the plan ------------------------------------------------------------------------- */

/* Add a point; sections left out by --only are skipped (and succeed). */
static bool plan_add(struct plan *pl, const struct opts *op, enum section sec, uint32_t groups,
		     uint32_t size, int route, enum path path, enum call call)
{
	struct point *pt;

	if (sec != SEC_IDLE && !op->sec_on[sec])
		return true;
	if (pl->n == pl->cap) {
		unsigned cap = pl->cap ? 2 * pl->cap : 64;
		struct point *n = realloc(pl->pts, cap * sizeof(*n));

		if (n == NULL)
			return false;
		pl->pts = n;
		pl->cap = cap;
	}
	pt = &pl->pts[pl->n++];
	*pt = (struct point){ .sec = sec, .groups = groups, .size = size, .route = route,
			      .path = path, .call = call };
	return true;
}

static int plan_build(struct plan *pl, const struct opts *op)
{
	for (unsigned gi = 0; gi < op->n_groups; gi++) {
		uint32_t g = op->groups[gi];

		if (op->idle) {
			if (!plan_add(pl, op, SEC_IDLE, g, 0, -1, DIRECT, SEND))
				return -ENOMEM;
			continue;
		}
		for (int m = 0; m < N_ROUTE; m++) {
			if (!op->route_on[m])
				continue;
			for (unsigned si = 0; si < op->n_sizes; si++)
				if (!plan_add(pl, op, SEC_DISPATCH, g, op->sizes[si], m, ROUTED, TRY_SEND) ||
				    !plan_add(pl, op, SEC_BACKLOG, g, op->sizes[si], m, ROUTED, TRY_SEND))
					return -ENOMEM;
		}
		/* The dispatcher's limit, whatever the route modes. */
		for (unsigned si = 0; si < op->n_sizes; si++)
			if (!plan_add(pl, op, SEC_DISPATCH, g, op->sizes[si], -1, PLAIN, TRY_SEND) ||
			    !plan_add(pl, op, SEC_BACKLOG, g, op->sizes[si], -1, PLAIN, TRY_SEND))
				return -ENOMEM;
		for (int m = 0; m < N_ROUTE; m++) {
			if (!op->route_on[m])
				continue;
			for (unsigned si = 0; si < op->n_sizes; si++)
				for (int cl = 0; cl < 2; cl++)
					if (!plan_add(pl, op, SEC_TPUT, g, op->sizes[si], m, ROUTED,
						      (enum call)cl))
						return -ENOMEM;
			if (!plan_add(pl, op, SEC_LAT, g, op->sizes[0], m, ROUTED, SEND))
				return -ENOMEM;
		}
		for (unsigned si = 0; si < op->n_sizes; si++)
			for (int cl = 0; cl < 2; cl++)
				if (!plan_add(pl, op, SEC_TPUT, g, op->sizes[si], -1, DIRECT,
					      (enum call)cl) ||
				    !plan_add(pl, op, SEC_TPUT, g, op->sizes[si], -1, PLAIN,
					      cl == 0 ? SEND : SEND_WAKE_EACH))
					return -ENOMEM;
		if (!plan_add(pl, op, SEC_LAT, g, op->sizes[0], -1, DIRECT, SEND))
			return -ENOMEM;
	}
	return 0;
}

/* ---- running it ----------------------------------------------------------------------- */

static const char *call_name(const struct point *pt)
{
	static const char *const name[] = { "send", "try_send", "send_wake_each" };

	return name[pt->call];
}

static const char *path_name(const struct point *pt)
{
	static const char *const name[] = { "routed", "direct", "plain" };

	return name[pt->path];
}

static const char *route_of(const struct point *pt)
{
	return pt->route >= 0 ? route_name[pt->route] : "-";
}

static void progress(const struct plan *pl, unsigned run, const struct point *pt,
		     const struct obs *o)
{
	fprintf(stderr, "[run %u/%u] G=%-3u ", run + 1, pl->runs, pt->groups);
	switch (pt->sec) {
	case SEC_DISPATCH:
	case SEC_BACKLOG:
		fprintf(stderr, "dispatch alone, %-7s %-9s %5u B: %7.1f ns/msg (first lap %.1f)",
			pt->sec == SEC_BACKLOG ? "backlog" : "stream",
			pt->path == PLAIN ? "plain-fwd" : route_of(pt), pt->size, o->disp_ns,
			o->lap_ns);
		break;
	case SEC_TPUT:
		fprintf(stderr, "%s %-8s %-7s %5u B: %7.1f ns/call (cpu %.1f), %9.0f msg/s",
			path_name(pt), call_name(pt), route_of(pt),
			pt->size, o->call_ns, o->call_cpu_ns, o->mps);
		if (pt->path == ROUTED)
			fprintf(stderr, ", dispatch %.1f ns/msg", o->disp_ns);
		if (o->refused || o->dropped)
			fprintf(stderr, ", refused %" PRIu64 " dropped %" PRIu64, o->refused,
				o->dropped);
		break;
	case SEC_LAT:
		fprintf(stderr, "latency %s %-7s %5u B at %.0f msg/s: p50 %.1f p99 %.1f p99.9 %.1f us",
			path_name(pt), route_of(pt), pt->size, o->rate,
			(double)o->lat.p50 / 1e3, (double)o->lat.p99 / 1e3,
			(double)o->lat.p999 / 1e3);
		break;
	case SEC_IDLE:
		fprintf(stderr, "idle: %.3f%% of one CPU (router %.3f%%, groups %.3f%%), %.0f wakeups/s",
			o->idle_pct, o->idle_router_pct, o->idle_groups_pct, o->wakeups);
		break;
	}
	fprintf(stderr, " (probe %.0f ns, others %.0f%%, ticks %.0f%%, %" PRIu64 " forks, waited "
		"%.1f%%%s)\n", o->probe_ns, 100 * o->foreign, 100 * o->foreign_ticks, o->forks,
		100 * o->waited, o->disturbed ? ", disturbed" : "");
	if (o->lost || o->misrouted)
		fprintf(stderr, PROG ": warning: %" PRIu64 " messages lost, %" PRIu64
			" misrouted\n", o->lost, o->misrouted);
}

/* One sample of a point, run again while disturbed and reruns are left. */
static int point_sample(struct plan *pl, const struct opts *op, struct point *pt, unsigned run)
{
	struct obs *o = &pt->obs[pt->n];

	for (unsigned attempt = 0;; attempt++) {
		int ret;

		memset(o, 0, sizeof(*o));
		switch (pt->sec) {
		case SEC_DISPATCH:
		case SEC_BACKLOG:
			ret = sample_dispatch(pl, op, pt, o);
			break;
		case SEC_IDLE:
			ret = sample_idle(pl, op, pt, o);
			break;
		default:
			ret = sample_e2e(pl, op, pt, o);
			break;
		}
		if (ret < 0)
			return ret;
		o->attempts = attempt + 1;
		progress(pl, run, pt, o);
		if (!o->disturbed || attempt == pl->mode->reruns)
			break;
		pl->reruns++;
	}
	pl->disturbed += o->disturbed;
	pt->n++;
	return 0;
}

/* The systems of a group count: one per route mode (0 .. N_ROUTE - 1),
 * then the plain reference. */
#define PLAIN_SYSTEM N_ROUTE

/* Where a dispatcher-alone point stands in a run's rotation: its route
 * mode, or PLAIN_SYSTEM for the plain forwarder. */
static int alone_slot(const struct point *pt)
{
	return pt->path == PLAIN ? PLAIN_SYSTEM : pt->route;
}

/* Does point pt run in system `sys` (a route mode or PLAIN_SYSTEM)? */
static bool runs_in(const struct point *pt, const struct opts *op, int sys)
{
	if (pt->sec != SEC_TPUT && pt->sec != SEC_LAT)
		return false;
	if (sys == PLAIN_SYSTEM || pt->path == PLAIN)
		return sys == PLAIN_SYSTEM && pt->path == PLAIN;
	return pt->route == sys || (sys == op->direct_route && pt->route < 0);
}

/* The points of one system (group count, route mode or the plain
 * reference) in this run's order. */
static int system_run(struct plan *pl, const struct opts *op, uint32_t groups, int sys,
		      unsigned run)
{
	struct point *mine[64];
	unsigned n = 0;
	int ret;

	for (unsigned i = 0; i < pl->n && n < COUNT(mine); i++) {
		struct point *pt = &pl->pts[i];

		if (pt->groups == groups && runs_in(pt, op, sys))
			mine[n++] = pt;
	}
	if (n == 0)
		return 0;
	if (sys == PLAIN_SYSTEM) {
		fprintf(stderr, "[run %u/%u] G=%-3u starting the plain reference and %u processes\n",
			run + 1, pl->runs, groups, groups + 1);
		ret = plain_start(&cur, op, groups);
	} else {
		fprintf(stderr, "[run %u/%u] G=%-3u starting router (%s) and %u group processes\n",
			run + 1, pl->runs, groups, route_name[sys], groups + 1);
		ret = sys_start(&cur, op, groups, sys);
	}
	for (unsigned k = 0; k < n && ret == 0; k++)
		ret = point_sample(pl, op, mine[(k + run) % n], run);
	sys_down(&cur, ret == 0);
	return ret;
}

static int plan_run(struct plan *pl, const struct opts *op)
{
	for (unsigned run = 0; run < pl->runs; run++)
		for (unsigned gi = 0; gi < op->n_groups; gi++) {
			uint32_t g = op->groups[gi];
			int ret = 0;

			/* The dispatcher alone (route modes and the plain
			 * forwarder), then end to end (route modes and the plain
			 * reference), each rotated by one every run. */
			for (int k = 0; k <= PLAIN_SYSTEM && ret == 0; k++)
				for (unsigned i = 0; i < pl->n && ret == 0; i++) {
					struct point *pt = &pl->pts[i];

					if (pt->groups == g && (pt->sec == SEC_DISPATCH ||
								pt->sec == SEC_BACKLOG ||
								pt->sec == SEC_IDLE) &&
					    (pt->sec == SEC_IDLE ? k == 0 :
					     alone_slot(pt) == (int)((k + run) % (PLAIN_SYSTEM + 1))))
						ret = point_sample(pl, op, pt, run);
				}
			for (int k = 0; k <= PLAIN_SYSTEM && ret == 0 && !op->idle; k++) {
				int m = (int)((k + run) % (PLAIN_SYSTEM + 1));

				if (m == PLAIN_SYSTEM || op->route_on[m])
					ret = system_run(pl, op, g, m, run);
			}
			if (ret < 0)
				return ret;
		}
	return 0;
}

/* ---- report ------------------------------------------------------------------------------ */

typedef double (*obs_get)(const struct obs *o);

static double get_call(const struct obs *o) { return o->call_ns; }
static double get_call_cpu(const struct obs *o) { return o->call_cpu_ns; }
static double get_disp(const struct obs *o) { return o->disp_ns; }
static double get_lap(const struct obs *o) { return o->lap_ns; }
static double get_mps(const struct obs *o) { return o->mps; }
static double get_probe(const struct obs *o) { return o->probe_ns; }
static double get_rate(const struct obs *o) { return o->rate; }
static double get_p50(const struct obs *o) { return (double)o->lat.p50 / 1e3; }
static double get_p99(const struct obs *o) { return (double)o->lat.p99 / 1e3; }
static double get_p999(const struct obs *o) { return (double)o->lat.p999 / 1e3; }
static double get_idle(const struct obs *o) { return o->idle_pct; }
static double get_idle_r(const struct obs *o) { return o->idle_router_pct; }
static double get_idle_g(const struct obs *o) { return o->idle_groups_pct; }
static double get_wake(const struct obs *o) { return o->wakeups; }
static double get_refused(const struct obs *o)
{
	return o->calls ? 100.0 * (double)o->refused / (double)o->calls : 0;
}

static const struct point *find(const struct plan *pl, enum section sec, uint32_t groups,
				uint32_t size, int route, enum path path, enum call call)
{
	for (unsigned i = 0; i < pl->n; i++) {
		const struct point *pt = &pl->pts[i];

		if (pt->sec == sec && pt->groups == groups && pt->size == size &&
		    pt->route == route && pt->path == path && pt->call == call && pt->n > 0)
			return pt;
	}
	return NULL;
}

/* Median, min, max of one observed value over the runs of a point (n >= 1). */
static struct bench_mmm point_mmm(const struct point *pt, obs_get get)
{
	double v[MAX_RUNS];

	for (unsigned r = 0; r < pt->n; r++)
		v[r] = get(&pt->obs[r]);
	return bench_mmm(v, pt->n);
}

/* "median [min, max]" of one observed value over the runs of a point, with
 * `prec` decimals. */
static const char *cell(char *buf, size_t len, const struct point *pt, obs_get get, int prec)
{
	if (pt == NULL || pt->n == 0)
		return "—";
	return bench_fmt_mmm(buf, len, point_mmm(pt, get), prec);
}

/* Run-by-run ratio a / b of two points (pairs of the same run). */
static bool ratio(const struct point *a, const struct point *b, obs_get get, struct bench_mmm *out)
{
	double v[MAX_RUNS];
	unsigned n = 0;

	if (a == NULL || b == NULL)
		return false;
	for (unsigned r = 0; r < a->n && r < b->n; r++)
		if (get(&b->obs[r]) > 0)
			v[n++] = get(&a->obs[r]) / get(&b->obs[r]);
	if (n == 0)
		return false;
	*out = bench_mmm(v, n);
	return true;
}

static const char *ratio_cell(char *buf, size_t len, const struct point *a,
			      const struct point *b, obs_get get)
{
	struct bench_mmm m;

	if (!ratio(a, b, get, &m))
		return "—";
	snprintf(buf, len, "%.2fx [%.2f, %.2f]", m.med, m.min, m.max);
	return buf;
}

/* Disturbed samples kept, out of all, for a row's points. */
static const char *dist_cell(char *buf, size_t len, const struct point *const *pts, unsigned n)
{
	unsigned d = 0, all = 0;

	for (unsigned i = 0; i < n; i++)
		for (unsigned r = 0; pts[i] != NULL && r < pts[i]->n; r++) {
			d += pts[i]->obs[r].disturbed;
			all++;
		}
	snprintf(buf, len, "%u/%u", d, all);
	return buf;
}

static const char *procs_cell(char *buf, size_t len, const struct plan *pl, uint32_t groups)
{
	snprintf(buf, len, "%u%s", groups + 2, groups + 2 > (uint32_t)pl->ncpu ? "*" : "");
	return buf;
}

static void pinning_held(const struct plan *pl, const struct opts *op, unsigned *prod,
			 unsigned *disp, unsigned *all)
{
	*prod = *disp = *all = 0;
	for (unsigned i = 0; i < pl->n; i++)
		for (unsigned r = 0; r < pl->pts[i].n; r++) {
			const struct obs *o = &pl->pts[i].obs[r];

			if (pl->pts[i].sec == SEC_IDLE)
				continue;
			(*all)++;
			*prod += o->cpu_prod == op->cpu[0];
			*disp += o->cpu_disp == op->cpu[1];
		}
}

static void report_header(FILE *f, const struct plan *pl, const struct opts *op)
{
	unsigned hp, hd, all;
	double probes[4096];
	unsigned np = 0;

	pinning_held(pl, op, &hp, &hd, &all);
	for (unsigned i = 0; i < pl->n; i++)
		for (unsigned r = 0; r < pl->pts[i].n && np < COUNT(probes); r++)
			if (pl->pts[i].obs[r].probe_ns > 0)
				probes[np++] = pl->pts[i].obs[r].probe_ns;
	fprintf(f, "## shoal-bench-system%s\n\n", op->idle ? ": idle system" : "");
	fprintf(f, "- command: `%s`\n", op->command);
	fprintf(f, "- mode: %s, %u runs, %.0f s; every point once per run, then the next run; "
		"route modes and the points of each system in an order rotated every run\n",
		pl->mode->name, pl->runs, (double)pl->wall_ns / 1e9);
	bench_md_machine(f);
	if (!op->idle)
		fprintf(f, "- pinning: producer on CPU %d (held in %u of %u samples), dispatcher "
			"(the plain reference: its waker; the plain forwarder) on CPU %d (held in %u "
			"of %u), consumers unpinned\n", op->cpu[0], hp, all, op->cpu[1], hd, all);
	if (!op->idle)
		fprintf(f, "- streamed copies (`--stream %s`, docs/design.md): on in %u of %u "
			"routers\n", bench_stream_name(stream_mode), stream_on, stream_routers);
	if (np > 0) {
		struct bench_mmm m = bench_mmm(probes, np);

		fprintf(f, "- placement probe (cache-line round trip CPU %d <-> CPU %d before every "
			"sample): median %.0f ns [%.0f, %.0f] over %u samples\n", op->cpu[0],
			op->cpu[1], m.med, m.min, m.max, np);
	}
	fprintf(f, "- interference: a sample is disturbed if tasks outside the benchmark used "
		"%.0f%% of the machine or more (their schedstat CPU time), or if tasks were "
		"created during it and /proc/stat's busy time says the same, or (dispatcher "
		"alone) if the producer or the dispatcher waited %.0f%% of the time for its CPU; "
		"disturbed samples are %s; %u disturbed samples kept, %u reruns; the hypervisor "
		"stole %.1f%% of the CPU time\n", 100 * FOREIGN_DISTURBED, 100 * WAITED_DISTURBED,
		pl->mode->reruns ? "run again at once, up to twice" : "kept (no reruns in this mode)",
		pl->disturbed, pl->reruns, 100 * pl->steal);
	if (!op->idle) {
		fprintf(f, "- processes: a sample with G groups has G + 2 threads that poll "
			"(producer, dispatcher, G consumers: each spins %u us, then looks %llu us "
			"yielding (`--router-yield`), before it sleeps) on "
			"%ld CPUs; `procs` marks with * where they outnumber the CPUs%s\n",
			SHOAL_DOORBELL_SPIN_NS_DEFAULT / 1000, (unsigned long long)(yield_ns / 1000),
			pl->ncpu,
			op->groups[0] + 2 > (uint32_t)pl->ncpu ?
			" (here: at every group count, so consumers share CPUs with the producer "
			"and the dispatcher)" : "");
	}
	fprintf(f, "\n");
}

static void report_dispatch(FILE *f, const struct plan *pl, const struct opts *op,
			    enum section sec)
{
	char a[64], b[64], c[64], d[64], e[64], g[64], h[64], p[64], q[64], r[64], t[64];

	if (sec == SEC_DISPATCH)
		fprintf(f, "### Dispatcher alone, streaming: CPU time per routed message\n\n"
			"The dispatcher thread's CPU time (/proc schedstat) per message in steady "
			"state: the producer (CPU %d) keeps its uplink full with try_send retries "
			"while the dispatcher (CPU %d) drains it, so every message's lines cross "
			"between the two CPUs while being written. ", op->cpu[0], op->cpu[1]);
	else
		fprintf(f, "### Dispatcher alone, from a backlog: busy time per routed message\n\n"
			"The router holds dispatch (shoal_router_hold), the producer (CPU %d) fills "
			"its uplink (256 KiB) until try_send refuses, the router resumes and the "
			"dispatcher (CPU %d) drains the backlog alone, the producer idle; repeated "
			"until the sample's messages are routed. Busy time from the dispatcher's "
			"counters (wall time of the passes that moved messages). ", op->cpu[0],
			op->cpu[1]);
	fprintf(f, "No consumer process runs: the producer drains the G inbound rings (%u KiB "
		"each, the router's default) as their consumers would, reading each message's "
		"key, so that the dispatcher writes into rings it has written before. `steady`: "
		"the sample's messages, after the first lap; `first lap`: before them, the "
		"messages that write every inbound ring once from fresh rings, which pay the "
		"first write to each page (busy time per message in both sections). Consumer i "
		"takes key %% G == i. `indexed` is Shoal's router (the filter vector and its "
		"index), `flat` scans the vector, `chain` calls one nested function per route "
		"(elfo's router before it was flattened). `plain fwd` is the limit, measured "
		"the same way in the same runs, between Shoal's: a plain forwarder thread on "
		"CPU %d reads one plain SPSC ring (bench/plain_ring.h) that the producer (CPU "
		"%d) writes one message at a time, looks each message's type up in a table of "
		"G rings (as a flat filter vector), copies it into that plain ring and "
		"publishes each ring once per pass of up to %u messages, as the dispatcher does; "
		"no envelope, matching, registry, RCU or wake-ups, so Shoal ÷ plain fwd is "
		"their cost. Ratios are per run, then median [min, max].\n\n"
		"| groups | size | phase | indexed ns/msg | indexed ÷ 1 group | flat ns/msg "
		"| chain ns/msg | plain fwd ns/msg | flat ÷ indexed | chain ÷ indexed "
		"| indexed ÷ plain fwd | flat ÷ plain fwd | probe ns | disturbed |\n"
		"|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
		SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT / 1024, op->cpu[1], op->cpu[0], PLAIN_FWD_PASS);
	for (unsigned si = 0; si < op->n_sizes; si++)
		for (unsigned gi = 0; gi < op->n_groups; gi++)
			for (int lap = 0; lap < 2; lap++) {
				uint32_t gr = op->groups[gi], sz = op->sizes[si];
				const struct point *pi = find(pl, sec, gr, sz, 0, ROUTED, TRY_SEND);
				const struct point *pf = find(pl, sec, gr, sz, 1, ROUTED, TRY_SEND);
				const struct point *pc = find(pl, sec, gr, sz, 2, ROUTED, TRY_SEND);
				const struct point *pp = find(pl, sec, gr, sz, -1, PLAIN, TRY_SEND);
				const struct point *p1 = find(pl, sec, 1, sz, 0, ROUTED, TRY_SEND);
				const struct point *all[4] = { pi, pf, pc, pp };
				obs_get get = lap ? get_lap : get_disp;

				if (pi == NULL && pf == NULL && pc == NULL && pp == NULL)
					continue;
				fprintf(f, "| %u | %u | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s "
					"| %s | %s |\n", gr, sz, lap ? "first lap" : "steady",
					cell(a, sizeof(a), pi, get, 1),
					ratio_cell(b, sizeof(b), pi, p1, get),
					cell(c, sizeof(c), pf, get, 1),
					cell(d, sizeof(d), pc, get, 1),
					cell(q, sizeof(q), pp, get, 1),
					ratio_cell(e, sizeof(e), pf, pi, get),
					ratio_cell(g, sizeof(g), pc, pi, get),
					ratio_cell(r, sizeof(r), pi, pp, get),
					ratio_cell(t, sizeof(t), pf, pp, get),
					cell(p, sizeof(p), pi ? pi : pf ? pf : pc ? pc : pp, get_probe, 0),
					dist_cell(h, sizeof(h), all, 4));
			}
	fprintf(f, "\n");
}

static void report_tput(FILE *f, const struct plan *pl, const struct opts *op)
{
	char a[64], a2[64], b[64], c[64], d[64], e[64], h[64], pr[16];

	fprintf(f, "### End to end: cost per call, dispatch, delivered rate\n\n"
		"One producer process (CPU %d) makes %" PRIu64 " calls per sample, round robin over "
		"G consumer groups (one process each). `sender ns/call`: the producer's wall time "
		"per call, refused try_sends included, so it includes the time consumers that "
		"share its CPU took from it; `sender CPU ns/call`: its own CPU time per call "
		"(spinning while send waits for room included); `dispatch CPU ns/msg`: the "
		"dispatcher thread's CPU time per routed message (idle spinning between messages "
		"included, preemption not; the busy wall time from its counters is in the CSV); "
		"`delivered msg/s`: messages handled by the consumers, from the first call to "
		"the last consumer's end marker; `refused`: try_send calls that returned -EAGAIN "
		"(routed try_send copies the dispatcher dropped for a full destination are in "
		"the CSV, `dropped`). `procs`: polling threads (* more than the %ld CPUs).\n\n"
		"`plain` is the plain reference, run in the same runs between Shoal's systems: "
		"the same producer (CPU %d), calls, sizes and round robin, into one plain SPSC "
		"ring (shoal/ring.h, %u KiB like a direct ring) per consumer process, consumers "
		"unpinned that spin %u us then sleep on a doorbell (shoal_doorbell_idle_wait), "
		"under Shoal's wake policy: wake-ups moderated (shoal_doorbell_wake_mod) and "
		"made by the deadline (%.0f ms) by a waker thread on CPU %d, where the "
		"dispatcher runs; a full ring waited for as send does. `send_wake_each`: the "
		"same with shoal_doorbell_notify() after every message. It has no envelope, "
		"routing, link table or registry: Shoal ÷ plain is their cost.\n\n"
		"| groups | size | path | call | route | sender ns/call | sender CPU ns/call | "
		"dispatch CPU ns/msg | delivered msg/s | refused %% | probe ns | procs | "
		"disturbed |\n"
		"|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", op->cpu[0],
		op->calls, pl->ncpu, op->cpu[0], PLAIN_RING_CAP / 1024,
		SHOAL_DOORBELL_SPIN_NS_DEFAULT / 1000, (double)PLAIN_DEADLINE_NS / 1e6, op->cpu[1]);
	/* Direct (k -1), routed in each route mode, then the plain reference. */
	for (unsigned gi = 0; gi < op->n_groups; gi++)
		for (unsigned si = 0; si < op->n_sizes; si++)
			for (int k = -1; k <= PLAIN_SYSTEM; k++)
				for (int cl = 0; cl < 2; cl++) {
					enum path path = k < 0 ? DIRECT : k == PLAIN_SYSTEM ? PLAIN : ROUTED;
					enum call call = path == PLAIN && cl == 1 ? SEND_WAKE_EACH :
						     (enum call)cl;
					const struct point *pt = find(pl, SEC_TPUT, op->groups[gi],
								      op->sizes[si],
								      path == ROUTED ? k : -1, path,
								      call);

					if (pt == NULL)
						continue;
					fprintf(f, "| %u | %u | %s | %s | %s | %s | %s | %s | %s | %s | "
						"%s | %s | %s |\n", pt->groups, pt->size,
						path_name(pt), call_name(pt),
						route_of(pt), cell(a, sizeof(a), pt, get_call, 1),
						cell(a2, sizeof(a2), pt, get_call_cpu, 1),
						path == ROUTED ? cell(b, sizeof(b), pt, get_disp, 1)
							       : "—",
						cell(c, sizeof(c), pt, get_mps, 0),
						cell(d, sizeof(d), pt, get_refused, 1),
						cell(e, sizeof(e), pt, get_probe, 0),
						procs_cell(pr, sizeof(pr), pl, pt->groups),
						dist_cell(h, sizeof(h), &pt, 1));
				}
	fprintf(f, "\n");
}

/* A kind of send as the pivot tables name it. */
struct send_kind {
	enum path path;
	enum call call;
	int route;
	const char *name;
};

/*
 * Medians, one column per send kind: the seed experiment at a glance, with
 * the plain reference beside it; then run-by-run ratios: routed send,
 * chain ÷ indexed, and Shoal ÷ plain (moderated wake-ups, as Shoal's).
 */
static void report_pivot(FILE *f, const struct plan *pl, const struct opts *op, obs_get get,
			 const char *title, int prec)
{
	static const struct send_kind col[] = {
		{ ROUTED, SEND, 0, "routed send" }, { ROUTED, TRY_SEND, 0, "routed try_send" },
		{ DIRECT, SEND, -1, "direct send" }, { DIRECT, TRY_SEND, -1, "direct try_send" },
		{ ROUTED, SEND, 1, "routed send (flat)" }, { ROUTED, SEND, 2, "routed send (chain)" },
		{ PLAIN, SEND, -1, "plain" }, { PLAIN, SEND_WAKE_EACH, -1, "plain, wake each" },
	};
	/* Numerators of the ratios; the first one's denominator is indexed
	 * routed send, the others' the plain reference. */
	static const struct send_kind num[] = {
		{ ROUTED, SEND, 2, "chain ÷ indexed (routed send)" },
		{ ROUTED, SEND, 0, "routed send ÷ plain" }, { DIRECT, SEND, -1, "direct send ÷ plain" },
		{ DIRECT, TRY_SEND, -1, "direct try_send ÷ plain" },
	};
	uint32_t sz = op->sizes[0];

	fprintf(f, "### %s, %u-byte messages (medians)\n\nRatios are taken run by run, then "
		"median [min, max]; `plain` is the plain reference of the same runs (see the "
		"end-to-end table).\n\n| groups | procs |", title, sz);
	for (size_t k = 0; k < COUNT(col); k++)
		fprintf(f, " %s |", col[k].name);
	for (size_t k = 0; k < COUNT(num); k++)
		fprintf(f, " %s |", num[k].name);
	fprintf(f, "\n|---:|---:|");
	for (size_t k = 0; k < COUNT(col) + COUNT(num); k++)
		fprintf(f, "---:|");
	fprintf(f, "\n");
	for (unsigned gi = 0; gi < op->n_groups; gi++) {
		uint32_t g = op->groups[gi];
		const struct point *ix = find(pl, SEC_TPUT, g, sz, 0, ROUTED, SEND);
		const struct point *plain = find(pl, SEC_TPUT, g, sz, -1, PLAIN, SEND);
		char pr[16], r[64];

		fprintf(f, "| %u | %s |", g, procs_cell(pr, sizeof(pr), pl, g));
		for (size_t k = 0; k < COUNT(col); k++) {
			const struct point *pt = find(pl, SEC_TPUT, g, sz, col[k].route, col[k].path,
						      col[k].call);

			if (pt == NULL)
				fprintf(f, " — |");
			else
				fprintf(f, " %.*f |", prec, point_mmm(pt, get).med);
		}
		for (size_t k = 0; k < COUNT(num); k++)
			fprintf(f, " %s |", ratio_cell(r, sizeof(r),
						       find(pl, SEC_TPUT, g, sz, num[k].route,
							    num[k].path, num[k].call),
						       k == 0 ? ix : plain, get));
		fprintf(f, "\n");
	}
	fprintf(f, "\n");
}

static void report_lat(FILE *f, const struct plan *pl, const struct opts *op)
{
	char a[64], b[64], c[64], d[64], e[64], h[64], pr[16];

	fprintf(f, "### Latency at a fixed offered load\n\n"
		"The producer sends %u-byte messages at %" PRIu64 " msg/s (open loop: message i is "
		"due at start + i / rate) with send / send_to for %.2f s; each consumer records "
		"now - envelope send_ns (CLOCK_MONOTONIC) in a histogram in shared memory; "
		"percentiles over all consumers of a sample, in microseconds, then median [min, max] "
		"over runs. At this rate a consumer gets a message every G x %.0f us, longer than "
		"the %u us spin budget, so most messages find it asleep: the figures include the "
		"wake-up.\n\n"
		"| groups | path | route | offered msg/s | p50 us | p99 us | p99.9 us | probe ns | "
		"procs | disturbed |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
		op->sizes[0], op->rate, (double)pl->mode->lat_ns / 1e9, 1e6 / (double)op->rate,
		SHOAL_DOORBELL_SPIN_NS_DEFAULT / 1000);
	for (unsigned gi = 0; gi < op->n_groups; gi++)
		for (int k = -1; k < N_ROUTE; k++) {
			enum path path = k < 0 ? DIRECT : ROUTED;
			const struct point *pt = find(pl, SEC_LAT, op->groups[gi], op->sizes[0], k,
						      path, SEND);

			if (pt == NULL)
				continue;
			fprintf(f, "| %u | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", pt->groups,
				path_name(pt), route_of(pt),
				cell(a, sizeof(a), pt, get_rate, 0),
				cell(b, sizeof(b), pt, get_p50, 1),
				cell(c, sizeof(c), pt, get_p99, 1),
				cell(d, sizeof(d), pt, get_p999, 1),
				cell(e, sizeof(e), pt, get_probe, 0),
				procs_cell(pr, sizeof(pr), pl, pt->groups), dist_cell(h, sizeof(h), &pt, 1));
		}
	fprintf(f, "\n");
}

static void report_idle(FILE *f, const struct plan *pl, const struct opts *op)
{
	char a[64], b[64], c[64], d[64], h[64];

	fprintf(f, "### Idle system: CPU used with no traffic\n\n"
		"Router (this process: its dispatcher and control threads) and G consumer group "
		"processes; one message per group first, then no traffic; the window opens 0.6 s "
		"later, far past the %u us spin budget, and lasts %.1f s. CPU time from "
		"/proc schedstat, as %% of one CPU; wake-ups: time slices the router's threads and "
		"the groups were given, per second.\n\n"
		"| groups | total %% of one CPU | router %% | groups %% | wake-ups/s | disturbed |\n"
		"|---:|---:|---:|---:|---:|---:|\n", SHOAL_DOORBELL_SPIN_NS_DEFAULT / 1000,
		(double)pl->mode->idle_ns / 1e9);
	for (unsigned gi = 0; gi < op->n_groups; gi++) {
		const struct point *pt = find(pl, SEC_IDLE, op->groups[gi], 0, -1, DIRECT, SEND);

		if (pt == NULL)
			continue;
		fprintf(f, "| %u | %s | %s | %s | %s | %s |\n", pt->groups,
			cell(a, sizeof(a), pt, get_idle, 3),
			cell(b, sizeof(b), pt, get_idle_r, 3),
			cell(c, sizeof(c), pt, get_idle_g, 3),
			cell(d, sizeof(d), pt, get_wake, 0), dist_cell(h, sizeof(h), &pt, 1));
	}
	fprintf(f, "\n");
}

/* Issue 12's targets for the dispatcher alone: its steady state at most
 * 1.5x the plain forwarder's, at 1 and at 100 groups (L1, L1b). */
static void report_limit(FILE *f, const struct plan *pl, const struct opts *op,
			 enum section sec, const char *tag, const char *how)
{
	static const uint32_t at[] = { 1, 100 };
	uint32_t sz = op->sizes[0];

	for (size_t k = 0; k < COUNT(at); k++) {
		const struct point *pi = find(pl, sec, at[k], sz, 0, ROUTED, TRY_SEND);
		const struct point *pp = find(pl, sec, at[k], sz, -1, PLAIN, TRY_SEND);
		struct bench_mmm m;

		fprintf(f, "| L1%s dispatch steady state, indexed ÷ plain forwarder, %u group%s "
			"(%u B, %s; producer CPU %d, dispatcher and forwarder CPU %d) | <= 1.5 | ",
			tag, at[k], at[k] == 1 ? "" : "s", sz, how, op->cpu[0], op->cpu[1]);
		if (ratio(pi, pp, get_disp, &m))
			fprintf(f, "%.3fx [%.3f, %.3f] | %s |\n", m.med, m.min, m.max,
				m.med <= 1.5 ? "MET" : "NOT MET");
		else
			fprintf(f, "not measured (needs %u groups, route mode indexed) | — |\n", at[k]);
	}
}

/* The targets this program measures; run-suite collects the `| T` rows. */
static void report_targets(FILE *f, const struct plan *pl, const struct opts *op)
{
	unsigned samples = 0;

	for (unsigned i = 0; i < pl->n; i++)
		samples += pl->pts[i].n;
	fprintf(f, "### Targets\n\n");
	bench_md_disturbed_warning(f, pl->disturbed, samples, "samples");
	fprintf(f, "| target | goal | measured: median [min, max] of per-run "
		"values | result |\n|---|---|---|---|\n");
	if (op->idle) {
		for (unsigned gi = 0; gi < op->n_groups; gi++) {
			const struct point *pt = find(pl, SEC_IDLE, op->groups[gi], 0, -1, DIRECT,
						      SEND);
			char a[64];

			if (pt == NULL)
				continue;
			fprintf(f, "| T4 idle system, router + %u groups: %% of one CPU | <= %.1f | "
				"%s | %s |\n", pt->groups, IDLE_TARGET_PCT,
				cell(a, sizeof(a), pt, get_idle, 3),
				point_mmm(pt, get_idle).med <= IDLE_TARGET_PCT ? "MET" : "NOT MET");
		}
	} else {
		for (int k = 0; k < 2; k++) {
			enum section sec = k == 0 ? SEC_DISPATCH : SEC_BACKLOG;
			const char *tag = k == 0 ? "" : "b", *how = k == 0 ? "streaming" : "backlog";
			uint32_t sz = op->sizes[0];
			const struct point *i1 = find(pl, sec, 1, sz, 0, ROUTED, TRY_SEND);
			const struct point *i100 = find(pl, sec, 100, sz, 0, ROUTED, TRY_SEND);
			const struct point *c100 = find(pl, sec, 100, sz, 2, ROUTED, TRY_SEND);
			struct bench_mmm m;

			if (ratio(i100, i1, get_disp, &m))
				fprintf(f, "| T1%s dispatch ns/msg, 100 groups ÷ 1 group (indexed, %u B, "
					"%s) | <= 1.5 | %.3fx [%.3f, %.3f] | %s |\n", tag, sz, how,
					m.med, m.min, m.max, m.med <= 1.5 ? "MET" : "NOT MET");
			else
				fprintf(f, "| T1%s dispatch ns/msg, 100 groups ÷ 1 group (%s) | <= 1.5 | "
					"not measured (needs groups 1 and 100, route mode indexed) | — "
					"|\n", tag, how);
			if (ratio(c100, i100, get_disp, &m))
				fprintf(f, "| T2%s dispatch ns/msg at 100 groups, nested chain ÷ "
					"indexed flat vector (%u B, %s) | >= 3.0 | %.3fx [%.3f, %.3f] | %s "
					"|\n", tag, sz, how, m.med, m.min, m.max,
					m.med >= 3.0 ? "MET" : "NOT MET");
			else
				fprintf(f, "| T2%s dispatch at 100 groups, chain ÷ indexed flat vector (%s) | "
					">= 3.0 | not measured (needs 100 groups, route modes indexed and "
					"chain) | — |\n", tag, how);
			report_limit(f, pl, op, sec, tag, how);
		}
	}
	fprintf(f, "\n");
}

static void report_md(FILE *f, const struct plan *pl, const struct opts *op)
{
	report_header(f, pl, op);
	if (op->idle) {
		report_idle(f, pl, op);
	} else {
		report_dispatch(f, pl, op, SEC_DISPATCH);
		report_dispatch(f, pl, op, SEC_BACKLOG);
		report_pivot(f, pl, op, get_call, "Sender cost per call (ns, wall time)", 1);
		report_pivot(f, pl, op, get_call_cpu, "Sender CPU time per call (ns)", 1);
		report_pivot(f, pl, op, get_mps, "Delivered messages per second", 0);
		report_tput(f, pl, op);
		report_lat(f, pl, op);
	}
	report_targets(f, pl, op);
}

static int report_csv(const char *path, const struct plan *pl)
{
	FILE *f = fopen(path, "we");

	if (f == NULL)
		return -errno;
	fprintf(f, "section,run,groups,size,path,call,route,calls,accepted,refused,dropped,"
		"delivered,lost,misrouted,sender_ns_per_call,sender_cpu_ns_per_call,"
		"dispatch_ns_per_msg,dispatch_busy_ns_per_msg,msgs_per_s,"
		"offered_per_s,p50_ns,p99_ns,p999_ns,idle_cpu_pct,idle_router_pct,"
		"idle_groups_pct,wakeups_per_s,probe_ns,waited,foreign,foreign_ticks,forks,"
		"disturbed,attempts,"
		"cpu_producer,cpu_dispatcher,procs,ncpu,first_lap_ns_per_msg,first_lap_msgs\n");
	for (unsigned i = 0; i < pl->n; i++) {
		const struct point *pt = &pl->pts[i];

		for (unsigned r = 0; r < pt->n; r++) {
			const struct obs *o = &pt->obs[r];

			fprintf(f, "%s,%u,%u,%u,%s,%s,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
				",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%" PRIu64
				",%" PRIu64 ",%" PRIu64 ",%.4f,%.4f,%.4f,%.1f,%.1f,%.4f,%.4f,%.4f,%" PRIu64 ",%d,%u,"
				"%d,%d,%u,%ld,%.2f,%" PRIu64 "\n", section_name[pt->sec], r + 1,
				pt->groups, pt->size,
				pt->sec == SEC_IDLE ? "-" : path_name(pt),
				pt->sec == SEC_TPUT || pt->sec == SEC_LAT ? call_name(pt) : "-",
				route_of(pt), o->calls, o->accepted, o->refused, o->dropped,
				o->delivered, o->lost, o->misrouted, o->call_ns, o->call_cpu_ns,
				o->disp_ns, o->disp_busy_ns, o->mps,
				o->rate, o->lat.p50, o->lat.p99, o->lat.p999, o->idle_pct,
				o->idle_router_pct, o->idle_groups_pct, o->wakeups, o->probe_ns,
				o->waited, o->foreign, o->foreign_ticks, o->forks, o->disturbed,
				o->attempts, o->cpu_prod,
				o->cpu_disp, pt->groups + (pt->sec == SEC_IDLE ? 1 : 2), pl->ncpu,
				o->lap_ns, o->lap_msgs);
		}
	}
	return fclose(f) == 0 ? 0 : -errno;
}

/* ---- options ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [options]\n"
		"\n"
		"The seed experiment across processes: one producer process, G consumer group\n"
		"processes (consumer i takes key %% G == i), a router in this process. Measures\n"
		"the dispatcher alone in three route modes beside a plain forwarder (its limit:\n"
		"plain SPSC rings and a table), in steady state and on its first lap over fresh\n"
		"rings, and end to end the sender's cost per call, the dispatcher's cost per\n"
		"message, the delivered rate, and latency at a fixed load, for send and\n"
		"try_send, routed and direct; beside them a plain reference (plain SPSC rings\n"
		"and doorbells under Shoal's wake policy) in the same runs. Markdown on stdout,\n"
		"progress on stderr. See bench/SUITE.md.\n"
		"\n"
		"  --full          (default) groups 1,2,5,10,20,30,50,75,100, 5 runs, reruns of\n"
		"                  disturbed samples (about 15 minutes on 2 CPUs)\n"
		"  --short         groups 1,10,100, 3 runs, shorter samples, no reruns\n"
		"  --smoke         groups 1,3, 1 run, tiny samples: checks that it all runs\n"
		"  --idle          measure instead the CPU an idle system uses (router + G groups)\n"
		"  --groups LIST   group counts, 1-%u (comma-separated)\n"
		"  --size LIST     payload sizes in bytes, %u-%u (default 64; latency uses the first)\n"
		"  --modes LIST    route modes for routed points: indexed,flat,chain (default all)\n"
		"  --only LIST     sections: dispatch,backlog,tput,lat (default all)\n"
		"  --runs N        repeat every point N times (1-%u)\n"
		"  --messages N    calls per throughput sample\n"
		"  --rate N        offered load of the latency samples, msg/s (default 10000)\n"
		"  --cpus A,B      producer on CPU A, dispatcher (and the plain reference's\n"
		"                  waker, the plain forwarder) on CPU B (default 0,1)\n"
		"  --router-yield US\n"
		"                  router.yield of the routers, and the plain reference's\n"
		"                  consumers' look after the spin, in microseconds (0 to\n"
		"                  1000000; default 0: none, docs/config.md)\n"
		"  --stream MODE   router.stream of the routers: auto (default: each router's\n"
		"                  line probe decides), on, off (docs/config.md)\n"
		"  --csv FILE      one CSV row per sample (every run)\n"
		"  --md FILE       the markdown report, also written to FILE\n"
		"  --help          this text\n"
		"\n"
		"Exit status: 0 done, 1 a sample failed, 2 bad usage, 77 fewer than two CPUs\n"
		"available, 128+n stopped by signal n.\n",
		MAX_GROUPS, MIN_SIZE, MAX_SIZE, MAX_RUNS);
}

static int parse_list(const char *arg, uint32_t *out, unsigned max, unsigned *n, uint32_t lo,
		      uint32_t hi)
{
	const char *s = arg;

	*n = 0;
	while (*s != '\0') {
		char *end;
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || v < lo || v > hi || *n == max || (*end != ',' && *end != '\0'))
			return -EINVAL;
		out[(*n)++] = (uint32_t)v;
		s = *end == ',' ? end + 1 : end;
	}
	return *n > 0 ? 0 : -EINVAL;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "full", no_argument, NULL, 'F' }, { "short", no_argument, NULL, 's' },
		{ "smoke", no_argument, NULL, 'S' }, { "idle", no_argument, NULL, 'I' },
		{ "groups", required_argument, NULL, 'g' }, { "size", required_argument, NULL, 'z' },
		{ "modes", required_argument, NULL, 'M' }, { "runs", required_argument, NULL, 'r' },
		{ "messages", required_argument, NULL, 'n' }, { "rate", required_argument, NULL, 'R' },
		{ "cpus", required_argument, NULL, 'c' }, { "csv", required_argument, NULL, 'C' },
		{ "md", required_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' },
		{ "only", required_argument, NULL, 'O' },
		{ "router-yield", required_argument, NULL, 'Y' },
		{ "stream", required_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 },
	};
	bool groups_set = false;
	int opt;

	memset(o, 0, sizeof(*o));
	o->mode = MODE_FULL;
	o->sizes[0] = 64;
	o->n_sizes = 1;
	o->rate = 10000;
	o->cpu[1] = 1;
	for (int m = 0; m < N_ROUTE; m++)
		o->route_on[m] = true;
	for (int k = 0; k < SEC_IDLE; k++)
		o->sec_on[k] = true;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		uint64_t v;

		switch (opt) {
		case 'F':
			o->mode = MODE_FULL;
			break;
		case 's':
			o->mode = MODE_SHORT;
			break;
		case 'S':
			o->mode = MODE_SMOKE;
			break;
		case 'I':
			o->idle = true;
			break;
		case 'g':
			if (parse_list(optarg, o->groups, MAX_LIST, &o->n_groups, 1, MAX_GROUPS) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			groups_set = true;
			break;
		case 'z':
			if (parse_list(optarg, o->sizes, MAX_SIZES, &o->n_sizes, MIN_SIZE, MAX_SIZE) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'M':
			if (bench_parse_names(optarg, route_name, N_ROUTE, o->route_on) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'r':
			if (bench_parse_uint(optarg, 1, MAX_RUNS, &v) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			o->runs = (unsigned)v;
			break;
		case 'n':
			if (bench_parse_uint(optarg, 100, 100000000, &o->calls) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'R':
			if (bench_parse_uint(optarg, 10, 10000000, &o->rate) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'c':
			/* Below CPU_SETSIZE: bench_pin() sets a cpu_set_t. */
			if (bench_parse_cpus(optarg, CPU_SETSIZE, o->cpu) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'O':
			if (bench_parse_names(optarg, section_name, SEC_IDLE, o->sec_on) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'T':
			if (bench_parse_stream(optarg, &stream_mode) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'Y':
			if (bench_parse_uint(optarg, 0, 1000000, &v) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			yield_ns = v * 1000;
			break;
		case 'C':
			o->csv = optarg;
			break;
		case 'm':
			o->md = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	if (optind != argc)
		return -EINVAL;
	if (!groups_set) {
		const struct mode_cfg *m = &modes[o->mode];

		o->n_groups = o->idle ? m->n_idle : m->n_groups;
		memcpy(o->groups, o->idle ? m->idle_groups : m->groups, o->n_groups * sizeof(uint32_t));
	}
	for (o->direct_route = 0; !o->route_on[o->direct_route]; o->direct_route++)
		;
	if (o->calls == 0)
		o->calls = modes[o->mode].tput_calls;
	if (o->runs == 0)
		o->runs = o->idle ? modes[o->mode].idle_runs : modes[o->mode].runs;
	bench_command_line(o->command, sizeof(o->command), argc, argv);
	return 0;
}

/* Remove what an earlier run killed with SIGKILL left in the shm directory:
 * the segments and socket of systems sbench-PID-N whose PID is gone. */
static void sweep_leftovers(void)
{
	char dir[256];
	struct dirent *e;
	DIR *d;

	if (shoal_seg_dir_path(dir, sizeof(dir)) < 0)
		return;
	d = opendir(dir);
	while (d != NULL && (e = readdir(d)) != NULL) {
		int pid;
		char path[512];

		if (sscanf(e->d_name, "shoal.sbench-%d-", &pid) != 1 || pid <= 0 ||
		    pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) == 0)
			fprintf(stderr, PROG ": removed %s, left by a killed run\n", path);
	}
	if (d != NULL)
		closedir(d);
}

/* The report needs the options too. */
struct outputs {
	const struct plan *pl;
	const struct opts *op;
};

static void write_md(FILE *f, const void *arg)
{
	const struct outputs *o = arg;

	report_md(f, o->pl, o->op);
}

static int write_csv(const char *path, const void *arg)
{
	return report_csv(path, ((const struct outputs *)arg)->pl);
}

int main(int argc, char **argv)
{
	static struct plan pl;
	struct opts op;
	struct bench_cpustat c0, c1;
	uint64_t t0;
	int ret;

	if (parse_opts(argc, argv, &op) < 0) {
		usage(stderr);
		return EXIT_USAGE;
	}
	pl.mode = &modes[op.mode];
	pl.runs = op.runs;
	pl.ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (!bench_cpus_usable(op.cpu)) {
		fprintf(stderr, PROG ": CPUs %d and %d are not both available\n", op.cpu[0],
			op.cpu[1]);
		return EXIT_SKIP;
	}
	for (unsigned i = 0; i < op.n_sizes; i++)
		types[0].max_size = op.sizes[i] > types[0].max_size ? op.sizes[i] : types[0].max_size;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		fprintf(stderr, PROG ": %s\n", strerror(errno));
		return EXIT_FAILURE;
	}
	sh->cpu_prod = op.cpu[0];
	parent_pid = getpid();
	signal(SIGPIPE, SIG_IGN);
	bench_signals_init();
	sweep_leftovers();
	ret = plan_build(&pl, &op);
	if (ret == 0) {
		fprintf(stderr, PROG ": %s mode, %u runs, %u points, CPUs %d,%d\n", pl.mode->name,
			pl.runs, pl.n, op.cpu[0], op.cpu[1]);
		bench_cpustat_read(&c0);
		t0 = shoal__now_ns();
		ret = plan_run(&pl, &op);
		bench_cpustat_read(&c1);
		pl.wall_ns = shoal__now_ns() - t0;
		pl.steal = (double)(c1.steal - c0.steal) / ((double)pl.wall_ns * (double)pl.ncpu);
	}
	/* On any failure or Ctrl-C: every child killed, the router destroyed. */
	sys_down(&cur, false);
	if (ret == 0)
		ret = bench_write_outputs(PROG, op.md, op.csv, write_md, write_csv,
					  &(struct outputs){ &pl, &op });
	free(pl.pts);
	if (bench_stop_signal()) {
		fprintf(stderr, PROG ": stopped by signal %d; processes killed, segments removed\n",
			bench_stop_signal());
		return 128 + bench_stop_signal();
	}
	return ret < 0 ? EXIT_FAILURE : 0;
}
