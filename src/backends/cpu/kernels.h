/* kernels.h: the cpu backend's kernel table. One table per instruction-set
 * variant (scalar, avx2, avx512, avx512-vnni, avx512-amx, neon, dotprod, i8mm;
 * avx512-bf16 only when named), each in
 * its own file compiled with its own flags; the best one this CPU runs is
 * chosen at open (or the one KILN_CPU / kiln_open_options.cpu_variant
 * forces). Every entry of every table computes the same function; variants
 * differ only in rounding order within the tolerances tests/test_cpu_kernels.c
 * states.
 *
 * Matmuls: out[t, n] = sum_k x[t, k] * w[n, k]. Weights keep their stored
 * block layout (GGUF's for q8_0/q4_0/q4_1/q4_K/q6_K, plain rows for
 * f32/f16/bf16). Activations of a quantized matmul are first quantized, one
 * row at a time, to the format the weight dtype pairs with
 * (kiln_cpu_act_format), into the node's scratch; a gemm call then multiplies
 * a tile of weight rows by a tile of activation rows. */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ir/ops.h"

/* Activation formats. */
typedef enum kiln_cpu_act {
    KILN_CPU_ACT_F32 = 0,  /* plain f32 rows, used in place (f32, f16, bf16 weights) */
    KILN_CPU_ACT_Q8 = 1,   /* kiln_cpu_block_q8 per 32 values (q8_0, q4_0, q4_1 weights) */
    KILN_CPU_ACT_Q8K = 2,  /* kiln_cpu_block_q8k per 256 values (q4_K, q6_K weights) */
    KILN_CPU_ACT_Q8S = 3,  /* kiln_cpu_block_q8 with sum in place of s (q8_0 weights) */
    KILN_CPU_ACT_BF16 = 4, /* bf16 (round to nearest even), k rounded up to 32 and zero-padded:
                              avx512-bf16's f16/bf16 matmuls (gemm_bf16_act) */
} kiln_cpu_act;

/* 32 activations: x[i] ~= d * q[i]. KILN_CPU_ACT_Q8: s = d * sum(q) (for
 * weights with an offset or a minimum, e.g. q4_0's -8 and q4_1's m);
 * KILN_CPU_ACT_Q8S: sum = sum(q) exactly (q8_0 weights: the VNNI q8_0x8
 * kernel takes w + 128 as VPDPBUSD's u8 operand and takes 128 * sum off).
 * q is in -127..127 (d = max|x| / 127): the x86 kernels' u8 x s8 products
 * rely on it. 40 bytes either way (KILN_ACT_BLOCK_BYTES, planned into
 * programs). */
typedef struct kiln_cpu_block_q8 {
    float d;
    union {
        float s;
        int32_t sum;
    };
    int8_t q[32];
} kiln_cpu_block_q8;

/* 256 activations: x[i] ~= d * q[i]; bsums[j] = sum of q[16j .. 16j+15].
 * Symmetric like kiln_cpu_block_q8: d = max|x| / 127, q in -127..127. */
typedef struct kiln_cpu_block_q8k {
    float d;
    int16_t bsums[16];
    int8_t q[256];
} kiln_cpu_block_q8k;

/* The activation format a weight dtype's matmul takes; -1 when the cpu
 * backend has no matmul for it. */
int kiln_cpu_act_format(kiln_dtype weight);
/* Bytes of one activation row of k values (k a multiple of the weight's
 * block); always <= kiln_matmul_act_bytes(1, k) (ops.h), so T rows fit the
 * node's scratch. 0 for KILN_CPU_ACT_F32 (used in place). */
size_t kiln_cpu_act_row_bytes(int act, int64_t k);

/* out[t * ldo + r] = dot(weight row r, activation row t) for 0 <= r < nr,
 * 0 <= t < nt. w: the first weight row, rows w_stride bytes apart (packed
 * x8 dtypes: w is the first row of a group, groups are 8 * w_stride bytes
 * apart, and nr is a multiple of 8); a: the
 * first activation row (in the weight's activation format), rows a_stride
 * bytes apart; k: values per row (a multiple of the weight's block). */
typedef void (*kiln_cpu_gemm_fn)(int64_t k, const void *w, size_t w_stride, int64_t nr,
                                 const void *a, size_t a_stride, int64_t nt, float *out,
                                 int64_t ldo);

