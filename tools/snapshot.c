/* SPDX-License-Identifier: MIT */
/*
 * Segment snapshots for the tools (see snapshot.h).
 *
 * Surviving a shrinking file: the segment is a MAP_SHARED file mapping, and
 * if another process truncates the file after we attached, touching a page
 * past the new end raises SIGBUS. Every read of the mapping therefore runs
 * inside guarded(), which turns that SIGBUS into an error return through
 * sigsetjmp()/siglongjmp(). Jumping out is safe because the guarded code only
 * loads from the mapping and fills the caller's memory: it holds no lock and
 * allocates nothing (a fault inside shoal_seg_probe(), which maps the file a
 * second time, leaks that mapping; the tool then exits).
 *
 * Relaxed loads only: a snapshot orders nothing against the processes using
 * the segment, and the ring calls already validate what they read.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/doorbell.h>

#include "shm/atomic.h"
#include "tools/snapshot.h"

static sigjmp_buf bus_env;
/* Shared with the signal handler, which runs on this same thread: the one
 * use of volatile that C defines for that, not a cross-thread flag. */
static volatile sig_atomic_t bus_armed;
static struct sigaction bus_old;

static void on_sigbus(int sig)
{
	if (bus_armed)
		siglongjmp(bus_env, 1);
	/* Not a read of the mapping: a real fault, so die of it as usual. */
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Run fn(arg); return 0, or -EFAULT if it touched a page the file lost. */
static int guarded(void (*fn)(void *arg), void *arg)
{
	if (sigsetjmp(bus_env, 1) != 0) {
		bus_armed = 0;
		return -EFAULT;
	}
	bus_armed = 1;
	fn(arg);
	bus_armed = 0;
	return 0;
}

static void bus_guard_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigbus;
	sigemptyset(&sa.sa_mask);
	/* Cannot fail: a valid signal and handler. */
	sigaction(SIGBUS, &sa, &bus_old);
}

static void bus_guard_remove(void)
{
	sigaction(SIGBUS, &bus_old, NULL);
}

int shoal__snap_guard(void (*fn)(void *arg), void *arg)
{
	int ret;

	bus_guard_install();
	ret = guarded(fn, arg);
	bus_guard_remove();
	return ret;
}

const char *shoal__region_kind_name(uint32_t kind)
{
	switch (kind) {
	case SHOAL_SEG_KIND_RING:
		return "ring";
	case SHOAL_SEG_KIND_DOORBELL:
		return "doorbell";
	default:
		return kind >= SHOAL_SEG_KIND_USER ? "user" : "unknown";
	}
}

const char *shoal__doorbell_state_name(uint32_t state)
{
	switch (state) {
	case SHOAL_DOORBELL_AWAKE:
		return "awake";
	case SHOAL_DOORBELL_SLEEPING:
		return "sleeping";
	default:
		return NULL;
	}
}

__attribute__((format(printf, 2, 3)))
static void set_corrupt(struct shoal__region_snap *r, const char *fmt, ...)
{
	va_list ap;

	r->corrupt = true;
	va_start(ap, fmt);
	vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
	va_end(ap);
}

/*
 * Checks of a ring that may fail because the consumer released records
 * while they ran, beyond the caller's retries: enough that a healthy live
 * ring passes whatever the scheduler does to this process, few enough that
 * a tool on a ring whose consumer never stops still ends.
 */
#define RACED_CHECKS_MAX 1000u

static void read_ring(struct shoal__region_snap *r, const struct shoal_seg *seg,
		      uint32_t retries)
{
	const void *mem = shoal_seg_ptr(seg, r->region.off, r->region.len, 8);
	struct shoal_err err = {{0}};
	uint32_t failed = 0;
	int ret;

	if (mem == NULL) {
		set_corrupt(r, "ring region at offset %llu is not 8-byte aligned",
			    (unsigned long long)r->region.off);
		return;
	}
	/*
	 * A check racing a live consumer can fail: the consumer released a
	 * record while the check read it and the producer wrote the next lap
	 * over its bytes. shoal_ring_check() tells that (-EAGAIN) from damage,
	 * and it is checked again without counting. A preempted tool races
	 * every time it is descheduled mid-check, so a fixed number of tries
	 * is not enough on a busy machine. Any other failure counts: only a
	 * failure every time is corruption.
	 */
	do {
		ret = shoal_ring_check(mem, r->region.len, &r->ring, &err);
		r->check_attempts++;
		if (ret >= 0)
			break;
		if (ret != -EAGAIN)
			failed++;
	} while (failed <= retries && r->check_attempts - failed < RACED_CHECKS_MAX);
	if (ret >= 0) {
		r->have_ring = true;
		r->pending = ret;
		return;
	}
	/* The walk over the records may have failed behind a sane control
	 * block: then its indices and counters are still worth showing. */
	r->have_ring = shoal_ring_stats(mem, r->region.len, &r->ring, NULL) == 0;
	/* Every check raced the consumer: no count of what it holds, and no
	 * evidence of damage either. */
	if (ret == -EAGAIN)
		return;
	set_corrupt(r, "%s", err.msg);
}

