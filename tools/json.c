/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <math.h>
#include <time.h>

#include <shoal/ring.h>

#include "shm/util.h"
#include "tools/format.h"
#include "tools/json.h"

void shoal__json_init(struct shoal__json *j, FILE *out)
{
	j->out = out;
	j->depth = 0;
	j->empty = true;
	j->line = false;
}

void shoal__json_init_line(struct shoal__json *j, FILE *out)
{
	shoal__json_init(j, out);
	j->line = true;
}

/*
 * Length of the valid UTF-8 sequence starting at s, or 0 if s does not start
 * one (stray continuation byte, overlong form, surrogate, above U+10FFFF, or
 * cut short by the terminating NUL).
 */
static unsigned utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	unsigned n;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		lo = s[0] == 0xe0 ? 0xa0 : lo;   /* no overlong forms */
		hi = s[0] == 0xed ? 0x9f : hi;   /* no UTF-16 surrogates */
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		lo = s[0] == 0xf0 ? 0x90 : lo;   /* no overlong forms */
		hi = s[0] == 0xf4 ? 0x8f : hi;   /* nothing above U+10FFFF */
	} else {
		return 0;
	}
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (unsigned i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

static void write_string(FILE *out, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', out);
	while (*s != '\0') {
		unsigned n = 1;

		if (*s == '"' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", out);
		else if (*s == '\t')
			fputs("\\t", out);
		else if (*s < 0x20)
			fprintf(out, "\\u%04x", *s);
		else if (*s < 0x80)
			fputc(*s, out);
		else if ((n = utf8_len(s)) != 0)
			fwrite(s, 1, n, out);
		else
			fputs("\\ufffd", out);
		/* An invalid byte is replaced on its own; resync on the next. */
		s += n > 0 ? n : 1;
	}
	fputc('"', out);
}

/* Separate from the previous value, start a new line (unless writing one line
 * per value), and write the key. */
static void begin_value(struct shoal__json *j, const char *key)
{
	if (j->depth > 0 && j->line) {
		if (!j->empty)
			fputs(", ", j->out);
	} else if (j->depth > 0) {
		fputs(j->empty ? "\n" : ",\n", j->out);
		fprintf(j->out, "%*s", (int)(2 * j->depth), "");
	}
	if (key != NULL) {
		write_string(j->out, key);
		fputs(": ", j->out);
	}
	j->empty = false;
}

static void open_container(struct shoal__json *j, const char *key, char bracket)
{
	begin_value(j, key);
	fputc(bracket, j->out);
	j->depth++;
	j->empty = true;
}

static void close_container(struct shoal__json *j, char bracket)
{
	SHOAL_ASSERT(j->depth > 0);
	j->depth--;
	if (!j->empty && !j->line)
		fprintf(j->out, "\n%*s", (int)(2 * j->depth), "");
	fputc(bracket, j->out);
	/* The enclosing container now holds this one. */
	j->empty = false;
	if (j->depth == 0)
		fputc('\n', j->out);
}

void shoal__json_object_begin(struct shoal__json *j, const char *key)
{
	open_container(j, key, '{');
}

void shoal__json_doc_begin(struct shoal__json *j, unsigned schema)
{
	char stamp[SHOAL_FMT_TIME_SIZE];
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	open_container(j, NULL, '{');
	shoal__json_uint(j, "schema", schema);
	shoal__json_string(j, "time", shoal__fmt_time(stamp, sizeof(stamp),
						       (uint64_t)now.tv_sec * 1000000000u +
						       (uint64_t)now.tv_nsec));
}

void shoal__json_object_end(struct shoal__json *j)
{
	close_container(j, '}');
}

void shoal__json_array_begin(struct shoal__json *j, const char *key)
{
	open_container(j, key, '[');
}

void shoal__json_array_end(struct shoal__json *j)
{
	close_container(j, ']');
}

void shoal__json_string(struct shoal__json *j, const char *key, const char *s)
{
	begin_value(j, key);
	write_string(j->out, s);
}

void shoal__json_uint(struct shoal__json *j, const char *key, uint64_t v)
{
	begin_value(j, key);
	fprintf(j->out, "%" PRIu64, v);
}

void shoal__json_int(struct shoal__json *j, const char *key, int64_t v)
{
	begin_value(j, key);
	fprintf(j->out, "%" PRId64, v);
}

void shoal__json_real(struct shoal__json *j, const char *key, double v, int decimals)
{
	begin_value(j, key);
	/* JSON has no NaN or infinity. */
	if (isfinite(v))
		fprintf(j->out, "%.*f", decimals, v);
	else
		fputs("null", j->out);
}

void shoal__json_bool(struct shoal__json *j, const char *key, bool v)
{
	begin_value(j, key);
	fputs(v ? "true" : "false", j->out);
}

void shoal__json_null(struct shoal__json *j, const char *key)
{
	begin_value(j, key);
	fputs("null", j->out);
}

void shoal__json_ring_fields(struct shoal__json *j, const struct shoal_ring_stats *st,
			     int pending, bool all)
{
	shoal__json_uint(j, "capacity", st->capacity);
	if (all) {
		shoal__json_uint(j, "max_payload", st->max_payload);
		shoal__json_uint(j, "head", st->head);
		shoal__json_uint(j, "tail", st->tail);
	}
	shoal__json_uint(j, "used", st->used);
	shoal__json_real(j, "occupancy_pct", shoal__fmt_percent(st->used, st->capacity), 1);
	if (pending >= 0)
		shoal__json_int(j, "pending", pending);
	else
		shoal__json_null(j, "pending");
	shoal__json_uint(j, "records_in", st->records_in);
	shoal__json_uint(j, "records_out", st->records_out);
	if (all) {
		shoal__json_uint(j, "bytes_in", st->bytes_in);
		shoal__json_uint(j, "bytes_out", st->bytes_out);
	}
	shoal__json_uint(j, "full_events", st->full_events);
	shoal__json_uint(j, "high_water", st->high_water);
	shoal__json_int(j, "producer_pid", st->producer_pid);
	shoal__json_int(j, "consumer_pid", st->consumer_pid);
}
