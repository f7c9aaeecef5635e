/* common.c - helpers shared by gnnprep's subcommands. */
#include <errno.h>

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
    case -ENOTSUP: /* an input of a kind gnnprep does not take (ogbn-mag, ogbn-proteins) */
        return PREP_EXIT_BAD_INPUT;
    default:
        return PREP_EXIT_FAIL;
    }
}
