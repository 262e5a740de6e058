/* SPDX-License-Identifier: MIT */
/*
 * Definitions shared by every public Shoal header: the export marker and the
 * diagnostic buffer that calls which validate outside input fill in.
 */
#ifndef SHOAL_API_H
#define SHOAL_API_H

#include <stddef.h>

#if defined(SHOAL_BUILDING_LIBRARY)
#define SHOAL_API __attribute__((visibility("default")))
#else
#define SHOAL_API
#endif

#define SHOAL_VERSION_MAJOR 0
#define SHOAL_VERSION_MINOR 1

/*
 * A human-readable reason for a failed validation, for tools to print.
 *
 * Calls that take a `struct shoal_err *` fill `msg` when they return a negative
 * errno and leave it untouched otherwise. Passing NULL is always allowed. The
 * errno stays the programmatic answer; the message only adds detail (which
 * field, which value, which limit).
 */
#define SHOAL_ERR_MSG_MAX 256

struct shoal_err {
	char msg[SHOAL_ERR_MSG_MAX];
};

/*
 * Return a static description of a Shoal error code (a negative errno as
 * returned by any Shoal call). Codes with a Shoal-specific meaning (for
 * example -EPROTO for "not a Shoal segment") get that meaning; others fall
 * back to strerror(). Never fails, never returns NULL.
 */
SHOAL_API const char *shoal_strerror(int err);

/*
 * Concurrency table: shoal_strerror() keeps no state; it may run in any
 * number of threads at once ("-") for every code a Shoal call returns, each
 * of which is a static string. Any other code goes to strerror(), which
 * POSIX does not require to be thread-safe: such a call conflicts ("X")
 * with strerror() anywhere in the process.
 *
 *                        shoal_strerror(Shoal code)  shoal_strerror(other)
 *   shoal_strerror(Shoal code)          -                      -
 *   shoal_strerror(other)               -                      X
 *
 * A struct shoal_err is written only by the call it is passed to: give
 * each thread its own.
 */

#endif
