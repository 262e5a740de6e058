/* SPDX-License-Identifier: MIT */
/*
 * `shoal metrics`: every counter of a running system in the OpenMetrics text
 * exposition format (1.0.0), for Prometheus and other scrapers: the system
 * and its router, each dispatcher, message type, group, worker and mailbox
 * ring. Printed once, or served over HTTP at /metrics (--listen), each
 * request from a fresh view of shared memory (tools/sysview.h). Rates are
 * the scraper's business: counters are printed as they stand.
 *
 * The format's rules this follows (docs/metrics.md lists the families):
 * every family is announced once by `# TYPE` (then `# UNIT` where it has
 * one, then `# HELP`) and all its samples follow it at once; a counter's
 * samples end in `_total`, an info's in `_info`, a histogram's in `_bucket`
 * (cumulative, in increasing `le`, `+Inf` last), `_count` and `_sum`, and a
 * stateset's carry a label named after the family; label values escape
 * backslash, double quote and newline, and bytes outside printable ASCII
 * (names read from shared memory are untrusted) are written as the text
 * \xNN; the exposition ends with `# EOF`.
 *
 * Serving: libmicrohttpd answers on its own single polling thread, so views
 * are never taken concurrently (the SIGBUS guard of tools/snapshot.c is
 * process-wide). SIGINT and SIGTERM are blocked in every thread and taken by
 * sigwait() in the main one, which then stops the daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifdef SHOAL_HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

#include "runtime/bridge/view.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/snapshot.h"
#include "tools/sysview.h"

#define CONTENT_TYPE "application/openmetrics-text; version=1.0.0; charset=utf-8"

/* Labels of one sample: a few names, each escaped value at most 5 bytes a byte. */
#define LABELS_MAX 1024

struct metrics_args {
	const char *system;
	const char *listen;              /* ADDR:PORT as given, or NULL */
	struct sockaddr_storage addr;
};

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_LISTEN,
};

/* ---- Families and samples ---- */

enum fam_type { COUNTER, GAUGE, INFO, STATESET, HISTOGRAM };

struct fam {
	const char *name;                /* without the _total or _info of its samples */
	enum fam_type type;
	const char *unit;                /* a suffix of name, or NULL */
	const char *help;                /* no double quote, backslash or newline */
	bool ns;                         /* values are nanoseconds, printed as seconds */
};

static void fam_begin(FILE *out, const struct fam *f)
{
	static const char *const types[] = {
		[COUNTER] = "counter", [GAUGE] = "gauge", [INFO] = "info", [STATESET] = "stateset",
		[HISTOGRAM] = "histogram",
	};

	fprintf(out, "# TYPE %s %s\n", f->name, types[f->type]);
	if (f->unit != NULL)
		fprintf(out, "# UNIT %s %s\n", f->name, f->unit);
	fprintf(out, "# HELP %s %s\n", f->name, f->help);
}

static void sample(FILE *out, const struct fam *f, const char *labels, uint64_t v)
{
	const char *suffix = f->type == COUNTER ? "_total" : f->type == INFO ? "_info" : "";

	fprintf(out, "%s%s", f->name, suffix);
	if (labels[0] != '\0')
		fprintf(out, "{%s}", labels);
	if (f->ns)
		fprintf(out, " %llu.%09llu\n", (unsigned long long)(v / 1000000000u),
			(unsigned long long)(v % 1000000000u));
	else
		fprintf(out, " %llu\n", (unsigned long long)v);
}

/* Append name="value" to the label list in buf, escaping the value. */
static void label(char buf[LABELS_MAX], const char *name, const char *value)
{
	size_t n = strlen(buf);

	/* Room for the name, its quotes and at least one escape, or no label:
	 * the callers' few labels never come near it. */
	if (n + strlen(name) + 16 >= LABELS_MAX)
		return;
	n += (size_t)snprintf(buf + n, LABELS_MAX - n, "%s%s=\"", n > 0 ? "," : "", name);
	for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
		/* The longest escape (\\xNN) and the closing quote still fit. */
		if (n + 8 >= LABELS_MAX)
			break;
		if (*p == '\\' || *p == '"')
			n += (size_t)snprintf(buf + n, LABELS_MAX - n, "\\%c", *p);
		else if (*p == '\n')
			n += (size_t)snprintf(buf + n, LABELS_MAX - n, "\\n");
		else if (*p < 0x20 || *p > 0x7e)
			n += (size_t)snprintf(buf + n, LABELS_MAX - n, "\\\\x%02x", *p);
		else
			buf[n++] = (char)*p;
	}
	snprintf(buf + n, LABELS_MAX - n, "\"");
}

static void label_int(char buf[LABELS_MAX], const char *name, int64_t value)
{
	char num[24];

	snprintf(num, sizeof(num), "%lld", (long long)value);
	label(buf, name, num);
}

/*
 * A scope is a kind of thing with numbers (a dispatcher, a group, a ring
 * ...): its families, in the order of the values next() fills, and next(),
 * which moves the cursor to the next such thing in the view and fills its
 * labels and values, or returns false at the end. A value not known for
 * one thing (have[i] false) is left out of its family.
 */
#define SCOPE_MAX_FAMS 24

struct cursor {
	uint32_t a, b;                   /* position; both 0 at the start */
	char labels[LABELS_MAX];
	uint64_t val[SCOPE_MAX_FAMS];
	bool have[SCOPE_MAX_FAMS];
};

struct scope {
	const struct fam *fams;
	size_t n_fams;
	bool (*next)(const struct shoal__sys_view *v, struct cursor *c);
};

#define SCOPE(fams, next) { fams, sizeof(fams) / sizeof(fams[0]), next }

static void cursor_clear(struct cursor *c)
{
	c->labels[0] = '\0';
	for (size_t i = 0; i < SCOPE_MAX_FAMS; i++)
		c->have[i] = true;
}

