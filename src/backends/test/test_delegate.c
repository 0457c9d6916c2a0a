/* test_delegate.c: `testd`, a delegate for tests only, shaped like a real
 * one (QNN): it has no per-node exec. At compile time prepare writes one
 * blob naming each of its partitions ("<method>.p<k>") with the nodes it
 * covers; at open load reads the blob back and refuses one that does not
 * describe the program's partitions; execute runs a whole partition (with
 * ref's kernels). So the executor's delegate path, the blobs section and
 * its checks are tested without any vendor library.
 *   --backend testd[:refuse=OP+OP][:perturb=NODE],cpu
 * refuse= sends ops elsewhere, which splits a method into several
 * partitions; perturb= makes one node's output wrong inside its partition,
 * as the test backend does (so `compile --check` has a delegate to fail),
 * and alone (exec_alone, as QNN's graphs of one node are). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"

#define KEY_REFUSE "backend.testd.refuse"
#define KEY_PERTURB "backend.testd.perturb"
#define MAGIC "kiln-testd 1\n"

static kiln_status testd_configure(kiln_module *m, const char *options) {
    char buf[1024];
    if (!options) return KILN_OK;
    if (strlen(options) >= sizeof buf)
        return kiln_error(KILN_ERR_INVALID_ARG, "backend 'testd': options too long");
    strcpy(buf, options);
    for (char *save = NULL, *o = strtok_r(buf, ":", &save); o; o = strtok_r(NULL, ":", &save)) {
        kiln_status st;
        if (!strncmp(o, "refuse=", 7))
            st = kiln_test_refuse_set(m, "testd", KEY_REFUSE, o + 7);
        else if (!strncmp(o, "perturb=", 8))
            st = kiln_meta_set_str(m, KEY_PERTURB, o + 8);
        else
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "backend 'testd': unknown option '%s' (refuse, perturb)", o);
        if (st) return st;
    }
    return KILN_OK;
}

static int testd_supports(const kiln_module *m, const kiln_graph *g, const kiln_node *n) {
    return !kiln_test_refuses(m, KEY_REFUSE, n);
}

/* The blob: MAGIC, then one line per partition: "<graph> <first> <n_nodes>". */
static kiln_status testd_prepare(kiln_module *m, int b, const kiln_prepare_options *o) {
    kiln_wbuf buf = {0};
    kiln_wbuf_bytes(&buf, MAGIC, strlen(MAGIC));
    int n = 0;
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++) {
            kiln_partition *p = &m->methods[k].parts[j];
            if (p->backend != b) continue;
            char line[KILN_NAME_MAX + 64], name[KILN_NAME_MAX + 16];
            snprintf(name, sizeof name, "%.200s.p%d", m->methods[k].name, j);
            int len = snprintf(line, sizeof line, "%s %d %d\n", name, p->first, p->n_nodes);
            kiln_wbuf_bytes(&buf, line, (size_t)len);
            kiln_free(p->graph);
            if (!(p->graph = kiln_strdup(name))) buf.failed = 1;
            n++;
        }
    if (buf.failed) {
        kiln_wbuf_free(&buf);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    if (!n) {
        kiln_wbuf_free(&buf);
        return KILN_OK; /* nothing on this backend: no blob */
    }
    int index;
    kiln_status st = kiln_module_add_blob(m, b, buf.data, buf.len, &index);
    if (!st) st = kiln_blob_set_prop(&m->blobs[index], "format", "testd-1");
    for (int k = 0; !st && k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++)
            if (m->methods[k].parts[j].backend == b) m->methods[k].parts[j].blob = index;
    if (!st && o->log) {
        char line[128];
        snprintf(line, sizeof line, "testd: %d partitions in one blob of %zu bytes", n,
                 (size_t)m->blobs[index].size);
        o->log(o->log_user, line);
    }
    return st;
}

typedef struct {
    int loaded;    /* a blob was loaded and matched */
    char *perturb; /* the node perturb= names, or NULL */
} testd_ctx;

static void testd_close(void *ctx) {
    if (ctx) kiln_free(((testd_ctx *)ctx)->perturb);
    kiln_free(ctx);
}

