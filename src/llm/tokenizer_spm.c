/* tokenizer_spm.c: SentencePiece-style BPE over scores. Text is split into
 * UTF-8 characters, then the adjacent pair whose concatenation is the
 * best-scoring piece merges first (ties: the leftmost), until no pair is a
 * piece; a character that is no piece becomes its bytes as <0xNN> tokens.
 * Two flavours: llama2.c's tokenizer.bin (run.c's rules: a " " token before
 * non-empty text, pieces with plain spaces), and GGUF `llama` vocabularies
 * as llama.cpp runs them (spaces written U+2581, a space before the text and
 * after each added token when add_space_prefix is set). Both merge through
 * one queue: a binary heap of candidate pairs, O(n log n) in the text. */
#include <string.h>

#include "base/heap.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"

/* ---- the merge queue (both flavours) ------------------------------------------- */

/* A symbol is a span of one string s that spells its token's piece: GGUF,
 * the escaped text; llama2.c, the pieces of the first tokens one after
 * another (a byte token spells "<0xNN>" there, as run.c concatenates). A
 * merge grows the left symbol over the right one. */
typedef struct {
    size_t start, len; /* bytes in s */
    int prev, next;    /* the neighbours (-1: none); next SYM_GONE: merged away */
    int32_t id;        /* its token; -1: no piece (GGUF: bytes at the end) */
} sym;

/* Merged away. Not told by len 0: llama2.c pieces may be empty. */
#define SYM_GONE (-2)

typedef struct {
    float score;
    int left, right;
    size_t len; /* bytes of the pair when pushed: stale when it changed */
    int32_t id;
} bigram;

/* Max-heap on score, then the leftmost. */
static int before(const void *ap, const void *bp) {
    const bigram *a = ap, *b = bp;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Lowest id whose piece is s[0..n), or -1. */
static int piece_id(const kiln_tokenizer *t, const char *s, size_t n) {
    if (t->type != KILN_TOK_SPM_LLAMA2C) return kiln_tok_lookup(t, s, n);
    return n <= (size_t)t->max_len ? kiln_tok_llama2c_lookup(t, s, (uint32_t)n) : -1;
}

/* Queues the pair that starts at symbol `left` when it spells a piece. */
static void try_pair(const kiln_tokenizer *t, const char *s, const sym *sy, int left,
                     kiln_heap *h) {
    if (left < 0 || sy[left].next < 0) return;
    int right = sy[left].next;
    size_t len = sy[left].len + sy[right].len;
    int id = piece_id(t, s + sy[left].start, len);
    if (id < 0) return;
    /* run.c merges only what beats its starting best score, -1e10. */
    if (t->type == KILN_TOK_SPM_LLAMA2C && !(t->scores[id] > -1e10f)) return;
    kiln_heap_push(h, &(bigram){t->scores[id], left, right, len, id});
}

/* Merges the ns symbols (linked in order from sy[0]) until no adjacent pair
 * spells a piece, the best-scoring pair first, ties to the leftmost (the
 * symbols keep their order, so the lowest index is the leftmost). A queued
 * pair is stale once either side changed: a symbol changes only by taking in
 * its right neighbour, which moves its next, so while left's next is still
 * right, left is as it was, and the length tells whether right took in its
 * own neighbour (an empty piece taken in leaves the pair's bytes, hence its
 * merge, as they were). len: of the text, for the message. */
static kiln_status merge(const kiln_tokenizer *t, const char *s, sym *sy, int ns, size_t len) {
    kiln_heap h = kiln_heap_make(sizeof(bigram), before);
    for (int i = 0; i + 1 < ns; i++)
        try_pair(t, s, sy, i, &h);
    while (h.n && !h.failed) {
        bigram b;
        kiln_heap_pop(&h, &b);
        sym *l = &sy[b.left], *r = &sy[b.right];
        if (l->next != b.right || l->len + r->len != b.len) continue; /* stale */
        l->len += r->len;
        l->id = b.id;
        l->next = r->next;
        if (r->next >= 0) sy[r->next].prev = b.left;
        r->next = SYM_GONE;
        try_pair(t, s, sy, l->prev, &h);
        try_pair(t, s, sy, b.left, &h);
    }
    int failed = h.failed;
    kiln_heap_free(&h);
    return failed ? kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len) : KILN_OK;
}

