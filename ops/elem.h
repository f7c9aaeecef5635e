/* elem.h - the per-element bodies that the CPU operators (ops/ops.c) and
 * their CUDA twins (gpu/kernels.cu) share, so that both sides compute
 * every value with the same sequence of IEEE operations and agree bit for
 * bit: ReLU, LeakyReLU, the dropout keep bit, half to float, the 8-lane
 * dot product, the edge softmax of one destination and head, the
 * cross-entropy of one row, the Adam and SGD updates, GCN's norm, and
 * exp and log of our own (below).
 *
 * Compiles as C17 (ops.c), as host C++ (the kernels' shim build) and as
 * CUDA C++ (nvcc), where every ELEM_FN function is __host__ __device__.
 * Functions without ELEM_FN are host-only (they call pow or nearbyint):
 * their results reach a kernel as arguments.
 *
 * Bit-identical results need the same operations in the same order on
 * both sides: no contraction of a * b + c into a fused multiply-add (C17
 * and C++17 without GNU extensions do not contract; nvcc gets
 * -fmad=false), IEEE division and square root (nvcc's -prec-div=true
 * -prec-sqrt=true, its defaults), subnormals kept (no -ffast-math, no
 * -ftz=true).
 *
 * exp and log. The C library's exp/expf/log and CUDA's differ in their
 * last bits, so neither is used: elem_exp and elem_log are a Cody-Waite
 * range reduction and a polynomial in double, elem_expf rounds elem_exp
 * to float. tests/test_gpu_shim.c sweeps them against glibc: elem_exp
 * and elem_log within 1 ulp, elem_expf within 1 ulp of expf. */
#ifndef SLUICE_OPS_ELEM_H
#define SLUICE_OPS_ELEM_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ELEM_HD __host__ __device__
#else
#define ELEM_HD
#endif
#define ELEM_FN static inline ELEM_HD

#ifdef __cplusplus
#define ELEM_RESTRICT __restrict__
#else
#define ELEM_RESTRICT restrict
#endif

/* ---- bit casts ----------------------------------------------------------------------------------- */

ELEM_FN uint32_t elem_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

ELEM_FN float elem_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

ELEM_FN uint64_t elem_f64_bits(double d)
{
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
#endif
}

ELEM_FN double elem_bits_f64(uint64_t u)
{
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}

/* ---- exp and log ------------------------------------------------------------------------------------ */

/* ln 2 split in two: ELEM_LN2_HI has 42 significant bits, so k * HI is
 * exact for |k| < 2^11, and HI + LO is ln 2 to about 2^-95. */
#define ELEM_LN2_HI 0x1.62e42fefa3800p-1
#define ELEM_LN2_LO 0x1.ef35793c76730p-45
#define ELEM_LOG2E 0x1.71547652b82fep+0

/* 2^k as a double for -1022 <= k <= 1023. */
ELEM_FN double elem_pow2i(int k)
{
    return elem_bits_f64((uint64_t)(k + 1023) << 52);
}

/* e^x in double, within 1 ulp. x = k ln2 + r with k = round(x / ln 2)
 * (the 1.5 * 2^52 shift rounds to nearest without a library call) and
 * |r| <= ln2 / 2, r computed exactly in its first part (Sterbenz); e^r
 * = 1 + (r + r^2 Q(r)), Q the Taylor series from 1/2! to 1/13! (the
 * first term left out is below 2^-57 relative) by Horner; then times 2^k,
 * in two steps where 2^k is not a normal double (one rounding only). */
ELEM_FN double elem_exp(double x)
{
    if (!(x < 710.0)) /* +inf, NaN and every overflow */
        return x > 0.0 ? elem_bits_f64(0x7ff0000000000000ull) : x + x;
    if (x < -746.0) /* below half the smallest subnormal, -inf */
        return 0.0;
    const double shift = 0x1.8p52;
    double kd = (x * ELEM_LOG2E + shift) - shift;
    int k = (int)kd;
    double r = (x - kd * ELEM_LN2_HI) - kd * ELEM_LN2_LO;
    double q = 0x1.6124613a86d09p-33;  /* 1/13! */
    q = q * r + 0x1.1eed8eff8d898p-29; /* 1/12! */
    q = q * r + 0x1.ae64567f544e4p-26; /* 1/11! */
    q = q * r + 0x1.27e4fb7789f5cp-22; /* 1/10! */
    q = q * r + 0x1.71de3a556c734p-19; /* 1/9! */
    q = q * r + 0x1.a01a01a01a01ap-16; /* 1/8! */
    q = q * r + 0x1.a01a01a01a01ap-13; /* 1/7! */
    q = q * r + 0x1.6c16c16c16c17p-10; /* 1/6! */
    q = q * r + 0x1.1111111111111p-7;  /* 1/5! */
    q = q * r + 0x1.5555555555555p-5;  /* 1/4! */
    q = q * r + 0x1.5555555555555p-3;  /* 1/3! */
    q = q * r + 0x1p-1;                /* 1/2! */
    double p = 1.0 + (r + r * r * q);
    if (k > 1023)
        return p * elem_pow2i(1023) * 2.0; /* k = 1024: overflows to inf past DBL_MAX */
    if (k < -1022)
        return p * elem_pow2i(k + 54) * 0x1p-54; /* exact, then the one rounding to a subnormal */
    return p * elem_pow2i(k);
}

