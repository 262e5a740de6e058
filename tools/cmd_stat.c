/* SPDX-License-Identifier: MIT */
/*
 * `shoal stat`: one snapshot of a running system: its router and
 * dispatchers, its message types, and every group with its worker counters
 * and the state of its mailbox's rings, as text or JSON.
 *
 * Everything is read once into a view (tools/sysview.h), read-only; the
 * printers below work from that copy.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/bridge/view.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/json.h"
#include "tools/snapshot.h"
#include "tools/sysview.h"
#include "tools/table.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define STAT_JSON_SCHEMA 1

#define DEFAULT_CHECK_RETRIES 3u
#define MAX_CHECK_RETRIES 1000u

/* Bytes for a name read from shared memory, escaped for a terminal. */
#define NAME_SIZE SHOAL_FMT_PRINTABLE_SIZE(SHOAL_SEG_NAME_MAX)

struct stat_args {
	bool json;
	uint32_t check_retries;
	const char *system;
};

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_JSON,
	OPT_CHECK_RETRIES,
};

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv, struct stat_args *a)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "check-retries", required_argument, NULL, OPT_CHECK_RETRIES },
		{ NULL, 0, NULL, 0 },
	};
	int c, end;

	memset(a, 0, sizeof(*a));
	a->check_retries = DEFAULT_CHECK_RETRIES;
	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_CHECK_RETRIES:
			if (shoal__cli_parse_uint(optarg, MAX_CHECK_RETRIES, &a->check_retries) < 0)
				return shoal__cli_usage_error(cmd, "--check-retries takes a number "
							      "from 0 to %u, not '%s'",
							      MAX_CHECK_RETRIES, optarg);
			break;
		}
	}
	return shoal__cli_system_arg(cmd, argc, argv, &a->system);
}

static const char *state_or(const char *name, char *buf, size_t cap, uint32_t value)
{
	if (name != NULL)
		return name;
	snprintf(buf, cap, "invalid(%u)", value);
	return buf;
}

static const char *group_state(const struct shoal__group_view *g, char *buf, size_t cap)
{
	return state_or(shoal__group_state_name(g->state), buf, cap, g->state);
}

/* A count, or "-" when it could not be read. */
static void count_cell(struct shoal__table *t, bool known, long long n)
{
	if (known)
		shoal__table_cell(t, "%lld", n);
	else
		shoal__table_cell(t, "-");
}

static bool region_is_ring(const struct shoal__region_snap *r)
{
	return r->entry_ok && r->region.kind == SHOAL_SEG_KIND_RING;
}

/* ---- Text output ---- */

