/* SPDX-License-Identifier: MIT */
/*
 * The cross-host benchmark (net_bench.c): what the driver and the
 * contenders (net_ucx.c, net_relay.c, net_zmq.c, net_link.c,
 * net_bridge.c) share.
 * Private to bench/.
 *
 * Two "hosts" are two network namespaces joined by a veth pair. One sample
 * = one contender doing one measurement once: the driver forks a client
 * (side A: sender, ping-pong initiator) into host A and a server (side B:
 * receiver, responder) into host B, each pinned to its own CPU. They share
 * nothing but the control block (an anonymous shared mapping made before
 * fork), which carries the parameters in, the results out and a barrier;
 * every message crosses the veth pair through the contender's transport.
 * The plain relay's sides each fork a relay process into their host, which
 * carries their messages (net_relay.c). The bridge contender's sides each
 * run a system instead, whose groups (this program, started by `shoal run`)
 * play the sides' roles on the same control block, shared as a memfd
 * (net_bridge.c).
 */
#ifndef SHOAL_BENCH_NET_H
#define SHOAL_BENCH_NET_H

#include <net/if.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench.h"

/* A batched contender packs at most this many bytes of messages into one
 * transport message (a frame); the default frame is NET_FRAME_DEFAULT. */
#define NET_FRAME_MAX (256u * 1024)
#define NET_FRAME_DEFAULT (64u * 1024)
#define NET_PAYLOAD_MAX 1024u

enum net_kind {
	NET_TPUT,     /* one-way throughput: A sends for the duration, B counts */
	NET_RTT,      /* ping-pong: A sends one message, B echoes it, A waits */
	NET_KINDS
};

/* What one sample does. Written by the driver before fork, read by both. */
struct net_params {
	enum net_kind kind;
	uint32_t payload;          /* bytes per message */
	uint32_t frame;            /* bytes per transport message when batching */
	uint64_t duration_ns;      /* how long side A keeps sending */
	int cpu[2];                /* where sides A and B are pinned */
	uint16_t port;             /* B listens here: a new port every sample */
	char addr[2][16];          /* hosts A and B's IPv4 addresses, dotted */
	char ifname[2][IF_NAMESIZE]; /* each host's end of the veth pair */
	char callgrind[160];        /* "": none; else the bridge contenders' systems run
				     * under callgrind, its files and their output here */
	uint32_t router_yield_us;   /* the bridge systems' router.yield (0: not set) */
	bool spread;                /* the bridge systems on both CPUs, not their side's */
};

struct net_ctl {
	_Alignas(128) _Atomic uint32_t arrived;   /* two-party barrier counter */
	_Alignas(128) _Atomic uint64_t probe;     /* the placement probe's line */
	_Alignas(128) struct net_params params;
	/* What each side reports, as the ring benchmark's sides do: t_start
	 * (A), t_end (B for throughput, A for ping-pong), msgs, lat (A,
	 * ping-pong), probe_ns, waited_ns, cpu, err and msg. */
	struct bench_result res[2];
	/* The bridge contender (net_bridge.c): each side's group sets its
	 * word, 1 done or 2 failed, once it has met NET_ROUND_DONE. */
	_Alignas(128) _Atomic uint32_t group_done[2];
};

/*
 * The barrier rounds of a sample, in order. Each role meets the other side
 * at every one of them, so that a role never times the other's setup:
 *   NET_ROUND_LISTENING  B listens (bound): A may connect.
 *   (connect and a first exchange, which wires the path both ways)
 *   net_side_ready()     rounds 2 and 3 around the placement probe.
 *   NET_ROUND_DONE       B has seen the last message and A has nothing in
 *                        flight: both may tear down.
 */
#define NET_ROUND_LISTENING 1u
#define NET_ROUND_DONE 4u

/* One side's process-local view while it runs its role. */
struct net_side {
	int side;                  /* 0: A (client), 1: B (server) */
	const struct net_params *p;
	struct bench_result *res;
	struct net_ctl *ctl;
	uint64_t deadline;         /* side A: stop sending at this time */
	uint64_t run_delay0;       /* bench_run_delay_ns() when the clock started */
	uint64_t sink;             /* payload words read, so the reads stay */
	/* NULL, or called while this side waits for the other at the first
	 * ready round (net_side_ready()): for a transport whose handshake
	 * needs both owners to poll until both are through it (the link).
	 * It returns 0. */
	int (*ready_progress)(void *arg);
	void *ready_arg;
};

typedef int (*net_role_fn)(struct net_side *s);

/*
 * A contender: one role per kind and side; NULL for a kind it does not
 * measure. `batched` says that its throughput role packs messages into
 * frames of params.frame bytes. The reference every throughput figure is
 * divided by is the contender named NET_LIMIT.
 */
struct net_contender {
	const char *name;
	const char *what;          /* one line for the report's legend */
	bool batched;
	net_role_fn role[NET_KINDS][2];
	/* The plain reference of this row's shape, per kind, its `÷ plain
	 * shape` column; NULL: the plain relay (RELAY_REF in net_bench.c). */
	const char *shape_ref[NET_KINDS];
};

#define NET_LIMIT "ucx-batched"

