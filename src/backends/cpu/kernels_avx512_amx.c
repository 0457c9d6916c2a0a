/* kernels_avx512_amx.c: the avx512-amx kernel table: the avx512-vnni table
 * with AMX tiles (TDPBSSD / TDPBSUD) for the q8_0x8, q4_0x8 and q4_1x8
 * matmuls of 16 activation rows or more (kernels_x86_amx.h); the same bits
 * as avx512-vnni. Chosen only where the CPU has AMX-TILE and AMX-INT8 and
 * the kernel grants the process the tile state (kernels.c). */
#include "backends/cpu/kernels_x86_common.h"

KX_TABLE(kiln_cpu_kernels_avx512_amx, "avx512-amx");
