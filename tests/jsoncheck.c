/* SPDX-License-Identifier: MIT */
/* The JSON checker of the tool tests (see jsoncheck.h): a recursive descent
 * over the RFC 8259 grammar that only says whether the text fits. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Skip `lit` after white space; false if it is not next. */
static bool j_expect(const char **s, const char *lit)
{
	while (**s == ' ' || **s == '\n')
		(*s)++;
	if (strncmp(*s, lit, strlen(lit)) != 0)
		return false;
	*s += strlen(lit);
	return true;
}

/* Is s "YYYY-MM-DDTHH:MM:SS.mmmZ\"", a time within a minute of now? */
static bool rfc3339_now(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ\"";
	struct tm tm = { 0 };
	time_t t;

	for (size_t i = 0; i < sizeof(shape) - 1; i++)
		if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
			return false;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		   &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
		return false;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = timegm(&tm);
	return t != (time_t)-1 && labs((long)(t - time(NULL))) <= 60;
}

static void assert_envelope(const char *doc, unsigned schema)
{
	char want[32];
	const char *s = doc;

	snprintf(want, sizeof(want), "%u", schema);
	if (!j_expect(&s, "{") || !j_expect(&s, "\"schema\":") || !j_expect(&s, want) ||
	    !j_expect(&s, ",") || !j_expect(&s, "\"time\":") || !j_expect(&s, "\"") ||
	    !rfc3339_now(s))
		fail_msg("no \"schema\": %u then \"time\" (RFC 3339 UTC, now) at the start "
			 "(offset %zu):\n%s", schema, (size_t)(s - doc), doc);
}

unsigned assert_json_documents(const char *text, unsigned schema, bool lines)
{
	char *copy, *line, *save = NULL;
	unsigned n = 0;

	if (!lines) {
		assert_json_object(text);
		assert_envelope(text, schema);
		return 1;
	}
	n = assert_json_lines(text);
	copy = strdup(text);
	assert_non_null(copy);
	for (line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
		assert_envelope(line, schema);
	free(copy);
	return n;
}

void assert_json_error(const char *text, int code, const char *says)
{
	char want[64];

	if (assert_json_documents(text, 1, true) != 1)
		fail_msg("not one error document:\n%s", text);
	snprintf(want, sizeof(want), "\"error\": {\"exit\": %d, \"message\": \"", code);
	if (strstr(text, want) == NULL || strstr(text, says) == NULL)
		fail_msg("not the error document of exit %d saying '%s':\n%s", code, says, text);
}
