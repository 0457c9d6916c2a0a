/* partition.c: --backend. Each node goes to the first listed backend that
 * supports it, else to ref; each method's maximal runs of nodes on one
 * backend become its partitions (stored in the program). Then every
 * backend prepares what it was given (kiln_module_prepare). */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "compiler/passes.h"

kiln_status kiln_module_partition(kiln_module *m, const char *spec) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return kiln_error(KILN_ERR_INVALID_ARG, "backend list too long");
    strcpy(buf, spec);
    const kiln_backend *list[8];
    int idx[8], n = 0;
    kiln_status st;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (colon) *colon = 0;
        const kiln_backend *b = kiln_backend_find(item);
        if (!b) {
            char names[256];
            kiln_backend_names(names, sizeof names);
            return kiln_error(KILN_ERR_INVALID_ARG, "unknown backend '%s' (available: %s)", item,
                              names);
        }
        if (colon && !b->configure)
            return kiln_error(KILN_ERR_INVALID_ARG, "backend '%s' takes no options", item);
        if (b->configure && (st = b->configure(m, colon ? colon + 1 : NULL))) return st;
        if (n == 8) return kiln_error(KILN_ERR_INVALID_ARG, "at most 8 backends");
        list[n] = b;
        if ((st = kiln_module_add_backend(m, b->name, &idx[n]))) return st;
        n++;
    }
    if (n == 0) return kiln_error(KILN_ERR_INVALID_ARG, "empty backend list");
    int ref_idx = -1;
    for (int k = 0; k < m->n_methods; k++) {
        kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            kiln_node *nd = &g->nodes[i];
            nd->backend = -1;
            for (int j = 0; j < n && nd->backend < 0; j++)
                if (list[j]->supports(m, g, nd)) nd->backend = idx[j];
            if (nd->backend < 0) {
                if (ref_idx < 0 && (st = kiln_module_add_backend(m, "ref", &ref_idx))) return st;
                nd->backend = ref_idx;
            }
        }
    }
    for (int k = 0; k < m->n_methods; k++)
        if ((st = kiln_graph_partition(&m->methods[k]))) return st;
    return kiln_meta_set_str(m, "kiln.backends.requested", spec);
}

kiln_status kiln_module_prepare(kiln_module *m, const kiln_compile_options *o) {
    kiln_prepare_options po = {.no_pack = o->no_pack, .log = o->log, .log_user = o->log_user};
    for (int b = 0; b < m->n_backends; b++) {
        const kiln_backend *be = kiln_backend_find(m->backends[b]);
        kiln_status st = be && be->prepare ? be->prepare(m, b, &po) : KILN_OK;
        if (st) return kiln_error_wrap(st, "backend %s", m->backends[b]);
    }
    return KILN_OK;
}
