/* test_cpu_kernels.c: every cpu kernel table this CPU runs (the others are
 * listed as skipped) against double-precision oracles built from quant.c's
 * dequantization: gemm for every weight dtype on odd shapes, activation
 * quantization, the bit-exact independence of an output from the tile and
 * the split that computes it, the dot/axpy helpers, and variant selection.
 * On x86 with AVX2 the avx512-vnni algorithms also run, on AVX2 with an exact
 * VPDPBUSD emulation (cpu_kernels_vnni_emu.c), so CPUs without VNNI check them.
 *
 * Tolerances, relative to sum_k |w[k] * a[k]| of the output's dot product:
 *   f32, f16, bf16  2e-5  (8- or 16-lane f32 accumulation, k <= 2115)
 *   quantized       1e-5  (integer within a block; f32 over <= 65 blocks, and
 *                          the oracle's own f32 dequantization of q4_1/q4_K/q6_K)
 * The oracle multiplies the dequantized weights by the dequantized
 * activation rows (the ones the kernel saw), so quantization error of the
 * activations is not part of the comparison. */
#include <stdint.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_quant_common.h"
#include "harness.h"
#include "quant/quant.h"

static const kiln_dtype k_dtypes[] = {
    KILN_F32,  KILN_F16,     KILN_BF16,    KILN_Q8_0,    KILN_Q4_0,    KILN_Q4_1,   KILN_Q4_K,
    KILN_Q6_K, KILN_Q4_0_X8, KILN_Q4_1_X8, KILN_Q8_0_X8, KILN_Q4_K_X8, KILN_Q6_K_X8};
#define N_DTYPES (int)(sizeof k_dtypes / sizeof *k_dtypes)

#define KT_MAX_TABLES 16 /* under_test's most */

/* The tables this CPU runs, best first (scalar last); prints the skipped
 * ones once. */
static int runnable(const kiln_cpu_kernels **out) {
    static int printed;
    const kiln_cpu_kernels *const *all;
    int n = kiln_cpu_kernels_all(&all), m = 0;
    char ran[160] = "", skipped[160] = "";
    for (int i = 0; i < n; i++) {
        char *list = kiln_cpu_kernels_runnable(all[i]) ? ran : skipped;
        if (kiln_cpu_kernels_runnable(all[i])) out[m++] = all[i];
        if (*list) strncat(list, ", ", 159 - strlen(list));
        strncat(list, all[i]->name, 159 - strlen(list));
    }
    if (!printed++)
        fprintf(stderr, "  cpu kernel variants run: %s; skipped (this CPU lacks them): %s\n", ran,
                *skipped ? skipped : "none");
    return m;
}

#if KILN_TEST_VNNI_EMU
extern const kiln_cpu_kernels kt_cpu_kernels_vnni_emu; /* cpu_kernels_vnni_emu.c */
extern const kiln_cpu_kernels kt_cpu_kernels_wide_emu; /* cpu_kernels_wide_emu.c */
extern const kiln_cpu_kernels kt_cpu_kernels_wide_vnni_emu;
extern const kiln_cpu_kernels kt_cpu_kernels_amx_emu; /* cpu_kernels_amx_emu*.c */
extern const kiln_cpu_kernels kt_cpu_kernels_amx_on_avx2;
#endif

/* The tables to check: the runnable ones, the VNNI algorithms on AVX2
 * (emulated VPDPBUSD) where this CPU has AVX2, and the AMX kernels on
 * emulated tile instructions (on AVX2, and on AVX-512 where it runs). */
static int under_test(const kiln_cpu_kernels **out) {
    int m = runnable(out);
#if KILN_TEST_VNNI_EMU
    static int printed;
    if (kiln_cpu_kernels_runnable(&kiln_cpu_kernels_avx2)) {
        out[m++] = &kt_cpu_kernels_vnni_emu;
        out[m++] = &kt_cpu_kernels_wide_emu;
        out[m++] = &kt_cpu_kernels_wide_vnni_emu;
        out[m++] = &kt_cpu_kernels_amx_on_avx2;
        int z = kiln_cpu_kernels_runnable(&kiln_cpu_kernels_avx512_vnni);
        if (z) out[m++] = &kt_cpu_kernels_amx_emu;
        if (!printed++)
            fprintf(stderr,
                    "  also run: %s (VNNI algorithms, emulated VPDPBUSD), %s and %s (the AVX-512 "
                    "tables' tilings), %s%s%s (AMX kernels, emulated tile instructions)\n",
                    kt_cpu_kernels_vnni_emu.name, kt_cpu_kernels_wide_emu.name,
                    kt_cpu_kernels_wide_vnni_emu.name, kt_cpu_kernels_amx_on_avx2.name,
                    z ? " and " : "", z ? kt_cpu_kernels_amx_emu.name : "");
    }
#endif
    return m;
}

