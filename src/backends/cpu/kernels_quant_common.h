/* kernels_quant_common.h: activation quantization (kiln_cpu_block_q8 and
 * kiln_cpu_block_q8k rows) in portable C, shared by every kernel variant so
 * that all tables quantize bit-identically. Activations are a small fraction
 * of a matmul's bytes, so this is not worth a SIMD version per variant.
 *
 * Both formats are symmetric: d = max|x| / 127, q = x * (1/d) rounded to
 * nearest (ties to even: the default rounding mode), so q stays in
 * -127..127 (never -128: the x86 sign trick and VPMADDUBSW rely on that);
 * a block of zeros gets d = 0 and q = 0. */
#ifndef KILN_CPU_KERNELS_QUANT_COMMON_H
#define KILN_CPU_KERNELS_QUANT_COMMON_H

#include <math.h>
#include <string.h>

#include "backends/cpu/kernels.h"

/* n values of x to q[0..n-1]; returns d and writes sum(q) to *sum. */
static inline float kiln_cpu_quant_block_sym(const float *x, int8_t *q, int n, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        float v = fabsf(x[j]);
        amax = v > amax ? v : amax;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < n; j++) {
        /* clamped before the conversion: x * id is +-inf or NaN when d is
         * subnormal (1 / d overflows) or x is not finite; NaN gives 0 */
        float r = nearbyintf(x[j] * id);
        int v = r >= 127.0f ? 127 : r <= -127.0f ? -127 : r == r ? (int)r : 0;
        q[j] = (int8_t)v;
        s += v;
    }
    *sum = s;
    return d;
}

static inline void kiln_cpu_quantize_row_common(int act, const float *x, void *dst, int64_t k) {
    if (act == KILN_CPU_ACT_Q8 || act == KILN_CPU_ACT_Q8S) {
        kiln_cpu_block_q8 *b = dst;
        for (int64_t i = 0; i < k / 32; i++, x += 32) {
            int sum;
            kiln_cpu_block_q8 blk;
            blk.d = kiln_cpu_quant_block_sym(x, blk.q, 32, &sum);
            if (act == KILN_CPU_ACT_Q8S)
                blk.sum = sum;
            else
                blk.s = blk.d * (float)sum;
            memcpy(&b[i], &blk, sizeof blk);
        }
    } else if (act == KILN_CPU_ACT_Q8K) {
        kiln_cpu_block_q8k *b = dst;
        for (int64_t i = 0; i < k / 256; i++, x += 256) {
            int sum;
            kiln_cpu_block_q8k blk;
            blk.d = kiln_cpu_quant_block_sym(x, blk.q, 256, &sum);
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += blk.q[16 * j + l];
                blk.bsums[j] = (int16_t)s;
            }
            memcpy(&b[i], &blk, sizeof blk);
        }
    }
}

#endif /* KILN_CPU_KERNELS_QUANT_COMMON_H */
