/* SPDX-License-Identifier: MIT */
/*
 * Group processes: attaching to a system, the control requests a group makes
 * (register, subscribe, open a direct ring, leave), running the workers, and
 * the one-call entry point for group programs. The data path is runtime/data/.
 *
 * Concurrency: control requests come from any worker thread and are
 * serialised on g->ctl_lock (one request, one reply, in order); peer mailbox
 * mappings are made under the same lock and never unmapped before detach.
 * Nothing here runs on the hot path.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <shoal/group.h>

#include "runtime/group_impl.h"
#include "runtime/control/proto.h"
#include "shm/util.h"

/* ---- control requests --------------------------------------------------- */

/*
 * How long a control request may wait for the router: to be accepted, to
 * send, and for its reply. A router stopped or stuck (SIGSTOP, a debugger,
 * a control thread that never returns) would otherwise hold an attach, a
 * subscribe, a link's opening and a group's exit for good. The default is
 * far above what a busy router takes (a HELLO creates the group's mailbox,
 * 100 of them queue behind one another when a system starts);
 * SHOAL_CTL_TIMEOUT_MS sets it per process. Leaving (BYE) waits at most
 * BYE_TIMEOUT_MS: the router treats a closed connection as a BYE anyway.
 */
#define CTL_TIMEOUT_MS 30000
#define CTL_TIMEOUT_MAX_MS 3600000L
#define BYE_TIMEOUT_MS 1000

/* The process's control timeout: 0, or -EINVAL with the reason in *err. */
static int ctl_timeout(int *ms, struct shoal_err *err)
{
	const char *v = getenv("SHOAL_CTL_TIMEOUT_MS");
	char *end;
	long n;

	*ms = CTL_TIMEOUT_MS;
	if (v == NULL || v[0] == '\0')
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || n < 1 || n > CTL_TIMEOUT_MAX_MS)
		return shoal__fail(err, -EINVAL, "SHOAL_CTL_TIMEOUT_MS=%s: not a number of "
				   "milliseconds from 1 to %ld", v, CTL_TIMEOUT_MAX_MS);
	*ms = (int)n;
	return 0;
}

/*
 * Send a request and copy its reply (of op `want_op`) into `reply` (cap
 * bytes), waiting at most `ms` for each step. An ERROR reply becomes the
 * returned errno and *err. A request whose reply did not come in time is
 * owed one (g->ctl_owed): the router answers in order, so the next call
 * reads and drops the late ones before its own. Lock held.
 */
static int ctl_call(struct shoal_group *g, const void *req, size_t len, void *reply, size_t cap,
		    int want_op, int ms, struct shoal_err *err)
{
	union {
		struct shoal__ctl_error e;
		struct shoal__ctl_welcome w;
		struct shoal__ctl_direct d;
		struct shoal__ctl_ok ok;
	} buf;
	int n, op, sent = shoal__ctl_send(g->ctl, req, len);

	if (sent == -EAGAIN)   /* SO_SNDTIMEO: its queue stayed full */
		return shoal__fail(err, -ETIMEDOUT, "the router of system %s took no request "
				   "for %d ms (stopped or stuck?)", g->system, ms);
	/* Even when the send failed, the router may have explained why before
	 * closing (a refused uid): read that first. */
	for (;;) {
		n = shoal__ctl_readable(g->ctl, ms);
		if (n == -ETIMEDOUT) {
			if (sent == 0)
				g->ctl_owed++;
			return shoal__fail(err, -ETIMEDOUT, "the router of system %s did not "
					   "answer within %d ms (stopped or stuck?)", g->system, ms);
		}
		if (n == 0)
			n = shoal__ctl_recv(g->ctl, &buf, sizeof(buf));
		if (n < 0 || sent < 0 || g->ctl_owed == 0)
			break;
		g->ctl_owed--;   /* the late reply of a request given up */
	}
	if (n < 0 && sent < 0)
		return shoal__fail(err, sent, "lost the router's control socket: %s",
				   strerror(-sent));
	if (n < 0)
		return shoal__fail(err, n, "no reply from the router: %s", strerror(-n));
	op = shoal__ctl_check(&buf, (size_t)n, err);
	if (op < 0)
		return op;
	if (op == SHOAL__CTL_ERROR)
		return shoal__fail(err, buf.e.err < 0 ? buf.e.err : -EPROTO, "%s", buf.e.msg);
	if (op != want_op || (size_t)n > cap)
		return shoal__fail(err, -EPROTO, "router replied with op %d, expected %d", op,
				   want_op);
	memcpy(reply, &buf, (size_t)n);
	return 0;
}

