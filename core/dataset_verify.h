/* dataset_verify.h - verifying a dataset's contents once per state of its
 * files (docs/format.md, "Verification").
 *
 * A full check (core/dataset_check.h: every byte against the XXH3 that
 * dataset.toml records, and the contents' rules) reads the whole dataset.
 * To pay for it once, a successful check is recorded with the identity of
 * every file as stat() saw it before and after the pass: device, inode,
 * size, modification and change times in nanoseconds (a stamp). The next
 * verification takes a stamp again (a few stat calls) and, when it equals
 * the record, reads nothing. Writing a file changes its modification and
 * change times, replacing it changes its inode, and the change time cannot
 * be set back by a user; so a file whose stamp is unchanged holds the bytes
 * that were checked.
 *
 * Where the record lives: DIR/verified, written atomically (a temporary
 * file renamed into place); where DIR is not writable, in the user's cache,
 * $XDG_CACHE_HOME/sluice/verified-<XXH3 of DIR's real path> (else
 * ~/.cache/sluice/...), directory mode 0700. Both are read; a record that
 * does not parse, or names another dataset identity, is as none. A record
 * can only save a pass, never fail one: at worst the dataset is hashed
 * again.
 *
 * Races. The stamp is taken before the pass and again after it; the record
 * is written only when both agree (nothing changed while reading) and no
 * file was modified in the current tick of the kernel's coarse clock
 * (file times come from it, so a write in the same tick could leave the
 * times unchanged). Such a pass is valid but not recorded: the next
 * verification reads the files again. */
#ifndef SLUICE_DATASET_VERIFY_H
#define SLUICE_DATASET_VERIFY_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/dataset.h"

#define DATASET_VERIFY_RECORD "verified" /* the record's name in the dataset directory */
/* In a run directory: the stamp of the dataset the run was launched with,
 * which gnn-trainer compares the files with during the run. */
#define DATASET_VERIFY_RUN_STAMP "dataset.stamp"
/* Above this many bytes a first verification announces its duration and
 * shows progress (gnnlaunch). */
#define DATASET_VERIFY_ANNOUNCE_BYTES (256ull << 20)
/* The read rate an announced duration assumes (bytes/s); progress then
 * shows the measured one. */
#define DATASET_VERIFY_ASSUMED_BPS 1.0e9

/* One file as stat() sees it. */
struct dataset_verify_ident {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
};

/* Every file of a dataset, and the dataset's identity (dataset_meta_identity,
 * which covers dataset.toml's counts and recorded checksums). */
struct dataset_verify_stamp {
    uint64_t dataset;
    struct dataset_verify_ident f[DATASET_FILES];
};

/* Takes the stamp of the dataset m describes in dir (one stat per file).
 * 0 or -errno naming the file. */
int dataset_verify_stamp_take(const char *dir, const struct dataset_meta *m, struct dataset_verify_stamp *s,
                              char *err, size_t errlen);
/* -1 when a and b are equal; else the first file whose identity differs,
 * or DATASET_FILES when only the dataset identities differ. */
int dataset_verify_stamp_diff(const struct dataset_verify_stamp *a, const struct dataset_verify_stamp *b);
/* What differs about file i (from dataset_verify_stamp_diff) between
 * `was` and `now`, in words ("its modification time changed (...)"). */
void dataset_verify_stamp_explain(const struct dataset_verify_stamp *was, const struct dataset_verify_stamp *now,
                                  int i, char *out, size_t len);
/* Writes / reads a stamp as a small text file (atomically: temporary file
 * and rename; a new file gets `mode` less the umask: 0644 for records,
 * 0600 in a run directory). Reading: 0, -ENOENT, or -EINVAL when it does
 * not parse. */
int dataset_verify_stamp_write(const char *path, const struct dataset_verify_stamp *s, mode_t mode, char *err,
                               size_t errlen);
int dataset_verify_stamp_read(const char *path, struct dataset_verify_stamp *s, char *err, size_t errlen);

/* The cache record's path for dataset dir (its real path hashed). 0,
 * -ENOENT when neither XDG_CACHE_HOME nor HOME is set, or -errno. */
int dataset_verify_cache_path(const char *dir, char *out, size_t len, char *err, size_t errlen);

/* One verification: options in, outcome out. */
struct dataset_verify {
    bool force; /* check even when a record matches (gnnprep check) */
    /* optional: a full pass is about to read `bytes`; why in words */
    void (*begin)(void *arg, uint64_t bytes, const char *why);
    /* optional: a file of a full pass checked out, with its hash */
    void (*file_ok)(void *arg, int file, uint64_t xxh3);
    /* optional: progress of a full pass (dataset_check.h) */
    void (*progress)(void *arg, int file, uint64_t done, uint64_t total);
    void *arg;
    /* outcome */
    struct dataset_verify_stamp stamp; /* the files as verified */
    bool checked;                      /* a full pass ran (else a record matched) */
    bool recorded;                     /* ... and its success was recorded */
    char record[PATH_MAX];             /* the record that matched or was written */
    char note[1024];                   /* why a pass was not recorded, when it was not */
};

/* Verifies the dataset m describes in dir (m from dataset_meta_read with
 * check_files): 0 when a record matches the files' stamp (nothing read)
 * or a full check passed (then recorded as above; a record that cannot be
 * written anywhere is only a note). Otherwise dataset_check_run's result:
 * -EBADMSG or -EIO with a message naming the file and the offending
 * elements, or another -errno. Blocks for the full pass, if any. */
int dataset_verify_run(struct dataset_verify *v, const char *dir, const struct dataset_meta *m, char *err,
                       size_t errlen);

#endif
