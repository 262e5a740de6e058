/* SPDX-License-Identifier: MIT */
/*
 * `shoal dump`: show the messages waiting in a group's inbound rings (those
 * between head and tail: sent, not yet consumed), each with its envelope
 * decoded and the first bytes of its payload.
 *
 * Reading records of a live ring without being its consumer. The ring is
 * first checked whole (shoal_ring_check(), via tools/snapshot.h); then its
 * records are walked again, from the ring's current head, with shm/'s
 * read-only walker (shoal_ring_walk_begin() in shoal/ring.h), which applies
 * the ring's rules, trusts nothing, and copies the envelope and the first
 * bytes of the payload of the first --limit records. When the consumer takes
 * records while they are read, the walk starts over from the new head (a
 * few passes, then the ring is reported as being consumed). The copies are
 * printed afterwards, from private memory.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/message.h>
#include <shoal/ring.h>

#include "shm/atomic.h"
#include "shm/util.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/json.h"
#include "tools/snapshot.h"
#include "tools/sysview.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define DUMP_JSON_SCHEMA 1

#define DEFAULT_LIMIT 20u
#define MAX_LIMIT 100000u
#define CHECK_RETRIES 3u
#define PREVIEW_MAX 32u
#define WALK_PASSES 8             /* walks overtaken by the consumer before giving up */
#define ENV_SIZE ((uint32_t)sizeof(struct shoal_envelope))

#define NAME_SIZE SHOAL_FMT_PRINTABLE_SIZE(SHOAL_SEG_NAME_MAX)

struct dump_args {
	bool json;
	bool hex;
	uint32_t limit;                 /* records shown per ring */
	const char *ring;               /* NULL: every inbound ring */
	const char *system;
	const char *group;
};

/* One record, copied out of the ring. */
struct record {
	uint32_t index;                 /* ring index of its header */
	uint32_t len;                   /* bytes after the record header */
	struct shoal_envelope env;      /* the first ENV_SIZE of them, zero-padded */
	uint32_t n_preview;
	unsigned char preview[PREVIEW_MAX];
};

struct ring_dump {
	const struct shoal__region_snap *snap;
	uint32_t head, tail;            /* as the walk found them */
	uint32_t total;                 /* records between them the walk got through */
	struct record *recs;            /* the first `limit` of them */
	uint32_t n_recs;
	bool raced;                     /* the consumer overtook the walk: it stopped */
	bool bad;                       /* a record broke the ring's rules */
	char reason[SHOAL_ERR_MSG_MAX];
};

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_JSON,
	OPT_HEX,
	OPT_RING,
	OPT_LIMIT,
};

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv, struct dump_args *a)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "hex", no_argument, NULL, OPT_HEX },
		{ "ring", required_argument, NULL, OPT_RING },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ NULL, 0, NULL, 0 },
	};
	int c, end;

	memset(a, 0, sizeof(*a));
	a->limit = DEFAULT_LIMIT;
	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_HEX:
			a->hex = true;
			break;
		case OPT_RING:
			if (optarg[0] == '\0' || strlen(optarg) >= SHOAL_SEG_REGION_NAME_MAX)
				return shoal__cli_usage_error(cmd, "--ring takes a ring name of 1 "
							      "to %d characters",
							      SHOAL_SEG_REGION_NAME_MAX - 1);
			a->ring = optarg;
			break;
		case OPT_LIMIT:
			if (shoal__cli_parse_uint(optarg, MAX_LIMIT, &a->limit) < 0)
				return shoal__cli_usage_error(cmd, "--limit takes a number from 0 "
							      "to %u, not '%s'", MAX_LIMIT, optarg);
			break;
		}
	}
	if (argc - optind < 2)
		return shoal__cli_usage_error(cmd, optind == argc ? "missing SYSTEM and GROUP" :
					      "missing GROUP");
	if (argc - optind > 2)
		return shoal__cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 2]);
	a->system = argv[optind];
	a->group = argv[optind + 1];
	if (shoal__check_name(a->system, "system", NULL) < 0 ||
	    shoal__check_name(a->group, "group", NULL) < 0)
		return shoal__cli_usage_error(cmd, "system and group names have 1 to %d "
					      "characters of [A-Za-z0-9_-]", SHOAL_NAME_MAX - 1);
	return -1;
}

