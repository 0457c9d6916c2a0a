/* kernels_x86_x8.h: the x86 kernels of the packed x8 weights (q4_0x8,
 * q4_1x8, q8_0x8, q4_Kx8, q6_Kx8: 8 rows interleaved, quant.h), included by
 * kernels_x86_common.h once its helpers are defined.
 *
 * A packed vector holds 4 consecutive columns of each of 8 rows, so one u8 x
 * s8 dot product against the activation's matching 4 values, broadcast to
 * every 32-bit lane, gives each row's partial sum in its own lane: no
 * horizontal sums, and the block's scale work is done once for 8 rows.
 *
 * The tiles (kernels_x86_x8_tiles.h) are written once over vectors of KW_G
 * such 8-row groups and built in two widths:
 *   narrow: one ymm, one group. Every table's one-activation-row steps
 *           (token generation, and the rows after the last full tile).
 *   wide:   the tiles of KX_X8_T activation rows. AVX-512: one zmm holding
 *           two groups, so each activation broadcast, dot product and
 *           scale step serves 16 rows. Measured on Zen 4, one core, pp
 *           GOP/s (bench_kernels, medians of 5, against one group per ymm):
 *           q4_0x8 284 -> 320, q8_0x8 239 -> 324, q4_Kx8 257 -> 309,
 *           q6_Kx8 205 -> 257. AVX2: the narrow tiles (16 registers). The
 *           test tables of the AVX-512 tilings on AVX2 (KX_FORCE_WIDE_TILES)
 *           use two ymm per vector: the same grouping and edges.
 *   With one activation row, two groups at once made decode slower on Zen
 *   4 (two weight streams: Qwen3-0.6B Q4_K tg64, 2 threads, 82 -> 54 t/s),
 *   hence one group there.
 * Every lane runs the same sequence of operations in every width and
 * tiling, so they all give the same bits. */
#ifndef KILN_CPU_KERNELS_X86_X8_H
#define KILN_CPU_KERNELS_X86_X8_H

KX_INLINE int32_t kx_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

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

#if defined(__AVX512F__)
/* The wide width's loads: 32 bytes at p of the first group and at p + gs of
 * the second (gs = 0 repeats the first). */
KX_INLINE __m512i kz_loadg(const uint8_t *p, size_t gs) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(kx_load(p)), kx_load(p + gs), 1);
}
/* 8 f16 of each group -> f32. */
KX_INLINE __m512 kz_cvtph(const uint8_t *p, size_t gs) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p)),
        _mm_loadu_si128((const __m128i *)(const void *)(p + gs)), 1));
}
/* 8 bytes of each group. */
KX_INLINE __m128i kz_8x2(const uint8_t *p, size_t gs) {
    return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)p),
                              _mm_loadl_epi64((const __m128i *)(const void *)(p + gs)));
}
#if defined(__AVX512VNNI__)
#define kz_dpwssd(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))
#else
#define kz_dpwssd(acc, a, b) _mm512_add_epi32((acc), _mm512_madd_epi16((a), (b)))
#endif
/* x negated where v < 0: VPSIGNB (absent from AVX-512) without its zeroing,
 * which no caller needs (they multiply by |v|). */
KX_INLINE __m512i kz_sign8(__m512i x, __m512i v) {
    return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(v), _mm512_setzero_si512(), x);
}
#elif defined(KX_FORCE_WIDE_TILES)
/* The wide width on AVX2: two ymm, one per group. */
typedef struct {
    __m256i v[2];
} kwp_i;
typedef struct {
    __m256 v[2];
} kwp_f;
#define KWP_EACH for (int g_ = 0; g_ < 2; g_++)
#define KWP_MAP2(name, op)                                                                         \
    KX_INLINE kwp_i name(kwp_i a, kwp_i b) {                                                       \
        KWP_EACH a.v[g_] = op(a.v[g_], b.v[g_]);                                                   \
        return a;                                                                                  \
    }
