/* SPDX-License-Identifier: MIT */
/*
 * Named shared-memory segments.
 *
 * A segment is a file in a shared-memory directory: by default the user's own
 * /dev/shm/shoal-<euid> (made mode 0700 on first use), or $SHOAL_SHM_DIR; a
 * hugetlbfs mount or another directory can be named per segment. Every segment starts with a header (magic,
 * layout version, size, creator, creation time, generation) followed by a
 * directory of regions (rings, doorbells, registries of higher layers), each
 * with a name for people and a numeric tag for the programs that look for it.
 * Nothing inside a segment is a pointer: regions are found by offset from the
 * segment's base and every offset read back is bounds-checked.
 *
 * Lifecycle rules:
 *  1. shoal_seg_create() and shoal_seg_attach() either succeed and fill the
 *     `struct shoal_seg`, or fail, change nothing and leave no file behind.
 *  2. After a successful create or attach you must call shoal_seg_detach().
 *  3. Only the creator process allocates regions (shoal_seg_alloc()), and only
 *     from one thread. Any process may look regions up concurrently.
 *  4. shoal_seg_unlink() removes the name; mappings stay valid until detached.
 *
 * Who may touch a segment:
 *  5. The default directory (the user's, or $SHOAL_SHM_DIR) must be a real
 *     directory (not a symbolic link) owned by the effective uid and writable
 *     by nobody else; create, unlink and attach refuse it otherwise (-EPERM),
 *     so no other user can plant, replace or remove a file there. Only an
 *     attach with SHOAL_SEG_ALLOW_FOREIGN (tools reading another user's
 *     system) accepts a directory of another user.
 *  6. A segment's mode grants the owner, and at most the file's group: a mode
 *     with any bit for other users is refused (-EINVAL). A mode with group
 *     bits gives the default directory g+x, so that the group can reach it.
 *  7. The file's blocks are reserved as they are handed out (the header and
 *     directory at create, each region at alloc, before anything writes
 *     there): a full filesystem is -ENOSPC from create or alloc, never a
 *     SIGBUS later in whichever process touches the page first.
 */
#ifndef SHOAL_SEGMENT_H
#define SHOAL_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <shoal/api.h>

#define SHOAL_SEG_MAGIC   UINT64_C(0x4745534c414f4853) /* "SHOALSEG" little-endian */
#define SHOAL_SEG_VERSION 2u      /* 2: a tag (struct shoal_seg_tag) in each directory entry */
#define SHOAL_SEG_NAME_MAX 64     /* including the terminating NUL */
#define SHOAL_SEG_REGION_NAME_MAX 40 /* including the terminating NUL */

/* Region kinds. Values below SHOAL_SEG_KIND_USER are reserved for shm/. */
#define SHOAL_SEG_KIND_RING     1u
#define SHOAL_SEG_KIND_DOORBELL 2u
#define SHOAL_SEG_KIND_USER     256u

/* Flags for struct shoal_seg_opts.flags. */
#define SHOAL_SEG_HUGE_TRY  (1u << 0) /* ask for transparent huge pages; fall back silently */
#define SHOAL_SEG_HUGETLB   (1u << 1) /* require explicit huge pages (hugetlbfs dir) */
#define SHOAL_SEG_CREATE_FLAGS (SHOAL_SEG_HUGE_TRY | SHOAL_SEG_HUGETLB)

/* Flags for shoal_seg_attach(). */
#define SHOAL_SEG_RDONLY        (1u << 0) /* map read-only: tools */
#define SHOAL_SEG_ALLOW_FOREIGN (1u << 1) /* accept a segment owned by another user */
#define SHOAL_SEG_ATTACH_FLAGS (SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN)

/* Outcome of the huge page request, in struct shoal_seg.huge. */
#define SHOAL_SEG_HUGE_NONE   0 /* normal pages */
#define SHOAL_SEG_HUGE_THP    1 /* MADV_HUGEPAGE accepted (the kernel may still use small pages) */
#define SHOAL_SEG_HUGE_HUGETLB 2 /* explicit huge pages */

