/* SPDX-License-Identifier: MIT */
/*
 * `shoal top` on a terminal, with ncurses (tools/top_screen.h).
 *
 * The screen, top to bottom: the title (system, router, counts, refresh),
 * a line naming the keys, the dispatchers' table, the groups' title (their
 * order and the filter), their head and as many group rows as fit, scrolled
 * by the arrows and pages; the last line is kept for the filter being typed, a
 * note (a bad filter, an unknown key) or how many rows are hidden. The
 * tables are printed as text into memory (tools/top.h) and each line is
 * drawn cut to the width: a narrow window loses the right of the lines,
 * never wraps them, and a short one loses the last rows, never the heads.
 *
 * Keys are read without blocking (nodelay): cmd_top.c's wait polls standard
 * input and calls shoal__top_screen_keys() when it is readable or a signal
 * cut the wait short. A resize is ncurses' SIGWINCH handler at work: the
 * next getch() returns KEY_RESIZE with LINES and COLS already updated.
 * Ctrl-C stays a signal (cbreak, not raw), caught by cmd_top.c, which then
 * closes the screen.
 */
#include <curses.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <term.h>
#include <unistd.h>

#include "tools/top_screen.h"

/* How long a lone Esc waits for the rest of an escape sequence (ms). */
#define ESC_DELAY_MS 25
#define KEY_ESC 27
#define KEY_CTRL_U 21

struct shoal__top_screen {
	SCREEN *term;
	struct shoal__top_show *show;
	const char *system;
	uint32_t interval_ms;
	bool help;                       /* the keys are shown instead of the tables */
	bool typing;                     /* the last line edits the filter */
	char input[SHOAL_TOP_FILTER_MAX];
	size_t input_len;
	char note[160];                  /* said on the last line until the next key */
	uint32_t scroll;                 /* first group row shown */
	uint32_t rows_fit;               /* group rows the last draw had room for */
};

/* Only one terminal to take over. */
static struct shoal__top_screen the_screen;

struct shoal__top_screen *shoal__top_screen_open(struct shoal__top_show *show,
						 const char *system, uint32_t interval_ms)
{
	struct shoal__top_screen *s = &the_screen;

	if (s->term != NULL || !isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
		return NULL;
	s->term = newterm(NULL, stdout, stdin);
	if (s->term == NULL)
		return NULL;
	/* A terminal that cannot move the cursor (TERM=dumb) would get a
	 * screen drawn as one long line: plain output serves it better. */
	if (cursor_address == NULL) {
		endwin();
		delscreen(s->term);
		s->term = NULL;
		return NULL;
	}
	s->show = show;
	s->system = system;
	s->interval_ms = interval_ms;
	cbreak();
	noecho();
	nonl();
	keypad(stdscr, TRUE);
	nodelay(stdscr, TRUE);
	set_escdelay(ESC_DELAY_MS);
	curs_set(0);
	shoal__top_screen_draw(s, NULL);
	return s;
}

void shoal__top_screen_close(struct shoal__top_screen *s)
{
	if (s == NULL || s->term == NULL)
		return;
	endwin();
	delscreen(s->term);
	memset(s, 0, sizeof(*s));
}

/* Line y (if on the screen, above the last line) is `text` up to its end or a newline. */
static void put(int y, const char *text, attr_t attr)
{
	size_t len = strcspn(text, "\n");

	if (y >= LINES - 1)
		return;
	attr_on(attr, NULL);
	mvaddnstr(y, 0, text, (int)(len < (size_t)COLS ? len : (size_t)COLS));
	attr_off(attr, NULL);
}

/* Draw each line of `text` from line y; returns the line after the last. */
static int put_lines(int y, const char *text, attr_t first_attr)
{
	for (const char *p = text; *p != '\0'; y++) {
		put(y, p, p == text ? first_attr : A_NORMAL);
		p += strcspn(p, "\n");
		if (*p == '\n')
			p++;
	}
	return y;
}

static void draw_help(const struct shoal__top_screen *s)
{
	static const char *const help_lines[] = {
		"shoal top: keys",
		"",
		"  q            quit (Ctrl-C too)",
		"  h, ?         this help; any key goes back",
		"  r            groups by rate: IN/S + OUT/S, busiest first",
		"  n            groups by name",
		"  d            groups by DROPPED/S, most first",
		"  b            groups by QUEUED (backlog), most first",
		"  f            groups by FILL (fullest inbound ring), fullest first",
		"  /            filter groups: type a POSIX extended regular expression",
		"               matched anywhere in the name, Enter applies, Esc clears",
		"  Esc          clear the filter",
		"  Up, Down, PgUp, PgDn, Home, End   scroll the groups",
	};
	char line[256];
	int y = 0;

	for (size_t i = 0; i < sizeof(help_lines) / sizeof(help_lines[0]); i++)
		put(y++, help_lines[i], i == 0 ? A_BOLD : A_NORMAL);
	snprintf(line, sizeof(line), "Now: groups %s%s%s%s; a refresh every %u ms.",
		 s->show->sort->title, s->show->filtered ? ", filter /" : "",
		 s->show->filter, s->show->filtered ? "/" : "", s->interval_ms);
	put(y + 1, line, A_NORMAL);
}

/* The last line: the filter being typed, a note, or the rows out of view. */
static void draw_bottom(const struct shoal__top_screen *s, const struct shoal__top_frame *f)
{
	char line[320];
	attr_t attr = A_NORMAL;

	line[0] = '\0';
	if (s->typing)
		snprintf(line, sizeof(line), "filter (regex, Enter applies, Esc clears): %s",
			 s->input);
	else if (s->note[0] != '\0') {
		snprintf(line, sizeof(line), "%s", s->note);
		attr = A_REVERSE;
	} else if (f != NULL && f->n_shown > s->rows_fit)
		snprintf(line, sizeof(line), "groups %u-%u of %u (Up, Down, PgUp, PgDn scroll)",
			 s->scroll + 1, s->scroll + s->rows_fit, f->n_shown);
	attr_on(attr, NULL);
	/* The bottom-right cell is left alone: writing it would scroll some terminals. */
	mvaddnstr(LINES - 1, 0, line, COLS > 1 ? COLS - 1 : 0);
	attr_off(attr, NULL);
	if (s->typing) {
		curs_set(1);
		move(LINES - 1, (int)strlen(line) < COLS - 1 ? (int)strlen(line) : COLS - 1);
	} else {
		curs_set(0);
	}
}

/* What `print` writes for `f`, as a string to free(); NULL if out of memory. */
static char *print_to_memory(int (*print)(FILE *out, const struct shoal__top_frame *f),
			     const struct shoal__top_frame *f)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	int ret;

	if (out == NULL)
		return NULL;
	ret = print(out, f);
	if (fclose(out) != 0 || ret < 0) {
		free(text);
		return NULL;
	}
	return text;
}