/* NULL when every entry of the table is filled in, else the missing one. */
static const char *missing_entry(const kiln_cpu_kernels *k) {
    if (!k->quantize_row) return "quantize_row";
    for (int d = 0; d < N_DTYPES; d++)
        if (!k->gemm[k_dtypes[d]]) return kiln_dtype_name(k_dtypes[d]);
    if (!k->dot_f32 || !k->dot_f16) return "dot_f32/dot_f16";
    if (!k->axpy_f32 || !k->axpy_f16) return "axpy_f32/axpy_f16";
    return NULL;
}

/* Fails the test when a table under test is incomplete (before calling into it). */
#define REQUIRE_COMPLETE(k)                                                                        \
    ASSERT_MSG(!missing_entry(k), "table %s has no %s", (k)->name, missing_entry(k))

static void put_f16(uint8_t *p, float f) {
    uint16_t h = kiln_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random values with magnitudes varying by block, some all-zero blocks. */
static void rand_values(float *x, int64_t n, unsigned long long *s) {
    for (int64_t i = 0; i < n; i += 32) {
        unsigned kind = kt_rand(s) % 8;
        float scale = kind == 0 ? 0.0f : kind == 1 ? 100.0f : kind == 2 ? 0.01f : 1.0f;
        for (int64_t j = i; j < n && j < i + 32; j++)
            x[j] = scale * kt_randf(s);
    }
}

/* nr weight rows of k values, each row_bytes + pad apart. q8_0, q4_0, f16,
 * bf16 and f32 come from quant.c's writers; q4_1, q4_K and q6_K (no writer)
 * are random bytes with small random f16 scales. */
static void make_weights(kiln_dtype t, int64_t nr, int64_t k, uint8_t *w, size_t ws,
                         unsigned long long *s) {
    if (kiln_dtype_row_group(t) > 1) { /* plain rows, packed */
        kiln_dtype from = kiln_dtype_plain(t);
        uint8_t *plain = malloc(ws * (size_t)nr);
        make_weights(from, nr, k, plain, ws, s);
        (void)kiln_pack_rows(t, plain, ws, nr, k, w, ws);
        free(plain);
        return;
    }
    float *x = malloc((size_t)k * sizeof *x);
    size_t rb = kiln_dtype_row_bytes(t, k);
    for (int64_t r = 0; r < nr; r++) {
        uint8_t *p = w + r * ws;
        if (t == KILN_Q4_1 || t == KILN_Q4_K || t == KILN_Q6_K) {
            for (size_t i = 0; i < rb; i++)
                p[i] = (uint8_t)kt_rand(s);
            if (t == KILN_Q4_1)
                for (int64_t b = 0; b < k / 32; b++) {
                    put_f16(p + 20 * b, 0.01f * kt_randf(s));
                    put_f16(p + 20 * b + 2, 0.1f * kt_randf(s));
                }
            if (t == KILN_Q4_K)
                for (int64_t b = 0; b < k / 256; b++) {
                    put_f16(p + 144 * b, 0.001f * kt_randf(s));
                    put_f16(p + 144 * b + 2, 0.001f * kt_randf(s));
                }
            if (t == KILN_Q6_K)
                for (int64_t b = 0; b < k / 256; b++)
                    put_f16(p + 210 * b + 208, 0.0005f * kt_randf(s));
        } else {
            rand_values(x, k, s);
            (void)kiln_quant_row(t, x, p, k);
        }
    }
    free(x);
}

/* Activation row t as the kernel sees it (f32 or dequantized Q8/Q8K). */
static void act_values(int act, const uint8_t *a, int64_t k, double *y) {
    if (act == KILN_CPU_ACT_F32) {
        for (int64_t i = 0; i < k; i++) {
            float f;
            memcpy(&f, a + 4 * i, 4);
            y[i] = f;
        }
    } else if (act == KILN_CPU_ACT_Q8 || act == KILN_CPU_ACT_Q8S) {
        for (int64_t b = 0; b < k / 32; b++) {
            kiln_cpu_block_q8 blk;
            memcpy(&blk, a + b * sizeof blk, sizeof blk);
            for (int j = 0; j < 32; j++)
                y[32 * b + j] = (double)blk.d * blk.q[j];
        }
    } else {
        for (int64_t b = 0; b < k / 256; b++) {
            kiln_cpu_block_q8k blk;
            memcpy(&blk, a + b * sizeof blk, sizeof blk);
            for (int j = 0; j < 256; j++)
                y[256 * b + j] = (double)blk.d * blk.q[j];
        }
    }
}

/* One problem: weights, f32 activations and their quantized rows. */
typedef struct {
    kiln_dtype t;
    int act;
    int64_t k, nr, nt;
    size_t ws, as;
    uint8_t *w, *a;
    float *x; /* nt x k */
} problem;

static void problem_make(problem *p, const kiln_cpu_kernels *kt, kiln_dtype t, int64_t k,
                         int64_t nr, int64_t nt, unsigned long long *s) {
    p->t = t;
    p->act = kiln_cpu_act_format(t);
    nr = (nr + kiln_dtype_row_group(t) - 1) / kiln_dtype_row_group(t) * kiln_dtype_row_group(t);
    p->k = k, p->nr = nr, p->nt = nt;
    p->ws = kiln_dtype_row_bytes(t, k) + 6; /* unaligned rows */
    p->w = malloc(p->ws * (size_t)nr);
    make_weights(t, nr, k, p->w, p->ws, s);
    p->x = malloc((size_t)(nt * k) * sizeof *p->x);
    rand_values(p->x, nt * k, s);
    if (p->act == KILN_CPU_ACT_F32) {
        p->as = (size_t)k * 4 + 12;
        p->a = malloc(p->as * (size_t)nt);
        for (int64_t r = 0; r < nt; r++)
            memcpy(p->a + r * p->as, p->x + r * k, (size_t)k * 4);
    } else {
        p->as = kiln_cpu_act_row_bytes(p->act, k) + 8;
        p->a = calloc((size_t)nt, p->as);
        for (int64_t r = 0; r < nt; r++)
            kt->quantize_row(p->act, p->x + r * k, p->a + r * p->as, k);
    }
}

static void problem_free(problem *p) {
    free(p->w);
    free(p->a);
    free(p->x);
}

/* ---- gemm against the oracle --------------------------------------------------- */
static double tol_of(const kiln_cpu_kernels *kt, kiln_dtype t) {
    if (kt->opt_in && t == KILN_F16) return KILN_CPU_BF16_TOL_F16; /* avx512-bf16 */
    if (kt->opt_in && t == KILN_BF16) return KILN_CPU_BF16_TOL_BF16;
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 ? 2e-5 : 1e-5;
}

/* Runs kt's gemm on p and compares with the oracle; returns a message or NULL. */
static const char *check_gemm(const kiln_cpu_kernels *kt, const problem *p, char *msg, size_t msz) {
    int64_t ldo = p->nr + 3;
    float *out = malloc((size_t)(ldo * p->nt) * sizeof *out);
    for (int64_t i = 0; i < ldo * p->nt; i++)
        out[i] = 12345.0f;
    kt->gemm[p->t](p->k, p->w, p->ws, p->nr, p->a, p->as, p->nt, out, ldo);
    float *wf = malloc((size_t)p->k * sizeof *wf);
    double *av = malloc((size_t)(p->k * p->nt) * sizeof *av);
    for (int64_t t = 0; t < p->nt; t++)
        act_values(p->act, p->a + t * p->as, p->k, av + t * p->k);
    const char *bad = NULL;
    for (int64_t r = 0; r < p->nr && !bad; r++) {
        (void)kiln_weight_dequant(p->t, p->w, p->ws, r, 0, p->k, wf);
        for (int64_t t = 0; t < p->nt && !bad; t++) {
            double sum = 0, mag = 0;
            for (int64_t i = 0; i < p->k; i++) {
                double v = (double)wf[i] * av[t * p->k + i];
                sum += v;
                mag += fabs(v);
            }
            double got = out[t * ldo + r];
            if (!(fabs(got - sum) <= tol_of(kt, p->t) * mag + 1e-30)) {
                snprintf(msg, msz,
                         "%s %s k=%lld nr=%lld nt=%lld: out[%lld,%lld] = %.9g, oracle %.9g "
                         "(sum|wa| %.3g)",
                         kt->name, kiln_dtype_name(p->t), (long long)p->k, (long long)p->nr,
                         (long long)p->nt, (long long)t, (long long)r, got, sum, mag);
                bad = msg;
            }
        }
    }
    for (int64_t t = 0; t < p->nt && !bad; t++)
        for (int64_t r = p->nr; r < ldo && !bad; r++)
            if (out[t * ldo + r] != 12345.0f) {
                snprintf(msg, msz, "%s %s wrote out[%lld,%lld] past nr", kt->name,
                         kiln_dtype_name(p->t), (long long)t, (long long)r);
                bad = msg;
            }
    free(out);
    free(wf);
    free(av);
    return bad;
}

TEST(gemm_matches_oracle) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks);
    for (int v = 0; v < nk; v++)
        REQUIRE_COMPLETE(ks[v]);
    static const int64_t sizes[] = {1, 3, 5, 17, 33};
    unsigned long long s = 42;
    char msg[512];
    int ran = 0;
    for (int v = 0; v < nk; v++)
        for (int d = 0; d < N_DTYPES; d++) {
            kiln_dtype t = k_dtypes[d];
            int64_t blk = kiln_dtype_block(t);
            int64_t ks_[3] = {blk, 3 * blk, 2048 + blk};
            if (blk == 1) ks_[0] = 7, ks_[1] = 67, ks_[2] = 2115;
            for (int ki = 0; ki < 3; ki++)
                for (int i = 0; i < 5; i++)
                    for (int j = 0; j < 5; j++) {
                        if (ki == 2 && (i + j) % 3) continue; /* fewer shapes at the large k */
                        problem p;
                        problem_make(&p, ks[v], t, ks_[ki], sizes[i], sizes[j], &s);
                        const char *bad = check_gemm(ks[v], &p, msg, sizeof msg);
                        problem_free(&p);
                        ASSERT_MSG(!bad, "%s", msg);
                        ran++;
                    }
        }
    ASSERT(ran > 0);
}

