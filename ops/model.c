/* model.c - GraphSAGE, GCN, GAT and MLP over a sampled batch (model.h),
 * built from the operators of an operator table (model_ops.h: the CPU's,
 * ops.h, or a device's); the Adam and SGD steps. Every arithmetic step,
 * zeroing and copying included, and every allocation is a call of the
 * table: this file only says which operators run in which order on which
 * buffers, and never dereferences a buffer or a block's arrays (they may
 * be device memory). Only the initial parameters are computed here, on
 * the host, and uploaded.
 *
 * Parameters live in one flat array (gradients in a second of the same
 * length), tensors back to back in the order model_tensor() lists them:
 * per layer, weight matrices (out, in) as PyTorch's Linear keeps them,
 * then (GAT) the attention vectors (heads, head dim), then the bias.
 *
 * Memory. Everything a forward pass keeps for the backward (each layer's
 * output after ReLU and dropout, its dropout mask, the aggregated inputs
 * of SAGE and GCN, GAT's projections, scores and attention weights) sits
 * in per-layer buffers, and the backward's in a few shared ones; each
 * grows when a batch needs more than it holds and is otherwise reused, so
 * a run allocates only during its first batches. The input x and the
 * blocks' arrays are not copied: they must stay valid until backward.
 *
 * Errors of the table: every call's return is checked; the first failure
 * ends the pass with the table's message (a device table may report a
 * kernel's failure at a later call). */
#include "ops/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "ops/ops.h"

/* Mixed into the dropout seed for the input's mask (model.input_dropout)
 * and for the attention coefficients' (model.attention_dropout). */
#define INPUT_DROPOUT_SALT 0x1a9b7c3e5d2f4860ull
#define ATTENTION_DROPOUT_SALT 0x6c2e91f0a7b35d14ull

/* A scratch buffer in the table's memory that only grows (64-byte
 * aligned, contents not kept across growth). */
struct buf {
    void *p;
    size_t cap; /* bytes */
};

/* A table call: OP(m, linear_fwd, y, x, ...) is the table's linear_fwd
 * with the model's context. TRY returns its non-zero code. */
#define OP(m, fn, ...) ((m)->ops->fn((m)->ctx, __VA_ARGS__))
#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_)                                                                                                       \
            return rc_;                                                                                                \
    } while (0)

static void buf_free(const struct model_ops *ops, void *ctx, struct buf *b)
{
    ops->free(ctx, b->p);
    b->p = NULL;
    b->cap = 0;
}

static int buf_grow(const struct model_ops *ops, void *ctx, struct buf *b, size_t bytes)
{
    if (bytes <= b->cap && b->p) /* (never NULL, even for 0 bytes) */
        return 0;
    /* headroom for the next, slightly larger batch */
    size_t cap = sl_round_up(bytes + bytes / 8 + 64, 64);
    buf_free(ops, ctx, b);
    int rc = ops->alloc(ctx, &b->p, cap);
    if (rc) {
        b->p = NULL;
        return rc;
    }
    b->cap = cap;
    return 0;
}

#define buf_need(b, bytes) buf_grow(m->ops, m->ctx, (b), (bytes)) /* in functions with the model as m */

#define F(b) ((float *)(b).p)

struct layer {
    uint32_t in, out; /* widths of the layer's input and output rows */
    uint32_t heads;   /* gat: heads; 1 otherwise */
    uint32_t hd;      /* gat: width of one head's z (out / heads, or classes in the last layer) */
    bool last;
    size_t first; /* the layer's part of the flat arrays starts here (model_layer_offset) */
    /* tensor offsets in the flat arrays (SIZE_MAX: absent) */
    size_t w, w2, a_src, a_dst, b;
    /* kept by the last forward */
    struct model_block blk; /* mlp: n_src = n_dst = B, no edges, impl NULL */
    struct ops_block ob;    /* model_forward: the caller's ops_block, which blk.impl points at */
    const float *hin;       /* (blk.n_src, in) */
    bool dropped;           /* dropout applied (mask valid) */
    bool att_dropped;       /* gat: attention dropout applied (ad, asd, amask valid) */
    uint64_t att_seed;      /* gat: its mask seeds come from this stream */
    struct buf act;         /* (n_dst, out) output after ReLU and dropout; not in the last layer */
    struct buf mask;        /* (n_dst * out) dropout mask */
    struct buf agg;         /* sage, gcn: (n_dst, in) aggregated input */
    struct buf nsrc, ndst;  /* gcn: (n_src), (n_dst) normalisation */
    struct buf z;           /* gat: (n_src, heads * hd) projected input */
    struct buf el, er;      /* gat: (n_src, heads), (n_dst, heads) node scores */
    struct buf ae, as;      /* gat: (edges, heads), (n_dst, heads) attention weights */
    struct buf ad, asd;     /* gat with attention dropout: ae, as after it */
    struct buf amask;       /* their masks: (edges * heads) then (n_dst * heads) */
    struct buf pre;         /* elu with dropout: (n_dst, out) the activation before dropout */
    struct buf ties;        /* sage with max: (n_dst, in) sources holding each maximum */
};

struct model {
    struct model_config c;
    const struct model_ops *ops; /* where buffers live and operators run */
    void *ctx;
    size_t nparams;
    float *params, *grads; /* (nparams) */
    uint32_t ntensors;
    struct model_tensor t[MODEL_TENSORS_MAX];
    struct layer l[MODEL_LAYERS_MAX];
    bool ready; /* a training forward is held */
    uint32_t b; /* targets of that forward */
    /* shared scratch */
    struct buf deg;      /* gcn: (n_src) degrees */
    struct buf heads;    /* gat, last layer: (n_dst, heads * classes) before the head mean; its gradient */
    struct buf g[2];     /* backward: gradients of layer outputs / inputs, used in turn */
    struct buf tmp;      /* backward: sage, gcn (n_dst, in) gradient of the aggregate; gat (n_src, heads * hd) of z */
    struct buf gae, gas; /* gat backward: (edges, heads), (n_dst, heads) */
    struct buf gel, ger; /* gat backward: (n_src, heads), (n_dst, heads) */
    struct buf xin;      /* training with input dropout: (n_src of layer 0, in_dim) the input after it */
    struct buf xmask;    /* its mask (not needed by backward: the input has no gradient) */
    struct model_rows rows; /* model_forward_rows: layer 0's sources where they lie */
    bool use_rows;
    bool want_dx;        /* model_set_input_grad: backward also differentiates the input */
    const float *dx0;    /* that gradient after the last backward (in g[]), or NULL */
    /* host time spent per layer since model_timing_reset (model_layer_ns) */
    uint64_t fwd_ns[MODEL_LAYERS_MAX], bwd_ns[MODEL_LAYERS_MAX];
};

