/* SPDX-License-Identifier: MIT */
/*
 * The system-file loader (runtime/config.c), in process: the order of the
 * top-level keys does not matter, limits are refused with a message naming
 * them, and every refused file frees what its parse allocated (the ASan
 * setup runs this with detect_leaks=1). `shoal run` itself is in run_test.c.
 */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/bridge/view.h"
#include "runtime/control/config.h"
#include "runtime/layout.h"
#include "tests/testutil.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const char types_yaml[] =
	"types:\n"
	"  - { id: 3, name: work, max_size: 64 }\n"
	"  - { id: 7, name: ping, max_size: 8 }\n";

static const char groups_yaml[] =
	"groups:\n"
	"  - name: a\n    program: /bin/true\n    args: [x, y]\n"
	"    routes: [ { types: [work, ping] }, { types: [7], deliver: broadcast } ]\n"
	"  - name: b\n    program: /bin/true\n    workers: 2\n"
	"    routes: [ { types: work, key: { offset: 0, width: 8 }, match: { mod: [2, 1] } } ]\n";

static struct shoal__config *parse_ok(const char *text)
{
	struct shoal__config *c = NULL;
	struct shoal_err err = { { 0 } };
	int ret = shoal__config_parse("t.yaml", text, strlen(text), &c, &err);

	if (ret != 0)
		fail_msg("parse failed (%d): %s\n--- file:\n%s", ret, err.msg, text);
	assert_non_null(c);
	return c;
}

/* Refused with -EINVAL, no config, and `reason` in the message. */
static void parse_refused(const char *text, const char *reason)
{
	struct shoal__config *c = NULL;
	struct shoal_err err = { { 0 } };
	int ret = shoal__config_parse("t.yaml", text, strlen(text), &c, &err);

	if (ret != -EINVAL || c != NULL || strstr(err.msg, reason) == NULL)
		fail_msg("got %d '%s', expected -EINVAL and '%s'", ret, err.msg, reason);
}

static void config_groups_before_types_parses_as_types_first(void **state)
{
	char a[2048], b[2048];
	struct shoal__config *x, *y;

	(void)state;
	snprintf(a, sizeof(a), "system: s\n%s%s", types_yaml, groups_yaml);
	snprintf(b, sizeof(b), "%s%ssystem: s\n", groups_yaml, types_yaml);
	x = parse_ok(a);
	y = parse_ok(b);
	assert_string_equal(x->system, y->system);
	assert_int_equal(x->n_types, 2);
	assert_int_equal(y->n_types, x->n_types);
	assert_memory_equal(x->types, y->types, x->n_types * sizeof(*x->types));
	assert_int_equal(x->n_groups, 2);
	assert_int_equal(y->n_groups, x->n_groups);
	for (uint32_t i = 0; i < x->n_groups; i++)
		assert_true(shoal__config_group_same(&x->groups[i], &y->groups[i]));
	assert_int_equal(x->n_routes, 3);
	assert_int_equal(y->n_routes, x->n_routes);
	for (uint32_t i = 0; i < x->n_routes; i++)
		assert_memory_equal(&x->routes[i].f, &y->routes[i].f, sizeof(x->routes[i].f));
	/* The names resolved to the declared ids. */
	assert_int_equal(y->routes[0].f.types[0], 3);
	assert_int_equal(y->routes[0].f.types[1], 7);
	shoal__config_free(x);
	shoal__config_free(y);
}

static char *groups_file(unsigned n)
{
	size_t cap = 64 + (size_t)n * 48;
	char *text = malloc(cap);
	size_t len;

	assert_non_null(text);
	len = (size_t)snprintf(text, cap, "system: s\ngroups:\n");
	for (unsigned i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"  - { name: g%u, program: /bin/true }\n", i);
	return text;
}

static void config_more_groups_than_the_limit_are_refused(void **state)
{
	char *text = groups_file(SHOAL_MAX_GROUPS);
	struct shoal__config *c;

	(void)state;
	c = parse_ok(text);
	assert_int_equal(c->n_groups, SHOAL_MAX_GROUPS);
	shoal__config_free(c);
	free(text);
	text = groups_file(SHOAL_MAX_GROUPS + 1);
	parse_refused(text, "t.yaml:3:3: groups has 257 entries, more than the limit of 256");
	free(text);
}

