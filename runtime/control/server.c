/* SPDX-License-Identifier: MIT */
/*
 * The router's control socket and the control thread that serves it: it
 * accepts connections of the system's owner only, and answers each group
 * process's requests (HELLO registers the group with its types and
 * subscriptions; SUB, UNSUB, OPEN_DIRECT, BYE). A connection that closes is
 * its group leaving.
 *
 * Concurrency: only the control thread runs here after start. It takes
 * router->lock for each request and each departure, builds the reply under
 * it and sends it after releasing it, on a non-blocking socket: nothing a
 * peer does (or fails to do) blocks this thread or holds the lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <shoal/doorbell.h>

#include "runtime/control/proto.h"
#include "runtime/control/router_impl.h"
#include "runtime/control/supervisor.h"
#include "shm/util.h"

static int conn_group(const struct shoal_router *r, int fd)
{
	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used && r->groups[g].conn == fd)
			return (int)g;
	return -1;
}

static void group_left(struct shoal_router *r, int g)
{
	struct shoal__group_slot *s = &r->groups[g];

	s->conn = -1;
	s->pid = 0;
	shoal_store_relaxed(&r->regg[g].pid, 0);
	shoal__settle_retired(r, g);
	if (shoal_load_relaxed(&r->regg[g].state) != SHOAL_GROUP_FAILED)
		shoal_store_relaxed(&r->regg[g].state, s->stop_wanted ? SHOAL_GROUP_STOPPED :
									SHOAL_GROUP_DOWN);
	else	/* failed while attached: nothing drains it now */
		shoal__group_count_stranded(r, g);
	s->stop_wanted = false;
	/* Requesters waiting on this group re-check its state now. */
	shoal__wake_all_workers(r);
	shoal__note_change(r);
}

/*
 * One reply, built under router->lock and sent after it is released, on a
 * non-blocking socket: a peer that does not read can never hold the lock
 * (and with it the supervisor) in a send.
 */
union ctl_reply {
	struct shoal__ctl_hdr h;
	struct shoal__ctl_welcome w;
	struct shoal__ctl_ok ok;
	struct shoal__ctl_direct d;
	struct shoal__ctl_error e;
};

/* The pid of the process that opened connection `fd` (the kernel's record,
 * not the pid it claimed); 0 if unknown. */
static pid_t conn_peer_pid(int fd)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 ? cred.pid : 0;
}

/*
 * Whether the process that opened connection `fd` has ended (the kernel's
 * record of its peer, not the pid it claimed). A zombie counts as alive
 * until reaped, an unknown peer too: we only answer "dead" when sure.
 */
