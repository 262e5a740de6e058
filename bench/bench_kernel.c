/* SPDX-License-Identifier: MIT */
/*
 * Kernel IPC contenders.
 *
 * "pipe": two pipes (one each way) of BENCH_BUF_BYTES. A batch is one
 * write() of batch x payload bytes; the consumer read()s up to that much and
 * frames the fixed-size messages itself, since a pipe may split them.
 * "unix-seqpacket": an AF_UNIX SOCK_SEQPACKET socketpair with SO_SNDBUF of
 * BENCH_BUF_BYTES, one datagram per message (the kernel keeps the record
 * boundaries, as a record ring does); a batch is one sendmmsg() and, on the
 * consumer side, one recvmmsg() of up to batch datagrams.
 *
 * Throughput and ping-pong use non-blocking descriptors and spin on EAGAIN,
 * i.e. busy polling like the rings, so that the comparison is about the
 * transport and not about sleeping; the wake sample uses blocking ones, so
 * that the consumer sleeps in read()/recv() and the kernel wakes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/bench.h"

/* How one transport moves bytes; every call spins on EAGAIN. */
struct kio {
	int (*send_batch)(int fd, unsigned char *buf, uint32_t payload, uint32_t batch);
	int (*recv_one)(int fd, unsigned char *buf, uint32_t payload);
};

/* ---- pipes ---- */

static int write_all(int fd, unsigned char *buf, uint32_t payload, uint32_t batch)
{
	size_t len = (size_t)payload * batch;

	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EAGAIN) {
			bench_relax();
			continue;
		}
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly `len` bytes. Returns 0, -EPIPE at end of file, or -errno. */
static int read_exact(int fd, unsigned char *buf, uint32_t len)
{
	while (len > 0) {
		ssize_t n = read(fd, buf, len);

		if (n < 0 && errno == EAGAIN) {
			bench_relax();
			continue;
		}
		if (n <= 0)
			return n == 0 ? -EPIPE : -errno;
		buf += n;
		len -= (uint32_t)n;
	}
	return 0;
}

static int pipe_prepare(const struct bench_mem *m, const struct bench_params *p,
			struct bench_fds *fds)
{
	int flags = p->kind == BENCH_WAKE ? 0 : O_NONBLOCK;
	int ab[2], ba[2];

	(void)m;
	if (pipe2(ab, flags) < 0)
		return -errno;
	fds->tx[0] = ab[1];
	fds->rx[1] = ab[0];
	if (pipe2(ba, flags) < 0)
		return -errno;
	fds->tx[1] = ba[1];
	fds->rx[0] = ba[0];
	/* The harness closes whatever is in fds, also after a failure here. */
	if (fcntl(ab[1], F_SETPIPE_SZ, BENCH_BUF_BYTES) < 0 ||
	    fcntl(ba[1], F_SETPIPE_SZ, BENCH_BUF_BYTES) < 0)
		return -errno;
	return 0;
}

/* ---- SOCK_SEQPACKET ---- */

