/* SPDX-License-Identifier: MIT */
/*
 * The system-file loader (runtime/config.c), in process: the order of the
 * top-level keys does not matter, limits are refused with a message naming
 * them, and every refused file frees what its parse allocated (the ASan
 * setup runs this with detect_leaks=1). `shoal run` itself is in run_test.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/control/config.h"
#include "tests/testutil.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const char types_yaml[] =
	"types:\n"
	"  - { id: 3, name: work, max_size: 64 }\n"
	"  - { id: 7, name: ping, max_size: 8 }\n";

static const char groups_yaml[] =
	"groups:\n"
	"  - name: a\n    program: /bin/true\n    args: [x, y]\n"
	"    routes: [ { types: [work, ping] }, { types: [7], deliver: broadcast } ]\n"
	"  - name: b\n    program: /bin/true\n    workers: 2\n"
	"    routes: [ { types: work, key: { offset: 0, width: 8 }, match: { mod: [2, 1] } } ]\n";

static struct shoal__config *parse_ok(const char *text)
{
	struct shoal__config *c = NULL;
	struct shoal_err err = { { 0 } };
	int ret = shoal__config_parse("t.yaml", text, strlen(text), &c, &err);

	if (ret != 0)
		fail_msg("parse failed (%d): %s\n--- file:\n%s", ret, err.msg, text);
	assert_non_null(c);
	return c;
}

/* Refused with -EINVAL, no config, and `reason` in the message. */
static void parse_refused(const char *text, const char *reason)
{
	struct shoal__config *c = NULL;
	struct shoal_err err = { { 0 } };
	int ret = shoal__config_parse("t.yaml", text, strlen(text), &c, &err);

	if (ret != -EINVAL || c != NULL || strstr(err.msg, reason) == NULL)
		fail_msg("got %d '%s', expected -EINVAL and '%s'", ret, err.msg, reason);
}

static void config_groups_before_types_parses_as_types_first(void **state)
{
	char a[2048], b[2048];
	struct shoal__config *x, *y;

	(void)state;
	snprintf(a, sizeof(a), "system: s\n%s%s", types_yaml, groups_yaml);
	snprintf(b, sizeof(b), "%s%ssystem: s\n", groups_yaml, types_yaml);
	x = parse_ok(a);
	y = parse_ok(b);
	assert_string_equal(x->system, y->system);
	assert_int_equal(x->n_types, 2);
	assert_int_equal(y->n_types, x->n_types);
	assert_memory_equal(x->types, y->types, x->n_types * sizeof(*x->types));
	assert_int_equal(x->n_groups, 2);
	assert_int_equal(y->n_groups, x->n_groups);
	for (uint32_t i = 0; i < x->n_groups; i++)
		assert_true(shoal__config_group_same(&x->groups[i], &y->groups[i]));
	assert_int_equal(x->n_routes, 3);
	assert_int_equal(y->n_routes, x->n_routes);
	for (uint32_t i = 0; i < x->n_routes; i++)
		assert_memory_equal(&x->routes[i].f, &y->routes[i].f, sizeof(x->routes[i].f));
	/* The names resolved to the declared ids. */
	assert_int_equal(y->routes[0].f.types[0], 3);
	assert_int_equal(y->routes[0].f.types[1], 7);
	shoal__config_free(x);
	shoal__config_free(y);
}

static char *groups_file(unsigned n)
{
	size_t cap = 64 + (size_t)n * 48;
	char *text = malloc(cap);
	size_t len;

	assert_non_null(text);
	len = (size_t)snprintf(text, cap, "system: s\ngroups:\n");
	for (unsigned i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"  - { name: g%u, program: /bin/true }\n", i);
	return text;
}

