/* trainer_backend.h - the trainer's compute backend (placeholder: grows in
 * the next step). */
#ifndef SLUICE_STAGES_TRAINER_BACKEND_H
#define SLUICE_STAGES_TRAINER_BACKEND_H

#include <stdint.h>

#include "ipc/batch.h"
#include "ops/model.h"
#include "ops/ops.h"

_Static_assert(MODEL_LAYERS_MAX == BATCH_LAYERS_MAX, "a model layer per batch block");

/* The blocks of batch v in layer order, as model_forward takes them:
 * out[i] = the batch's block L-1-i (batch_block_for_layer), pointing into
 * the batch (nothing copied: valid while the batch's slot is held).
 * Returns L. out holds BATCH_LAYERS_MAX. */
static inline uint32_t trainer_batch_blocks(const struct batch_view *v, struct ops_block *out)
{
    uint32_t L = batch_layers(v);
    for (uint32_t i = 0; i < L; i++) {
        uint32_t k = batch_block_for_layer(v, i);
        out[i] = (struct ops_block){.n_dst = batch_block_dst(v, k),
                                    .n_src = batch_block_src(v, k),
                                    .indptr = v->indptr[k],
                                    .src = v->src[k]};
    }
    return L;
}

#endif
