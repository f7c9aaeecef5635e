/* splits.c - reading, checking and writing the importers' split id lists
 * (see splits.h). */
#include "splits.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/util.h"
#include "lines.h"
#include "npy.h"

#define SPLIT_CHUNK 65536u /* elements per npy read / write */

static int push(struct imp_split *s, uint64_t v, char *err, size_t errlen)
{
    if (s->n == s->cap) {
        uint64_t cap = s->cap ? s->cap * 2 : 4096;
        uint64_t *p = realloc(s->ids, cap * sizeof *p);
        if (!p)
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for %" PRIu64 " split ids", s->path, cap);
        s->ids = p;
        s->cap = cap;
    }
    s->ids[s->n++] = v;
    return 0;
}

static bool looks_npy(const char *path)
{
    size_t n = strlen(path);
    if (n >= 4 && !strcasecmp(path + n - 4, ".npy"))
        return true;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    unsigned char magic[6] = {0};
    size_t got = 0;
    sl_pread_full(fd, magic, sizeof magic, 0, &got);
    close(fd);
    return got == sizeof magic && !memcmp(magic, "\x93NUMPY", 6);
}

/* Parses a split line: 1 with *v set, 0 for a blank/comment line, or
 * -errno with a message. */
static int text_line(const char *path, uint64_t lineno, const char *line, uint64_t nodes, uint64_t *v, char *err,
                     size_t errlen)
{
    const char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '#')
        return 0;
    int code = sl_text_uint(&p, v);
    if (code != SL_NUM_OK)
        return sl_errf(err, errlen, code == SL_NUM_OVERFLOW ? -ERANGE : -EINVAL,
                       "%s:%" PRIu64 ": \"%.60s\" %s; each line must hold one node id", path, lineno, line,
                       sl_text_uint_error(code));
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p)
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": expected one node id per line, found \"%.60s\"", path,
                       lineno, line);
    if (*v >= nodes)
        return sl_errf(err, errlen, -ERANGE, "%s:%" PRIu64 ": node id %" PRIu64 " is out of range; the graph has %" PRIu64
                       " nodes (ids 0..%" PRIu64 ")", path, lineno, *v, nodes, nodes - 1);
    return 1;
}

static int read_text(struct imp_split *s, uint64_t nodes, char *err, size_t errlen)
{
    struct lines l;
    int rc = lines_open(&l, s->path, err, errlen);
    if (rc < 0)
        return rc;
    char *line;
    size_t len;
    while ((rc = lines_next(&l, &line, &len, err, errlen)) > 0) {
        uint64_t v;
        rc = text_line(s->path, l.lineno, line, nodes, &v, err, errlen);
        if (rc < 0)
            break;
        if (rc > 0 && s->n == nodes) { /* a split of more ids than nodes repeats one: no need to hold them all */
            rc = sl_errf(err, errlen, -EINVAL,
                         "%s:%" PRIu64 ": more ids than the graph's %" PRIu64 " nodes, so some node is listed twice",
                         s->path, l.lineno, nodes);
            break;
        }
        if (rc > 0 && (rc = push(s, v, err, errlen)) < 0)
            break;
    }
    lines_close(&l);
    return rc;
}

static int open_npy(struct npy *r, const char *path, char *err, size_t errlen)
{
    int rc = npy_open(r, path, err, errlen);
    if (rc < 0)
        return rc;
    const struct npy_hdr *h = &r->h;
    char sh[256];
    if (h->type == NPY_BOOL) /* a mask (PyG's train_mask): read_npy checks its length */
        rc = h->ndim == 1 ? 0
                          : sl_errf(err, errlen, -EINVAL, "%s: shape %s: a boolean mask must be 1-D, one element per "
                                    "node", path, npy_shape_str(h, sh, sizeof sh));
    else if (!npy_is_int(h->type))
        rc = sl_errf(err, errlen, -EINVAL, "%s: dtype %s: a split must be node ids (integers: int32 or int64) or a "
                     "boolean mask (bool, one per node)", path, npy_type_name(h->type));
    else if (h->ndim < 1 || h->ndim > 2 || (h->ndim == 2 && h->shape[1] != 1))
        rc = sl_errf(err, errlen, -EINVAL, "%s: shape %s: a split must be a 1-D array of node ids (or K x 1)", path,
                     npy_shape_str(h, sh, sizeof sh));
    if (rc < 0)
        npy_close(r);
    return rc;
}

