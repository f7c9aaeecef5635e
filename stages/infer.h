/* infer.h - exact layer-wise inference over the whole graph (gnnlaunch
 * --predict --exact; docs/inference.md), as PyG's inference(): layer i is
 * computed once for every node from layer i-1's outputs for every node,
 * each destination aggregating all its in-neighbours, so nothing is
 * sampled and nothing is computed twice. The layers' outputs (N x hidden
 * floats each) go to table files in a scratch directory and are read
 * back through the page cache by the next layer, so they need not fit in
 * memory; the last layer writes the logits, and the table of its input
 * is the embeddings.
 *
 * Work is cut into chunks of destination nodes (ids in order): a chunk's
 * block holds its destinations first, then the distinct in-neighbours
 * outside it, in id order; the block's edges are each destination's
 * in-neighbour list as the dataset stores it. The result does not depend
 * on the chunk size beyond float rounding in the GEMMs. */
#ifndef SLUICE_STAGES_INFER_H
#define SLUICE_STAGES_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "ops/model.h"
#include "stages/predict.h"

struct infer_params {
    const char *dir;                /* the dataset */
    const struct dataset_meta *m;
    struct model *model;            /* CPU operators, parameters loaded */
    const struct model_config *mc;
    bool graph_degrees;             /* GCN normalised by the graph's degrees (model.gcn_norm = "graph") */
    const char *scratch;            /* where the layer tables go (removed at the end) */
    uint64_t chunk;                 /* destination nodes per step (0: 4096) */
    void (*progress)(void *arg, uint32_t layer, uint64_t done, uint64_t total); /* may be NULL */
    void *arg;
};

/* Runs every layer for every node and writes the predicted nodes' rows
 * (out->nodes) of logits, embeddings and argmax. 0 or -errno with a
 * message naming the file or the layer. */
int infer_layerwise(const struct infer_params *p, struct predict_files *out, char *err, size_t errlen);

#endif
