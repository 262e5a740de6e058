/* SPDX-License-Identifier: MIT */
/*
 * Configuration loading: libyaml builds the document (it does the parsing;
 * nothing here tokenises YAML), then a schema walk maps it onto struct
 * shoal__config, checking each value where it stands so that every error
 * carries its line and column. Unknown and repeated keys are errors.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <numa.h>
#include <yaml.h>

#include <shoal/numa.h>
#include <shoal/ring.h>
#include <shoal/router.h>

#include "runtime/bridge/frame.h"
#include "runtime/bridge/view.h"
#include "runtime/control/config.h"
#include "runtime/layout.h"
#include "shm/util.h"

struct walk {
	yaml_document_t doc;
	const char *file;
	char dir[PATH_MAX];
	struct shoal_err *err;
	struct shoal__config *c;
	yaml_node_t *types;           /* the 'types' value, parsed before anything else */
	yaml_node_t *hosts;           /* the 'hosts' value, parsed right after */
	unsigned flags;               /* SHOAL__CONFIG_* */
};

typedef int (*key_fn)(struct walk *w, yaml_node_t *value, void *obj);

struct key {
	const char *name;
	key_fn fn;
	bool required;
};

__attribute__((format(printf, 5, 0)))
static int vfail_pos(struct walk *w, size_t line, size_t col, int ret, const char *fmt,
		     va_list ap)
{
	char msg[SHOAL_ERR_MSG_MAX];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	return shoal__fail(w->err, ret, "%s:%zu:%zu: %s", w->file, line, col, msg);
}

__attribute__((format(printf, 3, 4)))
static int fail_at(struct walk *w, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vfail_pos(w, n ? n->start_mark.line + 1 : 0, n ? n->start_mark.column + 1 : 0,
			-EINVAL, fmt, ap);
	va_end(ap);
	return ret;
}

__attribute__((format(printf, 4, 5)))
static int fail_pos(struct walk *w, size_t line, size_t col, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vfail_pos(w, line, col, -EINVAL, fmt, ap);
	va_end(ap);
	return ret;
}

static yaml_node_t *node(struct walk *w, int i)
{
	return yaml_document_get_node(&w->doc, i);
}

static const char *kind_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE: return "a scalar";
	case YAML_SEQUENCE_NODE: return "a list";
	case YAML_MAPPING_NODE: return "a mapping";
	default: return "nothing";
	}
}

static int want(struct walk *w, const yaml_node_t *n, yaml_node_type_t t, const char *what)
{
	static const char *names[] = { "", "a scalar", "a list", "a mapping" };

	if (n->type != t)
		return fail_at(w, n, "%s must be %s, not %s", what, names[t], kind_name(n));
	return 0;
}

static int scalar(struct walk *w, const yaml_node_t *n, const char *what, const char **out)
{
	int ret = want(w, n, YAML_SCALAR_NODE, what);

	if (ret == 0)
		*out = (const char *)n->data.scalar.value;
	return ret;
}

/* A non-negative integer in [min, max]: decimal, 0x hex or 0 octal. */
static int uint_in(struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
		   uint64_t max, uint64_t *out)
{
	const char *s = NULL;
	char *end;
	unsigned long long v;
	int ret = scalar(w, n, what, &s);

	if (ret < 0)
		return ret;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (s[0] == '-' || s[0] == '\0' || *end != '\0' || errno != 0)
		return fail_at(w, n, "%s must be a whole number, not '%s'", what, s);
	if (v < min || v > max)
		return fail_at(w, n, "%s is %llu, must be between %llu and %llu", what, v,
			       (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return 0;
}

/* A number with an optional unit suffix from `units` (scale factors). */
struct unit {
	const char *suffix;
	uint64_t scale;
};

static int with_unit(struct walk *w, const yaml_node_t *n, const char *what,
		     const struct unit *units, uint64_t max, uint64_t *out)
{
	const char *s = NULL;
	char *end;
	unsigned long long v;
	int ret = scalar(w, n, what, &s);

	if (ret < 0)
		return ret;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || errno != 0)
		return fail_at(w, n, "%s must be a number with an optional unit, not '%s'", what, s);
	while (*end == ' ')
		end++;
	for (const struct unit *u = units; u->suffix != NULL; u++) {
		if (strcmp(end, u->suffix) != 0)
			continue;
		if (v > max / u->scale)
			return fail_at(w, n, "%s '%s' is too large", what, s);
		*out = v * u->scale;
		return 0;
	}
	return fail_at(w, n, "%s '%s' has an unknown unit '%s'", what, s, end);
}

static int size_of(struct walk *w, const yaml_node_t *n, const char *what, uint32_t *out)
{
	static const struct unit units[] = { { "", 1 }, { "B", 1 }, { "KiB", 1024 },
					     { "MiB", 1024 * 1024 }, { NULL, 0 } };
	uint64_t v;
	int ret = with_unit(w, n, what, units, SHOAL_RING_MAX_CAPACITY, &v);

	if (ret < 0)
		return ret;
	if (v < 4096 || !shoal__is_pow2_u64(v))
		return fail_at(w, n, "%s must be a power of two of at least 4KiB, not %llu bytes",
			       what, (unsigned long long)v);
	*out = (uint32_t)v;
	return 0;
}

static int duration_ns(struct walk *w, const yaml_node_t *n, const char *what, uint64_t *out)
{
	static const struct unit units[] = { { "ns", 1 }, { "us", 1000 }, { "ms", 1000000 },
					     { "s", 1000000000 }, { NULL, 0 } };

	return with_unit(w, n, what, units, UINT64_C(3600) * 1000000000u, out);
}

static int duration_ms(struct walk *w, const yaml_node_t *n, const char *what, uint32_t *out)
{
	uint64_t ns;
	int ret = duration_ns(w, n, what, &ns);

	if (ret == 0)
		*out = (uint32_t)(ns / 1000000);
	return ret;
}

/* One of `words`; the index in *out. */
static int word(struct walk *w, const yaml_node_t *n, const char *what, const char *const *words,
		int *out)
{
	const char *s = NULL;
	char list[160] = "";
	int ret = scalar(w, n, what, &s);

	if (ret < 0)
		return ret;
	for (int i = 0; words[i] != NULL; i++) {
		if (strcmp(s, words[i]) == 0) {
			*out = i;
			return 0;
		}
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
			 words[i]);
	}
	return fail_at(w, n, "%s is '%s', expected one of: %s", what, s, list);
}

static int name_of(struct walk *w, const yaml_node_t *n, const char *what, char *out)
{
	const char *s = NULL;
	struct shoal_err e;
	int ret = scalar(w, n, what, &s);

	if (ret < 0)
		return ret;
	if (shoal__check_name(s, what, &e) < 0)
		return fail_at(w, n, "%s", e.msg);
	snprintf(out, SHOAL_NAME_MAX, "%s", s);
	return 0;
}

/* Walk a mapping against a key table: unknown, repeated and missing keys fail. */
static int mapping(struct walk *w, yaml_node_t *n, const char *what, const struct key *keys,
		   void *obj)
{
	uint32_t seen = 0;
	char list[256] = "";
	int ret = want(w, n, YAML_MAPPING_NODE, what);

	if (ret < 0)
		return ret;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
		const char *name = NULL;
		int i;

		ret = scalar(w, k, "a key", &name);
		if (ret < 0)
			return ret;
		for (i = 0; keys[i].name != NULL; i++)
			if (strcmp(keys[i].name, name) == 0)
				break;
		if (keys[i].name == NULL) {
			for (int j = 0; keys[j].name != NULL; j++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
					 j ? ", " : "", keys[j].name);
			return fail_at(w, k, "unknown key '%s' in %s (expected one of: %s)", name,
				       what, list);
		}
		if (seen & (1u << i))
			return fail_at(w, k, "key '%s' appears twice in %s", name, what);
		seen |= 1u << i;
		ret = keys[i].fn(w, v, obj);
		if (ret < 0)
			return ret;
	}
	for (int i = 0; keys[i].name != NULL; i++)
		if (keys[i].required && !(seen & (1u << i)))
			return fail_at(w, n, "%s has no '%s'", what, keys[i].name);
	return 0;
}

