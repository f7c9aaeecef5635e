/* t_batch.h - test helpers for sampled batches (ipc/batch.h): a small CSC
 * graph in memory (random, or loaded from a dataset) and a reference
 * neighbour sampler that writes a batch through the batch writer, so a
 * batch can be rebuilt from its seed by any process and compared. Shared
 * by test_batch.c and the test stage programs (test_stage.c), so nothing
 * here uses cmocka: functions return 0 or -errno with a message. */
#ifndef SLUICE_T_BATCH_H
#define SLUICE_T_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "ipc/batch.h"

struct t_csc {
    uint64_t n, e;
    uint64_t *indptr;  /* (n + 1) */
    uint32_t *indices; /* (e) in-neighbours of each node */
    int32_t *labels;   /* (n), or NULL: label = id % 7 */
};

/* SplitMix64 step: a seeded stream every process can repeat. */
uint64_t t_mix(uint64_t *state);

/* A random graph of n nodes: in-degrees uniform in [0, 2 * avg_deg], or,
 * with hubs, one node in 32 gets up to 16 * avg_deg; sources uniform
 * (duplicates and self loops allowed, as in an imported multigraph). */
int t_csc_random(struct t_csc *g, uint64_t n, uint32_t avg_deg, bool hubs, uint64_t seed);

/* Loads the topology and labels of a dataset with 32-bit ids. */
int t_csc_load(struct t_csc *g, const char *dir, const struct dataset_meta *m, char *err, size_t errlen);

void t_csc_free(struct t_csc *g);
uint64_t t_csc_max_in_degree(const struct t_csc *g);

/* How t_sample_batch writes: one call per node and edge, or through the
 * reserve calls. */
enum { T_RESERVE_NODES = 1u << 0, T_RESERVE_EDGES = 1u << 1 };

/* Samples a batch of `targets` distinct random targets of g (seeded by
 * seed) with the fanouts of s, without replacement, and writes it into
 * slot[0 .. size) with batch_init .. batch_finish. opts: T_RESERVE_*.
 * 0 or the writer's error (message in err). */
int t_sample_batch(const struct t_csc *g, const struct batch_shape *s, uint32_t targets, uint64_t seed,
                   const struct batch_id *id, unsigned opts, void *slot, size_t size, char *err, size_t errlen);

/* 0 when two views hold the same batch (header counts and ids, labels,
 * nodes, every block; not alias[] or flags); else -1 and what differs. */
int t_batch_compare(const struct batch_view *a, const struct batch_view *b, char *msg, size_t len);

#endif
