/* SPDX-License-Identifier: MIT */
/*
 * NUMA binding over libnuma's system call wrappers (mbind, get_mempolicy,
 * move_pages). On a machine without NUMA support the kernel still accepts a
 * policy for node 0, so the same code path runs everywhere.
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdint.h>
#include <unistd.h>

#include <shoal/numa.h>

int shoal_numa_node_count(void)
{
	int n;

	if (numa_available() < 0)
		return 1;
	n = numa_num_configured_nodes();
	return n > 0 ? n : 1;
}

int shoal_numa_node_of_cpu(int cpu)
{
	int node;

	if (cpu < 0)
		return -EINVAL;
	if (numa_available() < 0)
		return 0;
	node = numa_node_of_cpu(cpu);
	return node < 0 ? -EINVAL : node;
}

int shoal_numa_bind(void *addr, size_t len, int node)
{
	unsigned long mask[16] = {0};

	if (node < 0 || node >= shoal_numa_node_count() ||
	    (size_t)node >= sizeof(mask) * 8)
		return -EINVAL;
	mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
	if (mbind(addr, len, MPOL_BIND, mask, sizeof(mask) * 8, 0) != 0)
		return -errno;
	return 0;
}

int shoal_numa_node_of(const void *addr)
{
	void *pages[1];
	int status[1] = { -1 };
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

	pages[0] = (void *)((uintptr_t)addr & ~(page - 1));
	/* With nodes == NULL, move_pages only reports where each page is. */
	if (move_pages(0, 1, pages, NULL, status, 0) != 0)
		return -errno;
	return status[0];
}

int shoal_numa_policy_node(const void *addr)
{
	int mode = 0;
	unsigned long mask[16] = {0};

	if (get_mempolicy(&mode, mask, sizeof(mask) * 8, (void *)addr, MPOL_F_ADDR) != 0)
		return -errno;
	if (mode == MPOL_DEFAULT)
		return -1;
	for (size_t i = 0; i < sizeof(mask) * 8; i++)
		if (mask[i / (8 * sizeof(unsigned long))] & (1ul << (i % (8 * sizeof(unsigned long)))))
			return (int)i;
	return -1;
}
