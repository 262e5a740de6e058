/* SPDX-License-Identifier: MIT */
/* `shoal stop`: stop a running system, or one of its groups (tools/admin.h). */
#include "tools/admin.h"

static int cmd_stop(const struct shoal__cmd *cmd, int argc, char **argv)
{
	return shoal__admin_cmd(cmd, argc, argv, SHOAL__ADMIN_STOP, 1);
}

const struct shoal__cmd shoal__cmd_stop = {
	.name = "stop",
	.summary = "Stop a running system, or one of its groups",
	.fn = cmd_stop,
	.help =
	"Usage: shoal stop [--json] [--timeout SECONDS] SYSTEM [GROUP]\n"
	"\n"
	"Ask the supervisor ('shoal run') of the running system SYSTEM to stop,\n"
	"and wait until it has: without GROUP, the whole system stops as on\n"
	"SIGTERM (groups in their stop order, each draining its mailbox, then the\n"
	"shared memory is removed; 'shoal run' exits). With GROUP, only that\n"
	"group's process is asked to stop the same way (killed after its stop\n"
	"timeout), and it is not restarted, whatever its policy, until 'shoal\n"
	"restart SYSTEM GROUP'. Meanwhile 'shoal stat' shows the group 'down'\n"
	"with no pid, and messages routed to it queue in its mailbox up to its\n"
	"capacity, then follow its overflow setting, as for any group that is\n"
	"down. A reload keeps it stopped.\n"
	"\n"
	SHOAL_ADMIN_HELP_TAIL,
	.json_schema = SHOAL_ADMIN_JSON_SCHEMA,
};
