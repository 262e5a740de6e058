/* SPDX-License-Identifier: MIT */
/*
 * The bridge's outgoing side (bridge_impl.h): the mailbox's messages queued
 * on the links, a handler call each (shoal__bridge_on_message()) or a run
 * at a time (shoal__bridge_carry_run()), routed copies matched against the
 * routes of the other hosts' groups (shoal__bridge_remote_routes()), and
 * what a host down too long never got counted lost.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/bridge/bridge_impl.h"
#include "shm/util.h"

/* A record counted lost to its host down past hosts.down_after, and said
 * (the first of them). */
static void lose(struct bridge *b, struct peer *p, uint64_t n)
{
	if (b->n.lost_down == 0)
		shoal__bridge_say(b, p, "%llu record%s not sent: the host is down past "
				  "hosts.down_after", (unsigned long long)n, n == 1 ? "" : "s");
	p->lost_down += n;
	b->n.lost_down += n;
}

/* p's link down longer than hosts.down_after: its records are given up. */
static bool gone(const struct bridge *b, const struct peer *p)
{
	uint64_t since;

	return shoal__link_state(p->link, &since) != SHOAL__LINK_UP &&
	       shoal__now_ns() - since > b->cfg->down_after_ns;
}

/* p's host gone: what its link never sent (its backlog) is given up,
 * counted lost, no longer sent. */
void shoal__bridge_give_up(struct bridge *b, struct peer *p)
{
	uint64_t n;

	if (!gone(b, p))
		return;
	n = shoal__link_drop_unsent(p->link);
	if (n == 0)
		return;
	b->n.forwarded -= n;
	lose(b, p, n);
}

/* The record, `env` then `len` bytes of `data`, written where a link
 * reserved room for it. */
static inline void rec_put(struct bridge *b, unsigned char *at, const struct shoal_envelope *env,
			   const void *data, uint32_t len)
{
	memcpy(at, env, sizeof(*env));
	memcpy(at + sizeof(*env), data, len);
	b->n.forwarded++;
}

/* shoal__bridge_put()'s wait for room on p's link, after its own try found none
 * (out of line: the common put finds room at once): where the record goes,
 * or NULL when p's host was given up meanwhile (the record counted lost). */
static __attribute__((noinline)) unsigned char *put_wait(struct bridge *b, struct peer *p,
							 uint32_t rec)
{
	unsigned char *at;

	b->putting = true;
	do {
		uint64_t now;

		if (gone(b, p)) {
			shoal__bridge_give_up(b, p);
			lose(b, p, 1);
			at = NULL;
			break;
		}
		now = shoal__now_ns();
		for (uint32_t i = 0; i < b->n_peers; i++) {
			shoal__link_poll(b->peers[i].link, now);
			shoal__bridge_take_records(b, &b->peers[i]);
			/* The tools see the wait (credit_waits, in_flight). */
			shoal__bridge_view_write(&b->peers[i]);
		}
		if (shoal__link_arm(p->link) == 0) {
			struct pollfd pfd = { .fd = shoal__link_fd(p->link), .events = POLLIN };

			poll(&pfd, 1, 1);
		}
	} while ((at = shoal__link_reserve(p->link, rec, 0)) == NULL);
	b->putting = false;
	return at;
}

/*
 * Queue one record, `env` then `len` bytes of `data`, on p's link, written
 * once, straight into its queue (shoal__link_reserve()): at once while the
 * link's credit or its backlog has room. Only when p's backlog is full
 * does the record wait here: every link is polled meanwhile (their peers
 * may be waiting on us, and frames go out as credit comes), records are
 * taken from them (two bridges that wait for each other's credit both
 * release what they hold, so both go on), until p's link takes it, or p's
 * host has been down longer than hosts.down_after: then the record is
 * counted lost (`lost_down`) and said, as a send to that host fails.
 * Sleeps on the link's fd between polls, 1 ms at most. The caller checked
 * that the record fits a link (shoal__link_max_record()).
 */
void shoal__bridge_put(struct bridge *b, struct peer *p, const struct shoal_envelope *env,
		       const void *data, uint32_t len)
{
	uint32_t rec = (uint32_t)sizeof(*env) + len;
	unsigned char *at = shoal__link_reserve(p->link, rec, 0);

	if (SHOAL_UNLIKELY(at == NULL) && (at = put_wait(b, p, rec)) == NULL)
		return;
	rec_put(b, at, env, data, len);
	shoal__link_commit(p->link);
}

