/* SPDX-License-Identifier: MIT */
/*
 * `shoal top` on a terminal, driven through tmux: this test process runs a
 * router (tests/rtutil.h) with a few groups declared; the real binary (env
 * SHOAL_BIN) runs inside a detached tmux session of a known size, on a tmux
 * server of its own (-S, a socket in the test's directory; no configuration
 * read). The test types keys into
 * the pane (send-keys), resizes the window (resize-window) and reads what
 * the pane shows (capture-pane -p), polling until the expected text appears
 * or a generous deadline passes: the machine may be loaded, so no sleep is
 * an assertion. After `q` (or Ctrl-C, or the system going away) the shell
 * around `shoal top` records its exit status and the terminal's modes
 * (stty -g) before and after, which must match, with the alternate screen
 * left and the cursor shown.
 *
 * `--sort` and `--filter` without a terminal need no tmux and run always;
 * without tmux the terminal cases skip and the program exits 77.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/router.h>

#include "tests/jsoncheck.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"
#include "tests/toolrun.h"

#define SYSTEM "ttop"
#define PANE_TIMEOUT_MS 30000
#define POLL_MS 50

/* Declared, never started: rows of state "down", sorted by name as listed. */
static const char *const group_names[] = { "alpha", "beta", "gamma-1", "gamma-2", "omega",
					   "zeta" };
#define N_GROUPS (sizeof(group_names) / sizeof(group_names[0]))

static struct {
	bool have_tmux;
	bool router_up;
	char dir[64];              /* the script, what it records, the tmux socket */
	char sock[96];             /* the tmux server's socket (-S), in dir */
} fx;

/* ---- tmux ---- */

/* Run `tmux -S sock -f /dev/null ARGS...` (NULL-terminated); returns its exit status. */
static int tmux(const char *const *args)
{
	char *argv[24] = { "tmux", "-S", fx.sock, "-f", "/dev/null" };
	size_t n = 5;
	pid_t pid;
	int status;

	for (; args[n - 5] != NULL; n++) {
		assert_true(n < sizeof(argv) / sizeof(argv[0]) - 1);
		argv[n] = (char *)args[n - 5];
	}
	argv[n] = NULL;
	/* posix_spawn, as tests/toolrun.c: the router's threads run here. */
	if (posix_spawnp(&pid, "tmux", NULL, NULL, argv, environ) != 0)
		return -1;
	status = test_wait_pid(pid, PANE_TIMEOUT_MS);
	return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define TMUX(...) tmux((const char *const[]){ __VA_ARGS__, NULL })

/* What `tmux CMD...` prints (a capture, a format), NUL-terminated; free() it. */
static char *tmux_output(const char *cmd)
{
	char line[256], *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len), *p;

	assert_non_null(out);
	snprintf(line, sizeof(line), "tmux -S '%s' -f /dev/null %s 2>/dev/null", fx.sock, cmd);
	p = popen(line, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p) != NULL)
		fputs(line, out);
	pclose(p);
	assert_int_equal(fclose(out), 0);
	return buf;
}

static char *capture(void)
{
	return tmux_output("capture-pane -p -t top");
}

/* Poll the pane until it shows `needle` (or, !shown, no longer does); returns that capture. */
static char *poll_pane(const char *needle, bool shown)
{
	char *pane = NULL;

	for (int waited = 0; waited < PANE_TIMEOUT_MS; waited += POLL_MS) {
		free(pane);
		pane = capture();
		if ((strstr(pane, needle) != NULL) == shown)
			return pane;
		usleep(POLL_MS * 1000);
	}
	fail_msg("the pane %s '%s'; it shows:\n%s", shown ? "never showed" : "still shows",
		 needle, pane);
	return NULL;
}

static char *wait_pane(const char *needle)
{
	return poll_pane(needle, true);
}

static void expect_pane(const char *needle)
{
	free(wait_pane(needle));
}

/* Key names ("Enter", "C-u") or text (what is no key name), NULL-terminated. */
static void keys(const char *const *names)
{
	const char *args[8] = { "send-keys", "-t", "top" };
	size_t n = 3;

	for (; names[n - 3] != NULL; n++) {
		assert_true(n < sizeof(args) / sizeof(args[0]) - 1);
		args[n] = names[n - 3];
	}
	args[n] = NULL;
	assert_int_equal(tmux(args), 0);
}

#define KEYS(...) keys((const char *const[]){ __VA_ARGS__, NULL })

