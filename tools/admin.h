/* SPDX-License-Identifier: MIT */
/*
 * The lifecycle commands (`shoal stop`, `restart`, `reload`): one request to
 * the supervisor of a running system over its control socket, and its
 * answer. The router accepts the connection from the system's owner only
 * and hands the request to the supervisor (runtime/control/supervisor.h),
 * which answers once what was asked is done.
 */
#ifndef SHOAL_TOOLS_ADMIN_H
#define SHOAL_TOOLS_ADMIN_H

#include <stdbool.h>
#include <sys/types.h>

#include "runtime/control/proto.h"
#include "tools/cli.h"

struct shoal__admin_answer {
	bool reached;                    /* the supervisor answered (done or refused) */
	int code;                        /* 0: done; else a negative errno */
	pid_t pid;                       /* the supervisor's pid, when done */
	char msg[SHOAL_ERR_MSG_MAX];     /* what was done, or why not */
	char log_dir[SHOAL__CTL_PATH_MAX];   /* where groups' logs are; "": nowhere */
};

/*
 * Ask the supervisor of `system` for `what` (enum shoal__ctl_admin_what) on
 * `group` ("": the system) and wait up to `timeout_ms` for its answer. Fills
 * *a; a->reached false when the system could not be asked or did not answer
 * (not running, another user's, no answer in time), the reason in a->msg.
 * Blocks for at most `timeout_ms`.
 */
void shoal__admin_ask(const char *system, uint32_t what, const char *group, int timeout_ms,
		      struct shoal__admin_answer *a);

/*
 * The whole of `shoal stop|restart|reload`: options (--json, --timeout,
 * --help), SYSTEM and GROUP (`group_arg`: 0 none, 1 optional, 2 required),
 * the request, the answer printed. Returns the exit code.
 */
int shoal__admin_cmd(const struct shoal__cmd *cmd, int argc, char **argv, uint32_t what,
		     int group_arg);

/* The layout version of their --json documents (shoal__json_doc_begin()). */
#define SHOAL_ADMIN_JSON_SCHEMA 1

/* Where the three commands' help ends: options, who may ask, exit status. */
#define SHOAL_ADMIN_HELP_TAIL \
	"Options:\n" \
	"  --timeout SECONDS  wait at most SECONDS for the answer (default 60);\n" \
	"                     what was asked may still be done after that\n" \
	"  --json             print the answer as one JSON object (errors too:\n" \
	"                     see shoal(1), JSON OUTPUT)\n" \
	"  -h, --help         show this help\n" \
	"\n" \
	"Only the user who runs the system may ask (the router checks the\n" \
	"caller's credentials on its control socket).\n" \
	"\n" \
	"Exit status:\n" \
	"  0  done\n" \
	"  1  the supervisor refused or failed: no such group, a refused file,\n" \
	"     a group that gave up, a stop or restart of it already under way\n" \
	"  2  bad command line\n" \
	"  3  the system's supervisor cannot be asked: the system is not\n" \
	"     running, it is another user's, it is not run by 'shoal run', or\n" \
	"     no answer came in time\n"

#endif
