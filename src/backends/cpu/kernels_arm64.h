/* kernels_arm64.h: the bodies of the ARM64 kernel tables, included once by
 * each of kernels_neon.c (ARMv8.0 Advanced SIMD), kernels_dotprod.c (SDOT)
 * and kernels_i8mm.c (SMMLA), which are compiled with their own -march and
 * define KILN_ARM_SDOT / KILN_ARM_SMMLA before including it. Everything here
 * is static: each table gets its own copy, built for its instruction set.
 *
 * How an output is computed, whatever tile it falls in (kernels.h: outputs
 * must not depend on the tiling; tests/test_cpu_kernels.c checks it bit for
 * bit):
 *   - quantized weights: each block's integer dot is exact, so SMULL/SADALP,
 *     SDOT and SMMLA all give the same int32; the f32 sum then takes one
 *     fused step per block in the order of k, sum = fma((float)is, dw * da,
 *     sum) (q4_1 adds fma(m, sa, sum); q4_K fma(-(float)ms, dmin * da, sum)),
 *     with one vector lane per output, so a 2x2 SMMLA tile, a 4x2 SDOT tile
 *     and a lone output round identically;
 *   - plain rows (f32, f16, bf16): eight partial sums per output (value i in
 *     sum i % 8, two f32x4 updated by FMLA), the last k % 8 values
 *     zero-padded, reduced ((s0+s4) + (s2+s6)) + ((s1+s5) + (s3+s7)) as the
 *     scalar table does.
 * Loads are byte loads (vld1q_u8 and memcpy): GGUF rows and blocks are not
 * aligned. Tiles: 4 weight rows x 2 activation rows (2 x 2 for SMMLA and the
 * K-quants), and 4 weight rows x 1 activation row (2 for q6_K) in decode, so
 * each weight load serves two activation rows in prefill and each
 * activation load several weight rows in decode. */
#ifndef KILN_CPU_KERNELS_ARM64_H
#define KILN_CPU_KERNELS_ARM64_H

#if !defined(__aarch64__)
#error "kernels_arm64.h is for ARM64 builds only"
#endif

#include <arm_neon.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_quant_common.h"

#ifndef KILN_ARM_SDOT
#define KILN_ARM_SDOT 0
#endif
#ifndef KILN_ARM_SMMLA
#define KILN_ARM_SMMLA 0
#endif

/* The tile functions take R (weight rows) and T (activation rows) as
 * constants from the gemm loops; inlined, their small arrays become
 * registers. */
#define KA_INLINE static inline __attribute__((always_inline))

/* ---- small pieces ------------------------------------------------------------ */
KA_INLINE float ka_f16(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
}

/* acc + the dot of 16 int8 pairs, spread over acc's lanes. Without SDOT:
 * SMULL + SMLAL2 (two products per int16 lane: |w| <= 128, |a| <= 127, so at
 * most 32512) then SADALP into int32. */
KA_INLINE int32x4_t ka_dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
#if KILN_ARM_SDOT
    return vdotq_s32(acc, w, a);
#else
    int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(a));
    p = vmlal_high_s8(p, w, a);
    return vpadalq_s16(acc, p);
#endif
}

#if KILN_ARM_SMMLA
/* acc + the 2 x 2 dots of 16-value rows: [w0.a0, w0.a1, w1.a0, w1.a1]. SMMLA
 * takes each operand as two 8-byte rows, so the rows are interleaved by
 * halves first. */
KA_INLINE int32x4_t ka_mmla16(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t a0,
                              int8x16_t a1) {
    int64x2_t W0 = vreinterpretq_s64_s8(w0), W1 = vreinterpretq_s64_s8(w1);
    int64x2_t A0 = vreinterpretq_s64_s8(a0), A1 = vreinterpretq_s64_s8(a1);
    acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip1q_s64(W0, W1)),
                     vreinterpretq_s8_s64(vzip1q_s64(A0, A1)));
    return vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip2q_s64(W0, W1)),
                      vreinterpretq_s8_s64(vzip2q_s64(A0, A1)));
}
#endif

/* Outputs of an R x T tile are numbered o = r * T + t and live in lane o % 4
 * of vector o / 4. ka_hsum: n int32x4 partial sums to one lane each. */
KA_INLINE void ka_hsum(int n, const int32x4_t *acc, int32x4_t *v) {
    const int32x4_t z = vdupq_n_s32(0);
    for (int g = 0; 4 * g < n; g++) {
        int32x4_t a0 = acc[4 * g], a1 = 4 * g + 1 < n ? acc[4 * g + 1] : z;
        int32x4_t a2 = 4 * g + 2 < n ? acc[4 * g + 2] : z, a3 = 4 * g + 3 < n ? acc[4 * g + 3] : z;
        v[g] = vpaddq_s32(vpaddq_s32(a0, a1), vpaddq_s32(a2, a3));
    }
}

