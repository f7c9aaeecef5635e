/* model.c - GraphSAGE, GCN, GAT and MLP over a sampled batch (model.h),
 * built from the operators of ops.h; the Adam and SGD steps. Every
 * arithmetic step, zeroing and copying included, is an ops_ call: this file
 * only says which operators run in which order on which buffers.
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
 * blocks' arrays are not copied: they must stay valid until backward. */
#include "ops/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "ops/ops.h"

/* A scratch buffer that only grows (64-byte aligned, contents not kept
 * across growth). */
struct buf {
    void *p;
    size_t cap; /* bytes */
};

static int buf_need(struct buf *b, size_t bytes)
{
    if (bytes <= b->cap && b->p)
        return 0; /* (never NULL, even for 0 bytes) */
    size_t cap = sl_round_up(bytes + bytes / 8 + 64, 64); /* headroom for the next, slightly larger batch */
    free(b->p);
    b->p = aligned_alloc(64, cap);
    b->cap = b->p ? cap : 0;
    return b->p ? 0 : -ENOMEM;
}

static void buf_free(struct buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

#define F(b) ((float *)(b).p)

struct layer {
    uint32_t in, out; /* widths of the layer's input and output rows */
    uint32_t heads;   /* gat: heads; 1 otherwise */
    uint32_t hd;      /* gat: width of one head's z (out / heads, or classes in the last layer) */
    bool last;
    /* tensor offsets in the flat arrays (SIZE_MAX: absent) */
    size_t w, w2, a_src, a_dst, b;
    /* kept by the last forward */
    struct ops_block blk; /* mlp: n_src = n_dst = B and no edges */
    const float *hin;     /* (blk.n_src, in) */
    bool dropped;         /* dropout applied (mask valid) */
    struct buf act;       /* (n_dst, out) output after ReLU and dropout; not in the last layer */
    struct buf mask;      /* (n_dst * out) dropout mask */
    struct buf agg;       /* sage, gcn: (n_dst, in) aggregated input */
    struct buf nsrc, ndst; /* gcn: (n_src), (n_dst) normalisation */
    struct buf z;          /* gat: (n_src, heads * hd) projected input */
    struct buf el, er;     /* gat: (n_src, heads), (n_dst, heads) node scores */
    struct buf ae, as;     /* gat: (edges, heads), (n_dst, heads) attention weights */
};

struct model {
    struct model_config c;
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
    }
    return "?";
}

static int check_config(const struct model_config *c, char *err, size_t errlen)
{
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
        if (c->layers > 1 && c->hidden % c->heads)
            return sl_errf(err, errlen, -EINVAL,
                           "model.hidden = %u is not a multiple of model.heads = %u: gat splits the hidden size "
                           "between the heads; change one of them",
                           c->hidden, c->heads);
    }
    if (!(c->dropout >= 0.0f && c->dropout <= 0.95f))
        return sl_errf(err, errlen, -EINVAL, "model.dropout = %g: must be 0 .. 0.95", (double)c->dropout);
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
    l->in = i == 0 ? c->in_dim : c->hidden;
    l->out = l->last ? c->classes : c->hidden;
    l->heads = c->kind == MODEL_GAT ? c->heads : 1;
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
 * it) and heads x classes in the last (each head has all classes). out =
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
            size_t w = last ? (size_t)c->heads * out : out;
            n += w * in + 2 * w + w;
            break;
        }
        }
    }
    return n;
}

