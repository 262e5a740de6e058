/* SPDX-License-Identifier: MIT */
/*
 * `shoal metrics` end to end: this test process runs a router
 * (tests/rtutil.h); "sink", a forked group of two workers, handles every
 * ping; "src" sends it N_SENT pings and leaves; "idle" is declared and never
 * started. The real binary (env SHOAL_BIN) prints the exposition, which a
 * validator below holds to the OpenMetrics text rules line by line, and
 * whose values must match the system and `shoal stat --json`; then it
 * serves the same over HTTP on loopback, scraped here with a plain socket,
 * and stops on SIGTERM.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/group.h>
#include <shoal/router.h>

#include "runtime/layout.h"
#include "tests/jsoncheck.h"
#include "tests/jsonvalue.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

#define SYSTEM "tmet"
#define N_SENT 1000u
#define N_MORE 500u
#define SINK_WORKERS 2

static struct {
	pid_t sink;
	pid_t server;              /* `shoal metrics --listen` while it serves */
	bool router_up;
	int id_sink, id_src, id_idle;
} fx;

/* ---- The OpenMetrics text rules ---- */

#define MAX_FAMILIES 256
#define MAX_SAMPLES 4096

struct om_check {
	char families[MAX_FAMILIES][128];
	unsigned n_families;
	char family[128];        /* the family of the last # TYPE */
	char type[16];
	char *seen[MAX_SAMPLES]; /* name{labels} of the family's samples so far */
	unsigned n_seen;
	unsigned samples;
	/* A histogram's series being read: its labels but le, and what of it
	 * was seen (buckets in increasing le with cumulative counts, +Inf,
	 * _count equal to +Inf's, _sum). */
	char series[1024];
	bool in_series, inf, count, sum;
	double le, below, inf_value;
	unsigned histograms;     /* series checked whole */
};

static bool is_name(const char *s, size_t n, bool colon)
{
	if (n == 0 || isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && !(colon && s[i] == ':'))
			return false;
	return true;
}

/* An escaped string up to `end` (a quote or the end of the line): only \\,
 * \" and \n escapes, no raw quote or newline. Returns the end, or NULL. */
static const char *escaped_string(const char *s, char end)
{
	for (; *s != end; s++) {
		if (*s == '\0' || *s == '\n' || (*s == '"' && end != '"'))
			return NULL;
		if (*s == '\\') {
			s++;
			if (*s != '\\' && *s != '"' && *s != 'n')
				return NULL;
		}
	}
	return s;
}

static void om_fail(const char *line, const char *why)
{
	fail_msg("OpenMetrics: %s in line: %s", why, line);
}

/* The end of a histogram's series: it must have had all its parts. */
static void om_series_end(struct om_check *c, const char *line)
{
	if (!c->in_series)
		return;
	if (!c->inf || !c->count || !c->sum)
		om_fail(line, "a histogram series without its +Inf bucket, _count or _sum");
	c->in_series = false;
	c->histograms++;
}

static void om_seen_reset(struct om_check *c)
{
	for (unsigned i = 0; i < c->n_seen; i++)
		free(c->seen[i]);
	c->n_seen = 0;
}

static void om_descriptor(struct om_check *c, const char *line)
{
	static const char *const types[] = {
		"counter", "gauge", "info", "stateset", "unknown", "histogram",
		"gaugehistogram", "summary",
	};
	const char *name = line + 7, *sp = strchr(name, ' ');
	size_t n = sp != NULL ? (size_t)(sp - name) : 0, unit;
	bool known = false;

	if (sp == NULL || !is_name(name, n, true) || n >= sizeof(c->family))
		om_fail(line, "bad metric name");
	if (strncmp(line, "# TYPE ", 7) == 0) {
		for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
			known |= strcmp(sp + 1, types[i]) == 0;
		if (!known)
			om_fail(line, "unknown type");
		for (unsigned i = 0; i < c->n_families; i++)
			if (strlen(c->families[i]) == n && strncmp(c->families[i], name, n) == 0)
				om_fail(line, "family declared twice");
		assert_true(c->n_families < MAX_FAMILIES);
		memcpy(c->families[c->n_families], name, n);
		c->families[c->n_families++][n] = '\0';
		memcpy(c->family, name, n);
		c->family[n] = '\0';
		om_series_end(c, line);
		snprintf(c->type, sizeof(c->type), "%s", sp + 1);
		om_seen_reset(c);
		return;
	}
	/* HELP and UNIT describe the family just declared, before its samples. */
	if (strlen(c->family) != n || strncmp(c->family, name, n) != 0 || c->n_seen > 0)
		om_fail(line, "HELP or UNIT not right after the TYPE of its family");
	if (strncmp(line, "# HELP ", 7) == 0) {
		if (escaped_string(sp + 1, '\0') == NULL)
			om_fail(line, "bad escape in HELP");
		return;
	}
	/* UNIT: the family's name ends in _<unit>. */
	unit = strlen(sp + 1);
	if (!is_name(sp + 1, unit, false) || n <= unit + 1 ||
	    strncmp(name + n - unit, sp + 1, unit) != 0 || name[n - unit - 1] != '_')
		om_fail(line, "UNIT is not the suffix of its family's name");
}

