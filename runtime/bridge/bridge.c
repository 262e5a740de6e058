/* SPDX-License-Identifier: MIT */
/*
 * The bridge process (bridge.h): one thread, one loop over the group's
 * mailbox and the hub of its links (one UCP worker, one event fd).
 *
 * Why one loop and no thread per link: a hub and its links are
 * single-threaded (link.h rule 2) and make progress only inside their
 * calls, so the loop polls the hub (every link; while the mailbox gives
 * work, once every HUB_POLL_NS) and the mailbox, goes round
 * again at once while either had work, and only then sleeps, until the
 * earliest link deadline, on both at once (sleep_until()): on the
 * mailbox's doorbell, a futex, as any worker does, while
 * a second thread (struct watch) waits for the hub's fd and rings that
 * doorbell when the fd turns readable. So a message (or a stop) that
 * comes to an idle bridge wakes it at once, from either side; before, the
 * bridge slept on the fd alone, 1 ms at most, and a mailbox's message
 * waited up to that, which it spun for 50 us after each turn with work to
 * hide: on two CPUs shared by the six processes of a round trip, the spin
 * took their time (p99 of the round trip 1.4 ms with it, 0.43-0.46 ms
 * without, bench/SUITE.md's command). Now, after a turn with work, it
 * looks again for hosts.link.spin (200 us by default) before it sleeps,
 * calling sched_yield() between looks: a process runnable on its CPU runs
 * at once, so the spin takes no one's time, and the CPU does not go idle,
 * which on a VM halts the vCPU and makes the next wake-up cost about 20 us
 * (an IPI to a halted vCPU). A round trip across hosts has about eight
 * such wake-ups (docs/hosts.md): with the spin, its p50 at 64 B fell from
 * 141-194 to 71-96 us on the shared 2-CPU VM, with no loss of throughput
 * (bench/SUITE.md, "The bridge spins before it sleeps").
 * Sleeping between turns of a busy mailbox held a bridge to 64 messages a
 * wake (27 000 messages a second across loopback, the link alone carrying
 * 16 million); sleeping at once after each turn with work held a request
 * and its response to that bound each way (a round trip of 2.2 ms,
 * bench/SUITE.md). A turn whose mailbox ran dry sends what its links
 * queued when nothing they sent before is unacknowledged
 * (shoal__link_flush_idle()): a lone message does not wait for the flush
 * deadline, while a steady flow still gathers into frames.
 * Each turn also stores every link's counters in the link view
 * (runtime/bridge/view.h) for the tools.
 *
 * Routed messages (docs/hosts.md): the router sends the bridge one copy of
 * every message of a type that a group of another host is routed (the
 * supervisor's bridge routes). The handler matches it against those
 * groups' routes, kept here as a table whose filters name a host instead
 * of a group, and queues one record per host that has a match, the
 * envelope and payload as the producer wrote them into its uplink. A
 * record from a peer goes into the bridge's own uplink with that envelope
 * (runtime/data/relay.h): its host's router matches it against the same
 * routes and delivers it to the groups there, the sender being the
 * original one. What came from another host comes back to the bridge by
 * those same bridge routes: it is never sent to a link again (no loops),
 * only counted.
 *
 * Direct messages and responses: a send to a group of another host goes
 * into a direct ring of this bridge (runtime/data/send.c); the handler
 * queues it on the link to that group's host, and the far bridge writes it
 * into the group's mailbox with its envelope unchanged, so that the
 * responder answers the original requester, through its own bridge.
 *
 * A record is written once, from the mailbox's message straight into the
 * link's queue (put()), whence frames go out with no copy of their own.
 *
 * Back-pressure: a record the link has no credit for (its host slow, not
 * up yet, or down) waits in that peer's backlog, the link's queue beyond
 * the credit, so that the mailbox goes on to records for the other hosts;
 * only when the backlog is full (BACKLOG_WINDOWS of the link's windows)
 * does the record keep the handler, and so the mailbox's rings, waiting.
 * A record the mailbox or uplink here cannot take stays held by the link,
 * whose credit then stops the far sender.
 *
 * A link down longer than hosts.down_after: its host's bit in the
 * mailbox's hosts_down, which the router turns into its groups marked down
 * where senders see it (-EHOSTDOWN), and what its link never sent counted
 * lost.
 */
#include <assert.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>

#include "runtime/bridge/bridge.h"
#include "runtime/bridge/link.h"
#include "runtime/bridge/view.h"
#include "runtime/control/config.h"
#include "runtime/data/relay.h"
#include "runtime/route/route.h"
#include "shm/util.h"

#define MAILBOX_BUDGET 64u
/*
 * While the mailbox gives work, the hub (UCP's progress: an epoll_wait()
 * over TCP, about 2 us of system call on this VM) is polled at most once
 * every HUB_POLL_NS; a turn with nothing from the mailbox polls it at
 * once. Frames go out without it (shoal__link_commit() sends full ones,
 * shoal__link_flush_idle() a lone record), so all it delays is the peer's
 * acks, which a window of credit covers, and the flush deadline, which a
 * steady flow does not reach. Polled every turn, the sending bridge made
 * an epoll_wait() every 36 messages of 64 B (its mailbox ran dry after
 * about that many), more system time than its sendmsg() calls.
 */
#define HUB_POLL_NS (100 * UINT64_C(1000))
#define PENDING_MAX 4096u
/*
 * A record from a peer that a ring here had no room for is held by the
 * link; nothing wakes the bridge when that ring's consumer makes room (it
 * sleeps on its own mailbox and its links), so a turn that holds one
 * sleeps at most HELD_RETRY_NS, doubled each such turn that brought
 * nothing in, up to HELD_RETRY_MAX_NS. Before, it slept until the links'
 * next deadline, and direct messages to a busy group of this host crossed
 * at a fraction of the routed rate (bench/SUITE.md).
 */
#define HELD_RETRY_NS (20 * UINT64_C(1000))
#define HELD_RETRY_MAX_NS (1000 * UINT64_C(1000))
#define ENV_BYTES sizeof(struct shoal_envelope)
/*
 * A peer's backlog: records its link has no credit for yet (not up yet,
 * down, or slow) wait in the link's own queue, this many of its windows
 * beyond the credit (shoal__link_opts.backlog), so that the mailbox goes
 * on to records for other hosts: one host down does not hold up the
 * others' messages. Full, the record waits in put() (back-pressure
 * on the senders); a host down past hosts.down_after has what its link
 * never sent counted lost (give_up()).
 */
