/* test_gpu_shim.c - the CUDA kernels without a GPU (label cpu): every
 * gk_ operator of sluice_gpu_shim (gpu/kernels.cu compiled as host C++
 * through gpu/shim.h, each launch run as loops over blocks and threads on
 * host memory) against its ops_ twin on seeded random inputs (t_gpu.c):
 * bit for bit for every non-GEMM operator, within the stated tolerance
 * for the GEMMs (which here are ops_gemm itself, so that check matters on
 * a device, test_gpu_kernels). This is how CI checks the kernels' index
 * arithmetic and summation order: the device build compiles the same
 * source. Everything runs twice, the second time with every launch's
 * blocks and threads in reverse order, which changes nothing unless a
 * thread reads what another writes. Under AddressSanitizer (the asan
 * build) any index past an array is caught, as device pointers are heap
 * memory here.
 *
 * Also: ops/elem.h's exp and log against glibc over sweeps (the stated
 * bound: 1 ulp for elem_exp, elem_log and elem_expf), their special
 * values, and elem.h's generator and half conversion against core/'s. */
#include "t_util.h"

#include <inttypes.h>
#include <math.h>
#include <time.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ops/elem.h"
#include "t_gpu.h"

/* gk_malloc's failure test asks for 2^62 bytes: malloc must say no rather
 * than the sanitizer abort (asan and tsan builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "allocator_may_return_null=1";
}

#define ULP_BOUND 1 /* elem_exp, elem_log, elem_expf against glibc */

/* Floats and doubles mapped to integers in the same order, so that the
 * difference counts the representable values between two results. */
static int64_t ord64(double d)
{
    int64_t i;
    memcpy(&i, &d, sizeof i);
    return i < 0 ? INT64_MIN - i : i;
}

static int64_t ord32(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}

struct ulp_worst {
    int64_t ulps;
    double at;
    long n;
};

static void ulp_d(struct ulp_worst *w, double x, double got, double want)
{
    int64_t u = llabs(ord64(got) - ord64(want));
    if (isnan(want) != isnan(got))
        u = INT64_MAX;
    else if (isnan(want))
        u = 0;
    if (u > w->ulps)
        w->ulps = u, w->at = x;
    w->n++;
}

static void test_exp_log_sweep(void **state)
{
    uint64_t rng = t_gpu_seed;
    struct ulp_worst we = {0}, wl = {0}, wf = {0};
    /* exp over its whole range, near 0, and on a grid of multiples of ln 2 / 2 (the reduction's edges) */
    for (long i = 0; i < 3000000; i++) {
        double u = (double)(sl_splitmix64(&rng) >> 11) * 0x1p-53;
        double x = i % 3 == 0 ? -746.0 + u * 1456.0 : i % 3 == 1 ? (u - 0.5) * 4.0 : (u - 0.5) * 1e-9;
        ulp_d(&we, x, elem_exp(x), exp(x));
    }
    for (int k = -2150; k <= 2050; k++) {
        double x = k * 0.34657359027997264;
        ulp_d(&we, x, elem_exp(x), exp(x));
        ulp_d(&we, nextafter(x, 0), elem_exp(nextafter(x, 0)), exp(nextafter(x, 0)));
    }
    /* log over every exponent (subnormals too), near 1, and around sqrt(2) (the reduction's edge) */
    for (long i = 0; i < 3000000; i++) {
        uint64_t bits = sl_splitmix64(&rng) & 0x7fefffffffffffffull; /* positive, finite */
        double x;
        memcpy(&x, &bits, sizeof x);
        double u = (double)(sl_splitmix64(&rng) >> 11) * 0x1p-53;
        if (i % 3 == 1)
            x = 1.0 + (u - 0.5) * 0x1p-10;
        else if (i % 3 == 2)
            x = ldexp(M_SQRT2 + (u - 0.5) * 1e-6, (int)(sl_splitmix64(&rng) % 200) - 100);
        if (x > 0)
            ulp_d(&wl, x, elem_log(x), log(x));
    }
    /* expf: every 211th float bit pattern (both signs, all exponents) */
    for (uint64_t b = 0; b < (1ull << 32); b += 211) {
        uint32_t bits = (uint32_t)b;
        float x;
        memcpy(&x, &bits, sizeof x);
        if (isnan(x))
            continue;
        float got = elem_expf(x), want = expf(x);
        int64_t u = llabs(ord32(got) - ord32(want));
        if (u > wf.ulps)
            wf.ulps = u, wf.at = x;
        wf.n++;
    }
    printf("elem_exp: worst %" PRId64 " ulp (at %a) over %ld values\n", we.ulps, we.at, we.n);
    printf("elem_log: worst %" PRId64 " ulp (at %a) over %ld values\n", wl.ulps, wl.at, wl.n);
    printf("elem_expf: worst %" PRId64 " ulp (at %a) over %ld values\n", wf.ulps, wf.at, wf.n);
    if (we.ulps > ULP_BOUND || wl.ulps > ULP_BOUND || wf.ulps > ULP_BOUND)
        fail_msg("exp/log past %d ulp of glibc: exp %" PRId64 " at %a, log %" PRId64 " at %a, expf %" PRId64 " at %a",
                 ULP_BOUND, we.ulps, we.at, wl.ulps, wl.at, wf.ulps, wf.at);

    /* special values: what the softmaxes can meet, and the edges of the ranges */
    assert_true(elem_exp(0.0) == 1.0 && elem_exp(-0.0) == 1.0);
    assert_true(isinf(elem_exp(INFINITY)) && elem_exp(INFINITY) > 0);
    assert_true(elem_exp(-INFINITY) == 0.0);
    assert_true(isnan(elem_exp(NAN)));
    assert_true(elem_exp(709.782712893384) == exp(709.782712893384)); /* the largest finite result */
    assert_true(isinf(elem_exp(709.7827128933841)) && isinf(elem_exp(1000.0)));
    assert_true(elem_exp(-745.13) == 0x1p-1074 && elem_exp(-745.14) == 0.0 && elem_exp(-1e300) == 0.0);
    assert_true(elem_expf(0.0f) == 1.0f && elem_expf(-INFINITY) == 0.0f && isinf(elem_expf(89.0f)));
    assert_true(elem_expf(-104.0f) == 0.0f && isnan(elem_expf(NAN)));
    assert_true(elem_log(1.0) == 0.0 && elem_log(0.0) == -INFINITY && elem_log(-0.0) == -INFINITY);
    assert_true(isnan(elem_log(-1.0)) && isnan(elem_log(-INFINITY)) && isnan(elem_log(NAN)));
    assert_true(elem_log(INFINITY) == INFINITY);
    assert_true(elem_log(0x1p-1074) == log(0x1p-1074) && elem_log(0x1p-1022) == log(0x1p-1022));
    assert_true(elem_log(2.0) == log(2.0) && elem_log(0x1.fffffffffffffp+1023) == log(0x1.fffffffffffffp+1023));
}