/* ---- router ------------------------------------------------------------------ */

static int k_spin(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return duration_ns(w, v, "router.spin", &w->c->spin_ns);
}

/* At most a second, as hosts.link.spin: a process looking that long
 * between two messages is not idle. */
static int k_yield(struct walk *w, yaml_node_t *v, void *o)
{
	int ret = duration_ns(w, v, "router.yield", &w->c->yield_ns);

	(void)o;
	if (ret == 0 && w->c->yield_ns > UINT64_C(1000000000))
		return fail_at(w, v, "router.yield is longer than 1s");
	return ret;
}

static int k_wake(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return duration_ns(w, v, "router.wake_deadline", &w->c->wake_deadline_ns);
}

static int k_mode(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t m;
	int ret = uint_in(w, v, "router.mode", 0, 0777, &m);

	(void)o;
	if (ret == 0 && (m & 0600) != 0600)
		return fail_at(w, v, "router.mode %04llo must let the owner read and write",
			       (unsigned long long)m);
	/* Anyone who can write a segment can stop the system (a stop flag, a
	 * ring index); anyone who can read it reads every message. */
	if (ret == 0 && (m & 0007) != 0)
		return fail_at(w, v, "router.mode %04llo gives every user access to the "
			       "system's segments; allow the owner and at most its group "
			       "(0600, 0640, 0660)", (unsigned long long)m);
	w->c->mode = (mode_t)m;
	return ret;
}

static int k_uplink(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return size_of(w, v, "router.uplink_capacity", &w->c->uplink_capacity);
}

static int k_inbound(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return size_of(w, v, "router.inbound_capacity", &w->c->inbound_capacity);
}

static int k_direct(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return size_of(w, v, "router.direct_capacity", &w->c->direct_capacity);
}

/* The words in SHOAL_STREAM_* order. */
static int k_stream(struct walk *w, yaml_node_t *v, void *o)
{
	static const char *const words[] = { "auto", "on", "off", NULL };

	(void)o;
	return word(w, v, "router.stream", words, &w->c->stream);
}

static int k_router(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "spin", k_spin, false }, { "yield", k_yield, false },
		{ "wake_deadline", k_wake, false }, { "mode", k_mode, false },
		{ "uplink_capacity", k_uplink, false }, { "inbound_capacity", k_inbound, false },
		{ "direct_capacity", k_direct, false }, { "stream", k_stream, false },
		{ NULL, NULL, false },
	};

	(void)o;
	return mapping(w, v, "router", keys, NULL);
}

/* ---- hosts ------------------------------------------------------------------------ */

/* A byte count with an optional unit, in [min, max]. */
static int bytes_in(struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
		    uint64_t max, uint32_t *out)
{
	static const struct unit units[] = { { "", 1 }, { "B", 1 }, { "KiB", 1024 },
					     { "MiB", 1024 * 1024 }, { "GiB", 1024 * 1024 * 1024 },
					     { NULL, 0 } };
	uint64_t v;
	int ret = with_unit(w, n, what, units, max, &v);

	if (ret < 0)
		return ret;
	if (v < min)
		return fail_at(w, n, "%s is %llu bytes, must be at least %llu", what,
			       (unsigned long long)v, (unsigned long long)min);
	*out = (uint32_t)v;
	return 0;
}

/* A duration above zero: a link option of 0 would mean its default. */
static int positive_ns(struct walk *w, const yaml_node_t *n, const char *what, uint64_t *out)
{
	int ret = duration_ns(w, n, what, out);

	if (ret == 0 && *out == 0)
		return fail_at(w, n, "%s must be longer than 0", what);
	return ret;
}

static int k_l_window(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return bytes_in(w, v, "hosts.link.window", 64 * 1024, UINT32_C(1) << 30,
			&w->c->link.window);
}

static int k_l_flush(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return bytes_in(w, v, "hosts.link.flush", 1, SHOAL__FRAME_MAX - SHOAL__FRAME_HDR,
			&w->c->link.flush_bytes);
}

static int k_l_deadline(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return positive_ns(w, v, "hosts.link.flush_deadline", &w->c->link.flush_ns);
}

static int k_l_keepalive(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return positive_ns(w, v, "hosts.link.keepalive", &w->c->link.keepalive_ns);
}

static int k_l_dead(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return positive_ns(w, v, "hosts.link.dead_after", &w->c->link.dead_ns);
}

static int k_l_backoff(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return positive_ns(w, v, "hosts.link.backoff", &w->c->link.backoff_ns);
}

static int k_l_max_backoff(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return positive_ns(w, v, "hosts.link.max_backoff", &w->c->link.max_backoff_ns);
}

/* At most a second: a spin longer than the keepalive (100 ms) already
 * keeps a bridge with a link up from ever sleeping. */
static int k_l_spin(struct walk *w, yaml_node_t *v, void *o)
{
	int ret = duration_ns(w, v, "hosts.link.spin", &w->c->link.spin_ns);

	(void)o;
	if (ret == 0 && w->c->link.spin_ns > UINT64_C(1000000000))
		return fail_at(w, v, "hosts.link.spin is longer than 1s");
	return ret;
}

static int k_h_link(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "window", k_l_window, false }, { "flush", k_l_flush, false },
		{ "flush_deadline", k_l_deadline, false }, { "keepalive", k_l_keepalive, false },
		{ "dead_after", k_l_dead, false }, { "backoff", k_l_backoff, false },
		{ "max_backoff", k_l_max_backoff, false }, { "spin", k_l_spin, false },
		{ NULL, NULL, false },
	};
	const struct shoal__cfg_link *l = &w->c->link;
	int ret = mapping(w, v, "hosts.link", keys, o);

	if (ret < 0)
		return ret;
	/* Compared with the link layer's defaults for what is not given. */
	if ((l->keepalive_ns ? l->keepalive_ns : 100000000u) >=
	    (l->dead_ns ? l->dead_ns : 1000000000u))
		return fail_at(w, v, "hosts.link: keepalive must be shorter than dead_after, or "
			       "an idle link is dropped between two keepalives");
	if ((l->max_backoff_ns ? l->max_backoff_ns : 1000000000u) <
	    (l->backoff_ns ? l->backoff_ns : 50000000u))
		return fail_at(w, v, "hosts.link: max_backoff is below backoff");
	return 0;
}

static int k_h_down_after(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return positive_ns(w, v, "hosts.down_after", &w->c->down_after_ns);
}

static int k_host_name(struct walk *w, yaml_node_t *v, void *o)
{
	return name_of(w, v, "host", ((struct shoal__cfg_host *)o)->name);
}

/* An address another host can connect to: a fixed port, and for `reach`
 * (or a `listen` that is also the reach) not the wildcard. */
static int address(struct walk *w, yaml_node_t *v, const char *what, bool reached, char *out)
{
	struct sockaddr_storage a;
	struct shoal_err e;
	socklen_t len;
	const char *s = NULL;
	int ret = scalar(w, v, what, &s);

	if (ret < 0)
		return ret;
	if (shoal__addr_parse(s, &a, &len, &e) < 0)
		return fail_at(w, v, "%s: %s (IPv4:PORT or [IPv6]:PORT, numeric)", what, e.msg);
	if (shoal__addr_port(&a) == 0)
		return fail_at(w, v, "%s '%s' has port 0: the other hosts need a fixed port",
			       what, s);
	if (reached && shoal__addr_is_any(&a))
		return fail_at(w, v, "%s '%s' is the wildcard address, which no other host can "
			       "reach", what, s);
	snprintf(out, SHOAL__ADDR_MAX, "%s", s);
	return 0;
}

