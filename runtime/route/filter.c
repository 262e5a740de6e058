/* SPDX-License-Identifier: MIT */
/*
 * Filters, and the router's routing table: the flat filter vector plus an
 * index derived from it when the table is built.
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
 *               are pool[start[r] .. start[r + 1]).
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
#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/filter.h>

#include "runtime/route/route.h"
#include "shm/util.h"

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
};

/* One indexed partition of a type's filters. */
struct rt_group {
	uint64_t a;             /* G_TABLE, G_HASH_MOD: the modulus */
	uint32_t offset;        /* key spec; 0 when width is 0 */
	uint8_t width;
	uint8_t kind;           /* enum group_kind */
	uint32_t off;           /* LIST: list; TABLE: a + 1 bucket starts (pool); HASH: first slot */
	uint32_t len;           /* LIST: list length; HASH: slot mask */
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
	struct chain_link *chain;   /* SHOAL__ROUTE_CHAIN only: one link per filter */
};

/* Filters: validation and key extraction. */

static const char *const op_names[] = { "ANY", "EQ", "IN", "RANGE", "MOD" };

static inline bool width_valid(uint32_t width)
{
	return width == 0 || width == 1 || width == 2 || width == 4 || width == 8;
}

/*
 * Read the `width`-byte little-endian key at `off`, if payload[0 .. len)
 * holds it. Width 0 reads nothing and yields key 0. `width` must be valid.
 */
static inline bool key_read(const unsigned char *p, uint32_t len, uint32_t off, uint32_t width,
			    uint64_t *key)
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

int shoal_filter_validate(const struct shoal_filter *f, struct shoal_err *err)
{
	const struct shoal_key *k;

	if (f == NULL)
		return shoal__fail(err, -EINVAL, "filter is NULL");
	if (f->n_types == 0 || f->n_types > SHOAL_FILTER_MAX_TYPES)
		return shoal__fail(err, -EINVAL, "n_types is %u, expected 1 to %u", f->n_types,
				   SHOAL_FILTER_MAX_TYPES);
	for (uint32_t i = 0; i < f->n_types; i++)
		if (f->types[i] == 0)
			return shoal__fail(err, -EINVAL, "types[%u] is 0, which is no message type",
					   i);
	k = &f->key;
	if (k->op > SHOAL_KEY_MOD)
		return shoal__fail(err, -EINVAL, "unknown key op %u", k->op);
	if (f->mode > SHOAL_ROUTE_DISCARD)
		return shoal__fail(err, -EINVAL, "unknown route mode %u", f->mode);
	if (f->reserved != 0)
		return shoal__fail(err, -EINVAL, "reserved byte is %u, must be 0", f->reserved);
	if (!width_valid(k->width))
		return shoal__fail(err, -EINVAL, "key width %u is not 0, 1, 2, 4 or 8", k->width);
	if (k->width == 0 && k->op != SHOAL_KEY_ANY)
		return shoal__fail(err, -EINVAL, "key op %s needs a key, but the key width is 0",
				   op_names[k->op]);
	if (k->width == 0 && f->mode == SHOAL_ROUTE_UNICAST_KEY)
		return shoal__fail(err, -EINVAL, "route mode UNICAST_KEY needs a key, but the key "
				   "width is 0");
	switch (k->op) {
	case SHOAL_KEY_MOD:
		if (k->a == 0)
			return shoal__fail(err, -EINVAL, "MOD modulus is 0");
		if (k->b >= k->a)
			return shoal__fail(err, -EINVAL, "MOD remainder %llu is not below the "
					   "modulus %llu", (unsigned long long)k->b,
					   (unsigned long long)k->a);
		break;
	case SHOAL_KEY_RANGE:
		if (k->a > k->b)
			return shoal__fail(err, -EINVAL, "RANGE [%llu, %llu] is empty",
					   (unsigned long long)k->a, (unsigned long long)k->b);
		break;
	case SHOAL_KEY_IN:
		if (k->n_set == 0 || k->n_set > SHOAL_FILTER_MAX_SET)
			return shoal__fail(err, -EINVAL, "IN set has %u values, expected 1 to %u",
					   k->n_set, SHOAL_FILTER_MAX_SET);
		break;
	default:
		break;
	}
	return 0;
}

