/* SPDX-License-Identifier: MIT */
/*
 * Request and response: a request is a direct send with a request id; the
 * requester then polls only the rings the response can come on (and keeps
 * other messages aside) until it arrives, the responder's incarnation ends,
 * the deadline passes or the router goes.
 *
 * A responder of another host (docs/hosts.md): the request goes through
 * this host's bridge, and the response comes back on a ring the bridge
 * writes. Its incarnations are its host's, unknown here: the wait ends
 * with the response, the deadline, or its host marked down (-EHOSTDOWN:
 * its link down past hosts.down_after), which the router tells by marking
 * the group failed and waking us.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/doorbell.h>
#include <shoal/group.h>

#include "runtime/data/relay.h"
#include "runtime/data/worker.h"
#include "shm/util.h"

/* ---- request / response ------------------------------------------------------ */

/*
 * A request in flight. The response comes direct, on a ring the responder's
 * group writes, so only those rings (and those of this process's other
 * workers, see reads()) are drained while it waits: their other messages
 * are set aside for later, and every other ring stays as it is,
 * back-pressuring its senders, so the worker's memory does not grow with
 * their traffic.
 */
struct req_wait {
	struct shoal_ctx *ctx;
	const struct shoal__reg_group *rg;
	uint32_t gen;
	int group;        /* whose ring brings the response: the responder's, or the bridge's */
	bool remote;      /* the responder is of another host */
};

static bool responder_gone(const struct req_wait *rw)
{
	/* Relaxed: the router updates these when the process dies or comes
	 * back, or its host is marked down, and rings our doorbell right
	 * after. */
	if (rw->remote)
		return shoal_load_relaxed(&rw->rg->state) == SHOAL_GROUP_FAILED;
	return shoal_load_relaxed(&rw->rg->state) != SHOAL_GROUP_RUNNING ||
	       shoal_load_relaxed(&rw->rg->gen) != rw->gen;
}

/* A responder of another host: checked as a send to it would be; the
 * response comes through the bridge. 0 or -errno. */
static int remote_responder(struct shoal_ctx *ctx, struct req_wait *rw, struct send_wait *sw)
{
	/* Relaxed: router-written before any group process started. */
	uint32_t b = shoal_load_relaxed(&ctx->g->reg.hdr->bridge);

	switch (shoal_load_relaxed(&rw->rg->state)) {
	case SHOAL_GROUP_EMPTY:
		return -EINVAL;
	case SHOAL_GROUP_FAILED:
		return -EHOSTDOWN;   /* its host is marked down */
	default:
		break;
	}
	if (b == 0 || b > SHOAL_MAX_GROUPS)
		return -EHOSTUNREACH;
	rw->remote = true;
	rw->group = (int)b - 1;
	sw->incarnation = false;
	return 0;
}

static bool response_ready(void *arg)
{
	struct req_wait *rw = arg;

	return shoal__rings_ready_from(rw->ctx, rw->group) || responder_gone(rw);
}

