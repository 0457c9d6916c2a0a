/* test_backend.c: a backend for tests only. It runs ref's kernels, but can
 * be told at compile time to refuse ops (so they fall back to ref) and to
 * perturb one named node's output (so the debugger has something to find):
 *   --backend test:refuse=rms_norm+silu:perturb=blk.1.attn_q
 * The options are stored in the program's metadata. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"

#define KEY_REFUSE "backend.test.refuse"
#define KEY_PERTURB "backend.test.perturb"

kiln_status kiln_test_refuse_set(kiln_module *m, const char *backend, const char *key,
                                 const char *ops) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", ops);
    for (char *save = NULL, *op = strtok_r(buf, "+", &save); op; op = strtok_r(NULL, "+", &save))
        if (kiln_op_from_name(op) < 0)
            return kiln_error(KILN_ERR_INVALID_ARG, "backend '%s': refuse names unknown op '%s'",
                              backend, op);
    return kiln_meta_set_str(m, key, ops);
}

int kiln_test_refuses(const kiln_module *m, const char *key, const kiln_node *n) {
    const kiln_meta *e = kiln_meta_find(m, key);
    if (!e || e->type != KILN_META_STR) return 0;
    const char *name = kiln_op_name(n->op);
    size_t len = strlen(name);
    for (const char *p = e->s; *p;) {
        const char *end = strchr(p, '+');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (l == len && strncmp(p, name, len) == 0) return 1;
        p += l + (end ? 1 : 0);
    }
    return 0;
}

static kiln_status test_configure(kiln_module *m, const char *options) {
    char buf[1024];
    if (!options) return KILN_OK;
    if (strlen(options) >= sizeof buf)
        return kiln_error(KILN_ERR_INVALID_ARG, "backend 'test': options too long");
    strcpy(buf, options);
    for (char *save = NULL, *kv = strtok_r(buf, ":", &save); kv; kv = strtok_r(NULL, ":", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            return kiln_error(KILN_ERR_INVALID_ARG, "backend 'test': option '%s' is not key=value",
                              kv);
        *eq = 0;
        const char *val = eq + 1;
        kiln_status st;
        if (strcmp(kv, "refuse") == 0) {
            st = kiln_test_refuse_set(m, "test", KEY_REFUSE, val);
        } else if (strcmp(kv, "perturb") == 0) {
            st = kiln_meta_set_str(m, KEY_PERTURB, val);
        } else {
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "backend 'test': unknown option '%s' (refuse, perturb)", kv);
        }
        if (st) return st;
    }
    return KILN_OK;
}

static int test_supports(const kiln_module *m, const kiln_graph *g, const kiln_node *n) {
    return !kiln_test_refuses(m, KEY_REFUSE, n);
}

static kiln_status test_open(const kiln_module *m, const kiln_open_options *options, void **ctx) {
    const kiln_meta *e = kiln_meta_find(m, KEY_PERTURB);
    *ctx = NULL;
    if (e && e->type == KILN_META_STR && !(*ctx = kiln_strdup(e->s)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

static void test_close(void *ctx) {
    kiln_free(ctx);
}

void kiln_test_perturb(const char *name, const kiln_node *n, kiln_tensor *out) {
    if (!name || strcmp(n->name, name) != 0 || out->dtype != KILN_F32) return;
    /* A deterministic, clearly visible error that no rescaling hides (the
     * debugger's cosine ignores scale): every 8th value's sign flipped,
     * the rest scaled by 1.1 and shifted. */
    float *o = out->data;
    int64_t elems = (int64_t)kiln_shape_elems(out->ndim, out->ne);
    for (int64_t i = 0; i < elems; i++)
        o[i] = i % 8 == 3 ? -o[i] : o[i] * 1.1f + 0.05f;
}

static kiln_status test_exec(void *ctx, const kiln_node *n, const kiln_tensor *const *in,
                             kiln_tensor *out, void *scratch, uint64_t scratch_bytes) {
    kiln_status st = kiln_ref_exec(NULL, n, in, out, scratch, scratch_bytes);
    if (!st) kiln_test_perturb(ctx, n, out);
    return st;
}

static const char *test_unit(void *ctx, const kiln_node *n, const kiln_tensor *const *in) {
    return "test scalar f32";
}

const kiln_backend kiln_backend_test_impl = {
    .name = "test",
    .configure = test_configure,
    .supports = test_supports,
    .open = test_open,
    .close = test_close,
    .exec = test_exec,
    .unit = test_unit,
};