/* The labels of a sample: name="value" pairs; returns the closing brace. */
static const char *om_labels(const struct om_check *c, const char *line, const char *p)
{
	bool stateset_label = false;

	while (*p != '}') {
		const char *eq = strchr(p, '=');

		if (eq == NULL || !is_name(p, (size_t)(eq - p), false) || eq[1] != '"')
			om_fail(line, "bad label");
		stateset_label |= (size_t)(eq - p) == strlen(c->family) &&
				  strncmp(p, c->family, strlen(c->family)) == 0;
		p = escaped_string(eq + 2, '"');
		if (p == NULL)
			om_fail(line, "bad label value");
		p++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			om_fail(line, "labels not separated by commas");
	}
	if (strcmp(c->type, "stateset") == 0 && !stateset_label)
		om_fail(line, "stateset sample without its state label");
	return p;
}

/*
 * A histogram's sample, its suffix `kind` (_bucket, _count, _sum) and its
 * labels from `labels` to the closing brace (NULL: none): _bucket has an le
 * label, a float or +Inf, increasing within the series, and cumulative
 * counts; the series (the other labels) ends with +Inf, then _count, which
 * equals +Inf's count, and _sum.
 */
static void om_histogram(struct om_check *c, const char *line, const char *kind,
			 const char *labels, double v)
{
	char series[sizeof(c->series)] = "", le[64] = "";
	const char *p = labels;

	/* The labels but le, and le's value. */
	while (p != NULL && *p != '}') {
		const char *end = escaped_string(strchr(p, '=') + 2, '"') + 1;
		size_t n = (size_t)(end - p);

		if (strncmp(p, "le=\"", 4) == 0 && n - 5 < sizeof(le))
			memcpy(le, p + 4, n - 5);
		else if (strlen(series) + n + 1 < sizeof(series))
			strncat(series, p, n);
		p = *end == ',' ? end + 1 : end;
	}
	if (strcmp(kind, "_bucket") == 0) {
		char *e;
		double bound = strcmp(le, "+Inf") == 0 ? 1.0 / 0.0 : strtod(le, &e);

		if (le[0] == '\0' || (strcmp(le, "+Inf") != 0 && (e == le || *e != '\0')))
			om_fail(line, "a bucket without a float le");
		if (!c->in_series || strcmp(series, c->series) != 0) {
			om_series_end(c, line);
			snprintf(c->series, sizeof(c->series), "%s", series);
			c->in_series = true;
			c->inf = c->count = c->sum = false;
			c->le = -1.0 / 0.0;
			c->below = 0;
		}
		if (c->inf || bound <= c->le)
			om_fail(line, "buckets not in increasing le");
		if (v < c->below || v != (double)(uint64_t)v)
			om_fail(line, "a bucket count that is not cumulative");
		c->le = bound;
		c->below = v;
		c->inf = bound == 1.0 / 0.0;
		c->inf_value = v;
		return;
	}
	if (!c->in_series || strcmp(series, c->series) != 0 || le[0] != '\0')
		om_fail(line, "_count or _sum outside its series' buckets, or with an le");
	if (strcmp(kind, "_count") == 0) {
		if (!c->inf || v != c->inf_value)
			om_fail(line, "_count is not the +Inf bucket's count");
		c->count = true;
	} else {
		if (v < 0)
			om_fail(line, "a negative _sum");
		c->sum = true;
	}
}

