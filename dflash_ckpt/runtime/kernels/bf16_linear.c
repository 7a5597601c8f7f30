/* y = x @ w.T (+ bias) for bf16 x [M, K], w [N, K], bias [N] and y [M, N], computed in fp32 with
 * AVX2 and FMA: the reference runtime's CPU matrix products on CPUs whose oneDNN has no bf16 path
 * (AVX2-only x86, see dflash_ckpt/runtime/cpu_kernel.py for why and how it is built and checked).
 *
 * One row (a decode step) is memory-bound: each weight row is read once, front to back, with four
 * accumulators so the FMA latency never stalls the stream. Several rows (a verify block, a
 * prefill) are compute-bound: four weight rows are widened to fp32 once into a small buffer and
 * multiplied against three input rows at a time (twelve accumulators in registers). Output rows
 * are split between threads by weight rows, so every output is summed in the same order whatever
 * the thread count. Results are rounded to bf16 to nearest even, as torch rounds. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MBLOCK 96 /* input rows per block of the many-rows path: a multiple of 3 */

static inline __m256 load8(const float *p) { return _mm256_loadu_ps(p); }

static inline __m256 widen8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float widen1(uint16_t h) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)h << 16;
    return c.f;
}

static inline uint16_t narrow1(float f) {
    union { uint32_t u; float f; } c;
    c.f = f;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static void widen_row(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8(src + i));
    for (; i < n; i++) dst[i] = widen1(src[i]);
}

/* dot products of one fp32 row x against weight rows [n0, n1) */
static void one_row(const float *x, const uint16_t *w, const float *bias, uint16_t *y, int64_t K,
                    int64_t n0, int64_t n1) {
    int64_t K32 = K & ~(int64_t)31;
    for (int64_t n = n0; n < n1; n++) {
        const uint16_t *r = w + n * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t k = 0;
        for (; k < K32; k += 32) {
            a0 = _mm256_fmadd_ps(load8(x + k), widen8(r + k), a0);
            a1 = _mm256_fmadd_ps(load8(x + k + 8), widen8(r + k + 8), a1);
            a2 = _mm256_fmadd_ps(load8(x + k + 16), widen8(r + k + 16), a2);
            a3 = _mm256_fmadd_ps(load8(x + k + 24), widen8(r + k + 24), a3);
        }
        for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(load8(x + k), widen8(r + k), a0);
        float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; k < K; k++) s += x[k] * widen1(r[k]);
        y[n] = narrow1(bias ? s + bias[n] : s);
    }
}

/* R (1 to 3, a constant after inlining) input rows against the 4 widened weight rows in buf:
 * 4R accumulators, each summed over k in steps of 8, then across its lanes. (A decode step's
 * one_row sums in another order, as torch's own kernels for one row and many do: a verify row
 * and a decode step agree within bf16 rounding, not bit for bit. Summing here in one_row's
 * order was measured 20-30% slower.) */
static inline __attribute__((always_inline)) void tile(int R, int nr, const float *x, const float *buf,
                                                       const float *bias, uint16_t *y, int64_t N, int64_t K,
                                                       int64_t m, int64_t n, const uint16_t *next) {
    int64_t K8 = K & ~(int64_t)7;
    __m256 c[3][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++) c[i][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8) {
        /* the next 4 weight rows (4K bf16, contiguous) arrive while this tile computes: a line
         * (32 bf16) for each step of 8 columns covers them exactly */
        if (next) _mm_prefetch((const char *)(next + 4 * k), _MM_HINT_T0);
        __m256 w0 = load8(buf + k), w1 = load8(buf + K + k), w2 = load8(buf + 2 * K + k), w3 = load8(buf + 3 * K + k);
        for (int i = 0; i < R; i++) {
            __m256 v = load8(x + (m + i) * K + k);
            c[i][0] = _mm256_fmadd_ps(v, w0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(v, w1, c[i][1]);
            c[i][2] = _mm256_fmadd_ps(v, w2, c[i][2]);
            c[i][3] = _mm256_fmadd_ps(v, w3, c[i][3]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < nr; j++) {
            const float *xr = x + (m + i) * K, *b = buf + j * K;
            float s = hsum(c[i][j]);
            for (int64_t k = K8; k < K; k++) s += xr[k] * b[k];
            y[(m + i) * N + n + j] = narrow1(bias ? s + bias[n + j] : s);
        }
}

/* rows [m0, m1) of fp32 x against weight rows [n0, n1); buf holds 4 widened weight rows */
static void many_rows(const float *x, const uint16_t *w, const float *bias, uint16_t *y, int64_t N, int64_t K,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *buf) {
    for (int64_t n = n0; n < n1; n += 4) {
        int nr = n1 - n < 4 ? (int)(n1 - n) : 4;
        for (int j = 0; j < 4; j++) {
            if (j < nr) widen_row(w + (n + j) * K, buf + j * K, K);
            else memset(buf + j * K, 0, (size_t)K * sizeof(float));
        }
        const uint16_t *next = n + 8 <= n1 ? w + (n + 4) * K : NULL; /* prefetched by the first tile */
        int64_t m = m0;
        for (; m + 3 <= m1; m += 3, next = NULL) tile(3, nr, x, buf, bias, y, N, K, m, n, next);
        if (m1 - m == 2) tile(2, nr, x, buf, bias, y, N, K, m, n, next);
        else if (m1 - m == 1) tile(1, nr, x, buf, bias, y, N, K, m, n, next);
    }
}

/* 0 on success, 1 when memory could not be had (nothing written then) */
int dflash_bf16_linear(const uint16_t *x, const uint16_t *w, const uint16_t *bias, uint16_t *y,
                       int64_t M, int64_t N, int64_t K, int threads) {
    float *xf = (float *)malloc((size_t)(M * K + (bias ? N : 0)) * sizeof(float));
    if (!xf) return 1;
    for (int64_t m = 0; m < M; m++) widen_row(x + m * K, xf + m * K, K);
    float *bf = bias ? xf + M * K : NULL;
    if (bias) widen_row(bias, bf, N);
    if (threads < 1) threads = 1;
    int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(| : failed)
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        int64_t per = ((N + T - 1) / T + 7) & ~(int64_t)7;
        int64_t n0 = t * per < N ? t * per : N, n1 = n0 + per < N ? n0 + per : N;
        if (n0 < n1) {
            if (M == 1) {
                one_row(xf, w, bf, y, K, n0, n1);
            } else {
                float *buf = (float *)malloc((size_t)(4 * K) * sizeof(float));
                if (!buf) failed = 1;
                else {
                    for (int64_t m0 = 0; m0 < M; m0 += MBLOCK)
                        many_rows(xf, w, bf, y, N, K, m0, m0 + MBLOCK < M ? m0 + MBLOCK : M, n0, n1, buf);
                    free(buf);
                }
            }
        }
    }
    free(xf);
    return failed;
}
