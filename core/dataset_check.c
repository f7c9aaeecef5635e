/* dataset_check.c - the complete check of a dataset (dataset_check.h).
 *
 * Each check_* function makes one pass over its file through a hashing
 * scan, collects the offending elements of each kind (the first
 * DATASET_CHECK_SHOW, and how many in all) rather than stopping at the
 * first, and compares the hash with dataset.toml once the contents are
 * valid. Invalid content is -EBADMSG with the message in c->err. */
#include "core/dataset_check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset_scan.h"
#include "core/util.h"

#define CHUNK_ELEMS (128u * 1024)

/* The offending elements of one kind: the first few, written out. */
struct offenders {
    uint64_t n;
    char list[512];
};

static void offender_add(struct offenders *o, const char *fmt, ...) SL_PRINTF(2, 3);
static void offender_add(struct offenders *o, const char *fmt, ...)
{
    if (o->n++ >= DATASET_CHECK_SHOW)
        return;
    size_t at = strlen(o->list);
    if (at && at + 2 < sizeof o->list)
        at += (size_t)snprintf(o->list + at, sizeof o->list - at, ", ");
    va_list ap;
    va_start(ap, fmt);
    if (at < sizeof o->list)
        vsnprintf(o->list + at, sizeof o->list - at, fmt, ap);
    va_end(ap);
}

/* Appends "<what>: <list>[ and N more]" to msg, "; " first when msg holds
 * more than its first `base` bytes (the file name that starts it). */
static void offender_say(char *msg, size_t len, size_t base, const struct offenders *o, const char *what)
{
    if (!o->n)
        return;
    size_t at = strlen(msg);
    char more[64] = "";
    if (o->n > DATASET_CHECK_SHOW)
        snprintf(more, sizeof more, " and %" PRIu64 " more", o->n - DATASET_CHECK_SHOW);
    snprintf(msg + at, len - at, "%s%" PRIu64 " %s: %s%s", at > base ? "; " : "", o->n, what, o->list, more);
}

static int bad(char *err, size_t errlen, const char *fmt, ...) SL_PRINTF(3, 4);
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

static uint64_t load_id(const void *p, size_t i, bool wide)
{
    if (wide) {
        uint64_t v;
        memcpy(&v, (const char *)p + i * 8, 8);
        return v;
    }
    uint32_t v;
    memcpy(&v, (const char *)p + i * 4, 4);
    return v;
}

static void on_scan(void *arg, uint64_t pos)
{
    struct dataset_check *c = arg;
    if (c->progress)
        c->progress(c->arg, c->file, c->done_before + pos, dataset_check_bytes(c->m));
}

