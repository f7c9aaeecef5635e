/* ckpt.c - safetensors checkpoints: atomic writer, validating mmap reader
 * and the search for the newest complete checkpoint of a run (ckpt.h says
 * what the format allows; docs/checkpoints.md what a checkpoint holds).
 *
 * JSON goes through libjansson both ways: the writer builds the header as
 * a jansson object (so names and metadata are escaped by the library) and
 * dumps it compactly; the reader parses with duplicate keys rejected, then
 * checks every entry and that the entries' byte ranges tile the data
 * buffer exactly. Entries keep the header's order (jansson iterates
 * objects in insertion order). */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt.c writes host-order tensors as safetensors' little-endian data; add byte swapping for this target"
#endif

#define META_KEY "__metadata__"

/* The safetensors dtypes of whole bytes per element. */
static const struct {
    const char *name;
    uint8_t size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
};

/* Static name and size of a dtype, or NULL. */
static const char *dtype_lookup(const char *name, size_t *size)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < SL_ARRAY_LEN(dtypes); i++)
        if (strcmp(dtypes[i].name, name) == 0) {
            if (size)
                *size = dtypes[i].size;
            return dtypes[i].name;
        }
    return NULL;
}

size_t ckpt_dtype_size(const char *dtype)
{
    size_t size = 0;
    return dtype_lookup(dtype, &size) ? size : 0;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* "[2, 3]" into buf. */
static const char *fmt_shape(char *buf, size_t len, uint32_t ndim, const uint64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (uint32_t d = 0; d < ndim && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, d ? ", " : "", shape[d]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
    return buf;
}

/* ---- writer ------------------------------------------------------------ */

/* fsync of the directory holding path, so that a rename into it is durable.
 * Filesystems that cannot fsync a directory (EINVAL) are let pass. */
static int fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) >= sizeof dir)
        return -ENAMETOOLONG;
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 && errno != EINVAL ? -errno : 0;
    close(fd);
    return rc;
}

/* Builds the header object: metadata first, then the tensors in the given
 * order with the offsets in begin[]. */
static int build_header(json_t *root, const struct ckpt_tensor *t, uint32_t n, const uint64_t *begin,
                        const uint64_t *bytes, const char *const *meta_kv, uint32_t nmeta, const char *path,
                        char *err, size_t errlen)
{
    if (nmeta) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, META_KEY, m) < 0)
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory building the header", path);
        for (uint32_t i = 0; i < nmeta; i++) {
            const char *k = meta_kv[2 * i], *v = meta_kv[2 * i + 1];
            if (!k || !v)
                return sl_errf(err, errlen, -EINVAL, "%s: metadata pair %u has a NULL key or value", path, i);
            if (json_object_get(m, k))
                return sl_errf(err, errlen, -EINVAL, "%s: metadata key '%s' given twice", path, k);
            json_t *s = json_string(v);
            if (!s)
                return sl_errf(err, errlen, -EINVAL, "%s: value of metadata key '%s' is not valid UTF-8", path, k);
            if (json_object_set_new(m, k, s) < 0)
                return sl_errf(err, errlen, -EINVAL, "%s: metadata key '%s' is not valid UTF-8", path, k);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (json_object_get(root, name))
            return sl_errf(err, errlen, -EINVAL, "%s: tensor name '%s' given twice", path, name);
        json_t *shape = json_array(), *offs = json_array(), *e = json_object();
        bool ok = shape && offs && e;
        for (uint32_t d = 0; ok && d < t[i].ndim; d++)
            ok = json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d])) == 0;
        ok = ok && json_array_append_new(offs, json_integer((json_int_t)begin[i])) == 0 &&
             json_array_append_new(offs, json_integer((json_int_t)(begin[i] + bytes[i]))) == 0 &&
             json_object_set_new(e, "dtype", json_string(dtype_lookup(t[i].dtype, NULL))) == 0;
        if (ok) {
            ok = json_object_set_new(e, "shape", shape) == 0;
            shape = NULL;
            ok = json_object_set_new(e, "data_offsets", offs) == 0 && ok;
            offs = NULL;
        }
        json_decref(shape);
        json_decref(offs);
        if (!ok) {
            json_decref(e);
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory building the header", path);
        }
        if (json_object_set_new(root, name, e) < 0)
            return sl_errf(err, errlen, -EINVAL, "%s: tensor name '%s' is not valid UTF-8", path, name);
    }
    return 0;
}

