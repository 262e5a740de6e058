/* SPDX-License-Identifier: MIT */
/* Text formatting shared by the tools' human-readable output. */
#ifndef SHOAL_TOOLS_FORMAT_H
#define SHOAL_TOOLS_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Bytes `shoal__fmt_printable()` needs for a string of `len` bytes: every
 * byte may become a four-character escape.
 */
#define SHOAL_FMT_PRINTABLE_SIZE(len) (4 * (len) + 1)

/*
 * Copy `s` into `buf` (`cap` bytes) with every byte outside printable ASCII
 * written as \xNN, so that a name read from shared memory cannot send
 * control sequences to the terminal; a backslash is doubled. Truncates to
 * fit. Returns buf.
 */
const char *shoal__fmt_printable(char *buf, size_t cap, const char *s);

/*
 * Write a CLOCK_REALTIME time in nanoseconds as ISO 8601 UTC with
 * milliseconds ("2024-12-02T09:35:12.345Z") into `buf` (at least
 * SHOAL_FMT_TIME_SIZE bytes). Returns buf.
 */
#define SHOAL_FMT_TIME_SIZE 40
const char *shoal__fmt_time(char *buf, size_t cap, uint64_t ns);

/* 100 * part / whole, 0 when whole is 0. */
double shoal__fmt_percent(uint64_t part, uint64_t whole);

/*
 * Short human-readable forms for tables, written into `buf` (`cap` bytes,
 * SHOAL_FMT_SHORT_SIZE is enough for each) and returned:
 *   bytes     "512 B", "8.0 KiB", "10.3 MiB", "2.00 GiB"
 *   rate      a count per second: "0", "950", "12.3k", "1.20M"
 *   duration  nanoseconds: "850 ns", "12.3 us", "4.56 ms", "1.234 s", "75 s"
 */
#define SHOAL_FMT_SHORT_SIZE 32
const char *shoal__fmt_bytes(char *buf, size_t cap, uint64_t n);
const char *shoal__fmt_rate(char *buf, size_t cap, double per_s);
const char *shoal__fmt_duration(char *buf, size_t cap, uint64_t ns);
/*
 * A CPU set of `n_words` 64-bit words (bit c of word c / 64 is CPU c) as a
 * list: "0-3,64,130-131", or "none". Any set of CPUs below 8192 fits in
 * SHOAL_FMT_CPUS_SIZE bytes: the longest list, pairs one CPU apart
 * ("0-1,3-4,...,8189-8190"), takes 27 310.
 */
#define SHOAL_FMT_CPUS_SIZE 27400
const char *shoal__fmt_cpus(char *buf, size_t cap, const uint64_t *words, uint32_t n_words);

#endif