int shoal__open_direct(struct shoal_group *g, unsigned src_worker, uint16_t dst_group,
		       uint16_t dst_worker, char *ring, struct shoal_err *err)
{
	struct shoal__ctl_open_direct req;
	struct shoal__ctl_direct reply;
	int ret;

	memset(&req, 0, sizeof(req));
	shoal__ctl_init(&req.h, SHOAL__CTL_OPEN_DIRECT, sizeof(req));
	req.dst_group = dst_group;
	req.dst_worker = dst_worker;
	req.src_worker = (uint16_t)src_worker;
	pthread_mutex_lock(&g->ctl_lock);
	ret = ctl_call(g, &req, sizeof(req), &reply, sizeof(reply), SHOAL__CTL_DIRECT, g->ctl_ms,
		       err);
	pthread_mutex_unlock(&g->ctl_lock);
	if (ret == 0)
		memcpy(ring, reply.ring, sizeof(reply.ring));
	return ret;
}

int shoal_subscribe(struct shoal_ctx *ctx, const struct shoal_filter *f, uint32_t *id)
{
	struct shoal_group *g = ctx->g;
	struct shoal__ctl_sub req;
	struct shoal__ctl_ok reply;
	int ret = shoal_filter_validate(f, NULL);

	if (ret < 0)
		return ret;
	memset(&req, 0, sizeof(req));
	shoal__ctl_init(&req.h, SHOAL__CTL_SUB, sizeof(req));
	req.f = *f;
	req.f.group = g->id;
	pthread_mutex_lock(&g->ctl_lock);
	ret = ctl_call(g, &req, sizeof(req), &reply, sizeof(reply), SHOAL__CTL_OK, g->ctl_ms,
		       NULL);
	pthread_mutex_unlock(&g->ctl_lock);
	if (ret == 0 && id != NULL)
		*id = reply.id;
	return ret;
}

int shoal_unsubscribe(struct shoal_ctx *ctx, uint32_t id)
{
	struct shoal_group *g = ctx->g;
	struct shoal__ctl_unsub req;
	struct shoal__ctl_ok reply;
	int ret;

	memset(&req, 0, sizeof(req));
	shoal__ctl_init(&req.h, SHOAL__CTL_UNSUB, sizeof(req));
	req.id = id;
	pthread_mutex_lock(&g->ctl_lock);
	ret = ctl_call(g, &req, sizeof(req), &reply, sizeof(reply), SHOAL__CTL_OK, g->ctl_ms,
		       NULL);
	pthread_mutex_unlock(&g->ctl_lock);
	return ret;
}

/* ---- the router's death ---------------------------------------------------- */

/*
 * A group must not outlive its router: once the router process is gone,
 * nothing drains its uplinks or rings its doorbells, and a worker blocked in
 * a send, a request or an idle poll would wait forever. The control socket
 * hangs up the moment the router ends (or drops this group). Every wait
 * re-checks shoal__stop_requested() once per sleep slice, and that asks
 * this function, which looks at the socket at most once per
 * ROUTER_CHECK_NS per process: one clock read (vDSO) otherwise, and never
 * on a path that moves a message. poll() asks for POLLRDHUP only: a reply
 * waiting for a ctl_call() in another thread is neither reported nor read.
 * Once the router is gone, the group stops as shoal_group_stop() does.
 */
#define ROUTER_CHECK_NS (50 * UINT64_C(1000000))