/* lanes x[r] * y[t] (an f32 product per lane, as a scalar one rounds). The
 * lanes are set one by one (INS) rather than stored and reloaded, which
 * would stall store-to-load forwarding once per block. (GCC 12 takes the
 * first lane write for a read of an unset vector: a false alarm.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
KA_INLINE void ka_outer(int R, int T, const float *x, const float *y, float32x4_t *v) {
    float32x4_t l[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            l[(r * T + t) / 4][(r * T + t) % 4] = x[r] * y[t];
    v[0] = l[0];
    v[1] = l[1];
}

/* lanes x[r] (by_row) or x[t]. */
KA_INLINE void ka_spread(int R, int T, const float *x, int by_row, float32x4_t *v) {
    float32x4_t l[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            l[(r * T + t) / 4][(r * T + t) % 4] = by_row ? x[r] : x[t];
    v[0] = l[0];
    v[1] = l[1];
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

KA_INLINE void ka_store(int R, int T, const float32x4_t *sum, float *out, int64_t ldo) {
    float buf[8];
    vst1q_f32(buf, sum[0]);
    if (R * T > 4) vst1q_f32(buf + 4, sum[1]);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            out[t * ldo + r] = buf[r * T + t];
}

/* ---- plain rows: f32, f16, bf16 ------------------------------------------------ */
/* 8 values of a row of dtype dt as two f32x4. f16 converts by FCVTL (base
 * ARMv8), bf16 is the top half of an f32. */
KA_INLINE void ka_load8(kiln_dtype dt, const uint8_t *p, float32x4_t *lo, float32x4_t *hi) {
    if (dt == KILN_F32) {
        *lo = vreinterpretq_f32_u8(vld1q_u8(p));
        *hi = vreinterpretq_f32_u8(vld1q_u8(p + 16));
    } else if (dt == KILN_F16) {
        float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(p));
        *lo = vcvt_f32_f16(vget_low_f16(h));
        *hi = vcvt_high_f32_f16(h);
    } else {
        uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(p));
        *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
}

/* One step of 8 values for an R x T tile: w rows ws bytes apart, activation
 * rows (f32) as apart. */
KA_INLINE void ka_plain_step(kiln_dtype dt, int R, int T, const uint8_t *w, size_t ws,
                             const uint8_t *a, size_t as, float32x4_t (*s0)[2],
                             float32x4_t (*s1)[2]) {
    float32x4_t al[2], ah[2];
    for (int t = 0; t < T; t++) {
        al[t] = vreinterpretq_f32_u8(vld1q_u8(a + t * as));
        ah[t] = vreinterpretq_f32_u8(vld1q_u8(a + t * as + 16));
    }
    for (int r = 0; r < R; r++) {
        float32x4_t wl, wh;
        ka_load8(dt, w + r * ws, &wl, &wh);
        for (int t = 0; t < T; t++) {
            s0[r][t] = vfmaq_f32(s0[r][t], wl, al[t]);
            s1[r][t] = vfmaq_f32(s1[r][t], wh, ah[t]);
        }
    }
}

KA_INLINE void ka_tile_plain(kiln_dtype dt, int R, int T, int64_t k, const uint8_t *w, size_t ws,
                             const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t esz = dt == KILN_F32 ? 4 : 2;
    float32x4_t s0[4][2], s1[4][2];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            s0[r][t] = s1[r][t] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        ka_plain_step(dt, R, T, w + (size_t)i * esz, ws, a + (size_t)i * 4, as, s0, s1);
    if (i < k) {
        /* The last k % 8 values, zero-padded: fma(0, 0, s) leaves s as it is. */
        size_t n = (size_t)(k - i);
        uint8_t tw[4][32], ta[2][32];
        memset(tw, 0, sizeof tw);
        memset(ta, 0, sizeof ta);
        for (int r = 0; r < R; r++)
            memcpy(tw[r], w + r * ws + (size_t)i * esz, n * esz);
        for (int t = 0; t < T; t++)
            memcpy(ta[t], a + t * as + (size_t)i * 4, n * 4);
        ka_plain_step(dt, R, T, tw[0], 32, ta[0], 32, s0, s1);
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float32x4_t v = vaddq_f32(s0[r][t], s1[r][t]); /* s0+s4, s1+s5, s2+s6, s3+s7 */
            float32x2_t p = vadd_f32(vget_low_f32(v), vget_high_f32(v));
            out[t * ldo + r] = vpadds_f32(p);
        }
}

/* ---- q8_0, q4_0, q4_1 against Q8 activations -------------------------------------- */
/* One 32-value weight block as int8 values 0..15 (lo) and 16..31 (hi), its
 * scale d and (q4_1) minimum m. */
KA_INLINE void ka_unpack32(kiln_dtype dt, const uint8_t *b, int8x16_t *lo, int8x16_t *hi, float *d,
                           float *m) {
    *d = ka_f16(b);
    if (dt == KILN_Q8_0) {
        *lo = vreinterpretq_s8_u8(vld1q_u8(b + 2));
        *hi = vreinterpretq_s8_u8(vld1q_u8(b + 18));
    } else if (dt == KILN_Q4_0) {
        uint8x16_t q = vld1q_u8(b + 2);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    } else {
        *m = ka_f16(b + 2);
        uint8x16_t q = vld1q_u8(b + 4);
        *lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
        *hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
    }
}

KA_INLINE void ka_tile_q32(kiln_dtype dt, int R, int T, int64_t k, const uint8_t *w, size_t ws,
                           const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t bs = dt == KILN_Q8_0 ? 34 : dt == KILN_Q4_0 ? 18 : 20;
    const int O = R * T, G = (O + 3) / 4;
    float32x4_t sum[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t b = 0; b < k / 32; b++) {
        int8x16_t wl[4], wh[4], al[2], ah[2];
        float dw[4], mw[4] = {0}, da[2], sa[2];
        for (int r = 0; r < R; r++)
            ka_unpack32(dt, w + r * ws + (size_t)b * bs, &wl[r], &wh[r], &dw[r], &mw[r]);
        for (int t = 0; t < T; t++) {
            const kiln_cpu_block_q8 *ab = (const kiln_cpu_block_q8 *)(const void *)(a + t * as) + b;
            al[t] = vld1q_s8(ab->q);
            ah[t] = vld1q_s8(ab->q + 16);
            da[t] = ab->d;
            sa[t] = ab->s;
        }
        int32x4_t iv[2];
#if KILN_ARM_SMMLA
        if (R == 2 && T == 2) {
            iv[0] = ka_mmla16(ka_mmla16(vdupq_n_s32(0), wl[0], wl[1], al[0], al[1]), wh[0], wh[1],
                              ah[0], ah[1]);
        } else
#endif
        {
            int32x4_t acc[8];
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++)
                    acc[r * T + t] = ka_dot16(ka_dot16(vdupq_n_s32(0), wl[r], al[t]), wh[r], ah[t]);
            ka_hsum(O, acc, iv);
        }
        float32x4_t sc[2];
        ka_outer(R, T, dw, da, sc);
        for (int g = 0; g < G; g++)
            sum[g] = vfmaq_f32(sum[g], vcvtq_f32_s32(iv[g]), sc[g]);
        if (dt == KILN_Q4_1) {
            float32x4_t m[2], s[2];
            ka_spread(R, T, mw, 1, m);
            ka_spread(R, T, sa, 0, s);
            for (int g = 0; g < G; g++)
                sum[g] = vfmaq_f32(sum[g], m[g], s[g]);
        }
    }
    ka_store(R, T, sum, out, ldo);
}

