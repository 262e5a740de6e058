/* SPDX-License-Identifier: MIT */
/* `shoal restart`: stop one group of a running system and start it again
 * (tools/admin.h). */
#include "tools/admin.h"

static int cmd_restart(const struct shoal__cmd *cmd, int argc, char **argv)
{
	return shoal__admin_cmd(cmd, argc, argv, SHOAL__ADMIN_RESTART, 2);
}

const struct shoal__cmd shoal__cmd_restart = {
	.name = "restart",
	.summary = "Restart one group of a running system",
	.fn = cmd_restart,
	.help =
	"Usage: shoal restart [--json] [--timeout SECONDS] SYSTEM GROUP\n"
	"\n"
	"Ask the supervisor ('shoal run') of the running system SYSTEM to stop\n"
	"GROUP's process (through its mailbox, as a stop does: it drains what is\n"
	"queued; killed after its stop timeout) and start a new one at once, and\n"
	"wait until it has. Its restart count and backoff start over. A group\n"
	"that is not running (stopped by 'shoal stop', or waiting for its next\n"
	"restart) is started; one that gave up after its restarts cannot be\n"
	"(restart the system). Messages queued for the group wait for the new\n"
	"process in its mailbox.\n"
	"\n"
	SHOAL_ADMIN_HELP_TAIL,
	.json_schema = SHOAL_ADMIN_JSON_SCHEMA,
};
