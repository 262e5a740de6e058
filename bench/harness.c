/* SPDX-License-Identifier: MIT */
/*
 * The harness: one Shoal segment for the whole benchmark, and for every
 * sample two forked processes pinned to two CPUs that meet at a barrier,
 * time a cache-line ping-pong (the placement probe) and run a contender's
 * roles.
 *
 * Why a probe with every sample: the VM moves its vCPUs between placements
 * whose cache-line round trip differs by about 3x (~150 ns vs ~480 ns), and
 * every cross-CPU number scales with it. The probe says which placement a
 * sample ran in, so that results (and ratios between contenders) can be read
 * against it.
 *
 * Why the parent never spins: there are only two CPUs and both are busy
 * with the sample; the parent blocks in waitpid(), woken by a child's exit,
 * a signal (Ctrl-C) or its watchdog alarm.
 *
 * Ordering guarantees (the control block):
 *   R1 (barrier arrival, fetch_add release) pairs with A1 (the other side's
 *      acquire load that sees the count reach the round): each side's setup
 *      (attached handles, filled buffers) happens before the other side
 *      starts. The parameters were written by the parent before fork().
 *   The probe line carries no data: relaxed, only its transfer is timed.
 * Progress: the barrier and the probe spin; a side that dies leaves its peer
 * spinning, and the parent kills the peer when it reaps the dead side.
 */
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/ring.h>
#include <shoal/router.h>

#include "bench/bench.h"
#include "bench/plain_ring.h"
#include "shm/probe.h"

#define REGION_CTL  "bench.ctl"
#define REGION_DB   "bench.db"
static const char *const region_ring[2] = { "bench.ring.ab", "bench.ring.ba" };
static const char *const region_rte[2] = { "bench.rte.ab", "bench.rte.ba" };
static const char *const region_plain[2] = { "bench.plain.ab", "bench.plain.ba" };
/* rte_ring memory: the slots plus its control block (384 bytes in 22.11). */
#define RTE_REGION_LEN (BENCH_BUF_BYTES + 4096u)
/* A plain ring: BENCH_BUF_BYTES of slots of any payload size, and its lines. */
#define PLAIN_REGION_LEN (sizeof(struct plain_ring) + BENCH_BUF_BYTES)

#define PROBE_WARMUP 1000u
#define PROBE_ROUNDS 10000u
#define PROBE_MAX_NS 50000000u          /* 50 ms */

const char *const bench_kind_name[BENCH_KINDS] = {
	[BENCH_TPUT] = "throughput",
	[BENCH_PINGPONG] = "ping-pong",
	[BENCH_WAKE] = "wake",
	[BENCH_SPIN] = "spin",
	[BENCH_SYSCALL] = "syscall",
};

static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t watchdog_fired;

/* ---- the segment ---- */

static void *region(const struct shoal_seg *seg, uint32_t kind, const char *name, uint64_t *len)
{
	struct shoal_seg_region r;

	if (shoal_seg_find(seg, kind, name, &r) < 0)
		return NULL;
	if (len != NULL)
		*len = r.len;
	return shoal_seg_ptr(seg, r.off, r.len, 128);
}

/* Fill m's pointers from a mapping of the segment (the creator's or an attacher's). */
static int mem_map(struct bench_mem *m)
{
	uint64_t ctl_len = 0, db_len = 0;

	m->ctl = region(&m->seg, SHOAL_SEG_KIND_USER, REGION_CTL, &ctl_len);
	m->db = region(&m->seg, SHOAL_SEG_KIND_DOORBELL, REGION_DB, &db_len);
	for (int i = 0; i < 2; i++) {
		m->ring[i] = region(&m->seg, SHOAL_SEG_KIND_RING, region_ring[i], &m->ring_len);
		m->rte[i] = region(&m->seg, SHOAL_SEG_KIND_USER, region_rte[i], &m->rte_len);
		m->plain[i] = region(&m->seg, SHOAL_SEG_KIND_USER, region_plain[i], &m->plain_len);
		if (m->ring[i] == NULL || m->rte[i] == NULL || m->plain[i] == NULL)
			return -ENOENT;
	}
	if (m->ctl == NULL || m->db == NULL || ctl_len < sizeof(*m->ctl) ||
	    db_len < sizeof(*m->db))
		return -ENOENT;
	return 0;
}

