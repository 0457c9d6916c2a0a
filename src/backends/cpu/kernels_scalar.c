/* kernels_scalar.c: the scalar kernel table, plain portable C. It is the
 * fallback on every CPU and the reference the SIMD variants are compared
 * with: each output is one dot product computed block by block, integer
 * within a block and f32 across blocks, in the order of k. */
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_quant_common.h"
#include "quant/quant.h"

static float ld_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kiln_f16_to_f32(h);
}

static float ld_bf16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kiln_bf16_to_f32(h);
}

static float ld_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* ---- one row pair per dtype ---------------------------------------------- */
/* Plain rows: eight interleaved partial sums (value i goes to sum i % 8),
 * then added pairwise, the way an 8-lane vector accumulates. */
static float dot_plain(kiln_dtype t, const uint8_t *w, const float *a, int64_t k) {
    float s[8] = {0};
    for (int64_t i = 0; i < k; i++) {
        float x = t == KILN_F32   ? ld_f32(w + 4 * i)
                  : t == KILN_F16 ? ld_f16(w + 2 * i)
                                  : ld_bf16(w + 2 * i);
        s[i & 7] += x * a[i];
    }
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static float dot_q8_0(const uint8_t *w, const kiln_cpu_block_q8 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 34, a++) {
        int is = 0;
        for (int j = 0; j < 32; j++)
            is += (int8_t)w[2 + j] * a->q[j];
        sum += (float)is * (ld_f16(w) * a->d);
    }
    return sum;
}

static float dot_q4_0(const uint8_t *w, const kiln_cpu_block_q8 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 18, a++) {
        int is = 0;
        for (int j = 0; j < 16; j++)
            is += ((w[2 + j] & 0x0F) - 8) * a->q[j] + ((w[2 + j] >> 4) - 8) * a->q[j + 16];
        sum += (float)is * (ld_f16(w) * a->d);
    }
    return sum;
}

/* x = d*q + m, so a block's dot is d*da*sum(q*qa) + m*sa (sa = da*sum(qa)). */
static float dot_q4_1(const uint8_t *w, const kiln_cpu_block_q8 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 20, a++) {
        int is = 0;
        for (int j = 0; j < 16; j++)
            is += (w[4 + j] & 0x0F) * a->q[j] + (w[4 + j] >> 4) * a->q[j + 16];
        sum += (float)is * (ld_f16(w) * a->d);
        sum += ld_f16(w + 2) * a->s;
    }
    return sum;
}

/* Sub-block j's 6-bit scale and min (the packing is described in quant.c). */
static void q4k_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* x = d*sc_j*q - dmin*mn_j: d*da*sum_j sc_j*dot_j - dmin*da*sum_j mn_j*asum_j,
 * asum_j (sub-block j's sum of qa) from the activation's bsums. */
static float dot_q4_K(const uint8_t *w, const kiln_cpu_block_q8k *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 144, a++) {
        const uint8_t *q = w + 16;
        int is = 0, ms = 0;
        for (int j = 0; j < 8; j++) {
            int sc, mn, d = 0;
            q4k_scale_min(j, w + 4, &sc, &mn);
            const int8_t *qa = a->q + 32 * j;
            const uint8_t *qw = q + 32 * (j / 2);
            for (int l = 0; l < 32; l++)
                d += (j & 1 ? qw[l] >> 4 : qw[l] & 0x0F) * qa[l];
            is += sc * d;
            ms += mn * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
        }
        sum += (float)is * (ld_f16(w) * a->d);
        sum -= (float)ms * (ld_f16(w + 2) * a->d);
    }
    return sum;
}

/* Value v of a super-block: 16-value sub-block v/16 (scale sc[v/16]); in
 * half h = v/128, l = v%32, group g = (v%128)/32: low bits from ql[64h + l
 * (+32 for g odd)] (low nibble for g < 2, high for g >= 2), high two bits
 * from qh[32h + l] >> 2g. */
static float dot_q6_K(const uint8_t *w, const kiln_cpu_block_q8k *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 210, a++) {
        const int8_t *sc = (const int8_t *)(w + 192);
        int is = 0;
        for (int j = 0; j < 16; j++) {
            int d = 0;
            for (int i = 16 * j; i < 16 * j + 16; i++) {
                int h = i / 128, g = (i % 128) / 32, l = i % 32;
                int lo = w[64 * h + l + 32 * (g & 1)];
                lo = g < 2 ? lo & 0x0F : lo >> 4;
                int hi = (w[128 + 32 * h + l] >> (2 * g)) & 3;
                d += ((lo | (hi << 4)) - 32) * a->q[i];
            }
            is += sc[j] * d;
        }
        sum += (float)is * (ld_f16(w + 208) * a->d);
    }
    return sum;
}