/* ---- Walking a ring ---- */

struct walk {
	const void *mem;
	uint64_t len;
	uint32_t limit;
	struct ring_dump *d;
};

/* Fill *rec from `n` bytes copied out of a record of `len` bytes (n <= len). */
static void copy_record(struct record *rec, uint32_t index, const unsigned char *bytes,
			uint32_t n, uint32_t len)
{
	memset(rec, 0, sizeof(*rec));
	rec->index = index;
	rec->len = len;
	memcpy(&rec->env, bytes, n < ENV_SIZE ? n : ENV_SIZE);
	if (n > ENV_SIZE) {
		rec->n_preview = n - ENV_SIZE < PREVIEW_MAX ? n - ENV_SIZE : PREVIEW_MAX;
		memcpy(rec->preview, bytes + ENV_SIZE, rec->n_preview);
	}
}

/*
 * One pass from the current head to the tail: count the records and copy the
 * first `limit`. Returns false if the consumer overtook it (d->raced).
 */
static bool walk_once(struct walk *w)
{
	struct ring_dump *d = w->d;
	struct shoal_err err = {{0}};
	struct shoal_ring_walk rw;
	struct shoal_ring_walk_rec rec;
	unsigned char bytes[ENV_SIZE + PREVIEW_MAX];
	int ret;

	d->n_recs = d->total = 0;
	d->raced = false;
	ret = shoal_ring_walk_begin(&rw, w->mem, w->len, &err);
	if (ret == 0) {
		d->head = rw.head;
		d->tail = rw.tail;
		while ((ret = shoal_ring_walk_next(&rw, &rec, bytes, d->n_recs < w->limit ?
						   sizeof(bytes) : 0, &err)) > 0) {
			if (d->n_recs < w->limit)
				copy_record(&d->recs[d->n_recs++], rec.index, bytes, rec.copied,
					    rec.len);
			d->total++;
		}
	}
	if (ret == -EAGAIN) {
		d->raced = true;
		return false;
	}
	if (ret < 0) {
		d->bad = true;
		snprintf(d->reason, sizeof(d->reason), "%s", err.msg);
	}
	return true;
}

/* Walk again from the new head when the consumer overtakes a pass. */
static void walk_ring(void *arg)
{
	int pass = 1;

	while (!walk_once(arg) && pass < WALK_PASSES)
		pass++;
}

/* Walk one ring the snapshot found sane. Returns 0 or -ENOMEM. */
static int dump_ring(const struct shoal_seg *seg, struct ring_dump *d, uint32_t limit)
{
	const struct shoal__region_snap *r = d->snap;
	uint32_t most = r->ring.capacity / 8;
	struct walk w = { .len = r->region.len, .d = d };

	/* A record takes at least 8 bytes: no ring holds more than cap / 8. */
	w.limit = limit < most ? limit : most;
	w.mem = shoal_seg_ptr(seg, r->region.off, r->region.len, 8);
	if (w.mem == NULL)
		return 0;
	d->recs = calloc(w.limit ? w.limit : 1, sizeof(*d->recs));
	if (d->recs == NULL)
		return -ENOMEM;
	if (shoal__snap_guard(walk_ring, &w) < 0) {
		d->bad = true;
		snprintf(d->reason, sizeof(d->reason), "the mailbox file shrank while the ring "
			 "was read");
	}
	return 0;
}

/* ---- Decoding ---- */

