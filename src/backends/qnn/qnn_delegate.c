/* qnn_delegate.c: `qnn`, the Qualcomm HTP (Hexagon NPU) delegate.
 *   --backend qnn[:soc=SM8650][:quant=w8][:refuse=OP+OP][:perturb=NODE],cpu
 * At compile time every node QNN validates (qnn_lower.c) is the delegate's;
 * prepare builds each of its partitions into a graph of one QNN context,
 * prepared for the SoC, and stores the context binary with Kiln's table
 * of the graphs' tensors (qnn_blob.c) as the program's blob. At open the
 * binary is loaded; a call binds Kiln's buffers to the graph's inputs and
 * outputs, pads a short call to the graph's rows, and writes the KV rows
 * the graph returns into the cache (only the call's real rows).
 *
 * For the debugging engine, exec_alone runs one node alone: its own graph,
 * lowered as in prepare, built in a second context on first use and kept.
 * refuse= and perturb= are test switches: ops sent elsewhere, and one
 * node's lowering made wrong (qnn_lower.c) for the debugger to find. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/qnn/qnn.h"

#define KEY_SOC "backend.qnn.soc"
#define KEY_REFUSE "backend.qnn.refuse"
#define KEY_SHARING "backend.qnn.weight_sharing"
#define KEY_QUANT "backend.qnn.quant"
#define KEY_PERTURB "backend.qnn.perturb"
#define QNN_CHECK_COS_FP16 0.999
#define QNN_CHECK_COS_W8 0.99
#define QNN_CHECK_COS_16A8W 0.99
#define QNN_CHECK_COS_8A8W 0.98
#define QNN_CHECK_COS_16A4W 0.95

/* ---- compile time ---------------------------------------------------------------- */

/* One set of handles for validating nodes while partitioning (supports has
 * no place to keep them), and what QNN rejected, for prepare's log. */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static qnn_rt check_rt;
static char rejected[2048];
static int n_rejected;

static kiln_status qnn_configure(kiln_module *m, const char *options) {
    int soc = QNN_SOC_DEFAULT, sharing = 0, quant = QNN_QUANT_FP16;
    kiln_status st = KILN_OK;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", options ? options : "");
    for (char *save = NULL, *o = strtok_r(buf, ":", &save); o && !st;
         o = strtok_r(NULL, ":", &save)) {
        if (!strncmp(o, "soc=", 4)) {
            if ((soc = qnn_soc_from_name(o + 4)) < 0) {
                char names[256];
                qnn_soc_names(names, sizeof names);
                return kiln_error(KILN_ERR_INVALID_ARG, "backend 'qnn': unknown SoC '%s' (%s)",
                                  o + 4, names);
            }
        } else if (!strncmp(o, "quant=", 6)) {
            if ((quant = qnn_quant_from_name(o + 6)) < 0)
                return kiln_error(KILN_ERR_INVALID_ARG,
                                  "backend 'qnn': unknown quant '%s' (w8: int8 weights, fp16 "
                                  "activations; 16a8w, 8a8w, 16a4w: int8 or int4 weights, "
                                  "uint16 or uint8 activations from calibration)",
                                  o + 6);
        } else if (!strcmp(o, "weight-sharing")) {
            sharing = 1;
        } else if (!strncmp(o, "refuse=", 7)) {
            st = kiln_test_refuse_set(m, "qnn", KEY_REFUSE, o + 7);
        } else if (!strncmp(o, "perturb=", 8)) {
            int found = 0;
            for (int k = 0; k < m->n_methods && !found; k++)
                for (int i = 0; i < m->methods[k].n_nodes && !found; i++)
                    found = !strcmp(m->methods[k].nodes[i].name, o + 8);
            if (!found)
                return kiln_error(KILN_ERR_INVALID_ARG,
                                  "backend 'qnn': perturb=%s: the model has no node of that name",
                                  o + 8);
            st = kiln_meta_set_str(m, KEY_PERTURB, o + 8);
        } else {
            return kiln_error(
                KILN_ERR_INVALID_ARG,
                "backend 'qnn': unknown option '%s' (soc=NAME, quant=w8|16a8w|8a8w|16a4w, "
                "refuse=OP+OP, perturb=NODE, weight-sharing)",
                o);
        }
    }
    if (st || (st = kiln_meta_set_int(m, KEY_SOC, soc)) ||
        (sharing && (st = kiln_meta_set_int(m, KEY_SHARING, 1))) ||
        (quant != QNN_QUANT_FP16 && (st = kiln_meta_set_int(m, KEY_QUANT, quant))))
        return st;
    pthread_mutex_lock(&compile_lock);
    if (check_rt.lib && check_rt.soc != soc) qnn_rt_close(&check_rt);
    if (!check_rt.lib) st = qnn_rt_open(&check_rt, soc);
    rejected[0] = 0, n_rejected = 0;
    pthread_mutex_unlock(&compile_lock);
    return st;
}

