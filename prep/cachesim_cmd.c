/* cachesim_cmd.c - `gnnprep cache-sim TRACE --slots S [...]`: replays a
 * row trace (pipeline.trace_rows; format in stages/cachesim.h) against the
 * feature buffer's policies and Belady's optimum at the same number of
 * slots and prints the misses of each as key=value lines, one policy a
 * line:
 *   policy=belady window=0 misses=M accesses=A miss_rate=R vs_belady=1.000
 * lru and belady always; static (and lookahead-static) when --dataset
 * gives the graph for the hot set; lookahead-W for each W of --window. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "core/opt.h"
#include "core/util.h"
#include "prep.h"
#include "stages/cachesim.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: gnnprep cache-sim TRACE --slots S [--window W[,W...]] [--dataset DIR [--hot-fraction F]]\n"
               "                          [--hint-rows N]\n"
               "\n"
               "Replays TRACE (a row trace written by a run with --set pipeline.trace_rows=FILE: FILE.rank<R>)\n"
               "batch by batch against the feature buffer's policies with S slots and prints the misses of each\n"
               "(rows loaded) beside Belady's optimum (evict the row used farthest in the future) as key=value\n"
               "lines. Policies: belady, lru, lookahead with each window W (batches announced ahead; default\n"
               "8,32,128), and with --dataset (the trace's dataset, for the out-degrees) static and\n"
               "lookahead-static, whose hot set is F (default 0.5) of the slots.\n"
               "\n"
               "  --slots S          feature buffer slots (at least the largest batch's nodes)\n"
               "  --window LIST      lookahead windows in batches, 1..4096 (default 8,32,128)\n"
               "  --dataset DIR      the dataset the trace was taken on (for the static policies)\n"
               "  --hot-fraction F   share of the slots pinned to the hot set (default 0.5)\n"
               "  --hint-rows N      the lookahead policy's hint log (default: every access of the trace)\n"
               "  --help             this text\n");
}

static void line(const char *name, uint32_t window, uint64_t misses, const struct cachesim_trace *t, uint64_t opt)
{
    printf("policy=%s window=%" PRIu32 " misses=%" PRIu64 " accesses=%" PRIu64 " miss_rate=%.4f vs_belady=%.3f\n", name,
           window, misses, t->accesses, t->accesses ? (double)misses / (double)t->accesses : 0.0,
           opt ? (double)misses / (double)opt : 1.0);
}

int prep_cache_sim_main(int argc, char **argv)
{
    char err[1024], dir[4096] = "";
    uint64_t slots = 0, hint_rows = 0;
    double hot_fraction = 0.5;
    struct opt_list windows = {.v = {8, 32, 128}, .n = 3};
    bool help = false, seen[6] = {0};
    const struct opt opts[] = {
        {.name = "--slots", .kind = OPT_UINT, .dst = &slots, .lo = 1, .hi = 1 << 30},
        {.name = "--window", .kind = OPT_LIST, .dst = &windows, .lo = 1, .hi = 4096},
        {.name = "--dataset", .kind = OPT_STR, .dst = dir, .len = sizeof dir},
        {.name = "--hot-fraction", .kind = OPT_DOUBLE, .dst = &hot_fraction, .lo = 0, .hi = 0.95},
        {.name = "--hint-rows", .kind = OPT_UINT, .dst = &hint_rows, .lo = 1, .hi = UINT32_MAX - 1},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int first = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? 2 : 1;
    if (opt_parse("gnnprep cache-sim", opts, 6, argc, argv, first, seen, "; see --help", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (first == 1 || slots == 0) {
        fprintf(stderr, "gnnprep cache-sim: %s\n",
                first == 1 ? "which trace? (TRACE, a file pipeline.trace_rows wrote)" : "--slots is required");
        usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    struct cachesim_trace t;
    int rc = cachesim_trace_read(&t, argv[1], err, sizeof err);
    if (rc) {
        fprintf(stderr, "gnnprep cache-sim: %s\n", err);
        return prep_exit_code(rc);
    }
    if (t.truncated)
        fprintf(stderr,
                "gnnprep cache-sim: %s ends inside a record (the run stopped while writing); replaying the "
                "%" PRIu64 " whole batches\n",
                argv[1], t.batches);
    uint64_t *hot = NULL, nhot = 0;
    if (dir[0]) {
        struct dataset_meta m;
        if ((rc = dataset_meta_read(dir, &m, true, err, sizeof err)) != 0) {
            fprintf(stderr, "gnnprep cache-sim: %s: %s\n", dir, err);
            cachesim_trace_free(&t);
            return prep_exit_code(rc);
        }
        if (m.nodes != t.n_nodes) {
            fprintf(stderr,
                    "gnnprep cache-sim: %s has %" PRIu64 " nodes but the trace %" PRIu64
                    "; give the dataset the trace was taken on\n",
                    dir, m.nodes, t.n_nodes);
            cachesim_trace_free(&t);
            return PREP_EXIT_BAD_INPUT;
        }
        nhot = slots > t.max_batch ? (uint64_t)((double)(slots - t.max_batch) * hot_fraction) : 0;
        hot = malloc(SL_MAX(nhot, 1) * sizeof *hot);
        if (!hot || (rc = cachesim_hot_set(dir, &m, nhot, hot, err, sizeof err)) != 0) {
            fprintf(stderr, "gnnprep cache-sim: %s\n", hot ? err : "out of memory");
            free(hot);
            cachesim_trace_free(&t);
            return hot ? prep_exit_code(rc) : PREP_EXIT_FAIL;
        }
    }
    printf("trace=%s\nrank=%" PRIu32 "\nnodes=%" PRIu64 "\nbatches=%" PRIu64 "\naccesses=%" PRIu64
           "\nlargest_batch=%" PRIu32 "\nslots=%" PRIu64 "\nhot=%" PRIu64 "\n",
           argv[1], t.rank, t.n_nodes, t.batches, t.accesses, t.max_batch, slots, nhot);
    uint64_t opt = 0, m = 0;
    struct cachesim_run r = {.policy = CACHESIM_BELADY,
                             .slots = (uint32_t)slots,
                             .hot = hot,
                             .nhot = (uint32_t)nhot,
                             .hint_entries = hint_rows};
    if ((rc = cachesim_replay(&t, &r, &opt, err, sizeof err)) == 0) {
        line("belady", 0, opt, &t, opt);
        r.policy = CACHESIM_LRU;
        r.nhot = 0;
        if ((rc = cachesim_replay(&t, &r, &m, err, sizeof err)) == 0)
            line("lru", 0, m, &t, opt);
    }
    if (rc == 0 && nhot) {
        r.policy = CACHESIM_STATIC;
        r.nhot = (uint32_t)nhot;
        if ((rc = cachesim_replay(&t, &r, &m, err, sizeof err)) == 0)
            line("static", 0, m, &t, opt);
    }
    for (int i = 0; rc == 0 && i < windows.n; i++) {
        r.policy = CACHESIM_LOOKAHEAD;
        r.window = (uint32_t)windows.v[i];
        r.nhot = 0;
        if ((rc = cachesim_replay(&t, &r, &m, err, sizeof err)) == 0)
            line("lookahead", r.window, m, &t, opt);
        if (rc == 0 && nhot) {
            r.nhot = (uint32_t)nhot;
            if ((rc = cachesim_replay(&t, &r, &m, err, sizeof err)) == 0)
                line("lookahead-static", r.window, m, &t, opt);
        }
    }
    fflush(stdout);
    if (rc)
        fprintf(stderr, "gnnprep cache-sim: %s: %s\n", argv[1], err);
    free(hot);
    cachesim_trace_free(&t);
    return rc ? prep_exit_code(rc) : 0;
}
