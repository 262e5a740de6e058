/* SPDX-License-Identifier: MIT */
/*
 * The `shoal` command: find the subcommand named by the first argument in
 * the table below and hand it the rest of the command line.
 */
#include <stdio.h>
#include <string.h>

#include <shoal/segment.h>

#include "tools/cli.h"

#ifdef SHOAL_HAVE_SYSTEMD
#define BUILT_WITH_SYSTEMD "yes"
#else
#define BUILT_WITH_SYSTEMD "no"
#endif
#ifdef SHOAL_HAVE_MICROHTTPD
#define BUILT_WITH_MICROHTTPD "yes"
#else
#define BUILT_WITH_MICROHTTPD "no"
#endif

static const struct shoal__cmd cmd_help;

#ifdef SHOAL_HAVE_BRIDGE
/* Not in cli.h's list: only a build with the link layer has it. */
extern const struct shoal__cmd shoal__cmd_bridge;
#endif

/* Every subcommand, in the order `shoal help` lists them. */
static const struct shoal__cmd *const cmds[] = {
	&shoal__cmd_run,
	&shoal__cmd_stop,
	&shoal__cmd_restart,
	&shoal__cmd_reload,
	&shoal__cmd_logs,
	&shoal__cmd_ls,
	&shoal__cmd_stat,
	&shoal__cmd_top,
	&shoal__cmd_dump,
	&shoal__cmd_ring,
	&shoal__cmd_types,
	&shoal__cmd_metrics,
	&cmd_help,
};

#define N_CMDS (sizeof(cmds) / sizeof(cmds[0]))

static const struct shoal__cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < N_CMDS; i++)
		if (strcmp(cmds[i]->name, name) == 0)
			return cmds[i];
#ifdef SHOAL_HAVE_BRIDGE
	/* Started by `shoal run` itself, not by a person: not in the list
	 * `shoal help` prints (nor its man pages), still with its --help. */
	if (strcmp(shoal__cmd_bridge.name, name) == 0)
		return &shoal__cmd_bridge;
#endif
	return NULL;
}

static void usage(FILE *out)
{
	fputs("Usage: shoal COMMAND [OPTIONS] [ARGUMENTS]\n"
	      "       shoal --help | --version\n"
	      "\n"
	      "Launch and operate Shoal systems, and inspect their shared memory.\n"
	      "\n"
	      "Commands:\n", out);
	for (size_t i = 0; i < N_CMDS; i++)
		fprintf(out, "  %-7s %s\n", cmds[i]->name, cmds[i]->summary);
	fputs("\nRun 'shoal COMMAND --help' for a command's options and exit status.\n", out);
}

static int help(const struct shoal__cmd *cmd, int argc, char **argv)
{
	const struct shoal__cmd *topic;

	if (argc > 2)
		return shoal__cli_usage_error(cmd, "unexpected argument '%s'", argv[2]);
	if (argc == 1) {
		usage(stdout);
		return SHOAL_EXIT_OK;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		shoal__cli_help(cmd);
		return SHOAL_EXIT_OK;
	}
	topic = find_cmd(argv[1]);
	if (topic == NULL)
		return shoal__cli_usage_error(cmd, "unknown command '%s'", argv[1]);
	shoal__cli_help(topic);
	return SHOAL_EXIT_OK;
}

static const struct shoal__cmd cmd_help = {
	.name = "help",
	.summary = "Show this help, or the help of COMMAND",
	.fn = help,
	.help =
	"Usage: shoal help [COMMAND]\n"
	"\n"
	"List the commands, or show the help of COMMAND (the same as\n"
	"'shoal COMMAND --help').\n",
};

int main(int argc, char **argv)
{
	const struct shoal__cmd *cmd;

	if (argc < 2) {
		fputs("shoal: missing COMMAND\n\n", stderr);
		usage(stderr);
		return SHOAL_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return SHOAL_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("shoal %s (segment layout version %u)\n", SHOAL_TOOL_VERSION,
		       SHOAL_SEG_VERSION);
		/* What the build found: both are optional (tools/meson.build). */
		printf("systemd notification (shoal run): %s; HTTP (shoal metrics --listen): %s\n",
		       BUILT_WITH_SYSTEMD, BUILT_WITH_MICROHTTPD);
		return SHOAL_EXIT_OK;
	}
	if (argv[1][0] == '-')
		return shoal__cli_usage_error(NULL, "unknown option '%s'", argv[1]);
	cmd = find_cmd(argv[1]);
	if (cmd == NULL)
		return shoal__cli_usage_error(NULL, "unknown command '%s'", argv[1]);
	shoal__cli_json_scan(cmd, argc - 1, argv + 1);
	return cmd->fn(cmd, argc - 1, argv + 1);
}
