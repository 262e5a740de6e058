/* SPDX-License-Identifier: MIT */
/*
 * System views for the tools (see sysview.h).
 *
 * Every read of a mapping runs under shoal__snap_guard(), so a segment file
 * truncated by another process is an error, not a SIGBUS. The guarded
 * functions below only load from the mappings and fill memory allocated
 * before the guard; printing happens later, from the copy.
 *
 * Ordering: the registry is written by the router's control thread and read
 * here with relaxed loads (display values, ordering nothing), except a
 * message type's id, loaded with acquire so that its name is complete (A1).
 * Values read at different times may disagree with each other under live
 * traffic; only values that break the layout's rules count as corruption.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/atomic.h"
#include "shm/util.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/sysview.h"

/* Read-only, owner-agnostic: a tool never writes and reads any user's system. */
#define ATTACH_FLAGS (SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN)

const char *shoal__shm_dir(void)
{
	static char dir[256];

	/* Where the runtime puts the user's systems: one definition, in shm/. */
	if (shoal_seg_dir_path(dir, sizeof(dir)) < 0)
		snprintf(dir, sizeof(dir), "(segment directory path too long)");
	return dir;
}

const char *shoal__group_state_name(uint32_t state)
{
	static const char *const names[] = {
		[SHOAL_GROUP_EMPTY] = "empty",
		[SHOAL_GROUP_DOWN] = "down",
		[SHOAL_GROUP_RUNNING] = "running",
		[SHOAL_GROUP_STOPPING] = "stopping",
		[SHOAL_GROUP_FAILED] = "failed",
		[SHOAL_GROUP_STOPPED] = "stopped",
	};

	return state < sizeof(names) / sizeof(names[0]) ? names[state] : NULL;
}

bool shoal__ring_is_inbound(const struct shoal_seg_tag *tag)
{
	return tag->role == SHOAL__RING_DISPATCHED || tag->role == SHOAL__RING_DIRECT;
}

const char *shoal__ring_role_name(uint32_t role)
{
	switch (role) {
	case SHOAL__RING_UPLINK:
		return "uplink";
	case SHOAL__RING_DISPATCHED:
		return "dispatched";
	case SHOAL__RING_DIRECT:
		return "direct";
	default:
		return NULL;
	}
}

const char *shoal__ring_path(char *buf, size_t len, const struct shoal_seg_tag *tag)
{
	int n;

	switch (tag->role) {
	case SHOAL__RING_UPLINK:
		n = snprintf(buf, len, "worker %u -> dispatcher", tag->a);
		break;
	case SHOAL__RING_DISPATCHED:
		n = snprintf(buf, len, "dispatcher %u -> worker %u", tag->b, tag->a);
		break;
	case SHOAL__RING_DIRECT:
		n = snprintf(buf, len, "group %u worker %u -> worker %u", tag->b, tag->c, tag->a);
		break;
	default:
		n = snprintf(buf, len, "unknown role %u", tag->role);
		break;
	}
	if (tag->gen != 0 && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ", replacement %u", tag->gen);
	return buf;
}

void shoal__json_ring_tag(struct shoal__json *j, const struct shoal_seg_tag *tag)
{
	const char *role = shoal__ring_role_name(tag->role);

	if (role != NULL)
		shoal__json_string(j, "role", role);
	else
		shoal__json_uint(j, "role", tag->role);
	shoal__json_uint(j, "worker", tag->a);
	if (tag->role == SHOAL__RING_DISPATCHED)
		shoal__json_uint(j, "dispatcher", tag->b);
	if (tag->role == SHOAL__RING_DIRECT) {
		shoal__json_uint(j, "from_group", tag->b);
		shoal__json_uint(j, "from_worker", tag->c);
	}
	shoal__json_uint(j, "generation", tag->gen);
}

const char *shoal__system_state_name(uint32_t state)
{
	switch (state) {
	case SHOAL__SYS_RUNNING:
		return "running";
	case SHOAL__SYS_STOPPING:
		return "stopping";
	default:
		return NULL;
	}
}

const char *shoal__alive_name(int alive)
{
	return alive > 0 ? "alive" : alive == 0 ? "dead" : "unknown";
}

