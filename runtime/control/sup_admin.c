/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's lifecycle requests (`shoal stop`, `restart`, `reload`):
 * the router's control thread hands each one over, with its connection,
 * through the pipe s->admin_rd (supervisor.h), and the supervisor answers
 * it there, DONE or ERROR, and closes the connection. An answer never
 * waits: the connection is non-blocking and holds this one reply.
 *
 * A group stopped on request stops as a level of the stop sequence does,
 * while the loop runs: asked through its mailbox, given its stop timeout
 * before SIGKILL (the loop keeps the time, shoal__sup_tool_stop_deadlines()),
 * and its tool is answered once the process has ended. The group is then
 * held (the router shows it stopped), never restarted, until `shoal
 * restart`, which stops a running one the same way, then starts it at once.
 * Tools that asked the whole system to stop are answered once it has
 * (shoal__sup_admin_finish()).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/proto.h"
#include "runtime/control/sup_impl.h"
#include "shm/util.h"

/*
 * Answer a tool's request on its connection `fd` and close it: DONE with
 * the text, or ERROR `code` (< 0). The connection is non-blocking and holds
 * this one reply: the send never waits.
 */
__attribute__((format(printf, 4, 5)))
static void admin_reply(struct sup *s, int fd, int code, const char *fmt, ...)
{
	struct shoal__ctl_done d;
	va_list ap;

	memset(&d, 0, sizeof(d));
	va_start(ap, fmt);
	vsnprintf(d.msg, sizeof(d.msg), fmt, ap);
	va_end(ap);
	if (code < 0) {
		shoal__ctl_send_error(fd, code, d.msg);
	} else {
		shoal__ctl_init(&d.h, SHOAL__CTL_DONE, sizeof(d));
		d.pid = (int32_t)getpid();
		snprintf(d.log_dir, sizeof(d.log_dir), "%s", s->log_dir ? s->log_dir : "");
		shoal__ctl_send(fd, &d, sizeof(d));
	}
	close(fd);
}

/* ---- stop and restart on request ------------------------------------------------------------- */

/* Is a group being stopped or restarted on a tool's request? */
bool shoal__sup_tool_pending(const struct sup *s)
{
	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if (s->procs[i].waiter >= 0 || s->procs[i].restarting)
			return true;
	return false;
}

/*
 * Group i's process, stopping on request, has ended (`how`): start it again
 * for a restart, or leave it stopped; answer the tool that asked.
 */
void shoal__sup_tool_stop_done(struct sup *s, uint32_t i, const char *how)
{
	const struct shoal__cfg_group *g = &s->cfg->groups[i];
	struct proc *p = &s->procs[i];
	int fd = p->waiter, ret;

	p->kill_at_ns = 0;
	p->waiter = -1;
	if (!p->restarting) {
		if (fd >= 0)
			admin_reply(s, fd, 0, "group %s stopped: its process %s; it stays stopped "
				    "until 'shoal restart %s %s'", g->name, how, s->cfg->system,
				    g->name);
		return;
	}
	p->restarting = false;
	p->stopping = false;
	p->retries = 0;
	p->backoff_ms = g->backoff_ms;
	ret = shoal__sup_launch(s, i);
	if (fd < 0)
		return;
	if (ret < 0)
		admin_reply(s, fd, ret, "group %s stopped (its process %s) but did not start "
			    "again: %s", g->name, how, strerror(-ret));
	else
		admin_reply(s, fd, 0, "group %s restarted: pid %d (the previous process %s)",
			    g->name, (int)p->pid, how);
}

/*
 * `shoal stop SYSTEM GROUP` (restart false) or `shoal restart SYSTEM GROUP`:
 * ask group i's process to stop through its mailbox, as the stop sequence
 * does, with its stop timeout before SIGKILL (run_loop() keeps the time);
 * the tool on `fd` is answered when it has ended (shoal__sup_tool_stop_done()).
 */
static void tool_stop(struct sup *s, uint32_t i, int fd, bool restart)
{
	const struct shoal__cfg_group *g = &s->cfg->groups[i];
	struct proc *p = &s->procs[i];

	if (p->waiter >= 0 || p->restarting) {
		admin_reply(s, fd, -EBUSY, "group %s is already being stopped or restarted on "
			    "request: try again once that is done", g->name);
		return;
	}
	if (p->pid == 0 && !restart) {
		p->restart_at_ns = 0;
		shoal_router_stop_group(s->router, p->id);   /* shown stopped, not down */
		admin_reply(s, fd, 0, "group %s was not running%s; it stays stopped until "
			    "'shoal restart %s %s'", g->name, p->held ? " (stopped on request)" :
			    p->failed ? " (it had given up)" : "", s->cfg->system, g->name);
		p->held = true;
		return;
	}
	if (p->pid == 0) {
		int ret;

		if (p->failed) {
			admin_reply(s, fd, -EHOSTDOWN, "group %s gave up and is marked failed: "
				    "restart the system to bring it back", g->name);
			return;
		}
		p->held = false;
		p->restart_at_ns = 0;
		p->retries = 0;
		p->backoff_ms = g->backoff_ms;
		p->stopping = false;
		ret = shoal__sup_launch(s, i);
		if (ret < 0)
			admin_reply(s, fd, ret, "group %s did not start: %s", g->name,
				    strerror(-ret));
		else
			admin_reply(s, fd, 0, "group %s started: pid %d (it was not running)",
				    g->name, (int)p->pid);
		return;
	}
	p->held = !restart;
	p->restarting = restart;
	p->stopping = true;
	p->restart_at_ns = 0;
	p->kill_at_ns = shoal__now_ns() + (uint64_t)g->stop_timeout_ms * 1000000u;
	p->waiter = fd;
	shoal_router_stop_group(s->router, p->id);
	shoal__sup_event(s, "group %s: stopping (asked by shoal %s)", g->name,
			 restart ? "restart" : "stop");
}

