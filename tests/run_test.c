/* SPDX-License-Identifier: MIT */
/*
 * `shoal run` end to end: the real binary (SHOAL_BIN) launching real group
 * processes (SHOAL_TEST_GROUP, tests/run_group.c) from YAML files this test
 * writes. Bad configs, kill -9 under load, a crash loop, ordered stop with
 * nothing left in shared memory, a live route switch on SIGHUP, and a start
 * over the leftovers of a killed router. Faults around the supervisor: a
 * control client that never reads, too few descriptors, a killed router's
 * groups, a reader of its output that goes away, and messages stranded by a
 * stop. Operating a system: one file run twice (--name), the groups' output
 * by line and in --log-dir files, `shoal stop|restart|reload` over the
 * control socket (and clients of it that go away or are another user),
 * `shoal logs`, and the notifications a systemd unit of Type=notify gets.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/control/config.h"
#include "runtime/layout.h"
#include "runtime/control/proto.h"
#include "tests/jsoncheck.h"
#include "tests/jsonvalue.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

static const char *shoal_bin, *group_bin;
static char dir[256];
static pid_t started[16];   /* shoal run processes, killed if a case fails */
static unsigned n_started;

/* ---- helpers ------------------------------------------------------------------- */

static const char *in_dir(const char *name)
{
	static char paths[8][512];
	static int next;
	char *p = paths[next++ % 8];

	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (f == NULL)
		return strdup("");
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n)
		buf[0] = '\0';
	fclose(f);
	return buf;
}

/*
 * Start `shoal run --status plain [OPTS...] CONFIG` (OPTS NULL-terminated, or
 * NULL), its output appended to the file OUT, or (OUT NULL) written to
 * descriptor OUT_FD; with NOFILE > 0 its open files limit is lowered to that.
 */
static pid_t spawn_run(const char *const *opts, const char *config, const char *out, int out_fd,
		       rlim_t nofile)
{
	const char *argv[16] = { "shoal", "run", "--status", "plain" };
	unsigned n = 4;
	pid_t pid;

	while (opts != NULL && *opts != NULL && n < 14)
		argv[n++] = *opts++;
	argv[n] = config;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = out != NULL ? open(out, O_WRONLY | O_CREAT | O_APPEND, 0600) : out_fd;
		struct rlimit rl = { nofile, nofile };

		dup2(fd, 1);
		dup2(fd, 2);
		close_range(3, ~0u, 0);
		signal(SIGPIPE, SIG_DFL);
		if (nofile > 0 && setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(126);
		execv(shoal_bin, (char *const *)argv);
		_exit(127);
	}
	started[n_started++ % 16] = pid;
	return pid;
}

static pid_t start_run(const char *config, const char *out)
{
	return spawn_run(NULL, config, out, -1, 0);
}

static bool wait_output(const char *out, const char *needle, int timeout_ms)
{
	for (int i = 0; i <= timeout_ms / 10; i++) {
		char *text = read_file(out);
		bool found = strstr(text, needle) != NULL;

		free(text);
		if (found)
			return true;
		usleep(10000);
	}
	return false;
}

static void expect_output(const char *out, const char *needle, int timeout_ms)
{
	if (!wait_output(out, needle, timeout_ms)) {
		char *text = read_file(out);

		print_error("--- output of shoal run:\n%s---\n", text);
		free(text);
		fail_msg("'%s' did not appear within %d ms", needle, timeout_ms);
	}
}

/* Wait up to `timeout_ms` for `needle` to be in file `out` exactly `n` times. */
static void expect_count(const char *out, const char *needle, unsigned n, int timeout_ms)
{
	unsigned got = 0;

	for (int i = 0; i <= timeout_ms / 10; i++) {
		char *text = read_file(out);

		got = count_of(text, needle);
		free(text);
		if (got == n)
			return;
		usleep(10000);
	}
	fail_msg("'%s' is in %s %u times, not %u", needle, out, got, n);
}

/* Lines "type seq" of a consumer log, as a presence count per seq. */
static uint32_t *seqs_of(const char *log, uint32_t type, uint64_t n, uint64_t *lines,
			 uint64_t *first, uint64_t *last)
{
	uint32_t *seen = calloc(n, sizeof(*seen));
	FILE *f = fopen(log, "r");
	unsigned t;
	unsigned long long s;

	*lines = 0;
	*first = UINT64_MAX;
	*last = 0;
	while (f != NULL && fscanf(f, "%u %llu", &t, &s) == 2) {
		if (t != type || s >= n)
			continue;
		seen[s]++;
		(*lines)++;
		if (s < *first)
			*first = s;
		if (s > *last)
			*last = s;
	}
	if (f != NULL)
		fclose(f);
	return seen;
}

static uint64_t count_lines(const char *log, uint32_t type, uint64_t n)
{
	uint64_t lines, first, last;

	free(seqs_of(log, type, n, &lines, &first, &last));
	return lines;
}

/* Sequence numbers below n seen at least once in `log` (duplicates once). */
static uint64_t count_unique(const char *log, uint32_t type, uint64_t n)
{
	uint64_t lines, first, last, unique = 0;
	uint32_t *seen = seqs_of(log, type, n, &lines, &first, &last);

	for (uint64_t s = 0; s < n; s++)
		unique += seen[s] != 0;
	free(seen);
	return unique;
}

