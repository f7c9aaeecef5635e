/* partition.c - partition.toml and the checks that tie a partitioned
 * layout to its dataset (core/partition.h). */
#include "core/partition.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/toml.h"
#include "core/util.h"

const char *const parts_file_name[PARTS_FILES] = {"node_pos.bin", "pos_node.bin", "features.bin", "buckets.bin",
                                                  "buckets_index.bin"};
const char *const parts_file_key[PARTS_FILES] = {"node_pos", "pos_node", "features", "buckets", "buckets_index"};

static const char *const order_names[PARTS_ORDERS] = {"random", "degree", "neighbours"};

const char *parts_order_name(enum parts_order o)
{
    return (unsigned)o < PARTS_ORDERS ? order_names[o] : "?";
}

int parts_order_parse(const char *s, enum parts_order *out)
{
    for (unsigned i = 0; i < PARTS_ORDERS; i++)
        if (s && !strcmp(s, order_names[i])) {
            *out = (enum parts_order)i;
            return 0;
        }
    return -EINVAL;
}

void parts_dir_name(uint32_t parts, char *out, size_t len)
{
    snprintf(out, len, "parts.%" PRIu32, parts);
}

void parts_meta_init(struct parts_meta *pm, const struct dataset_meta *m, uint32_t parts)
{
    memset(pm, 0, sizeof *pm);
    pm->version = PARTS_VERSION;
    pm->parts = parts;
    pm->nodes = m->nodes;
    pm->edges = m->edges;
    pm->row_stride = m->f[DATASET_FEATURES].row_stride;
    pm->part_nodes = (m->nodes + parts - 1) / parts;
    pm->part_bytes = sl_round_up(pm->part_nodes * pm->row_stride, PARTS_ALIGN);
    pm->dataset_identity = dataset_meta_identity(m);
}

uint64_t parts_file_bytes(const struct parts_meta *pm, const struct dataset_meta *m, int file)
{
    uint64_t id = dtype_size(dtype_for_ids(m->nodes));
    switch (file) {
    case PARTS_NODE_POS:
    case PARTS_POS_NODE:
        return m->nodes * id;
    case PARTS_FEATURES:
        return (uint64_t)pm->parts * pm->part_bytes;
    case PARTS_BUCKETS_INDEX:
        return (uint64_t)pm->parts * pm->parts * 16;
    default:
        return UINT64_MAX; /* buckets.bin: depends on the column sizes; checked against the index's end */
    }
}

