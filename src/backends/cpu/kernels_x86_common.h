/* kernels_x86_common.h: the x86 kernels, written once on 256-bit vectors and
 * included by each x86 variant file (kernels_avx2.c, kernels_avx512.c,
 * kernels_avx512_vnni.c), which compiles them with its own -m flags. AVX-512
 * builds get 32 vector registers and so larger tiles; the VNNI build does
 * the u8 x s8 dot products of q8_0/q4_0/q4_1 with one VPDPBUSD each.
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

/* Tile sizes (rows of w x rows of a). The AVX2 ones were measured on Zen 3
 * (16 vector registers: larger tiles spill); the AVX-512 ones use the 32
 * registers EVEX gives. Measured on Zen 4 (2026-12-07, one core, pp GOP/s,
 * medians of 3): KX_X8_T = 8 beats 4, 6 and 10 for every x8 kind (q4_0x8
 * 262 / 275 / 287 / 273 at 4 / 6 / 8 / 10, q8_0x8 222 / 237 / 251 / 235,
 * q6_Kx8 190 / 198 / 211 / 200); KX_F_G below. The R x T tiles of the plain
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
#define KX_X8_T 8 /* q4_0x8: activation rows per tile (8 weight rows each) */
#else
#define KX_X8_T 4
#endif
#define KX_G_R 4 /* weight rows per step when there is one activation row */
/* f32, f16, bf16 rows per step when there is one activation row: 8, not 4,
 * for short rows. Measured on Zen 4, one core, f16 x one token, GB/s of
 * weights: k = 1024 (2 KiB rows) 12 -> 16-20, k = 2048 and 4096 the same
 * (21). 8 accumulators, 8 converted rows and the activation still fit AVX2's
 * 16 registers, since each row's vector is used once. */
#define KX_F_G 8
#define KX_RM 4 /* array bounds: the largest R and T above (kx_tile_f: KX_F_G) */
#define KX_TM 4

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
enum { KX_W_F32, KX_W_F16, KX_W_BF16 };