/* ---- q4_K and q6_K against Q8K activations ---------------------------------------- */
/* q4_K's eight 6-bit scales and mins (layout in quant.c), unpacked four bytes
 * at a time: bytes 0..3 and 4..7 hold the low 6 bits of scales 0..3 and mins
 * 0..3; scales and mins 4..7 take their low nibbles from bytes 8..11 and
 * their top 2 bits from the top of bytes 0..3 (scales) and 4..7 (mins). */
KA_INLINE void ka_q4k_scales(const uint8_t *s12, uint8_t *sc, uint8_t *mn) {
    uint32_t u[3], o[4];
    memcpy(u, s12, 12);
    o[0] = u[0] & 0x3f3f3f3fu;
    o[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    o[2] = u[1] & 0x3f3f3f3fu;
    o[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    memcpy(sc, o, 8);
    memcpy(mn, o + 2, 8);
}

/* sum_j mn[j] * (bsums[2j] + bsums[2j+1]) as int32 partials. */
KA_INLINE int32x4_t ka_q4k_mins(const uint8_t *mn, const int16_t *bsums) {
    int16x8_t bs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    return vmlal_high_s16(vmull_s16(vget_low_s16(m), vget_low_s16(bs)), m, bs);
}

static inline int32x4_t ka_pair(int32_t x, int32_t y) {
    return vcombine_s32(vdup_n_s32(x), vdup_n_s32(y));
}

KA_INLINE void ka_tile_q4_K(int R, int T, int64_t k, const uint8_t *w, size_t ws, const uint8_t *a,
                            size_t as, float *out, int64_t ldo) {
    const int O = R * T, G = (O + 3) / 4;
    float32x4_t sum[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t b = 0; b < k / 256; b++) {
        const uint8_t *wb[4];
        uint8_t sc[4][8], mn[4][8];
        float dw[4], dm[4], da[2];
        const kiln_cpu_block_q8k *ab[2];
        for (int r = 0; r < R; r++) {
            wb[r] = w + r * ws + (size_t)b * 144;
            dw[r] = ka_f16(wb[r]);
            dm[r] = ka_f16(wb[r] + 2);
            ka_q4k_scales(wb[r] + 4, sc[r], mn[r]);
        }
        for (int t = 0; t < T; t++) {
            ab[t] = (const kiln_cpu_block_q8k *)(const void *)(a + t * as) + b;
            da[t] = ab[t]->d;
        }
        int32x4_t iv[2], acc[8];
        for (int o = 0; o < O; o++)
            acc[o] = vdupq_n_s32(0);
        /* Sub-blocks 2p (low nibbles) and 2p+1 (high nibbles) of 32 bytes. */
        for (int p = 0; p < 4; p++) {
            int8x16_t l0[4], l1[4], h0[4], h1[4], a0[2], a1[2], a2[2], a3[2];
            for (int r = 0; r < R; r++) {
                uint8x16_t q0 = vld1q_u8(wb[r] + 16 + 32 * p), q1 = vld1q_u8(wb[r] + 32 + 32 * p);
                l0[r] = vreinterpretq_s8_u8(vandq_u8(q0, m4));
                l1[r] = vreinterpretq_s8_u8(vandq_u8(q1, m4));
                h0[r] = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4));
                h1[r] = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
            }
            for (int t = 0; t < T; t++) {
                a0[t] = vld1q_s8(ab[t]->q + 64 * p);
                a1[t] = vld1q_s8(ab[t]->q + 64 * p + 16);
                a2[t] = vld1q_s8(ab[t]->q + 64 * p + 32);
                a3[t] = vld1q_s8(ab[t]->q + 64 * p + 48);
            }
#if KILN_ARM_SMMLA
            if (R == 2 && T == 2) {
                int32x4_t dl = ka_mmla16(ka_mmla16(vdupq_n_s32(0), l0[0], l0[1], a0[0], a0[1]),
                                         l1[0], l1[1], a1[0], a1[1]);
                int32x4_t dh = ka_mmla16(ka_mmla16(vdupq_n_s32(0), h0[0], h0[1], a2[0], a2[1]),
                                         h1[0], h1[1], a3[0], a3[1]);
                acc[0] = vmlaq_s32(acc[0], dl, ka_pair(sc[0][2 * p], sc[1][2 * p]));
                acc[0] = vmlaq_s32(acc[0], dh, ka_pair(sc[0][2 * p + 1], sc[1][2 * p + 1]));
                continue;
            }
#endif
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++) {
                    int32x4_t dl = ka_dot16(ka_dot16(vdupq_n_s32(0), l0[r], a0[t]), l1[r], a1[t]);
                    int32x4_t dh = ka_dot16(ka_dot16(vdupq_n_s32(0), h0[r], a2[t]), h1[r], a3[t]);
                    acc[r * T + t] = vmlaq_n_s32(acc[r * T + t], dl, sc[r][2 * p]);
                    acc[r * T + t] = vmlaq_n_s32(acc[r * T + t], dh, sc[r][2 * p + 1]);
                }
        }
#if KILN_ARM_SMMLA
        if (R == 2 && T == 2)
            iv[0] = acc[0];
        else
#endif
            ka_hsum(O, acc, iv);
        int32x4_t mp[8], mv[2];
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++)
                mp[r * T + t] = ka_q4k_mins(mn[r], ab[t]->bsums);
        ka_hsum(O, mp, mv);
        float32x4_t s1[2], s2[2];
        ka_outer(R, T, dw, da, s1);
        ka_outer(R, T, dm, da, s2);
        for (int g = 0; g < G; g++) {
            sum[g] = vfmaq_f32(sum[g], vcvtq_f32_s32(iv[g]), s1[g]);
            sum[g] = vfmaq_f32(sum[g], vcvtq_f32_s32(vnegq_s32(mv[g])), s2[g]);
        }
    }
    ka_store(R, T, sum, out, ldo);
}

