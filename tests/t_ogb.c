/* t_ogb.c - OGB fixtures for the import-ogb tests (see t_ogb.h). */
#include "t_util.h"

#include <math.h>

#include "core/util.h"
#include "t_imp.h"
#include "t_ogb.h"

void t_ogb_gnnprep(char *out, size_t len)
{
    t_bin(out, len, "gnnprep");
    if (!t_exists(out))
        fail_msg("%s not built", out);
}

/* ---- a random graph in memory ---- */
static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

void t_fix_gen(struct t_fix *x, uint64_t n, uint64_t e, uint64_t f, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    x->n = n;
    x->e = e;
    x->f = f;
    x->src = malloc(e * sizeof *x->src);
    x->dst = malloc(e * sizeof *x->dst);
    x->feat = malloc(n * f * sizeof *x->feat);
    x->label = malloc(n * sizeof *x->label);
    uint64_t s = seed;
    for (uint64_t i = 0; i < e; i++) {
        x->src[i] = rng(&s) % n;
        /* skewed destinations, some self loops and repeats */
        x->dst[i] = i % 17 == 0 ? x->src[i] : (rng(&s) % n) * (rng(&s) % n) / n;
        if (i % 13 == 5 && i)
            x->src[i] = x->src[i - 1], x->dst[i] = x->dst[i - 1];
    }
    for (uint64_t i = 0; i < n * f; i++)
        x->feat[i] = (float)((int64_t)(rng(&s) % 2001) - 1000) / 64.0f;
    for (uint64_t v = 0; v < n; v++)
        x->label[v] = v % 5 == 3 ? NAN : (double)(rng(&s) % 7);
    uint64_t *perm = malloc(n * sizeof *perm);
    for (uint64_t v = 0; v < n; v++)
        perm[v] = v;
    for (uint64_t v = n - 1; v > 0; v--) {
        uint64_t j = rng(&s) % (v + 1), t = perm[v];
        perm[v] = perm[j];
        perm[j] = t;
    }
    /* splits hold labelled nodes only, as OGB's do */
    uint64_t nl = 0;
    for (uint64_t v = 0; v < n; v++)
        if (!isnan(x->label[perm[v]]))
            perm[nl++] = perm[v];
    size_t cut[4] = {0, nl / 2, nl / 2 + nl / 5, nl / 2 + nl / 5 + nl / 5};
    for (int k = 0; k < 3; k++) {
        x->ns[k] = cut[k + 1] - cut[k];
        x->split[k] = malloc((x->ns[k] + 1) * sizeof(uint64_t));
        memcpy(x->split[k], perm + cut[k], x->ns[k] * sizeof(uint64_t));
    }
    free(perm);
}

void t_fix_free(struct t_fix *x)
{
    free(x->src);
    free(x->dst);
    free(x->feat);
    free(x->label);
    for (int k = 0; k < 3; k++)
        free(x->split[k]);
}

/* ---- writing OGB's binary layout ---- */
unsigned char *t_npy_of(const char *t, const char *shape, const double *v, size_t n, size_t *len)
{
    size_t isz = t[2] == '8' ? 8 : t[2] == '4' ? 4 : t[2] == '2' ? 2 : 1;
    unsigned char *raw = calloc(n + 1, isz);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(t, "<f8")) {
            memcpy(raw + 8 * i, &v[i], 8);
        } else if (!strcmp(t, "<f4")) {
            float x = (float)v[i];
            memcpy(raw + 4 * i, &x, 4);
        } else if (!strcmp(t, "<f2")) {
            uint16_t h = half_from_f32((float)v[i]);
            memcpy(raw + 2 * i, &h, 2);
        } else if (!strcmp(t, "<i8")) {
            int64_t x = (int64_t)v[i];
            memcpy(raw + 8 * i, &x, 8);
        } else if (!strcmp(t, "<i4")) {
            int32_t x = (int32_t)v[i];
            memcpy(raw + 4 * i, &x, 4);
        } else {
            raw[i] = (unsigned char)v[i]; /* "|O": bytes that are not a pickle */
        }
    }
    unsigned char *b = t_npy_make(1, t, shape, raw, n * isz, len);
    free(raw);
    return b;
}

