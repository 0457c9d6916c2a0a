/* dtype.c: the one table of element types: each dtype's name, block size
 * in elements and bytes, and row interleaving, with the kiln_dtype_*
 * lookups every module sizes tensors by. */
#include <stddef.h>

#include "base/base.h"

typedef struct {
    const char *name;
    int block;       /* elements per block */
    int block_bytes; /* bytes per block */
    int group;       /* rows interleaved per group */
} dtype_row;

static const dtype_row *dtype_info(kiln_dtype t) {
    /* Block layouts are the public GGML ones: Q8_0 = f16 scale + 32 int8;
     * Q4_0 = f16 scale + 16 bytes of nibbles; Q4_1 adds an f16 minimum;
     * Q4_K and Q6_K are 256-element super-blocks. */
    static const dtype_row f32 = {"f32", 1, 4, 1}, f16 = {"f16", 1, 2, 1}, bf16 = {"bf16", 1, 2, 1},
                           i32 = {"i32", 1, 4, 1}, q8_0 = {"q8_0", 32, 34, 1},
                           q4_0 = {"q4_0", 32, 18, 1}, q4_1 = {"q4_1", 32, 20, 1},
                           q4_k = {"q4_K", 256, 144, 1}, q6_k = {"q6_K", 256, 210, 1},
                           q4_0x8 = {"q4_0x8", 32, 18, 8}, q4_1x8 = {"q4_1x8", 32, 20, 8},
                           q8_0x8 = {"q8_0x8", 32, 34, 8}, q4_kx8 = {"q4_Kx8", 256, 144, 8},
                           q6_kx8 = {"q6_Kx8", 256, 210, 8};
    switch (t) {
    case KILN_F32:
        return &f32;
    case KILN_F16:
        return &f16;
    case KILN_BF16:
        return &bf16;
    case KILN_I32:
        return &i32;
    case KILN_Q8_0:
        return &q8_0;
    case KILN_Q4_0:
        return &q4_0;
    case KILN_Q4_1:
        return &q4_1;
    case KILN_Q4_K:
        return &q4_k;
    case KILN_Q6_K:
        return &q6_k;
    case KILN_Q4_0_X8:
        return &q4_0x8;
    case KILN_Q4_1_X8:
        return &q4_1x8;
    case KILN_Q8_0_X8:
        return &q8_0x8;
    case KILN_Q4_K_X8:
        return &q4_kx8;
    case KILN_Q6_K_X8:
        return &q6_kx8;
    }
    return NULL;
}

int kiln_dtype_valid(uint32_t v) {
    return dtype_info((kiln_dtype)v) != NULL;
}

const char *kiln_dtype_name(kiln_dtype dtype) {
    const dtype_row *r = dtype_info(dtype);
    return r ? r->name : NULL;
}

int kiln_dtype_block(kiln_dtype dtype) {
    const dtype_row *r = dtype_info(dtype);
    return r ? r->block : 0;
}

int kiln_dtype_row_group(kiln_dtype dtype) {
    const dtype_row *r = dtype_info(dtype);
    return r ? r->group : 0;
}

size_t kiln_dtype_row_bytes(kiln_dtype dtype, int64_t n) {
    const dtype_row *r = dtype_info(dtype);
    if (!r || n < 0 || n % r->block) return 0;
    return (size_t)(n / r->block) * (size_t)r->block_bytes;
}
