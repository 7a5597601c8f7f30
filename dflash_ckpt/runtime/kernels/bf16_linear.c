/* y = x @ w.T (+ bias) for bf16 x [M, K], w [N, K], bias [N] and y [M, N], computed in fp32 with
 * AVX2 and FMA: the reference runtime's CPU matrix products on CPUs whose oneDNN has no bf16 path
 * (AVX2-only x86, see dflash_ckpt/runtime/cpu_kernel.py for why and how it is built and checked).
 *
 * One row (a decode step) is memory-bound: each weight row is read once, front to back, with four
 * accumulators so the FMA latency never stalls the stream. Several rows (a verify block, the
 * draft's block, a prefill) are compute-bound: see many_rows. Output rows are split between
 * threads by weight rows, and no output's order of summation depends on the split, so the thread
 * count changes no bit. Results are rounded to bf16 to nearest even, as torch rounds. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif


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

/* Several rows: x is transposed once into xt (for each chunk of 16 rows: [K][16], zero-padded),
 * and each group of 6 weight rows, widened once into buf, is multiplied into every chunk by
 * broadcasting one weight at a time against 8 rows of x: acc[j][v] += w[n + j, k] * x[m + 8v .. +8, k].
 * Every output is one fp32 sum over k in order, whatever the tiling or the thread count. */
#define NR 6

static inline __attribute__((always_inline)) void chunk(int V, const float *xt, const float *buf, int64_t K,
                                                        __m256 acc[NR][2], const uint16_t *next) {
    __m256 c[NR][2];
    for (int j = 0; j < NR; j++)
        for (int v = 0; v < V; v++) c[j][v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        /* the next NR weight rows (6K bf16, contiguous) arrive while this group computes */
        if (next && (k & 3) == 0 && 8 * k < NR * K) _mm_prefetch((const char *)(next + 8 * k), _MM_HINT_T0);
        __m256 x0 = load8(xt + 16 * k), x1 = V > 1 ? load8(xt + 16 * k + 8) : x0;
        for (int j = 0; j < NR; j++) {
            __m256 b = _mm256_broadcast_ss(buf + j * K + k);
            c[j][0] = _mm256_fmadd_ps(b, x0, c[j][0]);
            if (V > 1) c[j][1] = _mm256_fmadd_ps(b, x1, c[j][1]);
        }
    }
    for (int j = 0; j < NR; j++)
        for (int v = 0; v < V; v++) acc[j][v] = c[j][v];
}

static void many_rows(const float *xt, const uint16_t *w, const float *bias, uint16_t *y, int64_t M, int64_t N,
                      int64_t K, int64_t n0, int64_t n1, float *buf) {
    __m256 acc[NR][2];
    float lanes[8];
    for (int64_t n = n0; n < n1; n += NR) {
        int nr = n1 - n < NR ? (int)(n1 - n) : NR;
        for (int j = 0; j < NR; j++) {
            if (j < nr) widen_row(w + (n + j) * K, buf + j * K, K);
            else memset(buf + j * K, 0, (size_t)K * sizeof(float));
        }
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            int V = M - m0 > 8 ? 2 : 1;
            const float *x = xt + m0 * K;
            const uint16_t *next = m0 == 0 && n + 2 * NR <= n1 ? w + (n + NR) * K : NULL;
            if (V == 2) chunk(2, x, buf, K, acc, next);
            else chunk(1, x, buf, K, acc, next);
            for (int v = 0; v < V; v++)
                for (int j = 0; j < nr; j++) {
                    _mm256_storeu_ps(lanes, acc[j][v]);
                    for (int l = 0; l < 8 && m0 + 8 * v + l < M; l++) {
                        float s = lanes[l];
                        y[(m0 + 8 * v + l) * N + n + j] = narrow1(bias ? s + bias[n + j] : s);
                    }
                }
        }
    }
}

/* 0 on success, 1 when memory for a buffer could not be had (y is then not to be used) */
int dflash_bf16_linear(const uint16_t *x, const uint16_t *w, const uint16_t *bias, uint16_t *y,
                       int64_t M, int64_t N, int64_t K, int threads) {
    int64_t chunks = (M + 15) / 16;
    float *xf = (float *)malloc((size_t)((M == 1 ? K : chunks * 16 * K) + (bias ? N : 0)) * sizeof(float));
    if (!xf) return 1;
    if (M == 1) widen_row(x, xf, K);
    else
        for (int64_t m = 0; m < chunks * 16; m++)
            for (int64_t k = 0; k < K; k++)
                xf[(m / 16) * 16 * K + 16 * k + m % 16] = m < M ? widen1(x[m * K + k]) : 0.0f;
    float *bf = bias ? xf + (M == 1 ? K : chunks * 16 * K) : NULL;
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
                float *buf = (float *)malloc((size_t)(NR * K) * sizeof(float));
                if (!buf) failed = 1;
                else {
                    many_rows(xf, w, bf, y, M, N, K, n0, n1, buf);
                    free(buf);
                }
            }
        }
    }
    free(xf);
    return failed;
}
