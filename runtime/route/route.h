/* SPDX-License-Identifier: MIT */
/*
 * The router's routing table: every filter of the system in one flat vector,
 * plus the index derived from it at build time (see runtime/route/table.h for the
 * layout). Private to the runtime, never installed.
 *
 * Lifecycle:
 *   1. The control thread builds a table with shoal__route_build(). If that
 *      succeeds, it must eventually call shoal__route_free() on it.
 *   2. A built table never changes. The router publishes it with one pointer
 *      swap and frees the previous one after an RCU grace period.
 *   3. Any number of threads may call every function except free on the same
 *      table at the same time; free must not race with any of them.
 */
#ifndef SHOAL_RUNTIME_ROUTE_H
#define SHOAL_RUNTIME_ROUTE_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <shoal/api.h>
#include <shoal/filter.h>

struct shoal__route_table;   /* opaque, immutable after build */

#define SHOAL__ROUTE_INDEXED 0   /* derive per-type index and key partitions */
#define SHOAL__ROUTE_FLAT    1   /* baseline: scan the whole vector per message, no index */
#define SHOAL__ROUTE_CHAIN   2   /* baseline: nested chain of calls, one per filter (elfo before) */

/* Largest chain baseline: its matching recurses once per filter. */
#define SHOAL__ROUTE_CHAIN_MAX 16384u   /* at most ~1 MiB of stack */

/* Largest table: keeps every derived offset within 32 bits. */
#define SHOAL__ROUTE_MAX_FILTERS (UINT32_C(1) << 20)

/*
 * Build a table from a copy of filters[0 .. n) (filters may be NULL when n is
 * 0); filter i keeps index i. `mode` is SHOAL__ROUTE_INDEXED, or one of the
 * two baselines the benchmarks compare it with (FLAT, CHAIN).
 * Returns 0 and the table in *out; -EINVAL with "filter #i: reason" in *err
 * when filter i fails shoal_filter_validate(), or with the reason when the
 * mode is unknown or n exceeds SHOAL__ROUTE_MAX_FILTERS (SHOAL__ROUTE_CHAIN_MAX
 * for the chain baseline); -ENOMEM when an
 * allocation fails. On failure nothing is built and *out is not written.
 * Allocates; never for the hot path.
 */
int shoal__route_build(struct shoal__route_table **out, const struct shoal_filter *filters,
		       uint32_t n, int mode, struct shoal_err *err);

/* Free a table in one call. NULL is allowed. */
void shoal__route_free(struct shoal__route_table *t);

/* Number of filters in the table. */
uint32_t shoal__route_count(const struct shoal__route_table *t);

/* The table's copy of filter i, or NULL when i >= shoal__route_count(). */
const struct shoal_filter *shoal__route_filter(const struct shoal__route_table *t, uint32_t i);

/*
 * The table's vector: filter i at [i] for every i below
 * shoal__route_count(), so every index the matchers return. For hot paths,
 * which look it up once per table instead of once per match.
 */
const struct shoal_filter *shoal__route_filters(const struct shoal__route_table *t);

/*
 * An upper bound of the number of filters any one message can match: the
 * size of the `out` array shoal__route_match() needs so that it never
 * truncates. At least 1 when the table holds a filter, 0 for an empty table.
 * The indexed mode derives a tighter bound than the flat one (a message
 * matches one bucket of a modulus partition, one value of an EQ/IN map).
 */
uint32_t shoal__route_max_matches(const struct shoal__route_table *t);

/* Number of filters that list message type `type` (0: no route for it). */
uint32_t shoal__route_type_filters(const struct shoal__route_table *t, uint32_t type);

/*
 * Write the indices of the filters matching a message of type `type` and
 * payload[0 .. len) to out[0 .. max), in ascending order, and return how many
 * were written. When more than `max` filters match, the `max` smallest
 * indices are written. A payload too short for a filter's key does not match
 * that filter; nothing outside payload[0 .. len) is read, whatever `len` and
 * the filters' offsets are (type and payload come from other processes).
 * Hot path: no allocation, lock, system call or recursion (except in the
 * CHAIN baseline, whose recursion is its point); read-only and wait-free,
 * safe from any number of threads at once.
 */
uint32_t shoal__route_match(const struct shoal__route_table *t, uint32_t type,
			    const void *payload, uint32_t len, uint32_t *out, uint32_t max);