/* Extreme codes, where 16-bit intermediate sums would saturate if a kernel
 * got its bounds wrong: q8_0 weights -128 and 127 (GGUF files may hold -128),
 * all-15 nibbles, q6_K codes 0 and 63 with scales -128 and 127, q4_K scales
 * and mins 63, and activations of +-127 (x = +-1). */
TEST(gemm_extreme_codes) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks);
    for (int v = 0; v < nk; v++)
        REQUIRE_COMPLETE(ks[v]);
    unsigned long long s = 99;
    char msg[512];
    for (int v = 0; v < nk; v++)
        for (int d = 3; d < N_DTYPES; d++) {
            kiln_dtype t = k_dtypes[d];
            problem p;
            const int x8 = kiln_dtype_row_group(t) > 1, bb = t == KILN_Q4_1_X8 ? 160 : 144;
            problem_make(&p, ks[v], t, 512, x8 ? 17 : 5, x8 ? 17 : 5, &s); /* x8: an AMX tile */
            if (t == KILN_Q6_K_X8) /* rows alternately codes 63 and 0, scales -128 and 127 */
                for (int64_t g = 0; g < p.nr / 8; g++)
                    for (int64_t b = 0; b < 2; b++) {
                        uint8_t *blk = p.w + g * 8 * p.ws + 1680 * b;
                        for (int i = 0; i < 128; i++)
                            blk[16 + i] = i % 2 ? 0x80 : 0x7F;
                        for (int vi = 0; vi < 48; vi++)
                            for (int j = 0; j < 8; j++)
                                memset(blk + 144 + 32 * vi + 4 * j, j % 2 ? 0xFF : 0, 4);
                    }
            else if (t == KILN_Q4_K_X8) /* scales, mins and nibbles all at their largest */
                for (int64_t g = 0; g < p.nr / 8; g++)
                    for (int64_t b = 0; b < 2; b++)
                        memset(p.w + g * 8 * p.ws + 1152 * b + 32, 0xFF, 1120);
            else if (t == KILN_Q8_0_X8) /* int8s -128 and 127 */
                for (int64_t g = 0; g < p.nr / 8; g++)
                    for (int64_t b = 0; b < 16; b++)
                        for (int i = 0; i < 256; i++)
                            p.w[g * 8 * p.ws + 272 * b + 16 + i] = (g + i) % 3 ? 0x80 : 0x7F;
            else if (x8) /* rows alternately all 15 and all 0 */
                for (int64_t g = 0; g < p.nr / 8; g++)
                    for (int64_t b = 0; b < 16; b++)
                        for (int m = 0; m < 4; m++)
                            for (int j = 0; j < 8; j++)
                                memset(p.w + g * 8 * p.ws + bb * b + (bb - 128) + 32 * m + 4 * j,
                                       j % 2 ? 0xFF : 0, 4);
            for (int64_t r = 0; r < p.nr && !x8; r++) {
                uint8_t *w = p.w + r * p.ws;
                for (int64_t b = 0; b < (t == KILN_Q4_K || t == KILN_Q6_K ? 2 : 16); b++) {
                    if (t == KILN_Q8_0)
                        for (int j = 0; j < 32; j++)
                            w[34 * b + 2 + j] = (r + j) % 3 ? 0x80 : 0x7F;
                    if (t == KILN_Q4_0) memset(w + 18 * b + 2, r % 2 ? 0xFF : 0x00, 16);
                    if (t == KILN_Q4_1) memset(w + 20 * b + 4, 0xFF, 16);
                    if (t == KILN_Q4_K) {
                        memset(w + 144 * b + 4, 0xFF, 12);
                        memset(w + 144 * b + 16, 0xFF, 128);
                    }
                    if (t == KILN_Q6_K) {
                        memset(w + 210 * b, r % 2 ? 0xFF : 0x00, 192);
                        for (int j = 0; j < 16; j++)
                            w[210 * b + 192 + j] = j % 2 ? 0x80 : 0x7F;
                    }
                }
            }
            for (int64_t i = 0; i < p.nt * p.k; i++)
                p.x[i] = (i / 7 + i / 64) % 2 ? 1.0f : -1.0f;
            for (int64_t i = 0; i < p.nt; i++) {
                if (p.act != KILN_CPU_ACT_F32)
                    ks[v]->quantize_row(p.act, p.x + i * p.k, p.a + i * p.as, p.k);
                if (p.act == KILN_CPU_ACT_Q8 || p.act == KILN_CPU_ACT_Q8S)
                    ASSERT_EQ_I(abs(((kiln_cpu_block_q8 *)(void *)(p.a + i * p.as))->q[0]), 127);
            }
            const char *bad = check_gemm(ks[v], &p, msg, sizeof msg);
            problem_free(&p);
            ASSERT_MSG(!bad, "%s", msg);
        }
}

