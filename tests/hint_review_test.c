/* SPDX-License-Identifier: MIT */
/*
 * The ready summary's hints (shm/doorbell.c mark_ready() and
 * shoal__doorbell_ready_take_slow(), runtime/data/poll.c worth_a_pass() and
 * scan_rings(), the hint lists of runtime/data/rings.c) against the
 * schedules that could hide a published message from a poll: rings that
 * share a hint bit, with each other and with a dispatcher's ring; sends and
 * new rings while a pass runs; a handler that polls, or makes a request,
 * inside the pass; an erased mark, a damaged summary word, a look before
 * a sleep that found what the summary does not say yet; and, across
 * processes, producers that publish (with F2 or without it, the consumer
 * streaming) while the consumer takes the summary or goes to sleep.
 *
 * The property every case checks: a poll that begins after a send has
 * returned finds that message. The summary lets a poll look at less than
 * every ring, never at less than the rings that have such a message; the
 * periodic look at every ring (SUMMARY_TRUST) and the look before a sleep
 * would hide a lost hint behind a delay, so the cases count polls that
 * missed a finished send instead of waiting for one to show up. One case
 * checks the other side of that look: a handler's timed poll sleeps
 * rather than spin on records only its run will take.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>
#include <shoal/router.h>

#include "runtime/data/relay.h"
#include "runtime/data/worker.h"
#include "runtime/group_impl.h"
#include "runtime/layout.h"
#include "tests/rtutil.h"
#include "tests/testutil.h"

#define SECOND INT64_C(1000000000)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The index (0 .. SHOAL_DOORBELL_READY_HINTS - 1) of the hint bit that
 * worker 0 of group `id` sets in its peers' summaries. */
static uint32_t bit_of(int id)
{
	uint32_t h = shoal_doorbell_ready_hint(shoal__ready_key((uint16_t)id, 0));

	return (uint32_t)__builtin_ctz(h) - 2;
}

/* ---- one process: a consumer, many peers, every send before the poll ---------- */

enum { K_PLAIN = 0, K_NEST = 1 };

/* What the handler of the scenario's K_NEST message does, in order. */
enum { OP_END = 0, OP_SEND, OP_POLL, OP_CONNECT_SEND, OP_REQUEST, OP_WAIT };

/* Peers by role: A sends the K_NEST message; A2 shares A's bit (its ring
 * comes after A's in the consumer's list); Z shares A's bit and opens its
 * link only when the scenario says (its ring joins the table then, after
 * A's: the last of A's list); B, C, D are peers of other bits. */
enum { R_A, R_A2, R_Z, R_B, R_C, R_D, R_ROLES };

struct step {
	int op;
	int role;          /* OP_SEND, OP_CONNECT_SEND */
	uint32_t budget;   /* OP_POLL: shoal_poll()'s budget (0: no limit) */
};

struct scenario {
	const char *name;
	bool late;                 /* uses Z (else A2) */
	struct step before[6];     /* sends before the first poll, after A's K_NEST */
	struct step during[8];     /* in the K_NEST handler */
};

#define PEERS 69   /* group ids 29 apart share a bit (keys mod 29) */

static struct {
	struct shoal_group *c;
	struct shoal_ctx *cc;
	uint64_t to;
	struct shoal_group *p[PEERS];
	int id[PEERS];
	bool linked[PEERS];
	uint64_t sent, handled;
	uint32_t handled_from[PEERS];   /* messages handled, by sending peer */
	const struct step *during;
	int role[R_ROLES];         /* the scenario's peers */
	uint64_t resp;             /* the responder's address (OP_REQUEST) */
	int request_status;
	int wait_status;           /* OP_WAIT's poll */
} H;

static void send_from(int k, uint32_t kind)
{
	struct msg v = { .seq = H.sent + 1, .from = (uint32_t)k, .kind = kind, .key = H.sent };

	assert_int_equal(shoal_try_send_to(shoal_group_worker(H.p[k], 0), H.to, T_PING, &v,
					   sizeof(v)), 0);
	H.sent++;
}

/* A message of another length: a run of records ends before it. */
static void send_short_from(int k)
{
	struct msg v = { .seq = H.sent + 1, .from = (uint32_t)k };

	assert_int_equal(shoal_try_send_to(shoal_group_worker(H.p[k], 0), H.to, T_PING, &v,
					   sizeof(v) - 8), 0);
	H.sent++;
}

static void link_peer(int k)
{
	assert_int_equal(shoal_connect(shoal_group_worker(H.p[k], 0), H.to, 10 * SECOND), 0);
	H.linked[k] = true;
}

static void run_steps(const struct step *s)
{
	for (; s->op != OP_END; s++) {
		struct msg q = { .seq = 1 }, out;
		struct shoal_reply reply = { .buf = &out, .cap = sizeof(out) };

		switch (s->op) {
		case OP_SEND:
			send_from(H.role[s->role], K_PLAIN);
			break;
		case OP_CONNECT_SEND:
			link_peer(H.role[s->role]);
			send_from(H.role[s->role], K_PLAIN);
			break;
		case OP_POLL:
			assert_true(shoal_poll(H.cc, s->budget, 0) >= 0);
			break;
		case OP_WAIT:
			H.wait_status = shoal_poll(H.cc, 0, SECOND / 5);
			break;
		case OP_REQUEST:
			/* The responder sends us a message before it answers:
			 * the request sets it aside. */
			H.sent++;
			H.request_status = shoal_request(H.cc, H.resp, T_REQ, &q, sizeof(q),
							 20 * SECOND, &reply);
			break;
		}
	}
}

static void here_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v;

	(void)a;
	H.handled++;
	if (m->len == sizeof(v) - 8)
		return;   /* send_short_from()'s */
	assert_int_equal(m->len, sizeof(v));
	memcpy(&v, m->data, sizeof(v));
	if (v.from < PEERS)
		H.handled_from[v.from]++;
	if (v.kind == K_NEST && H.during != NULL) {
		const struct step *s = H.during;

		H.during = NULL;   /* once */
		run_steps(s);
	}
}

/* The in-group router of a consumer of two workers: by key, so that
 * half of what one worker receives is forwarded to the other. */
