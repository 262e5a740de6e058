/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's group processes: launched, reaped, restarted by their
 * policy, and waited for.
 *
 * A process is launched by fork and exec (exec_child() says why not
 * posix_spawn), with its CPU set and environment made before the fork, and
 * prints into a pipe of its own that the supervisor reads (sup_out.c). Its
 * pidfd tells the moment it ends; a process whose pidfd_open() failed (say
 * for EMFILE) is polled with waitpid() every POLL_PID_NS instead, and that
 * is logged. When it ends, its last output is read before the news of its
 * end, then its restart policy decides: a process that stayed up STABLE_NS
 * resets the retry count and backoff; past max_retries, or on a failure
 * the policy does not restart, the group gives up.
 *
 * Every wait of the supervisor's (the loop, a stop level, a group a reload
 * stops) watches the groups' output too (struct waitset): a group blocked
 * on a full pipe could not stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numa.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/sup_impl.h"
#include "runtime/layout.h"
#include "shm/util.h"

#define STABLE_NS (10 * UINT64_C(1000000000))
/* A process without a pidfd (pidfd_open failed, e.g. EMFILE) is polled
 * with waitpid() this often, so its death is still seen. */
#define POLL_PID_NS (50 * UINT64_C(1000000))

/* How much of a group's output is read at once (shoal__sup_out_read()). */
#define OUT_BUDGET (64 * 1024)      /* read per wake-up, so that no group starves the loop */
#define OUT_LAST_BUDGET (1024 * 1024)   /* read after the process ended */

/* In struct waitset's map[]: group i's output, not its pidfd. */
#define OUT_BIT UINT32_C(0x80000000)

extern char **environ;

/* ---- launching ------------------------------------------------------------------------------- */

/*
 * The environment of a group process: ours, minus SHOAL_SYSTEM/SHOAL_GROUP,
 * plus the group's own entries, plus those two set for this group. Only the
 * last two strings are allocated here (free_child_env()).
 */
static char **child_env(const struct shoal__cfg_group *g, const char *system)
{
	size_t n = 0, k = 0, extra = 0;
	char **env;

	while (environ[n] != NULL)
		n++;
	while (g->env != NULL && g->env[extra] != NULL)
		extra++;
	env = calloc(n + extra + 3, sizeof(char *));
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SHOAL_SYSTEM=", 13) != 0 &&
		    strncmp(environ[i], "SHOAL_GROUP=", 12) != 0)
			env[k++] = environ[i];
	for (size_t i = 0; i < extra; i++)
		env[k++] = g->env[i];
	if (asprintf(&env[k], "SHOAL_SYSTEM=%s", system) < 0) {
		free(env);
		return NULL;
	}
	if (asprintf(&env[k + 1], "SHOAL_GROUP=%s", g->name) < 0) {
		free(env[k]);
		free(env);
		return NULL;
	}
	return env;
}

static void free_child_env(char **env)
{
	size_t n = 0;

	while (env[n] != NULL)
		n++;
	free(env[n - 1]);
	free(env[n - 2]);
	free(env);
}

/*
 * The CPU set group `g` is pinned to, as sched_setaffinity() takes it: in
 * *out (CPU_FREE() it), *size bytes, just large enough for its highest CPU.
 * NULL in *out when the group is not pinned. Returns 0 or -ENOMEM.
 */
static int child_cpus(const struct shoal__cfg_group *g, cpu_set_t **out, size_t *size)
{
	unsigned end = 0;

	*out = NULL;
	*size = 0;
	if (g->cpus == NULL)
		return 0;
	for (unsigned c = 0; c < SHOAL__CPUS_MAX; c++)
		if (numa_bitmask_isbitset(g->cpus, c))
			end = c + 1;
	*out = CPU_ALLOC(end);
	if (*out == NULL)
		return -ENOMEM;
	*size = CPU_ALLOC_SIZE(end);
	CPU_ZERO_S(*size, *out);
	for (unsigned c = 0; c < end; c++)
		if (numa_bitmask_isbitset(g->cpus, c))
			CPU_SET_S(c, *size, *out);
	return 0;
}

