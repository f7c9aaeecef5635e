/* model.h - the GNN models the trainer runs (DESIGN.md section 6;
 * issue 5): GraphSAGE (mean aggregator, separate self and neighbour
 * weights), GCN, GAT (multi-head) and a feature-only MLP, over the sampled
 * blocks of one batch (struct ops_block), with forward, backward and the
 * optimizer step. Every piece of arithmetic is an operator of ops/ops.h
 * or of a twin table (model.c holds only the model description: shapes,
 * order of the calls, buffers), so twins of those operators run the same
 * description ("Operator table" below).
 *
 * Shapes. A batch reaches the model as L = layers blocks (struct
 * ops_block of ops/ops.h) in layer order: GNN layer i (0 = the one that
 * reads the raw features) aggregates over blocks[i], whose destinations
 * 0 .. n_dst-1 are a prefix of its sources 0 .. n_src-1, and layer i's
 * destinations are layer i+1's sources (blocks[i].n_dst ==
 * blocks[i+1].n_src); the last block's destinations are the B targets.
 * (For a batch of ipc/batch.h, blocks[i] is the batch's block L-1-i: the
 * trainer points the blocks into the batch, nothing copied.) The input x
 * has one row per source of blocks[0] (n_src x in_dim, row-major float);
 * the output is one row of logits per target (B x classes). Layer sizes:
 * in_dim -> hidden -> ... -> hidden -> classes (layers = config's
 * model.layers; a 1-layer model maps in_dim -> classes). Between layers:
 * ReLU then dropout (training only); nothing after the last layer.
 *   sage: h'_v = W_self h_v + W_neigh mean_{u in N(v)} h_u + b
 *         (mean over the block's sampled in-neighbours; 0 if none)
 *   gcn:  h'_v = W (sum_{u in N(v) + v} h_u / sqrt(d_v d_u)) + b, with
 *         d_v = 1 + in-degree of v in the block and d_u = 1 + out-degree
 *         of u in the block (self loops added; DGL GraphConv norm="both")
 *   gat:  per head k: z = W_k h; e_uv = LeakyReLU_0.2(a_src_k . z_u +
 *         a_dst_k . z_v) over u in N(v) + v (self loop), alpha = softmax
 *         of e over v's in-edges, h'_v = sum_u alpha_uv z_u + b_k; hidden
 *         layers concatenate the heads (hidden / heads each), the last
 *         layer averages them (classes each)
 *   mlp:  h' = W h + b over the targets only (the blocks are ignored)
 *
 * Initialisation (documented in docs/training.md): every weight matrix
 * Glorot/Xavier uniform U(-a, a), a = sqrt(6 / (fan_in + fan_out)), every
 * attention vector the same with fan_in = head dim, fan_out = 1, biases 0;
 * drawn from a splitmix64 stream seeded with train.seed, tensors in the
 * order model_tensor() lists them. Same seed, same weights, bit for bit.
 *
 * Determinism. Given the same parameters, batch, input and dropout seed,
 * forward and backward give bit-identical results whatever the thread
 * count (reductions are in a fixed order; GEMMs are cut into tiles of a
 * fixed size, each one single-threaded sgemm call, whatever
 * ops_set_threads says - ops/ops.h).
 *
 * Operator table. Every buffer and every operator call goes through a
 * struct model_ops (ops/model_ops.h) chosen when the model is built:
 * model_create uses the CPU table (model_ops_cpu: host memory, ops.h, the
 * bits of the ops_X calls), model_create_on any other, e.g. the CUDA one
 * (stages/trainer_cuda_ops.c: device memory, gpu/kernels.h). Parameters,
 * gradients, Adam's moments and activations live in the table's memory
 * space; model_params(), model_grads(), x, logits and dlogits are
 * pointers in that space (host arrays for the CPU table). Blocks: the
 * model reads only their sizes; model_forward takes ops_block arrays
 * (tables whose blocks are struct ops_block, i.e. the CPU's),
 * model_forward_blocks struct model_block arrays that carry the sizes and
 * the table's own block (a device table's arrays are never read here).
 * Parameters are initialised on the host (the same bits for every
 * table) and uploaded.
 *
 * Errors: 0 or -errno with a message in err (may be NULL); a table's
 * failure is reported with its error() message. */