static void key_route(const struct shoal_msg *m, struct shoal_outcome *out, void *user)
{
	struct msg v;

	(void)user;
	memcpy(&v, m->data, sizeof(v));
	out->kind = SHOAL_ROUTE_UNICAST;
	out->n = 1;
	out->slots[0] = (uint16_t)(v.key % 2);
}

/* The consumer "c" (of `workers`, 1 or 2: then peers send to the group as
 * a whole), and PEERS peers, the first `linked_until` linked to it. */
static void here_start(const char *sys, int linked_until, uint16_t workers)
{
	struct shoal_group_desc d = { .name = "c", .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = here_handler, .node = -1,
				      .n_workers = workers, .n_actors = workers,
				      .route = workers > 1 ? key_route : NULL };
	char name[16];

	memset(&H, 0, sizeof(H));
	assert_int_equal(rt_start_router(sys, NULL, 0), 0);
	assert_int_equal(shoal_group_attach(&H.c, &d, NULL, NULL), 0);
	H.cc = shoal_group_worker(H.c, 0);
	H.to = workers > 1 ? shoal_addr_make((uint16_t)shoal_group_id(H.c), SHOAL_SLOT_GROUP, 0) :
			     shoal_group_lookup(H.c, "c", 0);
	assert_int_not_equal(H.to, SHOAL_ADDR_NONE);
	/* Declared: a system takes only 64 groups it did not declare. */
	for (int k = 0; k < PEERS; k++) {
		snprintf(name, sizeof(name), "p%d", k);
		rt_declare(name, 1, 1);
	}
	for (int k = 0; k < PEERS; k++) {
		snprintf(name, sizeof(name), "p%d", k);
		H.p[k] = rt_attach_here(name, 1, 1);
		H.id[k] = shoal_group_id(H.p[k]);
		if (k < linked_until)
			link_peer(k);
	}
}

/* Detach what here_start() attached (none, a second time). */
static void here_detach(void)
{
	for (int k = 0; k < PEERS; k++) {
		shoal_group_detach(H.p[k]);
		H.p[k] = NULL;
	}
	shoal_group_detach(H.c);
	H.c = NULL;
}

static void here_stop(void)
{
	here_detach();
	rt_stop_router();
}

/* shoal_poll(ctx, 0, 0), but never the empty poll in SUMMARY_TRUST that
 * looks at every ring unasked: that look would hide a miss. */
static int poll_trusting(void)
{
	if (((H.cc->quiet_polls + 1) & (SUMMARY_TRUST - 1)) == 0)
		H.cc->quiet_polls++;
	return shoal_poll(H.cc, 0, 0);
}

/* here_start() of one worker, its rings drained, the counts from 0. */
static void here_start_drained(const char *sys, int linked_until)
{
	here_start(sys, linked_until, 1);
	while (poll_trusting() > 0)
		;
	H.handled = H.sent = 0;
	memset(H.handled_from, 0, sizeof(H.handled_from));
}

/* Poll until a poll finds nothing: every message sent is handled by then,
 * and no ring holds anything (a poll that returns 0 with a ring holding
 * records is the stall this file looks for). */
static void drain_all(const char *what)
{
	int ret, polls = 0;

	while ((ret = poll_trusting()) > 0)
		assert_true(++polls < 1000);
	assert_int_equal(ret, 0);
	if (H.handled != H.sent || shoal__rings_ready_from(H.cc, SHOAL__ANY_SOURCE))
		fail_msg("%s: %llu of %llu messages handled when a poll found nothing (a ring "
			 "%s records)", what, (unsigned long long)H.handled,
			 (unsigned long long)H.sent,
			 shoal__rings_ready_from(H.cc, SHOAL__ANY_SOURCE) ? "still holds" :
			 "holds no");
}

/* The consumer's dispatched ring (its producer is a dispatcher), if it
 * has one only: dispatcher 0's. */
static struct shoal__inring *dispatched_ring(void)
{
	struct shoal__inring *d = NULL;

	for (uint32_t i = 0; i < H.cc->n_in; i++)
		if (H.cc->in[i].src_group == -1) {
			if (d != NULL)
				return NULL;
			d = &H.cc->in[i];
		}
	assert_non_null(d);
	return d;
}

/*
 * Rings whose producers share a hint bit: a poll after each send finds it
 * at once, whichever of them it is on (first or last of the bit's list),
 * and one poll finds a message on each of them; so with a dispatcher's
 * ring sharing a direct ring's bit, and with messages on rings of two bits.
 */
