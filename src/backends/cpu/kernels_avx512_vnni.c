/* kernels_avx512_vnni.c: the avx512-vnni kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_avx512_vnni = {.name = "avx512-vnni"};
