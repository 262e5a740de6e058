/* SPDX-License-Identifier: MIT */
/* Small helpers private to shm/ and the layers above it. */
#ifndef SHOAL_SHM_UTIL_H
#define SHOAL_SHM_UTIL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shoal/api.h>

/* A broken internal invariant: print where and abort. Not for bad input. */
#define SHOAL_ASSERT(cond)                                                          \
	do {                                                                        \
		if (__builtin_expect(!(cond), 0))                                   \
			shoal__abort(__FILE__, __func__, __LINE__, #cond);          \
	} while (0)

#define SHOAL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define SHOAL_UNLIKELY(x) __builtin_expect(!!(x), 0)

__attribute__((noreturn)) void shoal__abort(const char *file, const char *func, int line,
					    const char *what);

/* Fill err->msg (if err is non-NULL) and return `code` (a negative errno). */
__attribute__((format(printf, 3, 4)))
int shoal__fail(struct shoal_err *err, int code, const char *fmt, ...);

static inline int shoal__is_pow2_u64(uint64_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

static inline uint64_t shoal__align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

/*
 * Make room for one more element in array `arr` of `n` elements of `elem`
 * bytes: when n == *cap, double *cap (or start at `first`) and realloc.
 * Returns the array to use from now on (`arr` itself while there is room),
 * or NULL when out of memory, with `arr` and *cap unchanged. Allocates:
 * never on a hot path.
 */
void *shoal__grow(void *arr, uint32_t *cap, uint32_t n, size_t elem, uint32_t first);

/*
 * Two 8-byte words stored at dst (lo first) with one 16-byte store (two
 * where the target has no 16-byte moves): a producer whose lines are far
 * pays for each store it makes (bench/SUITE.md, "What the far dispatcher
 * pays for: its stores"). dst needs no alignment.
 */
typedef uint64_t shoal__word_pair __attribute__((vector_size(16)));

static inline void shoal__put_pair(void *dst, uint64_t lo, uint64_t hi)
{
	shoal__word_pair v = { lo, hi };

	memcpy(dst, &v, sizeof(v));
}

#if defined(__x86_64__)
/* Whether CPUID leaf `leaf` sets bit `bit` of ECX (`ecx`) or of EDX. The
 * answer is kept in *known (0: not asked yet, 1: yes, 2: no), so that the
 * CPU is asked once. */
bool shoal__cpuid_bit(unsigned leaf, bool ecx, unsigned bit, _Atomic int *known);
#endif

/*
 * Whether this CPU runs PREFETCHW (CPUID 0x80000001, ECX bit 8: every
 * AMD64 CPU, Intel's since Broadwell). Asked of the CPU once.
 */
bool shoal__cpu_prefetchw(void);

/*
 * Ask for the line holding `p` ready to be written: a hint, never a fault.
 * With `w` (shoal__cpu_prefetchw()'s answer, kept by the caller) PREFETCHW,
 * which takes the line from another core's cache as a store would, so the
 * stores that follow find it theirs; without, a read prefetch. A build for
 * the baseline x86-64 gets only the read prefetch from
 * __builtin_prefetch(p, 1), hence the instruction by hand.
 */
static inline void shoal__prefetch_write(const void *p, bool w)
{
#if defined(__x86_64__)
	if (w) {
		__asm__ volatile("prefetchw %0" : : "m"(*(const unsigned char *)p));
		return;
	}
#else
	(void)w;
#endif
	__builtin_prefetch(p, 1);
}

/* The 8-byte word at src + off, unaligned. */
static inline uint64_t shoal__get_word(const void *src, size_t off)
{
	uint64_t w;

	memcpy(&w, (const unsigned char *)src + off, sizeof(w));
	return w;
}

/* Monotonic clock in nanoseconds (vDSO: no system call). Inline: every
 * send reads it, and a call of our own around libc's costs a frame. */
static inline uint64_t shoal__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
