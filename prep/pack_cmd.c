/* pack_cmd.c - `gnnprep pack DATASET CONFIG OUT --epochs E [--disk-limit
 * SIZE] [--cache-limit SIZE] [--cache-gap SIZE] [--mem-limit SIZE]`: samples every batch of E
 * epochs of every rank with the online sampler's code and writes them,
 * with their feature rows split into a hot tier, an optional shared disk
 * cache and per-batch packed rows, as a pack (format: stages/pack.h; use:
 * docs/packed.md).
 *
 * Passes (DiskGNN's offline sampling and batched packing):
 *   1. sample: each rank's schedule laid out for E epochs (the default
 *      schedule: the targets and seeds the online sampler uses), each
 *      batch sampled by sampler_sample into one slot, its image appended
 *      to a spill file in the staging directory and its nodes counted;
 *   2. tier: the rows read by at least two batches, most-read first, as
 *      many as the feature buffer holds beside the extraction reserve
 *      (launcher/layout.c's sizing) make the hot tier; the next most-read
 *      rows read by at least two batches, as many as --cache-limit holds
 *      (or, without it, as many as make a pack over --disk-limit fit),
 *      make the cache tier; every other row a batch reads is packed into
 *      its chunk;
 *   3. lay out the chunks (the spill file read once more for the nodes),
 *      placing each cache row when a batch first reads it and planning
 *      each batch's cache extents, and check the whole against
 *      --disk-limit and the free space before writing anything large;
 *   4. pack: chunks are filled in groups as large as --mem-limit allows;
 *      for a group the spill file gives the images, and features.bin is
 *      read in large sequential (direct) partitions in node order, each
 *      partition's rows copied to every place in the group that needs
 *      them - no read per row; the group is then written with large
 *      sequential writes. The hot and cache tiers are gathered the same
 *      way.
 * Everything is written in a staging directory beside OUT, renamed to OUT
 * only once pack.toml is complete; any failure (a full disk included)
 * removes it, and a killed gnnprep's staging directory is removed by the
 * next gnnprep that writes beside it.
 *
 * Memory: the node counts (4 bytes a node), the hot bitmap, indptr (8
 * bytes a node, the sampler's), the index (80 bytes a batch), one slot,
 * and either indices.bin while sampling (read whole when it fits, else
 * mapped) or the partition buffer and the group while packing; with a
 * cache tier its bitmap, the node counts' memory reused as each node's
 * cache place, and 8 bytes a cache row (its id). --mem-limit bounds
 * their sum. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/config.h"
#include "core/dataset.h"
#include "core/opt.h"
#include "core/util.h"
#include "ipc/run.h"
#include "prep.h"
#include "stages/featbuf.h"
#include "stages/pack.h"
#include "stages/sampler.h"
#include "stages/schedule.h"

#define SPILL_FILE "batches.spill"
#define PART_MAX ((size_t)64 << 20) /* the largest sequential read of features.bin */
#define PART_MIN ((size_t)1 << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gnnprep pack DATASET CONFIG OUT --epochs E [--disk-limit SIZE] [--cache-limit SIZE]\n"
            "                    [--cache-gap SIZE] [--mem-limit SIZE]\n"
            "\n"
            "Samples every batch of E epochs that a run of CONFIG on DATASET would train and evaluate\n"
            "(the online sampler's code: the same targets and neighbours for the same seed) and writes\n"
            "them into the new directory OUT as a pack: per batch one chunk holding the sampled batch\n"
            "and the feature rows it reads, except the most-read rows, which go once into a hot tier\n"
            "that a run keeps in memory (as many as pipeline.feature_buffer_mb holds). A run with\n"
            "pipeline.mode = \"packed\" and pipeline.pack = OUT then reads one chunk per batch\n"
            "(docs/packed.md).\n"
            "\n"
            "  --epochs E         epochs to pack (a run may train up to E)\n"
            "  --disk-limit SIZE  refuse (before writing) a pack larger than SIZE (K/M/G/T suffixes); without\n"
            "                     --cache-limit, a pack that would be larger gets a cache tier sized to fit\n"
            "  --cache-limit SIZE rows read by several batches but not hot, up to SIZE bytes of them, go once\n"
            "                     into a shared cache file instead of into every chunk that reads them:\n"
            "                     a smaller pack, a few more reads a batch (0: none; default: none unless\n"
            "                     --disk-limit needs it)\n"
            "  --cache-gap SIZE   a batch reads cache rows whose 4 KiB blocks lie at most SIZE apart in one\n"
            "                     extent, the gap with them (default 16K; 0: only adjacent blocks join)\n"
            "  --mem-limit SIZE   memory for packing, at most (default 1G)\n"
            "  --help             this text\n");
}

/* A row to gather: features row `node` to offset `dst` of the output. */
struct req {
    uint64_t node, dst;
};

