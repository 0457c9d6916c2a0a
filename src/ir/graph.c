/* graph.c: building modules and method graphs. Every builder checks its
 * arguments and infers shapes through the op table, so a model builder that
 * wires a wrong tensor gets an error naming the node, not a bad program. */
#include <stdio.h>
#include <string.h>

#include "ir/ops.h"

uint64_t kiln_shape_elems(int ndim, const int64_t *ne) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (ne[i] < 0 || !kiln_mul_ok(n, (uint64_t)ne[i], &n)) return 0;
    }
    return n;
}

uint64_t kiln_shape_bytes(kiln_dtype dtype, int ndim, const int64_t *ne) {
    if (ndim < 1) return kiln_dtype_row_bytes(dtype, 1);
    int group = kiln_dtype_row_group(dtype);
    if (group > 1 && (ndim != 2 || ne[0] % group)) return 0; /* whole groups of rows */
    uint64_t rows = kiln_shape_elems(ndim - 1, ne), out;
    size_t row = kiln_dtype_row_bytes(dtype, ne[ndim - 1]);
    if (ne[ndim - 1] > 0 && row == 0) return 0;
    if (!kiln_mul_ok(rows, row, &out)) return 0;
    return out;
}

const char *kiln_shape_str(int ndim, const int64_t *ne, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

static void meta_clear(kiln_meta *e) {
    kiln_free(e->key);
    kiln_free(e->s);
    kiln_free(e->ia);
    kiln_free(e->fa);
    for (uint32_t i = 0; e->sa && i < e->n; i++)
        kiln_free(e->sa[i]);
    kiln_free(e->sa);
}

void kiln_graph_free(kiln_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++)
        kiln_free(g->values[i].name);
    for (int i = 0; i < g->n_nodes; i++)
        kiln_free(g->nodes[i].name);
    for (int i = 0; i < g->n_parts; i++)
        kiln_partition_clear(&g->parts[i]);
    kiln_free(g->parts);
    kiln_free(g->values);
    kiln_free(g->nodes);
    kiln_free(g->inputs);
    kiln_free(g->outputs);
    kiln_free(g->name);
    memset(g, 0, sizeof *g);
}

void kiln_module_free(kiln_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_meta; i++)
        meta_clear(&m->meta[i]);
    for (int i = 0; i < m->n_consts; i++) {
        kiln_free(m->consts[i].name);
        kiln_free(m->consts[i].owned);
    }
    for (int i = 0; i < m->n_states; i++)
        kiln_free(m->states[i].name);
    for (int i = 0; i < m->n_methods; i++)
        kiln_graph_free(&m->methods[i]);
    for (int i = 0; i < m->n_backends; i++)
        kiln_free(m->backends[i]);
    kiln_module_drop_blobs(m);
    kiln_free(m->meta);
    kiln_free(m->consts);
    kiln_free(m->states);
    kiln_free(m->methods);
    kiln_free(m->backends);
    kiln_free(m->tokenizer);
    memset(m, 0, sizeof *m);
}

