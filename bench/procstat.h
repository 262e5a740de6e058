/* SPDX-License-Identifier: MIT */
/*
 * What the benchmarks read from /proc: the machine's CPU time and task
 * count (/proc/stat) and a task's scheduler statistics (schedstat). One
 * reader for each, so that every benchmark's interference figures mean the
 * same. Private to bench/.
 */
#ifndef SHOAL_BENCH_PROCSTAT_H
#define SHOAL_BENCH_PROCSTAT_H

#include <stdint.h>

/* The machine's CPU time since boot, from the "cpu" line of /proc/stat,
 * in ns (its clock ticks times the tick's length), and its tasks. */
struct bench_cpustat {
	uint64_t busy;            /* user, nice, system, irq, softirq */
	uint64_t steal;           /* taken by the hypervisor */
	uint64_t total;           /* busy, idle, iowait and steal */
	uint64_t forks;           /* tasks created since boot ("processes") */
};

/* Read it; every field 0 when /proc/stat cannot be read. */
void bench_cpustat_read(struct bench_cpustat *c);

/* A task's schedstat, in ns: on a CPU, runnable but waiting; and the time
 * slices it was given. */
struct bench_schedstat {
	uint64_t run, wait, slices;
};

/* Read the schedstat file at `path` (/proc/self/schedstat,
 * /proc/PID/task/TID/schedstat, ...); all 0 when it cannot be read. */
void bench_schedstat_read(const char *path, struct bench_schedstat *s);

/* How long this process has been runnable but not running (the wait of
 * /proc/self/schedstat): the time other tasks of this machine took its
 * CPU. 0 when the kernel does not keep it. */
uint64_t bench_run_delay_ns(void);

#endif
