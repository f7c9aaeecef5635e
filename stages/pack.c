/* pack.c - the pack format's manifest, its binding to a dataset and a
 * configuration, and the reader of its index, chunks and hot tier
 * (format and contracts: pack.h). gnnprep pack (prep/pack_cmd.c) writes
 * packs; packed runs and gnnprep info read them through this file. */
#include "stages/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/toml.h"
#include "core/util.h"
#include "stages/schedule.h"

size_t pack_sampling_text(const struct config *c, uint32_t ranks, char *buf, size_t len)
{
    char fan[256];
    int n = snprintf(buf, len,
                     "model.fanouts = %s\ntrain.batch_size = %" PRId64 "\ntrain.seed = %" PRId64
                     "\ntrain.eval_every = %" PRId64 "\npipeline.ranks = %" PRIu32 "\nbatch.degrees = %s\n"
                     "batch.test_with_val = %s\n",
                     config_fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan), c->train.batch_size,
                     c->train.seed, c->train.eval_every, ranks ? ranks : (uint32_t)c->pipeline.ranks,
                     c->model.kind == MODEL_GCN && c->model.gcn_norm == GCN_NORM_GRAPH ? "true" : "false",
                     c->train.early_stop_patience > 0 ? "true" : "false");
    return n > 0 ? (size_t)n : 0;
}

/* ---- the manifest ------------------------------------------------------------------------- */

/* TOML basic string of s (newlines escaped) into out. */
static void quote(const char *s, char *out, size_t len)
{
    size_t j = 0;
    for (; *s && j + 3 < len; s++) {
        if (*s == '\n') {
            out[j++] = '\\';
            out[j++] = 'n';
        } else if (*s == '"' || *s == '\\') {
            out[j++] = '\\';
            out[j++] = *s;
        } else
            out[j++] = *s;
    }
    out[j] = '\0';
}

