/* SPDX-License-Identifier: MIT */
/*
 * Filters and the routing table, single process. Every matching case runs in
 * every table mode (indexed, and the flat and chain baselines) and is
 * checked against a naive reference written here, independent of runtime/route/. Payloads are
 * copied into heap buffers of exactly their length, so that a sanitizer
 * catches any read past them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <shoal/filter.h>

#include "runtime/route/route.h"
#include "tests/testutil.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const int modes[] = { SHOAL__ROUTE_INDEXED, SHOAL__ROUTE_FLAT, SHOAL__ROUTE_CHAIN };
static const char *const mode_names[] = { "indexed", "flat", "chain" };

static struct shoal_filter filt(uint32_t type, uint8_t op, uint32_t offset, uint8_t width,
				uint64_t a, uint64_t b)
{
	return (struct shoal_filter){
		.types = { type },
		.n_types = 1,
		.key = { .offset = offset, .width = width, .op = op, .a = a, .b = b },
	};
}

static void put_le(unsigned char *buf, uint32_t off, uint32_t width, uint64_t v)
{
	for (uint32_t k = 0; k < width; k++)
		buf[off + k] = (unsigned char)(v >> (8 * k));
}

static struct shoal__route_table *build_ok(const struct shoal_filter *f, uint32_t n, int mode)
{
	struct shoal__route_table *t = NULL;
	struct shoal_err err = {{0}};
	int ret = shoal__route_build(&t, f, n, mode, &err);

	if (ret != 0)
		fail_msg("build of %u filters failed: %d (%s)", n, ret, err.msg);
	assert_non_null(t);
	return t;
}

/*
 * Match with the payload in a heap buffer of exactly `len` bytes; where the
 * type has a quick descriptor, the quick match must find the same filters
 * (all of them: it has no bound but the table's).
 */
static uint32_t match_exact(const struct shoal__route_table *t, uint32_t type,
			    const unsigned char *payload, uint32_t len, uint32_t *out, uint32_t max)
{
	const struct shoal__route_quick *q = shoal__route_quick(t, type);
	unsigned char *copy = malloc(len ? len : 1);
	const uint32_t *res;
	uint32_t n, nq;

	assert_non_null(copy);
	if (len)
		memcpy(copy, payload, len);
	n = shoal__route_match(t, type, copy, len, out, max);
	if (q != NULL && q->kind != SHOAL__ROUTE_QUICK_NONE) {
		nq = shoal__route_quick_match(q, copy, len, &res);
		assert_true(nq <= shoal__route_max_matches(t));
		assert_int_equal(nq < max ? nq : max, n);
		if (n > 0)
			assert_memory_equal(res, out, n * sizeof(*out));
		/* The dispatcher's one-filter form agrees: that one, or none. */
		assert_int_equal(shoal__route_quick_one(q, copy, len),
				 nq == 1 ? res[0] : SHOAL__ROUTE_NOT_ONE);
	} else if (q != NULL) {
		assert_int_equal(shoal__route_quick_one(q, copy, len), SHOAL__ROUTE_NOT_ONE);
	}
	free(copy);
	return n;
}

/* The reference: every filter, one by one, straight from the header's words. */
static uint32_t ref_match(const struct shoal_filter *fs, uint32_t n, uint32_t type,
			  const unsigned char *p, uint32_t len, uint32_t *out)
{
	uint32_t m = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct shoal_filter *f = &fs[i];
		const struct shoal_key *k = &f->key;
		bool listed = false, pass = false;
		uint64_t key = 0;

		for (uint32_t j = 0; j < f->n_types; j++)
			listed = listed || f->types[j] == type;
		if (!listed)
			continue;
		if (k->width != 0) {
			if ((uint64_t)k->offset + k->width > len)
				continue;
			for (uint32_t b = 0; b < k->width; b++)
				key |= (uint64_t)p[k->offset + b] << (8 * b);
		}
		switch (k->op) {
		case SHOAL_KEY_ANY:
			pass = true;
			break;
		case SHOAL_KEY_EQ:
			pass = key == k->a;
			break;
		case SHOAL_KEY_IN:
			for (uint32_t j = 0; j < k->n_set; j++)
				pass = pass || key == k->set[j];
			break;
		case SHOAL_KEY_RANGE:
			pass = key >= k->a && key <= k->b;
			break;
		case SHOAL_KEY_MOD:
			pass = key % k->a == k->b;
			break;
		}
		if (pass)
			out[m++] = i;
	}
	return m;
}

/* Match in a table and compare with the reference; returns the match count. */
static uint32_t check_message(const struct shoal__route_table *t, const struct shoal_filter *fs,
			      uint32_t n, uint32_t type, const unsigned char *p, uint32_t len)
{
	uint32_t max = shoal__route_max_matches(t);
	uint32_t *want = calloc((size_t)n + 1, sizeof(*want));
	uint32_t *got = calloc((size_t)max + 1, sizeof(*got));
	uint32_t nw, ng;

	assert_non_null(want);
	assert_non_null(got);
	nw = ref_match(fs, n, type, p, len, want);
	ng = match_exact(t, type, p, len, got, max);
	if (ng != nw || memcmp(got, want, nw * sizeof(*got)) != 0)
		fail_msg("type %u, len %u: %u matches, the reference has %u (first %d vs %d)",
			 type, len, ng, nw, ng ? (int)got[0] : -1, nw ? (int)want[0] : -1);
	free(want);
	free(got);
	return nw;
}

/* shoal_filter_validate() */

struct validate_case {
	const char *name;
	struct shoal_filter f;
	const char *reason;   /* NULL: valid */
};

#define T1 .types = { 1 }, .n_types = 1

