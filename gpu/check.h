/* check.h - error checks for CUDA, cuBLAS and NCCL calls (STYLE.md,
 * "Errors"), in two families:
 *
 * - fail fast, for stage main()s: CUDA_CHECK(stmt), CUBLAS_CHECK(stmt),
 *   NCCL_CHECK(stmt) print "<library> call failed: <stmt> in <function>
 *   (<file>:<line>): <library's message>" on stderr (a line of its own,
 *   sl_err_line_start) and exit(1).
 * - return a code, for library code (gpu/, the trainer backend):
 *   CUDA_RC(stmt, err, errlen), CUBLAS_RC(...), NCCL_RC(...) evaluate to 0
 *   when stmt succeeds, else to a negative errno-style code with the same
 *   message in err (when err is not NULL): -ENOMEM for allocation
 *   failures, -ENODEV when there is no usable device or driver, -EINVAL
 *   for invalid arguments, -EIO for the rest. CUDA_RC also clears the
 *   runtime's last error (cudaGetLastError), which a failed call sets
 *   too, so that the next launch check does not report it again. Use
 *   them as
 *       if ((rc = CUDA_RC(cudaMalloc(&p, n), err, errlen)) != 0) goto err;
 *
 * The CUDA and cuBLAS parts need <cuda_runtime.h> and <cublas_v2.h>
 * (included here), or, in the shim build (GK_SHIM defined, not nvcc),
 * gpu/shim.h's emulation of the runtime (there is no cuBLAS there). The
 * NCCL part is defined when <nccl.h> was included before this header. */
#ifndef SLUICE_GPU_CHECK_H
#define SLUICE_GPU_CHECK_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/util.h" /* sl_err_line_start */
#ifdef __cplusplus
}
#endif

#if defined(GK_SHIM) && !defined(__CUDACC__)
#include "gpu/shim.h"
#define GK_HAVE_CUBLAS 0
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#define GK_HAVE_CUBLAS 1
#endif

/* ---- CUDA runtime -------------------------------------------------------------------------------------- */

static inline int gk_cuda_errno(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return 0;
    case cudaErrorMemoryAllocation:
        return -ENOMEM;
    case cudaErrorNoDevice:
        return -ENODEV;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
        return -EINVAL;
    case cudaErrorInvalidDevice:
        return -ENODEV;
#if !defined(GK_SHIM) || defined(__CUDACC__)
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
        return -ENODEV;
#endif
    default:
        return -EIO;
    }
}

/* 0 for cudaSuccess; otherwise the code above, the message in err. */
static inline int gk_cuda_rc(cudaError_t e, const char *stmt, const char *func, const char *file, int line, char *err,
                             size_t errlen)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* the runtime also recorded e: consumed here, so a later launch check does not see it */
    if (err && errlen)
        snprintf(err, errlen, "CUDA call failed: %s in %s (%s:%d): %s (%s)", stmt, func, file, line,
                 cudaGetErrorString(e), cudaGetErrorName(e));
    return gk_cuda_errno(e);
}

#define CUDA_RC(stmt, err, errlen) gk_cuda_rc((stmt), #stmt, __func__, __FILE__, __LINE__, (err), (errlen))

#define CUDA_CHECK(stmt)                                                                                               \
    do {                                                                                                               \
        char gk_msg_[512];                                                                                             \
        if (CUDA_RC(stmt, gk_msg_, sizeof gk_msg_) != 0) {                                                             \
            fprintf(stderr, "%s%s\n", sl_err_line_start(), gk_msg_);                                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* ---- cuBLAS ------------------------------------------------------------------------------------------- */

#if GK_HAVE_CUBLAS
static inline int gk_cublas_errno(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return 0;
    case CUBLAS_STATUS_ALLOC_FAILED:
        return -ENOMEM;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return -ENODEV;
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return -EINVAL;
    default:
        return -EIO;
    }
}

static inline int gk_cublas_rc(cublasStatus_t s, const char *stmt, const char *func, const char *file, int line,
                               char *err, size_t errlen)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "cuBLAS call failed: %s in %s (%s:%d): %s (%s)", stmt, func, file, line,
                 cublasGetStatusString(s), cublasGetStatusName(s));
    return gk_cublas_errno(s);
}

#define CUBLAS_RC(stmt, err, errlen) gk_cublas_rc((stmt), #stmt, __func__, __FILE__, __LINE__, (err), (errlen))

#define CUBLAS_CHECK(stmt)                                                                                             \
    do {                                                                                                               \
        char gk_msg_[512];                                                                                             \
        if (CUBLAS_RC(stmt, gk_msg_, sizeof gk_msg_) != 0) {                                                           \
            fprintf(stderr, "%s%s\n", sl_err_line_start(), gk_msg_);                                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#endif

/* ---- NCCL --------------------------------------------------------------------------------------------- */

#ifdef NCCL_MAJOR
static inline int gk_nccl_errno(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return 0;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return -EINVAL;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    case ncclRemoteError:
        return -EPIPE; /* a peer failed or went away */
    case ncclInProgress:
        return -EINPROGRESS;
#endif
    default:
        return -EIO;
    }
}

static inline int gk_nccl_rc(ncclResult_t r, const char *stmt, const char *func, const char *file, int line, char *err,
                             size_t errlen)
{
    if (r == ncclSuccess)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "NCCL call failed: %s in %s (%s:%d): %s", stmt, func, file, line, ncclGetErrorString(r));
    return gk_nccl_errno(r);
}

#define NCCL_RC(stmt, err, errlen) gk_nccl_rc((stmt), #stmt, __func__, __FILE__, __LINE__, (err), (errlen))

#define NCCL_CHECK(stmt)                                                                                               \
    do {                                                                                                               \
        char gk_msg_[512];                                                                                             \
        if (NCCL_RC(stmt, gk_msg_, sizeof gk_msg_) != 0) {                                                             \
            fprintf(stderr, "%s%s\n", sl_err_line_start(), gk_msg_);                                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#endif

#endif
