/* cpu_kernels_amx_emu_avx512.c: see cpu_kernels_amx_emu.c. */
#define KT_AMX_AVX512 1
#include "cpu_kernels_amx_emu.c"