struct shoal_seg_opts {
	mode_t mode;          /* file mode, no bit for others (rule 6); 0 means 0600 */
	uint32_t flags;       /* SHOAL_SEG_* create flags */
	int numa_node;        /* bind memory to this node before first touch; -1: no binding */
	uint64_t generation;  /* incarnation number the creator assigns; 0 means 1 */
	uint32_t dir_cap;     /* directory entries; 0 means 64 */
	const char *dir;      /* directory for the file, the caller's choice (only "not a
			       * link" is checked); NULL means the default (rule 5) */
};

/* A process-local handle. Fields are read-only for callers. */
struct shoal_seg {
	void *base;
	size_t size;
	int fd;
	bool writable;
	int huge;                           /* SHOAL_SEG_HUGE_* */
	char name[SHOAL_SEG_NAME_MAX];
	char path[256];
	/* Creator only (private): the allocator's own state. Peers map the
	 * segment read-write, so it is written to the header for readers but
	 * never read back from it. */
	bool creator;
	uint32_t dir_off;
	uint32_t dir_cap;
	uint32_t dir_count;
	uint64_t alloc_top;
};

/* The header at offset 0 of every segment, as a snapshot for callers. */
struct shoal_seg_info {
	uint32_t version;
	uint64_t size;
	int32_t creator_pid;
	uint32_t creator_uid;
	uint64_t ctime_ns;        /* CLOCK_REALTIME at creation */
	uint64_t generation;
	int32_t numa_node;        /* -1 when not bound */
	uint32_t dir_count;
	uint32_t dir_cap;
	uint64_t used;            /* bytes allocated so far */
	char name[SHOAL_SEG_NAME_MAX];
};

/*
 * What a region is, as numbers, for the layer above that allocated it: shm/
 * stores, copies and compares them and gives them no meaning (the runtime's
 * are in runtime/layout.h). All zero: untagged. A reader that wants to know
 * which region is which compares these, never the name, which is for people.
 */
struct shoal_seg_tag {
	uint32_t role;            /* what the region is for; 0: untagged */
	uint32_t a, b, c;         /* who it belongs to, in the role's terms */
	uint32_t gen;             /* which incarnation: replacements count up from 0 */
};

/* One directory entry, as a snapshot. */
struct shoal_seg_region {
	uint32_t kind;
	uint64_t off;
	uint64_t len;
	struct shoal_seg_tag tag;
	char name[SHOAL_SEG_REGION_NAME_MAX];
};

/*
 * Create a new segment of `size` bytes (rounded up to the page size; at least
 * the header and directory) named `name`. The name is a file name: 1 to 63
 * characters of [A-Za-z0-9._-], not starting with a dot.
 *
 * Returns 0, or:
 *  -EINVAL  bad name, size, unknown option flag, a numa_node that does not
 *           exist, or a mode that lets other users in (rule 6)
 *  -EEXIST  a file of that name exists (see shoal_seg_probe() for leftovers)
 *  -EPERM   the default directory is not private to us (rule 5)
 *  -ENOSPC  the filesystem cannot hold the segment (rule 7)
 *  -ENOMEM  no huge pages available for SHOAL_SEG_HUGETLB, or no memory
 *  -ENOTSUP SHOAL_SEG_HUGETLB but no hugetlbfs directory
 *  other    the errno of mkdir/open/ftruncate/mmap/mbind/fallocate
 * On failure nothing is left behind. Allocates; makes system calls.
 */
SHOAL_API int shoal_seg_create(struct shoal_seg *seg, const char *name, size_t size,
			       const struct shoal_seg_opts *opts, struct shoal_err *err);

/*
 * Attach to an existing segment and validate its header and directory against
 * the real file. `name` is a segment name or, if it contains a '/', a path.
 *
 * Returns 0, or:
 *  -ENOENT           no such segment
 *  -EACCES           the file mode does not let us open it
 *  -EPERM            the file, or for a name the default directory, is owned by
 *                    another user (or the directory writable by others) and
 *                    SHOAL_SEG_ALLOW_FOREIGN not given
 *  -EPROTO           not a Shoal segment (bad magic): a foreign file
 *  -EPROTONOSUPPORT  a Shoal segment of another layout version
 *  -EBADMSG          truncated: the file is smaller than its header says, or
 *                    smaller than a header
 *  -EUCLEAN          the header or directory is inconsistent (corrupted)
 *  -EAGAIN           the creator has not finished initialising it
 *  -EINVAL           unknown flag bits or a bad name
 */
SHOAL_API int shoal_seg_attach(struct shoal_seg *seg, const char *name, uint32_t flags,
			       struct shoal_err *err);

