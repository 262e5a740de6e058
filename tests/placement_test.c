/* SPDX-License-Identifier: MIT */
/*
 * Placement mechanism: one dispatcher per NUMA node in use, pinned to that
 * node's CPUs; each group's mailbox bound to its node before first touch.
 * This machine has one node, so the spreading logic runs on a described
 * two-node topology (node 0 = CPU 0, node 1 = CPU 1), and page placement is
 * verified with the real topology by asking the kernel (move_pages). CPU
 * numbers past 63 are described too: the registry's CPU sets and the
 * threads' pinning take them.
 */
#include <dirent.h>
#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/numa.h>
#include <shoal/router.h>

#include "runtime/control/router_impl.h"
#include "runtime/group_impl.h"
#include "runtime/layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"

/* How many threads of this process are called `name`; *tid (may be
 * NULL) the id of one of them. */
static int threads_named(const char *name, pid_t *tid)
{
	char path[300], buf[256];
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(buf, sizeof(buf), f) && strncmp(buf, name, strlen(name)) == 0 &&
		    buf[strlen(name)] == '\n') {
			n++;
			if (tid != NULL)
				*tid = (pid_t)atoi(e->d_name);
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/*
 * The CPUs the thread called `name` of this process may run on, as the
 * kernel tells them (sched_getaffinity(2) on its thread id), in *set of
 * SET_SIZE bytes. Fails the test if no such thread runs.
 */
#define SET_SIZE CPU_ALLOC_SIZE(SHOAL__CPUS_MAX)
static void thread_cpus(const char *name, cpu_set_t *set)
{
	pid_t tid = 0;

	assert_true(threads_named(name, &tid) > 0);
	assert_int_equal(sched_getaffinity(tid, SET_SIZE, set), 0);
}

/* The thread called `name` may run on CPU `cpu` only. */
static void assert_pinned_to(const char *name, unsigned cpu)
{
	cpu_set_t *set = CPU_ALLOC(SHOAL__CPUS_MAX);

	assert_non_null(set);
	thread_cpus(name, set);
	assert_int_equal(CPU_COUNT_S(SET_SIZE, set), 1);
	assert_true(CPU_ISSET_S(cpu, SET_SIZE, set));
	CPU_FREE(set);
}

/* A libnuma CPU set of the CPUs in [lo, hi] and `one`. */
static struct bitmask *cpu_set(unsigned lo, unsigned hi, unsigned one)
{
	struct bitmask *b = numa_bitmask_alloc(SHOAL__CPUS_MAX);

	assert_non_null(b);
	for (unsigned c = lo; c <= hi; c++)
		numa_bitmask_setbit(b, c);
	numa_bitmask_setbit(b, one);
	return b;
}

/* A router on described topology `topo` (this machine needs two CPUs, or
 * the case is skipped) with groups g0..g<n-1> declared, their ids in ids. */
static void start_described(const char *system, const struct shoal_topology *topo, int n,
			    int *ids)
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		skip();
	assert_int_equal(rt_start_router(system, topo, 0), 0);
	for (int i = 0; i < n; i++) {
		char name[8];

		snprintf(name, sizeof(name), "g%d", i);
		ids[i] = rt_declare(name, 1, 1);
	}
}

static void placement_described_topology_spreads_groups(void **state)
{
	struct bitmask *sets[2] = { cpu_set(0, 0, 0), cpu_set(1, 1, 1) };
	const struct shoal_topology topo = { .n_nodes = 2, .cpu_sets = { sets[0], sets[1] } };
	struct shoal_group_spec bad = { .name = "nowhere", .node = 2 };
	struct child cons = { .index = 0, .name = "g1" };
	struct child prod = { .index = 1, .name = "g0", .n = 1000, .type = T_PING };
	struct shoal__registry reg;
	struct shoal_err err = { { 0 } };
	int ids[4];
	pid_t pc;

	(void)state;
	start_described("place", &topo, 4, ids);
	assert_int_equal(shoal_router_group(rt_router, &bad, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "does not exist"));
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	/* Least-loaded node first: 0, 1, 0, 1. */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(reg.groups[ids[i]].node, i % 2);
		assert_int_equal(reg.groups[ids[i]].dispatcher, (uint32_t)(i % 2));
	}
	assert_int_equal(atomic_load(&reg.hdr->n_dispatchers), 2);
	assert_int_equal(reg.hdr->disp[0].node, 0);
	assert_int_equal(reg.hdr->disp[1].node, 1);
	shoal_seg_detach(&reg.seg);
	/* Each dispatcher thread runs on its node's CPU only; the waker on
	 * node 0's. */
	assert_pinned_to("shoal-disp-0", 0);
	assert_pinned_to("shoal-disp-1", 1);
	assert_pinned_to("shoal-waker", 0);
	/* A message from node 0's uplink reaches a group on node 1. */
	rt_route(ids[1], T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	pc = test_spawn(rt_consumer_main, &cons, sizeof(cons));
	rt_wait_attached(ids[1]);
	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &prod, sizeof(prod)),
					 60000), 0);
	rt_wait_count(0, 1000, 30000);
	rt_stop_and_reap(&pc, 1);
	rt_stop_router();
	numa_bitmask_free(sets[0]);
	numa_bitmask_free(sets[1]);
}

