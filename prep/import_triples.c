/* import_triples.c - `gnnprep import OUT --triples TRAIN --valid V --test U`:
 * a knowledge graph's triples into a link-prediction dataset
 * (core/linkdata.h; docs/gnnprep.md, "Link prediction").
 *
 * Inputs, one file per split, all of one kind:
 *   text  (any name but *.npy; gzip-compressed or not) one triple a line,
 *         `head<TAB>relation<TAB>tail` as the common knowledge-graph
 *         benchmarks (FB15k-237, WN18RR, ...) lay them out; a line without a
 *         tab is split at runs of spaces instead. Empty lines are skipped.
 *         Names are any text; each distinct entity and relation name gets
 *         the next id in order of first appearance, reading train, then
 *         valid, then test (the order PyG's and most loaders use), and the
 *         names are kept in entities.txt and relations.txt in id order.
 *   .npy  an integer array of shape (n, 3): head, relation, tail ids.
 *         nodes and relations are one more than the largest id met, or
 *         --nodes / --relations where given (never less).
 * Every input error names the file and line (or triple) and exits 2;
 * nothing is left at OUT unless the import completes.
 *
 * Memory: text inputs hold the two dictionaries (every distinct name's
 * bytes plus about 24 bytes of table per name), refused beyond --mem-limit
 * with a message that says how much was needed; .npy inputs hold nothing
 * but a block of triples. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/dataset.h"
#include "core/linkdata.h"
#include "core/opt.h"
#include "core/util.h"
#include "lines.h"
#include "npy.h"
#include "prep.h"

#define IMP_BLOCK 8192 /* triples per read of a .npy input */

struct imp_opts {
    char out[4096], file[LINK_SPLITS][4096];
    uint64_t nodes, relations, mem_limit;
    bool help;
};

/* ---- a dictionary: name -> id in order of first appearance ----------------------------- */

struct dict {
    const char *what;     /* "entity" or "relation" (messages) */
    uint64_t *slot;       /* (cap) id + 1, 0 = empty */
    uint64_t cap, n;
    uint64_t *off;        /* (n + 1 when written) start of name id in text */
    uint64_t off_cap;
    char *text;           /* the names, each followed by '\n' */
    uint64_t len, text_cap;
};

static uint64_t dict_bytes(const struct dict *d)
{
    return d->cap * 8 + d->off_cap * 8 + d->text_cap;
}

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem, char *err, size_t errlen)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    *p = q;
    *cap = c;
    return 0;
}

static int dict_rehash(struct dict *d, uint64_t cap, char *err, size_t errlen)
{
    uint64_t *s = calloc(cap, sizeof *s);
    if (!s)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    for (uint64_t id = 0; id < d->n; id++) {
        uint64_t h = XXH3_64bits(d->text + d->off[id], d->off[id + 1] - d->off[id] - 1);
        uint64_t i = h & (cap - 1);
        while (s[i])
            i = (i + 1) & (cap - 1);
        s[i] = id + 1;
    }
    free(d->slot);
    d->slot = s;
    d->cap = cap;
    return 0;
}

/* The id of name[0 .. len), added when new (*added set). */
static int dict_id(struct dict *d, const char *name, size_t len, uint64_t *id, bool *added, char *err, size_t errlen)
{
    int rc;
    if ((d->n + 1) * 2 > d->cap && (rc = dict_rehash(d, d->cap ? d->cap * 2 : 4096, err, errlen)) < 0)
        return rc;
    uint64_t h = XXH3_64bits(name, len), i = h & (d->cap - 1);
    for (; d->slot[i]; i = (i + 1) & (d->cap - 1)) {
        uint64_t k = d->slot[i] - 1;
        if (d->off[k + 1] - d->off[k] - 1 == len && !memcmp(d->text + d->off[k], name, len)) {
            *id = k;
            *added = false;
            return 0;
        }
    }
    if ((rc = grow((void **)&d->off, &d->off_cap, d->n + 2, 8, err, errlen)) < 0 ||
        (rc = grow((void **)&d->text, &d->text_cap, d->len + len + 1, 1, err, errlen)) < 0)
        return rc;
    if (d->n == 0)
        d->off[0] = 0;
    memcpy(d->text + d->len, name, len);
    d->text[d->len + len] = '\n';
    d->len += len + 1;
    d->off[d->n + 1] = d->len;
    d->slot[i] = d->n + 1;
    *id = d->n++;
    *added = true;
    return 0;
}

