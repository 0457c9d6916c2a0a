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

#endif
