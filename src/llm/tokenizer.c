/* tokenizer.c: the runtime tokenizer: the program's tokenizer section (its
 * binary form, written and read back with every field checked), encoding
 * dispatch and decoding (piece by piece, and streamed in whole UTF-8
 * characters). The encoders live in tokenizer_spm.c and tokenizer_bpe.c.
 * Files (tokenizer.bin, tokenizer.json, GGUF) are read in src/import/,
 * which builds tokenizers with the helpers tokenizer.h shares; nothing here
 * reads a file.
 *
 * The tokenizer section (FORMAT.md §7.2) starts with
 *
 *   u32 type            1 = KILN_TOK_SPM_LLAMA2C, 2 = KILN_TOK_TABLES
 *   u32 n_vocab         1..2^22
 *   i32 bos             -1 (none) or 0..n_vocab-1
 *   i32 eos             -1 (none) or 0..n_vocab-1
 *
 * Type 1 (llama2.c) continues with n_vocab x {f32 score, i32 length
 * 0..65536, u8 bytes[length]}.
 *
 * Type 2 (byte-level BPE as Hugging Face `tokenizers` runs it, or
 * SentencePiece BPE over scores with byte fallback, as llama.cpp runs GGUF
 * `llama` vocabularies) continues with
 *
 *   u32 model           1 = byte-level BPE (merge ranks), 2 = SentencePiece BPE (scores)
 *   u32 flags           bit 0: add_special puts BOS first; bit 1: EOS last; bit 2: SPM space
 *                       prefix (before the text and after each added token); bit 3: NFC-normalize
 *                       the text between added tokens; bit 4: BPE ignore_merges (a pre-token that
 *                       is a whole token is that token); other bits 0
 *   i32 unk             -1 (none) or 0..n_vocab-1
 *   n_vocab x {
 *       u8  kind        1 normal, 2 unknown, 3 control (special), 4 user-defined (added, not
 *                       special), 5 unused (also ids no token has), 6 byte (<0xNN>): GGUF's
 *                       token_type numbering
 *       f32 score       finite; SPM merge priority (higher first); 0 for BPE
 *       u32 length      0..65536
 *       u8  bytes[length]  BPE: the bytes the token decodes to (byte-level characters mapped
 *                       back to bytes; added tokens as their text); SPM: the piece as in the
 *                       vocabulary (U+2581 for a space)
 *   }
 *   i32 byte_token[256] BPE: the token of each single byte, where merging starts; SPM: the
 *                       <0xNN> token of each byte (fallback); -1 none
 *   u32 n_merges        BPE: merges in rank order (SPM: 0)
 *   n_merges x { i32 left, i32 right, i32 result }   vocabulary ids
 *   u32 n_added         tokens matched in the text before anything else (leftmost, then longest)
 *   n_added x { i32 id, u32 flags (bit 0 special: not matched when special-token text is
 *               plain text; bit 1 lstrip; bit 2 rstrip; bit 3 single_word), u32 length
 *               1..65536, u8 text[length] }
 *   u32 n_splits        BPE pre-tokenizer: regexes applied in order, each splitting every piece
 *                       into its matches and the gaps between them
 *   n_splits x { u32 length 1..65536, u8 pattern[length] (UTF-8) }
 *
 * No bytes may follow. Every id, count, kind, flag and length is checked
 * when the section is loaded, and every pattern is compiled.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer.h"
#include "llm/unicode.h"
#include "runtime/introspect.h"

/* ---- common ----------------------------------------------------------------- */

void kiln_tokenizer_free(kiln_tokenizer *t) {
    if (!t) return;
    for (int i = 0; t->pieces && i < t->n_vocab; i++)
        kiln_free(t->pieces[i]);
    for (int i = 0; t->dec && i < t->n_vocab; i++)
        kiln_free(t->dec[i]);
    for (int i = 0; t->added && i < t->n_added; i++)
        kiln_free(t->added[i].text);
    for (int i = 0; t->split_src && i < t->n_split; i++)
        kiln_free(t->split_src[i]);
    for (int i = 0; t->split && i < t->n_split; i++)
        kiln_regex_free(t->split[i]);
    kiln_free(t->pieces);
    kiln_free(t->lens);
    kiln_free(t->scores);
    kiln_free(t->kinds);
    kiln_free(t->sorted);
    kiln_free(t->dec);
    kiln_free(t->dec_lens);
    kiln_free(t->pmap);
    kiln_free(t->merges);
    kiln_free(t->mkeys);
    kiln_free(t->mvals);
    kiln_free(t->added);
    kiln_free(t->added_by_byte);
    kiln_free(t->split_src);
    kiln_free(t->split_lens);
    kiln_free(t->split);
    kiln_free(t);
}

