/* SPDX-License-Identifier: MIT */
/*
 * A system on two hosts: two network namespaces joined by a veth pair
 * (tests/netns.c), each running `shoal run --host a|b` on one file, each
 * with its own shared-memory folder. Both bridges come up and say their
 * link is up; a bridge killed with SIGKILL is restarted by its supervisor
 * and the link comes back; SIGTERM stops both systems cleanly. A producer on
 * each host whose messages are routed (by key) to a consumer on the other,
 * through links whose window is far smaller than what crosses: each message
 * delivered exactly once, both ways at once, and `shoal stat --json` on
 * each host shows its link up with the messages it carried. The veth taken
 * down for 2 s under load and brought back: nothing lost, nothing twice.
 *
 * What the test reads is what an operator reads: the prefixed lines of the
 * `bridge` group in each `shoal run`'s output. Runs as root; skips visibly
 * (exit 77) otherwise, or when namespaces cannot be made. Every wait has a
 * deadline; nothing asserts a duration.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/jsoncheck.h"
#include "tests/netns.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

#define PORT 7400
#define WAIT_MS 30000
#define ROUTED 2000          /* messages each producer sends */
#define FIRST_B 100000       /* the key (and seq) of the first of the producer on b */

static struct test_netns hosts;
static const char *skip_reason;
static char dir[64], shm[2][96], cfg[128], out[2][128], cfg_routed[128], cfg_outage[128];
static char consumer_log[2][128];
static pid_t run[2];
static const char *const name[2] = { "a", "b" };

static char *slurp(const char *path)
{
	char *text = test_netns_slurp(path);

	assert_non_null(text);
	return text;
}

