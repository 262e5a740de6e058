/* SPDX-License-Identifier: MIT */
/* The line probe: see probe.h for the method and its guarantees. */
#include "shm/probe.h"

#include "shm/atomic.h"
#include "shm/util.h"

double shoal__probe_ping(_Atomic uint64_t *line, uint32_t warmup, uint32_t rounds,
			 uint32_t batch, uint64_t max_ns)
{
	uint64_t t0 = 0, tb = 0, limit = UINT64_MAX, best = UINT64_MAX, i;
	uint64_t end = (uint64_t)warmup + rounds;
	double ns = 0;

	if (batch == 0 || batch > rounds)
		batch = rounds;
	for (i = 0; i < end; i++) {
		if (i == warmup) {
			t0 = tb = shoal__now_ns();
			limit = t0 + max_ns;
		} else if (i > warmup && (i - warmup) % batch == 0) {
			uint64_t now = shoal__now_ns();

			if (now - tb < best)
				best = now - tb;
			tb = now;
			if (now >= limit)
				break;
		}
		if (i % 256 == 0 && i > warmup && shoal__now_ns() >= limit)
			break;
		/* Relaxed: the line carries no data (probe.h). */
		shoal_store_relaxed(line, 2 * i + 1);
		while (shoal_load_relaxed(line) != 2 * i + 2)
			;
	}
	if (i == end && i > warmup && (i - warmup) % batch == 0) {
		uint64_t now = shoal__now_ns();

		if (now - tb < best)
			best = now - tb;
	}
	if (best != UINT64_MAX)
		ns = (double)best / batch;
	else if (i > warmup)
		ns = (double)(shoal__now_ns() - t0) / (double)(i - warmup);
	shoal_store_relaxed(line, SHOAL__PROBE_STOP);
	return ns;
}

void shoal__probe_pong(_Atomic uint64_t *line)
{
	for (uint64_t i = 0;; i++) {
		uint64_t v;

		/* Relaxed: the line carries no data (probe.h). */
		while ((v = shoal_load_relaxed(line)) != 2 * i + 1)
			if (v == SHOAL__PROBE_STOP)
				return;
		shoal_store_relaxed(line, 2 * i + 2);
	}
}
