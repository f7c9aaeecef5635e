/* progress.c - what gnnlaunch tells the user while a run trains
 * (DESIGN.md section 7; docs/metrics.md):
 *
 *   - on stdout, one summary line per epoch, once every rank's trainer has
 *     published the epoch in the results page (ipc/results.h), and the
 *     final line of a successful run,
 *         test_acc=<f> val_acc=<f> epochs=<n> seconds=<f>
 *     which is the last line on stdout (stages write only to stderr);
 *   - while an epoch runs, a progress line: live (rewritten in place) when
 *     stdout is a terminal, else a plain line every PLAIN_EVERY_S seconds;
 *   - with --metrics FILE, one JSON object per process per second and one
 *     per epoch, and a final one (schema in docs/metrics.md).
 *
 * Per-stage busy and wait seconds in an epoch line are the metrics page's
 * counters, summed over ranks and threads, since the previous line. On a
 * multi-node run the training numbers (loss, accuracies, epoch seconds,
 * all-reduce) are every node's (the run's epoch callback, progress.h),
 * the same on every node;
 * what follows the first '|' (stage seconds, reads, hit rate) is this
 * node's, and the progress line counts this node's batches. Called
 * from the supervision loop once a second and once at the end; only the
 * launcher's main thread runs it. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "launcher/ckptdir.h"
#include "launcher/jsonl.h"
#include "launcher/progress.h"
#include "stages/schedule.h"
#include "stages/schedule_partitions.h"

#define PLAIN_EVERY_S 10.0
#define PROGRESS_TAU_S 20.0 /* the time constant of the rates on the progress line */

/* Sums of one counter over the ranks, per stage. */
struct stage_sums {
    double busy[RUN_STAGES], wait[RUN_STAGES];
    uint64_t items[RUN_STAGES], bytes[RUN_STAGES], io_ops[RUN_STAGES];
};

static void sums(const struct progress *p, struct stage_sums *s)
{
    memset(s, 0, sizeof *s);
    for (int r = 0; r < p->run.ranks; r++)
        for (int k = 0; k < RUN_STAGES; k++) {
            const struct metrics_block *b =
                metrics_block(&p->run.layout->metrics, run_block(r, (enum run_stage)k));
            if (!b)
                continue;
            s->busy[k] += (double)metrics_busy_now(b, sl_now_ns()) / 1e9; /* periods under way included */
            s->wait[k] += (double)atomic_load_explicit(&b->wait_ns, memory_order_relaxed) / 1e9;
            s->items[k] += atomic_load_explicit(&b->items, memory_order_relaxed);
            s->bytes[k] += atomic_load_explicit(&b->bytes, memory_order_relaxed);
            s->io_ops[k] += atomic_load_explicit(&b->io_ops, memory_order_relaxed);
        }
}

/* Feature-buffer rows found (hits, and rows another extractor was
 * loading) and read, per rank. The lock of a busy buffer is taken between
 * two of the extractors' calls, trying for up to STATS_TRIES x 100 us (a
 * single try found it held most of the time on a busy buffer, and the
 * epoch line said "n/a"); a rank whose lock stays held (or whose buffer
 * is broken) is skipped: its counts show up in a later line. */
#define STATS_TRIES 100
static void buffer_counts(struct progress *p, uint64_t *found, uint64_t *loaded)
{
    for (int r = 0; r < p->run.ranks; r++) {
        struct featbuf *fb = layout_featbuf(p->run.layout, r);
        struct featbuf_stats st;
        int rc = -EBUSY;
        for (int k = 0; fb && rc == -EBUSY && k < STATS_TRIES; k++)
            if ((rc = featbuf_stats_try(fb, &st)) == -EBUSY)
                usleep(100);
        if (rc != 0) {
            found[r] = loaded[r] = UINT64_MAX;
            continue;
        }
        found[r] = st.hits + st.waits;
        loaded[r] = st.loads;
    }
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : NAN;
}

