/* SPDX-License-Identifier: MIT */
/*
 * A link between two bridges over UCP active messages (see link.h and
 * docs/hosts.md, "Links").
 *
 * Why active messages, not UCP streams: one frame is one active message,
 * sent eager, so the receive callback gets exactly one whole frame and the
 * decoder checks it against the size UCP delivered. A stream would need
 * our own length prefix and a reassembly buffer, and a hostile length would
 * have to be bounded before the bytes it announces arrive.
 *
 * Memory picture, all allocated at create:
 *   sq     records queued for the peer, kept until acked: [acked, sent) went
 *          out in frames, [sent, next_seq) wait for the next frame, or,
 *          beyond the peer's credit (a backlog, opts.backlog), for its ack;
 *   rx     records received in order, held until the caller releases them,
 *          as runs of a frame's records in frame encoding: in UCX's own
 *          buffer when UCX lets us keep it (UCP_AM_FLAG_PERSISTENT_DATA,
 *          at most NHELD frames, released with ucp_am_data_release()
 *          after their last record), else copied whole, one memcpy() per
 *          frame, into the link's receive area;
 *   fbuf   NBUF frames in flight: a header each, the records gathered from
 *          sq; one is busy while UCP holds its request.
 * sq holds records as a frame does (8-byte header, padded to 8 bytes), in
 * a power-of-two byte area, so that frames go out from it with no copy;
 * positions are free-running 64-bit byte counters, masked on access. A
 * record never wraps: one that does not fit before the end of the area is
 * preceded by a PAD record to the end (a flag of sq's own, never sent).
 * The receive area works the same way with runs for records: a run that
 * does not fit before the end starts the next lap. What UCX keeps for the
 * link is bounded by the area's size too.
 *
 * Credits are counted in frame bytes (shoal__frame_rec_size()), the same on
 * both sides whatever the queues' padding. The receiver's credit is its
 * window, constant, measured from its ack (records released): everything
 * beyond the ack is held by the receiver or still in flight, so a sender
 * that keeps its unacked bytes within the credit never overruns the
 * receive area. After a peer restart the receiver may hold the old
 * incarnation's records beside a new window's worth, and a run that does
 * not fit before the area's end leaves that room unused for a lap: the
 * area is sized 4 x window plus two largest records, sq 2 x window plus
 * the backlog plus one. A frame carries only what the credit takes
 * (credit_room()); what waits beyond it has no flush deadline, only the
 * peer's next ack.
 *
 * The hub: one UCP context and worker for every link of a host, and one
 * listener. Connections are told apart by endpoint: every frame goes with
 * UCP_AM_SEND_FLAG_REPLY, so am_cb() gets the endpoint it came on and
 * hands it to the link whose connection that is (link_of()), or to the
 * pending slot of an accepted connection that has not named itself yet
 * (pending_of()). A pending connection's HELLO is kept, and acted on by
 * the poll after UCP's progress (adopt()), once failed connections are
 * dropped: a peer's new connection and the failure of its old one often
 * come in one progress, and the old one must not count as alive.
 *
 * Single-threaded (link.h rule 2): UCP callbacks run inside
 * ucp_worker_progress(), called only from this file's functions, on the
 * caller's thread; they touch the hub and its links with no other code
 * running. Only UCX's log handler may run on a thread of UCX's own.
 *
 * Progress: no call waits for the peer. send, flush and poll do a bounded
 * amount of work (poll progresses UCP once); only three places wait for UCX itself, each
 * for something that completes locally: ep_close() when every close slot
 * is taken (a reconnect storm), a link's destroy for its frames in flight,
 * and a hub's destroy for its closes (both bounded at 2 s). A link's
 * destroy may also wait for its connection's handshake (below).
 *
 * Closing a connection UCX is still setting up. UCX 1.13's TCP connection
 * manager (uct/tcp/tcp_sockcm_ep.c) watches the socket of a connection it
 * dials for writability until it has sent its half of the handshake. Its
 * async thread, one per process, takes events from epoll in batches and
 * finds their handler by fd number. An endpoint destroyed in that window
 * frees its fd while the thread may hold a "writable" event for it; if a
 * listener of the same process then accepts a connection into that fd
 * number before the event is handled, the event reaches the new server
 * endpoint, which has nothing to send, and UCX aborts
 * (uct_tcp_sockcm_ep_progress_send(), tcp_sockcm_ep.c:416, the assertion
 * on the endpoint's state). Two hubs of one process, one dialing the
 * other, hit it (tests/bridge_link_test.c,
 * link_destroyed_while_connecting_aborts_nothing). A connection is past
 * that window once a frame came on it (the peer had our half) or UCX said
 * it failed (its fd is no longer watched). The polls close a dialed
 * connection only then, or dead_ns after it began, long after the
 * handshake's sends; only shoal__link_destroy() may close one at any
 * moment, so it first waits, progressing UCP, for one of the two, SETTLE_NS
 * at most (with no answer from the peer's bridge, our half is sent within
 * the first progresses: the TCP connect needs only the peer's kernel, and
 * UCX's thread sends as soon as a progress packed the data). An accepted
 * connection is refused or handed on only after its HELLO, so its
 * handshake is over.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include "runtime/bridge/addr.h"
#include "runtime/bridge/link.h"
#include "shm/util.h"

#define NBUF         4u           /* frame buffers: frames UCP may hold at once */
#define NCLOSING     8u           /* endpoints being closed at once */
#define NPENDING     8u           /* accepted connections not yet named at once */
#define NHELD        64u          /* frames kept in UCX's buffers at once */
/* Runs of received records: held frames, copies between them (consecutive
 * copies join into one run), and the few that a lap of the area or a gap
 * in the numbers splits. An honest peer cannot fill it; a hostile one only
 * gets its frames refused. */
#define NRUN         (4u * NHELD)
#define REC_PAD      1u           /* queue record flag: filler to the end of the area */

#define DEF_WINDOW        (1u << 20)
#define DEF_FLUSH_BYTES   (16u << 10)
#define DEF_FLUSH_NS      50000u
#define DEF_KEEPALIVE_NS  100000000u
#define DEF_DEAD_NS       1000000000u
#define DEF_BACKOFF_NS    50000000u
#define DEF_MAX_BACKOFF_NS 1000000000u
#define DEF_HELLO_NS      1000000000u
/* The longest a link's destroy waits for a connection being set up to be
 * heard or fail before closing it ("Closing a connection UCX is still
 * setting up", above). */
#define SETTLE_NS         100000000u

/* ---- the send queue ------------------------------------------------------ */

/* Records as a frame holds them (shoal__frame_rec_write()), so that a
 * frame is sent from here, gathered, with no copy of its own. Beside them,
 * each live record's frame size in a ring of its own (`sizes`, grown as
 * records come), read when acked records are dropped: their headers, in an
 * area of megabytes written milliseconds before, were cold by then (14 %
 * of the sending bridge's time with 64 B messages, 3.7 % left after). */
struct recq {
	unsigned char *buf;
	uint64_t cap;      /* power of two */
	uint64_t head;     /* first live record (may be a PAD) */
	uint64_t tail;     /* next free byte */
	uint64_t n;        /* live records, PADs not counted */
	uint64_t bytes;    /* their frame sizes (credit accounting) */
	uint32_t *sizes;   /* record i of the live ones at sizes[(first + i) & (n_sizes - 1)]:
			    * its frame size, SIZE_PAD_BEFORE if a PAD precedes it */
	uint64_t n_sizes;  /* power of two, at least n */
	uint64_t first;    /* records dropped so far */
	bool pad_before;   /* a PAD was written since the last record queued */
};

#define SIZE_PAD_BEFORE (UINT32_C(1) << 31)   /* frame sizes are < 2^31 */
#define SIZES_MIN 1024u

/*
 * A queue's area, `cap` bytes (a multiple of the page), its pages made
 * present at create: left to fault in, the first lap of an 8 MiB area
 * faults every 4 KiB (every 30 records of 64 B), each fault some
 * microseconds on this VM: 15 % of the sending bridge's CPU time in a
 * 300 ms sample of shoal-bench-net (bench/SUITE.md, "The bridge at 64 B, process by
 * process"). NULL: out of memory.
 */
static void *area_alloc(uint64_t cap)
{
	void *p = aligned_alloc(4096, cap);

	if (p != NULL && madvise(p, cap, MADV_POPULATE_WRITE) != 0)
		memset(p, 0, cap);
	return p;
}

static int recq_init(struct recq *q, uint64_t min_cap)
{
	uint64_t cap = 4096;

	while (cap < min_cap)
		cap <<= 1;
	q->buf = area_alloc(cap);
	q->sizes = malloc(SIZES_MIN * sizeof(*q->sizes));
	if (!q->buf || !q->sizes) {
		free(q->buf);
		free(q->sizes);
		return -ENOMEM;
	}
	q->cap = cap;
	q->n_sizes = SIZES_MIN;
	q->head = q->tail = q->n = q->bytes = q->first = 0;
	q->pad_before = false;
	return 0;
}

/* `sizes` twice as large, for one more record than it holds: false
 * (nothing changed) when it cannot grow. */
static __attribute__((noinline)) bool recq_sizes_grow(struct recq *q)
{
	uint64_t cap = q->n_sizes * 2;
	uint32_t *grown = malloc(cap * sizeof(*grown));

	if (grown == NULL)
		return false;
	for (uint64_t i = 0; i < q->n; i++)
		grown[(q->first + i) & (cap - 1)] = q->sizes[(q->first + i) & (q->n_sizes - 1)];
	free(q->sizes);
	q->sizes = grown;
	q->n_sizes = cap;
	return true;
}

