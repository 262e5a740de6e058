/* SPDX-License-Identifier: MIT */
/*
 * The bridge process (bridge.h): one thread, one loop over the group's
 * mailbox and the links' event fds.
 *
 * Why one loop and no thread per link: a link is single-threaded (link.h
 * rule 2) and makes progress only inside its calls, so the loop polls
 * every link, then sleeps on their fds until the earliest link deadline,
 * at most WAKE_NS: the mailbox's doorbell is not among those fds, and a
 * stop asked through it is seen within that bound.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/group.h>

#include "runtime/bridge/bridge.h"
#include "runtime/bridge/link.h"
#include "runtime/control/config.h"
#include "shm/util.h"

#define WAKE_NS (10 * UINT64_C(1000000))
#define MAILBOX_BUDGET 64u

struct peer {
	const struct shoal__cfg_host *h;
	int role;                        /* enum shoal__link_role */
	struct shoal__link *link;
	struct shoal__link_stats seen;   /* as last told */
	uint64_t told_failures;          /* connections broken when last told (tell()) */
};

struct bridge {
	const struct shoal__bridge_opts *o;
	struct shoal__config *cfg;
	int host;
	struct peer *peers;
	uint32_t n_peers;
	struct shoal_group *g;
	struct shoal_ctx *ctx;
};

__attribute__((format(printf, 3, 4)))
static void say(const struct bridge *b, const struct peer *p, const char *fmt, ...)
{
	va_list ap;

	fprintf(b->o->log, "link %s: ", p->h->name);
	va_start(ap, fmt);
	vfprintf(b->o->log, fmt, ap);
	va_end(ap);
	fputc('\n', b->o->log);
	fflush(b->o->log);
}

/* The largest record a window takes: its frame size fits the window. */
static uint32_t max_record(uint32_t window)
{
	uint32_t m = (window - SHOAL__FRAME_REC_HDR) & ~UINT32_C(7);

	return m < SHOAL__FRAME_REC_MAX ? m : SHOAL__FRAME_REC_MAX;
}

static int open_link(struct bridge *b, struct peer *p, struct shoal_err *err)
{
	const struct shoal__cfg_link *c = &b->cfg->link;
	uint32_t window = c->window ? c->window : SHOAL__CFG_LINK_WINDOW;
	struct shoal__link_opts lo = {
		.role = p->role,
		.addr = p->role == SHOAL__LINK_CONNECT ? p->h->reach
						      : b->cfg->hosts[b->host].listen,
		.window = window,
		.max_record = max_record(window),
		.flush_bytes = c->flush_bytes,
		.flush_ns = c->flush_ns,
		.keepalive_ns = c->keepalive_ns,
		.dead_ns = c->dead_ns,
		.backoff_ns = c->backoff_ns,
		.max_backoff_ns = c->max_backoff_ns,
	};
	int ret = shoal__link_create(&p->link, &lo, err);

	if (ret < 0)
		return ret;
	shoal__link_stats(p->link, &p->seen);
	fprintf(b->o->log, "link %s: %s %s\n", p->h->name,
		p->role == SHOAL__LINK_CONNECT ? "connecting to" : "listening on", lo.addr);
	fflush(b->o->log);
	return 0;
}

/* One peer per other host; of two, the one whose name sorts first connects. */
static int make_peers(struct bridge *b, struct shoal_err *err)
{
	const struct shoal__config *c = b->cfg;
	const char *me = c->hosts[b->host].name;
	uint32_t listening = 0;

	if (c->n_hosts < 2)
		return shoal__fail(err, -ENXIO, "host %s has no other host to link to", me);
	b->peers = calloc(c->n_hosts - 1, sizeof(*b->peers));
	if (b->peers == NULL)
		return shoal__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_hosts; i++) {
		struct peer *p = &b->peers[b->n_peers];

		if ((int)i == b->host)
			continue;
		p->h = &c->hosts[i];
		p->role = strcmp(me, p->h->name) < 0 ? SHOAL__LINK_CONNECT : SHOAL__LINK_LISTEN;
		listening += p->role == SHOAL__LINK_LISTEN;
		b->n_peers++;
	}
	/* A listening link takes whoever connects: two on one address could
	 * not tell their peers apart (docs/hosts.md, next: one worker). */
	if (listening > 1)
		return shoal__fail(err, -ENOTSUP, "host %s would listen for %u hosts whose names "
				   "sort before its own; a bridge listens for one host for now",
				   me, listening);
	for (uint32_t i = 0; i < b->n_peers; i++) {
		int ret = open_link(b, &b->peers[i], err);

		if (ret < 0)
			return ret;
	}
	return 0;
}

