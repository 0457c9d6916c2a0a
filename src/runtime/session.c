/* session.c: sessions and the executor. A session owns its state buffers
 * (the KV cache), one activation arena sized for the largest method, and a
 * block of input slots per method. Every data pointer is resolved at
 * creation, so execute only computes shapes and calls kernels: no
 * allocation, no lookup by name. */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

void kiln_session_destroy(kiln_session *s) {
    if (!s) return;
    const kiln_module *m = &s->prog->mod;
    for (int i = 0; s->state && i < m->n_states; i++)
        kiln_aligned_free(s->state[i]);
    for (int k = 0; k < m->n_methods; k++) {
        if (s->vals) kiln_free(s->vals[k]);
        if (s->input_set) kiln_free(s->input_set[k]);
    }
    kiln_free(s->state);
    kiln_free(s->vals);
    kiln_free(s->input_set);
    kiln_aligned_free(s->arena);
    kiln_aligned_free(s->inputs);
    kiln_free(s);
}

kiln_status kiln_session_create(const kiln_program *p, kiln_session **out) {
    *out = NULL;
    if (!p) return kiln_error(KILN_ERR_INVALID_ARG, "no program given");
    if (p->describe_only)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "'%s' was opened to be described only (describe_only): it runs nothing",
                          kiln_basename(p->path));
    const kiln_module *m = &p->mod;
    kiln_session *s = kiln_calloc(1, sizeof *s);
    if (!s) return kiln_error(KILN_ERR_NOMEM, "out of memory creating a session");
    s->prog = p;
    s->last_method = -1;
    if (!(s->state = kiln_calloc((size_t)m->n_states + 1, sizeof *s->state)) ||
        !(s->vals = kiln_calloc((size_t)m->n_methods + 1, sizeof *s->vals)) ||
        !(s->input_set = kiln_calloc((size_t)m->n_methods + 1, sizeof *s->input_set)) ||
        !(s->arena = kiln_aligned_alloc(p->arena_bytes)) ||
        !(s->inputs = kiln_aligned_alloc(p->input_block_bytes)))
        goto oom;
    for (int i = 0; i < m->n_states; i++)
        if (!(s->state[i] = kiln_aligned_alloc(m->states[i].nbytes))) goto oom;
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        if (!(s->vals[k] = kiln_calloc((size_t)g->n_values + 1, sizeof(kiln_tensor))) ||
            !(s->input_set[k] = kiln_calloc((size_t)g->n_inputs + 1, 1)))
            goto oom;
        uint64_t in_off = p->input_offset[k];
        for (int i = 0; i < g->n_values; i++) {
            const kiln_value *v = &g->values[i];
            kiln_tensor *t = &s->vals[k][i];
            t->dtype = v->dtype;
            t->ndim = v->ndim;
            memcpy(t->ne, v->ne, sizeof v->ne);
            switch (v->kind) {
            case KILN_VAL_CONST:
                t->data = (void *)m->consts[v->ref].data;
                break;
            case KILN_VAL_STATE:
            case KILN_VAL_VIEW:
                t->data = s->state[v->ref];
                break;
            case KILN_VAL_ACT:
                t->data = s->arena + v->offset;
                break;
            case KILN_VAL_INPUT:
                break;
            }
        }
        for (int i = 0; i < g->n_inputs; i++) {
            const kiln_value *v = &g->values[g->inputs[i]];
            s->vals[k][g->inputs[i]].data = s->inputs + in_off;
            in_off += kiln_align_up(kiln_shape_bytes(v->dtype, v->ndim, v->ne), 64);
        }
    }
    *out = s;
    return KILN_OK;
oom:
    kiln_session_destroy(s);
    return kiln_error(KILN_ERR_NOMEM, "out of memory creating a session (arena %llu bytes)",
                      (unsigned long long)p->arena_bytes);
}

kiln_status kiln_session_reset(kiln_session *s) {
    if (!s) return kiln_error(KILN_ERR_INVALID_ARG, "no session given");
    const kiln_module *m = &s->prog->mod;
    for (int i = 0; i < m->n_states; i++)
        memset(s->state[i], 0, (size_t)m->states[i].nbytes);
    return KILN_OK;
}

const kiln_program *kiln_session_program(const kiln_session *s) {
    return s->prog;
}

static const kiln_graph *get_method(kiln_session *s, int method) {
    if (!s || method < 0 || method >= s->prog->mod.n_methods) {
        kiln_error(KILN_ERR_INVALID_ARG, "method index %d out of range", method);
        return NULL;
    }
    return &s->prog->mod.methods[method];
}

