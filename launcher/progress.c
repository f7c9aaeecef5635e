/* progress.c - the training lines gnnlaunch prints on stdout (DESIGN.md
 * section 7): one summary line per epoch, once every rank's trainer has
 * published the epoch in the results page (ipc/results.h), and the final
 * line of a successful run,
 *
 *     test_acc=<f> val_acc=<f> epochs=<n> seconds=<f>
 *
 * which is the last line on stdout (stages write only to stderr). Per-stage
 * busy and wait seconds in an epoch line are the metrics page's counters,
 * summed over ranks, since the previous line. Called from the supervision
 * loop once a second and once at the end. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "core/util.h"
#include "launcher/launch.h"

static void stage_times(const struct launch *l, double busy[LAYOUT_STAGES], double wait[LAYOUT_STAGES])
{
    for (int s = 0; s < LAYOUT_STAGES; s++)
        busy[s] = wait[s] = 0;
    for (int r = 0; r < l->ranks; r++)
        for (int s = 0; s < LAYOUT_STAGES; s++) {
            const struct metrics_block *b = metrics_block(&l->layout.metrics, layout_block(r, (enum layout_stage)s));
            if (!b)
                continue;
            busy[s] += (double)atomic_load_explicit(&b->busy_ns, memory_order_relaxed) / 1e9;
            wait[s] += (double)atomic_load_explicit(&b->wait_ns, memory_order_relaxed) / 1e9;
        }
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : NAN;
}

void progress_poll(struct launch *l)
{
    struct results *res = &l->layout.results;
    if (!res->hdr)
        return;
    struct results_rec sum;
    while (l->next_epoch < (uint64_t)l->cfg.train.epochs && results_epoch(res, l->next_epoch, &sum)) {
        uint64_t e = l->next_epoch;
        double busy[LAYOUT_STAGES], wait[LAYOUT_STAGES];
        stage_times(l, busy, wait);
        char val[32] = "";
        if (sum.val_labelled) {
            l->val_acc = ratio(sum.val_correct, sum.val_labelled);
            snprintf(val, sizeof val, " val_acc=%.4f", l->val_acc);
        }
        printf("epoch %" PRIu64 "/%" PRId64 " loss=%.4f train_acc=%.4f%s seconds=%.2f | busy s: sampler %.1f "
               "extractor %.1f trainer %.1f releaser %.1f | wait s: sampler %.1f extractor %.1f trainer %.1f "
               "(all-reduce %.1f)\n",
               e + 1, l->cfg.train.epochs, sum.train_labelled ? sum.loss_sum / (double)sum.train_labelled : NAN,
               ratio(sum.train_correct, sum.train_labelled), val, sum.seconds, busy[0] - l->busy0[0],
               busy[1] - l->busy0[1], busy[2] - l->busy0[2], busy[3] - l->busy0[3], wait[0] - l->wait0[0],
               wait[1] - l->wait0[1], wait[2] - l->wait0[2], sum.reduce_s);
        fflush(stdout);
        for (int s = 0; s < LAYOUT_STAGES; s++) {
            l->busy0[s] = busy[s];
            l->wait0[s] = wait[s];
        }
        if (sum.test_labelled) {
            l->test_acc = ratio(sum.test_correct, sum.test_labelled);
            l->have_test = true;
        }
        l->epochs_done = e + 1;
        results_consume(res, e);
        l->next_epoch++;
    }
}

void progress_final(struct launch *l)
{
    progress_poll(l);
    if (l->outcome != LAUNCH_OK || !l->layout.results.hdr)
        return;
    if (l->epochs_done != (uint64_t)l->cfg.train.epochs) {
        fprintf(stderr, "gnnlaunch: warning: the trainers published %" PRIu64 " of %" PRId64 " epochs\n",
                l->epochs_done - l->start_epoch, l->cfg.train.epochs - l->start_epoch);
        return;
    }
    printf("test_acc=%.4f val_acc=%.4f epochs=%" PRIu64 " seconds=%.1f\n", l->have_test ? l->test_acc : NAN,
           l->val_acc, l->epochs_done, sl_now() - l->t_start);
    fflush(stdout);
}
