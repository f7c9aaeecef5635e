/* batch.h - one sampled mini-batch inside a batch arena slot (arena.h): its
 * layout, the worst-case slot size, a writer for the sampler and a checked
 * view for the stages after it (DESIGN.md sections 2-4, 6).
 *
 * Hops and blocks. A batch has L = layers blocks and L + 1 hops. Hop 0 is
 * the B targets. Block k (k = 0 .. L-1) has as destinations every node
 * found up to hop k, local ids 0 .. n[k]-1, and holds up to f[k] sampled
 * in-neighbours of each destination (f[k] = -1: all of them); sources not
 * seen before get the next local ids, which makes n[k+1]. So n[0] = B <=
 * n[1] <= ... <= n[L], nodes are deduplicated, the targets come first and
 * every hop's nodes are a prefix of the next hop's (DGL's "block" shape).
 * Each block samples its destinations afresh: a target's neighbours in
 * block 1 are drawn independently of those in block 0.
 *
 * Direction. The trainer runs GNN layer i (i = 0 is the layer that reads
 * the raw features) over block L-1-i: the first layer aggregates over the
 * block with the most nodes (block L-1: n[L] sources -> n[L-1]
 * destinations), the last over block 0 (n[1] sources -> the B targets).
 * Because destinations are a prefix of sources, a layer's output for local
 * id v is the next layer's input for the same v. batch_block_for_layer()
 * says which block a layer uses.
 *
 * Layout in a slot (all offsets from the slot start, 8-byte aligned; the
 * header records every offset and count; arrays never overlap):
 *
 *     0            struct batch_hdr
 *     labels_off   int32_t  labels[B]         class of each target
 *     nodes_off    uint64_t nodes[n[L]]       global id of each local id
 *                  (room reserved for the worst case of this B)
 *     per block k, in order k = 0 .. L-1:
 *       indptr_off[k] uint32_t indptr[n[k]+1] CSC over destinations: the
 *                                             sources of destination d are
 *       src_off[k]    uint32_t src[e[k]]      src[indptr[d] .. indptr[d+1])
 *     deg_off      uint32_t deg[n[L]]         only when the shape asks for
 *                                             degrees (deg_off 0 otherwise):
 *                                             each node's in-degree in the
 *                                             graph (saturated at 2^32 - 1)
 *     alias_off    uint32_t alias[n[L]]       feature-buffer slot per node
 *     bytes        end of the used part (<= the slot size)
 *
 * Who writes what, when. The sampler that took the slot from arena_alloc
 * writes everything with the writer below, in this order: batch_init
 * (header, room for labels and nodes), batch_add_target for each of the B
 * targets, then per block batch_begin_block, for each destination in local
 * id order its sources (batch_add_edge, or batch_reserve_edges and fill)
 * and batch_end_dst, new sources with batch_add_node (or
 * batch_reserve_nodes) as they are met, batch_end_block; then, when the
 * shape has `degrees`, batch_degrees and the degree of every node into
 * it; finally batch_finish, which places alias[] (filled with BATCH_NO_ALIAS), sets
 * `bytes` and the BATCH_SEALED flag. Only then does the sampler push the
 * slot index down the extract queue. The extractor writes alias[] (and
 * nothing else) and sets BATCH_ALIASED before pushing to the train queue;
 * the trainer and releaser only read. The rings' release/acquire orders
 * each stage's writes before the next stage's reads; at any time one
 * process holds the index and only it touches the slot (arena.h).
 *
 * Trust. Readers never trust the slot: batch_view() checks the header
 * against the slot size (overflow-checked: every array lies inside
 * [header end, bytes], bytes <= slot size, no two arrays overlap, counts
 * grow hop by hop) and, unless asked not to, the blocks themselves
 * (indptr starts at 0, never decreases, ends at e[k]; every source id is
 * below n[k+1]). The view keeps a copy of the header, so the bounds it
 * hands out cannot change under the reader. A slot still holds its last
 * batch after release: a reader compares the header's batch and epoch
 * with its descriptor (struct run_desc).
 *
 * Sizing. batch_plan() bounds every count for a shape (batch size,
 * fanouts, graph size, max in-degree, edges): with c[k] = f[k], or D when
 * f[k] = -1, or min(f[k], D) when D is known,
 *     n[0]   <= min(batch_size, N)
 *     e[k]   <= min(n[k] * c[k], E)
 *     n[k+1] <= min(n[k] + e[k], N)
 * and adds up the layout above at those bounds: the worst case, which is
 * what an arena slot must hold. Counts above 2^32 - 1 (local ids and
 * indptr are 32-bit) are refused with -EOVERFLOW. The plan's n_max[L] is
 * also the most nodes one batch can bring into the feature buffer (the
 * reserve of DESIGN.md section 4).
 *
 * Errors: 0 or -errno, with a message in err (may be NULL) where a
 * function takes one. Nothing here blocks. */