static int k_host_listen(struct walk *w, yaml_node_t *v, void *o)
{
	return address(w, v, "listen", false, ((struct shoal__cfg_host *)o)->listen);
}

static int k_host_reach(struct walk *w, yaml_node_t *v, void *o)
{
	return address(w, v, "reach", true, ((struct shoal__cfg_host *)o)->reach);
}

/* Two hosts the others would reach at one address. */
static bool same_address(const char *a, const char *b)
{
	struct sockaddr_storage x, y;
	socklen_t lx, ly;

	shoal__addr_parse(a, &x, &lx, NULL);
	shoal__addr_parse(b, &y, &ly, NULL);
	return lx == ly && memcmp(&x, &y, lx) == 0;
}

static int parse_host(struct walk *w, yaml_node_t *item, uint32_t i)
{
	static const struct key keys[] = {
		{ "name", k_host_name, true }, { "listen", k_host_listen, true },
		{ "reach", k_host_reach, false }, { NULL, NULL, false },
	};
	struct shoal__cfg_host *h = &w->c->hosts[i];
	int ret;

	h->line = (unsigned)item->start_mark.line + 1;
	ret = mapping(w, item, "a host", keys, h);
	if (ret < 0)
		return ret;
	if (h->reach[0] == '\0') {
		struct sockaddr_storage a;
		socklen_t len;

		shoal__addr_parse(h->listen, &a, &len, NULL);
		if (shoal__addr_is_any(&a))
			return fail_at(w, item, "host %s listens on the wildcard address %s, which "
				       "no other host can reach: give 'reach' too", h->name,
				       h->listen);
		memcpy(h->reach, h->listen, sizeof(h->reach));
	}
	for (uint32_t j = 0; j < i; j++) {
		const struct shoal__cfg_host *o = &w->c->hosts[j];

		if (strcmp(o->name, h->name) == 0)
			return fail_at(w, item, "host name '%s' is used twice (first at line %u)",
				       h->name, o->line);
		if (same_address(o->reach, h->reach))
			return fail_at(w, item, "host %s is reached at %s, as host %s (line %u) "
				       "is", h->name, h->reach, o->name, o->line);
	}
	return 0;
}

static int k_h_list(struct walk *w, yaml_node_t *v, void *o)
{
	struct shoal__config *c = w->c;
	size_t n;
	int ret = want(w, v, YAML_SEQUENCE_NODE, "hosts.list");

	(void)o;
	if (ret < 0)
		return ret;
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n == 0)
		return fail_at(w, v, "hosts.list is empty: leave 'hosts' out for a system on "
			       "one host");
	if (n > SHOAL__MAX_HOSTS)
		return fail_at(w, v, "hosts.list has %zu entries, more than the %d a system can "
			       "have", n, SHOAL__MAX_HOSTS);
	/* Counted only once the array exists, as in k_types(). */
	c->hosts = calloc(n, sizeof(*c->hosts));
	if (c->hosts == NULL)
		return -ENOMEM;
	c->n_hosts = (uint32_t)n;
	for (uint32_t i = 0; i < c->n_hosts; i++) {
		ret = parse_host(w, node(w, v->data.sequence.items.start[i]), i);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int k_hosts(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "down_after", k_h_down_after, false }, { "link", k_h_link, false },
		{ "list", k_h_list, true }, { NULL, NULL, false },
	};

	(void)o;
	/* Parsed once, before the walk, as types are: groups name hosts. */
	if (v == w->hosts && w->c->hosts != NULL)
		return 0;
	w->c->down_after_ns = UINT64_C(10000000000);
	w->c->link.spin_ns = SHOAL__CFG_LINK_SPIN_NS;
	return mapping(w, v, "hosts", keys, NULL);
}

/* ---- types ----------------------------------------------------------------------- */

static int k_type_id(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t id;
	int ret = uint_in(w, v, "type id", 1, UINT32_MAX, &id);

	((struct shoal__cfg_type *)o)->id = (uint32_t)id;
	return ret;
}

static int k_type_name(struct walk *w, yaml_node_t *v, void *o)
{
	return name_of(w, v, "type", ((struct shoal__cfg_type *)o)->name);
}

static int k_type_size(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct unit units[] = { { "", 1 }, { "B", 1 }, { "KiB", 1024 },
					     { "MiB", 1024 * 1024 }, { NULL, 0 } };
	uint64_t s;
	int ret = with_unit(w, v, "type max_size", units, SHOAL_TYPE_MAX_SIZE, &s);

	((struct shoal__cfg_type *)o)->max_size = (uint32_t)s;
	return ret;
}

static int k_types(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "id", k_type_id, true }, { "name", k_type_name, true },
		{ "max_size", k_type_size, true }, { NULL, NULL, false },
	};
	struct shoal__config *c = w->c;
	size_t n;
	int ret;

	(void)o;
	/* Parsed once, before the walk (shoal__config_parse()): the walk skips it. */
	if (v == w->types && c->types != NULL)
		return 0;
	ret = want(w, v, YAML_SEQUENCE_NODE, "types");
	if (ret < 0)
		return ret;
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n > SHOAL__MAX_TYPES)
		return fail_at(w, v, "types has %zu entries, more than a system's %u", n,
			       SHOAL__MAX_TYPES);
	/* Counted only once the array exists: an error leaves a config that
	 * shoal__config_free() can walk. */
	c->types = calloc(n ? n : 1, sizeof(*c->types));
	if (c->types == NULL)
		return -ENOMEM;
	c->n_types = (uint32_t)n;
	for (uint32_t i = 0; i < c->n_types; i++) {
		yaml_node_t *item = node(w, v->data.sequence.items.start[i]);

		ret = mapping(w, item, "a type", keys, &c->types[i]);
		if (ret < 0)
			return ret;
		for (uint32_t j = 0; j < i; j++)
			if (c->types[j].id == c->types[i].id ||
			    strcmp(c->types[j].name, c->types[i].name) == 0)
				return fail_at(w, item, "type %u '%s' repeats the id or name of "
					       "type %u '%s'", c->types[i].id, c->types[i].name,
					       c->types[j].id, c->types[j].name);
	}
	return 0;
}

/* ---- routes ---------------------------------------------------------------------- */

struct route_walk {
	struct shoal__cfg_route *r;
	int deliver;
};

static int type_ref(struct walk *w, yaml_node_t *n, uint32_t *id)
{
	const char *s = NULL;
	char *end;
	unsigned long v;
	int ret = scalar(w, n, "a route type", &s);

	if (ret < 0)
		return ret;
	v = strtoul(s, &end, 10);
	if (s[0] >= '0' && s[0] <= '9' && *end == '\0' && v > 0 && v <= UINT32_MAX) {
		*id = (uint32_t)v;
		return 0;
	}
	for (uint32_t i = 0; i < w->c->n_types; i++)
		if (strcmp(w->c->types[i].name, s) == 0) {
			*id = w->c->types[i].id;
			return 0;
		}
	return fail_at(w, n, "route type '%s' is neither a number nor a name from 'types'", s);
}

