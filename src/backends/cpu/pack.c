/* pack.c: the cpu backend's prepare. Weights the cpu kernels read are
 * repacked into their interleaved layout (the x8 dtypes, FORMAT.md 6.1),
 * so the packed weight is stored once, as its own dtype, readable by ref
 * too (--no-pack keeps them as imported). No blob.
 *
 * A 2-dim weight is repacked when its dtype has a packed form, its rows
 * come in whole groups, every node reading it reads it as its weight and at
 * least one of them runs on cpu. The packed copy (same size) replaces the
 * plain one, and the graphs' values take the packed dtype. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "quant/quant.h"

kiln_status kiln_cpu_prepare(kiln_module *m, int cpu, const kiln_prepare_options *o) {
    if (o->no_pack) return KILN_OK;
    /* per constant: 1 = read by a cpu weight node, 2 = read otherwise */
    uint8_t *use = kiln_calloc((size_t)m->n_consts + 1, 1);
    if (!use) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            int wslot = kiln_node_weight_slot(n);
            for (int j = 0; j < n->n_in; j++) {
                const kiln_value *v = &g->values[n->in[j]];
                if (v->kind != KILN_VAL_CONST) continue;
                if (j != wslot)
                    use[v->ref] |= 2;
                else if (n->backend == cpu)
                    use[v->ref] |= 1;
            }
        }
    }
    kiln_status st = KILN_OK;
    int packed = 0, by_dtype[KILN_DTYPE_END] = {0};
    uint64_t bytes = 0;
    for (int i = 0; i < m->n_consts && !st; i++) {
        kiln_const *c = &m->consts[i];
        kiln_dtype to = kiln_dtype_packed(c->dtype);
        int group = kiln_dtype_row_group(to);
        if (use[i] != 1 || to == c->dtype || c->ndim != 2 || c->ne[0] % group) continue;
        size_t rb = kiln_dtype_row_bytes(c->dtype, c->ne[1]);
        uint8_t *dst = kiln_malloc((size_t)c->nbytes);
        if (!dst) {
            st = kiln_error(KILN_ERR_NOMEM, "out of memory packing '%s'", c->name);
            break;
        }
        if ((st = kiln_pack_rows(to, c->data, rb, c->ne[0], c->ne[1], dst, rb))) {
            kiln_free(dst);
            st = kiln_error_wrap(st, "packing '%s'", c->name);
            break;
        }
        kiln_free(c->owned);
        c->owned = dst;
        c->data = dst;
        c->dtype = to;
        packed++;
        by_dtype[to]++;
        bytes += c->nbytes;
        for (int k = 0; k < m->n_methods; k++)
            for (int v = 0; v < m->methods[k].n_values; v++)
                if (m->methods[k].values[v].kind == KILN_VAL_CONST &&
                    m->methods[k].values[v].ref == i)
                    m->methods[k].values[v].dtype = to;
    }
    kiln_free(use);
    if (!st && packed && o->log) {
        char line[256], what[96] = "";
        for (int t = 0; t < KILN_DTYPE_END; t++)
            if (by_dtype[t])
                snprintf(what + strlen(what), sizeof what - strlen(what), "%s%d %s",
                         *what ? ", " : "", by_dtype[t], kiln_dtype_name((kiln_dtype)t));
        snprintf(line, sizeof line,
                 "packed %d weight tensors (%.1f MB) for the cpu kernels: %s (--no-pack keeps them "
                 "as imported)",
                 packed, bytes / 1e6, what);
        o->log(o->log_user, line);
    }
    return st;
}