static bool conn_peer_dead(int fd)
{
	pid_t pid = conn_peer_pid(fd);

	return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

static int handle_hello(struct shoal_router *r, int fd, const struct shoal__ctl_hello *m,
			union ctl_reply *rep, size_t *rep_len, struct shoal_err *err)
{
	struct shoal_group_spec spec = { .name = m->group, .n_workers = m->n_workers,
					 .n_actors = m->n_actors, .node = m->node };
	const struct shoal__ctl_type *types = shoal__ctl_hello_types(m);
	const struct shoal_filter *subs = shoal__ctl_hello_subs(m);
	struct shoal__ctl_welcome *w = &rep->w;
	struct shoal__group_slot *s;
	uint32_t gen, id;
	int g, ret;

	if (conn_group(r, fd) >= 0)
		return shoal__fail(err, -EISCONN, "this connection already registered a group");
	for (uint32_t i = 0; i < m->n_types; i++) {
		ret = shoal__register_type(r, &types[i], err);
		if (ret < 0)
			return ret;
	}
	g = shoal__declare_group(r, &spec, true, -1, err);
	if (g < 0)
		return g;
	s = &r->groups[g];
	if (s->conn >= 0 && conn_peer_dead(s->conn)) {
		/* Its process died but we have not seen the hang-up (late, or
		 * never while a child it forked holds the socket): it left. */
		fprintf(stderr, "shoal: group %s: process %d is gone, its connection dropped\n",
			s->name, (int)s->pid);
		shutdown(s->conn, SHUT_RDWR);   /* the control loop closes it */
		group_left(r, g);
	}
	if (s->conn >= 0)
		return shoal__fail(err, -EEXIST, "group %s is already running (pid %d)", s->name,
				   (int)s->pid);
	if (shoal_load_relaxed(&r->regg[g].state) == SHOAL_GROUP_FAILED)
		return shoal__fail(err, -EHOSTDOWN, "group %s was marked failed", s->name);
	ret = shoal__mailbox_repair(r, g, err);
	if (ret < 0)
		return ret;
	shoal__route_entry_remove(r, 0, g, false);
	for (uint32_t i = 0; i < m->n_subs; i++) {
		struct shoal_filter f = subs[i];

		f.group = (uint16_t)g;
		ret = shoal__route_entry_append(r, &f, g, &id, err);
		if (ret < 0)
			return ret;
	}
	s->conn = fd;
	s->pid = m->pid;
	/* A stop asked for before this process attached still applies. */
	shoal_store_relaxed(&s->hdr->stop, s->stop_wanted ? 1 : 0);
	gen = shoal_load_relaxed(&r->regg[g].gen) + 1;
	shoal_store_relaxed(&r->regg[g].gen, gen);
	shoal_store_relaxed(&r->regg[g].pid, m->pid);
	shoal_store_relaxed(&r->regg[g].attaches, shoal_load_relaxed(&r->regg[g].attaches) + 1);
	shoal_store_relaxed(&r->regg[g].state, SHOAL_GROUP_RUNNING);
	ret = shoal__publish(r, err);
	if (ret < 0)
		return ret;
	memset(w, 0, sizeof(*w));
	shoal__ctl_init(&w->h, SHOAL__CTL_WELCOME, sizeof(*w));
	w->group = (uint16_t)g;
	w->n_workers = s->n_workers;
	w->n_actors = s->n_actors;
	w->gen = gen;
	w->flags = r->stream ? SHOAL__WELCOME_STREAM : 0;
	w->spin_ns = r->dp.spin_ns;
	w->yield_ns = r->dp.yield_ns;
	w->wake_deadline_ns = r->dp.wake_deadline_ns;
	shoal__name_registry(w->registry, r->system);
	shoal__name_bell(w->bell, r->system);
	shoal__name_mailbox(w->mailbox, r->system, s->name);
	*rep_len = sizeof(*w);
	shoal__note_change(r);
	return 0;
}

static void reply_ok(union ctl_reply *rep, size_t *rep_len, uint32_t id)
{
	memset(&rep->ok, 0, sizeof(rep->ok));
	shoal__ctl_init(&rep->ok.h, SHOAL__CTL_OK, sizeof(rep->ok));
	rep->ok.id = id;
	*rep_len = sizeof(rep->ok);
}

static int handle_open_direct(struct shoal_router *r, int g, const struct shoal__ctl_open_direct *m,
			      union ctl_reply *rep, size_t *rep_len, struct shoal_err *err)
{
	struct shoal__ctl_direct *reply = &rep->d;
	struct shoal__group_slot *dst;
	int ret;

	if (m->dst_group >= r->n_groups || !r->groups[m->dst_group].used)
		return shoal__fail(err, -EINVAL, "no group with id %u", m->dst_group);
	dst = &r->groups[m->dst_group];
	if (m->dst_worker >= dst->n_workers || m->src_worker >= r->groups[g].n_workers)
		return shoal__fail(err, -EINVAL, "worker out of range");
	memset(reply, 0, sizeof(*reply));
	shoal__ctl_init(&reply->h, SHOAL__CTL_DIRECT, sizeof(*reply));
	ret = shoal__direct_ring(r, (int)m->dst_group, m->dst_worker, g, m->src_worker,
				 reply->ring);
	if (ret < 0)
		return shoal__fail(err, ret, "no room for a direct ring in group %s's mailbox",
				   dst->name);
	/* The receiver looks for new rings when it wakes. */
	shoal_doorbell_notify(&dst->hdr->w[m->dst_worker].in_db);
	*rep_len = sizeof(*reply);
	return 0;
}

/*
 * Send one reply without waiting. The kernel's socket buffer is the
 * connection's whole output queue: a group has one request in flight and
 * reads its reply before the next, so only a peer that does not read its
 * replies fills it. -EAGAIN then, and the caller drops the connection.
 */
static int conn_send(int fd, const void *msg, size_t len)
{
	ssize_t n;

	do
		n = send(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EIO;
}

static int conn_send_error(int fd, int code, const char *msg)
{
	struct shoal__ctl_error e;

	memset(&e, 0, sizeof(e));
	shoal__ctl_init(&e.h, SHOAL__CTL_ERROR, sizeof(e));
	e.err = code;
	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	return conn_send(fd, &e, sizeof(e));
}

/*
 * Handle one packet from `fd`. Returns < 0 to drop the connection: a failed
 * HELLO, a request before HELLO, or a reply the peer has no room for.
 */
static int handle_packet(struct shoal_router *r, int fd, const void *buf, size_t len)
{
	struct shoal_err err = { { 0 } };
	int op = shoal__ctl_check(buf, len, &err), g, ret = 0;
	union ctl_reply rep;
	size_t rep_len = 0;
	uint32_t id = 0;

	if (op < 0) {
		conn_send_error(fd, op, err.msg);
		return op;
	}
	pthread_mutex_lock(&r->lock);
	g = conn_group(r, fd);
	if (op != SHOAL__CTL_HELLO && g < 0) {
		ret = shoal__fail(&err, -ENOTCONN, "send HELLO first");
		goto out;
	}
	switch (op) {
	case SHOAL__CTL_HELLO:
		ret = handle_hello(r, fd, buf, &rep, &rep_len, &err);
		break;
	case SHOAL__CTL_SUB: {
		struct shoal_filter f = ((const struct shoal__ctl_sub *)buf)->f;

		f.group = (uint16_t)g;
		ret = shoal__route_entry_append(r, &f, g, &id, &err);
		if (ret == 0)
			ret = shoal__publish(r, &err);
		if (ret == 0)
			reply_ok(&rep, &rep_len, id);
		break;
	}
	case SHOAL__CTL_UNSUB:
		id = ((const struct shoal__ctl_unsub *)buf)->id;
		if (id == 0 || shoal__route_entry_remove(r, id, g, false) == 0)
			ret = shoal__fail(&err, -ENOENT, "this group has no route %u", id);
		else
			ret = shoal__publish(r, &err);
		if (ret == 0)
			reply_ok(&rep, &rep_len, id);
		break;
	case SHOAL__CTL_OPEN_DIRECT:
		ret = handle_open_direct(r, g, buf, &rep, &rep_len, &err);
		break;
	case SHOAL__CTL_BYE:
		group_left(r, g);
		reply_ok(&rep, &rep_len, 0);
		break;
	default:
		ret = shoal__fail(&err, -EBADMSG, "op %d is not a request", op);
		break;
	}
out:
	pthread_mutex_unlock(&r->lock);
	if (ret < 0 && err.msg[0] != '\0') {
		if (conn_send_error(fd, ret, err.msg) == -EAGAIN)
			return -EAGAIN;
	} else if (ret == 0 && rep_len > 0) {
		int sent = conn_send(fd, &rep, rep_len);

		if (sent < 0)
			return sent;
	}
	/* A failed HELLO ends the connection; a failed request does not. */
	return (ret < 0 && (op == SHOAL__CTL_HELLO || g < 0)) ? ret : 0;
}

static void conn_close(struct shoal_router *r, int ep, int fd)
{
	int g;

	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_lock(&r->lock);
	g = conn_group(r, fd);
	if (g >= 0)
		group_left(r, g);
	pthread_mutex_unlock(&r->lock);
	close(fd);
}

/* ---- lifecycle requests: handed to the supervisor ---------------------------------- */

/*
 * Where this process's supervisor takes lifecycle requests (supervisor.h).
 * Process-wide, not per router: only `shoal run` sets it, for its one router;
 * a router nobody supervises answers them ENOTSUP.
 */
static struct {
	pthread_mutex_t lock;
	const struct shoal_router *router;
	int fd;
} admin = { PTHREAD_MUTEX_INITIALIZER, NULL, -1 };

void shoal__control_admin(const struct shoal_router *r, int fd)
{
	pthread_mutex_lock(&admin.lock);
	admin.router = r;
	admin.fd = fd;
	pthread_mutex_unlock(&admin.lock);
}

static bool is_admin(const void *buf, size_t len)
{
	struct shoal__ctl_hdr h;

	if (len < sizeof(h))
		return false;
	memcpy(&h, buf, sizeof(h));
	return h.op == SHOAL__CTL_ADMIN;
}

/*
 * An ADMIN packet on connection `fd`: check it, take `fd` out of this
 * thread's epoll set and hand both to the supervisor through its pipe (a
 * write of one record, atomic and non-blocking). If anything fails, the
 * requester is told why and `fd` is closed. Never waits: the supervisor
 * answers later, itself.
 */
static void admin_handoff(struct shoal_router *r, int ep, int fd, const void *buf, size_t len)
{
	struct shoal_err err = { { 0 } };
	struct shoal__admin_req q = { .fd = fd };
	int ret = shoal__ctl_check(buf, len, &err), g;

	if (ret >= 0) {
		pthread_mutex_lock(&r->lock);
		g = conn_group(r, fd);
		pthread_mutex_unlock(&r->lock);
		if (g >= 0)
			ret = shoal__fail(&err, -EISCONN, "a group's connection carries no lifecycle "
					  "requests: open another");
	}
	if (ret >= 0) {
		memcpy(&q.m, buf, sizeof(q.m));
		epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
		pthread_mutex_lock(&admin.lock);
		if (admin.router != r)
			ret = shoal__fail(&err, -ENOTSUP, "system %s is not run by 'shoal run': no "
					  "supervisor takes lifecycle requests", r->system);
		else if (write(admin.fd, &q, sizeof(q)) != (ssize_t)sizeof(q))
			ret = shoal__fail(&err, -EBUSY, "the supervisor of system %s has too many "
					  "requests waiting: try again", r->system);
		pthread_mutex_unlock(&admin.lock);
		if (ret >= 0)
			return;   /* the supervisor's now */
	}
	conn_send_error(fd, ret, err.msg);
	conn_close(r, ep, fd);
}

#define CONN_REFUSED (UINT64_C(1) << 32)
#define ACCEPT_BACKOFF_NS (100 * UINT64_C(1000000))
#define ACCEPT_LOG_NS (1000 * UINT64_C(1000000))

/* The control thread's own state (only it touches this). */
struct ctl_loop {
	int ep;
	int spare_fd;              /* held to answer a peer when out of descriptors */
	bool listening;            /* listen_fd is in the epoll set */
	uint64_t resume_ns;        /* re-arm listen_fd at this time; 0: armed */
	uint64_t logged_ns;        /* last "out of descriptors" line */
	uint64_t refused;          /* peers turned away since that line */
};

static void listen_arm(struct shoal_router *r, struct ctl_loop *c, bool on)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)r->listen_fd };

	if (on != c->listening &&
	    epoll_ctl(c->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, r->listen_fd, &ev) == 0)
		c->listening = on;
}

