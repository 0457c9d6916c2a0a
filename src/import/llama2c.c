/* llama2c.c: the llama2.c formats. A checkpoint is seven int32 (dim,
 * hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
 * vocab_size means the classifier is stored, not shared), then f32 arrays in
 * a fixed order, each stacked over layers, then the (unused) rope tables,
 * then the classifier when not shared. A tokenizer.bin is an int32
 * max_token_length, then per token {f32 score, int32 length, bytes}. */
#include <stdio.h>
#include <string.h>

#include "import/llama2c.h"
#include "ir/ops.h"
#include "llm/tokenizer.h"

#define HEADER_BYTES 28

typedef struct {
    const char *name; /* GGUF-style name; %d = layer */
    int per_layer;
    int64_t rows, cols; /* [out, in] of one layer's matrix (cols = 0: a vector of rows) */
} part;

kiln_status kiln_llama2c_import(const kiln_file_map *map, const char *path, kiln_llama_config *c,
                                kiln_module *m) {
    const char *file = kiln_basename(path);
    if (map->size < HEADER_BYTES)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': %zu bytes is shorter than the 28-byte llama2.c header", file,
                          map->size);
    int32_t h[7];
    memcpy(h, map->data, sizeof h);
    static const char *fields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                    "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if (h[i] == 0 || (h[i] < 0 && i != 5) || h[i] == INT32_MIN)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': header field %s is %d, expected a positive count", file,
                              fields[i], h[i]);
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "llama2c");
    c->n_embd = h[0];
    c->n_ff = h[1];
    c->n_layer = h[2];
    c->n_head = h[3];
    c->n_head_kv = h[4];
    c->n_vocab = h[5] < 0 ? -h[5] : h[5];
    c->tied_output = h[5] > 0;
    c->n_ctx_train = h[6];
    if (c->n_head > 0 && c->n_embd % c->n_head)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': header field dim %d is not a multiple of n_heads %d", file,
                          c->n_embd, c->n_head);
    c->head_dim = c->n_head > 0 ? c->n_embd / c->n_head : 0;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_mode = KILN_ROPE_ADJACENT;
    char src[600];
    snprintf(src, sizeof src, "'%s' header", file);
    kiln_status st = kiln_llama_check(c, src);
    if (st) return st;

    int64_t dim = c->n_embd, hid = c->n_ff, L = c->n_layer, V = c->n_vocab;
    int64_t qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    const part parts[] = {
        {"token_embd.weight", 0, V, dim},
        {"blk.%d.attn_norm.weight", 1, dim, 0},
        {"blk.%d.attn_q.weight", 1, qd, dim},
        {"blk.%d.attn_k.weight", 1, kvd, dim},
        {"blk.%d.attn_v.weight", 1, kvd, dim},
        {"blk.%d.attn_output.weight", 1, dim, qd},
        {"blk.%d.ffn_norm.weight", 1, dim, 0},
        {"blk.%d.ffn_gate.weight", 1, hid, dim},
        {"blk.%d.ffn_down.weight", 1, dim, hid},
        {"blk.%d.ffn_up.weight", 1, hid, dim},
        {"output_norm.weight", 0, dim, 0},
        {"(rope tables)", 0, (int64_t)c->n_ctx_train, c->head_dim}, /* real + imag halves */
        {"output.weight", 0, V, dim},
    };
    int nparts = (int)(sizeof parts / sizeof *parts) - (c->tied_output ? 1 : 0);
    /* Sizes first, with overflow checks, so a lying header is caught before
     * any pointer is formed. */
    uint64_t off = HEADER_BYTES;
    uint64_t offsets[16];
    for (int i = 0; i < nparts; i++) {
        uint64_t n = (uint64_t)parts[i].rows * (uint64_t)(parts[i].cols ? parts[i].cols : 1), bytes;
        if (!kiln_mul_ok(n, parts[i].per_layer ? (uint64_t)L : 1, &n) ||
            !kiln_mul_ok(n, 4, &bytes) || !kiln_add_ok(off, bytes, &offsets[i]))
            return kiln_error(KILN_ERR_FORMAT, "'%s': header sizes overflow at tensor '%s'", file,
                              parts[i].name);
        offsets[i] = off;
        off += bytes;
        if (off > map->size) {
            char nm[KILN_NAME_MAX];
            snprintf(nm, sizeof nm, parts[i].name, 0);
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': tensor '%s' needs bytes %llu..%llu but the file has %zu bytes "
                              "(truncated, or a header that does not match the weights)",
                              file, nm, (unsigned long long)offsets[i], (unsigned long long)off,
                              map->size);
        }
    }
    if (off != map->size)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': the header describes %llu bytes of weights but the file has %zu "
                          "(%s); the header does not match the weights",
                          file, (unsigned long long)off, map->size,
                          c->tied_output ? "vocab_size > 0: classifier shared"
                                         : "vocab_size < 0: classifier stored");
    for (int i = 0; i < nparts; i++) {
        const part *pt = &parts[i];
        if (pt->name[0] == '(') continue; /* rope tables: recomputed by the rope op */
        int64_t ne[2] = {pt->rows, pt->cols};
        int ndim = pt->cols ? 2 : 1;
        uint64_t one = (uint64_t)pt->rows * (uint64_t)(pt->cols ? pt->cols : 1) * 4;
        for (int l = 0; l < (pt->per_layer ? c->n_layer : 1); l++) {
            char nm[KILN_NAME_MAX];
            snprintf(nm, sizeof nm, pt->name, l);
            if (kiln_module_add_const(m, nm, KILN_F32, ndim, ne,
                                      map->data + offsets[i] + (uint64_t)l * one) < 0)
                return kiln_last_status();
        }
    }
    return KILN_OK;
}

