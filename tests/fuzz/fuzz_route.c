/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: filters that arrive from other processes, and the routing
 * table built from them (runtime/route/): validate, build, match.
 *
 * Input layout (every part optional; missing bytes read as zero):
 *
 *   byte 0      flags: bit 0 FOLD maps types, key offsets and key values into
 *               small ranges (so that filters overlap and messages match);
 *               bit 1 RAW also builds the filters exactly as given, before
 *               they are made valid
 *   byte 1      E: number of extra filters derived from the given ones (the
 *               "key % a == i for every i" fan-out shapes that need many
 *               filters, without megabytes of input)
 *   byte 2      n: number of struct shoal_filter that follow (at most 64)
 *   n x struct shoal_filter, raw bytes in host order
 *   the tail    up to 64 messages, each: sel (u8); if sel & 0x80 the type is taken
 *               from filter (sel & 0x3f) at the slot given by the next byte,
 *               else a raw u32 type follows; then len (u8) and len payload
 *               bytes; if sel & 0x40, one more byte k for a truncated match
 *
 * Properties checked for every message, beyond "no crash, no read outside
 * the payload" (each payload sits in a buffer of exactly its length):
 *  - the INDEXED table and the baselines (FLAT, and CHAIN where route.h has
 *    it) return the same filter indices, equal to an independent reference
 *    evaluation of the filters written here;
 *  - the result is strictly ascending and never longer than the table's
 *    shoal__route_max_matches() (documented as an upper bound);
 *  - a match with a smaller `max` returns the prefix of the full result;
 *  - shoal__route_type_filters() counts the filters listing the type;
 *  - shoal_filter_key() reads the reference's key, or says -ERANGE.
 * With RAW: building succeeds iff every filter passes shoal_filter_validate(),
 * a refusal names an invalid filter, an unknown mode is refused, and
 * shoal_filter_key() refuses exactly the widths validation refuses.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <shoal/filter.h>

#include "runtime/route/route.h"
#include "tests/fuzz/fuzz.h"

#define MAX_GIVEN 64u
#define MAX_MESSAGES 64u

enum { FOLD = 1, RAW = 2 };

/* Every table mode; they must all give the same answers. */
static const struct {
	int mode;
	const char *name;
} modes[] = {
	{ SHOAL__ROUTE_INDEXED, "INDEXED" },
	{ SHOAL__ROUTE_FLAT, "FLAT" },
#ifdef SHOAL__ROUTE_CHAIN
	{ SHOAL__ROUTE_CHAIN, "CHAIN" },
#endif
};
#define N_MODES (sizeof(modes) / sizeof(modes[0]))

/* Make a filter valid, keeping as much of the fuzzer's choice as possible. */
static void normalize(struct shoal_filter *f, bool fold)
{
	static const uint8_t widths[] = { 0, 1, 2, 4, 8 };
	struct shoal_key *k = &f->key;

	if (f->n_types == 0 || f->n_types > SHOAL_FILTER_MAX_TYPES)
		f->n_types = 1 + f->n_types % SHOAL_FILTER_MAX_TYPES;
	for (uint32_t i = 0; i < f->n_types; i++) {
		if (fold)
			f->types[i] = 1 + f->types[i] % 8;
		if (f->types[i] == 0)
			f->types[i] = 1;
	}
	k->op %= SHOAL_KEY_MOD + 1;
	f->mode %= SHOAL_ROUTE_DISCARD + 1;
	f->reserved = 0;
	if (k->width != 0 && k->width != 1 && k->width != 2 && k->width != 4 && k->width != 8)
		k->width = widths[k->width % 5];
	if (k->width == 0 && (k->op != SHOAL_KEY_ANY || f->mode == SHOAL_ROUTE_UNICAST))
		k->width = 1;
	if (fold) {
		k->offset %= 24;
		k->a %= 16;
		k->b %= 16;
		for (int i = 0; i < SHOAL_FILTER_MAX_SET; i++)
			k->set[i] %= 16;
	}
	switch (k->op) {
	case SHOAL_KEY_MOD:
		if (k->a == 0)
			k->a = 1;
		k->b %= k->a;
		break;
	case SHOAL_KEY_RANGE:
		if (k->a > k->b) {
			uint64_t x = k->a;

			k->a = k->b;
			k->b = x;
		}
		break;
	case SHOAL_KEY_IN:
		if (k->n_set == 0 || k->n_set > SHOAL_FILTER_MAX_SET)
			k->n_set = 1 + k->n_set % SHOAL_FILTER_MAX_SET;
		break;
	default:
		break;
	}
}

/* Variation j of a valid filter: same shape, another value or residue. */
static void vary(struct shoal_filter *f, uint32_t j)
{
	struct shoal_key *k = &f->key;

	switch (k->op) {
	case SHOAL_KEY_MOD:
		k->b = (k->b + j) % k->a;
		break;
	case SHOAL_KEY_EQ:
		k->a += j;
		break;
	case SHOAL_KEY_IN:
		k->set[j % k->n_set] += j;
		break;
	case SHOAL_KEY_RANGE:
		if (k->b + j >= k->b) {
			k->a += j;
			k->b += j;
		}
		break;
	default:
		if (k->width != 0)
			k->offset += j % 4;
		break;
	}
	f->group = (uint16_t)(f->group + j);
}

