/* partbuf_bench.c - the partition buffer's I/O over whole epochs (issue
 * 22): builds each epoch's plan (core/partorder.h) and walks its states
 * through the partition buffer (stages/partbuf.h), prefetching the next
 * state while the current one "trains" (a sleep of --train-ms per state,
 * 0 for none), and prints key=value lines: the plan (p, c, logical
 * partitions, states, swaps expected and the lower bounds), what the
 * buffer read (partitions, bytes, requests, the average request), the
 * time and read rate, and how long switches waited for the loader.
 *
 *   partbuf-bench DATASET --parts P --slots C [--order comet|beta] [--cover nodes|pairs]
 *                 [--epochs E] [--train-ms T] [--depth D] [--read-bytes B] [--buffered] [--seed S]
 *
 * The segment lives in /dev/shm under the bench's run id and is removed on
 * every exit path (bench_common.h). Reports; asserts nothing. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "core/dataset.h"
#include "core/opt.h"
#include "core/partition.h"
#include "core/partorder.h"
#include "core/util.h"
#include "stages/partbuf.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: partbuf-bench DATASET --parts P --slots C [--order comet|beta] [--cover nodes|pairs]\n"
               "                     [--epochs E] [--train-ms T] [--depth D] [--read-bytes B] [--buffered] [--seed S]\n");
}

static int order_fn(const char *v, void *dst, char *err, size_t errlen)
{
    return po_order_parse(v, dst) ? sl_errf(err, errlen, -EINVAL, "partbuf-bench: --order %s: comet or beta", v) : 0;
}

static int cover_fn(const char *v, void *dst, char *err, size_t errlen)
{
    enum po_cover *c = dst;
    if (!strcmp(v, "nodes"))
        *c = PO_COVER_NODES;
    else if (!strcmp(v, "pairs"))
        *c = PO_COVER_PAIRS;
    else
        return sl_errf(err, errlen, -EINVAL, "partbuf-bench: --cover %s: nodes or pairs", v);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t parts = 0, slots = 0, epochs = 3, train_ms = 0, depth = 0, read_bytes = 0, seed = 1;
    enum po_order order = PO_ORDER_COMET;
    enum po_cover cover = PO_COVER_NODES;
    bool buffered = false, help = false, seen[11] = {0};
    const struct opt opts[] = {
        {.name = "--parts", .kind = OPT_UINT, .dst = &parts, .lo = 1, .hi = PARTS_MAX},
        {.name = "--slots", .kind = OPT_UINT, .dst = &slots, .lo = 1, .hi = PARTS_MAX},
        {.name = "--order", .kind = OPT_FN, .dst = &order, .fn = order_fn},
        {.name = "--cover", .kind = OPT_FN, .dst = &cover, .fn = cover_fn},
        {.name = "--epochs", .kind = OPT_UINT, .dst = &epochs, .lo = 1, .hi = 1000},
        {.name = "--train-ms", .kind = OPT_UINT, .dst = &train_ms, .lo = 0, .hi = 600000},
        {.name = "--depth", .kind = OPT_UINT, .dst = &depth, .lo = 1, .hi = 64},
        {.name = "--read-bytes", .kind = OPT_SIZE, .dst = &read_bytes, .lo = 4096, .hi = 1u << 30},
        {.name = "--buffered", .kind = OPT_FLAG, .dst = &buffered},
        {.name = "--seed", .kind = OPT_UINT, .dst = &seed, .lo = 0, .hi = UINT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    char err[1024];
    int first = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? 2 : 1;
    if (opt_parse("partbuf-bench", opts, 11, argc, argv, first, seen, "; see --help", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (first == 1 || !seen[0] || !seen[1]) {
        usage(stderr);
        return 2;
    }
    const char *ds = argv[1];
    struct dataset_meta m;
    struct parts_meta pm;
    char lay[4096], name[64];
    parts_dir_name((uint32_t)parts, name, sizeof name);
    if (dataset_meta_read(ds, &m, true, err, sizeof err) || sl_path_join(lay, sizeof lay, ds, name) ||
        parts_meta_read(lay, &m, &pm, err, sizeof err)) {
        fprintf(stderr, "partbuf-bench: %s\n", err);
        return 2;
    }
    bench_begin("partbuf-bench");
    struct po_params pp = {.parts = pm.parts, .slots = (uint32_t)slots, .train_parts = pm.train_parts, .order = order,
                           .cover = cover, .seed = seed};
    struct po_plan pl[2];
    memset(pl, 0, sizeof pl);
    if (po_plan_build(&pl[0], &pp, err, sizeof err)) {
        fprintf(stderr, "partbuf-bench: %s\n", err);
        bench_cleanup();
        return 2;
    }
    struct partbuf pb;
    struct partbuf_params bp = {.run_id = bench_run, .slots = (uint32_t)slots, .spare = pl[0].single ? 0 : pl[0].group,
                                .depth = (unsigned)depth, .read_bytes = read_bytes, .buffered = buffered};
    int rc = partbuf_init(&pb, lay, &pm, &bp, err, sizeof err);
    if (rc)
        bench_die(err, rc);
    char b1[32];
    printf("parts=%" PRIu32 " slots=%" PRIu64 " spare_frames=%" PRIu32 " part_bytes=%" PRIu64 " (%s) train_parts=%" PRIu32 "\n",
           pm.parts, slots, pb.frames - pb.slots, pm.part_bytes, sl_fmt_bytes(pm.part_bytes, b1, sizeof b1), pm.train_parts);
    printf("order=%s cover=%s logical=%" PRIu32 " logical_slots=%" PRIu32 " single=%d states=%" PRIu32
           " swaps_expected=%" PRIu64 " lower_bound_nodes=%" PRIu64 " lower_bound_pairs=%" PRIu64 "\n",
           po_order_name(order), po_cover_name(cover), pl[0].logical, pl[0].logical_slots, pl[0].single, pl[0].states,
           po_expected_swaps(&pp), po_lower_bound_nodes(pm.parts, (uint32_t)slots),
           po_lower_bound_pairs(pm.parts, (uint32_t)slots));
    struct partbuf_stats prev = {0};
    double t_all = sl_now();
    for (uint64_t e = 0; e < epochs; e++) {
        struct po_plan *cur = &pl[e % 2];
        if (e > 0) {
            pp.seed = sl_mix64(seed + e);
            po_plan_free(cur);
            if (po_plan_build(cur, &pp, err, sizeof err))
                bench_die(err, -EINVAL);
            /* the first state of this epoch was prefetched at the end of the last */
        }
        double t0 = sl_now();
        for (uint32_t s = 0; s < cur->states; s++) {
            if ((rc = partbuf_switch(&pb, cur, s, err, sizeof err)))
                bench_die(err, rc);
            if (s + 1 < cur->states && (rc = partbuf_prefetch(&pb, cur, s + 1, err, sizeof err)))
                bench_die(err, rc);
            if (train_ms) {
                struct timespec ts = {(time_t)(train_ms / 1000), (long)(train_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
        struct partbuf_stats st;
        partbuf_stats(&pb, &st);
        double dt = sl_now() - t0;
        uint64_t loads = st.loads - prev.loads, bytes = st.bytes - prev.bytes, reads = st.reads - prev.reads;
        uint64_t first_loads = e == 0 ? cur->first_loads : 0;
        printf("epoch=%" PRIu64 " seconds=%.3f partitions_read=%" PRIu64 " swaps=%" PRIu64 " plan_swaps=%" PRIu64
               " bytes_read=%" PRIu64 " reads=%" PRIu64 " avg_request=%.0f MBps=%.1f wait_s=%.3f read_s=%.3f\n",
               e, dt, loads, loads - first_loads - (e > 0 ? po_epoch_carry_loads(&pl[(e + 1) % 2], cur) : 0),
               cur->swaps, bytes, reads, reads ? (double)bytes / (double)reads : 0.0,
               dt > 0 ? (double)bytes / dt / 1e6 : 0.0, (double)(st.wait_ns - prev.wait_ns) / 1e9,
               (double)(st.read_ns - prev.read_ns) / 1e9);
        prev = st;
    }
    double total = sl_now() - t_all;
    printf("total_seconds=%.3f bytes_read=%" PRIu64 " reads=%" PRIu64 " avg_request=%.0f MBps=%.1f read_MBps=%.1f "
           "wait_s=%.3f direct=%d io_uring=%d\n",
           total, prev.bytes, prev.reads, prev.reads ? (double)prev.bytes / (double)prev.reads : 0.0,
           (double)prev.bytes / total / 1e6, prev.read_ns ? (double)prev.bytes / ((double)prev.read_ns / 1e9) / 1e6 : 0.0,
           (double)prev.wait_ns / 1e9, pb.direct, pb.uring);
    partbuf_free(&pb);
    po_plan_free(&pl[0]);
    po_plan_free(&pl[1]);
    bench_cleanup();
    return 0;
}
