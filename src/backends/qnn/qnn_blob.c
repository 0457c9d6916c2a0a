/* qnn_blob.c: the QNN delegate's blob. QNN's context binary holds the
 * graphs; what the host needs to call them (which tensor is which Kiln
 * value, the tensor ids QNN assigned, static shapes) is Kiln's own table
 * in front of it. Little-endian:
 *   "KQNN" u32 version (1), u32 soc, u32 n_graphs
 *   per graph: str name, i32 method, i32 partition, i32 pos_value,
 *     i32 flag_value, u32 rows, u32 ctx_rows, u32 n_io
 *     per tensor: u32 role, i32 value, u32 id, u32 dtype, u32 rank,
 *       u32 dims[4], str name
 *   u64 binary size, then the binary
 * str = u32 length + bytes. Everything is bounds-checked when read. */
#include <string.h>

#include "backends/qnn/qnn.h"

#define MAGIC "KQNN"
#define VERSION 1

static void put_u32(kiln_wbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    kiln_wbuf_bytes(b, x, 4);
}

static void put_str(kiln_wbuf *b, const char *s) {
    size_t n = strlen(s);
    put_u32(b, (uint32_t)n);
    kiln_wbuf_bytes(b, s, n);
}

kiln_status qnn_blob_write(int soc, const qnn_graph_info *graphs, int n_graphs, const void *binary,
                           uint64_t binary_size, uint8_t **out, uint64_t *out_size) {
    kiln_wbuf b = {0};
    kiln_wbuf_bytes(&b, MAGIC, 4);
    put_u32(&b, VERSION);
    put_u32(&b, (uint32_t)soc);
    put_u32(&b, (uint32_t)n_graphs);
    for (int i = 0; i < n_graphs; i++) {
        const qnn_graph_info *g = &graphs[i];
        put_str(&b, g->name);
        put_u32(&b, (uint32_t)g->method);
        put_u32(&b, (uint32_t)g->part);
        put_u32(&b, (uint32_t)g->pos_value);
        put_u32(&b, (uint32_t)g->flag_value);
        put_u32(&b, g->rows);
        put_u32(&b, g->ctx_rows);
        put_u32(&b, (uint32_t)g->n_io);
        for (int j = 0; j < g->n_io; j++) {
            const qnn_io *x = &g->io[j];
            put_u32(&b, (uint32_t)x->role);
            put_u32(&b, (uint32_t)x->value);
            put_u32(&b, x->id);
            put_u32(&b, x->dtype);
            put_u32(&b, x->rank);
            for (int d = 0; d < QNN_MAX_RANK; d++)
                put_u32(&b, x->dims[d]);
            put_str(&b, x->name);
        }
    }
    put_u32(&b, (uint32_t)binary_size);
    put_u32(&b, (uint32_t)(binary_size >> 32));
    kiln_wbuf_bytes(&b, binary, (size_t)binary_size);
    if (b.failed) {
        kiln_wbuf_free(&b);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    *out = b.data;
    *out_size = b.len;
    return KILN_OK;
}

typedef struct {
    const uint8_t *p;
    uint64_t left;
    int bad;
} reader;

static uint32_t get_u32(reader *r) {
    if (r->left < 4) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
                 (uint32_t)r->p[3] << 24;
    r->p += 4, r->left -= 4;
    return v;
}

static char *get_str(reader *r) {
    uint32_t n = get_u32(r);
    if (r->bad || n > KILN_NAME_MAX + 16 || n > r->left) {
        r->bad = 1;
        return NULL;
    }
    char *s = kiln_malloc(n + 1);
    if (!s) {
        r->bad = 1;
        return NULL;
    }
    memcpy(s, r->p, n);
    s[n] = 0;
    r->p += n, r->left -= n;
    return s;
}

kiln_status qnn_blob_read(const uint8_t *data, uint64_t size, qnn_blob_view *v) {
    memset(v, 0, sizeof *v);
    reader r = {data, size, 0};
    if (size < 16 || memcmp(data, MAGIC, 4))
        return kiln_error(KILN_ERR_FORMAT, "QNN blob: no 'KQNN' magic");
    r.p += 4, r.left -= 4;
    uint32_t version = get_u32(&r);
    if (version != VERSION)
        return kiln_error(KILN_ERR_FORMAT, "QNN blob: version %u, this build reads %d", version,
                          VERSION);
    v->soc = (int)get_u32(&r);
    uint32_t n = get_u32(&r);
    if (n > 4096) return kiln_error(KILN_ERR_FORMAT, "QNN blob: %u graphs", n);
    if (!(v->graphs = kiln_calloc(n ? n : 1, sizeof *v->graphs)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    v->n_graphs = (int)n;
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        qnn_graph_info *g = &v->graphs[i];
        g->name = get_str(&r);
        g->method = (int32_t)get_u32(&r);
        g->part = (int32_t)get_u32(&r);
        g->pos_value = (int32_t)get_u32(&r);
        g->flag_value = (int32_t)get_u32(&r);
        g->rows = get_u32(&r);
        g->ctx_rows = get_u32(&r);
        uint32_t nio = get_u32(&r);
        if (r.bad || nio > 65536 || (uint64_t)nio * 40 > r.left) {
            r.bad = 1;
            break;
        }
        if (!(g->io = kiln_calloc(nio ? nio : 1, sizeof *g->io))) {
            qnn_blob_view_free(v);
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        }
        g->n_io = (int)nio;
        for (uint32_t j = 0; j < nio && !r.bad; j++) {
            qnn_io *x = &g->io[j];
            x->role = (qnn_role)get_u32(&r);
            x->value = (int32_t)get_u32(&r);
            x->id = get_u32(&r);
            x->dtype = get_u32(&r);
            x->rank = get_u32(&r);
            for (int d = 0; d < QNN_MAX_RANK; d++)
                x->dims[d] = get_u32(&r);
            x->name = get_str(&r);
            if ((unsigned)x->role >= QNN_ROLE_COUNT || x->rank < 1 || x->rank > QNN_MAX_RANK)
                r.bad = 1;
        }
    }
    uint64_t bin = get_u32(&r);
    bin |= (uint64_t)get_u32(&r) << 32;
    if (r.bad || bin != r.left) {
        qnn_blob_view_free(v);
        return kiln_error(KILN_ERR_FORMAT, "QNN blob: damaged graph table (at byte %llu of %llu)",
                          (unsigned long long)(size - r.left), (unsigned long long)size);
    }
    v->binary = r.p;
    v->binary_size = bin;
    return KILN_OK;
}

void qnn_blob_view_free(qnn_blob_view *v) {
    for (int i = 0; i < v->n_graphs; i++)
        qnn_graph_info_free(&v->graphs[i]);
    kiln_free(v->graphs);
    memset(v, 0, sizeof *v);
}
