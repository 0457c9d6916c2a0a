/* program.c: opening a program (map, parse, verify, resolve backends) and the
 * read-only queries of kiln.h. */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

#define META_REQUESTED "kiln.backends.requested"

/* 1 when the backend list "a:opts,b" names `name`. */
static int list_names(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",:");
        if (len == n && !strncmp(p, name, n)) return 1;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return 0;
}

kiln_status kiln_program_open(const char *path, kiln_program **out) {
    return kiln_program_open_with(path, NULL, out);
}

/* kiln_open_options.backend: every node of every method moves to backend
 * `name`, which becomes the module's only backend, before any backend opens.
 * A delegate qualifies when it runs nodes alone (exec_alone): it then runs
 * every node as a graph of its own, a debugging mode. */
static kiln_status force_backend(kiln_module *m, const char *path, const char *name) {
    const kiln_backend *b = kiln_backend_find(name);
    if (!b) return kiln_error(KILN_ERR_UNSUPPORTED, "this build of kiln has no backend '%s'", name);
    if (!b->exec && !b->exec_alone)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "backend '%s' runs what the compiler prepared for it: compile with "
                          "--backend %s instead of choosing it when the program opens",
                          name, name);
    for (int k = 0; k < m->n_methods; k++)
        for (int i = 0; i < m->methods[k].n_nodes; i++) {
            const kiln_node *n = &m->methods[k].nodes[i];
            kiln_error(KILN_OK, "%s", ""); /* a reason supports() may leave */
            if (!b->supports(m, &m->methods[k], n)) {
                char why[600] = "";
                if (kiln_last_status() != KILN_OK && *kiln_last_error())
                    snprintf(why, sizeof why, ": %s", kiln_last_error());
                return kiln_error(KILN_ERR_UNSUPPORTED,
                                  "'%s': method '%s', node '%s' (%s) cannot run on backend %s%s",
                                  kiln_basename(path), m->methods[k].name, n->name,
                                  kiln_op_get(n->op)->name, name, why);
            }
        }
    char *s = kiln_strdup(name);
    if (!s) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_backends; i++)
        kiln_free(m->backends[i]);
    m->backends[0] = s;
    m->n_backends = 1;
    for (int k = 0; k < m->n_methods; k++) {
        for (int i = 0; i < m->methods[k].n_nodes; i++)
            m->methods[k].nodes[i].backend = 0;
        /* one partition per method; what other backends prepared is not used */
        kiln_status st = kiln_graph_partition(&m->methods[k]);
        if (st) return st;
    }
    for (int i = 0; i < m->n_blobs; i++)
        m->blobs[i].backend = -1;
    return KILN_OK;
}

/* A partition that uses blob i, for messages ("method 'prefill' partition 2"). */
static void blob_user(const kiln_module *m, int i, char *buf, size_t cap) {
    snprintf(buf, cap, "no partition");
    for (int k = 0; k < m->n_methods; k++)
        for (int j = 0; j < m->methods[k].n_parts; j++)
            if (m->methods[k].parts[j].blob == i) {
                snprintf(buf, cap, "method '%s' partition %d", m->methods[k].name, j);
                return;
            }
}

/* Each blob to its backend's load, after checking it belongs to this
 * program (the methods and weights checksums it was written with). */
