/* verify.c: the verifier, run on every module before it is written and again
 * when a program is opened. It trusts nothing: each rule broken is an error
 * naming the method, the node or value, and the rule. */
#include <stdio.h>
#include <string.h>

#include "ir/ops.h"
#include "ir/liveness.h"

#define VFAIL(...) return kiln_error(KILN_ERR_FORMAT, __VA_ARGS__)

static int same_shape(int nd_a, const int64_t *a, int nd_b, const int64_t *b) {
    if (nd_a != nd_b) return 0;
    for (int i = 0; i < nd_a; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static kiln_status verify_value(const kiln_module *m, const kiln_graph *g, int i) {
    const kiln_value *v = &g->values[i];
    char s1[96], s2[96];
    if (!v->name || !v->name[0]) VFAIL("method '%s': value %d has no name", g->name, i);
    if (!kiln_dtype_name(v->dtype))
        VFAIL("method '%s': value '%s' has unknown dtype %d", g->name, v->name, (int)v->dtype);
    if (v->ndim < 1 || v->ndim > KILN_MAX_DIMS)
        VFAIL("method '%s': value '%s' has %d dims (1..%d)", g->name, v->name, v->ndim,
              KILN_MAX_DIMS);
    for (int d = 0; d < v->ndim; d++)
        if (v->ne[d] <= 0 || v->ne[d] > ((int64_t)1 << 40))
            VFAIL("method '%s': value '%s' has dim %d = %lld", g->name, v->name, d,
                  (long long)v->ne[d]);
    if (!kiln_shape_bytes(v->dtype, v->ndim, v->ne))
        VFAIL("method '%s': value '%s' of shape %s is not whole %s blocks", g->name, v->name,
              kiln_shape_str(v->ndim, v->ne, s1, sizeof s1), kiln_dtype_name(v->dtype));
    if (v->dyn_mask && (v->kind != KILN_VAL_INPUT || (v->dyn_mask >> v->ndim)))
        VFAIL("method '%s': value '%s' has a dynamic-dim mask but is not an input with those dims",
              g->name, v->name);
    for (int d = 0; d < v->ndim; d++)
        if ((v->dyn_mask >> d & 1) && v->ne[d] != g->max_tokens)
            VFAIL("method '%s': input '%s' dim %d is dynamic with maximum %lld, not the method's "
                  "%d tokens",
                  g->name, v->name, d, (long long)v->ne[d], g->max_tokens);
    switch (v->kind) {
    case KILN_VAL_CONST: {
        if (v->ref < 0 || v->ref >= m->n_consts)
            VFAIL("method '%s': value '%s' refers to constant %d of %d", g->name, v->name, v->ref,
                  m->n_consts);
        const kiln_const *c = &m->consts[v->ref];
        if (c->dtype != v->dtype || !same_shape(c->ndim, c->ne, v->ndim, v->ne))
            VFAIL("method '%s': value '%s' is %s %s but constant '%s' is %s %s", g->name, v->name,
                  kiln_dtype_name(v->dtype), kiln_shape_str(v->ndim, v->ne, s1, sizeof s1), c->name,
                  kiln_dtype_name(c->dtype), kiln_shape_str(c->ndim, c->ne, s2, sizeof s2));
        break;
    }
    case KILN_VAL_STATE:
    case KILN_VAL_VIEW: {
        if (v->ref < 0 || v->ref >= m->n_states)
            VFAIL("method '%s': value '%s' refers to state %d of %d", g->name, v->name, v->ref,
                  m->n_states);
        const kiln_state *s = &m->states[v->ref];
        if (s->dtype != v->dtype || !same_shape(s->ndim, s->ne, v->ndim, v->ne))
            VFAIL("method '%s': value '%s' does not match state '%s' in dtype or shape", g->name,
                  v->name, s->name);
        break;
    }
    case KILN_VAL_INPUT:
    case KILN_VAL_ACT:
        break;
    default:
        VFAIL("method '%s': value '%s' has unknown kind %d", g->name, v->name, (int)v->kind);
    }
    return KILN_OK;
}

static kiln_status verify_graph(const kiln_module *m, const kiln_graph *g, int with_plan,
                                int *producer) {
    char s1[96], s2[96];
    if (!g->name || !g->name[0]) VFAIL("a method has no name");
    if (g->n_values > KILN_MAX_GRAPH || g->n_nodes > KILN_MAX_GRAPH)
        VFAIL("method '%s' has %d values and %d nodes; at most %d of each", g->name, g->n_values,
              g->n_nodes, KILN_MAX_GRAPH);
    if (g->max_tokens < 1 || g->max_tokens > (1 << 20))
        VFAIL("method '%s': max tokens %d out of range", g->name, g->max_tokens);
    for (int i = 0; i < g->n_values; i++) {
        kiln_status st = verify_value(m, g, i);
        if (st) return st;
        producer[i] = -1;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (v < 0 || v >= g->n_values || g->values[v].kind != KILN_VAL_INPUT)
            VFAIL("method '%s': input %d is not an input value", g->name, i);
        if (producer[v] == -2)
            VFAIL("method '%s': input '%s' listed twice", g->name, g->values[v].name);
        producer[v] = -2; /* -2: declared input */
    }
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].kind == KILN_VAL_INPUT && producer[i] != -2)
            VFAIL("method '%s': tensor '%s' is used as a graph input but not declared as one",
                  g->name, g->values[i].name);
    for (int n = 0; n < g->n_nodes; n++) {
        const kiln_node *nd = &g->nodes[n];
        const kiln_op_info *info = kiln_op_get(nd->op);
        if (!nd->name || !nd->name[0]) VFAIL("method '%s': node %d has no name", g->name, n);
        if (!info) VFAIL("method '%s': node '%s' has unknown op %d", g->name, nd->name, nd->op);
        if (nd->n_in < info->min_in || nd->n_in > info->max_in)
            VFAIL("method '%s': node '%s' (%s) has %d inputs, the op takes %d..%d", g->name,
                  nd->name, info->name, nd->n_in, info->min_in, info->max_in);
        if (with_plan && (nd->backend < 0 || nd->backend >= m->n_backends))
            VFAIL("method '%s': node '%s' names backend %d of %d", g->name, nd->name, nd->backend,
                  m->n_backends);
        kiln_tensor t[KILN_MAX_INPUTS];
        const kiln_tensor *pt[KILN_MAX_INPUTS];
        for (int i = 0; i < nd->n_in; i++) {
            int v = nd->in[i];
            if (v < 0 || v >= g->n_values)
                VFAIL("method '%s': node '%s' input %d refers to value %d of %d", g->name, nd->name,
                      i, v, g->n_values);
            const kiln_value *iv = &g->values[v];
            if ((iv->kind == KILN_VAL_ACT || iv->kind == KILN_VAL_VIEW) && producer[v] < 0)
                VFAIL(
                    "method '%s': node '%s' uses tensor '%s' before any node produces it "
                    "(it is neither an input, a constant with data, nor an earlier node's output)",
                    g->name, nd->name, iv->name);
            t[i] = kiln_value_view(iv);
            pt[i] = &t[i];
        }
        if (nd->out < 0 || nd->out >= g->n_values)
            VFAIL("method '%s': node '%s' output refers to value %d of %d", g->name, nd->name,
                  nd->out, g->n_values);
        kiln_value *ov = &g->values[nd->out];
        if (ov->kind != (nd->op == KILN_OP_KV_STORE ? KILN_VAL_VIEW : KILN_VAL_ACT))
            VFAIL(
                "method '%s': node '%s' writes tensor '%s', which is not an activation of its kind",
                g->name, nd->name, ov->name);
        if (producer[nd->out] >= 0)
            VFAIL("method '%s': tensor '%s' is produced twice (by '%s' and '%s')", g->name,
                  ov->name, g->nodes[producer[nd->out]].name, nd->name);
        if (nd->op == KILN_OP_KV_STORE) {
            const kiln_value *c = &g->values[nd->in[0]];
            if ((c->kind != KILN_VAL_STATE && c->kind != KILN_VAL_VIEW) || c->ref != ov->ref)
                VFAIL("method '%s': node '%s' must write into the state it views", g->name,
                      nd->name);
        }
        kiln_tensor out;
        memset(&out, 0, sizeof out);
        char err[400];
        if (info->shape(nd, pt, &out, err, sizeof err))
            VFAIL("method '%s': node '%s' (%s): %s", g->name, nd->name, info->name, err);
        if (out.dtype != ov->dtype || !same_shape(out.ndim, out.ne, ov->ndim, ov->ne))
            VFAIL("method '%s': node '%s' (%s) declares output %s %s but its inputs give %s %s",
                  g->name, nd->name, info->name, kiln_dtype_name(ov->dtype),
                  kiln_shape_str(ov->ndim, ov->ne, s1, sizeof s1), kiln_dtype_name(out.dtype),
                  kiln_shape_str(out.ndim, out.ne, s2, sizeof s2));
        producer[nd->out] = n;
    }
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        if ((v->kind == KILN_VAL_ACT || v->kind == KILN_VAL_VIEW) && producer[i] < 0)
            VFAIL(
                "method '%s': tensor '%s' is neither an input, a constant with data, nor produced "
                "by a node",
                g->name, v->name);
        if (v->kind == KILN_VAL_CONST && !m->consts[v->ref].data)
            VFAIL("method '%s': constant '%s' has no data", g->name, v->name);
    }
    if (g->n_outputs < 1) VFAIL("method '%s' has no outputs", g->name);
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        if (v < 0 || v >= g->n_values || g->values[v].kind != KILN_VAL_ACT)
            VFAIL("method '%s': output %d is not an activation", g->name, i);
    }
    if (!with_plan) return KILN_OK;

    /* The memory plan: in bounds, aligned, and no two values that are alive
     * at once share bytes. */
    /* Kernels use scratch as float arrays: it must be aligned like the values. */
    if (g->scratch_offset > g->arena_bytes || g->scratch_offset % 64)
        VFAIL("method '%s': scratch offset %llu is not 64-byte aligned or past the arena of %llu "
              "bytes",
              g->name, (unsigned long long)g->scratch_offset, (unsigned long long)g->arena_bytes);
    int *first = producer, *last = producer + g->n_values;
    kiln_graph_lifetimes(g, first, last);
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        if (!kiln_value_in_arena(v)) continue;
        uint64_t b = kiln_shape_bytes(v->dtype, v->ndim, v->ne);
        if (v->offset % 64 || v->offset > g->scratch_offset || b > g->scratch_offset - v->offset)
            VFAIL("method '%s': tensor '%s' at arena offset %llu + %llu bytes is misaligned or "
                  "past the planned %llu bytes",
                  g->name, v->name, (unsigned long long)v->offset, (unsigned long long)b,
                  (unsigned long long)g->scratch_offset);
        for (int j = 0; j < i; j++) {
            const kiln_value *u = &g->values[j];
            if (!kiln_value_in_arena(u) || first[i] == -2 || first[j] == -2) continue;
            if (first[i] > last[j] || first[j] > last[i]) continue;
            uint64_t ub = kiln_shape_bytes(u->dtype, u->ndim, u->ne);
            if (v->offset < u->offset + ub && u->offset < v->offset + b)
                VFAIL(
                    "method '%s': tensors '%s' and '%s' are alive at once but overlap in the arena",
                    g->name, u->name, v->name);
        }
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const kiln_node *nd = &g->nodes[n];
        if (kiln_node_scratch(g, nd) > g->arena_bytes - g->scratch_offset)
            VFAIL("method '%s': node '%s' needs more scratch than the plan gives", g->name,
                  nd->name);
    }
    return KILN_OK;
}

