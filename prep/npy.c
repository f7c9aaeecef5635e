/* npy.c - .npy header parsing and streaming array reads from a file or an
 * .npz member (see npy.h for what is accepted). */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/util.h"
#include "npz.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Sluice's data files are little-endian and it runs on little-endian hosts only"
#endif

static const struct {
    enum npy_type t;
    char kind; /* numpy's kind character */
    size_t size;
    const char *name;
} types[] = {
    {NPY_BOOL, 'b', 1, "bool"},   {NPY_I8, 'i', 1, "int8"},     {NPY_I16, 'i', 2, "int16"},
    {NPY_I32, 'i', 4, "int32"},   {NPY_I64, 'i', 8, "int64"},   {NPY_U8, 'u', 1, "uint8"},
    {NPY_U16, 'u', 2, "uint16"},  {NPY_U32, 'u', 4, "uint32"},  {NPY_U64, 'u', 8, "uint64"},
    {NPY_F16, 'f', 2, "float16"}, {NPY_F32, 'f', 4, "float32"}, {NPY_F64, 'f', 8, "float64"},
};

const char *npy_type_name(enum npy_type t)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(types); i++)
        if (types[i].t == t)
            return types[i].name;
    return "none";
}

size_t npy_type_size(enum npy_type t)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(types); i++)
        if (types[i].t == t)
            return types[i].size;
    return 0;
}

/* ------------------------------------------------------------------ */
/* header */

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