/* ---- tokenizer.bin ------------------------------------------------------- */

/* Counts the records of a tokenizer.bin after its header (vocab_size 0). */
static int count_records(const uint8_t *p, size_t n) {
    size_t pos = 4;
    int count = 0;
    while (pos < n && count < KILN_TOK_MAX_VOCAB) {
        int32_t len;
        if (n - pos < 8) return -1;
        memcpy(&len, p + pos + 4, 4);
        if (len < 0 || (size_t)len > n - pos - 8) return -1;
        pos += 8 + (size_t)len;
        count++;
    }
    return pos == n ? count : -1;
}

kiln_status kiln_tokenizer_load_llama2c(const char *path, int vocab_size, kiln_tokenizer **out) {
    *out = NULL;
    if (vocab_size < 0 || vocab_size > KILN_TOK_MAX_VOCAB)
        return kiln_error(KILN_ERR_INVALID_ARG, "vocabulary size %d out of range", vocab_size);
    kiln_file_map map;
    kiln_status st = kiln_file_map_open(path, &map);
    if (st) return st;
    char what[600];
    snprintf(what, sizeof what, "tokenizer '%s'", kiln_basename(path));
    if (vocab_size == 0) { /* as many records as the file holds */
        vocab_size = count_records(map.data, map.size);
        if (vocab_size < 1) {
            kiln_file_map_close(&map);
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: not a llama2.c tokenizer (its records do not end exactly at the "
                              "end of the file)",
                              what);
        }
    }
    kiln_rbuf r;
    kiln_rbuf_init(&r, map.data, map.size, 0, what);
    int32_t max_len = kiln_rbuf_i32(&r, "max_token_length");
    if (!r.failed && (max_len < 1 || max_len > KILN_TOK_MAX_PIECE))
        kiln_rbuf_fail(&r, "max_token_length is %d (1..%d allowed)", max_len, KILN_TOK_MAX_PIECE);
    kiln_tokenizer *t = NULL;
    if (!r.failed && !(t = kiln_tok_alloc(vocab_size, KILN_TOK_SPM_LLAMA2C)))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (!st && !(st = kiln_rbuf_status(&r))) st = kiln_tok_read_llama2c(t, &r, (uint32_t)max_len);
    if (!st && r.pos != r.len)
        st = kiln_error(KILN_ERR_FORMAT,
                        "%s: %zu bytes after the %d tokens the model's vocabulary has (a tokenizer "
                        "for another model?)",
                        what, r.len - r.pos, vocab_size);
    if (!st) st = kiln_tok_finish_llama2c(t);
    kiln_file_map_close(&map);
    if (st) {
        kiln_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}