static void read_doorbell(struct shoal__region_snap *r, const struct shoal_seg *seg)
{
	const struct shoal_doorbell *db;

	if (r->region.len < sizeof(*db)) {
		set_corrupt(r, "doorbell region of %llu bytes is smaller than a %zu-byte "
			    "doorbell", (unsigned long long)r->region.len, sizeof(*db));
		return;
	}
	db = shoal_seg_ptr(seg, r->region.off, sizeof(*db), _Alignof(struct shoal_doorbell));
	if (db == NULL) {
		set_corrupt(r, "doorbell region at offset %llu is not %zu-byte aligned",
			    (unsigned long long)r->region.off, _Alignof(struct shoal_doorbell));
		return;
	}
	/* Relaxed: a display snapshot; nothing is read on the strength of it. */
	r->doorbell.state = shoal_load_relaxed(&db->state);
	r->doorbell.sleeps = shoal_load_relaxed(&db->sleeps);
	r->doorbell.wakes = shoal_load_relaxed(&db->wakes);
	r->have_doorbell = true;
	if (shoal__doorbell_state_name(r->doorbell.state) == NULL)
		set_corrupt(r, "doorbell state %u is neither awake (%u) nor sleeping (%u)",
			    r->doorbell.state, SHOAL_DOORBELL_AWAKE, SHOAL_DOORBELL_SLEEPING);
}

struct header_read {
	const struct shoal_seg *seg;
	struct shoal__seg_snap *snap;
};

static void read_header(void *arg)
{
	struct header_read *h = arg;

	shoal_seg_info(h->seg, &h->snap->info);
	/* The probe also catches a creator pid that was recycled. */
	h->snap->creator_alive = shoal_seg_probe(h->seg->path, NULL);
}

struct entry_read {
	const struct shoal_seg *seg;
	const struct shoal__snap_opts *opts;
	struct shoal__region_snap *r;
	bool keep;   /* add r to the snapshot */
	bool end;    /* no entry at this index: the directory ends here */
};

static bool wanted(const struct shoal__snap_opts *opts, const struct shoal_seg_region *region)
{
	return opts->ring == NULL ||
	       (region->kind == SHOAL_SEG_KIND_RING && strcmp(region->name, opts->ring) == 0);
}

static void read_entry(void *arg)
{
	struct entry_read *e = arg;
	struct shoal__region_snap *r = e->r;
	int ret;

	/* A fault before the name is known keeps the entry, to report it. */
	e->keep = true;
	ret = shoal_seg_region_at(e->seg, r->index, &r->region);
	if (ret == -ENOENT) {
		e->keep = false;
		e->end = true;
		return;
	}
	if (ret < 0) {
		set_corrupt(r, "directory entry %u is corrupt: its region lies outside the "
			    "segment or its name is not terminated", r->index);
		return;
	}
	r->entry_ok = true;
	if (!wanted(e->opts, &r->region)) {
		e->keep = false;
		return;
	}
	if (r->region.kind == SHOAL_SEG_KIND_RING)
		read_ring(r, e->seg, e->opts->check_retries);
	else if (r->region.kind == SHOAL_SEG_KIND_DOORBELL)
		read_doorbell(r, e->seg);
}

static int append(struct shoal__seg_snap *snap, const struct shoal__region_snap *r,
		  uint32_t *cap)
{
	struct shoal__region_snap *grown;

	if (snap->n_regions == *cap) {
		uint32_t n = *cap ? *cap * 2 : 16;

		grown = realloc(snap->regions, n * sizeof(*grown));
		if (grown == NULL)
			return -ENOMEM;
		snap->regions = grown;
		*cap = n;
	}
	snap->regions[snap->n_regions++] = *r;
	return 0;
}

/*
 * How many directory entries to visit. Attach checked count <= capacity and
 * that the directory fits, but the header is shared memory and may have
 * changed since: bound the walk by what the mapping can hold whatever it says.
 */
static uint32_t dir_entries(struct shoal__seg_snap *snap, const struct shoal_seg *seg)
{
	const struct shoal_seg_info *in = &snap->info;
	uint32_t fit = shoal_seg_dir_limit(seg), n = in->dir_count;

	if (in->dir_count > in->dir_cap) {
		snap->dir_corrupt = true;
		snprintf(snap->dir_reason, sizeof(snap->dir_reason), "directory count %u is "
			 "above its capacity %u", in->dir_count, in->dir_cap);
		n = in->dir_cap;
	}
	return n < fit ? n : fit;
}

static int read_entries(struct shoal__seg_snap *snap, const struct shoal_seg *seg,
			const struct shoal__snap_opts *opts)
{
	uint32_t n = dir_entries(snap, seg), cap = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct shoal__region_snap r = { .index = i, .pending = -1 };
		struct entry_read e = { .seg = seg, .opts = opts, .r = &r };

		if (guarded(read_entry, &e) < 0)
			set_corrupt(&r, "the segment file shrank while entry %u was being read",
				    i);
		if (e.end)
			break;
		if (e.keep && append(snap, &r, &cap) < 0)
			return -ENOMEM;
	}
	return 0;
}

int shoal__seg_snap_take(struct shoal__seg_snap *snap, const struct shoal_seg *seg,
			 const struct shoal__snap_opts *opts)
{
	struct header_read h = { .seg = seg, .snap = snap };
	int ret;

	memset(snap, 0, sizeof(*snap));
	bus_guard_install();
	ret = guarded(read_header, &h);
	if (ret == 0)
		ret = read_entries(snap, seg, opts);
	bus_guard_remove();
	if (ret < 0)
		shoal__seg_snap_free(snap);
	return ret;
}

void shoal__seg_snap_free(struct shoal__seg_snap *snap)
{
	free(snap->regions);
	snap->regions = NULL;
	snap->n_regions = 0;
}