int npy_prelude(const void *buf, size_t n, uint64_t *header_bytes, char *err, size_t errlen)
{
    const unsigned char *b = buf;
    if (memcmp(b, npy_magic, SL_MIN(n, sizeof npy_magic)))
        return sl_errf(err, errlen, -EINVAL, "not a .npy file (it does not start with \\x93NUMPY); save the array with numpy.save");
    if (n < 8)
        return sl_errf(err, errlen, -EINVAL, "truncated: %zu bytes, too short to be a .npy file", n);
    unsigned major = b[6], minor = b[7];
    if (major < 1 || major > 3 || minor != 0)
        return sl_errf(err, errlen, -EINVAL, ".npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)",
                       major, minor);
    size_t pre = major == 1 ? 10 : 12;
    if (n < pre)
        return sl_errf(err, errlen, -EINVAL, "truncated: %zu bytes, too short to hold a .npy header", n);
    uint64_t hl = major == 1 ? (uint64_t)b[8] | (uint64_t)b[9] << 8
                             : (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
    uint64_t total = pre + hl;
    if (total > NPY_MAX_HEADER)
        return sl_errf(err, errlen, -EINVAL,
                       ".npy header of %" PRIu64 " bytes is longer than the %u accepted; "
                       "the file is damaged or not written by numpy",
                       total, NPY_MAX_HEADER);
    if (total < NPY_PRELUDE)
        return sl_errf(err, errlen, -EINVAL, ".npy header of %" PRIu64 " bytes is too short to hold its dict", total);
    *header_bytes = total;
    return 0;
}

/* Recursive-descent parser over the header dict text. */
typedef struct hparse {
    const char *start, *p, *end;
    char *err;
    size_t errlen;
} hparse;

static int hp_fail(hparse *s, const char *what)
{
    return sl_errf(s->err, s->errlen, -EINVAL, "malformed .npy header: %s at byte %td of the header dict; "
                   "the file is damaged or not written by numpy", what, s->p - s->start);
}

static void hp_ws(hparse *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool hp_eat(hparse *s, char c)
{
    hp_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

static bool hp_peek(hparse *s, char c)
{
    hp_ws(s);
    return s->p < s->end && *s->p == c;
}

/* A quoted string without escapes, printable ASCII only. */
static int hp_str(hparse *s, char *out, size_t len)
{
    hp_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return hp_fail(s, "expected a quoted string");
    char q = *s->p++;
    size_t n = 0;
    while (s->p < s->end && *s->p != q) {
        unsigned char c = (unsigned char)*s->p;
        if (c < 0x20 || c > 0x7e || c == '\\')
            return hp_fail(s, "unexpected character in a string");
        if (n + 1 >= len)
            return hp_fail(s, "string too long");
        out[n++] = (char)c;
        s->p++;
    }
    if (s->p >= s->end)
        return hp_fail(s, "unterminated string");
    s->p++;
    out[n] = '\0';
    return 0;
}

static int hp_ident(hparse *s, char *out, size_t len)
{
    hp_ws(s);
    size_t n = 0;
    while (s->p < s->end && ((*s->p >= 'A' && *s->p <= 'Z') || (*s->p >= 'a' && *s->p <= 'z') || *s->p == '_')) {
        if (n + 1 >= len)
            return hp_fail(s, "name too long");
        out[n++] = *s->p++;
    }
    if (!n)
        return hp_fail(s, "expected True or False");
    out[n] = '\0';
    return 0;
}

/* A non-negative decimal integer as Python writes it (no leading zeros),
 * with an optional Python 2 'L' suffix. */
static int hp_uint(hparse *s, uint64_t *v)
{
    hp_ws(s);
    if (s->p < s->end && *s->p == '-')
        return hp_fail(s, "negative dimension in shape");
    if (s->p >= s->end || *s->p < '0' || *s->p > '9')
        return hp_fail(s, "expected a non-negative integer in shape");
    const char *first = s->p;
    uint64_t x = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        if (sl_mul_ovf(x, 10, &x) || sl_add_ovf(x, (uint64_t)(*s->p - '0'), &x))
            return hp_fail(s, "dimension too large");
        s->p++;
    }
    if (*first == '0' && s->p - first > 1)
        return hp_fail(s, "integer with a leading zero in shape");
    if (s->p < s->end && *s->p == 'L')
        s->p++;
    *v = x;
    return 0;
}

static int hp_shape(hparse *s, struct npy_hdr *h)
{
    if (!hp_eat(s, '('))
        return hp_fail(s, "'shape' must be a tuple such as (3, 4)");
    h->ndim = 0;
    if (hp_eat(s, ')'))
        return 0;
    for (;;) {
        if (h->ndim == NPY_MAX_DIMS)
            return hp_fail(s, "too many dimensions in shape");
        int rc = hp_uint(s, &h->shape[h->ndim++]);
        if (rc < 0)
            return rc;
        if (hp_eat(s, ')')) {
            if (h->ndim == 1)
                return hp_fail(s, "a one-element shape needs a trailing comma, as in (3,)");
            return 0;
        }
        if (!hp_eat(s, ','))
            return hp_fail(s, "expected ',' or ')' in shape");
        if (hp_eat(s, ')'))
            return 0;
    }
}

/* Maps a descr string ("<f4") to a type; messages say what to do. */
static int parse_descr(const char *d, struct npy_hdr *h, char *err, size_t errlen)
{
    size_t len = strlen(d);
    char bo = len ? d[0] : 0, kind = len > 1 ? d[1] : 0;
    if (kind == 'O')
        return sl_errf(err, errlen, -EINVAL, "dtype '%s' is an object array (pickled Python objects), which is not "
                       "supported; save a numeric array (e.g. a.astype('float32'))", d);
    if (strchr("USaVMmcG", kind) && kind)
        return sl_errf(err, errlen, -EINVAL, "dtype '%s' (%s) is not supported; save a numeric array (bool, int, "
                       "uint or float)", d,
                       kind == 'U' || kind == 'S' || kind == 'a' ? "strings" : kind == 'V' ? "raw or structured records"
                       : kind == 'M' || kind == 'm' ? "dates and times" : "complex numbers");
    size_t size = 0;
    bool digits = len > 2 && len <= 4;
    for (size_t i = 2; digits && i < len; i++) {
        if (d[i] < '0' || d[i] > '9')
            digits = false;
        else
            size = size * 10 + (size_t)(d[i] - '0');
    }
    enum npy_type t = NPY_NONE;
    for (size_t i = 0; digits && i < SL_ARRAY_LEN(types); i++)
        if (types[i].kind == kind && types[i].size == size)
            t = types[i].t;
    if (t == NPY_NONE || !strchr("<>|=", bo))
        return sl_errf(err, errlen, -EINVAL, "dtype '%s' is not supported (supported: bool, int8..int64, "
                       "uint8..uint64, float16, float32, float64, little-endian)", d);
    if (size > 1 && bo == '>')
        return sl_errf(err, errlen, -EINVAL, "dtype '%s' is big-endian, which is not supported; convert with "
                       "a.astype(a.dtype.newbyteorder('<')) and save again", d);
    if (size > 1 && bo == '=')
        return sl_errf(err, errlen, -EINVAL, "dtype '%s' gives no byte order; save it with numpy.save, which "
                       "writes an explicit '<'", d);
    if (size > 1 && bo == '|')
        return sl_errf(err, errlen, -EINVAL, "dtype '%s' is malformed: a %zu-byte type needs a byte order", d, size);
    h->type = t;
    h->itemsize = size;
    return 0;
}

int npy_parse_header(const void *buf, size_t n, struct npy_hdr *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    uint64_t total;
    int rc = npy_prelude(buf, n, &total, err, errlen);
    if (rc < 0)
        return rc;
    if (total > n)
        return sl_errf(err, errlen, -EINVAL, "truncated: the .npy header needs %" PRIu64 " bytes, found %zu", total, n);
    const unsigned char *b = buf;
    h->version = b[6];
    size_t pre = h->version == 1 ? 10 : 12;
    hparse s = {.start = (const char *)b + pre, .p = (const char *)b + pre, .end = (const char *)b + total,
                .err = err, .errlen = errlen};
    if (!hp_eat(&s, '{'))
        return hp_fail(&s, "expected '{'");
    bool have_descr = false, have_fortran = false, have_shape = false;
    char descr[64] = "";
    while (!hp_eat(&s, '}')) {
        char key[32], val[16];
        if ((rc = hp_str(&s, key, sizeof key)) < 0)
            return rc;
        if (!hp_eat(&s, ':'))
            return hp_fail(&s, "expected ':' after a key");
        if (!strcmp(key, "descr")) {
            if (have_descr)
                return hp_fail(&s, "'descr' given twice");
            have_descr = true;
            if (hp_peek(&s, '['))
                return sl_errf(err, errlen, -EINVAL, "the dtype is structured (a list of named fields), which is not "
                               "supported; save a plain numeric array");
            if ((rc = hp_str(&s, descr, sizeof descr)) < 0)
                return rc;
        } else if (!strcmp(key, "fortran_order")) {
            if (have_fortran)
                return hp_fail(&s, "'fortran_order' given twice");
            have_fortran = true;
            if ((rc = hp_ident(&s, val, sizeof val)) < 0)
                return rc;
            if (!strcmp(val, "True"))
                return sl_errf(err, errlen, -EINVAL, "fortran_order is True (column-major data), which is not "
                               "supported; save numpy.ascontiguousarray(a) instead");
            if (strcmp(val, "False"))
                return hp_fail(&s, "'fortran_order' must be True or False");
        } else if (!strcmp(key, "shape")) {
            if (have_shape)
                return hp_fail(&s, "'shape' given twice");
            have_shape = true;
            if ((rc = hp_shape(&s, h)) < 0)
                return rc;
        } else {
            return hp_fail(&s, "unknown key (expected 'descr', 'fortran_order', 'shape')");
        }
        if (hp_eat(&s, ','))
            continue;
        if (!hp_peek(&s, '}'))
            return hp_fail(&s, "expected ',' or '}'");
    }
    hp_ws(&s);
    if (s.p != s.end)
        return hp_fail(&s, "unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return sl_errf(err, errlen, -EINVAL, "malformed .npy header: the '%s' key is missing",
                       !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    if ((rc = parse_descr(descr, h, err, errlen)) < 0)
        return rc;
    uint64_t count = 1, bytes, end;
    for (int i = 0; i < h->ndim; i++)
        if (sl_mul_ovf(count, h->shape[i], &count))
            goto too_big;
    if (sl_mul_ovf(count, h->itemsize, &bytes) || sl_add_ovf(bytes, total, &end) || end > (uint64_t)INT64_MAX)
        goto too_big;
    h->count = count;
    h->data_bytes = bytes;
    h->header_bytes = total;
    return 0;
too_big: {
    char sh[256];
    return sl_errf(err, errlen, -EINVAL, "shape %s is too large: its size in bytes overflows; the header is damaged",
                   npy_shape_str(h, sh, sizeof sh));
}
}

const char *npy_shape_str(const struct npy_hdr *h, char *buf, size_t len)
{
    size_t n = 0;
    n += (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < h->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%" PRIu64, i ? ", " : "", h->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, h->ndim == 1 ? ",)" : ")");
    return buf;
}

/* ------------------------------------------------------------------ */
/* streaming reader */

void npy_init(struct npy *r)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

void npy_close(struct npy *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    npz_close(r->z);
    r->z = NULL;
}

static int size_mismatch(const struct npy *r, uint64_t found, char *err, size_t errlen)
{
    uint64_t want = r->h.header_bytes + r->h.data_bytes;
    char sh[256];
    npy_shape_str(&r->h, sh, sizeof sh);
    if (found < want)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: truncated: expected %" PRIu64 " bytes, found %" PRIu64
                       " (%s %s array); the file is incomplete, copy or download it again",
                       r->name, want, found, sh, npy_type_name(r->h.type));
    return sl_errf(err, errlen, -EINVAL,
                   "%s: %" PRIu64 " bytes after the %s %s array (expected %" PRIu64 " bytes, found %" PRIu64
                   "); the file is damaged or not a plain .npy",
                   r->name, found - want, sh, npy_type_name(r->h.type), want, found);
}

/* Reads from the member until n bytes or its end; returns bytes read. */
static ssize_t npz_fill(struct npz *z, void *buf, size_t n, char *err, size_t errlen)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = npz_read(z, (char *)buf + got, n - got, err, errlen);
        if (k < 0)
            return k;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

/* Reads and parses the header from whichever source r has. */
static int read_header(struct npy *r, char *err, size_t errlen)
{
    unsigned char pre[NPY_PRELUDE];
    char msg[768];
    size_t got = 0;
    int rc;
    if (r->fd >= 0) {
        rc = sl_pread_full(r->fd, pre, sizeof pre, 0, &got);
        if (rc < 0 && rc != -EIO)
            return sl_errf(err, errlen, rc, "%s: read failed: %s", r->name, strerror(-rc));
    } else {
        ssize_t k = npz_fill(r->z, pre, sizeof pre, err, errlen);
        if (k < 0)
            return (int)k;
        got = (size_t)k;
    }
    uint64_t total;
    if ((rc = npy_prelude(pre, got, &total, msg, sizeof msg)) < 0)
        return sl_errf(err, errlen, rc, "%s: %s", r->name, msg);
    unsigned char *hb = malloc(total);
    if (!hb)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", r->name);
    size_t have = (size_t)SL_MIN((uint64_t)got, total); /* what the prelude read holds of the header, no more */
    memcpy(hb, pre, have);
    if (r->fd >= 0) {
        size_t more = 0;
        rc = sl_pread_full(r->fd, hb + have, total - have, (off_t)have, &more);
        if (rc < 0 && rc != -EIO) {
            free(hb);
            return sl_errf(err, errlen, rc, "%s: read failed: %s", r->name, strerror(-rc));
        }
        have += more;
    } else {
        ssize_t k = npz_fill(r->z, hb + have, total - have, err, errlen);
        if (k < 0) {
            free(hb);
            return (int)k;
        }
        have += (size_t)k;
    }
    rc = npy_parse_header(hb, have, &r->h, msg, sizeof msg);
    free(hb);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "%s: %s", r->name, msg);
    return 0;
}