__attribute__((format(printf, 2, 3)))
static void field(const char *label, const char *fmt, ...)
{
	va_list ap;

	printf("  %-13s ", label);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* How the dispatchers write what they route (router.stream: the same for
 * all; dispatcher 0's word). */
static void text_copies(const struct shoal__disp_view *dv)
{
	const char *how = dv->stream_min > 0 ? "streamed" : "plain stores";

	if (dv->stream_probe_ns > 0)
		field("copies", "%s (router.stream auto: a cache line's round trip took %u ns "
		      "at start)", how, dv->stream_probe_ns);
	else
		field("copies", "%s (router.stream %s)", how,
		      dv->stream_min > 0 ? "on" : "off, or auto on one CPU");
}

static void text_system(const struct shoal__sys_view *v)
{
	struct shoal__sys_counts n;
	char path[SHOAL_FMT_PRINTABLE_SIZE(sizeof(v->registry_path))];
	char when[SHOAL_FMT_TIME_SIZE], spin[SHOAL_FMT_SHORT_SIZE], yield[SHOAL_FMT_SHORT_SIZE];
	char state[32];

	shoal__sys_view_count(v, &n);
	printf("System %s\n", v->system);
	field("registry", "%s", shoal__fmt_printable(path, sizeof(path), v->registry_path));
	/* The state is the last the router wrote: once it is gone, it was. */
	field("router", "pid %d (%s), %s%s", v->router_pid, shoal__alive_name(v->router_alive),
	      v->router_alive == 0 ? "gone; it was " : "",
	      state_or(shoal__system_state_name(v->state), state, sizeof(state), v->state));
	field("created", "%s", shoal__fmt_time(when, sizeof(when), v->registry.ctime_ns));
	shoal__fmt_duration(yield, sizeof(yield), v->yield_ns);
	field("nodes", "%u (%u dispatcher%s), idle spin %s%s%s", v->n_nodes, v->n_dispatchers,
	      v->n_dispatchers == 1 ? "" : "s", shoal__fmt_duration(spin, sizeof(spin),
								       v->spin_ns),
	      v->yield_ns > 0 ? ", then yield " : "", v->yield_ns > 0 ? yield : "");
	if (v->n_dispatchers > 0)
		text_copies(&v->disp[0]);
	field("routes", "%u (published %u times)", v->n_routes, v->route_version);
	field("groups", "%u declared, %u running, %u stopped, %u failed, %llu restarts",
	      n.declared, n.running, n.stopped, n.failed, (unsigned long long)n.restarts);
	if (v->released > 0)
		field("released", "%u groups registered at run time, freed when their process "
		      "left; %llu messages they lost (queued then, or counted before)",
		      v->released,
		      (unsigned long long)v->lost_released);
	if (v->corrupt)
		field("status", "CORRUPT: %s", v->reason);
	if (v->router_alive == 0)
		field("status", "NOT RUNNING: its router (pid %d) is gone; this is what it left, "
		      "which the next start of %s clears", v->router_pid, v->system);
}

static int text_dispatchers(const struct shoal__sys_view *v)
{
	static const struct shoal__column cols[] = {
		{ "#", 'r' }, { "NODE", 'r' }, { "CPUS", 'l' }, { "MESSAGES", 'r' },
		{ "DELIVERED", 'r' }, { "NO_ROUTE", 'r' }, { "DROP_FULL", 'r' },
		{ "DROP_DEAD", 'r' }, { "MALFORMED", 'r' }, { "DISCARDED", 'r' }, { "SLEEPS", 'r' },
		{ "BUSY", 'r' },
	};
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), v->n_dispatchers) < 0)
		return -1;
	for (uint32_t d = 0; d < v->n_dispatchers; d++) {
		const struct shoal__disp_view *dv = &v->disp[d];
		char cpus[SHOAL_FMT_CPUS_SIZE], busy[SHOAL_FMT_SHORT_SIZE];

		shoal__table_row(&t);
		shoal__table_cell(&t, "%u", d);
		shoal__table_cell(&t, "%d", dv->node);
		shoal__table_cell(&t, "%s", shoal__fmt_cpus(cpus, sizeof(cpus), dv->cpus,
							     v->cpu_words));
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->messages);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->delivered);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->no_route);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->dropped_full);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->dropped_dead);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->malformed);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->discarded);
		shoal__table_cell(&t, "%llu", (unsigned long long)dv->sleeps);
		shoal__table_cell(&t, "%s", shoal__fmt_duration(busy, sizeof(busy), dv->busy_ns));
	}
	printf("\nDispatchers\n");
	shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	return 0;
}

static int text_types(const struct shoal__sys_view *v)
{
	static const struct shoal__column cols[] = {
		{ "ID", 'r' }, { "NAME", 'l' }, { "MAX_SIZE", 'r' }, { "ROUTES", 'r' },
	};
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), v->n_types) < 0)
		return -1;
	for (uint32_t i = 0; i < v->n_types; i++) {
		const struct shoal__type_view *tv = &v->types[i];
		char name[NAME_SIZE];

		shoal__table_row(&t);
		shoal__table_cell(&t, "%u", tv->id);
		shoal__table_cell(&t, "%s", shoal__fmt_printable(name, sizeof(name), tv->name));
		shoal__table_cell(&t, "%u", tv->max_size);
		shoal__table_cell(&t, "%u", tv->routes);
	}
	printf("\nMessage types\n");
	if (v->n_types == 0)
		printf("  (none registered yet)\n");
	else
		shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	return 0;
}

static void group_row(struct shoal__table *t, const struct shoal__group_view *g)
{
	char name[NAME_SIZE], state[32];
	uint64_t queued, bytes;

	shoal__group_view_queued(g, &queued, &bytes);
	shoal__table_row(t);
	shoal__table_cell(t, "%u", g->id);
	shoal__table_cell(t, "%s", shoal__fmt_printable(name, sizeof(name), g->name));
	shoal__table_cell(t, "%s", group_state(g, state, sizeof(state)));
	count_cell(t, g->pid > 0, g->pid);
	shoal__table_cell(t, "%u", g->gen);
	shoal__table_cell(t, "%u", shoal__group_view_restarts(g));
	shoal__table_cell(t, "%d", g->node);
	shoal__table_cell(t, "%u", g->n_workers);
	shoal__table_cell(t, "%u", g->n_actors);
	if (g->have_counters) {
		shoal__table_cell(t, "%llu", (unsigned long long)(g->w.sent_routed +
								  g->w.sent_direct));
		shoal__table_cell(t, "%llu", (unsigned long long)g->w.received);
		shoal__table_cell(t, "%llu", (unsigned long long)g->w.handled);
	} else {
		shoal__table_cell(t, "-");
		shoal__table_cell(t, "-");
		shoal__table_cell(t, "-");
	}
	count_cell(t, g->have_rings, (long long)queued);
	shoal__table_cell(t, "%s", g->damaged > 0 ? "DAMAGED" :
				   shoal__group_view_corrupt(g) ? "CORRUPT" : "OK");
}