static unsigned char *recq_at(const struct recq *q, uint64_t pos)
{
	return q->buf + (pos & (q->cap - 1));
}

/* The size of the record at p, PAD or not. */
static uint64_t recq_size(const unsigned char *p)
{
	return shoal__frame_rec_size(shoal__frame_rec_len(p));
}

/* Room for up to `n` records of `size` frame bytes each at the tail, one
 * after the other and contiguous: where the first's header goes, after a
 * PAD to the end of the area when one does not fit before, and in *got how
 * many fit (1 to n); NULL (nothing changed) when none does. Sizes are
 * multiples of the record header's, so the room left before the end of the
 * area always holds at least a PAD's header. A PAD left at the tail by a
 * reservation not committed is harmless: the next record follows it. */
static unsigned char *recq_reserve(struct recq *q, uint64_t size, uint64_t n, uint32_t *got)
{
	uint64_t room_to_end = q->cap - (q->tail & (q->cap - 1));
	uint64_t pad = room_to_end < size ? room_to_end : 0;
	uint64_t used = q->tail + pad - q->head;

	if (used + size > q->cap ||
	    (SHOAL_UNLIKELY(q->n == q->n_sizes) && !recq_sizes_grow(q)))
		return NULL;
	if (n > 1) {
		uint64_t fit = (q->cap - used) / size, contiguous = (pad ? q->cap : room_to_end) / size;

		n = n < fit ? n : fit;
		n = n < contiguous ? n : contiguous;
		/* Grown once at most; what still does not fit waits. */
		if (q->n + n > q->n_sizes)
			(void)recq_sizes_grow(q);
		if (q->n + n > q->n_sizes)
			n = q->n_sizes - q->n;
	}
	if (pad) {
		shoal__frame_rec_write(recq_at(q, q->tail), NULL,
				       (uint32_t)(pad - SHOAL__FRAME_REC_HDR), 0, REC_PAD);
		q->tail += pad;
		q->pad_before = true;
	}
	*got = (uint32_t)n;
	return recq_at(q, q->tail);
}

/* The first `k` records written where recq_reserve() said are queued. */
static void recq_commit(struct recq *q, uint64_t size, uint32_t k)
{
	uint64_t at = q->first + q->n;

	q->sizes[at & (q->n_sizes - 1)] = (uint32_t)size | (q->pad_before ? SIZE_PAD_BEFORE : 0);
	for (uint32_t i = 1; i < k; i++)
		q->sizes[(at + i) & (q->n_sizes - 1)] = (uint32_t)size;
	q->pad_before = false;
	q->tail += size * k;
	q->n += k;
	q->bytes += size * k;
}

/* Skip a PAD at *pos: the position of the record there. */
static uint64_t recq_skip_pad(const struct recq *q, uint64_t pos)
{
	const unsigned char *p = recq_at(q, pos);

	return shoal__frame_rec_flags(p) & REC_PAD ? pos + recq_size(p) : pos;
}

/* Drop the first record; its frame size. From `sizes`, not its header:
 * a PAD before it runs to the end of the area, so the record starts the
 * next lap. */
static uint64_t recq_pop(struct recq *q)
{
	uint32_t e = q->sizes[q->first & (q->n_sizes - 1)];
	uint64_t size = e & ~SIZE_PAD_BEFORE, pos = q->head;

	SHOAL_ASSERT(q->n != 0);
	if (e & SIZE_PAD_BEFORE)
		pos = (pos & ~(q->cap - 1)) + q->cap;
	q->head = pos + size;
	q->n--;
	q->bytes -= size;
	q->first++;
	return size;
}

/* ---- received records ---------------------------------------------------- */

/* Records of one frame, in frame encoding, released in order. */
struct rrun {
	const unsigned char *p;    /* the next record's header */
	uint32_t left;             /* records not yet released */
	uint64_t seq;              /* the next record's number */
	void *ucx;                 /* UCX's buffer, released after the last record; or NULL */
	uint32_t ucx_len;          /* its bytes, the whole frame */
	uint64_t area_end;         /* a copy: the area's position after it */
};

struct rxq {
	struct rrun *runs;         /* NRUN */
	uint64_t run_head, run_tail;
	unsigned char *area;
	uint64_t cap;              /* power of two */
	uint64_t head, tail;       /* free-running byte positions */
	uint64_t n;                /* records held */
	uint32_t n_ucx;            /* runs in UCX's buffers */
	uint64_t ucx_bytes;        /* their frames' bytes: at most cap */
};

static struct rrun *rx_front(const struct rxq *q)
{
	return &q->runs[q->run_head & (NRUN - 1)];
}

/* `bytes` contiguous in the area, at the tail or at the start of the next
 * lap: where, with the tail after them in *end; NULL when they do not fit. */
static unsigned char *area_take(const struct rxq *q, uint64_t bytes, uint64_t *end)
{
	uint64_t start = q->tail;
	uint64_t off = start & (q->cap - 1);

	if (off + bytes > q->cap)
		start += q->cap - off;
	if (start + bytes - q->head > q->cap)
		return NULL;
	*end = start + bytes;
	return q->area + (start & (q->cap - 1));
}

/* ---- the link ------------------------------------------------------------ */

/* A frame in flight: its header here, its records in sq (at most two
 * pieces: a frame spans at most one end of the area). */
struct fbuf {
	unsigned char hdr[SHOAL__FRAME_HDR];
	ucp_dt_iov_t iov[3];
	bool busy;         /* UCP holds it: a request in flight */
};

struct shoal__link {
	struct shoal__link_opts o;
	struct shoal__link_hub *hub;
	bool owns_hub;                  /* a link alone: its hub goes with it */
	char peer[SHOAL__LINK_NAME_MAX];   /* "" : whoever connects */
	/* Our HELLO's header; UCX 1.13 reads it when it sends, which may be
	 * after ucp_am_send_nbx() returns, so it lives as long as the link. */
	struct shoal__link_hello_id hello_id;
	struct sockaddr_storage addr;   /* CONNECT: the peer's */
	socklen_t addr_len;

	/* The connection. */
	ucp_ep_h ep;
	bool ep_failed;                 /* UCP reported the current endpoint failed */
	bool ep_heard;                  /* a frame came on it: UCX's handshake is over */
	uint32_t state;
	uint64_t now;                   /* of the poll in progress */
	uint64_t last_rx, last_tx;
	uint64_t retry_at;              /* CONNECT: next attempt while DOWN */
	uint64_t backoff;

	/* Send side. */
	struct recq sq;
	uint64_t next_seq;
	uint64_t acked;                 /* seq of sq's first record */
	uint64_t sent;                  /* seq of the first record not sent on this connection */
	uint64_t sent_max;              /* seq of the first record never sent on any */
	uint64_t send_pos;              /* its position in sq */
	uint64_t unsent_bytes;
	uint64_t unsent_since;          /* when the oldest unsent record was queued */
	uint32_t peer_credits;
	uint32_t reserved;              /* frame bytes of each record reserved; 0: none */
	uint32_t reserved_n;            /* how many were */
	bool hello_due;
	uint64_t probe_seq;             /* 0, or the ack that ends the round trip timed */
	uint64_t probe_at;              /* when that frame went */

	/* Receive side. */
	struct rxq rx;
	uint32_t peer_epoch;
	uint64_t recv_next;             /* next seq expected */
	uint64_t recv_ack;              /* every seq below it is released (or skipped) */
	uint64_t ack_sent;              /* recv_ack as last told to the peer */
	uint64_t ack_due;               /* 0, or when an ACK must go out */
	uint64_t released_bytes;        /* frame bytes released since the last ack sent */
	uint64_t rq_old;                /* records held from the peer's previous epoch */
	uint32_t peeked;                /* records the last peek gave; 0: none */

	struct fbuf fb[NBUF];
	uint32_t fbuf_cap;              /* a frame's largest size */
	struct shoal__link_stats st;
};

/* An accepted connection that has not named itself yet. */
struct pending {
	ucp_ep_h ep;                    /* NULL: the slot is free */
	uint64_t since;
	bool failed;
	bool named;                     /* its HELLO came: `hello` and `id` are set */
	struct shoal__frame_hdr hello;
	struct shoal__link_hello_id id;
};

struct shoal__link_hub {
	char name[SHOAL__LINK_NAME_MAX];
	uint64_t hello_ns;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	bool listening;
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_listener_h listener;
	int efd;
	uint64_t now;
	struct shoal__link *links[SHOAL__LINK_HUB_MAX];
	uint32_t n_links;
	struct shoal__link *last;       /* the link the last frame went to */
	bool kept;                      /* the frame in am_cb() stays in UCX's buffer */
	ucp_conn_request_h conn_req[NPENDING];   /* offered by UCP, not yet accepted */
	uint32_t n_conn_req;
	struct pending pend[NPENDING];
	void *closing[NCLOSING];        /* endpoint close requests not yet done */
	uint32_t n_closing;             /* of them */
	struct shoal__link_hub_stats st;
};

static int ucs_errno(ucs_status_t s)
{
	switch (s) {
	case UCS_OK:
		return 0;
	case UCS_ERR_NO_MEMORY:
		return -ENOMEM;
	case UCS_ERR_INVALID_PARAM:
	case UCS_ERR_INVALID_ADDR:
		return -EINVAL;
	case UCS_ERR_BUSY:
		return -EADDRINUSE;
	case UCS_ERR_UNREACHABLE:
		return -EHOSTUNREACH;
	default:
		return -EIO;
	}
}

static uint32_t draw_epoch(void)
{
	uint32_t e = 0;

	while (e == 0) {
		if (getrandom(&e, sizeof(e), 0) != sizeof(e))
			e = (uint32_t)shoal__now_ns() ^ (uint32_t)getpid() << 16;
	}
	return e;
}