/* Each refused after the parse allocated something (arguments, types,
 * routes, environment); a leak fails this under the ASan setup. */
static const struct {
	const char *yaml;
	const char *reason;
} refused_after_allocating[] = {
	{ "system: s\ngroups:\n  - name: a\n    args: [x, y]\n    program: /bin/true\n"
	  "    actors: x\n", "actors must be a whole number" },
	{ "system: s\ngroups:\n  - name: a\n    args: [x, [y]]\n    program: /bin/true\n",
	  "an argument must be a scalar" },
	{ "system: s\ntypes: []\ntypes: []\ngroups:\n  - { name: a, program: /bin/true }\n",
	  "key 'types' appears twice" },
	{ "system: s\ntypes: [ { id: 1, name: a, max_size: 8 }, { id: 1, name: b, max_size: 8 } ]\n"
	  "groups:\n  - { name: a, program: /bin/true }\n", "repeats the id or name" },
	{ "system: s\ngroups:\n  - { name: a, program: /bin/true, routes: [ { types: [1] } ] }\n"
	  "  - { name: b, program: /bin/true, routes: [ { types: [1] }, { types: [x] } ] }\n",
	  "route type 'x' is neither" },
	{ "system: s\ngroups:\n  - name: a\n    program: /bin/true\n"
	  "    env: { A: b, C: [d] }\n", "an env value must be a scalar" },
	{ "system: s\ngroups:\n  - { name: a, program: /bin/true, env: { A: b } }\n"
	  "  - { name: a, program: /bin/true }\n", "used twice" },
	{ "groups:\n  - { name: a, program: /bin/true, args: [x] }\n", "has no 'system'" },
	{ "system: [a\n", "flow sequence" },
};

static void config_refused_file_frees_what_it_parsed(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(refused_after_allocating); i++)
		parse_refused(refused_after_allocating[i].yaml, refused_after_allocating[i].reason);
}

/* shoal.<system>.g.<group> must fit a segment name (63 characters). */
static void config_mailbox_name_too_long_for_a_segment_is_refused(void **state)
{
	static const char sys31[] = "sssssssssssssssssssssssssssssss";
	static const char grp23[] = "ggggggggggggggggggggggg", grp24[] = "gggggggggggggggggggggggg";
	char text[512];
	struct shoal__config *c;

	(void)state;
	assert_int_equal(strlen(sys31) + strlen(grp23) + 9, SHOAL_SEG_NAME_MAX - 1);
	snprintf(text, sizeof(text), "system: %s\ngroups:\n  - { name: %s, program: /bin/true }\n",
		 sys31, grp23);
	c = parse_ok(text);
	shoal__config_free(c);
	/* 'groups' first: the check waits for the system name. */
	snprintf(text, sizeof(text), "groups:\n  - { name: a, program: /bin/true }\n"
		 "  - { name: %s, program: /bin/true }\nsystem: %s\n", grp24, sys31);
	parse_refused(text, "t.yaml:3:5: group gggggggggggggggggggggggg: its mailbox name "
		      "shoal.sssssssssssssssssssssssssssssss.g.gggggggggggggggggggggggg would be "
		      "64 characters, more than the 63 of a segment name");
}

/* A ring of C data bytes holds records of at most C / 2 - 8 bytes, and a
 * message takes its 56-byte envelope besides its payload. */
static const struct {
	const char *router, *mailbox;
	unsigned max_size;
	const char *reason;       /* NULL: accepted */
} type_fits[] = {
	{ "", "4KiB", 4096 / 2 - 8 - 56, NULL },
	{ "", "4KiB", 4096 / 2 - 8 - 56 + 1, "t.yaml:11:9: group b: type 3 'work' (max_size 1985) "
	  "does not fit its rings of 4096 bytes (mailbox), which carry at most 1984: all would be "
	  "dropped as malformed; set mailbox: 8192 or more" },
	{ "router: { inbound_capacity: 64KiB, uplink_capacity: 64KiB }\n", "", 65536,
	  "rings of 65536 bytes (router.inbound_capacity), which carry at most 32704" },
	{ "", "", 1024 * 1024, "rings of 262144 bytes (the default), which carry at most 131008: "
	  "all would be dropped as malformed; set mailbox: 4194304 or more" },
	{ "", "4MiB", 1024 * 1024, NULL },
};

