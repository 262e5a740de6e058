/* SPDX-License-Identifier: MIT */
/*
 * Shoal's link layer alone (runtime/bridge/link.c) for shoal-bench-net: one
 * link end per host, driven as a bridge's loop drives it, with nothing of
 * the bridge around it (no rings, no routing). What separates this row from
 * `ucx-batched` is what the link adds to UCX: record headers, sequence
 * numbers, the copy of every record into its send queue (frames are
 * gathered from there), the receive side's hold on UCX's buffers (or one
 * copy per frame when UCX cannot leave one), acks and credits.
 *
 * The link's options are its defaults except where a default cannot hold
 * the benchmark: max_record is NET_PAYLOAD_MAX (the default, the largest
 * message type, does not fit the default window), flush_bytes is the
 * run's frame size (`--frame`), so that the link's frames are as large as
 * `ucx-batched`'s (its record and frame headers included), and transports
 * is "tcp". The link has no option for UCX's devices: UCX_NET_DEVICES is
 * set in the side's environment, which ucp_config_read() reads, as
 * net_ucx.c sets it in its configuration.
 *
 * Throughput: A queues records with shoal__link_send(), and on -EAGAIN (no
 * credit: B has not acked enough) polls the link until it takes the
 * record; it also polls once every POLL_EVERY records, as a
 * bridge polls its link between bursts from its rings. B polls, then
 * peeks, checks and releases every record it holds. After the last record
 * A flushes and polls until every record is acked: nothing is in flight
 * when the sides meet.
 *
 * Round trip: one link both ways, as two bridges share one link per pair of
 * hosts. A sends one record and flushes it at once (not at the link's flush
 * deadline, 50 µs, which a bridge pays when it does not flush), then polls
 * until the answer is held; B answers the same way. An ack rides on the
 * next data frame.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/net_bench.h"
#include "runtime/bridge/link.h"

/* The sender polls at least once per this many records. */
#define POLL_EVERY 64u
/* How long connecting and the final acks may take before a side gives up. */
#define SETUP_NS (UINT64_C(10) * 1000000000)

struct link_peer {
	struct net_side *s;
	struct shoal__link *l;
	/* Ping-pong: records sent and taken. net_ping() and net_pong() check
	 * the sequence numbers themselves; these check the tags and each
	 * direction's own order. */
	uint64_t sent, got;
};

static int link_poll(void *arg)
{
	struct link_peer *k = arg;

	shoal__link_poll(k->l, shoal__now_ns());
	return 0;
}

/* Poll until the link is UP (the HELLO exchanged both ways). */
static int link_wait_up(struct link_peer *k)
{
	uint64_t limit = shoal__now_ns() + SETUP_NS;
	struct shoal__link_stats st;

	for (;;) {
		link_poll(k);
		shoal__link_stats(k->l, &st);
		if (st.state == SHOAL__LINK_UP)
			return 0;
		if (shoal__now_ns() > limit)
			return net_fail(k->s, -ETIMEDOUT, "link: not up after 10 s (state %u, "
					"%llu connections dropped, %llu refused: %.80s)", st.state,
					(unsigned long long)st.broken,
					(unsigned long long)st.refused, st.last_refusal.msg);
	}
}

/*
 * B listens, A connects once B listens; each polls until its end is UP,
 * then keeps polling at the ready round until the other's is: a side
 * whose end is UP may still hold its HELLO in UCX's queue, and the other
 * never gets it if the first stops polling (the other then drops the
 * connection after dead_ns, again and again).
 */
static int link_setup(struct link_peer *k, struct net_side *s)
{
	char addr[32];
	struct shoal__link_opts o = {
		.role = s->side == 0 ? SHOAL__LINK_CONNECT : SHOAL__LINK_LISTEN,
		.addr = addr,
		.transports = "tcp",
		.max_record = NET_PAYLOAD_MAX,
		.flush_bytes = s->p->frame,
	};
	struct shoal_err err;
	int ret = 0;

	memset(k, 0, sizeof(*k));
	k->s = s;
	snprintf(addr, sizeof(addr), "%s:%u", s->p->addr[1], (unsigned)s->p->port);
	if (setenv("UCX_NET_DEVICES", s->p->ifname[s->side], 1) < 0)
		ret = net_fail(s, -errno, "link: setenv UCX_NET_DEVICES");
	if (ret == 0 && s->side == 1 && (ret = shoal__link_create(&k->l, &o, &err)) < 0)
		net_fail(s, ret, "link: %.120s", err.msg);
	net_meet(s, NET_ROUND_LISTENING);
	if (ret < 0)
		return ret;
	if (s->side == 0 && (ret = shoal__link_create(&k->l, &o, &err)) < 0)
		return net_fail(s, ret, "link: %.120s", err.msg);
	s->ready_progress = link_poll;
	s->ready_arg = k;
	return link_wait_up(k);
}

/* Meet at NET_ROUND_DONE, polling (the other side may wait for an ack),
 * then destroy the link. */
static int link_close(struct link_peer *k, int ret)
{
	if (ret == 0 && k->l != NULL)
		ret = net_meet_progress(k->s, NET_ROUND_DONE, link_poll, k);
	if (k->l != NULL)
		shoal__link_destroy(k->l);
	return ret;
}

/* Queue one record, polling while the link refuses it for credit. */
static int link_put(struct link_peer *k, const void *msg, uint32_t len, uint16_t tag)
{
	int ret;

	while ((ret = shoal__link_send(k->l, msg, len, tag)) == -EAGAIN)
		link_poll(k);
	return ret < 0 ? net_fail(k->s, ret, "link: send: %s", strerror(-ret)) : 0;
}