/* ---- creation ------------------------------------------------------------------------------- */

static const char *kind_name(enum model_kind k)
{
    switch (k) {
    case MODEL_SAGE:
        return "sage";
    case MODEL_GCN:
        return "gcn";
    case MODEL_GAT:
        return "gat";
    case MODEL_MLP:
        return "mlp";
    case MODEL_DISTMULT:
        return "distmult";
    case MODEL_COMPLEX:
        return "complex";
    }
    return "?";
}

static int check_config(const struct model_config *c, char *err, size_t errlen)
{
    if (model_kind_is_link(c->kind))
        return sl_errf(err, errlen, -EINVAL, "model.kind = %s trains link prediction over learnt embeddings "
                       "(docs/link.md), not a GNN over features; use sage, gcn, gat or mlp here", kind_name(c->kind));
    if ((unsigned)c->kind > MODEL_MLP)
        return sl_errf(err, errlen, -EINVAL, "model.kind: unknown model kind %d; use sage, gcn, gat or mlp",
                       (int)c->kind);
    if (c->layers < 1 || c->layers > MODEL_LAYERS_MAX)
        return sl_errf(err, errlen, -EINVAL, "model.layers = %u: must be 1 .. %d", c->layers, MODEL_LAYERS_MAX);
    if (c->in_dim < 1)
        return sl_errf(err, errlen, -EINVAL, "model input dimension is 0: the dataset's feat_dim must be at least 1");
    if (c->classes < 1)
        return sl_errf(err, errlen, -EINVAL, "model.classes is 0: the dataset's classes must be at least 1");
    if (c->layers > 1 && c->hidden < 1)
        return sl_errf(err, errlen, -EINVAL, "model.hidden is 0: a %u-layer model needs a hidden size >= 1", c->layers);
    if (c->kind == MODEL_GAT) {
        if (c->heads < 1)
            return sl_errf(err, errlen, -EINVAL, "model.heads is 0: gat needs at least one attention head");
        if (c->out_heads > 64)
            return sl_errf(err, errlen, -EINVAL, "model.out_heads = %u: at most 64 (0: model.heads)", c->out_heads);
        if (!(c->attention_dropout >= 0.0f && c->attention_dropout <= 0.95f))
            return sl_errf(err, errlen, -EINVAL, "model.attention_dropout = %g: must be 0 .. 0.95",
                           (double)c->attention_dropout);
        if (c->layers > 1 && c->hidden % c->heads)
            return sl_errf(err, errlen, -EINVAL,
                           "model.hidden = %u is not a multiple of model.heads = %u: gat splits the hidden size "
                           "between the heads; change one of them",
                           c->hidden, c->heads);
    }
    if (!(c->dropout >= 0.0f && c->dropout <= 0.95f))
        return sl_errf(err, errlen, -EINVAL, "model.dropout = %g: must be 0 .. 0.95", (double)c->dropout);
    if ((unsigned)c->aggr > MODEL_AGGR_MAX)
        return sl_errf(err, errlen, -EINVAL, "model.aggr: unknown (%d): mean, sum or max", (int)c->aggr);
    if (c->aggr != MODEL_AGGR_MEAN && c->kind != MODEL_SAGE)
        return sl_errf(err, errlen, -EINVAL,
                       "model.aggr = \"%s\" is GraphSAGE's: model.kind = \"%s\" aggregates its own way; remove the "
                       "key or use sage",
                       c->aggr == MODEL_AGGR_SUM ? "sum" : "max", kind_name(c->kind));
    if (c->activation != MODEL_ACT_RELU && c->activation != MODEL_ACT_ELU)
        return sl_errf(err, errlen, -EINVAL, "model.activation: unknown (%d): relu or elu", (int)c->activation);
    if (!(c->input_dropout >= 0.0f && c->input_dropout <= 0.95f))
        return sl_errf(err, errlen, -EINVAL, "model.input_dropout = %g: must be 0 .. 0.95",
                       (double)c->input_dropout);
    return 0;
}

/* A layout being built: tensors so far and the floats they take. */
struct layout {
    struct model_tensor *t;
    uint32_t n;
    size_t floats;
};

/* Appends a tensor to the layout; returns its offset. */
static size_t add_tensor(struct layout *lo, uint32_t layer, const char *what, uint64_t rows, uint64_t cols, int ndim)
{
    struct model_tensor *t = &lo->t[lo->n++];
    memset(t, 0, sizeof *t); /* the name zero-padded whatever the array held */
    snprintf(t->name, sizeof t->name, "layers.%u.%s", layer, what);
    t->ndim = (uint32_t)ndim;
    t->shape[0] = rows;
    t->shape[1] = ndim == 1 ? 1 : cols;
    t->offset = lo->floats;
    t->count = (size_t)(rows * t->shape[1]);
    lo->floats += t->count;
    return t->offset;
}

/* Layer i's widths and, through lo, its tensors and their offsets. */
static void layer_layout(struct layer *l, struct layout *lo, const struct model_config *c, uint32_t i)
{
    l->last = i == c->layers - 1;
    l->first = lo->floats;
    l->in = i == 0 ? c->in_dim : c->hidden;
    l->out = l->last ? c->classes : c->hidden;
    l->heads = c->kind != MODEL_GAT ? 1 : l->last && c->out_heads ? c->out_heads : c->heads;
    l->hd = l->last ? l->out : l->out / l->heads;
    l->w = l->w2 = l->a_src = l->a_dst = l->b = SIZE_MAX;
    switch (c->kind) {
    case MODEL_SAGE:
        l->w = add_tensor(lo, i, "w_self", l->out, l->in, 2);
        l->w2 = add_tensor(lo, i, "w_neigh", l->out, l->in, 2);
        l->b = add_tensor(lo, i, "bias", l->out, 1, 1);
        break;
    case MODEL_GCN:
    case MODEL_MLP:
        l->w = add_tensor(lo, i, "weight", l->out, l->in, 2);
        l->b = add_tensor(lo, i, "bias", l->out, 1, 1);
        break;
    case MODEL_GAT:
        l->w = add_tensor(lo, i, "weight", (uint64_t)l->heads * l->hd, l->in, 2);
        l->a_src = add_tensor(lo, i, "attn_src", l->heads, l->hd, 2);
        l->a_dst = add_tensor(lo, i, "attn_dst", l->heads, l->hd, 2);
        l->b = add_tensor(lo, i, "bias", (uint64_t)l->heads * l->hd, 1, 1);
        break;
    case MODEL_DISTMULT: /* link models: refused by check_config */
    case MODEL_COMPLEX:
        break;
    }
}

