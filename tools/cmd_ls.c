/* SPDX-License-Identifier: MIT */
/*
 * `shoal ls`: list the Shoal systems in the shared-memory directory, and the
 * Shoal segments no system owns (leftovers of crashed processes, mostly).
 *
 * A system S is the set of files shoal.S.reg (its registry), shoal.S.bell,
 * shoal.S.g.GROUP (one mailbox per declared group), the control socket
 * shoal.S.ctl (runtime/layout.h) and, on a system that spans hosts, its
 * bridge's link view shoal.S.links (runtime/bridge/view.h). A file named like one of these whose
 * system has no registry, or a mailbox of a group the registry does not
 * declare, is stray; so is any other file that carries a Shoal segment
 * header. Only regular files and sockets are looked at: opening anything
 * else (a FIFO) could block.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/cli.h"
#include "tools/format.h"
#include "tools/json.h"
#include "tools/sysview.h"
#include "tools/table.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define LS_JSON_SCHEMA 1

/* Entries looked at, at most: a directory can hold any number of files. */
#define MAX_ENTRIES 65536u

#define NAME_SIZE SHOAL_FMT_PRINTABLE_SIZE(SHOAL_SEG_NAME_MAX)

enum role { ROLE_NONE, ROLE_REGISTRY, ROLE_BELL, ROLE_SOCKET, ROLE_MAILBOX, ROLE_LINKS };

struct entry {
	char name[SHOAL_SEG_NAME_MAX];
	bool socket;                     /* else a regular file */
	uint64_t size;
	enum role role;
	char system[SHOAL_NAME_MAX];     /* when role != ROLE_NONE */
	char group[SHOAL_NAME_MAX];      /* when role == ROLE_MAILBOX */
	bool owned;                      /* part of a listed system */
};

struct system {
	const struct entry *registry;
	int ret;                         /* of shoal__sys_view_take() */
	struct shoal_err err;
	struct shoal__sys_view view;
	uint32_t segments;
	uint64_t bytes;
};

/* What a stray file turned out to be. */
struct stray {
	const struct entry *e;
	int ret;                         /* of attaching it: 0 or a negative errno */
	char reason[SHOAL_ERR_MSG_MAX];
	int32_t creator_pid;
	int alive;
};

struct listing {
	const char *dir;
	struct entry *entries;
	uint32_t n_entries;
	bool truncated;                  /* more than MAX_ENTRIES */
	struct system *systems;
	uint32_t n_systems;
	struct stray *strays;
	uint32_t n_strays;
};

/* ---- Reading the directory ---- */

/* Split "shoal.S.KIND[.GROUP]" into its parts; ROLE_NONE if it is not one. */
static enum role parse_name(const char *name, char *system, char *group)
{
	const char *s = name + strlen("shoal."), *dot;
	size_t n;

	if (strncmp(name, "shoal.", strlen("shoal.")) != 0 || (dot = strchr(s, '.')) == NULL)
		return ROLE_NONE;
	n = (size_t)(dot - s);
	if (n == 0 || n >= SHOAL_NAME_MAX)
		return ROLE_NONE;
	memcpy(system, s, n);
	system[n] = '\0';
	if (shoal__check_name(system, "system", NULL) < 0)
		return ROLE_NONE;
	if (strcmp(dot, ".reg") == 0)
		return ROLE_REGISTRY;
	if (strcmp(dot, ".bell") == 0)
		return ROLE_BELL;
	if (strcmp(dot, ".ctl") == 0)
		return ROLE_SOCKET;
	if (strcmp(dot, ".links") == 0)
		return ROLE_LINKS;
	if (strncmp(dot, ".g.", 3) != 0 || strlen(dot + 3) >= SHOAL_NAME_MAX)
		return ROLE_NONE;
	strcpy(group, dot + 3);
	return shoal__check_name(group, "group", NULL) == 0 ? ROLE_MAILBOX : ROLE_NONE;
}

/* Fill *e from directory entry `name`; false to skip it. */
static bool read_entry(int dfd, const char *name, struct entry *e)
{
	struct stat st;

	/* A segment name is shorter than SHOAL_SEG_NAME_MAX and has no leading dot. */
	if (name[0] == '.' || strlen(name) >= sizeof(e->name))
		return false;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !(S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode)))
		return false;
	memset(e, 0, sizeof(*e));
	strcpy(e->name, name);
	e->socket = S_ISSOCK(st.st_mode);
	e->size = e->socket ? 0 : (uint64_t)st.st_size;
	e->role = parse_name(name, e->system, e->group);
	/* A name in the right shape on the wrong kind of file is no part of a system. */
	if ((e->role == ROLE_SOCKET) != e->socket)
		e->role = ROLE_NONE;
	return true;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