#define KWP_LOAD(name, expr)                                                                       \
    KX_INLINE kwp_i name(const uint8_t *p, size_t gs) {                                            \
        kwp_i r;                                                                                   \
        KWP_EACH {                                                                                 \
            const uint8_t *q = p + g_ * gs;                                                        \
            r.v[g_] = expr;                                                                        \
        }                                                                                          \
        return r;                                                                                  \
    }
#define KWP_SET1(name, type, arg, op)                                                              \
    KX_INLINE type name(arg v) {                                                                   \
        type r;                                                                                    \
        KWP_EACH r.v[g_] = op(v);                                                                  \
        return r;                                                                                  \
    }
KWP_SET1(kwp_set1_32, kwp_i, int32_t, _mm256_set1_epi32)
KWP_SET1(kwp_set1_8, kwp_i, char, _mm256_set1_epi8)
KWP_SET1(kwp_set1_ps, kwp_f, float, _mm256_set1_ps)
KWP_LOAD(kwp_loadg, kx_load(q))
KWP_LOAD(kwp_i8to32, _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q)))
KWP_LOAD(kwp_u8to32, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q)))
KX_INLINE kwp_f kwp_cvtph(const uint8_t *p, size_t gs) {
    kwp_f r;
    KWP_EACH r.v[g_] =
        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + g_ * gs)));
    return r;
}
KWP_MAP2(kwp_and, _mm256_and_si256)
KWP_MAP2(kwp_or, _mm256_or_si256)
KWP_MAP2(kwp_xor, _mm256_xor_si256)
KWP_MAP2(kwp_add16, _mm256_add_epi16)
KWP_MAP2(kwp_add32, _mm256_add_epi32)
KWP_MAP2(kwp_sub32, _mm256_sub_epi32)
KWP_MAP2(kwp_mullo32, _mm256_mullo_epi32)
KWP_MAP2(kwp_madd16, _mm256_madd_epi16)
KWP_MAP2(kwp_maddubs, _mm256_maddubs_epi16)
KWP_MAP2(kwp_sign8, _mm256_sign_epi8)
KX_INLINE kwp_i kwp_abs8(kwp_i a) {
    KWP_EACH a.v[g_] = _mm256_abs_epi8(a.v[g_]);
    return a;
}
KX_INLINE kwp_i kwp_blend_odd16(kwp_i a, kwp_i b) {
    KWP_EACH a.v[g_] = _mm256_blend_epi16(a.v[g_], b.v[g_], 0xAA);
    return a;
}
KX_INLINE kwp_i kwp_srli16(kwp_i a, int n) {
    KWP_EACH a.v[g_] = _mm256_srli_epi16(a.v[g_], n);
    return a;
}
KX_INLINE kwp_i kwp_slli16(kwp_i a, int n) {
    KWP_EACH a.v[g_] = _mm256_slli_epi16(a.v[g_], n);
    return a;
}
KX_INLINE kwp_i kwp_slli32(kwp_i a, int n) {
    KWP_EACH a.v[g_] = _mm256_slli_epi32(a.v[g_], n);
    return a;
}
KX_INLINE kwp_i kwp_dpwssd(kwp_i acc, kwp_i a, kwp_i b) {
    KWP_EACH acc.v[g_] = kx_dpwssd(acc.v[g_], a.v[g_], b.v[g_]);
    return acc;
}
#if KX_VNNI
KX_INLINE kwp_i kwp_dpbusd(kwp_i acc, kwp_i u, kwp_i s) {
    KWP_EACH acc.v[g_] = kx_dpbusd(acc.v[g_], u.v[g_], s.v[g_]);
    return acc;
}
#endif
KX_INLINE kwp_f kwp_cvt_ps(kwp_i a) {
    kwp_f r;
    KWP_EACH r.v[g_] = _mm256_cvtepi32_ps(a.v[g_]);
    return r;
}
KX_INLINE kwp_f kwp_mul(kwp_f a, kwp_f b) {
    KWP_EACH a.v[g_] = _mm256_mul_ps(a.v[g_], b.v[g_]);
    return a;
}
KX_INLINE kwp_f kwp_add_ps(kwp_f a, kwp_f b) {
    KWP_EACH a.v[g_] = _mm256_add_ps(a.v[g_], b.v[g_]);
    return a;
}
KX_INLINE kwp_f kwp_fmadd(kwp_f a, kwp_f b, kwp_f c) {
    KWP_EACH c.v[g_] = _mm256_fmadd_ps(a.v[g_], b.v[g_], c.v[g_]);
    return c;
}
KX_INLINE kwp_f kwp_fnmadd(kwp_f a, kwp_f b, kwp_f c) {
    KWP_EACH c.v[g_] = _mm256_fnmadd_ps(a.v[g_], b.v[g_], c.v[g_]);
    return c;
}
/* The first ng groups' 8 floats each. */
KX_INLINE void kwp_store(float *out, kwp_f v, int ng) {
    KWP_EACH if (g_ < ng) _mm256_storeu_ps(out + 8 * g_, v.v[g_]);
}
#undef KWP_EACH
#undef KWP_MAP2
#undef KWP_LOAD
#undef KWP_SET1
#endif