static void dict_free(struct dict *d)
{
    free(d->slot);
    free(d->off);
    free(d->text);
}

/* ---- writing ---------------------------------------------------------------------------- */

/* A split's triples are buffered as u64 and written in the dataset's id
 * dtype, which is only known at the end for text inputs: they go to a
 * u64 file first and are narrowed once the counts are known. */
static int put_ids(struct file_writer *w, const uint64_t *id, uint64_t n, enum dtype dt, char *err, size_t errlen)
{
    if (dt == DTYPE_U64)
        return file_writer_write(w, id, n * 8, err, errlen);
    uint32_t buf[3 * 1024];
    for (uint64_t i = 0; i < n;) {
        uint64_t k = SL_MIN(n - i, (uint64_t)SL_ARRAY_LEN(buf));
        for (uint64_t j = 0; j < k; j++)
            buf[j] = (uint32_t)id[i + j];
        int rc = file_writer_write(w, buf, k * 4, err, errlen);
        if (rc < 0)
            return rc;
        i += k;
    }
    return 0;
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Splits a text line into its three fields (in place). 0, or -EINVAL with
 * the message naming path and line. */
static int fields(char *line, size_t len, char *f[3], size_t fl[3], const char *path, uint64_t lineno, char *err,
                  size_t errlen)
{
    int n = 0;
    if (memchr(line, '\t', len)) {
        char *p = line, *end = line + len;
        while (n < 4) {
            char *tab = memchr(p, '\t', (size_t)(end - p));
            char *e = tab ? tab : end;
            if (n < 3) {
                f[n] = p;
                fl[n] = (size_t)(e - p);
            }
            n++;
            if (!tab)
                break;
            p = tab + 1;
        }
    } else {
        char *p = line, *end = line + len;
        while (p < end) {
            while (p < end && *p == ' ')
                p++;
            if (p == end)
                break;
            char *s = p;
            while (p < end && *p != ' ')
                p++;
            if (n < 3) {
                f[n] = s;
                fl[n] = (size_t)(p - s);
            }
            n++;
        }
    }
    if (n != 3)
        return sl_errf(err, errlen, -EINVAL,
                       "%s:%" PRIu64 ": %d field%s, expected 3 (head, relation, tail separated by tabs)", path, lineno,
                       n, n == 1 ? "" : "s");
    for (int i = 0; i < 3; i++)
        if (!fl[i])
            return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": field %d is empty; every triple names a head, a "
                           "relation and a tail", path, lineno, i + 1);
    return 0;
}

static bool is_npy(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && !strcmp(path + n - 4, ".npy");
}

struct imp {
    struct imp_opts *o;
    struct dataset_dir d;
    struct file_writer raw[LINK_SPLITS]; /* u64 triples (text inputs) */
    uint64_t count[LINK_SPLITS];
    uint64_t nodes, relations;           /* one past the largest id seen */
    uint64_t first_new_node[LINK_SPLITS]; /* text: entities first seen in valid/test */
    struct dict ent, rel;
};

