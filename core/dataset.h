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
 * Writing: sl_dsw stages every file in a temporary directory beside OUT
 * (`.OUT.partial-<pid>`) and renames it to OUT only once dataset.toml is
 * complete, so a failed or killed run never leaves a half-written dataset
 * under OUT. Each file is written through sl_writer, which counts bytes and
 * hashes them (XXH3-64) on the way, so checksums cost no second pass. */
#ifndef SLUICE_DATASET_H
#define SLUICE_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_DATASET_FORMAT "sluice-dataset"
#define SL_DATASET_VERSION 1
#define SL_DATASET_META "dataset.toml"
/* Alignment every feature row honours (bytes); the logical block size of
 * nearly every SSD. 4 KiB-sector devices also work (docs/format.md). */
#define SL_FEAT_ALIGN 512u
/* Feature files are padded to a whole number of these at the end. */
#define SL_FEAT_FILE_PAD 4096u

typedef enum sl_dtype {
    SL_DT_NONE = 0,
    SL_DT_U32,
    SL_DT_U64,
    SL_DT_I32,
    SL_DT_I64,
    SL_DT_F32,
    SL_DT_F16,
} sl_dtype;

const char *sl_dtype_name(sl_dtype t);   /* "u32" ...; "none" */
sl_dtype sl_dtype_parse(const char *s);  /* SL_DT_NONE if unknown */
size_t sl_dtype_size(sl_dtype t);        /* bytes per element; 0 for NONE */
/* dtype of node ids (indices, splits) for a graph of n nodes. */
static inline sl_dtype sl_id_dtype(uint64_t n) { return n < (1ull << 32) ? SL_DT_U32 : SL_DT_U64; }

/* Feature row stride for rows of row_bytes: the next power of two when the
 * row is at most `align` bytes (rows then never straddle an aligned block),
 * else the next multiple of `align` (rows start on a block boundary). */
uint64_t sl_feat_row_stride(uint64_t row_bytes, uint64_t align);

/* One binary file of the dataset, as recorded in dataset.toml. */
typedef struct sl_dsfile {
    char file[64];       /* file name inside the dataset directory */
    sl_dtype dtype;
    uint64_t rows;       /* shape[0] */
    uint64_t cols;       /* shape[1]; 1 for vectors */
    uint64_t row_stride; /* bytes between row starts (features; else cols * elem) */
    uint64_t bytes;      /* exact file size */
    uint64_t xxh3;       /* XXH3-64 of the whole file */
    bool present;
} sl_dsfile;

enum { SL_F_INDPTR, SL_F_INDICES, SL_F_FEATURES, SL_F_LABELS, SL_F_TRAIN, SL_F_VAL, SL_F_TEST, SL_F_COUNT };
extern const char *const sl_dsfile_key[SL_F_COUNT]; /* "indptr", ... table names */

typedef struct sl_dataset_meta {
    uint32_t version;
    uint64_t nodes;
    uint64_t edges;
    uint64_t feat_dim;
    uint32_t classes;
    uint64_t feat_align;   /* alignment the feature layout guarantees */
    char source[512];      /* how it was made (command line), informative */
    sl_dsfile f[SL_F_COUNT];
} sl_dataset_meta;

/* Writes dataset.toml into dir atomically (temp file + fsync + rename).
 * 0 or -errno. */
int sl_meta_write(const char *dir, const sl_dataset_meta *m, char *err, size_t errlen);

/* Reads dir/dataset.toml, checks it is complete and self-consistent (shapes
 * agree with nodes/edges/feat_dim, strides and byte sizes add up without
 * overflow) and, when check_files, that every file exists with exactly the
 * recorded size (a cheap stat; checksums are gnnprep check's job).
 * Errors name the file and field. 0, -EINVAL (bad metadata), -ENOENT,
 * or another -errno. */
int sl_meta_read(const char *dir, sl_dataset_meta *m, bool check_files, char *err, size_t errlen);
/* The parsing and validation half of sl_meta_read, on dataset.toml's text
 * (path is used in messages only). 0 or -EINVAL. */
int sl_meta_parse(const char *text, size_t len, const char *path, sl_dataset_meta *m, char *err, size_t errlen);

/* The identity of the dataset m describes: XXH3-64 of a canonical text of
 * its counts and of every file's name, dtype, shape, stride, size and
 * recorded xxh3. Neither `source` nor the directory's path takes part, so
 * a moved copy is the same dataset, and any file whose recorded contents
 * differ makes another one. Checkpoints record it (docs/checkpoints.md). */
