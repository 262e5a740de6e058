/* SPDX-License-Identifier: MIT */
/*
 * A group program for the `shoal run` tests (public API only):
 *   --role producer --n N [--first F] [--rate R] [--alternate]
 *        sends N routed messages (type 3 "work", or alternately 3 and 1 with
 *        --alternate), key = sequence number (F, F+1, ...; F defaults to 0),
 *        prints "producer: sent N", then waits to be stopped (a send that
 *        fails prints it too, then exits 1)
 *   --role consumer [--log FILE] [--stop-file FILE] [--spread K] [--slow US]
 *        appends "type seq" per message to FILE; at stop appends its group
 *        name to the stop file; with --spread, message seq goes to actor
 *        seq % K (so that workers forward to each other); with --slow,
 *        sleeps US microseconds per message
 *   --role crasher
 *        exits with status 3 right after attaching
 *   --role asker --to GROUP
 *        sends requests with no timeout to actor 0 of GROUP, one after the
 *        other, until one ends with -ESHUTDOWN (then exits 0)
 *   --trap-term
 *        SIGTERM only sets a flag the producer reads between sends (as
 *        examples/fanout.c does), so it cannot end a blocked send or wait
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shoal.h>

static const struct shoal_type types[] = {
	{ 1, 16, "ping" },
	{ 3, 64, "work" },
};

struct work {
	uint64_t key;
	uint64_t seq;
};

static int log_fd = -1;
static const char *stop_file;
static long slow_us;
static volatile sig_atomic_t terminated;

static void on_term(int sig)
{
	(void)sig;
	terminated = 1;
}

static void append(int fd, const char *line)
{
	size_t len = strlen(line);

	if (write(fd, line, len) != (ssize_t)len)
		_exit(20);
}

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct work w;
	char line[64];

	(void)a;
	if (m->len != sizeof(w) || log_fd < 0)
		return;
	memcpy(&w, m->data, sizeof(w));
	snprintf(line, sizeof(line), "%u %llu\n", m->type, (unsigned long long)w.seq);
	append(log_fd, line);
	if (slow_us > 0) {
		struct timespec ts = { .tv_sec = slow_us / 1000000,
				       .tv_nsec = slow_us % 1000000 * 1000 };

		nanosleep(&ts, NULL);
	}
}

static unsigned spread;

/* --spread: actor seq % K, whichever worker the message arrived on. */
static void spread_route(const struct shoal_msg *m, struct shoal_outcome *out, void *user)
{
	struct work w;

	(void)user;
	if (m->len != sizeof(w))
		return;
	memcpy(&w, m->data, sizeof(w));
	out->slots[0] = (uint16_t)(w.seq % spread);
}