/* A tensor whose bytes come from its fill callback, 4 MiB at a time. */
static int write_filled(int fd, const struct ckpt_fill *f, uint64_t bytes, char *msg, size_t msglen)
{
    const uint64_t chunk = 4u << 20;
    unsigned char *buf = malloc((size_t)SL_MIN(bytes, chunk));
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < bytes; off += chunk) {
        size_t len = (size_t)SL_MIN(chunk, bytes - off);
        if ((rc = f->fill(f->arg, off, buf, len, msg, msglen)) == 0)
            rc = sl_write_all(fd, buf, len);
        else if (rc > 0)
            rc = -EIO;
    }
    free(buf);
    return rc;
}

int ckpt_write(const char *path, const struct ckpt_tensor *t, uint32_t n, const char *const *meta_kv,
               uint32_t nmeta, char *err, size_t errlen)
{
    return ckpt_write_from(path, t, NULL, n, meta_kv, nmeta, err, errlen);
}

int ckpt_write_from(const char *path, const struct ckpt_tensor *t, const struct ckpt_fill *fills, uint32_t n,
                    const char *const *meta_kv, uint32_t nmeta, char *err, size_t errlen)
{
    char fillmsg[1024] = "";
    int rc = 0, fd = -1;
    bool created = false;
    json_t *root = NULL;
    char *json = NULL, *tmp = NULL;
    uint8_t *hdr = NULL;
    uint64_t *begin = NULL, *bytes = NULL;

    if (!path || !*path || (n && !t) || (nmeta && !meta_kv))
        return sl_errf(err, errlen, -EINVAL, "ckpt_write: NULL or empty argument");
    begin = calloc(n ? n : 1, sizeof *begin);
    bytes = calloc(n ? n : 1, sizeof *bytes);
    root = json_object();
    if (!begin || !bytes || !root) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto out;
    }

    /* sizes, then the layout: largest elements first keeps every tensor
     * aligned to its element size (the buffer starts 8-aligned) */
    for (uint32_t i = 0; i < n; i++) {
        size_t esz = 0;
        uint64_t elems = 1;
        char sh[256];
        if (!t[i].name || strcmp(t[i].name, META_KEY) == 0) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: tensor %u has no name or the reserved name " META_KEY, path, i);
            goto out;
        }
        if (!dtype_lookup(t[i].dtype, &esz)) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: tensor '%s' has unknown dtype '%s'", path, t[i].name,
                         t[i].dtype ? t[i].dtype : "(null)");
            goto out;
        }
        if (t[i].ndim > CKPT_MAX_NDIM) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: tensor '%s' has %u dimensions, at most %d are supported", path,
                         t[i].name, t[i].ndim, CKPT_MAX_NDIM);
            goto out;
        }
        for (uint32_t d = 0; d < t[i].ndim; d++)
            if (sl_mul_ovf(elems, t[i].shape[d], &elems))
                elems = UINT64_MAX;
        if (elems == UINT64_MAX || sl_mul_ovf(elems, esz, &bytes[i]) || bytes[i] > (uint64_t)INT64_MAX) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: tensor '%s' of shape %s is too large", path, t[i].name,
                         fmt_shape(sh, sizeof sh, t[i].ndim, t[i].shape));
            goto out;
        }
        if (bytes[i] && !t[i].data && !(fills && fills[i].fill)) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: tensor '%s' has no data", path, t[i].name);
            goto out;
        }
    }
    uint64_t total = 0;
    for (size_t esz = 8; esz; esz /= 2)
        for (uint32_t i = 0; i < n; i++)
            if (ckpt_dtype_size(t[i].dtype) == esz) {
                begin[i] = total;
                if (sl_add_ovf(total, bytes[i], &total) || total > (uint64_t)INT64_MAX) {
                    rc = sl_errf(err, errlen, -EINVAL, "%s: the tensors add up to more than 2^63 bytes", path);
                    goto out;
                }
            }

    rc = build_header(root, t, n, begin, bytes, meta_kv, nmeta, path, err, errlen);
    if (rc < 0)
        goto out;
    json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!json) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory formatting the header", path);
        goto out;
    }
    size_t jlen = strlen(json), hlen = (size_t)sl_round_up(jlen, 8);
    if (hlen > CKPT_MAX_HEADER) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: header of %zu bytes is over the limit of %u that Sluice reads", path,
                     hlen, CKPT_MAX_HEADER);
        goto out;
    }
    hdr = malloc(8 + hlen);
    size_t tlen = strlen(path) + 32;
    tmp = malloc(tlen);
    if (!hdr || !tmp) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    put_le64(hdr, hlen);
    memcpy(hdr + 8, json, jlen);
    memset(hdr + 8 + jlen, ' ', hlen - jlen);
    snprintf(tmp, tlen, "%s.partial-%ld", path, (long)getpid());

    /* a fresh file of our own: a stale partial of an earlier process with
     * this pid is removed, and O_EXCL never follows a link planted here */
    if (unlink(tmp) != 0 && errno != ENOENT) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot write checkpoint %s: removing the stale %s: %s", path, tmp, strerror(-rc));
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot write checkpoint %s: creating %s: %s; check that the checkpoint directory "
                "exists and is writable", path, tmp, strerror(-rc));
        goto out;
    }
    created = true;
    rc = sl_write_all(fd, hdr, 8 + hlen);
    for (size_t esz = 8; esz && rc == 0; esz /= 2)
        for (uint32_t i = 0; i < n && rc == 0; i++)
            if (ckpt_dtype_size(t[i].dtype) == esz && bytes[i])
                rc = t[i].data ? sl_write_all(fd, t[i].data, (size_t)bytes[i])
                               : write_filled(fd, &fills[i], bytes[i], fillmsg, sizeof fillmsg);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    fd = -1;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0 && *fillmsg) {
        sl_errf(err, errlen, rc, "cannot write checkpoint %s: %s", path, fillmsg);
        goto out;
    }
    if (rc < 0) {
        sl_errf(err, errlen, rc, "cannot write checkpoint %s (through %s): %s; check free space and quotas of the "
                "checkpoint directory", path, tmp, strerror(-rc));
        goto out;
    }
    created = false; /* renamed: nothing to clean up any more */
    rc = fsync_parent(path);
    if (rc < 0)
        sl_errf(err, errlen, rc, "checkpoint %s written but its directory could not be synced: %s", path,
                strerror(-rc));
