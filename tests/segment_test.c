/* SPDX-License-Identifier: MIT */
/*
 * Segments: create, attach, detach, unlink, the directory, placement, and
 * every way attach must refuse a file (truncated, foreign, wrong version,
 * wrong owner, half-initialised, corrupted directory).
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/numa.h>
#include <shoal/segment.h>

#include "shm/segment_layout.h"
#include "tests/testutil.h"

static char self_path[4096];   /* this program, from argv[0] */

static int setup(void **state)
{
	(void)state;
	test_shm_dir_make("segment");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_shm_dir_remove();
	return 0;
}

static void make_segment(const char *name, size_t size)
{
	struct shoal_seg seg;

	assert_int_equal(shoal_seg_create(&seg, name, size, NULL, NULL), 0);
	shoal_seg_detach(&seg);
}

/* Patch `len` bytes at `off` of a segment file, as a buggy peer would. */
static void patch_file(const char *name, off_t off, const void *bytes, size_t len)
{
	int fd = open(test_seg_path(name), O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, len, off), (ssize_t)len);
	close(fd);
}

static int attach_err(const char *name, uint32_t flags, struct shoal_err *err)
{
	struct shoal_seg seg;
	int ret = shoal_seg_attach(&seg, name, flags, err);

	if (ret == 0)
		shoal_seg_detach(&seg);
	return ret;
}

static void segment_create_attach_roundtrip(void **state)
{
	struct shoal_seg a, b;
	struct shoal_seg_info info;
	struct stat st;
	uint64_t off;
	struct shoal_seg_region r;

	(void)state;
	assert_int_equal(shoal_seg_create(&a, "rt", 10000, NULL, NULL), 0);
	assert_true(a.size >= 10000 && a.size % 4096 == 0);
	assert_int_equal(stat(test_seg_path("rt"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(shoal_seg_alloc(&a, SHOAL_SEG_KIND_USER, "blob", 1000, 0, &off), 0);
	assert_int_equal(off % 128, 0);
	memset(shoal_seg_ptr(&a, off, 1000, 8), 0xab, 1000);
	assert_int_equal(shoal_seg_alloc(&a, SHOAL_SEG_KIND_USER, "blob", 8, 0, &off), -EEXIST);

	assert_int_equal(shoal_seg_attach(&b, "rt", 0, NULL), 0);
	shoal_seg_info(&b, &info);
	assert_int_equal(info.version, SHOAL_SEG_VERSION);
	assert_int_equal(info.size, a.size);
	assert_int_equal(info.creator_pid, getpid());
	assert_int_equal(info.creator_uid, geteuid());
	assert_int_equal(info.generation, 1);
	assert_int_equal(info.dir_count, 1);
	assert_string_equal(info.name, "rt");
	assert_int_equal(shoal_seg_find(&b, SHOAL_SEG_KIND_USER, "blob", &r), 0);
	assert_int_equal(r.len, 1000);
	assert_int_equal(((unsigned char *)b.base)[r.off + 999], 0xab);
	assert_int_equal(shoal_seg_find(&b, SHOAL_SEG_KIND_RING, "blob", &r), -ENOENT);
	shoal_seg_detach(&b);
	shoal_seg_detach(&a);
	shoal_seg_detach(&a);   /* detach twice is harmless */
	assert_int_equal(shoal_seg_unlink("rt"), 0);
	assert_int_equal(shoal_seg_unlink("rt"), -ENOENT);
	assert_int_equal(attach_err("rt", 0, NULL), -ENOENT);
}

static void segment_create_refuses_bad_arguments(void **state)
{
	struct shoal_seg seg;
	struct shoal_seg_opts o = { .numa_node = -1 };
	struct shoal_err err = {{0}};

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "", 4096, NULL, &err), -EINVAL);
	assert_int_equal(shoal_seg_create(&seg, ".hidden", 4096, NULL, &err), -EINVAL);
	assert_int_equal(shoal_seg_create(&seg, "a/b", 4096, NULL, &err), -EINVAL);
	assert_int_equal(shoal_seg_create(&seg, "sp ace", 4096, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "outside"));
	o.flags = 1u << 20;
	assert_int_equal(shoal_seg_create(&seg, "flags", 4096, &o, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "unknown"));
	o.flags = 0;
	o.numa_node = 4096;
	assert_int_equal(shoal_seg_create(&seg, "node", 4096, &o, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "NUMA node"));
	o.numa_node = -1;
	o.mode = 01777;
	assert_int_equal(shoal_seg_create(&seg, "mode", 4096, &o, &err), -EINVAL);
	assert_int_equal(attach_err("x", 1u << 7, &err), -EINVAL);
	/* Nothing was left behind by any failed create. */
	assert_int_equal(access(test_seg_path("flags"), F_OK), -1);
	assert_int_equal(access(test_seg_path("node"), F_OK), -1);
	make_segment("dup", 4096);
	assert_int_equal(shoal_seg_create(&seg, "dup", 4096, NULL, &err), -EEXIST);
}

static void segment_alloc_stops_at_capacity(void **state)
{
	struct shoal_seg seg, ro;
	struct shoal_seg_opts o = { .numa_node = -1, .dir_cap = 2 };
	uint64_t off;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "full", 8192, &o, NULL), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "a", 100, 8, &off), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "b", 1u << 20, 8, &off),
			 -ENOSPC);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "b", 100, 3, &off), -EINVAL);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "b", 100, 8, &off), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "c", 8, 8, &off), -ENOSPC);
	assert_int_equal(shoal_seg_attach(&ro, "full", SHOAL_SEG_RDONLY, NULL), 0);
	assert_false(ro.writable);
	assert_int_equal(shoal_seg_alloc(&ro, SHOAL_SEG_KIND_USER, "d", 8, 8, &off), -EINVAL);
	shoal_seg_detach(&ro);
	shoal_seg_detach(&seg);
}

