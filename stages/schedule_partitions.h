/* schedule_partitions.h - the partition-ordered batch schedule,
 * "partitions" (issue 22; contract of every schedule: schedule.h): each
 * epoch's training pass follows the buffer states of a partorder plan
 * (core/partorder.h) over a partitioned layout (core/partition.h).
 *
 * Argument. schedule_params.arg is "SLOTS:ORDER:COVER:FILL:EVAL:LAYOUT",
 * e.g. "4:comet:nodes:auto:auto:data/big/parts.32": the buffer's slots c,
 * the ordering (po_order_name), the coverage (po_cover_name), how
 * MariusGNN's one-state rule fills the slots beside the training
 * partitions (pipeline.partition_fill: random, first, or auto = first for
 * a layout ordered by neighbours, else random; po_params.fixed_parts),
 * where evaluation batches are sampled (pipeline.partition_eval: buffer,
 * graph, or auto = buffer when it can be, below, on a layout ordered by
 * neighbours, else graph) and the layout
 * directory, whose parent is the dataset. Logical partitions follow
 * MariusGNN's rule.
 *
 * Epoch e. The plan of epoch e is po_plan_build with the layout's p and
 * train_parts and the seed schedule_partitions_seed(seed, e), the same on
 * every rank. The rank's share of the training split (the default
 * schedule's shuffled share, schedule_shuffle_share) is assigned to the
 * plan's states (po_plan_assign; within a state the share's order is
 * kept, so it stays shuffled), and the training pass is the states in
 * order, each cut into batches of batch_size targets, the last of a
 * state shorter: no batch holds targets of two states, and batch k of the
 * pass trains in state schedule_partitions_state(). The training pass so
 * differs in length from epoch to epoch; steps is the most training
 * batches any rank has in any epoch.
 *
 * Validation and test passes are the default schedule's (fixed shuffled
 * shares cut into equal batches). With evaluation "graph" they are
 * sampled on the whole graph, not in a buffer state (their state is
 * PO_EMPTY). With "buffer" they are in the epoch's state 0: possible only
 * for a layout made with --eval-first (partitions [0, eval_parts) hold
 * every training, validation and test node) under MariusGNN's one-state
 * rule (comet, k < c) with eval_parts <= c, whose fixed partitions then
 * include [0, eval_parts); open refuses "buffer" otherwise, naming what
 * to change, and "auto" picks "graph" then (and on a layout not ordered
 * by neighbours, whose in-buffer evaluation loses most of the accuracy).
 *
 * Open reads the layout's metadata (checked against the dataset, whose
 * changes it refuses), node_pos.bin's entries of the training nodes, and
 * the training split; it builds and assigns every epoch's plan once to
 * count the batches (time: epochs x training nodes). */
#ifndef SLUICE_STAGES_SCHEDULE_PARTITIONS_H
#define SLUICE_STAGES_SCHEDULE_PARTITIONS_H

#include "core/config.h"
#include "core/partition.h"
#include "core/partorder.h"
#include "stages/schedule.h"

#define SCHEDULE_PARTITIONS "partitions"

extern const struct schedule_ops schedule_partitions_ops;

/* The seed of epoch e's plan for run seed `seed`. */
uint64_t schedule_partitions_seed(uint64_t seed, uint32_t epoch);
/* Builds epoch e's plan (its states; no targets) into pl, as the schedule
 * s (opened with schedule_partitions_ops) uses it. 0 or -errno. */
int schedule_partitions_plan(const struct schedule *s, uint32_t epoch, struct po_plan *pl, char *err, size_t errlen);
/* The buffer state the batch at p trains (or evaluates) in; PO_EMPTY for
 * evaluation batches sampled on the whole graph. */
uint32_t schedule_partitions_state(const struct schedule *s, const struct schedule_pos *p);

/* Whether evaluation batches are in a buffer state (pipeline.partition_eval
 * resolved at open). */
bool schedule_partitions_eval_in_buffer(const struct schedule *s);

/* The layout the schedule s (opened with schedule_partitions_ops) follows:
 * its metadata (checked against the dataset at open) and directory. */
const struct parts_meta *schedule_partitions_meta(const struct schedule *s);
const char *schedule_partitions_dir(const struct schedule *s);
/* Reads the layout's node_pos.bin whole (malloc'd, nodes entries of the
 * dataset's id dtype: *u64 says which): the map a stage needs to find a
 * node's partition (sampler_filter) and its row (partbuf_row). 0 or
 * -errno naming the file (a file of the wrong size is refused). */
int schedule_partitions_node_pos(const struct schedule *s, void **out, bool *u64, char *err, size_t errlen);

/* The schedule a run of configuration c follows, for every stage and the
 * launcher alike: with pipeline.mode = "partitions" this one, its
 * argument written into arg ("C:ORDER:nodes:FILL:EVAL:DATASET/parts.P",
 * from pipeline.buffer_partitions, partition_order, partition_fill,
 * partition_eval and partitions, which
 * gnnlaunch resolved before the stages start); otherwise the default,
 * with *arg = "" (pass NULL as schedule_params.arg). */
const struct schedule_ops *schedule_for_config(const struct config *c, char *arg, size_t len);
/* The spare frames a partition buffer needs for this ordering to prefetch
 * a whole swap (the most partitions one state loads after the first: 0
 * for MariusGNN's single state, the logical partition's size for comet, 1
 * for beta), from a plan of p partitions, c slots and k training ones. 0
 * or po_plan_build's error. */
int schedule_partitions_spare(uint32_t p, uint32_t c, uint32_t k, enum po_order order, uint32_t *spare, char *err,
                              size_t errlen);

#endif
