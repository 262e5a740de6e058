/* SPDX-License-Identifier: MIT */
/*
 * The `shoal` command's subcommand table and the helpers every subcommand
 * shares: exit codes, usage errors, number parsing.
 *
 * Adding a subcommand: write tools/cmd_<name>.c defining
 * `const struct shoal__cmd shoal__cmd_<name>`, declare it below, list it in
 * the table in tools/shoal.c, and add <name> to `tool_cmds` in
 * tools/meson.build.
 */
#ifndef SHOAL_TOOLS_CLI_H
#define SHOAL_TOOLS_CLI_H

#include <stdint.h>

/* Exit codes shared by every subcommand (documented in each one's help). */
#define SHOAL_EXIT_OK      0   /* everything read is intact */
#define SHOAL_EXIT_CORRUPT 1   /* something read is corrupted, or not found */
#define SHOAL_EXIT_USAGE   2   /* bad command line */
#define SHOAL_EXIT_ATTACH  3   /* cannot attach to the segment */

struct shoal__cmd {
	const char *name;
	const char *summary;   /* one line for `shoal help` */
	/*
	 * Run the subcommand. argv[0] is the subcommand's name and argv[argc]
	 * is NULL, as for main(). Returns a SHOAL_EXIT_* code.
	 */
	int (*fn)(const struct shoal__cmd *cmd, int argc, char **argv);
	const char *help;      /* full text for `shoal <name> --help` */
	/*
	 * The layout version ("schema") of the documents its --json prints
	 * (shoal__json_doc_begin()); 0 for a command without --json.
	 */
	unsigned json_schema;
};

/* The layout version of the error document (shoal__cli_fail()). */
#define SHOAL_CLI_ERROR_SCHEMA 1

extern const struct shoal__cmd shoal__cmd_run;
extern const struct shoal__cmd shoal__cmd_types;
extern const struct shoal__cmd shoal__cmd_ls;
extern const struct shoal__cmd shoal__cmd_stat;
extern const struct shoal__cmd shoal__cmd_top;
extern const struct shoal__cmd shoal__cmd_dump;
extern const struct shoal__cmd shoal__cmd_ring;
extern const struct shoal__cmd shoal__cmd_metrics;
extern const struct shoal__cmd shoal__cmd_stop;
extern const struct shoal__cmd shoal__cmd_restart;
extern const struct shoal__cmd shoal__cmd_reload;
extern const struct shoal__cmd shoal__cmd_logs;

/* Print the subcommand's help text on stdout. */
void shoal__cli_help(const struct shoal__cmd *cmd);

/* What shoal__cli_next_option() returns when the subcommand ends there. */
#define SHOAL_CLI_OPT_END (-2)

/*
 * The next option of a subcommand's arguments, read with getopt_long() (no
 * message of its own): -h and the short options `shortopts` ("" for none,
 * getopt's syntax), and `longopts` (valued from SHOAL_CLI_OPT_LONG up) with
 * their "help". Returns an option for the caller's switch, -1 after
 * the last one, or SHOAL_CLI_OPT_END with *code set when the subcommand
 * ends here: its help printed (SHOAL_EXIT_OK), or a bad option or a missing
 * value said as a usage error (SHOAL_EXIT_USAGE).
 */
struct option;
int shoal__cli_next_option(const struct shoal__cmd *cmd, int argc, char **argv,
			   const char *shortopts, const struct option *longopts, int *code);

/*
 * Under --json, errors are JSON too: main() calls this before running `cmd`
 * with its arguments; when `cmd` has --json and one argument before any
 * "--" is exactly "--json", shoal__cli_fail() and shoal__cli_usage_error()
 * write the error document from then on. Looking ahead of getopt_long()
 * lets an error in an option before --json be JSON as well.
 */
void shoal__cli_json_scan(const struct shoal__cmd *cmd, int argc, char **argv);

/*
 * Report the error the command stops on and return `code` (its exit
 * status). As text, "shoal <cmd>: <message>" on stderr; under --json
 * (shoal__cli_json_scan()), the error document on stdout, on one line:
 *   {"schema": 1, "time": "...", "command": "<cmd>",
 *    "error": {"exit": <code>, "message": "...", "errno": "ENOENT"}}
 * with "errno" only when `err` (a negative errno) is not 0.
 */
__attribute__((format(printf, 4, 5)))
int shoal__cli_fail(const char *cmd, int code, int err, const char *fmt, ...);

/*
 * Report a bad command line as "shoal <cmd>: <problem>" followed by a hint
 * to run --help, on stderr (under --json, the error document on stdout, as
 * shoal__cli_fail()). Returns SHOAL_EXIT_USAGE.
 */
__attribute__((format(printf, 2, 3)))
int shoal__cli_usage_error(const struct shoal__cmd *cmd, const char *fmt, ...);

/*
 * The `val` of every long option, short or not, starts here, so that a
 * getopt_long() error can tell a short option from a long one (optopt).
 */
#define SHOAL_CLI_OPT_LONG 256

/*
 * Parse a decimal number in [0, max] that fills the whole string. Returns 0,
 * or -EINVAL (not a number, trailing characters) or -ERANGE (above max).
 */
int shoal__cli_parse_uint(const char *s, uint32_t max, uint32_t *out);

/*
 * The one operand SYSTEM after the options (argv[optind]), checked as a
 * system name, into *system. Returns -1 when it is there and valid, else
 * SHOAL_EXIT_USAGE with the problem said.
 */
int shoal__cli_system_arg(const struct shoal__cmd *cmd, int argc, char **argv,
			  const char **system);

/*
 * The operands SYSTEM [GROUP] after the options, checked as names, into
 * *system and *group (NULL when absent). `group_arg` says whether GROUP is
 * refused (0), optional (1) or required (2). Returns -1 when they are
 * there and valid, else SHOAL_EXIT_USAGE with the problem said.
 */
int shoal__cli_system_group_args(const struct shoal__cmd *cmd, int argc, char **argv,
				 int group_arg, const char **system, const char **group);

#endif