static void hint_review_rings_sharing_a_bit_are_each_found_at_once(void **state)
{
	uint32_t shared = 0, disp_bit = (uint32_t)__builtin_ctz(shoal_doorbell_ready_hint(
				shoal__ready_key_dispatcher(0))) - 2;
	int disp_peer = -1, other_peer = -1;

	(void)state;
	here_start_drained("hr-share", PEERS);
	for (uint32_t b = 0; b < SHOAL_DOORBELL_READY_HINTS; b++) {
		int list[PEERS], n = 0;

		for (int k = 0; k < PEERS; k++)
			if (bit_of(H.id[k]) == b)
				list[n++] = k;
		shared += n > 1;
		/* Each alone, last of the list first. */
		for (int j = n - 1; j >= 0; j--) {
			send_from(list[j], K_PLAIN);
			assert_int_equal(poll_trusting(), 1);
			assert_int_equal(poll_trusting(), 0);
		}
		/* All of the bit's at once: one pass over its list. */
		for (int j = 0; j < n; j++)
			send_from(list[j], K_PLAIN);
		assert_int_equal(poll_trusting(), n);
		assert_int_equal(poll_trusting(), 0);
	}
	assert_true(shared >= 5);   /* the case is really there */
	/* Two bits at once. */
	for (int k = 0; k < PEERS; k++) {
		int j = (k * 7 + 3) % PEERS;

		if (j == k)
			continue;
		send_from(k, K_PLAIN);
		send_from(j, K_PLAIN);
		assert_int_equal(poll_trusting(), 2);
		assert_int_equal(poll_trusting(), 0);
	}
	drain_all("two bits");
	/* More than a pass takes from one ring (POLL_BATCH): the next poll
	 * reads it again, although the summary was taken. */
	for (int k = 0; k < PEERS; k += 7) {
		for (uint32_t j = 0; j < POLL_BATCH + 8; j++)
			send_from(k, K_PLAIN);
		send_from((k + 1) % PEERS, K_PLAIN);
		assert_int_equal(poll_trusting(), POLL_BATCH + 1);
		assert_int_equal(poll_trusting(), 8);
		assert_int_equal(poll_trusting(), 0);
	}
	drain_all("more than a pass");
	/* A dispatcher's ring sharing a direct ring's bit. */
	for (int k = 0; k < PEERS; k++) {
		if (bit_of(H.id[k]) == disp_bit && disp_peer < 0)
			disp_peer = k;
		else if (bit_of(H.id[k]) != disp_bit && other_peer < 0)
			other_peer = k;
	}
	assert_true(disp_peer >= 0 && other_peer >= 0);
	if (dispatched_ring() == NULL) {
		print_message("more than one dispatcher: their rings' bits not tried\n");
		here_stop();
		return;
	}
	rt_route(shoal_group_id(H.c), T_PING, SHOAL_ROUTE_GROUP, SHOAL_KEY_ANY, 0, 0);
	for (int round = 0; round < 8; round++) {
		struct shoal__inring *d = dispatched_ring();
		struct msg v = { .seq = 1 };
		uint64_t t0 = now_ns();

		/* The direct one first: its mark names the bit both rings share. */
		send_from(disp_peer, K_PLAIN);
		assert_int_equal(shoal_send(shoal_group_worker(H.p[other_peer], 0), T_PING, &v,
					    sizeof(v)), 0);
		H.sent++;
		while (shoal_ring_empty(&d->c)) {
			assert_true(now_ns() - t0 < 10 * (uint64_t)SECOND);
			sched_yield();
		}
		assert_int_equal(poll_trusting(), 2);
		drain_all("a dispatcher's ring sharing a bit");
	}
	here_stop();
}

/*
 * Sends, new rings and polls while a pass runs: the handler of the first
 * message of A's ring (its run holds A's next ones) makes them, in
 * the orders below. However the pass and the passes inside it leave the
 * summary, the polls after it find every message before one finds none.
 */
static const struct scenario scenarios[] = {
	{ "sends during the pass", false,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } },
	  { { OP_SEND, R_A2, 0 }, { OP_SEND, R_C, 0 }, { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } } },
	{ "an inner poll takes the summary", false,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } },
	  { { OP_SEND, R_A2, 0 }, { OP_SEND, R_C, 0 }, { OP_POLL, 0, 0 }, { OP_SEND, R_D, 0 },
	    { OP_SEND, R_A, 0 }, { OP_SEND, R_A2, 0 } } },
	{ "an inner poll of budget 1", false,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } },
	  { { OP_SEND, R_C, 0 }, { OP_SEND, R_D, 0 }, { OP_SEND, R_A2, 0 }, { OP_POLL, 0, 1 },
	    { OP_SEND, R_B, 0 } } },
	{ "two inner polls", false,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_A, 0 }, { OP_SEND, R_A2, 0 } },
	  { { OP_SEND, R_C, 0 }, { OP_POLL, 0, 0 }, { OP_SEND, R_A2, 0 }, { OP_SEND, R_D, 0 },
	    { OP_POLL, 0, 0 }, { OP_SEND, R_A, 0 }, { OP_SEND, R_C, 0 } } },
	{ "a ring joins, then an inner poll", true,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } },
	  { { OP_CONNECT_SEND, R_Z, 0 }, { OP_POLL, 0, 0 }, { OP_SEND, R_Z, 0 },
	    { OP_SEND, R_C, 0 } } },
	{ "a ring joins A's bit during the pass", true,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } },
	  { { OP_CONNECT_SEND, R_Z, 0 }, { OP_SEND, R_A, 0 } } },
	{ "a ring joins after an inner poll", true,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_A, 0 } },
	  { { OP_SEND, R_C, 0 }, { OP_POLL, 0, 0 }, { OP_CONNECT_SEND, R_Z, 0 },
	    { OP_SEND, R_A, 0 } } },
	{ "a ring joins, an inner poll of budget 1", true,
	  { { OP_SEND, R_A, 0 }, { OP_SEND, R_A, 0 }, { OP_SEND, R_B, 0 } },
	  { { OP_CONNECT_SEND, R_Z, 0 }, { OP_SEND, R_C, 0 }, { OP_POLL, 0, 1 },
	    { OP_SEND, R_Z, 0 } } },
};

#define N_SCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

/* Peers 0 .. LINKED-1 open their link at the start; of the rest, the last
 * LATE wait to be a scenario's Z (each the mate of one of the last LATE
 * linked ones), the others may fill the ring table up. */
#define LINKED 40
#define LATE 4

/* Pick the scenario's peers: A and A2 of one bit (from the first linked
 * up), or A and Z (from the last linked down), and B, C, D of three other
 * bits. */
static void cast(const struct scenario *s, int *next_pair, int *next_late)
{
	int a = -1, mate = -1;

	if (s->late) {
		a = (*next_late)--;
		mate = a + 29;
		assert_true(a >= LINKED - LATE && mate < PEERS && !H.linked[mate]);
		assert_int_equal(bit_of(H.id[a]), bit_of(H.id[mate]));
	}
	for (int k = *next_pair; !s->late && k < LINKED && mate < 0; k++) {
		for (int j = k + 1; j < PEERS - LATE && mate < 0; j++)
			if (bit_of(H.id[j]) == bit_of(H.id[k]) && H.linked[j]) {
				a = k;
				mate = j;
			}
		*next_pair = k + 1;
	}
	assert_true(a >= 0 && mate >= 0);
	H.role[R_A] = a;
	H.role[R_A2] = s->late ? -1 : mate;
	H.role[R_Z] = s->late ? mate : -1;
	for (int r = R_B, k = 0; r < R_ROLES; r++) {
		bool taken;

		do {
			taken = bit_of(H.id[k]) == bit_of(H.id[a]);
			for (int q = R_B; q < r; q++)
				taken |= bit_of(H.id[k]) == bit_of(H.id[H.role[q]]);
		} while (taken && ++k < LINKED);
		assert_true(k < LINKED);
		H.role[r] = k++;
	}
}

