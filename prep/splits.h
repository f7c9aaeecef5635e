/* splits.h - train/validation/test node id lists for the importers: read
 * from text (one id per line, '#' comments and blank lines skipped, gzip
 * allowed, as OGB's split/NAME/train.csv.gz) or from a 1-D (or K x 1) .npy
 * array of integers, or a 1-D boolean .npy mask of one element per node
 * (PyG's train_mask: the ids of its true elements); checked (ids in range, no duplicates within a split,
 * splits pairwise disjoint, every split node labelled, as `gnnprep check`
 * demands), sorted ascending and written as id arrays
 * (u32 when nodes < 2^32, else u64).
 *
 * Ids are held in memory to sort them (8 bytes each). Messages name the
 * file and line (text) or element (npy); duplicates and overlaps are
 * located by scanning the files again, which costs nothing unless the
 * input is bad. */
#ifndef SLUICE_SPLITS_H
#define SLUICE_SPLITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

struct imp_split {
    const char *path;
    const char *what;  /* "train", "val", "test" */
    bool npy;
    bool mask;         /* a boolean .npy mask, one element per node (PyG's train_mask): ids are its true elements */
    uint64_t *ids;     /* (n) */
    uint64_t n, cap;
};

/* Reads the ids of path (ids must be < nodes). 0 or -errno (-EINVAL bad
 * text, dtype or shape; -ERANGE id out of range; -ENOENT missing). */
int imp_split_read(struct imp_split *s, const char *path, const char *what, uint64_t nodes, char *err, size_t errlen);

/* Sorts each split and checks for duplicates and overlaps. 0 or -EINVAL
 * naming both places where the offending id occurs. */
int imp_splits_check(struct imp_split *s, int count, char *err, size_t errlen);

/* Checks that every split node is labelled: bit v of `labelled` (LSB
 * first) set for each labelled node v. 0 or -EINVAL naming the place of the
 * first unlabelled one and the labels input. */
int imp_splits_labelled(const struct imp_split *s, int count, const uint8_t *labelled, const char *labels_name,
                        char *err, size_t errlen);

/* Writes the sorted ids to path as dtype_for_ids(nodes) and fills f. */
int imp_split_write(const struct imp_split *s, uint64_t nodes, const char *path, struct dataset_file *f, char *err,
                    size_t errlen);

void imp_split_free(struct imp_split *s);

#endif
