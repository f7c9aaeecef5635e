/* trainer_backend.h - the compute backend of gnn-trainer: a table of
 * operations the backend-agnostic training loop (trainer_main.c: epochs,
 * padding steps, evaluation, results page, checkpoints, resume) calls for
 * everything that touches parameters, activations and feature rows
 * (DESIGN.md section 6; docs/training.md). The CPU backend is
 * trainer_cpu.c (ops/model.h over OpenBLAS); the CUDA backend,
 * trainer_cuda.c (the same model over the gpu/kernels.h table of
 * trainer_cuda_ops.c, feature rows on the device, an NCCL reducer),
 * implements the same table.
 *
 * Call sequence, per batch, one thread, in this order:
 *     gather(v)                       the batch's input rows
 *     forward(v, train, seed, &loss)  logits, loss; dlogits when training
 *   training batches only:
 *     backward(r)                     when loss.labelled > 0 (r: the reducer, or NULL)
 *     grads_finite(false, &ok)        after backward (train.on_nonfinite)
 *     reduce(r, real, &w) and, when w > 0, step(true, 1 / w)   more ranks
 *     step(false, 1)                  one rank, real batches only
 *   with set_lr before each step, and grad_sqnorm before it when the
 *   gradient is clipped (the step's scale then holds the clipping factor)
 * and a padding step (a rank with one batch fewer than the others in an
 * epoch) is reduce(r, false, &w), then step(true, 1 / w) when w > 0: it
 * contributes zero gradient and zero weight.
 *
 * Memory. Parameters, gradients, Adam's moments, activations and the
 * reduce buffer belong to the backend and live where it computes (host for
 * the CPU, device for CUDA); the loop never dereferences them, except
 * through state() (host copies). A batch_view (ipc/batch.h) is host
 * memory in the run's shared batch arena; the feature buffer is the one
 * the configuration names (host rows for the CPU backend; device rows,
 * featbuf's rows_on_device, for CUDA). The view's arrays and the feature
 * rows its aliases name are valid from gather until the call that ends
 * the batch returns (forward for evaluation, step for training - the loop
 * then hands the batch to the releaser, which may reuse the slots): a
 * backend that reads them asynchronously must synchronise before then.
 *
 * Synchronisation. A backend may queue work on its own stream; every
 * call that hands a value to the host (forward's loss, reduce's weight,
 * state's arrays) has finished the work behind it before returning, and
 * reduce's buffer is complete before the reducer reads it (the reducer
 * runs in the backend's order). Nothing is shared between threads.
 *
 * Determinism. For given parameters, batch and seed the results are the
 * same bits every run (ops/model.h's guarantee on the CPU; a CUDA backend
 * documents its own). Every rank applies the same reduced step, so
 * parameters stay identical across ranks.
 *
 * Checkpoints. The loop writes and reads parameters and Adam's moments
 * by tensor (model_layout of the configuration gives names, shapes and
 * offsets into the flat arrays): state() gives host arrays of
 * model_param_count floats each plus Adam's step count; after writing
 * into them (resume) the loop calls state_loaded() so a device backend
 * uploads them.
 *
 * Non-finite values (train.on_nonfinite). forward reports the loss on
 * the host, so the loop sees a NaN or infinite loss itself; after each
 * backward it asks grads_finite (the CPU scans the gradients, a device
 * backend reduces them to one flag on the device and downloads it). Only
 * once something was found not finite does it ask nonfinite_rows which
 * input rows of the batch were to blame (a slow path: a device backend
 * may copy the rows down to scan them).
 *
 * Errors: 0 or -errno with a message in err; the loop fails the stage on
 * any (reduce: the reducer's codes, -EPIPE meaning the run is being torn
 * down). */
#ifndef SLUICE_STAGES_TRAINER_BACKEND_H
#define SLUICE_STAGES_TRAINER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/batch.h"
#include "ops/model.h"
#include "ops/ops.h"
#include "stages/featbuf.h"
#include "stages/reducer.h"


