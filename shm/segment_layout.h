/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory layout of a segment header and its directory: an ABI
 * between processes. Private to shm/ and the tests; never installed.
 */
#ifndef SHOAL_SHM_SEGMENT_LAYOUT_H
#define SHOAL_SHM_SEGMENT_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include <shoal/segment.h>

#include "shm/atomic.h"

#define SHOAL__SEG_HDR_SIZE 256u
#define SHOAL__SEG_DIRENT_SIZE 96u

struct shoal__seg_hdr {
	/* 0 until the creator has finished initialising; then SHOAL_SEG_MAGIC. */
	_Atomic uint64_t magic;
	uint32_t version;
	uint32_t hdr_size;
	uint64_t size;
	int32_t creator_pid;
	uint32_t creator_uid;
	uint64_t ctime_ns;
	uint64_t generation;
	int32_t numa_node;
	uint32_t flags;
	uint32_t dir_off;
	uint32_t dir_cap;
	/* Written by the creator only (rule 3); readers load-acquire. */
	_Atomic uint32_t dir_count;
	uint32_t reserved0;
	_Atomic uint64_t alloc_top;
	char name[SHOAL_SEG_NAME_MAX];
	uint8_t pad[SHOAL__SEG_HDR_SIZE - 144];
};

struct shoal__seg_dirent {
	uint32_t kind;
	uint32_t role;                   /* struct shoal_seg_tag, split around off and len */
	uint64_t off;
	uint64_t len;
	uint32_t a, b, c, gen;
	char name[SHOAL_SEG_REGION_NAME_MAX];
	uint8_t pad[SHOAL__SEG_DIRENT_SIZE - 80];
};

static_assert(sizeof(struct shoal__seg_hdr) == SHOAL__SEG_HDR_SIZE, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, magic) == 0, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, version) == 8, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, size) == 16, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, creator_pid) == 24, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, ctime_ns) == 32, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, generation) == 40, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, dir_off) == 56, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, dir_count) == 64, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, alloc_top) == 72, "segment header ABI");
static_assert(offsetof(struct shoal__seg_hdr, name) == 80, "segment header ABI");
static_assert(sizeof(struct shoal__seg_dirent) == SHOAL__SEG_DIRENT_SIZE, "dirent ABI");
static_assert(offsetof(struct shoal__seg_dirent, role) == 4, "dirent ABI");
static_assert(offsetof(struct shoal__seg_dirent, off) == 8, "dirent ABI");
static_assert(offsetof(struct shoal__seg_dirent, a) == 24, "dirent ABI");
static_assert(offsetof(struct shoal__seg_dirent, gen) == 36, "dirent ABI");
static_assert(offsetof(struct shoal__seg_dirent, name) == 40, "dirent ABI");

#endif
