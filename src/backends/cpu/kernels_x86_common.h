/* kernels_x86_common.h: the x86 kernels, included by each x86 variant file
 * (kernels_avx2.c, kernels_avx512.c, kernels_avx512_vnni.c), which compiles
 * them with its own -m flags. They are written once on 256-bit vectors; the
 * packed x8 kinds' (kernels_x86_x8.h) on one vector per 8-row group, with a
 * zmm holding two under AVX-512. AVX-512 builds get 32 vector registers and
 * so larger tiles; the VNNI build does the u8 x s8 dot products with
 * VPDPBUSD.
 *
 * A gemm walks the output in tiles of R weight rows x T activation rows
 * (loading each weight block once per tile and each activation block once
 * per tile); edges use smaller instances of the same tile. Every (r, t) pair
 * is computed by the same sequence of operations in every instance (one
 * 8-lane f32 accumulator, integer dot products within a block, one FMA per
 * block, a fixed horizontal sum), so an output never depends on the tile
 * it falls in, nor on how the caller split nr and nt.
 *
 * Define KILN_X86_VNNI_EMU to build the VNNI algorithms on AVX2 with an
 * exact emulation of VPDPBUSD (to test them on a CPU without VNNI). */
#ifndef KILN_CPU_KERNELS_X86_COMMON_H
#define KILN_CPU_KERNELS_X86_COMMON_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_quant_common.h"

