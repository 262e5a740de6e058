/* SPDX-License-Identifier: MIT */
/*
 * Supervisor: one thread, one poll loop over a signalfd (SIGINT, SIGTERM,
 * SIGHUP), a pidfd per group process, so a death is seen the moment it
 * happens (a process whose pidfd_open() failed, say for EMFILE, is polled
 * with waitpid() every POLL_PID_NS instead, and that is logged), the pipe
 * each group process prints into (read without blocking, passed on by line)
 * and the pipe of lifecycle requests the router's control thread hands over
 * (supervisor.h). SIGPIPE is ignored: a reader of our output, or a tool
 * waiting for an answer, that goes away costs that output only; our output
 * is written by a thread of its own, so a reader that stops reading costs
 * lines, never the loop (sup_out.c). Everything else (timers for restarts
 * with exponential backoff, stop timeouts of groups stopped on request, the
 * stop sequence, the status line) hangs off that loop's timeout. Every other wait (a stop level, a group a reload
 * stops) serves the groups' output too: a group blocked on a full pipe could
 * not stop. A service manager, if any (o->notify), is told when every group
 * is up, around each reload and when the stop begins.
 *
 * Lifecycle of one group process:
 *  1. launched: fork, own process group (a terminal's Ctrl-C reaches only
 *     the supervisor, which stops groups in order), CPU affinity, parent
 *     death signal SIGTERM (a killed supervisor does not leave groups
 *     running), exec with SHOAL_SYSTEM and SHOAL_GROUP set.
 *  2. exits: the pidfd becomes readable; the status is reaped. The router
 *     has already marked the group down (its control socket closed), so
 *     messages routed to it queue in its mailbox.
 *  3. restart decision: policy never / on-failure / always. A process that
 *     stayed up STABLE_NS resets the retry count and backoff. Past
 *     max_retries the group is marked failed (sends to it fail with
 *     -EHOSTDOWN) and the system continues or stops, per on_give_up.
 *  4. stop: groups are stopped by ascending stop order, each level asked to
 *     drain through its mailbox and given its timeout, then SIGKILLed.
 *  5. stop on request (`shoal stop SYSTEM GROUP`): the same for one group,
 *     while the loop runs; the group is then held (the router shows it
 *     stopped), never restarted, until `shoal restart` (which stops a
 *     running one the same way, then starts it at once). Every start
 *     withdraws a stop the router still holds for a process that never
 *     attached (shoal_router_resume_group()).
 *
 * Its files, one idea each, share the state in sup_impl.h:
 *   supervisor.c   setup, the loop, signals, telling o->notify
 *   sup_out.c      our output: events, the status line, the groups' lines
 *   sup_proc.c     group processes: launch, end, restart policy, the waits
 *   sup_stop.c     the stop sequence (lifecycle step 4)
 *   sup_admin.c    lifecycle requests: shoal stop, restart, reload (step 5)
 *   sup_hosts.c    the bridge group, routes to other hosts, hosts marked down
 *   sup_reload.c   re-reading the system file while it runs
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/sup_impl.h"
#include "runtime/layout.h"
#include "shm/util.h"

#define TICK_NS (500 * UINT64_C(1000000))
/* Until every group is up, with someone to tell (o->notify), the loop looks
 * this often. */
#define READY_POLL_NS (20 * UINT64_C(1000000))

/* ---- router setup ------------------------------------------------------------------------- */

