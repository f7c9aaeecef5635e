/* dataset.c - dataset.toml writing/reading, the hashing writer, staged
 * dataset directories and feature-row layout (see dataset.h). */
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "toml.h"
#include "util.h"

const char *const dataset_file_key[DATASET_FILES] = {
    "indptr", "indices", "features", "labels", "train", "val", "test",
};

static const struct {
    enum dtype t;
    const char *name;
    size_t size;
} dtypes[] = {
    {DTYPE_U32, "u32", 4}, {DTYPE_U64, "u64", 8}, {DTYPE_I32, "i32", 4},
    {DTYPE_I64, "i64", 8}, {DTYPE_F32, "f32", 4}, {DTYPE_F16, "f16", 2},
};

const char *dtype_name(enum dtype t)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].t == t)
            return dtypes[i].name;
    return "none";
}

enum dtype dtype_parse(const char *s)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(dtypes); i++)
        if (!strcmp(dtypes[i].name, s))
            return dtypes[i].t;
    return DTYPE_NONE;
}

size_t dtype_size(enum dtype t)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].t == t)
            return dtypes[i].size;
    return 0;
}

uint64_t dataset_row_stride(uint64_t row_bytes, uint64_t align)
{
    if (row_bytes == 0)
        return 0;
    if (row_bytes > align)
        return sl_round_up(row_bytes, align);
    uint64_t s = 1;
    while (s < row_bytes)
        s <<= 1;
    return s;
}

void dataset_file_set(struct dataset_file *f, const char *file, enum dtype t, uint64_t rows, uint64_t cols,
                      uint64_t bytes, uint64_t xxh3)
{
    memset(f, 0, sizeof *f);
    snprintf(f->file, sizeof f->file, "%s", file);
    f->dtype = t;
    f->rows = rows;
    f->cols = cols;
    f->row_stride = cols * dtype_size(t);
    f->bytes = bytes;
    f->xxh3 = xxh3;
    f->present = true;
}

/* ------------------------------------------------------------------ */
/* writer */

#define FILE_WRITER_BUF (4u << 20)

int file_writer_open(struct file_writer *w, const char *path, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot create: %s", path, strerror(errno));
    w->cap = FILE_WRITER_BUF;
    w->buf = malloc(w->cap);
    w->xxh = XXH3_createState();
    if (!w->buf || !w->xxh) {
        file_writer_free(w);
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for the write buffer", path);
    }
    XXH3_64bits_reset(w->xxh);
    return 0;
}

static int writer_flush(struct file_writer *w, char *err, size_t errlen)
{
    if (!w->len)
        return 0;
    XXH3_64bits_update(w->xxh, w->buf, w->len);
    int rc = sl_write_all(w->fd, w->buf, w->len);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "%s: write failed: %s%s", w->path, strerror(-rc),
                       rc == -ENOSPC ? " (free some space or write elsewhere)" : "");
    w->len = 0;
    return 0;
}

int file_writer_write(struct file_writer *w, const void *p, size_t n, char *err, size_t errlen)
{
    const char *s = p;
    w->bytes += n;
    while (n) {
        if (w->len == w->cap) {
            int rc = writer_flush(w, err, errlen);
            if (rc < 0)
                return rc;
        }
        size_t k = SL_MIN(n, w->cap - w->len);
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        s += k;
        n -= k;
    }
    return 0;
}

int file_writer_zero(struct file_writer *w, size_t n, char *err, size_t errlen)
{
    static const char zero[4096];
    while (n) {
        size_t k = SL_MIN(n, sizeof zero);
        int rc = file_writer_write(w, zero, k, err, errlen);
        if (rc < 0)
            return rc;
        n -= k;
    }
    return 0;
}

