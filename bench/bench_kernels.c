/* bench_kernels.c: times the cpu backend's gemm kernels, one core, per
 * variant this CPU runs and per weight dtype:
 *   tg  nt = 1, k = 4096 ($KILN_BENCH_TG_K sets another: a model's row
 *       length, e.g. 576 or 1024, where the per-row work weighs more),
 *       weight rows filling ~64 MiB (past the L3; $KILN_BENCH_TG_MIB sets
 *       another size): GB/s of weight bytes streamed;
 *   pp  nt = 128, k = 2048, nr = 2048 (scalar: nr = 256): GOP/s, 2*k*nr*nt
 *       operations per call (activation quantization not included).
 * Median of R runs (after one warm-up), by the wall clock and by this
 * thread's CPU time (the latter leaves out time the OS gave to other
 * processes, for a shared machine).
 *   bench_kernels [VARIANT...] [DTYPE...] [-r R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/kernels.h"

static double now_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static unsigned long long g_seed = 1;
static unsigned rnd(void) {
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(g_seed >> 33);
}
static float rndf(void) {
    return (float)rnd() / 2147483648.0f * 2.0f - 1.0f;
}

static void put_u16(uint8_t *p, uint16_t h) {
    memcpy(p, &h, 2);
}

/* nr rows of random weights with sane scales (values do not change the speed). */
static void fill_weights(kiln_dtype t, uint8_t *w, int64_t nr, int64_t k) {
    size_t rb = kiln_dtype_row_bytes(t, k);
    if (kiln_dtype_row_group(t) > 1) { /* packed x8: blocks of 8 rows, f16 scales first */
        size_t bb = 8 * kiln_dtype_row_bytes(t, kiln_dtype_block(t)),
               heads = t == KILN_Q4_1_X8 || t == KILN_Q4_K_X8 ? 16 : 8;
        for (size_t i = 0; i < rb * (size_t)nr; i++)
            w[i] = (uint8_t)rnd();
        for (size_t b = 0; b < rb * (size_t)nr; b += bb)
            for (size_t j = 0; j < heads; j++)
                put_u16(w + b + 2 * j, kiln_f32_to_f16(0.01f));
        return;
    }
    for (int64_t r = 0; r < nr; r++) {
        uint8_t *p = w + (size_t)r * rb;
        for (size_t i = 0; i < rb; i++)
            p[i] = (uint8_t)rnd();
        for (int64_t i = 0; i < k; i++) {
            if (t == KILN_F32) {
                float f = rndf();
                memcpy(p + 4 * i, &f, 4);
            }
            if (t == KILN_F16) put_u16(p + 2 * i, kiln_f32_to_f16(rndf()));
            if (t == KILN_BF16) put_u16(p + 2 * i, kiln_f32_to_bf16(rndf()));
        }
        uint16_t d = kiln_f32_to_f16(0.01f);
        for (int64_t b = 0; b < k / 32; b++) {
            if (t == KILN_Q8_0) put_u16(p + 34 * b, d);
            if (t == KILN_Q4_0) put_u16(p + 18 * b, d);
            if (t == KILN_Q4_1) put_u16(p + 20 * b, d), put_u16(p + 20 * b + 2, d);
        }
        for (int64_t b = 0; b < k / 256; b++) {
            if (t == KILN_Q4_K) put_u16(p + 144 * b, d), put_u16(p + 144 * b + 2, d);
            if (t == KILN_Q6_K) put_u16(p + 210 * b + 208, d);
        }
    }
}

/* Median seconds of one gemm call over reps runs: wall clock, and CPU time in *cpu. */
static double time_gemm(const kiln_cpu_kernels *kt, kiln_dtype t, int64_t k, int64_t nr, int64_t nt,
                        int reps, size_t *wbytes, double *cpu) {
    size_t rb = kiln_dtype_row_bytes(t, k);
    int act = kiln_cpu_act_format(t);
    uint8_t *w = malloc(rb * (size_t)nr);
    fill_weights(t, w, nr, k);
    float *x = malloc((size_t)(k * nt) * sizeof *x), *out = malloc((size_t)(nr * nt) * sizeof *out);
    for (int64_t i = 0; i < k * nt; i++)
        x[i] = rndf();
    size_t as = act == KILN_CPU_ACT_F32 ? (size_t)k * 4 : kiln_cpu_act_row_bytes(act, k);
    uint8_t *a = act == KILN_CPU_ACT_F32 ? (uint8_t *)x : malloc(as * (size_t)nt);
    if (act != KILN_CPU_ACT_F32)
        for (int64_t i = 0; i < nt; i++)
            kt->quantize_row(act, x + i * k, a + i * as, k);
    double ts[32], tc[32];
    kt->gemm[t](k, w, rb, nr, a, as, nt, out, nr); /* warm-up */
    for (int i = 0; i < reps; i++) {
        double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
        kt->gemm[t](k, w, rb, nr, a, as, nt, out, nr);
        tc[i] = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        ts[i] = now_s(CLOCK_MONOTONIC) - t0;
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp);
    qsort(tc, (size_t)reps, sizeof *tc, cmp);
    *cpu = tc[reps / 2];
    *wbytes = rb * (size_t)nr;
    if (a != (uint8_t *)x) free(a);
    free(w);
    free(x);
    free(out);
    return ts[reps / 2];
}

