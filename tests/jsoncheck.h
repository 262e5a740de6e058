/* SPDX-License-Identifier: MIT */
/*
 * A strict JSON checker for the tools' --json output: the RFC 8259 grammar,
 * no semantics (duplicate keys and number ranges are not judged), nesting at
 * most 64 deep. Shared by the tests that run the `shoal` binary.
 */
#ifndef SHOAL_TESTS_JSONCHECK_H
#define SHOAL_TESTS_JSONCHECK_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Is `text` one JSON object and nothing after it but white space? Returns
 * true, or false with the offset of the first byte that does not fit in
 * *where.
 */
bool json_check_object(const char *text, size_t *where);

/* Fail the running cmocka test, printing `text`, unless it is one object. */
void assert_json_object(const char *text);

/*
 * Fail the running cmocka test unless every line of `text` is one JSON
 * object (JSON Lines). Returns the number of lines.
 */
unsigned assert_json_lines(const char *text);

/*
 * Fail unless every document in `text` (one object, or one a line with
 * `lines`) is one valid object opening with "schema": `schema` and then
 * "time": the wall clock in RFC 3339 UTC with milliseconds, within a minute
 * of now (the tools' envelope, shoal(1) JSON OUTPUT). Returns the number of
 * documents.
 */
unsigned assert_json_documents(const char *text, unsigned schema, bool lines);

/*
 * Fail unless `text` is the tools' error document (one line) with exit
 * status `code` and a message containing `says`.
 */
void assert_json_error(const char *text, int code, const char *says);

#endif
