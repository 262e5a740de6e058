/* SPDX-License-Identifier: MIT */
/*
 * The minimal UCP program of shoal-bench-net (net_ucx.c), as the contenders
 * that carry frames over UCX share it: `ucx`, `ucx-batched` (net_ucx.c) and
 * the plain relay (net_relay.c). Private to bench/.
 *
 * One context and one worker per process (thread mode single: only the
 * thread that set it up calls it), TCP only on the host's end of the veth
 * pair; side B listens, side A connects, and a hello each way wires both
 * directions before anything is timed.
 */
#ifndef SHOAL_BENCH_NET_UCX_H
#define SHOAL_BENCH_NET_UCX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "bench/net_bench.h"

/* The active message that carries frames: messages of params.payload
 * bytes, back to back (net_frame_check()'s layout). */
#define NET_UCX_AM_DATA 1u

/* Sends in flight at most: enough to keep TCP's socket busy. */
#define NET_UCX_WINDOW 64u

struct net_ucx {
	struct net_side *s;
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_listener_h listener;
	ucp_conn_request_h conn;   /* B: the connection request to accept */
	ucp_ep_h ep;
	int err;                   /* the first failure seen in a callback */
	uint64_t expect;           /* B: the next sequence number */
	bool stopped;              /* B: the last message has come */
	bool hello;                /* the other side's hello has come */
	bool echo;                 /* ping-pong: a message waits in msg */
	unsigned char msg[NET_PAYLOAD_MAX];
};

/*
 * Open, meet at NET_ROUND_LISTENING (B listening), connect, and make one
 * exchange; the process calling it is side s->side's only user of the
 * worker. NET_UCX_AM_DATA frames are then checked by net_frame_check()
 * until net_ucx_set_handler() names another callback. Returns 0 or -EPROTO
 * (said with net_fail()); either way net_ucx_close() frees what was made.
 */
int net_ucx_setup(struct net_ucx *u, struct net_side *s);

/* Let `cb` (arg `arg`) take the whole active messages of `id`. 0 or
 * -EPROTO, said. */
int net_ucx_set_handler(struct net_ucx *u, unsigned id, ucp_am_recv_callback_t cb, void *arg);

/* Say a UCX failure with net_fail(); evaluates to -EPROTO. */
int net_ucx_err(struct net_ucx *u, const char *what, ucs_status_t st);

/* ucp_am_send_nbx() of buf with the eager protocol forced: NULL (done, the
 * buffer free), a request, or an error pointer. */
void *net_ucx_send(struct net_ucx *u, unsigned id, const void *buf, size_t len);

/* Wait for a request to complete, progressing; frees it. */
ucs_status_t net_ucx_wait(struct net_ucx *u, void *req);

/* Close the endpoint (bounded: 2 s), the listener, the worker and the
 * context, whichever exist. Meets nobody. */
void net_ucx_close(struct net_ucx *u);

/*
 * Frames sent from NET_UCX_WINDOW buffers of `len` bytes, a send in flight
 * holding its buffer until it completes (UCP may keep it until then).
 * Zeroed, a window is empty and net_ucx_window_end() of it does nothing.
 */
struct net_ucx_window {
	unsigned char *bufs;
	size_t len;
	void *req[NET_UCX_WINDOW];
	uint32_t head, tail;       /* req[tail % W .. head % W) in flight */
	uint32_t sends;
};

/* Allocate the buffers. 0 or -ENOMEM, said. */
int net_ucx_window_init(struct net_ucx *u, struct net_ucx_window *w, size_t len);

/* The buffer the next send goes from: when every buffer is in flight, the
 * oldest send is waited for first. NULL when that send failed (said). */
unsigned char *net_ucx_window_next(struct net_ucx *u, struct net_ucx_window *w);

/* Send the first `len` bytes of the buffer net_ucx_window_next() gave as
 * active message `id`. The worker is progressed when the send was queued,
 * and once every 64 sends (an epoll_wait() over TCP: after every send it
 * cost 2.5x the message rate). 0 or -EPROTO, said. */
int net_ucx_window_send(struct net_ucx *u, struct net_ucx_window *w, unsigned id, size_t len);

/* Wait for every send in flight and free the buffers. Returns `ret` if it
 * is negative, else 0 or the first failed send's -EPROTO (said). */
int net_ucx_window_end(struct net_ucx *u, struct net_ucx_window *w, int ret);

#endif