static int stop_run(pid_t pid, int sig)
{
	int status;

	kill(pid, sig);
	status = test_wait_pid(pid, 30000);
	assert_int_not_equal(status, -1);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static int count_system_files(const char *system)
{
	char prefix[64];
	struct dirent *e;
	DIR *d = opendir(dir);
	int n = 0;

	snprintf(prefix, sizeof(prefix), "shoal.%s.", system);
	while (d != NULL && (e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	if (d != NULL)
		closedir(d);
	return n;
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "%s", test_shm_dir_make("run"));
	return 0;
}

/* After each case: no shoal run (and so no group) outlives it. */
static int kill_started(void **state)
{
	(void)state;
	for (unsigned i = 0; i < n_started && i < 16; i++)
		if (kill(started[i], SIGKILL) == 0)
			waitpid(started[i], NULL, 0);
	n_started = 0;
	return 0;
}

static int teardown(void **state)
{
	kill_started(state);
	test_shm_dir_remove();
	return 0;
}

/* ---- the bad-config table ---------------------------------------------------------- */

struct bad {
	const char *name;
	const char *yaml;
	int line;
	const char *reason;
};

#define G "groups:\n  - name: a\n    program: /bin/true\n"

static const struct bad bad_configs[] = {
	{ "empty", "", 1, "empty" },
	{ "not_yaml", "system: [a\n", 2, "flow sequence" },
	{ "no_system", G, 1, "has no 'system'" },
	{ "unknown_top_key", "system: s\nsistem: t\n" G, 2, "unknown key 'sistem'" },
	{ "bad_system_name", "system: \"a b\"\n" G, 1, "character outside" },
	{ "groups_empty", "system: s\ngroups: []\n", 2, "groups is empty" },
	{ "groups_mapping", "system: s\ngroups: {a: 1}\n", 2, "groups must be a list" },
	{ "no_program", "system: s\ngroups:\n  - name: a\n", 3, "has no 'program'" },
	{ "program_missing", "system: s\ngroups:\n  - name: a\n    program: /no/such/prog\n", 4,
	  "cannot be executed" },
	{ "program_not_in_path", "system: s\ngroups:\n  - name: a\n    program: no-such-prog-x\n",
	  4, "not in $SHOAL_PATH" },
	{ "duplicate_group", "system: s\n" G "  - name: a\n    program: /bin/true\n", 5,
	  "used twice" },
	{ "unknown_group_key", "system: s\n" G "    replicas: 3\n", 5, "unknown key 'replicas'" },
	{ "zero_actors", "system: s\n" G "    actors: 0\n", 5, "actors is 0" },
	{ "too_many_workers", "system: s\n" G "    workers: 100\n", 5, "between 1 and 16" },
	{ "no_such_node", "system: s\n" G "    node: 7\n", 5, "does not exist on this machine" },
	{ "cpu_past_the_largest", "system: s\n" G "    cpus: 0-9000\n", 5,
	  "names CPU 9000; CPU numbers go up to 8191" },
	{ "cpus_range_backwards", "system: s\n" G "    cpus: 3-1\n", 5, "has a bad range" },
	{ "cpus_trailing_comma", "system: s\n" G "    cpus: \"0,\"\n", 5,
	  "is not a list like '0-3,64,130-131'" },
	{ "cpus_empty", "system: s\n" G "    cpus: \"\"\n", 5, "cpus is empty" },
	{ "mailbox_not_pow2", "system: s\n" G "    mailbox: 3KiB\n", 5, "power of two" },
	{ "mailbox_bad_unit", "system: s\n" G "    mailbox: 64KB\n", 5, "unknown unit 'KB'" },
	{ "overflow_word", "system: s\n" G "    overflow: spill\n", 5, "one of: block, drop" },
	{ "restart_policy", "system: s\n" G "    restart: { policy: sometimes }\n", 5,
	  "never, on-failure, always" },
	{ "restart_backoff", "system: s\n" G "    restart: { policy: always, backoff: fast }\n", 5,
	  "number with an optional unit" },
	{ "backoff_order", "system: s\n" G
	  "    restart: { policy: always, backoff: 2s, max_backoff: 1s }\n", 3,
	  "max_backoff is below backoff" },
	{ "route_unknown_type", "system: s\n" G "    routes: [ { types: [nope] } ]\n", 5,
	  "neither a number nor a name" },
	{ "route_mod", "system: s\n" G
	  "    routes: [ { types: [1], key: {offset: 0, width: 8}, match: {mod: [4, 4]} } ]\n", 5,
	  "needs n > 0 and i < n" },
	{ "route_width", "system: s\n" G
	  "    routes: [ { types: [1], key: {offset: 0, width: 3} } ]\n", 5, "1, 2, 4 or 8" },
	{ "route_unicast_no_key", "system: s\n" G
	  "    routes: [ { types: [1], deliver: unicast } ]\n", 5, "needs a key" },
	{ "repeated_key", "system: s\n" G "    actors: 1\n    actors: 2\n", 6, "appears twice" },
	{ "router_mode", "system: s\nrouter: { mode: 0200 }\n" G, 2, "owner read and write" },
	{ "type_duplicate", "system: s\ntypes:\n  - { id: 1, name: a, max_size: 8 }\n"
	  "  - { id: 1, name: b, max_size: 8 }\n" G, 4, "repeats the id or name" },
	{ "env_reserved", "system: s\n" G "    env: { SHOAL_GROUP: x }\n", 5, "reserved SHOAL_" },
	{ "args_not_list", "system: s\n" G "    args: --fast\n", 5, "args must be a list" },
	{ "inbound_below_uplink", "system: s\nrouter: { inbound_capacity: 64KiB, "
	  "uplink_capacity: 128KiB }\n" G, 1, "must be at least router.uplink_capacity" },
	{ "uplink_above_default_inbound", "system: s\nrouter: { uplink_capacity: 512KiB }\n" G,
	  1, "(262144 bytes, the default) must be at least" },
};

#define N_BAD (sizeof(bad_configs) / sizeof(bad_configs[0]))

static void run_config_refused_with_position(void **state)
{
	const struct bad *b = *state;
	struct shoal__config *c = NULL;
	struct shoal_err err = { { 0 } };
	char where[32];

	assert_int_equal(shoal__config_parse("t.yaml", b->yaml, strlen(b->yaml), &c, &err), -EINVAL);
	assert_null(c);
	snprintf(where, sizeof(where), "t.yaml:%d:", b->line);
	if (strstr(err.msg, where) == NULL || strstr(err.msg, b->reason) == NULL)
		fail_msg("%s: got '%s', expected '%s' and '%s'", b->name, err.msg, where,
			 b->reason);
}

static void run_check_prints_position_and_exits_1(void **state)
{
	const char *cfg = in_dir("bad.yaml"), *out = in_dir("check.out");
	char cmd[1400], *text;

	(void)state;
	write_file(cfg, "system: s\ngroups:\n  - name: a\n    program: /bin/true\n    actors: x\n");
	snprintf(cmd, sizeof(cmd), "%s run --check %s > %s 2>&1", shoal_bin, cfg, out);
	assert_int_equal(WEXITSTATUS(system(cmd)), 1);
	text = read_file(out);
	assert_non_null(strstr(text, "bad.yaml:5:13: actors must be a whole number"));
	free(text);
	write_file(cfg, "system: s\ngroups:\n  - name: a\n    program: /bin/true\n");
	snprintf(cmd, sizeof(cmd), "%s run --check %s > %s 2>&1", shoal_bin, cfg, out);
	assert_int_equal(WEXITSTATUS(system(cmd)), 0);
}

/*
 * CPUs this machine lacks: the file may name any CPU below 8192 (it may be
 * for a larger host), so --check accepts it; `shoal run` here refuses it,
 * at the position of its `cpus:`, before it starts anything.
 */
static void run_cpus_this_machine_lacks_are_refused_at_run(void **state)
{
	const char *cfg = in_dir("bigcpu.yaml"), *out = in_dir("bigcpu.out");
	char cmd[1400], *text;

	(void)state;
	if (sysconf(_SC_NPROCESSORS_CONF) > 127)
		skip();
	write_file(cfg, "system: bigcpu\ngroups:\n  - name: a\n    program: /bin/true\n"
		   "    cpus: \"0,64-127\"\n");
	snprintf(cmd, sizeof(cmd), "%s run --check %s > %s 2>&1", shoal_bin, cfg, out);
	assert_int_equal(WEXITSTATUS(system(cmd)), 0);
	snprintf(cmd, sizeof(cmd), "%s run %s > %s 2>&1", shoal_bin, cfg, out);
	assert_int_equal(WEXITSTATUS(system(cmd)), 1);
	text = read_file(out);
	assert_has(text, "bigcpu.yaml:5:11: group a: cpus names CPU 127; this machine has ");
	assert_lacks(text, "started");
	free(text);
	assert_int_equal(count_system_files("bigcpu"), 0);
}

/* ---- systems ------------------------------------------------------------------------ */

static const char *config_pc(const char *system, const char *extra_consumer)
{
	static char text[4096];

	snprintf(text, sizeof(text),
		 "system: %s\n"
		 "router: { inbound_capacity: 64KiB, uplink_capacity: 64KiB }\n"
		 "types:\n  - { id: 3, name: work, max_size: 64 }\n"
		 "groups:\n"
		 "  - name: producer\n    program: %s\n"
		 "    args: [--role, producer, --n, \"%d\", --rate, \"20000\"]\n"
		 "    restart: { policy: on-failure }\n"
		 "  - name: consumer\n    program: %s\n"
		 "    args: [--role, consumer, --log, %s]\n"
		 "    restart: { policy: on-failure, backoff: 50ms }\n"
		 "    routes: [ { types: [work] } ]\n%s",
		 system, group_bin, 20000, group_bin, in_dir("consumer.log"),
		 extra_consumer ? extra_consumer : "");
	return text;
}

static void run_kill9_under_load_loses_nothing(void **state)
{
	const char *cfg = in_dir("k9.yaml"), *out = in_dir("k9.out"), *log = in_dir("consumer.log");
	uint64_t lines, first, last, missing = 0, dups = 0;
	uint32_t *seen;
	pid_t run, victim;

	(void)state;
	unlink(log);
	write_file(cfg, config_pc("k9", NULL));
	run = start_run(cfg, out);
	expect_output(out, "group consumer: started", 10000);
	for (int i = 0; i < 1000 && count_lines(log, 3, 20000) < 2000; i++)
		usleep(10000);
	victim = rt_group_pid("k9", "consumer");
	assert_true(victim > 0);
	kill(victim, SIGKILL);
	expect_output(out, "killed by signal 9", 10000);
	expect_output(out, "restart 1 in 50 ms", 10000);
	/* Everything the producer sent is handled, most of it by the second
	 * process (the producer keeps sending while the consumer is down).
	 * Counted by sequence number: the lines include the batch in flight
	 * at the kill, handled twice. */
	for (int i = 0; i < 1200 && count_unique(log, 3, 20000) < 20000; i++)
		usleep(50000);
	seen = seqs_of(log, 3, 20000, &lines, &first, &last);
	for (uint64_t s = 0; s < 20000; s++) {
		missing += seen[s] == 0;
		dups += seen[s] > 1;
	}
	free(seen);
	print_message("kill -9 under load: %llu lines, %llu missing, %llu handled twice "
		      "(the batch in flight at the kill)\n", (unsigned long long)lines,
		      (unsigned long long)missing, (unsigned long long)dups);
	if (missing != 0) {
		char cmd[PATH_MAX + 64];

		/* Whether they were counted lost somewhere, for whoever reads this. */
		snprintf(cmd, sizeof(cmd), "%s stat k9", shoal_bin);
		(void)system(cmd);
	}
	assert_int_equal(missing, 0);
	assert_true(dups <= 32);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	assert_int_equal(count_system_files("k9"), 0);
}

/*
 * Run system `name` from `text` (its "%s" is the group program) until it
 * stops by itself; check that it exited 1 having removed all its files.
 * Returns the path of its output.
 */
static const char *run_until_it_fails(const char *name, const char *text)
{
	static char out[PATH_MAX];
	char cfg[PATH_MAX], yaml[2048], file[64];
	pid_t run;
	int status;

	snprintf(file, sizeof(file), "%s.yaml", name);
	snprintf(cfg, sizeof(cfg), "%s", in_dir(file));
	snprintf(file, sizeof(file), "%s.out", name);
	snprintf(out, sizeof(out), "%s", in_dir(file));
	snprintf(yaml, sizeof(yaml), text, group_bin);
	write_file(cfg, yaml);
	run = start_run(cfg, out);
	status = test_wait_pid(run, 20000);
	assert_int_not_equal(status, -1);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_int_equal(count_system_files(name), 0);
	return out;
}

static void run_crash_loop_backs_off_then_fails(void **state)
{
	const char *out;

	(void)state;
	out = run_until_it_fails("crash",
		"system: crash\n"
		"groups:\n"
		"  - name: crasher\n    program: %s\n    args: [--role, crasher]\n"
		"    restart: { policy: on-failure, backoff: 50ms, max_backoff: 150ms,\n"
		"               max_retries: 3, on_give_up: stop }\n");
	expect_output(out, "restart 1 in 50 ms", 0);
	expect_output(out, "restart 2 in 100 ms", 0);
	expect_output(out, "restart 3 in 150 ms", 0);   /* capped by max_backoff */
	expect_output(out, "group crasher: failed after 3 restarts; giving up", 0);
	expect_output(out, "stopping: a group gave up", 0);
}

/* The file's types are declared to the router: a program that disagrees
 * is refused at attach, saying why; its policy (never) gives up at once and
 * stops the system, as configured. */
static void run_program_disagreeing_with_file_types_is_refused(void **state)
{
	const char *out;

	(void)state;
	out = run_until_it_fails("types",
		"system: types\n"
		"types:\n  - { id: 3, name: job, max_size: 64 }\n"
		"groups:\n"
		"  - name: consumer\n    program: %s\n    args: [--role, consumer]\n"
		"    restart: { policy: never, on_give_up: stop }\n"
		"    routes: [ { types: [job] } ]\n");
	expect_output(out, "message type 3 is 'job' (max 64 bytes) in this system, 'work' "
		      "(max 64 bytes) in this program", 0);
	expect_output(out, "group consumer: its restart policy is never; giving up", 0);
	expect_output(out, "stopping: a group gave up", 0);
}

static void run_sigterm_stops_in_order_and_cleans_up(void **state)
{
	const char *cfg = in_dir("order.yaml"), *out = in_dir("order.out");
	const char *stops = in_dir("stops.txt");
	char text[2048], *got;
	pid_t run;

	(void)state;
	unlink(stops);
	snprintf(text, sizeof(text),
		 "system: order\ngroups:\n"
		 "  - { name: third, program: %s, args: [--role, consumer, --stop-file, %s],"
		 " stop: { order: 30 } }\n"
		 "  - { name: first, program: %s, args: [--role, consumer, --stop-file, %s],"
		 " stop: { order: 10 } }\n"
		 "  - { name: second, program: %s, args: [--role, consumer, --stop-file, %s],"
		 " stop: { order: 20 } }\n",
		 group_bin, stops, group_bin, stops, group_bin, stops);
	write_file(cfg, text);
	run = start_run(cfg, out);
	expect_output(out, "group second: started", 10000);
	for (int i = 0; i < 500 && (!rt_group_pid("order", "first") || !rt_group_pid("order", "second") ||
				    !rt_group_pid("order", "third")); i++)
		usleep(10000);
	assert_true(count_system_files("order") > 0);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	got = read_file(stops);
	assert_string_equal(got, "first\nsecond\nthird\n");
	free(got);
	expect_output(out, "system order stopped", 0);
	assert_int_equal(count_system_files("order"), 0);
}

/*
 * A producer stopped first leaves what it sent in its uplink: every
 * message goes to two consumers, and the slow one holds the router's
 * dispatcher back (the uplink's head waits for room in its mailbox), so
 * the fast one has caught up with what was routed. The fast one, stopped
 * next, still gets every message: the stop sequence lets the dispatcher
 * route a level's leftovers before it stops the next level.
 */
static void run_stop_lets_the_router_route_what_a_stopped_level_left(void **state)
{
	const char *cfg = in_dir("left.yaml"), *out = in_dir("left.out");
	const char *log[2] = { in_dir("fast.log"), in_dir("slow.log") };
	char text[2048], *got;
	pid_t run;

	(void)state;
	for (int c = 0; c < 2; c++)
		unlink(log[c]);
	snprintf(text, sizeof(text),
		 "system: left\n"
		 "types:\n  - { id: 3, name: work, max_size: 64 }\n"
		 "groups:\n"
		 "  - name: producer\n    program: %s\n"
		 "    args: [--role, producer, --n, \"10000\"]\n    stop: { order: 1 }\n"
		 "  - name: fast\n    program: %s\n    args: [--role, consumer, --log, %s]\n"
		 "    routes: [ { types: [work] } ]\n    stop: { order: 2, timeout: 30s }\n"
		 "  - name: slow\n    program: %s\n"
		 "    args: [--role, consumer, --log, %s, --slow, \"200\"]\n"
		 "    routes: [ { types: [work] } ]\n    stop: { order: 3, timeout: 30s }\n",
		 group_bin, group_bin, log[0], group_bin, log[1]);
	write_file(cfg, text);
	run = start_run(cfg, out);
	expect_output(out, "producer: sent 10000", 30000);
	/* The slow consumer is behind, the uplink holds a part of the rest. */
	assert_true(count_lines(log[1], 3, 10000) < 10000);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	for (int c = 0; c < 2; c++) {
		uint64_t lines, first, last, missing = 0;
		uint32_t *seen = seqs_of(log[c], 3, 10000, &lines, &first, &last);

		for (uint64_t i = 0; i < 10000; i++)
			missing += seen[i] == 0;
		free(seen);
		print_message("%s consumer: %llu lines, %llu missing\n", c ? "slow" : "fast",
			      (unsigned long long)lines, (unsigned long long)missing);
		assert_int_equal(missing, 0);
		assert_int_equal(lines, 10000);
	}
	got = read_file(out);
	assert_null(strstr(got, "counted as lost"));
	assert_null(strstr(got, "not routed in time"));
	free(got);
}

static void run_sighup_switches_a_route_live(void **state)
{
	const char *cfg = in_dir("hup.yaml"), *out = in_dir("hup.out");
	const char *la = in_dir("a.log"), *lb = in_dir("b.log"), *lc = in_dir("c.log");
	const uint64_t n = 30000;
	char text[3][4096];
	uint64_t lines[3], first[3], last[3], missing = 0;
	uint32_t *sa, *sb, *sc;
	pid_t run, pa, pc;

	(void)state;
	unlink(la);
	unlink(lb);
	unlink(lc);
	for (int v = 0; v < 2; v++)
		snprintf(text[v], sizeof(text[v]),
			 "system: hup\n"
			 "types:\n  - { id: 1, name: ping, max_size: 16 }\n"
			 "  - { id: 3, name: work, max_size: 64 }\n"
			 "groups:\n"
			 "  - name: producer\n    program: %s\n"
			 "    args: [--role, producer, --alternate, --n, \"%llu\", --rate, \"10000\"]\n"
			 "  - name: a\n    program: %s\n    args: [--role, consumer, --log, %s]\n"
			 "%s"
			 "  - name: b\n    program: %s\n    args: [--role, consumer, --log, %s]\n"
			 "%s"
			 "  - name: c\n    program: %s\n    args: [--role, consumer, --log, %s]\n"
			 "    routes: [ { types: [ping] } ]\n",
			 group_bin, (unsigned long long)n, group_bin, la,
			 v == 0 ? "    routes: [ { types: [work] } ]\n" : "", group_bin, lb,
			 v == 1 ? "    routes: [ { types: [work] } ]\n" : "", group_bin, lc);
	write_file(cfg, text[0]);
	run = start_run(cfg, out);
	expect_output(out, "group c: started", 10000);
	for (int i = 0; i < 1000 && count_lines(la, 3, n) < 3000; i++)
		usleep(10000);
	/* "started" is the fork; the pid is in the registry once c attached. */
	for (int i = 0; i < 1000 && !rt_group_pid("hup", "c"); i++)
		usleep(10000);
	pa = rt_group_pid("hup", "a");
	pc = rt_group_pid("hup", "c");
	assert_true(pa > 0 && pc > 0);
	write_file(cfg, text[1]);
	kill(run, SIGHUP);
	expect_output(out, "reload: 2 routes published", 10000);
	/* The producer ends with a ping, but b's last work messages may still
	 * be on their way when c has all of its own: wait for both. */
	for (int i = 0; i < 3000 && (count_lines(lc, 1, n) < n / 2 ||
				     count_lines(la, 3, n) + count_lines(lb, 3, n) < n / 2); i++)
		usleep(10000);
	/* Untouched groups kept their processes. */
	assert_int_equal(rt_group_pid("hup", "a"), pa);
	assert_int_equal(rt_group_pid("hup", "c"), pc);
	sa = seqs_of(la, 3, n, &lines[0], &first[0], &last[0]);
	sb = seqs_of(lb, 3, n, &lines[1], &first[1], &last[1]);
	sc = seqs_of(lc, 1, n, &lines[2], &first[2], &last[2]);
	print_message("before the switch a got %llu (up to %llu), after it b got %llu (from %llu); "
		      "c got %llu\n", (unsigned long long)lines[0], (unsigned long long)last[0],
		      (unsigned long long)lines[1], (unsigned long long)first[1],
		      (unsigned long long)lines[2]);
	/* The switch is one publish: every work message went to a or to b,
	 * a's all before b's; the unchanged route lost nothing. */
	assert_true(lines[0] > 0 && lines[1] > 0);
	assert_true(last[0] < first[1]);
	for (uint64_t s = 0; s < n; s++) {
		if (s % 2 == 0)
			missing += sa[s] + sb[s] != 1;
		else
			missing += sc[s] != 1;
	}
	free(sa);
	free(sb);
	free(sc);
	assert_int_equal(missing, 0);
	/* A type the programs know, or the router's settings, cannot change
	 * live: such a reload is refused whole and says why. */
	snprintf(text[2], sizeof(text[2]), "%s", text[1]);
	memcpy(strstr(text[2], "max_size: 64"), "max_size: 99", 12);
	write_file(cfg, text[2]);
	kill(run, SIGHUP);
	expect_output(out, "reload refused, nothing changed: message type 3 'work' (max 64 bytes) "
		      "would become 3 'work' (max 99 bytes)", 10000);
	snprintf(text[2], sizeof(text[2]), "system: hup\nrouter: { spin: 50us }\n%.4000s",
		 text[1] + strlen("system: hup\n"));
	write_file(cfg, text[2]);
	kill(run, SIGHUP);
	expect_output(out, "reload refused, nothing changed: router settings cannot change", 10000);
	/* Streamed copies too: the dispatcher and every group took them at
	 * start (docs/config.md). */
	snprintf(text[2], sizeof(text[2]), "system: hup\nrouter: { stream: off }\n%.4000s",
		 text[1] + strlen("system: hup\n"));
	write_file(cfg, text[2]);
	kill(run, SIGHUP);
	expect_count(out, "reload refused, nothing changed: router settings cannot change", 2, 10000);
	assert_int_equal(rt_group_pid("hup", "a"), pa);
	assert_int_equal(stop_run(run, SIGTERM), 0);
}

/* A reload reads a file a user just edited: whatever it holds, the running
 * system carries on. Too many groups, and 'groups' before 'types', once
 * crashed the loader, and with it the router and every group. */
static void run_sighup_with_a_refused_file_keeps_the_system_running(void **state)
{
	const char *cfg = in_dir("hup2.yaml"), *out = in_dir("hup2.out");
	const char *types = "types:\n  - { id: 3, name: work, max_size: 64 }\n";
	char group[512], *text;
	size_t cap = 64 * 1024, len;
	pid_t run, pa;

	(void)state;
	snprintf(group, sizeof(group), "  - name: a\n    program: %s\n"
		 "    args: [--role, consumer]\n    routes: [ { types: [work] } ]\n", group_bin);
	text = malloc(cap);
	assert_non_null(text);
	snprintf(text, cap, "system: hup2\n%sgroups:\n%s", types, group);
	write_file(cfg, text);
	run = start_run(cfg, out);
	expect_output(out, "group a: started", 10000);
	for (int i = 0; i < 500 && !rt_group_pid("hup2", "a"); i++)
		usleep(10000);
	pa = rt_group_pid("hup2", "a");
	assert_true(pa > 0);
	/* More groups than a system can have. */
	len = (size_t)snprintf(text, cap, "system: hup2\n%sgroups:\n%s", types, group);
	for (int i = 0; i < SHOAL_MAX_GROUPS; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"  - { name: x%d, program: /bin/true }\n", i);
	write_file(cfg, text);
	kill(run, SIGHUP);
	expect_output(out, "reload refused, nothing changed: ", 10000);
	expect_output(out, "groups has 257 entries, more than the limit of 256", 0);
	/* New groups whose mailboxes no shared-memory folder holds (32 TiB). */
	len = (size_t)snprintf(text, cap, "system: hup2\n%sgroups:\n%s", types, group);
	for (int i = 1; i < SHOAL_MAX_GROUPS; i++)
		len += (size_t)snprintf(text + len, cap - len, "  - { name: x%d, program: /bin/true, "
					"workers: 16, mailbox: 1024MiB }\n", i);
	write_file(cfg, text);
	kill(run, SIGHUP);
	expect_output(out, "reload refused, nothing changed: system hup2 needs ", 10000);
	expect_output(out, "GiB of shared memory for its new groups, but ", 0);
	/* The same system with 'groups' before 'types': valid, and nothing to change. */
	snprintf(text, cap, "groups:\n%s%ssystem: hup2\n", group, types);
	write_file(cfg, text);
	kill(run, SIGHUP);
	expect_output(out, "reload: 1 routes published", 10000);
	free(text);
	assert_int_equal(rt_group_pid("hup2", "a"), pa);
	assert_int_equal(kill(run, 0), 0);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	assert_int_equal(count_system_files("hup2"), 0);
}

/* What --check says a system needs is what its router creates. */
static void run_check_tells_the_shared_memory_the_router_creates(void **state)
{
	const char *cfg = in_dir("mem.yaml"), *out = in_dir("mem.out"), *chk = in_dir("mem.chk");
	struct shoal__config *c = NULL;
	struct shoal_err err = { { 0 } };
	char text[2048], cmd[1400], path[600], prefix[32], *got;
	uint64_t need, have = 0;
	struct dirent *e;
	struct stat st;
	DIR *d;
	pid_t run;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: mem\n"
		 "router: { uplink_capacity: 16KiB, inbound_capacity: 32KiB, direct_capacity: 8KiB }\n"
		 "groups:\n"
		 "  - { name: a, program: %s, args: [--role, consumer], workers: 2 }\n"
		 "  - { name: b, program: %s, args: [--role, consumer], mailbox: 128KiB }\n",
		 group_bin, group_bin);
	write_file(cfg, text);
	assert_int_equal(shoal__config_parse(cfg, text, strlen(text), &c, &err), 0);
	need = shoal__config_shm_bytes(c, NULL, (uint64_t)sysconf(_SC_PAGESIZE));
	shoal__config_free(c);
	snprintf(cmd, sizeof(cmd), "%s run --check %s > %s 2>&1", shoal_bin, cfg, chk);
	assert_int_equal(WEXITSTATUS(system(cmd)), 0);
	got = read_file(chk);
	if (strstr(got, "mem.yaml: system mem, 2 groups, 0 routes, 0 types, ") == NULL ||
	    strstr(got, " of shared memory (") == NULL || strstr(got, " free in ") == NULL)
		fail_msg("--check said: %s", got);
	free(got);
	run = start_run(cfg, out);
	expect_output(out, "group b: started", 10000);
	for (int i = 0; i < 500 && (!rt_group_pid("mem", "a") || !rt_group_pid("mem", "b")); i++)
		usleep(10000);
	snprintf(prefix, sizeof(prefix), "shoal.mem.");
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && stat(path, &st) == 0 &&
		    S_ISREG(st.st_mode))
			have += (uint64_t)st.st_size;
	}
	closedir(d);
	print_message("the router made %llu bytes of segments; --check counts %llu\n",
		      (unsigned long long)have, (unsigned long long)need);
	assert_int_equal(have, need);
	assert_int_equal(stop_run(run, SIGTERM), 0);
}