/* ---- the gemm entries: one dot product per (t, r) -------------------------- */
#define GEMM_PLAIN(name, dtype)                                                                    \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        for (int64_t t = 0; t < nt; t++)                                                           \
            for (int64_t r = 0; r < nr; r++)                                                       \
                out[t * ldo + r] = dot_plain(dtype, (const uint8_t *)w + r * ws,                   \
                                             (const float *)((const uint8_t *)a + t * as), k);     \
    }
GEMM_PLAIN(gemm_f32, KILN_F32)
GEMM_PLAIN(gemm_f16, KILN_F16)
GEMM_PLAIN(gemm_bf16, KILN_BF16)

#define GEMM_Q(name, dot, ablock, qk)                                                              \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        for (int64_t t = 0; t < nt; t++)                                                           \
            for (int64_t r = 0; r < nr; r++)                                                       \
                out[t * ldo + r] =                                                                 \
                    dot((const uint8_t *)w + r * ws,                                               \
                        (const ablock *)(const void *)((const uint8_t *)a + t * as), k / qk);      \
    }
GEMM_Q(gemm_q8_0, dot_q8_0, kiln_cpu_block_q8, 32)
GEMM_Q(gemm_q4_0, dot_q4_0, kiln_cpu_block_q8, 32)
GEMM_Q(gemm_q4_1, dot_q4_1, kiln_cpu_block_q8, 32)
GEMM_Q(gemm_q4_K, dot_q4_K, kiln_cpu_block_q8k, 256)
GEMM_Q(gemm_q6_K, dot_q6_K, kiln_cpu_block_q8k, 256)

/* ---- x8 dtypes (8 rows interleaved; quant.c, quant.h) ------------------------- */
/* x8_row_<kind>(g, j, a, nb): the dot product of row j (0..7) of the group
 * at g with the activation row a, over nb blocks. The SIMD variants compute
 * the same per row lane. */

/* q4_0x8 / q4_1x8: per block the integer sum of nibble * qa, then sum +=
 * f32(is) * (dw * da) and, for the minimum m (q4_1's, or q4_0's -8 as m =
 * -8 * dw, exact), a separate msum += m * sa; the row is sum + msum. */
static float x8_row_q4(int q41, const uint8_t *g, int j, const uint8_t *a, int64_t nb) {
    const size_t bb = q41 ? 160 : 144, head = q41 ? 32 : 16;
    const kiln_cpu_block_q8 *ab = (const kiln_cpu_block_q8 *)(const void *)a;
    float sum = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < nb; b++, ab++) {
        const uint8_t *blk = g + (size_t)b * bb;
        int is = 0;
        for (int m = 0; m < 4; m++)
            for (int e = 0; e < 4; e++) {
                uint8_t q = blk[head + 32 * m + 4 * j + e];
                is += (q & 0x0F) * ab->q[4 * m + e] + (q >> 4) * ab->q[16 + 4 * m + e];
            }
        float dw = ld_f16(blk + 2 * j), mw = q41 ? ld_f16(blk + 16 + 2 * j) : -8.0f * dw;
        sum += (float)is * (dw * ab->d);
        msum += mw * ab->s;
    }
    return sum + msum;
}

static float x8_row_q4_0(const uint8_t *g, int j, const uint8_t *a, int64_t nb) {
    return x8_row_q4(0, g, j, a, nb);
}

static float x8_row_q4_1(const uint8_t *g, int j, const uint8_t *a, int64_t nb) {
    return x8_row_q4(1, g, j, a, nb);
}

/* q8_0x8: dot_q8_0's sum (sum += f32(is) * (dw * da)). */
static float x8_row_q8_0(const uint8_t *g, int j, const uint8_t *a, int64_t nb) {
    const kiln_cpu_block_q8 *ab = (const kiln_cpu_block_q8 *)(const void *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, ab++) {
        const uint8_t *blk = g + (size_t)b * 272;
        int is = 0;
        for (int m = 0; m < 8; m++)
            for (int e = 0; e < 4; e++)
                is += (int8_t)blk[16 + 32 * m + 4 * j + e] * ab->q[4 * m + e];
        sum += (float)is * (ld_f16(blk + 2 * j) * ab->d);
    }
    return sum;
}