#ifndef SLUICE_OPS_MODEL_H
#define SLUICE_OPS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h" /* enum model_kind, MODEL_LAYERS_MAX */
#include "ops/model_ops.h"
#include "ops/ops.h"

#define MODEL_TENSORS_MAX (MODEL_LAYERS_MAX * 4)

struct model_config {
    enum model_kind kind;
    uint32_t layers;  /* 1 .. MODEL_LAYERS_MAX */
    uint32_t in_dim;  /* feature dimension */
    uint32_t hidden;  /* hidden size (a multiple of heads for gat) */
    uint32_t classes; /* output size */
    uint32_t heads;   /* gat only */
    uint32_t out_heads; /* gat: heads of the last layer, averaged (0: heads) */
    float dropout;    /* 0 .. 0.95, on hidden activations */
    float input_dropout; /* 0 .. 0.95, on the input rows before layer 0 */
    float attention_dropout; /* gat: 0 .. 0.95, on the attention coefficients */
    enum model_activation activation; /* after every layer but the last */
    enum model_aggr aggr;             /* sage: mean, sum or max */
    uint64_t seed;    /* initialisation */
};

/* One parameter tensor: a name (e.g. "layers.0.w_self"), its shape
 * (rows x cols; cols = 1 for vectors) and where it lives in the flat
 * parameter (and gradient) array. */
struct model_tensor {
    char name[48];
    uint32_t ndim;     /* 1 or 2 */
    uint64_t shape[2]; /* shape[1] = 1 when ndim = 1 */
    size_t offset;     /* in floats */
    size_t count;      /* shape[0] * shape[1] */
};

struct model; /* opaque */

/* The parameter tensors of configuration c, in model_tensor() order, into
 * t[0 .. *ntensors) (at most MODEL_TENSORS_MAX), with their offsets in the
 * flat array; allocates nothing. 0, or -EINVAL for a bad configuration
 * (message names the key). */
int model_layout(const struct model_config *c, struct model_tensor *t, uint32_t *ntensors, char *err, size_t errlen);

/* The parameter count of configuration c (what model_nparams() of a model
 * built from it returns), computed from the layer shapes alone: allocates
 * nothing. 0 for a bad configuration (model_layout says why). */
size_t model_param_count(const struct model_config *c);

/* Builds a model with Glorot-initialised parameters on the CPU table.
 * -EINVAL for a bad configuration (message names the key), -ENOMEM. */
int model_create(struct model **out, const struct model_config *c, char *err, size_t errlen);
/* The same on table ops with context ctx (kept until model_destroy;
 * both must outlive the model): parameters and gradients allocated there,
 * the parameters drawn on the host and uploaded (the same values as
 * model_create). Also the table's alloc/upload errors. */
int model_create_on(struct model **out, const struct model_config *c, const struct model_ops *ops, void *ctx, char *err,
                    size_t errlen);
void model_destroy(struct model *m);

/* Parameters and gradients: one flat float array each, model_nparams()
 * long; tensors in a fixed order; in the table's memory space. */
size_t model_nparams(const struct model *m);
float *model_params(struct model *m);
float *model_grads(struct model *m);
uint32_t model_ntensors(const struct model *m);
const struct model_tensor *model_tensor(const struct model *m, uint32_t i);

/* Forward pass over a batch of `targets` targets given as nblocks blocks
 * in layer order (Shapes above): x is blocks[0].n_src x in_dim (the input
 * rows in local id order), logits gets targets x classes. The mlp ignores
 * the blocks (nblocks may be anything, blocks NULL) and reads the first
 * `targets` rows of x. train: dropout on (its mask drawn from
 * dropout_seed) and activations kept for model_backward; otherwise nothing
 * is kept. The blocks' arrays and x must stay valid until backward
 * (nothing is copied; the ops_block structs themselves are). -EINVAL when
 * nblocks is not the layer count or the blocks do not chain (message
 * names model.fanouts). */
