/* compile.c: the compiler driver. import -> build graphs -> verify ->
 * partition -> plan -> write (to a temporary file) -> reopen and verify
 * every section -> rename into place. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "import/import.h"
#include "kiln/kiln_compile.h"
#include "compiler/check.h"
#include "format/format.h"
#include "quant/quant.h"

#define DEFAULT_PREFILL 128
#define MAX_SEQ_CAP 4096

void kiln_compile_options_init(kiln_compile_options *o) {
    memset(o, 0, sizeof *o);
    o->prefill = DEFAULT_PREFILL;
}

/* The input of a node that is a weight matrix (matmul, logits: 1;
 * get_rows: 0), or -1. */
static int weight_slot(const kiln_node *n) {
    return n->op == KILN_OP_GET_ROWS ? 0 : (n->op == KILN_OP_MATMUL || n->op == KILN_OP_LOGITS) ? 1 : -1;
}

/* Converts matmul and embedding weights to `target` (see kiln_compile_options.quant). */
static kiln_status quantize(kiln_module *m, const kiln_compile_options *o) {
    if (!o->quant || !strcmp(o->quant, "keep")) return KILN_OK;
    static const struct { const char *name; kiln_dtype t; } targets[] = {
        {"f32", KILN_F32}, {"f16", KILN_F16}, {"q8_0", KILN_Q8_0}, {"q4_0", KILN_Q4_0}};
    int ti = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(o->quant, targets[i].name)) ti = i;
    if (ti < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "unknown --quant '%s' (keep, f32, f16, q8_0, q4_0)", o->quant);
    kiln_dtype target = targets[ti].t;
    /* Which constants are weights of matmul / logits / embedding lookups. */
    uint8_t *is_weight = kiln_calloc((size_t)m->n_consts + 1, 1);
    if (!is_weight) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            int w = weight_slot(n) >= 0 ? n->in[weight_slot(n)] : -1;
            if (w >= 0 && g->values[w].kind == KILN_VAL_CONST) is_weight[g->values[w].ref] = 1;
        }
    }
    kiln_status st = KILN_OK;
    int converted = 0, kept = 0;
    uint64_t before = 0, after = 0;
    char line[512];
    float *row = NULL;
    for (int i = 0; i < m->n_consts && !st; i++) {
        kiln_const *c = &m->consts[i];
        if (!is_weight[i] || c->dtype == target || c->ndim != 2) continue;
        int64_t K = c->ne[1], N = c->ne[0];
        uint64_t nbytes = kiln_shape_bytes(target, 2, c->ne);
        if (!nbytes) {
            snprintf(line, sizeof line, "tensor '%s' [%lld, %lld]: rows of %lld are not whole %s blocks of %d",
                     c->name, (long long)N, (long long)K, (long long)K, kiln_dtype_name(target), kiln_dtype_block(target));
            if (!o->quant_fallback) {
                st = kiln_error(KILN_ERR_INVALID_ARG, "%s (use --quant-fallback to keep it as %s)", line,
                                kiln_dtype_name(c->dtype));
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
                if (m->methods[k].values[v].kind == KILN_VAL_CONST && m->methods[k].values[v].ref == i)
                    m->methods[k].values[v].dtype = target;
    }
    kiln_free(row);
    kiln_free(is_weight);
    if (!st && o->log) {
        snprintf(line, sizeof line, "--quant %s: converted %d weight tensors (%.1f MB -> %.1f MB), %d kept as they were",
                 o->quant, converted, before / 1e6, after / 1e6, kept);
        o->log(o->log_user, line);
    }
    return st;
}

/* Packs weights into the layout the cpu kernels want (kiln_dtype_packed):
 * a constant is packed when it is a 2-dim weight whose rows come in whole
 * groups, every node reading it is a matmul, logits or get_rows (ref and cpu
 * read packed weights), and at least one of them runs on cpu. The packed
 * copy replaces the plain one. */
static kiln_status pack(kiln_module *m, const kiln_compile_options *o) {
    if (o->no_pack) return KILN_OK;
    int cpu = -1;
    for (int b = 0; b < m->n_backends; b++)
        if (!strcmp(m->backends[b], "cpu")) cpu = b;
    if (cpu < 0) return KILN_OK;
    /* per constant: 1 = read by a cpu weight node, 2 = read otherwise */
    uint8_t *use = kiln_calloc((size_t)m->n_consts + 1, 1);
    if (!use) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            int wslot = weight_slot(n);
            for (int j = 0; j < n->n_in; j++) {
                const kiln_value *v = &g->values[n->in[j]];
                if (v->kind != KILN_VAL_CONST) continue;
                if (j != wslot) use[v->ref] |= 2;
                else if (n->backend == cpu) use[v->ref] |= 1;
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
                if (m->methods[k].values[v].kind == KILN_VAL_CONST && m->methods[k].values[v].ref == i)
                    m->methods[k].values[v].dtype = to;
    }
    kiln_free(use);
    if (!st && packed && o->log) {
        char line[256], what[96] = "";
        for (int t = 0; t < KILN_DTYPE_END; t++)
            if (by_dtype[t])
                snprintf(what + strlen(what), sizeof what - strlen(what), "%s%d %s", *what ? ", " : "",
                         by_dtype[t], kiln_dtype_name((kiln_dtype)t));
        snprintf(line, sizeof line, "packed %d weight tensors (%.1f MB) for the cpu kernels: %s (--no-pack keeps them as imported)",
                 packed, bytes / 1e6, what);
        o->log(o->log_user, line);
    }
    return st;
}

/* Parses "a:opts,b" and assigns each node the first backend that supports
 * it; nodes none supports fall back to ref. */
static kiln_status partition(kiln_module *m, const char *spec) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return kiln_error(KILN_ERR_INVALID_ARG, "backend list too long");
    strcpy(buf, spec);
    const kiln_backend *list[8];
    int idx[8], n = 0;
    kiln_status st;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (colon) *colon = 0;
        const kiln_backend *b = kiln_backend_find(item);
        if (!b) return kiln_error(KILN_ERR_INVALID_ARG, "unknown backend '%s' (available: cpu, ref, test)", item);
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
    return kiln_meta_set_str(m, "kiln.backends.requested", spec);
}

