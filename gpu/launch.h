/* launch.h - what the kernel sources share (gpu/kernels.cu,
 * gpu/kernels_graph.cu; private to gpu/): the launch geometry, the
 * grid-stride loop every kernel is written with, and the checked launch.
 * Compiled under nvcc or through gpu/shim.h. */
#ifndef SLUICE_GPU_LAUNCH_H
#define SLUICE_GPU_LAUNCH_H

#include "gpu/shim.h"

#include <stdarg.h>
#include <stdio.h>

#include "gpu/check.h"
#include "gpu/kernels.h"

#define GK_THREADS 256u   /* threads per block */
#define GK_GRID_MAX 8192u /* blocks per launch; grid-stride loops cover the rest */

/* A grid-stride loop, which every kernel is written as:
 *     for (size_t i = gk_first(); i < n; i += gk_stride())
 * runs i over 0 .. n-1, each index in exactly one thread. */
static __device__ inline size_t gk_first(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ inline size_t gk_stride(void)
{
    return (size_t)gridDim.x * blockDim.x;
}

static inline unsigned gk_blocks(size_t n)
{
    size_t b = (n + GK_THREADS - 1) / GK_THREADS;
    return (unsigned)(b < GK_GRID_MAX ? b : GK_GRID_MAX);
}

static inline int gk_fail(struct gk_ctx *g, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static inline int gk_fail(struct gk_ctx *g, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* What a launch reported (configuration, resources): 0 or its code. */
static inline int launch_rc(struct gk_ctx *g, const char *what, const char *func, const char *file, int line)
{
    return gk_cuda_rc(cudaGetLastError(), what, func, file, line, g->err, sizeof g->err);
}

/* Runs kernel over n items (nothing when n is 0: CUDA refuses empty
 * grids) on g's stream; evaluates to 0 or the launch's error code. */
#define GK_RUN(g, n, kernel, ...)                                                                                      \
    ((n) == 0 ? 0                                                                                                      \
              : (GK_LAUNCH(kernel, dim3(gk_blocks(n)), dim3(GK_THREADS), (g)->stream, __VA_ARGS__),                    \
                 launch_rc((g), "launch of " #kernel, __func__, __FILE__, __LINE__)))

#define GK_CUDA(g, stmt) CUDA_RC(stmt, (g)->err, sizeof((g)->err))

#endif