int shoal_filter_key(const struct shoal_filter *f, const void *payload, uint32_t len,
		     uint64_t *key)
{
	if (!width_valid(f->key.width))
		return -EINVAL;
	if (!key_read(payload, len, f->key.offset, f->key.width, key))
		return -ERANGE;
	return 0;
}

/* Matching. */

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

static inline const struct rt_type *type_find(const struct shoal__route_table *t, uint32_t type)
{
	uint32_t i = type_hash(type, t->dir_bits);

	if (type == 0)   /* the empty-slot marker, listed by no filter */
		return NULL;
	for (;;) {
		const struct rt_type *d = &t->dir[i];

		if (d->type == type)
			return d;
		if (d->type == 0)
			return NULL;
		i = (i + 1) & t->dir_mask;
	}
}

static inline const struct rt_slot *slot_find(const struct rt_slot *s, uint32_t mask, uint64_t v)
{
	uint32_t i = (uint32_t)mix64(v) & mask;

	for (;;) {
		if (s[i].len == 0)
			return NULL;
		if (s[i].value == v)
			return &s[i];
		i = (i + 1) & mask;
	}
}

/* An ascending run of filter indices. */
struct run {
	const uint32_t *p;
	const uint32_t *end;
};

/* The non-empty runs the groups of `ty` yield for this payload; returns how many. */
static inline uint32_t collect_runs(const struct shoal__route_table *t, const struct rt_type *ty,
				    const unsigned char *p, uint32_t len, struct run *runs)
{
	const struct rt_group *g = t->groups + ty->group_first;
	const struct rt_group *end = g + ty->n_groups;
	uint32_t nr = 0, koff = 0;
	uint8_t kw = 0xff;   /* no valid width: the first group reads its key */
	bool readable = false;
	uint64_t key = 0;

	for (; g < end; g++) {
		const uint32_t *lo, *hi;
		const struct rt_slot *s;

		if (g->offset != koff || g->width != kw) {
			koff = g->offset;
			kw = g->width;
			readable = key_read(p, len, koff, kw, &key);
		}
		if (!readable)
			continue;
		switch (g->kind) {
		case G_LIST:
			lo = t->pool + g->off;
			hi = lo + g->len;
			break;
		case G_TABLE: {
			const uint32_t *start = t->pool + g->off + key % g->a;

			lo = t->pool + start[0];
			hi = t->pool + start[1];
			break;
		}
		default:
			s = slot_find(t->slots + g->off, g->len,
				      g->kind == G_HASH_MOD ? key % g->a : key);
			if (s == NULL)
				continue;
			lo = t->pool + s->off;
			hi = lo + s->len;
			break;
		}
		if (lo != hi)
			runs[nr++] = (struct run){ lo, hi };
	}
	return nr;
}

/* The next linear filter at or after *pos that matches, or NO_MATCH. */
static inline uint32_t linear_next(const struct shoal__route_table *t, const uint32_t **pos,
				   const uint32_t *end, const unsigned char *p, uint32_t len)
{
	while (*pos < end) {
		uint32_t i = *(*pos)++;

		if (filter_pass(&t->filters[i], p, len))
			return i;
	}
	return NO_MATCH;
}

static uint32_t match_flat(const struct shoal__route_table *t, uint32_t type,
			   const unsigned char *p, uint32_t len, uint32_t *out, uint32_t max)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->n_filters && n < max; i++) {
		const struct shoal_filter *f = &t->filters[i];
		bool listed = false;

		for (uint32_t j = 0; j < f->n_types; j++)
			listed |= f->types[j] == type;
		if (listed && filter_pass(f, p, len))
			out[n++] = i;
	}
	return n;
}