int npy_open(struct npy *r, const char *path, char *err, size_t errlen)
{
    npy_init(r);
    snprintf(r->name, sizeof r->name, "%s", path);
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s; check the path", path, strerror(errno));
    struct stat st;
    int rc;
    if (fstat(r->fd, &st) < 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: not a regular file; expected a .npy file", path);
        goto fail;
    }
    if ((rc = read_header(r, err, errlen)) < 0)
        goto fail;
    if ((uint64_t)st.st_size != r->h.header_bytes + r->h.data_bytes) {
        rc = size_mismatch(r, (uint64_t)st.st_size, err, errlen);
        goto fail;
    }
    posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return 0;
fail:
    npy_close(r);
    return rc;
}

int npy_open_npz(struct npy *r, const char *npz, const char *member, bool optional, char *err, size_t errlen)
{
    npy_init(r);
    snprintf(r->name, sizeof r->name, "%s: %s", npz, member);
    int rc = npz_open(&r->z, npz, member, optional, err, errlen);
    if (rc != 0)
        return rc;
    if ((rc = read_header(r, err, errlen)) < 0)
        goto fail;
    int64_t size = npz_size(r->z);
    if (size >= 0 && (uint64_t)size != r->h.header_bytes + r->h.data_bytes) {
        rc = size_mismatch(r, (uint64_t)size, err, errlen);
        goto fail;
    }
    return 0;
fail:
    npy_close(r);
    return rc;
}

