/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/layout.h"
#include "shm/ring_layout.h"
#include "shm/segment_layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

const struct shoal_type rt_types[] = {
	{ T_PING, 64, "ping" },
	{ T_PONG, 64, "pong" },
	{ T_REQ, 64, "req" },
	{ T_RESP, 64, "resp" },
};

struct results *rt_res;
struct shoal_router *rt_router;
char rt_sysname[32];
uint64_t rt_yield_ns;
int rt_stream;

/* ---- fixture ---------------------------------------------------------------- */

int rt_start_router(const char *name, const struct shoal_topology *topo, mode_t mode)
{
	struct shoal_router_opts o = { .system = name, .topology = topo, .mode = mode,
				       .inbound_capacity = 64 * 1024, .uplink_capacity = 64 * 1024,
				       .direct_capacity = 16 * 1024, .yield_ns = rt_yield_ns,
				       .stream = rt_stream };
	struct shoal_err err = { { 0 } };
	int ret;

	snprintf(rt_sysname, sizeof(rt_sysname), "%s", name);
	test_shm_dir_make(name);
	setenv("SHOAL_SYSTEM", name, 1);
	memset(rt_res, 0, sizeof(*rt_res));
	ret = shoal_router_start(&rt_router, &o, &err);
	if (ret < 0)
		print_error("router: %s\n", err.msg);
	return ret;
}

void rt_stop_router(void)
{
	shoal_router_destroy(rt_router);
	rt_router = NULL;
	test_shm_dir_remove();
}

int rt_leave_nothing(void **state)
{
	char *log = rt_stderr_end();

	(void)state;
	if (log != NULL)
		fprintf(stderr, "%s", log);
	free(log);
	/* Children first: a group killed is only a failed group to the router
	 * stopping after it, and none is left to find its segments gone. */
	test_kill_children();
	rt_stop_router();
	rt_yield_ns = 0;
	rt_stream = SHOAL_STREAM_AUTO;
	return 0;
}

int rt_declare(const char *name, uint16_t workers, uint16_t actors)
{
	struct shoal_group_spec spec = { name, workers, actors, -1 };
	struct shoal_err err = { { 0 } };
	int id = shoal_router_group(rt_router, &spec, &err);

	if (id < 0)
		fail_msg("declare %s: %s", name, err.msg);
	return id;
}

uint32_t rt_route(int group, uint32_t type, uint8_t mode, uint8_t op, uint64_t a, uint64_t b)
{
	struct shoal_filter f = { .types = { type }, .n_types = 1, .group = (uint16_t)group,
				  .mode = mode };
	struct shoal_err err = { { 0 } };
	uint32_t id;

	f.key.offset = offsetof(struct msg, key);
	f.key.width = 8;
	f.key.op = op;
	f.key.a = a;
	f.key.b = b;
	if (shoal_router_add_route(rt_router, &f, &id, &err) < 0)
		fail_msg("route: %s", err.msg);
	return id;
}

/* Wait until group `id` has a process attached. */
void rt_wait_attached(int id)
{
	for (int i = 0; i < 1000 && shoal_router_group_pid(rt_router, id) == 0; i++)
		shoal_router_wait_change(rt_router, 10000000);
	assert_true(shoal_router_group_pid(rt_router, id) > 0);
}

void rt_wait_count(int child, uint64_t want, int timeout_ms)
{
	for (int i = 0; i < timeout_ms && atomic_load(&rt_res->count[child]) < want; i++)
		usleep(1000);
	if (atomic_load(&rt_res->count[child]) != want) {
		/* Per actor, a worker that never ran shows as the zeros of the
		 * actors it owns (actor a belongs to worker a % workers). */
		print_error("child %d handled per actor:", child);
		for (int a = 0; a < MAX_ACT; a++)
			print_error(" %llu",
				    (unsigned long long)atomic_load(&rt_res->per_actor[child][a]));
		print_error("\n");
		fail_msg("child %d handled %llu messages, expected %llu", child,
			 (unsigned long long)atomic_load(&rt_res->count[child]),
			 (unsigned long long)want);
	}
}