/* ---- sending frames ------------------------------------------------------ */

static void sent_cb(void *req, ucs_status_t status, void *user)
{
	struct fbuf *f = user;

	/* A frame that failed is not retried here: its records stay in sq
	 * until acked and go again after the reconnect that follows. */
	(void)status;
	f->busy = false;
	ucp_request_free(req);
}

static struct fbuf *fbuf_free(struct shoal__link *l)
{
	for (unsigned i = 0; i < NBUF; i++)
		if (!l->fb[i].busy)
			return &l->fb[i];
	return NULL;
}

/* Hand a finished frame to UCP: f's `niov` pieces (its header, then its
 * records in sq), with `hdr` as the active message's header (a HELLO's
 * identity, else none). Returns 0, or -ENOTCONN after marking the endpoint
 * failed (the poll then drops the connection).
 *
 * The records' bytes stay in sq, unchanged, until the peer acks them,
 * which it cannot before UCP sent them; or until the peer restarted,
 * which it says on a new connection, after the one these went on was
 * closed, forced, which drops its sends unsent. */
static int frame_out(struct shoal__link *l, struct fbuf *f, unsigned niov, const void *hdr,
		     size_t hdr_len)
{
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE,
		.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY,
		.cb.send = sent_cb,
		.user_data = f,
		.datatype = ucp_dt_make_iov(),
	};
	ucs_status_ptr_t r;

	if (l->ep == NULL)
		return -ENOTCONN;
	r = ucp_am_send_nbx(l->ep, SHOAL__LINK_AM_ID, hdr, hdr_len, f->iov, niov, &p);
	if (UCS_PTR_IS_ERR(r)) {
		l->ep_failed = true;
		return -ENOTCONN;
	}
	if (r != NULL)
		f->busy = true;
	l->st.frames_sent++;
	l->last_tx = l->now;
	return 0;
}

/* Write the header into f, its first piece. */
static void end_frame(struct shoal__link *l, struct fbuf *f, struct shoal__frame_enc *e,
		      uint64_t first_seq)
{
	l->ack_sent = l->recv_ack;
	l->ack_due = 0;
	l->released_bytes = 0;
	shoal__frame_end(e, l->st.epoch, first_seq, l->recv_ack, l->o.window);
	f->iov[0] = (ucp_dt_iov_t){ .buffer = f->hdr, .length = SHOAL__FRAME_HDR };
}

/* A HELLO or an ACK: no records. */
static int send_control(struct shoal__link *l, uint8_t kind)
{
	struct fbuf *f = fbuf_free(l);
	struct shoal__frame_enc e;
	uint64_t first = kind == SHOAL__FRAME_HELLO ? l->acked : l->next_seq;

	if (!f || !l->ep)
		return -EAGAIN;
	SHOAL_ASSERT(shoal__frame_begin(&e, f->hdr, SHOAL__FRAME_HDR, kind) == 0);
	end_frame(l, f, &e, first);
	if (kind != SHOAL__FRAME_HELLO)
		return frame_out(l, f, 1, NULL, 0);
	return frame_out(l, f, 1, &l->hello_id, sizeof(l->hello_id));
}

/* Frame bytes of unsent records that the peer's credit takes now: the
 * credit less what went and is not acked yet. Records beyond it (the
 * backlog, opts.backlog) wait in sq for the peer's next ack. */
static uint64_t credit_room(const struct shoal__link *l)
{
	uint64_t out = l->sq.bytes - l->unsent_bytes;

	return l->peer_credits > out ? l->peer_credits - out : 0;
}

/* Frame bytes that may go now: unsent, within the credit. */
static uint64_t sendable(const struct shoal__link *l)
{
	uint64_t room = credit_room(l);

	return l->unsent_bytes < room ? l->unsent_bytes : room;
}

/* Whether the first unsent record may go now (a flush would send it). */
static bool can_send(const struct shoal__link *l)
{
	const struct recq *q = &l->sq;

	return l->unsent_bytes != 0 &&
	       recq_size(recq_at(q, recq_skip_pad(q, l->send_pos))) <= credit_room(l);
}

/* One DATA frame from the unsent records, as many as the peer's credit
 * takes, up to flush_bytes of them (or the one record, when it is larger).
 * Returns 1 when one went, 0 when nothing was unsent or the credit takes
 * none, -EAGAIN without a free buffer, -ENOTCONN.
 *
 * Why flush_bytes, not the frame buffer's size: once a backlog waits in
 * sq, the credit an ack brings back is a quarter of a window or more, and a
 * frame of all of it (up to 1 MiB, one eager message) reaches the peer
 * whole or not at all: the peer released nothing, so acked nothing, until
 * its last byte came, and the two bridges took turns being idle (1 KiB
 * messages, shoal-bench-net: idle CPU 0.6 -> 3.3 us a message). */
static int send_data(struct shoal__link *l)
{
	struct recq *q = &l->sq;
	struct fbuf *f;
	struct shoal__frame_enc e;
	uint64_t first = l->sent, pos, piece, credit = credit_room(l), head;
	uint32_t room = l->fbuf_cap - SHOAL__FRAME_HDR, bytes = 0;
	unsigned niov = 1;
	int ret;

	if (l->sent == l->next_seq)
		return 0;
	f = fbuf_free(l);
	if (!f)
		return -EAGAIN;
	pos = piece = recq_skip_pad(q, l->send_pos);
	head = recq_size(recq_at(q, pos));
	if (head > credit)
		return 0;
	if (room > l->o.flush_bytes)
		room = head > l->o.flush_bytes ? (uint32_t)head : l->o.flush_bytes;
	if (room > credit)
		room = (uint32_t)credit;
	SHOAL_ASSERT(shoal__frame_begin(&e, f->hdr, l->fbuf_cap, SHOAL__FRAME_DATA) == 0);
	while (l->sent < l->next_seq) {
		uint64_t size = recq_size(recq_at(q, pos));

		if (size > room - bytes)
			break;
		bytes += (uint32_t)size;
		pos += size;
		l->sent++;
		if (l->sent < l->next_seq && (pos & (q->cap - 1)) == 0) {
			/* The end of the area: the frame goes on at its start. */
			f->iov[niov++] = (ucp_dt_iov_t){ .buffer = recq_at(q, piece),
							 .length = pos - piece };
			piece = pos;
		} else if (l->sent < l->next_seq) {
			uint64_t next = recq_skip_pad(q, pos);

			if (next != pos) {
				f->iov[niov++] = (ucp_dt_iov_t){ .buffer = recq_at(q, piece),
								 .length = pos - piece };
				pos = piece = next;
			}
		}
	}
	/* The frame holds its first record (checked above): it is never
	 * empty. It spans the area's end at most once: sq holds less than a
	 * lap. */
	SHOAL_ASSERT(bytes > 0 && niov < 3);
	if (pos != piece)
		f->iov[niov++] = (ucp_dt_iov_t){ .buffer = recq_at(q, piece), .length = pos - piece };
	SHOAL_ASSERT(shoal__frame_add_laid(&e, (uint32_t)(l->sent - first), bytes) == 0);
	l->send_pos = pos;
	l->unsent_bytes -= bytes;
	/* [first, sent_max) went before, on an earlier connection. */
	if (l->sent > l->sent_max) {
		l->st.resent += l->sent_max - first;
		l->st.records_sent += l->sent - l->sent_max;
		l->sent_max = l->sent;
	} else {
		l->st.resent += l->sent - first;
	}
	end_frame(l, f, &e, first);
	ret = frame_out(l, f, niov, NULL, 0);
	if (ret < 0)
		return ret;
	l->unsent_since = l->now;
	/* One round trip timed at a time: this frame's, until its ack. */
	if (l->probe_seq == 0) {
		l->probe_seq = l->sent;
		l->probe_at = l->now;
	}
	return 1;
}

/* Send every unsent record the frame buffers take. */
static int flush(struct shoal__link *l)
{
	int ret;

	if (l->state != SHOAL__LINK_UP)
		return -EAGAIN;
	while ((ret = send_data(l)) > 0)
		;
	return ret;
}

/* Send full frames only: what is left, less than flush_bytes, waits for
 * more records or the flush deadline. Flushing the remainder too sent a
 * frame of one record after every full one (bench/SUITE.md, "What the link
 * costs"): twice the UCX sends, and two frame buffers taken per flush. */
static void flush_full(struct shoal__link *l)
{
	while (l->state == SHOAL__LINK_UP && sendable(l) >= l->o.flush_bytes && send_data(l) > 0)
		;
}

/* ---- connections --------------------------------------------------------- */

static struct shoal__link *link_of(struct shoal__link_hub *h, ucp_ep_h ep)
{
	if (h->last != NULL && h->last->ep == ep)
		return h->last;
	for (uint32_t i = 0; i < h->n_links; i++)
		if (h->links[i]->ep == ep)
			return h->last = h->links[i];
	return NULL;
}

static struct pending *pending_of(struct shoal__link_hub *h, ucp_ep_h ep)
{
	for (unsigned i = 0; i < NPENDING; i++)
		if (h->pend[i].ep == ep)
			return &h->pend[i];
	return NULL;
}

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct shoal__link_hub *h = arg;
	struct shoal__link *l = link_of(h, ep);
	struct pending *p = l == NULL ? pending_of(h, ep) : NULL;

	(void)status;
	if (l != NULL)
		l->ep_failed = true;
	if (p != NULL)
		p->failed = true;
}

