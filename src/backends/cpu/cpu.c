/* cpu.c: the optimized CPU backend (placeholder: supports no op yet, so
 * every node falls back to ref). */
#include "backends/backend.h"

static int cpu_supports(const kiln_module *m, const kiln_graph *g, const kiln_node *n) { return 0; }

static const char *cpu_unit(void *ctx, const kiln_node *n, const kiln_tensor *const *in) { return "none"; }

const kiln_backend kiln_backend_cpu_impl = {
    .name = "cpu",
    .supports = cpu_supports,
    .exec = kiln_ref_exec,
    .unit = cpu_unit,
};
