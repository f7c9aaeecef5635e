/* releaser_main.c - gnn-releaser, the last stage of a rank's pipeline
 * (DESIGN.md sections 2 and 4). It pops each trained batch from the
 * release queue, drops the feature-buffer reference the extractor took
 * for every node of the batch (featbuf_release_many over the batch's
 * alias[]; a slot whose count reaches zero goes to the standby tail and
 * keeps its row) and gives the arena slot back (arena_release), so the
 * sampler can reuse it.
 *
 * At the end of the stream every batch of the run has been released, so
 * every slot of the feature buffer must be unreferenced: the releaser
 * checks that (and, in debug builds, every invariant of the buffer with
 * featbuf_check) and fails the run if a reference leaked.
 *
 * A batch served by a resident buffer (BATCH_UNREFERENCED: every row in
 * for good, stages/featbuf.h) holds no references: only its arena slot
 * goes back.
 *
 * Not a stage-only benchmark: releasing is a lock and a list operation per
 * node; its cost shows up as the releaser's busy time in the run's metrics. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stages/stage.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: gnn-releaser --run=ID --rank=R --ranks=N --run-dir=DIR --config=FILE --metrics-block=I\n"
               "\n"
               "The releasing stage of a run: returns trained batches' feature-buffer references\n"
               "and arena slots. gnnlaunch starts it; it has no stage-only mode.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static struct stage st;
    stage_open(&st, argc, argv, STAGE_NEED_FEATBUF);
    struct run_desc d;
    uint64_t batches = 0, refs = 0, unref_batches = 0;
    stage_ready(&st);
    while (stage_pop(&st, &d) == 0) {
        uint64_t t0 = sl_now_ns();
        metrics_busy_begin(st.block, t0);
        struct batch_view v;
        stage_view(&st, &d, BATCH_VIEW_HEADER_ONLY, &v);
        if (!(*v.flags & BATCH_ALIASED))
            stage_fail(&st, "batch %" PRIu64 " reached the releaser without feature-buffer slots", d.batch);
        uint32_t n = batch_nodes(&v);
        bool unref = *v.flags & BATCH_UNREFERENCED; /* a resident buffer: the extractor took none */
        int rc = unref ? 0 : featbuf_release_many(&st.fb, v.alias, n);
        if (rc == -EPIPE) { /* the run is being torn down */
            metrics_busy_end(st.block, t0, sl_now_ns() - t0);
            break;
        }
        if (rc)
            stage_fail(&st, "batch %" PRIu64 ": releasing its %" PRIu32 " feature-buffer references: %s", d.batch, n,
                       strerror(-rc));
        rc = arena_release(&st.arena, d.slot);
        if (rc == -EPIPE) {
            metrics_busy_end(st.block, t0, sl_now_ns() - t0);
            break;
        }
        if (rc)
            stage_fail(&st, "batch %" PRIu64 ": returning arena slot %" PRIu32 ": %s", d.batch, d.slot,
                       strerror(-rc));
        stage_trace(&st, d.batch, v.h.split, t0, sl_now_ns());
        batches++;
        refs += unref ? 0 : n;
        unref_batches += unref;
        metrics_add(&st.block->items, 1);
        metrics_busy_end(st.block, t0, sl_now_ns() - t0);
    }
    struct featbuf_stats fs;
    if (featbuf_stats(&st.fb, &fs) == 0) { /* -EPIPE: torn down, nothing to check */
        /* slots off standby: referenced, or holding a pinned row (at most
         * one per pinned node: pipeline.cache_policy static) */
        if (st.fb.nslots - fs.standby > fs.pinned)
            stage_fail(&st,
                       "after the last batch %" PRIu32 " of %" PRIu32
                       " feature-buffer slots are still referenced: a stage leaked references",
                       st.fb.nslots - fs.standby - fs.pinned, st.fb.nslots);
#ifndef NDEBUG
        char msg[1024];
        if (featbuf_check(&st.fb, msg, sizeof msg) != 0)
            stage_fail(&st, "feature buffer inconsistent at the end of the run: %s", msg);
#endif
        stage_note(&st,
                   "released %" PRIu64 " batches (%" PRIu64 " references; %" PRIu64
                   " from the resident buffer held none); buffer: %" PRIu64 " hits, %" PRIu64 " loads, %" PRIu64
                   " evictions",
                   batches, refs, unref_batches, fs.hits, fs.loads, fs.evictions);
    }
    stage_close(&st);
    return 0;
}
