/* SPDX-License-Identifier: MIT */
/*
 * `shoal top`: `shoal stat` again and again, showing rates: messages per
 * second per dispatcher and per group, from the difference between the
 * counters of two views (tools/sysview.h) taken an interval apart. Groups
 * are shown in one of a few orders (busiest first by default) and may be
 * filtered by name. When standard input and output are both terminals, a
 * full-screen interface (tools/top_screen.c, ncurses) redraws each refresh
 * and answers keys; otherwise each refresh is printed after the last (as
 * one JSON line each with --json).
 *
 * Stopping: Ctrl-C (SIGINT) or SIGTERM sets a flag that the wait between
 * refreshes checks; the signals are only unblocked inside ppoll(), so one
 * that arrives just before the wait is not missed. On the screen, `q` stops
 * too. It also ends when the system goes away (its registry is removed, or
 * its router dies), said on stderr once the terminal is given back.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/bridge/view.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/json.h"
#include "tools/snapshot.h"
#include "tools/sysview.h"
#include "tools/table.h"
#include "tools/top.h"
#include "tools/top_screen.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define TOP_JSON_SCHEMA 1

#define DEFAULT_INTERVAL_MS 1000u
#define MIN_INTERVAL_MS 10u
#define MAX_INTERVAL_MS 3600000u
#define MAX_COUNT 1000000000u

#define NAME_SIZE SHOAL_FMT_PRINTABLE_SIZE(SHOAL_NAME_MAX)

struct top_args {
	bool json;
	uint32_t interval_ms;
	uint32_t count;                  /* refreshes; 0: until stopped */
	const char *system;
};

static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
	(void)sig;
	stop_asked = 1;
}

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_JSON,
	OPT_INTERVAL,
	OPT_COUNT,
	OPT_SORT,
	OPT_FILTER,
};

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv, struct top_args *a,
		      struct shoal__top_show *show)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "sort", required_argument, NULL, OPT_SORT },
		{ "filter", required_argument, NULL, OPT_FILTER },
		{ NULL, 0, NULL, 0 },
	};
	char why[128];
	int c, end;

	memset(a, 0, sizeof(*a));
	a->interval_ms = DEFAULT_INTERVAL_MS;
	show->sort = &shoal__top_sorts[0];
	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_INTERVAL:
			if (shoal__cli_parse_uint(optarg, MAX_INTERVAL_MS, &a->interval_ms) < 0 ||
			    a->interval_ms < MIN_INTERVAL_MS)
				return shoal__cli_usage_error(cmd, "--interval takes milliseconds "
							      "from %u to %u, not '%s'",
							      MIN_INTERVAL_MS, MAX_INTERVAL_MS,
							      optarg);
			break;
		case OPT_COUNT:
			if (shoal__cli_parse_uint(optarg, MAX_COUNT, &a->count) < 0 ||
			    a->count == 0)
				return shoal__cli_usage_error(cmd, "--count takes a number from 1 "
							      "to %u, not '%s'", MAX_COUNT, optarg);
			break;
		case OPT_SORT:
			show->sort = shoal__top_sort_named(optarg);
			if (show->sort == NULL)
				return shoal__cli_usage_error(cmd, "--sort takes rate, name, "
							      "dropped, queued or fill, not '%s'",
							      optarg);
			break;
		case OPT_FILTER:
			if (shoal__top_set_filter(show, optarg, why, sizeof(why)) < 0)
				return shoal__cli_usage_error(cmd, "--filter '%s' is not a "
							      "regular expression: %s", optarg,
							      why);
			break;
		}
	}
	return shoal__cli_system_arg(cmd, argc, argv, &a->system);
}

/* ---- Rates ---- */

static double per_s(uint64_t now, uint64_t before, double secs)
{
	/* A counter that went back belongs to a new incarnation: no rate. */
	return now >= before && secs > 0 ? (double)(now - before) / secs : 0.0;
}

static uint64_t group_out(const struct shoal__group_view *g)
{
	return g->w.sent_routed + g->w.sent_direct;
}

/* The fullest inbound ring's bytes in use, in percent of its size; -1 unknown. */
static double group_fill(const struct shoal__group_view *g)
{
	double most = -1;

	if (!g->have_rings)
		return -1;
	for (uint32_t i = 0; i < g->rings.n_regions; i++) {
		const struct shoal__region_snap *r = &g->rings.regions[i];
		double pct;

		if (!r->have_ring || !shoal__ring_is_inbound(&r->region.tag))
			continue;
		pct = shoal__fmt_percent(r->ring.used, r->ring.capacity);
		most = pct > most ? pct : most;
	}
	return most;
}

/*
 * The latency of the messages handled between the two views: the
 * difference of their histograms; the whole histogram at the first view,
 * or when it went back (the group's mailbox was replaced by a fresh one).
 */