static void print_scope(FILE *out, const struct shoal__sys_view *v, const struct scope *s)
{
	for (size_t i = 0; i < s->n_fams; i++) {
		struct cursor c = { 0 };

		fam_begin(out, &s->fams[i]);
		while (s->next(v, &c))
			if (c.have[i])
				sample(out, &s->fams[i], c.labels, c.val[i]);
	}
}

/* ---- Dispatchers ---- */

static const struct fam disp_fams[] = {
	{ "shoal_dispatcher_batches", COUNTER, NULL,
	  "Dispatcher loop passes that moved at least one message" },
	{ "shoal_dispatcher_messages", COUNTER, NULL, "Records the dispatcher took from uplinks" },
	{ "shoal_dispatcher_delivered", COUNTER, NULL,
	  "Copies the dispatcher wrote into inbound rings" },
	{ "shoal_dispatcher_no_route", COUNTER, NULL, "Messages that matched no filter" },
	{ "shoal_dispatcher_dropped_full", COUNTER, NULL,
	  "try_send copies dropped because the destination ring was full" },
	{ "shoal_dispatcher_dropped_dead", COUNTER, NULL,
	  "Copies dropped because the destination group had failed" },
	{ "shoal_dispatcher_dropped_corrupt", COUNTER, NULL,
	  "Copies dropped because the destination ring was corrupted" },
	{ "shoal_dispatcher_malformed", COUNTER, NULL, "Records rejected for a bad envelope" },
	{ "shoal_dispatcher_discarded", COUNTER, NULL, "Matches of discard filters" },
	{ "shoal_dispatcher_condemned_rings", COUNTER, NULL,
	  "Rings the dispatcher found corrupted and condemned" },
	{ "shoal_dispatcher_sleeps", COUNTER, NULL, "Times the dispatcher went to sleep idle" },
	{ "shoal_dispatcher_busy_seconds", COUNTER, "seconds",
	  "Time spent in passes that moved messages", true },
	{ "shoal_dispatcher_doorbell_sleeps", COUNTER, NULL,
	  "Futex waits the dispatcher entered on its doorbell" },
	{ "shoal_dispatcher_doorbell_wakes", COUNTER, NULL,
	  "Futex wakes producers made on the dispatcher's doorbell" },
	{ "shoal_dispatcher_stream_min", GAUGE, NULL,
	  "Fewest records of a chunk the dispatcher writes with streamed stores, 0: none" },
	{ "shoal_dispatcher_stream_probe_seconds", GAUGE, "seconds",
	  "Cache line round trip that router.stream auto timed at start, 0: not timed", true },
};

static bool disp_next(const struct shoal__sys_view *v, struct cursor *c)
{
	const struct shoal__disp_view *d;
	uint64_t *x = c->val;

	if (c->a >= v->n_dispatchers)
		return false;
	d = &v->disp[c->a];
	cursor_clear(c);
	label_int(c->labels, "dispatcher", c->a);
	label_int(c->labels, "node", d->node);
	x[0] = d->batches, x[1] = d->messages, x[2] = d->delivered, x[3] = d->no_route;
	x[4] = d->dropped_full, x[5] = d->dropped_dead, x[6] = d->dropped_corrupt;
	x[7] = d->malformed, x[8] = d->discarded, x[9] = d->corrupt, x[10] = d->sleeps;
	x[11] = d->busy_ns;
	x[12] = d->doorbell.sleeps, x[13] = d->doorbell.wakes;
	x[14] = d->stream_min, x[15] = d->stream_probe_ns;
	c->have[12] = c->have[13] = v->have_bells;
	c->a++;
	return true;
}

static const struct scope disp_scope = SCOPE(disp_fams, disp_next);

/* ---- Message types ---- */

static const struct fam type_fams[] = {
	{ "shoal_type_routes", GAUGE, NULL, "Filters that list the message type" },
	{ "shoal_type_max_size_bytes", GAUGE, "bytes", "Largest payload of the message type" },
	{ "shoal_type_live_routes", GAUGE, NULL,
	  "Filters that list the message type, less those to a failed group" },
};

static bool type_next(const struct shoal__sys_view *v, struct cursor *c)
{
	const struct shoal__type_view *t;

	if (c->a >= v->n_types)
		return false;
	t = &v->types[c->a++];
	cursor_clear(c);
	label(c->labels, "type", t->name);
	label_int(c->labels, "type_id", t->id);
	c->val[0] = t->routes;
	c->val[1] = t->max_size;
	c->val[2] = t->live_routes;
	return true;
}

static const struct scope type_scope = SCOPE(type_fams, type_next);

/* ---- Groups ---- */

static const struct fam group_fams[] = {
	{ "shoal_group_up", GAUGE, NULL,
	  "1 while a process of the group is attached (running or stopping)" },
	{ "shoal_group_failed", GAUGE, NULL, "1 when the group has failed" },
	{ "shoal_group_pid", GAUGE, NULL, "Pid of the group's process" },
	{ "shoal_group_generation", GAUGE, NULL, "Incarnation of the group, bumped at every attach" },
	{ "shoal_group_workers", GAUGE, NULL, "Worker threads of the group" },
	{ "shoal_group_actors", GAUGE, NULL, "Actors of the group" },
	{ "shoal_group_restarts", COUNTER, NULL, "Processes of the group attached after the first" },
	{ "shoal_group_delivered", COUNTER, NULL,
	  "Routed copies the dispatchers wrote into the group's rings" },
	{ "shoal_group_dropped_full", COUNTER, NULL,
	  "Routed try_send copies dropped because the group's ring was full" },
	{ "shoal_group_dropped_dead", COUNTER, NULL,
	  "Routed copies dropped because the group had failed" },
	{ "shoal_group_dropped_corrupt", COUNTER, NULL,
	  "Routed copies dropped because the group's ring was corrupted" },
	{ "shoal_group_damaged", COUNTER, NULL,
	  "Rings and mailboxes of the group found corrupted" },
	{ "shoal_group_replaced", COUNTER, NULL, "Corrupted rings of the group replaced" },
	{ "shoal_group_lost_corrupt", COUNTER, NULL,
	  "Messages lost in the group's corrupted rings and mailboxes" },
	{ "shoal_group_lost_queued", COUNTER, NULL,
	  "Messages left in the group's mailbox when it failed or the system stopped" },
	{ "shoal_group_queued", GAUGE, NULL, "Messages waiting in the group's inbound rings" },
	{ "shoal_group_queued_bytes", GAUGE, "bytes",
	  "Bytes in use in the group's inbound rings" },
	{ "shoal_group_corrupt", GAUGE, NULL,
	  "1 when something read about the group looks corrupted" },
	{ "shoal_group_oldest_age_seconds", GAUGE, "seconds",
	  "How long the oldest message in the group's inbound rings has waited", true },
	{ "shoal_group_latency_out_of_range", COUNTER, NULL,
	  "Messages whose send time was ahead of the handler's clock or 2^40 ns behind it, "
	  "left out of shoal_group_latency_seconds" },
};

