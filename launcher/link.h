/* link.h - gnnlaunch's link-prediction run (model.kind = "distmult" |
 * "complex" on a link dataset; docs/link.md): the node and relation
 * embeddings in memory, trained in the launcher's own process by
 * stages/link.h, as `--predict --exact` runs in it. No stage process, no
 * shared memory: with every table in memory there is nothing to read
 * ahead, and the negatives cost nothing to draw. With pipeline.mode =
 * "partitions" the node table lives on disk in partitions and trains
 * through a buffer with write-back (stages/linkooc.h), still in this
 * process: the buffer's I/O thread does the reading ahead.
 *
 * What it prints is gnnlaunch's contract: one line per epoch on stdout,
 *   epoch E/N loss=<f> valid_mrr=<f> valid_hits@1=<f> valid_hits@10=<f> seconds=<f> edges_per_s=<f>
 * (the valid_ fields on evaluation epochs, train.eval_every), and last
 *   test_mrr=<f> test_hits@1=<f> test_hits@10=<f> epochs=<n> seconds=<f>
 * Checkpoints: epoch-NNNNNN.safetensors in train.checkpoint_dir every
 * epoch (node_emb, rel_emb and their Adagrad sums; the metadata the GNN
 * trainer's carry: epoch, dataset and run identity, every config key),
 * latest.safetensors pointing at the newest, train.keep_last honoured;
 * --resume continues from the newest and ends bit for bit as a run that
 * was never stopped. At the end node_emb.npy and rel_emb.npy (float32,
 * [rows, d]) go beside the checkpoints (the last trained epoch's tables).
 * SIGINT/SIGTERM stop at the next batch: exit 130 with the checkpoints of
 * the finished epochs kept.
 *
 * best.safetensors follows the best validation MRR (train.early_stop_metric
 * = "valid_mrr", the only one a link run has); train.early_stop_patience =
 * P stops the run once P evaluations in a row brought no better one, as a
 * GNN run does (docs/training.md): the test split is then ranked with
 * every validation, and the final line gives the best epoch's test
 * metrics with epochs= the epochs trained up to the stop. The epochs run
 * one after the other in this process, so nothing trains past the stop
 * and no checkpoint past it is written. --metrics and --tensorboard:
 * launcher/linkout.h. */
#ifndef SLUICE_LAUNCHER_LINK_H
#define SLUICE_LAUNCHER_LINK_H

#include "core/config.h"
#include "core/linkdata.h"

struct launch_link {
    const struct config *cfg;
    const char *config_path;   /* the config file, its text goes into each checkpoint */
    struct link_meta meta;     /* the dataset's, as checked */
    uint32_t start_epoch;      /* --resume: the epochs the newest checkpoint holds */
    /* pipeline.mode = "partitions": the node table out of core
     * (stages/linkooc.h) in parts partitions, slots of them in memory,
     * the layout in train.checkpoint_dir/link-partitions */
    bool ooc;
    uint32_t parts, slots;
    bool comet; /* COMET's states and bucket assignment (model.encoder = "sage"), else BETA's */
    const char *metrics_file; /* --metrics, absolute (checked writable), or NULL */
    const char *tboard_dir;   /* --tensorboard, absolute (checked), or NULL */
};

/* What the launcher needs afterwards for --strict-outputs. */
struct launch_link_out {
    bool metrics_failed, tboard_failed; /* a write failed (warned about when it happened) */
};

/* Runs the training; returns the exit status (0, 3 a failure, 130
 * interrupted) after printing what happened; *out says which of the
 * metric outputs could not be written in full. */
int launch_link_run(const struct launch_link *r, struct launch_link_out *out);

#endif