static char *read_file(const char *name)
{
	char path[128], *buf = NULL;
	size_t cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", fx.dir, name);
	f = fopen(path, "r");
	if (f == NULL)
		fail_msg("%s: %s", path, strerror(errno));
	if (getdelim(&buf, &cap, '\0', f) < 0) {
		free(buf);
		buf = strdup("");
	}
	fclose(f);
	return buf;
}

/*
 * Start `shoal top --interval 200 ARGS SYSTEM` in a new session of
 * `cols` x `rows`, inside a shell that records the terminal's modes before
 * and after and the exit status, then says "top-exited".
 */
static void start_top(int cols, int rows, const char *args)
{
	char path[128], size_x[16], size_y[16];
	FILE *f;

	/* What a failed case left (quiet: usually nothing). */
	free(tmux_output("kill-session -t top"));
	snprintf(path, sizeof(path), "%s/run.sh", fx.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "cd '%s' || exit 1\n"
		/* Caught, not ignored: top gets the default action back, and
		 * the shell outlives a Ctrl-C to record what happened. */
		"trap : INT\n"
		"rm -f before after status\n"
		"stty -g >before\n"
		"SHOAL_SHM_DIR='%s' '%s' top --interval 200 %s %s\n"
		"echo $? >status\n"
		"stty -g >after\n"
		"echo top-exited\n"
		"exec sleep 600\n", fx.dir, getenv("SHOAL_SHM_DIR"), tool_bin, args, SYSTEM);
	assert_int_equal(fclose(f), 0);
	snprintf(size_x, sizeof(size_x), "%d", cols);
	snprintf(size_y, sizeof(size_y), "%d", rows);
	snprintf(path, sizeof(path), "sh %s/run.sh", fx.dir);
	assert_int_equal(TMUX("new-session", "-d", "-s", "top", "-x", size_x, "-y", size_y,
			      path), 0);
}

/* After top exited: exit `code`, the terminal as before it, the cursor shown. */
static void expect_exited(const char *code)
{
	char *pane = wait_pane("top-exited"), *before = read_file("before"),
	     *after = read_file("after"), *status = read_file("status"),
	     *modes = tmux_output("display-message -p -t top '#{alternate_on} #{cursor_flag}'");

	if (strcmp(status, code) != 0)
		fail_msg("shoal top exited %s, not %s; the pane:\n%s", status, code, pane);
	assert_string_equal(before, after);
	/* The alternate screen left, the cursor visible again. */
	assert_string_equal(modes, "0 1\n");
	free(modes);
	free(status);
	free(after);
	free(before);
	free(pane);
	TMUX("kill-session", "-t", "top");
}

/* The lines of a capture, each as its own string (the capture is cut up). */
static unsigned pane_lines(char *pane, char **lines, unsigned max)
{
	unsigned n = 0;

	for (char *p = pane; *p != '\0' && n < max; n++) {
		lines[n] = p;
		p += strcspn(p, "\n");
		if (*p == '\n')
			*p++ = '\0';
	}
	return n;
}

/* ---- The system ---- */

static int system_up(void **state)
{
	(void)state;
	if (rt_start_router(SYSTEM, NULL, 0) < 0)
		return -1;
	fx.router_up = true;
	for (size_t i = 0; i < N_GROUPS; i++)
		rt_declare(group_names[i], 1, 1);
	snprintf(fx.dir, sizeof(fx.dir), "/tmp/shoal-top-test-XXXXXX");
	if (mkdtemp(fx.dir) == NULL)
		return -1;
	snprintf(fx.sock, sizeof(fx.sock), "%s/tmux.sock", fx.dir);
	/* A server that outlives each case's session: one that exits when its
	 * last session ends could still be exiting as the next case starts. */
	if (fx.have_tmux && TMUX("start-server", ";", "set-option", "-s", "exit-empty", "off") != 0)
		return -1;
	return 0;
}

static int system_down(void **state)
{
	char path[128];

	(void)state;
	if (fx.have_tmux)
		TMUX("kill-server");
	if (fx.router_up)
		rt_stop_router();
	for (const char *const *f = (const char *const[]){ "run.sh", "before", "after",
							    "status", "tmux.sock", NULL };
	     *f != NULL; f++) {
		snprintf(path, sizeof(path), "%s/%s", fx.dir, *f);
		unlink(path);
	}
	rmdir(fx.dir);
	return 0;
}

/* ---- Without a terminal ---- */