/* The next declared group at or after c->a, or NULL. */
static const struct shoal__group_view *next_group(const struct shoal__sys_view *v, uint32_t *a)
{
	for (; *a < v->n_groups; (*a)++)
		if (v->groups[*a].state != SHOAL_GROUP_EMPTY)
			return &v->groups[*a];
	return NULL;
}

static bool group_next(const struct shoal__sys_view *v, struct cursor *c)
{
	const struct shoal__group_view *g = next_group(v, &c->a);
	uint64_t *x = c->val;
	uint64_t queued, bytes;

	if (g == NULL)
		return false;
	c->a++;
	cursor_clear(c);
	label(c->labels, "group", g->name);
	shoal__group_view_queued(g, &queued, &bytes);
	x[0] = g->state == SHOAL_GROUP_RUNNING || g->state == SHOAL_GROUP_STOPPING;
	x[1] = g->state == SHOAL_GROUP_FAILED;
	x[2] = (uint64_t)g->pid;
	c->have[2] = g->pid > 0;
	x[3] = g->gen, x[4] = g->n_workers, x[5] = g->n_actors;
	x[6] = shoal__group_view_restarts(g);
	x[7] = g->delivered, x[8] = g->dropped_full, x[9] = g->dropped_dead;
	x[10] = g->dropped_corrupt, x[11] = g->damaged, x[12] = g->replaced;
	x[13] = g->lost_corrupt, x[14] = g->lost_queued;
	x[15] = queued, x[16] = bytes;
	c->have[15] = c->have[16] = g->have_rings;
	x[17] = shoal__group_view_corrupt(g);
	c->have[18] = shoal__group_view_oldest(g, &x[18]);
	x[19] = g->lat != NULL ? g->lat->out_of_range : 0;
	c->have[19] = g->lat != NULL;
	return true;
}

static const struct scope group_scope = SCOPE(group_fams, group_next);

/* ---- Groups, per dispatcher ---- */

static const struct fam gdisp_fams[] = {
	{ "shoal_group_dispatcher_delivered", COUNTER, NULL,
	  "Routed copies one dispatcher wrote into the group's rings, since the group got "
	  "its slot" },
	{ "shoal_group_dispatcher_dropped_full", COUNTER, NULL,
	  "Routed try_send copies one dispatcher dropped because the group's ring was full" },
	{ "shoal_group_dispatcher_dropped_dead", COUNTER, NULL,
	  "Routed copies one dispatcher dropped because the group had failed" },
	{ "shoal_group_dispatcher_dropped_corrupt", COUNTER, NULL,
	  "Routed copies one dispatcher dropped because the group's ring was corrupted" },
};

static bool gdisp_next(const struct shoal__sys_view *v, struct cursor *c)
{
	const struct shoal__group_view *g;
	const struct shoal__gstat_view *s;

	for (;;) {
		g = next_group(v, &c->a);
		if (g == NULL)
			return false;
		if (c->b < v->n_dispatchers)
			break;
		c->a++;
		c->b = 0;
	}
	s = &g->per_disp[c->b];
	cursor_clear(c);
	label(c->labels, "group", g->name);
	label_int(c->labels, "dispatcher", c->b);
	c->b++;
	c->val[0] = s->delivered, c->val[1] = s->dropped_full, c->val[2] = s->dropped_dead;
	c->val[3] = s->dropped_corrupt;
	return true;
}

static const struct scope gdisp_scope = SCOPE(gdisp_fams, gdisp_next);

/* ---- Latency: one histogram per group ---- */

/*
 * The buckets shown: le at each power of two of nanoseconds from 2^LE_FIRST
 * to 2^LE_LAST (256 ns to 275 s), every one a bound of the histogram's own
 * buckets (runtime/layout.h), so each cumulative count is exact; then +Inf.
 */
#define LE_FIRST 8u
#define LE_LAST 38u

static void ns_seconds(char *buf, size_t cap, uint64_t ns)
{
	snprintf(buf, cap, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
		 (unsigned long long)(ns % 1000000000u));
}

static void latency_sample(FILE *out, const char *suffix, const char *labels, const char *le,
			   const char *value)
{
	fprintf(out, "shoal_group_latency_seconds%s{%s%s%s%s} %s\n", suffix, labels,
		le != NULL ? ",le=\"" : "", le != NULL ? le : "", le != NULL ? "\"" : "", value);
}

