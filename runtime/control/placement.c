/* SPDX-License-Identifier: MIT */
/*
 * Where the router's work runs: the NUMA topology it works with, the node a
 * group is placed on, and one dispatcher per node in use, started when the
 * first group is placed on that node.
 *
 * A dispatcher starts only once every mailbox has its inbound rings from it
 * (initialised before they enter a directory, see shoal__alloc_ring() in
 * registry.c); it finds them in the next snapshot (R1 in snapshot.c).
 *
 * Concurrency: called with router->lock held, or during start before the
 * router's threads run (shoal__topology_read()) and at its end
 * (shoal__topology_free()).
 */
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/numa.h>

#include "runtime/control/router_impl.h"
#include "shm/atomic.h"
#include "shm/probe.h"
#include "shm/util.h"

/* A copy of `given` (NULL: empty) in a set of SHOAL__CPUS_MAX bits. */
static struct bitmask *node_set(const struct bitmask *given)
{
	struct bitmask *b = numa_bitmask_alloc(SHOAL__CPUS_MAX);

	if (b == NULL)
		return NULL;
	for (unsigned c = 0; given != NULL && c < SHOAL__CPUS_MAX; c++)
		if (numa_bitmask_isbitset(given, c))
			numa_bitmask_setbit(b, c);
	return b;
}

/*
 * The CPUs this thread may run on (sched_getaffinity(2)), in a set of
 * SHOAL__CPUS_MAX bits to CPU_FREE(); NULL when the kernel does not say
 * (then every CPU counts as allowed).
 */
static cpu_set_t *allowed_cpus(void)
{
	cpu_set_t *set = CPU_ALLOC(SHOAL__CPUS_MAX);

	if (set != NULL && sched_getaffinity(0, CPU_ALLOC_SIZE(SHOAL__CPUS_MAX), set) != 0) {
		CPU_FREE(set);
		set = NULL;
	}
	return set;
}

/* One past the highest CPU of `b`, 0 for none. */
static unsigned cpus_end(const struct bitmask *b)
{
	for (unsigned c = numa_bitmask_nbytes((struct bitmask *)b) * 8; c > 0; c--)
		if (numa_bitmask_isbitset(b, c - 1))
			return c;
	return 0;
}

int shoal__topology_read(struct shoal_router *r, const struct shoal_topology *given,
			 struct shoal_err *err)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned end = numa_num_possible_cpus() > 0 ? (unsigned)numa_num_possible_cpus() : 64;
	cpu_set_t *allowed = NULL;

	r->numa_real = given == NULL;
	r->n_nodes = given != NULL ? given->n_nodes : shoal_numa_node_count();
	if (r->n_nodes > SHOAL_MAX_NODES)
		r->n_nodes = SHOAL_MAX_NODES;
	for (int n = 0; n < r->n_nodes; n++) {
		const struct bitmask *set = given != NULL ? given->cpu_sets[n] : NULL;

		if (set != NULL && cpus_end(set) > SHOAL__CPUS_MAX)
			return shoal__fail(err, -EINVAL, "described node %d has CPU %u; CPU "
					   "numbers go up to %u", n, cpus_end(set) - 1,
					   SHOAL__CPUS_MAX - 1);
		r->node_cpus[n] = node_set(set);
		if (r->node_cpus[n] == NULL)
			return shoal__fail(err, -ENOMEM, "no memory for the CPU sets of %d nodes",
					   r->n_nodes);
	}
	/* A real node's CPUs are those of the machine that this router may
	 * run on: started under `taskset -c 0`, its dispatchers stay on CPU
	 * 0, as its bridge and groups do (they inherit the set). A node with
	 * none of them has its dispatcher unpinned, which then runs where
	 * the router may. */
	if (given == NULL)
		allowed = allowed_cpus();
	for (long cpu = 0; given == NULL && cpu < ncpu && cpu < (long)SHOAL__CPUS_MAX; cpu++) {
		int node = shoal_numa_node_of_cpu((int)cpu);

		if (node >= 0 && node < r->n_nodes &&
		    (allowed == NULL ||
		     CPU_ISSET_S((size_t)cpu, CPU_ALLOC_SIZE(SHOAL__CPUS_MAX), allowed)))
			numa_bitmask_setbit(r->node_cpus[node], (unsigned)cpu);
	}
	if (allowed != NULL)
		CPU_FREE(allowed);
	for (int n = 0; n < r->n_nodes; n++)
		if (cpus_end(r->node_cpus[n]) > end)
			end = cpus_end(r->node_cpus[n]);
	r->cpu_words = (end + 63) / 64;
	if (r->cpu_words > SHOAL__CPU_WORDS_MAX)
		r->cpu_words = SHOAL__CPU_WORDS_MAX;
	return 0;
}

