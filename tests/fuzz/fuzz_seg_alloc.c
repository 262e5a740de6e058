/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the creator's allocator after peers wrote to its segment
 * (shoal_seg_alloc() in shm/segment.c).
 *
 * The router creates the segments that hold group mailboxes and keeps
 * allocating rings in them (one per worker and dispatcher) while the group
 * processes map them read-write. Whatever a peer writes there, the creator
 * must never hand out bytes it already handed out (its header, its
 * directory, an earlier region) and never write outside the segment.
 *
 * Each input is a script of peer writes and creator allocations, run on a
 * fresh 4 KiB segment with a 4-entry directory in which the creator has
 * already allocated a 64-byte ring and a 100-byte user region:
 *
 *   records { u16 offset, u8 n, n & 0x7f bytes }: a peer writes the bytes
 *   at the offset (dropped if they would pass the end); when bit 7 of n is
 *   set the creator then allocates one region. Two more allocations follow
 *   the script. Allocations cycle through sizes and alignments (a ring of
 *   capacity 64 aligned to 128, 64 bytes aligned to 8, 200 aligned to 64).
 *
 * Properties: shoal_seg_alloc() returns 0 or a documented error; a region it
 * hands out lies inside the segment, is aligned as asked and overlaps
 * nothing the creator handed out before (known from the creator's own
 * bookkeeping, here, not from the segment); and it never writes outside the
 * segment. For the last one the mapping is moved to the start of a 512 GiB
 * PROT_NONE reservation, so that an entry written at any 32-bit dir_off plus
 * any 32-bit count of 64-byte entries faults at once, in the writer, instead
 * of landing in some other mapping of this process.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shoal/ring.h>
#include <shoal/segment.h>

#include "shm/ring_layout.h"
#include "shm/segment_layout.h"
#include "tests/fuzz/fuzz.h"

#define SEG_SIZE 4096u
#define DIR_CAP 4u
#define GUARD_SPAN (UINT64_C(1) << 39)
#define MAX_OWN 64

static bool ready;
static unsigned char *guard;   /* NULL when the reservation failed (valgrind, ulimit -v) */

static void setup(void)
{
	guard = mmap(NULL, GUARD_SPAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		     -1, 0);
	if (guard == MAP_FAILED)
		guard = NULL;
	ready = true;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!ready)
		setup();
	return 0;
}

/*
 * Create the creator's segment in a fresh private directory, then remove
 * both names at once: the mapping and the descriptor are all the test needs,
 * and a crash (the point of fuzzing) leaves nothing behind in /dev/shm.
 */
static void create(struct shoal_seg *seg)
{
	const char *tmp = getenv("TMPDIR");
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm"
			   : (tmp != NULL && tmp[0] != '\0') ? tmp : "/tmp";
	struct shoal_seg_opts o = { .numa_node = -1, .dir_cap = DIR_CAP };
	struct shoal_err err;
	char dir[256];
	int ret;

	snprintf(dir, sizeof(dir), "%s/shoal-fuzz-XXXXXX", base);
	FUZZ_CHECK(mkdtemp(dir) != NULL);
	o.dir = dir;
	ret = shoal_seg_create(seg, "creator", SEG_SIZE, &o, &err);
	if (ret == 0)
		unlink(seg->path);
	rmdir(dir);
	if (ret != 0) {
		fprintf(stderr, "shoal_seg_create: %s\n", err.msg);
		FUZZ_CHECK(!"cannot create the creator's segment");
	}
}

/* What the creator handed out, from its own bookkeeping. */
struct own {
	unsigned n;
	struct {
		uint64_t off, len;
	} r[MAX_OWN];
};

