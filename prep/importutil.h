/* importutil.h - what `gnnprep import` and `gnnprep import-ogb` share: one
 * job description (where features, labels, edges and splits come from and
 * how to convert them), the interface through which the conversion reads
 * its inputs (struct imp_input: .npy/.npz arrays and edge-list files here, OGB's
 * CSV layout in ogbcsv.h) and the function that turns it into a dataset.
 *
 * imp_run streams every input once (twice for a 2xE edge array, see
 * edgelist.h) and writes through struct dataset_dir, so OUT appears complete or not at
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
/* Raw bytes an input reads at a time (features, labels), and labels per batch. */
#define IMP_CHUNK_BYTES (4u << 20)
#define IMP_LABEL_CHUNK (IMP_CHUNK_BYTES / 8)

/* An input: a .npy file, a member of an .npz archive, or (ogbcsv.h) a
 * text file. */
struct imp_src {
    const char *path;
    const char *member; /* NULL: path is a plain file */
};

enum { IMP_TRAIN, IMP_VAL, IMP_TEST, IMP_SPLITS };

struct imp_job;

/* ---- inputs ----
 * imp_run reads features, labels and edges through this table, each in
 * node (or file) order, in batches. A source checks its own values (labels
 * whole numbers >= -1, features finite, ids < nodes, as many rows as it
 * announced) and names its file with the element or FILE:LINE in messages;
 * imp_run checks what depends on the output (float16 range, at least one
 * label). Every call blocks on I/O and returns 0 or -errno as imp_run does.
 * The source owns its buffers; close frees everything. */
struct imp_input;

struct imp_input_ops {
    /* Next labels into out (class >= 0, or -1 = unlabelled), at most cap;
     * *n = 0 after the last, once the source has checked it ended cleanly
     * (exactly `nodes` labels, no trailing data). */
    int (*labels)(struct imp_input *in, int32_t *out /* (cap) */, size_t cap, size_t *n, char *err, size_t errlen);
    /* Next edges (ids < nodes), at most cap; *n = 0 at the end, as above. */
    int (*edges)(struct imp_input *in, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err, size_t errlen);
    /* Next feature rows into x, at most cap rows of dim finite floats;
     * *n = 0 at the end, as above. */
    int (*features)(struct imp_input *in, float *x /* (cap, dim) */, size_t cap, size_t *n, char *err, size_t errlen);
    /* Frees the source and everything it holds; accepts NULL. */
    void (*close)(struct imp_input *in);
};

struct imp_input {
    const struct imp_input_ops *ops;
    uint64_t nodes;            /* N >= 1 */
    uint64_t dim;              /* F, 1..IMP_MAX_DIM */
    int64_t edges;             /* E when known up front (progress), else -1 */
    bool feat_f16;             /* stored as float16 at the source: --dtype defaults to f16 */
    const char *feat_type;     /* for the summary line: "float32", "text", ... */
    const char *edge_fmt;      /* for the summary line: "npy", "snap", "csv", ... */
    char feat_name[1024];      /* names for messages: a path, or "NPZ: MEMBER" */
    char labels_name[1024];
    char edges_name[1024];
};

#define IMP_MAX_DIM (1u << 20)

/* Opens the inputs a job names as .npy arrays or .npz members (feat,
 * labels, num_nodes) and an edge list (edges, edge_fmt), checking every
 * header: the default when j->open is NULL. 0 or -errno with a message. */
int imp_input_open_npy(struct imp_input **in, const struct imp_job *j, char *err, size_t errlen);

struct imp_job {
    const char *cmd;              /* "import", "import-ogb": message prefix */
    const char *out;              /* dataset directory to create */
    struct imp_src feat;          /* N x F numeric: N = its row count (npy) */
    struct imp_src labels;        /* N or N x 1, int or float (NaN -> -1) */
    struct imp_src edges;         /* an npz member, or a file of edge_fmt */
    enum edge_fmt edge_fmt;
    struct imp_src num_nodes; /* optional npz member cross-checking N (OGB); the
                          file giving N in OGB's CSV layout */
    struct imp_src num_edges; /* OGB CSV layout: the file giving E (ogbcsv.h) */
    /* How to open the inputs above; NULL: imp_input_open_npy. */
    int (*open)(struct imp_input **in, const struct imp_job *j, char *err, size_t errlen);
    const char *split[IMP_SPLITS]; /* text (one id per line, gzip ok) or .npy */
    uint64_t nodes;               /* 0, or the node count the user expects */
    uint64_t mem_limit;
    bool undirected, dedupe, drop_self_loops;
    enum dtype dtype;             /* DTYPE_NONE: f16 if the source is, else f32 */
    bool quiet;                   /* no progress lines on stdout */
    char source[512];             /* the command line, for dataset.toml */
};

/* Sets the defaults (mem_limit, dtype auto) and the command name. */
void imp_job_init(struct imp_job *j, const char *cmd);

/* Parses one option both importers take (--mem-limit, --dtype,
 * --undirected, --dedupe, --drop-self-loops, --quiet) at argv[*i], in the
 * forms "--opt VALUE" and "--opt=VALUE". Returns 1 and advances *i past it
 * when it was one, 0 when argv[*i] is something else, -EINVAL with a
 * message when its value is bad or missing. */
int imp_common_opt(struct imp_job *j, int argc, char **argv, int *i, char *err, size_t errlen);

/* Matches "--name VALUE" / "--name=VALUE" at argv[*i]: 1 with *val set and
 * *i advanced, 0 if argv[*i] is another option, -EINVAL if the value is
 * missing. */
int imp_opt_value(int argc, char **argv, int *i, const char *name, const char **val, char *err, size_t errlen);

/* The help text lines for the common options. */
extern const char imp_common_help[];

/* Records "gnnprep ARGS..." (shell-quoted where needed) in j->source. */
void imp_set_source(struct imp_job *j, int argc, char **argv);

/* Builds the dataset. 0 or -errno with a message naming the input at fault
 * (bad input: -EINVAL, -ERANGE, -ENOENT, -EEXIST, -EBADMSG; anything else is
 * a failure of the machine). Nothing is left at OUT or beside it on error. */
int imp_run(const struct imp_job *j, char *err, size_t errlen);

#endif