int file_writer_close(struct file_writer *w, uint64_t *bytes, uint64_t *xxh3, char *err, size_t errlen)
{
    int rc = writer_flush(w, err, errlen);
    if (rc == 0 && fsync(w->fd) < 0)
        rc = sl_errf(err, errlen, -errno, "%s: fsync failed: %s", w->path, strerror(errno));
    if (rc == 0) {
        if (bytes)
            *bytes = w->bytes;
        if (xxh3)
            *xxh3 = XXH3_64bits_digest(w->xxh);
        if (close(w->fd) < 0)
            rc = sl_errf(err, errlen, -errno, "%s: close failed: %s", w->path, strerror(errno));
        w->fd = -1;
    }
    file_writer_free(w);
    return rc;
}

void file_writer_free(struct file_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    free(w->buf);
    w->buf = NULL;
    if (w->xxh)
        XXH3_freeState(w->xxh);
    w->xxh = NULL;
}

int file_xxh3(const char *path, uint64_t *hash, uint64_t *bytes, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    size_t cap = 8u << 20;
    char *buf = malloc(cap);
    XXH3_state_t *st = XXH3_createState();
    int rc = 0;
    uint64_t total = 0;
    if (!buf || !st) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    XXH3_64bits_reset(st);
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = sl_errf(err, errlen, -errno, "%s: read failed at byte %" PRIu64 ": %s", path, total,
                         strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        XXH3_64bits_update(st, buf, (size_t)r);
        total += (uint64_t)r;
    }
    *hash = XXH3_64bits_digest(st);
    if (bytes)
        *bytes = total;
out:
    if (st)
        XXH3_freeState(st);
    free(buf);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------ */
/* f16 */

uint16_t half_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* inf or nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* may carry into the exponent, up to inf: correct */
    return (uint16_t)(sign | h);
}

float half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ------------------------------------------------------------------ */
/* feature writer */

int feat_writer_open(struct feat_writer *fw, const char *path, enum dtype dtype, uint64_t dim, char *err, size_t errlen)
{
    memset(fw, 0, sizeof *fw);
    fw->w.fd = -1;
    if (dtype != DTYPE_F32 && dtype != DTYPE_F16)
        return sl_errf(err, errlen, -EINVAL, "features must be f32 or f16, not %s", dtype_name(dtype));
    if (dim == 0 || dim > (1u << 20))
        return sl_errf(err, errlen, -EINVAL, "feature dimension %" PRIu64 " is outside 1..1048576", dim);
    fw->dtype = dtype;
    fw->dim = dim;
    fw->row_bytes = dim * dtype_size(dtype);
    fw->stride = dataset_row_stride(fw->row_bytes, DATASET_FEAT_ALIGN);
    fw->row = calloc(1, fw->stride);
    if (!fw->row)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for a feature row");
    int rc = file_writer_open(&fw->w, path, err, errlen);
    if (rc < 0) {
        feat_writer_free(fw);
        return rc;
    }
    return 0;
}

int feat_writer_put(struct feat_writer *fw, const float *x, char *err, size_t errlen)
{
    if (fw->dtype == DTYPE_F32) {
        memcpy(fw->row, x, fw->row_bytes);
    } else {
        uint16_t *h = (uint16_t *)fw->row;
        for (uint64_t i = 0; i < fw->dim; i++)
            h[i] = half_from_f32(x[i]);
    }
    fw->rows++;
    return file_writer_write(&fw->w, fw->row, fw->stride, err, errlen);
}

int feat_writer_put_rows(struct feat_writer *fw, const void *rows, uint64_t n, char *err, size_t errlen)
{
    fw->rows += n;
    return file_writer_write(&fw->w, rows, n * fw->stride, err, errlen);
}

