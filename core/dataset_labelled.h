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

#endif
