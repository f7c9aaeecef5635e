/* edgelist.c - SNAP text, raw binary and .npy edge lists read in batches
 * (see edgelist.h). */
#include "edgelist.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "lines.h"
#include "npy.h"

/* Raw bytes read per batch at most. */
#define EDGE_RAW_BYTES (4u << 20)

struct edges {
    enum edge_fmt fmt;
    uint64_t nodes;
    int64_t total;          /* -1 unknown (text) */
    uint64_t done;          /* edges handed out */
    bool finished;
    char name[1024];
    /* snap */
    struct lines lines;
    /* bin32/bin64 */
    int fd;
    size_t isz;             /* bytes per id */
    /* npy */
    struct npy a, b; /* a: sources (2xE) or pairs (Ex2); b: destinations */
    bool two_rows;
    unsigned char *raw;     /* EDGE_RAW_BYTES */
    int64_t *ids;           /* EDGE_RAW_BYTES / 4 ids */
};

static const char *const fmt_names[] = {"auto", "snap", "bin32", "bin64", "npy"};

int edge_fmt_parse(const char *s, enum edge_fmt *f)
{
    for (size_t i = 1; i < SL_ARRAY_LEN(fmt_names); i++)
        if (!strcmp(s, fmt_names[i])) {
            *f = (enum edge_fmt)i;
            return 0;
        }
    return -EINVAL;
}

const char *edge_fmt_name(enum edge_fmt f)
{
    return (unsigned)f < SL_ARRAY_LEN(fmt_names) ? fmt_names[f] : "?";
}

int64_t edges_total(const struct edges *e)
{
    return e->total;
}

enum edge_fmt edges_format(const struct edges *e)
{
    return e->fmt;
}

