/* SPDX-License-Identifier: MIT */
/*
 * shoal-bench-net: across hosts, the transport's limit. UCX alone (a
 * minimal UCP program, net_ucx.c: one message per active message, and
 * messages packed into frames, the batched limit), the plain relays (the
 * direct path's shape with nothing of Shoal: a side and a relay process per
 * host, plain rings between them, UCP frames between the relays; and the
 * routed path's, a plain forwarder more per host; net_relay.c) and ZeroMQ
 * (net_zmq.c) between two "hosts", measured in one run with interleaved
 * samples beside Shoal's bridge end to end (net_bridge.c) and its link
 * layer alone (net_link.c): the contender table below.
 *
 * The hosts: two network namespaces joined by a veth pair, which the
 * benchmark makes itself (it needs root) and which vanish with it. Each
 * namespace is made by a short-lived holder process (unshare()); the
 * benchmark keeps a descriptor of each, creates the veth pair with its two
 * ends already inside them (`ip link add ... netns PID type veth peer ...
 * netns PID`), so that no end ever exists in the machine's own namespace,
 * and addresses them with link-local 169.254.77.1 and .2. A side enters
 * its host with setns(), with a sysfs of its own (net_enter_host()). On exit
 * (normal, error, or a signal) the pair is deleted and the descriptors
 * closed; if the benchmark is killed with SIGKILL, nothing holds the
 * namespaces any more (the sides die with it, PR_SET_PDEATHSIG) and the
 * kernel removes them and the pair.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/net_bench.h"
#include "bench/procstat.h"
#include "bench/report.h"

#define PROG "shoal-bench-net"
#define EXIT_SKIP 77
/* A sample whose sides waited this share of its time is disturbed. */
#define DISTURBED 0.02
/* Each sample listens on a new port (no TIME_WAIT from the last one). */
#define PORT_BASE 20000u
#define PORT_SPAN 20000u

/*
 * The contenders, in the order of the report. Shoal's whole bridge
 * (net_bridge.c: a system on each host) and its link layer alone
 * (net_link.c) are built when the bridge is (UCX found). Every figure is
 * printed against NET_LIMIT, against the plain reference of its shape
 * (RELAY_REF, or the row's shape_ref) and beside the other rows of the
 * same run.
 */
static const struct net_contender *const contenders[] = {
#ifdef SHOAL_BENCH_LINK
	&net_bridge,
	&net_bridge_direct,
#endif
	&net_plain_relay,
	&net_plain_relay_routed,
#ifdef SHOAL_BENCH_LINK
	&net_link,
#endif
	&net_ucx_batched,
	&net_ucx,
	&net_zmq,
};
#define N_CONTENDERS (sizeof(contenders) / sizeof(contenders[0]))

/* The round trip's reference: UCX, one message each way. */
#define RTT_REF "ucx"
/* The reference of a row's shape where it names none (shape_ref): the
 * plain relay, the direct path's shape. */
#define RELAY_REF "plain-relay"

static const uint32_t payloads[] = { 64, 1024 };
#define N_PAYLOADS (sizeof(payloads) / sizeof(payloads[0]))
#define N_CASES (NET_KINDS * N_PAYLOADS)

static const char *const kind_name[NET_KINDS] = { [NET_TPUT] = "tput", [NET_RTT] = "rtt" };

/* One sample kept: what the report needs of it. */
struct obs {
	bool ok;
	double rate;              /* messages (round trips) per second */
	double mbps;              /* payload megabytes per second */
	double p50, p99, p999;    /* ns, ping-pong */
	double probe;             /* ns */
	bool disturbed;
	bool pinned;              /* both sides ran on their CPUs */
};

struct opts {
	unsigned runs;
	uint64_t perftest_iters;  /* 0: no ucx_perftest cross-check */
	uint64_t duration_ns;
	uint32_t frame;
	int cpu[2];
	bool kind_on[NET_KINDS];
	bool contender_on[N_CONTENDERS];   /* which rows run: all, or --contenders */
	bool contenders_given;
	const char *md, *csv;
	const char *mode;
	const char *callgrind;    /* NULL, or --callgrind's directory */
	uint32_t router_yield_us; /* --router-yield */
	bool spread;              /* --spread */
	char cmd[512];
};

/* The two hosts. */
struct hosts {
	int nsfd[2];
	char ifname[2][IF_NAMESIZE];
	char addr[2][16];
	bool link;                /* the veth pair exists */
};

/* The ucx_perftest runs of the cross-check (checks[] below). */
#define N_CHECKS 3u

struct report {
	const struct opts *o;
	struct net_perftest perftest[N_CHECKS][N_PAYLOADS];
	const char *perftest_status;   /* why there are no figures, or NULL */
	const struct hosts *h;
	struct obs (*obs)[N_CONTENDERS][BENCH_MAX_RUNS];
	unsigned runs_done;
	unsigned failed;
	uint64_t steal_ns;
};

/* ---- the side processes ---- */

static void note_done(struct net_side *s, uint32_t round)
{
	if (round == NET_ROUND_DONE)
		s->res->waited_ns = bench_run_delay_ns() - s->run_delay0;
}

void net_meet(struct net_side *s, uint32_t round)
{
	note_done(s, round);
	bench_barrier(&s->ctl->arrived, round);
}

int net_meet_progress(struct net_side *s, uint32_t round, int (*progress)(void *arg),
		      void *arg)
{
	note_done(s, round);
	/* R1: pairs with A1 here or in bench_barrier() on the other side, as
	 * bench_barrier()'s own arrival does. */
	atomic_fetch_add_explicit(&s->ctl->arrived, 1, memory_order_acq_rel);
	/* A1: pairs with R1 of the other side's arrival. */
	while (shoal_load_acquire(&s->ctl->arrived) < 2 * round) {
		int ret = progress(arg);

		if (ret < 0)
			return ret;
	}
	return 0;
}

void net_side_ready(struct net_side *s)
{
	double probe_ns;

	if (s->ready_progress != NULL)
		net_meet_progress(s, 2, s->ready_progress, s->ready_arg);
	else
		net_meet(s, 2);
	probe_ns = bench_probe(&s->ctl->probe, s->side);
	if (s->side == 0)
		s->res->probe_ns = probe_ns;
	net_meet(s, 3);
	s->run_delay0 = bench_run_delay_ns();
	if (s->side == 0) {
		s->res->t_start = shoal__now_ns();
		s->deadline = s->res->t_start + s->p->duration_ns;
	}
}

int net_frame_check(const unsigned char *frame, size_t len, uint32_t payload, uint64_t *expect,
		    uint64_t *sink)
{
	size_t off = 0;
	int ret = 0;

	if (len == 0 || len % payload != 0)
		return -EBADMSG;
	for (; off < len && ret == 0; off += payload)
		ret = bench_msg_check(frame + off, payload, (*expect)++, sink);
	/* Nothing may follow the last message. */
	return ret == 1 && off != len ? -EBADMSG : ret;
}

