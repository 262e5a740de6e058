/* SPDX-License-Identifier: MIT */
/*
 * UCX alone: the transport's limit for shoal-bench-net. A minimal UCP
 * program written for the benchmark: one context and one worker per side
 * (thread mode single, the worker progressed by the side's only thread),
 * TCP only, on the host's end of the veth pair; B listens on a socket
 * address and A connects to it, as two hosts find each other.
 *
 * Active messages carry the data, with the eager protocol forced
 * (UCP_AM_SEND_FLAG_EAGER): a frame is handed to the receiver's callback
 * whole, and no rendezvous round trip is paid inside a frame.
 *   ucx          one message per active message;
 *   ucx-batched  as many messages as fill a frame (params.frame bytes, 64
 *                KiB by default) per active message: the transport's
 *                batched limit, which a bridge that packs messages into
 *                frames can approach but not pass.
 * The sender keeps up to NET_UCX_WINDOW sends in flight, each from its own
 * buffer (UCP may hold a send's buffer until it completes), and progresses
 * the worker when a send was queued (and every PROGRESS_EVERY sends): the
 * window (net_ucx_window_*()), which the plain relay (net_relay.c) sends
 * its frames through too. The receiver checks every message's sequence
 * number inside the callback.
 *
 * Ping-pong: A sends one message, B's callback copies it and B's loop
 * sends it back (nothing is sent from inside a callback), A waits for it
 * (net_ping() and net_pong() drive the two sides).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "bench/net_ucx.h"

/* Active message ids besides NET_UCX_AM_DATA. */
enum { AM_HELLO = NET_UCX_AM_DATA + 1, AM_ECHO };

/* The sender progresses its worker at least once per this many sends. */
#define PROGRESS_EVERY 64u
/* How long connecting and closing may take before the side gives up. */
#define SETUP_NS (UINT64_C(10) * 1000000000)
#define CLOSE_NS (UINT64_C(2) * 1000000000)

int net_ucx_err(struct net_ucx *u, const char *what, ucs_status_t st)
{
	return net_fail(u->s, -EPROTO, "ucx: %s: %s", what, ucs_status_string(st));
}

/* ---- callbacks: they record, the side's loop acts ---- */

static ucs_status_t on_data(void *arg, const void *header, size_t header_len, void *data,
			    size_t len, const ucp_am_recv_param_t *param)
{
	struct net_ucx *u = arg;
	int ret;

	(void)header;
	(void)header_len;
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		u->err = -EPROTO;
		return UCS_OK;
	}
	ret = net_frame_check(data, len, u->s->p->payload, &u->expect, &u->s->sink);
	if (ret < 0 && u->err == 0)
		u->err = ret;
	if (ret == 1) {
		u->s->res->t_end = shoal__now_ns();
		u->stopped = true;
	}
	return UCS_OK;
}

static ucs_status_t on_hello(void *arg, const void *header, size_t header_len, void *data,
			     size_t len, const ucp_am_recv_param_t *param)
{
	struct net_ucx *u = arg;

	(void)header, (void)header_len, (void)data, (void)len, (void)param;
	u->hello = true;
	return UCS_OK;
}

static ucs_status_t on_echo(void *arg, const void *header, size_t header_len, void *data,
			    size_t len, const ucp_am_recv_param_t *param)
{
	struct net_ucx *u = arg;

	(void)header, (void)header_len;
	if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || len != u->s->p->payload) {
		u->err = -EPROTO;
		return UCS_OK;
	}
	memcpy(u->msg, data, len);
	u->echo = true;
	return UCS_OK;
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
	struct net_ucx *u = arg;

	/* One client per sample: a second request is refused. */
	if (u->conn != NULL) {
		ucp_listener_reject(u->listener, req);
		return;
	}
	u->conn = req;
}

/* ---- setup and teardown ---- */

int net_ucx_set_handler(struct net_ucx *u, unsigned id, ucp_am_recv_callback_t cb, void *arg)
{
	ucp_am_handler_param_t hp = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = id,
		.flags = UCP_AM_FLAG_WHOLE_MSG,
		.cb = cb,
		.arg = arg,
	};
	ucs_status_t st = ucp_worker_set_am_recv_handler(u->worker, &hp);

	return st == UCS_OK ? 0 : net_ucx_err(u, "setting an AM handler", st);
}

/*
 * A context restricted to TCP on this host's veth end: without the
 * restriction UCX would see that both processes share one machine and
 * carry the messages through shared memory, which two hosts cannot.
 */