/*
 * shoal__route_match() without the copy where it can: the same indices,
 * the same count, but *res points at them. When they are one run of the
 * table's own lists (the common shape: the type's filters form one
 * partition, or the type has one filter), *res points into the table, valid
 * as long as it; otherwise they are written to buf[0 .. max) and *res is
 * buf. The same hot-path guarantees.
 */
uint32_t shoal__route_match_ref(const struct shoal__route_table *t, uint32_t type,
				const void *payload, uint32_t len, uint32_t *buf, uint32_t max,
				const uint32_t **res);

/*
 * Read the `width`-byte little-endian key at `off`, if payload[0 .. len)
 * holds it (written so that nothing overflows, whatever len and off are).
 * Width 0 reads nothing and yields key 0. `width` must be 0, 1, 2, 4 or 8.
 */
static inline bool shoal__route_key_read(const unsigned char *p, uint32_t len, uint32_t off,
					 uint32_t width, uint64_t *key)
{
	uint16_t v16;
	uint32_t v32;
	uint64_t v64;

	if (width == 0) {
		*key = 0;
		return true;
	}
	if (width > len || off > len - width)
		return false;
	switch (width) {
	case 1:
		*key = p[off];
		break;
	case 2:
		memcpy(&v16, p + off, sizeof(v16));
		*key = le16toh(v16);
		break;
	case 4:
		memcpy(&v32, p + off, sizeof(v32));
		*key = le32toh(v32);
		break;
	default:
		memcpy(&v64, p + off, sizeof(v64));
		*key = le64toh(v64);
		break;
	}
	return true;
}

/*
 * The quick match: the shapes most message types have, derived at build
 * for a matcher inlined into its caller (the dispatcher), with the same
 * result as shoal__route_match_ref() for them. A type's descriptor:
 *   SHOAL__ROUTE_QUICK_TABLE  its filters are one partition by key % a:
 *       the filters of residue r are pool[list[r] .. list[r + 1]).
 *   SHOAL__ROUTE_QUICK_LIST   one list, list[0 .. len), taken whole when the
 *       key is readable and (a == 0 or key % a == b): a partition by a key
 *       readable or not, or one filter alone (ANY or MOD).
 *   SHOAL__ROUTE_QUICK_NONE   any other shape, and every type of the
 *       baseline modes: match with shoal__route_match_ref(). Its fields
 *       make shoal__route_quick_one() return SHOAL__ROUTE_NOT_ONE (no key,
 *       no test, one[0] NOT_ONE): SHOAL__ROUTE_QUICK_NONE_INIT.
 * Part of its table: immutable, valid as long as the table.
 */
#define SHOAL__ROUTE_QUICK_NONE  0u
#define SHOAL__ROUTE_QUICK_TABLE 1u
#define SHOAL__ROUTE_QUICK_LIST  2u

struct shoal__route_quick {
	uint32_t kind;
	uint32_t offset;            /* the key: offset and width (0: no key) */
	uint32_t width;
	uint32_t len;               /* LIST: its length */
	uint64_t a, b;              /* TABLE: a buckets; LIST: the test, a = 0 none */
	uint64_t mask;              /* the key's bits in the 8 bytes at offset */
	const uint32_t *list;
	const uint32_t *pool;
	/* TABLE: one[r], the filter of residue r when it is alone there, else
	 * SHOAL__ROUTE_NOT_ONE; LIST: list[0] when len is 1, else NOT_ONE. */
	const uint32_t *one;
};

/* What shoal__route_quick_one() returns for a match of no filter or of more
 * than one: above any filter index (SHOAL__ROUTE_MAX_FILTERS). */
#define SHOAL__ROUTE_NOT_ONE UINT32_MAX

/* One word SHOAL__ROUTE_NOT_ONE, for the one[] of a descriptor that never
 * yields one filter. */
extern const uint32_t shoal__route_not_one;

/* A QUICK_NONE descriptor's fields (see the kinds above). */
#define SHOAL__ROUTE_QUICK_NONE_INIT { .kind = SHOAL__ROUTE_QUICK_NONE, .one = &shoal__route_not_one }

/* The descriptor of message type `type`, or NULL when no filter lists it. */
const struct shoal__route_quick *shoal__route_quick(const struct shoal__route_table *t,
						    uint32_t type);

/*
 * The key of descriptor `q` in payload[0 .. len): false when the payload is
 * too short for it. Eight bytes at the key's offset, masked to its width,
 * when the payload holds them (the common case): one bounds check and one
 * load instead of a branch per width.
 */