/* 1 when no DTYPE argument was given, or t is one of them. */
static int dtype_wanted(kiln_dtype t, const char *const *want, int nwant) {
    int any = 0;
    for (int i = 0; i < nwant; i++) {
        int is_dtype = 0;
        for (int d = 0; d < KILN_DTYPE_END; d++)
            is_dtype |=
                kiln_dtype_name((kiln_dtype)d) && !strcmp(want[i], kiln_dtype_name((kiln_dtype)d));
        if (!is_dtype) continue;
        any = 1;
        if (kiln_dtype_name(t) && !strcmp(want[i], kiln_dtype_name(t))) return 1;
    }
    return !any;
}

int main(int argc, char **argv) {
    static const kiln_dtype dtypes[] = {
        KILN_F32,  KILN_F16,     KILN_BF16,    KILN_Q8_0,    KILN_Q4_0,    KILN_Q4_1,   KILN_Q4_K,
        KILN_Q6_K, KILN_Q4_0_X8, KILN_Q4_1_X8, KILN_Q8_0_X8, KILN_Q4_K_X8, KILN_Q6_K_X8};
    int reps = 5;
    const char *want[8];
    int nwant = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (nwant < 8)
            want[nwant++] = argv[i];
    }
    if (reps < 1 || reps > 32) reps = 5;
    /* $KILN_BENCH_TG_MIB: tg weight bytes (default 64; e.g. 1 to time the gemv from L2) */
    const char *mib = getenv("KILN_BENCH_TG_MIB");
    size_t tg_bytes = (size_t)((mib && atof(mib) > 0 ? atof(mib) : 64.0) * 1048576.0);
    /* $KILN_BENCH_TG_K: tg row length (default 4096; a multiple of 256 fits every dtype) */
    const char *ks = getenv("KILN_BENCH_TG_K");
    int64_t tg_k = ks && atoll(ks) >= 256 && atoll(ks) <= (1 << 20) ? atoll(ks) / 256 * 256 : 4096;
    const kiln_cpu_kernels *const *all;
    int n = kiln_cpu_kernels_all(&all);
    printf("%-12s %-5s %10s %10s %10s %10s\n", "variant", "dtype", "tg GB/s", "(cpu)", "pp GOP/s",
           "(cpu)");
    for (int v = 0; v < n; v++) {
        const kiln_cpu_kernels *kt = all[v];
        int sel = nwant == 0;
        for (int i = 0; i < nwant; i++)
            sel |= !strcmp(want[i], kt->name);
        if (!sel) continue;
        if (!kiln_cpu_kernels_runnable(kt)) {
            printf("%-12s (this CPU cannot run it)\n", kt->name);
            continue;
        }
        for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
            kiln_dtype t = dtypes[d];
            if (!kt->gemm[t] || !dtype_wanted(t, want, nwant)) continue;
            size_t wb;
            double tgc, ppc;
            int64_t k = tg_k, nr = (int64_t)(tg_bytes / kiln_dtype_row_bytes(t, k)) / 8 * 8;
            double tg = time_gemm(kt, t, k, nr, 1, reps, &wb, &tgc);
            double gb = (double)wb * 1e-9;
            int64_t pk = 2048, pnr = strcmp(kt->name, "scalar") ? 2048 : 256, pnt = 128;
            double pp = time_gemm(kt, t, pk, pnr, pnt, reps, &wb, &ppc);
            double gop = 2.0 * (double)pk * (double)pnr * (double)pnt * 1e-9;
            printf("%-12s %-5s %10.2f %10.2f %10.2f %10.2f\n", kt->name, kiln_dtype_name(t),
                   gb / tg, gb / tgc, gop / pp, gop / ppc);
            fflush(stdout);
        }
    }
    return 0;
}
