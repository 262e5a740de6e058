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
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/numa.h>

#include "runtime/control/router_impl.h"
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
	/* R8: pairs with A8 in the tools' registry readers: d's node and
	 * CPU set before the count that includes d. */
	shoal_store_release(&r->reg->n_dispatchers, (uint32_t)r->n_disp);
	return d;
}