__attribute__((format(printf, 3, 4)))
static void problem(bool *corrupt, char reason[SHOAL_ERR_MSG_MAX], const char *fmt, ...)
{
	va_list ap;

	/* Keep the first problem: later ones are often its consequences. */
	if (*corrupt)
		return;
	*corrupt = true;
	va_start(ap, fmt);
	vsnprintf(reason, SHOAL_ERR_MSG_MAX, fmt, ap);
	va_end(ap);
}

/* Copy a fixed-size name field; false if it held no terminator. */
static bool copy_name(char *dst, const char *src, size_t len)
{
	memcpy(dst, src, len);
	if (memchr(dst, '\0', len) != NULL)
		return true;
	dst[len - 1] = '\0';
	return false;
}

/* ---- The registry ---- */

struct reg_read {
	const char *system;
	struct shoal__registry reg;
	struct shoal__sys_view *v;
	struct shoal_err *err;
	int ret;
};

static void read_header(struct shoal__sys_view *v, struct shoal__reg_hdr *h)
{
	char system[SHOAL__SYSTEM_MAX], shown[SHOAL_FMT_PRINTABLE_SIZE(SHOAL__SYSTEM_MAX)];

	if (!copy_name(system, h->system, sizeof(system)) || strcmp(system, v->system) != 0)
		problem(&v->corrupt, v->reason, "the registry names its system '%s', not '%s'",
			shoal__fmt_printable(shown, sizeof(shown), system), v->system);
	v->router_pid = h->router_pid;
	/* Relaxed, here and below: display values from a single writer. */
	v->state = shoal_load_relaxed(&h->state);
	v->n_nodes = h->n_nodes;
	/* A8: pairs with R8 in shoal__ensure_dispatcher(): the dispatchers
	 * counted here have their node and CPU set written. */
	v->n_dispatchers = shoal_load_acquire(&h->n_dispatchers);
	/* Checked at attach; read once here, so checked again. */
	v->cpu_words = h->cpu_words;
	v->route_version = shoal_load_relaxed(&h->route_version);
	v->n_routes = shoal_load_relaxed(&h->n_routes);
	/* A3: pairs with R3 in the router's group declaration: the slots
	 * counted here have their names and mailboxes set. */
	v->n_groups = shoal_load_acquire(&h->n_groups);
	v->spin_ns = h->spin_ns;
	v->yield_ns = h->yield_ns;
	v->released = shoal_load_relaxed(&h->released);
	v->lost_released = shoal_load_relaxed(&h->lost_released);
	if (shoal__system_state_name(v->state) == NULL)
		problem(&v->corrupt, v->reason, "system state %u is neither running (1) nor "
			"stopping (2)", v->state);
	if (v->n_dispatchers > SHOAL_MAX_NODES) {
		problem(&v->corrupt, v->reason, "%u dispatchers, more than the %d the layout holds",
			v->n_dispatchers, SHOAL_MAX_NODES);
		v->n_dispatchers = SHOAL_MAX_NODES;
	}
	if (v->cpu_words == 0 || v->cpu_words > SHOAL__CPU_WORDS_MAX) {
		problem(&v->corrupt, v->reason, "CPU sets of %u words, not 1 to %u", v->cpu_words,
			SHOAL__CPU_WORDS_MAX);
		v->cpu_words = v->cpu_words == 0 ? 1 : SHOAL__CPU_WORDS_MAX;
	}
	if (v->n_groups > SHOAL_MAX_GROUPS) {
		problem(&v->corrupt, v->reason, "%u groups, more than the %d the layout holds",
			v->n_groups, SHOAL_MAX_GROUPS);
		v->n_groups = SHOAL_MAX_GROUPS;
	}
}

static void read_dispatchers(struct shoal__sys_view *v, struct shoal__reg_hdr *h,
			     const uint64_t *cpus)
{
	for (uint32_t d = 0; d < v->n_dispatchers; d++) {
		struct shoal__reg_dispatcher *rd = &h->disp[d];
		struct shoal__disp_view *dv = &v->disp[d];

		dv->node = rd->node;
		dv->stream_min = rd->stream_min;
		dv->stream_probe_ns = rd->stream_probe_ns;
		/* Bounded: d < SHOAL_MAX_NODES, cpu_words <= SHOAL__CPU_WORDS_MAX,
		 * the table's room in the region (shoal__registry_attach()). */
		memcpy(dv->cpus, cpus + d * v->cpu_words, v->cpu_words * sizeof(uint64_t));
		dv->batches = shoal_load_relaxed(&rd->batches);
		dv->messages = shoal_load_relaxed(&rd->messages);
		dv->delivered = shoal_load_relaxed(&rd->delivered);
		dv->no_route = shoal_load_relaxed(&rd->no_route);
		dv->dropped_full = shoal_load_relaxed(&rd->dropped_full);
		dv->dropped_dead = shoal_load_relaxed(&rd->dropped_dead);
		dv->malformed = shoal_load_relaxed(&rd->malformed);
		dv->sleeps = shoal_load_relaxed(&rd->sleeps);
		dv->busy_ns = shoal_load_relaxed(&rd->busy_ns);
		dv->discarded = shoal_load_relaxed(&rd->discarded);
		dv->corrupt = shoal_load_relaxed(&rd->corrupt);
		dv->dropped_corrupt = shoal_load_relaxed(&rd->dropped_corrupt);
	}
}

