/* SPDX-License-Identifier: MIT */
/*
 * ucx_perftest (ucx-utils) between shoal-bench-net's two hosts, to check
 * the benchmark's own UCP program against UCX's tool: the same hosts, the
 * same CPUs, TCP on the same veth ends. The tool is run as a program (its
 * server in host B, its client in host A) and its final line of figures
 * is read from the client's output; nothing of it is linked or copied.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/net_bench.h"

/* The client retries while the server is not listening yet. */
#define CONNECT_TRIES 50
#define CONNECT_PAUSE_US 100000
#define OUT_MAX 8192

/* A child in host `side`, pinned, running ucx_perftest with argv, its
 * stdout on `out`, its stderr (connection retries) dropped. */
static pid_t spawn(const struct net_params *p, const int nsfd[2], int side, char *const argv[],
		   int out, int null)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	if (bench_child_init(p->cpu[side]) < 0 || net_enter_host(nsfd[side]) < 0)
		_exit(126);
	setenv("UCX_TLS", "tcp", 1);
	setenv("UCX_NET_DEVICES", p->ifname[side], 1);
	dup2(out, STDOUT_FILENO);
	dup2(null, STDERR_FILENO);
	execvp("ucx_perftest", argv);
	_exit(127);
}

/* Read the child's whole output into buf (NUL-terminated). 0, -EINTR. */
static int read_all(int fd, char *buf, size_t len)
{
	size_t used = 0;

	for (;;) {
		ssize_t n = read(fd, buf + used, len - 1 - used);

		if (n < 0 && errno == EINTR && bench_stop_signal())
			return -EINTR;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (used += (size_t)n) == len - 1)
			break;
	}
	buf[used] = '\0';
	return 0;
}

/* The last line of eight numbers: iterations, latency p50, average and
 * overall (µs), bandwidth average and overall (MB/s), message rate
 * average and overall. */
static int parse(char *buf, struct net_perftest *out)
{
	char *save = NULL;
	bool found = false;

	for (char *l = strtok_r(buf, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
		double v[8];

		if (sscanf(l, "%lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4],
			   &v[5], &v[6], &v[7]) == 8) {
			out->lat_ns = v[1] * 1e3;
			out->msg_rate = v[7];
			found = true;
		}
	}
	return found ? 0 : -EIO;
}

/* One client run: 0, 1 (could not connect: try again), -ENOENT, -EINTR. */
static int client_once(const struct net_params *p, const int nsfd[2], char *const argv[],
		       int null, char *buf)
{
	int fd[2], st, ret;
	pid_t pid;

	if (pipe2(fd, O_CLOEXEC) != 0)
		return -errno;
	pid = spawn(p, nsfd, 0, argv, fd[1], null);
	close(fd[1]);
	if (pid < 0) {
		close(fd[0]);
		return -errno;
	}
	ret = read_all(fd[0], buf, OUT_MAX);
	close(fd[0]);
	if (ret < 0)
		kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (ret < 0)
		return ret;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
		return -ENOENT;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int net_perftest_run(const int nsfd[2], const struct net_params *p, const char *test,
		     uint64_t iters, struct net_perftest *out)
{
	char port[8], size[16], n[24], warm[24], addr[16], buf[OUT_MAX];
	char *srv_argv[] = { "ucx_perftest", "-p", port, NULL };
	char *cli_argv[] = { "ucx_perftest", addr, "-p", port, "-t", (char *)test, "-s", size,
			     "-n", n, "-w", warm, "-f", NULL };
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC), ret = 1;
	pid_t srv;

	memset(out, 0, sizeof(*out));
	if (null < 0)
		return -errno;
	snprintf(port, sizeof(port), "%u", (unsigned)p->port);
	snprintf(size, sizeof(size), "%u", p->payload);
	snprintf(n, sizeof(n), "%llu", (unsigned long long)iters);
	/* The tool warms up with 10 000 messages by default: 655 MB of 64 KiB
	 * frames, longer than the test. A quarter of the test is enough. */
	snprintf(warm, sizeof(warm), "%llu", (unsigned long long)(iters / 4 + 1));
	snprintf(addr, sizeof(addr), "%s", p->addr[1]);
	srv = spawn(p, nsfd, 1, srv_argv, null, null);
	if (srv < 0) {
		close(null);
		return -errno;
	}
	for (int i = 0; i < CONNECT_TRIES && ret == 1 && !bench_stop_signal(); i++) {
		ret = client_once(p, nsfd, cli_argv, null, buf);
		if (ret == 1)
			usleep(CONNECT_PAUSE_US);
	}
	/* The server serves one client and exits; after a failure it waits. */
	kill(srv, SIGKILL);
	while (waitpid(srv, NULL, 0) < 0 && errno == EINTR)
		;
	close(null);
	if (bench_stop_signal())
		return -EINTR;
	if (ret == 0)
		ret = parse(buf, out);
	else if (ret == 1)
		ret = -EIO;
	out->ok = ret == 0;
	return ret;
}
