/* SPDX-License-Identifier: MIT */
/* Network namespaces joined by a veth pair or a switch, for the tests (see netns.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/netns.h"

#define NETNS_DIR "/run/netns"
#define NETNS_PREFIX "shoal-t"

/* Run `ip ARGS...` (argv, NULL-terminated), its standard output into
 * out[0, cap) when out is given. Returns its exit status, or -1 if it could
 * not run or was killed. */
static int ip_argv(const char **argv, char *out, size_t cap)
{
	int fds[2] = { -1, -1 }, status;
	size_t got = 0;
	pid_t pid;

	if (out && pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (out) {
			dup2(fds[1], STDOUT_FILENO);
			close(fds[0]);
			close(fds[1]);
		}
		execvp("ip", (char *const *)argv);
		_exit(127);
	}
	if (out) {
		ssize_t n;

		close(fds[1]);
		while (got + 1 < cap && (n = read(fds[0], out + got, cap - 1 - got)) != 0) {
			if (n < 0 && errno != EINTR)
				break;
			if (n > 0)
				got += (size_t)n;
		}
		out[got] = '\0';
		close(fds[0]);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int ip(const char *arg0, ...)
{
	const char *argv[24] = { "ip", arg0 };
	int n = 2;
	va_list ap;

	va_start(ap, arg0);
	while (n < 23 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	return ip_argv(argv, NULL, 0);
}

/* Wait until side's veth end has its carrier (LOWER_UP), at most 5 s: a
 * program that looks for interfaces before that (UCX does, once, when its
 * context starts) does not see it. Returns 0, or -1 (said on stderr). */
static int wait_carrier(const struct test_netns *n, int side)
{
	const char *argv[] = { "ip", "-n", n->ns[side], "-o", "link", "show", "dev",
			       n->dev[side], NULL };
	char out[512];

	for (int i = 0; i < 500; i++) {
		if (ip_argv(argv, out, sizeof(out)) == 0 && strstr(out, "LOWER_UP"))
			return 0;
		usleep(10000);
	}
	fprintf(stderr, "netns: %s in %s never got its carrier\n", n->dev[side], n->ns[side]);
	return -1;
}

static int ip_checked(const char *what, int ret)
{
	if (ret != 0)
		fprintf(stderr, "netns: `ip %s` failed (%d)\n", what, ret);
	return ret != 0 ? -1 : 0;
}

const char *test_netns_unavailable(void)
{
	static char why[128];
	char name[TEST_NETNS_NAME_MAX];

	if (geteuid() != 0)
		return "network namespaces need root";
	if (access("/proc/self/ns/net", R_OK) != 0)
		return "this kernel has no network namespaces";
	snprintf(name, sizeof(name), NETNS_PREFIX "%d-probe", (int)getpid());
	if (ip("netns", "add", name, (char *)NULL) != 0) {
		snprintf(why, sizeof(why), "`ip netns add` failed (no iproute2, or not allowed)");
		return why;
	}
	ip("netns", "del", name, (char *)NULL);
	return NULL;
}

/* Remove the namespaces of test processes that are gone. */
static void reap_stale(void)
{
	DIR *d = opendir(NETNS_DIR);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		long pid;
		char *end;

		if (strncmp(e->d_name, NETNS_PREFIX, strlen(NETNS_PREFIX)) != 0)
			continue;
		pid = strtol(e->d_name + strlen(NETNS_PREFIX), &end, 10);
		if (pid <= 0 || *end != '-' || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		ip("netns", "del", e->d_name, (char *)NULL);
	}
	closedir(d);
}

/* Join the two sides with one veth pair. */
static int join_pair(struct test_netns *n)
{
	return ip_checked("link add ... type veth",
			  ip("-n", n->ns[0], "link", "add", n->dev[0], "type", "veth", "peer",
			     "name", n->dev[1], "netns", n->ns[1], (char *)NULL));
}

/* Join every side to a bridge device in a namespace of its own: a veth per
 * side, its switch end (p0, p1 ...) on the bridge. */
static int join_switch(struct test_netns *n, const char *tag)
{
	snprintf(n->sw, sizeof(n->sw), NETNS_PREFIX "%d-%s-sw", (int)getpid(), tag);
	if (ip_checked("netns add", ip("netns", "add", n->sw, (char *)NULL)) < 0)
		return -1;
	n->made_sw = true;
	if (ip_checked("link add ... type bridge", ip("-n", n->sw, "link", "add", "br0", "type",
						      "bridge", (char *)NULL)) < 0 ||
	    ip_checked("link set br0 up", ip("-n", n->sw, "link", "set", "br0", "up",
					     (char *)NULL)) < 0)
		return -1;
	for (unsigned s = 0; s < n->n; s++) {
		char port[16];

		snprintf(port, sizeof(port), "p%u", s);
		if (ip_checked("link add ... type veth",
			       ip("-n", n->sw, "link", "add", port, "type", "veth", "peer", "name",
				  n->dev[s], "netns", n->ns[s], (char *)NULL)) < 0 ||
		    ip_checked("link set ... master br0",
			       ip("-n", n->sw, "link", "set", port, "master", "br0",
				  (char *)NULL)) < 0 ||
		    ip_checked("link set ... up", ip("-n", n->sw, "link", "set", port, "up",
						      (char *)NULL)) < 0)
			return -1;
	}
	return 0;
}

int test_netns_create_hosts(struct test_netns *n, const char *tag, unsigned octet,
			    unsigned hosts)
{
	char cidr[TEST_NETNS_MAX][24];

	memset(n, 0, sizeof(*n));
	if (hosts < 2 || hosts > TEST_NETNS_MAX) {
		fprintf(stderr, "netns: %u hosts (2 or 3)\n", hosts);
		return -1;
	}
	n->n = hosts;
	reap_stale();
	for (unsigned s = 0; s < n->n; s++) {
		snprintf(n->ns[s], sizeof(n->ns[s]), NETNS_PREFIX "%d-%s-%c", (int)getpid(), tag,
			 'a' + s);
		snprintf(n->dev[s], sizeof(n->dev[s]), "veth-%c", 'a' + s);
		snprintf(n->addr[s], sizeof(n->addr[s]), "169.254.%u.%u", octet & 255,
			 (s + 1) & 255);
		snprintf(cidr[s], sizeof(cidr[s]), "%s/24", n->addr[s]);
		if (ip_checked("netns add", ip("netns", "add", n->ns[s], (char *)NULL)) < 0)
			goto fail;
		n->made[s] = true;
	}
	if ((n->n == 2 ? join_pair(n) : join_switch(n, tag)) < 0)
		goto fail;
	for (unsigned s = 0; s < n->n; s++) {
		if (ip_checked("addr add", ip("-n", n->ns[s], "addr", "add", cidr[s], "dev",
					      n->dev[s], (char *)NULL)) < 0 ||
		    ip_checked("link set lo up", ip("-n", n->ns[s], "link", "set", "lo", "up",
						     (char *)NULL)) < 0 ||
		    test_netns_link(n, (int)s, true) < 0)
			goto fail;
	}
	for (unsigned s = 0; s < n->n; s++)
		if (wait_carrier(n, (int)s) < 0)
			goto fail;
	return 0;
fail:
	test_netns_destroy(n);
	return -1;
}

int test_netns_create(struct test_netns *n, const char *tag, unsigned octet)
{
	return test_netns_create_hosts(n, tag, octet, 2);
}

void test_netns_destroy(struct test_netns *n)
{
	for (unsigned s = 0; s < TEST_NETNS_MAX; s++) {
		if (n->made[s])
			ip("netns", "del", n->ns[s], (char *)NULL);
		n->made[s] = false;
	}
	if (n->made_sw)
		ip("netns", "del", n->sw, (char *)NULL);
	n->made_sw = false;
}

int test_netns_enter(const struct test_netns *n, int side)
{
	char path[sizeof(NETNS_DIR) + TEST_NETNS_NAME_MAX + 1];
	int fd, ret = 0;

	snprintf(path, sizeof(path), NETNS_DIR "/%s", n->ns[side]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (setns(fd, CLONE_NEWNET) < 0)
		ret = -errno;
	close(fd);
	if (ret < 0)
		return ret;
	/* /sys/class/net lists the interfaces of the namespace sysfs was
	 * mounted from, and UCX finds its TCP devices there: remount sysfs in
	 * a private mount namespace, as `ip netns exec` does, or UCX sees the
	 * old namespace's interfaces and none of the veth. */
	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_SLAVE | MS_REC, NULL) < 0 ||
	    umount2("/sys", MNT_DETACH) < 0 || mount("sysfs", "/sys", "sysfs", 0, NULL) < 0)
		return -errno;
	return 0;
}

int test_netns_link(const struct test_netns *n, int side, bool up)
{
	return ip_checked("link set", ip("-n", n->ns[side], "link", "set", n->dev[side],
					 up ? "up" : "down", (char *)NULL));
}

pid_t test_netns_spawn(const struct test_netns *n, int side, const char *shm, const char *out,
		       const char *const *argv)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid != 0)
		return pid;
	{
		int fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd < 0 || test_netns_enter(n, side) < 0)
			_exit(126);
		setenv("SHOAL_SHM_DIR", shm, 1);
		setenv("UCX_TLS", "tcp", 1);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
}

