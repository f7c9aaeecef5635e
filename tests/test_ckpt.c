/* test_ckpt.c - safetensors checkpoints (ops/ckpt.c): round trip of
 * tensors and metadata; a file ckpt_write made, read back by a minimal
 * reader written here (no jansson, no ckpt.c); a file the Python
 * safetensors package wrote (tests/fixtures/ckpt); every kind of damage
 * rejected with a message naming the file and entry; atomic replacement
 * (read-only directory, a write that fails half way); ckpt_latest. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

#include "core/util.h"
#include "ops/ckpt.h"
#include "t_util.h"

static char err[2048];

/* ---- data of the round trip -------------------------------------------- */

static float w_self[3 * 4]; /* (3, 4) */
static float bias[5];       /* (5,): an odd count, so a U64 after it would be misaligned if packed in order */
static uint64_t rng[4];     /* (4,) */
static uint8_t mask[3];     /* (3,) */
static float scalar = 7.5f;

static void fill_data(void)
{
    for (int i = 0; i < 12; i++)
        w_self[i] = (float)i * 0.125f - 0.75f;
    for (int i = 0; i < 5; i++)
        bias[i] = (float)(i * i) - 3.5f;
    rng[0] = 0x0123456789abcdefull;
    rng[1] = UINT64_MAX;
    rng[2] = 0;
    rng[3] = 1ull << 63;
    mask[0] = 1;
    mask[1] = 0;
    mask[2] = 255;
}

#define WEIRD_NAME "we\"ird\\name\n\xc3\xa9"
#define WEIRD_JSON "we\\\"ird\\\\name\\n\xc3\xa9" /* how JSON spells it */
#define CONFIG_VAL "[train]\nlr = 0.01\ttab \"quoted\" back\\slash \x01 ctl"

static const char *const meta_kv[] = {
    "format", "sluice-checkpoint", "version", "1", "epoch", "3", "config", CONFIG_VAL,
};

/* Tensors deliberately not in element-size order. */
static uint32_t make_tensors(struct ckpt_tensor *t)
{
    fill_data();
    uint32_t n = 0;
    t[n++] = (struct ckpt_tensor){"layers.0.b", bias, "F32", 1, {5}};
    t[n++] = (struct ckpt_tensor){"mask", mask, "U8", 1, {3}};
    t[n++] = (struct ckpt_tensor){"rng", rng, "U64", 1, {4}};
    t[n++] = (struct ckpt_tensor){"layers.0.w_self", w_self, "F32", 2, {3, 4}};
    t[n++] = (struct ckpt_tensor){"scalar", &scalar, "F32", 0, {0}};
    t[n++] = (struct ckpt_tensor){"empty", NULL, "F32", 2, {0, 4}};
    t[n++] = (struct ckpt_tensor){WEIRD_NAME, w_self, "F32", 1, {2}};
    return n;
}

static size_t tensor_bytes(const struct ckpt_tensor *t)
{
    size_t b = ckpt_dtype_size(t->dtype);
    for (uint32_t d = 0; d < t->ndim; d++)
        b *= t->shape[d];
    return b;
}

