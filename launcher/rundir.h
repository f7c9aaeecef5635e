/* rundir.h - the private run directory of one gnnlaunch run.
 *
 * Where. Under a base directory private to the user: $XDG_RUNTIME_DIR/sluice
 * when XDG_RUNTIME_DIR is set (an absolute path), else ${TMPDIR:-/tmp}/
 * sluice-<uid>; created with mode 0700 and used only if it is a directory
 * (not a symlink) owned by the user. Without XDG_RUNTIME_DIR, when that
 * name is taken by someone else (any local user can make it first),
 * rundir_base makes ${TMPDIR:-/tmp}/sluice-<uid>-XXXXXX (mkdtemp) instead
 * and records it in $HOME/.cache/sluice/run-base, which rundir_base_find
 * and later launches read first. The run directory is base/<name>, where name
 * is --run-name or the run id; mode 0700.
 *
 * What it holds:
 *     run.toml     state: launcher pid and start time, run id, name, config
 *                  path, output paths, endpoints (rundir_state below)
 *     config.toml  the effective configuration (config_write_toml), the
 *                  one file every stage reads
 *     control      ZeroMQ REP socket (ipc://), bound by the launcher
 *     metrics      ZeroMQ PUB socket (ipc://), bound by the launcher
 *     dataset.stamp the identities of the dataset's files as gnnlaunch
 *                  verified them (core/dataset_verify.h; mode 0600), which
 *                  every trainer compares the files with at each epoch
 *                  boundary
 *
 * Creation is atomic: the files are written into base/.new-<run-id> which
 * is then renamed to base/<name>, so a run directory that has its name
 * always has its run.toml. A name already held by a live launcher (per its
 * run.toml pid and start time) is refused with -EBUSY; the directory of a
 * dead one is removed and the name taken. rundir_reclaim() removes every
 * directory of dead launchers, as shm_run_reclaim() does for segments.
 * Readers (gnnstat) find runs with rundir_base_find(), rundir_list() and
 * rundir_read_info(), which never create or remove anything.
 *
 * Errors: 0 or -errno with a message in err naming the path and what to do. */
#ifndef SLUICE_LAUNCHER_RUNDIR_H
#define SLUICE_LAUNCHER_RUNDIR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "ipc/shm.h"
#include "core/config.h"

#define RUNDIR_NAME_MAX 48    /* bytes of a run name, NUL included */
#define RUNDIR_SOCKET_MAX 107 /* longest socket path (sockaddr_un.sun_path - 1) */
#define RUNDIR_STATE "run.toml"
#define RUNDIR_CONFIG "config.toml"
#define RUNDIR_CONTROL "control"
#define RUNDIR_METRICS "metrics"

/* What run.toml records. Strings may be NULL (left out). */
struct rundir_state {
    const char *run_id;
    const char *name;
    pid_t pid;
    uint64_t pid_start;       /* clock ticks after boot (shm_pid_start_time) */
    const char *config_path;  /* the CONFIG argument, absolute */
    const char *metrics_file; /* --metrics, absolute */
    const char *trace_file;   /* --trace, absolute */
    int ranks;
    bool resume;
};

struct rundir {
    char base[PATH_MAX];
    char path[PATH_MAX]; /* base/<name> once created */
    char name[RUNDIR_NAME_MAX];
    bool created;
};

/* Finds the base directory (above) into out, creating it 0700 and checking
 * it. */
int rundir_base(char *out, size_t len, char *err, size_t errlen);

/* Checks a --run-name: 1..RUNDIR_NAME_MAX-1 characters of [A-Za-z0-9_-]. */
int rundir_name_check(const char *name, char *err, size_t errlen);

/* Removes the run directories under base whose launcher is gone. Returns
 * how many, or -errno if base cannot be read. */
int rundir_reclaim(const char *base);

/* Creates base/<name> (0700) atomically holding run.toml (from st) and
 * config.toml (from c). -EBUSY if a live run holds the name (its pid in
 * the message), -ENAMETOOLONG if the socket paths would not fit
 * RUNDIR_SOCKET_MAX, or another -errno. */
int rundir_create(struct rundir *d, const char *base, const char *name, const struct rundir_state *st,
                  const struct config *c, char *err, size_t errlen);

/* Path of a file in the run directory into out. */
int rundir_file(const struct rundir *d, const char *file, char *out, size_t len);

/* Reads the owner (pid, start time) recorded in dir/run.toml: 0, -ENOENT
 * (no state file) or -EINVAL (unreadable). */
int rundir_read_owner(const char *dir, pid_t *pid, uint64_t *start);

/* Removes the run directory and everything in it. Accepts a rundir never
 * created; idempotent. */
void rundir_remove(struct rundir *d);

/* ---- readers (gnnstat) ---- */

/* A run directory as a reader sees it: what run.toml says, and whether the
 * launcher that wrote it still runs. */
struct rundir_info {
    char path[PATH_MAX];          /* the run directory */
    char run_id[SHM_RUN_ID_MAX];
    char name[RUNDIR_NAME_MAX];   /* the run id when run.toml names none */
    char config[PATH_MAX];        /* the CONFIG argument, or "" */
    char control[PATH_MAX + 8];   /* REP endpoint, ipc://DIR/control */
    char publish[PATH_MAX + 8];   /* PUB endpoint, or "" */
    pid_t pid;                    /* launcher */
    uint64_t pid_start;
    int ranks;                    /* 0 when not recorded */
    time_t started;               /* run.toml's modification time: when the run began */
    bool alive;                   /* the launcher (pid and start time) still runs */
};

/* The base directory's path, as rundir_base, without creating it: 0,
 * -ENOENT (no run was ever started here) or -EPERM (not a private
 * directory of the user: nothing in it is trusted). Never blocks. */
int rundir_base_find(char *out, size_t len, char *err, size_t errlen);

/* Reads dir/run.toml into *info: 0, -ENOENT (no run.toml: not a run
 * directory) or -EINVAL (unreadable, or pid, run_id or control missing),
 * with a message in err. Never blocks. */
int rundir_read_info(const char *dir, struct rundir_info *info, char *err, size_t errlen);

/* The run directories under base (live and stale; entries that are not
 * run directories are skipped), the first max of them into out. Returns
 * how many there are (may exceed max), or -errno if base cannot be read. */
int rundir_list(const char *base, struct rundir_info *out, int max);

#endif
