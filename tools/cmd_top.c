/* SPDX-License-Identifier: MIT */
/*
 * `shoal top`: `shoal stat` again and again, showing rates: messages per
 * second per dispatcher and per group, from the difference between the
 * counters of two views (tools/sysview.h) taken an interval apart, busiest
 * first. On a terminal each refresh redraws the screen with plain ANSI
 * escapes; otherwise each is printed after the last (as one JSON line each
 * with --json).
 *
 * Stopping: Ctrl-C (SIGINT) or SIGTERM sets a flag that the wait between
 * refreshes checks; the signals are only unblocked inside ppoll(), so one
 * that arrives just before the wait is not missed. It also ends when the
 * system goes away (its registry is removed, or its router dies).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/format.h"
#include "tools/json.h"
#include "tools/sysview.h"
#include "tools/table.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define TOP_JSON_SCHEMA 1

#define DEFAULT_INTERVAL_MS 1000u
#define MIN_INTERVAL_MS 10u
#define MAX_INTERVAL_MS 3600000u
#define MAX_COUNT 1000000000u

#define NAME_SIZE SHOAL_FMT_PRINTABLE_SIZE(SHOAL_NAME_MAX)

/* Clear the screen and put the cursor at the top left. */
#define ANSI_HOME_CLEAR "\033[H\033[2J"

struct top_args {
	bool json;
	uint32_t interval_ms;
	uint32_t count;                  /* refreshes; 0: until stopped */
	const char *system;
};

/* A group's or dispatcher's rates between two views. */
struct rates {
	uint32_t index;                  /* group id or dispatcher number */
	bool known;                      /* it was in the previous view too */
	double in, out, dropped;         /* per second */
	double busy_pct;                 /* dispatchers only */
};

struct screen {
	bool tty;
	unsigned rows;                   /* terminal height; 0 if unknown */
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
};

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv, struct top_args *a)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(a, 0, sizeof(*a));
	a->interval_ms = DEFAULT_INTERVAL_MS;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
		case OPT_HELP:
			shoal__cli_help(cmd);
			return SHOAL_EXIT_OK;
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
		default:
			return shoal__cli_option_error(cmd, argv, c);
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

static void group_rates(const struct shoal__group_view *g, const struct shoal__group_view *was,
			double secs, struct rates *r)
{
	memset(r, 0, sizeof(*r));
	r->index = g->id;
	/* The same slot under the same name, read both times: comparable. */
	r->known = secs > 0 && was != NULL && was->state != SHOAL_GROUP_EMPTY && g->have_counters &&
		   was->have_counters && strcmp(was->name, g->name) == 0;
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
		       uint32_t d, double secs, struct rates *r)
{
	const struct shoal__disp_view *now = &v->disp[d], *before = &was->disp[d];

	memset(r, 0, sizeof(*r));
	r->index = d;
	r->known = secs > 0 && d < was->n_dispatchers;
	if (!r->known)
		return;
	r->in = per_s(now->messages, before->messages, secs);
	r->out = per_s(now->delivered, before->delivered, secs);
	r->dropped = per_s(disp_dropped(now), disp_dropped(before), secs);
	r->busy_pct = 100.0 * per_s(now->busy_ns, before->busy_ns, secs) / 1e9;
}

static int busiest_first(const void *pa, const void *pb)
{
	const struct rates *a = pa, *b = pb;
	double ta = a->in + a->out, tb = b->in + b->out;

	if (ta != tb)
		return ta < tb ? 1 : -1;
	return a->index < b->index ? -1 : a->index > b->index;
}

/* Rates of every declared group, busiest first. Returns how many. */
static uint32_t all_group_rates(const struct shoal__sys_view *v, const struct shoal__sys_view *was,
				double secs, struct rates *out)
{
	uint32_t n = 0;

	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].state != SHOAL_GROUP_EMPTY)
			group_rates(&v->groups[id], shoal__sys_view_group(was, (int)id), secs,
				    &out[n++]);
	qsort(out, n, sizeof(*out), busiest_first);
	return n;
}

/* ---- Text output ---- */

static void rate_cell(struct shoal__table *t, const struct rates *r, double v)
{
	char buf[SHOAL_FMT_SHORT_SIZE];

	if (r->known)
		shoal__table_cell(t, "%s", shoal__fmt_rate(buf, sizeof(buf), v));
	else
		shoal__table_cell(t, "-");
}

