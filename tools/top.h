/* SPDX-License-Identifier: MIT */
/*
 * What `shoal top` (tools/cmd_top.c) shows, shared with its full-screen
 * terminal interface (tools/top_screen.c): the rates of one refresh, the
 * sort orders and the group filter, and the tables printed as text. The
 * plain output prints them on stdout; the screen prints them into memory
 * and draws each line cut to the window's width.
 */
#ifndef SHOAL_TOOLS_TOP_H
#define SHOAL_TOOLS_TOP_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/sysview.h"

/* A group's or dispatcher's rates between two views, and what waits in it. */
struct shoal__top_rates {
	uint32_t index;                  /* group id or dispatcher number */
	bool known;                      /* it was in the previous view too */
	double in, out, dropped;         /* per second */
	double busy_pct;                 /* dispatchers only */
	uint64_t queued;                 /* groups: messages in its inbound rings */
	double fill_pct;                 /* groups: its fullest inbound ring; -1 unknown */
	bool have_oldest;                /* groups: oldest_ns is known */
	uint64_t oldest_ns;              /* groups: age of the oldest message waiting */
	bool have_lat;                   /* groups: messages handled since the last view */
	uint64_t p50_ns, p99_ns, p999_ns;   /* groups: their latency, send to handler */
	const char *name;                /* groups: as in the view, unescaped */
};

/* One refresh: the latest view and the rates since the one before. */
struct shoal__top_frame {
	const struct shoal__sys_view *v;
	double secs;
	uint32_t refresh;
	struct shoal__top_rates disp[SHOAL_MAX_NODES];   /* v->n_dispatchers of them */
	struct shoal__top_rates *groups;  /* every declared group, SHOAL_MAX_GROUPS room */
	uint32_t n_groups;
	/* After shoal__top_select(): the groups shown, in order. */
	const struct shoal__top_rates **shown;
	uint32_t n_shown;
};

/* An order of the groups: `key` on the screen, `name` for --sort. */
struct shoal__top_sort {
	char key;
	const char *name;
	const char *title;               /* "busiest first", "by name" ... */
	int (*cmp)(const void *a, const void *b);
};

extern const struct shoal__top_sort shoal__top_sorts[];
extern const unsigned shoal__top_n_sorts;

/* The sort of that --sort name or screen key; NULL if none. */
const struct shoal__top_sort *shoal__top_sort_named(const char *name);
const struct shoal__top_sort *shoal__top_sort_keyed(int key);

/* Which groups are shown, and in which order. */
#define SHOAL_TOP_FILTER_MAX 128
struct shoal__top_show {
	const struct shoal__top_sort *sort;
	bool filtered;
	regex_t re;                      /* compiled from `filter` when filtered */
	char filter[SHOAL_TOP_FILTER_MAX];
};

/*
 * Filter on group names: a POSIX extended regular expression, matched
 * anywhere in the name as shown (escaped), so a plain word matches as a
 * substring; "" clears the filter. Returns 0, or -EINVAL with regerror()'s
 * words in `why` (nothing is changed).
 */
int shoal__top_set_filter(struct shoal__top_show *s, const char *text, char *why,
			  size_t why_len);
void shoal__top_show_free(struct shoal__top_show *s);

/* Fill f->shown with the groups `s` keeps, in its order. */
void shoal__top_select(struct shoal__top_frame *f, const struct shoal__top_show *s);

/* The first line: system, router, group counts, refresh. No newline. */
void shoal__top_print_title(FILE *out, const struct shoal__top_frame *f);

/* "Groups (busiest first)", with the filter and what it keeps. No newline. */
void shoal__top_print_groups_title(FILE *out, const struct shoal__top_frame *f,
				   const struct shoal__top_show *s);

/*
 * The tables, a head line then one line a row, each line starting with two
 * blanks: the dispatchers (busiest first), and the groups of f->shown.
 * Return 0 or -ENOMEM.
 */
int shoal__top_print_dispatchers(FILE *out, const struct shoal__top_frame *f);
int shoal__top_print_groups(FILE *out, const struct shoal__top_frame *f);

#endif
