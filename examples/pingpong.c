/* SPDX-License-Identifier: MIT */
/*
 * pingpong: two groups in two processes, request/response.
 *
 *   pingpong --role pong   answers every ping with a pong (shoal_group_main)
 *   pingpong --role ping   sends requests to the "pong" group in a loop and
 *                          prints round-trip percentiles once a second
 *
 * Run it with: build/tools/shoal run examples/pingpong.yaml
 */
/* ISO C11 plus the POSIX calls used here (clock_gettime, sigaction, nanosleep). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pingpong_types.h"
#include "protocol.h"

PROTOCOL_CHECK_SIZES();

static void on_ping(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct ping p;

	/* Anything but a well-formed ping is left unanswered: its sender
	 * gets -ECANCELED (lifecycle rule 5 in shoal/group.h). */
	if (SHOAL_MSG_GET(m, MSG_PING, &p))
		shoal_respond(a->ctx, m, MSG_PONG, &p, sizeof(p));
}

static int run_pong(int argc, char **argv)
{
	struct shoal_group_desc d = {
		.types = msg_types, .n_types = MSG_N_TYPES, .node = -1,
		.on_message = on_ping,
	};

	return shoal_group_main(&d, argc, argv);
}

static void ignore(struct shoal_actor *a, const struct shoal_msg *m)
{
	(void)a;
	(void)m;
}

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void report(uint64_t *rtt, size_t n, uint64_t total)
{
	qsort(rtt, n, sizeof(*rtt), cmp_u64);
	printf("ping: %zu round trips/s, rtt p50 %.1f us, p99 %.1f us, max %.1f us "
	       "(%llu in all)\n", n, rtt[n / 2] / 1e3, rtt[n * 99 / 100] / 1e3, rtt[n - 1] / 1e3,
	       (unsigned long long)total);
	fflush(stdout);
}

static int run_ping(void)
{
	struct shoal_group_desc d = {
		.types = msg_types, .n_types = MSG_N_TYPES, .node = -1,
		.on_message = ignore,
	};
	struct sigaction sa = { .sa_handler = on_signal };
	static uint64_t rtt[1 << 20];
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t seq = 0, window = now_ns(), pong = 0;
	size_t n = 0;
	int ret;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	ret = shoal_group_attach(&g, &d, NULL, &err);
	if (ret < 0) {
		fprintf(stderr, "ping: cannot attach: %s\n", err.msg);
		return 1;
	}
	ctx = shoal_group_worker(g, 0);
	while (!interrupted) {
		struct ping p = { .seq = seq, .sent_ns = now_ns() }, back;
		struct shoal_reply reply = { .buf = &back, .cap = sizeof(back) };

		if (pong == SHOAL_ADDR_NONE)
			pong = shoal_group_lookup(g, "pong", SHOAL_SLOT_GROUP);
		ret = shoal_request(ctx, pong, MSG_PING, &p, sizeof(p), 1000000000, &reply);
		if (ret == 0 && !SHOAL_REPLY_IS(&reply, MSG_PONG, back))
			ret = -EPROTO;   /* answered, but not with a pong */
		if (ret == 0 && back.seq == seq) {
			if (n < sizeof(rtt) / sizeof(rtt[0]))
				rtt[n++] = now_ns() - p.sent_ns;
			seq++;
		} else if (ret == -EOWNERDEAD || ret == -ETIMEDOUT) {
			/* The pong process is restarting: wait for it, keep going. */
			struct timespec ts = { 0, 10000000 };

			nanosleep(&ts, NULL);
		} else if (ret < 0) {
			fprintf(stderr, "ping: request: %s\n", shoal_strerror(ret));
		}
		/* Handle anything else addressed to us; leave when told to stop. */
		if (shoal_poll(ctx, 0, 0) == -ESHUTDOWN)
			break;
		if (now_ns() - window >= 1000000000 && n > 0) {
			report(rtt, n, seq);
			n = 0;
			window = now_ns();
		}
	}
	shoal_group_detach(g);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--role") == 0) {
			if (strcmp(argv[i + 1], "ping") == 0)
				return run_ping();
			if (strcmp(argv[i + 1], "pong") == 0)
				return run_pong(argc - 2, argv + 2);
		}
	fprintf(stderr, "usage: %s --role ping|pong\n"
		"One side of the pingpong example; run it with\n"
		"  shoal run examples/pingpong.yaml\n", argv[0]);
	return 2;
}