out:
    if (fd >= 0)
        close(fd);
    if (created)
        unlink(tmp);
    free(tmp);
    free(hdr);
    free(json);
    json_decref(root);
    free(begin);
    free(bytes);
    return rc;
}

/* ---- reader ------------------------------------------------------------ */

/* -EINVAL with "path: <message>". */
SL_PRINTF(4, 5) static int bad(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_errf(err, errlen, -EINVAL, "%s: %s", path, msg);
}

/* A JSON integer in [0, 2^63) into *out. */
static bool json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static int parse_meta(struct ckpt *c, const json_t *m, const char *path, char *err, size_t errlen)
{
    if (!json_is_object(m))
        return bad(err, errlen, path, META_KEY " is not an object of strings");
    size_t nm = json_object_size(m);
    c->meta = calloc(nm ? 2 * nm : 1, sizeof *c->meta);
    if (!c->meta)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return bad(err, errlen, path, META_KEY " entry '%s' is not a string", k);
        char *ks = strdup(k), *vs = strdup(json_string_value(v));
        c->meta[2 * c->nmeta] = ks;
        c->meta[2 * c->nmeta + 1] = vs;
        c->nmeta++;
        if (!ks || !vs)
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    return 0;
}

/* Checks one tensor entry on its own (the tiling is checked later). */
static int parse_entry(struct ckpt_entry *e, const char *name, const json_t *v, uint64_t data_at, uint64_t data_len,
                       const char *path, char *err, size_t errlen)
{
    if (!json_is_object(v))
        return bad(err, errlen, path, "entry '%s' is not an object", name);
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return bad(err, errlen, path, "entry '%s' has an unknown field '%s'", name, k);
    }
    const json_t *dt = json_object_get(v, "dtype");
    if (!json_is_string(dt))
        return bad(err, errlen, path, "entry '%s': dtype is missing or not a string", name);
    size_t esz = 0;
    e->dtype = dtype_lookup(json_string_value(dt), &esz);
    if (!e->dtype)
        return bad(err, errlen, path, "entry '%s': unknown dtype '%s'", name, json_string_value(dt));

    const json_t *sh = json_object_get(v, "shape");
    if (!json_is_array(sh))
        return bad(err, errlen, path, "entry '%s': shape is missing or not an array", name);
    if (json_array_size(sh) > CKPT_MAX_NDIM)
        return bad(err, errlen, path, "entry '%s': %zu dimensions, at most %d are supported", name,
                   json_array_size(sh), CKPT_MAX_NDIM);
    e->ndim = (uint32_t)json_array_size(sh);
    uint64_t elems = 1, bytes = 0;
    bool ovf = false;
    for (uint32_t d = 0; d < e->ndim; d++) {
        if (!json_u64(json_array_get(sh, d), &e->shape[d]))
            return bad(err, errlen, path, "entry '%s': shape[%u] is not a non-negative integer", name, d);
        ovf = ovf || sl_mul_ovf(elems, e->shape[d], &elems);
    }
    char shs[256];
    fmt_shape(shs, sizeof shs, e->ndim, e->shape);
    if (ovf || sl_mul_ovf(elems, esz, &bytes))
        return bad(err, errlen, path, "entry '%s': shape %s of %s overflows 64 bits", name, shs, e->dtype);

    const json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_u64(json_array_get(off, 0), &e->begin) ||
        !json_u64(json_array_get(off, 1), &e->end))
        return bad(err, errlen, path, "entry '%s': data_offsets is missing or not two non-negative integers", name);
    if (e->end < e->begin)
        return bad(err, errlen, path, "entry '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                   name, e->begin, e->end);
    if (e->end > data_len)
        return bad(err, errlen, path,
                   "entry '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the %" PRIu64
                   "-byte data buffer (truncated file?)",
                   name, e->begin, e->end, data_len);
    if (e->end - e->begin != bytes)
        return bad(err, errlen, path,
                   "entry '%s': shape %s of %s needs %" PRIu64 " bytes but data_offsets [%" PRIu64 ", %" PRIu64
                   "] hold %" PRIu64,
                   name, shs, e->dtype, bytes, e->begin, e->end, e->end - e->begin);
    if ((data_at + e->begin) % esz)
        return bad(err, errlen, path,
                   "entry '%s': data at file offset %" PRIu64 " is not aligned to its %zu-byte elements "
                   "(Sluice needs aligned tensors; save with the safetensors package or ckpt_write)",
                   name, data_at + e->begin, esz);
    return 0;
}

