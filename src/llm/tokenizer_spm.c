/* tokenizer_spm.c: SentencePiece-style BPE over scores. Text is split into
 * UTF-8 characters, then the adjacent pair whose concatenation is the
 * best-scoring piece merges first (ties: the leftmost), until no pair is a
 * piece; a character that is no piece becomes its bytes as <0xNN> tokens.
 * Two flavours: llama2.c's tokenizer.bin (run.c's rules: a " " token before
 * non-empty text, pieces with plain spaces), and GGUF `llama` vocabularies
 * as llama.cpp runs them (spaces written U+2581, a space before the text and
 * after each added token when add_space_prefix is set). */
#include <string.h>

#include "base/heap.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"

/* ---- llama2.c ---------------------------------------------------------------- */

kiln_status kiln_tok_encode_llama2c(const kiln_tokenizer *t, const char *text, size_t len,
                                    int add_bos, kiln_tok_ids *out) {
    /* Worst case every byte is a token, plus BOS and the dummy prefix. */
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
        int sp = kiln_tok_llama2c_lookup(t, " ", 1);
        if (sp >= 0) tok[n++] = sp;
    }
    /* Whole UTF-8 code points (at most 4 bytes) first, bytes as fallback. */
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xC0) == 0x80)
            j++;
        int id = kiln_tok_llama2c_lookup(t, text + i, (uint32_t)(j - i));
        if (id >= 0)
            tok[n++] = id;
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
            int id = kiln_tok_llama2c_lookup(t, buf, la + lb);
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
    for (int i = 0; i < n; i++)
        kiln_tok_ids_push(out, tok[i]);
    kiln_free(tok);
    kiln_free(buf);
    return KILN_OK;
}

/* ---- GGUF llama ------------------------------------------------------------------ */

typedef struct {
    size_t start, len; /* bytes in the escaped text; len 0: merged away */
    int prev, next;
} sym;

typedef struct {
    float score;
    int left, right;
    size_t len; /* bytes of the pair when pushed: stale when it changed */
    int id;
} bigram;

/* Max-heap on score, then the leftmost. */
static int before(const void *ap, const void *bp) {
    const bigram *a = ap, *b = bp;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void try_pair(const kiln_tokenizer *t, const char *s, const sym *sy, int left,
                     kiln_heap *h) {
    if (left < 0 || sy[left].next < 0) return;
    int right = sy[left].next;
    size_t len = sy[left].len + sy[right].len;
    int id = kiln_tok_lookup(t, s + sy[left].start, len);
    if (id < 0) return;
    kiln_heap_push(h, &(bigram){t->scores[id], left, right, len, id});
}

kiln_status kiln_tok_spm_text(const kiln_tokenizer *t, const char *text, size_t len,
                              int after_added, kiln_tok_ids *out) {
    if (!len) return KILN_OK;
    /* Escape: a leading space when asked, every space as U+2581 (3 bytes). */
    int prefix = (t->flags & KILN_TOKF_SPACE_PREFIX) && after_added;
    size_t cap = 3 * (len + 1);
    char *s = kiln_malloc(cap);
    sym *sy = kiln_malloc(sizeof *sy * (len + 1));
    kiln_heap h = kiln_heap_make(sizeof(bigram), before);
    if (!s || !sy) {
        kiln_free(s);
        kiln_free(sy);
        return kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    }
    size_t n = 0;
    for (size_t i = 0; i < len + (size_t)prefix; i++) {
        char c = i < (size_t)prefix ? ' ' : text[i - (size_t)prefix];
        if (c == ' ') {
            memcpy(s + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            s[n++] = c;
        }
    }
    /* One symbol per UTF-8 character (an invalid byte alone). */
    int ns = 0;
    for (size_t i = 0, used; i < n; i += used) {
        kiln_utf8_decode((const uint8_t *)s + i, n - i, &used);
        sy[ns] = (sym){i, used, ns - 1, -1};
        if (ns) sy[ns - 1].next = ns;
        ns++;
    }
    for (int i = 0; i + 1 < ns; i++)
        try_pair(t, s, sy, i, &h);
    while (h.n && !h.failed) {
        bigram b;
        kiln_heap_pop(&h, &b);
        sym *l = &sy[b.left], *r = &sy[b.right];
        if (!l->len || !r->len || l->next != b.right || l->len + r->len != b.len)
            continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sy[r->next].prev = b.left;
        try_pair(t, s, sy, l->prev, &h);
        try_pair(t, s, sy, b.left, &h);
    }
    kiln_status st =
        h.failed ? kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len) : KILN_OK;
    for (int i = 0; !st && i >= 0 && ns; i = sy[i].next) {
        int id = kiln_tok_lookup(t, s + sy[i].start, sy[i].len);
        if (id >= 0) {
            kiln_tok_ids_push(out, id);
            continue;
        }
        for (size_t k = 0; k < sy[i].len; k++) { /* byte fallback */
            int b = t->byte_id[(uint8_t)s[sy[i].start + k]];
            if (b < 0) b = t->unk;
            if (b >= 0) kiln_tok_ids_push(out, b);
        }
    }
    kiln_heap_free(&h);
    kiln_free(s);
    kiln_free(sy);
    return st;
}
