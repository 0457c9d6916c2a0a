/* quantize.c: --quant. Matmul, logits and embedding weights are converted
 * to one dtype through f32 rows (src/quant); norms, biases and state are
 * never touched, nor the weights only delegates read (they take the
 * imported values their own way: QNN as fp16). */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "compiler/passes.h"
#include "quant/quant.h"

/* A node the partitioner gave to a delegate (a backend without a per-node
 * path); before partitioning, none is. */
static int on_delegate(const kiln_module *m, const kiln_node *n) {
    if (n->backend < 0 || n->backend >= m->n_backends) return 0;
    const kiln_backend *b = kiln_backend_find(m->backends[n->backend]);
    return b && !b->exec;
}

kiln_status kiln_module_quantize(kiln_module *m, const kiln_compile_options *o,
                                 int *converted_out) {
    *converted_out = 0;
    if (!o->quant || !strcmp(o->quant, "keep")) return KILN_OK;
    static const struct {
        const char *name;
        kiln_dtype t;
    } targets[] = {{"f32", KILN_F32}, {"f16", KILN_F16}, {"q8_0", KILN_Q8_0}, {"q4_0", KILN_Q4_0}};
    int ti = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(o->quant, targets[i].name)) ti = i;
    if (ti < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "unknown --quant '%s' (keep, f32, f16, q8_0, q4_0)",
                          o->quant);
    kiln_dtype target = targets[ti].t;
    /* Which constants are weights of matmul / logits / embedding lookups:
     * 1 read by a node Kiln runs, 2 read by delegates' nodes alone. */
    uint8_t *is_weight = kiln_calloc((size_t)m->n_consts + 1, 1);
    if (!is_weight) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            int w = kiln_node_weight_slot(n) >= 0 ? n->in[kiln_node_weight_slot(n)] : -1;
            if (w < 0 || g->values[w].kind != KILN_VAL_CONST) continue;
            uint8_t *f = &is_weight[g->values[w].ref];
            *f = on_delegate(m, n) ? (*f ? *f : 2) : 1;
        }
    }
    kiln_status st = KILN_OK;
    int converted = 0, kept = 0, delegated = 0;
    uint64_t before = 0, after = 0;
    char line[512];
    float *row = NULL;
    for (int i = 0; i < m->n_consts && !st; i++) {
        kiln_const *c = &m->consts[i];
        if (is_weight[i] == 2) delegated++;
        if (is_weight[i] != 1 || c->dtype == target || c->ndim != 2) continue;
        int64_t K = c->ne[1], N = c->ne[0];
        uint64_t nbytes = kiln_shape_bytes(target, 2, c->ne);
        if (!nbytes) {
            snprintf(line, sizeof line,
                     "tensor '%s' [%lld, %lld]: rows of %lld are not whole %s blocks of %d",
                     c->name, (long long)N, (long long)K, (long long)K, kiln_dtype_name(target),
                     kiln_dtype_block(target));
            if (!o->quant_fallback) {
                st = kiln_error(KILN_ERR_INVALID_ARG, "%s (use --quant-fallback to keep it as %s)",
                                line, kiln_dtype_name(c->dtype));
                break;
            }
            if (o->log) {
                char l2[600];
                snprintf(l2, sizeof l2, "kept %s: %s", kiln_dtype_name(c->dtype), line);
                o->log(o->log_user, l2);
            }
            kept++;
            continue;
        }
        uint8_t *dst = kiln_malloc((size_t)nbytes);
        float *r2 = kiln_realloc(row, sizeof(float) * (size_t)K);
        if (!dst || !r2) {
            kiln_free(dst);
            if (r2) row = r2;
            st = kiln_error(KILN_ERR_NOMEM, "out of memory converting '%s'", c->name);
            break;
        }
        row = r2;
        size_t in_rb = kiln_dtype_row_bytes(c->dtype, K), out_rb = kiln_dtype_row_bytes(target, K);
        for (int64_t r = 0; r < N && !st; r++) {
            st = kiln_dequant_row(c->dtype, (const uint8_t *)c->data + (size_t)r * in_rb, row, K);
            if (!st) st = kiln_quant_row(target, row, dst + (size_t)r * out_rb, K);
        }
        if (st) {
            kiln_free(dst);
            st = kiln_error_wrap(st, "converting '%s'", c->name);
            break;
        }
        before += c->nbytes;
        after += nbytes;
        kiln_free(c->owned);
        c->owned = dst;
        c->data = dst;
        c->dtype = target;
        c->nbytes = nbytes;
        converted++;
        for (int k = 0; k < m->n_methods; k++) /* the graphs see the new dtype */
            for (int v = 0; v < m->methods[k].n_values; v++)
                if (m->methods[k].values[v].kind == KILN_VAL_CONST &&
                    m->methods[k].values[v].ref == i)
                    m->methods[k].values[v].dtype = target;
    }
    kiln_free(row);
    kiln_free(is_weight);
    *converted_out = converted;
    if (!st && o->log) {
        snprintf(
            line, sizeof line,
            "--quant %s: converted %d weight tensors (%.1f MB -> %.1f MB), %d kept as they were",
            o->quant, converted, before / 1e6, after / 1e6, kept);
        if (delegated) {
            size_t at = strlen(line);
            snprintf(line + at, sizeof line - at,
                     ", %d read by delegates alone left as imported (--quant is for Kiln's own "
                     "backends)",
                     delegated);
        }
        o->log(o->log_user, line);
    }
    return st;
}
