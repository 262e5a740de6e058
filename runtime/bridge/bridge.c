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
 * link's queue (shoal__bridge_put()), whence frames go out with no copy of
 * their own.
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
 *
 * This file is the process: its links made, its loop and sleep, its stop.
 * The messages to the links are bridge_out.c's, those from them
 * bridge_in.c's, the link view and the log bridge_view.c's; their shared
 * state is in bridge_impl.h.
 */
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
#include <unistd.h>

#include <shoal/doorbell.h>

#include "runtime/bridge/bridge_impl.h"
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
/*
 * A peer's backlog: records its link has no credit for yet (not up yet,
 * down, or slow) wait in the link's own queue, this many of its windows
 * beyond the credit (shoal__link_opts.backlog), so that the mailbox goes
 * on to records for other hosts: one host down does not hold up the
 * others' messages. Full, the record waits in shoal__bridge_put() (back-pressure
 * on the senders); a host down past hosts.down_after has what its link
 * never sent counted lost (shoal__bridge_give_up()).
 */
#define BACKLOG_WINDOWS 4u

void shoal__bridge_say(const struct bridge *b, const struct peer *p, const char *fmt, ...)
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
		shoal__bridge_say(b, p, "connecting to %s", lo.addr);
	else
		shoal__bridge_say(b, p, "listening on %s", b->cfg->hosts[b->host].listen);
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
		shoal__bridge_view_open(b);
	return ret;
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
 * hosts.down_after: the turn after it marks its host down (shoal__bridge_note_down())
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
			shoal__bridge_take_records(b, &b->peers[i]);
			shoal__bridge_give_up(b, &b->peers[i]);
			if (took < (int)MAILBOX_BUDGET)
				(void)shoal__link_flush_idle(b->peers[i].link);
		}
		for (uint32_t i = 0; i < b->n_peers; i++) {
			shoal__bridge_tell(b, &b->peers[i]);
			shoal__bridge_view_write(&b->peers[i]);
		}
		shoal__bridge_tell_hub(b);
		shoal__bridge_view_write_hub(b);
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
	shoal__bridge_view_close(b);
	/* Before the links close: their peers reconnect at once (link.h). */
	if (b->hub != NULL)
		shoal__link_hub_stop_listening(b->hub);
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
				      .on_message = shoal__bridge_on_message, .user = &b };
	int ret;

	(void)mallopt(M_TRIM_THRESHOLD, HEAP_KEEP);
	ret = shoal__config_load_flags(o->config, SHOAL__CONFIG_NO_PROGRAMS, &b.cfg, err);
	if (ret == 0)
		ret = shoal__config_this_host(b.cfg, o->host, &b.host, err);
	if (ret == 0 && b.cfg->link.window == 0)
		b.cfg->link.window = SHOAL__CFG_LINK_WINDOW;
	if (ret == 0)
		ret = shoal__bridge_remote_routes(&b, err);
	if (ret == 0) {
		d.types = b.types;
		d.n_types = b.cfg->n_types;
		ret = shoal_group_attach(&b.g, &d, o->system, err);
	}
	if (ret == 0) {
		b.ctx = shoal_group_worker(b.g, 0);
		b.gid = shoal_group_id(b.g);
		shoal__relay_runs(b.ctx, shoal__bridge_carry_run, &b);
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