static int text_dispatchers(const struct shoal__sys_view *v, const struct shoal__sys_view *was,
			    double secs)
{
	static const struct shoal__column cols[] = {
		{ "#", 'r' }, { "NODE", 'r' }, { "MSG/S", 'r' }, { "DELIVERED/S", 'r' },
		{ "DROPPED/S", 'r' }, { "BUSY", 'r' },
	};
	struct rates r[SHOAL_MAX_NODES];
	struct shoal__table t;

	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), v->n_dispatchers) < 0)
		return -ENOMEM;
	for (uint32_t d = 0; d < v->n_dispatchers; d++)
		disp_rates(v, was, d, secs, &r[d]);
	qsort(r, v->n_dispatchers, sizeof(r[0]), busiest_first);
	for (uint32_t i = 0; i < v->n_dispatchers; i++) {
		shoal__table_row(&t);
		shoal__table_cell(&t, "%u", r[i].index);
		shoal__table_cell(&t, "%d", v->disp[r[i].index].node);
		rate_cell(&t, &r[i], r[i].in);
		rate_cell(&t, &r[i], r[i].out);
		rate_cell(&t, &r[i], r[i].dropped);
		if (r[i].known)
			shoal__table_cell(&t, "%.1f%%", r[i].busy_pct);
		else
			shoal__table_cell(&t, "-");
	}
	printf("\nDispatchers (busiest first)\n");
	shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	return 0;
}

static void group_row(struct shoal__table *t, const struct shoal__group_view *g,
		      const struct rates *r)
{
	char name[NAME_SIZE], state[32];
	const char *s = shoal__group_state_name(g->state);
	uint64_t queued, bytes;

	shoal__group_view_queued(g, &queued, &bytes);
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
		shoal__table_cell(t, "%llu", (unsigned long long)queued);
	else
		shoal__table_cell(t, "-");
	shoal__table_cell(t, "%u", shoal__group_view_restarts(g));
	shoal__table_cell(t, "%s", shoal__group_view_corrupt(g) ? "CORRUPT" : "OK");
}

/* Lines the refresh uses above the group rows: title, dispatchers, heads. */
static unsigned lines_above_groups(const struct shoal__sys_view *v)
{
	return 8 + v->n_dispatchers;
}

static int text_groups(const struct shoal__sys_view *v, const struct shoal__sys_view *was,
		       double secs, const struct screen *scr)
{
	static const struct shoal__column cols[] = {
		{ "GROUP", 'l' }, { "STATE", 'l' }, { "PID", 'r' }, { "IN/S", 'r' },
		{ "OUT/S", 'r' }, { "DROPPED/S", 'r' }, { "QUEUED", 'r' }, { "RESTARTS", 'r' },
		{ "STATUS", 'l' },
	};
	struct rates *r = calloc(SHOAL_MAX_GROUPS, sizeof(*r));
	uint32_t n, shown;
	struct shoal__table t;

	if (r == NULL || shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]),
					   v->n_groups) < 0) {
		free(r);
		return -ENOMEM;
	}
	n = all_group_rates(v, was, secs, r);
	shown = n;
	/* On a terminal, what does not fit would scroll the top away. */
	if (scr->rows > lines_above_groups(v) + 1 && n > scr->rows - lines_above_groups(v) - 1)
		shown = scr->rows - lines_above_groups(v) - 1;
	for (uint32_t i = 0; i < shown; i++)
		group_row(&t, &v->groups[r[i].index], &r[i]);
	printf("\nGroups (busiest first)\n");
	shoal__table_print(&t, stdout, "  ");
	if (shown < n)
		printf("  ... and %u more (a taller window shows them)\n", n - shown);
	shoal__table_free(&t);
	free(r);
	return 0;
}

static int print_text(const struct shoal__sys_view *v, const struct shoal__sys_view *was,
		      const struct screen *scr, uint32_t refresh)
{
	double secs = (double)(v->taken_ns - was->taken_ns) / 1e9;
	struct shoal__sys_counts n;
	const char *state = shoal__system_state_name(v->state);
	int ret;

	shoal__sys_view_count(v, &n);
	if (scr->tty)
		fputs(ANSI_HOME_CLEAR, stdout);
	else if (refresh > 1)
		putchar('\n');
	printf("shoal top: system %s, router pid %d (%s), %s; %u groups, %u running, %u failed; "
	       "refresh %u over %.2f s\n", v->system, v->router_pid,
	       shoal__alive_name(v->router_alive), state != NULL ? state : "invalid state",
	       n.declared, n.running, n.failed, refresh, secs);
	ret = text_dispatchers(v, was, secs);
	if (ret == 0)
		ret = text_groups(v, was, secs, scr);
	if (ret == 0 && v->corrupt)
		printf("\nregistry CORRUPT: %s\n", v->reason);
	fflush(stdout);
	return ret;
}

/* ---- JSON output: one line per refresh ---- */

