/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: segments written by other processes (shm/segment.c,
 * shm/ring.c, shm/doorbell.c).
 *
 * Input layout:  FILE || SCRIPT || u16 L (little-endian), L = size of SCRIPT.
 * When the last two bytes give an L that does not fit, SCRIPT is empty and
 * FILE is everything but those two bytes (the seeds under corpus/segment/
 * are real segments followed by two zero bytes). SCRIPT is a list of patches
 * a hostile peer writes *after* validation: records { u16 offset, u8 n, n & 0x7f
 * bytes }, where bit 7 of n picks the moment: 0 right after the segment is
 * attached, 1 right after a ring handle is attached. Patches never grow the
 * file (a peer that truncates a mapped file gets SIGBUS for everyone; that
 * is mmap, not Shoal).
 *
 * Two scenarios per input, on a file in a private directory (under
 * /dev/shm, else $TMPDIR or /tmp; created once, removed at exit):
 *
 *  1. Read-only attach, as the tools do: FILE is written, attached, patched
 *     (phase 0), then the header snapshot, every directory entry and one
 *     past the end, lookups by name, and for each ring region
 *     shoal_ring_stats() and shoal_ring_check().
 *
 *  2. Read-write attach, as a group process does: the same, then for each
 *     ring a consumer that peeks everything (the first record alone, given
 *     back and peeked again, then in bursts; bounded by capacity / 8 steps)
 *     and releases it, then a producer that enqueues a few records into
 *     whatever state the ring is in (a bulk of three, then a burst) and a
 *     consumer that dequeues them (first into a buffer one byte short).
 *     Phase-1 patches land right after each ring handle attaches.
 *
 * The creator's side (shoal_seg_alloc() after peers wrote) is fuzz_seg_alloc.c.
 *
 * Shared memory is not ASan-tracked: a read outside the mapping shows only
 * as SIGSEGV/SIGBUS, and one inside it but outside its region not at all. So
 * the properties are checked explicitly:
 *  - attach fails only with a documented error, and identically for both
 *    modes; without patches, what it accepted is consistent (size, version,
 *    directory inside the segment);
 *  - every region and record handed out lies inside the segment,
 *    a region after the directory, a record inside its ring's data area;
 *  - stats, check and both handle attaches agree on whether a ring's control
 *    block is valid; without phase-1 patches, when shoal_ring_check() counts
 *    N pending records a consumer peeks exactly N and finds the ring empty,
 *    and when the check finds a corrupt record the consumer stops on
 *    -EUCLEAN; what a producer then enqueues is read back intact.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/ring.h>
#include <shoal/segment.h>

#include "shm/ring_layout.h"
#include "shm/segment_layout.h"
#include "tests/fuzz/fuzz.h"

/* Inputs above this are not segments worth the time (attach maps them whole). */
#define MAX_FILE (1u << 20)
#define MAX_PATCHES 32

struct patch {
	const uint8_t *bytes;
	uint16_t off;
	uint8_t len;
	uint8_t phase;
};

static char dir[256];
static char path[300];
static int fd = -1;

static struct patch patches[MAX_PATCHES];
static unsigned n_patches;
static bool have_phase[2];
static size_t file_size;

static void cleanup(void)
{
	if (fd >= 0)
		close(fd);
	fd = -1;
	unlink(path);
	rmdir(dir);
}

static void setup(void)
{
	const char *tmp = getenv("TMPDIR");
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm"
			   : (tmp != NULL && tmp[0] != '\0') ? tmp : "/tmp";

	snprintf(dir, sizeof(dir), "%s/shoal-fuzz-XXXXXX", base);
	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/segment", dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	FUZZ_CHECK(fd >= 0);
	atexit(cleanup);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (fd < 0)
		setup();
	return 0;
}

/* Split the input into FILE and the patch script; returns FILE's size. */
static size_t parse(const uint8_t *data, size_t size)
{
	struct fuzz_in in;
	size_t script;

	n_patches = 0;
	have_phase[0] = have_phase[1] = false;
	if (size < 2)
		return size;
	script = (size_t)data[size - 2] | (size_t)data[size - 1] << 8;
	if (script > size - 2)
		script = 0;
	in.p = data + size - 2 - script;
	in.left = script;
	while (in.left >= 3 && n_patches < MAX_PATCHES) {
		struct patch *p = &patches[n_patches];
		uint8_t n;

		p->off = (uint16_t)fuzz_take(&in, 2);
		n = (uint8_t)fuzz_take(&in, 1);
		p->len = n & 0x7f;
		p->phase = n >> 7;
		if (p->len > in.left)
			p->len = (uint8_t)in.left;
		p->bytes = in.p;
		in.p += p->len;
		in.left -= p->len;
		if (p->len == 0)
			continue;
		have_phase[p->phase] = true;
		n_patches++;
	}
	return size - 2 - script;
}