/*
 * The nested-chain baseline (SHOAL__ROUTE_CHAIN): what elfo's router did
 * before it was flattened. Adding a route wrapped the router built so far in
 * a new closure, so matching a message calls the newest link, which calls
 * the one before it, down to the first, each through a function pointer: the
 * cost grows with the number of routes, call by call. Built by the router
 * itself from filter data, for benchmarks only; results are the same as the
 * other modes (ascending indices), since a link appends its own match after
 * its predecessors' calls return.
 */
struct chain_link {
	uint32_t (*call)(const struct chain_link *self, uint32_t type, const unsigned char *p,
			 uint32_t len, uint32_t *out, uint32_t max);
	const struct chain_link *prev;
	const struct shoal_filter *f;
	uint32_t index;
};

static uint32_t chain_call(const struct chain_link *self, uint32_t type, const unsigned char *p,
			   uint32_t len, uint32_t *out, uint32_t max)
{
	const struct shoal_filter *f = self->f;
	uint32_t n = self->prev ? self->prev->call(self->prev, type, p, len, out, max) : 0;
	bool listed = false;

	for (uint32_t j = 0; j < f->n_types; j++)
		listed |= f->types[j] == type;
	if (listed && n < max && filter_pass(f, p, len))
		out[n++] = self->index;
	return n;
}

uint32_t shoal__route_match(const struct shoal__route_table *t, uint32_t type,
			    const void *payload, uint32_t len, uint32_t *out, uint32_t max)
{
	const unsigned char *p = payload;
	const struct rt_type *ty;
	const uint32_t *lin, *lin_end;
	struct run runs[GROUPS_MAX];
	uint32_t nr, n = 0, next;

	if (SHOAL_UNLIKELY(max == 0))
		return 0;
	if (t->mode == SHOAL__ROUTE_FLAT)
		return match_flat(t, type, p, len, out, max);
	if (t->mode == SHOAL__ROUTE_CHAIN)
		return t->n_filters ? t->chain[t->n_filters - 1].call(&t->chain[t->n_filters - 1],
								       type, p, len, out, max)
				    : 0;
	ty = type_find(t, type);
	if (ty == NULL)
		return 0;
	nr = collect_runs(t, ty, p, len, runs);
	lin = t->pool + ty->lin_off;
	lin_end = lin + ty->lin_len;
	/* Most messages meet one source: copy it without merging. */
	if (SHOAL_LIKELY(lin == lin_end && nr <= 1)) {
		if (nr == 1)
			for (const uint32_t *q = runs[0].p; q < runs[0].end && n < max; q++)
				out[n++] = *q;
		return n;
	}
	if (nr == 0) {
		while (n < max && (next = linear_next(t, &lin, lin_end, p, len)) != NO_MATCH)
			out[n++] = next;
		return n;
	}
	next = linear_next(t, &lin, lin_end, p, len);
	/* Merge: take the smallest head among the runs and the linear cursor. */
	while (n < max) {
		uint32_t best = next, from = nr;

		for (uint32_t k = 0; k < nr; k++) {
			if (*runs[k].p < best) {
				best = *runs[k].p;
				from = k;
			}
		}
		if (best == NO_MATCH)
			break;
		out[n++] = best;
		if (from == nr)
			next = linear_next(t, &lin, lin_end, p, len);
		else if (++runs[from].p == runs[from].end)
			runs[from] = runs[--nr];
	}
	return n;
}

uint32_t shoal__route_count(const struct shoal__route_table *t)
{
	return t->n_filters;
}

const struct shoal_filter *shoal__route_filter(const struct shoal__route_table *t, uint32_t i)
{
	return i < t->n_filters ? &t->filters[i] : NULL;
}