static int text_groups(const struct shoal__sys_view *v)
{
	static const struct shoal__column cols[] = {
		{ "ID", 'r' }, { "NAME", 'l' }, { "STATE", 'l' }, { "PID", 'r' }, { "GEN", 'r' },
		{ "RESTARTS", 'r' }, { "NODE", 'r' }, { "WORKERS", 'r' }, { "ACTORS", 'r' },
		{ "SENT", 'r' }, { "RECEIVED", 'r' }, { "HANDLED", 'r' }, { "QUEUED", 'r' },
		{ "STATUS", 'l' },
	};
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), v->n_groups) < 0)
		return -1;
	for (uint32_t id = 0; id < v->n_groups; id++)
		group_row(&t, &v->groups[id]);
	printf("\nGroups\n");
	if (v->n_groups == 0)
		printf("  (none declared yet)\n");
	else
		shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	return 0;
}

static void ring_row(struct shoal__table *t, const struct shoal__region_snap *r,
		     const struct shoal__ring_age *age)
{
	const struct shoal_ring_stats *st = &r->ring;
	char name[NAME_SIZE], cap[SHOAL_FMT_SHORT_SIZE], used[SHOAL_FMT_SHORT_SIZE];
	char high[SHOAL_FMT_SHORT_SIZE], path[64], oldest[SHOAL_FMT_SHORT_SIZE];

	shoal__table_row(t);
	if (r->entry_ok) {
		shoal__table_cell(t, "%s", shoal__fmt_printable(name, sizeof(name),
								r->region.name));
		shoal__table_cell(t, "%s", shoal__ring_path(path, sizeof(path), &r->region.tag));
	} else {
		shoal__table_cell(t, "entry %u", r->index);
		shoal__table_cell(t, "-");
	}
	if (!r->have_ring) {
		for (int c = 0; c < 6; c++)
			shoal__table_cell(t, "-");
	} else {
		shoal__table_cell(t, "%s", shoal__fmt_bytes(cap, sizeof(cap), st->capacity));
		shoal__table_cell(t, "%s (%.1f%%)", shoal__fmt_bytes(used, sizeof(used), st->used),
				  shoal__fmt_percent(st->used, st->capacity));
		count_cell(t, r->pending >= 0, r->pending);
		shoal__table_cell(t, "%s", age->known ? shoal__fmt_duration(oldest, sizeof(oldest),
									   age->age_ns) : "-");
		shoal__table_cell(t, "%llu", (unsigned long long)st->full_events);
		shoal__table_cell(t, "%s", shoal__fmt_bytes(high, sizeof(high), st->high_water));
	}
	shoal__table_cell(t, "%s", r->corrupt ? "CORRUPT" : "OK");
}

static int text_rings(const struct shoal__group_view *g)
{
	static const struct shoal__column cols[] = {
		{ "RING", 'l' }, { "PATH", 'l' }, { "CAPACITY", 'r' }, { "USED", 'r' },
		{ "PENDING", 'r' }, { "OLDEST", 'r' }, { "FULL_EVENTS", 'r' },
		{ "HIGH_WATER", 'r' }, { "STATUS", 'l' },
	};
	static const struct shoal__ring_age unknown;
	const struct shoal__seg_snap *s = &g->rings;
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), s->n_regions) < 0)
		return -1;
	for (uint32_t i = 0; i < s->n_regions; i++)
		if (region_is_ring(&s->regions[i]) || !s->regions[i].entry_ok)
			ring_row(&t, &s->regions[i], g->ages != NULL ? &g->ages[i] : &unknown);
	shoal__table_print(&t, stdout, "    ");
	shoal__table_free(&t);
	if (s->dir_corrupt)
		printf("    directory: CORRUPT: %s\n", s->dir_reason);
	for (uint32_t i = 0; i < s->n_regions; i++) {
		const struct shoal__region_snap *r = &s->regions[i];
		char name[NAME_SIZE];

		if (!r->corrupt)
			continue;
		if (r->entry_ok)
			shoal__fmt_printable(name, sizeof(name), r->region.name);
		else
			snprintf(name, sizeof(name), "entry %u", r->index);
		printf("    %s: %s\n", name, r->reason);
	}
	return 0;
}