static int read_npy(struct imp_split *s, uint64_t nodes, char *err, size_t errlen)
{
    struct npy r;
    int rc = open_npy(&r, s->path, err, errlen);
    if (rc < 0)
        return rc;
    void *raw = malloc(SPLIT_CHUNK * r.h.itemsize);
    int64_t *v = malloc(SPLIT_CHUNK * sizeof *v);
    if (!raw || !v) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", s->path);
        goto out;
    }
    if (r.h.type == NPY_BOOL) { /* a mask: the ids of its true elements */
        s->mask = true;
        if (r.h.count != nodes) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: a boolean mask of %" PRIu64 " elements; it needs one per node (%" PRIu64
                         ")", s->path, r.h.count, nodes);
            goto out;
        }
        for (uint64_t i = 0; i < r.h.count;) {
            size_t k = (size_t)SL_MIN((uint64_t)SPLIT_CHUNK, r.h.count - i);
            if ((rc = npy_read(&r, raw, k, err, errlen)) < 0)
                goto out;
            for (size_t j = 0; j < k; j++, i++) {
                unsigned char b = ((const unsigned char *)raw)[j];
                if (b > 1) {
                    rc = sl_errf(err, errlen, -EINVAL, "%s: element %" PRIu64 " of the mask is %u, not 0 or 1", s->path,
                                 i, b);
                    goto out;
                }
                if (b && (rc = push(s, i, err, errlen)) < 0)
                    goto out;
            }
        }
        rc = npy_end(&r, err, errlen);
        goto out;
    }
    for (uint64_t i = 0; i < r.h.count;) {
        size_t k = (size_t)SL_MIN((uint64_t)SPLIT_CHUNK, r.h.count - i);
        if ((rc = npy_read(&r, raw, k * r.h.itemsize, err, errlen)) < 0)
            goto out;
        npy_to_i64(r.h.type, raw, v, k);
        for (size_t j = 0; j < k; j++, i++) {
            if (v[j] < 0 || (uint64_t)v[j] >= nodes) {
                rc = sl_errf(err, errlen, v[j] < 0 ? -EINVAL : -ERANGE, "%s: element %" PRIu64 ": node id %" PRId64
                             " is out of range; the graph has %" PRIu64 " nodes (ids 0..%" PRIu64 ")", s->path, i,
                             v[j], nodes, nodes - 1);
                goto out;
            }
            if ((rc = push(s, (uint64_t)v[j], err, errlen)) < 0)
                goto out;
        }
    }
    rc = npy_end(&r, err, errlen);
out:
    free(raw);
    free(v);
    npy_close(&r);
    return rc;
}

int imp_split_read(struct imp_split *s, const char *path, const char *what, uint64_t nodes, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->what = what;
    s->npy = looks_npy(path);
    return s->npy ? read_npy(s, nodes, err, errlen) : read_text(s, nodes, err, errlen);
}

void imp_split_free(struct imp_split *s)
{
    if (!s)
        return;
    free(s->ids);
    s->ids = NULL;
    s->n = s->cap = 0;
}

/* Finds the first two places where id occurs in s's file, formatted as
 * "PATH:LINE" or "PATH: element I". Returns how many were found. */
