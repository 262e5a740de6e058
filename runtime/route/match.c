/* SPDX-License-Identifier: MIT */
/*
 * Matching a message against a built routing table (layout in table.h):
 * the index, and the two baselines the benchmarks compare it with (a flat
 * scan of the vector, and elfo's old nested chain of calls). Hot path: no
 * allocation, lock, system call or recursion (except the CHAIN baseline,
 * whose recursion is its point); read-only and wait-free.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/filter.h>

#include "runtime/route/table.h"
#include "shm/util.h"


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

/* The run group `g` yields for key `key`; false when it is empty. */
static inline bool group_run(const struct shoal__route_table *t, const struct rt_group *g,
			     uint64_t key, struct run *r)
{
	const struct rt_slot *s;

	switch (g->kind) {
	case G_LIST:
		r->p = t->pool + g->off;
		r->end = r->p + g->len;
		break;
	case G_TABLE: {
		const uint32_t *start = t->pool + g->off + key % g->a;

		r->p = t->pool + start[0];
		r->end = t->pool + start[1];
		break;
	}
	default:
		s = slot_find(t->slots + g->off, g->len, g->kind == G_HASH_MOD ? key % g->a : key);
		if (s == NULL)
			return false;
		r->p = t->pool + s->off;
		r->end = r->p + s->len;
		break;
	}
	return r->p != r->end;
}

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
		if (g->offset != koff || g->width != kw) {
			koff = g->offset;
			kw = g->width;
			readable = key_read(p, len, koff, kw, &key);
		}
		if (readable && group_run(t, g, key, &runs[nr]))
			nr++;
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
struct shoal__chain_link {
	uint32_t (*call)(const struct shoal__chain_link *self, uint32_t type, const unsigned char *p,
			 uint32_t len, uint32_t *out, uint32_t max);
	const struct shoal__chain_link *prev;
	const struct shoal_filter *f;
	uint32_t index;
};

static uint32_t chain_call(const struct shoal__chain_link *self, uint32_t type, const unsigned char *p,
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

/* More than one source for the type: merge them into out[0 .. max). */
static __attribute__((noinline)) uint32_t match_merge(const struct shoal__route_table *t, const struct rt_type *ty,
			    const unsigned char *p, uint32_t len, uint32_t *out, uint32_t max)
{
	const uint32_t *lin = t->pool + ty->lin_off, *lin_end = lin + ty->lin_len;
	struct run runs[GROUPS_MAX];
	uint32_t nr = collect_runs(t, ty, p, len, runs), n = 0, next;

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

/* The baselines, and a caller with no room: out of the indexed path's way. */
static __attribute__((noinline)) uint32_t match_other(const struct shoal__route_table *t,
						      uint32_t type, const unsigned char *p,
						      uint32_t len, uint32_t *out, uint32_t max)
{
	if (max == 0)
		return 0;
	if (t->mode == SHOAL__ROUTE_FLAT)
		return match_flat(t, type, p, len, out, max);
	return t->n_filters ? t->chain[t->n_filters - 1].call(&t->chain[t->n_filters - 1], type, p,
							       len, out, max)
			    : 0;
}

uint32_t shoal__route_match_ref(const struct shoal__route_table *t, uint32_t type,
				const void *payload, uint32_t len, uint32_t *buf, uint32_t max,
				const uint32_t **res)
{
	const unsigned char *p = payload;
	const struct rt_type *ty;
	const struct rt_group *g;
	struct run r;
	uint64_t key;

	*res = buf;
	if (SHOAL_UNLIKELY(t->mode != SHOAL__ROUTE_INDEXED || max == 0))
		return match_other(t, type, p, len, buf, max);
	ty = type_find(t, type);
	if (ty == NULL)
		return 0;
	/* Most types meet one source: one partition, or one filter alone.
	 * Its run is the result, already ascending: point at it. */
	if (SHOAL_LIKELY(ty->lin_len == 0 && ty->n_groups == 1)) {
		g = t->groups + ty->group_first;
		if (!key_read(p, len, g->offset, g->width, &key) || !group_run(t, g, key, &r))
			return 0;
		*res = r.p;
		return (uint32_t)(r.end - r.p) < max ? (uint32_t)(r.end - r.p) : max;
	}
	if (ty->lin_len == 1 && ty->n_groups == 0) {
		*res = t->pool + ty->lin_off;
		return filter_pass(&t->filters[**res], p, len) ? 1 : 0;
	}
	return match_merge(t, ty, p, len, buf, max);
}

uint32_t shoal__route_match(const struct shoal__route_table *t, uint32_t type,
			    const void *payload, uint32_t len, uint32_t *out, uint32_t max)
{
	const uint32_t *res;
	uint32_t n = shoal__route_match_ref(t, type, payload, len, out, max, &res);

	if (res != out)
		memcpy(out, res, n * sizeof(*out));
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

const struct shoal__route_quick *shoal__route_quick(const struct shoal__route_table *t,
						    uint32_t type)
{
	const struct rt_type *ty = type_find(t, type);

	return ty != NULL ? &ty->quick : NULL;
}

const struct shoal__route_quick shoal__route_no_quick = SHOAL__ROUTE_QUICK_NONE_INIT;

void shoal__route_memo_set(const struct shoal__route_table *t, struct shoal__route_memo *m,
			   uint32_t type)
{
	const struct shoal__route_quick *q = shoal__route_quick(t, type);

	m->q = q != NULL ? q : &shoal__route_no_quick;
	m->type = type;
}

const struct shoal_filter *shoal__route_filters(const struct shoal__route_table *t)
{
	return t->filters;
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
int shoal__route_chain_link(struct shoal__route_table *t)
{
	t->chain = calloc(t->n_filters + 1, sizeof(*t->chain));
	if (t->chain == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n_filters; i++)
		t->chain[i] = (struct shoal__chain_link){ chain_call, i ? &t->chain[i - 1] : NULL,
						   &t->filters[i], i };
	return 0;
}

/*
 * Building. The parts grow in temporary vectors whose elements refer to each
 * other by index; the last step copies them into the table's one block.
 */
