/* test_pack.c - gnnprep pack and the pack reader (stages/pack.h): every
 * packed batch is, byte for byte, the batch the online sampler makes for
 * the same config, seed, rank and position (two ranks, every epoch,
 * every split), and its packed rows and the hot tier are the dataset's
 * rows; packing under a small --mem-limit (many groups, many partitions)
 * writes the same chunks as under a large one; a pack is refused for
 * another seed, other fanouts, another rank count or another dataset,
 * naming what differs; --disk-limit refuses before writing; a disk that
 * fills up while packing (a per-file size limit on gnnprep, and a tiny
 * tmpfs where one can be mounted) leaves nothing behind. */
#include "tests/t_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include "core/config.h"
#include "core/dataset.h"
#include "core/util.h"
#include "ipc/run.h"
#include "ops/ckpt.h"
#include "stages/pack.h"
#include "stages/pack_rows.h"
#include "stages/sampler.h"
#include "stages/schedule.h"

#define NODES 3000u
#define DIM 24u

static char root[4096], ds[4200], ds2[4200], cfg_path[4200], gnnprep[4200];

static void write_cfg(const char *path, const char *seed, const char *fanouts, const char *ranks);

/* The dataset, a second one (another seed), the config. */
static void setup_files(void)
{
    if (root[0])
        return;
    t_scratch(root, sizeof root, "test_pack");
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (!t_exists(gnnprep))
        fail_msg("%s is not built", gnnprep);
    char log[4096];
    snprintf(ds, sizeof ds, "%s/ds", root);
    snprintf(ds2, sizeof ds2, "%s/ds2", root);
    if (t_run(log, sizeof log, "'%s' synth '%s' --nodes %u --avg-degree 6 --feat-dim %u --classes 4 --seed 3",
              gnnprep, ds, NODES, DIM) != 0 ||
        t_run(log, sizeof log, "'%s' synth '%s' --nodes %u --avg-degree 6 --feat-dim %u --classes 4 --seed 4",
              gnnprep, ds2, NODES, DIM) != 0)
        fail_msg("gnnprep synth failed:\n%s", log);
    snprintf(cfg_path, sizeof cfg_path, "%s/run.toml", root);
    write_cfg(cfg_path, "5", "[4, 3]", "2");
}

/* A config (extra: more TOML lines for its sections, e.g. a seed). */
static void write_cfg(const char *path, const char *seed, const char *fanouts, const char *ranks)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    /* 1 MiB of 128-byte slots less 2 extractors' reserve: a hot tier of a few hundred rows */
    fprintf(f,
            "[dataset]\npath = \"%s\"\n[model]\nfanouts = %s\nhidden = 16\n[train]\nepochs = 2\nbatch_size = 100\n"
            "seed = %s\neval_every = 1\n[pipeline]\nranks = %s\nfeature_buffer_mb = 2\nextractors = 1\n",
            ds, fanouts, seed, ranks);
    fclose(f);
}

static void load_cfg(struct config *c, const char *path)
{
    char err[1024];
    if (config_load(c, path, NULL, 0, err, sizeof err))
        fail_msg("%s: %s", path, err);
}

static int pack(char *log, size_t len, const char *dataset, const char *cfg, const char *out, const char *extra)
{
    return t_run(log, len, "'%s' pack '%s' '%s' '%s' --epochs 2 %s", gnnprep, dataset, cfg, out, extra);
}

/* Nothing named OUT or .OUT.partial-* is left in root. */
static void assert_nothing_left(const char *dir, const char *name)
{
    char log[4096];
    int rc = t_run(log, sizeof log, "ls -a '%s' | grep -e '^%s$' -e '^\\.%s\\.partial'", dir, name, name);
    if (rc == 0)
        fail_msg("left behind in %s:\n%s", dir, log);
}

static void read_row(int fd, const struct dataset_meta *m, uint64_t v, void *out)
{
    const struct dataset_file *f = &m->f[DATASET_FEATURES];
    size_t got = 0;
    assert_int_equal(sl_pread_full(fd, out, (size_t)(f->cols * dtype_size(f->dtype)), (off_t)(v * f->row_stride), &got),
                     0);
    assert_int_equal(got, f->cols * dtype_size(f->dtype));
}

/* Distinct 4 KiB blocks of cache.bin's rows section and extents (the
 * packer's rule: rows whose blocks lie within the pack's gap join) that
 * rows at places q[0..n) touch; q is sorted here. */
static uint64_t g_gap = PACK_CACHE_GAP; /* cache_blocks' joining gap: the pack's (check_identity sets it) */

static void cache_blocks(uint64_t *q, uint32_t n, uint64_t rb, uint64_t base, uint64_t *blocks, uint64_t *extents)
{
    for (uint32_t i = 1; i < n; i++) /* insertion sort: batches are small here */
        for (uint32_t j = i; j > 0 && q[j - 1] > q[j]; j--) {
            uint64_t t = q[j];
            q[j] = q[j - 1];
            q[j - 1] = t;
        }
    uint64_t next = 0, end = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t b0 = q[i] * rb / 4096, b1 = (q[i] * rb + rb - 1) / 4096;
        b0 = i ? (b0 > next ? b0 : next) : b0;
        if (b1 >= b0)
            *blocks += b1 - b0 + 1;
        next = i && next > b1 + 1 ? next : b1 + 1;
        uint64_t s = (base + q[i] * rb) / 4096 * 4096, e = (base + q[i] * rb + rb + 4095) / 4096 * 4096;
        if (i == 0 || s > end + g_gap)
            ++*extents;
        end = i && end > e ? end : e;
    }
}