/*
 * UCX finds network devices in /sys/class/net, which shows the devices of
 * the namespace that mounted /sys, not the caller's: hence a mount
 * namespace of the process's own with a sysfs of its host (`ip netns exec`
 * remounts it the same way). Its mounts are slaves of the machine's, so
 * the remount stays private to the process.
 */
int net_enter_host(int nsfd)
{
	if (setns(nsfd, CLONE_NEWNET) != 0 || unshare(CLONE_NEWNS) != 0 ||
	    mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) != 0)
		return -errno;
	/* Not mounted is fine: the mount below is then the only one. */
	umount2("/sys", MNT_DETACH);
	return mount("sysfs", "/sys", "sysfs", 0, NULL) == 0 ? 0 : -errno;
}

int net_ping(struct net_side *s, int (*trip)(void *arg, const void *msg, void *back),
	     void *arg)
{
	unsigned char msg[NET_PAYLOAD_MAX], back[NET_PAYLOAD_MAX];
	uint32_t payload = s->p->payload;
	struct bench_hist *h = bench_hist_new();
	uint64_t seq = 0, prev;
	bool last = false;
	int ret = 0;

	if (h == NULL)
		return net_fail(s, -ENOMEM, "no memory for the histogram");
	bench_msg_fill(msg, payload);
	net_side_ready(s);
	prev = s->res->t_start;
	while (ret == 0 && !last) {
		/* prev is the clock read at the end of the last round trip:
		 * checking it costs nothing, and a slow transport stops on time. */
		last = prev >= s->deadline;
		bench_msg_stamp(msg, payload, seq | (last ? BENCH_STOP : 0));
		ret = trip(arg, msg, back);
		if (ret == 0 && bench_msg_check(back, payload, seq, &s->sink) < 0)
			ret = net_fail(s, -EBADMSG, "answer %llu is not the message sent",
				       (unsigned long long)seq);
		if (ret == 0)
			bench_ping_lap(h, &prev);
		seq++;
	}
	s->res->msgs = seq;
	s->res->t_end = prev;
	bench_hist_pct(h, &s->res->lat);
	free(h);
	return ret;
}

int net_pong(struct net_side *s, int (*recv)(void *arg, void *msg),
	     int (*send)(void *arg, const void *msg), void *arg)
{
	unsigned char msg[NET_PAYLOAD_MAX];
	uint64_t seq = 0;
	int ret = 0, got = 0;

	net_side_ready(s);
	while (ret == 0 && got != 1) {
		ret = recv(arg, msg);
		if (ret == 0) {
			got = bench_msg_check(msg, s->p->payload, seq++, &s->sink);
			if (got < 0)
				ret = net_fail(s, got, "message %llu out of order",
					       (unsigned long long)(seq - 1));
		}
		if (ret == 0)
			ret = send(arg, msg);
	}
	s->res->msgs = seq;
	return ret;
}

struct side_args {
	struct net_ctl *ctl;
	const struct net_contender *c;
	const int *nsfd;
};

/* A forked side: pinned, in its host, runs its role. Never returns. */
static void side_main(int side, void *arg)
{
	const struct side_args *a = arg;
	struct net_side s = {
		.side = side,
		.p = &a->ctl->params,
		.res = &a->ctl->res[side],
		.ctl = a->ctl,
	};
	int ret = bench_child_init(s.p->cpu[side]);

	if (ret < 0)
		net_fail(&s, ret, "pinning to CPU %d: %s", s.p->cpu[side], strerror(-ret));
	s.res->cpu = sched_getcpu();
	if (ret == 0 && (ret = net_enter_host(a->nsfd[side])) < 0)
		net_fail(&s, ret, "entering host %c: %s", 'A' + side, strerror(-ret));
	close(a->nsfd[0]);
	close(a->nsfd[1]);
	if (ret == 0)
		ret = a->c->role[s.p->kind][side](&s);
	if (ret < 0 && s.res->err == 0)
		net_fail(&s, ret, "%s", strerror(-ret));
	_exit(ret < 0 ? 1 : 0);
}

/* ---- the hosts ---- */

/* Run `ip` with argv inside the host of nsfd (-1: here). 0, -ENOENT when
 * ip is not installed, -EINTR on a stop signal, -EIO when it failed. */
static int run_ip(int nsfd, char *const argv[])
{
	pid_t pid = fork();
	bool killed = false;
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) != 0)
			_exit(126);
		execvp("ip", argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR)
			return -errno;
		/* A stop signal that comes while `ip` runs stops it; one that
		 * came before (teardown after Ctrl-C) lets it finish. */
		if (bench_stop_signal() && !killed) {
			kill(pid, SIGKILL);
			killed = true;
		}
	}
	if (killed)
		return -EINTR;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
		return -ENOENT;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/*
 * A holder: a child in a new network namespace, which it reports made (0)
 * or not (errno) on *ready_fd, then sleeps until killed.
 */