struct span {
    uint64_t begin, end;
    uint32_t idx;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* The entries' ranges, sorted, must run from 0 to data_len with no hole
 * and no overlap. */
static int check_tiling(const struct ckpt *c, const char *path, char *err, size_t errlen)
{
    struct span *s = calloc(c->n ? c->n : 1, sizeof *s);
    if (!s)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    for (uint32_t i = 0; i < c->n; i++)
        s[i] = (struct span){c->e[i].begin, c->e[i].end, i};
    qsort(s, c->n, sizeof *s, span_cmp);
    uint64_t pos = 0;
    int rc = 0;
    for (uint32_t k = 0; k < c->n && rc == 0; k++) {
        const struct ckpt_entry *e = &c->e[s[k].idx];
        if (e->begin < pos) {
            const struct ckpt_entry *p = &c->e[s[k - 1].idx];
            rc = bad(err, errlen, path,
                     "entry '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap those of entry '%s' [%" PRIu64
                     ", %" PRIu64 "]",
                     e->name, e->begin, e->end, p->name, p->begin, p->end);
        } else if (e->begin > pos) {
            rc = bad(err, errlen, path,
                     "entry '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] leave bytes [%" PRIu64 ", %" PRIu64
                     ") of the data buffer unused (holes are not allowed)",
                     e->name, e->begin, e->end, pos, e->begin);
        }
        pos = e->end;
    }
    if (rc == 0 && pos != c->data_len)
        rc = bad(err, errlen, path,
                 "the tensors cover %" PRIu64 " bytes of the %" PRIu64 "-byte data buffer; %" PRIu64
                 " bytes after them belong to no entry",
                 pos, c->data_len, c->data_len - pos);
    free(s);
    return rc;
}

int ckpt_read(struct ckpt *c, const char *path, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_t *root = NULL;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0) {
        rc = -errno;
        return sl_errf(err, errlen, rc, "cannot open checkpoint %s: %s", path, strerror(-rc));
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        close(fd);
        return sl_errf(err, errlen, rc, "cannot stat checkpoint %s: %s", path, strerror(-rc));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return bad(err, errlen, path, "not a regular file");
    }
    if (st.st_size < 8) {
        close(fd);
        return bad(err, errlen, path, "%lld bytes, shorter than the 8-byte header length (truncated file?)",
                   (long long)st.st_size);
    }
    uint64_t size = (uint64_t)st.st_size;
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    rc = map == MAP_FAILED ? -errno : 0;
    close(fd);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "cannot map checkpoint %s: %s", path, strerror(-rc));
    c->map = map;
    c->map_len = (size_t)size;

    const uint8_t *p = map;
    uint64_t hlen = get_le64(p);
    if (hlen > CKPT_MAX_HEADER) {
        rc = bad(err, errlen, path, "header length %" PRIu64 " is over the limit of %u bytes that Sluice reads", hlen,
                 CKPT_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        rc = bad(err, errlen, path,
                 "header length %" PRIu64 " runs past the end of the %" PRIu64 "-byte file (truncated file?)", hlen,
                 size);
        goto fail;
    }
    if (hlen == 0 || p[8] != '{') {
        rc = bad(err, errlen, path, "the header does not start with '{'; not a safetensors file");
        goto fail;
    }
    json_error_t je;
    root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rc = bad(err, errlen, path, "header JSON at byte %d of the header: %s", je.position, je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = bad(err, errlen, path, "the header is not a JSON object");
        goto fail;
    }
    c->data = p + 8 + hlen;
    c->data_len = size - 8 - hlen;

    const json_t *meta = json_object_get(root, META_KEY);
    size_t nt = json_object_size(root) - (meta ? 1 : 0);
    if (nt > UINT32_MAX) {
        rc = bad(err, errlen, path, "too many entries");
        goto fail;
    }
    c->e = calloc(nt ? nt : 1, sizeof *c->e);
    if (!c->e) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, META_KEY) == 0) {
            rc = parse_meta(c, val, path, err, errlen);
        } else {
            struct ckpt_entry *e = &c->e[c->n++];
            e->name = strdup(key);
            rc = e->name ? parse_entry(e, key, val, 8 + hlen, c->data_len, path, err, errlen)
                         : sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
        }
        if (rc < 0)
            goto fail;
    }
    rc = check_tiling(c, path, err, errlen);
    if (rc < 0)
        goto fail;
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    ckpt_free(c);
    return rc;
}