static const struct validate_case validate_cases[] = {
	{ "any_without_key", { T1 }, NULL },
	{ "eight_types", { .types = { 1, 2, 3, 4, 5, 6, 7, 8 }, .n_types = 8 }, NULL },
	{ "same_type_twice", { .types = { 4, 4 }, .n_types = 2 }, NULL },
	{ "any_with_key", { T1, .key = { .offset = 9, .width = 2 } }, NULL },
	{ "eq_wide_key", { T1, .key = { .width = 8, .op = SHOAL_KEY_EQ, .a = ~0ull } }, NULL },
	{ "unicast_with_key", { T1, .key = { .width = 4 }, .mode = SHOAL_ROUTE_UNICAST },
	  NULL },
	{ "broadcast", { T1, .mode = SHOAL_ROUTE_BROADCAST }, NULL },
	{ "discard", { T1, .mode = SHOAL_ROUTE_DISCARD }, NULL },
	{ "mod_largest_remainder", { T1, .key = { .width = 1, .op = SHOAL_KEY_MOD, .a = 5,
						  .b = 4 } }, NULL },
	{ "range_of_one", { T1, .key = { .width = 1, .op = SHOAL_KEY_RANGE, .a = 3, .b = 3 } },
	  NULL },
	{ "in_full_set", { T1, .key = { .width = 1, .op = SHOAL_KEY_IN, .n_set = 8 } }, NULL },
	{ "no_types", { .n_types = 0 }, "n_types is 0, expected 1 to 8" },
	{ "nine_types", { .types = { 1 }, .n_types = 9 }, "n_types is 9, expected 1 to 8" },
	{ "type_zero", { .types = { 1, 0 }, .n_types = 2 }, "types[1] is 0" },
	{ "unknown_op", { T1, .key = { .width = 1, .op = 5 } }, "unknown key op 5" },
	{ "multicast_mode", { T1, .mode = SHOAL_ROUTE_MULTICAST },
	  "route mode MULTICAST is for in-group outcomes" },
	{ "unknown_mode", { T1, .mode = 5 }, "unknown route mode 5" },
	{ "width_three", { T1, .key = { .width = 3 } }, "key width 3 is not 0, 1, 2, 4 or 8" },
	{ "width_sixteen", { T1, .key = { .width = 16 } }, "key width 16" },
	{ "eq_without_key", { T1, .key = { .op = SHOAL_KEY_EQ } },
	  "key op EQ needs a key, but the key width is 0" },
	{ "mod_without_key", { T1, .key = { .op = SHOAL_KEY_MOD, .a = 2 } }, "key op MOD needs" },
	{ "unicast_without_key", { T1, .mode = SHOAL_ROUTE_UNICAST },
	  "route mode UNICAST needs a key" },
	{ "mod_by_zero", { T1, .key = { .width = 4, .op = SHOAL_KEY_MOD } },
	  "MOD modulus is 0" },
	{ "mod_remainder_too_big", { T1, .key = { .width = 4, .op = SHOAL_KEY_MOD, .a = 5,
						  .b = 5 } },
	  "MOD remainder 5 is not below the modulus 5" },
	{ "range_empty", { T1, .key = { .width = 4, .op = SHOAL_KEY_RANGE, .a = 9, .b = 3 } },
	  "RANGE [9, 3] is empty" },
	{ "in_empty_set", { T1, .key = { .width = 4, .op = SHOAL_KEY_IN } },
	  "IN set has 0 values, expected 1 to 8" },
	{ "in_nine_values", { T1, .key = { .width = 4, .op = SHOAL_KEY_IN, .n_set = 9 } },
	  "IN set has 9 values" },
};

static void filter_validate_accepts_and_rejects_with_reason(void **state)
{
	struct shoal_err err;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(validate_cases); i++) {
		const struct validate_case *c = &validate_cases[i];
		int ret;

		strcpy(err.msg, "untouched");
		ret = shoal_filter_validate(&c->f, &err);
		if (c->reason == NULL) {
			if (ret != 0)
				fail_msg("%s: rejected: %s", c->name, err.msg);
			assert_string_equal(err.msg, "untouched");
		} else {
			if (ret != -EINVAL)
				fail_msg("%s: returned %d, expected -EINVAL", c->name, ret);
			if (strstr(err.msg, c->reason) == NULL)
				fail_msg("%s: reason \"%s\" lacks \"%s\"", c->name, err.msg,
					 c->reason);
		}
		/* A NULL err is always allowed. */
		assert_int_equal(shoal_filter_validate(&c->f, NULL), ret);
	}
	assert_int_equal(shoal_filter_validate(NULL, &err), -EINVAL);
	assert_string_equal(err.msg, "filter is NULL");
}

/* shoal_filter_key() */

static void filter_key_reads_little_endian_widths(void **state)
{
	static const struct {
		uint32_t offset;
		uint8_t width;
		uint32_t len;
		int ret;
		uint64_t key;
	} cases[] = {
		{ 0, 1, 16, 0, 0x01 },
		{ 3, 2, 16, 0, 0x0504 },
		{ 4, 4, 16, 0, 0x08070605 },
		{ 8, 8, 16, 0, 0x100f0e0d0c0b0a09ull },
		{ 0, 8, 8, 0, 0x0807060504030201ull },
		{ 15, 1, 16, 0, 0x10 },
		{ 15, 2, 16, -ERANGE, 0 },
		{ 9, 8, 16, -ERANGE, 0 },
		{ 0, 8, 7, -ERANGE, 0 },
		{ 0, 1, 0, -ERANGE, 0 },
		{ 16, 1, 16, -ERANGE, 0 },
		{ UINT32_MAX, 1, 16, -ERANGE, 0 },
		{ UINT32_MAX - 1, 2, 16, -ERANGE, 0 },
		{ UINT32_MAX - 3, 8, 16, -ERANGE, 0 },
		{ 0, 0, 0, 0, 0 },          /* no key: reads nothing */
		{ 1000, 0, 16, 0, 0 },
		{ 0, 3, 16, -EINVAL, 0 },   /* not a valid width */
	};
	unsigned char bytes[16];

	(void)state;
	for (int i = 0; i < 16; i++)
		bytes[i] = (unsigned char)(i + 1);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct shoal_filter f = filt(1, SHOAL_KEY_ANY, cases[i].offset, cases[i].width, 0, 0);
		unsigned char *p = malloc(cases[i].len ? cases[i].len : 1);
		uint64_t key = 0xdeadbeef;
		int ret;

		assert_non_null(p);
		memcpy(p, bytes, cases[i].len);
		ret = shoal_filter_key(&f, p, cases[i].len, &key);
		if (ret != cases[i].ret || (ret == 0 && key != cases[i].key))
			fail_msg("case %zu (offset %u, width %u, len %u): ret %d key %#llx", i,
				 cases[i].offset, cases[i].width, cases[i].len, ret,
				 (unsigned long long)key);
		free(p);
	}
}

/* shoal__route_build() */

static void route_build_rejects_invalid_filter_with_its_index(void **state)
{
	struct shoal_filter f[5];
	struct shoal__route_table *t = (struct shoal__route_table *)&f[0];   /* a sentinel */
	struct shoal_err err = {{0}};

	(void)state;
	for (int i = 0; i < 5; i++)
		f[i] = filt(1, SHOAL_KEY_MOD, 0, 4, 3, (uint64_t)i % 3);
	f[3].key.a = 0;
	assert_int_equal(shoal__route_build(&t, f, 5, SHOAL__ROUTE_INDEXED, &err), -EINVAL);
	assert_string_equal(err.msg, "filter #3: MOD modulus is 0");
	assert_ptr_equal(t, &f[0]);   /* *out not written */
	f[3].key.a = 3;
	f[4].n_types = 0;
	assert_int_equal(shoal__route_build(&t, f, 5, SHOAL__ROUTE_FLAT, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "filter #4: n_types is 0"));
	assert_int_equal(shoal__route_build(&t, f, 4, 7, &err), -EINVAL);
	assert_string_equal(err.msg, "unknown route table mode 7");
	/* Refused before any filter is read. */
	assert_int_equal(shoal__route_build(&t, f, SHOAL__ROUTE_MAX_FILTERS + 1,
					    SHOAL__ROUTE_INDEXED, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "more than the limit"));
	assert_ptr_equal(t, &f[0]);
	assert_int_equal(shoal__route_build(&t, f, 4, SHOAL__ROUTE_INDEXED, NULL), 0);
	assert_int_equal(shoal__route_count(t), 4);
	shoal__route_free(t);
	shoal__route_free(NULL);
}