static void json_rate(struct shoal__json *j, const char *key, const struct rates *r, double v)
{
	if (r->known)
		shoal__json_real(j, key, v, 1);
	else
		shoal__json_null(j, key);
}

static void json_dispatchers(struct shoal__json *j, const struct shoal__sys_view *v,
			     const struct shoal__sys_view *was, double secs)
{
	shoal__json_array_begin(j, "dispatchers");
	for (uint32_t d = 0; d < v->n_dispatchers; d++) {
		struct rates r;

		disp_rates(v, was, d, secs, &r);
		shoal__json_object_begin(j, NULL);
		shoal__json_uint(j, "index", d);
		shoal__json_int(j, "node", v->disp[d].node);
		json_rate(j, "messages_per_s", &r, r.in);
		json_rate(j, "delivered_per_s", &r, r.out);
		json_rate(j, "dropped_per_s", &r, r.dropped);
		json_rate(j, "busy_pct", &r, r.busy_pct);
		shoal__json_object_end(j);
	}
	shoal__json_array_end(j);
}

static void json_group(struct shoal__json *j, const struct shoal__group_view *g,
		       const struct rates *r)
{
	const char *state = shoal__group_state_name(g->state);
	uint64_t queued, bytes;

	shoal__group_view_queued(g, &queued, &bytes);
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
		shoal__json_uint(j, "queued", queued);
	else
		shoal__json_null(j, "queued");
	shoal__json_uint(j, "restarts", shoal__group_view_restarts(g));
	shoal__json_string(j, "status", shoal__group_view_corrupt(g) ? "corrupt" : "ok");
	shoal__json_object_end(j);
}

static int print_json(const struct shoal__sys_view *v, const struct shoal__sys_view *was,
		      uint32_t refresh)
{
	double secs = (double)(v->taken_ns - was->taken_ns) / 1e9;
	struct rates *r = calloc(SHOAL_MAX_GROUPS, sizeof(*r));
	struct shoal__json j;
	uint32_t n;

	if (r == NULL)
		return -ENOMEM;
	n = all_group_rates(v, was, secs, r);
	shoal__json_init_line(&j, stdout);
	shoal__json_doc_begin(&j, TOP_JSON_SCHEMA);
	shoal__json_string(&j, "system", v->system);
	shoal__json_uint(&j, "refresh", refresh);
	shoal__json_real(&j, "seconds", secs, 3);
	shoal__json_int(&j, "router_pid", v->router_pid);
	json_dispatchers(&j, v, was, secs);
	shoal__json_array_begin(&j, "groups");
	for (uint32_t i = 0; i < n; i++)
		json_group(&j, &v->groups[r[i].index], &r[i]);
	shoal__json_array_end(&j);
	shoal__json_string(&j, "status", shoal__sys_view_corrupt(v) ? "corrupt" : "ok");
	shoal__json_object_end(&j);
	fflush(stdout);
	free(r);
	return 0;
}

/* ---- The loop ---- */

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
}