/* 8 weights from p (kind's encoding) as f32. */
KX_INLINE __m256 kx_load_w(int kind, const uint8_t *p) {
    if (kind == KX_W_F32) return _mm256_loadu_ps((const float *)(const void *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (kind == KX_W_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The last n < 8 values of a row, zero-padded (0 * 0 adds nothing). */
KX_INLINE __m256 kx_load_w_tail(int kind, const uint8_t *p, int n) {
    uint8_t buf[32] = {0};
    memcpy(buf, p, (size_t)n * (kind == KX_W_F32 ? 4 : 2));
    return kx_load_w(kind, buf);
}

KX_INLINE __m256 kx_load_a_tail(const float *p, int n) {
    float buf[8] = {0};
    memcpy(buf, p, (size_t)n * 4);
    return _mm256_loadu_ps(buf);
}

KX_INLINE void kx_tile_f(int kind, const int R, const int T, int64_t k, const uint8_t *w, size_t ws,
                         const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t esz = kind == KX_W_F32 ? 4 : 2;
    __m256 acc[KX_F_G][KX_TM];
    KX_UNROLL for (int r = 0; r < R; r++) KX_UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 wv[KX_F_G];
        KX_UNROLL for (int r = 0; r < R; r++) {
            if (T == 1) kx_prefetch_next(w + r * ws + (size_t)i * esz + R * ws, 1);
            wv[r] = kx_load_w(kind, w + r * ws + (size_t)i * esz);
        }
        KX_UNROLL for (int t = 0; t < T; t++) {
            __m256 av = _mm256_loadu_ps((const float *)(const void *)(a + t * as) + i);
            KX_UNROLL for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    if (i < k) {
        int n = (int)(k - i);
        __m256 wv[KX_F_G];
        KX_UNROLL for (int r = 0; r < R; r++) wv[r] =
            kx_load_w_tail(kind, w + r * ws + (size_t)i * esz, n);
        KX_UNROLL for (int t = 0; t < T; t++) {
            __m256 av = kx_load_a_tail((const float *)(const void *)(a + t * as) + i, n);
            KX_UNROLL for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) KX_UNROLL for (int r = 0; r < R; r++) out[t * ldo + r] =
        kx_hsum(acc[r][t]);
}

#define KX_TILE_F32(R, T, r, t)                                                                    \
    kx_tile_f(KX_W_F32, R, T, k, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#define KX_TILE_F16(R, T, r, t)                                                                    \
    kx_tile_f(KX_W_F16, R, T, k, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
#define KX_TILE_BF16(R, T, r, t)                                                                   \
    kx_tile_f(KX_W_BF16, R, T, k, w + (r)*ws, ws, a + (t)*as, as, out + (t)*ldo + (r), ldo)
KX_GEMM(kx_gemm_f32, KX_TILE_F32, KX_F_R, KX_F_T, KX_F_G)
KX_GEMM(kx_gemm_f16, KX_TILE_F16, KX_F_R, KX_F_T, KX_F_G)
KX_GEMM(kx_gemm_bf16, KX_TILE_BF16, KX_F_R, KX_F_T, KX_F_G)

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

/* ---- q4_0x8, q4_1x8 weights (8 rows interleaved) x Q8 activations ------------------- */
/* One 32-byte vector of a packed block holds 4 consecutive columns of each
 * of the 8 rows (quant.c); its low nibbles times the activation's matching
 * 4 values, broadcast to every 32-bit lane, give each row's partial dot
 * product in its own lane: no horizontal sums, and the block's scale work
 * (convert, FMA) is done once for 8 rows. Per block and activation row t:
 *   AVX2: 8 VPMADDUBSW summed in i16 (|sum| <= 8 * 2 * 15 * 127 = 30480,
 *         no saturation), one VPMADDWD by 1.  VNNI: 8 VPDPBUSD.
 *   acc_t += f32(isum) * (dw * da) ; msum_t += m * sa ; out = acc + msum
 * with m = q4_1's minimums or q4_0's -8 * dw (exact): the scalar table's
 * formula, lane for lane. */
KX_INLINE __m256i kx_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The per-block step of every x8 kernel, one row per lane: acc + f32(is) *
 * (dw * da). */
KX_INLINE __m256 kx_x8_update(__m256 acc, __m256i is, __m256 dw, __m256 da) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, da), acc);
}

KX_INLINE void kx_tile_x8(int q41, const int T, int64_t nb, const uint8_t *w, size_t pf,
                          const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8), bb = q41 ? 160 : 144, head = q41 ? 32 : 16;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[KX_X8_T], msum[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = msum[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        if (pf) kx_prefetch_next(blk + pf, (int)bb);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)blk));
        const __m256 mw =
            q41 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(blk + 16)))
                : _mm256_mul_ps(dw, _mm256_set1_ps(-8.0f));
        __m256i s[KX_X8_T];
#if KX_VNNI
        KX_UNROLL for (int t = 0; t < T; t++) s[t] = _mm256_setzero_si256();
#endif
        KX_UNROLL for (int m = 0; m < 4; m++) {
            __m256i v = kx_load(blk + head + 32 * m);
            __m256i lo = _mm256_and_si256(v, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            KX_UNROLL for (int t = 0; t < T; t++) {
                const int8_t *q =
                    (const int8_t *)(a + t * as + b * ab + offsetof(kiln_cpu_block_q8, q));
#if KX_VNNI
                s[t] = kx_dpbusd(s[t], lo, kx_bcast4(q + 4 * m));
                s[t] = kx_dpbusd(s[t], hi, kx_bcast4(q + 16 + 4 * m));
#else
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, kx_bcast4(q + 4 * m)),
                                             _mm256_maddubs_epi16(hi, kx_bcast4(q + 16 + 4 * m)));
                s[t] = m ? _mm256_add_epi16(s[t], p) : p;
#endif
            }
        }
        KX_UNROLL for (int t = 0; t < T; t++) {
            const float *pa = (const float *)(const void *)(a + t * as + b * ab);
#if !KX_VNNI
            s[t] = _mm256_madd_epi16(s[t], _mm256_set1_epi16(1));
#endif
            acc[t] = kx_x8_update(acc[t], s[t], dw, _mm256_broadcast_ss(pa));
            msum[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(pa + 1), msum[t]);
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++)
        _mm256_storeu_ps(out + t * ldo, _mm256_add_ps(acc[t], msum[t]));
}