static void route_filter_copy_keeps_every_field(void **state)
{
	struct shoal_filter f[4];

	(void)state;
	for (uint8_t m = 0; m < 4; m++) {
		f[m] = filt(10 + m, SHOAL_KEY_IN, 2, 2, 0, 0);
		f[m].n_types = 2;
		f[m].types[1] = 99;
		f[m].key.n_set = 3;
		f[m].key.set[0] = m;
		f[m].key.set[2] = 7;
		f[m].mode = m;   /* GROUP, UNICAST, BROADCAST, DISCARD */
		f[m].group = (uint16_t)(1000 + m);
		f[m].id = 0xabc00 + m;
	}
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, 4, modes[md]);
		struct shoal_filter saved = f[2];

		f[2].group = 1;   /* the table holds a copy */
		for (uint32_t i = 0; i < 4; i++) {
			const struct shoal_filter *c = shoal__route_filter(t, i);

			assert_non_null(c);
			assert_memory_equal(c, i == 2 ? &saved : &f[i], sizeof(*c));
			assert_int_equal(c->mode, i);
		}
		assert_null(shoal__route_filter(t, 4));
		assert_null(shoal__route_filter(t, UINT32_MAX));
		f[2] = saved;
		shoal__route_free(t);
	}
}

/* One op, one table mode: the table cases below. */

struct op_case {
	const char *name;
	struct shoal_key key;
	struct {
		uint64_t key;
		uint32_t len;
		bool match;
	} probes[6];
	uint32_t n_probes;
	int mode;
};

#define K4(...) { .offset = 2, .width = 4, __VA_ARGS__ }

static const struct op_case op_cases[] = {
	{ "any_without_key", { .op = SHOAL_KEY_ANY },
	  { { 0, 0, true }, { 5, 3, true }, { 5, 100, true } }, 3, 0 },
	{ "any_with_key", K4(.op = SHOAL_KEY_ANY),
	  { { 7, 5, false }, { 7, 6, true }, { 0, 0, false } }, 3, 0 },
	{ "eq", K4(.op = SHOAL_KEY_EQ, .a = 42),
	  { { 42, 6, true }, { 43, 6, false }, { 42, 5, false }, { 42 + (1ull << 32), 6, true } },
	  4, 0 },
	{ "eq_one_byte", { .offset = 0, .width = 1, .op = SHOAL_KEY_EQ, .a = 255 },
	  { { 255, 1, true }, { 254, 1, false }, { 255, 0, false } }, 3, 0 },
	{ "eq_two_bytes", { .offset = 1, .width = 2, .op = SHOAL_KEY_EQ, .a = 0xbeef },
	  { { 0xbeef, 3, true }, { 0xbeee, 3, false }, { 0xbeef, 2, false } }, 3, 0 },
	{ "eq_eight_bytes", { .offset = 0, .width = 8, .op = SHOAL_KEY_EQ,
			      .a = 0x0102030405060708ull },
	  { { 0x0102030405060708ull, 8, true }, { 0x0102030505060708ull, 8, false },
	    { 0x0102030405060708ull, 7, false } }, 3, 0 },
	{ "in", K4(.op = SHOAL_KEY_IN, .n_set = 4, .set = { 3, 7, 7, 1000 }),
	  { { 3, 6, true }, { 7, 6, true }, { 1000, 6, true }, { 4, 6, false }, { 0, 6, false },
	    { 3, 4, false } }, 6, 0 },
	{ "range", K4(.op = SHOAL_KEY_RANGE, .a = 10, .b = 20),
	  { { 9, 6, false }, { 10, 6, true }, { 15, 6, true }, { 20, 6, true }, { 21, 6, false },
	    { 15, 5, false } }, 6, 0 },
	{ "mod", K4(.op = SHOAL_KEY_MOD, .a = 7, .b = 3),
	  { { 3, 6, true }, { 10, 6, true }, { 4, 6, false }, { 0, 6, false }, { 3, 2, false } },
	  5, 0 },
	{ "mod_one", K4(.op = SHOAL_KEY_MOD, .a = 1, .b = 0),
	  { { 0, 6, true }, { 12345, 6, true }, { 1, 5, false } }, 3, 0 },
	{ "mod_sparse", K4(.op = SHOAL_KEY_MOD, .a = 70000, .b = 69999),
	  { { 69999, 6, true }, { 139999, 6, true }, { 1, 6, false } }, 3, 0 },
	{ "mod_huge", { .offset = 0, .width = 8, .op = SHOAL_KEY_MOD, .a = 1ull << 40, .b = 5 },
	  { { 5, 8, true }, { (1ull << 40) + 5, 8, true }, { 6, 8, false } }, 3, 0 },
};

/*
 * Each probe in two layouts: the filter alone (tested one by one), and twice
 * in a row (a partition of two in the indexed mode). Filter 2 lists another
 * type and never matches.
 */
static void route_op_matches_its_keys(void **state)
{
	const struct op_case *c = *state;

	for (uint32_t copies = 1; copies <= 2; copies++) {
		struct shoal_filter f[3];
		struct shoal__route_table *t;

		for (uint32_t i = 0; i < copies; i++) {
			f[i] = filt(1, c->key.op, 0, 0, 0, 0);
			f[i].key = c->key;
		}
		f[copies] = filt(2, SHOAL_KEY_ANY, 0, 0, 0, 0);
		t = build_ok(f, copies + 1, c->mode);
		assert_int_equal(shoal__route_type_filters(t, 1), copies);
		for (uint32_t p = 0; p < c->n_probes; p++) {
			unsigned char buf[128] = {0};
			uint32_t out[4] = { 77, 77, 77, 77 };
			uint32_t want = c->probes[p].match ? copies : 0, n;

			put_le(buf, c->key.offset, c->key.width, c->probes[p].key);
			n = match_exact(t, 1, buf, c->probes[p].len, out, 4);
			if (n != want)
				fail_msg("%s x%u, probe %u (key %llu, len %u): %u matches, want %u",
					 c->name, copies, p, (unsigned long long)c->probes[p].key,
					 c->probes[p].len, n, want);
			for (uint32_t i = 0; i < n; i++)
				assert_int_equal(out[i], i);
			assert_int_equal(out[n], 77);   /* nothing written past the count */
			assert_int_equal(check_message(t, f, copies + 1, 1, buf, c->probes[p].len),
					 want);
		}
		shoal__route_free(t);
	}
}

