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

/* Interrupts (import, import-ogb, partition). prep_signals_on catches the
 * first SIGINT or SIGTERM into prep_stop (the second has its default
 * action: a user who presses Ctrl-C twice is not kept waiting) and ignores
 * SIGXFSZ (a file over the size limit is then an EFBIG error, handled
 * like a full disk); the long loops call prep_interrupted, which returns
 * -EINTR with a message once a signal came, so the command removes its
 * staging directory and exits 130 (prep_exit_code). prep_signals_off puts
 * the old actions back. */
#include <signal.h>
#include <stddef.h>
extern volatile sig_atomic_t prep_stop;
struct prep_signals {
    struct sigaction old_int, old_term, old_xfsz;
};
void prep_signals_on(struct prep_signals *s);
void prep_signals_off(const struct prep_signals *s);
int prep_interrupted(char *err, size_t errlen);
#define PREP_EXIT_INTERRUPTED 130

/* Maps a -errno from library code to an exit status: input errors
 * (-EINVAL, -ERANGE, -ENOENT, -EEXIST, -ENOTDIR, -EBADMSG, -EFBIG, -EACCES,
 * -EISDIR, -ENAMETOOLONG: a path or file the user named) -> 2,
 * -EINTR (prep_interrupted) -> 130, anything else -> 1. */
int prep_exit_code(int rc);

#endif
