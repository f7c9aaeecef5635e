/* linkdata.c - dataset.toml of a link-prediction dataset, and its check
 * (core/linkdata.h). */
#include "core/linkdata.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "core/dataset_scan.h"
#include "core/toml.h"
#include "core/util.h"

const char *const link_split_key[LINK_SPLITS] = {"train", "valid", "test"};
const char *const link_names_key[LINK_NAME_FILES] = {"entity_names", "relation_names"};

/* ---- writing ---------------------------------------------------------------------------- */

static void write_file_table(FILE *f, const char *key, const struct dataset_file *d, bool triples)
{
    fprintf(f, "\n[%s]\nfile = ", key);
    toml_write_string(f, d->file);
    if (triples)
        fprintf(f, "\ndtype = \"%s\"\nshape = [%" PRIu64 ", 3]\n", dtype_name(d->dtype), d->rows);
    else
        fprintf(f, "\nshape = [%" PRIu64 "]\n", d->rows);
    fprintf(f, "bytes = %" PRIu64 "\nxxh3 = \"%016" PRIx64 "\"\n", d->bytes, d->xxh3);
}

int link_meta_write(const char *dir, const struct link_meta *m, char *err, size_t errlen)
{
    char path[4096], tmp[4200];
    if (sl_path_join(path, sizeof path, dir, DATASET_META_FILE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    FILE *f;
    int rc = sl_atomic_begin(&f, path, tmp, sizeof tmp, err, errlen);
    if (rc < 0)
        return rc;
    fprintf(f, "# Sluice link-prediction dataset (docs/format.md). Written by gnnprep; checked by `gnnprep check`.\n");
    fprintf(f, "format = \"%s\"\nversion = %u\n", LINK_FORMAT, LINK_VERSION);
    fprintf(f, "nodes = %" PRIu64 "\nrelations = %" PRIu64 "\n", m->nodes, m->relations);
    if (m->planted_mrr >= 0)
        fprintf(f, "planted_mrr = %.6f\n", m->planted_mrr);
    fprintf(f, "source = ");
    toml_write_string(f, m->source);
    fputc('\n', f);
    for (int i = 0; i < LINK_SPLITS; i++)
        write_file_table(f, link_split_key[i], &m->split[i], true);
    for (int i = 0; i < LINK_NAME_FILES; i++)
        if (m->names[i].present)
            write_file_table(f, link_names_key[i], &m->names[i], false);
    return sl_atomic_commit(f, tmp, path, err, errlen);
}

/* ---- reading ---------------------------------------------------------------------------- */

#define MISSING_HINT "the dataset is incomplete, make it again with gnnprep"
static int get_uint(const char *path, const struct toml_value *tab, const char *tname, const char *key, uint64_t *out,
                    char *err, size_t errlen)
{
    return toml_need_uint(tab, path, tname, key, MISSING_HINT, out, err, errlen);
}

static int get_str(const char *path, const struct toml_value *tab, const char *tname, const char *key,
                   const char **out, char *err, size_t errlen)
{
    return toml_need_str(tab, path, tname, key, MISSING_HINT, out, err, errlen);
}

static const char *const top_keys[] = {"format", "version", "nodes", "relations", "planted_mrr", "source"};
static const char *const triple_keys[] = {"file", "dtype", "shape", "bytes", "xxh3"};
static const char *const name_keys[] = {"file", "shape", "bytes", "xxh3"};

static bool key_in(const char *k, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, keys[i]))
            return true;
    return false;
}

