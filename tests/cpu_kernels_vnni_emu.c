/* cpu_kernels_vnni_emu.c: the avx512-vnni table's algorithms (the u8 x s8
 * VPDPBUSD forms of the q8_0/q4_0/q4_1 dot products) built on AVX2 with an
 * exact emulation of VPDPBUSD, so test_cpu_kernels checks their algebra on
 * CPUs without VNNI too. Test-only; compiled with AVX2 flags. */
#define KILN_X86_VNNI_EMU 1
#include "backends/cpu/kernels_x86_common.h"

extern const kiln_cpu_kernels kt_cpu_kernels_vnni_emu;
KX_TABLE(kt_cpu_kernels_vnni_emu, "avx2-vnni-emu");
