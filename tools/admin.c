/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/layout.h"
#include "tools/admin.h"
#include "tools/json.h"

static void unreached(struct shoal__admin_answer *a, const char *fmt, const char *system,
		      const char *detail)
{
	a->reached = false;
	snprintf(a->msg, sizeof(a->msg), fmt, system, detail);
}

/* Connect to `system`'s control socket; -1 with the reason in *a. */
static int admin_connect(const char *system, struct shoal__admin_answer *a)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (shoal__path_socket(sa.sun_path, sizeof(sa.sun_path), system) < 0) {
		unreached(a, "system %s: %s", system, "its control socket's path is too long");
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		unreached(a, "system %s: socket: %s", system, strerror(errno));
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return fd;
	if (errno == ENOENT)
		unreached(a, "system %s is not running (no control socket %s); 'shoal ls' "
			  "lists the systems", system, sa.sun_path);
	else if (errno == ECONNREFUSED)
		unreached(a, "system %s is not running: its router is gone (%s refuses "
			  "connections)", system, sa.sun_path);
	else
		unreached(a, "cannot reach system %s: %s", system, strerror(errno));
	close(fd);
	return -1;
}

void shoal__admin_ask(const char *system, uint32_t what, const char *group, int timeout_ms,
		      struct shoal__admin_answer *a)
{
	union {
		struct shoal__ctl_hdr h;
		struct shoal__ctl_done d;
		struct shoal__ctl_error e;
	} rep;
	struct shoal__ctl_admin m;
	struct shoal_err err = { { 0 } };
	int fd, n, op;

	memset(a, 0, sizeof(*a));
	fd = admin_connect(system, a);
	if (fd < 0)
		return;
	memset(&m, 0, sizeof(m));
	shoal__ctl_init(&m.h, SHOAL__CTL_ADMIN, sizeof(m));
	m.what = what;
	snprintf(m.group, sizeof(m.group), "%s", group);
	n = shoal__ctl_send(fd, &m, sizeof(m));
	if (n < 0) {
		unreached(a, "system %s: cannot send the request: %s", system, strerror(-n));
		goto out;
	}
	n = shoal__ctl_readable(fd, timeout_ms);
	if (n == -ETIMEDOUT) {
		snprintf(a->msg, sizeof(a->msg), "system %s: no answer within %d s; what was "
			 "asked may still be done ('shoal stat %s' shows)", system,
			 timeout_ms / 1000, system);
		goto out;
	}
	n = shoal__ctl_recv(fd, &rep, sizeof(rep));
	op = n < 0 ? n : shoal__ctl_check(&rep, (size_t)n, &err);
	if (op == SHOAL__CTL_DONE) {
		a->reached = true;
		a->pid = rep.d.pid;
		snprintf(a->msg, sizeof(a->msg), "%s", rep.d.msg);
		snprintf(a->log_dir, sizeof(a->log_dir), "%s", rep.d.log_dir);
	} else if (op == SHOAL__CTL_ERROR) {
		a->reached = true;
		a->code = rep.e.err < 0 ? rep.e.err : -EPROTO;
		snprintf(a->msg, sizeof(a->msg), "%s", rep.e.msg);
	} else if (n == -ECONNRESET) {
		unreached(a, "system %s: %s", system, "its router closed the connection without "
			  "answering (it is stopping, or is an older build)");
	} else {
		unreached(a, "system %s: bad answer: %s", system, op < 0 && err.msg[0] ?
			  err.msg : strerror(-op));
	}
out:
	close(fd);
}

/* How a refusal counts: the supervisor could not be asked (3) or said no (1). */
static int answer_exit(const struct shoal__admin_answer *a)
{
	if (!a->reached || a->code == -EACCES || a->code == -ENOTSUP)
		return SHOAL_EXIT_ATTACH;
	return a->code < 0 ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
}

/* What was done, as text or JSON; a refusal is an error (shoal__cli_fail()). */
static void print_done(const struct shoal__cmd *cmd, bool json, const char *system,
		       const char *group, const struct shoal__admin_answer *a)
{
	struct shoal__json j;

	if (!json) {
		printf("%s\n", a->msg);
		return;
	}
	shoal__json_init(&j, stdout);
	shoal__json_doc_begin(&j, SHOAL_ADMIN_JSON_SCHEMA);
	shoal__json_string(&j, "command", cmd->name);
	shoal__json_string(&j, "system", system);
	if (group[0] != '\0')
		shoal__json_string(&j, "group", group);
	else
		shoal__json_null(&j, "group");
	shoal__json_string(&j, "message", a->msg);
	shoal__json_int(&j, "supervisor_pid", a->pid);
	shoal__json_object_end(&j);
}

int shoal__admin_cmd(const struct shoal__cmd *cmd, int argc, char **argv, uint32_t what,
		     int group_arg)
{
	enum { OPT_HELP = SHOAL_CLI_OPT_LONG, OPT_JSON, OPT_TIMEOUT };
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ NULL, 0, NULL, 0 },
	};
	struct shoal__admin_answer a;
	const char *system, *group;
	uint32_t secs = 60;
	bool json = false;
	int c, code, end;

	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_JSON:
			json = true;
			break;
		case OPT_TIMEOUT:
			if (shoal__cli_parse_uint(optarg, 86400, &secs) < 0 || secs == 0)
				return shoal__cli_usage_error(cmd, "--timeout takes a number of "
							      "seconds from 1 to 86400, not '%s'",
							      optarg);
			break;
		}
	}
	code = shoal__cli_system_group_args(cmd, argc, argv, group_arg, &system, &group);
	if (code >= 0)
		return code;
	if (group == NULL)
		group = "";
	shoal__admin_ask(system, what, group, (int)secs * 1000, &a);
	code = answer_exit(&a);
	if (code != SHOAL_EXIT_OK)
		return shoal__cli_fail(cmd->name, code, a.reached ? a.code : 0, "%s", a.msg);
	print_done(cmd, json, system, group, &a);
	return code;
}
