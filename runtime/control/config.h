/* SPDX-License-Identifier: MIT */
/*
 * System configuration files (YAML), as `shoal run` reads them. Private to
 * the runtime and the tools. docs/config.md describes the format.
 *
 * Loading is all or nothing: a file is parsed (libyaml), mapped onto these
 * structs and checked as a whole (names, references between sections,
 * programs that exist and can be executed) before anything starts. The first
 * problem is reported as "file:line:column: what is wrong"; unknown keys are
 * errors.
 */
#ifndef SHOAL_RUNTIME_CONFIG_H
#define SHOAL_RUNTIME_CONFIG_H

#include <stdint.h>
#include <sys/types.h>

#include <shoal/api.h>
#include <shoal/filter.h>
#include <shoal/message.h>

enum shoal__restart { SHOAL__RESTART_NEVER, SHOAL__RESTART_ON_FAILURE, SHOAL__RESTART_ALWAYS };
enum shoal__on_failure { SHOAL__FAIL_CONTINUE, SHOAL__FAIL_STOP };

struct shoal__cfg_type {
	uint32_t id;
	uint32_t max_size;
	char name[SHOAL_NAME_MAX];
};

struct shoal__cfg_route {
	struct shoal_filter f;        /* f.group is the index in config->groups */
	unsigned line, col;
};

struct shoal__cfg_group {
	char name[SHOAL_NAME_MAX];
	char *program;                /* absolute, or resolved against the file's folder */
	char **argv;                  /* argv[0] is the program; NULL-terminated */
	char **env;                   /* "KEY=VALUE" entries; NULL-terminated */
	uint16_t workers;
	uint16_t actors;
	int node;                     /* -1: the router places it */
	uint64_t cpus;                /* CPU mask for the process; 0: no pinning */
	uint32_t mailbox;             /* inbound ring bytes; 0: the router's default */
	uint8_t overflow;             /* SHOAL_OVERFLOW_* */
	uint8_t restart;              /* enum shoal__restart */
	uint8_t on_failure;           /* enum shoal__on_failure */
	int32_t max_retries;          /* -1: unlimited */
	uint32_t backoff_ms;          /* first restart delay, doubled each time */
	uint32_t max_backoff_ms;
	int32_t stop_order;           /* lower stops first */
	uint32_t stop_timeout_ms;     /* drain time before SIGKILL */
	unsigned line;
};

struct shoal__config {
	char *path;
	char system[SHOAL_NAME_MAX];
	uint64_t spin_ns;             /* 0: default */
	uint64_t wake_deadline_ns;    /* 0: default */
	mode_t mode;                  /* 0: 0600 */
	uint32_t uplink_capacity, inbound_capacity, direct_capacity;
	struct shoal__cfg_type *types;
	uint32_t n_types;
	struct shoal__cfg_group *groups;
	uint32_t n_groups;
	struct shoal__cfg_route *routes;
	uint32_t n_routes;
};

/*
 * Load and check `path`. Returns 0 and a config to free with
 * shoal__config_free(), or a negative errno with "file:line:col: reason" in
 * *err (-ENOENT/-EACCES: cannot read the file; -EINVAL: invalid content).
 */
int shoal__config_load(const char *path, struct shoal__config **out, struct shoal_err *err);

/* Same, from a buffer; `name` is used in messages and to resolve programs. */
int shoal__config_parse(const char *name, const char *text, size_t len,
			struct shoal__config **out, struct shoal_err *err);

/* Flags of the _flags forms. NO_PROGRAMS: keep each group's program as
 * written, without looking for it (for `shoal types`, which runs none). */
#define SHOAL__CONFIG_NO_PROGRAMS 1u

int shoal__config_load_flags(const char *path, unsigned flags, struct shoal__config **out,
			     struct shoal_err *err);
int shoal__config_parse_flags(const char *name, const char *text, size_t len, unsigned flags,
			      struct shoal__config **out, struct shoal_err *err);

void shoal__config_free(struct shoal__config *c);

/*
 * Bytes of shared memory the router creates for `c`, each segment rounded up
 * to `page` (0: 4096): the registry and doorbells and one mailbox per group,
 * sized as runtime/control/registry.c sizes them. With `running` (a reload),
 * only the mailboxes of groups that `running` does not have.
 */
uint64_t shoal__config_shm_bytes(const struct shoal__config *c,
				 const struct shoal__config *running, uint64_t page);

struct shoal__config_space {
	const char *dir;              /* $SHOAL_SHM_DIR, or /dev/shm */
	uint64_t need;                /* shoal__config_shm_bytes() at the dir's page size */
	uint64_t avail;               /* free bytes there (statvfs f_bavail) */
};

/*
 * Compare what `c` needs (see shoal__config_shm_bytes()) with the free space
 * of the shared-memory folder. Returns 0 with *out filled, -ENOSPC with
 * *out filled and the reason in *err, or -errno if statvfs() fails. Reads
 * the environment and the filesystem; changes nothing.
 */
int shoal__config_check_space(const struct shoal__config *c, const struct shoal__config *running,
			      struct shoal__config_space *out, struct shoal_err *err);

/* Index of group `name`, or -1. */
int shoal__config_group(const struct shoal__config *c, const char *name);

/* Do two group entries describe the same process (so a reload keeps it)? */
int shoal__config_group_same(const struct shoal__cfg_group *a, const struct shoal__cfg_group *b);

#endif
