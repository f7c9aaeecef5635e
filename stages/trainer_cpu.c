/* trainer_cpu.c - the CPU backend of gnn-trainer (trainer_backend.h):
 * ops/model.h on the host, GEMMs and row loops on the ops thread pool,
 * feature rows read straight from the host feature buffer. Everything is
 * synchronous: each call has finished its work when it returns. state()
 * hands out the live arrays themselves (no copies), so state_loaded() has
 * nothing to do.
 *
 * Gather. When the model reads its input where it lies
 * (model_takes_rows: GraphSAGE mean/sum; f32 rows), gather only sizes x
 * for layer 0's destinations (the rows its self term and weight gradients
 * read), and forward both copies those into x, tile by tile as it reaches
 * them, and aggregates every source straight from the feature buffer
 * through the batch's aliases (model_forward_rows with dst_rows): the
 * same bits as copying every source row first, without the copy.
 * Otherwise gather copies every row of the batch into x. */
#include "stages/trainer_backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct trainer_backend {
    struct trainer_backend_config c;
    struct model *m;
    struct adam adam;
    size_t nparams;
    float *red;            /* (nparams + 1) reduce buffer: gradients, then the weight */
    float *x;              /* input rows */
    float *logits, *dlogits;
    size_t x_cap, logits_cap; /* floats */
    uint32_t x_rows;          /* rows gathered into x */
    bool rows;                /* forward reads layer 0's sources from the buffer (model_forward_rows) */
    const uint32_t *alias;    /* the batch's aliases, for that and for nonfinite_rows */
    uint32_t n_rows;          /* the batch's input rows */
    uint32_t last_targets;    /* targets of the last forward */
};

/* Grows *p to hold need floats (contents not kept). */
static int need(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    size_t c = SL_MAX(n, *cap * 2);
    float *q = realloc(*p, c * sizeof *q);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static void cpu_free(struct trainer_backend *b)
{
    if (!b)
        return;
    model_destroy(b->m);
    adam_free(&b->adam);
    free(b->red);
    free(b->x);
    free(b->logits);
    free(b->dlogits);
    free(b);
}

static int cpu_create(struct trainer_backend **out, const struct trainer_backend_config *c, char *err, size_t errlen)
{
    *out = NULL;
    if (!c->fb || !c->fb->rows)
        return sl_errf(err, errlen, -EINVAL,
                       "the feature buffer holds no rows on the host (a GPU buffer needs the GPU trainer)");
    struct trainer_backend *b = calloc(1, sizeof *b);
    if (!b)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    b->c = *c;
    ops_set_threads(c->threads);
    int rc = model_create(&b->m, &c->model, err, errlen);
    if (rc)
        goto fail;
    b->nparams = model_nparams(b->m);
    if (adam_init(&b->adam, b->nparams, c->lr) != 0) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for Adam's moments");
        goto fail;
    }
    b->adam.weight_decay = c->weight_decay;
    b->adam.decoupled = c->decoupled;
    *out = b;
    return 0;
fail:
    cpu_free(b);
    return rc;
}

static int cpu_gather(struct trainer_backend *b, const struct batch_view *v, char *err, size_t errlen)
{
    uint32_t n = batch_nodes(v), dim = b->c.model.in_dim;
    b->rows = !b->c.f16 && model_takes_rows(b->m) && batch_layers(v) > 0;
    b->alias = v->alias;
    b->n_rows = n;
    uint32_t copy = b->rows ? batch_block_dst(v, batch_block_for_layer(v, 0)) : n; /* layer 0's destinations come first */
    if (need(&b->x, &b->x_cap, (size_t)copy * dim) != 0)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %u input rows", copy);
    if (b->rows) { /* forward fills x; nonfinite_rows reads the buffer */
        b->x_rows = 0;
        return 0;
    }
    const struct featbuf *fb = b->c.fb;
    ops_gather_rows(b->x, featbuf_row(fb, 0), fb->stride, v->alias, copy, dim, b->c.f16);
    b->x_rows = copy;
    return 0;
}

static int cpu_forward(struct trainer_backend *b, const struct batch_view *v, bool train, uint64_t dropout_seed,
                       struct trainer_loss *out, char *err, size_t errlen)
{
    uint32_t nb = batch_targets(v), classes = b->c.model.classes;
    size_t cap = b->logits_cap;
    if (need(&b->logits, &b->logits_cap, (size_t)nb * classes) != 0 ||
        need(&b->dlogits, &cap, (size_t)nb * classes) != 0)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %u targets' logits", nb);
    struct ops_block blocks[MODEL_LAYERS_MAX];
    uint32_t nblocks = trainer_batch_blocks(v, blocks);
    int rc;
    if (b->rows) {
        const struct featbuf *fb = b->c.fb;
        struct model_rows src = {
            .rows = featbuf_row(fb, 0), .stride = fb->stride, .alias = b->alias, .dst_rows = b->x};
        rc = model_forward_rows(b->m, blocks, nblocks, nb, NULL, &src, train, dropout_seed, b->logits, err, errlen);
    } else {
        rc = model_forward(b->m, blocks, nblocks, nb, b->x, train, dropout_seed, b->logits, err, errlen);
    }
    if (rc)
        return rc;
    b->last_targets = nb;
    out->loss = model_loss(b->logits, v->labels, nb, classes, train ? b->dlogits : NULL, &out->labelled,
                           &out->correct);
    return 0;
}