static int print_title(FILE *out, const struct shoal__top_frame *f)
{
	shoal__top_print_title(out, f);
	return 0;
}

/* The show in force is the screen's (there is one screen). */
static int print_groups_title(FILE *out, const struct shoal__top_frame *f)
{
	shoal__top_print_groups_title(out, f, the_screen.show);
	return 0;
}

static void draw_groups(struct shoal__top_screen *s, const struct shoal__top_frame *f, int y)
{
	char *text = print_to_memory(shoal__top_print_groups, f);
	const char *row;
	uint32_t fit;

	if (text == NULL) {
		put(y, "(out of memory)", A_NORMAL);
		return;
	}
	put(y, text, A_REVERSE);
	/* The head stays; the rows below it scroll. */
	fit = LINES - 1 > y + 1 ? (uint32_t)(LINES - 1 - (y + 1)) : 0;
	s->rows_fit = fit;
	if (s->scroll + fit > f->n_shown)
		s->scroll = f->n_shown > fit ? f->n_shown - fit : 0;
	row = strchr(text, '\n');
	for (uint32_t i = 0; row != NULL && i < s->scroll; i++)
		row = strchr(row + 1, '\n');
	if (row != NULL)
		put_lines(y + 1, row + 1, A_NORMAL);
	free(text);
}

