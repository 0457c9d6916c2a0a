/* kernels.c: choosing the kernel table (CPU feature detection) and the
 * activation formats shared by every variant. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "ir/ops.h"

/* Programs plan each matmul's activation scratch at KILN_ACT_BLOCK_BYTES
 * per 32 values (ir/ops.h); both activation formats must fit it. */
_Static_assert(sizeof(kiln_cpu_block_q8) <= KILN_ACT_BLOCK_BYTES, "q8 block outgrows the plan");
_Static_assert(sizeof(kiln_cpu_block_q8k) <= 8 * KILN_ACT_BLOCK_BYTES,
               "q8k block outgrows the plan");

#if defined(__x86_64__) || defined(__i386__)
#define KILN_X86 1
#include <cpuid.h>
#include <stdatomic.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__)
#define KILN_ARM64 1
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#endif

int kiln_cpu_act_format(kiln_dtype w) {
    switch (w) {
    case KILN_F32:
    case KILN_F16:
    case KILN_BF16:
        return KILN_CPU_ACT_F32;
    case KILN_Q8_0:
    case KILN_Q8_0_X8:
        return KILN_CPU_ACT_Q8S;
    case KILN_Q4_0:
    case KILN_Q4_1:
    case KILN_Q4_0_X8:
    case KILN_Q4_1_X8:
        return KILN_CPU_ACT_Q8;
    case KILN_Q4_K:
    case KILN_Q6_K:
    case KILN_Q4_K_X8:
    case KILN_Q6_K_X8:
        return KILN_CPU_ACT_Q8K;
    default:
        return -1;
    }
}

size_t kiln_cpu_act_row_bytes(int act, int64_t k) {
    switch (act) {
    case KILN_CPU_ACT_Q8:
    case KILN_CPU_ACT_Q8S:
        return (size_t)((k + 31) / 32) * sizeof(kiln_cpu_block_q8);
    case KILN_CPU_ACT_Q8K:
        return (size_t)((k + 255) / 256) * sizeof(kiln_cpu_block_q8k);
    case KILN_CPU_ACT_BF16:
        return (size_t)((k + 31) / 32) * 64;
    default:
        return 0;
    }
}

static const kiln_cpu_kernels *const g_tables[] = {
#if KILN_X86
    &kiln_cpu_kernels_avx512_amx,  &kiln_cpu_kernels_avx512_vnni,
    &kiln_cpu_kernels_avx512_bf16, /* opt-in: only when named */
    &kiln_cpu_kernels_avx512,      &kiln_cpu_kernels_avx2,
#elif KILN_ARM64
    &kiln_cpu_kernels_i8mm,
    &kiln_cpu_kernels_dotprod,
    &kiln_cpu_kernels_neon,
#endif
    &kiln_cpu_kernels_scalar,
};

int kiln_cpu_kernels_all(const kiln_cpu_kernels *const **out) {
    *out = g_tables;
    return (int)(sizeof g_tables / sizeof *g_tables);
}

#if KILN_X86
/* x86 features from CPUID, with the OS's consent (XGETBV) for the AVX and
 * AVX-512 register state. Done by hand rather than with
 * __builtin_cpu_supports, whose feature names differ between gcc and clang
 * (clang 14 has no "f16c"). */
enum { X86_AVX2 = 1, X86_AVX512 = 2, X86_VNNI = 4, X86_AMX = 8, X86_BF16 = 16 };

static int x86_features(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    int ymm_ok = (xlo & 0x6) == 0x6;             /* XMM and YMM state */
    int zmm_ok = ymm_ok && (xlo & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
    int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    int amx = ((d >> 24) & 3) == 3 && ((xlo >> 17) & 3) == 3; /* AMX-TILE, -INT8; XTILECFG, -DATA */
    int f = 0;
    if (ymm_ok && avx2 && fma && f16c) f |= X86_AVX2;
    if ((f & X86_AVX2) && zmm_ok && avx512f && avx512dq && avx512bw && avx512vl) f |= X86_AVX512;
    if ((f & X86_AVX512) && vnni) f |= X86_VNNI;
    if ((f & X86_VNNI) && amx) f |= X86_AMX;
    if ((f & X86_VNNI) && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5) & 1) f |= X86_BF16;
    return f;
}
#endif

int kiln_cpu_amx(void) {
#if KILN_X86
    /* 0 unknown, else the answer + 2 */
    static atomic_int state;
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (s) return s - 2;
    int r = 0;
    if (x86_features() & X86_AMX) {
        r = -1;
#if defined(__linux__) && defined(SYS_arch_prctl)
        /* Linux keeps the 8 KiB tile data state off until a process asks:
         * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA (Linux 5.16 on). */
        enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) r = 1;
#endif
    }
    atomic_store_explicit(&state, r + 2, memory_order_release);
    return r;
#else
    return 0;
#endif
}

int kiln_cpu_kernels_runnable(const kiln_cpu_kernels *k) {
    if (k == &kiln_cpu_kernels_scalar) return 1;
#if KILN_X86
    int f = x86_features();
    if (k == &kiln_cpu_kernels_avx2) return (f & X86_AVX2) != 0;
    if (k == &kiln_cpu_kernels_avx512) return (f & X86_AVX512) != 0;
    if (k == &kiln_cpu_kernels_avx512_vnni) return (f & X86_VNNI) != 0;
    if (k == &kiln_cpu_kernels_avx512_amx) return (f & X86_AMX) && kiln_cpu_amx() == 1;
    if (k == &kiln_cpu_kernels_avx512_bf16) return (f & X86_BF16) != 0;
#elif KILN_ARM64
    if (k == &kiln_cpu_kernels_neon) return 1; /* Advanced SIMD is part of ARMv8-A */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
    if (k == &kiln_cpu_kernels_dotprod) return (hw & HWCAP_ASIMDDP) != 0;
    if (k == &kiln_cpu_kernels_i8mm) return (hw & HWCAP_ASIMDDP) && (hw2 & HWCAP2_I8MM);
#endif
#endif
    return 0;
}

kiln_status kiln_cpu_kernels_select(const char *name, const kiln_cpu_kernels **out) {
    const kiln_cpu_kernels *const *all;
    int n = kiln_cpu_kernels_all(&all);
    *out = NULL;
    if (!name || !*name) name = getenv("KILN_CPU");
    if (name && !*name) name = NULL;
    for (int i = 0; i < n; i++) {
        if (name ? strcmp(all[i]->name, name) != 0
                 : all[i]->opt_in || !kiln_cpu_kernels_runnable(all[i]))
            continue;
        if (kiln_cpu_kernels_runnable(all[i])) {
            *out = all[i];
            return KILN_OK;
        }
        break;
    }
    char list[160] = "";
    for (int i = 0; i < n; i++)
        if (kiln_cpu_kernels_runnable(all[i])) {
            if (*list) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, all[i]->name, sizeof list - strlen(list) - 1);
        }
    return kiln_error(KILN_ERR_UNSUPPORTED, "cpu kernel variant '%s' %s (this CPU runs: %s)", name,
                      !strcmp(name, "avx512-amx") && kiln_cpu_amx() < 0
                          ? "needs the AMX tile state, which the OS kernel refused"
                          : "is unknown or not supported by this CPU",
                      list);
}
