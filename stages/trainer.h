/* trainer.h - what gnnlaunch and gnn-trainer agree on about training
 * (docs/training.md): the model a configuration asks for, and the size of
 * the gradient all-reduce the launcher creates for the trainers. */
#ifndef SLUICE_STAGES_TRAINER_H
#define SLUICE_STAGES_TRAINER_H

#include <stddef.h>

#include "core/dataset.h"
#include "core/config.h"
#include "ops/model.h"

/* The model of configuration c on dataset m: kind, layers, hidden, heads,
 * dropout and seed from c; input size the feature dimension, output size
 * the class count. */
void trainer_model_config(const struct config *c, const struct dataset_meta *m, struct model_config *out);

/* Floats in one all-reduce: every parameter's gradient, then the step's
 * weight (1 for a real batch, 0 for a padding step), counted from the
 * model's shapes (model_param_count: no model is built). 0 and a message
 * naming the key when the configuration is not a valid model. */
size_t trainer_reduce_floats(const struct config *c, const struct dataset_meta *m, char *err, size_t errlen);

/* The model's description a checkpoint records as `model` (kind, layers,
 * widths, classes, heads): what must match to load it. */
void trainer_model_text(const struct model_config *mc, char *buf, size_t len);

/* The learning rate of step i (from 0, counted over the whole run: epoch
 * e's k-th step is e * steps_per_epoch + k, padding steps included) under
 * train.lr_schedule, train.warmup_steps and their keys (docs/training.md,
 * "Learning rate"). A pure function of its arguments, so every rank and a
 * resumed run use the same rate at the same step. */
double trainer_lr_at(const struct config *c, uint64_t i, uint64_t steps_per_epoch);

/* The factor that scales a gradient of L2 norm `norm` down to at most
 * train.grad_clip (torch.nn.utils.clip_grad_norm_: clip / (norm + 1e-6),
 * at most 1); 1 when clipping is off or the norm is within it. */
double trainer_clip_factor(const struct config *c, double norm);

#endif
