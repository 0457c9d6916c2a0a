/* kernels_neon.c: the neon kernel table, ARMv8.0 Advanced SIMD, which every
 * ARM64 core has: int8 dots by SMULL/SMLAL2/SADALP, f32 by FMLA, f16 through
 * FCVTL. Built with -march=armv8-a; the kernels are in kernels_arm64.h. */
#define KILN_ARM_SDOT 0
#define KILN_ARM_SMMLA 0
#include "backends/cpu/kernels_arm64.h"

KILN_ARM_TABLE(kiln_cpu_kernels_neon, "neon")