/* The epoch results: the run's callback, or this node's results page. */
static bool epoch_ready(const struct progress *p, uint64_t e, struct results_rec *sum)
{
    if (p->run.epoch)
        return p->run.epoch(p->run.epoch_ctx, p->next_epoch, e, sum);
    return results_epoch(&p->run.layout->results, e, sum);
}

void progress_start(struct progress *p, const struct progress_run *run)
{
    memset(p, 0, sizeof *p);
    p->run = *run;
    p->next_epoch = p->epochs_done = run->start_epoch;
    p->tty = isatty(STDERR_FILENO) == 1;
    /* SLUICE_PROGRESS_EVERY=S: the plain line's period (logs, tests) */
    const char *every = getenv("SLUICE_PROGRESS_EVERY");
    p->plain_every = PLAIN_EVERY_S;
    if (every && *every && (sl_parse_double(every, &p->plain_every) != 0 || !(p->plain_every >= 0)))
        p->plain_every = PLAIN_EVERY_S;
    p->val_acc = NAN;
    p->best = NAN;
    p->t_plain = sl_now();
    /* batches the trainers will handle in this run, over all ranks */
    struct dataset_meta m;
    char msg[512];
    if (dataset_meta_read(p->run.cfg->dataset.path, &m, false, msg, sizeof msg) == 0) {
        const struct config *cfg = p->run.cfg;
        struct schedule_params sp = {.batch_size = (uint64_t)cfg->train.batch_size,
                                     .epochs = (uint32_t)cfg->train.epochs,
                                     .eval_every = (uint32_t)cfg->train.eval_every,
                                     .test_with_val = cfg->train.early_stop_patience > 0,
                                     .seed = (uint64_t)cfg->train.seed};
        schedule_split_sizes(&m, sp.split_n);
        if (p->run.predict != RUN_PREDICT_NONE) { /* as stage_schedule lays a prediction out */
            schedule_predict_sizes(&m, p->run.predict, sp.split_n);
            sp.epochs = 1;
            sp.test_with_val = false;
        }
        p->epoch_first = calloc((size_t)sp.epochs + 1, sizeof *p->epoch_first);
        for (int r = 0; r < p->run.ranks; r++) {
            struct schedule s;
            uint32_t node = p->run.node, nodes = p->run.nodes; /* global ranks */
            sp.rank = node * (uint32_t)p->run.ranks + (uint32_t)r;
            sp.ranks = nodes * (uint32_t)p->run.ranks;
            char arg[8300];
            const struct schedule_ops *ops = schedule_find(SCHEDULE_DEFAULT);
            if (p->run.predict == RUN_PREDICT_NONE) { /* as stage_schedule chooses it */
                ops = schedule_for_config(cfg, arg, sizeof arg);
                sp.arg = arg[0] ? arg : NULL;
            }
            if (schedule_open(&s, ops, &sp, msg, sizeof msg) != 0)
                continue;
            uint64_t base = schedule_epoch_start(&s, p->run.start_epoch);
            p->batches_total += schedule_len(&s) - base;
            for (uint32_t e = p->run.start_epoch; p->epoch_first && e <= sp.epochs; e++)
                p->epoch_first[e] += schedule_epoch_start(&s, e) - base;
            schedule_free(&s);
        }
    }
    p->tb.fd = -1;
    if (p->run.tboard_dir && p->run.tboard_dir[0] && tboard_open(&p->tb, p->run.tboard_dir, msg, sizeof msg) != 0) {
        fprintf(stderr, "gnnlaunch: warning: %s; continuing without it\n", msg);
        p->tboard_failed = true;
    }
    if (p->run.csv_file && p->run.csv_file[0]) {
        p->csv_out = sl_fopen_write(p->run.csv_file, 0644);
        if (!p->csv_out || fprintf(p->csv_out, "epoch,loss,train_acc,val_acc,val_loss,test_acc,lr,seconds,train_s,"
                                              "eval_s,reduce_s,hit_rate,read_bytes,read_ops,busy_sampler,"
                                              "busy_extractor,busy_trainer,busy_releaser,wait_sampler,"
                                              "wait_extractor,wait_trainer,wait_releaser\n") < 0) {
            fprintf(stderr, "gnnlaunch: warning: cannot write --metrics-csv %s: %s; continuing without it\n",
                    p->run.csv_file, strerror(errno));
            if (p->csv_out)
                fclose(p->csv_out);
            p->csv_out = NULL;
            p->csv_failed = true;
        }
    }
    p->fb_found0 = calloc((size_t)p->run.ranks, sizeof *p->fb_found0);
    p->fb_loaded0 = calloc((size_t)p->run.ranks, sizeof *p->fb_loaded0);
    jsonl_open(&p->metrics, p->run.metrics_file);
}