static int dgram_send_batch(int fd, unsigned char *buf, uint32_t payload, uint32_t batch)
{
	struct mmsghdr mm[BENCH_MAX_BATCH];
	struct iovec iov[BENCH_MAX_BATCH];
	uint32_t done = 0;

	memset(mm, 0, sizeof(mm[0]) * batch);
	for (uint32_t i = 0; i < batch; i++) {
		iov[i] = (struct iovec){ buf + (size_t)i * payload, payload };
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	while (done < batch) {
		/* MSG_NOSIGNAL: a dead peer is an error return, not a SIGPIPE. */
		int n = sendmmsg(fd, mm + done, batch - done, MSG_NOSIGNAL);

		if (n < 0 && errno == EAGAIN) {
			bench_relax();
			continue;
		}
		if (n < 0)
			return -errno;
		done += (uint32_t)n;
	}
	return 0;
}

/* Receive up to `batch` datagrams into buf, back to back. Returns how many
 * (>= 1), -EBADMSG for a datagram of the wrong size, or -errno. */
static int dgram_recv_batch(int fd, unsigned char *buf, uint32_t payload, uint32_t batch)
{
	struct mmsghdr mm[BENCH_MAX_BATCH];
	struct iovec iov[BENCH_MAX_BATCH];
	int n;

	memset(mm, 0, sizeof(mm[0]) * batch);
	for (uint32_t i = 0; i < batch; i++) {
		iov[i] = (struct iovec){ buf + (size_t)i * payload, payload };
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	while ((n = recvmmsg(fd, mm, batch, 0, NULL)) < 0 && errno == EAGAIN)
		bench_relax();
	if (n <= 0)
		return n == 0 ? -EPIPE : -errno;
	for (int i = 0; i < n; i++)
		if (mm[i].msg_len != payload)
			return -EBADMSG;
	return n;
}

static int dgram_recv_one(int fd, unsigned char *buf, uint32_t payload)
{
	int n = dgram_recv_batch(fd, buf, payload, 1);

	return n < 0 ? n : 0;
}

static int sock_prepare(const struct bench_mem *m, const struct bench_params *p,
			struct bench_fds *fds)
{
	int type = SOCK_SEQPACKET | (p->kind == BENCH_WAKE ? 0 : SOCK_NONBLOCK);
	int sv[2], sndbuf = BENCH_BUF_BYTES;

	(void)m;
	if (socketpair(AF_UNIX, type, 0, sv) < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		fds->tx[i] = fds->rx[i] = sv[i];
		/* The kernel doubles the value and caps it at net.core.wmem_max. */
		if (setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
			return -errno;
	}
	return 0;
}

static const struct kio pipe_io = { write_all, read_exact };
static const struct kio sock_io = { dgram_send_batch, dgram_recv_one };

/* ---- roles shared by both transports ---- */

/* Check n messages laid out back to back. Returns 0, 1 after the stop
 * message, or a negative errno. */
static int check_batch(struct bench_side *s, const unsigned char *buf, uint32_t n,
		       uint64_t *expect)
{
	const uint32_t size = s->p->payload;
	int ret = 0;

	for (uint32_t i = 0; i < n && ret == 0; i++)
		ret = bench_msg_check(buf + (size_t)i * size, size, (*expect)++, &s->sink);
	return ret < 0 ? bench_fail(s, ret, "message %llu: bad content",
				    (unsigned long long)*expect - 1) : ret;
}

static int kio_tput_tx(struct bench_side *s, const struct kio *io)
{
	const uint32_t size = s->p->payload, batch = s->p->batch;
	_Alignas(64) unsigned char buf[BENCH_MAX_BATCH * BENCH_MAX_PAYLOAD];
	uint64_t seq = 0;
	bool last = false;
	int ret = 0;

	bench_batch_fill(buf, size, batch);
	bench_side_ready(s);
	while (!last && ret == 0) {
		last = bench_time_up(s, seq);
		bench_batch_stamp(buf, size, batch, seq, last);
		seq += batch;
		ret = io->send_batch(s->tx, buf, size, batch);
	}
	s->res->msgs = seq;
	return ret < 0 ? bench_fail(s, ret, "send: %s", strerror(-ret)) : 0;
}

static int kio_ping(struct bench_side *s, const struct kio *io)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char out[BENCH_MAX_PAYLOAD], in[BENCH_MAX_PAYLOAD];
	struct bench_hist *h = bench_ping_start(s, out);
	uint64_t seq, prev, expect;
	bool last = false;
	int ret = 0;

	if (h == NULL)
		return s->res->err;
	prev = s->res->t_start;
	for (seq = 0; !last && ret == 0; seq++) {
		last = prev >= s->deadline;
		bench_msg_stamp(out, size, seq | (last ? BENCH_STOP : 0));
		ret = io->send_batch(s->tx, out, size, 1);
		if (ret == 0)
			ret = io->recv_one(s->rx, in, size);
		if (ret < 0) {
			bench_fail(s, ret, "ping: %s", strerror(-ret));
			break;
		}
		expect = seq;
		ret = check_batch(s, in, 1, &expect);
		bench_ping_lap(h, &prev);
	}
	return bench_ping_end(s, h, seq, prev, ret);
}

static int kio_pong(struct bench_side *s, const struct kio *io)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char buf[BENCH_MAX_PAYLOAD];
	uint64_t expect = 0;
	int ret = 0;

	bench_side_ready(s);
	do {
		int io_ret = io->recv_one(s->rx, buf, size);

		if (io_ret == 0) {
			ret = check_batch(s, buf, 1, &expect);
			io_ret = io->send_batch(s->tx, buf, size, 1);
		}
		if (io_ret < 0)
			return bench_fail(s, io_ret, "pong: %s", strerror(-io_ret));
	} while (ret == 0);
	return ret < 0 ? ret : 0;
}

static int kio_wake_tx(struct bench_side *s, const struct kio *io)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char buf[BENCH_MAX_PAYLOAD];
	uint64_t seq, prev;
	bool last = false;
	int ret = 0;

	bench_msg_fill(buf, size);
	bench_side_ready(s);
	prev = s->res->t_start;
	for (seq = 0; !last && ret == 0; seq++) {
		uint64_t t = bench_wait_gap(prev, s->p->gap_ns);

		last = t >= s->deadline;
		bench_msg_stamp(buf, size, seq | (last ? BENCH_STOP : 0));
		bench_msg_set_time(buf, t);
		ret = io->send_batch(s->tx, buf, size, 1);
		prev = shoal__now_ns();
	}
	s->res->msgs = seq;
	return ret < 0 ? bench_fail(s, ret, "send: %s", strerror(-ret)) : 0;
}

