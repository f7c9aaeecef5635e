/* importutil.h - what `gnnprep import` and `gnnprep import-ogb` share: one
 * job description (where features, labels, edges and splits come from and
 * how to convert them) and the function that turns it into a dataset.
 *
 * imp_run streams every input once (twice for a 2xE edge array, see
 * edgelist.h) and writes through sl_dsw, so OUT appears complete or not at
 * all. Order: open and check every input's header first (cheap, so a wrong
 * shape or dtype fails in milliseconds), then labels, splits, the topology
 * (the long part), features; dataset.toml last.
 *
 * Memory: the CSC builder's mem_limit, fixed read/write buffers (~40 MiB),
 * the split ids (8 bytes each, held to sort and check them) and one bit per
 * node marking labelled nodes (split nodes must be labelled).
 * Temporary disk: the builder's sorted runs in the staging directory. */
#ifndef SLUICE_IMPORTUTIL_H
#define SLUICE_IMPORTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "edgelist.h"

#define IMP_DEFAULT_MEM_LIMIT (1ull << 30)

/* An input array: a .npy file, or a member of an .npz archive. */
typedef struct imp_src {
    const char *path;
    const char *member; /* NULL: path is a plain .npy file */
} imp_src;

enum { IMP_TRAIN, IMP_VAL, IMP_TEST, IMP_SPLITS };

typedef struct imp_job {
    const char *cmd;              /* "import", "import-ogb": message prefix */
    const char *out;              /* dataset directory to create */
    imp_src feat;                 /* N x F numeric: N = its row count */
    imp_src labels;               /* N or N x 1, int or float (NaN -> -1) */
    imp_src edges;                /* an npz member, or a file of edge_fmt */
    sl_edge_fmt edge_fmt;
    imp_src num_nodes;            /* optional npz member cross-checking N (OGB) */
    const char *split[IMP_SPLITS]; /* text (one id per line, gzip ok) or .npy */
    uint64_t nodes;               /* 0, or the node count the user expects */
    uint64_t mem_limit;
    bool undirected, dedupe, drop_self_loops;
    sl_dtype dtype;               /* SL_DT_NONE: f16 if the source is, else f32 */
    bool quiet;                   /* no progress lines on stdout */
    char source[512];             /* the command line, for dataset.toml */
} imp_job;

/* Sets the defaults (mem_limit, dtype auto) and the command name. */
void imp_job_init(imp_job *j, const char *cmd);

/* Parses one option both importers take (--mem-limit, --dtype,
 * --undirected, --dedupe, --drop-self-loops, --quiet) at argv[*i], in the
 * forms "--opt VALUE" and "--opt=VALUE". Returns 1 and advances *i past it
 * when it was one, 0 when argv[*i] is something else, -EINVAL with a
 * message when its value is bad or missing. */
int imp_common_opt(imp_job *j, int argc, char **argv, int *i, char *err, size_t errlen);

/* Matches "--name VALUE" / "--name=VALUE" at argv[*i]: 1 with *val set and
 * *i advanced, 0 if argv[*i] is another option, -EINVAL if the value is
 * missing. */
int imp_opt_value(int argc, char **argv, int *i, const char *name, const char **val, char *err, size_t errlen);

/* The help text lines for the common options. */
extern const char imp_common_help[];

/* Records "gnnprep ARGS..." (shell-quoted where needed) in j->source. */
void imp_set_source(imp_job *j, int argc, char **argv);

/* Builds the dataset. 0 or -errno with a message naming the input at fault
 * (bad input: -EINVAL, -ERANGE, -ENOENT, -EEXIST, -EBADMSG; anything else is
 * a failure of the machine). Nothing is left at OUT or beside it on error. */
int imp_run(const imp_job *j, char *err, size_t errlen);

#endif