static void text_counters(const struct shoal__group_view *g)
{
	const struct shoal__worker_sums *w = &g->w;

	field("sent", "%llu routed, %llu direct", (unsigned long long)w->sent_routed,
	      (unsigned long long)w->sent_direct);
	field("received", "%llu, handled %llu", (unsigned long long)w->received,
	      (unsigned long long)w->handled);
	field("refused", "%llu try_* sends (full, no route ...)",
	      (unsigned long long)w->try_failed);
	field("dropped", "%llu stale, %llu malformed, %llu discarded, %llu lost in process memory, "
	      "%llu set aside (crashed their handler)", (unsigned long long)w->stale,
	      (unsigned long long)w->malformed, (unsigned long long)w->discarded,
	      (unsigned long long)w->fwd_lost, (unsigned long long)w->set_aside);
	field("uplinks", "%llu no route, %llu dropped full, %llu malformed",
	      (unsigned long long)w->up_no_route, (unsigned long long)w->up_dropped_full,
	      (unsigned long long)w->up_malformed);
	if (w->lost_corrupt > 0)
		field("lost sent", "%llu (written into rings given up as corrupted, or into a "
		      "replaced mailbox)", (unsigned long long)w->lost_corrupt);
}

/* Percentiles of the latency histogram, and the oldest message waiting. */
static void text_latency(const struct shoal__group_view *g)
{
	const struct shoal__lat_sums *l = g->lat;
	char p50[SHOAL_FMT_SHORT_SIZE], p99[SHOAL_FMT_SHORT_SIZE], p999[SHOAL_FMT_SHORT_SIZE];
	char oldest[SHOAL_FMT_SHORT_SIZE];
	uint64_t age, queued, bytes;

	if (l != NULL && l->count > 0)
		field("latency", "p50 %s, p99 %s, p99.9 %s, send to handler, over %llu messages "
		      "(%llu out of range)",
		      shoal__fmt_duration(p50, sizeof(p50), shoal__lat_quantile(l, 0.5)),
		      shoal__fmt_duration(p99, sizeof(p99), shoal__lat_quantile(l, 0.99)),
		      shoal__fmt_duration(p999, sizeof(p999), shoal__lat_quantile(l, 0.999)),
		      (unsigned long long)l->count, (unsigned long long)l->out_of_range);
	else if (l != NULL)
		field("latency", "none yet: no handler has run (%llu out of range)",
		      (unsigned long long)l->out_of_range);
	if (!g->have_rings)
		return;
	shoal__group_view_queued(g, &queued, &bytes);
	if (shoal__group_view_oldest(g, &age))
		field("lag", "%llu messages (%llu bytes) not taken, the oldest sent %s ago",
		      (unsigned long long)queued, (unsigned long long)bytes,
		      shoal__fmt_duration(oldest, sizeof(oldest), age));
	else
		field("lag", "%llu messages (%llu bytes) not taken", (unsigned long long)queued,
		      (unsigned long long)bytes);
}

static int text_group(const struct shoal__group_view *g)
{
	char name[NAME_SIZE], mbx[NAME_SIZE], size[SHOAL_FMT_SHORT_SIZE], state[32];

	printf("\nGroup %s (id %u)\n", shoal__fmt_printable(name, sizeof(name), g->name), g->id);
	if (g->corrupt)
		field("status", "CORRUPT: %s", g->reason);
	field("state", "%s, pid %d, generation %u, %u restarts",
	      group_state(g, state, sizeof(state)), g->pid, g->gen,
	      shoal__group_view_restarts(g));
	field("placement", "node %d, dispatcher %u, %u worker%s, %u actor%s", g->node,
	      g->dispatcher, g->n_workers, g->n_workers == 1 ? "" : "s", g->n_actors,
	      g->n_actors == 1 ? "" : "s");
	field("routed in", "%llu delivered, %llu dropped full, %llu dropped dead",
	      (unsigned long long)g->delivered, (unsigned long long)g->dropped_full,
	      (unsigned long long)g->dropped_dead);
	if (g->damaged > 0 || g->dropped_corrupt > 0)
		field("damage", "%u corrupted, %u replaced, %llu lost in them, %llu copies "
		      "dropped", g->damaged, g->replaced,
		      (unsigned long long)(g->lost_corrupt + g->w.lost_corrupt),
		      (unsigned long long)g->dropped_corrupt);
	if (g->lost_queued > 0)
		field("lost queued", "%llu (left in its mailbox when it failed or the system "
		      "stopped)", (unsigned long long)g->lost_queued);
	if (g->mailbox[0] == '\0')
		return 0;
	field("mailbox", "%s, %s", shoal__fmt_printable(mbx, sizeof(mbx), g->mailbox),
	      shoal__fmt_bytes(size, sizeof(size), g->mailbox_size));
	if (g->have_counters)
		text_counters(g);
	text_latency(g);
	if (!g->have_rings)
		return 0;
	printf("  rings\n");
	return text_rings(g);
}

