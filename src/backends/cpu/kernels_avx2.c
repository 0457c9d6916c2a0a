/* kernels_avx2.c: the avx2 kernel table (AVX2 + FMA + F16C); the kernels
 * live in kernels_x86_common.h. */
#include "backends/cpu/kernels_x86_common.h"

KX_TABLE(kiln_cpu_kernels_avx2, "avx2");
