/* tokenizer.c: the SentencePiece-style tokenizer of llama2.c models: pieces
 * with scores, BPE that merges the best-scoring adjacent pair first, UTF-8
 * code points looked up whole, bytes as <0xNN> tokens when a
 * code point is not in the vocabulary (found by their <0xNN> text), and a
 * leading-space ("dummy prefix")
 * token before non-empty text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer.h"
#include "runtime/runtime.h"

#define MAX_PIECE 65536

struct kiln_tokenizer {
    int type;
    int n_vocab;
    int bos, eos;
    int max_len;      /* longest piece, bytes */
    char **pieces;    /* NUL-terminated copies */
    uint32_t *lens;
    float *scores;
    int *sorted;      /* ids sorted by piece bytes, for lookup */
    int byte_id[256]; /* id of <0xNN>, or -1 */
    char bytes[256][2];
};

void kiln_tokenizer_free(kiln_tokenizer *t) {
    if (!t) return;
    for (int i = 0; t->pieces && i < t->n_vocab; i++) kiln_free(t->pieces[i]);
    kiln_free(t->pieces);
    kiln_free(t->lens);
    kiln_free(t->scores);
    kiln_free(t->sorted);
    kiln_free(t);
}

int kiln_tokenizer_vocab_size(const kiln_tokenizer *t) { return t->n_vocab; }
int kiln_tokenizer_bos(const kiln_tokenizer *t) { return t->bos; }
int kiln_tokenizer_eos(const kiln_tokenizer *t) { return t->eos; }

static int cmp_bytes(const char *a, uint32_t la, const char *b, uint32_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : (la < lb ? -1 : la > lb);
}

static const kiln_tokenizer *g_sort_tok; /* qsort has no context argument; guarded by g_sort_lock */
static int by_piece(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    int c = cmp_bytes(g_sort_tok->pieces[a], g_sort_tok->lens[a], g_sort_tok->pieces[b], g_sort_tok->lens[b]);
    return c ? c : a - b;
}

#include <pthread.h>
static pthread_mutex_t g_sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* Lowest id whose piece equals s[0..n), or -1. */
static int lookup(const kiln_tokenizer *t, const char *s, uint32_t n) {
    int lo = 0, hi = t->n_vocab - 1, found = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, id = t->sorted[mid];
        int c = cmp_bytes(t->pieces[id], t->lens[id], s, n);
        if (c < 0) lo = mid + 1;
        else {
            if (c == 0) found = id;
            hi = mid - 1;
        }
    }
    return found;
}

static kiln_status finish(kiln_tokenizer *t) {
    if (!(t->sorted = kiln_malloc(sizeof(int) * (size_t)t->n_vocab)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_vocab; i++) t->sorted[i] = i;
    pthread_mutex_lock(&g_sort_lock);
    g_sort_tok = t;
    qsort(t->sorted, (size_t)t->n_vocab, sizeof(int), by_piece);
    pthread_mutex_unlock(&g_sort_lock);
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        t->byte_id[b] = lookup(t, piece, 6);
        t->bytes[b][0] = (char)b;
        t->bytes[b][1] = 0;
    }
    for (int i = 0; i < t->n_vocab; i++)
        if ((int)t->lens[i] > t->max_len) t->max_len = (int)t->lens[i];
    return KILN_OK;
}