/* Several types per filter */

static void route_filter_listing_several_types_matches_each_once(void **state)
{
	struct shoal_filter f[4] = {
		{ .types = { 5, 9, 5 }, .n_types = 3 },
		{ .types = { 9 }, .n_types = 1 },
		{ .types = { 7, 5 }, .n_types = 2 },
		{ .types = { 9, 9, 9, 5, 9 }, .n_types = 5,
		  .key = { .width = 1, .op = SHOAL_KEY_EQ, .a = 1 } },
	};
	static const struct {
		uint32_t type;
		uint32_t listed;
		uint32_t n;
		uint32_t want[4];
	} cases[] = {
		{ 5, 3, 3, { 0, 2, 3 } },
		{ 9, 3, 3, { 0, 1, 3 } },
		{ 7, 1, 1, { 2 } },
		{ 6, 0, 0, { 0 } },
	};
	unsigned char one = 1;

	(void)state;
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, 4, modes[md]);

		for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
			uint32_t out[8];
			uint32_t n = match_exact(t, cases[i].type, &one, 1, out, 8);

			assert_int_equal(shoal__route_type_filters(t, cases[i].type),
					 cases[i].listed);
			assert_int_equal(n, cases[i].n);
			assert_memory_equal(out, cases[i].want, n * sizeof(*out));
		}
		shoal__route_free(t);
	}
}

/* Ascending order across partitions */

static void route_overlapping_matches_come_in_ascending_order(void **state)
{
	struct shoal_filter f[16];
	static const uint32_t want5[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15 };
	static const uint32_t want6[] = { 0, 3, 6, 7, 10, 11, 12, 13, 15 };

	(void)state;
	f[0] = filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0);
	f[1] = filt(1, SHOAL_KEY_EQ, 0, 4, 5, 0);
	f[2] = filt(1, SHOAL_KEY_MOD, 0, 4, 5, 0);
	f[3] = filt(1, SHOAL_KEY_RANGE, 0, 4, 0, 10);
	f[4] = filt(1, SHOAL_KEY_EQ, 0, 4, 5, 0);
	f[5] = filt(1, SHOAL_KEY_MOD, 0, 4, 5, 0);
	f[6] = filt(1, SHOAL_KEY_IN, 0, 4, 0, 0);
	f[6].key.n_set = 2;
	f[6].key.set[0] = 5;
	f[6].key.set[1] = 6;
	f[7] = filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0);
	f[8] = filt(1, SHOAL_KEY_MOD, 0, 4, 5, 0);
	f[9] = filt(1, SHOAL_KEY_EQ, 0, 4, 5, 0);
	f[10] = f[6];
	f[11] = filt(1, SHOAL_KEY_ANY, 1, 2, 0, 0);   /* another spec */
	f[12] = filt(1, SHOAL_KEY_ANY, 1, 2, 0, 0);
	f[13] = filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0);
	f[14] = filt(2, SHOAL_KEY_ANY, 0, 0, 0, 0);   /* another type */
	f[15] = filt(1, SHOAL_KEY_MOD, 0, 1, 1, 0);
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, 16, modes[md]);
		unsigned char buf[4] = {0};
		uint32_t out[16];
		uint32_t n;

		put_le(buf, 0, 4, 5);
		n = match_exact(t, 1, buf, 4, out, 16);
		assert_int_equal(n, ARRAY_SIZE(want5));
		assert_memory_equal(out, want5, sizeof(want5));
		put_le(buf, 0, 4, 6);
		n = match_exact(t, 1, buf, 4, out, 16);
		assert_int_equal(n, ARRAY_SIZE(want6));
		assert_memory_equal(out, want6, sizeof(want6));
		assert_true(shoal__route_max_matches(t) >= ARRAY_SIZE(want5));
		assert_true(shoal__route_max_matches(t) <= 15);
		shoal__route_free(t);
	}
}

static void route_match_truncates_to_smallest_indices(void **state)
{
	struct shoal_filter f[10];

	(void)state;
	for (int i = 0; i < 10; i++)
		f[i] = i % 2 ? filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0) : filt(1, SHOAL_KEY_RANGE, 0, 1,
									     0, 9);
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, 10, modes[md]);
		unsigned char key = 3;
		uint32_t out[10] = {0};

		assert_int_equal(match_exact(t, 1, &key, 1, out, 3), 3);
		assert_int_equal(out[0], 0);
		assert_int_equal(out[1], 1);
		assert_int_equal(out[2], 2);
		assert_int_equal(out[3], 0);   /* untouched */
		assert_int_equal(match_exact(t, 1, &key, 1, NULL, 0), 0);
		assert_int_equal(match_exact(t, 1, &key, 1, out, 10), 10);
		shoal__route_free(t);
	}
}

/* Types with no route */

static void route_unknown_type_matches_nothing(void **state)
{
	struct shoal_filter f[3] = {
		filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0),
		filt(2, SHOAL_KEY_ANY, 0, 0, 0, 0),
		filt(UINT32_MAX, SHOAL_KEY_ANY, 0, 0, 0, 0),
	};
	static const uint32_t unknown[] = { 0, 3, 4, 0x80000000u, UINT32_MAX - 1 };
	unsigned char b = 0;

	(void)state;
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, 3, modes[md]);
		struct shoal__route_table *empty = build_ok(NULL, 0, modes[md]);
		uint32_t out[4];

		for (size_t i = 0; i < ARRAY_SIZE(unknown); i++) {
			assert_int_equal(match_exact(t, unknown[i], &b, 1, out, 4), 0);
			assert_int_equal(shoal__route_type_filters(t, unknown[i]), 0);
			assert_int_equal(match_exact(empty, unknown[i], &b, 1, out, 4), 0);
		}
		assert_int_equal(match_exact(t, UINT32_MAX, &b, 1, out, 4), 1);
		assert_int_equal(out[0], 2);
		assert_int_equal(shoal__route_count(empty), 0);
		assert_int_equal(shoal__route_max_matches(empty), 0);
		assert_int_equal(shoal__route_type_filters(empty, 1), 0);
		assert_int_equal(match_exact(empty, 1, &b, 1, out, 4), 0);
		shoal__route_free(t);
		shoal__route_free(empty);
	}
}

/* Keys beyond the payload */

