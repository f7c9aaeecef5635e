/* t_link.h - the planted knowledge graph that test_link and test_linkooc
 * train on: a scratch directory, `gnnprep synth --task link` of 1000
 * nodes and 4 relations (seed 5) in it, and its three splits loaded. */
#ifndef SLUICE_TESTS_T_LINK_H
#define SLUICE_TESTS_T_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/linkdata.h"

/* Makes dir (t_scratch's `name`) and kg = dir/kg, reads its metadata into
 * *m and each split's triples into split[s] (malloc'd). 0, or -1 with the
 * reason on stderr (for a cmocka group setup). */
int t_link_kg_make(const char *name, char *dir, size_t dirlen, char *kg, size_t kglen, struct link_meta *m,
                   uint64_t *split[LINK_SPLITS]);

/* Frees the splits and removes dir. */
void t_link_kg_free(const char *dir, uint64_t *split[LINK_SPLITS]);

#endif
