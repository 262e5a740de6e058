/* SPDX-License-Identifier: MIT */
/* The JSON checker of the tool tests (see jsoncheck.h): a recursive descent
 * over the RFC 8259 grammar that only says whether the text fits. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "tests/jsoncheck.h"
#include "tests/testutil.h"

struct jp {
	const char *s;
	unsigned depth;
};

static bool j_value(struct jp *p);

static void j_ws(struct jp *p)
{
	while (*p->s == ' ' || *p->s == '\n' || *p->s == '\t' || *p->s == '\r')
		p->s++;
}

static bool j_string(struct jp *p)
{
	if (*p->s++ != '"')
		return false;
	while (*p->s != '"') {
		unsigned char ch = (unsigned char)*p->s++;

		if (ch < 0x20)
			return false;
		if (ch != '\\')
			continue;
		ch = (unsigned char)*p->s++;
		if (ch == 'u') {
			for (int i = 0; i < 4; i++, p->s++)
				if (!isxdigit((unsigned char)*p->s))
					return false;
		} else if (ch == '\0' || strchr("\"\\/bfnrt", ch) == NULL) {
			return false;
		}
	}
	p->s++;
	return true;
}

static bool j_digits(struct jp *p)
{
	const char *start = p->s;

	while (*p->s >= '0' && *p->s <= '9')
		p->s++;
	return p->s > start;
}

static bool j_number(struct jp *p)
{
	if (*p->s == '-')
		p->s++;
	if (*p->s == '0')
		p->s++;
	else if (!j_digits(p))
		return false;
	if (*p->s == '.') {
		p->s++;
		if (!j_digits(p))
			return false;
	}
	if (*p->s == 'e' || *p->s == 'E') {
		p->s++;
		if (*p->s == '+' || *p->s == '-')
			p->s++;
		if (!j_digits(p))
			return false;
	}
	return true;
}

static bool j_members(struct jp *p, char close, bool keyed)
{
	p->s++;
	j_ws(p);
	if (*p->s == close) {
		p->s++;
		return true;
	}
	for (;;) {
		if (keyed) {
			if (!j_string(p))
				return false;
			j_ws(p);
			if (*p->s++ != ':')
				return false;
		}
		if (!j_value(p))
			return false;
		j_ws(p);
		if (*p->s == close) {
			p->s++;
			return true;
		}
		if (*p->s++ != ',')
			return false;
		j_ws(p);
	}
}

static bool j_value(struct jp *p)
{
	static const char *const literals[] = { "true", "false", "null" };
	bool ok;

	j_ws(p);
	if (*p->s == '{' || *p->s == '[') {
		if (++p->depth > 64)
			return false;
		ok = j_members(p, *p->s == '{' ? '}' : ']', *p->s == '{');
		p->depth--;
		return ok;
	}
	if (*p->s == '"')
		return j_string(p);
	for (size_t i = 0; i < sizeof(literals) / sizeof(literals[0]); i++) {
		if (strncmp(p->s, literals[i], strlen(literals[i])) == 0) {
			p->s += strlen(literals[i]);
			return true;
		}
	}
	return j_number(p);
}

bool json_check_object(const char *text, size_t *where)
{
	struct jp p = { text, 0 };
	bool ok;

	j_ws(&p);
	ok = *p.s == '{' && j_value(&p);
	if (ok) {
		j_ws(&p);
		ok = *p.s == '\0';
	}
	if (!ok && where != NULL)
		*where = (size_t)(p.s - text);
	return ok;
}

void assert_json_object(const char *text)
{
	size_t where = 0;

	if (!json_check_object(text, &where))
		fail_msg("not one valid JSON object (offset %zu):\n%s", where, text);
}

unsigned assert_json_lines(const char *text)
{
	char *copy = strdup(text), *line, *save = NULL;
	unsigned n = 0;

	assert_non_null(copy);
	for (line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		size_t where = 0;

		if (!json_check_object(line, &where))
			fail_msg("line %u is not one valid JSON object (offset %zu):\n%s", n + 1,
				 where, line);
		n++;
	}
	free(copy);
	return n;
}
