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
 * router's threads run (shoal__topology_read()).
 */
#include <string.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/numa.h>

#include "runtime/control/router_impl.h"
#include "shm/util.h"

void shoal__topology_read(struct shoal_router *r, const struct shoal_topology *given)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	if (given != NULL) {
		r->topo = *given;
		r->numa_real = false;
		return;
	}
	memset(&r->topo, 0, sizeof(r->topo));
	r->numa_real = true;
	r->topo.n_nodes = shoal_numa_node_count();
	if (r->topo.n_nodes > SHOAL_MAX_NODES)
		r->topo.n_nodes = SHOAL_MAX_NODES;
	for (long cpu = 0; cpu < ncpu && cpu < 64; cpu++) {
		int node = shoal_numa_node_of_cpu((int)cpu);

		if (node >= 0 && node < r->topo.n_nodes)
			r->topo.cpus[node] |= UINT64_C(1) << cpu;
	}
}

/* Node with the fewest groups (ties: the lowest). */
int shoal__place_group(const struct shoal_router *r)
{
	int count[SHOAL_MAX_NODES] = { 0 }, best = 0;

	for (uint32_t g = 0; g < r->n_groups; g++)
		if (r->groups[g].used)
			count[r->groups[g].node]++;
	for (int n = 1; n < r->topo.n_nodes; n++)
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
	r->reg->disp[d].cpus = r->topo.cpus[node];
	shoal_doorbell_init(&r->bell->disp[d]);
	ret = shoal__dispatcher_start(&r->dp, d, r->topo.cpus[node], &r->bell->disp[d],
				      &r->reg->disp[d], &r->disp[d]);
	if (ret < 0)
		return shoal__fail(err, ret, "cannot start the dispatcher of node %d: %s", node,
				   strerror(-ret));
	r->disp_node[d] = node;
	r->n_disp = d + 1;
	shoal_store_relaxed(&r->reg->n_dispatchers, (uint32_t)r->n_disp);
	return d;
}