int kiln_tokenizer_vocab_size(const kiln_tokenizer *t) {
    return t->n_vocab;
}
int kiln_tokenizer_bos(const kiln_tokenizer *t) {
    return t->bos;
}
int kiln_tokenizer_eos(const kiln_tokenizer *t) {
    return t->eos;
}

int kiln_tokenizer_is_special(const kiln_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab) return 0;
    if (t->type == KILN_TOK_SPM_LLAMA2C) return id == t->bos || id == t->eos;
    return t->kinds[id] == KILN_TOKK_CONTROL || t->kinds[id] == KILN_TOKK_UNKNOWN;
}

void kiln_tok_ids_push(kiln_tok_ids *v, int32_t id) {
    if (v->failed) return;
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 64;
        int32_t *ids = cap > v->cap ? kiln_realloc(v->ids, sizeof *ids * (size_t)cap) : NULL;
        if (!ids) {
            v->failed = 1;
            return;
        }
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
}

kiln_tokenizer *kiln_tok_alloc(int n_vocab, int type) {
    kiln_tokenizer *t = kiln_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n_vocab = n_vocab;
    t->type = type;
    t->bos = t->eos = t->unk = -1;
    if (type == KILN_TOK_SPM_LLAMA2C) {
        t->bos = 1 < n_vocab ? 1 : -1; /* llama2.c: <unk>=0, <s>=1, </s>=2 */
        t->eos = 2 < n_vocab ? 2 : -1;
    }
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    t->pieces = kiln_calloc((size_t)n_vocab, sizeof *t->pieces);
    t->lens = kiln_calloc((size_t)n_vocab, sizeof *t->lens);
    t->scores = kiln_calloc((size_t)n_vocab, sizeof *t->scores);
    t->kinds = kiln_calloc((size_t)n_vocab, sizeof *t->kinds);
    if (!t->pieces || !t->lens || !t->scores || !t->kinds) {
        kiln_tokenizer_free(t);
        return NULL;
    }
    return t;
}

static int cmp_bytes(const char *a, uint32_t la, const char *b, uint32_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : (la < lb ? -1 : la > lb);
}

/* ---- llama2.c (type 1) --------------------------------------------------------- */

static const kiln_tokenizer *g_sort_tok; /* qsort has no context argument; guarded by g_sort_lock */
static int by_piece(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    int c = cmp_bytes(g_sort_tok->pieces[a], g_sort_tok->lens[a], g_sort_tok->pieces[b],
                      g_sort_tok->lens[b]);
    return c ? c : a - b;
}

static pthread_mutex_t g_sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* Lowest id whose piece equals s[0..n), or -1 (llama2c: binary search). */
static int lookup_sorted(const kiln_tokenizer *t, const char *s, uint32_t n) {
    int lo = 0, hi = t->n_vocab - 1, found = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, id = t->sorted[mid];
        int c = cmp_bytes(t->pieces[id], t->lens[id], s, n);
        if (c < 0)
            lo = mid + 1;
        else {
            if (c == 0) found = id;
            hi = mid - 1;
        }
    }
    return found;
}

int kiln_tok_llama2c_lookup(const kiln_tokenizer *t, const char *s, uint32_t n) {
    return lookup_sorted(t, s, n);
}