static int k_route_types(struct walk *w, yaml_node_t *v, void *o)
{
	struct shoal_filter *f = &((struct route_walk *)o)->r->f;

	if (v->type == YAML_SCALAR_NODE) {
		f->n_types = 1;
		return type_ref(w, v, &f->types[0]);
	}
	if (want(w, v, YAML_SEQUENCE_NODE, "route types") < 0)
		return -EINVAL;
	f->n_types = (uint32_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (f->n_types == 0 || f->n_types > SHOAL_FILTER_MAX_TYPES)
		return fail_at(w, v, "a route lists 1 to %d types, not %u", SHOAL_FILTER_MAX_TYPES,
			       f->n_types);
	for (uint32_t i = 0; i < f->n_types; i++) {
		int ret = type_ref(w, node(w, v->data.sequence.items.start[i]), &f->types[i]);

		if (ret < 0)
			return ret;
	}
	return 0;
}

static int k_key_offset(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret = uint_in(w, v, "key offset", 0, SHOAL_TYPE_MAX_SIZE, &x);

	((struct shoal_key *)o)->offset = (uint32_t)x;
	return ret;
}

static int k_key_width(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret = uint_in(w, v, "key width", 1, 8, &x);

	if (ret == 0 && (x & (x - 1)) != 0)
		return fail_at(w, v, "key width must be 1, 2, 4 or 8 bytes, not %llu",
			       (unsigned long long)x);
	((struct shoal_key *)o)->width = (uint8_t)x;
	return ret;
}

static int k_route_key(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "offset", k_key_offset, true }, { "width", k_key_width, true },
		{ NULL, NULL, false },
	};

	return mapping(w, v, "route key", keys, &((struct route_walk *)o)->r->f.key);
}

/* A list of exactly `n` numbers. */
static int numbers(struct walk *w, yaml_node_t *v, const char *what, uint64_t *out, size_t min,
		   size_t max, size_t *count)
{
	size_t n;
	int ret = want(w, v, YAML_SEQUENCE_NODE, what);

	if (ret < 0)
		return ret;
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n < min || n > max)
		return fail_at(w, v, "%s takes %zu to %zu values, not %zu", what, min, max, n);
	for (size_t i = 0; i < n; i++) {
		ret = uint_in(w, node(w, v->data.sequence.items.start[i]), what, 0, UINT64_MAX,
			      &out[i]);
		if (ret < 0)
			return ret;
	}
	*count = n;
	return 0;
}

static int k_route_match(struct walk *w, yaml_node_t *v, void *o)
{
	struct shoal_key *k = &((struct route_walk *)o)->r->f.key;
	static const char *const ops[] = { "any", "eq", "in", "range", "mod", NULL };
	uint64_t vals[SHOAL_FILTER_MAX_SET];
	yaml_node_t *kn, *vn;
	size_t n;
	int op, ret;

	if (v->type == YAML_SCALAR_NODE) {
		ret = word(w, v, "route match", ops, &op);
		if (ret == 0 && op != SHOAL_KEY_ANY)
			return fail_at(w, v, "match '%s' needs values, e.g. {%s: ...}", ops[op],
				       ops[op]);
		k->op = SHOAL_KEY_ANY;
		return ret;
	}
	if (want(w, v, YAML_MAPPING_NODE, "route match") < 0)
		return -EINVAL;
	if (v->data.mapping.pairs.top - v->data.mapping.pairs.start != 1)
		return fail_at(w, v, "route match has exactly one of: eq, in, range, mod");
	kn = node(w, v->data.mapping.pairs.start[0].key);
	vn = node(w, v->data.mapping.pairs.start[0].value);
	ret = word(w, kn, "route match", ops, &op);
	if (ret < 0)
		return ret;
	k->op = (uint8_t)op;
	switch (op) {
	case SHOAL_KEY_EQ:
		return uint_in(w, vn, "match eq", 0, UINT64_MAX, &k->a);
	case SHOAL_KEY_IN:
		ret = numbers(w, vn, "match in", k->set, 1, SHOAL_FILTER_MAX_SET, &n);
		k->n_set = (uint16_t)n;
		return ret;
	case SHOAL_KEY_RANGE:
		ret = numbers(w, vn, "match range", vals, 2, 2, &n);
		if (ret == 0 && vals[0] > vals[1])
			return fail_at(w, vn, "match range [%llu, %llu] is empty",
				       (unsigned long long)vals[0], (unsigned long long)vals[1]);
		k->a = vals[0];
		k->b = vals[1];
		return ret;
	case SHOAL_KEY_MOD:
		ret = numbers(w, vn, "match mod [n, i]", vals, 2, 2, &n);
		if (ret == 0 && (vals[0] == 0 || vals[1] >= vals[0]))
			return fail_at(w, vn, "match mod [%llu, %llu] needs n > 0 and i < n",
				       (unsigned long long)vals[0], (unsigned long long)vals[1]);
		k->a = vals[0];
		k->b = vals[1];
		return ret;
	default:
		return fail_at(w, kn, "match 'any' takes no values: write 'match: any'");
	}
}

static int k_route_deliver(struct walk *w, yaml_node_t *v, void *o)
{
	static const char *const modes[] = { "group", "unicast", "broadcast", "discard", NULL };
	int mode, ret = word(w, v, "route deliver", modes, &mode);

	((struct route_walk *)o)->r->f.mode = (uint8_t)mode;
	return ret;
}

static int parse_route(struct walk *w, yaml_node_t *n, uint32_t group)
{
	static const struct key keys[] = {
		{ "types", k_route_types, true }, { "key", k_route_key, false },
		{ "match", k_route_match, false }, { "deliver", k_route_deliver, false },
		{ NULL, NULL, false },
	};
	struct shoal__config *c = w->c;
	struct shoal__cfg_route *r = &c->routes[c->n_routes];
	struct route_walk rw = { r, 0 };
	struct shoal_err ferr;
	int ret;

	memset(r, 0, sizeof(*r));
	r->line = (unsigned)n->start_mark.line + 1;
	r->col = (unsigned)n->start_mark.column + 1;
	ret = mapping(w, n, "a route", keys, &rw);
	if (ret < 0)
		return ret;
	r->f.group = (uint16_t)group;
	if (shoal_filter_validate(&r->f, &ferr) < 0)
		return fail_at(w, n, "invalid route: %s", ferr.msg);
	c->n_routes++;
	return 0;
}

/* ---- groups ------------------------------------------------------------------------ */

struct group_walk {
	struct shoal__cfg_group *g;
	uint32_t index;
};

#define GW(o) (((struct group_walk *)(o))->g)

static int k_g_name(struct walk *w, yaml_node_t *v, void *o)
{
	return name_of(w, v, "group", GW(o)->name);
}

/* Look a bare program name up in $SHOAL_PATH, then $PATH, like a shell. */
static bool search_program(const char *name, char *out, size_t len)
{
	const char *lists[2] = { getenv("SHOAL_PATH"), getenv("PATH") };

	for (int l = 0; l < 2; l++) {
		const char *p = lists[l];

		while (p != NULL && *p != '\0') {
			const char *end = strchr(p, ':');
			size_t n = end ? (size_t)(end - p) : strlen(p);

			if (n > 0 && (size_t)snprintf(out, len, "%.*s/%s", (int)n, p, name) < len &&
			    access(out, X_OK) == 0)
				return true;
			p = end ? end + 1 : NULL;
		}
	}
	return false;
}

static int k_g_program(struct walk *w, yaml_node_t *v, void *o)
{
	char path[2 * PATH_MAX];
	const char *s = NULL;
	int ret = scalar(w, v, "program", &s);

	if (ret < 0)
		return ret;
	if (s[0] == '\0')
		return fail_at(w, v, "program is empty");
	if (strlen(s) >= PATH_MAX)
		return fail_at(w, v, "program path is too long");
	if (w->flags & SHOAL__CONFIG_NO_PROGRAMS) {
		snprintf(path, sizeof(path), "%s", s);
	} else if (strchr(s, '/') == NULL) {
		if (!search_program(s, path, sizeof(path)))
			return fail_at(w, v, "program '%s' is not in $SHOAL_PATH or $PATH", s);
	} else if (s[0] == '/') {
		snprintf(path, sizeof(path), "%s", s);
	} else {
		snprintf(path, sizeof(path), "%s/%s", w->dir, s);
	}
	if (!(w->flags & SHOAL__CONFIG_NO_PROGRAMS) && access(path, X_OK) != 0)
		return fail_at(w, v, "program %s cannot be executed: %s", path, strerror(errno));
	GW(o)->program = strdup(path);
	return GW(o)->program ? 0 : -ENOMEM;
}