int feat_writer_close(struct feat_writer *fw, struct dataset_file *f, char *err, size_t errlen)
{
    uint64_t pad = sl_round_up(fw->w.bytes, DATASET_FEAT_PAD) - fw->w.bytes;
    int rc = file_writer_zero(&fw->w, pad, err, errlen);
    uint64_t bytes = 0, h = 0;
    if (rc == 0)
        rc = file_writer_close(&fw->w, &bytes, &h, err, errlen);
    if (rc == 0) {
        char name[sizeof fw->w.path];
        memcpy(name, fw->w.path, sizeof name);
        dataset_file_set(f, basename(name), fw->dtype, fw->rows, fw->dim, bytes, h);
        f->row_stride = fw->stride;
    }
    feat_writer_free(fw);
    return rc;
}

void feat_writer_free(struct feat_writer *fw)
{
    if (!fw)
        return;
    file_writer_free(&fw->w);
    free(fw->row);
    fw->row = NULL;
}

/* ------------------------------------------------------------------ */
/* dataset.toml */

int dataset_meta_write(const char *dir, const struct dataset_meta *m, char *err, size_t errlen)
{
    char path[4096], tmp[4200];
    if (sl_path_join(path, sizeof path, dir, DATASET_META_FILE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    FILE *f;
    int rc = sl_atomic_begin(&f, path, tmp, sizeof tmp, err, errlen);
    if (rc < 0)
        return rc;
    fprintf(f, "# Sluice dataset (docs/format.md). Written by gnnprep; checked by `gnnprep check`.\n");
    fprintf(f, "format = \"%s\"\nversion = %u\n", DATASET_FORMAT, DATASET_VERSION);
    fprintf(f, "nodes = %" PRIu64 "\nedges = %" PRIu64 "\nfeat_dim = %" PRIu64 "\nclasses = %u\n",
            m->nodes, m->edges, m->feat_dim, m->classes);
    fprintf(f, "feat_align = %" PRIu64 "\nsource = ", m->feat_align);
    toml_write_string(f, m->source);
    fputc('\n', f);
    for (int i = 0; i < DATASET_FILES; i++) {
        const struct dataset_file *d = &m->f[i];
        if (!d->present)
            continue;
        fprintf(f, "\n[%s]\nfile = ", dataset_file_key[i]);
        toml_write_string(f, d->file);
        fprintf(f, "\ndtype = \"%s\"\n", dtype_name(d->dtype));
        if (i == DATASET_FEATURES)
            fprintf(f, "shape = [%" PRIu64 ", %" PRIu64 "]\nrow_stride = %" PRIu64 "\n", d->rows, d->cols,
                    d->row_stride);
        else
            fprintf(f, "shape = [%" PRIu64 "]\n", d->rows);
        fprintf(f, "bytes = %" PRIu64 "\nxxh3 = \"%016" PRIx64 "\"\n", d->bytes, d->xxh3);
    }
    return sl_atomic_commit(f, tmp, path, err, errlen);
}

/* Helpers for dataset_meta_read: each reports "PATH: field: problem". */
#define MISSING_HINT "the dataset is incomplete, regenerate it with gnnprep"
static int need_uint(const char *path, const struct toml_value *tab, const char *tname, const char *key, uint64_t *out,
                     char *err, size_t errlen)
{
    return toml_need_uint(tab, path, tname, key, MISSING_HINT, out, err, errlen);
}

static int need_str(const char *path, const struct toml_value *tab, const char *tname, const char *key,
                    const char **out, char *err, size_t errlen)
{
    return toml_need_str(tab, path, tname, key, MISSING_HINT, out, err, errlen);
}

static int read_dsfile(const char *path, const struct toml_value *root, int idx, struct dataset_file *d, char *err,
                       size_t errlen)
{
    const char *key = dataset_file_key[idx];
    const struct toml_value *t = toml_get(root, key);
    memset(d, 0, sizeof *d);
    if (!t)
        return sl_errf(err, errlen, -EINVAL, "%s: the [%s] table is missing; the dataset is incomplete", path, key);
    if (t->type != TOML_TABLE)
        return sl_errf(err, errlen, -EINVAL, "%s:%d:%d: %s must be a table", path, t->line, t->col, key);
    const char *file, *dtype, *hash;
    int rc;
    if ((rc = need_str(path, t, key, "file", &file, err, errlen)) < 0 ||
        (rc = need_str(path, t, key, "dtype", &dtype, err, errlen)) < 0 ||
        (rc = need_uint(path, t, key, "bytes", &d->bytes, err, errlen)) < 0 ||
        (rc = need_str(path, t, key, "xxh3", &hash, err, errlen)) < 0)
        return rc;
    if (!*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..") || strlen(file) >= sizeof d->file)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.file = \"%s\" must be a plain file name inside the dataset directory",
                       path, key, file);
    snprintf(d->file, sizeof d->file, "%s", file);
    d->dtype = dtype_parse(dtype);
    if (d->dtype == DTYPE_NONE)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.dtype = \"%s\" is not one of u32 u64 i32 i64 f32 f16", path, key, dtype);
    char *end;
    errno = 0;
    unsigned long long h = strtoull(hash, &end, 16);
    if (strlen(hash) != 16 || *end || errno)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.xxh3 = \"%s\" must be 16 hex digits", path, key, hash);
    d->xxh3 = h;
    const struct toml_value *shape = toml_get(t, "shape");
    size_t want = idx == DATASET_FEATURES ? 2 : 1;
    if (!shape || shape->type != TOML_ARRAY || shape->u.arr.n != want)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.shape must be an array of %zu non-negative integers", path, key, want);
    for (size_t i = 0; i < want; i++) {
        const struct toml_value *e = shape->u.arr.v[i];
        if (e->type != TOML_INT || e->u.i < 0)
            return sl_errf(err, errlen, -EINVAL, "%s:%d:%d: %s.shape must hold non-negative integers", path, e->line,
                           e->col, key);
    }
    d->rows = (uint64_t)shape->u.arr.v[0]->u.i;
    d->cols = want == 2 ? (uint64_t)shape->u.arr.v[1]->u.i : 1;
    uint64_t esz = dtype_size(d->dtype), rowb;
    if (sl_mul_ovf(d->cols, esz, &rowb))
        return sl_errf(err, errlen, -EINVAL, "%s: %s.shape overflows", path, key);
    if (idx == DATASET_FEATURES) {
        if ((rc = need_uint(path, t, key, "row_stride", &d->row_stride, err, errlen)) < 0)
            return rc;
        if (d->row_stride < rowb)
            return sl_errf(err, errlen, -EINVAL, "%s: features.row_stride %" PRIu64 " is smaller than a row (%" PRIu64 " bytes)",
                           path, d->row_stride, rowb);
    } else {
        d->row_stride = rowb;
    }
    /* rows x stride, padded for features, must be a possible file size
     * (at most INT64_MAX: every offset into it then fits off_t); checked
     * before rounding up, which would wrap past 2^64 - DATASET_FEAT_PAD */
    uint64_t data;
    if (sl_mul_ovf(d->rows, d->row_stride, &data) || data > (uint64_t)INT64_MAX - (DATASET_FEAT_PAD - 1))
        return sl_errf(err, errlen, -EINVAL, "%s: %s: shape times stride overflows the largest possible file", path,
                       key);
    uint64_t expect = idx == DATASET_FEATURES ? sl_round_up(data, DATASET_FEAT_PAD) : data;
    if (d->bytes != expect)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.bytes = %" PRIu64 " but shape and dtype make %" PRIu64 " bytes",
                       path, key, d->bytes, expect);
    d->present = true;
    return 0;
}