static kiln_status load_blobs(kiln_program *p) {
    const kiln_module *m = &p->mod;
    uint32_t mcrc = 0, wcrc = 0;
    for (int i = 0; i < p->n_sections; i++) {
        if (p->sections[i].kind == KILN_SEC_METHODS) mcrc = p->sections[i].crc;
        if (p->sections[i].kind == KILN_SEC_WEIGHTS) wcrc = p->sections[i].crc;
    }
    for (int i = 0; i < m->n_blobs; i++) {
        const kiln_blob *b = &m->blobs[i];
        if (b->backend < 0) continue; /* opened on one backend (kiln_open_options.backend) */
        char who[KILN_NAME_MAX + 64];
        blob_user(m, i, who, sizeof who);
        const char *name = m->backends[b->backend];
        if (b->methods_crc != mcrc || b->weights_crc != wcrc)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': %s (backend %s): blob %d was prepared for another program "
                              "(methods checksum 0x%08x, weights 0x%08x; this program's 0x%08x, "
                              "0x%08x): recompile it",
                              kiln_basename(p->path), who, name, i, b->methods_crc, b->weights_crc,
                              mcrc, wcrc);
        uint32_t crc = kiln_crc32c(0, b->data, (size_t)b->size);
        if (crc != b->crc)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': %s (backend %s): blob %d is damaged (checksum stored 0x%08x, "
                              "computed 0x%08x)",
                              kiln_basename(p->path), who, name, i, b->crc, crc);
        const kiln_backend *be = p->backends[b->backend];
        if (!be->load)
            return kiln_error(KILN_ERR_FORMAT, "'%s': %s: backend %s takes no blob, blob %d is its",
                              kiln_basename(p->path), who, name, i);
        if (p->describe_only) continue;
        kiln_status st = be->load(p->backend_ctx[b->backend], m, b->backend, b);
        if (st)
            return kiln_error_wrap(st, "'%s': %s (backend %s), blob %d", kiln_basename(p->path),
                                   who, name, i);
    }
    return KILN_OK;
}

kiln_status kiln_program_open_with(const char *path, const kiln_open_options *options,
                                   kiln_program **out) {
    static const kiln_open_options defaults;
    if (!options) options = &defaults;
    *out = NULL;
    if (options->n_threads < 0 || options->n_threads > KILN_MAX_THREADS)
        return kiln_error(KILN_ERR_INVALID_ARG, "thread count %d is out of range 0..%d",
                          options->n_threads, KILN_MAX_THREADS);
    if (!path) return kiln_error(KILN_ERR_INVALID_ARG, "no program path given");
    kiln_program *p = kiln_calloc(1, sizeof *p);
    if (!p || !(p->path = kiln_strdup(path))) {
        kiln_free(p);
        return kiln_error(KILN_ERR_NOMEM, "out of memory opening '%s'", path);
    }
    kiln_status st = kiln_file_map_open(path, &p->map);
    if (!st)
        st = kiln_program_parse(p->map.data, p->map.size, path, &p->mod, p->sections,
                                &p->n_sections);
    if (!st && options->backend && p->mod.n_backends > 0)
        st = force_backend(&p->mod, path, options->backend);
    if (st) goto fail;

    int nb = p->mod.n_backends;
    p->backends = kiln_calloc((size_t)nb + 1, sizeof *p->backends);
    p->backend_ctx = kiln_calloc((size_t)nb + 1, sizeof *p->backend_ctx);
    p->fallback = kiln_calloc((size_t)nb + 1, sizeof *p->fallback);
    p->input_offset = kiln_calloc((size_t)p->mod.n_methods + 1, sizeof *p->input_offset);
    if (!p->backends || !p->backend_ctx || !p->fallback || !p->input_offset) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory opening '%s'", path);
        goto fail;
    }
    const kiln_meta *req = kiln_meta_find(&p->mod, META_REQUESTED);
    for (int i = 0; i < nb; i++) {
        const kiln_backend *b = kiln_backend_find(p->mod.backends[i]);
        if (!b) {
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "'%s' needs backend '%s', which this build of kiln does not have",
                            kiln_basename(path), p->mod.backends[i]);
            goto fail;
        }
        p->backends[i] = b;
        if (b->open && (st = b->open(&p->mod, options, &p->backend_ctx[i]))) goto fail;
        /* A node on ref is a fallback when the user did not ask for ref. */
        p->fallback[i] = b == kiln_backend_ref() && req && req->type == KILN_META_STR &&
                         !list_names(req->s, "ref") && !options->backend;
    }
    p->describe_only = options->describe_only != 0;
    if ((st = load_blobs(p))) goto fail;
    for (int k = 0; k < p->mod.n_methods; k++) {
        const kiln_graph *g = &p->mod.methods[k];
        p->input_offset[k] = p->input_block_bytes;
        for (int i = 0; i < g->n_inputs; i++) {
            const kiln_value *v = &g->values[g->inputs[i]];
            p->input_block_bytes += kiln_align_up(kiln_shape_bytes(v->dtype, v->ndim, v->ne), 64);
        }
        if (g->arena_bytes > p->arena_bytes) p->arena_bytes = g->arena_bytes;
    }
    *out = p;
    return KILN_OK;