/* split/NAME/{train,valid,test}.csv.gz, as both layouts have them. */
static void write_splits(const char *dir, const struct t_fix *x, const struct t_wopt *o)
{
    static const char *const names[3] = {"train", "valid", "test"};
    char p[4300];
    for (int s = 0; s < 3; s++) {
        char *text = malloc(x->ns[s] * 24 + 1);
        size_t n = 0;
        text[0] = 0;
        for (size_t i = 0; i < x->ns[s]; i++)
            n += (size_t)sprintf(text + n, "%llu\n", (unsigned long long)x->split[s][i]);
        snprintf(p, sizeof p, "%s/split/%s/%s.csv.gz", dir, o->split ? o->split : "time", names[s]);
        t_gz_write(p, o->split_text[s] ? o->split_text[s] : text);
        free(text);
    }
}

void t_ogb_write(const char *dir, const struct t_fix *x, const struct t_wopt *o)
{
    char p[4300], shape[128];
    snprintf(p, sizeof p, "mkdir -p '%s/raw' '%s/split/%s'", dir, dir, o->split ? o->split : "time");
    assert_int_equal(system(p), 0);
    const char *edge_t = o->edge_t ? o->edge_t : "<i8";
    int rows = o->edge_rows ? o->edge_rows : 2;
    double *ev = malloc((size_t)rows * x->e * sizeof *ev + 8);
    for (uint64_t i = 0; i < x->e; i++) {
        ev[i] = (double)(int64_t)x->src[i];
        ev[x->e + i] = (double)(int64_t)x->dst[i];
        if (rows == 3)
            ev[2 * x->e + i] = 0;
    }
    size_t le, lf, ln, lm, lx;
    snprintf(shape, sizeof shape, "(%d, %llu)", rows, (unsigned long long)x->e);
    unsigned char *me = t_npy_of(edge_t, shape, ev, (size_t)rows * x->e, &le);
    double *fv = malloc(x->n * x->f * sizeof *fv + 8);
    for (uint64_t i = 0; i < x->n * x->f; i++)
        fv[i] = x->feat[i];
    snprintf(shape, sizeof shape, "(%llu, %llu)", (unsigned long long)x->n, (unsigned long long)x->f);
    unsigned char *mf = t_npy_of(o->feat_t ? o->feat_t : "<f4", shape, fv, x->n * x->f, &lf);
    double nn = (double)((int64_t)x->n + o->numnodes_delta), ne = (double)x->e;
    unsigned char *mn = t_npy_of("<i8", "(1,)", &nn, 1, &ln);
    unsigned char *mm = t_npy_of("<i8", "(1,)", &ne, 1, &lm);
    double junk[4] = {0x80, 4, 'N', '.'};
    unsigned char *mx = t_npy_of("|O", "()", junk, 4, &lx); /* edge_feat=None as numpy pickles it */
    struct t_member mem[5];
    size_t k = 0;
    mem[k++] = (struct t_member){"edge_index.npy", me, le};
    mem[k++] = (struct t_member){"edge_feat.npy", mx, lx};
    if (!o->no_feat)
        mem[k++] = (struct t_member){"node_feat.npy", mf, lf - o->feat_cut};
    if (!o->no_numnodes)
        mem[k++] = (struct t_member){"num_nodes_list.npy", mn, ln};
    mem[k++] = (struct t_member){"num_edges_list.npy", mm, lm};
    snprintf(p, sizeof p, "%s/raw/data.npz", dir);
    t_zip_write(p, mem, k, o->zip);

    snprintf(shape, sizeof shape, o->label_1d ? "(%llu,)" : "(%llu, 1)", (unsigned long long)x->n);
    size_t ll;
    unsigned char *ml = t_npy_of(o->label_t ? o->label_t : "<f8", shape, x->label, x->n, &ll);
    struct t_member lm1 = {"node_label.npy", ml, ll};
    snprintf(p, sizeof p, "%s/raw/node-label.npz", dir);
    t_zip_write(p, &lm1, 1, T_ZIP_DEFLATE);

    write_splits(dir, x, o);
    free(ev);
    free(fv);
    free(me);
    free(mf);
    free(mn);
    free(mm);
    free(mx);
    free(ml);
}