#define KX_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define KX_VNNI 1
#define kx_dpbusd(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#elif defined(KILN_X86_VNNI_EMU)
#define KX_VNNI 1
/* acc + per 32-bit lane sum of four u8 * s8 products, exactly. */
KX_INLINE __m256i kx_dpbusd(__m256i acc, __m256i u, __m256i s) {
    __m256i m = _mm256_set1_epi16(0x00FF);
    __m256i ue = _mm256_and_si256(u, m), uo = _mm256_srli_epi16(u, 8);
    __m256i se = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), so = _mm256_srai_epi16(s, 8);
    return _mm256_add_epi32(acc,
                            _mm256_add_epi32(_mm256_madd_epi16(ue, se), _mm256_madd_epi16(uo, so)));
}
#else
#define KX_VNNI 0
#endif
/* acc + per 32-bit lane sum of two i16 * i16 products (VPDPWSSD, or
 * VPMADDWD and an add: the same integers). */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define kx_dpwssd(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#else
#define kx_dpwssd(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#endif

/* Tile sizes (rows of w x rows of a). The AVX2 ones were measured on Zen 3
 * (16 vector registers: larger tiles spill); the AVX-512 ones use the 32
 * registers EVEX gives. Measured on Zen 4 (2026-12-07, one core, pp GOP/s,
 * medians of 3): KX_X8_T = 8 beats 4, 6 and 10 for every x8 kind (q4_0x8
 * 262 / 275 / 287 / 273 at 4 / 6 / 8 / 10, q8_0x8 222 / 237 / 251 / 235,
 * q6_Kx8 190 / 198 / 211 / 200), and again with the zmm tiles of two groups
 * (kernels_x86_x8.h; medians of 3 at 4 / 6 / 8 / 10 / 12: q8_0x8 304 / 315 /
 * 342 / 324 / 308, q4_Kx8 292 / 306 / 315 / 285 / 285, q6_Kx8 251 / 266 /
 * 272 / 248 / 248); KX_F_G below. The R x T tiles of the plain
 * kinds are as first chosen. */
#if defined(__AVX512F__) || defined(KX_FORCE_WIDE_TILES) /* tests: AVX-512 tiles on AVX2 */
#define KX_Q_R 4                                         /* q8_0, q4_0, q4_1 */
#define KX_Q_T 4
#define KX_K_R 2 /* q4_K, q6_K */
#define KX_K_T 4
#define KX_F_R 4 /* f32, f16, bf16 */
#define KX_F_T 4
#define KX_K_G 4 /* q4_K, q6_K rows per step when there is one activation row */
#else
#define KX_Q_R 3
#define KX_Q_T 4
#define KX_K_R 2
#define KX_K_T 3
#define KX_F_R 3
#define KX_F_T 4
#define KX_K_G 2
#endif
#if defined(__AVX512F__) || defined(KX_FORCE_WIDE_TILES)
#define KX_X8_T 8 /* x8 kinds: activation rows per tile (of KW_G groups of 8 rows) */
#else
#define KX_X8_T 4
#endif
#define KX_G_R 4 /* weight rows per step when there is one activation row */
/* f32, f16, bf16 rows per step when there is one activation row (see
 * kx_tile_f). AVX2: 8, not 4, for short rows. Measured on Zen 4, one core,
 * f16 x one token, GB/s of weights: k = 1024 (2 KiB rows) 12 -> 16-20, k =
 * 2048 and 4096 the same (21). 8 accumulators, 8 converted rows and the
 * activation still fit AVX2's 16 registers, since each row's vector is used
 * once. AVX-512: one (16-lane accumulators). */
#if defined(__AVX512F__) || defined(KX_FORCE_WIDE_TILES)
#define KX_F_G 1
#else
#define KX_F_G 8
#endif
#define KX_RM 4 /* array bounds: the largest R and T above */
#define KX_TM 4
#define KX_F_RM 8 /* kx_tile_f: the largest R and G */

#define KX_UNROLL _Pragma("GCC unroll 16")

KX_INLINE float kx_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KX_INLINE float kx_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

KX_INLINE float kx_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

KX_INLINE __m256i kx_load(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* Prefetches the n bytes at p. With one activation row (T == 1, token
 * generation) each tile prefetches its block of the rows the next tile
 * takes: the hardware prefetcher alone leaves the interleaved row streams
 * waiting on memory (measured: q4_K 6.4 -> 12 GB/s, q8_0 13 -> 20 GB/s). */
KX_INLINE void kx_prefetch_next(const uint8_t *p, int n) {
    for (int i = 0; i < n; i += 64)
        _mm_prefetch((const char *)p + i, _MM_HINT_T0);
}

/* 16 bytes of nibbles -> 32 u8: low nibbles (values 0..15), then high. */
KX_INLINE __m256i kx_nibbles(const uint8_t *p) {
    /* one broadcast load (no shuffle uop), the high half shifted by 4 */
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    v = _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* ---- tile drivers ------------------------------------------------------------- */
/* A gemm over tiles of R x T, with row and column edges done by R x 1, 1 x T
 * and 1 x 1 instances, and nt = 1 by G x 1. TILE(R, T, r0, t0) computes
 * out[t0.., r0..]. The activation rows go in chunks of about KX_ACT_CHUNK
 * bytes (a multiple of T rows), each multiplied by all weight rows while it
 * stays in L2; only the last chunk has a partial tile. */
#define KX_ACT_CHUNK (256 << 10)
#define KX_GEMM(name, TILE, R, T, G)                                                               \
    static void name(int64_t k, const void *w_, size_t ws, int64_t nr, const void *a_, size_t as,  \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        const uint8_t *w = w_, *a = a_;                                                            \
        if (nt < T) {                                                                              \
            int64_t r = 0;                                                                         \
            for (; r + G <= nr; r += G)                                                            \
                for (int64_t t = 0; t < nt; t++)                                                   \
                    TILE(G, 1, r, t);                                                              \
            for (; r < nr; r++)                                                                    \
                for (int64_t t = 0; t < nt; t++)                                                   \
                    TILE(1, 1, r, t);                                                              \
            return;                                                                                \
        }                                                                                          \
        int64_t chunk = (int64_t)(KX_ACT_CHUNK / (as ? as : 1)) / T * T;                           \
        if (chunk < T) chunk = T;                                                                  \
        for (int64_t c0 = 0; c0 < nt; c0 += chunk) {                                               \
            int64_t c1 = c0 + chunk < nt ? c0 + chunk : nt;                                        \
            int64_t r = 0;                                                                         \
            for (; r + R <= nr; r += R) {                                                          \
                int64_t t = c0;                                                                    \
                for (; t + T <= c1; t += T)                                                        \
                    TILE(R, T, r, t);                                                              \
                for (; t < c1; t++)                                                                \
                    TILE(R, 1, r, t);                                                              \
            }                                                                                      \
            for (; r < nr; r++) {                                                                  \
                int64_t t = c0;                                                                    \
                for (; t + T <= c1; t += T)                                                        \
                    TILE(1, T, r, t);                                                              \
                for (; t < c1; t++)                                                                \
                    TILE(1, 1, r, t);                                                              \
            }                                                                                      \
        }                                                                                          \
    }

/* ---- f32, f16, bf16 weights x f32 activations ------------------------------------ */
/* Each output is a dot product in KX_FL f32 lanes (lane j sums k = j mod
 * KX_FL in order), then a fixed tree of horizontal adds; every tile of a
 * table does exactly that, so an output's bits do not depend on the tile.
 *   AVX2:    8 lanes (one ymm). One activation row takes KX_F_G = 8 weight
 *            rows per step, so 8 independent FMA chains hide the latency.
 *   AVX-512: 16 lanes (one zmm; the test tables on AVX2 use two ymm, the
 *            same sums). One activation row takes one weight row at a time:
 *            a single zmm chain keeps up with memory, and reading one row
 *            after another is one sequential stream, where 8 rows at once
 *            are 8 streams the prefetchers serve worse. Measured on Zen 4
 *            against 8 rows of 8 lanes (kiln bench tg64, F16, medians of
 *            9-15): 2 threads SmolLM2-135M 66 -> 95 t/s, Qwen3-0.6B 20.7 ->
 *            25.8; 1 thread 44.6 -> 74.1 and 12.7 -> 22.2; pp512 within 2%.
 *            Rows shorter than KX_F_SHORT still go 8 at a time. */
enum { KX_W_F32, KX_W_F16, KX_W_BF16 };

/* 8 weights from p (kind's encoding) as f32. */
KX_INLINE __m256 kx_load_w(int kind, const uint8_t *p) {
    if (kind == KX_W_F32) return _mm256_loadu_ps((const float *)(const void *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (kind == KX_W_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#if defined(__AVX512F__)
#define KX_FL 16
typedef __m512 kx_fv;
KX_INLINE kx_fv kx_fv_w(int kind, const uint8_t *p) {
    if (kind == KX_W_F32) return _mm512_loadu_ps((const void *)p);
    __m256i h = kx_load(p);
    if (kind == KX_W_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#define kx_fv_a _mm512_loadu_ps /* 16 f32 at p */
#define kx_fv_zero _mm512_setzero_ps
#define kx_fv_fma _mm512_fmadd_ps /* w * a + acc */
/* lanes j and j + 8 added, then the 8-lane tree */
KX_INLINE float kx_fv_sum(kx_fv v) {
    return kx_hsum(_mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}
/* out[t * ldo + r] = kx_fv_sum(acc[r][t]) for a 4 x 4 tile, by a network
 * that sums the 16 vectors together: each step adds, lane by lane, the
 * same two partial sums one of kx_fv_sum's steps adds, so the bits are its
 * bits, in 15 adds and 30 shuffles where 16 separate sums take about 130
 * operations. It matters where k is short (attention scores, k = head_dim):
 * one core, f16, 64 x 64 outputs, GFLOP/s: k = 64 57 -> 73, k = 128 76 ->
 * 89 (the loops must unroll: a spilled acc array made it slower). */
KX_INLINE __m512 kz_sum_halves(__m512 a, __m512 b) { /* a's lanes j + j+8, then b's */
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}
KX_INLINE __m512 kz_sum_quarters(__m512 a, __m512 b) { /* quarter i: vector i's j + j+4 */
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}
KX_INLINE void kz_store_sums_4x4(const kx_fv acc[][KX_TM], float *out, int64_t ldo) {
    __m512 c[4], d[2];
    /* c[r], quarter t: acc[r][t]'s 4 partial sums */
    KX_UNROLL for (int r = 0; r < 4; r++) c[r] =
        kz_sum_quarters(kz_sum_halves(acc[r][0], acc[r][1]), kz_sum_halves(acc[r][2], acc[r][3]));
    /* d[i], quarter t: c[2i]'s lanes 0 + 2 and 1 + 3, then c[2i + 1]'s */
    KX_UNROLL for (int i = 0; i < 2; i++) d[i] =
        _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                      _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    /* lane 4t + r: acc[r][t]'s sum (each pair's lanes 0 + 1) */
    __m512 e =
        _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    _mm_storeu_ps(out, _mm512_castps512_ps128(e)); /* (immediates: no loop at -O0) */
    _mm_storeu_ps(out + ldo, _mm512_extractf32x4_ps(e, 1));
    _mm_storeu_ps(out + 2 * ldo, _mm512_extractf32x4_ps(e, 2));
    _mm_storeu_ps(out + 3 * ldo, _mm512_extractf32x4_ps(e, 3));
}
#elif defined(KX_FORCE_WIDE_TILES)
#define KX_FL 16
typedef struct {
    __m256 lo, hi;
} kx_fv;
KX_INLINE kx_fv kx_fv_w(int kind, const uint8_t *p) {
    kx_fv r = {kx_load_w(kind, p), kx_load_w(kind, p + (kind == KX_W_F32 ? 32 : 16))};
    return r;
}
KX_INLINE kx_fv kx_fv_a(const float *p) {
    kx_fv r = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    return r;
}
KX_INLINE kx_fv kx_fv_zero(void) {
    kx_fv r = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    return r;
}
KX_INLINE kx_fv kx_fv_fma(kx_fv w, kx_fv a, kx_fv acc) {
    acc.lo = _mm256_fmadd_ps(w.lo, a.lo, acc.lo);
    acc.hi = _mm256_fmadd_ps(w.hi, a.hi, acc.hi);
    return acc;
}
KX_INLINE float kx_fv_sum(kx_fv v) {
    return kx_hsum(_mm256_add_ps(v.lo, v.hi));
}
#else
#define KX_FL 8
typedef __m256 kx_fv;
#define kx_fv_w kx_load_w
#define kx_fv_a _mm256_loadu_ps /* 8 f32 at p */
#define kx_fv_zero _mm256_setzero_ps
#define kx_fv_fma _mm256_fmadd_ps /* w * a + acc */
#define kx_fv_sum kx_hsum
#endif

/* The last n < KX_FL values of a row, zero-padded (0 * 0 adds nothing). */
KX_INLINE kx_fv kx_fv_w_tail(int kind, const uint8_t *p, int n) {
    _Alignas(64) uint8_t buf[4 * KX_FL] = {0};
    memcpy(buf, p, (size_t)n * (kind == KX_W_F32 ? 4 : 2));
    return kx_fv_w(kind, buf);
}

KX_INLINE kx_fv kx_fv_a_tail(const float *p, int n) {
    _Alignas(64) float buf[KX_FL] = {0};
    memcpy(buf, p, (size_t)n * 4);
    return kx_fv_a(buf);
}

KX_INLINE void kx_tile_f(int kind, const int R, const int T, int64_t k, const uint8_t *w, size_t ws,
                         const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t esz = kind == KX_W_F32 ? 4 : 2;
    kx_fv acc[KX_F_RM][KX_TM];
    KX_UNROLL for (int r = 0; r < R; r++) KX_UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        kx_fv_zero();
    int64_t i = 0;
    for (; i + KX_FL <= k; i += KX_FL) {
        kx_fv wv[KX_F_RM];
        KX_UNROLL for (int r = 0; r < R; r++) {
            /* interleaved rows: each prefetches its next step's row */
            if (T == 1 && R > 1) kx_prefetch_next(w + r * ws + (size_t)i * esz + R * ws, 1);
            wv[r] = kx_fv_w(kind, w + r * ws + (size_t)i * esz);
        }
        KX_UNROLL for (int t = 0; t < T; t++) {
            kx_fv av = kx_fv_a((const float *)(const void *)(a + t * as) + i);
            KX_UNROLL for (int r = 0; r < R; r++) acc[r][t] = kx_fv_fma(wv[r], av, acc[r][t]);
        }
    }
    if (i < k) {
        int n = (int)(k - i);
        kx_fv wv[KX_F_RM];
        KX_UNROLL for (int r = 0; r < R; r++) wv[r] =
            kx_fv_w_tail(kind, w + r * ws + (size_t)i * esz, n);
        KX_UNROLL for (int t = 0; t < T; t++) {
            kx_fv av = kx_fv_a_tail((const float *)(const void *)(a + t * as) + i, n);
            KX_UNROLL for (int r = 0; r < R; r++) acc[r][t] = kx_fv_fma(wv[r], av, acc[r][t]);
        }
    }
#if defined(__AVX512F__)
    if (R == 4 && T == 4) {
        kz_store_sums_4x4(acc, out, ldo);
        return;
    }
#endif
    KX_UNROLL for (int t = 0; t < T; t++) KX_UNROLL for (int r = 0; r < R; r++) out[t * ldo + r] =
        kx_fv_sum(acc[r][t]);
}

#define KX_TILE_F32(R, T, r, t)                                                                    \
    kx_tile_f(KX_W_F32, R, T, k, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#define KX_TILE_F16(R, T, r, t)                                                                    \
    kx_tile_f(KX_W_F16, R, T, k, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#define KX_TILE_BF16(R, T, r, t)                                                                   \
    kx_tile_f(KX_W_BF16, R, T, k, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#if KX_F_G == 1
/* Short rows (attention's K rows: head_dim values) go 8 at a time, so 8
 * chains hide the FMA latency: the rows are one block of memory anyway.
 * Measured on Zen 4, one core, f16 x one token, 1024 rows in L2, ns per
 * row against one at a time: k = 64 3.6 -> 3.1, k = 256 10.0 -> 9.3. */
#define KX_F_SHORT 1024 /* bytes of a row */
#define KX_GEMM_F(name, TILE, esz)                                                                 \
    KX_GEMM(name##_g1, TILE, KX_F_R, KX_F_T, 1)                                                    \
    KX_GEMM(name##_g8, TILE, KX_F_R, KX_F_T, 8)                                                    \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        (k * (esz) < KX_F_SHORT ? name##_g8 : name##_g1)(k, w, ws, nr, a, as, nt, out, ldo);       \
    }
#else
#define KX_GEMM_F(name, TILE, esz) KX_GEMM(name, TILE, KX_F_R, KX_F_T, KX_F_G)
#endif
KX_GEMM_F(kx_gemm_f32, KX_TILE_F32, 4)
KX_GEMM_F(kx_gemm_f16, KX_TILE_F16, 2)
KX_GEMM_F(kx_gemm_bf16, KX_TILE_BF16, 2)

/* ---- opt-in: f16 / bf16 weights by bf16 dot products (avx512-bf16) --------------- */
/* KILN_CPU=avx512-bf16 (never chosen unless named): the f16 and bf16
 * matmuls round the activations, and f16 weights, to bf16 (round to
 * nearest even) and multiply them with VDPBF16PS (pairs of bf16 products
 * into f32 lanes). Each output: 16 lanes, lane j summing the pairs
 * 2j, 2j + 1 of every 32 values in order, then kx_fv_sum's tree, in every
 * tile, so the bits are independent of the tiling, the split and the
 * thread count as in the other tables. Its bound, relative to sum |w * a|:
 * 2^-7 + 2e-5 for f16 weights (both operands rounded, 2^-8 each), 2^-8 +
 * 2e-5 for bf16 weights (the activations only), in place of 2e-5
 * (KILN_CPU_BF16_TOL_*; test_cpu_kernels checks it). Attention keeps the
 * exact f16 gemm (score_f16).
 * The cpu backend rounds a matmul's activation rows to bf16 once, into the
 * node's scratch (quantize_row, KILN_CPU_ACT_BF16), and calls
 * gemm_bf16_act; gemm[] takes f32 rows and rounds 16 at a time on the
 * stack (the same bits). Each 4-row weight panel is converted once per call
 * into L1, so VDPBF16PS reads both operands from there. Measured on Zen 4:
 * one core, f16 256 x 64 x 1024, about 1.8x the f32 FMA tile (1.25x when
 * each tile converts its weights); Qwen3-0.6B F16 pp512, 2 threads, against
 * avx512-vnni, medians of 9: 199 -> 340 t/s (a 16-row, stack-only
 * conversion gave 228, 64 rows 318). Rows of more than KB_KMAX values (the
 * panel lives on the stack) take the exact f16 / bf16 gemm: the bits still
 * depend on nothing but k. */
#if defined(__AVX512BF16__) && defined(KX_BF16_DOT)
#define KB_KMAX KILN_CPU_BF16_KMAX
#define KB_ABUF 16384 /* bf16 values of kb_gemm's activation buffer (32 KiB) */
/* 32 weights (f16 or bf16) as bf16 pairs, n < 32 of them zero-padded */
KX_INLINE __m512i kb_w(int kind, const uint8_t *p, int n) {
    _Alignas(64) uint8_t buf[64] = {0};
    if (n < 32) p = memcpy(buf, p, (size_t)n * 2);
    if (kind == KX_W_BF16) return _mm512_loadu_si512((const void *)p);
    const __m512 lo = _mm512_cvtph_ps(kx_load(p)), hi = _mm512_cvtph_ps(kx_load(p + 32));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}
/* k f32 values -> bf16 (round to nearest even) at dst, zero-padded to a
 * multiple of 32: a KILN_CPU_ACT_BF16 row */
KX_INLINE void kx_bf16_row(const float *x, int64_t k, uint16_t *dst) {
    for (int64_t i = 0; i < k; i += 32) {
        _Alignas(64) float buf[32] = {0};
        const float *p = k - i < 32 ? memcpy(buf, x + i, (size_t)(k - i) * 4) : x + i;
        _mm512_storeu_si512((void *)(dst + i), (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16),
                                                                            _mm512_loadu_ps(p)));
    }
}
/* R x T outputs; w: bf16 rows ws apart (pw) or the weights themselves
 * (kind, ws bytes apart, converted as read); a: bf16 rows as apart */
KX_INLINE void kb_tile(int kind, const int R, const int T, int64_t k, const uint16_t *pw,
                       const uint8_t *w, size_t ws, const uint16_t *a, int64_t as, float *out,
                       int64_t ldo) {
    const int64_t kp = (k + 31) / 32 * 32;
    __m512 acc[4][KX_TM];
    KX_UNROLL for (int r = 0; r < R; r++) KX_UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm512_setzero_ps();
    for (int64_t i = 0; i < kp; i += 32) {
        __m512i wv[4];
        KX_UNROLL for (int r = 0; r < R; r++) wv[r] =
            pw ? _mm512_load_si512((const void *)(pw + r * ws + i))
               : kb_w(kind, w + r * ws + i * 2, k - i < 32 ? (int)(k - i) : 32);
        KX_UNROLL for (int t = 0; t < T; t++) {
            const __m512bh av = (__m512bh)_mm512_loadu_si512((const void *)(a + t * as + i));
            KX_UNROLL for (int r = 0; r < R; r++) acc[r][t] =
                _mm512_dpbf16_ps(acc[r][t], (__m512bh)wv[r], av);
        }
    }
    if (R == 4 && T == 4) {
        kz_store_sums_4x4(acc, out, ldo);
        return;
    }
    KX_UNROLL for (int t = 0; t < T; t++) KX_UNROLL for (int r = 0; r < R; r++) out[t * ldo + r] =
        kx_fv_sum(acc[r][t]);
}
/* nt activation rows of kp bf16 values, as apart: each 4-row weight panel
 * converted once for all of them, or (fewer than 4 rows) one weight row
 * at a time converted as read, one memory stream. */
KX_INLINE void kb_core(int kind, int64_t k, const uint8_t *w, size_t ws, int64_t nr,
                       const uint16_t *ab, int64_t as, int64_t nt, float *out, int64_t ldo) {
    const int64_t kp = (k + 31) / 32 * 32;
    if (nt < 4) { /* Zen 4, Qwen3-0.6B F16 tg64: 2 or 4 rows at once 25 -> 16 t/s */
        for (int64_t r = 0; r < nr; r++)
            for (int64_t t = 0; t < nt; t++)
                kb_tile(kind, 1, 1, k, NULL, w + r * ws, ws, ab + t * as, as, out + t * ldo + r,
                        ldo);
        return;
    }
    _Alignas(64) uint16_t pw[4 * KB_KMAX];
    for (int64_t r = 0; r < nr; r += 4) {
        const int64_t m = nr - r < 4 ? nr - r : 4;
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < kp; i += 32)
                _mm512_store_si512((void *)(pw + j * kp + i), kb_w(kind, w + (r + j) * ws + i * 2,
                                                                   k - i < 32 ? (int)(k - i) : 32));
        float *o = out + r;
        int64_t t = 0;
#define KB_TILE(R, T, j)                                                                           \
    kb_tile(kind, R, T, k, pw + (j)*kp, NULL, kp, ab + t * as, as, o + t * ldo + (j), ldo)
        if (m == 4) {
            for (; t + 4 <= nt; t += 4)
                KB_TILE(4, 4, 0);
            for (; t < nt; t++)
                KB_TILE(4, 1, 0);
        } else
            for (int64_t j = 0; j < m; j++) {
                for (t = 0; t + 4 <= nt; t += 4)
                    KB_TILE(1, 4, j);
                for (; t < nt; t++)
                    KB_TILE(1, 1, j);
            }
#undef KB_TILE
    }
}
/* f32 activation rows: converted KB_ABUF / kp at a time on the stack. */
KX_INLINE void kb_gemm(int kind, int64_t k, const uint8_t *w, size_t ws, int64_t nr,
                       const uint8_t *a, size_t as, int64_t nt, float *out, int64_t ldo) {
    const int64_t kp = (k + 31) / 32 * 32, tc = KB_ABUF / kp < 16 ? KB_ABUF / kp : 16;
    _Alignas(64) uint16_t ab[KB_ABUF];
    for (int64_t t0 = 0; t0 < nt; t0 += tc) {
        const int64_t n = nt - t0 < tc ? nt - t0 : tc;
        for (int64_t t = 0; t < n; t++)
            kx_bf16_row((const float *)(const void *)(a + (t0 + t) * as), k, ab + t * kp);
        kb_core(kind, k, w, ws, nr, ab, kp, n, out + t0 * ldo, ldo);
    }
}
#define KB_GEMM(name, kind, exact)                                                                 \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        if (k > KB_KMAX)                                                                           \
            exact(k, w, ws, nr, a, as, nt, out, ldo);                                              \
        else                                                                                       \
            kb_gemm(kind, k, w, ws, nr, a, as, nt, out, ldo);                                      \
    }                                                                                              \
    /* activation rows already in bf16 (KILN_CPU_ACT_BF16), k <= KB_KMAX */                        \
    static void name##_act(int64_t k, const void *w, size_t ws, int64_t nr, const void *a,         \
                           size_t as, int64_t nt, float *out, int64_t ldo) {                       \
        kb_core(kind, k, w, ws, nr, a, (int64_t)(as / 2), nt, out, ldo);                           \
    }
KB_GEMM(kb_gemm_f16, KX_W_F16, kx_gemm_f16)
KB_GEMM(kb_gemm_bf16, KX_W_BF16, kx_gemm_bf16)
#define KX_F16_MATMUL kb_gemm_f16
#define KX_BF16_MATMUL kb_gemm_bf16
#define KX_F16_ACT kb_gemm_f16_act
#define KX_BF16_ACT kb_gemm_bf16_act
#define KX_OPT_IN 1
#else
#define KX_F16_MATMUL kx_gemm_f16
#define KX_BF16_MATMUL kx_gemm_bf16
#define KX_F16_ACT NULL
#define KX_BF16_ACT NULL
#define KX_OPT_IN 0
#endif

/* ---- q8_0, q4_0, q4_1 weights x Q8 activations -------------------------------------- */
/* Per block of 32 and pair (r, t): an exact int32 dot product in 8 lanes p,
 * then acc += f32(p) * (dw * da), the R x T products dw * da made four at a
 * time per block and read back as broadcast operands; for q4_0 and q4_1 the
 * minimum's sum of m * sa runs in a separate f32 lane per pair and is added
 * after the horizontal sum.
 *   q8_0  AVX2: |w| (u8) x sign(qa, w) by VPMADDUBSW (|products pair| <= 2*128*127
 *               fits i16), VPMADDWD by 1.  VNNI: (qa + 128) (u8) x w, started
 *               from -128 * sum(w) (per weight block).
 *   q4_0  nibbles (u8) x qa; the -8 is a minimum m = -8 * dw (exact in f32),
 *         so no per-pair integer correction (measured: +3-6% gemm).
 *   q4_1  nibbles (u8) x qa; the minimum adds m * sa. */
enum { KX_Q8_0, KX_Q4_0, KX_Q4_1 };

KX_INLINE void kx_tile_q(int kind, const int R, const int T, int64_t nb, const uint8_t *w,
                         size_t ws, const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t wb = kind == KX_Q8_0 ? 34 : kind == KX_Q4_0 ? 18 : 20;
    const size_t ab = sizeof(kiln_cpu_block_q8), aq = offsetof(kiln_cpu_block_q8, q);
    const __m256i ones16 = _mm256_set1_epi16(1);
    (void)ones16;
    __m256 acc[KX_RM][KX_TM];
    _Alignas(16) float scale[KX_TM][4], ms[KX_TM][4];
    __m128 msum[KX_TM];
    KX_UNROLL for (int t = 0; t < T; t++) msum[t] = _mm_setzero_ps();
    KX_UNROLL for (int r = 0; r < R; r++) KX_UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[KX_RM], wc[KX_RM];
        uint16_t wdh[4] = {0}, wmh[4] = {0}; /* f16 bits of d (and q4_1's m) per row */
        KX_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * wb;
            /* q4 blocks are 18 or 20 bytes: every other one still touches each line */
            if (T == 1 && (kind == KX_Q8_0 || !(b & 1))) kx_prefetch_next(p + R * ws, 1);
            memcpy(&wdh[r], p, 2);
            if (kind == KX_Q8_0) {
                wq[r] = kx_load(p + 2);
#if KX_VNNI
                __m256i s = kx_dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8(1), wq[r]);
                wc[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 7));
#else
                wc[r] = _mm256_sign_epi8(wq[r], wq[r]);
#endif
            } else {
                wq[r] = kx_nibbles(p + (kind == KX_Q4_0 ? 2 : 4));
                wc[r] = _mm256_setzero_si256();
                if (kind == KX_Q4_1) memcpy(&wmh[r], p + 2, 2);
            }
        }
        /* The R x T scale products dw * da, 4 at a time, read back by
         * broadcast loads (load ports, not the FMA pipes). */
        const __m128 wd4 = _mm_cvtph_ps(
            _mm_setr_epi16((short)wdh[0], (short)wdh[1], (short)wdh[2], (short)wdh[3], 0, 0, 0, 0));
        /* q4_0's -8 is a minimum of -8 * d (exact in f32) */
        const __m128 wm4 =
            kind == KX_Q4_0
                ? _mm_mul_ps(wd4, _mm_set1_ps(-8.0f))
                : _mm_cvtph_ps(_mm_setr_epi16((short)wmh[0], (short)wmh[1], (short)wmh[2],
                                              (short)wmh[3], 0, 0, 0, 0));
        KX_UNROLL for (int t = 0; t < T; t++) _mm_store_ps(
            scale[t],
            _mm_mul_ps(wd4, _mm_broadcast_ss((const float *)(const void *)(a + t * as + b * ab))));
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            __m256i q = kx_load(pa + aq);
            /* the minimum: msum[t] (lane r) += m_r * sa_t, four pairs at once */
            if (kind != KX_Q8_0)
                msum[t] = _mm_fmadd_ps(wm4, _mm_broadcast_ss((const float *)(const void *)(pa + 4)),
                                       msum[t]);
#if KX_VNNI
            if (kind == KX_Q8_0) q = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
#endif
            KX_UNROLL for (int r = 0; r < R; r++) {
                __m256i p;
#if KX_VNNI
                if (kind == KX_Q8_0)
                    p = kx_dpbusd(wc[r], q, wq[r]);
                else
                    p = kx_dpbusd(_mm256_setzero_si256(), wq[r], q);
#else
                if (kind == KX_Q8_0)
                    p = _mm256_madd_epi16(_mm256_maddubs_epi16(wc[r], _mm256_sign_epi8(q, wq[r])),
                                          ones16);
                else
                    p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], q), ones16);
#endif
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                            _mm256_broadcast_ss(&scale[t][r]), acc[r][t]);
            }
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) {
        _mm_store_ps(ms[t], msum[t]);
        KX_UNROLL for (int r = 0; r < R; r++) out[t * ldo + r] =
            kind != KX_Q8_0 ? kx_hsum(acc[r][t]) + ms[t][r] : kx_hsum(acc[r][t]);
    }
}

#define KX_TILE_Q(kind, R, T, r, t)                                                                \
    kx_tile_q(kind, R, T, k / 32, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#define KX_TILE_Q8_0(R, T, r, t) KX_TILE_Q(KX_Q8_0, R, T, r, t)
#define KX_TILE_Q4_0(R, T, r, t) KX_TILE_Q(KX_Q4_0, R, T, r, t)
#define KX_TILE_Q4_1(R, T, r, t) KX_TILE_Q(KX_Q4_1, R, T, r, t)
KX_GEMM(kx_gemm_q8_0, KX_TILE_Q8_0, KX_Q_R, KX_Q_T, KX_G_R)
KX_GEMM(kx_gemm_q4_0, KX_TILE_Q4_0, KX_Q_R, KX_Q_T, KX_G_R)
KX_GEMM(kx_gemm_q4_1, KX_TILE_Q4_1, KX_Q_R, KX_Q_T, KX_G_R)

/* ---- packed x8 weights x Q8 / Q8K activations ------------------------------------ */
#include "backends/cpu/kernels_x86_x8.h"

/* ---- q4_K, q6_K weights x Q8K activations ---------------------------------------- */
/* Per super-block of 256 and pair: the sub-block dot products by VPMADDUBSW
 * (u8 weights x s8 activations), scaled by the sub-block scales with
 * VPMADDWD, summed exactly in int32 lanes; then one or two FMAs. */
/* The eight 6-bit scales and mins of a q4_K super-block (packing described
 * in quant.c), rearranged by 32-bit masks: sc[j] to sc16[j]; mn[j] to
 * mn16[2j] and mn16[2j + 1] (paired with bsums 2j, 2j + 1 by VPMADDWD). */
KX_INLINE void kx_q4k_scales(const uint8_t *s, int16_t sc16[8], int16_t mn16[16]) {
    uint32_t u[4];
    memcpy(u, s, 12);
    const uint32_t m6 = 0x3F3F3F3F, m4 = 0x0F0F0F0F, m2 = 0x03030303;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4..7 */
    uint32_t mn03 = u[1] & m6;                             /* mins 0..3 */
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);        /* scales 4..7 */
    u[2] = mn03;
    u[0] &= m6; /* scales 0..3 */
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)u);
    _mm_storeu_si128((__m128i *)(void *)sc16, _mm_cvtepu8_epi16(v));
    __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
    _mm_storeu_si128((__m128i *)(void *)mn16, _mm_unpacklo_epi16(mn, mn));
    _mm_storeu_si128((__m128i *)(void *)(mn16 + 8), _mm_unpackhi_epi16(mn, mn));
}