/* Returns 0, -ENOMEM, or the errno of opening the directory. */
static int read_dir(struct listing *l)
{
	DIR *d = opendir(l->dir);
	struct dirent *de;
	uint32_t cap = 0;

	if (d == NULL)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		struct entry e;

		if (!read_entry(dirfd(d), de->d_name, &e))
			continue;
		if (l->n_entries == MAX_ENTRIES) {
			l->truncated = true;
			break;
		}
		if (l->n_entries == cap) {
			uint32_t n = cap ? 2 * cap : 64;
			struct entry *grown = realloc(l->entries, n * sizeof(*grown));

			if (grown == NULL) {
				closedir(d);
				return -ENOMEM;
			}
			l->entries = grown;
			cap = n;
		}
		l->entries[l->n_entries++] = e;
	}
	closedir(d);
	if (l->n_entries > 0)
		qsort(l->entries, l->n_entries, sizeof(*l->entries), by_name);
	return 0;
}

/* ---- Systems and strays ---- */

static bool declares(const struct shoal__sys_view *v, const char *group)
{
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].state != SHOAL_GROUP_EMPTY && v->groups[id].name_ok &&
		    strcmp(v->groups[id].name, group) == 0)
			return true;
	return false;
}

/* Mark the files that belong to system `s` and add up its segments. */
static void claim_files(struct listing *l, struct system *s)
{
	const char *name = s->registry->system;

	for (uint32_t i = 0; i < l->n_entries; i++) {
		struct entry *e = &l->entries[i];

		if (e->role == ROLE_NONE || strcmp(e->system, name) != 0)
			continue;
		/* Without a readable registry, which groups exist cannot be told:
		 * the system keeps every mailbox named after it. */
		if (e->role == ROLE_MAILBOX && s->ret == 0 && !declares(&s->view, e->group))
			continue;
		e->owned = true;
		if (e->role != ROLE_SOCKET) {
			s->segments++;
			s->bytes += e->size;
		}
	}
}

static int find_systems(struct listing *l)
{
	struct shoal__sys_view_opts o = { .mailboxes = false };
	uint32_t n = 0;

	for (uint32_t i = 0; i < l->n_entries; i++)
		n += l->entries[i].role == ROLE_REGISTRY;
	l->systems = calloc(n ? n : 1, sizeof(*l->systems));
	if (l->systems == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < l->n_entries; i++) {
		struct system *s = &l->systems[l->n_systems];

		if (l->entries[i].role != ROLE_REGISTRY)
			continue;
		s->registry = &l->entries[i];
		s->ret = shoal__sys_view_take(&s->view, s->registry->system, &o, &s->err);
		if (s->ret == -ENOMEM)
			return -ENOMEM;
		l->n_systems++;
		claim_files(l, s);
	}
	return 0;
}

struct header_read {
	const struct shoal_seg *seg;
	struct stray *s;
};

static void read_creator(void *arg)
{
	struct header_read *h = arg;
	struct shoal_seg_info info;

	shoal_seg_info(h->seg, &info);
	h->s->creator_pid = info.creator_pid;
	h->s->alive = shoal_seg_probe(h->seg->path, NULL);
}

/* Attach a stray file to tell who made it. Returns false to leave it out. */
static bool inspect_stray(const struct listing *l, const struct entry *e, struct stray *s)
{
	struct shoal_err err = {{0}};
	char path[PATH_MAX];
	struct shoal_seg seg;
	struct header_read h = { .seg = &seg, .s = s };

	memset(s, 0, sizeof(*s));
	s->e = e;
	s->alive = -1;
	if (e->socket)
		return true;
	snprintf(path, sizeof(path), "%s/%s", l->dir, e->name);
	s->ret = shoal_seg_attach(&seg, path, SHOAL_SEG_RDONLY | SHOAL_SEG_ALLOW_FOREIGN, &err);
	if (s->ret == 0) {
		if (shoal__snap_guard(read_creator, &h) < 0) {
			s->ret = -EFAULT;
			snprintf(err.msg, sizeof(err.msg), "the file shrank while it was read");
		}
		shoal_seg_detach(&seg);
	}
	if (s->ret < 0)
		snprintf(s->reason, sizeof(s->reason), "%s",
			 err.msg[0] != '\0' ? err.msg : shoal_strerror(s->ret));
	/* Named like a system's file: always worth a line. Otherwise only a
	 * file whose magic says Shoal (these errors come after the magic). */
	return e->role != ROLE_NONE || s->ret == 0 || s->ret == -EPROTONOSUPPORT ||
	       s->ret == -EUCLEAN;
}

