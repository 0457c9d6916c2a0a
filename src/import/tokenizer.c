/* tokenizer.c (import): the one tokenizer builder. A llama2.c tokenizer.bin
 * (read by llama2c.c), GGUF metadata (tokenizer.ggml.model gpt2 or llama,
 * .tokens, .token_type, .scores, .merges, .pre, special ids, add_bos_token,
 * add_space_prefix) or a Hugging Face tokenizer.json (+ tokenizer_config.json)
 * becomes a kiln_tokenizer here; kiln_import_tokenizer stores it in the module
 * being compiled, kiln_tokenizer_load (which tells these files apart) hands
 * it to its caller. This is compile-time code: the program stores the tables
 * (src/llm/tokenizer.c), and the runtime never reads JSON. */
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "import/gguf.h"
#include "import/import.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"

#define MAX_VOCAB KILN_TOK_MAX_VOCAB
#define MAX_PIECE KILN_TOK_MAX_PIECE

/* The pre-tokenizer regexes of the models Kiln knows, as Hugging Face
 * `tokenizers` writes them. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"                                                               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"                                                               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GGUF tokenizer.ggml.pre -> splits (and NFC, which the Hugging Face
 * tokenizer of that family applies). */
static const struct {
    const char *pre;
    const char *re[2];
    int nfc;
} g_pre[] = {
    {"default", {RE_GPT2, NULL}, 0}, /* no pre given: GPT-2's split, as Hugging Face's ByteLevel */
    {"gpt-2", {RE_GPT2, NULL}, 0},
    {"gpt2", {RE_GPT2, NULL}, 0},
    {"llama3", {RE_LLAMA3, NULL}, 0},
    {"llama-v3", {RE_LLAMA3, NULL}, 0},
    {"llama-bpe", {RE_LLAMA3, NULL}, 0},
    {"qwen2", {RE_QWEN2, NULL}, 1},
    {"deepseek-r1-qwen", {RE_QWEN2, NULL}, 1},
    {"smollm", {"\\p{N}", RE_GPT2}, 0}, /* Digits(individual_digits) then ByteLevel */
};

/* ---- a tokenizer under construction -------------------------------------------- */

typedef struct {
    kiln_tokenizer *t;
    const char *what;
    /* vocabulary strings as written (byte-level text) -> id, for merges */
    const char **str;
    uint32_t *str_len;
    int32_t *map;
    uint32_t mask;
    int cap_added, cap_split;
    char *scratch; /* 2 * MAX_PIECE bytes: a merge's two halves joined */
} builder;

