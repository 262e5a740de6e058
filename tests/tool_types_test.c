/* SPDX-License-Identifier: MIT */
/*
 * `shoal types`: the C header of a system's message types, from its file.
 * (That the header compiles into programs the router accepts is shown by
 * the examples, which the build generates theirs for, and by `run`.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/toolrun.h"

static char dir[] = "/tmp/shoal-types-XXXXXX";

/* Write `text` to `name` in the test folder; returns its path (kept). */
static const char *write_file(const char *name, const char *text)
{
	static char path[4][256];
	static unsigned turn;
	char *p = path[turn++ % 4];
	FILE *f;

	snprintf(p, sizeof(path[0]), "%s/%s", dir, name);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	return p;
}

#define SYSTEM_HEAD "system: orders\ngroups:\n  - { name: a, program: not-built-anywhere }\n"

static void types_header_lists_ids_sizes_and_the_array(void **state)
{
	const char *file = write_file("orders.yaml", SYSTEM_HEAD
				      "types:\n  - { id: 7, name: new-order, max_size: 1KiB }\n"
				      "  - { id: 9, name: cancel, max_size: 24 }\n");
	struct tool_run r;

	(void)state;
	/* The programs need not exist: the header is made before any is built. */
	tool_expect(&r, 0, (const char *const[]){ "types", file, NULL });
	assert_has(r.out, "MSG_NEW_ORDER = 7,");
	assert_has(r.out, "MSG_CANCEL = 9,");
	assert_has(r.out, "#define MSG_NEW_ORDER_MAX_SIZE 1024u");
	assert_has(r.out, "static const struct shoal_type msg_types[] = {");
	assert_has(r.out, "{ 9, 24, \"cancel\" },");
	assert_has(r.out, "#define MSG_N_TYPES 2u");
	assert_has(r.out, "#ifndef SHOAL_TYPES_ORDERS_H");
	tool_free(&r);
	tool_expect(&r, 0, (const char *const[]){ "types", "--prefix", "Ord", file, NULL });
	assert_has(r.out, "ORD_CANCEL = 9,");
	assert_has(r.out, "ord_types[]");
	tool_free(&r);
}

static void types_output_file_is_written_whole(void **state)
{
	const char *file = write_file("o.yaml", SYSTEM_HEAD
				      "types:\n  - { id: 1, name: ping, max_size: 16 }\n");
	char out[256], text[4096];
	struct tool_run r;
	size_t n;
	FILE *f;

	(void)state;
	snprintf(out, sizeof(out), "%s/o_types.h", dir);
	tool_expect(&r, 0, (const char *const[]){ "types", "-o", out, file, NULL });
	assert_string_equal(r.out, "");
	tool_free(&r);
	f = fopen(out, "r");
	assert_non_null(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	assert_has(text, "MSG_PING = 1,");
	assert_has(text, "#endif\n");
	unlink(out);
}

static void types_refuses_what_it_cannot_turn_into_a_header(void **state)
{
	const char *clash = write_file("c.yaml", SYSTEM_HEAD
				       "types:\n  - { id: 1, name: a-b, max_size: 8 }\n"
				       "  - { id: 2, name: a_b, max_size: 8 }\n");
	const char *none = write_file("n.yaml", SYSTEM_HEAD);
	const char *bad = write_file("b.yaml", "system: x\ngroups: [\n");
	static const struct tool_usage_case usage[] = {
		{ { "types", NULL }, "missing FILE" },
		{ { "types", "a.yaml", "b.yaml", NULL }, "one FILE only" },
		{ { "types", "--prefix", "9x", "a.yaml", NULL }, "C identifier" },
		{ { "types", "--bogus", "a.yaml", NULL }, "--bogus" },
	};
	struct tool_run r;

	(void)state;
	tool_expect(&r, 1, (const char *const[]){ "types", clash, NULL });
	assert_has(r.err, "both become MSG_A_B");
	assert_string_equal(r.out, "");
	tool_free(&r);
	tool_expect(&r, 1, (const char *const[]){ "types", none, NULL });
	assert_has(r.err, "declares no types");
	tool_free(&r);
	tool_expect(&r, 1, (const char *const[]){ "types", bad, NULL });
	assert_has(r.err, "b.yaml:");
	tool_free(&r);
	tool_expect_usage_errors(usage, sizeof(usage) / sizeof(usage[0]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(types_header_lists_ids_sizes_and_the_array),
		cmocka_unit_test(types_output_file_is_written_whole),
		cmocka_unit_test(types_refuses_what_it_cannot_turn_into_a_header),
	};
	char cmd[64];
	int ret;

	tool_bin = getenv("SHOAL_BIN");
	if (tool_bin == NULL || tool_bin[0] == '\0') {
		/* Visible skip: meson passes SHOAL_BIN; a hand run must too. */
		fprintf(stderr, "tool_types_test: SHOAL_BIN is not set; skipping\n");
		return 77;
	}
	if (mkdtemp(dir) == NULL)
		return 1;
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "tool_types_test: could not remove %s\n", dir);
	return ret;
}