/*
 * Tell what changed on p's link since the last time: up, down after up,
 * attempts failing while the peer is away (at 1, 2, 4, 8 ... of them, so
 * that a host away for long does not flood the log), refused frames, and
 * records lost to a peer's restart.
 */
static void tell(const struct bridge *b, struct peer *p)
{
	struct shoal__link_stats st;
	bool up, was_up = p->seen.state == SHOAL__LINK_UP;

	shoal__link_stats(p->link, &st);
	up = st.state == SHOAL__LINK_UP;
	if (up && !was_up) {
		say(b, p, "up (peer epoch %08x, connection %llu)", st.peer_epoch,
		    (unsigned long long)st.connects);
		p->told_failures = 0;
	} else if (!up && was_up) {
		say(b, p, "down (%llu connection%s lost so far)", (unsigned long long)st.broken,
		    st.broken == 1 ? "" : "s");
		p->told_failures = st.broken;
	} else if (!up && st.broken > p->seen.broken && st.broken >= 2 * p->told_failures) {
		say(b, p, "no connection yet (%llu attempt%s failed); retrying",
		    (unsigned long long)st.broken, st.broken == 1 ? "" : "s");
		p->told_failures = st.broken;
	}
	if (st.refused > p->seen.refused)
		say(b, p, "refused %llu frame%s: %s", (unsigned long long)(st.refused -
		    p->seen.refused), st.refused - p->seen.refused == 1 ? "" : "s",
		    st.last_refusal.msg);
	if (st.lost_link > p->seen.lost_link)
		say(b, p, "%llu records lost: the peer restarted before acknowledging them",
		    (unsigned long long)(st.lost_link - p->seen.lost_link));
	p->seen = st;
}

static void serve(struct bridge *b)
{
	struct pollfd pfd[SHOAL__MAX_HOSTS];

	for (;;) {
		uint64_t now = shoal__now_ns(), wake = now + WAKE_NS;

		if (shoal_poll(b->ctx, MAILBOX_BUDGET, 0) == -ESHUTDOWN)
			return;
		for (uint32_t i = 0; i < b->n_peers; i++) {
			struct peer *p = &b->peers[i];
			uint64_t due;

			shoal__link_poll(p->link, now);
			tell(b, p);
			due = shoal__link_deadline(p->link);
			if (due < wake)
				wake = due;
			if (shoal__link_arm(p->link) == -EAGAIN)
				wake = now;
			pfd[i] = (struct pollfd){ .fd = shoal__link_fd(p->link), .events = POLLIN };
		}
		now = shoal__now_ns();
		if (wake > now)
			poll(pfd, b->n_peers, (int)((wake - now + 999999) / 1000000));
	}
}

static void close_all(struct bridge *b)
{
	for (uint32_t i = 0; i < b->n_peers; i++)
		if (b->peers[i].link != NULL)
			shoal__link_destroy(b->peers[i].link);
	free(b->peers);
	if (b->g != NULL)
		shoal_group_detach(b->g);
	shoal__config_free(b->cfg);
}

int shoal__bridge_run(const struct shoal__bridge_opts *o, struct shoal_err *err)
{
	struct shoal_group_desc d = { .n_workers = 1, .n_actors = 1, .node = -1 };
	struct bridge b = { .o = o };
	int ret;

	ret = shoal__config_load_flags(o->config, SHOAL__CONFIG_NO_PROGRAMS, &b.cfg, err);
	if (ret == 0)
		ret = shoal__config_this_host(b.cfg, o->host, &b.host, err);
	if (ret == 0)
		ret = shoal_group_attach(&b.g, &d, o->system, err);
	if (ret == 0) {
		b.ctx = shoal_group_worker(b.g, 0);
		ret = make_peers(&b, err);
	}
	if (ret == 0)
		serve(&b);
	close_all(&b);
	return ret;
}