/* Every batch of both ranks against the online sampler, every packed row,
 * every cache row and every hot row against features.bin; with a cache
 * tier (want_cache), the layout: a batch's newly placed rows are one run
 * of places, and a batch's cache rows touch fewer 4 KiB blocks in all,
 * than with the rows in node order (their extents are the packer's rule
 * applied to their places: how many depends on the gap rule, not a
 * claim of first touch). */
static void check_identity(const char *out, const struct config *c, const struct dataset_meta *m, bool want_cache)
{
    char err[1024];
    struct pack p;
    if (pack_open(&p, out, false, err, sizeof err))
        fail_msg("%s", err);
    if (pack_check(&p, c, 0, m, err, sizeof err))
        fail_msg("%s", err);
    g_gap = p.m.cache_gap;
    struct run_arena_plan ap;
    if (run_arena_plan(c, m, &ap, err, sizeof err))
        fail_msg("%s", err);
    struct sampler_topo topo;
    if (sampler_topo_open(&topo, ds, m, err, sizeof err))
        fail_msg("%s", err);
    struct sampler s;
    struct batch_shape shape = ap.shape;
    assert_int_equal(sampler_init(&s, &topo, &shape, err, sizeof err), 0);
    size_t size = (size_t)sl_round_up(ap.batch.max_bytes, 4096);
    unsigned char *online = aligned_alloc(4096, size), *placed = aligned_alloc(4096, size);
    uint64_t *hot = NULL;
    void *hot_rows = NULL;
    if (pack_read_hot(&p, &hot, &hot_rows, err, sizeof err))
        fail_msg("%s", err);
    assert_true(p.m.hot_rows > 0 && p.m.hot_rows < NODES); /* both tiers in use */
    assert_true(p.m.packed_rows > 0);
    uint64_t *cids = NULL;
    if (pack_read_cache_ids(&p, &cids, err, sizeof err))
        fail_msg("%s", err);
    assert_true(want_cache ? p.m.cache_rows > 0 : p.m.cache_rows == 0);
    static uint32_t place[NODES], idrank[NODES];
    for (uint32_t v = 0; v < NODES; v++)
        place[v] = idrank[v] = UINT32_MAX;
    for (uint64_t i = 0; i < p.m.cache_rows; i++) {
        assert_int_equal(place[cids[i]], UINT32_MAX); /* once */
        place[cids[i]] = (uint32_t)i;
    }
    for (uint32_t v = 0, k = 0; v < NODES; v++)
        if (place[v] != UINT32_MAX)
            idrank[v] = k++;
    for (uint64_t i = 0; i < p.m.hot_rows; i++)
        assert_int_equal(place[hot[i]], UINT32_MAX); /* the tiers are disjoint */
    uint64_t nplaced = 0, blk[2] = {0, 0}, ext[2] = {0, 0}, ext_index = 0, cached = 0, cache_read = 0;
    uint64_t base = pack_cache_row_off(&p.m, 0);
    unsigned char *cbuf = aligned_alloc(4096, SL_MAX(p.m.cache_bytes, 4096));
    uint64_t *qa = malloc(8 * 4096), *qb = malloc(8 * 4096);
    assert_true(cbuf && qa && qb);
    char path[4300];
    snprintf(path, sizeof path, "%s/features.bin", ds);
    int ffd = open(path, O_RDONLY);
    assert_true(ffd >= 0);
    size_t rb = DIM * 4;
    unsigned char row[DIM * 4];
    for (uint64_t i = 0; i < p.m.hot_rows; i++) {
        read_row(ffd, m, hot[i], row);
        assert_memory_equal(row, (unsigned char *)hot_rows + i * rb, rb);
    }
    uint64_t checked = 0, rows = 0;
    for (uint32_t r = 0; r < 2; r++) {
        struct schedule sched;
        struct schedule_params sp = {.rank = r, .ranks = 2, .batch_size = 100, .epochs = 2, .eval_every = 1,
                                     .seed = (uint64_t)c->train.seed};
        schedule_split_sizes(m, sp.split_n);
        assert_int_equal(schedule_open(&sched, NULL, &sp, err, sizeof err), 0);
        assert_int_equal(schedule_load(&sched, ds, m, err, sizeof err), 0);
        struct schedule_cursor cur;
        schedule_cursor_init(&cur, &sched, 0);
        for (uint64_t g = 0; g < schedule_len(&sched); g++) {
            struct schedule_batch sb;
            assert_int_equal(schedule_batch(&cur, g, &sb, err, sizeof err), 0);
            struct batch_id id = {.batch = g + 1000, .epoch = sb.pos.epoch, .rank = 7, .split = sb.pos.split};
            memset(online, 0, size); /* its padding, as gnnprep pack zeroes it */
            assert_int_equal(sampler_sample(&s, online, size, sb.targets, sb.pos.targets, &id, sb.seed, NULL, err,
                                            sizeof err),
                             0);
            const struct pack_entry *e = pack_find(&p, r, sb.pos.epoch, sb.pos.split, sb.pos.k);
            if (!e)
                fail_msg("rank %u batch %" PRIu64 " is not in the pack", r, g);
            unsigned char *chunk = aligned_alloc(4096, (size_t)e->span);
            assert_non_null(chunk);
            if (pack_read_chunk(&p, e, chunk, err, sizeof err) ||
                pack_place_batch(e, chunk, placed, size, g + 1000, 7, err, sizeof err))
                fail_msg("%s", err);
            const struct batch_hdr *h = (const struct batch_hdr *)online;
            if (h->bytes != e->batch_bytes || memcmp(online, placed, (size_t)h->bytes) != 0)
                {
                size_t d = 0;
                while (d < e->batch_bytes && online[d] == placed[d])
                    d++;
                fail_msg("%s: rank %u batch %" PRIu64 " (epoch %u split %u): the packed batch differs from the online "
                         "one (%" PRIu64 " bytes, packed %" PRIu64 ", first difference at byte %zu)",
                         out, r, g, sb.pos.epoch, sb.pos.split, h->bytes, e->batch_bytes, d);
            }
            struct batch_view v;
            assert_int_equal(batch_view(placed, size, 0, &v, err, sizeof err), 0);
            const unsigned char *pr = chunk + (pack_rows_off(e) - e->off);
            /* the cache rows: the tail's extents read back to back, each row at its offset */
            const struct pack_extent *x = pack_tail_extents(e, rb, pr);
            const uint32_t *xo = pack_tail_offsets(e, rb, pr);
            uint64_t at = 0;
            for (uint32_t i = 0; i < e->cache_ext; i++) {
                if (pack_read_cache(&p, x[i].off, x[i].len, cbuf + at, err, sizeof err))
                    fail_msg("%s", err);
                at += x[i].len;
            }
            assert_int_equal(at, e->cache_bytes);
            uint32_t j = 0, k = 0, fresh = 0;
            for (uint32_t q = 0; q < batch_nodes(&v); q++) {
                uint64_t node = v.nodes[q];
                if (place[node] != UINT32_MAX) {
                    assert_true(k < 4096);
                    read_row(ffd, m, node, row);
                    if (memcmp(row, cbuf + xo[k], rb) != 0)
                        fail_msg("rank %u batch %" PRIu64 ": cache row of node %" PRIu64 " differs from features.bin", r,
                                 g, node);
                    qa[k] = place[node];
                    qb[k] = idrank[node];
                    if (place[node] >= nplaced) {
                        if (place[node] >= nplaced + e->cached)
                            fail_msg("rank %u batch %" PRIu64 ": node %" PRIu64 " first read here is at place %u, "
                                     "past this batch's run from %" PRIu64, r, g, node, place[node], nplaced);
                        fresh++;
                    }
                    k++;
                    continue;
                }
                bool is_hot = false;
                for (uint64_t lo = 0, hi = p.m.hot_rows; lo < hi;) {
                    uint64_t mid = (lo + hi) / 2;
                    if (hot[mid] == node) {
                        is_hot = true;
                        break;
                    }
                    if (hot[mid] < node)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (is_hot)
                    continue;
                read_row(ffd, m, node, row);
                if (memcmp(row, pr + (size_t)j * rb, rb) != 0)
                    fail_msg("rank %u batch %" PRIu64 ": packed row %u (node %" PRIu64 ") differs from features.bin",
                             r, g, j, node);
                j++;
            }
            assert_int_equal(j, e->rows);
            assert_int_equal(k, e->cached);
            /* first-touch order: the rows placed by this batch are the places right after the earlier ones */
            uint64_t fresh_max = 0;
            for (uint32_t i = 0; i < k; i++)
                if (qa[i] >= nplaced)
                    fresh_max = SL_MAX(fresh_max, qa[i] + 1);
            assert_true(fresh == 0 || fresh_max == nplaced + fresh);
            nplaced += fresh;
            cache_blocks(qa, k, rb, base, &blk[0], &ext[0]);
            cache_blocks(qb, k, rb, base, &blk[1], &ext[1]);
            ext_index += e->cache_ext;
            cached += e->cached;
            cache_read += e->cache_bytes;
            rows += j;
            free(chunk);
            checked++;
        }
        schedule_cursor_free(&cur);
        schedule_free(&sched);
    }
    assert_int_equal(checked, p.m.batches);
    assert_int_equal(rows, p.m.packed_rows);
    assert_int_equal(nplaced, p.m.cache_rows);
    assert_int_equal(cached, p.m.cache_accesses);
    assert_int_equal(ext_index, p.m.cache_extents);
    assert_int_equal(cache_read, p.m.cache_read);
    assert_int_equal(ext[0], ext_index); /* the test's rule is the packer's */
    if (want_cache) {
        fprintf(stderr, "test_pack: cache rows touch %" PRIu64 " blocks of 4 KiB in %" PRIu64 " extents in first-touch "
                "order, %" PRIu64 " blocks in %" PRIu64 " extents in node order\n", blk[0], ext[0], blk[1], ext[1]);
        assert_true(blk[0] < blk[1]);
    }
    free(cids);
    free(cbuf);
    free(qa);
    free(qb);
    close(ffd);
    free(hot);
    free(hot_rows);
    free(online);
    free(placed);
    sampler_free(&s);
    sampler_topo_free(&topo);
    pack_free(&p);
}

/* Every batch of the pack in dir read as a packed run reads it
 * (pack_rows_read): overlapped and serial, on io_uring and by pread
 * (SLUICE_NO_IO_URING), against the plain reads of the same chunk and
 * extents (pack_read_rows, pack_read_cache), byte for byte. */
static void compare_reads(const char *dir)
{
    char err[1024];
    struct pack_rows pr;
    if (pack_rows_open_reads(&pr, dir, false, err, sizeof err))
        fail_msg("%s", err);
    const struct pack_manifest *m = &pr.pack.m;
    uint64_t rb = m->row_bytes;
    unsigned char *rows = aligned_alloc(PACK_ALIGN, SL_MAX(pr.rows_max, PACK_ALIGN));
    unsigned char *cb = aligned_alloc(PACK_ALIGN, SL_MAX(pr.cache_max, PACK_ALIGN));
    assert_non_null(rows);
    assert_non_null(cb);
    for (int mode = 0; mode < 4; mode++) {
        if (mode & 2)
            setenv("SLUICE_NO_IO_URING", "1", 1);
        else
            unsetenv("SLUICE_NO_IO_URING");
        struct pack_rows_buf b = {.overlap = mode & 1};
        for (uint64_t i = 0; i < m->batches; i++) {
            const struct pack_entry *e = &pr.pack.ent[i];
            if (pack_rows_read(&pr, &b, e, err, sizeof err) || pack_read_rows(&pr.pack, e, rows, err, sizeof err))
                fail_msg("%s", err);
            if (memcmp(b.buf, rows, (size_t)pack_rows_tail_bytes(e, rb)) != 0)
                fail_msg("%s: batch %" PRIu64 " (mode %d): the chunk's rows or tail differ", dir, i, mode);
            const struct pack_extent *x = pack_tail_extents(e, rb, rows);
            uint64_t at = 0;
            for (uint32_t k = 0; k < e->cache_ext; k++) {
                if (pack_read_cache(&pr.pack, x[k].off, x[k].len, cb + at, err, sizeof err))
                    fail_msg("%s", err);
                at += x[k].len;
            }
            if (e->cached && memcmp(b.cbuf, cb, (size_t)e->cache_bytes) != 0)
                fail_msg("%s: batch %" PRIu64 " (mode %d): the cache extents differ", dir, i, mode);
        }
        assert_int_equal(b.cache_reads, m->cache_extents);
        assert_int_equal(b.cache_bytes, m->cache_read);
        pack_rows_buf_free(&b);
    }
    unsetenv("SLUICE_NO_IO_URING");
    assert_true(pack_rows_busy(&pr) > 0);
    free(rows);
    free(cb);
    pack_rows_free(&pr);
}

/* A packed run's reads of chunks and cache extents (compare_reads), and
 * --cache-gap: another gap makes other extents of the same cache rows (0:
 * only adjacent blocks join: more, shorter extents than the default's)
 * that still read back equal to features.bin (check_identity, its extent
 * rule taking the pack's gap). */
static void test_cache_reads(void **state)
{
    (void)state;
    setup_files();
    char out[4300], wide[4300], log[8192], err[1024];
    snprintf(out, sizeof out, "%s/pack-r", root);
    snprintf(wide, sizeof wide, "%s/pack-r-gap0", root);
    if (pack(log, sizeof log, ds, cfg_path, out, "--cache-limit 64K") != 0)
        fail_msg("gnnprep pack --cache-limit 64K failed:\n%s", log);
    if (pack(log, sizeof log, ds, cfg_path, wide, "--cache-limit 64K --cache-gap 0") != 0)
        fail_msg("gnnprep pack --cache-gap 0 failed:\n%s", log);
    if (!strstr(log, "cache_gap=0"))
        fail_msg("no word of the gap:\n%s", log);
    struct pack_manifest a, b;
    assert_int_equal(pack_manifest_read(out, &a, err, sizeof err), 0);
    assert_int_equal(pack_manifest_read(wide, &b, err, sizeof err), 0);
    assert_int_equal(a.cache_gap, PACK_CACHE_GAP);
    assert_int_equal(b.cache_gap, 0);
    assert_true(a.cache_xxh3 == b.cache_xxh3 && a.hot_xxh3 == b.hot_xxh3); /* the same tiers, other extents */
    assert_true(b.cache_extents > a.cache_extents && b.cache_read < a.cache_read);
    struct config c;
    load_cfg(&c, cfg_path);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    check_identity(wide, &c, &m, true);
    compare_reads(out);
    compare_reads(wide);
    /* a gap beyond the most --cache-gap takes is refused */
    assert_int_equal(pack(log, sizeof log, ds, cfg_path, wide, "--cache-gap 1G"), 2);
    assert_non_null(strstr(log, "--cache-gap"));
    t_rmrf(out);
    t_rmrf(wide);
}

static void test_identity(void **state)
{
    (void)state;
    setup_files();
    char out[4300], log[8192];
    snprintf(out, sizeof out, "%s/pack-a", root);
    if (pack(log, sizeof log, ds, cfg_path, out, "") != 0)
        fail_msg("gnnprep pack failed:\n%s", log);
    assert_non_null(strstr(log, "batches="));
    struct config c;
    load_cfg(&c, cfg_path);
    struct dataset_meta m;
    char err[1024];
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    check_identity(out, &c, &m, false);
    /* a small memory limit: many groups and partitions, the same bytes */
    char small[4300];
    snprintf(small, sizeof small, "%s/pack-small", root);
    if (pack(log, sizeof log, ds, cfg_path, small, "--mem-limit 2M") != 0)
        fail_msg("gnnprep pack --mem-limit 2M failed:\n%s", log);
    struct pack_manifest a, b;
    assert_int_equal(pack_manifest_read(out, &a, err, sizeof err), 0);
    assert_int_equal(pack_manifest_read(small, &b, err, sizeof err), 0);
    assert_int_equal(a.chunks_bytes, b.chunks_bytes);
    assert_true(a.chunks_xxh3 == b.chunks_xxh3 && a.hot_xxh3 == b.hot_xxh3 && a.index_xxh3 == b.index_xxh3);
    /* too little memory for even the counts: refused, nothing left */
    assert_int_equal(pack(log, sizeof log, ds, cfg_path, small, "--mem-limit 64K"), 2); /* exists */
    char tiny[4300];
    snprintf(tiny, sizeof tiny, "%s/pack-tiny", root);
    assert_int_equal(pack(log, sizeof log, ds, cfg_path, tiny, "--mem-limit 64K"), 2);
    assert_non_null(strstr(log, "--mem-limit"));
    assert_nothing_left(root, "pack-tiny");
    /* gnnprep info on it */
    assert_int_equal(t_run(log, sizeof log, "'%s' info '%s'", gnnprep, out), 0);
    assert_non_null(strstr(log, "replication"));
    t_rmrf(small);
}

static void test_refused(void **state)
{
    (void)state;
    setup_files();
    char out[4300], log[8192], err[2048], path[4300];
    snprintf(out, sizeof out, "%s/pack-a", root);
    if (!t_exists(out))
        assert_int_equal(pack(log, sizeof log, ds, cfg_path, out, ""), 0);
    struct pack p;
    assert_int_equal(pack_open(&p, out, true, err, sizeof err), 0);
    struct dataset_meta m, m2;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    assert_int_equal(dataset_meta_read(ds2, &m2, true, err, sizeof err), 0);
    struct {
        const char *seed, *fan, *ranks, *key;
    } cases[] = {
        {"6", "[4, 3]", "2", "train.seed"},
        {"5", "[4, 2]", "2", "model.fanouts"},
        {"5", "[4, 3]", "1", "pipeline.ranks"},
    };
    struct config c;
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        snprintf(path, sizeof path, "%s/other%zu.toml", root, i);
        write_cfg(path, cases[i].seed, cases[i].fan, cases[i].ranks);
        load_cfg(&c, path);
        assert_int_equal(pack_check(&p, &c, 0, &m, err, sizeof err), -EINVAL);
        if (!strstr(err, cases[i].key) || !strstr(err, "gnnprep pack"))
            fail_msg("case %zu: the refusal does not name %s: %s", i, cases[i].key, err);
    }
    load_cfg(&c, cfg_path);
    assert_int_equal(pack_check(&p, &c, 0, &m, err, sizeof err), 0);
    assert_int_equal(pack_check(&p, &c, 0, &m2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "another dataset"));
    pack_free(&p);
    /* a truncated index is refused at open */
    char broken[4300];
    snprintf(broken, sizeof broken, "%s/pack-broken", root);
    assert_int_equal(t_run(log, sizeof log, "cp -r '%s' '%s' && truncate -s -64 '%s/index.bin'", out, broken, broken),
                     0);
    assert_int_equal(pack_open(&p, broken, true, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "index.bin"));
    /* a directory without a manifest is no pack */
    assert_int_equal(t_run(log, sizeof log, "rm '%s/pack.toml'", broken), 0);
    assert_int_equal(pack_open(&p, broken, true, err, sizeof err), -ENOENT);
    t_rmrf(broken);
}