/*
 * accept() failed for want of a descriptor (EMFILE, ENFILE) or of memory.
 * The pending peer stays readable on listen_fd, so simply returning would
 * spin. Instead: give up the spare descriptor, accept the peer with it,
 * tell it why and close it (its attach fails with that reason and its
 * supervisor's policy decides); and if even that fails, stop watching
 * listen_fd for ACCEPT_BACKOFF_NS. Either way, say so on stderr (once a
 * second at most): the router has no other channel to the operator.
 * A spare lost to another thread's open() between our close and our
 * reopen is taken again here, once a descriptor is free: without it, a
 * peer left in the backlog waited for its reply for good (run_test's
 * out-of-descriptors case, under TSan: a group that neither attached nor
 * ended).
 */
static void accept_starved(struct shoal_router *r, struct ctl_loop *c, int e)
{
	uint64_t now = shoal__now_ns();
	char msg[SHOAL_ERR_MSG_MAX];
	int fd = -1;

	snprintf(msg, sizeof(msg), "the router of system %s cannot accept a connection: %s "
		 "(raise the open files limit, ulimit -n)", r->system, strerror(e));
	if (c->spare_fd < 0)
		c->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (c->spare_fd >= 0) {
		close(c->spare_fd);
		c->spare_fd = -1;
		fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			conn_send_error(fd, -e, msg);
			close(fd);
		}
		c->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0) {
		listen_arm(r, c, false);
		c->resume_ns = now + ACCEPT_BACKOFF_NS;
	}
	c->refused++;
	if (now - c->logged_ns >= ACCEPT_LOG_NS) {
		fprintf(stderr, "shoal: %s; %llu peer%s turned away\n", msg,
			(unsigned long long)c->refused, c->refused == 1 ? "" : "s");
		c->logged_ns = now;
		c->refused = 0;
	}
}

