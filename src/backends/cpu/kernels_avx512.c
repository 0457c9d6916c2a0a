/* kernels_avx512.c: the avx512 kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_avx512 = {.name = "avx512"};
