/* builder.h: the helpers the graph builders share. Each turns -1 from the
 * graph API into a sticky failure, so a builder wires a whole method and
 * checks once at the end. Names are printf formats with one int (the
 * layer). */
#ifndef KILN_MODELS_BUILDER_H
#define KILN_MODELS_BUILDER_H

#include <stdio.h>

#include "ir/graph.h"

typedef struct {
    kiln_graph *g;
    kiln_module *m;
    int failed;
} kiln_builder;

/* The constant `fmt` % layer. */
static inline int kiln_b_const(kiln_builder *b, const char *fmt, int layer) {
    char name[KILN_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    int v = b->failed ? -1 : kiln_graph_const(b->g, b->m, name);
    if (v < 0) b->failed = 1;
    return v;
}

/* A node named `fmt` % layer. */
static inline int kiln_b_node(kiln_builder *b, int op, const char *fmt, int layer, int n_in,
                              const int32_t *in, const int32_t *iattr, const float *fattr) {
    if (b->failed) return -1;
    char name[KILN_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    int v = kiln_graph_node(b->g, b->m, op, name, n_in, in, iattr, fattr);
    if (v < 0) b->failed = 1;
    return v;
}

/* A method input. */
static inline int kiln_b_input(kiln_builder *b, const char *name, kiln_dtype t, int ndim,
                               const int64_t *ne, uint32_t dyn) {
    int v = b->failed ? -1 : kiln_graph_input(b->g, name, t, ndim, ne, dyn);
    if (v < 0) b->failed = 1;
    return v;
}

/* IN(a, b, c) -> 3, (const int32_t[]){a, b, c} */
#define KILN_IN(...)                                                                               \
    (sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)), (const int32_t[]) {                      \
        __VA_ARGS__                                                                                \
    }

#endif
