/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: system files (runtime/config.c), the YAML a user hands to
 * `shoal run`, to `--check` and, on SIGHUP, to a running system.
 *
 * Input: the file's bytes, parsed as "fuzz.yaml" (programs with a relative
 * path resolve against the current folder; the seeds name /bin/true).
 *
 * Properties checked, beyond "no crash, no leak, no read outside the input"
 * (the input sits in a buffer of exactly its length):
 *  - a refusal returns -EINVAL or -ENOMEM, leaves no config, and its message
 *    names the file (an -EINVAL one with line and column);
 *  - an accepted config keeps every limit the router relies on: 1 to
 *    SHOAL_MAX_GROUPS groups with unique valid names, at most
 *    SHOAL__MAX_TYPES types with unique ids and names, workers and actors in
 *    range, argv[0] the program, a mailbox name that fits a segment name,
 *    and every route valid, naming one of the groups, its declared types
 *    small enough for that group's rings;
 *  - parsing is a function of the text: a second parse of the same bytes
 *    gives the same groups, types and routes.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <shoal/filter.h>
#include <shoal/ring.h>
#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/control/config.h"
#include "runtime/layout.h"
#include "tests/fuzz/fuzz.h"

static void check_accepted(const struct shoal__config *c)
{
	char seg[SHOAL_SEG_NAME_MAX];
	struct shoal_err err;

	FUZZ_CHECK(shoal__check_name(c->system, "system", &err) == 0);
	FUZZ_CHECK(c->n_groups >= 1 && c->n_groups <= SHOAL_MAX_GROUPS);
	FUZZ_CHECK(c->n_types <= SHOAL__MAX_TYPES);
	for (uint32_t i = 0; i < c->n_types; i++) {
		FUZZ_CHECK(c->types[i].id != 0);
		FUZZ_CHECK(c->types[i].max_size <= SHOAL_TYPE_MAX_SIZE);
		FUZZ_CHECK(shoal__check_name(c->types[i].name, "type", &err) == 0);
		for (uint32_t j = 0; j < i; j++)
			FUZZ_CHECK(c->types[j].id != c->types[i].id &&
				   strcmp(c->types[j].name, c->types[i].name) != 0);
	}
	for (uint32_t i = 0; i < c->n_groups; i++) {
		const struct shoal__cfg_group *g = &c->groups[i];

		FUZZ_CHECK(shoal__check_name(g->name, "group", &err) == 0);
		FUZZ_CHECK(g->program != NULL && g->argv != NULL && g->argv[0] != NULL);
		FUZZ_CHECK(strcmp(g->argv[0], g->program) == 0);
		FUZZ_CHECK(g->workers >= 1 && g->workers <= SHOAL_MAX_WORKERS);
		FUZZ_CHECK(g->actors >= 1 && g->actors <= SHOAL_MAX_ACTORS);
		FUZZ_CHECK(g->node >= -1 && g->node < SHOAL_MAX_NODES);
		FUZZ_CHECK(shoal__config_group(c, g->name) == (int)i);
		FUZZ_CHECK(shoal__name_mailbox(seg, c->system, g->name) == 0);
	}
	for (uint32_t i = 0; i < c->n_routes; i++) {
		const struct shoal_filter *f = &c->routes[i].f;
		const struct shoal__cfg_group *g;
		uint32_t in;

		FUZZ_CHECK(f->group < c->n_groups);
		FUZZ_CHECK(shoal_filter_validate(f, &err) == 0);
		g = &c->groups[f->group];
		in = g->mailbox ? g->mailbox : c->inbound_capacity ? c->inbound_capacity :
			SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT;
		for (uint32_t k = 0; k < f->n_types; k++)
			for (uint32_t j = 0; j < c->n_types; j++)
				if (c->types[j].id == f->types[k])
					FUZZ_CHECK(sizeof(struct shoal_envelope) +
						   c->types[j].max_size <=
						   in / 2 - SHOAL_RING_REC_HDR);
	}
}

static void check_same(const struct shoal__config *a, const struct shoal__config *b)
{
	FUZZ_CHECK(strcmp(a->system, b->system) == 0);
	FUZZ_CHECK(a->n_types == b->n_types && a->n_groups == b->n_groups &&
		   a->n_routes == b->n_routes);
	FUZZ_CHECK(a->n_types == 0 ||
		   memcmp(a->types, b->types, a->n_types * sizeof(*a->types)) == 0);
	for (uint32_t i = 0; i < a->n_groups; i++)
		FUZZ_CHECK(shoal__config_group_same(&a->groups[i], &b->groups[i]));
	for (uint32_t i = 0; i < a->n_routes; i++)
		FUZZ_CHECK(memcmp(&a->routes[i], &b->routes[i], sizeof(a->routes[i])) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shoal__config *c = NULL, *again = NULL;
	struct shoal_err err = { { 0 } };
	int ret = shoal__config_parse("fuzz.yaml", (const char *)data, size, &c, &err);

	if (ret < 0) {
		FUZZ_CHECK(ret == -EINVAL || ret == -ENOMEM);
		FUZZ_CHECK(c == NULL);
		FUZZ_CHECK(strncmp(err.msg, "fuzz.yaml:", 10) == 0);
		return 0;
	}
	FUZZ_CHECK(ret == 0 && c != NULL);
	check_accepted(c);
	FUZZ_CHECK(shoal__config_parse("fuzz.yaml", (const char *)data, size, &again, &err) == 0);
	check_same(c, again);
	shoal__config_free(again);
	shoal__config_free(c);
	return 0;
}
