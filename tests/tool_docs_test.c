/* SPDX-License-Identifier: MIT */
/*
 * The `shoal` command's documentation beside its --help: every command that
 * `shoal help` lists has a man page (docs/man/shoal-CMD.1.scd, named in
 * shoal.1.scd), each option its --help lists is in that page and offered by
 * the bash completion (tools/shoal.bash), and the completion completes
 * commands, options, system and group names. Reads the sources, so it runs
 * whether or not scdoc is installed; the completion cases skip visibly
 * without bash-completion.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/toolrun.h"

#define MAX_CMDS 32
#define MAX_OPTS 32
#define BASH_COMPLETION "/usr/share/bash-completion/bash_completion"

static const char *man_dir, *completion;

/* The whole of a text file (it holds no NUL: one getdelim() reads it all). */
static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0;

	if (f == NULL)
		fail_msg("cannot open %s", path);
	assert_true(getdelim(&buf, &cap, '\0', f) > 0);
	fclose(f);
	return buf;
}

/* The command names of `shoal help`: the lines under "Commands:". */
static unsigned list_commands(char names[][16])
{
	struct tool_run r;
	unsigned n = 0;
	char *p;

	tool_expect(&r, 0, (const char *const[]){ "help", NULL });
	p = strstr(r.out, "Commands:\n");
	assert_non_null(p);
	for (p = strchr(p, '\n') + 1; strncmp(p, "  ", 2) == 0; p = strchr(p, '\n') + 1) {
		assert_true(n < MAX_CMDS);
		assert_int_equal(sscanf(p, " %15s", names[n]), 1);
		n++;
	}
	tool_free(&r);
	assert_true(n > 0);
	return n;
}

/* The options `shoal CMD --help` lists: each "  -x, --long ..." line. */
static unsigned list_options(const char *cmd, char opts[][32])
{
	struct tool_run r;
	unsigned n = 0;

	tool_expect(&r, 0, (const char *const[]){ cmd, "--help", NULL });
	for (const char *line = r.out; line != NULL && *line != '\0';
	     line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		const char *p = line + 2;

		if (strncmp(line, "  -", 3) != 0)
			continue;
		while (*p == '-') {
			size_t len = strcspn(p, " ,\n");

			assert_true(n < MAX_OPTS && len < 32);
			memcpy(opts[n], p, len);
			opts[n++][len] = '\0';
			p += len;
			if (strncmp(p, ", ", 2) != 0)
				break;
			p += 2;
		}
	}
	tool_free(&r);
	return n;
}

/* Is `word` in `text` as a whole word of options (not a prefix of one)? */
static bool has_word(const char *text, const char *word)
{
	size_t len = strlen(word);

	for (const char *p = strstr(text, word); p != NULL; p = strstr(p + 1, word))
		if ((p == text || strchr(" \"*|(", p[-1]) != NULL) &&
		    strchr(" \"*|)\n", p[len]) != NULL)
			return true;
	return false;
}

static void docs_every_command_has_a_page_with_its_options(void **state)
{
	char cmds[MAX_CMDS][16], opts[MAX_OPTS][32], path[2048], ref[1100];
	char *top = NULL, *bash = read_all(completion);
	unsigned n = list_commands(cmds);

	(void)state;
	snprintf(path, sizeof(path), "%s/shoal.1.scd", man_dir);
	top = read_all(path);
	for (unsigned c = 0; c < n; c++) {
		char *page;
		unsigned k;

		snprintf(ref, sizeof(ref), "*%s*", cmds[c]);
		if (strstr(top, ref) == NULL)
			fail_msg("shoal.1.scd does not list command %s", cmds[c]);
		if (!has_word(bash, cmds[c]))
			fail_msg("tools/shoal.bash does not offer command %s", cmds[c]);
		/* `help` has no options of its own beyond --help: shoal(1) is its page. */
		if (strcmp(cmds[c], "help") == 0)
			continue;
		snprintf(ref, sizeof(ref), "*shoal-%s*(1)", cmds[c]);
		if (strstr(top, ref) == NULL)
			fail_msg("shoal.1.scd does not refer to %s", ref);
		snprintf(path, sizeof(path), "%s/shoal-%s.1.scd", man_dir, cmds[c]);
		if (access(path, R_OK) != 0)
			fail_msg("command %s has no man page %s", cmds[c], path);
		page = read_all(path);
		k = list_options(cmds[c], opts);
		assert_true(k > 0);
		for (unsigned o = 0; o < k; o++) {
			snprintf(ref, sizeof(ref), "*%s*", opts[o]);
			if (strstr(page, ref) == NULL)
				fail_msg("shoal-%s.1.scd does not document %s", cmds[c], opts[o]);
			if (opts[o][1] == '-' && !has_word(bash, opts[o]))
				fail_msg("tools/shoal.bash does not offer %s for %s", opts[o],
					 cmds[c]);
		}
		free(page);
	}
	free(top);
	free(bash);
}