static kiln_tokenizer *alloc_tok(int n_vocab) {
    kiln_tokenizer *t = kiln_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n_vocab = n_vocab;
    t->type = KILN_TOK_SPM_LLAMA2C;
    t->bos = 1 < n_vocab ? 1 : -1; /* llama2.c: <unk>=0, <s>=1, </s>=2 */
    t->eos = 2 < n_vocab ? 2 : -1;
    t->pieces = kiln_calloc((size_t)n_vocab, sizeof *t->pieces);
    t->lens = kiln_calloc((size_t)n_vocab, sizeof *t->lens);
    t->scores = kiln_calloc((size_t)n_vocab, sizeof *t->scores);
    if (!t->pieces || !t->lens || !t->scores) {
        kiln_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* Reads n_vocab (score, piece) records from r; shared by both readers. */
static kiln_status read_pieces(kiln_tokenizer *t, kiln_rbuf *r, uint32_t max_len) {
    for (int i = 0; i < t->n_vocab; i++) {
        char field[48];
        snprintf(field, sizeof field, "token %d score", i);
        float score = kiln_rbuf_f32(r, field);
        if (!r->failed && !(score > -1e30f && score < 1e30f))
            kiln_rbuf_fail(r, "token %d has a score that is not a finite number", i);
        snprintf(field, sizeof field, "token %d", i);
        int32_t len = kiln_rbuf_i32(r, field);
        if (!r->failed && (len < 0 || (uint32_t)len > max_len))
            kiln_rbuf_fail(r, "token %d has length %d (0..%u allowed)", i, len, max_len);
        const char *p = kiln_rbuf_bytes(r, field, r->failed ? 0 : (size_t)len);
        if (r->failed) return kiln_rbuf_status(r);
        t->scores[i] = score;
        t->lens[i] = (uint32_t)len;
        if (!(t->pieces[i] = kiln_strndup(p, (size_t)len))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    return KILN_OK;
}

kiln_status kiln_tokenizer_load_llama2c(const char *path, int vocab_size, kiln_tokenizer **out) {
    *out = NULL;
    if (vocab_size < 1 || vocab_size > (1 << 22))
        return kiln_error(KILN_ERR_INVALID_ARG, "vocabulary size %d out of range", vocab_size);
    kiln_file_map map;
    kiln_status st = kiln_file_map_open(path, &map);
    if (st) return st;
    char what[600];
    snprintf(what, sizeof what, "tokenizer '%s'", kiln_basename(path));
    kiln_rbuf r;
    kiln_rbuf_init(&r, map.data, map.size, 0, what);
    int32_t max_len = kiln_rbuf_i32(&r, "max_token_length");
    if (!r.failed && (max_len < 1 || max_len > MAX_PIECE))
        kiln_rbuf_fail(&r, "max_token_length is %d (1..%d allowed)", max_len, MAX_PIECE);
    kiln_tokenizer *t = NULL;
    if (!r.failed && !(t = alloc_tok(vocab_size))) st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (!st && !(st = kiln_rbuf_status(&r))) st = read_pieces(t, &r, (uint32_t)max_len);
    if (!st && r.pos != r.len)
        st = kiln_error(KILN_ERR_FORMAT,
                        "%s: %zu bytes after the %d tokens the model's vocabulary has (a tokenizer for another model?)",
                        what, r.len - r.pos, vocab_size);
    if (!st) st = finish(t);
    kiln_file_map_close(&map);
    if (st) {
        kiln_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

void kiln_tokenizer_serialize(const kiln_tokenizer *t, kiln_wbuf *b) {
    kiln_wbuf_u32(b, (uint32_t)t->type);
    kiln_wbuf_u32(b, (uint32_t)t->n_vocab);
    kiln_wbuf_i32(b, t->bos);
    kiln_wbuf_i32(b, t->eos);
    for (int i = 0; i < t->n_vocab; i++) {
        kiln_wbuf_f32(b, t->scores[i]);
        kiln_wbuf_i32(b, (int32_t)t->lens[i]);
        kiln_wbuf_bytes(b, t->pieces[i], t->lens[i]);
    }
}

kiln_status kiln_tokenizer_deserialize(const uint8_t *data, size_t len, const char *what,
                                       kiln_tokenizer **out) {
    *out = NULL;
    kiln_rbuf r;
    kiln_rbuf_init(&r, data, len, 0, what);
    uint32_t type = kiln_rbuf_u32(&r, "tokenizer type");
    uint32_t n = kiln_rbuf_count(&r, "vocabulary size", 8);
    int32_t bos = kiln_rbuf_i32(&r, "bos id"), eos = kiln_rbuf_i32(&r, "eos id");
    if (!r.failed && type != KILN_TOK_SPM_LLAMA2C)
        kiln_rbuf_fail(&r, "unknown tokenizer type %u", type);
    if (!r.failed && (n < 1 || n > (1u << 22))) kiln_rbuf_fail(&r, "vocabulary size %u out of range", n);
    if (!r.failed && (bos < -1 || bos >= (int64_t)n || eos < -1 || eos >= (int64_t)n))
        kiln_rbuf_fail(&r, "special token ids (bos %d, eos %d) outside the vocabulary of %u", bos, eos, n);
    if (r.failed) return kiln_rbuf_status(&r);
    kiln_tokenizer *t = alloc_tok((int)n);
    if (!t) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    t->bos = bos;
    t->eos = eos;
    kiln_status st = read_pieces(t, &r, MAX_PIECE);
    if (!st && r.pos != r.len) {
        kiln_rbuf_fail(&r, "%zu bytes after the last token", r.len - r.pos);
        st = kiln_rbuf_status(&r);
    }
    if (!st) st = finish(t);
    if (st) {
        kiln_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln_tokenizer_from_program(const kiln_program *p, kiln_tokenizer **out) {
    *out = NULL;
    if (!p->mod.tokenizer_len)
        return kiln_error(KILN_ERR_UNSUPPORTED, "'%s' has no tokenizer (compile it with --tokenizer)",
                          kiln_basename(p->path));
    char what[600];
    snprintf(what, sizeof what, "'%s' section 'tokenizer'", kiln_basename(p->path));
    return kiln_tokenizer_deserialize(p->mod.tokenizer, (size_t)p->mod.tokenizer_len, what, out);
}

/* ---- encoding -------------------------------------------------------------- */

kiln_status kiln_tokenizer_encode(const kiln_tokenizer *t, const char *text, size_t len,
                                  int add_bos, int32_t *ids, int cap, int *n_ids) {
    /* Worst case every byte is a token, plus BOS and the dummy prefix. */
    if (len > (size_t)1 << 28) return kiln_error(KILN_ERR_INVALID_ARG, "text of %zu bytes is too long", len);
    int32_t *tok = kiln_malloc(sizeof(int32_t) * (len + 2));
    char *buf = kiln_malloc((size_t)t->max_len * 2 + 8);
    if (!tok || !buf) {
        kiln_free(tok);
        kiln_free(buf);
        return kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    }
    int n = 0;
    if (add_bos && t->bos >= 0) tok[n++] = t->bos;
    if (len > 0) {
        int sp = lookup(t, " ", 1);
        if (sp >= 0) tok[n++] = sp;
    }
    /* Whole UTF-8 code points (at most 4 bytes) first, bytes as fallback. */
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xC0) == 0x80) j++;
        int id = lookup(t, text + i, (uint32_t)(j - i));
        if (id >= 0) tok[n++] = id;
        else
            for (size_t k = i; k < j; k++) {
                int b = t->byte_id[(unsigned char)text[k]];
                tok[n++] = b >= 0 ? b : 0; /* no byte piece: <unk> */
            }
        i = j;
    }
    /* Merge the best-scoring adjacent pair until none is in the vocabulary;
     * ties go to the leftmost pair. */
    for (;;) {
        float best = -1e10f;
        int best_id = -1, best_i = -1;
        for (int i = 0; i + 1 < n; i++) {
            uint32_t la = t->lens[tok[i]], lb = t->lens[tok[i + 1]];
            if ((int)(la + lb) > t->max_len) continue;
            memcpy(buf, t->pieces[tok[i]], la);
            memcpy(buf + la, t->pieces[tok[i + 1]], lb);
            int id = lookup(t, buf, la + lb);
            if (id >= 0 && t->scores[id] > best) {
                best = t->scores[id];
                best_id = id;
                best_i = i;
            }
        }
        if (best_i < 0) break;
        tok[best_i] = best_id;
        memmove(tok + best_i + 1, tok + best_i + 2, sizeof(int32_t) * (size_t)(n - best_i - 2));
        n--;
    }
    *n_ids = n;
    kiln_status st = KILN_OK;
    if (n > cap) st = kiln_error(KILN_ERR_INVALID_ARG, "text encodes to %d tokens, more than the %d given room", n, cap);
    else memcpy(ids, tok, sizeof(int32_t) * (size_t)n);
    kiln_free(tok);
    kiln_free(buf);
    return st;
}

const char *kiln_tokenizer_decode(const kiln_tokenizer *t, int prev, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    const char *p = t->pieces[id];
    size_t n = t->lens[id];
    if (prev == t->bos && t->bos >= 0 && n && p[0] == ' ') {
        p++;
        n--;
    }
    unsigned b;
    if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' &&
        sscanf(p + 3, "%2X", &b) == 1) {
        *len = 1;
        return t->bytes[b & 0xff];
    }
    *len = n;
    return p;
}