/* The reference: the documented semantics, evaluated the slow obvious way. */
static bool ref_key(const struct shoal_key *k, const uint8_t *p, uint32_t len, uint64_t *key)
{
	*key = 0;
	if ((uint64_t)k->offset + k->width > len)
		return k->width == 0;
	for (uint32_t i = 0; i < k->width; i++)
		*key |= (uint64_t)p[k->offset + i] << (8 * i);
	return true;
}

static bool ref_pass(const struct shoal_filter *f, uint32_t type, const uint8_t *p, uint32_t len)
{
	const struct shoal_key *k = &f->key;
	bool listed = false;
	uint64_t key;

	for (uint32_t i = 0; i < f->n_types; i++)
		listed = listed || f->types[i] == type;
	if (!listed || !ref_key(k, p, len, &key))
		return false;
	switch (k->op) {
	case SHOAL_KEY_ANY:
		return true;
	case SHOAL_KEY_EQ:
		return key == k->a;
	case SHOAL_KEY_IN:
		for (uint32_t i = 0; i < k->n_set; i++)
			if (k->set[i] == key)
				return true;
		return false;
	case SHOAL_KEY_RANGE:
		return k->a <= key && key <= k->b;
	default:
		return key % k->a == k->b;
	}
}

static bool terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

static uint32_t listing(const struct shoal_filter *fs, uint32_t n, uint32_t type)
{
	uint32_t c = 0;

	for (uint32_t i = 0; i < n; i++) {
		bool listed = false;

		for (uint32_t j = 0; j < fs[i].n_types; j++)
			listed = listed || fs[i].types[j] == type;
		c += listed;
	}
	return c;
}

