/* linkooc.c - link prediction out of core (stages/linkooc.h). */
#include "stages/linkooc.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "ops/ops.h"
#include "stages/linkenc.h"

#define REC 4 /* u64 a bucket record: split index, head, relation, tail */
#define UNSET UINT32_MAX

uint64_t linkooc_expected_swaps(uint32_t p, uint32_t c)
{
    struct po_params pp = {.parts = p, .slots = c, .order = PO_ORDER_BETA, .cover = PO_COVER_PAIRS};
    return po_expected_swaps(&pp);
}

/* ---- which state trains each bucket ---- */

/* Calls fn(arg, s, bucket) for every bucket state s holds (both
 * partitions in s), each bucket once per state, states in order. */
static void each_held(const struct linkooc *x, void (*fn)(void *arg, uint32_t s, uint64_t b), void *arg)
{
    const uint32_t p = x->parts, c = x->slots;
    for (uint32_t s = 0; s < x->plan.states; s++)
        for (uint32_t a = 0; a < c; a++)
            for (uint32_t b = 0; b < c; b++) {
                uint32_t i = po_slot(&x->plan, s, a), j = po_slot(&x->plan, s, b);
                if (i != PO_EMPTY && j != PO_EMPTY)
                    fn(arg, s, (uint64_t)i * p + j);
            }
}

static void first_holder(void *arg, uint32_t s, uint64_t b)
{
    struct linkooc *x = arg;
    if (x->bucket_state[b] == UNSET)
        x->bucket_state[b] = s;
}

struct draw_ctx {
    struct linkooc *x;
    uint32_t *seen; /* (p * p) holders met so far */
    uint32_t *pick; /* (p * p) which holder trains it */
};

static void count_holder(void *arg, uint32_t s, uint64_t b)
{
    (void)s;
    struct draw_ctx *d = arg;
    d->pick[b]++;
}

static void take_holder(void *arg, uint32_t s, uint64_t b)
{
    struct draw_ctx *d = arg;
    if (d->seen[b]++ == d->pick[b])
        d->x->bucket_state[b] = s;
}

int linkooc_assign(struct linkooc *x, uint32_t epoch, char *err, size_t errlen)
{
    const uint64_t nb = (uint64_t)x->parts * x->parts;
    if (x->order == PO_ORDER_COMET) { /* a new grouping into logical partitions every epoch (MariusGNN §3) */
        struct po_params pl = {.parts = x->parts, .slots = x->slots, .order = PO_ORDER_COMET, .cover = PO_COVER_PAIRS,
                               .seed = sl_mix64(x->o.seed ^ ((uint64_t)epoch + 1) * 0x9e3779b97f4a7c15ull)};
        po_plan_free(&x->plan);
        int rc = po_plan_build(&x->plan, &pl, err, errlen);
        if (rc < 0)
            return rc;
    }
    for (uint64_t b = 0; b < nb; b++)
        x->bucket_state[b] = UNSET;
    if (x->order == PO_ORDER_BETA) {
        each_held(x, first_holder, x);
    } else { /* uniform among the states that hold the bucket, drawn from (seed, epoch, bucket) */
        struct draw_ctx d = {x, calloc(nb, sizeof *d.seen), calloc(nb, sizeof *d.pick)};
        if (!d.seen || !d.pick) {
            free(d.seen), free(d.pick);
            return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " edge buckets", nb);
        }
        each_held(x, count_holder, &d);
        for (uint64_t b = 0; b < nb; b++) {
            uint64_t h = sl_mix64(x->o.seed ^ sl_mix64(0x636f6d6574ull + epoch * 0x9e3779b97f4a7c15ull + b));
            d.pick[b] = d.pick[b] ? (uint32_t)(((unsigned __int128)h * d.pick[b]) >> 64) : 0;
        }
        each_held(x, take_holder, &d);
        free(d.seen), free(d.pick);
    }
    for (uint64_t b = 0; b < nb; b++)
        if (x->bucket_state[b] == UNSET)
            return sl_errf(err, errlen, -EINVAL, "the %s plan of %" PRIu32 " partitions and %" PRIu32 " slots never "
                           "holds partitions %" PRIu64 " and %" PRIu64 " together", po_order_name(x->order), x->parts,
                           x->slots, b / x->parts, b % x->parts);
    /* room for a state's triples */
    uint64_t *n = calloc(x->plan.states, sizeof *n), cap = 0;
    if (!n)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu32 " states", x->plan.states);
    for (uint64_t b = 0; b < nb; b++)
        n[x->bucket_state[b]] += x->bucket_off[b + 1] - x->bucket_off[b];
    for (uint32_t s = 0; s < x->plan.states; s++)
        cap = SL_MAX(cap, n[s]);
    free(n);
    if (cap > x->cap || !x->rec) {
        cap = SL_MAX(cap, 1);
        uint64_t *rec = realloc(x->rec, cap * REC * sizeof *x->rec);
        if (rec)
            x->rec = rec;
        uint64_t *tri = realloc(x->tri, cap * 3 * sizeof *x->tri);
        if (tri)
            x->tri = tri;
        uint64_t *perm = realloc(x->perm, cap * sizeof *x->perm);
        if (perm)
            x->perm = perm;
        if (!rec || !tri || !perm) {
            char h[32];
            return sl_errf(err, errlen, -ENOMEM,
                           "out of memory for the triples of one buffer state (%" PRIu64 " triples, %s)", cap,
                           sl_fmt_bytes(cap * 8 * (REC + 4), h, sizeof h));
        }
        x->cap = cap;
    }
    x->assigned = epoch;
    return 0;
}

