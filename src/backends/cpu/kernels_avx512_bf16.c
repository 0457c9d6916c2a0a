/* kernels_avx512_bf16.c: the avx512-bf16 kernel table, chosen only when
 * named (KILN_CPU=avx512-bf16): the avx512-vnni table with its f16 and bf16
 * matmuls by VDPBF16PS on activations (and f16 weights) rounded to bf16,
 * within KILN_CPU_BF16_TOL_F16 / _BF16 (kernels.h) rather than 2e-5;
 * attention keeps the exact f16 gemm. */
#define KX_BF16_DOT 1
#include "backends/cpu/kernels_x86_common.h"

KX_TABLE(kiln_cpu_kernels_avx512_bf16, "avx512-bf16");
