/* pack_cmd.c - `gnnprep pack DATASET CONFIG OUT --epochs E [--disk-limit
 * SIZE] [--mem-limit SIZE]`: samples every batch of E epochs of every
 * rank with the online sampler's code and writes them, with their feature
 * rows split into a hot tier and per-batch packed rows, as a pack (format:
 * stages/pack.h; use: docs/packed.md).
 *
 * Passes (DiskGNN's offline sampling and batched packing):
 *   1. sample: each rank's schedule laid out for E epochs (the default
 *      schedule: the targets and seeds the online sampler uses), each
 *      batch sampled by sampler_sample into one slot, its image appended
 *      to a spill file in the staging directory and its nodes counted;
 *   2. tier: the rows read by at least two batches, most-read first, as
 *      many as the feature buffer holds beside the extraction reserve
 *      (launcher/layout.c's sizing) make the hot tier; every other row a
 *      batch reads is packed into its chunk;
 *   3. lay out the chunks (the spill file read once more for the nodes)
 *      and check the whole against --disk-limit and the free space
 *      before writing anything large;
 *   4. pack: chunks are filled in groups as large as --mem-limit allows;
 *      for a group the spill file gives the images, and features.bin is
 *      read in large sequential (direct) partitions in node order, each
 *      partition's rows copied to every place in the group that needs
 *      them - no read per row; the group is then written with large
 *      sequential writes. The hot tier is gathered the same way.
 * Everything is written in a staging directory beside OUT, renamed to OUT
 * only once pack.toml is complete; any failure (a full disk included)
 * removes it, and a killed gnnprep's staging directory is removed by the
 * next gnnprep that writes beside it.
 *
 * Memory: the node counts (4 bytes a node), the hot bitmap, indptr (8
 * bytes a node, the sampler's), the index (64 bytes a batch), one slot,
 * and either indices.bin while sampling (read whole when it fits, else
 * mapped) or the partition buffer and the group while packing;
 * --mem-limit bounds their sum. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
            "usage: gnnprep pack DATASET CONFIG OUT --epochs E [--disk-limit SIZE] [--mem-limit SIZE]\n"
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
            "  --disk-limit SIZE  refuse (before writing) a pack larger than SIZE (K/M/G/T suffixes)\n"
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
    uint64_t mem_limit, disk_limit;
    struct dataset_dir out;
    char spill[4200];
    struct pack_entry *ent;
    uint64_t nent;
    uint32_t *count;  /* (nodes) batches reading each row, saturating */
    uint8_t *hot;     /* (nodes / 8 + 1) bitmap */
    uint64_t *hot_ids;
    uint64_t nhot;
    bool topo_memory;    /* sample with indices.bin in memory (it fits the limit) */
    unsigned char *slot; /* (slot_bytes) */
    size_t slot_bytes;
    struct pack_manifest man;
};

static inline bool is_hot(const struct packer *p, uint64_t v)
{
    return p->hot[v >> 3] >> (v & 7) & 1;
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

/* Pass 2: the hot tier, the rows read by >= 2 batches, most-read first
 * (ties: smaller id), at most cap rows; hot_ids ascending. */
static int choose_hot(struct packer *p, uint64_t cap, char *err, size_t errlen)
{
    uint64_t n = p->meta.nodes;
    p->hot = calloc(n / 8 + 1, 1);
    if (!p->hot)
        return sl_errf(err, errlen, -ENOMEM, "no memory for the hot set's bitmap");
    /* the threshold: counts histogram (counts above HMAX share a bucket; those are taken first) */
    enum { HMAX = 1 << 16 };
    uint64_t *hist = calloc(HMAX + 1, sizeof *hist);
    if (!hist)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    for (uint64_t v = 0; v < n; v++)
        if (p->count[v] >= 2)
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
        if (c < 2)
            continue;
        if (c >= t || (c == t - 1 && left > 0)) {
            if (c < t)
                left--;
            p->hot[v >> 3] |= (uint8_t)(1u << (v & 7));
            nh++;
        }
    }
    p->hot_ids = malloc(SL_MAX(nh, 1) * sizeof *p->hot_ids);
    if (!p->hot_ids)
        return sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " hot ids", nh);
    p->nhot = 0;
    for (uint64_t v = 0; v < n; v++)
        if (is_hot(p, v))
            p->hot_ids[p->nhot++] = v;
    for (uint64_t v = 0; v < n; v++)
        if (p->count[v] && !is_hot(p, v))
            p->man.distinct_packed++;
    return 0;
}

/* Pass 3: rows and offsets of every chunk (the spill file read again for
 * the nodes). Returns the end of chunks.bin in *end. */