static void top_plain_sorts_and_filters(void **state)
{
	struct tool_run r;
	const char *a, *b;

	(void)state;
	tool_expect(&r, 0, (const char *const[]){ "top", "--count", "1", "--interval", "10",
						 "--sort", "name", SYSTEM, NULL });
	assert_has(r.out, "\nGroups (by name)\n");
	assert_has(r.out, " QUEUED  FILL  ");
	assert_has(r.out, " OLDEST  ");
	assert_has(r.out, " P99  RESTARTS ");
	a = strstr(r.out, "  alpha ");
	b = strstr(r.out, "  zeta ");
	assert_true(a != NULL && b != NULL && a < b);
	tool_free(&r);

	tool_expect(&r, 0, (const char *const[]){ "top", "--count", "1", "--interval", "10",
						 "--filter", "^gamma-[0-9]$", SYSTEM, NULL });
	assert_has(r.out, "\nGroups (busiest first, matching /^gamma-[0-9]$/: 2 of 6)\n");
	assert_has(r.out, "  gamma-1 ");
	assert_has(r.out, "  gamma-2 ");
	assert_lacks(r.out, "  alpha ");
	assert_lacks(r.out, "  zeta ");
	tool_free(&r);

	/* A plain word is a substring. */
	tool_expect(&r, 0, (const char *const[]){ "top", "--json", "--count", "1", "--interval",
						 "10", "--filter", "ta", SYSTEM, NULL });
	assert_int_equal(assert_json_documents(r.out, 1, true), 1);
	assert_has(r.out, "\"name\": \"beta\"");
	assert_has(r.out, "\"name\": \"zeta\"");
	assert_lacks(r.out, "\"name\": \"alpha\"");
	/* Declared: the router made its mailbox, empty. */
	assert_has(r.out, "\"fill_pct\": 0.0");
	tool_free(&r);
}

static void top_rejects_bad_sort_and_filter(void **state)
{
	static const struct tool_usage_case cases[] = {
		{ { "top", "--sort", "size", "x", NULL }, "--sort takes rate, name, dropped" },
		{ { "top", "--sort", NULL }, "option '--sort' needs a value" },
		{ { "top", "--filter", "(", "x", NULL }, "--filter '(' is not a regular expression" },
		{ { "top", "--filter", NULL }, "option '--filter' needs a value" },
	};

	(void)state;
	tool_expect_usage_errors(cases, sizeof(cases) / sizeof(cases[0]));
}

/* ---- On a terminal ---- */

/* Keys typed, in turn, and what the pane must then show, and not. */
struct key_step {
	const char *keys[5];
	const char *shows;
	const char *has[2], *lacks[2];
	bool in_order;                 /* has[0] above has[1] */
};

static const struct key_step key_steps[] = {
	/* h shows the keys; any key goes back. */
	{ { "h" }, "shoal top: keys", { "q            quit", "/            filter groups" } },
	{ { "x" }, "Groups (busiest first)", { 0 }, { 0 } },
	{ { "n" }, "Groups (by name)", { "  alpha ", "  zeta " }, { 0 }, true },
	/* A key that means nothing says so, and changes nothing. */
	{ { "y" }, "no key 'y': h shows the keys", { "Groups (by name)" } },
	/* A filter typed after /, applied by Enter (capture-pane drops the
	 * blanks that end a line). */
	{ { "/" }, "filter (regex, Enter applies, Esc clears):", { 0 }, { 0 } },
	{ { "gamma" }, "filter (regex, Enter applies, Esc clears): gamma", { 0 }, { 0 } },
	{ { "Enter" }, "Groups (by name, matching /gamma/: 2 of 6)", { "  gamma-1 ", "  gamma-2 " },
	  { "  alpha ", "  zeta " } },
	/* A bad one is refused, and the filter stays. */
	{ { "/", "C-u", "(", "Enter" }, "filter not applied:", { "matching /gamma/" } },
	/* Esc clears it. */
	{ { "Escape" }, "Groups (by name)", { "  alpha " }, { "matching" } },
};