/* ---- llama2.c ---------------------------------------------------------------- */

/* Appends token id as the next symbol; *bytes: the length of s so far. */
static void add_token(const kiln_tokenizer *t, int32_t id, sym *sy, int *ns, size_t *bytes) {
    sy[*ns] = (sym){*bytes, t->lens[id], *ns - 1, -1, id};
    if (*ns) sy[*ns - 1].next = *ns;
    *bytes += t->lens[id];
    (*ns)++;
}

kiln_status kiln_tok_encode_llama2c(const kiln_tokenizer *t, const char *text, size_t len,
                                    int add_bos, kiln_tok_ids *out) {
    /* Worst case every byte is a token, plus BOS and the dummy prefix. */
    sym *sy = kiln_malloc(sizeof *sy * (len + 2));
    if (!sy) return kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    int ns = 0;
    size_t bytes = 0;
    if (add_bos && t->bos >= 0) add_token(t, t->bos, sy, &ns, &bytes);
    if (len > 0) {
        int sp = kiln_tok_llama2c_lookup(t, " ", 1);
        if (sp >= 0) add_token(t, sp, sy, &ns, &bytes);
    }
    /* Whole UTF-8 code points (at most 4 bytes) first, bytes as fallback. */
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xC0) == 0x80)
            j++;
        int id = kiln_tok_llama2c_lookup(t, text + i, (uint32_t)(j - i));
        if (id >= 0)
            add_token(t, id, sy, &ns, &bytes);
        else
            for (size_t k = i; k < j; k++) {
                int b = t->byte_id[(unsigned char)text[k]];
                add_token(t, b >= 0 ? b : 0, sy, &ns, &bytes); /* no byte piece: <unk> */
            }
        i = j;
    }
    char *s = kiln_malloc(bytes + 1);
    if (!s) {
        kiln_free(sy);
        return kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    }
    for (int i = 0; i < ns; i++)
        memcpy(s + sy[i].start, t->pieces[sy[i].id], sy[i].len);
    kiln_status st = merge(t, s, sy, ns, len);
    for (int i = 0; !st && ns && i >= 0; i = sy[i].next)
        kiln_tok_ids_push(out, sy[i].id);
    kiln_free(s);
    kiln_free(sy);
    return st;
}

/* ---- GGUF llama ------------------------------------------------------------------ */

kiln_status kiln_tok_spm_text(const kiln_tokenizer *t, const char *text, size_t len,
                              int after_added, kiln_tok_ids *out) {
    if (!len) return KILN_OK;
    /* Escape: a leading space when asked, every space as U+2581 (3 bytes). */
    int prefix = (t->flags & KILN_TOKF_SPACE_PREFIX) && after_added;
    size_t cap = 3 * (len + 1);
    char *s = kiln_malloc(cap);
    sym *sy = kiln_malloc(sizeof *sy * (len + 1));
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
        sy[ns] = (sym){i, used, ns - 1, -1, kiln_tok_lookup(t, s + i, used)};
        if (ns) sy[ns - 1].next = ns;
        ns++;
    }
    kiln_status st = merge(t, s, sy, ns, len);
    for (int i = 0; !st && i >= 0 && ns; i = sy[i].next) {
        if (sy[i].id >= 0) {
            kiln_tok_ids_push(out, sy[i].id);
            continue;
        }
        for (size_t k = 0; k < sy[i].len; k++) { /* byte fallback */
            int b = t->byte_id[(uint8_t)s[sy[i].start + k]];
            if (b < 0) b = t->unk;
            if (b >= 0) kiln_tok_ids_push(out, b);
        }
    }
    kiln_free(s);
    kiln_free(sy);
    return st;
}