/* ---- writing OGB's CSV layout ---- */
typedef struct text {
    char *b;
    size_t n, cap;
    uint64_t line;        /* lines begun so far */
    const struct t_wopt *o;
    int file;             /* T_CSV_* */
} text;

static void text_put(text *t, const char *s)
{
    size_t k = strlen(s);
    if (t->n + k + 1 > t->cap) {
        t->cap = (t->n + k + 1) * 2;
        t->b = realloc(t->b, t->cap);
        assert_non_null(t->b);
    }
    memcpy(t->b + t->n, s, k + 1);
    t->n += k;
}

/* Appends one line (given without its end), or the edit that replaces it. */
static void text_line(text *t, const char *line)
{
    t->line++;
    const struct t_wopt *o = t->o;
    if (o->edit_line == t->line && o->edit_file == t->file) {
        if (!o->edit_text)
            return;
        line = o->edit_text;
    }
    text_put(t, line);
    text_put(t, o->crlf ? "\r\n" : "\n");
}

/* Writes the text (applying an edit one past the last line) and frees it. */
static void text_save(text *t, const char *dir, const char *name)
{
    if (t->o->edit_file == t->file && t->o->edit_line == t->line + 1 && t->o->edit_text)
        text_line(t, t->o->edit_text);
    char p[4300];
    snprintf(p, sizeof p, "%s/raw/%s", dir, name);
    text_put(t, "");
    t_gz_write(p, t->b);
    free(t->b);
}

void t_ogb_write_csv(const char *dir, const struct t_fix *x, const struct t_wopt *o)
{
    char p[4300], line[64];
    snprintf(p, sizeof p, "mkdir -p '%s/raw' '%s/split/%s'", dir, dir, o->split ? o->split : "time");
    assert_int_equal(system(p), 0);

    text t = {.o = o, .file = T_CSV_EDGE};
    for (uint64_t i = 0; i < x->e; i++) {
        snprintf(line, sizeof line, "%llu,%llu", (unsigned long long)x->src[i], (unsigned long long)x->dst[i]);
        text_line(&t, line);
    }
    text_save(&t, dir, "edge.csv.gz");

    t = (text){.o = o, .file = T_CSV_FEAT};
    char *row = malloc(x->f * 24 + 1);
    for (uint64_t v = 0; v < x->n; v++) {
        size_t n = 0;
        for (uint64_t c = 0; c < x->f; c++) {
            const char *sep = c ? "," : "";
            double f = x->feat[v * x->f + c];
            n += (size_t)(c % 2 ? sprintf(row + n, "%s%.8e", sep, f) : sprintf(row + n, "%s%.9g", sep, f));
        }
        text_line(&t, row);
    }
    free(row);
    text_save(&t, dir, "node-feat.csv.gz");

    t = (text){.o = o, .file = T_CSV_LABEL};
    static const char *const nan_text[5] = {"nan", "NaN", "", "-1", "-nan"};
    for (uint64_t v = 0; v < x->n; v++) {
        double l = x->label[v];
        if (isnan(l))
            snprintf(line, sizeof line, "%s", nan_text[v / 5 % 5]); /* v % 5 == 3: every text in turn */
        else if (v % 3 == 0)
            snprintf(line, sizeof line, "%.0f", l);
        else if (v % 3 == 1)
            snprintf(line, sizeof line, "%.1f", l);
        else
            snprintf(line, sizeof line, "%.0e", l);
        text_line(&t, line);
    }
    text_save(&t, dir, "node-label.csv.gz");

    t = (text){.o = o, .file = T_CSV_NUM_NODES};
    snprintf(line, sizeof line, "%lld", (long long)x->n + (long long)o->numnodes_delta);
    text_line(&t, line);
    text_save(&t, dir, "num-node-list.csv.gz");

    t = (text){.o = o, .file = T_CSV_NUM_EDGES};
    snprintf(line, sizeof line, "%lld", (long long)x->e + (long long)o->numedges_delta);
    text_line(&t, line);
    text_save(&t, dir, "num-edge-list.csv.gz");

    write_splits(dir, x, o);
}

/* ---- checking the dataset against the fixture ---- */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Source value as the file held it, then as f32 (what gnnprep converts). */
static float src_value(const char *feat_t, float v)
{
    if (feat_t && !strcmp(feat_t, "<f2"))
        return half_to_f32(half_from_f32(v));
    return v; /* f4 exact; f8 holds the same float exactly */
}

