/* partition.c - `gnnprep partition DATASET --parts P`: writes the
 * partitioned layout of core/partition.h into DATASET/parts.P, out of
 * core under --mem-limit, staged in DATASET/.parts.P.partial-PID and
 * renamed into place only when complete.
 *
 * Memory: 24 bytes a node (the order, its inverse, the in-degrees), 24
 * bytes a bucket (P^2 of them), the scans' buffers (~64 MiB), and a window that takes
 * the rest of --mem-limit. Passes:
 *   1. train.bin (val.bin and test.bin too with --eval-first; indptr.bin
 *      for --order degree, indptr.bin + indices.bin for --order
 *      neighbours): the order;
 *   2. features.bin once per window of positions that fits: each pass
 *      copies the rows whose position falls in the window, then writes
 *      the window's rows in position order (the first pass hashes the
 *      file against dataset.toml);
 *   3. indptr.bin + indices.bin once to count the buckets (hashed), then
 *      once per window of destination positions whose in-edges fit: sort
 *      the window's edges by (bucket, dst, src) and write each bucket's
 *      run after the bucket's earlier runs.
 * Every input is read sequentially; every output byte is written once. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/dataset_scan.h"
#include "core/opt.h"
#include "core/partition.h"
#include "core/util.h"
#include "prep.h"

#define MiB (1ull << 20)
#define PART_IO_RESERVE (64 * MiB) /* two scans' buffers and the writers' */
#define PART_READ (1u << 20)       /* bytes dataset_scan_read hands over at a time */

struct pjob {
    const char *dir;
    struct dataset_meta m;
    struct parts_meta pm;
    uint64_t mem_limit, n, s; /* nodes, nodes a partition */
    uint32_t p;
    enum dtype idt;
    size_t idsz;
    bool quiet, eval_first;
    uint64_t *order; /* (n) node at each position */
    uint64_t *pos;   /* (n) position of each node */
    uint64_t *deg;   /* (n) in-degree of the node at each position */
    uint64_t *count; /* (p*p) edges of bucket (i, j) at j*p + i */
    uint64_t *off;   /* (p*p) byte offset of the bucket in buckets.bin */
    uint64_t *col;   /* (p+1) byte offset of column j; col[p] = file size */
    struct dataset_dir d;
    char err[1024];
};

static void usage(FILE *f)
{
    fprintf(f, "usage: gnnprep partition DATASET --parts P [--order random|degree|neighbours] [--eval-first] [--seed S] [--mem-limit SIZE] [--quiet]\n"
               "\n"
               "Writes DATASET/parts.P: the nodes in P partitions, training nodes first (they fill the first\n"
               "k partitions), the features grouped by partition (each a 4 KiB-aligned block that one direct\n"
               "read loads), a node-to-position map and its inverse, and the edges in P x P buckets by\n"
               "(source partition, destination partition) for a run with pipeline.mode = \"partitions\"\n"
               "(docs/partitions.md). The layout is tied to the dataset by its checksums: a run refuses it\n"
               "once the dataset changes.\n"
               "\n"
               "  --parts P         partitions, 1..%u and at most the nodes (required)\n"
               "  --order O         random (default), degree or neighbours: the order within the training\n"
               "                    nodes and within the others (degree: highest in-degree first;\n"
               "                    neighbours: training nodes at random, then the others by the edges\n"
               "                    they send to training nodes, then by out-degree, so the partitions\n"
               "                    after the training ones hold their nearest neighbours; one more pass\n"
               "                    over the edges)\n"
               "  --eval-first      the validation and test nodes right after the training nodes, so that a\n"
               "                    run can evaluate inside the buffer (pipeline.partition_eval); with\n"
               "                    --order neighbours the others are ranked by the edges they send to\n"
               "                    any of these nodes\n"
               "  --seed S          the shuffle of --order random and neighbours (default 1)\n"
               "  --mem-limit SIZE  memory to use, e.g. 512M or 8G (default 1G): 24 bytes a node and\n"
               "                    24 bytes a bucket, ~64 MiB of buffers, the rest for the windows\n"
               "  --quiet           no progress lines\n"
               "  --help            this text\n",
               PARTS_MAX);
}

