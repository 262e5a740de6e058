/* SPDX-License-Identifier: MIT */
/*
 * Named shared-memory segments: files in a tmpfs (or hugetlbfs) directory,
 * mapped MAP_SHARED.
 *
 * Why files in /dev/shm rather than memfd: a segment must outlive the
 * process that made it (a restarted group re-attaches its mailbox, a tool
 * inspects a crashed system's rings), and it must be found by name by
 * processes that were never handed a descriptor. POSIX shm names give both;
 * memfd would need a live process to pass descriptors around. Opening the
 * file by path (what shm_open() does under the hood) also lets a segment live
 * in a hugetlbfs mount or in a test's private directory.
 *
 * Ordering guarantees:
 *   R1 (create: magic store-release) pairs with A1 (attach: magic
 *      load-acquire): an attacher that sees the magic sees the whole header.
 *   R2 (alloc: dir_count store-release) pairs with A2 (the finds, region_at:
 *      dir_count load-acquire): a reader that counts an entry sees it whole,
 *      and sees the region as shoal_seg_alloc_init()'s init left it.
 * Progress: create, attach and probe make system calls; ptr, the finds and
 * region_at are wait-free loads. Concurrency: see lifecycle rule 3 in the
 * header (one allocating thread, in the creator; any number of readers).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <shoal/numa.h>
#include <shoal/segment.h>

#include "shm/segment_layout.h"
#include "shm/util.h"

#define DEFAULT_DIR "/dev/shm"
#define DEFAULT_HUGETLB_DIR "/dev/hugepages"
#define HUGETLBFS_MAGIC_NUMBER 0x958458f6
#define DEFAULT_DIR_CAP 64u
#define MAX_DIR_CAP 65536u

static int check_name(const char *name, struct shoal_err *err)
{
	size_t n;

	if (name == NULL || name[0] == '\0')
		return shoal__fail(err, -EINVAL, "empty segment name");
	n = strlen(name);
	if (n >= SHOAL_SEG_NAME_MAX)
		return shoal__fail(err, -EINVAL, "segment name longer than %d characters",
				   SHOAL_SEG_NAME_MAX - 1);
	if (name[0] == '.')
		return shoal__fail(err, -EINVAL, "segment name '%s' starts with a dot", name);
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return shoal__fail(err, -EINVAL, "segment name '%s' has a character "
					   "outside [A-Za-z0-9._-]", name);
	}
	return 0;
}

int shoal_seg_dir_path(char *buf, size_t len)
{
	const char *d = getenv("SHOAL_SHM_DIR");
	int n;

	if (d != NULL && d[0] != '\0')
		n = snprintf(buf, len, "%s", d);
	else
		n = snprintf(buf, len, DEFAULT_DIR "/shoal-%u", (unsigned)geteuid());
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/*
 * Open the directory `path` (never through a symbolic link) and, if
 * `private` is set, check that it is ours and that nobody else can write in
 * it: otherwise another user could plant, replace or remove our files
 * there. With `create`, a missing directory is made mode 0700 first.
 * Returns a descriptor (and its stat in *st) or a negative errno.
 */
static int open_dir(const char *path, bool create, bool private, struct stat *st,
		    struct shoal_err *err)
{
	int fd, ret;

