/* SPDX-License-Identifier: MIT */
/*
 * The plain relay: the shape of Shoal's direct path across hosts with
 * nothing of Shoal in it, the reference `shoal-bridge-direct` (and
 * `shoal-bridge`'s round trip, which goes direct) is read against. What a
 * careful program writes for that shape and one message size:
 *
 *   host A                                          host B
 *   side A --plain ring--> relay A ==UCP frames==> relay B --plain ring--> side B
 *          <--plain ring--         <==UCP frames==         <--plain ring--
 *
 * four processes where Shoal's direct path has four (sender group, bridge
 * A, bridge B, receiver group). `plain-relay-routed` is the routed path's
 * shape, six processes as Shoal's routed stream has (sender group, router
 * A, bridge A, bridge B, router B, receiver group): a plain forwarder on
 * each host between the side and its relay, joined to both by plain rings,
 *
 *   side A --ring--> fwd A --ring--> relay A ==frames==> relay B --ring--> fwd B --ring--> side B
 *
 * the forwarder moving what its input ring holds, up to FWD_PASS messages,
 * into its output ring as one publication, waiting for room there (as a
 * router's dispatcher holds back at a full ring): the hand-off of a router,
 * without its filter (at one consumer group, the route is a constant).
 * Throughput only: Shoal's routed row's round trip goes direct, so its
 * reference is `plain-relay`'s. Each side forks its relay into its own
 * host; the two share an anonymous shared mapping made before the fork: a
 * word each way (the relay's state, the side's stop) and two plain SPSC
 * rings (bench/plain_ring.h) of RING_BYTES of slots each, one slot a
 * message, out (side to relay) and in (relay to side).
 *
 * A relay is one loop: whatever its out ring holds, up to a frame's worth
 * (params.frame bytes), is copied into a frame and sent as one UCP active
 * message through net_ucx.c's window (the `ucx-batched` sender's: 64 sends
 * in flight, eager protocol); when out is empty it progresses its worker,
 * whose callback copies every message of a frame into its in ring,
 * waiting for room there. A frame is sent as soon as there is something to
 * send: a lone message (a ping) goes alone, a stream fills frames because
 * the relay falls behind its sender.
 *
 * Throughput: side A writes bursts of 32 messages (as shoal_send_to_burst()
 * in the bridge's row), checks the clock once a burst, and marks its last
 * message; side B reads up to 32 at a time and checks every sequence
 * number. Round trip: side A writes one message and waits for it on in;
 * side B takes it from in and writes it back on out (net_ping() and
 * net_pong()).
 *
 * Waiting: every look that finds nothing (a side's ring full or empty, a
 * relay with nothing to send and nothing received) is followed by
 * sched_yield() for SPIN_NS (200 µs, the bridge's `hosts.link.spin`) of
 * looking since the last work (a yield that kept the process off its CPU
 * for more than 20 µs does not count), then by nanosleep(SLEEP_NS, 20 µs,
 * timer slack 1 µs)
 * until work comes; so four processes share two CPUs, each giving its CPU
 * at once to one with work. Where the bridge sleeps on a doorbell that
 * wakes it at once, this reference has none: a process that slept finds
 * its work up to one nap late (a wake-up on this VM costs about 20 µs
 * anyway, docs/hosts.md).
 *
 * CPUs: the sides are pinned as the other contenders' (A on the first of
 * --cpus, B on the second), and each relay with its side: a host's two
 * processes on one CPU, as on two hosts of a CPU each, the same placement
 * every sample. Left to run on both CPUs, as the bridge's systems do, both
 * relays were once found beside side B (perf: side A yielding alone on
 * CPU 0): a process that yields between looks counts as busy to the
 * scheduler's balancing.
 *
 * The relay meets the other host at NET_ROUND_LISTENING (net_ucx_setup()),
 * its side at every later round; the side tells its relay (and forwarder)
 * to close once both sides met at NET_ROUND_DONE, and waits for them to
 * exit. A relay that fails says why in its side's result and sets its
 * state to the -errno, which its side finds when it next waits; a side
 * that dies takes its relay and forwarder with it (PR_SET_PDEATHSIG), and
 * a forwarder that exits early is found by its side's next wait.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/net_ucx.h"
#include "bench/plain_ring.h"

/* Bytes of slots in each ring: 16 frames of 64 KiB. */
#define RING_BYTES (1u << 20)
/* Messages side A writes, and side B reads, per look. */
#define BURST 32u
/* Messages a forwarder moves per look at most (a dispatcher's pass). */
#define FWD_PASS 256u
/* How long a process keeps looking, yielding between looks, after its
 * last work; then how long it sleeps between looks, with a timer slack of
 * SLACK_NS (the default, 50 us, would double the nap). */
