/* SPDX-License-Identifier: MIT */
/*
 * The payloads of the example systems' messages. The types themselves (ids,
 * names, largest sizes) are declared once, in each system's YAML file:
 * the build generates <system>_types.h from it with `shoal types`, and the
 * router checks every program against the same file.
 */
#ifndef SHOAL_EXAMPLES_PROTOCOL_H
#define SHOAL_EXAMPLES_PROTOCOL_H

#include <stdint.h>
#include <time.h>

#include <shoal.h>

/* MSG_PING, a request, and MSG_PONG, its response (seq echoed). */
struct ping {
	uint64_t seq;
	uint64_t sent_ns;
};

/* MSG_WORK, routed by key. */
struct work {
	uint64_t key;    /* the router shards on this: key % consumers */
	uint64_t seq;
	uint8_t body[48];
};

/* What the system files promise for these payloads. */
#define PROTOCOL_CHECK_SIZES()                                                    \
	_Static_assert(sizeof(struct ping) <= MSG_PING_MAX_SIZE &&                \
		       sizeof(struct ping) <= MSG_PONG_MAX_SIZE, "ping fits");    \
	_Static_assert(sizeof(struct work) <= MSG_WORK_MAX_SIZE, "work fits")

/* CLOCK_MONOTONIC in nanoseconds: the clock the envelope's send_ns uses.
 * POSIX: the program defines _POSIX_C_SOURCE before its first include. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
