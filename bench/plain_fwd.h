/* SPDX-License-Identifier: MIT */
/*
 * The plain forwarder: the limit the benchmarks measure Shoal's dispatcher
 * against (shoal-bench-system's `plain fwd`, and its instructions per message
 * in bench/instr-count through shoal-bench-instr --forward). One pass reads
 * up to PLAIN_FWD_PASS messages from a plain fixed-slot SPSC ring
 * (bench/plain_ring.h), bounds-checks each one's type and length, looks the
 * type up in a table of output rings (as a flat filter vector maps a type to
 * its route), copies the message there, publishes each output written once
 * and releases the input once. A full output drops and counts the copy (as
 * for try_send). No envelope, filter matching, key extraction, registry,
 * RCU, wake-ups or damage handling: Shoal's dispatcher ÷ this is what they
 * cost. Private to bench/.
 *
 * Ordering: the rings' own (R1/A1, R2/A2 of bench/plain_ring.h). One thread
 * runs the passes of a forwarder.
 */
#ifndef SHOAL_BENCH_PLAIN_FWD_H
#define SHOAL_BENCH_PLAIN_FWD_H

#include <stdint.h>
#include <string.h>

#include "bench/plain_ring.h"

#define PLAIN_FWD_PASS 256u        /* a Shoal dispatcher's PASS_BUDGET */
#define PLAIN_FWD_MAX_OUT 128u

/* A message: a type, a length, the payload, in slots of plain_fwd_slot(). */
struct plain_fwd_hdr {
	uint32_t type;
	uint32_t len;
};

/* The forwarder's own state, in its process only. The caller attaches the
 * rings and fills the table, n_types and max_len. */
struct plain_fwd {
	struct plain_cons in;
	struct plain_prod out[PLAIN_FWD_MAX_OUT];
	uint32_t pending[PLAIN_FWD_MAX_OUT];   /* written this pass, not yet published */
	uint32_t dirty[PLAIN_FWD_MAX_OUT];     /* the outputs with pending messages */
	uint32_t n_dirty;
	uint16_t table[PLAIN_FWD_MAX_OUT];     /* message type -> output ring */
	uint32_t n_types, max_len;
	uint64_t dropped, malformed;
};

/* A message's slot for `size` payload bytes: header and payload, 8-byte
 * aligned. */
static inline uint32_t plain_fwd_slot(uint32_t size)
{
	return ((uint32_t)sizeof(struct plain_fwd_hdr) + size + 7u) & ~7u;
}

/* One pass: forward what has arrived, up to PLAIN_FWD_PASS; how many were
 * taken. */
static inline uint32_t plain_fwd_pass(struct plain_fwd *w)
{
	uint32_t n = plain_cons_avail(&w->in, PLAIN_FWD_PASS);

	for (uint32_t k = 0; k < n; k++) {
		const unsigned char *m = plain_cons_slot(&w->in, k);
		struct plain_fwd_hdr h;
		uint32_t g;

		memcpy(&h, m, sizeof(h));
		/* The slot is another process's writing: bound the type and
		 * the length before using them (DESIGN invariant 1). */
		if (h.type >= w->n_types || h.len > w->max_len) {
			w->malformed++;
			continue;
		}
		g = w->table[h.type];
		if (plain_prod_room(&w->out[g], w->pending[g] + 1) <= w->pending[g]) {
			w->dropped++;
			continue;
		}
		memcpy(plain_prod_slot(&w->out[g], w->pending[g]), m, sizeof(h) + h.len);
		if (w->pending[g]++ == 0)
			w->dirty[w->n_dirty++] = g;
	}
	for (uint32_t d = 0; d < w->n_dirty; d++) {
		uint32_t g = w->dirty[d];

		plain_prod_publish(&w->out[g], w->pending[g]);
		w->pending[g] = 0;
	}
	w->n_dirty = 0;
	if (n > 0)
		plain_cons_release(&w->in, n);
	return n;
}

#endif