static unsigned count(const char *text, const char *needle)
{
	unsigned n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* Wait until side's output holds `needle` `n` times; fail past WAIT_MS. */
static void expect(int side, const char *needle, unsigned n)
{
	for (int ms = 0; ms < WAIT_MS; ms += 20) {
		char *text = slurp(out[side]);
		unsigned c = count(text, needle);

		free(text);
		if (c >= n)
			return;
		usleep(20000);
	}
	{
		char *text = slurp(out[side]);

		fprintf(stderr, "host %s: '%s' not seen %u times in time; its output:\n%s\n",
			name[side], needle, n, text);
		free(text);
		fail_msg("host %s: '%s' not seen %u times in time (output above)", name[side],
			 needle, n);
	}
}

/* `shoal run --host NAME` in side's namespace, with its own shm folder. */
static pid_t start(int side, const char *file)
{
	pid_t pid = test_netns_run_host(&hosts, side, name[side], shm[side], out[side], file);

	assert_true(pid > 0);
	return pid;
}

/* A system file's start: its name, and both hosts on `port` with `link`. */
static const char *head(const char *system, int port, const char *link)
{
	static char text[512];

	snprintf(text, sizeof(text), "system: %s\nhosts:\n%s  list:\n"
		 "    - { name: a, listen: '%s:%d' }\n    - { name: b, listen: '%s:%d' }\n",
		 system, link, hosts.addr[0], port, hosts.addr[1], port);
	return text;
}

/* System `system` in `path`: a producer on each host, routed by key to the
 * consumer of the other host, ROUTED messages each (`rate`: more producer
 * arguments, "" for none); links as `link` says. */
static int write_routed(const char *path, const char *system, int port, const char *link,
			const char *rate)
{
	const char *group = getenv("SHOAL_TEST_GROUP");
	char text[2048];

	snprintf(text, sizeof(text), "%s"
		 "types:\n  - { id: 1, name: ping, max_size: 16 }\n"
		 "  - { id: 3, name: work, max_size: 64 }\n"
		 "groups:\n"
		 "  - { name: pa, program: %s, args: [--role, producer, --n, %d%s], host: a }\n"
		 "  - { name: pb, program: %s, args: [--role, producer, --n, %d, --first, %d%s],\n"
		 "      host: b }\n"
		 "  - { name: ca, program: %s, args: [--role, consumer, --log, '%s'], host: a,\n"
		 "      routes: [ { types: [work], key: { offset: 0, width: 8 },\n"
		 "                  match: { range: [%d, %d] } } ] }\n"
		 "  - { name: cb, program: %s, args: [--role, consumer, --log, '%s'], host: b,\n"
		 "      routes: [ { types: [work], key: { offset: 0, width: 8 },\n"
		 "                  match: { range: [0, %d] } } ] }\n",
		 head(system, port, link), group, ROUTED, rate, group, ROUTED, FIRST_B, rate,
		 group, consumer_log[0], FIRST_B, FIRST_B + ROUTED - 1, group, consumer_log[1],
		 ROUTED - 1);
	return test_netns_write(path, text);
}

static int setup(void **state)
{
	const char *group = getenv("SHOAL_TEST_GROUP");
	char text[2048];

	(void)state;
	if (test_netns_create(&hosts, "hosts", 78) < 0) {
		skip_reason = "could not make the namespaces (see above)";
		return 0;
	}
	if (test_netns_dirs("hosts", 2, dir, sizeof(dir), shm[0], sizeof(shm[0]), out[0],
			    sizeof(out[0])) < 0)
		return -1;
	snprintf(cfg, sizeof(cfg), "%s/hx.yaml", dir);
	snprintf(text, sizeof(text), "%sgroups:\n"
		 "  - { name: ca, program: %s, args: [--role, consumer], host: a }\n"
		 "  - { name: cb, program: %s, args: [--role, consumer], host: b }\n",
		 head("hx", PORT, "  link: { keepalive: 50ms, dead_after: 500ms, backoff: 20ms,\n"
		      "          max_backoff: 200ms }\n"), group, group);
	if (test_netns_write(cfg, text) < 0)
		return -1;
	snprintf(cfg_routed, sizeof(cfg_routed), "%s/hr.yaml", dir);
	snprintf(cfg_outage, sizeof(cfg_outage), "%s/ho.yaml", dir);
	for (int s = 0; s < 2; s++)
		snprintf(consumer_log[s], sizeof(consumer_log[s]), "%s/c%s.log", dir, name[s]);
	/* 64 KiB of window against 2000 records of 80 bytes (160 KB) each way;
	 * then the same at 500 messages a second, over a link that notices a
	 * silent peer within half a second. */
	if (write_routed(cfg_routed, "hr", PORT + 1, "  link: { window: 64KiB }\n", "") < 0)
		return -1;
	return write_routed(cfg_outage, "ho", PORT + 2,
			    "  link: { keepalive: 50ms, dead_after: 500ms, backoff: 20ms,\n"
			    "          max_backoff: 200ms }\n", ", --rate, 500");
}

/* After each case: what a failed one left running is stopped. */
static int leave_nothing(void **state)
{
	(void)state;
	test_netns_stop_runs(run, 2);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_netns_teardown(&hosts, run, 2, (const char *const[]){ dir, shm[0], shm[1], NULL });
	return 0;
}

/* The pid `shoal run` says it started for the bridge, the n-th time. */
static pid_t bridge_pid(int side, unsigned n)
{
	char *text = slurp(out[side]), *p = text;
	pid_t pid = 0;

	for (unsigned i = 0; i < n && p != NULL; i++)
		if ((p = strstr(p, "group bridge: started pid ")) != NULL)
			p += strlen("group bridge: started pid ");
	if (p != NULL)
		pid = (pid_t)atoi(p);
	free(text);
	return pid;
}

static void stop_cleanly(int side, const char *system)
{
	char *text;
	int status;

	assert_int_equal(kill(run[side], SIGTERM), 0);
	status = test_wait_pid(run[side], WAIT_MS);
	run[side] = 0;
	text = slurp(out[side]);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		/* Whole, on stderr: cmocka cuts a message at about 1 kB. */
		fprintf(stderr, "host %s: shoal run ended with status 0x%x; its output:\n%s\n",
			name[side], status, text);
		free(text);
		fail_msg("host %s: shoal run ended with status 0x%x (output above)", name[side],
			 status);
	}
	assert_non_null(strstr(text, "group bridge: exited with status 0"));
	{
		char stopped[64];

		snprintf(stopped, sizeof(stopped), "system %s stopped\n", system);
		assert_non_null(strstr(text, stopped));
	}
	free(text);
}

static void hosts_bridges_link_restart_and_stop_cleanly(void **state)
{
	pid_t first;

	(void)state;
	if (skip_reason) {
		fprintf(stderr, "skipped: %s\n", skip_reason);
		skip();
	}
	run[0] = start(0, cfg);
	run[1] = start(1, cfg);
	expect(0, "host a: 1 of the file's 2 groups run here, and the bridge", 1);
	expect(0, "bridge | link b: connecting to ", 1);
	expect(1, "bridge | link a: listening on ", 1);
	expect(0, "bridge | link b: up (peer epoch ", 1);
	expect(1, "bridge | link a: up (peer epoch ", 1);
	/* The listening bridge killed: restarted by policy, the link back. */
	first = bridge_pid(1, 1);
	assert_true(first > 0);
	assert_int_equal(kill(first, SIGKILL), 0);
	expect(1, "group bridge: restart 1 in ", 1);
	expect(1, "bridge | link a: up (peer epoch ", 2);
	expect(0, "bridge | link b: down (", 1);
	expect(0, "bridge | link b: up (peer epoch ", 2);
	stop_cleanly(1, "hx");
	stop_cleanly(0, "hx");
}