static void reap_closing(struct shoal__link_hub *h)
{
	for (unsigned i = 0; i < NCLOSING; i++)
		if (h->closing[i] && ucp_request_check_status(h->closing[i]) != UCS_INPROGRESS) {
			ucp_request_free(h->closing[i]);
			h->closing[i] = NULL;
			h->n_closing--;
		}
}

/* Start closing `ep`, forced: its frames in flight are dropped (their
 * records are still in sq). */
static void ep_close(struct shoal__link_hub *h, ucp_ep_h ep)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);

	if (r == NULL || UCS_PTR_IS_ERR(r))
		return;
	for (;;) {
		for (unsigned slot = 0; slot < NCLOSING; slot++)
			if (!h->closing[slot]) {
				h->closing[slot] = r;
				h->n_closing++;
				return;
			}
		/* Every slot in use: a reconnect storm. Wait for one. */
		ucp_worker_progress(h->worker);
		reap_closing(h);
	}
}

/* The connection is gone: close it and, when connecting, try again after
 * the backoff. Records sent on it go again after the next HELLO. */
static void conn_drop(struct shoal__link *l)
{
	if (l->state == SHOAL__LINK_UP)
		l->st.down_since_ns = l->now;
	if (l->ep) {
		ep_close(l->hub, l->ep);
		l->ep = NULL;
		l->st.broken++;
	}
	l->ep_failed = false;
	l->state = SHOAL__LINK_DOWN;
	l->hello_due = false;
	l->probe_seq = 0;
	l->retry_at = l->now + l->backoff;
	l->backoff = l->backoff * 2 < l->o.max_backoff_ns ? l->backoff * 2 : l->o.max_backoff_ns;
}

static void ep_params_errors(struct shoal__link_hub *h, ucp_ep_params_t *p)
{
	p->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	p->err_mode = UCP_ERR_HANDLING_MODE_PEER;
	p->err_handler.cb = ep_err_cb;
	p->err_handler.arg = h;
}

/* The link takes connection `ep`, whose HELLO comes first (CONNECT: ours;
 * LISTEN: the peer's, already received: the caller takes it next). */
static void conn_begin(struct shoal__link *l, ucp_ep_h ep)
{
	if (l->state == SHOAL__LINK_UP)
		l->st.down_since_ns = l->now;
	l->ep = ep;
	/* LISTEN: its HELLO came on it already. */
	l->ep_heard = l->o.role == SHOAL__LINK_LISTEN;
	l->state = SHOAL__LINK_CONNECTING;
	l->last_rx = l->now;
	l->hello_due = true;
}

static void conn_connect(struct shoal__link *l)
{
	ucp_ep_params_t p = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = { .addr = (const struct sockaddr *)&l->addr, .addrlen = l->addr_len },
	};
	ucp_ep_h ep;

	ep_params_errors(l->hub, &p);
	if (ucp_ep_create(l->hub->worker, &p, &ep) != UCS_OK) {
		l->st.broken++;
		conn_drop(l);
		return;
	}
	conn_begin(l, ep);
}

__attribute__((format(printf, 2, 3)))
static void hub_refuse(struct shoal__link_hub *h, const char *fmt, ...)
{
	va_list ap;

	h->st.refused++;
	va_start(ap, fmt);
	vsnprintf(h->st.last_refusal.msg, sizeof(h->st.last_refusal.msg), fmt, ap);
	va_end(ap);
}

static void conn_cb(ucp_conn_request_h req, void *arg)
{
	struct shoal__link_hub *h = arg;

	if (h->n_conn_req == NPENDING) {
		ucp_listener_reject(h->listener, req);
		hub_refuse(h, "%u connections waiting to be accepted already", NPENDING);
		return;
	}
	h->conn_req[h->n_conn_req++] = req;
}

static void pending_close(struct shoal__link_hub *h, struct pending *p)
{
	ep_close(h, p->ep);
	memset(p, 0, sizeof(*p));
}

/* Accept the connections UCP offered, each into a free pending slot. */
static void accept_all(struct shoal__link_hub *h)
{
	for (uint32_t i = 0; i < h->n_conn_req; i++) {
		ucp_ep_params_t p = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST,
				      .conn_request = h->conn_req[i] };
		struct pending *slot = pending_of(h, NULL);

		if (slot == NULL) {
			ucp_listener_reject(h->listener, h->conn_req[i]);
			hub_refuse(h, "%u connections waiting to name themselves already",
				   NPENDING);
			continue;
		}
		ep_params_errors(h, &p);
		if (ucp_ep_create(h->worker, &p, &slot->ep) != UCS_OK) {
			slot->ep = NULL;
			hub_refuse(h, "a connection UCX could not accept");
			continue;
		}
		slot->since = h->now;
	}
	h->n_conn_req = 0;
}

/* ---- receiving frames ---------------------------------------------------- */

static void refuse(struct shoal__link *l, const struct shoal_err *why)
{
	l->st.refused++;
	l->st.last_refusal = *why;
}

/* The peer's ack (at most sent_max, checked by frame_take()) and credit. */
static void take_ack(struct shoal__link *l, uint64_t ack, uint32_t credits)
{
	/* An ack below ours is older news (a frame from before a reconnect, or
	 * a restarted peer's first HELLO): its credit is measured from a point
	 * we passed, so it is ignored with it. */
	if (ack < l->acked)
		return;
	while (l->acked < ack) {
		if (l->sent == l->acked) {
			/* Acked before this connection sent it again: it
			 * went on the connection before. */
			l->unsent_bytes -= recq_pop(&l->sq);
			l->sent++;
			l->send_pos = l->sq.head;
		} else {
			recq_pop(&l->sq);
		}
		l->acked++;
	}
	if (l->probe_seq != 0 && ack >= l->probe_seq) {
		uint64_t rtt = l->now - l->probe_at;

		/* Smoothed as TCP does (RFC 6298): 7/8 old, 1/8 new. */
		l->st.rtt_ns = l->st.rtt_ns ? l->st.rtt_ns - l->st.rtt_ns / 8 + rtt / 8 : rtt;
		l->probe_seq = 0;
	}
	l->peer_credits = credits;
}

/* Hold `n` records numbered from `first`, the `bytes` at p of a frame:
 * in UCX's buffer `ucx` of `len` bytes (NULL: UCX keeps it) when allowed,
 * else copied. What UCX keeps for us is bounded as the area is, so that a
 * peer's frames of few new records never pin more than that.
 * Returns 0, or -ENOBUFS (nothing changed) when no room is left, which an
 * honest peer never causes (the credit bounds it). */
static int run_add(struct shoal__link *l, const unsigned char *p, uint64_t bytes, uint32_t n,
		   uint64_t first, void *ucx, uint32_t len)
{
	struct rxq *q = &l->rx;
	uint64_t runs = q->run_tail - q->run_head;
	struct rrun *last = runs ? &q->runs[(q->run_tail - 1) & (NRUN - 1)] : NULL;
	unsigned char *dst;
	uint64_t end;

	/* Records must stay 8-byte aligned (docs/hosts.md, "A frame"): an
	 * odd buffer of UCX's is copied into the area, which is. */
	if (ucx != NULL && q->n_ucx < NHELD && runs < NRUN && ((uintptr_t)p & 7u) == 0 &&
	    q->ucx_bytes + len <= q->cap) {
		q->runs[q->run_tail++ & (NRUN - 1)] = (struct rrun){
			.p = p, .left = n, .seq = first, .ucx = ucx, .ucx_len = len };
		q->n_ucx++;
		q->ucx_bytes += len;
		l->hub->kept = true;
	} else {
		dst = area_take(q, bytes, &end);
		if (dst == NULL)
			return -ENOBUFS;
		/* Joined to the run before when it follows it in the area,
		 * but never across the area's end: a run is walked straight
		 * on in memory. */
		if (last != NULL && last->ucx == NULL && last->area_end == end - bytes &&
		    ((end - bytes) & (q->cap - 1)) != 0 && last->seq + last->left == first) {
			last->left += n;
			last->area_end = end;
		} else if (runs < NRUN) {
			q->runs[q->run_tail++ & (NRUN - 1)] =
				(struct rrun){ .p = dst, .left = n, .seq = first, .area_end = end };
		} else {
			return -ENOBUFS;
		}
		memcpy(dst, p, bytes);
		q->tail = end;
	}
	if (q->n == l->rq_old)
		l->recv_ack = first;
	q->n += n;
	return 0;
}

/* A frame's records from recv_next on (those below are duplicates), held
 * as one run; `ucx` as for run_add(). A record over the size limits is
 * refused with those after it. */
static int take_records(struct shoal__link *l, const void *buf, const struct shoal__frame_hdr *h,
			void *ucx)
{
	/* The frame decoded: every record's bounds hold, so the walk reads
	 * lengths only (peek reads the rest). */
	const unsigned char *p = (const unsigned char *)buf + SHOAL__FRAME_HDR;
	const unsigned char *start = NULL;
	uint64_t seq = h->first_seq;
	uint64_t first = 0, bytes = 0;
	uint32_t n = 0;
	int ret = 0;

	for (uint32_t i = 0; i < h->count; i++, seq++) {
		uint32_t len = shoal__frame_rec_len(p);
		uint32_t size = shoal__frame_rec_size(len);

		if (seq < l->recv_next) {
			l->st.duplicates++;
			p += size;
			continue;
		}
		if (len > l->o.max_record || size > l->o.window) {
			ret = -EMSGSIZE;
			break;
		}
		if (n++ == 0) {
			start = p;
			first = seq;
		}
		bytes += size;
		p += size;
	}
	if (n == 0)
		return ret;
	if (run_add(l, start, bytes, n, first, ucx, h->len) < 0)
		return -ENOBUFS;
	if (first > l->recv_next)
		l->st.gaps += first - l->recv_next;
	l->recv_next = first + n;
	l->st.records_recv += n;
	return ret;
}