/* Queue what p's link holds reserved for the run (run_slot()), if anything. */
static inline void run_close(struct peer *p)
{
	if (p->run.k > 0)
		shoal__link_commit_n(p->link, p->run.k);
	p->run.k = p->run.got = 0;
}

/*
 * Where the next record of `rec` bytes of a run goes on p's link: in the
 * room reserved for the run there, or, when there is none or it is full,
 * in room reserved anew for up to `want` records (what the run has left),
 * as shoal__link_reserve_n() gives it. NULL: the link has no room now.
 * What a link's reservation holds is queued at the run's end, or before
 * anything else is done with the links (runs_commit()).
 */
static inline unsigned char *run_slot(struct peer *p, uint32_t rec, uint32_t want)
{
	if (p->run.k == p->run.got) {
		run_close(p);
		p->run.at = shoal__link_reserve_n(p->link, rec, 0, want, &p->run.got);
		if (p->run.at == NULL)
			return NULL;
		p->run.stride = shoal__frame_rec_size(rec);
	}
	return p->run.at + (size_t)p->run.stride * p->run.k++;
}

/* Queue what the run wrote into its reservations on every link. */
static void runs_commit(struct bridge *b)
{
	for (uint32_t i = 0; i < b->n_peers; i++)
		run_close(&b->peers[i]);
}

/*
 * shoal__bridge_put() for a record of a run of `want` more records: into
 * the run's reservation on p's link; when the link has no room, what the
 * run reserved is queued first and the record waits in shoal__bridge_put().
 */
static inline void put_run(struct bridge *b, struct peer *p, const struct shoal_envelope *env,
			   const void *data, uint32_t len, uint32_t want)
{
	unsigned char *at = run_slot(p, (uint32_t)sizeof(*env) + len, want);

	if (SHOAL_UNLIKELY(at == NULL)) {
		runs_commit(b);
		shoal__bridge_put(b, p, env, data, len);
		return;
	}
	rec_put(b, at, env, data, len);
}

/*
 * The peer that carries a direct record for group `g` of `len` bytes
 * (envelope and payload): that group's host's, if it is another host and
 * the record fits a link; else NULL.
 */
static inline struct peer *direct_peer(const struct bridge *b, int g, uint32_t len)
{
	int h = shoal__bridge_host_of(b, g);

	if (h < 0 || h == b->host || len > shoal__link_max_record(b->cfg->link.window))
		return NULL;
	return b->by_host[h];
}

/*
 * A direct message or a response for a group of another host (the sender
 * sent it to this bridge, runtime/data/send.c): to that group's host, its
 * envelope as it is.
 */
static void carry_direct(struct bridge *b, const struct shoal_msg *m)
{
	struct peer *p = direct_peer(b, shoal_addr_group(m->env->dest),
				     (uint32_t)sizeof(*m->env) + m->len);

	if (p == NULL) {
		/* Only a sender that skipped send.c's checks gets here. */
		b->n.no_group++;
		return;
	}
	if (m->env->flags & SHOAL_ENV_RESPONSE)
		shoal__bridge_untrack(b, m->env->dest, m->env->request_id);
	b->n.direct++;
	shoal__bridge_put(b, p, m->env, m->data, m->len);
}

/*
 * A routed message, the copy this host's router addressed to the bridge:
 * to each other host some of whose groups' routes match it, once a host,
 * with its envelope as its producer wrote it. `data` is its payload, `len`
 * bytes. `want`: 0 for a message alone, else the records its run has left
 * from it on (put_run()).
 */
static inline void carry_routed(struct bridge *b, const struct shoal_envelope *e,
				const void *data, uint32_t len, uint32_t want)
{
	uint32_t n;
	const uint32_t *idx;
	struct shoal_envelope env;
	uint64_t sent = 0;

	/* Sent by a group of another host (or by no group of the file):
	 * it came through a bridge, and goes to none again. */
	if (shoal__bridge_host_of(b, shoal_addr_group(e->sender)) != b->host) {
		b->n.returned++;
		return;
	}
	n = shoal__route_match_memo(b->remote, &b->memo, e->type, data, len, b->matches,
				    b->cap_matches, &idx);
	if (n == 0) {
		b->n.no_host++;
		return;
	}
	if ((uint32_t)sizeof(*e) + len > shoal__link_max_record(b->cfg->link.window)) {
		/* A type the file does not declare (declared ones fit: config.c). */
		b->n.lost_down++;
		return;
	}
	/* As its producer wrote it into its uplink, before this host's
	 * router addressed the copy to the bridge. */
	env = *e;
	env.dest = SHOAL_ADDR_NONE;
	env.flags &= ~SHOAL_ENV_ROUTED;
	for (uint32_t i = 0; i < n; i++) {
		uint16_t h = b->remote_filters[idx[i]].group;

		if ((sent >> h & 1u) || b->by_host[h] == NULL)
			continue;
		sent |= UINT64_C(1) << h;
		if (want > 0)
			put_run(b, b->by_host[h], &env, data, len, want);
		else
			shoal__bridge_put(b, b->by_host[h], &env, data, len);
	}
}

