/* prep.h - the subcommands of gnnprep and helpers they share.
 *
 * Each subcommand is `int prep_<name>_main(int argc, char **argv)` where
 * argv[0] is the subcommand name; it returns the process exit status:
 *   0 success, 2 bad input (usage, flags, input files, dataset), 1 failure of
 *   the machine (disk full, out of memory, I/O error).
 * Errors go to stderr as one line "gnnprep <cmd>: <file>: <what> [; what to do]".
 * A subcommand that writes a dataset stages it with struct dataset_dir (core/dataset.h)
 * so that nothing half-written is ever left at OUT. */
#ifndef SLUICE_PREP_H
#define SLUICE_PREP_H

#include <stdbool.h>
#include <stdint.h>

#define PREP_EXIT_OK 0
#define PREP_EXIT_FAIL 1
#define PREP_EXIT_BAD_INPUT 2

int prep_synth_main(int argc, char **argv);
int prep_import_ogb_main(int argc, char **argv);
int prep_import_main(int argc, char **argv);
int prep_check_main(int argc, char **argv);
int prep_info_main(int argc, char **argv);
int prep_cache_sim_main(int argc, char **argv); /* cachesim_cmd.c */
/* `gnnprep synth OUT --task link ...` (synth_link.c), which prep_synth_main
 * hands over to when --task link is given; and `gnnprep import OUT
 * --triples ...` (import_triples.c), likewise from prep_import_main. */
int prep_synth_link_main(int argc, char **argv);
int prep_import_triples_main(int argc, char **argv);
/* The value of option `name` (--name VALUE or --name=VALUE) in argv[1 ..
 * argc), or NULL when absent. */
const char *prep_find_opt(int argc, char **argv, const char *name);
int prep_pack_main(int argc, char **argv);      /* pack_cmd.c */
int prep_pack_info(const char *dir, bool verify); /* gnnprep info [--verify] on a pack (pack_cmd.c) */
int prep_partition_main(int argc, char **argv);
int prep_partition_plan_main(int argc, char **argv); /* partition_plan.c */

/* Maps a -errno from library code to an exit status: input errors
 * (-EINVAL, -ERANGE, -ENOENT, -EEXIST, -ENOTDIR, -EBADMSG, -EFBIG, -EACCES,
 * -EISDIR, -ENAMETOOLONG: a path or file the user named) -> 2,
 * anything else -> 1. */
int prep_exit_code(int rc);

#endif
