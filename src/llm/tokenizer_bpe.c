/* tokenizer_bpe.c: encoding with a KILN_TOK_TABLES tokenizer, in the order
 * Hugging Face `tokenizers` applies its steps:
 *   1. added tokens are found in the raw text (leftmost, then longest) and
 *      cut out, each its own id;
 *   2. each run of text between them is NFC-normalized when the tokenizer
 *      asks, then
 *   3. byte-level BPE: split by the pre-tokenizer regexes, and each piece's
 *      bytes merged pair by pair, the lowest-ranked merge first (ties: the
 *      leftmost); or SentencePiece BPE (tokenizer_spm.c).
 * Also GPT-2's byte <-> character table. */
#include <string.h>

#include "base/heap.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"

/* ---- GPT-2's byte <-> character table ------------------------------------------ */

/* Printable Latin-1 bytes stand for themselves; the other 68 bytes take the
 * code points 256, 257, ... in byte order. */
static int byte_prints(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t kiln_tok_byte_char(uint8_t b) {
    if (byte_prints(b)) return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        k += !byte_prints(c);
    return 256 + k;
}

/* The byte code point cp stands for, or -1. */
static int char_byte(uint32_t cp) {
    if (cp < 256) return byte_prints(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    for (unsigned c = 0; c < 256; c++)
        if (!byte_prints(c) && k-- == 0) return (int)c;
    return -1;
}

size_t kiln_tok_byte_decode(const char *s, size_t len, char *out) {
    size_t w = 0;
    for (size_t i = 0, used; i < len; i += used) {
        uint32_t cp = kiln_utf8_decode((const uint8_t *)s + i, len - i, &used);
        int b = cp < KILN_UC_RAW ? char_byte(cp) : -1;
        if (b < 0) { /* not byte-level text: the string as it is */
            memcpy(out, s, len);
            return len;
        }
        out[w++] = (char)b;
    }
    return w;
}

/* ---- byte-level BPE of one piece ------------------------------------------------- */

typedef struct {
    int32_t id;
    int prev, next;
    int alive;
} bsym;

typedef struct {
    int32_t rank, pos, result;
} bmerge;

static int bm_before(const void *xp, const void *yp) {
    const bmerge *x = xp, *y = yp;
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

/* The rank of merging (a, b), or -1. */
static int merge_rank(const kiln_tokenizer *t, int32_t a, int32_t b) {
    if (!t->mvals) return -1;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t h = kiln_tok_hash_pair(key) & t->mmap_mask;; h = (h + 1) & t->mmap_mask) {
        if (t->mvals[h] < 0) return -1;
        if (t->mkeys[h] == key) return t->mvals[h];
    }
}

typedef struct {
    bsym *sy;
    size_t cap;
    kiln_heap h;
} bpe_work;

static void push_pair(const kiln_tokenizer *t, bpe_work *w, int pos) {
    if (pos < 0 || w->sy[pos].next < 0) return;
    int r = merge_rank(t, w->sy[pos].id, w->sy[w->sy[pos].next].id);
    if (r >= 0) kiln_heap_push(&w->h, &(bmerge){r, pos, t->merges[3 * r + 2]});
}

static kiln_status bpe_piece(const kiln_tokenizer *t, const uint8_t *s, size_t n, bpe_work *w,
                             kiln_tok_ids *out) {
    if (!n) return KILN_OK;
    if (t->flags & KILN_TOKF_IGNORE_MERGES) {
        int id = kiln_tok_lookup(t, (const char *)s, n);
        if (id >= 0 && t->kinds[id] == KILN_TOKK_NORMAL) {
            kiln_tok_ids_push(out, id);
            return KILN_OK;
        }
    }
    if (n > w->cap) {
        bsym *sy = kiln_realloc(w->sy, sizeof *sy * n);
        if (!sy)
            return kiln_error(KILN_ERR_NOMEM, "out of memory encoding a piece of %zu bytes", n);
        w->sy = sy;
        w->cap = n;
    }
    /* One symbol per byte (a byte without a token: <unk>, or dropped). */
    int ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0) id = t->unk;
        if (id < 0) continue;
        w->sy[ns] = (bsym){id, ns - 1, -1, 1};
        if (ns) w->sy[ns - 1].next = ns;
        ns++;
    }
    w->h.n = 0;
    for (int i = 0; i + 1 < ns; i++)
        push_pair(t, w, i);
    while (w->h.n && !w->h.failed) {
        bmerge m;
        kiln_heap_pop(&w->h, &m);
        bsym *l = &w->sy[m.pos];
        if (!l->alive || l->next < 0) continue;
        bsym *r = &w->sy[l->next];
        /* Stale when either side changed since the merge was queued. */
        if (merge_rank(t, l->id, r->id) != m.rank) continue;
        l->id = m.result;
        r->alive = 0;
        l->next = r->next;
        if (r->next >= 0) w->sy[r->next].prev = m.pos;
        push_pair(t, w, l->prev);
        push_pair(t, w, m.pos);
    }
    if (w->h.failed)
        return kiln_error(KILN_ERR_NOMEM, "out of memory encoding a piece of %zu bytes", n);
    for (int i = 0; ns && i >= 0; i = w->sy[i].next)
        kiln_tok_ids_push(out, w->sy[i].id);
    return KILN_OK;
}