	if (create && mkdir(path, 0700) != 0 && errno != EEXIST)
		return shoal__fail(err, -errno, "cannot create the segment directory %s: %s",
				   path, strerror(errno));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (lstat(path, st) == 0 && S_ISLNK(st->st_mode))
			return shoal__fail(err, -EPERM, "segment directory %s is a symbolic link: "
					   "refused (it must be a real directory)", path);
		if (ret == -ENOENT)
			return shoal__fail(err, ret, "no segment directory %s", path);
		return shoal__fail(err, ret, "cannot open the segment directory %s: %s", path,
				   strerror(-ret));
	}
	if (fstat(fd, st) != 0) {
		ret = shoal__fail(err, -errno, "stat %s: %s", path, strerror(errno));
		goto fail;
	}
	if (private && st->st_uid != geteuid()) {
		ret = shoal__fail(err, -EPERM, "segment directory %s is owned by uid %u, not by "
				  "us (uid %u): refused as hostile; remove it or set "
				  "SHOAL_SHM_DIR to a directory of ours", path,
				  (unsigned)st->st_uid, (unsigned)geteuid());
		goto fail;
	}
	if (private && (st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		ret = shoal__fail(err, -EPERM, "segment directory %s has mode %04o: other users "
				  "may write in it; it must be writable by its owner only "
				  "(chmod go-w %s)", path, (unsigned)(st->st_mode & 07777), path);
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return ret;
}

/*
 * Resolve a name or a path into a path; fill `base` with the base name. For
 * a name, *dirfd is the open directory it lives in (see open_dir()); for a
 * path, *dirfd is AT_FDCWD. The caller closes a descriptor >= 0.
 */
static int resolve(const char *name, const char *dir, bool create, bool private,
		   char *path, size_t path_len, char *base, int *dirfd, struct shoal_err *err)
{
	const char *slash = name ? strrchr(name, '/') : NULL;
	char dpath[256];
	struct stat st;
	int ret;

	*dirfd = AT_FDCWD;
	if (slash != NULL) {
		if (strlen(name) >= path_len)
			return shoal__fail(err, -EINVAL, "segment path too long");
		strcpy(path, name);
		snprintf(base, SHOAL_SEG_NAME_MAX, "%s", slash + 1);
		return 0;
	}
	ret = check_name(name, err);
	if (ret < 0)
		return ret;
	if (dir != NULL) {
		/* A directory the caller names (a hugetlbfs mount, a fuzzer's
		 * mkdtemp): its choice, so only "not a link" is checked. */
		private = false;
		create = false;
		ret = strlen(dir) < sizeof(dpath) ? 0 : -ENAMETOOLONG;
		if (ret == 0)
			strcpy(dpath, dir);
	} else {
		ret = shoal_seg_dir_path(dpath, sizeof(dpath));
	}
	if (ret < 0 || (size_t)snprintf(path, path_len, "%s/%s", dpath, name) >= path_len)
		return shoal__fail(err, -EINVAL, "segment directory path too long");
	snprintf(base, SHOAL_SEG_NAME_MAX, "%s", name);
	ret = open_dir(dpath, create, private, &st, err);
	if (ret < 0)
		return ret;
	*dirfd = ret;
	return 0;
}

static void close_dir(int dirfd)
{
	if (dirfd >= 0)
		close(dirfd);
}

int shoal_seg_dir_open(char *path, size_t len, bool create, struct shoal_err *err)
{
	struct stat st;

	if (shoal_seg_dir_path(path, len) < 0)
		return shoal__fail(err, -ENAMETOOLONG, "segment directory path too long");
	return open_dir(path, create, true, &st, err);
}

static bool thp_shmem_possible(void)
{
	char buf[128] = {0};
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");
	bool ok;

	if (f == NULL)
		return false;
	ok = fgets(buf, sizeof(buf), f) != NULL &&
	     (strstr(buf, "[always]") || strstr(buf, "[within_size]") ||
	      strstr(buf, "[advise]") || strstr(buf, "[force]"));
	fclose(f);
	return ok;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Give [off, off + len) of the file its blocks now, before anything writes
 * there, so that a full filesystem is -ENOSPC here rather than a SIGBUS at
 * the first touch of a page, in whichever process touches it first. Only
 * what is handed out is reserved (the header and directory at create, each
 * region at alloc): a mailbox sized for every NUMA node costs the memory of
 * the nodes it serves. A segment that asked for transparent huge pages is
 * populated through its mapping (fallocate knows no mapping and would take
 * small pages); what that cannot do, fallocate does.
 */
static int reserve(int fd, void *base, int huge, uint64_t off, uint64_t len)
{
#ifdef MADV_POPULATE_WRITE
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = off & ~(page - 1);

	if (huge == SHOAL_SEG_HUGE_THP &&
	    madvise((char *)base + start, (size_t)(off + len - start), MADV_POPULATE_WRITE) == 0)
		return 0;
#else
	(void)base;
	(void)huge;
#endif
	return -posix_fallocate(fd, (off_t)off, (off_t)len);
}

int shoal_seg_create(struct shoal_seg *seg, const char *name, size_t size,
		     const struct shoal_seg_opts *opts, struct shoal_err *err)
{
	static const struct shoal_seg_opts defaults = { .numa_node = -1 };
	const struct shoal_seg_opts *o = opts ? opts : &defaults;
	const char *dir = o->dir;
	uint32_t dir_cap = o->dir_cap ? o->dir_cap : DEFAULT_DIR_CAP;
	mode_t mode = o->mode ? o->mode : 0600;
	struct shoal__seg_hdr *h;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), min_size, dir_end;
	struct statfs sfs;
	struct stat dst;
	void *base;
	int fd, dirfd, ret;

	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	if (o->flags & ~SHOAL_SEG_CREATE_FLAGS)
		return shoal__fail(err, -EINVAL, "unknown segment flags 0x%x",
				   o->flags & ~SHOAL_SEG_CREATE_FLAGS);
	if (dir_cap > MAX_DIR_CAP)
		return shoal__fail(err, -EINVAL, "directory capacity %u above %u", dir_cap,
				   MAX_DIR_CAP);
	if (o->numa_node < -1 || (o->numa_node >= 0 && o->numa_node >= shoal_numa_node_count()))
		return shoal__fail(err, -EINVAL, "NUMA node %d does not exist (this machine has "
				   "%d)", o->numa_node, shoal_numa_node_count());
	if ((mode & ~0777u) != 0)
		return shoal__fail(err, -EINVAL, "segment mode %o is not a permission mode",
				   (unsigned)mode);
	if ((mode & 0007) != 0)
		return shoal__fail(err, -EINVAL, "segment mode %04o gives every user access; "
				   "allow the owner and at most its group (0600, 0640, 0660)",
				   (unsigned)mode);
	if (o->flags & SHOAL_SEG_HUGETLB) {
		if (dir == NULL)
			dir = DEFAULT_HUGETLB_DIR;
		if (statfs(dir, &sfs) != 0 || (unsigned long)sfs.f_type != HUGETLBFS_MAGIC_NUMBER)
			return shoal__fail(err, -ENOTSUP, "explicit huge pages asked for, but %s "
					   "is not a hugetlbfs mount", dir);
		page = (uint64_t)sfs.f_bsize;
	}
	if (strchr(name ? name : "", '/') != NULL)
		return shoal__fail(err, -EINVAL, "create takes a segment name, not a path");
	dir_end = shoal_seg_overhead(dir_cap);
	min_size = shoal__align_up(dir_end, page);
	if (size > (uint64_t)1 << 46)
		return shoal__fail(err, -EINVAL, "segment size %zu too large", size);
	size = (size_t)shoal__align_up(size < min_size ? min_size : size, page);
	ret = resolve(name, dir, true, true, seg->path, sizeof(seg->path), seg->name, &dirfd,
		      err);
	if (ret < 0)
		return ret;
	/* The group can reach a file it may open only through a directory it
	 * may search: give it g+x (never g+w) on our own directory. */
	if ((mode & 0070) != 0 && dir == NULL && fstat(dirfd, &dst) == 0 &&
	    !(dst.st_mode & S_IXGRP) && fchmod(dirfd, (dst.st_mode & 07777) | S_IXGRP) != 0) {
		ret = shoal__fail(err, -errno, "cannot let the group search %s: %s", seg->path,
				  strerror(errno));
		close_dir(dirfd);
		return ret;
	}

	/* O_EXCL never follows a link and never reuses a file someone planted. */
	fd = openat(dirfd, seg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0) {
		ret = shoal__fail(err, -errno, "cannot create %s: %s", seg->path,
				  strerror(errno));
		close_dir(dirfd);
		return ret;
	}
	/* The umask may have narrowed the mode; make it exactly what was asked. */
	if (fchmod(fd, mode) != 0) {
		ret = shoal__fail(err, -errno, "chmod %s: %s", seg->path, strerror(errno));
		goto fail_unlink;
	}
	if (ftruncate(fd, (off_t)size) != 0) {
		ret = shoal__fail(err, -errno, "cannot size %s to %zu bytes: %s", seg->path,
				  size, strerror(errno));
		goto fail_unlink;
	}
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		if (o->flags & SHOAL_SEG_HUGETLB)
			shoal__fail(err, ret, "no huge pages for %zu bytes in %s (reserve some "
				    "in /proc/sys/vm/nr_hugepages): %s", size, dir,
				    strerror(-ret));
		else
			shoal__fail(err, ret, "cannot map %s: %s", seg->path, strerror(-ret));
		goto fail_unlink;
	}
	/* Placement before first touch: nothing below writes before the bind. */
	if (o->numa_node >= 0) {
		ret = shoal_numa_bind(base, size, o->numa_node);
		if (ret < 0) {
			shoal__fail(err, ret, "cannot bind %s to NUMA node %d: %s", seg->path,
				    o->numa_node, strerror(-ret));
			goto fail_unmap;
		}
	}
	if (o->flags & SHOAL_SEG_HUGETLB)
		seg->huge = SHOAL_SEG_HUGE_HUGETLB;
	else if ((o->flags & SHOAL_SEG_HUGE_TRY) && thp_shmem_possible() &&
		 madvise(base, size, MADV_HUGEPAGE) == 0)
		seg->huge = SHOAL_SEG_HUGE_THP;
	ret = reserve(fd, base, seg->huge, 0, min_size);
	if (ret < 0) {
		shoal__fail(err, ret, "cannot reserve %llu bytes for %s%s: %s",
			    (unsigned long long)min_size, seg->path,
			    ret == -ENOSPC ? " (its filesystem is full: free space there or "
			    "ask for smaller rings)" : "", strerror(-ret));
		goto fail_unmap;
	}

	h = base;
	h->version = SHOAL_SEG_VERSION;
	h->hdr_size = SHOAL__SEG_HDR_SIZE;
	h->size = size;
	h->creator_pid = (int32_t)getpid();
	h->creator_uid = (uint32_t)geteuid();
	h->ctime_ns = realtime_ns();
	h->generation = o->generation ? o->generation : 1;
	h->numa_node = o->numa_node;
	h->flags = o->flags;
	h->dir_off = SHOAL__SEG_HDR_SIZE;
	h->dir_cap = dir_cap;
	/* Relaxed: nobody can see the segment before R1 below. */
	shoal_store_relaxed(&h->dir_count, 0);
	shoal_store_relaxed(&h->alloc_top, dir_end);
	snprintf(h->name, sizeof(h->name), "%s", seg->name);
	/* R1: pairs with A1 in shoal_seg_attach(): the header is complete. */
	shoal_store_release(&h->magic, SHOAL_SEG_MAGIC);

	seg->base = base;
	seg->size = size;
	seg->fd = fd;
	seg->writable = true;
	seg->creator = true;
	seg->dir_off = SHOAL__SEG_HDR_SIZE;
	seg->dir_cap = dir_cap;
	seg->dir_count = 0;
	seg->alloc_top = dir_end;
	close_dir(dirfd);
	return 0;

fail_unmap:
	munmap(base, size);
fail_unlink:
	unlinkat(dirfd, seg->name, 0);
	close(fd);
	close_dir(dirfd);
	return ret;
}