static int qnn_supports(const kiln_module *m, const kiln_graph *g, const kiln_node *n) {
    if (kiln_test_refuses(m, KEY_REFUSE, n)) return 0;
    pthread_mutex_lock(&compile_lock);
    /* a program opened with every node on qnn (no configure ran); without
     * the library no node is supported */
    if (!check_rt.lib)
        (void)qnn_rt_open(&check_rt, (int)kiln_meta_int_or(m, KEY_SOC, QNN_SOC_DEFAULT));
    char why[256];
    int ok = check_rt.lib && qnn_validate_node(&check_rt, m, g, n, why, sizeof why);
    if (!ok && check_rt.lib) {
        n_rejected++;
        size_t at = strlen(rejected);
        if (n_rejected <= 8)
            snprintf(rejected + at, sizeof rejected - at,
                     "%snode '%s' (%s) goes to the next backend: %s", at ? "\n" : "", n->name,
                     kiln_op_name(n->op), why);
    }
    pthread_mutex_unlock(&compile_lock);
    return ok;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void say(const kiln_prepare_options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const kiln_prepare_options *o, const char *fmt, ...) {
    if (!o->log) return;
    char line[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->log(o->log_user, line);
}

/* How the module's graphs are lowered: the precision and the test switch. */
static qnn_quant_opts lower_opts(const kiln_module *m) {
    qnn_quant_opts qo = {.mode = (int)kiln_meta_int_or(m, KEY_QUANT, QNN_QUANT_FP16)};
    if (qo.mode < 0 || qo.mode >= QNN_QUANT_COUNT) qo.mode = QNN_QUANT_FP16;
    const kiln_meta *e = kiln_meta_find(m, KEY_PERTURB);
    if (e && e->type == KILN_META_STR) qo.perturb = e->s;
    return qo;
}

static kiln_status qnn_prepare(kiln_module *m, int b, const kiln_prepare_options *o) {
    pthread_mutex_lock(&compile_lock);
    if (n_rejected)
        say(o, "qnn: %d node%s rejected by QNN:\n%s%s", n_rejected, n_rejected == 1 ? "" : "s",
            rejected, n_rejected > 8 ? "\n..." : "");
    pthread_mutex_unlock(&compile_lock);
    int n_graphs = 0;
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++)
            n_graphs += m->methods[k].parts[j].backend == b;
    if (!n_graphs) return KILN_OK;
    int soc = (int)kiln_meta_int_or(m, KEY_SOC, QNN_SOC_DEFAULT);
    qnn_quant_opts qo = lower_opts(m);
    qnn_rt rt;
    kiln_status st = qnn_rt_open(&rt, soc);
    if (st) return st;
    const qnn_fn *f = rt.lib->fn;
    /* Weight sharing: the graphs of the context hold one copy of the weights
     * they share; such a binary loads only on a device (on x86: code 1000). */
    int sharing = (int)kiln_meta_int_or(m, KEY_SHARING, 0);
    qnn_htp_context_config share = {.option = QNN_HTP_CONTEXT_WEIGHT_SHARING, .weight_sharing = 1};
    qnn_config cc = {.option = 0, .custom = &share};
    const qnn_config *ccs[2] = {&cc, NULL};
    qnn_handle ctx = NULL;
    qnn_err e = f->context_create(rt.be, rt.dev, sharing ? ccs : NULL, &ctx);
    if (e) {
        st = qnn_fail(rt.lib, "contextCreate", e);
        qnn_rt_close(&rt);
        return st;
    }
    qnn_graph_info *gis = kiln_calloc((size_t)n_graphs, sizeof *gis);
    if (!gis) st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    int made = 0;
    double t0 = now_ms();
    for (int k = 0; k < m->n_methods && !st; k++)
        for (int j = 0; j < m->methods[k].n_parts && !st; j++) {
            kiln_graph *g = &m->methods[k];
            kiln_partition *p = &g->parts[j];
            if (p->backend != b) continue;
            char name[KILN_NAME_MAX + 16];
            snprintf(name, sizeof name, "%.200s_p%d", g->name, j);
            double t1 = now_ms();
            int quiet = qnn_quiet_begin();
            st = qnn_lower_partition(&rt, ctx, m, g, p, name, &qo, &gis[made]);
            qnn_quiet_end(quiet);
            if (st) {
                st = kiln_error_wrap(st, "method '%s', partition %d", g->name, j);
                break;
            }
            gis[made].method = k, gis[made].part = j;
            say(o,
                "qnn: graph '%s': nodes %d..%d, %d inputs and outputs, built and finalized in "
                "%.0f ms",
                name, p->first, p->first + p->n_nodes - 1, gis[made].n_io, now_ms() - t1);
            if (qo.mode != QNN_QUANT_FP16)
                say(o, "qnn: graph '%s': %d matmul weights quantized (%s)", name, qo.n_quantized,
                    qnn_quant_weights(qo.mode));
            if (qo.n_outliers)
                say(o, "qnn: graph '%s': %d node%s in fp16 for ranges past %.0f wide: %s", name,
                    qo.n_outliers, qo.n_outliers == 1 ? "" : "s", QNN_OUTLIER_RANGE, qo.outliers);
            qo.n_quantized = qo.n_outliers = 0;
            qo.outliers[0] = 0;
            made++;
            kiln_free(p->graph);
            if (!(p->graph = kiln_strdup(name))) st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        }
    uint8_t *bin = NULL, *blob = NULL;
    uint64_t cap = 0, size = 0, blob_size = 0;
    if (!st && (e = f->context_get_binary_size(ctx, &cap)))
        st = qnn_fail(rt.lib, "contextGetBinarySize", e);
    if (!st && !(bin = kiln_malloc(cap ? cap : 1)))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (!st && (e = f->context_get_binary(ctx, bin, cap, &size)))
        st = qnn_fail(rt.lib, "contextGetBinary", e);
    if (!st) st = qnn_blob_write(soc, gis, made, bin, size, &blob, &blob_size);
    kiln_free(bin);
    f->context_free(ctx, NULL);
    char api[32];
    snprintf(api, sizeof api, "%u.%u.%u", rt.lib->api.core.major, rt.lib->api.core.minor,
             rt.lib->api.core.patch);
    const char *build = rt.lib->build_id;
    qnn_rt_close(&rt);
    for (int i = 0; i < made; i++)
        qnn_graph_info_free(&gis[i]);
    kiln_free(gis);
    if (st) {
        kiln_free(blob);
        return st;
    }
    int index;
    if ((st = kiln_module_add_blob(m, b, blob, blob_size, &index))) return st;
    kiln_blob *bl = &m->blobs[index];
    if ((st = kiln_blob_set_prop(bl, "format", "kiln-qnn-1")) ||
        (st = kiln_blob_set_prop(bl, "soc", qnn_soc_name(soc) ? qnn_soc_name(soc) : "?")) ||
        (st = kiln_blob_set_prop(bl, "qairt", build)) ||
        (st = kiln_blob_set_prop(bl, "core_api", api)) ||
        (qo.mode != QNN_QUANT_FP16 &&
         ((st = kiln_blob_set_prop(bl, "quant", qnn_quant_name(qo.mode))) ||
          (st = kiln_blob_set_prop(bl, "quant_weights", qnn_quant_weights(qo.mode))) ||
          (st = kiln_blob_set_prop(bl, "quant_activations", qnn_quant_activations(qo.mode))) ||
          (st = kiln_blob_set_prop(bl, "quant_kv_cache", qnn_quant_kv(qo.mode))) ||
          (st = kiln_blob_set_prop(
               bl, "quant_integer",
               qnn_quant_fixed(qo.mode)
                   ? "token ids and positions int32: never quantized; masks fp16 in, {0, -100} "
                     "inside each graph"
                   : "token ids and positions int32, masks fp16: never quantized")))) ||
        (qo.perturb && (st = kiln_blob_set_prop(bl, "test_perturb", qo.perturb))) ||
        (sharing && ((st = kiln_blob_set_prop(bl, "weight_sharing", "yes")) ||
                     (st = kiln_blob_set_prop(bl, "device_only", "yes")))))
        return st;
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++)
            if (m->methods[k].parts[j].backend == b) m->methods[k].parts[j].blob = index;
    say(o, "qnn: %d graph%s in one context for %s, binary %.1f MB, %.1f s (QAIRT %s)", made,
        made == 1 ? "" : "s", qnn_soc_name(soc) ? qnn_soc_name(soc) : "?", (double)blob_size / 1e6,
        (now_ms() - t0) / 1e3, build);
    return KILN_OK;
}

