/* kernels_dotprod.c: the dotprod kernel table (placeholder: no kernels yet). */
#include "backends/cpu/kernels.h"

const kiln_cpu_kernels kiln_cpu_kernels_dotprod = {.name = "dotprod"};
