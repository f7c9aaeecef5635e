/* extract_memory.c - the extraction engine's back end for rows the caller
 * already holds in memory (extractor_run_rows; protocol at the top of
 * extract.c): a load hands rows[i] straight to the row sink, as the mmap
 * back end hands a row of the mapping. No staging and no file: a packed
 * run (stages/pack.h) has read the batch's rows from its chunk with a few
 * large reads before. Each row in the sink still holds an entry, so at
 * most `depth` rows are in the sink at once. */
#include <errno.h>
#include <inttypes.h>

#include "stages/extract_int.h"

static void memory_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    while (xs->next < xs->nloads && !xs->rc) {
        if (!xs->nspare) {
            extract_reap(x, true);
            continue;
        }
        uint32_t e = extract_read_next(x);
        const void *row = xs->rows[xs->rd[e].idx];
        if (!row) {
            uint64_t node = xs->nodes[xs->rd[e].idx];
            extract_batch_error(x, -ENODATA,
                                "node %" PRIu64 " has no row in the batch's chunk and is not in the feature buffer "
                                "(a hot row that was not pinned)",
                                node);
            extract_read_failed(x, e, -ENODATA, false); /* the load fails; the first error is kept */
            break;
        }
        extract_row_landed(x, e, row);
        extract_reap(x, false);
    }
}

const struct xbackend extract_be_memory = {memory_loads};
