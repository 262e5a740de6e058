/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tools/format.h"

const char *shoal__fmt_printable(char *buf, size_t cap, const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		char esc[5];
		size_t len;

		if (ch == '\\')
			len = (size_t)snprintf(esc, sizeof(esc), "\\\\");
		else if (ch >= 0x20 && ch < 0x7f)
			len = (size_t)snprintf(esc, sizeof(esc), "%c", ch);
		else
			len = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", ch);
		if (n + len >= cap)
			break;
		memcpy(buf + n, esc, len);
		n += len;
	}
	if (cap > 0)
		buf[n] = '\0';
	return buf;
}

const char *shoal__fmt_time(char *buf, size_t cap, uint64_t ns)
{
	/* A uint64_t of nanoseconds ends in the year 2554: time_t holds it. */
	time_t sec = (time_t)(ns / 1000000000u);
	struct tm tm;
	size_t n;

	if (gmtime_r(&sec, &tm) == NULL ||
	    (n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm)) == 0) {
		snprintf(buf, cap, "%llu ns", (unsigned long long)ns);
		return buf;
	}
	snprintf(buf + n, cap - n, ".%03uZ", (unsigned)(ns / 1000000u % 1000u));
	return buf;
}

double shoal__fmt_percent(uint64_t part, uint64_t whole)
{
	return whole == 0 ? 0.0 : 100.0 * (double)part / (double)whole;
}

const char *shoal__fmt_bytes(char *buf, size_t cap, uint64_t n)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	unsigned u = 0;

	if (n < 1024) {
		snprintf(buf, cap, "%llu B", (unsigned long long)n);
		return buf;
	}
	for (v /= 1024; v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0]); u++)
		v /= 1024;
	snprintf(buf, cap, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, units[u]);
	return buf;
}

const char *shoal__fmt_rate(char *buf, size_t cap, double per_s)
{
	if (!(per_s >= 0.5))   /* also NaN: a rate that cannot be told shows as 0 */
		snprintf(buf, cap, "0");
	else if (per_s < 1e3)
		snprintf(buf, cap, "%.0f", per_s);
	else if (per_s < 1e6)
		snprintf(buf, cap, "%.1fk", per_s / 1e3);
	else if (per_s < 1e9)
		snprintf(buf, cap, "%.2fM", per_s / 1e6);
	else
		snprintf(buf, cap, "%.2fG", per_s / 1e9);
	return buf;
}

const char *shoal__fmt_duration(char *buf, size_t cap, uint64_t ns)
{
	double v = (double)ns;

	if (ns < 1000)
		snprintf(buf, cap, "%llu ns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(buf, cap, "%.1f us", v / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, cap, "%.2f ms", v / 1e6);
	else if (ns < UINT64_C(60000000000))
		snprintf(buf, cap, "%.3f s", v / 1e9);
	else
		snprintf(buf, cap, "%.0f s", v / 1e9);
	return buf;
}

static bool cpu_in(const uint64_t *words, uint32_t n_words, uint32_t cpu)
{
	return cpu / 64 < n_words && (words[cpu / 64] >> (cpu % 64) & 1);
}

const char *shoal__fmt_cpus(char *buf, size_t cap, const uint64_t *words, uint32_t n_words)
{
	size_t n = 0;

	if (cap > 0)
		buf[0] = '\0';
	for (uint32_t cpu = 0; cpu < n_words * 64 && n < cap; cpu++) {
		uint32_t last = cpu;

		if (!cpu_in(words, n_words, cpu))
			continue;
		while (cpu_in(words, n_words, last + 1))
			last++;
		n += (size_t)snprintf(buf + n, cap - n, last == cpu ? "%s%u" : "%s%u-%u",
				      n > 0 ? "," : "", cpu, last);
		cpu = last;
	}
	if (n == 0)
		snprintf(buf, cap, "none");
	return buf;
}