/* ---- a run of text: normalize, pre-tokenize, BPE ----------------------------------- */

typedef struct {
    size_t a, b; /* code point indices */
} span;

typedef struct {
    span *s;
    size_t n, cap;
} spans;

static int spans_push(spans *v, size_t a, size_t b) {
    if (a >= b) return 0; /* empty pieces vanish, as in Hugging Face's splits */
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        span *s = kiln_realloc(v->s, sizeof *s * cap);
        if (!s) return -1;
        v->s = s;
        v->cap = cap;
    }
    v->s[v->n++] = (span){a, b};
    return 0;
}

/* Splits every piece of `in` by re into its matches and the gaps between
 * them (Hugging Face's Split with behavior "Isolated"). */
static kiln_status split_by(const kiln_regex *re, const uint32_t *cp, const spans *in, spans *out) {
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        size_t a = in->s[k].a, n = in->s[k].b - a, pos = 0, last = 0;
        while (pos <= n) {
            size_t mb, me;
            int r = kiln_regex_find(re, cp + a, n, pos, &mb, &me);
            if (r < 0) return (kiln_status)r;
            if (!r) break;
            if (spans_push(out, a + last, a + mb) || spans_push(out, a + mb, a + me))
                return kiln_error(KILN_ERR_NOMEM, "out of memory");
            last = me;
            pos = me > mb ? me : mb + 1; /* an empty match moves on by one */
        }
        if (spans_push(out, a + last, a + n)) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    return KILN_OK;
}

kiln_status kiln_tok_bpe_text(const kiln_tokenizer *t, const char *text, size_t len,
                              kiln_tok_ids *out) {
    if (!len) return KILN_OK;
    kiln_status st = KILN_OK;
    uint32_t *cp = kiln_malloc(sizeof(uint32_t) * len), *norm = NULL;
    size_t *off = NULL;
    uint8_t *bytes = NULL;
    spans a = {0}, b = {0};
    bpe_work w = {NULL, 0, kiln_heap_make(sizeof(bmerge), bm_before)};
    if (!cp) return kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    size_t n = 0;
    for (size_t i = 0, used; i < len; i += used)
        cp[n++] = kiln_utf8_decode((const uint8_t *)text + i, len - i, &used);
    if ((t->flags & KILN_TOKF_NFC) && !kiln_uc_nfc_quick(cp, n)) {
        if (!(norm = kiln_malloc(sizeof(uint32_t) * 4 * n))) goto nomem;
        n = kiln_uc_nfc(cp, n, norm);
        kiln_free(cp);
        cp = norm;
        norm = NULL;
    }
    /* The (normalized) bytes, and where each code point starts in them. */
    if (!(off = kiln_malloc(sizeof(size_t) * (n + 1))) || !(bytes = kiln_malloc(4 * n + 1)))
        goto nomem;
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        off[i] = nb;
        nb += kiln_utf8_encode(cp[i], bytes + nb);
    }
    off[n] = nb;
    /* Pre-tokenize. */
    if (spans_push(&a, 0, n)) goto nomem;
    for (int k = 0; k < t->n_split; k++) {
        if ((st = split_by(t->split[k], cp, &a, &b))) goto done;
        spans tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t k = 0; k < a.n && !st; k++)
        st = bpe_piece(t, bytes + off[a.s[k].a], off[a.s[k].b] - off[a.s[k].a], &w, out);
    goto done;
nomem:
    st = kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