static int cpu_backward(struct trainer_backend *b, struct reducer *r, char *err, size_t errlen)
{
    (void)r; /* sums at reduce: the CPU computes the pass in one call */
    return model_backward(b->m, b->dlogits, err, errlen);
}

static int cpu_grads_finite(struct trainer_backend *b, bool reduced, bool *finite, char *err, size_t errlen)
{
    if (reduced && !b->red)
        return sl_errf(err, errlen, -EINVAL, "grads_finite of a sum without a reduce before");
    *finite = ops_count_nonfinite(reduced ? b->red : model_grads(b->m), b->nparams) == 0;
    return 0;
}

static int cpu_nonfinite_rows(struct trainer_backend *b, uint32_t *rows, uint32_t max, uint32_t *n, char *err,
                              size_t errlen)
{
    (void)err, (void)errlen;
    size_t dim = b->c.model.in_dim;
    uint32_t found = 0;
    const struct featbuf *fb = b->c.fb;
    for (uint32_t r = 0; r < b->n_rows; r++)
        if (r < b->x_rows ? ops_count_nonfinite(b->x + (size_t)r * dim, dim)
                          : ops_count_nonfinite((const float *)featbuf_row(fb, b->alias[r]), dim)) {
            if (found < max)
                rows[found] = r;
            found++;
        }
    *n = found;
    return 0;
}

static int cpu_reduce(struct trainer_backend *b, struct reducer *r, bool real, float *weight)
{
    if (r->ops->device)
        return -EINVAL; /* host buffers only */
    size_t n = b->nparams;
    if (!b->red && !(b->red = malloc((n + 1) * sizeof *b->red)))
        return -ENOMEM;
    if (real)
        ops_copy(b->red, model_grads(b->m), n);
    else
        ops_zero(b->red, n);
    b->red[n] = real ? 1.0f : 0.0f;
    int rc = reducer_allreduce(r, b->red, n + 1);
    *weight = rc ? 0.0f : b->red[n];
    return rc;
}

static int cpu_outputs(struct trainer_backend *b, float *logits, float *emb, char *err, size_t errlen)
{
    const float *e = model_last_input(b->m);
    if (!e || !b->logits)
        return sl_errf(err, errlen, -EINVAL, "outputs before any forward");
    memcpy(logits, b->logits, (size_t)b->last_targets * b->c.model.classes * sizeof(float));
    memcpy(emb, e, (size_t)b->last_targets * model_embed_width(&b->c.model) * sizeof(float));
    return 0;
}

static int cpu_grad_sqnorm(struct trainer_backend *b, bool reduced, double *sumsq, char *err, size_t errlen)
{
    if (reduced && !b->red)
        return sl_errf(err, errlen, -EINVAL, "grad_sqnorm of a sum without a reduce before");
    *sumsq = ops_sumsq(reduced ? b->red : model_grads(b->m), b->nparams);
    return 0;
}

static void cpu_set_lr(struct trainer_backend *b, float lr)
{
    b->adam.lr = lr;
}

static int cpu_step(struct trainer_backend *b, bool reduced, float scale)
{
    if (!reduced) {
        if (scale != 1.0f)
            ops_scale(model_grads(b->m), b->nparams, scale);
        return adam_step(&b->adam, model_params(b->m), model_grads(b->m));
    }
    if (!b->red)
        return -EINVAL; /* no reduce before */
    ops_scale(b->red, b->nparams, scale);
    return adam_step(&b->adam, model_params(b->m), b->red);
}

static int cpu_state(struct trainer_backend *b, struct trainer_state *s, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    *s = (struct trainer_state){.n = b->nparams,
                                .params = model_params(b->m),
                                .adam_m = b->adam.m,
                                .adam_v = b->adam.v,
                                .step = &b->adam.step};
    return 0;
}

static int cpu_state_loaded(struct trainer_backend *b, char *err, size_t errlen)
{
    (void)b, (void)err, (void)errlen; /* the loop wrote the live arrays */
    return 0;
}

const struct trainer_backend_ops trainer_cpu_backend = {
    .name = "cpu",
    .create = cpu_create,
    .gather = cpu_gather,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .grads_finite = cpu_grads_finite,
    .nonfinite_rows = cpu_nonfinite_rows,
    .reduce = cpu_reduce,
    .grad_sqnorm = cpu_grad_sqnorm,
    .outputs = cpu_outputs,
    .set_lr = cpu_set_lr,
    .step = cpu_step,
    .state = cpu_state,
    .state_loaded = cpu_state_loaded,
    .free = cpu_free,
};
