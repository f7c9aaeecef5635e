/* trainer.c - the model a run trains and its all-reduce size (trainer.h). */
#include "stages/trainer.h"

void trainer_model_config(const sl_config *c, const sl_dataset_meta *m, struct model_config *out)
{
    *out = (struct model_config){
        .kind = (enum model_kind)c->model.kind,
        .layers = (uint32_t)c->model.layers,
        .in_dim = (uint32_t)m->feat_dim,
        .hidden = (uint32_t)c->model.hidden,
        .classes = m->classes,
        .heads = (uint32_t)c->model.heads,
        .dropout = (float)c->model.dropout,
        .seed = (uint64_t)c->train.seed,
    };
}

size_t trainer_reduce_floats(const sl_config *c, const sl_dataset_meta *m, char *err, size_t errlen)
{
    struct model_config mc;
    trainer_model_config(c, m, &mc);
    struct model *model;
    if (model_create(&model, &mc, err, errlen) != 0)
        return 0;
    size_t n = model_nparams(model) + 1;
    model_destroy(model);
    return n;
}
