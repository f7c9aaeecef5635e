/* linkenc.h - the GNN encoder of link prediction (issue 23, MariusGNN;
 * docs/link.md, "The GNN encoder"): GraphSAGE over sampled neighbourhoods
 * of the training graph, whose layer-0 input is the learnt node
 * embeddings, under the DistMult/ComplEx decoder of ops/kge.h.
 *
 * Graph. The training triples as an undirected graph without relation
 * types: triple (h, r, t) makes h an in-neighbour of t and t one of h
 * (MariusGNN samples both directions). Built once in memory from the
 * triples as a CSC (struct sampler_topo, mode MEMORY): node v's list holds
 * its neighbours in the order of the triples that name it, so the graph,
 * and every batch sampled from it, is a function of the triples alone.
 * Ids are 32-bit: nodes and 2 x triples must be below 2^32.
 *
 * A batch. linkenc_sample takes the ids the decoder needs (heads, tails
 * and negatives, repeats allowed), makes their distinct set, ascending,
 * the targets of one sampled neighbourhood (stages/sampler.h's sampler:
 * model.fanouts per hop, uniform without replacement, all neighbours at
 * or under the fanout), seeded by sampler_batch_seed(seed, epoch, 0,
 * batch): the same batch for any thread count. The caller then copies the
 * embedding row of every sampled node (linkenc_nodes) into linkenc_input
 * and calls linkenc_forward, which runs the layers (model.c's sage: h'_v
 * = W_self h_v + W_neigh aggr_{u in N(v)} h_u + b, the activation between
 * layers, none after the last, no dropout) and writes the encoded row of
 * every id asked for. After the decoder's step, linkenc_backward takes the
 * gradients of those rows (summed per target in id order), runs the
 * backward and leaves the gradient of every sampled node's input row in
 * linkenc_input_grad (rows distinct: one Adagrad step each, by the
 * caller), then one Adam step on the weights (torch's Adam, betas 0.9,
 * 0.999, eps 1e-8, at opts.lr: link.encoder_lr).
 *
 * Evaluation. linkenc_encode_all encodes every node with its full
 * neighbourhood (no sampling: each layer once over the whole graph, as
 * gnnlaunch --predict --exact), so the ranks do not depend on a draw.
 * The mean over all neighbours is the expectation of the sampled mean.
 *
 * Errors: 0 or -errno with a message. Threads: one caller (the ops' pool
 * threads the GEMMs). */
#ifndef SLUICE_STAGES_LINKENC_H
#define SLUICE_STAGES_LINKENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "ipc/batch.h"
#include "ops/model.h"
#include "stages/sampler.h"

struct linkenc_opts {
    uint32_t layers;                   /* 1 .. MODEL_LAYERS_MAX */
    int64_t fanouts[MODEL_LAYERS_MAX]; /* per hop, first = the targets' neighbours; -1 all; 0 none */
    enum model_aggr aggr;
    enum model_activation activation;
    uint32_t dim;                      /* the embedding width: every layer d -> d */
    float lr;                          /* Adam's */
    uint64_t seed;                     /* weights (Glorot, model.c) and batches */
};

struct linkenc {
    struct linkenc_opts o;
    struct sampler_topo topo; /* the training graph, both directions */
    uint32_t *indptr32;       /* (nodes + 1) the same offsets, 32-bit, for linkenc_encode_all */
    struct sampler smp;
    struct model *net;
    struct adam adam;
    uint32_t max_ids;         /* most ids a batch may ask for (init's) */
    void *slot;               /* one sampled batch */
    size_t slot_size;
    struct batch_view view;
    struct ops_block blocks[MODEL_LAYERS_MAX];
    uint64_t *targets;        /* (max_ids) the batch's distinct ids, ascending */
    uint32_t ntargets;
    uint32_t *pos;            /* (max_ids) id i of the batch is target pos[i] */
    uint32_t nids;
    float *x;                 /* (sampled nodes, d) the input rows */
    float *out, *dout;        /* (targets, d) encoded rows and their gradients */
    uint64_t edges_sampled;   /* of every block, since init */
    uint64_t nodes_sampled;   /* sampled nodes (linkenc_count) summed over batches, since init */
    uint64_t batches;         /* linkenc_sample calls, since init */
    /* out of core (linkenc_set_buffer): the sampler's filter */
    uint32_t *node_pos;       /* (nodes) the identity: partitions are id ranges */
    uint8_t *part_in;         /* (parts) */
    uint32_t parts;
    uint32_t stream_chunk;    /* linkenc_encode_file's destinations a chunk; 0: LINKENC_CHUNK */
};

/* Where the training triples come from (linkooc_triples' shape): read
 * copies triples first .. first+count-1 into dst (head, relation, tail as
 * u64), count at most 65536, in order, twice over. 0 or -errno. */