/* The folder of the groups' log files: made 0700 if it does not exist. */
static int make_log_dir(const char *dir, struct shoal_err *err)
{
	struct stat st;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return shoal__fail(err, -errno, "--log-dir %s: %s", dir, strerror(errno));
	if (stat(dir, &st) != 0)
		return shoal__fail(err, -errno, "--log-dir %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return shoal__fail(err, -ENOTDIR, "--log-dir %s: not a directory", dir);
	return 0;
}

int shoal__sup_load_config(const char *path, const char *name, struct shoal__config **out,
			   struct shoal_err *err)
{
	char seg[SHOAL_SEG_NAME_MAX];
	int ret = shoal__config_load(path, out, err);

	if (ret < 0 || name == NULL)
		return ret;
	ret = shoal__check_name(name, "system", err);
	for (uint32_t i = 0; ret == 0 && i < (*out)->n_groups; i++)
		if (shoal__name_mailbox(seg, name, (*out)->groups[i].name) < 0)
			ret = shoal__fail(err, -EINVAL, "%s: under the name %s, group %s's mailbox "
					  "name shoal.%s.g.%s would be longer than the %d "
					  "characters of a segment name: choose a shorter name",
					  path, name, (*out)->groups[i].name, name,
					  (*out)->groups[i].name, SHOAL_SEG_NAME_MAX - 1);
	if (ret < 0) {
		shoal__config_free(*out);
		*out = NULL;
		return ret;
	}
	snprintf((*out)->system, sizeof((*out)->system), "%s", name);
	return 0;
}

/* The file's message types, so that a program that disagrees is refused. */
int shoal__sup_declare_types(struct sup *s, const struct shoal__config *c, struct shoal_err *err)
{
	for (uint32_t i = 0; i < c->n_types; i++) {
		const struct shoal__cfg_type *t = &c->types[i];
		int ret = shoal_router_declare_type(s->router, t->id, t->name, t->max_size, err);

		if (ret < 0)
			return ret;
	}
	return 0;
}

static int declare_groups(struct sup *s, struct shoal_err *err)
{
	for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
		const struct shoal__cfg_group *g = &s->cfg->groups[i];
		struct shoal_group_spec spec = { g->name, g->workers, g->actors, g->node, g->mailbox,
						 g->overflow };
		int id = shoal__router_group_on(s->router, &spec,
						shoal__sup_remote_host(s, s->cfg, i), err);

		if (id < 0)
			return id;
		s->procs[i].id = id;
		s->procs[i].backoff_ms = g->backoff_ms;
		s->procs[i].out = shoal__sup_out_new(s, g->name, s->log_dir);
		if (s->procs[i].out == NULL)
			return -ENOMEM;
	}
	return 0;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* How many of c's groups run on this host (all of them without hosts). */
static uint32_t local_groups(const struct shoal__config *c, int host)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->n_groups; i++)
		n += shoal__config_runs(c, host, i);
	return n;
}

/*
 * Tell o->notify READY once a process of every group has attached. The
 * router's attach does not wake the loop: it looks again at each turn,
 * and turns often until then (READY_POLL_NS).
 */
/* What router.stream chose, and on what (docs/design.md, "Streamed copies"). */
static void say_stream(struct sup *s)
{
	uint32_t ns;
	bool on = shoal_router_stream(s->router, &ns) == 1;

	if (s->cfg->stream != SHOAL_STREAM_AUTO)
		shoal__sup_event(s, "streamed copies %s (router.stream)", on ? "on" : "off");
	else if (ns == 0)
		shoal__sup_event(s, "streamed copies off (router.stream auto: no two CPUs to "
				 "time a line between)");
	else
		shoal__sup_event(s, "streamed copies %s (router.stream auto: a cache line's round "
				 "trip between two CPUs took %u ns)", on ? "on" : "off", ns);
}

static void check_ready(struct sup *s)
{
	char text[160];
	uint32_t up = 0;

	if (s->ready || s->o->notify == NULL)
		return;
	for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
		const struct proc *p = &s->procs[i];

		/* A group of another host attaches there, never here. */
		if (p->failed || p->held || !shoal__config_runs(s->cfg, s->host, i))
			continue;
		if (shoal_router_group_pid(s->router, p->id) == 0)
			return;
		up++;
	}
	s->ready = true;
	snprintf(text, sizeof(text), "system %s: %u of %u groups running", s->cfg->system, up,
		 local_groups(s->cfg, s->host));
	s->o->notify(SHOAL__SUP_READY, text);
}

static void on_signal(struct sup *s)
{
	struct signalfd_siginfo si;

	while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
		struct shoal_err err = { { 0 } };

		if (si.ssi_signo == SIGHUP)
			shoal__sup_reload(s, &err);
		else
			shoal__sup_begin_stop(s, si.ssi_signo == SIGINT ? "interrupted" :
					      "terminated", false);
	}
}