static void om_sample(struct om_check *c, const char *line)
{
	const char *p = line, *key_end, *value;
	const char *suffix = strcmp(c->type, "counter") == 0 ? "_total" :
			     strcmp(c->type, "info") == 0 ? "_info" : "";
	bool histogram = strcmp(c->type, "histogram") == 0;
	size_t fl = strlen(c->family);
	const char *labels = NULL;
	char *end;
	double v;

	if (c->family[0] == '\0')
		om_fail(line, "sample before any TYPE");
	while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
		p++;
	if (histogram) {
		static const char *const kinds[] = { "_bucket", "_count", "_sum" };

		suffix = NULL;
		for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
			if ((size_t)(p - line) == fl + strlen(kinds[i]) &&
			    strncmp(line + fl, kinds[i], strlen(kinds[i])) == 0)
				suffix = kinds[i];
		if (suffix == NULL)
			om_fail(line, "a histogram's sample is not _bucket, _count or _sum");
	}
	if (!is_name(line, (size_t)(p - line), true) || (size_t)(p - line) != fl + strlen(suffix) ||
	    strncmp(line, c->family, fl) != 0 || strncmp(line + fl, suffix, strlen(suffix)) != 0)
		om_fail(line, "sample name is not its family's name with the type's suffix");
	if (*p == '{') {
		labels = p + 1;
		p = om_labels(c, line, p + 1) + 1;
	}
	key_end = p;
	if (*p != ' ')
		om_fail(line, "no space before the value");
	value = p + 1;
	v = strtod(value, &end);
	if (end == value || *end != '\0' || (strcmp(c->type, "counter") == 0 && v < 0))
		om_fail(line, "bad value");
	if (histogram)
		om_histogram(c, line, suffix, labels, v);
	for (unsigned i = 0; i < c->n_seen; i++)
		if (strlen(c->seen[i]) == (size_t)(key_end - line) &&
		    strncmp(c->seen[i], line, (size_t)(key_end - line)) == 0)
			om_fail(line, "the same sample twice");
	assert_true(c->n_seen < MAX_SAMPLES);
	c->seen[c->n_seen] = strndup(line, (size_t)(key_end - line));
	assert_non_null(c->seen[c->n_seen]);
	c->n_seen++;
	c->samples++;
}

/* Hold `text` to the rules; returns how many samples it has, and in
 * *histograms (if not NULL) how many histogram series. */
static unsigned assert_openmetrics_h(const char *text, unsigned *histograms)
{
	struct om_check *c = calloc(1, sizeof(*c));
	size_t len = strlen(text);
	const char *eof = "# EOF\n";
	char *copy, *line, *save;
	unsigned samples;

	assert_non_null(c);
	if (len < strlen(eof) || strcmp(text + len - strlen(eof), eof) != 0)
		fail_msg("OpenMetrics: the text does not end with # EOF:\n%s", text);
	copy = strndup(text, len - strlen(eof));
	assert_non_null(copy);
	for (const char *p = copy; *p != '\0'; p++)
		if (*p == '\n' && (p == copy || p[-1] == '\n'))
			fail_msg("OpenMetrics: an empty line");
	for (line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "# TYPE ", 7) == 0 || strncmp(line, "# HELP ", 7) == 0 ||
		    strncmp(line, "# UNIT ", 7) == 0)
			om_descriptor(c, line);
		else if (line[0] == '#')
			om_fail(line, "a comment of no known kind");
		else
			om_sample(c, line);
	}
	om_series_end(c, "# EOF");
	om_seen_reset(c);
	samples = c->samples;
	if (histograms != NULL)
		*histograms = c->histograms;
	free(copy);
	free(c);
	return samples;
}

static unsigned assert_openmetrics(const char *text)
{
	return assert_openmetrics_h(text, NULL);
}

/* The value of sample `key` (name{labels}, exactly); fails if absent. */
static uint64_t metric(const char *text, const char *key)
{
	size_t n = strlen(key);

	for (const char *p = strstr(text, key); p != NULL; p = strstr(p + 1, key))
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
	fail_msg("no sample %s in:\n%s", key, text);
	return 0;
}

/* A worker counter of group `group` summed over its workers. */
static uint64_t worker_sum(const char *text, const char *counter, const char *group,
			   int workers)
{
	uint64_t sum = 0;

	for (int w = 0; w < workers; w++) {
		char key[160];

		snprintf(key, sizeof(key), "shoal_worker_%s_total{group=\"%s\",worker=\"%d\"}",
			 counter, group, w);
		sum += metric(text, key);
	}
	return sum;
}

/* ---- The system ---- */