static pid_t holder_start(int *ready_fd)
{
	int ready[2];
	pid_t pid;

	if (pipe2(ready, O_CLOEXEC) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		char c;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		c = (char)(unshare(CLONE_NEWNET) == 0 ? 0 : errno);
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	*ready_fd = ready[0];
	if (pid < 0)
		close(ready[0]);
	return pid;
}

static void hosts_destroy(struct hosts *h)
{
	if (h->link) {
		char *del[] = { "ip", "link", "del", h->ifname[0], NULL };

		/* Deleting one end deletes the pair. */
		if (run_ip(h->nsfd[0], del) < 0)
			fprintf(stderr, PROG ": deleting the veth pair %s failed; it goes with its "
				"namespace\n", h->ifname[0]);
		h->link = false;
	}
	for (int i = 0; i < 2; i++) {
		if (h->nsfd[i] >= 0)
			close(h->nsfd[i]);
		h->nsfd[i] = -1;
	}
}

static int host_address(struct hosts *h, int i)
{
	char cidr[24];
	char *lo[] = { "ip", "link", "set", "lo", "up", NULL };
	char *addr[] = { "ip", "addr", "add", cidr, "dev", h->ifname[i], NULL };
	char *up[] = { "ip", "link", "set", h->ifname[i], "up", NULL };
	int ret;

	snprintf(cidr, sizeof(cidr), "%s/30", h->addr[i]);
	ret = run_ip(h->nsfd[i], lo);
	if (ret == 0)
		ret = run_ip(h->nsfd[i], addr);
	return ret == 0 ? run_ip(h->nsfd[i], up) : ret;
}

/*
 * Wait until both ends of the pair say they run (IFF_RUNNING): the kernel
 * reports a veth end's carrier up to a second after both ends are up, and
 * UCX refuses a device that does not run yet. The parent steps into each
 * host only to open a socket there (it is single-threaded); the socket
 * stays in that host. 0, -ETIMEDOUT after 5 s, -EINTR, or -errno.
 */
static int hosts_wait_running(const struct hosts *h)
{
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), sock[2] = { -1, -1 };
	int ret = self < 0 ? -errno : 0;

	for (int i = 0; i < 2 && ret == 0; i++) {
		if (setns(h->nsfd[i], CLONE_NEWNET) != 0)
			ret = -errno;
		else if ((sock[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
			ret = -errno;
		if (setns(self, CLONE_NEWNET) != 0)
			ret = ret < 0 ? ret : -errno;
	}
	for (int tries = 0; ret == 0; tries++) {
		bool running = true;

		for (int i = 0; i < 2 && ret == 0; i++) {
			struct ifreq ifr = { 0 };

			snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", h->ifname[i]);
			if (ioctl(sock[i], SIOCGIFFLAGS, &ifr) != 0)
				ret = -errno;
			running = running && (ifr.ifr_flags & IFF_RUNNING);
		}
		if (ret < 0 || running)
			break;
		if (bench_stop_signal())
			ret = -EINTR;
		else if (tries == 500)
			ret = -ETIMEDOUT;
		else
			usleep(10000);
	}
	for (int i = 0; i < 2; i++)
		if (sock[i] >= 0)
			close(sock[i]);
	if (self >= 0)
		close(self);
	return ret;
}

/*
 * Make the two hosts. Returns 0; -EPERM when network namespaces cannot be
 * made here (not root, or no netns), -EOPNOTSUPP when a veth pair cannot
 * (`ip` said why), -ENOENT without `ip`; -EINTR or another -errno
 * otherwise, said on stderr. On failure nothing is left.
 */
static int hosts_create(struct hosts *h)
{
	int ready[2] = { -1, -1 }, ret = 0;
	pid_t holder[2] = { -1, -1 };
	char pid_s[2][16];

	h->nsfd[0] = h->nsfd[1] = -1;
	h->link = false;
	for (int i = 0; i < 2; i++) {
		/* Unique names among concurrent runs, though they exist only
		 * inside this run's namespaces. */
		snprintf(h->ifname[i], sizeof(h->ifname[i]), "snb%d%c", (int)getpid() % 10000000,
			 'a' + i);
		snprintf(h->addr[i], sizeof(h->addr[i]), "169.254.77.%d", i + 1);
	}
	for (int i = 0; i < 2 && ret == 0; i++) {
		char c = 0, path[64];

		holder[i] = holder_start(&ready[i]);
		if (holder[i] < 0) {
			ret = -errno;
			break;
		}
		if (read(ready[i], &c, 1) != 1)
			ret = -EIO;
		else if (c != 0)
			ret = -EPERM;
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)holder[i]);
		if (ret == 0 && (h->nsfd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			ret = -errno;
		snprintf(pid_s[i], sizeof(pid_s[i]), "%d", (int)holder[i]);
	}
	if (ret == 0) {
		char *add[] = { "ip", "link", "add", h->ifname[0], "netns", pid_s[0], "type",
				"veth", "peer", "name", h->ifname[1], "netns", pid_s[1], NULL };

		/* A kernel without veth is a machine this cannot run on, as
		 * one without network namespaces. */
		ret = run_ip(-1, add);
		h->link = ret == 0;
		if (ret == -EIO)
			ret = -EOPNOTSUPP;
	}
	/* The descriptors hold the namespaces from here on. */
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (holder[i] > 0) {
			kill(holder[i], SIGKILL);
			while (waitpid(holder[i], NULL, 0) < 0 && errno == EINTR)
				;
		}
	}
	for (int i = 0; i < 2 && ret == 0; i++)
		ret = host_address(h, i);
	if (ret == 0)
		ret = hosts_wait_running(h);
	if (ret < 0) {
		if (ret != -EPERM && ret != -EOPNOTSUPP && ret != -ENOENT && ret != -EINTR)
			fprintf(stderr, PROG ": making the hosts: %s\n", strerror(-ret));
		hosts_destroy(h);
	}
	return ret;
}

/* ---- one sample ---- */

static void sample_failed(const struct net_contender *c, const struct net_params *p,
			  const struct bench_result res[2], int ret)
{
	fprintf(stderr, PROG ": %s sample of %s (%u B) failed: %s\n", kind_name[p->kind], c->name,
		p->payload, ret == -ETIMEDOUT ? "watchdog expired" : "a side failed");
	for (int i = 0; i < 2; i++)
		if (res[i].msg[0] != '\0')
			fprintf(stderr, "  side %c: %s\n", 'A' + i, res[i].msg);
}

/* Run one sample into *ob. 0, -EINTR (stop), or another -errno (the
 * sample failed and was said on stderr; the run goes on). */
static int sample_run(struct net_ctl *ctl, const struct hosts *h, const struct net_contender *c,
		      const struct net_params *p, struct obs *ob)
{
	struct side_args a = { ctl, c, h->nsfd };
	const struct bench_result *r = ctl->res;
	uint64_t elapsed;
	int ret;

	/* No side is alive: plain writes, published to the sides by fork(). */
	memset(ctl, 0, sizeof(*ctl));
	ctl->params = *p;
	ret = bench_pair_run(side_main, &a, p->duration_ns, NULL);
	if (ret < 0 && bench_stop_signal())
		return -EINTR;
	if (ret < 0) {
		sample_failed(c, p, ctl->res, ret);
		return ret;
	}
	memset(ob, 0, sizeof(*ob));
	elapsed = r[p->kind == NET_TPUT ? 1 : 0].t_end - r[0].t_start;
	if (r[0].t_start == 0 || elapsed == 0 || r[p->kind == NET_TPUT ? 1 : 0].msgs == 0) {
		fprintf(stderr, PROG ": %s sample of %s (%u B) measured nothing\n",
			kind_name[p->kind], c->name, p->payload);
		return -EIO;
	}
	ob->ok = true;
	ob->rate = (double)r[p->kind == NET_TPUT ? 1 : 0].msgs * 1e9 / (double)elapsed;
	ob->mbps = ob->rate * p->payload / 1e6;
	ob->p50 = (double)r[0].lat.p50;
	ob->p99 = (double)r[0].lat.p99;
	ob->p999 = (double)r[0].lat.p999;
	ob->probe = r[0].probe_ns;
	ob->pinned = r[0].cpu == p->cpu[0] && r[1].cpu == p->cpu[1];
	ob->disturbed = (double)(r[0].waited_ns > r[1].waited_ns ? r[0].waited_ns :
				 r[1].waited_ns) >= DISTURBED * (double)elapsed;
	return 0;
}

/* ---- the report ---- */

static unsigned case_of(enum net_kind k, unsigned pi)
{
	return (unsigned)k * N_PAYLOADS + pi;
}

static int contender_index(const char *name)
{
	for (unsigned i = 0; i < N_CONTENDERS; i++)
		if (strcmp(contenders[i]->name, name) == 0)
			return (int)i;
	return -1;
}

/* Values of one cell over the runs that kept a sample; field() picks one. */
static unsigned collect(const struct report *rp, unsigned cs, unsigned ci,
			double (*field)(const struct obs *o), double *v)
{
	unsigned n = 0;

	for (unsigned r = 0; r < rp->runs_done; r++)
		if (rp->obs[cs][ci][r].ok)
			v[n++] = field(&rp->obs[cs][ci][r]);
	return n;
}

/* Ratios of a cell to the reference `ref`, run by run (pairs measured in
 * the same run, a few seconds apart at most). */
static unsigned collect_ratio(const struct report *rp, unsigned cs, unsigned ci, int ref,
			      double (*field)(const struct obs *o), double *v)
{
	unsigned n = 0;

	for (unsigned r = 0; ref >= 0 && r < rp->runs_done; r++) {
		const struct obs *a = &rp->obs[cs][ci][r], *b = &rp->obs[cs][ref][r];

		if (a->ok && b->ok && field(b) > 0)
			v[n++] = field(a) / field(b);
	}
	return n;
}

static double f_rate(const struct obs *o)
{
	return o->rate;
}

static double f_p50(const struct obs *o)
{
	return o->p50;
}

static double f_p99(const struct obs *o)
{
	return o->p99;
}

static double f_probe(const struct obs *o)
{
	return o->probe;
}

/* "med [min, max]" of v[0..n) scaled by `scale`, or "failed". */
static const char *cell(char *buf, size_t len, double *v, unsigned n, double scale, int prec)
{
	struct bench_mmm m;

	if (n == 0) {
		snprintf(buf, len, "failed");
		return buf;
	}
	m = bench_mmm(v, n);
	m.med *= scale;
	m.min *= scale;
	m.max *= scale;
	return bench_fmt_mmm(buf, len, m, prec);
}

static void md_header(FILE *f, const struct report *rp)
{
	const struct opts *o = rp->o;
	unsigned total = 0, disturbed = 0, pinned = 0;
	double probes[N_CASES * N_CONTENDERS * BENCH_MAX_RUNS];
	unsigned np = 0;

	for (unsigned cs = 0; cs < N_CASES; cs++)
		for (unsigned ci = 0; ci < N_CONTENDERS; ci++)
			for (unsigned r = 0; r < rp->runs_done; r++) {
				const struct obs *ob = &rp->obs[cs][ci][r];

				if (!ob->ok)
					continue;
				total++;
				disturbed += ob->disturbed;
				pinned += ob->pinned;
				probes[np++] = ob->probe;
			}
	fprintf(f, "## " PROG ": across hosts, the transport's limit\n\n");
	fprintf(f, "- command: `%s` (%s mode)\n", o->cmd, o->mode);
	bench_md_machine(f);
	fprintf(f, "- hosts: two network namespaces made by the benchmark, joined by a veth pair "
		"(%s %s, %s %s): TCP through the kernel's network stack on one machine, no NIC\n",
		rp->h->ifname[0], rp->h->addr[0], rp->h->ifname[1], rp->h->addr[1]);
	fprintf(f, "- pinning: client (side A: sender, ping-pong initiator) on CPU %d, server "
		"(side B: receiver, responder) on CPU %d, each with its transport's threads "
		"(UCX's async thread, ZeroMQ's I/O thread); held in %u of %u samples (the "
		"bridge rows' sides only start their systems and never count as held); every "
		"process of a host on its side's CPU, as on two hosts of one CPU each: the "
		"plain relays' and %s\n", o->cpu[0], o->cpu[1], pinned, total,
		o->spread ? "not the bridge's systems, each on both CPUs (`--spread`)" :
			    "the bridge's systems (`shoal run` in the side's CPU set)");
	if (o->router_yield_us > 0)
		fprintf(f, "- the bridge's systems: `router: { yield: %uus }` (docs/config.md, "
			"\"Spinning on shared CPUs\"; `--router-yield`)\n", o->router_yield_us);
	else
		fprintf(f, "- the bridge's systems: router settings left at their defaults "
			"(`--router-yield 0`)\n");
	if (np > 0) {
		struct bench_mmm m = bench_mmm(probes, np);

		fprintf(f, "- placement probe (cache-line round trip between the two CPUs): "
			"median %.0f ns [%.0f, %.0f]\n", m.med, m.min, m.max);
	}
	fprintf(f, "- runs: %u, samples of %.0f ms, contenders interleaved (order rotated every "
		"run); cells are median [min, max] over runs; ratios are taken run by run\n",
		rp->runs_done, (double)o->duration_ns / 1e6);
	fprintf(f, "- interference: %u of %u samples disturbed (a side runnable but not running "
		"%.0f %% of the sample or more), hypervisor steal %.1f s over the run; failed "
		"samples: %u\n", disturbed, total, DISTURBED * 100, (double)rp->steal_ns / 1e9,
		rp->failed);
	fprintf(f, "- batched frame: %u bytes of messages per active message\n", o->frame);
	if (o->contenders_given) {
		fprintf(f, "- contenders: only");
		for (unsigned ci = 0, n = 0; ci < N_CONTENDERS; ci++)
			if (o->contender_on[ci])
				fprintf(f, "%s `%s`", n++ ? "," : "", contenders[ci]->name);
		fprintf(f, " (`--contenders`)\n");
	}
	fprintf(f, "\n");
}

static double f_mbps(const struct obs *o)
{
	return o->mbps;
}

/* A column: median [min, max] over runs of field() x scale, or with
 * `ratio`, of the row's field() over the reference contender's: the
 * table's, or with `shape` the plain reference of the row's shape. */
struct md_col {
	double (*field)(const struct obs *o);
	double scale;
	int prec;
	bool ratio;
	bool shape;
};

/* The plain reference of contender ci's shape for a kind of sample. */
static const char *shape_ref(unsigned ci, enum net_kind k)
{
	return contenders[ci]->shape_ref[k] != NULL ? contenders[ci]->shape_ref[k] : RELAY_REF;
}

/* The two tables: what they say, their reference, their columns. */
static const struct md_table {
	enum net_kind kind;
	const char *ref;
	const char *intro;       /* a printf format taking ref, ref */
	struct md_col cols[5];
} md_tables[NET_KINDS] = {
	{ NET_TPUT, NET_LIMIT,
	  "### Throughput, one way\n\n"
	  "A sends for the sample's duration, B checks every message; rate = messages / (A's "
	  "first send to B's last receive). `÷ %s`: the row's rate over the batched limit's "
	  "in the same run; `÷ plain shape`: over the plain reference of the row's shape, "
	  "the limit of that shape: `" NET_ROUTED_REF "` for `shoal-bridge` (routed: six "
	  "processes), `" RELAY_REF "` for the direct path's rows (four).\n\n"
	  "| contender | payload | msg/s | MB/s | ÷ %s | ÷ plain shape | probe (ns) |\n"
	  "|---|---:|---:|---:|---:|---:|---:|\n",
	  { { f_rate, 1, 0, false, false }, { f_mbps, 1, 1, false, false },
	    { f_rate, 1, 2, true, false }, { f_rate, 1, 2, true, true },
	    { f_probe, 1, 0, false, false } } },
	{ NET_RTT, RTT_REF,
	  "### Round trip, ping-pong\n\n"
	  "A sends one message, B sends it back, A waits for it; per run the p50 and p99 of "
	  "every round trip (µs). `p50 ÷ %s`: the row's p50 over UCX's in the same run; "
	  "`p50 ÷ plain shape`: over `" RELAY_REF "`'s, the limit of the shape of "
	  "`shoal-bridge`'s round trip (direct, through both bridges).\n\n"
	  "| contender | payload | RTT p50 (µs) | RTT p99 (µs) | round trips/s | p50 ÷ %s | "
	  "p50 ÷ plain shape |\n"
	  "|---|---:|---:|---:|---:|---:|---:|\n",
	  { { f_p50, 1e-3, 1, false, false }, { f_p99, 1e-3, 1, false, false },
	    { f_rate, 1, 0, false, false }, { f_p50, 1, 2, true, false },
	    { f_p50, 1, 2, true, true } } },
};

/* Whether contender `name` is of this build and ran. */
static bool ran(const struct report *rp, const char *name)
{
	int ci = contender_index(name);

	return ci >= 0 && rp->o->contender_on[ci];
}

/* A table: its intro, then one row per payload and contender that
 * measures its kind and ran. Without a reference (not among --contenders),
 * its ratio cells say "—" and a line below says why. */
static void md_table(FILE *f, const struct report *rp, const struct md_table *t)
{
	const unsigned n_cols = sizeof(t->cols) / sizeof(t->cols[0]);
	const char *missing[N_CONTENDERS];
	unsigned n_missing = 0;
	double v[BENCH_MAX_RUNS];
	char buf[64];

	fprintf(f, t->intro, t->ref, t->ref);
	for (unsigned pi = 0; pi < N_PAYLOADS; pi++)
		for (unsigned ci = 0; ci < N_CONTENDERS; ci++) {
			unsigned cs = case_of(t->kind, pi);

			if (contenders[ci]->role[t->kind][0] == NULL || !rp->o->contender_on[ci])
				continue;
			fprintf(f, "| %s | %u B |", contenders[ci]->name, payloads[pi]);
			for (unsigned j = 0; j < n_cols; j++) {
				const struct md_col *c = &t->cols[j];
				const char *ref = c->shape ? shape_ref(ci, t->kind) : t->ref;
				unsigned n = c->ratio ? collect_ratio(rp, cs, ci, contender_index(ref),
								      c->field, v) :
					collect(rp, cs, ci, c->field, v);
				unsigned m = 0;

				if (c->ratio && !ran(rp, ref)) {
					fprintf(f, " — |");
					while (m < n_missing && strcmp(missing[m], ref) != 0)
						m++;
					if (m == n_missing)
						missing[n_missing++] = ref;
				} else
					fprintf(f, " %s |",
						cell(buf, sizeof(buf), v, n, c->scale, c->prec));
			}
			fprintf(f, "\n");
		}
	fprintf(f, "\n");
	for (unsigned m = 0; m < n_missing; m++)
		fprintf(f, "No ratio to `%s`: it did not run (not in `--contenders`).\n\n",
			missing[m]);
}

/*
 * The cross-check: each check runs one ucx_perftest test per payload and
 * prints its figure beside the median of the row of this run it checks:
 * a message rate, a bandwidth (MB/s, 10^6 bytes, from the tool's message
 * rate), or a round trip (the tool's one-way latency doubled).
 */
enum check_unit { CHECK_RATE, CHECK_MBPS, CHECK_RTT };

static const struct check {
	const char *test;          /* ucx_perftest -t */
	bool frame;                /* -s the frame size, else the payload */
	unsigned iters_div;        /* run perftest_iters / iters_div of them */
	const char *contender;     /* the row it checks */
	enum net_kind kind;
	enum check_unit unit;
	const char *figure;
} checks[N_CHECKS] = {
	{ "ucp_am_bw", false, 1, "ucx", NET_TPUT, CHECK_RATE,
	  "msg/s, one message per AM (`ucp_am_bw`)" },
	{ "ucp_am_bw", true, 16, NET_LIMIT, NET_TPUT, CHECK_MBPS,
	  "MB/s, one frame per AM (`ucp_am_bw -s` frame)" },
	{ "ucp_am_lat", false, 5, "ucx", NET_RTT, CHECK_RTT,
	  "RTT p50, µs (`ucp_am_lat` x 2)" },
};

static double check_tool(const struct check *c, const struct net_perftest *pt, uint32_t size)
{
	switch (c->unit) {
	case CHECK_RATE:
		return pt->msg_rate;
	case CHECK_MBPS:
		return pt->msg_rate * size / 1e6;
	case CHECK_RTT:
		return 2 * pt->lat_ns / 1e3;
	}
	return 0;
}

/* The checked row's median over the runs, in the check's unit; 0 if none. */
static double check_own(const struct report *rp, const struct check *c, unsigned pi)
{
	static double (*const field[])(const struct obs *o) = {
		[CHECK_RATE] = f_rate, [CHECK_MBPS] = f_mbps, [CHECK_RTT] = f_p50,
	};
	int ci = contender_index(c->contender);
	double v[BENCH_MAX_RUNS];
	unsigned n = ci >= 0 && rp->o->kind_on[c->kind] ?
		collect(rp, case_of(c->kind, pi), (unsigned)ci, field[c->unit], v) : 0;

	if (n == 0)
		return 0;
	return bench_mmm(v, n).med / (c->unit == CHECK_RTT ? 1e3 : 1);
}

static void md_perftest(FILE *f, const struct report *rp)
{
	fprintf(f, "### Cross-check: ucx_perftest\n\n");
	if (rp->perftest_status != NULL) {
		fprintf(f, "Not measured: %s.\n\n", rp->perftest_status);
		return;
	}
	fprintf(f, "`ucx_perftest` run once per figure after the runs, in the same hosts and on "
		"the same CPUs (`UCX_TLS=tcp`, the veth end as `UCX_NET_DEVICES`): %llu "
		"messages, %llu frames, %llu round trips; beside it the median over the runs of "
		"the row it checks.\n\n"
		"| figure | payload | ucx_perftest | checks | this run | ÷ ucx_perftest |\n"
		"|---|---:|---:|---|---:|---:|\n", (unsigned long long)rp->o->perftest_iters,
		(unsigned long long)(rp->o->perftest_iters / checks[1].iters_div),
		(unsigned long long)(rp->o->perftest_iters / checks[2].iters_div));
	for (unsigned t = 0; t < N_CHECKS; t++)
		for (unsigned pi = 0; pi < N_PAYLOADS; pi++) {
			const struct check *c = &checks[t];
			const struct net_perftest *pt = &rp->perftest[t][pi];
			double tool = check_tool(c, pt, c->frame ? rp->o->frame : payloads[pi]);
			double own = check_own(rp, c, pi);
			const char *fmt = c->unit == CHECK_RATE ? " %.0f |" : " %.1f |";

			fprintf(f, "| %s | %u B |", c->figure, payloads[pi]);
			if (pt->ok)
				fprintf(f, fmt, tool);
			else
				fprintf(f, " failed |");
			fprintf(f, " `%s` |", c->contender);
			if (own > 0)
				fprintf(f, fmt, own);
			else
				fprintf(f, " not measured |");
			if (pt->ok && own > 0 && tool > 0)
				fprintf(f, " %.2f |\n", own / tool);
			else
				fprintf(f, " — |\n");
		}
	fprintf(f, "\n");
}

static void write_md(FILE *f, const void *arg)
{
	const struct report *rp = arg;

	md_header(f, rp);
	for (unsigned k = 0; k < NET_KINDS; k++)
		if (rp->o->kind_on[k])
			md_table(f, rp, &md_tables[k]);
	if (rp->o->perftest_iters > 0)
		md_perftest(f, rp);
	fprintf(f, "### Contenders\n\n");
	for (unsigned ci = 0; ci < N_CONTENDERS; ci++)
		if (rp->o->contender_on[ci])
			fprintf(f, "- `%s`: %s\n", contenders[ci]->name, contenders[ci]->what);
	fprintf(f, "\nIssue 14's targets (throughput at least 0.8x `%s` and at least `zeromq`'s, "
		"round trip p50 at most 1.2x `%s`'s) are the whole bridge's, `shoal-bridge`; "
		"`shoal-link` is its link layer alone, what the bridge cannot beat; `%s` is "
		"the direct path's shape (four processes, two rings, two relays) done plainly, "
		"the machine's limit for that shape, and `%s` the routed path's (six processes, "
		"a forwarder more per host).\n", NET_LIMIT, RTT_REF, RELAY_REF, NET_ROUTED_REF);
}

static int write_csv(const char *path, const void *arg)
{
	const struct report *rp = arg;
	FILE *f = fopen(path, "we");

	if (f == NULL)
		return -errno;
	fprintf(f, "kind,contender,payload,frame,run,msgs_per_s,mb_per_s,p50_ns,p99_ns,p999_ns,"
		"probe_ns,disturbed,pinned\n");
	for (unsigned cs = 0; cs < N_CASES; cs++)
		for (unsigned ci = 0; ci < N_CONTENDERS; ci++)
			for (unsigned r = 0; r < rp->runs_done; r++) {
				const struct obs *o = &rp->obs[cs][ci][r];
				uint32_t pl = payloads[cs % N_PAYLOADS];

				if (!o->ok)
					continue;
				fprintf(f, "%s,%s,%u,%u,%u,%.0f,%.2f,%.0f,%.0f,%.0f,%.0f,%d,%d\n",
					kind_name[cs / N_PAYLOADS], contenders[ci]->name, pl,
					contenders[ci]->batched ? rp->o->frame : 0, r + 1, o->rate,
					o->mbps, o->p50, o->p99, o->p999, o->probe,
					o->disturbed, o->pinned);
			}
	return fclose(f) == 0 ? 0 : -errno;
}

/* ---- the run ---- */

/*
 * Every run goes through every case and runs its contenders back to back,
 * in an order rotated by one every run. Returns 0, 1 when some sample
 * failed, or -EINTR.
 */
static int run_all(struct net_ctl *ctl, const struct hosts *h, struct report *rp)
{
	const struct opts *o = rp->o;
	unsigned sample = 0;

	for (unsigned r = 0; r < o->runs; r++) {
		for (unsigned cs = 0; cs < N_CASES; cs++) {
			enum net_kind k = (enum net_kind)(cs / N_PAYLOADS);

			if (!o->kind_on[k])
				continue;
			for (unsigned j = 0; j < N_CONTENDERS; j++) {
				unsigned ci = (j + r) % N_CONTENDERS;
				const struct net_contender *c = contenders[ci];
				struct net_params p = {
					.kind = k,
					.payload = payloads[cs % N_PAYLOADS],
					.frame = o->frame,
					.duration_ns = o->duration_ns,
					.cpu = { o->cpu[0], o->cpu[1] },
					.port = (uint16_t)(PORT_BASE + sample++ % PORT_SPAN),
				};
				struct obs *ob = &rp->obs[cs][ci][r];
				int ret;

				if (c->role[k][0] == NULL || !o->contender_on[ci])
					continue;
				if (bench_stop_signal())
					return -EINTR;
				memcpy(p.addr, h->addr, sizeof(p.addr));
				memcpy(p.ifname, h->ifname, sizeof(p.ifname));
				if (o->callgrind != NULL)
					snprintf(p.callgrind, sizeof(p.callgrind), "%s", o->callgrind);
				p.router_yield_us = o->router_yield_us;
				p.spread = o->spread;
				ret = sample_run(ctl, h, c, &p, ob);
				if (ret == -EINTR)
					return ret;
				rp->failed += ret < 0;
				if (ret == 0 && k == NET_TPUT)
					fprintf(stderr, PROG ": run %u/%u %s %s %u B: %.0f msg/s%s\n",
						r + 1, o->runs, kind_name[k], c->name, p.payload,
						ob->rate, ob->disturbed ? " (disturbed)" : "");
				else if (ret == 0)
					fprintf(stderr, PROG ": run %u/%u %s %s %u B: p50 %.1f us, "
						"p99 %.1f us%s\n", r + 1, o->runs, kind_name[k],
						c->name, p.payload, ob->p50 / 1e3, ob->p99 / 1e3,
						ob->disturbed ? " (disturbed)" : "");
			}
		}
		rp->runs_done = r + 1;
	}
	return rp->failed ? 1 : 0;
}

/*
 * After the runs: every check of ucx_perftest for every payload, in the
 * same hosts and on the same CPUs. A failure here is said in the report;
 * it does not fail the benchmark (the tool is not ours). 0 or -EINTR.
 */
static int run_perftest(const struct hosts *h, struct report *rp)
{
	const struct opts *o = rp->o;
	unsigned port = PORT_BASE + PORT_SPAN;

	for (unsigned pi = 0; pi < N_PAYLOADS; pi++)
		for (unsigned t = 0; t < N_CHECKS; t++) {
			const struct check *c = &checks[t];
			struct net_perftest *pt = &rp->perftest[t][pi];
			struct net_params p = {
				.payload = c->frame ? o->frame : payloads[pi],
				.cpu = { o->cpu[0], o->cpu[1] },
				.port = (uint16_t)port++,
			};
			int ret;

			memcpy(p.addr, h->addr, sizeof(p.addr));
			memcpy(p.ifname, h->ifname, sizeof(p.ifname));
			ret = net_perftest_run(h->nsfd, &p, c->test, o->perftest_iters / c->iters_div,
					       pt);
			if (ret == -EINTR)
				return ret;
			if (ret == -ENOENT) {
				rp->perftest_status = "ucx_perftest is not installed (ucx-utils)";
				return 0;
			}
			if (ret < 0)
				fprintf(stderr, PROG ": ucx_perftest %s, %u B: no figures\n", c->test,
					p.payload);
			else
				fprintf(stderr, PROG ": ucx_perftest %s %u B: %.0f msg/s, "
					"latency p50 %.1f us\n", c->test, p.payload, pt->msg_rate,
					pt->lat_ns / 1e3);
		}
	return 0;
}

/* The names of the contenders of this build, comma-separated, into buf. */
static void contender_names(char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < N_CONTENDERS && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "",
					 contenders[i]->name);
}

/* Whether some contender that runs measures some kind that runs. */
static bool measures_any(const struct opts *o)
{
	for (unsigned ci = 0; ci < N_CONTENDERS; ci++)
		for (unsigned k = 0; k < NET_KINDS; k++)
			if (o->contender_on[ci] && o->kind_on[k] && contenders[ci]->role[k][0] != NULL)
				return true;
	return false;
}

static void usage(FILE *f)
{
	char names[192];

	contender_names(names, sizeof(names));
	fprintf(f,
		"usage: " PROG " [--short | --smoke] [--runs N] [--cpus A,B] [--only LIST]\n"
		"                       [--contenders LIST] [--frame BYTES] [--md FILE] [--csv FILE]\n"
		"                       [--perftest]\n"
		"Across hosts, the transport's limit: UCX active messages (one message each, and\n"
		"packed into frames: the batched limit), the plain relay (the bridge's direct\n"
		"path's shape done plainly: a side and a relay process per host, plain rings\n"
		"between them, UCP frames between the relays; plain-relay-routed adds a plain\n"
		"forwarder per host, the routed path's shape), ZeroMQ (PUSH/PULL, REQ/REP), and,\n"
		"when built with the bridge, Shoal end to end (a `shoal run --host` system on\n"
		"each host) and its link layer alone, between two network namespaces\n"
		"joined by a veth pair that the benchmark makes and removes;\n"
		"64 B and 1 KiB messages; one-way throughput and ping-pong round trip, contenders\n"
		"interleaved over the runs. Needs root. Markdown on stdout, progress on stderr.\n"
		"  --short        3 runs of 300 ms samples (under a minute)\n"
		"  --smoke        1 run of 50 ms samples: checks that everything runs\n"
		"  --runs N       repetitions (default 5, at most %u)\n"
		"  --cpus A,B     pin the client (side A) to CPU A, the server to B (default 0,1),\n"
		"                 each with its plain relay; the bridge's systems run on both\n"
		"  --only LIST    tput,rtt (default both)\n"
		"  --contenders LIST\n"
		"                 run only these rows, comma-separated (default all); a ratio to\n"
		"                 a reference that did not run is not printed. In this build:\n"
		"                 %s\n"
		"  --frame BYTES  bytes of messages per batched active message (the plain\n"
		"                 relay's largest), and the link's flush_bytes (1024 to %u,\n"
		"                 default %u)\n"
		"  --md FILE      the report, also written to FILE\n"
		"  --csv FILE     one row per sample kept\n"
		"  --perftest     after the runs, ucx_perftest (ucx-utils) in the same hosts, to\n"
		"                 cross-check the UCP program's figures\n"
		"  --router-yield US\n"
		"                 the bridge systems' router.yield, in microseconds (0 to\n"
		"                 1000000; default 200, docs/config.md; 0 leaves it unset)\n"
		"  --spread       run each host's system on both CPUs, not on its side's\n"
		"  --callgrind DIR\n"
		"                 run the bridge contenders' systems (`shoal run` and what it\n"
		"                 starts but the groups) under valgrind --tool=callgrind, their\n"
		"                 instructions counted in the router's dispatcher and the\n"
		"                 bridge's loop only, files and each system's output kept in DIR\n"
		"                 (made if missing); rates are then valgrind's, not the\n"
		"                 machine's (bench/bridge-instr reads DIR)\n"
		"Exit: 0; 1 (a sample failed, said on stderr); 2 (usage); 77 (skipped: not root,\n"
		"no network namespaces or veth, no `ip`, or the two CPUs not usable); 128+n on\n"
		"signal n.\n",
		BENCH_MAX_RUNS, names, NET_FRAME_MAX, NET_FRAME_DEFAULT);
}

/* Parse the options into *o. 0, 1 (--help, said), or 2 (bad usage, said). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "short", no_argument, NULL, 's' },       { "smoke", no_argument, NULL, 'S' },
		{ "runs", required_argument, NULL, 'r' },  { "cpus", required_argument, NULL, 'c' },
		{ "only", required_argument, NULL, 'o' },  { "frame", required_argument, NULL, 'f' },
		{ "md", required_argument, NULL, 'm' },    { "csv", required_argument, NULL, 'v' },
		{ "perftest", no_argument, NULL, 'P' },    { "help", no_argument, NULL, 'h' },
		{ "contenders", required_argument, NULL, 'C' },
		{ "callgrind", required_argument, NULL, 'G' },
		{ "router-yield", required_argument, NULL, 'Y' },
		{ "spread", no_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 }
	};
	const char *names[N_CONTENDERS];
	char known[192];
	bool runs_given = false, perftest = false;
	uint64_t x;
	int opt;

	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
		case 'S':
			o->mode = opt == 's' ? "short" : "smoke";
			o->duration_ns = opt == 's' ? 300000000u : 50000000u;
			if (!runs_given)
				o->runs = opt == 's' ? 3 : 1;
			break;
		case 'r':
			if (bench_parse_uint(optarg, 1, BENCH_MAX_RUNS, &x) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			o->runs = (unsigned)x;
			runs_given = true;
			break;
		case 'c':
			if (bench_parse_cpus(optarg, CPU_SETSIZE, o->cpu) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'o':
			if (bench_parse_names(optarg, kind_name, NET_KINDS, o->kind_on) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			break;
		case 'C':
			for (unsigned i = 0; i < N_CONTENDERS; i++)
				names[i] = contenders[i]->name;
			if (bench_parse_names(optarg, names, N_CONTENDERS, o->contender_on) < 0) {
				contender_names(known, sizeof(known));
				bench_bad_option(PROG, longopts, opt, optarg);
				fprintf(stderr, PROG ": --contenders: the contenders of this build are "
					"%s\n", known);
				return 2;
			}
			o->contenders_given = true;
			break;
		case 'f':
			if (bench_parse_uint(optarg, NET_PAYLOAD_MAX, NET_FRAME_MAX, &x) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			o->frame = (uint32_t)x;
			break;
		case 'P':
			perftest = true;
			break;
		case 'Y':
			if (bench_parse_uint(optarg, 0, 1000000, &x) < 0)
				return bench_bad_option(PROG, longopts, opt, optarg);
			o->router_yield_us = (uint32_t)x;
			break;
		case 'D':
			o->spread = true;
			break;
		case 'G':
			if (strlen(optarg) + 64 > sizeof(((struct net_params *)0)->callgrind))
				return bench_bad_option(PROG, longopts, opt, optarg);
			o->callgrind = optarg;
			break;
		case 'm':
			o->md = optarg;
			break;
		case 'v':
			o->csv = optarg;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!measures_any(o)) {
		fprintf(stderr, PROG ": no contender of --contenders measures a kind of --only\n");
		return 2;
	}
	/* About as long as one sample of the mode, at ~50 000 msg/s. */
	if (perftest)
		o->perftest_iters = o->duration_ns / 20000;
	return 0;
}

