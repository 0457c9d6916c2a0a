/* cpu_kernels_wide_vnni_emu.c: see cpu_kernels_wide_emu.c. */
#define KT_WIDE_VNNI 1
#include "cpu_kernels_wide_emu.c"