/* Opens file idx for a hashing scan that reports progress. */
static int open_file(struct dataset_check *c, int idx, struct dataset_scan *s, char *path, size_t plen, char *err,
                     size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (sl_path_join(path, plen, c->dir, c->m->f[idx].file) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", c->dir, c->m->f[idx].file);
    c->file = idx;
    memset(s, 0, sizeof *s);
    int rc = dataset_scan_open(s, path, true, err, errlen);
    if (rc == 0) {
        s->progress = on_scan;
        s->progress_arg = c;
    }
    return rc;
}

/* Finishes a scan and compares its checksum with dataset.toml. */
static int finish_hash(struct dataset_check *c, struct dataset_scan *s, int idx, char *err, size_t errlen)
{
    uint64_t h;
    int rc = dataset_scan_finish(s, &h, NULL, err, errlen);
    if (rc < 0)
        return rc;
    const struct dataset_file *f = &c->m->f[idx];
    if (h != f->xxh3)
        return bad(err, errlen,
                   "%s: checksum mismatch: dataset.toml records xxh3 %016" PRIx64 " but the file hashes to %016" PRIx64
                   "; the file was modified after gnnprep wrote it, regenerate the dataset",
                   s->path, f->xxh3, h);
    c->done_before += f->bytes;
    if (c->file_ok)
        c->file_ok(c->arg, idx, h);
    return 0;
}

static int check_indptr(struct dataset_check *c, char *err, size_t errlen)
{
    char p[4096];
    struct dataset_scan s;
    int rc = open_file(c, DATASET_INDPTR, &s, p, sizeof p, err, errlen);
    uint64_t prev = 0, n = c->m->nodes + 1, edges = c->m->edges;
    for (uint64_t i = 0; rc == 0 && i < n;) {
        size_t k = (size_t)SL_MIN(n - i, CHUNK_ELEMS);
        const uint64_t *v = dataset_scan_peek(&s, k * 8, &rc, err, errlen);
        if (!v)
            break;
        for (size_t j = 0; j < k; j++, i++) {
            uint64_t x;
            memcpy(&x, v + j, 8);
            if (i == 0 && x != 0) {
                rc = bad(err, errlen, "%s: indptr[0] = %" PRIu64 ", must be 0; the graph is corrupt", p, x);
                break;
            }
            if (x < prev) {
                rc = bad(err, errlen, "%s: indptr decreases at node %" PRIu64 " (%" PRIu64 " after %" PRIu64
                         "); the graph is corrupt", p, i - 1, x, prev);
                break;
            }
            if (x > edges) {
                rc = bad(err, errlen, "%s: indptr[%" PRIu64 "] = %" PRIu64 " exceeds the edge count %" PRIu64
                         "; the graph is corrupt", p, i, x, edges);
                break;
            }
            prev = x;
        }
    }
    if (rc == 0 && prev != edges)
        rc = bad(err, errlen, "%s: indptr ends at %" PRIu64 " but the dataset has %" PRIu64 " edges", p, prev, edges);
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_INDPTR, err, errlen);
    dataset_scan_free(&s);
    return rc;
}

static int check_indices(struct dataset_check *c, char *err, size_t errlen)
{
    char p[4096], pp[4096];
    struct dataset_scan s, ip;
    memset(&ip, 0, sizeof ip);
    int rc = open_file(c, DATASET_INDICES, &s, p, sizeof p, err, errlen);
    if (rc < 0)
        return rc;
    if (sl_path_join(pp, sizeof pp, c->dir, c->m->f[DATASET_INDPTR].file) != 0)
        rc = sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", c->dir);
    if (rc == 0)
        rc = dataset_scan_open(&ip, pp, false, err, errlen);
    bool wide = c->m->f[DATASET_INDICES].dtype == DTYPE_U64;
    size_t es = wide ? 8 : 4;
    uint64_t nodes = c->m->nodes, edges = c->m->edges;
    uint64_t node = 0, end = 0, prev = 0; /* edges of `node` end at `end` */
    struct offenders range = {0}, order = {0};
    if (rc == 0)
        rc = dataset_scan_read(&ip, &end, 8, err, errlen); /* indptr[0] == 0 */
    for (uint64_t e = 0; rc == 0 && e < edges;) {
        size_t k = (size_t)SL_MIN(edges - e, CHUNK_ELEMS);
        const void *v = dataset_scan_peek(&s, k * es, &rc, err, errlen);
        if (!v)
            break;
        for (size_t j = 0; j < k; j++, e++) {
            bool first = false;
            while (e >= end && node < nodes) {
                node++;
                if ((rc = dataset_scan_read(&ip, &end, 8, err, errlen)) < 0)
                    goto out;
                first = true;
            }
            uint64_t id = load_id(v, j, wide);
            if (id >= nodes)
                offender_add(&range, "edge %" PRIu64 " of node %" PRIu64 " has id %" PRIu64, e, node - 1, id);
            else if (!first && id < prev)
                offender_add(&order, "edge %" PRIu64 " of node %" PRIu64 " (%" PRIu64 " after %" PRIu64 ")", e,
                             node - 1, id, prev);
            prev = id;
        }
    }
    if (rc == 0 && (range.n || order.n)) {
        char what[64];
        snprintf(what, sizeof what, "in-neighbour ids outside [0, %" PRIu64 ")", nodes);
        size_t base = (size_t)snprintf(err, errlen, "%s: ", p);
        offender_say(err, errlen, base, &range, what);
        offender_say(err, errlen, base, &order, "in-neighbour lists not ascending");
        size_t at = strlen(err);
        snprintf(err + at, errlen - at, "; the graph is corrupt, regenerate the dataset");
        rc = -EBADMSG;
    }
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_INDICES, err, errlen);
out:
    dataset_scan_free(&ip);
    dataset_scan_free(&s);
    return rc;
}