static int find_strays(struct listing *l)
{
	l->strays = calloc(l->n_entries ? l->n_entries : 1, sizeof(*l->strays));
	if (l->strays == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < l->n_entries; i++) {
		const struct entry *e = &l->entries[i];

		if (e->owned || (e->socket && e->role == ROLE_NONE))
			continue;
		if (inspect_stray(l, e, &l->strays[l->n_strays]))
			l->n_strays++;
	}
	return 0;
}

static void listing_free(struct listing *l)
{
	for (uint32_t i = 0; i < l->n_systems; i++)
		if (l->systems[i].ret == 0)
			shoal__sys_view_free(&l->systems[i].view);
	free(l->systems);
	free(l->strays);
	free(l->entries);
}

static bool system_bad(const struct system *s)
{
	return s->ret < 0 || shoal__sys_view_corrupt(&s->view);
}

/* The first group of `s` the router found damaged (its view says why), or NULL. */
static const struct shoal__group_view *system_damaged(const struct system *s)
{
	if (s->ret < 0)
		return NULL;
	for (uint32_t id = 0; id < s->view.n_groups; id++)
		if (s->view.groups[id].damaged > 0)
			return &s->view.groups[id];
	return NULL;
}

/* Why system `s` is bad: the registry's own problem, or its first group's. */
static const char *system_reason(const struct system *s)
{
	const struct shoal__sys_view *v = &s->view;

	if (s->ret < 0)
		return s->err.msg[0] != '\0' ? s->err.msg : shoal_strerror(s->ret);
	if (v->corrupt)
		return v->reason;
	for (uint32_t id = 0; id < v->n_groups; id++)
		if (v->groups[id].corrupt)
			return v->groups[id].reason;
	return "";
}

/* "running"/"stopping" with a live router, "dead" (a leftover), "unknown". */
static const char *system_state(const struct system *s)
{
	const char *state = shoal__system_state_name(s->view.state);

	if (s->ret < 0)
		return "unreadable";
	if (s->view.router_alive == 0)
		return "dead";
	if (s->view.router_alive < 0 || state == NULL)
		return "unknown";
	return state;
}

static const char *stray_status(const struct stray *s)
{
	if (s->e->socket)
		return "stray socket";
	if (s->ret < 0)
		return "unreadable";
	return s->alive == 0 ? "leftover" : s->alive > 0 ? "in use" : "unknown";
}

/* ---- Text output ---- */

static void system_row(struct shoal__table *t, const struct system *s)
{
	const struct shoal__sys_view *v = &s->view;
	struct shoal__sys_counts n;
	char size[SHOAL_FMT_SHORT_SIZE];

	shoal__table_row(t);
	shoal__table_cell(t, "%s", s->registry->system);
	shoal__table_cell(t, "%s", system_state(s));
	if (s->ret < 0) {
		for (int c = 0; c < 7; c++)
			shoal__table_cell(t, "-");
	} else {
		shoal__sys_view_count(v, &n);
		shoal__table_cell(t, "%d (%s)", v->router_pid, shoal__alive_name(v->router_alive));
		shoal__table_cell(t, "%u", n.declared);
		shoal__table_cell(t, "%u", n.running);
		shoal__table_cell(t, "%u", n.stopped);
		shoal__table_cell(t, "%u", n.failed);
		shoal__table_cell(t, "%u", v->n_routes);
		shoal__table_cell(t, "%u", v->n_dispatchers);
	}
	shoal__table_cell(t, "%u", s->segments);
	shoal__table_cell(t, "%s", shoal__fmt_bytes(size, sizeof(size), s->bytes));
}

static int text_systems(const struct listing *l)
{
	static const struct shoal__column cols[] = {
		{ "SYSTEM", 'l' }, { "STATE", 'l' }, { "ROUTER", 'l' }, { "GROUPS", 'r' },
		{ "RUNNING", 'r' }, { "STOPPED", 'r' }, { "FAILED", 'r' }, { "ROUTES", 'r' },
		{ "DISPATCHERS", 'r' }, { "SEGMENTS", 'r' }, { "SIZE", 'r' },
	};
	char name[NAME_SIZE];
	struct shoal__table t;

	if (l->n_systems == 0) {
		printf("No Shoal systems in %s\n", l->dir);
		return 0;
	}
	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), l->n_systems) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < l->n_systems; i++)
		system_row(&t, &l->systems[i]);
	printf("Systems in %s\n", l->dir);
	shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	for (uint32_t i = 0; i < l->n_systems; i++) {
		const struct system *s = &l->systems[i];

		if (s->ret < 0)
			printf("  %s: cannot read its registry: %s\n", s->registry->system,
			       system_reason(s));
		else if (system_damaged(s) != NULL)
			printf("  %s: DAMAGED: group %s: %s\n", s->registry->system,
			       shoal__fmt_printable(name, sizeof(name), system_damaged(s)->name),
			       system_damaged(s)->reason);
		else if (system_bad(s))
			printf("  %s: CORRUPT registry: %s\n", s->registry->system,
			       system_reason(s));
		else if (s->view.router_alive == 0)
			printf("  %s: its router is gone: these segments are leftovers, removed "
			       "when the system next starts\n", s->registry->system);
	}
	return 0;
}