/* Link more peers until the consumer's ring table is full, so that the
 * next ring to join moves it (realloc) in the middle of a pass. */
static void fill_ring_table(void)
{
	for (int k = LINKED; H.cc->n_in < H.cc->cap_in; k++) {
		assert_true(k < PEERS - LATE);
		if (H.linked[k])
			continue;
		link_peer(k);
		while (poll_trusting() > 0)
			;
	}
	assert_int_equal(H.cc->n_in, H.cc->cap_in);
}

static void hint_review_sends_and_polls_during_a_pass_leave_nothing_behind(void **state)
{
	int next_pair = 0, next_late = LINKED - 1;
	bool moved = false;

	(void)state;
	here_start("hr-pass", LINKED, 1);
	for (size_t i = 0; i < N_SCENARIOS; i++) {
		const struct scenario *s = &scenarios[i];
		uint32_t cap;

		while (poll_trusting() > 0)
			;
		H.handled = H.sent = 0;
		if (s->late && !moved)
			fill_ring_table();
		cast(s, &next_pair, &next_late);
		cap = H.cc->cap_in;
		print_message("%s: A %d, %s %d, B %d C %d D %d (bits %u, %u, %u %u %u)\n", s->name,
			      H.id[H.role[R_A]], s->late ? "Z" : "A2",
			      H.id[H.role[s->late ? R_Z : R_A2]], H.id[H.role[R_B]],
			      H.id[H.role[R_C]], H.id[H.role[R_D]], bit_of(H.id[H.role[R_A]]),
			      bit_of(H.id[H.role[s->late ? R_Z : R_A2]]),
			      bit_of(H.id[H.role[R_B]]), bit_of(H.id[H.role[R_C]]),
			      bit_of(H.id[H.role[R_D]]));
		send_from(H.role[R_A], K_NEST);
		run_steps(s->before);
		H.during = s->during;
		drain_all(s->name);
		assert_null(H.during);   /* the handler ran */
		if (s->late && !moved) {
			/* The first ring to join moved the table (its inner
			 * poll's scan added it, within the pass). */
			assert_true(H.cc->cap_in > cap);
			moved = true;
		}
	}
	here_stop();
}

/*
 * A consumer of two workers: what one receives for the other's actor goes
 * through their private ring, which has no hint (its producer marks
 * READY_SET). After each round of sends, polls of each worker in turn find
 * every message, the forwarded ones included, before one finds none.
 */
static void hint_review_forwarded_copies_are_found_by_the_next_poll(void **state)
{
	struct shoal_ctx *w[2];

	(void)state;
	here_start("hr-fwd", 16, 2);
	w[0] = shoal_group_worker(H.c, 0);
	w[1] = shoal_group_worker(H.c, 1);
	for (int round = 0; round < 64; round++) {
		int idle = 0;

		for (int k = 0; k <= round % 16; k++)
			send_from((round + k) % 16, K_PLAIN);
		/* Until both workers' polls found nothing, one after the other. */
		for (int turn = 0; idle < 2; turn++) {
			assert_true(turn < 1000);
			H.cc = w[turn % 2];
			idle = poll_trusting() > 0 ? 0 : idle + 1;
		}
		assert_int_equal(H.handled, H.sent);
		assert_false(shoal__rings_ready_from(w[0], SHOAL__ANY_SOURCE));
		assert_false(shoal__rings_ready_from(w[1], SHOAL__ANY_SOURCE));
	}
	/* Copies really went (each sender's messages come in at one worker,
	 * by a hash of its address, and half of them belong to the other). */
	assert_true(atomic_load(&H.c->mbx->w[0].fwd_sent) +
		    atomic_load(&H.c->mbx->w[1].fwd_sent) >= 64);
	H.cc = w[0];
	here_stop();
}

/* ---- a request inside the pass: a responder in a child process ---------------- */

static struct shoal_group *resp_g;   /* in the responder's process */

static void resp_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v = { .seq = 1, .kind = K_PLAIN };
	uint64_t c = shoal_group_lookup(resp_g, "c", 0);

	if (m->type != T_REQ)
		return;
	/* A message first, then the answer: the request sets the message
	 * aside, and the pass after it must still handle it. */
	if (shoal_send_to(a->ctx, c, T_PING, &v, sizeof(v)) < 0)
		atomic_store(&rt_res->status[0], 1);
	shoal_respond(a->ctx, m, T_RESP, &v, sizeof(v));
}

static int responder_main(void *arg)
{
	struct child *c = arg;
	struct shoal_group *g = rt_child_attach(c, "resp", resp_handler);
	struct shoal_ctx *ctx;

	if (g == NULL)
		return 10;
	resp_g = g;
	ctx = shoal_group_worker(g, 0);
	if (shoal_connect(ctx, shoal_group_lookup(g, "c", 0), 10 * SECOND) < 0)
		return 11;
	atomic_store(&rt_res->ready[0], 1);
	while (!atomic_load(&rt_res->go))
		if (shoal_poll(ctx, 0, 10000000) < 0)
			return 12;
	shoal_group_detach(g);
	return 0;
}

/*
 * A request from the handler of A's first message, while B's and C's
 * messages wait on rings of other bits, and the responder's message comes
 * in during the wait (set aside): the request's passes read only the
 * responder's rings and take no summary; the polls after it find all.
 */