fail:
    kiln_program_close(p);
    return st;
}

void kiln_program_close(kiln_program *p) {
    if (!p) return;
    for (int i = 0; p->backends && i < p->mod.n_backends; i++)
        if (p->backends[i] && p->backends[i]->close) p->backends[i]->close(p->backend_ctx[i]);
    kiln_module_free(&p->mod);
    kiln_file_map_close(&p->map);
    kiln_free(p->backends);
    kiln_free(p->backend_ctx);
    kiln_free(p->fallback);
    kiln_free(p->input_offset);
    kiln_free(p->path);
    kiln_free(p);
}

kiln_status kiln_program_verify(const kiln_program *p) {
    for (int i = 0; i < p->n_sections; i++) {
        const kiln_section *s = &p->sections[i];
        uint32_t c = kiln_crc32c(0, p->map.data + s->offset, (size_t)s->size);
        if (c != s->crc)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': section '%s' checksum mismatch (stored 0x%08x, computed "
                              "0x%08x): the file is damaged",
                              kiln_basename(p->path), kiln_section_name(s->kind), s->crc, c);
    }
    return KILN_OK;
}

int kiln_program_method_count(const kiln_program *p) {
    return p->mod.n_methods;
}

const char *kiln_program_method_name(const kiln_program *p, int i) {
    return i >= 0 && i < p->mod.n_methods ? p->mod.methods[i].name : NULL;
}

kiln_status kiln_program_find_method(const kiln_program *p, const char *name, int *index) {
    for (int i = 0; i < p->mod.n_methods; i++)
        if (strcmp(p->mod.methods[i].name, name) == 0) {
            *index = i;
            return KILN_OK;
        }
    return kiln_error(KILN_ERR_INVALID_ARG, "'%s' has no method '%s'", kiln_basename(p->path),
                      name);
}

static const kiln_graph *method(const kiln_program *p, int m) {
    return m >= 0 && m < p->mod.n_methods ? &p->mod.methods[m] : NULL;
}

int kiln_method_input_count(const kiln_program *p, int m) {
    const kiln_graph *g = method(p, m);
    return g ? g->n_inputs : 0;
}

int kiln_method_output_count(const kiln_program *p, int m) {
    const kiln_graph *g = method(p, m);
    return g ? g->n_outputs : 0;
}

static kiln_status value_info(const kiln_program *p, int m, int i, int output,
                              kiln_tensor_info *info) {
    const kiln_graph *g = method(p, m);
    if (!g) return kiln_error(KILN_ERR_INVALID_ARG, "method index %d out of range", m);
    int n = output ? g->n_outputs : g->n_inputs;
    if (i < 0 || i >= n)
        return kiln_error(KILN_ERR_INVALID_ARG, "method '%s' has %d %s, index %d is out of range",
                          g->name, n, output ? "outputs" : "inputs", i);
    const kiln_value *v = &g->values[output ? g->outputs[i] : g->inputs[i]];
    memset(info, 0, sizeof *info);
    info->name = v->name;
    info->dtype = v->dtype;
    info->ndim = v->ndim;
    memcpy(info->shape, v->ne, sizeof v->ne);
    info->dynamic_mask = v->dyn_mask;
    if (output) /* outputs whose rows follow the token count */
        for (int d = 0; d < v->ndim; d++)
            if (v->ne[d] == g->max_tokens && g->max_tokens > 1 && d == 0)
                info->dynamic_mask |= 1u << d;
    return KILN_OK;
}

kiln_status kiln_method_input_info(const kiln_program *p, int m, int i, kiln_tensor_info *info) {
    return value_info(p, m, i, 0, info);
}

