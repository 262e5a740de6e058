/* SPDX-License-Identifier: MIT */
/*
 * `shoal ring`: show a segment's header, its directory, and the state of
 * every ring and doorbell in it, as text or JSON.
 *
 * The segment is attached read-only (a PROT_READ mapping of a file opened
 * O_RDONLY), so nothing here can write to it, and everything it holds is read
 * once into a snapshot (tools/snapshot.h) that the printers below work from.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <shoal/segment.h>

#include "tools/cli.h"
#include "tools/format.h"
#include "tools/json.h"
#include "tools/snapshot.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define RING_JSON_SCHEMA 1

#define DEFAULT_CHECK_RETRIES 3u
#define MAX_CHECK_RETRIES 1000u

/* Bytes for a region name escaped by shoal__fmt_printable(). */
#define REGION_NAME_SIZE SHOAL_FMT_PRINTABLE_SIZE(SHOAL_SEG_REGION_NAME_MAX)

struct ring_args {
	bool json;
	const char *segment;
	struct shoal__snap_opts snap;
};

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_JSON,
	OPT_RING,
	OPT_CHECK_RETRIES,
};

/*
 * Fill *a from the command line. Returns -1 to go on, or the exit code to
 * return now (after --help, or a usage error already reported).
 */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv,
		      struct ring_args *a)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "ring", required_argument, NULL, OPT_RING },
		{ "check-retries", required_argument, NULL, OPT_CHECK_RETRIES },
		{ NULL, 0, NULL, 0 },
	};
	int c, end;

	memset(a, 0, sizeof(*a));
	a->snap.check_retries = DEFAULT_CHECK_RETRIES;
	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_RING:
			if (optarg[0] == '\0' || strlen(optarg) >= SHOAL_SEG_REGION_NAME_MAX)
				return shoal__cli_usage_error(cmd, "--ring takes a region name of "
							      "1 to %d characters",
							      SHOAL_SEG_REGION_NAME_MAX - 1);
			a->snap.ring = optarg;
			break;
		case OPT_CHECK_RETRIES:
			if (shoal__cli_parse_uint(optarg, MAX_CHECK_RETRIES,
						  &a->snap.check_retries) < 0)
				return shoal__cli_usage_error(cmd, "--check-retries takes a number "
							      "from 0 to %u, not '%s'",
							      MAX_CHECK_RETRIES, optarg);
			break;
		}
	}
	if (optind == argc)
		return shoal__cli_usage_error(cmd, "missing SEGMENT (a segment name or path)");
	if (argc - optind > 1)
		return shoal__cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
	a->segment = argv[optind];
	return -1;
}

static bool region_is(const struct shoal__region_snap *r, uint32_t kind)
{
	return r->entry_ok && r->region.kind == kind;
}

static bool snap_corrupt(const struct shoal__seg_snap *snap)
{
	if (snap->dir_corrupt)
		return true;
	for (uint32_t i = 0; i < snap->n_regions; i++)
		if (snap->regions[i].corrupt)
			return true;
	return false;
}

enum status {
	STATUS_OK,
	STATUS_CORRUPT,
	STATUS_UNCHECKED,   /* a kind this tool cannot check: listed only */
};

static const char *const status_text[] = { "OK", "CORRUPT", "unchecked" };
static const char *const status_json[] = { "ok", "corrupt", "unchecked" };

static enum status region_status(const struct shoal__region_snap *r)
{
	if (r->corrupt)
		return STATUS_CORRUPT;
	if (region_is(r, SHOAL_SEG_KIND_RING) || region_is(r, SHOAL_SEG_KIND_DOORBELL))
		return STATUS_OK;
	return STATUS_UNCHECKED;
}

static const char *alive_name(int alive)
{
	return alive > 0 ? "alive" : alive == 0 ? "dead" : "unknown";
}

/* ---- Text output ---- */