static int alloc_regions(struct shoal_seg *seg)
{
	uint64_t off, ring_len = shoal_ring_size(BENCH_BUF_BYTES);
	int ret;

	ret = shoal_seg_alloc(seg, SHOAL_SEG_KIND_USER, REGION_CTL, sizeof(struct bench_ctl), 128,
			      &off);
	if (ret == 0)
		ret = shoal_seg_alloc(seg, SHOAL_SEG_KIND_DOORBELL, REGION_DB,
				      sizeof(struct shoal_doorbell), 128, &off);
	for (int i = 0; i < 2 && ret == 0; i++) {
		ret = shoal_seg_alloc(seg, SHOAL_SEG_KIND_RING, region_ring[i], ring_len, 128, &off);
		if (ret == 0)
			ret = shoal_seg_alloc(seg, SHOAL_SEG_KIND_USER, region_rte[i],
					      RTE_REGION_LEN, 128, &off);
		if (ret == 0)
			ret = shoal_seg_alloc(seg, SHOAL_SEG_KIND_USER, region_plain[i],
					      PLAIN_REGION_LEN, 128, &off);
	}
	return ret;
}

int bench_seg_create(struct bench_mem *m, char *name, size_t name_len)
{
	struct shoal_err err = { "" };
	int ret;

	memset(m, 0, sizeof(*m));
	/* The pid and the clock make the name unique among concurrent runs. */
	snprintf(name, name_len, "shoal-bench-%d-%llx", (int)getpid(),
		 (unsigned long long)(shoal__now_ns() & 0xffffffffu));
	ret = shoal_seg_create(&m->seg, name, BENCH_SEG_SIZE, NULL, &err);
	if (ret < 0) {
		fprintf(stderr, "shoal-bench-ring: creating segment %s: %s (%s)\n", name,
			shoal_strerror(ret), err.msg);
		return ret;
	}
	ret = alloc_regions(&m->seg);
	if (ret == 0)
		ret = mem_map(m);
	if (ret < 0) {
		fprintf(stderr, "shoal-bench-ring: laying out segment %s: %s\n", name,
			shoal_strerror(ret));
		bench_seg_destroy(m);
	}
	return ret;
}

void bench_seg_destroy(struct bench_mem *m)
{
	if (m->seg.base == NULL)
		return;
	shoal_seg_unlink(m->seg.name);
	shoal_seg_detach(&m->seg);
	memset(m, 0, sizeof(*m));
}

/* ---- signals ---- */

static void on_signal(int sig)
{
	if (sig == SIGALRM)
		watchdog_fired = 1;
	else
		stop_signal = sig;
}

void bench_signals_init(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGALRM };
	/* No SA_RESTART: waitpid() must return EINTR so that the parent can
	 * kill the sample and unlink the segment. */
	struct sigaction sa = { .sa_handler = on_signal };

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

int bench_stop_signal(void)
{
	return stop_signal;
}

/* ---- one side ---- */

int bench_fail(struct bench_side *s, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->res->msg, sizeof(s->res->msg), fmt, ap);
	va_end(ap);
	s->res->err = err;
	return err;
}

uint64_t bench_cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

void bench_barrier(_Atomic uint32_t *arrived, uint32_t round)
{
	/* R1: pairs with A1 in the other side's bench_barrier(). Acq_rel: the
	 * arrival also acquires, in case this side is the second to come. */
	atomic_fetch_add_explicit(arrived, 1, memory_order_acq_rel);
	/* A1: pairs with R1 in the other side's bench_barrier(). */
	while (shoal_load_acquire(arrived) < 2 * round)
		bench_relax();
}

