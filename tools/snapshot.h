/* SPDX-License-Identifier: MIT */
/*
 * A read-only snapshot of a segment for the tools: its header, its directory,
 * and what each known region holds (ring indices, counters and the result of
 * a full check; doorbell counters), copied into private memory once, so that
 * printing never touches shared memory.
 *
 * Taking a snapshot never writes to the segment and never trusts it: every
 * offset and length goes through shoal_seg_region_at(), shoal_seg_ptr() and
 * the ring validators, and a file that another process shrinks while it is
 * being read (which makes the kernel raise SIGBUS on the mapping) is
 * reported as a reason, not a crash.
 */
#ifndef SHOAL_TOOLS_SNAPSHOT_H
#define SHOAL_TOOLS_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include <shoal/api.h>
#include <shoal/ring.h>
#include <shoal/segment.h>

struct shoal__doorbell_snap {
	uint32_t state;
	uint64_t sleeps;
	uint64_t wakes;
};

struct shoal__region_snap {
	uint32_t index;                 /* directory entry */
	bool entry_ok;                  /* false: the entry itself is corrupt, `region` unset */
	struct shoal_seg_region region;
	bool corrupt;
	char reason[SHOAL_ERR_MSG_MAX]; /* why, when !entry_ok or corrupt */
	/* Rings: `ring` is valid when have_ring (the control block is sane). */
	bool have_ring;
	struct shoal_ring_stats ring;
	int pending;                    /* records between head and tail; -1 unknown */
	uint32_t check_attempts;        /* shoal_ring_check() calls made */
	/* Doorbells: valid when have_doorbell. */
	bool have_doorbell;
	struct shoal__doorbell_snap doorbell;
};

struct shoal__seg_snap {
	struct shoal_seg_info info;
	int creator_alive;              /* 1, 0, or a negative errno: unknown */
	bool dir_corrupt;
	char dir_reason[SHOAL_ERR_MSG_MAX];
	uint32_t n_regions;
	struct shoal__region_snap *regions;
};

struct shoal__snap_opts {
	/* Checks after the first that a ring failing its check gets. */
	uint32_t check_retries;
	/* NULL: every region. Otherwise only rings of that name (and corrupt
	 * directory entries, whose name cannot be known). */
	const char *ring;
};

/*
 * Snapshot an attached segment. Returns 0 (corruption found is described in
 * the snapshot, not returned), -ENOMEM, or -EFAULT when the file shrank below
 * its header while it was read. On success call shoal__seg_snap_free().
 */
int shoal__seg_snap_take(struct shoal__seg_snap *snap, const struct shoal_seg *seg,
			 const struct shoal__snap_opts *opts);

void shoal__seg_snap_free(struct shoal__seg_snap *snap);

/*
 * Run fn(arg), which only loads from mapped segments and fills the caller's
 * memory, with a SIGBUS raised by a segment file that shrank under its
 * mapping turned into an error. Returns 0, or -EFAULT if fn touched a page
 * the file lost (fn was cut short: what it filled is partial). fn must not
 * allocate, take locks, or call this function or shoal__seg_snap_take().
 */
int shoal__snap_guard(void (*fn)(void *arg), void *arg);

/* "ring", "doorbell", "user" (kinds from SHOAL_SEG_KIND_USER up) or "unknown". */
const char *shoal__region_kind_name(uint32_t kind);

/* "awake" or "sleeping"; NULL for a value shm/doorbell.c never writes. */
const char *shoal__doorbell_state_name(uint32_t state);

#endif