/* Grows an array of `size`-byte items to hold n + 1. */
static int grow(void **arr, int n, int *cap, size_t size) {
    if (n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    void *p = kiln_realloc(*arr, (size_t)nc * size);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

kiln_status kiln_module_add_backend(kiln_module *m, const char *name, int *index) {
    for (int i = 0; i < m->n_backends; i++)
        if (strcmp(m->backends[i], name) == 0) {
            *index = i;
            return KILN_OK;
        }
    char **b = kiln_realloc(m->backends, (size_t)(m->n_backends + 1) * sizeof *b);
    if (!b) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    m->backends = b;
    if (!(b[m->n_backends] = kiln_strdup(name))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    *index = m->n_backends++;
    return KILN_OK;
}

/* ---- metadata ------------------------------------------------------------ */

const kiln_meta *kiln_meta_find(const kiln_module *m, const char *key) {
    for (int i = 0; i < m->n_meta; i++)
        if (strcmp(m->meta[i].key, key) == 0) return &m->meta[i];
    return NULL;
}

int64_t kiln_meta_int_or(const kiln_module *m, const char *key, int64_t fallback) {
    const kiln_meta *e = kiln_meta_find(m, key);
    return e && e->type == KILN_META_INT ? e->i : fallback;
}

static kiln_meta *meta_slot(kiln_module *m, const char *key, kiln_meta_type type) {
    kiln_meta *e = (kiln_meta *)kiln_meta_find(m, key);
    if (e) {
        char *k = e->key;
        e->key = NULL;
        meta_clear(e);
        memset(e, 0, sizeof *e);
        e->key = k;
    } else {
        if (grow((void **)&m->meta, m->n_meta, &m->cap_meta, sizeof *m->meta)) return NULL;
        e = &m->meta[m->n_meta];
        memset(e, 0, sizeof *e);
        if (!(e->key = kiln_strdup(key))) return NULL;
        m->n_meta++;
    }
    e->type = type;
    return e;
}

kiln_status kiln_meta_set_int(kiln_module *m, const char *key, int64_t v) {
    kiln_meta *e = meta_slot(m, key, KILN_META_INT);
    if (!e) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    e->i = v;
    return KILN_OK;
}

kiln_status kiln_meta_set_float(kiln_module *m, const char *key, double v) {
    kiln_meta *e = meta_slot(m, key, KILN_META_FLOAT);
    if (!e) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    e->f = v;
    return KILN_OK;
}

kiln_status kiln_meta_set_str(kiln_module *m, const char *key, const char *v) {
    kiln_meta *e = meta_slot(m, key, KILN_META_STR);
    if (!e || !(e->s = kiln_strdup(v))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

kiln_status kiln_meta_set_int_array(kiln_module *m, const char *key, const int64_t *v, uint32_t n) {
    kiln_meta *e = meta_slot(m, key, KILN_META_INT_ARRAY);
    if (!e || !(e->ia = kiln_malloc((size_t)n * sizeof *v)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    memcpy(e->ia, v, (size_t)n * sizeof *v);
    e->n = n;
    return KILN_OK;
}

kiln_status kiln_meta_set_int_array_owned(kiln_module *m, const char *key, int64_t *v, uint32_t n) {
    kiln_meta *e = meta_slot(m, key, KILN_META_INT_ARRAY);
    if (!e) {
        kiln_free(v);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    e->ia = v;
    e->n = n;
    return KILN_OK;
}

kiln_status kiln_meta_set_float_array_owned(kiln_module *m, const char *key, double *v,
                                            uint32_t n) {
    kiln_meta *e = meta_slot(m, key, KILN_META_FLOAT_ARRAY);
    if (!e) {
        kiln_free(v);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    e->fa = v;
    e->n = n;
    return KILN_OK;
}

kiln_status kiln_meta_set_str_array_owned(kiln_module *m, const char *key, char **v, uint32_t n) {
    kiln_meta *e = meta_slot(m, key, KILN_META_STR_ARRAY);
    if (!e) {
        for (uint32_t i = 0; i < n; i++)
            kiln_free(v[i]);
        kiln_free(v);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    e->sa = v;
    e->n = n;
    return KILN_OK;
}

/* ---- constants and state ------------------------------------------------- */

static int check_shape(const char *what, const char *name, kiln_dtype dtype, int ndim,
                       const int64_t *ne, uint64_t *nbytes) {
    if (!kiln_dtype_name(dtype))
        return kiln_error(KILN_ERR_INVALID_ARG, "%s '%s': unknown dtype %d", what, name,
                          (int)dtype);
    if (ndim < 1 || ndim > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_INVALID_ARG, "%s '%s': %d dims (1..%d allowed)", what, name,
                          ndim, KILN_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (ne[i] <= 0)
            return kiln_error(KILN_ERR_INVALID_ARG, "%s '%s': dim %d is %lld", what, name, i,
                              (long long)ne[i]);
    *nbytes = kiln_shape_bytes(dtype, ndim, ne);
    int group = kiln_dtype_row_group(dtype);
    if (!*nbytes && group > 1 && (ndim != 2 || ne[0] % group))
        return kiln_error(
            KILN_ERR_INVALID_ARG,
            "%s '%s': %s needs 2 dims with rows in whole groups of %d (has %d dims, %lld rows)",
            what, name, kiln_dtype_name(dtype), group, ndim, (long long)ne[0]);
    if (!*nbytes)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%s '%s': rows of %lld are not whole %s blocks of %d", what, name,
                          (long long)ne[ndim - 1], kiln_dtype_name(dtype), kiln_dtype_block(dtype));
    return KILN_OK;
}

int kiln_module_find_const(const kiln_module *m, const char *name) {
    for (int i = 0; i < m->n_consts; i++)
        if (strcmp(m->consts[i].name, name) == 0) return i;
    return -1;
}

int kiln_module_find_state(const kiln_module *m, const char *name) {
    for (int i = 0; i < m->n_states; i++)
        if (strcmp(m->states[i].name, name) == 0) return i;
    return -1;
}

int kiln_module_add_const(kiln_module *m, const char *name, kiln_dtype dtype, int ndim,
                          const int64_t *ne, const void *data) {
    uint64_t nbytes;
    if (check_shape("constant", name, dtype, ndim, ne, &nbytes)) return -1;
    if (!data) {
        kiln_error(KILN_ERR_INVALID_ARG, "constant '%s' has no data", name);
        return -1;
    }
    if (kiln_module_find_const(m, name) >= 0) {
        kiln_error(KILN_ERR_INVALID_ARG, "constant '%s' added twice", name);
        return -1;
    }
    if (grow((void **)&m->consts, m->n_consts, &m->cap_consts, sizeof *m->consts)) goto oom;
    kiln_const *c = &m->consts[m->n_consts];
    memset(c, 0, sizeof *c);
    if (!(c->name = kiln_strdup(name))) goto oom;
    c->dtype = dtype;
    c->ndim = ndim;
    memcpy(c->ne, ne, (size_t)ndim * sizeof *ne);
    c->nbytes = nbytes;
    c->data = data;
    return m->n_consts++;
oom:
    kiln_error(KILN_ERR_NOMEM, "out of memory adding constant '%s'", name);
    return -1;
}

int kiln_module_add_const_owned(kiln_module *m, const char *name, kiln_dtype dtype, int ndim,
                                const int64_t *ne, void *data) {
    int k = kiln_module_add_const(m, name, dtype, ndim, ne, data);
    if (k < 0)
        kiln_free(data);
    else
        m->consts[k].owned = data;
    return k;
}

int kiln_module_add_state(kiln_module *m, const char *name, kiln_dtype dtype, int ndim,
                          const int64_t *ne) {
    uint64_t nbytes;
    if (check_shape("state", name, dtype, ndim, ne, &nbytes)) return -1;
    if (grow((void **)&m->states, m->n_states, &m->cap_states, sizeof *m->states)) goto oom;
    kiln_state *s = &m->states[m->n_states];
    memset(s, 0, sizeof *s);
    if (!(s->name = kiln_strdup(name))) goto oom;
    s->dtype = dtype;
    s->ndim = ndim;
    memcpy(s->ne, ne, (size_t)ndim * sizeof *ne);
    s->nbytes = nbytes;
    return m->n_states++;
oom:
    kiln_error(KILN_ERR_NOMEM, "out of memory adding state '%s'", name);
    return -1;
}

kiln_graph *kiln_module_add_method(kiln_module *m, const char *name, int max_tokens) {
    kiln_graph *arr = kiln_realloc(m->methods, (size_t)(m->n_methods + 1) * sizeof *arr);
    if (!arr) goto oom;
    m->methods = arr;
    kiln_graph *g = &arr[m->n_methods];
    memset(g, 0, sizeof *g);
    if (!(g->name = kiln_strdup(name))) goto oom;
    g->max_tokens = max_tokens;
    m->n_methods++;
    return g;
oom:
    kiln_error(KILN_ERR_NOMEM, "out of memory adding method '%s'", name);
    return NULL;
}

/* ---- graph building ------------------------------------------------------ */

static int add_value(kiln_graph *g, const char *name, kiln_value_kind kind, kiln_dtype dtype,
                     int ndim, const int64_t *ne) {
    if (grow((void **)&g->values, g->n_values, &g->cap_values, sizeof *g->values)) goto oom;
    kiln_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    if (!(v->name = kiln_strdup(name))) goto oom;
    v->kind = kind;
    v->dtype = dtype;
    v->ndim = ndim;
    memcpy(v->ne, ne, (size_t)ndim * sizeof *ne);
    v->ref = -1;
    return g->n_values++;
oom:
    kiln_error(KILN_ERR_NOMEM, "out of memory adding value '%s'", name);
    return -1;
}

static int append_index(int32_t **arr, int *n, int32_t v) {
    int32_t *p = kiln_realloc(*arr, (size_t)(*n + 1) * sizeof *p);
    if (!p) return -1;
    p[(*n)++] = v;
    *arr = p;
    return 0;
}

int kiln_graph_input(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *ne,
                     uint32_t dyn_mask) {
    int v = add_value(g, name, KILN_VAL_INPUT, dtype, ndim, ne);
    if (v < 0) return -1;
    g->values[v].dyn_mask = dyn_mask;
    if (append_index(&g->inputs, &g->n_inputs, v)) {
        kiln_error(KILN_ERR_NOMEM, "out of memory");
        return -1;
    }
    return v;
}

int kiln_graph_const(kiln_graph *g, const kiln_module *m, const char *const_name) {
    int c = kiln_module_find_const(m, const_name);
    if (c < 0) {
        kiln_error(KILN_ERR_FORMAT, "method '%s' uses constant '%s', which the model does not have",
                   g->name, const_name);
        return -1;
    }
    for (int i = 0; i < g->n_values; i++) /* one value per constant per graph */
        if (g->values[i].kind == KILN_VAL_CONST && g->values[i].ref == c) return i;
    const kiln_const *k = &m->consts[c];
    int v = add_value(g, const_name, KILN_VAL_CONST, k->dtype, k->ndim, k->ne);
    if (v >= 0) g->values[v].ref = c;
    return v;
}

int kiln_graph_state(kiln_graph *g, const kiln_module *m, const char *state_name) {
    int s = kiln_module_find_state(m, state_name);
    if (s < 0) {
        kiln_error(KILN_ERR_INVALID_ARG, "no state buffer '%s'", state_name);
        return -1;
    }
    const kiln_state *k = &m->states[s];
    int v = add_value(g, state_name, KILN_VAL_STATE, k->dtype, k->ndim, k->ne);
    if (v >= 0) g->values[v].ref = s;
    return v;
}

int kiln_graph_node(kiln_graph *g, const kiln_module *m, int op, const char *name, int n_in,
                    const int32_t *in, const int32_t *iattr, const float *fattr) {
    const kiln_op_info *info = kiln_op_get(op);
    if (!info || n_in < info->min_in || n_in > info->max_in) {
        kiln_error(KILN_ERR_INVALID_ARG, "node '%s': op %s takes %d..%d inputs, given %d", name,
                   kiln_op_name(op), info ? info->min_in : 0, info ? info->max_in : 0, n_in);
        return -1;
    }
    kiln_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = op;
    nd.n_in = n_in;
    kiln_tensor tin[KILN_MAX_INPUTS];
    const kiln_tensor *pin[KILN_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if (in[i] < 0 || in[i] >= g->n_values) {
            kiln_error(KILN_ERR_INVALID_ARG, "node '%s': input %d is not a value", name, i);
            return -1;
        }
        nd.in[i] = in[i];
        const kiln_value *v = &g->values[in[i]];
        tin[i] = kiln_value_view(v);
        pin[i] = &tin[i];
    }
    if (iattr) memcpy(nd.iattr, iattr, sizeof nd.iattr);
    if (fattr) memcpy(nd.fattr, fattr, sizeof nd.fattr);
    kiln_tensor out;
    memset(&out, 0, sizeof out);
    char err[512];
    if (info->shape(&nd, pin, &out, err, sizeof err)) {
        kiln_error(KILN_ERR_INVALID_ARG, "node '%s' (%s): %s", name, info->name, err);
        return -1;
    }
    int v = add_value(g, name, op == KILN_OP_KV_STORE ? KILN_VAL_VIEW : KILN_VAL_ACT, out.dtype,
                      out.ndim, out.ne);
    if (v < 0) return -1;
    if (op == KILN_OP_KV_STORE) g->values[v].ref = g->values[in[0]].ref;
    if (grow((void **)&g->nodes, g->n_nodes, &g->cap_nodes, sizeof *g->nodes)) goto oom;
    nd.out = v;
    if (!(nd.name = kiln_strdup(name))) goto oom;
    g->nodes[g->n_nodes++] = nd;
    (void)m;
    return v;
oom:
    kiln_error(KILN_ERR_NOMEM, "out of memory adding node '%s'", name);
    return -1;
}

kiln_status kiln_graph_output(kiln_graph *g, int value) {
    if (value < 0 || value >= g->n_values)
        return kiln_error(KILN_ERR_INVALID_ARG, "output %d is not a value", value);
    if (append_index(&g->outputs, &g->n_outputs, value))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

/* ---- partitions and blobs ------------------------------------------------------- */

void kiln_partition_clear(kiln_partition *p) {
    kiln_free(p->in);
    kiln_free(p->out);
    kiln_free(p->graph);
    memset(p, 0, sizeof *p);
    p->blob = -1;
}

kiln_status kiln_graph_boundary(const kiln_graph *g, int first, int n, int32_t **in, int *n_in,
                                int32_t **out, int *n_out) {
    *in = *out = NULL;
    *n_in = *n_out = 0;
    /* per value: 1 = read inside from outside, 2 = made inside and read after or an output */
    uint8_t *mark = kiln_calloc((size_t)g->n_values + 1, 1);
    uint8_t *made = kiln_calloc((size_t)g->n_values + 1, 1);
    if (!mark || !made) {
        kiln_free(mark);
        kiln_free(made);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    for (int i = first; i < first + n; i++) {
        const kiln_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            int v = nd->in[j];
            if (!made[v] && g->values[v].kind != KILN_VAL_CONST) mark[v] |= 1;
        }
        made[nd->out] = 1;
        if (g->values[nd->out].kind == KILN_VAL_VIEW) mark[nd->out] |= 2; /* writes a state */
    }
    for (int i = first + n; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (made[g->nodes[i].in[j]]) mark[g->nodes[i].in[j]] |= 2;
    for (int i = 0; i < g->n_outputs; i++)
        if (made[g->outputs[i]]) mark[g->outputs[i]] |= 2;
    int ni = 0, no = 0;
    for (int v = 0; v < g->n_values; v++) {
        ni += mark[v] & 1;
        no += (mark[v] & 2) != 0;
    }
    kiln_status st = KILN_OK;
    if ((ni && !(*in = kiln_malloc(sizeof(int32_t) * (size_t)ni))) ||
        (no && !(*out = kiln_malloc(sizeof(int32_t) * (size_t)no)))) {
        kiln_free(*in);
        *in = NULL;
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    for (int v = 0; !st && v < g->n_values; v++) {
        if (mark[v] & 1) (*in)[(*n_in)++] = v;
        if (mark[v] & 2) (*out)[(*n_out)++] = v;
    }
    kiln_free(mark);
    kiln_free(made);
    return st;
}

kiln_status kiln_graph_partition(kiln_graph *g) {
    for (int i = 0; i < g->n_parts; i++)
        kiln_partition_clear(&g->parts[i]);
    kiln_free(g->parts);
    g->parts = NULL;
    g->n_parts = 0;
    int runs = 0;
    for (int i = 0; i < g->n_nodes; i++)
        runs += !i || g->nodes[i].backend != g->nodes[i - 1].backend;
    if (runs && !(g->parts = kiln_calloc((size_t)runs, sizeof *g->parts)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes;) {
        int j = i + 1;
        while (j < g->n_nodes && g->nodes[j].backend == g->nodes[i].backend)
            j++;
        kiln_partition *p = &g->parts[g->n_parts++];
        p->backend = g->nodes[i].backend;
        p->first = i;
        p->n_nodes = j - i;
        p->blob = -1;
        kiln_status st = kiln_graph_boundary(g, i, j - i, &p->in, &p->n_in, &p->out, &p->n_out);
        if (st) return st;
        i = j;
    }
    return KILN_OK;
}

void kiln_module_drop_blobs(kiln_module *m) {
    for (int i = 0; i < m->n_blobs; i++) {
        kiln_blob *b = &m->blobs[i];
        kiln_free(b->owned);
        for (int k = 0; k < b->n_props; k++) {
            kiln_free(b->prop_key[k]);
            kiln_free(b->prop_val[k]);
        }
    }
    kiln_free(m->blobs);
    m->blobs = NULL;
    m->n_blobs = 0;
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++) {
            kiln_partition *p = &m->methods[k].parts[j];
            p->blob = -1;
            kiln_free(p->graph);
            p->graph = NULL;
        }
}

kiln_status kiln_module_add_blob(kiln_module *m, int backend, void *data, uint64_t size,
                                 int *index) {
    kiln_blob *nb = kiln_realloc(m->blobs, sizeof *nb * (size_t)(m->n_blobs + 1));
    if (!nb) {
        kiln_free(data);
        return kiln_error(KILN_ERR_NOMEM, "out of memory adding a blob");
    }
    m->blobs = nb;
    kiln_blob *b = &nb[m->n_blobs];
    memset(b, 0, sizeof *b);
    b->backend = backend;
    b->data = data;
    b->owned = data;
    b->size = size;
    *index = m->n_blobs++;
    return KILN_OK;
}

kiln_status kiln_blob_set_prop(kiln_blob *b, const char *key, const char *value) {
    if (b->n_props == KILN_MAX_BLOB_PROPS)
        return kiln_error(KILN_ERR_INVALID_ARG, "a blob has at most %d properties",
                          KILN_MAX_BLOB_PROPS);
    char *k = kiln_strdup(key), *v = kiln_strdup(value);
    if (!k || !v) {
        kiln_free(k);
        kiln_free(v);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    b->prop_key[b->n_props] = k;
    b->prop_val[b->n_props++] = v;
    return KILN_OK;
}

const char *kiln_blob_prop(const kiln_blob *b, const char *key) {
    for (int i = 0; i < b->n_props; i++)
        if (!strcmp(b->prop_key[i], key)) return b->prop_val[i];
    return NULL;
}
