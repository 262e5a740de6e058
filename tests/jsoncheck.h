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

#endif