struct trainer_backend_config {
    struct model_config model;
    float lr;                 /* Adam's learning rate */
    float weight_decay;       /* Adam's weight decay (0: none) */
    bool decoupled;           /* as AdamW (train.optimizer = "adamw"), else as Adam */
    int threads;              /* host threads for compute (CPU: the GEMM pool, ops_set_threads) */
    int device;               /* accelerator ordinal (CUDA); the CPU ignores it */
    const struct featbuf *fb; /* the rank's feature buffer: rows by slot */
    bool f16;                 /* its rows are IEEE half (widened to float by gather), else float */
    /* CUDA: row 0 of the feature rows on the device (fb->stride bytes
     * apart; the featbuf's device rows). NULL: fb's host rows, which only
     * the shim build of the CUDA backend (host memory standing for device
     * memory) can read. The CPU ignores it. */
    const void *rows_dev;
    /* CUDA: the smallest gradient bucket in floats (trainer_cuda.c);
     * 0: the default, 64 Ki. The CPU ignores it. */
    size_t bucket_floats;
};

/* What forward reports (host values). */
struct trainer_loss {
    float loss;        /* mean cross-entropy over the labelled targets (0 when none) */
    uint32_t labelled; /* targets with a label */
    uint32_t correct;  /* of those, how many the argmax gets right */
};

/* Host views of the training state (checkpoints). Valid until the next
 * call into the backend other than state_loaded. */
struct trainer_state {
    size_t n;          /* parameters (model_param_count) */
    float *params;     /* (n) */
    float *adam_m;     /* (n) Adam's first moments */
    float *adam_v;     /* (n) second moments */
    uint64_t *step;    /* Adam's steps taken */
};

struct trainer_backend; /* a backend's handle, private to it */

struct trainer_backend_ops {
    const char *name; /* "cpu", ... */
    /* Builds the model (Glorot-initialised from model.seed, Adam's moments
     * zero) and its buffers. */
    int (*create)(struct trainer_backend **out, const struct trainer_backend_config *c, char *err, size_t errlen);
    /* The batch's input: row i = feature row alias[i] for every node of v
     * (ops_gather_rows), f16 widened to float; or only what forward needs
     * to read them itself where they lie (the CPU backend for GraphSAGE
     * mean/sum, stages/trainer_cpu.c). */
    int (*gather)(struct trainer_backend *b, const struct batch_view *v, char *err, size_t errlen);
    /* The model over v's blocks (trainer_batch_blocks) from the gathered
     * rows, then the loss against v's labels; train: dropout on (mask from
     * dropout_seed), activations and the logits' gradient kept for
     * backward. */
    int (*forward)(struct trainer_backend *b, const struct batch_view *v, bool train, uint64_t dropout_seed,
                   struct trainer_loss *out, char *err, size_t errlen);
    /* The gradients of the last training forward (overwritten). r: the
     * reducer the reduce that follows will be given (NULL for one rank);
     * a backend may start summing gradients with it as the pass makes
     * them final (CUDA: buckets of layers over NCCL), reduce then
     * finishing the sum. Every rank's sequence of reducer calls stays the
     * same whatever it started where (trainer_cuda.c). */
    int (*backward)(struct trainer_backend *b, struct reducer *r, char *err, size_t errlen);
    /* *finite = every value is finite (no NaN, no infinity) of the last
     * backward's gradients (reduced = false), or of the sum the last
     * reduce left in the reduce buffer (reduced = true). Waits for the
     * answer. */
    int (*grads_finite)(struct trainer_backend *b, bool reduced, bool *finite, char *err, size_t errlen);
    /* The input rows of the last gathered batch holding a value that is
     * not finite: their positions in the batch's node list (batch_view's
     * nodes), ascending, the first max of them into rows; how many in
     * all into *n. A slow path, for messages once something was found. */
    int (*nonfinite_rows)(struct trainer_backend *b, uint32_t *rows, uint32_t max, uint32_t *n, char *err,
                          size_t errlen);
    /* Sums [gradients (real) or zeros (not real), weight = real ? 1 : 0]
     * over all ranks with r (r->ops->device must match where the backend
     * keeps its buffers); the sum stays in the backend's reduce buffer,
     * the total weight comes back in *weight. The reducer's return. */
    int (*reduce)(struct trainer_backend *b, struct reducer *r, bool real, float *weight);
    /* The sum of squares of the last backward's gradients (reduced =
     * false) or of the sum the last reduce left (reduced = true), over the
     * parameters only, in ops_sumsq's order (a device backend gives the
     * same bits with gk_sumsq). Waits for the answer. For
     * train.grad_clip: the loop asks only when clipping is on. */
    int (*grad_sqnorm)(struct trainer_backend *b, bool reduced, double *sumsq, char *err, size_t errlen);
    /* The learning rate of the steps that follow (train.lr_schedule: the
     * loop sets it before every step). */
    void (*set_lr)(struct trainer_backend *b, float lr);
    /* One Adam step: reduced = false on the backend's own gradients (one
     * rank), reduced = true on the reduce buffer, either times scale
     * (reduced: 1 / total weight, times the clipping factor; own
     * gradients: the clipping factor; a scale of 1 leaves the gradient's
     * bits as they are). */
    int (*step)(struct trainer_backend *b, bool reduced, float scale);
    /* The last forward's outputs for its targets, copied into host arrays:
     * logits (targets x classes) and the final-layer embeddings (targets x
     * model_embed_width; model_last_input), for gnnlaunch --predict. */
    int (*outputs)(struct trainer_backend *b, float *logits, float *emb, char *err, size_t errlen);
    /* Host views of params and Adam's state (a device backend copies them
     * down first). */
    int (*state)(struct trainer_backend *b, struct trainer_state *s, char *err, size_t errlen);
    /* The loop wrote into state()'s arrays: take them (a device backend
     * uploads them). */
    int (*state_loaded)(struct trainer_backend *b, char *err, size_t errlen);
    /* Frees everything; accepts NULL. */
    void (*free)(struct trainer_backend *b);
};