void edges_close(struct edges *e)
{
    if (!e)
        return;
    lines_close(&e->lines);
    if (e->fd >= 0)
        close(e->fd);
    npy_close(&e->a);
    npy_close(&e->b);
    free(e->raw);
    free(e->ids);
    free(e);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static int detect(const char *path, enum edge_fmt *f, char *err, size_t errlen)
{
    if (ends_with(path, ".npy")) {
        *f = EDGE_FMT_NPY;
        return 0;
    }
    if (ends_with(path, ".bin32") || ends_with(path, ".u32")) {
        *f = EDGE_FMT_BIN32;
        return 0;
    }
    if (ends_with(path, ".bin64") || ends_with(path, ".u64")) {
        *f = EDGE_FMT_BIN64;
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s; check the path", path, strerror(errno));
    unsigned char magic[6] = {0};
    size_t got = 0;
    sl_pread_full(fd, magic, sizeof magic, 0, &got);
    close(fd);
    if (got == sizeof magic && !memcmp(magic, "\x93NUMPY", 6)) {
        *f = EDGE_FMT_NPY;
        return 0;
    }
    if (got >= 4 && !memcmp(magic, "PK\x03\x04", 4))
        return sl_errf(err, errlen, -EINVAL, "%s: a zip archive (.npz?); save the edge array on its own with "
                       "numpy.save(\"edges.npy\", numpy.load(\"%s\")[\"edge_index\"])", path, path);
    if (ends_with(path, ".bin"))
        return sl_errf(err, errlen, -EINVAL, "%s: a binary edge list needs its id width: pass --edge-format bin32 "
                       "(u32 pairs) or --edge-format bin64 (u64 pairs)", path);
    *f = EDGE_FMT_SNAP;
    return 0;
}

static struct edges *edges_new(const char *name, uint64_t nodes)
{
    struct edges *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->fd = -1;
    e->nodes = nodes;
    e->total = -1;
    npy_init(&e->a);
    npy_init(&e->b);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

static int alloc_buffers(struct edges *e, char *err, size_t errlen)
{
    e->raw = malloc(EDGE_RAW_BYTES);
    e->ids = malloc(EDGE_RAW_BYTES / 4 * sizeof(int64_t));
    if (!e->raw || !e->ids)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for read buffers", e->name);
    return 0;
}

static int open_bin(struct edges *e, const char *path, char *err, size_t errlen)
{
    e->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (e->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s; check the path", path, strerror(errno));
    struct stat st;
    if (fstat(e->fd, &st) < 0 || !S_ISREG(st.st_mode))
        return sl_errf(err, errlen, -EINVAL, "%s: not a regular file", path);
    e->isz = e->fmt == EDGE_FMT_BIN32 ? 4 : 8;
    uint64_t size = (uint64_t)st.st_size;
    if (size % (2 * e->isz))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: %" PRIu64 " bytes is not a whole number of %s pairs (%zu bytes "
                       "each); the file is cut short, or the format is not %s (see --edge-format)",
                       path, size, e->isz == 4 ? "u32" : "u64", 2 * e->isz, edge_fmt_name(e->fmt));
    e->total = (int64_t)(size / (2 * e->isz));
    posix_fadvise(e->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return alloc_buffers(e, err, errlen);
}

/* Checks an opened npy edge array and positions the second cursor. */
static int setup_npy(struct edges *e, char *err, size_t errlen)
{
    const struct npy_hdr *h = &e->a.h;
    char sh[256];
    npy_shape_str(h, sh, sizeof sh);
    if (h->type != NPY_I32 && h->type != NPY_I64 && h->type != NPY_U32 && h->type != NPY_U64)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: dtype %s: edge ids must be int32 or int64 (or uint32/uint64); "
                       "convert with a.astype('int64')",
                       e->name, npy_type_name(h->type));
    if (h->ndim != 2 || (h->shape[0] != 2 && h->shape[1] != 2))
        return sl_errf(err, errlen, -EINVAL, "%s: shape %s: an edge list must be 2xE (sources, destinations) or Ex2 "
                       "(one edge per row)", e->name, sh);
    e->two_rows = h->shape[0] == 2;
    e->total = (int64_t)(e->two_rows ? h->shape[1] : h->shape[0]);
    e->isz = h->itemsize;
    return alloc_buffers(e, err, errlen);
}

int edges_open(struct edges **out, const char *path, enum edge_fmt fmt, uint64_t nodes, char *err, size_t errlen)
{
    *out = NULL;
    struct edges *e = edges_new(path, nodes);
    if (!e)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    int rc = 0;
    if (fmt == EDGE_FMT_AUTO && (rc = detect(path, &fmt, err, errlen)) < 0)
        goto fail;
    e->fmt = fmt;
    switch (fmt) {
    case EDGE_FMT_SNAP:
        rc = lines_open(&e->lines, path, err, errlen);
        break;
    case EDGE_FMT_BIN32:
    case EDGE_FMT_BIN64:
        rc = open_bin(e, path, err, errlen);
        break;
    case EDGE_FMT_NPY:
        if ((rc = npy_open(&e->a, path, err, errlen)) < 0 || (rc = setup_npy(e, err, errlen)) < 0)
            break;
        if (e->two_rows && (rc = npy_open(&e->b, path, err, errlen)) == 0)
            rc = npy_skip(&e->b, (uint64_t)e->total * e->isz, err, errlen);
        break;
    default:
        rc = sl_errf(err, errlen, -EINVAL, "%s: unknown edge list format", path);
    }
    if (rc < 0)
        goto fail;
    *out = e;
    return 0;
fail:
    edges_close(e);
    return rc;
}

int edges_open_npz(struct edges **out, const char *npz, const char *member, uint64_t nodes, char *err, size_t errlen)
{
    *out = NULL;
    char name[1024];
    snprintf(name, sizeof name, "%s: %s", npz, member);
    struct edges *e = edges_new(name, nodes);
    if (!e)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", name);
    e->fmt = EDGE_FMT_NPY;
    int rc;
    if ((rc = npy_open_npz(&e->a, npz, member, false, err, errlen)) < 0 || (rc = setup_npy(e, err, errlen)) < 0)
        goto fail;
    if (e->two_rows) {
        if ((rc = npy_open_npz(&e->b, npz, member, false, err, errlen)) < 0)
            goto fail;
        if ((rc = npy_skip(&e->b, (uint64_t)e->total * e->isz, err, errlen)) < 0)
            goto fail;
    }
    *out = e;
    return 0;
fail:
    edges_close(e);
    return rc;
}

static int out_of_range(const struct edges *e, uint64_t edge, uint64_t id, char *err, size_t errlen)
{
    return sl_errf(err, errlen, -ERANGE, "%s: edge %" PRIu64 ": node id %" PRIu64 " is out of range; the graph has "
                   "%" PRIu64 " nodes (ids 0..%" PRIu64 ")", e->name, edge, id, e->nodes, e->nodes - 1);
}

/* Checks ids[0..n) of edges starting at position `first` (stride 1 or 2
 * for interleaved pairs) and copies them to out. */
static int take_ids(const struct edges *e, const int64_t *ids, size_t stride, size_t n, uint64_t first, uint64_t *out,
                    char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = ids[i * stride];
        if (v < 0)
            return sl_errf(err, errlen, -EINVAL, "%s: edge %" PRIu64 ": negative node id %" PRId64
                           "; ids are 0..nodes-1", e->name, first + i, v);
        if ((uint64_t)v >= e->nodes)
            return out_of_range(e, first + i, (uint64_t)v, err, errlen);
        out[i] = (uint64_t)v;
    }
    return 0;
}

static int read_npy(struct edges *e, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err, size_t errlen)
{
    uint64_t left = (uint64_t)e->total - e->done;
    size_t per = EDGE_RAW_BYTES / (2 * e->isz); /* edges per raw buffer */
    size_t k = (size_t)SL_MIN(SL_MIN(left, (uint64_t)cap), (uint64_t)per);
    int rc;
    if (e->two_rows) {
        for (int half = 0; half < 2; half++) {
            struct npy *r = half ? &e->b : &e->a;
            if ((rc = npy_read(r, e->raw, k * e->isz, err, errlen)) < 0)
                return rc;
            npy_to_i64(r->h.type, e->raw, e->ids, k);
            if ((rc = take_ids(e, e->ids, 1, k, e->done, half ? dst : src, err, errlen)) < 0)
                return rc;
        }
    } else {
        if ((rc = npy_read(&e->a, e->raw, 2 * k * e->isz, err, errlen)) < 0)
            return rc;
        npy_to_i64(e->a.h.type, e->raw, e->ids, 2 * k);
        if ((rc = take_ids(e, e->ids, 2, k, e->done, src, err, errlen)) < 0 ||
            (rc = take_ids(e, e->ids + 1, 2, k, e->done, dst, err, errlen)) < 0)
            return rc;
    }
    *n = k;
    return 0;
}

static int read_bin(struct edges *e, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err, size_t errlen)
{
    uint64_t left = (uint64_t)e->total - e->done;
    size_t per = EDGE_RAW_BYTES / (2 * e->isz);
    size_t k = (size_t)SL_MIN(SL_MIN(left, (uint64_t)cap), (uint64_t)per);
    size_t got = 0;
    off_t off = (off_t)(e->done * 2 * e->isz);
    int rc = sl_pread_full(e->fd, e->raw, k * 2 * e->isz, off, &got);
    if (rc == -EIO && got < k * 2 * e->isz)
        return sl_errf(err, errlen, -EINVAL, "%s: the file shrank while being read (at byte %" PRIu64 ")", e->name,
                       (uint64_t)off + got);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "%s: read failed: %s", e->name, strerror(-rc));
    for (size_t i = 0; i < k; i++) {
        uint64_t s, d;
        if (e->isz == 4) {
            uint32_t p[2];
            memcpy(p, e->raw + i * 8, 8);
            s = p[0];
            d = p[1];
        } else {
            memcpy(&s, e->raw + i * 16, 8);
            memcpy(&d, e->raw + i * 16 + 8, 8);
        }
        if (s >= e->nodes || d >= e->nodes)
            return out_of_range(e, e->done + i, s >= e->nodes ? s : d, err, errlen);
        src[i] = s;
        dst[i] = d;
    }
    *n = k;
    return 0;
}

/* Parses one SNAP line; 1 = an edge, 0 = comment/blank. */
static int snap_line(struct edges *e, const char *line, uint64_t *s, uint64_t *d, char *err, size_t errlen)
{
    const char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '#')
        return 0;
    uint64_t v[2];
    for (int col = 0; col < 2; col++) {
        if (col) {
            if (*p != ' ' && *p != '\t') {
                if (!*p)
                    return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": only one column; each line must hold two "
                                   "node ids, SRC DST, separated by spaces or tabs", e->name, e->lines.lineno);
                goto junk;
            }
            while (*p == ' ' || *p == '\t')
                p++;
            if (!*p)
                return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": only one column; each line must hold two "
                               "node ids, SRC DST, separated by spaces or tabs", e->name, e->lines.lineno);
        }
        int code = sl_text_uint(&p, &v[col]);
        if (code != SL_NUM_OK)
            return sl_errf(err, errlen, code == SL_NUM_NONE ? -EINVAL : code == SL_NUM_NEGATIVE ? -EINVAL : -ERANGE,
                           "%s:%" PRIu64 ": column %d of \"%.60s\" %s; each line must be SRC DST", e->name,
                           e->lines.lineno, col + 1, line, sl_text_uint_error(code));
        if (v[col] >= e->nodes)
            return sl_errf(err, errlen, -ERANGE, "%s:%" PRIu64 ": node id %" PRIu64 " is out of range; the graph has "
                           "%" PRIu64 " nodes (ids 0..%" PRIu64 ")", e->name, e->lines.lineno, v[col], e->nodes,
                           e->nodes - 1);
    }
    if (*p && *p != ' ' && *p != '\t')
        goto junk;
    *s = v[0];
    *d = v[1];
    return 1;