/* elem.h's splitmix64 is core/util.h's, drawn by counter; its half
 * conversion is core/dataset.h's. */
static void test_elem_vs_core(void **state)
{
    uint64_t rng = t_gpu_seed;
    for (int i = 0; i < 100000; i++) {
        uint64_t z = sl_splitmix64(&rng);
        assert_true(elem_mix64(z) == sl_mix64(z));
    }
    for (int s = 0; s < 20; s++) {
        uint64_t seed = sl_splitmix64(&rng), st = seed;
        for (uint64_t j = 0; j < 1000; j++)
            assert_true(elem_splitmix_at(seed, j) == sl_splitmix64(&st));
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float a = elem_f16_to_f32((uint16_t)h), b = half_to_f32((uint16_t)h);
        assert_true(isnan(a) ? isnan(b) : memcmp(&a, &b, sizeof a) == 0);
    }
}

static int reverse_setup(void **state)
{
    gk_shim_set_reverse(true);
    return t_gpu_setup(state);
}

static int reverse_teardown(void **state)
{
    gk_shim_set_reverse(false);
    return t_gpu_teardown(state);
}

#define T_GPU_TESTS                                                                                                    \
    cmocka_unit_test(t_gpu_transpose), cmocka_unit_test(t_gpu_plain), cmocka_unit_test(t_gpu_gemm),                    \
        cmocka_unit_test(t_gpu_bias), cmocka_unit_test(t_gpu_act), cmocka_unit_test(t_gpu_rows),                       \
        cmocka_unit_test(t_gpu_agg), cmocka_unit_test(t_gpu_gcn), cmocka_unit_test(t_gpu_gat),                         \
        cmocka_unit_test(t_gpu_loss), cmocka_unit_test(t_gpu_optim), cmocka_unit_test(t_gpu_errors),                   \
        cmocka_unit_test(t_gpu_async)

int main(void)
{
    const char *seed = getenv("SLUICE_TEST_SEED");
    t_gpu_seed = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "test_gpu_shim: seed %#" PRIx64 " (SLUICE_TEST_SEED to repeat)\n", t_gpu_seed);
    const struct CMUnitTest elem[] = {
        cmocka_unit_test(test_exp_log_sweep),
        cmocka_unit_test(test_elem_vs_core),
    };
    const struct CMUnitTest ops[] = {T_GPU_TESTS};
    int failed = cmocka_run_group_tests_name("elem", elem, NULL, NULL);
    failed += cmocka_run_group_tests_name("kernels, launches in order", ops, t_gpu_setup, t_gpu_teardown);
    failed += cmocka_run_group_tests_name("kernels, launches reversed", ops, reverse_setup, reverse_teardown);
    printf("compared %" PRIu64 " values bit for bit and %" PRIu64 " GEMM values within tolerance\n", t_gpu_exact,
           t_gpu_tol);
    return failed ? 1 : 0;
}
