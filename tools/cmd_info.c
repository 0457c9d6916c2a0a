/* cmd_info.c: `kiln info model.kiln [--json] [--verify]`: everything a
 * program holds: metadata, methods with inputs and outputs, state buffers,
 * constants by dtype, and the backend of every node. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "devtools/devtools.h"

typedef struct {
    const char *path, *qnn_lib;
    int json, verify;
} options;

#define OPT(field) offsetof(options, field)

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "PROGRAM", NULL, OPT(path), .path = KILN_CLI_IN_FILE,
     .bits = KILN_CLI_POSITIONAL, .rule = "more than one program given ('%s' and '%s')"},
    {KILN_CLI_SET, "--json", NULL, OPT(json), .lo = 1, .help = "one JSON object instead of text"},
    {KILN_CLI_SET, "--verify", NULL, OPT(verify), .lo = 1,
     .help = "also check every section's checksum, weights included"},
    KILN_CLI_QNN_LIB(OPT(qnn_lib)),
    {KILN_CLI_END},
};

static void init(void *o) {
    memset(o, 0, sizeof(options));
}

static const kiln_cli_command COMMAND = {
    .name = "info",
    .about = "usage: kiln info MODEL.kiln [--json] [--verify] [--qnn-lib DIR]\n"
             "\n"
             "Prints the program's metadata, every method's inputs and outputs (name,\n"
             "dtype, shape), state buffers, constants (count and bytes by dtype), and\n"
             "the backend of each node (with fallbacks marked).\n"
             "\n",
    .notes = "\n"
             "example:\n"
             "  kiln info stories.kiln --verify\n",
    .column = 17,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
};

static void json_str(const char *s) {
    kiln_json_fput_str(stdout, s);
}

static void shape_json(int ndim, const int64_t *ne) {
    putchar('[');
    for (int i = 0; i < ndim; i++)
        printf("%s%lld", i ? ", " : "", (long long)ne[i]);
    putchar(']');
}

static const char *kind_name(kiln_value_kind k) {
    static const char *names[] = {"input", "const", "state", "activation", "state view"};
    return (unsigned)k < 5 ? names[k] : "?";
}

static void print_meta_value(const kiln_meta *e, int json) {
    switch (e->type) {
    case KILN_META_INT:
        printf("%lld", (long long)e->i);
        break;
    case KILN_META_FLOAT:
        printf("%.9g", e->f);
        break;
    case KILN_META_STR:
        if (json)
            json_str(e->s);
        else if (strlen(e->s) > 80)
            printf("%.77s...", e->s);
        else
            printf("%s", e->s);
        break;
    case KILN_META_INT_ARRAY:
        printf("[");
        for (uint32_t i = 0; i < e->n && (json || i < 8); i++)
            printf("%s%lld", i ? ", " : "", (long long)e->ia[i]);
        printf("%s]", !json && e->n > 8 ? ", ..." : "");
        break;
    case KILN_META_FLOAT_ARRAY:
        printf("[");
        for (uint32_t i = 0; i < e->n && (json || i < 8); i++)
            printf("%s%.9g", i ? ", " : "", e->fa[i]);
        printf("%s]", !json && e->n > 8 ? ", ..." : "");
        break;
    case KILN_META_STR_ARRAY:
        printf("[");
        for (uint32_t i = 0; i < e->n && (json || i < 8); i++) {
            printf("%s", i ? ", " : "");
            json_str(e->sa[i]);
        }
        printf("%s]", !json && e->n > 8 ? ", ..." : "");
        break;
    }
}

static void io_text(const kiln_graph *g, const int32_t *idx, int n, const char *label) {
    char buf[96];
    printf("    %s:\n", label);
    for (int i = 0; i < n; i++) {
        const kiln_value *v = &g->values[idx[i]];
        kiln_shape_str(v->ndim, v->ne, buf, sizeof buf);
        printf("      %-12s %-5s %s%s\n", v->name, kiln_dtype_name(v->dtype), buf,
               v->dyn_mask ? "  (dim 0: 1..max tokens)" : "");
    }
}

static void io_json(const kiln_graph *g, const int32_t *idx, int n) {
    printf("[");
    for (int i = 0; i < n; i++) {
        const kiln_value *v = &g->values[idx[i]];
        printf("%s{\"name\": ", i ? ", " : "");
        json_str(v->name);
        printf(", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(v->dtype));
        shape_json(v->ndim, v->ne);
        printf(", \"dynamic_dims\": [%s]}", v->dyn_mask & 1 ? "0" : "");
    }
    printf("]");
}

/* A partition's boundary as "a, b, c" (at most `cap` bytes). */
static const char *value_list(const kiln_graph *g, const int32_t *v, int n, char *buf, size_t cap) {
    size_t l = 0;
    buf[0] = 0;
    for (int i = 0; i < n && l + 1 < cap; i++)
        l += (size_t)snprintf(buf + l, cap - l, "%s%s", i ? ", " : "", g->values[v[i]].name);
    if (l >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
    return n ? buf : "-";
}

/* The sections, the blobs and each method's partitions. */
static void layout_text(const kiln_program *p) {
    const kiln_module *m = kiln_program_module(p);
    printf("sections:\n");
    const char *name;
    uint64_t off, size;
    uint32_t crc;
    for (int i = 0; !kiln_program_section(p, i, &name, &off, &size, &crc); i++)
        printf("  %-10s offset %10llu  %12llu bytes  crc32c 0x%08x\n", name,
               (unsigned long long)off, (unsigned long long)size, crc);
    uint64_t consts = 0, blobs = 0;
    for (int i = 0; i < m->n_consts; i++)
        consts += m->consts[i].nbytes;
    for (int i = 0; i < m->n_blobs; i++)
        blobs += m->blobs[i].size;
    printf("size: %llu bytes of constants + %llu bytes of blobs\n", (unsigned long long)consts,
           (unsigned long long)blobs);
    for (int i = 0; i < m->n_blobs; i++) {
        const kiln_blob *b = &m->blobs[i];
        printf("blob %d: backend %s, %llu bytes", i,
               b->backend >= 0 ? m->backends[b->backend] : "(not used)",
               (unsigned long long)b->size);
        for (int k = 0; k < b->n_props; k++)
            printf("%s%s=%s", k ? ", " : "; ", b->prop_key[k], b->prop_val[k]);
        printf("\n");
    }
}

static void partitions_text(const kiln_module *m, const kiln_graph *g) {
    char in[160], out[160];
    printf("    partitions (%d):\n", g->n_parts);
    printf("      %4s  %-8s %-11s %-6s %-9s %s\n", "#", "backend", "nodes", "blob", "graph",
           "boundary in -> out");
    for (int j = 0; j < g->n_parts; j++) {
        const kiln_partition *pt = &g->parts[j];
        char nodes[32], blob[16];
        snprintf(nodes, sizeof nodes, "%d..%d", pt->first, pt->first + pt->n_nodes - 1);
        snprintf(blob, sizeof blob, pt->blob >= 0 ? "%d" : "-", pt->blob);
        printf("      %4d  %-8s %-11s %-6s %-9s %s -> %s\n", j, m->backends[pt->backend], nodes,
               blob, pt->graph ? pt->graph : "-", value_list(g, pt->in, pt->n_in, in, sizeof in),
               value_list(g, pt->out, pt->n_out, out, sizeof out));
    }
}

static void print_text(const kiln_program *p, const char *path, int verified) {
    const kiln_module *m = kiln_program_module(p);
    char buf[96];
    printf("program: %s\n", path);
    printf("  format version %d, %zu bytes, %d sections%s\n", KILN_FORMAT_VERSION,
           (size_t)kiln_program_file_bytes(p), kiln_program_section_count(p),
           verified ? ", all checksums verified" : "");
    printf("metadata (%d keys):\n", m->n_meta);
    for (int i = 0; i < m->n_meta; i++) {
        printf("  %-28s = ", m->meta[i].key);
        print_meta_value(&m->meta[i], 0);
        printf("\n");
    }
    layout_text(p);
    printf("tokenizer: %s\n", m->tokenizer_len ? "stored" : "none");
    uint64_t state_bytes = 0;
    for (int i = 0; i < m->n_states; i++)
        state_bytes += m->states[i].nbytes;
    printf("state (%d buffers, %llu bytes, shared by all methods):\n", m->n_states,
           (unsigned long long)state_bytes);
    for (int i = 0; i < m->n_states; i++)
        printf("  %-16s %-5s %s\n", m->states[i].name, kiln_dtype_name(m->states[i].dtype),
               kiln_shape_str(m->states[i].ndim, m->states[i].ne, buf, sizeof buf));
    uint64_t by_count[16] = {0}, by_bytes[16] = {0}, total = 0;
    for (int i = 0; i < m->n_consts; i++) {
        by_count[m->consts[i].dtype & 15]++;
        by_bytes[m->consts[i].dtype & 15] += m->consts[i].nbytes;
        total += m->consts[i].nbytes;
    }
    printf("constants: %d, %llu bytes (stored once)\n", m->n_consts, (unsigned long long)total);
    for (int t = 0; t < 16; t++)
        if (by_count[t])
            printf("  %-5s %5llu tensors %12llu bytes\n", kiln_dtype_name((kiln_dtype)t),
                   (unsigned long long)by_count[t], (unsigned long long)by_bytes[t]);
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        printf("method %d: %s (max %d tokens, %d nodes, arena %llu bytes)\n", k, g->name,
               g->max_tokens, g->n_nodes, (unsigned long long)g->arena_bytes);
        io_text(g, g->inputs, g->n_inputs, "inputs");
        io_text(g, g->outputs, g->n_outputs, "outputs");
        partitions_text(m, g);
        int n_fallback = 0;
        for (int i = 0; i < g->n_nodes; i++)
            n_fallback += kiln_program_node_is_fallback(p, &g->nodes[i]);
        printf("    nodes (%d, %d fallback):\n", g->n_nodes, n_fallback);
        printf("      %4s  %-24s %-10s %-8s %-8s %s\n", "#", "name", "op", "backend", "fallback",
               "output");
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            const kiln_value *o = &g->values[n->out];
            printf("      %4d  %-24s %-10s %-8s %-8s %s %s\n", i, n->name, kiln_op_name(n->op),
                   m->backends[n->backend], kiln_program_node_is_fallback(p, n) ? "yes" : "no",
                   kiln_dtype_name(o->dtype), kiln_shape_str(o->ndim, o->ne, buf, sizeof buf));
        }
    }
}