/* The shapes the dispatcher matches inline get a quick descriptor, others none. */
static void route_quick_descriptor_for_common_shapes_only(void **state)
{
	struct shoal_filter lone_mod = filt(2, SHOAL_KEY_MOD, 0, 8, 1, 0);
	struct shoal_filter lone_eq = filt(3, SHOAL_KEY_EQ, 0, 8, 5, 0);
	struct shoal_filter keyless[2] = { filt(4, SHOAL_KEY_ANY, 0, 0, 0, 0),
					   filt(4, SHOAL_KEY_ANY, 0, 0, 0, 0) };
	struct shoal_filter all[8];
	uint32_t n = 0;

	(void)state;
	for (uint32_t i = 0; i < 4; i++)
		all[n++] = filt(1, SHOAL_KEY_MOD, 0, 8, 4, i);
	all[n++] = lone_mod;
	all[n++] = lone_eq;
	all[n++] = keyless[0];
	all[n++] = keyless[1];
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(all, n, modes[md]);
		bool indexed = modes[md] == SHOAL__ROUTE_INDEXED;

		assert_null(shoal__route_quick(t, 9));
		assert_int_equal(shoal__route_quick(t, 1)->kind,
				 indexed ? SHOAL__ROUTE_QUICK_TABLE : SHOAL__ROUTE_QUICK_NONE);
		assert_int_equal(shoal__route_quick(t, 2)->kind,
				 indexed ? SHOAL__ROUTE_QUICK_LIST : SHOAL__ROUTE_QUICK_NONE);
		assert_int_equal(shoal__route_quick(t, 3)->kind, SHOAL__ROUTE_QUICK_NONE);
		assert_int_equal(shoal__route_quick(t, 4)->kind,
				 indexed ? SHOAL__ROUTE_QUICK_LIST : SHOAL__ROUTE_QUICK_NONE);
		for (uint64_t key = 0; key < 64; key++) {
			unsigned char buf[8];
			uint32_t out[8];

			put_le(buf, 0, 8, key);
			for (uint32_t type = 1; type <= 4; type++)
				for (uint32_t len = 0; len <= 8; len++)
					(void)match_exact(t, type, buf, len, out, 8);
			assert_int_equal(match_exact(t, 1, buf, 8, out, 8), 1);
			assert_int_equal(out[0], key % 4);
		}
		shoal__route_free(t);
	}
}

static void route_key_past_payload_does_not_match(void **state)
{
	struct shoal_filter f[8] = {
		filt(1, SHOAL_KEY_ANY, UINT32_MAX, 1, 0, 0),
		filt(1, SHOAL_KEY_ANY, UINT32_MAX - 3, 8, 0, 0),
		filt(1, SHOAL_KEY_MOD, UINT32_MAX - 7, 8, 1, 0),
		filt(1, SHOAL_KEY_MOD, UINT32_MAX - 7, 8, 1, 0),
		filt(1, SHOAL_KEY_EQ, 4, 8, 0, 0),
		filt(1, SHOAL_KEY_EQ, 4, 8, 0, 0),
		filt(1, SHOAL_KEY_RANGE, 4, 8, 0, ~0ull),
		filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0),
	};
	unsigned char zero[16] = {0};

	(void)state;
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, 8, modes[md]);
		uint32_t out[8];

		/* len 0 with no payload at all: only the keyless filter matches. */
		assert_int_equal(shoal__route_match(t, 1, NULL, 0, out, 8), 1);
		assert_int_equal(out[0], 7);
		for (uint32_t len = 0; len < 12; len++) {
			assert_int_equal(match_exact(t, 1, zero, len, out, 8), 1);
			assert_int_equal(check_message(t, f, 8, 1, zero, len), 1);
		}
		assert_int_equal(match_exact(t, 1, zero, 12, out, 8), 4);
		assert_int_equal(out[0], 4);
		assert_int_equal(out[3], 7);
		assert_int_equal(check_message(t, f, 8, 1, zero, 16), 4);
		shoal__route_free(t);
	}
}

/* The fanout shape: filter i = key % N == i, each to group i. */

static void route_fanout_matches_exactly_key_mod_n(void **state)
{
	struct shoal_filter f[100];

	(void)state;
	for (uint32_t n = 1; n <= 100; n++) {
		for (uint32_t i = 0; i < n; i++) {
			f[i] = filt(1, SHOAL_KEY_MOD, 4, 4, n, i);
			f[i].group = (uint16_t)i;
		}
		for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
			struct shoal__route_table *t = build_ok(f, n, modes[md]);

			assert_int_equal(shoal__route_type_filters(t, 1), n);
			assert_int_equal(shoal__route_max_matches(t),
					 modes[md] == SHOAL__ROUTE_INDEXED ? 1 : n);
			for (uint32_t key = 0; key < 1000; key += 7) {
				unsigned char buf[8] = { 0xff, 0xff, 0xff, 0xff };
				uint32_t out[100];

				put_le(buf, 4, 4, key);
				assert_int_equal(match_exact(t, 1, buf, 8, out, 100), 1);
				assert_int_equal(out[0], key % n);
				assert_int_equal(shoal__route_filter(t, out[0])->group, key % n);
			}
			shoal__route_free(t);
		}
	}
}

/* EQ and IN with many values on one key */

static void route_eq_with_many_values(void **state)
{
	enum { N_EQ = 5000, N_DUP = 100, N_IN = 50, N = N_EQ + N_DUP + N_IN };
	struct shoal_filter *f = calloc(N, sizeof(*f));

	(void)state;
	assert_non_null(f);
	for (uint32_t i = 0; i < N_EQ; i++)
		f[i] = filt(3, SHOAL_KEY_EQ, 0, 8, (uint64_t)i * 7919 * 1000003, 0);
	for (uint32_t i = 0; i < N_DUP; i++)   /* a second filter on some values */
		f[N_EQ + i] = filt(3, SHOAL_KEY_EQ, 0, 8, (uint64_t)i * 3 * 7919 * 1000003, 0);
	for (uint32_t i = 0; i < N_IN; i++) {
		struct shoal_filter *g = &f[N_EQ + N_DUP + i];

		*g = filt(3, SHOAL_KEY_IN, 0, 8, 0, 0);
		g->key.n_set = 8;
		for (uint32_t j = 0; j < 8; j++)   /* some values shared with EQ filters */
			g->key.set[j] = (uint64_t)(i * 8 + j) * 7919 * 1000003 * (j % 2 ? 1 : 5);
	}
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, N, modes[md]);
		uint32_t hits = 0;

		if (modes[md] == SHOAL__ROUTE_INDEXED)
			assert_true(shoal__route_max_matches(t) <= 4);
		for (uint64_t v = 0; v < 3 * N_EQ; v += 1 + (v % 3)) {
			unsigned char buf[8];

			put_le(buf, 0, 8, v * 7919 * 1000003);
			hits += check_message(t, f, N, 3, buf, 8) > 0;
			put_le(buf, 0, 8, v * 7919 * 1000003 + 1);
			assert_int_equal(check_message(t, f, N, 3, buf, 8), 0);
		}
		assert_true(hits > N_EQ / 3);
		shoal__route_free(t);
	}
	free(f);
}