int model_create(struct model **out, const struct model_config *c, char *err, size_t errlen)
{
    *out = NULL;
    int rc = check_config(c, err, errlen);
    if (rc)
        return rc;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the model");
    m->c = *c;
    struct layout lo = {.t = m->t};
    for (uint32_t i = 0; i < c->layers; i++)
        layer_layout(&m->l[i], &lo, c, i);
    m->ntensors = lo.n;
    m->nparams = lo.floats;

    size_t bytes = sl_round_up(m->nparams * sizeof(float), 64);
    m->params = aligned_alloc(64, bytes);
    m->grads = aligned_alloc(64, bytes);
    if (!m->params || !m->grads) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %zu parameters", m->nparams);
        goto err;
    }
    ops_zero(m->params, bytes / sizeof(float));
    ops_zero(m->grads, bytes / sizeof(float));
    /* every weight matrix (rows, cols): fan_in = cols, fan_out = rows; the
     * attention vectors: fan_in = head dim, fan_out = 1; biases stay 0 and
     * take no draws */
    uint64_t st = c->seed;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const struct model_tensor *t = &m->t[i];
        float *p = m->params + t->offset;
        const char *what = strrchr(t->name, '.') + 1;
        if (!strcmp(what, "bias"))
            continue;
        if (!strncmp(what, "attn_", 5)) {
            for (uint64_t k = 0; k < t->shape[0]; k++)
                ops_glorot_uniform(p + k * t->shape[1], t->shape[1], (double)t->shape[1], 1.0, &st);
        } else {
            ops_glorot_uniform(p, t->count, (double)t->shape[1], (double)t->shape[0], &st);
        }
    }
    *out = m;
    return 0;
err:
    model_destroy(m);
    return rc;
}

void model_destroy(struct model *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < MODEL_LAYERS_MAX; i++) {
        struct layer *l = &m->l[i];
        struct buf *bs[] = {&l->act, &l->mask, &l->agg, &l->nsrc, &l->ndst, &l->z, &l->el, &l->er, &l->ae, &l->as};
        for (size_t k = 0; k < SL_ARRAY_LEN(bs); k++)
            buf_free(bs[k]);
    }
    struct buf *bs[] = {&m->deg, &m->heads, &m->g[0], &m->g[1], &m->tmp, &m->gae, &m->gas, &m->gel, &m->ger};
    for (size_t k = 0; k < SL_ARRAY_LEN(bs); k++)
        buf_free(bs[k]);
    free(m->params);
    free(m->grads);
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
    size_t e = m->c.kind == MODEL_MLP ? 0 : ops_block_edges(&l->blk);
    int rc = 0;
    if (!l->last) {
        rc |= buf_need(&l->act, FLOATS(nd, l->out));
        if (train && m->c.dropout > 0.0f)
            rc |= buf_need(&l->mask, (size_t)nd * l->out);
    }
    switch (m->c.kind) {
    case MODEL_SAGE:
        rc |= buf_need(&l->agg, FLOATS(nd, l->in));
        break;
    case MODEL_GCN:
        rc |= buf_need(&l->agg, FLOATS(nd, l->in));
        rc |= buf_need(&l->nsrc, FLOATS(ns, 1));
        rc |= buf_need(&l->ndst, FLOATS(nd, 1));
        rc |= buf_need(&m->deg, (size_t)ns * sizeof(uint32_t));
        break;
    case MODEL_GAT:
        rc |= buf_need(&l->z, FLOATS(ns, (size_t)l->heads * l->hd));
        rc |= buf_need(&l->el, FLOATS(ns, l->heads));
        rc |= buf_need(&l->er, FLOATS(nd, l->heads));
        rc |= buf_need(&l->ae, FLOATS(e, l->heads));
        rc |= buf_need(&l->as, FLOATS(nd, l->heads));
        if (l->last)
            rc |= buf_need(&m->heads, FLOATS(nd, (size_t)l->heads * l->hd));
        break;
    case MODEL_MLP:
        break;
    }
    return rc ? -ENOMEM : 0;
}