uint64_t shoal_seg_overhead(uint32_t dir_cap)
{
	return SHOAL__SEG_HDR_SIZE + (uint64_t)(dir_cap ? dir_cap : DEFAULT_DIR_CAP) *
				     SHOAL__SEG_DIRENT_SIZE;
}

/* Validate a header copy against the file size. */
static int check_header(const struct shoal__seg_hdr *h, uint64_t magic, uint64_t file_size,
			const char *path, struct shoal_err *err)
{
	uint64_t dir_end;

	if (magic == 0)
		return shoal__fail(err, -EAGAIN, "%s is still being initialised by its creator",
				   path);
	if (magic != SHOAL_SEG_MAGIC)
		return shoal__fail(err, -EPROTO, "%s is not a Shoal segment (magic 0x%016llx)",
				   path, (unsigned long long)magic);
	if (h->version != SHOAL_SEG_VERSION)
		return shoal__fail(err, -EPROTONOSUPPORT, "%s has segment layout version %u; "
				   "this build reads version %u", path, h->version,
				   SHOAL_SEG_VERSION);
	if (h->hdr_size != SHOAL__SEG_HDR_SIZE)
		return shoal__fail(err, -EUCLEAN, "%s: header size %u, expected %u", path,
				   h->hdr_size, SHOAL__SEG_HDR_SIZE);
	if (h->size > file_size)
		return shoal__fail(err, -EBADMSG, "%s is truncated: header says %llu bytes, the "
				   "file has %llu", path, (unsigned long long)h->size,
				   (unsigned long long)file_size);
	if (h->size < file_size)
		return shoal__fail(err, -EUCLEAN, "%s: header says %llu bytes but the file has "
				   "%llu", path, (unsigned long long)h->size,
				   (unsigned long long)file_size);
	dir_end = (uint64_t)h->dir_off + (uint64_t)h->dir_cap * SHOAL__SEG_DIRENT_SIZE;
	if (h->dir_off < SHOAL__SEG_HDR_SIZE || h->dir_off % 8 != 0 || h->dir_cap > MAX_DIR_CAP ||
	    dir_end > h->size)
		return shoal__fail(err, -EUCLEAN, "%s: directory [%u, +%u entries] lies outside "
				   "the segment", path, h->dir_off, h->dir_cap);
	if (memchr(h->name, '\0', sizeof(h->name)) == NULL)
		return shoal__fail(err, -EUCLEAN, "%s: segment name is not terminated", path);
	return 0;
}

