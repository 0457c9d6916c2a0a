/* machine.c: measures this machine's memory read bandwidth and peak f32 FMA
 * and int8 dot rates (machine.h). Each compute kernel keeps 12 independent
 * accumulator chains so latency never limits it; the best of several timed
 * runs is kept. x86 kernels carry their own target attribute and are picked
 * with __builtin_cpu_supports; ARM64 uses NEON (baseline) and SDOT when the
 * kernel reports it (getauxval). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/kernels.h"
#include "base/json.h"
#include "devtools/machine.h"

#if defined(__x86_64__) || defined(__i386__)
#define KILN_MACHINE_X86 1
#include <immintrin.h>
#elif defined(__aarch64__)
#define KILN_MACHINE_ARM64 1
#include <arm_neon.h>
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

/* A compute kernel runs `iters` iterations of `ops_per_iter` operations and
 * returns something derived from its accumulators (kept, so nothing is
 * optimised away). */
typedef float (*compute_fn)(uint64_t iters);

typedef struct {
    const char *name;
    compute_fn fn;
    double ops_per_iter;
} kernel;

#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* ---- portable kernels ------------------------------------------------------ */

static float fma_scalar(uint64_t iters) {
#define D(i) float a##i = 0.5f + 0.01f * (i);
    REP12(D)
#undef D
    const float m = 0.9999f, c = 1e-4f;
    for (uint64_t it = 0; it < iters; it++) {
#define S(i) a##i = a##i * m + c;
        REP12(S)
#undef S
    }
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
}

/* The int8 peak loops run for a second or more, so their 32-bit sums wrap
 * by design: every sum here is unsigned, where wrapping is defined. */
static float dot_scalar(uint64_t iters) {
    uint32_t acc[12] = {0};
    volatile int8_t vx = 3, vy = -2; /* volatile: not folded into a closed form */
    for (uint64_t it = 0; it < iters; it++) {
        int8_t x = vx, y = vy;
        for (int i = 0; i < 12; i++)
            acc[i] += (uint32_t)((int32_t)x * (int32_t)(int8_t)(y + i));
    }
    uint32_t s = 0;
    for (int i = 0; i < 12; i++)
        s += acc[i];
    return (float)s;
}

/* ---- x86 ------------------------------------------------------------------- */
#ifdef KILN_MACHINE_X86
__attribute__((target("avx2,fma"))) static float fma_avx2(uint64_t iters) {
#define D(i) __m256 a##i = _mm256_set1_ps(0.5f + 0.01f * (i));
    REP12(D)
#undef D
    const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i) a##i = _mm256_fmadd_ps(a##i, m, c);
        REP12(S)
#undef S
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

__attribute__((target("avx512f"))) static float fma_avx512(uint64_t iters) {
#define D(i) __m512 a##i = _mm512_set1_ps(0.5f + 0.01f * (i));
    REP12(D)
#undef D
    const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i) a##i = _mm512_fmadd_ps(a##i, m, c);
        REP12(S)
#undef S
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

/* u8 x s8 pairs summed to i16 (VPMADDUBSW), widened to i32 (VPMADDWD with
 * ones) and accumulated: llama.cpp's AVX2 q8 dot. The empty asm makes each
 * operand look new every iteration, so nothing is hoisted. */
__attribute__((target("avx2"))) static float dot_avx2(uint64_t iters) {
#define D(i) __m256i a##i = _mm256_set1_epi8((char)(1 + (i))), c##i = _mm256_setzero_si256();
    REP12(D)
#undef D
    const __m256i b = _mm256_set1_epi8(2), ones = _mm256_set1_epi16(1);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i)                                                                                       \
    __asm__ volatile("" : "+x"(a##i));                                                             \
    c##i = _mm256_add_epi32(c##i, _mm256_madd_epi16(_mm256_maddubs_epi16(a##i, b), ones));
        REP12(S)
#undef S
    }
    __m256i s =
        _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                         _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
    uint32_t out[8];
    _mm256_storeu_si256((__m256i *)out, s);
    return (float)out[0];
}

/* VPDPBUSD: 64 u8 x s8 products summed into 16 i32 lanes in one instruction. */
__attribute__((target("avx512f,avx512vnni"))) static float dot_vnni(uint64_t iters) {
/* Each chain starts from its own value: twelve chains from zero over the
 * same operands are one chain to the compiler, which then times VPDPBUSD's
 * latency and counts it twelve times. */
#define D(i) __m512i c##i = _mm512_set1_epi32(i);
    REP12(D)
#undef D
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(2);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i) c##i = _mm512_dpbusd_epi32(c##i, a, b);
        REP12(S)
