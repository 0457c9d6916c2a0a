/* kernels_x86_amx.h: the AMX tile operations the avx512-amx table's x8
 * kernels use (kernels_x86_x8.h), included by kernels_x86_x8.h. Built on the
 * real instructions (-mamx-tile -mamx-int8: the avx512-amx table) or, with
 * KILN_X86_AMX_EMU, on an exact C emulation of them (the test tables of
 * tests/cpu_kernels_amx_emu.c, which run the same kernels on CPUs without
 * AMX). KX_AMX is 1 in both cases, else 0.
 *
 * The kernels use one configuration (kxa_config): tile 0 holds 16
 * activation rows of one 32-value block (16 rows x 32 s8), tiles 1 and 2 one
 * block of two 8-row weight groups as stored by q8_0x8 (8 rows of 4 columns
 * x 8 weight rows: the packed layout is already AMX's B layout, FORMAT.md
 * 6.1), and tiles 3 and 4 their int32 dot products (16 activation rows x 8
 * weight rows). Tile operands are numbered by literals: the instructions
 * take them as immediates. */
#ifndef KILN_CPU_KERNELS_X86_AMX_H
#define KILN_CPU_KERNELS_X86_AMX_H

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define KX_AMX 1
#define kxa_loadconfig(c) _tile_loadconfig(c)
#define kxa_release() _tile_release()
#define kxa_load(t, p, stride) _tile_loadd(t, p, stride)
#define kxa_zero(t) _tile_zero(t)
#define kxa_store(t, p, stride) _tile_stored(t, p, stride)
/* C += A (s8) . B (s8 / u8), per 32-bit element the sum of 4 products over
 * each of A's K / 4 groups: TDPBSSD / TDPBSUD. */
#define kxa_dpbssd(c, a, b) _tile_dpbssd(c, a, b)
#define kxa_dpbsud(c, a, b) _tile_dpbsud(c, a, b)
#elif defined(KILN_X86_AMX_EMU)
#define KX_AMX 1
/* The tile registers of this thread: rows x colsb bytes each, as the last
 * configuration set them. */
typedef struct {
    int rows, colsb;
    uint8_t b[16][64];
} kxa_tile;
static _Thread_local kxa_tile kxa_regs[8];

/* LDTILECFG of palette 1: colsb (u16) at byte 16 + 2i, rows at byte 48 + i;
 * every tile starts zeroed. */
static inline void kxa_loadconfig(const void *cfg) {
    const uint8_t *c = cfg;
    for (int i = 0; i < 8; i++) {
        kxa_regs[i].colsb = c[16 + 2 * i] | c[17 + 2 * i] << 8;
        kxa_regs[i].rows = c[48 + i];
        memset(kxa_regs[i].b, 0, sizeof kxa_regs[i].b);
    }
}
static inline void kxa_release(void) {
    memset(kxa_regs, 0, sizeof kxa_regs);
}
static inline void kxa_load(int t, const void *p, size_t stride) {
    for (int r = 0; r < kxa_regs[t].rows; r++)
        memcpy(kxa_regs[t].b[r], (const uint8_t *)p + (size_t)r * stride,
               (size_t)kxa_regs[t].colsb);
}
static inline void kxa_zero(int t) {
    memset(kxa_regs[t].b, 0, sizeof kxa_regs[t].b);
}
static inline void kxa_store(int t, void *p, size_t stride) {
    for (int r = 0; r < kxa_regs[t].rows; r++)
        memcpy((uint8_t *)p + (size_t)r * stride, kxa_regs[t].b[r], (size_t)kxa_regs[t].colsb);
}
/* The instructions' definition: C[m].dword[n] += sum over k < A.colsb / 4
 * and e < 4 of A[m].byte[4k + e] (signed) * B[k].byte[4n + e] (signed, or
 * unsigned when bu), for m < A.rows and n < C.colsb / 4. */
static inline void kxa_dp(int c, int a, int b, int bu) {
    const kxa_tile *A = &kxa_regs[a], *B = &kxa_regs[b];
    kxa_tile *C = &kxa_regs[c];
    for (int m = 0; m < A->rows; m++)
        for (int n = 0; n < C->colsb / 4; n++) {
            int32_t acc;
            memcpy(&acc, C->b[m] + 4 * n, 4);
            for (int k = 0; k < A->colsb / 4; k++)
                for (int e = 0; e < 4; e++) {
                    const uint8_t wb = B->b[k][4 * n + e];
                    acc += (int8_t)A->b[m][4 * k + e] * (bu ? (int32_t)wb : (int32_t)(int8_t)wb);
                }
            memcpy(C->b[m] + 4 * n, &acc, 4);
        }
}
#define kxa_dpbssd(c, a, b) kxa_dp(c, a, b, 0)
#define kxa_dpbsud(c, a, b) kxa_dp(c, a, b, 1)
#else
#define KX_AMX 0
#endif

#if KX_AMX
enum { KXA_M = 16 }; /* activation rows per AMX tile */

/* The configuration above (palette 1). */
static inline void kxa_config(void) {
    _Alignas(64) uint8_t c[64] = {1};
    static const uint8_t rows[5] = {KXA_M, 8, 8, KXA_M, KXA_M};
    for (int i = 0; i < 5; i++) {
        c[16 + 2 * i] = 32; /* colsb */
        c[48 + i] = rows[i];
    }
    kxa_loadconfig(c);
}
#endif

#endif /* KILN_CPU_KERNELS_X86_AMX_H */