/* q6_K: half h of a super-block (128 values) as eight 16-value sub-blocks
 * 8h + s, each (4 low bits | 2 high bits << 4) - 32: values 32g + l take ql
 * byte l (+32 for odd g; low nibble for g < 2, high for g >= 2) and bits 2g
 * of qh byte l. */
KA_INLINE void ka_q6k_half(const uint8_t *ql, const uint8_t *qh, int8x16_t *v) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
    uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16), l2 = vld1q_u8(ql + 32),
               l3 = vld1q_u8(ql + 48);
    uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
    uint8x16_t u[8] = {
        vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(h0, 4), m2)),
        vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(h1, 4), m2)),
        vorrq_u8(vandq_u8(l2, m4), vandq_u8(vshlq_n_u8(h0, 2), m2)),
        vorrq_u8(vandq_u8(l3, m4), vandq_u8(vshlq_n_u8(h1, 2), m2)),
        vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h0, m2)),
        vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(h1, m2)),
        vorrq_u8(vshrq_n_u8(l2, 4), vandq_u8(vshrq_n_u8(h0, 2), m2)),
        vorrq_u8(vshrq_n_u8(l3, 4), vandq_u8(vshrq_n_u8(h1, 2), m2)),
    };
    for (int s = 0; s < 8; s++)
        v[s] = vsubq_s8(vreinterpretq_s8_u8(u[s]), vdupq_n_s8(32));
}

KA_INLINE void ka_tile_q6_K(int R, int T, int64_t k, const uint8_t *w, size_t ws, const uint8_t *a,
                            size_t as, float *out, int64_t ldo) {
    const int O = R * T, G = (O + 3) / 4;
    float32x4_t sum[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t b = 0; b < k / 256; b++) {
        const uint8_t *wb[2];
        const int8_t *sc[2];
        float dw[2], da[2];
        const kiln_cpu_block_q8k *ab[2];
        for (int r = 0; r < R; r++) {
            wb[r] = w + r * ws + (size_t)b * 210;
            sc[r] = (const int8_t *)(wb[r] + 192);
            dw[r] = ka_f16(wb[r] + 208);
        }
        for (int t = 0; t < T; t++) {
            ab[t] = (const kiln_cpu_block_q8k *)(const void *)(a + t * as) + b;
            da[t] = ab[t]->d;
        }
        int32x4_t acc[4], iv[2];
        for (int o = 0; o < O; o++)
            acc[o] = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            int8x16_t v[2][8];
            for (int r = 0; r < R; r++)
                ka_q6k_half(wb[r] + 64 * h, wb[r] + 128 + 32 * h, v[r]);
            for (int s = 0; s < 8; s++) {
                int8x16_t av[2];
                for (int t = 0; t < T; t++)
                    av[t] = vld1q_s8(ab[t]->q + 128 * h + 16 * s);
#if KILN_ARM_SMMLA
                if (R == 2 && T == 2) {
                    int32x4_t d = ka_mmla16(vdupq_n_s32(0), v[0][s], v[1][s], av[0], av[1]);
                    acc[0] = vmlaq_s32(acc[0], d, ka_pair(sc[0][8 * h + s], sc[1][8 * h + s]));
                    continue;
                }
#endif
                for (int r = 0; r < R; r++)
                    for (int t = 0; t < T; t++)
                        acc[r * T + t] =
                            vmlaq_n_s32(acc[r * T + t], ka_dot16(vdupq_n_s32(0), v[r][s], av[t]),
                                        sc[r][8 * h + s]);
            }
        }
#if KILN_ARM_SMMLA
        if (R == 2 && T == 2)
            iv[0] = acc[0];
        else
#endif
            ka_hsum(O, acc, iv);
        float32x4_t s1[2];
        ka_outer(R, T, dw, da, s1);
        for (int g = 0; g < G; g++)
            sum[g] = vfmaq_f32(sum[g], vcvtq_f32_s32(iv[g]), s1[g]);
    }
    ka_store(R, T, sum, out, ldo);
}

/* ---- the gemm entries ---------------------------------------------------------------- */
/* Activation rows in pairs (RP weight rows a tile), then one at a time (R1
 * weight rows a tile); leftover weight rows one by one. */