/* A table of a file: [train] etc. (triples) or [entity_names] etc. */
static int read_file_table(const char *path, const struct toml_value *t, const char *key, bool triples,
                           struct dataset_file *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (t->type != TOML_TABLE)
        return sl_errf(err, errlen, -EINVAL, "%s:%d:%d: %s must be a table", path, t->line, t->col, key);
    const char *const *keys = triples ? triple_keys : name_keys;
    size_t nkeys = triples ? SL_ARRAY_LEN(triple_keys) : SL_ARRAY_LEN(name_keys);
    for (size_t j = 0; j < t->u.tab.n; j++)
        if (!key_in(t->u.tab.kv[j].key, keys, nkeys))
            return sl_errf(err, errlen, -EINVAL,
                           "%s:%d:%d: unknown key %s.%s (docs/format.md lists every key of a link dataset); remove it, "
                           "or check its spelling",
                           path, t->u.tab.kv[j].val->line, t->u.tab.kv[j].val->col, key, t->u.tab.kv[j].key);
    const char *file, *hash, *dtype = "none";
    int rc;
    if ((rc = get_str(path, t, key, "file", &file, err, errlen)) < 0 ||
        (triples && (rc = get_str(path, t, key, "dtype", &dtype, err, errlen)) < 0) ||
        (rc = get_uint(path, t, key, "bytes", &d->bytes, err, errlen)) < 0 ||
        (rc = get_str(path, t, key, "xxh3", &hash, err, errlen)) < 0)
        return rc;
    if (!*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..") || strlen(file) >= sizeof d->file)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.file = \"%s\" must be a plain file name inside the dataset directory",
                       path, key, file);
    snprintf(d->file, sizeof d->file, "%s", file);
    if (triples) {
        d->dtype = dtype_parse(dtype);
        if (d->dtype != DTYPE_U32 && d->dtype != DTYPE_U64)
            return sl_errf(err, errlen, -EINVAL, "%s: %s.dtype = \"%s\" must be u32 or u64", path, key, dtype);
    }
    char *end;
    errno = 0;
    unsigned long long h = strtoull(hash, &end, 16);
    if (strlen(hash) != 16 || *end || errno)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.xxh3 = \"%s\" must be 16 hex digits", path, key, hash);
    d->xxh3 = h;
    const struct toml_value *shape = toml_get(t, "shape");
    size_t want = triples ? 2 : 1;
    if (!shape || shape->type != TOML_ARRAY || shape->u.arr.n != want)
        return sl_errf(err, errlen, -EINVAL, "%s: %s.shape must be %s", path, key,
                       triples ? "[triples, 3]" : "[lines]");
    for (size_t i = 0; i < want; i++)
        if (shape->u.arr.v[i]->type != TOML_INT || shape->u.arr.v[i]->u.i < 0)
            return sl_errf(err, errlen, -EINVAL, "%s: %s.shape must hold non-negative integers", path, key);
    d->rows = (uint64_t)shape->u.arr.v[0]->u.i;
    d->cols = triples ? (uint64_t)shape->u.arr.v[1]->u.i : 1;
    if (triples) {
        if (d->cols != 3)
            return sl_errf(err, errlen, -EINVAL, "%s: %s.shape = [%" PRIu64 ", %" PRIu64 "]: a triple has 3 ids", path,
                           key, d->rows, d->cols);
        d->row_stride = 3 * dtype_size(d->dtype);
        uint64_t bytes;
        if (sl_mul_ovf(d->rows, d->row_stride, &bytes) || bytes > (uint64_t)INT64_MAX)
            return sl_errf(err, errlen, -EINVAL, "%s: %s.shape overflows the largest possible file", path, key);
        if (d->bytes != bytes)
            return sl_errf(err, errlen, -EINVAL, "%s: %s.bytes = %" PRIu64 " but shape and dtype make %" PRIu64 " bytes",
                           path, key, d->bytes, bytes);
    } else if (d->rows > d->bytes / 2) { /* each name >= 1 byte and its '\n' */
        return sl_errf(err, errlen, -EINVAL, "%s: %s.bytes = %" PRIu64 " cannot hold %" PRIu64 " non-empty lines", path,
                       key, d->bytes, d->rows);
    }
    d->present = true;
    return 0;
}