/* What the init callback saw through a second mapping, as a peer would. */
struct init_probe {
	struct shoal_seg *peer;
	uint32_t count_seen;
	int find_seen;
	int fail_with;
};

static int probe_init(void *mem, uint64_t len, void *arg)
{
	struct init_probe *p = arg;
	struct shoal_seg_region r;

	p->count_seen = shoal_seg_dir_count(p->peer);
	p->find_seen = shoal_seg_find(p->peer, SHOAL_SEG_KIND_USER, "built", &r);
	memset(mem, 0xab, len);
	return p->fail_with;
}

static void segment_alloc_init_publishes_after_init(void **state)
{
	struct shoal_seg seg, peer;
	struct shoal_seg_region r;
	struct init_probe p = { .peer = &peer };
	uint64_t off, off2;
	const unsigned char *mem;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "initpub", 1u << 16, NULL, NULL), 0);
	assert_int_equal(shoal_seg_attach(&peer, "initpub", SHOAL_SEG_RDONLY, NULL), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "first", 64, 0, &off), 0);

	/* A failing init allocates nothing and its errno comes back. */
	p.fail_with = -EIO;
	assert_int_equal(shoal_seg_alloc_init(&seg, SHOAL_SEG_KIND_USER, "built", NULL, 256, 0,
					      probe_init, &p, &off), -EIO);
	assert_int_equal(shoal_seg_dir_count(&peer), 1);
	assert_int_equal(shoal_seg_find(&peer, SHOAL_SEG_KIND_USER, "built", &r), -ENOENT);

	/* While init runs, a peer neither counts nor finds the region; once
	 * it is counted, the peer sees what init wrote. */
	p.fail_with = 0;
	assert_int_equal(shoal_seg_alloc_init(&seg, SHOAL_SEG_KIND_USER, "built", NULL, 256, 0,
					      probe_init, &p, &off2), 0);
	assert_int_equal(p.count_seen, 1);
	assert_int_equal(p.find_seen, -ENOENT);
	assert_int_equal(shoal_seg_dir_count(&peer), 2);
	assert_int_equal(shoal_seg_find(&peer, SHOAL_SEG_KIND_USER, "built", &r), 0);
	assert_int_equal(r.off, off2);
	mem = shoal_seg_ptr(&peer, r.off, r.len, 1);
	assert_non_null(mem);
	assert_int_equal(mem[0], 0xab);
	assert_int_equal(mem[255], 0xab);
	shoal_seg_detach(&peer);
	shoal_seg_detach(&seg);
}