static void check_raw(const struct shoal_filter *fs, uint32_t n)
{
	static const uint8_t payload[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct shoal__route_table *t = NULL;
	struct shoal_err err;
	bool all_valid = true;

	for (uint32_t i = 0; i < n; i++) {
		uint8_t w = fs[i].key.width;
		bool width_ok = w == 0 || w == 1 || w == 2 || w == 4 || w == 8;
		uint64_t key;
		int v = shoal_filter_validate(&fs[i], &err);

		FUZZ_CHECK(v == 0 || v == -EINVAL);
		if (v < 0)
			FUZZ_CHECK(terminated(err.msg, sizeof(err.msg)) && err.msg[0] != '\0');
		all_valid = all_valid && v == 0;
		/* The key of an unvalidated filter: never read with a bad width. */
		v = shoal_filter_key(&fs[i], payload, sizeof(payload), &key);
		FUZZ_CHECK(width_ok ? (v == 0 || v == -ERANGE) : v == -EINVAL);
	}
	FUZZ_CHECK(shoal__route_build(&t, fs, n, -1, &err) == -EINVAL && t == NULL);
	FUZZ_CHECK(shoal__route_build(&t, fs, n, 0x7fff, &err) == -EINVAL && t == NULL);
	for (size_t m = 0; m < N_MODES; m++) {
		unsigned bad;
		int ret;

		t = NULL;
		ret = shoal__route_build(&t, fs, n, modes[m].mode, &err);

		if (all_valid) {
			FUZZ_CHECK(ret == 0 && t != NULL);
			shoal__route_free(t);
			continue;
		}
		FUZZ_CHECK(ret == -EINVAL && t == NULL);
		FUZZ_CHECK(sscanf(err.msg, "filter #%u:", &bad) == 1);
		FUZZ_CHECK(bad < n && shoal_filter_validate(&fs[bad], NULL) == -EINVAL);
	}
}

static void check_message(struct shoal__route_table *const tabs[N_MODES],
			  const struct shoal_filter *fs,
			  uint32_t n, uint32_t type, const uint8_t *payload, uint32_t len,
			  int trunc, uint32_t *ref, uint32_t *got)
{
	uint32_t nref = 0, listed = listing(fs, n, type);

	for (uint32_t i = 0; i < n; i++) {
		uint64_t want, got_key = 0x5a5a;
		bool readable = ref_key(&fs[i].key, payload, len, &want);
		int ret = shoal_filter_key(&fs[i], payload, len, &got_key);

		FUZZ_CHECK(ret == (readable ? 0 : -ERANGE));
		FUZZ_CHECK(!readable || got_key == want);
		if (ref_pass(&fs[i], type, payload, len))
			ref[nref++] = i;
	}
	for (size_t m = 0; m < N_MODES; m++) {
		uint32_t cnt = shoal__route_match(tabs[m], type, payload, len, got, n + 1);

		if (cnt != nref || memcmp(got, ref, nref * sizeof(*ref)) != 0) {
			fprintf(stderr, "%s table: type %u, len %u: %u matches, the reference "
				"finds %u\n", modes[m].name, type, len, cnt, nref);
			for (uint32_t i = 0; i < cnt && i < 16; i++)
				fprintf(stderr, "  got[%u] = %u\n", i, got[i]);
			for (uint32_t i = 0; i < nref && i < 16; i++)
				fprintf(stderr, "  ref[%u] = %u\n", i, ref[i]);
		}
		FUZZ_CHECK(cnt == nref);
		FUZZ_CHECK(memcmp(got, ref, nref * sizeof(*ref)) == 0);
		FUZZ_CHECK(cnt <= shoal__route_max_matches(tabs[m]));
		FUZZ_CHECK(shoal__route_type_filters(tabs[m], type) == listed);
		FUZZ_CHECK(shoal__route_match(tabs[m], type, payload, len, got, 0) == 0);
		if (trunc >= 0 && nref > 0) {
			uint32_t max = 1 + (uint32_t)trunc % nref;

			cnt = shoal__route_match(tabs[m], type, payload, len, got, max);
			FUZZ_CHECK(cnt == max);
			FUZZ_CHECK(memcmp(got, ref, max * sizeof(*ref)) == 0);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct shoal__route_table *tabs[N_MODES];
	struct shoal_filter *fs;
	uint32_t flags, extra, given, n, *ref, *got;
	struct shoal_err err;

	flags = (uint32_t)fuzz_take(&in, 1);
	extra = (uint32_t)fuzz_take(&in, 1);
	given = (uint32_t)fuzz_take(&in, 1);
	if (given > MAX_GIVEN)
		given = MAX_GIVEN;
	if (given > in.left / sizeof(struct shoal_filter))
		given = (uint32_t)(in.left / sizeof(struct shoal_filter));
	if (given == 0)
		extra = 0;
	n = given + extra;
	/* A filter array of exactly n, so that ASan sees any read past it. */
	fs = malloc((n ? n : 1) * sizeof(*fs));
	ref = malloc((n + 1) * sizeof(*ref));
	got = malloc((n + 1) * sizeof(*got));
	FUZZ_CHECK(fs != NULL && ref != NULL && got != NULL);
	if (given)
		memcpy(fs, in.p, given * sizeof(*fs));
	in.p += given * sizeof(*fs);
	in.left -= given * sizeof(*fs);

	if (flags & RAW)
		check_raw(fs, given);
	for (uint32_t i = 0; i < given; i++)
		normalize(&fs[i], flags & FOLD);
	for (uint32_t e = 0; e < extra; e++) {
		fs[given + e] = fs[e % given];
		vary(&fs[given + e], e / given + 1);
		normalize(&fs[given + e], flags & FOLD);
	}
	for (uint32_t i = 0; i < n; i++)
		FUZZ_CHECK(shoal_filter_validate(&fs[i], NULL) == 0);

	for (size_t m = 0; m < N_MODES; m++) {
		tabs[m] = NULL;
		FUZZ_CHECK(shoal__route_build(&tabs[m], n ? fs : NULL, n, modes[m].mode, &err) == 0);
		FUZZ_CHECK(shoal__route_count(tabs[m]) == n);
		FUZZ_CHECK(shoal__route_filter(tabs[m], n) == NULL);
		for (uint32_t i = 0; i < n; i++)
			FUZZ_CHECK(memcmp(shoal__route_filter(tabs[m], i), &fs[i], sizeof(fs[i])) == 0);
		FUZZ_CHECK((shoal__route_max_matches(tabs[m]) == 0) == (n == 0));
		FUZZ_CHECK(shoal__route_max_matches(tabs[m]) <= n);
	}
	/* The indexed bound is documented as the tighter one. */
	for (size_t m = 1; m < N_MODES; m++)
		FUZZ_CHECK(shoal__route_max_matches(tabs[0]) <= shoal__route_max_matches(tabs[m]));

	/* Type 0 names no message type: nothing matches it. */
	check_message(tabs, fs, n, 0, NULL, 0, -1, ref, got);
	for (uint32_t msgs = 0; msgs < MAX_MESSAGES && in.left > 0; msgs++) {
		uint32_t sel = (uint32_t)fuzz_take(&in, 1), type, len;
		int trunc = -1;
		uint8_t *payload;

		if ((sel & 0x80) && n > 0) {
			const struct shoal_filter *f = &fs[(sel & 0x3f) % n];

			type = f->types[fuzz_take(&in, 1) % f->n_types];
		} else {
			type = (uint32_t)fuzz_take(&in, 4);
		}
		len = (uint32_t)fuzz_take(&in, 1);
		if (len > in.left)
			len = (uint32_t)in.left;
		payload = malloc(len);
		FUZZ_CHECK(payload != NULL || len == 0);
		if (len)
			memcpy(payload, in.p, len);
		in.p += len;
		in.left -= len;
		if (sel & 0x40)
			trunc = (int)fuzz_take(&in, 1);
		check_message(tabs, fs, n, type, payload, len, trunc, ref, got);
		free(payload);
	}
	for (size_t m = 0; m < N_MODES; m++)
		shoal__route_free(tabs[m]);
	free(fs);
	free(ref);
	free(got);
	return 0;
}
