/* SPDX-License-Identifier: MIT */
/*
 * Child processes of the tests, and the fork server.
 *
 * Why a server: a runtime test runs the router in the test process, so the
 * test is multi-threaded (dispatchers, control server, supervisor, link
 * opener) when it starts its groups. A child forked from there starts with a
 * copy of every lock those threads held at that instant (the allocator's,
 * AddressSanitizer's thread registry and stack depot) and hangs in its first
 * malloc or pthread_create; CI saw this under ASan. ThreadSanitizer does not
 * support such children at all. So main calls test_spawn_server_start()
 * while the test is still one thread: it forks a helper that never starts a
 * thread, and test_spawn() asks the helper to fork each child from its clean
 * image.
 *
 * What the child sees: the helper's image is the test's at the moment the
 * server started, so function pointers, string literals, static data and the
 * MAP_SHARED mappings made before then are the same in the child. What
 * changes later travels with each request: a copy of the argument, the
 * environment (SHOAL_SHM_DIR, SHOAL_SYSTEM are set per test), and the globals
 * registered with test_spawn_share(). The child closes every descriptor
 * above stderr, as it did when the test forked it.
 *
 * Waiting and killing: the helper reaps a child only when the test asks for
 * it (test_wait_pid, test_try_wait), so until then the pid names a zombie at
 * worst, never a reused process, and kill() on it stays safe. The helper
 * serves one request at a time; a long wait holds the others, which is what
 * a test waiting in its one thread expects. This process remembers each
 * child until it is reaped, so that test_kill_children() can end what a
 * failed case left running: cmocka leaves a case at its first failed
 * assertion, before the case's own waits.
 *
 * Lifetime: the helper dies with the test (parent-death signal, and end of
 * file on its socket), and each child with the helper (its own parent-death
 * signal), so a test that crashes leaves nothing running.
 *
 * Programs that a threaded test starts with exec (the `shoal` tool in
 * toolrun.c, setpriv in users_test.c) do not go through the server:
 * posix_spawn starts them, whose child shares this memory (CLONE_VM,
 * CLONE_VFORK) and runs nothing but system calls until its exec, so it
 * never takes a lock of this image. Measured under gcc 12's ASan, in a
 * process with two threads in malloc and one creating threads: of 300
 * forked children that malloc and create a thread, 16 hung; of 300 fork
 * plus exec, and of 300 posix_spawn, none. Fork plus exec is safe only as
 * long as nobody adds a call before the exec; posix_spawn is safe by
 * construction (and copies no page tables). A plain build hung none, as
 * glibc's fork resets its own allocator locks. `shoal run` is forked by
 * run_test.c and storm_test.c, which run no thread of their own.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"

enum { REQ_SPAWN = 1, REQ_WAIT = 2 };

/* One request on the server's socket; a spawn is followed by `len` bytes:
 * the argument copy (arg_len), each shared global in registration order,
 * then the environment as NUL-terminated strings (env_len). */
struct spawn_req {
	uint32_t op;
	int32_t pid;             /* wait: the child */
	int32_t timeout_ms;      /* wait: 0 probes once and never kills */
	uint32_t arg_len;        /* spawn: 0 passes `arg` as it is */
	uint32_t env_len;
	uint32_t len;
	int (*fn)(void *arg);
	void *arg;
};

/* The server's answer: spawn: the pid or -errno; wait: as test_wait_pid
 * (the pid, with status; -1 killed at the deadline; 0 still running). */
struct spawn_rep {
	int32_t ret;
	int32_t status;
};

#define MAX_SHARED 8

static struct {
	void *addr;
	size_t len;
} shared[MAX_SHARED];
static unsigned n_shared;
static size_t shared_len;

static int server_fd = -1;
static pid_t server_pid;
static pthread_mutex_t server_lock = PTHREAD_MUTEX_INITIALIZER;

/* The children test_spawn() started that no wait has reaped yet. */
static struct {
	pid_t *pid;
	size_t n, cap;
	pthread_mutex_t lock;
} unreaped = { .lock = PTHREAD_MUTEX_INITIALIZER };

/*
 * Move all `len` bytes: out (send; MSG_NOSIGNAL: a server that died is an
 * error here, not a SIGPIPE) or in. -1 at end of file or on an error.
 */
