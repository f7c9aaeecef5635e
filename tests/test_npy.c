/* test_npy.c - the .npy header parser (table-driven: every version, shape
 * and dtype, and malformed headers), the streaming reader over files and
 * .npz members (stored, deflated, zip64; truncated, damaged and missing
 * members) and element conversion. */
#include <errno.h>
#include <math.h>

#include "t_util.h"
#include "t_imp.h"
#include "core/util.h"
#include "prep/npy.h"
#include "prep/npz.h"

static char err[2048];

/* Header bytes: prelude of the version + dict text, padded with spaces to
 * a multiple of 64 and ended with '\n' (as numpy writes them). */
static size_t make_hdr(unsigned char *b, size_t cap, int major, int minor, const char *dict)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hl = sl_round_up(pre + dl + 1, 64) - pre;
    assert_true(pre + hl <= cap);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = (unsigned char)minor;
    for (size_t i = 0; i < (major == 1 ? 2u : 4u); i++)
        b[8 + i] = (unsigned char)(hl >> (8 * i));
    memset(b + pre, ' ', hl);
    memcpy(b + pre, dict, dl);
    b[pre + hl - 1] = '\n';
    return pre + hl;
}

static const struct good_case {
    int version;
    const char *dict;
    enum npy_type type;
    int ndim;
    uint64_t shape[3];
    uint64_t count;
} good[] = {
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", NPY_F32, 2, {3, 4}, 12},
    {2, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", NPY_I64, 1, {5}, 5},
    {3, "{'descr': '<u2', 'fortran_order': False, 'shape': (), }", NPY_U16, 0, {0}, 1},
    {1, "{'shape': (2, 3, 4), 'fortran_order': False, 'descr': '<f8'}", NPY_F64, 3, {2, 3, 4}, 24},
    {1, "{\"descr\": \"|b1\", \"fortran_order\": False, \"shape\": (0,)}", NPY_BOOL, 1, {0}, 0},
    {1, "{'descr':'|i1','fortran_order':False,'shape':(7,)}", NPY_I8, 1, {7}, 7},
    {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 0), }", NPY_U8, 2, {2, 0}, 0},
    {1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 1), }", NPY_F16, 2, {1, 1}, 1},
    {1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3L, 4L), }", NPY_I16, 2, {3, 4}, 12},
    {2, "{'descr': '<i4', 'fortran_order': False, 'shape': (10, 1,), }", NPY_I32, 2, {10, 1}, 10},
    {1,
     "{'descr': '<u4', 'fortran_order': False, 'shape': (4294967296,), }",
     NPY_U32,
     1,
     {4294967296ull},
     4294967296ull},
    {3, "{'descr': '<u8', 'fortran_order': False, 'shape': ( 2 , 2 ) }", NPY_U64, 2, {2, 2}, 4},
    {1, "{'descr': '>i1', 'fortran_order': False, 'shape': (1,), }", NPY_I8, 1, {1}, 1},
};

static void test_header_good(void **state)
{
    (void)state;
    for (size_t i = 0; i < SL_ARRAY_LEN(good); i++) {
        unsigned char b[512];
        size_t n = make_hdr(b, sizeof b, good[i].version, 0, good[i].dict);
        struct npy_hdr h;
        int rc = npy_parse_header(b, n, &h, err, sizeof err);
        if (rc)
            fail_msg("case %zu (%s): %s", i, good[i].dict, err);
        assert_int_equal(h.version, (unsigned)good[i].version);
        assert_int_equal(h.type, good[i].type);
        assert_int_equal(h.ndim, good[i].ndim);
        for (int d = 0; d < h.ndim; d++)
            assert_int_equal(h.shape[d], good[i].shape[d]);
        assert_int_equal(h.count, good[i].count);
        assert_int_equal(h.header_bytes, n);
        assert_int_equal(h.itemsize, npy_type_size(good[i].type));
        assert_int_equal(h.data_bytes, good[i].count * h.itemsize);
        assert_int_equal(n % 64, 0);
        /* every prefix of a header is rejected, never read past */
        for (size_t k = 0; k < n; k++)
            assert_int_equal(npy_parse_header(b, k, &h, err, sizeof err), -EINVAL);
    }
}