/* Flush what is queued now, polling while every frame buffer is in flight. */
static void link_push(struct link_peer *k)
{
	while (shoal__link_flush(k->l) == -EAGAIN)
		link_poll(k);
}

/* ---- throughput ---- */

/* Side A: records until the time is up, then every one acked. */
static int link_tput_send(struct link_peer *k)
{
	uint32_t payload = k->s->p->payload;
	unsigned char msg[NET_PAYLOAD_MAX];
	struct shoal__link_stats st;
	uint64_t seq = 0, limit;
	bool last = false;
	int ret = 0;

	bench_msg_fill(msg, payload);
	net_side_ready(k->s);
	while (!last && ret == 0) {
		last = net_time_up(k->s, seq);
		bench_msg_stamp(msg, payload, seq | (last ? BENCH_STOP : 0));
		ret = link_put(k, msg, payload, (uint16_t)seq);
		if (++seq % POLL_EVERY == 0)
			link_poll(k);
	}
	if (ret < 0)
		return ret;
	link_push(k);
	limit = shoal__now_ns() + SETUP_NS;
	do {
		link_poll(k);
		shoal__link_stats(k->l, &st);
		if (shoal__now_ns() > limit)
			return net_fail(k->s, -ETIMEDOUT, "link: %llu of %llu records acked in 10 s",
					(unsigned long long)st.acked, (unsigned long long)seq);
	} while (st.acked != st.next_seq);
	return 0;
}

/* Take one held record: its length, tag and bytes checked, then released.
 * Returns 0, 1 for the producer's last record, -EAGAIN with none held, or
 * a failure said with net_fail(). */
static int link_take(struct link_peer *k, uint64_t *expect, void *copy)
{
	uint32_t payload = k->s->p->payload;
	struct shoal__frame_rec r;
	int ret = shoal__link_recv_peek(k->l, &r);

	if (ret < 0)
		return ret;
	if (r.len != payload || r.tag != (uint16_t)*expect)
		return net_fail(k->s, -EBADMSG, "link: record %llu: %u bytes, tag %u",
				(unsigned long long)*expect, r.len, r.tag);
	ret = bench_msg_check(r.data, payload, *expect, &k->s->sink);
	if (ret < 0)
		return net_fail(k->s, ret, "link: record %llu is not the one sent",
				(unsigned long long)*expect);
	if (copy != NULL)
		memcpy(copy, r.data, payload);
	shoal__link_recv_release(k->l);
	(*expect)++;
	return ret;
}

static int link_tput_recv(struct link_peer *k)
{
	uint64_t expect = 0;
	int ret = 0;

	net_side_ready(k->s);
	while (ret != 1) {
		link_poll(k);
		while ((ret = link_take(k, &expect, NULL)) == 0)
			;
		if (ret != -EAGAIN && ret != 1)
			return ret;
	}
	k->s->res->t_end = shoal__now_ns();
	k->s->res->msgs = expect;
	return 0;
}

/* ---- round trip ---- */

/* Poll until the next record is held, then take it into msg. */
static int link_wait_take(struct link_peer *k, uint64_t *expect, void *msg)
{
	int ret;

	while ((ret = link_take(k, expect, msg)) == -EAGAIN)
		link_poll(k);
	return ret < 0 ? ret : 0;
}

static int link_echo_send(void *arg, const void *msg)
{
	struct link_peer *k = arg;
	int ret = link_put(k, msg, k->s->p->payload, (uint16_t)k->sent);

	if (ret == 0) {
		k->sent++;
		link_push(k);
	}
	return ret;
}

static int link_echo_recv(void *arg, void *msg)
{
	struct link_peer *k = arg;

	return link_wait_take(k, &k->got, msg);
}

static int link_trip(void *arg, const void *msg, void *back)
{
	int ret = link_echo_send(arg, msg);

	return ret < 0 ? ret : link_echo_recv(arg, back);
}

static int link_ping(struct link_peer *k)
{
	return net_ping(k->s, link_trip, k);
}

static int link_pong(struct link_peer *k)
{
	return net_pong(k->s, link_echo_recv, link_echo_send, k);
}

/* ---- the roles ---- */

/* Set the link up, run the side's part, meet and tear down. */
static int link_role(struct net_side *s, int (*part)(struct link_peer *k))
{
	struct link_peer k;
	int ret = link_setup(&k, s);

	if (ret == 0)
		ret = part(&k);
	return link_close(&k, ret);
}

static int link_tput_a(struct net_side *s)
{
	return link_role(s, link_tput_send);
}

static int link_tput_b(struct net_side *s)
{
	return link_role(s, link_tput_recv);
}

static int link_rtt_a(struct net_side *s)
{
	return link_role(s, link_ping);
}

static int link_rtt_b(struct net_side *s)
{
	return link_role(s, link_pong);
}

const struct net_contender net_link = {
	.name = "shoal-link",
	.what = "Shoal's link layer alone (runtime/bridge/link.c) over UCP on TCP: records "
		"queued with shoal__link_send(), framed up to the frame size (flush_bytes), "
		"acked on release, bounded by its 1 MiB credit window; ping-pong over the one "
		"link both ways, each record flushed at once",
	.batched = true,
	.role = {
		[NET_TPUT] = { link_tput_a, link_tput_b },
		[NET_RTT] = { link_rtt_a, link_rtt_b },
	},
};