const void *ckpt_find(const struct ckpt *c, const char *name, const char *dtype, uint32_t *ndim,
                      uint64_t shape[CKPT_MAX_NDIM])
{
    for (uint32_t i = 0; i < c->n; i++) {
        const struct ckpt_entry *e = &c->e[i];
        if (strcmp(e->name, name) != 0)
            continue;
        if (!dtype || strcmp(e->dtype, dtype) != 0)
            return NULL;
        if (ndim)
            *ndim = e->ndim;
        if (shape)
            for (uint32_t d = 0; d < CKPT_MAX_NDIM; d++)
                shape[d] = d < e->ndim ? e->shape[d] : 0;
        return c->data + e->begin;
    }
    return NULL;
}

const char *ckpt_meta(const struct ckpt *c, const char *key)
{
    for (uint32_t i = 0; i < c->nmeta; i++)
        if (strcmp(c->meta[2 * i], key) == 0)
            return c->meta[2 * i + 1];
    return NULL;
}

uint32_t ckpt_count(const struct ckpt *c) { return c->n; }

const char *ckpt_name(const struct ckpt *c, uint32_t i) { return i < c->n ? c->e[i].name : NULL; }

const struct ckpt_entry *ckpt_entry_at(const struct ckpt *c, uint32_t i) { return i < c->n ? &c->e[i] : NULL; }