#define BACKLOG_WINDOWS 4u

struct peer {
	const struct shoal__cfg_host *h;
	int role;                        /* enum shoal__link_role */
	struct shoal__link *link;
	struct shoal__link_stats seen;   /* as last told */
	uint64_t told_failures;          /* connections broken when last told (tell()) */
	uint64_t lost_down;              /* records given up on: the host down too long */
	struct shoal__links_row *row;    /* its row of the link view; NULL: no view */
};

/* What the bridge counted besides its links' counters; told at its end. */
struct counts {
	uint64_t forwarded;      /* records queued on a link */
	uint64_t no_host;        /* messages no route of another host matched */
	uint64_t returned;       /* what the bridge sent itself, come back: dropped */
	uint64_t lost_down;      /* records a link down past down_after refused */
	uint64_t received;       /* records from peers sent on here */
	uint64_t refused_in;     /* records from peers that are no message of this system */
	uint64_t direct;         /* of `forwarded`, direct messages and responses */
	uint64_t no_group;       /* direct messages for no group of another host */
	uint64_t ended;          /* requests brought in, answered -EOWNERDEAD here */
	uint64_t untracked;      /* requests brought in while PENDING_MAX were watched */
	uint64_t lost_stop;      /* records no peer acknowledged when the bridge stopped */
	uint64_t backlogged;     /* of `forwarded`, records queued beyond the credit */
};

/*
 * A request brought in from another host, for a group of this host: watched
 * until its response goes back through this bridge (carry_direct()), or
 * until its responder's process ends, or if none ran when it came: then
 * the bridge answers the requester -EOWNERDEAD, as a requester of this
 * host would be told (shoal_request()), instead of leaving it to its
 * timeout.
 */
struct pending {
	uint64_t requester;      /* the request's sender */
	uint64_t responder;      /* its dest */
	uint64_t rid;
	uint64_t trace_id;
	uint32_t type;
	uint32_t gen;            /* the responder group's incarnation when it came */
	bool none;               /* no process of the responder's group ran then */
};

/*
 * The thread that watches the hub's fd while the bridge sleeps on its
 * mailbox's doorbell (sleep_until()). It waits for `asked` to move, then polls
 * the fd (and `stop_fd`), and rings the doorbell once the fd is readable;
 * then it waits for the next sleep. Never touches the hub or the ctx.
 */
struct watch {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t asked;                  /* sleeps the bridge began; under mu */
	bool quit;                       /* under mu */
	int hub_fd;
	int stop_fd;                     /* an eventfd: written at the bridge's end */
	struct shoal_doorbell *bell;     /* the mailbox's */
	bool running;
};