static void config_type_larger_than_the_group_mailbox_is_refused(void **state)
{
	char text[1024], mailbox[64];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(type_fits); i++) {
		snprintf(mailbox, sizeof(mailbox), "    mailbox: %s\n", type_fits[i].mailbox);
		snprintf(text, sizeof(text), "system: s\n%stypes:\n"
			 "  - { id: 3, name: work, max_size: %u }\n"
			 "groups:\n  - { name: a, program: /bin/true, routes: [ { types: [1] } ] }\n"
			 "  - name: b\n    program: /bin/true\n%s"
			 "    routes:\n      - { types: [7] }\n      - { types: [work] }\n",
			 type_fits[i].router, type_fits[i].max_size,
			 type_fits[i].mailbox[0] ? mailbox : "");
		if (type_fits[i].reason == NULL) {
			shoal__config_free(parse_ok(text));
			continue;
		}
		parse_refused(text, "group b: type 3 'work'");
		parse_refused(text, type_fits[i].reason);
	}
}

/* 256 groups of 16 workers with 1 GiB rings: 32 TiB, more than any
 * shared-memory folder holds. */
static void config_more_shared_memory_than_free_is_refused(void **state)
{
	size_t cap = 64 + (size_t)SHOAL_MAX_GROUPS * 96, len;
	char *text = malloc(cap);
	struct shoal__config_space sp = { 0 };
	struct shoal__config *c;
	struct shoal_err err = { { 0 } };

	(void)state;
	assert_non_null(text);
	len = (size_t)snprintf(text, cap, "system: s\ngroups:\n");
	for (unsigned i = 0; i < SHOAL_MAX_GROUPS; i++)
		len += (size_t)snprintf(text + len, cap - len, "  - { name: g%u, program: /bin/true, "
					"workers: 16, mailbox: 1024MiB }\n", i);
	c = parse_ok(text);
	free(text);
	assert_true(shoal__config_shm_bytes(c, NULL, 4096) >
		    (uint64_t)SHOAL_MAX_GROUPS * 16 * SHOAL_MAX_NODES * (UINT64_C(1) << 30));
	/* A reload that adds no group needs nothing more. */
	assert_int_equal(shoal__config_shm_bytes(c, c, 4096), 0);
	assert_int_equal(shoal__config_check_space(c, NULL, &sp, &err), -ENOSPC);
	assert_true(sp.need > sp.avail);
	if (strstr(err.msg, "system s needs ") == NULL ||
	    strstr(err.msg, " GiB of shared memory for its segments, but ") == NULL ||
	    strstr(err.msg, sp.dir) == NULL)
		fail_msg("message: %s", err.msg);
	assert_int_equal(shoal__config_check_space(c, c, &sp, &err), 0);
	shoal__config_free(c);
}


/* Two hosts, groups after them or before: both parse to the same. */
static const char hosts_yaml[] =
	"hosts:\n"
	"  down_after: 3s\n"
	"  link: { window: 2MiB, flush: 8KiB, flush_deadline: 20us, keepalive: 50ms,\n"
	"          dead_after: 500ms, backoff: 10ms, max_backoff: 200ms, spin: 0us }\n"
	"  list:\n"
	"    - { name: a, listen: 169.254.10.1:7400 }\n"
	"    - { name: b, listen: '0.0.0.0:7400', reach: '169.254.10.2:7400' }\n"
	"    - { name: c6, listen: '[fe80::1]:7401' }\n";

static const char hosts_groups_yaml[] =
	"groups:\n"
	"  - { name: p, program: /bin/true, host: a }\n"
	"  - { name: q, program: /bin/true, host: b }\n";