/* More partitions on one type than the index keeps: the rest is tested one by one. */
static void route_many_partitions_on_one_type_stay_correct(void **state)
{
	enum { SPECS = 40, PER = 3, N = SPECS * PER };
	struct shoal_filter f[N];
	uint64_t s = 42;

	(void)state;
	for (uint32_t sp = 0; sp < SPECS; sp++)
		for (uint32_t j = 0; j < PER; j++)
			f[sp * PER + j] = filt(1, sp % 2 ? SHOAL_KEY_EQ : SHOAL_KEY_MOD, sp, 1,
					       sp % 2 ? j : 3, j);
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, N, modes[md]);

		for (int m = 0; m < 500; m++) {
			unsigned char buf[SPECS];
			uint32_t len = (uint32_t)(test_rand(&s) % (SPECS + 1));

			for (uint32_t i = 0; i < SPECS; i++)
				buf[i] = (unsigned char)(test_rand(&s) % 4);
			check_message(t, f, N, 1, buf, len);
		}
		shoal__route_free(t);
	}
}

/* A 10,000-filter table: several types, each a different shape. */
static void route_chain_baseline_refuses_a_stack_breaking_size(void **state)
{
	uint32_t n = SHOAL__ROUTE_CHAIN_MAX + 1;
	struct shoal_filter *f = calloc(n, sizeof(*f));
	struct shoal__route_table *t = NULL;
	struct shoal_err err = { { 0 } };

	(void)state;
	assert_non_null(f);
	for (uint32_t i = 0; i < n; i++)
		f[i] = filt(1, SHOAL_KEY_ANY, 0, 0, 0, 0);
	assert_int_equal(shoal__route_build(&t, f, n, SHOAL__ROUTE_CHAIN, &err), -EINVAL);
	assert_null(t);   /* not written on failure */
	assert_non_null(strstr(err.msg, "chain"));
	assert_int_equal(shoal__route_build(&t, f, n, SHOAL__ROUTE_INDEXED, &err), 0);
	shoal__route_free(t);
	free(f);
}

static void route_ten_thousand_filters_build_and_match(void **state)
{
	enum { N = 10000 };
	struct shoal_filter *f = calloc(N, sizeof(*f));
	uint64_t s = 7;

	(void)state;
	assert_non_null(f);
	for (uint32_t i = 0; i < N; i++) {
		uint32_t type = 1 + i / 1000, j = i % 1000;

		if (type <= 5)
			f[i] = filt(type, SHOAL_KEY_MOD, 0, 4, 1000, j);
		else if (type <= 7)
			f[i] = filt(type, SHOAL_KEY_EQ, 0, 4, (uint64_t)j * 13, 0);
		else if (type == 8)
			f[i] = filt(type, SHOAL_KEY_RANGE, 0, 4, j * 10, j * 10 + 14);
		else if (type == 9)
			f[i] = filt(type, SHOAL_KEY_MOD, 0, 4, 65536 + j, j);
		else
			f[i] = filt(type, SHOAL_KEY_ANY, 0, j % 2 ? 4 : 0, 0, 0);
		f[i].types[1] = 1000 + i % 7;   /* and a type shared across the shapes */
		f[i].n_types = 2;
	}
	for (size_t md = 0; md < ARRAY_SIZE(modes); md++) {
		struct shoal__route_table *t = build_ok(f, N, modes[md]);
		uint32_t iters = (uint32_t)test_scale(2000);

		assert_int_equal(shoal__route_count(t), N);
		assert_int_equal(shoal__route_type_filters(t, 3), 1000);
		assert_int_equal(shoal__route_type_filters(t, 1000), (N + 6) / 7);
		for (uint32_t m = 0; m < iters; m++) {
			unsigned char buf[4];
			uint32_t type = m % 3 ? 1 + m % 11 : 1000 + m % 8;

			put_le(buf, 0, 4, test_rand(&s) % (m % 2 ? 100000 : 20000));
			check_message(t, f, N, type, buf, 4);
		}
		shoal__route_free(t);
	}
	free(f);
}

/* Matching only reads the table: threads at once see what one thread sees. */

enum { MT_THREADS = 4, MT_MSGS = 512, MT_N = 300 };

struct mt_shared {
	const struct shoal__route_table *t;
	unsigned char payload[MT_MSGS][8];
	uint32_t type[MT_MSGS];
	uint32_t want_n[MT_MSGS];
	uint32_t want[MT_MSGS][4];
};

static void *mt_reader(void *arg)
{
	const struct mt_shared *sh = arg;
	uint32_t rounds = (uint32_t)test_scale(200);
	uintptr_t bad = 0;

	for (uint32_t r = 0; r < rounds; r++) {
		for (uint32_t m = 0; m < MT_MSGS; m++) {
			uint32_t out[4];
			uint32_t n = shoal__route_match(sh->t, sh->type[m], sh->payload[m], 8, out,
							4);

			bad += n != sh->want_n[m] || memcmp(out, sh->want[m], n * sizeof(*out));
		}
	}
	return (void *)bad;
}

static void route_match_from_many_threads_at_once(void **state)
{
	struct mt_shared *sh = calloc(1, sizeof(*sh));
	struct shoal_filter f[MT_N];
	pthread_t th[MT_THREADS];
	uint64_t s = 99;

	(void)state;
	assert_non_null(sh);
	for (uint32_t i = 0; i < MT_N; i++)   /* fanout on type 1, EQ on type 2, RANGE on 3 */
		f[i] = i < 100 ? filt(1, SHOAL_KEY_MOD, 0, 4, 100, i)
		       : i < 200 ? filt(2, SHOAL_KEY_EQ, 0, 4, i - 100, 0)
				 : filt(3, SHOAL_KEY_RANGE, 0, 4, (i - 200) * 10, (i - 200) * 10 + 15);
	sh->t = build_ok(f, MT_N, SHOAL__ROUTE_INDEXED);
	assert_int_equal(shoal__route_max_matches(sh->t), 100);   /* type 3: all linear */
	for (uint32_t m = 0; m < MT_MSGS; m++) {
		uint32_t all[MT_N];

		sh->type[m] = 1 + m % 3;
		put_le(sh->payload[m], 0, 8, test_rand(&s) % 1000);
		sh->want_n[m] = ref_match(f, MT_N, sh->type[m], sh->payload[m], 8, all);
		sh->want_n[m] = sh->want_n[m] < 4 ? sh->want_n[m] : 4;
		memcpy(sh->want[m], all, sh->want_n[m] * sizeof(*all));
	}
	for (int i = 0; i < MT_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, mt_reader, sh), 0);
	for (int i = 0; i < MT_THREADS; i++) {
		void *bad;

		assert_int_equal(pthread_join(th[i], &bad), 0);
		assert_int_equal((uintptr_t)bad, 0);
	}
	shoal__route_free((struct shoal__route_table *)sh->t);
	free(sh);
}