static void hint_review_request_inside_a_pass_leaves_nothing_behind(void **state)
{
	static const struct step during[] = {
		{ OP_SEND, R_B, 0 }, { OP_REQUEST, 0, 0 }, { OP_SEND, R_C, 0 }, { OP_SEND, R_A2, 0 },
		{ OP_END, 0, 0 }
	};
	static const struct step twice[] = {
		{ OP_SEND, R_B, 0 }, { OP_REQUEST, 0, 0 }, { OP_POLL, 0, 0 }, { OP_SEND, R_C, 0 },
		{ OP_REQUEST, 0, 0 }, { OP_SEND, R_D, 0 }, { OP_END, 0, 0 }
	};
	static const struct scenario s = { "request", false, { { OP_END, 0, 0 } }, { { 0 } } };
	struct child resp = { .index = 0, .name = "resp" };
	int next_pair = 0, next_late = 0;
	pid_t pr;

	(void)state;
	here_start("hr-req", LINKED, 1);
	pr = test_spawn(responder_main, &resp, sizeof(resp));
	rt_wait_ready(1);
	H.resp = shoal_group_lookup(H.c, "resp", 0);
	assert_int_not_equal(H.resp, SHOAL_ADDR_NONE);
	assert_int_equal(shoal_connect(H.cc, H.resp, 10 * SECOND), 0);
	for (int round = 0; round < 20; round++) {
		while (poll_trusting() > 0)
			;
		H.handled = H.sent = 0;
		if (round % 10 == 0)
			next_pair = 0;
		cast(&s, &next_pair, &next_late);
		send_from(H.role[R_A], K_NEST);
		send_from(H.role[R_A], K_PLAIN);
		send_from(H.role[R_D], K_PLAIN);
		H.during = round % 2 ? twice : during;
		H.request_status = -1;
		drain_all("request");
		assert_int_equal(H.request_status, 0);
	}
	atomic_store(&rt_res->go, 1);
	test_assert_exited(test_wait_pid(pr, 20000), 0);
	assert_int_equal(atomic_load(&rt_res->status[0]), 0);
	here_stop();
}

/*
 * A summary word with a bit no hint uses (bit 31: hints are bits 2 to 30)
 * is damage, as a word without READY_ON is: the poll looks at every ring
 * ("garbage in the word costs a scan, never a missed one"). Taken as a
 * hint it names list 29 of 29, past the lists' end.
 */
static void hint_review_summary_bit_past_the_hints_means_every_ring(void **state)
{
	(void)state;
	here_start_drained("hr-bit31", 4);
	for (int k = 0; k < 4; k++) {
		send_from(k, K_PLAIN);
		atomic_store(&H.cc->mw->in_db.ready, SHOAL_DOORBELL_READY_ON | UINT32_C(1) << 31);
		assert_int_equal(poll_trusting(), 1);
		assert_int_equal(poll_trusting(), 0);
	}
	here_stop();
}

/*
 * The safety net under the summary: a mark erased (a peer wrote the word
 * back to READY_ON) leaves its message to the look at every ring that one
 * empty poll in SUMMARY_TRUST makes, never longer.
 */
static void hint_review_erased_mark_is_found_within_summary_trust_polls(void **state)
{
	(void)state;
	here_start_drained("hr-trust", 2);
	for (int round = 0; round < 3; round++) {
		int polls = 0, ret;

		send_from(round % 2, K_PLAIN);
		atomic_store(&H.cc->mw->in_db.ready, SHOAL_DOORBELL_READY_ON);
		while ((ret = shoal_poll(H.cc, 0, 0)) == 0)
			assert_true(++polls < (int)SUMMARY_TRUST);
		assert_int_equal(ret, 1);
	}
	here_stop();
}

/*
 * A commit whose mark has not landed in the summary yet (its producer is
 * between the two, or died there): the look at every ring before a sleep
 * finds it, and the poll that follows that look must read every ring, not
 * the summary. poll.c's own sleep does (a poll that may wait returns it);
 * so must the bridge's steps (shoal__idle_prepare(), runtime/data/send.c),
 * whose caller polls again when the look found something: the summary
 * would answer that poll "nothing" until the look at every ring that
 * SUMMARY_TRUST empty polls bring.
 */
static void hint_review_poll_after_an_idle_look_that_found_records_reads_them(void **state)
{
	(void)state;
	here_start_drained("hr-idle", 2);
	/* poll.c's sleep: the spin's look finds it, the pass reads it. */
	send_from(0, K_PLAIN);
	atomic_store(&H.cc->mw->in_db.ready, SHOAL_DOORBELL_READY_ON);
	assert_int_equal(shoal_poll(H.cc, 0, 2 * SECOND), 1);
	assert_int_equal(poll_trusting(), 0);
	/* The bridge's steps: the look finds it, cancels the sleep; the
	 * bridge polls at once. */
	send_from(1, K_PLAIN);
	atomic_store(&H.cc->mw->in_db.ready, SHOAL_DOORBELL_READY_ON);
	assert_false(shoal__idle_prepare(H.cc));
	assert_int_equal(atomic_load(&H.cc->mw->in_db.state), SHOAL_DOORBELL_AWAKE);
	assert_int_equal(poll_trusting(), 1);
	assert_int_equal(poll_trusting(), 0);
	here_stop();
}

/*
 * The hot ring's cases run twice: with few rings (two peers linked: the
 * watch is on) and with more than SCAN_ALL_MAX (it is off). check() gets
 * which, after here_start_drained().
 */
static void with_few_and_many(const char *sys, void (*check)(bool few))
{
	static const int linked[] = { 2, SCAN_ALL_MAX + 4 };
	char name[32];

	for (size_t t = 0; t < sizeof(linked) / sizeof(linked[0]); t++) {
		snprintf(name, sizeof(name), "%s-%d", sys, linked[t]);
		here_start_drained(name, linked[t]);
		assert_int_equal(H.cc->n_in <= SCAN_ALL_MAX, t == 0);
		check(t == 0);
		here_stop();
	}
}

static void hot_ring_read(bool few)
{
	send_from(0, K_PLAIN);
	assert_int_equal(poll_trusting(), 1);   /* peer 0's ring: the hot one */
	assert_int_equal(poll_trusting(), 0);
	send_from(0, K_PLAIN);
	atomic_store(&H.cc->mw->in_db.ready, SHOAL_DOORBELL_READY_ON);   /* no mark */
	assert_int_equal(poll_trusting(), few ? 1 : 0);
	if (!few)   /* the mark, at last: the summary alone finds it */
		atomic_store(&H.cc->mw->in_db.ready,
			     SHOAL_DOORBELL_READY_ON | SHOAL_DOORBELL_READY_SET);
	drain_all("the hot ring");
	send_from(1, K_PLAIN);
	atomic_store(&H.cc->mw->in_db.ready, SHOAL_DOORBELL_READY_ON);
	assert_int_equal(poll_trusting(), 0);   /* not the hot ring: its mark is needed */
	atomic_store(&H.cc->mw->in_db.ready,
		     SHOAL_DOORBELL_READY_ON |
			     shoal_doorbell_ready_hint(shoal__ready_key((uint16_t)H.id[1], 0)));
	assert_int_equal(poll_trusting(), 1);
}