struct bridge {
	const struct shoal__bridge_opts *o;
	struct shoal__config *cfg;
	int host;
	struct shoal__link_hub *hub;     /* the UCP worker and listener of every link */
	struct shoal__link_hub_stats hub_seen;   /* as last seen */
	uint64_t told_refused;           /* connections refused when last told */
	_Atomic uint64_t ucx_said;       /* UCX log messages (ucx_log()) */
	struct shoal_seg view_seg;       /* the link view (runtime/bridge/view.h) */
	struct shoal__links_hdr *view;   /* NULL: none (the bridge runs without) */
	struct peer *peers;
	uint32_t n_peers;
	struct peer **by_host;           /* the peer of each host index; NULL for this one */
	struct shoal__route_table *remote;   /* other hosts' routes; group = host index */
	const struct shoal_filter *remote_filters;   /* its filters */
	struct shoal__route_memo memo;   /* its last type matched */
	uint32_t *matches;
	uint32_t cap_matches;
	struct shoal_type *types;
	struct shoal_group *g;
	int gid;                         /* its group id */
	struct shoal_ctx *ctx;
	struct pending *pending;         /* PENDING_MAX; n_pending of them in use */
	uint32_t n_pending;
	bool putting;                    /* in put(): no other record is queued */
	bool holding;                    /* this turn left a peer's record held */
	uint64_t retry_ns;               /* how long a turn that holds one sleeps */
	uint64_t hub_polled;             /* when serve() last polled the hub */
	struct watch watch;
	struct counts n;
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

static int open_link(struct bridge *b, struct peer *p, struct shoal_err *err)
{
	const struct shoal__cfg_link *c = &b->cfg->link;
	uint32_t window = c->window;
	struct shoal__link_opts lo = {
		.role = p->role,
		.addr = p->h->reach,
		.peer = p->h->name,
		.window = window,
		.backlog = BACKLOG_WINDOWS * window,
		.max_record = shoal__link_max_record(window),
		.flush_bytes = c->flush_bytes,
		.flush_ns = c->flush_ns,
		.keepalive_ns = c->keepalive_ns,
		.dead_ns = c->dead_ns,
		.backoff_ns = c->backoff_ns,
		.max_backoff_ns = c->max_backoff_ns,
	};
	int ret = shoal__link_add(b->hub, &p->link, &lo, err);

	if (ret < 0)
		return ret;
	shoal__link_stats(p->link, &p->seen);
	if (p->role == SHOAL__LINK_CONNECT)
		say(b, p, "connecting to %s", lo.addr);
	else
		say(b, p, "listening on %s", b->cfg->hosts[b->host].listen);
	return 0;
}

/*
 * UCX's own log lines (a failed connect() at every attempt while a host is
 * away): said as the bridge's, at the 1st, 2nd, 4th, 8th ... so that an
 * outage reads as the links' lines, with UCX's reason, and does not flood
 * the log. Called from UCX, maybe on a thread of its own.
 */
static void ucx_log(void *arg, const char *level, const char *message)
{
	struct bridge *b = arg;
	uint64_t n = atomic_fetch_add_explicit(&b->ucx_said, 1, memory_order_relaxed) + 1;

	if ((n & (n - 1)) != 0)
		return;
	if (n == 1)
		fprintf(b->o->log, "ucx %s: %s\n", level, message);
	else
		fprintf(b->o->log, "ucx %s: %s (UCX message %llu)\n", level, message,
			(unsigned long long)n);
	fflush(b->o->log);
}

/* The hub: a listener when some host dials this one (docs/hosts.md: of two
 * hosts, the one whose name sorts first dials). */
static int open_hub(struct bridge *b, struct shoal_err *err)
{
	const struct shoal__cfg_host *me = &b->cfg->hosts[b->host];
	struct shoal__link_hub_opts ho = {
		.name = me->name,
		.listen = shoal__config_connectors(b->cfg, b->host) > 0 ? me->listen : NULL,
		.hello_ns = b->cfg->link.dead_ns,
	};

	shoal__link_log_to(ucx_log, b);
	return shoal__link_hub_create(&b->hub, &ho, err);
}

/* ---- the link view ----------------------------------------------------------- */

/* The system's name, as the group attached to it. */
static const char *system_name(const struct bridge *b)
{
	const char *env = getenv("SHOAL_SYSTEM");

	return b->o->system ? b->o->system : env ? env : b->cfg->system;
}

static int view_init(void *mem, uint64_t len, void *arg)
{
	const struct bridge *b = arg;
	struct shoal__links_hdr *h = mem;
	struct shoal__links_row *rows = (struct shoal__links_row *)(h + 1);

	(void)len;
	h->version = SHOAL__LINKS_VERSION;
	snprintf(h->system, sizeof(h->system), "%s", system_name(b));
	snprintf(h->host, sizeof(h->host), "%s", b->cfg->hosts[b->host].name);
	h->bridge_pid = (int32_t)getpid();
	h->n_links = b->n_peers;
	for (uint32_t i = 0; i < b->n_peers; i++) {
		const struct peer *p = &b->peers[i];

		snprintf(rows[i].peer, sizeof(rows[i].peer), "%s", p->h->name);
		snprintf(rows[i].addr, sizeof(rows[i].addr), "%s", p->role == SHOAL__LINK_CONNECT ?
			 p->h->reach : b->cfg->hosts[b->host].listen);
		rows[i].role = (uint32_t)p->role;
		shoal_store_relaxed(&rows[i].state, SHOAL__LINK_DOWN);
	}
	/* R1: pairs with A1 in shoal__links_view_take(): names before magic. */
	shoal_store_release(&h->magic, SHOAL__LINKS_MAGIC);
	return 0;
}

/* Create shoal.S.links, replacing one whose bridge is dead. Said and
 * skipped when it cannot be made: the links work without their view. */
static void view_open(struct bridge *b)
{
	struct shoal_seg_opts so = { .mode = b->cfg->mode, .numa_node = -1,
				     .dir_cap = SHOAL__LINKS_DIR_CAP };
	char name[SHOAL_SEG_NAME_MAX];
	uint64_t size = shoal__links_size(b->n_peers), off;
	uint64_t file = shoal__links_file_size(b->n_peers);
	struct shoal_err err;
	int ret = shoal__name_links(name, system_name(b));

	if (ret == 0) {
		ret = shoal_seg_create(&b->view_seg, name, file, &so, &err);
		if (ret == -EEXIST && shoal_seg_probe(name, NULL) == 0) {
			shoal_seg_unlink(name);
			ret = shoal_seg_create(&b->view_seg, name, file, &so, &err);
		}
	} else {
		snprintf(err.msg, sizeof(err.msg), "system name too long");
	}
	if (ret == 0) {
		ret = shoal_seg_alloc_init(&b->view_seg, SHOAL__KIND_LINKS, "links", NULL, size, 64,
					   view_init, b, &off);
		if (ret < 0) {
			snprintf(err.msg, sizeof(err.msg), "%s", strerror(-ret));
			shoal_seg_detach(&b->view_seg);
			shoal_seg_unlink(name);
		}
	}
	if (ret < 0) {
		fprintf(b->o->log, "no link view for the tools (%s): %s\n", name, err.msg);
		fflush(b->o->log);
		return;
	}
	b->view = shoal_seg_ptr(&b->view_seg, off, size, 64);
	for (uint32_t i = 0; i < b->n_peers; i++)
		b->peers[i].row = (struct shoal__links_row *)(b->view + 1) + i;
}

/* Store p's counters in its row: each alone, relaxed (view.h). */
static void view_write(const struct peer *p)
{
	struct shoal__links_row *r = p->row;
	struct shoal__link_stats st;
	uint64_t c[SHOAL__LC_N], now;

	if (r == NULL)
		return;
	shoal__link_stats(p->link, &st);
	now = shoal__now_ns();
	c[SHOAL__LC_RTT_NS] = st.rtt_ns;
	c[SHOAL__LC_FRAMES_SENT] = st.frames_sent;
	c[SHOAL__LC_FRAMES_RECV] = st.frames_recv;
	c[SHOAL__LC_RECORDS_SENT] = st.records_sent;
	c[SHOAL__LC_RECORDS_RECV] = st.records_recv;
	c[SHOAL__LC_IN_FLIGHT] = st.next_seq - st.acked;
	c[SHOAL__LC_CREDITS] = st.peer_credits > st.unacked_bytes ?
			       st.peer_credits - st.unacked_bytes : 0;
	c[SHOAL__LC_RESENT] = st.resent;
	c[SHOAL__LC_DUPLICATES] = st.duplicates;
	c[SHOAL__LC_GAPS] = st.gaps;
	c[SHOAL__LC_REFUSED] = st.refused;
	c[SHOAL__LC_CONNECTS] = st.connects;
	c[SHOAL__LC_BROKEN] = st.broken;
	c[SHOAL__LC_LOST_LINK] = st.lost_link;
	c[SHOAL__LC_LOST_DOWN] = p->lost_down;
	c[SHOAL__LC_CREDIT_WAITS] = st.credit_waits;
	c[SHOAL__LC_DOWN_NS] = st.state == SHOAL__LINK_UP || now < st.down_since_ns ? 0 :
			       now - st.down_since_ns;
	shoal_store_relaxed(&r->state, st.state);
	shoal_store_relaxed(&r->peer_epoch, st.peer_epoch);
	for (unsigned k = 0; k < SHOAL__LC_N; k++)
		shoal_store_relaxed(&r->c[k], c[k]);
}

static void view_write_hub(const struct bridge *b)
{
	if (b->view == NULL)
		return;
	shoal_store_relaxed(&b->view->refused_conns, b->hub_seen.refused);
	shoal_store_relaxed(&b->view->ucx_messages,
			    atomic_load_explicit(&b->ucx_said, memory_order_relaxed));
}

static void view_close(struct bridge *b)
{
	char name[SHOAL_SEG_NAME_MAX];

	if (b->view == NULL)
		return;
	shoal_seg_detach(&b->view_seg);
	if (shoal__name_links(name, system_name(b)) == 0)
		shoal_seg_unlink(name);
	b->view = NULL;
}

/* One hub, and on it one link per other host; of two hosts, the one whose
 * name sorts first connects. */
static int make_peers(struct bridge *b, struct shoal_err *err)
{
	const struct shoal__config *c = b->cfg;
	const char *me = c->hosts[b->host].name;
	int ret;

	if (c->n_hosts < 2)
		return shoal__fail(err, -ENXIO, "host %s has no other host to link to", me);
	b->peers = calloc(c->n_hosts - 1, sizeof(*b->peers));
	b->by_host = calloc(c->n_hosts, sizeof(*b->by_host));
	if (b->peers == NULL || b->by_host == NULL)
		return shoal__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_hosts; i++) {
		struct peer *p = &b->peers[b->n_peers];

		if ((int)i == b->host)
			continue;
		p->h = &c->hosts[i];
		p->role = strcmp(me, p->h->name) < 0 ? SHOAL__LINK_CONNECT : SHOAL__LINK_LISTEN;
		b->by_host[i] = p;
		b->n_peers++;
	}
	ret = open_hub(b, err);
	for (uint32_t i = 0; ret == 0 && i < b->n_peers; i++)
		ret = open_link(b, &b->peers[i], err);
	if (ret == 0)
		view_open(b);
	return ret;
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

/* Connections the hub refused: unknown or duplicate peers, misdirected
 * ones, ones that never said who they are. Said at about the 1st, 2nd,
 * 4th ... with the last reason, so that a host that keeps trying does not flood
 * the log. */
static void tell_hub(struct bridge *b)
{
	struct shoal__link_hub_stats st;

	shoal__link_hub_stats(b->hub, &st);
	if (st.refused > b->hub_seen.refused && st.refused >= 2 * b->told_refused) {
		b->told_refused = st.refused;
		fprintf(b->o->log, "refused %llu connection%s so far, the last: %s\n",
			(unsigned long long)st.refused, st.refused == 1 ? "" : "s",
			st.last_refusal.msg);
		fflush(b->o->log);
	}
	b->hub_seen = st;
}

/* ---- messages -------------------------------------------------------------- */

/*
 * Tell the router (the mailbox's hosts_down, docs/hosts.md) whether p's
 * host has been away longer than hosts.down_after, or is back. The bit of
 * a restarted bridge stays as its predecessor left it until its own link
 * says otherwise.
 */
static_assert(SHOAL__MAX_HOSTS <= 64, "hosts_down, and the hosts a message went to, have one bit a host");

static void note_down(struct bridge *b, const struct peer *p)
{
	uint64_t bit = UINT64_C(1) << (p->h - b->cfg->hosts), set = 0, clear = 0, was, since;

	if (shoal__link_state(p->link, &since) == SHOAL__LINK_UP)
		clear = bit;
	else if (shoal__now_ns() - since > b->cfg->down_after_ns)
		set = bit;
	was = shoal__bridge_hosts_down(b->ctx, set, clear);
	if (((was & ~clear) | set) != was)
		say(b, p, "%s", set ? "down longer than hosts.down_after: sends to its groups fail "
			"with -EHOSTDOWN" : "its host reachable again");
}

/* The host of group `g` of the file; -1 for the bridge or no group. */
static int host_of(const struct bridge *b, int g)
{
	return g >= 0 && (uint32_t)g < b->cfg->n_groups ? b->cfg->groups[g].host : -1;
}

/* Watch request `env`, just brought in (struct pending). */
static void track(struct bridge *b, const struct shoal_envelope *env, uint32_t gen, bool none)
{
	if (b->n_pending == PENDING_MAX) {
		b->n.untracked++;
		return;
	}
	b->pending[b->n_pending++] = (struct pending){ env->sender, env->dest, env->request_id,
						       env->trace_id, env->type, gen, none };
}

/* Its response went back: stop watching it. */
static void untrack(struct bridge *b, uint64_t requester, uint64_t rid)
{
	for (uint32_t i = 0; i < b->n_pending; i++)
		if (b->pending[i].rid == rid && b->pending[i].requester == requester) {
			b->pending[i] = b->pending[--b->n_pending];
			return;
		}
}

/*
 * A record from another host into this host's system (take_records()). A
 * request for a group none of whose processes runs is not written: its
 * requester is answered at once (check_requests()), as shoal_request()
 * answers a requester here.
 */
static int bring_in(struct bridge *b, struct shoal__relay *rl, const struct shoal_envelope *env,
		    const void *payload)
{
	uint32_t gen = 0;
	int running, ret;

	if (env->dest == SHOAL_ADDR_NONE)
		return shoal__send_routed_env(b->ctx, rl, env, payload);
	if (!(env->flags & SHOAL_ENV_REQUEST))
		return shoal__send_env(b->ctx, rl, env, payload);
	running = shoal__group_running(b->ctx, shoal_addr_group(env->dest), &gen);
	if (running == 0 && host_of(b, shoal_addr_group(env->dest)) == b->host) {
		track(b, env, 0, true);
		return 0;
	}
	ret = shoal__send_env(b->ctx, rl, env, payload);
	if (ret == 0)
		track(b, env, gen, false);
	return ret;
}

/* Defined below: it takes records (take_records()) while it waits for credit. */
static void put(struct bridge *b, struct peer *p, const struct shoal_envelope *env,
		const void *data, uint32_t len);

/*
 * Answer the requests whose responder's process ended (or never ran) with
 * -EOWNERDEAD, through the link to the requester's host. Not while a
 * record waits for room on a link (b->putting): records go in order.
 */
static void check_requests(struct bridge *b)
{
	for (uint32_t i = 0; i < b->n_pending;) {
		struct pending *q = &b->pending[i];
		int32_t e = -EOWNERDEAD;
		uint32_t gen = 0;
		int h = host_of(b, shoal_addr_group(q->requester));
		struct shoal_envelope env = { .type = q->type, .len = sizeof(e),
					      .sender = q->responder, .dest = q->requester,
					      .trace_id = q->trace_id, .request_id = q->rid,
					      .send_ns = shoal__now_ns(),
					      .flags = SHOAL_ENV_RESPONSE | SHOAL_ENV_ERROR };

		if (!q->none &&
		    shoal__group_running(b->ctx, shoal_addr_group(q->responder), &gen) == 1 &&
		    gen == q->gen) {
			i++;
			continue;
		}
		*q = b->pending[--b->n_pending];
		if (h < 0 || h == b->host || b->by_host[h] == NULL)
			continue;
		b->n.ended++;
		put(b, b->by_host[h], &env, &e, sizeof(e));
	}
}

/*
 * Records from p's peer, put into this host's system with their envelope
 * as it was: a routed one (dest SHOAL_ADDR_NONE) into the bridge's
 * uplink, a direct message or a response into its destination's mailbox.
 * A record there is no room for yet (or whose direct link is being
 * opened) stays held, so the link's credit pushes back on the peer; one
 * that is not a message of this system (DESIGN invariant 1: a peer's bytes
 * are checked like a ring's) is dropped and counted. Those for one ring
 * are published together (relay.h), at most RELAY_MAX at a time, so that
 * the consumer starts on the first while the rest are written.
 */
#define RELAY_MAX 256u
#define TAKE_MAX 64u   /* records peeked from a link at once */

static void take_records(struct bridge *b, struct peer *p)
{
	struct shoal__relay rl = { 0 };
	struct shoal__frame_rec r[TAKE_MAX];
	bool held = false;
	uint32_t n, i;

	note_down(b, p);
	while (!held && (n = shoal__link_recv_peek_n(p->link, r, TAKE_MAX)) > 0) {
		for (i = 0; i < n; i++) {
			const unsigned char *payload = (const unsigned char *)r[i].data + ENV_BYTES;
			struct shoal_envelope env;
			int ret = -EPROTO;

			if (r[i].len >= sizeof(env)) {
				memcpy(&env, r[i].data, sizeof(env));
				if (env.len == r[i].len - sizeof(env))
					ret = bring_in(b, &rl, &env, payload);
			}
			if (ret == -EAGAIN) {
				b->holding = held = true;
				break;
			}
			if (ret == 0) {
				b->n.received++;
			} else if (b->n.refused_in++ == 0) {
				say(b, p, "a record not sent on here: %s", strerror(-ret));
			}
			if (rl.k >= RELAY_MAX)
				shoal__relay_publish(b->ctx, &rl);
		}
		/* What was handed on (or refused) leaves the link; a record
		 * held stays first. */
		if (i > 0)
			shoal__link_recv_release_n(p->link, i);
	}
	shoal__relay_publish(b->ctx, &rl);
	if (!b->putting && b->n_pending > 0)
		check_requests(b);
}

/* ---- queueing on a link ------------------------------------------------------ */

/* A record counted lost to its host down past hosts.down_after, and said
 * (the first of them). */
static void lose(struct bridge *b, struct peer *p, uint64_t n)
{
	if (b->n.lost_down == 0)
		say(b, p, "%llu record%s not sent: the host is down past hosts.down_after",
		    (unsigned long long)n, n == 1 ? "" : "s");
	p->lost_down += n;
	b->n.lost_down += n;
}

/* p's link down longer than hosts.down_after: its records are given up. */
static bool gone(const struct bridge *b, const struct peer *p)
{
	uint64_t since;

	return shoal__link_state(p->link, &since) != SHOAL__LINK_UP &&
	       shoal__now_ns() - since > b->cfg->down_after_ns;
}

/* p's host gone: what its link never sent (its backlog) is given up,
 * counted lost, no longer sent. */
static void give_up(struct bridge *b, struct peer *p)
{
	uint64_t n;

	if (!gone(b, p))
		return;
	n = shoal__link_drop_unsent(p->link);
	if (n == 0)
		return;
	b->n.forwarded -= n;
	lose(b, p, n);
}

/* The record, `env` then `len` bytes of `data`, written where p's link
 * reserved room for it (shoal__link_reserve()), and queued. */
static inline void put_at(struct bridge *b, struct peer *p, unsigned char *at,
			  const struct shoal_envelope *env, const void *data, uint32_t len)
{
	memcpy(at, env, sizeof(*env));
	memcpy(at + sizeof(*env), data, len);
	shoal__link_commit(p->link);
	b->n.forwarded++;
}

/* put()'s wait for room on p's link, after put()'s own try found none
 * (out of line: the common put finds room at once): where the record goes,
 * or NULL when p's host was given up meanwhile (the record counted lost). */
static __attribute__((noinline)) unsigned char *put_wait(struct bridge *b, struct peer *p,
							 uint32_t rec)
{
	unsigned char *at;

	b->putting = true;
	do {
		uint64_t now;

		if (gone(b, p)) {
			give_up(b, p);
			lose(b, p, 1);
			at = NULL;
			break;
		}
		now = shoal__now_ns();
		for (uint32_t i = 0; i < b->n_peers; i++) {
			shoal__link_poll(b->peers[i].link, now);
			take_records(b, &b->peers[i]);
		}
		if (shoal__link_arm(p->link) == 0) {
			struct pollfd pfd = { .fd = shoal__link_fd(p->link), .events = POLLIN };

			poll(&pfd, 1, 1);
		}
	} while ((at = shoal__link_reserve(p->link, rec, 0)) == NULL);
	b->putting = false;
	return at;
}

/*
 * Queue one record, `env` then `len` bytes of `data`, on p's link, written
 * once, straight into its queue (shoal__link_reserve()): at once while the
 * link's credit or its backlog has room. Only when p's backlog is full
 * does the record wait here: every link is polled meanwhile (their peers
 * may be waiting on us, and frames go out as credit comes), records are
 * taken from them (two bridges that wait for each other's credit both
 * release what they hold, so both go on), until p's link takes it, or p's
 * host has been down longer than hosts.down_after: then the record is
 * counted lost (`lost_down`) and said, as a send to that host fails.
 * Sleeps on the link's fd between polls, 1 ms at most. The caller checked
 * that the record fits a link (shoal__link_max_record()).
 */
static void put(struct bridge *b, struct peer *p, const struct shoal_envelope *env,
		const void *data, uint32_t len)
{
	uint32_t rec = (uint32_t)sizeof(*env) + len;
	unsigned char *at = shoal__link_reserve(p->link, rec, 0);

	if (SHOAL_UNLIKELY(at == NULL) && (at = put_wait(b, p, rec)) == NULL)
		return;
	put_at(b, p, at, env, data, len);
}

/*
 * The peer that carries a direct record for group `g` of `len` bytes
 * (envelope and payload): that group's host's, if it is another host and
 * the record fits a link; else NULL.
 */
static inline struct peer *direct_peer(const struct bridge *b, int g, uint32_t len)
{
	int h = host_of(b, g);

	if (h < 0 || h == b->host || len > shoal__link_max_record(b->cfg->link.window))
		return NULL;
	return b->by_host[h];
}

/*
 * A direct message or a response for a group of another host (the sender
 * sent it to this bridge, runtime/data/send.c): to that group's host, its
 * envelope as it is.
 */
static void carry_direct(struct bridge *b, const struct shoal_msg *m)
{
	struct peer *p = direct_peer(b, shoal_addr_group(m->env->dest),
				     (uint32_t)sizeof(*m->env) + m->len);

	if (p == NULL) {
		/* Only a sender that skipped send.c's checks gets here. */
		b->n.no_group++;
		return;
	}
	if (m->env->flags & SHOAL_ENV_RESPONSE)
		untrack(b, m->env->dest, m->env->request_id);
	b->n.direct++;
	put(b, p, m->env, m->data, m->len);
}

/*
 * A routed message, the copy this host's router addressed to the bridge:
 * to each other host some of whose groups' routes match it, once a host,
 * with its envelope as its producer wrote it. `data` is its payload, `len`
 * bytes.
 */
static inline void carry_routed(struct bridge *b, const struct shoal_envelope *e,
				const void *data, uint32_t len)
{
	uint32_t n;
	const uint32_t *idx;
	struct shoal_envelope env;
	uint64_t sent = 0;

	/* Sent by a group of another host (or by no group of the file):
	 * it came through a bridge, and goes to none again. */
	if (host_of(b, shoal_addr_group(e->sender)) != b->host) {
		b->n.returned++;
		return;
	}
	n = shoal__route_match_memo(b->remote, &b->memo, e->type, data, len, b->matches,
				    b->cap_matches, &idx);
	if (n == 0) {
		b->n.no_host++;
		return;
	}
	if ((uint32_t)sizeof(*e) + len > shoal__link_max_record(b->cfg->link.window)) {
		/* A type the file does not declare (declared ones fit: config.c). */
		b->n.lost_down++;
		return;
	}
	/* As its producer wrote it into its uplink, before this host's
	 * router addressed the copy to the bridge. */
	env = *e;
	env.dest = SHOAL_ADDR_NONE;
	env.flags &= ~SHOAL_ENV_ROUTED;
	for (uint32_t i = 0; i < n; i++) {
		uint16_t h = b->remote_filters[idx[i]].group;

		if ((sent >> h & 1u) || b->by_host[h] == NULL)
			continue;
		sent |= UINT64_C(1) << h;
		put(b, b->by_host[h], &env, data, len);
	}
}

static void on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct bridge *b = a->user;

