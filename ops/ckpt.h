/* ckpt.h - training checkpoints as safetensors files (DESIGN.md sections 6
 * and 8; issue 5; docs/checkpoints.md says what a checkpoint holds and how
 * to load one in PyTorch).
 *
 * The format (huggingface safetensors): an 8-byte little-endian u64 N, N
 * bytes of UTF-8 JSON header starting with '{' (padded with spaces to a
 * multiple of 8), then the data buffer. The header is one object: each key
 * names a tensor, {"dtype": "F32", "shape": [r, c], "data_offsets": [begin,
 * end]} with offsets relative to the start of the data buffer, plus an
 * optional "__metadata__" object of string values. Tensors are row-major
 * and little-endian; their byte ranges, sorted, tile the data buffer from 0
 * to its end with no hole and no overlap; names are unique; N is at most
 * 100,000,000.
 *
 * Writing (ckpt_write) is atomic: the bytes go to "<path>.partial-<pid>" in
 * the same directory, which is fsynced, renamed over path, and the
 * directory fsynced; a failure at any point unlinks the partial file, so a
 * reader finds under path either the previous file or the whole new one.
 * Header entries appear in the order given; in the data buffer tensors are
 * grouped by element size, largest first (in the given order within a
 * group), so each tensor starts at a multiple of its element size.
 *
 * Reading (ckpt_read) maps the file read-only and validates every rule
 * above before returning, plus one of Sluice's own: each tensor's data must
 * sit at a file offset that is a multiple of its element size (true of
 * every file ckpt_write and the Python safetensors package write), so that
 * ckpt_find can hand out typed pointers into the mapping. At most
 * CKPT_MAX_NDIM dimensions per tensor.
 *
 * Errors: 0 or -errno, with a message in err (may be NULL) that names the
 * file and, for a bad entry, the entry. Nothing here exits or blocks
 * beyond file I/O; ckpt_latest also prints one warning line per damaged
 * checkpoint it skips to stderr. */
#ifndef SLUICE_OPS_CKPT_H
#define SLUICE_OPS_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAX_NDIM 4
/* Bytes of JSON header at most. safetensors allows 100 MB, but the JSON
 * tree takes about 20 times its text in memory before anything in it is
 * checked (2 GB for a crafted 100 MB header), and Sluice's own headers
 * are kilobytes: 16 MiB is far above any checkpoint Sluice writes. */
#define CKPT_MAX_HEADER (16u << 20)

/* One tensor to write: data holds shape[0] x ... x shape[ndim-1] elements
 * of dtype, row-major, little-endian (ndim 0 = a scalar, one element). */
struct ckpt_tensor {
    const char *name;  /* unique, not "__metadata__", valid UTF-8 */
    const void *data;  /* may be NULL when the tensor has no element */
    const char *dtype; /* "F32", "F64", "F16", "BF16", "I64", "U64", "I32", ... */
    uint32_t ndim;     /* 0 .. CKPT_MAX_NDIM */
    uint64_t shape[CKPT_MAX_NDIM];
};

/* Bytes per element of a safetensors dtype name ("F32" -> 4), 0 if Sluice
 * does not know it (sub-byte and packed types are not supported). */
size_t ckpt_dtype_size(const char *dtype);

/* Writes n tensors and nmeta metadata pairs (meta_kv[2i] = key,
 * meta_kv[2i+1] = value, both UTF-8; any characters, JSON-escaped here) to
 * path atomically (see above). Blocks on write and fsync. Returns 0, or
 * -EINVAL for a bad argument (duplicate or reserved name, unknown dtype,
 * size overflow), or the -errno of the failing call, with a message naming
 * path; on failure nothing new is left behind. */
int ckpt_write(const char *path, const struct ckpt_tensor *t, uint32_t n, const char *const *meta_kv, uint32_t nmeta,
               char *err, size_t errlen);
/* Where a tensor's bytes come from when its data is NULL: fill(arg, off,
 * dst, len) copies the bytes [off, off + len) of it, asked for in order a
 * few MiB at a time (a table that is not in memory); 0 or -errno with a
 * message. */
struct ckpt_fill {
    int (*fill)(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen);
    void *arg;
};
/* ckpt_write with fills[i] (fills may be NULL) giving the bytes of each
 * tensor i whose data is NULL. */