int model_forward(struct model *m, const struct ops_block *blocks, uint32_t nblocks, uint32_t targets, const float *x,
                  bool train, uint64_t dropout_seed, float *logits, char *err, size_t errlen);

/* The input where it lies (issue 27: no gather of every source row):
 * source s of layer 0's block is the f32 row at rows + alias[s] * stride
 * (in_dim floats). */
struct model_rows {
    const unsigned char *rows;
    size_t stride;         /* bytes between rows */
    const uint32_t *alias; /* (blocks[0].n_src) the row of each source */
    float *dst_rows;       /* NULL, or (blocks[0].n_dst, in_dim): the forward gathers layer 0's destination
                            * rows here itself (model_forward_rows) */
};

/* Whether model_forward_rows applies: GraphSAGE with mean or sum
 * aggregation, no input dropout, on a table with ops_blocks and
 * agg_rows_fwd (the CPU table). */
bool model_takes_rows(const struct model *m);

/* model_forward with layer 0's sources read from src instead of a gathered
 * x: x holds only layer 0's n_dst destination rows (the first n_dst
 * sources, gathered by the caller), which the self term and the weight
 * gradients read; the aggregation reads every source through src. Gives
 * exactly the bits of model_forward over the fully gathered input, and
 * model_backward works as after it. src's rows, alias and x must stay
 * valid until backward. With src->dst_rows, the caller gathers nothing
 * and x may be NULL: the forward copies layer 0's destination rows from
 * src into dst_rows (ops_gather_rows' bits; the fused layer does it tile
 * by tile, each tile's rows copied before its aggregation) and uses
 * dst_rows as x, which must then stay valid until backward. -EINVAL when
 * !model_takes_rows(m), or as model_forward. */
int model_forward_rows(struct model *m, const struct ops_block *blocks, uint32_t nblocks, uint32_t targets,
                       const float *x, const struct model_rows *src, bool train, uint64_t dropout_seed, float *logits,
                       char *err, size_t errlen);

/* model_forward for any table: blocks (nblocks of them, sizes on the host,
 * impl the table's block) in layer order, x and logits in the table's
 * space. The model copies the model_block structs; what their impl
 * points at (and its arrays) must stay valid until backward. Also -EINVAL
 * when a block's n_edges is not 0 while its impl is NULL. model_forward
 * on a table without ops_blocks is -EINVAL. */
int model_forward_blocks(struct model *m, const struct model_block *blocks, uint32_t nblocks, uint32_t targets,
                         const float *x, bool train, uint64_t dropout_seed, float *logits, char *err, size_t errlen);

/* Mean cross-entropy over the targets whose label is >= 0 (labels from the
 * batch), its gradient with respect to the logits (dlogits, B x classes,
 * zero rows for unlabelled targets; may be NULL when not training), the
 * number of labelled targets and how many of them the argmax gets right. */
float model_loss(const float *logits, const int32_t *labels, uint32_t b, uint32_t classes, float *dlogits,
                 uint32_t *labelled, uint32_t *correct);

/* model_loss through m's table: logits, labels (b of each) and dlogits
 * (may be NULL) in its space, the loss and counts (each may be NULL) on
 * the host. Finished on return. 0 or the table's error. */
int model_cross_entropy(struct model *m, const float *logits, const int32_t *labels, uint32_t b, float *dlogits,
                        float *loss, uint32_t *labelled, uint32_t *correct, char *err, size_t errlen);

/* Backward pass of the last training forward: sets model_grads() (it
 * overwrites, never accumulates). */
int model_backward(struct model *m, const float *dlogits, char *err, size_t errlen);

/* model_backward, saying as it goes which gradients are final: after the
 * backward of layer i (layers run from the last to the first) it calls
 * done(arg, model_layer_offset(m, i)), and from then on nothing in the
 * pass writes gradients [that offset, nparams). The work before the call
 * has been issued on m's table in order (a device table may still be
 * running it: done's own work on the same stream runs after it). A
 * non-zero return of done (a negative errno) ends the pass with that code.
 * done NULL is model_backward. */