/* The receive side restarts from `first`: what is held stays; anything
 * below `first` not received was skipped by the peer. */
static void recv_jump(struct shoal__link *l, uint64_t first)
{
	if (first > l->recv_next) {
		l->st.gaps += first - l->recv_next;
		l->recv_next = first;
	}
	if (l->rx.n == l->rq_old && l->recv_ack != l->recv_next) {
		l->recv_ack = l->recv_next;
		l->ack_due = l->now;
	}
}

/* Only ever called for a frame of the link's current connection (am_cb,
 * adopt()), so the link goes UP with an endpoint to send on. */
static void take_hello(struct shoal__link *l, const struct shoal__frame_hdr *h)
{
	SHOAL_ASSERT(l->ep != NULL);
	if (l->peer_epoch != h->epoch) {
		if (l->peer_epoch != 0) {
			/* The peer restarted: what it had not acked may have been
			 * handed on or not. Counted, never sent twice. What
			 * never went (the backlog) goes to the new peer. */
			l->st.lost_link += l->sent_max - l->acked;
			while (l->acked < l->sent_max) {
				recq_pop(&l->sq);
				l->acked++;
			}
			l->peer_credits = 0;
			/* Tell the new peer where our numbers start now. */
			l->hello_due = true;
			/* What we hold of its previous life is still handed on,
			 * but our acks now count in its new numbering. */
			l->rq_old = l->rx.n;
			l->recv_next = h->first_seq;
		} else {
			l->recv_next = h->first_seq;
			l->recv_ack = h->first_seq;
		}
		l->peer_epoch = h->epoch;
	}
	recv_jump(l, h->first_seq);
	/* Everything not acked goes again on this connection. */
	l->sent = l->acked;
	l->send_pos = l->sq.head;
	l->unsent_bytes = l->sq.bytes;
	l->unsent_since = l->now;
	l->probe_seq = 0;
	if (l->state != SHOAL__LINK_UP)
		l->st.connects++;
	l->state = SHOAL__LINK_UP;
	l->backoff = l->o.backoff_ns;
}

/* A frame decoded into *h, from the link's connection: check it against
 * the link's state and take it. `ucx`: as for run_add(). */
static void frame_take(struct shoal__link *l, const void *buf, struct shoal__frame_hdr *h,
		       void *ucx)
{
	struct shoal_err why;
	int ret;

	if (h->kind != SHOAL__FRAME_HELLO && h->epoch != l->peer_epoch) {
		shoal__fail(&why, -ESTALE, "frame of epoch %08x, the peer's is %08x", h->epoch,
			    l->peer_epoch);
		refuse(l, &why);
		return;
	}
	if (h->kind == SHOAL__FRAME_DATA && h->first_seq > UINT64_MAX - h->count) {
		shoal__fail(&why, -EBADMSG, "records numbered past 2^64");
		refuse(l, &why);
		return;
	}
	/* Checked before anything changes, so that a refused frame is refused
	 * whole. A restarted peer acks in our numbering too, learnt from our
	 * HELLO, which never goes past sent_max. But if *we* restarted, the
	 * peer's first HELLO acks our previous life's numbers: that ack is
	 * ignored (the HELLO it sends on seeing our new epoch is right). */
	if (h->ack > l->sent_max && h->kind == SHOAL__FRAME_HELLO)
		h->ack = 0;
	if (h->ack > l->sent_max) {
		shoal__fail(&why, -EBADMSG, "ack %llu of records never sent (%llu were)",
			    (unsigned long long)h->ack, (unsigned long long)l->sent_max);
		refuse(l, &why);
		return;
	}
	if (h->kind == SHOAL__FRAME_HELLO)
		take_hello(l, h);
	take_ack(l, h->ack, h->credits);
	if (h->kind == SHOAL__FRAME_DATA) {
		ret = take_records(l, buf, h, ucx);
		if (ret < 0) {
			shoal__fail(&why, ret, "records beyond the credit or the size limit");
			refuse(l, &why);
			return;
		}
	}
	l->st.frames_recv++;
	l->last_rx = l->now;
}

/* Check a HELLO's identity header: two NUL-terminated names. */
static int hello_id(const void *header, size_t header_len, struct shoal__link_hello_id *id,
		    struct shoal_err *why)
{
	if (header_len != sizeof(*id))
		return shoal__fail(why, -EPROTO, "a HELLO whose identity is %zu bytes, not %zu",
				   header_len, sizeof(*id));
	memcpy(id, header, sizeof(*id));
	if (memchr(id->from, '\0', sizeof(id->from)) == NULL ||
	    memchr(id->to, '\0', sizeof(id->to)) == NULL)
		return shoal__fail(why, -EPROTO, "a HELLO whose names are not terminated");
	return 0;
}

/* Decode what UCP delivered as one frame, its header into *h (and a
 * HELLO's identity into *id). Returns 0, or -errno with the reason. */
static int frame_decode(const void *header, size_t header_len, const void *data, size_t len,
			const ucp_am_recv_param_t *param, struct shoal__frame_hdr *h,
			struct shoal__link_hello_id *id, struct shoal_err *why)
{
	int ret;

	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
		/* Our frames go eager; a rendezvous message would make us
		 * fetch bytes we did not bound. */
		return shoal__fail(why, -EPROTO, "active message not sent as a link frame");
	ret = shoal__frame_decode(data, len, h, why);
	if (ret < 0)
		return ret;
	if (h->kind == SHOAL__FRAME_HELLO)
		return hello_id(header, header_len, id, why);
	if (header_len != 0)
		return shoal__fail(why, -EPROTO, "a frame with an active-message header");
	return 0;
}

/* A frame of link l's connection. A HELLO must name the peer and us; one
 * that does not drops the connection (an address that reaches someone
 * else). */
static void link_frame(struct shoal__link *l, const void *header, size_t header_len,
		       void *data, size_t len, const ucp_am_recv_param_t *param)
{
	struct shoal__frame_hdr h;
	struct shoal__link_hello_id id;
	struct shoal_err why;

	l->ep_heard = true;
	if (frame_decode(header, header_len, data, len, param, &h, &id, &why) < 0) {
		refuse(l, &why);
		return;
	}
	if (h.kind == SHOAL__FRAME_HELLO &&
	    ((l->peer[0] && strcmp(id.from, l->peer) != 0) ||
	     (l->hub->name[0] && id.to[0] && strcmp(id.to, l->hub->name) != 0))) {
		shoal__fail(&why, -EPROTO, "a HELLO from host '%.31s' to '%.31s' on the link to "
			    "'%s'", id.from, id.to, l->peer);
		refuse(l, &why);
		l->ep_failed = true;
		return;
	}
	/* UCX lets us keep the bytes only when it says so. */
	frame_take(l, data, &h, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) ? data : NULL);
}

/* The first frame of an accepted connection: its HELLO, kept until the
 * poll hands the connection to its link (adopt()). Anything else refuses
 * the connection. */
static void pending_frame(struct shoal__link_hub *h, struct pending *p, const void *header,
			  size_t header_len, const void *data, size_t len,
			  const ucp_am_recv_param_t *param)
{
	struct shoal_err why;

	if (p->named || p->failed)
		return;
	if (frame_decode(header, header_len, data, len, param, &p->hello, &p->id, &why) < 0) {
		hub_refuse(h, "a connection whose first frame is refused: %s", why.msg);
		p->failed = true;
	} else if (p->hello.kind != SHOAL__FRAME_HELLO) {
		hub_refuse(h, "a connection whose first frame is no HELLO");
		p->failed = true;
	} else {
		p->named = true;
	}
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_len, void *data,
			  size_t len, const ucp_am_recv_param_t *param)
{
	struct shoal__link_hub *h = arg;
	ucp_ep_h ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep
									    : NULL;
	struct shoal__link *l = ep != NULL ? link_of(h, ep) : NULL;
	struct pending *p;

	if (l != NULL) {
		h->kept = false;
		link_frame(l, header, header_len, data, len, param);
		/* Kept: released by ucp_am_data_release() after its last record. */
		return h->kept ? UCS_INPROGRESS : UCS_OK;
	}
	p = ep != NULL ? pending_of(h, ep) : NULL;
	if (p != NULL)
		pending_frame(h, p, header, header_len, data, len, param);
	else if (ep == NULL)
		hub_refuse(h, "a frame that does not say its connection");
	else
		/* Its connection was dropped while the frame was on its way. */
		h->st.stray++;
	return UCS_OK;
}

/* The link named `name`, or NULL. */
static struct shoal__link *link_named(struct shoal__link_hub *h, const char *name)
{
	for (uint32_t i = 0; i < h->n_links; i++)
		if (h->links[i]->peer[0] == '\0' || strcmp(h->links[i]->peer, name) == 0)
			return h->links[i];
	return NULL;
}

/* Does l's connection show signs of life? Its peer sends at least every
 * keepalive: nothing for two of them, and the peer has likely given up on
 * it (an outage's far side reconnecting before this side noticed). */
static bool conn_alive(const struct shoal__link *l, uint64_t now)
{
	return l->ep != NULL && !l->ep_failed && now - l->last_rx < 2 * l->o.keepalive_ns;
}