/* Whether this process can make the hosts at all; says why not. */
static bool can_run(const struct opts *o)
{
	if (geteuid() != 0) {
		fprintf(stderr, PROG ": skipped: needs root to make network namespaces and a "
			"veth pair\n");
		return false;
	}
	if (!bench_cpus_usable(o->cpu)) {
		fprintf(stderr, PROG ": skipped: CPUs %d and %d are not both usable\n", o->cpu[0],
			o->cpu[1]);
		return false;
	}
	return true;
}

/* --callgrind: DIR made if missing and named absolutely (the systems run
 * elsewhere), valgrind there. -1 after saying why not. */
static int callgrind_dir(struct opts *o, char *abs)
{
	if (system("command -v valgrind >/dev/null 2>&1") != 0) {
		fprintf(stderr, PROG ": --callgrind: valgrind is not installed\n");
		return -1;
	}
	if (mkdir(o->callgrind, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, PROG ": --callgrind: mkdir %s: %s\n", o->callgrind, strerror(errno));
		return -1;
	}
	errno = 0;
	if (realpath(o->callgrind, abs) == NULL ||
	    strlen(abs) + 64 > sizeof(((struct net_params *)0)->callgrind)) {
		fprintf(stderr, PROG ": --callgrind: %s: %s\n", o->callgrind,
			errno ? strerror(errno) : "too long a path");
		return -1;
	}
	o->callgrind = abs;
	return 0;
}

