/* dataset_check.h - the complete check of a dataset's contents
 * (docs/format.md), the one behind `gnnprep check` and gnnlaunch's launch
 * verification (core/dataset_verify.h).
 *
 * One sequential pass per file (core/dataset_scan.h) computes its XXH3
 * and validates its contents at once:
 *   indptr.bin   [0] = 0, never decreasing, [N] = E;
 *   indices.bin  ids < N, ascending within each node's list;
 *   features.bin every value finite, padding bytes zero;
 *   labels.bin   each label in [-1, classes);
 *   splits       ids < N, unique within a split, in one split only, labelled;
 * and every file's XXH3 equal to the one dataset.toml records (which is
 * what finds zeroed rows, another dataset's features of the same size,
 * in-range ids rewritten at random, or a wrong recorded checksum).
 * A content error names the file and the first few offending elements
 * (DATASET_CHECK_SHOW of them) and how many there are in all.
 *
 * Memory: 4 bytes a node for the labels, 2 bits a node for the split map,
 * two scans' buffers. Blocks on the reads; the time is that of one
 * sequential read of the dataset. */
#ifndef SLUICE_DATASET_CHECK_H
#define SLUICE_DATASET_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

#define DATASET_CHECK_SHOW 5 /* offending elements a message lists */

struct dataset_check {
    const char *dir;
    const struct dataset_meta *m;
    /* optional: after each file checks out, with its hash */
    void (*file_ok)(void *arg, int file, uint64_t xxh3);
    /* optional: as the pass goes, bytes read so far of `total` (all files) */
    void (*progress)(void *arg, int file, uint64_t done, uint64_t total);
    void *arg;
    /* state of a run */
    uint64_t done_before; /* bytes of the files already checked */
    int file;             /* the file being checked */
};

/* Bytes dataset_check_run reports progress against: every file's size. */
uint64_t dataset_check_bytes(const struct dataset_meta *m);

/* Checks every file of the dataset m describes in dir (m as read by
 * dataset_meta_read, with check_files). c->dir and c->m are set from the
 * arguments; the callbacks, if any, are taken from c. 0 when valid;
 * -EBADMSG when a file's contents are wrong, -EIO when a file ends early
 * (both with a message naming the file); another -errno when the machine
 * failed (read error, out of memory). */
int dataset_check_run(struct dataset_check *c, const char *dir, const struct dataset_meta *m, char *err,
                      size_t errlen);

#endif