/* Boundary lists equal to what the nodes say. */
static int same_list(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (!na || !memcmp(a, b, sizeof *a * (size_t)na));
}

/* The partitions: maximal runs of one backend covering the nodes in order,
 * each with its true boundary and a blob of its own backend, if any. */
static kiln_status verify_partitions(const kiln_module *m, const kiln_graph *g) {
    int next = 0;
    for (int k = 0; k < g->n_parts; k++) {
        const kiln_partition *p = &g->parts[k];
        if (p->first != next || p->n_nodes < 1 || p->n_nodes > g->n_nodes - next)
            VFAIL("method '%s': partition %d covers nodes [%d, %d), expected a run from node %d",
                  g->name, k, p->first, p->first + p->n_nodes, next);
        if (p->backend < 0 || p->backend >= m->n_backends)
            VFAIL("method '%s': partition %d names backend %d of %d", g->name, k, p->backend,
                  m->n_backends);
        if (k && g->parts[k - 1].backend == p->backend)
            VFAIL("method '%s': partitions %d and %d are both on '%s' (a partition is a maximal "
                  "run)",
                  g->name, k - 1, k, m->backends[p->backend]);
        for (int i = p->first; i < p->first + p->n_nodes; i++)
            if (g->nodes[i].backend != p->backend)
                VFAIL("method '%s': node '%s' is on '%s', its partition %d on '%s'", g->name,
                      g->nodes[i].name, m->backends[g->nodes[i].backend], k,
                      m->backends[p->backend]);
        int32_t *in, *out;
        int n_in, n_out;
        kiln_status st = kiln_graph_boundary(g, p->first, p->n_nodes, &in, &n_in, &out, &n_out);
        if (st) return st;
        int same = same_list(in, n_in, p->in, p->n_in) && same_list(out, n_out, p->out, p->n_out);
        kiln_free(in);
        kiln_free(out);
        if (!same)
            VFAIL("method '%s': partition %d's boundary (%d inputs, %d outputs) is not what its "
                  "nodes read and make",
                  g->name, k, p->n_in, p->n_out);
        if (p->blob < -1 || p->blob >= m->n_blobs ||
            (p->blob >= 0 && m->blobs[p->blob].backend != p->backend))
            VFAIL("method '%s': partition %d names blob %d (the program has %d), or a blob of "
                  "another backend",
                  g->name, k, p->blob, m->n_blobs);
        if ((p->blob >= 0) != (p->graph != NULL) ||
            (p->graph && (!p->graph[0] || strlen(p->graph) >= KILN_NAME_MAX)))
            VFAIL("method '%s': partition %d has %s blob but %s graph name", g->name, k,
                  p->blob >= 0 ? "a" : "no", p->graph ? "a bad or unexpected" : "no");
        next = p->first + p->n_nodes;
    }
    if (next != g->n_nodes)
        VFAIL("method '%s': its partitions cover %d of its %d nodes", g->name, next, g->n_nodes);
    return KILN_OK;
}

