/* pack.h - offline-sampled batches with their feature rows packed per
 * batch (DiskGNN's idea; docs/packed.md): the on-disk format that
 * `gnnprep pack` writes and that a packed run reads, and the reader.
 *
 * What a pack is. For one dataset and one configuration, every batch of
 * E epochs of every rank's schedule (stages/schedule.h, the default
 * "shuffle" schedule laid out for E epochs) sampled by the online
 * sampler's own code (sampler_sample with the schedule's targets and
 * seed), so that a batch of the pack is bit for bit the batch the
 * online sampler makes for the same (config, seed, rank, epoch, split,
 * k). The feature rows those batches read are split into two tiers by
 * how often the batches read them:
 *   hot     the most-read rows (read by at least two batches), as many
 *           as the rank's feature buffer holds beside the extraction
 *           reserve; stored once, in node order, in hot.bin, to be held
 *           in memory for the whole run;
 *   cache   (optional: gnnprep pack --cache-limit, or --disk-limit when
 *           the pack would not fit without it) the next most-read rows
 *           (read by at least two batches), stored once in cache.bin in
 *           first-touch order: walking the batches in index order, each
 *           row gets the next place when a batch first reads it, so a
 *           batch's new cache rows are one run and the rows it shares
 *           with recent batches lie near theirs; a batch reads its cache
 *           rows with a few aligned extents of cache.bin;
 *   packed  every other row a batch reads, copied into that batch's
 *           chunk (a row read by k batches is stored k times), so that
 *           a batch's rows are one contiguous extent of chunks.bin.
 *
 * Files of a pack directory (all integers little endian):
 *   pack.toml    the manifest (format "sluice-pack", version, the
 *                dataset's identity, the sampling text, the counts and
 *                byte sizes of each tier, each file's size and XXH3-64).
 *                Written last: a directory without it is not a pack.
 *   index.bin    struct pack_file_hdr (magic PACK_INDEX_MAGIC), then
 *                `count` struct pack_entry sorted by (rank, epoch, split,
 *                k) - one per batch.
 *   chunks.bin   struct pack_file_hdr (magic PACK_CHUNKS_MAGIC) in a
 *                PACK_ALIGN page, then the chunks back to back, each
 *                starting on a PACK_ALIGN boundary:
 *                  [off, off + batch_bytes)        the sealed batch image
 *                                                  (ipc/batch.h, bytes
 *                                                  [0, hdr.bytes) of the
 *                                                  slot the sampler wrote)
 *                  [rows_off, rows_off + rows x row_bytes)
 *                                                  the packed rows, in the
 *                                                  order of the batch's
 *                                                  nodes[] skipping hot
 *                                                  and cache nodes
 *                  [tail_off, + cache_ext x 16)    the batch's cache
 *                                                  extents, struct
 *                                                  pack_extent ascending
 *                                                  and disjoint
 *                  [.., + cached x 4)              per cache node of the
 *                                                  batch, in the order
 *                                                  of nodes[], the u32
 *                                                  offset of its row in
 *                                                  the extents read back
 *                                                  to back into one
 *                                                  buffer
 *                with rows_off = off + round_up(batch_bytes, PACK_ALIGN),
 *                tail_off = rows_off + round_up(rows x row_bytes, 8),
 *                and the chunk padded to `span` (a multiple of
 *                PACK_ALIGN), so a chunk is one aligned direct read, or
 *                its rows and tail one (pack_rows_len bytes).
 *   hot.bin      struct pack_file_hdr (magic PACK_HOT_MAGIC, count = hot
 *                rows) in a PACK_ALIGN page, the hot node ids (u64,
 *                ascending) padded to PACK_ALIGN, then their rows
 *                (row_bytes each, same order) padded to PACK_ALIGN.
 *   cache.bin    as hot.bin (magic PACK_CACHE_MAGIC, count = cache rows)
 *                but in first-touch order: the ids (u64) of place 0, 1,
 *                ... padded to PACK_ALIGN, then the rows in that order
 *                padded to PACK_ALIGN. Row q is at byte
 *                pack_cache_row_off(m, q). Empty (the header page, count
 *                0) when the pack has no cache tier.
 * A row is stored as features.bin holds it, without its stride padding:
 * feat_dim values of the dataset's dtype (f32 or f16).
 *
 * Binding. The manifest records dataset_meta_identity of the dataset
 * (its counts and every file's recorded checksum) and the sampling text
 * (pack_sampling_text): the keys that decide which batches exist and
 * what they hold. pack_check refuses a pack whose identity or sampling
 * text differs from a run's, naming the keys that differ.
 *
 * Threads: a struct pack is read-only after pack_open and may be shared;
 * pack_read_* use pread(2) on its descriptors (chunks.bin, cache.bin) and
 * are safe from any thread. Errors: 0 or -errno with a message in err (may be NULL) naming
 * the file and what to do. Nothing blocks but the file reads. */
