/* device_nocuda.c - device.h's CUDA side in a build without CUDA: the
 * probe reports that the build has none (device_plan_make then says how
 * to get it), and there is no NCCL. */
#include <errno.h>
#include <string.h>

#include "core/util.h"
#include "gpu/device_int.h"

int device_probe_cuda(struct device_probe *p, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    memset(p, 0, sizeof *p);
    p->cuda = false;
    return 0;
}

bool device_have_nccl(void)
{
    return false;
}

int device_nccl_root_fork(struct device_nccl_root *r, char *err, size_t errlen)
{
    (void)r;
    return sl_errf(err, errlen, -ENOTSUP, "this build has no CUDA and no NCCL");
}