int main(int argc, char **argv)
{
	static struct obs obs[N_CASES][N_CONTENDERS][BENCH_MAX_RUNS];
	struct opts o = {
		.runs = 5, .duration_ns = 1000000000u, .frame = NET_FRAME_DEFAULT,
		.router_yield_us = 200,
		.cpu = { 0, 1 }, .kind_on = { true, true }, .mode = "default",
	};
	struct hosts h = { .nsfd = { -1, -1 } };
	struct report rp = { .o = &o, .h = &h, .obs = obs };
	struct bench_cpustat st0, st1;
	struct net_ctl *ctl;
	char fd_s[16], cg_dir[PATH_MAX];
	int ret, fd;

#ifdef SHOAL_BENCH_LINK
	/* Started by `shoal run` as a group of the bridge contender. */
	if (getenv(NET_BRIDGE_CTL_ENV) != NULL)
		return net_bridge_group_main(getenv(NET_BRIDGE_CTL_ENV));
#endif
	for (unsigned ci = 0; ci < N_CONTENDERS; ci++)
		o.contender_on[ci] = true;
	ret = parse_opts(argc, argv, &o);
	if (ret != 0)
		return ret == 1 ? 0 : 2;
	bench_command_line(o.cmd, sizeof(o.cmd), argc, argv);
	if (!can_run(&o))
		return EXIT_SKIP;
	if (o.callgrind != NULL && callgrind_dir(&o, cg_dir) < 0)
		return 1;
	/* A memfd, not an anonymous mapping: the bridge's groups, which
	 * `shoal run` starts, map it by the descriptor they inherit. */
	fd = memfd_create(PROG, 0);
	if (fd < 0 || ftruncate(fd, sizeof(*ctl)) != 0) {
		perror(PROG ": memfd");
		return 1;
	}
	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ctl == MAP_FAILED) {
		perror(PROG ": mmap");
		return 1;
	}
	snprintf(fd_s, sizeof(fd_s), "%d", fd);
	setenv(NET_BRIDGE_CTL_ENV, fd_s, 1);
	bench_signals_init();
	ret = hosts_create(&h);
	if (ret == -EPERM || ret == -EOPNOTSUPP || ret == -ENOENT) {
		fprintf(stderr, PROG ": skipped: %s\n",
			ret == -EPERM ? "network namespaces cannot be made here" :
			ret == -EOPNOTSUPP ? "a veth pair cannot be made here" :
			"`ip` (iproute2) is not installed");
		munmap(ctl, sizeof(*ctl));
		return EXIT_SKIP;
	}
	if (ret == 0) {
		bench_cpustat_read(&st0);
		ret = run_all(ctl, &h, &rp);
		if (ret >= 0 && o.perftest_iters > 0)
			ret = run_perftest(&h, &rp) < 0 ? -EINTR : ret;
		bench_cpustat_read(&st1);
		rp.steal_ns = st1.steal - st0.steal;
	}
	hosts_destroy(&h);
	munmap(ctl, sizeof(*ctl));
	if (ret == -EINTR || bench_stop_signal()) {
		int sig = bench_stop_signal();

		fprintf(stderr, PROG ": stopped by signal %d; hosts removed\n", sig);
		return 128 + sig;
	}
	if (ret < 0)
		return 1;
	if (bench_write_outputs(PROG, o.md, o.csv, write_md, write_csv, &rp) < 0)
		return 1;
	return ret;
}