/* A pack with a cache tier: identity (every row of every tier), the
 * layout, the same bytes under a small --mem-limit, gnnprep info, and a
 * cache tier that --disk-limit chooses when the replicated pack would
 * not fit. */
static void test_cache(void **state)
{
    (void)state;
    setup_files();
    char out[4300], small[4300], log[8192], err[1024];
    snprintf(out, sizeof out, "%s/pack-c", root);
    snprintf(small, sizeof small, "%s/pack-c-small", root);
    if (pack(log, sizeof log, ds, cfg_path, out, "--cache-limit 64K") != 0)
        fail_msg("gnnprep pack --cache-limit 64K failed:\n%s", log);
    if (!strstr(log, "cache_chosen_by=cache-limit") || !strstr(log, "cache_blocks_4k_per_batch_random="))
        fail_msg("no word of the cache tier:\n%s", log);
    struct config c;
    load_cfg(&c, cfg_path);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    check_identity(out, &c, &m, true);
    struct pack_manifest a, b;
    assert_int_equal(pack_manifest_read(out, &a, err, sizeof err), 0);
    assert_true(a.cache_rows * a.row_bytes <= 64 * 1024 && a.cache_rows * a.row_bytes > 60 * 1024);
    if (pack(log, sizeof log, ds, cfg_path, small, "--cache-limit 64K --mem-limit 2M") != 0)
        fail_msg("gnnprep pack --mem-limit 2M failed:\n%s", log);
    assert_int_equal(pack_manifest_read(small, &b, err, sizeof err), 0);
    assert_true(a.chunks_xxh3 == b.chunks_xxh3 && a.hot_xxh3 == b.hot_xxh3 && a.index_xxh3 == b.index_xxh3 &&
                a.cache_xxh3 == b.cache_xxh3);
    t_rmrf(small);
    assert_int_equal(t_run(log, sizeof log, "'%s' info '%s' --verify", gnnprep, out), 0);
    if (!strstr(log, "cache tier   ") || !strstr(log, "replication_without_cache=") || !strstr(log, "verified"))
        fail_msg("gnnprep info:\n%s", log);
    /* --disk-limit below the replicated pack's size: a cache tier makes it fit */
    char plain[4300], lim[64];
    snprintf(plain, sizeof plain, "%s/pack-a", root);
    if (!t_exists(plain))
        assert_int_equal(pack(log, sizeof log, ds, cfg_path, plain, ""), 0);
    struct pack_manifest f;
    assert_int_equal(pack_manifest_read(plain, &f, err, sizeof err), 0);
    uint64_t full = f.index_bytes + f.chunks_bytes + f.hot_bytes + f.cache_bytes + 4096;
    snprintf(lim, sizeof lim, "--disk-limit %" PRIu64, full * 9 / 10);
    char fit[4300];
    snprintf(fit, sizeof fit, "%s/pack-fit", root);
    if (pack(log, sizeof log, ds, cfg_path, fit, lim) != 0)
        fail_msg("gnnprep pack %s failed:\n%s", lim, log);
    assert_non_null(strstr(log, "cache_chosen_by=disk-limit"));
    assert_int_equal(pack_manifest_read(fit, &b, err, sizeof err), 0);
    assert_true(b.cache_rows > 0 && b.index_bytes + b.chunks_bytes + b.hot_bytes + b.cache_bytes <= full * 9 / 10);
    check_identity(fit, &c, &m, true);
    t_rmrf(fit);
    /* --cache-limit 0 says no cache: the same limit refuses */
    char no[256];
    snprintf(no, sizeof no, "%s --cache-limit 0", lim);
    assert_int_equal(pack(log, sizeof log, ds, cfg_path, fit, no), 2);
    assert_non_null(strstr(log, "--cache-limit"));
    assert_nothing_left(root, "pack-fit");
}

