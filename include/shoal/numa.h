/* SPDX-License-Identifier: MIT */
/*
 * NUMA memory binding and verification, on top of libnuma and the kernel's
 * memory policy calls.
 *
 * Binding happens before first touch: shoal_numa_bind() sets the policy of a
 * fresh mapping, and the pages are placed on the node when first written.
 * shoal_numa_node_of() asks the kernel where a page really is, so tests and
 * tools can verify placement instead of trusting the policy.
 */
#ifndef SHOAL_NUMA_H
#define SHOAL_NUMA_H

#include <stddef.h>

#include <shoal/api.h>

/* Number of configured NUMA nodes (>= 1; 1 when libnuma reports no NUMA). */
SHOAL_API int shoal_numa_node_count(void);

/* Node of a CPU, or -EINVAL. */
SHOAL_API int shoal_numa_node_of_cpu(int cpu);

/*
 * Bind [addr, addr + len) (page aligned) to `node` with MPOL_BIND, before the
 * pages are touched. Returns 0, -EINVAL for a node that does not exist, or
 * the errno of mbind.
 */
SHOAL_API int shoal_numa_bind(void *addr, size_t len, int node);

/*
 * The node holding the page at `addr` (the page must have been touched), or
 * a negative errno (-EFAULT if not present, -ENOSYS without move_pages).
 */
SHOAL_API int shoal_numa_node_of(const void *addr);

/*
 * The node the memory policy of `addr` prefers or binds to, as set by
 * shoal_numa_bind(), via get_mempolicy(); -1 when the default policy applies.
 */
SHOAL_API int shoal_numa_policy_node(const void *addr);

/*
 * Concurrency table: Shoal keeps no state here; each call is a query of
 * libnuma's tables or one system call (mbind, move_pages, get_mempolicy),
 * so any of them may run with any other, in any thread or process ("-"):
 *
 *   [1] shoal_numa_node_count, shoal_numa_node_of_cpu
 *   [2] shoal_numa_bind
 *   [3] shoal_numa_node_of, shoal_numa_policy_node
 *
 *        [1]  [2]  [3]
 *   [1]   -    -    -
 *   [2]   -    -    -
 *   [3]   -    -    -
 *
 * What the kernel does then is its own: two binds of one range leave the
 * later one in force, and [3] on a range being bound sees the policy before
 * or after. Binding only works before first touch, so bind a fresh mapping
 * before handing it to other threads.
 */

#endif