	if (shoal_addr_group(m->env->dest) != b->gid)
		carry_direct(b, m);
	else
		carry_routed(b, m->env, m->data, m->len);
}

/*
 * A run of the mailbox's records (runtime/data/relay.h), carried here
 * without a handler call each, while each is a routed copy for the bridge
 * (carry_routed(), its wait in the mailbox measured as a handler's is) or
 * a direct message (not a response) for a group of another host whose
 * link takes it at once (as carry_direct()). Stops at the first record
 * that is anything else, or that would wait: on_message() has it. The
 * envelope is copied out and checked, then that copy goes on, so what goes
 * is what was checked.
 */
static uint32_t carry_run(void *user, const struct shoal__relay_run *r)
{
	struct bridge *b = user;
	const unsigned char *rec = r->data;
	uint32_t plen = r->len - (uint32_t)sizeof(struct shoal_envelope), i;
	int last = -1;
	struct peer *p = NULL;

	for (i = 0; i < r->n; i++, rec += r->stride) {
		struct shoal_envelope env;
		unsigned char *at;
		int g;

		shoal_store_relaxed(r->inflight, r->mark + (uint64_t)i * r->stride);
		memcpy(&env, rec, sizeof(env));
		if (!shoal__env_sane(&env, r->len))
			break;
		g = shoal_addr_group(env.dest);
		if (g == b->gid) {
			/* The router's copy: to the bridge as a group, no
			 * request (a request to the bridge is answered). */
			if ((env.flags & (SHOAL_ENV_ROUTED | SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE)) !=
				    SHOAL_ENV_ROUTED ||
			    shoal_addr_slot(env.dest) < SHOAL_SLOT_ALL)
				break;
			shoal__relay_latency(b->ctx, env.send_ns);
			carry_routed(b, &env, rec + sizeof(env), plen);
			continue;
		}
		if (env.flags & SHOAL_ENV_RESPONSE)
			break;
		if (g != last) {
			if ((p = direct_peer(b, g, r->len)) == NULL)
				break;
			last = g;
		}
		if ((at = shoal__link_reserve(p->link, r->len, 0)) == NULL)
			break;
		put_at(b, p, at, &env, rec + sizeof(env), plen);
		b->n.direct++;
	}
	return i;
}