int model_layout(const struct model_config *c, struct model_tensor *t, uint32_t *ntensors, char *err, size_t errlen)
{
    *ntensors = 0;
    int rc = check_config(c, err, errlen);
    if (rc)
        return rc;
    struct layout lo = {.t = t};
    struct layer l;
    for (uint32_t i = 0; i < c->layers; i++)
        layer_layout(&l, &lo, c, i);
    *ntensors = lo.n;
    return 0;
}

/* From the shapes alone, layer by layer, independently of layer_layout
 * (test_model checks they agree): sage 2 (out x in) + out; gcn and mlp
 * (out x in) + out; gat (w x in) + 2 w (the attention vectors, heads x
 * hd) + w (bias), w = heads hd = out in a hidden layer (the heads split
 * it) and H x classes in the last (each head has all classes; H =
 * out_heads, or heads when that is 0). out =
 * hidden (classes in the last layer), in = in_dim (hidden after the
 * first). */
size_t model_param_count(const struct model_config *c)
{
    if (check_config(c, NULL, 0) != 0)
        return 0;
    size_t n = 0;
    for (uint32_t i = 0; i < c->layers; i++) {
        bool last = i + 1 == c->layers;
        size_t in = i == 0 ? c->in_dim : c->hidden, out = last ? c->classes : c->hidden;
        switch (c->kind) {
        case MODEL_SAGE:
            n += 2 * out * in + out;
            break;
        case MODEL_GCN:
        case MODEL_MLP:
            n += out * in + out;
            break;
        case MODEL_GAT: {
            size_t w = last ? (size_t)(c->out_heads ? c->out_heads : c->heads) * out : out;
            n += w * in + 2 * w + w;
            break;
        }
        case MODEL_DISTMULT: /* link models: refused by check_config */
        case MODEL_COMPLEX:
            break;
        }
    }
    return n;
}

/* The initial parameters (nparams floats, host memory): every weight
 * matrix (rows, cols) with fan_in = cols, fan_out = rows; the attention
 * vectors with fan_in = head dim, fan_out = 1; biases 0, taking no
 * draws. */
/* PyG's defaults (docs/training.md, "Initialisation"): sage and mlp as
 * torch's Linear (weights and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
 * Kaiming uniform with a = sqrt(5)); gcn and gat Glorot weights (gat's
 * attention tensors as one [heads, d] matrix) and zero biases. One
 * stream, tensors in layout order. */
static void init_params(const struct model *m, float *host)
{
    ops_zero(host, m->nparams);
    uint64_t st = m->c.seed;
    bool linear = m->c.kind == MODEL_SAGE || m->c.kind == MODEL_MLP;
    double fan_in = 1.0; /* of the layer's last weight: its bias's */
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const struct model_tensor *t = &m->t[i];
        float *p = host + t->offset;
        const char *what = strrchr(t->name, '.') + 1;
        if (!strcmp(what, "bias")) {
            if (linear)
                ops_uniform(p, t->count, 1.0 / sqrt(fan_in), &st);
            continue;
        }
        fan_in = (double)t->shape[1];
        if (linear)
            ops_uniform(p, t->count, 1.0 / sqrt(fan_in), &st);
        else
            ops_glorot_uniform(p, t->count, (double)t->shape[1], (double)t->shape[0], &st);
    }
}

int model_create(struct model **out, const struct model_config *c, char *err, size_t errlen)
{
    return model_create_on(out, c, &model_ops_cpu, NULL, err, errlen);
}

int model_create_on(struct model **out, const struct model_config *c, const struct model_ops *ops, void *ctx, char *err,
                    size_t errlen)
{
    *out = NULL;
    int rc = check_config(c, err, errlen);
    if (rc)
        return rc;
    if (!ops)
        return sl_errf(err, errlen, -EINVAL, "model_create_on: no operator table");
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the model");
    m->c = *c;
    m->ops = ops;
    m->ctx = ctx;
    struct layout lo = {.t = m->t};
    for (uint32_t i = 0; i < c->layers; i++)
        layer_layout(&m->l[i], &lo, c, i);
    m->ntensors = lo.n;
    m->nparams = lo.floats;

    size_t floats = sl_round_up(m->nparams, 16); /* whole 64-byte lines, zero past the end */
    float *host = aligned_alloc(64, floats * sizeof(float));
    if (!host) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %zu parameters", m->nparams);
        goto err;
    }
    if ((rc = ops->alloc(ctx, (void **)&m->params, floats * sizeof(float))) != 0 ||
        (rc = ops->alloc(ctx, (void **)&m->grads, floats * sizeof(float))) != 0) {
        rc = sl_errf(err, errlen, rc, "cannot allocate %zu parameters (%s operators): %s", m->nparams, ops->name,
                     ops->error(ctx));
        goto err;
    }
    init_params(m, host);
    ops_zero(host + m->nparams, floats - m->nparams);
    if ((rc = ops->upload(ctx, m->params, host, floats * sizeof(float))) != 0 ||
        (rc = ops->zero(ctx, m->grads, floats)) != 0) {
        rc = sl_errf(err, errlen, rc, "cannot set the initial parameters (%s operators): %s", ops->name,
                     ops->error(ctx));
        goto err;
    }
    free(host);
    *out = m;
    return 0;
err:
    free(host);
    model_destroy(m);
    return rc;
}

void model_destroy(struct model *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < MODEL_LAYERS_MAX; i++) {
        struct layer *l = &m->l[i];
        struct buf *bs[] = {&l->act, &l->mask, &l->agg, &l->nsrc, &l->ndst, &l->z,     &l->el,
                            &l->er,  &l->ae,   &l->as,  &l->ad,   &l->asd,  &l->amask, &l->pre, &l->ties};
        for (size_t k = 0; k < SL_ARRAY_LEN(bs); k++)
            buf_free(m->ops, m->ctx, bs[k]);
    }
    struct buf *bs[] = {&m->deg, &m->heads, &m->g[0], &m->g[1], &m->tmp,
                        &m->gae, &m->gas, &m->gel, &m->ger, &m->xin, &m->xmask};
    for (size_t k = 0; k < SL_ARRAY_LEN(bs); k++)
        buf_free(m->ops, m->ctx, bs[k]);
    m->ops->free(m->ctx, m->params);
    m->ops->free(m->ctx, m->grads);
    free(m);
}

size_t model_nparams(const struct model *m)
{
    return m->nparams;
}

float *model_params(struct model *m)
{
    return m->params;
}

float *model_grads(struct model *m)
{
    return m->grads;
}

uint32_t model_ntensors(const struct model *m)
{
    return m->ntensors;
}