/* ---- writing the layout ---- */

struct emit_ctx {
    struct linkooc *x;
    int fd;
    unsigned char *frame;
    char *err;
    size_t errlen;
};

/* link_model_init_with's emit: the partitions in order, each drawn row
 * after row, Adagrad sums zero. */
static int emit_parts(void *arg, uint64_t *st, double bound)
{
    struct emit_ctx *c = arg;
    struct linkooc *x = c->x;
    for (uint32_t q = 0; q < x->parts; q++) {
        uint64_t lo = (uint64_t)q * x->part_nodes, rows = lo >= x->nodes ? 0 : SL_MIN(x->part_nodes, x->nodes - lo);
        memset(c->frame, 0, x->part_bytes);
        ops_uniform((float *)c->frame, (size_t)(rows * x->d), bound, st);
        int rc = sl_pwrite_all(c->fd, c->frame, x->part_bytes, (off_t)((uint64_t)q * x->part_bytes));
        if (rc < 0)
            return sl_errf(c->err, c->errlen, rc, "%s: writing partition %" PRIu32 ": %s; check free space",
                           x->emb_path, q, strerror(-rc));
    }
    return 0;
}

static int cmp_rec(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int linkooc_read_array(void *arg, uint64_t first, uint64_t count, uint64_t *dst, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    memcpy(dst, (const uint64_t *)arg + first * 3, count * 3 * sizeof *dst);
    return 0;
}

#define SRC_CHUNK 65536u /* triples read at once */
#define STAGE_RECS 64u   /* records a bucket gathers before they are written */

/* buckets.bin at path, in two passes over the source: the bucket sizes,
 * then each triple's record into a small per-bucket buffer that is
 * written where the bucket's next records go (split order within a
 * bucket). The source's triples need not fit in memory. */
static int write_buckets(struct linkooc *x, const char *path, const struct linkooc_triples *src, char *err,
                         size_t errlen)
{
    const uint32_t p = x->parts;
    const uint64_t pn = x->part_nodes, nb = (uint64_t)p * p;
    uint64_t *cnt = calloc(nb, sizeof *cnt), *at = malloc(nb * sizeof *at), *chunk = malloc(SRC_CHUNK * 3 * 8);
    uint32_t *fill = calloc(nb, sizeof *fill);
    uint64_t *stage = malloc(nb * STAGE_RECS * REC * sizeof *stage);
    int fd = -1, rc = 0;
    if (!cnt || !at || !chunk || !fill || !stage) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu32 " x %" PRIu32 " edge buckets", p, p);
        goto out;
    }
    for (uint64_t first = 0; first < x->ntrain && rc == 0; first += SRC_CHUNK) {
        uint64_t n = SL_MIN((uint64_t)SRC_CHUNK, x->ntrain - first);
        if ((rc = src->read(src->arg, first, n, chunk, err, errlen)) < 0)
            break;
        for (uint64_t i = 0; i < n; i++) {
            const uint64_t *tr = chunk + i * 3;
            if (tr[0] >= x->nodes || tr[2] >= x->nodes || tr[1] >= x->relations) {
                rc = sl_errf(err, errlen, -EINVAL, "training triple %" PRIu64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64
                             ") is out of range (%" PRIu64 " nodes, %" PRIu64 " relations); run gnnprep check on the "
                             "dataset", first + i, tr[0], tr[1], tr[2], x->nodes, x->relations);
                break;
            }
            cnt[(tr[0] / pn) * p + tr[2] / pn]++;
        }
    }
    if (rc < 0)
        goto out;
    x->bucket_off[0] = 0;
    for (uint64_t b = 0; b < nb; b++) {
        x->bucket_off[b + 1] = x->bucket_off[b] + cnt[b];
        at[b] = x->bucket_off[b];
    }
    if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot create: %s", path, strerror(errno));
        goto out;
    }
    const size_t rb = REC * sizeof *stage;
    for (uint64_t first = 0; first < x->ntrain && rc == 0; first += SRC_CHUNK) {
        uint64_t n = SL_MIN((uint64_t)SRC_CHUNK, x->ntrain - first);
        if ((rc = src->read(src->arg, first, n, chunk, err, errlen)) < 0)
            break;
        for (uint64_t i = 0; i < n && rc == 0; i++) {
            const uint64_t *tr = chunk + i * 3, b = (tr[0] / pn) * p + tr[2] / pn;
            uint64_t *r = stage + (b * STAGE_RECS + fill[b]) * REC;
            r[0] = first + i;
            r[1] = tr[0];
            r[2] = tr[1];
            r[3] = tr[2];
            if (++fill[b] == STAGE_RECS) {
                if ((rc = sl_pwrite_all(fd, stage + b * STAGE_RECS * REC, STAGE_RECS * rb, (off_t)(at[b] * rb))) < 0)
                    sl_errf(err, errlen, rc, "%s: cannot write: %s; check free space", path, strerror(-rc));
                at[b] += STAGE_RECS;
                fill[b] = 0;
            }
        }
    }
    for (uint64_t b = 0; b < nb && rc == 0; b++)
        if (fill[b] && (rc = sl_pwrite_all(fd, stage + b * STAGE_RECS * REC, fill[b] * rb, (off_t)(at[b] * rb))) < 0)
            sl_errf(err, errlen, rc, "%s: cannot write: %s; check free space", path, strerror(-rc));