/* The routes of groups on other hosts, each naming its group's host. */
static int remote_routes(struct bridge *b, struct shoal_err *err)
{
	const struct shoal__config *c = b->cfg;
	struct shoal_filter *f = calloc(c->n_routes + 1, sizeof(*f));
	uint32_t n = 0;
	int ret;

	if (f == NULL)
		return shoal__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_routes; i++) {
		const struct shoal__cfg_route *r = &c->routes[i];

		if (shoal__config_runs(c, b->host, r->f.group) || r->f.mode == SHOAL_ROUTE_DISCARD)
			continue;
		f[n] = r->f;
		f[n++].group = (uint16_t)c->groups[r->f.group].host;
	}
	ret = shoal__route_build(&b->remote, f, n, SHOAL__ROUTE_INDEXED, err);
	free(f);
	if (ret < 0)
		return ret;
	b->remote_filters = shoal__route_filters(b->remote);
	b->memo = (struct shoal__route_memo)SHOAL__ROUTE_MEMO_INIT;
	b->cap_matches = shoal__route_max_matches(b->remote) + 1;
	b->matches = calloc(b->cap_matches, sizeof(*b->matches));
	b->types = calloc(c->n_types + 1, sizeof(*b->types));
	b->pending = calloc(PENDING_MAX, sizeof(*b->pending));
	if (b->matches == NULL || b->types == NULL || b->pending == NULL)
		return shoal__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_types; i++)
		b->types[i] = (struct shoal_type){ c->types[i].id, c->types[i].max_size,
						   c->types[i].name };
	return 0;
}

