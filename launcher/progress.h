/* progress.h - what gnnlaunch tells the user while a run trains: the
 * epoch lines, the progress line, the --metrics records and the final
 * line (progress.c says what each holds). It reads the run through struct
 * progress_run, set once at the start; the epoch results come through a
 * callback, so that a multi-node run can hand over every node's sums
 * without progress knowing where they come from. Only the launcher's main
 * thread calls these. */
#ifndef SLUICE_LAUNCHER_PROGRESS_H
#define SLUICE_LAUNCHER_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ipc/results.h"
#include "core/config.h"
#include "launcher/jsonl.h"
#include "launcher/layout.h"
#include "launcher/tboard.h"

/* Whether epoch e's records of every rank (on a multi-node run, of every
 * node's ranks) are in; *sum then holds them added in global rank order.
 * first: the first epoch not printed yet. Must not block. */
typedef bool (*progress_epoch_fn)(void *ctx, uint64_t first, uint64_t e, struct results_rec *sum);

/* What progress reads of the run; the pointers outlive the progress. */
struct progress_run {
    const struct config *cfg; /* dataset.path, train.* */
    struct layout *layout;    /* metrics, results page, queues, feature buffers */
    int ranks;                /* this node's */
    uint32_t node, nodes;     /* this node and how many (0 and 1 on a single node) */
    uint32_t start_epoch;     /* with --resume: epochs the checkpoint holds */
    double t_start;           /* sl_now() when the run was created */
    const char *metrics_file; /* --metrics, absolute, or "" */
    const char *csv_file;     /* --metrics-csv, absolute, or "" (NULL: none) */
    const char *tboard_dir;   /* --tensorboard, absolute, or "" (NULL: none) */
    progress_epoch_fn epoch;  /* NULL: this node's results page (results_epoch) */
    enum run_predict predict; /* a prediction run: its nodes (no epoch lines, no final line of its own) */
    void *epoch_ctx;
};

struct progress {
    struct progress_run run;
    uint64_t next_epoch;  /* the next epoch line to print */
    uint64_t epochs_done; /* epochs printed (resumed ones included) */
    double val_acc, test_acc;
    bool have_test;
    double busy0[RUN_STAGES], wait0[RUN_STAGES]; /* stage seconds at the last epoch line */
    uint64_t bytes0, io0;                              /* extractor bytes and reads at the last epoch line */
    uint64_t batches_total;                            /* batches the trainers handle in this run */
    uint64_t *epoch_first; /* (epochs + 1) trainer batches before epoch e, counted from start_epoch; NULL: unknown */
    uint64_t cur_epoch;    /* the epoch the progress line last showed, and when it first did */
    double cur_t0;
    bool tty, live;                                    /* stderr is a terminal; a live line is showing */
    double t_plain, t_last;                            /* progress line timing */
    double rate, mbps, ema_w; /* batches/s and MB/s, each an average over the last ~PROGRESS_TAU_S seconds
                               * (exponential, divided by ema_w, the weight seen so far, so the first seconds
                               * are not pulled towards 0) */
    double plain_every;                                /* seconds between plain progress lines */
    uint64_t items_last, bytes_last;
    struct jsonl metrics;                 /* --metrics (launcher/jsonl.h) */
    uint64_t *fb_found0, *fb_loaded0;     /* (ranks) last feature-buffer counts read */
    uint64_t fb_found_sum, fb_loaded_sum; /* their sums as of the last epoch line */
    /* the best epoch by train.early_stop_metric, and early stopping */
    double best;               /* its metric (NAN: no evaluation yet) */
    uint64_t best_epoch;       /* 1-based; 0: none */
    double best_val_acc, best_test_acc;
    bool best_has_test;
    uint64_t evals_since_best; /* evaluations in a row without a better metric */
    bool stop_early;           /* the patience ran out: the supervisor stops the run */
    char stop_why[256];
    bool ckpt_warned;          /* a best/latest/keep_last failure was reported */
    FILE *csv_out;             /* --metrics-csv, while open */
    bool csv_failed;
    struct tboard tb;          /* --tensorboard; fd -1 when not open */
    bool tboard_failed;
};

/* Before the supervision loop: counts the run's batches, opens --metrics
 * (a failure there is a warning). Epoch lines start at run->start_epoch. */
void progress_start(struct progress *p, const struct progress_run *run);

/* Prints the epoch lines whose results are in (stdout), the --metrics
 * records and, while running (the stages still run, no stop under way),
 * the progress line. */
void progress_poll(struct progress *p, bool running);

/* At the end: the remaining epoch lines and, for a run that completed
 * (ok: every stage and node finished well, or early stopping ended it),
 * the final test_acc=... line with `seconds` as the run's time (stopped
 * early: the best epoch's accuracies). Closes --metrics. */
void progress_final(struct progress *p, bool ok, double seconds);

/* "M:SS", or "H:MM:SS" from an hour, of secs; "?" when it is negative,
 * not a number or beyond 1e7 (the progress lines' elapsed and left). */
void progress_clock_text(char *buf, size_t len, double secs);

#endif