/* Whether any of n f32 values (raw bits) is NaN or infinite: a loop
 * without branches, which the compiler can vectorise. */
static bool any_nonfinite_f32(const unsigned char *row, size_t n)
{
    uint32_t acc = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t x;
        memcpy(&x, row + 4 * j, 4);
        acc |= (uint32_t)((x & 0x7f800000u) == 0x7f800000u);
    }
    return acc != 0;
}

static bool any_nonfinite_f16(const unsigned char *row, size_t n)
{
    uint32_t acc = 0;
    for (size_t j = 0; j < n; j++) {
        uint16_t h;
        memcpy(&h, row + 2 * j, 2);
        acc |= (uint32_t)((h & 0x7c00u) == 0x7c00u);
    }
    return acc != 0;
}

static bool any_nonzero(const unsigned char *p, size_t n)
{
    unsigned char acc = 0;
    for (size_t j = 0; j < n; j++)
        acc |= p[j];
    return acc != 0;
}

/* Whether any value in `bytes` bytes of f32 (or f16) values is NaN or
 * infinite, eight bytes at a time: in each lane, y = (x & EXP) ^ EXP is
 * zero exactly when the exponent is all ones, and y + (top bit - 1) sets
 * the lane's top bit exactly when y is not zero (no carry crosses lanes:
 * y is at most EXP). A few integer operations per 8 bytes, so the check
 * keeps up with the reads. */
static bool block_any_nonfinite(const unsigned char *p, size_t bytes, bool half)
{
    const uint64_t exp = half ? 0x7c007c007c007c00ull : 0x7f8000007f800000ull;
    const uint64_t low = half ? 0x7fff7fff7fff7fffull : 0x7fffffff7fffffffull;
    const uint64_t top = half ? 0x8000800080008000ull : 0x8000000080000000ull;
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t y = (x & exp) ^ exp;
        acc |= ~(y + low) & top;
    }
    if (acc)
        return true;
    return half ? any_nonfinite_f16(p + i, (bytes - i) / 2) : any_nonfinite_f32(p + i, (bytes - i) / 4);
}

/* The first non-finite value of a row known to hold one. */
static size_t first_nonfinite(const unsigned char *row, size_t cols, bool half)
{
    for (size_t j = 0; j < cols; j++)
        if (half ? any_nonfinite_f16(row + 2 * j, 1) : any_nonfinite_f32(row + 4 * j, 1))
            return j;
    return cols;
}