/* Wait until children 0..n-1 have attached. */
void rt_wait_ready(int n)
{
	for (int c = 0; c < n; c++)
		for (int i = 0; !atomic_load(&rt_res->ready[c]); i++) {
			assert_true(i < 10000);
			usleep(1000);
		}
}

/* ---- child programs ------------------------------------------------------------ */



/* Consumers check per-sender order: seq must grow by exactly one. */
void rt_count_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	const struct child *c = a->user;
	struct msg v;

	if (m->len != sizeof(v)) {
		atomic_fetch_add(&rt_res->order_errors[c->index], 1);
		return;
	}
	memcpy(&v, m->data, sizeof(v));
	atomic_fetch_add(&rt_res->per_actor[c->index][a->slot % MAX_ACT], 1);
	atomic_fetch_add(&rt_res->sum_seq[c->index], v.seq);
	atomic_store(&rt_res->last_seq[c->index], v.seq);
	atomic_fetch_add(&rt_res->count[c->index], 1);
	if (m->type == T_REQ)
		shoal_respond(a->ctx, m, T_RESP, &v, sizeof(v));
}

/* Strict in-order check for single-actor consumers of one producer. */
void rt_ordered_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	const struct child *c = a->user;
	uint64_t *expect = a->state;
	struct msg v;

	memcpy(&v, m->data, sizeof(v));
	if (c->mode == 2 && v.seq % 2 != 0)
		atomic_fetch_add(&rt_res->order_errors[c->index], 1);   /* odd seq on an even route */
	if (c->mode != 2 && v.seq != *expect)
		atomic_fetch_add(&rt_res->order_errors[c->index], 1);
	if (c->mode == 2 && v.seq != *expect)
		atomic_fetch_add(&rt_res->order_errors[c->index], 1);
	*expect = v.seq + (c->mode == 2 ? 2 : 1);
	atomic_fetch_add(&rt_res->count[c->index], 1);
}

int rt_ordered_start(struct shoal_actor *a)
{
	a->state = calloc(1, sizeof(uint64_t));
	return a->state == NULL;
}

int rt_consumer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = {
		.name = c->name, .n_workers = c->workers, .n_actors = c->actors, .node = -1,
		.types = rt_types, .n_types = RT_N_TYPES,
		.on_message = c->mode >= 1 ? rt_ordered_handler : rt_count_handler,
		.on_start = c->mode >= 1 ? rt_ordered_start : NULL,
		.route = c->route, .user = c,
		.subs = c->has_sub ? &c->sub : NULL, .n_subs = c->has_sub ? 1 : 0,
	};
	struct shoal_group *g;
	struct shoal_err err = { { 0 } };
	int ret = shoal_group_attach(&g, &d, NULL, &err);

	if (ret < 0) {
		fprintf(stderr, "%s: attach: %s\n", c->name, err.msg);
		return 10;
	}
	atomic_store(&rt_res->ready[c->index], 1);
	ret = shoal_group_run(g);
	shoal_group_detach(g);
	return ret == 0 && atomic_load(&rt_res->order_errors[c->index]) == 0 ? 0 : 1;
}

int rt_producer_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group_desc d = {
		.name = c->name, .n_workers = 1, .n_actors = 1, .node = -1,
		.types = rt_types, .n_types = RT_N_TYPES, .on_message = rt_count_handler, .user = c,
	};
	struct shoal_group *g;
	struct shoal_err err = { { 0 } };
	struct shoal_ctx *ctx;
	int ret = shoal_group_attach(&g, &d, NULL, &err);

	if (ret < 0) {
		fprintf(stderr, "%s: attach: %s\n", c->name, err.msg);
		return 10;
	}
	ctx = shoal_group_worker(g, 0);
	if (c->gated) {
		atomic_store(&rt_res->ready[c->index], 1);
		while (!atomic_load(&rt_res->go))
			usleep(1000);
	}
	for (uint64_t i = 0; i < c->n; i++) {
		struct msg v = { .seq = c->first + i, .from = (uint32_t)c->index,
				 .key = c->first + i };

		ret = c->dest ? shoal_send_to(ctx, c->dest, c->type, &v, sizeof(v))
			      : shoal_send(ctx, c->type, &v, sizeof(v));
		if (ret < 0) {
			fprintf(stderr, "%s: send %llu: %s\n", c->name, (unsigned long long)i,
				shoal_strerror(ret));
			shoal_group_detach(g);
			return 11;
		}
	}
	shoal_group_detach(g);
	return 0;
}