static void config_hosts_parse_with_their_links_and_groups(void **state)
{
	char a[2048], b[2048];
	struct shoal__config *x, *y;
	struct shoal_err err = { { 0 } };
	int host;

	(void)state;
	snprintf(a, sizeof(a), "system: s\n%s%s", hosts_yaml, hosts_groups_yaml);
	snprintf(b, sizeof(b), "system: s\n%s%s", hosts_groups_yaml, hosts_yaml);
	x = parse_ok(a);
	y = parse_ok(b);
	assert_int_equal(x->n_hosts, 3);
	assert_string_equal(x->hosts[0].name, "a");
	assert_string_equal(x->hosts[0].reach, "169.254.10.1:7400");
	assert_string_equal(x->hosts[1].listen, "0.0.0.0:7400");
	assert_string_equal(x->hosts[1].reach, "169.254.10.2:7400");
	assert_string_equal(x->hosts[2].reach, "[fe80::1]:7401");
	assert_int_equal(x->down_after_ns, UINT64_C(3000000000));
	assert_int_equal(x->link.window, 2u << 20);
	assert_int_equal(x->link.flush_bytes, 8u << 10);
	assert_int_equal(x->link.flush_ns, 20000);
	assert_int_equal(x->link.keepalive_ns, 50000000);
	assert_int_equal(x->link.dead_ns, 500000000);
	assert_int_equal(x->link.backoff_ns, 10000000);
	assert_int_equal(x->link.max_backoff_ns, 200000000);
	assert_int_equal(x->link.spin_ns, 0);   /* given: no spin, not the default */
	assert_int_equal(x->groups[0].host, 0);
	assert_int_equal(x->groups[1].host, 1);
	assert_int_equal(y->n_hosts, 3);
	for (uint32_t i = 0; i < x->n_hosts; i++) {
		assert_string_equal(x->hosts[i].name, y->hosts[i].name);
		assert_string_equal(x->hosts[i].listen, y->hosts[i].listen);
		assert_string_equal(x->hosts[i].reach, y->hosts[i].reach);
	}
	assert_memory_equal(&x->link, &y->link, sizeof(x->link));
	for (uint32_t i = 0; i < x->n_groups; i++)
		assert_true(shoal__config_group_same(&x->groups[i], &y->groups[i]));
	/* --check counts what the router of a host with peers makes: every
	 * mailbox with room for its ring from the bridge, and the bridge's
	 * own (one worker, its direct rings of the inbound capacity), which
	 * the file does not list, and the bridge's link view (a row per other
	 * host); a reload adds no bridge. */
	{
		const uint32_t in = SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT;
		const uint32_t up = SHOAL_ROUTER_UPLINK_CAPACITY_DEFAULT;
		const uint32_t dc = SHOAL_ROUTER_DIRECT_CAPACITY_DEFAULT;
		uint64_t want = shoal__system_seg_size(4096);

		for (uint32_t i = 0; i < x->n_groups; i++)
			want += (shoal__mailbox_size(x->groups[i].workers, up, in, dc, in, false) +
				 4095) / 4096 * 4096;
		want += (shoal__mailbox_size(1, up, in, dc, in, true) + 4095) / 4096 * 4096;
		want += (shoal__links_file_size(x->n_hosts - 1) + 4095) / 4096 * 4096;
		assert_int_equal(shoal__config_shm_bytes(x, NULL, 4096), want);
		assert_int_equal(shoal__config_shm_bytes(x, x, 4096), 0);
	}
	/* --host: a listed name, and only one. */
	assert_int_equal(shoal__config_this_host(x, "b", &host, &err), 0);
	assert_int_equal(host, 1);
	assert_true(shoal__config_runs(x, host, 1));
	assert_false(shoal__config_runs(x, host, 0));
	assert_int_equal(shoal__config_this_host(x, "d", &host, &err), -ENXIO);
	assert_non_null(strstr(err.msg, "has no host 'd' (its hosts: a, b, c6)"));
	assert_int_equal(shoal__config_this_host(x, NULL, &host, &err), -ENXIO);
	assert_non_null(strstr(err.msg, "say which one this is with --host NAME"));
	shoal__config_free(x);
	shoal__config_free(y);
}

/* router.yield: none unless given, at most a second, where it stands. */
static void config_router_yield_is_read_and_bounded(void **state)
{
	static const char groups[] = "groups:\n  - { name: a, program: /bin/true }\n";
	char text[256];
	struct shoal__config *c;

	(void)state;
	snprintf(text, sizeof(text), "system: s\n%s", groups);
	c = parse_ok(text);
	assert_int_equal(c->yield_ns, 0);
	shoal__config_free(c);
	snprintf(text, sizeof(text), "system: s\nrouter: { spin: 5us, yield: 200us }\n%s", groups);
	c = parse_ok(text);
	assert_int_equal(c->spin_ns, 5000);
	assert_int_equal(c->yield_ns, 200000);
	shoal__config_free(c);
	snprintf(text, sizeof(text), "system: s\nrouter: { yield: 1s }\n%s", groups);
	c = parse_ok(text);
	assert_int_equal(c->yield_ns, UINT64_C(1000000000));
	shoal__config_free(c);
	snprintf(text, sizeof(text), "system: s\nrouter: { yield: 1001ms }\n%s", groups);
	parse_refused(text, "t.yaml:2:18: router.yield is longer than 1s");
	snprintf(text, sizeof(text), "system: s\nrouter: { yield: fast }\n%s", groups);
	parse_refused(text, "t.yaml:2:18: router.yield must be a number with an optional unit, "
		      "not 'fast'");
}