static void segment_tag_finds_a_region_and_is_unique_per_kind(void **state)
{
	const struct shoal_seg_tag t1 = { .role = 3, .a = 1, .b = 2, .c = 3, .gen = 0 };
	const struct shoal_seg_tag t2 = { .role = 3, .a = 1, .b = 2, .c = 3, .gen = 1 };
	struct shoal_seg seg, peer;
	struct shoal_seg_region r;
	uint64_t off, off2;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "tags", 1u << 16, NULL, NULL), 0);
	assert_int_equal(shoal_seg_alloc_init(&seg, SHOAL_SEG_KIND_RING, "one", &t1, 64, 0, NULL,
					      NULL, &off), 0);
	assert_int_equal(shoal_seg_alloc_init(&seg, SHOAL_SEG_KIND_RING, "two", &t2, 64, 0, NULL,
					      NULL, &off2), 0);
	/* Same kind and tag under another name: refused; another kind: not. */
	assert_int_equal(shoal_seg_alloc_init(&seg, SHOAL_SEG_KIND_RING, "three", &t1, 64, 0, NULL,
					      NULL, &off2), -EEXIST);
	assert_int_equal(shoal_seg_alloc_init(&seg, SHOAL_SEG_KIND_USER, "three", &t1, 64, 0, NULL,
					      NULL, &off2), 0);
	/* Untagged regions never collide by tag. */
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_RING, "plain", 64, 0, &off2), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_RING, "plain2", 64, 0, &off2), 0);

	assert_int_equal(shoal_seg_attach(&peer, "tags", SHOAL_SEG_RDONLY, NULL), 0);
	assert_int_equal(shoal_seg_find_tag(&peer, SHOAL_SEG_KIND_RING, &t1, &r), 0);
	assert_int_equal(r.off, off);
	assert_string_equal(r.name, "one");
	assert_true(shoal_seg_tag_equal(&r.tag, &t1));
	assert_int_equal(shoal_seg_find_tag(&peer, SHOAL_SEG_KIND_RING, &t2, &r), 0);
	assert_string_equal(r.name, "two");
	assert_int_equal(r.tag.gen, 1);
	assert_int_equal(shoal_seg_find_tag(&peer, SHOAL_SEG_KIND_DOORBELL, &t1, &r), -ENOENT);
	assert_int_equal(shoal_seg_find_tag(&peer, SHOAL_SEG_KIND_RING,
					    &(struct shoal_seg_tag){ 0 }, &r), -ENOENT);
	assert_int_equal(shoal_seg_region_at(&peer, 3, &r), 0);
	assert_int_equal(r.tag.role, 0);
	shoal_seg_detach(&peer);
	shoal_seg_detach(&seg);
	assert_int_equal(shoal_seg_unlink("tags"), 0);
}

static void segment_ptr_checks_bounds_and_alignment(void **state)
{
	struct shoal_seg seg;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "ptr", 4096, NULL, NULL), 0);
	assert_non_null(shoal_seg_ptr(&seg, 0, seg.size, 1));
	assert_non_null(shoal_seg_ptr(&seg, seg.size, 0, 1));
	assert_null(shoal_seg_ptr(&seg, seg.size, 1, 1));
	assert_null(shoal_seg_ptr(&seg, 1, seg.size, 1));
	assert_null(shoal_seg_ptr(&seg, 8, UINT64_MAX - 4, 1));
	assert_null(shoal_seg_ptr(&seg, UINT64_MAX, 1, 1));
	assert_null(shoal_seg_ptr(&seg, 12, 8, 8));
	assert_non_null(shoal_seg_ptr(&seg, 16, 8, 8));
	shoal_seg_detach(&seg);
}

static void segment_attach_refuses_truncated_file(void **state)
{
	struct shoal_err err = {{0}};

	(void)state;
	make_segment("trunc", 8192);
	assert_int_equal(truncate(test_seg_path("trunc"), 4096), 0);
	assert_int_equal(attach_err("trunc", 0, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "truncated"));
	assert_int_equal(truncate(test_seg_path("trunc"), 100), 0);
	assert_int_equal(attach_err("trunc", SHOAL_SEG_RDONLY, &err), -EBADMSG);
	assert_int_equal(truncate(test_seg_path("trunc"), 0), 0);
	assert_int_equal(attach_err("trunc", 0, &err), -EBADMSG);
}

static void segment_attach_refuses_foreign_file(void **state)
{
	struct shoal_err err = {{0}};
	char junk[8192];
	uint64_t s = 42;
	int fd;

	(void)state;
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)test_rand(&s);
	fd = open(test_seg_path("junk"), O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	assert_int_equal(attach_err("junk", 0, &err), -EPROTO);
	assert_non_null(strstr(err.msg, "not a Shoal segment"));
	assert_string_equal(shoal_strerror(-EPROTO), "not a Shoal segment (bad magic)");
	assert_int_equal(mkdir(test_seg_path("dir"), 0700), 0);
	assert_true(attach_err("dir", 0, &err) < 0);
	rmdir(test_seg_path("dir"));
}

