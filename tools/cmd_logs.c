/* SPDX-License-Identifier: MIT */
/*
 * `shoal logs`: the lines a system's groups printed, from the files `shoal
 * run --log-dir DIR` writes (DIR/GROUP.log, each line after its UTC time).
 * The supervisor says where DIR is (an INFO request, tools/admin.h); for a
 * system that is not running, --log-dir names it. Lines of several groups
 * are merged by their time; -f follows the files as they grow.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/layout.h"
#include "tools/admin.h"
#include "tools/json.h"

/* The layout version of its --json documents (shoal(1), JSON OUTPUT). */
#define LOGS_JSON_SCHEMA 1

#define STAMP_LEN 24                  /* "2026-12-03T11:09:36.093Z" */
#define FOLLOW_MS 200

struct logs_args {
	const char *system, *group, *dir;
	bool follow, json, stamps;
	uint32_t tail;                /* UINT32_MAX: every line */
};

/* One group's file and how far it has been read. */
struct log_file {
	char group[SHOAL_NAME_MAX];
	char path[PATH_MAX];
	FILE *f;
};

struct log_line {
	const struct log_file *from;
	char *text;                   /* the line as stored, without its newline */
};

struct log_batch {
	struct log_line *v;
	size_t n, cap;
};

enum {
	OPT_HELP = SHOAL_CLI_OPT_LONG,
	OPT_FOLLOW,
	OPT_JSON,
	OPT_LOG_DIR,
	OPT_TAIL,
	OPT_TIMESTAMPS,
};

/* Returns -1 to go on, or the exit code to return now. */
static int parse_args(const struct shoal__cmd *cmd, int argc, char **argv, struct logs_args *a)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, OPT_HELP },
		{ "follow", no_argument, NULL, OPT_FOLLOW },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "log-dir", required_argument, NULL, OPT_LOG_DIR },
		{ "tail", required_argument, NULL, OPT_TAIL },
		{ "timestamps", no_argument, NULL, OPT_TIMESTAMPS },
		{ NULL, 0, NULL, 0 },
	};
	int c, end;

	memset(a, 0, sizeof(*a));
	a->tail = UINT32_MAX;
	while ((c = shoal__cli_next_option(cmd, argc, argv, "ft", longopts, &end)) != -1) {
		switch (c) {
		case SHOAL_CLI_OPT_END:
			return end;
		case 'f':
		case OPT_FOLLOW:
			a->follow = true;
			break;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_LOG_DIR:
			if (optarg[0] == '\0')
				return shoal__cli_usage_error(cmd, "--log-dir takes a directory");
			a->dir = optarg;
			break;
		case OPT_TAIL:
			if (shoal__cli_parse_uint(optarg, UINT32_MAX - 1, &a->tail) < 0)
				return shoal__cli_usage_error(cmd, "--tail takes a number of lines, "
							      "not '%s'", optarg);
			break;
		case 't':
		case OPT_TIMESTAMPS:
			a->stamps = true;
			break;
		}
	}
	return shoal__cli_system_group_args(cmd, argc, argv, 1, &a->system, &a->group);
}

/* ---- the files ---- */

static int add_file(struct log_file **files, size_t *n, const char *dir, const char *group)
{
	struct log_file *v = realloc(*files, (*n + 1) * sizeof(*v)), *lf;

	if (v == NULL)
		return -ENOMEM;
	*files = v;
	lf = &v[*n];
	memset(lf, 0, sizeof(*lf));
	snprintf(lf->group, sizeof(lf->group), "%s", group);
	snprintf(lf->path, sizeof(lf->path), "%s/%s.log", dir, group);
	lf->f = fopen(lf->path, "re");
	if (lf->f == NULL)
		return -errno;
	(*n)++;
	return 0;
}