static void read_types(struct shoal__sys_view *v, struct shoal__reg_type *types)
{
	for (uint32_t i = 0; i < SHOAL__MAX_TYPES; i++) {
		struct shoal__type_view *t = &v->types[v->n_types];
		/* A1: pairs with R2 in shoal__register_type() (runtime/control/snapshot.c): a
		 * non-zero id is stored after the type's name and size. */
		uint32_t id = shoal_load_acquire(&types[i].id);

		if (id == 0)
			continue;
		t->id = id;
		t->max_size = types[i].max_size;
		t->routes = shoal_load_relaxed(&types[i].routes);
		t->live_routes = shoal_load_relaxed(&types[i].live_routes);
		if (!copy_name(t->name, types[i].name, sizeof(t->name)))
			problem(&v->corrupt, v->reason, "the name of message type %u is not "
				"terminated", id);
		v->n_types++;
	}
}

/*
 * The mailbox segment of group `g`. Normally shoal__name_mailbox() of the
 * system and group names, which the registry repeats; when those names are
 * too long to form one, the router used the cut-short name it recorded, so
 * take that if it lies in this system's namespace.
 */
static void group_mailbox_name(const struct shoal__sys_view *v, struct shoal__group_view *g,
			       const char *recorded, bool recorded_ok)
{
	char prefix[SHOAL_SEG_NAME_MAX + SHOAL__SYSTEM_MAX];
	char shown[SHOAL_FMT_PRINTABLE_SIZE(SHOAL_SEG_NAME_MAX)];

	if (shoal__name_mailbox(g->mailbox, v->system, g->name) == 0) {
		if (!recorded_ok || strcmp(recorded, g->mailbox) != 0)
			problem(&g->corrupt, g->reason, "the registry names its mailbox '%s', not "
				"'%s'", shoal__fmt_printable(shown, sizeof(shown), recorded),
				g->mailbox);
		return;
	}
	snprintf(prefix, sizeof(prefix), "shoal.%s.g.", v->system);
	if (recorded_ok && strncmp(recorded, prefix, strlen(prefix)) == 0) {
		snprintf(g->mailbox, sizeof(g->mailbox), "%s", recorded);
		return;
	}
	g->mailbox[0] = '\0';
	problem(&g->corrupt, g->reason, "its mailbox name is too long and the registry records "
		"none of this system");
}

static void check_group(const struct shoal__sys_view *v, struct shoal__group_view *g)
{
	if (shoal__group_state_name(g->state) == NULL)
		problem(&g->corrupt, g->reason, "state %u is not a group state", g->state);
	if (!g->name_ok)
		problem(&g->corrupt, g->reason, "its name is not a valid group name");
	if (g->n_workers == 0 || g->n_workers > SHOAL_MAX_WORKERS)
		problem(&g->corrupt, g->reason, "%u workers, outside 1..%d", g->n_workers,
			SHOAL_MAX_WORKERS);
	if (g->dispatcher >= v->n_dispatchers)
		problem(&g->corrupt, g->reason, "dispatcher %u does not exist (%u dispatchers)",
			g->dispatcher, v->n_dispatchers);
}