static void progress(const struct pjob *j, const char *fmt, ...) SL_PRINTF(2, 3);
static void progress(const struct pjob *j, const char *fmt, ...)
{
    if (j->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gnnprep partition: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Writes back what fd holds so far and drops it from the page cache, so
 * that the output does not pile up as dirty pages against the memory the
 * run was given (a cgroup charges them to it). 0 or -errno. */
static int settle(int fd)
{
    if (fdatasync(fd) < 0)
        return -errno;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    return 0;
}

static int file_path(const struct pjob *j, int f, char *out, size_t len)
{
    return sl_path_join(out, len, j->dir, j->m.f[f].file);
}

/* Reads n ids of the dataset's id dtype from a scan into out (u64). */
static int read_ids(struct pjob *j, struct dataset_scan *sc, uint64_t *out, uint64_t n)
{
    if (j->idsz == 8)
        return dataset_scan_read(sc, out, n * 8, j->err, sizeof j->err);
    uint32_t buf[4096];
    for (uint64_t done = 0; done < n;) {
        uint64_t k = SL_MIN(n - done, 4096);
        int rc = dataset_scan_read(sc, buf, k * 4, j->err, sizeof j->err);
        if (rc < 0)
            return rc;
        for (uint64_t i = 0; i < k; i++)
            out[done + i] = buf[i];
        done += k;
    }
    return 0;
}

/* Finishes a hashing scan and compares with dataset.toml's checksum. */
static int scan_done(struct pjob *j, struct dataset_scan *sc, int file)
{
    uint64_t h;
    int rc = dataset_scan_finish(sc, &h, NULL, j->err, sizeof j->err);
    if (rc == 0 && h != j->m.f[file].xxh3)
        rc = sl_errf(j->err, sizeof j->err, -EBADMSG,
                     "%s: contents differ from the checksum dataset.toml records; the dataset changed, run gnnprep "
                     "check",
                     sc->path);
    return rc;
}

/* --order degree: highest in-degree (deg, the qsort_r argument) first, then by id. */
static int by_degree(const void *a, const void *b, void *deg)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    uint64_t dx = ((const uint64_t *)deg)[x], dy = ((const uint64_t *)deg)[y];
    if (dx != dy)
        return dx > dy ? -1 : 1;
    return (x > y) - (x < y);
}

/* --order neighbours: highest score first (edges sent to training nodes in
 * the high 32 bits, all edges sent in the low ones), ties by a hash of the
 * id and the seed (a random order among equals). */
struct score_ctx {
    const uint64_t *score;
    uint64_t seed;
};

static int by_score(const void *a, const void *b, void *arg)
{
    const struct score_ctx *x = arg;
    uint64_t u = *(const uint64_t *)a, v = *(const uint64_t *)b;
    if (x->score[u] != x->score[v])
        return x->score[u] > x->score[v] ? -1 : 1;
    uint64_t hu = sl_mix64(u ^ x->seed), hv = sl_mix64(v ^ x->seed);
    if (hu != hv)
        return hu < hv ? -1 : 1;
    return (u > v) - (u < v);
}

/* Edge u -> v: u's score (j->deg, indexed by node here) gains 1 << 32 when
 * v is a training node (j->pos[v] != 0 marks them, and the evaluation
 * nodes with --eval-first) and 1 in any case. */
static int score_edge(struct pjob *j, uint64_t u, uint64_t v, void *arg)
{
    (void)arg;
    j->deg[u] += (j->pos[v] ? 1ull << 32 : 0) + 1;
    return 0;
}

static int each_edge(struct pjob *j, bool hash, int (*fn)(struct pjob *, uint64_t u, uint64_t v, void *), void *arg);

static void shuffle(uint64_t *v, uint64_t n, uint64_t *rng)
{
    for (uint64_t i = n; i > 1; i--) {
        uint64_t k = sl_splitmix64(rng) % i, t = v[i - 1];
        v[i - 1] = v[k];
        v[k] = t;
    }
}

/* Reads split file `file` (n ids) into j->order[at..at+n), hashed, and
 * marks each node in j->pos (nonzero: placed already). */
static int read_split(struct pjob *j, int file, uint64_t at, uint64_t n)
{
    char path[4096];
    struct dataset_scan sc;
    file_path(j, file, path, sizeof path);
    if (at > j->n || n > j->n - at) /* the splits overlap: more ids than nodes, caught before they are read */
        return sl_errf(j->err, sizeof j->err, -EBADMSG,
                       "%s: %" PRIu64 " ids after %" PRIu64 " of the other splits are more than the %" PRIu64
                       " nodes: the splits overlap; run gnnprep check",
                       path, n, at, j->n);
    int rc = dataset_scan_open(&sc, path, true, j->err, sizeof j->err);
    if (rc == 0)
        rc = read_ids(j, &sc, j->order + at, n);
    if (rc == 0)
        rc = scan_done(j, &sc, file);
    dataset_scan_free(&sc);
    for (uint64_t i = at; rc == 0 && i < at + n; i++) {
        if (j->order[i] >= j->n || j->pos[j->order[i]])
            return sl_errf(j->err, sizeof j->err, -EBADMSG,
                           "%s: node %" PRIu64 " is out of range, twice in the split or in two splits; run gnnprep "
                           "check", path, j->order[i]);
        j->pos[j->order[i]] = 1;
    }
    return rc;
}

/* Pass 1: the order (training nodes first; with --eval-first the
 * validation and test nodes next) and the positions. The order within
 * each of the training nodes, the evaluation nodes and the others is
 * --order's. */
static int make_order(struct pjob *j, uint64_t train_seed)
{
    uint64_t n = j->n, ntrain = j->m.f[DATASET_TRAIN].rows, head = ntrain;
    /* pos as a mark: 1 for a node placed in the head */
    memset(j->pos, 0, n * sizeof *j->pos);
    int rc = read_split(j, DATASET_TRAIN, 0, ntrain);
    if (rc == 0 && j->eval_first) {
        uint64_t nv = j->m.f[DATASET_VAL].rows, nt = j->m.f[DATASET_TEST].rows;
        if ((rc = read_split(j, DATASET_VAL, head, nv)) == 0)
            rc = read_split(j, DATASET_TEST, head + nv, nt);
        head += nv + nt;
    }
    if (rc < 0)
        return rc;
    uint64_t at = head;
    for (uint64_t v = 0; v < n; v++)
        if (!j->pos[v])
            j->order[at++] = v;
    uint64_t *tr = j->order, *ev = j->order + ntrain, *rest = j->order + head;
    uint64_t nev = head - ntrain, nrest = n - head;
    if (j->pm.order == PARTS_ORDER_RANDOM) {
        uint64_t rng = train_seed;
        shuffle(tr, ntrain, &rng);
        shuffle(rest, nrest, &rng);
        shuffle(ev, nev, &rng);
    } else if (j->pm.order == PARTS_ORDER_NEIGHBOURS) {
        /* one pass over the edges scores every node into deg (zero until
         * the bucket count, which it is again after) */
        if ((rc = each_edge(j, false, score_edge, NULL)) < 0)
            return rc;
        uint64_t rng = train_seed;
        shuffle(tr, ntrain, &rng);
        shuffle(ev, nev, &rng);
        struct score_ctx x = {.score = j->deg, .seed = train_seed};
        qsort_r(rest, nrest, sizeof *rest, by_score, &x);
        memset(j->deg, 0, n * sizeof *j->deg);
    } else {
        /* in-degrees into pos (no longer needed as a mark) */
        char path[4096];
        struct dataset_scan sc;
        file_path(j, DATASET_INDPTR, path, sizeof path);
        rc = dataset_scan_open(&sc, path, false, j->err, sizeof j->err);
        uint64_t prev = 0, x;
        for (uint64_t v = 0; rc == 0 && v <= n; v++) {
            if ((rc = dataset_scan_read(&sc, &x, 8, j->err, sizeof j->err)) < 0)
                break;
            if (v > 0)
                j->pos[v - 1] = x - prev;
            prev = x;
        }
        dataset_scan_free(&sc);
        if (rc < 0)
            return rc;
        qsort_r(tr, ntrain, sizeof *tr, by_degree, j->pos);
        qsort_r(ev, nev, sizeof *ev, by_degree, j->pos);
        qsort_r(rest, nrest, sizeof *rest, by_degree, j->pos);
    }
    for (uint64_t i = 0; i < n; i++)
        j->pos[j->order[i]] = i;
    j->pm.train_nodes = ntrain;
    j->pm.train_parts = (uint32_t)((ntrain + j->s - 1) / j->s);
    j->pm.eval_parts = j->eval_first ? (uint32_t)((head + j->s - 1) / j->s) : 0;
    return 0;
}

static int write_ids(struct pjob *j, int file, const uint64_t *v)
{
    char path[4096];
    struct file_writer w;
    dataset_dir_path(&j->d, parts_file_name[file], path, sizeof path);
    int rc = file_writer_open(&w, path, j->err, sizeof j->err);
    if (rc < 0)
        return rc;
    uint32_t buf[4096];
    for (uint64_t i = 0; rc == 0 && i < j->n;) {
        if (j->idsz == 8) {
            rc = file_writer_write(&w, v, j->n * 8, j->err, sizeof j->err);
            break;
        }
        uint64_t k = SL_MIN(j->n - i, 4096);
        for (uint64_t t = 0; t < k; t++)
            buf[t] = (uint32_t)v[i + t];
        rc = file_writer_write(&w, buf, k * 4, j->err, sizeof j->err);
        i += k;
    }
    if (rc == 0)
        return file_writer_close(&w, &j->pm.bytes[file], &j->pm.xxh3[file], j->err, sizeof j->err);
    file_writer_free(&w);
    return rc;
}

/* Pass 2: features.bin by windows of positions. */
static int write_features(struct pjob *j, uint64_t avail)
{
    uint64_t stride = j->pm.row_stride, n = j->n;
    uint64_t win = SL_MAX(1, avail / stride);
    win = SL_MIN(win, n);
    unsigned char *buf = malloc(win * stride), *row = malloc(PART_READ + stride);
    char in[4096], out[4096];
    file_path(j, DATASET_FEATURES, in, sizeof in);
    dataset_dir_path(&j->d, parts_file_name[PARTS_FEATURES], out, sizeof out);
    struct file_writer w;
    memset(&w, 0, sizeof w);
    int rc = !buf || !row ? sl_errf(j->err, sizeof j->err, -ENOMEM, "out of memory for a %" PRIu64 "-byte window", win * stride)
                          : file_writer_open(&w, out, j->err, sizeof j->err);
    uint64_t written = 0, passes = (n + win - 1) / win;
    for (uint64_t a = 0, pass = 0; rc == 0 && a < n; a += win, pass++) {
        uint64_t b = SL_MIN(n, a + win);
        progress(j, "features: pass %" PRIu64 " of %" PRIu64 " (positions %" PRIu64 "..%" PRIu64 ")", pass + 1, passes,
                 a, b - 1);
        if ((rc = prep_interrupted(j->err, sizeof j->err)) < 0)
            break;
        struct dataset_scan sc;
        if ((rc = dataset_scan_open(&sc, in, pass == 0, j->err, sizeof j->err)) < 0)
            break;
        uint64_t per = PART_READ / stride ? PART_READ / stride : 1;
        for (uint64_t v = 0; rc == 0 && v < n;) {
            uint64_t k = SL_MIN(per, n - v);
            if ((rc = dataset_scan_read(&sc, row, k * stride, j->err, sizeof j->err)) < 0)
                break;
            for (uint64_t t = 0; t < k; t++) {
                uint64_t x = j->pos[v + t];
                if (x >= a && x < b)
                    memcpy(buf + (x - a) * stride, row + t * stride, stride);
            }
            v += k;
        }
        if (rc == 0)
            rc = pass == 0 ? scan_done(j, &sc, DATASET_FEATURES) : dataset_scan_finish(&sc, NULL, NULL, j->err, sizeof j->err);
        dataset_scan_free(&sc);
        /* the window's rows in position order, each block padded at its end */
        for (uint64_t x = a; rc == 0 && x < b;) {
            uint64_t q = x / j->s, end = SL_MIN(b, SL_MIN(n, (q + 1) * j->s));
            rc = file_writer_write(&w, buf + (x - a) * stride, (end - x) * stride, j->err, sizeof j->err);
            written += (end - x) * stride;
            x = end;
            if (rc == 0 && (x == n || x % j->s == 0)) {
                uint64_t block_end = (q + 1) * j->pm.part_bytes;
                rc = file_writer_zero(&w, block_end - written, j->err, sizeof j->err);
                written = block_end;
            }
        }
        if (rc == 0 && (rc = settle(w.fd)) < 0)
            sl_errf(j->err, sizeof j->err, rc, "%s: write failed: %s", out, strerror(-rc));
    }
    /* blocks of partitions past the last node (P * S > N + S) stay zero */
    uint64_t total = (uint64_t)j->p * j->pm.part_bytes;
    if (rc == 0 && written < total) {
        rc = file_writer_zero(&w, total - written, j->err, sizeof j->err);
        written = total;
    }
    if (rc == 0)
        rc = file_writer_close(&w, &j->pm.bytes[PARTS_FEATURES], &j->pm.xxh3[PARTS_FEATURES], j->err, sizeof j->err);
    else
        file_writer_free(&w);
    free(buf);
    free(row);
    return rc;
}

/* Streams every edge (u -> v: u in the in-list of v) to fn. */
static int each_edge(struct pjob *j, bool hash, int (*fn)(struct pjob *, uint64_t u, uint64_t v, void *), void *arg)
{
    char pi[4096], px[4096];
    file_path(j, DATASET_INDPTR, pi, sizeof pi);
    file_path(j, DATASET_INDICES, px, sizeof px);
    struct dataset_scan si, sx;
    memset(&sx, 0, sizeof sx);
    int rc = dataset_scan_open(&si, pi, hash, j->err, sizeof j->err);
    if (rc == 0)
        rc = dataset_scan_open(&sx, px, hash, j->err, sizeof j->err);
    uint64_t prev = 0, x, ids[4096];
    if (rc == 0)
        rc = dataset_scan_read(&si, &prev, 8, j->err, sizeof j->err);
    for (uint64_t v = 0; rc == 0 && v < j->n; v++) {
        if ((rc = dataset_scan_read(&si, &x, 8, j->err, sizeof j->err)) < 0)
            break;
        if (x < prev || x > j->m.edges) {
            rc = sl_errf(j->err, sizeof j->err, -EBADMSG, "%s: entry %" PRIu64 " is out of order; run gnnprep check", pi,
                         v + 1);
            break;
        }
        for (uint64_t left = x - prev; rc == 0 && left > 0;) {
            uint64_t k = SL_MIN(left, 4096);
            if ((rc = prep_interrupted(j->err, sizeof j->err)) < 0 || (rc = read_ids(j, &sx, ids, k)) < 0)
                break;
            for (uint64_t t = 0; t < k && rc == 0; t++) {
                if (ids[t] >= j->n)
                    rc = sl_errf(j->err, sizeof j->err, -EBADMSG, "%s: node id %" PRIu64 " is out of range; run gnnprep check",
                                 px, ids[t]);
                else
                    rc = fn(j, ids[t], v, arg);
            }
            left -= k;
        }
        prev = x;
    }
    if (rc == 0 && hash) {
        if ((rc = scan_done(j, &si, DATASET_INDPTR)) == 0)
            rc = scan_done(j, &sx, DATASET_INDICES);
    }
    dataset_scan_free(&si);
    dataset_scan_free(&sx);
    return rc;
}

static int count_edge(struct pjob *j, uint64_t u, uint64_t v, void *arg)
{
    (void)arg;
    j->count[(j->pos[v] / j->s) * j->p + j->pos[u] / j->s]++;
    j->deg[j->pos[v]]++;
    return 0;
}

/* One edge of a window: its bucket and (dst, src) local, which sorts
 * the bucket. */
struct brec {
    uint64_t bucket, key;
};

struct place {
    uint64_t a, b;    /* the window's destination positions */
    struct brec *rec; /* (edges into [a, b)) */
    uint64_t n, cap;  /* records in rec; its room: the window's edges by the count (more: the files changed) */
};

static int place_edge(struct pjob *j, uint64_t u, uint64_t v, void *arg)
{
    struct place *pl = arg;
    uint64_t pv = j->pos[v], pu = j->pos[u];
    if (pv < pl->a || pv >= pl->b)
        return 0;
    if (pl->n == pl->cap)
        return sl_errf(j->err, sizeof j->err, -EBADMSG, "the dataset's edges changed while they were read");
    pl->rec[pl->n++] = (struct brec){(pv / j->s) * j->p + pu / j->s, (pv % j->s) << 32 | (pu % j->s)};
    return 0;
}

static int cmp_brec(const void *x, const void *y)
{
    const struct brec *a = x, *b = y;
    if (a->bucket != b->bucket)
        return a->bucket < b->bucket ? -1 : 1;
    return (a->key > b->key) - (a->key < b->key);
}

/* Pass 3: buckets.bin and buckets_index.bin. The windows run over the
 * destination positions in order, so each bucket's records arrive in
 * (dst, src) order window after window; a window's run of bucket b goes
 * right after what earlier windows wrote of b (pwrite), and the file is
 * hashed once complete. */
static int write_buckets(struct pjob *j, uint64_t avail)
{
    uint32_t p = j->p;
    uint64_t nb = (uint64_t)p * p;
    progress(j, "edges: counting the %" PRIu64 " buckets", nb);
    int rc = each_edge(j, true, count_edge, NULL);
    if (rc < 0)
        return rc;
    uint64_t at = 0;
    for (uint32_t c = 0; c < p; c++) {
        j->col[c] = at;
        for (uint32_t i = 0; i < p; i++) {
            j->off[(uint64_t)c * p + i] = at;
            at += j->count[(uint64_t)c * p + i] * 8;
        }
        at = sl_round_up(at, PARTS_ALIGN);
    }
    j->col[p] = at;
    char out[4096];
    dataset_dir_path(&j->d, parts_file_name[PARTS_BUCKETS], out, sizeof out);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sl_errf(j->err, sizeof j->err, -errno, "%s: cannot create: %s", out, strerror(errno));
    if (ftruncate(fd, (off_t)at) < 0) /* the alignment gaps stay holes: zeros */
        rc = sl_errf(j->err, sizeof j->err, -errno, "%s: cannot size it to %" PRIu64 " bytes: %s", out, at, strerror(errno));
    uint64_t cap = avail / sizeof(struct brec), *done = calloc(nb, sizeof *done);
    struct place pl = {.rec = malloc(SL_MAX(1, SL_MIN(cap, j->m.edges)) * sizeof(struct brec))};
    if (rc == 0 && (!done || !pl.rec))
        rc = sl_errf(j->err, sizeof j->err, -ENOMEM, "out of memory");
    uint64_t windows = 0;
    for (uint64_t a = 0; rc == 0 && a < j->n;) {
        uint64_t b = a, edges = 0;
        while (b < j->n && edges + j->deg[b] <= cap)
            edges += j->deg[b++];
        if (b == a) {
            char b1[32];
            rc = sl_errf(j->err, sizeof j->err, -ENOMEM,
                         "node %" PRIu64 " has %" PRIu64 " in-edges, more than --mem-limit leaves room for (%s); "
                         "raise --mem-limit",
                         j->order[a], j->deg[a], sl_fmt_bytes(avail, b1, sizeof b1));
            break;
        }
        progress(j, "edges: window %" PRIu64 ": positions %" PRIu64 "..%" PRIu64 " (partitions %" PRIu64 "..%" PRIu64 ")",
                 ++windows, a, b - 1, a / j->s, (b - 1) / j->s);
        pl.a = a;
        pl.b = b;
        pl.n = 0;
        pl.cap = edges;
        if ((rc = each_edge(j, false, place_edge, &pl)) < 0)
            break;
        if (pl.n != edges) {
            rc = sl_errf(j->err, sizeof j->err, -EBADMSG, "the dataset's edges changed while they were read");
            break;
        }
        qsort(pl.rec, pl.n, sizeof *pl.rec, cmp_brec);
        /* each run of one bucket: {u32 dst, u32 src} records, after the
         * bucket's earlier runs */
        uint64_t *run = (uint64_t *)pl.rec; /* packed over the records already read */
        for (uint64_t r = 0; rc == 0 && r < pl.n;) {
            uint64_t bk = pl.rec[r].bucket, e = r;
            for (; e < pl.n && pl.rec[e].bucket == bk; e++) {
                uint64_t k = pl.rec[e].key;
                run[e - r] = k >> 32 | k << 32;
            }
            rc = sl_pwrite_all(fd, run, (e - r) * 8, (off_t)(j->off[bk] + done[bk] * 8));
            if (rc < 0)
                sl_errf(j->err, sizeof j->err, rc, "%s: write failed: %s", out, strerror(-rc));
            done[bk] += e - r;
            r = e;
        }
        if (rc == 0 && (rc = settle(fd)) < 0)
            sl_errf(j->err, sizeof j->err, rc, "%s: write failed: %s", out, strerror(-rc));
        a = b;
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = sl_errf(j->err, sizeof j->err, -errno, "%s: fsync failed: %s", out, strerror(errno));
    if (close(fd) < 0 && rc == 0)
        rc = sl_errf(j->err, sizeof j->err, -errno, "%s: close failed: %s", out, strerror(errno));
    free(pl.rec);
    free(done);
    if (rc < 0)
        return rc;
    if ((rc = file_xxh3(out, &j->pm.xxh3[PARTS_BUCKETS], &j->pm.bytes[PARTS_BUCKETS], j->err, sizeof j->err)) < 0)
        return rc;
    /* the index: (offset, edges) of each bucket */
    struct file_writer w;
    dataset_dir_path(&j->d, parts_file_name[PARTS_BUCKETS_INDEX], out, sizeof out);
    if ((rc = file_writer_open(&w, out, j->err, sizeof j->err)) < 0)
        return rc;
    for (uint64_t bk = 0; rc == 0 && bk < nb; bk++) {
        uint64_t e[2] = {j->off[bk], j->count[bk]};
        rc = file_writer_write(&w, e, sizeof e, j->err, sizeof j->err);
    }
    if (rc == 0)
        return file_writer_close(&w, &j->pm.bytes[PARTS_BUCKETS_INDEX], &j->pm.xxh3[PARTS_BUCKETS_INDEX], j->err,
                                 sizeof j->err);
    file_writer_free(&w);
    return rc;
}

static void set_source(struct parts_meta *pm, int argc, char **argv)
{
    size_t n = (size_t)snprintf(pm->source, sizeof pm->source, "gnnprep");
    for (int i = 0; i < argc && n + 2 < sizeof pm->source; i++)
        n += (size_t)snprintf(pm->source + n, sizeof pm->source - n, " %s", argv[i]);
}

static int order_opt(const char *v, void *dst, char *err, size_t errlen)
{
    if (parts_order_parse(v, dst) < 0)
        return sl_errf(err, errlen, -EINVAL, "gnnprep partition: --order %s: expected random, degree or neighbours", v);
    return 0;
}

int prep_partition_main(int argc, char **argv)
{
    struct pjob j;
    memset(&j, 0, sizeof j);
    uint64_t parts = 0, seed = 1;
    j.mem_limit = 1ull << 30;
    bool help = false, seen[7] = {0};
    enum parts_order order = PARTS_ORDER_RANDOM;
    const struct opt opts[] = {
        {.name = "--parts", .kind = OPT_UINT, .dst = &parts, .lo = 1, .hi = PARTS_MAX},
        {.name = "--order", .kind = OPT_FN, .dst = &order, .fn = order_opt},
        {.name = "--seed", .kind = OPT_UINT, .dst = &seed, .lo = 0, .hi = UINT64_MAX},
        {.name = "--mem-limit", .kind = OPT_SIZE, .dst = &j.mem_limit, .lo = 1 * MiB, .hi = UINT64_MAX},
        {.name = "--eval-first", .kind = OPT_FLAG, .dst = &j.eval_first},
        {.name = "--quiet", .kind = OPT_FLAG, .dst = &j.quiet},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int first = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? 2 : 1;
    if (opt_parse("gnnprep partition", opts, 7, argc, argv, first, seen, "; see --help", j.err, sizeof j.err)) {
        fprintf(stderr, "%s\n", j.err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (help) {
        usage(stdout);
        return PREP_EXIT_OK;
    }
    if (first == 1 || !seen[0]) {
        fprintf(stderr, "gnnprep partition: %s\n", first == 1 ? "which dataset? (DATASET, a directory gnnprep made)"
                                                              : "--parts is required");
        usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    j.dir = argv[1];
    int rc = dataset_meta_read(j.dir, &j.m, true, j.err, sizeof j.err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep partition: %s\n", j.err);
        return prep_exit_code(rc);
    }
    j.n = j.m.nodes;
    if (parts > j.n) {
        fprintf(stderr, "gnnprep partition: --parts %" PRIu64 " exceeds the %" PRIu64 " nodes of %s; use fewer\n", parts,
                j.n, j.dir);
        return PREP_EXIT_BAD_INPUT;
    }
    j.p = (uint32_t)parts;
    j.idt = dtype_for_ids(j.n);
    j.idsz = dtype_size(j.idt);
    parts_meta_init(&j.pm, &j.m, j.p);
    j.pm.order = order;
    j.pm.seed = seed;
    set_source(&j.pm, argc, argv);
    j.s = j.pm.part_nodes;
    if (j.s > UINT32_MAX) { /* buckets.bin keeps local ids in 32 bits */
        fprintf(stderr,
                "gnnprep partition: --parts %" PRIu64 " leaves %" PRIu64 " nodes in a partition, more than the %" PRIu32
                " a partition's buckets can number; use at least %" PRIu64 " partitions\n",
                parts, j.s, UINT32_MAX, (j.n + UINT32_MAX - 1) / UINT32_MAX);
        return PREP_EXIT_BAD_INPUT;
    }
    if ((j.n + j.s - 1) / j.s < j.p)
        progress(&j, "note: %" PRIu64 " nodes in partitions of %" PRIu64 " leave the last %" PRIu64 " partition(s) empty",
                 j.n, j.s, j.p - (j.n + j.s - 1) / j.s);
    uint64_t fixed = 24 * j.n + 24ull * j.p * j.p + 8ull * (j.p + 1) + PART_IO_RESERVE;
    uint64_t least = fixed + SL_MAX(j.pm.row_stride, 4096) * 16;
    if (j.mem_limit < least) {
        char b1[32], b2[32];
        fprintf(stderr, "gnnprep partition: --mem-limit %s is too small for %" PRIu64 " nodes and %" PRIu32
                        " partitions: it needs at least %s\n",
                sl_fmt_bytes(j.mem_limit, b1, sizeof b1), j.n, j.p, sl_fmt_bytes(least, b2, sizeof b2));
        return PREP_EXIT_BAD_INPUT;
    }
    uint64_t avail = j.mem_limit - fixed;
    char out[4096], name[64];
    parts_dir_name(j.p, name, sizeof name);
    if (sl_path_join(out, sizeof out, j.dir, name) < 0) {
        fprintf(stderr, "gnnprep partition: %s: path too long\n", j.dir);
        return PREP_EXIT_BAD_INPUT;
    }
    struct prep_signals sigs; /* Ctrl-C: the staging directory goes, exit 130 */
    prep_signals_on(&sigs);
    j.order = malloc(j.n * sizeof *j.order);
    j.pos = malloc(j.n * sizeof *j.pos);
    j.deg = calloc(j.n, sizeof *j.deg);
    j.count = calloc((size_t)j.p * j.p, sizeof *j.count);
    j.off = calloc((size_t)j.p * j.p, sizeof *j.off);
    j.col = calloc((size_t)j.p + 1, sizeof *j.col);
    if (!j.order || !j.pos || !j.deg || !j.count || !j.off || !j.col) {
        rc = sl_errf(j.err, sizeof j.err, -ENOMEM, "out of memory for %" PRIu64 " nodes", j.n);
        goto out;
    }
    if ((rc = dataset_dir_begin(&j.d, out, j.err, sizeof j.err)) < 0)
        goto out;
    progress(&j, "%s: %" PRIu64 " nodes in %" PRIu32 " partitions of %" PRIu64 " (%s order)", j.dir, j.n, j.p, j.s,
             parts_order_name(order));
    if ((rc = make_order(&j, seed)) < 0 || (rc = write_ids(&j, PARTS_NODE_POS, j.pos)) < 0 ||
        (rc = write_ids(&j, PARTS_POS_NODE, j.order)) < 0 || (rc = write_features(&j, avail)) < 0 ||
        (rc = write_buckets(&j, avail)) < 0)
        goto out;
    if ((rc = parts_meta_write(j.d.tmp, &j.pm, j.err, sizeof j.err)) < 0 ||
        (rc = prep_interrupted(j.err, sizeof j.err)) < 0 || (rc = dataset_dir_rename(&j.d, j.err, sizeof j.err)) < 0)
        goto out;
    char b1[32];
    printf("%s: %" PRIu32 " partitions of %" PRIu64 " nodes (%s each), training nodes in the first %" PRIu32 "\n", out,
           j.p, j.s, sl_fmt_bytes(j.pm.part_bytes, b1, sizeof b1), j.pm.train_parts);
out:
    if (rc < 0 && prep_stop) /* a read the signal cut short reports the signal, not EINTR */
        rc = prep_interrupted(j.err, sizeof j.err);
    if (rc < 0)
        fprintf(stderr, "gnnprep partition: %s\n", j.err);
    dataset_dir_abort(&j.d);
    prep_signals_off(&sigs);
    free(j.order);
    free(j.pos);
    free(j.deg);
    free(j.count);
    free(j.off);
    free(j.col);
    return prep_exit_code(rc);
}