static int k_g_args(struct walk *w, yaml_node_t *v, void *o)
{
	size_t n;
	int ret = want(w, v, YAML_SEQUENCE_NODE, "args");

	if (ret < 0)
		return ret;
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	free(GW(o)->argv);
	GW(o)->argv = calloc(n + 2, sizeof(char *));
	if (GW(o)->argv == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *s = NULL;

		ret = scalar(w, node(w, v->data.sequence.items.start[i]), "an argument", &s);
		if (ret < 0)
			return ret;
		GW(o)->argv[i + 1] = strdup(s);
		if (GW(o)->argv[i + 1] == NULL)
			return -ENOMEM;
	}
	return 0;
}

static int k_g_env(struct walk *w, yaml_node_t *v, void *o)
{
	size_t n, i = 0;
	int ret = want(w, v, YAML_MAPPING_NODE, "env");

	if (ret < 0)
		return ret;
	n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	GW(o)->env = calloc(n + 1, sizeof(char *));
	if (GW(o)->env == NULL)
		return -ENOMEM;
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
	     p++, i++) {
		const char *key = NULL, *val = NULL;
		size_t len;

		if (scalar(w, node(w, p->key), "an env key", &key) < 0 ||
		    scalar(w, node(w, p->value), "an env value", &val) < 0)
			return -EINVAL;
		if (key[0] == '\0' || strchr(key, '=') != NULL || strncmp(key, "SHOAL_", 6) == 0)
			return fail_at(w, node(w, p->key), "env key '%s' is empty, has '=' or uses "
				       "the reserved SHOAL_ prefix", key);
		len = strlen(key) + strlen(val) + 2;
		GW(o)->env[i] = malloc(len);
		if (GW(o)->env[i] == NULL)
			return -ENOMEM;
		snprintf(GW(o)->env[i], len, "%s=%s", key, val);
	}
	return 0;
}

static int k_g_actors(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret = uint_in(w, v, "actors", 1, SHOAL_MAX_ACTORS, &x);

	GW(o)->actors = (uint16_t)x;
	return ret;
}

static int k_g_workers(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret = uint_in(w, v, "workers", 1, SHOAL_MAX_WORKERS, &x);

	GW(o)->workers = (uint16_t)x;
	return ret;
}

static int k_g_node(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret;

	if (v->type == YAML_SCALAR_NODE && strcmp((char *)v->data.scalar.value, "auto") == 0) {
		GW(o)->node = -1;
		return 0;
	}
	ret = uint_in(w, v, "node", 0, SHOAL_MAX_NODES - 1, &x);
	if (ret == 0 && (int)x >= shoal_numa_node_count())
		return fail_at(w, v, "NUMA node %llu does not exist on this machine (%d node%s)",
			       (unsigned long long)x, shoal_numa_node_count(),
			       shoal_numa_node_count() == 1 ? "" : "s");
	GW(o)->node = (int)x;
	return ret;
}

/*
 * cpus: a list like "0-3,64,130-131" into a libnuma CPU set, of any CPU
 * numbers below SHOAL__CPUS_MAX. Whether this machine has them is the
 * business of the host that runs the group (shoal__config_check_cpus()):
 * a file for a large host checks on a small one.
 */
static int k_g_cpus(struct walk *w, yaml_node_t *v, void *o)
{
	struct shoal__cfg_group *g = GW(o);
	const char *s = NULL, *p;
	int ret = scalar(w, v, "cpus", &s);

	if (ret < 0)
		return ret;
	if (*s == '\0')
		return fail_at(w, v, "cpus is empty");
	g->cpus = numa_bitmask_alloc(SHOAL__CPUS_MAX);   /* freed with the config */
	if (g->cpus == NULL)
		return fail_at(w, v, "out of memory");
	g->cpus_line = v->start_mark.line + 1;
	g->cpus_col = v->start_mark.column + 1;
	for (p = s;; p++) {
		unsigned long lo, hi;
		char *end;

		if (!isdigit((unsigned char)*p))
			return fail_at(w, v, "cpus '%s' is not a list like '0-3,64,130-131'", s);
		lo = hi = strtoul(p, &end, 10);
		if (*end == '-') {
			p = end + 1;
			if (!isdigit((unsigned char)*p) || (hi = strtoul(p, &end, 10)) < lo)
				return fail_at(w, v, "cpus '%s' has a bad range", s);
		}
		if (hi >= SHOAL__CPUS_MAX)
			return fail_at(w, v, "cpus '%s' names CPU %lu; CPU numbers go up to %u", s,
				       hi, SHOAL__CPUS_MAX - 1);
		for (unsigned long c = lo; c <= hi; c++)
			numa_bitmask_setbit(g->cpus, (unsigned)c);
		if (*end == '\0')
			return 0;
		if (*end != ',')
			return fail_at(w, v, "cpus '%s' is not a list like '0-3,64,130-131'", s);
		p = end;
	}
}

static int k_g_mailbox(struct walk *w, yaml_node_t *v, void *o)
{
	return size_of(w, v, "mailbox", &GW(o)->mailbox);
}

static int k_g_overflow(struct walk *w, yaml_node_t *v, void *o)
{
	static const char *const words[] = { "block", "drop", NULL };
	int x, ret = word(w, v, "overflow", words, &x);

	GW(o)->overflow = (uint8_t)x;
	return ret;
}

static int k_r_policy(struct walk *w, yaml_node_t *v, void *o)
{
	static const char *const words[] = { "never", "on-failure", "always", NULL };
	int x, ret = word(w, v, "restart policy", words, &x);

	((struct shoal__cfg_group *)o)->restart = (uint8_t)x;
	return ret;
}

static int k_r_backoff(struct walk *w, yaml_node_t *v, void *o)
{
	return duration_ms(w, v, "restart backoff", &((struct shoal__cfg_group *)o)->backoff_ms);
}

static int k_r_max_backoff(struct walk *w, yaml_node_t *v, void *o)
{
	return duration_ms(w, v, "restart max_backoff",
			   &((struct shoal__cfg_group *)o)->max_backoff_ms);
}

static int k_r_retries(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret;

	if (v->type == YAML_SCALAR_NODE && strcmp((char *)v->data.scalar.value, "unlimited") == 0) {
		((struct shoal__cfg_group *)o)->max_retries = -1;
		return 0;
	}
	ret = uint_in(w, v, "restart max_retries", 0, INT32_MAX, &x);
	((struct shoal__cfg_group *)o)->max_retries = (int32_t)x;
	return ret;
}

static int k_r_give_up(struct walk *w, yaml_node_t *v, void *o)
{
	static const char *const words[] = { "continue", "stop", NULL };
	int x, ret = word(w, v, "restart on_give_up", words, &x);

	((struct shoal__cfg_group *)o)->on_failure = (uint8_t)x;
	return ret;
}

static int k_g_restart(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "policy", k_r_policy, true }, { "backoff", k_r_backoff, false },
		{ "max_backoff", k_r_max_backoff, false }, { "max_retries", k_r_retries, false },
		{ "on_give_up", k_r_give_up, false }, { NULL, NULL, false },
	};

	return mapping(w, v, "restart", keys, GW(o));
}

static int k_s_order(struct walk *w, yaml_node_t *v, void *o)
{
	uint64_t x;
	int ret = uint_in(w, v, "stop order", 0, 1000000, &x);

	((struct shoal__cfg_group *)o)->stop_order = (int32_t)x;
	return ret;
}