/* Why an envelope would be dropped as malformed by its receiver, or NULL. */
static const char *envelope_problem(const struct record *rec, char *buf, size_t cap)
{
	if (rec->len < ENV_SIZE)
		snprintf(buf, cap, "the record has %u bytes, less than an envelope", rec->len);
	else if (rec->env.len != rec->len - ENV_SIZE)
		snprintf(buf, cap, "the envelope says %u payload bytes, the record holds %u",
			 rec->env.len, rec->len - ENV_SIZE);
	else if (rec->env.type == 0)
		snprintf(buf, cap, "message type 0");
	else if (rec->env.flags & ~SHOAL_ENV_FLAGS)
		snprintf(buf, cap, "unknown envelope flags 0x%x",
			 rec->env.flags & ~SHOAL_ENV_FLAGS);
	else
		return NULL;
	return buf;
}

static const char *type_name(const struct shoal__sys_view *v, uint32_t type)
{
	const struct shoal__type_view *t = shoal__sys_view_type(v, type);

	return t != NULL ? t->name : NULL;
}

static const char *group_name(const struct shoal__sys_view *v, int id)
{
	const struct shoal__group_view *g = shoal__sys_view_group(v, id);

	return g != NULL && g->name_ok ? g->name : NULL;
}

static const char *const flag_names[] = { "request", "response", "error", "try", "routed" };

/* "routed,try" or "-"; unknown bits as hex. */
static const char *fmt_flags(char *buf, size_t cap, uint32_t flags)
{
	size_t n = 0;

	buf[0] = '\0';
	for (unsigned b = 0; b < sizeof(flag_names) / sizeof(flag_names[0]); b++)
		if ((flags >> b & 1) && n < cap)
			n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "",
					      flag_names[b]);
	if ((flags & ~SHOAL_ENV_FLAGS) && n < cap)
		snprintf(buf + n, cap - n, "%s0x%x", n ? "," : "", flags & ~SHOAL_ENV_FLAGS);
	if (buf[0] == '\0')
		snprintf(buf, cap, "-");
	return buf;
}

static const char *slot_kind(uint16_t slot)
{
	return slot == SHOAL_SLOT_GROUP ? "group" : slot == SHOAL_SLOT_ALL ? "all" : "actor";
}

/* "name[3] actor 0 gen 2", "name[3] group gen 1", "none". */
static const char *fmt_addr(char *buf, size_t cap, const struct shoal__sys_view *v,
			    uint64_t addr)
{
	char name[SHOAL_FMT_PRINTABLE_SIZE(SHOAL_NAME_MAX)];
	const char *known;
	uint16_t slot = shoal_addr_slot(addr);
	int g = shoal_addr_group(addr);

	if (addr == SHOAL_ADDR_NONE) {
		snprintf(buf, cap, "none");
		return buf;
	}
	known = group_name(v, g);
	if (known == NULL)
		snprintf(name, sizeof(name), "(unknown group)");
	else
		shoal__fmt_printable(name, sizeof(name), known);
	if (slot == SHOAL_SLOT_GROUP || slot == SHOAL_SLOT_ALL)
		snprintf(buf, cap, "%s[%d] %s gen %u", name, g, slot == SHOAL_SLOT_ALL ?
			 "all actors" : "whole group", shoal_addr_gen(addr));
	else
		snprintf(buf, cap, "%s[%d] actor %u gen %u", name, g, slot, shoal_addr_gen(addr));
	return buf;
}

static void fmt_hex(char *buf, size_t cap, const unsigned char *p, uint32_t n, const char *sep)
{
	size_t used = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < n && used < cap; i++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%02x", i ? sep : "", p[i]);
}

/* ---- Text output ---- */

static void text_payload(const struct record *rec, bool hex)
{
	char buf[3 * PREVIEW_MAX + 1];
	uint32_t total = rec->len > ENV_SIZE ? rec->len - ENV_SIZE : 0;

	if (hex) {
		fmt_hex(buf, sizeof(buf), rec->preview, rec->n_preview, " ");
	} else {
		/* Printable ASCII as is, anything else as a dot: safe for a terminal. */
		for (uint32_t i = 0; i < rec->n_preview; i++)
			buf[i] = rec->preview[i] >= 0x20 && rec->preview[i] < 0x7f ?
				 (char)rec->preview[i] : '.';
		buf[rec->n_preview] = '\0';
	}
	printf("       data    %s%s%s", hex ? "" : "\"", buf, hex ? "" : "\"");
	if (total > rec->n_preview)
		printf(" (+%u bytes)", total - rec->n_preview);
	putchar('\n');
}

