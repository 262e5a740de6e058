/* SPDX-License-Identifier: MIT */
/*
 * Other users and a full shared-memory filesystem, against a real router:
 * files another user plants cannot make a system look "already running",
 * a world mode is refused wherever it can be given, a group mode keeps
 * other users out, and a filesystem without room for a segment is -ENOSPC
 * at start and at a new group, never a SIGBUS. The other user is `nobody`,
 * run through setpriv; without root, `nobody` or setpriv those tests skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/router.h>
#include <shoal/segment.h>

#include "runtime/control/config.h"
#include "tests/testutil.h"

static int teardown(void **state)
{
	(void)state;
	test_shm_dir_remove();
	return 0;
}

static bool have_nobody(void)
{
	return geteuid() == 0 && getpwnam("nobody") != NULL &&
	       system("command -v setpriv >/dev/null") == 0;
}

/*
 * Run `sh -c cmd` as nobody; returns its exit status (or -1: killed). A
 * router may be running here: posix_spawn, not fork (see tests/spawn.c),
 * and none of its descriptors pass to the other user.
 */
static int sh_as_nobody(const char *cmd)
{
	char *argv[] = { "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
			 "sh", "-c", (char *)cmd, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status;

	fflush(NULL);
	assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
	assert_int_equal(posix_spawn_file_actions_addclosefrom_np(&fa, 3), 0);
	status = posix_spawnp(&pid, "setpriv", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (status != 0)
		return -1;
	status = test_wait_pid(pid, 10000);
	return status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}

static int start(struct shoal_router **r, const char *system, mode_t mode,
		 struct shoal_err *err)
{
	struct shoal_router_opts o = { .system = system, .mode = mode,
				       .inbound_capacity = 64 * 1024,
				       .uplink_capacity = 64 * 1024,
				       .direct_capacity = 16 * 1024 };

	memset(err, 0, sizeof(*err));
	return shoal_router_start(r, &o, err);
}

static void users_planted_files_refused_by_name_not_already_running(void **state)
{
	struct shoal_router *r = NULL;
	struct shoal_err err;
	struct shoal_seg seg;
	struct shoal_seg_opts tmpl = { .numa_node = -1 };
	struct stat st;
	char dir[512], shared[600], cmd[2048], reg[700];

	(void)state;
	if (!have_nobody())
		skip();
	snprintf(dir, sizeof(dir), "%s", test_shm_dir_make("users-plant"));
	assert_int_equal(chmod(dir, 0711), 0);           /* nobody may pass through */
	snprintf(shared, sizeof(shared), "%s/shared", dir);
	assert_int_equal(mkdir(shared, 0700), 0);
	assert_int_equal(chmod(shared, 01777), 0);       /* like /dev/shm itself */
	/* What nobody plants: a valid segment whose creator (we) is alive. */
	tmpl.dir = dir;
	assert_int_equal(shoal_seg_create(&seg, "tmpl", 4096, &tmpl, NULL), 0);
	shoal_seg_detach(&seg);
	assert_int_equal(chmod(test_seg_path("tmpl"), 0644), 0);
	snprintf(cmd, sizeof(cmd), "cp %s/tmpl %s/shoal.plant.reg && mkdir %s/shoal.plant.ctl",
		 dir, shared, shared);
	assert_int_equal(sh_as_nobody(cmd), 0);
	snprintf(reg, sizeof(reg), "%s/shoal.plant.reg", shared);
	assert_int_equal(stat(reg, &st), 0);
	assert_int_equal(st.st_uid, getpwnam("nobody")->pw_uid);
	setenv("SHOAL_SHM_DIR", shared, 1);
	/* The planted registry would pass for a live system's. */
	assert_int_equal(shoal_seg_probe(reg, NULL), 1);

	/* A directory others may write in is refused, named. */
	assert_int_equal(start(&r, "plant", 0, &err), -EPERM);
	assert_non_null(strstr(err.msg, shared));
	assert_non_null(strstr(err.msg, "other users may write"));
	/* Our own directory holding another user's files: each is named. */
	assert_int_equal(chmod(shared, 0700), 0);
	assert_int_equal(start(&r, "plant", 0, &err), -EPERM);
	assert_null(strstr(err.msg, "already running"));
	assert_non_null(strstr(err.msg, "owned by uid"));
	assert_non_null(strstr(err.msg, "shoal.plant."));
	assert_int_equal(unlink(reg), 0);
	assert_int_equal(start(&r, "plant", 0, &err), -EPERM);
	assert_non_null(strstr(err.msg, "shoal.plant.ctl"));
	snprintf(reg, sizeof(reg), "%s/shoal.plant.ctl", shared);
	assert_int_equal(rmdir(reg), 0);
	/* Ours alone again: the system starts. */
	assert_int_equal(start(&r, "plant", 0, &err), 0);
	shoal_router_destroy(r);
}

static void users_leftover_that_cannot_go_is_named(void **state)
{
	struct shoal_router *r = NULL;
	struct shoal_err err;
	char sub[600];

	(void)state;
	test_shm_dir_make("users-left");
	/* A non-empty directory at a mailbox name: not removable. */
	snprintf(sub, sizeof(sub), "%s", test_seg_path("shoal.left.g.a"));
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(sub, sizeof(sub), "%s", test_seg_path("shoal.left.g.a/x"));
	assert_int_equal(mkdir(sub, 0700), 0);
	assert_int_equal(start(&r, "left", 0, &err), -ENOTEMPTY);
	assert_non_null(strstr(err.msg, "cannot remove"));
	assert_non_null(strstr(err.msg, "shoal.left.g.a"));
	assert_int_equal(rmdir(sub), 0);
	/* An empty one is a leftover like any other. */
	assert_int_equal(start(&r, "left", 0, &err), 0);
	shoal_router_destroy(r);
}

static void users_world_mode_refused_everywhere(void **state)
{
	static const mode_t world[] = { 0666, 0664, 0606, 0604, 0602 };
	static const char yaml[] = "system: s\nrouter: { mode: \"0666\" }\n"
				   "groups:\n  - name: a\n    program: /bin/true\n";
	struct shoal__config *c = NULL;
	struct shoal_router *r = NULL;
	struct shoal_err err;

	(void)state;
	test_shm_dir_make("users-mode");
	for (size_t i = 0; i < sizeof(world) / sizeof(world[0]); i++) {
		assert_int_equal(start(&r, "mode", world[i], &err), -EINVAL);
		assert_non_null(strstr(err.msg, "every user"));
	}
	assert_int_equal(start(&r, "mode", 0200, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "owner read and write"));
	memset(&err, 0, sizeof(err));
	assert_int_equal(shoal__config_parse("t.yaml", yaml, strlen(yaml), &c, &err), -EINVAL);
	assert_null(c);
	assert_non_null(strstr(err.msg, "t.yaml:2:"));
	assert_non_null(strstr(err.msg, "every user"));
}

static void users_group_mode_keeps_other_users_out(void **state)
{
	struct shoal_router *r = NULL;
	struct shoal_err err;
	struct shoal_group_spec g = { .name = "g", .node = -1 };
	char dir[512], mbx[600], cmd[2048];
	struct stat st;

	(void)state;
	if (!have_nobody())
		skip();
	snprintf(dir, sizeof(dir), "%s", test_shm_dir_make("users-group"));
	assert_int_equal(start(&r, "grp", 0660, &err), 0);
	assert_true(shoal_router_group(r, &g, &err) >= 0);
	snprintf(mbx, sizeof(mbx), "%s/shoal.grp.g.g", dir);
	assert_int_equal(stat(mbx, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	/* The group may search the directory; nobody else passes it. */
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0710);
	/* Let everyone through the directory, so that the file's mode alone
	 * keeps `nobody` (not in the group) from the stop flag. */
	assert_int_equal(chmod(dir, 0711), 0);
	snprintf(cmd, sizeof(cmd), "test -e %s && ! (: <> %s) 2>/dev/null && "
		 "! (: < %s) 2>/dev/null", mbx, mbx, mbx);
	assert_int_equal(sh_as_nobody(cmd), 0);
	shoal_router_destroy(r);
}

/* Grow the filler `fd` in `dir` until about `left` bytes stay free. */
static bool fill_to(int fd, const char *dir, uint64_t left)
{
	struct statvfs sv;
	uint64_t avail;
	struct stat st;

	if (fstat(fd, &st) != 0 || statvfs(dir, &sv) != 0)
		return false;
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	return avail <= left ||
	       posix_fallocate(fd, 0, (off_t)((uint64_t)st.st_size + avail - left)) == 0;
}

/* In a child with an 8 MiB tmpfs; exits 0 when every check holds. */
static int full_shm_main(void *arg)
{
	struct shoal_router *r = NULL;
	struct shoal_router_stats st;
	struct shoal_err err;
	struct shoal_group_spec g = { .name = "late", .node = -1 };
	const char *dir = test_small_shm("small", 8 << 20);
	char mbx[600];
	int fd;

	(void)arg;
	if (dir == NULL)
		return TEST_CHILD_SKIP;
	snprintf(mbx, sizeof(mbx), "%s/filler", dir);
	fd = open(mbx, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHILD_CHECK(fd >= 0);
	/* Not even room for the registry: start fails, and says why. */
	CHILD_CHECK(fill_to(fd, dir, 8 * 1024));
	CHILD_CHECK(start(&r, "full", 0, &err) == -ENOSPC);
	CHILD_CHECK(strstr(err.msg, "full") != NULL);
	CHILD_CHECK(ftruncate(fd, 0) == 0);
	/* Room for the router, not for a group's mailbox (what a reload that
	 * adds a group asks for): -ENOSPC, the router carries on. */
	CHILD_CHECK(start(&r, "full", 0, &err) == 0);
	CHILD_CHECK(fill_to(fd, dir, 32 * 1024));
	CHILD_CHECK(shoal_router_group(r, &g, &err) == -ENOSPC);
	CHILD_CHECK(strstr(err.msg, "full") != NULL || strstr(err.msg, "No space") != NULL);
	snprintf(mbx, sizeof(mbx), "%s/shoal.full.g.late", dir);
	CHILD_CHECK(access(mbx, F_OK) != 0);
	shoal_router_stats(r, &st);
	CHILD_CHECK(st.groups == 0);
	CHILD_CHECK(ftruncate(fd, 0) == 0);
	CHILD_CHECK(shoal_router_group(r, &g, &err) >= 0);
	shoal_router_destroy(r);
	close(fd);
	return 0;
}

static void users_full_shm_is_enospc_at_start_and_new_group(void **state)
{
	int status;

	(void)state;
	test_shm_dir_make("users-full");
	status = test_wait_pid(test_spawn(full_shm_main, NULL, 0), 60000);
	if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == TEST_CHILD_SKIP)
		skip();
	test_assert_exited(status, 0);
}

/* Does file `path` contain `needle` within `timeout_ms`? */
static bool file_shows(const char *path, const char *needle, int timeout_ms)
{
	static char text[65536];

	for (int i = 0; i <= timeout_ms / 10; i++) {
		FILE *f = fopen(path, "re");
		size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;

		if (f != NULL)
			fclose(f);
		text[n] = '\0';
		if (strstr(text, needle) != NULL)
			return true;
		usleep(10000);
	}
	fprintf(stderr, "'%s' not in %s within %d ms:\n%s\n", needle, path, timeout_ms, text);
	return false;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	CHILD_CHECK(f != NULL && fputs(text, f) >= 0 && fclose(f) == 0);
}

/*
 * In a child with a 16 MiB tmpfs: `shoal run` with one group; the
 * filesystem fills up; a SIGHUP adds a group. The reload is refused with
 * ENOSPC, the running system carries on, and stops cleanly.
 */
static int reload_full_main(void *arg)
{
	const char *bin = getenv("SHOAL_BIN"), *group = getenv("SHOAL_TEST_GROUP");
	const char *dir = test_small_shm("small", 16 << 20);
	char cfg[600], out[600], text[2048], filler[600];
	static const char fmt[] =
		"system: hupfull\n"
		"router: { inbound_capacity: 64KiB, uplink_capacity: 64KiB }\n"
		"types:\n  - { id: 3, name: work, max_size: 64 }\n"
		"groups:\n"
		"  - name: a\n    program: %s\n    args: [--role, consumer]\n%s";
	pid_t run;
	int fd, status;

	(void)arg;
	if (dir == NULL)
		return TEST_CHILD_SKIP;
	snprintf(cfg, sizeof(cfg), "%s", test_seg_path("hup.yaml"));
	snprintf(out, sizeof(out), "%s", test_seg_path("hup.out"));
	snprintf(filler, sizeof(filler), "%s/filler", dir);
	snprintf(text, sizeof(text), fmt, group, "");
	write_text(cfg, text);
	fflush(NULL);
	run = fork();
	CHILD_CHECK(run >= 0);
	if (run == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		dup2(o, 1);
		dup2(o, 2);
		execl(bin, "shoal", "run", "--status", "plain", cfg, (char *)NULL);
		_exit(127);
	}
	CHILD_CHECK(file_shows(out, "group a: started", 20000));
	fd = open(filler, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHILD_CHECK(fd >= 0 && fill_to(fd, dir, 32 * 1024));
	snprintf(text, sizeof(text), fmt, group,
		 "  - name: b\n    program: /bin/true\n");
	write_text(cfg, text);
	kill(run, SIGHUP);
	CHILD_CHECK(file_shows(out, "reload refused", 20000));
	/* The file check refuses it when it sees the space is short, the
	 * segment reservation when the space went between check and create. */
	CHILD_CHECK(file_shows(out, "MiB free", 1000) ||
		    file_shows(out, "No space left on device", 1000));
	/* The system lives on and stops in order. */
	CHILD_CHECK(waitpid(run, &status, WNOHANG) == 0);
	kill(run, SIGTERM);
	status = test_wait_pid(run, 20000);
	CHILD_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(fd);
	return 0;
}

static void users_full_shm_reload_adding_a_group_is_refused(void **state)
{
	int status;

	(void)state;
	if (getenv("SHOAL_BIN") == NULL || getenv("SHOAL_TEST_GROUP") == NULL)
		skip();
	test_shm_dir_make("users-hup");
	status = test_wait_pid(test_spawn(reload_full_main, NULL, 0), 90000);
	if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == TEST_CHILD_SKIP)
		skip();
	test_assert_exited(status, 0);
}

static void users_tools_list_systems_of_the_users_directory(void **state)
{
	const char *bin = getenv("SHOAL_BIN");
	struct shoal_router *r = NULL;
	struct shoal_err err;
	char name[32], want[64], cmd[600], out[8192] = "";
	size_t n;
	FILE *p;

	(void)state;
	if (bin == NULL)
		skip();
	/* No SHOAL_SHM_DIR: the router and `shoal ls` both use the default. */
	unsetenv("SHOAL_SHM_DIR");
	snprintf(name, sizeof(name), "usersls%d", (int)getpid());
	snprintf(want, sizeof(want), "Systems in /dev/shm/shoal-%u", (unsigned)geteuid());
	assert_int_equal(start(&r, name, 0, &err), 0);
	snprintf(cmd, sizeof(cmd), "%s ls", bin);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	pclose(p);
	shoal_router_destroy(r);
	if (strstr(out, want) == NULL || strstr(out, name) == NULL)
		fail_msg("shoal ls does not list %s under '%s':\n%s", name, want, out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(users_planted_files_refused_by_name_not_already_running,
					  teardown),
		cmocka_unit_test_teardown(users_leftover_that_cannot_go_is_named, teardown),
		cmocka_unit_test_teardown(users_world_mode_refused_everywhere, teardown),
		cmocka_unit_test_teardown(users_group_mode_keeps_other_users_out, teardown),
		cmocka_unit_test_teardown(users_full_shm_is_enospc_at_start_and_new_group,
					  teardown),
		cmocka_unit_test_teardown(users_full_shm_reload_adding_a_group_is_refused,
					  teardown),
		cmocka_unit_test(users_tools_list_systems_of_the_users_directory),
	};

	/* Its routers run threads here between the children it starts. */
	test_spawn_server_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