/* e^x in float: elem_exp rounded, within 1 ulp of a correctly rounded expf. */
ELEM_FN float elem_expf(float x)
{
    return (float)elem_exp((double)x);
}

/* ln x in double, within 1 ulp. x = m 2^e with m in [sqrt(1/2), sqrt(2)),
 * f = m - 1 (exact), s = f / (2 + f); ln(1 + f) = 2 atanh(s) = f - f^2/2
 * + s (f^2/2 + R), R = sum over n >= 1 of 2 s^2n / (2n + 1) (n <= 10: the
 * rest is below 2^-60 relative), with the small correction terms added
 * to f last; then e ln 2 in two parts. */
ELEM_FN double elem_log(double x)
{
    uint64_t u = elem_f64_bits(x);
    if (x != x || x < 0.0) /* NaN in, or out of the domain */
        return x != x ? x + x : elem_bits_f64(0x7ff8000000000000ull);
    if (x == 0.0)
        return -elem_bits_f64(0x7ff0000000000000ull);
    if (u >= 0x7ff0000000000000ull) /* +inf */
        return x;
    int e = 0;
    if (u < 0x0010000000000000ull) { /* subnormal: make it normal, exactly */
        u = elem_f64_bits(x * 0x1p54);
        e = -54;
    }
    e += (int)(u >> 52) - 1023;
    u &= 0x000fffffffffffffull;
    if (u > 0x6a09e667f3bcdull) { /* m > sqrt(2): halve it */
        u |= 0x3fe0000000000000ull;
        e += 1;
    } else {
        u |= 0x3ff0000000000000ull;
    }
    double f = elem_bits_f64(u) - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double R = 0x1.8618618618618p-4;  /* 2/21 */
    R = R * z + 0x1.af286bca1af28p-4; /* 2/19 */
    R = R * z + 0x1.e1e1e1e1e1e1ep-4; /* 2/17 */
    R = R * z + 0x1.1111111111111p-3; /* 2/15 */
    R = R * z + 0x1.3b13b13b13b14p-3; /* 2/13 */
    R = R * z + 0x1.745d1745d1746p-3; /* 2/11 */
    R = R * z + 0x1.c71c71c71c71cp-3; /* 2/9 */
    R = R * z + 0x1.2492492492492p-2; /* 2/7 */
    R = R * z + 0x1.999999999999ap-2; /* 2/5 */
    R = R * z + 0x1.5555555555555p-1; /* 2/3 */
    R = R * z;
    double hfsq = 0.5 * f * f;
    double ed = (double)e;
    return ed * ELEM_LN2_HI - ((hfsq - (s * (hfsq + R) + ed * ELEM_LN2_LO)) - f);
}

/* ---- activations ------------------------------------------------------------------------------------- */

/* max(x, 0); NaN passes through, -0 stays -0. */
ELEM_FN float elem_relu(float x)
{
    return x < 0.0f ? 0.0f : x;
}

/* The gradient dx where the forward gave y. */
ELEM_FN float elem_relu_bwd(float dx, float y)
{
    return y > 0.0f ? dx : 0.0f;
}

/* ELU (alpha = 1): x for x > 0, else exp(x) - 1 (elem_expf, so both
 * sides agree); NaN passes through. */
ELEM_FN float elem_elu(float x)
{
    return x > 0.0f ? x : x <= 0.0f ? elem_expf(x) - 1.0f : x;
}

/* The gradient dx where the forward gave y: dx for y > 0, else dx (y + 1)
 * (= dx exp(x), as torch's elu_backward from the result). A NaN y passes
 * through as it is, like the forward: arithmetic on a NaN would give the
 * operand's payload on x86 but the canonical NaN on a GPU, and the two
 * sides must agree bit for bit. */