static uint32_t fnv(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static void builder_free(builder *b) {
    kiln_free(b->str);
    kiln_free(b->str_len);
    kiln_free(b->map);
    kiln_free(b->scratch);
    kiln_tokenizer_free(b->t);
}

static kiln_status builder_init(builder *b, int n_vocab, int model, const char *what) {
    memset(b, 0, sizeof *b);
    b->what = what;
    if (n_vocab < 1 || n_vocab > MAX_VOCAB)
        return kiln_error(KILN_ERR_FORMAT, "%s: vocabulary of %d tokens (1..%d allowed)", what,
                          n_vocab, MAX_VOCAB);
    b->t = kiln_tok_alloc(n_vocab, KILN_TOK_TABLES);
    b->str = kiln_calloc((size_t)n_vocab, sizeof *b->str);
    b->str_len = kiln_calloc((size_t)n_vocab, sizeof *b->str_len);
    uint32_t size = 16;
    while (size < 2u * (uint32_t)n_vocab)
        size *= 2;
    b->mask = size - 1;
    b->map = kiln_malloc(sizeof(int32_t) * size);
    b->scratch = kiln_malloc(2 * MAX_PIECE);
    if (!b->t || !b->str || !b->str_len || !b->map || !b->scratch)
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    memset(b->map, 0xff, sizeof(int32_t) * size);
    b->t->model = model;
    for (int i = 0; i < n_vocab; i++)
        b->t->kinds[i] = KILN_TOKK_UNUSED;
    return KILN_OK;
}

/* The id of vocabulary string s[0..n) as written, or -1. */
static int str_id(const builder *b, const char *s, size_t n) {
    for (uint32_t h = fnv(s, n) & b->mask;; h = (h + 1) & b->mask) {
        int32_t id = b->map[h];
        if (id < 0) return -1;
        if (b->str_len[id] == n && memcmp(b->str[id], s, n) == 0) return id;
    }
}

/* Sets token id: its string as written (borrowed until the build ends), kind
 * and score. Byte-level vocabularies store what the string decodes to. */
static kiln_status set_token(builder *b, int id, const char *s, size_t n, int kind, float score) {
    kiln_tokenizer *t = b->t;
    if (n > MAX_PIECE)
        return kiln_error(KILN_ERR_FORMAT, "%s: token %d is %zu bytes long (at most %d)", b->what,
                          id, n, MAX_PIECE);
    if (!b->str[id]) { /* the first string of an id is the one merges name */
        uint32_t h = fnv(s, n) & b->mask;
        while (b->map[h] >= 0)
            h = (h + 1) & b->mask;
        b->map[h] = id;
        b->str[id] = s;
        b->str_len[id] = (uint32_t)n;
    }
    kiln_free(t->pieces[id]);
    if (!(t->pieces[id] = kiln_malloc(n + 1))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    size_t len = n;
    if (t->model == KILN_TOKM_BPE)
        len = kiln_tok_byte_decode(s, n, t->pieces[id]);
    else
        memcpy(t->pieces[id], s, n);
    t->pieces[id][len] = 0;
    t->lens[id] = (uint32_t)len;
    t->kinds[id] = (uint8_t)kind;
    t->scores[id] = score;
    return KILN_OK;
}

static kiln_status add_added(builder *b, int id, const char *s, size_t n, uint32_t flags) {
    kiln_tokenizer *t = b->t;
    if (!n) return KILN_OK; /* an empty token can never be found in text */
    if (n > MAX_PIECE)
        return kiln_error(KILN_ERR_FORMAT, "%s: added token %d is %zu bytes long", b->what, id, n);
    if (t->n_added == b->cap_added) {
        int cap = b->cap_added ? b->cap_added * 2 : 32;
        kiln_tok_added *a = kiln_realloc(t->added, sizeof *a * (size_t)cap);
        if (!a) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        t->added = a;
        b->cap_added = cap;
    }
    kiln_tok_added *a = &t->added[t->n_added];
    if (!(a->text = kiln_strndup(s, n))) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    a->id = id;
    a->flags = flags;
    a->len = (uint32_t)n;
    t->n_added++;
    return KILN_OK;
}

static kiln_status add_split(builder *b, const char *re) {
    kiln_tokenizer *t = b->t;
    if (t->n_split == 64)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: more than 64 pre-tokenizer splits", b->what);
    if (t->n_split == b->cap_split) {
        int cap = b->cap_split ? b->cap_split * 2 : 4;
        char **s = kiln_realloc(t->split_src, sizeof *s * (size_t)cap);
        if (s) t->split_src = s;
        uint32_t *l = kiln_realloc(t->split_lens, sizeof *l * (size_t)cap);
        if (l) t->split_lens = l;
        if (!s || !l) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        b->cap_split = cap;
    }
    if (!(t->split_src[t->n_split] = kiln_strdup(re)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    t->split_lens[t->n_split++] = (uint32_t)strlen(re);
    return KILN_OK;
}

/* Merge i written "left right": the three ids. */
static kiln_status add_merge(builder *b, int i, const char *l, size_t ll, const char *r,
                             size_t rl) {
    kiln_tokenizer *t = b->t;
    char *buf = b->scratch;
    int a = str_id(b, l, ll), c = str_id(b, r, rl), m = -1;
    if (a >= 0 && c >= 0 && ll + rl <= 2 * MAX_PIECE) {
        memcpy(buf, l, ll);
        memcpy(buf + ll, r, rl);
        m = str_id(b, buf, ll + rl);
    }
    if (a < 0 || c < 0 || m < 0)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: merge %d ('%.*s' '%.*s'): %s is not in the vocabulary", b->what, i,
                          (int)(ll > 40 ? 40 : ll), l, (int)(rl > 40 ? 40 : rl), r,
                          a < 0   ? "its left part"
                          : c < 0 ? "its right part"
                                  : "the merged token");
    t->merges[3 * i] = a;
    t->merges[3 * i + 1] = c;
    t->merges[3 * i + 2] = m;
    return KILN_OK;
}

/* BPE: the token each single byte starts as (its byte-level character). */
static void find_byte_tokens(builder *b) {
    kiln_tokenizer *t = b->t;
    for (int v = 0; v < 256; v++) {
        uint8_t ch[4];
        size_t n = kiln_utf8_encode(kiln_tok_byte_char((uint8_t)v), ch);
        int id = str_id(b, (const char *)ch, n);
        t->byte_id[v] = id >= 0 && t->kinds[id] == KILN_TOKK_NORMAL ? id : -1;
    }
}

/* Ends the build: tables, checks; the tokenizer moves to *out. */
static kiln_status builder_finish(builder *b, kiln_tokenizer **out) {
    kiln_tokenizer *t = b->t;
    for (int i = 0; i < t->n_vocab; i++)
        if (!t->pieces[i] && !(t->pieces[i] = kiln_strdup("")))
            return kiln_error(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = kiln_tok_finish_tables(t, b->what);
    if (st) return st;
    *out = t;
    b->t = NULL;
    return KILN_OK;
}

/* ---- GGUF metadata ------------------------------------------------------------------ */

static kiln_status meta_get(const kiln_module *m, const char *what, const char *key,
                            kiln_meta_type type, const kiln_meta **out) {
    static const char *names[] = {"",
                                  "an integer",
                                  "a number",
                                  "a string",
                                  "an integer array",
                                  "a number array",
                                  "a string array"};
    *out = NULL;
    const kiln_meta *e = kiln_meta_find(m, key);
    if (!e) return KILN_OK;
    if (e->type == KILN_META_INT && type == KILN_META_FLOAT) { /* an integer is a number too */
        *out = e;
        return KILN_OK;
    }
    if (e->type != type)
        return kiln_error(KILN_ERR_FORMAT, "%s: metadata key '%s' should be %s", what, key,
                          names[type]);
    *out = e;
    return KILN_OK;
}

static kiln_status meta_id(const kiln_module *m, const char *what, const char *key, int n_vocab,
                           int *out) {
    const kiln_meta *e;
    kiln_status st = meta_get(m, what, key, KILN_META_INT, &e);
    if (st || !e) return st;
    if (e->i < -1 || e->i >= n_vocab)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: metadata key '%s' is %lld, outside the vocabulary of %d", what, key,
                          (long long)e->i, n_vocab);
    *out = (int)e->i;
    return KILN_OK;
}

static kiln_status meta_flag(const kiln_module *m, const char *what, const char *key, uint32_t bit,
                             int dflt, uint32_t *flags) {
    const kiln_meta *e;
    kiln_status st = meta_get(m, what, key, KILN_META_INT, &e);
    if (st) return st;
    if (e ? e->i != 0 : dflt) *flags |= bit;
    return KILN_OK;
}

static kiln_status from_gguf_meta(const kiln_module *m, const char *what, kiln_tokenizer **out) {
    *out = NULL;
    const kiln_meta *model, *tokens, *types, *scores, *merges, *pre;
    kiln_status st;
    if ((st = meta_get(m, what, "tokenizer.ggml.model", KILN_META_STR, &model))) return st;
    if (!model) return KILN_OK;
    int bpe = !strcmp(model->s, "gpt2"), spm = !strcmp(model->s, "llama");
    if (!bpe && !spm)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: tokenizer.ggml.model '%.40s' is not one Kiln runs (gpt2, llama)",
                          what, model->s);
    if ((st = meta_get(m, what, "tokenizer.ggml.tokens", KILN_META_STR_ARRAY, &tokens)) ||
        (st = meta_get(m, what, "tokenizer.ggml.token_type", KILN_META_INT_ARRAY, &types)) ||
        (st = meta_get(m, what, "tokenizer.ggml.scores", KILN_META_FLOAT_ARRAY, &scores)) ||
        (st = meta_get(m, what, "tokenizer.ggml.merges", KILN_META_STR_ARRAY, &merges)) ||
        (st = meta_get(m, what, "tokenizer.ggml.pre", KILN_META_STR, &pre)))
        return st;
    if (!tokens)
        return kiln_error(KILN_ERR_FORMAT, "%s: metadata key 'tokenizer.ggml.tokens' is missing",
                          what);
    int n = (int)tokens->n;
    if ((types && types->n != tokens->n) || (scores && scores->n != tokens->n))
        return kiln_error(KILN_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %u entries but %s has %u",
                          what, tokens->n,
                          types && types->n != tokens->n ? "tokenizer.ggml.token_type"
                                                         : "tokenizer.ggml.scores",
                          types && types->n != tokens->n ? types->n : scores->n);
    if (bpe && !merges)
        return kiln_error(KILN_ERR_FORMAT, "%s: metadata key 'tokenizer.ggml.merges' is missing",
                          what);
    builder b;
    int unk = -1;
    if ((st = builder_init(&b, n, bpe ? KILN_TOKM_BPE : KILN_TOKM_SPM, what))) goto done;
    kiln_tokenizer *t = b.t;
    for (int i = 0; i < n && !st; i++) {
        int kind = types ? (int)types->ia[i] : KILN_TOKK_NORMAL;
        if (kind == 0) kind = KILN_TOKK_NORMAL; /* GGUF "undefined" */
        if (kind < KILN_TOKK_NORMAL || kind > KILN_TOKK_BYTE) {
            st = kiln_error(KILN_ERR_FORMAT,
                            "%s: tokenizer.ggml.token_type[%d] is %lld (0..6 allowed)", what, i,
                            (long long)types->ia[i]);
            break;
        }
        float score = scores ? (float)scores->fa[i] : 0.0f;
        if (!(score > -1e30f)) score = -9.9e29f; /* -inf or NaN: merged last */
        if (!(score < 1e30f)) score = 9.9e29f;
        const char *s = tokens->sa[i];
        st = set_token(&b, i, s, strlen(s), kind, score);
        if (!st &&
            (kind == KILN_TOKK_CONTROL || kind == KILN_TOKK_UNKNOWN || kind == KILN_TOKK_USER))
            st = add_added(&b, i, s, strlen(s), kind == KILN_TOKK_USER ? 0 : KILN_TOKA_SPECIAL);
    }
    if (st) goto done;
    if ((st = meta_id(m, what, "tokenizer.ggml.bos_token_id", n, &t->bos)) ||
        (st = meta_id(m, what, "tokenizer.ggml.eos_token_id", n, &t->eos)) ||
        (st = meta_id(m, what, "tokenizer.ggml.unknown_token_id", n, &unk)) ||
        (st = meta_flag(m, what, "tokenizer.ggml.add_bos_token", KILN_TOKF_ADD_BOS, spm,
                        &t->flags)) ||
        (st = meta_flag(m, what, "tokenizer.ggml.add_eos_token", KILN_TOKF_ADD_EOS, 0, &t->flags)))
        goto done;
    /* SentencePiece falls back to <unk> for a byte without a <0xNN> piece. A
     * byte-level vocabulary's unknown_token_id is the transformers-level
     * unk_token; the BPE model itself has none (GPT-2, SmolLM2), so, as in
     * Hugging Face, a byte without a token is dropped. */
    if (spm) t->unk = unk;
    if (spm) {
        if ((st = meta_flag(m, what, "tokenizer.ggml.add_space_prefix", KILN_TOKF_SPACE_PREFIX, 1,
                            &t->flags)))
            goto done;
        for (int v = 0; v < 256; v++) { /* byte fallback: the <0xNN> pieces */
            char piece[8];
            snprintf(piece, sizeof piece, "<0x%02X>", v);
            int id = str_id(&b, piece, 6);
            if (id >= 0 && !types)
                t->kinds[id] = KILN_TOKK_BYTE; /* no token_type: known by their text */
            t->byte_id[v] = id >= 0 && t->kinds[id] == KILN_TOKK_BYTE ? id : -1;
        }
    } else {
        const char *name = pre ? pre->s : "default";
        size_t k = 0;
        while (k < sizeof g_pre / sizeof *g_pre && strcmp(g_pre[k].pre, name))
            k++;
        if (k == sizeof g_pre / sizeof *g_pre) {
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.pre '%.40s' is not a pre-tokenizer Kiln knows "
                            "(gpt-2, llama-bpe, "
                            "llama3, qwen2, deepseek-r1-qwen, smollm)",
                            what, name);
            goto done;
        }
        for (int r = 0; r < 2 && g_pre[k].re[r] && !st; r++)
            st = add_split(&b, g_pre[k].re[r]);
        if (g_pre[k].nfc) t->flags |= KILN_TOKF_NFC;
        if (st) goto done;
        if (merges->n > (1u << 24)) {
            st = kiln_error(KILN_ERR_FORMAT, "%s: %u merges (at most 2^24)", what, merges->n);
            goto done;
        }
        if (merges->n && !(t->merges = kiln_malloc(sizeof(int32_t) * 3 * merges->n))) {
            st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        t->n_merges = (int)merges->n;
        for (uint32_t i = 0; i < merges->n && !st; i++) {
            const char *s = merges->sa[i], *sp = strchr(s, ' ');
            if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) {
                st = kiln_error(
                    KILN_ERR_FORMAT,
                    "%s: tokenizer.ggml.merges[%u] '%.60s' is not two tokens split by one space",
                    what, i, s);
                break;
            }
            st = add_merge(&b, (int)i, s, (size_t)(sp - s), sp + 1, strlen(sp + 1));
        }
        if (st) goto done;
        find_byte_tokens(&b);
    }
    st = builder_finish(&b, out);
done:
    builder_free(&b);
    return st;
}

/* ---- tokenizer.json ----------------------------------------------------------------- */

static const char *jtype(const kiln_json *o) {
    const kiln_json *t = kiln_json_get(o, "type");
    return t && t->type == KILN_JSON_STRING ? t->s : "";
}

static kiln_status json_bool(const kiln_json *o, const char *what, const char *key, int dflt,
                             int *out) {
    *out = dflt;
    return kiln_json_get_bool(o, what, key, 0, out);
}

static kiln_status normalizer(builder *b, const kiln_json *n) {
    if (!n || n->type == KILN_JSON_NULL) return KILN_OK;
    const char *type = jtype(n);
    if (!strcmp(type, "NFC")) {
        b->t->flags |= KILN_TOKF_NFC;
        return KILN_OK;
    }
    if (!strcmp(type, "Sequence")) {
        const kiln_json *list;
        kiln_status st = kiln_json_get_arr(n, b->what, "normalizers", 1, &list);
        for (size_t i = 0; !st && i < list->len; i++)
            st = normalizer(b, &list->items[i]);
        return st;
    }
    return kiln_error(KILN_ERR_UNSUPPORTED, "%s: normalizer '%.40s' is not one Kiln runs (NFC)",
                      b->what, type);
}

/* Appends the splits of a pre_tokenizer; *byte_level: a ByteLevel was seen. */
static kiln_status pre_tokenizer(builder *b, const kiln_json *p, int *byte_level) {
    kiln_status st = KILN_OK;
    if (!p || p->type == KILN_JSON_NULL) return KILN_OK;
    const char *type = jtype(p);
    if (!strcmp(type, "Sequence")) {
        const kiln_json *list;
        if ((st = kiln_json_get_arr(p, b->what, "pretokenizers", 1, &list))) return st;
        for (size_t i = 0; !st && i < list->len; i++)
            st = pre_tokenizer(b, &list->items[i], byte_level);
        return st;
    }
    if (!strcmp(type, "ByteLevel")) {
        int prefix, use_regex;
        if ((st = json_bool(p, b->what, "add_prefix_space", 1, &prefix)) ||
            (st = json_bool(p, b->what, "use_regex", 1, &use_regex)))
            return st;
        if (prefix)
            return kiln_error(
                KILN_ERR_UNSUPPORTED,
                "%s: a ByteLevel pre-tokenizer with add_prefix_space is not supported", b->what);
        *byte_level = 1;
        return use_regex ? add_split(b, RE_GPT2) : KILN_OK;
    }
    if (!strcmp(type, "Digits")) {
        int each;
        if ((st = json_bool(p, b->what, "individual_digits", 0, &each))) return st;
        return add_split(b, each ? "\\p{N}" : "\\p{N}+");
    }
    if (!strcmp(type, "Split")) {
        const kiln_json *pat;
        const char *behavior = NULL, *re = NULL, *lit = NULL;
        size_t lit_len = 0;
        int invert;
        if ((st = kiln_json_get_obj(p, b->what, "pattern", 1, &pat)) ||
            (st = kiln_json_get_str(p, b->what, "behavior", 0, &behavior, NULL)) ||
            (st = json_bool(p, b->what, "invert", 0, &invert)) ||
            (st = kiln_json_get_str(pat, b->what, "Regex", 0, &re, NULL)) ||
            (st = kiln_json_get_str(pat, b->what, "String", 0, &lit, &lit_len)))
            return st;
        if (behavior && strcmp(behavior, "Isolated"))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "%s: Split behavior '%.40s' is not supported (Isolated)", b->what,
                              behavior);
        if (invert)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: an inverted Split is not supported",
                              b->what);
        if (re) return add_split(b, re);
        if (!lit || !lit_len)
            return kiln_error(KILN_ERR_FORMAT, "%s: a Split without a Regex or String pattern",
                              b->what);
        /* A literal: every character escaped. */
        char *esc = kiln_malloc(2 * lit_len + 1);
        if (!esc) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        size_t w = 0;
        for (size_t i = 0; i < lit_len; i++) {
            unsigned char c = (unsigned char)lit[i];
            if (c < 0x80 &&
                !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
                esc[w++] = '\\';
            esc[w++] = (char)c;
        }
        esc[w] = 0;
        /* Control characters escape badly ("\\\n" is a newline literal here: fine). */
        st = add_split(b, esc);
        kiln_free(esc);
        return st;
    }
    return kiln_error(
        KILN_ERR_UNSUPPORTED,
        "%s: pre_tokenizer '%.40s' is not one Kiln runs (ByteLevel, Split, Digits, Sequence)",
        b->what, type);
}