/* A pack whose cache file is missing, truncated or changed is refused:
 * at open (missing, wrong size), by gnnprep info --verify and by
 * gnnlaunch before start (changed in place). */
static void test_cache_refused(void **state)
{
    (void)state;
    setup_files();
    char out[4300], broken[4300], log[8192], err[2048], gnnlaunch[4200];
    t_bin(gnnlaunch, sizeof gnnlaunch, "gnnlaunch");
    snprintf(out, sizeof out, "%s/pack-c", root);
    if (!t_exists(out))
        assert_int_equal(pack(log, sizeof log, ds, cfg_path, out, "--cache-limit 64K"), 0);
    snprintf(broken, sizeof broken, "%s/pack-c-broken", root);
    struct pack p;
    /* one byte of a row changed: same size, another checksum */
    assert_int_equal(t_run(log, sizeof log,
                           "rm -rf '%s' && cp -r '%s' '%s' && printf 'Z' | dd of='%s/cache.bin' bs=1 seek=%u "
                           "conv=notrunc status=none",
                           broken, out, broken, broken, 3 * PACK_ALIGN + 5),
                     0);
    assert_int_equal(pack_open(&p, broken, true, err, sizeof err), 0); /* sizes hold */
    assert_int_equal(pack_verify(&p, PACK_FILE_CACHE, err, sizeof err), -EINVAL);
    if (!strstr(err, "cache.bin") || !strstr(err, "make the pack again"))
        fail_msg("the changed cache file: %s", err);
    assert_int_equal(pack_verify(&p, PACK_FILE_INDEX | PACK_FILE_CHUNKS | PACK_FILE_HOT, err, sizeof err), 0);
    pack_free(&p);
    assert_true(t_run(log, sizeof log, "'%s' info '%s' --verify", gnnprep, broken) != 0);
    assert_non_null(strstr(log, "cache.bin"));
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed --set pipeline.pack='%s'",
                           gnnlaunch, cfg_path, broken),
                     2);
    if (!strstr(log, "cache.bin changed"))
        fail_msg("gnnlaunch on a changed cache file:\n%s", log);
    /* truncated, then missing */
    assert_int_equal(t_run(log, sizeof log, "truncate -s -4096 '%s/cache.bin'", broken), 0);
    assert_int_equal(pack_open(&p, broken, true, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "cache.bin"));
    assert_int_equal(t_run(log, sizeof log, "rm '%s/cache.bin'", broken), 0);
    assert_int_equal(pack_open(&p, broken, true, err, sizeof err), -ENOENT);
    if (!strstr(err, "cache.bin") || !strstr(err, "make the pack again"))
        fail_msg("the missing cache file: %s", err);
    t_rmrf(broken);
}

