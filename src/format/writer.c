/* writer.c: serializes a module into a program file: header, section table,
 * then the sections, weights last and 64-byte aligned so the runtime maps
 * them in place. Every section carries a CRC-32C. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "format/format.h"

const char *kiln_section_name(uint32_t kind) {
    switch (kind) {
    case KILN_SEC_META:
        return "meta";
    case KILN_SEC_TOKENIZER:
        return "tokenizer";
    case KILN_SEC_STATE:
        return "state";
    case KILN_SEC_METHODS:
        return "methods";
    case KILN_SEC_CONSTS:
        return "consts";
    case KILN_SEC_BLOBS:
        return "blobs";
    case KILN_SEC_WEIGHTS:
        return "weights";
    }
    return "unknown";
}

static void put_shape(kiln_wbuf *b, int ndim, const int64_t *ne) {
    kiln_wbuf_u32(b, (uint32_t)ndim);
    for (int i = 0; i < ndim; i++)
        kiln_wbuf_u64(b, (uint64_t)ne[i]);
}

static void write_meta(const kiln_module *m, kiln_wbuf *b) {
    kiln_wbuf_u32(b, (uint32_t)m->n_meta);
    for (int i = 0; i < m->n_meta; i++) {
        const kiln_meta *e = &m->meta[i];
        kiln_wbuf_str(b, e->key);
        kiln_wbuf_u32(b, (uint32_t)e->type);
        switch (e->type) {
        case KILN_META_INT:
            kiln_wbuf_u64(b, (uint64_t)e->i);
            break;
        case KILN_META_FLOAT:
            kiln_wbuf_f64(b, e->f);
            break;
        case KILN_META_STR:
            kiln_wbuf_str(b, e->s);
            break;
        case KILN_META_INT_ARRAY:
            kiln_wbuf_u32(b, e->n);
            for (uint32_t j = 0; j < e->n; j++)
                kiln_wbuf_u64(b, (uint64_t)e->ia[j]);
            break;
        case KILN_META_FLOAT_ARRAY:
            kiln_wbuf_u32(b, e->n);
            for (uint32_t j = 0; j < e->n; j++)
                kiln_wbuf_f64(b, e->fa[j]);
            break;
        case KILN_META_STR_ARRAY:
            kiln_wbuf_u32(b, e->n);
            for (uint32_t j = 0; j < e->n; j++)
                kiln_wbuf_str(b, e->sa[j]);
            break;
        }
    }
}

static void write_state(const kiln_module *m, kiln_wbuf *b) {
    kiln_wbuf_u32(b, (uint32_t)m->n_states);
    for (int i = 0; i < m->n_states; i++) {
        kiln_wbuf_str(b, m->states[i].name);
        kiln_wbuf_u32(b, (uint32_t)m->states[i].dtype);
        put_shape(b, m->states[i].ndim, m->states[i].ne);
    }
}

static void write_methods(const kiln_module *m, kiln_wbuf *b) {
    kiln_wbuf_u32(b, (uint32_t)m->n_backends);
    for (int i = 0; i < m->n_backends; i++)
        kiln_wbuf_str(b, m->backends[i]);
    kiln_wbuf_u32(b, (uint32_t)m->n_methods);
    for (int k = 0; k < m->n_methods; k++) {
        const kiln_graph *g = &m->methods[k];
        kiln_wbuf_str(b, g->name);
        kiln_wbuf_u32(b, (uint32_t)g->max_tokens);
        kiln_wbuf_u64(b, g->arena_bytes);
        kiln_wbuf_u64(b, g->scratch_offset);
        kiln_wbuf_u32(b, (uint32_t)g->n_values);
        for (int i = 0; i < g->n_values; i++) {
            const kiln_value *v = &g->values[i];
            kiln_wbuf_str(b, v->name);
            kiln_wbuf_u32(b, (uint32_t)v->kind);
            kiln_wbuf_u32(b, (uint32_t)v->dtype);
            put_shape(b, v->ndim, v->ne);
            kiln_wbuf_u32(b, v->dyn_mask);
            kiln_wbuf_i32(b, v->ref);
            kiln_wbuf_u64(b, v->offset);
        }
        kiln_wbuf_u32(b, (uint32_t)g->n_nodes);
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            kiln_wbuf_str(b, n->name);
            kiln_wbuf_u32(b, (uint32_t)n->op);
            kiln_wbuf_u32(b, (uint32_t)n->n_in);
            for (int j = 0; j < n->n_in; j++)
                kiln_wbuf_i32(b, n->in[j]);
            kiln_wbuf_i32(b, n->out);
            for (int j = 0; j < KILN_MAX_IATTR; j++)
                kiln_wbuf_i32(b, n->iattr[j]);
            for (int j = 0; j < KILN_MAX_FATTR; j++)
                kiln_wbuf_f32(b, n->fattr[j]);
            kiln_wbuf_u32(b, (uint32_t)n->backend);
        }
        kiln_wbuf_u32(b, (uint32_t)g->n_inputs);
        for (int i = 0; i < g->n_inputs; i++)
            kiln_wbuf_i32(b, g->inputs[i]);
        kiln_wbuf_u32(b, (uint32_t)g->n_outputs);
        for (int i = 0; i < g->n_outputs; i++)
            kiln_wbuf_i32(b, g->outputs[i]);
        kiln_wbuf_u32(b, (uint32_t)g->n_parts);
        for (int i = 0; i < g->n_parts; i++) {
            const kiln_partition *p = &g->parts[i];
            kiln_wbuf_u32(b, (uint32_t)p->backend);
            kiln_wbuf_u32(b, (uint32_t)p->first);
            kiln_wbuf_u32(b, (uint32_t)p->n_nodes);
            kiln_wbuf_u32(b, (uint32_t)p->n_in);
            for (int j = 0; j < p->n_in; j++)
                kiln_wbuf_i32(b, p->in[j]);
            kiln_wbuf_u32(b, (uint32_t)p->n_out);
            for (int j = 0; j < p->n_out; j++)
                kiln_wbuf_i32(b, p->out[j]);
            kiln_wbuf_i32(b, p->blob);
            kiln_wbuf_str(b, p->graph ? p->graph : "");
        }
    }
}

/* The blob table (FORMAT.md 7.6), each payload's offset from the section's
 * start 64-byte aligned after it, behind the table's length and CRC-32C; returns the
 * section's size. The program's methods and weights checksums are recorded
 * with each blob, and the payload's own checksum. */