static void on_stop(struct shoal_actor *a)
{
	char line[64];
	int fd;

	(void)a;
	if (stop_file == NULL)
		return;
	fd = open(stop_file, O_WRONLY | O_APPEND | O_CREAT, 0600);
	if (fd < 0)
		return;
	snprintf(line, sizeof(line), "%s\n", getenv("SHOAL_GROUP"));
	append(fd, line);
	close(fd);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int producer(uint64_t n, uint64_t first, uint64_t rate, int alternate)
{
	struct shoal_group_desc d = { .types = types, .n_types = 2, .node = -1,
				      .on_message = on_message };
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t start = now_ns(), sent = 0;

	if (shoal_group_attach(&g, &d, NULL, &err) < 0) {
		fprintf(stderr, "producer: %s\n", err.msg);
		return 1;
	}
	ctx = shoal_group_worker(g, 0);
	while (sent < n && !terminated) {
		struct work w = { .key = first + sent, .seq = first + sent };
		uint32_t type = alternate && (sent % 2) ? 1 : 3;
		int ret;

		if (rate && sent * 1000000000u / rate > now_ns() - start) {
			if (shoal_poll(ctx, 0, 50000) == -ESHUTDOWN)
				break;
			continue;
		}
		ret = shoal_send(ctx, type, &w, type == 1 ? 16 : sizeof(w));
		if (ret == -EHOSTUNREACH) {
			shoal_poll(ctx, 0, 1000000);   /* routes not published yet */
			continue;
		}
		if (ret < 0) {
			fprintf(stderr, "producer: send: %s\n", shoal_strerror(ret));
			printf("producer: sent %llu\n", (unsigned long long)sent);
			shoal_group_detach(g);
			return 1;
		}
		sent++;
	}
	printf("producer: sent %llu\n", (unsigned long long)sent);
	fflush(stdout);
	/* Done: stay attached until told to stop. */
	while (shoal_poll(ctx, 0, 100000000) != -ESHUTDOWN)
		;
	shoal_group_detach(g);
	return 0;
}

static int asker(const char *to)
{
	struct shoal_group_desc d = { .types = types, .n_types = 2, .node = -1,
				      .on_message = on_message };
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t dest = 0;
	int ret = 0;

	if (shoal_group_attach(&g, &d, NULL, &err) < 0) {
		fprintf(stderr, "asker: %s\n", err.msg);
		return 1;
	}
	ctx = shoal_group_worker(g, 0);
	do {
		char ping[16] = "ping", buf[16];
		struct shoal_reply r = { .buf = buf, .cap = sizeof(buf) };

		/* An address names one process of the group: looked up again
		 * after that process is gone (-ESTALE, -EOWNERDEAD), and until
		 * the group has one (a lookup before it first attached names
		 * no process that will ever answer). */
		if (dest == 0 || ret == -ESTALE || ret == -EOWNERDEAD)
			dest = shoal_group_lookup(g, to, 0);
		ret = dest == 0 ? -ENOENT : shoal_request(ctx, dest, 1, ping, sizeof(ping), -1, &r);
		/* Unanswered (the consumer does not respond) is the common
		 * case; anything else waits a little, which also notices a
		 * router gone. */
		if (ret < 0 && ret != -ECANCELED && ret != -ENOMSG && ret != -ESHUTDOWN &&
		    shoal_poll(ctx, 0, 1000000) == -ESHUTDOWN)
			ret = -ESHUTDOWN;
	} while (ret != -ESHUTDOWN);
	shoal_group_detach(g);
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = "", *log = NULL, *to = "";
	uint64_t n = 0, first = 0, rate = 0;
	int alternate = 0;
	struct shoal_group_desc d = { .types = types, .n_types = 2, .node = -1,
				      .on_message = on_message, .on_stop = on_stop };

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";

		if (strcmp(argv[i], "--role") == 0)
			role = v;
		else if (strcmp(argv[i], "--n") == 0)
			n = strtoull(v, NULL, 10);
		else if (strcmp(argv[i], "--first") == 0)
			first = strtoull(v, NULL, 10);
		else if (strcmp(argv[i], "--rate") == 0)
			rate = strtoull(v, NULL, 10);
		else if (strcmp(argv[i], "--to") == 0)
			to = v;
		else if (strcmp(argv[i], "--log") == 0)
			log = v;
		else if (strcmp(argv[i], "--stop-file") == 0)
			stop_file = v;
		else if (strcmp(argv[i], "--spread") == 0)
			spread = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(argv[i], "--slow") == 0)
			slow_us = strtol(v, NULL, 10);
		else if (strcmp(argv[i], "--alternate") == 0)
			alternate = 1;
		else if (strcmp(argv[i], "--trap-term") == 0)
			signal(SIGTERM, on_term);
	}
	if (strcmp(role, "producer") == 0)
		return producer(n, first, rate, alternate);
	if (strcmp(role, "asker") == 0)
		return asker(to);
	if (strcmp(role, "crasher") == 0) {
		struct shoal_group *g;

		if (shoal_group_attach(&g, &d, NULL, NULL) == 0)
			shoal_group_detach(g);
		return 3;
	}
	if (strcmp(role, "holder") == 0) {
		/* A consumer that forks a child which outlives it for a while,
		 * holding its control connection open (as after system()). */
		struct shoal_group *g;
		int ret;

		if (shoal_group_attach(&g, &d, NULL, NULL) != 0)
			return 1;
		if (fork() == 0) {
			sleep(15);
			_exit(0);
		}
		printf("holder: a child holds the connection\n");
		fflush(stdout);
		ret = shoal_group_run(g);
		shoal_group_detach(g);
		return ret < 0 ? 1 : 0;
	}
	if (strcmp(role, "consumer") == 0) {
		if (log != NULL)
			log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
		if (spread > 0)
			d.route = spread_route;
		return shoal_group_main(&d, argc, argv);   /* our --role etc. are left to us */
	}
	fprintf(stderr, "usage: %s --role producer|consumer|holder|crasher|asker ...\n", argv[0]);
	return 2;
}
