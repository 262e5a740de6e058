/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"

static char dir[256];
static char path[512];

/* Children of the fork server (tests/spawn.c) find their test's directory
 * too: test_seg_path() and test_small_shm() read it. */
__attribute__((constructor)) static void share_dir(void)
{
	test_spawn_share(dir, sizeof(dir));
}

const char *test_shm_dir_make(const char *test_name)
{
	snprintf(dir, sizeof(dir), "/dev/shm/shoal-test-%s-%d", test_name, (int)getpid());
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
		abort();
	}
	setenv("SHOAL_SHM_DIR", dir, 1);
	return dir;
}

/* Remove `at` and everything under it, never following a link. */
static void remove_tree(const char *at)
{
	DIR *d = opendir(at);
	struct dirent *e;
	struct stat st;
	char sub[1024];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", at, e->d_name);
		if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
			chmod(sub, 0700);
			remove_tree(sub);
		} else {
			unlink(sub);
		}
	}
	closedir(d);
	rmdir(at);
}

void test_shm_dir_remove(void)
{
	remove_tree(dir);
}

const char *test_small_shm(const char *name, size_t bytes)
{
	static char mnt[512];
	char opts[64];

	snprintf(mnt, sizeof(mnt), "%s/%s", dir, name);
	if (mkdir(mnt, 0700) != 0 && errno != EEXIST)
		return NULL;
	snprintf(opts, sizeof(opts), "size=%zu,mode=0700", bytes);
	/* A private namespace: the mount goes with this process, however it
	 * ends, and no other process ever sees it. */
	if (unshare(CLONE_NEWNS) != 0 ||
	    mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
		fprintf(stderr, "cannot mount a %zu-byte tmpfs at %s: %s\n", bytes, mnt,
			strerror(errno));
		return NULL;
	}
	setenv("SHOAL_SHM_DIR", mnt, 1);
	return mnt;
}

const char *test_seg_path(const char *name)
{
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

void test_assert_exited(int status, int code)
{
	if (status == -1)
		fail_msg("child timed out and was killed");
	if (WIFSIGNALED(status))
		fail_msg("child killed by signal %d", WTERMSIG(status));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), code);
}

int test_under_tool(void)
{
	const char *s = getenv("SHOAL_SANITIZER");

	return s != NULL && s[0] != '\0';
}

uint64_t test_scale(uint64_t n)
{
	const char *s = getenv("SHOAL_SANITIZER");

	if (s == NULL || s[0] == '\0')
		return n;
	if (strcmp(s, "valgrind") == 0)
		return n / 100 ? n / 100 : 1;
	return n / 10 ? n / 10 : 1;
}

uint64_t test_seed(void)
{
	const char *s = getenv("SHOAL_TEST_SEED");

	return s != NULL && s[0] != '\0' ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
}

void test_pin(int cpu)
{
	cpu_set_t set;
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	CPU_ZERO(&set);
	CPU_SET(n > 0 ? cpu % n : 0, &set);
	(void)sched_setaffinity(0, sizeof(set), &set);
}