static void segment_attach_refuses_other_version(void **state)
{
	struct shoal_err err = {{0}};
	uint32_t v = SHOAL_SEG_VERSION + 1;

	(void)state;
	make_segment("ver", 4096);
	patch_file("ver", offsetof(struct shoal__seg_hdr, version), &v, sizeof(v));
	assert_int_equal(attach_err("ver", 0, &err), -EPROTONOSUPPORT);
	assert_non_null(strstr(err.msg, "version 2"));
}

static void segment_attach_refuses_inconsistent_header(void **state)
{
	struct shoal_err err = {{0}};
	uint64_t size = 1u << 30, zero = 0;
	uint32_t dir_cap = 1u << 15, dir_count = 99;

	(void)state;
	make_segment("size", 4096);
	patch_file("size", offsetof(struct shoal__seg_hdr, size), &size, sizeof(size));
	assert_int_equal(attach_err("size", 0, &err), -EBADMSG);

	make_segment("bigger", 8192);
	size = 4096;
	patch_file("bigger", offsetof(struct shoal__seg_hdr, size), &size, sizeof(size));
	assert_int_equal(attach_err("bigger", 0, &err), -EUCLEAN);

	make_segment("dir", 4096);
	patch_file("dir", offsetof(struct shoal__seg_hdr, dir_cap), &dir_cap, sizeof(dir_cap));
	assert_int_equal(attach_err("dir", 0, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, "directory"));

	make_segment("count", 4096);
	patch_file("count", offsetof(struct shoal__seg_hdr, dir_count), &dir_count,
		   sizeof(dir_count));
	assert_int_equal(attach_err("count", 0, &err), -EUCLEAN);

	make_segment("init", 4096);
	patch_file("init", 0, &zero, sizeof(zero));
	assert_int_equal(attach_err("init", 0, &err), -EAGAIN);
	assert_non_null(strstr(err.msg, "initialised"));
}

static void segment_region_with_bad_offset_is_euclean(void **state)
{
	struct shoal_seg seg;
	struct shoal_seg_region r;
	uint64_t off, bad = UINT64_MAX - 16;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "badoff", 8192, NULL, NULL), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "r", 64, 8, &off), 0);
	shoal_seg_detach(&seg);
	patch_file("badoff", SHOAL__SEG_HDR_SIZE + offsetof(struct shoal__seg_dirent, off), &bad,
		   sizeof(bad));
	assert_int_equal(shoal_seg_attach(&seg, "badoff", 0, NULL), 0);
	assert_int_equal(shoal_seg_region_at(&seg, 0, &r), -EUCLEAN);
	assert_int_equal(shoal_seg_find(&seg, SHOAL_SEG_KIND_USER, "r", &r), -EUCLEAN);
	assert_int_equal(shoal_seg_region_at(&seg, 1, &r), -ENOENT);
	shoal_seg_detach(&seg);
}

/* The creator re-checks a live segment: header, directory, and its name. */
static void segment_verify_finds_damage_and_unlink(void **state)
{
	struct shoal_seg seg, peer;
	struct shoal_err err = {{0}};
	struct shoal__seg_hdr *h;
	uint64_t off;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "verify", 8192, NULL, NULL), 0);
	assert_int_equal(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "r", 64, 8, &off), 0);
	assert_int_equal(shoal_seg_verify(&seg, &err), 0);
	assert_int_equal(shoal_seg_attach(&peer, "verify", 0, NULL), 0);
	h = peer.base;
	atomic_store(&h->dir_count, 7);
	assert_int_equal(shoal_seg_verify(&seg, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, "recounted"));
	atomic_store(&h->dir_count, 1);
	((struct shoal__seg_dirent *)((char *)peer.base + h->dir_off))->off = UINT64_MAX - 8;
	assert_int_equal(shoal_seg_verify(&seg, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, "entry 0"));
	((struct shoal__seg_dirent *)((char *)peer.base + h->dir_off))->off = off;
	assert_int_equal(shoal_seg_verify(&seg, &err), 0);
	shoal_seg_detach(&peer);
	assert_int_equal(shoal_seg_unlink("verify"), 0);
	assert_int_equal(shoal_seg_verify(&seg, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "unlinked"));
	shoal_seg_detach(&seg);
}

static void segment_attach_refuses_other_owner(void **state)
{
	struct passwd *pw = getpwnam("nobody");
	struct shoal_err err = {{0}};

	(void)state;
	if (pw == NULL)
		skip();
	make_segment("owned", 4096);
	assert_int_equal(chown(test_seg_path("owned"), pw->pw_uid, pw->pw_gid), 0);
	assert_int_equal(attach_err("owned", 0, &err), -EPERM);
	assert_non_null(strstr(err.msg, "owned by uid"));
	assert_int_equal(attach_err("owned", SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN, &err), 0);
}