#ifndef SLUICE_IPC_BATCH_H
#define SLUICE_IPC_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h" /* MODEL_LAYERS_MAX: blocks per batch */

#define BATCH_MAGIC 0x31544142434c53ull /* "SLCBAT1\0" little endian */
#define BATCH_VERSION 2u
#define BATCH_UNKNOWN UINT64_MAX   /* batch_shape.edges / max_in_degree not known */
#define BATCH_NO_ALIAS UINT32_MAX  /* alias[] before the extractor fills it */
#define BATCH_COUNT_MAX UINT32_MAX /* most nodes or edges a batch or block may hold */

enum batch_flags {
    BATCH_SEALED = 1u << 0,  /* batch_finish ran: the sampler's part is complete */
    BATCH_ALIASED = 1u << 1, /* the extractor filled alias[] */
    BATCH_UNREFERENCED = 1u << 2, /* ... from a resident feature buffer, taking no references: nothing to release */
};

/* Which split a batch's targets come from: training batches are trained
 * on, validation and test batches only evaluated (no gradients). */
enum batch_split {
    BATCH_TRAIN = 0,
    BATCH_VAL = 1,
    BATCH_TEST = 2,
    BATCH_SPLITS = 3,
};

/* The header at offset 0 of a slot. Written by the sampler (flags also by
 * the extractor); read through batch_view(), never trusted directly. */
struct batch_hdr {
    uint64_t magic;   /* BATCH_MAGIC */
    uint32_t version; /* BATCH_VERSION */
    uint32_t flags;   /* enum batch_flags */
    uint64_t batch;   /* batch number in the rank's stream (struct run_desc.batch) */
    uint32_t epoch;
    uint32_t rank;
    uint32_t layers;                  /* L: blocks */
    uint32_t targets;                 /* B = n[0] */
    uint64_t bytes;                   /* end of the used part of the slot */
    uint32_t n[MODEL_LAYERS_MAX + 1]; /* nodes after hop k (cumulative); n[0] = B */
    uint32_t e[MODEL_LAYERS_MAX];     /* edges sampled in block k */
    uint32_t split;                   /* enum batch_split: what the targets are for */
    uint64_t labels_off, nodes_off, alias_off;
    uint64_t indptr_off[MODEL_LAYERS_MAX];
    uint64_t src_off[MODEL_LAYERS_MAX];
    uint64_t deg_off; /* 0: no degrees */
};
_Static_assert(sizeof(struct batch_hdr) == 280 && sizeof(struct batch_hdr) % 8 == 0, "batch header is 280 bytes");

/* What bounds a batch: the run's configuration and the graph. */
struct batch_shape {
    uint64_t batch_size;               /* most targets per batch (train.batch_size) */
    uint32_t layers;                   /* 1 .. MODEL_LAYERS_MAX */
    int64_t fanouts[MODEL_LAYERS_MAX]; /* per block, >= 0 or -1 = all in-neighbours */
    uint64_t nodes;                    /* N, >= 1 */
    uint64_t edges;                    /* E, or BATCH_UNKNOWN */
    uint64_t max_in_degree;            /* D, or BATCH_UNKNOWN (needed when a fanout is -1) */
    bool degrees;                      /* batches carry every node's in-degree in the graph (GCN's graph norm) */
};

/* Bounds for every count of a shape, and the bytes they need. */
struct batch_plan {
    uint32_t layers;
    uint64_t fanout_cap[MODEL_LAYERS_MAX]; /* most sources per destination in block k */
    uint64_t n_max[MODEL_LAYERS_MAX + 1];  /* most nodes after hop k */
    uint64_t e_max[MODEL_LAYERS_MAX];      /* most edges in block k */
    uint64_t max_bytes;                    /* worst-case slot use */
};

