/* kernels_dotprod.c: the dotprod kernel table, ARMv8.2 with the dot-product
 * extension (Cortex-A55/A75 and later): int8 dots by SDOT. Built with
 * -march=armv8.2-a+dotprod+fp16; the kernels are in kernels_arm64.h. */
#define KILN_ARM_SDOT 1
#define KILN_ARM_SMMLA 0
#include "backends/cpu/kernels_arm64.h"

KILN_ARM_TABLE(kiln_cpu_kernels_dotprod, "dotprod")
