/* trainer.c - the model a run trains and its all-reduce size (trainer.h). */
#include "stages/trainer.h"

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
