/* SPDX-License-Identifier: MIT */
/*
 * Messages: types, addresses and the envelope every message carries.
 *
 * A message type is a numeric id with a name and a maximum payload size,
 * declared once, in the system file's `types:`; `shoal types FILE` writes
 * the C header the programs include (docs/config.md). Each process
 * registers its types when it attaches; a program declaring an id with
 * another name or size than the file or another program is refused
 * (-EEXIST).
 *
 * An address names a group and an actor slot in it, with the generation of
 * the group's incarnation: a restarted group gets a new generation, so an
 * actor address kept from before the restart is detected as stale (-ESTALE
 * at the sender, or dropped and counted at the receiver) instead of reaching
 * a stranger. Group addresses (SHOAL_SLOT_GROUP, SHOAL_SLOT_ALL) and routed
 * messages name the group whatever its incarnation: what was queued for a
 * group while it restarted is handled by its new process.
 */
#ifndef SHOAL_MESSAGE_H
#define SHOAL_MESSAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <shoal/api.h>

#define SHOAL_NAME_MAX 32            /* group and type names, including the NUL */
#define SHOAL_TYPE_MAX_SIZE (1u << 20)

/* A message type. Ids are non-zero; names are 1..31 characters. */
struct shoal_type {
	uint32_t id;
	uint32_t max_size;           /* largest payload in bytes */
	const char *name;
};

/*
 * Addresses: bits 63..48 group id + 1 (so that 0 is no address), 47..32 the
 * actor slot, 31..0 the generation.
 */
#define SHOAL_ADDR_NONE  UINT64_C(0)
#define SHOAL_SLOT_GROUP 0xffffu     /* the group as a whole: its in-group router picks actors */
#define SHOAL_SLOT_ALL   0xfffeu     /* every actor of the group (broadcast) */
#define SHOAL_MAX_ACTORS 0xfff0u

static inline uint64_t shoal_addr_make(uint16_t group, uint16_t slot, uint32_t gen)
{
	return ((uint64_t)(group + 1u) << 48) | ((uint64_t)slot << 32) | gen;
}

static inline int shoal_addr_group(uint64_t addr)
{
	return (int)(addr >> 48) - 1;
}

static inline uint16_t shoal_addr_slot(uint64_t addr)
{
	return (uint16_t)(addr >> 32);
}

static inline uint32_t shoal_addr_gen(uint64_t addr)
{
	return (uint32_t)addr;
}

/* Envelope flags. */
#define SHOAL_ENV_REQUEST  (1u << 0)   /* expects a response: request_id is set */
#define SHOAL_ENV_RESPONSE (1u << 1)   /* answers request_id */
#define SHOAL_ENV_ERROR    (1u << 2)   /* response carrying an int32 -errno payload */
#define SHOAL_ENV_TRY      (1u << 3)   /* routed try_send: drop, counted, if a destination is full */
#define SHOAL_ENV_ROUTED   (1u << 4)   /* set by the router on the copies it delivers */
#define SHOAL_ENV_FLAGS    0x1fu

/*
 * The envelope: 56 bytes in front of every payload in every ring. Set by
 * the runtime at send; the router fills `dest` for routed messages.
 */
struct shoal_envelope {
	uint32_t type;
	uint32_t len;                /* payload bytes after the envelope */
	uint64_t sender;             /* address of the sending actor (or its group) */
	uint64_t dest;               /* address of the receiving actor, group or SHOAL_SLOT_ALL */
	uint64_t trace_id;           /* new at the origin, carried through handlers */
	uint64_t request_id;         /* 0 unless a request or a response */
	uint64_t send_ns;            /* CLOCK_MONOTONIC when sent, to ~100 ns */
	uint32_t flags;              /* SHOAL_ENV_* */
	uint32_t reserved;
};

/* A received message as handlers see it. `data` is valid during the call. */
struct shoal_msg {
	const struct shoal_envelope *env;
	const void *data;
	uint32_t len;
	uint32_t type;
};

/*
 * Typed access to a payload: copy it into *out when the message is of
 * `type` and exactly `size` bytes long; return false and leave *out
 * untouched otherwise. Never fails another way; no allocation.
 *
 * A copy rather than a `const struct T *` into the ring, for safety: the
 * payload lies in memory another process can write (DESIGN invariant 1),
 * so a handler that validates fields of a copy knows they stay as
 * validated. (Alignment would allow a pointer: a payload sits after an
 * 8-byte record header and the 56-byte envelope, 8-byte aligned in a ring
 * and in the copy a worker keeps of a message deferred during its own
 * request; no wider alignment is promised.)
 */
static inline bool shoal_msg_get(const struct shoal_msg *m, uint32_t type, void *out,
				 uint32_t size)
{
	if (m->type != type || m->len != size)
		return false;
	memcpy(out, m->data, size);
	return true;
}

/*
 * The usual spelling: `struct work w; if (SHOAL_MSG_GET(m, MSG_WORK, &w))`.
 * The size is that of the object `ptr` points to.
 */
#define SHOAL_MSG_GET(m, type, ptr) shoal_msg_get((m), (type), (ptr), (uint32_t)sizeof(*(ptr)))

/*
 * Concurrency table: every call here is a pure function of its arguments
 * (no state, no shared memory of its own), so any of them may run with any
 * other, in any thread or process ("-" everywhere):
 *
 *   [1] shoal_addr_make, shoal_addr_group, shoal_addr_slot, shoal_addr_gen
 *   [2] shoal_msg_get, SHOAL_MSG_GET
 *
 *        [1]  [2]
 *   [1]   -    -
 *   [2]   -    -
 *
 * [2] reads the message, whose data is valid only during the handler that
 * was handed it (shoal/group.h, lifecycle rule 4): call it there.
 */

#endif