/* Layer l from l->hin to out (n_dst, l->out), before ReLU and dropout. */
static void layer_forward(struct model *m, struct layer *l, float *out)
{
    const float *P = m->params;
    const struct ops_block *b = &l->blk;
    uint32_t nd = b->n_dst;
    switch (m->c.kind) {
    case MODEL_SAGE:
        ops_agg_mean_fwd(F(l->agg), b, l->hin, l->in);
        ops_linear_fwd(out, l->hin, P + l->w, nd, l->in, l->out, false); /* self: the first n_dst rows */
        ops_linear_fwd(out, F(l->agg), P + l->w2, nd, l->in, l->out, true);
        break;
    case MODEL_GCN:
        ops_gcn_norm(F(l->nsrc), F(l->ndst), m->deg.p, b);
        ops_agg_gcn_fwd(F(l->agg), b, F(l->nsrc), F(l->ndst), l->hin, l->in);
        ops_linear_fwd(out, F(l->agg), P + l->w, nd, l->in, l->out, false);
        break;
    case MODEL_GAT: {
        uint32_t H = l->heads, w = H * l->hd;
        ops_linear_fwd(F(l->z), l->hin, P + l->w, b->n_src, l->in, w, false);
        ops_gat_score_fwd(F(l->el), F(l->z), P + l->a_src, b->n_src, H, l->hd);
        ops_gat_score_fwd(F(l->er), F(l->z), P + l->a_dst, nd, H, l->hd);
        ops_gat_edge_fwd(F(l->ae), F(l->as), b, F(l->el), F(l->er), H, OPS_GAT_SLOPE);
        ops_edge_softmax_fwd(F(l->ae), F(l->as), b, H);
        float *cat = l->last ? F(m->heads) : out;
        ops_gat_sum_fwd(cat, b, F(l->ae), F(l->as), F(l->z), H, l->hd);
        ops_bias_fwd(cat, P + l->b, nd, w);
        if (l->last)
            ops_head_mean_fwd(out, cat, nd, H, l->hd);
        return;
    }
    case MODEL_MLP:
        ops_linear_fwd(out, l->hin, P + l->w, nd, l->in, l->out, false);
        break;
    }
    ops_bias_fwd(out, P + l->b, nd, l->out);
}

int model_forward(struct model *m, const struct ops_block *blocks, uint32_t nblocks, uint32_t targets,
                  const float *x, bool train, uint64_t dropout_seed, float *logits, char *err, size_t errlen)
{
    m->ready = false;
    uint32_t L = m->c.layers;
    bool mlp = m->c.kind == MODEL_MLP;
    if (!x || !logits || (!mlp && !blocks))
        return sl_errf(err, errlen, -EINVAL, "model_forward: no batch, input or output");
    if (!mlp && nblocks != L)
        return sl_errf(err, errlen, -EINVAL,
                       "the batch has %u blocks but the %s model has %u layers: model.fanouts must have one "
                       "entry per layer",
                       nblocks, kind_name(m->c.kind), L);
    for (uint32_t i = 0; !mlp && i < L; i++)
        if (blocks[i].n_dst > blocks[i].n_src || (i + 1 < L && blocks[i].n_dst != blocks[i + 1].n_src) ||
            (i + 1 == L && blocks[i].n_dst != targets))
            return sl_errf(err, errlen, -EINVAL,
                           "model_forward: block %u (%u -> %u nodes) does not chain with the next layer's or the "
                           "%u targets: the blocks must come from one batch of model.fanouts, in layer order",
                           i, blocks[i].n_src, blocks[i].n_dst, targets);
    uint32_t B = targets;
    uint64_t st = dropout_seed; /* layer i's mask: output i of this stream */
    const float *hin = x;
    for (uint32_t i = 0; i < L; i++) {
        struct layer *l = &m->l[i];
        l->blk = mlp ? (struct ops_block){.n_dst = B, .n_src = B} : blocks[i];
        l->hin = hin;
        if (layer_buffers(m, l, train) != 0)
            return sl_errf(err, errlen, -ENOMEM, "out of memory for layer %u's activations (%u x %u rows)", i,
                           l->blk.n_src, l->in);
        float *out = l->last ? logits : F(l->act);
        layer_forward(m, l, out);
        uint64_t seed = sl_splitmix64(&st);
        l->dropped = false;
        if (!l->last) {
            size_t n = (size_t)l->blk.n_dst * l->out;
            ops_relu_fwd(out, n);
            if (train && m->c.dropout > 0.0f) {
                ops_dropout_fwd(out, l->mask.p, n, m->c.dropout, seed);
                l->dropped = true;
            }
        }
        hin = out;
    }
    m->ready = train;
    m->b = B;
    return 0;
}