static void write_reference(const char *path)
{
    struct ckpt_tensor t[8];
    uint32_t n = make_tensors(t);
    int rc = ckpt_write(path, t, n, meta_kv, 4, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
}

/* Number of entries in dir other than . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[512], path[600];
    t_scratch(dir, sizeof dir, "ckpt-rt");
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    struct ckpt_tensor t[8];
    uint32_t n = make_tensors(t);
    assert_int_equal(ckpt_write(path, t, n, meta_kv, 4, err, sizeof err), 0);
    assert_int_equal(dir_entries(dir), 1); /* no partial file left */

    struct ckpt c;
    int rc = ckpt_read(&c, path, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(ckpt_count(&c), n);
    for (uint32_t i = 0; i < n; i++) {
        assert_string_equal(ckpt_name(&c, i), t[i].name); /* header keeps the given order */
        uint32_t nd = 99;
        uint64_t sh[CKPT_MAX_NDIM];
        const void *p = ckpt_find(&c, t[i].name, t[i].dtype, &nd, sh);
        assert_non_null(p);
        assert_int_equal(nd, t[i].ndim);
        for (uint32_t d = 0; d < nd; d++)
            assert_int_equal(sh[d], t[i].shape[d]);
        assert_int_equal((uintptr_t)p % ckpt_dtype_size(t[i].dtype), 0);
        if (tensor_bytes(&t[i]))
            assert_memory_equal(p, t[i].data, tensor_bytes(&t[i]));
        const struct ckpt_entry *e = ckpt_entry_at(&c, i);
        assert_string_equal(e->dtype, t[i].dtype);
        assert_int_equal(e->end - e->begin, tensor_bytes(&t[i]));
    }
    assert_null(ckpt_find(&c, "rng", "I64", NULL, NULL)); /* another dtype */
    assert_null(ckpt_find(&c, "nope", "F32", NULL, NULL));
    assert_null(ckpt_name(&c, n));
    assert_string_equal(ckpt_meta(&c, "format"), "sluice-checkpoint");
    assert_string_equal(ckpt_meta(&c, "epoch"), "3");
    assert_string_equal(ckpt_meta(&c, "config"), CONFIG_VAL);
    assert_null(ckpt_meta(&c, "step"));
    ckpt_free(&c);
    ckpt_free(&c); /* twice is harmless */

    /* no tensors, no metadata: an 8-byte "{}" padded header */
    assert_int_equal(ckpt_write(path, NULL, 0, NULL, 0, err, sizeof err), 0);
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    assert_int_equal(ckpt_count(&c), 0);
    assert_int_equal(c.data_len, 0);
    ckpt_free(&c);
    t_rmrf(dir);
}

/* ---- an independent reader ---------------------------------------------- */

struct mini {
    char dtype[16];
    uint32_t ndim;
    uint64_t shape[8];
    uint64_t begin, end;
};

static uint64_t mini_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Integers separated by commas up to ']'; returns the count. */
static uint32_t mini_ints(const char *s, uint64_t *out, uint32_t cap)
{
    uint32_t n = 0;
    assert_int_equal(*s, '[');
    s++;
    while (*s != ']') {
        char *end;
        assert_true(n < cap);
        out[n++] = strtoull(s, &end, 10);
        assert_true(end > s);
        s = end;
        if (*s == ',')
            s++;
    }
    return n;
}

/* Finds "<json_name>":{...} in the header text and parses its fields. */
static void mini_entry(const char *hdr, const char *json_name, struct mini *m)
{
    char key[256];
    snprintf(key, sizeof key, "\"%s\":{", json_name);
    const char *s = strstr(hdr, key);
    assert_non_null(s);
    s += strlen(key) - 1;
    const char *close = strchr(s, '}');
    assert_non_null(close);
    char body[512];
    assert_true((size_t)(close - s) < sizeof body);
    memcpy(body, s, (size_t)(close - s + 1));
    body[close - s + 1] = '\0';
    const char *d = strstr(body, "\"dtype\":\"");
    assert_non_null(d);
    d += 9;
    size_t dl = strcspn(d, "\"");
    assert_true(dl < sizeof m->dtype);
    memcpy(m->dtype, d, dl);
    m->dtype[dl] = '\0';
    const char *sh = strstr(body, "\"shape\":");
    assert_non_null(sh);
    m->ndim = mini_ints(sh + 8, m->shape, 8);
    const char *off = strstr(body, "\"data_offsets\":");
    assert_non_null(off);
    uint64_t o[2];
    assert_int_equal(mini_ints(off + 15, o, 2), 2);
    m->begin = o[0];
    m->end = o[1];
}

static void test_independent_reader(void **state)
{
    (void)state;
    char dir[512], path[600];
    t_scratch(dir, sizeof dir, "ckpt-ind");
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    write_reference(path);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 16];
    size_t size = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(size > 8 && size < sizeof buf);
    uint64_t hlen = mini_le64(buf);
    assert_true(8 + hlen <= size);
    assert_int_equal(hlen % 8, 0);
    static char hdr[1 << 16];
    memcpy(hdr, buf + 8, hlen);
    hdr[hlen] = '\0';
    assert_int_equal(hdr[0], '{');
    size_t last = strlen(hdr);
    while (last && hdr[last - 1] == ' ')
        last--;
    assert_int_equal(hdr[last - 1], '}');
    assert_true(hlen - last < 8); /* padding only to the next multiple of 8 */
    const uint8_t *data = buf + 8 + hlen;
    size_t data_len = size - 8 - hlen;

    assert_non_null(strstr(hdr, "\"__metadata__\":{"));
    assert_non_null(strstr(hdr, "\"format\":\"sluice-checkpoint\""));
    assert_non_null(strstr(hdr, "\"version\":\"1\""));
    assert_non_null(strstr(hdr, "\"config\":\"[train]\\nlr = 0.01\\ttab \\\"quoted\\\" back\\\\slash \\u0001 ctl\""));

    struct ckpt_tensor t[8];
    uint32_t n = make_tensors(t);
    const char *json_names[8];
    for (uint32_t i = 0; i < n; i++)
        json_names[i] = strcmp(t[i].name, WEIRD_NAME) == 0 ? WEIRD_JSON : t[i].name;
    uint64_t covered = 0;
    const char *prev = hdr;
    for (uint32_t i = 0; i < n; i++) {
        struct mini m;
        mini_entry(hdr, json_names[i], &m);
        /* entries appear in the order given */
        char key[256];
        snprintf(key, sizeof key, "\"%s\":{", json_names[i]);
        const char *at = strstr(hdr, key);
        assert_true(at > prev);
        prev = at;
        assert_string_equal(m.dtype, t[i].dtype);
        assert_int_equal(m.ndim, t[i].ndim);
        for (uint32_t d = 0; d < m.ndim; d++)
            assert_int_equal(m.shape[d], t[i].shape[d]);
        assert_int_equal(m.end - m.begin, tensor_bytes(&t[i]));
        assert_true(m.end <= data_len);
        assert_int_equal((8 + hlen + m.begin) % ckpt_dtype_size(t[i].dtype), 0);
        if (tensor_bytes(&t[i]))
            assert_memory_equal(data + m.begin, t[i].data, tensor_bytes(&t[i]));
        covered += m.end - m.begin;
    }
    assert_int_equal(covered, data_len); /* every byte belongs to a tensor */

    /* a few values decoded by hand, little-endian */
    struct mini m;
    mini_entry(hdr, "rng", &m);
    assert_int_equal(mini_le64(data + m.begin + 8), UINT64_MAX);
    assert_int_equal(mini_le64(data + m.begin + 24), 1ull << 63);
    mini_entry(hdr, "layers.0.w_self", &m);
    uint32_t bits = (uint32_t)data[m.begin + 4 * 5] | (uint32_t)data[m.begin + 4 * 5 + 1] << 8 |
                    (uint32_t)data[m.begin + 4 * 5 + 2] << 16 | (uint32_t)data[m.begin + 4 * 5 + 3] << 24;
    float v;
    memcpy(&v, &bits, 4);
    assert_true(v == 5 * 0.125f - 0.75f);
    t_rmrf(dir);
}