static int read_text(struct imp *m, int s, char *err, size_t errlen)
{
    const char *path = m->o->file[s];
    struct lines l;
    int rc = lines_open(&l, path, err, errlen);
    if (rc < 0)
        return rc;
    uint64_t ids[3 * 1024];
    uint64_t nb = 0;
    char *line;
    size_t len;
    while (!g_stop && (rc = lines_next(&l, &line, &len, err, errlen)) == 1) {
        if (len == 0)
            continue;
        char *f[3];
        size_t fl[3];
        if ((rc = fields(line, len, f, fl, path, l.lineno, err, errlen)) < 0)
            break;
        for (int c = 0; c < 3 && rc >= 0; c++) {
            bool added;
            struct dict *d = c == 1 ? &m->rel : &m->ent;
            rc = dict_id(d, f[c], fl[c], &ids[nb * 3 + (uint64_t)c], &added, err, errlen);
            if (rc == 0 && added && dict_bytes(&m->ent) + dict_bytes(&m->rel) > m->o->mem_limit)
                rc = sl_errf(err, errlen, -E2BIG,
                             "%s:%" PRIu64 ": the names read so far (%" PRIu64 " entities, %" PRIu64
                             " relations) take more than --mem-limit %" PRIu64 " MiB; raise --mem-limit",
                             path, l.lineno, m->ent.n, m->rel.n, m->o->mem_limit >> 20);
        }
        if (rc < 0)
            break;
        if (++nb == 1024) {
            if ((rc = file_writer_write(&m->raw[s], ids, nb * 24, err, errlen)) < 0)
                break;
            m->count[s] += nb;
            nb = 0;
        }
    }
    if (rc >= 0 && nb) {
        if ((rc = file_writer_write(&m->raw[s], ids, nb * 24, err, errlen)) >= 0)
            m->count[s] += nb;
    }
    lines_close(&l);
    if (g_stop)
        return sl_errf(err, errlen, -EINTR, "interrupted; nothing was written to %s", m->o->out);
    return rc < 0 ? rc : 0;
}

/* A .npy input: checks its shape and ids, and (write) appends the triples
 * to w in dtype dt; without write only learns the largest ids. */
static int read_npy(struct imp *m, int s, bool write, struct file_writer *w, enum dtype dt, char *err, size_t errlen)
{
    const char *path = m->o->file[s];
    struct npy r;
    npy_init(&r);
    int rc = npy_open(&r, path, err, errlen);
    if (rc < 0)
        return rc;
    char shp[128];
    if (!npy_is_int(r.h.type) || r.h.type == NPY_BOOL || r.h.ndim != 2 || r.h.shape[1] != 3) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s: a %s array of shape %s; triples are an integer array of shape (n, 3): head, relation, tail",
                     path, npy_type_name(r.h.type), npy_shape_str(&r.h, shp, sizeof shp));
        npy_close(&r);
        return rc;
    }
    uint64_t n = r.h.shape[0];
    unsigned char *raw = malloc(IMP_BLOCK * 3 * r.h.itemsize);
    int64_t *v = malloc(IMP_BLOCK * 3 * sizeof *v);
    uint64_t *ids = malloc(IMP_BLOCK * 3 * sizeof *ids);
    if (!raw || !v || !ids)
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
    static const char *const col[3] = {"head", "relation", "tail"};
    for (uint64_t t = 0; rc == 0 && t < n && !g_stop;) {
        uint64_t k = SL_MIN(n - t, (uint64_t)IMP_BLOCK);
        if ((rc = npy_read(&r, raw, k * 3 * r.h.itemsize, err, errlen)) < 0)
            break;
        npy_to_i64(r.h.type, raw, v, k * 3);
        for (uint64_t i = 0; i < k * 3 && rc == 0; i++) {
            int c = (int)(i % 3);
            if (v[i] < 0 || (uint64_t)v[i] >= (1ull << 62))
                rc = sl_errf(err, errlen, -EINVAL, "%s: triple %" PRIu64 " has %s %" PRId64 "; ids are in 0..2^62",
                             path, t + i / 3, col[c], v[i]);
            else if (c == 1)
                m->relations = SL_MAX(m->relations, (uint64_t)v[i] + 1);
            else
                m->nodes = SL_MAX(m->nodes, (uint64_t)v[i] + 1);
            ids[i] = (uint64_t)v[i];
        }
        if (rc == 0 && write)
            rc = put_ids(w, ids, k * 3, dt, err, errlen);
        t += k;
    }
    if (rc == 0 && g_stop)
        rc = sl_errf(err, errlen, -EINTR, "interrupted; nothing was written to %s", m->o->out);
    if (rc == 0)
        rc = npy_end(&r, err, errlen);
    m->count[s] = n;
    free(raw);
    free(v);
    free(ids);
    npy_close(&r);
    return rc;
}

