/* quant.h: the block formats Kiln reads and writes, in reference C.
 * Layouts are the public GGML ones:
 *   q8_0  32 values:  f16 d, i8 q[32]                      x = d*q
 *   q4_0  32 values:  f16 d, u8 q[16] (lo nibbles: 0..15, hi: 16..31)   x = d*(q-8)
 *   q4_1  32 values:  f16 d, f16 m, u8 q[16]                x = d*q + m
 *   q4_K 256 values:  f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale
 *                     and min), u8 q[128]                    x = d*sc*q - dmin*mn
 *   q6_K 256 values:  u8 ql[128], u8 qh[64], i8 scales[16], f16 d
 *                                                           x = d*sc*(q-32) */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include "base/base.h"

/* Expands one row of `n` values (n a whole number of blocks) to f32.
 * KILN_ERR_UNSUPPORTED for a dtype with no reader. */
kiln_status kiln_dequant_row(kiln_dtype t, const void *src, float *dst, int64_t n);

/* Quantizes one row of `n` f32 values (whole blocks) to q8_0 or q4_0 (round
 * to nearest, the scale from the block's largest magnitude), or converts to
 * f16 / bf16 / f32. KILN_ERR_UNSUPPORTED for other targets. */
kiln_status kiln_quant_row(kiln_dtype t, const float *src, void *dst, int64_t n);

/* Packed layouts (the x8 dtypes, docs/FORMAT.md §6.1): rows interleaved in
 * groups so the cpu kernels compute several rows per instruction. */

/* The packed dtype a plain dtype's weights become (itself when none). */
kiln_dtype kiln_dtype_packed(kiln_dtype plain);
/* The plain dtype a packed one interleaves (q4_0x8 -> q4_0); others as given. */
kiln_dtype kiln_dtype_plain(kiln_dtype packed);

/* q4_Kx8 (docs/FORMAT.md 6.1): the scale and min of sub-block sb (0..7) of
 * row j (0..7) in a packed 1152-byte super-block: for x = 8 * sb + j, the
 * low 4 bits are nibble x of bytes 32.. (scales) / 64.. (mins) (x < 32: low
 * nibble of byte x, else high nibble of byte x - 32) and the top 2 bits are
 * bits 2 * (x / 16) of byte x % 16 of bytes 96.. (scales) / 112.. (mins). */
static inline void kiln_q4kx8_scale_min(const uint8_t *blk, int sb, int j, int *sc, int *mn) {
    int x = 8 * sb + j, sh = x < 32 ? 0 : 4, hs = 2 * (x / 16);
    *sc = ((blk[32 + x % 32] >> sh) & 15) | ((blk[96 + x % 16] >> hs) & 3) << 4;
    *mn = ((blk[64 + x % 32] >> sh) & 15) | ((blk[112 + x % 16] >> hs) & 3) << 4;
}

/* q6_Kx8 (docs/FORMAT.md 6.1): value (0..63, before q6_K's -32) of column
 * i (0..255) of row j (0..7) in a packed 1680-byte super-block. Columns go
 * in vectors u = i / 4 of 4 columns x 8 rows (byte 4j + e, e = i % 4); for
 * sub-block s = u / 4 (16 columns, scale at byte 16 + 8s + j) and k = u % 4,
 * the low 4 bits are nibble k & 1 of ql vector 2s + k / 2 (bytes 144 +
 * 32 (2s + k / 2) ..) and the top 2 bits are bits 2k of qh vector s (bytes
 * 1168 + 32s ..). */
static inline int kiln_q6kx8_value(const uint8_t *blk, int j, int i) {
    int u = i / 4, e = i % 4, s = u / 4, k = u % 4;
    int lo = blk[144 + 32 * (2 * s + k / 2) + 4 * j + e] >> (4 * (k & 1)) & 15;
    return lo | ((blk[1168 + 32 * s + 4 * j + e] >> (2 * k)) & 3) << 4;
}

/* Values k0 .. k0+n-1 of row `row` of a weight in any layout, rows
 * row_stride bytes apart (for a packed dtype: groups of 8 rows are
 * 8 * row_stride apart). k0 and n are whole blocks. */
kiln_status kiln_weight_dequant(kiln_dtype t, const void *w, size_t row_stride, int64_t row,
                                int64_t k0, int64_t n, float *dst);

/* Packs nrows rows of k values of the plain dtype `packed` comes from into
 * `packed`'s layout. nrows a whole number of groups. */
kiln_status kiln_pack_rows(kiln_dtype packed, const void *src, size_t src_stride, int64_t nrows,
                           int64_t k, void *dst, size_t dst_stride);

#endif