#define N_SECTIONS 7

static uint64_t write_blob_table(const kiln_module *m, kiln_wbuf *b, uint32_t methods_crc,
                                 uint32_t weights_crc) {
    uint64_t table = 0, end = 0;
    for (int pass = 0; pass < 2; pass++) { /* the first pass measures the table */
        uint64_t off = kiln_align_up(table, KILN_WEIGHT_ALIGN);
        b->len = 0;
        kiln_wbuf_u32(b, 0); /* the table's length and checksum, filled in below */
        kiln_wbuf_u32(b, 0);
        kiln_wbuf_u32(b, (uint32_t)m->n_blobs);
        for (int i = 0; i < m->n_blobs; i++) {
            const kiln_blob *bl = &m->blobs[i];
            kiln_wbuf_u32(b, (uint32_t)bl->backend);
            kiln_wbuf_u32(b, methods_crc);
            kiln_wbuf_u32(b, weights_crc);
            kiln_wbuf_u32(b, (uint32_t)bl->n_props);
            for (int k = 0; k < bl->n_props; k++) {
                kiln_wbuf_str(b, bl->prop_key[k]);
                kiln_wbuf_str(b, bl->prop_val[k]);
            }
            kiln_wbuf_u64(b, off);
            kiln_wbuf_u64(b, bl->size);
            kiln_wbuf_u32(b, kiln_crc32c(0, bl->data, (size_t)bl->size));
            end = off + bl->size;
            off = kiln_align_up(end, KILN_WEIGHT_ALIGN);
        }
        table = b->len;
    }
    if (!b->failed) {
        uint32_t len = (uint32_t)(b->len - 8), crc = kiln_crc32c(0, b->data + 8, len);
        memcpy(b->data, &len, 4);
        memcpy(b->data + 4, &crc, 4);
    }
    return m->n_blobs ? end : table;
}

/* The constant table; assigns each constant its offset in the weights
 * section (64-byte aligned) and returns the section's size. */
static uint64_t write_consts(const kiln_module *m, kiln_wbuf *b, uint64_t *offsets) {
    uint64_t off = 0;
    kiln_wbuf_u32(b, (uint32_t)m->n_consts);
    for (int i = 0; i < m->n_consts; i++) {
        const kiln_const *c = &m->consts[i];
        off = kiln_align_up(off, KILN_WEIGHT_ALIGN);
        offsets[i] = off;
        kiln_wbuf_str(b, c->name);
        kiln_wbuf_u32(b, (uint32_t)c->dtype);
        put_shape(b, c->ndim, c->ne);
        kiln_wbuf_u64(b, off);
        kiln_wbuf_u64(b, c->nbytes);
        off += c->nbytes;
    }
    return off;
}