void ckpt_free(struct ckpt *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; c->e && i < c->n; i++)
        free(c->e[i].name);
    free(c->e);
    for (uint32_t i = 0; c->meta && i < 2 * c->nmeta; i++)
        free(c->meta[i]);
    free(c->meta);
    if (c->map)
        munmap(c->map, c->map_len);
    memset(c, 0, sizeof *c);
}

/* ---- the checkpoints of a run ------------------------------------------ */

int ckpt_path(char *out, size_t len, const char *dir, uint32_t epoch)
{
    char name[64];
    snprintf(name, sizeof name, "epoch-%06" PRIu32 ".safetensors", epoch);
    return sl_path_join(out, len, dir, name);
}

/* Parses "epoch-<6+ digits>.safetensors" (kind 1) or that followed by
 * ".partial-<pid>" (kind 2); 0 for any other name. */
static int parse_ckpt_name(const char *s, uint32_t *epoch, long *pid)
{
    static const char pre[] = "epoch-", ext[] = ".safetensors", part[] = ".partial-";
    if (strncmp(s, pre, sizeof pre - 1) != 0)
        return 0;
    s += sizeof pre - 1;
    uint64_t v = 0;
    size_t nd = 0;
    for (; *s >= '0' && *s <= '9'; s++, nd++) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > UINT32_MAX)
            return 0;
    }
    if (nd < 6 || strncmp(s, ext, sizeof ext - 1) != 0)
        return 0;
    s += sizeof ext - 1;
    *epoch = (uint32_t)v;
    if (*s == '\0')
        return 1;
    if (strncmp(s, part, sizeof part - 1) != 0)
        return 0;
    s += sizeof part - 1;
    long p = 0;
    for (nd = 0; *s >= '0' && *s <= '9'; s++, nd++) {
        p = p * 10 + (*s - '0');
        if (p > INT_MAX)
            return 0;
    }
    if (nd == 0 || *s != '\0' || p <= 0)
        return 0;
    *pid = p;
    return 2;
}

struct cand {
    uint32_t epoch;
    char *name;
};