/* Narrows a split's u64 file into the final one in dtype dt. */
static int narrow(struct imp *m, int s, const char *raw_path, struct file_writer *w, enum dtype dt, char *err,
                  size_t errlen)
{
    FILE *f = fopen(raw_path, "rb");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: %s", raw_path, strerror(errno));
    uint64_t buf[3 * 1024];
    int rc = 0;
    for (uint64_t t = 0; t < m->count[s] && rc == 0;) {
        if (g_stop) {
            rc = sl_errf(err, errlen, -EINTR, "interrupted; nothing was written to %s", m->o->out);
            break;
        }
        uint64_t k = SL_MIN(m->count[s] - t, (uint64_t)1024);
        if (fread(buf, 24, k, f) != k)
            rc = sl_errf(err, errlen, -EIO, "%s: cannot read back: %s", raw_path, ferror(f) ? strerror(errno) : "short");
        else
            rc = put_ids(w, buf, k * 3, dt, err, errlen);
        t += k;
    }
    fclose(f);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gnnprep import OUT --triples TRAIN --valid VALID --test TEST [options]\n\n"
            "Imports a knowledge graph's triples as a link-prediction dataset (docs/format.md,\n"
            "\"Link-prediction datasets\"). Each file holds one split:\n"
            "  text   one triple a line, head<TAB>relation<TAB>tail (FB15k-237, WN18RR, ... as\n"
            "         distributed; gzip allowed). Names get ids in order of first appearance\n"
            "         (train, then valid, then test) and are kept in entities.txt/relations.txt.\n"
            "  .npy   an integer array of shape (n, 3) of ids: head, relation, tail.\n\n"
            "  --triples TRAIN    the training triples (required)\n"
            "  --valid VALID      validation triples (required; may be empty)\n"
            "  --test TEST        test triples (required; may be empty)\n"
            "  --nodes N          .npy inputs: the node count, if more than the largest id + 1\n"
            "  --relations R      .npy inputs: the relation count, likewise\n"
            "  --mem-limit SIZE   text inputs: memory for the name dictionaries (default 4G)\n\n"
            "Exit status: 0 done, 2 bad input (the message names file and line), 1 other failure.\n");
}

