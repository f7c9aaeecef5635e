/* t_ogb.h - OGB fixtures for the import-ogb tests (test_ogb, test_ogb_csv):
 * a random graph in memory, written in OGB's binary raw layout (data.npz,
 * node-label.npz) or its CSV raw layout (edge.csv.gz, node-feat.csv.gz,
 * ...), both with split/NAME/{train,valid,test}.csv.gz; and the check of an
 * imported dataset against the graph, value by value. Include after
 * t_util.h and t_imp.h. */
#ifndef SLUICE_T_OGB_H
#define SLUICE_T_OGB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

struct t_fix {
    uint64_t n, e, f;
    uint64_t *src, *dst;
    float *feat;       /* (n, f), values exact in float16 */
    double *label;     /* (n), NaN = unlabelled */
    uint64_t *split[3];
    size_t ns[3];      /* ids in file order (shuffled) */
};

/* The files of the CSV layout, for struct t_wopt.edit_file. */
enum { T_CSV_EDGE, T_CSV_FEAT, T_CSV_LABEL, T_CSV_NUM_NODES, T_CSV_NUM_EDGES, T_CSV_FILES };

struct t_wopt {
    /* binary layout */
    int zip;              /* T_ZIP_* for data.npz (node-label.npz is deflated) */
    const char *feat_t;   /* "<f4" (default), "<f2", "<f8", "|O" */
    const char *label_t;  /* "<f8" (default), "<f4" */
    bool label_1d;
    const char *edge_t;   /* "<i8" (default), "<i4", "<f4" */
    int edge_rows;        /* 2 (default) */
    size_t feat_cut;      /* bytes cut off the end of node_feat.npy */
    bool no_feat, no_numnodes;
    /* both */
    int64_t numnodes_delta; /* the node count file says N + delta */
    const char *split;    /* split directory name, "time" by default */
    const char *split_text[3]; /* replaces a split file's text */
    /* CSV layout */
    bool crlf;            /* "\r\n" line ends */
    int64_t numedges_delta; /* num-edge-list.csv.gz says E + delta */
    int edit_file;        /* T_CSV_*: the file edit_line applies to */
    uint64_t edit_line;   /* 0: none; else this line (1-based; one past the last appends) becomes edit_text */
    const char *edit_text; /* NULL: the line is deleted */
};

/* Path of the built gnnprep (fails the test when it is missing). */
void t_ogb_gnnprep(char *out, size_t len);

/* A graph of n nodes, e edges (skewed, with self loops and repeats), f
 * features per node (multiples of 1/64, exact in float16 and in short
 * decimal text), labels 0..6 with every fifth node (v % 5 == 3) unlabelled,
 * and train/valid/test splits of labelled nodes. Deterministic for seed. */
void t_fix_gen(struct t_fix *x, uint64_t n, uint64_t e, uint64_t f, uint64_t seed);
void t_fix_free(struct t_fix *x);

/* .npy bytes of n values of numpy type t ("<f8", "<f4", "<f2", "<i8",
 * "<i4", anything else as raw bytes) with the given shape text. */
unsigned char *t_npy_of(const char *t, const char *shape, const double *v, size_t n, size_t *len);

/* Writes x in OGB's binary raw layout under dir (created). */
void t_ogb_write(const char *dir, const struct t_fix *x, const struct t_wopt *o);

/* Writes x in OGB's CSV raw layout under dir (created): gzip text, no
 * header. Features alternate "%.9g" and "%.8e" by column; unlabelled nodes
 * cycle through "nan", "NaN", an empty line, "-1" and "-nan"; labels through "3",
 * "3.0" and "3e+00". Every value reads back exactly. */
void t_ogb_write_csv(const char *dir, const struct t_fix *x, const struct t_wopt *o);

/* Checks the dataset at out against x: dataset.toml and every file's
 * checksum, `gnnprep check`, the CSC against a reference (cflags T_*),
 * every feature (stored as fdt, as read from o->feat_t) with the padding of
 * each row and of the file, every label (NaN -> -1), the sorted splits. */
void t_ogb_verify(const char *out, const struct t_fix *x, const struct t_wopt *o, int cflags, enum dtype fdt);

#endif