done:
    kiln_free(cp);
    kiln_free(norm);
    kiln_free(off);
    kiln_free(bytes);
    kiln_free(a.s);
    kiln_free(b.s);
    kiln_free(w.sy);
    kiln_heap_free(&w.h);
    return st;
}

/* ---- added tokens, then the runs between them ---------------------------------- */

/* Hugging Face's word characters for single_word: alphanumeric or '_'. */
static int is_word(uint32_t c) {
    return c == '_' || (kiln_uc_props(c) & (KILN_UC_L | KILN_UC_N)) != 0;
}

/* The character that ends at byte i of text (i > 0); an invalid byte alone. */
static uint32_t cp_before(const char *text, size_t i) {
    size_t j = i - 1, used;
    while (j > 0 && i - j < 4 && ((uint8_t)text[j] & 0xC0) == 0x80)
        j--;
    uint32_t c = kiln_utf8_decode((const uint8_t *)text + j, i - j, &used);
    return j + used == i ? c : KILN_UC_RAW + (uint8_t)text[i - 1];
}

static int is_space_at(const char *text, size_t len, size_t i, size_t *used) {
    uint32_t c = kiln_utf8_decode((const uint8_t *)text + i, len - i, used);
    return (kiln_uc_props(c) & KILN_UC_SPACE) != 0;
}

/* Finds the first added token at or after `from`: its index, and the span it
 * takes (with lstrip/rstrip whitespace) in [*mb, *me). -1 when none. */
static int find_added(const kiln_tokenizer *t, const char *text, size_t len, size_t from,
                      size_t floor, unsigned flags, size_t *mb, size_t *me) {
    for (size_t i = from; i < len; i++) {
        uint8_t c = (uint8_t)text[i];
        for (int k = t->added_start[c]; k < t->added_start[c + 1]; k++) {
            const kiln_tok_added *a = &t->added[t->added_by_byte[k]];
            if ((a->flags & KILN_TOKA_SPECIAL) && (flags & KILN_TOKENIZE_PLAIN_SPECIAL)) continue;
            if (a->len > len - i || memcmp(text + i, a->text, a->len) != 0) continue;
            size_t b = i, e = i + a->len, used;
            if (a->flags & KILN_TOKA_SINGLE_WORD) {
                if (b > 0 && is_word(cp_before(text, b))) continue;
                if (e < len && is_word(kiln_utf8_decode((const uint8_t *)text + e, len - e, &used)))
                    continue;
            }
            if (a->flags & KILN_TOKA_LSTRIP)
                while (b > floor) {
                    uint32_t prev = cp_before(text, b);
                    size_t n = prev < 0x80 ? 1 : prev < 0x800 ? 2 : prev < 0x10000 ? 3 : 4;
                    if (!(kiln_uc_props(prev) & KILN_UC_SPACE) || b - floor < n) break;
                    b -= n;
                }
            if (a->flags & KILN_TOKA_RSTRIP)
                while (e < len && is_space_at(text, len, e, &used))
                    e += used;
            *mb = b;
            *me = e;
            return t->added_by_byte[k];
        }
    }
    return -1;
}

kiln_status kiln_tok_encode_tables(const kiln_tokenizer *t, const char *text, size_t len,
                                   unsigned flags, kiln_tok_ids *out) {
    kiln_status st = KILN_OK;
    if ((flags & KILN_TOKENIZE_ADD_SPECIAL) && (t->flags & KILN_TOKF_ADD_BOS) && t->bos >= 0)
        kiln_tok_ids_push(out, t->bos);
    size_t pos = 0;
    int after_added = 1; /* the start of the text counts as following one (SPM's space prefix) */
    while (pos < len && !st) {
        size_t mb = len, me = len;
        int k = t->n_added ? find_added(t, text, len, pos, pos, flags, &mb, &me) : -1;
        if (k < 0) mb = me = len;
        if (mb > pos) {
            st = t->model == KILN_TOKM_SPM
                     ? kiln_tok_spm_text(t, text + pos, mb - pos, after_added, out)
                     : kiln_tok_bpe_text(t, text + pos, mb - pos, out);
            after_added = 0;
        }
        if (k >= 0) {
            kiln_tok_ids_push(out, t->added[k].id);
            after_added = 1;
        }
        pos = me;
    }
    if (!st && (flags & KILN_TOKENIZE_ADD_SPECIAL) && (t->flags & KILN_TOKF_ADD_EOS) && t->eos >= 0)
        kiln_tok_ids_push(out, t->eos);
    return st;
}