static int k_s_timeout(struct walk *w, yaml_node_t *v, void *o)
{
	return duration_ms(w, v, "stop timeout", &((struct shoal__cfg_group *)o)->stop_timeout_ms);
}

static int k_g_stop(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "order", k_s_order, false }, { "timeout", k_s_timeout, false },
		{ NULL, NULL, false },
	};

	return mapping(w, v, "stop", keys, GW(o));
}

static int k_g_routes(struct walk *w, yaml_node_t *v, void *o)
{
	struct shoal__config *c = w->c;
	struct shoal__cfg_route *routes;
	size_t n;
	int ret = want(w, v, YAML_SEQUENCE_NODE, "routes");

	if (ret < 0)
		return ret;
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	routes = realloc(c->routes, (c->n_routes + n + 1) * sizeof(*c->routes));
	if (routes == NULL)
		return -ENOMEM;
	c->routes = routes;
	for (size_t i = 0; i < n; i++) {
		ret = parse_route(w, node(w, v->data.sequence.items.start[i]),
				  ((struct group_walk *)o)->index);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* "a, b, c": the hosts of the file, for a message that names a wrong one. */
static const char *host_names(const struct shoal__config *c, char *buf, size_t len)
{
	buf[0] = '\0';
	for (uint32_t i = 0; i < c->n_hosts; i++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? ", " : "",
			 c->hosts[i].name);
	return buf;
}

static int k_g_host(struct walk *w, yaml_node_t *v, void *o)
{
	const struct shoal__config *c = w->c;
	char names[256];
	const char *s = NULL;
	int ret = scalar(w, v, "host", &s);

	if (ret < 0)
		return ret;
	if (c->n_hosts == 0)
		return fail_at(w, v, "group %s names host '%s', but the file lists no hosts "
			       "(see 'hosts:' in docs/config.md)", GW(o)->name, s);
	GW(o)->host = shoal__config_host(c, s);
	if (GW(o)->host >= 0)
		return 0;
	return fail_at(w, v, "unknown host '%s' (the hosts: %s)", s,
		       host_names(c, names, sizeof(names)));
}

static int k_groups(struct walk *w, yaml_node_t *v, void *o)
{
	static const struct key keys[] = {
		{ "name", k_g_name, true }, { "program", k_g_program, true },
		{ "args", k_g_args, false }, { "env", k_g_env, false },
		{ "actors", k_g_actors, false }, { "workers", k_g_workers, false },
		{ "node", k_g_node, false }, { "cpus", k_g_cpus, false },
		{ "mailbox", k_g_mailbox, false }, { "overflow", k_g_overflow, false },
		{ "restart", k_g_restart, false }, { "stop", k_g_stop, false },
		{ "routes", k_g_routes, false }, { "host", k_g_host, false },
		{ NULL, NULL, false },
	};
	struct shoal__config *c = w->c;
	size_t n;
	int ret = want(w, v, YAML_SEQUENCE_NODE, "groups");

	(void)o;
	if (ret < 0)
		return ret;
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n == 0)
		return fail_at(w, v, "groups is empty: a system needs at least one group");
	if (n > SHOAL_MAX_GROUPS)
		return fail_at(w, v, "groups has %zu entries, more than the limit of %d groups "
			       "a system can have (SHOAL_MAX_GROUPS)", n, SHOAL_MAX_GROUPS);
	/* Counted only once the array exists, as in k_types(). */
	c->groups = calloc(n, sizeof(*c->groups));
	if (c->groups == NULL)
		return -ENOMEM;
	c->n_groups = (uint32_t)n;
	for (uint32_t i = 0; i < c->n_groups; i++) {
		struct shoal__cfg_group *g = &c->groups[i];
		yaml_node_t *item = node(w, v->data.sequence.items.start[i]);
		struct group_walk gw = { g, i };

		g->workers = 1;
		g->actors = 1;
		g->node = -1;
		g->restart = SHOAL__RESTART_ON_FAILURE;
		g->max_retries = 5;
		g->backoff_ms = 100;
		g->max_backoff_ms = 10000;
		g->stop_timeout_ms = 5000;
		g->host = -1;
		g->line = (unsigned)item->start_mark.line + 1;
		ret = mapping(w, item, "a group", keys, &gw);
		if (ret < 0)
			return ret;
		if (c->n_hosts > 0 && g->host < 0)
			return fail_at(w, item, "group %s has no 'host': the file lists hosts, so "
				       "each group says which one runs it", g->name);
		if (c->n_hosts > 0 && strcmp(g->name, SHOAL__BRIDGE_GROUP) == 0)
			return fail_at(w, item, "group name '%s' is the built-in bridge's in a "
				       "system that lists hosts", g->name);
		if (g->argv == NULL && (g->argv = calloc(2, sizeof(char *))) == NULL)
			return -ENOMEM;
		g->argv[0] = strdup(g->program);
		if (g->argv[0] == NULL)
			return -ENOMEM;
		if (g->max_backoff_ms < g->backoff_ms)
			return fail_at(w, item, "group %s: restart max_backoff is below backoff",
				       g->name);
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(c->groups[j].name, g->name) == 0)
				return fail_at(w, item, "group name '%s' is used twice (first at "
					       "line %u)", g->name, c->groups[j].line);
	}
	return 0;
}

static int k_system(struct walk *w, yaml_node_t *v, void *o)
{
	(void)o;
	return name_of(w, v, "system", w->c->system);
}

/* The router's capacities, with its defaults for what the file leaves out. */
static uint32_t inbound_of(const struct shoal__config *c, const struct shoal__cfg_group *g)
{
	if (g != NULL && g->mailbox != 0)
		return g->mailbox;
	return c->inbound_capacity ? c->inbound_capacity : SHOAL_ROUTER_INBOUND_CAPACITY_DEFAULT;
}

static uint32_t uplink_of(const struct shoal__config *c)
{
	return c->uplink_capacity ? c->uplink_capacity : SHOAL_ROUTER_UPLINK_CAPACITY_DEFAULT;
}

static uint32_t direct_of(const struct shoal__config *c)
{
	return c->direct_capacity ? c->direct_capacity : SHOAL_ROUTER_DIRECT_CAPACITY_DEFAULT;
}

/* The largest record a ring of `capacity` data bytes takes (shm/ring.c). */
static uint64_t ring_max_record(uint32_t capacity)
{
	return capacity / 2 - SHOAL_RING_REC_HDR;
}

/* Group i's node in the file, for its position in a message. */
static const yaml_node_t *group_node(struct walk *w, yaml_node_t *root, uint32_t i)
{
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = node(w, p->key), *v = node(w, p->value);

		if (strcmp((char *)k->data.scalar.value, "groups") == 0)
			return node(w, v->data.sequence.items.start[i]);
	}
	return root;
}

/*
 * A type routed to a group must fit the group's inbound rings, or the
 * dispatcher drops every message of it as malformed while send returns 0.
 * Only declared types have a known size.
 */
static int check_route_sizes(struct walk *w)
{
	const struct shoal__config *c = w->c;

	for (uint32_t i = 0; i < c->n_routes; i++) {
		const struct shoal__cfg_route *r = &c->routes[i];
		const struct shoal__cfg_group *g = &c->groups[r->f.group];
		uint32_t in = inbound_of(c, g);

		for (uint32_t k = 0; k < r->f.n_types; k++) {
			const struct shoal__cfg_type *t = NULL;
			uint64_t need, cap;

			for (uint32_t j = 0; j < c->n_types && t == NULL; j++)
				if (c->types[j].id == r->f.types[k])
					t = &c->types[j];
			if (t == NULL)
				continue;
			need = sizeof(struct shoal_envelope) + (uint64_t)t->max_size;
			if (need <= ring_max_record(in))
				continue;
			for (cap = 4096; ring_max_record((uint32_t)cap) < need; cap *= 2)
				;
			return fail_pos(w, r->line, r->col, "group %s: type %u '%s' (max_size %u) does "
					"not fit its rings of %u bytes (%s), which carry at most %llu: "
					"all would be dropped as malformed; set mailbox: %llu or more",
					g->name, t->id, t->name, t->max_size, in,
					g->mailbox ? "mailbox" : c->inbound_capacity ?
					"router.inbound_capacity" : "the default",
					(unsigned long long)(ring_max_record(in) -
							     sizeof(struct shoal_envelope)),
					(unsigned long long)cap);
		}
	}
	return 0;
}