#define KA_GEMM(name, TILE, RP, R1)                                                                \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        const uint8_t *W = w, *A = a;                                                              \
        int64_t t = 0, r;                                                                          \
        for (; t + 2 <= nt; t += 2) {                                                              \
            for (r = 0; r + RP <= nr; r += RP)                                                     \
                TILE(RP, 2, k, W + r * ws, ws, A + t * as, as, out + t * ldo + r, ldo);            \
            for (; r < nr; r++)                                                                    \
                TILE(1, 2, k, W + r * ws, ws, A + t * as, as, out + t * ldo + r, ldo);             \
        }                                                                                          \
        for (; t < nt; t++) {                                                                      \
            for (r = 0; r + R1 <= nr; r += R1)                                                     \
                TILE(R1, 1, k, W + r * ws, ws, A + t * as, as, out + t * ldo + r, ldo);            \
            for (; r < nr; r++)                                                                    \
                TILE(1, 1, k, W + r * ws, ws, A + t * as, as, out + t * ldo + r, ldo);             \
        }                                                                                          \
    }

#define KA_TILE_F32(R, T, ...) ka_tile_plain(KILN_F32, R, T, __VA_ARGS__)
#define KA_TILE_F16(R, T, ...) ka_tile_plain(KILN_F16, R, T, __VA_ARGS__)
#define KA_TILE_BF16(R, T, ...) ka_tile_plain(KILN_BF16, R, T, __VA_ARGS__)
#define KA_TILE_Q8_0(R, T, ...) ka_tile_q32(KILN_Q8_0, R, T, __VA_ARGS__)
#define KA_TILE_Q4_0(R, T, ...) ka_tile_q32(KILN_Q4_0, R, T, __VA_ARGS__)
#define KA_TILE_Q4_1(R, T, ...) ka_tile_q32(KILN_Q4_1, R, T, __VA_ARGS__)
/* SMMLA works on 2 x 2 tiles. */
#define KA_RP32 (KILN_ARM_SMMLA ? 2 : 4)

KA_GEMM(ka_gemm_f32, KA_TILE_F32, 4, 4)
KA_GEMM(ka_gemm_f16, KA_TILE_F16, 4, 4)
KA_GEMM(ka_gemm_bf16, KA_TILE_BF16, 4, 4)
KA_GEMM(ka_gemm_q8_0, KA_TILE_Q8_0, KA_RP32, 4)
KA_GEMM(ka_gemm_q4_0, KA_TILE_Q4_0, KA_RP32, 4)
KA_GEMM(ka_gemm_q4_1, KA_TILE_Q4_1, KA_RP32, 4)
KA_GEMM(ka_gemm_q4_K, ka_tile_q4_K, 2, 4)
KA_GEMM(ka_gemm_q6_K, ka_tile_q6_K, 2, 2)

/* ---- q4_0x8 (8 rows interleaved; quant.c) ------------------------------------------------ */
/* 16 bytes of a packed block: 4 columns of each of 4 rows. lane m of a (its
 * bytes 4m..4m+3, the 4 matching activations) dotted with each row's 4
 * nibbles, one row per int32 lane: SDOT by element, or SMULL + pairwise
 * adds (|nibble * a| <= 15 * 127 fits int16). */
#if KILN_ARM_SDOT
#define KA_DOT4(acc, w, a, m) vdotq_laneq_s32((acc), (w), (a), (m))
#else
#define KA_DOT4(acc, w, a, m)                                                                      \
    ka_dot4_neon((acc), (w), vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(a), (m))))
KA_INLINE int32x4_t ka_dot4_neon(int32x4_t acc, int8x16_t w, int8x16_t g) {
    int16x8_t p0 = vmull_s8(vget_low_s8(w), vget_low_s8(g)), p1 = vmull_high_s8(w, g);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)));
}
#endif

/* Tiles of T <= KA_X8_T activation rows: each weight vector is loaded once
 * and dotted with every row's activations; per (row, token) the operations
 * and their order are the same for any T, so an output does not depend on
 * the tile it falls in. (SMMLA's 2 x 8 operands do not match the 4-column
 * interleave; i8mm machines run these on SDOT.) */
#define KA_X8_T 4

/* s[t] += the dots of 8 weight vectors VEC(0) .. VEC(7) (4 columns of 4
 * rows each, columns 4m .. 4m+3 of a 32-column block) with their 4
 * activations: lane m of lo[t] (m < 4) or lane m - 4 of hi[t]. A macro, as
 * SDOT's lane must be a constant. */
#define KA_X8_DOT1(s, VEC, m, av, lane)                                                            \
    do {                                                                                           \
        int8x16_t v_ = (VEC(m));                                                                   \
        for (int t = 0; t < T; t++)                                                                \
            (s)[t] = KA_DOT4((s)[t], v_, (av)[t], lane);                                           \
    } while (0)
#define KA_X8_DOT8(s, VEC, lo, hi)                                                                 \
    do {                                                                                           \
        KA_X8_DOT1(s, VEC, 0, lo, 0);                                                              \
        KA_X8_DOT1(s, VEC, 1, lo, 1);                                                              \
        KA_X8_DOT1(s, VEC, 2, lo, 2);                                                              \
        KA_X8_DOT1(s, VEC, 3, lo, 3);                                                              \
        KA_X8_DOT1(s, VEC, 4, hi, 0);                                                              \
        KA_X8_DOT1(s, VEC, 5, hi, 1);                                                              \
        KA_X8_DOT1(s, VEC, 6, hi, 2);                                                              \
        KA_X8_DOT1(s, VEC, 7, hi, 3);                                                              \
    } while (0)

/* The low (hi = 0) or high nibbles of 16 bytes, as int8. */
KA_INLINE int8x16_t ka_nibbles(uint8x16_t v, int hi, uint8x16_t m4) {
    return vreinterpretq_s8_u8(hi ? vshrq_n_u8(v, 4) : vandq_u8(v, m4));
}

/* Block b's activation rows of a tile (a: row 0's block b): their blocks,
 * and each block's 32 values as two vectors (columns 0..15, 16..31). */