/* Keys dataset.toml may hold (dataset_meta_write writes them all); any
 * other is refused, naming it: a misspelt key would otherwise be ignored
 * while the value meant was not there. Extend these lists with the
 * writer. */
static const char *const top_keys[] = {"format", "version", "nodes", "edges", "feat_dim", "classes", "feat_align",
                                       "source"};
static const char *const file_keys[] = {"file", "dtype", "shape", "row_stride", "bytes", "xxh3"};

static bool key_in(const char *k, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, keys[i]))
            return true;
    return false;
}

static int unknown_keys(const char *path, const struct toml_value *root, char *err, size_t errlen)
{
    for (size_t i = 0; i < root->u.tab.n; i++) {
        const char *k = root->u.tab.kv[i].key;
        const struct toml_value *v = root->u.tab.kv[i].val;
        int table = -1;
        for (int f = 0; f < DATASET_FILES; f++)
            if (!strcmp(k, dataset_file_key[f]))
                table = f;
        if (table < 0) {
            if (!key_in(k, top_keys, SL_ARRAY_LEN(top_keys)))
                return sl_errf(err, errlen, -EINVAL,
                               "%s:%d:%d: unknown key %s (docs/format.md lists every key of dataset.toml); remove "
                               "it, or check its spelling",
                               path, v->line, v->col, k);
            continue;
        }
        if (v->type != TOML_TABLE)
            continue; /* read_dsfile says what is wrong */
        for (size_t j = 0; j < v->u.tab.n; j++) {
            const char *fk = v->u.tab.kv[j].key;
            const struct toml_value *fv = v->u.tab.kv[j].val;
            if (!key_in(fk, file_keys, SL_ARRAY_LEN(file_keys)) || (!strcmp(fk, "row_stride") && table != DATASET_FEATURES))
                return sl_errf(err, errlen, -EINVAL,
                               "%s:%d:%d: unknown key %s.%s (docs/format.md lists every key of dataset.toml); "
                               "remove it, or check its spelling",
                               path, fv->line, fv->col, k, fk);
        }
    }
    return 0;
}