/* x = d*sc_j*q - dmin*mn_j: acc += f32(sum_j sc_j*dot_j) * (d*da)
 *                                  - f32(sum_j mn_j*asum_j) * (dmin*da). */
KX_INLINE void kx_tile_q4k(const int R, const int T, int64_t nb, const uint8_t *w, size_t ws,
                           const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8k);
    const size_t aq = offsetof(kiln_cpu_block_q8k, q), abs_ = offsetof(kiln_cpu_block_q8k, bsums);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[KX_RM][KX_TM];
    KX_UNROLL for (int r = 0; r < R; r++) KX_UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        int16_t sc[KX_RM][8], mn[KX_RM][16];
        __m256 vd[KX_RM], vdm[KX_RM];
        __m256i isum[KX_RM][KX_TM];
        KX_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * 144;
            if (T == 1) kx_prefetch_next(p + R * ws, 144);
            vd[r] = _mm256_set1_ps(kx_f16(p));
            vdm[r] = _mm256_set1_ps(kx_f16(p + 2));
            kx_q4k_scales(p + 4, sc[r], mn[r]);
            KX_UNROLL for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
        }
        for (int c = 0; c < 4; c++) {
            __m256i lo[KX_RM], hi[KX_RM];
            KX_UNROLL for (int r = 0; r < R; r++) {
                __m256i v = kx_load(w + r * ws + b * 144 + 16 + 32 * c);
                lo[r] = _mm256_and_si256(v, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            KX_UNROLL for (int t = 0; t < T; t++) {
                const uint8_t *pq = a + t * as + b * ab + aq + 64 * c;
                __m256i q0 = kx_load(pq), q1 = kx_load(pq + 32);
                KX_UNROLL for (int r = 0; r < R; r++) {
                    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], q0),
                                                   _mm256_set1_epi16(sc[r][2 * c]));
                    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], q1),
                                                   _mm256_set1_epi16(sc[r][2 * c + 1]));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(p0, p1));
                }
            }
        }
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            __m256 vda = _mm256_broadcast_ss((const float *)(const void *)pa);
            __m256i bs = kx_load(pa + abs_);
            KX_UNROLL for (int r = 0; r < R; r++) {
                __m256i ms = _mm256_madd_epi16(bs, kx_load(mn[r]));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]),
                                            _mm256_mul_ps(vd[r], vda), acc[r][t]);
                acc[r][t] =
                    _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(vdm[r], vda), acc[r][t]);
            }
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) KX_UNROLL for (int r = 0; r < R; r++) out[t * ldo + r] =
        kx_hsum(acc[r][t]);
}