bool shoal__router_gone(struct shoal_group *g)
{
	uint64_t now = shoal__now_ns();
	/* Relaxed: a rate limit; the socket itself is the truth. */
	uint64_t last = atomic_load_explicit(&g->router_checked_ns, memory_order_relaxed);
	struct pollfd p = { .fd = g->ctl, .events = POLLRDHUP };

	if (atomic_load_explicit(&g->router_lost, memory_order_relaxed))
		return true;
	if (g->ctl < 0 || now - last < ROUTER_CHECK_NS ||
	    !atomic_compare_exchange_strong_explicit(&g->router_checked_ns, &last, now,
						     memory_order_relaxed, memory_order_relaxed))
		return false;
	if (poll(&p, 1, 0) <= 0 || p.revents == 0)
		return false;
	atomic_store_explicit(&g->router_lost, true, memory_order_relaxed);
	shoal_group_stop(g);
	return true;
}

/* ---- attach -------------------------------------------------------------- */

static int check_desc(const struct shoal_group_desc *d, const char *name, struct shoal_err *err)
{
	int ret = shoal__check_name(name, "group", err);

	if (ret < 0)
		return ret;
	if (d->n_workers > SHOAL_MAX_WORKERS || d->n_actors > SHOAL_MAX_ACTORS)
		return shoal__fail(err, -EINVAL, "group %s: at most %d workers and %d actors", name,
				   SHOAL_MAX_WORKERS, SHOAL_MAX_ACTORS);
	if (d->n_types > SHOAL__CTL_MAX_TYPES || d->n_subs > SHOAL__CTL_MAX_SUBS)
		return shoal__fail(err, -EINVAL, "group %s: at most %u types and %u routes", name,
				   SHOAL__CTL_MAX_TYPES, SHOAL__CTL_MAX_SUBS);
	if (d->on_batch != NULL && d->on_message == NULL)
		return shoal__fail(err, -EINVAL, "group %s: on_batch needs on_message (requests and "
				   "the other messages go there)", name);
	for (uint32_t i = 0; i < d->n_types; i++) {
		const struct shoal_type *t = &d->types[i];

		if (t->id == 0 || t->name == NULL || t->name[0] == '\0' ||
		    strlen(t->name) >= SHOAL_NAME_MAX || t->max_size > SHOAL_TYPE_MAX_SIZE)
			return shoal__fail(err, -EINVAL, "type #%u: needs a non-zero id, a name of "
					   "1..%d characters and a max size up to %u", i,
					   SHOAL_NAME_MAX - 1, SHOAL_TYPE_MAX_SIZE);
		for (uint32_t j = 0; j < i; j++)
			if (d->types[j].id == t->id)
				return shoal__fail(err, -EINVAL, "type id %u declared twice", t->id);
	}
	for (uint32_t i = 0; i < d->n_subs; i++) {
		struct shoal_filter f = d->subs[i];
		struct shoal_err ferr;

		f.group = 0;
		if (shoal_filter_validate(&f, &ferr) < 0)
			return shoal__fail(err, -EINVAL, "route #%u: %s", i, ferr.msg);
	}
	return 0;
}

static int connect_router(const char *system, int ms, struct shoal_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/* Bounds connect() (a router whose backlog is full) and send(). */
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	char path[256];
	int fd;

	if (shoal__path_socket(path, sizeof(path), system) < 0 || strlen(path) >= sizeof(sa.sun_path))
		return shoal__fail(err, -ENAMETOOLONG, "control socket path too long");
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return shoal__fail(err, -errno, "socket: %s", strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;

		close(fd);
		if (e == EAGAIN)
			return shoal__fail(err, -ETIMEDOUT, "the router of system %s took no "
					   "connection for %d ms (stopped or stuck?)", system, ms);
		return shoal__fail(err, -e, "no router for system %s at %s: %s", system, path,
				   strerror(e));
	}
	return fd;
}

