/* SPDX-License-Identifier: MIT */
/*
 * Message filters: how the router decides which groups receive a routed
 * message. A filter is plain data (it comes from configs and from other
 * processes, so it is never a function pointer): a set of message types, an
 * optional predicate on a key read from the payload, and an outcome.
 *
 * The router keeps every filter of the system in one flat vector and derives
 * an index from it when it publishes (see docs/design.md, "Routing").
 */
#ifndef SHOAL_FILTER_H
#define SHOAL_FILTER_H

#include <stdint.h>

#include <shoal/api.h>

#define SHOAL_FILTER_MAX_TYPES 8   /* message types one filter matches */
#define SHOAL_FILTER_MAX_SET 8     /* values of a SHOAL_KEY_IN predicate */

/* Predicate on the key. */
enum shoal_key_op {
	SHOAL_KEY_ANY = 0,   /* no predicate: every message of the types matches */
	SHOAL_KEY_EQ,        /* key == a */
	SHOAL_KEY_IN,        /* key is one of set[0 .. n_set) */
	SHOAL_KEY_RANGE,     /* a <= key <= b */
	SHOAL_KEY_MOD,       /* key % a == b  (a > 0, b < a) */
};

/*
 * Where a message goes among the actors of a group. One set of names for
 * both places that decide it: a filter's `mode` (the router, for each
 * filter a message matches) and an in-group router's outcome `kind`
 * (struct shoal_outcome in shoal/group.h, for a message sent to the group
 * as a whole). The values of the first four are fixed: filters cross the
 * control socket, and a config's `deliver:` words name them in this order.
 */
enum shoal_route {
	SHOAL_ROUTE_GROUP = 0,     /* filters only: the group decides (its in-group router;
				    * without one, actor 0) */
	SHOAL_ROUTE_UNICAST = 1,   /* to one actor: key % actors of the group for a filter
				    * (which must read a key), slots[0] for an outcome */
	SHOAL_ROUTE_BROADCAST = 2, /* to every actor of the group */
	SHOAL_ROUTE_DISCARD = 3,   /* to nobody; counted (`discarded`) */
	SHOAL_ROUTE_MULTICAST = 4, /* outcomes only: to slots[0 .. n) */
};

/*
 * The key: `width` bytes (1, 2, 4 or 8; 0 when the filter reads no key) at
 * byte `offset` of the payload, little-endian, zero-extended to 64 bits. A
 * message too short to hold the key does not match a filter that reads it.
 */
struct shoal_key {
	uint32_t offset;
	uint8_t width;
	uint8_t op;          /* enum shoal_key_op */
	uint16_t n_set;
	uint64_t a;
	uint64_t b;
	uint64_t set[SHOAL_FILTER_MAX_SET];
};

struct shoal_filter {
	uint32_t types[SHOAL_FILTER_MAX_TYPES];
	uint32_t n_types;
	struct shoal_key key;
	uint16_t group;      /* destination group id */
	uint8_t mode;        /* enum shoal_route, not MULTICAST */
	uint8_t reserved;
	uint32_t id;         /* assigned by the router; unique while the filter exists */
};

/*
 * Check a filter for internal consistency: 1..SHOAL_FILTER_MAX_TYPES types,
 * no type 0, a known op, a mode a filter may have (GROUP, UNICAST, BROADCAST or
 * DISCARD), a key width of 0/1/2/4/8 (non-zero whenever the op or the mode
 * needs a key), MOD with a > 0 and b < a, RANGE with
 * a <= b, IN with 1..SHOAL_FILTER_MAX_SET values, and `reserved` zero.
 * Returns 0 or -EINVAL with the reason in *err. Never allocates.
 */
SHOAL_API int shoal_filter_validate(const struct shoal_filter *f, struct shoal_err *err);

/*
 * Read the key of `f` from a payload. Returns 0; -ERANGE if the payload is
 * too short; -EINVAL for a key width validation rejects (the filter may not
 * have been validated). Width 0 reads no key and yields 0.
 */
SHOAL_API int shoal_filter_key(const struct shoal_filter *f, const void *payload, uint32_t len,
			       uint64_t *key);

/*
 * Concurrency: shoal_filter_validate() and shoal_filter_key() keep no
 * state: any number of calls may run together in any threads or
 * processes, as long as nobody writes the filter (or payload) meanwhile.
 */

#endif
