/* SPDX-License-Identifier: MIT */
/*
 * `shoal run`: launch a system from its YAML file and supervise it in the
 * foreground (runtime/control/supervisor.c), or only check the file (--check).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef SHOAL_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "runtime/control/config.h"
#include "runtime/control/supervisor.h"
#include "runtime/layout.h"
#include "tools/cli.h"
#include "tools/format.h"

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_CHECK,
	OPT_DURATION,
	OPT_STATUS,
	OPT_NAME,
	OPT_LOG_DIR,
	OPT_HOST,
};

/*
 * Programs named without a slash are looked up in $SHOAL_PATH, then $PATH.
 * Unless the user set it, $SHOAL_PATH is this executable's folder and the
 * examples folder beside it, so that a build tree runs its own examples.
 */
/* This executable's path in buf, or NULL if /proc does not say. */
static const char *self_path(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);

	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return buf;
}

/* The `shoal` that runs `shoal bridge` for a host with peers: this one,
 * when it is built with the link layer; else NULL. */
static const char *bridge_program(void)
{
#ifdef SHOAL_HAVE_BRIDGE
	static char self[PATH_MAX];

	return self_path(self, sizeof(self));
#else
	return NULL;
#endif
}

static void default_search_path(void)
{
	char self[PATH_MAX], value[3 * PATH_MAX];
	char *slash;

	if (getenv("SHOAL_PATH") != NULL || self_path(self, sizeof(self)) == NULL)
		return;
	slash = strrchr(self, '/');
	if (slash == NULL)
		return;
	*slash = '\0';
	snprintf(value, sizeof(value), "%s:%s/../examples", self, self);
	setenv("SHOAL_PATH", value, 0);
}

#ifdef SHOAL_HAVE_SYSTEMD
/*
 * Under a unit of Type=notify (NOTIFY_SOCKET set), tell systemd how the
 * system stands (contrib/systemd/shoal@.service). A notification that
 * cannot be sent changes nothing here: systemd then times the unit out.
 */
static void notify_systemd(enum shoal__sup_state state, const char *text)
{
	struct timespec now;

	switch (state) {
	case SHOAL__SUP_READY:
		sd_notifyf(0, "READY=1\nSTATUS=%s", text);
		break;
	case SHOAL__SUP_RELOADING:
		/* MONOTONIC_USEC: what Type=notify-reload matches its reload by. */
		clock_gettime(CLOCK_MONOTONIC, &now);
		sd_notifyf(0, "RELOADING=1\nSTATUS=%s\nMONOTONIC_USEC=%llu", text,
			   (unsigned long long)now.tv_sec * 1000000u +
			   (unsigned long long)now.tv_nsec / 1000u);
		break;
	case SHOAL__SUP_STOPPING:
		sd_notifyf(0, "STOPPING=1\nSTATUS=stopping: %s", text);
		break;
	}
}
#endif

/* The hosts of `c`, and with --host which groups run on it. */
static void print_hosts(const struct shoal__config *c, int host)
{
	printf("%s: %u hosts:", c->path, c->n_hosts);
	for (uint32_t i = 0; i < c->n_hosts; i++)
		printf(" %s (%s)", c->hosts[i].name, c->hosts[i].reach);
	printf("\n");
	if (host < 0)
		return;
	printf("%s: host %s runs", c->path, c->hosts[host].name);
	for (uint32_t i = 0; i < c->n_groups; i++)
		if (c->groups[i].host == host)
			printf(" %s", c->groups[i].name);
	printf("%s\n", c->n_hosts > 1 ? ", and its bridge to the other hosts" : "");
}