/* q6_K: 6-bit q (0..63) x qa by VPMADDUBSW, scaled by the 16-value sub-block's
 * int8 scale; the -32 offset comes off as 32 * sum_j sc_j * asum_j (bsums).
 * Group g (0..3) of half h holds values 128h + 32g + l, l < 32: low bits in
 * ql[64h + 32(g & 1) + l] (low nibble for g < 2, high for g >= 2), high bits
 * in qh[32h + l] >> 2g. */
KX_INLINE __m256i kx_q6k_group(const uint8_t *p, int h, int g) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    __m256i l = kx_load(p + 64 * h + 32 * (g & 1));
    __m256i qh = kx_load(p + 128 + 32 * h);
    l = g < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    __m256i hb;
    if (g == 0)
        hb = _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2);
    else if (g == 1)
        hb = _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2);
    else if (g == 2)
        hb = _mm256_and_si256(qh, m2);
    else
        hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2);
    return _mm256_or_si256(l, hb);
}

KX_INLINE void kx_tile_q6k(const int R, const int T, int64_t nb, const uint8_t *w, size_t ws,
                           const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8k);
    const size_t aq = offsetof(kiln_cpu_block_q8k, q), abs_ = offsetof(kiln_cpu_block_q8k, bsums);
    __m256 acc[KX_RM][KX_TM];
    KX_UNROLL for (int r = 0; r < R; r++) KX_UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256 vd[KX_RM];
        __m256i isum[KX_RM][KX_TM], sc16[KX_RM];
        KX_UNROLL for (int r = 0; r < R; r++) {
            if (T == 1) kx_prefetch_next(w + r * ws + b * 210 + R * ws, 210);
            vd[r] = _mm256_set1_ps(kx_f16(w + r * ws + b * 210 + 208));
            sc16[r] = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(w + r * ws + b * 210 + 192)));
            KX_UNROLL for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++)
            KX_UNROLL for (int g = 0; g < 4; g++) {
                __m256i wv[KX_RM], scv[KX_RM];
                /* scales 8h + 2g (values 0..15 of the group: the low 128 bits of
                 * VPMADDUBSW's result) and 8h + 2g + 1 (the high 128 bits) */
                const __m256i pick = _mm256_set1_epi32(4 * h + g);
                const __m256i spread =
                    _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2,
                                     3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
                KX_UNROLL for (int r = 0; r < R; r++) {
                    wv[r] = kx_q6k_group(w + r * ws + b * 210, h, g);
                    scv[r] =
                        _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16[r], pick), spread);
                }
                KX_UNROLL for (int t = 0; t < T; t++) {
                    __m256i q = kx_load(a + t * as + b * ab + aq + 128 * h + 32 * g);
                    KX_UNROLL for (int r = 0; r < R; r++) isum[r][t] = _mm256_add_epi32(
                        isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], q), scv[r]));
                }
            }
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            __m256 vda = _mm256_broadcast_ss((const float *)(const void *)pa);
            __m256i bs = kx_load(pa + abs_);
            KX_UNROLL for (int r = 0; r < R; r++) {
                __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[r]), 5);
                __m256i is = _mm256_sub_epi32(isum[r][t], corr);
                acc[r][t] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(vd[r], vda), acc[r][t]);
            }
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) KX_UNROLL for (int r = 0; r < R; r++) out[t * ldo + r] =
        kx_hsum(acc[r][t]);
}

