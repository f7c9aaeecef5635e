/* t_link.h - the planted knowledge graph the link tests train on:
 * `gnnprep synth --task link` of 1000 nodes and 4 relations (seed 5) -
 * for the launcher's tests just made (t_link_synth), for test_link,
 * test_linkenc and test_linkooc in a scratch directory with its three
 * splits loaded (t_link_kg_make). */
#ifndef SLUICE_TESTS_T_LINK_H
#define SLUICE_TESTS_T_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/linkdata.h"

/* `gnnprep synth --task link` of that graph into kg, with extra flags
 * (e.g. "--valid-frac 0"; "" for none). 0, or -1 with gnnprep's output
 * on stderr. */
int t_link_synth(const char *kg, const char *extra);

/* Makes dir (t_scratch's `name`) and kg = dir/kg, reads its metadata into
 * *m and each split's triples into split[s] (malloc'd). 0, or -1 with the
 * reason on stderr (for a cmocka group setup). */
int t_link_kg_make(const char *name, char *dir, size_t dirlen, char *kg, size_t kglen, struct link_meta *m,
                   uint64_t *split[LINK_SPLITS]);

/* Frees the splits and removes dir. */
void t_link_kg_free(const char *dir, uint64_t *split[LINK_SPLITS]);

#endif