#define SPIN_NS 200000u
#define SLEEP_NS 20000
#define SLACK_NS 1000
/* A yield longer than this gave the CPU away (idle_wait()). */
#define AWAY_NS 20000u

/* The relay's state, as its side reads it (or a negative errno). */
#define RELAY_STARTING 0
#define RELAY_UP 1

/* What a side and its relay share, followed by the rings out and in. */
struct relay_shared {
	_Alignas(SHOAL_FALSE_SHARING) _Atomic int32_t state;  /* written by the relay */
	_Alignas(SHOAL_FALSE_SHARING) _Atomic uint32_t stop;  /* written by the side */
};

/* A process's wait: when the looks that found nothing began (0: working). */
struct idle {
	uint64_t since;
};

/* A side's process-local view. */
struct rside {
	struct net_side *s;
	struct relay_shared *sh;
	size_t map_len;
	pid_t relay;
	pid_t fwd;
	struct plain_prod out;
	struct plain_cons in;
	struct idle idle;
};

/* The forwarder's process-local view: out to xout, xin to in. */
struct fwd {
	struct plain_cons out, xin;
	struct plain_prod xout, in;
	struct idle idle;
};

/* The relay's process-local view. */
struct relay {
	struct net_side *s;
	struct relay_shared *sh;
	struct net_ucx u;
	struct net_ucx_window w;
	struct plain_cons out;
	struct plain_prod in;
	struct idle idle;
	uint32_t per;              /* messages per frame at most */
	uint64_t frames;           /* frames received */
};

/* ---- waiting ---- */

static void idle_work(struct idle *i)
{
	i->since = 0;
}

/* After a look that found nothing: yield, or sleep once this process has
 * looked for SPIN_NS without work. A yield that gave the CPU away for
 * longer than AWAY_NS does not count as looking: on one CPU with the
 * process it waits for, a producer whose ring was full for a whole slice
 * of its consumer would otherwise nap as the consumer runs dry. Returns
 * true when it slept. */
static bool idle_wait(struct idle *i)
{
	static const struct timespec nap = { 0, SLEEP_NS };
	uint64_t now = shoal__now_ns(), back;

	if (i->since == 0)
		i->since = now;
	if (now - i->since >= SPIN_NS) {
		nanosleep(&nap, NULL);
		return true;
	}
	sched_yield();
	back = shoal__now_ns();
	if (back - now > AWAY_NS)
		i->since += back - now;
	return false;
}

/* A side's wait for its ring: idle_wait(), and when it slept, whether the
 * relay failed or is gone. 0, or the relay's failure. */
static int side_wait(struct rside *r)
{
	int32_t st;

	if (!idle_wait(&r->idle))
		return 0;
	/* A1: pairs with R1 in relay_set_state(): the failure's message. */
	st = shoal_load_acquire(&r->sh->state);
	if (st < 0)
		return st;
	if (waitpid(r->relay, NULL, WNOHANG) == r->relay) {
		r->relay = 0;
		return net_fail(r->s, -ECHILD, "plain-relay: the relay exited");
	}
	if (r->fwd > 0 && waitpid(r->fwd, NULL, WNOHANG) == r->fwd) {
		r->fwd = 0;
		return net_fail(r->s, -ECHILD, "plain-relay: the forwarder exited");
	}
	return 0;
}

/* ---- the shared mapping ---- */