/* ---- sleeping ---------------------------------------------------------------- */

static void *watch_main(void *arg)
{
	struct watch *w = arg;
	uint64_t seen = 0;

	for (;;) {
		struct pollfd pfd[2] = { { .fd = w->hub_fd, .events = POLLIN },
					 { .fd = w->stop_fd, .events = POLLIN } };
		bool quit;

		pthread_mutex_lock(&w->mu);
		while (w->asked == seen && !w->quit)
			pthread_cond_wait(&w->cv, &w->mu);
		seen = w->asked;
		quit = w->quit;
		pthread_mutex_unlock(&w->mu);
		if (quit)
			return NULL;
		while (poll(pfd, 2, -1) < 0 && errno == EINTR)
			;
		/* A readable fd after this sleep's arm: the hub has an event.
		 * (One left from an earlier sleep wakes the bridge for nothing,
		 * once: it polls, and sleeps again.) */
		shoal_doorbell_wake(w->bell);
	}
}

static int watch_start(struct bridge *b, struct shoal_err *err)
{
	struct watch *w = &b->watch;
	int ret;

	w->hub_fd = shoal__link_hub_fd(b->hub);
	w->bell = shoal__idle_bell(b->ctx);
	w->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (w->stop_fd < 0)
		return shoal__fail(err, -errno, "eventfd: %s", strerror(errno));
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	ret = pthread_create(&w->thread, NULL, watch_main, w);
	if (ret != 0) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		close(w->stop_fd);
		return shoal__fail(err, -ret, "the hub's watcher thread: %s", strerror(ret));
	}
	w->running = true;
	return 0;
}

