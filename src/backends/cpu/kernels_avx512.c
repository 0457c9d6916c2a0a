/* kernels_avx512.c: the avx512 kernel table (AVX-512 F/BW/VL/DQ): the
 * kernels of kernels_x86_common.h with 32 vector registers, so larger tiles. */
#include "backends/cpu/kernels_x86_common.h"

KX_TABLE(kiln_cpu_kernels_avx512, "avx512");