static void exec_child(const struct shoal__cfg_group *g, char **env, const sigset_t *mask,
		       int out_fd, const cpu_set_t *cpus, size_t cpus_size)
{
	static const char unpinned[] = "shoal: sched_setaffinity refused the group's cpus; "
				       "it runs unpinned\n";

	/*
	 * Runs between fork and exec in a copy of a threaded process (the
	 * router's dispatchers, waker, control thread): system calls only,
	 * nothing that allocates or locks, as another thread may have held
	 * that lock at the fork (under ASan a malloc here can hang for good).
	 * Not posix_spawn: glibc 2.36 has no attribute for the parent-death
	 * signal or the CPU affinity, and both must hold before the program
	 * runs.
	 */
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (out_fd >= 0) {   /* dup2() clears close-on-exec on 1 and 2 only */
		dup2(out_fd, STDOUT_FILENO);
		dup2(out_fd, STDERR_FILENO);
	}
	signal(SIGPIPE, SIG_DFL);                /* the supervisor ignores it */
	sigprocmask(SIG_SETMASK, mask, NULL);   /* the supervisor blocks them */
	/* Said where its output goes (a CPU offline since the start, say). */
	if (cpus != NULL && sched_setaffinity(0, cpus_size, cpus) != 0)
		(void)shoal__sup_write_all(STDERR_FILENO, unpinned, sizeof(unpinned) - 1);
	execve(g->program, g->argv, env);
	_exit(127);
}

/*
 * The pipe group i's process will print into: its read end in i's gout, the
 * write end returned (-1: none, and the process prints where we do).
 */
static int out_pipe(struct sup *s, uint32_t i)
{
	struct gout *o = s->procs[i].out;
	int p[2];

	if (o->fd >= 0)
		shoal__sup_out_close(s, i);
	if (pipe2(p, O_CLOEXEC) != 0) {
		shoal__sup_event(s, "group %s: no pipe for its output (%s): it prints where shoal "
				 "run does", s->cfg->groups[i].name, strerror(errno));
		return -1;
	}
	/* Only our end is non-blocking: the process writes as to any pipe. */
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	o->fd = p[0];
	return p[1];
}

int shoal__sup_launch(struct sup *s, uint32_t i)
{
	const struct shoal__cfg_group *g = &s->cfg->groups[i];
	struct proc *p = &s->procs[i];
	char **env = child_env(g, s->cfg->system);
	cpu_set_t *cpus;
	size_t cpus_size;
	sigset_t none;
	int pidfd_err, out_fd;
	pid_t pid;

	if (env == NULL)
		return -ENOMEM;
	/* Made before the fork: the child may not allocate (exec_child()). */
	if (child_cpus(g, &cpus, &cpus_size) < 0) {
		free_child_env(env);
		return -ENOMEM;
	}
	/* A stop the last process never saw (it ended before attaching, or
	 * none ran) must not stop this one as it attaches. */
	shoal_router_resume_group(s->router, p->id);
	out_fd = out_pipe(s, i);
	sigemptyset(&none);
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		exec_child(g, env, &none, out_fd, cpus, cpus_size);
	free_child_env(env);
	if (cpus != NULL)
		CPU_FREE(cpus);
	if (out_fd >= 0)
		close(out_fd);
	if (pid < 0) {
		shoal__sup_event(s, "group %s: cannot fork: %s", g->name, strerror(errno));
		shoal__sup_out_close(s, i);
		return -errno;
	}
	p->pid = pid;
	p->pidfd = pidfd_open(pid, 0);
	pidfd_err = p->pidfd < 0 ? errno : 0;
	p->started_ns = shoal__now_ns();
	p->restart_at_ns = 0;
	p->stopping = false;
	shoal__sup_event(s, "group %s: started pid %d", g->name, (int)pid);
	if (p->pidfd < 0)
		shoal__sup_event(s, "group %s: pidfd_open: %s; watching pid %d with waitpid() "
				 "every %llu ms instead", g->name, strerror(pidfd_err), (int)pid,
				 (unsigned long long)(POLL_PID_NS / 1000000));
	return 0;
}

/* ---- the end of a process -------------------------------------------------------------------- */

static void describe_exit(char *buf, size_t len, int status)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "ended (status 0x%x)", status);
}

/* Mark a group failed (sends to it fail with -EHOSTDOWN, what is routed
 * to it is dropped and counted) and apply its on_give_up. */
static void give_up(struct sup *s, struct proc *p, const struct shoal__cfg_group *g,
		    const char *why)
{
	p->failed = true;
	s->failure = true;
	shoal_router_fail_group(s->router, p->id);
	shoal__sup_event(s, "group %s: %s; giving up", g->name, why);
	if (g->on_failure == SHOAL__FAIL_STOP)
		shoal__sup_begin_stop(s, "a group gave up and its policy stops the system", true);
}