/* ---- run time ---------------------------------------------------------------------- */

typedef struct stage {
    struct stage *next;
} stage;

/* The ops a graph's profiles name, kept for the program's life (the trace
 * holds their strings): found by the name QNN gives each op event. */
typedef struct {
    char *id;         /* QNN's identifier, e.g. "blk.0.attn_q.op10.MatMul:OpId_27 (cycles)" */
    const char *name; /* the op's name: "blk.0.attn_q.op10.MatMul" (a copy) */
    const char *type; /* "MatMul" ("" when the name does not say) */
    int node;         /* the Kiln node it was lowered from, -1: QNN's own */
} prof_op;

typedef struct {
    prof_op *ops;
    int n, cap;
} prof_ops;

typedef struct {
    const kiln_module *m;
    qnn_rt rt;
    qnn_handle ctx;
    qnn_blob_view view;
    uint64_t stage_bytes; /* per call: the largest graph's host buffers */
    pthread_mutex_t lock;
    stage *free_stages;
    prof_ops *prof; /* per graph of view, once profiled */
    /* exec_alone: one graph per node run alone, in a context of their own */
    qnn_handle alone_ctx;
    qnn_graph_info *alone;
    int n_alone, cap_alone;
} qnn_ctx;

static kiln_status qnn_open(const kiln_module *m, const kiln_open_options *options, void **out) {
    qnn_ctx *c = kiln_calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    c->m = m;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return KILN_OK;
}

static void qnn_close(void *ctx) {
    qnn_ctx *c = ctx;
    if (!c) return;
    if (c->ctx) c->rt.lib->fn->context_free(c->ctx, NULL);
    if (c->alone_ctx) c->rt.lib->fn->context_free(c->alone_ctx, NULL);
    for (int i = 0; i < c->n_alone; i++)
        qnn_graph_info_free(&c->alone[i]);
    kiln_free(c->alone);
    qnn_rt_close(&c->rt);
    qnn_blob_view_free(&c->view);
    for (stage *s = c->free_stages, *n; s; s = n) {
        n = s->next;
        kiln_free(s);
    }
    for (int i = 0; c->prof && i < c->view.n_graphs; i++) {
        for (int k = 0; k < c->prof[i].n; k++)
            kiln_free(c->prof[i].ops[k].id);
        kiln_free(c->prof[i].ops);
    }
    kiln_free(c->prof);
    pthread_mutex_destroy(&c->lock);
    kiln_free(c);
}

static uint64_t io_bytes(const qnn_io *x) {
    uint64_t n = x->dtype == QNN_FLOAT16 ? 2 : 4;
    for (uint32_t d = 0; d < x->rank; d++)
        n *= x->dims[d];
    return n;
}

/* The inputs and outputs Kiln does not hold itself: the padded token ids,
 * positions, masks, and the KV rows before the real ones are written. */
static int is_staged(const qnn_io *x) {
    return x->role == QNN_IN_POSITIONS || x->role == QNN_IN_MASK_NEW ||
           x->role == QNN_IN_MASK_ALL || x->role == QNN_OUT_KV_ROWS ||
           (x->role == QNN_IN_VALUE && x->dtype == QNN_INT32);
}

/* What a call of graph gi needs on the host: the tensors' descriptions,
 * then the staged tensors. */
static uint64_t stage_need(const qnn_graph_info *gi) {
    uint64_t n = (uint64_t)gi->n_io * sizeof(qnn_tensor);
    for (int i = 0; i < gi->n_io; i++)
        if (is_staged(&gi->io[i])) n += (io_bytes(&gi->io[i]) + 63) & ~(uint64_t)63;
    return n;
}