int shoal_request(struct shoal_ctx *ctx, uint64_t dest, uint32_t type, const void *buf,
		  uint32_t len, int64_t timeout_ns, struct shoal_reply *reply)
{
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : shoal__now_ns() + (uint64_t)timeout_ns;
	struct req_wait rw = { ctx, NULL, 0, 0, false };
	struct send_wait sw = { NULL, UINT64_MAX, true, 0 };
	int dg = shoal_addr_group(dest), ret;
	uint64_t rid, remote_spin;

	if (ctx->wait_rid != 0)
		return -EDEADLK;   /* one request at a time per worker */
	if (reply == NULL || dg < 0 || dg >= SHOAL_MAX_GROUPS)
		return -EINVAL;
	reply->from_responder = false;
	rw.rg = &ctx->g->reg.groups[dg];
	rw.group = dg;
	rw.gen = shoal_load_relaxed(&rw.rg->gen);
	/* Relaxed: router-written when the group was declared. */
	if (shoal_load_relaxed(&rw.rg->remote_host) != 0) {
		ret = remote_responder(ctx, &rw, &sw);
		if (ret < 0)
			return ret;
	} else {
		switch (shoal_load_relaxed(&rw.rg->state)) {
		case SHOAL_GROUP_RUNNING:
			break;
		case SHOAL_GROUP_EMPTY:
			return -EINVAL;   /* no such group, as send_to() says */
		case SHOAL_GROUP_FAILED:
			return -EHOSTDOWN;
		default:
			return -EOWNERDEAD;
		}
	}
	rid = (uint64_t)ctx->w << 48 | (ctx->next_rid++ & ((UINT64_C(1) << 48) - 1));
	/* Waiting for room in the responder's ring counts against the
	 * timeout and ends with the responder's incarnation, as the wait for
	 * the response below does. */
	sw.deadline = deadline;
	sw.gen = rw.gen;
	ret = shoal__send_direct(ctx, dest, type, buf, len, &sw, SHOAL_ENV_REQUEST, rid);
	if (ret < 0)
		return ret;
	ctx->wait_rid = rid;
	ctx->wait_reply = reply;
	ctx->wait_done = false;
	shoal__pin_message(ctx);
	/* Relaxed: router-written before any group process started. */
	remote_spin = rw.remote ? shoal_load_relaxed(&ctx->g->reg.hdr->remote_spin_ns) : 0;
	for (;;) {
		uint64_t now;
		int64_t slice;

		shoal__poll_rings(ctx, UINT32_MAX, rw.group);
		if (ctx->wait_done) {
			ret = ctx->wait_status;
			break;
		}
		if (responder_gone(&rw)) {
			ret = rw.remote ? -EHOSTDOWN : -EOWNERDEAD;
			break;
		}
		now = shoal__now_ns();
		if (now >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		/* Without a router nothing tells us the responder died: a
		 * request with no timeout would wait forever. */
		if (shoal__router_gone(ctx->g)) {
			ret = -ESHUTDOWN;
			break;
		}
		slice = (int64_t)(deadline - now < SLEEP_SLICE_NS ? deadline - now : SLEEP_SLICE_NS);
		/* An answer from another host takes tens of microseconds: spin
		 * for it as long as the bridges do, yielding the CPU, rather
		 * than sleep (a halted vCPU's wake-up is one of the round
		 * trip's largest parts, docs/hosts.md). */
		if (remote_spin > 0)
			shoal_doorbell_yield_wait(&ctx->mw->in_db, remote_spin, response_ready, &rw,
						  slice);
		else
			shoal_doorbell_spin_yield_wait(&ctx->mw->in_db, ctx->g->spin_ns,
						       ctx->g->yield_ns, response_ready, &rw, slice);
	}
	ctx->wait_rid = 0;
	ctx->wait_reply = NULL;
	return ret;
}

int shoal__group_running(const struct shoal_ctx *ctx, int group, uint32_t *gen)
{
	const struct shoal__reg_group *rg;

	/* A3: pairs with R3 in registry.c shoal__declare_group(). */
	if (group < 0 || group >= SHOAL_MAX_GROUPS ||
	    (uint32_t)group >= shoal_load_acquire(&ctx->g->reg.hdr->n_groups))
		return -EINVAL;
	rg = &ctx->g->reg.groups[group];
	/* Relaxed: as responder_gone() reads them. */
	*gen = shoal_load_relaxed(&rg->gen);
	return shoal_load_relaxed(&rg->state) == SHOAL_GROUP_RUNNING;
}

/* A response to the message the running handler was handed: it needs no
 * -ECANCELED for it (poll.c invoke()). */
static void note_responded(struct shoal_ctx *ctx, const struct shoal_msg *req)
{
	if (ctx->cur_msg != NULL && req->env == ctx->cur_msg->m.env)
		ctx->responded = true;
}

int shoal_respond(struct shoal_ctx *ctx, const struct shoal_msg *req, uint32_t type,
		  const void *buf, uint32_t len)
{
	struct send_wait sw = WAIT_FOREVER;
	int ret;

	if (req == NULL || !(req->env->flags & SHOAL_ENV_REQUEST))
		return -EINVAL;
	ret = shoal__send_direct(ctx, req->env->sender, type, buf, len, &sw, SHOAL_ENV_RESPONSE,
			  req->env->request_id);
	note_responded(ctx, req);
	return ret;
}

int shoal_respond_error(struct shoal_ctx *ctx, const struct shoal_msg *req, int err)
{
	int32_t e = err < 0 ? err : -EINVAL;
	struct send_wait sw = WAIT_FOREVER;
	int ret;

	if (req == NULL || !(req->env->flags & SHOAL_ENV_REQUEST))
		return -EINVAL;
	ret = shoal__send_direct(ctx, req->env->sender, req->env->type, &e, sizeof(e), &sw,
			  SHOAL_ENV_RESPONSE | SHOAL_ENV_ERROR, req->env->request_id);
	note_responded(ctx, req);
	return ret;
}