/* post_processor: the special tokens add_special puts around a text. */
static kiln_status post_processor(builder *b, const kiln_json *p, int *bos, int *eos) {
    kiln_status st = KILN_OK;
    if (!p || p->type == KILN_JSON_NULL) return KILN_OK;
    const char *type = jtype(p);
    if (!strcmp(type, "ByteLevel")) return KILN_OK;
    if (!strcmp(type, "Sequence")) {
        const kiln_json *list;
        if ((st = kiln_json_get_arr(p, b->what, "processors", 1, &list))) return st;
        for (size_t i = 0; !st && i < list->len; i++)
            st = post_processor(b, &list->items[i], bos, eos);
        return st;
    }
    if (strcmp(type, "TemplateProcessing"))
        return kiln_error(
            KILN_ERR_UNSUPPORTED,
            "%s: post_processor '%.40s' is not one Kiln runs (ByteLevel, TemplateProcessing)",
            b->what, type);
    const kiln_json *single, *specials;
    if ((st = kiln_json_get_arr(p, b->what, "single", 1, &single)) ||
        (st = kiln_json_get_obj(p, b->what, "special_tokens", 0, &specials)))
        return st;
    int seen_a = 0;
    for (size_t i = 0; i < single->len; i++) {
        const kiln_json *e = &single->items[i], *sp = kiln_json_get(e, "SpecialToken");
        if (kiln_json_get(e, "Sequence")) {
            seen_a = 1;
            continue;
        }
        const char *name = NULL;
        if (!sp || (st = kiln_json_get_str(sp, b->what, "id", 1, &name, NULL)))
            return st ? st
                      : kiln_error(KILN_ERR_FORMAT,
                                   "%s: post_processor.single[%zu] is neither a Sequence nor a "
                                   "SpecialToken",
                                   b->what, i);
        const kiln_json *def = kiln_json_get(specials, name),
                        *ids = def ? kiln_json_get(def, "ids") : NULL;
        if (!ids || ids->type != KILN_JSON_ARRAY || ids->len != 1 ||
            ids->items[0].type != KILN_JSON_NUMBER || !ids->items[0].is_int ||
            ids->items[0].i < 0 || ids->items[0].i >= b->t->n_vocab)
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "%s: post_processor special token '%.40s' is not one id in the "
                              "vocabulary",
                              b->what, name);
        int *slot = seen_a ? eos : bos;
        if (*slot >= 0)
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "%s: a post_processor template with more than one special token "
                              "on one side",
                              b->what);
        *slot = (int)ids->items[0].i;
    }
    return KILN_OK;
}

