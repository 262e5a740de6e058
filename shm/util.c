/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include <shoal/api.h>

#include "shm/util.h"

void shoal__abort(const char *file, const char *func, int line, const char *what)
{
	fprintf(stderr, "shoal: internal invariant broken at %s:%d in %s(): %s\n", file, line,
		func, what);
	abort();
}

int shoal__fail(struct shoal_err *err, int code, const char *fmt, ...)
{
	if (err != NULL) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

void *shoal__grow(void *arr, uint32_t *cap, uint32_t n, size_t elem, uint32_t first)
{
	uint32_t c;
	void *a;

	if (n < *cap)
		return arr;
	c = *cap ? 2 * *cap : first;
	a = realloc(arr, (size_t)c * elem);
	if (a != NULL)
		*cap = c;
	return a;
}

const char *shoal_strerror(int err)
{
	switch (-err) {
	case 0:
		return "success";
	case EPROTO:
		return "not a Shoal segment (bad magic)";
	case EPROTONOSUPPORT:
		return "Shoal segment of an unsupported layout version";
	case EBADMSG:
		return "truncated segment";
	case EUCLEAN:
		return "corrupted shared memory";
	default:
		return strerror(-err);
	}
}