#ifndef SLUICE_STAGES_PACK_H
#define SLUICE_STAGES_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dataset.h"
#include "ipc/batch.h"

#define PACK_FORMAT "sluice-pack"
#define PACK_VERSION 2u /* 2: the cache tier (cache.bin, the chunk's tail) */
#define PACK_MANIFEST "pack.toml"
#define PACK_INDEX "index.bin"
#define PACK_CHUNKS "chunks.bin"
#define PACK_HOT "hot.bin"
#define PACK_CACHE "cache.bin"
#define PACK_ALIGN 4096u /* chunk, row extent and file-section alignment (direct I/O on 512 and 4096-byte sectors) */

#define PACK_INDEX_MAGIC 0x3158444950434c53ull  /* "SLCPIDX1" */
#define PACK_CHUNKS_MAGIC 0x3143484350434c53ull /* "SLCPCHC1" */
#define PACK_HOT_MAGIC 0x31544f4850434c53ull    /* "SLCPHOT1" */
#define PACK_CACHE_MAGIC 0x3143584350434c53ull  /* "SLCPCXC1" */
/* Cache rows whose aligned blocks are at most this far apart are read in
 * one extent: reading the gap costs less than another request. The
 * default of gnnprep pack --cache-gap; the manifest's cache_gap records
 * the one a pack was made with (informative: a reader reads the extents
 * each chunk lists, whatever joined them). */
#define PACK_CACHE_GAP (16u << 10)
#define PACK_CACHE_GAP_MAX (64u << 20) /* --cache-gap at most */

/* The header at offset 0 of index.bin, chunks.bin and hot.bin. */
struct pack_file_hdr {
    uint64_t magic;
    uint32_t version;   /* PACK_VERSION */
    uint32_t entry;     /* index.bin: sizeof(struct pack_entry); hot.bin, cache.bin: row_bytes; chunks.bin: 0 */
    uint64_t count;     /* index.bin: batches; hot.bin, cache.bin: rows; chunks.bin: chunks */
    uint64_t identity;  /* dataset_meta_identity of the dataset */
};
_Static_assert(sizeof(struct pack_file_hdr) == 32, "pack file header is 32 bytes");

/* One batch of the pack. */
struct pack_entry {
    uint32_t rank, epoch; /* whose stream, which epoch */
    uint32_t split;       /* enum batch_split */
    uint32_t targets;     /* its targets */
    uint64_t k;           /* batch within the pass (schedule_pos.k) */
    uint64_t g;           /* batch number in the packed E-epoch stream of its rank */
    uint64_t off;         /* the chunk's offset in chunks.bin (a multiple of PACK_ALIGN) */
    uint64_t batch_bytes; /* the batch image's bytes (its header's `bytes`) */
    uint64_t span;        /* the chunk's bytes on disk, padding included (a multiple of PACK_ALIGN) */
    uint32_t nodes;       /* the batch's nodes (n[L]) */
    uint32_t rows;        /* of them, packed in the chunk (neither hot nor cache) */
    uint32_t cached;      /* of them, in the cache tier */
    uint32_t cache_ext;   /* extents of cache.bin holding those */
    uint64_t cache_bytes; /* the extents' bytes (what reading them reads) */
};
_Static_assert(sizeof(struct pack_entry) == 80, "pack index entry is 80 bytes");

/* One extent of cache.bin that a batch reads: [off, off + len), both
 * multiples of PACK_ALIGN. */
struct pack_extent {
    uint64_t off, len;
};