/* q4_Kx8: dot_q4_K's sums (is, ms) and its two updates of sum. */
static float x8_row_q4_K(const uint8_t *g, int j, const uint8_t *a, int64_t nb) {
    const kiln_cpu_block_q8k *ab = (const kiln_cpu_block_q8k *)(const void *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, ab++) {
        const uint8_t *blk = g + (size_t)b * 1152;
        int is = 0, ms = 0;
        for (int sb = 0; sb < 8; sb++) {
            int sc, mn, d = 0;
            kiln_q4kx8_scale_min(blk, sb, j, &sc, &mn);
            for (int m = 0; m < 8; m++)
                for (int e = 0; e < 4; e++) {
                    uint8_t q = blk[128 + 32 * (8 * (sb / 2) + m) + 4 * j + e];
                    d += (sb & 1 ? q >> 4 : q & 0x0F) * ab->q[32 * sb + 4 * m + e];
                }
            is += sc * d;
            ms += mn * (ab->bsums[2 * sb] + ab->bsums[2 * sb + 1]);
        }
        sum += (float)is * (ld_f16(blk + 2 * j) * ab->d);
        sum -= (float)ms * (ld_f16(blk + 16 + 2 * j) * ab->d);
    }
    return sum;
}

/* q6_Kx8: dot_q6_K's sum is and its update of sum. */
static float x8_row_q6_K(const uint8_t *g, int j, const uint8_t *a, int64_t nb) {
    const kiln_cpu_block_q8k *ab = (const kiln_cpu_block_q8k *)(const void *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, ab++) {
        const uint8_t *blk = g + (size_t)b * 1680;
        int is = 0;
        for (int s = 0; s < 16; s++) {
            int d = 0;
            for (int i = 16 * s; i < 16 * s + 16; i++)
                d += (kiln_q6kx8_value(blk, j, i) - 32) * ab->q[i];
            is += (int8_t)blk[16 + 8 * s + j] * d;
        }
        sum += (float)is * (ld_f16(blk + 2 * j) * ab->d);
    }
    return sum;
}

/* A gemm entry: every (token, row) by row(), qk values per block. */
#define GEMM_X8(name, row, qk)                                                                     \
    static void name(int64_t k, const void *w, size_t ws, int64_t nr, const void *a, size_t as,    \
                     int64_t nt, float *out, int64_t ldo) {                                        \
        for (int64_t g = 0; g < nr / 8; g++)                                                       \
            for (int64_t t = 0; t < nt; t++)                                                       \
                for (int j = 0; j < 8; j++)                                                        \
                    out[t * ldo + 8 * g + j] = row((const uint8_t *)w + (size_t)g * 8 * ws, j,     \
                                                   (const uint8_t *)a + t * as, k / (qk));         \
    }
GEMM_X8(gemm_q4_0x8, x8_row_q4_0, 32)
GEMM_X8(gemm_q4_1x8, x8_row_q4_1, 32)
GEMM_X8(gemm_q8_0x8, x8_row_q8_0, 32)
GEMM_X8(gemm_q4_Kx8, x8_row_q4_K, 256)
GEMM_X8(gemm_q6_Kx8, x8_row_q6_K, 256)

/* ---- vector helpers ---------------------------------------------------------- */
static float dot_f32(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    for (int64_t i = 0; i < n; i++)
        s[i & 7] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static float dot_f16(const float *a, const uint16_t *b, int64_t n) {
    float s[8] = {0};
    for (int64_t i = 0; i < n; i++)
        s[i & 7] += a[i] * kiln_f16_to_f32(b[i]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static void axpy_f32(float alpha, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static void axpy_f16(float alpha, const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * kiln_f16_to_f32(x[i]);
}

const kiln_cpu_kernels kiln_cpu_kernels_scalar = {
    .name = "scalar",
    .quantize_row = kiln_cpu_quantize_row_common,
    .gemm =
        {
            [KILN_F32] = gemm_f32,
            [KILN_F16] = gemm_f16,
            [KILN_BF16] = gemm_bf16,
            [KILN_Q8_0] = gemm_q8_0,
            [KILN_Q4_0] = gemm_q4_0,
            [KILN_Q4_1] = gemm_q4_1,
            [KILN_Q4_K] = gemm_q4_K,
            [KILN_Q6_K] = gemm_q6_K,
            [KILN_Q4_0_X8] = gemm_q4_0x8,
            [KILN_Q4_1_X8] = gemm_q4_1x8,
            [KILN_Q8_0_X8] = gemm_q8_0x8,
            [KILN_Q4_K_X8] = gemm_q4_Kx8,
            [KILN_Q6_K_X8] = gemm_q6_Kx8,
        },
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
};
