/* test_csc.c - the edge list -> CSC converter (prep/csc.c): against a naive
 * reference for every option combination, out-of-core (many runs, multi-pass
 * merges, wide records) equal to in-memory byte for byte, tiny and empty
 * graphs, id range errors with their stream position, write errors, the
 * memory floor, and run files never left behind. */
#include <dirent.h>
#include <errno.h>

#include "t_util.h"
#include "core/dataset.h"
#include "core/util.h"
#include "prep/csc.h"

#define MiB (1ull << 20)

static char err[1024];

enum { F_UNDIRECTED = 1, F_DEDUPE = 2, F_DROP_LOOPS = 4, F_ALL = 8 };

static const char *flag_str(unsigned f)
{
    static char s[96];
    snprintf(s, sizeof s, "undirected=%d dedupe=%d drop_self_loops=%d", !!(f & F_UNDIRECTED), !!(f & F_DEDUPE),
             !!(f & F_DROP_LOOPS));
    return s;
}

/* ---- random graphs ---- */

static uint64_t t_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct t_graph {
    uint64_t nodes;
    size_t m;
    uint64_t *src, *dst; /* (m) */
} t_graph;

/* m random edges over n nodes: a share repeat earlier edges, some are
 * self-loops, and a few hub destinations collect many edges. */
static t_graph t_graph_make(uint64_t nodes, size_t m, uint64_t seed)
{
    t_graph g = {.nodes = nodes, .m = m, .src = malloc((m + 1) * 8), .dst = malloc((m + 1) * 8)};
    assert_non_null(g.src);
    assert_non_null(g.dst);
    uint64_t s = seed;
    for (size_t i = 0; i < m; i++) {
        uint64_t r = t_rand(&s) % 100;
        if (i > 0 && r < 15) {
            size_t j = t_rand(&s) % i;
            g.src[i] = g.src[j];
            g.dst[i] = g.dst[j];
            if (r < 5) { /* the reverse of an earlier edge */
                g.src[i] = g.dst[j];
                g.dst[i] = g.src[j];
            }
            continue;
        }
        g.src[i] = t_rand(&s) % nodes;
        g.dst[i] = r < 25 ? t_rand(&s) % (nodes < 8 ? nodes : 8) : t_rand(&s) % nodes;
        if (r >= 95)
            g.dst[i] = g.src[i];
    }
    return g;
}

static void t_graph_free(t_graph *g)
{
    free(g->src);
    free(g->dst);
}

/* ---- the naive reference: collect, qsort, unique, count ---- */

typedef struct t_edge {
    uint64_t dst, src;
} t_edge;

static int edge_cmp(const void *a, const void *b)
{
    const t_edge *x = a, *y = b;
    if (x->dst != y->dst)
        return x->dst < y->dst ? -1 : 1;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return 0;
}

typedef struct t_csc {
    uint64_t *indptr; /* (nodes + 1) */
    uint64_t *indices; /* (edges) */
    uint64_t edges;
} t_csc;

static t_csc reference(const t_graph *g, unsigned f)
{
    t_edge *e = malloc((2 * g->m + 1) * sizeof *e);
    assert_non_null(e);
    size_t n = 0;
    for (size_t i = 0; i < g->m; i++) {
        if ((f & F_DROP_LOOPS) && g->src[i] == g->dst[i])
            continue;
        e[n++] = (t_edge){g->dst[i], g->src[i]};
        if (f & F_UNDIRECTED)
            e[n++] = (t_edge){g->src[i], g->dst[i]};
    }
    qsort(e, n, sizeof *e, edge_cmp);
    if ((f & F_DEDUPE) && n) {
        size_t k = 1;
        for (size_t i = 1; i < n; i++)
            if (edge_cmp(&e[i], &e[k - 1]) != 0)
                e[k++] = e[i];
        n = k;
    }
    t_csc r = {.indptr = calloc(g->nodes + 1, 8), .indices = malloc((n + 1) * 8), .edges = n};
    assert_non_null(r.indptr);
    assert_non_null(r.indices);
    for (size_t i = 0; i < n; i++) {
        r.indices[i] = e[i].src;
        r.indptr[e[i].dst + 1]++;
    }
    for (uint64_t v = 0; v < g->nodes; v++)
        r.indptr[v + 1] += r.indptr[v];
    free(e);
    return r;
}