/* What the completion offers for the words of `line` (the last one being
 * completed), one per line, with $SHOAL_SHM_DIR holding a fake system. */
static char *complete(const char *line)
{
	char script[2048], *out;
	FILE *p;

	snprintf(script, sizeof(script),
		 "bash -c 'source %s; source %s; COMP_LINE=\"%s\"; COMP_POINT=${#COMP_LINE}; "
		 "read -ra COMP_WORDS <<< \"$COMP_LINE\"; [[ $COMP_LINE == *\" \" ]] && "
		 "COMP_WORDS+=(\"\"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _shoal; "
		 "printf \"%%s\\n\" \"${COMPREPLY[@]}\" | sort'", BASH_COMPLETION, completion,
		 line);
	p = popen(script, "r");
	assert_non_null(p);
	out = calloc(1, 4096);
	assert_non_null(out);
	assert_true(fread(out, 1, 4095, p) < 4095);
	assert_int_equal(pclose(p), 0);
	return out;
}

static void docs_completion_offers_commands_options_and_names(void **state)
{
	static const struct {
		const char *line, *offers;
	} cases[] = {
		{ "shoal st", "stat\nstop\n" },
		{ "shoal stat --c", "--check-retries\n" },
		{ "shoal logs --", "--follow\n--help\n--json\n--log-dir\n--tail\n--timestamps\n" },
		{ "shoal run --status p", "plain\n" },
		{ "shoal stat ", "demo\nother\n" },
		{ "shoal stat demo ", "\n" },
		{ "shoal stop d", "demo\n" },
		{ "shoal restart --timeout 5 demo ", "sink\nsource\n" },
		{ "shoal dump demo s", "sink\nsource\n" },
	};
	/* Files named as a system's registry and mailboxes are all it reads. */
	static const char *const files[] = { "shoal.demo.reg", "shoal.demo.g.source",
					     "shoal.demo.g.sink", "shoal.other.reg" };
	const char *dir;
	char path[512];

	(void)state;
	if (access(BASH_COMPLETION, R_OK) != 0)
		skip();
	dir = test_shm_dir_make("docs");
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		f = fopen(path, "w");
		assert_non_null(f);
		fclose(f);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = complete(cases[i].line);

		if (strcmp(got, cases[i].offers) != 0)
			fail_msg("'%s<TAB>' offers:\n%s\nnot:\n%s", cases[i].line, got,
				 cases[i].offers);
		free(got);
	}
	test_shm_dir_remove();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(docs_every_command_has_a_page_with_its_options),
		cmocka_unit_test(docs_completion_offers_commands_options_and_names),
	};

	tool_bin = getenv("SHOAL_BIN");
	man_dir = getenv("SHOAL_MAN_DIR");
	completion = getenv("SHOAL_COMPLETION");
	if (tool_bin == NULL || man_dir == NULL || completion == NULL) {
		/* Visible skip: meson passes them; a hand run must too. */
		fprintf(stderr, "tool_docs_test: set SHOAL_BIN, SHOAL_MAN_DIR (docs/man) and "
			"SHOAL_COMPLETION (tools/shoal.bash)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
