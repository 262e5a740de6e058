/* SPDX-License-Identifier: MIT */
/*
 * The line probe: what one cache line's round trip between two CPUs costs,
 * timed by a ping-pong on the line. shoal-bench-* time it beside every
 * sample (bench/harness.c), between two processes; the router times it at
 * start, between two threads, to choose whether the data path streams its
 * copies (docs/design.md, "Streamed copies").
 *
 * How: the pinging side writes odd values, the ponging side answers with
 * the next even one; no pause in the loops, so that only the line's trip is
 * timed. The ping stops after `rounds` timed round trips (`warmup` first,
 * untimed) or `max_ns`, whichever comes first, and writes
 * SHOAL__PROBE_STOP, which ends the pong: on a loaded machine every trip can
 * wait for a time slice, and the probe must still end.
 *
 * Ordering guarantees: none needed. The line carries no data; both sides
 * load and store it relaxed, and only its transfer is timed.
 * Progress: both sides spin. A ping whose pong never comes spins until it
 * dies (the bench's parent kills it; the router's pong thread is started
 * before the ping runs and always answers).
 */
#ifndef SHOAL_SHM_PROBE_H
#define SHOAL_SHM_PROBE_H

#include <stdatomic.h>
#include <stdint.h>

#define SHOAL__PROBE_STOP UINT64_MAX

/*
 * Ping `line` until the pong answers `rounds` times after `warmup`, or for
 * at most `max_ns`; the timed trips go in batches of `batch` (1..rounds).
 * Returns the round trip in ns: the mean of the batch with the lowest
 * mean (a batch that waited for a time slice does not count against the
 * others; batch == rounds: the mean of them all); when `max_ns` ended it
 * before any batch was complete, the mean of the trips it timed; 0 when it
 * timed none. Ends the pong in any case. `line` starts at 0.
 */
double shoal__probe_ping(_Atomic uint64_t *line, uint32_t warmup, uint32_t rounds,
			 uint32_t batch, uint64_t max_ns);

/* Answer the pings on `line` until SHOAL__PROBE_STOP. */
void shoal__probe_pong(_Atomic uint64_t *line);

#endif