extern const struct net_contender net_ucx;
extern const struct net_contender net_ucx_batched;
extern const struct net_contender net_zmq;
/* Shoal's link layer alone (net_link.c), built with the bridge. */
extern const struct net_contender net_link;
/* Shoal's whole bridge, two `shoal run --host` systems (net_bridge.c). */
extern const struct net_contender net_bridge;
/* The same systems, the messages sent direct: no router on the way. */
extern const struct net_contender net_bridge_direct;

/* The direct path's shape with nothing of Shoal: a side and a relay per
 * host, plain rings between them, UCP frames between the relays
 * (net_relay.c). The reference of the bridge's rows. */
extern const struct net_contender net_plain_relay;
/* The routed path's shape done plainly: the plain relay with a plain
 * forwarder per host between the side and its relay (net_relay.c). The
 * reference of the routed bridge row's throughput. */
extern const struct net_contender net_plain_relay_routed;
#define NET_ROUTED_REF "plain-relay-routed"

/* The environment variable that makes this program a group of the bridge
 * contender's systems: the descriptor of the control block, inherited. */
#define NET_BRIDGE_CTL_ENV "SHOAL_BENCH_NET_CTL"

/* This program as group bench-a or bench-b ($SHOAL_GROUP) of a bridge
 * sample, on the control block at descriptor `ctl_fd`. Exit status. */
int net_bridge_group_main(const char *ctl_fd);

/* Record why a role failed in side->res; evaluates to `code` (a negative
 * errno). The format must be a string literal. */
#define net_fail(side, code, ...) \
	(snprintf((side)->res->msg, sizeof((side)->res->msg), __VA_ARGS__), \
	 (side)->res->err = (code))

/* Meet the other side at `round` (see the rounds above). Meeting at
 * NET_ROUND_DONE also records res->waited_ns: the run delay of the timed
 * part, without the teardown. */
void net_meet(struct net_side *s, uint32_t round);

/*
 * As net_meet(), calling progress(arg) while the other side has not come:
 * for a transport that only moves data while its owner calls it (UCX).
 * Returns 0, or progress()'s negative return, which stops the wait.
 */
int net_meet_progress(struct net_side *s, uint32_t round, int (*progress)(void *arg),
		      void *arg);

/* Rounds 2 and 3 around the placement probe; side A then starts the clock
 * (res->t_start, deadline). Call once connected, before the timed loop.
 * Round 2 calls s->ready_progress while it waits, when set. */
void net_side_ready(struct net_side *s);

/* Side A: true once the sample's time is up; reads the clock only when
 * `seq` is a multiple of BENCH_CLOCK_EVERY. */
static inline bool net_time_up(const struct net_side *s, uint64_t seq)
{
	return (seq % BENCH_CLOCK_EVERY) == 0 && shoal__now_ns() >= s->deadline;
}

/*
 * Side A of a ping-pong over any transport: net_side_ready(), then round
 * trips until the time is up, the last message marked BENCH_STOP; every
 * answer must be the message sent. trip(arg, msg, back) sends the payload
 * at msg and waits for the answer into back, returning 0 or a negative
 * errno said with net_fail(). Records the round trips, the last one's end
 * and the percentiles in s->res. Returns 0 or the first failure.
 */
int net_ping(struct net_side *s, int (*trip)(void *arg, const void *msg, void *back),
	     void *arg);

/*
 * Side B of a ping-pong: net_side_ready(), then recv(arg, msg) one
 * message and send(arg, msg) it back, until the one marked BENCH_STOP is
 * answered; sequence numbers are checked. Both return 0 or a negative
 * errno said with net_fail(). Returns 0 or the first failure.
 */
int net_pong(struct net_side *s, int (*recv)(void *arg, void *msg),
	     int (*send)(void *arg, const void *msg), void *arg);

/*
 * Enter the host whose network namespace `nsfd` is: that namespace, and a
 * mount namespace of this process's own where /sys shows the host's
 * devices. For a forked child, as root. 0 or -errno.
 */
int net_enter_host(int nsfd);

/* ucx_perftest's figures for one test and payload (net_perftest.c). */
struct net_perftest {
	bool ok;
	double msg_rate;           /* overall messages per second */
	double lat_ns;             /* latency p50; one way (half a round trip) for _lat tests */
};

/*
 * Run ucx_perftest's `test` (ucp_am_bw, ucp_am_lat) between the hosts of
 * nsfd: its server in host B, its client in host A, pinned as p->cpu says,
 * TCP on the veth ends, `iters` messages of p->payload bytes, on p->port.
 * Returns 0 with *out filled, -ENOENT when ucx_perftest is not installed,
 * -EINTR on a stop signal, -EIO when it did not run or print its figures.
 */
int net_perftest_run(const int nsfd[2], const struct net_params *p, const char *test,
		     uint64_t iters, struct net_perftest *out);

/* Check every message of a frame of `len` bytes holding messages of
 * `payload` bytes from *expect on; *expect moves past them. Returns 0, 1
 * when the frame held the producer's last message, -EBADMSG. */
int net_frame_check(const unsigned char *frame, size_t len, uint32_t payload, uint64_t *expect,
		    uint64_t *sink);

#endif