static int xfer(int fd, void *buf, size_t len, bool out)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Poll for `pid` every millisecond; 0 ms probes once. */
static int wait_until(pid_t pid, int timeout_ms, int *status)
{
	struct timespec ts = { 0, 1000000 };

	for (int waited = 0;; waited++) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return pid;
		if (r < 0)
			return -errno;
		if (timeout_ms == 0)
			return 0;
		if (waited >= timeout_ms)
			break;
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, status, 0);
	return -1;
}

/* In a new child: die with the parent, hold no inherited descriptor, run. */
static _Noreturn void child_run(int (*fn)(void *arg), void *arg, pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	close_range(3, ~0u, 0);
	_exit(fn(arg));
}

/* In the server's child: take on the test's state of now, then run. */
static _Noreturn void served_child(const struct spawn_req *q, char *body, pid_t server)
{
	char *p = body + q->arg_len, *env;

	for (unsigned i = 0; i < n_shared; i++) {
		memcpy(shared[i].addr, p, shared[i].len);
		p += shared[i].len;
	}
	clearenv();
	for (env = p; env < p + q->env_len; env += strlen(env) + 1)
		putenv(env);
	child_run(q->fn, q->arg_len > 0 ? (void *)body : q->arg, server);
}

static int served_spawn(const struct spawn_req *q, char *body)
{
	pid_t self = getpid(), pid;

	pid = fork();
	if (pid == 0)
		served_child(q, body, self);
	return pid < 0 ? -errno : pid;
}

static _Noreturn void server_main(int fd, pid_t test)
{
	struct spawn_req q;
	struct spawn_rep rep;
	char *body;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != test)
		_exit(1);
	/* SIG_IGN here would reap the children before the test asks. */
	signal(SIGCHLD, SIG_DFL);
	while (xfer(fd, &q, sizeof(q), false) == 0) {
		memset(&rep, 0, sizeof(rep));
		if (q.op == REQ_SPAWN) {
			body = malloc(q.len ? q.len : 1);
			if (body == NULL || xfer(fd, body, q.len, false) != 0)
				_exit(1);
			rep.ret = served_spawn(&q, body);
			free(body);
		} else {
			int status = 0;

			rep.ret = wait_until(q.pid, q.timeout_ms, &status);
			rep.status = status;
		}
		if (xfer(fd, &rep, sizeof(rep), true) != 0)
			break;
	}
	/* The test is gone: so are the children, by their death signal. */
	_exit(0);
}

void test_spawn_share(void *addr, size_t len)
{
	if (server_fd >= 0 || n_shared == MAX_SHARED) {
		fprintf(stderr, "test_spawn_share: after the server started, or too many\n");
		abort();
	}
	shared[n_shared].addr = addr;
	shared[n_shared].len = len;
	n_shared++;
	shared_len += len;
}

/* The threads of this process (1 when /proc cannot say). */
static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return 1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* fork() from a process of one thread, whose child cannot inherit a lock
 * another thread held; aborts, saying `who`, if it has more or fork fails. */
static pid_t fork_alone(const char *who)
{
	pid_t pid;

	if (thread_count() != 1) {
		fprintf(stderr, "%s: this process runs threads; start the fork server "
			"(test_spawn_server_start) from main, before any\n", who);
		abort();
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
		abort();
	}
	return pid;
}

void test_spawn_server_start(void)
{
	int sv[2];
	pid_t test = getpid(), pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		fprintf(stderr, "fork server: socketpair: %s\n", strerror(errno));
		abort();
	}
	pid = fork_alone("fork server");
	if (pid == 0) {
		close(sv[0]);
		server_main(sv[1], test);
	}
	close(sv[1]);
	server_fd = sv[0];
	server_pid = pid;
}

/* Ask the server; fails the whole test run if the server is gone. */
static struct spawn_rep server_ask(struct spawn_req *q, void *body)
{
	struct spawn_rep rep;

	if (xfer(server_fd, q, sizeof(*q), true) != 0 ||
	    (q->len > 0 && xfer(server_fd, body, q->len, true) != 0) ||
	    xfer(server_fd, &rep, sizeof(rep), false) != 0) {
		fprintf(stderr, "fork server (pid %d) is gone\n", (int)server_pid);
		abort();
	}
	return rep;
}