static void read_group_once(struct shoal__sys_view *v, uint32_t id, struct shoal__reg_group *rg)
{
	struct shoal__group_view *g = &v->groups[id];
	char recorded[SHOAL_SEG_NAME_MAX];
	bool recorded_ok;

	g->id = id;
	g->name_ok = copy_name(g->name, rg->name, sizeof(g->name)) &&
		     shoal__check_name(g->name, "group", NULL) == 0;
	g->state = shoal_load_relaxed(&rg->state);
	g->gen = shoal_load_relaxed(&rg->gen);
	g->pid = shoal_load_relaxed(&rg->pid);
	g->n_workers = rg->n_workers;
	g->n_actors = rg->n_actors;
	g->node = rg->node;
	g->dispatcher = rg->dispatcher;
	g->attaches = shoal_load_relaxed(&rg->attaches);
	g->lost_queued = shoal_load_relaxed(&rg->lost_queued);
	/* Unused dispatcher slots hold zeros: summing all of them is exact. */
	for (int d = 0; d < SHOAL_MAX_NODES; d++) {
		struct shoal__gstat_view *one = &g->per_disp[d];

		one->delivered = shoal_load_relaxed(&rg->stats[d].delivered);
		one->dropped_full = shoal_load_relaxed(&rg->stats[d].dropped_full);
		one->dropped_dead = shoal_load_relaxed(&rg->stats[d].dropped_dead);
		one->dropped_corrupt = shoal_load_relaxed(&rg->stats[d].dropped_corrupt);
		g->delivered += one->delivered;
		g->dropped_full += one->dropped_full;
		g->dropped_dead += one->dropped_dead;
		g->dropped_corrupt += one->dropped_corrupt;
	}
	g->damaged = shoal_load_relaxed(&rg->damaged);
	g->replaced = shoal_load_relaxed(&rg->replaced);
	g->lost_corrupt = shoal_load_relaxed(&rg->lost_corrupt);
	/* A slot counted before the router filled it in: nothing to judge yet. */
	if (g->state == SHOAL_GROUP_EMPTY)
		return;
	check_group(v, g);
	if (g->damaged > 0)
		problem(&g->corrupt, g->reason, "damaged: %u of its rings or mailboxes were found "
			"corrupted (%u replaced); %llu messages lost in them, %llu copies dropped",
			g->damaged, g->replaced, (unsigned long long)g->lost_corrupt,
			(unsigned long long)g->dropped_corrupt);
	recorded_ok = copy_name(recorded, rg->mailbox, sizeof(recorded));
	if (g->name_ok)
		group_mailbox_name(v, g, recorded, recorded_ok);
}

/* A slot the router frees or gives to another group as we read it is read
 * again (slot_seq, runtime/control/registry.c): never one owner's name with
 * another's counters. */
static void read_group(struct shoal__sys_view *v, uint32_t id, struct shoal__reg_group *rg)
{
	for (int tries = 0; tries < 100; tries++) {
		/* A5: pairs with R6 in the router's slot_rewrite_end(). */
		uint32_t seq = shoal_load_acquire(&rg->slot_seq);

		memset(&v->groups[id], 0, sizeof(v->groups[id]));
		read_group_once(v, id, rg);
		/* A6: pairs with R5 in slot_rewrite_begin(): our reads before. */
		shoal_fence_acquire();
		if (!(seq & 1) && shoal_load_relaxed(&rg->slot_seq) == seq) {
			v->groups[id].slot_seq = seq;
			return;
		}
	}
	problem(&v->groups[id].corrupt, v->groups[id].reason, "its slot changed owner on every "
		"one of 100 reads");
}

static void read_registry(void *arg)
{
	struct reg_read *r = arg;
	struct shoal__sys_view *v = r->v;

	r->ret = shoal__registry_attach(&r->reg, r->system, ATTACH_FLAGS, r->err);
	if (r->ret < 0)
		return;
	v->taken_ns = shoal__now_ns();
	shoal_seg_info(&r->reg.seg, &v->registry);
	snprintf(v->registry_path, sizeof(v->registry_path), "%s", r->reg.seg.path);
	/* The probe also catches a router pid that was recycled. */
	v->router_alive = shoal_seg_probe(r->reg.seg.path, NULL);
	read_header(v, r->reg.hdr);
	read_dispatchers(v, r->reg.hdr, r->reg.cpus);
	read_types(v, r->reg.types);
	for (uint32_t id = 0; id < v->n_groups; id++)
		read_group(v, id, &r->reg.groups[id]);
}

/* ---- Mailboxes ---- */

struct mbx_read {
	const struct shoal_seg *seg;
	struct shoal__group_view *g;
};

static void read_bell(struct shoal__bell_counts *c, const struct shoal_doorbell *db)
{
	/* Relaxed: display values. */
	c->sleeps = shoal_load_relaxed(&db->sleeps);
	c->wakes = shoal_load_relaxed(&db->wakes);
}