int model_backward_progress(struct model *m, const float *dlogits, int (*done)(void *arg, size_t from), void *arg,
                            char *err, size_t errlen);

/* Whether model_backward also computes the gradient of the input x
 * (blocks[0].n_src x in_dim rows) - off by default, features have none;
 * link prediction's GNN encoder (stages/linkenc.h) learns its input. With
 * input dropout it is the gradient of the input after dropout. */
void model_set_input_grad(struct model *m, bool on);
/* That gradient after the last model_backward (in the model's space), or
 * NULL when off or before a backward; valid until the next backward. */
const float *model_input_grad(const struct model *m);

/* Where layer i's parameters start in the flat arrays: layers are laid
 * out in order, so layer i owns [model_layer_offset(m, i),
 * model_layer_offset(m, i + 1)), and i = layers gives nparams. */
size_t model_layer_offset(const struct model *m, uint32_t i);

/* Host nanoseconds spent in layer i's forward (its operators, activation
 * and dropout) and backward (dropout's and the activation's backward, then
 * the layer's) since the model was made or model_timing_reset; 0 for i out
 * of range. With an asynchronous operator table (CUDA) this is the time to
 * queue the work, not to run it. For bench/trainer_bench.c. */
void model_layer_ns(const struct model *m, uint32_t i, uint64_t *fwd_ns, uint64_t *bwd_ns);
void model_timing_reset(struct model *m);
/* Layer i alone, evaluation mode (no dropout), on the CPU table's
 * blocks: out (b->n_dst x model_layer_width(i)) from x (b->n_src rows of
 * layer i's input width; destinations first), activation applied unless
 * it is the last layer (whose output is the logits). Layer-wise inference
 * (gnnlaunch --predict --exact) runs the layers one after another over
 * all nodes this way; the result equals model_forward over blocks holding
 * every neighbour. The mlp ignores the block's edges (n_src = n_dst). */
int model_forward_layer(struct model *m, uint32_t i, const struct ops_block *b, const float *x, float *out, char *err,
                        size_t errlen);
/* Output width of layer i: model.hidden, the class count for the last. */
uint32_t model_layer_width(const struct model_config *c, uint32_t i);

/* The final-layer embeddings of the last forward: its last layer's input
 * rows, the targets' first (destinations come first in every block), of
 * model_embed_width floats each, in the model's space (host memory for
 * the CPU table); NULL before the first forward. Valid until the next
 * forward. For a one-layer model they are the input rows themselves. */
const float *model_last_input(const struct model *m);
/* Their width: the input's for one layer, else model.hidden. */
uint32_t model_embed_width(const struct model_config *c);

/* Optimizers over the flat arrays. Adam (Kingma & Ba, bias-corrected;
 * weight decay as torch.optim.Adam, or decoupled as torch.optim.AdamW:
 * ops_adam) keeps m and v moments, one float each per parameter,
 * in the memory of the table it was initialised on (adam_init: the CPU
 * table; adam_init_on: any, e.g. a model's). adam_step runs on that
 * table: 0, or its error code (the CPU table never fails). sgd_step is
 * the CPU table's. */
struct adam {
    float lr, beta1, beta2, eps; /* 0.9, 0.999, 1e-8 by default */
    float weight_decay;          /* 0 by default; set after init */
    bool decoupled;              /* weight decay as AdamW (else as Adam: L2 in the gradient) */
    uint64_t step;               /* steps taken */
    size_t n;
    float *m, *v; /* (n) zero at init */
    const struct model_ops *ops;
    void *ctx;
};
int adam_init(struct adam *a, size_t n, float lr);
int adam_init_on(struct adam *a, size_t n, float lr, const struct model_ops *ops, void *ctx);
void adam_free(struct adam *a);
int adam_step(struct adam *a, float *params, const float *grads);
void sgd_step(float *params, const float *grads, size_t n, float lr);

#endif