static void layout_json(const kiln_program *p) {
    const kiln_module *m = kiln_program_module(p);
    printf(" \"sections\": [");
    const char *name;
    uint64_t off, size;
    uint32_t crc;
    for (int i = 0; !kiln_program_section(p, i, &name, &off, &size, &crc); i++)
        printf("%s{\"name\": \"%s\", \"offset\": %llu, \"bytes\": %llu, \"crc32c\": %u}",
               i ? ", " : "", name, (unsigned long long)off, (unsigned long long)size, crc);
    printf("],\n \"blobs\": [");
    for (int i = 0; i < m->n_blobs; i++) {
        const kiln_blob *b = &m->blobs[i];
        printf("%s{\"backend\": ", i ? ", " : "");
        json_str(b->backend >= 0 ? m->backends[b->backend] : "");
        printf(", \"bytes\": %llu, \"properties\": {", (unsigned long long)b->size);
        for (int k = 0; k < b->n_props; k++) {
            printf("%s", k ? ", " : "");
            json_str(b->prop_key[k]);
            printf(": ");
            json_str(b->prop_val[k]);
        }
        printf("}}");
    }
    printf("],\n");
}

static void names_json(const kiln_graph *g, const int32_t *v, int n) {
    printf("[");
    for (int i = 0; i < n; i++) {
        printf("%s", i ? ", " : "");
        json_str(g->values[v[i]].name);
    }
    printf("]");
}