/* The CPU backend (trainer_cpu.c): ops/model.h, OpenBLAS on `threads`
 * threads, host feature rows (a feature buffer with rows_on_device is
 * refused: -EINVAL). */
extern const struct trainer_backend_ops trainer_cpu_backend;

/* The CUDA backend (trainer_cuda.c, name "cuda"): the model on
 * trainer_cuda_model_ops (trainer_cuda_ops.c: gpu/kernels.h over device
 * memory), parameters, gradients, Adam's moments and activations on the
 * device of the calling thread, feature rows gathered from rows_dev, a
 * reducer with device buffers. Built twice from the same source: against
 * sluice_gpu (library sluice_trainer_cuda, with CUDA) and against
 * sluice_gpu_shim (sluice_trainer_cuda_shim, everywhere: host memory
 * stands for device memory, the results are the CPU backend's bits, and
 * the reducer must then be a host one). Not in sluice_stages: link one of
 * the two. */
extern const struct trainer_backend_ops trainer_cuda_backend;
extern const struct model_ops trainer_cuda_model_ops;

/* The blocks of batch v in layer order, as model_forward takes them:
 * out[i] = the batch's block L-1-i (batch_block_for_layer), pointing into
 * the batch (nothing copied: valid while the batch's slot is held).
 * Returns L. out holds MODEL_LAYERS_MAX. */
static inline uint32_t trainer_batch_blocks(const struct batch_view *v, struct ops_block *out)
{
    uint32_t L = batch_layers(v);
    for (uint32_t i = 0; i < L; i++) {
        uint32_t k = batch_block_for_layer(v, i);
        out[i] = (struct ops_block){.n_dst = batch_block_dst(v, k),
                                    .n_src = batch_block_src(v, k),
                                    .indptr = v->indptr[k],
                                    .src = v->src[k],
                                    .deg = v->deg};
    }
    return L;
}

#endif
