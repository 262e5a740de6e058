/* SPDX-License-Identifier: MIT */
/*
 * What a system call costs on this VM (bench/SUITE.md, "What the routed
 * stream waited for"): 200 000 getppid() and sched_yield() calls, the mean
 * of each. Built and run by hand: gcc -O2 syscall-cost.c && ./a.out
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void)
{
	const int n = 200000;
	double t0 = now_ns(), t1, t2;

	for (int i = 0; i < n; i++)
		syscall(SYS_getppid);
	t1 = now_ns();
	for (int i = 0; i < n; i++)
		sched_yield();
	t2 = now_ns();
	printf("getppid %.0f ns, sched_yield %.0f ns\n", (t1 - t0) / n, (t2 - t1) / n);
	return 0;
}
