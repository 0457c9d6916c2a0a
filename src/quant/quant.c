/* quant.c: reference (de)quantization of the block formats (see quant.h).
 * Written for clarity; the cpu backend has the fast paths. */
#include <math.h>
#include <string.h>

#include "quant/quant.h"

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kiln_f16_to_f32(h);
}

static void f2h(uint8_t *p, float f) {
    uint16_t h = kiln_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Q4_K packs eight 6-bit scales and eight 6-bit mins into 12 bytes: the
 * first four of each sit in the low 6 bits of bytes 0..3 (scales) and 4..7
 * (mins); the last four take their low 4 bits from bytes 8..11 and their
 * high 2 bits from the top of bytes 0..3 (scales) and 4..7 (mins). */
static void q4k_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

kiln_status kiln_dequant_row(kiln_dtype t, const void *src, float *y, int64_t n) {
    const uint8_t *p = src;
    switch (t) {
    case KILN_F32:
        memcpy(y, src, (size_t)n * 4);
        return KILN_OK;
    case KILN_F16:
        for (int64_t i = 0; i < n; i++)
            y[i] = h2f(p + 2 * i);
        return KILN_OK;
    case KILN_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            y[i] = kiln_bf16_to_f32(h);
        }
        return KILN_OK;
    case KILN_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, p += 34, y += 32) {
            float d = h2f(p);
            for (int j = 0; j < 32; j++)
                y[j] = d * (float)(int8_t)p[2 + j];
        }
        return KILN_OK;
    case KILN_Q4_0:
        for (int64_t b = 0; b < n / 32; b++, p += 18, y += 32) {
            float d = h2f(p);
            for (int j = 0; j < 16; j++) {
                y[j] = d * (float)((p[2 + j] & 0x0F) - 8);
                y[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        return KILN_OK;
    case KILN_Q4_1:
        for (int64_t b = 0; b < n / 32; b++, p += 20, y += 32) {
            float d = h2f(p), m = h2f(p + 2);
            for (int j = 0; j < 16; j++) {
                y[j] = d * (float)(p[4 + j] & 0x0F) + m;
                y[j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
        }
        return KILN_OK;
    case KILN_Q4_K:
        for (int64_t b = 0; b < n / 256; b++, p += 144) {
            float d = h2f(p), dmin = h2f(p + 2);
            const uint8_t *sc = p + 4, *q = p + 16;
            for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
                int s0, m0, s1, m1;
                q4k_scale_min(j, sc, &s0, &m0);
                q4k_scale_min(j + 1, sc, &s1, &m1);
                float d0 = d * (float)s0, n0 = dmin * (float)m0;
                float d1 = d * (float)s1, n1 = dmin * (float)m1;
                for (int l = 0; l < 32; l++) {
                    y[l] = d0 * (float)(q[l] & 0x0F) - n0;
                    y[l + 32] = d1 * (float)(q[l] >> 4) - n1;
                }
            }
        }
        return KILN_OK;
    case KILN_Q6_K:
        for (int64_t b = 0; b < n / 256; b++, p += 210) {
            const uint8_t *ql = p, *qh = p + 128;
            const int8_t *sc = (const int8_t *)(p + 192);
            float d = h2f(p + 208);
            /* Two halves of 128 values; in each, value l + 32k takes 4 low
             * bits from ql and 2 high bits from qh. */
            for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128)
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = d * (float)sc[is] * (float)q1;
                    y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                    y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                    y[l + 96] = d * (float)sc[is + 6] * (float)q4;
                }
        }
        return KILN_OK;
    case KILN_I32:
    case KILN_Q4_0_X8:
    case KILN_Q4_1_X8:
    case KILN_Q8_0_X8:
    case KILN_Q4_K_X8:
    case KILN_Q6_K_X8:
        break; /* rows of a packed tensor: kiln_weight_dequant */
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "no reader for dtype %s",
                      kiln_dtype_name(t) ? kiln_dtype_name(t) : "?");
}

kiln_status kiln_quant_row(kiln_dtype t, const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    switch (t) {
    case KILN_F32:
        memcpy(dst, x, (size_t)n * 4);
        return KILN_OK;
    case KILN_F16:
        for (int64_t i = 0; i < n; i++)
            f2h(p + 2 * i, x[i]);
        return KILN_OK;
    case KILN_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = kiln_f32_to_bf16(x[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return KILN_OK;
    case KILN_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, p += 34, x += 32) {
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            f2h(p, d);
            for (int j = 0; j < 32; j++)
                p[2 + j] = (uint8_t)(int8_t)lroundf(x[j] * id);
        }
        return KILN_OK;
    case KILN_Q4_0:
        for (int64_t b = 0; b < n / 32; b++, p += 18, x += 32) {
            /* The scale maps the value of largest magnitude to -8, so the
             * full range -8..7 is used. */
            float amax = 0, max = 0;
            for (int j = 0; j < 32; j++)
                if (fabsf(x[j]) > amax) {
                    amax = fabsf(x[j]);
                    max = x[j];
                }
            float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
            f2h(p, d);
            for (int j = 0; j < 16; j++) {
                int a = (int)fminf(15.0f, floorf(x[j] * id + 8.5f));
                int c = (int)fminf(15.0f, floorf(x[j + 16] * id + 8.5f));
                if (a < 0) a = 0;
                if (c < 0) c = 0;
                p[2 + j] = (uint8_t)(a | (c << 4));
            }
        }
        return KILN_OK;
    default:
        break;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "cannot quantize to %s (supported: f32, f16, bf16, q8_0, q4_0)",
                      kiln_dtype_name(t) ? kiln_dtype_name(t) : "?");
}

/* ---- packed layouts ----------------------------------------------------------- */

kiln_dtype kiln_dtype_packed(kiln_dtype plain) {
    switch (plain) {
    case KILN_Q4_0:
        return KILN_Q4_0_X8;
    case KILN_Q4_1:
        return KILN_Q4_1_X8;
    case KILN_Q8_0:
        return KILN_Q8_0_X8;
    case KILN_Q4_K:
        return KILN_Q4_K_X8;
    case KILN_Q6_K:
        return KILN_Q6_K_X8;
    default:
        return plain;
    }
}

kiln_dtype kiln_dtype_plain(kiln_dtype packed) {
    switch (packed) {
    case KILN_Q4_0_X8:
        return KILN_Q4_0;
    case KILN_Q4_1_X8:
        return KILN_Q4_1;
    case KILN_Q8_0_X8:
        return KILN_Q8_0;
    case KILN_Q4_K_X8:
        return KILN_Q4_K;
    case KILN_Q6_K_X8:
        return KILN_Q6_K;
    default:
        return packed;
    }
}

/* q4_0x8 / q4_1x8: for each group of 8 rows, for each block b of 32
 * columns: the 8 rows' f16 scales d[8] (q4_1x8: then their f16 minimums
 * m[8]), then qs[128] where byte 32m + 4j + e (m, e in 0..3, j in 0..7) is
 * byte 4m + e of row j's block's nibbles (low nibble: column 4m + e, high
 * nibble: column 16 + 4m + e). 144 (q4_0x8) or 160 (q4_1x8) bytes, 8 times
 * the plain block. q8_0x8 likewise: d[8], then qs[256] where byte
 * 32m + 4j + e (m in 0..7) is row j's int8 of column 4m + e; 272 bytes.
 * Groups are 8 * row_stride bytes apart; a group's blocks are contiguous. */
typedef struct {
    int plain_bytes; /* plain block: 18 (d, qs), 20 (d, m, qs) or 34 (d, q8) */
    int head;        /* packed block: bytes before qs (16 or 32) */
    int q8;          /* 1: int8 values, 4 columns per 4 bytes (q8_0x8) */
} x8_layout;

/* q4_Kx8 (FORMAT.md 6.1): per group of 8 rows and super-block of 256
 * columns, 1152 bytes. Its 64 6-bit scales and 64 6-bit mins are indexed
 * x = 8 * sub-block + row (quant.h, kiln_q4kx8_scale_min). */
static void q4kx8_pack(uint8_t *blk, const uint8_t *const rows[8]) {
    memset(blk + 32, 0, 96);
    for (int j = 0; j < 8; j++) {
        memcpy(blk + 2 * j, rows[j], 2);
        memcpy(blk + 16 + 2 * j, rows[j] + 2, 2);
        for (int sb = 0; sb < 8; sb++) {
            int sc, mn, x = 8 * sb + j;
            q4k_scale_min(sb, rows[j] + 4, &sc, &mn);
            blk[32 + x % 32] |= (uint8_t)((sc & 15) << (x < 32 ? 0 : 4));
            blk[64 + x % 32] |= (uint8_t)((mn & 15) << (x < 32 ? 0 : 4));
            blk[96 + x % 16] |= (uint8_t)((sc >> 4) << (2 * (x / 16)));
            blk[112 + x % 16] |= (uint8_t)((mn >> 4) << (2 * (x / 16)));
        }
        for (int c = 0; c < 4; c++)
            for (int m = 0; m < 8; m++)
                memcpy(blk + 128 + 32 * (8 * c + m) + 4 * j, rows[j] + 16 + 32 * c + 4 * m, 4);
    }
}

/* Row j's plain q4_K super-block from a packed one: q4k_scale_min's
 * packing run backwards, so unpack(pack(x)) == x byte for byte. */
static void q4kx8_unpack(const uint8_t *blk, int j, uint8_t plain[144]) {
    int sc[8], mn[8];
    for (int sb = 0; sb < 8; sb++)
        kiln_q4kx8_scale_min(blk, sb, j, &sc[sb], &mn[sb]);
    memcpy(plain, blk + 2 * j, 2);
    memcpy(plain + 2, blk + 16 + 2 * j, 2);
    for (int i = 0; i < 4; i++) {
        plain[4 + i] = (uint8_t)(sc[i] | (sc[i + 4] >> 4) << 6);
        plain[8 + i] = (uint8_t)(mn[i] | (mn[i + 4] >> 4) << 6);
        plain[12 + i] = (uint8_t)((sc[i + 4] & 15) | (mn[i + 4] & 15) << 4);
    }
    for (int c = 0; c < 4; c++)
        for (int m = 0; m < 8; m++)
            memcpy(plain + 16 + 32 * c + 4 * m, blk + 128 + 32 * (8 * c + m) + 4 * j, 4);
}

/* q6_K value i (0..63, before the -32) of a plain super-block: low 4 bits
 * from ql[64h + l (+32 for g odd)] (low nibble for g < 2, high for g >= 2),
 * top 2 bits from qh[32h + l] >> 2g, with h = i / 128, g = (i % 128) / 32,
 * l = i % 32 (the q6_K case of kiln_dequant_row, value by value). */
static int q6k_get(const uint8_t *p, int i) {
    int h = i / 128, g = (i % 128) / 32, l = i % 32;
    int lo = p[64 * h + l + 32 * (g & 1)] >> (g < 2 ? 0 : 4) & 15;
    return lo | ((p[128 + 32 * h + l] >> (2 * g)) & 3) << 4;
}

/* Sets value i of a super-block whose ql and qh bytes start zeroed. */
static void q6k_put(uint8_t *p, int i, int q) {
    int h = i / 128, g = (i % 128) / 32, l = i % 32;
    p[64 * h + l + 32 * (g & 1)] |= (uint8_t)((q & 15) << (g < 2 ? 0 : 4));
    p[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
}

/* q6_Kx8 (FORMAT.md 6.1): per group of 8 rows and super-block, 1680 bytes:
 * d[8], the 8 rows' 16 int8 scales (quant.h), then the 6-bit values split
 * into ql (nibbles) and qh (2-bit fields), kiln_q6kx8_value's positions. */
static void q6kx8_pack(uint8_t *blk, const uint8_t *const rows[8]) {
    memset(blk + 144, 0, 1536);
    for (int j = 0; j < 8; j++) {
        memcpy(blk + 2 * j, rows[j] + 208, 2);
        for (int s = 0; s < 16; s++)
            blk[16 + 8 * s + j] = rows[j][192 + s];
        for (int i = 0; i < 256; i++) {
            int q = q6k_get(rows[j], i), u = i / 4, e = i % 4, s = u / 4, k = u % 4;
            blk[144 + 32 * (2 * s + k / 2) + 4 * j + e] |= (uint8_t)((q & 15) << (4 * (k & 1)));
            blk[1168 + 32 * s + 4 * j + e] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
}

static void q6kx8_unpack(const uint8_t *blk, int j, uint8_t plain[210]) {
    memset(plain, 0, 192);
    for (int i = 0; i < 256; i++)
        q6k_put(plain, i, kiln_q6kx8_value(blk, j, i));
    for (int s = 0; s < 16; s++)
        plain[192 + s] = blk[16 + 8 * s + j];
    memcpy(plain + 208, blk + 2 * j, 2);
}

static int x8_layout_of(kiln_dtype t, x8_layout *l) {
    if (t == KILN_Q4_0_X8)
        *l = (x8_layout){18, 16, 0};
    else if (t == KILN_Q4_1_X8)
        *l = (x8_layout){20, 32, 0};
    else if (t == KILN_Q8_0_X8)
        *l = (x8_layout){34, 16, 1};
    else
        return 0;
    return 1;
}

kiln_status kiln_weight_dequant(kiln_dtype t, const void *w, size_t row_stride, int64_t row,
                                int64_t k0, int64_t n, float *dst) {
    if (t == KILN_Q4_K_X8 || t == KILN_Q6_K_X8) { /* rebuild the row's plain super-blocks */
        const int q6 = t == KILN_Q6_K_X8, pb = q6 ? 210 : 144;
        const uint8_t *g = (const uint8_t *)w + (size_t)(row / 8) * 8 * row_stride;
        uint8_t plain[210];
        for (int64_t b = k0 / 256; b < (k0 + n) / 256; b++, dst += 256) {
            const uint8_t *blk = g + (size_t)b * 8 * pb;
            if (q6)
                q6kx8_unpack(blk, (int)(row % 8), plain);
            else
                q4kx8_unpack(blk, (int)(row % 8), plain);
            kiln_status st = kiln_dequant_row(kiln_dtype_plain(t), plain, dst, 256);
            if (st) return st;
        }
        return KILN_OK;
    }
    x8_layout l;
    if (!x8_layout_of(t, &l)) {
        const uint8_t *p =
            (const uint8_t *)w + (size_t)row * row_stride + kiln_dtype_row_bytes(t, k0);
        return kiln_dequant_row(t, p, dst, n);
    }
    const uint8_t *g = (const uint8_t *)w + (size_t)(row / 8) * 8 * row_stride;
    int j = (int)(row % 8);
    for (int64_t b = k0 / 32; b < (k0 + n) / 32; b++, dst += 32) {
        const uint8_t *blk = g + (size_t)b * 8 * l.plain_bytes;
        float d = h2f(blk + 2 * j), mn = l.head == 32 ? h2f(blk + 16 + 2 * j) : -8.0f * d;
        if (l.q8) { /* d * q, as the plain reader */
            for (int m = 0; m < 8; m++)
                for (int e = 0; e < 4; e++)
                    dst[4 * m + e] = d * (float)(int8_t)blk[16 + 32 * m + 4 * j + e];
            continue;
        }
        for (int m = 0; m < 4; m++)
            for (int e = 0; e < 4; e++) {
                uint8_t q = blk[l.head + 32 * m + 4 * j + e];
                /* q4_0: d * (q - 8) = d * q + (-8 * d), exactly as the plain reader */
                dst[4 * m + e] =
                    l.head == 32 ? d * (float)(q & 0x0F) + mn : d * (float)((q & 0x0F) - 8);
                dst[16 + 4 * m + e] =
                    l.head == 32 ? d * (float)(q >> 4) + mn : d * (float)((q >> 4) - 8);
            }
    }
    return KILN_OK;
}

kiln_status kiln_pack_rows(kiln_dtype packed, const void *src, size_t src_stride, int64_t nrows,
                           int64_t k, void *dst, size_t dst_stride) {
    if (packed == KILN_Q4_K_X8 || packed == KILN_Q6_K_X8) {
        const int q6 = packed == KILN_Q6_K_X8, pb = q6 ? 210 : 144;
        if (nrows % 8 || k % 256)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "%s packs whole groups of 8 rows of whole super-blocks (%lld rows "
                              "of %lld)",
                              kiln_dtype_name(packed), (long long)nrows, (long long)k);
        for (int64_t g = 0; g < nrows / 8; g++)
            for (int64_t b = 0; b < k / 256; b++) {
                const uint8_t *rows[8];
                uint8_t *blk = (uint8_t *)dst + (size_t)g * 8 * dst_stride + (size_t)b * 8 * pb;
                for (int j = 0; j < 8; j++)
                    rows[j] =
                        (const uint8_t *)src + (size_t)(8 * g + j) * src_stride + (size_t)b * pb;
                if (q6)
                    q6kx8_pack(blk, rows);
                else
                    q4kx8_pack(blk, rows);
            }
        return KILN_OK;
    }
    x8_layout l;
    if (!x8_layout_of(packed, &l))
        return kiln_error(KILN_ERR_UNSUPPORTED, "no packed layout %s",
                          kiln_dtype_name(packed) ? kiln_dtype_name(packed) : "?");
    if (nrows % 8 || k % 32)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%s packs whole groups of 8 rows of whole blocks (%lld rows of %lld)",
                          kiln_dtype_name(packed), (long long)nrows, (long long)k);
    const uint8_t *s = src;
    uint8_t *d = dst;
    int qs = l.q8 ? 2 : l.plain_bytes - 16; /* offset of the values in a plain block */
    for (int64_t g = 0; g < nrows / 8; g++)
        for (int64_t b = 0; b < k / 32; b++) {
            uint8_t *blk = d + (size_t)g * 8 * dst_stride + (size_t)b * 8 * l.plain_bytes;
            for (int j = 0; j < 8; j++) {
                const uint8_t *in =
                    s + (size_t)(8 * g + j) * src_stride + (size_t)b * l.plain_bytes;
                memcpy(blk + 2 * j, in, 2);
                if (l.head == 32) memcpy(blk + 16 + 2 * j, in + 2, 2);
                for (int m = 0; m < (l.q8 ? 8 : 4); m++)
                    memcpy(blk + l.head + 32 * m + 4 * j, in + qs + 4 * m, 4);
            }
        }
    return KILN_OK;
}
