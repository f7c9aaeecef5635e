/* cgroup.h - the memory cgroup gnnlaunch runs in: the limit that applies
 * to it, how much it used and how often the out-of-memory killer struck
 * in it (docs/architecture.md, "Memory").
 *
 * Which cgroup. /proc/self/cgroup names the launcher's cgroup per
 * hierarchy. A v1 line whose controllers include "memory" wins (hybrid
 * hosts keep the memory controller on v1): its directory is
 * ROOT/memory/PATH. Otherwise the v2 line "0::PATH" gives ROOT/PATH (or
 * ROOT/unified/PATH on a hybrid host). When that directory does not exist
 * (a container that mounts its own cgroup as the root, without a cgroup
 * namespace) the mount's root directory stands for it. ROOT is
 * /sys/fs/cgroup; the test hooks SLUICE_CGROUP_ROOT and
 * SLUICE_PROC_SELF_CGROUP replace it and /proc/self/cgroup
 * (docs/reliability.md, "Test hooks").
 *
 * The limit is the smallest memory.max (v2; "max" is none) or
 * memory.limit_in_bytes (v1; values of 2^62 and more are none) of that
 * cgroup and of every ancestor up to the mount's root, since an ancestor's
 * limit binds its descendants. The OOM count is oom_kill of v2
 * memory.events (which counts the cgroup's descendants too) or of v1
 * memory.oom_control (kernel 4.13 on); usage is v2 memory.peak (kernel
 * 5.19 on) else memory.current, or v1 memory.max_usage_in_bytes.
 *
 * Nothing here blocks beyond reading small files under ROOT and /proc. */
#ifndef SLUICE_LAUNCHER_CGROUP_H
#define SLUICE_LAUNCHER_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CGROUP_NONE UINT64_MAX /* no limit, or a count that could not be read */

struct cgroup_mem {
    int version;                  /* 2 or 1; 0: no memory cgroup found (limit CGROUP_NONE) */
    char dir[PATH_MAX];           /* the launcher's own memory cgroup, a directory under ROOT */
    char name[PATH_MAX];          /* its path as /proc/self/cgroup names it ("/a/b") */
    uint64_t limit;               /* smallest limit of it and its ancestors, bytes, or CGROUP_NONE */
    char limit_name[PATH_MAX];    /* the cgroup ("/a") whose limit that is, "" without one */
    uint64_t oom_kills_start;     /* oom_kill when cgroup_mem_read ran, or CGROUP_NONE */
};

/* Finds the launcher's memory cgroup and reads its limit and OOM count
 * (the environment's test hooks apply). No memory cgroup is not an error
 * (version 0). 0, or -errno with a message when /proc/self/cgroup or a
 * limit file cannot be read or parsed; g is then version 0. */
int cgroup_mem_read(struct cgroup_mem *g, char *err, size_t errlen);

/* The same with ROOT and the /proc/self/cgroup file given (tests). */
int cgroup_mem_read_at(struct cgroup_mem *g, const char *root, const char *proc_self_cgroup, char *err,
                       size_t errlen);

/* "memory.max" or "memory.limit_in_bytes": the file the limit is in. */
const char *cgroup_mem_limit_file(const struct cgroup_mem *g);

/* The OOM kills counted in g's cgroup now, or CGROUP_NONE. */
uint64_t cgroup_mem_oom_kills(const struct cgroup_mem *g);

/* The most the cgroup has used, in bytes, and the file it came from
 * (*what: "memory.peak", "memory.current", "memory.max_usage_in_bytes");
 * CGROUP_NONE when unknown. */
uint64_t cgroup_mem_usage(const struct cgroup_mem *g, const char **what);

#endif