static void group_latency(const struct shoal__group_view *g, const struct shoal__group_view *was,
			  bool known, struct shoal__top_rates *r)
{
	struct shoal__lat_sums d;
	bool back = false;

	if (g->lat == NULL)
		return;
	d = *g->lat;
	for (uint32_t b = 0; known && was->lat != NULL && !back && b < SHOAL__LAT_BUCKETS; b++) {
		back = g->lat->bucket[b] < was->lat->bucket[b];
		d.bucket[b] -= back ? 0 : was->lat->bucket[b];
	}
	if (back)
		d = *g->lat;
	d.count = 0;
	for (uint32_t b = 0; b < SHOAL__LAT_BUCKETS; b++)
		d.count += d.bucket[b];
	r->have_lat = d.count > 0;
	r->p50_ns = shoal__lat_quantile(&d, 0.5);
	r->p99_ns = shoal__lat_quantile(&d, 0.99);
	r->p999_ns = shoal__lat_quantile(&d, 0.999);
}

static void group_rates(const struct shoal__group_view *g, const struct shoal__group_view *was,
			double secs, struct shoal__top_rates *r)
{
	uint64_t bytes;

	memset(r, 0, sizeof(*r));
	r->index = g->id;
	r->name = g->name;
	shoal__group_view_queued(g, &r->queued, &bytes);
	r->fill_pct = group_fill(g);
	r->have_oldest = shoal__group_view_oldest(g, &r->oldest_ns);
	/* The same owner of the slot (a freed slot given to a group of the same
	 * name starts its counters again), read both times: comparable. */
	r->known = secs > 0 && was != NULL && was->state != SHOAL_GROUP_EMPTY && g->have_counters &&
		   was->have_counters && was->slot_seq == g->slot_seq &&
		   strcmp(was->name, g->name) == 0;
	group_latency(g, was, r->known, r);
	if (!r->known)
		return;
	r->in = per_s(g->w.received, was->w.received, secs);
	r->out = per_s(group_out(g), group_out(was), secs);
	r->dropped = per_s(g->dropped_full + g->dropped_dead, was->dropped_full +
			   was->dropped_dead, secs);
}

static uint64_t disp_dropped(const struct shoal__disp_view *d)
{
	return d->no_route + d->dropped_full + d->dropped_dead + d->malformed;
}

static void disp_rates(const struct shoal__sys_view *v, const struct shoal__sys_view *was,
		       uint32_t d, double secs, struct shoal__top_rates *r)
{
	const struct shoal__disp_view *now = &v->disp[d], *before = &was->disp[d];

	memset(r, 0, sizeof(*r));
	r->index = d;
	r->fill_pct = -1;
	r->known = secs > 0 && d < was->n_dispatchers;
	if (!r->known)
		return;
	r->in = per_s(now->messages, before->messages, secs);
	r->out = per_s(now->delivered, before->delivered, secs);
	r->dropped = per_s(disp_dropped(now), disp_dropped(before), secs);
	r->busy_pct = 100.0 * per_s(now->busy_ns, before->busy_ns, secs) / 1e9;
}

/* ---- Orders and the filter ---- */

static int by_index(const struct shoal__top_rates *a, const struct shoal__top_rates *b)
{
	return a->index < b->index ? -1 : a->index > b->index;
}

/* Larger first, then by index: a stable order between refreshes. */
static int larger_first(double va, double vb, const struct shoal__top_rates *a,
			const struct shoal__top_rates *b)
{
	if (va != vb)
		return va < vb ? 1 : -1;
	return by_index(a, b);
}

static int busiest_first(const void *pa, const void *pb)
{
	const struct shoal__top_rates *a = pa, *b = pb;

	return larger_first(a->in + a->out, b->in + b->out, a, b);
}

static int by_name(const void *pa, const void *pb)
{
	const struct shoal__top_rates *a = pa, *b = pb;
	int c = strcmp(a->name, b->name);

	return c != 0 ? c : by_index(a, b);
}

static int most_dropped(const void *pa, const void *pb)
{
	const struct shoal__top_rates *a = pa, *b = pb;

	return larger_first(a->dropped, b->dropped, a, b);
}

static int most_queued(const void *pa, const void *pb)
{
	const struct shoal__top_rates *a = pa, *b = pb;

	return larger_first((double)a->queued, (double)b->queued, a, b);
}

static int fullest_first(const void *pa, const void *pb)
{
	const struct shoal__top_rates *a = pa, *b = pb;

	return larger_first(a->fill_pct, b->fill_pct, a, b);
}

const struct shoal__top_sort shoal__top_sorts[] = {
	{ 'r', "rate", "busiest first", busiest_first },
	{ 'n', "name", "by name", by_name },
	{ 'd', "dropped", "most dropped first", most_dropped },
	{ 'b', "queued", "most queued first", most_queued },
	{ 'f', "fill", "fullest ring first", fullest_first },
};
const unsigned shoal__top_n_sorts = sizeof(shoal__top_sorts) / sizeof(shoal__top_sorts[0]);

