/* device_int.h - what device.c shares with the file that talks to CUDA and
 * NCCL (device_cuda.c, or device_nocuda.c in a build without CUDA). Not
 * for other modules: they use device.h. */
#ifndef SLUICE_GPU_DEVICE_INT_H
#define SLUICE_GPU_DEVICE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "gpu/device.h"

/* device_cuda.c / device_nocuda.c */

/* The probe itself (device_probe_run without SLUICE_FAKE_GPUS). A build
 * without CUDA fills p->cuda = false and returns 0. */
int device_probe_cuda(struct device_probe *p, char *err, size_t errlen);

/* Whether this build has NCCL. */
bool device_have_nccl(void);

/* Starts the helper holding NCCL's bootstrap root (device.h); -ENOTSUP
 * without NCCL. */
int device_nccl_root_fork(struct device_nccl_root *r, char *err, size_t errlen);

/* device.c */

/* Runs child(arg, fd) in a forked process that dies with the caller
 * (PR_SET_PDEATHSIG), sits in a process group of its own, has stdout on
 * stderr, and must write exactly `size` bytes to fd; the answer lands in
 * `answer`. Waits for it at most timeout_s, then kills the child. keep:
 * the child goes on running after its answer (its pid in *pid, for the
 * caller to stop); else child _exits after writing and is reaped here.
 * `what` names the child in messages ("the GPU probe"). 0, or -errno
 * with a message (fork failed; the child died or said nothing in time;
 * it is reaped then). */
int device_child_run(void (*child)(void *arg, int fd), void *arg, void *answer, size_t size, double timeout_s,
                     bool keep, pid_t *pid, const char *what, char *err, size_t errlen);

#endif