static bool word_bit(const uint64_t *w, unsigned cpu)
{
	return w[cpu / 64] >> (cpu % 64) & 1;
}

/*
 * A described three-node host with CPUs up to 1023: node 0 = 0 and 64-127,
 * node 1 = 1 and 130-131, node 2 = 512-1023. Each dispatcher's set reaches
 * the registry whole (16 words) and its thread's pinning whole: the kernel
 * keeps the CPUs this 2-CPU machine has (node 0's dispatcher and the waker
 * run on CPU 0, node 1's on CPU 1), and node 2's, with none of them, runs
 * unpinned. A CPU past the largest number is refused at start.
 */
static void placement_cpus_past_63_reach_the_registry(void **state)
{
	struct bitmask *sets[3] = { cpu_set(64, 127, 0), cpu_set(130, 131, 1),
				    cpu_set(512, 1023, 512) };
	struct shoal_topology topo = { .n_nodes = 3, .cpu_sets = { sets[0], sets[1], sets[2] } };
	struct shoal_router_opts o = { .system = "bigcpu", .topology = &topo };
	struct shoal_router *r = NULL;
	struct shoal_err err = { { 0 } };
	struct shoal__registry reg;
	struct bitmask *huge;
	const uint64_t *w;
	cpu_set_t *mine = CPU_ALLOC(SHOAL__CPUS_MAX), *disp = CPU_ALLOC(SHOAL__CPUS_MAX);
	int ids[3];

	(void)state;
	start_described("bigcpu", &topo, 3, ids);
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	assert_int_equal(atomic_load(&reg.hdr->n_dispatchers), 3);
	assert_true(reg.hdr->cpu_words >= 16 && reg.hdr->cpu_words <= SHOAL__CPU_WORDS_MAX);
	for (unsigned d = 0; d < 3; d++) {
		int node = reg.hdr->disp[d].node;

		w = reg.cpus + d * reg.hdr->cpu_words;
		for (unsigned c = 0; c < reg.hdr->cpu_words * 64; c++)
			assert_int_equal(word_bit(w, c), numa_bitmask_isbitset(sets[node], c));
	}
	shoal_seg_detach(&reg.seg);
	assert_pinned_to("shoal-disp-0", 0);
	assert_pinned_to("shoal-disp-1", 1);
	assert_pinned_to("shoal-waker", 0);
	/* Unpinned: it runs where the thread that started it (this one) may. */
	assert_non_null(mine);
	assert_non_null(disp);
	assert_int_equal(sched_getaffinity(0, SET_SIZE, mine), 0);
	thread_cpus("shoal-disp-2", disp);
	assert_true(CPU_EQUAL_S(SET_SIZE, disp, mine));
	CPU_FREE(mine);
	CPU_FREE(disp);
	rt_stop_router();

	huge = numa_bitmask_alloc(SHOAL__CPUS_MAX + 64);
	assert_non_null(huge);
	numa_bitmask_setbit(huge, SHOAL__CPUS_MAX);
	topo.cpu_sets[2] = huge;
	test_shm_dir_make("bigcpu2");
	assert_int_equal(shoal_router_start(&r, &o, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "described node 2 has CPU 8192"));
	test_shm_dir_remove();
	numa_bitmask_free(huge);
	for (int i = 0; i < 3; i++)
		numa_bitmask_free(sets[i]);
}