int link_meta_parse(const char *text, size_t len, const char *path, struct link_meta *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->planted_mrr = -1;
    char perr[1024];
    struct toml_value *root = toml_parse(text, len, path, perr, sizeof perr);
    if (!root)
        return sl_errf(err, errlen, -EINVAL, "%s", perr);
    int rc;
    const char *fmt = "", *src = "";
    uint64_t version = 0;
    if ((rc = get_str(path, root, NULL, "format", &fmt, err, errlen)) < 0)
        goto out;
    if (!strcmp(fmt, DATASET_FORMAT)) {
        rc = sl_errf(err, errlen, -EMEDIUMTYPE,
                     "%s: a node-classification dataset (format = \"%s\"), not a link-prediction one; link prediction "
                     "needs triples (gnnprep import --triples, gnnprep synth --task link)",
                     path, fmt);
        goto out;
    }
    if (strcmp(fmt, LINK_FORMAT)) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: format = \"%s\", expected \"%s\"", path, fmt, LINK_FORMAT);
        goto out;
    }
    if ((rc = get_uint(path, root, NULL, "version", &version, err, errlen)) < 0)
        goto out;
    if (version != LINK_VERSION) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s: link dataset version %" PRIu64 " is not supported (this build reads %d); convert it again "
                     "with this gnnprep",
                     path, version, LINK_VERSION);
        goto out;
    }
    m->version = (uint32_t)version;
    if ((rc = get_uint(path, root, NULL, "nodes", &m->nodes, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "relations", &m->relations, err, errlen)) < 0)
        goto out;
    if (toml_get(root, "source") && (rc = get_str(path, root, NULL, "source", &src, err, errlen)) < 0)
        goto out;
    snprintf(m->source, sizeof m->source, "%s", src);
    const struct toml_value *pm = toml_get(root, "planted_mrr");
    if (pm) {
        if ((pm->type != TOML_FLOAT && pm->type != TOML_INT) ||
            (pm->type == TOML_FLOAT ? !(pm->u.f >= 0 && pm->u.f <= 1) : (pm->u.i < 0 || pm->u.i > 1))) {
            rc = sl_errf(err, errlen, -EINVAL, "%s:%d:%d: planted_mrr must be a number in [0, 1]", path, pm->line,
                         pm->col);
            goto out;
        }
        m->planted_mrr = pm->type == TOML_FLOAT ? pm->u.f : (double)pm->u.i;
    }
    rc = -EINVAL;
    if (m->nodes == 0 || m->relations == 0) {
        sl_errf(err, errlen, rc, "%s: nodes = %" PRIu64 ", relations = %" PRIu64 "; a link dataset needs at least one of each",
                path, m->nodes, m->relations);
        goto out;
    }
    for (size_t i = 0; i < root->u.tab.n; i++) {
        const char *k = root->u.tab.kv[i].key;
        const struct toml_value *v = root->u.tab.kv[i].val;
        int split = -1, names = -1;
        for (int s = 0; s < LINK_SPLITS; s++)
            if (!strcmp(k, link_split_key[s]))
                split = s;
        for (int s = 0; s < LINK_NAME_FILES; s++)
            if (!strcmp(k, link_names_key[s]))
                names = s;
        if (split < 0 && names < 0 && !key_in(k, top_keys, SL_ARRAY_LEN(top_keys))) {
            sl_errf(err, errlen, rc,
                    "%s:%d:%d: unknown key %s (docs/format.md lists every key of a link dataset); remove it, or check "
                    "its spelling",
                    path, v->line, v->col, k);
            goto out;
        }
    }
    enum dtype idt = link_id_dtype(m->nodes, m->relations);
    for (int s = 0; s < LINK_SPLITS; s++) {
        const struct toml_value *t = toml_get(root, link_split_key[s]);
        if (!t) {
            sl_errf(err, errlen, rc, "%s: the [%s] table is missing; the dataset is incomplete", path, link_split_key[s]);
            goto out;
        }
        int r = read_file_table(path, t, link_split_key[s], true, &m->split[s], err, errlen);
        if (r < 0) {
            rc = r;
            goto out;
        }
        if (m->split[s].dtype != idt) {
            sl_errf(err, errlen, rc, "%s: %s.dtype must be %s for %" PRIu64 " nodes and %" PRIu64 " relations", path,
                    link_split_key[s], dtype_name(idt), m->nodes, m->relations);
            goto out;
        }
    }
    if (m->split[LINK_TRAIN].rows == 0) {
        sl_errf(err, errlen, rc, "%s: train holds no triple; there is nothing to train on", path);
        goto out;
    }
    for (int s = 0; s < LINK_NAME_FILES; s++) {
        const struct toml_value *t = toml_get(root, link_names_key[s]);
        if (!t)
            continue;
        int r = read_file_table(path, t, link_names_key[s], false, &m->names[s], err, errlen);
        if (r < 0) {
            rc = r;
            goto out;
        }
        uint64_t want = s == LINK_ENTITY_NAMES ? m->nodes : m->relations;
        if (m->names[s].rows != want) {
            sl_errf(err, errlen, rc, "%s: %s.shape = [%" PRIu64 "] but the dataset has %" PRIu64 " %s", path,
                    link_names_key[s], m->names[s].rows, want, s == LINK_ENTITY_NAMES ? "nodes" : "relations");
            goto out;
        }
    }
    if (m->names[0].present != m->names[1].present) {
        sl_errf(err, errlen, rc, "%s: [entity_names] and [relation_names] come together or not at all", path);
        goto out;
    }
    const struct dataset_file *all[LINK_SPLITS + LINK_NAME_FILES];
    const char *keys[LINK_SPLITS + LINK_NAME_FILES];
    int nall = 0;
    for (int s = 0; s < LINK_SPLITS; s++)
        all[nall] = &m->split[s], keys[nall++] = link_split_key[s];
    for (int s = 0; s < LINK_NAME_FILES; s++)
        if (m->names[s].present)
            all[nall] = &m->names[s], keys[nall++] = link_names_key[s];
    for (int i = 0; i < nall; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(all[i]->file, all[j]->file)) {
                sl_errf(err, errlen, rc, "%s: %s and %s name the same file %s", path, keys[j], keys[i], all[i]->file);
                goto out;
            }
    rc = 0;
