/* dataset.h - the on-disk dataset format (docs/format.md) and the tools to
 * write one safely and open one cheaply.
 *
 * A dataset is a directory holding `dataset.toml` (this module writes and
 * reads it) and raw little-endian binaries:
 *   indptr.bin   u64[N+1]   CSC offsets: in-neighbours of v are
 *                           indices[indptr[v] .. indptr[v+1])
 *   indices.bin  id[E]      source node of each in-edge, ascending per node
 *   features.bin N rows of F values (f32|f16), each row padded to
 *                row_stride bytes so that any row lies inside one aligned
 *                block of `align` bytes or starts on one (O_DIRECT-safe)
 *   labels.bin   i32[N]     class in [0, C) or -1 = unlabelled
 *   train.bin, val.bin, test.bin   id[...]  node ids of each split
 * where id is u32 when N < 2^32 and u64 otherwise.
 *
 * Writing: struct dataset_dir stages every file in a temporary directory beside OUT
 * (`.OUT.partial-<pid>`) and renames it to OUT only once dataset.toml is
 * complete, so a failed or killed run never leaves a half-written dataset
 * under OUT. Each file is written through struct file_writer, which counts bytes and
 * hashes them (XXH3-64) on the way, so checksums cost no second pass. */
#ifndef SLUICE_DATASET_H
#define SLUICE_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DATASET_FORMAT "sluice-dataset"
#define DATASET_VERSION 1
#define DATASET_META_FILE "dataset.toml"
/* Alignment every feature row honours (bytes); the logical block size of
 * nearly every SSD. 4 KiB-sector devices also work (docs/format.md). */
#define DATASET_FEAT_ALIGN 512u
/* Feature files are padded to a whole number of these at the end. */
#define DATASET_FEAT_PAD 4096u

enum dtype {
    DTYPE_NONE = 0,
    DTYPE_U32,
    DTYPE_U64,
    DTYPE_I32,
    DTYPE_I64,
    DTYPE_F32,
    DTYPE_F16,
};

const char *dtype_name(enum dtype t);  /* "u32" ...; "none" */
enum dtype dtype_parse(const char *s); /* DTYPE_NONE if unknown */
size_t dtype_size(enum dtype t);       /* bytes per element; 0 for NONE */
/* dtype of node ids (indices, splits) for a graph of n nodes. */
static inline enum dtype dtype_for_ids(uint64_t n)
{
    return n < (1ull << 32) ? DTYPE_U32 : DTYPE_U64;
}

/* Feature row stride for rows of row_bytes: the next power of two when the
 * row is at most `align` bytes (rows then never straddle an aligned block),
 * else the next multiple of `align` (rows start on a block boundary). */
uint64_t dataset_row_stride(uint64_t row_bytes, uint64_t align);

/* One binary file of the dataset, as recorded in dataset.toml. */
struct dataset_file {
    char file[64];       /* file name inside the dataset directory */
    enum dtype dtype;
    uint64_t rows;       /* shape[0] */
    uint64_t cols;       /* shape[1]; 1 for vectors */
    uint64_t row_stride; /* bytes between row starts (features; else cols * elem) */
    uint64_t bytes;      /* exact file size */
    uint64_t xxh3;       /* XXH3-64 of the whole file */
    bool present;
};

enum {
    DATASET_INDPTR,
    DATASET_INDICES,
    DATASET_FEATURES,
    DATASET_LABELS,
    DATASET_TRAIN,
    DATASET_VAL,
    DATASET_TEST,
    DATASET_FILES
};
extern const char *const dataset_file_key[DATASET_FILES]; /* "indptr", ... table names */

struct dataset_meta {
    uint32_t version;
    uint64_t nodes;
    uint64_t edges;
    uint64_t feat_dim;
    uint32_t classes;
    uint64_t feat_align;   /* alignment the feature layout guarantees */
    char source[512];      /* how it was made (command line), informative */
    struct dataset_file f[DATASET_FILES];
};

/* Writes dataset.toml into dir atomically (temp file + fsync + rename).
 * 0 or -errno. */
int dataset_meta_write(const char *dir, const struct dataset_meta *m, char *err, size_t errlen);

/* Reads dir/dataset.toml, checks it is complete and self-consistent (shapes
 * agree with nodes/edges/feat_dim, strides and byte sizes add up without
 * overflow) and, when check_files, that every file exists with exactly the
 * recorded size (a cheap stat; the contents and checksums are
 * core/dataset_check.h's job, once per state of the files through
 * core/dataset_verify.h).
 * Errors name the file and field. 0, -EINVAL (bad metadata), -ENOENT,
 * or another -errno. */
