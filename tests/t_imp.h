/* t_imp.h - helpers for the importer tests (test_npy, test_ogb,
 * test_import): writing .npy bytes, zip archives (libarchive's writer,
 * stored or deflated, optionally zip64) and gzip text; a reference CSC
 * built in memory; checks on an imported dataset. Include after t_util.h. */
#ifndef SLUICE_T_IMP_H
#define SLUICE_T_IMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

/* Builds .npy bytes (version 1, 2 or 3) with header dict
 * "{'descr': DESCR, 'fortran_order': False, 'shape': SHAPE, }" followed
 * by data. Returns a malloc'd buffer and its length. */
unsigned char *t_npy_make(int version, const char *descr, const char *shape, const void *data, size_t bytes,
                          size_t *len);
/* The same, written to path. */
void t_npy_write(const char *path, const char *descr, const char *shape, const void *data, size_t bytes);

/* Writes raw bytes / text to path (text may be gzip-compressed). */
void t_write(const char *path, const void *data, size_t n);
void t_gz_write(const char *path, const char *text);
/* Reads a whole file (malloc'd, NUL-terminated); asserts it exists. */
unsigned char *t_slurp(const char *path, size_t *len);

struct t_member {
    const char *name;
    const void *data;
    size_t size;
};
enum { T_ZIP_DEFLATE = 1, T_ZIP_ZIP64 = 2 };
/* Writes a zip archive of the members with libarchive (flags T_ZIP_*). */
void t_zip_write(const char *path, const struct t_member *m, size_t n, int flags);

/* Reference CSC of an edge list, as csc.h defines it: (s, d) makes s an
 * in-neighbour of d; undirected adds (d, s); self loops dropped; dedupe
 * keeps one copy; neighbours ascending. indptr (n+1) and indices (*ne) are
 * malloc'd. */
enum { T_UNDIRECTED = 1, T_DEDUPE = 2, T_NO_LOOPS = 4 };
void t_ref_csc(uint64_t n, const uint64_t *src, const uint64_t *dst, size_t e, int flags, uint64_t **indptr,
               uint64_t **indices, size_t *ne);

/* Opens OUT with dataset_meta_read (files checked), verifies every file's XXH3
 * against dataset.toml, and compares indptr/indices with the reference. */
void t_check_topology(const char *out, const struct dataset_meta *m, const uint64_t *indptr, const uint64_t *indices,
                      size_t ne);
void t_load_meta(const char *out, struct dataset_meta *m);
/* Compares a split file with the expected sorted ids. */
void t_check_split(const char *out, const struct dataset_meta *m, int slot, const uint64_t *ids, size_t n);
/* Asserts that neither OUT nor any `.BASE.partial-*` beside it exists. */
void t_assert_no_output(const char *out);

#endif