static void add_bell(struct shoal__bell_counts *sum, const struct shoal__bell_counts *one)
{
	sum->sleeps += one->sleeps;
	sum->wakes += one->wakes;
}

static void read_worker(struct shoal__worker_sums *s, struct shoal__mbx_worker *w)
{
	s->sent_routed = shoal_load_relaxed(&w->sent_routed);
	s->sent_direct = shoal_load_relaxed(&w->sent_direct);
	s->received = shoal_load_relaxed(&w->received);
	s->handled = shoal_load_relaxed(&w->handled);
	s->try_failed = shoal_load_relaxed(&w->try_failed);
	s->stale = shoal_load_relaxed(&w->stale);
	s->malformed = shoal_load_relaxed(&w->malformed);
	s->discarded = shoal_load_relaxed(&w->discarded);
	s->fwd_lost = shoal_load_relaxed(&w->fwd_lost);
	s->set_aside = shoal_load_relaxed(&w->set_aside);
	s->up_no_route = shoal_load_relaxed(&w->up_no_route);
	s->up_dropped_full = shoal_load_relaxed(&w->up_dropped_full);
	s->up_malformed = shoal_load_relaxed(&w->up_malformed);
	s->lost_corrupt = shoal_load_relaxed(&w->lost_corrupt);
	s->fwd_sent = shoal_load_relaxed(&w->fwd_sent);
	s->fwd_taken = shoal_load_relaxed(&w->fwd_taken);
	s->crashes = shoal_load_relaxed(&w->crashes);
	read_bell(&s->in_db, &w->in_db);
	read_bell(&s->up_db, &w->up_db);
	read_bell(&s->space_db, &w->space_db);
}

static void add_worker(struct shoal__worker_sums *sum, const struct shoal__worker_sums *one)
{
	sum->sent_routed += one->sent_routed;
	sum->sent_direct += one->sent_direct;
	sum->received += one->received;
	sum->handled += one->handled;
	sum->try_failed += one->try_failed;
	sum->stale += one->stale;
	sum->malformed += one->malformed;
	sum->discarded += one->discarded;
	sum->fwd_lost += one->fwd_lost;
	sum->set_aside += one->set_aside;
	sum->up_no_route += one->up_no_route;
	sum->up_dropped_full += one->up_dropped_full;
	sum->up_malformed += one->up_malformed;
	sum->lost_corrupt += one->lost_corrupt;
	sum->fwd_sent += one->fwd_sent;
	sum->fwd_taken += one->fwd_taken;
	sum->crashes += one->crashes;
	add_bell(&sum->in_db, &one->in_db);
	add_bell(&sum->up_db, &one->up_db);
	add_bell(&sum->space_db, &one->space_db);
}

/* Add the latency histograms of the n workers of mailbox h to *l. */
static void read_latency(struct shoal__lat_sums *l, struct shoal__mbx_hdr *h, uint16_t n)
{
	for (uint16_t i = 0; i < n; i++) {
		struct shoal__mbx_lat *one = &h->lat[i];

		for (uint32_t b = 0; b < SHOAL__LAT_BUCKETS; b++) {
			uint64_t c = shoal_load_relaxed(&one->bucket[b]);

			l->bucket[b] += c;
			l->count += c;
		}
		l->sum_ns += shoal_load_relaxed(&one->sum_ns);
		l->out_of_range += shoal_load_relaxed(&one->out_of_range);
	}
}

static void read_mailbox(void *arg)
{
	struct mbx_read *m = arg;
	struct shoal__group_view *g = m->g;
	struct shoal__mbx_hdr *h = shoal__mailbox_hdr(m->seg);
	uint16_t n;

	if (h == NULL) {
		problem(&g->corrupt, g->reason, "mailbox %s has no valid mailbox header",
			g->mailbox);
		return;
	}
	/* Read once: the header was checked, but it is shared memory. */
	n = h->n_workers;
	if (n == 0 || n > SHOAL_MAX_WORKERS) {
		problem(&g->corrupt, g->reason, "mailbox %s has %u workers", g->mailbox, n);
		return;
	}
	if (h->group != g->id || n != g->n_workers)
		problem(&g->corrupt, g->reason, "mailbox %s is for group %u with %u workers, the "
			"registry says group %u with %u", g->mailbox, h->group, n, g->id,
			g->n_workers);
	for (uint16_t i = 0; i < n; i++) {
		struct shoal__worker_sums one;

		read_worker(&one, &h->w[i]);
		add_worker(&g->w, &one);
		if (g->workers != NULL)
			g->workers[i] = one;
	}
	if (g->workers != NULL)
		g->n_worker_counts = n;
	if (g->lat != NULL)
		read_latency(g->lat, h, n);
	g->have_counters = true;
}