static uint64_t ring_len(uint32_t payload)
{
	uint64_t len = plain_ring_size(payload, RING_BYTES / payload);

	return (len + SHOAL_FALSE_SHARING - 1) & ~(uint64_t)(SHOAL_FALSE_SHARING - 1);
}

static void *ring_at(struct relay_shared *sh, uint32_t payload, int which)
{
	return (unsigned char *)(sh + 1) + (size_t)which * ring_len(payload);
}

/* out and in are the side's; the relay's are xout and xin where a
 * forwarder stands between them, else the same two. */
enum { RING_OUT, RING_IN, RING_XOUT, RING_XIN, RINGS_ROUTED };

static unsigned n_rings(bool routed)
{
	return routed ? RINGS_ROUTED : RING_XOUT;
}

/* Touch every page of the mapping: a forked child maps shared pages
 * again on first touch, which the timed part should not pay. */
static void touch(const unsigned char *mem, size_t len, uint64_t *sink)
{
	for (size_t off = 0; off < len; off += 4096)
		*sink += mem[off];
}

/* ---- the forwarder ---- */

/* What `from` holds, up to FWD_PASS and the room in `to`, into `to` as one
 * publication; how many moved. */
static uint32_t fwd_move(struct plain_cons *from, struct plain_prod *to, uint32_t payload)
{
	uint32_t n = plain_cons_avail(from, FWD_PASS);

	if (n > 0)
		n = plain_prod_room(to, n);
	for (uint32_t k = 0; k < n; k++)
		bench_copy(plain_prod_slot(to, k), plain_cons_slot(from, k), payload);
	if (n > 0) {
		plain_prod_publish(to, n);
		plain_cons_release(from, n);
	}
	return n;
}

/* The forwarder process's body, both ways until the side says stop; exit
 * status. */
static int fwd_main(struct net_side *s, struct relay_shared *sh, size_t map_len)
{
	uint32_t payload = s->p->payload;
	uint64_t rl = ring_len(payload);
	struct fwd w = { 0 };

	/* Pinned as its side is (inherited): a host's three on one CPU. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	touch((const unsigned char *)sh, map_len, &s->sink);
	if (plain_cons_attach(&w.out, ring_at(sh, payload, RING_OUT), rl) < 0 ||
	    plain_prod_attach(&w.xout, ring_at(sh, payload, RING_XOUT), rl) < 0 ||
	    plain_cons_attach(&w.xin, ring_at(sh, payload, RING_XIN), rl) < 0 ||
	    plain_prod_attach(&w.in, ring_at(sh, payload, RING_IN), rl) < 0) {
		net_fail(s, -EINVAL, "plain-relay: the forwarder's rings");
		return 1;
	}
	/* A2 as in relay_loop(). */
	while (!shoal_load_acquire(&sh->stop)) {
		uint32_t moved = fwd_move(&w.out, &w.xout, payload);

		moved += fwd_move(&w.xin, &w.in, payload);
		if (moved > 0)
			idle_work(&w.idle);
		else
			idle_wait(&w.idle);
	}
	return 0;
}

/* ---- the relay ---- */

static void relay_set_state(struct relay *r, int32_t st)
{
	/* R1: pairs with A1 in side_wait() and side_open(): the failure's
	 * message in the results before the state. */
	shoal_store_release(&r->sh->state, st);
}

/* NET_UCX_AM_DATA: every message of the frame into the in ring, waiting
 * for room as long as it takes (its side reads it). */
static ucs_status_t on_frame(void *arg, const void *header, size_t header_len, void *data,
			     size_t len, const ucp_am_recv_param_t *param)
{
	struct relay *r = arg;
	uint32_t payload = r->s->p->payload, n, done = 0;
	const unsigned char *msgs = data;

	(void)header, (void)header_len;
	if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || len == 0 || len % payload != 0 ||
	    len / payload > r->per) {
		r->u.err = -EPROTO;
		return UCS_OK;
	}
	n = (uint32_t)(len / payload);
	while (done < n) {
		uint32_t room = plain_prod_room(&r->in, n - done);

		if (room == 0) {
			idle_wait(&r->idle);
			continue;
		}
		for (uint32_t k = 0; k < room; k++)
			bench_copy(plain_prod_slot(&r->in, k), msgs + (size_t)(done + k) * payload,
				   payload);
		plain_prod_publish(&r->in, room);
		done += room;
		idle_work(&r->idle);
	}
	r->frames++;
	return UCS_OK;
}

