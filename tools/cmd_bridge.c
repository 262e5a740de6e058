/* SPDX-License-Identifier: MIT */
/*
 * `shoal bridge`: the process of a host's built-in group `bridge`, which
 * `shoal run --host NAME` starts when the file lists other hosts
 * (runtime/bridge/bridge.c). An internal command of the one binary rather
 * than a program of its own: the supervisor starts the very `shoal` that
 * runs it, so the bridge always matches the router and the file's parser.
 * Built only with the link layer (UCX), and not listed by `shoal help`.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "runtime/bridge/bridge.h"
#include "tools/cli.h"

static int cmd_bridge(const struct shoal__cmd *cmd, int argc, char **argv)
{
	enum { OPT_HELP = SHOAL_CLI_OPT_LONG, OPT_HOST };
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "host", required_argument, NULL, OPT_HOST },
		{ NULL, 0, NULL, 0 },
	};
	struct shoal__bridge_opts o = { .log = stdout };
	struct shoal_err err = { { 0 } };
	int c, ret, end;

	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_HOST:
			o.host = optarg;
			break;
		}
	}
	if (o.host == NULL)
		return shoal__cli_usage_error(cmd, "--host NAME is required");
	if (optind != argc - 1)
		return shoal__cli_usage_error(cmd, optind == argc ? "missing FILE" :
					      "one FILE only");
	o.config = argv[optind];
	/* Its output is a pipe to the supervisor: whole lines, at once. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = shoal__bridge_run(&o, &err);
	if (ret < 0) {
		fprintf(stderr, "shoal bridge: %s\n", err.msg[0] ? err.msg : strerror(-ret));
		return 1;
	}
	return SHOAL_EXIT_OK;
}

const struct shoal__cmd shoal__cmd_bridge = {
	.name = "bridge",
	.summary = "(started by shoal run --host) Link this host to the others",
	.fn = cmd_bridge,
	.help =
	"Usage: shoal bridge --host NAME FILE\n"
	"\n"
	"The process of the built-in group 'bridge' that 'shoal run --host NAME\n"
	"FILE' starts when FILE lists other hosts, supervised like any group\n"
	"(docs/hosts.md). It attaches to the system named by $SHOAL_SYSTEM, opens\n"
	"a link to the bridge of every other host (the host whose name sorts\n"
	"first connects, the other listens) and prints a line for each change of\n"
	"a link: up, down, failed attempts, refused frames, records lost to a\n"
	"peer's restart. It stops when the router stops its group.\n"
	"\n"
	"Exit status: 0 stopped by the router; 1 could not start (the reason is\n"
	"printed); 2 bad command line.\n",
};
