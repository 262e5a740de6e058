/* SPDX-License-Identifier: MIT */
/*
 * Shoal's whole bridge for shoal-bench-net, end to end: each side runs a
 * real system on its host, `shoal run --host a|b` on one system file, whose
 * bridges link the two hosts over the veth pair the other contenders use.
 * What separates this row from `shoal-link` is everything around the link:
 * the producer's routed send into its uplink, host A's router dispatching
 * each message to A's bridge, that bridge's mailbox, route match and copy
 * onto the link; at B the bridge's copy into B's uplink, B's router
 * dispatching it to the consumer's mailbox, and the consumer's poll.
 *
 * The measuring is done inside the systems: the group `bench-a` (host A)
 * and `bench-b` (host B) are this very program, started by `shoal run`
 * with SHOAL_BENCH_NET_CTL in their environment (net_bridge_group_main()).
 * It names a descriptor of the benchmark's control block (a memfd that
 * every process of the sample inherits), so the groups meet at the same
 * rounds, run the same ping-pong loops and report into the same results as
 * the other contenders' sides. A side process only makes its host's
 * system: a folder for its shared memory and the file, `shoal run` in it,
 * and at the end SIGTERM to it once its group is done.
 *
 * Throughput: bench-a sends routed messages with shoal_send_burst(), as
 * fast as it takes them (it waits for room as a routed send does), a burst
 * at a time; bench-b's route takes every one and its handler checks them
 * in order. The `shoal-bridge-direct` row sends them direct instead
 * (shoal_send_to_burst() to bench-b): into a direct ring of A's bridge, and
 * from B's bridge into bench-b's mailbox, with neither router on the way. Round trip: bench-a calls shoal_request() to bench-b, whose
 * handler answers with the same payload; both go direct, through the
 * bridges (docs/hosts.md). A first message each way (the type `ready`)
 * wires the path before the clock starts.
 *
 * CPUs: a system is a router (a dispatcher thread), a bridge and a group
 * process per host, six busy processes in all. Each system runs on its
 * side's CPU (`shoal run` started in that set, which its dispatcher,
 * bridge and group keep), as the plain relays' processes do: two hosts of
 * one CPU each; with --spread, on both of the sample's CPUs. Its file sets
 * router.yield (--router-yield), the setting docs/config.md gives for a
 * host with more busy processes than CPUs. The report says both; `pinned`
 * stays false for these rows (the side only starts the system).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/group.h>

#include "bench/net_bench.h"

#define MSG_DATA 1u
#define MSG_READY 2u
/* Messages per shoal_send_burst(). */
#define BURST 32u
/* How long a request may wait for its answer (a broken path fails the
 * sample, it does not hang it), and how long a system may take to stop. */
#define REQUEST_NS (INT64_C(5) * 1000000000)
#define STOP_TRIES 1000u
#define POLL_NS INT64_C(1000000)
/* Set in a system's environment (so its groups') for the direct row. */
#define DIRECT_ENV "SHOAL_BENCH_NET_DIRECT"

static const struct shoal_type types[] = {
	{ MSG_DATA, NET_PAYLOAD_MAX, "data" },
	{ MSG_READY, 8, "ready" },
};

static const char *const group_name[2] = { "bench-a", "bench-b" };

/* A group's process-local state: the harness's side, and the handler's. */
struct bgroup {
	struct net_side s;
	struct shoal_ctx *ctx;
	bool ready;                 /* a `ready` came (B: routed; A: answered) */
	bool last;                  /* B: the producer's last message came */
	bool got;                   /* B, round trip: a request answered */
	int err;                    /* B: the handler's first failure */
	uint64_t expect;            /* B: the next sequence number */
	unsigned char msg[NET_PAYLOAD_MAX];   /* B, round trip: the last request */
};

/* ---- the groups ---- */

