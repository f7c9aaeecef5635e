/* ogb.c - `gnnprep import-ogb`: a dataset from an OGB node-property
 * dataset in its raw download layout. OGB ships two:
 * binary (ogbn-papers100M):
 *   RAW_DIR/raw/data.npz         edge_index.npy  int64 (2, E): sources, destinations
 *                                node_feat.npy   float (N, F)
 *                                num_nodes_list.npy  (1,) = N, checked when present
 *   RAW_DIR/raw/node-label.npz   node_label.npy  (N,) or (N, 1), NaN = unlabelled
 * CSV (ogbn-arxiv, ogbn-products; read by ogbcsv.c):
 *   RAW_DIR/raw/edge.csv.gz, node-feat.csv.gz, node-label.csv.gz,
 *   num-node-list.csv.gz, num-edge-list.csv.gz
 * and for both
 *   RAW_DIR/split/NAME/{train,valid,test}.csv.gz   one node id per line
 * The layout is recognised by its first file: raw/data.npz, else
 * raw/edge.csv.gz. Npz members may be stored or deflated (np.savez /
 * np.savez_compressed) and use zip64; nothing is extracted to disk (see
 * edgelist.h for how the 2xE edge array is read in one pass with two
 * cursors). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"
#include "importutil.h"
#include "ogbcsv.h"
#include "prep.h"

static const char usage_line[] = "usage: gnnprep import-ogb RAW_DIR OUT [options]\n";

static void help(void)
{
    fputs(usage_line, stdout);
    fputs("\n"
          "Converts an OGB node-property dataset in its raw download layout into the\n"
          "Sluice dataset OUT (docs/format.md). OGB ships two layouts; the one RAW_DIR/raw\n"
          "holds is used: the binary one when raw/data.npz is there, else the CSV one.\n"
          "Binary (ogbn-papers100M):\n"
          "  RAW_DIR/raw/data.npz        edge_index (int64, 2 x E: sources, destinations),\n"
          "                              node_feat (N x F float32; float16/float64 converted),\n"
          "                              num_nodes_list (checked against N when present)\n"
          "  RAW_DIR/raw/node-label.npz  node_label (N or N x 1; NaN = unlabelled -> -1)\n"
          "CSV (ogbn-arxiv, ogbn-products; gzip text, no header):\n"
          "  RAW_DIR/raw/edge.csv.gz           one edge \"SRC,DST\" per line\n"
          "  RAW_DIR/raw/node-feat.csv.gz      one node per line: F numbers separated by\n"
          "                                    commas (F from line 1; every line has F)\n"
          "  RAW_DIR/raw/node-label.csv.gz     one class number per line (3 or 3.0); nan,\n"
          "                                    -1 or an empty line = unlabelled -> -1\n"
          "  RAW_DIR/raw/num-node-list.csv.gz  N; the other files must agree with it\n"
          "  RAW_DIR/raw/num-edge-list.csv.gz  E, the number of lines of edge.csv.gz\n"
          "Both:\n"
          "  RAW_DIR/split/NAME/{train,valid,test}.csv.gz   one node id per line\n"
          "Edge (s, d) makes s an in-neighbour of d. OGB stores some undirected graphs\n"
          "(ogbn-products, ogbn-proteins: add_inverse_edge in OGB's master.csv) with each\n"
          "edge once and its loaders add the reverse edges: pass --undirected for those.\n"
          "Node features are required (ogbn-proteins has none, and its labels are\n"
          "multi-label: it is not supported as shipped).\n"
          "\n"
          "options:\n"
          "  --split NAME        the split directory under RAW_DIR/split (default: the only\n"
          "                      one there, e.g. time or sales_ranking)\n",
          stdout);
    fputs(imp_common_help, stdout);
    fputs("\nEverything is streamed from the archives and text files: memory stays near\n"
          "--mem-limit plus ~40 MiB plus 8 bytes per split id. Temporary disk: the edge\n"
          "sort's runs (about 8 bytes per stored edge, 16 when N >= 2^32) inside\n"
          ".OUT.partial-PID beside OUT; nothing is extracted. Reading edge_index inflates\n"
          "its source half twice when the member is compressed. The CSV layout's feature\n"
          "rows are converted last, so a node-feat.csv.gz whose row count disagrees with\n"
          "num-node-list.csv.gz is reported after the edges are sorted.\n"
          "Exit status: 0 done, 2 bad input (nothing is left at OUT), 1 other failure.\n",
          stdout);
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "gnnprep import-ogb: %s\n%s(`gnnprep import-ogb --help` lists the options)\n", msg, usage_line);
    return PREP_EXIT_BAD_INPUT;
}

static int fail(const char *msg, int rc)
{
    fprintf(stderr, "gnnprep import-ogb: %s\n", msg);
    return prep_exit_code(rc);
}

/* Picks RAW_DIR/split/NAME: the given name, or the only subdirectory. */
static int find_split(const char *raw, const char *want, char *out, size_t len, char *err, size_t errlen)
{
    char dir[4096];
    if (sl_path_join(dir, sizeof dir, raw, "split") < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", raw);
    DIR *d = opendir(dir);
    if (!d)
        return sl_errf(err, errlen, errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno,
                       "%s: cannot open: %s; an OGB dataset keeps its splits in RAW_DIR/split/NAME/", dir,
                       strerror(errno));
    char names[512] = "", first[256] = "";
    int count = 0, found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4400];
        struct stat st;
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        if (stat(sub, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        if (want && !strcmp(want, e->d_name))
            found = 1;
        if (!count)
            snprintf(first, sizeof first, "%s", e->d_name);
        size_t n = strlen(names);
        if (n + strlen(e->d_name) + 8 < sizeof names)
            snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", e->d_name);
        count++;
    }
    closedir(d);
    if (want && !found)
        return sl_errf(err, errlen, -ENOENT, "%s: no split named '%s' (found: %s)", dir, want,
                       count ? names : "none");
    if (!want && count == 0)
        return sl_errf(err, errlen, -ENOENT, "%s: no split directory inside; expected e.g. split/time/train.csv.gz", dir);
    if (!want && count > 1)
        return sl_errf(err, errlen, -EINVAL, "%s: several splits (%s); choose one with --split NAME", dir, names);
    if (snprintf(out, len, "%s/%s", dir, want ? want : first) >= (int)len)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    return 0;
}

/* Where a layout's inputs are; struct imp_job points into it. */
typedef struct ogb_paths {
    char feat[4200], labels[4200], edges[4200], num_nodes[4200], num_edges[4200];
} ogb_paths;

/* Fills j's inputs for the layout RAW_DIR/raw holds: data.npz -> binary,
 * else edge.csv.gz -> CSV; neither is bad input. */
static int find_layout(const char *raw, struct imp_job *j, ogb_paths *p, char *err, size_t errlen)
{
    struct stat st;
    if (snprintf(p->feat, sizeof p->feat, "%s/raw/data.npz", raw) >= (int)sizeof p->feat)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", raw);
    if (stat(p->feat, &st) == 0) {
        snprintf(p->labels, sizeof p->labels, "%s/raw/node-label.npz", raw);
        j->feat = (struct imp_src){p->feat, "node_feat.npy"};
        j->edges = (struct imp_src){p->feat, "edge_index.npy"};
        j->num_nodes = (struct imp_src){p->feat, "num_nodes_list.npy"};
        j->labels = (struct imp_src){p->labels, "node_label.npy"};
        return 0;
    }
    int npz_errno = errno;
    /* the layouts of OGB node-property datasets that are not one graph of
     * one node type with features and one label per node */
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/raw/relations", raw);
    if (stat(probe, &st) == 0 && S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOTSUP, "%s looks like ogbn-mag, a heterogeneous graph (raw/relations/: several "
                       "node and edge types): Sluice trains graphs of one node type and one edge type. Export one "
                       "relation (ogbn-mag: paper -cites-> paper, with the paper features and labels) as .npy and "
                       "bring it in with gnnprep import", raw);
    snprintf(probe, sizeof probe, "%s/raw/node_species.csv.gz", raw);
    char feat_csv[4300];
    snprintf(feat_csv, sizeof feat_csv, "%s/raw/node-feat.csv.gz", raw);
    if (stat(probe, &st) == 0 && stat(feat_csv, &st) != 0)
        return sl_errf(err, errlen, -ENOTSUP, "%s looks like ogbn-proteins: its nodes have no features (the data are "
                       "on the edges, raw/edge-feat.csv.gz) and each has 112 binary labels (multi-label, scored by "
                       "ROC-AUC), where Sluice trains single-label classification from node features. Not supported; "
                       "aggregating the edge features into node features and picking one label would make it so",
                       raw);
    snprintf(p->edges, sizeof p->edges, "%s/raw/edge.csv.gz", raw);
    if (stat(p->edges, &st) < 0)
        return sl_errf(err, errlen, -ENOENT, "%s/raw: holds neither data.npz nor edge.csv.gz (%s/raw/data.npz: %s); "
                       "expected an OGB node-property dataset as downloaded, in its binary layout (raw/data.npz, "
                       "raw/node-label.npz; ogbn-papers100M) or its CSV layout (raw/edge.csv.gz, node-feat.csv.gz, "
                       "node-label.csv.gz, num-node-list.csv.gz, num-edge-list.csv.gz; ogbn-arxiv, ogbn-products)",
                       raw, raw, strerror(npz_errno));
    snprintf(p->feat, sizeof p->feat, "%s/raw/node-feat.csv.gz", raw);
    snprintf(p->labels, sizeof p->labels, "%s/raw/node-label.csv.gz", raw);
    snprintf(p->num_nodes, sizeof p->num_nodes, "%s/raw/num-node-list.csv.gz", raw);
    snprintf(p->num_edges, sizeof p->num_edges, "%s/raw/num-edge-list.csv.gz", raw);
    j->feat = (struct imp_src){p->feat, NULL};
    j->edges = (struct imp_src){p->edges, NULL};
    j->labels = (struct imp_src){p->labels, NULL};
    j->num_nodes = (struct imp_src){p->num_nodes, NULL};
    j->num_edges = (struct imp_src){p->num_edges, NULL};
    j->open = ogbcsv_open;
    return 0;
}

/* OGB datasets whose raw edges hold each undirected edge once. */
static void hint_undirected(const char *raw)
{
    static const char *const names[] = {"ogbn_products", "ogbn_proteins"};
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", raw);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    for (size_t i = 0; i < SL_ARRAY_LEN(names); i++)
        if (!strcmp(base, names[i]))
            fprintf(stderr, "gnnprep import-ogb: note: OGB stores %s's edges once and its loaders add the "
                            "reverse edges; pass --undirected to do the same\n", names[i]);
}

int prep_import_ogb_main(int argc, char **argv)
{
    struct imp_job j;
    imp_job_init(&j, "import-ogb");
    char err[2048];
    const char *raw = NULL, *split = NULL;
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help();
            return PREP_EXIT_OK;
        }
        int r = imp_common_opt(&j, argc, argv, &i, err, sizeof err);
        if (r == 0)
            r = imp_opt_value(argc, argv, &i, "--split", &split, err, sizeof err);
        if (r < 0)
            return usage_error(err);
        if (r > 0)
            continue;
        if (a[0] == '-' && a[1]) {
            snprintf(err, sizeof err, "unknown option %s", a);
            return usage_error(err);
        }
        if (!raw) {
            raw = a;
        } else if (!j.out) {
            j.out = a;
        } else {
            snprintf(err, sizeof err, "unexpected argument '%s'", a);
            return usage_error(err);
        }
        i++;
    }
    if (!raw || !j.out)
        return usage_error("expected RAW_DIR (the OGB dataset directory, holding raw/ and split/) and OUT");
    if (split && (!*split || strchr(split, '/') || !strcmp(split, ".") || !strcmp(split, "..")))
        return usage_error("--split takes the name of a directory under RAW_DIR/split");
    struct stat st;
    int src = stat(raw, &st);
    if (src < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, sizeof err, "%s: %s; expected the OGB dataset directory (holding raw/ and split/)", raw,
                 src < 0 ? strerror(errno) : "not a directory");
        return fail(err, -ENOENT);
    }
    /* RAW_DIR given as the dataset's raw/ folder itself (it holds data.npz or
     * edge.csv.gz, and no raw/ of its own): its parent is meant */
    char parent[4096];
    {
        char inner[4300], npz[4300], csv[4300];
        snprintf(inner, sizeof inner, "%s/raw", raw);
        snprintf(npz, sizeof npz, "%s/data.npz", raw);
        snprintf(csv, sizeof csv, "%s/edge.csv.gz", raw);
        struct stat s2;
        if (stat(inner, &s2) != 0 && (stat(npz, &s2) == 0 || stat(csv, &s2) == 0)) {
            snprintf(parent, sizeof parent, "%s", raw);
            size_t n = strlen(parent);
            while (n > 1 && parent[n - 1] == '/')
                parent[--n] = '\0';
            char *slash = strrchr(parent, '/');
            if (slash == parent)
                parent[1] = '\0';
            else if (slash)
                *slash = '\0';
            else
                snprintf(parent, sizeof parent, ".");
            fprintf(stderr, "gnnprep import-ogb: note: %s is the dataset's raw/ folder; importing its parent %s (the "
                            "directory that holds raw/ and split/)\n", raw, parent);
            raw = parent;
        }
    }
    ogb_paths paths;
    char sdir[4096], tr[4300], va[4300], te[4300];
    int rc = find_layout(raw, &j, &paths, err, sizeof err);
    if (rc < 0)
        return fail(err, rc);
    if ((rc = find_split(raw, split, sdir, sizeof sdir, err, sizeof err)) < 0)
        return fail(err, rc);
    snprintf(tr, sizeof tr, "%s/train.csv.gz", sdir);
    snprintf(va, sizeof va, "%s/valid.csv.gz", sdir);
    snprintf(te, sizeof te, "%s/test.csv.gz", sdir);
    j.split[IMP_TRAIN] = tr;
    j.split[IMP_VAL] = va;
    j.split[IMP_TEST] = te;
    if (!j.undirected) /* a correctness note: --quiet does not hide it */
        hint_undirected(raw);
    imp_set_source(&j, argc, argv);
    rc = imp_run(&j, err, sizeof err);
    if (rc < 0)
        return fail(err, rc);
    return PREP_EXIT_OK;
}