/*
 * The placement probe (shm/probe.h): side A pings, side B answers. Side A
 * stops after PROBE_ROUNDS timed round trips or PROBE_MAX_NS, whichever
 * comes first; the mean of them all is the sample's probe.
 */
double bench_probe(_Atomic uint64_t *line, int side)
{
	if (side == 0)
		return shoal__probe_ping(line, PROBE_WARMUP, PROBE_ROUNDS, PROBE_ROUNDS,
					 PROBE_MAX_NS);
	shoal__probe_pong(line);
	return 0;
}

void bench_side_ready(struct bench_side *s)
{
	double probe_ns;

	bench_barrier(&s->mem.ctl->arrived, 1);
	probe_ns = bench_probe(&s->mem.ctl->probe, s->side);
	if (s->side == 0)
		s->res->probe_ns = probe_ns;
	bench_barrier(&s->mem.ctl->arrived, 2);
	s->run_delay0 = bench_run_delay_ns();
	if (s->side == 0) {
		s->res->t_start = shoal__now_ns();
		s->deadline = s->res->t_start + s->p->duration_ns;
	}
}

struct bench_hist *bench_ping_start(struct bench_side *s, void *msg)
{
	struct bench_hist *h = bench_hist_new();

	if (h == NULL) {
		bench_fail(s, -ENOMEM, "no memory for the histogram");
		return NULL;
	}
	bench_msg_fill(msg, s->p->payload);
	bench_side_ready(s);
	return h;
}

int bench_ping_end(struct bench_side *s, struct bench_hist *h, uint64_t rounds, uint64_t t_end,
		   int ret)
{
	s->res->msgs = rounds;
	s->res->t_end = t_end;
	bench_hist_pct(h, &s->res->lat);
	free(h);
	return ret < 0 ? ret : 0;
}

int bench_pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : -errno;
}

int bench_child_init(int cpu)
{
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGALRM, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	return bench_pin(cpu);
}

static bool fd_in(int fd, const int *v, int n)
{
	for (int i = 0; i < n; i++)
		if (v[i] == fd)
			return true;
	return false;
}

/* Close every descriptor in fds once (a socket may be both tx and rx),
 * except `keep`. */
static void fds_close_except(const struct bench_fds *fds, const int keep[2])
{
	int all[4] = { fds->tx[0], fds->rx[0], fds->tx[1], fds->rx[1] };

	for (int i = 0; i < 4; i++)
		if (all[i] >= 0 && !fd_in(all[i], keep, 2) && !fd_in(all[i], all, i))
			close(all[i]);
}

/*
 * A child's setup: default signal actions (Ctrl-C kills it), die with the
 * parent, pin, attach the segment by name as an unrelated process would,
 * keep only this side's descriptors, and populate the page tables so that
 * no sample pays for first-touch faults.
 */
static int side_setup(struct bench_side *s, const struct bench_mem *parent,
		      const struct bench_fds *fds)
{
	struct shoal_err err = { "" };
	int keep[2] = { fds->tx[s->side], fds->rx[s->side] };
	int ret = bench_child_init(s->p->cpu[s->side]);

	fds_close_except(fds, keep);
	s->tx = keep[0];
	s->rx = keep[1];
	if (ret < 0)
		return bench_fail(s, ret, "pinning to CPU %d: %s", s->p->cpu[s->side],
				  strerror(-ret));
	s->res->cpu = sched_getcpu();
	ret = shoal_seg_attach(&s->mem.seg, parent->seg.name, 0, &err);
	if (ret < 0)
		return bench_fail(s, ret, "attaching %s: %s (%s)", parent->seg.name,
				  shoal_strerror(ret), err.msg);
	ret = mem_map(&s->mem);
	if (ret < 0)
		return bench_fail(s, ret, "regions missing from %s", parent->seg.name);
	/* Best effort: without MADV_POPULATE_WRITE (Linux < 5.14) the faults
	 * land in the probe and the first microseconds of the sample. */
	madvise(s->mem.seg.base, s->mem.seg.size, MADV_POPULATE_WRITE);
	return 0;
}