typedef struct kiln_cpu_kernels {
    const char *name; /* "scalar", "avx2", "avx512", "avx512-vnni", "avx512-amx", "neon", ... */
    /* Quantizes k values of x into one activation row (act Q8, Q8S, Q8K; BF16
     * where gemm_bf16_act is filled in). */
    void (*quantize_row)(int act, const float *x, void *dst, int64_t k);
    /* Indexed by kiln_dtype; NULL = not in this table. */
    kiln_cpu_gemm_fn gemm[KILN_DTYPE_END];
    /* Vector helpers for the other ops (attention with an f32 or f16 cache). */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f16)(const float *a, const uint16_t *b, int64_t n);
    void (*axpy_f32)(float alpha, const float *x, float *y, int64_t n); /* y += alpha * x */
    void (*axpy_f16)(float alpha, const uint16_t *x, float *y, int64_t n);
    /* avx512-bf16: the f16 and bf16 matmuls of gemm[] (same bits) on activation
     * rows quantize_row already rounded (KILN_CPU_ACT_BF16), for k <=
     * KILN_CPU_BF16_KMAX: the cpu backend converts them once per matmul into
     * the node's scratch when it holds them. NULL elsewhere. */
    kiln_cpu_gemm_fn gemm_bf16_act[KILN_DTYPE_END];
    /* Attention's scores over an f16 cache where they must not use gemm[KILN_F16]
     * (avx512-bf16: its f16 matmul rounds to bf16); NULL = gemm[KILN_F16]. */
    kiln_cpu_gemm_fn score_f16;
    /* 1: chosen only when named (KILN_CPU), never as the best the CPU runs:
     * avx512-bf16, whose f16 and bf16 matmuls round the activations (and
     * f16 weights) to bf16, within KILN_CPU_BF16_TOL_F16 / _BF16 times
     * sum |w * a| instead of the other tables' 2e-5. */
    int opt_in;
} kiln_cpu_kernels;

/* The opt-in avx512-bf16 table's error bound on an f16 / bf16 matmul output,
 * relative to sum_k |w[k] * a[k]|: both operands rounded to bf16 (2^-8
 * each) or only the activations, plus the f32 accumulation's 2e-5. */
#define KILN_CPU_BF16_TOL_F16 (1.0 / 128 + 2e-5)
#define KILN_CPU_BF16_TOL_BF16 (1.0 / 256 + 2e-5)
#define KILN_CPU_BF16_KMAX 4096 /* longer rows: gemm[]'s exact f16/bf16 path */

/* The tables built into this binary, best first (the scalar one last). */
int kiln_cpu_kernels_all(const kiln_cpu_kernels *const **out);
/* 1 when this CPU can run the table's instructions. */
int kiln_cpu_kernels_runnable(const kiln_cpu_kernels *k);
/* The table to use: `name` (NULL = $KILN_CPU, and when that is unset the
 * best runnable one). KILN_ERR_UNSUPPORTED names the runnable ones when
 * `name` is unknown or this CPU cannot run it. */
kiln_status kiln_cpu_kernels_select(const char *name, const kiln_cpu_kernels **out);

/* AMX on this CPU and OS: 1 usable (the OS kernel granted this process the
 * tile data state; asked once, on the first call), -1 the CPU has it but the
 * OS kernel refused it, 0 absent (or not an x86 build). */
int kiln_cpu_amx(void);

/* The variant tables (kernels_<variant>.c); a variant not built for this
 * architecture is absent from kiln_cpu_kernels_all. */
extern const kiln_cpu_kernels kiln_cpu_kernels_scalar;
extern const kiln_cpu_kernels kiln_cpu_kernels_avx2;
extern const kiln_cpu_kernels kiln_cpu_kernels_avx512;
extern const kiln_cpu_kernels kiln_cpu_kernels_avx512_vnni;
extern const kiln_cpu_kernels kiln_cpu_kernels_avx512_amx;
extern const kiln_cpu_kernels kiln_cpu_kernels_avx512_bf16;
extern const kiln_cpu_kernels kiln_cpu_kernels_neon;
extern const kiln_cpu_kernels kiln_cpu_kernels_dotprod;
extern const kiln_cpu_kernels kiln_cpu_kernels_i8mm;

#endif /* KILN_CPU_KERNELS_H */
