/* partition.h - the partitioned layout of a dataset (docs/partitions.md):
 * what `gnnprep partition DATASET --parts P` writes into DATASET/parts.P/
 * and what a run with pipeline.mode = "partitions" reads.
 *
 * The nodes are put in a new order, the positions 0..N-1, and cut into P
 * partitions of S = ceil(N/P) consecutive positions (the last may hold
 * fewer): partition q holds positions [q*S, min(N, (q+1)*S)). The training
 * nodes come first, so they fill the first k = ceil(train/S) partitions
 * (MariusGNN §5.2); within the training nodes and within the others the
 * order is random (--order random) or by in-degree, highest first
 * (--order degree). Files, all raw little-endian:
 *   partition.toml     this metadata: counts, sizes, each file's XXH3, and
 *                      the identity of the dataset it was made from
 *   node_pos.bin       id[N]   position of each node
 *   pos_node.bin       id[N]   node at each position (the inverse)
 *   features.bin       P blocks of part_bytes = round_up(S * row_stride,
 *                      4096): block q holds the rows of partition q's
 *                      positions in order, each padded to the dataset's
 *                      row_stride, zeros after the last row; every block
 *                      starts 4096-aligned, so a partition is one direct
 *                      read
 *   buckets.bin        the edges, as records {u32 dst, u32 src} of local
 *                      indices (position - q*S) in their partitions, in
 *                      bucket (i, j) = edges from partition i into
 *                      partition j; column j (buckets (0, j) .. (P-1, j))
 *                      starts 4096-aligned (zeros between columns), and
 *                      each bucket is sorted by (dst, src). An edge u -> v
 *                      is the dataset's in-edge "u in the list of v".
 *   buckets_index.bin  u64[P*P][2]: (byte offset in buckets.bin, edges) of
 *                      bucket (i, j) at entry j*P + i
 * id is the dataset's node-id dtype (u32 below 2^32 nodes, else u64).
 *
 * Tied to its dataset: partition.toml records dataset_meta_identity() of
 * the dataset it was made from; parts_meta_read refuses a layout whose
 * identity is not the dataset's (remade, changed, another dataset), and a
 * layout whose files are not the size recorded. parts_verify hashes every
 * file against the recorded XXH3 (the complete check).
 *
 * Errors: 0 or -errno with a message naming the file and what to do. */
#ifndef SLUICE_CORE_PARTITION_H
#define SLUICE_CORE_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

#define PARTS_FORMAT "sluice-partitions"
#define PARTS_VERSION 1
#define PARTS_META_FILE "partition.toml"
#define PARTS_ALIGN 4096u  /* blocks and bucket columns start on these */
#define PARTS_MAX 4096u    /* most partitions a layout may have (P^2 buckets) */

/* The order of the nodes within the training nodes and within the others
 * (gnnprep partition --order): random, by in-degree, or (neighbours) the
 * others by the edges they send to training nodes, then by out-degree, so
 * that the partitions right after the training ones hold the training
 * nodes' nearest neighbourhood (docs/partitions.md, "Accuracy"). */
enum parts_order { PARTS_ORDER_RANDOM = 0, PARTS_ORDER_DEGREE, PARTS_ORDER_NEIGHBOURS, PARTS_ORDERS };
const char *parts_order_name(enum parts_order o);            /* "random", "degree", "neighbours" */
int parts_order_parse(const char *s, enum parts_order *out); /* 0 or -EINVAL */

enum { PARTS_NODE_POS, PARTS_POS_NODE, PARTS_FEATURES, PARTS_BUCKETS, PARTS_BUCKETS_INDEX, PARTS_FILES };
extern const char *const parts_file_name[PARTS_FILES]; /* "node_pos.bin", ... */
extern const char *const parts_file_key[PARTS_FILES];  /* "node_pos", ... table names */

struct parts_meta {
    uint32_t version;
    uint32_t parts;        /* P */
    uint32_t train_parts;  /* k: partitions holding training nodes */
    uint32_t eval_parts;   /* gnnprep partition --eval-first: the validation and test nodes follow the
                              training nodes, and partitions [0, eval_parts) hold all three; 0: the
                              evaluation nodes are spread with the others (partition.toml's
                              eval_parts, absent in older layouts) */
    uint64_t part_nodes;   /* S */
    uint64_t part_bytes;   /* one block of features.bin */
    uint64_t row_stride;   /* the dataset's */
    uint64_t nodes, edges, train_nodes;
    enum parts_order order;
    uint64_t seed;
    uint64_t dataset_identity;
    char source[512];
    uint64_t bytes[PARTS_FILES];
    uint64_t xxh3[PARTS_FILES];
};

/* Directory name of the layout with P partitions inside a dataset:
 * "parts.P" (several may coexist). */
void parts_dir_name(uint32_t parts, char *out, size_t len);

/* Fills the derived fields (part_nodes, part_bytes, row_stride, nodes,
 * edges, identity) of a layout of P partitions of dataset m. */
void parts_meta_init(struct parts_meta *pm, const struct dataset_meta *m, uint32_t parts);
/* The exact size every file must have (from the counts). */
uint64_t parts_file_bytes(const struct parts_meta *pm, const struct dataset_meta *m, int file);

/* Writes dir/partition.toml atomically. */
int parts_meta_write(const char *dir, const struct parts_meta *pm, char *err, size_t errlen);
/* Reads dir/partition.toml, checks it against the dataset m (identity,
 * counts) and every file's size. -ENOENT (no layout: run gnnprep
 * partition), -EINVAL (bad metadata, or made from another dataset, with
 * what to do), or another -errno. */
int parts_meta_read(const char *dir, const struct dataset_meta *m, struct parts_meta *pm, char *err, size_t errlen);
/* Hashes every file and compares with partition.toml. 0 or -EBADMSG
 * naming the first file that differs. */
int parts_verify(const char *dir, const struct parts_meta *pm, char *err, size_t errlen);

#endif