/*
 * The hot ring (poll.c worth_a_pass()): among at most SCAN_ALL_MAX rings,
 * an empty poll reads the tail of the ring a pass last took records from,
 * so a record there is found even before (here: without) its mark in the
 * summary; another ring's record still waits for its mark. Among more
 * rings the summary alone answers, as before.
 */
static void hint_review_hot_ring_is_read_beside_the_summary(void **state)
{
	(void)state;
	with_few_and_many("hr-hot", hot_ring_read);
}

static void busy_ring_hides_nothing(bool few)
{
	(void)few;
	for (int round = 0; round < 20; round++) {
		int polls = 0;

		send_from(0, K_PLAIN);
		assert_int_equal(poll_trusting(), 1);
		send_from(0, K_PLAIN);
		send_from(1, K_PLAIN);
		while (H.handled_from[1] < (uint32_t)round + 1) {
			assert_true(++polls <= 2);
			send_from(0, K_PLAIN);   /* the hot ring never empty */
			assert_true(poll_trusting() >= 1);
		}
	}
	drain_all("a busy ring");
}

/*
 * A ring kept busy (a record in it at every poll) hides no other ring's
 * message: with a mark in the summary the hot ring's pass reads every
 * ring (few rings), and the summary is taken at every empty poll (many).
 * The other peer's message is handled within two polls of its send.
 */
static void hint_review_a_busy_hot_ring_hides_no_other(void **state)
{
	(void)state;
	with_few_and_many("hr-busy", busy_ring_hides_nothing);
}

/* ---- across processes: producers publish while the consumer polls ------------- */

#define XP_MAX 4

/* One stress variant. */
struct xp_variant {
	const char *name;
	int producers;
	uint64_t rounds;          /* messages per producer (scaled) */
	int64_t poll_timeout_ns;  /* the consumer's polls: 0 busy, else may sleep */
	uint32_t burst_every;     /* 1 in this many rounds sends a burst (0: never) */
	uint64_t pause_every;     /* 1 in this many rounds pauses long (0: never) */
	uint32_t nap_every;       /* busy: 1 in this many polls may sleep 50 us */
	uint32_t jitter;          /* producers wait up to this many loops before a send */
};

/* What producers and consumer share (a MAP_SHARED mapping made in main). */
struct xp_shared {
	_Alignas(64) _Atomic uint64_t marked[XP_MAX];   /* producer k's sends returned up to here */
	_Alignas(64) _Atomic uint64_t seen[XP_MAX];     /* the consumer handled up to here */
	_Alignas(64) _Atomic uint64_t misses;           /* polls that missed a finished send */
	_Atomic uint64_t unfenced_sends;                /* sends made while F2 could be skipped */
	_Atomic uint32_t stop;
	_Atomic uint32_t ready;
	_Atomic uint32_t go;
	uint64_t to;
	struct xp_variant v;
};

static struct xp_shared *xs;
static struct shoal_group *xp_c;   /* run_xp()'s consumer, attached here */

/* A variant's rounds are what it sends on an idle machine (well under a
 * second each). Under load a round trip can wait for a timeslice: the
 * consumer then ends the sends at XP_DEADLINE_NS (stop), every message sent
 * so far must still be handled, and each producer must have sent at least
 * XP_MIN_ROUNDS (or all its rounds), a bound far below what a loaded run
 * makes (115 000 and more beside three busy loops on the 2 CPUs,
 * 2026-12-06). A producer still waiting XP_ORPHAN_NS after its start, its
 * consumer gone, gives up (13). */
#define XP_DEADLINE_NS (60 * (uint64_t)SECOND)
#define XP_ORPHAN_NS (XP_DEADLINE_NS + 60 * (uint64_t)SECOND)
#define XP_DRAIN_NS (10 * (uint64_t)SECOND)
#define XP_MIN_ROUNDS 2000u
#define XP_BURST 16u   /* below POLL_BATCH: one pass takes a burst whole */

static void xp_handler(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct msg v;

	(void)a;
	if (m->len != sizeof(v))
		return;
	memcpy(&v, m->data, sizeof(v));
	if (v.from < XP_MAX)
		atomic_store_explicit(&xs->seen[v.from], v.seq, memory_order_relaxed);
}

static int xp_producer(void *arg)
{
	struct child *c = arg;
	int k = c->index;
	char name[16];
	struct shoal_group *g;
	struct shoal_ctx *ctx;
	uint64_t seed = test_seed() * 31 + (uint64_t)k, start;
	int dg;

	snprintf(name, sizeof(name), "xp%d", k);
	g = rt_child_attach(c, name, rt_count_handler);
	if (g == NULL)
		return 10;
	ctx = shoal_group_worker(g, 0);
	if (shoal_connect(ctx, xs->to, 10 * SECOND) < 0)
		return 11;
	dg = shoal_addr_group(xs->to);
	atomic_fetch_add(&xs->ready, 1);
	while (!atomic_load(&xs->go))
		usleep(1000);
	start = now_ns();
	for (uint64_t i = 1; i <= xs->v.rounds && !atomic_load(&xs->stop);) {
		uint32_t n = xs->v.burst_every && test_rand(&seed) % xs->v.burst_every == 0 ?
			     XP_BURST : 1;

		if (xs->v.pause_every && test_rand(&seed) % xs->v.pause_every == 0)
			usleep((useconds_t)(test_rand(&seed) % 2000));
		for (uint64_t d = test_rand(&seed) % xs->v.jitter; d > 0; d--)
			__asm__ __volatile__("" ::: "memory");
		for (uint32_t j = 0; j < n && i <= xs->v.rounds; j++, i++) {
			struct msg v = { .seq = i, .from = (uint32_t)k };

			if (!shoal_doorbell_fence_needed(&atomic_load(&ctx->dout[dg])[0].dst->in_db))
				atomic_fetch_add_explicit(&xs->unfenced_sends, 1,
							  memory_order_relaxed);
			if (shoal_send_to(ctx, xs->to, T_PING, &v, sizeof(v)) < 0)
				return 12;
		}
		/* Release: a consumer that reads this reads it after the
		 * sends above returned, their marks included. */
		atomic_store_explicit(&xs->marked[k], i - 1, memory_order_release);
		while (atomic_load(&xs->seen[k]) < i - 1 && !atomic_load(&xs->stop)) {
			if (now_ns() - start > XP_ORPHAN_NS)
				return 13;
			sched_yield();
		}
	}
	shoal_group_detach(g);
	return 0;
}