static int check_only(const char *path, const char *name, const char *host_name)
{
	struct shoal__config_space sp = { 0 };
	struct shoal__config *c;
	struct shoal_err err = { { 0 } };
	char need[SHOAL_FMT_SHORT_SIZE], avail[SHOAL_FMT_SHORT_SIZE];
	int host = -1;

	if (shoal__sup_load_config(path, name, &c, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	/* Without --host, the file is checked for every host. */
	if (host_name != NULL && shoal__config_this_host(c, host_name, &host, &err) < 0) {
		fprintf(stderr, "shoal run: %s\n", err.msg);
		shoal__config_free(c);
		return SHOAL_EXIT_USAGE;
	}
	if (shoal__config_check_space(c, NULL, &sp, &err) < 0) {
		fprintf(stderr, "%s: %s\n", path, err.msg);
		shoal__config_free(c);
		return 1;
	}
	printf("%s: system %s, %u groups, %u routes, %u types, %s of shared memory (%s free "
	       "in %s): OK\n", path, c->system, c->n_groups, c->n_routes, c->n_types,
	       shoal__fmt_bytes(need, sizeof(need), sp.need),
	       shoal__fmt_bytes(avail, sizeof(avail), sp.avail), sp.dir);
	if (c->n_hosts > 0)
		print_hosts(c, host);
	shoal__config_free(c);
	return 0;
}

/* The usage error of an option `opt` that takes a name of `what`. */
static int name_error(const struct shoal__cmd *cmd, const char *opt, const char *what,
		      const char *arg)
{
	return shoal__cli_usage_error(cmd, "%s takes a %s name, 1 to %d characters of "
				      "[A-Za-z0-9_-], not '%s'", opt, what, SHOAL_NAME_MAX - 1, arg);
}

static int cmd_run(const struct shoal__cmd *cmd, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "duration", required_argument, NULL, OPT_DURATION },
		{ "status", required_argument, NULL, OPT_STATUS },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "log-dir", required_argument, NULL, OPT_LOG_DIR },
		{ "host", required_argument, NULL, OPT_HOST },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const modes[] = { "auto", "live", "plain", "quiet", NULL };
	struct shoal__sup_opts o = { .out = stdout };
	struct shoal_err err = { { 0 } };
	bool check = false;
	uint32_t secs;
	int c, ret, end;

	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_CHECK:
			check = true;
			break;
		case OPT_DURATION:
			if (shoal__cli_parse_uint(optarg, 86400 * 365, &secs) < 0 || secs == 0)
				return shoal__cli_usage_error(cmd, "--duration takes a number of "
							      "seconds, not '%s'", optarg);
			o.duration_ns = (int64_t)secs * 1000000000;
			break;
		case OPT_STATUS:
			for (o.status = 0; modes[o.status] != NULL; o.status++)
				if (strcmp(modes[o.status], optarg) == 0)
					break;
			if (modes[o.status] == NULL)
				return shoal__cli_usage_error(cmd, "--status is auto, live, plain "
							      "or quiet, not '%s'", optarg);
			break;
		case OPT_NAME:
			if (shoal__check_name(optarg, "system", NULL) < 0)
				return name_error(cmd, "--name", "system", optarg);
			o.name = optarg;
			break;
		case OPT_LOG_DIR:
			if (optarg[0] == '\0')
				return shoal__cli_usage_error(cmd, "--log-dir takes a directory");
			o.log_dir = optarg;
			break;
		case OPT_HOST:
			if (shoal__check_name(optarg, "host", NULL) < 0)
				return name_error(cmd, "--host", "host", optarg);
			o.host = optarg;
			break;
		}
	}
	if (optind != argc - 1)
		return shoal__cli_usage_error(cmd, optind == argc ? "missing FILE" :
					      "one FILE only");
	o.config = argv[optind];
	default_search_path();
	o.bridge_program = bridge_program();
	if (check)
		return check_only(o.config, o.name, o.host);
#ifdef SHOAL_HAVE_SYSTEMD
	if (getenv("NOTIFY_SOCKET") != NULL)
		o.notify = notify_systemd;
#endif
	ret = shoal__supervise(&o, &err);
	if (ret < 0) {
		fprintf(stderr, "shoal run: %s\n", err.msg[0] ? err.msg : strerror(-ret));
		return ret == -ENXIO ? SHOAL_EXIT_USAGE : 1;
	}
	return ret;
}

const struct shoal__cmd shoal__cmd_run = {
	.name = "run",
	.summary = "Launch a system from its YAML file and supervise it",
	.fn = cmd_run,
	.help =
	"Usage: shoal run [--check] [--host NAME] [--name NAME] [--log-dir DIR]\n"
	"                 [--duration SECONDS] [--status MODE] FILE\n"
	"\n"
	"Start the router of the system FILE describes, launch every group's\n"
	"process, restart them by their policy, and stay in the foreground.\n"
	"Ctrl-C (SIGINT) or SIGTERM stops the groups in their stop order, each\n"
	"draining its mailbox, and removes the system's shared memory. SIGHUP\n"
	"re-reads FILE and applies route changes live (groups whose settings did\n"
	"not change keep running).\n"
	"\n"
	"Each group process writes its standard output and error into one pipe;\n"
	"shoal run passes on every line it prints after the group's name\n"
	"('consumer | text'), a line longer than 4096 bytes cut there with a\n"
	"mark. With --log-dir, each group's lines go to DIR/GROUP.log instead,\n"
	"after the time (UTC), and only events and status stay on the output.\n"
	"\n"
	"Options:\n"
	"  --check             validate FILE, print the shared memory the system\n"
	"                      needs, and exit; nothing starts\n"
	"  --host NAME         this is host NAME of FILE's hosts: section; start\n"
	"                      only its groups (and its bridge to the other\n"
	"                      hosts). Required when FILE lists hosts, refused\n"
	"                      (exit 2) when it does not or has no host NAME\n"
	"  --name NAME         run the system under NAME instead of the name FILE\n"
	"                      gives, so that one file runs twice side by side;\n"
	"                      every other command then addresses it as NAME\n"
	"  --log-dir DIR       write each group's output to DIR/GROUP.log (appended\n"
	"                      to, created 0600; DIR created 0700 if missing)\n"
	"  --duration SECONDS  stop by itself after SECONDS\n"
	"  --status MODE       auto (default: a live line on a terminal, plain\n"
	"                      lines every 5 s otherwise), live, plain, quiet (no\n"
	"                      status, events and group output only)\n"
	"  -h, --help          show this help\n"
	"\n"
	"Under a systemd unit of Type=notify, it tells systemd when every group\n"
	"is up, around a reload and when it stops (when built with libsystemd;\n"
	"'shoal --version' says).\n"
	"\n"
	"The file format is described in docs/config.md.\n"
	"\n"
	"Exit status: 0 every group stopped cleanly and none failed; 1 a group\n"
	"failed, was killed at stop, or the system could not start (or, with\n"
	"--check, FILE is invalid, the reason printed as file:line:column, or\n"
	"the system needs more shared memory than is free); 2 bad command line\n"
	"(also a --host that FILE does not list, or none when it lists hosts).\n",
};