/*
 * A process running as `nobody` tries to attach to our segments. Run through
 * setpriv so that the uid really differs, as the integration rules require.
 */
static int run_as_nobody(const char *seg_path, const char *flags)
{
	char self[512], cmd[5200], path[512];
	pid_t pid;

	snprintf(path, sizeof(path), "%s", seg_path);   /* test_seg_path reuses its buffer */
	/* A copy of this program in the test directory, so that `nobody` can
	 * execute it whatever the permissions of the build tree. */
	snprintf(self, sizeof(self), "%s", test_seg_path("attach-child"));
	if (access(self, X_OK) != 0) {
		/* argv[0], not /proc/self/exe: under valgrind that is valgrind. */
		snprintf(cmd, sizeof(cmd), "install -m 0755 %s %s", self_path, self);
		assert_int_equal(system(cmd), 0);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execlp("setpriv", "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
		       self, "--attach-child", path, flags, (char *)NULL);
		_exit(127);
	}
	int status = test_wait_pid(pid, 10000);

	assert_true(status != -1 && WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void segment_other_user_cannot_attach(void **state)
{
	struct shoal_seg seg;
	struct shoal_seg_opts open_mode = { .numa_node = -1, .mode = 0640 };
	char dir[256];

	(void)state;
	if (geteuid() != 0 || getpwnam("nobody") == NULL || system("command -v setpriv >/dev/null"))
		skip();
	snprintf(dir, sizeof(dir), "%s", test_seg_path(""));
	dir[strlen(dir) - 1] = '\0';
	assert_int_equal(chmod(dir, 0711), 0);
	make_segment("private", 4096);
	assert_int_equal(shoal_seg_create(&seg, "readable", 4096, &open_mode, NULL), 0);
	shoal_seg_detach(&seg);
	/* Create refuses world modes; open this one by hand, so that the
	 * owner check, not the file mode, is what refuses `nobody`. */
	assert_int_equal(chmod(test_seg_path("readable"), 0644), 0);
	/* The child exits with -errno of its attach. */
	assert_int_equal(run_as_nobody(test_seg_path("private"), "ro"), EACCES);
	assert_int_equal(run_as_nobody(test_seg_path("readable"), "ro"), EPERM);
	assert_int_equal(run_as_nobody(test_seg_path("readable"), "ro-foreign"), 0);
	assert_int_equal(run_as_nobody(test_seg_path("readable"), "rw-foreign"), EACCES);
}

static void segment_memory_lands_on_requested_node(void **state)
{
	struct shoal_seg seg;
	struct shoal_seg_opts o = { .numa_node = 0 };
	struct shoal_seg_info info;

	(void)state;
	assert_int_equal(shoal_seg_create(&seg, "numa", 1 << 20, &o, NULL), 0);
	shoal_seg_info(&seg, &info);
	assert_int_equal(info.numa_node, 0);
	assert_int_equal(shoal_numa_policy_node(seg.base), 0);
	for (size_t i = 0; i < seg.size; i += 4096)
		((volatile char *)seg.base)[i] = 1;
	/* Ask the kernel where the pages are, rather than trusting the policy. */
	assert_int_equal(shoal_numa_node_of(seg.base), 0);
	assert_int_equal(shoal_numa_node_of((char *)seg.base + seg.size - 1), 0);
	assert_int_equal(shoal_numa_node_of_cpu(0), 0);
	assert_true(shoal_numa_node_count() >= 1);
	shoal_seg_detach(&seg);
}

static void numa_bind_sets_the_policy_of_a_fresh_mapping(void **state)
{
	size_t len = 2 * (size_t)sysconf(_SC_PAGESIZE);
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)state;
	assert_true(mem != MAP_FAILED);
	assert_int_equal(shoal_numa_policy_node(mem), -1);   /* the default policy */
	assert_int_equal(shoal_numa_bind(mem, len, -1), -EINVAL);
	assert_int_equal(shoal_numa_bind(mem, len, shoal_numa_node_count()), -EINVAL);
	assert_int_equal(shoal_numa_policy_node(mem), -1);   /* a refused bind changes nothing */
	assert_int_equal(shoal_numa_bind(mem, len, 0), 0);
	assert_int_equal(shoal_numa_policy_node(mem), 0);
	memset(mem, 1, len);
	assert_int_equal(shoal_numa_node_of(mem), 0);
	munmap(mem, len);
}

static void segment_huge_pages_fall_back_or_fail_cleanly(void **state)
{
	struct shoal_seg seg;
	struct shoal_seg_opts thp = { .numa_node = -1, .flags = SHOAL_SEG_HUGE_TRY };
	struct shoal_seg_opts tlb = { .numa_node = -1, .flags = SHOAL_SEG_HUGETLB,
				      .dir = test_seg_path("no-such-mount") };
	struct shoal_err err = {{0}};
	int ret;

	(void)state;
	/* Transparent huge pages: a request, never a failure. */
	assert_int_equal(shoal_seg_create(&seg, "thp", 4 << 20, &thp, NULL), 0);
	assert_true(seg.huge == SHOAL_SEG_HUGE_NONE || seg.huge == SHOAL_SEG_HUGE_THP);
	shoal_seg_detach(&seg);
	/* Explicit huge pages from a directory that is not hugetlbfs. */
	assert_int_equal(shoal_seg_create(&seg, "tlb", 4 << 20, &tlb, &err), -ENOTSUP);
	assert_non_null(strstr(err.msg, "hugetlbfs"));
	/* From the default mount: works where huge pages are reserved. */
	tlb.dir = NULL;
	ret = shoal_seg_create(&seg, "tlb2", 4 << 20, &tlb, &err);
	if (ret == 0) {
		assert_int_equal(seg.huge, SHOAL_SEG_HUGE_HUGETLB);
		shoal_seg_detach(&seg);
		shoal_seg_unlink(seg.path);
	} else {
		assert_true(ret == -ENOTSUP || ret == -ENOMEM);
		print_message("explicit huge pages unavailable here: %s\n", err.msg);
	}
}

static void segment_probe_tells_leftover_from_live(void **state)
{
	pid_t pid;

	(void)state;
	make_segment("mine", 4096);
	assert_int_equal(shoal_seg_probe("mine", NULL), 1);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct shoal_seg seg;

		_exit(shoal_seg_create(&seg, "orphan", 4096, NULL, NULL) == 0 ? 0 : 1);
	}
	test_assert_exited(test_wait_pid(pid, 5000), 0);
	assert_int_equal(shoal_seg_probe("orphan", NULL), 0);
	assert_int_equal(shoal_seg_probe("absent", NULL), -ENOENT);
}

