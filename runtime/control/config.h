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
#include <string.h>
#include <sys/types.h>

#include <shoal/api.h>
#include <shoal/filter.h>
#include <shoal/message.h>

#include "runtime/bridge/addr.h"

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

struct bitmask;   /* libnuma's CPU set (<numa.h>) */

struct shoal__cfg_group {
	char name[SHOAL_NAME_MAX];
	char *program;                /* absolute, or resolved against the file's folder */
	char **argv;                  /* argv[0] is the program; NULL-terminated */
	char **env;                   /* "KEY=VALUE" entries; NULL-terminated */
	uint16_t workers;
	uint16_t actors;
	int node;                     /* -1: the router places it */
	struct bitmask *cpus;         /* libnuma CPU set for the process; NULL: no pinning */
	unsigned cpus_line, cpus_col; /* where the file gives it */
	uint32_t mailbox;             /* inbound ring bytes; 0: the router's default */
	uint8_t overflow;             /* SHOAL_OVERFLOW_* */
	uint8_t restart;              /* enum shoal__restart */
	uint8_t on_failure;           /* enum shoal__on_failure */
	int32_t max_retries;          /* -1: unlimited */
	uint32_t backoff_ms;          /* first restart delay, doubled each time */
	uint32_t max_backoff_ms;
	int32_t stop_order;           /* lower stops first */
	uint32_t stop_timeout_ms;     /* drain time before SIGKILL */
	int host;                     /* index in config->hosts; -1: the file lists none */
	unsigned line;
};

/* The most hosts a file lists: each bridge keeps a link to every other. */
#define SHOAL__MAX_HOSTS 64

/* The name of the built-in group that runs a host's bridge (docs/hosts.md);
 * a file that lists hosts cannot give it to a group of its own. */
#define SHOAL__BRIDGE_GROUP "bridge"

struct shoal__cfg_host {
	char name[SHOAL_NAME_MAX];
	char listen[SHOAL__ADDR_MAX]; /* where its bridge listens (shoal__addr_parse()) */
	char reach[SHOAL__ADDR_MAX];  /* where the other hosts reach it: `listen` if not given */
	unsigned line;
};

/* hosts.link: the options of every link between bridges; a 0 field takes
 * the link layer's default (runtime/bridge/link.h), except the window:
 * SHOAL__CFG_LINK_WINDOW, which the bridge passes and the types must fit,
 * and the spin: the bridge's own (runtime/bridge/bridge.c, serve()), set
 * to SHOAL__CFG_LINK_SPIN_NS when not given, 0 being no spin. */
#define SHOAL__CFG_LINK_WINDOW (UINT32_C(1) << 20)
#define SHOAL__CFG_LINK_SPIN_NS (200 * UINT64_C(1000))

struct shoal__cfg_link {
	uint32_t window;              /* bytes */
	uint32_t flush_bytes;
	uint64_t flush_ns, keepalive_ns, dead_ns, backoff_ns, max_backoff_ns;
	uint64_t spin_ns;             /* looks after a turn with work, before a sleep */
};

struct shoal__config {
	char *path;
	char system[SHOAL_NAME_MAX];
	uint64_t spin_ns;             /* 0: default */
	uint64_t yield_ns;            /* 0: none (router.yield) */
	uint64_t wake_deadline_ns;    /* 0: default */
	mode_t mode;                  /* 0: 0600 */
	int stream;                   /* SHOAL_STREAM_* (router.stream) */
	uint32_t uplink_capacity, inbound_capacity, direct_capacity;
	struct shoal__cfg_type *types;
	uint32_t n_types;
	struct shoal__cfg_group *groups;
	uint32_t n_groups;
	struct shoal__cfg_route *routes;
	uint32_t n_routes;
	struct shoal__cfg_host *hosts;   /* NULL: no `hosts:`, the system runs on one host */
	uint32_t n_hosts;
	uint64_t down_after_ns;          /* hosts.down_after (10 s when not given) */
	struct shoal__cfg_link link;
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
 * sized as runtime/control/registry.c sizes them, and for a file with other
 * hosts the bridge's, if `c` does not list it yet. With `running` (a
 * reload), only the mailboxes of groups that `running` does not have.
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

/* Index of host `name` in c->hosts, or -1. */
int shoal__config_host(const struct shoal__config *c, const char *name);

/*
 * The host `name` (`shoal run --host`) of `c`, in *host: its index, or -1
 * for a file that lists no hosts and no name. Returns 0, or -ENXIO with the
 * reason in *err: a name the file does not list, a name for a file that
 * lists none, or no name for a file that lists hosts.
 */
int shoal__config_this_host(const struct shoal__config *c, const char *name, int *host,
			    struct shoal_err *err);

/*
 * The hosts whose bridges connect to host `host`'s (docs/hosts.md: of two
 * hosts, the one whose name sorts first connects): those whose names sort
 * before its own. Its bridge listens for each of them.
 */
static inline uint32_t shoal__config_connectors(const struct shoal__config *c, int host)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->n_hosts; i++)
		n += strcmp(c->hosts[i].name, c->hosts[host].name) < 0;
	return n;
}

/* Does host `host` (shoal__config_this_host()) run group `i`? */
static inline int shoal__config_runs(const struct shoal__config *c, int host, uint32_t i)
{
	return host < 0 || c->groups[i].host == host;
}

/*
 * Check that this machine has every CPU the groups of host `host`
 * (shoal__config_this_host()) name in `cpus:`: the file itself may name any
 * CPU below SHOAL__CPUS_MAX. Returns 0, or -EINVAL with "file:line:col:
 * reason" in *err. Reads sysconf only.
 */
int shoal__config_check_cpus(const struct shoal__config *c, int host, struct shoal_err *err);

/* Do two group entries describe the same process (so a reload keeps it)? */
int shoal__config_group_same(const struct shoal__cfg_group *a, const struct shoal__cfg_group *b);

#endif