kiln_status kiln_method_output_info(const kiln_program *p, int m, int i, kiln_tensor_info *info) {
    return value_info(p, m, i, 1, info);
}

const char *kiln_program_meta_str(const kiln_program *p, const char *key) {
    const kiln_meta *e = kiln_meta_find(&p->mod, key);
    return e && e->type == KILN_META_STR ? e->s : NULL;
}

kiln_status kiln_program_meta_int(const kiln_program *p, const char *key, int64_t *value) {
    const kiln_meta *e = kiln_meta_find(&p->mod, key);
    if (!e || e->type != KILN_META_INT)
        return kiln_error(KILN_ERR_INVALID_ARG, "no integer metadata '%s'", key);
    *value = e->i;
    return KILN_OK;
}

kiln_status kiln_program_meta_ints(const kiln_program *p, const char *key, const int64_t **values,
                                   int *n) {
    const kiln_meta *e = kiln_meta_find(&p->mod, key);
    if (!e || e->type != KILN_META_INT_ARRAY)
        return kiln_error(KILN_ERR_INVALID_ARG, "no integer-array metadata '%s'", key);
    *values = e->ia;
    *n = (int)e->n;
    return KILN_OK;
}

kiln_status kiln_program_meta_floats(const kiln_program *p, const char *key, const double **values,
                                     int *n) {
    const kiln_meta *e = kiln_meta_find(&p->mod, key);
    if (!e || e->type != KILN_META_FLOAT_ARRAY)
        return kiln_error(KILN_ERR_INVALID_ARG, "no float-array metadata '%s'", key);
    *values = e->fa;
    *n = (int)e->n;
    return KILN_OK;
}

int kiln_program_node_is_fallback(const kiln_program *p, const kiln_node *n) {
    return p->fallback[n->backend];
}

const kiln_backend *kiln_program_node_backend(const kiln_program *p, const kiln_node *n) {
    return p->backends[n->backend];
}

const char *kiln_program_node_unit(const kiln_program *p, const kiln_node *n,
                                   const kiln_tensor *const *in) {
    const kiln_backend *b = p->backends[n->backend];
    return b->unit ? b->unit(p->backend_ctx[n->backend], n, in) : NULL;
}

const kiln_module *kiln_program_module(const kiln_program *p) {
    return &p->mod;
}
int kiln_backend_available(const char *name) {
    return name && kiln_backend_find(name) != NULL;
}

const char *kiln_program_path(const kiln_program *p) {
    return p->path;
}

uint64_t kiln_program_file_bytes(const kiln_program *p) {
    return p->map.size;
}
int kiln_program_section_count(const kiln_program *p) {
    return p->n_sections;
}

int kiln_program_section(const kiln_program *p, int i, const char **name, uint64_t *offset,
                         uint64_t *size, uint32_t *crc) {
    if (i < 0 || i >= p->n_sections) return -1;
    *name = kiln_section_name(p->sections[i].kind);
    *offset = p->sections[i].offset;
    *size = p->sections[i].size;
    *crc = p->sections[i].crc;
    return 0;
}

void kiln_program_backends_used(const kiln_program *p, int method, char *buf, size_t cap) {
    const kiln_module *m = &p->mod;
    size_t len = 0;
    if (cap) buf[0] = 0;
    for (int b = 0; b < m->n_backends; b++) {
        int used = 0;
        for (int k = 0; k < m->n_methods && !used; k++) {
            if (method >= 0 && k != method) continue;
            for (int i = 0; i < m->methods[k].n_nodes && !used; i++)
                used = m->methods[k].nodes[i].backend == b;
        }
        if (used && len + 1 < cap) {
            snprintf(buf + len, cap - len, "%s%s", len ? "+" : "", m->backends[b]);
            len += strlen(buf + len);
        }
    }
}

int kiln_method_input_index(const kiln_program *p, int method, const char *name) {
    for (int i = 0; i < kiln_method_input_count(p, method); i++) {
        kiln_tensor_info t;
        if (!kiln_method_input_info(p, method, i, &t) && !strcmp(t.name, name)) return i;
    }
    return -1;
}
