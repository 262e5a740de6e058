/* SPDX-License-Identifier: MIT */
/*
 * Requests, responses and direct messages between two hosts: two network
 * namespaces joined by a veth pair (tests/netns.c), each running `shoal run
 * --host a|b` on one file with its own shared-memory folder, as
 * bridge_hosts does. A requester on a asks a responder on b; the envelope
 * crosses unchanged (the responder sees the requester's own address, and
 * answers it through its bridge); direct and routed messages from a to b
 * arrive once each, in order, from that address; a responder that takes
 * nothing pushes back on its sender on a; the responder's process killed
 * with SIGKILL while a request waits ends that request with -EOWNERDEAD,
 * and its whole host killed (its `shoal run`, its bridge and the
 * responder) with -EHOSTDOWN, both before the timeout; later sends to that
 * host's group fail with -EHOSTDOWN, direct and routed, until it is back.
 * Requests made one at a time to idle bridges (asleep, with no link timer
 * due for a minute) are each answered well within that minute: a message
 * in an idle bridge's mailbox, or on its link, wakes it at once. Requests
 * of 64 B and 1 KiB, one at a time and thousands of them, reach the
 * responder once each and in order, one per poll of budget 1 (as a
 * ping-pong benchmark's server takes them), and each answer is its
 * request's payload. Notes whose envelope a hostile sender broke stop at
 * its host's bridge, counted malformed; the good ones around them cross.
 *
 * This program is also the groups' program (`--role requester|responder`),
 * so that the test needs nothing beside itself and `shoal`. The groups
 * write what they saw into log files the test reads. Runs as root; skips
 * visibly (exit 77) otherwise. Every wait has a deadline; the one duration
 * asserted ("before the timeout") has a margin of minutes against seconds.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/ring.h>
#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/control/config.h"
#include "runtime/layout.h"
#include "tests/netns.h"
#include "tests/testutil.h"

#define PORT 7410
#define WAIT_MS 60000
#define REQUESTS 200
#define NOTES 1000
#define FEEDS 500                   /* routed messages, after the notes */
#define HOLD UINT64_C(999999)       /* the request the responder never answers */
#define HOLD_TIMEOUT_S 300          /* that request's timeout: far beyond what it takes */
#define FLOOD_MAX 1000000           /* try_send_to's that never meet a full ring: a failure */
#define FLOOD_MORE 2000             /* blocking sends after the first full ring */
#define FULL_MS 2000                /* -EAGAIN this long in a row: the way is full */
#define IDLE_ASKS 20                /* requests to idle bridges, one at a time */
#define IDLE_GAP_US 100000          /* the pause before each: both bridges fall asleep */
/* Each one's timeout: far below the link timers of cfg_idle (a minute),
 * far above a round trip on a loaded machine (a millisecond). */
#define IDLE_TIMEOUT_S 20
#define ECHO_ROUNDS 1000            /* requests of each size, one at a time */
#define ECHO_BIG 1024u              /* the second size; the first is 64 B */
#define FORGE_EVERY 10u             /* mode forge: a broken note after every 10th good one */
#define FORGED UINT64_C(1000000)    /* the broken notes' sequence numbers, from here up */

enum { T_ASK = 1, T_NOTE = 2, T_FEED = 3, T_ECHO = 4 };

/* ---- the groups --------------------------------------------------------------- */

static const struct shoal_type types[] = {
	{ T_ASK, 8, "ask" }, { T_NOTE, 8, "note" }, { T_FEED, 8, "feed" },
	{ T_ECHO, ECHO_BIG, "echo" },
};
#define N_TYPES (sizeof(types) / sizeof(types[0]))
static int log_fd = -1;
static const char *stall_file;   /* the responder takes no note until it exists */

__attribute__((format(printf, 1, 2)))
static void logf_line(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (log_fd >= 0 && n > 0 && write(log_fd, line, (size_t)n) != n)
		_exit(5);
}

/* Echo request seq's size and bytes: seq, a pattern of it, ~seq. */
static uint32_t echo_len(uint64_t seq)
{
	return seq < ECHO_ROUNDS ? 64u : ECHO_BIG;
}

