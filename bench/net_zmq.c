/* SPDX-License-Identifier: MIT */
/*
 * ZeroMQ, what users would otherwise pick, for shoal-bench-net: PUSH/PULL
 * for throughput and REQ/REP for the round trip, over TCP between the two
 * hosts, used as its documentation shows: one context per side (one I/O
 * thread, pinned with the side's process), blocking zmq_send() and
 * zmq_recv() of one message each, default high-water marks. ZeroMQ packs
 * small messages into its own batches on the wire; the API sends them one
 * by one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <zmq.h>

#include "bench/net_bench.h"

struct zmq_peer {
	struct net_side *s;
	void *ctx;
	void *sock;
};

static int zmq_fail(struct zmq_peer *z, const char *what)
{
	int err = zmq_errno();

	return net_fail(z->s, -(err ? err : EPROTO), "zmq: %s: %s", what, zmq_strerror(err));
}

/*
 * B binds, A connects once B is bound. Then one message from A, which B
 * receives before the clock starts, so that the connection is made
 * outside the timing (REQ/REP answer it too).
 */
static int zmq_setup(struct zmq_peer *z, struct net_side *s, int type)
{
	char ep[64], hello[8] = "hello";
	int ret = 0;

	memset(z, 0, sizeof(*z));
	z->s = s;
	snprintf(ep, sizeof(ep), "tcp://%s:%u", s->p->addr[1], (unsigned)s->p->port);
	z->ctx = zmq_ctx_new();
	if (z->ctx == NULL)
		ret = zmq_fail(z, "zmq_ctx_new");
	if (ret == 0 && (z->sock = zmq_socket(z->ctx, type)) == NULL)
		ret = zmq_fail(z, "zmq_socket");
	if (ret == 0 && s->side == 1 && zmq_bind(z->sock, ep) != 0)
		ret = zmq_fail(z, ep);
	net_meet(s, NET_ROUND_LISTENING);
	if (ret < 0)
		return ret;
	if (s->side == 0) {
		if (zmq_connect(z->sock, ep) != 0)
			return zmq_fail(z, ep);
		if (zmq_send(z->sock, hello, sizeof(hello), 0) < 0)
			return zmq_fail(z, "sending hello");
		if (type == ZMQ_REQ && zmq_recv(z->sock, hello, sizeof(hello), 0) < 0)
			return zmq_fail(z, "receiving hello");
		return 0;
	}
	if (zmq_recv(z->sock, hello, sizeof(hello), 0) < 0)
		return zmq_fail(z, "receiving hello");
	if (type == ZMQ_REP && zmq_send(z->sock, hello, sizeof(hello), 0) < 0)
		return zmq_fail(z, "answering hello");
	return 0;
}

/* Meet at NET_ROUND_DONE (B has everything), then drop what is left. */
static int zmq_close_all(struct zmq_peer *z, int ret)
{
	int linger = 0;

	if (ret == 0)
		net_meet(z->s, NET_ROUND_DONE);
	if (z->sock != NULL) {
		zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_close(z->sock);
	}
	if (z->ctx != NULL)
		zmq_ctx_term(z->ctx);
	return ret;
}

static int zmq_send_one(void *arg, const void *msg)
{
	struct zmq_peer *z = arg;
	int len = (int)z->s->p->payload;

	return zmq_send(z->sock, msg, (size_t)len, 0) == len ? 0 : zmq_fail(z, "zmq_send");
}

static int zmq_recv_one(void *arg, void *msg)
{
	struct zmq_peer *z = arg;
	int len = (int)z->s->p->payload;

	return zmq_recv(z->sock, msg, NET_PAYLOAD_MAX, 0) == len ? 0 : zmq_fail(z, "zmq_recv");
}

static int zmq_trip(void *arg, const void *msg, void *back)
{
	int ret = zmq_send_one(arg, msg);

	return ret == 0 ? zmq_recv_one(arg, back) : ret;
}

static int zmq_tput_a(struct net_side *s)
{
	struct zmq_peer z;
	unsigned char msg[NET_PAYLOAD_MAX];
	uint64_t seq = 0;
	bool last = false;
	int ret = zmq_setup(&z, s, ZMQ_PUSH);

	bench_msg_fill(msg, s->p->payload);
	if (ret == 0)
		net_side_ready(s);
	while (ret == 0 && !last) {
		last = net_time_up(s, seq);
		bench_msg_stamp(msg, s->p->payload, seq++ | (last ? BENCH_STOP : 0));
		ret = zmq_send_one(&z, msg);
	}
	return zmq_close_all(&z, ret);
}

static int zmq_tput_b(struct net_side *s)
{
	struct zmq_peer z;
	unsigned char msg[NET_PAYLOAD_MAX];
	uint64_t seq = 0;
	int ret = zmq_setup(&z, s, ZMQ_PULL), got = 0;

	if (ret == 0)
		net_side_ready(s);
	while (ret == 0 && got == 0) {
		ret = zmq_recv_one(&z, msg);
		if (ret == 0)
			got = bench_msg_check(msg, s->p->payload, seq++, &s->sink);
		if (got < 0)
			ret = net_fail(s, got, "zmq: message %llu out of order",
				       (unsigned long long)(seq - 1));
	}
	s->res->t_end = shoal__now_ns();
	s->res->msgs = seq;
	return zmq_close_all(&z, ret);
}

static int zmq_rtt_a(struct net_side *s)
{
	struct zmq_peer z;
	int ret = zmq_setup(&z, s, ZMQ_REQ);

	if (ret == 0)
		ret = net_ping(s, zmq_trip, &z);
	return zmq_close_all(&z, ret);
}

static int zmq_rtt_b(struct net_side *s)
{
	struct zmq_peer z;
	int ret = zmq_setup(&z, s, ZMQ_REP);

	if (ret == 0)
		ret = net_pong(s, zmq_recv_one, zmq_send_one, &z);
	return zmq_close_all(&z, ret);
}

const struct net_contender net_zmq = {
	.name = "zeromq",
	.what = "ZeroMQ over TCP: PUSH/PULL for throughput, REQ/REP for the round trip; "
		"blocking zmq_send()/zmq_recv(), one message each",
	.role = {
		[NET_TPUT] = { zmq_tput_a, zmq_tput_b },
		[NET_RTT] = { zmq_rtt_a, zmq_rtt_b },
	},
};