const struct shoal__top_sort *shoal__top_sort_named(const char *name)
{
	for (unsigned i = 0; i < shoal__top_n_sorts; i++)
		if (strcmp(shoal__top_sorts[i].name, name) == 0)
			return &shoal__top_sorts[i];
	return NULL;
}

const struct shoal__top_sort *shoal__top_sort_keyed(int key)
{
	for (unsigned i = 0; i < shoal__top_n_sorts; i++)
		if (shoal__top_sorts[i].key == key)
			return &shoal__top_sorts[i];
	return NULL;
}

int shoal__top_set_filter(struct shoal__top_show *s, const char *text, char *why,
			  size_t why_len)
{
	regex_t re;
	int ret;

	if (strlen(text) >= sizeof(s->filter)) {
		snprintf(why, why_len, "longer than %zu characters", sizeof(s->filter) - 1);
		return -EINVAL;
	}
	if (text[0] != '\0') {
		ret = regcomp(&re, text, REG_EXTENDED | REG_NOSUB);
		if (ret != 0) {
			regerror(ret, &re, why, why_len);
			return -EINVAL;
		}
	}
	shoal__top_show_free(s);
	if (text[0] != '\0') {
		s->re = re;
		s->filtered = true;
	}
	snprintf(s->filter, sizeof(s->filter), "%s", text);
	return 0;
}

void shoal__top_show_free(struct shoal__top_show *s)
{
	if (s->filtered)
		regfree(&s->re);
	s->filtered = false;
	s->filter[0] = '\0';
}

void shoal__top_select(struct shoal__top_frame *f, const struct shoal__top_show *s)
{
	char name[NAME_SIZE];

	qsort(f->groups, f->n_groups, sizeof(f->groups[0]), s->sort->cmp);
	f->n_shown = 0;
	for (uint32_t i = 0; i < f->n_groups; i++) {
		if (s->filtered && regexec(&s->re, shoal__fmt_printable(name, sizeof(name),
									  f->groups[i].name),
					   0, NULL, 0) != 0)
			continue;
		f->shown[f->n_shown++] = &f->groups[i];
	}
}

/* The rates since `was` of every dispatcher and declared group. */
static void frame_make(struct shoal__top_frame *f, const struct shoal__sys_view *v,
		       const struct shoal__sys_view *was, uint32_t refresh)
{
	f->v = v;
	f->refresh = refresh;
	f->secs = (double)(v->taken_ns - was->taken_ns) / 1e9;
	for (uint32_t d = 0; d < v->n_dispatchers; d++)
		disp_rates(v, was, d, f->secs, &f->disp[d]);
	f->n_groups = 0;
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].state != SHOAL_GROUP_EMPTY)
			group_rates(&v->groups[id], shoal__sys_view_group(was, (int)id), f->secs,
				    &f->groups[f->n_groups++]);
}

/* ---- Links: this host's bridge's, when the system spans hosts ---- */

/*
 * The link views (runtime/bridge/view.h) of this refresh and the one
 * before, taken with the system's views (next_view()). They live here,
 * beside the frame rather than in it; the screen draws them through
 * shoal__top_print_links() like the plain output.
 */
static struct shoal__links_view link_views[2];
static struct shoal__links_view *links_now = &link_views[0], *links_was = &link_views[1];

static void links_take(const char *system)
{
	struct shoal__links_view *tmp = links_was;

	links_was = links_now;
	links_now = tmp;
	shoal__links_view_take(links_now, system, shoal__snap_guard);
}

/* Counter k of link l per second since the refresh before; false when that
 * refresh did not see the link of the same bridge. */
static bool link_rate(const struct shoal__link_view *l, unsigned k, double secs, double *rate)
{
	if (!links_was->present || links_was->bridge_pid != links_now->bridge_pid || secs <= 0)
		return false;
	for (uint32_t i = 0; i < links_was->n; i++) {
		const struct shoal__link_view *w = &links_was->links[i];

		if (strcmp(w->peer, l->peer) == 0 && l->c[k] >= w->c[k]) {
			*rate = (double)(l->c[k] - w->c[k]) / secs;
			return true;
		}
	}
	return false;
}

static void link_rate_cell(struct shoal__table *t, const struct shoal__link_view *l, unsigned k,
			   double secs)
{
	char buf[SHOAL_FMT_SHORT_SIZE];
	double rate;

	if (link_rate(l, k, secs, &rate))
		shoal__table_cell(t, "%s", shoal__fmt_rate(buf, sizeof(buf), rate));
	else
		shoal__table_cell(t, "-");
}