/* Whatever out holds, up to a frame, as one frame. 1 sent, 0 nothing to
 * send, or -EPROTO (said). */
static int relay_send(struct relay *r)
{
	uint32_t payload = r->s->p->payload, n = plain_cons_avail(&r->out, r->per);
	unsigned char *frame;

	if (n == 0)
		return 0;
	frame = net_ucx_window_next(&r->u, &r->w);
	if (frame == NULL)
		return -EPROTO;
	for (uint32_t k = 0; k < n; k++)
		bench_copy(frame + (size_t)k * payload, plain_cons_slot(&r->out, k), payload);
	plain_cons_release(&r->out, n);
	return net_ucx_window_send(&r->u, &r->w, NET_UCX_AM_DATA, (size_t)n * payload);
}

/* Until the side says stop. 0 or a negative errno (said). */
static int relay_loop(struct relay *r)
{
	/* A2: pairs with R2 in side_close(); nothing is published with it. */
	while (!shoal_load_acquire(&r->sh->stop)) {
		uint64_t frames = r->frames;
		int sent = relay_send(r);

		if (sent < 0)
			return sent;
		if (sent == 0)
			ucp_worker_progress(r->u.worker);
		if (r->u.err < 0)
			return net_fail(r->s, r->u.err, "plain-relay: a bad frame came");
		if (sent > 0 || r->frames != frames)
			idle_work(&r->idle);
		else
			idle_wait(&r->idle);
	}
	return 0;
}

/* The relay process's body; exit status. */
static int relay_main(struct net_side *s, struct relay_shared *sh, size_t map_len, bool routed)
{
	uint32_t payload = s->p->payload;
	struct relay r = { .s = s, .sh = sh, .per = s->p->frame / payload };
	int ring_out = routed ? RING_XOUT : RING_OUT, ring_in = routed ? RING_XIN : RING_IN;
	int ret = 0;

	/* Pinned as its side is (inherited): both of a host on one CPU. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	touch((const unsigned char *)sh, map_len, &s->sink);
	if (ret == 0 &&
	    (plain_cons_attach(&r.out, ring_at(sh, payload, ring_out), ring_len(payload)) < 0 ||
	     plain_prod_attach(&r.in, ring_at(sh, payload, ring_in), ring_len(payload)) < 0))
		ret = net_fail(s, -EINVAL, "plain-relay: the rings");
	/* On failure, the other host's relay waits at the first round: this
	 * side's failure ends the sample (bench_pair_run()). */
	if (ret == 0)
		ret = net_ucx_setup(&r.u, s);
	if (ret == 0)
		ret = net_ucx_set_handler(&r.u, NET_UCX_AM_DATA, on_frame, &r);
	if (ret == 0)
		ret = net_ucx_window_init(&r.u, &r.w, (size_t)r.per * payload);
	relay_set_state(&r, ret < 0 ? ret : RELAY_UP);
	if (ret == 0) {
		ret = relay_loop(&r);
		if (ret < 0)
			relay_set_state(&r, ret);
	}
	ret = net_ucx_window_end(&r.u, &r.w, ret);
	net_ucx_close(&r.u);
	return ret < 0 ? 1 : 0;
}

/* ---- the sides ---- */

/* Map and lay out the shared part, fork the relay (and, `routed`, the
 * forwarder), wait until the relay is connected. 0 or a negative errno
 * (said); side_close() in any case. */
