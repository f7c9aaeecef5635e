/* gnnprep - makes, converts, checks and describes Sluice datasets
 * (docs/format.md). This file only dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "prep.h"

static const struct {
    const char *name;
    int (*main)(int, char **);
    const char *usage;
} cmds[] = {
    {"synth", prep_synth_main, "synth OUT --nodes N --avg-degree D --feat-dim F --classes C [options]"},
    {"import-ogb", prep_import_ogb_main, "import-ogb RAW_DIR OUT [options]"},
    {"import", prep_import_main, "import OUT --edges FILE --features F.npy --labels L.npy --train T --val V --test U [options]"},
    {"check", prep_check_main, "check DIR"},
    {"info", prep_info_main, "info DIR"},
    {"partition", prep_partition_main, "partition DATASET --parts P [--order random|degree] [--mem-limit SIZE]"},
    {"partition-plan", prep_partition_plan_main, "partition-plan DATASET --budget SIZE [--parts P] [--slots C]"},
    {"cache-sim", prep_cache_sim_main, "cache-sim TRACE --slots S [--window W,...] [--dataset DIR] [options]"},
    {"pack", prep_pack_main, "pack DATASET CONFIG OUT --epochs E [--disk-limit SIZE] [--mem-limit SIZE]"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: gnnprep COMMAND ...\n\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  gnnprep %s\n", cmds[i].usage);
    fprintf(f, "\n`gnnprep COMMAND --help` describes each command's options.\n"
               "Exit status: 0 success, 2 bad input, 1 other failure.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return PREP_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gnnprep (sluice) %s\n", SLUICE_VERSION);
        return PREP_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].main(argc - 1, argv + 1);
    fprintf(stderr, "gnnprep: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return PREP_EXIT_BAD_INPUT;
}
