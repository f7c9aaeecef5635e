/* row_check_stage.c - TEST-ONLY consumer standing where gnn-trainer runs,
 * for the pipeline test (test_pipeline.c): real gnn-sampler ->
 * gnn-extractor -> this -> gnn-releaser under gnnlaunch. Linked as
 * build/tests/pipeline/gnn-trainer next to links to the real stages.
 *
 * For every batch it pops from the train queue it checks:
 *   - the batch itself (batch_view with the block check), and that it is
 *     exactly the batch the sampler must have made: rebuilt here from the
 *     batch's targets and seed in the rank's schedule (schedule_batch),
 *     compared array by array;
 *   - every feature row: featbuf_row(alias[i]) equals the row of nodes[i]
 *     read from features.bin with pread (row_bytes bytes);
 *   - each pass (every epoch's training pass, the validation passes, the
 *     test pass at the end) delivers every target of the rank's share of
 *     that split exactly once;
 *   - with pipeline.ordered, batches arrive in the order 0, 1, 2, ...
 * then pushes the descriptor on to the releaser.
 *
 * Environment:
 *   SLUICE_TEST_REPORT       directory: writes trainer.<rank> with
 *                            "batches=B rows=R bad_rows=X bad_batches=Y
 *                             dups=D epochs_complete=E order_errors=O
 *                             eval_passes_bad=P"
 *   SLUICE_TEST_DELAY_US     sleep per batch (lets the queues fill)
 *   SLUICE_TEST_TRUNCATE_AT  after this many batches, truncate
 *                            features.bin to 4096 bytes (a file changed
 *                            under the run; the extractor must fail)
 * Exit 0 at the end of the stream (findings go to the report), 3 if a
 * queue call fails. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stages/sampler.h"
#include "stages/schedule.h"
#include "stages/stage.h"

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

int main(int argc, char **argv)
{
    static struct stage st;
    char msg[1024], path[sizeof st.cfg.dataset.path + 128];
    stage_open(&st, argc, argv, STAGE_NEED_FEATBUF);
    const char *dir = st.cfg.dataset.path;
    const struct dataset_file *ff = &st.meta.f[DATASET_FEATURES];
    size_t row_bytes = ff->cols * dtype_size(ff->dtype);
    snprintf(path, sizeof path, "%s/%s", dir, ff->file);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        stage_fail(&st, "%s: %s", path, strerror(errno));
    struct sampler_topo topo;
    struct sampler smp;
    struct schedule sched;
    struct schedule_cursor cur;
    struct batch_shape shape = st.plan.shape;
    uint32_t rank = (uint32_t)st.args.rank, epochs = (uint32_t)st.cfg.train.epochs;
    if (sampler_topo_open(&topo, dir, &st.meta, msg, sizeof msg) || sampler_init(&smp, &topo, &shape, msg, sizeof msg))
        stage_fail(&st, "%s", msg);
    stage_schedule(&st, &sched);
    if (schedule_load(&sched, dir, &st.meta, msg, sizeof msg))
        stage_fail(&st, "%s", msg);
    schedule_cursor_init(&cur, &sched, 0);
    uint32_t *seen = calloc(st.meta.nodes, sizeof *seen); /* epoch + 1 of the last delivery (splits are disjoint) */
    uint64_t *count = calloc((size_t)epochs * BATCH_SPLITS, sizeof *count); /* targets per (epoch, split) */
    unsigned char *want = malloc(row_bytes + 1);
    void *rebuilt = aligned_alloc(64, sl_round_up(st.arena.slot_size, 64));
    if (!seen || !count || !want || !rebuilt)
        stage_fail(&st, "out of memory");
    uint64_t batches = 0, rows = 0, bad_rows = 0, bad_batches = 0, dups = 0, order_errors = 0;
    uint64_t delay = env_u64("SLUICE_TEST_DELAY_US", 0), trunc_at = env_u64("SLUICE_TEST_TRUNCATE_AT", UINT64_MAX);
    struct run_desc d;
    while (stage_pop(&st, &d) == 0) {
        struct batch_view v;
        stage_view(&st, &d, 0, &v);
        bool bad = !(*v.flags & BATCH_ALIASED);
        if (st.cfg.pipeline.ordered && d.batch != batches)
            order_errors++;
        /* the batch the sampler must have made */
        struct schedule_batch sb;
        if (d.batch >= schedule_len(&sched))
            stage_fail(&st, "batch %" PRIu64 " is past the end of the stream", d.batch);
        if (schedule_batch(&cur, d.batch, &sb, msg, sizeof msg))
            stage_fail(&st, "%s", msg);
        const struct schedule_pos p = sb.pos;
        uint64_t edges;
        struct batch_id id = {.batch = d.batch, .epoch = p.epoch, .rank = rank, .split = p.split};
        struct batch_view w;
        if (d.epoch != p.epoch || v.h.split != p.split ||
            sampler_sample(&smp, rebuilt, st.arena.slot_size, sb.targets, p.targets, &id, sb.seed, &edges, msg,
                           sizeof msg) ||
            batch_view(rebuilt, st.arena.slot_size, 0, &w, msg, sizeof msg))
            bad = true;
        else {
            uint32_t L = batch_layers(&v);
            bad |= L != batch_layers(&w) || memcmp(v.h.n, w.h.n, sizeof v.h.n) || memcmp(v.h.e, w.h.e, sizeof v.h.e);
            bad |= memcmp(v.nodes, w.nodes, (size_t)batch_nodes(&w) * 8) ||
                   memcmp(v.labels, w.labels, (size_t)batch_targets(&w) * 4);
            for (uint32_t b = 0; !bad && b < L; b++)
                bad |= memcmp(v.indptr[b], w.indptr[b], ((size_t)v.h.n[b] + 1) * 4) ||
                       memcmp(v.src[b], w.src[b], (size_t)v.h.e[b] * 4);
        }
        bad_batches += bad;
        /* targets: once per pass */
        for (uint32_t i = 0; i < batch_targets(&v); i++) {
            uint64_t node = v.nodes[i];
            if (seen[node] == p.epoch + 1)
                dups++;
            seen[node] = p.epoch + 1;
        }
        count[(size_t)p.epoch * BATCH_SPLITS + p.split] += batch_targets(&v);
        /* every row against the file */
        for (uint32_t i = 0; i < batch_nodes(&v); i++) {
            const void *got = featbuf_row(&st.fb, v.alias[i]);
            ssize_t r = pread(fd, want, row_bytes, (off_t)(v.nodes[i] * ff->row_stride));
            if (!got || r != (ssize_t)row_bytes || memcmp(got, want, row_bytes))
                bad_rows++;
            rows++;
        }
        batches++;
        metrics_add(&st.block->items, 1);
        if (batches == trunc_at && ftruncate(fd, 4096) != 0)
            stage_fail(&st, "truncating %s: %s", path, strerror(errno));
        if (delay) {
            struct timespec ts = {.tv_sec = (time_t)(delay / 1000000), .tv_nsec = (long)(delay % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        if (stage_push(&st, &d) != 0)
            break;
    }
    stage_end_output(&st);
    /* every pass the stream has, complete */
    uint64_t complete = 0, passes_bad = 0;
    for (uint32_t e = 0; e < epochs; e++) {
        complete += count[(size_t)e * BATCH_SPLITS + BATCH_TRAIN] == schedule_pass_targets(&sched, e, BATCH_TRAIN);
        uint64_t want_val = schedule_pass_targets(&sched, e, BATCH_VAL);
        uint64_t want_test = schedule_pass_targets(&sched, e, BATCH_TEST);
        passes_bad += count[(size_t)e * BATCH_SPLITS + BATCH_VAL] != want_val;
        passes_bad += count[(size_t)e * BATCH_SPLITS + BATCH_TEST] != want_test;
    }
    const char *rep = getenv("SLUICE_TEST_REPORT");
    if (rep && *rep) {
        snprintf(path, sizeof path, "%s/trainer.%d", rep, st.args.rank);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f,
                    "batches=%" PRIu64 " rows=%" PRIu64 " bad_rows=%" PRIu64 " bad_batches=%" PRIu64 " dups=%" PRIu64
                    " epochs_complete=%" PRIu64 " order_errors=%" PRIu64 " eval_passes_bad=%" PRIu64 "\n",
                    batches, rows, bad_rows, bad_batches, dups, complete, order_errors, passes_bad);
            fclose(f);
        }
    }
    free(rebuilt);
    free(want);
    free(count);
    free(seen);
    schedule_cursor_free(&cur);
    schedule_free(&sched);
    sampler_free(&smp);
    sampler_topo_free(&topo);
    close(fd);
    stage_close(&st);
    return 0;
}