/* ---- a file from the Python safetensors package -------------------------- */

static void test_python_fixture(void **state)
{
    (void)state;
    const char *src = getenv("SLUICE_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/ckpt/python.safetensors", src ? src : ".");
    struct ckpt c;
    int rc = ckpt_read(&c, path, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(ckpt_count(&c), 9);
    assert_string_equal(ckpt_meta(&c, "format"), "sluice-checkpoint");
    assert_string_equal(ckpt_meta(&c, "epoch"), "3");
    assert_string_equal(ckpt_meta(&c, "note"), "quote \" backslash \\ newline \n accent \xc3\xa9");

    uint32_t nd;
    uint64_t sh[CKPT_MAX_NDIM];
    const float *w = ckpt_find(&c, "layers.0.w_self", "F32", &nd, sh);
    assert_non_null(w);
    assert_int_equal(nd, 2);
    assert_int_equal(sh[0], 2);
    assert_int_equal(sh[1], 3);
    for (int i = 0; i < 6; i++)
        assert_true(w[i] == (float)i * 0.25f - 0.5f);
    const float *b = ckpt_find(&c, "layers.0.b", "F32", &nd, sh);
    assert_non_null(b);
    assert_int_equal(nd, 1);
    assert_true(b[0] == 1.5f && b[1] == -2.0f && b[2] == 3.25f);
    const float *m = ckpt_find(&c, "adam.m.layers.0.b", "F32", NULL, NULL);
    assert_non_null(m);
    assert_true(m[0] == 1e-3f && m[1] == -1e-3f && m[2] == 0.0f);
    const uint64_t *r = ckpt_find(&c, "rng", "U64", &nd, sh);
    assert_non_null(r);
    assert_true(r[0] == 1 && r[1] == (1ull << 63) + 5);
    const int64_t *ids = ckpt_find(&c, "ids", "I64", NULL, NULL);
    assert_non_null(ids);
    assert_true(ids[0] == -1 && ids[1] == 0 && ids[2] == 7);
    const uint16_t *h = ckpt_find(&c, "half", "F16", NULL, NULL);
    assert_non_null(h);
    assert_true(h[0] == 0x3c00 && h[1] == 0xc000); /* 1.0, -2.0 in binary16 */
    const uint8_t *mk = ckpt_find(&c, "mask", "U8", NULL, NULL);
    assert_non_null(mk);
    assert_true(mk[0] == 3 && mk[1] == 0 && mk[2] == 255);
    const float *s = ckpt_find(&c, "scalar", "F32", &nd, sh);
    assert_non_null(s);
    assert_int_equal(nd, 0);
    assert_true(*s == 42.0f);
    assert_non_null(ckpt_find(&c, "empty", "F32", &nd, sh));
    assert_int_equal(nd, 2);
    assert_int_equal(sh[0], 0);
    assert_int_equal(sh[1], 4);
    ckpt_free(&c);
}

/* ---- damage --------------------------------------------------------------- */

/* Writes 8-byte length + header (padded with spaces to a multiple of 8)
 * + data_len bytes of 0x5a. */
static void put_file(const char *path, const char *hdr, size_t data_len)
{
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    assert_int_equal(fwrite(le, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, hl, f), hl);
    for (size_t i = hl; i < padded; i++)
        fputc(' ', f);
    for (size_t i = 0; i < data_len; i++)
        fputc(0x5a, f);
    assert_int_equal(fclose(f), 0);
}

/* ckpt_read must fail with -EINVAL and a message holding the path and
 * every given fragment; the struct must come back empty. */
static void expect_bad(const char *path, const char *what, const char *frag1, const char *frag2)
{
    struct ckpt c;
    memset(&c, 0x7f, sizeof c);
    int rc = ckpt_read(&c, path, err, sizeof err);
    if (rc != -EINVAL || !strstr(err, path) || !strstr(err, frag1) || (frag2 && !strstr(err, frag2))) {
        fprintf(stderr, "case '%s': rc %d, message: %s\n(want '%s'%s%s)\n", what, rc, err, frag1, frag2 ? ", " : "",
                frag2 ? frag2 : "");
        fail();
    }
    assert_null(c.map);
    assert_null(c.e);
    assert_int_equal(c.n, 0);
    ckpt_free(&c);
}

#define A8 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static const struct bad_case {
    const char *what, *hdr;
    size_t data_len;
    const char *frag1, *frag2;
} bad_cases[] = {
    {"bad JSON", "{" A8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}", 16, "header JSON", NULL},
    {"not an object", "[1, 2]", 0, "does not start with '{'", NULL},
    {"not UTF-8", "{\"\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "header JSON", NULL},
    {"duplicate names", "{" A8 "," A8 "}", 8, "duplicate", "\"a\""},
    {"wrong dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry 'w'",
     "unknown dtype 'F33'"},
    {"lower-case dtype", "{\"w\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry 'w'", "dtype"},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry 'w'", "dtype"},
    {"no dtype", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry 'w'", "dtype"},
    {"entry not an object", "{\"w\":[1]}", 0, "entry 'w'", "not an object"},
    {"unknown field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"offsets\":[0,8]}}", 8, "entry 'w'", "'offsets'"},
    {"shape not an array", "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "entry 'w'", "shape"},
    {"negative shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "entry 'w'", "shape[0]"},
    {"float shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "entry 'w'", "shape[0]"},
    {"too many dimensions", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "entry 'w'",
     "5 dimensions"},
    {"shape overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", 8,
     "entry 'w'", "overflows"},
    {"shape/offset mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "entry 'w'",
     "needs 12 bytes"},
    {"dtype/offset mismatch", "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry 'w'",
     "needs 16 bytes"},
    {"no data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, "entry 'w'", "data_offsets"},
    {"one offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, "entry 'w'", "data_offsets"},
    {"three offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "entry 'w'",
     "data_offsets"},
    {"offset not an integer", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, "entry 'w'",
     "data_offsets"},
    {"end before begin", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "entry 'w'",
     "end before"},
    {"offsets out of range", "{" A8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 12,
     "entry 'b'", "run past the end"},
    {"huge offsets",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775800,9223372036854775807]}}", 8,
     "entry 'w'", "run past the end"},
    {"overlapping offsets", "{" A8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "entry 'b'",
     "overlap those of entry 'a'"},
    {"same offsets", "{" A8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry '",
     "overlap"},
    {"empty tensor inside another", "{" A8 ",\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
     "entry 'a'", "overlap"},
    {"hole", "{" A8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "entry 'b'",
     "[8, 12) of the data buffer unused"},
    {"not starting at 0", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "entry 'w'", "unused"},
    {"trailing bytes", "{" A8 "}", 24, "16 bytes after them", NULL},
    {"data without entries", "{}", 8, "8 bytes after them", NULL},
    {"misaligned",
     "{\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"f\":{\"dtype\":\"F32\",\"shape\":[1],"
     "\"data_offsets\":[2,6]}}",
     6, "entry 'f'", "not aligned"},
    {"metadata not an object", "{\"__metadata__\":[1]," A8 "}", 8, "__metadata__", NULL},
    {"metadata value not a string", "{\"__metadata__\":{\"epoch\":3}," A8 "}", 8, "__metadata__", "'epoch'"},
    {"duplicate metadata key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," A8 "}", 8, "duplicate", "\"k\""},
};

static void test_damage(void **state)
{
    (void)state;
    char dir[512], path[600];
    t_scratch(dir, sizeof dir, "ckpt-bad");
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);

    /* the base of most cases is valid */
    put_file(path, "{" A8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16);
    struct ckpt c;
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    ckpt_free(&c);
    for (size_t i = 0; i < SL_ARRAY_LEN(bad_cases); i++) {
        put_file(path, bad_cases[i].hdr, bad_cases[i].data_len);
        expect_bad(path, bad_cases[i].what, bad_cases[i].frag1, bad_cases[i].frag2);
    }

    /* file-level damage */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    expect_bad(path, "empty file", "shorter than the 8-byte", NULL);
    f = fopen(path, "wb");
    assert_int_equal(fwrite("\x10\0\0\0\0", 1, 5, f), 5);
    assert_int_equal(fclose(f), 0);
    expect_bad(path, "5-byte file", "shorter than the 8-byte", NULL);

    uint8_t raw[64] = {0};
    memcpy(raw + 8, "{}      ", 8);
    raw[0] = 200; /* header length 200 in a 64-byte file */
    f = fopen(path, "wb");
    assert_int_equal(fwrite(raw, 1, sizeof raw, f), sizeof raw);
    assert_int_equal(fclose(f), 0);
    expect_bad(path, "header length past end", "header length 200 runs past the end", NULL);
    raw[0] = 0x01, raw[1] = 0x00, raw[2] = 0x00, raw[3] = 0x01; /* 16 MiB + 1 */
    f = fopen(path, "wb");
    assert_int_equal(fwrite(raw, 1, sizeof raw, f), sizeof raw);
    assert_int_equal(fclose(f), 0);
    expect_bad(path, "header over 16 MiB", "over the limit of 16777216 bytes that Sluice reads", NULL);
    memset(raw, 0xff, 8);
    f = fopen(path, "wb");
    assert_int_equal(fwrite(raw, 1, sizeof raw, f), sizeof raw);
    assert_int_equal(fclose(f), 0);
    expect_bad(path, "header length 2^64-1", "over the limit", NULL);
    memset(raw, 0, 8);
    f = fopen(path, "wb");
    assert_int_equal(fwrite(raw, 1, sizeof raw, f), sizeof raw);
    assert_int_equal(fclose(f), 0);
    expect_bad(path, "header length 0", "does not start with '{'", NULL);

    /* a real checkpoint cut short: the last tensor of the data buffer
     * (the U8 mask: smallest elements come last) runs past the end */
    write_reference(path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 2), 0);
    expect_bad(path, "truncated data", "entry 'mask'", "run past the end");
    assert_int_equal(truncate(path, 20), 0);
    expect_bad(path, "truncated header", "runs past the end", NULL);

    /* not a regular file, and a missing one */
    expect_bad(dir, "a directory", "not a regular file", NULL);
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, path));
    t_rmrf(dir);
}