int shoal__top_print_links(FILE *out, const struct shoal__top_frame *f)
{
	double secs = f->secs;
	static const struct shoal__column cols[] = {
		{ "PEER", 'l' }, { "STATE", 'l' }, { "RTT", 'r' }, { "MSG_OUT/S", 'r' },
		{ "MSG_IN/S", 'r' }, { "FRAMES_OUT/S", 'r' }, { "FRAMES_IN/S", 'r' },
		{ "IN_FLIGHT", 'r' }, { "CREDITS", 'r' }, { "LOST", 'r' }, { "REFUSED", 'r' },
	};
	struct shoal__table t;

	if (!links_now->present)
		return 0;
	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), links_now->n) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < links_now->n; i++) {
		const struct shoal__link_view *l = &links_now->links[i];
		char peer[NAME_SIZE], rtt[SHOAL_FMT_SHORT_SIZE], credits[SHOAL_FMT_SHORT_SIZE];

		shoal__table_row(&t);
		shoal__table_cell(&t, "%s", shoal__fmt_printable(peer, sizeof(peer), l->peer));
		shoal__table_cell(&t, "%s", shoal__link_state_name(l->state));
		shoal__table_cell(&t, "%s", l->c[SHOAL__LC_RTT_NS] == 0 ? "-" :
				  shoal__fmt_duration(rtt, sizeof(rtt), l->c[SHOAL__LC_RTT_NS]));
		link_rate_cell(&t, l, SHOAL__LC_RECORDS_SENT, secs);
		link_rate_cell(&t, l, SHOAL__LC_RECORDS_RECV, secs);
		link_rate_cell(&t, l, SHOAL__LC_FRAMES_SENT, secs);
		link_rate_cell(&t, l, SHOAL__LC_FRAMES_RECV, secs);
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_IN_FLIGHT]);
		shoal__table_cell(&t, "%s", shoal__fmt_bytes(credits, sizeof(credits),
							     l->c[SHOAL__LC_CREDITS]));
		shoal__table_cell(&t, "%llu", (unsigned long long)(l->c[SHOAL__LC_LOST_LINK] +
								   l->c[SHOAL__LC_LOST_DOWN]));
		shoal__table_cell(&t, "%llu", (unsigned long long)l->c[SHOAL__LC_REFUSED]);
	}
	shoal__table_print(&t, out, "  ");
	shoal__table_free(&t);
	return 0;
}

static void json_link_rate(struct shoal__json *j, const char *key,
			   const struct shoal__link_view *l, unsigned k, double secs)
{
	double rate;

	if (link_rate(l, k, secs, &rate))
		shoal__json_real(j, key, rate, 1);
	else
		shoal__json_null(j, key);
}

/* "links": one object per link, when the system has a bridge here. */
static void json_links(struct shoal__json *j, double secs)
{
	if (!links_now->present)
		return;
	shoal__json_array_begin(j, "links");
	for (uint32_t i = 0; i < links_now->n; i++) {
		const struct shoal__link_view *l = &links_now->links[i];

		shoal__json_object_begin(j, NULL);
		shoal__json_string(j, "peer", l->peer);
		shoal__json_string(j, "state", shoal__link_state_name(l->state));
		shoal__json_uint(j, "rtt_ns", l->c[SHOAL__LC_RTT_NS]);
		json_link_rate(j, "messages_sent_per_s", l, SHOAL__LC_RECORDS_SENT, secs);
		json_link_rate(j, "messages_received_per_s", l, SHOAL__LC_RECORDS_RECV, secs);
		json_link_rate(j, "frames_sent_per_s", l, SHOAL__LC_FRAMES_SENT, secs);
		json_link_rate(j, "frames_received_per_s", l, SHOAL__LC_FRAMES_RECV, secs);
		shoal__json_uint(j, "in_flight", l->c[SHOAL__LC_IN_FLIGHT]);
		shoal__json_uint(j, "credits", l->c[SHOAL__LC_CREDITS]);
		shoal__json_uint(j, "lost_link", l->c[SHOAL__LC_LOST_LINK]);
		shoal__json_uint(j, "lost_down", l->c[SHOAL__LC_LOST_DOWN]);
		shoal__json_uint(j, "refused", l->c[SHOAL__LC_REFUSED]);
		shoal__json_object_end(j);
	}
	shoal__json_array_end(j);
}

/* ---- Text output ---- */

static void rate_cell(struct shoal__table *t, const struct shoal__top_rates *r, double v)
{
	char buf[SHOAL_FMT_SHORT_SIZE];

	if (r->known)
		shoal__table_cell(t, "%s", shoal__fmt_rate(buf, sizeof(buf), v));
	else
		shoal__table_cell(t, "-");
}

