/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's state (`shoal run`), shared by its files. Private.
 * Everything here belongs to the supervisor's one thread, except struct
 * outq, which it shares with the thread that writes its output, under the
 * queue's lock (sup_out.c).
 */
#ifndef SHOAL_RUNTIME_SUP_IMPL_H
#define SHOAL_RUNTIME_SUP_IMPL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/control/supervisor.h"

/*
 * A group process's standard output and error: one pipe for both, so that
 * their lines keep the order the process wrote them in. The supervisor reads
 * it without blocking, in its poll loop, and passes on whole lines.
 */
#define SHOAL__SUP_LINE_MAX 4096     /* a longer line is cut here, with a mark */

struct gout {
	int fd;                      /* read end, non-blocking; -1: none (no pipe, or ended) */
	int log_fd;                  /* DIR/GROUP.log with --log-dir, else -1 */
	size_t len;                  /* bytes of a partial line held in buf */
	bool cutting;                /* dropping the rest of a line cut at SHOAL__SUP_LINE_MAX */
	char buf[SHOAL__SUP_LINE_MAX];
};

/* Our own output's queue to the thread that writes it (sup_out.c says how). */
struct outq {
	pthread_mutex_t lock;
	pthread_cond_t more;         /* bytes queued, or stop */
	pthread_cond_t progress;     /* the writer wrote, or ended */
	char *buf;                   /* OUTQ_CAP bytes */
	uint64_t head, tail;
	uint64_t dropped;            /* lines dropped since the queue last took one */
	bool dropping;               /* full: nothing taken until half of it is written */
	bool stop;                   /* the writer ends once the queue is empty */
	bool direct;                 /* a regular file: written by the loop itself */
	bool started;
	int fd;                      /* o->out's; stderr's once that failed; -1: both did */
	atomic_bool gone;            /* o->out failed (the loop drops its status line in place) */
	pthread_t thread;
};

struct proc {
	int id;                      /* router group id */
	pid_t pid;                   /* 0 when not running */
	int pidfd;
	uint64_t started_ns;
	uint64_t restart_at_ns;      /* 0: no restart scheduled */
	uint32_t backoff_ms;
	int32_t retries;
	bool failed;                 /* gave up */
	bool retired;                /* removed by a reload: never restarted */
	bool stopping;
	bool held;                   /* stopped by `shoal stop SYSTEM GROUP`: no restart */
	bool restarting;             /* stopping for `shoal restart`: start again at its end */
	uint64_t kill_at_ns;         /* stopping on request: SIGKILL then; 0: not so */
	int waiter;                  /* connection of the tool that asked, answered at the end; -1 */
	int last_status;
	struct gout *out;            /* what the process prints; owned by the group */
};

struct sup {
	const struct shoal__sup_opts *o;
	struct outq q;               /* our output */
	struct shoal__config *cfg;
	int host;                    /* this host's index in cfg->hosts; -1: the file lists none */
	uint64_t hosts_down;         /* hosts marked down here (bit = index in cfg->hosts) */
	struct proc *procs;          /* one per cfg->groups[i] */
	struct shoal_router *router;
	int sigfd;
	int name_w;                  /* width of the longest group name, for the prefixes */
	bool live;                   /* status line redrawn in place */
	bool status_shown;
	bool stop_requested;
	bool ready;                  /* o->notify was told READY */
	bool failure;                /* exit status 1 */
	char *log_dir;               /* o->log_dir made absolute, for `shoal logs`; NULL */
	int admin_rd, admin_wr;      /* the pipe of lifecycle requests (supervisor.h) */
	int stop_waiters[16];        /* tools waiting for the whole system to stop */
	unsigned n_stop_waiters;
	uint64_t start_ns;
	uint64_t last_tick_ns, last_plain_ns;
	uint64_t last_handled;
	double rate;
};

/* The descriptors one wait watches, and what each one is (sup_proc.c). */
struct waitset {
	struct pollfd pfd[2 * SHOAL_MAX_GROUPS + 2];
	uint32_t map[2 * SHOAL_MAX_GROUPS + 2];
	uint32_t n, first;           /* pfd[first..n) are the groups' */
};

/*
 * Shared between the supervisor's files (one heading per file that defines
 * them). Each runs on the supervisor's thread.
 */

/* sup_out.c */
/* Write all of buf to fd: 0, or the errno of the write that failed.
 * Async-signal-safe (a forked child uses it). */