static int side_open(struct rside *r, struct net_side *s, bool routed)
{
	uint32_t payload = s->p->payload;
	uint64_t rl = ring_len(payload);
	int32_t st;
	void *mem;

	memset(r, 0, sizeof(*r));
	r->s = s;
	/* For this side and, inherited, its relay and forwarder. */
	prctl(PR_SET_TIMERSLACK, SLACK_NS);
	r->map_len = sizeof(struct relay_shared) + n_rings(routed) * rl;
	mem = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		r->sh = NULL;
		return net_fail(s, -errno, "plain-relay: mmap: %s", strerror(errno));
	}
	r->sh = mem;
	/* Every page made now, before the fork and the clock. */
	memset(mem, 0, r->map_len);
	for (unsigned i = 0; i < n_rings(routed); i++)
		if (plain_ring_init(ring_at(r->sh, payload, (int)i), rl, payload,
				    RING_BYTES / payload) < 0)
			return net_fail(s, -EINVAL, "plain-relay: a ring of %u B slots", payload);
	if (plain_prod_attach(&r->out, ring_at(r->sh, payload, RING_OUT), rl) < 0 ||
	    plain_cons_attach(&r->in, ring_at(r->sh, payload, RING_IN), rl) < 0)
		return net_fail(s, -EINVAL, "plain-relay: a ring of %u B slots", payload);
	if (routed) {
		r->fwd = fork();
		if (r->fwd < 0)
			return net_fail(s, -errno, "plain-relay: fork: %s", strerror(errno));
		if (r->fwd == 0)
			_exit(fwd_main(s, r->sh, r->map_len));
	}
	r->relay = fork();
	if (r->relay < 0)
		return net_fail(s, -errno, "plain-relay: fork: %s", strerror(errno));
	if (r->relay == 0)
		_exit(relay_main(s, r->sh, r->map_len, routed));
	/* A1 as in side_wait(). */
	while ((st = shoal_load_acquire(&r->sh->state)) == RELAY_STARTING) {
		int ret = side_wait(r);

		if (ret < 0)
			return ret;
	}
	return st < 0 ? st : 0;
}

/* Wait for a child told to stop. Returns ret, or its failure when ret is
 * 0. */