static void on_data(struct bgroup *k, const struct shoal_msg *m)
{
	uint32_t payload = k->s.p->payload;
	int ret;

	if (m->len != payload) {
		k->err = net_fail(&k->s, -EBADMSG, "bridge: message %llu of %u bytes",
				  (unsigned long long)k->expect, m->len);
		return;
	}
	if (m->env->flags & SHOAL_ENV_REQUEST) {
		/* Answered here (a request left unanswered by its handler is
		 * answered -ECANCELED): net_pong() checks it when the poll
		 * returns, and its send is then a no-op. */
		memcpy(k->msg, m->data, payload);
		k->got = true;
		ret = shoal_respond(k->ctx, m, MSG_DATA, m->data, payload);
		if (ret < 0)
			k->err = net_fail(&k->s, ret, "bridge: respond: %s", shoal_strerror(ret));
		return;
	}
	ret = bench_msg_check(m->data, payload, k->expect++, &k->s.sink);
	if (ret < 0)
		k->err = net_fail(&k->s, ret, "bridge: message %llu out of order",
				  (unsigned long long)(k->expect - 1));
	k->last = ret == 1;
}

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct bgroup *k = a->user;

	if (k->err != 0)
		return;
	if (m->type == MSG_DATA) {
		on_data(k, m);
		return;
	}
	k->ready = true;
	if (m->env->flags & SHOAL_ENV_REQUEST)
		(void)shoal_respond(k->ctx, m, MSG_READY, m->data, m->len);
}

/* Poll until *flag or a handler failure; -ETIMEDOUT after REQUEST_NS.
 * Each poll spins, then sleeps (up to POLL_NS) as any group's does: six
 * processes share two CPUs here, and a group that spun would take one of
 * them from the bridges. One message a poll: B's handler answers a request
 * at once, so A's next request can come while the same poll still passes
 * over the mailbox (B's process preempted after its answer), and a poll
 * without a budget would hand it to the handler too, over the request
 * pong_recv() has not returned yet. */
static int poll_until(struct bgroup *k, const bool *flag)
{
	uint64_t limit = shoal__now_ns() + REQUEST_NS;

	while (!*flag && k->err == 0) {
		int ret = shoal_poll(k->ctx, 1, POLL_NS);

		if (ret < 0)
			return net_fail(&k->s, ret, "bridge: poll: %s", shoal_strerror(ret));
		if (ret == 0 && shoal__now_ns() > limit)
			return net_fail(&k->s, -ETIMEDOUT, "bridge: nothing came in 5 s");
	}
	return k->err;
}

static int group_progress(void *arg)
{
	struct bgroup *k = arg;

	(void)shoal_poll(k->ctx, 0, 0);
	return 0;
}

/* A, throughput: bursts of routed messages, or direct ones to `dest`
 * (SHOAL_ADDR_NONE: routed), until the time is up. */
static int tput_send(struct bgroup *k, uint64_t dest)
{
	static unsigned char buf[BURST][NET_PAYLOAD_MAX];
	uint32_t payload = k->s.p->payload;
	struct shoal_burst_msg burst[BURST];
	uint64_t ready = 0, seq = 0;
	bool last = false;
	int ret;

	for (uint32_t i = 0; i < BURST; i++) {
		bench_msg_fill(buf[i], payload);
		burst[i] = (struct shoal_burst_msg){ MSG_DATA, payload, buf[i] };
	}
	ret = shoal_send(k->ctx, MSG_READY, &ready, sizeof(ready));
	if (ret < 0)
		return net_fail(&k->s, ret, "bridge: send: %s", shoal_strerror(ret));
	net_side_ready(&k->s);
	while (!last) {
		uint32_t sent = 0;

		last = shoal__now_ns() >= k->s.deadline;
		for (uint32_t i = 0; i < BURST; i++)
			bench_msg_stamp(buf[i], payload,
					(seq + i) | (last && i + 1 == BURST ? BENCH_STOP : 0));
		ret = dest == SHOAL_ADDR_NONE ? shoal_send_burst(k->ctx, burst, BURST, &sent) :
			shoal_send_to_burst(k->ctx, dest, burst, BURST, &sent);
		if (ret < 0)
			return net_fail(&k->s, ret, "bridge: send burst: %s", shoal_strerror(ret));
		seq += BURST;
	}
	k->s.res->msgs = seq;
	net_meet(&k->s, NET_ROUND_DONE);
	return 0;
}

/* B, throughput: every message checked in order, to the producer's last. */
static int tput_recv(struct bgroup *k)
{
	int ret = poll_until(k, &k->ready);

	if (ret < 0)
		return ret;
	net_side_ready(&k->s);
	while (!k->last && k->err == 0)
		if ((ret = shoal_poll(k->ctx, 0, POLL_NS)) < 0)
			return net_fail(&k->s, ret, "bridge: poll: %s", shoal_strerror(ret));
	if (k->err != 0)
		return k->err;
	k->s.res->t_end = shoal__now_ns();
	k->s.res->msgs = k->expect;
	net_meet(&k->s, NET_ROUND_DONE);
	return 0;
}

struct requester {
	struct bgroup *k;
	uint64_t dest;
};