static const struct bad_case {
    int major, minor;
    const char *dict;
    const char *want; /* substring of the message */
} bad[] = {
    {4, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "version 4.0"},
    {1, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "version 1.1"},
    {0, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "version 0.0"},
    {1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", "fortran_order is True"},
    {1, 0, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", "big-endian"},
    {1, 0, "{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", "big-endian"},
    {1, 0, "{'descr': '=f4', 'fortran_order': False, 'shape': (3,), }", "byte order"},
    {1, 0, "{'descr': '|f4', 'fortran_order': False, 'shape': (3,), }", "byte order"},
    {1, 0, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "object"},
    {1, 0, "{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }", "strings"},
    {1, 0, "{'descr': '|S5', 'fortran_order': False, 'shape': (3,), }", "strings"},
    {1, 0, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "complex"},
    {1, 0, "{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (3,), }", "dates"},
    {1, 0, "{'descr': '|V8', 'fortran_order': False, 'shape': (3,), }", "structured"},
    {1, 0, "{'descr': '<f3', 'fortran_order': False, 'shape': (3,), }", "not supported"},
    {1, 0, "{'descr': '<i16', 'fortran_order': False, 'shape': (3,), }", "not supported"},
    {1, 0, "{'descr': 'f4', 'fortran_order': False, 'shape': (3,), }", "not supported"},
    {1, 0, "{'descr': '', 'fortran_order': False, 'shape': (3,), }", "not supported"},
    {1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", "structured"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, }", "'shape' key is missing"},
    {1, 0, "{'fortran_order': False, 'shape': (3,), }", "'descr' key is missing"},
    {1, 0, "{'descr': '<f4', 'shape': (3,), }", "'fortran_order' key is missing"},
    {1, 0, "{}", "missing"},
    {1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "given twice"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (3,)}", "given twice"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", "unknown key"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "negative"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,), }", "shape"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", "trailing comma"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (03,), }", "leading zero"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': [3, 4], }", "tuple"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,,), }", "integer"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "too large"},
    {1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", "too large"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", "too large"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x", "after the dict"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }}", "after the dict"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "expected ',' or '}'"},
    {1, 0, "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", "expected ',' or '}'"},
    {1, 0, "{'descr: '<f4', 'fortran_order': False, 'shape': (3,)}", "':'"},
    {1, 0, "{'descr': '<f4\n', 'fortran_order': False, 'shape': (3,)}", "unexpected character"},
    {1, 0, "{'descr': '<f\\4', 'fortran_order': False, 'shape': (3,)}", "unexpected character"},
    {1, 0, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}", "True or False"},
    {1, 0, "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "True or False"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
           "1,1,1,1,1,1,1)}", "too many dimensions"},
    {1, 0, "['descr', '<f4']", "expected '{'"},
    {1, 0, "", "expected '{'"},
    {1, 0, "{descr: '<f4'}", "quoted string"},
};

static void test_header_bad(void **state)
{
    (void)state;
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        unsigned char b[512];
        size_t n = make_hdr(b, sizeof b, bad[i].major, bad[i].minor, bad[i].dict);
        struct npy_hdr h;
        err[0] = 0;
        int rc = npy_parse_header(b, n, &h, err, sizeof err);
        if (rc != -EINVAL || !strstr(err, bad[i].want))
            fail_msg("case %zu (%s): rc %d, message \"%s\", expected \"%s\"", i, bad[i].dict, rc, err, bad[i].want);
    }
}

