/* check.c - `gnnprep check DIR`: verifies a dataset completely, through
 * the check gnnlaunch's launch verification uses (core/dataset_check.h:
 * checksums, topology, finite features, labels, splits), and records the
 * success with the files' identities (core/dataset_verify.h) so that the
 * next launch of an unchanged dataset reads nothing.
 * Exit 0 when valid, 2 with one message naming the file (and the first
 * offending elements) when not, 1 when the machine failed (read error,
 * out of memory). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "core/dataset_verify.h"
#include "core/linkdata.h"
#include "core/util.h"
#include "prep.h"

struct check_cli {
    const char *dir;
    const struct dataset_meta *m;
    bool quiet;
    double t_file; /* when the file being checked began */
};

static void file_ok(void *arg, int file, uint64_t xxh3)
{
    struct check_cli *c = arg;
    double now = sl_now(), s = now - c->t_file;
    c->t_file = now;
    if (!c->quiet)
        printf("  %-12s ok  xxh3 %016" PRIx64 "  %.2f s, %.2f GB/s\n", c->m->f[file].file, xxh3, s,
               (double)c->m->f[file].bytes / SL_MAX(s, 1e-6) / 1e9);
}

static void link_file_ok(void *arg, const char *file, uint64_t xxh3)
{
    struct check_cli *c = arg;
    double now = sl_now(), s = now - c->t_file;
    c->t_file = now;
    if (!c->quiet)
        printf("  %-14s ok  xxh3 %016" PRIx64 "  %.2f s\n", file, xxh3, s);
}

/* A link-prediction dataset (core/linkdata.h): its own check; nothing is
 * recorded (gnnlaunch does not train on one yet, so nothing would read
 * the record). */
static int check_link(struct check_cli *c)
{
    double t0 = sl_now();
    struct link_meta m;
    char err[4096];
    int rc = link_meta_read(c->dir, &m, true, err, sizeof err);
    if (rc == 0) {
        if (!c->quiet)
            printf("checking %s: link prediction, %" PRIu64 " nodes, %" PRIu64 " relations, triples train %" PRIu64
                   " valid %" PRIu64 " test %" PRIu64 "\n",
                   c->dir, m.nodes, m.relations, m.split[LINK_TRAIN].rows, m.split[LINK_VALID].rows,
                   m.split[LINK_TEST].rows);
        c->t_file = sl_now();
        rc = link_check(c->dir, &m, link_file_ok, c, err, sizeof err);
    }
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "gnnprep check: %s\n", err);
        return rc == -EBADMSG || rc == -EIO ? PREP_EXIT_BAD_INPUT : prep_exit_code(rc);
    }
    printf("%s: valid (%.2f s)\n", c->dir, sl_now() - t0);
    return PREP_EXIT_OK;
}

static void check_usage(FILE *f)
{
    fprintf(f, "usage: gnnprep check DIR [--quiet]\n\n"
               "Verifies a dataset completely: dataset.toml, file sizes and XXH3 checksums,\n"
               "the CSC topology (indptr monotone and ending at the edge count, ids in range,\n"
               "neighbours ascending), finite features with zero padding, labels in [-1, C),\n"
               "split ids in range, unique, labelled and disjoint. An error names the file and\n"
               "its first offending elements.\n"
               "A valid dataset is recorded with its files' identities (device, inode, size,\n"
               "modification and change times) in DIR/verified, or where DIR is not writable in\n"
               "$XDG_CACHE_HOME/sluice (~/.cache/sluice), so that gnnlaunch reads nothing to\n"
               "verify it until a file changes (docs/format.md, \"Verification\").\n"
               "Exit status: 0 valid, 2 invalid (the message names the file), 1 read failure.\n");
}

int prep_check_main(int argc, char **argv)
{
    struct check_cli c = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            check_usage(stdout);
            return PREP_EXIT_OK;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            c.quiet = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "gnnprep check: unknown option '%s'; see gnnprep check --help\n", argv[i]);
            return PREP_EXIT_BAD_INPUT;
        } else if (c.dir) {
            fprintf(stderr, "gnnprep check: more than one directory given ('%s' and '%s')\n", c.dir, argv[i]);
            return PREP_EXIT_BAD_INPUT;
        } else {
            c.dir = argv[i];
        }
    }
    if (!c.dir) {
        check_usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    if (link_is_link_dataset(c.dir))
        return check_link(&c);
    double t0 = sl_now();
    struct dataset_meta m;
    char err[4096];
    struct dataset_verify v = {.force = true, .file_ok = file_ok, .arg = &c};
    int rc = dataset_meta_read(c.dir, &m, true, err, sizeof err);
    if (rc == 0) {
        c.m = &m;
        c.t_file = sl_now();
        if (!c.quiet)
            printf("checking %s: %" PRIu64 " nodes, %" PRIu64 " edges, %" PRIu64 " features (%s), %u classes\n", c.dir,
                   m.nodes, m.edges, m.feat_dim, dtype_name(m.f[DATASET_FEATURES].dtype), m.classes);
        rc = dataset_verify_run(&v, c.dir, &m, err, sizeof err);
    }
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "gnnprep check: %s\n", err);
        /* a premature end of file is a truncated file: invalid data */
        return rc == -EBADMSG || rc == -EIO || rc == -EAGAIN ? PREP_EXIT_BAD_INPUT : prep_exit_code(rc);
    }
    if (v.note[0])
        fprintf(stderr, "gnnprep check: note: %s\n", v.note);
    printf("%s: valid (%.2f s)%s%s\n", c.dir, sl_now() - t0, v.recorded ? "; recorded in " : "",
           v.recorded ? v.record : "");
    return PREP_EXIT_OK;
}
