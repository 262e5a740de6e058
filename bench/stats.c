/* SPDX-License-Identifier: MIT */
/* Latency histograms and run summaries (median, min, max). */
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

struct bench_hist *bench_hist_new(void)
{
	/* calloc writes the zeroes: the pages are touched before timing starts. */
	return calloc(1, sizeof(struct bench_hist));
}

/* The smallest value that falls in bucket b (inverse of bench_hist_bucket()). */
static uint64_t bucket_floor(uint32_t b)
{
	uint32_t msb, sub;

	if (b < BENCH_HIST_EXACT)
		return b;
	msb = (b - BENCH_HIST_EXACT) / BENCH_HIST_SUB + 11u;
	sub = (b - BENCH_HIST_EXACT) % BENCH_HIST_SUB;
	return ((uint64_t)1 << msb) | ((uint64_t)sub << (msb - 8u));
}

/* The value below which a fraction q of the samples fall. */
static uint64_t quantile(const struct bench_hist *h, double q)
{
	uint64_t rank = (uint64_t)(q * (double)(h->n - 1)), seen = 0;

	for (uint32_t b = 0; b < BENCH_HIST_BUCKETS; b++) {
		seen += h->count[b];
		if (seen > rank)
			return bucket_floor(b);
	}
	return bucket_floor(BENCH_HIST_BUCKETS - 1);
}

void bench_hist_pct(const struct bench_hist *h, struct bench_pct *out)
{
	memset(out, 0, sizeof(*out));
	out->n = h->n;
	if (h->n == 0)
		return;
	out->p50 = quantile(h, 0.50);
	out->p99 = quantile(h, 0.99);
	out->p999 = quantile(h, 0.999);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct bench_mmm bench_mmm(double *v, unsigned n)
{
	struct bench_mmm r;

	qsort(v, n, sizeof(v[0]), cmp_double);
	r.min = v[0];
	r.max = v[n - 1];
	r.med = (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return r;
}

struct bench_mmm bench_mmm_keep(const double *v, unsigned n)
{
	double s[BENCH_MAX_RUNS];

	SHOAL_ASSERT(n <= BENCH_MAX_RUNS);
	memcpy(s, v, n * sizeof(*v));
	return bench_mmm(s, n);
}
