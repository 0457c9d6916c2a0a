/* kernels_i8mm.c: the i8mm kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_i8mm = {.name = "i8mm"};