int dataset_meta_read(const char *dir, struct dataset_meta *m, bool check_files, char *err, size_t errlen);
/* The parsing and validation half of dataset_meta_read, on dataset.toml's text
 * (path is used in messages only). 0 or -EINVAL. */
int dataset_meta_parse(const char *text, size_t len, const char *path, struct dataset_meta *m, char *err,
                       size_t errlen);

/* The identity of the dataset m describes: XXH3-64 of a canonical text of
 * its counts and of every file's name, dtype, shape, stride, size and
 * recorded xxh3. Neither `source` nor the directory's path takes part, so
 * a moved copy is the same dataset, and any file whose recorded contents
 * differ makes another one. Checkpoints record it (docs/checkpoints.md). */
uint64_t dataset_meta_identity(const struct dataset_meta *m);

/* ---- buffered, hashing file writer ---- */
struct file_writer {
    int fd;
    char *buf;
    size_t len, cap;
    uint64_t bytes;
    void *xxh;          /* XXH3_state_t */
    char path[4096];
};

int file_writer_open(struct file_writer *w, const char *path, char *err, size_t errlen);
int file_writer_write(struct file_writer *w, const void *p, size_t n, char *err, size_t errlen);
/* Writes n zero bytes. */
int file_writer_zero(struct file_writer *w, size_t n, char *err, size_t errlen);
/* Flushes, fsyncs and closes; fills bytes and hash. The writer is freed. */
int file_writer_close(struct file_writer *w, uint64_t *bytes, uint64_t *xxh3, char *err, size_t errlen);
/* Closes without finishing (error paths); accepts a zeroed/closed writer. */
void file_writer_free(struct file_writer *w);

/* XXH3-64 of a whole file, streaming, with an optional progress callback.
 * 0 or -errno. */
int file_xxh3(const char *path, uint64_t *hash, uint64_t *bytes, char *err, size_t errlen);

/* ---- staged dataset directory ---- */
struct dataset_dir {
    char out[4096];     /* final path */
    char tmp[4096];     /* staging directory beside it */
    bool committed;
};

/* Prepares staging for OUT: fails with -EEXIST if OUT exists (the message
 * says to remove it or pick another path), removes stale staging dirs of
 * dead processes, creates the staging dir. */
int dataset_dir_begin(struct dataset_dir *d, const char *out, char *err, size_t errlen);
/* Path of a file inside the staging dir. */
int dataset_dir_path(const struct dataset_dir *d, const char *name, char *path, size_t len);
/* Writes dataset.toml into staging, fsyncs and renames staging to OUT. */
int dataset_dir_commit(struct dataset_dir *d, const struct dataset_meta *m, char *err, size_t errlen);
/* The second half of dataset_dir_commit, for a dataset.toml written
 * otherwise (link_meta_write, core/linkdata.h), or for a directory that is no
 * dataset (gnnprep pack, gnnprep partition): fsyncs the staging dir and
 * renames it to OUT. 0 or -errno. */
int dataset_dir_rename(struct dataset_dir *d, char *err, size_t errlen);
/* Removes the staging directory unless committed. Safe to call twice. */
void dataset_dir_abort(struct dataset_dir *d);

/* ---- feature rows ---- */
/* Streams feature rows (given as f32) into features.bin in the dataset's
 * dtype and stride, padding each row and the file end. */
struct feat_writer {
    struct file_writer w;
    enum dtype dtype;
    uint64_t dim, row_bytes, stride, rows;
    unsigned char *row;  /* one padded row */
};

int feat_writer_open(struct feat_writer *fw, const char *path, enum dtype dtype, uint64_t dim, char *err,
                     size_t errlen);
int feat_writer_put(struct feat_writer *fw, const float *x /* (dim) */, char *err, size_t errlen);
/* Appends n rows already in the file's dtype and padded to its stride
 * (n * fw->stride bytes, padding zero), as a parallel producer makes them. */
int feat_writer_put_rows(struct feat_writer *fw, const void *rows, uint64_t n, char *err, size_t errlen);
/* Pads the file and fills the features entry of meta (rows, cols, stride,
 * bytes, hash, dtype). */
int feat_writer_close(struct feat_writer *fw, struct dataset_file *f, char *err, size_t errlen);
void feat_writer_free(struct feat_writer *fw);

/* IEEE half <-> single precision, round to nearest even, inf/nan kept. */
uint16_t half_from_f32(float f);
float half_to_f32(uint16_t h);

/* Fills an struct dataset_file for a plain vector/matrix file written by a writer. */
void dataset_file_set(struct dataset_file *f, const char *file, enum dtype t, uint64_t rows, uint64_t cols,
                      uint64_t bytes, uint64_t xxh3);

#endif