static int lay_out(struct packer *p, uint64_t *end, char *err, size_t errlen)
{
    FILE *f = fopen(p->spill, "r");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", p->spill, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 4 << 20);
    int rc = 0;
    uint64_t off = PACK_ALIGN;
    for (uint64_t i = 0; i < p->nent && rc == 0; i++) {
        struct pack_entry *e = &p->ent[i];
        struct batch_view v;
        if (fread(p->slot, 1, (size_t)e->batch_bytes, f) != e->batch_bytes) {
            rc = sl_errf(err, errlen, -EIO, "%s: short read", p->spill);
            break;
        }
        if ((rc = batch_view(p->slot, (size_t)e->batch_bytes, BATCH_VIEW_HEADER_ONLY, &v, err, errlen)) != 0)
            break;
        uint32_t rows = 0;
        for (uint32_t j = 0; j < e->nodes; j++)
            rows += !is_hot(p, v.nodes[j]);
        e->rows = rows;
        e->off = off;
        e->span = pack_round(e->batch_bytes) + pack_round((uint64_t)rows * p->row_bytes);
        off += e->span;
        p->man.packed_rows += rows;
    }
    fclose(f);
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
            for (uint32_t q = 0; q < e->nodes; q++)
                if (!is_hot(p, v.nodes[q])) {
                    reqs[nr++] = (struct req){v.nodes[q], dst};
                    dst += p->row_bytes;
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

/* hot.bin: header page, ids, rows (gathered in pieces of the budget). */
static int write_hot(struct packer *p, struct feat_reader *fr, uint64_t budget, char *err, size_t errlen)
{
    char path[4200];
    dataset_dir_path(&p->out, PACK_HOT, path, sizeof path);
    struct file_writer w;
    int rc = file_writer_open(&w, path, err, errlen);
    if (rc)
        return rc;
    unsigned char page[PACK_ALIGN] = {0};
    struct pack_file_hdr h = {.magic = PACK_HOT_MAGIC, .version = PACK_VERSION, .entry = (uint32_t)p->row_bytes,
                              .count = p->nhot, .identity = p->man.identity};
    memcpy(page, &h, sizeof h);
    uint64_t idb = p->nhot * 8, rb = p->nhot * p->row_bytes;
    uint64_t per = SL_MAX(budget / (p->row_bytes + 16), 1);
    per = SL_MIN(per, SL_MAX(p->nhot, 1));
    unsigned char *buf = malloc((size_t)(per * p->row_bytes));
    struct req *reqs = malloc((size_t)per * sizeof *reqs);
    if (!buf || !reqs)
        rc = sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " hot rows", per);
    if (rc == 0)
        rc = file_writer_write(&w, page, sizeof page, err, errlen);
    if (rc == 0)
        rc = file_writer_write(&w, p->hot_ids, (size_t)idb, err, errlen);
    if (rc == 0)
        rc = file_writer_zero(&w, (size_t)(pack_round(idb) - idb), err, errlen);
    for (uint64_t i = 0; rc == 0 && i < p->nhot; i += per) {
        uint64_t n = SL_MIN(per, p->nhot - i);
        for (uint64_t k = 0; k < n; k++)
            reqs[k] = (struct req){p->hot_ids[i + k], k * p->row_bytes};
        if ((rc = gather(fr, reqs, (size_t)n, buf, err, errlen)) == 0)
            rc = file_writer_write(&w, buf, (size_t)(n * p->row_bytes), err, errlen);
    }
    if (rc == 0)
        rc = file_writer_zero(&w, (size_t)(pack_round(rb) - rb), err, errlen);
    if (rc == 0)
        rc = file_writer_close(&w, &p->man.hot_bytes, &p->man.hot_xxh3, err, errlen);
    file_writer_free(&w);
    free(buf);
    free(reqs);
    return rc;
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

static const char *mb(uint64_t b, char *buf, size_t len)
{
    return sl_fmt_bytes(b, buf, len);
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
    char a[32], b[32], c[32];
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
    p->topo_memory = p->meta.f[DATASET_INDICES].bytes + SAMPLER_IO_ALIGN <= p->mem_limit - fixed;
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
    /* 3. layout and the limits */
    uint64_t end = 0;
    if ((rc = lay_out(p, &end, err, errlen)) != 0)
        return rc;
    uint64_t hot_file = PACK_ALIGN + pack_round(p->nhot * 8) + pack_round(p->nhot * p->row_bytes);
    uint64_t total = end + hot_file + sizeof(struct pack_file_hdr) + p->nent * sizeof(struct pack_entry) + 4096;
    if (p->disk_limit && total > p->disk_limit)
        return sl_errf(err, errlen, -E2BIG,
                       "the pack would take %s (chunks %s: %" PRIu64 " rows stored %.2f times each on average; hot "
                       "tier %s), over --disk-limit %s; pack fewer epochs, raise pipeline.feature_buffer_mb (a "
                       "larger hot tier) or raise --disk-limit",
                       mb(total, a, sizeof a), mb(end, b, sizeof b), p->man.packed_rows,
                       p->man.distinct_packed ? (double)p->man.packed_rows / (double)p->man.distinct_packed : 0.0,
                       mb(hot_file, c, sizeof c), mb(p->disk_limit, c, sizeof c));
    struct statvfs vfs;
    if (statvfs(p->out.tmp, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < total)
        return sl_errf(err, errlen, -ENOSPC,
                       "the pack would take %s but only %s is free beside %s: free space, pack fewer epochs or "
                       "write it elsewhere; nothing was left behind",
                       mb(total, a, sizeof a), mb((uint64_t)vfs.f_bavail * vfs.f_frsize, b, sizeof b), out);
    free(p->count); /* no longer needed: its memory goes to the groups */
    p->count = NULL;
    group_budget += n * 4;
    /* 4. pack */
    struct feat_reader fr;
    if ((rc = feat_open(&fr, p->dataset, &p->meta, part, err, errlen)) != 0)
        return rc;
    uint64_t t1 = sl_now_ns();
    rc = write_chunks(p, &fr, group_budget, err, errlen);
    if (rc == 0)
        rc = write_hot(p, &fr, group_budget, err, errlen);
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
    printf("pack=%s\nbatches=%" PRIu64 "\nepochs=%" PRIu32 "\nranks=%" PRIu32 "\naccesses=%" PRIu64
           "\nhot_rows=%" PRIu64 "\npacked_rows=%" PRIu64 "\ndistinct_packed=%" PRIu64 "\nreplication=%.3f\n"
           "chunks_bytes=%" PRIu64 "\nhot_bytes=%" PRIu64 "\ndisk_bytes=%" PRIu64 "\nfeature_reads=%" PRIu64
           "\nfeature_read_bytes=%" PRIu64 "\nfeature_io=%s\nmem_limit=%" PRIu64 "\ntopology=%s\nsample_s=%.3f\n"
           "pack_s=%.3f\nseconds=%.3f\n",
           out, m->batches, m->epochs, m->ranks, m->accesses, m->hot_rows, m->packed_rows, m->distinct_packed,
           m->distinct_packed ? (double)m->packed_rows / (double)m->distinct_packed : 0.0, m->chunks_bytes,
           m->hot_bytes, m->chunks_bytes + m->hot_bytes + m->index_bytes, feat_reads, feat_bytes,
           direct ? "direct" : "buffered", p->mem_limit, p->topo_memory ? "memory" : "mmap", sample_s, pack_s,
           m->pack_seconds);
    return 0;
}

int prep_pack_main(int argc, char **argv)
{
    char err[2048];
    uint64_t epochs = 0, disk_limit = 0, mem_limit = 1ull << 30;
    bool help = false, seen[4] = {0};
    const struct opt opts[] = {
        {.name = "--epochs", .kind = OPT_UINT, .dst = &epochs, .lo = 1, .hi = 1000000},
        {.name = "--disk-limit", .kind = OPT_SIZE, .dst = &disk_limit, .lo = 1, .hi = INT64_MAX},
        {.name = "--mem-limit", .kind = OPT_SIZE, .dst = &mem_limit, .lo = 1, .hi = INT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int first = 1;
    while (first < argc && first < 4 && strncmp(argv[first], "--", 2) != 0)
        first++;
    if (opt_parse("gnnprep pack", opts, 4, argc, argv, first, seen, "; see --help", err, sizeof err)) {
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
    if (rc) {
        fprintf(stderr, "gnnprep pack: %s\n", err);
        return rc == -E2BIG ? PREP_EXIT_BAD_INPUT : rc == -ENOSPC ? PREP_EXIT_FAIL : prep_exit_code(rc);
    }
    return 0;
}

/* ---- gnnprep info on a pack ------------------------------------------------------------------ */

int prep_pack_info(const char *dir)
{
    char err[2048], a[32], b[32], c[32];
    struct pack p;
    int rc = pack_open(&p, dir, true, err, sizeof err);
    if (rc) {
        fprintf(stderr, "gnnprep info: %s\n", err);
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
    uint64_t disk = m->index_bytes + m->chunks_bytes + m->hot_bytes;
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
    printf("packed tier  %" PRIu64 " rows of %" PRIu64 " distinct nodes: replication %.2f; %" PRIu64 " .. %" PRIu64
           " rows a chunk\n",
           m->packed_rows, m->distinct_packed,
           m->distinct_packed ? (double)m->packed_rows / (double)m->distinct_packed : 0.0,
           rows_min == UINT64_MAX ? 0 : rows_min, rows_max);
    printf("chunks       %s (batch images %s, rows %s, padding the rest)\n", sl_fmt_bytes(m->chunks_bytes, a, sizeof a),
           sl_fmt_bytes(image, b, sizeof b), sl_fmt_bytes(m->packed_rows * m->row_bytes, c, sizeof c));
    printf("disk         %s in all (index %s); online reads of the same batches: %s of rows\n",
           sl_fmt_bytes(disk, a, sizeof a), sl_fmt_bytes(m->index_bytes, b, sizeof b),
           sl_fmt_bytes(online_rows * m->row_bytes, c, sizeof c));
    printf("replication=%.3f\ndisk_bytes=%" PRIu64 "\nhot_bytes=%" PRIu64 "\nchunks_bytes=%" PRIu64
           "\npack_seconds=%.3f\n",
           m->distinct_packed ? (double)m->packed_rows / (double)m->distinct_packed : 0.0, disk, m->hot_bytes,
           m->chunks_bytes, m->pack_seconds);
    pack_free(&p);
    return 0;
}
