/* SPDX-License-Identifier: MIT */
/*
 * Building a routing table from the flat filter vector: the per-type
 * index the matcher walks (layout and costs in table.h). Runs on the
 * router's control side at each publish; allocates, never on the hot path.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/filter.h>

#include "runtime/route/table.h"
#include "shm/util.h"


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
	uint32_t a = (uint32_t)g->a, start_off, one_off, longest = 0, *start, *one;
	int64_t list;

	if (vec_add(&b->pool, a + 1) == NULL)
		return -ENOMEM;
	start_off = (uint32_t)(b->pool.len - (a + 1));
	list = pool_append_vpairs(b, vp, n);
	if (list < 0)
		return (int)list;
	if (vec_add(&b->pool, a) == NULL)
		return -ENOMEM;
	one_off = (uint32_t)(b->pool.len - a);
	/* After the last append: no realloc since. */
	start = (uint32_t *)b->pool.p + start_off;
	one = (uint32_t *)b->pool.p + one_off;
	for (uint32_t r = 0, i = 0; r <= a; r++) {
		uint32_t j = i;

		while (j < n && vp[j].value == r)
			j++;
		start[r] = (uint32_t)list + i;
		if (r < a)
			one[r] = j - i == 1 ? vp[i].filter : SHOAL__ROUTE_NOT_ONE;
		longest = j - i > longest ? j - i : longest;
		i = j;
	}
	g->off = start_off;
	g->one = one_off;
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

/* The bits of a key of `width` bytes (0, 1, 2, 4 or 8) in a 64-bit word. */
static uint64_t quick_mask(uint32_t width)
{
	return width >= 8 ? UINT64_MAX : (UINT64_C(1) << (8 * width)) - 1;
}

const uint32_t shoal__route_not_one = SHOAL__ROUTE_NOT_ONE;

/*
 * The quick match's descriptor of type `ty` (route.h) in the built table
 * `t`: one partition by MOD (TABLE) or ANY (LIST), or one ANY or MOD
 * filter alone (LIST); any other shape, or a baseline mode, QUICK_NONE.
 */
static struct shoal__route_quick quick_of(const struct shoal__route_table *t,
					  const struct rt_type *ty)
{
	struct shoal__route_quick q = SHOAL__ROUTE_QUICK_NONE_INIT;
	const struct rt_group *g = &t->groups[ty->group_first];
	const struct shoal_key *k;

	q.pool = t->pool;

	if (t->mode != SHOAL__ROUTE_INDEXED)
		return q;
	if (ty->lin_len == 0 && ty->n_groups == 1 && (g->kind == G_TABLE || g->kind == G_LIST)) {
		q.offset = g->offset;
		q.width = g->width;
		q.mask = quick_mask(g->width);
		q.list = t->pool + g->off;
		if (g->kind == G_TABLE) {
			q.kind = SHOAL__ROUTE_QUICK_TABLE;
			q.a = g->a;
			q.one = t->pool + g->one;
		} else {
			q.kind = SHOAL__ROUTE_QUICK_LIST;
			q.len = g->len;
			q.one = g->len == 1 ? q.list : &shoal__route_not_one;
		}
		return q;
	}
	if (ty->lin_len != 1 || ty->n_groups != 0)
		return q;
	k = &t->filters[t->pool[ty->lin_off]].key;
	if (k->op != SHOAL_KEY_ANY && k->op != SHOAL_KEY_MOD)
		return q;
	q.kind = SHOAL__ROUTE_QUICK_LIST;
	q.offset = k->width ? k->offset : 0;
	q.width = k->width;
	q.mask = quick_mask(k->width);
	q.list = t->pool + ty->lin_off;
	q.one = q.list;
	q.len = 1;
	/* MOD 1 (its residue is 0: shoal_filter_validate()) takes every
	 * readable key: no division. */
	if (k->op == SHOAL_KEY_MOD && k->a != 1) {
		q.a = k->a;
		q.b = k->b;
	}
	return q;
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
	for (size_t i = 0; i < dir_cap; i++)
		if (dir[i].type != 0)
			dir[i].quick = quick_of(t, &dir[i]);
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
	if (ret == 0 && mode == SHOAL__ROUTE_CHAIN && shoal__route_chain_link(t) < 0) {
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
