/* SPDX-License-Identifier: MIT */
/*
 * Names of a system's segments and socket, and attaching its registry with
 * the layout checks every reader (groups, tools) must apply.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/layout.h"
#include "shm/util.h"

int shoal__check_name(const char *name, const char *what, struct shoal_err *err)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n >= SHOAL_NAME_MAX)
		return shoal__fail(err, -EINVAL, "%s name must have 1 to %d characters", what,
				   SHOAL_NAME_MAX - 1);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return shoal__fail(err, -EINVAL, "%s name '%s' has a character outside "
					   "[A-Za-z0-9_-]", what, name);
	}
	return 0;
}

static int name_fmt(char *buf, const char *fmt, const char *a, const char *b)
{
	int n = snprintf(buf, SHOAL_SEG_NAME_MAX, fmt, a, b);

	return n > 0 && n < (int)SHOAL_SEG_NAME_MAX ? 0 : -ENAMETOOLONG;
}

int shoal__name_registry(char *buf, const char *system)
{
	return name_fmt(buf, "shoal.%s.reg%s", system, "");
}

int shoal__name_bell(char *buf, const char *system)
{
	return name_fmt(buf, "shoal.%s.bell%s", system, "");
}

int shoal__name_mailbox(char *buf, const char *system, const char *group)
{
	return name_fmt(buf, "shoal.%s.g.%s", system, group);
}

int shoal__path_socket(char *buf, size_t len, const char *system)
{
	char dir[256];
	int n;

	/* Beside the segments, in the same private directory. */
	if (shoal_seg_dir_path(dir, sizeof(dir)) < 0)
		return -ENAMETOOLONG;
	n = snprintf(buf, len, "%s/shoal.%s.ctl", dir, system);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int shoal__registry_attach(struct shoal__registry *reg, const char *system, uint32_t flags,
			   struct shoal_err *err)
{
	char name[SHOAL_SEG_NAME_MAX];
	struct shoal_seg_region r;
	struct shoal__reg_hdr *h;
	int ret;

	memset(reg, 0, sizeof(*reg));
	ret = shoal__check_name(system, "system", err);
	if (ret < 0)
		return ret;
	shoal__name_registry(name, system);
	ret = shoal_seg_attach(&reg->seg, name, flags, err);
	if (ret < 0)
		return ret;
	ret = shoal_seg_find(&reg->seg, SHOAL__KIND_REGISTRY, "registry", &r);
	h = ret < 0 ? NULL : shoal_seg_ptr(&reg->seg, r.off, sizeof(*h), 64);
	if (h == NULL) {
		ret = shoal__fail(err, -EUCLEAN, "%s has no valid registry region", name);
		goto fail;
	}
	if (h->magic != SHOAL__REG_MAGIC) {
		ret = shoal__fail(err, -EUCLEAN, "%s: bad registry header", name);
		goto fail;
	}
	/* Before the size: another version's registry may be of another size. */
	if (h->version != SHOAL__LAYOUT_VERSION) {
		ret = shoal__fail(err, -EPROTONOSUPPORT, "%s has registry layout version %u; this "
				  "build reads version %u (a system of another Shoal build: "
				  "inspect or stop it with that build)", name, h->version,
				  SHOAL__LAYOUT_VERSION);
		goto fail;
	}
	if (r.len < SHOAL__REG_SIZE ||
	    shoal_seg_ptr(&reg->seg, r.off, SHOAL__REG_SIZE, 64) == NULL) {
		ret = shoal__fail(err, -EUCLEAN, "%s has no valid registry region", name);
		goto fail;
	}
	if (h->max_groups != SHOAL_MAX_GROUPS || h->max_types != SHOAL__MAX_TYPES ||
	    h->types_off != sizeof(*h) ||
	    h->groups_off != sizeof(*h) + SHOAL__MAX_TYPES * sizeof(struct shoal__reg_type) ||
	    h->cpus_off != SHOAL__REG_CPUS_OFF) {
		ret = shoal__fail(err, -EUCLEAN, "%s: registry tables at unexpected offsets", name);
		goto fail;
	}
	/* The table's room is fixed (SHOAL__REG_SIZE): a count in range keeps
	 * every set inside the region. */
	if (h->cpu_words == 0 || h->cpu_words > SHOAL__CPU_WORDS_MAX) {
		ret = shoal__fail(err, -EUCLEAN, "%s: CPU sets of %u words (1 to %u)", name,
				  h->cpu_words, SHOAL__CPU_WORDS_MAX);
		goto fail;
	}
	reg->hdr = h;
	reg->types = (struct shoal__reg_type *)((char *)h + h->types_off);
	reg->groups = (struct shoal__reg_group *)((char *)h + h->groups_off);
	reg->cpus = (uint64_t *)((char *)h + h->cpus_off);
	return 0;
fail:
	shoal_seg_detach(&reg->seg);
	return ret;
}

struct shoal__mbx_hdr *shoal__mailbox_hdr(const struct shoal_seg *seg)
{
	struct shoal_seg_region r;
	struct shoal__mbx_hdr *m;

	if (shoal_seg_find(seg, SHOAL__KIND_MAILBOX, "mailbox", &r) < 0 || r.len < sizeof(*m))
		return NULL;
	m = shoal_seg_ptr(seg, r.off, sizeof(*m), 64);
	if (m == NULL || m->magic != SHOAL__MBX_MAGIC || m->version != SHOAL__LAYOUT_VERSION ||
	    m->n_workers == 0 || m->n_workers > SHOAL_MAX_WORKERS)
		return NULL;
	return m;
}