/* Hand pending connection p, named by its HELLO, to its link, or refuse it. */
static void adopt(struct shoal__link_hub *h, struct pending *p)
{
	struct shoal__link *l = link_named(h, p->id.from);
	struct shoal__frame_hdr hello = p->hello;
	ucp_ep_h ep = p->ep;

	if (l == NULL) {
		hub_refuse(h, "a connection from host '%s', which has no link here",
			   p->id.from);
	} else if (l->o.role != SHOAL__LINK_LISTEN) {
		hub_refuse(h, "a connection from host '%s', which this host dials "
			   "itself", p->id.from);
	} else if (h->name[0] && p->id.to[0] && strcmp(p->id.to, h->name) != 0) {
		hub_refuse(h, "a connection from host '%s' meant for host '%s'",
			   p->id.from, p->id.to);
	} else if (conn_alive(l, h->now)) {
		hub_refuse(h, "a second connection from host '%s' while its first "
			   "is alive (two hosts of that name?)", p->id.from);
	} else {
		/* The peer dialed again: it gave up on the connection we had. */
		if (l->ep != NULL)
			conn_drop(l);
		memset(p, 0, sizeof(*p));
		h->st.accepted++;
		conn_begin(l, ep);
		frame_take(l, NULL, &hello, NULL);
		return;
	}
	pending_close(h, p);
}

/* ---- polling --------------------------------------------------------------- */

/* Drop l's connection if UCP said it failed or it went silent. */
static void link_check(struct shoal__link *l)
{
	if (l->ep_failed || (l->state != SHOAL__LINK_DOWN && l->now - l->last_rx > l->o.dead_ns))
		conn_drop(l);
}

/* Everything due on l: a connection attempt, HELLO, frames, acks. */
static void link_tick(struct shoal__link *l)
{
	uint64_t now = l->now;

	if (l->state == SHOAL__LINK_DOWN && l->o.role == SHOAL__LINK_CONNECT &&
	    now >= l->retry_at)
		conn_connect(l);
	if (l->hello_due && send_control(l, SHOAL__FRAME_HELLO) == 0)
		l->hello_due = false;
	if (l->state != SHOAL__LINK_UP)
		return;
	if (can_send(l) && now - l->unsent_since >= l->o.flush_ns)
		flush(l);
	else
		flush_full(l);
	if ((l->ack_due && now >= l->ack_due) || now - l->last_tx >= l->o.keepalive_ns)
		send_control(l, SHOAL__FRAME_ACK);
	if (l->ep_failed)
		conn_drop(l);
}

void shoal__link_hub_poll(struct shoal__link_hub *h, uint64_t now_ns)
{
	/* Time never goes back for the hub, whatever clock reading the
	 * caller took before its last send: timers compare by subtraction. */
	if (now_ns < h->now)
		now_ns = h->now;
	h->now = now_ns;
	for (uint32_t i = 0; i < h->n_links; i++)
		if (h->links[i]->now < now_ns)
			h->links[i]->now = now_ns;
	/* Once: over TCP every progress is an epoll_wait(), and draining
	 * until UCP has nothing left put a second one on every poll and on
	 * the round trip's critical path. What is left is reported by
	 * shoal__link_hub_arm() (-EAGAIN), so a caller polls again before
	 * it sleeps. */
	ucp_worker_progress(h->worker);
	if (h->n_closing)
		reap_closing(h);
	accept_all(h);
	/* Failed connections first, so that a peer's new connection finds
	 * its old one gone when both came in one progress. */
	for (uint32_t i = 0; i < h->n_links; i++)
		link_check(h->links[i]);
	for (unsigned i = 0; i < NPENDING; i++) {
		struct pending *p = &h->pend[i];

		if (p->ep == NULL)
			continue;
		if (p->failed) {
			pending_close(h, p);
		} else if (p->named) {
			adopt(h, p);
		} else if (now_ns - p->since > h->hello_ns) {
			hub_refuse(h, "a connection that sent no HELLO in time");
			pending_close(h, p);
		}
	}
	for (uint32_t i = 0; i < h->n_links; i++)
		link_tick(h->links[i]);
}

int shoal__link_hub_fd(const struct shoal__link_hub *h)
{
	return h->efd;
}

int shoal__link_hub_arm(struct shoal__link_hub *h)
{
	ucs_status_t s = ucp_worker_arm(h->worker);

	if (s == UCS_OK)
		return 0;
	return s == UCS_ERR_BUSY ? -EAGAIN : ucs_errno(s);
}

static uint64_t earliest(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t link_deadline(const struct shoal__link *l)
{
	uint64_t t;

	if (l->hello_due || l->ep_failed)
		return l->now;
	if (l->state == SHOAL__LINK_DOWN)
		return l->o.role == SHOAL__LINK_CONNECT ? l->retry_at : UINT64_MAX;
	t = l->last_rx + l->o.dead_ns;
	if (l->state != SHOAL__LINK_UP)
		return t;
	t = earliest(t, l->last_tx + l->o.keepalive_ns);
	/* Records the credit does not take wait for an ack, not a deadline. */
	if (can_send(l))
		t = earliest(t, l->unsent_since + l->o.flush_ns);
	if (l->ack_due)
		t = earliest(t, l->ack_due);
	return t;
}

uint64_t shoal__link_hub_deadline(const struct shoal__link_hub *h)
{
	uint64_t t = h->n_conn_req ? h->now : UINT64_MAX;

	for (unsigned i = 0; i < NPENDING; i++) {
		const struct pending *p = &h->pend[i];

		if (p->ep != NULL)
			t = earliest(t, p->failed || p->named ? h->now : p->since + h->hello_ns);
	}
	for (uint32_t i = 0; i < h->n_links; i++)
		t = earliest(t, link_deadline(h->links[i]));
	return t;
}

void shoal__link_hub_stats(const struct shoal__link_hub *h, struct shoal__link_hub_stats *st)
{
	*st = h->st;
}

void shoal__link_poll(struct shoal__link *l, uint64_t now_ns)
{
	shoal__link_hub_poll(l->hub, now_ns);
}

int shoal__link_fd(const struct shoal__link *l)
{
	return shoal__link_hub_fd(l->hub);
}

int shoal__link_arm(struct shoal__link *l)
{
	return shoal__link_hub_arm(l->hub);
}

uint64_t shoal__link_deadline(const struct shoal__link *l)
{
	return shoal__link_hub_deadline(l->hub);
}

/* ---- creating and destroying ------------------------------------------------ */

static void set_defaults(struct shoal__link_opts *o)
{
	if (!o->window)
		o->window = DEF_WINDOW;
	if (!o->max_record)
		o->max_record = shoal__link_max_record(o->window);
	if (!o->flush_bytes)
		o->flush_bytes = DEF_FLUSH_BYTES;
	if (!o->flush_ns)
		o->flush_ns = DEF_FLUSH_NS;
	if (!o->keepalive_ns)
		o->keepalive_ns = DEF_KEEPALIVE_NS;
	if (!o->dead_ns)
		o->dead_ns = DEF_DEAD_NS;
	if (!o->backoff_ns)
		o->backoff_ns = DEF_BACKOFF_NS;
	if (!o->max_backoff_ns)
		o->max_backoff_ns = DEF_MAX_BACKOFF_NS;
}

/* A host name as a HELLO carries it: NULL or "" (nobody in particular), or
 * 1..31 bytes. */
static int check_name(const char *name, const char *what, struct shoal_err *err)
{
	if (name != NULL && strlen(name) >= SHOAL__LINK_NAME_MAX)
		return shoal__fail(err, -EINVAL, "%s name '%.40s...' longer than %u bytes", what,
				   name, SHOAL__LINK_NAME_MAX - 1);
	return 0;
}

static int check_opts(const struct shoal__link_hub *h, const struct shoal__link_opts *o,
		      struct shoal_err *err)
{
	if (o->role != SHOAL__LINK_LISTEN && o->role != SHOAL__LINK_CONNECT)
		return shoal__fail(err, -EINVAL, "link role %d", o->role);
	if (o->role == SHOAL__LINK_LISTEN && !h->listening)
		return shoal__fail(err, -EINVAL, "a listening link on a hub that does not listen");
	if (check_name(o->peer, "peer", err) < 0)
		return -EINVAL;
	if (h->n_links == SHOAL__LINK_HUB_MAX)
		return shoal__fail(err, -ENOSPC, "a hub has %u links at most", SHOAL__LINK_HUB_MAX);
	for (uint32_t i = 0; i < h->n_links; i++)
		if (!o->peer || !h->links[i]->peer[0] || strcmp(h->links[i]->peer, o->peer) == 0)
			return shoal__fail(err, -EINVAL, "two links to host '%s' on one hub",
					   o->peer ? o->peer : "(anyone)");
	if (o->max_record > SHOAL__FRAME_REC_MAX)
		return shoal__fail(err, -EINVAL, "max_record %u above the frame limit %u",
				   o->max_record, SHOAL__FRAME_REC_MAX);
	if (shoal__frame_rec_size(o->max_record) > o->window || o->window > (1u << 30))
		return shoal__fail(err, -EINVAL,
				   "window %u must hold the largest record (%u) and be <= 1 GiB",
				   o->window, o->max_record);
	if (o->flush_bytes > SHOAL__FRAME_MAX - SHOAL__FRAME_HDR)
		return shoal__fail(err, -EINVAL, "flush_bytes %u above the frame limit",
				   o->flush_bytes);
	return 0;
}

static int ucx_fail(struct shoal_err *err, ucs_status_t s, const char *what)
{
	return shoal__fail(err, ucs_errno(s), "%s: %s", what, ucs_status_string(s));
}

static int ucx_open(struct shoal__link_hub *h, const char *transports, struct shoal_err *err)
{
	ucp_params_t cp = { .field_mask = UCP_PARAM_FIELD_FEATURES,
			    .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP };
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	ucp_am_handler_param_t ap = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = SHOAL__LINK_AM_ID,
		.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA,
		.cb = am_cb,
		.arg = h,
	};
	ucp_config_t *cfg;
	ucs_status_t s;

	/* A restarted bridge must listen again at once, while its previous
	 * life's connections linger in TIME_WAIT on the port: SO_REUSEADDR.
	 * UCX 1.13 reads that option of its TCP connection manager from the
	 * environment only (ucp_config_modify() does not reach it); a value
	 * the user set is kept. */
	if (h->listening && setenv("UCX_TCP_CM_REUSEADDR", "y", 0) < 0)
		return shoal__fail(err, -errno, "setenv UCX_TCP_CM_REUSEADDR");
	s = ucp_config_read(NULL, NULL, &cfg);
	if (s != UCS_OK)
		return ucx_fail(err, s, "UCX configuration");
	if (transports)
		s = ucp_config_modify(cfg, "TLS", transports);
	if (s == UCS_OK)
		s = ucp_init(&cp, cfg, &h->ctx);
	ucp_config_release(cfg);
	if (s != UCS_OK)
		return ucx_fail(err, s, "UCX context");
	s = ucp_worker_create(h->ctx, &wp, &h->worker);
	if (s != UCS_OK)
		return ucx_fail(err, s, "UCX worker");
	s = ucp_worker_set_am_recv_handler(h->worker, &ap);
	if (s == UCS_OK)
		s = ucp_worker_get_efd(h->worker, &h->efd);
	if (s != UCS_OK)
		return ucx_fail(err, s, "UCX worker setup");
	if (h->listening) {
		ucp_listener_params_t lp = {
			.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
				      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
			.sockaddr = { .addr = (const struct sockaddr *)&h->addr,
				      .addrlen = h->addr_len },
			.conn_handler = { .cb = conn_cb, .arg = h },
		};

		s = ucp_listener_create(h->worker, &lp, &h->listener);
		if (s != UCS_OK)
			return ucx_fail(err, s, "UCX listener");
	}
	return 0;
}