/* ---- The oldest record of each inbound ring ---- */

#define AGE_PASSES 8   /* walks overtaken by the consumer before giving up */

struct age_read {
	const struct shoal_seg *seg;
	struct shoal__group_view *g;
};

/*
 * The send_ns of the first record of the ring in `mem`: with shm/'s
 * read-only walker, as `shoal dump` reads them, a pass begun again when the
 * consumer overtakes it. False when the ring holds none, a record too short
 * for an envelope, or damage (which the ring's check reports).
 */
static bool oldest_send_ns(const void *mem, uint64_t len, uint64_t *send_ns)
{
	for (int pass = 0; pass < AGE_PASSES; pass++) {
		struct shoal_ring_walk w;
		struct shoal_ring_walk_rec rec;
		struct shoal_envelope env;
		int ret;

		if (shoal_ring_walk_begin(&w, mem, len, NULL) < 0)
			return false;
		ret = shoal_ring_walk_next(&w, &rec, &env, sizeof(env), NULL);
		if (ret == -EAGAIN)
			continue;
		if (ret <= 0 || rec.copied < sizeof(env))
			return false;
		*send_ns = env.send_ns;
		return true;
	}
	return false;
}

static void read_ages(void *arg)
{
	struct age_read *a = arg;
	struct shoal__group_view *g = a->g;

	for (uint32_t i = 0; i < g->rings.n_regions; i++) {
		const struct shoal__region_snap *r = &g->rings.regions[i];
		const void *mem;
		uint64_t sent, now;

		if (!r->entry_ok || r->region.kind != SHOAL_SEG_KIND_RING || !r->have_ring ||
		    !shoal__ring_is_inbound(&r->region.tag) || r->pending <= 0)
			continue;
		mem = shoal_seg_ptr(a->seg, r->region.off, r->region.len, 8);
		if (mem == NULL || !oldest_send_ns(mem, r->region.len, &sent))
			continue;
		/* After the walk: a record sent since it began is not older. */
		now = shoal__now_ns();
		/* Untrusted: a send_ns ahead of our clock is no age at all. */
		if (sent <= now) {
			g->ages[i].known = true;
			g->ages[i].age_ns = now - sent;
		}
	}
}

static void view_ages(struct shoal__group_view *g, const struct shoal_seg *seg)
{
	struct age_read a = { .seg = seg, .g = g };

	/* Ages are an addition to the snapshot: a mailbox that shrinks now
	 * leaves them partly unknown, which the next look reports. */
	(void)shoal__snap_guard(read_ages, &a);
}

static int view_mailbox(struct shoal__group_view *g, const struct shoal__sys_view_opts *opts)
{
	struct shoal__snap_opts so = { .check_retries = opts->check_retries };
	struct shoal_err err = {{0}};
	struct shoal_seg seg;
	struct mbx_read m = { .seg = &seg, .g = g };
	int ret;

	ret = shoal_seg_attach(&seg, g->mailbox, ATTACH_FLAGS, &err);
	if (ret < 0) {
		problem(&g->corrupt, g->reason, "cannot attach its mailbox: %s",
			err.msg[0] != '\0' ? err.msg : shoal_strerror(ret));
		return 0;
	}
	g->mailbox_size = seg.size;
	/* Allocated here: the guarded read below must not allocate. */
	if (opts->workers) {
		g->workers = calloc(SHOAL_MAX_WORKERS, sizeof(*g->workers));
		if (g->workers == NULL) {
			shoal_seg_detach(&seg);
			return -ENOMEM;
		}
	}
	g->lat = calloc(1, sizeof(*g->lat));
	if (g->lat == NULL) {
		shoal_seg_detach(&seg);
		return -ENOMEM;
	}
	if (shoal__snap_guard(read_mailbox, &m) < 0)
		problem(&g->corrupt, g->reason, "mailbox %s shrank while it was read", g->mailbox);
	if (!g->have_counters) {
		free(g->lat);
		g->lat = NULL;
	}
	ret = 0;
	if (opts->rings) {
		ret = shoal__seg_snap_take(&g->rings, &seg, &so);
		if (ret == -EFAULT)
			problem(&g->corrupt, g->reason, "mailbox %s shrank while its rings were "
				"read", g->mailbox);
		g->have_rings = ret == 0;
		ret = ret == -ENOMEM ? ret : 0;
	}
	if (g->have_rings) {
		g->ages = calloc(g->rings.n_regions ? g->rings.n_regions : 1, sizeof(*g->ages));
		if (g->ages == NULL)
			ret = -ENOMEM;
		else
			view_ages(g, &seg);
	}
	shoal_seg_detach(&seg);
	return ret;
}