static void echo_fill(unsigned char *buf, uint64_t seq)
{
	uint32_t len = echo_len(seq);
	uint64_t inv = ~seq;

	for (uint32_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(seq * 31u + i);
	memcpy(buf, &seq, sizeof(seq));
	memcpy(buf + len - sizeof(inv), &inv, sizeof(inv));
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Echo requests the responder's handler took in its current shoal_poll()
 * (pong()): one at most, its budget. */
static unsigned echo_in_poll;

/* The responder's echo: request seq must be the one after the last, whole,
 * and the only one of its poll; its answer is its own payload. Logs what
 * is wrong, and the last one. */
static void responder_echo(struct shoal_actor *a, const struct shoal_msg *m)
{
	static uint64_t next;
	unsigned char want[ECHO_BIG];
	uint64_t seq = 0;

	if (m->len >= sizeof(seq))
		memcpy(&seq, m->data, sizeof(seq));
	if (++echo_in_poll > 1)
		logf_line("echo bad: %llu in the poll of %llu\n", (unsigned long long)seq,
			  (unsigned long long)next - 1);
	if (!(m->env->flags & SHOAL_ENV_REQUEST) || seq != next) {
		logf_line("echo bad: %llu (%u B, flags %#x) where %llu was due\n",
			  (unsigned long long)seq, m->len, (unsigned)m->env->flags,
			  (unsigned long long)next);
	} else {
		echo_fill(want, seq);
		if (m->len != echo_len(seq) || memcmp(m->data, want, m->len) != 0)
			logf_line("echo bad: %llu torn (%u B)\n", (unsigned long long)seq, m->len);
	}
	next = seq + 1;
	if (next == 2 * ECHO_ROUNDS)
		logf_line("echoed %llu\n", (unsigned long long)next);
	shoal_respond(a->ctx, m, T_ECHO, m->data, m->len);
}

/* The responder: answers seq with seq + 1 (HOLD: never, it sleeps in the
 * handler); logs every note with the group of its sender; echoes echoes. */
static void responder_msg(struct shoal_actor *a, const struct shoal_msg *m)
{
	uint64_t seq = 0;

	if (m->type == T_ECHO) {
		responder_echo(a, m);
		return;
	}

	if (m->len == sizeof(seq))
		memcpy(&seq, m->data, sizeof(seq));
	if (m->type == T_ASK && (m->env->flags & SHOAL_ENV_REQUEST)) {
		uint64_t r = seq + 1;

		if (seq == HOLD) {
			pid_t run_pid = getppid();

			logf_line("holding\n");
			/* Until killed, or its `shoal run` is gone (a failed case's
			 * teardown kills that alone): never left behind. */
			while (getppid() == run_pid)
				usleep(100000);
			_exit(0);
		}
		if (seq == 0)
			logf_line("asker %d\n", shoal_addr_group(m->env->sender));
		shoal_respond(a->ctx, m, T_ASK, &r, sizeof(r));
	} else if (m->type == T_NOTE) {
		while (stall_file != NULL && access(stall_file, F_OK) != 0)
			usleep(10000);
		logf_line("note %llu from %d\n", (unsigned long long)seq,
			  shoal_addr_group(m->env->sender));
	} else if (m->type == T_FEED) {
		logf_line("feed %llu from %d\n", (unsigned long long)seq,
			  shoal_addr_group(m->env->sender));
	}
}

/* One request, tried again while host b is not reachable yet. */
static int ask(struct shoal_ctx *ctx, uint64_t dest, uint64_t seq, int64_t timeout_ns)
{
	uint64_t r = 0, until = mono_ms() + WAIT_MS;
	struct shoal_reply rep = { .buf = &r, .cap = sizeof(r) };
	int ret;

	for (;;) {
		ret = shoal_request(ctx, dest, T_ASK, &seq, sizeof(seq), timeout_ns, &rep);
		if ((ret != -EHOSTDOWN && ret != -ETIMEDOUT) || seq == HOLD || mono_ms() > until)
			break;
		usleep(100000);
	}
	if (ret == 0 && (rep.len != sizeof(r) || r != seq + 1))
		return -EBADMSG;
	return ret;
}

/* Echo request seq: its answer must be its payload. */
static int echo(struct shoal_ctx *ctx, uint64_t dest, uint64_t seq)
{
	unsigned char msg[ECHO_BIG], back[ECHO_BIG];
	struct shoal_reply rep = { .buf = back, .cap = sizeof(back) };
	uint32_t len = echo_len(seq);
	int ret;

	echo_fill(msg, seq);
	ret = shoal_request(ctx, dest, T_ECHO, msg, len, 10 * INT64_C(1000000000), &rep);
	if (ret == 0 && (!shoal_reply_is(&rep, T_ECHO, len) || memcmp(back, msg, len) != 0))
		return -EBADMSG;
	return ret;
}

/*
 * Mode forge's broken note k: its envelope broken between shoal_reserve()
 * and shoal_commit(), as a hostile process could break it at any time: a
 * length that is not its record's, type 0, or a flag no sender sets, in
 * turn. Tried again while the way is full.
 */
static int forge(struct shoal_ctx *ctx, uint64_t dest, uint64_t k)
{
	uint64_t seq = FORGED + k;
	struct shoal_envelope *env;
	void *buf;
	int ret;

	while ((ret = shoal_reserve(ctx, dest, T_NOTE, sizeof(seq), &buf)) == -EAGAIN)
		usleep(1000);
	if (ret < 0)
		return ret;
	memcpy(buf, &seq, sizeof(seq));
	env = (struct shoal_envelope *)(void *)((unsigned char *)buf - sizeof(*env));
	if (k % 3 == 0)
		env->len += 8;
	else if (k % 3 == 1)
		env->type = 0;
	else
		env->flags |= 1u << 30;
	shoal_commit(ctx);
	return 0;
}

static int requester(const char *mode)
{
	struct shoal_group_desc d = { .types = types, .n_types = N_TYPES, .node = -1 };
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t dest, t0;
	int ret = 0;

	if (shoal_group_attach(&g, &d, NULL, &err) < 0) {
		fprintf(stderr, "requester: %s\n", err.msg);
		return 1;
	}
	ctx = shoal_group_worker(g, 0);
	dest = shoal_group_lookup(g, "resp", SHOAL_SLOT_GROUP);
	logf_line("me %d\n", shoal_group_id(g));
	for (uint64_t i = 0; i < REQUESTS && ret == 0; i++)
		ret = ask(ctx, dest, i, 10 * INT64_C(1000000000));
	logf_line("requests %d\n", ret);
	if (strcmp(mode, "flood") == 0) {
		uint64_t seq = 0, failing = 0;

		/* Until the way to the stalled responder is full: try_send_to
		 * refused for FULL_MS in a row. */
		while (ret == 0 && seq < FLOOD_MAX) {
			int r = shoal_try_send_to(ctx, dest, T_NOTE, &seq, sizeof(seq));

			if (r == 0) {
				seq++;
				failing = 0;
			} else if (r != -EAGAIN) {
				ret = r;
			} else if (failing == 0) {
				failing = mono_ms();
			} else if (mono_ms() - failing > FULL_MS) {
				break;
			} else {
				usleep(1000);
			}
		}
		logf_line("full after %llu %d\n", (unsigned long long)seq, ret);
		for (uint64_t i = 0; i < FLOOD_MORE && ret == 0; i++, seq++)
			ret = shoal_send_to(ctx, dest, T_NOTE, &seq, sizeof(seq));
		logf_line("flood %llu %d\n", (unsigned long long)seq, ret);
	} else if (strcmp(mode, "notes") == 0) {
		for (uint64_t i = 0; i < NOTES && ret == 0; i++)
			ret = shoal_send_to(ctx, dest, T_NOTE, &i, sizeof(i));
		logf_line("notes %d\n", ret);
		for (uint64_t i = 0; i < FEEDS && ret == 0; i++)
			ret = shoal_send(ctx, T_FEED, &i, sizeof(i));
		logf_line("feeds %d\n", ret);
	} else if (strcmp(mode, "forge") == 0) {
		uint64_t forged = 0;

		for (uint64_t i = 0; i < NOTES && ret == 0; i++) {
			ret = shoal_send_to(ctx, dest, T_NOTE, &i, sizeof(i));
			if (ret == 0 && i % FORGE_EVERY == FORGE_EVERY - 1)
				ret = forge(ctx, dest, forged++);
		}
		logf_line("forge %d\n", ret);
	} else if (strcmp(mode, "idle") == 0) {
		for (uint64_t i = 0; i < IDLE_ASKS && ret == 0; i++) {
			uint64_t r = 0;
			struct shoal_reply rep = { .buf = &r, .cap = sizeof(r) };

			usleep(IDLE_GAP_US);
			ret = shoal_request(ctx, dest, T_ASK, &i, sizeof(i),
					    IDLE_TIMEOUT_S * INT64_C(1000000000), &rep);
			if (ret == 0 && (rep.len != sizeof(r) || r != i + 1))
				ret = -EBADMSG;
		}
		logf_line("idle %d\n", ret);
	} else if (strcmp(mode, "echo") == 0) {
		uint64_t i;

		for (i = 0; i < 2 * ECHO_ROUNDS && ret == 0; i++)
			ret = echo(ctx, dest, i);
		logf_line("echo %d at %llu\n", ret, (unsigned long long)i);
	} else if (ret == 0) {
		uint64_t seq = HOLD;

		logf_line("hold start\n");
		t0 = mono_ms();
		ret = ask(ctx, dest, seq, HOLD_TIMEOUT_S * INT64_C(1000000000));
		logf_line("hold %d after %llu ms\n", ret, (unsigned long long)(mono_ms() - t0));
		logf_line("after %d %d %d\n", shoal_send_to(ctx, dest, T_NOTE, &seq, sizeof(seq)),
			  shoal_try_send_to(ctx, dest, T_NOTE, &seq, sizeof(seq)),
			  shoal_send(ctx, T_FEED, &seq, sizeof(seq)));
	}
	while (shoal_poll(ctx, 0, 100000000) != -ESHUTDOWN)
		;
	shoal_group_detach(g);
	return 0;
}

/*
 * The responder of the echo case, as a ping-pong benchmark's server runs
 * (bench/net_bridge.c): its own loop of polls of one message each, its
 * handler answering at once. The next request may come before that poll
 * returns; the budget leaves it to the next poll.
 */
static int pong(const struct shoal_group_desc *d)
{
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	int ret;

	if (shoal_group_attach(&g, d, NULL, &err) < 0) {
		fprintf(stderr, "responder: %s\n", err.msg);
		return 1;
	}
	ctx = shoal_group_worker(g, 0);
	do {
		echo_in_poll = 0;
		ret = shoal_poll(ctx, 1, 100000000);
	} while (ret != -ESHUTDOWN);
	shoal_group_detach(g);
	return 0;
}

static int group_main(int argc, char **argv)
{
	const char *role = "", *log = NULL, *mode = "notes";
	struct shoal_group_desc d = { .types = types, .n_types = N_TYPES, .node = -1,
				      .on_message = responder_msg };

	for (int i = 1; i + 1 < argc; i++) {
		if (strcmp(argv[i], "--role") == 0)
			role = argv[i + 1];
		else if (strcmp(argv[i], "--log") == 0)
			log = argv[i + 1];
		else if (strcmp(argv[i], "--mode") == 0)
			mode = argv[i + 1];
		else if (strcmp(argv[i], "--stall") == 0)
			stall_file = argv[i + 1];
	}
	if (log != NULL)
		log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
	if (strcmp(role, "requester") == 0)
		return requester(mode);
	if (strcmp(role, "responder") == 0 && strcmp(mode, "echo") == 0)
		return pong(&d);
	if (strcmp(role, "responder") == 0)
		return shoal_group_main(&d, argc, argv);
	fprintf(stderr, "usage: %s --role requester|responder --log FILE "
		"[--mode notes|hold|flood|idle|echo|forge] [--stall FILE]\n", argv[0]);
	return 2;
}

/* ---- the test ---------------------------------------------------------------- */

static struct test_netns hosts;
static const char *skip_reason;
static char self[PATH_MAX], dir[64], shm[2][96], out[2][128], cfg_notes[128], cfg_hold[128],
	    cfg_proc[128], cfg_flood[128], cfg_idle[128], cfg_echo[128], cfg_forge[128];
static char log_req[128], log_resp[128], stall[128];
static pid_t run[2];
static const char *const name[2] = { "a", "b" };

/* The file at `path` (test_netns_slurp()), to free(). */
static char *slurp(const char *path)
{
	char *text = test_netns_slurp(path);

	assert_non_null(text);
	return text;
}

static void show_outputs(void)
{
	for (int s = 0; s < 2; s++) {
		char *text = slurp(out[s]);

		fprintf(stderr, "--- host %s:\n%s\n", name[s], text);
		free(text);
	}
	for (int i = 0; i < 2; i++) {
		char *text = slurp(i == 0 ? log_req : log_resp);

		fprintf(stderr, "--- %s log:\n%s\n", i == 0 ? "requester" : "responder", text);
		free(text);
	}
}

/* Wait until file `path` holds `needle`; fail past WAIT_MS. */
static void expect_in(const char *path, const char *needle)
{
	for (int ms = 0; ms < WAIT_MS; ms += 50) {
		char *text = slurp(path);
		bool seen = strstr(text, needle) != NULL;

		free(text);
		if (seen)
			return;
		usleep(50000);
	}
	show_outputs();
	fail_msg("'%s' not seen in %s in time", needle, path);
}

/* `shoal run --host NAME` in side's namespace, with its own shm folder. */
static pid_t start(int side, const char *file)
{
	pid_t pid = test_netns_run_host(&hosts, side, name[side], shm[side], out[side], file);

	assert_true(pid > 0);
	return pid;
}

#define LINK_TIMERS "keepalive: 50ms, dead_after: 500ms"
/* No link timer due for a minute: an idle bridge has nothing to wake for
 * but its mailbox and its link. */
#define LINK_TIMERS_SLOW "keepalive: 60s, dead_after: 120s"

/* The system file: requester on a (in `mode`), responder on b (stalled
 * until `stall` exists, if given); links of `window` bytes, with `timers`. */
static int write_cfg(const char *path, const char *system, int port, const char *mode,
		     const char *window, const char *timers, const char *stall_on)
{
	char extra[160] = "";

	static char text[2 * PATH_MAX + 1024];

	if (stall_on != NULL)
		snprintf(extra, sizeof(extra), ", --stall, '%s'", stall_on);
	snprintf(text, sizeof(text),
		 "system: %s\nhosts:\n  down_after: 1s\n"
		 "  link: { window: %s, %s, backoff: 20ms,\n"
		 "          max_backoff: 200ms }\n"
		 "  list:\n    - { name: a, listen: '%s:%d' }\n    - { name: b, listen: '%s:%d' }\n"
		 "types:\n  - { id: 1, name: ask, max_size: 8 }\n"
		 "  - { id: 2, name: note, max_size: 8 }\n  - { id: 3, name: feed, max_size: 8 }\n"
		 "  - { id: 4, name: echo, max_size: 1024 }\n"
		 "groups:\n"
		 "  - { name: req, program: '%s',\n"
		 "      args: [--role, requester, --mode, %s, --log, '%s'], host: a }\n"
		 "  - { name: resp, program: '%s',\n"
		 "      args: [--role, responder, --mode, %s, --log, '%s'%s],\n"
		 "      host: b, routes: [ { types: [feed] } ] }\n",
		 system, window, timers, hosts.addr[0], port, hosts.addr[1], port, self, mode, log_req,
		 self, mode, log_resp, extra);
	return test_netns_write(path, text);
}

static int setup(void **state)
{
	ssize_t n;

	(void)state;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = '\0';
	if (test_netns_create(&hosts, "xhost", 79) < 0) {
		skip_reason = "could not make the namespaces (see above)";
		return 0;
	}
	if (test_netns_dirs("xhost", 2, dir, sizeof(dir), shm[0], sizeof(shm[0]), out[0],
			    sizeof(out[0])) < 0)
		return -1;
	snprintf(log_req, sizeof(log_req), "%s/req.log", dir);
	snprintf(log_resp, sizeof(log_resp), "%s/resp.log", dir);
	snprintf(cfg_notes, sizeof(cfg_notes), "%s/xn.yaml", dir);
	snprintf(cfg_hold, sizeof(cfg_hold), "%s/xh.yaml", dir);
	snprintf(cfg_proc, sizeof(cfg_proc), "%s/xp.yaml", dir);
	snprintf(cfg_flood, sizeof(cfg_flood), "%s/xf.yaml", dir);
	snprintf(cfg_idle, sizeof(cfg_idle), "%s/xi.yaml", dir);
	snprintf(cfg_echo, sizeof(cfg_echo), "%s/xe.yaml", dir);
	snprintf(cfg_forge, sizeof(cfg_forge), "%s/xg.yaml", dir);
	snprintf(stall, sizeof(stall), "%s/go", dir);
	if (write_cfg(cfg_notes, "xn", PORT, "notes", "1MiB", LINK_TIMERS, NULL) < 0 ||
	    write_cfg(cfg_hold, "xh", PORT + 1, "hold", "1MiB", LINK_TIMERS, NULL) < 0 ||
	    write_cfg(cfg_proc, "xp", PORT + 2, "hold", "1MiB", LINK_TIMERS, NULL) < 0 ||
	    write_cfg(cfg_idle, "xi", PORT + 4, "idle", "1MiB", LINK_TIMERS_SLOW, NULL) < 0 ||
	    write_cfg(cfg_echo, "xe", PORT + 5, "echo", "1MiB", LINK_TIMERS, NULL) < 0 ||
	    write_cfg(cfg_forge, "xg", PORT + 6, "forge", "1MiB", LINK_TIMERS, NULL) < 0)
		return -1;
	return write_cfg(cfg_flood, "xf", PORT + 3, "flood", "64KiB", LINK_TIMERS, stall);
}

static void stop_run(int side)
{
	if (run[side] > 0) {
		kill(run[side], SIGTERM);
		if (test_wait_pid(run[side], WAIT_MS) == -1) {
			kill(run[side], SIGKILL);
			test_wait_pid(run[side], 5000);
		}
		run[side] = 0;
	}
}

/* After each case: what a failed one left running is stopped. */
static int leave_nothing(void **state)
{
	(void)state;
	test_netns_stop_runs(run, 2);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_netns_teardown(&hosts, run, 2, (const char *const[]){ dir, shm[0], shm[1], NULL });
	return 0;
}

/* Fresh logs and outputs for a case. */
static void reset(void)
{
	const char *files[] = { out[0], out[1], log_req, log_resp };

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		unlink(files[i]);
}

/* The pid `shoal run` of side says it started for group `group` first. */
static pid_t started_pid(int side, const char *group)
{
	char needle[64], *text = slurp(out[side]), *p;
	pid_t pid = 0;

	snprintf(needle, sizeof(needle), "group %s: started pid ", group);
	p = strstr(text, needle);
	if (p != NULL)
		pid = (pid_t)atoi(p + strlen(needle));
	free(text);
	return pid;
}

/* A case's start: skipped without namespaces; else fresh logs and both
 * hosts running `file`. */
static void begin(const char *file)
{
	if (skip_reason) {
		fprintf(stderr, "skipped: %s\n", skip_reason);
		skip();
	}
	reset();
	run[0] = start(0, file);
	run[1] = start(1, file);
}

/* begin(), then until the requester's hold request waits on the responder. */
static void begin_hold(const char *file)
{
	begin(file);
	expect_in(log_req, "hold start\n");
	expect_in(log_resp, "holding\n");
}

/* What the request held by the responder returned, and after how long. */
static void hold_result(const char *text, int *ret, unsigned long long *ms)
{
	const char *p = strstr(text, "hold start\n");

	assert_non_null(p);
	p = strstr(p, "\nhold ");
	assert_non_null(p);
	assert_int_equal(sscanf(p + 1, "hold %d after %llu ms", ret, ms), 2);
}

/*
 * After both hosts stopped: the responder saw the requester's own address
 * (not its bridge's) in a request, and `kind`s ("note": direct, "feed":
 * routed) 0 .. n - 1 from it, each once, in order.
 */
static void check_seq(const char *kind, uint64_t n)
{
	char *text, *p, line[16];
	int me = -1, asker = -1;
	uint64_t next = 0;

	text = slurp(log_req);
	assert_int_equal(sscanf(text, "me %d", &me), 1);
	free(text);
	text = slurp(log_resp);
	p = strstr(text, "asker ");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "asker %d", &asker), 1);
	assert_int_equal(asker, me);
	snprintf(line, sizeof(line), "\n%s ", kind);
	for (p = text; (p = strstr(p, line)) != NULL; p++) {
		unsigned long long seq;
		int from;

		assert_int_equal(sscanf(p + strlen(line), "%llu from %d", &seq, &from), 2);
		if (seq != next || from != me) {
			show_outputs();
			fail_msg("%s %llu from %d where %s %llu from %d was due", kind, seq, from,
				 kind, (unsigned long long)next, me);
		}
		next++;
	}
	assert_int_equal(next, n);
	free(text);
}