const struct model_tensor *model_tensor(const struct model *m, uint32_t i)
{
    return i < m->ntensors ? &m->t[i] : NULL;
}

/* ---- forward ---------------------------------------------------------------------------------- */

#define FLOATS(n, w) ((size_t)(n) * (size_t)(w) * sizeof(float))
#define COUNT(n, w) ((size_t)(n) * (size_t)(w))

/* Grows the buffers layer l needs for its block (set in l->blk). */
static int layer_buffers(struct model *m, struct layer *l, bool train)
{
    uint32_t ns = l->blk.n_src, nd = l->blk.n_dst;
    size_t e = m->c.kind == MODEL_MLP ? 0 : l->blk.n_edges;
    if (!l->last) {
        TRY(buf_need(&l->act, FLOATS(nd, l->out)));
        if (train && m->c.dropout > 0.0f)
            TRY(buf_need(&l->mask, (size_t)nd * l->out));
        if (train && m->c.dropout > 0.0f && m->c.activation == MODEL_ACT_ELU)
            TRY(buf_need(&l->pre, FLOATS(nd, l->out)));
    }
    switch (m->c.kind) {
    case MODEL_SAGE:
        TRY(buf_need(&l->agg, FLOATS(nd, l->in)));
        if (m->c.aggr == MODEL_AGGR_MAX)
            TRY(buf_need(&l->ties, FLOATS(nd, l->in)));
        break;
    case MODEL_GCN:
        TRY(buf_need(&l->agg, FLOATS(nd, l->in)));
        TRY(buf_need(&l->nsrc, FLOATS(ns, 1)));
        TRY(buf_need(&l->ndst, FLOATS(nd, 1)));
        TRY(buf_need(&m->deg, (size_t)ns * sizeof(uint32_t)));
        break;
    case MODEL_GAT:
        TRY(buf_need(&l->z, FLOATS(ns, (size_t)l->heads * l->hd)));
        TRY(buf_need(&l->el, FLOATS(ns, l->heads)));
        TRY(buf_need(&l->er, FLOATS(nd, l->heads)));
        TRY(buf_need(&l->ae, FLOATS(e, l->heads)));
        TRY(buf_need(&l->as, FLOATS(nd, l->heads)));
        if (train && m->c.attention_dropout > 0.0f) {
            TRY(buf_need(&l->ad, FLOATS(e, l->heads)));
            TRY(buf_need(&l->asd, FLOATS(nd, l->heads)));
            TRY(buf_need(&l->amask, (e + nd) * l->heads + 1));
        }
        if (l->last)
            TRY(buf_need(&m->heads, FLOATS(nd, (size_t)l->heads * l->hd)));
        break;
    case MODEL_MLP:
        break;
    case MODEL_DISTMULT: /* link models: refused by check_config */
    case MODEL_COMPLEX:
        break;
    }
    return 0;
}

/* Layer l from l->hin to out (n_dst, l->out), before ReLU and dropout. */
static int layer_forward(struct model *m, struct layer *l, float *out)
{
    const float *P = m->params;
    const struct model_block *b = &l->blk;
    uint32_t nd = b->n_dst;
    switch (m->c.kind) {
    case MODEL_SAGE:
        if (m->use_rows && l == &m->l[0]) { /* model_forward_rows: from the feature rows, not hin */
            if (m->rows.dst_rows) /* hin is dst_rows */
                TRY(OP(m, gather_rows, m->rows.dst_rows, m->rows.rows, m->rows.stride, m->rows.alias, nd, l->in));
            TRY(OP(m, agg_rows_fwd, F(l->agg), b, m->rows.rows, m->rows.stride, m->rows.alias, l->in,
                   m->c.aggr == MODEL_AGGR_MEAN));
        }
        else if (m->c.aggr == MODEL_AGGR_MAX)
            TRY(OP(m, agg_max_fwd, F(l->agg), F(l->ties), b, l->hin, l->in));
        else if (m->c.aggr == MODEL_AGGR_SUM)
            TRY(OP(m, agg_sum_fwd, F(l->agg), b, l->hin, l->in));
        else
            TRY(OP(m, agg_mean_fwd, F(l->agg), b, l->hin, l->in));
        TRY(OP(m, linear_fwd, out, l->hin, P + l->w, nd, l->in, l->out, false)); /* self: the first n_dst rows */
        TRY(OP(m, linear_fwd, out, F(l->agg), P + l->w2, nd, l->in, l->out, true));
        break;
    case MODEL_GCN:
        TRY(OP(m, gcn_norm, F(l->nsrc), F(l->ndst), m->deg.p, b));
        TRY(OP(m, agg_gcn_fwd, F(l->agg), b, F(l->nsrc), F(l->ndst), l->hin, l->in));
        TRY(OP(m, linear_fwd, out, F(l->agg), P + l->w, nd, l->in, l->out, false));
        break;
    case MODEL_GAT: {
        uint32_t H = l->heads, w = H * l->hd;
        TRY(OP(m, linear_fwd, F(l->z), l->hin, P + l->w, b->n_src, l->in, w, false));
        TRY(OP(m, gat_score_fwd, F(l->el), F(l->z), P + l->a_src, b->n_src, H, l->hd));
        TRY(OP(m, gat_score_fwd, F(l->er), F(l->z), P + l->a_dst, nd, H, l->hd));
        TRY(OP(m, gat_edge_fwd, F(l->ae), F(l->as), b, F(l->el), F(l->er), H, OPS_GAT_SLOPE));
        TRY(OP(m, edge_softmax_fwd, F(l->ae), F(l->as), b, H));
        const float *ae = F(l->ae), *as = F(l->as);
        if (l->att_dropped) { /* on copies: the softmax's backward needs the coefficients themselves */
            size_t ne = b->n_edges * H, ns = (size_t)nd * H;
            uint64_t st = l->att_seed, se = sl_splitmix64(&st), ss = sl_splitmix64(&st);
            uint8_t *mk = l->amask.p;
            TRY(OP(m, copy, F(l->ad), ae, ne));
            TRY(OP(m, copy, F(l->asd), as, ns));
            TRY(OP(m, dropout_fwd, F(l->ad), mk, ne, m->c.attention_dropout, se));
            TRY(OP(m, dropout_fwd, F(l->asd), mk + ne, ns, m->c.attention_dropout, ss));
            ae = F(l->ad);
            as = F(l->asd);
        }
        float *cat = l->last ? F(m->heads) : out;
        TRY(OP(m, gat_sum_fwd, cat, b, ae, as, F(l->z), H, l->hd));
        TRY(OP(m, bias_fwd, cat, P + l->b, nd, w));
        if (l->last)
            TRY(OP(m, head_mean_fwd, out, cat, nd, H, l->hd));
        return 0;
    }
    case MODEL_MLP:
        TRY(OP(m, linear_fwd, out, l->hin, P + l->w, nd, l->in, l->out, false));
        break;
    case MODEL_DISTMULT: /* link models: refused by check_config */
    case MODEL_COMPLEX:
        return -EINVAL;
    }
    return OP(m, bias_fwd, out, P + l->b, nd, l->out);
}