uint32_t shoal__route_max_matches(const struct shoal__route_table *t)
{
	return t->max_matches;
}

uint32_t shoal__route_type_filters(const struct shoal__route_table *t, uint32_t type)
{
	const struct rt_type *ty = type_find(t, type);

	return ty != NULL ? ty->n_filters : 0;
}

void shoal__route_free(struct shoal__route_table *t)
{
	if (t != NULL)
		free(t->chain);
	free(t);
}

/* Link the chain over the table's filters: link i calls link i - 1. */
static int build_chain(struct shoal__route_table *t)
{
	t->chain = calloc(t->n_filters + 1, sizeof(*t->chain));
	if (t->chain == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n_filters; i++)
		t->chain[i] = (struct chain_link){ chain_call, i ? &t->chain[i - 1] : NULL,
						   &t->filters[i], i };
	return 0;
}

/*
 * Building. The parts grow in temporary vectors whose elements refer to each
 * other by index; the last step copies them into the table's one block.
 */

/* A growable array; its length stays within 32 bits so indices fit a uint32_t. */
struct vec {
	unsigned char *p;
	size_t len;
	size_t cap;
	size_t esz;
};

/* Append k zeroed elements; returns the first one, or NULL when out of memory. */
static void *vec_add(struct vec *v, size_t k)
{
	void *e;

	if (k > UINT32_MAX - v->len)
		return NULL;
	if (v->len + k > v->cap) {
		size_t cap = v->cap ? v->cap : 64;
		unsigned char *np;

		while (cap < v->len + k)
			cap *= 2;
		np = realloc(v->p, cap * v->esz);
		if (np == NULL)
			return NULL;
		v->p = np;
		v->cap = cap;
	}
	e = v->p + v->len * v->esz;
	memset(e, 0, k * v->esz);
	v->len += k;
	return e;
}

enum rec_class { C_LIST, C_MOD, C_VALUE, C_LINEAR };

/* One filter of the type being planned, with the partition it belongs to. */
struct rec {
	uint64_t a;          /* C_MOD: the modulus */
	uint32_t offset;     /* 0 when width is 0 */
	uint32_t filter;
	uint8_t width;
	uint8_t cls;         /* enum rec_class */
	bool indexed;
};

/* A candidate partition: recs[first .. + count). */
struct cand {
	uint32_t first;
	uint32_t count;
};

/* (value, filter): a residue or key value and a filter listed under it. */
struct vpair {
	uint64_t value;
	uint32_t filter;
};

struct tpair {
	uint32_t type;
	uint32_t filter;
};

struct builder {
	const struct shoal_filter *f;
	int mode;
	struct vec types;    /* struct rt_type, ascending type */
	struct vec groups;   /* struct rt_group */
	struct vec slots;    /* struct rt_slot */
	struct vec pool;     /* uint32_t */
	struct rec *recs;    /* scratch: one type's filters */
	struct cand *cands;  /* scratch: one type's partitions */
	uint32_t max_matches;
};

static int tpair_cmp(const void *x, const void *y)
{
	const struct tpair *a = x, *b = y;

	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	return (a->filter > b->filter) - (a->filter < b->filter);
}

static int vpair_cmp(const void *x, const void *y)
{
	const struct vpair *a = x, *b = y;

	if (a->value != b->value)
		return a->value < b->value ? -1 : 1;
	return (a->filter > b->filter) - (a->filter < b->filter);
}

static int u32_cmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return (a > b) - (a < b);
}

/* Partition order: by spec first, so that a match reads each key once. */
static int rec_cmp(const void *x, const void *y)
{
	const struct rec *a = x, *b = y;

	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	if (a->width != b->width)
		return a->width < b->width ? -1 : 1;
	if (a->cls != b->cls)
		return a->cls < b->cls ? -1 : 1;
	if (a->a != b->a)
		return a->a < b->a ? -1 : 1;
	return (a->filter > b->filter) - (a->filter < b->filter);
}