static void print_latency(FILE *out, const struct shoal__sys_view *v)
{
	static const struct fam f = { "shoal_group_latency_seconds", HISTOGRAM, "seconds",
		"Time from a message's send to the start of its handler, per handler run" };
	const struct shoal__group_view *g;

	fam_begin(out, &f);
	for (uint32_t a = 0; (g = next_group(v, &a)) != NULL; a++) {
		const struct shoal__lat_sums *l = g->lat;
		char labels[LABELS_MAX] = "", le[32], num[32];
		uint64_t below = 0;
		uint32_t b = 0;

		if (l == NULL)
			continue;
		label(labels, "group", g->name);
		for (uint32_t k = LE_FIRST; k <= LE_LAST; k++) {
			uint64_t bound = UINT64_C(1) << k;

			for (; b < SHOAL__LAT_BUCKETS && shoal__lat_lower(b + 1) <= bound; b++)
				below += l->bucket[b];
			ns_seconds(le, sizeof(le), bound);
			snprintf(num, sizeof(num), "%llu", (unsigned long long)below);
			latency_sample(out, "_bucket", labels, le, num);
		}
		snprintf(num, sizeof(num), "%llu", (unsigned long long)l->count);
		latency_sample(out, "_bucket", labels, "+Inf", num);
		latency_sample(out, "_count", labels, NULL, num);
		ns_seconds(num, sizeof(num), l->sum_ns);
		latency_sample(out, "_sum", labels, NULL, num);
	}
}

/* ---- Workers ---- */

static const struct fam worker_fams[] = {
	{ "shoal_worker_sent_routed", COUNTER, NULL, "Messages the worker sent to the router" },
	{ "shoal_worker_sent_direct", COUNTER, NULL, "Messages the worker sent direct" },
	{ "shoal_worker_received", COUNTER, NULL, "Messages the worker took from its rings" },
	{ "shoal_worker_handled", COUNTER, NULL, "Messages the worker's handlers finished" },
	{ "shoal_worker_try_failed", COUNTER, NULL,
	  "try_ sends of the worker refused (full, no route ...)" },
	{ "shoal_worker_stale", COUNTER, NULL,
	  "Messages dropped for being addressed to an old generation" },
	{ "shoal_worker_malformed", COUNTER, NULL, "Records dropped for a bad envelope" },
	{ "shoal_worker_discarded", COUNTER, NULL, "Messages the in-group route discarded" },
	{ "shoal_worker_forward_lost", COUNTER, NULL,
	  "Copies held in process memory (forwarded between workers, or deferred during a "
	  "request) that a killed or detached process lost" },
	{ "shoal_worker_set_aside", COUNTER, NULL,
	  "Records skipped after they crashed their handler repeatedly" },
	{ "shoal_worker_uplink_no_route", COUNTER, NULL,
	  "Messages from the worker's uplink that matched no filter" },
	{ "shoal_worker_uplink_dropped_full", COUNTER, NULL,
	  "try_send copies from the worker's uplink dropped on a full ring" },
	{ "shoal_worker_uplink_malformed", COUNTER, NULL,
	  "Records of the worker's uplink rejected for a bad envelope" },
	{ "shoal_worker_lost_corrupt", COUNTER, NULL,
	  "Records left in an uplink condemned under the worker" },
	{ "shoal_worker_forward_sent", COUNTER, NULL,
	  "Copies the worker held in process memory: forwarded to the group's other "
	  "workers, or deferred during a request" },
	{ "shoal_worker_forward_taken", COUNTER, NULL,
	  "Such copies the worker handled" },
	{ "shoal_worker_crashes", GAUGE, NULL,
	  "Processes of the group that died in a row handling the worker's same record" },
};

/* The group at or after c->a with worker counters and `per` things a
 * worker, of which c->b (from 0) is not past the last; NULL at the end. */
static const struct shoal__group_view *next_worker_group(const struct shoal__sys_view *v,
							 struct cursor *c, uint32_t per)
{
	const struct shoal__group_view *g;

	while ((g = next_group(v, &c->a)) != NULL) {
		if (g->workers != NULL && c->b < per * g->n_worker_counts)
			return g;
		c->a++;
		c->b = 0;
	}
	return NULL;
}

static bool worker_next(const struct shoal__sys_view *v, struct cursor *c)
{
	const struct shoal__group_view *g = next_worker_group(v, c, 1);
	const struct shoal__worker_sums *w;
	uint64_t *x = c->val;

	if (g == NULL)
		return false;
	w = &g->workers[c->b];
	cursor_clear(c);
	label(c->labels, "group", g->name);
	label_int(c->labels, "worker", c->b);
	c->b++;
	x[0] = w->sent_routed, x[1] = w->sent_direct, x[2] = w->received, x[3] = w->handled;
	x[4] = w->try_failed, x[5] = w->stale, x[6] = w->malformed, x[7] = w->discarded;
	x[8] = w->fwd_lost, x[9] = w->set_aside, x[10] = w->up_no_route;
	x[11] = w->up_dropped_full, x[12] = w->up_malformed, x[13] = w->lost_corrupt;
	x[14] = w->fwd_sent, x[15] = w->fwd_taken, x[16] = w->crashes;
	return true;
}

static const struct scope worker_scope = SCOPE(worker_fams, worker_next);

/* ---- Workers' doorbells ---- */

static const struct fam wbell_fams[] = {
	{ "shoal_worker_doorbell_sleeps", COUNTER, NULL,
	  "Futex waits entered on one of the worker's doorbells: in (idle), up (its uplink "
	  "full), space (direct senders waiting for room in its rings)" },
	{ "shoal_worker_doorbell_wakes", COUNTER, NULL,
	  "Futex wakes made on one of the worker's doorbells" },
};

static bool wbell_next(const struct shoal__sys_view *v, struct cursor *c)
{
	static const char *const names[] = { "in", "up", "space" };
	const struct shoal__group_view *g = next_worker_group(v, c, 3);
	const struct shoal__worker_sums *w;
	const struct shoal__bell_counts *db;
	uint32_t worker, which;

	if (g == NULL)
		return false;
	worker = c->b / 3;
	which = c->b % 3;
	w = &g->workers[worker];
	db = which == 0 ? &w->in_db : which == 1 ? &w->up_db : &w->space_db;
	cursor_clear(c);
	label(c->labels, "group", g->name);
	label_int(c->labels, "worker", worker);
	label(c->labels, "doorbell", names[which]);
	c->b++;
	c->val[0] = db->sleeps, c->val[1] = db->wakes;
	return true;
}

