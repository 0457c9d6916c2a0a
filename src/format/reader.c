/* reader.c: parses a mapped program file into a module. It trusts nothing:
 * header, section table and every record are checked against the file size
 * and each other before use, and every failure names the field. The graph
 * rules themselves are checked afterwards by the verifier. */
#include <stdio.h>
#include <string.h>

#include "format/format.h"

#define MAX_NAME KILN_NAME_MAX
#define MAX_STR (64u << 20) /* chat templates and such */

static kiln_status fail(const char *path, const char *fmt, ...) KILN_PRINTF(2, 3);
static kiln_status fail(const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_error(KILN_ERR_FORMAT, "'%s': %s", kiln_basename(path), msg);
}

static int read_shape(kiln_rbuf *r, int *ndim, int64_t *ne, const char *field) {
    uint32_t n = kiln_rbuf_u32(r, field);
    if (r->failed) return -1;
    if (n < 1 || n > KILN_MAX_DIMS) {
        kiln_rbuf_fail(r, "'%s' has %u dims (1..%d allowed)", field, n, KILN_MAX_DIMS);
        return -1;
    }
    *ndim = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t d = kiln_rbuf_u64(r, field);
        if (r->failed) return -1;
        if (d == 0 || d > ((uint64_t)1 << 40)) {
            kiln_rbuf_fail(r, "'%s' dim %u is %llu (1..2^40 allowed)", field, i,
                           (unsigned long long)d);
            return -1;
        }
        ne[i] = (int64_t)d;
    }
    return 0;
}

static int read_dtype(kiln_rbuf *r, kiln_dtype *t, const char *field) {
    uint32_t v = kiln_rbuf_u32(r, field);
    if (r->failed) return -1;
    if (!kiln_dtype_valid(v)) {
        kiln_rbuf_fail(r, "'%s' has unknown dtype %u", field, v);
        return -1;
    }
    *t = (kiln_dtype)v;
    return 0;
}