/*
 * A forked side. It reports through the parent's mapping (inherited), so
 * that even a failed attach is reported; the contender works on its own
 * attachment. Never returns.
 */
static __attribute__((noreturn)) void side_main(int side, const struct bench_mem *parent,
						const struct bench_contender *c,
						const struct bench_fds *fds)
{
	struct bench_side s = {
		.side = side,
		.p = &parent->ctl->params,
		.res = &parent->ctl->res[side],
	};
	int ret = side_setup(&s, parent, fds);

	if (ret == 0) {
		s.p = &s.mem.ctl->params;
		ret = c->role[s.p->kind][side](&s);
		s.res->waited_ns = bench_run_delay_ns() - s.run_delay0;
	}
	if (ret < 0 && s.res->err == 0)
		bench_fail(&s, ret, "%s", strerror(-ret));
	shoal_seg_detach(&s.mem.seg);
	_exit(ret < 0 ? 1 : 0);
}

/* ---- the parent ---- */

static void kill_live(const pid_t pid[2])
{
	for (int i = 0; i < 2; i++)
		if (pid[i] > 0)
			kill(pid[i], SIGKILL);
}

/* Reap both sides. The first one to fail (or *extra to exit, or a signal,
 * or the watchdog) gets the other killed. Returns 0 or the first failure. */
static int reap(pid_t pid[2], uint64_t duration_ns, pid_t *extra)
{
	unsigned watchdog_s = (unsigned)(duration_ns / 1000000000u) * 4 + 30;
	int ret = 0;

	watchdog_fired = 0;
	alarm(watchdog_s);
	while (pid[0] > 0 || pid[1] > 0) {
		int st;
		pid_t w = waitpid(-1, &st, 0);

		if (w < 0 && errno == EINTR) {
			ret = ret ? ret : (watchdog_fired ? -ETIMEDOUT : -EINTR);
			kill_live(pid);
			continue;
		}
		if (w < 0) {
			ret = ret ? ret : -errno;
			break;
		}
		for (int i = 0; i < 2; i++)
			if (pid[i] == w)
				pid[i] = 0;
		if (extra != NULL && *extra > 0 && w == *extra) {
			/* The sides' server died under them: they cannot finish. */
			*extra = 0;
			ret = ret ? ret : -ECHILD;
			kill_live(pid);
			continue;
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			ret = ret ? ret : -ECHILD;
			kill_live(pid);
		}
	}
	alarm(0);
	return ret;
}

static void report_failure(const struct bench_contender *c, const struct bench_params *p,
			   const struct bench_result res[2], int ret)
{
	fprintf(stderr, "shoal-bench-ring: %s sample of %s (%u B, batch %u) failed: %s\n",
		bench_kind_name[p->kind], c->name, p->payload, p->batch,
		ret == -ETIMEDOUT ? "watchdog expired" : ret == -EINTR ? "interrupted" :
		"a side failed");
	for (int i = 0; i < 2; i++)
		if (res[i].msg[0] != '\0')
			fprintf(stderr, "  side %c: %s\n", 'A' + i, res[i].msg);
}

static void fds_close(struct bench_fds *fds)
{
	static const int none[2] = { -1, -1 };

	fds_close_except(fds, none);
	for (int i = 0; i < 2; i++)
		fds->tx[i] = fds->rx[i] = -1;
}

int bench_pair_run(bench_child_fn child, void *arg, uint64_t duration_ns, pid_t *extra)
{
	pid_t pid[2] = { 0, 0 };
	int ret = 0;

	for (int i = 0; i < 2 && ret == 0; i++) {
		pid[i] = fork();
		if (pid[i] == 0)
			child(i, arg);
		if (pid[i] < 0) {
			ret = -errno;
			pid[i] = 0;
			kill_live(pid);
		}
	}
	if (pid[0] > 0 || pid[1] > 0) {
		int reaped = reap(pid, duration_ns, extra);

		ret = ret < 0 ? ret : reaped;
	}
	return ret;
}