static void stray_row(struct shoal__table *t, const struct stray *s)
{
	char name[NAME_SIZE], size[SHOAL_FMT_SHORT_SIZE];

	shoal__table_row(t);
	shoal__table_cell(t, "%s", shoal__fmt_printable(name, sizeof(name), s->e->name));
	if (s->e->socket)
		shoal__table_cell(t, "-");
	else
		shoal__table_cell(t, "%s", shoal__fmt_bytes(size, sizeof(size), s->e->size));
	if (s->e->socket || s->ret < 0)
		shoal__table_cell(t, "-");
	else
		shoal__table_cell(t, "%d (%s)", s->creator_pid, shoal__alive_name(s->alive));
	shoal__table_cell(t, "%s", stray_status(s));
}

static int text_strays(const struct listing *l)
{
	static const struct shoal__column cols[] = {
		{ "NAME", 'l' }, { "SIZE", 'r' }, { "CREATOR", 'l' }, { "STATUS", 'l' },
	};
	struct shoal__table t;

	if (l->n_strays == 0)
		return 0;
	if (shoal__table_init(&t, cols, sizeof(cols) / sizeof(cols[0]), l->n_strays) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < l->n_strays; i++)
		stray_row(&t, &l->strays[i]);
	printf("\nStray segments (no system owns them)\n");
	shoal__table_print(&t, stdout, "  ");
	shoal__table_free(&t);
	for (uint32_t i = 0; i < l->n_strays; i++) {
		const struct stray *s = &l->strays[i];
		char name[NAME_SIZE], reason[SHOAL_FMT_PRINTABLE_SIZE(SHOAL_ERR_MSG_MAX)];

		/* The reason quotes the path: file names are anybody's bytes. */
		if (s->ret < 0)
			printf("  %s: %s\n", shoal__fmt_printable(name, sizeof(name), s->e->name),
			       shoal__fmt_printable(reason, sizeof(reason), s->reason));
	}
	return 0;
}

static int print_text(const struct listing *l)
{
	int ret = text_systems(l);

	if (ret == 0)
		ret = text_strays(l);
	if (l->truncated)
		printf("\n(stopped after %u files)\n", MAX_ENTRIES);
	return ret;
}

/* ---- JSON output ---- */

static void json_system(struct shoal__json *j, const struct system *s)
{
	const struct shoal__sys_view *v = &s->view;
	struct shoal__sys_counts n;

	shoal__json_object_begin(j, NULL);
	shoal__json_string(j, "name", s->registry->system);
	shoal__json_string(j, "state", system_state(s));
	if (s->ret == 0) {
		shoal__sys_view_count(v, &n);
		shoal__json_int(j, "router_pid", v->router_pid);
		if (v->router_alive < 0)
			shoal__json_null(j, "router_alive");
		else
			shoal__json_bool(j, "router_alive", v->router_alive > 0);
		shoal__json_uint(j, "groups_declared", n.declared);
		shoal__json_uint(j, "groups_running", n.running);
		shoal__json_uint(j, "groups_stopped", n.stopped);
		shoal__json_uint(j, "groups_failed", n.failed);
		shoal__json_uint(j, "routes", v->n_routes);
		shoal__json_uint(j, "dispatchers", v->n_dispatchers);
	}
	shoal__json_uint(j, "segments", s->segments);
	shoal__json_uint(j, "bytes", s->bytes);
	shoal__json_string(j, "status", s->ret < 0 ? "unreadable" : system_damaged(s) ?
			   "damaged" : system_bad(s) ? "corrupt" : "ok");
	if (system_bad(s))
		shoal__json_string(j, "reason", system_reason(s));
	shoal__json_object_end(j);
}