/* ---- writer arguments ------------------------------------------------------ */

static void test_write_args(void **state)
{
    (void)state;
    char dir[512], path[600];
    t_scratch(dir, sizeof dir, "ckpt-args");
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    static const float v[4] = {1, 2, 3, 4};
    static const struct {
        struct ckpt_tensor t[2];
        uint32_t n;
        const char *frag;
    } cases[] = {
        {{{"a", v, "F32", 1, {4}}, {"a", v, "F32", 1, {2}}}, 2, "'a' given twice"},
        {{{"a", v, "F31", 1, {4}}}, 1, "unknown dtype 'F31'"},
        {{{"a", v, NULL, 1, {4}}}, 1, "unknown dtype"},
        {{{"__metadata__", v, "F32", 1, {4}}}, 1, "reserved name"},
        {{{NULL, v, "F32", 1, {4}}}, 1, "no name"},
        {{{"a", v, "F32", 5, {4}}}, 1, "5 dimensions"},
        {{{"a", NULL, "F32", 1, {4}}}, 1, "'a' has no data"},
        {{{"a", v, "F32", 2, {UINT64_MAX / 2, 4}}}, 1, "too large"},
        {{{"bad\xff", v, "F32", 1, {4}}}, 1, "not valid UTF-8"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        err[0] = '\0';
        int rc = ckpt_write(path, cases[i].t, cases[i].n, NULL, 0, err, sizeof err);
        if (rc != -EINVAL || !strstr(err, cases[i].frag) || !strstr(err, path)) {
            fprintf(stderr, "write case %zu: rc %d: %s (want %s)\n", i, rc, err, cases[i].frag);
            fail();
        }
    }
    struct ckpt_tensor ok = {"a", v, "F32", 1, {4}};
    const char *dup_meta[] = {"k", "1", "k", "2"};
    assert_int_equal(ckpt_write(path, &ok, 1, dup_meta, 2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "'k' given twice"));
    const char *bad_val[] = {"k", "\xc3("};
    assert_int_equal(ckpt_write(path, &ok, 1, bad_val, 1, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not valid UTF-8"));
    assert_int_equal(dir_entries(dir), 0); /* nothing was created */
    t_rmrf(dir);
}

/* ---- atomicity ------------------------------------------------------------- */

static void test_atomic_replace(void **state)
{
    (void)state;
    char dir[512], path[600];
    t_scratch(dir, sizeof dir, "ckpt-atomic");
    snprintf(path, sizeof path, "%s/epoch-000001.safetensors", dir);

    /* an existing checkpoint is replaced whole */
    float a[4] = {1, 2, 3, 4};
    struct ckpt_tensor t1[] = {{"w", a, "F32", 1, {4}}};
    const char *m1[] = {"epoch", "1"};
    assert_int_equal(ckpt_write(path, t1, 1, m1, 1, err, sizeof err), 0);
    write_reference(path);
    struct ckpt c;
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    assert_int_equal(ckpt_count(&c), 7);
    assert_string_equal(ckpt_meta(&c, "epoch"), "3");
    assert_null(ckpt_find(&c, "w", "F32", NULL, NULL));
    ckpt_free(&c);
    assert_int_equal(dir_entries(dir), 1);

    /* a write that fails half way (file size limit: EFBIG) leaves the old
     * checkpoint intact and no partial file */
    size_t big_n = 1 << 18; /* 1 MiB of F32 */
    float *big = calloc(big_n, sizeof *big);
    assert_non_null(big);
    struct ckpt_tensor tb[] = {{"big", big, "F32", 1, {big_n}}};
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 << 10;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = ckpt_write(path, tb, 1, m1, 1, err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    free(big);
    assert_int_equal(rc, -EFBIG);
    assert_non_null(strstr(err, path));
    assert_int_equal(dir_entries(dir), 1);
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    assert_int_equal(ckpt_count(&c), 7);
    assert_string_equal(ckpt_meta(&c, "epoch"), "3");
    const float *w = ckpt_find(&c, "layers.0.w_self", "F32", NULL, NULL);
    assert_non_null(w);
    assert_memory_equal(w, w_self, sizeof w_self);
    ckpt_free(&c);

    /* a link planted where this process's partial file goes is replaced,
     * never followed: the file it points to stays as it was */
    char partial[700], victim[600];
    snprintf(partial, sizeof partial, "%s.partial-%ld", path, (long)getpid());
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *vf = fopen(victim, "w");
    assert_non_null(vf);
    fputs("keep", vf);
    fclose(vf);
    assert_int_equal(symlink(victim, partial), 0);
    assert_int_equal(ckpt_write(path, t1, 1, m1, 1, err, sizeof err), 0);
    char vbuf[16] = {0};
    vf = fopen(victim, "r");
    assert_non_null(vf);
    assert_true(fread(vbuf, 1, sizeof vbuf - 1, vf) == 4);
    fclose(vf);
    assert_string_equal(vbuf, "keep");
    assert_int_equal(access(partial, F_OK), -1);
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    assert_non_null(ckpt_find(&c, "w", "F32", NULL, NULL));
    ckpt_free(&c);

    /* a directory that does not exist */
    snprintf(path, sizeof path, "%s/nodir/epoch-000001.safetensors", dir);
    assert_int_equal(ckpt_write(path, t1, 1, NULL, 0, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, path));
    t_rmrf(dir);
}

/* Root ignores directory permissions, so as root the write runs in a child
 * that has dropped to an unprivileged user. */
static void test_atomic_readonly_dir(void **state)
{
    (void)state;
    char dir[512], ro[600], path[700];
    t_scratch(dir, sizeof dir, "ckpt-ro");
    snprintf(ro, sizeof ro, "%s/ro", dir);
    assert_int_equal(mkdir(ro, 0755), 0);
    snprintf(path, sizeof path, "%s/epoch-000001.safetensors", ro);
    float a[4] = {1, 2, 3, 4};
    struct ckpt_tensor t1[] = {{"w", a, "F32", 1, {4}}};
    assert_int_equal(ckpt_write(path, t1, 1, NULL, 0, err, sizeof err), 0);
    assert_int_equal(chmod(ro, 0555), 0);
    assert_int_equal(chmod(dir, 0755), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
            _exit(77); /* cannot drop privileges here */
        char e[1024] = "";
        float b[2] = {5, 6};
        struct ckpt_tensor t2[] = {{"w", b, "F32", 1, {2}}};
        int rc = ckpt_write(path, t2, 1, NULL, 0, e, sizeof e);
        if (rc != -EACCES || !strstr(e, path)) {
            fprintf(stderr, "read-only dir: rc %d: %s\n", rc, e);
            _exit(1);
        }
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77)
        fprintf(stderr, "test_atomic_readonly_dir: cannot drop root here; only the parent's view is checked\n");
    else
        assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(dir_entries(ro), 1); /* no partial file */
    struct ckpt c;
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    const float *w = ckpt_find(&c, "w", "F32", NULL, NULL);
    assert_non_null(w);
    assert_true(w[0] == 1 && w[3] == 4); /* the old file, whole */
    ckpt_free(&c);
    assert_int_equal(chmod(ro, 0755), 0);
    t_rmrf(dir);
}

/* ---- ckpt_latest ----------------------------------------------------------- */

static void write_epoch(const char *dir, uint32_t epoch)
{
    char path[700], ep[16];
    assert_int_equal(ckpt_path(path, sizeof path, dir, epoch), 0);
    snprintf(ep, sizeof ep, "%u", epoch);
    float v[2] = {(float)epoch, -(float)epoch};
    struct ckpt_tensor t[] = {{"w", v, "F32", 1, {2}}};
    const char *m[] = {"epoch", ep};
    assert_int_equal(ckpt_write(path, t, 1, m, 1, err, sizeof err), 0);
}

static void touch(const char *dir, const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("partial", f);
    assert_int_equal(fclose(f), 0);
}

/* ckpt_latest with stderr captured into warn. */
static int latest(const char *dir, char *path, size_t len, uint32_t *epoch, char *warn, size_t wlen)
{
    char wpath[700];
    snprintf(wpath, sizeof wpath, "%s.stderr", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(wpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    int rc = ckpt_latest(dir, path, len, epoch, err, sizeof err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(wpath, "r");
    assert_non_null(f);
    size_t n = fread(warn, 1, wlen - 1, f);
    warn[n] = '\0';
    fclose(f);
    unlink(wpath);
    return rc;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; (s = strchr(s, '\n')); s++)
        n++;
    return n;
}

static void test_latest(void **state)
{
    (void)state;
    char dir[512], path[700], want[700], warn[4096];
    uint32_t epoch = 0;
    t_scratch(dir, sizeof dir, "ckpt-latest");

    assert_int_equal(ckpt_path(path, sizeof path, "/run/x", 3), 0);
    assert_string_equal(path, "/run/x/epoch-000003.safetensors");
    assert_int_equal(ckpt_path(path, sizeof path, "/run/x/", 1234567), 0);
    assert_string_equal(path, "/run/x/epoch-1234567.safetensors");
    assert_int_equal(ckpt_path(path, 10, "/run/x", 3), -ENAMETOOLONG);

    assert_int_equal(latest(dir, path, sizeof path, &epoch, warn, sizeof warn), -ENOENT);
    assert_non_null(strstr(err, dir));
    snprintf(want, sizeof want, "%s/none", dir);
    assert_int_equal(latest(want, path, sizeof path, &epoch, warn, sizeof warn), -ENOENT);

    write_epoch(dir, 1);
    write_epoch(dir, 2);
    write_epoch(dir, 10);
    assert_int_equal(latest(dir, path, sizeof path, &epoch, warn, sizeof warn), 0);
    assert_int_equal(epoch, 10);
    assert_int_equal(ckpt_path(want, sizeof want, dir, 10), 0);
    assert_string_equal(path, want);
    assert_string_equal(warn, "");

    /* a damaged newer one is skipped with a warning naming it */
    assert_int_equal(ckpt_path(want, sizeof want, dir, 11), 0);
    write_epoch(dir, 11);
    assert_int_equal(truncate(want, 30), 0);
    assert_int_equal(latest(dir, path, sizeof path, &epoch, warn, sizeof warn), 0);
    assert_int_equal(epoch, 10);
    assert_non_null(strstr(warn, "skipping damaged checkpoint"));
    assert_non_null(strstr(warn, want));
    assert_int_equal(count_lines(warn), 1);

    /* leftovers: a dead writer's partial file is deleted, a live one's is
     * kept; names that are not checkpoints are ignored */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    char dead[128], live[128];
    snprintf(dead, sizeof dead, "epoch-000012.safetensors.partial-%ld", (long)child);
    snprintf(live, sizeof live, "epoch-000013.safetensors.partial-%ld", (long)getpid());
    touch(dir, dead);
    touch(dir, live);
    touch(dir, "epoch-99.safetensors");
    touch(dir, "epoch-000099.safetensors.bak");
    touch(dir, "notes.txt");
    assert_int_equal(latest(dir, path, sizeof path, &epoch, warn, sizeof warn), 0);
    assert_int_equal(epoch, 10);
    snprintf(want, sizeof want, "%s/%s", dir, dead);
    assert_false(t_exists(want));
    snprintf(want, sizeof want, "%s/%s", dir, live);
    assert_true(t_exists(want));

    /* more than six digits */
    write_epoch(dir, 1000000);
    assert_int_equal(latest(dir, path, sizeof path, &epoch, warn, sizeof warn), 0);
    assert_int_equal(epoch, 1000000);
    assert_non_null(strstr(path, "epoch-1000000.safetensors"));

    /* a path buffer too small */
    assert_int_equal(latest(dir, path, 16, &epoch, warn, sizeof warn), -ENAMETOOLONG);

    /* all damaged: -ENOENT, one warning each */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "for f in '%s'/epoch-*.safetensors; do truncate -s 12 \"$f\"; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(latest(dir, path, sizeof path, &epoch, warn, sizeof warn), -ENOENT);
    assert_int_equal(count_lines(warn), 5); /* epochs 1, 2, 10, 11, 1000000 */
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),          cmocka_unit_test(test_independent_reader),
        cmocka_unit_test(test_python_fixture),      cmocka_unit_test(test_damage),
        cmocka_unit_test(test_write_args),          cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_atomic_readonly_dir), cmocka_unit_test(test_latest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
