/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/layout.h"
#include "tools/cli.h"
#include "tools/json.h"

/* Set by shoal__cli_json_scan(): the running command was given --json. */
static bool json_errors;

void shoal__cli_help(const struct shoal__cmd *cmd)
{
	fputs(cmd->help, stdout);
}

void shoal__cli_json_scan(const struct shoal__cmd *cmd, int argc, char **argv)
{
	json_errors = false;
	for (int i = 1; cmd->json_schema != 0 && i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--json") == 0)
			json_errors = true;
}

static void json_error(const char *cmd, int code, int err, const char *fmt, va_list ap)
{
	struct shoal__json j;
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	shoal__json_init_line(&j, stdout);
	shoal__json_doc_begin(&j, SHOAL_CLI_ERROR_SCHEMA);
	shoal__json_string(&j, "command", cmd);
	shoal__json_object_begin(&j, "error");
	shoal__json_int(&j, "exit", code);
	shoal__json_string(&j, "message", msg);
	if (err < 0)
		shoal__json_string(&j, "errno", strerrorname_np(-err) ? strerrorname_np(-err) :
				   "unknown");
	shoal__json_object_end(&j);
	shoal__json_object_end(&j);
	fflush(stdout);
}

int shoal__cli_fail(const char *cmd, int code, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (json_errors) {
		json_error(cmd, code, err, fmt, ap);
	} else {
		fprintf(stderr, "shoal %s: ", cmd);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
	return code;
}

int shoal__cli_usage_error(const struct shoal__cmd *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (cmd != NULL && json_errors) {
		json_error(cmd->name, SHOAL_EXIT_USAGE, 0, fmt, ap);
		va_end(ap);
		return SHOAL_EXIT_USAGE;
	}
	if (cmd != NULL)
		fprintf(stderr, "shoal %s: ", cmd->name);
	else
		fputs("shoal: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (cmd != NULL)
		fprintf(stderr, "\nTry 'shoal %s --help'.\n", cmd->name);
	else
		fputs("\nTry 'shoal --help'.\n", stderr);
	return SHOAL_EXIT_USAGE;
}

/* The usage error of option error `c` ('?' or ':') that getopt_long() just
 * returned. */
static int option_error(const struct shoal__cmd *cmd, char **argv, int c)
{
	/* For a long option, getopt_long() has moved optind just past it. */
	const char *arg = argv[optind - 1];

	if (optopt > 0 && optopt < SHOAL_CLI_OPT_LONG)
		return shoal__cli_usage_error(cmd, c == ':' ? "option '-%c' needs a value" :
					      "unknown option '-%c'", optopt);
	if (c == ':')
		return shoal__cli_usage_error(cmd, "option '%s' needs a value", arg);
	if (optopt != 0)
		return shoal__cli_usage_error(cmd, "option '%s' takes no value", arg);
	return shoal__cli_usage_error(cmd, "unknown option '%s'", arg);
}

int shoal__cli_next_option(const struct shoal__cmd *cmd, int argc, char **argv,
			   const char *shortopts, const struct option *longopts, int *code)
{
	int c, index = -1;
	char opts[32];

	snprintf(opts, sizeof(opts), ":h%s", shortopts);
	opterr = 0;
	c = getopt_long(argc, argv, opts, longopts, &index);
	if (c == 'h' || (index >= 0 && strcmp(longopts[index].name, "help") == 0)) {
		shoal__cli_help(cmd);
		*code = SHOAL_EXIT_OK;
		return SHOAL_CLI_OPT_END;
	}
	if (c == '?' || c == ':') {
		*code = option_error(cmd, argv, c);
		return SHOAL_CLI_OPT_END;
	}
	return c;
}

int shoal__cli_parse_uint(const char *s, uint32_t max, uint32_t *out)
{
	unsigned long long v;
	char *end;

	/* strtoull() accepts leading blanks and a sign; a count takes neither. */
	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v > max)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

int shoal__cli_system_arg(const struct shoal__cmd *cmd, int argc, char **argv,
			  const char **system)
{
	if (optind == argc)
		return shoal__cli_usage_error(cmd, "missing SYSTEM (a system name; 'shoal ls' "
					      "lists them)");
	if (argc - optind > 1)
		return shoal__cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
	*system = argv[optind];
	if (shoal__check_name(*system, "system", NULL) < 0)
		return shoal__cli_usage_error(cmd, "'%s' is not a system name: 1 to %d characters "
					      "of [A-Za-z0-9_-]", *system, SHOAL_NAME_MAX - 1);
	return -1;
}

int shoal__cli_system_group_args(const struct shoal__cmd *cmd, int argc, char **argv,
				 int group_arg, const char **system, const char **group)
{
	int max = group_arg ? 2 : 1;

	*group = NULL;
	if (optind == argc)
		return shoal__cli_usage_error(cmd, "missing SYSTEM (a system name; 'shoal ls' "
					      "lists them)");
	*system = argv[optind];
	if (shoal__check_name(*system, "system", NULL) < 0)
		return shoal__cli_usage_error(cmd, "'%s' is not a system name: 1 to %d characters "
					      "of [A-Za-z0-9_-]", *system, SHOAL_NAME_MAX - 1);
	if (argc - optind > max)
		return shoal__cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + max]);
	if (argc - optind == 2) {
		*group = argv[optind + 1];
		if (shoal__check_name(*group, "group", NULL) < 0)
			return shoal__cli_usage_error(cmd, "'%s' is not a group name: 1 to %d "
						      "characters of [A-Za-z0-9_-]", *group,
						      SHOAL_NAME_MAX - 1);
	} else if (group_arg == 2) {
		return shoal__cli_usage_error(cmd, "missing GROUP ('shoal stat %s' lists the "
					      "groups)", *system);
	}
	return -1;
}
