/* SPDX-License-Identifier: MIT */
/*
 * What every benchmark's report is made of: the machine line, a "median
 * [min, max]" cell, and the Markdown and CSV outputs. The reports share
 * them so that bench/run-suite, which puts them side by side, finds the
 * same lines written the same way. Each benchmark's tables stay with its
 * data: ring_report.c (shoal-bench-ring), system_bench.c, iceoryx_bench.c.
 * Private to bench/.
 */
#ifndef SHOAL_BENCH_REPORT_H
#define SHOAL_BENCH_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "bench/bench.h"

/* The header's machine line: "- machine: <CPU model>, <n> CPUs online,
 * <kernel> <release>" and a newline. */
void bench_md_machine(FILE *f);

/* "med [min, max]" of m, each with `prec` decimals, into buf; returns buf. */
const char *bench_fmt_mmm(char *buf, size_t len, struct bench_mmm m, int prec);

/*
 * Before a targets table: a warning when more than half of the `total`
 * samples (or pairs of them: `what` names them) kept were disturbed (other
 * tasks took the CPUs), whose verdicts then say little. Prints nothing
 * otherwise.
 */
void bench_md_disturbed_warning(FILE *f, unsigned disturbed, unsigned total,
				const char *what);

/*
 * The report in Markdown on stdout and, when asked, in file `md`; the
 * samples as CSV in file `csv`. A file that cannot be written is said on
 * stderr. Returns 0 or the first negative errno.
 */
int bench_write_outputs(const char *prog, const char *md, const char *csv,
			void (*write_md)(FILE *f, const void *arg),
			int (*write_csv)(const char *path, const void *arg), const void *arg);

#endif