/* router.stream: auto unless told, on or off as told, nothing else. */
static void config_router_stream_is_one_of_three_words(void **state)
{
	static const char groups[] = "groups:\n  - { name: a, program: /bin/true }\n";
	static const char *const words[] = { "auto", "on", "off" };
	char text[256];
	struct shoal__config *c;

	(void)state;
	snprintf(text, sizeof(text), "system: s\n%s", groups);
	c = parse_ok(text);
	assert_int_equal(c->stream, SHOAL_STREAM_AUTO);
	shoal__config_free(c);
	for (int i = 0; i < 3; i++) {
		snprintf(text, sizeof(text), "system: s\nrouter: { stream: %s }\n%s", words[i],
			 groups);
		c = parse_ok(text);
		assert_int_equal(c->stream, i == 0 ? SHOAL_STREAM_AUTO :
					    i == 1 ? SHOAL_STREAM_ON : SHOAL_STREAM_OFF);
		shoal__config_free(c);
	}
	snprintf(text, sizeof(text), "system: s\nrouter: { stream: yes }\n%s", groups);
	parse_refused(text, "t.yaml:2:19: router.stream is 'yes', expected one of: auto, on, off");
}

/* A bridge spins SHOAL__CFG_LINK_SPIN_NS after work unless told otherwise;
 * the link layer's options not given stay 0 (its defaults). */
static void config_hosts_link_spin_has_its_default(void **state)
{
	struct shoal__config *c;

	(void)state;
	c = parse_ok("system: s\nhosts:\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n"
		     "groups:\n  - { name: p, program: /bin/true, host: a }\n");
	assert_int_equal(c->link.spin_ns, SHOAL__CFG_LINK_SPIN_NS);
	assert_int_equal(c->link.spin_ns, 200000);
	assert_int_equal(c->link.flush_ns, 0);
	shoal__config_free(c);
	c = parse_ok("system: s\nhosts:\n  link: { spin: 1s }\n  list:\n"
		     "    - { name: a, listen: 1.2.3.4:1 }\n"
		     "groups:\n  - { name: p, program: /bin/true, host: a }\n");
	assert_int_equal(c->link.spin_ns, UINT64_C(1000000000));
	shoal__config_free(c);
}

static void config_without_hosts_runs_every_group_and_refuses_host(void **state)
{
	struct shoal__config *c;
	struct shoal_err err = { { 0 } };
	int host = 7;

	(void)state;
	c = parse_ok("system: s\ngroups:\n  - { name: p, program: /bin/true }\n");
	assert_int_equal(c->n_hosts, 0);
	assert_null(c->hosts);
	assert_int_equal(c->groups[0].host, -1);
	assert_int_equal(shoal__config_this_host(c, NULL, &host, &err), 0);
	assert_int_equal(host, -1);
	assert_true(shoal__config_runs(c, host, 0));
	assert_int_equal(shoal__config_this_host(c, "a", &host, &err), -ENXIO);
	assert_non_null(strstr(err.msg, "lists no hosts: run it without --host"));
	shoal__config_free(c);
}

/*
 * cpus: lists of CPUs up to 8191, on any machine: held whole in a libnuma
 * set, compared set by set on reload. Whether this machine has them is
 * checked per host at run (shoal__config_check_cpus()), with the place.
 */