static int locate(const struct imp_split *s, uint64_t id, char loc[2][4200])
{
    int found = 0;
    char dummy[256];
    if (s->mask) { /* a mask holds a node once: at its own index */
        snprintf(loc[0], 4200, "%s: element %" PRIu64 " (true in the mask)", s->path, id);
        return 1;
    }
    if (s->npy) {
        struct npy r;
        if (open_npy(&r, s->path, dummy, sizeof dummy) < 0)
            return 0;
        unsigned char raw[8];
        for (uint64_t i = 0; i < r.h.count && found < 2; i++) {
            int64_t v;
            if (npy_read(&r, raw, r.h.itemsize, dummy, sizeof dummy) < 0)
                break;
            npy_to_i64(r.h.type, raw, &v, 1);
            if ((uint64_t)v == id)
                snprintf(loc[found++], 4200, "%s: element %" PRIu64, s->path, i);
        }
        npy_close(&r);
        return found;
    }
    struct lines l;
    if (lines_open(&l, s->path, dummy, sizeof dummy) < 0)
        return 0;
    char *line;
    size_t len;
    while (found < 2 && lines_next(&l, &line, &len, dummy, sizeof dummy) > 0) {
        uint64_t v;
        if (text_line(s->path, l.lineno, line, UINT64_MAX, &v, dummy, sizeof dummy) == 1 && v == id)
            snprintf(loc[found++], 4200, "%s:%" PRIu64, s->path, l.lineno);
    }
    lines_close(&l);
    return found;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int imp_splits_check(struct imp_split *s, int count, char *err, size_t errlen)
{
    char la[2][4200], lb[2][4200];
    for (int k = 0; k < count; k++) {
        if (s[k].n > 1)
            qsort(s[k].ids, s[k].n, sizeof *s[k].ids, cmp_u64);
        for (uint64_t i = 1; i < s[k].n; i++) {
            if (s[k].ids[i] != s[k].ids[i - 1])
                continue;
            uint64_t id = s[k].ids[i];
            if (locate(&s[k], id, la) == 2)
                return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 " appears twice in the %s split (first at "
                               "%s); each node may be listed once", la[1], id, s[k].what, la[0]);
            return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 " appears twice in the %s split; each node may "
                           "be listed once", s[k].path, id, s[k].what);
        }
    }
    for (int a = 0; a < count; a++)
        for (int b = a + 1; b < count; b++) {
            uint64_t i = 0, j = 0;
            while (i < s[a].n && j < s[b].n) {
                if (s[a].ids[i] < s[b].ids[j]) {
                    i++;
                } else if (s[a].ids[i] > s[b].ids[j]) {
                    j++;
                } else {
                    uint64_t id = s[a].ids[i];
                    if (locate(&s[a], id, la) >= 1 && locate(&s[b], id, lb) >= 1)
                        return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 " is in both the %s split and the %s "
                                       "split (%s); the splits must be disjoint", lb[0], id, s[b].what, s[a].what,
                                       la[0]);
                    return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 " is also in %s; the splits must be "
                                   "disjoint", s[b].path, id, s[a].path);
                }
            }
        }
    return 0;
}

int imp_splits_labelled(const struct imp_split *s, int count, const uint8_t *labelled, const char *labels_name,
                        char *err, size_t errlen)
{
    char loc[2][4200];
    for (int k = 0; k < count; k++)
        for (uint64_t i = 0; i < s[k].n; i++) {
            uint64_t id = s[k].ids[i];
            if (labelled[id / 8] & (1u << (id % 8)))
                continue;
            if (locate(&s[k], id, loc) < 1)
                snprintf(loc[0], sizeof loc[0], "%s", s[k].path);
            return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 " of the %s split has no label in %s; every "
                           "node of a split must be labelled", loc[0], id, s[k].what, labels_name);
        }
    return 0;
}

int imp_split_write(const struct imp_split *s, uint64_t nodes, const char *path, struct dataset_file *f, char *err,
                    size_t errlen)
{
    enum dtype t = dtype_for_ids(nodes);
    struct file_writer w;
    int rc = file_writer_open(&w, path, err, errlen);
    if (rc < 0)
        return rc;
    uint32_t buf[SPLIT_CHUNK];
    for (uint64_t i = 0; i < s->n && rc == 0;) {
        size_t k = (size_t)SL_MIN((uint64_t)SPLIT_CHUNK, s->n - i);
        if (t == DTYPE_U32) {
            for (size_t j = 0; j < k; j++)
                buf[j] = (uint32_t)s->ids[i + j];
            rc = file_writer_write(&w, buf, k * sizeof *buf, err, errlen);
        } else {
            rc = file_writer_write(&w, s->ids + i, k * sizeof *s->ids, err, errlen);
        }
        i += k;
    }
    uint64_t bytes = 0, h = 0;
    if (rc == 0)
        rc = file_writer_close(&w, &bytes, &h, err, errlen);
    else
        file_writer_free(&w);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        dataset_file_set(f, base ? base + 1 : path, t, s->n, 1, bytes, h);
    }
    return rc;
}
