/* plan.c: memory planning. Every activation of a method gets an offset in
 * one arena by liveness (greedy, largest first, lowest free offset), so
 * execution allocates nothing and memory is reused across nodes. Node
 * scratch (e.g. attention scores) sits after the planned values. The rules
 * the plan must keep are in src/ir/liveness.h and verify.c. */
#include <stdlib.h>

#include "compiler/passes.h"
#include "ir/liveness.h"

#define ARENA_ALIGN 64

typedef struct {
    int v;
    uint64_t size;
} item;

static int by_size_desc(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->v - y->v;
}

kiln_status kiln_graph_plan(kiln_graph *g, const kiln_module *m) {
    int nv = g->n_values;
    int *first = kiln_malloc(sizeof(int) * (size_t)nv),
        *last = kiln_malloc(sizeof(int) * (size_t)nv);
    item *items = kiln_malloc(sizeof(item) * (size_t)nv);
    int *placed = kiln_malloc(sizeof(int) * (size_t)nv);
    kiln_status st = KILN_OK;
    if (!first || !last || !items || !placed) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory planning '%s'", g->name);
        goto done;
    }
    kiln_graph_lifetimes(g, first, last);
    int n = 0;
    for (int i = 0; i < nv; i++) {
        kiln_value *v = &g->values[i];
        if (!kiln_value_in_arena(v)) continue;
        v->offset = 0;
        items[n].v = i;
        items[n].size = kiln_align_up(kiln_shape_bytes(v->dtype, v->ndim, v->ne), ARENA_ALIGN);
        n++;
    }
    qsort(items, (size_t)n, sizeof *items, by_size_desc);
    uint64_t top = 0;
    int n_placed = 0;
    for (int k = 0; k < n; k++) {
        int v = items[k].v;
        uint64_t size = items[k].size, off = 0;
        /* Raise `off` past every live-overlapping placed block it collides
         * with, until a pass finds no collision. */
        for (int again = 1; again;) {
            again = 0;
            for (int j = 0; j < n_placed; j++) {
                int u = placed[j];
                if (first[u] > last[v] || first[v] > last[u]) continue;
                uint64_t uo = g->values[u].offset;
                uint64_t us = kiln_align_up(
                    kiln_shape_bytes(g->values[u].dtype, g->values[u].ndim, g->values[u].ne),
                    ARENA_ALIGN);
                if (off < uo + us && uo < off + size) {
                    off = uo + us;
                    again = 1;
                }
            }
        }
        g->values[v].offset = off;
        placed[n_placed++] = v;
        if (off + size > top) top = off + size;
    }
    /* Scratch: the most any node needs, at its largest shapes. */
    uint64_t scratch = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        uint64_t s = kiln_node_scratch(g, &g->nodes[i]);
        if (s > scratch) scratch = s;
    }
    g->scratch_offset = top;
    g->arena_bytes = top + kiln_align_up(scratch, ARENA_ALIGN);
    (void)m;
done:
    kiln_free(first);
    kiln_free(last);
    kiln_free(items);
    kiln_free(placed);
    return st;
}