ELEM_FN float elem_elu_bwd(float dx, float y)
{
    return y > 0.0f ? dx : y <= 0.0f ? dx * (y + 1.0f) : y;
}

ELEM_FN float elem_leaky(float x, float slope)
{
    return x < 0.0f ? slope * x : x;
}

/* The gradient g of LeakyReLU at its input x. */
ELEM_FN float elem_leaky_bwd(float g, float x, float slope)
{
    return x < 0.0f ? slope * g : g;
}

/* ---- dropout ----------------------------------------------------------------------------------------- */

/* SplitMix64's finaliser (core/util.h's sl_mix64; tests/test_gpu_shim.c
 * checks they agree). */
ELEM_FN uint64_t elem_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Output j (from 0) of the SplitMix64 stream seeded with seed: what the
 * (j + 1)-th sl_splitmix64 call on a state of seed returns. Counter-based,
 * so any thread can draw any output. */
ELEM_FN uint64_t elem_splitmix_at(uint64_t seed, uint64_t j)
{
    return elem_mix64(seed + (j + 1) * 0x9E3779B97F4A7C15ull);
}

/* The drop threshold on 32 random bits: round(p * 2^32), p in [0, 1).
 * Host only. */
static inline uint64_t elem_dropout_thr(float p)
{
    double t = nearbyint((double)p * 4294967296.0);
    return t <= 0 ? 0 : t >= 4294967296.0 ? 4294967296ull : (uint64_t)t;
}

/* Whether dropout keeps element 2j + half (half 0 or 1) given draw r =
 * elem_splitmix_at(seed, j): its 32 bits (low for 2j, high for 2j + 1)
 * are at least thr. */
ELEM_FN bool elem_dropout_keep(uint64_t r, unsigned half, uint64_t thr)
{
    return (half ? r >> 32 : r & 0xffffffffu) >= thr;
}

/* x times scale if kept, else times 0 (so NaN and inf stay NaN). */
ELEM_FN float elem_dropout_apply(float x, bool keep, float scale)
{
    return x * (keep ? scale : 0.0f);
}

/* ---- feature rows ------------------------------------------------------------------------------------ */

/* IEEE half to float, exactly, without branches: the 15 exponent and
 * mantissa bits shifted up by 13 sit where a float keeps them, and the
 * product with 2^112 moves the exponent bias from 15 to 127 - subnormal
 * halves included (they land on float subnormals, which the product makes
 * normal). Inf and NaN (exponent 31) get the all-ones exponent with the
 * mantissa kept. Needs subnormals honoured. */
ELEM_FN float elem_f16_to_f32(uint16_t h)
{
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t bits = elem_f32_bits(elem_bits_f32(em) * 0x1p112f);
    uint32_t special = 0u - (uint32_t)(em >= (0x7c00u << 13)); /* all ones for inf and NaN */
    bits = (bits & ~special) | ((em | 0x7f800000u) & special);
    bits |= (uint32_t)(h & 0x8000u) << 16;
    return elem_bits_f32(bits);
}

/* ---- reductions of one output -------------------------------------------------------------------------- */

/* x . y (n) in 8 partial sums (lane q takes elements q, q + 8, ...), the
 * tail into lanes 0 .. n%8 - 1, then a fixed tree: the same order on
 * every run, thread count and device. */
ELEM_FN float elem_dot(const float *ELEM_RESTRICT x, const float *ELEM_RESTRICT y, uint32_t n)
{
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t q = 0; q < 8; q++)
            acc[q] += x[i + q] * y[i + q];
    for (uint32_t q = 0; q < 8; q++)
        if (i + q < n)
            acc[q] += x[i + q] * y[i + q];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* GCN's 1 / sqrt(1 + deg), in double, rounded to float. */
ELEM_FN float elem_gcn_norm(uint32_t deg)
{
    return (float)(1.0 / sqrt(1.0 + (double)deg));
}

/* Edge softmax of one destination and head, in place: e points at the
 * head's column of the edge logits (edge j's at e[j * heads]), self at the
 * self loop's; edges j0 .. j1-1. Subtracts the maximum, exponentiates,
 * sums self first then the edges in order, and multiplies by 1 / sum. */