/* q8_0x8: as q4_0x8, with 8 vectors of 4 int8 columns per 8 rows per block.
 *   AVX2: |w| (u8) x sign(qa, w) by VPMADDUBSW (|pair| <= 2 * 128 * 127, no
 *         saturation), VPMADDWD by 1 per vector, summed in int32.
 *   VNNI: (w + 128) (u8, one XOR per weight vector for the whole tile) x
 *         qa by VPDPBUSD, started from -128 * sum(qa) (the activation
 *         block's exact sum). Measured on Zen 4, one core, pp GOP/s: 147
 *         when the activations took the +128 (offset once per block into a
 *         stack buffer the broadcasts reload: those 4-byte reloads of a
 *         32-byte store stall), 176 with one XOR per broadcast (or |w| x
 *         sign(qa, w), as AVX2 does), and this.
 *   acc_t += f32(isum) * (dw * da): dot_q8_0's formula, lane for lane; the
 *   integer sums are exact, so both give the same bits. */
KX_INLINE void kx_tile_q8x8(const int T, int64_t nb, const uint8_t *w, size_t pf, const uint8_t *a,
                            size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8), aq = offsetof(kiln_cpu_block_q8, q);
    __m256 acc[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 272;
        if (pf) kx_prefetch_next(blk + pf, 272);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)blk));
        __m256i s[KX_X8_T];
#if KX_VNNI
        __m256i wu[8];
        KX_UNROLL for (int m = 0; m < 8; m++) wu[m] =
            _mm256_xor_si256(kx_load(blk + 16 + 32 * m), _mm256_set1_epi8((char)0x80));
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            int32_t sum;
            memcpy(&sum, pa + offsetof(kiln_cpu_block_q8, sum), 4);
            s[t] = _mm256_set1_epi32(-128 * sum);
            KX_UNROLL for (int m = 0; m < 8; m++) s[t] =
                kx_dpbusd(s[t], wu[m], kx_bcast4((const int8_t *)(pa + aq) + 4 * m));
        }
#else
        KX_UNROLL for (int m = 0; m < 8; m++) {
            __m256i v = kx_load(blk + 16 + 32 * m), u = _mm256_abs_epi8(v);
            KX_UNROLL for (int t = 0; t < T; t++) {
                const int8_t *q = (const int8_t *)(a + t * as + b * ab + aq);
                __m256i p = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(u, _mm256_sign_epi8(kx_bcast4(q + 4 * m), v)),
                    _mm256_set1_epi16(1));
                s[t] = m ? _mm256_add_epi32(s[t], p) : p;
            }
        }
#endif
        KX_UNROLL for (int t = 0; t < T; t++) {
            const float *pa = (const float *)(const void *)(a + t * as + b * ab);
            acc[t] = kx_x8_update(acc[t], s[t], dw, _mm256_broadcast_ss(pa));
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) _mm256_storeu_ps(out + t * ldo, acc[t]);
}