static void partitions_json(const kiln_module *m, const kiln_graph *g) {
    printf(", \"partitions\": [");
    for (int j = 0; j < g->n_parts; j++) {
        const kiln_partition *pt = &g->parts[j];
        printf("%s{\"backend\": ", j ? ", " : "");
        json_str(m->backends[pt->backend]);
        printf(", \"first_node\": %d, \"nodes\": %d, \"inputs\": ", pt->first, pt->n_nodes);
        names_json(g, pt->in, pt->n_in);
        printf(", \"outputs\": ");
        names_json(g, pt->out, pt->n_out);
        printf(", \"blob\": %d, \"graph\": ", pt->blob);
        if (pt->graph)
            json_str(pt->graph);
        else
            printf("null");
        printf("}");
    }
    printf("]");
}

static void print_json(const kiln_program *p, const char *path, int verified) {
    const kiln_module *m = kiln_program_module(p);
    printf("{\"path\": ");
    json_str(path);
    printf(", \"format_version\": %d, \"file_bytes\": %zu, \"checksums_verified\": %s,\n",
           KILN_FORMAT_VERSION, (size_t)kiln_program_file_bytes(p), verified ? "true" : "false");
    printf(" \"metadata\": {");
    for (int i = 0; i < m->n_meta; i++) {
        printf("%s", i ? ", " : "");
        json_str(m->meta[i].key);
        printf(": ");
        print_meta_value(&m->meta[i], 1);
    }
    printf("},\n");
    layout_json(p);
    printf(" \"tokenizer\": %s,\n \"state\": [", m->tokenizer_len ? "true" : "false");
    for (int i = 0; i < m->n_states; i++) {
        printf("%s{\"name\": ", i ? ", " : "");
        json_str(m->states[i].name);
        printf(", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(m->states[i].dtype));
        shape_json(m->states[i].ndim, m->states[i].ne);
        printf(", \"bytes\": %llu}", (unsigned long long)m->states[i].nbytes);
    }
    printf("],\n \"constants\": [");
    for (int i = 0; i < m->n_consts; i++) {
        printf("%s{\"name\": ", i ? ", " : "");
        json_str(m->consts[i].name);
        printf(", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(m->consts[i].dtype));
        shape_json(m->consts[i].ndim, m->consts[i].ne);
        printf(", \"bytes\": %llu}", (unsigned long long)m->consts[i].nbytes);
    }
    printf("],\n \"methods\": [");
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        printf("%s{\"name\": ", k ? ",\n  " : "");
        json_str(g->name);
        printf(", \"max_tokens\": %d, \"arena_bytes\": %llu, \"inputs\": ", g->max_tokens,
               (unsigned long long)g->arena_bytes);
        io_json(g, g->inputs, g->n_inputs);
        printf(", \"outputs\": ");
        io_json(g, g->outputs, g->n_outputs);
        partitions_json(m, g);
        printf(", \"nodes\": [");
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            const kiln_value *o = &g->values[n->out];
            printf("%s{\"name\": ", i ? ", " : "");
            json_str(n->name);
            printf(", \"op\": \"%s\", \"backend\": ", kiln_op_name(n->op));
            json_str(m->backends[n->backend]);
            printf(", \"fallback\": %s, \"inputs\": [",
                   kiln_program_node_is_fallback(p, n) ? "true" : "false");
            for (int j = 0; j < n->n_in; j++) {
                printf("%s", j ? ", " : "");
                json_str(g->values[n->in[j]].name);
            }
            printf("], \"output_dtype\": \"%s\", \"output_shape\": ", kiln_dtype_name(o->dtype));
            shape_json(o->ndim, o->ne);
            printf(", \"output_kind\": \"%s\"}", kind_name(o->kind));
        }
        printf("]}");
    }
    printf("]}\n");
}

int kiln_cmd_info(int argc, char **argv) {
    const char *cmd = COMMAND.name;
    options o;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &o, &rc)) return rc;
    if (!o.path) return kiln_cli_usage_error(cmd, "no program given");
    if ((rc = kiln_cli_qnn_lib(cmd, o.qnn_lib))) return rc;
    /* described, not run: a delegate's blob is checked but not loaded, so
     * a QNN program is described where Qualcomm's library is absent */
    kiln_open_options describe = {.describe_only = 1};
    kiln_program *p;
    kiln_status st = kiln_program_open_with(o.path, &describe, &p);
    if (st) return kiln_cli_fail(cmd, st);
    if (o.verify && (st = kiln_program_verify(p))) {
        kiln_program_close(p);
        return kiln_cli_fail(cmd, st);
    }
    if (o.json)
        print_json(p, o.path, o.verify);
    else
        print_text(p, o.path, o.verify);
    kiln_program_close(p);
    return KILN_EXIT_OK;
}