struct linkenc_triples {
    int (*read)(void *arg, uint64_t first, uint64_t count, uint64_t *dst, char *err, size_t errlen);
    void *arg;
};

/* The encoder over `nodes` nodes and the n training triples (n rows of
 * head, relation, tail; all ids in range), for batches asking for up to
 * max_ids rows. 0, -EINVAL (bad opts, or ids past 32 bits: the message
 * names the key), -ENOMEM. */
int linkenc_init(struct linkenc *e, uint64_t nodes, const uint64_t *triples, uint64_t n, uint32_t max_ids,
                 const struct linkenc_opts *o, char *err, size_t errlen);
/* The same with the triples read from src (out of core: never held whole;
 * the graph itself is, 4 bytes an edge end and 12 a node). */
int linkenc_init_read(struct linkenc *e, uint64_t nodes, const struct linkenc_triples *src, uint64_t n,
                      uint32_t max_ids, const struct linkenc_opts *o, char *err, size_t errlen);
void linkenc_free(struct linkenc *e);

/* Out of core (stages/linkooc.h): from now on neighbourhoods are sampled
 * only among the nodes of partitions in[0 .. nin) of `parts` partitions of
 * part_nodes consecutive ids (the buffer state's), as the node-
 * classification partition mode does (sampler_set_filter: each node's
 * neighbours are cut to those in the buffer first, then the fanout is
 * drawn among them). Every id a batch asks for must be in. Between
 * batches only. 0, -ENOMEM. */
int linkenc_set_buffer(struct linkenc *e, uint64_t part_nodes, uint32_t parts, const uint32_t *in, uint32_t nin,
                       char *err, size_t errlen);

/* Samples the neighbourhood of ids[0 .. k) (k <= max_ids) for batch
 * `batch` of epoch `epoch`. Then linkenc_nodes() lists the sampled nodes'
 * global ids, distinct, and linkenc_input() is where their input rows go
 * (row i for node i, d floats). */
int linkenc_sample(struct linkenc *e, const uint64_t *ids, uint32_t k, uint32_t epoch, uint64_t batch, char *err,
                   size_t errlen);
static inline uint32_t linkenc_count(const struct linkenc *e)
{
    return batch_nodes(&e->view);
}
static inline const uint64_t *linkenc_nodes(const struct linkenc *e)
{
    return e->view.nodes;
}
static inline float *linkenc_input(struct linkenc *e)
{
    return e->x;
}
/* The layers over the input rows: dst (k, d) gets the encoded row of each
 * id of the last linkenc_sample, in its order. */
int linkenc_forward(struct linkenc *e, float *dst, char *err, size_t errlen);
/* The backward of the last forward from the gradients grad (k, d) of its
 * rows; leaves the input rows' gradients in linkenc_input_grad (count
 * rows) and steps the weights. */
int linkenc_backward(struct linkenc *e, const float *grad, char *err, size_t errlen);
static inline const float *linkenc_input_grad(const struct linkenc *e)
{
    return model_input_grad(e->net);
}
/* The weights' gradient of the last backward is not applied when step is
 * false (gradient checks); linkenc_backward is linkenc_backward_step(e,
 * grad, true). */
int linkenc_backward_step(struct linkenc *e, const float *grad, bool step, char *err, size_t errlen);

/* Every node encoded with its whole neighbourhood: out (nodes, d) from
 * the table in (nodes, d). 0 or -ENOMEM. */
int linkenc_encode_all(struct linkenc *e, const float *in, float *out, char *err, size_t errlen);

/* The same for a table too large to hold (out of core): the input rows
 * come through get (rows first .. first+count-1 into dst, count at most
 * 16384; link_eval_opts.rows's shape) and every node's encoded row goes
 * into the file `path` ((nodes, d) float32, created or truncated), layer
 * after layer (a layer's output beside it in path.layer, removed after),
 * destinations in chunks of LINKENC_CHUNK, each chunk's sources gathered
 * from the layer's input (the chunk in one call, each neighbour in one).
 * The same rows as linkenc_encode_all. Memory: one chunk's sources and
 * one node map (4 bytes a node). 0 or -errno with a message. */
#define LINKENC_CHUNK 4096u
int linkenc_encode_file(struct linkenc *e,
                        int (*get)(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen),
                        void *arg, const char *path, char *err, size_t errlen);
/* linkenc_encode_file's output as link_eval_opts.rows (arg a struct
 * linkenc_file): rows read from the open file. */
struct linkenc_file {
    int fd;
    uint32_t d;
};
int linkenc_file_rows(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen);

/* The weights as the model lays them out (model.h: model_tensor), for
 * checkpoints; Adam's moments are e->adam.m and .v, its step e->adam.step. */
static inline float *linkenc_params(struct linkenc *e)
{
    return model_params(e->net);
}
static inline size_t linkenc_nparams(const struct linkenc *e)
{
    return model_nparams(e->net);
}

#endif