static const struct scope wbell_scope = SCOPE(wbell_fams, wbell_next);

/* ---- Rings ---- */

static const struct fam ring_fams[] = {
	{ "shoal_ring_in_records", COUNTER, NULL, "Records written into the ring" },
	{ "shoal_ring_out_records", COUNTER, NULL, "Records taken out of the ring" },
	{ "shoal_ring_in_bytes", COUNTER, "bytes", "Payload bytes written into the ring" },
	{ "shoal_ring_out_bytes", COUNTER, "bytes", "Payload bytes taken out of the ring" },
	{ "shoal_ring_full_events", COUNTER, NULL,
	  "Reservations the ring refused for lack of space (episodes)" },
	{ "shoal_ring_capacity_bytes", GAUGE, "bytes", "Data area of the ring" },
	{ "shoal_ring_used_bytes", GAUGE, "bytes", "Bytes in use in the ring" },
	{ "shoal_ring_high_water_bytes", GAUGE, "bytes",
	  "Most bytes in use the ring's producer has seen" },
	{ "shoal_ring_pending", GAUGE, NULL, "Records waiting in the ring" },
	{ "shoal_ring_corrupt", GAUGE, NULL, "1 when the ring failed its check" },
	{ "shoal_ring_oldest_age_seconds", GAUGE, "seconds",
	  "How long the oldest record of an inbound ring has waited", true },
};

static bool ring_next(const struct shoal__sys_view *v, struct cursor *c)
{
	const struct shoal__group_view *g;
	const struct shoal__region_snap *r = NULL;
	const struct shoal_ring_stats *st;
	uint64_t *x = c->val;
	const char *role;

	for (;;) {
		g = next_group(v, &c->a);
		if (g == NULL)
			return false;
		for (; g->have_rings && c->b < g->rings.n_regions && r == NULL; c->b++) {
			const struct shoal__region_snap *at = &g->rings.regions[c->b];

			if (at->entry_ok && at->region.kind == SHOAL_SEG_KIND_RING && at->have_ring)
				r = at;
		}
		if (r != NULL)
			break;
		c->a++;
		c->b = 0;
	}
	st = &r->ring;
	cursor_clear(c);
	label(c->labels, "group", g->name);
	label(c->labels, "ring", r->region.name);
	role = shoal__ring_role_name(r->region.tag.role);
	if (role != NULL)
		label(c->labels, "role", role);
	else
		label_int(c->labels, "role", r->region.tag.role);
	x[0] = st->records_in, x[1] = st->records_out, x[2] = st->bytes_in;
	x[3] = st->bytes_out, x[4] = st->full_events, x[5] = st->capacity, x[6] = st->used;
	x[7] = st->high_water;
	x[8] = r->pending >= 0 ? (uint64_t)r->pending : 0;
	c->have[8] = r->pending >= 0;
	x[9] = r->corrupt;
	if (g->ages != NULL) {
		const struct shoal__ring_age *age = &g->ages[r - g->rings.regions];

		x[10] = age->age_ns;
		c->have[10] = age->known;
	} else {
		c->have[10] = false;
	}
	return true;
}

static const struct scope ring_scope = SCOPE(ring_fams, ring_next);

/* ---- The system, and what is not a number ---- */

static void one(FILE *out, const struct fam *f, const char *labels, uint64_t v)
{
	fam_begin(out, f);
	sample(out, f, labels, v);
}

static void print_system(FILE *out, const struct shoal__sys_view *v)
{
	static const struct fam info = { "shoal_system", INFO, NULL,
		"The system: its name, the tool's version and the layouts of its shared memory" };
	static const struct fam state = { "shoal_system_state", STATESET, NULL,
		"State of the system" };
	static const char *const states[] = { "running", "stopping" };
	static const struct fam fams[] = {
		{ "shoal_router_up", GAUGE, NULL, "1 while the system's router process is alive" },
		{ "shoal_router_pid", GAUGE, NULL, "Pid of the system's router" },
		{ "shoal_system_start_time_seconds", GAUGE, "seconds",
		  "When the system's registry was created, in seconds since the epoch", true },
		{ "shoal_system_nodes", GAUGE, NULL, "NUMA nodes the system runs on" },
		{ "shoal_system_routes", GAUGE, NULL, "Filters in the published route vector" },
		{ "shoal_system_route_publications", COUNTER, NULL,
		  "Times the router published its route vector" },
		{ "shoal_system_idle_spin_seconds", GAUGE, "seconds",
		  "How long an idle dispatcher or worker spins before it sleeps", true },
		{ "shoal_system_corrupt", GAUGE, NULL,
		  "1 when anything read from the system's shared memory looks corrupted" },
		{ "shoal_system_groups_released", COUNTER, NULL,
		  "Groups registered at run time that the router freed when their process left" },
		{ "shoal_system_lost_released", COUNTER, NULL,
		  "Messages lost by groups freed when their process left: queued then, or "
		  "counted lost before" },
		{ "shoal_system_waker_sleeps", COUNTER, NULL,
		  "Futex waits entered on the doorbell of held wake-ups" },
		{ "shoal_system_waker_wakes", COUNTER, NULL,
		  "Futex wakes made on the doorbell of held wake-ups" },
		{ "shoal_system_idle_yield_seconds", GAUGE, "seconds",
		  "How long an idle dispatcher or worker looks again after its spin, yielding "
		  "the CPU, before it sleeps", true },
	};
	char labels[LABELS_MAX] = "";
	const char *now = shoal__system_state_name(v->state);

	label(labels, "system", v->system);
	label(labels, "version", SHOAL_TOOL_VERSION);
	/* Attach refuses a registry of another layout: it is this one. */
	label_int(labels, "layout", SHOAL__LAYOUT_VERSION);
	label_int(labels, "segment_layout", v->registry.version);
	one(out, &info, labels, 1);
	fam_begin(out, &state);
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		labels[0] = '\0';
		label(labels, state.name, states[i]);
		sample(out, &state, labels, now != NULL && strcmp(now, states[i]) == 0);
	}
	one(out, &fams[0], "", v->router_alive > 0);
	one(out, &fams[1], "", (uint64_t)(v->router_pid > 0 ? v->router_pid : 0));
	one(out, &fams[2], "", v->registry.ctime_ns);
	one(out, &fams[3], "", v->n_nodes);
	one(out, &fams[4], "", v->n_routes);
	one(out, &fams[5], "", v->route_version);
	one(out, &fams[6], "", v->spin_ns);
	one(out, &fams[12], "", v->yield_ns);
	one(out, &fams[7], "", shoal__sys_view_corrupt(v));
	one(out, &fams[8], "", v->released);
	one(out, &fams[9], "", v->lost_released);
	fam_begin(out, &fams[10]);
	if (v->have_bells)
		sample(out, &fams[10], "", v->waker.sleeps);
	fam_begin(out, &fams[11]);
	if (v->have_bells)
		sample(out, &fams[11], "", v->waker.wakes);
}