/* One {"type":"process"} object per stage process. */
static void metrics_processes(struct progress *p, double t)
{
    FILE *f = p->metrics.f;
    uint64_t now = sl_now_ns();
    for (int r = 0; r < p->run.ranks; r++)
        for (int k = 0; k < RUN_STAGES; k++) {
            const struct metrics_block *b =
                metrics_block(&p->run.layout->metrics, run_block(r, (enum run_stage)k));
            if (!b)
                continue;
            uint64_t hb = atomic_load_explicit(&b->heartbeat_ns, memory_order_relaxed);
            static const char *const states[] = {"starting", "running", "done", "failed"};
            uint32_t st = atomic_load_explicit(&b->state, memory_order_acquire);
            fprintf(f, "{\"type\":\"process\",\"t\":%.3f,\"stage\":\"%s\",\"rank\":%d,\"pid\":%d,\"state\":\"%s\",", t,
                    run_stage_name((enum run_stage)k), r, atomic_load_explicit(&b->pid, memory_order_relaxed),
                    st < 4 ? states[st] : "unknown");
            fprintf(f,
                    "\"busy_s\":%.6f,\"wait_s\":%.6f,\"items\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"io_ops\":%" PRIu64
                    ",\"errors\":%" PRIu64 ",",
                    (double)metrics_busy_now(b, sl_now_ns()) / 1e9,
                    (double)atomic_load_explicit(&b->wait_ns, memory_order_relaxed) / 1e9,
                    atomic_load_explicit(&b->items, memory_order_relaxed),
                    atomic_load_explicit(&b->bytes, memory_order_relaxed),
                    atomic_load_explicit(&b->io_ops, memory_order_relaxed),
                    atomic_load_explicit(&b->errors, memory_order_relaxed));
            jsonl_num(f, "heartbeat_age_s", hb && now > hb ? (double)(now - hb) / 1e9 : NAN, false);
            fputs("}\n", f);
        }
    jsonl_flush(&p->metrics);
}