/* Each output must come out bit-identical however the caller tiles the call. */
TEST(gemm_tile_independent) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks);
    for (int v = 0; v < nk; v++)
        REQUIRE_COMPLETE(ks[v]);
    unsigned long long s = 7;
    for (int v = 0; v < nk; v++)
        for (int d = 0; d < N_DTYPES; d++) {
            kiln_dtype t = k_dtypes[d];
            int64_t blk = kiln_dtype_block(t);
            const int64_t G = kiln_dtype_row_group(t); /* rows go in whole groups */
            /* x8: whole AMX tiles (16 activation rows x 16 weight rows) and edges */
            int64_t k = blk == 1 ? 259 : blk == 32 ? 320 : 512, nr = 19, nt = G > 1 ? 37 : 13;
            problem p;
            problem_make(&p, ks[v], t, k, nr, nt, &s);
            nr = p.nr;
            float *full = malloc((size_t)(nr * nt) * sizeof *full),
                  *part = malloc((size_t)(nr * nt) * sizeof *part);
            ks[v]->gemm[t](k, p.w, p.ws, nr, p.a, p.as, nt, full, nr);
            /* every pair (row group) alone */
            for (int64_t tt = 0; tt < nt; tt++)
                for (int64_t r = 0; r < nr; r += G)
                    ks[v]->gemm[t](k, p.w + r * p.ws, p.ws, G, p.a + tt * p.as, p.as, 1,
                                   part + tt * nr + r, nr);
            int same1 = memcmp(full, part, (size_t)(nr * nt) * sizeof *full) == 0;
            /* each activation row alone (the token-generation path) */
            for (int64_t tt = 0; tt < nt; tt++)
                ks[v]->gemm[t](k, p.w, p.ws, nr, p.a + tt * p.as, p.as, 1, part + tt * nr, nr);
            int same2 = memcmp(full, part, (size_t)(nr * nt) * sizeof *full) == 0;
            /* random rectangles */
            int same3 = 1;
            for (int rep = 0; rep < 4; rep++) {
                memset(part, 0, (size_t)(nr * nt) * sizeof *part);
                int64_t r0 = 0;
                while (r0 < nr) {
                    int64_t r1 = r0 + G * (1 + kt_rand(&s) % 7);
                    if (r1 > nr) r1 = nr;
                    int64_t t0 = 0;
                    while (t0 < nt) {
                        int64_t t1 = t0 + 1 + kt_rand(&s) % (G > 1 ? 24 : 9);
                        if (t1 > nt) t1 = nt;
                        ks[v]->gemm[t](k, p.w + r0 * p.ws, p.ws, r1 - r0, p.a + t0 * p.as, p.as,
                                       t1 - t0, part + t0 * nr + r0, nr);
                        t0 = t1;
                    }
                    r0 = r1;
                }
                same3 &= memcmp(full, part, (size_t)(nr * nt) * sizeof *full) == 0;
            }
            free(full);
            free(part);
            problem_free(&p);
            ASSERT_MSG(same1 && same2 && same3,
                       "%s %s: outputs depend on the tiling (pairs %d, rows %d, rects %d)",
                       ks[v]->name, kiln_dtype_name(t), same1, same2, same3);
        }
}

