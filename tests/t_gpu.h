/* t_gpu.h - the comparisons of the gk_ operators (gpu/kernels.h) with
 * their CPU twins (ops/ops.h), shared by test_gpu_shim (the kernels built
 * as host code, sluice_gpu_shim) and test_gpu_kernels (on a device,
 * sluice_gpu): the same test functions linked against either build. */
#ifndef SLUICE_T_GPU_H
#define SLUICE_T_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/kernels.h"

/* Set by the test's main before the tests run. */
extern uint64_t t_gpu_seed;
/* The GEMM math the tests' context uses, and the tolerance factor that
 * goes with it (t_gpu.c, "GEMM tolerance"). */
extern enum gk_math t_gpu_math;

/* cmocka group setup and teardown: a context in t_gpu_math. */
int t_gpu_setup(void **state);
int t_gpu_teardown(void **state);

/* Each compares gk_ with ops_ over several shapes (odd sizes, empty
 * blocks and rows, destinations without edges, repeated sources):
 * memcmp-exact except the GEMMs. */
void t_gpu_plain(void **state);     /* zero, copy, scale, any_nonfinite */
void t_gpu_gemm(void **state);      /* gemm (4 transposes, strides, beta 0 over NaN, k = 0), linear_* */
void t_gpu_bias(void **state);      /* bias fwd/bwd */
void t_gpu_act(void **state);       /* relu and elu fwd/bwd, dropout fwd/bwd and mask */
void t_gpu_rows(void **state);      /* gather f16/f32 by alias with a stride, f16 to f32 over all halves */
void t_gpu_agg(void **state);       /* sum and mean fwd/bwd */
void t_gpu_gcn(void **state);       /* norm (and degrees), fwd, bwd */
void t_gpu_gat(void **state);       /* score, edge, softmax, sum, head mean: fwd and bwd */
void t_gpu_loss(void **state);      /* cross-entropy: loss, counts, gradient */
void t_gpu_optim(void **state);     /* adam, sgd */
void t_gpu_transpose(void **state); /* gk_block_transpose_host against a brute force; bad blocks */
void t_gpu_errors(void **state);    /* missing transpose, oversized GEMM, failed allocation */
void t_gpu_async(void **state);     /* device selection, page-locked memory, events, ordered asynchronous uploads */

/* How many values the comparisons checked so far (exact, within
 * tolerance). */
extern uint64_t t_gpu_exact, t_gpu_tol;

#endif