static void on_exit_of(struct sup *s, uint32_t i, int status)
{
	const struct shoal__cfg_group *g = &s->cfg->groups[i];
	struct proc *p = &s->procs[i];
	bool failed_exit = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	uint64_t now = shoal__now_ns();
	bool restart;
	char how[96];

	describe_exit(how, sizeof(how), status);
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
	p->pid = 0;
	p->last_status = status;
	shoal__sup_event(s, "group %s: %s", g->name, how);
	if (p->stopping || s->stop_requested) {
		if (failed_exit && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && p->stopping))
			s->failure = true;
		if (!s->stop_requested)
			shoal__sup_tool_stop_done(s, i, how);
		return;
	}
	if (p->retired)
		return;
	restart = g->restart == SHOAL__RESTART_ALWAYS ||
		  (g->restart == SHOAL__RESTART_ON_FAILURE && failed_exit);
	if (!restart) {
		/* A failure the policy will not restart: the group gives up at once. */
		if (failed_exit)
			give_up(s, p, g, "its restart policy is never");
		return;
	}
	if (now - p->started_ns >= STABLE_NS) {
		p->retries = 0;
		p->backoff_ms = g->backoff_ms;
	}
	if (g->max_retries >= 0 && p->retries >= g->max_retries) {
		char why[64];

		snprintf(why, sizeof(why), "failed after %d restart%s", p->retries,
			 p->retries == 1 ? "" : "s");
		give_up(s, p, g, why);
		return;
	}
	p->retries++;
	p->restart_at_ns = now + (uint64_t)p->backoff_ms * 1000000u;
	shoal__sup_event(s, "group %s: restart %d in %u ms", g->name, p->retries, p->backoff_ms);
	p->backoff_ms = p->backoff_ms * 2 > g->max_backoff_ms ? g->max_backoff_ms
							       : p->backoff_ms * 2;
}

static void reap(struct sup *s, uint32_t i)
{
	struct proc *p = &s->procs[i];
	siginfo_t si;
	int status;

	if (p->pid == 0)
		return;
	if (p->pidfd < 0) {
		if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
			shoal__sup_out_read(s, i, OUT_LAST_BUDGET, true);
			on_exit_of(s, i, status);
		}
		return;
	}
	memset(&si, 0, sizeof(si));
	if (waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED | WNOHANG) != 0 || si.si_pid == 0)
		return;
	status = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0)
					  : W_EXITCODE(0, si.si_status);
	/* Its last words before the news of its end. */
	shoal__sup_out_read(s, i, OUT_LAST_BUDGET, true);
	on_exit_of(s, i, status);
}

/* ---- waiting --------------------------------------------------------------------------------- */

/* Reap the processes that have no pidfd; returns how many are left. */
static uint32_t reap_unwatched(struct sup *s)
{
	uint32_t left = 0;

	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if (s->procs[i].pid != 0 && s->procs[i].pidfd < 0) {
			reap(s, i);
			left += s->procs[i].pid != 0;
		}
	return left;
}

/* A poll() timeout of at most `ms`, shortened while some process has no
 * pidfd to wake us. */
int shoal__sup_poll_ms(struct sup *s, uint64_t ms)
{
	if (reap_unwatched(s) > 0 && ms > POLL_PID_NS / 1000000)
		ms = POLL_PID_NS / 1000000;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/*
 * Add to w the pidfd of group `only`'s process (of every group's when `only`
 * is negative) and every group's output pipe: while the supervisor waits for
 * anything, the groups' output keeps flowing (a group blocked on a full pipe
 * could not stop).
 */
void shoal__sup_watch_groups(const struct sup *s, struct waitset *w, int only)
{
	w->first = w->n;
	for (uint32_t i = 0; i < s->cfg->n_groups; i++) {
		const struct proc *p = &s->procs[i];

		if (p->pid != 0 && p->pidfd >= 0 && (only < 0 || (uint32_t)only == i)) {
			w->pfd[w->n] = (struct pollfd){ .fd = p->pidfd, .events = POLLIN };
			w->map[w->n++] = i;
		}
		if (p->out != NULL && p->out->fd >= 0) {
			w->pfd[w->n] = (struct pollfd){ .fd = p->out->fd, .events = POLLIN };
			w->map[w->n++] = i | OUT_BIT;
		}
	}
}

/* After poll(): reap the processes that ended, pass on what groups printed. */
void shoal__sup_serve_groups(struct sup *s, const struct waitset *w)
{
	for (uint32_t k = w->first; k < w->n; k++) {
		if (!w->pfd[k].revents)
			continue;
		if (w->map[k] & OUT_BIT)
			shoal__sup_out_read(s, w->map[k] & ~OUT_BIT, OUT_BUDGET, false);
		else
			reap(s, w->map[k]);
	}
}

/* Wait up to `ms` for group `only`'s process (any, if negative) to end,
 * serving every group's output meanwhile. */
void shoal__sup_wait_groups(struct sup *s, int only, uint64_t ms)
{
	struct waitset w = { .n = 0 };

	shoal__sup_watch_groups(s, &w, only);
	if (poll(w.pfd, w.n, shoal__sup_poll_ms(s, ms)) > 0)
		shoal__sup_serve_groups(s, &w);
}