ELEM_FN void elem_softmax_fwd(float *ELEM_RESTRICT e, float *ELEM_RESTRICT self, uint32_t j0, uint32_t j1,
                              uint32_t heads)
{
    float mx = *self;
    for (uint32_t j = j0; j < j1; j++) {
        float ej = e[(size_t)j * heads];
        mx = ej > mx ? ej : mx;
    }
    float es = elem_expf(*self - mx);
    float sum = es;
    for (uint32_t j = j0; j < j1; j++) {
        float ej = elem_expf(e[(size_t)j * heads] - mx);
        e[(size_t)j * heads] = ej;
        sum += ej;
    }
    float inv = 1.0f / sum;
    *self = es * inv;
    for (uint32_t j = j0; j < j1; j++)
        e[(size_t)j * heads] *= inv;
}

/* Its backward for the same destination and head, in place on the weight
 * gradients g (edge j's at g[j * heads]) and gself: g = a (g - sum a g),
 * the sum self first then the edges in order. */
ELEM_FN void elem_softmax_bwd(float *ELEM_RESTRICT g, float *ELEM_RESTRICT gself, const float *ELEM_RESTRICT a,
                              const float *ELEM_RESTRICT aself, uint32_t j0, uint32_t j1, uint32_t heads)
{
    float dot = *aself * *gself;
    for (uint32_t j = j0; j < j1; j++)
        dot += a[(size_t)j * heads] * g[(size_t)j * heads];
    *gself = *aself * (*gself - dot);
    for (uint32_t j = j0; j < j1; j++)
        g[(size_t)j * heads] = a[(size_t)j * heads] * (g[(size_t)j * heads] - dot);
}

/* Cross-entropy of one row x (classes >= 1): *arg gets the first index of
 * the largest logit; returns log(sum_c e^x_c) in double, the maximum
 * subtracted first and the sum in class order. */
ELEM_FN double elem_ce_lse(const float *x, uint32_t classes, uint32_t *arg)
{
    uint32_t a = 0;
    for (uint32_t c = 1; c < classes; c++)
        if (x[c] > x[a])
            a = c;
    double mx = x[a], s = 0.0;
    for (uint32_t c = 0; c < classes; c++)
        s += elem_exp((double)x[c] - mx);
    *arg = a;
    return mx + elem_log(s);
}

/* The loss gradient of logit xc of a labelled row: (softmax - onehot) /
 * labelled, from the row's lse. */
ELEM_FN float elem_ce_grad(float xc, double lse, bool is_label, uint32_t labelled)
{
    return (float)((elem_exp((double)xc - lse) - (double)is_label) / (double)labelled);
}

/* ---- optimizers -------------------------------------------------------------------------------------- */

/* The per-step constants of an Adam update: the bias corrections in
 * double, folded into the step and the divisor of sqrt(v); weight decay
 * as torch.optim.Adam (l2: g += wd p) or torch.optim.AdamW (keep: p *=
 * 1 - lr wd, before the update). */
struct elem_adam {
    float step;                /* lr / (1 - b1^t) */
    float sbc2;                /* sqrt(1 - b2^t) */
    float b1, b2, c1, c2, eps; /* c1 = 1 - b1, c2 = 1 - b2 */
    float l2;                  /* Adam's weight decay (0: none) */
    float keep;                /* AdamW's 1 - lr wd (1: none) */
};

/* Host only (pow). wd >= 0; decoupled: AdamW's form. */
static inline struct elem_adam elem_adam_prep(float lr, float b1, float b2, float eps, float wd, bool decoupled,
                                              uint64_t t)
{
    double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
    struct elem_adam c = {(float)((double)lr / bc1),
                          (float)sqrt(bc2),
                          b1,
                          b2,
                          1.0f - b1,
                          1.0f - b2,
                          eps,
                          decoupled ? 0.0f : wd,
                          decoupled ? (float)(1.0 - (double)lr * (double)wd) : 1.0f};
    return c;
}

/* One parameter's Adam update: g += l2 p (when l2 is not 0), p *= keep
 * (when keep is not 1), then m = b1 m + c1 g, v = b2 v + c2 g^2,
 * p -= step m / (sqrt(v) / sbc2 + eps). Without weight decay the bits are
 * those of the plain update. */
ELEM_FN void elem_adam_update(float *ELEM_RESTRICT p, float *ELEM_RESTRICT m, float *ELEM_RESTRICT v, float g,
                              const struct elem_adam *c)
{
    if (c->l2 != 0.0f)
        g += c->l2 * *p;
    if (c->keep != 1.0f)
        *p *= c->keep;
    float mi = c->b1 * *m + c->c1 * g;
    float vi = c->b2 * *v + c->c2 * g * g;
    *m = mi;
    *v = vi;
    *p -= c->step * mi / (sqrtf(vi) / c->sbc2 + c->eps);
}

ELEM_FN float elem_sgd(float p, float g, float lr)
{
    return p - lr * g;
}

#endif