/*
 * Out of memory at some step of a build: -ENOMEM with its reason and nothing
 * built, or a table that works. A child process builds under a cap on its
 * address space, from too small to large enough.
 */
enum { OOM_N = 50000 };
static struct shoal_filter *oom_filters;

/* Also when a sanitized binary runs without the meson setup's environment. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define SANITIZED_BUILD 1
#endif
#endif
#ifndef SANITIZED_BUILD
#define SANITIZED_BUILD 0
#endif

static int build_under_limit(void *arg)
{
	uint64_t extra = *(const uint64_t *)arg, pages = 0;
	struct shoal__route_table *t = (struct shoal__route_table *)&extra;   /* a sentinel */
	struct shoal_err err = {{0}};
	struct rlimit rl;
	unsigned char buf[4] = { 7 };
	uint32_t out[8];
	FILE *statm = fopen("/proc/self/statm", "r");
	int ret;

	CHILD_CHECK(statm != NULL);
	CHILD_CHECK(fscanf(statm, "%llu", (unsigned long long *)&pages) == 1);
	fclose(statm);
	rl.rlim_cur = rl.rlim_max = pages * (uint64_t)sysconf(_SC_PAGESIZE) + extra;
	CHILD_CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
	ret = shoal__route_build(&t, oom_filters, OOM_N, SHOAL__ROUTE_INDEXED, &err);
	if (ret == -ENOMEM) {
		CHILD_CHECK(strstr(err.msg, "out of memory") != NULL);
		CHILD_CHECK(t == (struct shoal__route_table *)&extra);
		return 2;
	}
	CHILD_CHECK(ret == 0);
	CHILD_CHECK(shoal__route_match(t, 3, buf, 4, out, 8) == 1);
	CHILD_CHECK(out[0] == 2 * 1000 + 7);   /* type 3 holds filters 2000 .. 2999 */
	shoal__route_free(t);
	return 0;
}

static void route_build_out_of_memory_builds_nothing(void **state)
{
	int seen[3] = {0};

	(void)state;
	if (SANITIZED_BUILD || test_under_tool())
		skip();   /* sanitizers and valgrind reserve more address space than any cap */
	oom_filters = calloc(OOM_N, sizeof(*oom_filters));
	assert_non_null(oom_filters);
	for (uint32_t i = 0; i < OOM_N; i++) {
		uint32_t type = 1 + i / 1000, j = i % 1000;

		oom_filters[i] = filt(type, type % 2 ? SHOAL_KEY_MOD : SHOAL_KEY_EQ, 0, 4,
				      type % 2 ? 1000 : j, type % 2 ? j : 0);
		oom_filters[i].types[1] = 100 + i % 50;
		oom_filters[i].n_types = 2;
	}
	for (uint64_t extra = 0; extra <= (48u << 20); extra += 1u << 20) {
		int status = test_wait_pid(test_spawn(build_under_limit, &extra, sizeof(extra)),
					   10000);

		if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) == 1)
			fail_msg("child under a cap of +%llu bytes failed (status %d)",
				 (unsigned long long)extra, status);
		seen[WEXITSTATUS(status)]++;
	}
	/* The sweep must cross the line between failing and working. */
	assert_true(seen[2] > 0);
	assert_true(seen[0] > 0);
	free(oom_filters);
}

/* Property: random vectors, indexed == flat == chain == reference. */

#define RP_PAYLOADS 16
#define RP_MAXLEN 40

struct rp_world {
	unsigned char payload[RP_PAYLOADS][RP_MAXLEN];
	uint32_t len[RP_PAYLOADS];
};

static const uint32_t rp_types[] = { 1, 2, 3, 0x80000000u, UINT32_MAX };
static const uint32_t rp_offsets[] = { 0, 1, 3, 8, 20, 33 };
static const uint8_t rp_widths[] = { 1, 2, 4, 8 };
static const uint64_t rp_moduli[] = { 1, 2, 3, 5, 7, 16, 100, 1000, 70000, 1ull << 33 };

/* A key some payload of the world carries at (offset, width), or a small one. */
static uint64_t rp_key(uint64_t *s, const struct rp_world *w, uint32_t offset, uint8_t width)
{
	uint32_t p = (uint32_t)(test_rand(s) % RP_PAYLOADS);
	uint64_t key = 0;

	if (test_rand(s) % 4 == 0 || (uint64_t)offset + width > w->len[p])
		return test_rand(s) % 8;
	for (uint32_t b = 0; b < width; b++)
		key |= (uint64_t)w->payload[p][offset + b] << (8 * b);
	return key;
}

static void rp_filter(uint64_t *s, const struct rp_world *w, struct shoal_filter *f)
{
	struct shoal_key *k = &f->key;
	uint32_t r = (uint32_t)(test_rand(s) % 100);

	memset(f, 0, sizeof(*f));
	f->n_types = 1 + (uint32_t)(test_rand(s) % 3);
	for (uint32_t i = 0; i < f->n_types; i++)
		f->types[i] = rp_types[test_rand(s) % ARRAY_SIZE(rp_types)];
	k->offset = rp_offsets[test_rand(s) % ARRAY_SIZE(rp_offsets)];
	k->width = rp_widths[test_rand(s) % ARRAY_SIZE(rp_widths)];
	f->mode = (uint8_t)(test_rand(s) % 4);
	f->group = (uint16_t)test_rand(s);
	if (r < 15) {
		k->op = SHOAL_KEY_ANY;
		if (r < 8) {
			k->width = 0;
			k->offset = (uint32_t)test_rand(s);   /* ignored without a key */
			if (f->mode == SHOAL_ROUTE_UNICAST)
				f->mode = SHOAL_ROUTE_GROUP;
		}
	} else if (r < 40) {
		k->op = SHOAL_KEY_EQ;
		k->a = rp_key(s, w, k->offset, k->width);
	} else if (r < 55) {
		k->op = SHOAL_KEY_IN;
		k->n_set = (uint16_t)(1 + test_rand(s) % SHOAL_FILTER_MAX_SET);
		for (uint32_t i = 0; i < k->n_set; i++)
			k->set[i] = i && test_rand(s) % 4 == 0 ? k->set[i - 1]
							       : rp_key(s, w, k->offset, k->width);
	} else if (r < 70) {
		uint64_t key = rp_key(s, w, k->offset, k->width), lo = test_rand(s) % 4;

		k->op = SHOAL_KEY_RANGE;
		k->a = key >= lo ? key - lo : 0;
		k->b = k->a + (test_rand(s) % 2 ? test_rand(s) % 8 : test_rand(s) % 100000);
		if (k->b < k->a)
			k->b = UINT64_MAX;
	} else {
		k->op = SHOAL_KEY_MOD;
		k->a = rp_moduli[test_rand(s) % ARRAY_SIZE(rp_moduli)];
		k->b = test_rand(s) % 2 ? rp_key(s, w, k->offset, k->width) % k->a
					: test_rand(s) % k->a;
	}
}