static bool rec_same_part(const struct rec *a, const struct rec *b)
{
	return a->offset == b->offset && a->width == b->width && a->cls == b->cls && a->a == b->a;
}

/* Largest first; ties in spec order, so that the choice is deterministic. */
static int cand_by_size(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	return (a->first > b->first) - (a->first < b->first);
}

static int cand_by_first(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	return (a->first > b->first) - (a->first < b->first);
}

/* Append filters to the pool; returns the offset of the first, or -ENOMEM. */
static int64_t pool_append_vpairs(struct builder *b, const struct vpair *vp, uint32_t n)
{
	uint32_t *dst = vec_add(&b->pool, n);

	if (dst == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		dst[i] = vp[i].filter;
	return (int64_t)(b->pool.len - n);
}

/*
 * Emit a value map over vp[0 .. n), sorted by (value, filter) with no
 * duplicate pair, into group g. Adds the longest list to *bound.
 */
static int emit_hash(struct builder *b, struct rt_group *g, const struct vpair *vp, uint32_t n,
		     uint32_t *bound)
{
	uint32_t distinct = 0, longest = 0, cap = 2, base;
	struct rt_slot *slots;
	int64_t list;

	for (uint32_t i = 0; i < n; i++)
		distinct += i == 0 || vp[i].value != vp[i - 1].value;
	while (cap < 2 * (uint64_t)distinct)
		cap *= 2;
	list = pool_append_vpairs(b, vp, n);
	if (list < 0)
		return (int)list;
	base = (uint32_t)b->slots.len;
	slots = vec_add(&b->slots, cap);
	if (slots == NULL)
		return -ENOMEM;
	for (uint32_t i = 0, j; i < n; i = j) {
		uint32_t h = (uint32_t)mix64(vp[i].value) & (cap - 1);

		for (j = i + 1; j < n && vp[j].value == vp[i].value; j++)
			;
		while (slots[h].len != 0)
			h = (h + 1) & (cap - 1);
		slots[h] = (struct rt_slot){ vp[i].value, (uint32_t)list + i, j - i };
		longest = j - i > longest ? j - i : longest;
	}
	g->off = base;
	g->len = cap - 1;
	*bound += longest;
	return 0;
}

/* Emit the bucket table of a MOD partition over vp[0 .. n) (value = residue). */
static int emit_table(struct builder *b, struct rt_group *g, const struct vpair *vp, uint32_t n,
		      uint32_t *bound)
{
	uint32_t a = (uint32_t)g->a, start_off, longest = 0, *start;
	int64_t list;

	if (vec_add(&b->pool, a + 1) == NULL)
		return -ENOMEM;
	start_off = (uint32_t)(b->pool.len - (a + 1));
	list = pool_append_vpairs(b, vp, n);
	if (list < 0)
		return (int)list;
	start = (uint32_t *)b->pool.p + start_off;   /* after the last append: no realloc since */
	for (uint32_t r = 0, i = 0; r <= a; r++) {
		uint32_t j = i;

		while (j < n && vp[j].value == r)
			j++;
		start[r] = (uint32_t)list + i;
		longest = j - i > longest ? j - i : longest;
		i = j;
	}
	g->off = start_off;
	*bound += longest;
	return 0;
}

/* Emit one indexed partition of the type being planned: recs[0 .. n), n >= 2. */
static int emit_group(struct builder *b, const struct rec *recs, uint32_t n, uint32_t *bound)
{
	struct rt_group g = {
		.a = recs[0].a,
		.offset = recs[0].offset,
		.width = recs[0].width,
	};
	struct vpair *vp = NULL;
	struct rt_group *dst;
	uint32_t nvp = 0, w = 0, *list;
	int ret = 0;

	if (recs[0].cls == C_LIST) {
		list = vec_add(&b->pool, n);
		if (list == NULL)
			return -ENOMEM;
		for (uint32_t i = 0; i < n; i++)
			list[i] = recs[i].filter;
		g.kind = G_LIST;
		g.off = (uint32_t)(b->pool.len - n);
		g.len = n;
		*bound += n;
		goto push;
	}
	vp = malloc((size_t)n * SHOAL_FILTER_MAX_SET * sizeof(*vp));
	if (vp == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct shoal_key *k = &b->f[recs[i].filter].key;

		if (k->op == SHOAL_KEY_MOD)
			vp[nvp++] = (struct vpair){ k->b, recs[i].filter };
		else if (k->op == SHOAL_KEY_EQ)
			vp[nvp++] = (struct vpair){ k->a, recs[i].filter };
		else
			for (uint32_t j = 0; j < k->n_set; j++)
				vp[nvp++] = (struct vpair){ k->set[j], recs[i].filter };
	}
	qsort(vp, nvp, sizeof(*vp), vpair_cmp);
	/* An IN set may repeat a value: list its filter once. */
	for (uint32_t i = 0; i < nvp; i++)
		if (w == 0 || vpair_cmp(&vp[w - 1], &vp[i]) != 0)
			vp[w++] = vp[i];
	nvp = w;
	if (recs[0].cls == C_VALUE) {
		g.kind = G_HASH_EQ;
		ret = emit_hash(b, &g, vp, nvp, bound);
	} else if (g.a <= MOD_TABLE_MAX && g.a <= (uint64_t)MOD_TABLE_DENSITY * n) {
		g.kind = G_TABLE;
		ret = emit_table(b, &g, vp, nvp, bound);
	} else {
		g.kind = G_HASH_MOD;
		ret = emit_hash(b, &g, vp, nvp, bound);
	}
	free(vp);
	if (ret < 0)
		return ret;
push:
	dst = vec_add(&b->groups, 1);
	if (dst == NULL)
		return -ENOMEM;
	*dst = g;
	return 0;
}

static enum rec_class rec_class_of(const struct shoal_key *k)
{
	switch (k->op) {
	case SHOAL_KEY_ANY:
		return C_LIST;
	case SHOAL_KEY_MOD:
		return C_MOD;
	case SHOAL_KEY_EQ:
	case SHOAL_KEY_IN:
		return C_VALUE;
	default:
		return C_LINEAR;
	}
}

/*
 * Plan the index of one type: the filters tp[0 .. n) listing it (ascending),
 * split into at most GROUPS_MAX partitions of two filters or more, the
 * largest ones; the rest is linear.
 */
static int plan_type(struct builder *b, const struct tpair *tp, uint32_t n)
{
	struct rt_type ty = { .type = tp[0].type, .n_filters = n };
	uint32_t n_cand = 0, bound = 0, n_lin = 0, *lin;
	struct rt_type *slot;
	int ret;

	ty.group_first = (uint32_t)b->groups.len;
	if (b->mode != SHOAL__ROUTE_INDEXED) {
		bound = n;   /* flat and chain derive nothing, so any filter may match */
		goto push;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct shoal_key *k = &b->f[tp[i].filter].key;

		b->recs[i] = (struct rec){
			.a = k->op == SHOAL_KEY_MOD ? k->a : 0,
			.offset = k->width ? k->offset : 0,
			.filter = tp[i].filter,
			.width = k->width,
			.cls = (uint8_t)rec_class_of(k),
		};
	}
	qsort(b->recs, n, sizeof(*b->recs), rec_cmp);
	for (uint32_t i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && rec_same_part(&b->recs[i], &b->recs[j]); j++)
			;
		/* One filter gains nothing from a partition: a direct test costs the same. */
		if (b->recs[i].cls != C_LINEAR && j - i >= 2)
			b->cands[n_cand++] = (struct cand){ i, j - i };
	}
	if (n_cand > GROUPS_MAX) {
		qsort(b->cands, n_cand, sizeof(*b->cands), cand_by_size);
		n_cand = GROUPS_MAX;
		qsort(b->cands, n_cand, sizeof(*b->cands), cand_by_first);
	}
	for (uint32_t c = 0; c < n_cand; c++) {
		for (uint32_t i = 0; i < b->cands[c].count; i++)
			b->recs[b->cands[c].first + i].indexed = true;
		ret = emit_group(b, &b->recs[b->cands[c].first], b->cands[c].count, &bound);
		if (ret < 0)
			return ret;
	}
	ty.n_groups = n_cand;
	for (uint32_t i = 0; i < n; i++)
		n_lin += !b->recs[i].indexed;
	if (n_lin > 0) {
		lin = vec_add(&b->pool, n_lin);
		if (lin == NULL)
			return -ENOMEM;
		ty.lin_off = (uint32_t)(b->pool.len - n_lin);
		ty.lin_len = n_lin;
		for (uint32_t i = 0, w = 0; i < n; i++)
			if (!b->recs[i].indexed)
				lin[w++] = b->recs[i].filter;
		qsort(lin, n_lin, sizeof(*lin), u32_cmp);
		bound += n_lin;
	}
push:
	slot = vec_add(&b->types, 1);
	if (slot == NULL)
		return -ENOMEM;
	*slot = ty;
	b->max_matches = bound > b->max_matches ? bound : b->max_matches;
	return 0;
}