/* tokenizer_config.json's bos_token / eos_token: a string, {content}, or null. */
static kiln_status config_token(builder *b, const kiln_json *cfg, const char *what, const char *key,
                                int *id) {
    const kiln_json *v = kiln_json_get(cfg, key);
    const char *s = NULL;
    size_t len = 0;
    if (!v || v->type == KILN_JSON_NULL) return KILN_OK;
    if (v->type == KILN_JSON_STRING) {
        s = v->s;
        len = v->len;
    } else if (v->type == KILN_JSON_OBJECT) {
        kiln_status st = kiln_json_get_str(v, what, "content", 1, &s, &len);
        if (st) return st;
    } else {
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: key '%s' should be a string or an object with 'content'", what, key);
    }
    for (int i = 0; i < b->t->n_added; i++)
        if (b->t->added[i].len == len && !memcmp(b->t->added[i].text, s, len)) {
            *id = b->t->added[i].id;
            return KILN_OK;
        }
    int k = str_id(b, s, len);
    if (k < 0)
        return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' is '%.40s', which is not a token", what,
                          key, s);
    *id = k;
    return KILN_OK;
}

static kiln_status from_json(const char *json, size_t json_len, const char *cfg_text,
                             size_t cfg_len, const char *what, kiln_tokenizer **out) {
    *out = NULL;
    kiln_json_doc doc = {0}, cdoc = {0};
    builder b;
    memset(&b, 0, sizeof b);
    char cwhat[700];
    snprintf(cwhat, sizeof cwhat, "%s (tokenizer_config.json)", what);
    kiln_status st = kiln_json_parse(json, json_len, what, 0, &doc);
    if (!st && cfg_text) st = kiln_json_parse(cfg_text, cfg_len, cwhat, 0, &cdoc);
    if (st) goto done;
    const kiln_json *root = doc.root, *model, *vocab, *merges, *added = NULL;
    if ((st = kiln_json_get_obj(root, what, "model", 1, &model)) ||
        (st = kiln_json_get_obj(model, what, "vocab", 1, &vocab)) ||
        (st = kiln_json_get_arr(model, what, "merges", 1, &merges)) ||
        (st = kiln_json_get_arr(root, what, "added_tokens", 0, &added)))
        goto done;
    const char *mtype = jtype(model);
    if (*mtype && strcmp(mtype, "BPE")) {
        st = kiln_error(KILN_ERR_UNSUPPORTED, "%s: model type '%.40s' is not one Kiln runs (BPE)",
                        what, mtype);
        goto done;
    }
    int byte_fallback = 0, ignore_merges = 0;
    const char *prefix = NULL, *suffix = NULL;
    if ((st = json_bool(model, what, "byte_fallback", 0, &byte_fallback)) ||
        (st = json_bool(model, what, "ignore_merges", 0, &ignore_merges)) ||
        (st = kiln_json_get_str(model, what, "continuing_subword_prefix", 0, &prefix, NULL)) ||
        (st = kiln_json_get_str(model, what, "end_of_word_suffix", 0, &suffix, NULL)))
        goto done;
    if (byte_fallback || (prefix && *prefix) || (suffix && *suffix)) {
        st = kiln_error(KILN_ERR_UNSUPPORTED,
                        "%s: a BPE model with %s is not supported (byte-level BPE only)", what,
                        byte_fallback ? "byte_fallback" : "a subword prefix or suffix");
        goto done;
    }
    /* Ids: the vocabulary and the added tokens. */
    int64_t max_id = -1;
    for (size_t i = 0; i < vocab->len; i++) {
        const kiln_json *v = &vocab->items[i];
        if (v->type != KILN_JSON_NUMBER || !v->is_int || v->i < 0 || v->i >= MAX_VOCAB) {
            st = kiln_error(KILN_ERR_FORMAT,
                            "%s: model.vocab['%.40s'] should be an id in 0..%d (byte %zu)", what,
                            vocab->keys[i].s, MAX_VOCAB - 1, v->offset);
            goto done;
        }
        if (v->i > max_id) max_id = v->i;
    }
    for (size_t i = 0; added && i < added->len; i++) {
        int64_t id = -1;
        if ((st = kiln_json_get_int(&added->items[i], what, "id", 1, &id))) goto done;
        if (id < 0 || id >= MAX_VOCAB) {
            st = kiln_error(KILN_ERR_FORMAT, "%s: added_tokens[%zu] has id %lld (0..%d allowed)",
                            what, i, (long long)id, MAX_VOCAB - 1);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    if ((st = builder_init(&b, (int)(max_id + 1), KILN_TOKM_BPE, what))) goto done;
    kiln_tokenizer *t = b.t;
    for (size_t i = 0; i < vocab->len && !st; i++) {
        int id = (int)vocab->items[i].i;
        if (t->kinds[id] != KILN_TOKK_UNUSED) {
            st = kiln_error(KILN_ERR_FORMAT, "%s: id %d appears twice in model.vocab", what, id);
            break;
        }
        st = set_token(&b, id, vocab->keys[i].s, vocab->keys[i].len, KILN_TOKK_NORMAL, 0.0f);
    }
    if (st) goto done;
    if (ignore_merges) t->flags |= KILN_TOKF_IGNORE_MERGES;
    /* Merges: "a b" strings, or ["a", "b"] pairs. */
    if (merges->len > (1u << 24)) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: %zu merges (at most 2^24)", what, merges->len);
        goto done;
    }
    if (merges->len && !(t->merges = kiln_malloc(sizeof(int32_t) * 3 * merges->len))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    t->n_merges = (int)merges->len;
    for (size_t i = 0; i < merges->len && !st; i++) {
        const kiln_json *e = &merges->items[i];
        if (e->type == KILN_JSON_STRING) {
            const char *sp = memchr(e->s, ' ', e->len);
            if (!sp || sp == e->s || sp + 1 == e->s + e->len ||
                memchr(sp + 1, ' ', (size_t)(e->s + e->len - sp - 1))) {
                st = kiln_error(
                    KILN_ERR_FORMAT,
                    "%s: merge %zu '%.60s' is not two tokens split by one space (byte %zu)", what,
                    i, e->s, e->offset);
                break;
            }
            st = add_merge(&b, (int)i, e->s, (size_t)(sp - e->s), sp + 1,
                           (size_t)(e->s + e->len - sp - 1));
        } else if (e->type == KILN_JSON_ARRAY && e->len == 2 &&
                   e->items[0].type == KILN_JSON_STRING && e->items[1].type == KILN_JSON_STRING) {
            st = add_merge(&b, (int)i, e->items[0].s, e->items[0].len, e->items[1].s,
                           e->items[1].len);
        } else {
            st = kiln_error(KILN_ERR_FORMAT,
                            "%s: merge %zu should be a string or a pair of strings (byte %zu)",
                            what, i, e->offset);
        }
    }
    if (st) goto done;
    find_byte_tokens(&b); /* before added tokens can take over a byte's entry */
    /* Added tokens: matched in the text first; special ones are control tokens. */
    for (size_t i = 0; added && i < added->len && !st; i++) {
        const kiln_json *a = &added->items[i];
        int64_t id;
        const char *content;
        size_t clen;
        int special, lstrip, rstrip, single;
        if ((st = kiln_json_get_int(a, what, "id", 1, &id)) ||
            (st = kiln_json_get_str(a, what, "content", 1, &content, &clen)) ||
            (st = json_bool(a, what, "special", 0, &special)) ||
            (st = json_bool(a, what, "lstrip", 0, &lstrip)) ||
            (st = json_bool(a, what, "rstrip", 0, &rstrip)) ||
            (st = json_bool(a, what, "single_word", 0, &single)))
            break;
        if ((st = set_token(&b, (int)id, content, clen,
                            special ? KILN_TOKK_CONTROL : KILN_TOKK_USER, 0.0f)))
            break;
        st = add_added(&b, (int)id, content, clen,
                       (special ? KILN_TOKA_SPECIAL : 0) | (lstrip ? KILN_TOKA_LSTRIP : 0) |
                           (rstrip ? KILN_TOKA_RSTRIP : 0) | (single ? KILN_TOKA_SINGLE_WORD : 0));
    }
    if (st) goto done;
    const kiln_json *unk = kiln_json_get(model, "unk_token");
    if (unk && unk->type == KILN_JSON_STRING) {
        int id = str_id(&b, unk->s, unk->len);
        t->unk = id; /* an unknown token that is no token: none */
    }
    int byte_level = 0;
    if ((st = normalizer(&b, kiln_json_get(root, "normalizer"))) ||
        (st = pre_tokenizer(&b, kiln_json_get(root, "pre_tokenizer"), &byte_level)))
        goto done;
    const kiln_json *dec = kiln_json_get(root, "decoder");
    if (!byte_level && !(dec && !strcmp(jtype(dec), "ByteLevel"))) {
        st = kiln_error(KILN_ERR_UNSUPPORTED,
                        "%s: not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer or "
                        "decoder); Kiln runs byte-level BPE from tokenizer.json",
                        what);
        goto done;
    }
    int bos = -1, eos = -1;
    if ((st = post_processor(&b, kiln_json_get(root, "post_processor"), &bos, &eos))) goto done;
    if (bos >= 0) t->flags |= KILN_TOKF_ADD_BOS;
    if (eos >= 0) t->flags |= KILN_TOKF_ADD_EOS;
    t->bos = bos;
    t->eos = eos;
    if (cdoc.root) {
        const kiln_json *c = cdoc.root;
        int add_bos = -1, add_eos = -1;
        if ((st = config_token(&b, c, cwhat, "bos_token", &t->bos)) ||
            (st = config_token(&b, c, cwhat, "eos_token", &t->eos)) ||
            (st = json_bool(c, cwhat, "add_bos_token", -1, &add_bos)) ||
            (st = json_bool(c, cwhat, "add_eos_token", -1, &add_eos)))
            goto done;
        if (add_bos >= 0)
            t->flags = add_bos ? t->flags | KILN_TOKF_ADD_BOS : t->flags & ~KILN_TOKF_ADD_BOS;
        if (add_eos >= 0)
            t->flags = add_eos ? t->flags | KILN_TOKF_ADD_EOS : t->flags & ~KILN_TOKF_ADD_EOS;
    }
    st = builder_finish(&b, out);
done:
    builder_free(&b);
    kiln_json_free(&doc);
    kiln_json_free(&cdoc);
    return st;
}

/* ---- the builder ---------------------------------------------------------------------- */

/* What a tokenizer is built from: one of a llama2.c tokenizer.bin, a
 * tokenizer.json text, or a module's metadata. */
typedef struct {
    const char *what; /* names the source in messages (the tokenizer.bin names itself) */
    const char *bin;  /* tokenizer.bin, of n_vocab pieces (0: every record it holds) */
    int n_vocab;
    const char *json, *config; /* tokenizer.json; tokenizer_config.json or NULL */
    size_t json_len, config_len;
    const kiln_module *meta; /* hf.tokenizer_json (+ hf.tokenizer_config_json), or GGUF
                                tokenizer.ggml.* as kiln_gguf_store_meta keeps them */
} source;

/* The one builder: every tokenizer Kiln makes from a file comes from here.
 * *out is NULL (and the status OK) when the metadata describes none. */
static kiln_status build(const source *s, kiln_tokenizer **out) {
    *out = NULL;
    if (s->bin) return kiln_tokenizer_load_llama2c(s->bin, s->n_vocab, out);
    if (s->json) return from_json(s->json, s->json_len, s->config, s->config_len, s->what, out);
    const kiln_meta *tj = kiln_meta_find(s->meta, "hf.tokenizer_json"),
                    *tc = kiln_meta_find(s->meta, "hf.tokenizer_config_json");
    if (tj && tj->type == KILN_META_STR)
        return from_json(tj->s, strlen(tj->s), tc && tc->type == KILN_META_STR ? tc->s : NULL,
                         tc && tc->type == KILN_META_STR ? strlen(tc->s) : 0, s->what, out);
    return from_gguf_meta(s->meta, s->what, out);
}

kiln_status kiln_import_tokenizer(kiln_import *imp, const char *path, const char *tokenizer_bin,
                                  kiln_module *m) {
    imp->tokenizer_note[0] = 0;
    char what[600];
    snprintf(what, sizeof what, "'%s'", kiln_basename(path));
    source src = {.what = what, .bin = tokenizer_bin, .n_vocab = imp->cfg.n_vocab, .meta = m};
    kiln_tokenizer *t;
    kiln_status st = build(&src, &t);
    if (st == KILN_ERR_UNSUPPORTED && !tokenizer_bin) {
        snprintf(imp->tokenizer_note, sizeof imp->tokenizer_note, "no tokenizer stored: %s",
                 kiln_last_error());
        return KILN_OK;
    }
    if (st || !t) return st;
    kiln_wbuf b = {0};
    kiln_tokenizer_serialize(t, &b);
    kiln_tokenizer_free(t);
    if (b.failed) {
        kiln_wbuf_free(&b);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    m->tokenizer = b.data;
    m->tokenizer_len = b.len;
    return tokenizer_bin ? kiln_meta_set_str(m, "tokenizer.model", "llama2c") : KILN_OK;
}

/* Copies the tokenizer.* metadata of a GGUF file into m, as the importer
 * stores it; an array of more than 2^25 elements is refused before any
 * allocation (no tokenizer has one). */
static kiln_status gguf_tokenizer_meta(const kiln_gguf *g, const char *path, kiln_module *m) {
    kiln_status st = KILN_OK;
    for (uint64_t k = 0; k < g->n_kv && !st; k++) {
        const kiln_gguf_kv *kv = &g->kv[k];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        if (kv->type == KILN_GGUF_ARRAY && kv->n > MAX_VOCAB * 8ull)
            return kiln_error(KILN_ERR_FORMAT, "'%s': metadata array '%s' has %llu elements",
                              kiln_basename(path), kv->key, (unsigned long long)kv->n);
        st = kiln_gguf_store_meta(m, g, path, kv);
    }
    return st;
}

/* After a '{': whitespace then '"' or '}' (a tokenizer.bin whose
 * max_token_length is 123 also starts with '{', then zero bytes). */
static int looks_like_json(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
        i++;
    return i < n && (p[i] == '"' || p[i] == '}');
}

kiln_status kiln_tokenizer_load(const char *path, kiln_tokenizer **out) {
    *out = NULL;
    kiln_file_map map;
    kiln_status st = kiln_file_map_open(path, &map);
    if (st) return st;
    char what[600];
    snprintf(what, sizeof what, "'%s'", kiln_basename(path));
    source src = {.what = what};
    size_t i = 0;
    while (i < map.size && (map.data[i] == ' ' || map.data[i] == '\n' || map.data[i] == '\r' ||
                            map.data[i] == '\t'))
        i++;
    if (map.size >= 4 && memcmp(map.data, "GGUF", 4) == 0) {
        /* The tokenizer.* metadata, kept as the importer keeps it. */
        kiln_gguf g;
        kiln_module m;
        memset(&m, 0, sizeof m);
        st = kiln_gguf_parse(map.data, map.size, path, &g);
        if (st) kiln_gguf_free(&g); /* the parse leaves what it read for the caller to free */
        if (!st) {
            src.meta = &m;
            if (!(st = gguf_tokenizer_meta(&g, path, &m))) st = build(&src, out);
            if (!st && !*out)
                st = kiln_error(KILN_ERR_FORMAT, "%s: a GGUF file without tokenizer.ggml.model",
                                what);
            kiln_gguf_free(&g);
        }
        kiln_module_free(&m);
    } else if (i < map.size && map.data[i] == '{' &&
               looks_like_json(map.data + i + 1, map.size - i - 1)) {
        /* tokenizer.json, with tokenizer_config.json from the same folder when there is one. */
        char cfg_path[4200];
        const char *slash = strrchr(path, '/');
        snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json",
                 slash ? (int)(slash - path + 1) : 0, path);
        kiln_file_map cfg = {0};
        FILE *f = fopen(cfg_path, "rb");
        int have_cfg = f != NULL;
        if (f) fclose(f);
        if (have_cfg && (st = kiln_file_map_open(cfg_path, &cfg))) have_cfg = 0;
        if (!st) {
            src.json = (const char *)map.data;
            src.json_len = map.size;
            src.config = have_cfg ? (const char *)cfg.data : NULL;
            src.config_len = have_cfg ? cfg.size : 0;
            st = build(&src, out);
        }
        if (have_cfg) kiln_file_map_close(&cfg);
    } else {
        kiln_file_map_close(&map);
        src.bin = path; /* a llama2.c tokenizer.bin: every record it holds */
        return build(&src, out);
    }
    kiln_file_map_close(&map);
    return st;
}