static int cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch > y->epoch ? -1 : 1;
    return strcmp(x->name, y->name);
}

int ckpt_latest(const char *dir, char *path, size_t len, uint32_t *epoch, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        int rc = -errno;
        if (rc == -ENOENT)
            return sl_errf(err, errlen, rc, "no checkpoint in %s: the directory does not exist", dir);
        return sl_errf(err, errlen, rc, "cannot list checkpoint directory %s: %s", dir, strerror(-rc));
    }
    struct cand *cs = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d))) {
        uint32_t e = 0;
        long pid = 0;
        int kind = parse_ckpt_name(de->d_name, &e, &pid);
        if (kind == 2 && kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
            unlinkat(dirfd(d), de->d_name, 0); /* its writer died mid-checkpoint */
        } else if (kind == 1) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                struct cand *ne = realloc(cs, nc * sizeof *cs);
                if (!ne) {
                    rc = -ENOMEM;
                    break;
                }
                cs = ne;
                cap = nc;
            }
            cs[n].epoch = e;
            cs[n].name = strdup(de->d_name);
            if (!cs[n++].name) {
                rc = -ENOMEM;
                break;
            }
        }
        errno = 0;
    }
    if (rc == 0 && errno)
        rc = -errno;
    closedir(d);
    if (rc < 0) {
        sl_errf(err, errlen, rc, "cannot list checkpoint directory %s: %s", dir, strerror(-rc));
        goto out;
    }
    if (n)
        qsort(cs, n, sizeof *cs, cand_desc);
    rc = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        char full[PATH_MAX], why[1024];
        struct ckpt c;
        if (sl_path_join(full, sizeof full, dir, cs[i].name) < 0) {
            rc = sl_errf(err, errlen, -ENAMETOOLONG, "checkpoint directory name %s is too long", dir);
            break;
        }
        int r = ckpt_read(&c, full, why, sizeof why);
        if (r == -EINVAL || r == -EIO) {
            fprintf(stderr, "sluice: skipping damaged checkpoint: %s\n", why);
            continue;
        }
        if (r == -ENOENT) /* removed since the listing */
            continue;
        if (r < 0) {
            rc = sl_errf(err, errlen, r, "%s", why);
            break;
        }
        ckpt_free(&c);
        if ((size_t)snprintf(path, len, "%s", full) >= len) {
            rc = sl_errf(err, errlen, -ENAMETOOLONG, "checkpoint path %s is too long", full);
            break;
        }
        if (epoch)
            *epoch = cs[i].epoch;
        rc = 0;
        break;
    }
    if (rc == -ENOENT)
        sl_errf(err, errlen, rc, "no complete checkpoint in %s", dir);
out:
    for (size_t i = 0; i < n; i++)
        free(cs[i].name);
    free(cs);
    return rc;
}

int ckpt_check_dataset(const char *dir, uint32_t epoch, uint64_t id, const char *dataset_dir, char *err,
                       size_t errlen)
{
    char path[PATH_MAX], want[24];
    if (ckpt_path(path, sizeof path, dir, epoch) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    struct ckpt c;
    int rc = ckpt_read(&c, path, err, errlen);
    if (rc)
        return rc;
    snprintf(want, sizeof want, "%016" PRIx64, id);
    const char *got = ckpt_meta(&c, CKPT_META_DATASET), *from = ckpt_meta(&c, CKPT_META_DATASET_PATH);
    if (got && strcmp(got, want) != 0)
        rc = sl_errf(err, errlen, -EINVAL,
                     "--resume: %s was trained on the dataset at %s (identity %s), but dataset.path = \"%s\" "
                     "holds another one (identity %s): their dataset.toml files record different contents; point "
                     "dataset.path at the dataset the checkpoint was trained on, or start afresh without --resume",
                     path, from ? from : "(path not recorded)", got, dataset_dir, want);
    ckpt_free(&c);
    return rc;
}