static void text_record(const struct shoal__sys_view *v, const struct record *rec, uint32_t n,
			uint64_t now, bool hex)
{
	char name[NAME_SIZE], problem[128], from[160], to[160], flags[64];
	char age[SHOAL_FMT_SHORT_SIZE];
	const char *tn = type_name(v, rec->env.type);
	const char *bad = envelope_problem(rec, problem, sizeof(problem));

	if (rec->len < ENV_SIZE) {
		printf("  #%u at index %u: %u bytes: MALFORMED: %s\n", n, rec->index, rec->len,
		       bad);
		return;
	}
	if (rec->env.send_ns != 0 && rec->env.send_ns <= now)
		shoal__fmt_duration(age, sizeof(age), now - rec->env.send_ns);
	else
		snprintf(age, sizeof(age), "unknown");
	printf("  #%u at index %u: %s (type %u), %u bytes, age %s\n", n, rec->index,
	       tn != NULL ? shoal__fmt_printable(name, sizeof(name), tn) : "unknown type",
	       rec->env.type, rec->len - ENV_SIZE, age);
	if (bad != NULL)
		printf("       MALFORMED: %s\n", bad);
	printf("       from    %s\n", fmt_addr(from, sizeof(from), v, rec->env.sender));
	printf("       to      %s\n", fmt_addr(to, sizeof(to), v, rec->env.dest));
	printf("       trace   0x%016llx, request %llu, flags %s\n",
	       (unsigned long long)rec->env.trace_id, (unsigned long long)rec->env.request_id,
	       fmt_flags(flags, sizeof(flags), rec->env.flags));
	text_payload(rec, hex);
}

static void text_ring(const struct shoal__sys_view *v, const struct ring_dump *d, uint64_t now,
		      bool hex)
{
	const struct shoal__region_snap *r = d->snap;
	char name[NAME_SIZE], path[64];

	printf("\nRing %s (%s): ", shoal__fmt_printable(name, sizeof(name), r->region.name),
	       shoal__ring_path(path, sizeof(path), &r->region.tag));
	if (r->corrupt || !r->have_ring) {
		printf("CORRUPT: %s\n", r->reason);
		return;
	}
	if (d->raced)
		printf("%u bytes queued (head %u, tail %u), being consumed while read\n",
		       d->tail - d->head, d->head, d->tail);
	else
		printf("%u message%s %s (%u bytes, head %u, tail %u)\n", d->total,
		       d->total == 1 ? "" : "s", d->bad ? "readable before the corruption below" :
		       "queued", d->tail - d->head, d->head, d->tail);
	for (uint32_t i = 0; i < d->n_recs; i++)
		text_record(v, &d->recs[i], i + 1, now, hex);
	if (d->bad)
		printf("  CORRUPT: %s\n", d->reason);
	else if (d->raced)
		printf("  (the consumer took the next messages while they were read)\n");
	else if (d->total > d->n_recs)
		printf("  ... and %u more (--limit)\n", d->total - d->n_recs);
}

/* ---- JSON output ---- */

static void json_addr(struct shoal__json *j, const char *key, const struct shoal__sys_view *v,
		      uint64_t addr)
{
	const char *name = group_name(v, shoal_addr_group(addr));

	if (addr == SHOAL_ADDR_NONE) {
		shoal__json_null(j, key);
		return;
	}
	shoal__json_object_begin(j, key);
	shoal__json_uint(j, "address", addr);
	shoal__json_int(j, "group", shoal_addr_group(addr));
	if (name != NULL)
		shoal__json_string(j, "group_name", name);
	else
		shoal__json_null(j, "group_name");
	shoal__json_string(j, "slot_kind", slot_kind(shoal_addr_slot(addr)));
	shoal__json_uint(j, "slot", shoal_addr_slot(addr));
	shoal__json_uint(j, "gen", shoal_addr_gen(addr));
	shoal__json_object_end(j);
}