int shoal_seg_attach(struct shoal_seg *seg, const char *name, uint32_t flags,
		     struct shoal_err *err)
{
	bool rdonly = flags & SHOAL_SEG_RDONLY;
	struct shoal__seg_hdr copy;
	struct stat st;
	uint64_t magic, dir_count;
	void *base;
	int fd, dirfd, ret;

	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	if (flags & ~SHOAL_SEG_ATTACH_FLAGS)
		return shoal__fail(err, -EINVAL, "unknown attach flags 0x%x",
				   flags & ~SHOAL_SEG_ATTACH_FLAGS);
	/* Who accepts other users' segments accepts their directory too. */
	ret = resolve(name, NULL, false, !(flags & SHOAL_SEG_ALLOW_FOREIGN), seg->path,
		      sizeof(seg->path), seg->name, &dirfd, err);
	if (ret < 0)
		return ret;
	/* O_NONBLOCK: a FIFO named like a segment (a path given, or a directory
	 * of another user) must not hang the open; it is refused just below. */
	fd = openat(dirfd, dirfd == AT_FDCWD ? seg->path : seg->name,
		    (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	close_dir(dirfd);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			return shoal__fail(err, ret, "no segment %s", seg->path);
		return shoal__fail(err, ret, "cannot open %s: %s", seg->path, strerror(-ret));
	}
	if (fstat(fd, &st) != 0) {
		ret = shoal__fail(err, -errno, "stat %s: %s", seg->path, strerror(errno));
		goto fail_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = shoal__fail(err, -EPROTO, "%s is not a regular file", seg->path);
		goto fail_close;
	}
	if (st.st_uid != geteuid() && !(flags & SHOAL_SEG_ALLOW_FOREIGN)) {
		ret = shoal__fail(err, -EPERM, "%s is owned by uid %u, not by us (uid %u)",
				  seg->path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail_close;
	}
	if ((uint64_t)st.st_size < SHOAL__SEG_HDR_SIZE) {
		ret = shoal__fail(err, -EBADMSG, "%s is truncated: %lld bytes, smaller than a "
				  "%u-byte segment header", seg->path, (long long)st.st_size,
				  SHOAL__SEG_HDR_SIZE);
		goto fail_close;
	}
	base = mmap(NULL, (size_t)st.st_size, rdonly ? PROT_READ : PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = shoal__fail(err, -errno, "cannot map %s: %s", seg->path, strerror(errno));
		goto fail_close;
	}
	/* A1: pairs with R1 in shoal_seg_create(): header complete once magic set. */
	magic = shoal_load_acquire(&((struct shoal__seg_hdr *)base)->magic);
	/* Validate a private copy: the file may change under us. */
	memcpy(&copy, base, sizeof(copy));
	ret = check_header(&copy, magic, (uint64_t)st.st_size, seg->path, err);
	if (ret < 0)
		goto fail_unmap;
	dir_count = shoal_load_relaxed(&((struct shoal__seg_hdr *)base)->dir_count);
	if (dir_count > copy.dir_cap) {
		ret = shoal__fail(err, -EUCLEAN, "%s: directory count %llu above its capacity %u",
				  seg->path, (unsigned long long)dir_count, copy.dir_cap);
		goto fail_unmap;
	}
	seg->base = base;
	seg->size = (size_t)st.st_size;
	seg->fd = fd;
	seg->writable = !rdonly;
	return 0;

fail_unmap:
	munmap(base, (size_t)st.st_size);
fail_close:
	close(fd);
	return ret;
}

void shoal_seg_detach(struct shoal_seg *seg)
{
	if (seg->base != NULL)
		munmap(seg->base, seg->size);
	if (seg->fd >= 0)
		close(seg->fd);
	seg->base = NULL;
	seg->size = 0;
	seg->fd = -1;
}

int shoal_seg_unlink(const char *name)
{
	char path[256], base[SHOAL_SEG_NAME_MAX];
	int dirfd, ret = resolve(name, NULL, false, true, path, sizeof(path), base, &dirfd, NULL);

	if (ret < 0)
		return ret;
	ret = unlinkat(dirfd, dirfd == AT_FDCWD ? path : base, 0) == 0 ? 0 : -errno;
	close_dir(dirfd);
	return ret;
}

void *shoal_seg_ptr(const struct shoal_seg *seg, uint64_t off, uint64_t len, uint64_t align)
{
	if (off > seg->size || len > seg->size - off || align == 0 || (off & (align - 1)) != 0)
		return NULL;
	return (unsigned char *)seg->base + off;
}

static const struct shoal__seg_hdr *hdr(const struct shoal_seg *seg)
{
	return seg->base;
}

/* Number of directory entries; callers bound it by the capacity themselves. */
static uint32_t dir_count(const struct shoal_seg *seg)
{
	/* A2: pairs with R2 in shoal_seg_alloc_init(): counted entries are complete. */
	return shoal_load_acquire(&hdr(seg)->dir_count);
}

uint32_t shoal_seg_dir_count(const struct shoal_seg *seg)
{
	return dir_count(seg);
}

uint32_t shoal_seg_dir_limit(const struct shoal_seg *seg)
{
	uint64_t fit;

	if (seg->size < SHOAL__SEG_HDR_SIZE)
		return 0;
	fit = (seg->size - SHOAL__SEG_HDR_SIZE) / SHOAL__SEG_DIRENT_SIZE;
	return fit < UINT32_MAX ? (uint32_t)fit : UINT32_MAX;
}

int shoal_seg_region_at(const struct shoal_seg *seg, uint32_t i, struct shoal_seg_region *region)
{
	const struct shoal__seg_hdr *h = hdr(seg);
	uint32_t dir_off = h->dir_off, cap = h->dir_cap;
	const struct shoal__seg_dirent *e;
	struct shoal__seg_dirent copy;
	uint64_t dir_end = (uint64_t)dir_off + (uint64_t)cap * SHOAL__SEG_DIRENT_SIZE;

	/* The header is shared memory: re-check the directory bounds on every
	 * use rather than trusting what attach saw. */
	if (dir_end > seg->size || dir_off < SHOAL__SEG_HDR_SIZE || dir_off % 8 != 0)
		return -EUCLEAN;
	if (i >= dir_count(seg) || i >= cap)
		return -ENOENT;
	e = (const struct shoal__seg_dirent *)((const unsigned char *)seg->base + dir_off) + i;
	memcpy(&copy, e, sizeof(copy));
	if (memchr(copy.name, '\0', sizeof(copy.name)) == NULL)
		return -EUCLEAN;
	if (copy.off < dir_end || copy.off > seg->size || copy.len > seg->size - copy.off)
		return -EUCLEAN;
	region->kind = copy.kind;
	region->off = copy.off;
	region->len = copy.len;
	region->tag = (struct shoal_seg_tag){
		.role = copy.role, .a = copy.a, .b = copy.b, .c = copy.c, .gen = copy.gen,
	};
	memcpy(region->name, copy.name, sizeof(region->name));
	return 0;
}

bool shoal_seg_tag_equal(const struct shoal_seg_tag *x, const struct shoal_seg_tag *y)
{
	return x->role == y->role && x->a == y->a && x->b == y->b && x->c == y->c &&
	       x->gen == y->gen;
}

/*
 * The first region of `kind` named `name` (NULL: any name) or tagged `tag`
 * (NULL, or role 0: no tag matches): 0, -ENOENT or -EUCLEAN.
 */
static int find(const struct shoal_seg *seg, uint32_t kind, const char *name,
		const struct shoal_seg_tag *tag, struct shoal_seg_region *region)
{
	uint32_t n = dir_count(seg);

	for (uint32_t i = 0; i < n; i++) {
		struct shoal_seg_region r;
		int ret = shoal_seg_region_at(seg, i, &r);

		if (ret == -ENOENT)
			break;
		if (ret < 0)
			return ret;
		if (r.kind != kind)
			continue;
		if ((name != NULL && strcmp(r.name, name) == 0) ||
		    (tag != NULL && tag->role != 0 && shoal_seg_tag_equal(&r.tag, tag))) {
			*region = r;
			return 0;
		}
	}
	return -ENOENT;
}

int shoal_seg_find(const struct shoal_seg *seg, uint32_t kind, const char *name,
		   struct shoal_seg_region *region)
{
	return find(seg, kind, name, NULL, region);
}

int shoal_seg_find_tag(const struct shoal_seg *seg, uint32_t kind, const struct shoal_seg_tag *tag,
		       struct shoal_seg_region *region)
{
	return tag->role != 0 ? find(seg, kind, NULL, tag, region) : -ENOENT;
}

int shoal_seg_verify(const struct shoal_seg *seg, struct shoal_err *err)
{
	const struct shoal__seg_hdr *h = hdr(seg);
	/* Relaxed: the creator published the header long ago (R1); a change
	 * now is damage, whatever the order we see it in. */
	uint64_t magic = shoal_load_relaxed(&h->magic);
	struct stat named, mapped;
	uint32_t n;
	int ret;

	ret = check_header(h, magic, seg->size, seg->path, err);
	if (ret < 0)
		return -EUCLEAN;   /* with check_header()'s reason */
	n = dir_count(seg);
	if (seg->creator && (h->dir_off != seg->dir_off || h->dir_cap != seg->dir_cap ||
			     n != seg->dir_count))
		return shoal__fail(err, -EUCLEAN, "%s: directory moved or recounted (offset %u, "
				   "%u of %u entries; allocated %u, %u of %u)", seg->path,
				   h->dir_off, n, h->dir_cap, seg->dir_off, seg->dir_count,
				   seg->dir_cap);
	if (n > h->dir_cap)
		return shoal__fail(err, -EUCLEAN, "%s: %u directory entries, capacity %u",
				   seg->path, n, h->dir_cap);
	for (uint32_t i = 0; i < n; i++) {
		struct shoal_seg_region r;

		if (shoal_seg_region_at(seg, i, &r) < 0)
			return shoal__fail(err, -EUCLEAN, "%s: directory entry %u is out of bounds "
					   "or unnamed", seg->path, i);
	}
	if (fstat(seg->fd, &mapped) != 0 || stat(seg->path, &named) != 0 ||
	    named.st_ino != mapped.st_ino || named.st_dev != mapped.st_dev)
		return shoal__fail(err, -ENOENT, "%s was unlinked or replaced by another file",
				   seg->path);
	return 0;
}

int shoal_seg_alloc_init(struct shoal_seg *seg, uint32_t kind, const char *name,
			 const struct shoal_seg_tag *tag, uint64_t len, uint64_t align,
			 int (*init)(void *mem, uint64_t len, void *arg), void *arg, uint64_t *off)
{
	static const struct shoal_seg_tag untagged;
	struct shoal__seg_hdr *h = seg->base;
	struct shoal__seg_dirent *e;
	struct shoal_seg_region existing;
	uint64_t start;

	if (align == 0)
		align = SHOAL_FALSE_SHARING;
	if (!seg->creator || name == NULL || strlen(name) >= SHOAL_SEG_REGION_NAME_MAX ||
	    !shoal__is_pow2_u64(align) || align < 8 || kind == 0)
		return -EINVAL;
	if (tag == NULL)
		tag = &untagged;
	if (find(seg, kind, name, tag, &existing) == 0)
		return -EEXIST;
	/* Private state only: see struct shoal_seg. alloc_top never exceeds
	 * the size, so the alignment below cannot wrap. */
	if (seg->dir_count >= seg->dir_cap)
		return -ENOSPC;
	start = shoal__align_up(seg->alloc_top, align);
	if (start > seg->size || len > seg->size - start)
		return -ENOSPC;
	if (len != 0) {
		int ret = reserve(seg->fd, seg->base, seg->huge, start, len);

		if (ret < 0)
			return ret;
	}
	/* The region is built before anyone can count it: readers see entries
	 * below dir_count only, and the private state moves only on success. */
	if (init != NULL) {
		int ret = init((unsigned char *)seg->base + start, len, arg);

		if (ret < 0)
			return ret;
	}
	e = (struct shoal__seg_dirent *)((unsigned char *)seg->base + seg->dir_off) +
	    seg->dir_count;
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->role = tag->role;
	e->off = start;
	e->len = len;
	e->a = tag->a;
	e->b = tag->b;
	e->c = tag->c;
	e->gen = tag->gen;
	snprintf(e->name, sizeof(e->name), "%s", name);
	seg->alloc_top = start + len;
	seg->dir_count++;
	/* Relaxed: published with the entry by R2 below; a display value. */
	shoal_store_relaxed(&h->alloc_top, seg->alloc_top);
	/* R2: pairs with A2 in dir_count(): the entry, and what init() wrote
	 * into the region, are complete when counted. */
	shoal_store_release(&h->dir_count, seg->dir_count);
	*off = start;
	return 0;
}

int shoal_seg_alloc(struct shoal_seg *seg, uint32_t kind, const char *name, uint64_t len,
		    uint64_t align, uint64_t *off)
{
	return shoal_seg_alloc_init(seg, kind, name, NULL, len, align, NULL, NULL, off);
}

void shoal_seg_info(const struct shoal_seg *seg, struct shoal_seg_info *info)
{
	const struct shoal__seg_hdr *h = hdr(seg);

	memset(info, 0, sizeof(*info));
	info->version = h->version;
	info->size = h->size;
	info->creator_pid = h->creator_pid;
	info->creator_uid = h->creator_uid;
	info->ctime_ns = h->ctime_ns;
	info->generation = h->generation;
	info->numa_node = h->numa_node;
	info->dir_count = dir_count(seg);
	info->dir_cap = h->dir_cap;
	/* Relaxed: a display snapshot. */
	info->used = shoal_load_relaxed(&h->alloc_top);
	memcpy(info->name, h->name, sizeof(info->name));
	info->name[sizeof(info->name) - 1] = '\0';
}

/*
 * Start time of `pid` in CLOCK_REALTIME nanoseconds, or 0 if unknown; sets
 * *zombie when the process has exited but was not reaped yet (it is dead,
 * though kill(pid, 0) still succeeds).
 */
static uint64_t process_start_ns(int pid, bool *zombie)
{
	char path[64], buf[1024], *p;
	unsigned long long start_ticks = 0, btime = 0;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (f == NULL)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Field 22 (starttime) counts from after the ')' closing the command. */
	p = strrchr(buf, ')');
	*zombie = p != NULL && (p[2] == 'Z' || p[2] == 'X');
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
				"%*d %*d %*d %*d %*d %*d %llu", &start_ticks) != 1)
		return 0;
	f = fopen("/proc/stat", "re");
	if (f == NULL)
		return 0;
	while (fgets(buf, sizeof(buf), f) != NULL)
		if (sscanf(buf, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	if (btime == 0 || hz <= 0)
		return 0;
	return btime * 1000000000ull + start_ticks * (1000000000ull / (unsigned long long)hz);
}

int shoal_seg_probe(const char *name, struct shoal_err *err)
{
	struct shoal_seg seg;
	struct shoal_seg_info info;
	uint64_t started;
	bool zombie = false;
	int ret = shoal_seg_attach(&seg, name, SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN, err);

	if (ret < 0)
		return ret;
	shoal_seg_info(&seg, &info);
	shoal_seg_detach(&seg);
	if (info.creator_pid <= 0 || (kill(info.creator_pid, 0) != 0 && errno == ESRCH))
		return 0;
	started = process_start_ns(info.creator_pid, &zombie);
	if (zombie)
		return 0;
	/* btime has a one-second resolution: allow that much slack. */
	if (started != 0 && started > info.ctime_ns + 1000000000ull)
		return 0;   /* the pid was recycled by a younger process */
	return 1;
}