/* Wait until the responder logged `kind` `seq`. */
static void expect_seq(const char *kind, uint64_t seq)
{
	char last[64];

	snprintf(last, sizeof(last), "\n%s %llu from ", kind, (unsigned long long)seq);
	expect_in(log_resp, last);
}

/* Look at host `side`'s shared memory from here: returns what to give
 * shm_leave() to look at this process's again. */
static char *shm_enter(int side)
{
	char *saved = getenv("SHOAL_SHM_DIR");

	saved = saved != NULL ? strdup(saved) : NULL;
	setenv("SHOAL_SHM_DIR", shm[side], 1);
	return saved;
}

static void shm_leave(char *saved)
{
	if (saved != NULL)
		setenv("SHOAL_SHM_DIR", saved, 1);
	else
		unsetenv("SHOAL_SHM_DIR");
	free(saved);
}

/*
 * Every direct ring in `group`'s mailbox on host `side` of system `system`:
 * how many, each checked to have `cap` bytes of data.
 */
static unsigned direct_rings_of(int side, const char *system, const char *group, uint32_t cap)
{
	char seg_name[SHOAL_SEG_NAME_MAX], *saved = shm_enter(side);
	struct shoal_seg seg;
	unsigned n = 0;

	assert_int_equal(shoal__name_mailbox(seg_name, system, group), 0);
	assert_int_equal(shoal_seg_attach(&seg, seg_name, SHOAL_SEG_RDONLY, NULL), 0);
	for (uint32_t i = 0; i < shoal_seg_dir_count(&seg); i++) {
		struct shoal_seg_region r;
		struct shoal_ring_stats st;
		void *mem;

		if (shoal_seg_region_at(&seg, i, &r) < 0 || r.kind != SHOAL_SEG_KIND_RING ||
		    r.tag.role != SHOAL__RING_DIRECT)
			continue;
		mem = shoal_seg_ptr(&seg, r.off, r.len, 128);
		assert_non_null(mem);
		assert_int_equal(shoal_ring_stats(mem, r.len, &st, NULL), 0);
		if (st.capacity != cap)
			fail_msg("%s's ring %s on host %d: %u bytes, not %u", group, r.name, side,
				 st.capacity, cap);
		n++;
	}
	shoal_seg_detach(&seg);
	shm_leave(saved);
	return n;
}