out:
    if (fd >= 0 && rc == 0 && fdatasync(fd) != 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", path, strerror(errno));
    free(cnt);
    free(at);
    free(chunk);
    free(fill);
    free(stage);
    return rc;
}

static void remove_layout(const char *dir)
{
    char f[4700];
    snprintf(f, sizeof f, "%s/embeddings.bin", dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/buckets.bin", dir);
    unlink(f);
    /* the GNN encoder's table for evaluation (launcher/link.c: linkenc_encode_file) */
    static const char *const enc[] = {"encoded.bin", "encoded.bin.layer0", "encoded.bin.layer1"};
    for (size_t i = 0; i < SL_ARRAY_LEN(enc); i++) {
        snprintf(f, sizeof f, "%s/%s", dir, enc[i]);
        unlink(f);
    }
    rmdir(dir);
}

/* Removes the staged layouts (`DIR.partial-PID`) of runs that were killed
 * while writing theirs: no process PID any more (a live PID, even a reused
 * one, keeps its directory: never someone else's). Says so on stderr. */
static void reap_stale_stages(const char *dir)
{
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s", dir);
    snprintf(b, sizeof b, "%s", dir);
    const char *parent = dirname(a), *base = basename(b);
    size_t nb = strlen(base);
    DIR *d = opendir(parent);
    if (!d)
        return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, base, nb) != 0 || strncmp(e->d_name + nb, ".partial-", 9) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + nb + 9, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[4500];
        if (snprintf(path, sizeof path, "%s/%s", parent, e->d_name) >= (int)sizeof path)
            continue;
        remove_layout(path);
        n += access(path, F_OK) != 0;
    }
    closedir(d);
    if (n)
        fprintf(stderr, "%slink: removed %d staged partition layout%s of runs that were killed, beside %s\n",
                sl_err_line_start(), n, n == 1 ? "" : "s", dir);
}