static void run_loop(struct sup *s)
{
	while (!s->stop_requested) {
		struct waitset w = { .n = 2 };
		uint64_t now = shoal__now_ns(), wake = now + TICK_NS, kill_at;

		w.pfd[0] = (struct pollfd){ .fd = s->sigfd, .events = POLLIN };
		w.pfd[1] = (struct pollfd){ .fd = s->admin_rd, .events = POLLIN };
		shoal__sup_watch_groups(s, &w, -1);
		kill_at = shoal__sup_tool_stop_deadlines(s, now);
		if (kill_at < wake)
			wake = kill_at;
		for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
			struct proc *p = &s->procs[i];

			if (p->pid == 0 && p->restart_at_ns != 0 && p->restart_at_ns < wake)
				wake = p->restart_at_ns;
		}
		if (s->o->duration_ns > 0 && s->start_ns + (uint64_t)s->o->duration_ns < wake)
			wake = s->start_ns + (uint64_t)s->o->duration_ns;
		if (s->o->notify != NULL && !s->ready && now + READY_POLL_NS < wake)
			wake = now + READY_POLL_NS;
		if (poll(w.pfd, w.n,
			 shoal__sup_poll_ms(s, wake > now ? (wake - now) / 1000000 + 1 : 0)) > 0) {
			shoal__sup_serve_groups(s, &w);
			if (w.pfd[0].revents)
				on_signal(s);
			else if (w.pfd[1].revents)
				shoal__sup_on_admin(s);
		}
		now = shoal__now_ns();
		for (uint32_t i = 0; i < s->cfg->n_groups && !s->stop_requested; i++) {
			struct proc *p = &s->procs[i];

			if (p->pid == 0 && p->restart_at_ns != 0 && p->restart_at_ns <= now)
				shoal__sup_launch(s, i);
		}
		if (s->o->duration_ns > 0 && now - s->start_ns >= (uint64_t)s->o->duration_ns)
			shoal__sup_begin_stop(s, "the requested duration has passed", false);
		if (!s->stop_requested) {
			check_ready(s);
			shoal__sup_check_hosts(s);
		}
		if (now - s->last_tick_ns >= TICK_NS)
			shoal__sup_status(s, now);
	}
}