static void run_starts_over_leftovers_of_a_killed_router(void **state)
{
	const char *cfg = in_dir("left.yaml"), *out = in_dir("left.out"), *out2 = in_dir("left2.out");
	char text[1024];
	pid_t run, second;
	int status;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: left\ngroups:\n  - { name: a, program: %s, args: [--role, consumer] }\n",
		 group_bin);
	write_file(cfg, text);
	run = start_run(cfg, out);
	expect_output(out, "group a: started", 10000);
	for (int i = 0; i < 500 && !rt_group_pid("left", "a"); i++)
		usleep(10000);
	/* A second run of a live system is refused. */
	second = start_run(cfg, out2);
	status = test_wait_pid(second, 10000);
	assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 1);
	expect_output(out2, "already running", 0);
	/* Kill the router: its segments stay behind. */
	kill(run, SIGKILL);
	test_wait_pid(run, 5000);
	assert_true(count_system_files("left") > 0);
	run = start_run(cfg, out2);
	expect_output(out2, "group a: started", 10000);
	assert_int_equal(stop_run(run, SIGINT), 0);
	assert_int_equal(count_system_files("left"), 0);
}

/* ---- faults around the supervisor ------------------------------------------------- */

/* The fields of /proc/PID/stat after the command ("state ppid ..."), in
 * buf; NULL when the process is gone. */
static const char *stat_fields(pid_t pid, char *buf, size_t cap)
{
	char path[64], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return NULL;
	n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' && p[2] != '\0' ? p + 2 : NULL;
}

/* True once `pid` has ended (gone, or a zombie nobody reaped yet). */
static bool process_ended(pid_t pid)
{
	char buf[512];
	const char *f = stat_fields(pid, buf, sizeof(buf));

	return f == NULL || f[0] == 'Z' || f[0] == 'X';
}

static bool wait_ended(pid_t pid, int timeout_ms)
{
	for (int i = 0; i <= timeout_ms / 10; i++) {
		if (process_ended(pid))
			return true;
		usleep(10000);
	}
	return false;
}

/* CPU time (user + system) `pid` has used, in clock ticks. */
static uint64_t cpu_ticks(pid_t pid)
{
	unsigned long long ut = 0, st = 0;
	char buf[1024];
	const char *f = stat_fields(pid, buf, sizeof(buf));

	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime */
	if (f == NULL || sscanf(f, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &st) != 2)
		return 0;
	return ut + st;
}