static void top_answers_keys_and_resizes(void **state)
{
	char *pane, *lines[64];
	unsigned n;

	(void)state;
	if (!fx.have_tmux)
		skip();
	start_top(100, 30, "");
	pane = wait_pane("Groups (busiest first)");
	assert_has(pane, "shoal top: system " SYSTEM ", router pid ");
	free(pane);
	pane = tmux_output("display-message -p -t top '#{alternate_on}'");
	assert_string_equal(pane, "1\n");
	free(pane);

	for (size_t i = 0; i < sizeof(key_steps) / sizeof(key_steps[0]); i++) {
		const struct key_step *k = &key_steps[i];

		keys(k->keys);
		pane = wait_pane(k->shows);
		for (unsigned j = 0; j < 2 && k->has[j] != NULL; j++)
			assert_has(pane, k->has[j]);
		for (unsigned j = 0; j < 2 && k->lacks[j] != NULL; j++)
			assert_lacks(pane, k->lacks[j]);
		if (k->in_order)
			assert_true(strstr(pane, k->has[0]) < strstr(pane, k->has[1]));
		free(pane);
	}

	/* Narrow and short: lines cut, not wrapped; the heads stay on top. */
	assert_int_equal(TMUX("resize-window", "-t", "top", "-x", "40", "-y", "12"), 0);
	/* As many rows as fit under the dispatchers, one per NUMA node. */
	pane = wait_pane(" of 6 (Up");
	n = pane_lines(pane, lines, 64);
	assert_true(n <= 12);
	for (unsigned i = 0; i < n; i++)
		if (strlen(lines[i]) > 40)
			fail_msg("line %u is %zu columns wide: '%s'", i, strlen(lines[i]),
				 lines[i]);
	assert_true(strncmp(lines[0], "shoal top: system " SYSTEM, 22) == 0);
	assert_true(strncmp(lines[1], "h: keys", 7) == 0);
	assert_true(strncmp(lines[3], "Dispatchers", 11) == 0);
	free(pane);
	/* The title's end is cut away, not wrapped onto the next line. */
	pane = capture();
	assert_lacks(pane, "refresh ");
	free(pane);

	/* The groups scroll under their head. */
	KEYS("Down");
	pane = wait_pane("groups 2-");
	assert_has(pane, "  GROUP ");
	free(pane);

	/* Larger again: everything back. */
	assert_int_equal(TMUX("resize-window", "-t", "top", "-x", "120", "-y", "30"), 0);
	free(poll_pane("groups 2-", false));
	expect_pane("refresh ");

	KEYS("q");
	expect_exited("0\n");
}

static void top_stops_on_ctrl_c(void **state)
{
	(void)state;
	if (!fx.have_tmux)
		skip();
	start_top(80, 24, "--sort fill");
	expect_pane("Groups (fullest ring first)");
	KEYS("C-c");
	expect_exited("0\n");
}

/* --count is a batch even on a terminal: what it printed stays. */
static void top_counted_prints_plain_on_a_terminal(void **state)
{
	char *pane;

	(void)state;
	if (!fx.have_tmux)
		skip();
	/* Wide enough that the title does not wrap, whatever the pid. */
	start_top(200, 50, "--count 2 --sort name");
	pane = wait_pane("top-exited");
	assert_has(pane, "refresh 2 over");
	assert_has(pane, "Groups (by name)");
	free(pane);
	expect_exited("0\n");
}

/* Last: takes the system down while `top` watches it. */
static void top_says_when_the_system_goes_away(void **state)
{
	char *pane;

	(void)state;
	if (!fx.have_tmux)
		skip();
	start_top(80, 24, "");
	expect_pane("Groups (busiest first)");
	rt_stop_router();
	fx.router_up = false;
	pane = wait_pane("top-exited");
	assert_has(pane, "shoal top: system " SYSTEM " went away");
	free(pane);
	expect_exited("0\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(top_plain_sorts_and_filters),
		cmocka_unit_test(top_rejects_bad_sort_and_filter),
		cmocka_unit_test(top_answers_keys_and_resizes),
		cmocka_unit_test(top_stops_on_ctrl_c),
		cmocka_unit_test(top_counted_prints_plain_on_a_terminal),
		cmocka_unit_test(top_says_when_the_system_goes_away),
	};
	int failed;

	tool_bin = getenv("SHOAL_BIN");
	if (tool_bin == NULL || tool_bin[0] == '\0') {
		/* Visible skip: meson passes SHOAL_BIN; a hand run must too. */
		fprintf(stderr, "tool_top_test: SHOAL_BIN is not set (path of the shoal "
			"binary); skipping\n");
		return 77;
	}
	fx.have_tmux = system("tmux -V >/dev/null 2>&1") == 0;
	signal(SIGPIPE, SIG_IGN);
	rt_init();
	test_spawn_server_start();
	failed = cmocka_run_group_tests_name("tool_top", tests, system_up, system_down);
	if (failed == 0 && !fx.have_tmux) {
		fprintf(stderr, "tool_top_test: tmux is not installed; the terminal cases "
			"were skipped\n");
		return 77;
	}
	return failed;
}
