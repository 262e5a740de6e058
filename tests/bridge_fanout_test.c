/* SPDX-License-Identifier: MIT */
/*
 * A system on three hosts: three network namespaces joined by a switch
 * (tests/netns.c), each running `shoal run --host a|b|c` on one file, each
 * with its own shared-memory folder. Every pair of bridges links, on one
 * listener per host (c is dialed by both a and b). A producer on a whose
 * messages a filter routes to a consumer on b and one on c (fan-out: one
 * copy per host), and producers on b and c whose messages are routed back
 * to a consumer on a, all at once, through links whose window is far
 * smaller than what crosses: each consumer gets every message of each
 * sender exactly once and in the order it was sent. Then a's bridge, which
 * dials both others, is killed: restarted by its supervisor, it links
 * again to b and c, whose one listener each takes it back.
 * And a host that is not up does not hold up the others: with c not
 * started, a's producer's copies for c wait in a's bridge while b's
 * consumer gets all of its own, before hosts.down_after (two minutes) has
 * passed; c, started then, gets every one of its own, in order.
 * And a host away past hosts.down_after (two seconds, in a second file)
 * has what a's bridge held for it given up, counted and said.
 * And a full link holds back no record of another host: c not up, and
 * more from a than a link's backlog holds, b's consumer gets every one of
 * a's up to the one waiting for c, that one too.
 *
 * Runs as root; skips visibly (exit 77) otherwise, or when namespaces
 * cannot be made. Every wait has a deadline; nothing asserts a duration.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/jsonvalue.h"
#include "tests/netns.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

#define PORT 7410
#define WAIT_MS 60000
#define ROUTED 1500            /* messages each producer sends */
#define ROUTED_MORE 5000       /* ... in the full-link case: more than a backlog holds, */
#define RATE_MORE 20000        /* ... a second, which b's consumer keeps up with */
#define HOSTS 3

/* Where each producer's keys (and sequence numbers) start. */
static const unsigned long long first_key[HOSTS] = { 0, 100000, 200000 };
static const char *const name[HOSTS] = { "a", "b", "c" };

static struct test_netns hosts;
static const char *skip_reason;
static char dir[64], shm[HOSTS][96], out[HOSTS][128], cfg[128], cfg_away[128], cfg_more[128];
static char consumer_log[HOSTS][128];
static unsigned routed = ROUTED;   /* what each producer of the case's file sends */
static pid_t run[HOSTS];

/* The system's file at `path`, its hosts away after `down_after`, each
 * producer sending `n_routed`, `rate` a second (0: as fast as it can). */
static int write_cfg(const char *path, const char *down_after, int n_routed, int rate)
{
	const char *group = getenv("SHOAL_TEST_GROUP");
	char text[4096];
	int n = 0;
	FILE *f;

	/* 64 KiB of window against 1500 records of 80 bytes (120 KB) per
	 * producer, on every link; ROUTED_MORE is more than a link's backlog
	 * (four windows) holds. */
	n += snprintf(text + n, sizeof(text) - (size_t)n,
		      "system: fan\nhosts:\n  down_after: %s\n"
		      "  link: { window: 64KiB, keepalive: 50ms, dead_after: 500ms }\n  list:\n",
		      down_after);
	for (int s = 0; s < HOSTS; s++)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "    - { name: %s, listen: '%s:%d' }\n", name[s], hosts.addr[s],
			      PORT);
	n += snprintf(text + n, sizeof(text) - (size_t)n,
		      "types:\n  - { id: 1, name: ping, max_size: 16 }\n"
		      "  - { id: 3, name: work, max_size: 64 }\ngroups:\n");
	for (int s = 0; s < HOSTS; s++)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "  - { name: p%s, program: %s, host: %s,\n"
			      "      args: [--role, producer, --n, %d, --first, %llu, --rate, %d] }\n",
			      name[s], group, name[s], n_routed, first_key[s], rate);
	/* a's consumer takes what b and c produce; b's and c's, what a does. */
	for (int s = 0; s < HOSTS; s++)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "  - { name: c%s, program: %s, host: %s,\n"
			      "      args: [--role, consumer, --log, '%s'],\n"
			      "      routes: [ { types: [work], key: { offset: 0, width: 8 },\n"
			      "                  match: { range: [%llu, %llu] } } ] }\n",
			      name[s], group, name[s], consumer_log[s],
			      s == 0 ? first_key[1] : first_key[0],
			      s == 0 ? first_key[2] + n_routed - 1 : first_key[0] + n_routed - 1);
	f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fputs(text, f);
	return fclose(f) == 0 && n < (int)sizeof(text) ? 0 : -1;
}

