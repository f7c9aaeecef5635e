/* shim.h - what a kernel source needs, so that the kernel sources are written
 * once and compiles two ways (docs/gpu.md, "Kernels"):
 *
 * - under nvcc (__CUDACC__): the real thing. <cuda_runtime.h>, and
 *   GK_LAUNCH(kernel, grid, block, stream, args...) is
 *   kernel<<<grid, block, 0, stream>>>(args...).
 * - as host C++ with GK_SHIM defined (the sluice_gpu_shim library): an
 *   emulation. __global__, __device__, __host__ are empty; dim3,
 *   blockIdx, threadIdx, blockDim and gridDim are thread-local variables;
 *   GK_LAUNCH runs the kernel body once per block and thread, in loops
 *   (blocks in order, threads in order, or both reversed: gk_shim_reverse),
 *   and checks the launch configuration as CUDA does (a zero dimension or
 *   more than 1024 threads per block fail with
 *   cudaErrorInvalidConfiguration, reported by cudaGetLastError). The small
 *   subset of the runtime API that the kernel sources call (cudaMalloc, cudaFree,
 *   cudaMemcpyAsync, cudaMemsetAsync, streams, events, page-locked host
 *   memory, errors, device count and selection) works
 *   on host memory: "device" pointers are aligned host allocations, so
 *   AddressSanitizer sees every out-of-bounds index of a kernel.
 *
 * The emulation is exact only for kernels whose threads do not talk to
 * each other: no shared memory, no __syncthreads, no atomics, no warp
 * intrinsics. gpu/ has none (each thread computes its own outputs),
 * and running the threads in either order checks that no thread reads what
 * another writes (tests/test_gpu_shim.c).
 *
 * The runtime part is C-compatible (a C file compiled with GK_SHIM, like
 * gpu/check.h's users in the shim build, may include it); the launch part
 * is C++. */
#ifndef SLUICE_GPU_SHIM_H
#define SLUICE_GPU_SHIM_H

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#define GK_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (cudaStream_t)(stream)>>>(__VA_ARGS__)

#elif defined(GK_SHIM)

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define __global__
#define __device__
#define __host__

/* The runtime API subset, on host memory. */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

typedef struct gk_shim_stream *cudaStream_t; /* never dereferenced: work runs when queued */
#define cudaStreamDefault 0x00u
#define cudaStreamNonBlocking 0x01u

/* The last error of this thread, as the runtime keeps it. */
static inline cudaError_t *gk_shim_last_error(void)
{
#ifdef __cplusplus
    static thread_local cudaError_t e = cudaSuccess;
#else
    static _Thread_local cudaError_t e = cudaSuccess;
#endif
    return &e;
}

static inline cudaError_t gk_shim_fail(cudaError_t e)
{
    *gk_shim_last_error() = e;
    return e;
}

static inline cudaError_t cudaGetLastError(void)
{
    cudaError_t e = *gk_shim_last_error();
    *gk_shim_last_error() = cudaSuccess;
    return e;
}

static inline const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    }
    return "cudaErrorUnknown";
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    }
    return "unknown error";
}

/* The host is the one "device". */
static inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

/* Device 0 is the only one. */
static inline cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : gk_shim_fail(cudaErrorInvalidDevice);
}

/* 256-byte aligned like cudaMalloc, exactly `bytes` long (so that
 * AddressSanitizer flags the first byte past the end); 0 bytes gives NULL. */
static inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    if (bytes == 0)
        return cudaSuccess;
    if (posix_memalign(p, 256, bytes) != 0) {
        *p = NULL;
        return gk_shim_fail(cudaErrorMemoryAllocation);
    }
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                                          cudaStream_t s)
{
    (void)kind;
    (void)s;
    if (bytes && (!dst || !src))
        return gk_shim_fail(cudaErrorInvalidValue);
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

static inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s)
{
    (void)s;
    if (bytes && !dst)
        return gk_shim_fail(cudaErrorInvalidValue);
    if (bytes)
        memset(dst, value, bytes);
    return cudaSuccess;
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)(uintptr_t)1; /* any non-NULL value: nothing is queued */
    return cudaSuccess;
}

static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

/* Page-locked host memory is host memory. */
#define cudaHostAllocDefault 0x00u
static inline cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cudaMalloc(p, bytes);
}

static inline cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

/* Events: work has run when it is queued, so every event has completed. */
typedef struct gk_shim_event *cudaEvent_t; /* never dereferenced */
#define cudaEventDefault 0x00u
#define cudaEventDisableTiming 0x02u

static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = (cudaEvent_t)(uintptr_t)1;
    return cudaSuccess;
}

static inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)s;
    return e ? cudaSuccess : gk_shim_fail(cudaErrorInvalidValue);
}

static inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    return e ? cudaSuccess : gk_shim_fail(cudaErrorInvalidValue);
}

static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s;
    (void)flags;
    return e ? cudaSuccess : gk_shim_fail(cudaErrorInvalidValue);
}

#ifdef __cplusplus

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

/* What a running kernel body reads; set by gk_shim_launch. */
inline thread_local uint3 blockIdx, threadIdx;
inline thread_local dim3 blockDim, gridDim;

/* Launch order: false runs blocks and threads from 0 up, true from the
 * last down. A kernel whose threads only write their own outputs gives
 * the same results either way. */
inline bool gk_shim_reverse = false;

/* The loops a launch becomes: the body once per (block, thread). */
template <class Body> inline void gk_shim_launch(dim3 grid, dim3 block, Body &&body)
{
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
        (unsigned long long)block.x * block.y * block.z > 1024) {
        gk_shim_fail(cudaErrorInvalidConfiguration);
        return;
    }
    gridDim = grid;
    blockDim = block;
    unsigned long long nb = (unsigned long long)grid.x * grid.y * grid.z;
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    for (unsigned long long b = 0; b < nb; b++) {
        unsigned long long bi = gk_shim_reverse ? nb - 1 - b : b;
        blockIdx = uint3{(unsigned)(bi % grid.x), (unsigned)(bi / grid.x % grid.y), (unsigned)(bi / grid.x / grid.y)};
        for (unsigned long long t = 0; t < nt; t++) {
            unsigned long long ti = gk_shim_reverse ? nt - 1 - t : t;
            threadIdx =
                uint3{(unsigned)(ti % block.x), (unsigned)(ti / block.x % block.y), (unsigned)(ti / block.x / block.y)};
            body();
        }
    }
}

#define GK_LAUNCH(kernel, grid, block, stream, ...)                                                                    \
    ((void)(stream), gk_shim_launch((grid), (block), [&]() { kernel(__VA_ARGS__); }))

#endif /* __cplusplus */

#else
#error "gpu/shim.h: compile with nvcc, or define GK_SHIM for the host emulation (the sluice_gpu_shim library)"
#endif

#endif