kiln_status kiln_session_set_input(kiln_session *s, int method, int input, const void *data,
                                   kiln_dtype dtype, int ndim, const int64_t *shape) {
    const kiln_graph *g = get_method(s, method);
    if (!g) return KILN_ERR_INVALID_ARG;
    if (input < 0 || input >= g->n_inputs)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "method '%s' has %d inputs, index %d is out of range", g->name,
                          g->n_inputs, input);
    const kiln_value *v = &g->values[g->inputs[input]];
    char want[96], got[96];
    if (!data || !shape || ndim != v->ndim || dtype != v->dtype) goto mismatch;
    for (int d = 0; d < ndim; d++) {
        int dyn = v->dyn_mask >> d & 1;
        if (dyn ? (shape[d] < 1 || shape[d] > v->ne[d]) : shape[d] != v->ne[d]) goto mismatch;
    }
    kiln_tensor *t = &s->vals[method][g->inputs[input]];
    memcpy(t->ne, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->data, data, (size_t)kiln_shape_bytes(dtype, ndim, shape));
    s->input_set[method][input] = 1;
    return KILN_OK;
mismatch:
    kiln_shape_str(v->ndim, v->ne, want, sizeof want);
    if (shape && ndim >= 0 && ndim <= KILN_MAX_DIMS)
        kiln_shape_str(ndim, shape, got, sizeof got);
    else
        snprintf(got, sizeof got, "(%d dims)", ndim);
    return kiln_error(KILN_ERR_INVALID_ARG,
                      "method '%s' input '%s': expected %s %s%s, given %s %s%s", g->name, v->name,
                      kiln_dtype_name(v->dtype), want, v->dyn_mask ? " (dim 0 may be 1..max)" : "",
                      kiln_dtype_name(dtype) ? kiln_dtype_name(dtype) : "unknown dtype", got,
                      data ? "" : " with no data");
}

/* The actual shape of node i's output from its inputs'. */
static kiln_status node_shape(const kiln_graph *g, kiln_tensor *vals, int i) {
    const kiln_node *n = &g->nodes[i];
    const kiln_op_info *info = kiln_op_get(n->op);
    const kiln_tensor *in[KILN_MAX_INPUTS];
    for (int j = 0; j < n->n_in; j++)
        in[j] = &vals[n->in[j]];
    kiln_tensor shape = vals[n->out];
    char err[400];
    if (info->shape(n, in, &shape, err, sizeof err))
        return kiln_error(KILN_ERR_INVALID_ARG, "method '%s', node '%s' (%s): %s", g->name, n->name,
                          info->name, err);
    memcpy(vals[n->out].ne, shape.ne, sizeof shape.ne);
    return KILN_OK;
}

/* Node i of partition `part`, on its backend's exec, between the observer's
 * two looks and with its trace event. */
static kiln_status run_node(kiln_session *s, int method, int part, int i) {
    const kiln_program *p = s->prog;
    const kiln_graph *g = &p->mod.methods[method];
    kiln_tensor *vals = s->vals[method];
    const kiln_node *n = &g->nodes[i];
    kiln_status st = node_shape(g, vals, i);
    if (st) return st;
    const kiln_tensor *in[KILN_MAX_INPUTS];
    for (int j = 0; j < n->n_in; j++)
        in[j] = &vals[n->in[j]];
    kiln_tensor *out = &vals[n->out];
    if (s->observer && s->observer(s->observer_user, method, i, in, out, 0))
        return kiln_error(KILN_ERR_CANCELLED, "method '%s': stopped before node '%s'", g->name,
                          n->name);
    struct kiln_trace *tr = s->trace;
    uint64_t t0 = tr ? kiln_trace_now(tr) : 0;
    const kiln_backend *b = p->backends[n->backend];
    void *ctx = p->backend_ctx[n->backend];
    void *scratch = s->arena + g->scratch_offset;
    uint64_t scratch_bytes = g->arena_bytes - g->scratch_offset;
    st = b->exec ? b->exec(ctx, n, in, out, scratch, scratch_bytes)
                 : b->exec_alone(ctx, g, n, in, out, scratch, scratch_bytes);
    if (tr) kiln_trace_node(tr, p, method, part, i, n, in, out, t0, kiln_trace_now(tr));
    if (st)
        return kiln_error_wrap(st, "method '%s', node '%s' (%s on %s)", g->name, n->name,
                               kiln_op_get(n->op)->name, p->mod.backends[n->backend]);
    if (s->observer && s->observer(s->observer_user, method, i, in, out, 1))
        return kiln_error(KILN_ERR_CANCELLED, "method '%s': stopped after node '%s'", g->name,
                          n->name);
    return KILN_OK;
}

