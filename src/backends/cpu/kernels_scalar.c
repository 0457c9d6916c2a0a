/* kernels_scalar.c: the scalar kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_scalar = {.name = "scalar"};