static void print_dispatcher_info(FILE *out, const struct shoal__sys_view *v)
{
	static const struct fam info = { "shoal_dispatcher", INFO, NULL,
		"A dispatcher: its NUMA node and that node's CPUs, where it runs" };
	char cpus[SHOAL_FMT_CPUS_SIZE];

	fam_begin(out, &info);
	for (uint32_t d = 0; d < v->n_dispatchers; d++) {
		char labels[LABELS_MAX] = "";

		label_int(labels, "dispatcher", d);
		label_int(labels, "node", v->disp[d].node);
		label(labels, "cpus", shoal__fmt_cpus(cpus, sizeof(cpus), v->disp[d].cpus,
						     v->cpu_words));
		sample(out, &info, labels, 1);
	}
}

static void print_group_info(FILE *out, const struct shoal__sys_view *v)
{
	static const struct fam info = { "shoal_group", INFO, NULL,
		"A group: its NUMA node, its dispatcher and its mailbox segment" };
	static const struct fam state = { "shoal_group_state", STATESET, NULL,
		"State of the group" };
	static const uint32_t states[] = {
		SHOAL_GROUP_DOWN, SHOAL_GROUP_RUNNING, SHOAL_GROUP_STOPPING, SHOAL_GROUP_FAILED,
		SHOAL_GROUP_STOPPED,
	};
	const struct shoal__group_view *g;

	fam_begin(out, &info);
	for (uint32_t a = 0; (g = next_group(v, &a)) != NULL; a++) {
		char labels[LABELS_MAX] = "";

		label(labels, "group", g->name);
		label_int(labels, "node", g->node);
		label_int(labels, "dispatcher", g->dispatcher);
		label(labels, "mailbox", g->mailbox);
		sample(out, &info, labels, 1);
	}
	fam_begin(out, &state);
	for (uint32_t a = 0; (g = next_group(v, &a)) != NULL; a++) {
		for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
			char labels[LABELS_MAX] = "";

			label(labels, "group", g->name);
			label(labels, state.name, shoal__group_state_name(states[i]));
			sample(out, &state, labels, g->state == states[i]);
		}
	}
}

/* ---- Links: this host's bridge's (runtime/bridge/view.h) ---- */

/* The families of the link view's counters, in its order, each sample
 * labelled with the other host: `peer`. */
static const struct fam link_fams[SHOAL__LC_N] = {
	[SHOAL__LC_RTT_NS] = { "shoal_link_rtt_seconds", GAUGE, "seconds",
		"Smoothed round trip: a frame sent to its messages acknowledged", true },
	[SHOAL__LC_FRAMES_SENT] = { "shoal_link_frames_sent", COUNTER, NULL,
		"Frames sent to the peer" },
	[SHOAL__LC_FRAMES_RECV] = { "shoal_link_frames_received", COUNTER, NULL,
		"Frames accepted from the peer" },
	[SHOAL__LC_RECORDS_SENT] = { "shoal_link_messages_sent", COUNTER, NULL,
		"Messages sent to the peer, resends not included" },
	[SHOAL__LC_RECORDS_RECV] = { "shoal_link_messages_received", COUNTER, NULL,
		"Messages accepted from the peer, duplicates not included" },
	[SHOAL__LC_IN_FLIGHT] = { "shoal_link_in_flight", GAUGE, NULL,
		"Messages queued or sent to the peer, not yet acknowledged" },
	[SHOAL__LC_CREDITS] = { "shoal_link_credits_bytes", GAUGE, "bytes",
		"Bytes the link may still send before the peer acknowledges more" },
	[SHOAL__LC_RESENT] = { "shoal_link_resent", COUNTER, NULL,
		"Messages sent again after a reconnect" },
	[SHOAL__LC_DUPLICATES] = { "shoal_link_duplicates", COUNTER, NULL,
		"Messages received again and dropped" },
	[SHOAL__LC_GAPS] = { "shoal_link_gaps", COUNTER, NULL,
		"Message numbers the peer skipped (counted lost there)" },
	[SHOAL__LC_REFUSED] = { "shoal_link_refused_frames", COUNTER, NULL,
		"Frames from the peer refused: bad bytes, bad ack, stale epoch" },
	[SHOAL__LC_CONNECTS] = { "shoal_link_connects", COUNTER, NULL,
		"Handshakes completed with the peer" },
	[SHOAL__LC_BROKEN] = { "shoal_link_broken", COUNTER, NULL,
		"Connections and attempts dropped: failed or silent" },
	[SHOAL__LC_LOST_LINK] = { "shoal_link_lost_link", COUNTER, NULL,
		"Messages lost: the peer restarted before acknowledging them" },
	[SHOAL__LC_LOST_DOWN] = { "shoal_link_lost_down", COUNTER, NULL,
		"Messages lost: the peer was down longer than hosts.down_after" },
	[SHOAL__LC_CREDIT_WAITS] = { "shoal_link_credit_waits", COUNTER, NULL,
		"Sends refused for want of credit" },
	[SHOAL__LC_DOWN_NS] = { "shoal_link_down_seconds", GAUGE, "seconds",
		"How long the link has not been up; 0 while it is", true },
};