#undef S
    }
    __m512i s =
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                         _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    /* not _mm512_reduce_add_epi32: its lanes are summed as signed int */
    uint32_t out[16], sum = 0;
    _mm512_storeu_si512(out, s);
    for (int i = 0; i < 16; i++)
        sum += out[i];
    return (float)sum;
}
#endif

/* ---- ARM64 ----------------------------------------------------------------- */
#ifdef KILN_MACHINE_ARM64
static float fma_neon(uint64_t iters) {
#define D(i) float32x4_t a##i = vdupq_n_f32(0.5f + 0.01f * (i));
    REP12(D)
#undef D
    const float32x4_t m = vdupq_n_f32(0.9999f), c = vdupq_n_f32(1e-4f);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i) a##i = vfmaq_f32(c, a##i, m);
        REP12(S)
#undef S
    }
    float32x4_t s = vaddq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)),
                              vaddq_f32(vaddq_f32(a4, a5), vaddq_f32(a6, a7)));
    s = vaddq_f32(s, vaddq_f32(vaddq_f32(a8, a9), vaddq_f32(a10, a11)));
    return vaddvq_f32(s);
}

/* Without SDOT: SMULL (8 products to i16) then SADALP (pairwise into i32). */
static float dot_neon(uint64_t iters) {
#define D(i)                                                                                       \
    int8x8_t a##i = vdup_n_s8((int8_t)(1 + (i)));                                                  \
    int32x4_t c##i = vdupq_n_s32(0);
    REP12(D)
#undef D
    const int8x8_t b = vdup_n_s8(2);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i)                                                                                       \
    __asm__ volatile("" : "+w"(a##i));                                                             \
    c##i = vpadalq_s16(c##i, vmull_s8(a##i, b));
        REP12(S)
#undef S
    }
    int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)),
                            vaddq_s32(vaddq_s32(c4, c5), vaddq_s32(c6, c7)));
    s = vaddq_s32(s, vaddq_s32(vaddq_s32(c8, c9), vaddq_s32(c10, c11)));
    return (float)vaddvq_u32(vreinterpretq_u32_s32(s));
}

/* SDOT: 16 s8 x s8 products summed into 4 i32 lanes. GCC takes the
 * extension per function; other compilers only when built for it. */
#if defined(__ARM_FEATURE_DOTPROD)
#define KILN_MACHINE_SDOT
#elif defined(__GNUC__) && !defined(__clang__)
#define KILN_MACHINE_SDOT __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#ifdef KILN_MACHINE_SDOT
KILN_MACHINE_SDOT static float dot_sdot(uint64_t iters) {
/* Distinct starting values keep the twelve chains twelve (see dot_vnni). */
#define D(i) int32x4_t c##i = vdupq_n_s32(i);
    REP12(D)
#undef D
    const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(2);
    for (uint64_t it = 0; it < iters; it++) {
#define S(i) c##i = vdotq_s32(c##i, a, b);
        REP12(S)
#undef S
    }
    int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)),
                            vaddq_s32(vaddq_s32(c4, c5), vaddq_s32(c6, c7)));
    s = vaddq_s32(s, vaddq_s32(vaddq_s32(c8, c9), vaddq_s32(c10, c11)));
    return (float)vaddvq_u32(vreinterpretq_u32_s32(s));
}
#endif
#endif

/* The best kernels this CPU runs. */
static void pick_kernels(kernel *f32, kernel *i8) {
    *f32 = (kernel){"scalar", fma_scalar, 12 * 2};
    *i8 = (kernel){"scalar", dot_scalar, 12 * 2};
#ifdef KILN_MACHINE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *f32 = (kernel){"avx2 vfmadd231ps", fma_avx2, 12 * 8 * 2};
        *i8 = (kernel){"avx2 vpmaddubsw", dot_avx2, 12 * 32 * 2};
    }
    if (__builtin_cpu_supports("avx512f"))
        *f32 = (kernel){"avx512f vfmadd231ps", fma_avx512, 12 * 16 * 2};
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"))
        *i8 = (kernel){"avx512vnni vpdpbusd", dot_vnni, 12 * 64 * 2};