/* Declare producer groups xp0.. so that xp0 and xp1 share a hint bit
 * (group ids 29 apart: keys 29 * 16 apart) and the others have bits of
 * their own; pads fill the ids between. */
static void xp_declare(int producers, int *ids)
{
	char name[16];

	for (int k = 0; k < producers; k++) {
		snprintf(name, sizeof(name), "xp%d", k);
		ids[k] = rt_declare(name, 1, 1);
		for (int pad = 0; k == 0 && pad < 28; pad++) {
			snprintf(name, sizeof(name), "pad%d", pad);
			rt_declare(name, 1, 1);
		}
	}
	if (producers > 1 && bit_of(ids[0]) != bit_of(ids[1]))
		fail_msg("xp0 (group %d) and xp1 (group %d) do not share a bit", ids[0], ids[1]);
}

/* Every message a producer's sends returned for has been handled. */
static bool xp_all_seen(int producers)
{
	for (int k = 0; k < producers; k++)
		if (atomic_load(&xs->seen[k]) < atomic_load(&xs->marked[k]))
			return false;
	return true;
}

static void run_xp(const struct xp_variant *v)
{
	struct shoal_group_desc d = { .name = "c", .types = rt_types, .n_types = RT_N_TYPES,
				      .on_message = xp_handler, .node = -1 };
	struct child kids[XP_MAX];
	pid_t pids[XP_MAX];
	int ids[XP_MAX], st[XP_MAX];
	struct shoal_ctx *cc;
	uint64_t start, polls = 0, sleeps0;
	bool done = false;

	memset(xs, 0, sizeof(*xs));
	xs->v = *v;
	xs->v.rounds = test_scale(v->rounds);
	assert_int_equal(rt_start_router(v->name, NULL, 0), 0);
	assert_int_equal(shoal_group_attach(&xp_c, &d, NULL, NULL), 0);
	cc = shoal_group_worker(xp_c, 0);
	xs->to = shoal_group_lookup(xp_c, "c", 0);
	xp_declare(v->producers, ids);
	for (int k = 0; k < v->producers; k++) {
		kids[k] = (struct child){ .index = k };
		pids[k] = test_spawn(xp_producer, &kids[k], sizeof(kids[k]));
	}
	for (int i = 0; atomic_load(&xs->ready) < (uint32_t)v->producers; i++) {
		assert_true(i < 20000);
		assert_true(shoal_poll(cc, 0, 1000000) >= 0);
	}
	if (v->poll_timeout_ns != 0) {
		/* Sleep at once when a pass finds nothing (64 looks, then
		 * prepare): the sends land on the way to sleep. */
		cc->idle.spin_max_ns = 0;
		cc->idle.spin_ns = 0;
	}
	sleeps0 = atomic_load(&cc->mw->in_db.sleeps);
	atomic_store(&xs->go, 1);
	start = now_ns();
	while (!done) {
		uint64_t snap[XP_MAX], seen_before[XP_MAX], t0;
		int64_t timeout = v->poll_timeout_ns;
		int ret;

		for (int k = 0; k < v->producers; k++) {
			seen_before[k] = atomic_load(&xs->seen[k]);
			snap[k] = atomic_load_explicit(&xs->marked[k], memory_order_acquire);
		}
		/* A busy poller still sleeps now and then (it takes back the
		 * producers' leave to skip F2 then). */
		if (++polls % v->nap_every == 0 && timeout == 0)
			timeout = 50000;
		t0 = now_ns();
		ret = shoal_poll(cc, 0, timeout);
		assert_true(ret >= 0);
		/* A poll that waited out its whole timeout while a send
		 * returned: that send's wake-up was lost (the pass after the
		 * timed-out wait finds the message, so only this shows it;
		 * doorbell_test.c counts the same, waits that ran into their
		 * timeout with the message there). No producer pauses for
		 * more than 2 ms, so nothing else keeps a poll waiting 2 s. */
		if (timeout >= SECOND && now_ns() - t0 >= (uint64_t)timeout)
			for (int k = 0; k < v->producers; k++) {
				uint64_t marked = atomic_load(&xs->marked[k]);

				if (marked > seen_before[k] &&
				    atomic_fetch_add(&xs->misses, 1) < 5)
					print_message("lost wake-up: producer %d had sent %llu, "
						      "seen %llu before a poll that waited out "
						      "its timeout\n", k,
						      (unsigned long long)marked,
						      (unsigned long long)seen_before[k]);
			}
		done = true;
		for (int k = 0; k < v->producers; k++) {
			uint64_t seen = atomic_load(&xs->seen[k]);

			if (seen < snap[k] && atomic_fetch_add(&xs->misses, 1) < 5)
				print_message("miss: producer %d (group %d, bit %u) had sent %llu, "
					      "seen %llu after a poll that returned %d\n", k,
					      ids[k], bit_of(ids[k]),
					      (unsigned long long)snap[k],
					      (unsigned long long)seen, ret);
			done &= seen >= xs->v.rounds;
		}
		if (now_ns() - start > XP_DEADLINE_NS) {
			atomic_store(&xs->stop, 1);
			break;
		}
	}
	for (int k = 0; k < v->producers; k++)
		st[k] = test_wait_pid(pids[k], 30000);
	/* Cut by the deadline: what the producers sent before they stopped
	 * is handled by the polls that follow, or it is lost. */
	for (uint64_t t0 = now_ns(); !done && !xp_all_seen(v->producers) &&
	     now_ns() - t0 < XP_DRAIN_NS;)
		assert_true(shoal_poll(cc, 0, 1000000) >= 0);
	print_message("%s: %d producers x %llu%s, %llu polls, consumer sleeps %llu, sends "
		      "without F2 %llu, misses %llu, %.1f s\n", v->name, v->producers,
		      (unsigned long long)xs->v.rounds,
		      done ? "" : " (cut by the deadline, the machine is busy)",
		      (unsigned long long)polls,
		      (unsigned long long)(atomic_load(&cc->mw->in_db.sleeps) - sleeps0),
		      (unsigned long long)atomic_load(&xs->unfenced_sends),
		      (unsigned long long)atomic_load(&xs->misses),
		      (double)(now_ns() - start) / 1e9);
	for (int k = 0; k < v->producers; k++)
		test_assert_exited(st[k], 0);
	assert_int_equal(atomic_load(&xs->misses), 0);
	for (int k = 0; k < v->producers; k++) {
		uint64_t marked = atomic_load(&xs->marked[k]), seen = atomic_load(&xs->seen[k]);

		if (seen < marked)
			fail_msg("producer %d: %llu sends returned, %llu handled", k,
				 (unsigned long long)marked, (unsigned long long)seen);
		if (marked < xs->v.rounds && marked < XP_MIN_ROUNDS)
			fail_msg("producer %d sent %llu of %llu by the deadline (at least %u "
				 "expected even on a busy machine)", k, (unsigned long long)marked,
				 (unsigned long long)xs->v.rounds, XP_MIN_ROUNDS);
		if (!done)
			print_message("  producer %d: %llu of %llu sent and handled\n", k,
				      (unsigned long long)marked,
				      (unsigned long long)xs->v.rounds);
	}
	/* Streaming, the producers really published without F2 (where the
	 * kernel's barrier lets them: not under ThreadSanitizer). */
	if (v->burst_every != 0 && v->poll_timeout_ns == 0 && shoal_doorbell_asym_join() == 0)
		assert_true(atomic_load(&xs->unfenced_sends) > 0);
	shoal_group_detach(xp_c);
	xp_c = NULL;
	rt_stop_router();
}