/* Whether layer l's forward runs as one fused operator (ops_sage_fwd):
 * GraphSAGE with mean or sum on a table that has it, and the activation
 * after it (if any) ReLU. */
static bool sage_fused(const struct model *m, const struct layer *l)
{
    return m->c.kind == MODEL_SAGE && m->c.aggr != MODEL_AGGR_MAX && m->ops->ops_blocks && m->ops->sage_fwd &&
           l->blk.impl && (l->last || m->c.activation == MODEL_ACT_RELU);
}

/* Layer l's forward, its ReLU (unless last) and, with mask, its dropout
 * (seed) in one call: the bits of layer_forward and the steps after it. */
static int layer_sage_fused(struct model *m, struct layer *l, float *out, uint8_t *mask, uint64_t seed)
{
    const float *P = m->params;
    struct ops_sage_args s = {.b = l->blk.impl,
                             .x = l->hin,
                             .w_self = P + l->w,
                             .w_neigh = P + l->w2,
                             .bias = P + l->b,
                             .in = l->in,
                             .out = l->out,
                             .mean = m->c.aggr == MODEL_AGGR_MEAN,
                             .relu = !l->last,
                             .mask = mask,
                             .p = m->c.dropout,
                             .seed = seed,
                             .agg = F(l->agg),
                             .y = out};
    if (m->use_rows && l == &m->l[0]) { /* model_forward_rows: from the feature rows, not hin */
        s.rows = m->rows.rows;
        s.stride = m->rows.stride;
        s.alias = m->rows.alias;
        s.xg = m->rows.dst_rows; /* NULL, or hin itself */
    } else {
        s.h = l->hin;
    }
    return OP(m, sage_fwd, &s);
}

/* The forward pass once each layer's block is in l[i].blk. */
static int forward_layers(struct model *m, uint32_t targets, const float *x, bool train, uint64_t dropout_seed,
                          float *logits, char *err, size_t errlen)
{
    uint32_t L = m->c.layers;
    uint64_t st = dropout_seed; /* layer i's mask: output i of this stream */
    const float *hin = x;
    int rc;
    if (train && m->c.input_dropout > 0.0f) {
        /* on a copy (x is the caller's), with a mask from a stream of its
         * own, so that the layers' masks are the same with or without it */
        uint64_t xs = dropout_seed ^ INPUT_DROPOUT_SALT;
        uint64_t seed = sl_splitmix64(&xs);
        size_t n = (size_t)m->l[0].blk.n_src * m->c.in_dim;
        if ((rc = buf_need(&m->xin, FLOATS(m->l[0].blk.n_src, m->c.in_dim))) != 0 ||
            (rc = buf_need(&m->xmask, n ? n : 1)) != 0 || (rc = OP(m, copy, F(m->xin), x, n)) != 0 ||
            (rc = OP(m, dropout_fwd, F(m->xin), m->xmask.p, n, m->c.input_dropout, seed)) != 0)
            return sl_errf(err, errlen, rc, "input dropout over %u rows (%s operators): %s", m->l[0].blk.n_src,
                           m->ops->name, m->ops->error(m->ctx));
        hin = F(m->xin);
    }
    uint64_t ast = dropout_seed ^ ATTENTION_DROPOUT_SALT; /* layer i's attention masks: output i */
    for (uint32_t i = 0; i < L; i++) {
        struct layer *l = &m->l[i];
        l->hin = hin;
        l->att_seed = sl_splitmix64(&ast);
        l->att_dropped = train && m->c.kind == MODEL_GAT && m->c.attention_dropout > 0.0f;
        if ((rc = layer_buffers(m, l, train)) != 0)
            return sl_errf(err, errlen, rc, "cannot allocate layer %u's activations (%u x %u rows, %s operators): %s",
                           i, l->blk.n_src, l->in, m->ops->name, m->ops->error(m->ctx));
        float *out = l->last ? logits : F(l->act);
        uint64_t t0 = sl_now_ns();
        uint64_t seed = sl_splitmix64(&st);
        l->dropped = false;
        if (sage_fused(m, l)) {
            bool drop = !l->last && train && m->c.dropout > 0.0f;
            if ((rc = layer_sage_fused(m, l, out, drop ? l->mask.p : NULL, seed)) != 0)
                return sl_errf(err, errlen, rc, "layer %u forward (%s operators): %s", i, m->ops->name,
                               m->ops->error(m->ctx));
            l->dropped = drop;
        } else if ((rc = layer_forward(m, l, out)) != 0) {
            return sl_errf(err, errlen, rc, "layer %u forward (%s operators): %s", i, m->ops->name,
                           m->ops->error(m->ctx));
        } else if (!l->last) {
            size_t n = (size_t)l->blk.n_dst * l->out;
            bool elu = m->c.activation == MODEL_ACT_ELU;
            rc = elu ? OP(m, elu_fwd, out, n) : OP(m, relu_fwd, out, n);
            if (!rc && train && m->c.dropout > 0.0f) {
                if (elu) /* its backward needs the activation before dropout scales it */
                    rc = OP(m, copy, F(l->pre), out, n);
                if (!rc)
                    rc = OP(m, dropout_fwd, out, l->mask.p, n, m->c.dropout, seed);
                l->dropped = true;
            }
            if (rc)
                return sl_errf(err, errlen, rc, "layer %u activation (%s operators): %s", i, m->ops->name,
                               m->ops->error(m->ctx));
        }
        m->fwd_ns[i] += sl_now_ns() - t0;
        hin = out;
    }
    m->ready = train;
    m->b = targets;
    return 0;
}

/* Checks that nblocks blocks of these sizes (block i: n_src[i] -> n_dst[i])
 * chain from the input to the targets. */
static int check_blocks(const struct model *m, uint32_t nblocks, uint32_t targets, const uint32_t *n_src,
                        const uint32_t *n_dst, char *err, size_t errlen)
{
    uint32_t L = m->c.layers;
    if (nblocks != L)
        return sl_errf(err, errlen, -EINVAL,
                       "the batch has %u blocks but the %s model has %u layers: model.fanouts must have one "
                       "entry per layer",
                       nblocks, kind_name(m->c.kind), L);
    for (uint32_t i = 0; i < L; i++)
        if (n_dst[i] > n_src[i] || (i + 1 < L && n_dst[i] != n_src[i + 1]) || (i + 1 == L && n_dst[i] != targets))
            return sl_errf(err, errlen, -EINVAL,
                           "model_forward: block %u (%u -> %u nodes) does not chain with the next layer's or the "
                           "%u targets: the blocks must come from one batch of model.fanouts, in layer order",
                           i, n_src[i], n_dst[i], targets);
    return 0;
}