/* m:ss, or h:mm:ss from an hour on. */
void progress_clock_text(char *buf, size_t len, double secs)
{
    if (!(secs >= 0) || secs > 1e7) {
        snprintf(buf, len, "?");
        return;
    }
    unsigned long t = (unsigned long)secs;
    if (t >= 3600)
        snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

/* The running mean training loss of the epoch under way, over this node's
 * trainers that have one (NAN: none yet). */
static double running_loss(const struct progress *p)
{
    double sum = 0;
    int n = 0;
    for (int r = 0; r < p->run.ranks; r++) {
        const struct metrics_block *b = metrics_block(&p->run.layout->metrics, run_block(r, RUN_TRAINER));
        uint32_t bits = b ? atomic_load_explicit(&b->loss_bits, memory_order_relaxed) : 0;
        float v;
        memcpy(&v, &bits, sizeof v);
        if (bits && isfinite(v))
            sum += v, n++;
    }
    return n ? sum / n : NAN;
}

/* The progress line, on stderr (stdout keeps only the lines for scripts),
 * tqdm's way: the epoch under way, its share done with a bar, batches
 * done of the epoch's, elapsed<remaining in the epoch, batches/s, the
 * running training loss, the run's ETA, MB/s read and the queues. Live
 * (rewritten in place) on a terminal, else a plain line every
 * plain_every seconds. */
static void progress_line(struct progress *p, const struct stage_sums *s, double now)
{
    uint64_t done = s->items[RUN_TRAINER];
    double dt = now - p->t_last;
    /* Counters move in whole batches (the extractor adds a batch's bytes
     * when it is done), and a batch can take seconds out of core: a rate
     * over one tick reads 0 most of the time. So both rates are
     * exponential averages over about PROGRESS_TAU_S seconds of time, not
     * of ticks. */
    if (p->t_last > 0 && dt > 0) {
        double rate = (double)(done - SL_MIN(done, p->items_last)) / dt;
        double mbps = (double)(s->bytes[RUN_EXTRACTOR] - SL_MIN(s->bytes[RUN_EXTRACTOR], p->bytes_last)) / dt / 1e6;
        double a = 1.0 - exp(-dt / PROGRESS_TAU_S);
        p->rate += a * (rate - p->rate);
        p->mbps += a * (mbps - p->mbps);
        p->ema_w += a * (1.0 - p->ema_w);
    }
    const double rate = p->ema_w > 0 ? p->rate / p->ema_w : 0, mbps = p->ema_w > 0 ? p->mbps / p->ema_w : 0;
    p->t_last = now;
    p->items_last = done;
    p->bytes_last = s->bytes[RUN_EXTRACTOR];
    uint64_t q[RUN_QUEUES] = {0}, cap[RUN_QUEUES] = {0};
    for (int r = 0; r < p->run.ranks; r++)
        for (int k = 0; k < RUN_QUEUES; k++) {
            struct ring *ring = layout_queue(p->run.layout, r, (enum run_queue)k);
            if (ring) {
                q[k] += ring_count(ring);
                cap[k] += ring->capacity;
            }
        }
    /* the epoch under way: the one whose batches `done` is inside */
    uint64_t epochs = (uint64_t)p->run.cfg->train.epochs, e = SL_MIN(p->next_epoch, epochs - 1);
    uint64_t in = done, of = p->batches_total;
    if (p->epoch_first) {
        e = p->run.start_epoch;
        while (e + 1 < epochs && done >= p->epoch_first[e + 1])
            e++;
        in = SL_MIN(done - SL_MIN(done, p->epoch_first[e]), p->epoch_first[e + 1] - p->epoch_first[e]);
        of = p->epoch_first[e + 1] - p->epoch_first[e];
    }
    if (e != p->cur_epoch || p->cur_t0 == 0) {
        p->cur_epoch = e;
        p->cur_t0 = now;
    }
    double frac = of ? (double)in / (double)of : 0;
    char bar[24];
    int fill = (int)(frac * 20);
    for (int i = 0; i < 20; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[20] = '\0';
    char el[32], rem[32], eta[32] = "?", loss[24] = "";
    progress_clock_text(el, sizeof el, now - p->cur_t0);
    progress_clock_text(rem, sizeof rem, rate > 0 ? (double)(of - in) / rate : -1);
    if (rate > 0 && p->batches_total >= done)
        progress_clock_text(eta, sizeof eta, (double)(p->batches_total - done) / rate);
    double l = running_loss(p);
    if (!isnan(l))
        snprintf(loss, sizeof loss, "  loss %.4f", l);
    char line[320];
    snprintf(line, sizeof line,
             "epoch %" PRIu64 "/%" PRIu64 " %3d%% [%s] %" PRIu64 "/%" PRIu64 " batches  %s<%s  %.1f batches/s%s  "
             "run ETA %s  read %.1f MB/s  queues extract %" PRIu64 "/%" PRIu64 " train %" PRIu64 "/%" PRIu64,
             e + 1, epochs, (int)(frac * 100), bar, in, of, el, rem, rate, loss, eta, mbps, q[RUN_Q_EXTRACT],
             cap[RUN_Q_EXTRACT], q[RUN_Q_TRAIN], cap[RUN_Q_TRAIN]);
    if (p->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        p->live = true;
    } else if (now - p->t_plain >= p->plain_every) {
        fprintf(stderr, "%s\n", line);
        p->t_plain = now;
    }
    fflush(stderr);
}

static void clear_live(struct progress *p)
{
    if (p->live) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        p->live = false;
    }
}

/* A number for the CSV file: empty when not finite. */
static void csv_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, ",%.6g", v);
    else
        fputc(',', f);
}

