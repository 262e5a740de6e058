/* SPDX-License-Identifier: MIT */
/* The benchmarks' /proc readers (procstat.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench/procstat.h"

void bench_cpustat_read(struct bench_cpustat *c)
{
	unsigned long long v[8], n;
	uint64_t tick = 1000000000u / (uint64_t)sysconf(_SC_CLK_TCK);
	char line[256];
	FILE *f = fopen("/proc/stat", "re");

	memset(c, 0, sizeof(*c));
	/* Lines longer than the buffer ("intr") come in pieces, none of
	 * which starts like the two lines wanted. */
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		/* The machine's line only: "cpu %llu" also matches "cpu1 ..."
		 * (the CPU's number read as the first count). */
		if (strncmp(line, "cpu ", 4) == 0 &&
		    sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
			c->busy = (v[0] + v[1] + v[2] + v[5] + v[6]) * tick;
			c->steal = v[7] * tick;
			c->total = (v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]) * tick;
		} else if (sscanf(line, "processes %llu", &n) == 1) {
			c->forks = n;
		}
	}
	if (f != NULL)
		fclose(f);
}

void bench_schedstat_read(const char *path, struct bench_schedstat *s)
{
	unsigned long long a = 0, b = 0, c = 0;
	FILE *f = fopen(path, "re");

	if (f != NULL) {
		if (fscanf(f, "%llu %llu %llu", &a, &b, &c) != 3)
			a = b = c = 0;
		fclose(f);
	}
	s->run = a;
	s->wait = b;
	s->slices = c;
}

uint64_t bench_run_delay_ns(void)
{
	struct bench_schedstat s;

	bench_schedstat_read("/proc/self/schedstat", &s);
	return s.wait;
}
