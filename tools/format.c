/* SPDX-License-Identifier: MIT */
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
