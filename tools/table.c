/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shm/util.h"
#include "tools/table.h"

int shoal__table_init(struct shoal__table *t, const struct shoal__column *cols, unsigned n_cols,
		      unsigned max_rows)
{
	memset(t, 0, sizeof(*t));
	t->cols = cols;
	t->n_cols = n_cols;
	t->max_rows = max_rows;
	/* calloc: cells a row leaves unfilled print as empty. */
	t->cells = calloc((size_t)(max_rows ? max_rows : 1) * n_cols, sizeof(*t->cells));
	return t->cells != NULL ? 0 : -ENOMEM;
}

void shoal__table_row(struct shoal__table *t)
{
	SHOAL_ASSERT(t->n_rows < t->max_rows);
	t->n_rows++;
	t->col = 0;
}

void shoal__table_cell(struct shoal__table *t, const char *fmt, ...)
{
	va_list ap;

	SHOAL_ASSERT(t->n_rows > 0 && t->col < t->n_cols);
	va_start(ap, fmt);
	vsnprintf(t->cells[(size_t)(t->n_rows - 1) * t->n_cols + t->col], SHOAL_TABLE_CELL_MAX,
		  fmt, ap);
	va_end(ap);
	t->col++;
}

static int column_width(const struct shoal__table *t, unsigned c)
{
	size_t w = strlen(t->cols[c].head);

	for (unsigned r = 0; r < t->n_rows; r++) {
		size_t n = strlen(t->cells[(size_t)r * t->n_cols + c]);

		w = n > w ? n : w;
	}
	return (int)w;
}

static void print_line(const struct shoal__table *t, FILE *out, const char *indent,
		       const int *width, const char *(*cell)(const struct shoal__table *t,
							      unsigned r, unsigned c), unsigned r)
{
	fputs(indent, out);
	for (unsigned c = 0; c < t->n_cols; c++) {
		const char *text = cell(t, r, c);
		bool last = c + 1 == t->n_cols;

		if (t->cols[c].align == 'r')
			fprintf(out, "%*s", width[c], text);
		else
			/* No trailing blanks after the last column. */
			fprintf(out, "%-*s", last ? 0 : width[c], text);
		fputs(last ? "\n" : "  ", out);
	}
}

static const char *head_of(const struct shoal__table *t, unsigned r, unsigned c)
{
	(void)r;
	return t->cols[c].head;
}

static const char *cell_of(const struct shoal__table *t, unsigned r, unsigned c)
{
	return t->cells[(size_t)r * t->n_cols + c];
}

void shoal__table_print(const struct shoal__table *t, FILE *out, const char *indent)
{
	int width[32];

	SHOAL_ASSERT(t->n_cols <= sizeof(width) / sizeof(width[0]));
	for (unsigned c = 0; c < t->n_cols; c++)
		width[c] = column_width(t, c);
	print_line(t, out, indent, width, head_of, 0);
	for (unsigned r = 0; r < t->n_rows; r++)
		print_line(t, out, indent, width, cell_of, r);
}

void shoal__table_free(struct shoal__table *t)
{
	free(t->cells);
	t->cells = NULL;
}
