/* SPDX-License-Identifier: MIT */
/*
 * `shoal top`'s full-screen interface on a terminal (ncurses): it draws each
 * refresh (tools/top.h) with every line cut to the window's width and the
 * heads kept at the top, and answers keys between refreshes: q quits, h or ?
 * shows the keys, r n d b f choose the groups' order, / types a filter on
 * group names, Esc clears it, the arrows and pages scroll the groups, and a
 * resize redraws.
 *
 * One screen at a time, used by one thread. It never reads shared memory:
 * what it draws comes from the frame the caller made.
 */
#ifndef SHOAL_TOOLS_TOP_SCREEN_H
#define SHOAL_TOOLS_TOP_SCREEN_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/top.h"

struct shoal__top_screen;

/*
 * Take over the terminal on standard input and output and draw a first
 * screen saying a refresh comes in `interval_ms`. The keys change `show`
 * (sort and filter), which must outlive the screen. Returns NULL, changing
 * nothing, when either is not a terminal or curses cannot drive it (an
 * unknown $TERM): the caller prints plain text then.
 */
struct shoal__top_screen *shoal__top_screen_open(struct shoal__top_show *show,
						 const char *system, uint32_t interval_ms);

/* Give the terminal back as it was before. NULL, or a closed screen: nothing. */
void shoal__top_screen_close(struct shoal__top_screen *s);

/* Draw frame `f` (shoal__top_select() done); NULL: no refresh yet. */
void shoal__top_screen_draw(struct shoal__top_screen *s, struct shoal__top_frame *f);

/* Say something on the last line until the next key (a printf format). */
__attribute__((format(printf, 2, 3)))
void shoal__top_screen_note(struct shoal__top_screen *s, const char *fmt, ...);

/*
 * Handle every key waiting on standard input, without blocking, and redraw
 * `f` (NULL: no refresh yet) if they changed what is shown, selecting its
 * groups again. Returns false when the user asked to quit.
 */
bool shoal__top_screen_keys(struct shoal__top_screen *s, struct shoal__top_frame *f);

#endif
