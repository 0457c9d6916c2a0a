/* liveness.h: liveness helpers shared by the planner (src/compiler/plan.c)
 * and the verifier. */
#ifndef KILN_IR_LIVENESS_H
#define KILN_IR_LIVENESS_H

#include "ir/graph.h"

/* 1 for values that live in the arena (activations; inputs have their own
 * per-method block in each session, so they survive other methods' calls). */
int kiln_value_in_arena(const kiln_value *v);
/* For each value: the node index that defines it (-1: an input, -2: unused)
 * and the last node index that needs it (n_nodes: needed after the call).
 * Assumes node inputs and outputs are valid indices (verified first). */
kiln_status kiln_graph_lifetimes(const kiln_graph *g, int *first, int *last);
/* Scratch bytes node nd needs at its inputs' largest shapes (0: none). */
uint64_t kiln_node_scratch(const kiln_graph *g, const kiln_node *nd);

#endif