static void send_pings(int index, uint64_t n, uint64_t first)
{
	struct child src = { .index = index, .name = "src", .n = n, .first = first,
			     .type = T_PING };

	test_assert_exited(test_wait_pid(test_spawn(rt_producer_main, &src, sizeof(src)),
					 60000), 0);
}

static int system_up(void **state)
{
	struct child sink = { .index = 0, .name = "sink", .workers = SINK_WORKERS, .actors = 2 };

	(void)state;
	rt_yield_ns = 250000;   /* router.yield, for the metrics to show */
	rt_stream = SHOAL_STREAM_OFF;   /* router.stream, the same whatever the placement */
	if (rt_start_router(SYSTEM, NULL, 0) < 0)
		return -1;
	rt_yield_ns = 0;
	rt_stream = SHOAL_STREAM_AUTO;
	fx.router_up = true;
	fx.id_sink = rt_declare("sink", SINK_WORKERS, 2);
	fx.id_src = rt_declare("src", 1, 1);
	fx.id_idle = rt_declare("idle", 1, 1);
	rt_route(fx.id_sink, T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	fx.sink = test_spawn(rt_consumer_main, &sink, sizeof(sink));
	rt_wait_attached(fx.id_sink);
	send_pings(1, N_SENT, 0);
	rt_wait_count(0, N_SENT, 30000);
	return 0;
}

static int system_down(void **state)
{
	(void)state;
	/* A failed check left it serving: it must not outlive the test. */
	if (fx.server > 0) {
		kill(fx.server, SIGKILL);
		test_wait_pid(fx.server, 10000);
	}
	if (fx.router_up) {
		shoal_router_stop_groups(rt_router, 10000000000);
		rt_stop_router();
	}
	if (fx.sink > 0)
		test_wait_pid(fx.sink, 10000);
	return 0;
}

/* Run `shoal metrics SYSTEM` until sink's workers have handled `n` (a
 * handler returns after the test's count goes up). Returns its output. */
static char *metrics_when_handled(uint64_t n)
{
	struct tool_run r;

	for (int i = 0; i < 200; i++) {
		tool_expect(&r, 0, (const char *const[]){ "metrics", SYSTEM, NULL });
		if (worker_sum(r.out, "handled", "sink", SINK_WORKERS) == n) {
			free(r.err);
			return r.out;
		}
		tool_free(&r);
		usleep(20000);
	}
	fail_msg("sink never showed %llu handled", (unsigned long long)n);
	return NULL;
}

/* ---- Printing ---- */

static void tool_metrics_output_follows_the_text_format(void **state)
{
	char *text = metrics_when_handled(N_SENT);
	unsigned histograms;

	(void)state;
	/* System, dispatcher, types, three groups, three workers, nine rings. */
	assert_true(assert_openmetrics_h(text, &histograms) > 100);
	/* A latency histogram per group with a mailbox. */
	assert_int_equal(histograms, 3);
	assert_has(text, "# TYPE shoal_group_latency_seconds histogram\n"
			 "# UNIT shoal_group_latency_seconds seconds\n");
	free(text);
}

static void tool_metrics_values_match_the_system(void **state)
{
	char *text = metrics_when_handled(N_SENT);
	struct tool_run r;
	char want[128];

	(void)state;
	assert_has(text, "shoal_system_info{system=\"" SYSTEM "\",version=\"");
	assert_int_equal(metric(text, "shoal_router_up"), 1);
	assert_int_equal(metric(text, "shoal_router_pid"), getpid());
	assert_int_equal(metric(text, "shoal_system_state{shoal_system_state=\"running\"}"), 1);
	assert_int_equal(metric(text, "shoal_system_corrupt"), 0);
	assert_int_equal(metric(text, "shoal_system_routes"), 1);
	assert_has(text, "\nshoal_system_idle_spin_seconds 0.000020000\n");
	assert_has(text, "\nshoal_system_idle_yield_seconds 0.000250000\n");
	assert_true(metric(text, "shoal_dispatcher_messages_total{dispatcher=\"0\",node=\"0\"}") >=
		    N_SENT);
	assert_int_equal(metric(text, "shoal_type_routes{type=\"ping\",type_id=\"1\"}"), 1);
	assert_int_equal(metric(text, "shoal_type_max_size_bytes{type=\"ping\",type_id=\"1\"}"), 64);
	/* Each group's state, as a stateset and as gauges. */
	assert_int_equal(metric(text, "shoal_group_state{group=\"sink\",shoal_group_state="
				"\"running\"}"), 1);
	assert_int_equal(metric(text, "shoal_group_state{group=\"sink\",shoal_group_state="
				"\"down\"}"), 0);
	assert_int_equal(metric(text, "shoal_group_state{group=\"idle\",shoal_group_state="
				"\"down\"}"), 1);
	assert_int_equal(metric(text, "shoal_group_up{group=\"sink\"}"), 1);
	assert_int_equal(metric(text, "shoal_group_up{group=\"idle\"}"), 0);
	assert_int_equal(metric(text, "shoal_group_failed{group=\"sink\"}"), 0);
	assert_int_equal(metric(text, "shoal_group_restarts_total{group=\"sink\"}"), 0);
	assert_int_equal(metric(text, "shoal_group_workers{group=\"sink\"}"), SINK_WORKERS);
	assert_int_equal(metric(text, "shoal_group_delivered_total{group=\"sink\"}"), N_SENT);
	assert_int_equal(metric(text, "shoal_group_queued{group=\"sink\"}"), 0);
	/* Per worker and per ring. */
	assert_int_equal(worker_sum(text, "handled", "sink", SINK_WORKERS), N_SENT);
	assert_int_equal(worker_sum(text, "received", "sink", SINK_WORKERS), N_SENT);
	assert_int_equal(metric(text, "shoal_worker_sent_routed_total{group=\"src\",worker=\"0\"}"),
			 N_SENT);
	assert_int_equal(metric(text, "shoal_ring_out_records_total{group=\"src\",ring=\"up.0\","
				"role=\"uplink\"}"), N_SENT);
	assert_int_equal(metric(text, "shoal_ring_in_records_total{group=\"sink\",ring=\"in.0.d0\","
				"role=\"dispatched\"}") +
			 metric(text, "shoal_ring_in_records_total{group=\"sink\",ring=\"in.1.d0\","
				"role=\"dispatched\"}"), N_SENT);
	assert_has(text, "# UNIT shoal_ring_in_bytes bytes\n");
	/* Latency: one per handler run, none out of range, all under 275 s. */
	assert_int_equal(metric(text, "shoal_group_latency_seconds_count{group=\"sink\"}"), N_SENT);
	assert_int_equal(metric(text, "shoal_group_latency_seconds_bucket{group=\"sink\","
				"le=\"+Inf\"}"), N_SENT);
	assert_int_equal(metric(text, "shoal_group_latency_seconds_bucket{group=\"sink\","
				"le=\"274.877906944\"}"), N_SENT);
	assert_int_equal(metric(text, "shoal_group_latency_seconds_count{group=\"idle\"}"), 0);
	assert_int_equal(metric(text, "shoal_group_latency_out_of_range_total{group=\"sink\"}"), 0);
	/* Nothing waits for sink: no oldest age. */
	assert_lacks(text, "shoal_group_oldest_age_seconds{group=\"sink\"}");
	/* What the other counters in shared memory say: per dispatcher, the
	 * copies forwarded between sink's two workers, doorbells. */
	assert_int_equal(metric(text, "shoal_group_dispatcher_delivered_total{group=\"sink\","
				"dispatcher=\"0\"}"), N_SENT);
	assert_int_equal(metric(text, "shoal_type_live_routes{type=\"ping\",type_id=\"1\"}"), 1);
	/* A copy counts as taken only after its handler returned. */
	assert_true(worker_sum(text, "forward_taken", "sink", SINK_WORKERS) <=
		    worker_sum(text, "forward_sent", "sink", SINK_WORKERS));
	assert_has(text, "shoal_worker_doorbell_sleeps_total{group=\"sink\",worker=\"1\","
			 "doorbell=\"space\"} ");
	assert_has(text, "shoal_dispatcher_doorbell_wakes_total{dispatcher=\"0\",node=\"0\"} ");
	/* router.stream off: no chunk streamed, nothing timed. */
	assert_int_equal(metric(text, "shoal_dispatcher_stream_min{dispatcher=\"0\",node=\"0\"}"),
			 0);
	assert_int_equal(metric(text, "shoal_dispatcher_stream_probe_seconds{dispatcher=\"0\","
				"node=\"0\"}"), 0);
	assert_has(text, "shoal_system_waker_sleeps_total ");

	/* At this quiet moment `shoal stat --json` says the same. */
	tool_expect(&r, 0, (const char *const[]){ "stat", "--json", SYSTEM, NULL });
	assert_json_object(r.out);
	assert_int_equal(json_value_after(r.out, "sink", "handled"),
			 worker_sum(text, "handled", "sink", SINK_WORKERS));
	assert_int_equal(json_value_after(r.out, "sink", "delivered"),
			 metric(text, "shoal_group_delivered_total{group=\"sink\"}"));
	assert_int_equal(json_value_after(r.out, "sink", "count"),
			 metric(text, "shoal_group_latency_seconds_count{group=\"sink\"}"));
	snprintf(want, sizeof(want), "shoal_group_pid{group=\"sink\"} %d\n", (int)fx.sink);
	assert_has(text, want);
	tool_free(&r);
	free(text);
}

/* ---- Serving ---- */

static uint16_t free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* GET `path` from 127.0.0.1:port over HTTP/1.0; the whole reply, or NULL
 * if nothing listens there (yet). */
static char *http_get(uint16_t port, const char *path)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 10 };
	char req[256], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t n;

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return NULL;
	}
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	do {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap + 1);
			assert_non_null(buf);
		}
		n = read(fd, buf + len, cap - len);
		assert_true(n >= 0);
		len += (size_t)n;
	} while (n > 0);
	close(fd);
	buf[len] = '\0';
	return buf;
}

