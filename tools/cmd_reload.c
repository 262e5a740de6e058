/* SPDX-License-Identifier: MIT */
/* `shoal reload`: re-read a running system's file, as SIGHUP does
 * (tools/admin.h). */
#include "tools/admin.h"

static int cmd_reload(const struct shoal__cmd *cmd, int argc, char **argv)
{
	return shoal__admin_cmd(cmd, argc, argv, SHOAL__ADMIN_RELOAD, 0);
}

const struct shoal__cmd shoal__cmd_reload = {
	.name = "reload",
	.summary = "Re-read a running system's file and apply it (as SIGHUP)",
	.fn = cmd_reload,
	.help =
	"Usage: shoal reload [--json] [--timeout SECONDS] SYSTEM\n"
	"\n"
	"Ask the supervisor ('shoal run') of the running system SYSTEM to re-read\n"
	"its file and apply it, as SIGHUP does (docs/config.md, Reload): the new\n"
	"routes are published in one swap, new groups start, removed ones stop,\n"
	"changed ones restart. A file that cannot be applied changes nothing,\n"
	"and the reason is printed (exit 1). Waits until the reload is done.\n"
	"\n"
	SHOAL_ADMIN_HELP_TAIL,
	.json_schema = SHOAL_ADMIN_JSON_SCHEMA,
};