#elif defined(KILN_MACHINE_ARM64)
    *f32 = (kernel){"neon fmla", fma_neon, 12 * 4 * 2};
    *i8 = (kernel){"neon smull+sadalp", dot_neon, 12 * 8 * 2};
#ifdef KILN_MACHINE_SDOT
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) *i8 = (kernel){"neon sdot", dot_sdot, 12 * 16 * 2};
#endif
#endif
}

/* ---- threads --------------------------------------------------------------- */

typedef struct {
    compute_fn fn; /* compute job, or NULL: read p[0..n) */
    uint64_t iters;
    const uint64_t *p;
    size_t n;
    volatile double sink;
} job;

static uint64_t read_words(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
        s4 += p[i + 4], s5 += p[i + 5], s6 += p[i + 6], s7 += p[i + 7];
    }
    for (; i < n; i++)
        s0 += p[i];
    return s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
}

static void *run_job(void *arg) {
    job *j = arg;
    j->sink = j->fn ? (double)j->fn(j->iters) : (double)read_words(j->p, j->n);
    return NULL;
}

/* Runs jobs[0..n) on n threads (the caller runs the first); returns the wall
 * time in seconds, or -1 when a thread cannot be started. */
static double run_jobs(job *jobs, int n) {
    pthread_t tid[1024];
    int started = 0;
    double t0 = kiln_now_ms();
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tid[i], NULL, run_job, &jobs[i])) break;
        started = i;
    }
    run_job(&jobs[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(tid[i], NULL);
    double t = (kiln_now_ms() - t0) / 1e3;
    return started == n - 1 ? t : -1;
}

/* Best rate (ops per second) of a compute kernel on n threads. */
static double measure_compute(const kernel *k, int n) {
    job jobs[1024];
    memset(jobs, 0, sizeof(job) * (size_t)n);
    /* Calibrate on one thread: about 60 ms per run. */
    uint64_t iters = 1024;
    for (;;) {
        job one = {k->fn, iters, NULL, 0, 0};
        double t = run_jobs(&one, 1);
        if (t >= 0.02 || iters > ((uint64_t)1 << 40)) {
            iters = (uint64_t)((double)iters * 0.06 / (t > 1e-6 ? t : 1e-6)) + 1;
            break;
        }
        iters *= 4;
    }
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        for (int i = 0; i < n; i++)
            jobs[i].fn = k->fn, jobs[i].iters = iters;
        double t = run_jobs(jobs, n);
        if (t <= 0) return 0;
        double rate = (double)n * (double)iters * k->ops_per_iter / t;
        if (rate > best) best = rate;
    }
    return best;
}

/* Best read bandwidth (bytes per second) over words[0..n) on t threads. */
static double measure_read(const uint64_t *words, size_t n, int t) {
    job jobs[1024];
    memset(jobs, 0, sizeof(job) * (size_t)t);
    size_t per = n / (size_t)t;
    for (int i = 0; i < t; i++) {
        jobs[i].p = words + per * (size_t)i;
        jobs[i].n = i == t - 1 ? n - per * (size_t)i : per;
    }
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double s = run_jobs(jobs, t);
        if (s <= 0) return 0;
        double rate = (double)n * 8.0 / s;
        if (rate > best) best = rate;
    }
    return best;
}

/* ---- public ---------------------------------------------------------------- */

void kiln_machine_cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    static const char *keys[] = {"model name", "Hardware", "CPU part"}; /* x86, then ARM */
    int found = 99;
    while (fgets(line, sizeof line, f)) {
        for (int k = 0; k < 3 && k < found; k++) {
            size_t kl = strlen(keys[k]);
            char *colon = strchr(line, ':');
            if (strncmp(line, keys[k], kl) || !colon) continue;
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t l = strcspn(v, "\r\n");
            if (!l) continue;
            snprintf(buf, cap, "%.*s", (int)l, v);
            found = k;
        }
    }
    fclose(f);
}

const char *kiln_machine_cpu_table(void) {
    const kiln_cpu_kernels *table = NULL;
    (void)kiln_cpu_kernels_select(NULL, &table); /* NULL when $KILN_CPU names one it cannot run */
    return table ? table->name : NULL;
}