int parts_meta_write(const char *dir, const struct parts_meta *pm, char *err, size_t errlen)
{
    char path[4096], tmp[4200];
    if (sl_path_join(path, sizeof path, dir, PARTS_META_FILE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    FILE *f;
    int rc = sl_atomic_begin(&f, path, tmp, sizeof tmp, err, errlen);
    if (rc < 0)
        return rc;
    fprintf(f, "# Sluice partitioned layout (docs/partitions.md). Written by gnnprep partition.\n");
    fprintf(f, "format = \"%s\"\nversion = %u\n", PARTS_FORMAT, PARTS_VERSION);
    fprintf(f, "parts = %" PRIu32 "\ntrain_parts = %" PRIu32 "\neval_parts = %" PRIu32 "\npart_nodes = %" PRIu64 "\npart_bytes = %" PRIu64 "\n",
            pm->parts, pm->train_parts, pm->eval_parts, pm->part_nodes, pm->part_bytes);
    fprintf(f, "row_stride = %" PRIu64 "\nnodes = %" PRIu64 "\nedges = %" PRIu64 "\ntrain_nodes = %" PRIu64 "\n",
            pm->row_stride, pm->nodes, pm->edges, pm->train_nodes);
    fprintf(f, "order = \"%s\"\nseed = %" PRIu64 "\ndataset_identity = \"%016" PRIx64 "\"\n", parts_order_name(pm->order),
            pm->seed, pm->dataset_identity);
    fprintf(f, "source = ");
    toml_write_string(f, pm->source);
    fputc('\n', f);
    for (int i = 0; i < PARTS_FILES; i++)
        fprintf(f, "\n[%s]\nfile = \"%s\"\nbytes = %" PRIu64 "\nxxh3 = \"%016" PRIx64 "\"\n", parts_file_key[i],
                parts_file_name[i], pm->bytes[i], pm->xxh3[i]);
    return sl_atomic_commit(f, tmp, path, err, errlen);
}

#define MISSING_HINT "remake the layout with gnnprep partition"
static int get_uint(const char *path, const struct toml_value *tab, const char *tname, const char *key, uint64_t *out,
                    char *err, size_t errlen)
{
    return toml_need_uint(tab, path, tname, key, MISSING_HINT, out, err, errlen);
}

static int get_str(const char *path, const struct toml_value *tab, const char *tname, const char *key, const char **out,
                   char *err, size_t errlen)
{
    return toml_need_str(tab, path, tname, key, MISSING_HINT, out, err, errlen);
}

static int get_hex(const char *path, const struct toml_value *tab, const char *tname, const char *key, uint64_t *out,
                   char *err, size_t errlen)
{
    const char *s;
    int rc = get_str(path, tab, tname, key, &s, err, errlen);
    if (rc < 0)
        return rc;
    char *end;
    errno = 0;
    unsigned long long h = strtoull(s, &end, 16);
    if (strlen(s) != 16 || *end || errno)
        return sl_errf(err, errlen, -EINVAL, "%s: %s%s%s = \"%s\" must be 16 hex digits", path, tname ? tname : "",
                       tname ? "." : "", key, s);
    *out = h;
    return 0;
}

static int parse(const char *path, const char *text, size_t len, struct parts_meta *pm, char *err, size_t errlen)
{
    char perr[1024];
    struct toml_value *root = toml_parse(text, len, path, perr, sizeof perr);
    if (!root)
        return sl_errf(err, errlen, -EINVAL, "%s", perr);
    const char *fmt, *order, *src = "";
    uint64_t version, parts, train_parts, eval_parts = 0;
    int rc;
    if ((rc = get_str(path, root, NULL, "format", &fmt, err, errlen)) < 0)
        goto out;
    rc = -EINVAL;
    if (strcmp(fmt, PARTS_FORMAT)) {
        sl_errf(err, errlen, rc, "%s: format = \"%s\", expected \"%s\"", path, fmt, PARTS_FORMAT);
        goto out;
    }
    if ((rc = get_uint(path, root, NULL, "version", &version, err, errlen)) < 0)
        goto out;
    rc = -EINVAL;
    if (version != PARTS_VERSION) {
        sl_errf(err, errlen, rc, "%s: version %" PRIu64 " is not supported (this build reads %d); remake the layout",
                path, version, PARTS_VERSION);
        goto out;
    }
    if ((rc = get_uint(path, root, NULL, "parts", &parts, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "train_parts", &train_parts, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "part_nodes", &pm->part_nodes, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "part_bytes", &pm->part_bytes, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "row_stride", &pm->row_stride, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "nodes", &pm->nodes, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "edges", &pm->edges, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "train_nodes", &pm->train_nodes, err, errlen)) < 0 ||
        (rc = get_uint(path, root, NULL, "seed", &pm->seed, err, errlen)) < 0 ||
        (rc = get_str(path, root, NULL, "order", &order, err, errlen)) < 0 ||
        (rc = get_hex(path, root, NULL, "dataset_identity", &pm->dataset_identity, err, errlen)) < 0)
        goto out;
    if (toml_get(root, "source") && (rc = get_str(path, root, NULL, "source", &src, err, errlen)) < 0)
        goto out;
    if (toml_get(root, "eval_parts") && (rc = get_uint(path, root, NULL, "eval_parts", &eval_parts, err, errlen)) < 0)
        goto out;
    snprintf(pm->source, sizeof pm->source, "%s", src);
    rc = -EINVAL;
    if (parts < 1 || parts > PARTS_MAX || train_parts > parts || eval_parts > parts ||
        (eval_parts && eval_parts < train_parts)) {
        sl_errf(err, errlen, rc, "%s: parts = %" PRIu64 ", train_parts = %" PRIu64 ", eval_parts = %" PRIu64
                " are out of range", path, parts, train_parts, eval_parts);
        goto out;
    }
    pm->eval_parts = (uint32_t)eval_parts;
    pm->parts = (uint32_t)parts;
    pm->train_parts = (uint32_t)train_parts;
    if (parts_order_parse(order, &pm->order) < 0) {
        sl_errf(err, errlen, rc, "%s: order = \"%s\" is not random, degree or neighbours", path, order);
        goto out;
    }
    for (int i = 0; i < PARTS_FILES; i++) {
        const struct toml_value *t = toml_get(root, parts_file_key[i]);
        const char *file;
        if (!t || t->type != TOML_TABLE) {
            sl_errf(err, errlen, rc, "%s: the [%s] table is missing; remake the layout", path, parts_file_key[i]);
            goto out;
        }
        if ((rc = get_str(path, t, parts_file_key[i], "file", &file, err, errlen)) < 0 ||
            (rc = get_uint(path, t, parts_file_key[i], "bytes", &pm->bytes[i], err, errlen)) < 0 ||
            (rc = get_hex(path, t, parts_file_key[i], "xxh3", &pm->xxh3[i], err, errlen)) < 0)
            goto out;
        rc = -EINVAL;
        if (strcmp(file, parts_file_name[i])) {
            sl_errf(err, errlen, rc, "%s: %s.file = \"%s\", expected \"%s\"", path, parts_file_key[i], file,
                    parts_file_name[i]);
            goto out;
        }
    }
    rc = 0;
out:
    toml_free(root);
    return rc;
}

int parts_meta_read(const char *dir, const struct dataset_meta *m, struct parts_meta *pm, char *err, size_t errlen)
{
    memset(pm, 0, sizeof *pm);
    char path[4096];
    if (sl_path_join(path, sizeof path, dir, PARTS_META_FILE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    if (access(path, F_OK) < 0)
        return sl_errf(err, errlen, -ENOENT, "%s: no partitioned layout here; make one with gnnprep partition", dir);
    char *text;
    size_t len;
    int rc = sl_read_file(path, 1u << 20, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    rc = parse(path, text, len, pm, err, errlen);
    free(text);
    if (rc < 0)
        return rc;
    uint64_t id = dataset_meta_identity(m);
    if (pm->dataset_identity != id || pm->nodes != m->nodes || pm->edges != m->edges)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: made from another dataset than the one beside it (dataset identity %016" PRIx64
                       ", the dataset's is %016" PRIx64 "); the dataset was changed or remade: run `gnnprep partition "
                       "DATASET --parts %" PRIu32 "` again",
                       path, pm->dataset_identity, id, pm->parts);
    struct parts_meta want;
    parts_meta_init(&want, m, pm->parts);
    if (pm->part_nodes != want.part_nodes || pm->part_bytes != want.part_bytes || pm->row_stride != want.row_stride)
        return sl_errf(err, errlen, -EINVAL, "%s: part_nodes, part_bytes or row_stride disagree with %" PRIu32
                       " partitions of this dataset; remake the layout", path, pm->parts);
    if (pm->train_parts != (pm->train_nodes + pm->part_nodes - 1) / pm->part_nodes ||
        pm->train_nodes != m->f[DATASET_TRAIN].rows)
        return sl_errf(err, errlen, -EINVAL, "%s: train_nodes or train_parts disagree with the dataset's training split; "
                       "remake the layout", path);
    for (int i = 0; i < PARTS_FILES; i++) {
        uint64_t want_b = parts_file_bytes(pm, m, i);
        if (want_b != UINT64_MAX && pm->bytes[i] != want_b)
            return sl_errf(err, errlen, -EINVAL, "%s: %s.bytes = %" PRIu64 " but the counts make %" PRIu64, path,
                           parts_file_key[i], pm->bytes[i], want_b);
        char fp[4096];
        struct stat st;
        if (sl_path_join(fp, sizeof fp, dir, parts_file_name[i]) < 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
        if (stat(fp, &st) < 0)
            return sl_errf(err, errlen, -errno, "%s: %s; the layout is incomplete, remake it with gnnprep partition", fp,
                           strerror(errno));
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != pm->bytes[i])
            return sl_errf(err, errlen, -EINVAL,
                           "%s: %lld bytes but partition.toml records %" PRIu64
                           "; the file was changed or truncated, remake the layout",
                           fp, (long long)st.st_size, pm->bytes[i]);
    }
    return 0;
}

int parts_verify(const char *dir, const struct parts_meta *pm, char *err, size_t errlen)
{
    for (int i = 0; i < PARTS_FILES; i++) {
        char fp[4096];
        if (sl_path_join(fp, sizeof fp, dir, parts_file_name[i]) < 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
        uint64_t h, n;
        int rc = file_xxh3(fp, &h, &n, err, errlen);
        if (rc < 0)
            return rc;
        if (h != pm->xxh3[i] || n != pm->bytes[i])
            return sl_errf(err, errlen, -EBADMSG,
                           "%s: contents differ from partition.toml (xxh3 %016" PRIx64 ", recorded %016" PRIx64
                           "); the file was changed, remake the layout with gnnprep partition",
                           fp, h, pm->xxh3[i]);
    }
    return 0;
}
