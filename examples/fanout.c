/* SPDX-License-Identifier: MIT */
/*
 * fanout: one producer group, N consumer groups; the router sends each
 * message to the consumer whose route says key % N == i (the shape of the
 * benchmark in elfo's router-flattening change).
 *
 *   fanout --role producer [--rate N]  routed sends, key = sequence number
 *   fanout --role consumer             counts what it receives (bursts in
 *                                      one call: on_batch), checks the
 *                                      order, prints a summary when it stops
 *
 * Run it with: build/tools/shoal run examples/fanout.yaml
 */
/* ISO C11 plus the POSIX calls used here (clock_gettime, sigaction). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fanout_types.h"
#include "protocol.h"

PROTOCOL_CHECK_SIZES();

struct tally {
	uint64_t count;
	uint64_t last_seq;
	uint64_t out_of_order;
	uint64_t calls;              /* handler calls: a batch is one */
};

static void take_work(struct tally *t, const struct shoal_msg *m)
{
	struct work w;

	if (!SHOAL_MSG_GET(m, MSG_WORK, &w))
		return;
	if (t->count > 0 && w.seq <= t->last_seq)
		t->out_of_order++;
	t->last_seq = w.seq;
	t->count++;
}

static void on_work(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct tally *t = a->state;

	t->calls++;
	take_work(t, m);
}

/* Messages that came together, in one call (shoal_group_desc.on_batch). */
static void on_work_batch(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n)
{
	struct tally *t = a->state;

	t->calls++;
	for (uint32_t i = 0; i < n; i++)
		take_work(t, &msgs[i]);
}

static int tally_start(struct shoal_actor *a)
{
	a->state = calloc(1, sizeof(struct tally));
	return a->state == NULL;
}

static void tally_stop(struct shoal_actor *a)
{
	struct tally *t = a->state;
	const char *name = getenv("SHOAL_GROUP");

	printf("%s: received %llu messages, %llu out of order, in %llu handler calls\n",
	       name ? name : "consumer", (unsigned long long)t->count,
	       (unsigned long long)t->out_of_order, (unsigned long long)t->calls);
	fflush(stdout);
	free(t);
}

static int run_consumer(int argc, char **argv)
{
	struct shoal_group_desc d = {
		.types = msg_types, .n_types = MSG_N_TYPES, .node = -1,
		.on_message = on_work, .on_start = tally_start, .on_stop = tally_stop,
		.on_batch = on_work_batch,
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

static int run_producer(uint64_t rate)
{
	struct shoal_group_desc d = {
		.types = msg_types, .n_types = MSG_N_TYPES, .node = -1,
		.on_message = ignore,
	};
	struct sigaction sa = { .sa_handler = on_signal };
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t seq = 0, start = now_ns(), window = start, window_seq = 0;
	int ret;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* As shoal_group_main() does for a group: if whoever reads our
	 * reports goes away, we lose the reports, not our life. */
	signal(SIGPIPE, SIG_IGN);
	ret = shoal_group_attach(&g, &d, NULL, &err);
	if (ret < 0) {
		fprintf(stderr, "producer: cannot attach: %s\n", err.msg);
		return 1;
	}
	ctx = shoal_group_worker(g, 0);
	while (!interrupted) {
		struct work w = { .key = seq, .seq = seq };

		/* Pace to `rate` messages per second when asked. */
		if (rate != 0 && seq * 1000000000u / rate > now_ns() - start) {
			if (shoal_poll(ctx, 0, 100000) == -ESHUTDOWN)
				break;
			continue;
		}
		ret = shoal_send(ctx, MSG_WORK, &w, sizeof(w));
		if (ret == -ESHUTDOWN)
			break;
		if (ret == -EHOSTUNREACH) {
			/* No consumer subscribed yet. */
			if (shoal_poll(ctx, 0, 10000000) == -ESHUTDOWN)
				break;
			continue;
		}
		if (ret < 0) {
			fprintf(stderr, "producer: send: %s\n", shoal_strerror(ret));
			break;
		}
		seq++;
		if ((seq & 1023) == 0 && shoal_poll(ctx, 0, 0) == -ESHUTDOWN)
			break;
		if ((seq & 1023) == 0 && now_ns() - window >= 1000000000) {
			printf("producer: %.0f messages/s (%llu sent)\n",
			       (double)(seq - window_seq) * 1e9 / (double)(now_ns() - window),
			       (unsigned long long)seq);
			fflush(stdout);
			window = now_ns();
			window_seq = seq;
		}
	}
	printf("producer: sent %llu messages\n", (unsigned long long)seq);
	shoal_group_detach(g);
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = NULL;
	uint64_t rate = 0;

	for (int i = 1; i + 1 < argc; i++) {
		if (strcmp(argv[i], "--role") == 0)
			role = argv[i + 1];
		if (strcmp(argv[i], "--rate") == 0)
			rate = strtoull(argv[i + 1], NULL, 10);
	}
	if (role != NULL && strcmp(role, "producer") == 0)
		return run_producer(rate);
	if (role != NULL && strcmp(role, "consumer") == 0)
		return run_consumer(1, argv);
	fprintf(stderr, "usage: %s --role producer [--rate N] | --role consumer\n"
		"One side of the fanout example; run it with\n"
		"  shoal run examples/fanout.yaml\n", argv[0]);
	return 2;
}
