/* dataset_labelled.h - the launch check that every split can be scored:
 * a split without a single labelled node would train on nothing or print
 * an accuracy of nan (issue 17, item 3; docs/reliability.md). */
#ifndef SLUICE_DATASET_LABELLED_H
#define SLUICE_DATASET_LABELLED_H

#include <stddef.h>

#include "core/dataset.h"

/* Checks that the train, val and test splits of the dataset in dir (meta
 * m, already read and size-checked) each hold at least one node with a
 * label in 0 .. classes-1. Stops reading a split at its first labelled
 * node, so a usual dataset costs one read per split; a split with none is
 * read whole. Ids >= nodes are passed over (the sampler refuses them).
 * 0; -EINVAL naming the split file and what to do; -errno when a file
 * cannot be read. */
int dataset_check_labelled(const char *dir, const struct dataset_meta *m, char *err, size_t errlen);

/* The classes labels.bin uses: 1 + its largest label in 0 .. classes-1
 * into *used (0 when none is), read whole when the file is at most
 * max_bytes (else 0 is returned and *used left alone: not looked at). 1
 * when read, 0 when too large, -errno with a message. gnnlaunch warns when
 * dataset.toml's classes is larger than used: outputs that never train. */
int dataset_labels_used(const char *dir, const struct dataset_meta *m, uint64_t max_bytes, uint32_t *used, char *err,
                        size_t errlen);

#endif
