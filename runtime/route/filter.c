/* SPDX-License-Identifier: MIT */
/*
 * Filters as users write them: validation (shoal_filter_validate) and key
 * extraction (shoal_filter_key), the public predicates of shoal/filter.h.
 * The table built from them is in index.c, matching in match.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/filter.h>

#include "runtime/route/table.h"
#include "shm/util.h"

static const char *const op_names[] = { "ANY", "EQ", "IN", "RANGE", "MOD" };

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
	if (f->mode == SHOAL_ROUTE_MULTICAST)
		return shoal__fail(err, -EINVAL, "route mode MULTICAST is for in-group outcomes: "
				   "a filter has no slots to send to");
	if (f->mode > SHOAL_ROUTE_DISCARD)
		return shoal__fail(err, -EINVAL, "unknown route mode %u", f->mode);
	if (f->reserved != 0)
		return shoal__fail(err, -EINVAL, "reserved byte is %u, must be 0", f->reserved);
	if (!width_valid(k->width))
		return shoal__fail(err, -EINVAL, "key width %u is not 0, 1, 2, 4 or 8", k->width);
	if (k->width == 0 && k->op != SHOAL_KEY_ANY)
		return shoal__fail(err, -EINVAL, "key op %s needs a key, but the key width is 0",
				   op_names[k->op]);
	if (k->width == 0 && f->mode == SHOAL_ROUTE_UNICAST)
		return shoal__fail(err, -EINVAL, "route mode UNICAST needs a key, but the key "
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