/* Records the bridge of host `side` (system `system`) counted malformed in
 * its mailbox, over its workers. */
static uint64_t bridge_malformed(int side, const char *system)
{
	char seg_name[SHOAL_SEG_NAME_MAX], *saved = shm_enter(side);
	struct shoal__mbx_hdr *h;
	struct shoal_seg seg;
	uint64_t n = 0;

	assert_int_equal(shoal__name_mailbox(seg_name, system, "bridge"), 0);
	assert_int_equal(shoal_seg_attach(&seg, seg_name, SHOAL_SEG_RDONLY, NULL), 0);
	h = shoal__mailbox_hdr(&seg);
	assert_non_null(h);
	for (uint32_t w = 0; w < h->n_workers; w++)
		n += atomic_load(&h->w[w].malformed);
	shoal_seg_detach(&seg);
	shm_leave(saved);
	return n;
}

/* How long a request to another host's group spins on host `side`, as the
 * router wrote it in the registry of system `system`. */
static uint32_t remote_spin_of(int side, const char *system)
{
	char *saved = shm_enter(side);
	struct shoal__registry reg;
	uint32_t ns;

	assert_int_equal(shoal__registry_attach(&reg, system, SHOAL_SEG_RDONLY, NULL), 0);
	ns = atomic_load(&reg.hdr->remote_spin_ns);
	shoal_seg_detach(&reg.seg);
	shm_leave(saved);
	return ns;
}