static void json_stray(struct shoal__json *j, const struct stray *s)
{
	shoal__json_object_begin(j, NULL);
	shoal__json_string(j, "name", s->e->name);
	shoal__json_string(j, "kind", s->e->socket ? "socket" : "segment");
	if (!s->e->socket)
		shoal__json_uint(j, "bytes", s->e->size);
	if (!s->e->socket && s->ret == 0) {
		shoal__json_int(j, "creator_pid", s->creator_pid);
		if (s->alive < 0)
			shoal__json_null(j, "creator_alive");
		else
			shoal__json_bool(j, "creator_alive", s->alive > 0);
	}
	shoal__json_string(j, "status", stray_status(s));
	if (s->ret < 0)
		shoal__json_string(j, "reason", s->reason);
	shoal__json_object_end(j);
}

static void print_json(const struct listing *l)
{
	struct shoal__json j;
	bool bad = false;

	shoal__json_init(&j, stdout);
	shoal__json_doc_begin(&j, LS_JSON_SCHEMA);
	shoal__json_string(&j, "dir", l->dir);
	shoal__json_array_begin(&j, "systems");
	for (uint32_t i = 0; i < l->n_systems; i++) {
		json_system(&j, &l->systems[i]);
		bad |= system_bad(&l->systems[i]);
	}
	shoal__json_array_end(&j);
	shoal__json_array_begin(&j, "stray");
	for (uint32_t i = 0; i < l->n_strays; i++)
		json_stray(&j, &l->strays[i]);
	shoal__json_array_end(&j);
	shoal__json_bool(&j, "truncated", l->truncated);
	shoal__json_string(&j, "status", bad ? "corrupt" : "ok");
	shoal__json_object_end(&j);
}

/* ---- The command ---- */

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_JSON,
};

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv, bool *json)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "json", no_argument, NULL, OPT_JSON },
		{ NULL, 0, NULL, 0 },
	};
	int c, end;

	*json = false;
	while ((c = shoal__cli_next_option(cmd, argc, argv, "", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case OPT_JSON:
			*json = true;
			break;
		}
	}
	if (optind < argc)
		return shoal__cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	return -1;
}

static int cmd_ls(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct listing l = { .dir = shoal__shm_dir() };
	bool json, bad = false;
	int ret = parse_args(cmd, argc, argv, &json);

	if (ret >= 0)
		return ret;
	ret = read_dir(&l);
	/* The user's directory appears with their first system: none yet. */
	if (ret == -ENOENT && (getenv("SHOAL_SHM_DIR") == NULL || getenv("SHOAL_SHM_DIR")[0] == '\0'))
		ret = 0;
	if (ret < 0 && ret != -ENOMEM) {
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_ATTACH, ret, "cannot read the "
				       "directory %s: %s", l.dir, strerror(-ret));
	}
	if (ret == 0)
		ret = find_systems(&l);
	if (ret == 0)
		ret = find_strays(&l);
	if (ret == 0 && json)
		print_json(&l);
	else if (ret == 0)
		ret = print_text(&l);
	for (uint32_t i = 0; i < l.n_systems; i++)
		bad |= system_bad(&l.systems[i]);
	listing_free(&l);
	if (ret < 0)
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, ret, "out of memory");
	return bad ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_OK;
}

const struct shoal__cmd shoal__cmd_ls = {
	.name = "ls",
	.summary = "List the systems in the shared-memory directory, and stray segments",
	.fn = cmd_ls,
	.help =
	"Usage: shoal ls [--json]\n"
	"\n"
	"List the Shoal systems whose segments are in $SHOAL_SHM_DIR (default\n"
	"/dev/shm/shoal-UID, the user's own directory): for each, its state, its\n"
	"router's pid and whether that process is alive, its groups (declared,\n"
	"running, stopped on request, failed), routes, dispatchers, and how many\n"
	"segments it has and their total size. A system whose router is dead is a\n"
	"leftover of a crash; the next router of that name removes it.\n"
	"\n"
	"Then list the stray segments no system owns: files named like a system's\n"
	"segments or control socket whose system has no registry, mailboxes of\n"
	"groups their registry does not declare, and any other file carrying a\n"
	"Shoal segment header, with its creator and whether it is still alive\n"
	"('leftover': the creator is gone).\n"
	"\n"
	"Read-only: segments are mapped read-only and no router is asked anything.\n"
	"\n"
	"Options:\n"
	"  --json      print one JSON object instead of text\n"
	"  -h, --help  show this help\n"
	"\n"
	"Exit status:\n"
	"  0  every system's registry is intact (strays do not count)\n"
	"  1  a system's registry is corrupted or cannot be read (the rest is still\n"
	"     listed)\n"
	"  2  bad command line\n"
	"  3  cannot read the directory\n",
	.json_schema = LS_JSON_SCHEMA,
};
