/* SPDX-License-Identifier: MIT */
/* Umbrella header: everything public in Shoal. */
#ifndef SHOAL_H
#define SHOAL_H

#include <shoal/api.h>
#include <shoal/segment.h>
#include <shoal/ring.h>
#include <shoal/doorbell.h>
#include <shoal/numa.h>
#include <shoal/message.h>
#include <shoal/filter.h>
#include <shoal/group.h>
#include <shoal/router.h>

#endif