static int setup(void **state)
{
	(void)state;
	if (test_netns_create_hosts(&hosts, "fan", 79, HOSTS) < 0) {
		skip_reason = "could not make the namespaces (see above)";
		return 0;
	}
	if (test_netns_dirs("fanout", HOSTS, dir, sizeof(dir), shm[0], sizeof(shm[0]), out[0],
			    sizeof(out[0])) < 0)
		return -1;
	for (int s = 0; s < HOSTS; s++)
		snprintf(consumer_log[s], sizeof(consumer_log[s]), "%s/c%s.log", dir, name[s]);
	snprintf(cfg, sizeof(cfg), "%s/fan.yaml", dir);
	snprintf(cfg_away, sizeof(cfg_away), "%s/fan-away.yaml", dir);
	snprintf(cfg_more, sizeof(cfg_more), "%s/fan-more.yaml", dir);
	if (write_cfg(cfg, "120s", ROUTED, 0) < 0 || write_cfg(cfg_away, "2s", ROUTED, 0) < 0)
		return -1;
	return write_cfg(cfg_more, "120s", ROUTED_MORE, RATE_MORE);
}

static int teardown(void **state)
{
	char cmd[512];

	(void)state;
	for (int s = 0; s < HOSTS; s++)
		if (run[s] > 0) {
			kill(run[s], SIGKILL);
			test_wait_pid(run[s], 5000);
		}
	test_netns_destroy(&hosts);
	if (dir[0] != '\0') {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s' '%s'", dir, shm[0], shm[1],
			 shm[2]);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", cmd);
	}
	return 0;
}

/* What a consumer's log holds, per sender (the host whose producer's keys
 * the line's falls in): lines, and whether each sender's keys came once
 * each, in order, from its first on. */
struct tally {
	unsigned lines[HOSTS];
	bool in_order[HOSTS];
	unsigned strangers;          /* lines of no sender, or not "3 KEY" */
};

static void tally(int side, struct tally *t)
{
	char *text = test_netns_slurp(consumer_log[side]), *p = text;
	unsigned long long next[HOSTS];

	assert_non_null(text);
	memset(t, 0, sizeof(*t));
	for (int s = 0; s < HOSTS; s++) {
		next[s] = first_key[s];
		t->in_order[s] = true;
	}
	while (*p != '\0') {
		unsigned type;
		unsigned long long key;
		int s = -1;

		if (sscanf(p, "%u %llu", &type, &key) == 2 && type == 3)
			for (int h = 0; h < HOSTS; h++)
				if (key >= first_key[h] && key < first_key[h] + routed)
					s = h;
		if (s < 0) {
			t->strangers++;
		} else {
			t->in_order[s] &= key == next[s];
			next[s] = key + 1;
			t->lines[s]++;
		}
		p = strchr(p, '\n');
		if (p == NULL)
			break;
		p++;
	}
	free(text);
}

/* Does side's consumer have what it should: from a (b and c's consumers),
 * or from b and c (a's)? */
static bool complete(int side, const struct tally *t)
{
	for (int s = 0; s < HOSTS; s++) {
		unsigned want = (side == 0) == (s != 0) ? routed : 0;

		if (t->lines[s] != want || !t->in_order[s])
			return false;
	}
	return t->strangers == 0;
}

/* Wait until every consumer has what it should (complete()), WAIT_MS at
 * most; t[] holds the last tally. */
static bool all_complete(struct tally t[HOSTS])
{
	bool done = false;

	for (int ms = 0; ms < WAIT_MS && !done; ms += 100) {
		usleep(100000);
		done = true;
		for (int s = 0; s < HOSTS; s++) {
			tally(s, &t[s]);
			done &= complete(s, &t[s]);
		}
	}
	return done;
}