/* Epoch e's numbers into --metrics-csv and --tensorboard (a failed write
 * is warned about once and closes that output, as for --metrics). */
static void epoch_outputs(struct progress *p, uint64_t e, const struct results_rec *sum, double loss, double train_acc,
                          double val_acc, double val_loss, double hit, uint64_t read, uint64_t ios, const double *busy,
                          const double *wait)
{
    double test = sum->test_labelled ? ratio(sum->test_correct, sum->test_labelled) : NAN;
    if (p->csv_out) {
        FILE *f = p->csv_out;
        fprintf(f, "%" PRIu64, e + 1);
        double cols[] = {loss, train_acc, val_acc, val_loss, test, sum->lr, sum->seconds, sum->train_s, sum->eval_s,
                         sum->reduce_s, hit};
        for (size_t i = 0; i < SL_ARRAY_LEN(cols); i++)
            csv_num(f, cols[i]);
        fprintf(f, ",%" PRIu64 ",%" PRIu64, read, ios);
        for (int k = 0; k < RUN_STAGES; k++)
            csv_num(f, busy[k]);
        for (int k = 0; k < RUN_STAGES; k++)
            csv_num(f, wait[k]);
        if (fputc('\n', f) == EOF || fflush(f) != 0) {
            fprintf(stderr, "gnnlaunch: warning: --metrics-csv %s: writing failed: %s; no more rows go there\n",
                    p->run.csv_file, strerror(errno));
            fclose(f);
            p->csv_out = NULL;
            p->csv_failed = true;
        }
    }
    if (p->tb.fd >= 0) {
        struct tboard_batch b = {.n = 0};
        double secs = sum->seconds > 0 ? sum->seconds : NAN;
        tboard_add(&b, "train/loss", loss);
        tboard_add(&b, "train/acc", train_acc);
        tboard_add(&b, "val/acc", val_acc);
        tboard_add(&b, "val/loss", val_loss);
        tboard_add(&b, "test/acc", test);
        tboard_add(&b, "train/lr", (double)sum->lr);
        tboard_add(&b, "time/epoch_s", sum->seconds);
        tboard_add(&b, "time/train_s", sum->train_s);
        tboard_add(&b, "time/eval_s", sum->eval_s);
        tboard_add(&b, "io/hit_rate", hit);
        tboard_add(&b, "io/read_MBps", (double)read / 1e6 / secs);
        static const char *const util[RUN_STAGES] = {"util/sampler", "util/extractor", "util/trainer", "util/releaser"};
        for (int k = 0; k < RUN_STAGES; k++)
            tboard_add(&b, util[k], busy[k] / secs); /* busy cores: busy seconds per second */
        tboard_write_batch(&p->tb, (int64_t)(e + 1), &b, &p->tboard_failed);
    }
}

/* A failure to keep best/latest/keep_last is a warning (training goes on,
 * the epoch files are all there), said once. */
static void ckpt_warn(struct progress *p, const char *msg)
{
    if (!p->ckpt_warned)
        fprintf(stderr, "gnnlaunch: warning: %s (the epoch-N checkpoints are unaffected; said once)\n", msg);
    p->ckpt_warned = true;
}