/* Copy the parts into one block and fill the type directory. */
static int layout(struct builder *b, const struct shoal_filter *filters, uint32_t n,
		  struct shoal__route_table **out)
{
	size_t n_types = b->types.len, dir_cap = 2, off, dir_off, groups_off, slots_off, pool_off,
	       filters_off;
	uint32_t dir_bits = 1;
	const struct rt_type *types = (const struct rt_type *)b->types.p;
	struct shoal__route_table *t;
	struct rt_type *dir;
	unsigned char *base;

	while (dir_cap < 2 * n_types) {
		dir_cap *= 2;
		dir_bits++;
	}
	off = shoal__align_up(sizeof(*t), 64);
	dir_off = off;
	off = shoal__align_up(off + dir_cap * sizeof(struct rt_type), 64);
	groups_off = off;
	off = shoal__align_up(off + b->groups.len * sizeof(struct rt_group), 64);
	slots_off = off;
	off = shoal__align_up(off + b->slots.len * sizeof(struct rt_slot), 64);
	pool_off = off;
	off = shoal__align_up(off + b->pool.len * sizeof(uint32_t), 64);
	filters_off = off;
	off = shoal__align_up(off + (size_t)n * sizeof(struct shoal_filter), 64);
	base = aligned_alloc(64, off);
	if (base == NULL)
		return -ENOMEM;
	t = (struct shoal__route_table *)base;
	dir = (struct rt_type *)(base + dir_off);
	memset(dir, 0, dir_cap * sizeof(*dir));
	for (size_t i = 0; i < n_types; i++) {
		uint32_t h = type_hash(types[i].type, dir_bits);

		while (dir[h].type != 0)
			h = (h + 1) & (uint32_t)(dir_cap - 1);
		dir[h] = types[i];
	}
	/* memcpy with a zero length still wants valid pointers: skip empty parts. */
	if (b->groups.len)
		memcpy(base + groups_off, b->groups.p, b->groups.len * sizeof(struct rt_group));
	if (b->slots.len)
		memcpy(base + slots_off, b->slots.p, b->slots.len * sizeof(struct rt_slot));
	if (b->pool.len)
		memcpy(base + pool_off, b->pool.p, b->pool.len * sizeof(uint32_t));
	if (n)
		memcpy(base + filters_off, filters, (size_t)n * sizeof(struct shoal_filter));
	*t = (struct shoal__route_table){
		.mode = (uint32_t)b->mode,
		.n_filters = n,
		.max_matches = b->max_matches,
		.dir_mask = (uint32_t)(dir_cap - 1),
		.dir_bits = dir_bits,
		.dir = dir,
		.groups = (const struct rt_group *)(base + groups_off),
		.slots = (const struct rt_slot *)(base + slots_off),
		.pool = (const uint32_t *)(base + pool_off),
		.filters = (const struct shoal_filter *)(base + filters_off),
	};
	*out = t;
	return 0;
}