static int hello(struct shoal_group *g, struct shoal__ctl_welcome *w, struct shoal_err *err)
{
	const struct shoal_group_desc *d = &g->desc;
	size_t len = shoal__ctl_hello_size(d->n_types, d->n_subs);
	struct shoal__ctl_hello *m = calloc(1, len);
	struct shoal__ctl_type *t;
	struct shoal_filter *f;
	int ret;

	if (m == NULL)
		return -ENOMEM;
	shoal__ctl_init(&m->h, SHOAL__CTL_HELLO, (uint32_t)len);
	snprintf(m->group, sizeof(m->group), "%s", g->name);
	m->pid = (int32_t)getpid();
	m->n_workers = d->n_workers;   /* 0: as declared (or 1) */
	m->n_actors = d->n_actors;
	m->node = d->node;
	m->n_types = d->n_types;
	m->n_subs = d->n_subs;
	t = (struct shoal__ctl_type *)shoal__ctl_hello_types(m);
	for (uint32_t i = 0; i < d->n_types; i++) {
		t[i].id = d->types[i].id;
		t[i].max_size = d->types[i].max_size;
		snprintf(t[i].name, sizeof(t[i].name), "%s", d->types[i].name);
	}
	f = (struct shoal_filter *)shoal__ctl_hello_subs(m);
	for (uint32_t i = 0; i < d->n_subs; i++) {
		f[i] = d->subs[i];
		f[i].group = 0;
	}
	ret = ctl_call(g, m, len, w, sizeof(*w), SHOAL__CTL_WELCOME, g->ctl_ms, err);
	free(m);
	return ret;
}

/* Build the local type table: id -> (max size, registry slot). */
static int build_types(struct shoal_group *g, struct shoal_err *err)
{
	uint32_t n = 1;

	while (n < 2 * g->desc.n_types + 2)
		n <<= 1;
	g->types = calloc(n, sizeof(*g->types));
	if (g->types == NULL)
		return -ENOMEM;
	g->types_mask = n - 1;
	for (uint32_t i = 0; i < g->desc.n_types; i++) {
		const struct shoal_type *t = &g->desc.types[i];
		struct shoal__reg_type *rt = NULL;
		uint32_t h;

		for (uint32_t k = 0; k < SHOAL__MAX_TYPES; k++)
			/* A2: pairs with R2 in snapshot.c shoal__register_type(). */
			if (shoal_load_acquire(&g->reg.types[k].id) == t->id) {
				rt = &g->reg.types[k];
				break;
			}
		if (rt == NULL)
			return shoal__fail(err, -EPROTO, "router did not register type %u", t->id);
		for (h = t->id & g->types_mask; g->types[h].id != 0; h = (h + 1) & g->types_mask)
			;
		g->types[h] = (struct shoal__ltype){ t->id, t->max_size, rt };
	}
	return 0;
}

static int attach_segments(struct shoal_group *g, const struct shoal__ctl_welcome *w,
			   struct shoal_err *err)
{
	struct shoal_seg_region r;
	int ret;

	ret = shoal__registry_attach(&g->reg, g->system, SHOAL_SEG_RDONLY, err);
	if (ret < 0)
		return ret;
	ret = shoal_seg_attach(&g->bell_seg, w->bell, 0, err);
	if (ret < 0)
		return ret;
	if (shoal_seg_find(&g->bell_seg, SHOAL__KIND_BELL, "bell", &r) < 0 ||
	    (g->bell = shoal_seg_ptr(&g->bell_seg, r.off, sizeof(*g->bell), 64)) == NULL)
		return shoal__fail(err, -EUCLEAN, "%s has no doorbell region", w->bell);
	ret = shoal_seg_attach(&g->mbx_seg, w->mailbox, 0, err);
	if (ret < 0)
		return ret;
	g->mbx = shoal__mailbox_hdr(&g->mbx_seg);
	if (g->mbx == NULL || g->mbx->n_workers != g->n_workers || g->mbx->group != g->id)
		return shoal__fail(err, -EUCLEAN, "mailbox %s does not match this group",
				   w->mailbox);
	return 0;
}

static int start_actors(struct shoal_group *g, struct shoal_err *err)
{
	g->actors = calloc(g->n_actors, sizeof(*g->actors));
	if (g->actors == NULL)
		return -ENOMEM;
	for (uint16_t a = 0; a < g->n_actors; a++) {
		struct shoal_actor *act = &g->actors[a];

		act->ctx = &g->ctx[a % g->n_workers];
		act->slot = a;
		act->addr = shoal_addr_make(g->id, a, g->gen);
		act->user = g->desc.user;
		if (g->desc.on_start != NULL && g->desc.on_start(act) != 0)
			return shoal__fail(err, -ECANCELED, "actor %u of group %s failed to start",
					   a, g->name);
	}
	return 0;
}