static void xhost_requests_and_notes_cross_with_their_envelope(void **state)
{
	(void)state;
	begin(cfg_notes);
	expect_in(log_req, "requests 0\n");
	expect_in(log_req, "notes 0\n");
	expect_in(log_req, "feeds 0\n");
	expect_seq("note", NOTES - 1);
	expect_seq("feed", FEEDS - 1);
	/* The rings to and from the bridges carry every message that crosses
	 * hosts direct: an inbound ring's capacity, not a direct ring's. */
	assert_true(direct_rings_of(0, "xn", "bridge", SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT) > 0);
	assert_true(direct_rings_of(1, "xn", "resp", SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT) > 0);
	/* Requests across hosts spin as long as the bridges (hosts.link.spin,
	 * its default here). */
	assert_int_equal(remote_spin_of(0, "xn"), SHOAL__CFG_LINK_SPIN_NS);
	assert_int_equal(remote_spin_of(1, "xn"), SHOAL__CFG_LINK_SPIN_NS);
	stop_run(0);
	stop_run(1);
	check_seq("note", NOTES);
	check_seq("feed", FEEDS);
}

/*
 * A responder that takes nothing: its ring on b fills, then the link's
 * window (the far bridge holds what it cannot write), then the bridge's
 * ring on a, and try_send_to says -EAGAIN at the sender; blocking sends
 * wait. Once the responder takes again, every note accepted arrives once,
 * in order.
 */