int dataset_meta_parse(const char *text, size_t len, const char *path, struct dataset_meta *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    char perr[1024];
    struct toml_value *root = toml_parse(text, len, path, perr, sizeof perr);
    if (!root)
        return sl_errf(err, errlen, -EINVAL, "%s", perr);
    int rc;
    const char *fmt = "", *src = "";
    uint64_t version = 0, classes = 0;
    if ((rc = need_str(path, root, NULL, "format", &fmt, err, errlen)) < 0)
        goto out;
    if (!strcmp(fmt, "sluice-link-dataset")) { /* LINK_FORMAT, core/linkdata.h */
        rc = sl_errf(err, errlen, -EMEDIUMTYPE,
                     "%s: a link-prediction dataset (format = \"%s\": triples, no features or labels); this needs a "
                     "node-classification dataset (gnnprep synth, import or import-ogb)",
                     path, fmt);
        goto out;
    }
    if (strcmp(fmt, DATASET_FORMAT)) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: format = \"%s\", expected \"%s\"", path, fmt, DATASET_FORMAT);
        goto out;
    }
    if ((rc = need_uint(path, root, NULL, "version", &version, err, errlen)) < 0)
        goto out;
    if (version != DATASET_VERSION) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s: format version %" PRIu64 " is not supported (this build reads %d); "
                     "convert it again with this gnnprep",
                     path, version, DATASET_VERSION);
        goto out;
    }
    m->version = (uint32_t)version;
    if ((rc = need_uint(path, root, NULL, "nodes", &m->nodes, err, errlen)) < 0 ||
        (rc = need_uint(path, root, NULL, "edges", &m->edges, err, errlen)) < 0 ||
        (rc = need_uint(path, root, NULL, "feat_dim", &m->feat_dim, err, errlen)) < 0 ||
        (rc = need_uint(path, root, NULL, "classes", &classes, err, errlen)) < 0 ||
        (rc = need_uint(path, root, NULL, "feat_align", &m->feat_align, err, errlen)) < 0)
        goto out;
    if (toml_get(root, "source") && (rc = need_str(path, root, NULL, "source", &src, err, errlen)) < 0)
        goto out;
    snprintf(m->source, sizeof m->source, "%s", src);
    rc = -EINVAL;
    if (m->nodes == 0) {
        sl_errf(err, errlen, rc, "%s: nodes = 0; a dataset needs at least one node", path);
        goto out;
    }
    if (classes == 0 || classes > INT32_MAX) {
        sl_errf(err, errlen, rc, "%s: classes = %" PRIu64 " must be in 1..%d", path, classes, INT32_MAX);
        goto out;
    }
    m->classes = (uint32_t)classes;
    /* the model's input size is 32-bit (ops/model.h); a wider feat_dim
     * would be truncated, not refused, further on */
    if (m->feat_dim == 0 || m->feat_dim > INT32_MAX) {
        sl_errf(err, errlen, rc, "%s: feat_dim = %" PRIu64 " must be in 1..%d", path, m->feat_dim, INT32_MAX);
        goto out;
    }
    if (m->feat_align == 0 || (m->feat_align & (m->feat_align - 1)) || m->feat_align > DATASET_FEAT_PAD) {
        sl_errf(err, errlen, rc, "%s: feat_align = %" PRIu64 " must be a power of two up to %u", path, m->feat_align,
                DATASET_FEAT_PAD);
        goto out;
    }
    for (int i = 0; i < DATASET_FILES; i++)
        if ((rc = read_dsfile(path, root, i, &m->f[i], err, errlen)) < 0)
            goto out;
    if ((rc = unknown_keys(path, root, err, errlen)) < 0) /* after what is missing or mistyped */
        goto out;
    rc = -EINVAL;
    enum dtype idt = dtype_for_ids(m->nodes);
    const struct dataset_file *f = m->f;
    uint64_t n1;
    if (sl_add_ovf(m->nodes, 1, &n1))
        goto out;
    if (f[DATASET_INDPTR].dtype != DTYPE_U64 || f[DATASET_INDPTR].rows != n1) {
        sl_errf(err, errlen, rc, "%s: indptr must be u64 with nodes+1 = %" PRIu64 " entries", path, n1);
        goto out;
    }
    if (f[DATASET_INDICES].dtype != idt || f[DATASET_INDICES].rows != m->edges) {
        sl_errf(err, errlen, rc, "%s: indices must be %s with edges = %" PRIu64 " entries", path, dtype_name(idt),
                m->edges);
        goto out;
    }
    if ((f[DATASET_FEATURES].dtype != DTYPE_F32 && f[DATASET_FEATURES].dtype != DTYPE_F16) ||
        f[DATASET_FEATURES].rows != m->nodes || f[DATASET_FEATURES].cols != m->feat_dim || m->feat_dim == 0) {
        sl_errf(err, errlen, rc, "%s: features must be f32 or f16 with shape [nodes, feat_dim] = [%" PRIu64 ", %" PRIu64 "]",
                path, m->nodes, m->feat_dim);
        goto out;
    }
    uint64_t rb = f[DATASET_FEATURES].cols * dtype_size(f[DATASET_FEATURES].dtype);
    if (f[DATASET_FEATURES].row_stride != dataset_row_stride(rb, m->feat_align)) {
        sl_errf(err, errlen, rc,
                "%s: features.row_stride = %" PRIu64 " breaks the alignment rule (expected %" PRIu64 ")", path,
                f[DATASET_FEATURES].row_stride, dataset_row_stride(rb, m->feat_align));
        goto out;
    }
    if (f[DATASET_LABELS].dtype != DTYPE_I32 || f[DATASET_LABELS].rows != m->nodes) {
        sl_errf(err, errlen, rc, "%s: labels must be i32 with nodes = %" PRIu64 " entries", path, m->nodes);
        goto out;
    }
    for (int i = DATASET_TRAIN; i <= DATASET_TEST; i++)
        if (f[i].dtype != idt || f[i].rows > m->nodes) {
            sl_errf(err, errlen, rc, "%s: %s must be %s with at most nodes entries", path, dataset_file_key[i],
                    dtype_name(idt));
            goto out;
        }
    for (int i = 0; i < DATASET_FILES; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(f[i].file, f[j].file)) {
                sl_errf(err, errlen, rc, "%s: %s and %s name the same file %s", path, dataset_file_key[j],
                        dataset_file_key[i], f[i].file);
                goto out;
            }
    rc = 0;
