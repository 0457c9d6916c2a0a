/* kernels_avx512_vnni.c: the avx512-vnni kernel table: the kernels of
 * kernels_x86_common.h with VPDPBUSD (AVX512-VNNI on 256-bit vectors) for the
 * q8_0/q4_0/q4_1 dot products. */
#include "backends/cpu/kernels_x86_common.h"

KX_TABLE(kiln_cpu_kernels_avx512_vnni, "avx512-vnni");