bool model_takes_rows(const struct model *m)
{
    return m->c.kind == MODEL_SAGE && (m->c.aggr == MODEL_AGGR_MEAN || m->c.aggr == MODEL_AGGR_SUM) &&
           m->c.input_dropout <= 0.0f && m->ops->ops_blocks && m->ops->agg_rows_fwd;
}

int model_forward_rows(struct model *m, const struct ops_block *blocks, uint32_t nblocks, uint32_t targets,
                       const float *x, const struct model_rows *src, bool train, uint64_t dropout_seed, float *logits,
                       char *err, size_t errlen)
{
    m->ready = false;
    if (!model_takes_rows(m))
        return sl_errf(err, errlen, -EINVAL,
                       "model_forward_rows: only GraphSAGE with mean or sum aggregation and no input dropout, on the "
                       "CPU operators, reads its input where it lies");
    if (!src || !src->rows || !src->alias)
        return sl_errf(err, errlen, -EINVAL, "model_forward_rows: no input rows");
    if (src->dst_rows && !m->ops->gather_rows)
        return sl_errf(err, errlen, -EINVAL, "model_forward_rows: the %s operators cannot gather rows",
                       m->ops->name);
    if (src->dst_rows)
        x = src->dst_rows;
    m->rows = *src;
    m->use_rows = true;
    int rc = model_forward(m, blocks, nblocks, targets, x, train, dropout_seed, logits, err, errlen);
    m->use_rows = false; /* the backward never reads the sources of layer 0 */
    return rc;
}

int model_forward(struct model *m, const struct ops_block *blocks, uint32_t nblocks, uint32_t targets, const float *x,
                  bool train, uint64_t dropout_seed, float *logits, char *err, size_t errlen)
{
    m->ready = false;
    uint32_t L = m->c.layers;
    bool mlp = m->c.kind == MODEL_MLP;
    if (!x || !logits || (!mlp && !blocks))
        return sl_errf(err, errlen, -EINVAL, "model_forward: no batch, input or output");
    if (!m->ops->ops_blocks)
        return sl_errf(err, errlen, -EINVAL,
                       "model_forward: the %s operators take their own blocks; use model_forward_blocks", m->ops->name);
    if (!mlp) {
        uint32_t ns[MODEL_LAYERS_MAX], nd[MODEL_LAYERS_MAX];
        for (uint32_t i = 0; i < nblocks && i < L; i++) {
            ns[i] = blocks[i].n_src;
            nd[i] = blocks[i].n_dst;
        }
        int rc = check_blocks(m, nblocks, targets, ns, nd, err, errlen);
        if (rc)
            return rc;
    }
    for (uint32_t i = 0; i < L; i++) {
        struct layer *l = &m->l[i];
        if (mlp) {
            l->blk = (struct model_block){.n_dst = targets, .n_src = targets};
            continue;
        }
        l->ob = blocks[i];
        l->blk = (struct model_block){
            .n_dst = l->ob.n_dst, .n_src = l->ob.n_src, .n_edges = ops_block_edges(&l->ob), .impl = &l->ob};
    }
    return forward_layers(m, targets, x, train, dropout_seed, logits, err, errlen);
}

int model_forward_blocks(struct model *m, const struct model_block *blocks, uint32_t nblocks, uint32_t targets,
                         const float *x, bool train, uint64_t dropout_seed, float *logits, char *err, size_t errlen)
{
    m->ready = false;
    uint32_t L = m->c.layers;
    bool mlp = m->c.kind == MODEL_MLP;
    if (!x || !logits || (!mlp && !blocks))
        return sl_errf(err, errlen, -EINVAL, "model_forward: no batch, input or output");
    if (!mlp) {
        uint32_t ns[MODEL_LAYERS_MAX], nd[MODEL_LAYERS_MAX];
        for (uint32_t i = 0; i < nblocks && i < L; i++) {
            ns[i] = blocks[i].n_src;
            nd[i] = blocks[i].n_dst;
            if (blocks[i].n_edges && !blocks[i].impl)
                return sl_errf(err, errlen, -EINVAL, "model_forward: block %u has %u edges but no arrays", i,
                               blocks[i].n_edges);
        }
        int rc = check_blocks(m, nblocks, targets, ns, nd, err, errlen);
        if (rc)
            return rc;
    }
    for (uint32_t i = 0; i < L; i++)
        m->l[i].blk = mlp ? (struct model_block){.n_dst = targets, .n_src = targets} : blocks[i];
    return forward_layers(m, targets, x, train, dropout_seed, logits, err, errlen);
}

float model_loss(const float *logits, const int32_t *labels, uint32_t b, uint32_t classes, float *dlogits,
                 uint32_t *labelled, uint32_t *correct)
{
    float loss = 0.0f;
    model_ops_cpu.cross_entropy(NULL, logits, labels, b, classes, dlogits, &loss, labelled, correct);
    return loss;
}

int model_cross_entropy(struct model *m, const float *logits, const int32_t *labels, uint32_t b, float *dlogits,
                        float *loss, uint32_t *labelled, uint32_t *correct, char *err, size_t errlen)
{
    int rc = OP(m, cross_entropy, logits, labels, b, m->c.classes, dlogits, loss, labelled, correct);
    if (rc)
        return sl_errf(err, errlen, rc, "cross-entropy over %u targets (%s operators): %s", b, m->ops->name,
                       m->ops->error(m->ctx));
    return 0;
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* Layer l's backward from dout (n_dst, out; after ReLU and dropout's
 * backward) into the parameter gradients and, when dx is not NULL, the
 * gradient of its input dx (n_src, in). */