struct shoal_group *rt_child_attach(struct child *c, const char *name,
				    void (*on_message)(struct shoal_actor *a,
						       const struct shoal_msg *m))
{
	struct shoal_group_desc d = { .name = name != NULL ? name : c->name, .types = rt_types,
				      .n_types = RT_N_TYPES, .on_message = on_message, .node = -1,
				      .user = c, .on_batch = c->on_batch };
	struct shoal_group *g;
	struct shoal_err err = { { 0 } };

	if (shoal_group_attach(&g, &d, NULL, &err) < 0) {
		fprintf(stderr, "%s: attach: %s\n", d.name, err.msg);
		return NULL;
	}
	return g;
}

struct shoal_group *rt_attach_here(const char *name, uint16_t workers, uint16_t actors)
{
	static struct child self_child = { .index = 0, .name = "here" };
	struct shoal_group_desc d = { .name = name, .n_workers = workers, .n_actors = actors,
				      .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = rt_count_handler, .node = -1,
				      .user = &self_child };
	struct shoal_group *g;
	struct shoal_err err = { { 0 } };

	if (shoal_group_attach(&g, &d, NULL, &err) < 0)
		fail_msg("attach %s: %s", name, err.msg);
	return g;
}

void rt_stop_and_reap(pid_t *pids, int n)
{
	assert_int_equal(shoal_router_stop_groups(rt_router, 10000000000), 0);
	for (int i = 0; i < n; i++)
		test_assert_exited(test_wait_pid(pids[i], 10000), 0);
}

pid_t rt_group_pid(const char *system, const char *name)
{
	struct shoal__registry reg;
	pid_t pid = 0;

	if (shoal__registry_attach(&reg, system, SHOAL_SEG_RDONLY, NULL) < 0)
		return 0;
	for (int g = 0; g < SHOAL_MAX_GROUPS; g++)
		if (strcmp(reg.groups[g].name, name) == 0)
			pid = atomic_load(&reg.groups[g].pid);
	shoal_seg_detach(&reg.seg);
	return pid;
}