/* Bounds the counts of shape s (formulas above) into *p. 0; -EINVAL for a
 * bad shape (no layers, fanout < -1, N = 0, fanout -1 without D); or
 * -EOVERFLOW when a count passes BATCH_COUNT_MAX or the bytes overflow,
 * with a message giving the size such batches would need. */
int batch_plan(const struct batch_shape *s, struct batch_plan *p, char *err, size_t errlen);

/* The worst-case bytes of a batch of shape s (batch_plan's max_bytes), or
 * 0 with the reason in err. */
size_t batch_max_bytes(const struct batch_shape *s, char *err, size_t errlen);

/* Arena slots one rank needs so that no stage waits for a slot while
 * another could work: every queue full at once (its configured depth) and
 * every thread busy with a batch of its own - one per sampler thread
 * (being written), one per extractor thread (being filled), one held by
 * the trainer (being trained) and one by the releaser (being released).
 * More slots would only lengthen queues that are already full; fewer
 * makes samplers wait on arena_alloc while the queues have room. (The
 * release queue is not counted: the releaser empties it at once.)
 * Saturates at UINT32_MAX. */
uint32_t batch_arena_slots(uint64_t extract_queue, uint64_t train_queue, uint64_t samplers, uint64_t extractors);

/* ---- writing (the sampler) ------------------------------------------------------------ */

struct batch_id {
    uint64_t batch;
    uint32_t epoch, rank;
    uint32_t split; /* enum batch_split (0 = training) */
};

/* The sampler's handle on the slot it is filling. Errors are sticky: after
 * the first failure every call returns it again, and batch_finish reports
 * it, so a sampler may check once at the end. The sampler may read
 * nodes[0 .. nn) (the global id of every local id so far: the
 * destinations of the open block are nodes[0 .. n[k])) and plan; the
 * other fields are the writer's. */
struct batch_writer {
    unsigned char *base; /* the slot */
    size_t size;         /* its bytes */
    struct batch_hdr *h;
    struct batch_plan plan; /* bounds for this batch's B */
    uint64_t nodes_max;     /* N: global ids are below it */
    int32_t *labels;        /* (B) */
    uint64_t *nodes;        /* (plan.n_max[L]) */
    uint32_t *indptr, *src; /* current block */
    uint64_t cursor;        /* next free byte */
    uint32_t nn;            /* nodes so far */
    uint32_t block;         /* block being written, or the next one */
    bool in_block;
    uint32_t dst;       /* destinations closed in the current block */
    uint32_t ne;        /* edges in the current block */
    uint64_t dst_edges; /* edges of the current destination */
    uint32_t checked;   /* nodes already checked against N */
    bool degrees;       /* the shape asks for deg[] */
    int rc;             /* first error, or 0 */
    char err[256];      /* its message */
};

/* Starts a batch of `targets` targets (1 .. min(batch_size, N)) of shape s
 * in slot[0 .. size): writes the header and reserves room for the worst
 * case of this many targets. 0; -EINVAL (bad shape or targets, slot not
 * 8-byte aligned); -ENOSPC if size is below that worst case. */
int batch_init(struct batch_writer *w, void *slot, size_t size, const struct batch_shape *s, uint32_t targets,
               const struct batch_id *id, char *err, size_t errlen);

/* Adds the next target (local id = number of targets so far) with its
 * label; only before block 0. 0 or the sticky error. */
int batch_add_target(struct batch_writer *w, uint64_t global_id, int32_t label);

/* Opens the next block: its destinations are the nodes so far (after
 * block 0's: all B targets must have been added). */
int batch_begin_block(struct batch_writer *w);

/* Adds a new node (a source not seen before in this batch; the caller
 * deduplicates) inside a block. Returns its local id (>= 0) or the sticky
 * error: -E2BIG past the hop's bound, -ERANGE for an id >= N. */
int64_t batch_add_node(struct batch_writer *w, uint64_t global_id);

/* Appends count new nodes and returns where to write their global ids (the
 * first gets local id *first), or NULL on error. Ids are checked against N
 * at batch_end_block. */