junk:
    return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": expected two non-negative integer node ids separated by "
                   "spaces or tabs, found \"%.60s\"", e->name, e->lines.lineno, line);
}

static int read_snap(struct edges *e, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err, size_t errlen)
{
    size_t k = 0;
    while (k < cap) {
        char *line;
        size_t len;
        int rc = lines_next(&e->lines, &line, &len, err, errlen);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        rc = snap_line(e, line, &src[k], &dst[k], err, errlen);
        if (rc < 0)
            return rc;
        k += (size_t)rc;
    }
    *n = k;
    return 0;
}

int edges_read(struct edges *e, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err, size_t errlen)
{
    *n = 0;
    if (e->finished)
        return 0;
    int rc;
    if (e->fmt == EDGE_FMT_SNAP) {
        rc = read_snap(e, src, dst, cap, n, err, errlen);
    } else if (e->total >= 0 && e->done == (uint64_t)e->total) {
        rc = 0;
        if (e->fmt == EDGE_FMT_NPY)
            rc = npy_end(e->two_rows ? &e->b : &e->a, err, errlen);
    } else if (e->fmt == EDGE_FMT_NPY) {
        rc = read_npy(e, src, dst, cap, n, err, errlen);
    } else {
        rc = read_bin(e, src, dst, cap, n, err, errlen);
    }
    if (rc < 0)
        return rc;
    e->done += *n;
    if (*n == 0)
        e->finished = true;
    return 0;
}