int shoal__route_build(struct shoal__route_table **out, const struct shoal_filter *filters,
		       uint32_t n, int mode, struct shoal_err *err)
{
	struct builder b = {
		.f = filters,
		.mode = mode,
		.types = { .esz = sizeof(struct rt_type) },
		.groups = { .esz = sizeof(struct rt_group) },
		.slots = { .esz = sizeof(struct rt_slot) },
		.pool = { .esz = sizeof(uint32_t) },
	};
	struct shoal__route_table *t = NULL;
	struct tpair *tp = NULL;
	struct shoal_err why;
	size_t np = 0;
	int ret = -ENOMEM;

	if (mode != SHOAL__ROUTE_INDEXED && mode != SHOAL__ROUTE_FLAT &&
	    mode != SHOAL__ROUTE_CHAIN)
		return shoal__fail(err, -EINVAL, "unknown route table mode %d", mode);
	/* The chain recurses once per filter: keep it well inside a stack. */
	if (mode == SHOAL__ROUTE_CHAIN && n > SHOAL__ROUTE_CHAIN_MAX)
		return shoal__fail(err, -EINVAL, "%u filters, more than the chain baseline's "
				   "limit of %u", n, SHOAL__ROUTE_CHAIN_MAX);
	if (n > SHOAL__ROUTE_MAX_FILTERS)
		return shoal__fail(err, -EINVAL, "%u filters, more than the limit of %u", n,
				   SHOAL__ROUTE_MAX_FILTERS);
	for (uint32_t i = 0; i < n; i++)
		if (shoal_filter_validate(&filters[i], &why) < 0)
			return shoal__fail(err, -EINVAL, "filter #%u: %s", i, why.msg);
	/* One extra element each, so that n == 0 allocates too. */
	tp = malloc(((size_t)n * SHOAL_FILTER_MAX_TYPES + 1) * sizeof(*tp));
	b.recs = malloc(((size_t)n + 1) * sizeof(*b.recs));
	b.cands = malloc(((size_t)n + 1) * sizeof(*b.cands));
	if (tp == NULL || b.recs == NULL || b.cands == NULL)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		const struct shoal_filter *f = &filters[i];

		for (uint32_t j = 0; j < f->n_types; j++) {
			bool seen = false;

			/* A type listed twice routes to the filter once. */
			for (uint32_t k = 0; k < j; k++)
				seen |= f->types[k] == f->types[j];
			if (!seen)
				tp[np++] = (struct tpair){ f->types[j], i };
		}
	}
	qsort(tp, np, sizeof(*tp), tpair_cmp);
	for (size_t i = 0, j; i < np; i = j) {
		for (j = i + 1; j < np && tp[j].type == tp[i].type; j++)
			;
		ret = plan_type(&b, &tp[i], (uint32_t)(j - i));
		if (ret < 0)
			goto out;
	}
	ret = layout(&b, filters, n, &t);
	if (ret == 0 && mode == SHOAL__ROUTE_CHAIN && build_chain(t) < 0) {
		shoal__route_free(t);
		ret = -ENOMEM;
	}
	if (ret == 0)
		*out = t;   /* on failure *out is not written (route.h) */
out:
	if (ret < 0)
		shoal__fail(err, ret, "out of memory building a table of %u filters", n);
	free(tp);
	free(b.recs);
	free(b.cands);
	free(b.types.p);
	free(b.groups.p);
	free(b.slots.p);
	free(b.pool.p);
	return ret;
}