kiln_status kiln_tok_finish_llama2c(kiln_tokenizer *t) {
    if (!(t->sorted = kiln_malloc(sizeof(int) * (size_t)t->n_vocab)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_vocab; i++)
        t->sorted[i] = i;
    pthread_mutex_lock(&g_sort_lock);
    g_sort_tok = t;
    qsort(t->sorted, (size_t)t->n_vocab, sizeof(int), by_piece);
    pthread_mutex_unlock(&g_sort_lock);
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        t->byte_id[b] = lookup_sorted(t, piece, 6);
        t->bytes[b][0] = (char)b;
        t->bytes[b][1] = 0;
    }
    for (int i = 0; i < t->n_vocab; i++)
        if ((int)t->lens[i] > t->max_len) t->max_len = (int)t->lens[i];
    return KILN_OK;
}

kiln_status kiln_tok_read_llama2c(kiln_tokenizer *t, kiln_rbuf *r, uint32_t max_len) {
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
        if (!(t->pieces[i] = kiln_strndup(p, (size_t)len)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    return KILN_OK;
}

/* ---- type 2 tables ---------------------------------------------------------------- */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

int kiln_tok_lookup(const kiln_tokenizer *t, const char *s, size_t n) {
    if (!t->pmap) return -1;
    for (uint32_t h = hash_bytes(s, n) & t->pmap_mask;; h = (h + 1) & t->pmap_mask) {
        int32_t id = t->pmap[h];
        if (id < 0) return -1;
        if (t->lens[id] == n && memcmp(t->pieces[id], s, n) == 0) return id;
    }
}

static uint32_t table_size(uint64_t n) {
    uint32_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

static int by_added(const void *x, const void *y, const kiln_tok_added *a) {
    const kiln_tok_added *p = &a[*(const int *)x], *q = &a[*(const int *)y];
    uint8_t bp = (uint8_t)p->text[0], bq = (uint8_t)q->text[0];
    if (bp != bq) return bp < bq ? -1 : 1;
    if (p->len != q->len) return p->len > q->len ? -1 : 1; /* longest first */
    return *(const int *)x - *(const int *)y;
}

kiln_status kiln_tok_finish_tables(kiln_tokenizer *t, const char *what) {
    int n = t->n_vocab;
    /* Ids and kinds. */
    if (t->model != KILN_TOKM_BPE && t->model != KILN_TOKM_SPM)
        return kiln_error(KILN_ERR_FORMAT, "%s: unknown tokenizer model %d", what, t->model);
    if (t->flags & ~KILN_TOKF_ALL)
        return kiln_error(KILN_ERR_FORMAT, "%s: unknown tokenizer flags 0x%x", what,
                          t->flags & ~KILN_TOKF_ALL);
    if (t->bos < -1 || t->bos >= n || t->eos < -1 || t->eos >= n || t->unk < -1 || t->unk >= n)
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: special token ids (bos %d, eos %d, unk %d) outside the vocabulary of %d", what,
            t->bos, t->eos, t->unk, n);
    for (int i = 0; i < n; i++) {
        if (t->kinds[i] < KILN_TOKK_NORMAL || t->kinds[i] > KILN_TOKK_BYTE)
            return kiln_error(KILN_ERR_FORMAT, "%s: token %d has kind %d (1..6 allowed)", what, i,
                              t->kinds[i]);
        if (!(t->scores[i] > -1e30f && t->scores[i] < 1e30f))
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: token %d has a score that is not a finite number", what, i);
        if ((int)t->lens[i] > t->max_len) t->max_len = (int)t->lens[i];
    }
    for (int b = 0; b < 256; b++) {
        if (t->byte_id[b] < -1 || t->byte_id[b] >= n)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: the token of byte 0x%02X is %d, outside the vocabulary of %d",
                              what, b, t->byte_id[b], n);
        t->bytes[b][0] = (char)b;
        t->bytes[b][1] = 0;
    }
    /* Piece lookup over normal and user tokens (lowest id wins). */
    t->pmap_mask = table_size((uint64_t)n) - 1;
    if (!(t->pmap = kiln_malloc(sizeof(int32_t) * ((size_t)t->pmap_mask + 1))))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    memset(t->pmap, 0xff, sizeof(int32_t) * ((size_t)t->pmap_mask + 1));
    for (int i = 0; i < n; i++) {
        if (t->kinds[i] != KILN_TOKK_NORMAL && t->kinds[i] != KILN_TOKK_USER) continue;
        uint32_t h = hash_bytes(t->pieces[i], t->lens[i]) & t->pmap_mask;
        int dup = 0;
        for (; t->pmap[h] >= 0; h = (h + 1) & t->pmap_mask) {
            int32_t j = t->pmap[h];
            if (t->lens[j] == t->lens[i] && memcmp(t->pieces[j], t->pieces[i], t->lens[i]) == 0) {
                dup = 1;
                break;
            }
        }
        if (!dup) t->pmap[h] = i;
    }
    /* Merges: (left, right) -> rank. A pair listed twice keeps its first rank. */
    if (t->n_merges) {
        if (t->model != KILN_TOKM_BPE)
            return kiln_error(KILN_ERR_FORMAT, "%s: a SentencePiece tokenizer with merges", what);
        t->mmap_mask = table_size((uint64_t)t->n_merges) - 1;
        t->mkeys = kiln_malloc(sizeof(uint64_t) * ((size_t)t->mmap_mask + 1));
        t->mvals = kiln_malloc(sizeof(int32_t) * ((size_t)t->mmap_mask + 1));
        if (!t->mkeys || !t->mvals) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        memset(t->mvals, 0xff, sizeof(int32_t) * ((size_t)t->mmap_mask + 1));
        for (int i = 0; i < t->n_merges; i++) {
            const int32_t *mg = &t->merges[3 * i];
            for (int k = 0; k < 3; k++)
                if (mg[k] < 0 || mg[k] >= n)
                    return kiln_error(KILN_ERR_FORMAT,
                                      "%s: merge %d names token %d, outside the vocabulary of %d",
                                      what, i, mg[k], n);
            uint64_t key = (uint64_t)(uint32_t)mg[0] << 32 | (uint32_t)mg[1];
            uint32_t h = kiln_tok_hash_pair(key) & t->mmap_mask;
            while (t->mvals[h] >= 0 && t->mkeys[h] != key)
                h = (h + 1) & t->mmap_mask;
            if (t->mvals[h] < 0) {
                t->mkeys[h] = key;
                t->mvals[h] = i;
            }
        }
    }
    /* Added tokens, grouped by first byte, longest first. */
    for (int i = 0; i < t->n_added; i++) {
        const kiln_tok_added *a = &t->added[i];
        if (a->id < 0 || a->id >= n || a->len < 1 || a->len > KILN_TOK_MAX_PIECE ||
            (a->flags & ~KILN_TOKA_ALL))
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: added token %d (id %d, %u bytes, flags 0x%x) is not valid", what,
                              i, a->id, a->len, a->flags);
    }
    if (t->n_added) {
        if (!(t->added_by_byte = kiln_malloc(sizeof(int) * (size_t)t->n_added)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int i = 0; i < t->n_added; i++)
            t->added_by_byte[i] = i;
        /* A merge sort (qsort has no context argument). */
        int *tmp = kiln_malloc(sizeof(int) * (size_t)t->n_added);
        if (!tmp) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int width = 1; width < t->n_added; width *= 2) {
            for (int lo = 0; lo < t->n_added; lo += 2 * width) {
                int mid = lo + width < t->n_added ? lo + width : t->n_added;
                int hi = lo + 2 * width < t->n_added ? lo + 2 * width : t->n_added;
                int i = lo, j = mid, w = lo;
                while (i < mid || j < hi) {
                    int *v = t->added_by_byte;
                    if (j >= hi || (i < mid && by_added(&v[i], &v[j], t->added) <= 0))
                        tmp[w++] = v[i++];
                    else
                        tmp[w++] = v[j++];
                }
            }
            memcpy(t->added_by_byte, tmp, sizeof(int) * (size_t)t->n_added);
        }
        kiln_free(tmp);
    }
    int k = 0;
    for (int b = 0; b < 256; b++) {
        t->added_start[b] = k;
        while (k < t->n_added && (uint8_t)t->added[t->added_by_byte[k]].text[0] == b)
            k++;
    }
    t->added_start[256] = k;
    /* SPM: what each piece prints as. */
    if (t->model == KILN_TOKM_SPM) {
        t->dec = kiln_calloc((size_t)n, sizeof *t->dec);
        t->dec_lens = kiln_calloc((size_t)n, sizeof *t->dec_lens);
        if (!t->dec || !t->dec_lens) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n; i++) {
            const char *p = t->pieces[i];
            uint32_t len = t->lens[i], w = 0;
            char *d = kiln_malloc((size_t)len + 1);
            if (!d) return kiln_error(KILN_ERR_NOMEM, "out of memory");
            unsigned byte;
            if (t->kinds[i] == KILN_TOKK_BYTE && len == 6 && p[0] == '<' && p[1] == '0' &&
                p[2] == 'x' && p[5] == '>' && sscanf(p + 3, "%2X", &byte) == 1) {
                d[w++] = (char)byte;
            } else {
                for (uint32_t j = 0; j < len; j++) {
                    if (j + 2 < len && (uint8_t)p[j] == 0xE2 && (uint8_t)p[j + 1] == 0x96 &&
                        (uint8_t)p[j + 2] == 0x81) {
                        d[w++] = ' ';
                        j += 2;
                    } else {
                        d[w++] = p[j];
                    }
                }
            }
            d[w] = 0;
            t->dec[i] = d;
            t->dec_lens[i] = w;
        }
    }
    /* Pre-tokenizer regexes. */
    if (t->n_split) {
        if (!(t->split = kiln_calloc((size_t)t->n_split, sizeof *t->split)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int i = 0; i < t->n_split; i++) {
            kiln_status st = kiln_regex_compile(t->split_src[i], t->split_lens[i], &t->split[i]);
            if (st) return kiln_error_wrap(st, "%s: pre-tokenizer split %d", what, i);
        }
    }
    return KILN_OK;
}