static void fail_with_outputs(const char *what)
{
	char *o[HOSTS];

	for (int s = 0; s < HOSTS; s++)
		o[s] = test_netns_slurp(out[s]);
	fail_msg("%s\n--- a:\n%s\n--- b:\n%s\n--- c:\n%s", what, o[0], o[1], o[2]);
}

/* Wait until side's output says `needle` `n` times; fail past WAIT_MS. */
static void expect(int side, const char *needle, unsigned n)
{
	char why[160];

	for (int ms = 0; ms < WAIT_MS; ms += 50) {
		char *text = test_netns_slurp(out[side]);
		bool seen = text != NULL && count_of(text, needle) >= n;

		free(text);
		if (seen)
			return;
		usleep(50000);
	}
	snprintf(why, sizeof(why), "host %s: '%s' not seen %u times in time", name[side], needle,
		 n);
	fail_with_outputs(why);
}

/* The pid `shoal run` on side says it started for the bridge, first. */
static pid_t bridge_pid(int side)
{
	static const char started[] = "group bridge: started pid ";
	char *text = test_netns_slurp(out[side]), *p;
	pid_t pid = 0;

	assert_non_null(text);
	p = strstr(text, started);
	if (p != NULL)
		pid = (pid_t)atoi(p + strlen(started));
	free(text);
	return pid;
}

static void stop_cleanly(int side)
{
	int status;
	char *text;

	assert_int_equal(kill(run[side], SIGTERM), 0);
	status = test_wait_pid(run[side], WAIT_MS);
	run[side] = 0;
	text = test_netns_slurp(out[side]);
	assert_non_null(text);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("host %s: shoal run ended with status 0x%x; its output:\n%s", name[side],
			 status, text);
	assert_has(text, "group bridge: exited with status 0");
	assert_has(text, "system fan stopped\n");
	free(text);
}

/* A case's start: skipped without namespaces; else every host's output
 * and consumer log emptied. */
static void begin(void)
{
	if (skip_reason) {
		fprintf(stderr, "skipped: %s\n", skip_reason);
		skip();
	}
	for (int s = 0; s < HOSTS; s++) {
		truncate(out[s], 0);
		truncate(consumer_log[s], 0);
	}
	routed = ROUTED;
}

/* `shoal run --host` of the first n hosts, each on `file`. */
static void start_hosts(int n, const char *file)
{
	for (int s = 0; s < n; s++) {
		const char *argv[] = { getenv("SHOAL_BIN"), "run", "--status", "plain", "--host",
				       name[s], file, NULL };

		run[s] = test_netns_spawn(&hosts, s, shm[s], out[s], argv);
		assert_true(run[s] > 0);
	}
}

