/* SPDX-License-Identifier: MIT */
/*
 * The bridge process's state and the calls between its files, private to
 * runtime/bridge/ (bridge.h has the process's one entry):
 *   bridge.c       the process: its links made, its loop (serve()) and
 *                  sleep, its stop;
 *   bridge_view.c  the link view for the tools, and each link's news on the
 *                  bridge's output;
 *   bridge_in.c    records from peers into this host's system;
 *   bridge_out.c   the mailbox's messages onto the links.
 * Every call here is made by the bridge's one thread (the watch thread
 * touches none of them: struct watch).
 */
#ifndef SHOAL_RUNTIME_BRIDGE_BRIDGE_IMPL_H
#define SHOAL_RUNTIME_BRIDGE_BRIDGE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <shoal/group.h>

#include "runtime/bridge/bridge.h"
#include "runtime/bridge/link.h"
#include "runtime/bridge/view.h"
#include "runtime/control/config.h"
#include "runtime/data/relay.h"
#include "runtime/route/route.h"

#define PENDING_MAX 4096u        /* requests brought in watched at once (struct pending) */

struct peer {
	const struct shoal__cfg_host *h;
	int role;                        /* enum shoal__link_role */
	struct shoal__link *link;
	struct shoal__link_stats seen;   /* as last told */
	uint64_t told_failures;          /* connections broken when last told */
	uint64_t lost_down;              /* records given up on: the host down too long */
	struct shoal__links_row *row;    /* its row of the link view; NULL: no view */
	/* The records of the run being carried (shoal__bridge_carry_run())
	 * for this link: `got` reserved together, the first `k` written,
	 * committed together at the run's end (bridge_out.c, run_slot()). */
	struct {
		unsigned char *at;       /* the first's bytes */
		uint32_t stride, got, k;
	} run;
};

/* What the bridge counted besides its links' counters; told at its end. */
struct counts {
	uint64_t forwarded;      /* records queued on a link */
	uint64_t no_host;        /* messages no route of another host matched */
	uint64_t returned;       /* what the bridge sent itself, come back: dropped */
	uint64_t lost_down;      /* records a link down past down_after refused */
	uint64_t received;       /* records from peers sent on here */
	uint64_t refused_in;     /* records from peers that are no message of this system */
	uint64_t direct;         /* of `forwarded`, direct messages and responses */
	uint64_t no_group;       /* direct messages for no group of another host */
	uint64_t ended;          /* requests brought in, answered -EOWNERDEAD here */
	uint64_t untracked;      /* requests brought in while PENDING_MAX were watched */
	uint64_t lost_stop;      /* records no peer acknowledged when the bridge stopped */
	uint64_t backlogged;     /* of `forwarded`, records queued beyond the credit */
};

/*
 * A request brought in from another host, for a group of this host: watched
 * until its response goes back through this bridge (bridge_out.c), or
 * until its responder's process ends, or if none ran when it came: then
 * the bridge answers the requester -EOWNERDEAD, as a requester of this
 * host would be told (shoal_request()), instead of leaving it to its
 * timeout.
 */
struct pending {
	uint64_t requester;      /* the request's sender */
	uint64_t responder;      /* its dest */
	uint64_t rid;
	uint64_t trace_id;
	uint32_t type;
	uint32_t gen;            /* the responder group's incarnation when it came */
	bool none;               /* no process of the responder's group ran then */
};

/*
 * The thread that watches the hub's fd while the bridge sleeps on its
 * mailbox's doorbell (sleep_until(), bridge.c). It waits for `asked` to move, then polls
 * the fd (and `stop_fd`), and rings the doorbell once the fd is readable;
 * then it waits for the next sleep. Never touches the hub or the ctx.
 */
struct watch {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t asked;                  /* sleeps the bridge began; under mu */
	bool quit;                       /* under mu */
	int hub_fd;
	int stop_fd;                     /* an eventfd: written at the bridge's end */
	struct shoal_doorbell *bell;     /* the mailbox's */
	bool running;
};

struct bridge {
	const struct shoal__bridge_opts *o;
	struct shoal__config *cfg;
	int host;
	struct shoal__link_hub *hub;     /* the UCP worker and listener of every link */
	struct shoal__link_hub_stats hub_seen;   /* as last seen */
	uint64_t told_refused;           /* connections refused when last told */
	_Atomic uint64_t ucx_said;       /* UCX log messages (bridge.c) */
	struct shoal_seg view_seg;       /* the link view (runtime/bridge/view.h) */
	struct shoal__links_hdr *view;   /* NULL: none (the bridge runs without) */
	struct peer *peers;
	uint32_t n_peers;
	struct peer **by_host;           /* the peer of each host index; NULL for this one */
	struct shoal__route_table *remote;   /* other hosts' routes; group = host index */
	const struct shoal_filter *remote_filters;   /* its filters */
	struct shoal__route_memo memo;   /* its last type matched */
	uint32_t *matches;
	uint32_t cap_matches;
	struct shoal_type *types;
	struct shoal_group *g;
	int gid;                         /* its group id */
	struct shoal_ctx *ctx;
	struct pending *pending;         /* PENDING_MAX; n_pending of them in use */
	uint32_t n_pending;
	bool putting;                    /* in shoal__bridge_put(): no other record is queued */
	bool holding;                    /* this turn left a peer's record held */
	uint64_t retry_ns;               /* how long a turn that holds one sleeps */
	uint64_t hub_polled;             /* when the loop last polled the hub */
	struct watch watch;
	struct counts n;
};

/* bridge.c */
__attribute__((format(printf, 3, 4)))
void shoal__bridge_say(const struct bridge *b, const struct peer *p, const char *fmt, ...);

/* bridge_view.c */
void shoal__bridge_view_open(struct bridge *b);
void shoal__bridge_view_write(const struct peer *p);
void shoal__bridge_view_write_hub(const struct bridge *b);
void shoal__bridge_view_close(struct bridge *b);
void shoal__bridge_tell(const struct bridge *b, struct peer *p);
void shoal__bridge_tell_hub(struct bridge *b);

/* bridge_in.c */
void shoal__bridge_note_down(struct bridge *b, const struct peer *p);
void shoal__bridge_untrack(struct bridge *b, uint64_t requester, uint64_t rid);
void shoal__bridge_take_records(struct bridge *b, struct peer *p);

/* bridge_out.c */
void shoal__bridge_put(struct bridge *b, struct peer *p, const struct shoal_envelope *env,
		       const void *data, uint32_t len);
void shoal__bridge_give_up(struct bridge *b, struct peer *p);
void shoal__bridge_on_message(struct shoal_actor *a, const struct shoal_msg *m);
uint32_t shoal__bridge_carry_run(void *user, const struct shoal__relay_run *r);
int shoal__bridge_remote_routes(struct bridge *b, struct shoal_err *err);

/* The host of group `g` of the file; -1 for the bridge or no group. */
static inline int shoal__bridge_host_of(const struct bridge *b, int g)
{
	return g >= 0 && (uint32_t)g < b->cfg->n_groups ? b->cfg->groups[g].host : -1;
}

#endif