static void own_add(struct own *o, uint64_t off, uint64_t len)
{
	for (unsigned i = 0; i < o->n; i++) {
		bool overlap = off < o->r[i].off + o->r[i].len && o->r[i].off < off + len;

		if (overlap)
			fprintf(stderr, "shoal_seg_alloc() handed out [%llu, +%llu), which "
				"overlaps [%llu, +%llu) it handed out before\n",
				(unsigned long long)off, (unsigned long long)len,
				(unsigned long long)o->r[i].off, (unsigned long long)o->r[i].len);
		FUZZ_CHECK(!overlap);
	}
	FUZZ_CHECK(o->n < MAX_OWN);
	o->r[o->n].off = off;
	o->r[o->n].len = len;
	o->n++;
}

static void allocate(struct shoal_seg *seg, struct own *o, unsigned k)
{
	static const struct {
		uint32_t kind;
		uint64_t len, align;
	} kinds[] = {
		{ SHOAL_SEG_KIND_RING, SHOAL__RING_DATA_OFF + 64, 0 },
		{ SHOAL_SEG_KIND_USER, 64, 8 },
		{ SHOAL_SEG_KIND_USER + 1, 200, 64 },
	};
	const uint64_t len = kinds[k % 3].len;
	const uint64_t align = kinds[k % 3].align ? kinds[k % 3].align : 128;
	char name[SHOAL_SEG_REGION_NAME_MAX];
	uint64_t off = UINT64_MAX;
	int ret;

	snprintf(name, sizeof(name), "a%u", k);
	ret = shoal_seg_alloc(seg, kinds[k % 3].kind, name, len, kinds[k % 3].align, &off);
	FUZZ_CHECK(ret == 0 || ret == -EEXIST || ret == -ENOSPC || ret == -EUCLEAN);
	if (ret != 0)
		return;
	if (off > seg->size || len > seg->size - off)
		fprintf(stderr, "shoal_seg_alloc() handed out [%llu, +%llu) in a %zu-byte "
			"segment\n", (unsigned long long)off, (unsigned long long)len, seg->size);
	FUZZ_CHECK(off <= seg->size && len <= seg->size - off);
	FUZZ_CHECK(off % align == 0);
	own_add(o, off, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct shoal_seg seg;
	struct own own = { .n = 0 };
	uint64_t off, len = shoal_ring_size(64);
	unsigned allocs = 0;

	if (size > 4096)
		return 0;
	if (!ready)
		setup();
	create(&seg);
	if (guard != NULL) {
		/* Move the mapping to the start of the guard span (the handle's
		 * fields are plain data; only this test moves them). */
		void *moved = mremap(seg.base, seg.size, seg.size, MREMAP_MAYMOVE | MREMAP_FIXED,
				     guard);

		FUZZ_CHECK(moved == guard);
		seg.base = moved;
	}
	own_add(&own, 0, SHOAL__SEG_HDR_SIZE + DIR_CAP * SHOAL__SEG_DIRENT_SIZE);
	FUZZ_CHECK(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_RING, "r0", len, 0, &off) == 0);
	FUZZ_CHECK(shoal_ring_init(shoal_seg_ptr(&seg, off, len, 128), len, 64, 0) == 0);
	own_add(&own, off, len);
	FUZZ_CHECK(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "u0", 100, 8, &off) == 0);
	own_add(&own, off, 100);

	while (in.left >= 3 && own.n < MAX_OWN - 2) {
		uint16_t at = (uint16_t)fuzz_take(&in, 2);
		uint8_t n = (uint8_t)fuzz_take(&in, 1);
		size_t k = n & 0x7f;

		if (k > in.left)
			k = in.left;
		/* A peer writes, in the shared mapping. */
		if ((size_t)at + k <= seg.size)
			memcpy((unsigned char *)seg.base + at, in.p, k);
		in.p += k;
		in.left -= k;
		if (n & 0x80)
			allocate(&seg, &own, allocs++);
	}
	allocate(&seg, &own, allocs++);
	allocate(&seg, &own, allocs++);

	if (guard != NULL) {
		/* Detach by hand: put the guard back rather than leave a hole in it. */
		FUZZ_CHECK(mmap(guard, seg.size, PROT_NONE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
			   guard);
		close(seg.fd);
		return 0;
	}
	shoal_seg_detach(&seg);
	return 0;
}