#include "backends/cpu/kernels_x86_amx.h"

/* The narrow tiles: kx_tile_*_n. */
#define KW_WIDTH 1
#define KW_TILE(name) name##_n
#include "backends/cpu/kernels_x86_x8_tiles.h"

/* The wide tiles, kx_tile_*_w, and the rows one step takes. */
#if defined(__AVX512F__)
#define KX_X8_WIDE 2
#define KW_WIDTH 2
#elif defined(KX_FORCE_WIDE_TILES)
#define KX_X8_WIDE 2
#define KW_WIDTH 3
#else
#define KX_X8_WIDE 1 /* AVX2: the narrow tiles throughout */
#endif
#if KX_X8_WIDE > 1
#define KW_TILE(name) name##_w
#include "backends/cpu/kernels_x86_x8_tiles.h"
#else
#define kx_tile_x8_w kx_tile_x8_n
#define kx_tile_q8x8_w kx_tile_q8x8_n
#define kx_tile_q4kx8_w kx_tile_q4kx8_n
#define kx_tile_q6kx8_w kx_tile_q6kx8_n
#endif

/* ---- the gemm -------------------------------------------------------------------- */
enum { KX_X8_Q4_0, KX_X8_Q4_1, KX_X8_Q8_0, KX_X8_Q4_K, KX_X8_Q6_K };

/* Steps of KX_X8_WIDE groups (a last short step repeats its group in the
 * vector and stores one): the full tiles of KX_X8_T activation rows wide,
 * then each group's remaining rows one at a time, narrow. */