/* Whether `pid` has exited, without reaping it (tool_wait() does). */
static bool exited(pid_t pid)
{
	siginfo_t si = { 0 };

	assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT), 0);
	return si.si_pid == pid;
}

/* The body of a 200 reply of the OpenMetrics type. */
static const char *om_body(const char *reply)
{
	const char *body = strstr(reply, "\r\n\r\n");

	assert_non_null(body);
	if (strncmp(reply, "HTTP/1.1 200 ", 13) != 0 && strncmp(reply, "HTTP/1.0 200 ", 13) != 0)
		fail_msg("not a 200 reply:\n%s", reply);
	assert_has(reply, "application/openmetrics-text; version=1.0.0");
	return body + 4;
}

static void tool_metrics_listen_serves_fresh_reads(void **state)
{
	uint16_t port = free_port();
	char addr[32], *reply = NULL;
	struct tool_run r;

	(void)state;
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	tool_start(&r, (const char *const[]){ "metrics", "--listen", addr, SYSTEM, NULL });
	fx.server = r.pid;
	for (int i = 0; i < 1000 && reply == NULL; i++) {
		if (exited(r.pid)) {
			fx.server = 0;
			tool_wait(&r);
			if (r.code == 1 && strstr(r.err, "built without libmicrohttpd") != NULL) {
				tool_free(&r);
				skip();
			}
			fail_msg("exit %d before serving:\n%s", r.code, r.err);
		}
		reply = http_get(port, "/metrics");
		if (reply == NULL)
			usleep(10000);
	}
	assert_non_null(reply);
	assert_openmetrics(om_body(reply));
	assert_int_equal(worker_sum(om_body(reply), "handled", "sink", SINK_WORKERS), N_SENT);
	free(reply);

	/* More traffic: the next scrape reads shared memory again. */
	send_pings(2, N_MORE, N_SENT);
	rt_wait_count(0, N_SENT + N_MORE, 30000);
	for (int i = 0; i < 200; i++) {
		reply = http_get(port, "/metrics");
		assert_non_null(reply);
		if (worker_sum(om_body(reply), "handled", "sink", SINK_WORKERS) == N_SENT + N_MORE)
			break;
		free(reply);
		reply = NULL;
		usleep(20000);
	}
	assert_non_null(reply);
	assert_openmetrics(om_body(reply));
	free(reply);

	reply = http_get(port, "/elsewhere");
	assert_non_null(reply);
	assert_has(reply, " 404 ");
	free(reply);

	assert_int_equal(kill(r.pid, SIGTERM), 0);
	fx.server = 0;
	tool_finish(&r, 0);
	assert_has(r.err, "serving system " SYSTEM " at http://");
	tool_free(&r);
}