static void route_random_vectors_agree_with_reference(void **state)
{
	uint32_t vectors = (uint32_t)test_scale(3000);
	struct shoal_filter *f = calloc(400, sizeof(*f));
	uint32_t *want = calloc(400, sizeof(*want));
	uint32_t *got[3] = { calloc(400, sizeof(uint32_t)), calloc(400, sizeof(uint32_t)),
			     calloc(400, sizeof(uint32_t)) };
	uint64_t s = 0x5eed5eed;
	uint64_t total_matches = 0;

	(void)state;
	assert_non_null(f);
	assert_non_null(want);
	assert_non_null(got[0]);
	assert_non_null(got[1]);
	assert_non_null(got[2]);
	for (uint32_t v = 0; v < vectors; v++) {
		struct rp_world w;
		struct shoal__route_table *t[3];
		uint32_t n = (uint32_t)(v % 10 == 0 ? test_rand(&s) % 400 : test_rand(&s) % 60);

		for (uint32_t p = 0; p < RP_PAYLOADS; p++) {
			w.len[p] = (uint32_t)(test_rand(&s) % (RP_MAXLEN + 1));
			for (uint32_t b = 0; b < RP_MAXLEN; b++) {
				uint64_t r = test_rand(&s);

				w.payload[p][b] = (unsigned char)(r % 4 ? r % 3 : r >> 8);
			}
		}
		for (uint32_t i = 0; i < n; i++)
			rp_filter(&s, &w, &f[i]);
		for (int md = 0; md < 3; md++)
			t[md] = build_ok(f, n, modes[md]);
		for (uint32_t m = 0; m < 64; m++) {
			uint32_t p = (uint32_t)(test_rand(&s) % RP_PAYLOADS);
			uint32_t type = m % 8 == 7 ? (uint32_t)test_rand(&s)
						   : rp_types[test_rand(&s) % ARRAY_SIZE(rp_types)];
			uint32_t nw = ref_match(f, n, type, w.payload[p], w.len[p], want);
			uint32_t listed = 0;

			for (uint32_t i = 0; i < n; i++) {
				bool l = false;

				for (uint32_t j = 0; j < f[i].n_types; j++)
					l = l || f[i].types[j] == type;
				listed += l;
			}
			for (int md = 0; md < 3; md++) {
				uint32_t max = shoal__route_max_matches(t[md]);
				uint32_t ng = match_exact(t[md], type, w.payload[p], w.len[p], got[md],
							  max);
				uint32_t cut;

				if (ng != nw || memcmp(got[md], want, nw * sizeof(*want)) != 0)
					fail_msg("vector %u (%u filters), message %u (type %u, len "
						 "%u), %s: %u matches, reference %u", v, n, m, type,
						 w.len[p], mode_names[md], ng, nw);
				assert_true(nw <= max);
				assert_int_equal(shoal__route_type_filters(t[md], type), listed);
				/* A short out array gets the smallest indices. */
				cut = nw ? (uint32_t)(test_rand(&s) % nw) : 0;
				assert_int_equal(match_exact(t[md], type, w.payload[p], w.len[p],
							     got[md], cut), cut);
				assert_memory_equal(got[md], want, cut * sizeof(*want));
			}
			total_matches += nw;
		}
		for (int md = 0; md < 3; md++)
			shoal__route_free(t[md]);
	}
	/* The generator must produce matches, or the property says little. */
	assert_true(total_matches > (uint64_t)vectors * 64);
	free(f);
	free(want);
	free(got[0]);
	free(got[1]);
	free(got[2]);
}

int main(void)
{
	const struct CMUnitTest fixed[] = {
		cmocka_unit_test(filter_validate_accepts_and_rejects_with_reason),
		cmocka_unit_test(filter_key_reads_little_endian_widths),
		cmocka_unit_test(route_build_rejects_invalid_filter_with_its_index),
		cmocka_unit_test(route_filter_copy_keeps_every_field),
		cmocka_unit_test(route_filter_listing_several_types_matches_each_once),
		cmocka_unit_test(route_overlapping_matches_come_in_ascending_order),
		cmocka_unit_test(route_match_truncates_to_smallest_indices),
		cmocka_unit_test(route_unknown_type_matches_nothing),
		cmocka_unit_test(route_key_past_payload_does_not_match),
		cmocka_unit_test(route_quick_descriptor_for_common_shapes_only),
		cmocka_unit_test(route_fanout_matches_exactly_key_mod_n),
		cmocka_unit_test(route_eq_with_many_values),
		cmocka_unit_test(route_many_partitions_on_one_type_stay_correct),
		cmocka_unit_test(route_ten_thousand_filters_build_and_match),
		cmocka_unit_test(route_chain_baseline_refuses_a_stack_breaking_size),
		cmocka_unit_test(route_match_from_many_threads_at_once),
		cmocka_unit_test(route_build_out_of_memory_builds_nothing),
		cmocka_unit_test(route_random_vectors_agree_with_reference),
	};
	enum { N_OPS = ARRAY_SIZE(op_cases), N_MODES = ARRAY_SIZE(modes) };
	static struct op_case variants[N_OPS * N_MODES];
	static struct CMUnitTest table[N_OPS * N_MODES];
	static char names[N_OPS * N_MODES][80];
	size_t n = 0;
	int failed;

	for (size_t o = 0; o < N_OPS; o++) {
		for (size_t md = 0; md < N_MODES; md++) {
			variants[n] = op_cases[o];
			variants[n].mode = modes[md];
			snprintf(names[n], sizeof(names[n]), "route_op_matches_its_keys/%s/%s",
				 op_cases[o].name, mode_names[md]);
			table[n] = (struct CMUnitTest){
				.name = names[n],
				.test_func = route_op_matches_its_keys,
				.initial_state = &variants[n],
			};
			n++;
		}
	}
	failed = cmocka_run_group_tests_name("filter", fixed, NULL, NULL);
	failed += _cmocka_run_group_tests("filter_ops", table, n, NULL, NULL);
	return failed ? 1 : 0;
}