int ckpt_write_from(const char *path, const struct ckpt_tensor *t, const struct ckpt_fill *fills, uint32_t n,
                    const char *const *meta_kv, uint32_t nmeta, char *err, size_t errlen);

/* A parsed entry of the header (read-only for callers). */
struct ckpt_entry {
    char *name;
    const char *dtype; /* static string, e.g. "F32" */
    uint32_t ndim;
    uint64_t shape[CKPT_MAX_NDIM];
    uint64_t begin, end; /* byte range in the data buffer */
};

/* An open checkpoint: the whole file mapped read-only, and its table. */
struct ckpt {
    void *map;
    size_t map_len;
    const uint8_t *data; /* start of the data buffer inside map */
    uint64_t data_len;
    struct ckpt_entry *e; /* n entries, in header order */
    uint32_t n;
    char **meta; /* nmeta pairs: meta[2i] key, meta[2i+1] value */
    uint32_t nmeta;
};

/* Maps and validates path. On success *c must be released with ckpt_free;
 * on failure *c is left empty (ckpt_free on it is harmless). Returns 0,
 * -EINVAL for a malformed file (the message names the file and entry),
 * -ENOMEM, or the -errno of open/fstat/mmap. */
int ckpt_read(struct ckpt *c, const char *path, char *err, size_t errlen);

/* The data of tensor name if it exists with that dtype (NULL otherwise);
 * ndim and shape (either may be NULL) receive its shape. The pointer is
 * valid until ckpt_free and aligned to the element size. */
const void *ckpt_find(const struct ckpt *c, const char *name, const char *dtype, uint32_t *ndim,
                      uint64_t shape[CKPT_MAX_NDIM]);

/* Value of a metadata key, NULL if absent. */
const char *ckpt_meta(const struct ckpt *c, const char *key);

/* Iteration over the tensors, in header order (i < ckpt_count(c)). */
uint32_t ckpt_count(const struct ckpt *c);
const char *ckpt_name(const struct ckpt *c, uint32_t i);
const struct ckpt_entry *ckpt_entry_at(const struct ckpt *c, uint32_t i);

/* Unmaps and frees; accepts a zeroed or half-built struct. */
void ckpt_free(struct ckpt *c);

/* "<dir>/epoch-<NNNNNN>.safetensors" for a checkpoint taken after `epoch`
 * completed epochs (at least 6 digits, zero-padded). 0 or -ENAMETOOLONG. */
int ckpt_path(char *out, size_t len, const char *dir, uint32_t epoch);

/* The newest checkpoint in dir that ckpt_read accepts: fills path and
 * *epoch (may be NULL). Damaged candidates are skipped with a one-line
 * warning on stderr; "epoch-*.safetensors.partial-<pid>" leftovers are
 * never candidates and are deleted when no process <pid> is alive on this
 * machine. Returns 0, -ENOENT when there is none (or dir does not exist),
 * -ENAMETOOLONG, -ENOMEM or another -errno of opendir/readdir. */
int ckpt_latest(const char *dir, char *path, size_t len, uint32_t *epoch, char *err, size_t errlen);

/* Metadata keys naming the dataset a checkpoint was trained on: its
 * identity (dataset_meta_identity, 16 hex digits) and its directory, for
 * messages. Checkpoints written before these keys existed have neither. */
#define CKPT_META_DATASET "dataset"
#define CKPT_META_DATASET_PATH "dataset_path"
/* The run a checkpoint belongs to (launcher/ckptdir.h): 16 hex digits of
 * config_run_identity, and the keys it was computed from
 * (config_run_text), for listing differences. */
#define CKPT_META_RUN "run"
#define CKPT_META_RUN_CONFIG "run_config"

/* --resume's dataset check: reads the checkpoint of `epoch` in dir and
 * compares its CKPT_META_DATASET with id. 0 when they agree or when the
 * checkpoint records no dataset (an older one); -EINVAL with a message
 * naming the checkpoint, the dataset it was trained on and dataset_dir
 * when it records another; or ckpt_read's error. */
int ckpt_check_dataset(const char *dir, uint32_t epoch, uint64_t id, const char *dataset_dir, char *err,
                       size_t errlen);

#endif