void shoal__bridge_on_message(struct shoal_actor *a, const struct shoal_msg *m)
{
	struct bridge *b = a->user;

	if (shoal_addr_group(m->env->dest) != b->gid)
		carry_direct(b, m);
	else
		carry_routed(b, m->env, m->data, m->len, 0);
}

/*
 * A run of the mailbox's records (runtime/data/relay.h), carried here
 * without a handler call each, while each is a routed copy for the bridge
 * (carry_routed(), its wait in the mailbox measured as a handler's is) or
 * a direct message (not a response) for a group of another host whose
 * link takes it at once (as carry_direct()). Stops at the first record
 * that is anything else, or that would wait: shoal__bridge_on_message() has it. The
 * envelope is copied out and checked, then that copy goes on, so what goes
 * is what was checked. The run's records for one link are reserved and
 * queued together (run_slot()), before it returns.
 */
uint32_t shoal__bridge_carry_run(void *user, const struct shoal__relay_run *r)
{
	struct bridge *b = user;
	const unsigned char *rec = r->data;
	uint32_t plen = r->len - (uint32_t)sizeof(struct shoal_envelope), i;
	int last = -1;
	struct peer *p = NULL;

	for (i = 0; i < r->n; i++, rec += r->stride) {
		struct shoal_envelope env;
		unsigned char *at;
		int g;

		shoal_store_relaxed(r->inflight, r->mark + (uint64_t)i * r->stride);
		memcpy(&env, rec, sizeof(env));
		if (!shoal__env_sane(&env, r->len))
			break;
		g = shoal_addr_group(env.dest);
		if (g == b->gid) {
			/* The router's copy: to the bridge as a group, no
			 * request (a request to the bridge is answered). */
			if ((env.flags & (SHOAL_ENV_ROUTED | SHOAL_ENV_REQUEST | SHOAL_ENV_RESPONSE)) !=
				    SHOAL_ENV_ROUTED ||
			    shoal_addr_slot(env.dest) < SHOAL_SLOT_ALL)
				break;
			shoal__relay_latency(b->ctx, env.send_ns);
			carry_routed(b, &env, rec + sizeof(env), plen, r->n - i);
			continue;
		}
		if (env.flags & SHOAL_ENV_RESPONSE)
			break;
		if (g != last) {
			if ((p = direct_peer(b, g, r->len)) == NULL)
				break;
			last = g;
		}
		if ((at = run_slot(p, r->len, r->n - i)) == NULL)
			break;
		rec_put(b, at, &env, rec + sizeof(env), plen);
		b->n.direct++;
	}
	runs_commit(b);
	return i;
}

/* The routes of groups on other hosts, each naming its group's host. */
int shoal__bridge_remote_routes(struct bridge *b, struct shoal_err *err)
{
	const struct shoal__config *c = b->cfg;
	struct shoal_filter *f = calloc(c->n_routes + 1, sizeof(*f));
	uint32_t n = 0;
	int ret;

	if (f == NULL)
		return shoal__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_routes; i++) {
		const struct shoal__cfg_route *r = &c->routes[i];

		if (shoal__config_runs(c, b->host, r->f.group) || r->f.mode == SHOAL_ROUTE_DISCARD)
			continue;
		f[n] = r->f;
		f[n++].group = (uint16_t)c->groups[r->f.group].host;
	}
	ret = shoal__route_build(&b->remote, f, n, SHOAL__ROUTE_INDEXED, err);
	free(f);
	if (ret < 0)
		return ret;
	b->remote_filters = shoal__route_filters(b->remote);
	b->memo = (struct shoal__route_memo)SHOAL__ROUTE_MEMO_INIT;
	b->cap_matches = shoal__route_max_matches(b->remote) + 1;
	b->matches = calloc(b->cap_matches, sizeof(*b->matches));
	b->types = calloc(c->n_types + 1, sizeof(*b->types));
	b->pending = calloc(PENDING_MAX, sizeof(*b->pending));
	if (b->matches == NULL || b->types == NULL || b->pending == NULL)
		return shoal__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_types; i++)
		b->types[i] = (struct shoal_type){ c->types[i].id, c->types[i].max_size,
						   c->types[i].name };
	return 0;
}