/* ---- Escaping ---- */

/*
 * A copy of the registry, as system "copy", whose first group's name holds
 * a quote, a backslash, a newline and an escape byte: shown escaped, and the
 * exposition still follows the rules (exit 1: the name is not valid).
 */
static void tool_metrics_escapes_hostile_label_values(void **state)
{
	static const char evil[] = "a\"b\\c\nd\033";
	struct shoal__registry reg;
	size_t groups_at;
	struct tool_run r;
	char *image;
	FILE *f;

	(void)state;
	assert_int_equal(shoal__registry_attach(&reg, SYSTEM, SHOAL_SEG_RDONLY, NULL), 0);
	groups_at = (size_t)((char *)&reg.groups[fx.id_sink] - (char *)reg.seg.base);
	image = malloc(reg.seg.size);
	assert_non_null(image);
	memcpy(image, reg.seg.base, reg.seg.size);
	memcpy(image + groups_at + offsetof(struct shoal__reg_group, name), evil, sizeof(evil));
	f = fopen(test_seg_path("shoal.copy.reg"), "wx");
	assert_non_null(f);
	assert_int_equal(fwrite(image, 1, reg.seg.size, f), reg.seg.size);
	assert_int_equal(fclose(f), 0);
	free(image);
	shoal_seg_detach(&reg.seg);

	tool_expect(&r, 1, (const char *const[]){ "metrics", "copy", NULL });
	assert_openmetrics(r.out);
	assert_has(r.out, "shoal_group_up{group=\"a\\\"b\\\\c\\nd\\\\x1b\"} ");
	assert_int_equal(metric(r.out, "shoal_system_corrupt"), 1);
	assert_null(strchr(r.out, '\033'));
	tool_free(&r);
	unlink(test_seg_path("shoal.copy.reg"));
}

