/* t_link.c - the planted knowledge graph of the link tests (t_link.h). */
#include "t_link.h"

#include <stdio.h>
#include <stdlib.h>

#include "t_util.h"

int t_link_synth(const char *kg, const char *extra)
{
    char prep[4096], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --task link --nodes 1000 --relations 4 --avg-degree 10 --seed 5 %s", prep,
              kg, extra) != 0) {
        fprintf(stderr, "gnnprep synth --task link %s failed: %s\n", extra, out);
        return -1;
    }
    return 0;
}

int t_link_kg_make(const char *name, char *dir, size_t dirlen, char *kg, size_t kglen, struct link_meta *m,
                   uint64_t *split[LINK_SPLITS])
{
    t_scratch(dir, dirlen, name);
    char err[1024];
    snprintf(kg, kglen, "%s/kg", dir);
    if (t_link_synth(kg, "") != 0)
        return -1;
    if (link_meta_read(kg, m, true, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    for (int s = 0; s < LINK_SPLITS; s++)
        if (link_load_split(kg, m, s, &split[s], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    return 0;
}

void t_link_kg_free(const char *dir, uint64_t *split[LINK_SPLITS])
{
    for (int s = 0; s < LINK_SPLITS; s++) {
        free(split[s]);
        split[s] = NULL;
    }
    t_rmrf(dir);
}
