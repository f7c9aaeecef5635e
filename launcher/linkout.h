/* linkout.h - what a link-prediction run (launcher/link.h) writes beside
 * its stdout lines: the --metrics JSON lines (launcher/jsonl.h) and the
 * --tensorboard scalars (launcher/tboard.h), in the GNN runs' conventions
 * (docs/metrics.md, "Link-prediction runs"):
 *
 *   {"type":"epoch", ...}  once per epoch, after its stdout line: the
 *                          numbers that line prints under the same names
 *                          (valid_mrr, valid_hits@1, ...), null where the
 *                          epoch did not evaluate, and out of core the
 *                          buffer's reads, writes and swaps of the epoch;
 *   {"type":"final", ...}  once, last, also when the run fails or is
 *                          interrupted ("complete":false).
 *
 * TensorBoard: one Event per epoch, step = epoch (1-based). An output
 * that cannot be written is a warning once, then closed (the run goes on);
 * `metrics.failed` and `tboard_failed` tell the launcher afterwards
 * (--strict-outputs). The launcher's main thread only. */
#ifndef SLUICE_LAUNCHER_LINKOUT_H
#define SLUICE_LAUNCHER_LINKOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "launcher/jsonl.h"
#include "launcher/tboard.h"
#include "stages/link.h"

/* One epoch's numbers, as its stdout line and stderr notes give them. */
struct linkout_epoch {
    uint32_t epoch, epochs;            /* 1-based; train.epochs */
    double loss, lr;                   /* mean training loss; train.lr (constant) */
    double seconds, train_s;           /* the epoch with its evaluation; the training pass alone */
    double edges_per_s;                /* training triples / train_s */
    const struct link_metrics *valid;  /* NULL: the epoch did not evaluate */
    const struct link_metrics *test;   /* NULL: no test pass this epoch (there is one with every
                                        * validation under train.early_stop_patience) */
    bool ooc;                          /* out of core: the buffer's numbers below */
    uint64_t swaps, swaps_planned;     /* partitions loaded this epoch; the plan's swaps an epoch */
    uint64_t written_back, read_bytes, write_bytes;
    double buffer_wait_s, bucket_read_s, slices_train_s;
    bool encoder;                      /* model.encoder = "sage": sampled a batch on average */
    double enc_nodes, enc_edges;
};

/* The run's end, as its final stdout line gives it. */
struct linkout_final {
    bool complete;                     /* the final line was printed (exit 0) */
    const struct link_metrics *test;   /* NULL: not computed (failed, interrupted) */
    const struct link_metrics *valid;  /* the last evaluation's; stopped early: the best epoch's; NULL: none */
    uint32_t epochs, best_epoch;       /* epochs done (a resumed run counts the checkpoint's); 0: none evaluated */
    bool stopped_early;
    double seconds;                    /* the run's wall time */
};

struct linkout {
    struct jsonl metrics;
    struct tboard tb;      /* fd -1: not open */
    bool tboard_failed;
    uint32_t test_step;    /* the last step whose scalars held test/ values */
    double t0;             /* sl_now() at the run's start: "t" counts from it */
};

/* Opens --metrics FILE (truncated) and --tensorboard DIR (a new event
 * file); either may be NULL or "". Failures are warnings. */
void linkout_open(struct linkout *o, const char *metrics_file, const char *tboard_dir, double t0);

/* The epoch's JSON object and TensorBoard Event. */
void linkout_epoch(struct linkout *o, const struct linkout_epoch *e);

/* The final JSON object (and the test scalars at step f->epochs when no
 * epoch carried them), then closes both outputs. */
void linkout_final(struct linkout *o, const struct linkout_final *f);

#endif