/*
 * One request. The first (`ready`) may reach host B before B's group has
 * attached: B's bridge then answers -EOWNERDEAD at once, as shoal_request()
 * does for a group of this host with no process; that one is asked again,
 * every millisecond, for REQUEST_NS at most.
 */
static int request(struct requester *q, uint32_t type, const void *msg, uint32_t len, void *back)
{
	struct shoal_reply reply = { .buf = back, .cap = NET_PAYLOAD_MAX };
	uint64_t limit = shoal__now_ns() + REQUEST_NS;
	int ret;

	while ((ret = shoal_request(q->k->ctx, q->dest, type, msg, len, REQUEST_NS, &reply)) ==
		       -EOWNERDEAD && type == MSG_READY && shoal__now_ns() < limit)
		usleep(1000);
	if (ret < 0)
		return net_fail(&q->k->s, ret, "bridge: request: %s", shoal_strerror(ret));
	if (!shoal_reply_is(&reply, type, len))
		return net_fail(&q->k->s, -EBADMSG, "bridge: a reply of type %u, %u bytes",
				reply.type, reply.len);
	return 0;
}

static int trip(void *arg, const void *msg, void *back)
{
	struct requester *q = arg;

	return request(q, MSG_DATA, msg, q->k->s.p->payload, back);
}

/* A, round trip: one `ready` request wires the path, then net_ping(). */
static int rtt_ping(struct bgroup *k, struct shoal_group *g)
{
	struct requester q = { k, shoal_group_lookup(g, group_name[1], SHOAL_SLOT_GROUP) };
	uint64_t ready = 0, back[NET_PAYLOAD_MAX / 8];
	int ret;

	if (q.dest == SHOAL_ADDR_NONE)
		return net_fail(&k->s, -ENOENT, "bridge: no group %s", group_name[1]);
	ret = request(&q, MSG_READY, &ready, sizeof(ready), back);
	if (ret < 0)
		return ret;
	ret = net_ping(&k->s, trip, &q);
	if (ret == 0)
		net_meet(&k->s, NET_ROUND_DONE);
	return ret;
}

static int pong_recv(void *arg, void *msg)
{
	struct bgroup *k = arg;
	int ret = poll_until(k, &k->got);

	k->got = false;
	if (ret == 0)
		memcpy(msg, k->msg, k->s.p->payload);
	return ret;
}

/* The handler answered already (on_data()). */
static int pong_send(void *arg, const void *msg)
{
	(void)arg;
	(void)msg;
	return 0;
}

/* B, round trip: answers, polling at the ready round for A's `ready`. */
static int rtt_pong(struct bgroup *k)
{
	int ret;

	k->s.ready_progress = group_progress;
	k->s.ready_arg = k;
	ret = net_pong(&k->s, pong_recv, pong_send, k);
	if (ret == 0)
		net_meet(&k->s, NET_ROUND_DONE);
	return ret;
}

static int group_role(struct bgroup *k, struct shoal_group *g)
{
	bool tput = k->s.p->kind == NET_TPUT;

	uint64_t dest = SHOAL_ADDR_NONE;

	net_meet(&k->s, NET_ROUND_LISTENING);
	if (tput && getenv(DIRECT_ENV) != NULL) {
		dest = shoal_group_lookup(g, group_name[1], SHOAL_SLOT_GROUP);
		if (dest == SHOAL_ADDR_NONE)
			return net_fail(&k->s, -ENOENT, "bridge: no group %s", group_name[1]);
	}
	if (k->s.side == 0)
		return tput ? tput_send(k, dest) : rtt_ping(k, g);
	return tput ? tput_recv(k) : rtt_pong(k);
}

int net_bridge_group_main(const char *ctl_fd)
{
	const char *name = getenv("SHOAL_GROUP");
	int side = name != NULL && strcmp(name, group_name[1]) == 0;
	struct bgroup k = { .s = { .side = side } };
	struct shoal_group_desc d = {
		.types = types, .n_types = sizeof(types) / sizeof(types[0]), .node = -1,
		.on_message = on_message, .user = &k,
	};
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct net_ctl *ctl;
	int ret;

	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE, MAP_SHARED, atoi(ctl_fd), 0);
	if (ctl == MAP_FAILED) {
		perror("shoal-bench-net: the control block");
		return 1;
	}
	k.s.ctl = ctl;
	k.s.p = &ctl->params;
	k.s.res = &ctl->res[side];
	ret = shoal_group_attach(&g, &d, NULL, &err);
	if (ret < 0) {
		net_fail(&k.s, ret, "bridge: attach: %.100s", err.msg);
		/* R1 as below. */
		shoal_store_release(&ctl->group_done[side], 2u);
		return 1;
	}
	k.ctx = shoal_group_worker(g, 0);
	ret = group_role(&k, g);
	/* Done: the side stops the system; until then, a group as any.
	 * R1: pairs with A1 in wait_group(): the results before the flag. */
	shoal_store_release(&ctl->group_done[side], ret < 0 ? 2u : 1u);
	while (shoal_poll(k.ctx, 0, -1) != -ESHUTDOWN)
		;
	shoal_group_detach(g);
	return 0;
}