/* A peer writes to the file: every mapping of it sees the bytes at once. */
static void apply_to_file(unsigned phase)
{
	for (unsigned i = 0; i < n_patches; i++) {
		const struct patch *p = &patches[i];

		if (p->phase == phase && (size_t)p->off + p->len <= file_size)
			FUZZ_CHECK(pwrite(fd, p->bytes, p->len, p->off) == p->len);
	}
}

static void write_file(const uint8_t *data, size_t size)
{
	size_t done = 0;

	FUZZ_CHECK(ftruncate(fd, 0) == 0);
	while (done < size) {
		ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);

		FUZZ_CHECK(n > 0);
		done += (size_t)n;
	}
}

static bool terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

/* Where the directory ends according to the header, as it is now. */
static uint64_t dir_end(const struct shoal_seg *seg)
{
	const struct shoal__seg_hdr *h = seg->base;

	return (uint64_t)h->dir_off + (uint64_t)h->dir_cap * SHOAL__SEG_DIRENT_SIZE;
}

/* Touch bytes so that a bad pointer faults here. */
static volatile uint8_t sink;

static void touch(const void *p, uint64_t len)
{
	const uint8_t *b = p;
	uint8_t x = 0;

	for (uint64_t i = 0; i < len; i++)
		x ^= b[i];
	sink = x;
}

/*
 * Peek everything a fresh consumer sees. Returns the number of records, or
 * -1 if the consumer stopped on corruption. Every record must lie in the
 * data area of the ring at `mem`, of capacity `cap` (the consumer's own copy
 * of it, from attach).
 */
static int consume_all(struct shoal_ring_cons *c, const unsigned char *mem, uint32_t cap)
{
	const unsigned char *data = mem + SHOAL__RING_DATA_OFF;
	struct shoal_rec recs[4], again;
	int n = 0;

	/* Each record takes at least 8 bytes: at most cap / 8 records. */
	for (uint32_t steps = 0; steps <= cap / 8 + 1; steps++) {
		/* The first record alone (and given back once), then bursts. */
		unsigned got = n == 0 ? shoal_ring_peek(c, &recs[0])
				      : shoal_ring_peek_burst(c, recs, 4);

		if (got == 0)
			break;
		for (unsigned i = 0; i < got; i++) {
			const unsigned char *d = recs[i].data;

			FUZZ_CHECK(d >= data + SHOAL_RING_REC_HDR && d <= data + cap);
			FUZZ_CHECK(recs[i].len <= (uint32_t)(data + cap - d));
			touch(d, recs[i].len);
		}
		if (n == 0) {
			shoal_ring_unpeek(c);
			FUZZ_CHECK(shoal_ring_peek(c, &again));
			FUZZ_CHECK(again.data == recs[0].data && again.len == recs[0].len &&
				   again.tag == recs[0].tag);
		}
		n += (int)got;
	}
	FUZZ_CHECK(!shoal_ring_peek(c, &again));
	if (shoal_ring_cons_error(c) != 0) {
		FUZZ_CHECK(shoal_ring_cons_error(c) == -EUCLEAN);
		return -1;
	}
	FUZZ_CHECK(shoal_ring_empty(c));
	return n;
}

/*
 * A ring region, read-only: stats and check must agree on the control
 * block. Returns check's answer; *ctl_ok tells whether the control block is
 * valid.
 */
static int ring_inspect(const void *mem, uint64_t len, struct shoal_ring_stats *st, bool *ctl_ok)
{
	struct shoal_ring_stats st2;
	struct shoal_err err;
	int s, c;

	memset(st, 0, sizeof(*st));
	s = shoal_ring_stats(mem, len, &st2, &err);
	c = shoal_ring_check(mem, len, st, &err);
	FUZZ_CHECK(s == 0 || s == -EUCLEAN);
	FUZZ_CHECK(c >= 0 || c == -EUCLEAN);
	if (c < 0)
		FUZZ_CHECK(terminated(err.msg, sizeof(err.msg)) && err.msg[0] != '\0');
	*ctl_ok = s == 0;
	if (s < 0) {
		FUZZ_CHECK(c == s);
		return c;
	}
	/* A valid control block: the snapshot is sane whatever the walk says. */
	FUZZ_CHECK(memcmp(st, &st2, sizeof(st2)) == 0);
	FUZZ_CHECK(st->capacity >= SHOAL_RING_MIN_CAPACITY &&
		   st->capacity <= SHOAL_RING_MAX_CAPACITY &&
		   (st->capacity & (st->capacity - 1)) == 0);
	FUZZ_CHECK(SHOAL__RING_DATA_OFF + (uint64_t)st->capacity <= len);
	FUZZ_CHECK(st->used == st->tail - st->head && st->used <= st->capacity);
	FUZZ_CHECK(st->head % 8 == 0 && st->tail % 8 == 0);
	FUZZ_CHECK(st->max_payload == st->capacity / 2 - SHOAL_RING_REC_HDR);
	if (c >= 0)
		FUZZ_CHECK((uint64_t)c * 8 <= st->used);
	return c;
}

