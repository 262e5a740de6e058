/* SPDX-License-Identifier: MIT */
/*
 * Link addresses (addr.h): the config parser and the link layer read them
 * with the same code.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/bridge/addr.h"
#include "shm/util.h"

int shoal__addr_parse(const char *s, struct sockaddr_storage *out, socklen_t *len,
		      struct shoal_err *err)
{
	const char *colon = s ? strrchr(s, ':') : NULL, *h = s;
	char host[SHOAL__ADDR_MAX];
	char *end;
	unsigned long port;
	size_t hlen;

	if (!colon)
		return shoal__fail(err, -EINVAL, "address '%s' is not HOST:PORT", s ? s : "");
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	port = strtoul(colon + 1, &end, 10);
	if (hlen == 0 || hlen >= sizeof(host) || *end != '\0' || colon[1] < '0' ||
	    colon[1] > '9' || port > 65535)
		return shoal__fail(err, -EINVAL, "address '%s' is not HOST:PORT", s);
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)out)->sin_addr) == 1) {
		struct sockaddr_in *a = (struct sockaddr_in *)out;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		*len = sizeof(*a);
	} else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)out)->sin6_addr) == 1) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a);
	} else {
		return shoal__fail(err, -EINVAL, "address '%s': '%s' is not a numeric IP", s, host);
	}
	return 0;
}

unsigned shoal__addr_port(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
	return ntohs(((const struct sockaddr_in *)a)->sin_port);
}

bool shoal__addr_is_any(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
}