int shoal__link_hub_create(struct shoal__link_hub **out, const struct shoal__link_hub_opts *o,
			   struct shoal_err *err)
{
	struct shoal__link_hub *h = calloc(1, sizeof(*h));
	int ret;

	if (!h)
		return shoal__fail(err, -ENOMEM, "out of memory for a link hub");
	h->efd = -1;
	h->hello_ns = o->hello_ns ? o->hello_ns : DEF_HELLO_NS;
	h->listening = o->listen != NULL;
	h->now = shoal__now_ns();
	ret = check_name(o->name, "host", err);
	if (ret == 0 && o->name)
		memcpy(h->name, o->name, strlen(o->name) + 1);
	if (ret == 0 && o->listen)
		ret = shoal__addr_parse(o->listen, &h->addr, &h->addr_len, err);
	if (ret == 0)
		ret = ucx_open(h, o->transports, err);
	if (ret < 0) {
		shoal__link_hub_destroy(h);
		return ret;
	}
	*out = h;
	return 0;
}

/*
 * UCX 1.13's TCP connection manager accepts a connection in its own thread
 * and keeps it, outside the listener, until the client's first data
 * arrives; it then calls the listener's handler through the listener it
 * was accepted by, destroyed or not (the newest UCX does the same). A peer
 * whose link we close reconnects within its backoff, so a stopping bridge
 * that closed its links while it still listened took such a connection and
 * crashed in UCX's thread after the destroy (SIGSEGV in
 * ucp_cm_server_conn_request_cb; bridge_hosts under ASan, 2 runs in 13 on a
 * loaded machine). Without a listener, a reconnecting peer is refused by
 * the kernel: nothing is accepted.
 */
void shoal__link_hub_stop_listening(struct shoal__link_hub *h)
{
	if (h->listener == NULL)
		return;
	for (uint32_t i = 0; i < h->n_conn_req; i++)
		ucp_listener_reject(h->listener, h->conn_req[i]);
	h->n_conn_req = 0;
	for (unsigned i = 0; i < NPENDING; i++)
		if (h->pend[i].ep != NULL)
			pending_close(h, &h->pend[i]);
	ucp_listener_destroy(h->listener);
	h->listener = NULL;
}

void shoal__link_hub_destroy(struct shoal__link_hub *h)
{
	uint64_t give_up = shoal__now_ns() + 2000000000u;
	bool busy = true;

	SHOAL_ASSERT(h->n_links == 0);
	if (h->worker) {
		shoal__link_hub_stop_listening(h);
		/* Bounded: a forced close completes locally; the bound only
		 * keeps a UCX bug from hanging the caller. */
		while (busy && shoal__now_ns() < give_up) {
			ucp_worker_progress(h->worker);
			reap_closing(h);
			busy = h->n_closing != 0;
		}
		ucp_worker_destroy(h->worker);
	}
	if (h->ctx)
		ucp_cleanup(h->ctx);
	free(h);
}

static int alloc_buffers(struct shoal__link *l)
{
	uint64_t big = shoal__frame_rec_size(l->o.max_record);
	uint32_t fcap = SHOAL__FRAME_HDR + shoal__frame_rec_size(l->o.max_record);

	if (fcap < SHOAL__FRAME_HDR + l->o.flush_bytes)
		fcap = SHOAL__FRAME_HDR + l->o.flush_bytes;
	l->fbuf_cap = fcap;
	if (recq_init(&l->sq, 2 * (uint64_t)l->o.window + l->o.backlog + big) < 0)
		return -ENOMEM;
	l->rx.cap = 4096;
	while (l->rx.cap < 4 * (uint64_t)l->o.window + 2 * big)
		l->rx.cap <<= 1;
	l->rx.area = area_alloc(l->rx.cap);
	l->rx.runs = calloc(NRUN, sizeof(*l->rx.runs));
	return l->rx.area != NULL && l->rx.runs != NULL ? 0 : -ENOMEM;
}

static void link_free(struct shoal__link *l)
{
	free(l->sq.buf);
	free(l->sq.sizes);
	free(l->rx.area);
	free(l->rx.runs);
	free(l);
}

int shoal__link_add(struct shoal__link_hub *h, struct shoal__link **out,
		    const struct shoal__link_opts *o, struct shoal_err *err)
{
	struct shoal__link *l = calloc(1, sizeof(*l));
	int ret;

	if (!l)
		return shoal__fail(err, -ENOMEM, "out of memory for a link");
	l->o = *o;
	l->hub = h;
	set_defaults(&l->o);
	ret = check_opts(h, &l->o, err);
	if (ret == 0 && o->role == SHOAL__LINK_CONNECT)
		ret = shoal__addr_parse(o->addr, &l->addr, &l->addr_len, err);
	if (ret == 0 && alloc_buffers(l) < 0)
		ret = shoal__fail(err, -ENOMEM, "out of memory for a link's buffers");
	if (ret < 0) {
		link_free(l);
		return ret;
	}
	if (o->peer)
		memcpy(l->peer, o->peer, strlen(o->peer) + 1);
	memcpy(l->hello_id.from, h->name, sizeof(h->name));
	memcpy(l->hello_id.to, l->peer, sizeof(l->peer));
	l->o.peer = NULL;
	l->o.addr = NULL;
	l->o.transports = NULL;
	l->st.epoch = o->epoch ? o->epoch : draw_epoch();
	l->state = SHOAL__LINK_DOWN;
	l->backoff = l->o.backoff_ns;
	l->now = shoal__now_ns();
	l->st.down_since_ns = l->now;
	h->links[h->n_links++] = l;
	if (l->o.role == SHOAL__LINK_CONNECT)
		conn_connect(l);
	*out = l;
	return 0;
}

int shoal__link_create(struct shoal__link **out, const struct shoal__link_opts *o,
		       struct shoal_err *err)
{
	struct shoal__link_hub_opts ho = {
		.listen = o->role == SHOAL__LINK_LISTEN ? o->addr : NULL,
		.transports = o->transports,
	};
	struct shoal__link_hub *h;
	int ret = shoal__link_hub_create(&h, &ho, err);

	if (ret < 0)
		return ret;
	ret = shoal__link_add(h, out, o, err);
	if (ret < 0) {
		shoal__link_hub_destroy(h);
		return ret;
	}
	(*out)->owns_hub = true;
	return 0;
}

/* Wait, progressing UCP, until l's connection is heard or failed, SETTLE_NS
 * at most: only then may it be closed at any moment ("Closing a connection
 * UCX is still setting up", above). Frames it brings meanwhile are taken as
 * in a poll. */
static void conn_settle(struct shoal__link *l)
{
	uint64_t give_up = shoal__now_ns() + SETTLE_NS;

	while (l->ep != NULL && !l->ep_heard && !l->ep_failed && shoal__now_ns() < give_up)
		ucp_worker_progress(l->hub->worker);
}

void shoal__link_destroy(struct shoal__link *l)
{
	struct shoal__link_hub *h = l->hub;
	uint64_t give_up;
	bool busy = true;

	/* First: frames it takes while it settles may stay in UCX's buffers. */
	conn_settle(l);
	/* Its hub's only link: nothing more to accept once it closes (the
	 * peer reconnects at once; link.h). */
	if (l->owns_hub)
		shoal__link_hub_stop_listening(h);
	give_up = shoal__now_ns() + 2000000000u;
	for (uint64_t i = l->rx.run_head; i != l->rx.run_tail; i++)
		if (l->rx.runs[i & (NRUN - 1)].ucx != NULL)
			ucp_am_data_release(h->worker, l->rx.runs[i & (NRUN - 1)].ucx);
	if (l->ep)
		ep_close(h, l->ep);
	/* Frames still arriving for it are strays now. */
	l->ep = NULL;
	/* Its frame buffers are UCP's until their sends complete (forced
	 * closes complete them locally). */
	while (busy && shoal__now_ns() < give_up) {
		ucp_worker_progress(h->worker);
		reap_closing(h);
		busy = false;
		for (unsigned i = 0; i < NBUF; i++)
			busy |= l->fb[i].busy;
	}
	for (uint32_t i = 0; i < h->n_links; i++)
		if (h->links[i] == l) {
			h->links[i] = h->links[--h->n_links];
			break;
		}
	if (h->last == l)
		h->last = NULL;
	if (l->owns_hub)
		shoal__link_hub_destroy(h);
	link_free(l);
}