/* After epoch e's line: the best epoch and early stopping by
 * train.early_stop_metric, then best.safetensors, latest.safetensors and
 * train.keep_last in the checkpoint directory (node 0, whose rank 0 wrote
 * epoch e's checkpoint before publishing the epoch). */
static void after_epoch(struct progress *p, uint64_t e, const struct results_rec *sum)
{
    const struct config *cfg = p->run.cfg;
    const char *dir = cfg->train.checkpoint_dir;
    char msg[PATH_MAX + 256];
    bool better = false;
    if (sum->val_labelled) {
        bool by_loss = cfg->train.early_stop_metric == EARLY_STOP_VAL_LOSS;
        double m = by_loss ? sum->val_loss_sum / (double)sum->val_labelled
                           : (double)sum->val_correct / (double)sum->val_labelled;
        better = isnan(p->best) || (by_loss ? m < p->best : m > p->best);
        if (better) {
            p->best = m;
            p->best_epoch = e + 1;
            p->best_val_acc = (double)sum->val_correct / (double)sum->val_labelled;
            p->best_has_test = sum->test_labelled > 0;
            p->best_test_acc = p->best_has_test ? (double)sum->test_correct / (double)sum->test_labelled : NAN;
            p->evals_since_best = 0;
        } else {
            p->evals_since_best++;
        }
        int64_t patience = cfg->train.early_stop_patience;
        if (patience > 0 && p->evals_since_best >= (uint64_t)patience && e + 1 < (uint64_t)cfg->train.epochs &&
            !p->stop_early) {
            p->stop_early = true;
            snprintf(p->stop_why, sizeof p->stop_why,
                     "early stop after epoch %" PRIu64 ": %s has not improved for %" PRId64 " evaluation%s "
                     "(train.early_stop_patience); the best was epoch %" PRIu64 " with %s %.4f",
                     e + 1, by_loss ? "val_loss" : "val_acc", patience, patience == 1 ? "" : "s", p->best_epoch,
                     by_loss ? "val_loss" : "val_acc", p->best);
        }
    }
    if (p->run.node != 0 || !dir[0])
        return;
    if (better && ckptdir_point(dir, CKPTDIR_BEST, (uint32_t)(e + 1), msg, sizeof msg) != 0)
        ckpt_warn(p, msg);
    if (ckptdir_point(dir, CKPTDIR_LATEST, (uint32_t)(e + 1), msg, sizeof msg) != 0)
        ckpt_warn(p, msg);
    if (cfg->train.keep_last > 0 && ckptdir_prune(dir, (uint32_t)(e + 1), (uint32_t)cfg->train.keep_last,
                                                  (uint32_t)p->best_epoch, msg, sizeof msg) < 0)
        ckpt_warn(p, msg);
}