/*
 * Wait up to 10 s for group `name` to have a process other than `old` (0:
 * any process) attached, reading its pid once a round: with two reads a
 * round, the pid could change between them (old to 0 as the router sees the
 * kill) and end the wait before the new process came. On failure, the
 * output of `shoal run` (file `out`, if not NULL) is printed.
 */
static void wait_pid_other_than(const char *system, const char *name, pid_t old,
				 const char *out)
{
	pid_t pid = 0;

	for (int i = 0; i < 1000; i++) {
		pid = rt_group_pid(system, name);
		if (pid > 0 && pid != old)
			return;
		usleep(10000);
	}
	if (out != NULL) {
		char *text = read_file(out);

		print_error("--- output of shoal run:\n%s---\n", text);
		free(text);
	}
	fail_msg("group %s: no process other than %d attached within 10 s (pid now %d)", name,
		 (int)old, (int)pid);
}

static void wait_attached(const char *system, const char *name, const char *out)
{
	wait_pid_other_than(system, name, 0, out);
}

/* Kill group `name`'s process and wait for a new one to attach. */
static void kill_and_see_restart(const char *system, const char *name, const char *out)
{
	pid_t victim = rt_group_pid(system, name);

	assert_true(victim > 0);
	kill(victim, SIGKILL);
	wait_pid_other_than(system, name, victim, out);
}

/* `shoal run` of system `system` with one group, a, of run_group's `role`
 * (always restarted, 50 ms backoff), its output in `out`: once a attached. */
static pid_t run_group_a(const char *system, const char *role, const char *out)
{
	char cfg[600], text[1024];
	pid_t run;

	snprintf(cfg, sizeof(cfg), "%s/%s.yaml", dir, system);
	snprintf(text, sizeof(text),
		 "system: %s\ngroups:\n  - name: a\n    program: %s\n    args: [--role, %s]\n"
		 "    restart: { policy: always, backoff: 50ms }\n", system, group_bin, role);
	write_file(cfg, text);
	run = start_run(cfg, out);
	expect_output(out, "group a: started", 10000);
	wait_attached(system, "a", out);
	return run;
}

/*
 * A same-user client registers a group, then floods requests and never
 * reads a reply. The router drops it once its replies fill the socket; the
 * supervisor keeps running: it restarts a killed group and stops on SIGINT.
 */
static void run_control_client_that_never_reads_cannot_freeze_it(void **state)
{
	const char *out = in_dir("flood.out");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct shoal__ctl_hello hello;
	struct shoal__ctl_unsub unsub;
	int fd, stalls = 0, status;
	unsigned sent = 0;
	pid_t run;

	(void)state;
	run = run_group_a("flood", "consumer", out);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(shoal__path_socket(sa.sun_path, sizeof(sa.sun_path), "flood"), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	memset(&hello, 0, sizeof(hello));
	shoal__ctl_init(&hello.h, SHOAL__CTL_HELLO, sizeof(hello));
	snprintf(hello.group, sizeof(hello.group), "flooder");
	hello.pid = (int32_t)getpid();
	hello.node = -1;
	assert_int_equal(send(fd, &hello, sizeof(hello), MSG_NOSIGNAL), (ssize_t)sizeof(hello));
	/* Requests for a route that does not exist: each one is answered. */
	memset(&unsub, 0, sizeof(unsub));
	shoal__ctl_init(&unsub.h, SHOAL__CTL_UNSUB, sizeof(unsub));
	unsub.id = 12345;
	while (sent < 1000000 && stalls < 200) {
		if (send(fd, &unsub, sizeof(unsub), MSG_NOSIGNAL | MSG_DONTWAIT) ==
		    (ssize_t)sizeof(unsub)) {
			sent++;
			stalls = 0;
		} else if (errno == EAGAIN) {
			stalls++;
			usleep(1000);
		} else {
			break;   /* dropped by the router */
		}
	}
	print_message("flooder: %u requests sent, then %s\n", sent,
		      stalls >= 200 ? "its socket stayed full" : strerror(errno));
	/* Still supervising: a killed group comes back... */
	kill_and_see_restart("flood", "a", out);
	expect_output(out, "restart 1 in 50 ms", 0);
	/* ... and SIGINT stops everything. */
	kill(run, SIGINT);
	status = test_wait_pid(run, 30000);
	close(fd);
	assert_int_not_equal(status, -1);
	assert_true(WIFEXITED(status));
	assert_int_equal(count_system_files("flood"), 0);
}

/*
 * `ulimit -n 64` and 31 groups: the router runs out of descriptors for
 * connections and the supervisor for pidfds. Neither may spin, each says
 * so, every process death is still seen, and SIGINT still stops it all.
 */
static void run_out_of_descriptors_says_so_and_still_sees_deaths(void **state)
{
	const char *cfg = in_dir("nofile.yaml"), *out = in_dir("nofile.out");
	char text[16384], name[16], line[64], *log;
	pid_t run, pids[31];
	uint64_t t0, t1;
	size_t len;
	int status, killed = 0;

	(void)state;
	len = (size_t)snprintf(text, sizeof(text), "system: nofile\ngroups:\n");
	for (int g = 0; g < 31; g++)
		len += (size_t)snprintf(text + len, sizeof(text) - len,
					"  - { name: g%d, program: %s, args: [--role, consumer], "
					"restart: { policy: never } }\n", g, group_bin);
	write_file(cfg, text);
	run = spawn_run(NULL, cfg, out, -1, 64);
	/* Under a sanitizer, forking from the instrumented, threaded router
	 * stalls now and then for over 15 s once it is out of descriptors
	 * (under TSan, about one run in 37): no report, the starts go on. */
	expect_output(out, "group g30: started", test_under_tool() ? 90000 : 20000);
	/* Every group either attached or ended, and each end was seen. */
	for (int g = 0; g < 31; g++) {
		bool settled = false;

		snprintf(name, sizeof(name), "g%d", g);
		snprintf(line, sizeof(line), "group g%d: exited", g);
		for (int i = 0; i < 2000 && !settled; i++) {
			settled = rt_group_pid("nofile", name) > 0 || wait_output(out, line, 0);
			if (!settled)
				usleep(10000);
		}
		if (!settled) {
			log = read_file(out);
			print_error("--- output of shoal run:\n%s---\n", log);
			free(log);
			fail_msg("group g%d neither attached nor was seen to end", g);
		}
	}
	expect_output(out, "Too many open files", 0);
	/* Not spinning: well under half a CPU over two seconds. */
	t0 = cpu_ticks(run);
	usleep(2000000);
	t1 = cpu_ticks(run);
	print_message("shoal run used %llu ticks of CPU in 2 s (%ld a second)\n",
		      (unsigned long long)(t1 - t0), sysconf(_SC_CLK_TCK));
	assert_true(t1 - t0 < (uint64_t)sysconf(_SC_CLK_TCK));
	/* Deaths of attached groups are seen, with or without a pidfd. */
	for (int g = 0; g < 31; g++) {
		snprintf(name, sizeof(name), "g%d", g);
		pids[g] = rt_group_pid("nofile", name);
		if (pids[g] > 0 && kill(pids[g], SIGKILL) == 0)
			killed++;
	}
	for (int g = 0; g < 31; g++) {
		if (pids[g] <= 0)
			continue;
		snprintf(line, sizeof(line), "group g%d: killed by signal 9", g);
		expect_output(out, line, 10000);
	}
	print_message("%d groups attached and were killed; every death was seen\n", killed);
	kill(run, SIGINT);
	status = test_wait_pid(run, 30000);
	assert_int_not_equal(status, -1);
	assert_true(WIFEXITED(status));
	assert_int_equal(count_system_files("nofile"), 0);
}

/*
 * kill -9 of `shoal run` while a producer is blocked in shoal_send() on a
 * full uplink, another one idles in shoal_poll() and a third waits in a
 * shoal_request() with no timeout: all notice that the router is gone and
 * exit, even though SIGTERM only sets a flag in them.
 */
static void run_groups_exit_when_their_router_is_killed(void **state)
{
	const char *cfg = in_dir("orphan.yaml"), *out = in_dir("orphan.out");
	char text[2048];
	pid_t run, consumer, blocked, idle, asker;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: orphan\n"
		 "router: { inbound_capacity: 64KiB, uplink_capacity: 64KiB }\n"
		 "types:\n  - { id: 3, name: work, max_size: 64 }\n"
		 "groups:\n"
		 "  - name: consumer\n    program: %s\n    args: [--role, consumer]\n"
		 "    routes: [ { types: [work] } ]\n"
		 "  - name: blocked\n    program: %s\n"
		 "    args: [--role, producer, --trap-term, --n, \"1000000000\"]\n"
		 "  - name: idle\n    program: %s\n    args: [--role, producer, --trap-term, --n, \"0\"]\n"
		 "  - name: asker\n    program: %s\n"
		 "    args: [--role, asker, --trap-term, --to, consumer]\n",
		 group_bin, group_bin, group_bin, group_bin);
	write_file(cfg, text);
	run = start_run(cfg, out);
	wait_attached("orphan", "consumer", out);
	wait_attached("orphan", "blocked", out);
	wait_attached("orphan", "idle", out);
	consumer = rt_group_pid("orphan", "consumer");
	blocked = rt_group_pid("orphan", "blocked");
	wait_attached("orphan", "asker", out);
	idle = rt_group_pid("orphan", "idle");
	asker = rt_group_pid("orphan", "asker");
	/* A stopped consumer: its rings fill, then the uplink, then the
	 * producer blocks in shoal_send(). */
	kill(consumer, SIGSTOP);
	usleep(1000000);
	kill(run, SIGKILL);
	test_wait_pid(run, 5000);
	if (!wait_ended(blocked, 10000) || !wait_ended(idle, 10000) || !wait_ended(asker, 10000)) {
		kill(blocked, SIGKILL);
		kill(idle, SIGKILL);
		kill(asker, SIGKILL);
		kill(consumer, SIGKILL);
		fail_msg("a group outlived its router by 10 s (blocked: %s, idle: %s, asker: %s)",
			 process_ended(blocked) ? "ended" : "alive",
			 process_ended(idle) ? "ended" : "alive",
			 process_ended(asker) ? "ended" : "alive");
	}
	kill(consumer, SIGKILL);
	kill(consumer, SIGCONT);
}

/* stdout is a pipe whose reader goes away: `shoal run` keeps supervising
 * (a killed group is restarted), stops on SIGINT and removes everything. */