static void json_flags(struct shoal__json *j, uint32_t flags)
{
	shoal__json_array_begin(j, "flags");
	for (unsigned b = 0; b < sizeof(flag_names) / sizeof(flag_names[0]); b++)
		if (flags >> b & 1)
			shoal__json_string(j, NULL, flag_names[b]);
	shoal__json_array_end(j);
}

static void json_record(struct shoal__json *j, const char *key, const struct shoal__sys_view *v,
			const struct record *rec, uint64_t now)
{
	char problem[128], hex[2 * PREVIEW_MAX + 1];
	const char *bad = envelope_problem(rec, problem, sizeof(problem));
	const char *tn = type_name(v, rec->env.type);

	shoal__json_object_begin(j, key);
	shoal__json_uint(j, "index", rec->index);
	shoal__json_uint(j, "length", rec->len);
	shoal__json_string(j, "envelope", bad != NULL ? "malformed" : "ok");
	if (bad != NULL)
		shoal__json_string(j, "reason", bad);
	if (rec->len >= ENV_SIZE) {
		shoal__json_uint(j, "type", rec->env.type);
		if (tn != NULL)
			shoal__json_string(j, "type_name", tn);
		else
			shoal__json_null(j, "type_name");
		shoal__json_uint(j, "payload_length", rec->len - ENV_SIZE);
		json_addr(j, "sender", v, rec->env.sender);
		json_addr(j, "dest", v, rec->env.dest);
		shoal__json_uint(j, "trace_id", rec->env.trace_id);
		shoal__json_uint(j, "request_id", rec->env.request_id);
		json_flags(j, rec->env.flags);
		shoal__json_uint(j, "flags_raw", rec->env.flags);
		shoal__json_uint(j, "send_ns", rec->env.send_ns);
		if (rec->env.send_ns != 0 && rec->env.send_ns <= now)
			shoal__json_uint(j, "age_ns", now - rec->env.send_ns);
		else
			shoal__json_null(j, "age_ns");
	}
	fmt_hex(hex, sizeof(hex), rec->preview, rec->n_preview, "");
	shoal__json_string(j, "payload_hex", hex);
	shoal__json_object_end(j);
}

static void json_ring(struct shoal__json *j, const struct shoal__sys_view *v,
		      const struct ring_dump *d, uint64_t now)
{
	const struct shoal__region_snap *r = d->snap;

	shoal__json_object_begin(j, NULL);
	shoal__json_string(j, "name", r->region.name);
	shoal__json_ring_tag(j, &r->region.tag);
	if (r->have_ring && !r->corrupt) {
		shoal__json_uint(j, "queued", d->total);
		shoal__json_uint(j, "used", d->tail - d->head);
		shoal__json_uint(j, "head", d->head);
		shoal__json_uint(j, "tail", d->tail);
	}
	shoal__json_array_begin(j, "records");
	for (uint32_t i = 0; i < d->n_recs; i++)
		json_record(j, NULL, v, &d->recs[i], now);
	shoal__json_array_end(j);
	shoal__json_bool(j, "raced", d->raced);
	shoal__json_string(j, "status", r->corrupt || d->bad ? "corrupt" : "ok");
	if (r->corrupt)
		shoal__json_string(j, "reason", r->reason);
	else if (d->bad)
		shoal__json_string(j, "reason", d->reason);
	shoal__json_object_end(j);
}

/* ---- Records set aside ---- */

/* A worker's set-aside record, copied out of its mailbox block. */
struct aside {
	uint32_t worker;
	uint32_t crashes;
	uint64_t when_ns;
	struct record rec;
};

struct aside_read {
	const struct shoal__mbx_aside *a;
	bool got, changing;
	struct aside *out;
};

