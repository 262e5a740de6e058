/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' hook into the router: start one whose dispatchers match
 * messages with a baseline instead of the index, so that bench/ compares
 * the index with the plain flat scan and with elfo's old nested chain in
 * the same dispatcher. Not in the public headers and not exported from the
 * shared library: programs get the index, always.
 *
 * The baseline matchers stay in runtime/route/ beside the index: choosing
 * one is a branch the matcher takes anyway per message, where a hook that
 * bench/ would fill in (a function pointer) would put an indirect call on
 * every routed message of every program for the benchmark's sake.
 */
#ifndef SHOAL_RUNTIME_CONTROL_BASELINE_H
#define SHOAL_RUNTIME_CONTROL_BASELINE_H

#include <shoal/router.h>

#include "runtime/route/route.h"

/* shoal_router_start() with `route_mode` one of SHOAL__ROUTE_* (route.h). */
int shoal__router_start_mode(struct shoal_router **out, const struct shoal_router_opts *opts,
			     int route_mode, struct shoal_err *err);

#endif
