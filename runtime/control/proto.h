/* SPDX-License-Identifier: MIT */
/*
 * The control protocol between group processes and the router: fixed-layout
 * messages over a UNIX SOCK_SEQPACKET socket (one message per packet, so no
 * framing). Every message the router receives is validated by
 * shoal__ctl_check() before any field is used: the peer may be buggy or
 * hostile (its uid was checked, its code was not).
 *
 *   group -> router   HELLO, SUB, UNSUB, OPEN_DIRECT, BYE
 *   router -> group   WELCOME, OK, DIRECT, ERROR
 *   tool -> router    ADMIN (shoal stop, restart, reload; where the logs are)
 *   router -> tool    DONE, ERROR
 * Each request gets exactly one reply, in order (the group serialises its
 * requests). An ADMIN is the only request of its connection: the control
 * thread hands the connection to the supervisor, which answers once what
 * was asked is done (a stop: once the processes have ended) and closes it. The router tells a group to stop through its mailbox, not the
 * socket, so a group never has to read the socket asynchronously.
 */
#ifndef SHOAL_RUNTIME_PROTO_H
#define SHOAL_RUNTIME_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <shoal/filter.h>
#include <shoal/message.h>
#include <shoal/segment.h>

#define SHOAL__CTL_MAGIC   UINT32_C(0x4c544353)   /* "SCTL" */
#define SHOAL__CTL_VERSION 3u
#define SHOAL__CTL_MAX     (64u * 1024)          /* largest packet */
#define SHOAL__CTL_MAX_TYPES 512u
#define SHOAL__CTL_MAX_SUBS  64u

enum shoal__ctl_op {
	SHOAL__CTL_HELLO = 1,
	SHOAL__CTL_WELCOME,
	SHOAL__CTL_ERROR,
	SHOAL__CTL_OK,
	SHOAL__CTL_SUB,
	SHOAL__CTL_UNSUB,
	SHOAL__CTL_OPEN_DIRECT,
	SHOAL__CTL_DIRECT,
	SHOAL__CTL_BYE,
	SHOAL__CTL_ADMIN,
	SHOAL__CTL_DONE,
	SHOAL__CTL_OP_MAX,
};

/* What an ADMIN asks of the supervisor. */
enum shoal__ctl_admin_what {
	SHOAL__ADMIN_STOP = 1,           /* the system, or one group: no restart until asked */
	SHOAL__ADMIN_RESTART,            /* one group: stop it, start it again */
	SHOAL__ADMIN_RELOAD,             /* re-read the system file, as SIGHUP does */
	SHOAL__ADMIN_INFO,               /* nothing: DONE says where the logs are */
	SHOAL__ADMIN_MAX,
};

#define SHOAL__CTL_PATH_MAX 4096u

struct shoal__ctl_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t op;
	uint32_t len;                    /* whole packet, header included */
	uint32_t pad;
};

struct shoal__ctl_type {
	uint32_t id;
	uint32_t max_size;
	char name[SHOAL_NAME_MAX];
};

/* HELLO is followed by n_types shoal__ctl_type, then n_subs shoal_filter. */
struct shoal__ctl_hello {
	struct shoal__ctl_hdr h;
	char group[SHOAL_NAME_MAX];
	int32_t pid;
	uint16_t n_workers;
	uint16_t n_actors;
	int32_t node;
	uint32_t n_types;
	uint32_t n_subs;
	uint32_t pad;
};

/* The group streams its bursts' copies (shoal_router_stream()). */
#define SHOAL__WELCOME_STREAM 1u

struct shoal__ctl_welcome {
	struct shoal__ctl_hdr h;
	uint16_t group;
	uint16_t n_workers;
	uint16_t n_actors;
	uint16_t flags;                  /* SHOAL__WELCOME_* */
	uint32_t gen;
	uint32_t pad2;
	uint64_t spin_ns;
	uint64_t yield_ns;
	uint64_t wake_deadline_ns;
	char registry[SHOAL_SEG_NAME_MAX];
	char bell[SHOAL_SEG_NAME_MAX];
	char mailbox[SHOAL_SEG_NAME_MAX];
};

struct shoal__ctl_error {
	struct shoal__ctl_hdr h;
	int32_t err;                     /* negative errno */
	uint32_t pad;
	char msg[SHOAL_ERR_MSG_MAX];
};

struct shoal__ctl_ok {
	struct shoal__ctl_hdr h;
	uint32_t id;
	uint32_t pad;
};

struct shoal__ctl_sub {
	struct shoal__ctl_hdr h;
	struct shoal_filter f;
};

struct shoal__ctl_unsub {
	struct shoal__ctl_hdr h;
	uint32_t id;
	uint32_t pad;
};

struct shoal__ctl_open_direct {
	struct shoal__ctl_hdr h;
	uint16_t dst_group;
	uint16_t dst_worker;
	uint16_t src_worker;
	uint16_t pad;
};

struct shoal__ctl_direct {
	struct shoal__ctl_hdr h;
	char ring[SHOAL_SEG_REGION_NAME_MAX];
};

struct shoal__ctl_admin {
	struct shoal__ctl_hdr h;
	uint32_t what;                   /* enum shoal__ctl_admin_what */
	uint32_t pad;
	char group[SHOAL_NAME_MAX];      /* "": the whole system (STOP, RELOAD, INFO) */
};

struct shoal__ctl_done {
	struct shoal__ctl_hdr h;
	int32_t pid;                     /* the supervisor's (and router's) pid */
	uint32_t pad;
	char msg[SHOAL_ERR_MSG_MAX];     /* what was done, for people */
	char log_dir[SHOAL__CTL_PATH_MAX];   /* absolute; "": no --log-dir */
};

/* Fill a header for `op` with total length `len`. */
void shoal__ctl_init(struct shoal__ctl_hdr *h, uint16_t op, uint32_t len);

/*
 * Validate a received packet of `len` bytes: magic, version, a known op, the
 * exact length its op and counts imply, NUL-terminated names and, for SUB,
 * a valid filter. Returns the op, or -EBADMSG / -EPROTONOSUPPORT / -EINVAL
 * with the reason in *err. Reads nothing outside [buf, buf + len).
 */
int shoal__ctl_check(const void *buf, size_t len, struct shoal_err *err);

/* The type and filter arrays that follow a validated HELLO. */
const struct shoal__ctl_type *shoal__ctl_hello_types(const struct shoal__ctl_hello *m);
const struct shoal_filter *shoal__ctl_hello_subs(const struct shoal__ctl_hello *m);
size_t shoal__ctl_hello_size(uint32_t n_types, uint32_t n_subs);

/* Send one packet / receive one packet (EINTR retried; they block unless
 * `fd` is non-blocking, as the router's connections are). */
int shoal__ctl_send(int fd, const void *msg, size_t len);
int shoal__ctl_recv(int fd, void *buf, size_t cap);

/* Wait up to `ms` for a packet (or the hang-up that a recv reports) on
 * `fd`: 0, -ETIMEDOUT or -errno (EINTR retried, the deadline kept). */
int shoal__ctl_readable(int fd, int ms);

/* Send an ERROR reply. */
int shoal__ctl_send_error(int fd, int err, const char *msg);

#endif
