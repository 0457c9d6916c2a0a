/* cpu_kernels_amx_emu.c: the avx512-amx table's AMX kernels (q8_0x8, q4_0x8,
 * q4_1x8 in tiles of 16 activation rows) on an exact C emulation of the AMX
 * tile instructions (kernels_x86_amx.h), so test_cpu_kernels checks them on
 * CPUs without AMX. Test-only; built twice: with the avx512-vnni table's
 * flags (KT_AMX_AVX512: the AMX table's own code around the tile
 * instructions) and on AVX2 with the AVX-512 tilings and emulated VPDPBUSD
 * (cpu_kernels_wide_emu.c's), for CPUs without AVX-512. */
#define KILN_X86_AMX_EMU 1
#if !KT_AMX_AVX512
#define KX_FORCE_WIDE_TILES 1
#define KILN_X86_VNNI_EMU 1
#endif
#include "backends/cpu/kernels_x86_common.h"

#if KT_AMX_AVX512
extern const kiln_cpu_kernels kt_cpu_kernels_amx_emu;
KX_TABLE(kt_cpu_kernels_amx_emu, "avx512-amx-emu");
#else
extern const kiln_cpu_kernels kt_cpu_kernels_amx_on_avx2;
KX_TABLE(kt_cpu_kernels_amx_on_avx2, "avx512-amx-tiles-on-avx2");
#endif
