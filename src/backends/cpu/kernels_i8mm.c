/* kernels_i8mm.c: the i8mm kernel table (Cortex-A510/A710/X2, Neoverse V1
 * and later): the int8 gemm tiles of two weight rows by two activation rows
 * use SMMLA (a 2x8 by 8x2 int8 matrix multiply per instruction), the other
 * tiles and the decode path (one activation row) SDOT. Built with
 * -march=armv8.2-a+dotprod+fp16+i8mm; the kernels are in kernels_arm64.h. */
#define KILN_ARM_SDOT 1
#define KILN_ARM_SMMLA 1
#include "backends/cpu/kernels_arm64.h"

KILN_ARM_TABLE(kiln_cpu_kernels_i8mm, "i8mm")
