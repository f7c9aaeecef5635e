/* predict.h - the files of a prediction run (gnnlaunch --predict;
 * docs/inference.md): what the launcher creates and the trainers fill.
 *
 * In the output directory, each a NumPy .npy file (version 1.0, its
 * header padded so that the data starts at PREDICT_HEADER bytes, C
 * order, little-endian):
 *     nodes.npy       int64 (n,)          the predicted node ids, ascending
 *     logits.npy      float32 (n, C)      row i: node nodes[i]'s logits
 *     embeddings.npy  float32 (n, W)      its final-layer embedding (the
 *                                         last layer's input; W =
 *                                         model_embed_width)
 *     pred.npy        int64 (n,)          argmax of its logits (the first
 *                                         of equal maxima, as numpy.argmax)
 * The launcher creates all four at full size (zeros, sparse) before the
 * stages start; each trainer maps the last three shared and writes the
 * rows of its own batches' targets, which no other rank has (the
 * schedule shares the nodes out), then msyncs. In the run directory,
 * PREDICT_RUN_FILE says "checkpoint=PATH" and "out=PATH", one per line.
 *
 * Errors: 0 or -errno with a message naming the file. */
#ifndef SLUICE_STAGES_PREDICT_H
#define SLUICE_STAGES_PREDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREDICT_RUN_FILE "predict"
#define PREDICT_HEADER 128

enum { PREDICT_NODES, PREDICT_LOGITS, PREDICT_EMB, PREDICT_PRED, PREDICT_FILES };
extern const char *const predict_file_name[PREDICT_FILES]; /* "nodes.npy", ... */

struct predict_files {
    uint64_t n;              /* predicted nodes */
    uint32_t classes, width; /* C and W */
    const int64_t *nodes;    /* (n) ascending */
    float *logits, *emb;     /* (n, C), (n, W) */
    int64_t *pred;           /* (n) */
    void *map[PREDICT_FILES];
    size_t len[PREDICT_FILES];
};

int predict_write_run_file(const char *path, const char *ckpt, const char *out, char *err, size_t errlen);
int predict_read_run_file(const char *path, char *ckpt, size_t ckpt_len, char *out, size_t out_len, char *err,
                          size_t errlen);

/* Creates the four files in dir (which exists) for the ids (n of them,
 * ascending, distinct). */
int predict_create(const char *dir, const uint64_t *ids, uint64_t n, uint32_t classes, uint32_t width, char *err,
                   size_t errlen);

/* Maps dir's files (read-write) and checks their headers agree with each
 * other; f is zeroed first and may be passed to predict_unmap whatever
 * this returns. */
int predict_map(struct predict_files *f, const char *dir, char *err, size_t errlen);

/* Writes a whole .npy (version 1.0, the header as above) of rows x cols
 * (cols 0: one dimension) elements of elem bytes, dtype descr ("<f4"),
 * from data: to path.tmp, fsynced, renamed to path. 0 or -errno. */
int predict_write_npy(const char *path, const char *descr, uint64_t rows, uint32_t cols, size_t elem,
                      const void *data, char *err, size_t errlen);
/* The same with the data from fill(arg, off, dst, len): the bytes
 * [off, off + len) of the array, asked for in order, a few MiB at a time
 * (a table that is not in memory); 0 or -errno with a message. */
int predict_write_npy_from(const char *path, const char *descr, uint64_t rows, uint32_t cols, size_t elem,
                           int (*fill)(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen),
                           void *arg, char *err, size_t errlen);

/* The row of node in the outputs, or -1 when it is not predicted. */
int64_t predict_row(const struct predict_files *f, uint64_t node);

/* Writes row's logits and embedding, and its argmax into pred. */
void predict_put(struct predict_files *f, uint64_t row, const float *logits, const float *emb);

/* msync and unmap (accepts a zeroed or partly mapped f). */
int predict_unmap(struct predict_files *f, char *err, size_t errlen);

#endif