static kiln_status parse_meta(kiln_rbuf *r, kiln_module *m) {
    uint32_t n = kiln_rbuf_count(r, "meta count", 9);
    if (r->failed) return kiln_rbuf_status(r);
    if (!(m->meta = kiln_calloc(n, sizeof *m->meta)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    m->cap_meta = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        kiln_meta *e = &m->meta[i];
        if (!(e->key = kiln_rbuf_strdup(r, "meta key", MAX_NAME))) return kiln_rbuf_status(r);
        m->n_meta++;
        uint32_t type = kiln_rbuf_u32(r, "meta type");
        e->type = (kiln_meta_type)type;
        switch (type) {
        case KILN_META_INT:
            e->i = (int64_t)kiln_rbuf_u64(r, e->key);
            break;
        case KILN_META_FLOAT:
            e->f = kiln_rbuf_f64(r, e->key);
            break;
        case KILN_META_STR:
            e->s = kiln_rbuf_strdup(r, e->key, MAX_STR);
            break;
        case KILN_META_INT_ARRAY:
        case KILN_META_FLOAT_ARRAY:
        case KILN_META_STR_ARRAY: {
            uint32_t k = kiln_rbuf_count(r, e->key, type == KILN_META_STR_ARRAY ? 4 : 8);
            if (r->failed) break;
            e->n = k;
            if (type == KILN_META_INT_ARRAY) {
                if (!(e->ia = kiln_calloc(k, sizeof *e->ia)))
                    return kiln_error(KILN_ERR_NOMEM, "out of memory");
                for (uint32_t j = 0; j < k; j++)
                    e->ia[j] = (int64_t)kiln_rbuf_u64(r, e->key);
            } else if (type == KILN_META_FLOAT_ARRAY) {
                if (!(e->fa = kiln_calloc(k, sizeof *e->fa)))
                    return kiln_error(KILN_ERR_NOMEM, "out of memory");
                for (uint32_t j = 0; j < k; j++)
                    e->fa[j] = kiln_rbuf_f64(r, e->key);
            } else {
                if (!(e->sa = kiln_calloc(k, sizeof *e->sa)))
                    return kiln_error(KILN_ERR_NOMEM, "out of memory");
                for (uint32_t j = 0; j < k && !r->failed; j++)
                    e->sa[j] = kiln_rbuf_strdup(r, e->key, MAX_STR);
            }
            break;
        }
        default:
            kiln_rbuf_fail(r, "meta key '%s' has unknown type %u", e->key, type);
        }
        if (r->failed) return kiln_rbuf_status(r);
        if (e->type == KILN_META_STR && !e->s) return kiln_rbuf_status(r);
    }
    return kiln_rbuf_status(r);
}

static kiln_status parse_state(kiln_rbuf *r, kiln_module *m) {
    uint32_t n = kiln_rbuf_count(r, "state count", 20);
    if (r->failed) return kiln_rbuf_status(r);
    if (!(m->states = kiln_calloc(n, sizeof *m->states)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    m->cap_states = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        kiln_state *s = &m->states[i];
        if (!(s->name = kiln_rbuf_strdup(r, "state name", MAX_NAME))) return kiln_rbuf_status(r);
        m->n_states++;
        if (read_dtype(r, &s->dtype, s->name) || read_shape(r, &s->ndim, s->ne, s->name))
            return kiln_rbuf_status(r);
        s->nbytes = kiln_shape_bytes(s->dtype, s->ndim, s->ne);
        if (!s->nbytes || s->nbytes > ((uint64_t)1 << 40)) {
            kiln_rbuf_fail(r, "state '%s' has an impossible size", s->name);
            return kiln_rbuf_status(r);
        }
    }
    return kiln_rbuf_status(r);
}

static kiln_status parse_partitions(kiln_rbuf *r, kiln_graph *g);

static kiln_status parse_methods(kiln_rbuf *r, kiln_module *m) {
    uint32_t nb = kiln_rbuf_count(r, "backend count", 4);
    if (r->failed) return kiln_rbuf_status(r);
    if (!(m->backends = kiln_calloc(nb, sizeof *m->backends)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < nb; i++) {
        if (!(m->backends[i] = kiln_rbuf_strdup(r, "backend name", 64))) return kiln_rbuf_status(r);
        m->n_backends++;
    }
    uint32_t nm = kiln_rbuf_count(r, "method count", 40);
    if (r->failed) return kiln_rbuf_status(r);
    if (!(m->methods = kiln_calloc(nm, sizeof *m->methods)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; k < nm; k++) {
        kiln_graph *g = &m->methods[k];
        if (!(g->name = kiln_rbuf_strdup(r, "method name", MAX_NAME))) return kiln_rbuf_status(r);
        m->n_methods++;
        g->max_tokens = (int)kiln_rbuf_u32(r, "max_tokens");
        g->arena_bytes = kiln_rbuf_u64(r, "arena_bytes");
        g->scratch_offset = kiln_rbuf_u64(r, "scratch_offset");
        if (!r->failed && (g->max_tokens < 1 || g->max_tokens > (1 << 20) ||
                           g->arena_bytes > ((uint64_t)1 << 40)))
            kiln_rbuf_fail(r, "method '%s': max_tokens %d or arena %llu bytes out of range",
                           g->name, g->max_tokens, (unsigned long long)g->arena_bytes);
        uint32_t nv = kiln_rbuf_count(r, "value count", 33);
        if (!r->failed && nv > KILN_MAX_GRAPH)
            kiln_rbuf_fail(r, "method '%s' has %u values, at most %d", g->name, nv, KILN_MAX_GRAPH);
        if (r->failed) return kiln_rbuf_status(r);
        if (!(g->values = kiln_calloc(nv, sizeof *g->values)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < nv; i++) {
            kiln_value *v = &g->values[i];
            if (!(v->name = kiln_rbuf_strdup(r, "value name", MAX_NAME)))
                return kiln_rbuf_status(r);
            g->n_values++;
            v->kind = (kiln_value_kind)kiln_rbuf_u32(r, "value kind");
            if (read_dtype(r, &v->dtype, v->name) || read_shape(r, &v->ndim, v->ne, v->name))
                return kiln_rbuf_status(r);
            v->dyn_mask = kiln_rbuf_u32(r, "dyn_mask");
            v->ref = kiln_rbuf_i32(r, "ref");
            v->offset = kiln_rbuf_u64(r, "arena offset");
        }
        uint32_t nn = kiln_rbuf_count(r, "node count",
                                      4 + 4 + 4 + 4 + 4 * KILN_MAX_IATTR + 4 * KILN_MAX_FATTR + 4);
        if (!r->failed && nn > KILN_MAX_GRAPH)
            kiln_rbuf_fail(r, "method '%s' has %u nodes, at most %d", g->name, nn, KILN_MAX_GRAPH);
        if (r->failed) return kiln_rbuf_status(r);
        if (!(g->nodes = kiln_calloc(nn, sizeof *g->nodes)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < nn; i++) {
            kiln_node *n = &g->nodes[i];
            if (!(n->name = kiln_rbuf_strdup(r, "node name", MAX_NAME))) return kiln_rbuf_status(r);
            g->n_nodes++;
            n->op = (int)kiln_rbuf_u32(r, "node op");
            uint32_t n_in = kiln_rbuf_u32(r, "node input count");
            if (!r->failed && n_in > KILN_MAX_INPUTS) {
                kiln_rbuf_fail(r, "node '%s' has %u inputs (at most %d)", n->name, n_in,
                               KILN_MAX_INPUTS);
                return kiln_rbuf_status(r);
            }
            n->n_in = (int)n_in;
            for (uint32_t j = 0; j < n_in; j++)
                n->in[j] = kiln_rbuf_i32(r, "node input");
            n->out = kiln_rbuf_i32(r, "node output");
            for (int j = 0; j < KILN_MAX_IATTR; j++)
                n->iattr[j] = kiln_rbuf_i32(r, "node int attribute");
            for (int j = 0; j < KILN_MAX_FATTR; j++)
                n->fattr[j] = kiln_rbuf_f32(r, "node float attribute");
            n->backend = (int)kiln_rbuf_u32(r, "node backend");
            if (r->failed) return kiln_rbuf_status(r);
        }
        uint32_t ni = kiln_rbuf_count(r, "input count", 4);
        if (r->failed) return kiln_rbuf_status(r);
        if (!(g->inputs = kiln_calloc(ni, sizeof *g->inputs)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        g->n_inputs = (int)ni;
        for (uint32_t i = 0; i < ni; i++)
            g->inputs[i] = kiln_rbuf_i32(r, "input index");
        uint32_t no = kiln_rbuf_count(r, "output count", 4);
        if (r->failed) return kiln_rbuf_status(r);
        if (!(g->outputs = kiln_calloc(no, sizeof *g->outputs)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        g->n_outputs = (int)no;
        for (uint32_t i = 0; i < no; i++)
            g->outputs[i] = kiln_rbuf_i32(r, "output index");
        if (r->failed) return kiln_rbuf_status(r);
        kiln_status st = parse_partitions(r, g);
        if (st) return st;
    }
    return kiln_rbuf_status(r);
}

/* A list of value indices: a count, then each in [0, n_values). */
static kiln_status read_values(kiln_rbuf *r, const kiln_graph *g, const char *field, int32_t **out,
                               int *n) {
    uint32_t c = kiln_rbuf_count(r, field, 4);
    if (r->failed || !c) return kiln_rbuf_status(r);
    if (!(*out = kiln_malloc(sizeof **out * c))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    *n = (int)c;
    for (uint32_t i = 0; i < c && !r->failed; i++) {
        int32_t v = (*out)[i] = kiln_rbuf_i32(r, field);
        if (!r->failed && (v < 0 || v >= g->n_values))
            kiln_rbuf_fail(r, "method '%s': %s %d is not one of its %d values", g->name, field, v,
                           g->n_values);
    }
    return kiln_rbuf_status(r);
}

/* The method's partitions (FORMAT.md 7.4); the verifier checks they cover
 * its nodes and their boundaries. */
static kiln_status parse_partitions(kiln_rbuf *r, kiln_graph *g) {
    uint32_t np = kiln_rbuf_count(r, "partition count", 24);
    if (!r->failed && np > (uint32_t)(g->n_nodes > 0 ? g->n_nodes : 1))
        kiln_rbuf_fail(r, "method '%s' has %u partitions for %d nodes", g->name, np, g->n_nodes);
    if (r->failed) return kiln_rbuf_status(r);
    if (np && !(g->parts = kiln_calloc(np, sizeof *g->parts)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < np && !r->failed; i++) {
        kiln_partition *p = &g->parts[i];
        g->n_parts++;
        p->blob = -1;
        p->backend = (int)kiln_rbuf_u32(r, "partition backend");
        p->first = (int)kiln_rbuf_u32(r, "partition first node");
        p->n_nodes = (int)kiln_rbuf_u32(r, "partition node count");
        kiln_status st = read_values(r, g, "partition input", &p->in, &p->n_in);
        if (!st) st = read_values(r, g, "partition output", &p->out, &p->n_out);
        if (st) return st;
        p->blob = kiln_rbuf_i32(r, "partition blob");
        char *name = kiln_rbuf_strdup(r, "partition graph", MAX_NAME);
        if (name && !name[0])
            kiln_free(name);
        else
            p->graph = name;
    }
    return kiln_rbuf_status(r);
}

/* The blobs section (FORMAT.md 7.6): the table, then the payloads, used in
 * place. Each payload lies after the table, 64-byte aligned, inside the
 * section, and after the one before it. */
static kiln_status parse_blobs(kiln_rbuf *r, kiln_module *m, const uint8_t *base, uint64_t size) {
    uint32_t len = kiln_rbuf_u32(r, "blob table length"), crc = kiln_rbuf_u32(r, "blob table crc");
    if (!r->failed && len > r->len - r->pos)
        kiln_rbuf_fail(r, "blob table length %u exceeds the section", len);
    else if (!r->failed && crc != kiln_crc32c(0, base + 8, len))
        kiln_rbuf_fail(r,
                       "blob table checksum mismatch (stored 0x%08x, computed 0x%08x): the file "
                       "is damaged",
                       crc, kiln_crc32c(0, base + 8, len));
    if (r->failed) return kiln_rbuf_status(r);
    uint32_t n = kiln_rbuf_count(r, "blob count", 32);
    if (!r->failed && n > 64) kiln_rbuf_fail(r, "%u blobs, at most 64", n);
    if (r->failed) return kiln_rbuf_status(r);
    if (n && !(m->blobs = kiln_calloc(n, sizeof *m->blobs)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    uint64_t prev_end = 0;
    for (uint32_t i = 0; i < n && !r->failed; i++) {
        kiln_blob *b = &m->blobs[i];
        m->n_blobs++;
        b->backend = (int)kiln_rbuf_u32(r, "blob backend");
        b->methods_crc = kiln_rbuf_u32(r, "blob methods checksum");
        b->weights_crc = kiln_rbuf_u32(r, "blob weights checksum");
        uint32_t np = kiln_rbuf_u32(r, "blob property count");
        if (!r->failed && np > KILN_MAX_BLOB_PROPS)
            kiln_rbuf_fail(r, "blob %u has %u properties, at most %d", i, np, KILN_MAX_BLOB_PROPS);
        for (uint32_t k = 0; k < np && !r->failed; k++) {
            b->prop_key[k] = kiln_rbuf_strdup(r, "blob property", MAX_NAME);
            b->prop_val[k] = kiln_rbuf_strdup(r, "blob property value", MAX_NAME);
            b->n_props = (int)k + (b->prop_val[k] ? 1 : 0);
            if (!b->prop_val[k] && b->prop_key[k]) {
                kiln_free(b->prop_key[k]);
                b->prop_key[k] = NULL;
            }
        }
        uint64_t off = kiln_rbuf_u64(r, "blob offset");
        b->size = kiln_rbuf_u64(r, "blob size");
        b->crc = kiln_rbuf_u32(r, "blob checksum");
        if (r->failed) break;
        if (off % KILN_WEIGHT_ALIGN || off < prev_end || off > size || b->size > size - off ||
            !b->size)
            kiln_rbuf_fail(r,
                           "blob %u: offset %llu + size %llu is misaligned, empty, overlaps the "
                           "one before or exceeds the section's %llu bytes",
                           i, (unsigned long long)off, (unsigned long long)b->size,
                           (unsigned long long)size);
        else
            b->data = base + off;
        prev_end = off + b->size;
    }
    if (!r->failed && r->pos != (size_t)len + 8)
        kiln_rbuf_fail(r, "the blob table is %zu bytes, its length field says %u", r->pos - 8, len);
    if (!r->failed && n && r->pos > (size_t)(m->blobs[0].data - base))
        kiln_rbuf_fail(r, "the blob table (%zu bytes) runs into blob 0", r->pos);
    if (!r->failed) r->pos = r->len; /* the payloads follow the table */
    return kiln_rbuf_status(r);
}

static kiln_status parse_consts(kiln_rbuf *r, kiln_module *m, const uint8_t *weights,
                                uint64_t weights_size) {
    uint32_t n = kiln_rbuf_count(r, "constant count", 36);
    if (r->failed) return kiln_rbuf_status(r);
    if (!(m->consts = kiln_calloc(n, sizeof *m->consts)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    m->cap_consts = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        kiln_const *c = &m->consts[i];
        if (!(c->name = kiln_rbuf_strdup(r, "constant name", MAX_NAME))) return kiln_rbuf_status(r);
        m->n_consts++;
        if (read_dtype(r, &c->dtype, c->name) || read_shape(r, &c->ndim, c->ne, c->name))
            return kiln_rbuf_status(r);
        c->file_offset = kiln_rbuf_u64(r, "constant offset");
        c->nbytes = kiln_rbuf_u64(r, "constant size");
        if (r->failed) return kiln_rbuf_status(r);
        uint64_t want = kiln_shape_bytes(c->dtype, c->ndim, c->ne);
        if (c->nbytes != want || !want) {
            kiln_rbuf_fail(r, "constant '%s' says %llu bytes, its dtype and shape need %llu",
                           c->name, (unsigned long long)c->nbytes, (unsigned long long)want);
            return kiln_rbuf_status(r);
        }
        if (c->file_offset % KILN_WEIGHT_ALIGN || c->file_offset > weights_size ||
            c->nbytes > weights_size - c->file_offset) {
            kiln_rbuf_fail(r,
                           "constant '%s': offset %llu + size %llu is misaligned or exceeds the "
                           "weights section of %llu bytes",
                           c->name, (unsigned long long)c->file_offset,
                           (unsigned long long)c->nbytes, (unsigned long long)weights_size);
            return kiln_rbuf_status(r);
        }
        c->data = weights + c->file_offset;
    }
    return kiln_rbuf_status(r);
}

kiln_status kiln_program_parse(const uint8_t *data, uint64_t size, const char *path, kiln_module *m,
                               kiln_section *sec, int *n_sections) {
    const char *name = kiln_basename(path);
    memset(m, 0, sizeof *m);
    *n_sections = 0;
    if (size < 12 || memcmp(data, KILN_MAGIC, 8) != 0)
        return fail(path, "not a Kiln program (bad magic at offset 0)");
    uint32_t version, hsize, nsec, flags, crc;
    uint64_t fsize, table;
    memcpy(&version, data + KILN_HDR_VERSION, 4);
    if (version != KILN_FORMAT_VERSION) {
        char writer[KILN_WRITER_LEN + 1] = {0};
        if (size >= KILN_HEADER_SIZE) memcpy(writer, data + KILN_HDR_WRITER, KILN_WRITER_LEN);
        for (int i = 0; writer[i]; i++)
            if (writer[i] < 32 || writer[i] > 126) writer[i] = '?';
        return kiln_error(KILN_ERR_VERSION,
                          "'%s' was written in program format version %u (by '%s'); this runtime "
                          "(kiln %s) reads version %d: recompile it with this kiln",
                          name, version, writer[0] ? writer : "unknown", KILN_VERSION_STRING,
                          KILN_FORMAT_VERSION);
    }
    if (size < KILN_HEADER_SIZE)
        return fail(path, "file of %llu bytes is shorter than the %d-byte header",
                    (unsigned long long)size, KILN_HEADER_SIZE);
    memcpy(&hsize, data + KILN_HDR_HEADER_SIZE, 4);
    memcpy(&fsize, data + KILN_HDR_FILE_SIZE, 8);
    memcpy(&nsec, data + KILN_HDR_N_SECTIONS, 4);
    memcpy(&flags, data + KILN_HDR_FLAGS, 4);
    memcpy(&table, data + KILN_HDR_TABLE_OFFSET, 8);
    memcpy(&crc, data + KILN_HDR_CRC, 4);
    if (kiln_crc32c(0, data, KILN_HDR_CRC) != crc)
        return fail(path,
                    "header checksum mismatch (field header_crc: stored 0x%08x, computed 0x%08x)",
                    crc, kiln_crc32c(0, data, KILN_HDR_CRC));
    if (hsize != KILN_HEADER_SIZE)
        return fail(path, "header field header_size is %u, expected %d", hsize, KILN_HEADER_SIZE);
    if (fsize != size)
        return fail(
            path,
            "header field file_size says %llu bytes, the file has %llu (truncated or padded?)",
            (unsigned long long)fsize, (unsigned long long)size);
    if (flags != 0) return fail(path, "header field flags is 0x%x, expected 0", flags);
    uint32_t reserved;
    memcpy(&reserved, data + KILN_HDR_RESERVED, 4);
    if (reserved != 0) return fail(path, "header field reserved is 0x%x, expected 0", reserved);
    if (nsec == 0 || nsec > KILN_MAX_SECTIONS)
        return fail(path, "header field n_sections is %u (1..%d allowed)", nsec, KILN_MAX_SECTIONS);
    if (table < KILN_HEADER_SIZE || table > size ||
        (uint64_t)nsec * KILN_SECTION_ENTRY_SIZE > size - table)
        return fail(path, "header field table_offset %llu with %u sections lies outside the file",
                    (unsigned long long)table, nsec);

    const kiln_section *by_kind[KILN_SEC_BLOBS + 1] = {0};
    for (uint32_t i = 0; i < nsec; i++) {
        const uint8_t *e = data + table + (uint64_t)i * KILN_SECTION_ENTRY_SIZE;
        kiln_section *s = &sec[i];
        memcpy(&s->kind, e, 4);
        memcpy(&s->align, e + 4, 4);
        memcpy(&s->offset, e + 8, 8);
        memcpy(&s->size, e + 16, 8);
        memcpy(&s->crc, e + 24, 4);
        memcpy(&s->flags, e + 28, 4);
        char field[64];
        snprintf(field, sizeof field, "section %u", i);
        if (s->flags != 0) return fail(path, "%s: flags 0x%x, expected 0", field, s->flags);
        if (s->kind < KILN_SEC_META || s->kind > KILN_SEC_BLOBS)
            return fail(path, "%s has unknown kind %u", field, s->kind);
        if (by_kind[s->kind])
            return fail(path, "%s: a second '%s' section", field, kiln_section_name(s->kind));
        if (s->align == 0 || (s->align & (s->align - 1)) || s->align > 4096 || s->offset % s->align)
            return fail(path, "%s: offset %llu does not meet its alignment %u", field,
                        (unsigned long long)s->offset, s->align);
        if ((s->kind == KILN_SEC_WEIGHTS || s->kind == KILN_SEC_BLOBS) &&
            s->offset % KILN_WEIGHT_ALIGN)
            return fail(path, "%s: %s offset %llu is not %d-byte aligned", field,
                        kiln_section_name(s->kind), (unsigned long long)s->offset,
                        KILN_WEIGHT_ALIGN);
        if (s->offset < table + (uint64_t)nsec * KILN_SECTION_ENTRY_SIZE || s->offset > size ||
            s->size > size - s->offset)
            return fail(path,
                        "%s: offset %llu + size %llu lies outside the file (or inside the header)",
                        field, (unsigned long long)s->offset, (unsigned long long)s->size);
        for (uint32_t j = 0; j < i; j++)
            if (s->offset < sec[j].offset + sec[j].size && sec[j].offset < s->offset + s->size &&
                s->size && sec[j].size)
                return fail(path, "%s overlaps section %u", field, j);
        by_kind[s->kind] = s;
        *n_sections = (int)i + 1;
    }
    for (uint32_t k = KILN_SEC_META; k <= KILN_SEC_BLOBS; k++)
        if (!by_kind[k]) return fail(path, "the '%s' section is missing", kiln_section_name(k));
    for (uint32_t k = KILN_SEC_META; k <= KILN_SEC_BLOBS; k++) {
        /* weights: info --verify; blobs: the table's own checksum here, each
         * payload's when its backend loads it */
        if (k == KILN_SEC_WEIGHTS || k == KILN_SEC_BLOBS) continue;
        const kiln_section *s = by_kind[k];
        uint32_t c = kiln_crc32c(0, data + s->offset, (size_t)s->size);
        if (c != s->crc)
            return fail(path,
                        "section '%s' checksum mismatch (stored 0x%08x, computed 0x%08x): the file "
                        "is damaged",
                        kiln_section_name(k), s->crc, c);
    }

    char what[KILN_NAME_MAX + 64];
    kiln_rbuf r;
    kiln_status st;
#define SECTION(kind, call)                                                                        \
    do {                                                                                           \
        const kiln_section *s_ = by_kind[kind];                                                    \
        snprintf(what, sizeof what, "'%s' section '%s'", name, kiln_section_name(kind));           \
        kiln_rbuf_init(&r, data + s_->offset, (size_t)s_->size, s_->offset, what);                 \
        if ((st = (call))) return st;                                                              \
        if (r.pos != r.len) {                                                                      \
            kiln_rbuf_fail(&r, "%zu bytes after the last record", r.len - r.pos);                  \
            return kiln_rbuf_status(&r);                                                           \
        }                                                                                          \
    } while (0)
    SECTION(KILN_SEC_META, parse_meta(&r, m));
    SECTION(KILN_SEC_STATE, parse_state(&r, m));
    SECTION(KILN_SEC_METHODS, parse_methods(&r, m));
    SECTION(KILN_SEC_CONSTS, parse_consts(&r, m, data + by_kind[KILN_SEC_WEIGHTS]->offset,
                                          by_kind[KILN_SEC_WEIGHTS]->size));
    SECTION(KILN_SEC_BLOBS, parse_blobs(&r, m, data + by_kind[KILN_SEC_BLOBS]->offset,
                                        by_kind[KILN_SEC_BLOBS]->size));
#undef SECTION
    const kiln_section *t = by_kind[KILN_SEC_TOKENIZER];
    if (t->size) {
        if (!(m->tokenizer = kiln_malloc((size_t)t->size)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        memcpy(m->tokenizer, data + t->offset, (size_t)t->size);
        m->tokenizer_len = t->size;
    }
    st = kiln_module_verify(m, 1);
    if (st) return kiln_error_wrap(st, "'%s'", name);
    return KILN_OK;
}