static void xhost_full_responder_pushes_back_on_the_sender(void **state)
{
	char *text, *p;
	unsigned long long full = 0, total = 0;
	int ret = 1;

	(void)state;
	unlink(stall);
	begin(cfg_flood);
	expect_in(log_req, "full after ");
	text = slurp(log_req);
	p = strstr(text, "full after ");
	assert_int_equal(sscanf(p, "full after %llu %d", &full, &ret), 2);
	free(text);
	assert_int_equal(ret, 0);
	if (full == 0 || full >= FLOOD_MAX) {
		show_outputs();
		fail_msg("%llu notes taken before the way was full", full);
	}
	assert_int_equal(test_netns_write(stall, "go\n"), 0);
	expect_in(log_req, "\nflood ");
	text = slurp(log_req);
	p = strstr(text, "\nflood ");
	assert_int_equal(sscanf(p + 1, "flood %llu %d", &total, &ret), 2);
	free(text);
	assert_int_equal(ret, 0);
	assert_int_equal(total, full + FLOOD_MORE);
	expect_seq("note", total - 1);
	stop_run(0);
	stop_run(1);
	check_seq("note", total);
}

static void xhost_host_killed_ends_request_with_hostdown(void **state)
{
	char *text, *p;
	pid_t victims[3];
	int ret = 0, s1 = 0, s2 = 0, s3 = 0;
	unsigned long long ms = 0;

	(void)state;
	begin_hold(cfg_hold);
	/* Host b goes at once: its shoal run, its bridge, the responder. */
	victims[0] = started_pid(1, "bridge");
	victims[1] = started_pid(1, "resp");
	victims[2] = run[1];
	for (int i = 0; i < 3; i++) {
		assert_true(victims[i] > 0);
		kill(victims[i], SIGKILL);
	}
	test_wait_pid(run[1], 5000);
	run[1] = 0;
	expect_in(log_req, "\nafter ");
	expect_in(out[0], "host b: away longer than hosts.down_after");
	text = slurp(log_req);
	hold_result(text, &ret, &ms);
	assert_int_equal(ret, -EHOSTDOWN);
	/* Before the timeout: minutes of margin against the seconds it takes. */
	assert_true(ms < HOLD_TIMEOUT_S * 1000ULL / 2);
	p = strstr(text, "\nafter ");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "\nafter %d %d %d", &s1, &s2, &s3), 3);
	assert_int_equal(s1, -EHOSTDOWN);
	assert_int_equal(s2, -EHOSTDOWN);
	assert_int_equal(s3, -EHOSTDOWN);
	free(text);
	/* Host b again: the link comes back, and with it its groups. */
	run[1] = start(1, cfg_hold);
	expect_in(out[0], "host b: back; its groups reachable again");
	stop_run(0);
	stop_run(1);
}