static void fanout_three_hosts_once_in_order_and_a_bridge_restarts(void **state)
{
	struct tally t[HOSTS];

	(void)state;
	begin();
	start_hosts(HOSTS, cfg);
	/* Every pair links: c is dialed by a and b on its one listener. */
	expect(0, "bridge | link b: up (peer epoch ", 1);
	expect(0, "bridge | link c: up (peer epoch ", 1);
	expect(1, "bridge | link a: up (peer epoch ", 1);
	expect(1, "bridge | link c: up (peer epoch ", 1);
	expect(2, "bridge | link a: up (peer epoch ", 1);
	expect(2, "bridge | link b: up (peer epoch ", 1);
	(void)all_complete(t);
	/* a's bridge killed: restarted, it dials b and c again. */
	assert_true(bridge_pid(0) > 0);
	assert_int_equal(kill(bridge_pid(0), SIGKILL), 0);
	expect(0, "group bridge: restart 1 in ", 1);
	expect(0, "bridge | link b: up (peer epoch ", 2);
	expect(0, "bridge | link c: up (peer epoch ", 2);
	expect(1, "bridge | link a: up (peer epoch ", 2);
	expect(2, "bridge | link a: up (peer epoch ", 2);
	for (int s = 0; s < HOSTS; s++)
		stop_cleanly(s);
	for (int s = 0; s < HOSTS; s++) {
		char why[256];

		tally(s, &t[s]);
		if (complete(s, &t[s]))
			continue;
		snprintf(why, sizeof(why), "consumer on %s: from a %u (%s), b %u (%s), c %u (%s), "
			 "%u strangers; expected %d from each of %s, in order", name[s],
			 t[s].lines[0], t[s].in_order[0] ? "in order" : "out of order",
			 t[s].lines[1], t[s].in_order[1] ? "in order" : "out of order",
			 t[s].lines[2], t[s].in_order[2] ? "in order" : "out of order",
			 t[s].strangers, ROUTED, s == 0 ? "b and c" : "a");
		fail_with_outputs(why);
	}
	/* No connection was refused for its name: every host named itself as
	 * the file says. (Refusals by timing are the hub's rules, not naming
	 * errors, and the bridge dials again after them: a HELLO that came
	 * after the hub's 1 s, from a bridge starved on a loaded machine, 2 of
	 * 7 runs at a load average of 10; a restarted bridge's connection
	 * while its old one still looks alive.) */
	for (int s = 0; s < HOSTS; s++) {
		char *text = test_netns_slurp(out[s]);

		assert_non_null(text);
		assert_lacks(text, "which has no link here");
		assert_lacks(text, "which this host dials");
		assert_lacks(text, "meant for host");
		assert_lacks(text, "whose first frame");
		free(text);
	}
}

/*
 * c not started: a's link to it never comes up and takes nothing (no
 * handshake, no credit), and a's bridge holds c's copies (120 KB, less than
 * its backlog of four windows) while the mailbox goes on to b's. Before,
 * the bridge's handler waited for c's link until down_after (120 s) passed,
 * b's consumer stuck at the start meanwhile.
 */
static void fanout_host_not_up_does_not_hold_up_the_others(void **state)
{
	struct tally t[HOSTS];
	bool done = false;
	char *text;

	(void)state;
	begin();
	for (int s = 0; s < HOSTS; s++) {
		const char *argv[] = { getenv("SHOAL_BIN"), "run", "--status", "plain", "--host",
				       name[s], cfg, NULL };

		if (s == 2) {
			/* b's consumer has all of a's, c still not up: c now. */
			expect(0, "bridge | link b: up (peer epoch ", 1);
			for (int ms = 0; ms < WAIT_MS && !done; ms += 100) {
				usleep(100000);
				tally(1, &t[1]);
				done = complete(1, &t[1]);
			}
			text = test_netns_slurp(out[0]);
			assert_non_null(text);
			assert_lacks(text, "link c: down longer than hosts.down_after");
			free(text);
			if (!done)
				fail_with_outputs("b's consumer did not get a's messages while c "
						  "was not up");
		}
		run[s] = test_netns_spawn(&hosts, s, shm[s], out[s], argv);
		assert_true(run[s] > 0);
	}
	done = all_complete(t);
	for (int s = 0; s < HOSTS; s++)
		stop_cleanly(s);
	if (!done)
		fail_with_outputs("c's consumer (or a's) did not get all, in order, once c came");
	text = test_netns_slurp(out[0]);
	assert_non_null(text);
	assert_has(text, ", 0 lost to a host down");
	free(text);
}

/*
 * c never started, and hosts.down_after 2 s: a's bridge holds its
 * producer's copies for c in the backlog of its link to c until c has been
 * away that long, then gives them up: each counted lost to a host down,
 * and said, none silently; b's consumer gets all of its own meanwhile.
 */
static void fanout_host_away_past_down_after_counts_its_backlog_lost(void **state)
{
	struct tally t;
	bool done = false;
	char *text, line[96];

	(void)state;
	begin();
	start_hosts(2, cfg_away);
	expect(0, "link c: down longer than hosts.down_after", 1);
	expect(0, "not sent: the host is down past hosts.down_after", 1);
	for (int ms = 0; ms < WAIT_MS && !done; ms += 100) {
		usleep(100000);
		tally(1, &t);
		done = complete(1, &t);
	}
	if (!done)
		fail_with_outputs("b's consumer did not get all of a's while c was away");
	for (int s = 0; s < 2; s++)
		stop_cleanly(s);
	text = test_netns_slurp(out[0]);
	assert_non_null(text);
	snprintf(line, sizeof(line), "stopped: %d records sent to other hosts", ROUTED);
	assert_has(text, line);
	snprintf(line, sizeof(line), ", %d lost to a host down", ROUTED);
	assert_has(text, line);
	free(text);
}