static void test_disk_limit(void **state)
{
    (void)state;
    setup_files();
    char out[4300], log[8192];
    snprintf(out, sizeof out, "%s/pack-limited", root);
    assert_int_equal(pack(log, sizeof log, ds, cfg_path, out, "--disk-limit 100K"), 2);
    if (!strstr(log, "--disk-limit"))
        fail_msg("no word of the limit:\n%s", log);
    assert_nothing_left(root, "pack-limited");
}

/* gnnprep pack with a per-file size limit of `limit` bytes (writes past
 * it fail with EFBIG, SIGXFSZ ignored); its exit status. */
static int pack_rlimit_with(const char *out, uint64_t limit, const char *dataset, const char *cfg, const char *opt,
                            const char *val)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {.rlim_cur = limit, .rlim_max = limit};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(99);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(gnnprep, gnnprep, "pack", dataset, cfg, out, "--epochs", "2", opt, val, (char *)NULL);
        _exit(98);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int pack_rlimit(const char *out, uint64_t limit)
{
    return pack_rlimit_with(out, limit, ds, cfg_path, NULL, NULL);
}

static void test_disk_full(void **state)
{
    (void)state;
    setup_files();
    char out[4300], log[8192], err[1024];
    snprintf(out, sizeof out, "%s/pack-a", root);
    if (!t_exists(out))
        assert_int_equal(pack(log, sizeof log, ds, cfg_path, out, ""), 0);
    struct pack p;
    assert_int_equal(pack_open(&p, out, true, err, sizeof err), 0);
    uint64_t spill = 0;
    for (uint64_t i = 0; i < p.m.batches; i++)
        spill += p.ent[i].batch_bytes;
    uint64_t chunks = p.m.chunks_bytes;
    pack_free(&p);
    assert_true(chunks > spill + 8192);
    /* the spill file fits, chunks.bin does not: the failure comes in the middle of packing */
    char full[4300];
    snprintf(full, sizeof full, "%s/pack-full", root);
    int rc = pack_rlimit(full, spill + (chunks - spill) / 2);
    assert_int_equal(rc, 1);
    assert_nothing_left(root, "pack-full");
    /* the same in cache.bin: rows of 2 KiB and no hot tier make the cache the largest file, written after the
       chunks and the hot tier */
    char ds3[4300], cfg3[4300], big[4300];
    snprintf(ds3, sizeof ds3, "%s/ds-wide", root);
    snprintf(cfg3, sizeof cfg3, "%s/wide.toml", root);
    snprintf(big, sizeof big, "%s/pack-wide", root);
    if (t_run(log, sizeof log, "'%s' synth '%s' --nodes %u --avg-degree 6 --feat-dim 512 --classes 4 --seed 3",
              gnnprep, ds3, NODES) != 0)
        fail_msg("gnnprep synth failed:\n%s", log);
    FILE *f = fopen(cfg3, "w");
    assert_non_null(f);
    fprintf(f, "[dataset]\npath = \"%s\"\n[model]\nfanouts = [4, 3]\nhidden = 16\n[train]\nepochs = 2\nbatch_size = 100\n"
            "seed = 5\neval_every = 1\n[pipeline]\nranks = 2\nfeature_buffer_mb = 1\nextractors = 1\n", ds3);
    fclose(f);
    if (t_run(log, sizeof log, "'%s' pack '%s' '%s' '%s' --epochs 2 --cache-limit 1G", gnnprep, ds3, cfg3, big) != 0)
        fail_msg("gnnprep pack --cache-limit 1G failed:\n%s", log);
    struct pack_manifest wm;
    assert_int_equal(pack_manifest_read(big, &wm, err, sizeof err), 0);
    assert_true(wm.cache_bytes > 2 * PACK_ALIGN + wm.chunks_bytes && wm.cache_bytes > wm.hot_bytes + PACK_ALIGN);
    t_rmrf(big);
    snprintf(full, sizeof full, "%s/pack-wide-full", root);
    rc = pack_rlimit_with(full, (wm.chunks_bytes + wm.cache_bytes) / 2, ds3, cfg3, "--cache-limit", "1G");
    assert_int_equal(rc, 1);
    assert_nothing_left(root, "pack-wide-full");
    t_rmrf(ds3);
    /* a tmpfs too small for the pack, where this process may mount one */
    char mnt[4300], why[512] = "";
    snprintf(mnt, sizeof mnt, "%s/tiny", root);
    bool mounted = false;
    if (unshare(CLONE_NEWNS) != 0)
        snprintf(why, sizeof why, "unshare: %s", strerror(errno));
    else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        snprintf(why, sizeof why, "making / private: %s", strerror(errno));
    else if (mkdir(mnt, 0755) != 0 || mount("sluice-test", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=256k") != 0)
        snprintf(why, sizeof why, "mount tmpfs: %s", strerror(errno));
    else
        mounted = true;
    if (!mounted) {
        fprintf(stderr, "test_pack: no tmpfs for the second disk-full case (%s); the size limit case ran\n", why);
        return;
    }
    snprintf(full, sizeof full, "%s/pack", mnt);
    rc = pack(log, sizeof log, ds, cfg_path, full, "");
    if (rc == 0)
        fail_msg("a pack larger than a 256 KiB tmpfs succeeded:\n%s", log);
    if (!strstr(log, "nothing was left behind"))
        fail_msg("no word of the full disk:\n%s", log);
    assert_nothing_left(mnt, "pack");
    umount(mnt);
}

/* Reads a whole file. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* Two checkpoints of runs that differ only in pipeline.mode, pipeline.pack
 * and train.checkpoint_dir: the tensor bytes after the header are the
 * same, byte for byte, and so is every metadata field but the config's
 * text and those three keys. */
static void assert_same_ckpt(const char *a, const char *b)
{
    size_t la, lb;
    unsigned char *x = slurp(a, &la), *y = slurp(b, &lb);
    uint64_t ha, hb;
    memcpy(&ha, x, 8);
    memcpy(&hb, y, 8);
    assert_true(8 + ha <= la && 8 + hb <= lb);
    if (la - 8 - ha != lb - 8 - hb || memcmp(x + 8 + ha, y + 8 + hb, la - 8 - ha) != 0)
        fail_msg("the tensors of %s and %s differ", a, b);
    free(x);
    free(y);
    struct ckpt ca, cb;
    char err[512];
    assert_int_equal(ckpt_read(&ca, a, err, sizeof err), 0);
    assert_int_equal(ckpt_read(&cb, b, err, sizeof err), 0);
    static const char *const keys[] = {"epoch", "step", "seed", "rng", "model", "dataset", "run", "model.fanouts",
                                       "train.seed", "train.batch_size"};
    for (size_t i = 0; i < SL_ARRAY_LEN(keys); i++) {
        const char *p = ckpt_meta(&ca, keys[i]), *q = ckpt_meta(&cb, keys[i]);
        if (!p || !q || strcmp(p, q))
            fail_msg("checkpoint field %s: %s vs %s", keys[i], p ? p : "(none)", q ? q : "(none)");
    }
    assert_string_equal(ckpt_meta(&cb, "pipeline.mode"), "packed");
    ckpt_free(&ca);
    ckpt_free(&cb);
}

/* The last line of a run's output. */
static const char *last_line(const char *log)
{
    const char *l = log, *p;
    while ((p = strstr(l, "test_acc=")) != NULL) {
        l = p;
        if (!strchr(p, '\n'))
            break;
        l = p + 1;
        if (!strstr(l, "test_acc="))
            return p;
    }
    return l;
}

/* Two 2-epoch runs of the same job ended alike: the same final line but
 * for its seconds, and the same checkpoints of both epochs. */
static void expect_same_run(const char *log_a, const char *ck_a, const char *log_b, const char *ck_b)
{
    const char *a = last_line(log_a), *b = last_line(log_b);
    /* test_acc=... val_acc=... epochs=2 seconds=...: all but the seconds */
    assert_int_equal(strncmp(a, b, (size_t)(strstr(a, "seconds=") - a)), 0);
    char p1[4400], p2[4400];
    for (int e = 1; e <= 2; e++) {
        snprintf(p1, sizeof p1, "%s/epoch-%06d.safetensors", ck_a, e);
        snprintf(p2, sizeof p2, "%s/epoch-%06d.safetensors", ck_b, e);
        assert_same_ckpt(p1, p2);
    }
}

/* gnnlaunch online and packed with pipeline.ordered: the same checkpoint
 * (tensors byte for byte), the same final line; epochs the pack lacks,
 * another seed and a missing pack are refused before start (exit 2). */
static void test_launch(void **state)
{
    (void)state;
    setup_files();
    char gnnlaunch[4200], cfg[4300], out[4300], log[16384], log2[16384], ck1[4300], ck2[4300];
    t_bin(gnnlaunch, sizeof gnnlaunch, "gnnlaunch");
    snprintf(cfg, sizeof cfg, "%s/launch.toml", root);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n[model]\nfanouts = [4, 3]\nhidden = 16\n[train]\nepochs = 2\nbatch_size = 100\n"
            "seed = 11\n[pipeline]\nranks = 2\nfeature_buffer_mb = 1\nextractors = 1\nsamplers = 2\nordered = true\n",
            ds);
    fclose(f);
    snprintf(out, sizeof out, "%s/pack-run", root);
    if (pack(log, sizeof log, ds, cfg, out, "") != 0)
        fail_msg("gnnprep pack failed:\n%s", log);
    struct pack_manifest m;
    char err[1024];
    assert_int_equal(pack_manifest_read(out, &m, err, sizeof err), 0);
    assert_true(m.hot_rows > 0 && m.packed_rows > 0); /* both tiers serve the run */
    snprintf(ck1, sizeof ck1, "%s/ck-online", root);
    snprintf(ck2, sizeof ck2, "%s/ck-packed", root);
    if (t_run(log, sizeof log, "'%s' --cpu '%s' --set train.checkpoint_dir='%s'", gnnlaunch, cfg, ck1) != 0)
        fail_msg("online run failed:\n%s", log);
    if (t_run(log2, sizeof log2, "'%s' --cpu '%s' --set train.checkpoint_dir='%s' --set pipeline.mode=packed "
              "--set pipeline.pack='%s'", gnnlaunch, cfg, ck2, out) != 0)
        fail_msg("packed run failed:\n%s", log2);
    if (!strstr(log2, "hot tier of"))
        fail_msg("the packed run did not say it read the pack:\n%s", log2);
    expect_same_run(log, ck1, log2, ck2);
    /* the same run from a pack with a cache tier: the same checkpoints again */
    char outc[4300], ck3[4300];
    snprintf(outc, sizeof outc, "%s/pack-run-cache", root);
    snprintf(ck3, sizeof ck3, "%s/ck-packed-cache", root);
    if (pack(log2, sizeof log2, ds, cfg, outc, "--cache-limit 48K") != 0)
        fail_msg("gnnprep pack --cache-limit failed:\n%s", log2);
    assert_int_equal(pack_manifest_read(outc, &m, err, sizeof err), 0);
    assert_true(m.hot_rows > 0 && m.cache_rows > 0 && m.packed_rows > 0); /* all three tiers serve the run */
    if (t_run(log2, sizeof log2, "'%s' --cpu '%s' --set train.checkpoint_dir='%s' --set pipeline.mode=packed "
              "--set pipeline.pack='%s'", gnnlaunch, cfg, ck3, outc) != 0)
        fail_msg("packed run with a cache tier failed:\n%s", log2);
    if (!strstr(log2, "of the cache tier") || !strstr(log2, "reads of cache extents"))
        fail_msg("the packed run did not say it read the cache tier:\n%s", log2);
    if (!strstr(log2, "(some thread reading)") || !strstr(log2, ", packed reads ") ||
        !strstr(log2, "chunks read before the extents"))
        fail_msg("the packed run did not give its reading time, or its plan lacks the packed reads:\n%s", log2);
    expect_same_run(log, ck1, log2, ck3);
    /* ... and with the chunk read beside the cache extents (SLUICE_PACK_OVERLAP): the same again */
    t_rmrf(ck3);
    if (t_run(log2, sizeof log2, "SLUICE_PACK_OVERLAP=1 '%s' --cpu '%s' --set train.checkpoint_dir='%s' "
              "--set pipeline.mode=packed --set pipeline.pack='%s'", gnnlaunch, cfg, ck3, outc) != 0)
        fail_msg("packed run with a cache tier, overlapped, failed:\n%s", log2);
    if (!strstr(log2, "chunks read beside the extents"))
        fail_msg("the packed run did not read its chunks beside the extents:\n%s", log2);
    expect_same_run(log, ck1, log2, ck3);
    t_rmrf(ck3);
    t_rmrf(outc);
    /* refusals before start */
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed --set pipeline.pack='%s' "
                           "--set train.epochs=3", gnnlaunch, cfg, out), 2);
    if (!strstr(log, "packed epoch") || !strstr(log, "--epochs 3"))
        fail_msg("epochs beyond the pack:\n%s", log);
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed --set pipeline.pack='%s' "
                           "--set train.epochs=1", gnnlaunch, cfg, out), 2);
    if (!strstr(log, "lacks the test pass"))
        fail_msg("fewer epochs than packed:\n%s", log);
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed --set pipeline.pack='%s' "
                           "--set train.seed=12", gnnlaunch, cfg, out), 2);
    if (!strstr(log, "train.seed: 11 -> 12"))
        fail_msg("another seed:\n%s", log);
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed --set pipeline.pack='%s/none'",
                           gnnlaunch, cfg, root), 2);
    assert_non_null(strstr(log, "gnnprep pack"));
    /* a buffer whose pins cannot hold the hot tier (the reserve of two extractors takes every slot) */
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed --set pipeline.pack='%s' "
                           "--set pipeline.extractors=2", gnnlaunch, cfg, out), 2);
    if (!strstr(log, "hot tier holds") || !strstr(log, "pipeline.feature_buffer_mb"))
        fail_msg("a hot tier too large for the buffer:\n%s", log);
    assert_int_equal(t_run(log, sizeof log, "'%s' --cpu '%s' --set pipeline.mode=packed", gnnlaunch, cfg), 2);
    assert_non_null(strstr(log, "pipeline.pack"));
    t_rmrf(ck1);
    t_rmrf(ck2);
}

static int teardown(void **state)
{
    (void)state;
    if (root[0])
        t_rmrf(root);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_cache_refused),
        cmocka_unit_test(test_cache_reads),
        cmocka_unit_test(test_disk_limit),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_launch),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