int shoal_group_attach(struct shoal_group **out, const struct shoal_group_desc *desc,
		       const char *system, struct shoal_err *err)
{
	struct shoal__ctl_welcome w;
	struct shoal_group *g;
	const char *name;
	int ret;

	if (desc == NULL)
		return shoal__fail(err, -EINVAL, "no group descriptor");
	name = desc->name ? desc->name : getenv("SHOAL_GROUP");
	system = system ? system : getenv("SHOAL_SYSTEM");
	if (system == NULL)
		return shoal__fail(err, -EINVAL, "no system named (argument or SHOAL_SYSTEM)");
	ret = shoal__check_name(system, "system", err);
	if (ret < 0)
		return ret;
	ret = check_desc(desc, name, err);
	if (ret < 0)
		return ret;
	/* Aligned: the group holds doorbells (64-byte objects). */
	if (posix_memalign((void **)&g, _Alignof(struct shoal_group), sizeof(*g)) != 0)
		return -ENOMEM;
	memset(g, 0, sizeof(*g));
	g->desc = *desc;
	g->ctl = -1;
	snprintf(g->name, sizeof(g->name), "%s", name);
	snprintf(g->system, sizeof(g->system), "%s", system);
	pthread_mutex_init(&g->ctl_lock, NULL);
	ret = ctl_timeout(&g->ctl_ms, err);
	if (ret < 0)
		goto fail;
	g->ctl = connect_router(system, g->ctl_ms, err);
	if (g->ctl < 0) {
		ret = g->ctl;
		goto fail;
	}
	ret = hello(g, &w, err);
	if (ret < 0)
		goto fail;
	g->id = w.group;
	g->n_workers = w.n_workers;
	g->n_actors = w.n_actors;
	g->gen = w.gen;
	g->stream = (w.flags & SHOAL__WELCOME_STREAM) != 0;
	g->spin_ns = w.spin_ns;
	g->yield_ns = w.yield_ns;
	g->wake_deadline_ns = w.wake_deadline_ns;
	ret = attach_segments(g, &w, err);
	if (ret == 0)
		ret = build_types(g, err);
	if (ret < 0)
		goto fail;
	if (posix_memalign((void **)&g->ctx, _Alignof(struct shoal_ctx),
			   g->n_workers * sizeof(*g->ctx)) != 0) {
		g->ctx = NULL;
		ret = -ENOMEM;
		goto fail;
	}
	memset(g->ctx, 0, g->n_workers * sizeof(*g->ctx));
	for (unsigned i = 0; i < g->n_workers; i++) {
		ret = shoal__ctx_init(g, i, err);
		if (ret < 0)
			goto fail;
	}
	shoal_doorbell_init(&g->link_bell);
	ret = start_actors(g, err);
	if (ret < 0)
		goto fail;
	*out = g;
	return 0;
fail:
	shoal_group_detach(g);
	return ret;
}

/* ---- accessors, run, stop, detach ------------------------------------------- */

struct shoal_ctx *shoal_group_worker(struct shoal_group *g, unsigned w)
{
	return w < g->n_workers ? &g->ctx[w] : NULL;
}

int shoal_group_id(const struct shoal_group *g)
{
	return g->id;
}

uint32_t shoal_group_generation(const struct shoal_group *g)
{
	return g->gen;
}