/* ---- the side: the host's system ---- */

/* The system file, the same on both hosts but for nothing. */
static int write_file(const char *path, const struct net_params *p, const char *exe)
{
	FILE *f = fopen(path, "we");

	if (f == NULL)
		return -errno;
	fprintf(f, "system: bench-net\n");
	if (p->router_yield_us > 0)
		fprintf(f, "router: { yield: %uus }\n", (unsigned)p->router_yield_us);
	fprintf(f, "hosts:\n"
		"  link: { flush: %u }\n"
		"  list:\n"
		"    - { name: a, listen: \"%s:%u\" }\n"
		"    - { name: b, listen: \"%s:%u\" }\n"
		"types:\n", p->frame, p->addr[0], (unsigned)p->port, p->addr[1],
		(unsigned)p->port);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		fprintf(f, "  - { id: %u, name: %s, max_size: %u }\n", types[i].id, types[i].name,
			types[i].max_size);
	fprintf(f, "groups:\n"
		"  - name: %s\n"
		"    program: \"%s\"\n"
		"    host: a\n"
		"    restart: { policy: never }\n"
		"  - name: %s\n"
		"    program: \"%s\"\n"
		"    host: b\n"
		"    restart: { policy: never }\n"
		"    routes:\n"
		"      - { types: [data, ready] }\n", group_name[0], exe, group_name[1], exe);
	return fclose(f) == 0 ? 0 : -errno;
}

/* --callgrind: the name of a side's files, "ROW-PAYLOAD-HOST". */
static void cg_name(char *buf, size_t cap, const struct net_side *s, bool direct)
{
	snprintf(buf, cap, "%s/%s-%u-%s", s->p->callgrind,
		 direct ? "shoal-bridge-direct" : "shoal-bridge", (unsigned)s->p->payload,
		 s->side == 0 ? "a" : "b");
}

/* `shoal run --host a|b FILE` in dir, its output into dir/out, on the
 * side's CPU (--spread: both of the sample's); it gets SIGTERM if this
 * side dies. */