out:
    toml_free(root);
    return rc;
}

int dataset_meta_read(const char *dir, struct dataset_meta *m, bool check_files, char *err, size_t errlen)
{
    char path[4096];
    memset(m, 0, sizeof *m);
    if (sl_path_join(path, sizeof path, dir, DATASET_META_FILE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    struct stat st;
    if (stat(dir, &st) < 0)
        return sl_errf(err, errlen, -errno, "%s: %s; make a dataset with `gnnprep synth` or `gnnprep import`", dir,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOTDIR, "%s: not a directory; a dataset is a directory holding dataset.toml", dir);
    if (access(path, F_OK) < 0)
        return sl_errf(err, errlen, -ENOENT, "%s: no dataset.toml; is this a Sluice dataset? (make one with gnnprep)", dir);
    char *text;
    size_t len;
    int rc = sl_read_file(path, 1u << 20, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    rc = dataset_meta_parse(text, len, path, m, err, errlen);
    free(text);
    if (rc < 0 || !check_files)
        return rc;
    const struct dataset_file *f = m->f;
    for (int i = 0; i < DATASET_FILES; i++) {
        char fp[4096];
        if (sl_path_join(fp, sizeof fp, dir, f[i].file) < 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
        if (stat(fp, &st) < 0)
            return sl_errf(err, errlen, -errno, "%s: %s (named by %s.file in dataset.toml); the dataset is incomplete",
                           fp, strerror(errno), dataset_file_key[i]);
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f[i].bytes)
            return sl_errf(err, errlen, -EINVAL, "%s: %lld bytes but dataset.toml records %" PRIu64
                           "; the file was changed or truncated, regenerate the dataset",
                           fp, (long long)st.st_size, f[i].bytes);
    }
    return 0;
}

uint64_t dataset_meta_identity(const struct dataset_meta *m)
{
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text,
                                "sluice-dataset %" PRIu32 " nodes=%" PRIu64 " edges=%" PRIu64 " feat_dim=%" PRIu64
                                " classes=%" PRIu32 " feat_align=%" PRIu64 "\n",
                                m->version, m->nodes, m->edges, m->feat_dim, m->classes, m->feat_align);
    for (int i = 0; i < DATASET_FILES && n < sizeof text; i++) {
        const struct dataset_file *f = &m->f[i];
        n += (size_t)snprintf(
            text + n, sizeof text - n,
            "%s %s %s [%" PRIu64 ", %" PRIu64 "] stride=%" PRIu64 " bytes=%" PRIu64 " xxh3=%016" PRIx64 "\n",
            dataset_file_key[i], f->file, dtype_name(f->dtype), f->rows, f->cols, f->row_stride, f->bytes, f->xxh3);
    }
    return XXH3_64bits(text, SL_MIN(n, sizeof text - 1));
}

/* ------------------------------------------------------------------ */
/* staged dataset directory */

#define OWNER_FILE ".owner" /* in a staging directory: "PID START" of the gnnprep writing it */

/* The start time of process pid (field 22 of /proc/PID/stat, clock ticks
 * since boot): 0 when it is gone or cannot be read. */
static uint64_t pid_start_time(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Whether the staging directory `name` (".X.partial-PID") in parent is
 * stale: ours, and its writer gone - no process PID, or a process PID
 * that started at another time than the one recorded in its .owner (the
 * pid was reused). */
static bool staging_stale(const char *parent, const char *name)
{
    const char *mark = strstr(name, ".partial-");
    if (name[0] != '.' || !mark)
        return false;
    char *end;
    long pid = strtol(mark + 9, &end, 10);
    if (*end || pid <= 0)
        return false;
    char p[4096], owner[4200];
    struct stat st;
    if (sl_path_join(p, sizeof p, parent, name) != 0 || lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
        return false;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return true;
    snprintf(owner, sizeof owner, "%s/" OWNER_FILE, p);
    FILE *f = fopen(owner, "re");
    long opid = 0;
    unsigned long long ostart = 0;
    bool read = f && fscanf(f, "%ld %llu", &opid, &ostart) == 2;
    if (f)
        fclose(f);
    uint64_t now = pid_start_time(pid);
    return read && opid == pid && now != 0 && now != ostart;
}

/* Removes the staging directories of gnnprep runs that are gone, of any
 * output name, in parent (a killed gnnprep leaves its `.NAME.partial-PID`;
 * nothing else removes it); says so on stderr. */
static void reap_stale(const char *parent)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[4096];
        if (!staging_stale(parent, e->d_name) || sl_path_join(p, sizeof p, parent, e->d_name) != 0)
            continue;
        if (sl_rmtree(p) == 0)
            n++;
    }
    closedir(d);
    if (n)
        fprintf(stderr, "gnnprep: removed %d staging director%s left in %s by gnnprep runs that were killed\n", n,
                n == 1 ? "y" : "ies", parent);
}

int dataset_dir_begin(struct dataset_dir *d, const char *out, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof d->out - 64)
        return sl_errf(err, errlen, -EINVAL, "output path \"%s\" is empty or too long", out);
    memcpy(d->out, out, n);
    d->out[n] = '\0';
    struct stat st;
    if (stat(d->out, &st) == 0)
        return sl_errf(err, errlen, -EEXIST, "%s: already exists; remove it or choose another output directory", d->out);
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", d->out);
    snprintf(b, sizeof b, "%s", d->out);
    const char *parent = dirname(a), *base = basename(b);
    if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOENT, "%s: parent directory %s does not exist; create it first", d->out, parent);
    reap_stale(parent);
    snprintf(d->tmp, sizeof d->tmp, "%s/.%s.partial-%ld", parent, base, (long)getpid());
    sl_rmtree(d->tmp);
    if (mkdir(d->tmp, 0755) < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot create staging directory: %s", d->tmp, strerror(errno));
    char owner[4200]; /* who writes it, for reap_stale of a later gnnprep */
    snprintf(owner, sizeof owner, "%s/" OWNER_FILE, d->tmp);
    FILE *f = sl_fopen_write(owner, 0644);
    if (f) {
        fprintf(f, "%ld %llu\n", (long)getpid(), (unsigned long long)pid_start_time(getpid()));
        fclose(f);
    }
    return 0;
}

int dataset_dir_path(const struct dataset_dir *d, const char *name, char *path, size_t len)
{
    return sl_path_join(path, len, d->tmp, name);
}

int dataset_dir_commit(struct dataset_dir *d, const struct dataset_meta *m, char *err, size_t errlen)
{
    int rc = dataset_meta_write(d->tmp, m, err, errlen);
    return rc < 0 ? rc : dataset_dir_rename(d, err, errlen);
}

int dataset_dir_rename(struct dataset_dir *d, char *err, size_t errlen)
{
    char owner[4200];
    snprintf(owner, sizeof owner, "%s/" OWNER_FILE, d->tmp);
    unlink(owner); /* not part of the dataset */
    int fd = open(d->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    if (rename(d->tmp, d->out) < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot move the finished directory into place: %s", d->out, strerror(errno));
    d->committed = true;
    return 0;
}

void dataset_dir_abort(struct dataset_dir *d)
{
    if (!d || d->committed || !d->tmp[0])
        return;
    sl_rmtree(d->tmp);
    d->tmp[0] = '\0';
}
