/* SPDX-License-Identifier: MIT */
/*
 * The only way Shoal code touches shared memory concurrently: a few macros
 * over <stdatomic.h>, each with an explicit order, plus the CPU's spin hint.
 *
 * Every use of an acquire, release or fence carries a label (A1, R1, F1 ...)
 * naming its partner in the comment next to it; every relaxed access says why
 * relaxed is enough. There is no seq_cst except the explicit full fence.
 */
#ifndef SHOAL_SHM_ATOMIC_H
#define SHOAL_SHM_ATOMIC_H

#include <stdatomic.h>

#define shoal_load_relaxed(p)      atomic_load_explicit((p), memory_order_relaxed)
#define shoal_store_relaxed(p, v)  atomic_store_explicit((p), (v), memory_order_relaxed)
#define shoal_load_acquire(p)      atomic_load_explicit((p), memory_order_acquire)
#define shoal_store_release(p, v)  atomic_store_explicit((p), (v), memory_order_release)
#define shoal_fence_full()         atomic_thread_fence(memory_order_seq_cst)
#define shoal_fence_release()      atomic_thread_fence(memory_order_release)
#define shoal_fence_acquire()      atomic_thread_fence(memory_order_acquire)
#define shoal_fetch_add_relaxed(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define shoal_fetch_or_release(p, v) atomic_fetch_or_explicit((p), (v), memory_order_release)
#define shoal_exchange_relaxed(p, v) atomic_exchange_explicit((p), (v), memory_order_relaxed)

#if defined(__x86_64__) || defined(__i386__)
#define shoal_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define shoal_cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define shoal_cpu_relax() ((void)0)
#endif

#define SHOAL_CACHE_LINE 64u
/* Producer and consumer state sit 128 bytes apart: adjacent-line prefetchers
 * fetch lines in pairs, so 64 bytes apart would still false-share. */
#define SHOAL_FALSE_SHARING 128u

#endif