/* ---- running the builder ---- */

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* Entries in a directory other than . and .. */
static int dir_count(const char *path)
{
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

typedef struct t_out {
    char indptr[4200], indices[4200];
    struct dataset_file fp, fi;
    uint64_t edges;
    struct csc_stats st;
} t_out;

typedef struct t_cfg {
    uint64_t mem;
    bool wide;
    unsigned fanin;
    size_t batch;
} t_cfg;

/* Converts g with options f and config k into dir/<tag>.{indptr,indices},
 * with run files in dir/tmp, which must be empty afterwards. */
static t_out convert(const char *dir, const char *tag, const t_graph *g, unsigned f, t_cfg k)
{
    t_out r;
    memset(&r, 0, sizeof r);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/tmp", dir);
    mkdir(tmp, 0755);
    snprintf(r.indptr, sizeof r.indptr, "%s/%s.indptr", dir, tag);
    snprintf(r.indices, sizeof r.indices, "%s/%s.indices", dir, tag);
    struct csc_opts o = {.nodes = g->nodes,
                         .mem_limit = k.mem,
                         .undirected = f & F_UNDIRECTED,
                         .dedupe = f & F_DEDUPE,
                         .drop_self_loops = f & F_DROP_LOOPS,
                         .tmpdir = tmp,
                         .force_wide = k.wide,
                         .max_fanin = k.fanin};
    struct csc *c;
    int rc = csc_init(&c, &o, err, sizeof err);
    if (rc)
        fail_msg("init: %s (%s)", err, flag_str(f));
    size_t batch = k.batch ? k.batch : g->m;
    for (size_t i = 0; i < g->m; i += batch) {
        size_t n = SL_MIN(batch, g->m - i);
        rc = csc_add(c, g->src + i, g->dst + i, n, err, sizeof err);
        if (rc)
            fail_msg("add: %s (%s)", err, flag_str(f));
    }
    rc = csc_finish(c, r.indptr, r.indices, &r.fp, &r.fi, &r.edges, err, sizeof err);
    if (rc)
        fail_msg("finish: %s (%s)", err, flag_str(f));
    csc_stats_get(c, &r.st);
    csc_free(c);
    if (dir_count(tmp) != 0)
        fail_msg("run files left in %s (%s)", tmp, flag_str(f));
    if (r.st.peak_bytes > k.mem)
        fail_msg("peak %llu bytes above mem_limit %llu (%s)", (unsigned long long)r.st.peak_bytes,
                 (unsigned long long)k.mem, flag_str(f));
    return r;
}

/* The files match the reference, and their dataset entries the files. */
static void check_against(const t_out *r, const t_graph *g, unsigned f, const char *what)
{
    t_csc ref = reference(g, f);
    size_t np, ni;
    unsigned char *p = read_all(r->indptr, &np);
    unsigned char *x = read_all(r->indices, &ni);
    bool u32 = g->nodes < (1ull << 32);
    if (r->edges != ref.edges)
        fail_msg("%s: %llu edges, reference %llu (%s)", what, (unsigned long long)r->edges,
                 (unsigned long long)ref.edges, flag_str(f));
    if (np != (g->nodes + 1) * 8 || ni != ref.edges * (u32 ? 4 : 8))
        fail_msg("%s: file sizes %zu/%zu (%s)", what, np, ni, flag_str(f));
    if (memcmp(p, ref.indptr, np) != 0)
        fail_msg("%s: indptr differs from the reference (%s)", what, flag_str(f));
    for (uint64_t i = 0; i < ref.edges; i++) {
        uint64_t v;
        if (u32) {
            uint32_t w;
            memcpy(&w, x + 4 * i, 4);
            v = w;
        } else {
            memcpy(&v, x + 8 * i, 8);
        }
        if (v != ref.indices[i])
            fail_msg("%s: indices[%llu] = %llu, reference %llu (%s)", what, (unsigned long long)i,
                     (unsigned long long)v, (unsigned long long)ref.indices[i], flag_str(f));
    }
    uint64_t h, bytes;
    assert_int_equal(file_xxh3(r->indptr, &h, &bytes, err, sizeof err), 0);
    assert_true(r->fp.present);
    assert_string_equal(r->fp.file, strrchr(r->indptr, '/') + 1);
    assert_int_equal(r->fp.dtype, DTYPE_U64);
    assert_int_equal(r->fp.rows, g->nodes + 1);
    assert_int_equal(r->fp.bytes, bytes);
    assert_true(r->fp.xxh3 == h);
    assert_int_equal(file_xxh3(r->indices, &h, &bytes, err, sizeof err), 0);
    assert_string_equal(r->fi.file, strrchr(r->indices, '/') + 1);
    assert_int_equal(r->fi.dtype, dtype_for_ids(g->nodes));
    assert_int_equal(r->fi.rows, ref.edges);
    assert_int_equal(r->fi.bytes, bytes);
    assert_true(r->fi.xxh3 == h);
    free(p);
    free(x);
    free(ref.indptr);
    free(ref.indices);
}

/* Same bytes and same recorded hashes. */
static void check_same(const t_out *a, const t_out *b, unsigned f, const char *what)
{
    const char *pa[2] = {a->indptr, a->indices}, *pb[2] = {b->indptr, b->indices};
    for (int i = 0; i < 2; i++) {
        size_t na, nb;
        unsigned char *x = read_all(pa[i], &na), *y = read_all(pb[i], &nb);
        if (na != nb || memcmp(x, y, na) != 0)
            fail_msg("%s: %s differs from %s (%s)", what, pb[i], pa[i], flag_str(f));
        free(x);
        free(y);
    }
    if (a->fp.xxh3 != b->fp.xxh3 || a->fi.xxh3 != b->fi.xxh3 || a->edges != b->edges)
        fail_msg("%s: recorded hashes or edge counts differ (%s)", what, flag_str(f));
}

/* ---- tests ---- */

static void test_matches_reference(void **state)
{
    (void)state;
    char dir[4096];
    t_scratch(dir, sizeof dir, "csc-ref");
    static const struct { uint64_t nodes; size_t m; } gs[] = {{1, 40}, {7, 600}, {1000, 30000}, {70000, 160000}};
    for (size_t gi = 0; gi < SL_ARRAY_LEN(gs); gi++) {
        t_graph g = t_graph_make(gs[gi].nodes, gs[gi].m, 100 + gi);
        for (unsigned f = 0; f < F_ALL; f++) {
            t_out a = convert(dir, "mem", &g, f, (t_cfg){.mem = 64 * MiB});
            check_against(&a, &g, f, "in memory");
            assert_int_equal(a.st.runs, 0);
            t_out b = convert(dir, "ooc", &g, f, (t_cfg){.mem = MiB, .batch = 1000});
            check_against(&b, &g, f, "out of core");
            if (gs[gi].m * ((f & F_UNDIRECTED) ? 2 : 1) > MiB / 8 && b.st.runs == 0)
                fail_msg("graph %zu: expected run files at 1 MiB (%s)", gi, flag_str(f));
        }
        t_graph_free(&g);
    }
    t_rmrf(dir);
}

static void test_out_of_core_equals_in_memory(void **state)
{
    (void)state;
    char dir[4096];
    t_scratch(dir, sizeof dir, "csc-ooc");
    t_graph g = t_graph_make(300000, 1200000, 7);
    for (unsigned f = 0; f < F_ALL; f++) {
        t_out a = convert(dir, "mem", &g, f, (t_cfg){.mem = 256 * MiB});
        if (a.st.runs != 0)
            fail_msg("in-memory conversion wrote %llu runs (%s)", (unsigned long long)a.st.runs, flag_str(f));
        t_out b = convert(dir, "ooc", &g, f, (t_cfg){.mem = MiB, .batch = 4093});
        if (b.st.runs < 20)
            fail_msg("only %llu runs at 1 MiB (%s)", (unsigned long long)b.st.runs, flag_str(f));
        check_same(&a, &b, f, "1 MiB vs 256 MiB");
    }
    t_graph_free(&g);
    t_rmrf(dir);
}

static void test_multipass_merge(void **state)
{
    (void)state;
    char dir[4096];
    t_scratch(dir, sizeof dir, "csc-multi");
    t_graph g = t_graph_make(50000, 400000, 11);
    for (unsigned f = 0; f < F_ALL; f++) {
        t_out a = convert(dir, "mem", &g, f, (t_cfg){.mem = 64 * MiB});
        for (unsigned fanin = 2; fanin <= 5; fanin += 3) {
            t_out b = convert(dir, "multi", &g, f, (t_cfg){.mem = MiB, .fanin = fanin});
            if (b.st.merges == 0 || b.st.runs <= b.st.merges)
                fail_msg("fan-in %u: %llu runs, %llu intermediate merges (%s)", fanin,
                         (unsigned long long)b.st.runs, (unsigned long long)b.st.merges, flag_str(f));
            check_same(&a, &b, f, "multi-pass");
        }
    }
    t_graph_free(&g);
    t_rmrf(dir);
}

static void test_wide_records(void **state)
{
    (void)state;
    char dir[4096];
    t_scratch(dir, sizeof dir, "csc-wide");
    t_graph g = t_graph_make(40000, 300000, 13);
    for (unsigned f = 0; f < F_ALL; f++) {
        t_out a = convert(dir, "narrow", &g, f, (t_cfg){.mem = 64 * MiB});
        assert_false(a.st.wide);
        t_out b = convert(dir, "wide", &g, f, (t_cfg){.mem = 64 * MiB, .wide = true});
        assert_true(b.st.wide);
        check_same(&a, &b, f, "wide in memory");
        t_out w = convert(dir, "wideooc", &g, f, (t_cfg){.mem = MiB, .wide = true, .fanin = 3, .batch = 999});
        assert_true(w.st.wide);
        if (w.st.merges == 0)
            fail_msg("wide out-of-core run made no intermediate merge (%s)", flag_str(f));
        check_same(&a, &w, f, "wide out of core");
    }
    t_graph_free(&g);
    /* a single node through the wide path too */
    t_graph one = t_graph_make(1, 100, 3);
    for (unsigned f = 0; f < F_ALL; f++) {
        t_out a = convert(dir, "wide1", &one, f, (t_cfg){.mem = MiB, .wide = true});
        check_against(&a, &one, f, "wide single node");
    }
    t_graph_free(&one);
    t_rmrf(dir);
}

static void test_tiny_graphs(void **state)
{
    (void)state;
    char dir[4096];
    t_scratch(dir, sizeof dir, "csc-tiny");
    /* zero edges: indptr all zeros, indices empty */
    t_graph none = {.nodes = 5, .m = 0, .src = NULL, .dst = NULL};
    for (unsigned f = 0; f < F_ALL; f++) {
        t_out a = convert(dir, "none", &none, f, (t_cfg){.mem = MiB});
        assert_int_equal(a.edges, 0);
        size_t n;
        unsigned char *p = read_all(a.indptr, &n);
        static const unsigned char zeros[48];
        assert_int_equal(n, 48);
        assert_memory_equal(p, zeros, 48);
        free(p);
        assert_int_equal(a.fi.bytes, 0);
        assert_int_equal(a.fi.rows, 0);
        check_against(&a, &none, f, "no edges");
    }
    /* nodes without in-edges get empty ranges, at the start, middle and end */
    uint64_t src[] = {5, 0, 1, 3, 0};
    uint64_t dst[] = {2, 2, 4, 0, 2};
    t_graph g = {.nodes = 7, .m = 5, .src = src, .dst = dst};
    t_out a = convert(dir, "gaps", &g, 0, (t_cfg){.mem = MiB, .batch = 2});
    static const uint64_t want_ptr[] = {0, 1, 1, 4, 4, 5, 5, 5};
    static const uint32_t want_idx[] = {3, 0, 0, 5, 1};
    size_t n;
    unsigned char *p = read_all(a.indptr, &n);
    assert_int_equal(n, sizeof want_ptr);
    assert_memory_equal(p, want_ptr, sizeof want_ptr);
    free(p);
    p = read_all(a.indices, &n);
    assert_int_equal(n, sizeof want_idx);
    assert_memory_equal(p, want_idx, sizeof want_idx);
    free(p);
    /* one node, self-loops only: 3 of them, doubled, merged or dropped */
    uint64_t z[3] = {0, 0, 0};
    t_graph one = {.nodes = 1, .m = 3, .src = z, .dst = z};
    static const uint64_t want_e[F_ALL] = {3, 6, 1, 1, 0, 0, 0, 0};
    for (unsigned f = 0; f < F_ALL; f++) {
        t_out r = convert(dir, "one", &one, f, (t_cfg){.mem = MiB});
        if (r.edges != want_e[f])
            fail_msg("single node: %llu edges, want %llu (%s)", (unsigned long long)r.edges,
                     (unsigned long long)want_e[f], flag_str(f));
        check_against(&r, &one, f, "single node");
    }
    t_rmrf(dir);
}

static void test_out_of_range(void **state)
{
    (void)state;
    char dir[4096], tmp[4200], ip[4200], ix[4200];
    t_scratch(dir, sizeof dir, "csc-range");
    snprintf(tmp, sizeof tmp, "%s/tmp", dir);
    mkdir(tmp, 0755);
    for (int wide = 0; wide < 2; wide++) {
        struct csc_opts o = {.nodes = 100, .mem_limit = MiB, .tmpdir = tmp, .undirected = true, .force_wide = wide};
        struct csc *c;
        assert_int_equal(csc_init(&c, &o, err, sizeof err), 0);
        uint64_t s[10], d[10];
        for (int i = 0; i < 10; i++) {
            s[i] = (uint64_t)i;
            d[i] = 99 - (uint64_t)i;
        }
        assert_int_equal(csc_add(c, s, d, 10, err, sizeof err), 0);
        uint64_t s2[5] = {1, 2, 3, 4, 5}, d2[5] = {1, 2, 100, 4, 5};
        err[0] = '\0';
        assert_int_equal(csc_add(c, s2, d2, 5, err, sizeof err), -ERANGE);
        assert_string_equal(err, "edge 12: destination id 100 is out of range [0, 100)");
        uint64_t s3[2] = {7, 1000}, d3[2] = {7, 1000};
        assert_int_equal(csc_add(c, s3, d3, 2, err, sizeof err), -ERANGE);
        assert_string_equal(err, "edge 11: source id 1000 is out of range [0, 100)");
        uint64_t big = UINT64_MAX, ok = 0;
        assert_int_equal(csc_add(c, &ok, &big, 1, err, sizeof err), -ERANGE);
        assert_string_equal(err, "edge 10: destination id 18446744073709551615 is out of range [0, 100)");
        /* rejected batches added nothing: the first 10 edges, mirrored */
        snprintf(ip, sizeof ip, "%s/indptr.bin", dir);
        snprintf(ix, sizeof ix, "%s/indices.bin", dir);
        struct dataset_file fp, fi;
        uint64_t e = 0;
        assert_int_equal(csc_finish(c, ip, ix, &fp, &fi, &e, err, sizeof err), 0);
        assert_int_equal(e, 20);
        struct csc_stats st;
        csc_stats_get(c, &st);
        assert_int_equal(st.edges, 10);
        /* a finished builder refuses more work */
        assert_int_equal(csc_add(c, s, d, 1, err, sizeof err), -EINVAL);
        assert_int_equal(csc_finish(c, ip, ix, &fp, &fi, &e, err, sizeof err), -EINVAL);
        csc_free(c);
    }
    t_rmrf(dir);
}

static void test_run_files_removed(void **state)
{
    (void)state;
    char dir[4096], tmp[4200], ip[4200], ix[4200];
    t_scratch(dir, sizeof dir, "csc-clean");
    snprintf(tmp, sizeof tmp, "%s/tmp", dir);
    mkdir(tmp, 0755);
    snprintf(ip, sizeof ip, "%s/indptr.bin", dir);
    snprintf(ix, sizeof ix, "%s/indices.bin", dir);
    t_graph g = t_graph_make(10000, 200000, 17);
    struct csc_opts o = {.nodes = g.nodes, .mem_limit = MiB, .tmpdir = tmp, .dedupe = true};
    struct csc *c;

    /* free without finish */
    assert_int_equal(csc_init(&c, &o, err, sizeof err), 0);
    assert_int_equal(csc_add(c, g.src, g.dst, g.m, err, sizeof err), 0);
    struct csc_stats st;
    csc_stats_get(c, &st);
    assert_true(st.runs >= 2);
    assert_int_equal(dir_count(tmp), (int)st.runs);
    csc_free(c);
    assert_int_equal(dir_count(tmp), 0);
    csc_free(NULL);

    /* finish that fails writing its output (disk full) */
    if (access("/dev/full", W_OK) == 0) {
        for (int which = 0; which < 2; which++) {
            assert_int_equal(csc_init(&c, &o, err, sizeof err), 0);
            assert_int_equal(csc_add(c, g.src, g.dst, g.m, err, sizeof err), 0);
            assert_true(dir_count(tmp) > 0);
            struct dataset_file fp, fi;
            uint64_t e;
            int rc = csc_finish(c, which ? "/dev/full" : ip, which ? ix : "/dev/full", &fp, &fi, &e, err, sizeof err);
            assert_int_equal(rc, -ENOSPC);
            assert_non_null(strstr(err, "/dev/full"));
            assert_int_equal(dir_count(tmp), 0);
            csc_free(c);
        }
    }

    /* a temporary directory that does not exist: the spill fails naming it */
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/no-such-dir", dir);
    o.tmpdir = missing;
    assert_int_equal(csc_init(&c, &o, err, sizeof err), 0);
    int rc = csc_add(c, g.src, g.dst, g.m, err, sizeof err);
    assert_int_equal(rc, -ENOENT);
    assert_non_null(strstr(err, missing));
    assert_int_equal(csc_add(c, g.src, g.dst, 1, err, sizeof err), -EINVAL);
    csc_free(c);
    assert_false(t_exists(missing));
    t_graph_free(&g);
    t_rmrf(dir);
}

static void test_mem_limit(void **state)
{
    (void)state;
    struct csc *c = (struct csc *)&c;
    struct csc_opts o = {.nodes = 10, .mem_limit = CSC_MIN_MEM - 1, .tmpdir = "/tmp"};
    err[0] = '\0';
    assert_int_equal(csc_init(&c, &o, err, sizeof err), -EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "1 MiB"));
    assert_non_null(strstr(err, "--mem-limit"));
    o.mem_limit = 0;
    assert_int_equal(csc_init(&c, &o, err, sizeof err), -EINVAL);
    o.mem_limit = CSC_MIN_MEM;
    o.nodes = 0;
    assert_int_equal(csc_init(&c, &o, err, sizeof err), -EINVAL);
    assert_null(c);
    o.nodes = 10;
    assert_int_equal(csc_init(&c, &o, err, sizeof err), 0);
    assert_non_null(c);
    csc_free(c);

    /* peak memory stays under the limit while spilling (convert checks it) */
    char dir[4096];
    t_scratch(dir, sizeof dir, "csc-mem");
    t_graph g = t_graph_make(1u << 20, 600000, 19);
    uint64_t lims[] = {MiB, 3 * MiB + 12345, 9 * MiB};
    for (size_t i = 0; i < SL_ARRAY_LEN(lims); i++) {
        t_out r = convert(dir, "mem", &g, F_UNDIRECTED, (t_cfg){.mem = lims[i]});
        assert_true(r.st.runs > 0);
        assert_true(r.st.peak_bytes <= lims[i]);
        assert_true(r.st.peak_bytes > lims[i] / 2);
    }
    t_graph_free(&g);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference), cmocka_unit_test(test_out_of_core_equals_in_memory),
        cmocka_unit_test(test_multipass_merge),   cmocka_unit_test(test_wide_records),
        cmocka_unit_test(test_tiny_graphs),       cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_run_files_removed), cmocka_unit_test(test_mem_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