void kiln_machine_cpu_backend(char *buf, size_t cap) {
    const char *name = kiln_machine_cpu_table();
    int amx = kiln_cpu_amx();
    const char *env = getenv("KILN_CPU");
    snprintf(buf, cap, "%s%s%s; AMX tiles: %s", name ? "the " : "none ($KILN_CPU=",
             name  ? name
             : env ? env
                   : "",
             name ? " table" : " is not runnable here)",
             amx > 0   ? "usable (the avx512-amx table)"
             : amx < 0 ? "on this CPU, but the OS kernel refused the tile state"
                       : "not on this CPU");
}

kiln_status kiln_machine_measure(int n_threads, uint64_t mem_bytes, kiln_machine_info *out) {
    if (n_threads < 1 || n_threads > 1024)
        return kiln_error(KILN_ERR_INVALID_ARG, "thread count %d must be in 1..1024", n_threads);
    if (mem_bytes < (1u << 20) || mem_bytes > ((uint64_t)1 << 40))
        return kiln_error(KILN_ERR_INVALID_ARG, "buffer of %llu bytes must be 1 MiB..1 TiB",
                          (unsigned long long)mem_bytes);
    memset(out, 0, sizeof *out);
    kiln_machine_cpu_model(out->cpu_model, sizeof out->cpu_model);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out->date, sizeof out->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    kernel f32, i8;
    pick_kernels(&f32, &i8);
    out->f32_kernel = f32.name;
    out->i8_kernel = i8.name;
    out->mem_bytes = mem_bytes;

    void *mem = NULL;
    if (posix_memalign(&mem, 4096, (size_t)mem_bytes))
        return kiln_error(KILN_ERR_NOMEM, "cannot allocate a %llu-byte buffer to measure bandwidth",
                          (unsigned long long)mem_bytes);
    uint64_t *words = mem;
    size_t n = (size_t)(mem_bytes / 8);
    for (size_t i = 0; i < n; i++)
        words[i] = i; /* every page present before timing */

    int counts[2] = {1, n_threads};
    kiln_machine_rates *r[2] = {&out->one, &out->all};
    for (int c = 0; c < 2; c++) {
        r[c]->n_threads = counts[c];
        if (c == 1 && n_threads == 1) {
            *r[1] = *r[0];
            break;
        }
        r[c]->mem_read_gbps = measure_read(words, n, counts[c]) / 1e9;
        r[c]->f32_gflops = measure_compute(&f32, counts[c]) / 1e9;
        r[c]->i8_gops = measure_compute(&i8, counts[c]) / 1e9;
        if (r[c]->mem_read_gbps <= 0 || r[c]->f32_gflops <= 0 || r[c]->i8_gops <= 0) {
            free(mem);
            return kiln_error(KILN_ERR_IO, "cannot start %d threads to measure", counts[c]);
        }
    }
    free(mem);
    return KILN_OK;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_rates(FILE *f, const kiln_machine_rates *r) {
    fprintf(f,
            "{\"n_threads\": %d, \"mem_read_gbps\": %.3f, \"f32_gflops\": %.3f, \"i8_gops\": %.3f}",
            r->n_threads, r->mem_read_gbps, r->f32_gflops, r->i8_gops);
}

kiln_status kiln_machine_save(const kiln_machine_info *m, const char *path) {
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) return st;
    FILE *f = out.f;
    fprintf(f, "{\n  \"cpu_model\": ");
    json_string(f, m->cpu_model);
    fprintf(f, ",\n  \"date\": \"%s\",\n  \"n_threads\": %d,\n  \"mem_buffer_bytes\": %llu,\n",
            m->date, m->all.n_threads, (unsigned long long)m->mem_bytes);
    fprintf(f, "  \"f32_kernel\": \"%s\",\n  \"i8_kernel\": \"%s\",\n  \"single_thread\": ",
            m->f32_kernel, m->i8_kernel);
    json_rates(f, &m->one);
    fprintf(f, ",\n  \"all_threads\": ");
    json_rates(f, &m->all);
    fprintf(f, "\n}\n");
    return kiln_outfile_commit(&out);
}

/* mkdir -p */
static int make_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
        *p = '/';
        if (bad) return -1;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

