/* SPDX-License-Identifier: MIT */
/*
 * Reading one number back out of the tools' --json output, as the tests that
 * run the `shoal` binary check what it printed: the text is taken as the
 * tools write it (pretty-printed, `"key": value`), not parsed.
 */
#ifndef SHOAL_TESTS_JSONVALUE_H
#define SHOAL_TESTS_JSONVALUE_H

#include <stdint.h>

/*
 * The value of the first `"key": ` after `"name": "name",` in `json`: a
 * number, or UINT64_MAX for null. Fails the test when either is missing.
 */
uint64_t json_value_after(const char *json, const char *name, const char *key);

/* As json_value_after(), after `"field": "name",` (a link's "peer", ...). */
uint64_t json_value_where(const char *json, const char *field, const char *name,
			  const char *key);

#endif