void shoal__topology_free(struct shoal_router *r)
{
	for (int n = 0; n < SHOAL_MAX_NODES; n++) {
		if (r->node_cpus[n] != NULL)
			numa_bitmask_free(r->node_cpus[n]);
		r->node_cpus[n] = NULL;
	}
}

/* Node with the fewest groups (ties: the lowest). */
int shoal__place_group(const struct shoal_router *r)
{
	int count[SHOAL_MAX_NODES] = { 0 }, best = 0;

	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used)
			count[r->groups[g].node]++;
	for (int n = 1; n < r->n_nodes; n++)
		if (count[n] < count[best])
			best = n;
	return best;
}

int shoal__dispatcher_of_node(const struct shoal_router *r, int node)
{
	for (int d = 0; d < r->n_disp; d++)
		if (r->disp_node[d] == node)
			return d;
	return -1;
}

int shoal__ensure_dispatcher(struct shoal_router *r, int node, struct shoal_err *err)
{
	int d = shoal__dispatcher_of_node(r, node), ret;

	if (d >= 0)
		return d;
	d = r->n_disp;
	ret = shoal__add_dispatcher_rings(r, d);
	if (ret < 0)
		return shoal__fail(err, ret, "cannot add inbound rings for the dispatcher of node "
				   "%d: %s", node, strerror(-ret));
	r->reg->disp[d].node = node;
	r->reg->disp[d].stream_min = r->stream ? SHOAL__STREAM_MIN : 0;
	r->reg->disp[d].stream_probe_ns = r->stream_probe_ns;
	for (uint32_t i = 0; i < r->cpu_words * 64; i++)
		if (numa_bitmask_isbitset(r->node_cpus[node], i))
			r->cpus[d * r->cpu_words + i / 64] |= UINT64_C(1) << (i % 64);
	shoal_doorbell_init(&r->bell->disp[d]);
	/* A described node with none of this machine's CPUs has its
	 * dispatcher unpinned (docs/config.md). */
	ret = shoal__dispatcher_start(&r->dp, d, r->node_cpus[node], &r->bell->disp[d],
				      &r->reg->disp[d], &r->disp[d]);
	if (ret < 0)
		return shoal__fail(err, ret, "cannot start the dispatcher of node %d: %s", node,
				   strerror(-ret));
	r->disp_node[d] = node;
	r->n_disp = d + 1;
	/* R8: pairs with A8 in the tools' registry readers: d's node, CPU
	 * set and streamed copies before the count that includes d. */
	shoal_store_release(&r->reg->n_dispatchers, (uint32_t)r->n_disp);
	return d;
}

/*
 * Streamed copies (docs/design.md): the data path writes bursts of small
 * records with streamed stores when a cache line's round trip between two
 * CPUs of node 0 (where the dispatcher runs) costs at least
 * SHOAL__STREAM_FAR_NS (router_impl.h); where lines are cheap, streaming
 * would send every record to memory for nothing. Timed between the first
 * CPU of the node that the router may run on and up to PROBE_PEERS others
 * spread over the node, each pair's lowest batch (shm/probe.h) taken; the
 * median of the pairs (the upper of two) decides. A described topology
 * (tests, benchmarks) names CPUs that need not be this machine's: the
 * pairs are then taken from every CPU the router may run on.
 */
#define PROBE_PEERS 3
#define PROBE_WARMUP 1000u
#define PROBE_ROUNDS 4096u
#define PROBE_BATCH 256u
#define PROBE_MAX_NS 20000000u   /* 20 ms a pair */

struct probe_side {
	_Atomic uint64_t *line;
	double ns;
};

static void *probe_ping_main(void *arg)
{
	struct probe_side *p = arg;

	p->ns = shoal__probe_ping(p->line, PROBE_WARMUP, PROBE_ROUNDS, PROBE_BATCH,
				  PROBE_MAX_NS);
	return NULL;
}