kiln_status kiln_machine_default_path(char *buf, size_t cap, int create) {
    const char *cache = getenv("KILN_CACHE"), *home = getenv("HOME");
    char dir[4096];
    if (cache && *cache)
        snprintf(dir, sizeof dir, "%s", cache);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/kiln", home);
    else
        return kiln_error(KILN_ERR_IO,
                          "neither KILN_CACHE nor HOME is set: no cache folder for machine.json");
    if (create && make_dirs(dir))
        return kiln_error(KILN_ERR_IO, "cannot create the folder '%s': %s", dir, strerror(errno));
    if ((size_t)snprintf(buf, cap, "%s/machine.json", dir) >= cap)
        return kiln_error(KILN_ERR_IO, "cache path '%s' is too long", dir);
    return KILN_OK;
}

/* ---- reading machine.json ------------------------------------------------------- */

static kiln_status load_rates(const kiln_json *root, const char *what, const char *key,
                              kiln_machine_rates *r) {
    const kiln_json *o;
    int64_t n;
    kiln_status st = kiln_json_get_obj(root, what, key, 1, &o);
    if (!st) st = kiln_json_get_int(o, what, "n_threads", 1, &n);
    if (!st) st = kiln_json_get_num(o, what, "mem_read_gbps", 1, &r->mem_read_gbps);
    if (!st) st = kiln_json_get_num(o, what, "f32_gflops", 1, &r->f32_gflops);
    if (!st) st = kiln_json_get_num(o, what, "i8_gops", 1, &r->i8_gops);
    if (st) return st;
    if (n < 1 || n > 1024)
        return kiln_error(KILN_ERR_FORMAT, "%s: %s.n_threads %lld is not in 1..1024", what, key,
                          (long long)n);
    r->n_threads = (int)n;
    /* json numbers are finite; a peak must also be positive (it divides) */
    if (!(r->mem_read_gbps > 0) || !(r->f32_gflops > 0) || !(r->i8_gops > 0))
        return kiln_error(KILN_ERR_FORMAT, "%s: %s: every rate must be > 0", what, key);
    return KILN_OK;
}

/* A kernel name as this build spells it (the struct holds static strings). */
static const char *known_kernel(const char *name) {
    static const char *const names[] = {"scalar",
                                        "avx2 vfmadd231ps",
                                        "avx2 vpmaddubsw",
                                        "avx512f vfmadd231ps",
                                        "avx512vnni vpdpbusd",
                                        "neon fmla",
                                        "neon smull+sadalp",
                                        "neon sdot"};
    for (size_t i = 0; name && i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i])) return names[i];
    return "unknown";
}

kiln_status kiln_machine_load(const char *path, kiln_machine_info *out) {
    kiln_file_map map;
    kiln_status st = kiln_file_map_open(path, &map);
    if (st) return st;
    char what[4200];
    snprintf(what, sizeof what, "'%s'", path);
    kiln_json_doc doc = {0};
    st = kiln_json_parse((const char *)map.data, map.size, what, 0, &doc);
    kiln_file_map_close(&map);
    if (st) return st;
    kiln_machine_info m;
    memset(&m, 0, sizeof m);
    const char *model = NULL, *date = NULL, *f32 = NULL, *i8 = NULL;
    int64_t mem = 0;
    if (doc.root->type != KILN_JSON_OBJECT)
        st = kiln_error(KILN_ERR_FORMAT, "%s: should hold a JSON object, found %s", what,
                        kiln_json_type_name(doc.root->type));
    if (!st) st = kiln_json_get_str(doc.root, what, "cpu_model", 0, &model, NULL);
    if (!st) st = kiln_json_get_str(doc.root, what, "date", 0, &date, NULL);
    if (!st) st = kiln_json_get_str(doc.root, what, "f32_kernel", 0, &f32, NULL);
    if (!st) st = kiln_json_get_str(doc.root, what, "i8_kernel", 0, &i8, NULL);
    if (!st) st = kiln_json_get_int(doc.root, what, "mem_buffer_bytes", 0, &mem);
    if (!st) st = load_rates(doc.root, what, "single_thread", &m.one);
    if (!st) st = load_rates(doc.root, what, "all_threads", &m.all);
    if (!st) {
        snprintf(m.cpu_model, sizeof m.cpu_model, "%s", model ? model : "unknown");
        snprintf(m.date, sizeof m.date, "%s", date ? date : "");
        m.f32_kernel = known_kernel(f32);
        m.i8_kernel = known_kernel(i8);
        m.mem_bytes = mem > 0 ? (uint64_t)mem : 0;
        *out = m;
    }
    kiln_json_free(&doc);
    return st;
}