int npy_read(struct npy *r, void *buf, size_t n, char *err, size_t errlen)
{
    if (n > r->h.data_bytes - r->pos)
        return sl_errf(err, errlen, -EINVAL, "%s: internal error: read past the array's end", r->name);
    size_t got = 0;
    int rc = 0;
    if (r->fd >= 0) {
        rc = sl_pread_full(r->fd, buf, n, (off_t)(r->h.header_bytes + r->pos), &got);
        if (rc < 0 && rc != -EIO)
            return sl_errf(err, errlen, rc, "%s: read failed: %s", r->name, strerror(-rc));
    } else {
        ssize_t k = npz_fill(r->z, buf, n, err, errlen);
        if (k < 0)
            return (int)k;
        got = (size_t)k;
    }
    if (got < n)
        return size_mismatch(r, r->h.header_bytes + r->pos + got, err, errlen);
    r->pos += n;
    return 0;
}

int npy_skip(struct npy *r, uint64_t n, char *err, size_t errlen)
{
    if (n > r->h.data_bytes - r->pos)
        return sl_errf(err, errlen, -EINVAL, "%s: internal error: skip past the array's end", r->name);
    if (r->fd >= 0) {
        r->pos += n;
        return 0;
    }
    size_t cap = 1u << 20;
    char *buf = malloc(cap);
    if (!buf)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", r->name);
    int rc = 0;
    while (n && rc == 0) {
        size_t k = (size_t)SL_MIN(n, (uint64_t)cap);
        rc = npy_read(r, buf, k, err, errlen);
        n -= k;
    }
    free(buf);
    return rc;
}