void progress_poll(struct progress *p, bool running)
{
    struct results *res = &p->run.layout->results;
    if (!res->hdr)
        return;
    double now = sl_now();
    if (p->metrics.f)
        metrics_processes(p, now - p->run.t_start);
    struct results_rec sum;
    /* Epochs ready now. The stage counters are only sampled here, so when
     * several epochs finished since the last poll their busy and wait
     * seconds are shared out evenly between them (docs/metrics.md). */
    uint64_t ready = 0;
    while (p->next_epoch + ready < (uint64_t)p->run.cfg->train.epochs && epoch_ready(p, p->next_epoch + ready, &sum))
        ready++;
    uint64_t share = ready;
    while (ready-- > 0 && !p->stop_early && epoch_ready(p, p->next_epoch, &sum)) { /* none past an early stop */
        uint64_t e = p->next_epoch;
        struct stage_sums s;
        sums(p, &s);
        double busy[RUN_STAGES], wait[RUN_STAGES];
        for (int k = 0; k < RUN_STAGES; k++) {
            busy[k] = (s.busy[k] - p->busy0[k]) / (double)share;
            wait[k] = (s.wait[k] - p->wait0[k]) / (double)share;
        }
        double loss = sum.train_labelled ? sum.loss_sum / (double)sum.train_labelled : NAN;
        double train_acc = ratio(sum.train_correct, sum.train_labelled);
        double val_acc = sum.val_labelled ? ratio(sum.val_correct, sum.val_labelled) : NAN;
        char val[64] = "";
        double val_loss = sum.val_labelled ? sum.val_loss_sum / (double)sum.val_labelled : NAN;
        if (sum.val_labelled) {
            p->val_acc = val_acc;
            snprintf(val, sizeof val, " val_acc=%.4f val_loss=%.4f", val_acc, val_loss);
        }
        /* feature-buffer counts, shared out like the stage seconds */
        uint64_t found[RUN_RANKS_MAX], loaded[RUN_RANKS_MAX], fnd = 0, ld = 0;
        buffer_counts(p, found, loaded);
        for (int r = 0; p->fb_found0 && r < p->run.ranks; r++) {
            if (found[r] != UINT64_MAX) { /* else its last known counts stand */
                p->fb_found0[r] = found[r];
                p->fb_loaded0[r] = loaded[r];
            }
            fnd += p->fb_found0[r];
            ld += p->fb_loaded0[r];
        }
        fnd = (fnd - SL_MIN(fnd, p->fb_found_sum)) / share;
        ld = (ld - SL_MIN(ld, p->fb_loaded_sum)) / share;
        p->fb_found_sum += fnd;
        p->fb_loaded_sum += ld;
        double hit = ratio(fnd, fnd + ld);
        uint64_t read = (s.bytes[RUN_EXTRACTOR] - p->bytes0) / share;
        uint64_t ios = (s.io_ops[RUN_EXTRACTOR] - p->io0) / share;
        char hit_s[16] = "n/a"; /* no lookups counted in this epoch's window */
        if (!isnan(hit))
            snprintf(hit_s, sizeof hit_s, "%.3f", hit);
        clear_live(p);
        if (p->run.predict == RUN_PREDICT_NONE)
            printf("epoch %" PRIu64 "/%" PRId64 " loss=%.4f train_acc=%.4f%s seconds=%.2f train_s=%.2f eval_s=%.2f | "
               "busy s: sampler %.1f extractor %.1f trainer %.1f releaser %.1f | wait s: sampler %.1f extractor %.1f "
               "trainer %.1f (all-reduce %.1f) | read %.1f MB in %" PRIu64 " reads, buffer hit rate %s\n",
               e + 1, p->run.cfg->train.epochs, loss, train_acc, val, sum.seconds, sum.train_s, sum.eval_s, busy[0],
               busy[1], busy[2], busy[3], wait[0], wait[1], wait[2], sum.reduce_s, (double)read / 1e6, ios, hit_s);
        fflush(stdout);
        if (p->metrics.f) {
            FILE *f = p->metrics.f;
            fprintf(f, "{\"type\":\"epoch\",\"t\":%.3f,\"epoch\":%" PRIu64 ",\"epochs\":%" PRId64 ",",
                    now - p->run.t_start, e + 1, p->run.cfg->train.epochs);
            jsonl_num(f, "loss", loss, true);
            jsonl_num(f, "train_acc", train_acc, true);
            jsonl_num(f, "val_acc", val_acc, true);
            jsonl_num(f, "val_loss", val_loss, true);
            jsonl_num(f, "lr", sum.lr, true);
            if (sum.test_labelled)
                jsonl_num(f, "test_acc", ratio(sum.test_correct, sum.test_labelled), true);
            jsonl_num(f, "hit_rate", hit, true);
            fprintf(f,
                    "\"seconds\":%.6f,\"train_s\":%.6f,\"eval_s\":%.6f,\"reduce_s\":%.6f,\"read_bytes\":%" PRIu64
                    ",\"read_ops\":%" PRIu64 ",\"stages\":{",
                    sum.seconds, sum.train_s, sum.eval_s, sum.reduce_s, read, ios);
            for (int k = 0; k < RUN_STAGES; k++)
                fprintf(f, "%s\"%s\":{\"busy_s\":%.6f,\"wait_s\":%.6f}", k ? "," : "",
                        run_stage_name((enum run_stage)k), busy[k], wait[k]);
            fputs("}}\n", f);
            jsonl_flush(&p->metrics);
        }
        for (int k = 0; k < RUN_STAGES; k++) {
            p->busy0[k] += busy[k];
            p->wait0[k] += wait[k];
        }
        p->bytes0 += read;
        p->io0 += ios;
        share = SL_MAX(share - 1, 1); /* the next epoch of this poll gets its share of what is left */
        if (sum.test_labelled) {
            p->test_acc = ratio(sum.test_correct, sum.test_labelled);
            p->have_test = true;
        }
        p->epochs_done = e + 1;
        epoch_outputs(p, e, &sum, loss, train_acc, val_acc, val_loss, hit, read, ios, busy, wait);
        after_epoch(p, e, &sum);
        results_consume(res, e);
        p->next_epoch++;
    }
    if (running && p->next_epoch < (uint64_t)p->run.cfg->train.epochs) {
        struct stage_sums s;
        sums(p, &s);
        progress_line(p, &s, now);
    }
}