/* Processes stopping on request past their stop timeout are killed. Returns
 * the nearest deadline still to come (UINT64_MAX: none). */
uint64_t shoal__sup_tool_stop_deadlines(struct sup *s, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
		struct proc *p = &s->procs[i];

		if (p->pid == 0 || p->kill_at_ns == 0)
			continue;
		if (now < p->kill_at_ns) {
			next = p->kill_at_ns < next ? p->kill_at_ns : next;
			continue;
		}
		shoal__sup_event(s, "group %s: did not stop within %u ms; killing it",
				 s->cfg->groups[i].name, s->cfg->groups[i].stop_timeout_ms);
		kill(p->pid, SIGKILL);
		p->kill_at_ns = 0;
	}
	return next;
}

/* ---- the requests ---------------------------------------------------------------------------- */

/* "a, b, c": the system's group names, for an error that names a wrong one. */
static void group_list(const struct sup *s, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < s->cfg->n_groups && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "",
				      s->cfg->groups[i].name);
}

/* One lifecycle request, handed over by the control thread (supervisor.h). */
static void admin_request(struct sup *s, const struct shoal__admin_req *q)
{
	const struct shoal__ctl_admin *m = &q->m;
	struct shoal_err err = { { 0 } };
	char names[160];
	int i = -1;

	if (m->group[0] != '\0' && (i = shoal__config_group(s->cfg, m->group)) < 0) {
		group_list(s, names, sizeof(names));
		admin_reply(s, q->fd, -ENOENT, "system %s has no group '%s' (its groups: %s)",
			    s->cfg->system, m->group, names);
		return;
	}
	if (i >= 0 && !shoal__config_runs(s->cfg, s->host, (uint32_t)i)) {
		admin_reply(s, q->fd, -EREMOTE, "group %s runs on host %s, not here (host %s): "
			    "ask the shoal run of that host", m->group,
			    s->cfg->hosts[s->cfg->groups[i].host].name, s->o->host);
		return;
	}
	switch (m->what) {
	case SHOAL__ADMIN_STOP:
		if (i >= 0) {
			tool_stop(s, (uint32_t)i, q->fd, false);
		} else if (s->n_stop_waiters < sizeof(s->stop_waiters) / sizeof(int)) {
			s->stop_waiters[s->n_stop_waiters++] = q->fd;
			shoal__sup_begin_stop(s, "asked by shoal stop", false);
		} else {
			shoal__sup_begin_stop(s, "asked by shoal stop", false);
			admin_reply(s, q->fd, 0, "system %s is stopping", s->cfg->system);
		}
		break;
	case SHOAL__ADMIN_RESTART:
		tool_stop(s, (uint32_t)i, q->fd, true);
		break;
	case SHOAL__ADMIN_RELOAD:
		shoal__sup_event(s, "reload asked by shoal reload");
		if (shoal__sup_reload(s, &err) < 0)
			admin_reply(s, q->fd, -EINVAL, "reload refused, nothing changed: %s",
				    err.msg);
		else
			admin_reply(s, q->fd, 0, "system %s reloaded: %u groups, %u routes "
				    "published", s->cfg->system, s->cfg->n_groups,
				    s->cfg->n_routes);
		break;
	default:
		admin_reply(s, q->fd, 0, "system %s: supervisor pid %d, %u groups",
			    s->cfg->system, (int)getpid(), s->cfg->n_groups);
		break;
	}
}

void shoal__sup_on_admin(struct sup *s)
{
	struct shoal__admin_req q;

	while (!s->stop_requested && read(s->admin_rd, &q, sizeof(q)) == (ssize_t)sizeof(q))
		admin_request(s, &q);
}

/*
 * The system has stopped and its router is gone (no more requests come):
 * answer every tool still waiting, and close the pipe.
 */
void shoal__sup_admin_finish(struct sup *s)
{
	struct shoal__admin_req q;

	shoal__control_admin(NULL, -1);
	if (s->admin_rd < 0)
		return;
	while (read(s->admin_rd, &q, sizeof(q)) == (ssize_t)sizeof(q)) {
		if (q.m.what == SHOAL__ADMIN_STOP && q.m.group[0] == '\0' &&
		    s->n_stop_waiters < sizeof(s->stop_waiters) / sizeof(int))
			s->stop_waiters[s->n_stop_waiters++] = q.fd;
		else
			admin_reply(s, q.fd, -ESHUTDOWN, "system %s stopped before this request "
				    "was served", s->cfg->system);
	}
	for (unsigned k = 0; k < s->n_stop_waiters; k++)
		admin_reply(s, s->stop_waiters[k], 0, "system %s stopped%s", s->cfg->system,
			    s->failure ? " with failures (see its output)" : "");
	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if (s->procs[i].waiter >= 0)
			admin_reply(s, s->procs[i].waiter, -ESHUTDOWN, "system %s stopped while "
				    "group %s was stopping", s->cfg->system, s->cfg->groups[i].name);
	close(s->admin_rd);
	close(s->admin_wr);
}