uint64_t shoal_group_lookup(struct shoal_group *g, const char *name, uint16_t slot)
{
	/* A3: pairs with R3 in registry.c shoal__declare_group(). */
	uint32_t n = shoal_load_acquire(&g->reg.hdr->n_groups);

	for (uint32_t i = 0; i < n && i < SHOAL_MAX_GROUPS; i++) {
		const struct shoal__reg_group *rg = &g->reg.groups[i];
		/* A5: pairs with R6 in registry.c slot_rewrite_end(): a slot that
		 * changes owner as we read it is skipped (shoal_lookup() asks
		 * again), never one owner's name with another's generation. */
		uint32_t seq = shoal_load_acquire(&rg->slot_seq);
		bool match = strncmp(rg->name, name, sizeof(rg->name)) == 0 &&
			     (slot == SHOAL_SLOT_GROUP || slot == SHOAL_SLOT_ALL ||
			      slot < rg->n_actors);
		/* Relaxed: a snapshot; a later send re-checks it. */
		uint32_t gen = shoal_load_relaxed(&rg->gen);

		/* A6: pairs with R5 in slot_rewrite_begin(): our reads before. */
		shoal_fence_acquire();
		if (match && !(seq & 1) && shoal_load_relaxed(&rg->slot_seq) == seq)
			return shoal_addr_make((uint16_t)i, slot, gen);
	}
	return SHOAL_ADDR_NONE;
}

uint64_t shoal_lookup(struct shoal_ctx *ctx, const char *name, uint16_t slot,
		      int64_t timeout_ns)
{
	struct shoal_group *g = ctx->g;
	uint64_t end = timeout_ns < 0 ? UINT64_MAX : shoal__now_ns() + (uint64_t)timeout_ns;

	for (;;) {
		uint64_t addr = shoal_group_lookup(g, name, slot);
		int id = shoal_addr_group(addr);

		/* Relaxed: a snapshot, as shoal_group_lookup()'s; a send
		 * re-checks the state. */
		if (addr != SHOAL_ADDR_NONE &&
		    shoal_load_relaxed(&g->reg.groups[id].state) == SHOAL_GROUP_RUNNING)
			return shoal_group_lookup(g, name, slot);   /* its running generation */
		if (shoal__now_ns() >= end || shoal__stop_requested(g))
			return SHOAL_ADDR_NONE;
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
}

void shoal_group_stop(struct shoal_group *g)
{
	atomic_store(&g->stop, true);
	for (unsigned w = 0; w < g->n_workers; w++) {
		shoal_doorbell_notify(&g->mbx->w[w].in_db);
		shoal_doorbell_notify(&g->mbx->w[w].up_db);
	}
}

static void worker_stop_actors(struct shoal_ctx *ctx)
{
	struct shoal_group *g = ctx->g;

	if (g->desc.on_stop == NULL)
		return;
	for (uint16_t a = (uint16_t)ctx->w; a < g->n_actors; a = (uint16_t)(a + g->n_workers))
		g->desc.on_stop(&g->actors[a]);
}

static void *worker_main(void *arg)
{
	struct shoal_ctx *ctx = arg;
	int ret;

	do
		ret = shoal_poll(ctx, 0, -1);
	while (ret >= 0);
	worker_stop_actors(ctx);
	return (void *)(intptr_t)(ret == -ESHUTDOWN ? 0 : ret);
}

int shoal_group_run(struct shoal_group *g)
{
	pthread_t th[SHOAL_MAX_WORKERS];
	unsigned started = 1;
	void *rv0;
	int ret = 0;

	for (unsigned w = 1; w < g->n_workers; w++, started++)
		if (pthread_create(&th[w], NULL, worker_main, &g->ctx[w]) != 0) {
			shoal_group_stop(g);
			ret = -EAGAIN;
			break;
		}
	rv0 = worker_main(&g->ctx[0]);
	if (ret == 0)
		ret = (int)(intptr_t)rv0;
	for (unsigned w = 1; w < started; w++) {
		void *rv;

		pthread_join(th[w], &rv);
		if (ret == 0)
			ret = (int)(intptr_t)rv;
	}
	return ret;
}

void shoal_group_detach(struct shoal_group *g)
{
	if (g == NULL)
		return;
	shoal__linker_stop(g);   /* it makes control calls: before the bye */
	if (g->ctl >= 0 && g->mbx != NULL) {
		struct shoal__ctl_hdr bye;
		struct shoal__ctl_ok ok;

		shoal__ctl_init(&bye, SHOAL__CTL_BYE, sizeof(bye));
		pthread_mutex_lock(&g->ctl_lock);
		(void)ctl_call(g, &bye, sizeof(bye), &ok, sizeof(ok), SHOAL__CTL_OK,
			       g->ctl_ms < BYE_TIMEOUT_MS ? g->ctl_ms : BYE_TIMEOUT_MS, NULL);
		pthread_mutex_unlock(&g->ctl_lock);
	}
	if (g->ctx != NULL)
		for (unsigned w = 0; w < g->n_workers; w++)
			shoal__ctx_fini(&g->ctx[w]);
	free(g->ctx);
	free(g->fwd_mem);
	free(g->actors);
	free(g->types);
	for (int i = 0; i < SHOAL_MAX_GROUPS; i++)
		if (g->peers[i].mapped)
			shoal_seg_detach(&g->peers[i].seg);
	shoal_seg_detach(&g->mbx_seg);
	shoal_seg_detach(&g->bell_seg);
	shoal_seg_detach(&g->reg.seg);
	if (g->ctl >= 0)
		close(g->ctl);
	pthread_mutex_destroy(&g->ctl_lock);
	free(g);
}

/* ---- the one-call entry point --------------------------------------------- */

static struct shoal_group *signal_group;

static void on_signal(int sig)
{
	(void)sig;
	if (signal_group != NULL)
		shoal_group_stop(signal_group);
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f, "usage: %s [--system NAME] [--group NAME] [the program's own arguments]\n"
		"Run one actor group of a Shoal system. Normally started by 'shoal run',\n"
		"which sets SHOAL_SYSTEM and SHOAL_GROUP.\n"
		"  -s, --system NAME  system to attach to (default: $SHOAL_SYSTEM)\n"
		"  -g, --group NAME   this group's name (default: the program's own, or\n"
		"                     $SHOAL_GROUP)\n"
		"Other arguments belong to the program; none after \"--\" is read here.\n",
		prog);
}