/* The test tables of the AVX-512 tilings on AVX2 stand in for the AVX-512
 * tables on CPUs without AVX-512, which is sound only if they compute the
 * same bits: where both run, every dtype's gemm (shapes with row, token and
 * k edges) and the activation quantizer must agree byte for byte. The AMX
 * kernels on emulated tiles must give avx512-vnni's bytes (the same exact
 * integer sums, the same float steps), and the real avx512-amx's where it
 * runs. */
TEST(wide_emulation_exact) {
#if KILN_TEST_VNNI_EMU
    const kiln_cpu_kernels *real[] = {&kiln_cpu_kernels_avx512, &kiln_cpu_kernels_avx512_vnni,
                                      &kiln_cpu_kernels_avx512_vnni, &kiln_cpu_kernels_avx512_vnni,
                                      &kiln_cpu_kernels_avx512_amx};
    const kiln_cpu_kernels *emu[] = {&kt_cpu_kernels_wide_emu, &kt_cpu_kernels_wide_vnni_emu,
                                     &kt_cpu_kernels_amx_emu, &kt_cpu_kernels_amx_on_avx2,
                                     &kt_cpu_kernels_amx_emu};
    if (!kiln_cpu_kernels_runnable(real[0]))
        SKIP("this CPU lacks AVX-512: no table to compare the emulations with");
    unsigned long long s = 11;
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {17, 5, 1}, {33, 13, 3}, {64, 9, 17}, {3, 40, 35}};
    for (int v = 0; v < 5; v++)
        for (int d = 0; d < N_DTYPES && kiln_cpu_kernels_runnable(real[v]); d++) {
            kiln_dtype t = k_dtypes[d];
            int64_t blk = kiln_dtype_block(t);
            for (int i = 0; i < 5; i++) {
                /* k: odd lengths for the unblocked kinds (tails of every size) */
                int64_t k = blk == 1 ? 16 * shapes[i][0] + 3 * i + 1 : blk * (1 + i);
                problem p;
                problem_make(&p, real[v], t, k, shapes[i][1], shapes[i][2], &s);
                size_t n = (size_t)(p.nr * p.nt);
                float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
                real[v]->gemm[t](k, p.w, p.ws, p.nr, p.a, p.as, p.nt, x, p.nr);
                emu[v]->gemm[t](k, p.w, p.ws, p.nr, p.a, p.as, p.nt, y, p.nr);
                int same = memcmp(x, y, n * sizeof *x) == 0;
                if (same && p.act != KILN_CPU_ACT_F32) { /* p.a: real[v]'s rows */
                    uint8_t *q = calloc(1, p.as);
                    emu[v]->quantize_row(p.act, p.x, q, k);
                    same = memcmp(p.a, q, kiln_cpu_act_row_bytes(p.act, k)) == 0;
                    free(q);
                }
                free(x);
                free(y);
                problem_free(&p);
                ASSERT_MSG(same, "%s and %s differ on %s (k %lld)", real[v]->name, emu[v]->name,
                           kiln_dtype_name(t), (long long)k);
            }
        }