/* A number of a's link to host `peer` (`key`, as `shoal stat --json` on a
 * says it); 0 while a's bridge has not shown the link yet. */
static uint64_t a_link(const char *peer, const char *key)
{
	const char *const args[] = { "stat", "--json", "fan", NULL };
	char row[64];
	struct tool_run t;
	uint64_t v = 0;

	snprintf(row, sizeof(row), "\"peer\": \"%s\",", peer);
	if (tool_run_in(&t, shm[0], args) == 0 && strstr(t.out, row) != NULL)
		v = json_value_where(t.out, "peer", peer, key);
	tool_free(&t);
	return v;
}

/*
 * A host whose link is full holds back no record of another: c not up, and
 * a's producer sending more than a link's backlog holds, at a pace b keeps
 * up with (so that b's link never fills), so that a's bridge finds its
 * backlog for c full partway through, and waits there for c. A record
 * goes to b before c (the routes' order), and what the run being carried
 * had written for b is queued before that wait: b's consumer gets every
 * record up to the one waiting for c, that one too, while a's bridge
 * waits (the link view says how many went to c: the tools see the wait).
 * Then c comes, and every consumer gets all.
 */
static void fanout_full_link_holds_back_no_record_of_another(void **state)
{
	struct tally t[HOSTS];
	uint64_t waits = 0, queued;
	bool done;

	(void)state;
	begin();
	routed = ROUTED_MORE;
	start_hosts(2, cfg_more);
	for (int ms = 0; ms < WAIT_MS && (waits = a_link("c", "credit_waits")) == 0; ms += 100)
		usleep(100000);
	if (waits == 0)
		fail_with_outputs("a's bridge never found its backlog for c full");
	queued = a_link("c", "in_flight");
	for (int ms = 0; ms < WAIT_MS && (tally(1, &t[1]), t[1].lines[0] < queued + 1); ms += 100)
		usleep(100000);
	print_message("a's bridge waits for c after %llu records; b's consumer has %u of them\n",
		      (unsigned long long)queued, t[1].lines[0]);
	assert_true(queued > 0 && queued < ROUTED_MORE);
	assert_int_equal(t[1].lines[0], queued + 1);
	assert_true(t[1].in_order[0]);
	assert_int_equal(a_link("c", "in_flight"), queued);
	run[2] = test_netns_spawn(&hosts, 2, shm[2], out[2],
				  (const char *const[]){ getenv("SHOAL_BIN"), "run", "--status",
							 "plain", "--host", name[2], cfg_more,
							 NULL });
	assert_true(run[2] > 0);
	done = all_complete(t);
	for (int s = 0; s < HOSTS; s++)
		stop_cleanly(s);
	if (!done)
		fail_with_outputs("not every consumer got all, in order, once c came");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fanout_three_hosts_once_in_order_and_a_bridge_restarts),
		cmocka_unit_test(fanout_host_not_up_does_not_hold_up_the_others),
		cmocka_unit_test(fanout_host_away_past_down_after_counts_its_backlog_lost),
		cmocka_unit_test(fanout_full_link_holds_back_no_record_of_another),
	};
	const char *why = test_netns_unavailable();

	if (why) {
		printf("bridge_fanout: skipped: %s\n", why);
		return TEST_CHILD_SKIP;   /* meson's "skipped" */
	}
	if (getenv("SHOAL_BIN") == NULL || getenv("SHOAL_TEST_GROUP") == NULL) {
		printf("bridge_fanout: skipped: SHOAL_BIN and SHOAL_TEST_GROUP are not set\n");
		return TEST_CHILD_SKIP;
	}
	tool_bin = getenv("SHOAL_BIN");
	return cmocka_run_group_tests(tests, setup, teardown);
}