static void config_more_groups_than_the_limit_are_refused(void **state)
{
	char *text = groups_file(SHOAL_MAX_GROUPS);
	struct shoal__config *c;

	(void)state;
	c = parse_ok(text);
	assert_int_equal(c->n_groups, SHOAL_MAX_GROUPS);
	shoal__config_free(c);
	free(text);
	text = groups_file(SHOAL_MAX_GROUPS + 1);
	parse_refused(text, "t.yaml:3:3: groups has 257 entries, more than the limit of 256");
	free(text);
}

/* Each refused after the parse allocated something (arguments, types,
 * routes, environment); a leak fails this under the ASan setup. */
static const struct {
	const char *yaml;
	const char *reason;
} refused_after_allocating[] = {
	{ "system: s\ngroups:\n  - name: a\n    args: [x, y]\n    program: /bin/true\n"
	  "    actors: x\n", "actors must be a whole number" },
	{ "system: s\ngroups:\n  - name: a\n    args: [x, [y]]\n    program: /bin/true\n",
	  "an argument must be a scalar" },
	{ "system: s\ntypes: []\ntypes: []\ngroups:\n  - { name: a, program: /bin/true }\n",
	  "key 'types' appears twice" },
	{ "system: s\ntypes: [ { id: 1, name: a, max_size: 8 }, { id: 1, name: b, max_size: 8 } ]\n"
	  "groups:\n  - { name: a, program: /bin/true }\n", "repeats the id or name" },
	{ "system: s\ngroups:\n  - { name: a, program: /bin/true, routes: [ { types: [1] } ] }\n"
	  "  - { name: b, program: /bin/true, routes: [ { types: [1] }, { types: [x] } ] }\n",
	  "route type 'x' is neither" },
	{ "system: s\ngroups:\n  - name: a\n    program: /bin/true\n"
	  "    env: { A: b, C: [d] }\n", "an env value must be a scalar" },
	{ "system: s\ngroups:\n  - { name: a, program: /bin/true, env: { A: b } }\n"
	  "  - { name: a, program: /bin/true }\n", "used twice" },
	{ "groups:\n  - { name: a, program: /bin/true, args: [x] }\n", "has no 'system'" },
	{ "system: [a\n", "flow sequence" },
};

static void config_refused_file_frees_what_it_parsed(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(refused_after_allocating); i++)
		parse_refused(refused_after_allocating[i].yaml, refused_after_allocating[i].reason);
}

/* shoal.<system>.g.<group> must fit a segment name (63 characters). */
static void config_mailbox_name_too_long_for_a_segment_is_refused(void **state)
{
	static const char sys31[] = "sssssssssssssssssssssssssssssss";
	static const char grp23[] = "ggggggggggggggggggggggg", grp24[] = "gggggggggggggggggggggggg";
	char text[512];
	struct shoal__config *c;

	(void)state;
	assert_int_equal(strlen(sys31) + strlen(grp23) + 9, SHOAL_SEG_NAME_MAX - 1);
	snprintf(text, sizeof(text), "system: %s\ngroups:\n  - { name: %s, program: /bin/true }\n",
		 sys31, grp23);
	c = parse_ok(text);
	shoal__config_free(c);
	/* 'groups' first: the check waits for the system name. */
	snprintf(text, sizeof(text), "groups:\n  - { name: a, program: /bin/true }\n"
		 "  - { name: %s, program: /bin/true }\nsystem: %s\n", grp24, sys31);
	parse_refused(text, "t.yaml:3:5: group gggggggggggggggggggggggg: its mailbox name "
		      "shoal.sssssssssssssssssssssssssssssss.g.gggggggggggggggggggggggg would be "
		      "64 characters, more than the 63 of a segment name");
}

/* A ring of C data bytes holds records of at most C / 2 - 8 bytes, and a
 * message takes its 56-byte envelope besides its payload. */