void rt_init(void)
{
	rt_res = mmap(NULL, sizeof(*rt_res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		      -1, 0);
	if (rt_res == MAP_FAILED)
		abort();
	/* Set per test, read by children (hostile's garbage writer). */
	test_spawn_share(rt_sysname, sizeof(rt_sysname));
}

/* ---- reading and damaging a group's segments ------------------------------- */

#define DAMAGE_WAIT_MS 30000

void rt_damage_of(int id, struct rt_damage *gd)
{
	struct shoal__registry reg;
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal__mbx_hdr *h;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	memset(gd, 0, sizeof(*gd));
	gd->damaged = atomic_load(&reg.groups[id].damaged);
	gd->replaced = atomic_load(&reg.groups[id].replaced);
	gd->lost = atomic_load(&reg.groups[id].lost_corrupt);
	for (int d = 0; d < SHOAL_MAX_NODES; d++) {
		gd->dropped_corrupt += atomic_load(&reg.groups[id].stats[d].dropped_corrupt);
		gd->delivered += atomic_load(&reg.groups[id].stats[d].delivered);
	}
	snprintf(name, sizeof(name), "%s", reg.groups[id].mailbox);
	shoal_seg_detach(&reg.seg);
	/* The mailbox in service (a replaced one is unlinked). */
	if (shoal_seg_attach(&seg, name, SHOAL_SEG_RDONLY, NULL) == 0) {
		h = shoal__mailbox_hdr(&seg);
		for (unsigned w = 0; h != NULL && w < h->n_workers && w < SHOAL_MAX_WORKERS; w++)
			gd->lost += atomic_load(&h->w[w].lost_corrupt);
		shoal_seg_detach(&seg);
	}
}

/* Wait until group `id` shows at least `damaged` damages and `replaced` replacements. */
void rt_wait_damage(int id, uint32_t damaged, uint32_t replaced, struct rt_damage *gd)
{
	for (int i = 0; i < DAMAGE_WAIT_MS; i++) {
		rt_damage_of(id, gd);
		if (gd->damaged >= damaged && gd->replaced >= replaced)
			return;
		usleep(1000);
	}
	fail_msg("group %d: %u damaged, %u replaced; expected %u and %u", id, gd->damaged,
		 gd->replaced, damaged, replaced);
}

/* Map group `group`'s mailbox read-write, as a hostile peer would. */
void rt_mailbox_map(const char *group, struct shoal_seg *seg)
{
	char name[SHOAL_SEG_NAME_MAX];

	assert_int_equal(shoal__name_mailbox(name, rt_sysname, group), 0);
	assert_int_equal(shoal_seg_attach(seg, name, 0, NULL), 0);
}

struct shoal__ring *rt_ring_of(struct shoal_seg *seg, const char *ring)
{
	struct shoal_seg_region r;

	assert_int_equal(shoal_seg_find(seg, SHOAL_SEG_KIND_RING, ring, &r), 0);
	return shoal_seg_ptr(seg, r.off, r.len, 128);
}

/* `shoal CMD SYSTEM` exits 1 and says DAMAGED. */
void rt_tools_say_damaged(void)
{
	const char *stat[] = { "stat", rt_sysname, NULL };
	const char *ls[] = { "ls", NULL };
	struct tool_run r;

	tool_expect(&r, 1, stat);
	assert_has(r.out, "DAMAGED");
	tool_free(&r);
	tool_expect(&r, 1, ls);
	assert_has(r.out, "DAMAGED");
	tool_free(&r);
}

uint64_t rt_dispatch_dropped_corrupt(void)
{
	struct shoal__registry reg;
	uint64_t n = 0;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	for (int d = 0; d < SHOAL_MAX_NODES; d++)
		n += atomic_load(&reg.hdr->disp[d].dropped_corrupt);
	shoal_seg_detach(&reg.seg);
	return n;
}

/* The real stderr while it is captured, and the file it goes to. */
static int stderr_saved = -1, stderr_file = -1;

void rt_stderr_capture(void)
{
	FILE *f = tmpfile();

	assert_non_null(f);
	stderr_file = dup(fileno(f));
	fclose(f);
	assert_true(stderr_file >= 0);
	fflush(stderr);
	stderr_saved = dup(STDERR_FILENO);
	assert_true(stderr_saved >= 0);
	assert_int_equal(dup2(stderr_file, STDERR_FILENO), STDERR_FILENO);
}

char *rt_stderr_end(void)
{
	char *text = NULL;
	off_t len;

	if (stderr_saved < 0)
		return NULL;
	fflush(stderr);
	dup2(stderr_saved, STDERR_FILENO);
	close(stderr_saved);
	stderr_saved = -1;
	len = lseek(stderr_file, 0, SEEK_END);
	if (len >= 0 && (text = calloc(1, (size_t)len + 1)) != NULL &&
	    pread(stderr_file, text, (size_t)len, 0) != len) {
		free(text);
		text = NULL;
	}
	close(stderr_file);
	stderr_file = -1;
	return text;
}

void rt_released(uint32_t *n, uint64_t *lost)
{
	struct shoal__registry reg;

	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	*n = atomic_load(&reg.hdr->released);
	*lost = atomic_load(&reg.hdr->lost_released);
	shoal_seg_detach(&reg.seg);
}

void rt_wait_released(uint32_t want, uint64_t *lost)
{
	uint32_t n = 0;

	for (int i = 0; i < 60000 && (rt_released(&n, lost), n < want); i++)
		usleep(1000);
	assert_int_equal(n, want);
}