/* A seqlock read of one worker's set-aside block (runtime/data/rings.c keep_aside()). */
static void read_aside(void *arg)
{
	struct aside_read *ar = arg;
	const struct shoal__mbx_aside *a = ar->a;

	for (int pass = 0; pass < WALK_PASSES; pass++) {
		/* A6: pairs with R6 in runtime/data/rings.c keep_aside(): the bytes after an
		 * even sequence. */
		uint32_t s1 = shoal_load_acquire(&a->seq), s2, len, kept;
		unsigned char bytes[SHOAL__ASIDE_KEEP];

		if (s1 == 0)
			return;   /* never written */
		if (s1 & 1u)
			continue;
		len = a->len;
		kept = a->kept;
		ar->out->crashes = a->crashes;
		ar->out->when_ns = a->when_ns;
		memcpy(bytes, a->rec, sizeof(bytes));
		/* A5: pairs with R5 in keep_aside(): the bytes are read before
		 * the sequence is read again. */
		shoal_fence_acquire();
		s2 = shoal_load_relaxed(&a->seq);
		if (s1 != s2)
			continue;
		/* Untrusted: the lengths are bounded before the copy uses them. */
		if (kept > SHOAL__ASIDE_KEEP || kept > len)
			kept = 0;
		copy_record(&ar->out->rec, 0, bytes, kept < len ? kept : len, len);
		ar->got = true;
		return;
	}
	ar->changing = true;
}

/* ---- The command ---- */

struct dump {
	const struct dump_args *a;
	struct shoal__sys_view view;
	const struct shoal__group_view *g;
	struct shoal__seg_snap snap;
	struct ring_dump *rings;
	uint32_t n_rings;
	struct aside asides[SHOAL_MAX_WORKERS];
	uint32_t n_asides;
	uint64_t now;
};

/* Copy the records the group's workers set aside, if any. */
static void dump_asides(struct dump *dp, const struct shoal_seg *seg)
{
	const struct shoal__mbx_hdr *h = NULL;

	for (uint32_t i = 0; i < dp->snap.n_regions && h == NULL; i++) {
		const struct shoal__region_snap *r = &dp->snap.regions[i];

		if (r->entry_ok && r->region.kind == SHOAL__KIND_MAILBOX &&
		    r->region.len >= sizeof(*h))
			h = shoal_seg_ptr(seg, r->region.off, sizeof(*h), 128);
	}
	if (h == NULL || h->magic != SHOAL__MBX_MAGIC || h->version != SHOAL__LAYOUT_VERSION)
		return;
	for (uint32_t w = 0; w < SHOAL_MAX_WORKERS; w++) {
		struct aside_read ar = { &h->aside[w], false, false, &dp->asides[dp->n_asides] };

		if (shoal__snap_guard(read_aside, &ar) == 0 && ar.got) {
			dp->asides[dp->n_asides].worker = w;
			dp->n_asides++;
		}
	}
}

static bool wanted(const struct dump_args *a, const struct shoal__region_snap *r)
{
	if (!r->entry_ok || r->region.kind != SHOAL_SEG_KIND_RING)
		return false;
	return a->ring != NULL ? strcmp(r->region.name, a->ring) == 0 :
	       shoal__ring_is_inbound(&r->region.tag);
}

/* Pick the rings to show and copy their records. Returns 0 or -ENOMEM. */
static int dump_rings(struct dump *dp, const struct shoal_seg *seg)
{
	dp->rings = calloc(dp->snap.n_regions ? dp->snap.n_regions : 1, sizeof(*dp->rings));
	if (dp->rings == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < dp->snap.n_regions; i++) {
		struct ring_dump *d = &dp->rings[dp->n_rings];

		if (!wanted(dp->a, &dp->snap.regions[i]))
			continue;
		d->snap = &dp->snap.regions[i];
		dp->n_rings++;
		if (d->snap->have_ring && !d->snap->corrupt &&
		    dump_ring(seg, d, dp->a->limit) < 0)
			return -ENOMEM;
	}
	dp->now = shoal__now_ns();
	return 0;
}

static bool any_bad(const struct dump *dp)
{
	for (uint32_t i = 0; i < dp->n_rings; i++) {
		const struct ring_dump *d = &dp->rings[i];
		char problem[128];

		if (d->snap->corrupt || d->bad)
			return true;
		for (uint32_t k = 0; k < d->n_recs; k++)
			if (envelope_problem(&d->recs[k], problem, sizeof(problem)) != NULL)
				return true;
	}
	return false;
}

