/* SPDX-License-Identifier: MIT */
/*
 * The message types of the example systems, declared once and shared by
 * every program of a system (the router checks that all programs agree).
 */
#ifndef SHOAL_EXAMPLES_PROTOCOL_H
#define SHOAL_EXAMPLES_PROTOCOL_H

#include <stdint.h>
#include <time.h>

#include <shoal.h>

enum {
	MSG_PING = 1,    /* request: struct ping */
	MSG_PONG = 2,    /* response: struct ping, seq echoed */
	MSG_WORK = 3,    /* routed by key: struct work */
};

struct ping {
	uint64_t seq;
	uint64_t sent_ns;
};

struct work {
	uint64_t key;    /* the router shards on this: key % consumers */
	uint64_t seq;
	uint8_t body[48];
};

static const struct shoal_type example_types[] = {
	{ MSG_PING, sizeof(struct ping), "ping" },
	{ MSG_PONG, sizeof(struct ping), "pong" },
	{ MSG_WORK, sizeof(struct work), "work" },
};

#define EXAMPLE_N_TYPES (sizeof(example_types) / sizeof(example_types[0]))

/* CLOCK_MONOTONIC in nanoseconds: the clock the envelope's send_ns uses.
 * POSIX: the program defines _POSIX_C_SOURCE before its first include. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