#else
    SKIP("not an x86 build with AVX2: no emulated tables");
#endif
}

/* avx512-bf16's matmuls on activation rows it rounded beforehand
 * (gemm_bf16_act, what the cpu backend calls when the scratch holds them)
 * must give gemm[]'s bits on the f32 rows: k tails, every tile edge. */
TEST(bf16_act_rows_match) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks), ran = 0;
    unsigned long long s = 5;
    static const int64_t shapes[][3] = {{7, 5, 1}, {67, 13, 3}, {64, 9, 17}, {2115, 8, 33}};
    for (int v = 0; v < nk; v++)
        for (int d = 0; d < 2; d++) {
            kiln_dtype t = d ? KILN_BF16 : KILN_F16;
            if (!ks[v]->gemm_bf16_act[t]) continue;
            for (int i = 0; i < 4; i++) {
                problem p;
                int64_t k = shapes[i][0];
                problem_make(&p, ks[v], t, k, shapes[i][1], shapes[i][2], &s);
                size_t rb = kiln_cpu_act_row_bytes(KILN_CPU_ACT_BF16, k), n = (size_t)(p.nr * p.nt);
                uint8_t *q = malloc(rb * (size_t)p.nt);
                for (int64_t r = 0; r < p.nt; r++)
                    ks[v]->quantize_row(KILN_CPU_ACT_BF16, p.x + r * k, q + r * rb, k);
                float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
                ks[v]->gemm[t](k, p.w, p.ws, p.nr, p.a, p.as, p.nt, x, p.nr);
                ks[v]->gemm_bf16_act[t](k, p.w, p.ws, p.nr, q, rb, p.nt, y, p.nr);
                int same = memcmp(x, y, n * sizeof *x) == 0;
                free(q);
                free(x);
                free(y);
                problem_free(&p);
                ASSERT_MSG(same, "%s %s k %lld: bf16 rows and f32 rows differ", ks[v]->name,
                           kiln_dtype_name(t), (long long)k);
                ran++;
            }
        }
    if (!ran) SKIP("no table here has bf16 activation rows (avx512-bf16 needs AVX512_BF16)");
}

