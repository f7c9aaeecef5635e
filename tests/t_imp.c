/* t_imp.c - importer test helpers (see t_imp.h). */
#include "t_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <libgen.h>
#include <zlib.h>

#include "core/util.h"
#include "t_imp.h"

unsigned char *t_npy_make(int version, const char *descr, const char *shape, const void *data, size_t bytes,
                          size_t *len)
{
    char dict[512];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    assert_true(dl > 0 && (size_t)dl < sizeof dict);
    size_t pre = version == 1 ? 10 : 12;
    size_t hl = sl_round_up(pre + (size_t)dl + 1, 64) - pre; /* numpy pads to 64 and ends with '\n' */
    size_t total = pre + hl + bytes;
    unsigned char *b = malloc(total);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)version;
    b[7] = 0;
    if (version == 1) {
        b[8] = (unsigned char)(hl & 0xff);
        b[9] = (unsigned char)(hl >> 8);
    } else {
        for (int i = 0; i < 4; i++)
            b[8 + i] = (unsigned char)(hl >> (8 * i));
    }
    memset(b + pre, ' ', hl);
    memcpy(b + pre, dict, (size_t)dl);
    b[pre + hl - 1] = '\n';
    if (bytes)
        memcpy(b + pre + hl, data, bytes);
    *len = total;
    return b;
}

void t_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void t_npy_write(const char *path, const char *descr, const char *shape, const void *data, size_t bytes)
{
    size_t len;
    unsigned char *b = t_npy_make(1, descr, shape, data, bytes, &len);
    t_write(path, b, len);
    free(b);
}