static void placement_mailbox_pages_lie_on_the_group_node(void **state)
{
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg seg;
	struct shoal_seg_info info;
	struct shoal__mbx_hdr *m;
	int id;

	(void)state;
	assert_int_equal(rt_start_router("pages", NULL, 0), 0);
	id = rt_declare("bound", 1, 1);
	shoal__name_mailbox(name, rt_sysname, "bound");
	assert_int_equal(shoal_seg_attach(&seg, name, SHOAL_SEG_RDONLY, NULL), 0);
	shoal_seg_info(&seg, &info);
	assert_int_equal(info.numa_node, 0);
	m = shoal__mailbox_hdr(&seg);
	assert_non_null(m);
	assert_int_equal(m->group, id);
	/* The router touched the header: ask the kernel where the page is. */
	assert_int_equal(shoal_numa_node_of(m), 0);
	assert_int_equal(shoal_numa_policy_node(seg.base), 0);
	shoal_seg_detach(&seg);
	rt_stop_router();
}

/* This thread's CPUs before a case narrowed them (NULL: not narrowed). */
static cpu_set_t *saved_cpus;

/*
 * A router on the real topology that may run on one CPU only (as under
 * `taskset -c N shoal run`) keeps its dispatcher and waker there, and its
 * registry says so: the node's CPUs are those the router may use. Before,
 * the dispatcher took the whole node and left the set it was started in.
 */
static void placement_real_node_keeps_to_the_routers_cpus(void **state)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned last = (unsigned)(n - 1);
	struct shoal__registry reg;
	cpu_set_t *one = CPU_ALLOC(SHOAL__CPUS_MAX);
	const uint64_t *w;

	(void)state;
	if (n < 2)
		skip();
	saved_cpus = CPU_ALLOC(SHOAL__CPUS_MAX);
	assert_non_null(saved_cpus);
	assert_non_null(one);
	assert_int_equal(sched_getaffinity(0, SET_SIZE, saved_cpus), 0);
	if (!CPU_ISSET_S(last, SET_SIZE, saved_cpus))
		skip();
	CPU_ZERO_S(SET_SIZE, one);
	CPU_SET_S(last, SET_SIZE, one);
	assert_int_equal(sched_setaffinity(0, SET_SIZE, one), 0);
	CPU_FREE(one);
	assert_int_equal(rt_start_router("narrow", NULL, 0), 0);
	(void)rt_declare("g", 1, 1);
	assert_pinned_to("shoal-disp-0", last);
	assert_pinned_to("shoal-waker", last);
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	w = reg.cpus;   /* dispatcher 0's set, the first */
	for (unsigned c = 0; c < reg.hdr->cpu_words * 64; c++)
		assert_int_equal(word_bit(w, c), c == last);
	shoal_seg_detach(&reg.seg);
	rt_stop_router();
}

/*
 * router.stream auto, on a machine of two CPUs or more that this process
 * may run on: the router times a line's round trip between two of them,
 * streams exactly when it is SHOAL__STREAM_FAR_NS or longer, and leaves no
 * probe thread behind. A group attached gets the choice, and the registry
 * shows it to the tools.
 */
static void placement_stream_auto_times_a_line_between_two_cpus(void **state)
{
	cpu_set_t *set = CPU_ALLOC(SHOAL__CPUS_MAX);
	struct shoal__registry reg;
	struct shoal_group *g;
	uint32_t ns = 0;
	int on;

	(void)state;
	assert_non_null(set);
	assert_int_equal(sched_getaffinity(0, SET_SIZE, set), 0);
	if (CPU_COUNT_S(SET_SIZE, set) < 2) {
		CPU_FREE(set);
		skip();
	}
	CPU_FREE(set);
	rt_stream = SHOAL_STREAM_AUTO;
	assert_int_equal(rt_start_router("stream-auto", NULL, 0), 0);
	on = shoal_router_stream(rt_router, &ns);
	print_message("line round trip %u ns: streamed copies %s\n", ns, on ? "on" : "off");
	assert_true(ns > 0);
	assert_int_equal(on, ns >= SHOAL__STREAM_FAR_NS);
	assert_int_equal(threads_named("shoal-probe", NULL), 0);
	g = rt_attach_here("g", 1, 1);
	assert_int_equal(g->stream, on);
	/* What the tools read: the dispatcher's registry entry. */
	assert_int_equal(shoal__registry_attach(&reg, rt_sysname, SHOAL_SEG_RDONLY, NULL), 0);
	assert_int_equal(reg.hdr->n_dispatchers, 1);
	assert_int_equal(reg.hdr->disp[0].stream_min, on ? SHOAL__STREAM_MIN : 0);
	assert_int_equal(reg.hdr->disp[0].stream_probe_ns, ns);
	shoal_seg_detach(&reg.seg);
	shoal_group_detach(g);
	rt_stop_router();
}