int shoal__top_print_dispatchers(FILE *out, const struct shoal__top_frame *f)
{
	static const struct shoal__column cols[] = {
		{ "#", 'r' }, { "NODE", 'r' }, { "MSG/S", 'r' }, { "DELIVERED/S", 'r' },
		{ "DROPPED/S", 'r' }, { "BUSY", 'r' },
	};
	const struct shoal__sys_view *v = f->v;
	struct shoal__top_rates busiest[SHOAL_MAX_NODES];
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), v->n_dispatchers) < 0)
		return -ENOMEM;
	memcpy(busiest, f->disp, v->n_dispatchers * sizeof(busiest[0]));
	qsort(busiest, v->n_dispatchers, sizeof(busiest[0]), busiest_first);
	for (uint32_t i = 0; i < v->n_dispatchers; i++) {
		const struct shoal__top_rates *r = &busiest[i];

		shoal__table_row(&t);
		shoal__table_cell(&t, "%u", r->index);
		shoal__table_cell(&t, "%d", v->disp[r->index].node);
		rate_cell(&t, r, r->in);
		rate_cell(&t, r, r->out);
		rate_cell(&t, r, r->dropped);
		if (r->known)
			shoal__table_cell(&t, "%.1f%%", r->busy_pct);
		else
			shoal__table_cell(&t, "-");
	}
	shoal__table_print(&t, out, "  ");
	shoal__table_free(&t);
	return 0;
}

static void group_row(struct shoal__table *t, const struct shoal__group_view *g,
		      const struct shoal__top_rates *r)
{
	char name[NAME_SIZE], state[32], oldest[SHOAL_FMT_SHORT_SIZE], p99[SHOAL_FMT_SHORT_SIZE];
	const char *s = shoal__group_state_name(g->state);

	if (s == NULL)
		snprintf(state, sizeof(state), "invalid(%u)", g->state);
	shoal__table_row(t);
	shoal__table_cell(t, "%s", shoal__fmt_printable(name, sizeof(name), g->name));
	shoal__table_cell(t, "%s", s != NULL ? s : state);
	if (g->pid > 0)
		shoal__table_cell(t, "%d", g->pid);
	else
		shoal__table_cell(t, "-");
	rate_cell(t, r, r->in);
	rate_cell(t, r, r->out);
	rate_cell(t, r, r->dropped);
	if (g->have_rings)
		shoal__table_cell(t, "%llu", (unsigned long long)r->queued);
	else
		shoal__table_cell(t, "-");
	if (r->fill_pct >= 0)
		shoal__table_cell(t, "%.0f%%", r->fill_pct);
	else
		shoal__table_cell(t, "-");
	shoal__table_cell(t, "%s", r->have_oldest ? shoal__fmt_duration(oldest, sizeof(oldest),
									 r->oldest_ns) : "-");
	shoal__table_cell(t, "%s", r->have_lat ? shoal__fmt_duration(p99, sizeof(p99),
								      r->p99_ns) : "-");
	shoal__table_cell(t, "%u", shoal__group_view_restarts(g));
	shoal__table_cell(t, "%s", shoal__group_view_corrupt(g) ? "CORRUPT" : "OK");
}

int shoal__top_print_groups(FILE *out, const struct shoal__top_frame *f)
{
	static const struct shoal__column cols[] = {
		{ "GROUP", 'l' }, { "STATE", 'l' }, { "PID", 'r' }, { "IN/S", 'r' },
		{ "OUT/S", 'r' }, { "DROPPED/S", 'r' }, { "QUEUED", 'r' }, { "FILL", 'r' },
		{ "OLDEST", 'r' }, { "P99", 'r' }, { "RESTARTS", 'r' }, { "STATUS", 'l' },
	};
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), f->n_shown) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->n_shown; i++)
		group_row(&t, &f->v->groups[f->shown[i]->index], f->shown[i]);
	shoal__table_print(&t, out, "  ");
	shoal__table_free(&t);
	return 0;
}

void shoal__top_print_title(FILE *out, const struct shoal__top_frame *f)
{
	const struct shoal__sys_view *v = f->v;
	const char *state = shoal__system_state_name(v->state);
	struct shoal__sys_counts n;

	shoal__sys_view_count(v, &n);
	fprintf(out, "shoal top: system %s, router pid %d (%s), %s; %u groups, %u running, "
		"%u failed; refresh %u over %.2f s", v->system, v->router_pid,
		shoal__alive_name(v->router_alive), state != NULL ? state : "invalid state",
		n.declared, n.running, n.failed, f->refresh, f->secs);
}

void shoal__top_print_groups_title(FILE *out, const struct shoal__top_frame *f,
				   const struct shoal__top_show *s)
{
	fprintf(out, "Groups (%s", s->sort->title);
	if (s->filtered)
		fprintf(out, ", matching /%s/: %u of %u", s->filter, f->n_shown, f->n_groups);
	fputc(')', out);
}