static pid_t start_run(struct net_side *s, const char *dir, const char *exe, bool direct)
{
	char file[256], out[256], shm[256];
	const char *host = s->side == 0 ? "a" : "b";
	cpu_set_t cpus;
	pid_t pid;

	snprintf(file, sizeof(file), "%s/system.yaml", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(shm, sizeof(shm), "%s/shm", dir);
	CPU_ZERO(&cpus);
	CPU_SET(s->p->cpu[s->side], &cpus);
	if (s->p->spread)
		CPU_SET(s->p->cpu[1 - s->side], &cpus);
	pid = fork();
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(126);
		setenv("SHOAL_SHM_DIR", shm, 1);
		setenv("UCX_NET_DEVICES", s->p->ifname[s->side], 1);
		if (direct)
			setenv(DIRECT_ENV, "1", 1);
		sched_setaffinity(0, sizeof(cpus), &cpus);
		if (s->p->callgrind[0] != '\0') {
			char skip[300], name[256], outf[300];

			/* The groups are this program: not counted, nor slowed. */
			snprintf(skip, sizeof(skip), "--trace-children-skip=%s", exe);
			cg_name(name, sizeof(name), s, direct);
			snprintf(outf, sizeof(outf), "--callgrind-out-file=%s.%%p", name);
			execlp("valgrind", "valgrind", "--tool=callgrind", "--trace-children=yes",
			       skip, outf, "--collect-atstart=no",
			       "--toggle-collect=shoal__bridge_run", "--toggle-collect=dispatcher_main",
			       SHOAL_BENCH_SHOAL_BIN, "run", "--status", "quiet", "--host", host, file,
			       (char *)NULL);
			_exit(127);
		}
		execl(SHOAL_BENCH_SHOAL_BIN, "shoal", "run", "--status", "quiet", "--host", host,
		      file, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Wait for this side's group to be done, or its system to end first. */
static int wait_group(struct net_side *s, pid_t run, const char *dir)
{
	int st;

	for (;;) {
		/* A1: pairs with R1 in net_bridge_group_main(). */
		uint32_t done = shoal_load_acquire(&s->ctl->group_done[s->side]);

		if (done != 0)
			return done == 1 ? 0 : -EIO;
		if (waitpid(run, &st, WNOHANG) == run)
			return net_fail(s, -ECHILD, "bridge: shoal run ended first (status %d), "
					"see %s/out", st, dir);
		usleep(1000);
	}
}

/* SIGTERM, then SIGKILL after STOP_TRIES ms. */
static void stop_run(pid_t run)
{
	kill(run, SIGTERM);
	for (unsigned i = 0; waitpid(run, NULL, WNOHANG) != run; i++) {
		if (i == STOP_TRIES)
			kill(run, SIGKILL);
		usleep(10000);
	}
}

/* --callgrind: the system's output (its bridge's counts) beside the
 * callgrind files, named as they are. */
static int keep_output(struct net_side *s, const char *dir, bool direct)
{
	char cmd[600], name[256];

	cg_name(name, sizeof(name), s, direct);
	snprintf(cmd, sizeof(cmd), "cp %s/out %s.out", dir, name);
	return system(cmd) == 0 ? 0 : net_fail(s, -EIO, "bridge: %.80s failed", cmd);
}

static int run_system(struct net_side *s, bool direct)
{
	char dir[] = "/dev/shm/shoal-bench-net-XXXXXX", path[256], exe[256];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	pid_t run;
	int ret;

	/* The groups run on both CPUs, not on this side's. */
	s->res->cpu = -1;
	if (n <= 0 || (size_t)n >= sizeof(exe) - 1)
		return net_fail(s, -ENAMETOOLONG, "bridge: where this program is");
	exe[n] = '\0';
	if (mkdtemp(dir) == NULL)
		return net_fail(s, -errno, "bridge: mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/shm", dir);
	if (mkdir(path, 0700) != 0)
		return net_fail(s, -errno, "bridge: mkdir %.60s: %s", path, strerror(errno));
	snprintf(path, sizeof(path), "%s/system.yaml", dir);
	if ((ret = write_file(path, s->p, exe)) < 0)
		return net_fail(s, ret, "bridge: writing %.60s: %s", path, strerror(-ret));
	run = start_run(s, dir, exe, direct);
	if (run < 0)
		return net_fail(s, -errno, "bridge: fork: %s", strerror(errno));
	ret = wait_group(s, run, dir);
	stop_run(run);
	if (ret == 0 && s->p->callgrind[0] != '\0')
		ret = keep_output(s, dir, direct);
	if (ret == 0) {
		char rm[300];

		snprintf(rm, sizeof(rm), "rm -rf %s", dir);
		ret = system(rm) == 0 ? 0 : net_fail(s, -EIO, "bridge: %.80s failed", rm);
	}
	return ret;
}

static int bridge_role(struct net_side *s)
{
	return run_system(s, false);
}

static int bridge_direct_role(struct net_side *s)
{
	return run_system(s, true);
}

const struct net_contender net_bridge = {
	.name = "shoal-bridge",
	.what = "Shoal end to end: `shoal run --host a` and `--host b` on one system file, "
		"a group on host A sending routed messages (shoal_send_burst(), 32 a call) "
		"through A's router and bridge, the link, B's bridge and router to a group "
		"on host B; round trip: shoal_request() from A's group to B's, answered in its "
		"handler, through both bridges; link flush at the frame size, every process "
		"on both CPUs",
	.batched = true,
	.role = {
		[NET_TPUT] = { bridge_role, bridge_role },
		[NET_RTT] = { bridge_role, bridge_role },
	},
	.shape_ref = { [NET_TPUT] = NET_ROUTED_REF },
};

const struct net_contender net_bridge_direct = {
	.name = "shoal-bridge-direct",
	.what = "as shoal-bridge, but the messages go direct (shoal_send_to_burst(), 32 a "
		"call, to B's group): A's group, A's bridge, the link, B's bridge, B's group, "
		"with neither router on the way (throughput only: shoal-bridge's round trip is "
		"direct already)",
	.batched = true,
	.role = {
		[NET_TPUT] = { bridge_direct_role, bridge_direct_role },
	},
};