int pack_manifest_write(const char *dir, const struct pack_manifest *m, char *err, size_t errlen)
{
    char path[4200], tmp[4300], samp[4200], ds[2100];
    snprintf(path, sizeof path, "%s/" PACK_MANIFEST, dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    quote(m->sampling, samp, sizeof samp);
    quote(m->dataset, ds, sizeof ds);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: cannot create: %s", tmp, strerror(errno));
    fprintf(f,
            "# A pack of offline-sampled batches (docs/packed.md); written by gnnprep pack.\n"
            "format = \"" PACK_FORMAT "\"\nversion = %u\ndataset_identity = \"%016" PRIx64 "\"\ndataset = \"%s\"\n"
            "nodes = %" PRIu64 "\nrow_bytes = %" PRIu64 "\nepochs = %" PRIu32 "\nranks = %" PRIu32
            "\nbatches = %" PRIu64 "\naccesses = %" PRIu64 "\nhot_rows = %" PRIu64 "\npacked_rows = %" PRIu64
            "\ndistinct_packed = %" PRIu64 "\nmax_nodes = %" PRIu64 "\ncache_rows = %" PRIu64
            "\ncache_accesses = %" PRIu64 "\ncache_extents = %" PRIu64 "\ncache_read = %" PRIu64
            "\ncache_gap = %" PRIu64 "\npack_seconds = %.3f\nsampling = \"%s\"\n\n"
            "[files]\nindex_bytes = %" PRIu64 "\nindex_xxh3 = \"%016" PRIx64 "\"\nchunks_bytes = %" PRIu64
            "\nchunks_xxh3 = \"%016" PRIx64 "\"\nhot_bytes = %" PRIu64 "\nhot_xxh3 = \"%016" PRIx64
            "\"\ncache_bytes = %" PRIu64 "\ncache_xxh3 = \"%016" PRIx64 "\"\n",
            PACK_VERSION, m->identity, ds, m->nodes, m->row_bytes, m->epochs, m->ranks, m->batches, m->accesses,
            m->hot_rows, m->packed_rows, m->distinct_packed, m->max_nodes, m->cache_rows, m->cache_accesses,
            m->cache_extents, m->cache_read, m->cache_gap, m->pack_seconds, samp, m->index_bytes, m->index_xxh3, m->chunks_bytes,
            m->chunks_xxh3, m->hot_bytes, m->hot_xxh3, m->cache_bytes, m->cache_xxh3);
    int rc = 0;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot rename into place: %s", path, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

static int get_u64(const struct toml_value *root, const char *key, uint64_t *out, const char *path, char *err,
                   size_t errlen)
{
    const struct toml_value *v = toml_get_path(root, key);
    if (v && v->type == TOML_INT && v->u.i >= 0) {
        *out = (uint64_t)v->u.i;
        return 0;
    }
    if (v && v->type == TOML_STRING) { /* 64-bit hashes are hex strings */
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v->u.s, &end, 16);
        if (!errno && *v->u.s && !*end) {
            *out = x;
            return 0;
        }
    }
    return sl_errf(err, errlen, -EINVAL, "%s: %s is missing or not a valid number; the pack is damaged: make it again",
                   path, key);
}

int pack_manifest_read(const char *dir, struct pack_manifest *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    char path[4200];
    snprintf(path, sizeof path, "%s/" PACK_MANIFEST, dir);
    struct stat st;
    if (stat(path, &st) != 0)
        return sl_errf(err, errlen, -ENOENT,
                       "%s: no %s: not a pack (or one whose packing did not finish); make one with gnnprep pack", dir,
                       PACK_MANIFEST);
    char msg[512];
    struct toml_value *root = toml_parse_file(path, msg, sizeof msg);
    if (!root)
        return sl_errf(err, errlen, -EINVAL, "%s", msg);
    int rc = 0;
    const struct toml_value *fmt = toml_get(root, "format"), *samp = toml_get(root, "sampling"),
                            *ds = toml_get(root, "dataset"), *secs = toml_get(root, "pack_seconds");
    if (!fmt || fmt->type != TOML_STRING || strcmp(fmt->u.s, PACK_FORMAT)) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: format is not \"" PACK_FORMAT "\": not a pack", path);
        goto out;
    }
    uint64_t v[24];
    static const char *const keys[] = {"version",  "dataset_identity",  "nodes",           "row_bytes",
                                       "epochs",   "ranks",             "batches",         "accesses",
                                       "hot_rows", "packed_rows",       "distinct_packed", "max_nodes",
                                       "files.index_bytes", "files.index_xxh3", "files.chunks_bytes",
                                       "files.chunks_xxh3", "files.hot_bytes", "files.hot_xxh3",
                                       "cache_rows", "cache_accesses", "cache_extents", "cache_read",
                                       "files.cache_bytes", "files.cache_xxh3"};
    _Static_assert(SL_ARRAY_LEN(keys) == SL_ARRAY_LEN(v), "one value a key");
    /* the version first: an older pack lacks the newer keys */
    if ((rc = get_u64(root, keys[0], &v[0], path, err, errlen)) != 0)
        goto out;
    if (v[0] != PACK_VERSION) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: version %" PRIu64 ", this build reads version %u; make the pack again",
                     path, v[0], PACK_VERSION);
        goto out;
    }
    for (size_t i = 1; i < SL_ARRAY_LEN(keys); i++)
        if ((rc = get_u64(root, keys[i], &v[i], path, err, errlen)) != 0)
            goto out;
    if (v[0] != PACK_VERSION) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: version %" PRIu64 ", this build reads version %u; make the pack again",
                     path, v[0], PACK_VERSION);
        goto out;
    }
    if (!samp || samp->type != TOML_STRING || strlen(samp->u.s) >= sizeof m->sampling) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: sampling is missing or too long; make the pack again", path);
        goto out;
    }
    if (v[4] == 0 || v[4] > UINT32_MAX || v[5] == 0 || v[5] > UINT32_MAX || v[3] == 0) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: epochs, ranks or row_bytes out of range; make the pack again", path);
        goto out;
    }
    m->version = (uint32_t)v[0];
    m->identity = v[1];
    m->nodes = v[2];
    m->row_bytes = v[3];
    m->epochs = (uint32_t)v[4];
    m->ranks = (uint32_t)v[5];
    m->batches = v[6];
    m->accesses = v[7];
    m->hot_rows = v[8];
    m->packed_rows = v[9];
    m->distinct_packed = v[10];
    m->max_nodes = v[11];
    m->index_bytes = v[12];
    m->index_xxh3 = v[13];
    m->chunks_bytes = v[14];
    m->chunks_xxh3 = v[15];
    m->hot_bytes = v[16];
    m->hot_xxh3 = v[17];
    m->cache_rows = v[18];
    m->cache_accesses = v[19];
    m->cache_extents = v[20];
    m->cache_read = v[21];
    m->cache_bytes = v[22];
    m->cache_xxh3 = v[23];
    m->pack_seconds = secs && secs->type == TOML_FLOAT ? secs->u.f : 0;
    const struct toml_value *gap = toml_get(root, "cache_gap"); /* informative; packs before it joined over 16 KiB */
    m->cache_gap = gap && gap->type == TOML_INT && gap->u.i >= 0 ? (uint64_t)gap->u.i : PACK_CACHE_GAP;
    snprintf(m->sampling, sizeof m->sampling, "%s", samp->u.s);
    if (ds && ds->type == TOML_STRING)
        snprintf(m->dataset, sizeof m->dataset, "%s", ds->u.s);
