/* SPDX-License-Identifier: MIT */
/*
 * Link addresses, "IPv4:port" or "[IPv6]:port", numeric only: what a
 * system file's `hosts:` section gives a bridge to listen on and to reach,
 * and what a link is created with. No UCX here, so that the config parser
 * checks an address exactly as the link will read it.
 *
 * Private to the runtime; never installed.
 */
#ifndef SHOAL_RUNTIME_BRIDGE_ADDR_H
#define SHOAL_RUNTIME_BRIDGE_ADDR_H

#include <stdbool.h>
#include <sys/socket.h>

#include <shoal/api.h>

/* The longest address text, NUL included ("[" 45-character IPv6 "]:65535"). */
#define SHOAL__ADDR_MAX 64

/*
 * Parse `s` into *out and *len (the sockaddr's size). Returns 0, or -EINVAL
 * with the reason in *err (may be NULL) and *out undefined: not HOST:PORT,
 * a host that is not a numeric IP, a port above 65535. Port 0 is taken (a
 * caller that needs a fixed port checks it). Never blocks: no name lookup.
 */
int shoal__addr_parse(const char *s, struct sockaddr_storage *out, socklen_t *len,
		      struct shoal_err *err);

/* The port of a parsed address. */
unsigned shoal__addr_port(const struct sockaddr_storage *a);

/* Is a parsed address the wildcard (0.0.0.0 or ::), which nobody can reach? */
bool shoal__addr_is_any(const struct sockaddr_storage *a);

/*
 * Concurrency: the calls keep no state; any may run with any other.
 */

#endif