static inline bool shoal__route_quick_key(const struct shoal__route_quick *q, const void *payload,
					  uint32_t len, uint64_t *key)
{
	if (__builtin_expect(q->offset <= len && len - q->offset >= sizeof(*key), 1)) {
		memcpy(key, (const unsigned char *)payload + q->offset, sizeof(*key));
		*key = le64toh(*key) & q->mask;
		return true;
	}
	return shoal__route_key_read(payload, len, q->offset, q->width, key);
}

/*
 * Match a message of a type whose descriptor `q` is not QUICK_NONE: as
 * shoal__route_match_ref(), with *res pointing into the table, and no
 * bound but the table's shoal__route_max_matches(). The payload is
 * untrusted: nothing outside payload[0 .. len) is read.
 */
static inline uint32_t shoal__route_quick_match(const struct shoal__route_quick *q,
						const void *payload, uint32_t len,
						const uint32_t **res)
{
	uint64_t key;
	uint32_t r;

	if (!shoal__route_quick_key(q, payload, len, &key))
		return 0;
	if (q->kind == SHOAL__ROUTE_QUICK_TABLE) {
		r = (uint32_t)(key % q->a);
		*res = q->pool + q->list[r];
		return q->list[r + 1] - q->list[r];
	}
	if (q->a != 0 && key % q->a != q->b)
		return 0;
	*res = q->list;
	return q->len;
}

/*
 * The same match when the caller takes one filter only (the dispatcher's
 * common case: one copy to one group): the index of the one filter
 * shoal__route_quick_match() would find, or SHOAL__ROUTE_NOT_ONE when it
 * would find none or several. One load of one[] where the bucket's list
 * costs its two bounds, their difference and the list's first entry. Any
 * descriptor may be given, QUICK_NONE too (then NOT_ONE: match with
 * shoal__route_match_ref()), so that the caller tests no kind.
 */
static inline uint32_t shoal__route_quick_one(const struct shoal__route_quick *q,
					      const void *payload, uint32_t len)
{
	uint64_t key;

	if (!shoal__route_quick_key(q, payload, len, &key))
		return SHOAL__ROUTE_NOT_ONE;
	if (q->kind == SHOAL__ROUTE_QUICK_TABLE)
		return q->one[key % q->a];
	if (q->a != 0 && key % q->a != q->b)
		return SHOAL__ROUTE_NOT_ONE;
	return q->one[0];
}

/*
 * A matcher's memo of the last type it matched (a stream is mostly of one
 * type): that type's quick descriptor, looked up again only when the type
 * changes. Starts as SHOAL__ROUTE_MEMO_INIT (type 0, which no message has,
 * and the descriptor that finds nothing, so that no test of its own is
 * needed); valid as long as the table it was used with.
 */
struct shoal__route_memo {
	uint32_t type;
	const struct shoal__route_quick *q;
};

/* The descriptor of a type no filter lists: the quick match finds none. */
extern const struct shoal__route_quick shoal__route_no_quick;

#define SHOAL__ROUTE_MEMO_INIT { 0, &shoal__route_no_quick }

/* Look type up in t into the memo (out of line: a type change). */
void shoal__route_memo_set(const struct shoal__route_table *t, struct shoal__route_memo *m,
			   uint32_t type);

/* The descriptor of `type` (never NULL), through the memo. */
static inline const struct shoal__route_quick *shoal__route_memo_q(const struct shoal__route_table *t,
								  struct shoal__route_memo *m,
								  uint32_t type)
{
	if (__builtin_expect(type != m->type, 0))
		shoal__route_memo_set(t, m, type);
	return m->q;
}

/*
 * shoal__route_match_ref() through the memo: the common shapes matched
 * inline, the others by shoal__route_match_ref() into buf[0 .. max). The
 * same result, indices and guarantees.
 */
static inline uint32_t shoal__route_match_memo(const struct shoal__route_table *t,
					       struct shoal__route_memo *m, uint32_t type,
					       const void *payload, uint32_t len, uint32_t *buf,
					       uint32_t max, const uint32_t **res)
{
	const struct shoal__route_quick *q = shoal__route_memo_q(t, m, type);

	if (__builtin_expect(q->kind != SHOAL__ROUTE_QUICK_NONE, 1))
		return shoal__route_quick_match(q, payload, len, res);
	return shoal__route_match_ref(t, type, payload, len, buf, max, res);
}

#endif
