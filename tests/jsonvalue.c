/* SPDX-License-Identifier: MIT */
/* Numbers read back out of the tools' JSON (see jsonvalue.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/jsonvalue.h"

uint64_t json_value_after(const char *json, const char *name, const char *key)
{
	return json_value_where(json, "name", name, key);
}

uint64_t json_value_where(const char *json, const char *field, const char *name,
			  const char *key)
{
	char at[128], k[64];
	const char *p;

	snprintf(at, sizeof(at), "\"%s\": \"%s\",", field, name);
	snprintf(k, sizeof(k), "\"%s\": ", key);
	p = strstr(json, at);
	if (p == NULL || (p = strstr(p, k)) == NULL)
		fail_msg("no \"%s\" after \"%s\" in:\n%s", key, name, json);
	p += strlen(k);
	return strncmp(p, "null", 4) == 0 ? UINT64_MAX : strtoull(p, NULL, 10);
}