static int print_text(const struct shoal__sys_view *v)
{
	text_system(v);
	if (text_dispatchers(v) < 0 || text_types(v) < 0 || text_groups(v) < 0)
		return -1;
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].state != SHOAL_GROUP_EMPTY && text_group(&v->groups[id]) < 0)
			return -1;
	return 0;
}

/* The links of a host's bridge to the other hosts (runtime/bridge/view.h),
 * when the system has them. */
static int text_links(const struct shoal__links_view *lv)
{
	static const struct shoal__column cols[] = {
		{ "PEER", 'l' }, { "STATE", 'l' }, { "ROLE", 'l' }, { "ADDRESS", 'l' },
		{ "RTT", 'r' }, { "FRAMES_OUT", 'r' }, { "FRAMES_IN", 'r' }, { "MSGS_OUT", 'r' },
		{ "MSGS_IN", 'r' }, { "IN_FLIGHT", 'r' }, { "CREDITS", 'r' }, { "LOST_LINK", 'r' },
		{ "LOST_DOWN", 'r' }, { "REFUSED", 'r' },
	};
	char host[NAME_SIZE];
	struct shoal__table t;

	if (!lv->present) {
		if (lv->reason[0] != '\0')
			printf("\nLinks: cannot be read: %s\n", lv->reason);
		return 0;
	}
	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), lv->n) < 0)
		return -1;
	for (uint32_t i = 0; i < lv->n; i++) {
		const struct shoal__link_view *l = &lv->links[i];
		char peer[NAME_SIZE], addr[SHOAL_FMT_PRINTABLE_SIZE(SHOAL__LINKS_ADDR_MAX)];
		char rtt[SHOAL_FMT_SHORT_SIZE], credits[SHOAL_FMT_SHORT_SIZE];

		shoal__table_row(&t);
		shoal__table_cell(&t, "%s", shoal__fmt_printable(peer, sizeof(peer), l->peer));
		shoal__table_cell(&t, "%s", shoal__link_state_name(l->state));
		shoal__table_cell(&t, "%s", l->role == 2 ? "dials" : "listens");
		shoal__table_cell(&t, "%s", shoal__fmt_printable(addr, sizeof(addr), l->addr));
		shoal__table_cell(&t, "%s", l->c[SHOAL__LC_RTT_NS] == 0 ? "-" :
				  shoal__fmt_duration(rtt, sizeof(rtt), l->c[SHOAL__LC_RTT_NS]));
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_FRAMES_SENT]);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_FRAMES_RECV]);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_RECORDS_SENT]);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_RECORDS_RECV]);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_IN_FLIGHT]);
		shoal__table_cell(&t, "%s", shoal__fmt_bytes(credits, sizeof(credits),
							     l->c[SHOAL__LC_CREDITS]));
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_LOST_LINK]);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_LOST_DOWN]);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_REFUSED]);
	}
	printf("\nLinks of host %s (bridge pid %d; %llu connections refused)\n",
	       shoal__fmt_printable(host, sizeof(host), lv->host), lv->bridge_pid,
	       (unsigned long long)lv->refused_conns);
	shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	return 0;
}

/* ---- JSON output ---- */

/* "links": the bridge's view, when the system has one (or why it cannot be
 * read); nothing for a system on one host. */
static void json_links(struct shoal__json *j, const struct shoal__links_view *lv)
{
	if (!lv->present && lv->reason[0] == '\0')
		return;
	shoal__json_object_begin(j, "links");
	if (!lv->present) {
		shoal__json_string(j, "reason", lv->reason);
		shoal__json_object_end(j);
		return;
	}
	shoal__json_string(j, "host", lv->host);
	shoal__json_int(j, "bridge_pid", lv->bridge_pid);
	shoal__json_uint(j, "refused_connections", lv->refused_conns);
	shoal__json_uint(j, "ucx_messages", lv->ucx_messages);
	shoal__json_array_begin(j, "peers");
	for (uint32_t i = 0; i < lv->n; i++) {
		const struct shoal__link_view *l = &lv->links[i];

		shoal__json_object_begin(j, NULL);
		shoal__json_string(j, "peer", l->peer);
		shoal__json_string(j, "state", shoal__link_state_name(l->state));
		shoal__json_string(j, "role", l->role == 2 ? "dials" : "listens");
		shoal__json_string(j, "address", l->addr);
		shoal__json_uint(j, "peer_epoch", l->peer_epoch);
		for (unsigned k = 0; k < SHOAL__LC_N; k++)
			shoal__json_uint(j, shoal__link_counter_name[k], l->c[k]);
		shoal__json_object_end(j);
	}
	shoal__json_array_end(j);
	shoal__json_object_end(j);
}