static void run_survives_its_output_reader_going_away(void **state)
{
	const char *cfg = in_dir("pipe.yaml");
	char text[1024], buf[4096] = "";
	size_t got = 0;
	pid_t run, dup;
	int p[2], status;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: pipe\ngroups:\n  - name: a\n    program: %s\n    args: [--role, consumer]\n"
		 "    restart: { policy: always, backoff: 50ms }\n", group_bin);
	write_file(cfg, text);
	assert_int_equal(pipe(p), 0);
	run = spawn_run(NULL, cfg, NULL, p[1], 0);
	close(p[1]);
	while (got < sizeof(buf) - 1 && strstr(buf, "group a: started") == NULL) {
		ssize_t n = read(p[0], buf + got, sizeof(buf) - 1 - got);

		assert_true(n > 0);
		got += (size_t)n;
		buf[got] = '\0';
	}
	close(p[0]);
	wait_attached("pipe", "a", NULL);
	kill_and_see_restart("pipe", "a", NULL);
	/* A group whose output is gone, refused (a is running), says so into
	 * the void and exits 1: the write does not kill it. */
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	dup = fork();
	assert_true(dup >= 0);
	if (dup == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		signal(SIGPIPE, SIG_DFL);
		setenv("SHOAL_SYSTEM", "pipe", 1);
		setenv("SHOAL_GROUP", "a", 1);
		execl(group_bin, "run_group", "--role", "consumer", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	status = test_wait_pid(dup, 30000);
	assert_int_not_equal(status, -1);
	if (WIFSIGNALED(status))
		fail_msg("the refused group was killed by signal %d", WTERMSIG(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	kill(run, SIGINT);
	status = test_wait_pid(run, 30000);
	assert_int_not_equal(status, -1);
	if (WIFSIGNALED(status))
		fail_msg("shoal run was killed by signal %d", WTERMSIG(status));
	assert_int_equal(count_system_files("pipe"), 0);
}

/*
 * Events that cannot reach a closed standard output go to standard error,
 * after one line that says so: why and how the system stops is still told.
 */
static void run_tells_its_events_on_stderr_once_stdout_is_gone(void **state)
{
	const char *cfg = in_dir("noout.yaml"), *err = in_dir("noout.err");
	char text[1024], *log;
	pid_t run;
	int p[2], status;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: noout\ngroups:\n  - name: a\n    program: %s\n    args: [--role, consumer]\n",
		 group_bin);
	write_file(cfg, text);
	assert_int_equal(pipe(p), 0);
	close(p[0]);   /* nobody will ever read it */
	fflush(NULL);
	run = fork();
	assert_true(run >= 0);
	if (run == 0) {
		int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(p[1], 1);
		dup2(fd, 2);
		close_range(3, ~0u, 0);
		signal(SIGPIPE, SIG_DFL);
		execl(shoal_bin, "shoal", "run", "--status", "plain", "--duration", "2", cfg,
		      (char *)NULL);
		_exit(127);
	}
	started[n_started++ % 16] = run;
	close(p[1]);
	status = test_wait_pid(run, 30000);
	assert_int_not_equal(status, -1);
	if (WIFSIGNALED(status))
		fail_msg("shoal run was killed by signal %d", WTERMSIG(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	log = read_file(err);
	assert_non_null(strstr(log, "standard output is closed"));
	assert_non_null(strstr(log, "stopping: the requested duration has passed"));
	assert_non_null(strstr(log, "group a: exited with status 0"));
	free(log);
	assert_int_equal(count_system_files("noout"), 0);
}

/*
 * A reader of shoal run's output that stops reading (`shoal run FILE |
 * (sleep 1000)`) blocks only the thread that writes it. With the pipe and
 * the queue full, a killed group is restarted and SIGTERM stops the system;
 * once the reader reads again, what was queued comes, then a line that
 * counts the lines that found no room.
 */
static void run_slow_reader_of_its_output_cannot_stall_it(void **state)
{
	const char *cfg = in_dir("slow.yaml"), *done = in_dir("slow.done");
	size_t cap = 1 << 20, got = 0;
	char text[1200], *all = malloc(cap + 1);
	pid_t run;
	int p[2], status;

	(void)state;
	assert_non_null(all);
	/* chatty prints 4 MB, more than the pipe and the queue hold, then
	 * makes the file `done`. */
	snprintf(text, sizeof(text),
		 "system: slow\ngroups:\n  - name: a\n    program: %s\n    args: [--role, consumer]\n"
		 "    restart: { policy: always, backoff: 50ms }\n"
		 "  - name: chatty\n    program: /bin/sh\n"
		 "    args: [-c, \"yes line | head -c 4000000; touch %s; exec sleep 1000\"]\n"
		 "    restart: { policy: never }\n    stop: { timeout: 200ms }\n", group_bin, done);
	write_file(cfg, text);
	assert_int_equal(pipe(p), 0);
	run = spawn_run(NULL, cfg, NULL, p[1], 0);
	close(p[1]);
	for (int i = 0; i < 6000 && access(done, F_OK) != 0; i++)
		usleep(10000);
	assert_int_equal(access(done, F_OK), 0);
	wait_attached("slow", "a", NULL);
	kill_and_see_restart("slow", "a", NULL);
	/* Stopped, its shared memory removed, while nobody reads. */
	kill(run, SIGTERM);
	for (int i = 0; i < 3000 && count_system_files("slow") > 0; i++)
		usleep(10000);
	assert_int_equal(count_system_files("slow"), 0);
	for (int i = 0; i < 600; i++) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		ssize_t n;

		if (poll(&pf, 1, 100) <= 0)
			continue;
		if (got == cap) {
			cap *= 2;
			all = realloc(all, cap + 1);
			assert_non_null(all);
		}
		n = read(p[0], all + got, cap - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	all[got] = '\0';
	status = test_wait_pid(run, 30000);
	assert_int_not_equal(status, -1);
	/* 1: chatty, which never attaches, was killed past its stop timeout. */
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_has(all, "chatty | line\n");
	assert_has(all, " lines of output dropped: the reader of shoal run's output is too slow\n");
	free(all);
}

/*
 * A group killed while a child it forked still holds its control
 * connection: the router sees no hang-up, yet the restarted process must
 * attach, since the router can tell the old one is dead.
 */
static void run_restart_attaches_while_a_dead_groups_connection_is_held(void **state)
{
	const char *out = in_dir("held.out");
	pid_t run;

	(void)state;
	run = run_group_a("held", "holder", out);
	expect_output(out, "holds the connection", 10000);
	kill_and_see_restart("held", "a", out);
	expect_output(out, "its connection dropped", 10000);
	assert_int_equal(stop_run(run, SIGINT), 0);
	assert_int_equal(count_system_files("held"), 0);
}

/* SIGINT while a consumer is stopped (SIGSTOP): it cannot drain, is killed
 * at its stop timeout, and what it left queued is counted and said. */
/*
 * A consumer that stops taking (SIGSTOP) with the producer blocked behind
 * it: its mailbox and the producer's uplink are full when SIGINT comes, the
 * consumer is killed at its timeout, and every message the producer sent is
 * either in the consumer's log or counted lost_queued (its mailbox's, and
 * what the uplink held unrouted).
 */
static void run_messages_stranded_at_sigint_are_counted(void **state)
{
	const char *cfg = in_dir("strand.yaml"), *out = in_dir("strand.out");
	const char *log = in_dir("strand.log");
	const char *said = "messages were still queued for groups that stopped without "
			   "draining them, or unrouted from them: counted as lost";
	unsigned long long sent, lost;
	char text[2048], *got, *p;
	pid_t run, consumer;
	uint64_t logged;
	int status;

	(void)state;
	unlink(log);
	snprintf(text, sizeof(text),
		 "system: strand\n"
		 "types:\n  - { id: 3, name: work, max_size: 64 }\n"
		 "groups:\n"
		 "  - name: consumer\n    program: %s\n    args: [--role, consumer, --log, %s]\n"
		 "    routes: [ { types: [work] } ]\n    stop: { timeout: 300ms }\n"
		 "  - name: producer\n    program: %s\n"
		 "    args: [--role, producer, --n, \"1000000\", --rate, \"20000\"]\n",
		 group_bin, log, group_bin);
	write_file(cfg, text);
	run = start_run(cfg, out);
	wait_attached("strand", "consumer", out);
	wait_attached("strand", "producer", out);
	consumer = rt_group_pid("strand", "consumer");
	kill(consumer, SIGSTOP);
	/* 20 000 a second fills the consumer's mailbox, then the uplink
	 * (256 KiB each, some 3 300 records) in a third of a second, then
	 * the producer waits. */
	sleep(2);
	kill(run, SIGINT);
	status = test_wait_pid(run, 30000);
	kill(consumer, SIGCONT);
	assert_int_not_equal(status, -1);
	assert_true(WIFEXITED(status));
	got = read_file(out);
	p = strstr(got, "producer: sent ");
	assert_non_null(p);
	sent = strtoull(p + strlen("producer: sent "), NULL, 10);
	p = strstr(got, said);
	assert_non_null(p);
	while (p > got && p[-1] != ']' && p[-1] != '|')
		p--;
	lost = strtoull(p, NULL, 10);
	free(got);
	logged = count_unique(log, 3, 1000000);
	print_message("stranded: %llu sent, %llu handled, %llu counted lost\n", sent,
		      (unsigned long long)logged, lost);
	/* Every message once, but those of the batch the consumer had
	 * taken when it was stopped: handled, and counted as still queued
	 * since it was never released. */
	assert_true(logged + lost >= sent);
	assert_true(logged + lost <= sent + 64);
	assert_true(lost > 4000);   /* more than the mailbox holds: the uplink's too */
	assert_int_equal(count_system_files("strand"), 0);
}

/* ---- operating a system: --name, output, lifecycle ----------------------------------------- */

/*
 * One file, run twice: once under its own name, once with --name. Both run
 * side by side, each group process is told its system's name, the tools
 * address the second by its new name, and a SIGHUP reloads it under that
 * name (the file's own name is not a change).
 */
static void run_name_runs_one_file_twice_side_by_side(void **state)
{
	const char *cfg = in_dir("twice.yaml"), *out = in_dir("twice.out");
	const char *out2 = in_dir("twice2.out");
	const char *const opts[] = { "--name", "twice-b", NULL };
	struct tool_run t;
	char text[1024];
	pid_t run, run2;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: twice\ngroups:\n  - name: a\n    program: %s\n    args: [--role, consumer]\n",
		 group_bin);
	write_file(cfg, text);
	run = start_run(cfg, out);
	wait_attached("twice", "a", out);
	run2 = spawn_run(opts, cfg, out2, -1, 0);
	expect_output(out2, "system twice-b: router pid", 10000);
	wait_attached("twice-b", "a", out2);
	assert_int_not_equal(rt_group_pid("twice", "a"), rt_group_pid("twice-b", "a"));
	tool_expect(&t, 0, (const char *const[]){ "stat", "twice-b", NULL });
	assert_has(t.out, "twice-b");
	tool_free(&t);
	kill(run2, SIGHUP);
	expect_output(out2, "reload: 0 routes published", 10000);
	assert_int_equal(stop_run(run2, SIGTERM), 0);
	assert_int_equal(count_system_files("twice-b"), 0);
	assert_true(count_system_files("twice") > 0);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	assert_int_equal(count_system_files("twice"), 0);
}

/*
 * Group output: one pipe per process for stdout and stderr, every line
 * passed on after the group's name (padded to the longest), a line longer
 * than 4096 bytes cut with a mark and its rest dropped, a last line without
 * a newline passed on when the process ends, before the news of its end.
 */
static const char *config_talkers(const char *system)
{
	static char text[2048];

	snprintf(text, sizeof(text),
		 "system: %s\ngroups:\n"
		 "  - name: talker\n    program: /bin/sh\n"
		 "    args: [-c, \"echo out line; echo err line >&2; head -c 5000 /dev/zero | "
		 "tr '\\\\0' x; echo TAIL; echo after; printf 'no newline'\"]\n"
		 "    restart: { policy: never }\n"
		 "  - name: b\n    program: /bin/sh\n    args: [-c, \"echo hello from b\"]\n"
		 "    restart: { policy: never }\n", system);
	return text;
}

static void run_group_output_is_prefixed_by_line(void **state)
{
	const char *cfg = in_dir("talk.yaml"), *out = in_dir("talk.out");
	char *text, *cut, *last, *ended;
	pid_t run;

	(void)state;
	write_file(cfg, config_talkers("talk"));
	run = start_run(cfg, out);
	expect_output(out, "group talker: exited with status 0", 10000);
	expect_output(out, "group b: exited with status 0", 10000);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	text = read_file(out);
	assert_has(text, "talker | out line\n");
	assert_has(text, "talker | err line\n");
	assert_has(text, "b      | hello from b\n");
	assert_has(text, "talker | after\n");
	cut = strstr(text, "talker | xxxx");
	assert_non_null(cut);
	assert_true(strncmp(cut + 9 + 4096, " [cut: line longer than 4096 bytes]\n", 36) == 0);
	assert_lacks(text, "TAIL");
	last = strstr(text, "talker | no newline\n");
	ended = strstr(text, "group talker: exited");
	assert_non_null(last);
	assert_true(last < ended);
	free(text);
}

/*
 * Start system `system` of one group of its name running `sh -c script`,
 * with `extra` (YAML lines) in its entry, its output in `out`.
 */
static pid_t start_sh(const char *system, const char *script, const char *extra,
		      const char *out)
{
	char cfg[600], text[1024];

	snprintf(cfg, sizeof(cfg), "%s/%s.yaml", dir, system);
	snprintf(text, sizeof(text),
		 "system: %s\ngroups:\n  - name: %s\n    program: /bin/sh\n"
		 "    args: [-c, \"%s\"]\n%s", system, system, script, extra);
	write_file(cfg, text);
	return start_run(cfg, out);
}

/* A group that prints fast: every line is passed on, nothing blocks. */
static void run_passes_on_every_line_of_a_chatty_group(void **state)
{
	const char *out = in_dir("chatty.out");
	char *log;
	pid_t run;

	(void)state;
	run = start_sh("chatty", "yes line | head -n 100000", "    restart: { policy: never }\n",
		       out);
	expect_output(out, "group chatty: exited with status 0", 60000);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	log = read_file(out);
	assert_int_equal(count_of(log, "chatty | line\n"), 100000);
	free(log);
}

/*
 * --log-dir: each group's lines go to DIR/GROUP.log (0600, DIR made 0700),
 * after the UTC time, appended to by the next run; not to the output.
 */
static void run_log_dir_writes_each_groups_file(void **state)
{
	const char *cfg = in_dir("logd.yaml"), *logs = in_dir("logs");
	const char *talker = in_dir("logs/talker.log");
	const char *const opts[] = { "--log-dir", logs, NULL };
	struct stat st;
	char *text;
	pid_t run;

	(void)state;
	write_file(cfg, config_talkers("logd"));
	for (int round = 1; round <= 2; round++) {
		const char *out = in_dir(round == 1 ? "logd1.out" : "logd2.out");

		run = spawn_run(opts, cfg, out, -1, 0);
		expect_output(out, "group talker: exited", 10000);
		expect_output(out, "group b: exited", 10000);
		assert_int_equal(stop_run(run, SIGTERM), 0);
		text = read_file(out);
		assert_lacks(text, "out line");
		free(text);
	}
	assert_int_equal(stat(logs, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(stat(talker, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	text = read_file(talker);
	assert_int_equal(count_of(text, "Z out line\n"), 2);
	assert_int_equal(count_of(text, "Z no newline\n"), 2);
	assert_true(text[4] == '-' && text[10] == 'T' && text[23] == 'Z');
	free(text);
	text = read_file(in_dir("logs/b.log"));
	assert_int_equal(count_of(text, "Z hello from b\n"), 2);
	free(text);
}

static void run_log_dir_that_is_a_file_is_refused(void **state)
{
	const char *cfg = in_dir("logf.yaml"), *file = in_dir("logf.out");
	struct tool_run t;

	(void)state;
	write_file(cfg, config_talkers("logf"));
	write_file(file, "");
	tool_expect(&t, 1, (const char *const[]){ "run", "--log-dir", file, cfg, NULL });
	assert_has(t.err, "not a directory");
	tool_free(&t);
	assert_int_equal(count_system_files("logf"), 0);
}

/* `shoal ARGS...`, requiring exit `code`; returns what it printed on stdout
 * (or, failing, on stderr), to free. */
static char *shoal_says(int code, const char *const *args)
{
	struct tool_run t;
	char *said;

	tool_expect(&t, code, args);
	said = strdup(code == 0 ? t.out : t.err);
	tool_free(&t);
	return said;
}

/* `shoal ARGS...`, requiring exit `code` and `needle` in what it printed. */
static void says(int code, const char *needle, const char *const *args)
{
	char *said = shoal_says(code, args);

	assert_has(said, needle);
	free(said);
}

/*
 * Lifecycle over the control socket: a group stopped on request stays
 * stopped (its policy is always; the tools say so, and exit 0) until
 * `shoal restart`; a restart of a running group replaces its process; an
 * unknown group and a refused file are errors; `shoal stop SYSTEM` returns
 * once the system is gone.
 */
static void run_stop_restart_reload_over_the_control_socket(void **state)
{
	const char *cfg = in_dir("lc.yaml"), *out = in_dir("lc.out");
	char text[1024], *said;
	struct tool_run t;
	pid_t run, b;
	int status;

	(void)state;
	snprintf(text, sizeof(text),
		 "system: lc\ngroups:\n"
		 "  - name: a\n    program: %s\n    args: [--role, consumer]\n"
		 "    restart: { policy: always, backoff: 50ms }\n"
		 "  - name: b\n    program: %s\n    args: [--role, consumer]\n",
		 group_bin, group_bin);
	write_file(cfg, text);
	run = start_run(cfg, out);
	wait_attached("lc", "a", out);
	wait_attached("lc", "b", out);
	says(0, "group a stopped: its process exited with status 0; it stays stopped",
	     (const char *const[]){ "stop", "lc", "a", NULL });
	/* Its departure reaches the registry as the router sees it leave. */
	for (int i = 0; i < 1000 && rt_group_pid("lc", "a") != 0; i++)
		usleep(10000);
	assert_int_equal(rt_group_pid("lc", "a"), 0);
	expect_output(out, "group a: stopping (asked by shoal stop)", 0);
	/* Not restarted, whatever its policy: well past its backoff, still down. */
	usleep(500000);
	assert_int_equal(rt_group_pid("lc", "a"), 0);
	expect_count(out, "group a: started", 1, 0);
	/* Shown stopped, not down, and no failure: the tools exit 0. */
	said = shoal_says(0, (const char *const[]){ "stat", "--json", "lc", NULL });
	assert_has(said, "\"state\": \"stopped\"");
	assert_has(said, "\"groups_stopped\": 1");
	assert_has(said, "\"groups_failed\": 0");
	free(said);
	says(0, "stopped", (const char *const[]){ "stat", "lc", NULL });
	says(0, "\"groups_stopped\": 1", (const char *const[]){ "ls", "--json", NULL });
	says(0, "group a was not running (stopped on request)",
	     (const char *const[]){ "stop", "lc", "a", NULL });
	says(0, "group a started: pid", (const char *const[]){ "restart", "lc", "a", NULL });
	wait_attached("lc", "a", out);
	said = shoal_says(0, (const char *const[]){ "stat", "--json", "lc", NULL });
	assert_lacks(said, "\"state\": \"stopped\"");
	free(said);
	b = rt_group_pid("lc", "b");
	said = shoal_says(0, (const char *const[]){ "restart", "--json", "lc", "b", NULL });
	assert_json_documents(said, 1, false);
	assert_has(said, "\"command\": \"restart\"");
	assert_has(said, "group b restarted: pid");
	free(said);
	wait_pid_other_than("lc", "b", b, out);
	says(1, "system lc has no group 'nope' (its groups: a, b)",
	     (const char *const[]){ "restart", "lc", "nope", NULL });
	says(0, "system lc reloaded: 2 groups, 0 routes published",
	     (const char *const[]){ "reload", "lc", NULL });
	said = shoal_says(0, (const char *const[]){ "reload", "--json", "lc", NULL });
	assert_json_documents(said, 1, false);
	assert_has(said, "\"group\": null");
	assert_has(said, "\"message\": \"system lc reloaded: 2 groups");
	free(said);
	write_file(cfg, "system: lc\ngroups: []\n");
	said = shoal_says(1, (const char *const[]){ "reload", "lc", NULL });
	assert_has(said, "reload refused, nothing changed");
	assert_has(said, "groups is empty");
	free(said);
	/* Under --json the refusal is the error document, on stdout. */
	tool_expect(&t, 1, (const char *const[]){ "reload", "--json", "lc", NULL });
	assert_json_error(t.out, 1, "reload refused, nothing changed");
	assert_has(t.out, "\"errno\": \"EINVAL\"");
	assert_int_equal(t.err[0], '\0');
	tool_free(&t);
	said = shoal_says(0, (const char *const[]){ "stop", "--json", "lc", NULL });
	assert_json_documents(said, 1, false);
	assert_has(said, "\"message\": \"system lc stopped\"");
	assert_has(said, "\"supervisor_pid\": ");
	free(said);
	/* Answered once everything was removed. */
	assert_int_equal(count_system_files("lc"), 0);
	status = test_wait_pid(run, 30000);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	expect_output(out, "stopping: asked by shoal stop", 0);
	says(3, "system lc is not running", (const char *const[]){ "stop", "lc", NULL });
}

/*
 * A group that ignores the stop request is killed at its stop timeout; the
 * answer says so. Its output keeps flowing meanwhile.
 */
static void run_stop_kills_a_group_past_its_timeout(void **state)
{
	const char *out = in_dir("deaf.out");
	pid_t run;

	(void)state;
	run = start_sh("deaf", "echo deaf up; exec sleep 60", "    stop: { timeout: 200ms }\n", out);
	expect_output(out, "deaf | deaf up", 10000);
	says(0, "group deaf stopped: its process killed by signal 9",
	     (const char *const[]){ "stop", "deaf", "deaf", NULL });
	expect_output(out, "group deaf: did not stop within 200 ms; killing it", 0);
	says(0, "group deaf started", (const char *const[]){ "restart", "deaf", "deaf", NULL });
	expect_count(out, "deaf | deaf up", 2, 10000);
	says(0, "group deaf restarted: pid",
	     (const char *const[]){ "restart", "deaf", "deaf", NULL });
	assert_int_equal(stop_run(run, SIGTERM), 1);   /* the last one is killed again */
	assert_int_equal(count_system_files("deaf"), 0);
}

/*
 * A stop that reaches a group before its process attached (here it is
 * killed at the stop timeout before it ever does) is withdrawn by `shoal
 * restart`: the next process attaches and keeps running, instead of
 * finding the old stop request and leaving at once.
 */
static void run_restart_after_a_stop_before_attach_runs(void **state)
{
	const char *out = in_dir("early.out");
	char script[512];
	pid_t run, pid;

	(void)state;
	snprintf(script, sizeof(script), "echo early up; sleep 2; exec %s --role consumer",
		 group_bin);
	run = start_sh("early", script, "    stop: { timeout: 200ms }\n", out);
	expect_output(out, "early | early up", 10000);
	says(0, "group early stopped: its process killed by signal 9",
	     (const char *const[]){ "stop", "early", "early", NULL });
	says(0, "stopped", (const char *const[]){ "stat", "early", NULL });
	says(0, "group early started", (const char *const[]){ "restart", "early", "early", NULL });
	wait_attached("early", "early", out);
	pid = rt_group_pid("early", "early");
	usleep(500000);
	assert_int_equal(rt_group_pid("early", "early"), pid);
	expect_count(out, "group early: exited", 0, 0);
	assert_int_equal(stop_run(run, SIGTERM), 0);
	assert_int_equal(count_system_files("early"), 0);
}

/* A group with `cpus: "1"` runs on CPU 1 only: asked of its real process. */
static void run_group_is_pinned_to_its_cpus(void **state)
{
	const char *cfg = in_dir("pin.yaml"), *out = in_dir("pin.out");
	size_t size = CPU_ALLOC_SIZE(SHOAL__CPUS_MAX);
	cpu_set_t *set;
	char text[1024];
	pid_t run, pid;

	(void)state;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		skip();
	snprintf(text, sizeof(text),
		 "system: pin\ngroups:\n  - name: a\n    program: %s\n"
		 "    args: [--role, consumer]\n    cpus: \"1\"\n", group_bin);
	write_file(cfg, text);
	run = start_run(cfg, out);
	wait_attached("pin", "a", out);
	pid = rt_group_pid("pin", "a");
	set = CPU_ALLOC(SHOAL__CPUS_MAX);
	assert_non_null(set);
	assert_int_equal(sched_getaffinity(pid, size, set), 0);
	assert_int_equal(CPU_COUNT_S(size, set), 1);
	assert_true(CPU_ISSET_S(1, size, set));
	CPU_FREE(set);
	assert_int_equal(stop_run(run, SIGTERM), 0);
}

/* Connect to system `system`'s control socket and send it one ADMIN. */
static int send_admin(const char *system, uint32_t what, const char *group)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct shoal__ctl_admin m;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(shoal__path_socket(sa.sun_path, sizeof(sa.sun_path), system), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	memset(&m, 0, sizeof(m));
	shoal__ctl_init(&m.h, SHOAL__CTL_ADMIN, sizeof(m));
	m.what = what;
	snprintf(m.group, sizeof(m.group), "%s", group);
	assert_int_equal(send(fd, &m, sizeof(m), MSG_NOSIGNAL), (ssize_t)sizeof(m));
	return fd;
}

/*
 * Clients that go away: one asks for a restart and closes before the
 * answer, another asks for a stop and never reads. The supervisor neither
 * dies (SIGPIPE) nor waits on them: both are carried out, and the next
 * request is served.
 */
static void run_lifecycle_clients_that_go_away_cannot_hurt_it(void **state)
{
	const char *out = in_dir("away.out");
	pid_t run;
	int fd;

	(void)state;
	run = run_group_a("away", "consumer", out);
	close(send_admin("away", SHOAL__ADMIN_RESTART, "a"));
	expect_count(out, "group a: started", 2, 10000);
	fd = send_admin("away", SHOAL__ADMIN_STOP, "a");
	expect_count(out, "group a: exited", 2, 10000);
	says(0, "group a started", (const char *const[]){ "restart", "away", "a", NULL });
	close(fd);
	wait_attached("away", "a", out);
	assert_int_equal(stop_run(run, SIGINT), 0);
	assert_int_equal(count_system_files("away"), 0);
}

/*
 * `shoal logs` reads the files of --log-dir, found through the running
 * supervisor or named: merged by time, one group, the last lines, JSON;
 * -f follows until the system stops. Without --log-dir, there is nothing
 * to read; once the system is gone, the folder must be named.
 */
static void run_logs_reads_the_groups_log_files(void **state)
{
	const char *cfg = in_dir("lg.yaml"), *out = in_dir("lg.out"), *logs = in_dir("lglogs");
	const char *const opts[] = { "--log-dir", logs, NULL };
	struct tool_run follow;
	struct stat st;
	char *said;
	pid_t run;
	int status;

	(void)state;
	write_file(cfg, config_talkers("lg"));
	run = spawn_run(opts, cfg, out, -1, 0);
	expect_output(out, "group talker: exited", 10000);
	expect_output(out, "group b: exited", 10000);
	said = shoal_says(0, (const char *const[]){ "logs", "lg", NULL });
	assert_has(said, "talker | out line\n");
	assert_has(said, "b      | hello from b\n");
	assert_true(strstr(said, "talker | out line") < strstr(said, "talker | err line"));
	assert_has(said, "talker | no newline\n");
	free(said);
	said = shoal_says(0, (const char *const[]){ "logs", "--tail", "1", "-t", "lg", "talker",
						    NULL });
	assert_int_equal(count_of(said, "\n"), 1);
	assert_has(said, "Z no newline\n");
	assert_lacks(said, "b ");
	free(said);
	said = shoal_says(0, (const char *const[]){ "logs", "--json", "lg", "b", NULL });
	assert_int_equal(assert_json_documents(said, 1, true), 1);
	assert_has(said, "Z\", \"line\": ");   /* "written": the line's time */
	assert_has(said, "\"group\": \"b\"");
	assert_has(said, "\"line\": \"hello from b\"");
	free(said);
	says(1, "nope.log", (const char *const[]){ "logs", "lg", "nope", NULL });
	/* -f: a restarted group's new lines come; the system's stop ends it. */
	tool_start(&follow, (const char *const[]){ "logs", "-f", "lg", "b", NULL });
	/* Following once it printed the file so far. */
	for (int i = 0; i < 1000 && fstat(fileno(follow.out_f), &st) == 0 && st.st_size == 0; i++)
		usleep(10000);
	assert_true(st.st_size > 0);
	free(shoal_says(0, (const char *const[]){ "restart", "lg", "b", NULL }));
	expect_count(in_dir("lglogs/b.log"), "hello from b", 2, 10000);
	free(shoal_says(0, (const char *const[]){ "stop", "lg", NULL }));
	tool_finish(&follow, 0);
	assert_int_equal(count_of(follow.out, "b | hello from b\n"), 2);
	tool_free(&follow);
	status = test_wait_pid(run, 30000);
	assert_true(WIFEXITED(status));
	says(3, "name their folder with --log-dir", (const char *const[]){ "logs", "lg", NULL });
	said = shoal_says(0, (const char *const[]){ "logs", "--log-dir", logs, "lg", "b", NULL });
	assert_int_equal(count_of(said, "b | hello from b\n"), 2);
	free(said);
	/* The same system without --log-dir: its output has no files. */
	run = start_run(cfg, in_dir("lg2.out"));
	expect_output(in_dir("lg2.out"), "group b: exited", 10000);
	says(1, "system lg writes no log files", (const char *const[]){ "logs", "lg", NULL });
	assert_int_equal(stop_run(run, SIGTERM), 0);
}

/*
 * Another user may not stop, restart or reload the system: the router
 * checks the caller's credentials. The folder and socket are opened to
 * others by hand (the router never would), so that the check, not a file
 * mode, is what refuses it.
 */
static void run_lifecycle_of_another_user_is_refused(void **state)
{
	const char *out = in_dir("uid.out"), *err = in_dir("uid.err");
	struct passwd *pw = getpwnam("nobody");
	char sock[PATH_MAX], *said;
	pid_t run, a, tool;
	int status;

	(void)state;
	if (geteuid() != 0 || pw == NULL)
		skip();
	run = run_group_a("uid", "consumer", out);
	a = rt_group_pid("uid", "a");
	assert_int_equal(shoal__path_socket(sock, sizeof(sock), "uid"), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(chmod(sock, 0666), 0);
	fflush(NULL);
	tool = fork();
	assert_true(tool >= 0);
	if (tool == 0) {
		int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 1);
		dup2(fd, 2);
		if (setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
			_exit(99);
		execl(shoal_bin, "shoal", "stop", "uid", "a", (char *)NULL);
		_exit(127);
	}
	status = test_wait_pid(tool, 20000);
	assert_int_equal(chmod(dir, 0700), 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 3);
	said = read_file(err);
	assert_has(said, "may not attach to system uid");
	free(said);
	assert_int_equal(rt_group_pid("uid", "a"), a);
	assert_int_equal(stop_run(run, SIGINT), 0);
}

/* --check --name: the file checked under the other name, whose segment
 * names must fit too. */
/* The next notification on the datagram socket `fd`, within 10 s. */
static void next_notification(int fd, char *buf, size_t cap, const char *out)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&pfd, 1, 10000) != 1) {
		char *text = read_file(out);

		print_error("--- output of shoal run:\n%s---\n", text);
		free(text);
		fail_msg("no notification within 10 s");
	}
	n = recv(fd, buf, cap - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
}

/*
 * Whether this shoal was built with an optional part, as tests/meson.build
 * tells through `env` ("1" or "0"); says SKIP when not, and the case skips.
 */
static bool built_with(const char *env, const char *what)
{
	const char *have = getenv(env);

	if (have != NULL && strcmp(have, "1") == 0)
		return true;
	print_message("SKIP: built without %s\n", what);
	return false;
}

/*
 * Under systemd (NOTIFY_SOCKET names a socket the test listens on, as
 * systemd's for a unit of Type=notify): READY=1 once every group is up,
 * RELOADING=1 then READY=1 around `shoal reload`, STOPPING=1 on `shoal
 * stop`. Skips when this shoal was built without libsystemd.
 */
static void run_notifies_systemd_when_ready_reloading_and_stopping(void **state)
{
	const char *cfg = in_dir("sd.yaml"), *out = in_dir("sd.out"), *sock = in_dir("sd.sock");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char text[1024], note[512];
	pid_t run;
	int fd, status;

	(void)state;
	if (!built_with("SHOAL_HAVE_SYSTEMD", "libsystemd"))
		skip();
	snprintf(text, sizeof(text),
		 "system: sd\ngroups:\n"
		 "  - name: a\n    program: %s\n    args: [--role, consumer]\n"
		 "  - name: b\n    program: %s\n    args: [--role, consumer]\n",
		 group_bin, group_bin);
	write_file(cfg, text);
	assert_true(strlen(sock) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, sock);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NOTIFY_SOCKET", sock, 1);
	run = start_run(cfg, out);
	unsetenv("NOTIFY_SOCKET");

	next_notification(fd, note, sizeof(note), out);
	assert_has(note, "READY=1\n");
	assert_has(note, "STATUS=system sd: 2 of 2 groups running");
	/* Told once both had attached, not merely been started. */
	assert_true(rt_group_pid("sd", "a") > 0);
	assert_true(rt_group_pid("sd", "b") > 0);

	says(0, "system sd reloaded", (const char *const[]){ "reload", "sd", NULL });
	next_notification(fd, note, sizeof(note), out);
	assert_has(note, "RELOADING=1\n");
	assert_has(note, "MONOTONIC_USEC=");
	next_notification(fd, note, sizeof(note), out);
	assert_has(note, "READY=1\nSTATUS=reloaded");

	says(0, "system sd stopped", (const char *const[]){ "stop", "sd", NULL });
	next_notification(fd, note, sizeof(note), out);
	assert_has(note, "STOPPING=1\n");
	status = test_wait_pid(run, 30000);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(fd);
	unlink(sock);
}

static void run_check_with_name_checks_the_names_it_makes(void **state)
{
	const char *cfg = in_dir("named.yaml");
	char text[256];

	(void)state;
	snprintf(text, sizeof(text), "system: s\ngroups:\n  - name: %s\n    program: /bin/true\n",
		 "a-group-name-of-thirty-chars-x");
	write_file(cfg, text);
	says(0, "system other, 1 groups", (const char *const[]){ "run", "--check", "--name",
								 "other", cfg, NULL });
	says(1, "under the name a-system-name-of-31-characters1, group "
	     "a-group-name-of-thirty-chars-x's mailbox name",
	     (const char *const[]){ "run", "--check", "--name", "a-system-name-of-31-characters1",
				    cfg, NULL });
}

static void run_bad_options_are_usage_errors(void **state)
{
	static const struct tool_usage_case cases[] = {
		{ { "run", "--name", "a b", "f.yaml", NULL }, "--name takes a system name" },
		{ { "run", "--name", NULL }, "option '--name' needs a value" },
		{ { "run", "--name", "x", NULL }, "missing FILE" },
		{ { "run", "--log-dir", "", "f.yaml", NULL }, "--log-dir takes a directory" },
		{ { "run", "f.yaml", "--log-dir", NULL }, "option '--log-dir' needs a value" },
		{ { "run", "--host", "a/b", "f.yaml", NULL }, "--host takes a host name" },
	};

	(void)state;
	tool_expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]));
}


/*
 * A file that lists hosts: --host picks the groups that run here; every
 * group is declared (the same ids on every host), the others never start,
 * and a tool's restart of one is sent to its own host. A --host the file
 * does not list, or none, is a usage error (exit 2).
 */
static const char *config_hosts(const char *system, unsigned port)
{
	static char text[1024];

	snprintf(text, sizeof(text),
		 "system: %s\nhosts:\n  list:\n"
		 "    - { name: a, listen: '127.0.0.1:%u' }\n"
		 "    - { name: b, listen: '127.0.0.2:%u' }\n"
		 "groups:\n"
		 "  - { name: here, program: %s, args: [--role, consumer], host: a }\n"
		 "  - { name: there, program: %s, args: [--role, consumer], host: b }\n",
		 system, port, port, group_bin, group_bin);
	return text;
}

static void run_host_starts_only_the_groups_of_that_host(void **state)
{
	const char *cfg = in_dir("hosts.yaml"), *out = in_dir("hosts.out");
	const char *const opts[] = { "--host", "a", NULL };
	char *text;
	pid_t run;

	(void)state;
	if (!built_with("SHOAL_HAVE_BRIDGE", "the bridge (UCX)"))
		skip();
	write_file(cfg, config_hosts("hosts", 20000 + (unsigned)getpid() % 20000));
	run = spawn_run(opts, cfg, out, -1, 0);
	expect_output(out, "host a: 1 of the file's 2 groups run here, and the bridge to the 1 "
		      "other host", 10000);
	wait_attached("hosts", "here", out);
	says(1, "group there runs on host b, not here (host a)",
	     (const char *const[]){ "restart", "hosts", "there", NULL });
	assert_int_equal(stop_run(run, SIGTERM), 0);
	text = read_file(out);
	assert_lacks(text, "group there: started");
	free(text);
	assert_int_equal(count_system_files("hosts"), 0);
}

/*
 * Messages the four consumers of examples/hosts.yaml handled, as `shoal stat
 * --json` says on host b (shared memory `shm`).
 */
static unsigned long long example_consumers_handled(const char *shm)
{
	unsigned long long n = 0;
	struct tool_run t;
	char name[16];

	tool_run_in(&t, shm, (const char *const[]){ "stat", "--json", "fanout-hosts", NULL });
	/* Until the last consumer is listed, none is counted. */
	if (strstr(t.out, "\"name\": \"consumer-3\",") != NULL)
		for (int c = 0; c < 4; c++) {
			snprintf(name, sizeof(name), "consumer-%d", c);
			n += json_value_after(t.out, name, "handled");
		}
	tool_free(&t);
	return n;
}

/*
 * The README's system across hosts, as it says to run it: examples/hosts.yaml
 * (on two ports of the test's own), host b (the consumers) and host a (the
 * producer) on this machine's loopback, each with a shared-memory folder of
 * its own. Every message the
 * producer says it sent reaches one consumer, in order, through the two
 * bridges; both systems stop cleanly.
 */
static void across_two_hosts(bool full_rate)
{
	const char *ex = getenv("SHOAL_EXAMPLES"), *saved = getenv("SHOAL_SHM_DIR");
	const char *out[2] = { in_dir("ex-a.out"), in_dir("ex-b.out") };
	const char *const opts[2][3] = { { "--host", "a", NULL }, { "--host", "b", NULL } };
	char cfg[PATH_MAX], shm[2][PATH_MAX], *text, *saved_dir;
	unsigned long long sent = 0, got = 0, n;
	pid_t run[2];

	if (!built_with("SHOAL_HAVE_BRIDGE", "the bridge (UCX)"))
		skip();
	assert_non_null(ex);
	saved_dir = strdup(saved);
	assert_non_null(saved_dir);
	snprintf(cfg, sizeof(cfg), "%s/hosts.yaml", ex);
	{
		/* The example as it is but for its two ports (ours, so that
		 * nothing else on the machine holds them), and, at full rate,
		 * its producer unthrottled. */
		char *yaml = read_file(cfg), *p, digits[8];
		unsigned port = 8000 + 2 * ((unsigned)getpid() % 990);

		for (int h = 0; h < 2; h++) {
			p = strstr(yaml, h == 0 ? "127.0.0.1:7411" : "127.0.0.1:7412");
			assert_non_null(p);
			/* In place: four digits for four. */
			snprintf(digits, sizeof(digits), "%04u", port + (unsigned)h);
			memcpy(p + strlen("127.0.0.1:"), digits, 4);
		}
		p = strstr(yaml, ", --rate, \"20000\"");
		assert_non_null(p);
		if (full_rate)
			memmove(p, p + strlen(", --rate, \"20000\""),
				strlen(p + strlen(", --rate, \"20000\"")) + 1);
		snprintf(cfg, sizeof(cfg), "%s", in_dir(full_rate ? "hosts-full.yaml" : "hosts.yaml"));
		write_file(cfg, yaml);
		free(yaml);
		unlink(out[0]);
		unlink(out[1]);
	}
	for (int h = 1; h >= 0; h--) {
		snprintf(shm[h], sizeof(shm[h]), "%s/host-%c", saved_dir, 'a' + h);
		assert_int_equal(mkdir(shm[h], 0700), 0);
		setenv("SHOAL_SHM_DIR", shm[h], 1);
		run[h] = spawn_run(opts[h], cfg, out[h], -1, 0);
	}
	setenv("SHOAL_SHM_DIR", saved_dir, 1);
	expect_output(out[0], "| link b: up", 20000);
	expect_output(out[1], "| link a: up", 20000);
	sleep(2);
	assert_int_equal(stop_run(run[0], SIGTERM), 0);
	text = read_file(out[0]);
	assert_non_null(strstr(text, "producer: sent "));
	sent = strtoull(strstr(text, "producer: sent ") + strlen("producer: sent "), NULL, 10);
	free(text);
	/* What crossed reaches host b's consumers before they are stopped. */
	for (int i = 0; i < 2000; i++) {
		char stat[2 * PATH_MAX + 128];

		snprintf(stat, sizeof(stat), "SHOAL_SHM_DIR=%s %s stat --json fanout-hosts "
			 "| grep -q '\"messages_received\": %llu,'", shm[1], shoal_bin, sent);
		if (system(stat) == 0)
			break;
		usleep(10000);
	}
	/* And their handlers had it: b's bridge, which stops after them, hands
	 * on what it received at its own pace, slow on a loaded machine. */
	for (int i = 0; i < 1000 && example_consumers_handled(shm[1]) < sent; i++)
		usleep(10000);
	assert_int_equal(stop_run(run[1], SIGTERM), 0);
	text = read_file(out[1]);
	for (const char *p = text; (p = strstr(p, ": received ")) != NULL; p++) {
		n = strtoull(p + strlen(": received "), NULL, 10);
		got += n;
	}
	print_message("across two hosts: %llu sent, %llu received\n", sent, got);
	assert_true(sent > 0);
	assert_int_equal(got, sent);
	n = 0;
	for (const char *p = text; (p = strstr(p, " messages, 0 out of order")) != NULL; p++)
		n++;
	assert_int_equal(n, 4);
	/* Every record that crossed was whole. */
	assert_non_null(strstr(text, ", 0 received records refused;"));
	free(text);
	for (int h = 0; h < 2; h++)
		assert_int_equal(rmdir(shm[h]), 0);
	free(saved_dir);
}

static void run_example_across_two_hosts_on_loopback(void **state)
{
	(void)state;
	across_two_hosts(false);
}

/*
 * The same with the producer unthrottled (over a million messages a second
 * through the two bridges on this machine): nothing lost, nothing refused
 * as malformed on the far side. A link change that corrupted 32 to 480
 * records of 10 million at this rate passed every slower test.
 */
static void run_example_across_two_hosts_at_full_rate(void **state)
{
	(void)state;
	across_two_hosts(true);
}

static void run_host_the_file_does_not_list_is_a_usage_error(void **state)
{
	const char *cfg = in_dir("hosts2.yaml"), *plain = in_dir("nohosts.yaml");
	char text[256];

	(void)state;
	write_file(cfg, config_hosts("hosts2", 7400));
	snprintf(text, sizeof(text), "system: s\ngroups:\n  - name: a\n    program: /bin/true\n");
	write_file(plain, text);
	says(2, "has no host 'c' (its hosts: a, b)",
	     (const char *const[]){ "run", "--host", "c", cfg, NULL });
	says(2, "lists hosts (a, b): say which one this is with --host NAME",
	     (const char *const[]){ "run", cfg, NULL });
	says(2, "lists no hosts: run it without --host",
	     (const char *const[]){ "run", "--host", "a", plain, NULL });
	says(2, "has no host 'c'", (const char *const[]){ "run", "--check", "--host", "c", cfg,
							  NULL });
	says(0, "host b runs there", (const char *const[]){ "run", "--check", "--host", "b", cfg,
							    NULL });
	says(0, "2 hosts: a (127.0.0.1:7400) b (127.0.0.2:7400)",
	     (const char *const[]){ "run", "--check", cfg, NULL });
}

int main(void)
{
	const struct CMUnitTest fixed[] = {
		cmocka_unit_test_teardown(run_check_prints_position_and_exits_1, kill_started),
		cmocka_unit_test_teardown(run_example_across_two_hosts_on_loopback, kill_started),
		cmocka_unit_test_teardown(run_example_across_two_hosts_at_full_rate, kill_started),
		cmocka_unit_test_teardown(run_cpus_this_machine_lacks_are_refused_at_run,
					  kill_started),
		cmocka_unit_test_teardown(run_group_is_pinned_to_its_cpus, kill_started),
		cmocka_unit_test_teardown(run_kill9_under_load_loses_nothing, kill_started),
		cmocka_unit_test_teardown(run_crash_loop_backs_off_then_fails, kill_started),
		cmocka_unit_test_teardown(run_program_disagreeing_with_file_types_is_refused,
					  kill_started),
		cmocka_unit_test_teardown(run_stop_lets_the_router_route_what_a_stopped_level_left,
					  kill_started),
		cmocka_unit_test_teardown(run_sigterm_stops_in_order_and_cleans_up, kill_started),
		cmocka_unit_test_teardown(run_sighup_switches_a_route_live, kill_started),
		cmocka_unit_test_teardown(run_sighup_with_a_refused_file_keeps_the_system_running,
					  kill_started),
		cmocka_unit_test_teardown(run_check_tells_the_shared_memory_the_router_creates,
					  kill_started),
		cmocka_unit_test_teardown(run_starts_over_leftovers_of_a_killed_router, kill_started),
		cmocka_unit_test_teardown(run_control_client_that_never_reads_cannot_freeze_it,
					  kill_started),
		cmocka_unit_test_teardown(run_out_of_descriptors_says_so_and_still_sees_deaths,
					  kill_started),
		cmocka_unit_test_teardown(run_groups_exit_when_their_router_is_killed, kill_started),
		cmocka_unit_test_teardown(run_survives_its_output_reader_going_away, kill_started),
		cmocka_unit_test_teardown(run_tells_its_events_on_stderr_once_stdout_is_gone, kill_started),
		cmocka_unit_test_teardown(run_slow_reader_of_its_output_cannot_stall_it, kill_started),
		cmocka_unit_test_teardown(run_restart_attaches_while_a_dead_groups_connection_is_held,
					  kill_started),
		cmocka_unit_test_teardown(run_messages_stranded_at_sigint_are_counted, kill_started),
		cmocka_unit_test_teardown(run_name_runs_one_file_twice_side_by_side, kill_started),
		cmocka_unit_test_teardown(run_group_output_is_prefixed_by_line, kill_started),
		cmocka_unit_test_teardown(run_passes_on_every_line_of_a_chatty_group, kill_started),
		cmocka_unit_test_teardown(run_log_dir_writes_each_groups_file, kill_started),
		cmocka_unit_test_teardown(run_log_dir_that_is_a_file_is_refused, kill_started),
		cmocka_unit_test_teardown(run_stop_restart_reload_over_the_control_socket,
					  kill_started),
		cmocka_unit_test_teardown(run_stop_kills_a_group_past_its_timeout, kill_started),
		cmocka_unit_test_teardown(run_restart_after_a_stop_before_attach_runs,
					  kill_started),
		cmocka_unit_test_teardown(run_lifecycle_clients_that_go_away_cannot_hurt_it,
					  kill_started),
		cmocka_unit_test_teardown(run_logs_reads_the_groups_log_files, kill_started),
		cmocka_unit_test_teardown(run_lifecycle_of_another_user_is_refused, kill_started),
		cmocka_unit_test_teardown(run_notifies_systemd_when_ready_reloading_and_stopping,
					  kill_started),
		cmocka_unit_test(run_check_with_name_checks_the_names_it_makes),
		cmocka_unit_test(run_bad_options_are_usage_errors),
		cmocka_unit_test_teardown(run_host_starts_only_the_groups_of_that_host,
					  kill_started),
		cmocka_unit_test(run_host_the_file_does_not_list_is_a_usage_error),
	};
	struct CMUnitTest table[N_BAD];
	char names[N_BAD][64];
	int failed;

	shoal_bin = getenv("SHOAL_BIN");
	tool_bin = shoal_bin;
	group_bin = getenv("SHOAL_TEST_GROUP");
	if (shoal_bin == NULL || group_bin == NULL) {
		fprintf(stderr, "SHOAL_BIN and SHOAL_TEST_GROUP must name the binaries\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	if (getenv("SHOAL_TEST_FILTER") != NULL)   /* one test, by name pattern */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	for (size_t i = 0; i < N_BAD; i++) {
		snprintf(names[i], sizeof(names[i]), "run_config_refused_with_position/%s",
			 bad_configs[i].name);
		table[i] = (struct CMUnitTest){ names[i], run_config_refused_with_position, NULL,
						NULL, (void *)&bad_configs[i] };
	}
	failed = _cmocka_run_group_tests("run_bad_configs", table, N_BAD, NULL, NULL);
	failed += cmocka_run_group_tests_name("run", fixed, setup, teardown);
	return failed ? 1 : 0;
}