/*
 * The default segment directory's path: $SHOAL_SHM_DIR if set and not
 * empty, else /dev/shm/shoal-<euid>. Returns 0 or -ENAMETOOLONG. Does not
 * look at the file system; tools use it to list a user's systems.
 */
SHOAL_API int shoal_seg_dir_path(char *buf, size_t len);

/*
 * Open the default segment directory (path in `path`), creating it mode
 * 0700 first if `create` and it is missing, and check rule 5. Returns an
 * open descriptor of the directory (the caller closes it), or -ENOENT
 * (missing), -EPERM (a symbolic link, another user's, or writable by
 * others), -ENAMETOOLONG, or the errno of mkdir/open; err names the path.
 */
SHOAL_API int shoal_seg_dir_open(char *path, size_t len, bool create, struct shoal_err *err);

/* Unmap and close. Safe on a zeroed handle. Never fails. */
SHOAL_API void shoal_seg_detach(struct shoal_seg *seg);

/*
 * Remove a segment's name (same name rules as attach). Returns 0, -ENOENT,
 * -EPERM (the default directory is not private, rule 5), or the errno of
 * unlink.
 */
SHOAL_API int shoal_seg_unlink(const char *name);

/*
 * Bytes that the header and a directory of `dir_cap` entries (0 means 64)
 * take at the start of a segment, before any region: a caller sizing a
 * segment adds what it will allocate. Never fails.
 */
SHOAL_API uint64_t shoal_seg_overhead(uint32_t dir_cap);

/*
 * Allocate a region of `len` bytes aligned to `align` (a power of two, at
 * least 8; 0 means 128) and add it to the directory under (kind, name),
 * untagged.
 * Only with the handle shoal_seg_create() returned, from one thread (rule
 * 3). The memory is zero. The allocator works from its private state in the
 * handle, so peers that scribble on the header cannot make it hand out
 * memory outside the segment or overlapping earlier regions.
 *
 * Returns 0 and the region's offset in *off, or -EINVAL (bad args, not the
 * creator's handle), -EEXIST (same kind and name exist), -ENOSPC (no room in
 * the segment, directory full, or the filesystem cannot hold the region:
 * rule 7).
 */
SHOAL_API int shoal_seg_alloc(struct shoal_seg *seg, uint32_t kind, const char *name,
			      uint64_t len, uint64_t align, uint64_t *off);

/*
 * Like shoal_seg_alloc(), but the entry carries `tag` (NULL: untagged), and
 * `init(mem, len, arg)` builds the region before it enters the directory: a
 * peer that finds the region (by name, tag or index) sees it as init left
 * it, never half-built. init runs in the caller's thread on zeroed memory;
 * if it returns a negative errno, nothing is allocated and that errno is
 * returned. `init` may be NULL. A tag names one region of its kind, as a
 * name does: -EEXIST when an entry of that kind has the same name, or the
 * same tag (unless untagged).
 */
SHOAL_API int shoal_seg_alloc_init(struct shoal_seg *seg, uint32_t kind, const char *name,
				   const struct shoal_seg_tag *tag, uint64_t len, uint64_t align,
				   int (*init)(void *mem, uint64_t len, void *arg), void *arg,
				   uint64_t *off);

/*
 * Translate an offset read from shared memory into a pointer, checking that
 * [off, off + len) lies inside the segment and that off is aligned to
 * `align` (a power of two; 1 for none). Returns NULL when it does not.
 * Never fails otherwise; no system call.
 */
SHOAL_API void *shoal_seg_ptr(const struct shoal_seg *seg, uint64_t off, uint64_t len,
			      uint64_t align);

/*
 * Find a region by kind and name. Returns 0 and fills *region, -ENOENT, or
 * -EUCLEAN if the directory entry found is out of bounds.
 */
SHOAL_API int shoal_seg_find(const struct shoal_seg *seg, uint32_t kind, const char *name,
			     struct shoal_seg_region *region);

/*
 * Find a region by kind and tag (every field equal; role not 0). Returns 0
 * and fills *region, -ENOENT, or -EUCLEAN if the directory entry found is
 * out of bounds.
 */
SHOAL_API int shoal_seg_find_tag(const struct shoal_seg *seg, uint32_t kind,
				 const struct shoal_seg_tag *tag, struct shoal_seg_region *region);