void t_ogb_verify(const char *out, const struct t_fix *x, const struct t_wopt *o, int cflags, enum dtype fdt)
{
    struct dataset_meta m;
    t_load_meta(out, &m);
    assert_int_equal(m.nodes, x->n);
    assert_int_equal(m.feat_dim, x->f);
    assert_int_equal(m.feat_align, DATASET_FEAT_ALIGN);
    double maxl = -1;
    for (uint64_t v = 0; v < x->n; v++)
        if (!isnan(x->label[v]))
            maxl = SL_MAX(maxl, x->label[v]);
    assert_int_equal(m.classes, (uint32_t)maxl + 1);
    assert_non_null(strstr(m.source, "gnnprep import-ogb"));
    /* what gnnprep check demands, the importer delivers */
    char chk[4096], gnnprep[4096];
    t_ogb_gnnprep(gnnprep, sizeof gnnprep);
    if (t_run(chk, sizeof chk, "'%s' check '%s'", gnnprep, out) != 0)
        fail_msg("gnnprep check rejects the import:\n%s", chk);

    uint64_t *ip, *ix;
    size_t ne;
    t_ref_csc(x->n, x->src, x->dst, x->e, cflags, &ip, &ix, &ne);
    t_check_topology(out, &m, ip, ix, ne);
    free(ip);
    free(ix);

    /* features: every value, the zero padding of each row and of the file */
    char p[4200];
    size_t len;
    snprintf(p, sizeof p, "%s/features.bin", out);
    unsigned char *b = t_slurp(p, &len);
    const struct dataset_file *ff = &m.f[DATASET_FEATURES];
    assert_int_equal(ff->dtype, fdt);
    size_t es = dtype_size(fdt);
    assert_int_equal(ff->row_stride, dataset_row_stride(x->f * es, DATASET_FEAT_ALIGN));
    assert_int_equal(len, sl_round_up(x->n * ff->row_stride, DATASET_FEAT_PAD));
    for (uint64_t v = 0; v < x->n; v++) {
        const unsigned char *row = b + v * ff->row_stride;
        for (uint64_t c = 0; c < x->f; c++) {
            float want = src_value(o->feat_t, x->feat[v * x->f + c]);
            if (fdt == DTYPE_F32) {
                float got;
                memcpy(&got, row + 4 * c, 4);
                if (memcmp(&got, &want, 4))
                    fail_msg("feature [%llu][%llu] = %g, expected %g", (unsigned long long)v, (unsigned long long)c,
                             (double)got, (double)want);
            } else {
                uint16_t got, w16 = half_from_f32(want);
                memcpy(&got, row + 2 * c, 2);
                if (got != w16)
                    fail_msg("f16 feature [%llu][%llu] = %04x, expected %04x", (unsigned long long)v,
                             (unsigned long long)c, got, w16);
            }
        }
        for (uint64_t k = x->f * es; k < ff->row_stride; k++)
            if (row[k])
                fail_msg("row %llu: padding byte %llu is not zero", (unsigned long long)v, (unsigned long long)k);
    }
    for (size_t k = x->n * ff->row_stride; k < len; k++)
        if (b[k])
            fail_msg("features.bin: tail byte %zu is not zero", k);
    free(b);

    snprintf(p, sizeof p, "%s/labels.bin", out);
    b = t_slurp(p, &len);
    assert_int_equal(len, 4 * x->n);
    for (uint64_t v = 0; v < x->n; v++) {
        int32_t got, want = isnan(x->label[v]) ? -1 : (int32_t)x->label[v];
        memcpy(&got, b + 4 * v, 4);
        if (got != want)
            fail_msg("label[%llu] = %d, expected %d", (unsigned long long)v, got, want);
    }
    free(b);

    for (int s = 0; s < 3; s++) {
        uint64_t *ids = malloc((x->ns[s] + 1) * sizeof *ids);
        memcpy(ids, x->split[s], x->ns[s] * sizeof *ids);
        qsort(ids, x->ns[s], sizeof *ids, cmp_u64);
        t_check_split(out, &m, DATASET_TRAIN + s, ids, x->ns[s]);
        free(ids);
    }
}
