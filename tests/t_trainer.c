/* t_trainer.c - test helpers for the trainer backends (t_trainer.h). */
#include "t_util.h"

#include <inttypes.h>
#include <math.h>

#include "core/util.h"
#include "ops/ckpt.h"
#include "t_trainer.h"

#define T_TR_NODES 500u
#define T_TR_TARGETS 24u

/* The slot a node's row sits in: a permutation of the nodes (37 is prime
 * to T_TR_NODES), so that alias[i] != node id. */
static uint32_t slot_of(uint64_t node)
{
    return (uint32_t)((node * 37u + 11u) % T_TR_NODES);
}

/* A finite half of moderate size: sign, exponent 2^-6 .. 2^2, mantissa. */
static uint16_t rand_half(uint64_t *st)
{
    uint64_t r = t_mix(st);
    uint16_t sign = (uint16_t)((r & 1u) << 15), exp = (uint16_t)(9u + (r >> 1) % 9u),
             mant = (uint16_t)((r >> 8) & 0x3ffu);
    return (uint16_t)(sign | exp << 10 | mant);
}

void t_tr_data_make(struct t_tr_data *d, bool f16, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    assert_int_equal(t_csc_random(&d->g, T_TR_NODES, 4, false, seed), 0);
    d->f16 = f16;
    size_t row_bytes = (size_t)T_TR_DIM * (f16 ? 2 : 4), stride = sl_round_up(row_bytes, 64);
    d->fb.rows = aligned_alloc(64, stride * T_TR_NODES);
    assert_non_null(d->fb.rows);
    memset(d->fb.rows, 0xff, stride * T_TR_NODES); /* padding NaN: a read past a row shows */
    d->fb.stride = stride;
    d->fb.row_bytes = row_bytes;
    d->fb.nslots = T_TR_NODES;
    uint64_t st = seed ^ 0x5eedfeedull;
    for (uint64_t u = 0; u < T_TR_NODES; u++) {
        unsigned char *row = d->fb.rows + (size_t)slot_of(u) * stride;
        for (uint32_t j = 0; j < T_TR_DIM; j++) {
            if (f16) {
                uint16_t h = rand_half(&st);
                memcpy(row + 2 * j, &h, 2);
            } else {
                float x = (float)((double)(t_mix(&st) >> 40) * 0x1p-23 - 1.0);
                memcpy(row + 4 * j, &x, 4);
            }
        }
    }
    struct batch_shape s = {.batch_size = T_TR_TARGETS,
                            .layers = 2,
                            .nodes = d->g.n,
                            .edges = d->g.e,
                            .max_in_degree = t_csc_max_in_degree(&d->g),
                            .fanouts = {5, 3}};
    char err[256] = "";
    size_t size = batch_max_bytes(&s, err, sizeof err);
    if (!size)
        fail_msg("batch_max_bytes: %s", err);
    for (uint32_t k = 0; k < T_TR_BATCHES; k++) {
        d->slot[k] = aligned_alloc(64, sl_round_up(size, 64));
        assert_non_null(d->slot[k]);
        struct batch_id id = {.batch = k};
        if (t_sample_batch(&d->g, &s, T_TR_TARGETS, seed + 100 + k, &id, 0, d->slot[k], size, err, sizeof err) != 0 ||
            batch_view(d->slot[k], size, 0, &d->v[k], err, sizeof err) != 0)
            fail_msg("sampling batch %u: %s", k, err);
        struct batch_view *v = &d->v[k];
        for (uint32_t i = 0; i < batch_nodes(v); i++)
            v->alias[i] = slot_of(v->nodes[i]);
        batch_set_aliased(v);
    }
}

void t_tr_data_free(struct t_tr_data *d)
{
    for (uint32_t k = 0; k < T_TR_BATCHES; k++)
        free(d->slot[k]);
    free(d->fb.rows);
    t_csc_free(&d->g);
    memset(d, 0, sizeof *d);
}

struct trainer_backend_config t_tr_config(const struct t_tr_data *d, enum model_kind kind, float dropout, uint64_t seed)
{
    return (struct trainer_backend_config){.model = {.kind = kind,
                                                     .layers = 2,
                                                     .in_dim = T_TR_DIM,
                                                     .hidden = 8,
                                                     .classes = T_TR_CLASSES,
                                                     .heads = 2,
                                                     .dropout = dropout,
                                                     .seed = seed},
                                           .lr = 0.01f,
                                           .threads = 1,
                                           .fb = &d->fb,
                                           .f16 = d->f16};
}

struct trainer_backend *t_tr_create(const struct trainer_backend_ops *ops, const struct trainer_backend_config *c)
{
    struct trainer_backend *b = NULL;
    char err[512] = "";
    if (ops->create(&b, c, err, sizeof err) != 0)
        fail_msg("%s backend: create: %s", ops->name, err);
    assert_non_null(b);
    return b;
}

void t_tr_batch(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct batch_view *v,
                bool train, uint64_t seed, struct trainer_loss *out)
{
    char err[512] = "";
    if (ops->gather(b, v, err, sizeof err) != 0)
        fail_msg("%s backend: gather: %s", ops->name, err);
    if (ops->forward(b, v, train, seed, out, err, sizeof err) != 0)
        fail_msg("%s backend: forward: %s", ops->name, err);
    if (!train)
        return;
    if (out->labelled && ops->backward(b, NULL, err, sizeof err) != 0)
        fail_msg("%s backend: backward: %s", ops->name, err);
    if (out->labelled)
        assert_int_equal(ops->step(b, false, 1.0f), 0);
}