/* After a delegate's partition: the observer sees the nodes whose outputs
 * leave it (inside it nothing is observable; their inputs may be values
 * the delegate kept to itself, so only the output is meaningful). */
static kiln_status observe_outputs(kiln_session *s, int method, const kiln_partition *pt) {
    if (!s->observer) return KILN_OK;
    const kiln_graph *g = &s->prog->mod.methods[method];
    kiln_tensor *vals = s->vals[method];
    for (int i = pt->first; i < pt->first + pt->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        int leaves = 0;
        for (int j = 0; j < pt->n_out && !leaves; j++)
            leaves = pt->out[j] == n->out;
        if (!leaves) continue;
        const kiln_tensor *in[KILN_MAX_INPUTS];
        for (int j = 0; j < n->n_in; j++)
            in[j] = &vals[n->in[j]];
        if (s->observer(s->observer_user, method, i, in, &vals[n->out], 0) ||
            s->observer(s->observer_user, method, i, in, &vals[n->out], 1))
            return kiln_error(KILN_ERR_CANCELLED, "method '%s': stopped after node '%s'", g->name,
                              n->name);
    }
    return KILN_OK;
}

/* One partition: a delegate's execute runs it whole (every node's shape
 * worked out first, so its outputs' shapes are known); the others run it
 * node by node, as does a delegate made every node's backend when the
 * program opened (kiln_open_options.backend: no blob, each node alone). */
static kiln_status run_partition(kiln_session *s, int method, int part, kiln_exec_report *rep) {
    const kiln_program *p = s->prog;
    const kiln_graph *g = &p->mod.methods[method];
    const kiln_partition *pt = &g->parts[part];
    const kiln_backend *b = p->backends[pt->backend];
    kiln_status st = KILN_OK;
    if (!b->execute || (pt->blob < 0 && b->exec_alone)) {
        for (int i = pt->first; i < pt->first + pt->n_nodes && !st; i++)
            st = run_node(s, method, part, i);
        return st;
    }
    for (int i = pt->first; i < pt->first + pt->n_nodes && !st; i++)
        st = node_shape(g, s->vals[method], i);
    if (!st)
        st = b->execute(p->backend_ctx[pt->backend], g, pt, s->vals[method],
                        s->arena + g->scratch_offset, g->arena_bytes - g->scratch_offset, rep);
    if (st)
        return kiln_error_wrap(st, "method '%s', partition %d (nodes %d..%d on %s)", g->name, part,
                               pt->first, pt->first + pt->n_nodes - 1,
                               p->mod.backends[pt->backend]);
    return observe_outputs(s, method, pt);
}

kiln_status kiln_session_execute(kiln_session *s, int method) {
    const kiln_graph *g = get_method(s, method);
    if (!g) return KILN_ERR_INVALID_ARG;
    const kiln_program *p = s->prog;
    kiln_tensor *vals = s->vals[method];
    /* Every input set, and every dynamic dim the same token count. */
    int64_t T = -1;
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        if (!s->input_set[method][i])
            return kiln_error(KILN_ERR_INVALID_ARG, "method '%s': input '%s' was never set",
                              g->name, v->name);
        for (int d = 0; d < v->ndim; d++) {
            if (!(v->dyn_mask >> d & 1)) continue;
            int64_t n = vals[g->inputs[i]].ne[d];
            if (T >= 0 && n != T)
                return kiln_error(KILN_ERR_INVALID_ARG,
                                  "method '%s': input '%s' has %lld tokens, another input has %lld",
                                  g->name, v->name, (long long)n, (long long)T);
            T = n;
        }
    }
    /* A call with no dynamic dim (decode) counts input 0's first dim as its tokens. */
    if (T < 0 && g->n_inputs > 0 && vals[g->inputs[0]].ndim >= 1) T = vals[g->inputs[0]].ne[0];
    s->last_method = -1; /* a failed call leaves no readable outputs */
    struct kiln_trace *tr = s->trace;
    uint64_t call_t0 = 0;
    if (tr) {
        kiln_trace_call_begin(tr);
        call_t0 = kiln_trace_now(tr);
    }
    kiln_status st = KILN_OK;
    for (int k = 0; k < g->n_parts && !st; k++) {
        const kiln_partition *pt = &g->parts[k];
        uint64_t t0 = tr ? kiln_trace_now(tr) : 0;
        kiln_exec_report rep = {0};
        if (tr) kiln_trace_partition_begin(tr, &rep);
        st = run_partition(s, method, k, &rep);
        if (tr) kiln_trace_partition(tr, p, method, k, pt, vals, t0, kiln_trace_now(tr), &rep);
    }
    if (st) {
        if (tr) kiln_trace_method(tr, method, T, call_t0, kiln_trace_now(tr), 0);
        return st;
    }
    if (tr) kiln_trace_method(tr, method, T, call_t0, kiln_trace_now(tr), 1);
    s->last_method = method;
    return KILN_OK;
}