/* ---- The command line ---- */

static void tool_metrics_help_and_bad_usage(void **state)
{
	static const struct tool_usage_case cases[] = {
		{ { "metrics", NULL }, "missing SYSTEM" },
		{ { "metrics", "a.b", NULL }, "'a.b' is not a system name" },
		{ { "metrics", "x", "y", NULL }, "unexpected argument 'y'" },
		{ { "metrics", "--bogus", "x", NULL }, "unknown option '--bogus'" },
		{ { "metrics", "x", "--listen", NULL }, "option '--listen' needs a value" },
		{ { "metrics", "--listen", "9464", "x", NULL }, "--listen takes ADDR:PORT" },
		{ { "metrics", "--listen", "localhost:9464", "x", NULL }, "--listen takes ADDR:PORT" },
		{ { "metrics", "--listen", "127.0.0.1:0", "x", NULL }, "--listen takes ADDR:PORT" },
		{ { "metrics", "--listen", "[::1:9464", "x", NULL }, "--listen takes ADDR:PORT" },
	};
	char want[512];
	struct tool_run r;

	(void)state;
	tool_expect(&r, 0, (const char *const[]){ "metrics", "--help", NULL });
	assert_has(r.out, "Usage: shoal metrics [--listen ADDR:PORT] SYSTEM\n");
	assert_has(r.out, "Exit status:");
	tool_free(&r);
	tool_expect(&r, 0, (const char *const[]){ "--help", NULL });
	assert_has(r.out, "\n  metrics ");
	tool_free(&r);
	tool_expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]));

	/* A system that is not there: said as `shoal stat` says it. */
	snprintf(want, sizeof(want), "shoal metrics: no system 'nosuch' in %s (no segment "
		 "shoal.nosuch.reg)", getenv("SHOAL_SHM_DIR"));
	tool_expect(&r, 3, (const char *const[]){ "metrics", "nosuch", NULL });
	assert_has(r.err, want);
	assert_int_equal(r.out[0], '\0');
	tool_free(&r);
	tool_expect(&r, 3, (const char *const[]){ "metrics", "--listen", "127.0.0.1:1", "nosuch",
						 NULL });
	assert_has(r.err, want);
	tool_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tool_metrics_output_follows_the_text_format),
		cmocka_unit_test(tool_metrics_values_match_the_system),
		cmocka_unit_test(tool_metrics_listen_serves_fresh_reads),
		cmocka_unit_test(tool_metrics_escapes_hostile_label_values),
		cmocka_unit_test(tool_metrics_help_and_bad_usage),
	};

	tool_bin = getenv("SHOAL_BIN");
	if (tool_bin == NULL || tool_bin[0] == '\0') {
		/* Visible skip: meson passes SHOAL_BIN; a hand run must too. */
		fprintf(stderr, "tool_metrics_test: SHOAL_BIN is not set (path of the shoal "
			"binary); skipping\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	rt_init();
	test_spawn_server_start();
	return cmocka_run_group_tests_name("tool_metrics", tests, system_up, system_down);
}
