/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: control-socket packets, the router's trust boundary on the
 * control path (runtime/proto.c). The input is one received packet.
 *
 * Properties checked, beyond "no crash, no read outside the packet":
 *  - shoal__ctl_check() returns a known op or one of its documented errors,
 *    with a terminated reason, and the same answer whether or not it is
 *    asked for the reason;
 *  - an accepted packet has the magic, version and length the header
 *    promises, the exact size its op implies, and terminated names;
 *  - an accepted HELLO's type and filter arrays lie exactly inside the
 *    packet, every field of them is within its documented limits, and its
 *    filters (like an accepted SUB's) build into a routing table in both
 *    modes, as the router will do with them.
 *
 * The packet is copied into a buffer of exactly its size (malloc'd, so
 * aligned like the router's receive buffer): ASan then catches any read past
 * its end.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <shoal/filter.h>
#include <shoal/message.h>

#include "runtime/control/proto.h"
#include "runtime/route/route.h"
#include "tests/fuzz/fuzz.h"

static bool terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

/* The router builds a table from every filter it accepts: so must we. */
static void build_both(const struct shoal_filter *f, uint32_t n, const uint32_t *types,
		       uint32_t n_types)
{
	static const int modes[] = { SHOAL__ROUTE_INDEXED, SHOAL__ROUTE_FLAT };

	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct shoal__route_table *t = NULL;
		struct shoal_err err;
		int ret = shoal__route_build(&t, f, n, modes[m], &err);

		if (ret != 0)
			fprintf(stderr, "route build of accepted filters: %d %s\n", ret, err.msg);
		FUZZ_CHECK(ret == 0);
		FUZZ_CHECK(shoal__route_count(t) == n);
		for (uint32_t i = 0; i < n; i++)
			FUZZ_CHECK(memcmp(shoal__route_filter(t, i), &f[i], sizeof(f[i])) == 0);
		for (uint32_t i = 0; i < n_types; i++)
			FUZZ_CHECK(shoal__route_type_filters(t, types[i]) <= n);
		shoal__route_free(t);
	}
}

static void walk_hello(const void *pkt, size_t len)
{
	const unsigned char *buf = pkt;
	const struct shoal__ctl_hello *m = pkt;
	const struct shoal__ctl_type *t = shoal__ctl_hello_types(m);
	const struct shoal_filter *f = shoal__ctl_hello_subs(m);
	uint32_t ids[SHOAL__CTL_MAX_TYPES];
	size_t names = 0;

	FUZZ_CHECK(len >= sizeof(*m));
	FUZZ_CHECK(m->n_types <= SHOAL__CTL_MAX_TYPES && m->n_subs <= SHOAL__CTL_MAX_SUBS);
	FUZZ_CHECK(shoal__ctl_hello_size(m->n_types, m->n_subs) == len);
	/* The arrays lie exactly inside the packet. */
	FUZZ_CHECK((const unsigned char *)t == buf + sizeof(*m));
	FUZZ_CHECK((const unsigned char *)f == (const unsigned char *)(t + m->n_types));
	FUZZ_CHECK((const unsigned char *)(f + m->n_subs) == buf + len);
	FUZZ_CHECK(terminated(m->group, sizeof(m->group)) && m->group[0] != '\0');
	names += strlen(m->group);
	for (uint32_t i = 0; i < m->n_types; i++) {
		FUZZ_CHECK(terminated(t[i].name, sizeof(t[i].name)) && t[i].name[0] != '\0');
		FUZZ_CHECK(t[i].id != 0 && t[i].max_size <= SHOAL_TYPE_MAX_SIZE);
		names += strlen(t[i].name);
		ids[i] = t[i].id;
	}
	for (uint32_t i = 0; i < m->n_subs; i++)
		FUZZ_CHECK(shoal_filter_validate(&f[i], NULL) == 0);
	FUZZ_CHECK(names < len);
	build_both(f, m->n_subs, ids, m->n_types);
}

static void walk_accepted(const void *buf, size_t len, int op)
{
	struct shoal__ctl_hdr h;

	FUZZ_CHECK(op > 0 && op < SHOAL__CTL_OP_MAX);
	FUZZ_CHECK(len >= sizeof(h));
	memcpy(&h, buf, sizeof(h));
	FUZZ_CHECK(h.magic == SHOAL__CTL_MAGIC && h.version == SHOAL__CTL_VERSION);
	FUZZ_CHECK(h.op == op && h.len == len);
	switch (op) {
	case SHOAL__CTL_HELLO:
		walk_hello(buf, len);
		break;
	case SHOAL__CTL_WELCOME: {
		const struct shoal__ctl_welcome *w = buf;

		FUZZ_CHECK(len == sizeof(*w));
		FUZZ_CHECK(strlen(w->registry) < sizeof(w->registry));
		FUZZ_CHECK(strlen(w->bell) < sizeof(w->bell));
		FUZZ_CHECK(strlen(w->mailbox) < sizeof(w->mailbox));
		break;
	}
	case SHOAL__CTL_ERROR: {
		const struct shoal__ctl_error *e = buf;

		FUZZ_CHECK(len == sizeof(*e));
		FUZZ_CHECK(strlen(e->msg) < sizeof(e->msg));
		break;
	}
	case SHOAL__CTL_OK:
		FUZZ_CHECK(len == sizeof(struct shoal__ctl_ok));
		break;
	case SHOAL__CTL_SUB: {
		const struct shoal__ctl_sub *s = buf;

		FUZZ_CHECK(len == sizeof(*s));
		FUZZ_CHECK(shoal_filter_validate(&s->f, NULL) == 0);
		build_both(&s->f, 1, s->f.types, s->f.n_types);
		break;
	}
	case SHOAL__CTL_UNSUB:
		FUZZ_CHECK(len == sizeof(struct shoal__ctl_unsub));
		break;
	case SHOAL__CTL_OPEN_DIRECT:
		FUZZ_CHECK(len == sizeof(struct shoal__ctl_open_direct));
		break;
	case SHOAL__CTL_DIRECT: {
		const struct shoal__ctl_direct *d = buf;

		FUZZ_CHECK(len == sizeof(*d));
		FUZZ_CHECK(strlen(d->ring) < sizeof(d->ring));
		break;
	}
	case SHOAL__CTL_BYE:
		FUZZ_CHECK(len == sizeof(struct shoal__ctl_hdr));
		break;
	case SHOAL__CTL_ADMIN: {
		const struct shoal__ctl_admin *a = buf;

		FUZZ_CHECK(len == sizeof(*a));
		FUZZ_CHECK(a->what > 0 && a->what < SHOAL__ADMIN_MAX);
		FUZZ_CHECK(strlen(a->group) < sizeof(a->group));
		break;
	}
	case SHOAL__CTL_DONE: {
		const struct shoal__ctl_done *d = buf;

		FUZZ_CHECK(len == sizeof(*d));
		FUZZ_CHECK(strlen(d->msg) < sizeof(d->msg));
		FUZZ_CHECK(strlen(d->log_dir) < sizeof(d->log_dir));
		break;
	}
	default:
		FUZZ_CHECK(!"unknown op accepted");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shoal_err err;
	void *buf;
	int op, op_quiet;

	/* The router receives at most SHOAL__CTL_MAX bytes (larger packets end
	 * in -EMSGSIZE at recv); the check itself must cope with any length. */
	if (size > 2 * SHOAL__CTL_MAX)
		return 0;
	buf = fuzz_exact_copy(data, size);
	memset(&err, 0x5a, sizeof(err));
	op = shoal__ctl_check(buf, size, &err);
	op_quiet = shoal__ctl_check(buf, size, NULL);
	FUZZ_CHECK(op == op_quiet);
	if (op < 0) {
		FUZZ_CHECK(op == -EBADMSG || op == -EPROTONOSUPPORT || op == -EINVAL);
		FUZZ_CHECK(terminated(err.msg, sizeof(err.msg)) && err.msg[0] != '\0');
	} else {
		walk_accepted(buf, size, op);
	}
	free(buf);
	return 0;
}