out:
    toml_free(root);
    return rc;
}

int link_meta_read(const char *dir, struct link_meta *m, bool check_files, char *err, size_t errlen)
{
    char path[4096];
    memset(m, 0, sizeof *m);
    if (sl_path_join(path, sizeof path, dir, DATASET_META_FILE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    struct stat st;
    if (stat(dir, &st) < 0)
        return sl_errf(err, errlen, -errno, "%s: %s; make a link dataset with `gnnprep synth --task link` or `gnnprep "
                       "import --triples`", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOTDIR, "%s: not a directory; a dataset is a directory holding dataset.toml", dir);
    if (access(path, F_OK) < 0)
        return sl_errf(err, errlen, -ENOENT, "%s: no dataset.toml; is this a Sluice dataset? (make one with gnnprep)", dir);
    char *text;
    size_t len;
    int rc = sl_read_file(path, 1u << 20, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    rc = link_meta_parse(text, len, path, m, err, errlen);
    free(text);
    if (rc < 0 || !check_files)
        return rc;
    for (int i = 0; i < LINK_SPLITS + LINK_NAME_FILES; i++) {
        const struct dataset_file *f = i < LINK_SPLITS ? &m->split[i] : &m->names[i - LINK_SPLITS];
        const char *key = i < LINK_SPLITS ? link_split_key[i] : link_names_key[i - LINK_SPLITS];
        if (!f->present)
            continue;
        char fp[4096];
        if (sl_path_join(fp, sizeof fp, dir, f->file) < 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
        if (stat(fp, &st) < 0)
            return sl_errf(err, errlen, -errno, "%s: %s (named by %s.file in dataset.toml); the dataset is incomplete",
                           fp, strerror(errno), key);
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->bytes)
            return sl_errf(err, errlen, -EINVAL,
                           "%s: %lld bytes but dataset.toml records %" PRIu64
                           "; the file was changed or truncated, make the dataset again",
                           fp, (long long)st.st_size, f->bytes);
    }
    return 0;
}

uint64_t link_meta_identity(const struct link_meta *m)
{
    char text[2048];
    size_t n = (size_t)snprintf(text, sizeof text, "%s %" PRIu32 " nodes=%" PRIu64 " relations=%" PRIu64 "\n",
                                LINK_FORMAT, m->version, m->nodes, m->relations);
    for (int i = 0; i < LINK_SPLITS + LINK_NAME_FILES && n < sizeof text; i++) {
        const struct dataset_file *f = i < LINK_SPLITS ? &m->split[i] : &m->names[i - LINK_SPLITS];
        if (!f->present)
            continue;
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "%s %s %s [%" PRIu64 ", %" PRIu64 "] bytes=%" PRIu64 " xxh3=%016" PRIx64 "\n",
                              i < LINK_SPLITS ? link_split_key[i] : link_names_key[i - LINK_SPLITS], f->file,
                              dtype_name(f->dtype), f->rows, f->cols, f->bytes, f->xxh3);
    }
    return XXH3_64bits(text, SL_MIN(n, sizeof text - 1));
}

bool link_is_link_dataset(const char *dir)
{
    char path[4096], *text;
    size_t len;
    char err[256];
    if (sl_path_join(path, sizeof path, dir, DATASET_META_FILE) < 0 ||
        sl_read_file(path, 1u << 20, &text, &len, err, sizeof err) < 0)
        return false;
    struct toml_value *root = toml_parse(text, len, path, err, sizeof err);
    free(text);
    if (!root)
        return false;
    const struct toml_value *f = toml_get(root, "format");
    bool link = f && f->type == TOML_STRING && !strcmp(f->u.s, LINK_FORMAT);
    toml_free(root);
    return link;
}

/* ---- loading -------------------------------------------------------------------------------- */

int link_load_split(const char *dir, const struct link_meta *m, int s, uint64_t **out, char *err, size_t errlen)
{
    const struct dataset_file *f = &m->split[s];
    *out = NULL;
    char fp[4096];
    if (sl_path_join(fp, sizeof fp, dir, f->file) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    uint64_t n = f->rows * 3;
    uint64_t *v = malloc((n + 1) * sizeof *v);
    if (!v)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " triples of %s", f->rows, fp);
    struct dataset_scan sc;
    int rc = dataset_scan_open(&sc, fp, false, err, errlen);
    size_t esz = dtype_size(f->dtype);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        if (esz == 4) {
            uint32_t x;
            rc = dataset_scan_read(&sc, &x, 4, err, errlen);
            v[i] = x;
        } else {
            rc = dataset_scan_read(&sc, &v[i], 8, err, errlen);
        }
        if (rc == 0 && v[i] >= (i % 3 == 1 ? m->relations : m->nodes))
            rc = sl_errf(err, errlen, -EBADMSG, "%s: triple %" PRIu64 " has %s %" PRIu64 " out of range; run gnnprep check",
                         fp, i / 3, i % 3 == 1 ? "relation" : i % 3 ? "tail" : "head", v[i]);
    }
    dataset_scan_free(&sc);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* ---- the check ---------------------------------------------------------------------------- */

#define CHECK_BATCH 4096 /* triples per read */

static int check_triples(const char *dir, const struct link_meta *m, int split, uint64_t *hash, char *err,
                         size_t errlen)
{
    const struct dataset_file *f = &m->split[split];
    char fp[4096];
    if (sl_path_join(fp, sizeof fp, dir, f->file) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    struct dataset_scan s;
    int rc = dataset_scan_open(&s, fp, true, err, errlen);
    size_t esz = dtype_size(f->dtype);
    unsigned char *buf = malloc(CHECK_BATCH * 3 * esz);
    if (!buf && rc == 0)
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
    static const char *const col[3] = {"head", "relation", "tail"};
    for (uint64_t t = 0; rc == 0 && t < f->rows;) {
        uint64_t n = SL_MIN((uint64_t)CHECK_BATCH, f->rows - t);
        if ((rc = dataset_scan_read(&s, buf, (size_t)(n * 3 * esz), err, errlen)) < 0)
            break;
        for (uint64_t i = 0; i < n && rc == 0; i++)
            for (int c = 0; c < 3; c++) {
                uint64_t v;
                if (esz == 4) {
                    uint32_t x;
                    memcpy(&x, buf + (i * 3 + (uint64_t)c) * 4, 4);
                    v = x;
                } else {
                    memcpy(&v, buf + (i * 3 + (uint64_t)c) * 8, 8);
                }
                uint64_t lim = c == 1 ? m->relations : m->nodes;
                if (v >= lim) {
                    rc = sl_errf(err, errlen, -EBADMSG,
                                 "%s: triple %" PRIu64 " has %s %" PRIu64 ", but the dataset has %" PRIu64
                                 " %s; the file was damaged, make the dataset again",
                                 fp, t + i, col[c], v, lim, c == 1 ? "relations" : "nodes");
                    break;
                }
            }
        t += n;
    }
    uint64_t rest = 0;
    if (rc == 0 && (rc = dataset_scan_finish(&s, hash, &rest, err, errlen)) == 0 && rest)
        rc = sl_errf(err, errlen, -EBADMSG, "%s: %" PRIu64 " bytes past the last triple", fp, rest);
    free(buf);
    dataset_scan_free(&s);
    return rc;
}

/* Names: one per line, none empty, none twice (a hash set of the lines'
 * XXH3-64 with the text compared on a match). */
static int check_names(const char *dir, const struct dataset_file *f, const char *key, uint64_t *hash, char *err,
                       size_t errlen)
{
    char fp[4096];
    if (sl_path_join(fp, sizeof fp, dir, f->file) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    char *text;
    size_t len;
    if (f->bytes > ((uint64_t)1 << 34))
        return sl_errf(err, errlen, -EFBIG, "%s: %" PRIu64 " bytes of names is more than this check reads", fp, f->bytes);
    int rc = sl_read_file(fp, (size_t)f->bytes + 1, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    *hash = XXH3_64bits(text, len);
    uint64_t cap = sl_pow2_at_least(f->rows * 2 + 2, 16);
    uint64_t *slot = calloc(cap, sizeof *slot); /* line start + 1, 0 = empty */
    if (!slot) {
        free(text);
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    }
    uint64_t line = 0;
    size_t at = 0;
    while (rc == 0 && at < len) {
        char *nl = memchr(text + at, '\n', len - at);
        if (!nl) {
            rc = sl_errf(err, errlen, -EBADMSG, "%s: line %" PRIu64 " has no end of line", fp, line + 1);
            break;
        }
        size_t n = (size_t)(nl - (text + at));
        if (n == 0) {
            rc = sl_errf(err, errlen, -EBADMSG, "%s: line %" PRIu64 " is empty; every %s needs a name", fp, line + 1,
                         key);
            break;
        }
        if (line >= f->rows) {
            rc = sl_errf(err, errlen, -EBADMSG, "%s: more than the %" PRIu64 " lines dataset.toml records", fp, f->rows);
            break;
        }
        uint64_t h = XXH3_64bits(text + at, n);
        for (uint64_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
            if (!slot[i]) {
                slot[i] = at + 1;
                break;
            }
            const char *o = text + slot[i] - 1;
            const char *oe = memchr(o, '\n', len - (size_t)(o - text));
            if ((size_t)(oe - o) == n && !memcmp(o, text + at, n)) {
                uint64_t first = 0;
                for (const char *p = text; p < o; p++)
                    first += *p == '\n';
                rc = sl_errf(err, errlen, -EBADMSG, "%s: lines %" PRIu64 " and %" PRIu64 " hold the same name '%.*s'", fp,
                             first + 1, line + 1, (int)SL_MIN(n, 200u), text + at);
                break;
            }
        }
        line++;
        at += n + 1;
    }
    if (rc == 0 && line != f->rows)
        rc = sl_errf(err, errlen, -EBADMSG, "%s: %" PRIu64 " lines, but dataset.toml records %" PRIu64, fp, line,
                     f->rows);
    free(slot);
    free(text);
    return rc;
}

int link_check(const char *dir, const struct link_meta *m, void (*file_ok)(void *arg, const char *file, uint64_t xxh3),
               void *arg, char *err, size_t errlen)
{
    for (int i = 0; i < LINK_SPLITS + LINK_NAME_FILES; i++) {
        const struct dataset_file *f = i < LINK_SPLITS ? &m->split[i] : &m->names[i - LINK_SPLITS];
        const char *key = i < LINK_SPLITS ? link_split_key[i] : link_names_key[i - LINK_SPLITS];
        if (!f->present)
            continue;
        uint64_t h = 0;
        int rc = i < LINK_SPLITS ? check_triples(dir, m, i, &h, err, errlen)
                                 : check_names(dir, f, i == LINK_SPLITS ? "node" : "relation", &h, err, errlen);
        if (rc < 0)
            return rc;
        if (h != f->xxh3)
            return sl_errf(err, errlen, -EBADMSG,
                           "%s/%s: XXH3-64 is %016" PRIx64 " but dataset.toml records %016" PRIx64
                           " (%s); the file was changed, make the dataset again",
                           dir, f->file, h, f->xxh3, key);
        if (file_ok)
            file_ok(arg, f->file, h);
    }
    return 0;
}
