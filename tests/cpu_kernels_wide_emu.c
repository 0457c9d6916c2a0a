/* cpu_kernels_wide_emu.c: the avx512 and avx512-vnni tables' tilings (the
 * larger tiles their 32 registers allow) built with AVX2 instructions, the
 * VNNI one with emulated VPDPBUSD, so test_cpu_kernels checks their tile and
 * edge logic on CPUs without AVX-512 too. Test-only; compiled with AVX2
 * flags, once per table (KT_WIDE_VNNI selects which). */
#define KX_FORCE_WIDE_TILES 1
#if KT_WIDE_VNNI
#define KILN_X86_VNNI_EMU 1
#endif
#include "backends/cpu/kernels_x86_common.h"

#if KT_WIDE_VNNI
extern const kiln_cpu_kernels kt_cpu_kernels_wide_vnni_emu;
KX_TABLE(kt_cpu_kernels_wide_vnni_emu, "avx512-vnni-tiles-on-avx2");
#else
extern const kiln_cpu_kernels kt_cpu_kernels_wide_emu;
KX_TABLE(kt_cpu_kernels_wide_emu, "avx512-tiles-on-avx2");
#endif