/* What side_entry() needs: bench_sample_run()'s arguments. */
struct side_args {
	const struct bench_mem *m;
	const struct bench_contender *c;
	const struct bench_fds *fds;
};

static void side_entry(int side, void *arg)
{
	const struct side_args *a = arg;

	side_main(side, a->m, a->c, a->fds);
}

int bench_sample_run(const struct bench_mem *m, const struct bench_contender *c,
		     const struct bench_params *p, struct bench_result out[2])
{
	struct bench_fds fds = { { -1, -1 }, { -1, -1 } };
	struct side_args args = { m, c, &fds };
	int ret;

	/* No side is alive: plain writes, published to the children by fork(). */
	memset(m->ctl, 0, sizeof(*m->ctl));
	m->ctl->params = *p;
	ret = c->prepare(m, p, &fds);
	if (ret < 0) {
		fprintf(stderr, "shoal-bench-ring: preparing %s: %s\n", c->name, strerror(-ret));
		return ret;
	}
	ret = bench_pair_run(side_entry, &args, p->duration_ns, NULL);
	fds_close(&fds);
	memcpy(out, m->ctl->res, 2 * sizeof(out[0]));
	/* After Ctrl-C the sides die of the signal: not a failure to report. */
	if (ret < 0 && stop_signal)
		return -EINTR;
	if (ret < 0)
		report_failure(c, p, out, ret);
	return ret;
}

bool bench_cpus_usable(const int cpu[2])
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return false;
	return CPU_ISSET(cpu[0], &set) && CPU_ISSET(cpu[1], &set);
}

int bench_parse_cpus(const char *arg, int limit, int cpu[2])
{
	char *end;
	long a = strtol(arg, &end, 10), b;

	if (end == arg || *end != ',')
		return -EINVAL;
	arg = end + 1;
	b = strtol(arg, &end, 10);
	if (end == arg || *end != '\0' || a < 0 || b < 0 || a >= limit || b >= limit || a == b)
		return -EINVAL;
	cpu[0] = (int)a;
	cpu[1] = (int)b;
	return 0;
}

/* In SHOAL_STREAM_* order. */
static const char *const stream_words[] = { "auto", "on", "off" };
static_assert(SHOAL_STREAM_AUTO == 0 && SHOAL_STREAM_ON == 1 && SHOAL_STREAM_OFF == 2,
	      "stream_words[] in SHOAL_STREAM_* order");

int bench_parse_stream(const char *arg, int *mode)
{
	for (int i = 0; i < 3; i++)
		if (strcmp(arg, stream_words[i]) == 0) {
			*mode = i;
			return 0;
		}
	return -EINVAL;
}

const char *bench_stream_name(int mode)
{
	return mode >= 0 && mode < 3 ? stream_words[mode] : "?";
}

int bench_parse_uint(const char *arg, uint64_t min, uint64_t max, uint64_t *v)
{
	char *end;
	unsigned long long x;

	if (*arg < '0' || *arg > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(arg, &end, 10);
	if (errno != 0 || *end != '\0' || x < min || x > max)
		return -EINVAL;
	*v = x;
	return 0;
}

int bench_parse_names(const char *arg, const char *const *names, unsigned n, bool *on)
{
	char buf[128], *save = NULL;
	bool any = false;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (unsigned i = 0; i < n; i++)
		on[i] = false;
	for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		unsigned i;

		for (i = 0; i < n && strcmp(t, names[i]) != 0; i++)
			;
		if (i == n)
			return -EINVAL;
		on[i] = any = true;
	}
	return any ? 0 : -EINVAL;
}

int bench_bad_option(const char *prog, const struct option *longopts, int opt, const char *arg)
{
	const char *name = "?";

	for (const struct option *o = longopts; o->name != NULL; o++)
		if (o->val == opt)
			name = o->name;
	fprintf(stderr, "%s: --%s: '%s' is not a valid value (see --help)\n", prog, name,
		arg ? arg : "");
	return 2;
}

void bench_command_line(char *buf, size_t len, int argc, char **argv)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < argc && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", argv[i]);
}
