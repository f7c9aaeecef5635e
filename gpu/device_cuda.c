/* device_cuda.c - the calls into CUDA and NCCL behind device.h, each made
 * in a forked child (device_child_run) so that the launcher itself never
 * initialises CUDA: the device count and names, and the helper that makes
 * the NCCL unique id and keeps its bootstrap root alive. Built when CMake
 * finds CUDA (gpu/device.cmake); SLUICE_HAVE_NCCL when it also finds
 * NCCL. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#if SLUICE_HAVE_NCCL
#include <nccl.h>
#endif

#include "core/util.h"
#include "gpu/device_int.h"

/* ---- the probe ----------------------------------------------------------------------------- */

/* In the child: the count and names, or CUDA's error, to fd. */
static void probe_child(void *arg, int fd)
{
    (void)arg;
    struct device_probe p = {.cuda = true};
    cudaDriverGetVersion(&p.driver);
    cudaRuntimeGetVersion(&p.runtime);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(p.error, sizeof p.error, "%s, %s", cudaGetErrorString(e), cudaGetErrorName(e));
    } else {
        p.count = n;
        for (int i = 0; i < n && i < DEVICE_NAMES_MAX; i++) {
            struct cudaDeviceProp prop;
            if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
                snprintf(p.names[i], sizeof p.names[i], "%.*s", DEVICE_NAME_MAX - 1, prop.name);
        }
    }
    sl_write_all(fd, &p, sizeof p);
}

int device_probe_cuda(struct device_probe *p, char *err, size_t errlen)
{
    return device_child_run(probe_child, NULL, p, sizeof *p, DEVICE_PROBE_TIMEOUT_S, false, NULL, "the GPU probe", err,
                            errlen);
}

/* ---- the NCCL root ------------------------------------------------------------------------- */

bool device_have_nccl(void)
{
    return SLUICE_HAVE_NCCL != 0;
}

#if SLUICE_HAVE_NCCL
_Static_assert(sizeof(ncclUniqueId) == DEVICE_NCCL_ID_BYTES, "an NCCL unique id is 128 bytes");

/* What the helper answers. */
struct root_answer {
    int rc;        /* ncclResult_t */
    char msg[256]; /* NCCL's words when rc != ncclSuccess */
    uint8_t id[DEVICE_NCCL_ID_BYTES];
};

/* In the helper: make the id, hand it over, then keep the bootstrap root
 * (a thread of this process) alive until the launcher kills us. */
static void root_child(void *arg, int fd)
{
    (void)arg;
    prctl(PR_SET_NAME, "gnnlaunch-nccl"); /* what ps -o comm and top show */
    struct root_answer a = {0};
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    a.rc = (int)r;
    if (r == ncclSuccess) {
        memcpy(a.id, id.internal, sizeof a.id);
    } else {
        const char *last = ncclGetLastError(NULL);
        snprintf(a.msg, sizeof a.msg, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    }
    sl_write_all(fd, &a, sizeof a);
    close(fd);
    if (r != ncclSuccess)
        _exit(1);
    for (;;)
        pause();
}

int device_nccl_root_fork(struct device_nccl_root *r, char *err, size_t errlen)
{
    struct root_answer a;
    pid_t pid = 0;
    int rc = device_child_run(root_child, NULL, &a, sizeof a, DEVICE_PROBE_TIMEOUT_S, true, &pid,
                              "the NCCL root helper", err, errlen);
    if (rc)
        return rc;
    r->pid = pid;
    if (a.rc != (int)ncclSuccess) {
        device_nccl_root_stop(r);
        return sl_errf(err, errlen, -EIO,
                       "ncclGetUniqueId failed: %s; NCCL_SOCKET_IFNAME names the network interface to use "
                       "(docs/gpu.md)",
                       a.msg);
    }
    memcpy(r->id, a.id, sizeof r->id);
    return 0;
}
#else
int device_nccl_root_fork(struct device_nccl_root *r, char *err, size_t errlen)
{
    (void)r;
    return sl_errf(err, errlen, -ENOTSUP, "this build has no NCCL");
}
#endif
