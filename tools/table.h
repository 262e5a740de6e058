/* SPDX-License-Identifier: MIT */
/*
 * Aligned text tables for the tools: fill rows cell by cell with printf-style
 * formats, then print with every column as wide as its widest cell.
 *
 *   struct shoal__table t;
 *   static const struct shoal__column cols[] = { { "ID", 'r' }, { "NAME", 'l' } };
 *
 *   if (shoal__table_init(&t, cols, 2, n_rows) < 0) ...   (-ENOMEM)
 *   shoal__table_row(&t);
 *   shoal__table_cell(&t, "%u", id);
 *   shoal__table_cell(&t, "%s", name);
 *   shoal__table_print(&t, stdout, "  ");
 *   shoal__table_free(&t);
 *
 * Cells hold text already made safe for a terminal: escape names read from
 * shared memory (shoal__fmt_printable()) before handing them in. A cell
 * longer than SHOAL_TABLE_CELL_MAX - 1 bytes is cut short.
 */
#ifndef SHOAL_TOOLS_TABLE_H
#define SHOAL_TOOLS_TABLE_H

#include <stdio.h>

#include "tools/format.h"

/* Room for an escaped 31-character name and some decoration. */
#define SHOAL_TABLE_CELL_MAX (SHOAL_FMT_PRINTABLE_SIZE(32) + 32)

struct shoal__column {
	const char *head;
	char align;          /* 'l' left, 'r' right (numbers) */
};

struct shoal__table {
	const struct shoal__column *cols;
	unsigned n_cols;
	unsigned max_rows;
	unsigned n_rows;
	unsigned col;        /* next cell of the current row */
	char (*cells)[SHOAL_TABLE_CELL_MAX];
};

/* Room for `max_rows` rows. Returns 0 or -ENOMEM. */
int shoal__table_init(struct shoal__table *t, const struct shoal__column *cols, unsigned n_cols,
		      unsigned max_rows);

/* Start a new row (at most max_rows: a caller that counted wrong aborts). */
void shoal__table_row(struct shoal__table *t);

/* Fill the next cell of the current row. */
__attribute__((format(printf, 2, 3)))
void shoal__table_cell(struct shoal__table *t, const char *fmt, ...);

/* Print the heads and the rows, each line starting with `indent`. */
void shoal__table_print(const struct shoal__table *t, FILE *out, const char *indent);

void shoal__table_free(struct shoal__table *t);

#endif