/* Lines "3 SEQ" of side's consumer log: how many, and whether each of
 * first .. first + ROUTED - 1 is there exactly once. */
static unsigned consumer_lines(int side, unsigned first, bool *exact)
{
	static unsigned char seen[ROUTED];
	char *text = slurp(consumer_log[side]), *p = text;
	unsigned n = 0;

	memset(seen, 0, sizeof(seen));
	*exact = true;
	while (*p != '\0') {
		unsigned type;
		unsigned long long seq;

		if (sscanf(p, "%u %llu", &type, &seq) != 2 || type != 3 || seq < first ||
		    seq - first >= ROUTED || seen[seq - first]++)
			*exact = false;
		n++;
		p = strchr(p, '\n');
		if (p == NULL)
			break;
		p++;
	}
	free(text);
	return n;
}

/* Each side's consumer has every message of the other side's producer
 * (first[side] on), once each; fails with both outputs otherwise. */
static void consumers_have_all_once(const unsigned first[2])
{
	for (int s = 0; s < 2; s++) {
		bool exact;
		unsigned n = consumer_lines(s, first[s], &exact);

		if (n != ROUTED || !exact) {
			char *a = slurp(out[0]), *b = slurp(out[1]);

			fprintf(stderr, "--- a:\n%s\n--- b:\n%s\n", a, b);
			free(a);
			free(b);
			fail_msg("consumer on %s: %u lines (%s), expected %d once each (outputs "
				 "above)", name[s], n,
				 exact ? "no duplicate" : "duplicates or strangers", ROUTED);
		}
	}
}

/* `shoal stat --json hr` of side's system: its link to the other host is
 * up and has carried `n` messages each way (read from the bridge's link
 * view, which the bridge refreshes once a turn of its loop: waited for). */
static void stat_shows_link_up(int side, unsigned n)
{
	const char *args[] = { "stat", "--json", "hr", NULL };
	char sent[64], received[64], peer[32];
	struct tool_run r;

	snprintf(peer, sizeof(peer), "\"peer\": \"%s\"", name[1 - side]);
	snprintf(sent, sizeof(sent), "\"messages_sent\": %u,", n);
	snprintf(received, sizeof(received), "\"messages_received\": %u,", n);
	setenv("SHOAL_SHM_DIR", shm[side], 1);
	for (int ms = 0;; ms += 100) {
		tool_start(&r, args);
		tool_wait(&r);
		if ((strstr(r.out, sent) && strstr(r.out, received)) || ms >= WAIT_MS)
			break;
		tool_free(&r);
		usleep(100000);
	}
	unsetenv("SHOAL_SHM_DIR");
	assert_json_object(r.out);
	assert_has(r.out, "\"links\": {");
	assert_has(r.out, peer);
	assert_has(r.out, "\"state\": \"up\"");
	assert_has(r.out, sent);
	assert_has(r.out, received);
	assert_has(r.out, "\"lost_link\": 0,");
	assert_has(r.out, "\"refused\": 0,");
	tool_free(&r);
	/* The link view is a file of the system's, not a stray one. */
	setenv("SHOAL_SHM_DIR", shm[side], 1);
	tool_start(&r, (const char *const[]){ "ls", "--json", NULL });
	tool_wait(&r);
	unsetenv("SHOAL_SHM_DIR");
	assert_json_object(r.out);
	assert_has(r.out, "\"stray\": []");
	tool_free(&r);
}