static int kio_wake_rx(struct bench_side *s, const struct kio *io)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char buf[BENCH_MAX_PAYLOAD];
	struct bench_hist *h = bench_hist_new();
	uint64_t expect = 0, cpu0;
	int ret = 0;

	if (h == NULL)
		return bench_fail(s, -ENOMEM, "no memory for the histogram");
	bench_side_ready(s);
	cpu0 = bench_cpu_ns();
	while (ret == 0) {
		int io_ret = io->recv_one(s->rx, buf, size);
		uint64_t now = shoal__now_ns();

		if (io_ret < 0) {
			ret = bench_fail(s, io_ret, "receive: %s", strerror(-io_ret));
			break;
		}
		ret = check_batch(s, buf, 1, &expect);
		bench_lat_add(s, h, now - bench_msg_time(buf));
	}
	s->res->cpu_ns = bench_cpu_ns() - cpu0;
	s->res->msgs = expect;
	s->res->t_end = shoal__now_ns();
	bench_hist_pct(h, &s->res->lat);
	free(h);
	return ret < 0 ? ret : 0;
}

/* ---- throughput consumers: how each transport hands over a batch ---- */

static int pipe_tput_rx(struct bench_side *s)
{
	const uint32_t size = s->p->payload, want = size * s->p->batch;
	_Alignas(64) unsigned char buf[BENCH_MAX_BATCH * BENCH_MAX_PAYLOAD];
	uint64_t expect = 0;
	uint32_t have = 0;
	int ret = 0;

	bench_side_ready(s);
	while (ret == 0) {
		ssize_t n = read(s->rx, buf + have, want - have);
		uint32_t whole;

		if (n < 0 && errno == EAGAIN) {
			bench_relax();
			continue;
		}
		if (n <= 0)
			return bench_fail(s, n == 0 ? -EPIPE : -errno, "read failed");
		have += (uint32_t)n;
		whole = have / size;
		ret = check_batch(s, buf, whole, &expect);
		/* Keep a message the pipe split for the next read. */
		memmove(buf, buf + whole * size, have - whole * size);
		have -= whole * size;
	}
	s->res->t_end = shoal__now_ns();
	s->res->msgs = expect;
	return ret < 0 ? ret : 0;
}

static int sock_tput_rx(struct bench_side *s)
{
	const uint32_t size = s->p->payload;
	_Alignas(64) unsigned char buf[BENCH_MAX_BATCH * BENCH_MAX_PAYLOAD];
	uint64_t expect = 0;
	int ret = 0;

	bench_side_ready(s);
	while (ret == 0) {
		int n = dgram_recv_batch(s->rx, buf, size, s->p->batch);

		if (n < 0)
			return bench_fail(s, n, "recvmmsg: %s", strerror(-n));
		ret = check_batch(s, buf, (uint32_t)n, &expect);
	}
	s->res->t_end = shoal__now_ns();
	s->res->msgs = expect;
	return ret < 0 ? ret : 0;
}

/* ---- the contenders ---- */

#define KIO_ROLE(prefix, io, fn) \
	static int prefix##_##fn(struct bench_side *s) { return kio_##fn(s, &io); }

KIO_ROLE(pipe, pipe_io, tput_tx)
KIO_ROLE(pipe, pipe_io, ping)
KIO_ROLE(pipe, pipe_io, pong)
KIO_ROLE(pipe, pipe_io, wake_tx)
KIO_ROLE(pipe, pipe_io, wake_rx)
KIO_ROLE(sock, sock_io, tput_tx)
KIO_ROLE(sock, sock_io, ping)
KIO_ROLE(sock, sock_io, pong)
KIO_ROLE(sock, sock_io, wake_tx)
KIO_ROLE(sock, sock_io, wake_rx)

const struct bench_contender bench_pipe = {
	.name = "pipe",
	.what = "two pipes, F_SETPIPE_SZ to the rings' size; batch = one write() of batch x "
		"payload, read() of up to that much; O_NONBLOCK busy poll (blocking in the wake "
		"sample)",
	.prepare = pipe_prepare,
	.role = {
		[BENCH_TPUT] = { pipe_tput_tx, pipe_tput_rx },
		[BENCH_PINGPONG] = { pipe_ping, pipe_pong },
		[BENCH_WAKE] = { pipe_wake_tx, pipe_wake_rx },
	},
};

const struct bench_contender bench_sock = {
	.name = "unix-seqpacket",
	.what = "AF_UNIX SOCK_SEQPACKET socketpair, SO_SNDBUF the rings' size, one datagram "
		"per message; batch = one sendmmsg()/recvmmsg(); O_NONBLOCK busy poll (blocking "
		"in the wake sample)",
	.prepare = sock_prepare,
	.role = {
		[BENCH_TPUT] = { sock_tput_tx, sock_tput_rx },
		[BENCH_PINGPONG] = { sock_ping, sock_pong },
		[BENCH_WAKE] = { sock_wake_tx, sock_wake_rx },
	},
};