static kiln_status testd_open(const kiln_module *m, const kiln_open_options *options, void **ctx) {
    testd_ctx *c = kiln_calloc(1, sizeof *c);
    const kiln_meta *e = kiln_meta_find(m, KEY_PERTURB);
    if (c && e && e->type == KILN_META_STR && !(c->perturb = kiln_strdup(e->s))) {
        testd_close(c);
        c = NULL;
    }
    if (!(*ctx = c)) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

/* The blob must describe every partition of this backend exactly. */
static kiln_status testd_load(void *ctx, const kiln_module *m, int b, const kiln_blob *blob) {
    const char *fmt = kiln_blob_prop(blob, "format");
    if (!fmt || strcmp(fmt, "testd-1"))
        return kiln_error(KILN_ERR_FORMAT, "testd: blob format '%s', expected 'testd-1'",
                          fmt ? fmt : "(none)");
    size_t ml = strlen(MAGIC);
    if (blob->size < ml || memcmp(blob->data, MAGIC, ml))
        return kiln_error(KILN_ERR_FORMAT, "testd: the blob does not start with its magic");
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++) {
            const kiln_partition *p = &m->methods[k].parts[j];
            if (p->backend != b) continue;
            char line[KILN_NAME_MAX + 64];
            int len = snprintf(line, sizeof line, "\n%s %d %d\n", p->graph ? p->graph : "?",
                               p->first, p->n_nodes);
            int found = 0;
            /* each line follows a newline (the magic ends with one) */
            for (size_t at = ml - 1; !found && at + (size_t)len <= blob->size; at++)
                found = !memcmp(blob->data + at, line, (size_t)len);
            if (!found)
                return kiln_error(KILN_ERR_FORMAT,
                                  "testd: the blob has no graph '%s' for method '%s' partition "
                                  "%d (nodes %d..%d)",
                                  p->graph ? p->graph : "?", m->methods[k].name, j, p->first,
                                  p->first + p->n_nodes - 1);
        }
    ((testd_ctx *)ctx)->loaded = 1;
    return KILN_OK;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static kiln_status testd_execute(void *ctx, const kiln_graph *g, const kiln_partition *p,
                                 kiln_tensor *vals, void *scratch, uint64_t scratch_bytes,
                                 kiln_exec_report *rep) {
    if (!((testd_ctx *)ctx)->loaded || p->blob < 0)
        return kiln_error(KILN_ERR_BACKEND, "testd: partition '%s' was never loaded",
                          p->graph ? p->graph : "?");
    /* Profiled like a real delegate: each node one op, its "cycles" the
     * nanoseconds it took, named after the node, of type its op. */
    uint64_t t0 = now_ns(), t = t0;
    for (int i = p->first; i < p->first + p->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_tensor *in[KILN_MAX_INPUTS];
        for (int j = 0; j < n->n_in; j++)
            in[j] = &vals[n->in[j]];
        kiln_status st = kiln_ref_exec(NULL, n, in, &vals[n->out], scratch, scratch_bytes);
        if (st) return kiln_error_wrap(st, "testd graph '%s', node '%s'", p->graph, n->name);
        kiln_test_perturb(((testd_ctx *)ctx)->perturb, n, &vals[n->out]);
        uint64_t t1 = now_ns();
        if (rep->profile) rep->op(rep->user, i, n->name, kiln_op_name(n->op), t1 - t);
        t = t1;
    }
    if (rep->profile) {
        rep->exec_t0 = t0;
        rep->exec_ns = t - t0 ? t - t0 : 1;
        rep->cycles = t - t0;
    }
    return KILN_OK;
}

/* One node alone: as inside its partition. */
static kiln_status testd_exec_alone(void *ctx, const kiln_graph *g, const kiln_node *n,
                                    const kiln_tensor *const *in, kiln_tensor *out, void *scratch,
                                    uint64_t scratch_bytes) {
    (void)g;
    kiln_status st = kiln_ref_exec(NULL, n, in, out, scratch, scratch_bytes);
    if (!st) kiln_test_perturb(((testd_ctx *)ctx)->perturb, n, out);
    return st;
}

static const char *testd_unit(void *ctx, const kiln_node *n, const kiln_tensor *const *in) {
    return "testd delegate";
}

const kiln_backend kiln_backend_testd_impl = {
    .name = "testd",
    .configure = testd_configure,
    .supports = testd_supports,
    .open = testd_open,
    .close = testd_close,
    .exec = NULL, /* a delegate: whole partitions only */
    .unit = testd_unit,
    .prepare = testd_prepare,
    .load = testd_load,
    .execute = testd_execute,
    .exec_alone = testd_exec_alone,
};
