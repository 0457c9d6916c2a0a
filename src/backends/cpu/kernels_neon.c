/* kernels_neon.c: the neon kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_neon = {.name = "neon"};
