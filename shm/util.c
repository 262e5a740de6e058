/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <shoal/api.h>

#include "shm/util.h"

void shoal__abort(const char *file, const char *func, int line, const char *what)
{
	fprintf(stderr, "shoal: internal invariant broken at %s:%d in %s(): %s\n", file, line,
		func, what);
	abort();
}

int shoal__fail(struct shoal_err *err, int code, const char *fmt, ...)
{
	if (err != NULL) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

void *shoal__grow(void *arr, uint32_t *cap, uint32_t n, size_t elem, uint32_t first)
{
	uint32_t c;
	void *a;

	if (n < *cap)
		return arr;
	c = *cap ? 2 * *cap : first;
	a = realloc(arr, (size_t)c * elem);
	if (a != NULL)
		*cap = c;
	return a;
}

const char *shoal_strerror(int err)
{
	switch (-err) {
	case 0:
		return "success";
	case EPROTO:
		return "not a Shoal segment (bad magic)";
	case EPROTONOSUPPORT:
		return "Shoal segment of an unsupported layout version";
	case EBADMSG:
		return "truncated segment";
	case EUCLEAN:
		return "corrupted shared memory";
	default:
		return strerror(-err);
	}
}

#if defined(__x86_64__)
bool shoal__cpuid_bit(unsigned leaf, bool ecx, unsigned bit, _Atomic int *known)
{
	int k = atomic_load_explicit(known, memory_order_relaxed);
	unsigned a, b, c, d;

	if (k == 0) {
		k = __get_cpuid(leaf, &a, &b, &c, &d) && ((ecx ? c : d) & (1u << bit)) ? 1 : 2;
		/* Relaxed: every thread computes the same answer. */
		atomic_store_explicit(known, k, memory_order_relaxed);
	}
	return k == 1;
}
#endif

bool shoal__cpu_prefetchw(void)
{
#if defined(__x86_64__)
	static _Atomic int known;

	return shoal__cpuid_bit(0x80000001u, true, 8, &known);
#else
	return false;
#endif
}