void t_tr_state(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct model_config *mc,
                struct trainer_state *s)
{
    char err[512] = "";
    if (ops->state(b, s, err, sizeof err) != 0)
        fail_msg("%s backend: state: %s", ops->name, err);
    assert_int_equal(s->n, model_param_count(mc));
    assert_non_null(s->params);
    assert_non_null(s->adam_m);
    assert_non_null(s->adam_v);
    assert_non_null(s->step);
}

double t_tr_close(const float *a, const float *b, size_t n, double abs_tol, double rel_tol, const char *what)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        bool ok = abs_tol == 0 && rel_tol == 0 ? memcmp(&a[i], &b[i], sizeof *a) == 0
                                               : d <= abs_tol + rel_tol * fabs((double)b[i]);
        if (!ok)
            fail_msg("%s: element %zu of %zu differs: %.9g against %.9g (tolerance %g + %g |ref|)", what, i, n,
                     (double)a[i], (double)b[i], abs_tol, rel_tol);
        if (d > worst)
            worst = d;
    }
    return worst;
}

void t_tr_loss_close(const struct trainer_loss *a, const struct trainer_loss *b, double rel_tol, const char *what)
{
    if (a->labelled != b->labelled || a->correct != b->correct)
        fail_msg("%s: counts differ: %u labelled, %u correct against %u, %u", what, a->labelled, a->correct,
                 b->labelled, b->correct);
    t_tr_close(&a->loss, &b->loss, 1, rel_tol ? 1e-7 : 0, rel_tol, what);
}

void t_tr_ckpt_save(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct model_config *mc,
                    const char *path)
{
    struct model_tensor t[MODEL_TENSORS_MAX];
    uint32_t nt;
    char err[512] = "";
    assert_int_equal(model_layout(mc, t, &nt, err, sizeof err), 0);
    struct trainer_state s;
    t_tr_state(ops, b, mc, &s);
    struct ckpt_tensor ts[3 * MODEL_TENSORS_MAX];
    char names[2 * MODEL_TENSORS_MAX][64];
    for (uint32_t i = 0; i < nt; i++) {
        snprintf(names[2 * i], sizeof names[0], "adam.m.%s", t[i].name);
        snprintf(names[2 * i + 1], sizeof names[0], "adam.v.%s", t[i].name);
        const float *src[3] = {s.params + t[i].offset, s.adam_m + t[i].offset, s.adam_v + t[i].offset};
        const char *nm[3] = {t[i].name, names[2 * i], names[2 * i + 1]};
        for (int k = 0; k < 3; k++)
            ts[k * nt + i] = (struct ckpt_tensor){.name = nm[k],
                                                  .data = src[k],
                                                  .dtype = "F32",
                                                  .ndim = t[i].ndim,
                                                  .shape = {t[i].shape[0], t[i].shape[1]}};
    }
    char step[32];
    snprintf(step, sizeof step, "%" PRIu64, *s.step);
    const char *meta[] = {"format", "sluice-checkpoint", "step", step, "backend", ops->name};
    if (ckpt_write(path, ts, 3 * nt, meta, 3, err, sizeof err) != 0)
        fail_msg("ckpt_write: %s", err);
}

void t_tr_ckpt_load(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct model_config *mc,
                    const char *path)
{
    struct model_tensor t[MODEL_TENSORS_MAX];
    uint32_t nt;
    char err[512] = "";
    assert_int_equal(model_layout(mc, t, &nt, err, sizeof err), 0);
    struct ckpt c;
    if (ckpt_read(&c, path, err, sizeof err) != 0)
        fail_msg("ckpt_read: %s", err);
    struct trainer_state s;
    t_tr_state(ops, b, mc, &s);
    for (uint32_t i = 0; i < nt; i++) {
        char name[3][64];
        snprintf(name[0], sizeof name[0], "%s", t[i].name);
        snprintf(name[1], sizeof name[1], "adam.m.%s", t[i].name);
        snprintf(name[2], sizeof name[2], "adam.v.%s", t[i].name);
        float *dst[3] = {s.params + t[i].offset, s.adam_m + t[i].offset, s.adam_v + t[i].offset};
        for (int k = 0; k < 3; k++) {
            uint32_t ndim;
            uint64_t shape[CKPT_MAX_NDIM];
            const float *src = ckpt_find(&c, name[k], "F32", &ndim, shape);
            if (!src || ndim != t[i].ndim || shape[0] != t[i].shape[0])
                fail_msg("%s: no tensor %s of the model's shape", path, name[k]);
            memcpy(dst[k], src, t[i].count * sizeof(float));
        }
    }
    const char *step = ckpt_meta(&c, "step");
    assert_non_null(step);
    *s.step = strtoull(step, NULL, 10);
    ckpt_free(&c);
    if (ops->state_loaded(b, err, sizeof err) != 0)
        fail_msg("%s backend: state_loaded: %s", ops->name, err);
}