/* A ring region, read-write: consume, produce, consume again. */
static void ring_exercise(void *mem, uint64_t len, int checked, bool ctl_ok,
			  const struct shoal_ring_stats *st)
{
	static const uint32_t sizes[] = { 0, 1, 7, 8, 13, 24, 56, 100, 300, 1000 };
	bool exact = !have_phase[1];   /* nobody writes behind the handles' backs */
	struct shoal_ring_cons c;
	struct shoal_ring_prod p;
	struct shoal_ring_stats after;
	struct shoal_err err;
	unsigned char buf[1024], out[1024];
	struct shoal_rec recs[sizeof(sizes) / sizeof(sizes[0])];
	unsigned n_recs = 0;
	int ret, n, sent = 0;
	bool ok;

	ret = shoal_ring_cons_attach(&c, mem, len, &err);
	FUZZ_CHECK(ret == 0 || ret == -EUCLEAN);
	FUZZ_CHECK((ret == 0) == ctl_ok);
	if (ret < 0)
		return;
	apply_to_file(1);
	n = consume_all(&c, mem, st->capacity);
	if (exact && n != checked && (checked >= 0 || n >= 0))
		fprintf(stderr, "shoal_ring_check() %s %d, a consumer %s %d records\n",
			checked >= 0 ? "counts" : "fails with", checked,
			n >= 0 ? "peeks" : "stops on corruption after less than", n);
	if (exact && checked >= 0)
		FUZZ_CHECK(n == checked);
	if (exact && checked < 0)
		FUZZ_CHECK(n < 0);
	if (n < 0)
		return;
	shoal_ring_release(&c);
	if (exact) {
		FUZZ_CHECK(ring_inspect(mem, len, &after, &ok) == 0 && ok);
		FUZZ_CHECK(after.head == after.tail);
	}

	ret = shoal_ring_prod_attach(&p, mem, len, &err);
	FUZZ_CHECK(ret == 0 || (!exact && ret == -EUCLEAN));
	if (ret < 0)
		return;
	apply_to_file(1);
	for (uint32_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7 + 3);
	/* The records that fit, in order: three all or nothing, then a burst. */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		if (sizes[i] > shoal_ring_max_payload(&p)) {
			FUZZ_CHECK(shoal_ring_enqueue(&p, buf, sizes[i], 0) == -EMSGSIZE);
			continue;
		}
		recs[n_recs++] = (struct shoal_rec){ buf, sizes[i], (uint16_t)i };
	}
	FUZZ_CHECK(n_recs >= 3);   /* every ring takes 24-byte payloads */
	ret = shoal_ring_enqueue_bulk(&p, recs, 3);
	FUZZ_CHECK(ret == 3 || ret == 0 || (!exact && ret == -EUCLEAN));
	if (ret == 3) {
		sent = 3;
		ret = shoal_ring_enqueue_burst(&p, recs + 3, n_recs - 3);
		FUZZ_CHECK((ret >= 0 && ret <= (int)n_recs - 3) || (!exact && ret == -EUCLEAN));
		sent += ret > 0 ? ret : 0;
	}
	if (!exact) {
		/* Drain whatever is there now, within bounds, and stop. */
		consume_all(&c, mem, st->capacity);
		return;
	}
	FUZZ_CHECK(shoal_ring_prod_error(&p) == 0);
	FUZZ_CHECK(ring_inspect(mem, len, &after, &ok) == sent);
	for (int i = 0; i < sent; i++) {
		uint16_t tag;

		if (recs[i].len > 0)
			FUZZ_CHECK(shoal_ring_dequeue(&c, out, recs[i].len - 1, &tag) == -EMSGSIZE);
		ret = shoal_ring_dequeue(&c, out, sizeof(out), &tag);
		FUZZ_CHECK(ret == (int)recs[i].len && tag == recs[i].tag);
		FUZZ_CHECK(memcmp(out, buf, recs[i].len) == 0);
	}
	FUZZ_CHECK(shoal_ring_dequeue(&c, out, sizeof(out), NULL) == -EAGAIN);
	FUZZ_CHECK(ring_inspect(mem, len, &after, &ok) == 0);
}