static void json_state(struct shoal__json *j, const char *key, const char *name, uint32_t v)
{
	if (name != NULL)
		shoal__json_string(j, key, name);
	else
		shoal__json_uint(j, key, v);
}

static void json_system(struct shoal__json *j, const struct shoal__sys_view *v)
{
	struct shoal__sys_counts n;
	char when[SHOAL_FMT_TIME_SIZE];

	shoal__sys_view_count(v, &n);
	shoal__json_object_begin(j, "system");
	shoal__json_string(j, "name", v->system);
	shoal__json_string(j, "registry", v->registry_path);
	shoal__json_int(j, "router_pid", v->router_pid);
	if (v->router_alive < 0)
		shoal__json_null(j, "router_alive");
	else
		shoal__json_bool(j, "router_alive", v->router_alive > 0);
	json_state(j, "state", shoal__system_state_name(v->state), v->state);
	shoal__json_uint(j, "ctime_ns", v->registry.ctime_ns);
	shoal__json_string(j, "ctime", shoal__fmt_time(when, sizeof(when), v->registry.ctime_ns));
	shoal__json_uint(j, "nodes", v->n_nodes);
	shoal__json_uint(j, "spin_ns", v->spin_ns);
	shoal__json_uint(j, "yield_ns", v->yield_ns);
	shoal__json_uint(j, "routes", v->n_routes);
	shoal__json_uint(j, "route_version", v->route_version);
	shoal__json_uint(j, "groups_declared", n.declared);
	shoal__json_uint(j, "groups_running", n.running);
	shoal__json_uint(j, "groups_stopped", n.stopped);
	shoal__json_uint(j, "groups_failed", n.failed);
	shoal__json_uint(j, "restarts", n.restarts);
	shoal__json_uint(j, "groups_released", v->released);
	shoal__json_uint(j, "lost_released", v->lost_released);
	shoal__json_string(j, "status", v->router_alive == 0 ? "router_gone" :
					 v->corrupt             ? "corrupt" :
								  "ok");
	if (v->corrupt)
		shoal__json_string(j, "reason", v->reason);
	shoal__json_object_end(j);
}

static void json_dispatchers(struct shoal__json *j, const struct shoal__sys_view *v)
{
	shoal__json_array_begin(j, "dispatchers");
	for (uint32_t d = 0; d < v->n_dispatchers; d++) {
		const struct shoal__disp_view *dv = &v->disp[d];
		char cpus[SHOAL_FMT_CPUS_SIZE];

		shoal__json_object_begin(j, NULL);
		shoal__json_uint(j, "index", d);
		shoal__json_int(j, "node", dv->node);
		shoal__json_string(j, "cpus", shoal__fmt_cpus(cpus, sizeof(cpus), dv->cpus,
							       v->cpu_words));
		shoal__json_uint(j, "batches", dv->batches);
		shoal__json_uint(j, "messages", dv->messages);
		shoal__json_uint(j, "delivered", dv->delivered);
		shoal__json_uint(j, "no_route", dv->no_route);
		shoal__json_uint(j, "dropped_full", dv->dropped_full);
		shoal__json_uint(j, "dropped_dead", dv->dropped_dead);
		shoal__json_uint(j, "corrupt", dv->corrupt);
		shoal__json_uint(j, "dropped_corrupt", dv->dropped_corrupt);
		shoal__json_uint(j, "malformed", dv->malformed);
		shoal__json_uint(j, "discarded", dv->discarded);
		shoal__json_uint(j, "sleeps", dv->sleeps);
		shoal__json_uint(j, "busy_ns", dv->busy_ns);
		shoal__json_uint(j, "stream_min", dv->stream_min);
		shoal__json_uint(j, "stream_probe_ns", dv->stream_probe_ns);
		shoal__json_object_end(j);
	}
	shoal__json_array_end(j);
}

static void json_types(struct shoal__json *j, const struct shoal__sys_view *v)
{
	shoal__json_array_begin(j, "types");
	for (uint32_t i = 0; i < v->n_types; i++) {
		shoal__json_object_begin(j, NULL);
		shoal__json_uint(j, "id", v->types[i].id);
		shoal__json_string(j, "name", v->types[i].name);
		shoal__json_uint(j, "max_size", v->types[i].max_size);
		shoal__json_uint(j, "routes", v->types[i].routes);
		shoal__json_object_end(j);
	}
	shoal__json_array_end(j);
}