static void print_text(const struct dump *dp)
{
	char name[NAME_SIZE];
	uint64_t queued = 0;
	bool partial = false;

	for (uint32_t i = 0; i < dp->n_rings; i++) {
		queued += dp->rings[i].total;
		partial |= dp->rings[i].raced || dp->rings[i].bad;
	}
	printf("Group %s (id %u) of system %s: %u ring%s, %s%llu message%s queued\n",
	       shoal__fmt_printable(name, sizeof(name), dp->g->name), dp->g->id, dp->a->system,
	       dp->n_rings, dp->n_rings == 1 ? "" : "s", partial ? "at least " : "",
	       (unsigned long long)queued, queued == 1 ? "" : "s");
	for (uint32_t i = 0; i < dp->n_rings; i++)
		text_ring(&dp->view, &dp->rings[i], dp->now, dp->a->hex);
	for (uint32_t i = 0; i < dp->n_asides; i++) {
		const struct aside *s = &dp->asides[i];
		char ago[SHOAL_FMT_SHORT_SIZE];

		shoal__fmt_duration(ago, sizeof(ago), dp->now > s->when_ns ? dp->now - s->when_ns : 0);
		printf("\nSet aside by worker %u, %s ago, after %u processes died handling it "
		       "(counted in set_aside; the last one only is kept):\n", s->worker, ago,
		       s->crashes);
		text_record(&dp->view, &s->rec, 1, dp->now, dp->a->hex);
	}
}

static void print_json(const struct dump *dp)
{
	struct shoal__json j;

	shoal__json_init(&j, stdout);
	shoal__json_doc_begin(&j, DUMP_JSON_SCHEMA);
	shoal__json_string(&j, "system", dp->a->system);
	shoal__json_string(&j, "group", dp->g->name);
	shoal__json_uint(&j, "group_id", dp->g->id);
	shoal__json_array_begin(&j, "rings");
	for (uint32_t i = 0; i < dp->n_rings; i++)
		json_ring(&j, &dp->view, &dp->rings[i], dp->now);
	shoal__json_array_end(&j);
	shoal__json_array_begin(&j, "set_aside");
	for (uint32_t i = 0; i < dp->n_asides; i++) {
		shoal__json_object_begin(&j, NULL);
		shoal__json_uint(&j, "worker", dp->asides[i].worker);
		shoal__json_uint(&j, "crashes", dp->asides[i].crashes);
		shoal__json_uint(&j, "when_ns", dp->asides[i].when_ns);
		json_record(&j, "record", &dp->view, &dp->asides[i].rec, dp->now);
		shoal__json_object_end(&j);
	}
	shoal__json_array_end(&j);
	shoal__json_string(&j, "status", any_bad(dp) ? "corrupt" : "ok");
	shoal__json_object_end(&j);
}

static const struct shoal__group_view *find_group(const struct shoal__sys_view *v,
						  const char *name)
{
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].state != SHOAL_GROUP_EMPTY && v->groups[id].name_ok &&
		    strcmp(v->groups[id].name, name) == 0)
			return &v->groups[id];
	return NULL;
}