/* ---- the section form --------------------------------------------------------- */

void kiln_tokenizer_serialize(const kiln_tokenizer *t, kiln_wbuf *b) {
    kiln_wbuf_u32(b, (uint32_t)t->type);
    kiln_wbuf_u32(b, (uint32_t)t->n_vocab);
    kiln_wbuf_i32(b, t->bos);
    kiln_wbuf_i32(b, t->eos);
    if (t->type == KILN_TOK_SPM_LLAMA2C) {
        for (int i = 0; i < t->n_vocab; i++) {
            kiln_wbuf_f32(b, t->scores[i]);
            kiln_wbuf_i32(b, (int32_t)t->lens[i]);
            kiln_wbuf_bytes(b, t->pieces[i], t->lens[i]);
        }
        return;
    }
    kiln_wbuf_u32(b, (uint32_t)t->model);
    kiln_wbuf_u32(b, t->flags);
    kiln_wbuf_i32(b, t->unk);
    for (int i = 0; i < t->n_vocab; i++) {
        kiln_wbuf_u8(b, t->kinds[i]);
        kiln_wbuf_f32(b, t->scores[i]);
        kiln_wbuf_strn(b, t->pieces[i], t->lens[i]);
    }
    for (int i = 0; i < 256; i++)
        kiln_wbuf_i32(b, t->byte_id[i]);
    kiln_wbuf_u32(b, (uint32_t)t->n_merges);
    for (int i = 0; i < 3 * t->n_merges; i++)
        kiln_wbuf_i32(b, t->merges[i]);
    kiln_wbuf_u32(b, (uint32_t)t->n_added);
    for (int i = 0; i < t->n_added; i++) {
        kiln_wbuf_i32(b, t->added[i].id);
        kiln_wbuf_u32(b, t->added[i].flags);
        kiln_wbuf_strn(b, t->added[i].text, t->added[i].len);
    }
    kiln_wbuf_u32(b, (uint32_t)t->n_split);
    for (int i = 0; i < t->n_split; i++)
        kiln_wbuf_strn(b, t->split_src[i], t->split_lens[i]);
}