/* ---- The doorbells of the dispatchers ---- */

struct bell_read {
	const struct shoal__bell *bell;
	struct shoal__sys_view *v;
};

static void read_bells(void *arg)
{
	struct bell_read *b = arg;

	for (uint32_t d = 0; d < b->v->n_dispatchers; d++)
		read_bell(&b->v->disp[d].doorbell, &b->bell->disp[d]);
	read_bell(&b->v->waker, &b->bell->waker);
	b->v->have_bells = true;
}

/* The doorbell segment's counters, when it can be read: the router makes it
 * with the registry, so a system without it is in the making or the
 * unmaking, and its counters are only left out. */
static void view_bells(struct shoal__sys_view *v)
{
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal_seg_region r;
	struct bell_read b = { .v = v };

	if (shoal__name_bell(name, v->system) < 0 ||
	    shoal_seg_attach(&seg, name, ATTACH_FLAGS, NULL) < 0)
		return;
	/* A file that shrinks under the read cuts it short before have_bells. */
	if (shoal_seg_find(&seg, SHOAL__KIND_BELL, "bell", &r) == 0 &&
	    (b.bell = shoal_seg_ptr(&seg, r.off, sizeof(*b.bell), 64)) != NULL)
		(void)shoal__snap_guard(read_bells, &b);
	shoal_seg_detach(&seg);
}

/* ---- The view ---- */

int shoal__sys_view_take(struct shoal__sys_view *v, const char *system,
			 const struct shoal__sys_view_opts *opts, struct shoal_err *err)
{
	struct reg_read r = { .system = system, .v = v, .err = err };
	int ret;

	memset(v, 0, sizeof(*v));
	ret = shoal__check_name(system, "system", err);
	if (ret < 0)
		return ret;
	snprintf(v->system, sizeof(v->system), "%s", system);
	v->types = calloc(SHOAL__MAX_TYPES, sizeof(*v->types));
	v->groups = calloc(SHOAL_MAX_GROUPS, sizeof(*v->groups));
	if (v->types == NULL || v->groups == NULL) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = shoal__snap_guard(read_registry, &r);
	if (ret < 0 && err != NULL) {
		snprintf(err->msg, sizeof(err->msg), "the registry of system %s shrank while it "
			 "was read", system);
	} else if (ret == 0) {
		ret = r.ret;
	}
	/* Attached unless attach failed; a fault may have cut the read short. */
	if (r.reg.seg.base != NULL)
		shoal_seg_detach(&r.reg.seg);
	if (ret < 0)
		goto fail;
	if (opts->mailboxes || opts->rings || opts->workers)
		view_bells(v);
	for (uint32_t id = 0; id < v->n_groups && (opts->mailboxes || opts->rings ||
						     opts->workers); id++) {
		struct shoal__group_view *g = &v->groups[id];

		if (g->state == SHOAL_GROUP_EMPTY || g->mailbox[0] == '\0')
			continue;
		ret = view_mailbox(g, opts);
		if (ret < 0)
			goto fail;
	}
	return 0;
fail:
	shoal__sys_view_free(v);
	return ret;
}

void shoal__sys_view_free(struct shoal__sys_view *v)
{
	for (uint32_t id = 0; v->groups != NULL && id < v->n_groups; id++) {
		if (v->groups[id].have_rings)
			shoal__seg_snap_free(&v->groups[id].rings);
		free(v->groups[id].workers);
		free(v->groups[id].ages);
		free(v->groups[id].lat);
	}
	free(v->groups);
	free(v->types);
	v->groups = NULL;
	v->types = NULL;
	v->n_groups = 0;
	v->n_types = 0;
}

