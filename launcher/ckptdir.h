/* ckptdir.h - the checkpoint directory of a run (issue 17, item 6;
 * docs/checkpoints.md, "Runs and the checkpoint directory"): a lock held
 * for the run's life, the run identity every checkpoint records, and what
 * a fresh start or a --resume does with the checkpoints already there.
 *
 * Protocol. The launcher (node 0 of a multi-node run) opens
 * <dir>/.lock, takes flock(LOCK_EX | LOCK_NB) on it and writes its pid
 * there; the descriptor is close-on-exec, so no stage holds it, and the
 * kernel drops the lock when the launcher ends however it ends. Everything
 * below happens under the lock, before any stage starts; while it is held
 * only this run's gnn-trainer (global rank 0) writes into the directory.
 *
 * Run identity: config_run_identity (core/config.h) of the effective
 * configuration and the dataset's identity. gnn-trainer stores it in each
 * checkpoint as `run` (16 hex digits) with `run_config`, the keys it was
 * computed from (config_run_text), so that a refusal can list them. */
#ifndef SLUICE_LAUNCHER_CKPTDIR_H
#define SLUICE_LAUNCHER_CKPTDIR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ckptdir {
    char dir[PATH_MAX]; /* absolute */
    int lock_fd;        /* -1: not locked */
};

/* An unlocked directory (lock_fd -1). */
void ckptdir_init(struct ckptdir *c);

/* Creates dir (and its parents) when missing, then takes the lock. 0;
 * -EWOULDBLOCK with a message naming the other run's pid when another run
 * holds it; -errno otherwise. c->lock_fd is -1 until it succeeds. */
int ckptdir_lock(struct ckptdir *c, const char *dir, char *err, size_t errlen);

/* Moves every checkpoint of the directory (epoch-*.safetensors, the
 * partial files of dead writers, and the best/latest pointers) into a new subdirectory old-<local time,
 * YYYYmmdd-HHMMSS>[-K], each with one rename(2); the subdirectory is
 * named `.old-....partial` until all are in. Writes that name (relative
 * to dir) into moved (may be NULL) and returns how many checkpoint files
 * moved, the pointers not counted (0 with nothing to move: nothing
 * created), or -errno with a message. */
int ckptdir_move_aside(struct ckptdir *c, char *moved, size_t len, char *err, size_t errlen);

/* --resume: checks that checkpoint `path` belongs to the run of identity
 * `run` and keys `run_text` (config_run_text): 0 when it does; -EINVAL with
 * a message listing the differing keys ("model.hidden: 32 -> 64"), or
 * saying that the checkpoint predates run identities, when it does not. */
int ckptdir_check_run(const char *path, uint64_t run, const char *run_text, char *err, size_t errlen);

/* --resume-from FILE: copies FILE into the directory as
 * epoch-NNNNNN.safetensors (N = its `epoch`), through a partial file and a
 * rename, after moving the directory's checkpoints aside (ckptdir_move_aside;
 * moved as there); *epoch = N. FILE must read back as a Sluice
 * checkpoint. 0 or -errno with a message. */
int ckptdir_adopt(struct ckptdir *c, const char *file, uint32_t *epoch, char *moved, size_t len, char *err,
                  size_t errlen);

/* The pointers a run keeps beside its checkpoints (docs/checkpoints.md):
 * best.safetensors (the epoch of the best train.early_stop_metric) and
 * latest.safetensors (the newest epoch printed), relative symbolic links
 * to epoch-NNNNNN.safetensors. */
#define CKPTDIR_BEST "best.safetensors"
#define CKPTDIR_LATEST "latest.safetensors"

/* Points dir/name at epoch's checkpoint: a symbolic link made under a
 * temporary name and renamed over the old one, so a reader sees the old
 * link or the new one, never none. 0 or -errno with a message (the
 * checkpoint missing: -ENOENT). */
int ckptdir_point(const char *dir, const char *name, uint32_t epoch, char *err, size_t errlen);

/* After an early stop at epoch `last` (the last one printed): removes
 * every epoch-N.safetensors of dir with N > last, which trainers that ran
 * ahead of the launcher's decision wrote - never evaluated, never
 * printed - so that --resume continues from what the run reported (and
 * latest.safetensors names). The number removed, or -errno. */
int ckptdir_drop_after(const char *dir, uint32_t last, char *err, size_t errlen);

/* train.keep_last: removes every epoch-N.safetensors of dir with N <=
 * newest - keep, except N = spare (the best; 0: not known to the caller,
 * then the epoch dir's best.safetensors links to, if any, is spared). The
 * number removed, or -errno with a message. */
int ckptdir_prune(const char *dir, uint32_t newest, uint32_t keep, uint32_t spare, char *err, size_t errlen);

/* Drops the lock (the file stays). Accepts an unlocked c. */
void ckptdir_free(struct ckptdir *c);

#endif