static void json_counters(struct shoal__json *j, const struct shoal__worker_sums *w)
{
	shoal__json_object_begin(j, "counters");
	shoal__json_uint(j, "sent_routed", w->sent_routed);
	shoal__json_uint(j, "sent_direct", w->sent_direct);
	shoal__json_uint(j, "received", w->received);
	shoal__json_uint(j, "handled", w->handled);
	shoal__json_uint(j, "try_failed", w->try_failed);
	shoal__json_uint(j, "stale", w->stale);
	shoal__json_uint(j, "malformed", w->malformed);
	shoal__json_uint(j, "discarded", w->discarded);
	shoal__json_uint(j, "forward_lost", w->fwd_lost);
	shoal__json_uint(j, "set_aside", w->set_aside);
	shoal__json_uint(j, "uplink_no_route", w->up_no_route);
	shoal__json_uint(j, "uplink_dropped_full", w->up_dropped_full);
	shoal__json_uint(j, "uplink_malformed", w->up_malformed);
	shoal__json_uint(j, "lost_sent", w->lost_corrupt);
	shoal__json_object_end(j);
}

static void json_ring(struct shoal__json *j, const struct shoal__region_snap *r,
		      const struct shoal__ring_age *age)
{
	shoal__json_object_begin(j, NULL);
	if (r->entry_ok) {
		shoal__json_string(j, "name", r->region.name);
		shoal__json_ring_tag(j, &r->region.tag);
	} else {
		shoal__json_uint(j, "entry", r->index);
	}
	shoal__json_string(j, "status", r->corrupt ? "corrupt" : "ok");
	if (r->corrupt)
		shoal__json_string(j, "reason", r->reason);
	if (r->have_ring) {
		shoal__json_ring_fields(j, &r->ring, r->pending, false);
		if (age != NULL && age->known)
			shoal__json_uint(j, "oldest_age_ns", age->age_ns);
		else
			shoal__json_null(j, "oldest_age_ns");
	}
	shoal__json_object_end(j);
}

/* The latency histogram's percentiles, in nanoseconds (null when empty). */
static void json_latency(struct shoal__json *j, const struct shoal__lat_sums *l)
{
	static const struct { const char *key; double q; } pct[] = {
		{ "p50_ns", 0.5 }, { "p99_ns", 0.99 }, { "p999_ns", 0.999 },
	};

	if (l == NULL) {
		shoal__json_null(j, "latency");
		return;
	}
	shoal__json_object_begin(j, "latency");
	shoal__json_uint(j, "count", l->count);
	shoal__json_uint(j, "sum_ns", l->sum_ns);
	shoal__json_uint(j, "out_of_range", l->out_of_range);
	for (size_t i = 0; i < sizeof(pct) / sizeof(pct[0]); i++) {
		if (l->count > 0)
			shoal__json_uint(j, pct[i].key, shoal__lat_quantile(l, pct[i].q));
		else
			shoal__json_null(j, pct[i].key);
	}
	shoal__json_object_end(j);
}

static void json_mailbox(struct shoal__json *j, const struct shoal__group_view *g)
{
	shoal__json_object_begin(j, "mailbox");
	shoal__json_string(j, "name", g->mailbox);
	shoal__json_uint(j, "size", g->mailbox_size);
	shoal__json_array_begin(j, "rings");
	for (uint32_t i = 0; g->have_rings && i < g->rings.n_regions; i++)
		if (region_is_ring(&g->rings.regions[i]) || !g->rings.regions[i].entry_ok)
			json_ring(j, &g->rings.regions[i], g->ages != NULL ? &g->ages[i] : NULL);
	shoal__json_array_end(j);
	shoal__json_object_end(j);
}

static void json_group(struct shoal__json *j, const struct shoal__group_view *g)
{
	uint64_t queued, bytes;

	shoal__group_view_queued(g, &queued, &bytes);
	shoal__json_object_begin(j, NULL);
	shoal__json_uint(j, "id", g->id);
	shoal__json_string(j, "name", g->name);
	json_state(j, "state", shoal__group_state_name(g->state), g->state);
	shoal__json_int(j, "pid", g->pid);
	shoal__json_uint(j, "generation", g->gen);
	shoal__json_uint(j, "restarts", shoal__group_view_restarts(g));
	shoal__json_int(j, "node", g->node);
	shoal__json_uint(j, "dispatcher", g->dispatcher);
	shoal__json_uint(j, "workers", g->n_workers);
	shoal__json_uint(j, "actors", g->n_actors);
	shoal__json_uint(j, "delivered", g->delivered);
	shoal__json_uint(j, "dropped_full", g->dropped_full);
	shoal__json_uint(j, "dropped_dead", g->dropped_dead);
	shoal__json_uint(j, "dropped_corrupt", g->dropped_corrupt);
	shoal__json_uint(j, "damaged", g->damaged);
	shoal__json_uint(j, "replaced", g->replaced);
	shoal__json_uint(j, "lost_corrupt", g->lost_corrupt);
	shoal__json_uint(j, "lost_queued", g->lost_queued);
	if (g->have_counters)
		json_counters(j, &g->w);
	else
		shoal__json_null(j, "counters");
	json_latency(j, g->lat);
	if (g->have_rings) {
		uint64_t age;

		shoal__json_uint(j, "queued", queued);
		shoal__json_uint(j, "queued_bytes", bytes);
		if (shoal__group_view_oldest(g, &age))
			shoal__json_uint(j, "oldest_age_ns", age);
		else
			shoal__json_null(j, "oldest_age_ns");
	}
	if (g->mailbox[0] != '\0')
		json_mailbox(j, g);
	shoal__json_string(j, "status", shoal__group_view_corrupt(g) ? "corrupt" : "ok");
	if (g->corrupt)
		shoal__json_string(j, "reason", g->reason);
	shoal__json_object_end(j);
}

