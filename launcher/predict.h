/* predict.h - gnnlaunch --predict (docs/inference.md): the launcher's
 * part of a prediction run. Before the stages start it checks the
 * checkpoint against the configuration and creates the outputs
 * (stages/predict.h) in a partial directory beside --out; once they
 * ended it turns the predictions into accuracies per split, writes
 * accuracy.json and renames the directory into place - or, on failure,
 * removes it, so that --out only ever holds a complete prediction. */
#ifndef SLUICE_LAUNCHER_PREDICT_H
#define SLUICE_LAUNCHER_PREDICT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/config.h"
#include "core/dataset.h"
#include "ipc/run.h"

struct launch_predict {
    enum run_predict which; /* RUN_PREDICT_NONE: a training run */
    char ckpt[PATH_MAX];    /* the checkpoint, absolute */
    char out[PATH_MAX];     /* --out, absolute */
    char tmp[PATH_MAX + 64];/* the partial directory the stages fill */
    uint32_t epoch;         /* the checkpoint's epoch */
    bool exact;             /* --exact: layer-wise over the whole graph (stages/infer.h) */
};

/* Checks and prepares: the checkpoint (a Sluice checkpoint of the model
 * cfg describes on dataset m), --out (must not exist; its parent must),
 * and the output files for the predicted nodes in p->tmp. 0 or -errno
 * with a message naming the flag or file. */
int launch_predict_prepare(struct launch_predict *p, const struct config *cfg, const struct dataset_meta *m,
                           char *err, size_t errlen);

/* After the stages: ok, the accuracies (printed as the final line, and
 * into accuracy.json) and the rename; else the partial directory is
 * removed. 0 or -errno with a message (then nothing is left either). */
int launch_predict_finish(struct launch_predict *p, const struct config *cfg, const struct dataset_meta *m, bool ok,
                          double seconds, char *err, size_t errlen);

/* --exact: the layer-wise inference of every node in this process
 * (stages/infer.h; no stages are started), into p->tmp. threads: compute
 * threads (0: one per CPU). 0 or -errno with a message. */
int launch_predict_exact(struct launch_predict *p, const struct config *cfg, const struct dataset_meta *m, int threads,
                         char *err, size_t errlen);

/* Removes the partial directory, if any (exit paths). */
void launch_predict_abandon(struct launch_predict *p);

#endif