/* Open DIR/GROUP.log, or every file of DIR named as GROUP.log would be. */
static int open_files(const struct logs_args *a, const char *dir, struct log_file **files,
		      size_t *n)
{
	struct dirent *e;
	DIR *d;
	int ret = 0;

	*files = NULL;
	*n = 0;
	if (a->group != NULL)
		return add_file(files, n, dir, a->group);
	d = opendir(dir);
	if (d == NULL)
		return -errno;
	while (ret == 0 && (e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		char group[SHOAL_NAME_MAX];

		if (len <= 4 || len - 4 >= sizeof(group) || strcmp(e->d_name + len - 4, ".log") != 0)
			continue;
		memcpy(group, e->d_name, len - 4);
		group[len - 4] = '\0';
		if (shoal__check_name(group, "group", NULL) == 0)
			ret = add_file(files, n, dir, group);
	}
	closedir(d);
	return ret;
}

static void close_files(struct log_file *files, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fclose(files[i].f);
	free(files);
}

/*
 * Append to *b the whole lines `lf` has gained since the last read. A last
 * line without its newline is being written: it is read again next time.
 */
static int read_new(struct log_file *lf, struct log_batch *b)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int ret = 0;

	clearerr(lf->f);
	for (;;) {
		long at = ftell(lf->f);

		len = getline(&line, &cap, lf->f);
		if (len <= 0)
			break;
		if (line[len - 1] != '\n') {
			fseek(lf->f, at, SEEK_SET);
			break;
		}
		line[len - 1] = '\0';
		if (b->n == b->cap) {
			size_t ncap = b->cap ? 2 * b->cap : 256;
			struct log_line *v = realloc(b->v, ncap * sizeof(*v));

			if (v == NULL) {
				ret = -ENOMEM;
				break;
			}
			b->v = v;
			b->cap = ncap;
		}
		b->v[b->n].from = lf;
		b->v[b->n].text = strdup(line);
		if (b->v[b->n].text == NULL) {
			ret = -ENOMEM;
			break;
		}
		b->n++;
	}
	free(line);
	return ret;
}

/* The time a stored line starts with, or "" for a line without one. */
static const char *stamp_of(const char *text, char out[STAMP_LEN + 1])
{
	size_t n = strnlen(text, STAMP_LEN + 1);

	out[0] = '\0';
	if (n == STAMP_LEN + 1 && text[STAMP_LEN] == ' ' && text[STAMP_LEN - 1] == 'Z') {
		memcpy(out, text, STAMP_LEN);
		out[STAMP_LEN] = '\0';
	}
	return out;
}

static int by_time(const void *pa, const void *pb)
{
	const struct log_line *a = pa, *b = pb;
	char sa[STAMP_LEN + 1], sb[STAMP_LEN + 1];
	int c = strcmp(stamp_of(a->text, sa), stamp_of(b->text, sb));

	/* Same time: keep each file's order, files by name. */
	if (c == 0)
		c = strcmp(a->from->group, b->from->group);
	if (c == 0)
		c = a < b ? -1 : a > b;
	return c;
}

static void print_line(const struct logs_args *a, struct shoal__json *j, int name_w,
		       const struct log_line *l)
{
	char stamp[STAMP_LEN + 1];
	const char *text = l->text;

	stamp_of(text, stamp);
	if (stamp[0] != '\0')
		text += STAMP_LEN + 1;
	if (a->json) {
		shoal__json_doc_begin(j, LOGS_JSON_SCHEMA);
		shoal__json_string(j, "group", l->from->group);
		if (stamp[0] != '\0')
			shoal__json_string(j, "written", stamp);
		else
			shoal__json_null(j, "written");
		shoal__json_string(j, "line", text);
		shoal__json_object_end(j);
	} else if (a->stamps && stamp[0] != '\0') {
		printf("%-*s | %s %s\n", name_w, l->from->group, stamp, text);
	} else {
		printf("%-*s | %s\n", name_w, l->from->group, text);
	}
}

/* Print the batch in time order (its last `tail` lines), and empty it. */
static void print_batch(const struct logs_args *a, struct shoal__json *j, int name_w,
			struct log_batch *b, uint32_t tail)
{
	size_t from = tail < b->n ? b->n - tail : 0;

	qsort(b->v, b->n, sizeof(b->v[0]), by_time);
	for (size_t i = 0; i < b->n; i++) {
		if (i >= from)
			print_line(a, j, name_w, &b->v[i]);
		free(b->v[i].text);
	}
	b->n = 0;
	fflush(stdout);
}

/* ---- the command ---- */

