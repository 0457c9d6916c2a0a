/* kernels_avx2.c: the avx2 kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_avx2 = {.name = "avx2"};