/*
 * The variants: a busy poller (timeout 0), whose misses would be the
 * summary's (a lost mark, a stale load left alone, a wrong list); the same
 * with bursts, so that it streams past SHOAL_UNFENCE_AFTER and the
 * producers skip F2 (where membarrier(2) allows) until its next sleep; a
 * poller that sleeps, whose misses would be lost wake-ups (a poll that
 * timed out with a finished send there).
 */
static const struct xp_variant xp_variants[] = {
	{ "hr-busy", 4, 150000, 0, 0, 0, 512, 256 },
	{ "hr-stream", 4, 300000, 0, 4, 0, 1u << 16, 256 },
	{ "hr-sleep", 3, 20000, 2 * SECOND, 16, 64, 1, 20000 },
};

static void hint_review_busy_poll_sees_every_finished_send(void **state)
{
	(void)state;
	run_xp(&xp_variants[0]);
}

static void hint_review_streaming_poll_sees_every_finished_send(void **state)
{
	(void)state;
	run_xp(&xp_variants[1]);
}

static void hint_review_sleeping_poll_wakes_for_every_finished_send(void **state)
{
	(void)state;
	run_xp(&xp_variants[2]);
}

/*
 * A handler's timed poll while a record waits behind the handler's run on
 * the run's own ring (a record of another length, so not in the run): the
 * pass leaves that ring to the run, and the wait sleeps until its timeout
 * (the doorbell counts the sleep) rather than spinning on what it will not
 * read. The record is handled after the handler, by the outer pass.
 */
static void hint_review_timed_poll_in_a_handler_sleeps_past_its_run(void **state)
{
	static const struct step wait[] = { { OP_WAIT, 0, 0 }, { OP_END, 0, 0 } };
	uint64_t sleeps;

	(void)state;
	here_start_drained("hr-wait", 1);
	H.wait_status = 1;
	sleeps = shoal_load_relaxed(&H.cc->mw->in_db.sleeps);
	send_from(0, K_NEST);
	send_short_from(0);
	H.during = wait;
	drain_all("timed poll in a handler");
	assert_null(H.during);   /* the handler ran */
	assert_int_equal(H.wait_status, 0);
	if (shoal_load_relaxed(&H.cc->mw->in_db.sleeps) == sleeps)
		fail_msg("the handler's timed poll never slept: it spun on its run's ring");
	here_stop();
}

/*
 * After each case, passed or failed: no producer, group, router or
 * segment directory left (a failed case used to leave its
 * /dev/shm/shoal-test-* behind). The producers go first, then this
 * process's groups, before rt_leave_nothing() stops the router.
 */
static int leave_nothing(void **state)
{
	test_kill_children();
	here_detach();
	shoal_group_detach(xp_c);
	xp_c = NULL;
	return rt_leave_nothing(state);
}

#define HR_CASE(f) cmocka_unit_test_teardown(f, leave_nothing)

int main(void)
{
	const struct CMUnitTest tests[] = {
		HR_CASE(hint_review_rings_sharing_a_bit_are_each_found_at_once),
		HR_CASE(hint_review_sends_and_polls_during_a_pass_leave_nothing_behind),
		HR_CASE(hint_review_forwarded_copies_are_found_by_the_next_poll),
		HR_CASE(hint_review_request_inside_a_pass_leaves_nothing_behind),
		HR_CASE(hint_review_summary_bit_past_the_hints_means_every_ring),
		HR_CASE(hint_review_erased_mark_is_found_within_summary_trust_polls),
		HR_CASE(hint_review_poll_after_an_idle_look_that_found_records_reads_them),
		HR_CASE(hint_review_hot_ring_is_read_beside_the_summary),
		HR_CASE(hint_review_a_busy_hot_ring_hides_no_other),
		HR_CASE(hint_review_busy_poll_sees_every_finished_send),
		HR_CASE(hint_review_streaming_poll_sees_every_finished_send),
		HR_CASE(hint_review_sleeping_poll_wakes_for_every_finished_send),
		HR_CASE(hint_review_timed_poll_in_a_handler_sleeps_past_its_run),
	};

	rt_init();
	xs = mmap(NULL, sizeof(*xs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (xs == MAP_FAILED)
		abort();
	signal(SIGPIPE, SIG_IGN);
	test_spawn_server_start();
	if (getenv("SHOAL_TEST_FILTER") != NULL)   /* one test, by name pattern */
		cmocka_set_test_filter(getenv("SHOAL_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