/* One refresh printed after the last, for a pipe or a file. */
static int print_text(const struct shoal__top_frame *f, const struct shoal__top_show *s)
{
	int ret;

	if (f->refresh > 1)
		putchar('\n');
	shoal__top_print_title(stdout, f);
	printf("\n\nDispatchers (busiest first)\n");
	ret = shoal__top_print_dispatchers(stdout, f);
	if (ret == 0) {
		putchar('\n');
		shoal__top_print_groups_title(stdout, f, s);
		putchar('\n');
		ret = shoal__top_print_groups(stdout, f);
	}
	if (ret == 0 && links_now->present) {
		printf("\nLinks to other hosts\n");
		ret = shoal__top_print_links(stdout, f);
	}
	if (ret == 0 && f->v->corrupt)
		printf("\nregistry CORRUPT: %s\n", f->v->reason);
	fflush(stdout);
	return ret;
}

/* ---- JSON output: one line per refresh ---- */

static void json_rate(struct shoal__json *j, const char *key, const struct shoal__top_rates *r,
		      double v)
{
	if (r->known)
		shoal__json_real(j, key, v, 1);
	else
		shoal__json_null(j, key);
}

static void json_dispatchers(struct shoal__json *j, const struct shoal__top_frame *f)
{
	shoal__json_array_begin(j, "dispatchers");
	for (uint32_t d = 0; d < f->v->n_dispatchers; d++) {
		const struct shoal__top_rates *r = &f->disp[d];

		shoal__json_object_begin(j, NULL);
		shoal__json_uint(j, "index", d);
		shoal__json_int(j, "node", f->v->disp[d].node);
		json_rate(j, "messages_per_s", r, r->in);
		json_rate(j, "delivered_per_s", r, r->out);
		json_rate(j, "dropped_per_s", r, r->dropped);
		json_rate(j, "busy_pct", r, r->busy_pct);
		shoal__json_object_end(j);
	}
	shoal__json_array_end(j);
}

/* The latency percentiles since the last refresh (null when none was handled). */
static void json_latency(struct shoal__json *j, const struct shoal__top_rates *r)
{
	const char *keys[] = { "p50_ns", "p99_ns", "p999_ns" };
	uint64_t vals[] = { r->p50_ns, r->p99_ns, r->p999_ns };

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (r->have_lat)
			shoal__json_uint(j, keys[i], vals[i]);
		else
			shoal__json_null(j, keys[i]);
	}
}

static void json_group(struct shoal__json *j, const struct shoal__group_view *g,
		       const struct shoal__top_rates *r)
{
	const char *state = shoal__group_state_name(g->state);

	shoal__json_object_begin(j, NULL);
	shoal__json_uint(j, "id", g->id);
	shoal__json_string(j, "name", g->name);
	if (state != NULL)
		shoal__json_string(j, "state", state);
	else
		shoal__json_uint(j, "state", g->state);
	shoal__json_int(j, "pid", g->pid);
	json_rate(j, "in_per_s", r, r->in);
	json_rate(j, "out_per_s", r, r->out);
	json_rate(j, "dropped_per_s", r, r->dropped);
	if (g->have_rings)
		shoal__json_uint(j, "queued", r->queued);
	else
		shoal__json_null(j, "queued");
	if (r->fill_pct >= 0)
		shoal__json_real(j, "fill_pct", r->fill_pct, 1);
	else
		shoal__json_null(j, "fill_pct");
	if (r->have_oldest)
		shoal__json_uint(j, "oldest_age_ns", r->oldest_ns);
	else
		shoal__json_null(j, "oldest_age_ns");
	json_latency(j, r);
	shoal__json_uint(j, "restarts", shoal__group_view_restarts(g));
	shoal__json_string(j, "status", shoal__group_view_corrupt(g) ? "corrupt" : "ok");
	shoal__json_object_end(j);
}

static void print_json(const struct shoal__top_frame *f)
{
	struct shoal__json j;

	shoal__json_init_line(&j, stdout);
	shoal__json_doc_begin(&j, TOP_JSON_SCHEMA);
	shoal__json_string(&j, "system", f->v->system);
	shoal__json_uint(&j, "refresh", f->refresh);
	shoal__json_real(&j, "seconds", f->secs, 3);
	shoal__json_int(&j, "router_pid", f->v->router_pid);
	json_dispatchers(&j, f);
	shoal__json_array_begin(&j, "groups");
	for (uint32_t i = 0; i < f->n_shown; i++)
		json_group(&j, &f->v->groups[f->shown[i]->index], f->shown[i]);
	shoal__json_array_end(&j);
	json_links(&j, f->secs);
	shoal__json_string(&j, "status", shoal__sys_view_corrupt(f->v) ? "corrupt" : "ok");
	shoal__json_object_end(&j);
	fflush(stdout);
}

/* ---- The loop ---- */

/*
 * Catch SIGINT and SIGTERM; *set gets them, and SIGWINCH for the screen:
 * all three stay blocked but inside the wait (wait_interval()).
 */
static void catch_stop_signals(sigset_t *set)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a blocking call cut short returns, and we stop. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGWINCH);
}