static int layer_backward(struct model *m, struct layer *l, float *dout, float *dx)
{
    const float *P = m->params;
    float *G = m->grads;
    const struct model_block *b = &l->blk;
    uint32_t nd = b->n_dst, ns = b->n_src;
    switch (m->c.kind) {
    case MODEL_SAGE:
        if (m->ops->linear_bwd_w2) { /* both on the pool at once */
            TRY(OP(m, linear_bwd_w2, G + l->w, G + l->w2, dout, l->hin, F(l->agg), nd, l->in, l->out));
        } else {
            TRY(OP(m, linear_bwd_w, G + l->w, dout, l->hin, nd, l->in, l->out, false));
            TRY(OP(m, linear_bwd_w, G + l->w2, dout, F(l->agg), nd, l->in, l->out, false));
        }
        TRY(OP(m, bias_bwd, G + l->b, dout, nd, l->out));
        if (dx) {
            TRY(buf_need(&m->tmp, FLOATS(nd, l->in)));
            if (m->ops->linear_bwd_x2) {
                TRY(OP(m, linear_bwd_x2, dx, F(m->tmp), dout, P + l->w, P + l->w2, nd, l->in, l->out));
            } else {
                TRY(OP(m, linear_bwd_x, dx, dout, P + l->w, nd, l->in, l->out, false));
                TRY(OP(m, linear_bwd_x, F(m->tmp), dout, P + l->w2, nd, l->in, l->out, false));
            }
            TRY(OP(m, zero, dx + (size_t)nd * l->in, COUNT(ns - nd, l->in)));
            if (m->c.aggr == MODEL_AGGR_MAX)
                TRY(OP(m, agg_max_bwd, dx, b, l->hin, F(l->agg), F(l->ties), F(m->tmp), l->in));
            else if (m->c.aggr == MODEL_AGGR_SUM)
                TRY(OP(m, agg_sum_bwd, dx, b, F(m->tmp), l->in));
            else
                TRY(OP(m, agg_mean_bwd, dx, b, F(m->tmp), l->in));
        }
        return 0;
    case MODEL_GCN:
        TRY(OP(m, linear_bwd_w, G + l->w, dout, F(l->agg), nd, l->in, l->out, false));
        TRY(OP(m, bias_bwd, G + l->b, dout, nd, l->out));
        if (dx) {
            TRY(buf_need(&m->tmp, FLOATS(nd, l->in)));
            TRY(OP(m, linear_bwd_x, F(m->tmp), dout, P + l->w, nd, l->in, l->out, false));
            TRY(OP(m, zero, dx, COUNT(ns, l->in)));
            TRY(OP(m, agg_gcn_bwd, dx, b, F(l->nsrc), F(l->ndst), F(m->tmp), l->in));
        }
        return 0;
    case MODEL_GAT: {
        uint32_t H = l->heads, w = H * l->hd;
        size_t e = b->n_edges;
        TRY(buf_need(&m->tmp, FLOATS(ns, w)));
        TRY(buf_need(&m->gae, FLOATS(e, H)));
        TRY(buf_need(&m->gas, FLOATS(nd, H)));
        TRY(buf_need(&m->gel, FLOATS(ns, H)));
        TRY(buf_need(&m->ger, FLOATS(nd, H)));
        float *dcat = dout;
        if (l->last) { /* m->heads was sized by the forward */
            dcat = F(m->heads);
            TRY(OP(m, head_mean_bwd, dcat, dout, nd, H, l->hd));
        }
        TRY(OP(m, bias_bwd, G + l->b, dcat, nd, w));
        float *dz = F(m->tmp);
        TRY(OP(m, zero, dz, COUNT(ns, w)));
        if (l->att_dropped) { /* the sum used the dropped coefficients; their gradient goes back through the masks */
            const uint8_t *mk = l->amask.p;
            TRY(OP(m, gat_sum_bwd, dz, F(m->gae), F(m->gas), b, F(l->ad), F(l->asd), F(l->z), dcat, H, l->hd));
            TRY(OP(m, dropout_bwd, F(m->gae), mk, e * H, m->c.attention_dropout));
            TRY(OP(m, dropout_bwd, F(m->gas), mk + e * H, (size_t)nd * H, m->c.attention_dropout));
        } else {
            TRY(OP(m, gat_sum_bwd, dz, F(m->gae), F(m->gas), b, F(l->ae), F(l->as), F(l->z), dcat, H, l->hd));
        }
        TRY(OP(m, edge_softmax_bwd, F(m->gae), F(m->gas), F(l->ae), F(l->as), b, H));
        TRY(OP(m, zero, F(m->gel), COUNT(ns, H)));
        TRY(OP(m, zero, F(m->ger), COUNT(nd, H)));
        TRY(OP(m, gat_edge_bwd, F(m->gel), F(m->ger), b, F(m->gae), F(m->gas), F(l->el), F(l->er), H, OPS_GAT_SLOPE));
        TRY(OP(m, zero, G + l->a_src, COUNT(H, l->hd)));
        TRY(OP(m, zero, G + l->a_dst, COUNT(H, l->hd)));
        TRY(OP(m, gat_score_bwd, dz, G + l->a_src, F(m->gel), F(l->z), P + l->a_src, ns, H, l->hd));
        TRY(OP(m, gat_score_bwd, dz, G + l->a_dst, F(m->ger), F(l->z), P + l->a_dst, nd, H, l->hd));
        TRY(OP(m, linear_bwd_w, G + l->w, dz, l->hin, ns, l->in, w, false));
        if (dx)
            TRY(OP(m, linear_bwd_x, dx, dz, P + l->w, ns, l->in, w, false));
        return 0;
    }
    case MODEL_MLP:
        TRY(OP(m, linear_bwd_w, G + l->w, dout, l->hin, nd, l->in, l->out, false));
        TRY(OP(m, bias_bwd, G + l->b, dout, nd, l->out));
        if (dx)
            TRY(OP(m, linear_bwd_x, dx, dout, P + l->w, nd, l->in, l->out, false));
        return 0;
    case MODEL_DISTMULT: /* link models: refused by check_config */
    case MODEL_COMPLEX:
        break;
    }
    return -EINVAL;
}

void model_layer_ns(const struct model *m, uint32_t i, uint64_t *fwd_ns, uint64_t *bwd_ns)
{
    bool in = i < m->c.layers;
    *fwd_ns = in ? m->fwd_ns[i] : 0;
    *bwd_ns = in ? m->bwd_ns[i] : 0;
}

void model_timing_reset(struct model *m)
{
    memset(m->fwd_ns, 0, sizeof m->fwd_ns);
    memset(m->bwd_ns, 0, sizeof m->bwd_ns);
}

void model_set_input_grad(struct model *m, bool on)
{
    m->want_dx = on;
    m->dx0 = NULL;
}

const float *model_input_grad(const struct model *m)
{
    return m->dx0;
}

size_t model_layer_offset(const struct model *m, uint32_t i)
{
    return i < m->c.layers ? m->l[i].first : m->nparams;
}

int model_backward(struct model *m, const float *dlogits, char *err, size_t errlen)
{
    return model_backward_progress(m, dlogits, NULL, NULL, err, errlen);
}