/*
 * Accept a connection. Only the system's owner may attach: peer
 * credentials, not the file mode alone (the socket may be reachable by
 * others). A refused peer is answered at its first request, so that it
 * reads the reason instead of a reset connection. Connections are
 * non-blocking: nothing a peer does (or fails to do) blocks this thread.
 */
static void conn_accept(struct shoal_router *r, struct ctl_loop *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			accept_starved(r, c, errno);
		return;
	}
	ev.data.u64 = (uint64_t)fd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != geteuid())
		ev.data.u64 |= CONN_REFUSED | (uint64_t)cred.uid << 33;
	if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
		char msg[SHOAL_ERR_MSG_MAX];
		int e = errno;

		snprintf(msg, sizeof(msg), "the router of system %s cannot watch a connection: %s",
			 r->system, strerror(e));
		conn_send_error(fd, -e, msg);
		fprintf(stderr, "shoal: %s\n", msg);
		close(fd);
	}
}

static void conn_refuse(struct shoal_router *r, int fd, uint64_t data, void *buf)
{
	char msg[160];

	(void)shoal__ctl_recv(fd, buf, SHOAL__CTL_MAX);
	snprintf(msg, sizeof(msg), "uid %u may not attach to system %s (owner uid %u)",
		 (unsigned)(data >> 33), r->system, (unsigned)geteuid());
	conn_send_error(fd, -EACCES, msg);
}