static int ucx_open(struct net_ucx *u, struct net_side *s)
{
	ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES,
				.features = UCP_FEATURE_AM };
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	ucp_config_t *config;
	ucs_status_t st;

	memset(u, 0, sizeof(*u));
	u->s = s;
	st = ucp_config_read(NULL, NULL, &config);
	if (st != UCS_OK)
		return net_ucx_err(u, "reading the configuration", st);
	st = ucp_config_modify(config, "TLS", "tcp");
	if (st == UCS_OK)
		st = ucp_config_modify(config, "NET_DEVICES", s->p->ifname[s->side]);
	if (st == UCS_OK)
		st = ucp_init(&params, config, &u->ctx);
	ucp_config_release(config);
	if (st != UCS_OK)
		return net_ucx_err(u, "ucp_init", st);
	st = ucp_worker_create(u->ctx, &wp, &u->worker);
	if (st != UCS_OK)
		return net_ucx_err(u, "creating the worker", st);
	if (net_ucx_set_handler(u, NET_UCX_AM_DATA, on_data, u) < 0 ||
	    net_ucx_set_handler(u, AM_HELLO, on_hello, u) < 0 ||
	    net_ucx_set_handler(u, AM_ECHO, on_echo, u) < 0)
		return -EPROTO;
	return 0;
}

static void sockaddr_of(const struct net_params *p, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(p->port);
	inet_pton(AF_INET, p->addr[1], &sin->sin_addr);
}

static int ucx_listen(struct net_ucx *u)
{
	struct sockaddr_in sin;
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
			      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = { .addr = (const struct sockaddr *)&sin, .addrlen = sizeof(sin) },
		.conn_handler = { .cb = on_conn, .arg = u },
	};
	ucs_status_t st;

	sockaddr_of(u->s->p, &sin);
	st = ucp_listener_create(u->worker, &lp, &u->listener);
	return st == UCS_OK ? 0 : net_ucx_err(u, "listening", st);
}

static int ucx_connect(struct net_ucx *u)
{
	struct sockaddr_in sin;
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = { .addr = (const struct sockaddr *)&sin, .addrlen = sizeof(sin) },
	};
	ucs_status_t st;

	sockaddr_of(u->s->p, &sin);
	st = ucp_ep_create(u->worker, &ep, &u->ep);
	return st == UCS_OK ? 0 : net_ucx_err(u, "connecting", st);
}

static int ucx_accept(struct net_ucx *u)
{
	uint64_t limit = shoal__now_ns() + SETUP_NS;
	ucp_ep_params_t ep = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST };
	ucs_status_t st;

	while (u->conn == NULL) {
		ucp_worker_progress(u->worker);
		if (shoal__now_ns() > limit)
			return net_fail(u->s, -ETIMEDOUT, "ucx: no connection request in 10 s");
	}
	ep.conn_request = u->conn;
	st = ucp_ep_create(u->worker, &ep, &u->ep);
	return st == UCS_OK ? 0 : net_ucx_err(u, "accepting", st);
}

ucs_status_t net_ucx_wait(struct net_ucx *u, void *req)
{
	ucs_status_t st;

	if (req == NULL)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(req))
		return UCS_PTR_STATUS(req);
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS)
		ucp_worker_progress(u->worker);
	ucp_request_free(req);
	return st;
}

void *net_ucx_send(struct net_ucx *u, unsigned id, const void *buf, size_t len)
{
	ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				   .flags = UCP_AM_SEND_FLAG_EAGER };

	return ucp_am_send_nbx(u->ep, id, NULL, 0, buf, len, &rp);
}

/* Send one message and wait until its buffer is free again. */
static int ucx_send_wait(struct net_ucx *u, unsigned id, const void *buf, size_t len)
{
	ucs_status_t st = net_ucx_wait(u, net_ucx_send(u, id, buf, len));

	return st == UCS_OK ? 0 : net_ucx_err(u, "sending", st);
}

/* Progress until *flag is set or a callback failed. */
static int ucx_wait_flag(struct net_ucx *u, bool *flag, uint64_t limit_ns)
{
	uint64_t limit = limit_ns ? shoal__now_ns() + limit_ns : UINT64_MAX;
	uint32_t n = 0;

	while (!*flag && u->err == 0) {
		ucp_worker_progress(u->worker);
		if (++n % 1024 == 0 && shoal__now_ns() > limit)
			return net_fail(u->s, -ETIMEDOUT, "ucx: the peer did not answer");
	}
	*flag = false;
	return u->err < 0 ? net_fail(u->s, u->err, "ucx: a bad message came") : 0;
}