/* The 'hosts' node, for messages about the section as a whole. */
static const yaml_node_t *hosts_node(const struct walk *w, const yaml_node_t *root)
{
	return w->hosts != NULL ? w->hosts : root;
}

/*
 * What hosts add: the bridge's mailbox (a group of every host that has
 * peers) must have a segment name, and a link's window must take the
 * largest message of a declared type, or no message of it ever crosses.
 */
static int check_hosts(struct walk *w, yaml_node_t *root)
{
	const struct shoal__config *c = w->c;
	char seg[SHOAL_SEG_NAME_MAX];
	uint32_t window = c->link.window ? c->link.window : SHOAL__CFG_LINK_WINDOW;

	if (c->n_hosts > 1 && shoal__name_mailbox(seg, c->system, SHOAL__BRIDGE_GROUP) < 0)
		return fail_at(w, hosts_node(w, root), "the bridge's mailbox name shoal.%s.g.%s "
			       "would be longer than the %d characters of a segment name: "
			       "shorten the system name", c->system, SHOAL__BRIDGE_GROUP,
			       SHOAL_SEG_NAME_MAX - 1);
	for (uint32_t i = 0; i < c->n_types; i++) {
		const struct shoal__cfg_type *t = &c->types[i];
		uint32_t need = shoal__frame_rec_size((uint32_t)sizeof(struct shoal_envelope) +
						      t->max_size);

		if (need > window)
			return fail_at(w, hosts_node(w, root), "type %u '%s' (max_size %u) takes "
				       "%u bytes in a frame, more than the links' window of %u "
				       "bytes%s: set hosts.link.window to %u or more", t->id,
				       t->name, t->max_size, need, window,
				       c->link.window ? "" : " (the default)", need);
	}
	return check_route_sizes(w);
}

static int check_whole(struct walk *w, yaml_node_t *root)
{
	struct shoal__config *c = w->c;
	char seg[SHOAL_SEG_NAME_MAX];
	uint32_t in = inbound_of(c, NULL), up = uplink_of(c);

	/* The router's rule. */
	if (in < up)
		return fail_at(w, root, "router.inbound_capacity (%u bytes%s) must be at least "
			       "router.uplink_capacity (%u bytes%s)", in,
			       c->inbound_capacity ? "" : ", the default", up,
			       c->uplink_capacity ? "" : ", the default");
	/* The router names each mailbox after the system and the group; it
	 * refuses a name that does not fit a segment name. */
	for (uint32_t i = 0; i < c->n_groups; i++)
		if (shoal__name_mailbox(seg, c->system, c->groups[i].name) < 0)
			return fail_at(w, group_node(w, root, i), "group %s: its mailbox name "
				       "shoal.%s.g.%s would be %zu characters, more than the %d "
				       "of a segment name: shorten the system or the group name",
				       c->groups[i].name, c->system, c->groups[i].name,
				       strlen(c->system) + strlen(c->groups[i].name) + 9,
				       SHOAL_SEG_NAME_MAX - 1);
	if (c->n_hosts > 0)
		return check_hosts(w, root);
	return check_route_sizes(w);
}

/*
 * Parse the top-level `key` now, if the file has it, and note its node in
 * *at: its parser skips that node in the walk, which refuses a second `key`.
 */
static int prewalk(struct walk *w, yaml_node_t *root, const char *key, yaml_node_t **at,
		   key_fn fn)
{
	if (root->type != YAML_MAPPING_NODE)
		return 0;
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = node(w, p->key);

		if (k->type == YAML_SCALAR_NODE && strcmp((char *)k->data.scalar.value, key) == 0) {
			*at = node(w, p->value);
			return fn(w, *at, NULL);
		}
	}
	return 0;
}

int shoal__config_parse(const char *name, const char *text, size_t len,
			struct shoal__config **out, struct shoal_err *err)
{
	return shoal__config_parse_flags(name, text, len, 0, out, err);
}

int shoal__config_parse_flags(const char *name, const char *text, size_t len, unsigned flags,
			      struct shoal__config **out, struct shoal_err *err)
{
	static const struct key keys[] = {
		{ "system", k_system, true }, { "router", k_router, false },
		{ "types", k_types, false }, { "groups", k_groups, true },
		{ "hosts", k_hosts, false }, { NULL, NULL, false },
	};
	struct walk w = { .file = name, .err = err, .flags = flags };
	yaml_parser_t parser;
	yaml_node_t *root;
	const char *slash = strrchr(name, '/');
	int ret;

	w.c = calloc(1, sizeof(*w.c));
	if (w.c == NULL || (w.c->path = strdup(name)) == NULL) {
		free(w.c);
		return shoal__fail(err, -ENOMEM, "%s: out of memory", name);
	}
	if (slash == NULL)
		snprintf(w.dir, sizeof(w.dir), ".");
	else
		snprintf(w.dir, sizeof(w.dir), "%.*s", (int)(slash - name), name);
	if (w.dir[0] == '\0')
		snprintf(w.dir, sizeof(w.dir), "/");
	if (!yaml_parser_initialize(&parser)) {
		shoal__config_free(w.c);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &w.doc)) {
		ret = shoal__fail(err, -EINVAL, "%s:%zu:%zu: %s%s%s", name,
				  parser.problem_mark.line + 1, parser.problem_mark.column + 1,
				  parser.problem ? parser.problem : "invalid YAML",
				  parser.context ? " " : "", parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		shoal__config_free(w.c);
		return ret;
	}
	root = yaml_document_get_root_node(&w.doc);
	/* Types and hosts first: routes refer to types and groups to hosts by
	 * name wherever they appear, so 'groups' may come before them. */
	if (root == NULL) {
		ret = shoal__fail(err, -EINVAL, "%s:1:1: the file is empty", name);
	} else {
		ret = prewalk(&w, root, "types", &w.types, k_types);
		if (ret == 0)
			ret = prewalk(&w, root, "hosts", &w.hosts, k_hosts);
		if (ret == 0)
			ret = mapping(&w, root, "the file", keys, NULL);
		if (ret == 0)
			ret = check_whole(&w, root);
	}
	yaml_document_delete(&w.doc);
	yaml_parser_delete(&parser);
	if (ret < 0) {
		if (ret == -ENOMEM)
			shoal__fail(err, ret, "%s: out of memory", name);
		shoal__config_free(w.c);
		return ret;
	}
	*out = w.c;
	return 0;
}

int shoal__config_load(const char *path, struct shoal__config **out, struct shoal_err *err)
{
	return shoal__config_load_flags(path, 0, out, err);
}

int shoal__config_load_flags(const char *path, unsigned flags, struct shoal__config **out,
			     struct shoal_err *err)
{
	FILE *f = fopen(path, "re");
	char *text;
	long len;
	int ret;

	if (f == NULL)
		return shoal__fail(err, -errno, "%s: %s", path, strerror(errno));
	if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || len > (1 << 24) ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return shoal__fail(err, -EINVAL, "%s: not a regular file of at most 16 MiB", path);
	}
	text = malloc((size_t)len + 1);
	if (text == NULL || fread(text, 1, (size_t)len, f) != (size_t)len) {
		free(text);
		fclose(f);
		return shoal__fail(err, -EIO, "%s: cannot read", path);
	}
	fclose(f);
	ret = shoal__config_parse_flags(path, text, (size_t)len, flags, out, err);
	free(text);
	return ret;
}