/* Attach the group's mailbox, copy, print. Returns the exit code. */
static int dump_mailbox(const struct shoal__cmd *cmd, struct dump *dp)
{
	struct shoal__snap_opts so = { .check_retries = CHECK_RETRIES, .ring = dp->a->ring };
	struct shoal_err err = {{0}};
	struct shoal_seg seg;
	int ret;

	ret = shoal_seg_attach(&seg, dp->g->mailbox, SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN,
			       &err);
	if (ret < 0)
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_ATTACH, ret, "cannot attach the "
				       "mailbox of group %s: %s", dp->a->group,
				       err.msg[0] != '\0' ? err.msg : shoal_strerror(ret));
	ret = shoal__seg_snap_take(&dp->snap, &seg, &so);
	if (ret == 0) {
		ret = dump_rings(dp, &seg);
		dump_asides(dp, &seg);
		if (ret == 0 && dp->a->ring != NULL && dp->n_rings == 0) {
			ret = shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ENOENT, "group %s's "
					      "mailbox has no ring named '%s'", dp->a->group,
					      dp->a->ring);
		} else if (ret == 0) {
			if (dp->a->json)
				print_json(dp);
			else
				print_text(dp);
			ret = any_bad(dp) ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
		}
		for (uint32_t i = 0; dp->rings != NULL && i < dp->n_rings; i++)
			free(dp->rings[i].recs);
		free(dp->rings);
		shoal__seg_snap_free(&dp->snap);
	}
	shoal_seg_detach(&seg);
	if (ret < 0)
		return shoal__cli_fail(cmd->name, ret == -EFAULT ? SHOAL_EXIT_ATTACH :
				       SHOAL_EXIT_CORRUPT, ret, "%s: %s", dp->g->mailbox,
				       ret == -EFAULT ? "the file shrank while it was read" :
				       shoal_strerror(ret));
	return ret;
}

static int cmd_dump(const struct shoal__cmd *cmd, int argc, char **argv)
{
	static const struct shoal__sys_view_opts o = { .mailboxes = false };
	struct shoal_err err = {{0}};
	struct dump_args a;
	struct dump dp = { .a = &a };
	int ret = parse_args(cmd, argc, argv, &a);

	if (ret >= 0)
		return ret;
	ret = shoal__sys_view_take(&dp.view, a.system, &o, &err);
	if (ret < 0)
		return shoal__sys_view_fail(cmd->name, a.system, ret, &err);
	dp.g = find_group(&dp.view, a.group);
	if (dp.g == NULL) {
		ret = shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ENOENT, "system %s has no "
				      "group '%s' ('shoal stat %s' lists them)", a.system, a.group,
				      a.system);
	} else if (dp.g->mailbox[0] == '\0') {
		ret = shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, 0, "group %s: %s", a.group,
				      dp.g->reason);
	} else {
		ret = dump_mailbox(cmd, &dp);
	}
	shoal__sys_view_free(&dp.view);
	return ret;
}

const struct shoal__cmd shoal__cmd_dump = {
	.name = "dump",
	.summary = "Show the messages queued for a group, envelopes decoded",
	.fn = cmd_dump,
	.help =
	"Usage: shoal dump [--ring NAME] [--limit N] [--hex] [--json] SYSTEM GROUP\n"
	"\n"
	"Show the messages waiting in the inbound rings of group GROUP of the running\n"
	"system SYSTEM: sent, and not yet consumed (a message its worker is handling\n"
	"right now is still among them until the worker releases it). For each: its\n"
	"type, length, sender and destination (group, actor slot, generation), trace\n"
	"and request ids, flags, how long ago it was sent, and the first bytes of\n"
	"its payload. Read-only: nothing is consumed, and a message its worker takes\n"
	"while it is being read is left out, never shown half overwritten.\n"
	"Then, for each worker that set a message aside (one that killed the\n"
	"three processes in a row that handled it: skipped, counted in\n"
	"set_aside), the last such message, its envelope and first bytes.\n"
	"\n"
	"Options:\n"
	"  --ring NAME  only the ring NAME of the group's mailbox (any ring, such as\n"
	"               an uplink up.W; 'shoal stat' lists them)\n"
	"  --limit N    show at most N messages per ring (default 20, at most 100000;\n"
	"               0 shows only the counts)\n"
	"  --hex        the payload's first 32 bytes in hex (default: printable\n"
	"               characters, others as dots)\n"
	"  --json       print one JSON object instead of text (payloads in hex)\n"
	"  -h, --help   show this help\n"
	"\n"
	"Exit status:\n"
	"  0  every ring read is intact and every message well-formed\n"
	"  1  a ring or a message is corrupted, or no group GROUP, or no ring NAME\n"
	"  2  bad command line\n"
	"  3  cannot read the system's registry or the group's mailbox\n",
	.json_schema = DUMP_JSON_SCHEMA,
};