/* A says hello, B answers once its endpoint exists. */
int net_ucx_setup(struct net_ucx *u, struct net_side *s)
{
	static const char hello[8] = "hello";
	int ret = ucx_open(u, s);

	if (ret == 0 && s->side == 1)
		ret = ucx_listen(u);
	net_meet(s, NET_ROUND_LISTENING);
	if (ret < 0)
		return ret;
	if (s->side == 0) {
		ret = ucx_connect(u);
		if (ret == 0)
			ret = ucx_send_wait(u, AM_HELLO, hello, sizeof(hello));
		return ret < 0 ? ret : ucx_wait_flag(u, &u->hello, SETUP_NS);
	}
	ret = ucx_accept(u);
	if (ret == 0)
		ret = ucx_wait_flag(u, &u->hello, SETUP_NS);
	return ret < 0 ? ret : ucx_send_wait(u, AM_HELLO, hello, sizeof(hello));
}

static int progress_once(void *arg)
{
	struct net_ucx *u = arg;

	ucp_worker_progress(u->worker);
	return u->err;
}

void net_ucx_close(struct net_ucx *u)
{
	if (u->ep != NULL) {
		ucp_request_param_t rp = { 0 };
		void *req = ucp_ep_close_nbx(u->ep, &rp);
		uint64_t limit = shoal__now_ns() + CLOSE_NS;

		while (req != NULL && !UCS_PTR_IS_ERR(req) &&
		       ucp_request_check_status(req) == UCS_INPROGRESS &&
		       shoal__now_ns() < limit)
			ucp_worker_progress(u->worker);
		if (req != NULL && !UCS_PTR_IS_ERR(req) &&
		    ucp_request_check_status(req) != UCS_INPROGRESS)
			ucp_request_free(req);
	}
	if (u->listener != NULL)
		ucp_listener_destroy(u->listener);
	if (u->worker != NULL)
		ucp_worker_destroy(u->worker);
	if (u->ctx != NULL)
		ucp_cleanup(u->ctx);
}

/*
 * Meet at NET_ROUND_DONE, then close: both sides close at once, each
 * progressing its own close (a flush, then the disconnect), bounded so
 * that a peer gone early cannot hold this side.
 */
static int ucx_close(struct net_ucx *u, int ret)
{
	if (ret == 0)
		ret = net_meet_progress(u->s, NET_ROUND_DONE, progress_once, u);
	net_ucx_close(u);
	return ret;
}

/* ---- frames in flight ---- */

int net_ucx_window_init(struct net_ucx *u, struct net_ucx_window *w, size_t len)
{
	memset(w, 0, sizeof(*w));
	w->bufs = malloc((size_t)NET_UCX_WINDOW * len);
	if (w->bufs == NULL)
		return net_fail(u->s, -ENOMEM, "no memory for %u frames", NET_UCX_WINDOW);
	w->len = len;
	return 0;
}

unsigned char *net_ucx_window_next(struct net_ucx *u, struct net_ucx_window *w)
{
	if (w->head - w->tail == NET_UCX_WINDOW) {
		ucs_status_t st = net_ucx_wait(u, w->req[w->tail++ % NET_UCX_WINDOW]);

		if (st != UCS_OK) {
			net_ucx_err(u, "sending", st);
			return NULL;
		}
	}
	return w->bufs + (size_t)(w->head % NET_UCX_WINDOW) * w->len;
}

int net_ucx_window_send(struct net_ucx *u, struct net_ucx_window *w, unsigned id, size_t len)
{
	void *r = net_ucx_send(u, id, w->bufs + (size_t)(w->head % NET_UCX_WINDOW) * w->len, len);

	if (UCS_PTR_IS_ERR(r))
		return net_ucx_err(u, "sending", UCS_PTR_STATUS(r));
	if (r != NULL)
		w->req[w->head++ % NET_UCX_WINDOW] = r;
	/* A send that completed at once is on the socket already;
	 * progress (an epoll_wait() over TCP) is for queued sends, and
	 * now and then for the worker's own business. Progressing
	 * after every send cost 2.5x the message rate. */
	if (r != NULL || ++w->sends % PROGRESS_EVERY == 0)
		ucp_worker_progress(u->worker);
	return 0;
}

int net_ucx_window_end(struct net_ucx *u, struct net_ucx_window *w, int ret)
{
	for (; w->tail != w->head; w->tail++) {
		ucs_status_t st = net_ucx_wait(u, w->req[w->tail % NET_UCX_WINDOW]);

		if (st != UCS_OK && ret == 0)
			ret = net_ucx_err(u, "sending", st);
	}
	free(w->bufs);
	w->bufs = NULL;
	return ret;
}

/* ---- throughput ---- */