#define KX_TILE_Q4K(R, T, r, t)                                                                    \
    kx_tile_q4k(R, T, k / 256, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#define KX_TILE_Q6K(R, T, r, t)                                                                    \
    kx_tile_q6k(R, T, k / 256, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
KX_GEMM(kx_gemm_q4_K, KX_TILE_Q4K, KX_K_R, KX_K_T, KX_K_G)
KX_GEMM(kx_gemm_q6_K, KX_TILE_Q6K, KX_K_R, KX_K_T, KX_K_G)

/* ---- vector helpers ------------------------------------------------------------- */
static float kx_dot_f32(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = kx_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static float kx_dot_f16(const float *a, const uint16_t *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
#define KX_H(j) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + (j))))
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), KX_H(0), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), KX_H(8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), KX_H(16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), KX_H(24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), KX_H(0), s0);
#undef KX_H
    float s = kx_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += a[i] * _cvtsh_ss(b[i]);
    return s;
}

static void kx_axpy_f32(float alpha, const float *x, float *y, int64_t n) {
    __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += alpha * x[i];
}

static void kx_axpy_f16(float alpha, const uint16_t *x, float *y, int64_t n) {
    __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++)
        y[i] += alpha * _cvtsh_ss(x[i]);
}

/* ---- activation quantization ------------------------------------------------------ */
KX_INLINE int32_t kx_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* kiln_cpu_quant_block_sym (kernels_quant_common.h) on 8 lanes, with the same
 * results bit for bit: max|x| (max is order-free; a NaN is never taken, as
 * there), the same two divisions, x * id rounded half to even (VROUNDPS,
 * as nearbyintf in the default mode), clamped to +-127 (a NaN to 0). n: a multiple of
 * 32. qv (n / 8 vectors) keeps the int32 codes for the caller's sums. */