static void xhost_responder_killed_ends_request_with_ownerdead(void **state)
{
	char *text;
	pid_t victim;
	int ret = 0;
	unsigned long long ms = 0;

	(void)state;
	begin_hold(cfg_proc);
	/* Only the responder's process: its host and its bridge stay. */
	victim = started_pid(1, "resp");
	assert_true(victim > 0);
	kill(victim, SIGKILL);
	expect_in(log_req, "\nafter ");
	text = slurp(log_req);
	hold_result(text, &ret, &ms);
	assert_int_equal(ret, -EOWNERDEAD);
	assert_true(ms < HOLD_TIMEOUT_S * 1000ULL / 2);
	free(text);
	stop_run(0);
	stop_run(1);
	text = slurp(out[1]);
	/* Exactly one: the requests answered before it were watched no more
	 * once their responses went back (a bare "1 requests" would also
	 * match "201 requests"). */
	if (strstr(text, "host; 1 requests brought in answered -EOWNERDEAD") == NULL) {
		show_outputs();
		fail_msg("the bridge of b did not count one request answered -EOWNERDEAD");
	}
	free(text);
}

/* What the requester said last on its line "word RET ...": RET. */
static int requester_said(const char *word)
{
	char needle[32], *text, *p;
	int ret = 1;

	snprintf(needle, sizeof(needle), "\n%s ", word);
	expect_in(log_req, needle);
	text = slurp(log_req);
	p = strstr(text, needle);
	assert_int_equal(sscanf(p + strlen(needle), "%d", &ret), 1);
	free(text);
	return ret;
}