static void hosts_routed_messages_cross_both_ways_once_each(void **state)
{
	static const unsigned first[2] = { FIRST_B, 0 };   /* what each side's consumer gets */
	bool exact[2] = { false, false };
	unsigned n[2] = { 0, 0 };

	(void)state;
	if (skip_reason) {
		fprintf(stderr, "skipped: %s\n", skip_reason);
		skip();
	}
	for (int s = 0; s < 2; s++)
		truncate(out[s], 0);
	run[0] = start(0, cfg_routed);
	run[1] = start(1, cfg_routed);
	for (int ms = 0; ms < WAIT_MS && (n[0] < ROUTED || n[1] < ROUTED); ms += 50) {
		usleep(50000);
		for (int s = 0; s < 2; s++)
			n[s] = consumer_lines(s, first[s], &exact[s]);
	}
	for (int s = 0; s < 2; s++)
		stat_shows_link_up(s, 2000);
	stop_cleanly(0, "hr");
	stop_cleanly(1, "hr");
	consumers_have_all_once(first);
	/* What each bridge sent on here comes back to it by its bridge route:
	 * dropped, never sent again. */
	for (int s = 0; s < 2; s++)
		expect(s, "bridge | stopped: 2000 records sent to other hosts, 2000 received and "
		       "sent on here; 0 messages for no other host, 2000 of its own come back, "
		       "0 lost to a host down, 0 received records refused", 1);
}

/*
 * The veth taken down for 2 s while both producers stream (500 messages a
 * second each way, 4 s in all): both bridges see their link go down and
 * come back, resend what was not acknowledged, and every message of each
 * producer reaches the other host's consumer exactly once; the link view
 * counts nothing lost (the outage is shorter than hosts.down_after).
 */
static void hosts_link_down_two_seconds_under_load_loses_nothing(void **state)
{
	static const unsigned first[2] = { FIRST_B, 0 };
	bool exact[2] = { false, false };
	unsigned n[2] = { 0, 0 };
	const char *args[] = { "stat", "--json", "ho", NULL };
	struct tool_run r;

	(void)state;
	if (skip_reason) {
		fprintf(stderr, "skipped: %s\n", skip_reason);
		skip();
	}
	for (int s = 0; s < 2; s++) {
		truncate(out[s], 0);
		truncate(consumer_log[s], 0);
	}
	run[0] = start(0, cfg_outage);
	run[1] = start(1, cfg_outage);
	for (int ms = 0; ms < WAIT_MS && (n[0] < ROUTED / 5 || n[1] < ROUTED / 5); ms += 20) {
		usleep(20000);
		for (int s = 0; s < 2; s++)
			n[s] = consumer_lines(s, first[s], &exact[s]);
	}
	assert_int_equal(test_netns_link(&hosts, 0, false), 0);
	sleep(2);
	assert_int_equal(test_netns_link(&hosts, 0, true), 0);
	for (int ms = 0; ms < 2 * WAIT_MS && (n[0] < ROUTED || n[1] < ROUTED); ms += 50) {
		usleep(50000);
		for (int s = 0; s < 2; s++)
			n[s] = consumer_lines(s, first[s], &exact[s]);
	}
	/* The outage was seen, and the link came back, on both sides. */
	expect(0, "bridge | link b: down (", 1);
	expect(1, "bridge | link a: down (", 1);
	expect(0, "bridge | link b: up (peer epoch ", 2);
	expect(1, "bridge | link a: up (peer epoch ", 2);
	for (int s = 0; s < 2; s++) {
		setenv("SHOAL_SHM_DIR", shm[s], 1);
		tool_start(&r, args);
		tool_wait(&r);
		unsetenv("SHOAL_SHM_DIR");
		assert_json_object(r.out);
		assert_has(r.out, "\"lost_link\": 0,");
		assert_has(r.out, "\"lost_down\": 0,");
		tool_free(&r);
	}
	stop_cleanly(0, "ho");
	stop_cleanly(1, "ho");
	consumers_have_all_once(first);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(hosts_bridges_link_restart_and_stop_cleanly,
					  leave_nothing),
		cmocka_unit_test_teardown(hosts_routed_messages_cross_both_ways_once_each,
					  leave_nothing),
		cmocka_unit_test_teardown(hosts_link_down_two_seconds_under_load_loses_nothing,
					  leave_nothing),
	};
	const char *why = test_netns_unavailable();

	if (why) {
		printf("bridge_hosts: skipped: %s\n", why);
		return TEST_CHILD_SKIP;   /* meson's "skipped" */
	}
	if (getenv("SHOAL_BIN") == NULL || getenv("SHOAL_TEST_GROUP") == NULL) {
		printf("bridge_hosts: skipped: SHOAL_BIN and SHOAL_TEST_GROUP are not set\n");
		return TEST_CHILD_SKIP;
	}
	tool_bin = getenv("SHOAL_BIN");
	return cmocka_run_group_tests(tests, setup, teardown);
}