/* q4_Kx8 (quant.h): 8 rows per 32-byte vector as q4_0x8, per super-block
 * of 256 columns. The 64 scales and 64 mins (6 bits, x = 8 * sub-block +
 * row) are unpacked once per super-block for the whole tile: low nibbles
 * by AND / shift, top bits by per-half variable shifts, stored as u8 and
 * widened per sub-block to one 32-bit lane per row.
 *   AVX2: per sub-block and activation row, 8 VPMADDUBSW summed in i16
 *         (|sum| <= 8 * 2 * 15 * 127 = 30480), then one VPMADDWD by the
 *         rows' scales (the scale in both 16-bit halves of the lane).
 *   VNNI: 8 VPDPBUSD into int32, then one VPMULLD by the scales.
 * mins: sum_j mn_j * (bsums[2j] + bsums[2j+1]) by one VPMADDWD per sub-block.
 *   acc_t += f32(is) * (d * da) ; acc_t -= f32(ms) * (dmin * da)
 * dot_q4_K's formula, lane for lane (exact integer sums). */
KX_INLINE void kx_q4kx8_unpack(const uint8_t *low, const uint8_t *top, uint8_t out[64]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256i lo = kx_load(low);
    __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)top));
    __m256i h0 = _mm256_and_si256(_mm256_srlv_epi64(hi, _mm256_setr_epi64x(0, 0, 2, 2)), m2);
    __m256i h1 = _mm256_and_si256(_mm256_srlv_epi64(hi, _mm256_setr_epi64x(4, 4, 6, 6)), m2);
    _mm256_storeu_si256((__m256i *)(void *)out,
                        _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_slli_epi16(h0, 4)));
    _mm256_storeu_si256(
        (__m256i *)(void *)(out + 32),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m4), _mm256_slli_epi16(h1, 4)));
}

/* 8 u8 as one 32-bit lane each; `dup`: the value in both 16-bit halves. */
KX_INLINE __m256i kx_lanes8(const uint8_t *p, int dup) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return dup ? _mm256_or_si256(v, _mm256_slli_epi32(v, 16)) : v;
}

KX_INLINE void kx_tile_q4kx8(const int T, int64_t nb, const uint8_t *w, size_t pf, const uint8_t *a,
                             size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8k), aq = offsetof(kiln_cpu_block_q8k, q),
                 abs_ = offsetof(kiln_cpu_block_q8k, bsums);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 1152;
        if (pf) kx_prefetch_next(blk + pf, 1152);
        _Alignas(32) uint8_t sc[64], mn[64];
        kx_q4kx8_unpack(blk + 32, blk + 96, sc);
        kx_q4kx8_unpack(blk + 64, blk + 112, mn);
        __m256i is[KX_X8_T];
        KX_UNROLL for (int t = 0; t < T; t++) is[t] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) { /* sub-block j: nibbles (j & 1) of vectors 8 (j / 2) .. */
            const uint8_t *qs = blk + 128 + 256 * (j / 2);
            __m256i s[KX_X8_T];
            KX_UNROLL for (int m = 0; m < 8; m++) {
                __m256i v = kx_load(qs + 32 * m);
                v = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
                KX_UNROLL for (int t = 0; t < T; t++) {
                    __m256i q =
                        kx_bcast4((const int8_t *)(a + t * as + b * ab + aq) + 32 * j + 4 * m);
#if KX_VNNI
                    s[t] = kx_dpbusd(m ? s[t] : _mm256_setzero_si256(), v, q);
#else
                    __m256i p = _mm256_maddubs_epi16(v, q);
                    s[t] = m ? _mm256_add_epi16(s[t], p) : p;
#endif
                }
            }
#if KX_VNNI
            const __m256i scv = kx_lanes8(sc + 8 * j, 0);
            KX_UNROLL for (int t = 0; t < T; t++) is[t] =
                _mm256_add_epi32(is[t], _mm256_mullo_epi32(s[t], scv));
#else
            const __m256i scv = kx_lanes8(sc + 8 * j, 1);
            KX_UNROLL for (int t = 0; t < T; t++) is[t] =
                _mm256_add_epi32(is[t], _mm256_madd_epi16(s[t], scv));
#endif
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)blk));
        const __m256 dm =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(blk + 16)));
        __m256i mv[8];
        KX_UNROLL for (int j = 0; j < 8; j++) mv[j] = kx_lanes8(mn + 8 * j, 1);
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            __m256i ms = _mm256_setzero_si256();
            KX_UNROLL for (int j = 0; j < 8; j++) ms = _mm256_add_epi32(
                ms, _mm256_madd_epi16(mv[j], kx_bcast4((const int8_t *)(pa + abs_) + 4 * j)));
            const __m256 da = _mm256_broadcast_ss((const float *)(const void *)pa);
            acc[t] = kx_x8_update(acc[t], is[t], dw, da);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, da), acc[t]);
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) _mm256_storeu_ps(out + t * ldo, acc[t]);
}