static void print_links(FILE *out, const char *system)
{
	static const struct fam info = { "shoal_link", INFO, NULL,
		"A link of this host's bridge: this host, the peer, who dials, the address" };
	static const struct fam state = { "shoal_link_state", STATESET, NULL,
		"State of the link" };
	static const struct fam refused = { "shoal_bridge_refused_connections", COUNTER, NULL,
		"Connections the bridge refused: unknown or duplicate peers, misdirected ones" };
	static struct shoal__links_view lv;   /* 16 KiB: not on the stack */
	char labels[LABELS_MAX];

	shoal__links_view_take(&lv, system, shoal__snap_guard);
	if (!lv.present)
		return;
	fam_begin(out, &info);
	for (uint32_t i = 0; i < lv.n; i++) {
		labels[0] = '\0';
		label(labels, "host", lv.host);
		label(labels, "peer", lv.links[i].peer);
		label(labels, "role", lv.links[i].role == 2 ? "dials" : "listens");
		label(labels, "address", lv.links[i].addr);
		sample(out, &info, labels, 1);
	}
	fam_begin(out, &state);
	for (uint32_t i = 0; i < lv.n; i++)
		for (uint32_t st = 1; st <= 3; st++) {
			labels[0] = '\0';
			label(labels, "peer", lv.links[i].peer);
			label(labels, state.name, shoal__link_state_name(st));
			sample(out, &state, labels, lv.links[i].state == st);
		}
	for (unsigned k = 0; k < SHOAL__LC_N; k++) {
		fam_begin(out, &link_fams[k]);
		for (uint32_t i = 0; i < lv.n; i++) {
			labels[0] = '\0';
			label(labels, "peer", lv.links[i].peer);
			sample(out, &link_fams[k], labels, lv.links[i].c[k]);
		}
	}
	one(out, &refused, "", lv.refused_conns);
}

/* The whole exposition of a view; false if writing it failed. */
static bool print_metrics(FILE *out, const struct shoal__sys_view *v)
{
	print_system(out, v);
	print_dispatcher_info(out, v);
	print_scope(out, v, &disp_scope);
	print_scope(out, v, &type_scope);
	print_group_info(out, v);
	print_scope(out, v, &group_scope);
	print_scope(out, v, &gdisp_scope);
	print_latency(out, v);
	print_scope(out, v, &worker_scope);
	print_scope(out, v, &wbell_scope);
	print_scope(out, v, &ring_scope);
	print_links(out, v->system);
	fputs("# EOF\n", out);
	return fflush(out) == 0 && !ferror(out);
}

static const struct shoal__sys_view_opts view_opts = {
	.mailboxes = true, .rings = true, .workers = true, .check_retries = 3,
};

/* ---- Serving over HTTP ---- */

#ifdef SHOAL_HAVE_MICROHTTPD
/* The body of a reply: the exposition, or why there is none (status 503). */
static char *render(const char *system, size_t *len, unsigned *status)
{
	struct shoal_err err = {{0}};
	struct shoal__sys_view v;
	char *body = NULL;
	FILE *f = open_memstream(&body, len);
	int ret;

	if (f == NULL)
		return NULL;
	ret = shoal__sys_view_take(&v, system, &view_opts, &err);
	*status = ret < 0 ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK;
	if (ret == -ENOENT)
		fprintf(f, "no system '%s' in %s\n", system, shoal__shm_dir());
	else if (ret < 0)
		fprintf(f, "cannot read the registry of system '%s': %s\n", system,
			err.msg[0] != '\0' ? err.msg : shoal_strerror(ret));
	if (ret == 0) {
		if (!print_metrics(f, &v))
			*status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		shoal__sys_view_free(&v);
	}
	if (fclose(f) != 0) {
		free(body);
		return NULL;
	}
	return body;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
			     char *body, size_t len)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version,
				  const char *upload, size_t *upload_len, void **req)
{
	const char *system = cls;
	unsigned status;
	size_t len = 0;
	char *body;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)req;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
		body = strdup("shoal metrics answers GET and HEAD\n");
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", body,
			     body != NULL ? strlen(body) : 0);
	}
	if (strcmp(url, "/metrics") != 0) {
		body = strdup("shoal metrics serves /metrics only\n");
		return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", body,
			     body != NULL ? strlen(body) : 0);
	}
	body = render(system, &len, &status);
	if (body == NULL)
		return MHD_NO;
	return reply(conn, status, status == MHD_HTTP_OK ? CONTENT_TYPE :
		     "text/plain; charset=utf-8", body, len);
}