/* ---- activation quantization ------------------------------------------------------- */
TEST(quantize_row_matches_oracle) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks);
    for (int v = 0; v < nk; v++)
        REQUIRE_COMPLETE(ks[v]);
    unsigned long long s = 3;
    enum { K = 1024 };
    float x[K];
    rand_values(x, K, &s);
    x[5] = 0.5f; /* exact ties do not break the bound */
    static kiln_cpu_block_q8 q8[K / 32], q8s[K / 32];
    static kiln_cpu_block_q8k q8k[K / 256];
    for (int v = 0; v < nk; v++) {
        ks[v]->quantize_row(KILN_CPU_ACT_Q8, x, q8, K);
        ks[v]->quantize_row(KILN_CPU_ACT_Q8S, x, q8s, K);
        ks[v]->quantize_row(KILN_CPU_ACT_Q8K, x, q8k, K);
        for (int b = 0; b < K / 32; b++) {
            float amax = 0;
            int sum = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[32 * b + j]));
            ASSERT_MSG(q8[b].d == amax / 127.0f, "%s q8 block %d: d %g, want %g", ks[v]->name, b,
                       q8[b].d, amax / 127.0f);
            for (int j = 0; j < 32; j++) {
                int q = q8[b].q[j];
                sum += q;
                ASSERT(q >= -127 && q <= 127);
                if (amax == 0)
                    ASSERT_EQ_I(q, 0);
                else
                    ASSERT_MSG(fabs((double)x[32 * b + j] - (double)q8[b].d * q) <=
                                   0.5001 * q8[b].d,
                               "%s q8 block %d value %d: x %g q %d d %g", ks[v]->name, b, j,
                               x[32 * b + j], q, q8[b].d);
            }
            ASSERT_MSG(q8[b].s == q8[b].d * (float)sum, "%s q8 block %d: s %g != d*sum(q) %g",
                       ks[v]->name, b, q8[b].s, q8[b].d * (float)sum);
            /* Q8S: the same d and q, with the exact integer sum */
            ASSERT(q8s[b].d == q8[b].d && !memcmp(q8s[b].q, q8[b].q, 32));
            ASSERT_MSG(q8s[b].sum == sum, "%s q8s block %d: sum %d, want %d", ks[v]->name, b,
                       q8s[b].sum, sum);
        }
        for (int b = 0; b < K / 256; b++) {
            float amax = 0;
            for (int j = 0; j < 256; j++)
                amax = fmaxf(amax, fabsf(x[256 * b + j]));
            ASSERT_MSG(q8k[b].d == amax / 127.0f, "%s q8k block %d: d", ks[v]->name, b);
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) {
                    int q = q8k[b].q[16 * g + j];
                    double xv = x[256 * b + 16 * g + j];
                    sum += q;
                    ASSERT(q >= -127 && q <= 127);
                    ASSERT(fabs(xv - (double)q8k[b].d * q) <= 0.5001 * q8k[b].d);
                    /* round to nearest: the oracle's own rounding of x / d */
                    if (q8k[b].d)
                        ASSERT(q == (int)nearbyintf(x[256 * b + 16 * g + j] * (1.0f / q8k[b].d)));
                }
                ASSERT_EQ_I(q8k[b].bsums[g], sum);
            }
        }
    }
    /* an all-zero row */
    float z[256] = {0};
    for (int v = 0; v < nk; v++) {
        ks[v]->quantize_row(KILN_CPU_ACT_Q8K, z, q8k, 256);
        ASSERT(q8k[0].d == 0);
        for (int j = 0; j < 256; j++)
            ASSERT_EQ_I(q8k[0].q[j], 0);
        ks[v]->quantize_row(KILN_CPU_ACT_Q8, z, q8, 32);
        ASSERT(q8[0].d == 0 && q8[0].s == 0);
        ks[v]->quantize_row(KILN_CPU_ACT_Q8S, z, q8, 32);
        ASSERT(q8[0].d == 0 && q8[0].sum == 0);
    }
}

/* Every table's quantize_row (the x86 ones are SIMD) writes the portable
 * quantizer's blocks byte for byte, so a matmul's result does not depend on
 * which table quantized its activations: random rows, and blocks of zeros,
 * exact ties (x / d = j + 0.5), a lone negative maximum, very large and
 * subnormal values. */
TEST(quantize_row_matches_portable) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks);
    enum { K = 2048 };
    static float x[K];
    unsigned long long s = 11;
    rand_values(x, K, &s);
    for (int j = 0; j < 256; j++) {
        x[j] = 0.0f;                                           /* block 0 (and super-block 0) */
        x[256 + j] = (float)((j % 64) - 32) + 0.5f;            /* ties: d = 127.5/127 */
        x[512 + j] = j == 77 ? -3.0f : 0.01f * (float)(j % 7); /* max |x| negative */
        x[768 + j] = 1e30f * (float)((j % 9) - 4);
        x[1024 + j] = 1e-41f * (float)((j % 5) - 2); /* subnormal */
    }
    x[256 + 17] = 127.5f;
    x[1536 + 3] = NAN, x[1536 + 40] = INFINITY,
             x[1536 + 300] = -INFINITY; /* 1536 + 300: next super-block */
    static kiln_cpu_block_q8 got8[K / 32], want8[K / 32];
    static kiln_cpu_block_q8k gotk[K / 256], wantk[K / 256];
    const int acts[3] = {KILN_CPU_ACT_Q8, KILN_CPU_ACT_Q8S, KILN_CPU_ACT_Q8K};
    for (int v = 0; v < nk; v++)
        for (int a = 0; a < 3; a++) {
            const int k8 = acts[a] == KILN_CPU_ACT_Q8K;
            void *got = k8 ? (void *)gotk : (void *)got8,
                 *want = k8 ? (void *)wantk : (void *)want8;
            const size_t bytes = k8 ? sizeof gotk : sizeof got8;
            memset(got, 0x55, bytes);
            memset(want, 0x55, bytes);
            ks[v]->quantize_row(acts[a], x, got, K);
            kiln_cpu_quantize_row_common(acts[a], x, want, K);
            size_t first = 0;
            while (first < bytes && ((uint8_t *)got)[first] == ((uint8_t *)want)[first])
                first++;
            ASSERT_MSG(first == bytes,
                       "%s act %d: byte %zu (block %zu) differs from the portable quantizer",
                       ks[v]->name, acts[a], first, first / (k8 ? sizeof *gotk : sizeof *got8));
        }
}