static void test_prelude_bad(void **state)
{
    (void)state;
    uint64_t total;
    struct npy_hdr h;
    unsigned char b[64] = "\x93NUMPX\x01\x00\x10\x00";
    assert_int_equal(npy_prelude(b, 10, &total, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a .npy file"));
    assert_int_equal(npy_parse_header("PK\x03\x04", 4, &h, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a .npy file"));
    assert_int_equal(npy_parse_header("\x93NUM", 4, &h, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "truncated"));
    assert_int_equal(npy_parse_header("", 0, &h, err, sizeof err), -EINVAL);
    /* a version 1 header length of 0 or 1 cannot hold a dict */
    memcpy(b, "\x93NUMPY\x01\x00\x00\x00", 10);
    assert_int_equal(npy_prelude(b, 10, &total, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "too short"));
    /* length beyond the accepted maximum (v2: 32-bit length) */
    memcpy(b, "\x93NUMPY\x02\x00\x00\x00\x10\x00", 12);
    assert_int_equal(npy_prelude(b, 12, &total, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "longer than"));
    memcpy(b, "\x93NUMPY\x03\x00\xff\xff\xff\xff", 12);
    assert_int_equal(npy_prelude(b, 12, &total, err, sizeof err), -EINVAL);
    /* length past the bytes given */
    memcpy(b, "\x93NUMPY\x01\x00\xf6\x00", 10);
    assert_int_equal(npy_prelude(b, 10, &total, err, sizeof err), 0);
    assert_int_equal(total, 256);
    assert_int_equal(npy_parse_header(b, 64, &h, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "truncated: the .npy header needs 256 bytes, found 64"));
}

/* ---- reader over files ---- */

static void test_file_read(void **state)
{
    (void)state;
    char dir[4096], p[4200];
    t_scratch(dir, sizeof dir, "npy-file");
    snprintf(p, sizeof p, "%s/a.npy", dir);
    float v[3 * 5];
    for (int i = 0; i < 15; i++)
        v[i] = (float)i * 0.25f - 1.0f;
    for (int version = 1; version <= 3; version++) {
        size_t len;
        unsigned char *b = t_npy_make(version, "<f4", "(3, 5)", v, sizeof v, &len);
        t_write(p, b, len);
        struct npy r;
        assert_int_equal(npy_open(&r, p, err, sizeof err), 0);
        assert_int_equal(r.h.version, (unsigned)version);
        assert_int_equal(r.h.count, 15);
        float got[15];
        assert_int_equal(npy_read(&r, got, 7 * 4, err, sizeof err), 0);
        assert_int_equal(npy_skip(&r, 4, err, sizeof err), 0);
        assert_int_equal(npy_read(&r, got + 8, 7 * 4, err, sizeof err), 0);
        assert_int_equal(memcmp(got, v, 7 * 4), 0);
        assert_int_equal(memcmp(got + 8, v + 8, 7 * 4), 0);
        /* reading past the end is refused */
        assert_int_equal(npy_read(&r, got, 4, err, sizeof err), -EINVAL);
        assert_int_equal(npy_end(&r, err, sizeof err), 0);
        npy_close(&r);
        npy_close(&r); /* twice is safe */

        /* truncated by 3 bytes: the message gives both sizes */
        t_write(p, b, len - 3);
        assert_int_equal(npy_open(&r, p, err, sizeof err), -EINVAL);
        char want[256];
        snprintf(want, sizeof want, "truncated: expected %zu bytes, found %zu", len, len - 3);
        if (!strstr(err, want) || !strstr(err, p))
            fail_msg("message \"%s\" lacks \"%s\"", err, want);
        /* cut inside the header */
        t_write(p, b, 40);
        assert_int_equal(npy_open(&r, p, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "truncated"));
        /* trailing bytes */
        unsigned char *longer = malloc(len + 5);
        memcpy(longer, b, len);
        memset(longer + len, 0, 5);
        t_write(p, longer, len + 5);
        assert_int_equal(npy_open(&r, p, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "5 bytes after"));
        free(longer);
        free(b);
    }
    snprintf(p, sizeof p, "%s/missing.npy", dir);
    struct npy r;
    assert_int_equal(npy_open(&r, p, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "missing.npy"));
    assert_int_equal(npy_open(&r, dir, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a regular file"));
    snprintf(p, sizeof p, "%s/empty.npy", dir);
    t_write(p, "", 0);
    assert_int_equal(npy_open(&r, p, err, sizeof err), -EINVAL);
    t_rmrf(dir);
}

/* ---- reader over npz members ---- */

#define NE 3000

static void test_npz_members(void **state)
{
    (void)state;
    char dir[4096], p[4200];
    t_scratch(dir, sizeof dir, "npz");
    snprintf(p, sizeof p, "%s/d.npz", dir);
    static int64_t ei[2 * NE];
    for (int i = 0; i < 2 * NE; i++)
        ei[i] = (int64_t)i * 7919 % 100003;
    float feat[10 * 3];
    for (int i = 0; i < 30; i++)
        feat[i] = (float)i / 3.0f;
    size_t l1, l2;
    unsigned char *m1 = t_npy_make(1, "<i8", "(2, 3000)", ei, sizeof ei, &l1);
    unsigned char *m2 = t_npy_make(2, "<f4", "(10, 3)", feat, sizeof feat, &l2);
    const struct t_member mem[] = {{"edge_index.npy", m1, l1}, {"node_feat.npy", m2, l2}, {"readme.txt", "hello", 5}};
    for (int flags = 0; flags < 4; flags++) {
        t_zip_write(p, mem, 3, flags);
        /* two cursors over the same member: sources, then destinations */
        struct npy a, b;
        assert_int_equal(npy_open_npz(&a, p, "edge_index.npy", false, err, sizeof err), 0);
        assert_int_equal(npy_open_npz(&b, p, "edge_index.npy", false, err, sizeof err), 0);
        assert_int_equal(a.h.type, NPY_I64);
        assert_int_equal(a.h.shape[1], NE);
        assert_int_equal(npy_skip(&b, NE * 8, err, sizeof err), 0);
        for (int off = 0; off < NE;) {
            int k = SL_MIN(NE - off, 777);
            int64_t s[777], d[777];
            assert_int_equal(npy_read(&a, s, (size_t)k * 8, err, sizeof err), 0);
            assert_int_equal(npy_read(&b, d, (size_t)k * 8, err, sizeof err), 0);
            for (int i = 0; i < k; i++) {
                if (s[i] != ei[off + i] || d[i] != ei[NE + off + i])
                    fail_msg("flags %d: edge %d differs", flags, off + i);
            }
            off += k;
        }
        assert_int_equal(npy_end(&b, err, sizeof err), 0);
        npy_close(&a);
        npy_close(&b);
        assert_int_equal(npy_open_npz(&a, p, "node_feat.npy", false, err, sizeof err), 0);
        float got[30];
        assert_int_equal(npy_read(&a, got, sizeof got, err, sizeof err), 0);
        assert_int_equal(memcmp(got, feat, sizeof got), 0);
        assert_int_equal(npy_end(&a, err, sizeof err), 0);
        npy_close(&a);
        /* absent members */
        assert_int_equal(npy_open_npz(&a, p, "num_nodes_list.npy", true, err, sizeof err), 1);
        npy_close(&a);
        assert_int_equal(npy_open_npz(&a, p, "node_label.npy", false, err, sizeof err), -ENOENT);
        if (!strstr(err, "d.npz") || !strstr(err, "node_label.npy") || !strstr(err, "edge_index.npy, node_feat.npy"))
            fail_msg("flags %d: message \"%s\"", flags, err);
        /* a member that is not an npy */
        assert_int_equal(npy_open_npz(&a, p, "readme.txt", false, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "readme.txt"));
    }
    free(m1);
    free(m2);
    t_rmrf(dir);
}

static void test_npz_bad(void **state)
{
    (void)state;
    char dir[4096], p[4200];
    t_scratch(dir, sizeof dir, "npz-bad");
    snprintf(p, sizeof p, "%s/d.npz", dir);
    struct npy r;
    /* not a zip at all, an empty file, a missing file */
    t_write(p, "this is not a zip archive, just text\n", 37);
    assert_int_equal(npy_open_npz(&r, p, "a.npy", false, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "not a valid zip archive"));
    t_write(p, "", 0);
    assert_true(npy_open_npz(&r, p, "a.npy", false, err, sizeof err) < 0);
    assert_non_null(strstr(err, "d.npz"));
    snprintf(p, sizeof p, "%s/none.npz", dir);
    assert_int_equal(npy_open_npz(&r, p, "a.npy", false, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "none.npz"));
    snprintf(p, sizeof p, "%s/d.npz", dir);

    int32_t v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = i * 3;
    size_t len;
    unsigned char *m = t_npy_make(1, "<i4", "(1000,)", v, sizeof v, &len);
    for (int flags = 0; flags < 2; flags++) {
        /* a member whose npy is shorter than its header says */
        struct t_member short_m = {"a.npy", m, len - 8};
        t_zip_write(p, &short_m, 1, flags);
        assert_int_equal(npy_open_npz(&r, p, "a.npy", false, err, sizeof err), -EINVAL);
        char want[128];
        snprintf(want, sizeof want, "truncated: expected %zu bytes, found %zu", len, len - 8);
        if (!strstr(err, want) || !strstr(err, "d.npz: a.npy"))
            fail_msg("flags %d: \"%s\"", flags, err);
        /* the archive cut short: the central directory is gone */
        struct t_member ok = {"a.npy", m, len};
        t_zip_write(p, &ok, 1, flags);
        size_t zl;
        unsigned char *z = t_slurp(p, &zl);
        t_write(p, z, zl / 2);
        int rc = npy_open_npz(&r, p, "a.npy", false, err, sizeof err);
        if (rc == 0) {
            int32_t got[1000];
            rc = npy_read(&r, got, sizeof got, err, sizeof err);
            if (rc == 0)
                rc = npy_end(&r, err, sizeof err);
            npy_close(&r);
        }
        assert_int_equal(rc, -EBADMSG);
        assert_non_null(strstr(err, "d.npz"));
        /* one flipped byte in the member's data: the CRC (stored) or the
         * inflate stream (deflate) catches it by the end */
        unsigned char *zc = malloc(zl);
        memcpy(zc, z, zl);
        size_t at = 30 + strlen("a.npy") + 200;
        zc[at] ^= 0x5a;
        t_write(p, zc, zl);
        rc = npy_open_npz(&r, p, "a.npy", false, err, sizeof err);
        if (rc == 0) {
            int32_t got[1000];
            rc = npy_read(&r, got, sizeof got, err, sizeof err);
            if (rc == 0)
                rc = npy_end(&r, err, sizeof err);
            npy_close(&r);
        }
        if (rc != -EBADMSG && rc != -EINVAL)
            fail_msg("flags %d: a damaged member read back with rc %d", flags, rc);
        assert_non_null(strstr(err, "d.npz"));
        free(zc);
        free(z);
    }
    free(m);
    t_rmrf(dir);
}

static void test_convert(void **state)
{
    (void)state;
    const uint16_t h[4] = {0x3c00, 0xc000, 0x3555, 0x7c00}; /* 1, -2, ~0.333, inf */
    float f[4];
    npy_to_f32(NPY_F16, h, f, 4);
    assert_true(f[0] == 1.0f && f[1] == -2.0f && fabsf(f[2] - 0.33325195f) < 1e-7f && isinf(f[3]));
    const double d[2] = {0.1, -3.5};
    npy_to_f32(NPY_F64, d, f, 2);
    assert_true(f[0] == 0.1f && f[1] == -3.5f);
    int64_t out[3];
    const uint64_t u[3] = {0, 1ull << 40, UINT64_MAX};
    assert_int_equal(npy_to_i64(NPY_U64, u, out, 3), 0);
    assert_true(out[0] == 0 && out[1] == (int64_t)1 << 40 && out[2] == INT64_MAX);
    const int8_t s8[3] = {-1, 127, -128};
    assert_int_equal(npy_to_i64(NPY_I8, s8, out, 3), 0);
    assert_true(out[0] == -1 && out[1] == 127 && out[2] == -128);
    const unsigned char bl[3] = {0, 1, 7};
    assert_int_equal(npy_to_i64(NPY_BOOL, bl, out, 3), 0);
    assert_true(out[0] == 0 && out[1] == 1 && out[2] == 1);
    assert_int_equal(npy_to_i64(NPY_F32, f, out, 1), -EINVAL);
    /* unaligned source */
    unsigned char raw[1 + 8];
    int32_t x = -123456;
    memcpy(raw + 1, &x, 4);
    assert_int_equal(npy_to_i64(NPY_I32, raw + 1, out, 1), 0);
    assert_int_equal(out[0], -123456);
    double dd[1];
    npy_to_f64(NPY_I32, raw + 1, dd, 1);
    assert_true(dd[0] == -123456.0);
    char sh[64];
    struct npy_hdr hh = {.ndim = 1, .shape = {5}};
    assert_string_equal(npy_shape_str(&hh, sh, sizeof sh), "(5,)");
    hh.ndim = 2;
    hh.shape[1] = 3;
    assert_string_equal(npy_shape_str(&hh, sh, sizeof sh), "(5, 3)");
    assert_string_equal(npy_type_name(NPY_U16), "uint16");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_good), cmocka_unit_test(test_header_bad), cmocka_unit_test(test_prelude_bad),
        cmocka_unit_test(test_file_read),   cmocka_unit_test(test_npz_members), cmocka_unit_test(test_npz_bad),
        cmocka_unit_test(test_convert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