static void config_cpus_past_63_parse_and_are_checked_per_host(void **state)
{
	static const char text[] =
		"system: s\n"
		"hosts:\n  list:\n    - { name: big, listen: \"10.0.0.1:7000\" }\n"
		"    - { name: small, listen: \"10.0.0.2:7000\" }\n"
		"groups:\n"
		"  - { name: a, program: /bin/true, host: big, cpus: \"0-3,64,130-131,1023\" }\n"
		"  - { name: b, program: /bin/true, host: small, cpus: \"0\" }\n"
		"  - { name: c, program: /bin/true, host: small }\n";
	struct shoal__config *c, *d;
	struct shoal_err err = { { 0 } };
	unsigned n = 0;

	(void)state;
	c = parse_ok(text);
	d = parse_ok(text);
	for (unsigned cpu = 0; cpu < 8192; cpu++)
		n += numa_bitmask_isbitset(c->groups[0].cpus, cpu) != 0;
	assert_int_equal(n, 4 + 1 + 2 + 1);
	assert_true(numa_bitmask_isbitset(c->groups[0].cpus, 64));
	assert_true(numa_bitmask_isbitset(c->groups[0].cpus, 131));
	assert_true(numa_bitmask_isbitset(c->groups[0].cpus, 1023));
	assert_false(numa_bitmask_isbitset(c->groups[0].cpus, 63));
	assert_null(c->groups[2].cpus);
	assert_int_equal(c->groups[0].cpus_line, 7);
	assert_int_equal(c->groups[0].cpus_col, 53);
	assert_true(shoal__config_group_same(&c->groups[0], &d->groups[0]));
	assert_false(shoal__config_group_same(&c->groups[0], &d->groups[1]));
	numa_bitmask_clearbit(d->groups[0].cpus, 1023);
	assert_false(shoal__config_group_same(&c->groups[0], &d->groups[0]));
	/* Host small runs b and c, whose CPUs every machine has. */
	assert_int_equal(shoal__config_check_cpus(c, 1, &err), 0);
	if (sysconf(_SC_NPROCESSORS_CONF) <= 1023) {
		assert_int_equal(shoal__config_check_cpus(c, 0, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "t.yaml:7:53: group a: cpus names CPU 1023; "
					"this machine has "));
	}
	shoal__config_free(c);
	shoal__config_free(d);
}

