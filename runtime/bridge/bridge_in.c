/* SPDX-License-Identifier: MIT */
/*
 * The bridge's incoming side (bridge_impl.h): records from peers written
 * into this host's system (shoal__bridge_take_records()), the requests
 * brought in watched until answered, and the host-down bits the router
 * reads.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "runtime/bridge/bridge_impl.h"
#include "shm/util.h"

#define ENV_BYTES sizeof(struct shoal_envelope)

/*
 * Tell the router (the mailbox's hosts_down, docs/hosts.md) whether p's
 * host has been away longer than hosts.down_after, or is back. The bit of
 * a restarted bridge stays as its predecessor left it until its own link
 * says otherwise.
 */
static_assert(SHOAL__MAX_HOSTS <= 64,
	      "hosts_down, and the hosts a message went to, have one bit a host");

void shoal__bridge_note_down(struct bridge *b, const struct peer *p)
{
	uint64_t bit = UINT64_C(1) << (p->h - b->cfg->hosts), set = 0, clear = 0, was, since;

	if (shoal__link_state(p->link, &since) == SHOAL__LINK_UP)
		clear = bit;
	else if (shoal__now_ns() - since > b->cfg->down_after_ns)
		set = bit;
	was = shoal__bridge_hosts_down(b->ctx, set, clear);
	if (((was & ~clear) | set) != was)
		shoal__bridge_say(b, p, "%s", set ? "down longer than hosts.down_after: sends to "
				  "its groups fail with -EHOSTDOWN" : "its host reachable again");
}

/* Watch request `env`, just brought in (struct pending). */
static void track(struct bridge *b, const struct shoal_envelope *env, uint32_t gen, bool none)
{
	if (b->n_pending == PENDING_MAX) {
		b->n.untracked++;
		return;
	}
	b->pending[b->n_pending++] = (struct pending){ env->sender, env->dest, env->request_id,
						       env->trace_id, env->type, gen, none };
}

/* Its response went back: stop watching it. */
void shoal__bridge_untrack(struct bridge *b, uint64_t requester, uint64_t rid)
{
	for (uint32_t i = 0; i < b->n_pending; i++)
		if (b->pending[i].rid == rid && b->pending[i].requester == requester) {
			b->pending[i] = b->pending[--b->n_pending];
			return;
		}
}

/*
 * A record from another host into this host's system (shoal__bridge_take_records()). A
 * request for a group none of whose processes runs is not written: its
 * requester is answered at once (check_requests()), as shoal_request()
 * answers a requester here.
 */
static int bring_in(struct bridge *b, struct shoal__relay *rl, const struct shoal_envelope *env,
		    const void *payload)
{
	uint32_t gen = 0;
	int running, ret;

	if (env->dest == SHOAL_ADDR_NONE)
		return shoal__send_routed_env(b->ctx, rl, env, payload);
	if (!(env->flags & SHOAL_ENV_REQUEST))
		return shoal__send_env(b->ctx, rl, env, payload);
	running = shoal__group_running(b->ctx, shoal_addr_group(env->dest), &gen);
	if (running == 0 && shoal__bridge_host_of(b, shoal_addr_group(env->dest)) == b->host) {
		track(b, env, 0, true);
		return 0;
	}
	ret = shoal__send_env(b->ctx, rl, env, payload);
	if (ret == 0)
		track(b, env, gen, false);
	return ret;
}

/*
 * Answer the requests whose responder's process ended (or never ran) with
 * -EOWNERDEAD, through the link to the requester's host. Not while a
 * record waits for room on a link (b->putting): records go in order.
 */
static void check_requests(struct bridge *b)
{
	for (uint32_t i = 0; i < b->n_pending;) {
		struct pending *q = &b->pending[i];
		int32_t e = -EOWNERDEAD;
		uint32_t gen = 0;
		int h = shoal__bridge_host_of(b, shoal_addr_group(q->requester));
		struct shoal_envelope env = { .type = q->type, .len = sizeof(e),
					      .sender = q->responder, .dest = q->requester,
					      .trace_id = q->trace_id, .request_id = q->rid,
					      .send_ns = shoal__now_ns(),
					      .flags = SHOAL_ENV_RESPONSE | SHOAL_ENV_ERROR };

		if (!q->none &&
		    shoal__group_running(b->ctx, shoal_addr_group(q->responder), &gen) == 1 &&
		    gen == q->gen) {
			i++;
			continue;
		}
		*q = b->pending[--b->n_pending];
		if (h < 0 || h == b->host || b->by_host[h] == NULL)
			continue;
		b->n.ended++;
		shoal__bridge_put(b, b->by_host[h], &env, &e, sizeof(e));
	}
}

/*
 * Records from p's peer, put into this host's system with their envelope
 * as it was: a routed one (dest SHOAL_ADDR_NONE) into the bridge's
 * uplink, a direct message or a response into its destination's mailbox.
 * A record there is no room for yet (or whose direct link is being
 * opened) stays held, so the link's credit pushes back on the peer; one
 * that is not a message of this system (DESIGN invariant 1: a peer's bytes
 * are checked like a ring's) is dropped and counted. Those for one ring
 * are published together (relay.h), at most RELAY_MAX at a time, so that
 * the consumer starts on the first while the rest are written.
 */
#define RELAY_MAX 256u
#define TAKE_MAX 64u   /* records peeked from a link at once */

void shoal__bridge_take_records(struct bridge *b, struct peer *p)
{
	struct shoal__relay rl = { 0 };
	struct shoal__frame_rec r[TAKE_MAX];
	bool held = false;
	uint32_t n, i;

	shoal__bridge_note_down(b, p);
	while (!held && (n = shoal__link_recv_peek_n(p->link, r, TAKE_MAX)) > 0) {
		for (i = 0; i < n; i++) {
			const unsigned char *payload = (const unsigned char *)r[i].data + ENV_BYTES;
			struct shoal_envelope env;
			int ret = -EPROTO;

			if (r[i].len >= sizeof(env)) {
				memcpy(&env, r[i].data, sizeof(env));
				if (env.len == r[i].len - sizeof(env))
					ret = bring_in(b, &rl, &env, payload);
			}
			if (ret == -EAGAIN) {
				b->holding = held = true;
				break;
			}
			if (ret == 0) {
				b->n.received++;
			} else if (b->n.refused_in++ == 0) {
				shoal__bridge_say(b, p, "a record not sent on here: %s",
						  strerror(-ret));
			}
			if (rl.k >= RELAY_MAX)
				shoal__relay_publish(b->ctx, &rl);
		}
		/* What was handed on (or refused) leaves the link; a record
		 * held stays first. */
		if (i > 0)
			shoal__link_recv_release_n(p->link, i);
	}
	shoal__relay_publish(b->ctx, &rl);
	if (!b->putting && b->n_pending > 0)
		check_requests(b);
}