/* Under a single CPU every line is near: auto streams nothing and times
 * nothing. */
static void placement_stream_auto_on_one_cpu_stays_off(void **state)
{
	cpu_set_t *one = CPU_ALLOC(SHOAL__CPUS_MAX);
	uint32_t ns = 1;

	(void)state;
	saved_cpus = CPU_ALLOC(SHOAL__CPUS_MAX);
	assert_non_null(saved_cpus);
	assert_non_null(one);
	assert_int_equal(sched_getaffinity(0, SET_SIZE, saved_cpus), 0);
	CPU_ZERO_S(SET_SIZE, one);
	for (unsigned c = 0; c < SHOAL__CPUS_MAX; c++)
		if (CPU_ISSET_S(c, SET_SIZE, saved_cpus)) {
			CPU_SET_S(c, SET_SIZE, one);
			break;
		}
	assert_int_equal(sched_setaffinity(0, SET_SIZE, one), 0);
	CPU_FREE(one);
	rt_stream = SHOAL_STREAM_AUTO;
	assert_int_equal(rt_start_router("stream-one", NULL, 0), 0);
	assert_int_equal(shoal_router_stream(rt_router, &ns), 0);
	assert_int_equal(ns, 0);
	rt_stop_router();
}

/* On and off are kept as asked, without a probe; any other mode is refused. */
static void placement_stream_asked_is_kept_unprobed(void **state)
{
	struct shoal_router_opts o = { .system = "stream-bad", .stream = SHOAL_STREAM_OFF + 1 };
	struct shoal_router *r = NULL;
	struct shoal_err err = { { 0 } };
	uint32_t ns = 1;

	(void)state;
	rt_stream = SHOAL_STREAM_ON;
	assert_int_equal(rt_start_router("stream-on", NULL, 0), 0);
	assert_int_equal(shoal_router_stream(rt_router, &ns), 1);
	assert_int_equal(ns, 0);
	rt_stop_router();
	rt_stream = SHOAL_STREAM_OFF;
	ns = 1;
	assert_int_equal(rt_start_router("stream-off", NULL, 0), 0);
	assert_int_equal(shoal_router_stream(rt_router, &ns), 0);
	assert_int_equal(ns, 0);
	rt_stop_router();
	assert_int_equal(shoal_router_start(&r, &o, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "stream mode 3"));
	assert_null(r);
}

/* After each case, passed or failed: what rt_leave_nothing() clears (no
 * child, router or segment directory left), and this thread's CPUs as
 * they were. */
static int leave_nothing(void **state)
{
	(void)rt_leave_nothing(state);
	if (saved_cpus != NULL) {
		assert_int_equal(sched_setaffinity(0, SET_SIZE, saved_cpus), 0);
		CPU_FREE(saved_cpus);
		saved_cpus = NULL;
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(placement_described_topology_spreads_groups,
					  leave_nothing),
		cmocka_unit_test_teardown(placement_cpus_past_63_reach_the_registry,
					  leave_nothing),
		cmocka_unit_test_teardown(placement_mailbox_pages_lie_on_the_group_node,
					  leave_nothing),
		cmocka_unit_test_teardown(placement_real_node_keeps_to_the_routers_cpus,
					  leave_nothing),
		cmocka_unit_test_teardown(placement_stream_auto_times_a_line_between_two_cpus,
					  leave_nothing),
		cmocka_unit_test_teardown(placement_stream_auto_on_one_cpu_stays_off,
					  leave_nothing),
		cmocka_unit_test_teardown(placement_stream_asked_is_kept_unprobed,
					  leave_nothing),
	};

	rt_init();
	signal(SIGPIPE, SIG_IGN);
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