int model_backward_progress(struct model *m, const float *dlogits, int (*done)(void *arg, size_t from), void *arg,
                            char *err, size_t errlen)
{
    if (!m->ready)
        return sl_errf(err, errlen, -EINVAL, "model_backward: no training forward pass to differentiate");
    if (!dlogits)
        return sl_errf(err, errlen, -EINVAL, "model_backward: no gradient of the logits");
    uint32_t L = m->c.layers;
    int cur = 0, rc;
    m->dx0 = NULL;
    if ((rc = buf_need(&m->g[cur], FLOATS(m->b, m->c.classes))) != 0 ||
        (rc = OP(m, copy, F(m->g[cur]), dlogits, COUNT(m->b, m->c.classes))) != 0)
        goto fail;
    for (uint32_t i = L; i-- > 0;) {
        struct layer *l = &m->l[i];
        float *dout = F(m->g[cur]);
        size_t n = (size_t)l->blk.n_dst * l->out;
        uint64_t t0 = sl_now_ns();
        if (!l->last && m->c.activation == MODEL_ACT_RELU && m->ops->dropout_relu_bwd) { /* one pass */
            if ((rc = OP(m, dropout_relu_bwd, dout, l->dropped ? l->mask.p : NULL, F(l->act), n, m->c.dropout)) != 0)
                goto fail;
        } else if (!l->last) {
            if (l->dropped && (rc = OP(m, dropout_bwd, dout, l->mask.p, n, m->c.dropout)) != 0)
                goto fail;
            if (m->c.activation == MODEL_ACT_ELU)
                rc = OP(m, elu_bwd, dout, l->dropped ? F(l->pre) : F(l->act), n);
            else
                rc = OP(m, relu_bwd, dout, F(l->act), n);
            if (rc)
                goto fail;
        }
        float *dx = NULL;
        if (i > 0 || m->want_dx) {
            if ((rc = buf_need(&m->g[!cur], FLOATS(l->blk.n_src, l->in))) != 0)
                goto fail;
            dx = F(m->g[!cur]);
        }
        if ((rc = layer_backward(m, l, dout, dx)) != 0)
            goto fail;
        m->bwd_ns[i] += sl_now_ns() - t0;
        /* layer i has written its gradients; no later layer touches them */
        if (done && (rc = done(arg, l->first)) != 0)
            return sl_errf(err, errlen, rc, "backward pass: after layer %u: %s", i, strerror(-rc));
        cur = !cur;
    }
    m->dx0 = m->want_dx ? F(m->g[cur]) : NULL; /* layer 0's dx: the buffer the last pass wrote */
    return 0;
fail:
    return sl_errf(err, errlen, rc, "backward pass (%s operators): %s", m->ops->name, m->ops->error(m->ctx));
}

/* ---- optimizers ---------------------------------------------------------------------------------- */

int adam_init(struct adam *a, size_t n, float lr)
{
    return adam_init_on(a, n, lr, &model_ops_cpu, NULL);
}

int adam_init_on(struct adam *a, size_t n, float lr, const struct model_ops *ops, void *ctx)
{
    memset(a, 0, sizeof *a);
    a->lr = lr;
    a->beta1 = 0.9f;
    a->beta2 = 0.999f;
    a->eps = 1e-8f;
    a->n = n;
    a->ops = ops;
    a->ctx = ctx;
    size_t bytes = (n ? n : 1) * sizeof(float);
    int rc;
    if ((rc = ops->alloc(ctx, (void **)&a->m, bytes)) != 0 || (rc = ops->alloc(ctx, (void **)&a->v, bytes)) != 0 ||
        (rc = ops->zero(ctx, a->m, n)) != 0 || (rc = ops->zero(ctx, a->v, n)) != 0) {
        adam_free(a);
        return rc;
    }
    return 0;
}

void adam_free(struct adam *a)
{
    if (!a || !a->ops)
        return;
    a->ops->free(a->ctx, a->m);
    a->ops->free(a->ctx, a->v);
    a->m = a->v = NULL;
}

int adam_step(struct adam *a, float *params, const float *grads)
{
    a->step++;
    return a->ops->adam(a->ctx, params, grads, a->m, a->v, a->n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
                        a->decoupled, a->step);
}

void sgd_step(float *params, const float *grads, size_t n, float lr)
{
    model_ops_cpu.sgd(NULL, params, grads, n, lr);
}

int model_forward_layer(struct model *m, uint32_t i, const struct ops_block *b, const float *x, float *out, char *err,
                        size_t errlen)
{
    m->ready = false;
    if (i >= m->c.layers || !b || !x || !out)
        return sl_errf(err, errlen, -EINVAL, "model_forward_layer: no layer %u, block, input or output", i);
    if (!m->ops->ops_blocks)
        return sl_errf(err, errlen, -EINVAL, "model_forward_layer: the %s operators take their own blocks",
                       m->ops->name);
    struct layer *l = &m->l[i];
    if (m->c.kind == MODEL_MLP) {
        l->blk = (struct model_block){.n_dst = b->n_dst, .n_src = b->n_dst};
    } else {
        l->ob = *b;
        l->blk = (struct model_block){.n_dst = b->n_dst, .n_src = b->n_src, .n_edges = ops_block_edges(b), .impl = &l->ob};
    }
    l->hin = x;
    l->att_dropped = false;
    l->dropped = false;
    int rc;
    if ((rc = layer_buffers(m, l, false)) != 0)
        return sl_errf(err, errlen, rc, "cannot allocate layer %u's buffers (%u x %u rows, %s operators): %s", i,
                       l->blk.n_src, l->in, m->ops->name, m->ops->error(m->ctx));
    if ((rc = layer_forward(m, l, out)) != 0)
        return sl_errf(err, errlen, rc, "layer %u forward (%s operators): %s", i, m->ops->name, m->ops->error(m->ctx));
    if (!l->last) {
        size_t n = (size_t)l->blk.n_dst * l->out;
        rc = m->c.activation == MODEL_ACT_ELU ? OP(m, elu_fwd, out, n) : OP(m, relu_fwd, out, n);
        if (rc)
            return sl_errf(err, errlen, rc, "layer %u activation (%s operators): %s", i, m->ops->name,
                           m->ops->error(m->ctx));
    }
    return 0;
}

uint32_t model_layer_width(const struct model_config *c, uint32_t i)
{
    if (i + 1 >= c->layers)
        return i + 1 == c->layers ? c->classes : 0;
    return c->hidden;
}

const float *model_last_input(const struct model *m)
{
    return m->c.layers ? m->l[m->c.layers - 1].hin : NULL;
}

uint32_t model_embed_width(const struct model_config *c)
{
    return c->layers <= 1 ? c->in_dim : c->hidden;
}