out:
    toml_free(root);
    return rc;
}

/* ---- the reader ---------------------------------------------------------------------------- */

static int entry_cmp(const struct pack_entry *a, uint32_t rank, uint32_t epoch, uint32_t split, uint64_t k)
{
    if (a->rank != rank)
        return a->rank < rank ? -1 : 1;
    if (a->epoch != epoch)
        return a->epoch < epoch ? -1 : 1;
    if (a->split != split)
        return a->split < split ? -1 : 1;
    return a->k == k ? 0 : a->k < k ? -1 : 1;
}

/* Reads a file's header and checks it against the manifest. */
static int read_hdr(int fd, const char *path, uint64_t magic, uint64_t identity, uint64_t bytes, uint64_t want_bytes,
                    struct pack_file_hdr *h, char *err, size_t errlen)
{
    if (bytes != want_bytes)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: %" PRIu64 " bytes, the manifest says %" PRIu64
                       " (changed or truncated since packing); make the pack again",
                       path, bytes, want_bytes);
    size_t got = 0;
    int rc = sl_pread_full(fd, h, sizeof *h, 0, &got);
    if (rc || got != sizeof *h)
        return sl_errf(err, errlen, rc ? rc : -EINVAL, "%s: cannot read its header", path);
    if (h->magic != magic || h->version != PACK_VERSION || h->identity != identity)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: not this pack's file (magic, version or dataset identity differ); make the pack again",
                       path);
    return 0;
}

static int open_file(const char *dir, const char *name, int flags, char *path, size_t plen, uint64_t *bytes,
                     char *err, size_t errlen)
{
    snprintf(path, plen, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | flags);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s%s", path, strerror(errno),
                       errno == ENOENT ? " (the pack lacks a file: make the pack again)" : "");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sl_errf(err, errlen, -e, "%s: %s", path, strerror(e));
    }
    *bytes = (uint64_t)st.st_size;
    return fd;
}

/* Opens a data file of the pack (chunks.bin, cache.bin): O_DIRECT unless
 * buffered or refused, the size and header checked against the manifest
 * (the header read through a buffered descriptor: no aligned buffer). */