int shoal__sup_write_all(int fd, const char *buf, size_t len);
/* Start the thread that writes our output to o->out: 0 or a negative errno. */
int shoal__sup_out_start(struct sup *s);
/* Let that thread write what it holds while it makes progress, then end it. */
void shoal__sup_out_stop(struct sup *s);
/* Take the status line drawn in place off the screen, if it is shown. */
void shoal__sup_clear_status(struct sup *s);
/* One event: a line of our output, after the seconds since the start. */
__attribute__((format(printf, 2, 3)))
void shoal__sup_event(struct sup *s, const char *fmt, ...);
/* Measure the message rate; draw the status line, or print it once a period. */
void shoal__sup_status(struct sup *s, uint64_t now);
/* Measure the longest group name, for the prefixes of the groups' lines. */
void shoal__sup_name_width(struct sup *s);
/* A group's output, to its log file under `dir` if not NULL; NULL only for
 * want of memory. */
struct gout *shoal__sup_out_new(struct sup *s, const char *group, const char *dir);
/* Close and free a group's output; NULL is ignored. */
void shoal__sup_out_free(struct gout *o);
/* Pass on up to `budget` bytes of what group i printed, without blocking;
 * `last`: its process ended, close the pipe then. */
void shoal__sup_out_read(struct sup *s, uint32_t i, size_t budget, bool last);
/* Group i's output has ended: pass on a last partial line, close the pipe. */
void shoal__sup_out_close(struct sup *s, uint32_t i);

/* sup_proc.c */
/* Start group i's process (fork, exec): 0, or a negative errno if it did not start. */
int shoal__sup_launch(struct sup *s, uint32_t i);
/* A poll() timeout of at most `ms`, shorter while a process has no pidfd. */
int shoal__sup_poll_ms(struct sup *s, uint64_t ms);
/* Add to w group `only`'s pidfd (every group's if negative) and every output pipe. */
void shoal__sup_watch_groups(const struct sup *s, struct waitset *w, int only);
/* After poll(): reap the processes that ended, pass on what groups printed. */
void shoal__sup_serve_groups(struct sup *s, const struct waitset *w);
/* Wait up to `ms` for group `only`'s process (any if negative), serving output. */
void shoal__sup_wait_groups(struct sup *s, int only, uint64_t ms);

/* sup_stop.c */
/* Begin the system's stop (once): say why, tell o->notify. */
void shoal__sup_begin_stop(struct sup *s, const char *why, bool failure);
/* Stop every group, level by level in stop order, killing what outlasts its timeout. */
void shoal__sup_stop_all(struct sup *s);
/* Every process ended: wait (a second at most) for the router to see them leave. */
void shoal__sup_wait_detached(struct sup *s);
/* Stop group i's process now, as a level of the stop sequence is; waits meanwhile. */
void shoal__sup_stop_one(struct sup *s, uint32_t i);

/* sup_admin.c */
/* Is a group being stopped or restarted on a tool's request? */
bool shoal__sup_tool_pending(const struct sup *s);
/* Group i's process, stopping on a tool's request, ended (`how`): restart it or
 * leave it stopped, and answer the tool. */
void shoal__sup_tool_stop_done(struct sup *s, uint32_t i, const char *how);
/* Kill what stops on request past its timeout; the next such deadline, or UINT64_MAX. */
uint64_t shoal__sup_tool_stop_deadlines(struct sup *s, uint64_t now);
/* Serve the lifecycle requests waiting in the pipe (none once the stop has begun). */
void shoal__sup_on_admin(struct sup *s);
/* The router is gone: answer every tool still waiting, close the pipe. */
void shoal__sup_admin_finish(struct sup *s);

/* sup_hosts.c */
/* Append this host's bridge to c's groups when it has peers: 0, or a
 * negative errno with the reason in *err (c is unchanged). */
int shoal__sup_add_bridge(const struct sup *s, struct shoal__config *c, struct shoal_err *err);
/* The host of group i of c if it is another host's (its index), else -1. */
int shoal__sup_remote_host(const struct sup *s, const struct shoal__config *c, uint32_t i);
/* Index of this host's bridge in c->groups, or -1. */
int shoal__sup_bridge_of(const struct sup *s, const struct shoal__config *c);
/* Publish c's routes, those of other hosts' groups through the bridge. */
int shoal__sup_apply_routes(struct sup *s, const struct shoal__config *c, const struct proc *procs,
			    struct shoal_err *err);
/* Mark down, or up again, the groups of the hosts the bridge says are away. */
void shoal__sup_check_hosts(struct sup *s);

/* sup_reload.c */
/* Re-read the system file and apply it (SIGHUP, `shoal reload`), told to
 * o->notify: 0, or a negative errno with the reason in *err, nothing changed. */
int shoal__sup_reload(struct sup *s, struct shoal_err *err);

/* supervisor.c */
/* Declare c's message types to the router, so that a program that
 * disagrees is refused. */
int shoal__sup_declare_types(struct sup *s, const struct shoal__config *c, struct shoal_err *err);

#endif