void shoal__top_screen_draw(struct shoal__top_screen *s, struct shoal__top_frame *f)
{
	char line[512], *text;
	int y;

	erase();
	if (s->help) {
		draw_help(s);
	} else if (f == NULL) {
		snprintf(line, sizeof(line), "shoal top: system %s: the first rates in %u ms "
			 "(h: keys, q: quit)", s->system, s->interval_ms);
		put(0, line, A_BOLD);
	} else {
		text = print_to_memory(print_title, f);
		if (text != NULL)
			put(0, text, A_BOLD);
		free(text);
		put(1, "h: keys, q: quit, r n d b f: order, /: filter", A_NORMAL);
		put(3, "Dispatchers (busiest first)", A_BOLD);
		text = print_to_memory(shoal__top_print_dispatchers, f);
		y = text != NULL ? put_lines(4, text, A_REVERSE) : 4;
		free(text);
		if (f->v->corrupt) {
			snprintf(line, sizeof(line), "registry CORRUPT: %s", f->v->reason);
			put(y++, line, A_NORMAL);
		}
		text = print_to_memory(shoal__top_print_links, f);
		if (text != NULL && text[0] != '\0') {
			put(y + 1, "Links to other hosts", A_BOLD);
			y = put_lines(y + 2, text, A_REVERSE);
		}
		free(text);
		text = print_to_memory(print_groups_title, f);
		if (text != NULL)
			put(y + 1, text, A_BOLD);
		free(text);
		draw_groups(s, f, y + 2);
	}
	draw_bottom(s, f);
	refresh();
}

void shoal__top_screen_note(struct shoal__top_screen *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->note, sizeof(s->note), fmt, ap);
	va_end(ap);
}

/* A key while the filter is typed. */
static void typing_key(struct shoal__top_screen *s, int ch)
{
	char why[128];

	switch (ch) {
	case KEY_ESC:
		shoal__top_set_filter(s->show, "", why, sizeof(why));
		s->typing = false;
		break;
	case '\n':
	case '\r':
	case KEY_ENTER:
		if (shoal__top_set_filter(s->show, s->input, why, sizeof(why)) < 0)
			snprintf(s->note, sizeof(s->note), "filter not applied: %s", why);
		s->typing = false;
		s->scroll = 0;
		break;
	case KEY_BACKSPACE:
	case 127:
	case '\b':
		if (s->input_len > 0)
			s->input[--s->input_len] = '\0';
		break;
	case KEY_CTRL_U:
		s->input_len = 0;
		s->input[0] = '\0';
		break;
	default:
		/* Printable ASCII only: what the name column shows (escaped). */
		if (ch >= 0x20 && ch < 0x7f && s->input_len + 1 < sizeof(s->input)) {
			s->input[s->input_len++] = (char)ch;
			s->input[s->input_len] = '\0';
		}
		break;
	}
}

static void scroll_by(struct shoal__top_screen *s, long delta)
{
	long to = (long)s->scroll + delta;

	/* The draw pulls a scroll past the end back. */
	s->scroll = to < 0 ? 0 : (uint32_t)to;
}

/* A key on the tables. Returns false for quit. */
static bool table_key(struct shoal__top_screen *s, int ch)
{
	const struct shoal__top_sort *sort;
	char why[128];
	long page = s->rows_fit > 1 ? (long)s->rows_fit - 1 : 1;

	switch (ch) {
	case 'q':
	case 'Q':
		return false;
	case 'h':
	case '?':
		s->help = true;
		break;
	case '/':
		snprintf(s->input, sizeof(s->input), "%s", s->show->filter);
		s->input_len = strlen(s->input);
		s->typing = true;
		break;
	case KEY_ESC:
		shoal__top_set_filter(s->show, "", why, sizeof(why));
		s->scroll = 0;
		break;
	case KEY_UP:
		scroll_by(s, -1);
		break;
	case KEY_DOWN:
		scroll_by(s, 1);
		break;
	case KEY_PPAGE:
		scroll_by(s, -page);
		break;
	case KEY_NPAGE:
		scroll_by(s, page);
		break;
	case KEY_HOME:
		s->scroll = 0;
		break;
	case KEY_END:
		s->scroll = UINT32_MAX;
		break;
	default:
		sort = shoal__top_sort_keyed(ch);
		if (sort != NULL) {
			s->show->sort = sort;
			s->scroll = 0;
		} else if (ch >= 0x20 && ch < 0x7f) {
			snprintf(s->note, sizeof(s->note), "no key '%c': h shows the keys", ch);
		}
		break;
	}
	return true;
}

bool shoal__top_screen_keys(struct shoal__top_screen *s, struct shoal__top_frame *f)
{
	bool redraw = false;
	int ch;

	while ((ch = getch()) != ERR) {
		redraw = true;
		if (ch == KEY_RESIZE)
			continue;
		s->note[0] = '\0';
		if (s->typing)
			typing_key(s, ch);
		else if (s->help && ch != 'q' && ch != 'Q')
			s->help = false;
		else if (!table_key(s, ch))
			return false;
	}
	if (redraw) {
		if (f != NULL)
			shoal__top_select(f, s->show);
		shoal__top_screen_draw(s, f);
	}
	return true;
}