/* A hosts section or a group's host refused where it stands. */
static const struct {
	const char *hosts;        /* the hosts: section */
	const char *group_b;      /* group b's host line */
	const char *reason;
} hosts_refused[] = {
	{ "hosts:\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n", "    host: x\n",
	  "t.yaml:9:11: unknown host 'x' (the hosts: a)" },
	{ "hosts:\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n    - { name: a, listen: "
	  "1.2.3.5:1 }\n", "    host: a\n", "t.yaml:5:7: host name 'a' is used twice (first at "
	  "line 4)" },
	{ "hosts:\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n", "",
	  "t.yaml:7:5: group b has no 'host': the file lists hosts" },
	{ "", "    host: a\n", "t.yaml:6:11: group b names host 'a', but the file lists no hosts" },
	{ "hosts:\n  list:\n    - { name: a }\n", "    host: a\n",
	  "t.yaml:4:7: a host has no 'listen'" },
	{ "hosts:\n  list:\n    - { name: a, listen: 'nowhere:80' }\n", "    host: a\n",
	  "t.yaml:4:26: listen: address 'nowhere:80': 'nowhere' is not a numeric IP" },
	{ "hosts:\n  list:\n    - { name: a, listen: 1.2.3.4 }\n", "    host: a\n",
	  "listen: address '1.2.3.4' is not HOST:PORT" },
	{ "hosts:\n  list:\n    - { name: a, listen: '1.2.3.4:70000' }\n", "    host: a\n",
	  "is not HOST:PORT" },
	{ "hosts:\n  list:\n    - { name: a, listen: '1.2.3.4:0' }\n", "    host: a\n",
	  "listen '1.2.3.4:0' has port 0" },
	{ "hosts:\n  list:\n    - { name: a, listen: '0.0.0.0:9' }\n", "    host: a\n",
	  "t.yaml:4:7: host a listens on the wildcard address 0.0.0.0:9, which no other host "
	  "can reach: give 'reach' too" },
	{ "hosts:\n  list:\n    - { name: a, listen: '0.0.0.0:9', reach: '[::]:9' }\n",
	  "    host: a\n", "reach '[::]:9' is the wildcard address" },
	{ "hosts:\n  list:\n    - { name: a, listen: '1.2.3.4:9' }\n    - { name: b, listen: "
	  "'0.0.0.0:9', reach: '1.2.3.4:9' }\n", "    host: a\n",
	  "t.yaml:5:7: host b is reached at 1.2.3.4:9, as host a (line 4) is" },
	{ "hosts:\n  list: []\n", "    host: a\n", "hosts.list is empty" },
	{ "hosts:\n  down_after: 1s\n", "    host: a\n", "hosts has no 'list'" },
	{ "hosts:\n  bogus: 1\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n", "    host: a\n",
	  "unknown key 'bogus' in hosts (expected one of: down_after, link, list)" },
	{ "hosts:\n  link: { window: 1KiB }\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "hosts.link.window is 1024 bytes, must be at least 65536" },
	{ "hosts:\n  link: { flush: 4MiB }\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "hosts.link.flush '4MiB' is too large" },
	{ "hosts:\n  link: { keepalive: 2s }\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "keepalive must be shorter than dead_after" },
	{ "hosts:\n  link: { backoff: 0ms }\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "hosts.link.backoff must be longer than 0" },
	{ "hosts:\n  link: { spin: 1001ms }\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "t.yaml:3:17: hosts.link.spin is longer than 1s" },
	{ "hosts:\n  link: { spin: fast }\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "t.yaml:3:17: hosts.link.spin must be a number with an optional unit, not 'fast'" },
	{ "hosts:\n  down_after: 1h1s\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n",
	  "    host: a\n", "hosts.down_after '1h1s' has an unknown unit" },
	{ "hosts:\n  list:\n    - { name: a, listen: 1.2.3.4:1 }\n    - { name: 'b c', listen: "
	  "1.2.3.5:1 }\n", "    host: a\n", "host name 'b c' has a character outside" },
	/* A type of 1 MiB does not fit the default window of 1 MiB. */
	{ "types: [ { id: 9, name: big, max_size: 1048576 } ]\nhosts:\n  list:\n"
	  "    - { name: a, listen: 1.2.3.4:1 }\n    - { name: b, listen: 1.2.3.5:1 }\n",
	  "    host: a\n", "type 9 'big' (max_size 1048576) takes 1048640 bytes in a frame, more "
	  "than the links' window of 1048576 bytes (the default): set hosts.link.window to "
	  "1048640 or more" },
};

static void config_bad_hosts_are_refused_at_their_place(void **state)
{
	char text[1024];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(hosts_refused); i++) {
		/* Line 1 is the system; the hosts section follows, then the groups. */
		snprintf(text, sizeof(text), "system: s\n%sgroups:\n"
			 "  - { name: bridgeless, program: /bin/true%s }\n"
			 "  - name: b\n    program: /bin/true\n%s", hosts_refused[i].hosts,
			 strstr(hosts_refused[i].hosts, "list:\n    -") ? ", host: a" : "",
			 hosts_refused[i].group_b);
		parse_refused(text, hosts_refused[i].reason);
	}
}

static void config_group_named_bridge_is_refused_with_hosts(void **state)
{
	struct shoal__config *c;

	(void)state;
	c = parse_ok("system: s\ngroups:\n  - { name: bridge, program: /bin/true }\n");
	shoal__config_free(c);
	parse_refused("system: s\nhosts:\n  list: [ { name: a, listen: '1.2.3.4:5' } ]\n"
		      "groups:\n  - { name: bridge, program: /bin/true, host: a }\n",
		      "t.yaml:5:5: group name 'bridge' is the built-in bridge's");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(config_groups_before_types_parses_as_types_first),
		cmocka_unit_test(config_more_groups_than_the_limit_are_refused),
		cmocka_unit_test(config_refused_file_frees_what_it_parsed),
		cmocka_unit_test(config_mailbox_name_too_long_for_a_segment_is_refused),
		cmocka_unit_test(config_type_larger_than_the_group_mailbox_is_refused),
		cmocka_unit_test(config_more_shared_memory_than_free_is_refused),
		cmocka_unit_test(config_hosts_parse_with_their_links_and_groups),
		cmocka_unit_test(config_hosts_link_spin_has_its_default),
		cmocka_unit_test(config_router_yield_is_read_and_bounded),
		cmocka_unit_test(config_router_stream_is_one_of_three_words),
		cmocka_unit_test(config_without_hosts_runs_every_group_and_refuses_host),
		cmocka_unit_test(config_bad_hosts_are_refused_at_their_place),
		cmocka_unit_test(config_group_named_bridge_is_refused_with_hosts),
		cmocka_unit_test(config_cpus_past_63_parse_and_are_checked_per_host),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