/* Names the reader will take back: non-empty, shorter than KILN_NAME_MAX. */
static kiln_status check_name(const char *what, const char *name) {
    if (!name || !name[0] || strlen(name) >= KILN_NAME_MAX)
        VFAIL("%s name '%.64s%s' is empty or longer than %d bytes", what, name ? name : "",
              name && strlen(name) > 64 ? "..." : "", KILN_NAME_MAX - 1);
    return KILN_OK;
}

kiln_status kiln_module_verify(const kiln_module *m, int with_plan) {
    kiln_status st;
    for (int i = 0; i < m->n_meta; i++)
        if ((st = check_name("metadata key", m->meta[i].key))) return st;
    for (int i = 0; i < m->n_consts; i++)
        if ((st = check_name("constant", m->consts[i].name))) return st;
    for (int i = 0; i < m->n_states; i++)
        if ((st = check_name("state", m->states[i].name))) return st;
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        if ((st = check_name("method", g->name))) return st;
        for (int i = 0; i < g->n_values; i++)
            if ((st = check_name("tensor", g->values[i].name))) return st;
        for (int i = 0; i < g->n_nodes; i++)
            if ((st = check_name("node", g->nodes[i].name))) return st;
    }
    for (int i = 0; i < m->n_consts; i++) {
        const kiln_const *c = &m->consts[i];
        if (!c->data) VFAIL("constant '%s' has no data", c->name);
        if (c->nbytes != kiln_shape_bytes(c->dtype, c->ndim, c->ne))
            VFAIL("constant '%s' holds %llu bytes, its shape needs %llu", c->name,
                  (unsigned long long)c->nbytes,
                  (unsigned long long)kiln_shape_bytes(c->dtype, c->ndim, c->ne));
    }
    for (int i = 0; i < m->n_methods; i++) {
        const kiln_graph *g = &m->methods[i];
        for (int j = 0; j < i; j++)
            if (strcmp(m->methods[j].name, g->name) == 0) VFAIL("two methods named '%s'", g->name);
        int *scratch = kiln_malloc(sizeof(int) * 2 * (size_t)(g->n_values + 1));
        if (!scratch) return kiln_error(KILN_ERR_NOMEM, "out of memory verifying '%s'", g->name);
        st = verify_graph(m, g, with_plan, scratch);
        kiln_free(scratch);
        if (st) return st;
        if (with_plan && (st = verify_partitions(m, g))) return st;
    }
    for (int i = 0; i < m->n_blobs; i++) {
        const kiln_blob *b = &m->blobs[i];
        if (b->backend < 0 || b->backend >= m->n_backends || !b->size || !b->data)
            VFAIL("blob %d: backend %d of %d, %llu bytes", i, b->backend, m->n_backends,
                  (unsigned long long)b->size);
        for (int k = 0; k < b->n_props; k++)
            if ((st = check_name("blob property", b->prop_key[k]))) return st;
    }
    return KILN_OK;
}