static void print_json(const struct shoal__sys_view *v, const struct shoal__links_view *lv)
{
	struct shoal__json j;

	shoal__json_init(&j, stdout);
	shoal__json_doc_begin(&j, STAT_JSON_SCHEMA);
	json_system(&j, v);
	json_dispatchers(&j, v);
	json_types(&j, v);
	shoal__json_array_begin(&j, "groups");
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].state != SHOAL_GROUP_EMPTY)
			json_group(&j, &v->groups[id]);
	shoal__json_array_end(&j);
	json_links(&j, lv);
	/* A dead router first: what it left may well look damaged. */
	shoal__json_string(&j, "status", v->router_alive == 0     ? "router_gone" :
					 shoal__sys_view_corrupt(v) ? "corrupt" :
								    "ok");
	shoal__json_object_end(&j);
}

/* ---- The command ---- */

static int cmd_stat(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct shoal__sys_view_opts o = { .mailboxes = true, .rings = true };
	struct shoal_err err = {{0}};
	struct shoal__sys_view v;
	static struct shoal__links_view lv;   /* 16 KiB: not on the stack */
	struct stat_args a;
	int ret = parse_args(cmd, argc, argv, &a);

	if (ret >= 0)
		return ret;
	o.check_retries = a.check_retries;
	ret = shoal__sys_view_take(&v, a.system, &o, &err);
	if (ret < 0)
		return shoal__sys_view_fail(cmd->name, a.system, ret, &err);
	shoal__links_view_take(&lv, a.system, shoal__snap_guard);
	if (a.json) {
		print_json(&v, &lv);
	} else if (print_text(&v) < 0 || text_links(&lv) < 0) {
		shoal__sys_view_free(&v);
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ENOMEM, "out of memory");
	}
	ret = shoal__sys_view_corrupt(&v) || v.router_alive == 0 ? SHOAL_EXIT_CORRUPT :
								     SHOAL_EXIT_OK;
	shoal__sys_view_free(&v);
	return ret;
}

const struct shoal__cmd shoal__cmd_stat = {
	.name = "stat",
	.summary = "Show one snapshot of a system: router, types, groups, rings",
	.fn = cmd_stat,
	.help =
	"Usage: shoal stat [--json] [--check-retries N] SYSTEM\n"
	"\n"
	"Show one snapshot of the running system SYSTEM: its router and each\n"
	"dispatcher (node, CPUs, messages, deliveries, drops, sleeps, busy time),\n"
	"its message types, and every group (state, pid, generation, restarts,\n"
	"placement, its workers' counters summed, the latency from send to handler\n"
	"as p50/p99/p99.9, the messages not taken yet and how long the oldest has\n"
	"waited, and for each ring of its mailbox the bytes in use, the records\n"
	"pending, the age of the oldest, full events and high water), and, on a\n"
	"system that spans hosts, each link of this host's bridge (peer, state,\n"
	"round trip, frames and messages each way, in flight, credits, messages\n"
	"lost, frames refused).\n"
	"Read-only: the segments are mapped read-only and the router is not asked\n"
	"anything, so it is safe on a live system. Values are read one after the\n"
	"other while the system runs, so they may not add up exactly.\n"
	"\n"
	"SYSTEM's segments are looked up in $SHOAL_SHM_DIR (default\n"
	"/dev/shm/shoal-UID).\n"
	"\n"
	"Options:\n"
	"  --json               print one JSON object instead of text\n"
	"  --check-retries N    check a ring that looks corrupted N more times before\n"
	"                       reporting it (default 3, at most 1000)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status:\n"
	"  0  everything read is intact\n"
	"  1  something is corrupted or missing, such as a group's mailbox (the rest\n"
	"     is still shown), or the system is not running: its router is gone and\n"
	"     what is shown is what it left\n"
	"  2  bad command line\n"
	"  3  cannot read the system's registry: no such system, not a Shoal\n"
	"     segment, another layout version, or corrupted\n",
	.json_schema = STAT_JSON_SCHEMA,
};