/*
 * Both bridges idle before each request: b's wakes for it on its link, a's
 * for the response; a's for the request in its mailbox, b's for the
 * response in its own. A bridge that slept until its next link timer (a
 * minute here) would leave the request to its timeout (20 s).
 */
static void xhost_idle_bridges_wake_for_each_message(void **state)
{
	int ret;

	(void)state;
	begin(cfg_idle);
	expect_in(log_req, "requests 0\n");
	ret = requester_said("idle");
	if (ret != 0) {
		show_outputs();
		fail_msg("a request to idle bridges: %s", strerror(-ret));
	}
	stop_run(0);
	stop_run(1);
}

/*
 * Round trips one after the other, as a ping-pong benchmark makes them:
 * each request reaches the responder once, after the one before it and
 * whole, at 64 B and at 1 KiB, each alone in a poll of budget 1 (pong()),
 * and each answer is that request's payload.
 */
static void xhost_requests_one_at_a_time_arrive_once_in_order(void **state)
{
	char *text;
	int ret;

	(void)state;
	begin(cfg_echo);
	ret = requester_said("echo");
	text = slurp(log_resp);
	if (ret != 0 || strstr(text, "echo bad") != NULL || strstr(text, "echoed ") == NULL) {
		show_outputs();
		fail_msg("round trips one at a time: the requester's last %s, the responder's "
			 "log above", strerror(-ret));
	}
	free(text);
	stop_run(0);
	stop_run(1);
}

/*
 * A hostile sender on a: after every tenth good note, one whose envelope it
 * broke after shoal_reserve() (a length not its record's, type 0, a flag
 * no sender sets). a's bridge refuses each, whether it read that record in
 * a run (its run reader, runtime/bridge/bridge_out.c) or alone, and counts it
 * malformed in its mailbox; it carries every good note, and b's responder
 * sees each once, in order, and nothing else.
 */
static void xhost_forged_envelopes_stop_at_the_senders_bridge(void **state)
{
	uint64_t forged = NOTES / FORGE_EVERY, malformed = 0;

	(void)state;
	begin(cfg_forge);
	expect_in(log_req, "requests 0\n");
	assert_int_equal(requester_said("forge"), 0);
	expect_seq("note", NOTES - 1);
	/* The last good note came after the last broken one. */
	for (int ms = 0; ms < WAIT_MS && (malformed = bridge_malformed(0, "xg")) < forged; ms += 50)
		usleep(50000);
	if (malformed != forged) {
		show_outputs();
		fail_msg("a's bridge counted %llu malformed records, %llu were sent",
			 (unsigned long long)malformed, (unsigned long long)forged);
	}
	stop_run(0);
	stop_run(1);
	check_seq("note", NOTES);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(xhost_requests_and_notes_cross_with_their_envelope,
					  leave_nothing),
		cmocka_unit_test_teardown(xhost_full_responder_pushes_back_on_the_sender,
					  leave_nothing),
		cmocka_unit_test_teardown(xhost_host_killed_ends_request_with_hostdown,
					  leave_nothing),
		cmocka_unit_test_teardown(xhost_responder_killed_ends_request_with_ownerdead,
					  leave_nothing),
		cmocka_unit_test_teardown(xhost_idle_bridges_wake_for_each_message,
					  leave_nothing),
		cmocka_unit_test_teardown(xhost_requests_one_at_a_time_arrive_once_in_order,
					  leave_nothing),
		cmocka_unit_test_teardown(xhost_forged_envelopes_stop_at_the_senders_bridge,
					  leave_nothing),
	};
	const char *why;

	if (argc > 1 && strcmp(argv[1], "--role") == 0)
		return group_main(argc, argv);
	why = test_netns_unavailable();
	if (why) {
		printf("bridge_xhost: skipped: %s\n", why);
		return TEST_CHILD_SKIP;   /* meson's "skipped" */
	}
	if (getenv("SHOAL_BIN") == NULL) {
		printf("bridge_xhost: skipped: SHOAL_BIN is not set\n");
		return TEST_CHILD_SKIP;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
