/* prune.c: constants no method reads are dropped before anything else
 * looks at them, so a checkpoint's tensors the graphs do not read are
 * neither converted nor stored. */
#include "compiler/passes.h"

kiln_status kiln_module_prune_consts(kiln_module *m) {
    int *map = kiln_malloc(sizeof(int) * (size_t)(m->n_consts + 1));
    if (!map) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_consts; i++)
        map[i] = -1;
    for (int k = 0; k < m->n_methods; k++)
        for (int i = 0; i < m->methods[k].n_values; i++) {
            const kiln_value *v = &m->methods[k].values[i];
            if (v->kind == KILN_VAL_CONST && v->ref >= 0 && v->ref < m->n_consts) map[v->ref] = 1;
        }
    int n = 0;
    for (int i = 0; i < m->n_consts; i++) {
        if (map[i] < 0) {
            kiln_free(m->consts[i].name);
            kiln_free(m->consts[i].owned);
            continue;
        }
        map[i] = n;
        m->consts[n++] = m->consts[i];
    }
    m->n_consts = n;
    for (int k = 0; k < m->n_methods; k++)
        for (int i = 0; i < m->methods[k].n_values; i++) {
            kiln_value *v = &m->methods[k].values[i];
            if (v->kind == KILN_VAL_CONST && v->ref >= 0) v->ref = map[v->ref];
        }
    kiln_free(map);
    return KILN_OK;
}
