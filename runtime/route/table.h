/* SPDX-License-Identifier: MIT */
/*
 * The routing table's layout, shared by its builder (index.c) and its
 * matcher (match.c), and the key helpers they and the public predicates
 * (filter.c) use. Private to runtime/route/.
 *
 *
 * Memory picture: a table is one allocation, immutable once built. Each
 * region starts on a 64-byte line; regions refer to each other by 32-bit
 * indices, so freeing is one call.
 *
 *     header    mode, counts, the region pointers
 *     dir       one descriptor per message type, in an open-addressing hash on
 *               the type id: power-of-two slots, at most half full, linear
 *               probing; type 0 marks an empty slot (no filter may list it)
 *     groups    per type, its indexed partitions, sorted by key spec
 *     slots     the value maps of the hashed partitions: {value, list}, half
 *               full at most, len 0 marks an empty slot
 *     pool      uint32_t: ascending lists of filter indices, bucket starts
 *     filters   the copy of the vector; filter i keeps index i
 *
 * Per type, each filter listing the type is in exactly one place. A spec is
 * a key's (offset, width); width 0 is "no key".
 *
 *     LIST      (spec, ANY): matches when the key is readable (always for
 *               width 0). The run is the list itself.
 *     TABLE     (spec, MOD a) with a <= 65536 and a <= 16 x its filters:
 *               a + 1 bucket starts in the pool; the filters of residue r
 *               are pool[start[r] .. start[r + 1]). Then a words more, for
 *               the quick match of one filter (route.h): residue r's filter
 *               when it is alone in its bucket, else SHOAL__ROUTE_NOT_ONE.
 *     HASH_MOD  (spec, MOD a) too large or sparse for a table: residue ->
 *               list map.
 *     HASH_EQ   (spec, EQ and IN): value -> list map; an IN filter is listed
 *               under each of its values.
 *     linear    RANGE filters, partitions of a single filter, and partitions
 *               beyond the GROUPS_MAX largest of the type: each predicate
 *               is evaluated in turn.
 *
 * Matching: one probe for the type; then per group at most one key read
 * (groups are sorted by spec: one read per spec), one division and one bucket
 * load or probe, which yields one ascending run; linear filters are evaluated
 * lazily, in ascending order. Runs and the linear cursor are disjoint (a
 * filter is in one place, and a key has one residue and one value), so a merge
 * by smallest head writes the result in ascending order. Cost O(G + L + M x R)
 * for G <= GROUPS_MAX groups, L linear filters, M matches and R non-empty
 * runs (R <= M, usually 1). The fanout shape, "key % 100 == i" for i < 100,
 * is one TABLE: a probe, a key read, a division, two bucket loads and a copy,
 * whatever the number of filters. The flat mode, kept as the baseline, builds
 * only the type directory (for the counts) and matches by checking every
 * filter's type list and predicate: O(n) per message.
 *
 * Building sorts the P (type, filter) pairs and each type's partitions:
 * O(P log P), plus O(a) per TABLE. It allocates; matching never does.
 *
 * Concurrency: a built table is never written, so any number of threads may
 * match on it at once with no synchronisation of their own; the router's RCU
 * publication orders the build before the readers. Progress: matching is
 * wait-free; a probe ends at an empty slot, which every map has, and every
 * other loop is bounded by the table's sizes.
 *
 * Untrusted input: the type, the payload and its length come from other
 * processes. A key is read only once `width <= len && offset <= len - width`
 * holds (written so that nothing overflows); a residue is below its modulus,
 * which is the number of buckets; an unknown type or value ends its probe at
 * an empty slot. The table itself is process-local memory built here, so it
 * is trusted.
 */
#ifndef SHOAL_RUNTIME_ROUTE_TABLE_H
#define SHOAL_RUNTIME_ROUTE_TABLE_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <shoal/filter.h>

#include "runtime/route/route.h"

#define GROUPS_MAX 16            /* indexed partitions per type: the merge's stack */
#define MOD_TABLE_MAX 65536u     /* largest modulus given a bucket table */
#define MOD_TABLE_DENSITY 16u    /* ... and at most this many buckets per filter */
#define NO_MATCH UINT32_MAX      /* above any filter index (SHOAL__ROUTE_MAX_FILTERS) */

enum group_kind { G_LIST, G_TABLE, G_HASH_MOD, G_HASH_EQ };

/* A message type's descriptor, and a slot of the type directory. */
struct rt_type {
	uint32_t type;          /* 0: empty slot */
	uint32_t n_filters;     /* filters listing the type */
	uint32_t group_first;   /* groups[group_first .. + n_groups) */
	uint32_t n_groups;
	uint32_t lin_off;       /* pool[lin_off .. + lin_len): evaluated one by one */
	uint32_t lin_len;
	struct shoal__route_quick quick;   /* the inline matcher's view (route.h) */
};

/* One indexed partition of a type's filters. */
struct rt_group {
	uint64_t a;             /* G_TABLE, G_HASH_MOD: the modulus */
	uint32_t offset;        /* key spec; 0 when width is 0 */
	uint8_t width;
	uint8_t kind;           /* enum group_kind */
	uint32_t off;           /* LIST: list; TABLE: a + 1 bucket starts (pool); HASH: first slot */
	uint32_t len;           /* LIST: list length; HASH: slot mask */
	uint32_t one;           /* TABLE: a entries (pool), each bucket's filter when alone */
};

/* A value map entry: filters pool[off .. + len) for key (or residue) `value`. */
struct rt_slot {
	uint64_t value;
	uint32_t off;
	uint32_t len;           /* 0: empty slot */
};

struct shoal__route_table {
	uint32_t mode;
	uint32_t n_filters;
	uint32_t max_matches;
	uint32_t dir_mask;      /* directory slots - 1 */
	uint32_t dir_bits;      /* log2 of the directory slots, >= 1 */
	const struct rt_type *dir;
	const struct rt_group *groups;
	const struct rt_slot *slots;
	const uint32_t *pool;
	const struct shoal_filter *filters;
	struct shoal__chain_link *chain;   /* SHOAL__ROUTE_CHAIN only: one link per filter */
};

static inline bool width_valid(uint32_t width)
{
	return width == 0 || width == 1 || width == 2 || width == 4 || width == 8;
}

/* Read a key (route.h): the helpers below and the index's matcher use it. */
static inline bool key_read(const unsigned char *p, uint32_t len, uint32_t off, uint32_t width,
			    uint64_t *key)
{
	return shoal__route_key_read(p, len, off, width, key);
}

static inline bool key_pass(const struct shoal_key *k, uint64_t key)
{
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

/* The predicate of a validated filter (its types are not checked). */
static inline bool filter_pass(const struct shoal_filter *f, const unsigned char *p, uint32_t len)
{
	uint64_t key;

	return key_read(p, len, f->key.offset, f->key.width, &key) && key_pass(&f->key, key);
}


/*
 * Fibonacci hashing: the top `bits` bits of type x 2^32/phi, after folding the
 * high half down so that ids differing only in their top bits spread too. One
 * multiply: this runs once per message. bits >= 1 keeps the shift below 32.
 */
static inline uint32_t type_hash(uint32_t type, uint32_t bits)
{
	return ((type ^ (type >> 16)) * 0x9e3779b9u) >> (32 - bits);
}

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* match.c: link the CHAIN baseline over the table's filters. */
int shoal__route_chain_link(struct shoal__route_table *t);

#endif