/* Checks graph gi against the program's partition it claims. */
static kiln_status check_graph(const kiln_module *m, int b, const qnn_graph_info *gi) {
    if (gi->method < 0 || gi->method >= m->n_methods)
        return kiln_error(KILN_ERR_FORMAT, "QNN graph '%s' names method %d of %d", gi->name,
                          gi->method, m->n_methods);
    const kiln_graph *g = &m->methods[gi->method];
    if (gi->part < 0 || gi->part >= g->n_parts || g->parts[gi->part].backend != b ||
        !g->parts[gi->part].graph || strcmp(g->parts[gi->part].graph, gi->name))
        return kiln_error(KILN_ERR_FORMAT,
                          "QNN graph '%s' is not partition %d of method '%s' in this program",
                          gi->name, gi->part, g->name);
    if (gi->rows != (uint32_t)g->max_tokens ||
        (m->n_states && gi->ctx_rows != (uint32_t)m->states[0].ne[0]))
        return kiln_error(
            KILN_ERR_FORMAT,
            "QNN graph '%s' has %u rows and %u cache rows; method '%s' has %d and %lld", gi->name,
            gi->rows, gi->ctx_rows, g->name, g->max_tokens,
            (long long)(m->n_states ? m->states[0].ne[0] : 0));
    for (int k = 0; k < 2; k++) { /* pos and all_logits: i32 [1] inputs */
        int32_t v = k ? gi->flag_value : gi->pos_value;
        if (v >= g->n_values ||
            (v >= 0 && (g->values[v].dtype != KILN_I32 ||
                        kiln_shape_elems(g->values[v].ndim, g->values[v].ne) != 1)))
            return kiln_error(KILN_ERR_FORMAT, "QNN graph '%s': its %s value %d is not an i32 [1]",
                              gi->name, k ? "all_logits" : "pos", v);
    }
    for (int i = 0; i < gi->n_io; i++) {
        const qnn_io *x = &gi->io[i];
        /* What the host writes or reads has the graph's rows, and the shape
         * and type its role says: the executor's loops rely on it. */
        int rowed = x->role != QNN_IN_STATE;
        uint32_t cols = x->role == QNN_IN_MASK_NEW ? gi->ctx_rows + gi->rows : gi->ctx_rows;
        int ok = !rowed || x->dims[0] == gi->rows;
        if (x->role == QNN_IN_POSITIONS) ok = ok && x->rank == 1 && x->dtype == QNN_INT32;
        if (x->role == QNN_IN_MASK_NEW || x->role == QNN_IN_MASK_ALL)
            ok = ok && x->rank == 2 && x->dims[1] == cols && x->dtype == QNN_FLOAT16;
        if (x->role == QNN_IN_POSITIONS || x->role == QNN_IN_MASK_NEW ||
            x->role == QNN_IN_MASK_ALL || x->role == QNN_OUT_KV_ROWS)
            ok = ok && gi->pos_value >= 0;
        if (!ok)
            return kiln_error(KILN_ERR_FORMAT,
                              "QNN graph '%s': tensor '%s' does not have the shape its role needs",
                              gi->name, x->name);
        int needs_value =
            x->role == QNN_IN_VALUE || x->role == QNN_IN_STATE || x->role >= QNN_OUT_VALUE;
        if (needs_value && (x->value < 0 || x->value >= g->n_values))
            return kiln_error(KILN_ERR_FORMAT, "QNN graph '%s': tensor '%s' names value %d of %d",
                              gi->name, x->name, x->value, g->n_values);
        if (needs_value) {
            const kiln_value *v = &g->values[x->value];
            uint64_t want = kiln_shape_bytes(v->dtype, v->ndim, v->ne);
            int state_like = x->role == QNN_IN_STATE;
            if (state_like) {
                if ((v->kind != KILN_VAL_STATE && v->kind != KILN_VAL_VIEW) || v->ref < 0 ||
                    v->ref >= m->n_states)
                    return kiln_error(KILN_ERR_FORMAT, "QNN graph '%s': '%s' is not a state",
                                      gi->name, x->name);
                want = m->states[v->ref].nbytes;
            }
            if (x->role == QNN_OUT_KV_ROWS) {
                const kiln_state *s =
                    v->ref >= 0 && v->ref < m->n_states ? &m->states[v->ref] : NULL;
                if (v->kind != KILN_VAL_VIEW || !s || x->rank != 2 ||
                    (int64_t)x->dims[1] != s->ne[1] || x->dims[0] > s->ne[0] ||
                    x->dtype != (s->dtype == KILN_F16 ? QNN_FLOAT16 : QNN_FLOAT32))
                    return kiln_error(KILN_ERR_FORMAT,
                                      "QNN graph '%s': KV rows '%s' do not fit their cache",
                                      gi->name, x->name);
                continue;
            }
            if (io_bytes(x) != want)
                return kiln_error(KILN_ERR_FORMAT,
                                  "QNN graph '%s': tensor '%s' is %llu bytes, value '%s' %llu",
                                  gi->name, x->name, (unsigned long long)io_bytes(x), v->name,
                                  (unsigned long long)want);
        }
    }
    return KILN_OK;
}