void t_gz_write(const char *path, const char *text)
{
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    size_t n = strlen(text);
    if (n)
        assert_int_equal(gzwrite(g, text, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
}

unsigned char *t_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

void t_zip_write(const char *path, const struct t_member *m, size_t n, int flags)
{
    struct archive *a = archive_write_new();
    assert_non_null(a);
    assert_int_equal(archive_write_set_format_zip(a), ARCHIVE_OK);
    if (flags & T_ZIP_DEFLATE)
        assert_int_equal(archive_write_zip_set_compression_deflate(a), ARCHIVE_OK);
    else
        assert_int_equal(archive_write_zip_set_compression_store(a), ARCHIVE_OK);
    if (flags & T_ZIP_ZIP64)
        assert_int_equal(archive_write_set_format_option(a, "zip", "zip64", "1"), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, m[i].name);
        archive_entry_set_size(e, (la_int64_t)m[i].size);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        if (m[i].size)
            assert_int_equal(archive_write_data(a, m[i].data, m[i].size), (la_ssize_t)m[i].size);
        archive_entry_free(e);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

void t_ref_csc(uint64_t n, const uint64_t *src, const uint64_t *dst, size_t e, int flags, uint64_t **indptr,
               uint64_t **indices, size_t *ne)
{
    uint64_t *p = malloc((2 * e + 1) * 2 * sizeof *p); /* (dst, src) pairs */
    assert_non_null(p);
    size_t k = 0;
    for (size_t i = 0; i < e; i++) {
        for (int mirror = 0; mirror < ((flags & T_UNDIRECTED) ? 2 : 1); mirror++) {
            uint64_t s = mirror ? dst[i] : src[i], d = mirror ? src[i] : dst[i];
            if ((flags & T_NO_LOOPS) && s == d)
                continue;
            p[2 * k] = d;
            p[2 * k + 1] = s;
            k++;
        }
    }
    qsort(p, k, 2 * sizeof *p, cmp_pair);
    uint64_t *ip = calloc(n + 1, sizeof *ip), *ix = malloc((k + 1) * sizeof *ix);
    assert_non_null(ip);
    assert_non_null(ix);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if ((flags & T_DEDUPE) && i && p[2 * i] == p[2 * i - 2] && p[2 * i + 1] == p[2 * i - 1])
            continue;
        ip[p[2 * i] + 1]++;
        ix[m++] = p[2 * i + 1];
    }
    for (uint64_t v = 0; v < n; v++)
        ip[v + 1] += ip[v];
    free(p);
    *indptr = ip;
    *indices = ix;
    *ne = m;
}

void t_load_meta(const char *out, struct dataset_meta *m)
{
    char err[1024];
    int rc = dataset_meta_read(out, m, true, err, sizeof err);
    if (rc)
        fail_msg("dataset_meta_read(%s): %s", out, err);
    for (int i = 0; i < DATASET_FILES; i++) {
        char p[4200], e2[256];
        uint64_t h = 0, bytes = 0;
        snprintf(p, sizeof p, "%s/%s", out, m->f[i].file);
        assert_int_equal(file_xxh3(p, &h, &bytes, e2, sizeof e2), 0);
        assert_int_equal(bytes, m->f[i].bytes);
        if (h != m->f[i].xxh3)
            fail_msg("%s: xxh3 %016llx but dataset.toml says %016llx", p, (unsigned long long)h,
                     (unsigned long long)m->f[i].xxh3);
    }
}

static uint64_t id_at(const unsigned char *b, enum dtype t, size_t i)
{
    if (t == DTYPE_U32) {
        uint32_t v;
        memcpy(&v, b + 4 * i, 4);
        return v;
    }
    uint64_t v;
    memcpy(&v, b + 8 * i, 8);
    return v;
}

void t_check_topology(const char *out, const struct dataset_meta *m, const uint64_t *indptr, const uint64_t *indices,
                      size_t ne)
{
    char p[4200];
    size_t len;
    assert_int_equal(m->edges, ne);
    snprintf(p, sizeof p, "%s/%s", out, m->f[DATASET_INDPTR].file);
    unsigned char *b = t_slurp(p, &len);
    assert_int_equal(len, (m->nodes + 1) * 8);
    for (uint64_t v = 0; v <= m->nodes; v++)
        if (id_at(b, DTYPE_U64, v) != indptr[v])
            fail_msg("indptr[%llu] = %llu, expected %llu", (unsigned long long)v,
                     (unsigned long long)id_at(b, DTYPE_U64, v), (unsigned long long)indptr[v]);
    free(b);
    snprintf(p, sizeof p, "%s/%s", out, m->f[DATASET_INDICES].file);
    b = t_slurp(p, &len);
    enum dtype t = m->f[DATASET_INDICES].dtype;
    assert_int_equal(len, ne * dtype_size(t));
    for (size_t i = 0; i < ne; i++)
        if (id_at(b, t, i) != indices[i])
            fail_msg("indices[%zu] = %llu, expected %llu", i, (unsigned long long)id_at(b, t, i),
                     (unsigned long long)indices[i]);
    free(b);
}

void t_check_split(const char *out, const struct dataset_meta *m, int slot, const uint64_t *ids, size_t n)
{
    char p[4200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s", out, m->f[slot].file);
    unsigned char *b = t_slurp(p, &len);
    assert_int_equal(m->f[slot].rows, n);
    assert_int_equal(len, n * dtype_size(m->f[slot].dtype));
    for (size_t i = 0; i < n; i++)
        if (id_at(b, m->f[slot].dtype, i) != ids[i])
            fail_msg("%s[%zu] = %llu, expected %llu", p, i, (unsigned long long)id_at(b, m->f[slot].dtype, i),
                     (unsigned long long)ids[i]);
    free(b);
}

void t_assert_no_output(const char *out)
{
    if (t_exists(out))
        fail_msg("%s exists after a failed import", out);
    char a[4096], b[4096], prefix[512];
    snprintf(a, sizeof a, "%s", out);
    snprintf(b, sizeof b, "%s", out);
    const char *parent = dirname(a), *base = basename(b);
    snprintf(prefix, sizeof prefix, ".%s.partial-", base);
    DIR *d = opendir(parent);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)))
            fail_msg("%s/%s left behind after a failed import", parent, e->d_name);
    closedir(d);
}