/* Sleep `ms`; false if a stop was asked before or during it. */
static bool wait_interval(const sigset_t *stop_set, uint32_t ms)
{
	struct timespec now, end, left;
	sigset_t old;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += ms / 1000;
	end.tv_nsec += (long)(ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	/* Blocked from the check until ppoll() unblocks them atomically. */
	sigprocmask(SIG_BLOCK, stop_set, &old);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (stop_asked || now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		left.tv_sec = end.tv_sec - now.tv_sec;
		left.tv_nsec = end.tv_nsec - now.tv_nsec;
		if (left.tv_nsec < 0) {
			left.tv_sec--;
			left.tv_nsec += 1000000000;
		}
		ppoll(NULL, 0, &left, &old);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return !stop_asked;
}

static void screen_probe(struct screen *scr, bool json)
{
	struct winsize ws;

	scr->tty = !json && isatty(STDOUT_FILENO);
	scr->rows = scr->tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_row : 0;
}

/* The same system as before, or a new router of the same name. */
static bool same_incarnation(const struct shoal__sys_view *a, const struct shoal__sys_view *b)
{
	return a->router_pid == b->router_pid && a->registry.ctime_ns == b->registry.ctime_ns;
}

/*
 * Take the next view into *v. Returns -1 to go on, or the exit code to stop
 * with after saying why. The system going away is a normal end (exit 0),
 * unless it was gone before the first refresh.
 */
static int next_view(const struct shoal__cmd *cmd, const char *system,
		     struct shoal__sys_view *v, bool first)
{
	static const struct shoal__sys_view_opts o = { .mailboxes = true, .rings = true,
						       .check_retries = 3 };
	struct shoal_err err = {{0}};
	int ret = shoal__sys_view_take(v, system, &o, &err);

	if (ret == -ENOENT && !first) {
		fprintf(stderr, "shoal %s: system %s went away (its registry is gone)\n",
			cmd->name, system);
		return SHOAL_EXIT_OK;
	}
	if (ret < 0)
		return shoal__sys_view_fail(cmd->name, system, ret, &err);
	if (v->router_alive == 0) {
		pid_t pid = v->router_pid;

		shoal__sys_view_free(v);
		/* The end of a system watched is a normal end, said on stderr. */
		if (!first) {
			fprintf(stderr, "shoal %s: system %s went away (its router, pid %d, is "
				"gone)\n", cmd->name, system, pid);
			return SHOAL_EXIT_OK;
		}
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ESRCH, "system %s is not "
				       "running: its router (pid %d) is gone; 'shoal stat %s' "
				       "shows what it left", system, pid, system);
	}
	return -1;
}

static int refresh_loop(const struct shoal__cmd *cmd, const struct top_args *a,
			struct shoal__sys_view *views)
{
	struct shoal__sys_view *was = &views[0], *now = &views[1], *tmp;
	bool corrupt = false;
	struct screen scr;
	sigset_t stop_set;
	int ret;

	catch_stop_signals(&stop_set);
	for (uint32_t refresh = 1; a->count == 0 || refresh <= a->count; refresh++) {
		if (!wait_interval(&stop_set, a->interval_ms))
			break;
		ret = next_view(cmd, a->system, now, false);
		if (ret >= 0)
			return ret;
		if (!same_incarnation(was, now))
			fprintf(stderr, "shoal %s: system %s restarted (router pid %d): rates "
				"start over\n", cmd->name, a->system, now->router_pid);
		screen_probe(&scr, a->json);
		ret = a->json ? print_json(now, same_incarnation(was, now) ? was : now, refresh) :
		      print_text(now, same_incarnation(was, now) ? was : now, &scr, refresh);
		corrupt |= shoal__sys_view_corrupt(now);
		shoal__sys_view_free(was);
		tmp = was;
		was = now;
		now = tmp;
		if (ret < 0)
			return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, ret, "out of memory");
	}
	return corrupt ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
}

static int cmd_top(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct shoal__sys_view *views;
	struct top_args a;
	int ret = parse_args(cmd, argc, argv, &a);

	if (ret >= 0)
		return ret;
	/* Two views: the previous refresh's and this one's, swapped each time. */
	views = calloc(2, sizeof(*views));
	if (views == NULL)
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ENOMEM, "out of memory");
	ret = next_view(cmd, a.system, &views[0], true);
	if (ret < 0) {
		ret = refresh_loop(cmd, &a, views);
		/* The loop leaves the last view taken in one of the two. */
		shoal__sys_view_free(&views[0]);
		shoal__sys_view_free(&views[1]);
	}
	free(views);
	return ret;
}

const struct shoal__cmd shoal__cmd_top = {
	.name = "top",
	.summary = "Show a system's message rates, refreshed, busiest first",
	.fn = cmd_top,
	.help =
	"Usage: shoal top [--interval MS] [--count N] [--json] SYSTEM\n"
	"\n"
	"Show the running system SYSTEM every MS milliseconds: for each dispatcher\n"
	"the messages it took from uplinks, delivered and dropped per second and how\n"
	"busy it was; for each group (busiest first) the messages it received and\n"
	"sent per second, the copies dropped for it per second, what waits in its\n"
	"inbound rings, and its restarts. Rates come from the difference between\n"
	"two readings of the counters the system keeps in shared memory.\n"
	"\n"
	"On a terminal the screen is redrawn at every refresh; otherwise each\n"
	"refresh is printed after the last. Read-only, like 'shoal stat'.\n"
	"It runs until Ctrl-C, until N refreshes, or until the system goes away\n"
	"(its registry is removed or its router dies), which it says on stderr.\n"
	"\n"
	"Options:\n"
	"  --interval MS   time between refreshes (default 1000, from 10 to 3600000)\n"
	"  --count N       stop after N refreshes\n"
	"  --json          one JSON object per refresh, each on one line\n"
	"  -h, --help      show this help\n"
	"\n"
	"Exit status:\n"
	"  0  stopped by Ctrl-C, --count or the system going away, nothing corrupted\n"
	"  1  some refresh found something corrupted, or the system's router was\n"
	"     already gone at the start\n"
	"  2  bad command line\n"
	"  3  cannot read the system's registry (no such system ...)\n",
	.json_schema = TOP_JSON_SCHEMA,
};