static int check_features(struct dataset_check *c, char *err, size_t errlen)
{
    char p[4096];
    struct dataset_scan s;
    const struct dataset_file *f = &c->m->f[DATASET_FEATURES];
    int rc = open_file(c, DATASET_FEATURES, &s, p, sizeof p, err, errlen);
    bool half = f->dtype == DTYPE_F16;
    size_t rowb = (size_t)(f->cols * (half ? 2 : 4)), stride = (size_t)f->row_stride;
    struct offenders nonfinite = {0}, padding = {0};
    /* rows a peek takes at once: whole rows, at most a scan record */
    uint64_t per = SL_MAX(1, DATASET_SCAN_RECORD_MAX / stride);
    for (uint64_t r = 0; rc == 0 && r < f->rows;) {
        uint64_t k = SL_MIN(per, f->rows - r);
        const unsigned char *rows = dataset_scan_peek(&s, (size_t)k * stride, &rc, err, errlen);
        if (!rows)
            break;
        /* the whole block at once (padding is zero, so finite, unless
         * damaged: then the rows below tell which is which) */
        bool suspect = block_any_nonfinite(rows, (size_t)k * stride, half);
        for (uint64_t i = 0; i < k; i++, r++) {
            const unsigned char *row = rows + i * stride;
            if (suspect && (half ? any_nonfinite_f16(row, (size_t)f->cols) : any_nonfinite_f32(row, (size_t)f->cols)))
                offender_add(&nonfinite, "node %" PRIu64 " (feature %zu)", r,
                             first_nonfinite(row, (size_t)f->cols, half));
            if (rowb < stride && any_nonzero(row + rowb, stride - rowb))
                offender_add(&padding, "row %" PRIu64, r);
        }
    }
    /* the tail padding up to the file size is zero too */
    uint64_t tail_at = 0;
    while (rc == 0 && dataset_scan_pos(&s) < f->bytes) {
        const unsigned char *b = dataset_scan_peek(&s, 1, &rc, err, errlen);
        if (b && *b && !tail_at)
            tail_at = dataset_scan_pos(&s);
    }
    if (rc == 0 && (nonfinite.n || padding.n || tail_at)) {
        size_t base = (size_t)snprintf(err, errlen, "%s: ", p);
        offender_say(err, errlen, base, &nonfinite, "rows hold NaN or infinite values");
        offender_say(err, errlen, base, &padding, "rows have non-zero padding bytes");
        size_t at = strlen(err);
        if (tail_at) {
            snprintf(err + at, errlen - at, "%stail padding at byte %" PRIu64 " is not zero", at > base ? "; " : "",
                     tail_at - 1);
            at = strlen(err);
        }
        snprintf(err + at, errlen - at, "; %s",
                 nonfinite.n ? "clean the input features and make the dataset again"
                             : "the file is corrupt, regenerate the dataset");
        rc = -EBADMSG;
    }
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_FEATURES, err, errlen);
    dataset_scan_free(&s);
    return rc;
}

static int check_labels(struct dataset_check *c, int32_t **labels_out, char *err, size_t errlen)
{
    char p[4096];
    struct dataset_scan s;
    uint64_t nodes = c->m->nodes;
    /* labels are kept (4 bytes per node) to check that split nodes are labelled */
    int32_t *lab = malloc(nodes * sizeof *lab);
    if (!lab)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " labels", nodes);
    int rc = open_file(c, DATASET_LABELS, &s, p, sizeof p, err, errlen);
    if (rc == 0)
        rc = dataset_scan_read(&s, lab, nodes * 4, err, errlen);
    struct offenders range = {0};
    int32_t classes = (int32_t)c->m->classes;
    for (uint64_t i = 0; rc == 0 && i < nodes; i++)
        if (lab[i] < -1 || lab[i] >= classes)
            offender_add(&range, "node %" PRIu64 " (label %" PRId32 ")", i, lab[i]);
    if (rc == 0 && range.n) {
        char what[96];
        snprintf(what, sizeof what, "labels outside [-1, %" PRId32 ")", classes);
        size_t base = (size_t)snprintf(err, errlen, "%s: ", p);
        offender_say(err, errlen, base, &range, what);
        size_t at = strlen(err);
        snprintf(err + at, errlen - at,
                 "; %s/%s says classes = %" PRId32 ": if it was edited, restore it, else fix the labels", c->dir,
                 DATASET_META_FILE, classes);
        rc = -EBADMSG;
    }
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_LABELS, err, errlen);
    dataset_scan_free(&s);
    if (rc < 0)
        free(lab);
    else
        *labels_out = lab;
    return rc;
}