uint64_t sl_meta_identity(const sl_dataset_meta *m);

/* Most bytes of small files sl_meta_verify_small hashes at every launch. */
#define SL_VERIFY_SMALL_MAX (64ull << 20)

/* Verifies the XXH3 of the small files (labels and the three splits)
 * against dataset.toml, reading each once, when their sizes add up to at
 * most max_bytes; above that nothing is read. The graph and the features
 * are never hashed here (gnnprep check does). 0; -EINVAL naming the file
 * whose bytes differ from what dataset.toml records; or the -errno of a
 * read. Blocks on the reads (a few ms for millions of nodes). */
int sl_meta_verify_small(const char *dir, const sl_dataset_meta *m, uint64_t max_bytes, char *err, size_t errlen);

/* ---- buffered, hashing file writer ---- */
typedef struct sl_writer {
    int fd;
    char *buf;
    size_t len, cap;
    uint64_t bytes;
    void *xxh;          /* XXH3_state_t */
    char path[4096];
} sl_writer;

int sl_writer_open(sl_writer *w, const char *path, char *err, size_t errlen);
int sl_writer_write(sl_writer *w, const void *p, size_t n, char *err, size_t errlen);
/* Writes n zero bytes. */
int sl_writer_zero(sl_writer *w, size_t n, char *err, size_t errlen);
/* Flushes, fsyncs and closes; fills bytes and hash. The writer is freed. */
int sl_writer_close(sl_writer *w, uint64_t *bytes, uint64_t *xxh3, char *err, size_t errlen);
/* Closes without finishing (error paths); accepts a zeroed/closed writer. */
void sl_writer_free(sl_writer *w);

/* XXH3-64 of a whole file, streaming, with an optional progress callback.
 * 0 or -errno. */
int sl_file_xxh3(const char *path, uint64_t *hash, uint64_t *bytes, char *err, size_t errlen);

/* ---- staged dataset directory ---- */
typedef struct sl_dsw {
    char out[4096];     /* final path */
    char tmp[4096];     /* staging directory beside it */
    bool committed;
} sl_dsw;

/* Prepares staging for OUT: fails with -EEXIST if OUT exists (the message
 * says to remove it or pick another path), removes stale staging dirs of
 * dead processes, creates the staging dir. */
int sl_dsw_begin(sl_dsw *d, const char *out, char *err, size_t errlen);
/* Path of a file inside the staging dir. */
int sl_dsw_path(const sl_dsw *d, const char *name, char *path, size_t len);
/* Writes dataset.toml into staging, fsyncs and renames staging to OUT. */
int sl_dsw_commit(sl_dsw *d, const sl_dataset_meta *m, char *err, size_t errlen);
/* Removes the staging directory unless committed. Safe to call twice. */
void sl_dsw_abort(sl_dsw *d);

/* ---- feature rows ---- */
/* Streams feature rows (given as f32) into features.bin in the dataset's
 * dtype and stride, padding each row and the file end. */
typedef struct sl_featw {
    sl_writer w;
    sl_dtype dtype;
    uint64_t dim, row_bytes, stride, rows;
    unsigned char *row;  /* one padded row */
} sl_featw;

int sl_featw_open(sl_featw *fw, const char *path, sl_dtype dtype, uint64_t dim, char *err, size_t errlen);
int sl_featw_put(sl_featw *fw, const float *x /* (dim) */, char *err, size_t errlen);
/* Appends n rows already in the file's dtype and padded to its stride
 * (n * fw->stride bytes, padding zero), as a parallel producer makes them. */
int sl_featw_put_rows(sl_featw *fw, const void *rows, uint64_t n, char *err, size_t errlen);
/* Pads the file and fills the features entry of meta (rows, cols, stride,
 * bytes, hash, dtype). */
int sl_featw_close(sl_featw *fw, sl_dsfile *f, char *err, size_t errlen);
void sl_featw_free(sl_featw *fw);

/* IEEE half <-> single precision, round to nearest even, inf/nan kept. */
uint16_t sl_f32_to_f16(float f);
float sl_f16_to_f32(uint16_t h);

/* Fills an sl_dsfile for a plain vector/matrix file written by a writer. */
void sl_dsfile_set(sl_dsfile *f, const char *file, sl_dtype t, uint64_t rows, uint64_t cols,
                   uint64_t bytes, uint64_t xxh3);

#endif