static int child_end(struct rside *r, pid_t pid, const char *what, int ret)
{
	int status;

	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (ret == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		ret = r->s->res->err < 0 ? r->s->res->err :
			net_fail(r->s, -ECHILD, "plain-relay: the %s failed (%d)", what, status);
	return ret;
}

/* Tell the relay and the forwarder to close, wait for them, unmap.
 * Returns ret, or their failure when ret is 0. */
static int side_close(struct rside *r, int ret)
{
	if (r->sh != NULL)
		/* R2: pairs with A2 in relay_loop() and fwd_main(). */
		shoal_store_release(&r->sh->stop, 1u);
	if (r->relay > 0)
		ret = child_end(r, r->relay, "relay", ret);
	if (r->fwd > 0)
		ret = child_end(r, r->fwd, "forwarder", ret);
	if (r->sh != NULL)
		munmap(r->sh, r->map_len);
	return ret;
}

/* Up to `want` slots, waiting for one: of room on out (`room`), or of
 * messages on in. The count, or the relay's failure. */
static int wait_slots(struct rside *r, bool room, uint32_t want)
{
	uint32_t n;
	int ret;

	while ((n = room ? plain_prod_room(&r->out, want) : plain_cons_avail(&r->in, want)) == 0)
		if ((ret = side_wait(r)) < 0)
			return ret;
	idle_work(&r->idle);
	return (int)n;
}

/* Side A, throughput: bursts until the time is up, the last message
 * marked. */
static int tput_send(struct rside *r)
{
	unsigned char msg[NET_PAYLOAD_MAX];
	uint32_t payload = r->s->p->payload;
	uint64_t seq = 0;
	bool last = false;

	bench_msg_fill(msg, payload);
	net_side_ready(r->s);
	while (!last) {
		int n = wait_slots(r, true, BURST);

		if (n < 0)
			return n;
		last = shoal__now_ns() >= r->s->deadline;
		for (int k = 0; k < n; k++) {
			void *slot = plain_prod_slot(&r->out, k);

			bench_copy(slot, msg, payload);
			bench_msg_stamp(slot, payload, (seq + k) | (last && k + 1 == n ? BENCH_STOP : 0));
		}
		plain_prod_publish(&r->out, (uint32_t)n);
		seq += (uint64_t)n;
	}
	r->s->res->msgs = seq;
	net_meet(r->s, NET_ROUND_DONE);
	return 0;
}

/* Side B, throughput: every message checked, to the sender's last. */
static int tput_recv(struct rside *r)
{
	uint32_t payload = r->s->p->payload;
	uint64_t expect = 0;
	int got = 0;

	net_side_ready(r->s);
	while (got != 1) {
		int n = wait_slots(r, false, BURST), k;

		if (n < 0)
			return n;
		for (k = 0; k < n && got == 0; k++)
			got = bench_msg_check(plain_cons_slot(&r->in, k), payload, expect++,
					      &r->s->sink);
		/* Nothing may follow the last message. */
		if (got < 0 || (got == 1 && k != n))
			return net_fail(r->s, -EBADMSG, "plain-relay: message %llu out of order",
					(unsigned long long)(expect - 1));
		plain_cons_release(&r->in, (uint32_t)n);
	}
	r->s->res->t_end = shoal__now_ns();
	r->s->res->msgs = expect;
	net_meet(r->s, NET_ROUND_DONE);
	return 0;
}

/* One message onto out. 0 or the relay's failure. */
static int put(struct rside *r, const void *msg)
{
	int ret = wait_slots(r, true, 1);

	if (ret < 0)
		return ret;
	bench_copy(plain_prod_slot(&r->out, 0), msg, r->s->p->payload);
	plain_prod_publish(&r->out, 1);
	return 0;
}

/* One message from in. 0 or the relay's failure. */
static int take(void *arg, void *msg)
{
	struct rside *r = arg;
	int ret = wait_slots(r, false, 1);

	if (ret < 0)
		return ret;
	bench_copy(msg, plain_cons_slot(&r->in, 0), r->s->p->payload);
	plain_cons_release(&r->in, 1);
	return 0;
}

static int trip(void *arg, const void *msg, void *back)
{
	int ret = put(arg, msg);

	return ret < 0 ? ret : take(arg, back);
}

static int answer(void *arg, const void *msg)
{
	return put(arg, msg);
}

static int relay_run(struct net_side *s, bool routed)
{
	struct rside r;
	int ret = side_open(&r, s, routed);

	if (ret == 0 && s->p->kind == NET_TPUT)
		ret = s->side == 0 ? tput_send(&r) : tput_recv(&r);
	else if (ret == 0 && s->side == 0)
		ret = net_ping(s, trip, &r);
	else if (ret == 0)
		ret = net_pong(s, take, answer, &r);
	if (ret == 0 && s->p->kind == NET_RTT)
		net_meet(s, NET_ROUND_DONE);
	return side_close(&r, ret);
}

static int relay_role(struct net_side *s)
{
	return relay_run(s, false);
}

static int relay_routed_role(struct net_side *s)
{
	return relay_run(s, true);
}

const struct net_contender net_plain_relay = {
	.name = "plain-relay",
	.what = "the direct path's shape with nothing of Shoal: on each host a side and a relay "
		"process joined by plain SPSC rings (bench/plain_ring.h), the relays packing "
		"what their ring holds into one UCP active message each (eager, up to the frame "
		"size, `ucx-batched`'s sender); every process yields between empty looks for "
		"200 µs, then sleeps 20 µs a look; each relay pinned with its side (a host a CPU)",
	.batched = true,
	.role = { [NET_TPUT] = { relay_role, relay_role }, [NET_RTT] = { relay_role, relay_role } },
};

const struct net_contender net_plain_relay_routed = {
	.name = "plain-relay-routed",
	.what = "the routed path's shape with nothing of Shoal: `plain-relay` with a plain "
		"forwarder process on each host between the side and its relay (six processes, "
		"as `shoal-bridge`'s routed stream has: two groups, two routers, two bridges), "
		"each forwarder moving what its input ring holds, up to 256 messages, into its "
		"output ring as one publication, waiting for room; a host's three processes on "
		"its side's CPU (throughput only)",
	.batched = true,
	.role = { [NET_TPUT] = { relay_routed_role, relay_routed_role } },
};
