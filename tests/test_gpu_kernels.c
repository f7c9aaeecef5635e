/* test_gpu_kernels.c - the CUDA kernels on a device (label gpu): every
 * gk_ operator of sluice_gpu (nvcc, cuBLAS) against its ops_ twin on
 * seeded random inputs (t_gpu.c, the same comparisons test_gpu_shim runs
 * on the host build): bit for bit for every non-GEMM operator, and the
 * GEMMs within (k + 2) 2^-23 S with cuBLAS in pedantic and in default
 * float math, (2^-10 + (k + 2) 2^-23) S in TF32 (S = the sum of the
 * magnitudes of the terms; t_gpu.c).
 *
 * Without a device (no driver, or no GPU) it first checks what needs
 * none - gpu/check.h's macros with the real runtime, cuBLAS and NCCL
 * error strings - then prints what it would have checked and exits 77,
 * which ctest reports as skipped. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <time.h>

#ifdef SLUICE_TEST_NCCL
#include <nccl.h>
#endif
#include "gpu/check.h"
#include "t_gpu.h"

static cudaError_t fail_alloc(void)
{
    return cudaErrorMemoryAllocation;
}

/* The return-code macros map each library's errors to -errno and name
 * the statement, the function, the file and the line; CUDA_CHECK prints
 * the same and exits 1. */
static void test_check_macros(void **state)
{
    char err[512];
    assert_int_equal(CUDA_RC(cudaSuccess, err, sizeof err), 0);
    int line = __LINE__ + 1;
    assert_int_equal(CUDA_RC(fail_alloc(), err, sizeof err), -ENOMEM);
    char where[64];
    snprintf(where, sizeof where, "test_gpu_kernels.c:%d", line);
    assert_non_null(strstr(err, "fail_alloc()"));
    assert_non_null(strstr(err, "test_check_macros"));
    assert_non_null(strstr(err, where));
    assert_non_null(strstr(err, cudaGetErrorString(cudaErrorMemoryAllocation)));
    assert_int_equal(CUDA_RC(cudaErrorInsufficientDriver, NULL, 0), -ENODEV);
    assert_int_equal(CUDA_RC(cudaErrorNoDevice, err, sizeof err), -ENODEV);
    assert_int_equal(CUDA_RC(cudaErrorInvalidValue, err, sizeof err), -EINVAL);
    assert_int_equal(CUDA_RC(cudaErrorLaunchFailure, err, sizeof err), -EIO);

    assert_int_equal(CUBLAS_RC(CUBLAS_STATUS_SUCCESS, err, sizeof err), 0);
    assert_int_equal(CUBLAS_RC(CUBLAS_STATUS_ALLOC_FAILED, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "CUBLAS_STATUS_ALLOC_FAILED"));
    assert_non_null(strstr(err, "cuBLAS"));
    assert_int_equal(CUBLAS_RC(CUBLAS_STATUS_INVALID_VALUE, err, sizeof err), -EINVAL);
    assert_int_equal(CUBLAS_RC(CUBLAS_STATUS_EXECUTION_FAILED, err, sizeof err), -EIO);
#ifdef SLUICE_TEST_NCCL
    assert_int_equal(NCCL_RC(ncclSuccess, err, sizeof err), 0);
    assert_int_equal(NCCL_RC(ncclInvalidArgument, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, ncclGetErrorString(ncclInvalidArgument)));
    assert_int_equal(NCCL_RC(ncclSystemError, err, sizeof err), -EIO);
    assert_int_equal(NCCL_RC(ncclRemoteError, err, sizeof err), -EPIPE);
#else
    printf("NCCL not found at build time: NCCL_RC/NCCL_CHECK not checked\n");
#endif

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        CUDA_CHECK(fail_alloc());
        _exit(0); /* not reached */
    }
    close(fds[1]);
    char out[1024];
    ssize_t n, len = 0;
    while ((n = read(fds[0], out + len, sizeof out - 1 - (size_t)len)) > 0)
        len += n;
    out[len] = '\0';
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    assert_non_null(strstr(out, "fail_alloc()"));
    assert_non_null(strstr(out, "test_check_macros"));
    assert_non_null(strstr(out, "test_gpu_kernels.c:"));
}