/* One "  label  value" line; labels line up in one column. */
__attribute__((format(printf, 2, 3)))
static void field(const char *label, const char *fmt, ...)
{
	va_list ap;

	printf("  %-13s ", label);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static void text_header(const struct shoal__seg_snap *snap, const struct shoal_seg *seg)
{
	const struct shoal_seg_info *in = &snap->info;
	char name[SHOAL_FMT_PRINTABLE_SIZE(SHOAL_SEG_NAME_MAX)];
	char path[SHOAL_FMT_PRINTABLE_SIZE(sizeof(seg->path))];
	char when[SHOAL_FMT_TIME_SIZE];

	printf("Segment %s\n", shoal__fmt_printable(name, sizeof(name), in->name));
	field("path", "%s", shoal__fmt_printable(path, sizeof(path), seg->path));
	field("layout", "version %u", in->version);
	field("size", "%llu bytes", (unsigned long long)in->size);
	field("used", "%llu bytes (%.1f%%)", (unsigned long long)in->used,
	      shoal__fmt_percent(in->used, in->size));
	field("creator", "pid %d (%s), uid %u", in->creator_pid,
	      alive_name(snap->creator_alive), in->creator_uid);
	field("created", "%s", shoal__fmt_time(when, sizeof(when), in->ctime_ns));
	field("generation", "%llu", (unsigned long long)in->generation);
	if (in->numa_node < 0)
		field("NUMA node", "none");
	else
		field("NUMA node", "%d", in->numa_node);
	if (snap->dir_corrupt)
		field("directory", "%u of %u entries: CORRUPT: %s", in->dir_count, in->dir_cap,
		      snap->dir_reason);
	else
		field("directory", "%u of %u entries", in->dir_count, in->dir_cap);
}

/* The cells of one row of the region table. */
struct row {
	char index[12];
	char kind[24];
	char name[REGION_NAME_SIZE];
	char off[24];
	char len[24];
	char status[12];
};

static void row_cells(const struct shoal__region_snap *r, struct row *row)
{
	snprintf(row->index, sizeof(row->index), "%u", r->index);
	snprintf(row->status, sizeof(row->status), "%s", status_text[region_status(r)]);
	if (!r->entry_ok) {
		snprintf(row->kind, sizeof(row->kind), "?");
		snprintf(row->name, sizeof(row->name), "?");
		snprintf(row->off, sizeof(row->off), "-");
		snprintf(row->len, sizeof(row->len), "-");
		return;
	}
	if (region_is(r, SHOAL_SEG_KIND_RING) || region_is(r, SHOAL_SEG_KIND_DOORBELL))
		snprintf(row->kind, sizeof(row->kind), "%s",
			 shoal__region_kind_name(r->region.kind));
	else
		snprintf(row->kind, sizeof(row->kind), "%s(%u)",
			 shoal__region_kind_name(r->region.kind), r->region.kind);
	shoal__fmt_printable(row->name, sizeof(row->name), r->region.name);
	snprintf(row->off, sizeof(row->off), "%llu", (unsigned long long)r->region.off);
	snprintf(row->len, sizeof(row->len), "%llu", (unsigned long long)r->region.len);
}

static int widest(int w, const char *cell)
{
	int n = (int)strlen(cell);

	return n > w ? n : w;
}

static void text_regions(const struct shoal__seg_snap *snap)
{
	struct row row;
	int wi = 1, wk = 4, wn = 4, wo = 6, wl = 6;

	for (uint32_t i = 0; i < snap->n_regions; i++) {
		row_cells(&snap->regions[i], &row);
		wi = widest(wi, row.index);
		wk = widest(wk, row.kind);
		wn = widest(wn, row.name);
		wo = widest(wo, row.off);
		wl = widest(wl, row.len);
	}
	printf("\nRegions\n");
	if (snap->n_regions == 0) {
		printf("  (none)\n");
		return;
	}
	printf("  %*s  %-*s  %-*s  %*s  %*s  %s\n", wi, "#", wk, "KIND", wn, "NAME", wo,
	       "OFFSET", wl, "LENGTH", "STATUS");
	for (uint32_t i = 0; i < snap->n_regions; i++) {
		row_cells(&snap->regions[i], &row);
		printf("  %*s  %-*s  %-*s  %*s  %*s  %s\n", wi, row.index, wk, row.kind, wn,
		       row.name, wo, row.off, wl, row.len, row.status);
	}
}

static void text_status(const struct shoal__region_snap *r)
{
	if (r->corrupt)
		field("status", "CORRUPT: %s", r->reason);
	else if (r->check_attempts > 1)
		field("status", "OK (passed check %u; earlier ones raced live traffic)",
		      r->check_attempts);
	else
		field("status", "OK");
}

static void text_pid(const char *label, int32_t pid)
{
	if (pid == 0)
		field(label, "none");
	else
		field(label, "%d", pid);
}

/* A region's tag, as numbers: their meaning belongs to the layer that
 * allocated it (`shoal stat` and `dump` name a mailbox's). */
static void text_tag(const struct shoal__region_snap *r)
{
	const struct shoal_seg_tag *t = &r->region.tag;

	if (t->role != 0)
		field("tag", "role %u, a %u, b %u, c %u, generation %u", t->role, t->a, t->b, t->c,
		      t->gen);
}

static void text_ring(const struct shoal__region_snap *r)
{
	const struct shoal_ring_stats *st = &r->ring;
	char name[REGION_NAME_SIZE];

	printf("\nRing %s\n", shoal__fmt_printable(name, sizeof(name), r->region.name));
	text_status(r);
	text_tag(r);
	if (!r->have_ring)
		return;
	field("capacity", "%u bytes, largest payload %u bytes", st->capacity,
	      st->max_payload);
	field("head, tail", "%u, %u", st->head, st->tail);
	field("used", "%u bytes (%.1f%%)", st->used, shoal__fmt_percent(st->used, st->capacity));
	if (r->pending >= 0)
		field("pending", "%d record%s", r->pending, r->pending == 1 ? "" : "s");
	else
		field("pending", "unknown");
	field("records", "%llu in, %llu out", (unsigned long long)st->records_in,
	      (unsigned long long)st->records_out);
	field("bytes", "%llu in, %llu out", (unsigned long long)st->bytes_in,
	      (unsigned long long)st->bytes_out);
	field("full events", "%llu", (unsigned long long)st->full_events);
	field("high water", "%u bytes", st->high_water);
	text_pid("producer pid", st->producer_pid);
	text_pid("consumer pid", st->consumer_pid);
}

static void text_doorbell(const struct shoal__region_snap *r)
{
	const char *state = shoal__doorbell_state_name(r->doorbell.state);
	char name[REGION_NAME_SIZE];

	printf("\nDoorbell %s\n", shoal__fmt_printable(name, sizeof(name), r->region.name));
	text_status(r);
	text_tag(r);
	if (!r->have_doorbell)
		return;
	if (state != NULL)
		field("state", "%s", state);
	else
		field("state", "%u (invalid)", r->doorbell.state);
	field("sleeps", "%llu", (unsigned long long)r->doorbell.sleeps);
	field("wakes", "%llu", (unsigned long long)r->doorbell.wakes);
}

static void text_region(const struct shoal__region_snap *r)
{
	if (!r->entry_ok) {
		printf("\nDirectory entry %u\n", r->index);
		text_status(r);
	} else if (r->region.kind == SHOAL_SEG_KIND_RING) {
		text_ring(r);
	} else if (r->region.kind == SHOAL_SEG_KIND_DOORBELL) {
		text_doorbell(r);
	}
}

static void print_text(const struct shoal__seg_snap *snap, const struct shoal_seg *seg)
{
	text_header(snap, seg);
	text_regions(snap);
	for (uint32_t i = 0; i < snap->n_regions; i++)
		text_region(&snap->regions[i]);
}

/* ---- JSON output ---- */

static void json_segment(struct shoal__json *j, const struct shoal__seg_snap *snap,
			 const struct shoal_seg *seg)
{
	const struct shoal_seg_info *in = &snap->info;
	char when[SHOAL_FMT_TIME_SIZE];

	shoal__json_object_begin(j, "segment");
	shoal__json_string(j, "name", in->name);
	shoal__json_string(j, "path", seg->path);
	shoal__json_uint(j, "version", in->version);
	shoal__json_uint(j, "size", in->size);
	shoal__json_uint(j, "used", in->used);
	shoal__json_int(j, "creator_pid", in->creator_pid);
	if (snap->creator_alive < 0)
		shoal__json_null(j, "creator_alive");
	else
		shoal__json_bool(j, "creator_alive", snap->creator_alive > 0);
	shoal__json_uint(j, "creator_uid", in->creator_uid);
	shoal__json_uint(j, "ctime_ns", in->ctime_ns);
	shoal__json_string(j, "ctime", shoal__fmt_time(when, sizeof(when), in->ctime_ns));
	shoal__json_uint(j, "generation", in->generation);
	if (in->numa_node < 0)
		shoal__json_null(j, "numa_node");
	else
		shoal__json_int(j, "numa_node", in->numa_node);
	shoal__json_object_end(j);

	shoal__json_object_begin(j, "directory");
	shoal__json_uint(j, "count", in->dir_count);
	shoal__json_uint(j, "capacity", in->dir_cap);
	shoal__json_string(j, "status", snap->dir_corrupt ? "corrupt" : "ok");
	if (snap->dir_corrupt)
		shoal__json_string(j, "reason", snap->dir_reason);
	shoal__json_object_end(j);
}

static void json_ring(struct shoal__json *j, const struct shoal__region_snap *r)
{
	shoal__json_object_begin(j, "ring");
	shoal__json_ring_fields(j, &r->ring, r->pending, true);
	shoal__json_object_end(j);
}

static void json_doorbell(struct shoal__json *j, const struct shoal__region_snap *r)
{
	const char *state = shoal__doorbell_state_name(r->doorbell.state);

	shoal__json_object_begin(j, "doorbell");
	if (state != NULL)
		shoal__json_string(j, "state", state);
	else
		shoal__json_uint(j, "state", r->doorbell.state);
	shoal__json_uint(j, "sleeps", r->doorbell.sleeps);
	shoal__json_uint(j, "wakes", r->doorbell.wakes);
	shoal__json_object_end(j);
}

static void json_tag(struct shoal__json *j, const struct shoal_seg_tag *t)
{
	shoal__json_object_begin(j, "tag");
	shoal__json_uint(j, "role", t->role);
	shoal__json_uint(j, "a", t->a);
	shoal__json_uint(j, "b", t->b);
	shoal__json_uint(j, "c", t->c);
	shoal__json_uint(j, "generation", t->gen);
	shoal__json_object_end(j);
}

static void json_region(struct shoal__json *j, const struct shoal__region_snap *r)
{
	shoal__json_object_begin(j, NULL);
	shoal__json_uint(j, "index", r->index);
	if (r->entry_ok) {
		shoal__json_string(j, "kind", shoal__region_kind_name(r->region.kind));
		shoal__json_uint(j, "kind_id", r->region.kind);
		shoal__json_string(j, "name", r->region.name);
		shoal__json_uint(j, "offset", r->region.off);
		shoal__json_uint(j, "length", r->region.len);
		if (r->region.tag.role != 0)
			json_tag(j, &r->region.tag);
	}
	shoal__json_string(j, "status", status_json[region_status(r)]);
	if (r->corrupt)
		shoal__json_string(j, "reason", r->reason);
	if (r->check_attempts > 0)
		shoal__json_uint(j, "check_attempts", r->check_attempts);
	if (r->have_ring)
		json_ring(j, r);
	if (r->have_doorbell)
		json_doorbell(j, r);
	shoal__json_object_end(j);
}

static void print_json(const struct shoal__seg_snap *snap, const struct shoal_seg *seg)
{
	struct shoal__json j;

	shoal__json_init(&j, stdout);
	shoal__json_doc_begin(&j, RING_JSON_SCHEMA);
	json_segment(&j, snap, seg);
	shoal__json_array_begin(&j, "regions");
	for (uint32_t i = 0; i < snap->n_regions; i++)
		json_region(&j, &snap->regions[i]);
	shoal__json_array_end(&j);
	shoal__json_string(&j, "status", snap_corrupt(snap) ? "corrupt" : "ok");
	shoal__json_object_end(&j);
}

/* ---- The command ---- */

static bool has_ring(const struct shoal__seg_snap *snap, const char *name)
{
	for (uint32_t i = 0; i < snap->n_regions; i++)
		if (region_is(&snap->regions[i], SHOAL_SEG_KIND_RING) &&
		    strcmp(snap->regions[i].region.name, name) == 0)
			return true;
	return false;
}

/* Snapshot the attached segment and print it. Returns the exit code. */
static int report(const struct shoal__cmd *cmd, const struct ring_args *a,
		  const struct shoal_seg *seg)
{
	struct shoal__seg_snap snap;
	int ret = shoal__seg_snap_take(&snap, seg, &a->snap);

	if (ret == -EFAULT) {
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_ATTACH, ret, "%s: the file shrank "
				       "below its header while it was being read", seg->path);
	}
	if (ret < 0)
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_ATTACH, ret, "%s: %s", seg->path,
				       shoal_strerror(ret));
	if (a->snap.ring != NULL && !has_ring(&snap, a->snap.ring)) {
		ret = shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, -ENOENT, "segment %s has no "
				      "ring named '%s'", seg->path, a->snap.ring);
	} else {
		if (a->json)
			print_json(&snap, seg);
		else
			print_text(&snap, seg);
		ret = snap_corrupt(&snap) ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
	}
	shoal__seg_snap_free(&snap);
	return ret;
}