static kiln_status qnn_load(void *ctx, const kiln_module *m, int b, const kiln_blob *blob) {
    qnn_ctx *c = ctx;
    const char *fmt = kiln_blob_prop(blob, "format");
    if (!fmt || strcmp(fmt, "kiln-qnn-1"))
        return kiln_error(KILN_ERR_FORMAT, "QNN: blob format '%s', expected 'kiln-qnn-1'",
                          fmt ? fmt : "(none)");
    if (c->ctx) return kiln_error(KILN_ERR_FORMAT, "QNN: the program has two QNN blobs");
    kiln_status st = qnn_blob_read(blob->data, blob->size, &c->view);
    if (st) return st;
    const char *built = kiln_blob_prop(blob, "qairt"), *soc = kiln_blob_prop(blob, "soc");
#if defined(__x86_64__)
    if (kiln_blob_prop(blob, "weight_sharing"))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "QNN: this program was compiled with qnn:weight-sharing, whose context "
                          "binary loads only on a device's HTP (QNN's x86 emulator refuses shared "
                          "weights); run it on the phone, or compile without weight-sharing here");
#endif
    if ((st = qnn_rt_open(&c->rt, c->view.soc))) return st;
    /* Another build may load the binary (a device's library of the same
     * release does): compared, and named if the load fails. */
    int other_build = built && strcmp(built, c->rt.lib->build_id);
    qnn_clear_log();
    int quiet = qnn_quiet_begin();
    qnn_err e = c->rt.lib->fn->context_create_from_binary(c->rt.be, c->rt.dev, NULL, c->view.binary,
                                                          c->view.binary_size, &c->ctx, NULL);
    qnn_quiet_end(quiet);
    if (e) {
        st = qnn_fail(c->rt.lib, "contextCreateFromBinary", e);
        if (other_build)
            return kiln_error_wrap(st,
                                   "context binary of %llu bytes prepared for %s by QAIRT %s; the "
                                   "library in '%s' is %s: compile the program with it",
                                   (unsigned long long)c->view.binary_size, soc ? soc : "?", built,
                                   c->rt.lib->dir, c->rt.lib->build_id);
        return kiln_error_wrap(st, "context binary of %llu bytes prepared for %s",
                               (unsigned long long)c->view.binary_size, soc ? soc : "?");
    }
    for (int i = 0; i < c->view.n_graphs; i++) {
        qnn_graph_info *gi = &c->view.graphs[i];
        if ((st = check_graph(m, b, gi))) return st;
        if ((e = c->rt.lib->fn->graph_retrieve(c->ctx, gi->name, &gi->graph)))
            return kiln_error_wrap(qnn_fail(c->rt.lib, "graphRetrieve", e), "graph '%s'", gi->name);
        uint64_t need = stage_need(gi);
        if (need > c->stage_bytes) c->stage_bytes = need;
    }
    /* Every partition of this backend has its graph. */
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++) {
            const kiln_partition *p = &m->methods[k].parts[j];
            if (p->backend != b) continue;
            int found = 0;
            for (int i = 0; i < c->view.n_graphs && !found; i++)
                found = c->view.graphs[i].method == k && c->view.graphs[i].part == j;
            if (!found)
                return kiln_error(KILN_ERR_FORMAT,
                                  "QNN: the blob has no graph for method '%s' partition %d",
                                  m->methods[k].name, j);
        }
    return KILN_OK;
}

static void *stage_get(qnn_ctx *c) {
    pthread_mutex_lock(&c->lock);
    stage *s = c->free_stages;
    if (s) c->free_stages = s->next;
    pthread_mutex_unlock(&c->lock);
    return s ? (void *)s
             : kiln_malloc(c->stage_bytes > sizeof(stage) ? c->stage_bytes : sizeof(stage));
}

static void stage_put(qnn_ctx *c, void *p) {
    if (!p) return;
    stage *s = p;
    pthread_mutex_lock(&c->lock);
    s->next = c->free_stages;
    c->free_stages = s;
    pthread_mutex_unlock(&c->lock);
}

static const qnn_graph_info *find_graph(const qnn_ctx *c, int method, int part) {
    for (int i = 0; i < c->view.n_graphs; i++)
        if (c->view.graphs[i].method == method && c->view.graphs[i].part == part)
            return &c->view.graphs[i];
    return NULL;
}

/* The op an event names: "<node>.op<N>.<type>:OpId_<K> (cycles)", or one of
 * QNN's own ("Input OpId_2 (cycles)"). Parsed once per identifier, under
 * the lock; NULL when out of memory. */
static const prof_op *prof_find(qnn_ctx *c, int gi, const kiln_graph *g, const kiln_partition *p,
                                int hint, const char *id) {
    prof_ops *po = &c->prof[gi];
    if (hint < po->n && !strcmp(po->ops[hint].id, id)) return &po->ops[hint];
    for (int i = 0; i < po->n; i++)
        if (!strcmp(po->ops[i].id, id)) return &po->ops[i];
    if (po->n == po->cap) {
        int cap = po->cap ? 2 * po->cap : 256;
        prof_op *n = kiln_realloc(po->ops, sizeof *n * (size_t)cap);
        if (!n) return NULL;
        po->ops = n;
        po->cap = cap;
    }
    size_t len = strlen(id);
    char *copy = kiln_malloc(2 * len + 2); /* the identifier, then the name */
    if (!copy) return NULL;
    memcpy(copy, id, len + 1);
    char *name = copy + len + 1;
    memcpy(name, id, len + 1);
    char *cut = strstr(name, ":OpId_");
    if (!cut) cut = strstr(name, " (cycles)");
    if (cut) *cut = 0;
    prof_op *o = &po->ops[po->n];
    *o = (prof_op){.id = copy, .name = name, .type = "", .node = -1};
    /* "<node>.op<N>[.<type>]": the last ".op" followed by digits */
    for (char *at = strstr(name, ".op"); at; at = strstr(at + 1, ".op")) {
        char *d = at + 3;
        if (*d < '0' || *d > '9') continue;
        while (*d >= '0' && *d <= '9')
            d++;
        if (*d && *d != '.') continue;
        o->type = *d == '.' ? d + 1 : "";
        size_t nl = (size_t)(at - name);
        for (int k = p->first; k < p->first + p->n_nodes; k++)
            if (strlen(g->nodes[k].name) == nl && !strncmp(g->nodes[k].name, name, nl)) {
                o->node = k;
                break;
            }
    }
    po->n++;
    return o;
}