void *shoal__control_main(void *arg)
{
	struct shoal_router *r = arg;
	struct epoll_event ev = { .events = EPOLLIN }, evs[32];
	struct ctl_loop c = { .ep = epoll_create1(EPOLL_CLOEXEC),
			      .spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC) };
	void *buf = malloc(SHOAL__CTL_MAX);

	if (c.ep < 0 || buf == NULL)
		goto out;
	listen_arm(r, &c, true);
	ev.data.u64 = (uint64_t)r->wake_fd;
	epoll_ctl(c.ep, EPOLL_CTL_ADD, r->wake_fd, &ev);
	while (!atomic_load(&r->dp.stopping)) {
		int timeout = -1, n;

		if (c.resume_ns != 0) {
			uint64_t now = shoal__now_ns();

			if (now >= c.resume_ns) {
				c.resume_ns = 0;
				listen_arm(r, &c, true);
			} else {
				timeout = (int)((c.resume_ns - now) / 1000000) + 1;
			}
		}
		n = epoll_wait(c.ep, evs, 32, timeout);
		for (int i = 0; i < n; i++) {
			int fd = (int)(uint32_t)evs[i].data.u64, len;

			if (fd == r->wake_fd)
				continue;
			if (fd == r->listen_fd) {
				conn_accept(r, &c);
				continue;
			}
			if (evs[i].data.u64 & CONN_REFUSED) {
				if (evs[i].events & EPOLLIN)
					conn_refuse(r, fd, evs[i].data.u64, buf);
				epoll_ctl(c.ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
				continue;
			}
			if (evs[i].events & EPOLLIN) {
				len = shoal__ctl_recv(fd, buf, SHOAL__CTL_MAX);
				if (len == -EAGAIN)
					continue;
				if (len > 0 && is_admin(buf, (size_t)len)) {
					admin_handoff(r, c.ep, fd, buf, (size_t)len);
					continue;
				}
				if (len > 0 && handle_packet(r, fd, buf, (size_t)len) == 0)
					continue;
			}
			conn_close(r, c.ep, fd);
		}
	}
out:
	free(buf);
	if (c.spare_fd >= 0)
		close(c.spare_fd);
	if (c.ep >= 0)
		close(c.ep);
	return NULL;
}

int shoal__open_socket(struct shoal_router *r, struct shoal_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (shoal__path_socket(r->sock_path, sizeof(r->sock_path), r->system) < 0 ||
	    strlen(r->sock_path) >= sizeof(sa.sun_path))
		return shoal__fail(err, -ENAMETOOLONG, "control socket path too long");
	strcpy(sa.sun_path, r->sock_path);
	r->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (r->listen_fd < 0)
		return shoal__fail(err, -errno, "socket: %s", strerror(errno));
	unlink(r->sock_path);
	if (bind(r->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    chmod(r->sock_path, r->mode) != 0 || listen(r->listen_fd, 64) != 0)
		return shoal__fail(err, -errno, "cannot listen on %s: %s", r->sock_path,
				   strerror(errno));
	r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->wake_fd < 0)
		return shoal__fail(err, -errno, "eventfd: %s", strerror(errno));
	return 0;
}