/* ---- vector helpers ------------------------------------------------------------ */
TEST(dot_axpy_match_oracle) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES];
    int nk = under_test(ks);
    for (int v = 0; v < nk; v++)
        REQUIRE_COMPLETE(ks[v]);
    unsigned long long s = 11;
    enum { N = 1000 };
    static float a[N], b[N], y[N], y0[N];
    static uint16_t h[N];
    static const int64_t ns[] = {1, 7, 8, 33, 67, 1000};
    for (int i = 0; i < N; i++) {
        a[i] = kt_randf(&s);
        b[i] = kt_randf(&s);
        h[i] = kiln_f32_to_f16(kt_randf(&s));
        y0[i] = kt_randf(&s);
    }
    for (int v = 0; v < nk; v++)
        for (int i = 0; i < 6; i++) {
            int64_t n = ns[i];
            double d32 = 0, d16 = 0, m32 = 0, m16 = 0;
            for (int64_t j = 0; j < n; j++) {
                d32 += (double)a[j] * b[j];
                m32 += fabs((double)a[j] * b[j]);
                d16 += (double)a[j] * kiln_f16_to_f32(h[j]);
                m16 += fabs((double)a[j] * kiln_f16_to_f32(h[j]));
            }
            ASSERT_NEAR(ks[v]->dot_f32(a, b, n), d32, 2e-5 * m32 + 1e-30);
            ASSERT_NEAR(ks[v]->dot_f16(a, h, n), d16, 2e-5 * m16 + 1e-30);
            memcpy(y, y0, sizeof y);
            ks[v]->axpy_f32(0.75f, a, y, n);
            for (int64_t j = 0; j < N; j++)
                ASSERT_NEAR(y[j], j < n ? y0[j] + 0.75 * a[j] : y0[j],
                            2e-7 * (fabs(y0[j]) + fabs(a[j])));
            memcpy(y, y0, sizeof y);
            ks[v]->axpy_f16(-1.25f, h, y, n);
            for (int64_t j = 0; j < N; j++) {
                double hv = kiln_f16_to_f32(h[j]);
                ASSERT_NEAR(y[j], j < n ? y0[j] - 1.25 * hv : y0[j],
                            2e-7 * (fabs(y0[j]) + 1.25 * fabs(hv)));
            }
        }
}

/* ---- variant selection -------------------------------------------------------------- */
TEST(select_variants) {
    const kiln_cpu_kernels *ks[KT_MAX_TABLES], *k = NULL;
    int nk = runnable(ks), best = 0;
    while (best < nk && ks[best]->opt_in)
        best++; /* opt-in tables: only when named */
    const kiln_cpu_kernels *const *all;
    int n = kiln_cpu_kernels_all(&all);
    ASSERT_STR_EQ(all[n - 1]->name, "scalar");
    unsetenv("KILN_CPU");
    ASSERT_OK(kiln_cpu_kernels_select(NULL, &k));
    ASSERT(best < nk && k == ks[best]); /* the best runnable */
    for (int i = 0; i < nk; i++) {
        ASSERT_OK(kiln_cpu_kernels_select(ks[i]->name, &k));
        ASSERT(k == ks[i]);
    }
    ASSERT_EQ_I(kiln_cpu_kernels_select("bogus", &k), KILN_ERR_UNSUPPORTED);
    ASSERT(k == NULL);
    for (int i = 0; i < nk; i++)
        ASSERT_CONTAINS(kiln_last_error(), ks[i]->name);
    ASSERT_CONTAINS(kiln_last_error(), "bogus");
    for (int i = 0; i < n; i++)
        if (!kiln_cpu_kernels_runnable(all[i]))
            ASSERT_EQ_I(kiln_cpu_kernels_select(all[i]->name, &k), KILN_ERR_UNSUPPORTED);
    setenv("KILN_CPU", "bogus", 1);
    ASSERT_EQ_I(kiln_cpu_kernels_select(NULL, &k), KILN_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(kiln_last_error(), "scalar");
    setenv("KILN_CPU", "scalar", 1);
    ASSERT_OK(kiln_cpu_kernels_select(NULL, &k));
    ASSERT_STR_EQ(k->name, "scalar");
    unsetenv("KILN_CPU");
}

TEST_MAIN(gemm_matches_oracle, gemm_extreme_codes, gemm_tile_independent, wide_emulation_exact,
          bf16_act_rows_match, quantize_row_matches_oracle, quantize_row_matches_portable,
          dot_axpy_match_oracle, select_variants)