static void *probe_pong_main(void *arg)
{
	struct probe_side *p = arg;

	shoal__probe_pong(p->line);
	return NULL;
}

/* The round trip between CPUs a and b (ns), or 0 when either thread could
 * not start. */
static double probe_pair(_Atomic uint64_t *line, unsigned a, unsigned b)
{
	struct bitmask *ca = numa_bitmask_alloc(SHOAL__CPUS_MAX);
	struct bitmask *cb = numa_bitmask_alloc(SHOAL__CPUS_MAX);
	struct probe_side side = { .line = line };
	pthread_t ping, pong;
	double ns = 0;

	if (ca == NULL || cb == NULL)
		goto out;
	numa_bitmask_setbit(ca, a);
	numa_bitmask_setbit(cb, b);
	shoal_store_relaxed(line, 0);
	if (shoal__thread_start(&pong, cb, probe_pong_main, &side, "shoal-probe") != 0)
		goto out;
	if (shoal__thread_start(&ping, ca, probe_ping_main, &side, "shoal-probe") != 0) {
		/* Relaxed: the line carries no data (shm/probe.h). */
		shoal_store_relaxed(line, SHOAL__PROBE_STOP);
		pthread_join(pong, NULL);
		goto out;
	}
	pthread_join(ping, NULL);
	pthread_join(pong, NULL);
	ns = side.ns;
out:
	if (ca != NULL)
		numa_bitmask_free(ca);
	if (cb != NULL)
		numa_bitmask_free(cb);
	return ns;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Whether the line probe may use CPU c: allowed to the router, and of node
 * 0 when the topology is the machine's (a described one names CPUs that
 * need not exist). */
static bool probe_cpu(const struct shoal_router *r, const cpu_set_t *allowed, unsigned c)
{
	return (!r->numa_real || numa_bitmask_isbitset(r->node_cpus[0], c)) &&
	       (allowed == NULL || CPU_ISSET_S(c, CPU_ALLOC_SIZE(SHOAL__CPUS_MAX), allowed));
}

/* The CPU the line probe may use that comes `k`-th (from 0), or the last. */
static unsigned probe_nth(const struct shoal_router *r, const cpu_set_t *allowed, unsigned k)
{
	unsigned last = 0;

	for (unsigned c = 0; c < SHOAL__CPUS_MAX; c++)
		if (probe_cpu(r, allowed, c)) {
			last = c;
			if (k-- == 0)
				break;
		}
	return last;
}

int shoal__stream_choose(struct shoal_router *r, int mode, struct shoal_err *err)
{
	double rtt[PROBE_PEERS];
	unsigned n = 0, pairs = 0, peers, first;
	cpu_set_t *allowed;
	_Atomic uint64_t *line;

	r->stream_probe_ns = 0;
	if (mode == SHOAL_STREAM_ON || mode == SHOAL_STREAM_OFF) {
		r->stream = mode == SHOAL_STREAM_ON;
		return 0;
	}
	r->stream = false;
	line = aligned_alloc(SHOAL_FALSE_SHARING, SHOAL_FALSE_SHARING);
	if (line == NULL)
		return shoal__fail(err, -ENOMEM, "no memory for the line probe");
	allowed = allowed_cpus();
	for (unsigned c = 0; c < SHOAL__CPUS_MAX; c++)
		n += probe_cpu(r, allowed, c);
	/* One CPU: every line is near, nothing to time. */
	peers = n < 2 ? 0 : n - 1 < PROBE_PEERS ? n - 1 : PROBE_PEERS;
	first = probe_nth(r, allowed, 0);
	for (unsigned k = 1; k <= peers; k++) {
		double ns = probe_pair(line, first, probe_nth(r, allowed, k * (n - 1) / peers));

		if (ns > 0)
			rtt[pairs++] = ns;
	}
	if (allowed != NULL)
		CPU_FREE(allowed);
	free(line);
	if (pairs == 0)
		return 0;
	qsort(rtt, pairs, sizeof(rtt[0]), cmp_double);
	r->stream_probe_ns = (uint32_t)(rtt[pairs / 2] + 0.5);
	r->stream = r->stream_probe_ns >= SHOAL__STREAM_FAR_NS;
	return 0;
}
