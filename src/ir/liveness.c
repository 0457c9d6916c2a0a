/* liveness.c: what a memory plan rests on, for the planner
 * (src/compiler/plan.c) and for the verifier, which checks every program's
 * plan at open: which values live in the arena, when each is alive, and how
 * much scratch each node needs. */
#include "ir/ops.h"
#include "ir/liveness.h"

int kiln_value_in_arena(const kiln_value *v) {
    return v->kind == KILN_VAL_ACT;
}

kiln_status kiln_graph_lifetimes(const kiln_graph *g, int *first, int *last) {
    for (int i = 0; i < g->n_values; i++)
        first[i] = last[i] = -2; /* -2: unused */
    for (int i = 0; i < g->n_inputs; i++)
        first[g->inputs[i]] = last[g->inputs[i]] = -1;
    for (int n = 0; n < g->n_nodes; n++) {
        const kiln_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_in; i++)
            last[nd->in[i]] = n;
        first[nd->out] = n;
        if (last[nd->out] < n) last[nd->out] = n;
    }
    /* Outputs stay valid until the next call. (Inputs live in each
     * session's own input block, not in the arena.) */
    for (int i = 0; i < g->n_outputs; i++)
        last[g->outputs[i]] = g->n_nodes;
    return KILN_OK;
}

uint64_t kiln_node_scratch(const kiln_graph *g, const kiln_node *nd) {
    const kiln_op_info *info = kiln_op_get(nd->op);
    if (!info->scratch) return 0;
    kiln_tensor t[KILN_MAX_INPUTS];
    const kiln_tensor *pt[KILN_MAX_INPUTS];
    for (int j = 0; j < nd->n_in; j++) {
        t[j] = kiln_value_view(&g->values[nd->in[j]]);
        pt[j] = &t[j];
    }
    return info->scratch(nd, pt);
}