static int open_data(const struct pack *p, const char *name, uint64_t magic, uint64_t want_bytes, bool buffered,
                     int *fdp, bool *direct, struct pack_file_hdr *h, char *err, size_t errlen)
{
    char path[4200];
    uint64_t bytes;
    int fd = -1;
    *direct = false;
    if (!buffered) {
        fd = open_file(p->dir, name, O_DIRECT, path, sizeof path, &bytes, NULL, 0);
        *direct = fd >= 0;
    }
    if (fd < 0 && (fd = open_file(p->dir, name, 0, path, sizeof path, &bytes, err, errlen)) < 0)
        return fd;
    *fdp = fd;
    int bfd = *direct ? open(path, O_RDONLY | O_CLOEXEC) : fd;
    if (bfd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    int rc = read_hdr(bfd, path, magic, p->m.identity, bytes, want_bytes, h, err, errlen);
    if (bfd != fd)
        close(bfd);
    return rc;
}

int pack_open(struct pack *p, const char *dir, bool buffered, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->chunks_fd = -1;
    p->cache_fd = -1;
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    int rc = pack_manifest_read(dir, &p->m, err, errlen);
    if (rc)
        return rc;
    const struct pack_manifest *m = &p->m;
    char path[4200];
    uint64_t bytes;
    struct pack_file_hdr h;
    int fd = open_file(dir, PACK_INDEX, 0, path, sizeof path, &bytes, err, errlen);
    if (fd < 0)
        return fd;
    rc = read_hdr(fd, path, PACK_INDEX_MAGIC, m->identity, bytes, m->index_bytes, &h, err, errlen);
    uint64_t need = 0;
    if (rc == 0 && (h.entry != sizeof(struct pack_entry) || h.count != m->batches ||
                    sl_mul_ovf(h.count, sizeof(struct pack_entry), &need) || need + sizeof h > bytes))
        rc = sl_errf(err, errlen, -EINVAL, "%s: %" PRIu64 " entries of %" PRIu32 " bytes do not match the manifest",
                     path, h.count, h.entry);
    if (rc == 0 && !(p->ent = malloc(SL_MAX(need, 1))))
        rc = sl_errf(err, errlen, -ENOMEM, "no memory for the index of %" PRIu64 " batches", h.count);
    size_t got = 0;
    if (rc == 0 && (sl_pread_full(fd, p->ent, (size_t)need, sizeof h, &got) != 0 || got != need))
        rc = sl_errf(err, errlen, -EIO, "%s: cannot read %" PRIu64 " entries", path, h.count);
    close(fd);
    if (rc)
        goto fail;
    if ((rc = open_data(p, PACK_CHUNKS, PACK_CHUNKS_MAGIC, m->chunks_bytes, buffered, &p->chunks_fd, &p->direct, &h,
                        err, errlen)) != 0)
        goto fail;
    bytes = m->chunks_bytes;
    bool cache_direct;
    if ((rc = open_data(p, PACK_CACHE, PACK_CACHE_MAGIC, m->cache_bytes, buffered || !p->direct, &p->cache_fd,
                        &cache_direct, &h, err, errlen)) != 0)
        goto fail;
    if (h.count != m->cache_rows || h.entry != m->row_bytes || m->cache_rows > m->nodes ||
        pack_round(pack_cache_row_off(m, m->cache_rows)) != m->cache_bytes) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s/" PACK_CACHE ": %" PRIu64 " rows of %" PRIu32 " bytes do not match the manifest; make the "
                     "pack again",
                     dir, h.count, h.entry);
        goto fail;
    }
    /* every entry: in order, inside the file, aligned, its rows fitting its span */
    for (uint64_t i = 0; i < m->batches; i++) {
        const struct pack_entry *e = &p->ent[i];
        uint64_t rows_end;
        bool bad = e->off % PACK_ALIGN || e->span % PACK_ALIGN || e->off < PACK_ALIGN || e->span == 0 ||
                   e->off > bytes || e->span > bytes - e->off || e->rank >= m->ranks || e->epoch >= m->epochs ||
                   e->split >= BATCH_SPLITS || e->rows > e->nodes || e->cached > e->nodes - e->rows ||
                   e->cache_ext > e->cached || (e->cached > 0) != (e->cache_ext > 0) ||
                   e->cache_bytes > m->cache_bytes || e->cache_bytes % PACK_ALIGN ||
                   e->nodes > m->max_nodes || e->batch_bytes == 0 || sl_mul_ovf(e->rows, m->row_bytes, &rows_end) ||
                   pack_round(e->batch_bytes) + pack_round(pack_rows_tail_bytes(e, m->row_bytes)) > e->span ||
                   (i > 0 && entry_cmp(&p->ent[i - 1], e->rank, e->epoch, e->split, e->k) >= 0);
        if (bad) {
            rc = sl_errf(err, errlen, -EINVAL,
                         "%s/" PACK_INDEX ": entry %" PRIu64 " (rank %" PRIu32 ", epoch %" PRIu32 ", batch %" PRIu64
                         ") is out of order or outside chunks.bin; make the pack again",
                         dir, i, e->rank, e->epoch, e->k);
            goto fail;
        }
    }
    return 0;