float model_loss(const float *logits, const int32_t *labels, uint32_t b, uint32_t classes, float *dlogits,
                 uint32_t *labelled, uint32_t *correct)
{
    return ops_cross_entropy(logits, labels, b, classes, dlogits, labelled, correct);
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* Layer l's backward from dout (n_dst, out; after ReLU and dropout's
 * backward) into the parameter gradients and, when dx is not NULL, the
 * gradient of its input dx (n_src, in). */
static int layer_backward(struct model *m, struct layer *l, float *dout, float *dx)
{
    const float *P = m->params;
    float *G = m->grads;
    const struct ops_block *b = &l->blk;
    uint32_t nd = b->n_dst, ns = b->n_src;
    switch (m->c.kind) {
    case MODEL_SAGE:
        ops_linear_bwd_w(G + l->w, dout, l->hin, nd, l->in, l->out, false);
        ops_linear_bwd_w(G + l->w2, dout, F(l->agg), nd, l->in, l->out, false);
        ops_bias_bwd(G + l->b, dout, nd, l->out);
        if (dx) {
            if (buf_need(&m->tmp, FLOATS(nd, l->in)))
                return -ENOMEM;
            ops_linear_bwd_x(dx, dout, P + l->w, nd, l->in, l->out, false);
            ops_zero(dx + (size_t)nd * l->in, COUNT(ns - nd, l->in));
            ops_linear_bwd_x(F(m->tmp), dout, P + l->w2, nd, l->in, l->out, false);
            ops_agg_mean_bwd(dx, b, F(m->tmp), l->in);
        }
        return 0;
    case MODEL_GCN:
        ops_linear_bwd_w(G + l->w, dout, F(l->agg), nd, l->in, l->out, false);
        ops_bias_bwd(G + l->b, dout, nd, l->out);
        if (dx) {
            if (buf_need(&m->tmp, FLOATS(nd, l->in)))
                return -ENOMEM;
            ops_linear_bwd_x(F(m->tmp), dout, P + l->w, nd, l->in, l->out, false);
            ops_zero(dx, COUNT(ns, l->in));
            ops_agg_gcn_bwd(dx, b, F(l->nsrc), F(l->ndst), F(m->tmp), l->in);
        }
        return 0;
    case MODEL_GAT: {
        uint32_t H = l->heads, w = H * l->hd;
        size_t e = ops_block_edges(b);
        if (buf_need(&m->tmp, FLOATS(ns, w)) || buf_need(&m->gae, FLOATS(e, H)) || buf_need(&m->gas, FLOATS(nd, H)) ||
            buf_need(&m->gel, FLOATS(ns, H)) || buf_need(&m->ger, FLOATS(nd, H)))
            return -ENOMEM;
        float *dcat = dout;
        if (l->last) { /* m->heads was sized by the forward */
            dcat = F(m->heads);
            ops_head_mean_bwd(dcat, dout, nd, H, l->hd);
        }
        ops_bias_bwd(G + l->b, dcat, nd, w);
        float *dz = F(m->tmp);
        ops_zero(dz, COUNT(ns, w));
        ops_gat_sum_bwd(dz, F(m->gae), F(m->gas), b, F(l->ae), F(l->as), F(l->z), dcat, H, l->hd);
        ops_edge_softmax_bwd(F(m->gae), F(m->gas), F(l->ae), F(l->as), b, H);
        ops_zero(F(m->gel), COUNT(ns, H));
        ops_zero(F(m->ger), COUNT(nd, H));
        ops_gat_edge_bwd(F(m->gel), F(m->ger), b, F(m->gae), F(m->gas), F(l->el), F(l->er), H, OPS_GAT_SLOPE);
        ops_zero(G + l->a_src, COUNT(H, l->hd));
        ops_zero(G + l->a_dst, COUNT(H, l->hd));
        ops_gat_score_bwd(dz, G + l->a_src, F(m->gel), F(l->z), P + l->a_src, ns, H, l->hd);
        ops_gat_score_bwd(dz, G + l->a_dst, F(m->ger), F(l->z), P + l->a_dst, nd, H, l->hd);
        ops_linear_bwd_w(G + l->w, dz, l->hin, ns, l->in, w, false);
        if (dx)
            ops_linear_bwd_x(dx, dz, P + l->w, ns, l->in, w, false);
        return 0;
    }
    case MODEL_MLP:
        ops_linear_bwd_w(G + l->w, dout, l->hin, nd, l->in, l->out, false);
        ops_bias_bwd(G + l->b, dout, nd, l->out);
        if (dx)
            ops_linear_bwd_x(dx, dout, P + l->w, nd, l->in, l->out, false);
        return 0;
    }
    return -EINVAL;
}

