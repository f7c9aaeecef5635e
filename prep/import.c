/* import.c - `gnnprep import`: a dataset from an edge list (SNAP text, raw
 * binary pairs or .npy), .npy features and labels, and three split files. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "importutil.h"
#include "prep.h"

static const char usage_line[] =
    "usage: gnnprep import OUT --edges FILE --features F.npy --labels L.npy --train T --val V --test U [options]\n";

static void help(void)
{
    fputs(usage_line, stdout);
    fputs("\n"
          "Builds the Sluice dataset OUT (docs/format.md) from:\n"
          "  --edges FILE        edge list; edge (s, d) makes s an in-neighbour of d:\n"
          "                        snap   text, one \"SRC DST\" per line (spaces or tabs; '#'\n"
          "                               comments and blank lines skipped; extra columns\n"
          "                               ignored; may be gzip-compressed)\n"
          "                        bin32  raw little-endian u32 pairs (src, dst)\n"
          "                        bin64  raw little-endian u64 pairs\n"
          "                        npy    int32/int64 array, 2xE (row 0 sources, row 1\n"
          "                               destinations) or Ex2 (one edge per row)\n"
          "  --edge-format FMT   snap|bin32|bin64|npy (default: detected: .npy or the npy\n"
          "                      magic -> npy; .bin32/.u32, .bin64/.u64 -> binary; else snap)\n"
          "  --features F.npy    N x F array (float32/float16/float64 or integers); its\n"
          "                      row count N is the number of nodes\n"
          "  --labels L.npy      N or N x 1 class numbers: integers (-1 = unlabelled) or\n"
          "                      floats (NaN = unlabelled); classes = largest label + 1\n"
          "  --train T, --val V, --test U\n"
          "                      node ids of each split: text, one id per line ('#' comments\n"
          "                      ok, gzip ok), or a 1-D integer .npy; ids must be labelled\n"
          "                      and unique within a split, the splits disjoint; stored sorted\n"
          "  --nodes N           expected node count, checked against the features\n",
          stdout);
    fputs(imp_common_help, stdout);
    fputs("\nMemory: --mem-limit for the edge sort plus ~40 MiB of buffers plus 8 bytes per\n"
          "split id. Temporary disk: the edge sort's runs (about 8 bytes per stored edge,\n"
          "16 when N >= 2^32) inside .OUT.partial-PID beside OUT, removed at the end.\n"
          "Exit status: 0 done, 2 bad input (nothing is left at OUT), 1 other failure.\n",
          stdout);
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "gnnprep import: %s\n%s(`gnnprep import --help` lists the options)\n", msg, usage_line);
    return PREP_EXIT_BAD_INPUT;
}

int prep_import_main(int argc, char **argv)
{
    if (prep_find_opt(argc, argv, "--triples")) /* a knowledge graph: import_triples.c */
        return prep_import_triples_main(argc, argv);
    struct imp_job j;
    imp_job_init(&j, "import");
    char err[2048];
    const char *fmt = NULL, *nodes = NULL;
    struct {
        const char *name;
        const char **dst;
    } opts[] = {
        {"--edges", &j.edges.path},       {"--features", &j.feat.path},   {"--labels", &j.labels.path},
        {"--train", &j.split[IMP_TRAIN]}, {"--val", &j.split[IMP_VAL]},   {"--test", &j.split[IMP_TEST]},
        {"--edge-format", &fmt},          {"--nodes", &nodes},
    };
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help();
            return PREP_EXIT_OK;
        }
        int r = imp_common_opt(&j, argc, argv, &i, err, sizeof err);
        for (size_t k = 0; r == 0 && k < SL_ARRAY_LEN(opts); k++)
            r = imp_opt_value(argc, argv, &i, opts[k].name, opts[k].dst, err, sizeof err);
        if (r < 0)
            return usage_error(err);
        if (r > 0)
            continue;
        if (a[0] == '-' && a[1]) {
            snprintf(err, sizeof err, "unknown option %s", a);
            return usage_error(err);
        }
        if (j.out) {
            snprintf(err, sizeof err, "unexpected argument '%s' (OUT is already '%s')", a, j.out);
            return usage_error(err);
        }
        j.out = a;
        i++;
    }
    if (!j.out)
        return usage_error("missing OUT, the dataset directory to create");
    for (size_t k = 0; k < 6; k++)
        if (!*opts[k].dst) {
            snprintf(err, sizeof err, "missing %s", opts[k].name);
            return usage_error(err);
        }
    if (fmt && edge_fmt_parse(fmt, &j.edge_fmt) < 0) {
        snprintf(err, sizeof err, "--edge-format %s: must be snap, bin32, bin64 or npy", fmt);
        return usage_error(err);
    }
    if (nodes && (sl_parse_u64(nodes, false, &j.nodes) < 0 || j.nodes == 0)) {
        snprintf(err, sizeof err, "--nodes %s: expected a positive node count", nodes);
        return usage_error(err);
    }
    imp_set_source(&j, argc, argv);
    int rc = imp_run(&j, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep import: %s\n", err);
        return prep_exit_code(rc);
    }
    return PREP_EXIT_OK;
}