/* q6_Kx8 (quant.h): per 16-column sub-block s, two ql vectors and one qh
 * vector give the 4 vectors of 6-bit values (0..63) of its 16 columns x 8
 * rows (nibble | 2-bit field << 4, by AND and shifts).
 *   AVX2: VPMADDUBSW per vector, summed two by two in i16 (|sum| <= 2 * 2 *
 *         63 * 127 = 32004), then VPMADDWD by the rows' scales.
 *   VNNI: 4 VPDPBUSD into int32, then VPMULLD by the scales.
 * The -32 comes off as 32 * sum_s sc_s * bsums[s] (one VPMADDWD per two
 * sub-blocks); acc_t += f32(is) * (d * da): dot_q6_K's formula, lane for
 * lane. */
KX_INLINE void kx_tile_q6kx8(const int T, int64_t nb, const uint8_t *w, size_t pf, const uint8_t *a,
                             size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8k), aq = offsetof(kiln_cpu_block_q8k, q),
                 abs_ = offsetof(kiln_cpu_block_q8k, bsums);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    __m256 acc[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 1680;
        if (pf) kx_prefetch_next(blk + pf, 1680);
        __m256i is[KX_X8_T], prev = _mm256_setzero_si256();
        KX_UNROLL for (int t = 0; t < T; t++) is[t] = _mm256_setzero_si256();
        for (int s = 0; s < 16; s++) {
            const __m256i l0 = kx_load(blk + 144 + 64 * s), l1 = kx_load(blk + 176 + 64 * s),
                          h = kx_load(blk + 1168 + 32 * s);
            const __m256i wv[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                _mm256_and_si256(_mm256_slli_epi16(h, 4), m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_and_si256(_mm256_slli_epi16(h, 2), m2)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(h, m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(h, 2), m2))};
            const __m256i sc = _mm256_cvtepi8_epi32(
                _mm_loadl_epi64((const __m128i *)(const void *)(blk + 16 + 8 * s)));
#if !KX_VNNI
            const __m256i scd = _mm256_blend_epi16(sc, _mm256_slli_epi32(sc, 16), 0xAA);
#endif
            KX_UNROLL for (int t = 0; t < T; t++) {
                const int8_t *q = (const int8_t *)(a + t * as + b * ab + aq) + 16 * s;
#if KX_VNNI
                __m256i d = kx_dpbusd(_mm256_setzero_si256(), wv[0], kx_bcast4(q));
                KX_UNROLL for (int u = 1; u < 4; u++) d = kx_dpbusd(d, wv[u], kx_bcast4(q + 4 * u));
                is[t] = _mm256_add_epi32(is[t], _mm256_mullo_epi32(d, sc));
#else
                __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[0], kx_bcast4(q)),
                                               _mm256_maddubs_epi16(wv[1], kx_bcast4(q + 4)));
                __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[2], kx_bcast4(q + 8)),
                                               _mm256_maddubs_epi16(wv[3], kx_bcast4(q + 12)));
                is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_madd_epi16(p01, scd),
                                                                 _mm256_madd_epi16(p23, scd)));