static int req_cmp(const void *a, const void *b)
{
    const struct req *x = a, *y = b;
    return x->node < y->node ? -1 : x->node > y->node ? 1 : x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* features.bin, read in large aligned partitions. */
struct feat_reader {
    int fd;
    bool direct;
    uint64_t stride, row_bytes, file_bytes;
    unsigned char *part; /* (part_len) aligned to PACK_ALIGN */
    size_t part_len;
    uint64_t reads, bytes; /* what gathering read */
    char path[4200];
};

static int feat_open(struct feat_reader *r, const char *dir, const struct dataset_meta *m, size_t part_len, char *err,
                     size_t errlen)
{
    memset(r, 0, sizeof *r);
    const struct dataset_file *f = &m->f[DATASET_FEATURES];
    r->stride = f->row_stride;
    r->row_bytes = f->cols * dtype_size(f->dtype);
    r->file_bytes = f->bytes;
    r->part_len = part_len;
    snprintf(r->path, sizeof r->path, "%s/%s", dir, f->file);
    r->fd = open(r->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    r->direct = r->fd >= 0;
    if (r->fd < 0 && (r->fd = open(r->path, O_RDONLY | O_CLOEXEC)) < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", r->path, strerror(errno));
    if (!(r->part = aligned_alloc(PACK_ALIGN, part_len))) {
        close(r->fd);
        r->fd = -1;
        return sl_errf(err, errlen, -ENOMEM, "no memory for a %zu-byte read of the features", part_len);
    }
    return 0;
}

static void feat_close(struct feat_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    free(r->part);
    r->fd = -1;
    r->part = NULL;
}

/* Copies row reqs[i].node of features.bin to out + reqs[i].dst for every
 * i < n (reqs sorted by node): features.bin is read in partitions of up
 * to part_len bytes, in ascending order, each starting at the first row
 * still wanted (partitions holding no wanted row are skipped). */
static int gather(struct feat_reader *r, const struct req *reqs, size_t n, unsigned char *out, char *err,
                  size_t errlen)
{
    size_t i = 0;
    while (i < n) {
        uint64_t start = reqs[i].node * r->stride / PACK_ALIGN * PACK_ALIGN;
        uint64_t len = SL_MIN((uint64_t)r->part_len, r->file_bytes - start);
        if (r->direct)
            len = len / PACK_ALIGN * PACK_ALIGN; /* the file is padded to whole pages */
        size_t got = 0;
        int rc = sl_pread_full(r->fd, r->part, (size_t)len, (off_t)start, &got);
        if (rc == -EINVAL && r->direct) { /* direct I/O refused here: go through the page cache */
            int fd = open(r->path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                return sl_errf(err, errlen, -errno, "%s: cannot open: %s", r->path, strerror(errno));
            close(r->fd);
            r->fd = fd;
            r->direct = false;
            continue;
        }
        if (rc == 0 && got < len)
            rc = -EIO;
        if (rc)
            return sl_errf(err, errlen, rc, "%s: reading %" PRIu64 " bytes at %" PRIu64 ": %s", r->path, len, start,
                           rc == -EIO ? "short read (the file changed under us?)" : strerror(-rc));
        r->reads++;
        r->bytes += len;
        size_t before = i;
        for (; i < n && reqs[i].node * r->stride + r->row_bytes <= start + len; i++)
            memcpy(out + reqs[i].dst, r->part + (reqs[i].node * r->stride - start), (size_t)r->row_bytes);
        if (i == before) /* cannot happen for a row within the file; never loop */
            return sl_errf(err, errlen, -EINVAL, "%s: row %" PRIu64 " lies past the file's end", r->path,
                           reqs[i].node);
    }
    return 0;
}

/* Everything one packing holds. */
struct packer {
    struct config cfg;
    struct dataset_meta meta;
    struct run_arena_plan ap;
    const char *dataset;
    uint32_t epochs, ranks;
    uint64_t row_bytes;
    uint64_t mem_limit, disk_limit, cache_limit;
    bool cache_given; /* --cache-limit was given (else --disk-limit may choose one) */
    struct dataset_dir out;
    char spill[4200];
    struct pack_entry *ent;
    uint64_t nent;
    uint32_t *count;  /* (nodes) batches reading each row, saturating */
    uint8_t *hot;     /* (nodes / 8 + 1) bitmap */
    uint64_t *hot_ids;
    uint64_t nhot;
    uint8_t *cache;      /* (nodes / 8 + 1) bitmap of the cache tier */
    uint32_t *place;     /* (nodes) each cache node's place in cache.bin, UINT32_MAX before placed: the counts' memory */
    uint64_t *cache_ids; /* (ncache) the node at each place */
    uint64_t ncache, placed;
    uint64_t *tmp_pair;          /* (max_nodes) a batch's (place << 32 | position among its cache nodes) */
    struct pack_extent *tmp_ext; /* (max_nodes) */
    uint32_t *tmp_off;           /* (max_nodes) */
    uint32_t *id_rank;           /* (nodes / 64 + 1) cache nodes before each 64 nodes: places in node order */
    /* layout against node order: blocks and extents a batch's cache rows touch, summed over batches */
    uint64_t blk4[2], blk64[2], ext[2], xbytes[2];
    double rnd4, rnd64; /* ... and under uniformly random places (expected) */
    bool topo_memory;    /* sample with indices.bin in memory (it fits the limit) */
    unsigned char *slot; /* (slot_bytes) */
    size_t slot_bytes;
    struct pack_manifest man;
};

static inline bool is_hot(const struct packer *p, uint64_t v)
{
    return p->hot[v >> 3] >> (v & 7) & 1;
}

static inline bool is_cache(const struct packer *p, uint64_t v)
{
    return p->cache && (p->cache[v >> 3] >> (v & 7) & 1);
}

/* A size for messages. */
static const char *mb(uint64_t b, char *buf, size_t len)
{
    return sl_fmt_bytes(b, buf, len);
}

/* Pass 1: every batch of every rank into the spill file. */
static int sample_all(struct packer *p, char *err, size_t errlen)
{
    /* indices.bin read whole with large sequential reads when the memory
     * limit has room for it (a page fault per list costs a random read on
     * a cold cache), else mapped */
    struct sampler_topo topo;
    struct sampler_topo_opts to = {.mode = p->topo_memory ? SAMPLER_TOPO_MEMORY : SAMPLER_TOPO_MMAP};
    int rc = sampler_topo_open_mode(&topo, p->dataset, &p->meta, &to, err, errlen);
    if (rc)
        return rc;
    struct sampler s;
    struct batch_shape shape = p->ap.shape;
    if ((rc = sampler_init(&s, &topo, &shape, err, errlen)) != 0) {
        sampler_topo_free(&topo);
        return rc;
    }
    FILE *spill = fopen(p->spill, "w");
    if (!spill) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot create: %s", p->spill, strerror(errno));
        goto out;
    }
    setvbuf(spill, NULL, _IOFBF, 4 << 20);
    uint64_t cap = 0;
    for (uint32_t r = 0; r < p->ranks && rc == 0; r++) {
        struct schedule sched;
        struct schedule_params sp = {.rank = r,
                                     .ranks = p->ranks,
                                     .batch_size = shape.batch_size,
                                     .epochs = p->epochs,
                                     .eval_every = (uint32_t)p->cfg.train.eval_every,
                                     .test_with_val = p->cfg.train.early_stop_patience > 0,
                                     .seed = (uint64_t)p->cfg.train.seed};
        schedule_split_sizes(&p->meta, sp.split_n);
        if ((rc = schedule_open(&sched, schedule_find(SCHEDULE_DEFAULT), &sp, err, errlen)) != 0)
            break;
        if ((rc = schedule_load(&sched, p->dataset, &p->meta, err, errlen)) != 0) {
            schedule_free(&sched);
            break;
        }
        uint64_t len = schedule_len(&sched);
        if (p->nent + len > cap) {
            uint64_t ncap = SL_MAX(cap * 2, p->nent + len);
            struct pack_entry *ne = realloc(p->ent, ncap * sizeof *ne);
            if (!ne) {
                rc = sl_errf(err, errlen, -ENOMEM, "no memory for the index of %" PRIu64 " batches", ncap);
                schedule_free(&sched);
                break;
            }
            p->ent = ne;
            cap = ncap;
        }
        struct schedule_cursor cur;
        schedule_cursor_init(&cur, &sched, 0);
        for (uint64_t g = 0; g < len && rc == 0; g++) {
            struct schedule_batch sb;
            if ((rc = schedule_batch(&cur, g, &sb, err, errlen)) != 0)
                break;
            struct batch_id id = {.batch = g, .epoch = sb.pos.epoch, .rank = r, .split = sb.pos.split};
            struct batch_view v;
            /* the sampler leaves the alignment padding between sections unwritten: zero it, so that a batch's
               image (and the pack's checksum) is the same whatever the slot held before */
            memset(p->slot, 0, p->slot_bytes);
            if ((rc = sampler_sample(&s, p->slot, p->slot_bytes, sb.targets, sb.pos.targets, &id, sb.seed, NULL, err,
                                     errlen)) != 0 ||
                (rc = batch_view(p->slot, p->slot_bytes, BATCH_VIEW_HEADER_ONLY, &v, err, errlen)) != 0)
                break;
            uint32_t nn = batch_nodes(&v);
            for (uint32_t i = 0; i < nn; i++)
                if (p->count[v.nodes[i]] < UINT32_MAX)
                    p->count[v.nodes[i]]++;
            p->ent[p->nent++] = (struct pack_entry){.rank = r,
                                                    .epoch = sb.pos.epoch,
                                                    .split = sb.pos.split,
                                                    .targets = sb.pos.targets,
                                                    .k = sb.pos.k,
                                                    .g = g,
                                                    .batch_bytes = v.h.bytes,
                                                    .nodes = nn};
            p->man.accesses += nn;
            p->man.max_nodes = SL_MAX(p->man.max_nodes, nn);
            if (fwrite(p->slot, 1, (size_t)v.h.bytes, spill) != v.h.bytes)
                rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", p->spill, strerror(errno));
        }
        schedule_cursor_free(&cur);
        schedule_free(&sched);
    }
    if (fclose(spill) != 0 && rc == 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", p->spill, strerror(errno));
out:
    sampler_free(&s);
    sampler_topo_free(&topo);
    return rc;
}

/* Pass 2: at most cap of the rows read by >= 2 batches that `skip` (a
 * bitmap, or NULL) lacks, most-read first (ties: smaller id), into the
 * bitmap *out (allocated); *taken gets how many. */
static int choose_top(struct packer *p, uint64_t cap, const uint8_t *skip, uint8_t **out, uint64_t *taken_out,
                      char *err, size_t errlen)
{
    uint64_t n = p->meta.nodes;
    uint8_t *set = *out = calloc(n / 8 + 1, 1);
    if (!set)
        return sl_errf(err, errlen, -ENOMEM, "no memory for a tier's bitmap");
#define SKIPPED(v) (skip && (skip[(v) >> 3] >> ((v) & 7) & 1))
    /* the threshold: counts histogram (counts above HMAX share a bucket; those are taken first) */
    enum { HMAX = 1 << 16 };
    uint64_t *hist = calloc(HMAX + 1, sizeof *hist);
    if (!hist)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    for (uint64_t v = 0; v < n; v++)
        if (p->count[v] >= 2 && !SKIPPED(v))
            hist[SL_MIN(p->count[v], HMAX)]++;
    uint64_t taken = 0, t = HMAX + 1;
    while (t > 2 && taken + hist[t - 1] <= cap)
        taken += hist[--t];
    /* every count >= t is in; below t, count t - 1 fills what is left in id order */
    uint64_t left = t > 2 ? cap - taken : 0;
    free(hist);
    uint64_t nh = 0;
    for (uint64_t v = 0; v < n; v++) {
        uint64_t c = SL_MIN(p->count[v], HMAX);
        if (c < 2 || SKIPPED(v))
            continue;
        if (c >= t || (c == t - 1 && left > 0)) {
            if (c < t)
                left--;
            set[v >> 3] |= (uint8_t)(1u << (v & 7));
            nh++;
        }
    }
#undef SKIPPED
    *taken_out = nh;
    return 0;
}

/* The hot tier: at most cap rows; hot_ids ascending. */
static int choose_hot(struct packer *p, uint64_t cap, char *err, size_t errlen)
{
    uint64_t nh = 0;
    int rc = choose_top(p, cap, NULL, &p->hot, &nh, err, errlen);
    if (rc)
        return rc;
    p->hot_ids = malloc(SL_MAX(nh, 1) * sizeof *p->hot_ids);
    if (!p->hot_ids)
        return sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " hot ids", nh);
    p->nhot = 0;
    for (uint64_t v = 0; v < p->meta.nodes; v++)
        if (is_hot(p, v))
            p->hot_ids[p->nhot++] = v;
    return 0;
}

/* Rows of the cache tier that save at least `need` bytes of chunks over
 * full replication: a row read by c batches stored once instead of c
 * times saves (c - 1) rows, less what its reads add to the chunks' tails
 * (4 bytes an access, and an extent of 16 bytes at worst). Most-read
 * first, as choose_top takes them; when all the rows that save anything
 * do not save enough, all of them (*enough false). */
static uint64_t cache_rows_for(const struct packer *p, uint64_t need, bool *enough)
{
    *enough = false;
    enum { HMAX = 1 << 16 };
    uint64_t *hist = calloc(HMAX + 1, sizeof *hist);
    if (!hist)
        return 0; /* no cache: the limit refuses the pack */
    for (uint64_t v = 0; v < p->meta.nodes; v++)
        if (p->count[v] >= 2 && !is_hot(p, v))
            hist[SL_MIN(p->count[v], HMAX)]++;
    uint64_t saved = 0, taken = 0;
    for (uint64_t t = HMAX; t >= 2 && !*enough; t--) {
        int64_t per = (int64_t)((t - 1) * p->row_bytes) - (int64_t)(20 * t);
        if (per <= 0)
            break;
        for (uint64_t k = 0; k < hist[t]; k++) { /* by whole rows: the last bucket may be needed in part */
            saved += (uint64_t)per;
            taken++;
            if (saved >= need) {
                *enough = true;
                break;
            }
        }
    }
    free(hist);
    return taken;
}

/* Place of v among the cache nodes in node order (the layout a cache in
 * id order would have: the comparison for first-touch order). */
static uint32_t id_place(const struct packer *p, uint64_t v)
{
    uint64_t w = 0;
    memcpy(&w, p->cache + (v >> 6) * 8, SL_MIN((uint64_t)8, p->meta.nodes / 8 + 1 - (v >> 6) * 8));
    uint64_t below = (v & 63) ? w & ((1ull << (v & 63)) - 1) : 0;
    return p->id_rank[v >> 6] + (uint32_t)__builtin_popcountll(below);
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A batch's cache extents. pair[i] = place << 32 | i for its c cache
 * nodes (i: the node's position among them, in nodes[] order) is sorted
 * here; the rows whose aligned blocks lie within the pack's cache_gap
 * (--cache-gap) of the extent before join it. ext (c at most) gets the extents, off (when not
 * NULL) each node's offset in the extents read back to back; *bytes the
 * extents' sum. Returns the extents' count. */
static uint32_t plan_extents(const struct packer *p, uint64_t *pair, uint32_t c, struct pack_extent *ext, uint32_t *off,
                             uint64_t *bytes)
{
    qsort(pair, c, sizeof *pair, u64_cmp);
    const struct pack_manifest *m = &p->man;
    uint32_t ne = 0;
    uint64_t sum = 0;
    for (uint32_t j = 0; j < c; j++) {
        uint64_t q = pair[j] >> 32, b = pack_cache_row_off(m, q);
        uint64_t s = b / PACK_ALIGN * PACK_ALIGN, e = pack_round(b + p->row_bytes);
        if (ne > 0 && s <= ext[ne - 1].off + ext[ne - 1].len + m->cache_gap) {
            uint64_t end = SL_MAX(ext[ne - 1].off + ext[ne - 1].len, e);
            sum += end - (ext[ne - 1].off + ext[ne - 1].len);
            ext[ne - 1].len = end - ext[ne - 1].off;
        } else {
            ext[ne++] = (struct pack_extent){s, e - s};
            sum += e - s;
        }
        if (off)
            off[(uint32_t)pair[j]] = (uint32_t)(sum - (ext[ne - 1].off + ext[ne - 1].len - b));
    }
    *bytes = sum;
    return ne;
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Distinct blocks of `bs` bytes of the cache's rows that the rows at
 * places pair[j] >> 32 (ascending) touch. */
static uint64_t count_blocks(const uint64_t *pair, uint32_t c, uint64_t rb, uint64_t bs)
{
    uint64_t n = 0, next = 0;
    for (uint32_t j = 0; j < c; j++) {
        uint64_t q = pair[j] >> 32, b0 = SL_MAX(q * rb / bs, next), b1 = (q * rb + rb - 1) / bs;
        if (b1 >= b0)
            n += b1 - b0 + 1;
        next = SL_MAX(next, b1 + 1);
    }
    return n;
}

/* Pass 3: rows and offsets of every chunk (the spill file read again for
 * the nodes); with a cache tier, each cache row placed where the first
 * batch that reads it (in index order) puts it, each batch's extents
 * planned, and the layout compared with node order and random places.
 * Returns the end of chunks.bin in *end. Runs again after a change of
 * tiers (everything it counts starts from zero). */
static int lay_out(struct packer *p, uint64_t *end, char *err, size_t errlen)
{
    FILE *f = fopen(p->spill, "r");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", p->spill, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 4 << 20);
    int rc = 0;
    uint64_t off = PACK_ALIGN;
    p->man.packed_rows = p->man.cache_accesses = p->man.cache_extents = p->man.cache_read = 0;
    memset(p->blk4, 0, sizeof p->blk4);
    memset(p->blk64, 0, sizeof p->blk64);
    memset(p->ext, 0, sizeof p->ext);
    memset(p->xbytes, 0, sizeof p->xbytes);
    p->rnd4 = p->rnd64 = 0;
    p->placed = 0;
    p->man.cache_rows = p->ncache; /* pack_cache_row_off needs it */
    uint64_t rows_bytes = p->ncache * p->row_bytes;
    double nb4 = (double)((rows_bytes + 4095) / 4096), nb64 = (double)((rows_bytes + 65535) / 65536);
    /* blocks one row at a random place touches: its places are multiples of row_bytes, so its offset in a
       block is a uniform multiple of g = gcd(row_bytes, block) and it spans 1 + (row_bytes - g) / block on
       average */
    double k4 = 1.0 + (double)(p->row_bytes - gcd_u64(p->row_bytes, 4096)) / 4096.0;
    double k64 = 1.0 + (double)(p->row_bytes - gcd_u64(p->row_bytes, 65536)) / 65536.0;
    for (uint64_t i = 0; i < p->nent && rc == 0; i++) {
        struct pack_entry *e = &p->ent[i];
        struct batch_view v;
        if (fread(p->slot, 1, (size_t)e->batch_bytes, f) != e->batch_bytes) {
            rc = sl_errf(err, errlen, -EIO, "%s: short read", p->spill);
            break;
        }
        if ((rc = batch_view(p->slot, (size_t)e->batch_bytes, BATCH_VIEW_HEADER_ONLY, &v, err, errlen)) != 0)
            break;
        uint32_t rows = 0, c = 0;
        for (uint32_t j = 0; j < e->nodes; j++) {
            uint64_t u = v.nodes[j];
            if (is_hot(p, u))
                continue;
            if (!is_cache(p, u)) {
                rows++;
                continue;
            }
            if (p->place[u] == UINT32_MAX) {
                p->place[u] = (uint32_t)p->placed;
                p->cache_ids[p->placed++] = u;
            }
            p->tmp_pair[c] = (uint64_t)p->place[u] << 32 | c;
            c++;
        }
        e->rows = rows;
        e->cached = c;
        e->cache_ext = 0;
        e->cache_bytes = 0;
        if (c) {
            e->cache_ext = plan_extents(p, p->tmp_pair, c, p->tmp_ext, NULL, &e->cache_bytes);
            if (e->cache_bytes > UINT32_MAX) {
                rc = sl_errf(err, errlen, -EINVAL,
                             "a batch's cache rows span %" PRIu64 " bytes of the cache file, more than a chunk "
                             "addresses; use a smaller --cache-limit",
                             e->cache_bytes);
                break;
            }
            p->blk4[0] += count_blocks(p->tmp_pair, c, p->row_bytes, 4096);
            p->blk64[0] += count_blocks(p->tmp_pair, c, p->row_bytes, 65536);
            p->ext[0] += e->cache_ext;
            /* the same rows placed in node order */
            uint32_t k = 0;
            for (uint32_t j = 0; j < e->nodes; j++)
                if (is_cache(p, v.nodes[j])) {
                    p->tmp_pair[k] = (uint64_t)id_place(p, v.nodes[j]) << 32 | k;
                    k++;
                }
            uint64_t xb;
            p->ext[1] += plan_extents(p, p->tmp_pair, c, p->tmp_ext, NULL, &xb);
            p->xbytes[1] += xb;
            p->blk4[1] += count_blocks(p->tmp_pair, c, p->row_bytes, 4096);
            p->blk64[1] += count_blocks(p->tmp_pair, c, p->row_bytes, 65536);
            /* uniformly random places: c rows of k blocks each in nb blocks touch about nb (1 - (1 - k/nb)^c) */
            p->rnd4 += nb4 * (1.0 - pow(SL_MAX(0.0, 1.0 - k4 / nb4), (double)c));
            p->rnd64 += nb64 * (1.0 - pow(SL_MAX(0.0, 1.0 - k64 / nb64), (double)c));
        }
        e->off = off;
        e->span = pack_round(e->batch_bytes) + pack_round(pack_rows_tail_bytes(e, p->row_bytes));
        off += e->span;
        p->man.packed_rows += rows;
        p->man.cache_accesses += c;
        p->man.cache_extents += e->cache_ext;
        p->man.cache_read += e->cache_bytes;
    }
    fclose(f);
    if (rc == 0 && p->placed != p->ncache)
        rc = sl_errf(err, errlen, -EINVAL, "%" PRIu64 " cache rows chosen, %" PRIu64 " placed: a bug", p->ncache,
                     p->placed);
    *end = off;
    return rc;
}

/* Pass 4: chunks.bin, group by group. */
static int write_chunks(struct packer *p, struct feat_reader *fr, uint64_t group_budget, char *err, size_t errlen)
{
    char path[4200];
    dataset_dir_path(&p->out, PACK_CHUNKS, path, sizeof path);
    struct file_writer w;
    int rc = file_writer_open(&w, path, err, errlen);
    if (rc)
        return rc;
    FILE *spill = fopen(p->spill, "r");
    unsigned char *buf = NULL;
    struct req *reqs = NULL;
    if (!spill) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot open: %s", p->spill, strerror(errno));
        goto out;
    }
    setvbuf(spill, NULL, _IOFBF, 4 << 20);
    unsigned char page[PACK_ALIGN] = {0};
    struct pack_file_hdr h = {.magic = PACK_CHUNKS_MAGIC, .version = PACK_VERSION, .count = p->nent,
                              .identity = p->man.identity};
    memcpy(page, &h, sizeof h);
    if ((rc = file_writer_write(&w, page, sizeof page, err, errlen)) != 0)
        goto out;
    /* the largest group: what the budget holds (at least one chunk) */
    uint64_t gmax = 0, rmax = 0;
    for (uint64_t i = 0; i < p->nent;) {
        uint64_t bytes = 0, rows = 0, j = i;
        while (j < p->nent && (j == i || bytes + p->ent[j].span + 16 * (rows + p->ent[j].rows) <= group_budget)) {
            bytes += p->ent[j].span;
            rows += p->ent[j].rows;
            j++;
        }
        gmax = SL_MAX(gmax, bytes);
        rmax = SL_MAX(rmax, rows);
        i = j;
    }
    if (!(buf = aligned_alloc(PACK_ALIGN, SL_MAX(gmax, PACK_ALIGN))) ||
        !(reqs = malloc(SL_MAX(rmax, 1) * sizeof *reqs))) {
        rc = sl_errf(err, errlen, -ENOMEM, "no memory for a group of chunks (%" PRIu64 " bytes)", gmax);
        goto out;
    }
    for (uint64_t i = 0; i < p->nent && rc == 0;) {
        uint64_t bytes = 0, rows = 0, j = i;
        while (j < p->nent && (j == i || bytes + p->ent[j].span + 16 * (rows + p->ent[j].rows) <= group_budget)) {
            bytes += p->ent[j].span;
            rows += p->ent[j].rows;
            j++;
        }
        memset(buf, 0, (size_t)bytes); /* the padding */
        size_t nr = 0;
        uint64_t base = p->ent[i].off;
        for (uint64_t k = i; k < j && rc == 0; k++) {
            const struct pack_entry *e = &p->ent[k];
            unsigned char *img = buf + (e->off - base);
            struct batch_view v;
            if (fread(img, 1, (size_t)e->batch_bytes, spill) != e->batch_bytes) {
                rc = sl_errf(err, errlen, -EIO, "%s: short read", p->spill);
                break;
            }
            if ((rc = batch_view(img, (size_t)e->batch_bytes, BATCH_VIEW_HEADER_ONLY, &v, err, errlen)) != 0)
                break;
            uint64_t dst = pack_rows_off(e) - base;
            uint32_t c = 0;
            for (uint32_t q = 0; q < e->nodes; q++) {
                uint64_t u = v.nodes[q];
                if (is_hot(p, u))
                    continue;
                if (is_cache(p, u)) {
                    p->tmp_pair[c] = (uint64_t)p->place[u] << 32 | c;
                    c++;
                    continue;
                }
                reqs[nr++] = (struct req){u, dst};
                dst += p->row_bytes;
            }
            if (c != e->cached) {
                rc = sl_errf(err, errlen, -EIO, "%s: changed since the layout pass", p->spill);
                break;
            }
            if (c) { /* the tail: the extents, then each cache node's offset in them */
                uint64_t xb;
                uint32_t ne = plan_extents(p, p->tmp_pair, c, p->tmp_ext, p->tmp_off, &xb);
                unsigned char *tail = buf + (pack_rows_off(e) - base) + pack_tail_rel(e, p->row_bytes);
                memcpy(tail, p->tmp_ext, (size_t)ne * sizeof *p->tmp_ext);
                memcpy(tail + (size_t)ne * sizeof *p->tmp_ext, p->tmp_off, (size_t)c * sizeof *p->tmp_off);
                if (ne != e->cache_ext || xb != e->cache_bytes) {
                    rc = sl_errf(err, errlen, -EIO, "%s: changed since the layout pass", p->spill);
                    break;
                }
            }
        }
        if (rc)
            break;
        qsort(reqs, nr, sizeof *reqs, req_cmp);
        if ((rc = gather(fr, reqs, nr, buf, err, errlen)) != 0 ||
            (rc = file_writer_write(&w, buf, (size_t)bytes, err, errlen)) != 0)
            break;
        i = j;
    }
    if (rc == 0)
        rc = file_writer_close(&w, &p->man.chunks_bytes, &p->man.chunks_xxh3, err, errlen);
out:
    file_writer_free(&w);
    if (spill)
        fclose(spill);
    free(buf);
    free(reqs);
    return rc;
}

/* hot.bin or cache.bin: header page, the n ids (in the file's order),
 * rows in the same order (gathered in pieces of the budget, each piece's
 * requests sorted by node for the sequential pass over features.bin). */
static int write_tier(struct packer *p, struct feat_reader *fr, uint64_t budget, const char *name, uint64_t magic,
                      const uint64_t *ids, uint64_t n, uint64_t *bytes, uint64_t *xxh3, char *err, size_t errlen)
{
    char path[4200];
    dataset_dir_path(&p->out, name, path, sizeof path);
    struct file_writer w;
    int rc = file_writer_open(&w, path, err, errlen);
    if (rc)
        return rc;
    unsigned char page[PACK_ALIGN] = {0};
    struct pack_file_hdr h = {.magic = magic, .version = PACK_VERSION, .entry = (uint32_t)p->row_bytes,
                              .count = n, .identity = p->man.identity};
    memcpy(page, &h, sizeof h);
    uint64_t idb = n * 8, rb = n * p->row_bytes;
    uint64_t per = SL_MAX(budget / (p->row_bytes + 16), 1);
    per = SL_MIN(per, SL_MAX(n, 1));
    unsigned char *buf = malloc((size_t)(per * p->row_bytes));
    struct req *reqs = malloc((size_t)per * sizeof *reqs);
    if (!buf || !reqs)
        rc = sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " rows of %s", per, name);
    if (rc == 0)
        rc = file_writer_write(&w, page, sizeof page, err, errlen);
    if (rc == 0)
        rc = file_writer_write(&w, ids, (size_t)idb, err, errlen);
    if (rc == 0)
        rc = file_writer_zero(&w, (size_t)(pack_round(idb) - idb), err, errlen);
    for (uint64_t i = 0; rc == 0 && i < n; i += per) {
        uint64_t k = SL_MIN(per, n - i);
        for (uint64_t j = 0; j < k; j++)
            reqs[j] = (struct req){ids[i + j], j * p->row_bytes};
        qsort(reqs, (size_t)k, sizeof *reqs, req_cmp);
        if ((rc = gather(fr, reqs, (size_t)k, buf, err, errlen)) == 0)
            rc = file_writer_write(&w, buf, (size_t)(k * p->row_bytes), err, errlen);
    }
    if (rc == 0)
        rc = file_writer_zero(&w, (size_t)(pack_round(rb) - rb), err, errlen);
    if (rc == 0)
        rc = file_writer_close(&w, bytes, xxh3, err, errlen);
    file_writer_free(&w);
    free(buf);
    free(reqs);
    return rc;
}

/* The cache tier of at most cap rows (after the hot tier): its bitmap,
 * the counts' memory turned into each node's place (the counts are gone
 * after this), the ids and the per-batch scratch, taken from *budget
 * (the groups' memory). */
static int setup_cache(struct packer *p, uint64_t cap, uint64_t *budget, char *err, size_t errlen)
{
    char a[32], b[32];
    uint64_t n = p->meta.nodes, nc = 0;
    int rc = choose_top(p, cap, p->hot, &p->cache, &nc, err, errlen);
    if (rc)
        return rc;
    if (nc >= UINT32_MAX)
        return sl_errf(err, errlen, -EINVAL, "a cache tier of %" PRIu64 " rows is more than a pack addresses; use a "
                       "smaller --cache-limit", nc);
    uint64_t mx = p->man.max_nodes, need = nc * 8 + mx * (8 + sizeof(struct pack_extent) + 4) + (n / 64 + 1) * 4;
    if (need + PACK_ALIGN * 64 > *budget)
        return sl_errf(err, errlen, -EINVAL,
                       "--mem-limit %s leaves too little for a cache tier of %" PRIu64 " rows (%s more); raise "
                       "--mem-limit or lower --cache-limit",
                       mb(p->mem_limit, a, sizeof a), nc, mb(need + PACK_ALIGN * 64, b, sizeof b));
    *budget -= need;
    p->ncache = nc;
    for (uint64_t v = 0; v < n; v++)
        if (p->count[v] && !is_hot(p, v) && !is_cache(p, v))
            p->man.distinct_packed++;
    p->place = p->count;
    p->count = NULL;
    for (uint64_t v = 0; v < n; v++)
        p->place[v] = UINT32_MAX;
    if (!(p->cache_ids = malloc(SL_MAX(nc, 1) * 8)) || !(p->tmp_pair = malloc(SL_MAX(mx, 1) * 8)) ||
        !(p->tmp_ext = malloc(SL_MAX(mx, 1) * sizeof *p->tmp_ext)) || !(p->tmp_off = malloc(SL_MAX(mx, 1) * 4)) ||
        !(p->id_rank = malloc((n / 64 + 1) * 4)))
        return sl_errf(err, errlen, -ENOMEM, "no memory for a cache tier of %" PRIu64 " rows", nc);
    uint32_t acc = 0;
    for (uint64_t w = 0; w <= n / 64; w++) {
        p->id_rank[w] = acc;
        for (uint64_t u = w * 64; u < SL_MIN(n, w * 64 + 64); u++)
            acc += is_cache(p, u);
    }
    return 0;
}

static int write_index(struct packer *p, char *err, size_t errlen)
{
    char path[4200];
    dataset_dir_path(&p->out, PACK_INDEX, path, sizeof path);
    struct file_writer w;
    int rc = file_writer_open(&w, path, err, errlen);
    if (rc)
        return rc;
    struct pack_file_hdr h = {.magic = PACK_INDEX_MAGIC, .version = PACK_VERSION,
                              .entry = sizeof(struct pack_entry), .count = p->nent, .identity = p->man.identity};
    if ((rc = file_writer_write(&w, &h, sizeof h, err, errlen)) == 0 &&
        (rc = file_writer_write(&w, p->ent, (size_t)(p->nent * sizeof *p->ent), err, errlen)) == 0)
        rc = file_writer_close(&w, &p->man.index_bytes, &p->man.index_xxh3, err, errlen);
    file_writer_free(&w);
    return rc;
}

/* A message for a write that failed for room. */
static int disk_msg(int rc, const char *out, uint64_t need, char *err, size_t errlen)
{
    if (rc != -ENOSPC && rc != -EDQUOT && rc != -EFBIG)
        return rc;
    char a[32], b[1024];
    snprintf(b, sizeof b, "%s", err ? err : "");
    if (need == 0)
        return sl_errf(err, errlen, -ENOSPC,
                       "%s; the disk is full: nothing was left behind; free space beside %s or pack fewer epochs", b,
                       out);
    return sl_errf(err, errlen, -ENOSPC,
                   "%s; the disk is full (the pack needs %s): nothing was left behind; free space beside %s or pack "
                   "fewer epochs",
                   b, mb(need, a, sizeof a), out);
}

static int run(struct packer *p, const char *out, char *err, size_t errlen)
{
    char a[32], b[32], c[32], d[32], e[32];
    uint64_t t0 = sl_now_ns();
    int rc;
    const struct dataset_file *ff = &p->meta.f[DATASET_FEATURES];
    if (!ff->present || ff->cols == 0)
        return sl_errf(err, errlen, -EINVAL, "%s has no features.bin: nothing to pack", p->dataset);
    p->row_bytes = ff->cols * dtype_size(ff->dtype);
    if ((rc = run_arena_plan(&p->cfg, &p->meta, &p->ap, err, errlen)) != 0)
        return rc;
    p->slot_bytes = (size_t)sl_round_up(p->ap.batch.max_bytes, PACK_ALIGN);
    p->man.identity = dataset_meta_identity(&p->meta);
    /* the fixed memory, checked before anything is allocated */
    uint64_t n = p->meta.nodes, batches = 0;
    uint64_t split_n[BATCH_SPLITS];
    schedule_split_sizes(&p->meta, split_n);
    {
        struct schedule s;
        struct schedule_params sp = {.rank = 0, .ranks = p->ranks, .batch_size = p->ap.shape.batch_size,
                                     .epochs = p->epochs, .eval_every = (uint32_t)p->cfg.train.eval_every,
                                     .test_with_val = p->cfg.train.early_stop_patience > 0};
        memcpy(sp.split_n, split_n, sizeof split_n);
        for (uint32_t r = 0; r < p->ranks; r++) {
            sp.rank = r;
            if ((rc = schedule_open(&s, NULL, &sp, err, errlen)) != 0)
                return rc;
            batches += schedule_len(&s);
            schedule_free(&s);
        }
    }
    uint64_t fixed = n * 4 + n / 8 + (n + 1) * 8 + batches * sizeof(struct pack_entry) + 2 * p->slot_bytes +
                     (split_n[0] + split_n[1] + split_n[2]) * 16 + p->ap.batch.n_max[p->ap.shape.layers] * 24;
    uint64_t least = fixed + PART_MIN + 2 * p->slot_bytes;
    if (p->mem_limit < least)
        return sl_errf(err, errlen, -EINVAL,
                       "--mem-limit %s is below the %s packing %" PRIu64 " nodes and %" PRIu64
                       " batches needs at least (node counts, index, one batch); raise --mem-limit",
                       mb(p->mem_limit, a, sizeof a), mb(least, b, sizeof b), n, batches);
    /* sampling (pass 1) holds the topology, packing (pass 4) the groups: never both */
    /* (the "memory" topology also reads labels.bin into memory: sampler.h) */
    uint64_t labels = p->meta.f[DATASET_LABELS].present ? p->meta.f[DATASET_LABELS].bytes : 0;
    p->topo_memory = p->meta.f[DATASET_INDICES].bytes + labels + SAMPLER_IO_ALIGN <= p->mem_limit - fixed;
    size_t part = (size_t)SL_MIN(PART_MAX, SL_MAX(PART_MIN, (p->mem_limit - fixed) / 4));
    part = part / PACK_ALIGN * PACK_ALIGN;
    uint64_t group_budget = p->mem_limit - fixed - part;
    if (!(p->count = calloc(n, sizeof *p->count)) || !(p->slot = aligned_alloc(PACK_ALIGN, p->slot_bytes)))
        return sl_errf(err, errlen, -ENOMEM, "no memory for the access counts of %" PRIu64 " nodes", n);
    if ((rc = dataset_dir_begin(&p->out, out, err, errlen)) != 0)
        return rc;
    dataset_dir_path(&p->out, SPILL_FILE, p->spill, sizeof p->spill);
    /* 1. sample */
    if ((rc = sample_all(p, err, errlen)) != 0)
        return disk_msg(rc, out, 0, err, errlen);
    double sample_s = (double)(sl_now_ns() - t0) / 1e9;
    /* 2. tiers: the feature buffer's rows beside the extraction reserve (launcher/layout.c) */
    uint64_t stride = sl_round_up(p->row_bytes, FEATBUF_ROW_ALIGN_DEFAULT);
    uint64_t slots = SL_MIN((uint64_t)p->cfg.pipeline.feature_buffer_mb * (1ull << 20) / stride, n);
    uint64_t reserve = SL_MIN((uint64_t)p->cfg.pipeline.extractors * p->ap.batch.n_max[p->ap.shape.layers], n);
    uint64_t hot_cap = slots > reserve ? slots - reserve : 0;
    if ((rc = choose_hot(p, hot_cap, err, errlen)) != 0)
        return rc;
    p->man.row_bytes = p->row_bytes;
    if (p->cache_limit / p->row_bytes > 0 && (rc = setup_cache(p, p->cache_limit / p->row_bytes, &group_budget, err,
                                                                errlen)) != 0)
        return rc;
    /* 3. layout and the limits */
    uint64_t end = 0;
    if ((rc = lay_out(p, &end, err, errlen)) != 0)
        return rc;
    uint64_t hot_file = PACK_ALIGN + pack_round(p->nhot * 8) + pack_round(p->nhot * p->row_bytes);
    uint64_t index_file = sizeof(struct pack_file_hdr) + p->nent * sizeof(struct pack_entry);
    uint64_t cache_file = pack_round(pack_cache_row_off(&p->man, p->ncache));
    uint64_t total = end + hot_file + cache_file + index_file + 4096;
    uint64_t full = total; /* without a cache tier, when --disk-limit chooses one */
    bool chosen = false;
    if (p->disk_limit && total > p->disk_limit && !p->cache_given) {
        /* DiskGNN's rule: the disk cache comes in when packing would exceed the space limit */
        bool enough; /* if not, the smallest pack a cache makes, for the refusal below */
        uint64_t rows = cache_rows_for(p, total - p->disk_limit, &enough);
        if (rows > 0) {
            if ((rc = setup_cache(p, rows, &group_budget, err, errlen)) != 0 || (rc = lay_out(p, &end, err, errlen)))
                return rc;
            cache_file = pack_round(pack_cache_row_off(&p->man, p->ncache));
            total = end + hot_file + cache_file + index_file + 4096;
            chosen = true;
        }
    }
    if (p->ncache == 0 && p->count) {
        for (uint64_t v = 0; v < n; v++)
            if (p->count[v] && !is_hot(p, v))
                p->man.distinct_packed++;
    }
    if (p->disk_limit && total > p->disk_limit)
        return sl_errf(err, errlen, -E2BIG,
                       "the pack would take %s (chunks %s: %" PRIu64 " rows stored %.2f times each on average; hot "
                       "tier %s; cache tier %" PRIu64 " rows, %s), over --disk-limit %s; pack fewer epochs, raise "
                       "pipeline.feature_buffer_mb (a larger hot tier), give a larger --cache-limit or raise "
                       "--disk-limit",
                       mb(total, a, sizeof a), mb(end, b, sizeof b), p->man.packed_rows,
                       p->man.distinct_packed ? (double)p->man.packed_rows / (double)p->man.distinct_packed : 0.0,
                       mb(hot_file, c, sizeof c), p->ncache, mb(cache_file, d, sizeof d),
                       mb(p->disk_limit, e, sizeof e));
    struct statvfs vfs;
    if (statvfs(p->out.tmp, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < total)
        return sl_errf(err, errlen, -ENOSPC,
                       "the pack would take %s but only %s is free beside %s: free space, pack fewer epochs or "
                       "write it elsewhere; nothing was left behind",
                       mb(total, a, sizeof a), mb((uint64_t)vfs.f_bavail * vfs.f_frsize, b, sizeof b), out);
    if (p->count) { /* no longer needed: its memory goes to the groups */
        free(p->count);
        p->count = NULL;
        group_budget += n * 4;
    }
    /* 4. pack */
    struct feat_reader fr;
    if ((rc = feat_open(&fr, p->dataset, &p->meta, part, err, errlen)) != 0)
        return rc;
    uint64_t t1 = sl_now_ns();
    rc = write_chunks(p, &fr, group_budget, err, errlen);
    if (rc == 0)
        rc = write_tier(p, &fr, group_budget, PACK_HOT, PACK_HOT_MAGIC, p->hot_ids, p->nhot, &p->man.hot_bytes,
                        &p->man.hot_xxh3, err, errlen);
    if (rc == 0)
        rc = write_tier(p, &fr, group_budget, PACK_CACHE, PACK_CACHE_MAGIC, p->cache_ids, p->ncache,
                        &p->man.cache_bytes, &p->man.cache_xxh3, err, errlen);
    double pack_s = (double)(sl_now_ns() - t1) / 1e9;
    uint64_t feat_reads = fr.reads, feat_bytes = fr.bytes;
    bool direct = fr.direct;
    feat_close(&fr);
    if (rc == 0)
        rc = write_index(p, err, errlen);
    if (rc)
        return disk_msg(rc, out, total, err, errlen);
    unlink(p->spill);
    p->man.version = PACK_VERSION;
    p->man.nodes = n;
    p->man.row_bytes = p->row_bytes;
    p->man.epochs = p->epochs;
    p->man.ranks = p->ranks;
    p->man.batches = p->nent;
    p->man.hot_rows = p->nhot;
    p->man.pack_seconds = (double)(sl_now_ns() - t0) / 1e9;
    pack_sampling_text(&p->cfg, p->ranks, p->man.sampling, sizeof p->man.sampling);
    snprintf(p->man.dataset, sizeof p->man.dataset, "%s", p->dataset);
    if ((rc = pack_manifest_write(p->out.tmp, &p->man, err, errlen)) != 0 ||
        (rc = dataset_dir_rename(&p->out, err, errlen)) != 0)
        return disk_msg(rc, out, total, err, errlen);
    const struct pack_manifest *m = &p->man;
    if (chosen)
        printf("disk_bytes_without_cache=%" PRIu64 "\n", full);
    if (m->cache_rows) {
        double nb = (double)m->batches; /* batches reading cache rows: means over all batches */
        printf("cache_rows=%" PRIu64 "\ncache_bytes=%" PRIu64 "\ncache_accesses=%" PRIu64 "\ncache_chosen_by=%s\n"
               "cache_gap=%" PRIu64 "\n"
               "packed_rows_without_cache=%" PRIu64 "\n"
               "cache_extents_per_batch=%.2f\ncache_extents_per_batch_node_order=%.2f\n"
               "cache_read_per_batch=%.0f\ncache_read_per_batch_node_order=%.0f\ncache_rows_per_batch=%.1f\n"
               "cache_blocks_4k_per_batch=%.1f\ncache_blocks_4k_per_batch_node_order=%.1f\n"
               "cache_blocks_4k_per_batch_random=%.1f\ncache_blocks_64k_per_batch=%.1f\n"
               "cache_blocks_64k_per_batch_node_order=%.1f\ncache_blocks_64k_per_batch_random=%.1f\n",
               m->cache_rows, m->cache_bytes, m->cache_accesses, chosen ? "disk-limit" : "cache-limit", m->cache_gap,
               m->packed_rows + m->cache_accesses, (double)p->ext[0] / nb, (double)p->ext[1] / nb, (double)m->cache_read / nb,
               (double)p->xbytes[1] / nb, (double)m->cache_accesses / nb, (double)p->blk4[0] / nb, (double)p->blk4[1] / nb, p->rnd4 / nb,
               (double)p->blk64[0] / nb, (double)p->blk64[1] / nb, p->rnd64 / nb);
    }
    printf("pack=%s\nbatches=%" PRIu64 "\nepochs=%" PRIu32 "\nranks=%" PRIu32 "\naccesses=%" PRIu64
           "\nhot_rows=%" PRIu64 "\npacked_rows=%" PRIu64 "\ndistinct_packed=%" PRIu64 "\nreplication=%.3f\n"
           "chunks_bytes=%" PRIu64 "\nhot_bytes=%" PRIu64 "\ndisk_bytes=%" PRIu64 "\nfeature_reads=%" PRIu64
           "\nfeature_read_bytes=%" PRIu64 "\nfeature_io=%s\nmem_limit=%" PRIu64 "\ntopology=%s\nsample_s=%.3f\n"
           "pack_s=%.3f\nseconds=%.3f\n",
           out, m->batches, m->epochs, m->ranks, m->accesses, m->hot_rows, m->packed_rows, m->distinct_packed,
           m->distinct_packed ? (double)m->packed_rows / (double)m->distinct_packed : 0.0, m->chunks_bytes,
           m->hot_bytes, m->chunks_bytes + m->hot_bytes + m->cache_bytes + m->index_bytes, feat_reads, feat_bytes,
           direct ? "direct" : "buffered", p->mem_limit, p->topo_memory ? "memory" : "mmap", sample_s, pack_s,
           m->pack_seconds);
    return 0;
}

int prep_pack_main(int argc, char **argv)
{
    char err[2048];
    uint64_t epochs = 0, disk_limit = 0, mem_limit = 1ull << 30, cache_limit = 0, cache_gap = PACK_CACHE_GAP;
    bool help = false, seen[6] = {0};
    const struct opt opts[] = {
        {.name = "--epochs", .kind = OPT_UINT, .dst = &epochs, .lo = 1, .hi = 1000000},
        {.name = "--disk-limit", .kind = OPT_SIZE, .dst = &disk_limit, .lo = 1, .hi = INT64_MAX},
        {.name = "--cache-limit", .kind = OPT_SIZE, .dst = &cache_limit, .lo = 0, .hi = INT64_MAX},
        {.name = "--mem-limit", .kind = OPT_SIZE, .dst = &mem_limit, .lo = 1, .hi = INT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
        {.name = "--cache-gap", .kind = OPT_SIZE, .dst = &cache_gap, .lo = 0, .hi = PACK_CACHE_GAP_MAX},
    };
    int first = 1;
    while (first < argc && first < 4 && strncmp(argv[first], "--", 2) != 0)
        first++;
    if (opt_parse("gnnprep pack", opts, SL_ARRAY_LEN(opts), argc, argv, first, seen, "; see --help", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (first != 4 || epochs == 0) {
        fprintf(stderr, "gnnprep pack: %s\n",
                first != 4 ? "wants DATASET CONFIG OUT before the options" : "--epochs is required");
        usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    static struct packer p;
    memset(&p, 0, sizeof p);
    p.dataset = argv[1];
    p.epochs = (uint32_t)epochs;
    p.mem_limit = mem_limit;
    p.disk_limit = disk_limit;
    p.cache_limit = cache_limit;
    p.cache_given = seen[2];
    p.man.cache_gap = cache_gap;
    int rc = config_load(&p.cfg, argv[2], NULL, 0, err, sizeof err);
    if (rc == 0) {
        /* the dataset given here, whatever the config's dataset.path says (the manifest binds the pack to its contents) */
        snprintf(p.cfg.dataset.path, sizeof p.cfg.dataset.path, "%s", argv[1]);
        p.ranks = (uint32_t)p.cfg.pipeline.ranks;
        rc = dataset_meta_read(argv[1], &p.meta, true, err, sizeof err);
        if (rc == 0)
            rc = run(&p, argv[3], err, sizeof err);
    }
    dataset_dir_abort(&p.out);
    free(p.ent);
    free(p.count);
    free(p.hot);
    free(p.hot_ids);
    free(p.slot);
    free(p.cache);
    free(p.place);
    free(p.cache_ids);
    free(p.tmp_pair);
    free(p.tmp_ext);
    free(p.tmp_off);
    free(p.id_rank);
    if (rc) {
        fprintf(stderr, "gnnprep pack: %s\n", err);
        return rc == -E2BIG ? PREP_EXIT_BAD_INPUT : rc == -ENOSPC ? PREP_EXIT_FAIL : prep_exit_code(rc);
    }
    return 0;
}

/* ---- gnnprep info on a pack ------------------------------------------------------------------ */

int prep_pack_info(const char *dir, bool verify)
{
    char err[2048], a[32], b[32], c[32];
    struct pack p;
    int rc = pack_open(&p, dir, true, err, sizeof err);
    if (rc) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        return prep_exit_code(rc);
    }
    if (verify && (rc = pack_verify(&p, PACK_FILE_INDEX | PACK_FILE_CHUNKS | PACK_FILE_HOT | PACK_FILE_CACHE, err,
                                    sizeof err)) != 0) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        pack_free(&p);
        return prep_exit_code(rc);
    }
    const struct pack_manifest *m = &p.m;
    uint64_t per_split[BATCH_SPLITS] = {0}, rows_min = UINT64_MAX, rows_max = 0, image = 0;
    for (uint64_t i = 0; i < m->batches; i++) {
        per_split[p.ent[i].split]++;
        rows_min = SL_MIN(rows_min, p.ent[i].rows);
        rows_max = SL_MAX(rows_max, p.ent[i].rows);
        image += p.ent[i].batch_bytes;
    }
    uint64_t disk = m->index_bytes + m->chunks_bytes + m->hot_bytes + m->cache_bytes;
    /* stored rows per distinct row outside the hot tier, with the cache tier and as if its rows were replicated */
    double dist = (double)(m->distinct_packed + m->cache_rows);
    double repl = dist > 0 ? (double)(m->packed_rows + m->cache_rows) / dist : 0.0;
    double repl_full = dist > 0 ? (double)(m->packed_rows + m->cache_accesses) / dist : 0.0;
    uint64_t online_rows = m->accesses; /* what online extraction without a cache would read */
    printf("pack         %s\n", dir);
    printf("dataset      %s (identity %016" PRIx64 ", %" PRIu64 " nodes, rows of %" PRIu64 " bytes)\n", m->dataset,
           m->identity, m->nodes, m->row_bytes);
    char samp[sizeof m->sampling];
    snprintf(samp, sizeof samp, "%s", m->sampling);
    printf("made for     ");
    for (const char *q = samp; *q; q++)
        if (*q != '\n')
            putchar(*q);
        else if (q[1])
            printf("; ");
    putchar('\n');
    printf("batches      %" PRIu64 " (%" PRIu64 " training, %" PRIu64 " validation, %" PRIu64 " test) over %" PRIu32
           " epoch%s and %" PRIu32 " rank%s\n",
           m->batches, per_split[0], per_split[1], per_split[2], m->epochs, m->epochs == 1 ? "" : "s", m->ranks,
           m->ranks == 1 ? "" : "s");
    printf("rows read    %" PRIu64 " by all batches (largest batch %" PRIu64 " nodes)\n", m->accesses, m->max_nodes);
    printf("hot tier     %" PRIu64 " rows, %s (held in memory by a packed run)\n", m->hot_rows,
           sl_fmt_bytes(m->hot_bytes, a, sizeof a));
    if (m->cache_rows)
        printf("cache tier   %" PRIu64 " rows, %s (cache.bin, shared by the batches): %" PRIu64
               " reads of them in %" PRIu64 " extents (rows joined over gaps up to %" PRIu64
               " bytes), %.1f a batch, %s read in all\n",
               m->cache_rows, sl_fmt_bytes(m->cache_bytes, a, sizeof a), m->cache_accesses, m->cache_extents,
               m->cache_gap, m->batches ? (double)m->cache_extents / (double)m->batches : 0.0,
               sl_fmt_bytes(m->cache_read, b, sizeof b));
    else
        printf("cache tier   none\n");
    printf("packed tier  %" PRIu64 " rows of %" PRIu64 " distinct nodes: replication %.2f; %" PRIu64 " .. %" PRIu64
           " rows a chunk\n",
           m->packed_rows, m->distinct_packed,
           m->distinct_packed ? (double)m->packed_rows / (double)m->distinct_packed : 0.0,
           rows_min == UINT64_MAX ? 0 : rows_min, rows_max);
    printf("replication  %.2f stored rows per distinct row on disk; %.2f without the cache tier (%s of rows more)\n",
           repl, repl_full, sl_fmt_bytes((m->cache_accesses - SL_MIN(m->cache_accesses, m->cache_rows)) * m->row_bytes,
                                         c, sizeof c));
    printf("chunks       %s (batch images %s, rows %s, padding the rest)\n", sl_fmt_bytes(m->chunks_bytes, a, sizeof a),
           sl_fmt_bytes(image, b, sizeof b), sl_fmt_bytes(m->packed_rows * m->row_bytes, c, sizeof c));
    printf("disk         %s in all (index %s); online reads of the same batches: %s of rows\n",
           sl_fmt_bytes(disk, a, sizeof a), sl_fmt_bytes(m->index_bytes, b, sizeof b),
           sl_fmt_bytes(online_rows * m->row_bytes, c, sizeof c));
    if (verify)
        printf("verified     every file's checksum matches the manifest\n");
    printf("replication=%.3f\nreplication_with_cache=%.3f\nreplication_without_cache=%.3f\ndisk_bytes=%" PRIu64
           "\nhot_bytes=%" PRIu64 "\nchunks_bytes=%" PRIu64 "\ncache_bytes=%" PRIu64 "\ncache_rows=%" PRIu64
           "\ncache_extents=%" PRIu64 "\ncache_read=%" PRIu64 "\npack_seconds=%.3f\n",
           m->distinct_packed ? (double)m->packed_rows / (double)m->distinct_packed : 0.0, repl, repl_full, disk,
           m->hot_bytes, m->chunks_bytes, m->cache_bytes, m->cache_rows, m->cache_extents, m->cache_read,
           m->pack_seconds);
    pack_free(&p);
    return 0;
}
