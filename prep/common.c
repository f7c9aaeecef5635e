/* common.c - helpers shared by gnnprep's subcommands. */
#include <errno.h>
#include <string.h>

#include "prep.h"

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