fail:
    pack_free(p);
    return rc;
}

void pack_free(struct pack *p)
{
    if (!p)
        return;
    free(p->ent);
    if (p->chunks_fd >= 0)
        close(p->chunks_fd);
    if (p->cache_fd >= 0)
        close(p->cache_fd);
    p->ent = NULL;
    p->chunks_fd = -1;
    p->cache_fd = -1;
}

int pack_check(const struct pack *p, const struct config *c, uint32_t ranks, const struct dataset_meta *m, char *err,
               size_t errlen)
{
    if (dataset_meta_identity(m) != p->m.identity)
        return sl_errf(err, errlen, -EINVAL,
                       "%s was packed from another dataset than %s (or its files changed since: their checksums "
                       "differ); run gnnprep pack again on this dataset",
                       p->dir, c->dataset.path);
    char text[2048], diff[2048];
    pack_sampling_text(c, ranks, text, sizeof text);
    if (config_run_diff(p->m.sampling, text, diff, sizeof diff) > 0)
        return sl_errf(err, errlen, -EINVAL,
                       "%s was packed for another sampling configuration (pack -> this run: %s); run gnnprep pack "
                       "again with this config",
                       p->dir, diff);
    return 0;
}

const struct pack_entry *pack_find(const struct pack *p, uint32_t rank, uint32_t epoch, uint32_t split, uint64_t k)
{
    uint64_t lo = 0, hi = p->m.batches;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = entry_cmp(&p->ent[mid], rank, epoch, split, k);
        if (c == 0)
            return &p->ent[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int pack_read_chunk(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen)
{
    size_t got = 0;
    int rc = sl_pread_full(p->chunks_fd, buf, (size_t)e->span, (off_t)e->off, &got);
    if (rc == 0 && got != e->span)
        rc = -EIO;
    if (rc)
        return sl_errf(err, errlen, rc,
                       "%s/" PACK_CHUNKS ": reading the chunk of batch %" PRIu64 " of epoch %" PRIu32
                       " (%" PRIu64 " bytes at %" PRIu64 "): %s",
                       p->dir, e->k, e->epoch, e->span, e->off, got != e->span && rc == -EIO ? "short read" : strerror(-rc));
    return 0;
}

int pack_place_batch(const struct pack_entry *e, const void *chunk, void *slot, size_t size, uint64_t batch,
                     uint32_t rank, char *err, size_t errlen)
{
    if (e->batch_bytes > size)
        return sl_errf(err, errlen, -ENOSPC,
                       "a packed batch of %" PRIu64 " bytes does not fit a %zu-byte arena slot; the pack was made "
                       "for another shape",
                       e->batch_bytes, size);
    memcpy(slot, chunk, (size_t)e->batch_bytes);
    struct batch_hdr *h = slot;
    h->batch = batch;
    h->rank = rank;
    struct batch_view v;
    char msg[512];
    int rc = batch_view(slot, size, 0, &v, msg, sizeof msg);
    if (rc == 0 && (h->bytes != e->batch_bytes || h->epoch != e->epoch || h->split != e->split ||
                    batch_nodes(&v) != e->nodes || batch_targets(&v) != e->targets))
        rc = -EINVAL, snprintf(msg, sizeof msg, "its header disagrees with the index");
    if (rc)
        return sl_errf(err, errlen, -EINVAL,
                       "packed batch %" PRIu64 " of epoch %" PRIu32 " (rank %" PRIu32 "): %s; make the pack again",
                       e->k, e->epoch, e->rank, msg);
    return 0;
}

int pack_read_hot(const struct pack *p, uint64_t **ids, void **rows, char *err, size_t errlen)
{
    *ids = NULL;
    if (rows)
        *rows = NULL;
    char path[4200];
    uint64_t bytes;
    int fd = open_file(p->dir, PACK_HOT, 0, path, sizeof path, &bytes, err, errlen);
    if (fd < 0)
        return fd;
    struct pack_file_hdr h;
    int rc = read_hdr(fd, path, PACK_HOT_MAGIC, p->m.identity, bytes, p->m.hot_bytes, &h, err, errlen);
    uint64_t n = p->m.hot_rows, idb = n * 8, rb = n * p->m.row_bytes;
    if (rc == 0 && (h.count != n || h.entry != p->m.row_bytes || n > p->m.nodes ||
                    PACK_ALIGN + pack_round(idb) + pack_round(rb) != bytes))
        rc = sl_errf(err, errlen, -EINVAL, "%s: %" PRIu64 " rows of %" PRIu32 " bytes do not match the manifest", path,
                     h.count, h.entry);
    if (rc == 0 && (!(*ids = malloc(SL_MAX(idb, 1))) || (rows && !(*rows = malloc(SL_MAX(rb, 1))))))
        rc = sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " hot rows", n);
    size_t got = 0;
    if (rc == 0 && (sl_pread_full(fd, *ids, (size_t)idb, PACK_ALIGN, &got) || got != idb))
        rc = sl_errf(err, errlen, -EIO, "%s: cannot read the hot ids", path);
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        if ((*ids)[i] >= p->m.nodes || (i > 0 && (*ids)[i] <= (*ids)[i - 1]))
            rc = sl_errf(err, errlen, -EINVAL, "%s: hot id %" PRIu64 " is out of order or range; make the pack again",
                         path, i);
    if (rc == 0 && rows &&
        (sl_pread_full(fd, *rows, (size_t)rb, (off_t)(PACK_ALIGN + pack_round(idb)), &got) || got != rb))
        rc = sl_errf(err, errlen, -EIO, "%s: cannot read the hot rows", path);
    close(fd);
    if (rc) {
        free(*ids);
        *ids = NULL;
        if (rows) {
            free(*rows);
            *rows = NULL;
        }
    }
    return rc;
}

/* pread of [off, off + len) of chunks.bin, whole or failed. */
static int read_span(const struct pack *p, const struct pack_entry *e, uint64_t off, uint64_t len, void *buf,
                     const char *what, char *err, size_t errlen)
{
    size_t got = 0;
    int rc = sl_pread_full(p->chunks_fd, buf, (size_t)len, (off_t)off, &got);
    if (rc == 0 && got != len)
        rc = -EIO;
    if (rc)
        return sl_errf(err, errlen, rc,
                       "%s/" PACK_CHUNKS ": reading the %s of batch %" PRIu64 " of epoch %" PRIu32 " (%" PRIu64
                       " bytes at %" PRIu64 "): %s",
                       p->dir, what, e->k, e->epoch, len, off,
                       got != len && rc == -EIO ? "short read (the pack changed under us?)" : strerror(-rc));
    return 0;
}

int pack_read_image(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen)
{
    return read_span(p, e, e->off, pack_round(e->batch_bytes), buf, "batch", err, errlen);
}

/* Whether the tail of e's chunk, read into buf as pack_read_rows places
 * it, holds: extents ascending, disjoint, aligned and inside cache.bin,
 * summing to e->cache_bytes, and every cache row inside them. */
static int tail_check(const struct pack *p, const struct pack_entry *e, const void *buf, char *err, size_t errlen)
{
    uint64_t rb = p->m.row_bytes;
    const struct pack_extent *x = pack_tail_extents(e, rb, buf);
    const uint32_t *o = pack_tail_offsets(e, rb, buf);
    uint64_t sum = 0, end = PACK_ALIGN;
    bool bad = false;
    for (uint32_t i = 0; i < e->cache_ext && !bad; i++) {
        bad = x[i].off % PACK_ALIGN || x[i].len % PACK_ALIGN || x[i].len == 0 || x[i].off < end ||
              x[i].off > p->m.cache_bytes || x[i].len > p->m.cache_bytes - x[i].off;
        end = x[i].off + x[i].len;
        sum += x[i].len;
    }
    bad = bad || sum != e->cache_bytes;
    for (uint32_t i = 0; i < e->cached && !bad; i++)
        bad = o[i] > sum || rb > sum - o[i];
    if (bad)
        return sl_errf(err, errlen, -EINVAL,
                       "%s/" PACK_CHUNKS ": the cache extents of batch %" PRIu64 " of epoch %" PRIu32
                       " do not hold (changed since packing?); make the pack again",
                       p->dir, e->k, e->epoch);
    return 0;
}

int pack_read_rows(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen)
{
    uint64_t rb = p->m.row_bytes, len = pack_round(pack_rows_tail_bytes(e, rb));
    int rc = len ? read_span(p, e, pack_rows_off(e), len, buf, "rows", err, errlen) : 0;
    if (rc || e->cached == 0)
        return rc;
    return tail_check(p, e, buf, err, errlen);
}

int pack_read_tail(const struct pack *p, const struct pack_entry *e, void *buf, char *err, size_t errlen)
{
    uint64_t rb = p->m.row_bytes, at = pack_tail_block(e, rb), end = pack_round(pack_rows_tail_bytes(e, rb));
    if (e->cached == 0)
        return 0;
    int rc = read_span(p, e, pack_rows_off(e) + at, end - at, (unsigned char *)buf + at, "cache extents", err, errlen);
    return rc ? rc : tail_check(p, e, buf, err, errlen);
}

int pack_read_cache(const struct pack *p, uint64_t off, uint64_t len, void *buf, char *err, size_t errlen)
{
    size_t got = 0;
    int rc = sl_pread_full(p->cache_fd, buf, (size_t)len, (off_t)off, &got);
    if (rc == 0 && got != len)
        rc = -EIO;
    if (rc)
        return sl_errf(err, errlen, rc, "%s/" PACK_CACHE ": reading %" PRIu64 " bytes at %" PRIu64 ": %s", p->dir,
                       len, off, got != len && rc == -EIO ? "short read (the pack changed under us?)" : strerror(-rc));
    return 0;
}

int pack_read_cache_ids(const struct pack *p, uint64_t **ids, char *err, size_t errlen)
{
    uint64_t n = p->m.cache_rows;
    *ids = malloc(SL_MAX(n * 8, 1));
    if (!*ids)
        return sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " cache ids", n);
    char path[4200];
    snprintf(path, sizeof path, "%s/" PACK_CACHE, p->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t got = 0;
    int rc = fd < 0 ? -errno : sl_pread_full(fd, *ids, (size_t)(n * 8), PACK_ALIGN, &got);
    if (fd >= 0)
        close(fd);
    if (rc == 0 && got != n * 8)
        rc = -EIO;
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        if ((*ids)[i] >= p->m.nodes)
            rc = -ERANGE;
    if (rc) {
        free(*ids);
        *ids = NULL;
        return sl_errf(err, errlen, rc == -ERANGE ? -EINVAL : rc, "%s: cannot read the cache ids: %s; make the pack again",
                       path, rc == -ERANGE ? "an id past the dataset's nodes" : strerror(-rc));
    }
    return 0;
}

int pack_verify(const struct pack *p, unsigned files, char *err, size_t errlen)
{
    const struct {
        unsigned bit;
        const char *name;
        uint64_t xxh3, bytes;
    } f[] = {{PACK_FILE_INDEX, PACK_INDEX, p->m.index_xxh3, p->m.index_bytes},
             {PACK_FILE_CHUNKS, PACK_CHUNKS, p->m.chunks_xxh3, p->m.chunks_bytes},
             {PACK_FILE_HOT, PACK_HOT, p->m.hot_xxh3, p->m.hot_bytes},
             {PACK_FILE_CACHE, PACK_CACHE, p->m.cache_xxh3, p->m.cache_bytes}};
    for (size_t i = 0; i < SL_ARRAY_LEN(f); i++) {
        if (!(files & f[i].bit))
            continue;
        char path[4200], msg[1024];
        snprintf(path, sizeof path, "%s/%s", p->dir, f[i].name);
        uint64_t h = 0, bytes = 0;
        int rc = file_xxh3(path, &h, &bytes, msg, sizeof msg);
        if (rc)
            return sl_errf(err, errlen, rc, "%s; make the pack again", msg);
        if (h != f[i].xxh3 || bytes != f[i].bytes)
            return sl_errf(err, errlen, -EINVAL,
                           "%s changed since packing (its checksum is %016" PRIx64 ", the manifest says %016" PRIx64
                           "); make the pack again",
                           path, h, f[i].xxh3);
    }
    return 0;
}

int pack_read_hot_rows(const struct pack *p, uint64_t first, uint64_t n, void *buf, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" PACK_HOT, p->dir);
    if (first > p->m.hot_rows || n > p->m.hot_rows - first)
        return sl_errf(err, errlen, -ERANGE, "%s: rows %" PRIu64 "+%" PRIu64 " past its %" PRIu64, path, first, n,
                       p->m.hot_rows);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    uint64_t off = PACK_ALIGN + pack_round(p->m.hot_rows * 8) + first * p->m.row_bytes, len = n * p->m.row_bytes;
    size_t got = 0;
    int rc = sl_pread_full(fd, buf, (size_t)len, (off_t)off, &got);
    close(fd);
    if (rc || got != len)
        return sl_errf(err, errlen, rc ? rc : -EIO, "%s: reading %" PRIu64 " hot rows: %s", path, n,
                       rc ? strerror(-rc) : "short read (the pack changed under us?)");
    return 0;
}

int pack_check_run(const struct pack *p, const struct config *c, uint32_t ranks, const struct dataset_meta *m,
                   char *err, size_t errlen)
{
    int rc = pack_check(p, c, ranks, m, err, errlen);
    if (rc)
        return rc;
    static const char *const what[BATCH_SPLITS] = {"training", "validation", "test"};
    for (uint32_t r = 0; r < p->m.ranks; r++) {
        struct schedule s;
        struct schedule_params sp = {.rank = r,
                                     .ranks = p->m.ranks,
                                     .batch_size = (uint64_t)c->train.batch_size,
                                     .epochs = (uint32_t)c->train.epochs,
                                     .eval_every = (uint32_t)c->train.eval_every,
                                     .test_with_val = c->train.early_stop_patience > 0,
                                     .seed = (uint64_t)c->train.seed};
        schedule_split_sizes(m, sp.split_n);
        if ((rc = schedule_open(&s, NULL, &sp, err, errlen)) != 0)
            return rc;
        for (uint64_t g = 0; g < schedule_len(&s); g++) {
            struct schedule_pos pos;
            schedule_at(&s, g, &pos);
            if (pack_find(p, r, pos.epoch, pos.split, pos.k))
                continue;
            if (pos.epoch >= p->m.epochs)
                rc = sl_errf(err, errlen, -EINVAL,
                             "train.epochs = %" PRId64 ", but %s holds %" PRIu32 " packed epoch%s; run gnnprep pack "
                             "with --epochs %" PRId64 " (or more) or train %" PRIu32 " epoch%s",
                             c->train.epochs, p->dir, p->m.epochs, p->m.epochs == 1 ? "" : "s", c->train.epochs,
                             p->m.epochs, p->m.epochs == 1 ? "" : "s");
            else
                rc = sl_errf(err, errlen, -EINVAL,
                             "%s lacks the %s pass of epoch %" PRIu32 " that a run of train.epochs = %" PRId64
                             " has (a pack of %" PRIu32 " epochs evaluates and tests as a run of %" PRIu32
                             " epochs does); run gnnprep pack with --epochs %" PRId64,
                             p->dir, what[pos.split], pos.epoch, c->train.epochs, p->m.epochs, p->m.epochs,
                             c->train.epochs);
            break;
        }
        schedule_free(&s);
        if (rc)
            return rc;
    }
    return 0;
}