/* split map: 2 bits per node, 0 = in no split, else split index + 1 */
static int check_splits(struct dataset_check *c, const int32_t *lab, char *err, size_t errlen)
{
    uint64_t nodes = c->m->nodes;
    uint8_t *map = calloc(nodes / 4 + 1, 1);
    if (!map)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the split map");
    int rc = 0;
    bool wide = c->m->f[DATASET_TRAIN].dtype == DTYPE_U64;
    for (int sp = DATASET_TRAIN; rc == 0 && sp <= DATASET_TEST; sp++) {
        char p[4096];
        struct dataset_scan s;
        const struct dataset_file *f = &c->m->f[sp];
        rc = open_file(c, sp, &s, p, sizeof p, err, errlen);
        uint8_t tag = (uint8_t)(sp - DATASET_TRAIN + 1);
        struct offenders range = {0}, twice = {0}, shared[3] = {{0}}, unlabelled = {0};
        for (uint64_t i = 0; rc == 0 && i < f->rows;) {
            size_t k = (size_t)SL_MIN(f->rows - i, CHUNK_ELEMS);
            const void *v = dataset_scan_peek(&s, k * (wide ? 8 : 4), &rc, err, errlen);
            if (!v)
                break;
            for (size_t j = 0; j < k; j++, i++) {
                uint64_t id = load_id(v, j, wide);
                if (id >= nodes) {
                    offender_add(&range, "entry %" PRIu64 " (node %" PRIu64 ")", i, id);
                    continue;
                }
                uint8_t old = (map[id / 4] >> (2 * (id % 4))) & 3;
                if (old == tag) {
                    offender_add(&twice, "node %" PRIu64, id);
                    continue;
                }
                if (old) {
                    offender_add(&shared[old - 1], "node %" PRIu64, id);
                    continue;
                }
                if (lab[id] < 0)
                    offender_add(&unlabelled, "node %" PRIu64, id);
                map[id / 4] |= (uint8_t)(tag << (2 * (id % 4)));
            }
        }
        bool any = range.n || twice.n || unlabelled.n;
        for (int o = 0; o < 3; o++)
            any |= shared[o].n > 0;
        if (rc == 0 && any) {
            char what[4][128];
            snprintf(what[0], sizeof what[0], "ids outside [0, %" PRIu64 ")", nodes);
            size_t base = (size_t)snprintf(err, errlen, "%s: ", p);
            offender_say(err, errlen, base, &range, what[0]);
            offender_say(err, errlen, base, &twice, "nodes appear more than once");
            for (int o = 0; o < 3; o++) {
                snprintf(what[1 + o], sizeof what[1 + o], "nodes are also in %s (splits must be disjoint)",
                         c->m->f[DATASET_TRAIN + o].file);
                offender_say(err, errlen, base, &shared[o], what[1 + o]);
            }
            char unl[128];
            snprintf(unl, sizeof unl, "nodes have no label (-1 in %s)", c->m->f[DATASET_LABELS].file);
            offender_say(err, errlen, base, &unlabelled, unl);
            size_t at = strlen(err);
            snprintf(err + at, errlen - at, "; make the splits again (gnnprep import --train/--val/--test)");
            rc = -EBADMSG;
        }
        if (rc == 0)
            rc = finish_hash(c, &s, sp, err, errlen);
        dataset_scan_free(&s);
    }
    free(map);
    return rc;
}

uint64_t dataset_check_bytes(const struct dataset_meta *m)
{
    uint64_t n = 0;
    for (int i = 0; i < DATASET_FILES; i++)
        n += m->f[i].bytes;
    return n;
}

int dataset_check_run(struct dataset_check *c, const char *dir, const struct dataset_meta *m, char *err,
                      size_t errlen)
{
    char own[2048];
    if (!err || !errlen) { /* the messages are built in place */
        err = own;
        errlen = sizeof own;
    }
    c->dir = dir;
    c->m = m;
    c->done_before = 0;
    c->file = 0;
    int32_t *lab = NULL;
    int rc;
    if ((rc = check_indptr(c, err, errlen)) == 0 && (rc = check_indices(c, err, errlen)) == 0 &&
        (rc = check_features(c, err, errlen)) == 0 && (rc = check_labels(c, &lab, err, errlen)) == 0)
        rc = check_splits(c, lab, err, errlen);
    free(lab);
    return rc;
}