static void watch_stop(struct watch *w)
{
	uint64_t one = 1;

	if (!w->running)
		return;
	pthread_mutex_lock(&w->mu);
	w->quit = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	(void)!write(w->stop_fd, &one, sizeof(one));
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	close(w->stop_fd);
	w->running = false;
}

/*
 * Sleep until the mailbox or the hub has something, or until `wake` (the
 * earliest link deadline; UINT64_MAX: none). No wake-up is lost from
 * either side (docs/memory-ordering.md, "The bridge's sleep"):
 * - the mailbox: shoal__idle_prepare() is the doorbell's own protocol
 *   (SLEEPING, F1, a last look at every ring), on this thread;
 * - the hub: it was armed before (an event after the arm makes its fd
 *   readable, and it stays so until the next progress), and the watcher is
 *   asked to look at the fd only after the doorbell says SLEEPING (the
 *   mutex orders the two), so its shoal_doorbell_wake() either swaps
 *   SLEEPING to AWAKE and wakes the futex, or finds AWAKE because a
 *   producer woke us already; futex_wait() compares the word in the
 *   kernel, so a wake between the last look and the sleep is not lost.
 */
static void sleep_until(struct bridge *b, uint64_t wake)
{
	struct watch *w = &b->watch;
	uint64_t now;

	if (!shoal__idle_prepare(b->ctx))
		return;
	now = shoal__now_ns();
	if (wake <= now) {
		shoal__idle_cancel(b->ctx);
		return;
	}
	pthread_mutex_lock(&w->mu);
	w->asked++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	(void)shoal__idle_wait(b->ctx, wake == UINT64_MAX ? -1 : (int64_t)(wake - now));
}

/*
 * The links' next deadline, or sooner the moment a link not up passes
 * hosts.down_after: the turn after it marks its host down (note_down())
 * and gives up its backlog. (A listening link down has no deadline of its
 * own: nothing else would wake the bridge for it.)
 */
static uint64_t next_deadline(const struct bridge *b, uint64_t now)
{
	uint64_t t = shoal__link_hub_deadline(b->hub);

	for (uint32_t i = 0; i < b->n_peers; i++) {
		uint64_t since, at;
		uint32_t state = shoal__link_state(b->peers[i].link, &since);

		at = since + b->cfg->down_after_ns + 1;
		if (state != SHOAL__LINK_UP && at > now && at < t)
			t = at;
	}
	return t;
}

/*
 * The bridge's loop, until it is asked to stop and its mailbox is empty:
 * the supervisor asks it last, once the router has routed what the groups
 * stopped before it left in their uplinks (drain_before() in
 * runtime/control/sup_stop.c), so nothing more comes for it then.
 */
static void serve(struct bridge *b)
{
	uint64_t spin_end = 0;

	b->retry_ns = HELD_RETRY_NS;
	for (;;) {
		uint64_t now = shoal__now_ns(), received = b->n.received, wake;
		int took = shoal_poll(b->ctx, MAILBOX_BUDGET, 0);
		bool busy;

		if (took == -ESHUTDOWN)
			return;
		b->holding = false;
		if (took <= 0 || now - b->hub_polled >= HUB_POLL_NS) {
			shoal__link_hub_poll(b->hub, now);
			b->hub_polled = now;
		}
		for (uint32_t i = 0; i < b->n_peers; i++) {
			take_records(b, &b->peers[i]);
			give_up(b, &b->peers[i]);
			if (took < (int)MAILBOX_BUDGET)
				(void)shoal__link_flush_idle(b->peers[i].link);
		}
		for (uint32_t i = 0; i < b->n_peers; i++) {
			tell(b, &b->peers[i]);
			view_write(&b->peers[i]);
		}
		tell_hub(b);
		view_write_hub(b);
		busy = took > 0 || b->n.received != received;
		if (!b->holding || b->n.received != received)
			b->retry_ns = HELD_RETRY_NS;
		else if ((b->retry_ns *= 2) > HELD_RETRY_MAX_NS)
			b->retry_ns = HELD_RETRY_MAX_NS;
		/* Round again at once, without arming: arming is two system
		 * calls (a read and an epoll_wait) that only a sleep needs. */
		if (busy) {
			spin_end = now + b->cfg->link.spin_ns;
			continue;
		}
		/* Look again, giving the CPU to whatever else may run on it:
		 * a woken group or router then runs at once, and the vCPU does
		 * not halt (see the top of this file). */
		if (now < spin_end) {
			sched_yield();
			continue;
		}
		if (shoal__link_hub_arm(b->hub) == -EAGAIN)
			continue;
		wake = next_deadline(b, now);
		if (b->holding && now + b->retry_ns < wake)
			wake = now + b->retry_ns;
		sleep_until(b, wake);
	}
}

