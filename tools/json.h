/* SPDX-License-Identifier: MIT */
/*
 * A small streaming JSON writer for the tools' --json output: objects,
 * arrays, strings, integers, booleans and null, indented two spaces, or each
 * top-level value on one line (JSON Lines, for output that streams).
 *
 * The caller nests begin/end calls correctly; every value inside an object
 * takes a key, every value inside an array or at the top passes key NULL.
 * Strings are written as valid JSON whatever bytes they hold: quotes,
 * backslashes and control characters are escaped, and bytes that are not
 * valid UTF-8 (names read from shared memory are untrusted) become U+FFFD.
 * Nothing allocates; write errors are left to the caller's ferror() check.
 */
#ifndef SHOAL_TOOLS_JSON_H
#define SHOAL_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct shoal__json {
	FILE *out;
	unsigned depth;
	bool empty;   /* the innermost open container has no value yet */
	bool line;    /* one line per top-level value, no indentation */
};

void shoal__json_init(struct shoal__json *j, FILE *out);
/* The same, writing each top-level value on a single line. */
void shoal__json_init_line(struct shoal__json *j, FILE *out);

/*
 * Open a top-level document: an object whose first members are "schema",
 * the version of this kind of document's layout (it grows by one whenever a
 * member is renamed, removed or changes meaning; added members do not
 * change it), and "time", the wall clock now, in RFC 3339 UTC with
 * milliseconds ("2026-12-03T11:09:36.093Z"). Close it with
 * shoal__json_object_end().
 */
void shoal__json_doc_begin(struct shoal__json *j, unsigned schema);

/* Open or close an object or array. Closing the outermost one ends the line. */
void shoal__json_object_begin(struct shoal__json *j, const char *key);
void shoal__json_object_end(struct shoal__json *j);
void shoal__json_array_begin(struct shoal__json *j, const char *key);
void shoal__json_array_end(struct shoal__json *j);

void shoal__json_string(struct shoal__json *j, const char *key, const char *s);
void shoal__json_uint(struct shoal__json *j, const char *key, uint64_t v);
void shoal__json_int(struct shoal__json *j, const char *key, int64_t v);
/* A number with `decimals` digits after the point; null if not finite. */
void shoal__json_real(struct shoal__json *j, const char *key, double v, int decimals);
void shoal__json_bool(struct shoal__json *j, const char *key, bool v);
void shoal__json_null(struct shoal__json *j, const char *key);

struct shoal_ring_stats;

/*
 * A ring's figures as fields of the current object, the same names in
 * every command: capacity, used, occupancy_pct, pending (`pending` < 0:
 * null), records in and out, full_events, high_water, the two pids; with
 * `all`, also max_payload, head, tail and bytes in and out.
 */
void shoal__json_ring_fields(struct shoal__json *j, const struct shoal_ring_stats *st,
			     int pending, bool all);

#endif