static const struct {
	const char *router, *mailbox;
	unsigned max_size;
	const char *reason;       /* NULL: accepted */
} type_fits[] = {
	{ "", "4KiB", 4096 / 2 - 8 - 56, NULL },
	{ "", "4KiB", 4096 / 2 - 8 - 56 + 1, "t.yaml:11:9: group b: type 3 'work' (max_size 1985) "
	  "does not fit its rings of 4096 bytes (mailbox), which carry at most 1984: all would be "
	  "dropped as malformed; set mailbox: 8192 or more" },
	{ "router: { inbound_capacity: 64KiB, uplink_capacity: 64KiB }\n", "", 65536,
	  "rings of 65536 bytes (router.inbound_capacity), which carry at most 32704" },
	{ "", "", 1024 * 1024, "rings of 262144 bytes (the default), which carry at most 131008: "
	  "all would be dropped as malformed; set mailbox: 4194304 or more" },
	{ "", "4MiB", 1024 * 1024, NULL },
};

static void config_type_larger_than_the_group_mailbox_is_refused(void **state)
{
	char text[1024], mailbox[64];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(type_fits); i++) {
		snprintf(mailbox, sizeof(mailbox), "    mailbox: %s\n", type_fits[i].mailbox);
		snprintf(text, sizeof(text), "system: s\n%stypes:\n"
			 "  - { id: 3, name: work, max_size: %u }\n"
			 "groups:\n  - { name: a, program: /bin/true, routes: [ { types: [1] } ] }\n"
			 "  - name: b\n    program: /bin/true\n%s"
			 "    routes:\n      - { types: [7] }\n      - { types: [work] }\n",
			 type_fits[i].router, type_fits[i].max_size,
			 type_fits[i].mailbox[0] ? mailbox : "");
		if (type_fits[i].reason == NULL) {
			shoal__config_free(parse_ok(text));
			continue;
		}
		parse_refused(text, "group b: type 3 'work'");
		parse_refused(text, type_fits[i].reason);
	}
}

/* 256 groups of 16 workers with 1 GiB rings: 32 TiB, more than any
 * shared-memory folder holds. */
static void config_more_shared_memory_than_free_is_refused(void **state)
{
	size_t cap = 64 + (size_t)SHOAL_MAX_GROUPS * 96, len;
	char *text = malloc(cap);
	struct shoal__config_space sp = { 0 };
	struct shoal__config *c;
	struct shoal_err err = { { 0 } };

	(void)state;
	assert_non_null(text);
	len = (size_t)snprintf(text, cap, "system: s\ngroups:\n");
	for (unsigned i = 0; i < SHOAL_MAX_GROUPS; i++)
		len += (size_t)snprintf(text + len, cap - len, "  - { name: g%u, program: /bin/true, "
					"workers: 16, mailbox: 1024MiB }\n", i);
	c = parse_ok(text);
	free(text);
	assert_true(shoal__config_shm_bytes(c, NULL, 4096) >
		    (uint64_t)SHOAL_MAX_GROUPS * 16 * SHOAL_MAX_NODES * (UINT64_C(1) << 30));
	/* A reload that adds no group needs nothing more. */
	assert_int_equal(shoal__config_shm_bytes(c, c, 4096), 0);
	assert_int_equal(shoal__config_check_space(c, NULL, &sp, &err), -ENOSPC);
	assert_true(sp.need > sp.avail);
	if (strstr(err.msg, "system s needs ") == NULL ||
	    strstr(err.msg, " GiB of shared memory for its segments, but ") == NULL ||
	    strstr(err.msg, sp.dir) == NULL)
		fail_msg("message: %s", err.msg);
	assert_int_equal(shoal__config_check_space(c, c, &sp, &err), 0);
	shoal__config_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(config_groups_before_types_parses_as_types_first),
		cmocka_unit_test(config_more_groups_than_the_limit_are_refused),
		cmocka_unit_test(config_refused_file_frees_what_it_parsed),
		cmocka_unit_test(config_mailbox_name_too_long_for_a_segment_is_refused),
		cmocka_unit_test(config_type_larger_than_the_group_mailbox_is_refused),
		cmocka_unit_test(config_more_shared_memory_than_free_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
