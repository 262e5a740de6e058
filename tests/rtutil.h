/* SPDX-License-Identifier: MIT */
/*
 * Shared fixture of the runtime tests: this test process runs the router;
 * groups are child processes (no inherited descriptors) that the fork server
 * starts (tests/spawn.c) and that report through a MAP_SHARED mapping made
 * before the server started, and their exit status.
 */
#ifndef SHOAL_TESTS_RTUTIL_H
#define SHOAL_TESTS_RTUTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <shoal/group.h>
#include <shoal/router.h>

enum { T_PING = 1, T_PONG = 2, T_REQ = 3, T_RESP = 4, T_OTHER = 5 };

extern const struct shoal_type rt_types[];
#define RT_N_TYPES 4u

struct msg {
	uint64_t seq;
	uint32_t from;      /* producer index */
	uint32_t kind;      /* test-specific */
	uint64_t key;
};

#define MAX_CHILD 8
#define MAX_ACT 8

/* What the children report, in a MAP_SHARED mapping made before fork. */
struct results {
	_Atomic uint64_t count[MAX_CHILD];               /* messages handled per child */
	_Atomic uint64_t per_actor[MAX_CHILD][MAX_ACT];
	_Atomic uint64_t order_errors[MAX_CHILD];
	_Atomic uint64_t last_seq[MAX_CHILD];
	_Atomic uint64_t sum_seq[MAX_CHILD];
	_Atomic int32_t status[MAX_CHILD];               /* child-defined result codes */
	_Atomic int64_t elapsed_ns[MAX_CHILD];
	_Atomic uint32_t ready[MAX_CHILD];
	_Atomic uint32_t go;
};

struct child {
	int index;                /* results slot */
	const char *name;
	uint16_t workers, actors;
	uint64_t n;               /* messages to send, for producers */
	uint64_t first;           /* sequence number of the first one */
	uint32_t type;
	uint64_t dest;
	int mode;                 /* test-specific */
	bool gated;               /* producers: say ready, then send once `go` is set */
	struct shoal_filter sub;
	bool has_sub;
	void (*route)(const struct shoal_msg *m, struct shoal_outcome *out, void *user);
	/* rt_child_attach()'s on_batch (NULL: none). */
	void (*on_batch)(struct shoal_actor *a, const struct shoal_msg *msgs, uint32_t n);
};

extern struct results *rt_res;
extern struct shoal_router *rt_router;
extern char rt_sysname[32];
/* router.yield of the next rt_start_router() (0: none). */
extern uint64_t rt_yield_ns;
/* router.stream of the next rt_start_router() (SHOAL_STREAM_*; 0: auto). */
extern int rt_stream;

/* Map the results (once, in main, before test_spawn_server_start()). */
void rt_init(void);

/* Start a router for system `name` in a private shm directory. */
int rt_start_router(const char *name, const struct shoal_topology *topo, mode_t mode);
/* Stop the router (if one runs) and remove the shm directory. */
void rt_stop_router(void);

/*
 * The teardown of every runtime case (cmocka_unit_test_teardown): a case
 * that fails leaves at its first failed assertion, by cmocka's longjmp, so
 * its own clean-up never runs. This gives stderr back (showing what
 * rt_stderr_capture() took), kills and reaps the children the case left
 * running, stops its router and removes its shm directory, and clears
 * rt_yield_ns: nothing of the case reaches the next one or outlives the
 * test. After a case that passed there is nothing left and it does
 * nothing.
 */
int rt_leave_nothing(void **state);

/* A case with rt_leave_nothing() as its teardown; with a prestate. */
#define RT_CASE(f) cmocka_unit_test_teardown(f, rt_leave_nothing)
#define RT_CASE_PRESTATE(f, state) \
	cmocka_unit_test_prestate_setup_teardown(f, NULL, rt_leave_nothing, state)

int rt_declare(const char *name, uint16_t workers, uint16_t actors);
uint32_t rt_route(int group, uint32_t type, uint8_t mode, uint8_t op, uint64_t a, uint64_t b);
void rt_wait_attached(int id);
void rt_wait_count(int child, uint64_t want, int timeout_ms);
void rt_wait_ready(int n);

/* Handlers: count (and answer T_REQ), or check strict order (mode 1: +1, mode 2: +2). */
void rt_count_handler(struct shoal_actor *a, const struct shoal_msg *m);
void rt_ordered_handler(struct shoal_actor *a, const struct shoal_msg *m);
int rt_ordered_start(struct shoal_actor *a);

/* Child programs for test_spawn(): a consumer group that runs until
 * stopped, and a producer that sends c->n messages and leaves. */
int rt_consumer_main(void *arg);
int rt_producer_main(void *arg);

/* In a child: attach group `name` (NULL: c->name) with rt_types, handler
 * `on_message` (and c->on_batch) and user pointer c. NULL (said on
 * stderr) if it failed. */
struct shoal_group *rt_child_attach(struct child *c, const char *name,
				    void (*on_message)(struct shoal_actor *a,
						       const struct shoal_msg *m));

/* Attach group `name` in this test process, counting as child 0 with
 * rt_count_handler; no run loop: the test polls it. Fails the test if the
 * attach fails. */
struct shoal_group *rt_attach_here(const char *name, uint16_t workers, uint16_t actors);

/* Ask every group to stop and check each child exited 0. */
void rt_stop_and_reap(pid_t *pids, int n);

/* The pid of group `name` of system `system` in its registry, or 0. */
pid_t rt_group_pid(const char *system, const char *name);

/* ---- damage (DESIGN invariant 10) ---- */

struct shoal_seg;
struct shoal__ring;

/* What group `id` of rt_sysname shows of its damage. */
struct rt_damage {
	uint32_t damaged, replaced;
	uint64_t lost;              /* router-counted and worker-counted */
	uint64_t dropped_corrupt;   /* copies the dispatchers dropped */
	uint64_t delivered;
};

void rt_damage_of(int id, struct rt_damage *gd);

/* Wait until group `id` shows at least `damaged` damages and `replaced` replacements. */
void rt_wait_damage(int id, uint32_t damaged, uint32_t replaced, struct rt_damage *gd);

/* Map group `group`'s mailbox read-write, as a hostile peer would. */
void rt_mailbox_map(const char *group, struct shoal_seg *seg);

/* Ring region `ring` of a mapped mailbox (fails the test if absent). */
struct shoal__ring *rt_ring_of(struct shoal_seg *seg, const char *ring);

/* Run-time groups the router freed, and the messages it counted lost with
 * them (the registry's released and lost_released). */
void rt_released(uint32_t *n, uint64_t *lost);
/* Wait (up to 60 s) until `want` groups were freed; *lost as above. */
void rt_wait_released(uint32_t want, uint64_t *lost);

/* `shoal stat` and `shoal ls` (tool_bin) exit 1 and say DAMAGED. */
void rt_tools_say_damaged(void);

/* Records the dispatchers dropped for corrupted rings, summed over all of
 * them (with what they found skipped behind a forged uplink head, whose
 * destinations are unknown, so no group's count has it). */
uint64_t rt_dispatch_dropped_corrupt(void);

/*
 * Send this process's stderr (the router in it logs damage there) to a
 * file until rt_stderr_end(), which restores it and returns what was
 * written, NUL-terminated, for free(); NULL when nothing was captured.
 * Children started by the fork server keep their own stderr.
 */
void rt_stderr_capture(void);
char *rt_stderr_end(void);

#endif