KX_INLINE void kx_gemm_x8(int kind, int64_t k, const uint8_t *w, size_t ws, int64_t nr,
                          const uint8_t *a, size_t as, int64_t nt, float *out, int64_t ldo) {
    const int64_t nb = k / (kind == KX_X8_Q4_K || kind == KX_X8_Q6_K ? 256 : 32), groups = nr / 8;
    const size_t gs = 8 * ws;
    const int64_t nfull = nt / KX_X8_T * KX_X8_T;
#define KX_X8_TILE(WIDTH, T, wp, wgs, pf, t, o, ng)                                                \
    (kind == KX_X8_Q6_K   ? kx_tile_q6kx8_##WIDTH(T, nb, wp, wgs, pf, a + (t)*as, as, o, ldo, ng)  \
     : kind == KX_X8_Q4_K ? kx_tile_q4kx8_##WIDTH(T, nb, wp, wgs, pf, a + (t)*as, as, o, ldo, ng)  \
     : kind == KX_X8_Q8_0                                                                          \
         ? kx_tile_q8x8_##WIDTH(T, nb, wp, wgs, pf, a + (t)*as, as, o, ldo, ng)                    \
         : kx_tile_x8_##WIDTH(kind == KX_X8_Q4_1, T, nb, wp, wgs, pf, a + (t)*as, as, o, ldo, ng))
    for (int64_t g = 0; g < groups; g += KX_X8_WIDE) {
        const int ng = groups - g < KX_X8_WIDE ? (int)(groups - g) : KX_X8_WIDE;
        const uint8_t *wg = w + (size_t)g * gs;
        for (int64_t t = 0; t < nfull; t += KX_X8_T)
            KX_X8_TILE(w, KX_X8_T, wg, ng == KX_X8_WIDE ? gs : 0, 0, t, out + t * ldo + 8 * g, ng);
        for (int h = 0; h < ng; h++) {
            /* one activation row (token generation): prefetch the next group */
            const size_t pf = nt == 1 && g + h + 1 < groups ? gs : 0;
            for (int64_t t = nfull; t < nt; t++)
                KX_X8_TILE(n, 1, wg + (size_t)h * gs, 0, pf, t, out + t * ldo + 8 * (g + h), 1);
        }
    }
#undef KX_X8_TILE
}

#if KX_AMX && KX_X8_WIDE != 2
#error "the AMX kernels need the wide x8 tiles (AVX-512, or KX_FORCE_WIDE_TILES)"
#endif
#if KX_AMX
/* q8_0x8, q4_0x8, q4_1x8 with AMX: whole tiles of 16 activation rows x two
 * groups by kxa_tile_x8_w (each pair of groups against every tile of
 * activation rows while it is in cache), everything else (fewer than 16
 * activation rows: token generation; the last rows; an odd group) by
 * kx_gemm_x8's VNNI tiles, which give the same bits. The configuration is
 * loaded per call and released after, so no other code sees tile state. */
KX_INLINE void kxa_gemm_x8(int kind, int64_t k, const uint8_t *w, size_t ws, int64_t nr,
                           const uint8_t *a, size_t as, int64_t nt, float *out, int64_t ldo) {
    const int64_t nb = k / 32, pairs = nr / 16, n16 = nt / KXA_M * KXA_M;
    const size_t gs = 8 * ws;
    if (!pairs || !n16) {
        kx_gemm_x8(kind, k, w, ws, nr, a, as, nt, out, ldo);
        return;
    }
    kxa_config();
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t t = 0; t < n16; t += KXA_M)
            kxa_tile_x8_w(kind == KX_X8_Q8_0, kind == KX_X8_Q4_1, nb, w + (size_t)(2 * p) * gs, gs,
                          a + (size_t)t * as, as, out + t * ldo + 16 * p, ldo);
    kxa_release();
    if (nr > 16 * pairs)
        kx_gemm_x8(kind, k, w + (size_t)(2 * pairs) * gs, ws, nr - 16 * pairs, a, as, n16,
                   out + 16 * pairs, ldo);
    if (nt > n16)
        kx_gemm_x8(kind, k, w, ws, nr, a + (size_t)n16 * as, as, nt - n16, out + n16 * ldo, ldo);
}
#endif

/* The table entry of one x8 kind; q4_0x8, q4_1x8 and q8_0x8 by AMX where
 * the build has it. */
#if KX_AMX
#define KX_X8_AMX_OR kxa_gemm_x8
#else
#define KX_X8_AMX_OR kx_gemm_x8
#endif
#define KX_GEMM_X8(name, driver, KIND)                                                             \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        driver(KIND, k, w, ws, nr, a, as, nt, out, ldo);                                           \
    }
KX_GEMM_X8(kx_gemm_q4_0x8, KX_X8_AMX_OR, KX_X8_Q4_0)
KX_GEMM_X8(kx_gemm_q4_1x8, KX_X8_AMX_OR, KX_X8_Q4_1)
KX_GEMM_X8(kx_gemm_q8_0x8, KX_X8_AMX_OR, KX_X8_Q8_0)
KX_GEMM_X8(kx_gemm_q4_Kx8, kx_gemm_x8, KX_X8_Q4_K)
KX_GEMM_X8(kx_gemm_q6_Kx8, kx_gemm_x8, KX_X8_Q6_K)

#endif /* KILN_CPU_KERNELS_X86_X8_H */