int shoal__supervise(const struct shoal__sup_opts *o, struct shoal_err *err)
{
	struct shoal_router_opts ro = { 0 };
	struct shoal__config_space space;
	struct sup s = { .o = o, .sigfd = -1, .admin_rd = -1, .admin_wr = -1 };
	int admin[2];
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_pipe;
	sigset_t mask, old;
	uint64_t lost;
	int ret;

	ret = shoal__sup_load_config(o->config, o->name, &s.cfg, err);
	if (ret < 0)
		return ret;
	ret = shoal__config_this_host(s.cfg, o->host, &s.host, err);
	if (ret == 0)
		ret = shoal__config_check_cpus(s.cfg, s.host, err);
	if (ret == 0)
		ret = shoal__sup_add_bridge(&s, s.cfg, err);
	if (ret < 0) {
		shoal__config_free(s.cfg);
		return ret;
	}
	if (o->log_dir != NULL) {
		ret = make_log_dir(o->log_dir, err);
		/* Absolute, for `shoal logs` run from another folder. */
		if (ret == 0 && (s.log_dir = realpath(o->log_dir, NULL)) == NULL)
			ret = shoal__fail(err, -errno, "--log-dir %s: %s", o->log_dir,
					  strerror(errno));
	}
	if (ret == 0)
		ret = shoal__config_check_space(s.cfg, NULL, &space, err);
	if (ret == 0 && (s.procs = calloc(s.cfg->n_groups, sizeof(*s.procs))) == NULL)
		ret = -ENOMEM;
	if (ret < 0) {
		free(s.log_dir);
		shoal__config_free(s.cfg);
		return ret;
	}
	for (uint32_t i = 0; i < s.cfg->n_groups; i++) {
		s.procs[i].pidfd = -1;
		s.procs[i].waiter = -1;
	}
	shoal__sup_name_width(&s);
	s.live = o->status == SHOAL__STATUS_LIVE ||
		 (o->status == SHOAL__STATUS_AUTO && isatty(fileno(o->out)));
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, &old);
	/* Whoever reads our output may go away: writes then fail with EPIPE
	 * (and are dropped), they never kill the supervisor and strand the
	 * system's segments and groups. */
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, &old_pipe);
	/* After the mask: the writer thread takes none of these signals. */
	ret = shoal__sup_out_start(&s);
	if (ret < 0) {
		ret = shoal__fail(err, ret, "cannot start the thread that writes the output: %s",
				  strerror(-ret));
		goto out;
	}
	s.sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (s.sigfd >= 0 && pipe2(admin, O_CLOEXEC | O_NONBLOCK) == 0) {
		s.admin_rd = admin[0];
		s.admin_wr = admin[1];
	}
	ro.system = s.cfg->system;
	ro.mode = s.cfg->mode;
	ro.spin_ns = s.cfg->spin_ns;
	ro.yield_ns = s.cfg->yield_ns;
	ro.wake_deadline_ns = s.cfg->wake_deadline_ns;
	ro.uplink_capacity = s.cfg->uplink_capacity;
	ro.inbound_capacity = s.cfg->inbound_capacity;
	ro.direct_capacity = s.cfg->direct_capacity;
	ro.stream = s.cfg->stream;
	ret = s.admin_rd < 0 ? -errno : shoal_router_start(&s.router, &ro, err);
	if (ret == 0) {
		shoal__control_admin(s.router, s.admin_wr);
		ret = shoal__sup_declare_types(&s, s.cfg, err);
	}
	if (ret == 0) {
		shoal__router_bridge_rings(s.router, shoal__sup_bridge_of(&s, s.cfg) >= 0);
		ret = declare_groups(&s, err);
	}
	if (ret == 0) {
		int bridge = shoal__sup_bridge_of(&s, s.cfg);

		shoal__router_set_bridge(s.router, bridge < 0 ? -1 : s.procs[bridge].id,
					 (uint32_t)s.cfg->link.spin_ns);
		ret = shoal__sup_apply_routes(&s, s.cfg, s.procs, err);
	}
	if (ret < 0)
		goto out;
	s.start_ns = shoal__now_ns();
	shoal__sup_event(&s, "system %s: router pid %d, %u groups, %u routes (%s)", s.cfg->system,
			 (int)getpid(), s.cfg->n_groups, s.cfg->n_routes, s.cfg->path);
	say_stream(&s);
	if (s.host >= 0 && s.cfg->n_hosts > 1)
		shoal__sup_event(&s, "host %s: %u of the file's %u groups run here, and the bridge "
				 "to the %u other host%s", o->host, local_groups(s.cfg, s.host) - 1,
				 s.cfg->n_groups - 1, s.cfg->n_hosts - 1,
				 s.cfg->n_hosts > 2 ? "s" : "");
	else if (s.host >= 0)
		shoal__sup_event(&s, "host %s: the only host of the file", o->host);
	for (uint32_t i = 0; i < s.cfg->n_groups; i++)
		if (shoal__config_runs(s.cfg, s.host, i))
			shoal__sup_launch(&s, i);
	run_loop(&s);
	shoal__sup_stop_all(&s);
	shoal__sup_wait_detached(&s);
	lost = shoal__router_count_stranded(s.router);
	if (lost > 0)
		shoal__sup_event(&s, "%llu message%s still queued for groups that stopped without "
				 "draining them, or unrouted from them: counted as lost "
				 "(lost_queued)", (unsigned long long)lost,
				 lost == 1 ? " was" : "s were");
	shoal__sup_status(&s, shoal__now_ns());
	shoal__sup_clear_status(&s);
	shoal__sup_event(&s, "system %s stopped%s", s.cfg->system,
			 s.failure ? " with failures" : "");
	ret = s.failure ? 1 : 0;
out:
	shoal_router_destroy(s.router);
	shoal__sup_admin_finish(&s);
	if (s.sigfd >= 0)
		close(s.sigfd);
	shoal__sup_out_stop(&s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	for (uint32_t i = 0; i < s.cfg->n_groups; i++)
		shoal__sup_out_free(s.procs[i].out);
	free(s.procs);
	free(s.log_dir);
	shoal__config_free(s.cfg);
	return ret;
}
