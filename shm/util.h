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

/*
 * Streamed stores: non-temporal 8-byte stores (MOVNTI on x86-64), which
 * write a line without first reading it into this core's cache. A store to
 * a line that another core's cache holds waits for that line to come over
 * (a read for ownership), and far apart that is the producer's whole cost;
 * a streamed store sends its line to memory, taking it from every cache,
 * and the reader reads it from there. For throughput paths whose records
 * are read later, not for a round trip's one record. Weakly ordered: a
 * release store does not publish them, shoal__stream_fence() (SFENCE) must
 * come between the last of them and the store that publishes them
 * (docs/memory-ordering.md, S1). Elsewhere than x86-64 they are plain
 * stores and the fence is the compiler's only.
 */
static inline void shoal__stream_word(void *dst, uint64_t v)
{
#if defined(__x86_64__)
	__builtin_ia32_movnti64((long long *)dst, (long long)v);
#else
	memcpy(dst, &v, sizeof(v));
#endif
}

static inline void shoal__stream_fence(void)
{
#if defined(__x86_64__)
	__builtin_ia32_sfence();
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/*
 * The largest record, envelope and payload, that the runtime's throughput
 * paths stream (the dispatcher's copies, bursts): a message of up to 72
 * bytes. Larger ones were slower streamed, 8 bytes a store, than copied
 * (the dispatcher's runs with REP MOVSB, which writes whole lines too):
 * backlog at 1 group about 1.3x slower with 200-byte payloads and 1.1x
 * with 960 (bench/SUITE.md, "Streamed copies").
 */
#define SHOAL__STREAM_MAX 128u

/*
 * The fewest records a write streams: the fence costs a few hundred
 * nanoseconds, and a reader then takes the record from memory, so one
 * record alone streamed is a round trip's leg made ~190 ns slower far apart
 * (bench/SUITE.md, "Streamed copies"). A pass or a burst of fewer is
 * written with plain stores.
 */
#define SHOAL__STREAM_MIN 8u

/*
 * Stream `n` bytes from src to dst, 8 at a time; a last partial word goes
 * with zeros after the bytes, so dst must have room for n rounded up to 8
 * (a ring record's padding) while src is read only within its n bytes.
 * dst 8-byte aligned.
 */
static inline void shoal__stream_copy(void *dst, const void *src, uint32_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	uint32_t i = 0;

	/* Four words a turn: a turn of one word cost 4.5 instructions of
	 * loop for its two of copy (a 64-byte payload: 36 of 52). */
	for (; i + 32 <= n; i += 32) {
		uint64_t w0 = shoal__get_word(s, i), w1 = shoal__get_word(s, i + 8);
		uint64_t w2 = shoal__get_word(s, i + 16), w3 = shoal__get_word(s, i + 24);

		shoal__stream_word(d + i, w0);
		shoal__stream_word(d + i + 8, w1);
		shoal__stream_word(d + i + 16, w2);
		shoal__stream_word(d + i + 24, w3);
	}
	for (; i + 8 <= n; i += 8)
		shoal__stream_word(d + i, shoal__get_word(s, i));
	if (i < n) {
		uint64_t w = 0;

		memcpy(&w, s + i, n - i);
		shoal__stream_word(d + i, w);
	}
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