/* A profile event's time in ns (QNN's unit 1 is microseconds; 0: another). */
static uint64_t prof_time(const qnn_profile_data *d) {
    return d->unit == 1 ? d->value * 1000 : 0;
}

/* A profiled call's figures and ops into rep. */
static void prof_report(qnn_ctx *c, int gi, const kiln_graph *g, const kiln_partition *p,
                        qnn_handle pf, kiln_exec_report *rep) {
    const qnn_fn *f = c->rt.lib->fn;
    const uint64_t *ev = NULL;
    uint32_t ne = 0;
    if (f->profile_get_events(pf, &ev, &ne)) return;
    for (uint32_t i = 0; i < ne; i++) {
        qnn_profile_data d = {0};
        if (f->profile_get_event_data(ev[i], &d)) continue;
        switch (d.type) {
        case QNN_PROFILE_EXECUTE_TIME:
            rep->exec_ns = prof_time(&d);
            break;
        case QNN_PROFILE_HTP_VTCM:
            rep->vtcm_ns = prof_time(&d);
            break;
        case QNN_PROFILE_HTP_POWER_ON:
            rep->power_ns = prof_time(&d);
            break;
        case QNN_PROFILE_HTP_THREADS:
            rep->threads = (int)d.value;
            break;
        case QNN_PROFILE_HTP_CYCLES: {
            rep->cycles = d.value;
            const uint64_t *sub = NULL;
            uint32_t ns = 0;
            if (f->profile_get_sub_events(ev[i], &sub, &ns)) break;
            pthread_mutex_lock(&c->lock);
            if (!c->prof) c->prof = kiln_calloc((size_t)c->view.n_graphs, sizeof *c->prof);
            for (uint32_t k = 0; c->prof && k < ns; k++) {
                qnn_profile_data q = {0};
                if (f->profile_get_event_data(sub[k], &q) || q.type != QNN_PROFILE_NODE ||
                    !q.identifier)
                    continue;
                const prof_op *o = prof_find(c, gi, g, p, (int)k, q.identifier);
                if (o) rep->op(rep->user, o->node, o->name, o->type, q.value);
            }
            pthread_mutex_unlock(&c->lock);
            break;
        }
        default:
            break;
        }
    }
}

/* One call of graph gi (a partition's, or a node's alone: p NULL, not
 * profiled), st_base its host buffers (stage_need). */