int linkooc_init(struct linkooc *x, const char *dir, const struct linkooc_params *pp, const struct link_opts *o,
                 uint64_t nodes, uint64_t relations, const struct linkooc_triples *train, uint64_t ntrain,
                 struct link_model *m, char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    memset(m, 0, sizeof *m);
    x->rfd = x->bfd = -1;
    const uint32_t p = pp->parts, c = pp->slots;
    if (p < 2 || c < 2 || c > p || p > nodes || p > PO_MAX_PARTS)
        return sl_errf(err, errlen, -EINVAL,
                       "out-of-core link prediction needs 2 <= buffer partitions <= partitions <= nodes (and at most "
                       "%u partitions); got %" PRIu32 " buffer partitions of %" PRIu32 " partitions over %" PRIu64
                       " nodes",
                       PO_MAX_PARTS, c, p, nodes);
    if (!o->dim || ntrain == 0)
        return sl_errf(err, errlen, -EINVAL, "out-of-core link prediction needs model.dim > 0 and training triples");
    x->o = *o;
    x->nodes = nodes;
    x->relations = relations;
    x->ntrain = ntrain;
    x->d = o->dim;
    x->parts = p;
    x->slots = c;
    x->part_nodes = (nodes + p - 1) / p;
    x->part_bytes = (size_t)sl_round_up(2 * x->part_nodes * x->d * sizeof(float), 4096);
    x->view[0] = (struct linkooc_view){x, false};
    x->view[1] = (struct linkooc_view){x, true};
    char stage[4200];
    if (snprintf(x->dir, sizeof x->dir, "%s", dir) >= (int)sizeof x->dir ||
        snprintf(stage, sizeof stage, "%s.partial-%ld", dir, (long)getpid()) >= (int)sizeof stage)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    snprintf(x->emb_path, sizeof x->emb_path, "%s/embeddings.bin", dir);
    snprintf(x->bkt_path, sizeof x->bkt_path, "%s/buckets.bin", dir);
    int rc = 0;
    x->bucket_off = malloc(((size_t)p * p + 1) * sizeof *x->bucket_off);
    x->bucket_state = malloc((size_t)p * p * sizeof *x->bucket_state);
    x->part = calloc(p, sizeof *x->part);
    x->inbuf = malloc(c * sizeof *x->inbuf);
    if (!x->bucket_off || !x->bucket_state || !x->part || !x->inbuf) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu32 " x %" PRIu32 " edge buckets", p, p);
        goto fail;
    }
    /* the plan (the buckets are given to its states per epoch: linkooc_assign) */
    x->order = pp->comet ? PO_ORDER_COMET : PO_ORDER_BETA;
    struct po_params pl = {.parts = p, .slots = c, .order = x->order, .cover = PO_COVER_PAIRS, .seed = o->seed};
    if ((rc = po_plan_build(&x->plan, &pl, err, errlen)) < 0)
        goto fail;
    /* the layout, staged */
    reap_stale_stages(dir);
    remove_layout(stage);
    if (mkdir(stage, 0755) != 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot create: %s", stage, strerror(errno));
        goto fail;
    }
    char sb[4300], se[4300];
    snprintf(sb, sizeof sb, "%s/buckets.bin", stage);
    snprintf(se, sizeof se, "%s/embeddings.bin", stage);
    if ((rc = write_buckets(x, sb, train, err, errlen)) < 0)
        goto fail_stage;
    struct emit_ctx ec = {.x = x, .err = err, .errlen = errlen};
    ec.fd = open(se, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ec.frame = malloc(x->part_bytes);
    if (ec.fd < 0 || !ec.frame) {
        rc = ec.fd < 0 ? sl_errf(err, errlen, -errno, "%s: cannot create: %s", se, strerror(errno))
                       : sl_errf(err, errlen, -ENOMEM, "out of memory for one partition (%zu bytes)", x->part_bytes);
        if (ec.fd >= 0)
            close(ec.fd);
        free(ec.frame);
        goto fail_stage;
    }
    rc = link_model_init_with(m, nodes, relations, o, emit_parts, &ec, err, errlen);
    free(ec.frame);
    /* on disk and out of the page cache before the buffer's direct I/O:
     * dirty pages left behind would be written back under its reads, and
     * under a memory cap they crowd the frames */
    if (rc == 0 && fdatasync(ec.fd) != 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", se, strerror(errno));
    if (rc == 0)
        posix_fadvise(ec.fd, 0, 0, POSIX_FADV_DONTNEED);
    if (close(ec.fd) != 0 && rc == 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", se, strerror(errno));
    if (rc < 0)
        goto fail_stage;
    remove_layout(dir);
    if (rename(stage, dir) != 0) {
        rc = sl_errf(err, errlen, -errno, "cannot rename %s to %s: %s", stage, dir, strerror(errno));
        goto fail_stage;
    }
    /* epoch 0's buckets, and room for a state's triples */
    if ((rc = linkooc_assign(x, 0, err, errlen)) < 0)
        goto fail;
    x->rfd = open(x->emb_path, O_RDWR | O_CLOEXEC);
    x->bfd = open(x->bkt_path, O_RDONLY | O_CLOEXEC);
    if (x->rfd < 0 || x->bfd < 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot open: %s", dir, strerror(errno));
        goto fail;
    }
    struct embbuf_params bp = {.parts = p, .part_bytes = x->part_bytes, .slots = c, .spare = 1, .depth = pp->depth,
                               .io_bytes = pp->io_bytes, .buffered = pp->buffered};
    if ((rc = embbuf_init(&x->buf, x->emb_path, &bp, err, errlen)) < 0)
        goto fail;
    return 0;
fail_stage:
    remove_layout(stage);
fail:
    link_model_free(m);
    linkooc_free(x, true);
    return rc;
}

void linkooc_free(struct linkooc *x, bool remove)
{
    embbuf_free(&x->buf);
    if (x->rfd >= 0)
        close(x->rfd);
    if (x->bfd >= 0)
        close(x->bfd);
    if (remove && x->dir[0])
        remove_layout(x->dir);
    po_plan_free(&x->plan);
    free(x->bucket_off);
    free(x->bucket_state);
    free(x->part);
    free(x->inbuf);
    free(x->rec);
    free(x->tri);
    free(x->perm);
    memset(x, 0, sizeof *x);
    x->rfd = x->bfd = -1;
}

/* ---- reading the table ---- */

static int table_read(struct linkooc *x, bool g2, uint64_t off, unsigned char *dst, size_t len, char *err,
                      size_t errlen)
{
    const uint64_t rb = (uint64_t)x->d * sizeof(float), total = x->nodes * rb;
    if (off > total || len > total - off)
        return sl_errf(err, errlen, -EINVAL, "%s: bytes %" PRIu64 "+%zu are past the table", x->emb_path, off, len);
    while (len) {
        uint64_t row = off / rb, in = off % rb, q = row / x->part_nodes, local = row % x->part_nodes;
        uint64_t avail = (x->part_nodes - local) * rb - in;
        size_t n = (size_t)SL_MIN((uint64_t)len, avail), got = 0;
        uint64_t at = q * x->part_bytes + (g2 ? x->part_nodes * rb : 0) + local * rb + in;
        int rc = sl_pread_full(x->rfd, dst, n, (off_t)at, &got);
        if (rc < 0 || got != n)
            return sl_errf(err, errlen, rc < 0 ? rc : -EIO, "%s: reading byte %" PRIu64 ": %s", x->emb_path, at,
                           rc < 0 ? strerror(-rc) : "the file ends early");
        off += n;
        dst += n;
        len -= n;
    }
    return 0;
}

int linkooc_rows(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen)
{
    struct linkooc *x = arg;
    const uint64_t rb = (uint64_t)x->d * sizeof(float);
    return table_read(x, false, first * rb, (unsigned char *)dst, (size_t)(count * rb), err, errlen);
}

int linkooc_table_bytes(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen)
{
    struct linkooc_view *v = arg;
    return table_read(v->x, v->g2, off, dst, len, err, errlen);
}

void *linkooc_g2_arg(struct linkooc *x) { return &x->view[1]; }

int linkooc_restore(struct linkooc *x, const float *emb, const float *g2, char *err, size_t errlen)
{
    const size_t rb = (size_t)x->d * sizeof(float);
    unsigned char *f = malloc(x->part_bytes);
    if (!f)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for one partition (%zu bytes)", x->part_bytes);
    int rc = 0;
    for (uint32_t q = 0; q < x->parts && rc == 0; q++) {
        uint64_t lo = (uint64_t)q * x->part_nodes, rows = lo >= x->nodes ? 0 : SL_MIN(x->part_nodes, x->nodes - lo);
        memset(f, 0, x->part_bytes);
        memcpy(f, emb + lo * x->d, rows * rb);
        memcpy(f + x->part_nodes * rb, g2 + lo * x->d, rows * rb);
        if ((rc = sl_pwrite_all(x->rfd, f, x->part_bytes, (off_t)(q * x->part_bytes))) < 0)
            sl_errf(err, errlen, rc, "%s: writing partition %" PRIu32 ": %s", x->emb_path, q, strerror(-rc));
    }
    free(f);
    if (rc == 0 && fdatasync(x->rfd) != 0) /* as linkooc_init: clean and out of the page cache */
        rc = sl_errf(err, errlen, -errno, "%s: cannot write: %s", x->emb_path, strerror(errno));
    if (rc == 0)
        posix_fadvise(x->rfd, 0, 0, POSIX_FADV_DONTNEED);
    return rc;
}

/* ---- an epoch ---- */

/* The triples of state s's buckets into x->tri, in split order. */
static int state_triples(struct linkooc *x, uint32_t s, uint64_t *n, char *err, size_t errlen)
{
    const uint64_t nb = (uint64_t)x->parts * x->parts;
    uint64_t at = 0;
    for (uint64_t b = 0; b < nb; b++) {
        if (x->bucket_state[b] != s)
            continue;
        uint64_t k = x->bucket_off[b + 1] - x->bucket_off[b], got = 0;
        if (!k)
            continue;
        size_t bytes = (size_t)(k * REC * sizeof *x->rec);
        int rc = sl_pread_full(x->bfd, x->rec + at * REC, bytes, (off_t)(x->bucket_off[b] * REC * sizeof *x->rec),
                               (size_t *)&got);
        if (rc < 0 || got != bytes)
            return sl_errf(err, errlen, rc < 0 ? rc : -EIO, "%s: reading bucket (%" PRIu64 ", %" PRIu64 "): %s",
                           x->bkt_path, b / x->parts, b % x->parts, rc < 0 ? strerror(-rc) : "the file ends early");
        at += k;
    }
    qsort(x->rec, at, REC * sizeof *x->rec, cmp_rec);
    for (uint64_t i = 0; i < at; i++)
        memcpy(x->tri + i * 3, x->rec + i * REC + 1, 3 * sizeof *x->tri);
    *n = at;
    return 0;
}

/* Asks the kernel to read state s's buckets ahead (they are read on the
 * training thread when s begins: small reads, one per bucket, that would
 * each wait for the disk). */
static void buckets_ahead(const struct linkooc *x, uint32_t s)
{
    const uint64_t nb = (uint64_t)x->parts * x->parts, rb = REC * sizeof(uint64_t);
    for (uint64_t b = 0; b < nb; b++)
        if (x->bucket_state[b] == s && x->bucket_off[b + 1] > x->bucket_off[b])
            posix_fadvise(x->bfd, (off_t)(x->bucket_off[b] * rb),
                          (off_t)((x->bucket_off[b + 1] - x->bucket_off[b]) * rb), POSIX_FADV_WILLNEED);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int linkooc_epoch(struct linkooc *x, struct link_trainer *t, uint32_t epoch, double *loss, char *err, size_t errlen)
{
    const struct po_plan *pl = &x->plan;
    int rc = 0;
    if (x->order != PO_ORDER_BETA && x->assigned != epoch && (rc = linkooc_assign(x, epoch, err, errlen)) < 0)
        return rc;
    struct embbuf_stats bs;
    embbuf_stats(&x->buf, &bs);
    x->loads_before = bs.loads;
    x->st.read_buckets_s = x->st.train_s = 0;
    t->slice_loss = 0;
    t->slice_batches = 0;
    uint64_t total = 0;
    for (uint32_t s = 0; s < pl->states; s++) {
        uint64_t n = 0;
        for (uint64_t b = 0; b < (uint64_t)x->parts * x->parts; b++)
            if (x->bucket_state[b] == s)
                n += x->bucket_off[b + 1] - x->bucket_off[b];
        total += (n + x->o.batch - 1) / x->o.batch;
    }
    for (uint32_t i = 0; i < pl->states && rc == 0; i++) {
        /* BETA: odd epochs walk the states backwards: an epoch then starts
         * in the state the one before ended in, and loads nothing to begin
         * (COMET's plan is new every epoch: forwards) */
        const bool back = epoch % 2 && x->order == PO_ORDER_BETA;
        const uint32_t s = back ? pl->states - 1 - i : i;
        if ((rc = embbuf_switch(&x->buf, pl, s, err, errlen)) < 0)
            break;
        if (i == 0)
            buckets_ahead(x, s);
        if (i + 1 < pl->states) {
            const uint32_t next = back ? s - 1 : s + 1;
            if ((rc = embbuf_prefetch(&x->buf, pl, next, err, errlen)) < 0)
                break;
            buckets_ahead(x, next);
        }
        double t0 = sl_now();
        uint64_t n = 0;
        if ((rc = state_triples(x, s, &n, err, errlen)) < 0)
            break;
        link_shuffle(x->perm, n, x->o.seed, epoch, s);
        uint32_t k = 0;
        for (uint32_t j = 0; j < pl->slots; j++)
            if (po_slot(pl, s, j) != PO_EMPTY)
                x->inbuf[k++] = po_slot(pl, s, j);
        qsort(x->inbuf, k, sizeof *x->inbuf, cmp_u32);
        uint64_t count = 0;
        for (uint32_t j = 0; j < k; j++) {
            uint32_t q = x->inbuf[j];
            uint64_t lo = (uint64_t)q * x->part_nodes;
            count += lo >= x->nodes ? 0 : SL_MIN(x->part_nodes, x->nodes - lo);
            x->part[q] = (float *)embbuf_frame(&x->buf, q);
        }
        /* the encoder samples among the buffer's nodes only (MariusGNN) */
        if (t->enc && (rc = linkenc_set_buffer(t->enc, x->part_nodes, x->parts, x->inbuf, k, err, errlen)) < 0)
            break;
        double t1 = sl_now();
        x->st.read_buckets_s += t1 - t0;
        struct link_rows rows = {.part = x->part, .part_nodes = x->part_nodes,
                                 .g2_off = (size_t)x->part_nodes * x->d};
        struct link_negs negs = {.count = count, .parts = x->inbuf, .nparts = k, .part_nodes = x->part_nodes,
                                 .nodes = x->nodes};
        struct link_slice sl = {.rows = &rows, .negs = &negs, .triples = x->tri, .n = n, .perm = x->perm,
                                .epoch = epoch, .first_batch = 0, .total_batches = total};
        if (n)
            rc = link_train_slice(t, &sl, err, errlen);
        x->st.train_s += sl_now() - t1;
        for (uint32_t j = 0; j < k; j++)
            x->part[x->inbuf[j]] = NULL;
    }
    if (rc == 0)
        rc = embbuf_flush(&x->buf, err, errlen);
    embbuf_stats(&x->buf, &x->st.buf);
    x->st.states = pl->states;
    x->st.swaps = x->st.buf.loads - x->loads_before;
    if (rc == 0)
        *loss = t->slice_batches ? t->slice_loss / (double)t->slice_batches : 0;
    return rc;
}