static void doorbell_exercise(const struct shoal_seg *seg, const struct shoal_seg_region *r)
{
	struct shoal_doorbell *db;

	if (r->len < sizeof(*db))
		return;
	db = shoal_seg_ptr(seg, r->off, sizeof(*db), _Alignof(struct shoal_doorbell));
	if (db == NULL)
		return;
	touch(db, sizeof(*db));
	if (seg->writable)
		shoal_doorbell_notify(db);   /* at most one FUTEX_WAKE; nobody waits */
}

static void walk(struct shoal_seg *seg)
{
	struct shoal_seg_info info;
	struct shoal_seg_region r, found;
	uint32_t n = shoal_seg_dir_count(seg);
	bool pristine = !have_phase[0];

	shoal_seg_info(seg, &info);
	FUZZ_CHECK(terminated(info.name, sizeof(info.name)));
	if (pristine) {
		/* Exactly what attach validated. */
		FUZZ_CHECK(info.size == seg->size);
		FUZZ_CHECK(info.version == SHOAL_SEG_VERSION);
		FUZZ_CHECK(info.dir_count == n && n <= info.dir_cap);
		FUZZ_CHECK(dir_end(seg) <= seg->size);
	}
	FUZZ_CHECK(shoal_seg_ptr(seg, 0, seg->size, 1) == seg->base);
	FUZZ_CHECK(shoal_seg_ptr(seg, seg->size, 1, 1) == NULL);
	FUZZ_CHECK(shoal_seg_ptr(seg, 1, UINT64_MAX, 1) == NULL);
	FUZZ_CHECK(shoal_seg_ptr(seg, UINT64_MAX, 2, 1) == NULL);

	for (uint32_t i = 0; i <= n; i++) {
		int ret = shoal_seg_region_at(seg, i, &r);

		if (i == n) {
			FUZZ_CHECK(ret == -ENOENT || ret == -EUCLEAN);
			break;
		}
		FUZZ_CHECK(ret == 0 || ret == -EUCLEAN || (!pristine && ret == -ENOENT));
		if (ret < 0)
			continue;
		FUZZ_CHECK(r.off >= dir_end(seg) && r.off >= SHOAL__SEG_HDR_SIZE &&
			   r.off <= seg->size && r.len <= seg->size - r.off);
		FUZZ_CHECK(terminated(r.name, sizeof(r.name)));
		ret = shoal_seg_find(seg, r.kind, r.name, &found);
		FUZZ_CHECK(ret == 0 || ret == -EUCLEAN);
		if (ret == 0)
			FUZZ_CHECK(found.kind == r.kind && strcmp(found.name, r.name) == 0 &&
				   found.off >= dir_end(seg) && found.off <= seg->size &&
				   found.len <= seg->size - found.off);
		if (r.kind == SHOAL_SEG_KIND_RING) {
			struct shoal_ring_stats st;
			void *mem = shoal_seg_ptr(seg, r.off, r.len, 8);
			bool ctl_ok;
			int checked;

			if (mem == NULL)
				continue;
			checked = ring_inspect(mem, r.len, &st, &ctl_ok);
			if (seg->writable)
				ring_exercise(mem, r.len, checked, ctl_ok, &st);
		} else if (r.kind == SHOAL_SEG_KIND_DOORBELL) {
			doorbell_exercise(seg, &r);
		}
	}
	FUZZ_CHECK(shoal_seg_find(seg, SHOAL_SEG_KIND_USER + 7, "no such region!", &found) < 0);
}

/* Scenarios 1 and 2: attach FILE read-only, then read-write. */
static void attach_scenario(const uint8_t *data)
{
	static const uint32_t modes[] = { SHOAL_SEG_RDONLY, 0 };
	int first = 1;

	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct shoal_seg seg;
		struct shoal_err err;
		int ret;

		/* Each pass starts from FILE: the previous one patched and wrote it. */
		write_file(data, file_size);
		ret = shoal_seg_attach(&seg, path, modes[m], &err);
		if (m > 0)
			FUZZ_CHECK(ret == first);
		first = ret;
		if (ret < 0) {
			FUZZ_CHECK(ret == -EBADMSG || ret == -EPROTO || ret == -EPROTONOSUPPORT ||
				   ret == -EUCLEAN || ret == -EAGAIN);
			FUZZ_CHECK(terminated(err.msg, sizeof(err.msg)) && err.msg[0] != '\0');
			FUZZ_CHECK(seg.base == NULL && seg.fd == -1);
			continue;
		}
		FUZZ_CHECK(seg.size == file_size && seg.writable == (modes[m] == 0));
		apply_to_file(0);
		walk(&seg);
		shoal_seg_detach(&seg);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_FILE)
		return 0;
	if (fd < 0)
		setup();
	file_size = parse(data, size);
	attach_scenario(data);
	return 0;
}