static int tf32_setup(void **state)
{
    t_gpu_math = GK_MATH_TF32;
    return t_gpu_setup(state);
}

static int fp32_setup(void **state)
{
    t_gpu_math = GK_MATH_FP32;
    return t_gpu_setup(state);
}

int main(void)
{
    const char *seed = getenv("SLUICE_TEST_SEED");
    t_gpu_seed = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "test_gpu_kernels: seed %#" PRIx64 " (SLUICE_TEST_SEED to repeat)\n", t_gpu_seed);
    const struct CMUnitTest macros[] = {cmocka_unit_test(test_check_macros)};
    if (cmocka_run_group_tests_name("check macros", macros, NULL, NULL))
        return 1;

    int n = 0;
    char err[320] = "";
    if (gk_device_count(&n, err, sizeof err) != 0 || n == 0) {
        printf("test_gpu_kernels: SKIPPED: no CUDA device (%s).\n"
               "On a device it runs every CUDA kernel against its CPU twin on seeded random inputs and expects\n"
               "the same bits for: zero, copy, scale, bias fwd/bwd, relu fwd/bwd, dropout fwd/bwd (and the mask),\n"
               "f16 to f32 over all halves, row gathers (f16 and f32, padded strides), sum/mean aggregation\n"
               "fwd/bwd, GCN norm (and degrees) fwd/bwd, GAT scores fwd/bwd, edge logits fwd/bwd, edge softmax\n"
               "fwd/bwd, attention-weighted sums fwd/bwd, head mean fwd/bwd, cross-entropy (loss, counts,\n"
               "gradient), Adam and SGD; over empty and odd-sized blocks. GEMMs (all four transposes, strides,\n"
               "beta 0 over NaN, k = 0) and the linear layers through cuBLAS within (k + 2) 2^-23 of the sum of\n"
               "term magnitudes in pedantic and default math, 2^-10 more in TF32; the error paths of the API.\n",
               n == 0 && !err[0] ? "the runtime reports 0 devices" : err);
        return 77;
    }
    printf("test_gpu_kernels: %d CUDA device(s)\n", n);
    const struct CMUnitTest ops[] = {
        cmocka_unit_test(t_gpu_transpose), cmocka_unit_test(t_gpu_plain), cmocka_unit_test(t_gpu_gemm),
        cmocka_unit_test(t_gpu_bias),      cmocka_unit_test(t_gpu_act),   cmocka_unit_test(t_gpu_rows),
        cmocka_unit_test(t_gpu_agg),       cmocka_unit_test(t_gpu_gcn),   cmocka_unit_test(t_gpu_gat),
        cmocka_unit_test(t_gpu_loss),      cmocka_unit_test(t_gpu_optim), cmocka_unit_test(t_gpu_errors),
        cmocka_unit_test(t_gpu_async),
    };
    const struct CMUnitTest gemm[] = {cmocka_unit_test(t_gpu_gemm)};
    int failed = cmocka_run_group_tests_name("kernels (cuBLAS pedantic)", ops, t_gpu_setup, t_gpu_teardown);
    failed += cmocka_run_group_tests_name("GEMM (cuBLAS default float math)", gemm, fp32_setup, t_gpu_teardown);
    failed += cmocka_run_group_tests_name("GEMM (cuBLAS TF32)", gemm, tf32_setup, t_gpu_teardown);
    printf("compared %" PRIu64 " values bit for bit and %" PRIu64 " GEMM values within tolerance\n", t_gpu_exact,
           t_gpu_tol);
    return failed ? 1 : 0;
}