/* A u32-length string of 0..KILN_TOK_MAX_PIECE bytes (at least `min`) as a new copy. */
static char *read_str(kiln_rbuf *r, const char *field, uint32_t min, uint32_t *len) {
    uint32_t n = kiln_rbuf_u32(r, field);
    if (!r->failed && (n < min || n > KILN_TOK_MAX_PIECE))
        kiln_rbuf_fail(r, "%s has length %u (%u..%d allowed)", field, n, min, KILN_TOK_MAX_PIECE);
    const char *p = kiln_rbuf_bytes(r, field, r->failed ? 0 : n);
    if (r->failed) return NULL;
    char *s = kiln_strndup(p, n);
    if (!s) {
        kiln_error(KILN_ERR_NOMEM, "%s: out of memory", r->what);
        r->failed = KILN_ERR_NOMEM; /* later reads fail too; the status stays NOMEM */
    }
    *len = n;
    return s;
}

static kiln_status read_tables(kiln_tokenizer *t, kiln_rbuf *r) {
    char field[64];
    t->model = (int)kiln_rbuf_u32(r, "tokenizer model");
    t->flags = kiln_rbuf_u32(r, "tokenizer flags");
    t->unk = kiln_rbuf_i32(r, "unk id");
    if (!r->failed && t->model != KILN_TOKM_BPE && t->model != KILN_TOKM_SPM)
        kiln_rbuf_fail(r, "unknown tokenizer model %d", t->model);
    if (!r->failed && (t->flags & ~KILN_TOKF_ALL))
        kiln_rbuf_fail(r, "unknown tokenizer flags 0x%x", t->flags);
    for (int i = 0; i < t->n_vocab && !r->failed; i++) {
        snprintf(field, sizeof field, "token %d", i);
        uint8_t kind = kiln_rbuf_u8(r, field);
        float score = kiln_rbuf_f32(r, field);
        if (!r->failed && (kind < KILN_TOKK_NORMAL || kind > KILN_TOKK_BYTE))
            kiln_rbuf_fail(r, "token %d has kind %u (1..6 allowed)", i, kind);
        if (!r->failed && !(score > -1e30f && score < 1e30f))
            kiln_rbuf_fail(r, "token %d has a score that is not a finite number", i);
        t->kinds[i] = kind;
        t->scores[i] = score;
        t->pieces[i] = read_str(r, field, 0, &t->lens[i]);
    }
    for (int b = 0; b < 256 && !r->failed; b++) {
        t->byte_id[b] = kiln_rbuf_i32(r, "byte tokens");
        if (!r->failed && (t->byte_id[b] < -1 || t->byte_id[b] >= t->n_vocab))
            kiln_rbuf_fail(r, "the token of byte 0x%02X is %d, outside the vocabulary of %d", b,
                           t->byte_id[b], t->n_vocab);
    }
    uint32_t nm = kiln_rbuf_count(r, "merge count", 12);
    if (!r->failed && nm > (1u << 24)) kiln_rbuf_fail(r, "%u merges (at most 2^24)", nm);
    if (!r->failed && nm) {
        if (!(t->merges = kiln_malloc(sizeof(int32_t) * 3 * (size_t)nm)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        t->n_merges = (int)nm;
        for (uint32_t i = 0; i < 3 * nm && !r->failed; i++)
            t->merges[i] = kiln_rbuf_i32(r, "merges");
    }
    uint32_t na = kiln_rbuf_count(r, "added token count", 13);
    if (!r->failed && na > (uint32_t)t->n_vocab)
        kiln_rbuf_fail(r, "%u added tokens in a vocabulary of %d", na, t->n_vocab);
    if (!r->failed && na) {
        if (!(t->added = kiln_calloc(na, sizeof *t->added)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
        t->n_added = (int)na;
        for (uint32_t i = 0; i < na && !r->failed; i++) {
            snprintf(field, sizeof field, "added token %u", i);
            t->added[i].id = kiln_rbuf_i32(r, field);
            t->added[i].flags = kiln_rbuf_u32(r, field);
            t->added[i].text = read_str(r, field, 1, &t->added[i].len);
        }
    }
    uint32_t ns = kiln_rbuf_count(r, "split count", 5);
    if (!r->failed && ns > 64) kiln_rbuf_fail(r, "%u pre-tokenizer splits (at most 64)", ns);
    if (!r->failed && ns) {
        t->split_src = kiln_calloc(ns, sizeof *t->split_src);
        t->split_lens = kiln_calloc(ns, sizeof *t->split_lens);
        if (!t->split_src || !t->split_lens) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        t->n_split = (int)ns;
        for (uint32_t i = 0; i < ns && !r->failed; i++) {
            snprintf(field, sizeof field, "split %u", i);
            t->split_src[i] = read_str(r, field, 1, &t->split_lens[i]);
        }
    }
    if (!r->failed && r->pos != r->len)
        kiln_rbuf_fail(r, "%zu bytes after the last split", r->len - r->pos);
    return kiln_rbuf_status(r);
}

kiln_status kiln_tokenizer_deserialize(const uint8_t *data, size_t len, const char *what,
                                       kiln_tokenizer **out) {
    *out = NULL;
    kiln_rbuf r;
    kiln_rbuf_init(&r, data, len, 0, what);
    uint32_t type = kiln_rbuf_u32(&r, "tokenizer type");
    uint32_t n = kiln_rbuf_count(&r, "vocabulary size", 8);
    int32_t bos = kiln_rbuf_i32(&r, "bos id"), eos = kiln_rbuf_i32(&r, "eos id");
    if (!r.failed && type != KILN_TOK_SPM_LLAMA2C && type != KILN_TOK_TABLES)
        kiln_rbuf_fail(&r, "unknown tokenizer type %u", type);
    if (!r.failed && (n < 1 || n > KILN_TOK_MAX_VOCAB))
        kiln_rbuf_fail(&r, "vocabulary size %u out of range", n);
    if (!r.failed && (bos < -1 || bos >= (int64_t)n || eos < -1 || eos >= (int64_t)n))
        kiln_rbuf_fail(&r, "special token ids (bos %d, eos %d) outside the vocabulary of %u", bos,
                       eos, n);
    if (r.failed) return kiln_rbuf_status(&r);
    kiln_tokenizer *t = kiln_tok_alloc((int)n, (int)type);
    if (!t) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    t->bos = bos;
    t->eos = eos;
    kiln_status st;
    if (type == KILN_TOK_SPM_LLAMA2C) {
        st = kiln_tok_read_llama2c(t, &r, KILN_TOK_MAX_PIECE);
        if (!st && r.pos != r.len) {
            kiln_rbuf_fail(&r, "%zu bytes after the last token", r.len - r.pos);
            st = kiln_rbuf_status(&r);
        }
        if (!st) st = kiln_tok_finish_llama2c(t);
    } else {
        st = read_tables(t, &r);
        if (!st) st = kiln_tok_finish_tables(t, what);
    }
    if (st) {
        kiln_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln_tokenizer_from_program(const kiln_program *p, kiln_tokenizer **out) {
    *out = NULL;
    const kiln_module *m = kiln_program_module(p);
    const char *name = kiln_basename(kiln_program_path(p));
    if (!m->tokenizer_len)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "'%s' has no tokenizer (compile it with --tokenizer)", name);
    char what[600];
    snprintf(what, sizeof what, "'%s' section 'tokenizer'", name);
    return kiln_tokenizer_deserialize(m->tokenizer, (size_t)m->tokenizer_len, what, out);
}

/* ---- encoding ------------------------------------------------------------------- */

kiln_status kiln_tokenizer_encode_flags(const kiln_tokenizer *t, const char *text, size_t len,
                                        unsigned flags, int32_t *ids, int cap, int *n_ids) {
    *n_ids = 0;
    if (len > (size_t)1 << 28)
        return kiln_error(KILN_ERR_INVALID_ARG, "text of %zu bytes is too long", len);
    if (flags & ~(KILN_TOKENIZE_ADD_SPECIAL | KILN_TOKENIZE_PLAIN_SPECIAL))
        return kiln_error(KILN_ERR_INVALID_ARG, "unknown tokenize flags 0x%x", flags);
    kiln_tok_ids v = {0};
    kiln_status st =
        t->type == KILN_TOK_SPM_LLAMA2C
            ? kiln_tok_encode_llama2c(t, text, len, (flags & KILN_TOKENIZE_ADD_SPECIAL) != 0, &v)
            : kiln_tok_encode_tables(t, text, len, flags, &v);
    if (!st && v.failed) st = kiln_error(KILN_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    if (!st) {
        *n_ids = v.n;
        if (v.n > cap)
            st = kiln_error(KILN_ERR_INVALID_ARG,
                            "text encodes to %d tokens, more than the %d given room", v.n, cap);
        else if (v.n)
            memcpy(ids, v.ids, sizeof(int32_t) * (size_t)v.n);
    }
    kiln_free(v.ids);
    return st;
}

kiln_status kiln_tokenizer_encode(const kiln_tokenizer *t, const char *text, size_t len,
                                  int add_bos, int32_t *ids, int cap, int *n_ids) {
    return kiln_tokenizer_encode_flags(t, text, len, add_bos ? KILN_TOKENIZE_ADD_SPECIAL : 0, ids,
                                       cap, n_ids);
}

/* ---- decoding ------------------------------------------------------------------- */

const char *kiln_tokenizer_decode(const kiln_tokenizer *t, int prev, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (t->type == KILN_TOK_TABLES && t->model == KILN_TOKM_BPE) {
        *len = t->lens[id];
        return t->pieces[id];
    }
    if (t->type == KILN_TOK_TABLES) {
        const char *p = t->dec[id];
        size_t n = t->dec_lens[id];
        /* The space the encoder put before the text and after each added token. */
        int after_added = prev < 0 || (prev < t->n_vocab && (t->kinds[prev] == KILN_TOKK_CONTROL ||
                                                             t->kinds[prev] == KILN_TOKK_USER ||
                                                             t->kinds[prev] == KILN_TOKK_UNKNOWN));
        if ((t->flags & KILN_TOKF_SPACE_PREFIX) && after_added &&
            t->kinds[id] == KILN_TOKK_NORMAL && n && p[0] == ' ') {
            p++;
            n--;
        }
        *len = n;
        return p;
    }
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

struct kiln_detokenizer {
    const kiln_tokenizer *tok;
    int prev;
    char held[4]; /* the start of a character the next piece may finish */
    size_t n_held;
    char *buf; /* held bytes, then the piece: what push returns */
};

kiln_status kiln_detokenizer_create(const kiln_tokenizer *tok, kiln_detokenizer **out) {
    *out = NULL;
    kiln_detokenizer *d = kiln_calloc(1, sizeof *d);
    if (!d || !(d->buf = kiln_malloc((size_t)tok->max_len + 8))) {
        kiln_free(d);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    d->tok = tok;
    d->prev = -1;
    *out = d;
    return KILN_OK;
}

void kiln_detokenizer_free(kiln_detokenizer *d) {
    if (!d) return;
    kiln_free(d->buf);
    kiln_free(d);
}

/* How many bytes at the end of s[0..n) begin a UTF-8 character that more
 * bytes could still complete (0..3). */
static size_t unfinished_tail(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t c = (uint8_t)s[n - k];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        int need = kiln_utf8_lead_len(c);
        if (need <= 1 || (size_t)need <= k) return 0; /* complete, or never valid */
        /* Hold it only if some continuation makes a valid character (E0 80,
         * ED A0 or F4 90 never do). */
        uint8_t probe[4] = {0x80, 0x80, 0x80, 0x80};
        memcpy(probe, s + n - k, k);
        for (int second = 0x80; second <= 0xBF; second += 0x10) {
            if (k == 1) probe[1] = (uint8_t)second;
            size_t used;
            if (kiln_utf8_decode(probe, (size_t)need, &used) < KILN_UC_RAW) return k;
        }
        return 0;
    }
    return 0;
}

const char *kiln_detokenizer_push(kiln_detokenizer *d, int id, size_t *len) {
    size_t pl;
    const char *p = kiln_tokenizer_decode(d->tok, d->prev, id, &pl);
    if (!p) return NULL;
    d->prev = id;
    memcpy(d->buf, d->held, d->n_held);
    memcpy(d->buf + d->n_held, p, pl);
    size_t n = d->n_held + pl, keep = unfinished_tail(d->buf, n);
    memcpy(d->held, d->buf + n - keep, keep);
    d->n_held = keep;
    *len = n - keep;
    return d->buf;
}

const char *kiln_detokenizer_flush(kiln_detokenizer *d, size_t *len) {
    memcpy(d->buf, d->held, d->n_held);
    *len = d->n_held;
    d->n_held = 0;
    return d->buf;
}