/* Where blob i's payload starts and ends in the blobs section, as
 * write_blob_table laid them out (the table first, each payload 64-byte
 * aligned after it). */
static uint64_t blob_start(const kiln_module *m, const kiln_wbuf *table, int i) {
    uint64_t off = kiln_align_up(table->len, KILN_WEIGHT_ALIGN);
    for (int k = 0; k < i; k++)
        off = kiln_align_up(off + m->blobs[k].size, KILN_WEIGHT_ALIGN);
    return off;
}

static uint64_t blob_end(const kiln_module *m, const kiln_wbuf *table, int i) {
    return blob_start(m, table, i) + m->blobs[i].size;
}

typedef struct {
    FILE *f;
    const char *path;
    uint64_t pos;
} out_file;

static kiln_status out_write(out_file *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) != n)
        return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", o->path, strerror(errno));
    o->pos += n;
    return KILN_OK;
}

static kiln_status out_pad(out_file *o, uint64_t align) {
    static const uint8_t zeros[KILN_WEIGHT_ALIGN];
    uint64_t pad = kiln_align_up(o->pos, align) - o->pos;
    return out_write(o, zeros, (size_t)pad);
}

kiln_status kiln_program_write_to(const kiln_module *m, FILE *f, const char *path,
                                  int (*progress)(void *, const char *, uint64_t, uint64_t),
                                  void *user) {
    kiln_status st = KILN_OK;
    kiln_wbuf bufs[5], blob_tab = {0};
    memset(bufs, 0, sizeof bufs);
    uint64_t *offsets = kiln_calloc((size_t)m->n_consts + 1, sizeof *offsets);
    if (!offsets) return kiln_error(KILN_ERR_NOMEM, "out of memory writing '%s'", path);

    static const uint32_t kinds[5] = {KILN_SEC_META, KILN_SEC_TOKENIZER, KILN_SEC_STATE,
                                      KILN_SEC_METHODS, KILN_SEC_CONSTS};
    write_meta(m, &bufs[0]);
    kiln_wbuf_bytes(&bufs[1], m->tokenizer, (size_t)m->tokenizer_len);
    write_state(m, &bufs[2]);
    write_methods(m, &bufs[3]);
    uint64_t weights_size = write_consts(m, &bufs[4], offsets);
    for (int i = 0; i < 5; i++)
        if (bufs[i].failed) {
            st = kiln_error(KILN_ERR_NOMEM, "out of memory writing '%s'", path);
            goto done;
        }

    /* Layout: header, table, the five small sections (8-aligned), weights,
     * blobs (both 64-aligned). */
    kiln_section sec[N_SECTIONS];
    uint64_t pos = KILN_HEADER_SIZE + N_SECTIONS * KILN_SECTION_ENTRY_SIZE;
    for (int i = 0; i < 5; i++) {
        pos = kiln_align_up(pos, 8);
        sec[i] = (kiln_section){
            kinds[i], 8, pos, bufs[i].len, kiln_crc32c(0, bufs[i].data, bufs[i].len), 0};
        pos += bufs[i].len;
    }
    pos = kiln_align_up(pos, KILN_WEIGHT_ALIGN);
    uint32_t wcrc = 0;
    for (int i = 0; i < m->n_consts; i++) { /* CRC over the weights section, padding included */
        static const uint8_t zeros[KILN_WEIGHT_ALIGN];
        uint64_t start = i ? offsets[i - 1] + m->consts[i - 1].nbytes : 0;
        wcrc = kiln_crc32c(wcrc, zeros, (size_t)(offsets[i] - start));
        wcrc = kiln_crc32c(wcrc, m->consts[i].data, (size_t)m->consts[i].nbytes);
    }
    sec[5] = (kiln_section){KILN_SEC_WEIGHTS, KILN_WEIGHT_ALIGN, pos, weights_size, wcrc, 0};
    pos = kiln_align_up(pos + weights_size, KILN_WEIGHT_ALIGN);
    uint64_t blobs_size = write_blob_table(m, &blob_tab, sec[3].crc, wcrc);
    if (blob_tab.failed) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory writing '%s'", path);
        goto done;
    }
    uint32_t bcrc = kiln_crc32c(0, blob_tab.data, blob_tab.len);
    for (int i = 0; i < m->n_blobs; i++) { /* padding included, as written */
        static const uint8_t zeros[KILN_WEIGHT_ALIGN];
        uint64_t start = i ? blob_end(m, &blob_tab, i - 1) : blob_tab.len;
        bcrc = kiln_crc32c(bcrc, zeros, (size_t)(blob_start(m, &blob_tab, i) - start));
        bcrc = kiln_crc32c(bcrc, m->blobs[i].data, (size_t)m->blobs[i].size);
    }
    sec[6] = (kiln_section){KILN_SEC_BLOBS, KILN_WEIGHT_ALIGN, pos, blobs_size, bcrc, 0};
    uint64_t file_size = pos + blobs_size;

    uint8_t hdr[KILN_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    memcpy(hdr + KILN_HDR_MAGIC, KILN_MAGIC, 8);
    uint32_t u32 = KILN_FORMAT_VERSION;
    memcpy(hdr + KILN_HDR_VERSION, &u32, 4);
    u32 = KILN_HEADER_SIZE;
    memcpy(hdr + KILN_HDR_HEADER_SIZE, &u32, 4);
    memcpy(hdr + KILN_HDR_FILE_SIZE, &file_size, 8);
    u32 = N_SECTIONS;
    memcpy(hdr + KILN_HDR_N_SECTIONS, &u32, 4);
    uint64_t table = KILN_HEADER_SIZE;
    memcpy(hdr + KILN_HDR_TABLE_OFFSET, &table, 8);
    snprintf((char *)hdr + KILN_HDR_WRITER, KILN_WRITER_LEN, "kiln %s", KILN_VERSION_STRING);
    u32 = kiln_crc32c(0, hdr, KILN_HDR_CRC);
    memcpy(hdr + KILN_HDR_CRC, &u32, 4);

    kiln_wbuf tab = {0};
    for (int i = 0; i < N_SECTIONS; i++) {
        kiln_wbuf_u32(&tab, sec[i].kind);
        kiln_wbuf_u32(&tab, sec[i].align);
        kiln_wbuf_u64(&tab, sec[i].offset);
        kiln_wbuf_u64(&tab, sec[i].size);
        kiln_wbuf_u32(&tab, sec[i].crc);
        kiln_wbuf_u32(&tab, sec[i].flags);
    }
    if (tab.failed) {
        kiln_wbuf_free(&tab);
        st = kiln_error(KILN_ERR_NOMEM, "out of memory writing '%s'", path);
        goto done;
    }

    out_file o = {f, path, 0};
    st = out_write(&o, hdr, sizeof hdr);
    if (!st) st = out_write(&o, tab.data, tab.len);
    kiln_wbuf_free(&tab);
    for (int i = 0; i < 5 && !st; i++) {
        st = out_pad(&o, 8);
        if (!st) st = out_write(&o, bufs[i].data, bufs[i].len);
    }
    if (!st) st = out_pad(&o, KILN_WEIGHT_ALIGN);
    uint64_t done_bytes = 0;
    for (int i = 0; i < m->n_consts && !st; i++) {
        st = out_pad(&o, KILN_WEIGHT_ALIGN);
        /* Write in 8 MiB pieces so progress moves and cancel is prompt. */
        const uint8_t *p = m->consts[i].data;
        for (uint64_t left = m->consts[i].nbytes; left && !st;) {
            size_t n = left > (8u << 20) ? (8u << 20) : (size_t)left;
            st = out_write(&o, p, n);
            p += n;
            left -= n;
            done_bytes += n;
            if (!st && progress && progress(user, "weights", done_bytes, weights_size))
                st = kiln_error(KILN_ERR_CANCELLED, "cancelled while writing '%s'", path);
        }
    }
    if (!st) st = out_pad(&o, KILN_WEIGHT_ALIGN);
    if (!st) st = out_write(&o, blob_tab.data, blob_tab.len);
    for (int i = 0; i < m->n_blobs && !st; i++) {
        st = out_pad(&o, KILN_WEIGHT_ALIGN);
        if (!st) st = out_write(&o, m->blobs[i].data, (size_t)m->blobs[i].size);
    }
    if (!st && o.pos != file_size)
        st = kiln_error(KILN_ERR_IO, "wrote %llu bytes to '%s', planned %llu",
                        (unsigned long long)o.pos, path, (unsigned long long)file_size);
done:
    for (int i = 0; i < 5; i++)
        kiln_wbuf_free(&bufs[i]);
    kiln_wbuf_free(&blob_tab);
    kiln_free(offsets);
    return st;
}

kiln_status kiln_program_write(const kiln_module *m, const char *path,
                               int (*progress)(void *, const char *, uint64_t, uint64_t),
                               void *user) {
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) return st;
    st = kiln_program_write_to(m, out.f, path, progress, user);
    if (st) {
        kiln_outfile_discard(&out);
        return st;
    }
    return kiln_outfile_commit(&out);
}