static kiln_status run_graph(qnn_ctx *c, const qnn_graph_info *gi, const kiln_graph *g,
                             const kiln_partition *p, kiln_tensor *vals, uint8_t *st_base,
                             kiln_exec_report *rep) {
    uint64_t t_begin = now_ns();
    /* The call's rows: those of its first row-shaped input or output. */
    int64_t T = -1;
    for (int i = 0; i < gi->n_io && T < 0; i++)
        if (gi->io[i].role == QNN_IN_VALUE || gi->io[i].role == QNN_OUT_VALUE)
            T = vals[gi->io[i].value].ne[0];
    if (T < 0) T = gi->rows;
    int64_t S = gi->ctx_rows, Tm = gi->rows;
    int32_t pos = gi->pos_value >= 0 ? *(const int32_t *)vals[gi->pos_value].data : 0;
    if (T < 1 || T > Tm)
        return kiln_error(KILN_ERR_INVALID_ARG, "QNN: %lld rows for a graph of %lld", (long long)T,
                          (long long)Tm);
    if (gi->pos_value >= 0 && (pos < 0 || pos > S || T > S - pos))
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "position %d + %lld tokens does not fit the context of %lld", pos,
                          (long long)T, (long long)S);
    /* The tensors' descriptions: the inputs, then the outputs, in the
     * order of the table. */
    uint32_t n_in = 0, n_out = 0;
    for (int i = 0; i < gi->n_io; i++)
        n_in += gi->io[i].role < QNN_OUT_VALUE;
    qnn_tensor *in = (qnn_tensor *)st_base, *out = in + n_in;
    uint8_t *free_at = st_base + (uint64_t)gi->n_io * sizeof(qnn_tensor);
    for (int i = 0, k_in = 0; i < gi->n_io; i++) {
        const qnn_io *x = &gi->io[i];
        qnn_tensor *t = x->role >= QNN_OUT_VALUE ? &out[n_out++] : &in[k_in++];
        memset(t, 0, sizeof *t);
        t->version = 2;
        t->v2.id = x->id;
        t->v2.name = x->name;
        t->v2.type = x->role >= QNN_OUT_VALUE ? QNN_TENSOR_APP_READ : QNN_TENSOR_APP_WRITE;
        t->v2.dtype = x->dtype;
        t->v2.quant.definition = t->v2.quant.encoding = QNN_QUANT_NONE;
        t->v2.rank = x->rank;
        t->v2.dims = (uint32_t *)x->dims;
        uint64_t bytes = io_bytes(x), row = bytes / (x->dims[0] ? x->dims[0] : 1);
        void *data = NULL;
        if (is_staged(x)) {
            data = free_at;
            free_at += (bytes + 63) & ~(uint64_t)63;
        }
        switch (x->role) {
        case QNN_IN_VALUE:
            if (x->dtype == QNN_INT32) { /* token ids: the call's, then 0 */
                memset(data, 0, bytes);
                memcpy(data, vals[x->value].data, (size_t)(T * (int64_t)row));
            } else { /* the padding rows read as zeros: finite, whatever they held */
                data = vals[x->value].data;
                memset((uint8_t *)data + T * (int64_t)row, 0, (size_t)((Tm - T) * (int64_t)row));
            }
            break;
        case QNN_IN_STATE:
            data = vals[x->value].data;
            break;
        case QNN_IN_POSITIONS:
            for (int64_t r = 0; r < Tm; r++)
                ((int32_t *)data)[r] = (int32_t)(pos + r < S ? pos + r : S - 1);
            break;
        case QNN_IN_MASK_NEW:
        case QNN_IN_MASK_ALL: {
            uint16_t *mk = data, off = kiln_f32_to_f16(-30000.0f);
            int64_t cols = x->dims[1];
            for (int64_t r = 0; r < Tm; r++)
                for (int64_t j = 0; j < cols; j++) {
                    int see = x->role == QNN_IN_MASK_ALL ? j <= pos + r
                              : j < S                    ? j < pos
                                                         : j - S <= r;
                    mk[r * cols + j] = see ? 0 : off;
                }
            break;
        }
        case QNN_OUT_VALUE:
        case QNN_OUT_LOGITS:
            data = vals[x->value].data;
            break;
        default:
            break;
        }
        t->v2.buf.data = data;
        t->v2.buf.bytes = (uint32_t)bytes;
    }
    /* Traced: QNN's detailed profile of this call (its own figures, each
     * op's cycles); a profile that cannot be made leaves the call as it is. */
    qnn_handle pf = NULL;
    uint64_t t_prof = now_ns(); /* profiling's own time is not the host's */
    if (rep->profile && p && c->rt.lib->fn->profile_create(c->rt.be, QNN_PROFILE_DETAILED, &pf))
        pf = NULL;
    qnn_clear_log();
    uint64_t t_exec = now_ns(), prof_ns = t_exec - t_prof;
    qnn_err e = c->rt.lib->fn->graph_execute(gi->graph, in, n_in, out, n_out, pf, NULL);
    uint64_t t_done = now_ns();
    if (pf) {
        if (!e) {
            rep->exec_t0 = t_exec;
            prof_report(c, (int)(gi - c->view.graphs), g, p, pf, rep);
        }
        c->rt.lib->fn->profile_free(pf);
        prof_ns += now_ns() - t_done;
    }
    kiln_status st = KILN_OK;
    if (e) st = kiln_error_wrap(qnn_fail(c->rt.lib, "graphExecute", e), "graph '%s'", gi->name);
    /* The call's own KV rows into the cache; the logits rows kept. */
    for (uint32_t i = 0, o = 0; i < (uint32_t)gi->n_io && !st; i++) {
        const qnn_io *x = &gi->io[i];
        if (x->role < QNN_OUT_VALUE) continue;
        const qnn_tensor *t = &out[o++];
        if (x->role == QNN_OUT_KV_ROWS) {
            uint64_t row = io_bytes(x) / x->dims[0];
            memcpy((uint8_t *)vals[x->value].data + (uint64_t)pos * row, t->v2.buf.data,
                   (size_t)(T * (int64_t)row));
        } else if (x->role == QNN_OUT_LOGITS && gi->flag_value >= 0 &&
                   *(const int32_t *)vals[gi->flag_value].data == 0 && T > 1) {
            uint64_t row = io_bytes(x) / x->dims[0];
            uint8_t *d = vals[x->value].data;
            memmove(d, d + (uint64_t)(T - 1) * row, (size_t)row);
        }
    }
    rep->host_ns = (t_exec - t_begin) + (now_ns() - t_done) - prof_ns;
    return st;
}

static kiln_status qnn_execute(void *ctx, const kiln_graph *g, const kiln_partition *p,
                               kiln_tensor *vals, void *scratch, uint64_t scratch_bytes,
                               kiln_exec_report *rep) {
    (void)scratch, (void)scratch_bytes;
    qnn_ctx *c = ctx;
    int method = (int)(g - c->m->methods), part = (int)(p - g->parts);
    const qnn_graph_info *gi = c->ctx ? find_graph(c, method, part) : NULL;
    if (!gi)
        return kiln_error(KILN_ERR_BACKEND, "QNN: partition %d of method '%s' was never loaded",
                          part, g->name);
    uint8_t *st_base = stage_get(c);
    if (!st_base) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = run_graph(c, gi, g, p, vals, st_base, rep);
    stage_put(c, st_base);
    return st;
}

/* ---- one node alone (the debugging engine) ------------------------------------------ */

/* Node n's own graph: found, or lowered alone into the second context (the
 * handles opened here when no blob was loaded) and kept. Under c->lock. */