/*
 * Side A: frames of `per` messages (1: unbatched) from the window's
 * buffers. The last frame carries the stop mark; then every send is waited
 * for and the endpoint flushed, so that nothing is left in UCX's buffers
 * when A meets B.
 */
static int ucx_tput_a_frames(struct net_ucx *u, uint32_t per)
{
	uint32_t payload = u->s->p->payload;
	struct net_ucx_window w;
	uint64_t seq = 0;
	bool last = false;
	int ret = net_ucx_window_init(u, &w, (size_t)per * payload);

	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < NET_UCX_WINDOW; i++)
		bench_batch_fill(w.bufs + (size_t)i * w.len, payload, per);
	net_side_ready(u->s);
	while (!last && ret == 0) {
		unsigned char *buf = net_ucx_window_next(u, &w);

		if (buf == NULL) {
			ret = -EPROTO;
			break;
		}
		/* A frame is worth a clock read; single messages read it
		 * every BENCH_CLOCK_EVERY. */
		last = per > 1 ? shoal__now_ns() >= u->s->deadline : net_time_up(u->s, seq);
		bench_batch_stamp(buf, payload, per, seq, last);
		ret = net_ucx_window_send(u, &w, NET_UCX_AM_DATA, w.len);
		seq += per;
	}
	ret = net_ucx_window_end(u, &w, ret);
	if (ret == 0) {
		ucp_request_param_t rp = { 0 };
		ucs_status_t st = net_ucx_wait(u, ucp_ep_flush_nbx(u->ep, &rp));

		if (st != UCS_OK)
			ret = net_ucx_err(u, "flushing", st);
	}
	return ret;
}

static int ucx_tput_b(struct net_side *s)
{
	struct net_ucx u;
	int ret = net_ucx_setup(&u, s);

	if (ret == 0) {
		net_side_ready(s);
		ret = ucx_wait_flag(&u, &u.stopped, 0);
		s->res->msgs = u.expect;
	}
	return ucx_close(&u, ret);
}

static int ucx_tput_a(struct net_side *s)
{
	struct net_ucx u;
	int ret = net_ucx_setup(&u, s);

	if (ret == 0)
		ret = ucx_tput_a_frames(&u, 1);
	return ucx_close(&u, ret);
}

static int ucx_batched_tput_a(struct net_side *s)
{
	struct net_ucx u;
	int ret = net_ucx_setup(&u, s);

	if (ret == 0)
		ret = ucx_tput_a_frames(&u, s->p->frame / s->p->payload);
	return ucx_close(&u, ret);
}

/* ---- ping-pong ---- */

static int ucx_trip(void *arg, const void *msg, void *back)
{
	struct net_ucx *u = arg;
	int ret = ucx_send_wait(u, AM_ECHO, msg, u->s->p->payload);

	if (ret == 0)
		ret = ucx_wait_flag(u, &u->echo, 0);
	if (ret == 0)
		memcpy(back, u->msg, u->s->p->payload);
	return ret;
}

static int ucx_echo_recv(void *arg, void *msg)
{
	struct net_ucx *u = arg;
	int ret = ucx_wait_flag(u, &u->echo, 0);

	if (ret == 0)
		memcpy(msg, u->msg, u->s->p->payload);
	return ret;
}

static int ucx_echo_send(void *arg, const void *msg)
{
	struct net_ucx *u = arg;

	return ucx_send_wait(u, AM_ECHO, msg, u->s->p->payload);
}

static int ucx_rtt_a(struct net_side *s)
{
	struct net_ucx u;
	int ret = net_ucx_setup(&u, s);

	if (ret == 0)
		ret = net_ping(s, ucx_trip, &u);
	return ucx_close(&u, ret);
}

static int ucx_rtt_b(struct net_side *s)
{
	struct net_ucx u;
	int ret = net_ucx_setup(&u, s);

	if (ret == 0)
		ret = net_pong(s, ucx_echo_recv, ucx_echo_send, &u);
	return ucx_close(&u, ret);
}

const struct net_contender net_ucx = {
	.name = "ucx",
	.what = "UCP active messages over TCP, one message per AM (eager); ping-pong echoes it",
	.role = {
		[NET_TPUT] = { ucx_tput_a, ucx_tput_b },
		[NET_RTT] = { ucx_rtt_a, ucx_rtt_b },
	},
};

const struct net_contender net_ucx_batched = {
	.name = NET_LIMIT,
	.what = "UCP active messages over TCP, messages packed into one AM of the frame size: "
		"the transport's batched limit",
	.batched = true,
	.role = {
		[NET_TPUT] = { ucx_batched_tput_a, ucx_tput_b },
	},
};