kiln_status kiln_session_get_output(kiln_session *s, int method, int output, const void **data,
                                    kiln_dtype *dtype, int *ndim, int64_t shape[KILN_MAX_DIMS]) {
    const kiln_graph *g = get_method(s, method);
    if (!g) return KILN_ERR_INVALID_ARG;
    if (output < 0 || output >= g->n_outputs)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "method '%s' has %d outputs, index %d is out of range", g->name,
                          g->n_outputs, output);
    if (s->last_method != method)
        return kiln_error(
            KILN_ERR_INVALID_ARG,
            "method '%s' has no outputs to read: %s (methods share one arena)", g->name,
            s->last_method < 0
                ? "no call has succeeded since the session was made or since a failed call"
                : "another method ran after it");
    const kiln_tensor *t = &s->vals[method][g->outputs[output]];
    if (data) *data = t->data;
    if (dtype) *dtype = t->dtype;
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->ne, sizeof t->ne);
    return KILN_OK;
}

void kiln_session_set_observer(kiln_session *s, kiln_node_observer fn, void *user) {
    s->observer = fn;
    s->observer_user = user;
}

uint64_t kiln_method_scratch_bytes(const kiln_program *p, int method) {
    if (method < 0 || method >= p->mod.n_methods) return 0;
    const kiln_graph *g = &p->mod.methods[method];
    return g->arena_bytes - g->scratch_offset;
}

kiln_status kiln_program_exec_node(const kiln_program *p, int method, int node,
                                   const kiln_tensor *const *in, kiln_tensor *out, void *scratch,
                                   uint64_t scratch_bytes) {
    if (method < 0 || method >= p->mod.n_methods || node < 0 ||
        node >= p->mod.methods[method].n_nodes)
        return kiln_error(KILN_ERR_INVALID_ARG, "no node %d in method %d", node, method);
    const kiln_graph *g = &p->mod.methods[method];
    const kiln_node *n = &g->nodes[node];
    const kiln_op_info *info = kiln_op_get(n->op);
    kiln_tensor shape = *out;
    char err[400];
    if (info->shape(n, in, &shape, err, sizeof err))
        return kiln_error(KILN_ERR_INVALID_ARG, "method '%s', node '%s' (%s): %s", g->name, n->name,
                          info->name, err);
    memcpy(out->ne, shape.ne, sizeof shape.ne);
    const kiln_tensor *args[KILN_MAX_INPUTS];
    kiln_tensor cache;
    for (int j = 0; j < n->n_in; j++)
        args[j] = in[j];
    if (n->op == KILN_OP_KV_STORE) { /* it writes the cache it is given: a copy in out */
        cache = *in[0];
        cache.data = out->data;
        if (out->data != in[0]->data)
            memcpy(out->data, in[0]->data, (size_t)kiln_tensor_bytes(in[0]));
        args[0] = &cache;
    }
    const kiln_backend *b = p->backends[n->backend];
    void *ctx = p->backend_ctx[n->backend];
    kiln_status st;
    if (b->exec)
        st = b->exec(ctx, n, args, out, scratch, scratch_bytes);
    else if (b->exec_alone)
        st = b->exec_alone(ctx, g, n, args, out, scratch, scratch_bytes);
    else
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "method '%s', node '%s': backend %s runs whole partitions, not one node "
                          "alone",
                          g->name, n->name, b->name);
    return st ? kiln_error_wrap(st, "method '%s', node '%s' (%s on %s)", g->name, n->name,
                                info->name, p->mod.backends[n->backend])
              : KILN_OK;
}