static int cmd_ring(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct shoal_err err = {{0}};
	struct ring_args a;
	struct shoal_seg seg;
	int ret = parse_args(cmd, argc, argv, &a);

	if (ret >= 0)
		return ret;
	/* Read-only and owner-agnostic: a tool inspects any segment it can
	 * read and never writes to it. */
	ret = shoal_seg_attach(&seg, a.segment, SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN, &err);
	if (ret < 0)
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_ATTACH, ret, "cannot attach '%s': %s",
				       a.segment, err.msg[0] != '\0' ? err.msg : shoal_strerror(ret));
	ret = report(cmd, &a, &seg);
	shoal_seg_detach(&seg);
	return ret;
}

const struct shoal__cmd shoal__cmd_ring = {
	.name = "ring",
	.summary = "Show a segment's header, its regions, and the state of its rings",
	.fn = cmd_ring,
	.help =
	"Usage: shoal ring [--json] [--ring NAME] [--check-retries N] SEGMENT\n"
	"\n"
	"Show a segment's header, its directory of regions, and for every ring its\n"
	"indices, counters and whether the records between head and tail are intact;\n"
	"for every doorbell its state and counters. Read-only: the segment is mapped\n"
	"read-only and never written to, so it is safe on a live system.\n"
	"\n"
	"SEGMENT is a segment name, looked up in $SHOAL_SHM_DIR (default\n"
	"/dev/shm/shoal-UID), or a path if it contains a '/'.\n"
	"\n"
	"Options:\n"
	"  --json               print one JSON object instead of text\n"
	"  --ring NAME          show only the ring named NAME\n"
	"  --check-retries N    check a ring that looks corrupted N more times before\n"
	"                       reporting it (default 3, at most 1000); a check that\n"
	"                       a live consumer overtook is made again, not counted\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status:\n"
	"  0  every ring, doorbell and directory entry is intact\n"
	"  1  something is corrupted (the rest is still shown), or no ring is NAME\n"
	"  2  bad command line\n"
	"  3  cannot attach: no such segment, not a Shoal segment, truncated, another\n"
	"     layout version, or not readable\n",
	.json_schema = RING_JSON_SCHEMA,
};