static int serve(const struct shoal__cmd *cmd, const struct metrics_args *a)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	struct MHD_Daemon *d;
	sigset_t stop;
	int sig;

	if (a->addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* Blocked before the daemon's thread starts, which inherits the mask:
	 * only sigwait() below takes them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, (void *)a->system,
			     MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&a->addr,
			     MHD_OPTION_CONNECTION_TIMEOUT, 10u,
			     MHD_OPTION_CONNECTION_LIMIT, 64u,
			     MHD_OPTION_END);
	if (d == NULL) {
		fprintf(stderr, "shoal %s: cannot listen on %s (the port is in use, or the "
			"address is not one of this host)\n", cmd->name, a->listen);
		return SHOAL_EXIT_CORRUPT;
	}
	fprintf(stderr, "shoal %s: serving system %s at http://%s/metrics; Ctrl-C or SIGTERM "
		"stops\n", cmd->name, a->system, a->listen);
	while (sigwait(&stop, &sig) != 0)
		;
	MHD_stop_daemon(d);
	return SHOAL_EXIT_OK;
}
#else
static int serve(const struct shoal__cmd *cmd, const struct metrics_args *a)
{
	(void)a;
	fprintf(stderr, "shoal %s: --listen is not available: this shoal was built without "
		"libmicrohttpd (install libmicrohttpd-dev and build again; 'shoal %s SYSTEM' "
		"prints the same text without it)\n", cmd->name, cmd->name);
	return SHOAL_EXIT_CORRUPT;
}
#endif

/* ---- The command ---- */

/* ADDR:PORT, ADDR an IPv4 address or an IPv6 one in brackets; 0 or -EINVAL. */
static int parse_listen(struct metrics_args *a, const char *s)
{
	const char *colon = strrchr(s, ':');
	char host[INET6_ADDRSTRLEN + 2];
	size_t n = colon != NULL ? (size_t)(colon - s) : 0;
	uint32_t port;

	if (colon == NULL || n == 0 || n >= sizeof(host) ||
	    shoal__cli_parse_uint(colon + 1, 65535, &port) < 0 || port == 0)
		return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	memset(&a->addr, 0, sizeof(a->addr));
	if (host[0] == '[' && host[n - 1] == ']') {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->addr;

		host[n - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &in6->sin6_addr) != 1)
			return -EINVAL;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
	} else {
		struct sockaddr_in *in4 = (struct sockaddr_in *)&a->addr;

		if (inet_pton(AF_INET, host, &in4->sin_addr) != 1)
			return -EINVAL;
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
	}
	a->listen = s;
	return 0;
}

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv,
		      struct metrics_args *a)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ NULL, 0, NULL, 0 },
	};
	int c, end;

	memset(a, 0, sizeof(*a));
	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_LISTEN:
			if (parse_listen(a, optarg) < 0)
				return shoal__cli_usage_error(cmd, "--listen takes ADDR:PORT (an "
							      "IPv4 address, or an IPv6 one in "
							      "brackets, and a port from 1 to "
							      "65535), not '%s'", optarg);
			break;
		}
	}
	return shoal__cli_system_arg(cmd, argc, argv, &a->system);
}

static int cmd_metrics(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct shoal_err err = {{0}};
	struct shoal__sys_view v;
	struct metrics_args a;
	int ret = parse_args(cmd, argc, argv, &a);

	if (ret >= 0)
		return ret;
	/* Checked once up front, so that a wrong name fails now, not at the
	 * first scrape; once serving, a system that goes away is a 503. */
	ret = shoal__sys_view_take(&v, a.system, &view_opts, &err);
	if (ret < 0)
		return shoal__sys_view_fail(cmd->name, a.system, ret, &err);
	if (a.listen != NULL) {
		shoal__sys_view_free(&v);
		return serve(cmd, &a);
	}
	if (!print_metrics(stdout, &v)) {
		fprintf(stderr, "shoal %s: cannot write the metrics: %s\n", cmd->name,
			strerror(errno));
		ret = SHOAL_EXIT_CORRUPT;
	} else {
		ret = shoal__sys_view_corrupt(&v) ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
	}
	shoal__sys_view_free(&v);
	return ret;
}

const struct shoal__cmd shoal__cmd_metrics = {
	.name = "metrics",
	.summary = "Print a system's counters for Prometheus, or serve them over HTTP",
	.fn = cmd_metrics,
	.help =
	"Usage: shoal metrics [--listen ADDR:PORT] SYSTEM\n"
	"\n"
	"Print every counter of the running system SYSTEM in the OpenMetrics text\n"
	"format that Prometheus and other scrapers read: the system and its router,\n"
	"each dispatcher, message type, group (state, restarts, deliveries, drops,\n"
	"damage, what is queued and how long the oldest has waited, and a histogram\n"
	"of the latency from send to handler), worker (sent, received, handled,\n"
	"refused, dropped, forwarded, doorbells) and mailbox ring (records and bytes\n"
	"in and out, full events, bytes in use, high water, the oldest record's\n"
	"age), and on a system that spans hosts each link of this host's bridge\n"
	"(shoal_link_*, labelled by peer: state, round trip, frames and messages\n"
	"each way, in flight, credits, lost, refused). Counters are printed as they\n"
	"stand: rates are left to the scraper. docs/metrics.md lists the metrics.\n"
	"Read-only, as 'shoal stat': safe on a live system.\n"
	"\n"
	"With --listen, serve the same text over HTTP at http://ADDR:PORT/metrics,\n"
	"each request read afresh from shared memory, until SIGINT (Ctrl-C) or\n"
	"SIGTERM. A request made while the system cannot be read gets 503.\n"
	"\n"
	"SYSTEM's segments are looked up in $SHOAL_SHM_DIR (default\n"
	"/dev/shm/shoal-UID).\n"
	"\n"
	"Options:\n"
	"  --listen ADDR:PORT   serve over HTTP; ADDR is an IPv4 address, or an IPv6\n"
	"                       one in brackets ([::1]:9464)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status:\n"
	"  0  everything read is intact (with --listen: stopped by a signal)\n"
	"  1  something is corrupted (the metrics are still printed, with\n"
	"     shoal_system_corrupt 1); with --listen: cannot listen, or this shoal\n"
	"     was built without libmicrohttpd\n"
	"  2  bad command line\n"
	"  3  cannot read the system's registry: no such system, not a Shoal\n"
	"     segment, another layout version, or corrupted\n",
};