static pid_t server_spawn(int (*fn)(void *arg), void *arg, size_t len)
{
	struct spawn_req q = { .op = REQ_SPAWN, .fn = fn, .arg = arg, .arg_len = (uint32_t)len };
	size_t env_len = 0, off;
	struct spawn_rep rep;
	char *body;

	for (char **e = environ; *e != NULL; e++)
		env_len += strlen(*e) + 1;
	q.env_len = (uint32_t)env_len;
	q.len = (uint32_t)(len + shared_len + env_len);
	body = malloc(q.len ? q.len : 1);
	if (body == NULL)
		abort();
	if (len > 0)
		memcpy(body, arg, len);
	off = len;
	for (unsigned i = 0; i < n_shared; i++) {
		memcpy(body + off, shared[i].addr, shared[i].len);
		off += shared[i].len;
	}
	for (char **e = environ; *e != NULL; e++) {
		memcpy(body + off, *e, strlen(*e) + 1);
		off += strlen(*e) + 1;
	}
	pthread_mutex_lock(&server_lock);
	rep = server_ask(&q, body);
	pthread_mutex_unlock(&server_lock);
	free(body);
	if (rep.ret < 0) {
		fprintf(stderr, "fork server: fork: %s\n", strerror(-rep.ret));
		abort();
	}
	return rep.ret;
}

static void unreaped_add(pid_t pid)
{
	/* Never 0 or below: kill() takes those for a process group, or for
	 * every process we may signal. */
	if (pid <= 0)
		return;
	pthread_mutex_lock(&unreaped.lock);
	if (unreaped.n == unreaped.cap) {
		size_t cap = unreaped.cap ? 2 * unreaped.cap : 16;
		pid_t *p = realloc(unreaped.pid, cap * sizeof(*p));

		if (p == NULL)
			abort();
		unreaped.pid = p;
		unreaped.cap = cap;
	}
	unreaped.pid[unreaped.n++] = pid;
	pthread_mutex_unlock(&unreaped.lock);
}

static void unreaped_remove(pid_t pid)
{
	pthread_mutex_lock(&unreaped.lock);
	for (size_t i = 0; i < unreaped.n; i++)
		if (unreaped.pid[i] == pid) {
			unreaped.pid[i] = unreaped.pid[--unreaped.n];
			break;
		}
	pthread_mutex_unlock(&unreaped.lock);
}

/* The last child still unreaped, or 0. */
static pid_t unreaped_last(void)
{
	pid_t pid;

	pthread_mutex_lock(&unreaped.lock);
	pid = unreaped.n > 0 ? unreaped.pid[unreaped.n - 1] : 0;
	pthread_mutex_unlock(&unreaped.lock);
	return pid;
}

pid_t test_spawn(int (*fn)(void *arg), void *arg, size_t len)
{
	pid_t pid, parent = getpid();

	if (server_fd >= 0)
		pid = server_spawn(fn, arg, len);
	else if ((pid = fork_alone("test_spawn")) == 0)
		child_run(fn, arg, parent);
	unreaped_add(pid);
	return pid;
}

/* Wait here for a child of this process; a pid that is not one (ECHILD)
 * the server started, and it waits. */
static int wait_any(pid_t pid, int timeout_ms, int *status)
{
	struct spawn_req q = { .op = REQ_WAIT, .pid = pid, .timeout_ms = timeout_ms };
	struct spawn_rep rep;
	int ret = wait_until(pid, timeout_ms, status);

	if (ret == -ECHILD && server_fd >= 0) {
		pthread_mutex_lock(&server_lock);
		rep = server_ask(&q, NULL);
		pthread_mutex_unlock(&server_lock);
		*status = rep.status;
		ret = rep.ret;
	}
	/* Anything but "still running" means reaped, or never ours. */
	if (ret != 0)
		unreaped_remove(pid);
	return ret;
}

/* A pid that is nobody's child here is a test's bug: said, and -1. */
static int wait_result(pid_t pid, int ret)
{
	if (ret < -1)
		fprintf(stderr, "waiting for %d: %s\n", (int)pid, strerror(-ret));
	return ret < -1 ? -1 : ret;
}

int test_wait_pid(pid_t pid, int timeout_ms)
{
	/* At least one wait: 0 would mean "probe" to wait_any. */
	int status = 0, ret = wait_any(pid, timeout_ms > 0 ? timeout_ms : 1, &status);

	return ret == pid ? status : wait_result(pid, ret);
}

pid_t test_try_wait(pid_t pid, int *status)
{
	int ret = wait_any(pid, 0, status);

	if (ret < 0)
		*status = -1;   /* test_assert_exited() fails on it */
	return wait_result(pid, ret);
}

void test_kill_children(void)
{
	pid_t pid;

	while ((pid = unreaped_last()) != 0) {
		kill(pid, SIGKILL);
		(void)test_wait_pid(pid, 10000);
		unreaped_remove(pid);   /* even if that wait could not say */
	}
}