/*
 * The value of option `name` (--name VALUE, --name=VALUE or -c VALUE) at
 * argv[*i], advancing *i past it; NULL if argv[*i] is not that option.
 * *missing is set when the option comes without its value.
 */
static const char *opt_value(int argc, char **argv, int *i, const char *name, char c,
			     bool *missing)
{
	const char *a = argv[*i];
	size_t n = strlen(name);

	if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, name, n) == 0 && a[2 + n] == '=')
		return a + 3 + n;
	if (!((a[0] == '-' && a[1] == '-' && strcmp(a + 2, name) == 0) ||
	      (a[0] == '-' && a[1] == c && a[2] == '\0')))
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

int shoal_group_main(const struct shoal_group_desc *desc, int argc, char **argv)
{
	struct shoal_group_desc d = *desc;
	const char *system = NULL, *v;
	struct sigaction sa = { .sa_handler = on_signal };
	struct shoal_err err = { { 0 } };
	struct shoal_group *g;
	bool missing = false;
	int ret;

	/* Its output is diagnostics (often a pipe to `shoal run`'s reader):
	 * a write there must not kill a group. The control socket never
	 * raises it (MSG_NOSIGNAL). */
	signal(SIGPIPE, SIG_IGN);
	/* Ours are --system, --group and --help; every other argument is the
	 * program's own, left in argv for it (up to a "--", after which
	 * nothing is ours). */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if ((v = opt_value(argc, argv, &i, "system", 's', &missing)) != NULL)
			system = v;
		else if ((v = opt_value(argc, argv, &i, "group", 'g', &missing)) != NULL)
			d.name = v;
		else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout, argv[0]);
			return 0;
		}
		if (missing) {
			fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
			usage(stderr, argv[0]);
			return 2;
		}
	}
	ret = shoal_group_attach(&g, &d, system, &err);
	if (ret < 0) {
		fprintf(stderr, "%s: cannot attach: %s\n", argv[0],
			err.msg[0] ? err.msg : shoal_strerror(ret));
		return 1;
	}
	signal_group = g;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	ret = shoal_group_run(g);
	signal_group = NULL;
	shoal_group_detach(g);
	if (ret < 0)
		fprintf(stderr, "%s: %s\n", argv[0], shoal_strerror(ret));
	return ret < 0 ? 1 : 0;
}
