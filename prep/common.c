/* common.c - helpers shared by gnnprep's subcommands. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "prep.h"

volatile sig_atomic_t prep_stop;

static void on_stop(int sig)
{
    prep_stop = sig;
}

void prep_signals_on(struct prep_signals *s)
{
    prep_stop = 0;
    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESETHAND}, ign = {.sa_handler = SIG_IGN};
    sigemptyset(&sa.sa_mask);
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &sa, &s->old_int);
    sigaction(SIGTERM, &sa, &s->old_term);
    sigaction(SIGXFSZ, &ign, &s->old_xfsz);
}

void prep_signals_off(const struct prep_signals *s)
{
    sigaction(SIGINT, &s->old_int, NULL);
    sigaction(SIGTERM, &s->old_term, NULL);
    sigaction(SIGXFSZ, &s->old_xfsz, NULL);
}

int prep_interrupted(char *err, size_t errlen)
{
    int sig = prep_stop;
    if (!sig)
        return 0;
    return sl_errf(err, errlen, -EINTR, "interrupted by %s; nothing was written (the staging directory is removed)",
                   sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal");
}

int prep_exit_code(int rc)
{
    switch (rc) {
    case 0:
        return PREP_EXIT_OK;
    case -EINVAL:
    case -ERANGE:
    case -ENOENT:
    case -EEXIST:
    case -ENOTDIR:
    case -EBADMSG:
    case -EFBIG:
    case -EACCES:
    case -EISDIR:
    case -ENAMETOOLONG:
    case -EMEDIUMTYPE: /* a dataset of the other task (core/linkdata.h) */
    case -ENOTSUP: /* an input of a kind gnnprep does not take (ogbn-mag, ogbn-proteins) */
        return PREP_EXIT_BAD_INPUT;
    case -EINTR: /* prep_interrupted: as a shell reports SIGINT */
        return PREP_EXIT_INTERRUPTED;
    default:
        return PREP_EXIT_FAIL;
    }
}

const char *prep_find_opt(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], name, n))
            continue;
        if (argv[i][n] == '=')
            return argv[i] + n + 1;
        if (!argv[i][n])
            return i + 1 < argc ? argv[i + 1] : "";
    }
    return NULL;
}
