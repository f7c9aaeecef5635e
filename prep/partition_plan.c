/* partition_plan.c - `gnnprep partition-plan DATASET --budget SIZE`: what
 * the partition mode would do with a memory budget, before anything is
 * written: MariusGNN's auto-tuning (core/partorder.h, po_tune) of the
 * partitions p (or --parts), the buffer c (or --slots) and the logical
 * partitions, then for each ordering and coverage the states of an epoch,
 * the swaps expected against the lower bounds, and the bytes read. One
 * key=value line each; reads dataset.toml only. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "core/opt.h"
#include "core/partition.h"
#include "core/partorder.h"
#include "core/util.h"
#include "prep.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: gnnprep partition-plan DATASET --budget SIZE [--parts P] [--slots C] [--read-size SIZE]\n"
               "                              [--reserve SIZE]\n"
               "\n"
               "Prints, as key=value lines, how the partition mode (docs/partitions.md) would use a memory budget\n"
               "on DATASET: MariusGNN's auto-tuning of the partitions p = min(features/D, sqrt(edges/D)), the\n"
               "largest buffer c with c partitions + c^2 edge buckets + the reserve within the budget, and the\n"
               "logical partitions; then for comet and beta, covering every partition (node classification) or\n"
               "every pair (link prediction): the states of an epoch, the swaps against the lower bound, and the\n"
               "bytes an epoch reads. Writes nothing.\n"
               "\n"
               "  --budget SIZE     memory for the partition buffer and its edges, e.g. 1G (required)\n"
               "  --parts P         use P partitions instead of the rule's (e.g. an existing layout's)\n"
               "  --slots C         use a buffer of C partitions instead of the largest that fits\n"
               "  --read-size SIZE  D, the smallest read that still streams (default 1M)\n"
               "  --reserve SIZE    kept out of the budget for working memory (default 64M)\n"
               "  --help            this text\n");
}

int prep_partition_plan_main(int argc, char **argv)
{
    uint64_t budget = 0, parts = 0, slots = 0, read_size = 1u << 20, reserve = 64u << 20;
    bool help = false, seen[6] = {0};
    const struct opt opts[] = {
        {.name = "--budget", .kind = OPT_SIZE, .dst = &budget, .lo = 1, .hi = UINT64_MAX},
        {.name = "--parts", .kind = OPT_UINT, .dst = &parts, .lo = 1, .hi = PARTS_MAX},
        {.name = "--slots", .kind = OPT_UINT, .dst = &slots, .lo = 1, .hi = PARTS_MAX},
        {.name = "--read-size", .kind = OPT_SIZE, .dst = &read_size, .lo = 4096, .hi = 1ull << 30},
        {.name = "--reserve", .kind = OPT_SIZE, .dst = &reserve, .lo = 0, .hi = UINT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    char err[1024];
    int first = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? 2 : 1;
    if (opt_parse("gnnprep partition-plan", opts, 6, argc, argv, first, seen, "; see --help", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (help) {
        usage(stdout);
        return PREP_EXIT_OK;
    }
    if (first == 1 || !seen[0]) {
        fprintf(stderr, "gnnprep partition-plan: %s\n", first == 1 ? "which dataset?" : "--budget is required");
        usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    struct dataset_meta m;
    int rc = dataset_meta_read(argv[1], &m, false, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep partition-plan: %s\n", err);
        return prep_exit_code(rc);
    }
    struct po_tune_in in = {.nodes = m.nodes, .edges = m.edges, .row_bytes = m.f[DATASET_FEATURES].row_stride,
                            .edge_bytes = 8, /* a bucket record: {u32 dst, u32 src} */
                            .edge_copies = 1, .train_nodes = m.f[DATASET_TRAIN].rows, .mem_bytes = budget,
                            .reserve_bytes = reserve, .min_read = read_size, .cover = PO_COVER_NODES,
                            .parts = (uint32_t)parts};
    struct po_tune t;
    if ((rc = po_tune(&in, &t, err, sizeof err)) < 0) {
        fprintf(stderr, "gnnprep partition-plan: %s: %s\n", argv[1], err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (slots) {
        if (slots > t.parts) {
            fprintf(stderr, "gnnprep partition-plan: --slots %" PRIu64 " exceeds the %" PRIu32 " partitions\n", slots,
                    t.parts);
            return PREP_EXIT_BAD_INPUT;
        }
        t.slots = (uint32_t)slots;
        t.logical = po_auto_logical(t.parts, t.slots);
        t.buffer_bytes = slots * t.part_bytes + slots * slots * t.bucket_bytes;
    }
    char b1[32], b2[32], b3[32];
    printf("dataset=%s nodes=%" PRIu64 " edges=%" PRIu64 " features=%s train_nodes=%" PRIu64 "\n", argv[1], m.nodes,
           m.edges, sl_fmt_bytes(m.nodes * m.f[DATASET_FEATURES].row_stride, b1, sizeof b1), m.f[DATASET_TRAIN].rows);
    printf("parts=%" PRIu32 " (%s) part_bytes=%" PRIu64 " (%s) bucket_bytes=%" PRIu64 " train_parts=%" PRIu32 "\n",
           t.parts, parts ? "given" : "auto", t.part_bytes, sl_fmt_bytes(t.part_bytes, b2, sizeof b2), t.bucket_bytes,
           t.train_parts);
    printf("slots=%" PRIu32 " (%s) buffer_bytes=%" PRIu64 " (%s) logical=%" PRIu32 " in_memory=%d\n", t.slots,
           slots ? "given" : "auto", t.buffer_bytes, sl_fmt_bytes(t.buffer_bytes, b3, sizeof b3), t.logical,
           t.slots >= t.parts);
    for (unsigned o = 0; o < PO_ORDERS; o++)
        for (unsigned cv = 0; cv < 2; cv++) {
            struct po_params pp = {.parts = t.parts, .slots = t.slots, .train_parts = t.train_parts, .order = o,
                                   .cover = cv, .seed = 1};
            struct po_plan pl;
            if (po_plan_build(&pl, &pp, err, sizeof err) < 0) {
                printf("order=%s cover=%s refused=\"%s\"\n", po_order_name(o), po_cover_name(cv), err);
                continue;
            }
            uint64_t lb = cv == PO_COVER_PAIRS ? po_lower_bound_pairs(t.parts, t.slots) : po_lower_bound_nodes(t.parts, t.slots);
            /* an epoch reads its swaps plus, from the second epoch on, what
             * its first state does not share with the last (at most S_0) */
            printf("order=%s cover=%s single=%d states=%" PRIu32 " swaps=%" PRIu64 " lower_bound=%" PRIu64
                   " swaps_vs_bound=%.2f epoch_bytes_max=%" PRIu64 " spare_frames=%" PRIu32 "\n",
                   po_order_name(o), po_cover_name(cv), pl.single, pl.states, po_expected_swaps(&pp), lb,
                   lb ? (double)po_expected_swaps(&pp) / (double)lb : 1.0,
                   (po_expected_swaps(&pp) + pl.first_loads) * t.part_bytes, pl.single ? 0 : pl.group);
            po_plan_free(&pl);
        }
    return PREP_EXIT_OK;
}