KA_INLINE void ka_x8_act(const int T, const uint8_t *a, size_t as, const kiln_cpu_block_q8 **at,
                         int8x16_t *alo, int8x16_t *ahi) {
    for (int t = 0; t < T; t++) {
        at[t] = (const kiln_cpu_block_q8 *)(const void *)(a + t * as);
        alo[t] = vld1q_s8(at[t]->q), ahi[t] = vld1q_s8(at[t]->q + 16);
    }
}

/* The scalar table's formula per row lane: acc += f32(isum) * (dw * da),
 * msum += m * sa (m: q4_1's minimums, or -8 * dw), out = acc + msum. */
KA_INLINE void ka_tile_x8(int q41, const int T, int64_t nb, const uint8_t *w, const uint8_t *a,
                          size_t as, float *out, int64_t ldo) {
    float32x4_t acc[KA_X8_T][2], msum[KA_X8_T][2];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2; h++)
            acc[t][h] = msum[t][h] = vdupq_n_f32(0);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const size_t bb = q41 ? 160 : 144, head = q41 ? 32 : 16, ab = sizeof(kiln_cpu_block_q8);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        const kiln_cpu_block_q8 *at[KA_X8_T];
        int8x16_t alo[KA_X8_T], ahi[KA_X8_T];
        ka_x8_act(T, a + b * ab, as, at, alo, ahi);
        for (int h = 0; h < 2; h++) { /* rows 0..3, rows 4..7 */
            int32x4_t s[KA_X8_T];
            for (int t = 0; t < T; t++)
                s[t] = vdupq_n_s32(0);
#define KA_X8_M(m)                                                                                 \
    do {                                                                                           \
        uint8x16_t v = vld1q_u8(blk + head + 32 * (m) + 16 * h);                                   \
        int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, m4)),                                       \
                  hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));                                      \
        for (int t = 0; t < T; t++) {                                                              \
            s[t] = KA_DOT4(s[t], lo, alo[t], m);                                                   \
            s[t] = KA_DOT4(s[t], hi, ahi[t], m);                                                   \
        }                                                                                          \
    } while (0)
            KA_X8_M(0);
            KA_X8_M(1);
            KA_X8_M(2);
            KA_X8_M(3);
#undef KA_X8_M
            float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 8 * h)));
            float32x4_t mw = q41 ? vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 16 + 8 * h)))
                                 : vmulq_n_f32(dw, -8.0f);
            for (int t = 0; t < T; t++) {
                acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(s[t]), vmulq_n_f32(dw, at[t]->d));
                msum[t][h] = vfmaq_n_f32(msum[t][h], mw, at[t]->s);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        vst1q_f32(out + t * ldo, vaddq_f32(acc[t][0], msum[t][0]));
        vst1q_f32(out + t * ldo + 4, vaddq_f32(acc[t][1], msum[t][1]));
    }
}

/* q8_0x8: 8 vectors of 4 int8 columns per 8 rows per block, each dotted
 * with its 4 activations (|w * a| <= 128 * 127 fits int16 for SMULL);
 * dot_q8_0's formula per row lane: acc += f32(isum) * (dw * da). */
KA_INLINE void ka_tile_q8x8(const int T, int64_t nb, const uint8_t *w, const uint8_t *a, size_t as,
                            float *out, int64_t ldo) {
    float32x4_t acc[KA_X8_T][2];
    for (int t = 0; t < T; t++)
        acc[t][0] = acc[t][1] = vdupq_n_f32(0);
    const size_t ab = sizeof(kiln_cpu_block_q8);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 272;
        const kiln_cpu_block_q8 *at[KA_X8_T];
        int8x16_t alo[KA_X8_T], ahi[KA_X8_T];
        ka_x8_act(T, a + b * ab, as, at, alo, ahi);
        for (int h = 0; h < 2; h++) { /* rows 0..3, rows 4..7 */
            int32x4_t s[KA_X8_T];
            for (int t = 0; t < T; t++)
                s[t] = vdupq_n_s32(0);
#define KA_Q8X8_V(m) vld1q_s8((const int8_t *)(blk + 16 + 32 * (m) + 16 * h))
            KA_X8_DOT8(s, KA_Q8X8_V, alo, ahi);
#undef KA_Q8X8_V
            float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 8 * h)));
            for (int t = 0; t < T; t++)
                acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(s[t]), vmulq_n_f32(dw, at[t]->d));
        }
    }
    for (int t = 0; t < T; t++) {
        vst1q_f32(out + t * ldo, acc[t][0]);
        vst1q_f32(out + t * ldo + 4, acc[t][1]);
    }
}

/* q4_Kx8 (quant.h): per super-block, the 64 scales and 64 mins (x = 8 *
 * sub-block + row) unpacked once for the tile; per sub-block j and half h
 * (rows 4h .. 4h+3), 8 dots of 4 nibbles by lane into int32, times the
 * rows' scales (exact), and per row mins * (bsums pairs). dot_q4_K's
 * formula per row lane: acc = fma(f32(is), d * da, acc), then
 * acc = fma(-f32(ms), dmin * da, acc). */
KA_INLINE void ka_q4kx8_unpack(const uint8_t *low, const uint8_t *top, uint8_t out[64]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
    uint8x16_t l0 = vld1q_u8(low), l1 = vld1q_u8(low + 16), h = vld1q_u8(top);
    vst1q_u8(out, vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m3), 4)));
    vst1q_u8(out + 16, vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m3), 4)));
    vst1q_u8(out + 32, vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m3), 4)));
    vst1q_u8(out + 48, vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4)));
}