void *shoal__link_reserve_n(struct shoal__link *l, uint32_t len, uint16_t tag, uint32_t n,
			    uint32_t *got)
{
	uint64_t size = shoal__frame_rec_size(len), limit = (uint64_t)l->peer_credits + l->o.backlog;
	unsigned char *p = NULL;

	SHOAL_ASSERT(l->reserved == 0 && n > 0);
	if (len <= l->o.max_record && l->sq.bytes + size <= limit) {
		if (n > 1 && (limit - l->sq.bytes) / size < n)
			n = (uint32_t)((limit - l->sq.bytes) / size);
		p = recq_reserve(&l->sq, size, n, got);
	}
	if (p == NULL) {
		l->st.credit_waits++;
		return NULL;
	}
	for (uint32_t i = 0; i < *got; i++)
		shoal__frame_rec_write(p + i * size, NULL, len, tag, 0);
	l->reserved = (uint32_t)size;
	l->reserved_n = *got;
	return p + SHOAL__FRAME_REC_HDR;
}

void *shoal__link_reserve(struct shoal__link *l, uint32_t len, uint16_t tag)
{
	uint32_t got;

	return shoal__link_reserve_n(l, len, tag, 1, &got);
}

void shoal__link_commit_n(struct shoal__link *l, uint32_t k)
{
	uint32_t size = l->reserved;
	uint64_t bytes = (uint64_t)size * k;

	SHOAL_ASSERT(size != 0 && k >= 1 && k <= l->reserved_n);
	l->reserved = 0;
	if (l->sq.bytes + bytes > l->peer_credits) {
		/* Each record that ends beyond the credit. */
		uint64_t within = l->sq.bytes < l->peer_credits ?
					  (l->peer_credits - l->sq.bytes) / size : 0;

		l->st.over_credit += k - (within < k ? within : k);
	}
	recq_commit(&l->sq, size, k);
	/* Through l->now, which never goes back (shoal__link_hub_poll()):
	 * a reading newer than the clock the next poll is given made the
	 * deadline's subtraction wrap, and every poll flushed what its turn
	 * had queued (frames of one bridge turn, 32 messages, at any rate). */
	if (l->unsent_bytes == 0) {
		l->now = shoal__now_ns();
		l->unsent_since = l->now;
	}
	l->next_seq += k;
	l->unsent_bytes += bytes;
	/* sendable(), not unsent_bytes: records beyond the credit read no
	 * clock and try no frame each, as they wait for the peer's ack. */
	if (l->state == SHOAL__LINK_UP && sendable(l) >= l->o.flush_bytes) {
		l->now = shoal__now_ns();
		flush_full(l);
	}
}

void shoal__link_commit(struct shoal__link *l)
{
	shoal__link_commit_n(l, 1);
}

int shoal__link_send(struct shoal__link *l, const void *data, uint32_t len, uint16_t tag)
{
	void *p;

	if (len > l->o.max_record)
		return -EMSGSIZE;
	p = shoal__link_reserve(l, len, tag);
	if (p == NULL)
		return -EAGAIN;
	if (len)
		memcpy(p, data, len);
	shoal__link_commit(l);
	return 0;
}

uint64_t shoal__link_drop_unsent(struct shoal__link *l)
{
	struct recq *q = &l->sq;
	uint64_t n = l->next_seq - l->sent_max, pos = q->head, kept = 0;

	SHOAL_ASSERT(l->reserved == 0);
	if (n == 0)
		return 0;
	/* The end of the records sent once, before any PAD after them. */
	for (uint64_t seq = l->acked; seq < l->sent_max; seq++) {
		uint64_t size;

		pos = recq_skip_pad(q, pos);
		size = recq_size(recq_at(q, pos));
		pos += size;
		kept += size;
	}
	l->unsent_bytes -= q->bytes - kept;
	q->tail = pos;
	q->pad_before = false;   /* a PAD after pos went with the records */
	q->n -= n;
	q->bytes = kept;
	if (l->sent == l->sent_max)
		l->send_pos = pos;
	l->next_seq = l->sent_max;
	l->st.dropped += n;
	return n;
}

uint32_t shoal__link_state(const struct shoal__link *l, uint64_t *down_since_ns)
{
	*down_since_ns = l->st.down_since_ns;
	return l->state;
}

int shoal__link_flush(struct shoal__link *l)
{
	l->now = shoal__now_ns();
	return flush(l) < 0 ? -EAGAIN : 0;
}

int shoal__link_flush_idle(struct shoal__link *l)
{
	if (l->unsent_bytes == 0 || l->sent != l->acked)
		return 0;
	return shoal__link_flush(l);
}

uint32_t shoal__link_recv_peek_n(struct shoal__link *l, struct shoal__frame_rec *recs,
				 uint32_t max)
{
	const unsigned char *p;
	const struct rrun *r;
	uint32_t n;

	if (l->rx.n == 0)
		return 0;
	/* One frame's records, checked when it came (shoal__frame_decode()). */
	r = rx_front(&l->rx);
	p = r->p;
	n = r->left < max ? r->left : max;
	for (uint32_t i = 0; i < n; i++) {
		recs[i].len = shoal__frame_rec_len(p);
		recs[i].tag = shoal__frame_rec_tag(p);
		recs[i].data = p + SHOAL__FRAME_REC_HDR;
		p += shoal__frame_rec_size(recs[i].len);
	}
	l->peeked = n;
	return n;
}

int shoal__link_recv_peek(struct shoal__link *l, struct shoal__frame_rec *rec)
{
	return shoal__link_recv_peek_n(l, rec, 1) == 1 ? 0 : -EAGAIN;
}

void shoal__link_recv_release_n(struct shoal__link *l, uint32_t k)
{
	struct rxq *q = &l->rx;
	struct rrun *r = rx_front(q);
	const unsigned char *p = r->p;
	uint64_t bytes = 0;

	SHOAL_ASSERT(k != 0 && k <= l->peeked);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t size = shoal__frame_rec_size(shoal__frame_rec_len(p));

		p += size;
		bytes += size;
	}
	r->p = p;
	r->seq += k;
	q->n -= k;
	l->released_bytes += bytes;
	l->peeked = 0;
	r->left -= k;
	if (r->left == 0) {
		if (r->ucx != NULL) {
			ucp_am_data_release(l->hub->worker, r->ucx);
			q->n_ucx--;
			q->ucx_bytes -= r->ucx_len;
		} else {
			q->head = r->area_end;
		}
		q->run_head++;
		r = rx_front(q);
	}
	/* Records of the peer's previous life count in its old numbering:
	 * the ack moves once they are all released. */
	if (l->rq_old >= k) {
		l->rq_old -= k;
	} else {
		l->rq_old = 0;
		l->recv_ack = q->n == 0 ? l->recv_next : r->seq;
	}
	/* The credit comes back with the next frame; an ACK goes alone after
	 * the flush deadline, or at the next poll once a quarter of the
	 * window was released, so that a sender waiting for credit does not
	 * wait for a deadline. */
	if (l->released_bytes >= l->o.window / 4)
		l->ack_due = 1;
	else if (!l->ack_due)
		l->ack_due = shoal__now_ns() + l->o.flush_ns;
}

void shoal__link_recv_release(struct shoal__link *l)
{
	shoal__link_recv_release_n(l, 1);
}

void shoal__link_stats(const struct shoal__link *l, struct shoal__link_stats *st)
{
	*st = l->st;
	st->state = l->state;
	st->peer_epoch = l->peer_epoch;
	st->peer_credits = l->peer_credits;
	st->next_seq = l->next_seq;
	st->acked = l->acked;
	st->unacked_bytes = l->sq.bytes;
	st->recv_next = l->recv_next;
	st->recv_held = l->rx.n;
}

/* ---- UCX's log ---------------------------------------------------------- */

static void (*log_sink)(void *arg, const char *level, const char *message);
static void *log_arg;

static ucs_log_func_rc_t log_handler(const char *file, unsigned line, const char *function,
				     ucs_log_level_t level,
				     const ucs_log_component_config_t *comp_conf,
				     const char *message, va_list ap)
{
	char text[SHOAL_ERR_MSG_MAX];
	size_t n;

	(void)file, (void)line, (void)function, (void)comp_conf;
	if (log_sink == NULL)
		return UCS_LOG_FUNC_RC_CONTINUE;
	vsnprintf(text, sizeof(text), message, ap);
	n = strlen(text);
	while (n > 0 && text[n - 1] == '\n')
		text[--n] = '\0';
	log_sink(log_arg, ucs_log_level_names[level], text);
	return UCS_LOG_FUNC_RC_STOP;
}

void shoal__link_log_to(void (*sink)(void *arg, const char *level, const char *message),
			void *arg)
{
	static bool pushed;

	log_sink = sink;
	log_arg = arg;
	/* UCX calls the handlers pushed last first; ours stays pushed and
	 * passes messages on to UCX's printing while it has no sink. */
	if (!pushed && sink != NULL) {
		ucs_log_push_handler(log_handler);
		pushed = true;
	}
}
