/* trainer.c - the model a run trains and its all-reduce size (trainer.h). */
#include "stages/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include "core/util.h"

void trainer_model_config(const struct config *c, const struct dataset_meta *m, struct model_config *out)
{
    *out = (struct model_config){
        .kind = (enum model_kind)c->model.kind,
        .layers = (uint32_t)c->model.layers,
        .in_dim = (uint32_t)m->feat_dim,
        .hidden = (uint32_t)c->model.hidden,
        .classes = m->classes,
        .heads = (uint32_t)c->model.heads,
        .out_heads = (uint32_t)c->model.out_heads,
        .dropout = (float)c->model.dropout,
        .input_dropout = (float)c->model.input_dropout,
        .attention_dropout = (float)c->model.attention_dropout,
        .activation = c->model.activation,
        .aggr = c->model.aggr,
        .seed = (uint64_t)c->train.seed,
    };
}

size_t trainer_reduce_floats(const struct config *c, const struct dataset_meta *m, char *err, size_t errlen)
{
    struct model_config mc;
    trainer_model_config(c, m, &mc);
    size_t n = model_param_count(&mc); /* from the shapes: nothing built or allocated */
    if (n == 0) {
        struct model_tensor t[MODEL_TENSORS_MAX];
        uint32_t nt;
        model_layout(&mc, t, &nt, err, errlen); /* says which key is wrong */
        return 0;
    }
    return n + 1;
}

double trainer_lr_at(const struct config *c, uint64_t i, uint64_t steps_per_epoch)
{
    const double lr = c->train.lr;
    const uint64_t warm = (uint64_t)c->train.warmup_steps;
    const uint64_t spe = steps_per_epoch ? steps_per_epoch : 1;
    double rate = lr;
    switch (c->train.lr_schedule) {
    case LR_CONSTANT:
        break;
    case LR_STEP: /* StepLR stepped per epoch */
        rate = lr * pow(c->train.lr_gamma, (double)(i / spe / (uint64_t)c->train.lr_step_epochs));
        break;
    case LR_COSINE: { /* CosineAnnealingLR stepped per batch, T_max = the steps after the warm-up */
        uint64_t total = (uint64_t)c->train.epochs * spe;
        if (total > warm && i >= warm) {
            double t = (double)(i - warm), tmax = (double)(total - warm);
            rate = lr - (lr - c->train.lr_min) * (1.0 - cos(M_PI * SL_MIN(t, tmax) / tmax)) / 2.0;
        }
        break;
    }
    }
    if (i < warm)
        rate *= (double)(i + 1) / (double)warm;
    return rate;
}

double trainer_clip_factor(const struct config *c, double norm)
{
    double clip = c->train.grad_clip;
    if (!(clip > 0) || !(norm > clip))
        return 1.0;
    return SL_MIN(1.0, clip / (norm + 1e-6));
}

void trainer_model_text(const struct model_config *mc, char *buf, size_t len)
{
    static const char *const kinds[] = {"sage", "gcn", "gat", "mlp"};
    snprintf(buf, len, "kind=%s layers=%" PRIu32 " in_dim=%" PRIu32 " hidden=%" PRIu32 " classes=%" PRIu32
                       " heads=%" PRIu32,
             (unsigned)mc->kind < 4 ? kinds[mc->kind] : "?", mc->layers, mc->in_dim, mc->hidden, mc->classes,
             mc->kind == MODEL_GAT ? mc->heads : 0);
}