static kiln_status alone_graph(qnn_ctx *c, const kiln_graph *g, const kiln_node *n,
                               const qnn_graph_info **out) {
    int method = (int)(g - c->m->methods), node = (int)(n - g->nodes);
    for (int i = 0; i < c->n_alone; i++)
        if (c->alone[i].method == method && c->alone[i].part == node) {
            *out = &c->alone[i];
            return KILN_OK;
        }
    kiln_status st = KILN_OK;
    if (!c->rt.lib &&
        (st = qnn_rt_open(&c->rt, (int)kiln_meta_int_or(c->m, KEY_SOC, QNN_SOC_DEFAULT))))
        return st;
    const qnn_fn *f = c->rt.lib->fn;
    qnn_err e;
    if (!c->alone_ctx && (e = f->context_create(c->rt.be, c->rt.dev, NULL, &c->alone_ctx)))
        return qnn_fail(c->rt.lib, "contextCreate", e);
    if (c->n_alone == c->cap_alone) {
        int cap = c->cap_alone ? 2 * c->cap_alone : 64;
        qnn_graph_info *a = kiln_realloc(c->alone, sizeof *a * (size_t)cap);
        if (!a) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        c->alone = a, c->cap_alone = cap;
    }
    int32_t outv = n->out;
    kiln_partition p = {
        .backend = n->backend, .first = node, .n_nodes = 1, .n_out = 1, .out = &outv, .blob = -1};
    char name[KILN_NAME_MAX + 32];
    snprintf(name, sizeof name, "alone_%.200s_n%d", g->name, node);
    qnn_quant_opts qo = lower_opts(c->m);
    qnn_graph_info *gi = &c->alone[c->n_alone];
    int quiet = qnn_quiet_begin();
    st = qnn_lower_partition(&c->rt, c->alone_ctx, c->m, g, &p, name, &qo, gi);
    qnn_quiet_end(quiet);
    if (st) return kiln_error_wrap(st, "QNN: node '%s' alone", n->name);
    gi->method = method, gi->part = node;
    c->n_alone++;
    *out = gi;
    return KILN_OK;
}

/* Node n alone, on the caller's tensors. The graph reads and writes whole
 * rows (Tm of them), so activations go through copies of that size: the
 * caller's tensors hold only the call's rows and are never written but
 * for out (and a kv_store's rows, into the cache copy out holds). */
static kiln_status qnn_exec_alone(void *ctx, const kiln_graph *g, const kiln_node *n,
                                  const kiln_tensor *const *in, kiln_tensor *out, void *scratch,
                                  uint64_t scratch_bytes) {
    (void)scratch, (void)scratch_bytes;
    qnn_ctx *c = ctx;
    const qnn_graph_info *gi = NULL;
    pthread_mutex_lock(&c->lock);
    kiln_status st = alone_graph(c, g, n, &gi);
    pthread_mutex_unlock(&c->lock);
    if (st) return st;
    kiln_tensor *vals = kiln_calloc((size_t)g->n_values, sizeof *vals);
    uint64_t need = stage_need(gi);
    for (int i = 0; i < gi->n_io; i++)
        if (!is_staged(&gi->io[i])) need += (io_bytes(&gi->io[i]) + 63) & ~(uint64_t)63;
    uint8_t *buf = kiln_malloc(need ? (size_t)need : 1);
    if (!vals || !buf) {
        kiln_free(vals);
        kiln_free(buf);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    for (int j = 0; j < n->n_in; j++)
        vals[n->in[j]] = *in[j];
    vals[n->out] = *out;
    /* the activations' copies after the staged part, in the table's order */
    uint8_t *at = buf + stage_need(gi);
    for (int i = 0; i < gi->n_io; i++) {
        const qnn_io *x = &gi->io[i];
        if (is_staged(x) || x->role == QNN_IN_STATE) continue;
        kiln_tensor *v = &vals[x->value];
        uint64_t bytes = io_bytes(x), have = kiln_tensor_bytes(v);
        if (x->role == QNN_IN_VALUE) memcpy(at, v->data, (size_t)(have < bytes ? have : bytes));
        v->data = at;
        at += (bytes + 63) & ~(uint64_t)63;
    }
    kiln_exec_report rep;
    memset(&rep, 0, sizeof rep);
    st = run_graph(c, gi, g, NULL, vals, buf, &rep);
    for (int i = 0; i < gi->n_io && !st; i++) {
        const qnn_io *x = &gi->io[i];
        if (x->role != QNN_OUT_VALUE && x->role != QNN_OUT_LOGITS) continue;
        uint64_t bytes = io_bytes(x), want = kiln_tensor_bytes(out);
        memcpy(out->data, vals[x->value].data, (size_t)(want < bytes ? want : bytes));
    }
    kiln_free(vals);
    kiln_free(buf);
    return st;
}

static const char *qnn_unit(void *ctx, const kiln_node *n, const kiln_tensor *const *in) {
    const qnn_ctx *c = ctx;
    return qnn_soc_unit(c && c->view.n_graphs ? c->view.soc : QNN_SOC_DEFAULT);
}

/* --check: fp16 graphs stay within fp16's error of ref over the sample
 * calls; int8 weights add theirs (measured on stories260K and SmolLM2). */
static double qnn_check_cos(const kiln_module *m) {
    switch (kiln_meta_int_or(m, KEY_QUANT, QNN_QUANT_FP16)) {
    case QNN_QUANT_W8:
        return QNN_CHECK_COS_W8;
    case QNN_QUANT_16A8W:
        return QNN_CHECK_COS_16A8W;
    case QNN_QUANT_8A8W:
        return QNN_CHECK_COS_8A8W;
    case QNN_QUANT_16A4W:
        return QNN_CHECK_COS_16A4W;
    default:
        return QNN_CHECK_COS_FP16;
    }
}

/* Activation-quantized graphs take their encodings from calibration. */
static int qnn_wants_ranges(const kiln_module *m) {
    return qnn_quant_fixed((int)kiln_meta_int_or(m, KEY_QUANT, QNN_QUANT_FP16));
}

const kiln_backend kiln_backend_qnn_impl = {
    .name = "qnn",
    .configure = qnn_configure,
    .supports = qnn_supports,
    .open = qnn_open,
    .close = qnn_close,
    .exec = NULL, /* a delegate: whole partitions only */
    .unit = qnn_unit,
    .prepare = qnn_prepare,
    .load = qnn_load,
    .execute = qnn_execute,
    .check_cos = qnn_check_cos,
    .exec_alone = qnn_exec_alone,
    .wants_ranges = qnn_wants_ranges,
};