char *test_netns_slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = calloc(1, 1 << 20);
	size_t got;

	if (text == NULL || f == NULL) {
		if (f != NULL)
			fclose(f);
		return text;
	}
	got = fread(text, 1, (1 << 20) - 1, f);
	text[got] = '\0';
	fclose(f);
	return text;
}

pid_t test_netns_run_host(const struct test_netns *n, int side, const char *host,
			  const char *shm, const char *out, const char *file)
{
	const char *argv[] = { getenv("SHOAL_BIN"), "run", "--status", "plain", "--host", host,
			       file, NULL };

	return argv[0] != NULL ? test_netns_spawn(n, side, shm, out, argv) : -1;
}

int test_netns_dirs(const char *tag, unsigned hosts, char *dir, size_t dir_len, char *shm,
		    size_t shm_len, char *out, size_t out_len)
{
	snprintf(dir, dir_len, "/tmp/shoal-test-%s-%d", tag, (int)getpid());
	if (mkdir(dir, 0700) != 0)
		return -1;
	for (unsigned s = 0; s < hosts; s++) {
		snprintf(shm + s * shm_len, shm_len, "/dev/shm/shoal-test-%s-%d-%c", tag,
			 (int)getpid(), 'a' + s);
		snprintf(out + s * out_len, out_len, "%s/%c.out", dir, 'a' + s);
		if (mkdir(shm + s * shm_len, 0700) != 0)
			return -1;
	}
	return 0;
}

int test_netns_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int ret = f != NULL && fputs(text, f) >= 0 ? 0 : -1;

	if (f != NULL && fclose(f) != 0)
		ret = -1;
	return ret;
}

void test_netns_stop_runs(pid_t *runs, unsigned n_runs)
{
	for (unsigned i = 0; i < n_runs; i++)
		if (runs[i] > 0) {
			int status;

			kill(runs[i], SIGKILL);
			waitpid(runs[i], &status, 0);
			runs[i] = 0;
		}
}

void test_netns_teardown(struct test_netns *n, pid_t *runs, unsigned n_runs,
			 const char *const *paths)
{
	test_netns_stop_runs(runs, n_runs);
	test_netns_destroy(n);
	for (; paths != NULL && *paths != NULL; paths++) {
		char cmd[PATH_MAX + 16];

		if ((*paths)[0] == '\0' || strchr(*paths, '\'') != NULL)
			continue;
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", *paths);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", *paths);
	}
}