/*
 * At stop, what the links still hold for their peers goes out and is
 * acknowledged first: the hub is polled until no link that is up has a
 * record unacknowledged, for at most STOP_DRAIN_NS. What is left then (a
 * link down, a peer that does not release) is counted lost (lost_stop)
 * and said: the peer may have had it, but never said so. Before this, a
 * host stopped under load lost what was in flight without a count (5 728
 * of 17.5 million, loopback, at 1.4 million a second).
 */
#define STOP_DRAIN_NS (2 * UINT64_C(1000000000))

static void drain_links(struct bridge *b)
{
	struct pollfd pfd = { .fd = shoal__link_hub_fd(b->hub), .events = POLLIN };
	uint64_t end = shoal__now_ns() + STOP_DRAIN_NS;

	for (;;) {
		uint64_t now = shoal__now_ns(), left = 0;
		bool waiting = false;

		shoal__link_hub_poll(b->hub, now);
		for (uint32_t i = 0; i < b->n_peers; i++) {
			struct shoal__link_stats st;

			if (b->peers[i].link == NULL)
				continue;
			(void)shoal__link_flush(b->peers[i].link);
			shoal__link_stats(b->peers[i].link, &st);
			left += st.next_seq - st.acked;
			waiting |= st.state == SHOAL__LINK_UP && st.next_seq != st.acked;
		}
		if (!waiting || now >= end) {
			b->n.lost_stop = left;
			return;
		}
		if (shoal__link_hub_arm(b->hub) != -EAGAIN)
			(void)poll(&pfd, 1, 1);
	}
}

static void close_all(struct bridge *b)
{
	watch_stop(&b->watch);
	view_close(b);
	for (uint32_t i = 0; i < b->n_peers; i++) {
		if (b->peers[i].link != NULL)
			shoal__link_destroy(b->peers[i].link);
	}
	if (b->hub != NULL)
		shoal__link_hub_destroy(b->hub);
	shoal__link_log_to(NULL, NULL);
	free(b->peers);
	free(b->by_host);
	shoal__route_free(b->remote);
	free(b->matches);
	free(b->types);
	free(b->pending);
	if (b->g != NULL)
		shoal_group_detach(b->g);
	shoal__config_free(b->cfg);
}

/*
 * The heap is never given back while the bridge runs. UCX allocates and
 * frees a buffer for each frame that comes in pieces (64 KiB, under
 * glibc's mmap threshold), and glibc gave the freed top of the heap back
 * at once (past M_TRIM_THRESHOLD, 128 KiB): a brk() down and another up
 * for most frames, each down a TLB shootdown that interrupts the other
 * CPU (perf: 4.8 % of the receiving bridge's samples in brk(), 354-439
 * brk() calls in one bridge in a 300 ms sample of shoal-bench-net). What
 * it keeps is at most its high-water mark, a few MiB.
 */
#define HEAP_KEEP (256 * 1024 * 1024)

int shoal__bridge_run(const struct shoal__bridge_opts *o, struct shoal_err *err)
{
	struct bridge b = { .o = o };
	struct shoal_group_desc d = { .n_workers = 1, .n_actors = 1, .node = -1,
				      .on_message = on_message, .user = &b };
	int ret;

	(void)mallopt(M_TRIM_THRESHOLD, HEAP_KEEP);
	ret = shoal__config_load_flags(o->config, SHOAL__CONFIG_NO_PROGRAMS, &b.cfg, err);
	if (ret == 0)
		ret = shoal__config_this_host(b.cfg, o->host, &b.host, err);
	if (ret == 0 && b.cfg->link.window == 0)
		b.cfg->link.window = SHOAL__CFG_LINK_WINDOW;
	if (ret == 0)
		ret = remote_routes(&b, err);
	if (ret == 0) {
		d.types = b.types;
		d.n_types = b.cfg->n_types;
		ret = shoal_group_attach(&b.g, &d, o->system, err);
	}
	if (ret == 0) {
		b.ctx = shoal_group_worker(b.g, 0);
		b.gid = shoal_group_id(b.g);
		shoal__relay_runs(b.ctx, carry_run, &b);
		ret = make_peers(&b, err);
	}
	if (ret == 0)
		ret = watch_start(&b, err);
	if (ret == 0) {
		serve(&b);
		drain_links(&b);
		for (uint32_t i = 0; i < b.n_peers; i++) {
			struct shoal__link_stats st;

			shoal__link_stats(b.peers[i].link, &st);
			b.n.backlogged += st.over_credit;
		}
		fprintf(o->log, "stopped: %llu records sent to other hosts, %llu received and "
			"sent on here; %llu messages for no other host, %llu of its own come back, "
			"%llu lost to a host down, %llu received records refused; %llu of those "
			"sent direct, %llu direct for no group of another host; %llu requests "
			"brought in answered -EOWNERDEAD, %llu not watched; %llu unacknowledged "
			"at the stop, counted lost; %llu of those sent waited in a backlog\n",
			(unsigned long long)b.n.forwarded, (unsigned long long)b.n.received,
			(unsigned long long)b.n.no_host, (unsigned long long)b.n.returned,
			(unsigned long long)b.n.lost_down, (unsigned long long)b.n.refused_in,
			(unsigned long long)b.n.direct, (unsigned long long)b.n.no_group,
			(unsigned long long)b.n.ended, (unsigned long long)b.n.untracked,
			(unsigned long long)b.n.lost_stop, (unsigned long long)b.n.backlogged);
	}
	close_all(&b);
	return ret;
}