/* SHOAL_SHM_DIR for one test; restore_dir() gives the test directory back. */
static char saved_dir[512];

static void use_dir(const char *d)
{
	snprintf(saved_dir, sizeof(saved_dir), "%s", getenv("SHOAL_SHM_DIR"));
	if (d != NULL)
		setenv("SHOAL_SHM_DIR", d, 1);
	else
		unsetenv("SHOAL_SHM_DIR");
}

static void restore_dir(void)
{
	setenv("SHOAL_SHM_DIR", saved_dir, 1);
}

static void segment_default_directory_is_the_users_own(void **state)
{
	char want[64], path[256], name[64], full[320];
	struct shoal_seg seg;
	struct stat st;

	(void)state;
	use_dir(NULL);
	snprintf(want, sizeof(want), "/dev/shm/shoal-%u", (unsigned)geteuid());
	assert_int_equal(shoal_seg_dir_path(path, sizeof(path)), 0);
	assert_string_equal(path, want);
	snprintf(name, sizeof(name), "segment-test-%d", (int)getpid());
	assert_int_equal(shoal_seg_create(&seg, name, 4096, NULL, NULL), 0);
	snprintf(full, sizeof(full), "%s/%s", want, name);
	assert_string_equal(seg.path, full);
	shoal_seg_detach(&seg);
	/* Made on first use, ours, and nobody else may write in it. */
	assert_int_equal(lstat(want, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal(st.st_mode & 0022, 0);
	assert_int_equal(attach_err(name, 0, NULL), 0);
	assert_int_equal(shoal_seg_unlink(name), 0);
	restore_dir();
}

static void segment_directory_not_private_is_refused(void **state)
{
	struct shoal_seg seg;
	struct shoal_err err = {{0}};
	struct passwd *pw = getpwnam("nobody");
	char shared[512], link[512], priv[512], theirs[512];

	(void)state;
	snprintf(shared, sizeof(shared), "%s", test_seg_path("shared"));
	snprintf(link, sizeof(link), "%s", test_seg_path("link"));
	snprintf(priv, sizeof(priv), "%s", test_seg_path("priv"));
	snprintf(theirs, sizeof(theirs), "%s", test_seg_path("theirs"));
	assert_int_equal(mkdir(shared, 0700), 0);
	assert_int_equal(chmod(shared, 01777), 0);   /* like /dev/shm itself */
	assert_int_equal(mkdir(priv, 0700), 0);
	assert_int_equal(symlink(priv, link), 0);

	use_dir(shared);
	assert_int_equal(shoal_seg_create(&seg, "s", 4096, NULL, &err), -EPERM);
	assert_non_null(strstr(err.msg, shared));
	assert_non_null(strstr(err.msg, "other users may write"));
	assert_int_equal(attach_err("s", SHOAL_SEG_RDONLY, &err), -EPERM);
	assert_int_equal(shoal_seg_unlink("s"), -EPERM);
	setenv("SHOAL_SHM_DIR", link, 1);
	assert_int_equal(shoal_seg_create(&seg, "s", 4096, NULL, &err), -EPERM);
	assert_non_null(strstr(err.msg, "symbolic link"));
	assert_int_equal(access(test_seg_path("priv/s"), F_OK), -1);
	/* Created as ours, then given away: a directory of another user. */
	if (geteuid() == 0 && pw != NULL) {
		assert_int_equal(mkdir(theirs, 0700), 0);
		setenv("SHOAL_SHM_DIR", theirs, 1);
		make_segment("t", 4096);
		assert_int_equal(chown(theirs, pw->pw_uid, pw->pw_gid), 0);
		assert_int_equal(shoal_seg_create(&seg, "u", 4096, NULL, &err), -EPERM);
		assert_non_null(strstr(err.msg, "owned by uid"));
		assert_int_equal(attach_err("t", SHOAL_SEG_RDONLY, &err), -EPERM);
		/* A tool that accepts other users' segments reads it. */
		assert_int_equal(attach_err("t", SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN, &err),
				 0);
	}
	restore_dir();
	assert_int_equal(rmdir(shared), 0);
}

static void segment_dir_open_makes_checks_and_refuses(void **state)
{
	char fresh[512], path[512];
	struct shoal_err err = {{0}};
	struct stat st;
	int fd;

	(void)state;
	snprintf(fresh, sizeof(fresh), "%s", test_seg_path("fresh"));
	use_dir(fresh);
	assert_int_equal(shoal_seg_dir_open(path, sizeof(path), false, &err), -ENOENT);
	assert_non_null(strstr(err.msg, fresh));
	fd = shoal_seg_dir_open(path, sizeof(path), true, NULL);
	assert_true(fd >= 0);
	assert_string_equal(path, fresh);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	close(fd);
	/* Writable by the group: no longer private, refused even to open. */
	assert_int_equal(chmod(fresh, 0770), 0);
	assert_int_equal(shoal_seg_dir_open(path, sizeof(path), true, &err), -EPERM);
	assert_int_equal(shoal_seg_dir_open(path, 4, false, NULL), -ENAMETOOLONG);
	restore_dir();
}

static void segment_create_refuses_world_modes(void **state)
{
	static const mode_t world[] = { 0666, 0606, 0604, 0602, 0601, 0644 };
	struct shoal_seg seg;
	struct shoal_seg_opts o = { .numa_node = -1 };
	struct shoal_err err = {{0}};
	struct stat st;
	char dir[512];

	(void)state;
	for (size_t i = 0; i < sizeof(world) / sizeof(world[0]); i++) {
		o.mode = world[i];
		assert_int_equal(shoal_seg_create(&seg, "world", 4096, &o, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "every user"));
		assert_int_equal(access(test_seg_path("world"), F_OK), -1);
	}
	/* A group may share it: the file is 0660, the directory searchable
	 * by the group and still writable by its owner only. */
	o.mode = 0660;
	assert_int_equal(shoal_seg_create(&seg, "group", 4096, &o, &err), 0);
	assert_int_equal(fstat(seg.fd, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	shoal_seg_detach(&seg);
	snprintf(dir, sizeof(dir), "%s", test_seg_path(""));
	assert_int_equal(stat(dir, &st), 0);
	assert_true(st.st_mode & S_IXGRP);
	assert_int_equal(st.st_mode & 0022, 0);
}

/* In a child with a 256 KiB tmpfs: exits 0 when every check holds. */
static int full_shm_main(void *arg)
{
	struct shoal_seg seg, small;
	struct shoal_err err = {{0}};
	uint64_t off;
	char path[600];
	const char *dir = test_small_shm("small", 256 * 1024);

	(void)arg;
	if (dir == NULL)
		return TEST_CHILD_SKIP;
	/* More than the filesystem holds: refused at create, nothing left. */
	CHILD_CHECK(shoal_seg_create(&seg, "big", 1 << 20, NULL, &err) == 0);
	CHILD_CHECK(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "r", 512 * 1024, 0, &off) ==
		    -ENOSPC);
	shoal_seg_detach(&seg);
	CHILD_CHECK(shoal_seg_unlink("big") == 0);
	/* A region that fits is reserved whole: every byte can be written. */
	CHILD_CHECK(shoal_seg_create(&small, "small", 1 << 20, NULL, &err) == 0);
	CHILD_CHECK(shoal_seg_alloc(&small, SHOAL_SEG_KIND_USER, "r", 128 * 1024, 0, &off) == 0);
	memset((char *)small.base + off, 0xa5, 128 * 1024);
	/* What is left cannot hold a second segment's header: -ENOSPC, and
	 * the message says the filesystem is full. */
	CHILD_CHECK(shoal_seg_alloc(&small, SHOAL_SEG_KIND_USER, "r2", 128 * 1024, 0, &off) ==
		    -ENOSPC);
	for (int i = 0; i < 64; i++) {
		char name[16];
		int ret;

		snprintf(name, sizeof(name), "fill%d", i);
		ret = shoal_seg_create(&seg, name, 1 << 20, NULL, &err);
		if (ret == -ENOSPC) {
			CHILD_CHECK(strstr(err.msg, "filesystem is full") != NULL);
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			CHILD_CHECK(access(path, F_OK) != 0);
			shoal_seg_detach(&small);
			return 0;
		}
		CHILD_CHECK(ret == 0);
		shoal_seg_detach(&seg);
	}
	fprintf(stderr, "the tmpfs never filled up\n");
	return 1;
}

static void segment_full_filesystem_is_enospc_not_sigbus(void **state)
{
	int status;

	(void)state;
	status = test_wait_pid(test_spawn(full_shm_main, NULL, 0), 30000);
	if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_CHILD_SKIP)
		skip();
	test_assert_exited(status, 0);
}

/* Child mode for segment_other_user_cannot_attach: exit with -ret. */
static int attach_child(const char *path, const char *mode)
{
	uint32_t flags = SHOAL_SEG_RDONLY;
	struct shoal_seg seg;
	int ret;

	if (strcmp(mode, "ro-foreign") == 0)
		flags |= SHOAL_SEG_ALLOW_FOREIGN;
	else if (strcmp(mode, "rw-foreign") == 0)
		flags = SHOAL_SEG_ALLOW_FOREIGN;
	ret = shoal_seg_attach(&seg, path, flags, NULL);
	if (ret == 0)
		shoal_seg_detach(&seg);
	return -ret;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(segment_create_attach_roundtrip),
		cmocka_unit_test(segment_create_refuses_bad_arguments),
		cmocka_unit_test(segment_alloc_stops_at_capacity),
		cmocka_unit_test(segment_alloc_init_publishes_after_init),
		cmocka_unit_test(segment_tag_finds_a_region_and_is_unique_per_kind),
		cmocka_unit_test(segment_ptr_checks_bounds_and_alignment),
		cmocka_unit_test(segment_attach_refuses_truncated_file),
		cmocka_unit_test(segment_attach_refuses_foreign_file),
		cmocka_unit_test(segment_attach_refuses_other_version),
		cmocka_unit_test(segment_attach_refuses_inconsistent_header),
		cmocka_unit_test(segment_region_with_bad_offset_is_euclean),
		cmocka_unit_test(segment_verify_finds_damage_and_unlink),
		cmocka_unit_test(segment_attach_refuses_other_owner),
		cmocka_unit_test(segment_other_user_cannot_attach),
		cmocka_unit_test(segment_memory_lands_on_requested_node),
		cmocka_unit_test(numa_bind_sets_the_policy_of_a_fresh_mapping),
		cmocka_unit_test(segment_huge_pages_fall_back_or_fail_cleanly),
		cmocka_unit_test(segment_probe_tells_leftover_from_live),
		cmocka_unit_test(segment_default_directory_is_the_users_own),
		cmocka_unit_test(segment_directory_not_private_is_refused),
		cmocka_unit_test(segment_dir_open_makes_checks_and_refuses),
		cmocka_unit_test(segment_create_refuses_world_modes),
		cmocka_unit_test(segment_full_filesystem_is_enospc_not_sigbus),
	};

	if (argc == 4 && strcmp(argv[1], "--attach-child") == 0)
		return attach_child(argv[2], argv[3]);
	if (realpath(argv[0], self_path) == NULL)
		return 1;
	return cmocka_run_group_tests(tests, setup, teardown);
}