void progress_final(struct progress *p, bool ok, double seconds)
{
    progress_poll(p, false);
    clear_live(p);
    fflush(stdout);
    bool complete = ok && p->run.layout->results.hdr;
    if (complete && p->stop_early) { /* the best epoch's accuracies, with its test pass */
        p->test_acc = p->best_test_acc;
        p->have_test = p->best_has_test;
        p->val_acc = p->best_val_acc;
    } else if (complete && p->epochs_done != (uint64_t)p->run.cfg->train.epochs) {
        fprintf(stderr, "gnnlaunch: warning: the trainers published %" PRIu64 " of %" PRId64 " epochs\n",
                p->epochs_done - p->run.start_epoch, p->run.cfg->train.epochs - p->run.start_epoch);
        complete = false;
    }
    double secs = seconds; /* several nodes: the slowest node's */
    double test = p->have_test ? p->test_acc : NAN;
    if (p->metrics.f) {
        FILE *f = p->metrics.f;
        fprintf(f, "{\"type\":\"final\",\"t\":%.3f,\"complete\":%s,", secs, complete ? "true" : "false");
        jsonl_num(f, "test_acc", test, true);
        jsonl_num(f, "val_acc", p->val_acc, true);
        fprintf(f, "\"epochs\":%" PRIu64 ",\"best_epoch\":%" PRIu64 ",\"stopped_early\":%s,\"seconds\":%.3f}\n",
                p->epochs_done, p->best_epoch, p->stop_early ? "true" : "false", secs);
        jsonl_flush(&p->metrics);
    }
    jsonl_close(&p->metrics);
    free(p->fb_found0);
    free(p->fb_loaded0);
    p->fb_found0 = p->fb_loaded0 = NULL;
    free(p->epoch_first);
    p->epoch_first = NULL;
    if (p->csv_out && fclose(p->csv_out) != 0) {
        fprintf(stderr, "gnnlaunch: warning: --metrics-csv %s: closing failed: %s\n", p->run.csv_file,
                strerror(errno));
        p->csv_failed = true;
    }
    p->csv_out = NULL;
    char tmsg[PATH_MAX + 128];
    if (tboard_close(&p->tb, tmsg, sizeof tmsg) != 0) {
        fprintf(stderr, "gnnlaunch: warning: --tensorboard: %s\n", tmsg);
        p->tboard_failed = true;
    }
    if (complete && p->run.predict == RUN_PREDICT_NONE) { /* a prediction's last line is launcher/predict.c's */
        printf("test_acc=%.4f val_acc=%.4f epochs=%" PRIu64 " seconds=%.2f\n", test, p->val_acc, p->epochs_done, secs);
        fflush(stdout);
    }
}