/* argv[0] is set last (k_groups()): a group refused before that still has
 * its arguments from argv[1] on. */
static void free_argv(char **argv)
{
	if (argv == NULL)
		return;
	free(argv[0]);
	for (char **p = argv + 1; *p != NULL; p++)
		free(*p);
	free(argv);
}

static void free_list(char **l)
{
	if (l == NULL)
		return;
	for (char **p = l; *p != NULL; p++)
		free(*p);
	free(l);
}

void shoal__config_free(struct shoal__config *c)
{
	if (c == NULL)
		return;
	for (uint32_t i = 0; i < c->n_groups; i++) {
		free(c->groups[i].program);
		free_argv(c->groups[i].argv);
		free_list(c->groups[i].env);
		if (c->groups[i].cpus != NULL)
			numa_bitmask_free(c->groups[i].cpus);
	}
	free(c->groups);
	free(c->types);
	free(c->routes);
	free(c->hosts);
	free(c->path);
	free(c);
}

static uint64_t round_up(uint64_t n, uint64_t page)
{
	return (n + page - 1) / page * page;
}

uint64_t shoal__config_shm_bytes(const struct shoal__config *c,
				 const struct shoal__config *running, uint64_t page)
{
	/* With other hosts, rings to and from the bridge as the router sizes
	 * them (shoal__router_bridge_rings()). */
	uint32_t bridge_cap = c->n_hosts < 2 ? 0 :
			      shoal__bridge_ring_cap(inbound_of(c, NULL), direct_of(c));
	uint64_t n = 0;

	if (page == 0)
		page = 4096;
	if (running == NULL)
		n += shoal__system_seg_size(page);
	for (uint32_t i = 0; i < c->n_groups; i++) {
		const struct shoal__cfg_group *g = &c->groups[i];

		if (running != NULL && shoal__config_group(running, g->name) >= 0)
			continue;
		n += round_up(shoal__mailbox_size(g->workers, uplink_of(c), inbound_of(c, g),
						  direct_of(c), bridge_cap,
						  bridge_cap != 0 &&
							  strcmp(g->name, SHOAL__BRIDGE_GROUP) == 0),
			      page);
	}
	/* The bridge a host with peers runs: the supervisor adds it to the
	 * groups it starts, not to the file (`shoal run --check`'s count),
	 * and it makes its link view, a row per other host. */
	if (bridge_cap != 0 && running == NULL && shoal__config_group(c, SHOAL__BRIDGE_GROUP) < 0)
		n += round_up(shoal__mailbox_size(1, uplink_of(c), inbound_of(c, NULL), direct_of(c),
						  bridge_cap, true),
			      page);
	if (bridge_cap != 0 && running == NULL)
		n += round_up(shoal__links_file_size(c->n_hosts - 1), page);
	return n;
}

/* "12.5 MiB", or "2.3 GiB" from 1 GiB up, for messages. */
static const char *size_text(char *buf, size_t cap, uint64_t n)
{
	if (n >= UINT64_C(1) << 30)
		snprintf(buf, cap, "%.1f GiB", (double)n / (1024.0 * 1024.0 * 1024.0));
	else
		snprintf(buf, cap, "%.1f MiB", (double)n / (1024.0 * 1024.0));
	return buf;
}

int shoal__config_check_space(const struct shoal__config *c, const struct shoal__config *running,
			      struct shoal__config_space *out, struct shoal_err *err)
{
	const char *dir = getenv("SHOAL_SHM_DIR");
	long page = sysconf(_SC_PAGESIZE);
	struct statvfs sfs;
	char need[32], avail[32];

	if (dir == NULL || dir[0] == '\0')
		dir = "/dev/shm";
	if (statvfs(dir, &sfs) != 0)
		return shoal__fail(err, -errno, "cannot tell the free space of %s: %s", dir,
				   strerror(errno));
	/* Segments round up to the filesystem's page (hugetlbfs: its huge page). */
	if (page < 0 || (uint64_t)page < sfs.f_bsize)
		page = (long)sfs.f_bsize;
	out->dir = dir;
	out->need = shoal__config_shm_bytes(c, running, (uint64_t)page);
	out->avail = (uint64_t)sfs.f_bavail * sfs.f_frsize;
	if (out->need > out->avail)
		return shoal__fail(err, -ENOSPC, "system %s needs %s of shared memory for %s, "
				   "but %s has %s free: lower the capacities, mailboxes or workers, "
				   "or make room there", c->system,
				   size_text(need, sizeof(need), out->need),
				   running ? "its new groups" : "its segments", dir,
				   size_text(avail, sizeof(avail), out->avail));
	return 0;
}

int shoal__config_group(const struct shoal__config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_groups; i++)
		if (strcmp(c->groups[i].name, name) == 0)
			return (int)i;
	return -1;
}

int shoal__config_host(const struct shoal__config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_hosts; i++)
		if (strcmp(c->hosts[i].name, name) == 0)
			return (int)i;
	return -1;
}

int shoal__config_this_host(const struct shoal__config *c, const char *name, int *host,
			    struct shoal_err *err)
{
	char names[256];

	host_names(c, names, sizeof(names));
	*host = -1;
	if (name == NULL && c->n_hosts == 0)
		return 0;
	if (name == NULL)
		return shoal__fail(err, -ENXIO, "%s lists hosts (%s): say which one this is with "
				   "--host NAME", c->path, names);
	if (c->n_hosts == 0)
		return shoal__fail(err, -ENXIO, "%s lists no hosts: run it without --host",
				   c->path);
	*host = shoal__config_host(c, name);
	if (*host < 0)
		return shoal__fail(err, -ENXIO, "%s has no host '%s' (its hosts: %s)", c->path,
				   name, names);
	return 0;
}

static bool same_list(char **a, char **b)
{
	for (; a != NULL && b != NULL && *a != NULL && *b != NULL; a++, b++)
		if (strcmp(*a, *b) != 0)
			return false;
	return (a == NULL || *a == NULL) && (b == NULL || *b == NULL);
}

static bool same_cpus(const struct bitmask *a, const struct bitmask *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return numa_bitmask_equal((struct bitmask *)a, (struct bitmask *)b) != 0;
}

int shoal__config_group_same(const struct shoal__cfg_group *a, const struct shoal__cfg_group *b)
{
	return strcmp(a->name, b->name) == 0 && strcmp(a->program, b->program) == 0 &&
	       same_list(a->argv, b->argv) && same_list(a->env, b->env) &&
	       a->workers == b->workers && a->actors == b->actors && a->node == b->node &&
	       same_cpus(a->cpus, b->cpus) && a->mailbox == b->mailbox &&
	       a->overflow == b->overflow && a->host == b->host;
}

int shoal__config_check_cpus(const struct shoal__config *c, int host, struct shoal_err *err)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);

	for (uint32_t i = 0; i < c->n_groups; i++) {
		const struct shoal__cfg_group *g = &c->groups[i];
		unsigned last = 0;

		if (g->cpus == NULL || !shoal__config_runs(c, host, i))
			continue;
		for (unsigned cpu = 0; cpu < SHOAL__CPUS_MAX; cpu++)
			if (numa_bitmask_isbitset(g->cpus, cpu))
				last = cpu;
		if ((long)last >= ncpu)
			return shoal__fail(err, -EINVAL, "%s:%u:%u: group %s: cpus names CPU %u; "
					   "this machine has %ld CPUs (0-%ld)", c->path,
					   g->cpus_line, g->cpus_col, g->name, last, ncpu,
					   ncpu - 1);
	}
	return 0;
}
