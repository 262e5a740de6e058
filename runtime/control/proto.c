/* SPDX-License-Identifier: MIT */
/*
 * Control protocol: packet validation and blocking send/receive. See proto.h
 * for the message set; the validation here is the only way a router reads a
 * packet, so its checks are the trust boundary of the control path.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include <shoal/filter.h>

#include "runtime/control/proto.h"
#include "shm/util.h"

void shoal__ctl_init(struct shoal__ctl_hdr *h, uint16_t op, uint32_t len)
{
	memset(h, 0, sizeof(*h));
	h->magic = SHOAL__CTL_MAGIC;
	h->version = SHOAL__CTL_VERSION;
	h->op = op;
	h->len = len;
}

size_t shoal__ctl_hello_size(uint32_t n_types, uint32_t n_subs)
{
	return sizeof(struct shoal__ctl_hello) + (size_t)n_types * sizeof(struct shoal__ctl_type) +
	       (size_t)n_subs * sizeof(struct shoal_filter);
}

const struct shoal__ctl_type *shoal__ctl_hello_types(const struct shoal__ctl_hello *m)
{
	return (const struct shoal__ctl_type *)(m + 1);
}

const struct shoal_filter *shoal__ctl_hello_subs(const struct shoal__ctl_hello *m)
{
	return (const struct shoal_filter *)(shoal__ctl_hello_types(m) + m->n_types);
}

static bool terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

static int check_hello(const struct shoal__ctl_hello *m, size_t len, struct shoal_err *err)
{
	const struct shoal__ctl_type *t;
	const struct shoal_filter *f;

	if (len < sizeof(*m))
		return shoal__fail(err, -EBADMSG, "HELLO of %zu bytes is shorter than its header",
				   len);
	if (m->n_types > SHOAL__CTL_MAX_TYPES || m->n_subs > SHOAL__CTL_MAX_SUBS)
		return shoal__fail(err, -EBADMSG, "HELLO declares %u types and %u routes (limits "
				   "%u, %u)", m->n_types, m->n_subs, SHOAL__CTL_MAX_TYPES,
				   SHOAL__CTL_MAX_SUBS);
	if (len != shoal__ctl_hello_size(m->n_types, m->n_subs))
		return shoal__fail(err, -EBADMSG, "HELLO is %zu bytes, its counts imply %zu", len,
				   shoal__ctl_hello_size(m->n_types, m->n_subs));
	if (!terminated(m->group, sizeof(m->group)) || m->group[0] == '\0')
		return shoal__fail(err, -EBADMSG, "HELLO group name is empty or not terminated");
	t = shoal__ctl_hello_types(m);
	for (uint32_t i = 0; i < m->n_types; i++) {
		if (!terminated(t[i].name, sizeof(t[i].name)) || t[i].name[0] == '\0' ||
		    t[i].id == 0 || t[i].max_size > SHOAL_TYPE_MAX_SIZE)
			return shoal__fail(err, -EINVAL, "HELLO type #%u: id %u, max size %u: "
					   "needs a non-zero id, a name and a size up to %u", i,
					   t[i].id, t[i].max_size, SHOAL_TYPE_MAX_SIZE);
	}
	f = shoal__ctl_hello_subs(m);
	for (uint32_t i = 0; i < m->n_subs; i++) {
		struct shoal_err ferr;

		if (shoal_filter_validate(&f[i], &ferr) < 0)
			return shoal__fail(err, -EINVAL, "HELLO route #%u: %s", i, ferr.msg);
	}
	return 0;
}

static int check_admin(const struct shoal__ctl_admin *m, struct shoal_err *err)
{
	if (m->what == 0 || m->what >= SHOAL__ADMIN_MAX)
		return shoal__fail(err, -EINVAL, "unknown ADMIN request %u", m->what);
	if (!terminated(m->group, sizeof(m->group)))
		return shoal__fail(err, -EBADMSG, "ADMIN group name not terminated");
	if ((m->what == SHOAL__ADMIN_RESTART) != (m->group[0] != '\0') &&
	    m->what != SHOAL__ADMIN_STOP)
		return shoal__fail(err, -EINVAL, "ADMIN request %u %s a group", m->what,
				   m->what == SHOAL__ADMIN_RESTART ? "needs" : "takes no");
	return 0;
}

int shoal__ctl_check(const void *buf, size_t len, struct shoal_err *err)
{
	static const size_t fixed[SHOAL__CTL_OP_MAX] = {
		[SHOAL__CTL_WELCOME] = sizeof(struct shoal__ctl_welcome),
		[SHOAL__CTL_ERROR] = sizeof(struct shoal__ctl_error),
		[SHOAL__CTL_OK] = sizeof(struct shoal__ctl_ok),
		[SHOAL__CTL_SUB] = sizeof(struct shoal__ctl_sub),
		[SHOAL__CTL_UNSUB] = sizeof(struct shoal__ctl_unsub),
		[SHOAL__CTL_OPEN_DIRECT] = sizeof(struct shoal__ctl_open_direct),
		[SHOAL__CTL_DIRECT] = sizeof(struct shoal__ctl_direct),
		[SHOAL__CTL_BYE] = sizeof(struct shoal__ctl_hdr),
		[SHOAL__CTL_ADMIN] = sizeof(struct shoal__ctl_admin),
		[SHOAL__CTL_DONE] = sizeof(struct shoal__ctl_done),
	};
	struct shoal__ctl_hdr h;
	int ret;

	if (len < sizeof(h))
		return shoal__fail(err, -EBADMSG, "control packet of %zu bytes", len);
	memcpy(&h, buf, sizeof(h));
	if (h.magic != SHOAL__CTL_MAGIC)
		return shoal__fail(err, -EBADMSG, "control packet magic 0x%08x", h.magic);
	if (h.version != SHOAL__CTL_VERSION)
		return shoal__fail(err, -EPROTONOSUPPORT, "control protocol version %u, this "
				   "build speaks %u", h.version, SHOAL__CTL_VERSION);
	if (h.op == 0 || h.op >= SHOAL__CTL_OP_MAX)
		return shoal__fail(err, -EBADMSG, "unknown control op %u", h.op);
	if (h.len != len)
		return shoal__fail(err, -EBADMSG, "control packet says %u bytes, got %zu", h.len,
				   len);
	if (h.op == SHOAL__CTL_HELLO) {
		ret = check_hello(buf, len, err);
		return ret < 0 ? ret : h.op;
	}
	if (len != fixed[h.op])
		return shoal__fail(err, -EBADMSG, "control op %u of %zu bytes, expected %zu", h.op,
				   len, fixed[h.op]);
	switch (h.op) {
	case SHOAL__CTL_SUB:
		ret = shoal_filter_validate(&((const struct shoal__ctl_sub *)buf)->f, err);
		if (ret < 0)
			return ret;
		break;
	case SHOAL__CTL_ERROR:
		if (!terminated(((const struct shoal__ctl_error *)buf)->msg, SHOAL_ERR_MSG_MAX))
			return shoal__fail(err, -EBADMSG, "ERROR message not terminated");
		break;
	case SHOAL__CTL_DIRECT:
		if (!terminated(((const struct shoal__ctl_direct *)buf)->ring,
				SHOAL_SEG_REGION_NAME_MAX))
			return shoal__fail(err, -EBADMSG, "DIRECT ring name not terminated");
		break;
	case SHOAL__CTL_ADMIN:
		ret = check_admin(buf, err);
		if (ret < 0)
			return ret;
		break;
	case SHOAL__CTL_DONE: {
		const struct shoal__ctl_done *d = buf;

		if (!terminated(d->msg, sizeof(d->msg)) || !terminated(d->log_dir, sizeof(d->log_dir)))
			return shoal__fail(err, -EBADMSG, "DONE text not terminated");
		break;
	}
	case SHOAL__CTL_WELCOME: {
		const struct shoal__ctl_welcome *w = buf;

		if (!terminated(w->registry, sizeof(w->registry)) ||
		    !terminated(w->bell, sizeof(w->bell)) ||
		    !terminated(w->mailbox, sizeof(w->mailbox)))
			return shoal__fail(err, -EBADMSG, "WELCOME segment name not terminated");
		if ((w->flags & ~SHOAL__WELCOME_STREAM) != 0)
			return shoal__fail(err, -EBADMSG, "WELCOME flags 0x%x unknown", w->flags);
		break;
	}
	default:
		break;
	}
	return h.op;
}

int shoal__ctl_send(int fd, const void *msg, size_t len)
{
	ssize_t n;

	do
		n = send(fd, msg, len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EIO;
}

int shoal__ctl_recv(int fd, void *buf, size_t cap)
{
	ssize_t n;

	do
		n = recv(fd, buf, cap, MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	if ((size_t)n > cap)
		return -EMSGSIZE;
	return (int)n;
}

int shoal__ctl_readable(int fd, int ms)
{
	uint64_t end = shoal__now_ns() + (uint64_t)ms * 1000000u;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (;;) {
		uint64_t now = shoal__now_ns();
		int n;

		if (now >= end)
			return -ETIMEDOUT;
		n = poll(&p, 1, (int)((end - now + 999999u) / 1000000u));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int shoal__ctl_send_error(int fd, int err, const char *msg)
{
	struct shoal__ctl_error e;

	memset(&e, 0, sizeof(e));
	shoal__ctl_init(&e.h, SHOAL__CTL_ERROR, sizeof(e));
	e.err = err;
	snprintf(e.msg, sizeof(e.msg), "%s", msg ? msg : "");
	return shoal__ctl_send(fd, &e, sizeof(e));
}