/* 4 u8 as int32 lanes. */
KA_INLINE int32x4_t ka_u8x4(const uint8_t *p) {
    uint8x8_t v = vreinterpret_u8_u32(vld1_dup_u32((const uint32_t *)(const void *)p));
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(v))));
}

KA_INLINE void ka_tile_q4kx8(const int T, int64_t nb, const uint8_t *w, const uint8_t *a, size_t as,
                             float *out, int64_t ldo) {
    float32x4_t acc[KA_X8_T][2];
    for (int t = 0; t < T; t++)
        acc[t][0] = acc[t][1] = vdupq_n_f32(0);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const size_t ab = sizeof(kiln_cpu_block_q8k);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 1152;
        const kiln_cpu_block_q8k *at[KA_X8_T];
        for (int t = 0; t < T; t++)
            at[t] = (const kiln_cpu_block_q8k *)(const void *)(a + t * as + b * ab);
        _Alignas(16) uint8_t sc[64], mn[64];
        ka_q4kx8_unpack(blk + 32, blk + 96, sc);
        ka_q4kx8_unpack(blk + 64, blk + 112, mn);
        int32x4_t is[KA_X8_T][2], ms[KA_X8_T][2];
        for (int t = 0; t < T; t++)
            is[t][0] = is[t][1] = ms[t][0] = ms[t][1] = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = blk + 128 + 256 * (j / 2);
            int8x16_t a0[KA_X8_T], a1[KA_X8_T];
            for (int t = 0; t < T; t++)
                a0[t] = vld1q_s8(at[t]->q + 32 * j), a1[t] = vld1q_s8(at[t]->q + 32 * j + 16);
            for (int h = 0; h < 2; h++) {
                int32x4_t s[KA_X8_T];
                for (int t = 0; t < T; t++)
                    s[t] = vdupq_n_s32(0);
#define KA_Q4KX8_V(m) ka_nibbles(vld1q_u8(qs + 32 * (m) + 16 * h), j & 1, m4)
                KA_X8_DOT8(s, KA_Q4KX8_V, a0, a1);
#undef KA_Q4KX8_V
                int32x4_t scv = ka_u8x4(sc + 8 * j + 4 * h), mnv = ka_u8x4(mn + 8 * j + 4 * h);
                for (int t = 0; t < T; t++) {
                    is[t][h] = vmlaq_s32(is[t][h], s[t], scv);
                    ms[t][h] =
                        vmlaq_n_s32(ms[t][h], mnv, at[t]->bsums[2 * j] + at[t]->bsums[2 * j + 1]);
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 8 * h)));
            float32x4_t dm = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 16 + 8 * h)));
            for (int t = 0; t < T; t++) {
                acc[t][h] =
                    vfmaq_f32(acc[t][h], vcvtq_f32_s32(is[t][h]), vmulq_n_f32(dw, at[t]->d));
                acc[t][h] =
                    vfmsq_f32(acc[t][h], vcvtq_f32_s32(ms[t][h]), vmulq_n_f32(dm, at[t]->d));
            }
        }
    }
    for (int t = 0; t < T; t++) {
        vst1q_f32(out + t * ldo, acc[t][0]);
        vst1q_f32(out + t * ldo + 4, acc[t][1]);
    }
}

/* q6_Kx8 (quant.h): per 16-column sub-block s and half h (rows 4h ..
 * 4h+3), the 4 vectors of 6-bit values from two ql vectors and one qh
 * vector, 4 dots by lane into int32, times the rows' scales, and the -32 as
 * -32 * sc * bsums[s]. dot_q6_K's formula per row lane: acc = fma(f32(is),
 * d * da, acc). */
KA_INLINE int32x4_t ka_s8x4(const uint8_t *p) {
    int8x8_t v = vreinterpret_s8_u32(vld1_dup_u32((const uint32_t *)(const void *)p));
    return vmovl_s16(vget_low_s16(vmovl_s8(v)));
}

KA_INLINE void ka_tile_q6kx8(const int T, int64_t nb, const uint8_t *w, const uint8_t *a, size_t as,
                             float *out, int64_t ldo) {
    float32x4_t acc[KA_X8_T][2];
    for (int t = 0; t < T; t++)
        acc[t][0] = acc[t][1] = vdupq_n_f32(0);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
    const size_t ab = sizeof(kiln_cpu_block_q8k);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 1680;
        const kiln_cpu_block_q8k *at[KA_X8_T];
        for (int t = 0; t < T; t++)
            at[t] = (const kiln_cpu_block_q8k *)(const void *)(a + t * as + b * ab);
        int32x4_t is[KA_X8_T][2];
        for (int t = 0; t < T; t++)
            is[t][0] = is[t][1] = vdupq_n_s32(0);
        for (int s = 0; s < 16; s++) {
            int8x16_t av[KA_X8_T];
            for (int t = 0; t < T; t++)
                av[t] = vld1q_s8(at[t]->q + 16 * s);
            for (int h = 0; h < 2; h++) {
                uint8x16_t l0 = vld1q_u8(blk + 144 + 64 * s + 16 * h),
                           l1 = vld1q_u8(blk + 176 + 64 * s + 16 * h),
                           qh = vld1q_u8(blk + 1168 + 32 * s + 16 * h);
                int8x16_t w0 = vreinterpretq_s8_u8(
                    vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(qh, 4), m2)));
                int8x16_t w1 = vreinterpretq_s8_u8(
                    vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(vshlq_n_u8(qh, 2), m2)));
                int8x16_t w2 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(qh, m2)));
                int8x16_t w3 = vreinterpretq_s8_u8(
                    vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(qh, 2), m2)));
                int32x4_t scv = ka_s8x4(blk + 16 + 8 * s + 4 * h);
                for (int t = 0; t < T; t++) {
                    int32x4_t d = KA_DOT4(vdupq_n_s32(0), w0, av[t], 0);
                    d = KA_DOT4(d, w1, av[t], 1);
                    d = KA_DOT4(d, w2, av[t], 2);
                    d = KA_DOT4(d, w3, av[t], 3);
                    is[t][h] = vmlaq_s32(is[t][h], d, scv);
                    is[t][h] = vmlaq_n_s32(is[t][h], scv, -32 * at[t]->bsums[s]);
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 8 * h)));
            for (int t = 0; t < T; t++)
                acc[t][h] =
                    vfmaq_f32(acc[t][h], vcvtq_f32_s32(is[t][h]), vmulq_n_f32(dw, at[t]->d));
        }
    }
    for (int t = 0; t < T; t++) {
        vst1q_f32(out + t * ldo, acc[t][0]);
        vst1q_f32(out + t * ldo + 4, acc[t][1]);
    }
}