int npy_end(struct npy *r, char *err, size_t errlen)
{
    if (r->pos != r->h.data_bytes)
        return sl_errf(err, errlen, -EINVAL, "%s: internal error: %" PRIu64 " of %" PRIu64 " data bytes unread",
                       r->name, r->h.data_bytes - r->pos, r->h.data_bytes);
    if (r->fd >= 0)
        return 0; /* the size was checked at open */
    char extra[4096];
    uint64_t more = 0;
    for (;;) {
        ssize_t k = npz_read(r->z, extra, sizeof extra, err, errlen);
        if (k < 0)
            return (int)k;
        if (k == 0)
            break;
        more += (uint64_t)k;
    }
    if (more)
        return size_mismatch(r, r->h.header_bytes + r->h.data_bytes + more, err, errlen);
    return 0;
}

/* ------------------------------------------------------------------ */
/* conversion */

/* Unaligned little-endian loads of element i. */
#define DEF_LOAD(name, T)                                                                                              \
    static inline T name(const void *s, size_t i)                                                                      \
    {                                                                                                                  \
        T v;                                                                                                           \
        memcpy(&v, (const char *)s + i * sizeof v, sizeof v);                                                          \
        return v;                                                                                                      \
    }
DEF_LOAD(ld_u8, uint8_t)
DEF_LOAD(ld_i8, int8_t)
DEF_LOAD(ld_i16, int16_t)
DEF_LOAD(ld_i32, int32_t)
DEF_LOAD(ld_i64, int64_t)
DEF_LOAD(ld_u16, uint16_t)
DEF_LOAD(ld_u32, uint32_t)
DEF_LOAD(ld_u64, uint64_t)
DEF_LOAD(ld_f32, float)
DEF_LOAD(ld_f64, double)

/* dst[i] = (DST_T)src[i] for every source type. */
#define CONVERT_ALL(DST_T, t, src, dst, n)                                                                             \
    do {                                                                                                               \
        switch (t) {                                                                                                   \
        case NPY_BOOL:                                                                                                 \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)(ld_u8(src, i) != 0);                                                                \
            break;                                                                                                     \
        case NPY_I8:                                                                                                   \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_i8(src, i);                                                                       \
            break;                                                                                                     \
        case NPY_I16:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_i16(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_I32:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_i32(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_I64:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_i64(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_U8:                                                                                                   \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_u8(src, i);                                                                       \
            break;                                                                                                     \
        case NPY_U16:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_u16(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_U32:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_u32(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_U64:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_u64(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_F16:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)half_to_f32(ld_u16(src, i));                                                         \
            break;                                                                                                     \
        case NPY_F32:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_f32(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_F64:                                                                                                  \
            for (size_t i = 0; i < (n); i++)                                                                           \
                (dst)[i] = (DST_T)ld_f64(src, i);                                                                      \
            break;                                                                                                     \
        case NPY_NONE:                                                                                                 \
            break;                                                                                                     \
        }                                                                                                              \
    } while (0)

void npy_to_f32(enum npy_type t, const void *src, float *dst, size_t n)
{
    if (t == NPY_F32) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
    CONVERT_ALL(float, t, src, dst, n);
}

void npy_to_f64(enum npy_type t, const void *src, double *dst, size_t n)
{
    CONVERT_ALL(double, t, src, dst, n);
}

int npy_to_i64(enum npy_type t, const void *src, int64_t *dst, size_t n)
{
    if (!npy_is_int(t) && t != NPY_BOOL)
        return -EINVAL;
    if (t == NPY_U64) {
        for (size_t i = 0; i < n; i++) {
            uint64_t v = ld_u64(src, i);
            dst[i] = v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
        }
        return 0;
    }
    if (t == NPY_I64) {
        memcpy(dst, src, n * sizeof *dst);
        return 0;
    }
    CONVERT_ALL(int64_t, t, src, dst, n);
    return 0;
}