/* Whether two tags are the same, field by field. Never fails. */
SHOAL_API bool shoal_seg_tag_equal(const struct shoal_seg_tag *x, const struct shoal_seg_tag *y);

/*
 * Copy directory entry `i` (0 <= i < info.dir_count). Returns 0, -ENOENT past
 * the end, or -EUCLEAN if the entry is out of bounds or badly named.
 */
SHOAL_API int shoal_seg_region_at(const struct shoal_seg *seg, uint32_t i,
				  struct shoal_seg_region *region);

/*
 * Number of directory entries (one acquire load): a cheap way for a reader
 * to notice that regions were added. Never fails on an attached handle.
 */
SHOAL_API uint32_t shoal_seg_dir_count(const struct shoal_seg *seg);

/*
 * Re-validate an attached segment against what this handle knows: the
 * header (magic, version, size, directory place), every directory entry
 * (in bounds, named), and that `name` still names this very file (not
 * unlinked, not replaced). For the creator's handle the directory must be
 * exactly as it allocated it (count, offset, capacity). Returns 0, -EUCLEAN
 * (the header or directory was damaged) or -ENOENT (the file was unlinked or
 * replaced), with a reason in *err. Makes two system calls (stat, fstat);
 * not for a hot path.
 */
SHOAL_API int shoal_seg_verify(const struct shoal_seg *seg, struct shoal_err *err);

/*
 * The most directory entries the mapping of `seg` can hold, whatever its
 * header says: those that fit between the header and the end of the
 * segment. The count and capacity in the header are shared memory, so a
 * reader that loops over entries (shoal_seg_region_at()) bounds the loop by
 * this too. Reads nothing from the segment; never fails.
 */
SHOAL_API uint32_t shoal_seg_dir_limit(const struct shoal_seg *seg);

/* Snapshot the header. Never fails on an attached handle. */
SHOAL_API void shoal_seg_info(const struct shoal_seg *seg, struct shoal_seg_info *info);

/*
 * Is the process that created segment `name` still alive? Returns 1 (alive),
 * 0 (dead: the segment is a leftover), or a negative errno from attaching.
 * Reads pid and creation time; a recycled pid is detected by comparing the
 * process start time with the segment's creation time.
 */
SHOAL_API int shoal_seg_probe(const char *name, struct shoal_err *err);

/*
 * Concurrency table. "-" may run together with no synchronisation by the
 * caller, "X" may not. On one handle, from two threads of its process:
 *
 *   [1] shoal_seg_create, shoal_seg_attach (fill the handle)
 *   [2] shoal_seg_detach
 *   [3] shoal_seg_alloc, shoal_seg_alloc_init (the creator's handle only)
 *   [4] shoal_seg_ptr, shoal_seg_find, shoal_seg_find_tag,
 *       shoal_seg_region_at, shoal_seg_dir_count, shoal_seg_info
 *   [5] shoal_seg_verify
 *
 *        [1]  [2]  [3]  [4]  [5]
 *   [1]   X    X    X    X    X
 *   [2]   X    X    X    X    X
 *   [3]   X    X    X    -    X
 *   [4]   X    X    -    -    -
 *   [5]   X    X    X    -    -
 *
 * [3] with [3] is rule 3: one allocating thread. [4] reads only what the
 * handle fixed at create or attach and the segment's header (R2/A2 in
 * shm/segment.c: an entry is counted once complete), so it may run while
 * the creator allocates. [5] compares the creator's private allocator
 * state, which [3] changes. [2] unmaps: every pointer into the segment,
 * in every thread, must be done with first.
 *
 * On different handles of one segment, in one process or several, every
 * pair is "-": an attach that meets a create still initialising returns
 * -EAGAIN (R1/A1), a peer that reads the directory while the creator
 * allocates sees whole entries, and a peer's [2] unmaps only its own view.
 *
 * With no handle: shoal_seg_unlink, shoal_seg_probe, shoal_seg_dir_path,
 * shoal_seg_dir_open, shoal_seg_overhead and shoal_seg_tag_equal are "-"
 * with every call; an unlink leaves every mapping valid (rule 4). Every call that uses the
 * default directory reads $SHOAL_SHM_DIR with getenv(): it must not run
 * while the process changes its environment (setenv(), putenv()).
 */

#endif