/* Where a chunk's rows start. */
static inline uint64_t pack_rows_off(const struct pack_entry *e)
{
    return e->off + (e->batch_bytes + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
}

/* Where its tail (cache extents, then the cache rows' offsets) starts,
 * relative to pack_rows_off. */
static inline uint64_t pack_tail_rel(const struct pack_entry *e, uint64_t row_bytes)
{
    return ((uint64_t)e->rows * row_bytes + 7) / 8 * 8;
}

/* Bytes of the chunk's rows and tail before padding. */
static inline uint64_t pack_rows_tail_bytes(const struct pack_entry *e, uint64_t row_bytes)
{
    return pack_tail_rel(e, row_bytes) + (uint64_t)e->cache_ext * sizeof(struct pack_extent) + (uint64_t)e->cached * 4;
}

/* What the manifest says. */
struct pack_manifest {
    uint32_t version;
    uint64_t identity;        /* dataset_meta_identity */
    uint64_t nodes;           /* the dataset's */
    uint64_t row_bytes;       /* bytes of a row in the pack (feat_dim x element size) */
    uint32_t epochs, ranks;   /* packed epochs, ranks */
    uint64_t batches;         /* index entries */
    uint64_t accesses;        /* rows the batches read, summed over batches */
    uint64_t hot_rows;        /* rows in hot.bin */
    uint64_t packed_rows;     /* rows in chunks.bin, replicas counted */
    uint64_t distinct_packed; /* distinct nodes among them */
    uint64_t max_nodes;       /* the largest batch's nodes */
    uint64_t cache_rows;      /* rows in cache.bin (distinct) */
    uint64_t cache_accesses;  /* cache rows the batches read, summed over batches */
    uint64_t cache_extents;   /* extents the batches read from cache.bin, summed */
    uint64_t cache_read;      /* bytes of those extents, summed */
    uint64_t cache_gap;       /* the joining gap the extents were made with (PACK_CACHE_GAP when not recorded) */
    uint64_t index_bytes, chunks_bytes, hot_bytes, cache_bytes; /* file sizes */
    uint64_t index_xxh3, chunks_xxh3, hot_xxh3, cache_xxh3;     /* file checksums */
    double pack_seconds;      /* what packing took */
    char sampling[2048];      /* pack_sampling_text of the config it was made for */
    char dataset[1024];       /* the dataset's path when packed (informative) */
};

/* The sampling text of a configuration: one line `key = VALUE` per key
 * that decides which batches a run has and what they hold - model.fanouts,
 * train.batch_size, train.seed, train.eval_every, pipeline.ranks, and two
 * derived lines: whether batches carry degrees (GCN with the graph's
 * norm) and whether every validation pass has a test pass (early
 * stopping). config_run_diff compares two of them. Truncated to len;
 * returns the length it needs. ranks: the world the run has (gnnlaunch
 * --gpus N: N), 0 for pipeline.ranks. */
size_t pack_sampling_text(const struct config *c, uint32_t ranks, char *buf, size_t len);

/* Writes the manifest of m into dir/pack.toml (temp file, fsync, rename). */
int pack_manifest_write(const char *dir, const struct pack_manifest *m, char *err, size_t errlen);
/* Reads and checks dir/pack.toml. -ENOENT (no manifest: not a pack, or
 * unfinished), -EINVAL (a field missing or wrong, another format or
 * version), with the file and field in the message. */
int pack_manifest_read(const char *dir, struct pack_manifest *m, char *err, size_t errlen);

/* Byte of cache.bin where cache row q starts. */
static inline uint64_t pack_cache_row_off(const struct pack_manifest *m, uint64_t q)
{
    return PACK_ALIGN + (m->cache_rows * 8 + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN + q * m->row_bytes;
}

/* An open pack. */
struct pack {
    char dir[4096];
    struct pack_manifest m;
    struct pack_entry *ent; /* (m.batches) sorted by (rank, epoch, split, k) */
    int chunks_fd;          /* chunks.bin, O_DIRECT when direct; -1 when closed */
    int cache_fd;           /* cache.bin, opened as chunks.bin is; -1 when closed */
    bool direct;
};

/* Opens the pack in dir: the manifest, the whole index (checked: header,
 * order, every chunk inside chunks.bin and aligned, rows within nodes,
 * cache extents within cache.bin), chunks.bin and cache.bin (O_DIRECT
 * unless buffered or the filesystem refuses it). Sizes and headers of
 * the files are checked against the manifest; their contents are not
 * hashed (pack_verify does). 0 or -errno. */
int pack_open(struct pack *p, const char *dir, bool buffered, char *err, size_t errlen);
void pack_free(struct pack *p);

/* Hashes the pack's files (those named by `files`, a mask of 1 << i for
 * i in index 0, chunks 1, hot 2, cache 3) and compares them with the
 * manifest's XXH3-64: 0, or -EINVAL naming the first file that changed
 * since packing and saying to make the pack again. One sequential read
 * of each file. */
#define PACK_FILE_INDEX 1u
#define PACK_FILE_CHUNKS 2u
#define PACK_FILE_HOT 4u
#define PACK_FILE_CACHE 8u
int pack_verify(const struct pack *p, unsigned files, char *err, size_t errlen);

/* Whether the pack was made from the dataset m and for the configuration
 * c with `ranks` ranks (0: pipeline.ranks): 0, or -EINVAL with a message
 * naming what differs (the dataset, or each differing sampling key) and
 * saying to run gnnprep pack again. */
int pack_check(const struct pack *p, const struct config *c, uint32_t ranks, const struct dataset_meta *m, char *err,
               size_t errlen);

/* The entry of batch k of (rank, epoch, split)'s pass, or NULL. */
const struct pack_entry *pack_find(const struct pack *p, uint32_t rank, uint32_t epoch, uint32_t split, uint64_t k);

/* Reads the chunk of e (its span: image, rows and padding) into buf (at
 * least e->span bytes, PACK_ALIGN-aligned for direct reads) with one
 * read. 0, -EIO (short read: the file changed under us) or -errno. */
int pack_read_chunk(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen);

/* Reads only the batch image of e's chunk (its first
 * pack_round(batch_bytes) bytes) into buf (that many bytes, aligned to
 * PACK_ALIGN). Errors as pack_read_chunk. */
int pack_read_image(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen);

/* Reads only the rows and the tail of e's chunk
 * (pack_round(pack_rows_tail_bytes) bytes from pack_rows_off(e)) into buf
 * (that many bytes, aligned to PACK_ALIGN), in one read, and checks the
 * tail: extents ascending, disjoint, inside cache.bin, summing to
 * e->cache_bytes, and every cache row's offset within them. Errors as
 * pack_read_chunk; -EINVAL for a tail that does not hold. */
int pack_read_rows(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen);

/* Where the PACK_ALIGN block holding the start of e's tail begins,
 * relative to pack_rows_off: the rows before it are
 * [0, pack_tail_block) of the rows read, the tail's blocks the rest. */
static inline uint64_t pack_tail_block(const struct pack_entry *e, uint64_t row_bytes)
{
    return pack_tail_rel(e, row_bytes) / PACK_ALIGN * PACK_ALIGN;
}

/* Reads only the blocks of e's chunk that hold its tail, [pack_tail_block,
 * pack_round(pack_rows_tail_bytes)) of the rows read, into the same place
 * of buf (laid out as pack_read_rows lays it out: buf is the rows' buffer,
 * aligned to PACK_ALIGN) with one read, and checks the tail as
 * pack_read_rows does; nothing for a batch without cache rows. Its extents
 * are then known before the rows, [0, pack_tail_block), are read, so that
 * both can be in flight together. Errors as pack_read_rows. */
int pack_read_tail(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen);

/* The tail of a chunk's rows read by pack_read_rows into buf. */
static inline const struct pack_extent *pack_tail_extents(const struct pack_entry *e, uint64_t row_bytes,
                                                          const void *buf)
{
    return (const struct pack_extent *)((const unsigned char *)buf + pack_tail_rel(e, row_bytes));
}
static inline const uint32_t *pack_tail_offsets(const struct pack_entry *e, uint64_t row_bytes, const void *buf)
{
    return (const uint32_t *)((const unsigned char *)buf + pack_tail_rel(e, row_bytes) +
                              (uint64_t)e->cache_ext * sizeof(struct pack_extent));
}

/* Reads [off, off + len) of cache.bin (an extent of a chunk's tail) into
 * buf (aligned to PACK_ALIGN) with one pread. Errors as pack_read_chunk. */
int pack_read_cache(const struct pack *p, uint64_t off, uint64_t len, void *buf, char *err, size_t errlen);

/* Reads hot rows [first, first + n) of hot.bin into buf (n x row_bytes). */
int pack_read_hot_rows(const struct pack *p, uint64_t first, uint64_t n, void *buf, char *err, size_t errlen);

/* Whether a run of c (train.epochs as it says) with `ranks` ranks on the
 * dataset m can be served by the pack: pack_check, then every batch of
 * every rank's schedule (stages/schedule.h, the default one) must be in
 * the pack. -EINVAL with a message naming the first batch missing and
 * what to do (pack --epochs = train.epochs: a pack of E epochs holds the
 * validation passes of its evaluating epochs and the test pass of its
 * last epoch only, so a run of fewer epochs may need one it lacks). */
int pack_check_run(const struct pack *p, const struct config *c, uint32_t ranks, const struct dataset_meta *m,
                   char *err, size_t errlen);

/* Copies the batch image at the start of a chunk read by pack_read_chunk
 * into slot (size bytes) as batch `batch` of rank `rank` (the run's
 * numbering: the header's batch and rank are rewritten, nothing else),
 * then checks it with batch_view. 0, -ENOSPC (slot too small) or -EINVAL
 * (the image is not the sealed batch the index says). */
int pack_place_batch(const struct pack_entry *e, const void *chunk, void *slot, size_t size, uint64_t batch,
                     uint32_t rank, char *err, size_t errlen);

/* The hot tier: reads hot.bin's ids into *ids (malloc'd, m.hot_rows of
 * them) and, when rows is non-NULL, its rows into *rows (malloc'd,
 * hot_rows x row_bytes). 0 or -errno. */
int pack_read_hot(const struct pack *p, uint64_t **ids, void **rows, char *err, size_t errlen);

/* The cache tier's ids in place order (cache.bin's, m.cache_rows of them,
 * malloc'd; each < nodes, none twice is not checked here). 0 or -errno. */
int pack_read_cache_ids(const struct pack *p, uint64_t **ids, char *err, size_t errlen);

/* Bytes of a section of n bytes rounded up to PACK_ALIGN. */
static inline uint64_t pack_round(uint64_t n)
{
    return (n + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
}

#endif