KX_INLINE float kx_quant_block(const float *x, int8_t *q, int n, __m256i *qv) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) /* v > m ? v : m, lane by lane */
        m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.0f),
                 hi = _mm256_set1_ps(127.0f);
    for (int j = 0; j < n; j += 8) {
        __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), vid),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN -> 0 */
        qv[j / 8] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    for (int j = 0; j < n; j += 32) { /* 32 int32 -> 32 int8, in order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qv[j / 8], qv[j / 8 + 1]),
                                       _mm256_packs_epi32(qv[j / 8 + 2], qv[j / 8 + 3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(q + j), p);
    }
    return d;
}

/* The quantize_row of every x86 table: kiln_cpu_quantize_row_common's
 * blocks, byte for byte (test_cpu_kernels checks), on 8 lanes. It was 4.9%
 * of a Qwen3-0.6B Q8_0 pp512 on Zen 4 (perf, 2 threads). */
static void kx_quantize_row(int act, const float *x, void *dst, int64_t k) {
    /* Each block is written in place, field by field: a whole-block copy
     * from the stack read across the field stores, which cannot forward
     * (85% of this function's time in one load, perf on Zen 4). */
    __m256i qv[32];
    uint8_t *out = dst;
#if KX_OPT_IN
    if (act == KILN_CPU_ACT_BF16) {
        kx_bf16_row(x, k, dst);
        return;
    }
#endif
    if (act == KILN_CPU_ACT_Q8 || act == KILN_CPU_ACT_Q8S) {
        for (int64_t i = 0; i < k / 32; i++, x += 32, out += sizeof(kiln_cpu_block_q8)) {
            const float d =
                kx_quant_block(x, (int8_t *)(out + offsetof(kiln_cpu_block_q8, q)), 32, qv);
            const int32_t sum = kx_hsum_i32(
                _mm256_add_epi32(_mm256_add_epi32(qv[0], qv[1]), _mm256_add_epi32(qv[2], qv[3])));
            const float ds = d * (float)sum;
            memcpy(out + offsetof(kiln_cpu_block_q8, d), &d, 4);
            if (act == KILN_CPU_ACT_Q8S)
                memcpy(out + offsetof(kiln_cpu_block_q8, sum), &sum, 4);
            else
                memcpy(out + offsetof(kiln_cpu_block_q8, s), &ds, 4);
        }
    } else if (act == KILN_CPU_ACT_Q8K) {
        for (int64_t i = 0; i < k / 256; i++, x += 256, out += sizeof(kiln_cpu_block_q8k)) {
            const float d =
                kx_quant_block(x, (int8_t *)(out + offsetof(kiln_cpu_block_q8k, q)), 256, qv);
            int16_t bs[16];
            for (int j = 0; j < 16; j++)
                bs[j] = (int16_t)kx_hsum_i32(_mm256_add_epi32(qv[2 * j], qv[2 * j + 1]));
            memcpy(out + offsetof(kiln_cpu_block_q8k, d), &d, 4);
            memcpy(out + offsetof(kiln_cpu_block_q8k, bsums), bs, sizeof bs);
        }
    }
}

/* The table of one variant. */
#define KX_TABLE(sym, vname)                                                                       \
    const kiln_cpu_kernels sym = {                                                                 \
        .name = vname,                                                                             \
        .quantize_row = kx_quantize_row,                                                           \
        .gemm =                                                                                    \
            {                                                                                      \
                [KILN_F32] = kx_gemm_f32,                                                          \
                [KILN_F16] = KX_F16_MATMUL,                                                        \
                [KILN_BF16] = KX_BF16_MATMUL,                                                      \
                [KILN_Q8_0] = kx_gemm_q8_0,                                                        \
                [KILN_Q4_0] = kx_gemm_q4_0,                                                        \
                [KILN_Q4_1] = kx_gemm_q4_1,                                                        \
                [KILN_Q4_K] = kx_gemm_q4_K,                                                        \
                [KILN_Q6_K] = kx_gemm_q6_K,                                                        \
                [KILN_Q4_0_X8] = kx_gemm_q4_0x8,                                                   \
                [KILN_Q4_1_X8] = kx_gemm_q4_1x8,                                                   \
                [KILN_Q8_0_X8] = kx_gemm_q8_0x8,                                                   \
                [KILN_Q4_K_X8] = kx_gemm_q4_Kx8,                                                   \
                [KILN_Q6_K_X8] = kx_gemm_q6_Kx8,                                                   \
            },                                                                                     \
        .dot_f32 = kx_dot_f32,                                                                     \
        .dot_f16 = kx_dot_f16,                                                                     \
        .axpy_f32 = kx_axpy_f32,                                                                   \
        .axpy_f16 = kx_axpy_f16,                                                                   \
        .gemm_bf16_act = {[KILN_F16] = KX_F16_ACT, [KILN_BF16] = KX_BF16_ACT},                     \
        .score_f16 = kx_gemm_f16,                                                                  \
        .opt_in = KX_OPT_IN,                                                                       \
    }

#endif /* KILN_CPU_KERNELS_X86_COMMON_H */