kiln_status kiln_compile(const kiln_compile_options *o) {
    if (!o || !o->input || !o->output)
        return kiln_error(KILN_ERR_INVALID_ARG, "compile needs an input and an output path");
    if (o->check < 0 || o->check > 2 || !(o->check_threshold >= 0 && o->check_threshold <= 1))
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "check must be 0, 1 or 2 (got %d) and check_threshold in (0, 1] or 0 (got %g)",
                          o->check, o->check_threshold);
    if (o->prefill < 0 || o->max_seq < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "prefill (%d) and max-seq (%d) must not be negative",
                          o->prefill, o->max_seq);
    kiln_dtype kv_dtype = KILN_F16;
    if (o->kv_type && !strcmp(o->kv_type, "f32"))
        kv_dtype = KILN_F32;
    else if (o->kv_type && strcmp(o->kv_type, "f16"))
        return kiln_error(KILN_ERR_INVALID_ARG, "unknown KV cache type '%s' (f16, f32)", o->kv_type);
    kiln_module m;
    memset(&m, 0, sizeof m);
    kiln_import imp;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o->output, (long)getpid());
    int wrote = 0;
    kiln_status st = kiln_import_open(o->input, o->tokenizer, &imp, &m);
    if (st) goto done;
    if (imp.tokenizer_note[0] && o->log) o->log(o->log_user, imp.tokenizer_note);
    kiln_llama_config cfg = imp.cfg;
    cfg.kv_dtype = kv_dtype;
    int max_seq = o->max_seq ? o->max_seq : (cfg.n_ctx_train < MAX_SEQ_CAP ? cfg.n_ctx_train : MAX_SEQ_CAP);
    int prefill = o->prefill ? o->prefill : DEFAULT_PREFILL;
    if (max_seq > (1 << 20)) {
        st = kiln_error(KILN_ERR_INVALID_ARG, "max-seq %d is too large (at most 1048576)", max_seq);
        goto done;
    }
    if (prefill > max_seq) prefill = max_seq; /* a prefill longer than the context is never usable */
    if ((st = kiln_meta_set_str(&m, "general.source", kiln_basename(o->input)))) goto done;
    if ((st = kiln_llama_build(&m, &cfg, prefill, max_seq))) goto done;
    if ((st = kiln_module_prune_consts(&m))) goto done; /* weights no method reads */
    if ((st = quantize(&m, o))) goto done;
    if ((st = kiln_module_verify(&m, 0))) goto done;
    if ((st = partition(&m, o->backends ? o->backends : kiln_backend_default()))) goto done;
    if ((st = pack(&m, o))) goto done;
    for (int i = 0; i < m.n_methods; i++)
        if ((st = kiln_graph_plan(&m.methods[i], &m))) goto done;
    if ((st = kiln_module_verify(&m, 1))) goto done;
    wrote = 1;
    for (int pass = 0;; pass++) {
        if ((st = kiln_program_write(&m, tmp, o->progress, o->progress_user))) goto done;
        /* Verify what was written: parse, verify graphs, check every checksum. */
        kiln_program *p;
        if ((st = kiln_program_open(tmp, &p))) {
            kiln_error_wrap(st, "the program just written does not read back");
            goto done;
        }
        st = kiln_program_verify(p);
        kiln_program_close(p);
        if (st) goto done;
        /* --check: once; --check=fallback may move partitions to ref, and
         * the program is written again (the memory plan holds for every
         * backend: verified again here) */
        if (!o->check || pass) break;
        int moved = 0;
        if ((st = kiln_check_partitions(tmp, &m, o, &moved))) goto done;
        if (!moved) break;
        if ((st = kiln_module_verify(&m, 1))) goto done;
    }
    if (rename(tmp, o->output) != 0) {
        st = kiln_error(KILN_ERR_IO, "cannot rename '%s' to '%s'", tmp, o->output);
        goto done;
    }
    wrote = 0;
done:
    if (wrote) unlink(tmp);
    kiln_module_free(&m);
    kiln_import_close(&imp);
    return st;
}