#endif
            }
            if (s & 1) { /* scales s-1, s as i16 pairs against bsums s-1, s */
                const __m256i pv = _mm256_blend_epi16(prev, _mm256_slli_epi32(sc, 16), 0xAA);
                KX_UNROLL for (int t = 0; t < T; t++) {
                    const int8_t *bs = (const int8_t *)(a + t * as + b * ab + abs_) + 2 * (s - 1);
                    is[t] = _mm256_sub_epi32(
                        is[t], _mm256_slli_epi32(_mm256_madd_epi16(pv, kx_bcast4(bs)), 5));
                }
            }
            prev = sc;
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)blk));
        KX_UNROLL for (int t = 0; t < T; t++) {
            const __m256 da =
                _mm256_broadcast_ss((const float *)(const void *)(a + t * as + b * ab));
            acc[t] = kx_x8_update(acc[t], is[t], dw, da);
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) _mm256_storeu_ps(out + t * ldo, acc[t]);
}

enum { KX_X8_Q4_0, KX_X8_Q4_1, KX_X8_Q8_0, KX_X8_Q4_K, KX_X8_Q6_K };

KX_INLINE void kx_gemm_x8(int kind, int64_t k, const uint8_t *w, size_t ws, int64_t nr,
                          const uint8_t *a, size_t as, int64_t nt, float *out, int64_t ldo) {
    const int64_t nb = k / (kind == KX_X8_Q4_K || kind == KX_X8_Q6_K ? 256 : 32), groups = nr / 8;
    const size_t gs = 8 * ws;
#define KX_X8_TILE(T, pf)                                                                          \
    (kind == KX_X8_Q6_K ? kx_tile_q6kx8(T, nb, wg, pf, a + t * as, as, out + t * ldo + 8 * g, ldo) \
     : kind == KX_X8_Q4_K                                                                          \
         ? kx_tile_q4kx8(T, nb, wg, pf, a + t * as, as, out + t * ldo + 8 * g, ldo)                \
     : kind == KX_X8_Q8_0                                                                          \
         ? kx_tile_q8x8(T, nb, wg, pf, a + t * as, as, out + t * ldo + 8 * g, ldo)                 \
         : kx_tile_x8(kind == KX_X8_Q4_1, T, nb, wg, pf, a + t * as, as, out + t * ldo + 8 * g,    \
                      ldo))
    for (int64_t g = 0; g < groups; g++) {
        const uint8_t *wg = w + (size_t)g * gs;
        /* one activation row (token generation): prefetch the next group */
        size_t pf = nt == 1 && g + 1 < groups ? gs : 0;
        int64_t t = 0;
        for (; t + KX_X8_T <= nt; t += KX_X8_T)
            KX_X8_TILE(KX_X8_T, 0);
        for (; t < nt; t++)
            KX_X8_TILE(1, pf);
    }
#undef KX_X8_TILE
}

/* The table entry of one x8 kind. */
#define KX_GEMM_X8(name, KIND)                                                                     \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        kx_gemm_x8(KIND, k, w, ws, nr, a, as, nt, out, ldo);                                       \
    }
KX_GEMM_X8(kx_gemm_q4_0x8, KX_X8_Q4_0)
KX_GEMM_X8(kx_gemm_q4_1x8, KX_X8_Q4_1)
KX_GEMM_X8(kx_gemm_q8_0x8, KX_X8_Q8_0)
KX_GEMM_X8(kx_gemm_q4_Kx8, KX_X8_Q4_K)
KX_GEMM_X8(kx_gemm_q6_Kx8, KX_X8_Q6_K)

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

/* The table of one variant. */
#define KX_TABLE(sym, vname)                                                                       \
    const kiln_cpu_kernels sym = {                                                                 \
        .name = vname,                                                                             \
        .quantize_row = kiln_cpu_quantize_row_common,                                              \
        .gemm =                                                                                    \
            {                                                                                      \
                [KILN_F32] = kx_gemm_f32,                                                          \
                [KILN_F16] = kx_gemm_f16,                                                          \
                [KILN_BF16] = kx_gemm_bf16,                                                        \
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
    }

#endif /* KILN_CPU_KERNELS_X86_COMMON_H */