/* Groups of 8 weight rows, activation rows KA_X8_T at a time, then one by
 * one. KIND: 0 q4_0x8, 1 q4_1x8, 2 q8_0x8, 3 q4_Kx8, 4 q6_Kx8. */
#define KA_X8_TILE(KIND, T, wg, at, o)                                                             \
    ((KIND) == 4   ? ka_tile_q6kx8(T, k / 256, wg, at, as, o, ldo)                                 \
     : (KIND) == 3 ? ka_tile_q4kx8(T, k / 256, wg, at, as, o, ldo)                                 \
     : (KIND) == 2 ? ka_tile_q8x8(T, k / 32, wg, at, as, o, ldo)                                   \
                   : ka_tile_x8((KIND) == 1, T, k / 32, wg, at, as, o, ldo))
#define KA_GEMM_X8(name, KIND)                                                                     \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        for (int64_t g = 0; g < nr / 8; g++) {                                                     \
            const uint8_t *wg = (const uint8_t *)w + (size_t)g * 8 * ws;                           \
            int64_t t = 0;                                                                         \
            for (; t + KA_X8_T <= nt; t += KA_X8_T)                                                \
                KA_X8_TILE(KIND, KA_X8_T, wg, (const uint8_t *)a + t * as, out + t * ldo + 8 * g); \
            for (; t < nt; t++)                                                                    \
                KA_X8_TILE(KIND, 1, wg, (const uint8_t *)a + t * as, out + t * ldo + 8 * g);       \
        }                                                                                          \
    }
KA_GEMM_X8(ka_gemm_q4_0x8, 0)
KA_GEMM_X8(ka_gemm_q4_1x8, 1)
KA_GEMM_X8(ka_gemm_q8_0x8, 2)
KA_GEMM_X8(ka_gemm_q4_Kx8, 3)
KA_GEMM_X8(ka_gemm_q6_Kx8, 4)

/* ---- vector helpers ------------------------------------------------------------------- */
static float ka_dot_f32(const float *a, const float *b, int64_t n) {
    float o;
    ka_tile_plain(KILN_F32, 1, 1, n, (const uint8_t *)b, 0, (const uint8_t *)a, 0, &o, 1);
    return o;
}

static float ka_dot_f16(const float *a, const uint16_t *b, int64_t n) {
    float o;
    ka_tile_plain(KILN_F16, 1, 1, n, (const uint8_t *)b, 0, (const uint8_t *)a, 0, &o, 1);
    return o;
}

static void ka_axpy_f32(float alpha, const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), alpha));
        vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), vld1q_f32(x + i + 4), alpha));
    }
    for (; i < n; i++)
        y[i] = __builtin_fmaf(alpha, x[i], y[i]);
}

static void ka_axpy_f16(float alpha, const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t lo, hi;
        ka_load8(KILN_F16, (const uint8_t *)(x + i), &lo, &hi);
        vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), lo, alpha));
        vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), hi, alpha));
    }
    for (; i < n; i++)
        y[i] = __builtin_fmaf(alpha, ka_f16((const uint8_t *)(x + i)), y[i]);
}

/* The table, named NAME ("neon", ...), as the variable SYM. */
#define KILN_ARM_TABLE(SYM, NAME)                                                                  \
    const kiln_cpu_kernels SYM = {                                                                 \
        .name = NAME,                                                                              \
        .quantize_row = kiln_cpu_quantize_row_common,                                              \
        .gemm =                                                                                    \
            {                                                                                      \
                [KILN_F32] = ka_gemm_f32,                                                          \
                [KILN_F16] = ka_gemm_f16,                                                          \
                [KILN_BF16] = ka_gemm_bf16,                                                        \
                [KILN_Q8_0] = ka_gemm_q8_0,                                                        \
                [KILN_Q4_0] = ka_gemm_q4_0,                                                        \
                [KILN_Q4_1] = ka_gemm_q4_1,                                                        \
                [KILN_Q4_K] = ka_gemm_q4_K,                                                        \
                [KILN_Q6_K] = ka_gemm_q6_K,                                                        \
                [KILN_Q4_0_X8] = ka_gemm_q4_0x8,                                                   \
                [KILN_Q4_1_X8] = ka_gemm_q4_1x8,                                                   \
                [KILN_Q8_0_X8] = ka_gemm_q8_0x8,                                                   \
                [KILN_Q4_K_X8] = ka_gemm_q4_Kx8,                                                   \
                [KILN_Q6_K_X8] = ka_gemm_q6_Kx8,                                                   \
            },                                                                                     \
        .dot_f32 = ka_dot_f32,                                                                     \
        .dot_f16 = ka_dot_f16,                                                                     \
        .axpy_f32 = ka_axpy_f32,                                                                   \
        .axpy_f16 = ka_axpy_f16,                                                                   \
    };

#endif /* KILN_CPU_KERNELS_ARM64_H */