/* Where the logs are: --log-dir, or the running supervisor's answer. */
static int find_dir(const struct shoal__cmd *cmd, const struct logs_args *a, char *dir,
		    size_t len, bool *running)
{
	struct shoal__admin_answer ans;

	shoal__admin_ask(a->system, SHOAL__ADMIN_INFO, "", 10000, &ans);
	*running = ans.reached && ans.code == 0;
	if (a->dir != NULL) {
		snprintf(dir, len, "%s", a->dir);
		return -1;
	}
	if (!*running) {
		return shoal__cli_fail(cmd->name, ans.reached && ans.code != -EACCES &&
				       ans.code != -ENOTSUP ? SHOAL_EXIT_CORRUPT : SHOAL_EXIT_ATTACH,
				       ans.code, "%s; for the logs of a system that is not running, "
				       "name their folder with --log-dir", ans.msg);
	}
	if (ans.log_dir[0] == '\0')
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, 0, "system %s writes no log "
				       "files: its groups' output goes to the output of its 'shoal "
				       "run' (run it with --log-dir DIR to keep them)", a->system);
	snprintf(dir, len, "%s", ans.log_dir);
	return -1;
}

/* Is the system's control socket still there (the router removes it last)? */
static bool still_running(const char *system)
{
	char path[PATH_MAX];
	struct stat st;

	return shoal__path_socket(path, sizeof(path), system) == 0 && stat(path, &st) == 0;
}

static int cmd_logs(const struct shoal__cmd *cmd, int argc, char **argv)
{
	struct log_batch b = { 0 };
	struct logs_args a;
	struct log_file *files;
	struct shoal__json j;
	char dir[SHOAL__CTL_PATH_MAX];
	size_t n;
	int ret = parse_args(cmd, argc, argv, &a), name_w = 0;
	bool running;

	if (ret >= 0)
		return ret;
	ret = find_dir(cmd, &a, dir, sizeof(dir), &running);
	if (ret >= 0)
		return ret;
	ret = open_files(&a, dir, &files, &n);
	if (ret < 0 || n == 0) {
		close_files(files, n);
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, ret, "%s%s%s%s: %s", dir,
				       a.group ? "/" : "", a.group ? a.group : "",
				       a.group ? ".log" : "",
				       ret < 0 ? strerror(-ret) : "no GROUP.log files");
	}
	for (size_t i = 0; i < n; i++)
		if ((int)strlen(files[i].group) > name_w)
			name_w = (int)strlen(files[i].group);
	shoal__json_init_line(&j, stdout);
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = read_new(&files[i], &b);
	print_batch(&a, &j, name_w, &b, a.tail);
	/* Following: until interrupted, or until the system (running when we
	 * started) stops; what it printed last is read first. */
	while (ret == 0 && a.follow) {
		bool last = running && !still_running(a.system);

		for (size_t i = 0; i < n && ret == 0; i++)
			ret = read_new(&files[i], &b);
		print_batch(&a, &j, name_w, &b, UINT32_MAX);
		if (last)
			break;
		usleep(FOLLOW_MS * 1000);
	}
	free(b.v);
	close_files(files, n);
	if (ret < 0)
		return shoal__cli_fail(cmd->name, SHOAL_EXIT_CORRUPT, ret, "%s", strerror(-ret));
	return SHOAL_EXIT_OK;
}

const struct shoal__cmd shoal__cmd_logs = {
	.name = "logs",
	.summary = "Show what a system's groups printed, from their log files",
	.fn = cmd_logs,
	.help =
	"Usage: shoal logs [-f] [-t] [--tail N] [--json] [--log-dir DIR] SYSTEM [GROUP]\n"
	"\n"
	"Show the lines the groups of SYSTEM printed (or only GROUP's), read from\n"
	"the files 'shoal run --log-dir DIR' writes, DIR/GROUP.log, as\n"
	"'GROUP | line', the lines of several groups merged by their time. The\n"
	"running system's supervisor says where DIR is; for a system that is not\n"
	"running (or to read another folder), give it with --log-dir.\n"
	"\n"
	"Options:\n"
	"  -f, --follow       keep printing lines as they are written, until\n"
	"                     interrupted or until the system stops\n"
	"  -t, --timestamps   show each line's time (UTC, as written)\n"
	"  --tail N           only the last N lines written so far (then, with -f,\n"
	"                     every new one)\n"
	"  --json             one JSON object a line: group, written (the line's\n"
	"                     time, or null), line\n"
	"  --log-dir DIR      read DIR instead of asking the supervisor\n"
	"  -h, --help         show this help\n"
	"\n"
	"Exit status:\n"
	"  0  the lines were shown\n"
	"  1  no log files: the system runs without --log-dir, or GROUP has no\n"
	"     file in DIR\n"
	"  2  bad command line\n"
	"  3  the system is not running (or is another user's) and no --log-dir\n"
	"     was given\n",
	.json_schema = LOGS_JSON_SCHEMA,
};