uint64_t *batch_reserve_nodes(struct batch_writer *w, uint32_t count, uint32_t *first);

/* Adds source `local` (an id already added) to the current destination.
 * -E2BIG past the fanout or the block's edge bound, -ERANGE for an id not
 * added yet, -EPROTO outside a block or after its last destination. */
int batch_add_edge(struct batch_writer *w, uint32_t local);

/* Appends count sources to the current destination and returns where to
 * write their local ids, or NULL on error. They are checked at
 * batch_end_block (each must be below the node count by then). */
uint32_t *batch_reserve_edges(struct batch_writer *w, uint32_t count);

/* Closes the current destination and moves to the next local id. */
int batch_end_dst(struct batch_writer *w);

/* Closes the block (every destination closed) and records n[k+1], e[k];
 * checks the sources and nodes written through the reserve calls. */
int batch_end_block(struct batch_writer *w);

/* After the last block, before batch_finish, for a shape with degrees:
 * places deg[] and returns it for the caller to fill (one entry per node
 * so far, local id order), or NULL on error (sticky; -EPROTO when the
 * shape has no degrees, before the last block or twice). */
uint32_t *batch_degrees(struct batch_writer *w);

/* After the last block: places alias[] (every entry BATCH_NO_ALIAS), sets
 * bytes and BATCH_SEALED. Returns 0 or the first error of the batch
 * (message in err). The slot may then go down the extract queue. */
int batch_finish(struct batch_writer *w, char *err, size_t errlen);

/* ---- reading (extractor, trainer, releaser) --------------------------------------------- */

enum batch_view_flags {
    BATCH_VIEW_HEADER_ONLY = 1u << 0, /* skip the O(nodes + edges) check of the blocks */
};

/* A checked view of a sealed batch. Pointers go into the slot. */
struct batch_view {
    struct batch_hdr h;                       /* the header, as checked */
    const int32_t *labels;                    /* (B) */
    const uint64_t *nodes;                    /* (n[L]) global ids */
    uint32_t *alias;                          /* (n[L]) feature-buffer slots; the extractor writes them */
    uint32_t *flags;                          /* the slot's header flags (the extractor sets BATCH_ALIASED) */
    const uint32_t *indptr[MODEL_LAYERS_MAX]; /* block k: (n[k] + 1) */
    const uint32_t *src[MODEL_LAYERS_MAX];    /* block k: (e[k]) local ids < n[k+1] */
    const uint32_t *deg;                      /* (n[L]) in-degrees in the graph, or NULL when not carried */
};

/* Checks the batch in slot[0 .. size) (see Trust above) and fills *v.
 * flags: enum batch_view_flags. 0, or -EINVAL with what is wrong (bad
 * magic or version, unfinished batch, an array past the slot, counts that
 * overflow or shrink, a source id out of range, ...). */
int batch_view(void *slot, size_t size, unsigned flags, struct batch_view *v, char *err, size_t errlen);

/* The extractor, after filling v->alias: marks the batch as aliased. */
void batch_set_aliased(struct batch_view *v);
/* The same for a batch whose slots hold no references (BATCH_ALIASED |
 * BATCH_UNREFERENCED: stages/featbuf.h, "a resident buffer"). */
void batch_set_aliased_unreferenced(struct batch_view *v);

/* Counts of a view. */
static inline uint32_t batch_layers(const struct batch_view *v)
{
    return v->h.layers;
}
static inline uint32_t batch_targets(const struct batch_view *v)
{
    return v->h.targets;
}
static inline uint32_t batch_nodes(const struct batch_view *v)
{
    return v->h.n[v->h.layers];
}
static inline uint32_t batch_block_dst(const struct batch_view *v, uint32_t k)
{
    return v->h.n[k];
}
static inline uint32_t batch_block_src(const struct batch_view *v, uint32_t k)
{
    return v->h.n[k + 1];
}
static inline uint32_t batch_block_edges(const struct batch_view *v, uint32_t k)
{
    return v->h.e[k];
}
/* The block GNN layer i (0 = first, on raw features) aggregates over. */
static inline uint32_t batch_block_for_layer(const struct batch_view *v, uint32_t i)
{
    return v->h.layers - 1 - i;
}

#endif