int prep_import_triples_main(int argc, char **argv)
{
    struct imp_opts o = {.mem_limit = 4ull << 30};
    bool seen[8] = {false};
    const struct opt opts[] = {
        {.name = "--triples", .kind = OPT_STR, .dst = o.file[LINK_TRAIN], .len = sizeof o.file[0]},
        {.name = "--valid", .kind = OPT_STR, .dst = o.file[LINK_VALID], .len = sizeof o.file[0]},
        {.name = "--test", .kind = OPT_STR, .dst = o.file[LINK_TEST], .len = sizeof o.file[0]},
        {.name = "--nodes", .kind = OPT_SIZE, .dst = &o.nodes, .lo = 1, .hi = 1ll << 62},
        {.name = "--relations", .kind = OPT_SIZE, .dst = &o.relations, .lo = 1, .hi = 1ll << 62},
        {.name = "--mem-limit", .kind = OPT_SIZE, .dst = &o.mem_limit, .lo = 1 << 20, .hi = INT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &o.help},
    };
    int nopts = (int)SL_ARRAY_LEN(opts);
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        snprintf(o.out, sizeof o.out, "%s", argv[1]);
        first = 2;
    }
    char err[4096];
    if (opt_parse("gnnprep import", opts, nopts, argc, argv, first, seen, "; see gnnprep import --triples x --help",
                  err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (o.help) {
        usage(stdout);
        return PREP_EXIT_OK;
    }
    if (!o.out[0]) {
        fprintf(stderr, "gnnprep import: give the directory to create first: gnnprep import OUT --triples ...\n");
        return PREP_EXIT_BAD_INPUT;
    }
    static const char *const flag[LINK_SPLITS] = {"--triples", "--valid", "--test"};
    int npy = 0;
    for (int s = 0; s < LINK_SPLITS; s++) {
        if (!seen[opt_index(opts, nopts, flag[s])]) {
            fprintf(stderr, "gnnprep import: %s is missing; give the file of each split (an empty file for none)\n",
                    flag[s]);
            return PREP_EXIT_BAD_INPUT;
        }
        npy += is_npy(o.file[s]);
    }
    if (npy != 0 && npy != LINK_SPLITS) {
        fprintf(stderr, "gnnprep import: --triples, --valid and --test must all be .npy or all be text\n");
        return PREP_EXIT_BAD_INPUT;
    }
    if (!npy && (seen[opt_index(opts, nopts, "--nodes")] || seen[opt_index(opts, nopts, "--relations")])) {
        fprintf(stderr, "gnnprep import: --nodes and --relations are for .npy inputs; text inputs count their names\n");
        return PREP_EXIT_BAD_INPUT;
    }

    double t0 = sl_now();
    struct imp m;
    memset(&m, 0, sizeof m);
    m.o = &o;
    m.ent.what = "entity";
    m.rel.what = "relation";
    struct file_writer w[LINK_SPLITS];
    memset(w, 0, sizeof w);
    for (int s = 0; s < LINK_SPLITS; s++)
        w[s].fd = m.raw[s].fd = -1;
    struct link_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.planted_mrr = -1;
    int rc = dataset_dir_begin(&m.d, o.out, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep import: %s\n", err);
        return prep_exit_code(rc);
    }
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    static const char *const file[LINK_SPLITS] = {"train.bin", "valid.bin", "test.bin"};
    static const char *const rawname[LINK_SPLITS] = {".train.u64", ".valid.u64", ".test.u64"};
    char path[4200], rawp[LINK_SPLITS][4200];
    enum dtype dt;
    uint64_t new_in_eval = 0;
    if (npy) {
        for (int s = 0; s < LINK_SPLITS; s++) /* pass 1: the counts */
            if ((rc = read_npy(&m, s, false, NULL, DTYPE_NONE, err, sizeof err)) < 0)
                goto out;
        if (o.nodes && o.nodes < m.nodes) {
            rc = sl_errf(err, sizeof err, -EINVAL, "--nodes %" PRIu64 " but the triples name node %" PRIu64, o.nodes,
                         m.nodes - 1);
            goto out;
        }
        if (o.relations && o.relations < m.relations) {
            rc = sl_errf(err, sizeof err, -EINVAL, "--relations %" PRIu64 " but the triples name relation %" PRIu64,
                         o.relations, m.relations - 1);
            goto out;
        }
        m.nodes = SL_MAX(m.nodes, o.nodes);
        m.relations = SL_MAX(m.relations, o.relations);
        dt = link_id_dtype(m.nodes, m.relations);
        for (int s = 0; s < LINK_SPLITS; s++) { /* pass 2: the files */
            dataset_dir_path(&m.d, file[s], path, sizeof path);
            if ((rc = file_writer_open(&w[s], path, err, sizeof err)) < 0 ||
                (rc = read_npy(&m, s, true, &w[s], dt, err, sizeof err)) < 0)
                goto out;
        }
    } else {
        for (int s = 0; s < LINK_SPLITS; s++) {
            dataset_dir_path(&m.d, rawname[s], rawp[s], sizeof rawp[s]);
            uint64_t before = m.ent.n;
            if ((rc = file_writer_open(&m.raw[s], rawp[s], err, sizeof err)) < 0 ||
                (rc = read_text(&m, s, err, sizeof err)) < 0)
                goto out;
            uint64_t bytes, h;
            if ((rc = file_writer_close(&m.raw[s], &bytes, &h, err, sizeof err)) < 0)
                goto out;
            if (s != LINK_TRAIN)
                new_in_eval += m.ent.n - before;
        }
        m.nodes = m.ent.n;
        m.relations = m.rel.n;
        if (!m.nodes) {
            rc = sl_errf(err, sizeof err, -EINVAL, "%s: no triple in any input", o.file[LINK_TRAIN]);
            goto out;
        }
        dt = link_id_dtype(m.nodes, m.relations);
        for (int s = 0; s < LINK_SPLITS; s++) {
            dataset_dir_path(&m.d, file[s], path, sizeof path);
            if ((rc = file_writer_open(&w[s], path, err, sizeof err)) < 0 ||
                (rc = narrow(&m, s, rawp[s], &w[s], dt, err, sizeof err)) < 0)
                goto out;
            unlink(rawp[s]);
        }
        static const char *const names[LINK_NAME_FILES] = {"entities.txt", "relations.txt"};
        const struct dict *d[LINK_NAME_FILES] = {&m.ent, &m.rel};
        for (int k = 0; k < LINK_NAME_FILES; k++) {
            struct file_writer nw = {.fd = -1};
            uint64_t bytes, h;
            dataset_dir_path(&m.d, names[k], path, sizeof path);
            if ((rc = file_writer_open(&nw, path, err, sizeof err)) < 0 ||
                (rc = file_writer_write(&nw, d[k]->text, d[k]->len, err, sizeof err)) < 0 ||
                (rc = file_writer_close(&nw, &bytes, &h, err, sizeof err)) < 0) {
                file_writer_free(&nw);
                goto out;
            }
            dataset_file_set(&meta.names[k], names[k], DTYPE_NONE, d[k]->n, 1, bytes, h);
        }
    }
    if (m.count[LINK_TRAIN] == 0) {
        rc = sl_errf(err, sizeof err, -EINVAL, "%s: no triple; there is nothing to train on", o.file[LINK_TRAIN]);
        goto out;
    }
    if (g_stop) { /* the last moment before the rename */
        rc = sl_errf(err, sizeof err, -EINTR, "interrupted; nothing was written to %s", o.out);
        goto out;
    }
    for (int s = 0; s < LINK_SPLITS; s++) {
        uint64_t bytes, h;
        if ((rc = file_writer_close(&w[s], &bytes, &h, err, sizeof err)) < 0)
            goto out;
        dataset_file_set(&meta.split[s], file[s], dt, m.count[s], 3, bytes, h);
        meta.split[s].row_stride = 3 * dtype_size(dt);
    }
    meta.version = LINK_VERSION;
    meta.nodes = m.nodes;
    meta.relations = m.relations;
    size_t sn = (size_t)snprintf(meta.source, sizeof meta.source, "gnnprep");
    for (int i = 0; i < argc && sn < sizeof meta.source; i++)
        sn += (size_t)snprintf(meta.source + sn, sizeof meta.source - sn, " %s", argv[i]);
    if ((rc = link_meta_write(m.d.tmp, &meta, err, sizeof err)) < 0 ||
        (rc = dataset_dir_rename(&m.d, err, sizeof err)) < 0)
        goto out;
    if (new_in_eval)
        fprintf(stderr,
                "gnnprep import: note: %" PRIu64 " entities appear only in the validation or test triples; their "
                "embeddings never train\n",
                new_in_eval);
    printf("import: wrote %s: %" PRIu64 " nodes, %" PRIu64 " relations, triples train %" PRIu64 " valid %" PRIu64
           " test %" PRIu64 " (%s ids) in %.1f s\n",
           m.d.out, m.nodes, m.relations, m.count[0], m.count[1], m.count[2], dtype_name(dt), sl_now() - t0);
out:
    for (int s = 0; s < LINK_SPLITS; s++) {
        file_writer_free(&w[s]);
        file_writer_free(&m.raw[s]);
    }
    dict_free(&m.ent);
    dict_free(&m.rel);
    dataset_dir_abort(&m.d);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc < 0) {
        fprintf(stderr, "gnnprep import: %s\n", err);
        return rc == -EINTR ? 130 : rc == -E2BIG ? PREP_EXIT_BAD_INPUT : prep_exit_code(rc);
    }
    return PREP_EXIT_OK;
}