/*
 * Sleep `ms`, reading the screen's keys meanwhile when there is one; false
 * if a stop was asked (a signal, or `q` on the screen) before or during it.
 */
static bool wait_interval(const sigset_t *stop_set, uint32_t ms, struct shoal__top_screen *scr,
			  struct shoal__top_frame *f)
{
	struct pollfd keys = { .fd = STDIN_FILENO, .events = POLLIN };
	struct timespec now, end, left;
	sigset_t old;
	bool quit = false;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += ms / 1000;
	end.tv_nsec += (long)(ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	/*
	 * Blocked from the check until ppoll() unblocks them atomically: a
	 * signal in between waits for ppoll() and cuts it short. The screen's
	 * SIGWINCH handler (ncurses') then turns a resize into a key.
	 */
	sigprocmask(SIG_BLOCK, stop_set, &old);
	for (;;) {
		if (scr != NULL && !shoal__top_screen_keys(scr, f))
			quit = true;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (quit || stop_asked || now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		left.tv_sec = end.tv_sec - now.tv_sec;
		left.tv_nsec = end.tv_nsec - now.tv_nsec;
		if (left.tv_nsec < 0) {
			left.tv_sec--;
			left.tv_nsec += 1000000000;
		}
		/* A terminal hung up would make every poll return at once. */
		if (ppoll(scr != NULL ? &keys : NULL, scr != NULL, &left, &old) > 0 &&
		    (keys.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0)
			quit = true;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return !stop_asked && !quit;
}

/* The same system as before, or a new router of the same name. */
static bool same_incarnation(const struct shoal__sys_view *a, const struct shoal__sys_view *b)
{
	return a->router_pid == b->router_pid && a->registry.ctime_ns == b->registry.ctime_ns;
}

/*
 * Take the next view into *v. Returns -1 to go on, or the exit code to stop
 * with after saying why (the screen, if any, given back to the terminal
 * first). The system going away is a normal end (exit 0), unless it was
 * gone before the first refresh.
 */
static int next_view(const struct shoal__cmd *cmd, const char *system,
		     struct shoal__sys_view *v, bool first, struct shoal__top_screen *scr)
{
	static const struct shoal__sys_view_opts o = { .mailboxes = true, .rings = true,
						       .check_retries = 3 };
	struct shoal_err err = {{0}};
	int ret = shoal__sys_view_take(v, system, &o, &err);
	pid_t pid;

	links_take(system);
	if (ret == 0 && v->router_alive != 0)
		return -1;
	shoal__top_screen_close(scr);
	if (ret == -ENOENT && !first) {
		fprintf(stderr, "shoal %s: system %s went away (its registry is gone)\n",
			cmd->name, system);
		return SHOAL_EXIT_OK;
	}
	if (ret < 0)
		return shoal__sys_view_fail(cmd->name, system, ret, &err);
	pid = v->router_pid;
	shoal__sys_view_free(v);
	/* The end of a system watched is a normal end, said on stderr. */
	if (!first) {
		fprintf(stderr, "shoal %s: system %s went away (its router, pid %d, is gone)\n",
			cmd->name, system, pid);
		return SHOAL_EXIT_OK;
	}
	return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ESRCH, "system %s is not "
			       "running: its router (pid %d) is gone; 'shoal stat %s' shows "
			       "what it left", system, pid, system);
}

static int refresh_loop(const struct shoal__cmd *cmd, const struct top_args *a,
			struct shoal__sys_view *views, struct shoal__top_show *show,
			struct shoal__top_frame *f)
{
	struct shoal__sys_view *was = &views[0], *now = &views[1], *tmp;
	struct shoal__top_screen *scr = NULL;
	bool corrupt = false;
	sigset_t stop_set;
	int ret;

	/* Before the screen: ncurses leaves alone the signals caught already. */
	catch_stop_signals(&stop_set);
	/* A counted run is a batch: what it printed stays on the terminal. */
	if (!a->json && a->count == 0)
		scr = shoal__top_screen_open(show, a->system, a->interval_ms);
	for (uint32_t refresh = 1; a->count == 0 || refresh <= a->count; refresh++) {
		if (!wait_interval(&stop_set, a->interval_ms, scr, refresh > 1 ? f : NULL))
			break;
		ret = next_view(cmd, a->system, now, false, scr);
		if (ret >= 0)
			return ret;
		if (!same_incarnation(was, now) && scr != NULL)
			shoal__top_screen_note(scr, "system %s restarted (router pid %d): rates "
					       "start over", a->system, now->router_pid);
		else if (!same_incarnation(was, now))
			fprintf(stderr, "shoal %s: system %s restarted (router pid %d): rates "
				"start over\n", cmd->name, a->system, now->router_pid);
		frame_make(f, now, same_incarnation(was, now) ? was : now, refresh);
		shoal__top_select(f, show);
		ret = 0;
		if (scr != NULL)
			shoal__top_screen_draw(scr, f);
		else if (a->json)
			print_json(f);
		else
			ret = print_text(f, show);
		corrupt |= shoal__sys_view_corrupt(now);
		shoal__sys_view_free(was);
		tmp = was;
		was = now;
		now = tmp;
		if (ret < 0) {
			shoal__top_screen_close(scr);
			return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, ret, "out of memory");
		}
	}
	shoal__top_screen_close(scr);
	return corrupt ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
}

static int cmd_top(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct shoal__top_frame f = { 0 };
	struct shoal__sys_view *views;
	struct shoal__top_show show = { 0 };
	struct top_args a;
	int ret = parse_args(cmd, argc, argv, &a, &show);

	if (ret >= 0) {
		shoal__top_show_free(&show);
		return ret;
	}
	/* Two views: the previous refresh's and this one's, swapped each time. */
	views = calloc(2, sizeof(*views));
	f.groups = calloc(SHOAL_MAX_GROUPS, sizeof(*f.groups));
	f.shown = calloc(SHOAL_MAX_GROUPS, sizeof(*f.shown));
	if (views == NULL || f.groups == NULL || f.shown == NULL) {
		ret = shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ENOMEM, "out of memory");
		goto out;
	}
	ret = next_view(cmd, a.system, &views[0], true, NULL);
	if (ret < 0) {
		ret = refresh_loop(cmd, &a, views, &show, &f);
		/* The loop leaves the last view taken in one of the two. */
		shoal__sys_view_free(&views[0]);
		shoal__sys_view_free(&views[1]);
	}
out:
	free(f.shown);
	free(f.groups);
	free(views);
	shoal__top_show_free(&show);
	return ret;
}

const struct shoal__cmd shoal__cmd_top = {
	.name = "top",
	.summary = "Show a system's message rates, refreshed, busiest first",
	.fn = cmd_top,
	.help =
	"Usage: shoal top [--interval MS] [--count N] [--sort KEY] [--filter REGEX]\n"
	"                 [--json] SYSTEM\n"
	"\n"
	"Show the running system SYSTEM every MS milliseconds: for each dispatcher\n"
	"the messages it took from uplinks, delivered and dropped per second and how\n"
	"busy it was; for each group the messages it received and sent per second,\n"
	"the copies dropped for it per second, what waits in its inbound rings\n"
	"(QUEUED messages, FILL: the bytes in use of its fullest inbound ring, and\n"
	"OLDEST: how long the oldest message there has waited), P99: the latency\n"
	"from send to handler of 99 % of the messages it handled since the last\n"
	"refresh, and its restarts; on a system that spans hosts, each link of this\n"
	"host's bridge: its state, round trip, messages and frames sent and received\n"
	"per second, in flight, credits, lost and refused. Rates come from the\n"
	"difference between two readings of the counters the system keeps in shared\n"
	"memory. Read-only, like 'shoal stat'.\n"
	"\n"
	"When standard input and output are terminals (and no --count), the screen\n"
	"is redrawn at every refresh, each line cut to the window's width, and\n"
	"these keys work:\n"
	"  q            quit (Ctrl-C too)\n"
	"  h, ?         show the keys (any key goes back)\n"
	"  r n d b f    sort the groups: by rate (IN/S + OUT/S, busiest first), by\n"
	"               name, by DROPPED/S, by QUEUED (backlog), by FILL\n"
	"  /            type a filter on group names, Enter to apply it\n"
	"  Esc          clear the filter\n"
	"  Up, Down, PgUp, PgDn, Home, End   scroll the groups\n"
	"Otherwise each refresh is printed after the last.\n"
	"It runs until q or Ctrl-C, until N refreshes, or until the system goes away\n"
	"(its registry is removed or its router dies), which it says on stderr.\n"
	"\n"
	"Options:\n"
	"  --interval MS   time between refreshes (default 1000, from 10 to 3600000)\n"
	"  --count N       stop after N refreshes, printed one after the other\n"
	"                  even on a terminal\n"
	"  --sort KEY      order of the groups: rate (the default), name, dropped,\n"
	"                  queued or fill\n"
	"  --filter REGEX  only the groups whose name matches REGEX, a POSIX extended\n"
	"                  regular expression matched anywhere in the name (a plain\n"
	"                  word matches as a substring)\n"
	"  --json          one JSON object per refresh, each on one line\n"
	"  -h, --help      show this help\n"
	"\n"
	"Exit status:\n"
	"  0  stopped by q, Ctrl-C, --count or the system going away, nothing\n"
	"     corrupted\n"
	"  1  some refresh found something corrupted, or the system's router was\n"
	"     already gone at the start\n"
	"  2  bad command line\n"
	"  3  cannot read the system's registry (no such system ...)\n",
	.json_schema = TOP_JSON_SCHEMA,
};