static bool seg_snap_corrupt(const struct shoal__seg_snap *s)
{
	if (s->dir_corrupt)
		return true;
	for (uint32_t i = 0; i < s->n_regions; i++)
		if (s->regions[i].corrupt)
			return true;
	return false;
}

bool shoal__group_view_corrupt(const struct shoal__group_view *g)
{
	return g->corrupt || (g->have_rings && seg_snap_corrupt(&g->rings));
}

bool shoal__sys_view_corrupt(const struct shoal__sys_view *v)
{
	if (v->corrupt)
		return true;
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (shoal__group_view_corrupt(&v->groups[id]))
			return true;
	return false;
}

uint32_t shoal__group_view_restarts(const struct shoal__group_view *g)
{
	return g->attaches > 1 ? g->attaches - 1 : 0;
}

void shoal__sys_view_count(const struct shoal__sys_view *v, struct shoal__sys_counts *c)
{
	memset(c, 0, sizeof(*c));
	for (uint32_t id = 0; id < v->n_groups; id++) {
		const struct shoal__group_view *g = &v->groups[id];

		if (g->state == SHOAL_GROUP_EMPTY || shoal__group_state_name(g->state) == NULL)
			continue;
		c->declared++;
		c->running += g->state == SHOAL_GROUP_RUNNING || g->state == SHOAL_GROUP_STOPPING;
		c->failed += g->state == SHOAL_GROUP_FAILED;
		c->stopped += g->state == SHOAL_GROUP_STOPPED;
		c->restarts += shoal__group_view_restarts(g);
	}
}

int shoal__sys_view_fail(const char *cmd, const char *system, int ret,
			 const struct shoal_err *err)
{
	if (ret == -ENOENT)
		return shoal__cli_fail(cmd, SHOAL_EXIT_ATTACH, ret, "no system '%s' in %s (no "
				       "segment shoal.%s.reg); 'shoal ls' lists the systems there",
				       system, shoal__shm_dir(), system);
	return shoal__cli_fail(cmd, SHOAL_EXIT_ATTACH, ret, "cannot read the registry of system "
			       "'%s': %s", system, err->msg[0] != '\0' ? err->msg :
			       shoal_strerror(ret));
}

const struct shoal__group_view *shoal__sys_view_group(const struct shoal__sys_view *v, int id)
{
	return id >= 0 && (uint32_t)id < v->n_groups ? &v->groups[id] : NULL;
}

const struct shoal__type_view *shoal__sys_view_type(const struct shoal__sys_view *v, uint32_t id)
{
	for (uint32_t i = 0; i < v->n_types; i++)
		if (v->types[i].id == id)
			return &v->types[i];
	return NULL;
}

void shoal__group_view_queued(const struct shoal__group_view *g, uint64_t *records,
			      uint64_t *bytes)
{
	*records = *bytes = 0;
	if (!g->have_rings)
		return;
	for (uint32_t i = 0; i < g->rings.n_regions; i++) {
		const struct shoal__region_snap *r = &g->rings.regions[i];

		if (!r->have_ring || !shoal__ring_is_inbound(&r->region.tag))
			continue;
		*records += r->pending > 0 ? (uint64_t)r->pending : 0;
		*bytes += r->ring.used;
	}
}

uint64_t shoal__lat_quantile(const struct shoal__lat_sums *l, double q)
{
	/* The rank of the message sought: at least the first, at most the last. */
	double want = q < 1 ? q * (double)l->count : (double)l->count;
	uint64_t seen = 0;

	for (uint32_t b = 0; b < SHOAL__LAT_BUCKETS; b++) {
		seen += l->bucket[b];
		if (seen > 0 && (double)seen >= want) {
			uint64_t lo = shoal__lat_lower(b), hi = shoal__lat_lower(b + 1);

			return lo + (hi - lo) / 2;
		}
	}
	return 0;   /* empty: the buckets sum to count */
}

bool shoal__group_view_oldest(const struct shoal__group_view *g, uint64_t *age_ns)
{
	bool any = false;

	*age_ns = 0;
	for (uint32_t i = 0; g->have_rings && g->ages != NULL && i < g->rings.n_regions; i++) {
		if (!g->ages[i].known)
			continue;
		if (!any || g->ages[i].age_ns > *age_ns)
			*age_ns = g->ages[i].age_ns;
		any = true;
	}
	return any;
}