int model_backward(struct model *m, const float *dlogits, char *err, size_t errlen)
{
    if (!m->ready)
        return sl_errf(err, errlen, -EINVAL, "model_backward: no training forward pass to differentiate");
    if (!dlogits)
        return sl_errf(err, errlen, -EINVAL, "model_backward: no gradient of the logits");
    uint32_t L = m->c.layers;
    int cur = 0;
    if (buf_need(&m->g[cur], FLOATS(m->b, m->c.classes)))
        goto nomem;
    ops_copy(F(m->g[cur]), dlogits, COUNT(m->b, m->c.classes));
    for (uint32_t i = L; i-- > 0;) {
        struct layer *l = &m->l[i];
        float *dout = F(m->g[cur]);
        size_t n = (size_t)l->blk.n_dst * l->out;
        if (!l->last) {
            if (l->dropped)
                ops_dropout_bwd(dout, l->mask.p, n, m->c.dropout);
            ops_relu_bwd(dout, F(l->act), n);
        }
        float *dx = NULL;
        if (i > 0) {
            if (buf_need(&m->g[!cur], FLOATS(l->blk.n_src, l->in)))
                goto nomem;
            dx = F(m->g[!cur]);
        }
        if (layer_backward(m, l, dout, dx) != 0)
            goto nomem;
        cur = !cur;
    }
    return 0;
nomem:
    return sl_errf(err, errlen, -ENOMEM, "out of memory for the backward pass");
}

/* ---- optimizers ---------------------------------------------------------------------------------- */

int adam_init(struct adam *a, size_t n, float lr)
{
    memset(a, 0, sizeof *a);
    a->lr = lr;
    a->beta1 = 0.9f;
    a->beta2 = 0.999f;
    a->eps = 1e-8f;
    a->n = n;
    a->m = calloc(n ? n : 1, sizeof *a->m);
    a->v = calloc(n ? n : 1, sizeof *a->v);
    if (!a->m || !a->v) {
        adam_free(a);
        return -ENOMEM;
    }
    return 0;
}

void adam_free(struct adam *a)
{
    if (!a)
        return;
    free(a->m);
    free(a->v);
    a->m = a->v = NULL;
}

void adam_step(struct adam *a, float *params, const float *grads)
{
    a->step++;
    ops_adam(params, grads, a->m, a->v, a->n, a->lr, a->beta1, a->beta2, a->eps, a->step);
}

void sgd_step(float *params, const float *grads, size_t n, float lr)
{
    ops_sgd(params, grads, n, lr);
}
