/* test_tokenizer_bpe.c: the table tokenizers (byte-level BPE, GGUF
 * SentencePiece) and what they stand on: UTF-8, Unicode tables, NFC, the
 * regex engine. Synthetic tokenizer.json and GGUF vocabularies written by the
 * tests pin each rule (merge ranks and ties, added tokens, NFC,
 * ignore_merges, byte fallback, space prefix); the section form is
 * round-tripped and damaged; and, when ../shared/data is present, the real
 * Qwen3 and Llama-3 tokenizer.json must give the ids of cases.json and of
 * llama.cpp's vectors (with the GPT-2 and Llama-2 SentencePiece GGUFs), and
 * decode back to the input. tests/test_tokenizer_hf.sh compares SmolLM2's
 * GGUF tokenizer with Hugging Face `tokenizers`. */
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base/json.h"
#include "fixtures.h"
#include "gguf_writer.h"
#include "harness.h"
#include "kiln/kiln_compile.h"
#include "kiln/kiln_llm.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"
#include "llm/unicode_regex.h"

/* ---- helpers ------------------------------------------------------------------- */

/* Encodes into a malloc'd array; *n = -1 on failure (message printed). */
static int32_t *enc(const kiln_tokenizer *t, const char *s, size_t len, unsigned flags, int *n) {
    int cap = 2 * (int)len + 8;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    *n = -1;
    if (ids && kiln_tokenizer_encode_flags(t, s, len, flags, ids, cap, n)) {
        fprintf(stderr, "  encode: %s\n", kiln_last_error());
        *n = -1;
    }
    return ids;
}

/* Decodes ids (each after its predecessor) into a malloc'd buffer. */
static char *dec(const kiln_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, k = 0;
    char *out = malloc(cap);
    for (int i = 0; out && i < n; i++) {
        size_t pl;
        const char *p = kiln_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &pl);
        if (!p) {
            free(out);
            return NULL;
        }
        while (k + pl + 1 > cap) {
            cap *= 2;
            char *o2 = realloc(out, cap);
            if (!o2) {
                free(out);
                return NULL;
            }
            out = o2;
        }
        memcpy(out + k, p, pl);
        k += pl;
    }
    if (out) out[k] = 0;
    *len = k;
    return out;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n && i < 64; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

static int same_ids(const kiln_tokenizer *t, const char *s, size_t len, unsigned flags,
                    const int32_t *want, int nw) {
    int n;
    int32_t *got = enc(t, s, len, flags, &n);
    int ok = got && n == nw && (n == 0 || memcmp(got, want, sizeof *got * (size_t)n) == 0);
    if (!ok) {
        fprintf(stderr, "  text \"%.*s\"\n", (int)(len > 120 ? 120 : len), s);
        print_ids("want", want, nw);
        if (got) print_ids("got ", got, n);
    }
    free(got);
    return ok;
}

#define ASSERT_IDS(t, s, flags, ...)                                                               \
    do {                                                                                           \
        static const int32_t w_[] = {__VA_ARGS__};                                                 \
        ASSERT_MSG(same_ids(t, s, strlen(s), flags, w_ + 1, (int)(sizeof w_ / sizeof *w_) - 1),    \
                   "\"%s\" encoded wrongly", s);                                                   \
    } while (0)

/* decode(encode(s)) == want (want NULL: s itself). */
static int round_trip(const kiln_tokenizer *t, const char *s, size_t len, const char *want,
                      size_t wlen) {
    int n;
    int32_t *ids = enc(t, s, len, 0, &n);
    size_t got = 0;
    char *back = ids && n >= 0 ? dec(t, ids, n, &got) : NULL;
    if (!want) want = s, wlen = len;
    int ok = back && got == wlen && memcmp(back, want, wlen) == 0;
    if (!ok)
        fprintf(stderr, "  round trip of %zu bytes gave %zu: \"%.*s\"\n", len, got,
                (int)(got > 80 ? 80 : got), back ? back : "");
    free(ids);
    free(back);
    return ok;
}

/* Appends s as a JSON string literal. */
static void jstr(char **p, const char *s, size_t n) {
    *(*p)++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *(*p)++ = '\\';
            *(*p)++ = (char)c;
        } else if (c < 0x20) {
            *p += sprintf(*p, "\\u%04x", c);
        } else {
            *(*p)++ = (char)c;
        }
    }
    *(*p)++ = '"';
}

/* ---- UTF-8 and the Unicode tables ---------------------------------------------------- */

TEST(utf8_keeps_every_byte) {
    static const struct {
        const char *s;
        size_t n;
        uint32_t cp;
        size_t used;
    } cases[] = {
        {"A", 1, 'A', 1},
        {"\xC3\xA9", 2, 0xE9, 2},
        {"\xE2\x82\xAC", 3, 0x20AC, 3},
        {"\xF0\x9F\x98\x80", 4, 0x1F600, 4},
        {"\xC3", 1, KILN_UC_RAW + 0xC3, 1},             /* truncated */
        {"\xE2\x82", 2, KILN_UC_RAW + 0xE2, 1},         /* truncated */
        {"\x80", 1, KILN_UC_RAW + 0x80, 1},             /* lone continuation */
        {"\xC0\x80", 2, KILN_UC_RAW + 0xC0, 1},         /* overlong NUL */
        {"\xE0\x80\x80", 3, KILN_UC_RAW + 0xE0, 1},     /* overlong */
        {"\xED\xA0\x80", 3, KILN_UC_RAW + 0xED, 1},     /* surrogate */
        {"\xF4\x90\x80\x80", 4, KILN_UC_RAW + 0xF4, 1}, /* past U+10FFFF */
        {"\xFF", 1, KILN_UC_RAW + 0xFF, 1},
        {"\xC3\x41", 2, KILN_UC_RAW + 0xC3, 1}, /* lead then ASCII */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t used;
        uint32_t cp = kiln_utf8_decode((const uint8_t *)cases[i].s, cases[i].n, &used);
        ASSERT_MSG(cp == cases[i].cp && used == cases[i].used, "case %zu: U+%X (%zu bytes)", i, cp,
                   used);
        uint8_t b[4];
        size_t k = kiln_utf8_encode(cp, b);
        ASSERT_EQ_I(k, used);
        ASSERT(memcmp(b, cases[i].s, k) == 0);
    }
    /* Every code point encodes and decodes back. */
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += cp < 0x3000 ? 1 : 97) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        uint8_t b[4];
        size_t k = kiln_utf8_encode(cp, b), used;
        ASSERT_EQ_U(kiln_utf8_decode(b, k, &used), cp);
        ASSERT_EQ_I(used, k);
    }
}

TEST(unicode_categories_and_folding) {
    ASSERT_EQ_I(kiln_uc_category('a'), KILN_UC_Ll);
    ASSERT_EQ_I(kiln_uc_category('Z'), KILN_UC_Lu);
    ASSERT_EQ_I(kiln_uc_category('7'), KILN_UC_Nd);
    ASSERT_EQ_I(kiln_uc_category(0x4E2D), KILN_UC_Lo);  /* 中 */
    ASSERT_EQ_I(kiln_uc_category(0x2160), KILN_UC_Nl);  /* Ⅰ */
    ASSERT_EQ_I(kiln_uc_category(0xBD), KILN_UC_No);    /* ½ */
    ASSERT_EQ_I(kiln_uc_category(0x301), KILN_UC_Mn);   /* combining acute */
    ASSERT_EQ_I(kiln_uc_category(0x1F600), KILN_UC_So); /* 😀 */
    ASSERT_EQ_I(kiln_uc_category(0x200B), KILN_UC_Cf);
    ASSERT_EQ_I(kiln_uc_category(0x1C89),
                KILN_UC_Lu); /* new in Unicode 16.0, as in tokenizers' Oniguruma */
    ASSERT_EQ_I(kiln_uc_category(0x88F), KILN_UC_Cn); /* new in 17.0: not yet */
    ASSERT_EQ_I(kiln_uc_category(KILN_UC_RAW + 0x80), KILN_UC_Cn);
    /* White_Space: U+0085 and U+00A0 are, U+001C and U+200B are not. */
    ASSERT(kiln_uc_props(0x85) & KILN_UC_SPACE);
    ASSERT(kiln_uc_props(0xA0) & KILN_UC_SPACE);
    ASSERT(kiln_uc_props(0x3000) & KILN_UC_SPACE);
    ASSERT(kiln_uc_props('\v') & KILN_UC_SPACE);
    ASSERT(!(kiln_uc_props(0x1C) & KILN_UC_SPACE));
    ASSERT(!(kiln_uc_props(0x200B) & KILN_UC_SPACE));
    ASSERT(!(kiln_uc_props(0x180E) & KILN_UC_SPACE));
    /* Simple case folding. */
    ASSERT_EQ_U(kiln_uc_fold('S'), 's');
    ASSERT_EQ_U(kiln_uc_fold(0x17F), 's');  /* ſ */
    ASSERT_EQ_U(kiln_uc_fold(0x212A), 'k'); /* Kelvin */
    ASSERT_EQ_U(kiln_uc_fold(0xDF), 0xDF);  /* ß folds to "ss": no simple folding */
    ASSERT_EQ_U(kiln_uc_fold(0x1E9E), 0xDF);
    ASSERT_EQ_U(kiln_uc_fold(0x410), 0x430);
    ASSERT_STR_EQ(kiln_uc_version, "16.0.0");
    ASSERT_STR_EQ(kiln_uc_nfc_version, "9.0.0");
}

static int nfc_is(const uint32_t *in, size_t n, const uint32_t *want, size_t nw) {
    uint32_t out[64];
    size_t k = kiln_uc_nfc(in, n, out);
    int ok = k == nw && memcmp(out, want, sizeof *out * k) == 0;
    if (!ok) {
        fprintf(stderr, "  nfc gave:");
        for (size_t i = 0; i < k; i++)
            fprintf(stderr, " U+%04X", out[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

#define NFC_IS(in, want) nfc_is(in, sizeof in / sizeof *in, want, sizeof want / sizeof *want)

TEST(nfc) {
    {
        uint32_t in[] = {'e', 0x301}, w[] = {0xE9};
        ASSERT(NFC_IS(in, w));
    }
    {
        uint32_t in[] = {0xE9}, w[] = {0xE9};
        ASSERT(NFC_IS(in, w));
    }
    /* Reordering: dot below (220) before acute (230), then both compose. */
    {
        uint32_t in[] = {'s', 0x307, 0x323}, w[] = {0x1E69};
        ASSERT(NFC_IS(in, w));
    }
    /* The first mark composes; the next (another class) is not blocked by
     * nothing in between, but no composite exists: a + ring below + ring above. */
    {
        uint32_t in[] = {'a', 0x30A, 0x325}, w[] = {0x1E01, 0x30A};
        ASSERT(NFC_IS(in, w));
    }
    /* Two marks of one class: the second is blocked by the first. */
    {
        uint32_t in[] = {'a', 0x301, 0x301}, w[] = {0xE1, 0x301};
        ASSERT(NFC_IS(in, w));
    }
    /* Singletons: Ångström sign -> Å; Ohm -> Omega. */
    {
        uint32_t in[] = {0x212B}, w[] = {0xC5};
        ASSERT(NFC_IS(in, w));
    }
    {
        uint32_t in[] = {0x2126}, w[] = {0x3A9};
        ASSERT(NFC_IS(in, w));
    }
    /* Composition exclusion: U+0958 stays decomposed. */
    {
        uint32_t in[] = {0x958}, w[] = {0x915, 0x93C};
        ASSERT(NFC_IS(in, w));
    }
    /* Hangul: L V T compose; LV + T composes; a lone jamo stays. */
    {
        uint32_t in[] = {0x1112, 0x1161, 0x11AB}, w[] = {0xD55C};
        ASSERT(NFC_IS(in, w));
    }
    {
        uint32_t in[] = {0xD558, 0x11AB}, w[] = {0xD55C};
        ASSERT(NFC_IS(in, w));
    }
    {
        uint32_t in[] = {0x1161}, w[] = {0x1161};
        ASSERT(NFC_IS(in, w));
    }
    /* Starters that compose (Tamil o: U+0BC6 + U+0BBE -> U+0BCA). */
    {
        uint32_t in[] = {0xBC6, 0xBBE}, w[] = {0xBCA};
        ASSERT(NFC_IS(in, w));
    }
    /* A leading mark, and a raw byte, pass through. */
    {
        uint32_t in[] = {0x301, 'e'}, w[] = {0x301, 'e'};
        ASSERT(NFC_IS(in, w));
    }
    {
        uint32_t in[] = {'e', KILN_UC_RAW + 0x80, 0x301}, w[] = {'e', KILN_UC_RAW + 0x80, 0x301};
        ASSERT(NFC_IS(in, w));
    }
    /* Unicode 9.0 data, as Hugging Face's normalizer: U+0D3C (class 9 since
     * 10.0) is a starter here, so it is not moved before U+0300. */
    {
        uint32_t in[] = {0x300, 0xD3C}, w[] = {0x300, 0xD3C};
        ASSERT(NFC_IS(in, w));
    }
    {
        uint32_t in[] = {'a', 'b'};
        ASSERT(kiln_uc_nfc_quick(in, 2));
    }
    {
        uint32_t in[] = {'a', 0x301};
        ASSERT(!kiln_uc_nfc_quick(in, 2));
    }
}

/* ---- the regex engine ----------------------------------------------------------------- */

/* All matches of pattern in text (UTF-8), written "a|b|c" (matches only). */
static int matches(const char *pattern, const char *text, char *out, size_t cap) {
    kiln_regex *re;
    if (kiln_regex_compile(pattern, strlen(pattern), &re)) {
        fprintf(stderr, "  compile: %s\n", kiln_last_error());
        return -1;
    }
    size_t len = strlen(text), n = 0, offs[512];
    uint32_t cp[512];
    for (size_t i = 0, used; i < len && n < 511; i += used) {
        offs[n] = i;
        cp[n++] = kiln_utf8_decode((const uint8_t *)text + i, len - i, &used);
    }
    offs[n] = len;
    size_t pos = 0, w = 0;
    out[0] = 0;
    int r = 0;
    while (pos <= n) {
        size_t b, e;
        r = kiln_regex_find(re, cp, n, pos, &b, &e);
        if (r <= 0) break;
        w += (size_t)snprintf(out + w, cap - w, "%s%.*s", w ? "|" : "", (int)(offs[e] - offs[b]),
                              text + offs[b]);
        pos = e > b ? e : b + 1;
    }
    kiln_regex_free(re);
    return r < 0 ? -1 : 0;
}

#define ASSERT_MATCHES(pattern, text, want)                                                        \
    do {                                                                                           \
        char got_[2048];                                                                           \
        ASSERT_MSG(matches(pattern, text, got_, sizeof got_) == 0, "pattern %s failed", pattern);  \
        ASSERT_MSG(!strcmp(got_, want), "/%s/ on \"%s\": got \"%s\", want \"%s\"", pattern, text,  \
                   got_, want);                                                                    \
    } while (0)

#define GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3                                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"                                                               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

TEST(regex_semantics) {
    ASSERT_MATCHES("a|ab", "ab ab", "a|a"); /* leftmost-first, not longest */
    ASSERT_MATCHES("ab|a", "ab a", "ab|a");
    ASSERT_MATCHES("a+", "caaab aa", "aaa|aa");
    ASSERT_MATCHES("a+?", "aaa", "a|a|a");
    ASSERT_MATCHES("a*?b", "aab", "aab");
    ASSERT_MATCHES("a??b", "ab", "ab");
    ASSERT_MATCHES("a{2}", "aaaaa", "aa|aa");
    ASSERT_MATCHES("a{2,3}", "aaaaaaa", "aaa|aaa");
    ASSERT_MATCHES("a{2,}", "a aa aaaa", "aa|aaaa");
    ASSERT_MATCHES("a{,2}", "a{,2}", "a{,2}"); /* not a quantifier: literal */
    ASSERT_MATCHES("x{", "x{", "x{");
    ASSERT_MATCHES("a++a", "aaa", ""); /* possessive: no backtracking */
    ASSERT_MATCHES("(ab)+", "ababa ab", "abab|ab");
    ASSERT_MATCHES("(?:ab){2}c", "ababc abc", "ababc");
    ASSERT_MATCHES("(a|b)*c", "abbac c", "abbac|c");
    ASSERT_MATCHES("(a*)*b", "aaab", "aaab"); /* an empty iteration ends the loop */
    ASSERT_MATCHES("\\s+(?!\\S)", "a   b  ", "  |  ");
    ASSERT_MATCHES("a(?=b)", "ab ac", "a");
    ASSERT_MATCHES("[^a-c]+", "abcdefa", "def");
    ASSERT_MATCHES("[a\\-c]+", "a-cb", "a-c");
    ASSERT_MATCHES("[-a]+", "-a-b", "-a-");
    ASSERT_MATCHES("[]a]+", "]a]b", "]a]");
    ASSERT_MATCHES("\\p{L}+", "héllo wörld 42", "héllo|wörld");
    ASSERT_MATCHES("\\pN+", "a12 ½Ⅳ", "12|½Ⅳ");
    ASSERT_MATCHES("\\P{L}+", "ab12cd", "12");
    ASSERT_MATCHES("[\\p{Lu}\\d]+", "ABc12d", "AB|12");
    ASSERT_MATCHES("\\w+", "a_b-c", "a_b|c");
    ASSERT_MATCHES("\\x41\\x{42}\\u0043", "ABC", "ABC");
    ASSERT_MATCHES("\\.", "a.b", ".");
    ASSERT_MATCHES(".+", "ab\ncd", "ab|cd");
    ASSERT_MATCHES("^a", "aa\na", "a|a");
    ASSERT_MATCHES("a$", "aa\na", "a|a");
    ASSERT_MATCHES("\\Aa", "aa", "a");
    ASSERT_MATCHES("a\\z", "aa", "a");
    ASSERT_MATCHES("(?i:'s|'ll)", "'S 'Ll 'ſ 's", "'S|'Ll|'ſ|'s");
    ASSERT_MATCHES("(?i)k", "kKK", "k|K|K"); /* U+212A Kelvin folds to k */
    ASSERT_MATCHES("(?i:[a-c])+", "AbC", "AbC");
    ASSERT_MATCHES("a(?i)b", "aB AB", "aB");
    ASSERT_MATCHES("(?i:a)b", "Ab AB", "Ab");
    /* The GPT-2 and Llama-3 splits. */
    ASSERT_MATCHES(GPT2, "Hello world's 123  x\n\n", "Hello| world|'s| 123| | x|\n\n");
    ASSERT_MATCHES(GPT2, "I'M ok", "I|'|M| ok");
    ASSERT_MATCHES(LLAMA3, "I'M 12345 ok!!\n\n  x", "I|'M| |123|45| ok|!!\n\n| | x");
    ASSERT_MATCHES(LLAMA3, "a\u00a0b", "a|\u00a0b");
}

TEST(regex_refuses_what_it_cannot_do) {
    static const struct {
        const char *p;
        kiln_status st;
    } bad[] = {
        {"(?<=a)b", KILN_ERR_UNSUPPORTED},
        {"(?<!a)b", KILN_ERR_UNSUPPORTED},
        {"(a)\\1", KILN_ERR_UNSUPPORTED},
        {"\\bx", KILN_ERR_UNSUPPORTED},
        {"[[:alpha:]]", KILN_ERR_UNSUPPORTED},
        {"[a&&b]", KILN_ERR_UNSUPPORTED},
        {"\\p{Han}", KILN_ERR_UNSUPPORTED},
        {"(?x)a", KILN_ERR_UNSUPPORTED},
        {"(?>a)", KILN_ERR_UNSUPPORTED},
        {"(ab)++", KILN_ERR_UNSUPPORTED},
        {"a{2000}", KILN_ERR_UNSUPPORTED},
        {"(a", KILN_ERR_FORMAT},
        {"a)", KILN_ERR_FORMAT},
        {"[a", KILN_ERR_FORMAT},
        {"*a", KILN_ERR_FORMAT},
        {"a\\", KILN_ERR_FORMAT},
        {"[z-a]", KILN_ERR_FORMAT},
        {"\\p{L", KILN_ERR_FORMAT},
        {"\xff", KILN_ERR_FORMAT},
        {"(?=a)*", KILN_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kiln_regex *re = NULL;
        kiln_status st = kiln_regex_compile(bad[i].p, strlen(bad[i].p), &re);
        ASSERT_MSG(st == bad[i].st, "pattern %s: status %d, want %d (%s)", bad[i].p, st, bad[i].st,
                   st ? kiln_last_error() : "compiled");
        ASSERT(re == NULL);
        ASSERT_CONTAINS(kiln_last_error(), "at character");
    }
}

TEST(regex_long_inputs) {
    enum { N = 1 << 20 };
    uint32_t *s = malloc(sizeof *s * N);
    ASSERT(s);
    for (int i = 0; i < N; i++)
        s[i] = i % 1000 == 999 ? ' ' : 'a' + i % 26;
    kiln_regex *re;
    ASSERT_OK(kiln_regex_compile(LLAMA3, strlen(LLAMA3), &re));
    size_t pos = 0, b, e, count = 0;
    while (kiln_regex_find(re, s, N, pos, &b, &e) == 1) {
        pos = e;
        count++;
    }
    ASSERT_EQ_I(pos, N);
    kiln_regex_free(re);
    /* One run of a million letters, and of a million spaces: no recursion per character. */
    for (int i = 0; i < N; i++)
        s[i] = 'x';
    ASSERT_OK(kiln_regex_compile(GPT2, strlen(GPT2), &re));
    ASSERT_EQ_I(kiln_regex_find(re, s, N, 0, &b, &e), 1);
    ASSERT_EQ_I(e, N);
    for (int i = 0; i < N; i++)
        s[i] = ' ';
    s[N - 1] = 'x';
    ASSERT_EQ_I(kiln_regex_find(re, s, N, 0, &b, &e), 1);
    ASSERT_EQ_I(e, N - 2); /* \s+(?!\S): all but the space before x */
    kiln_regex_free(re);
    /* Thousands of alternatives, and a literal of thousands of characters. */
    char *big = malloc(40000);
    size_t w = 0;
    for (int i = 0; i < 5000; i++)
        w += (size_t)sprintf(big + w, "%sq%c", i ? "|" : "", 'a' + i % 26);
    ASSERT_OK(kiln_regex_compile(big, w, &re));
    uint32_t qz[2] = {'q', 'z'};
    ASSERT_EQ_I(kiln_regex_find(re, qz, 2, 0, &b, &e), 1);
    ASSERT_EQ_I(e, 2);
    kiln_regex_free(re);
    for (w = 0; w < 30000; w++)
        big[w] = 'x';
    ASSERT_OK(kiln_regex_compile(big, w, &re));
    ASSERT_EQ_I(kiln_regex_find(re, s, N, 0, &b, &e), 0); /* spaces and one x: no 30000 x */
    kiln_regex_free(re);
    free(big);
    /* A group repeated past the recursion bound is an error, not a crash. */
    for (int i = 0; i < N; i++)
        s[i] = i % 2 ? 'b' : 'a';
    ASSERT_OK(kiln_regex_compile("(ab)+", 5, &re));
    int r = kiln_regex_find(re, s, 100000, 0, &b, &e);
    ASSERT_EQ_I(r, KILN_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(kiln_last_error(), "backtracking");
    ASSERT_EQ_I(kiln_regex_find(re, s, 200, 0, &b, &e), 1); /* short inputs are fine */
    ASSERT_EQ_I(e, 200);
    kiln_regex_free(re);
    free(s);
}

/* ---- a synthetic byte-level tokenizer.json -------------------------------------------- */

/* Vocabulary: ids 0..255 are the 256 byte-level characters in byte order,
 * then the merged tokens below, then added tokens. */
static const char *const MERGES[][2] = {
    {"b", "c"},               /* 256 bc     rank 0 */
    {"a", "b"},               /* 257 ab     rank 1 */
    {"a", "a"},               /* 258 aa     rank 2 */
    {"h", "e"},               /* 259 he     */
    {"l", "l"},               /* 260 ll     */
    {"he", "ll"},             /* 261 hell   */
    {"hell", "o"},            /* 262 hello  */
    {"\xC4\xA0", "w"},        /* 263 Ġw */
    {"o", "r"},               /* 264 or     */
    {"\xC4\xA0w", "or"},      /* 265 Ġwor */
    {"l", "d"},               /* 266 ld     */
    {"\xC4\xA0wor", "ld"},    /* 267 Ġworld */
    {"\xC3\x83", "\xC2\xA9"}, /* 268 é (bytes C3 A9 as byte-level characters) */
    {"x", "y"},               /* 269 xy     */
    {"xy", "z"},              /* 270 xyz    */
    {"\xC4\xA0", "\xC4\xA0"}, /* 271 two spaces */
};
#define N_MERGES ((int)(sizeof MERGES / sizeof *MERGES))
enum {
    T_BC = 256,
    T_AB,
    T_AA,
    T_HE,
    T_LL,
    T_HELL,
    T_HELLO,
    T_SP_W,
    T_OR,
    T_SP_WOR,
    T_LD,
    T_SP_WORLD,
    T_E_ACUTE,
    T_XY,
    T_XYZ,
    T_2SP,
    T_VOCAB_END
};
/* Added tokens (ids after the vocabulary; "xyzw" is also a vocabulary entry for ignore_merges). */
enum { T_S = T_VOCAB_END, T_U, T_L, T_R, T_W, T_SS, T_XYZW, T_N };

/* Writes the synthetic tokenizer.json (opts: NFC normalizer, ignore_merges,
 * a TemplateProcessing with BOS) and, when cfg, a tokenizer_config.json. */
static const char *write_synthetic(int nfc, int ignore_merges, int template, const char *cfg) {
    static char dir_path[1024];
    char *buf = malloc(1 << 20), *p = buf;
    p += sprintf(p, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    static const struct {
        const char *text;
        const char *flags;
    } added[] = {
        {"<|s|>", "\"special\":true,\"single_word\":false,\"lstrip\":false,\"rstrip\":false"},
        {"<u>", "\"special\":false,\"single_word\":false,\"lstrip\":false,\"rstrip\":false"},
        {"[L]", "\"special\":true,\"single_word\":false,\"lstrip\":true,\"rstrip\":false"},
        {"[R]", "\"special\":true,\"single_word\":false,\"lstrip\":false,\"rstrip\":true"},
        {"wd", "\"special\":false,\"single_word\":true,\"lstrip\":false,\"rstrip\":false"},
        {"<|s|>x", "\"special\":true,\"single_word\":false,\"lstrip\":false,\"rstrip\":false"},
    };
    for (int i = 0; i < 6; i++) {
        p += sprintf(p, "%s{\"id\":%d,\"content\":", i ? "," : "", T_S + i);
        jstr(&p, added[i].text, strlen(added[i].text));
        p += sprintf(p, ",\"normalized\":false,%s}", added[i].flags);
    }
    p += sprintf(p, "],\"normalizer\":%s,", nfc ? "{\"type\":\"NFC\"}" : "null");
    p += sprintf(p, "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_"
                    "offsets\":true,"
                    "\"use_regex\":true},");
    if (template)
        p += sprintf(
            p,
            "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{"
            "\"id\":"
            "\"<|s|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
            "\"special_tokens\":{\"<|s|>\":{\"id\":\"<|s|>\",\"ids\":[%d],\"tokens\":[\"<|s|>\"]}}}"
            ",",
            T_S);
    else
        p += sprintf(p, "\"post_processor\":null,");
    p +=
        sprintf(p,
                "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
                "\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
                "\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":%s,\"vocab\":{",
                ignore_merges ? "true" : "false");
    for (int b = 0; b < 256; b++) {
        uint8_t ch[4];
        size_t n = kiln_utf8_encode(kiln_tok_byte_char((uint8_t)b), ch);
        if (b) *p++ = ',';
        jstr(&p, (const char *)ch, n);
        p += sprintf(p, ":%d", b);
    }
    for (int i = 0; i < N_MERGES; i++) {
        char joined[64];
        snprintf(joined, sizeof joined, "%s%s", MERGES[i][0], MERGES[i][1]);
        *p++ = ',';
        jstr(&p, joined, strlen(joined));
        p += sprintf(p, ":%d", 256 + i);
    }
    p += sprintf(p, ",\"xyzw\":%d},\"merges\":[", T_XYZW); /* in the vocabulary, made by no merge */
    for (int i = 0; i < N_MERGES; i++) {
        char m[64];
        snprintf(m, sizeof m, "%s %s", MERGES[i][0], MERGES[i][1]);
        if (i) *p++ = ',';
        if (i % 2) { /* both forms: "a b" and ["a", "b"] */
            jstr(&p, m, strlen(m));
        } else {
            *p++ = '[';
            jstr(&p, MERGES[i][0], strlen(MERGES[i][0]));
            *p++ = ',';
            jstr(&p, MERGES[i][1], strlen(MERGES[i][1]));
            *p++ = ']';
        }
    }
    p += sprintf(p, "]}}");
    static int counter;
    snprintf(dir_path, sizeof dir_path, "%s/syn%d", kt_tmpdir(), counter++);
    if (mkdir(dir_path, 0700) != 0) {
        free(buf);
        return NULL;
    }
    static char json_path[1200];
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", dir_path);
    int rc = kt_write_file(json_path, buf, (size_t)(p - buf));
    free(buf);
    if (rc) return NULL;
    if (cfg) {
        char cfg_path[1300];
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir_path);
        if (kt_write_file(cfg_path, cfg, strlen(cfg))) return NULL;
    }
    return json_path;
}

static kiln_tokenizer *synthetic(int nfc, int ignore_merges, int template, const char *cfg) {
    const char *path = write_synthetic(nfc, ignore_merges, template, cfg);
    kiln_tokenizer *t = NULL;
    if (!path || kiln_tokenizer_load(path, &t)) fprintf(stderr, "  load: %s\n", kiln_last_error());
    return t;
}

#define B(c) ((int32_t)(unsigned char)(c))

TEST(bpe_merges_by_rank) {
    kiln_tokenizer *t = synthetic(0, 0, 0, NULL);
    ASSERT(t);
    ASSERT_EQ_I(kiln_tokenizer_vocab_size(t), T_N);
    ASSERT_IDS(t, "hello world", 0, 0, T_HELLO, T_SP_WORLD);
    /* "bc" (rank 0) before "ab" (rank 1): a|bc, never ab|c. */
    ASSERT_IDS(t, "abc", 0, 0, B('a'), T_BC);
    ASSERT_IDS(t, "abd", 0, 0, T_AB, B('d'));
    /* Ties: the leftmost pair merges first. */
    ASSERT_IDS(t, "aaa", 0, 0, T_AA, B('a'));
    ASSERT_IDS(t, "aaaa", 0, 0, T_AA, T_AA);
    /* A merge result that merges again: xy then xyz. */
    ASSERT_IDS(t, "xyz", 0, 0, T_XYZ);
    /* Bytes: é is two bytes merged; a lone invalid byte is its byte token. */
    ASSERT_IDS(t, "\xC3\xA9", 0, 0, T_E_ACUTE);
    ASSERT_IDS(t, "\xC3", 0, 0, 0xC3);
    ASSERT_IDS(t, "\xFF\x80", 0, 0, 0xFF, 0x80);
    /* Pre-tokenizer pieces never merge across: "a b" is a, " b". */
    ASSERT_IDS(t, "a b", 0, 0, B('a'), B(' '), B('b'));
    ASSERT_IDS(t, "  w", 0, 0, B(' '), T_SP_W);
    ASSERT_IDS(t, "a   ", 0, 0, B('a'), T_2SP, B(' '));
    ASSERT_IDS(t, "", 0, 0);
    /* Nothing is added around the text unless asked, and this one adds nothing. */
    ASSERT_IDS(t, "ab", KILN_TOKENIZE_ADD_SPECIAL, 0, T_AB);
    ASSERT_EQ_I(kiln_tokenizer_bos(t), -1);
    ASSERT_EQ_I(kiln_tokenizer_eos(t), -1);
    kiln_tokenizer_free(t);
}

TEST(bpe_added_tokens) {
    kiln_tokenizer *t = synthetic(0, 0, 0, NULL);
    ASSERT(t);
    ASSERT_IDS(t, "ab<|s|>ab", 0, 0, T_AB, T_S, T_AB);
    /* Longest match wins at the same place; special text can be plain text. */
    ASSERT_IDS(t, "<|s|>x<|s|>", 0, 0, T_SS, T_S);
    ASSERT_IDS(t, "<|s|>", KILN_TOKENIZE_PLAIN_SPECIAL, 0, B('<'), B('|'), B('s'), B('|'), B('>'));
    /* A non-special added token matches even then. */
    ASSERT_IDS(t, "a<u>b", KILN_TOKENIZE_PLAIN_SPECIAL, 0, B('a'), T_U, B('b'));
    /* lstrip swallows the whitespace before, rstrip after. */
    ASSERT_IDS(t, "ab  [L]ab", 0, 0, T_AB, T_L, T_AB);
    ASSERT_IDS(t, "ab[R]  ab", 0, 0, T_AB, T_R, T_AB);
    ASSERT_IDS(t, "ab [R] ab", 0, 0, T_AB, B(' '), T_R, T_AB);
    /* single_word: only between non-word characters. */
    ASSERT_IDS(t, "a wd b", 0, 0, B('a'), B(' '), T_W, B(' '), B('b'));
    ASSERT_IDS(t, "awd", 0, 0, B('a'), B('w'), B('d'));
    ASSERT_IDS(t, "wda", 0, 0, B('w'), B('d'), B('a'));
    ASSERT_IDS(t, "wd", 0, 0, T_W);
    /* Special tokens decode to their text; is_special knows them. */
    ASSERT(round_trip(t, "x<|s|>y<u>", 10, NULL, 0));
    ASSERT(kiln_tokenizer_is_special(t, T_S));
    ASSERT(!kiln_tokenizer_is_special(t, T_U));
    ASSERT(!kiln_tokenizer_is_special(t, T_AB));
    ASSERT(!kiln_tokenizer_is_special(t, -1));
    kiln_tokenizer_free(t);
}

TEST(bpe_nfc_and_ignore_merges) {
    kiln_tokenizer *plain = synthetic(0, 0, 0, NULL), *nfc = synthetic(1, 0, 0, NULL),
                   *ign = synthetic(0, 1, 0, NULL);
    ASSERT(plain && nfc && ign);
    /* e + combining acute: as bytes without NFC, é with it. */
    ASSERT_IDS(plain, "e\xCC\x81", 0, 0, B('e'), 0xCC, 0x81);
    ASSERT_IDS(nfc, "e\xCC\x81", 0, 0, T_E_ACUTE);
    ASSERT(round_trip(nfc, "e\xCC\x81", 3, "\xC3\xA9", 2));
    ASSERT(round_trip(plain, "e\xCC\x81", 3, NULL, 0));
    /* Added tokens are found before normalization. */
    ASSERT_IDS(nfc, "e\xCC\x81<|s|>e\xCC\x81", 0, 0, T_E_ACUTE, T_S, T_E_ACUTE);
    /* ignore_merges: a piece that is a whole token is that token. */
    ASSERT_IDS(plain, "xyzw", 0, 0, T_XYZ, B('w'));
    ASSERT_IDS(ign, "xyzw", 0, 0, T_XYZW);
    ASSERT_IDS(ign, "xyz", 0, 0, T_XYZ);
    kiln_tokenizer_free(plain);
    kiln_tokenizer_free(nfc);
    kiln_tokenizer_free(ign);
}

TEST(bpe_special_tokens_from_template_and_config) {
    kiln_tokenizer *t = synthetic(0, 0, 1, NULL);
    ASSERT(t);
    ASSERT_EQ_I(kiln_tokenizer_bos(t), T_S);
    ASSERT_IDS(t, "ab", KILN_TOKENIZE_ADD_SPECIAL, 0, T_S, T_AB);
    ASSERT_IDS(t, "ab", 0, 0, T_AB);
    ASSERT_IDS(t, "", KILN_TOKENIZE_ADD_SPECIAL, 0, T_S);
    /* kiln_tokenizer_encode's add_bos is the same switch. */
    int32_t ids[4];
    int n;
    ASSERT_OK(kiln_tokenizer_encode(t, "ab", 2, 1, ids, 4, &n));
    ASSERT_EQ_I(n, 2);
    ASSERT_EQ_I(ids[0], T_S);
    kiln_tokenizer_free(t);
    /* tokenizer_config.json names BOS/EOS and switches adding them. */
    t = synthetic(
        0, 0, 1,
        "{\"bos_token\":{\"content\":\"<|s|>\"},\"eos_token\":\"[R]\",\"add_bos_token\":false,"
        "\"add_eos_token\":true}");
    ASSERT(t);
    ASSERT_EQ_I(kiln_tokenizer_bos(t), T_S);
    ASSERT_EQ_I(kiln_tokenizer_eos(t), T_R);
    ASSERT_IDS(t, "ab", KILN_TOKENIZE_ADD_SPECIAL, 0, T_AB, T_R);
    kiln_tokenizer_free(t);
    ASSERT(!synthetic(0, 0, 0, "{\"eos_token\":\"<nope>\"}"));
    ASSERT_CONTAINS(kiln_last_error(), "<nope>");
}

TEST(decode_streams_whole_characters) {
    kiln_tokenizer *t = synthetic(0, 0, 0, NULL);
    ASSERT(t);
    /* "é€😀" + an invalid byte, one byte token at a time. */
    static const char text[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xFF\xE2\x82z\xF0\x9F";
    size_t len = sizeof text - 1;
    kiln_detokenizer *d;
    ASSERT_OK(kiln_detokenizer_create(t, &d));
    char out[64];
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        size_t n;
        const char *p = kiln_detokenizer_push(d, (unsigned char)text[i], &n);
        ASSERT(p);
        memcpy(out + w, p, n);
        w += n;
        /* What is out after byte i: never part of a character that can still be finished. */
        static const size_t out_after[16] = {1, 1, 3, 3, 3, 6, 6, 6, 6, 10, 11, 11, 11, 14, 14, 14};
        ASSERT_MSG(w == out_after[i], "after byte %zu: %zu bytes out, want %zu", i, w,
                   out_after[i]);
    }
    size_t n;
    const char *p = kiln_detokenizer_flush(d, &n);
    ASSERT_EQ_I(n, 2); /* F0 9F: held to the end */
    memcpy(out + w, p, n);
    w += n;
    ASSERT_EQ_I(w, len);
    ASSERT(memcmp(out, text, len) == 0);
    ASSERT(kiln_detokenizer_push(d, T_N, &n) == NULL);
    ASSERT(kiln_detokenizer_push(d, -1, &n) == NULL);
    kiln_detokenizer_free(d);
    kiln_detokenizer_free(NULL);
    kiln_tokenizer_free(t);
}

/* ---- the section form ------------------------------------------------------------------- */

static kiln_tokenizer *reload(const kiln_tokenizer *t) {
    kiln_wbuf b = {0};
    kiln_tokenizer_serialize(t, &b);
    kiln_tokenizer *u = NULL;
    if (b.failed || kiln_tokenizer_deserialize(b.data, b.len, "test blob", &u))
        fprintf(stderr, "  reload: %s\n", kiln_last_error());
    kiln_wbuf_free(&b);
    return u;
}

static const char *const SAMPLES[] = {
    "",
    " ",
    "hello world",
    "Hello, World!",
    "  leading and trailing  ",
    "tabs\tand\nnew\r\nlines\n\n",
    "He's here, they'RE gone, I'm, you'll, we'd",
    "1234567890 3.14159 -42 1e10",
    "caf\xC3\xA9 vs cafe\xCC\x81",
    "\xE4\xBD\xBF\xE7\x94\xA8 QNN",
    "\xF0\x9F\x98\x80\xF0\x9F\x9A\x80 emoji",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|begin_of_text|><|eot_id|>",
    "<s>a</s>",
    "\xFF\xFE\x80 bad bytes",
    "def f(x):\n    return x * 2\n",
    "\xC2\xA0nbsp\xE2\x80\x89thin\xE3\x80\x80ideo",
};
#define N_SAMPLES ((int)(sizeof SAMPLES / sizeof *SAMPLES))

static int same_encodings(const kiln_tokenizer *a, const kiln_tokenizer *b) {
    for (int i = 0; i < N_SAMPLES; i++)
        for (unsigned flags = 0; flags < 4; flags++) {
            int na, nb;
            int32_t *ia = enc(a, SAMPLES[i], strlen(SAMPLES[i]), flags, &na);
            int32_t *ib = enc(b, SAMPLES[i], strlen(SAMPLES[i]), flags, &nb);
            int same = ia && ib && na >= 0 && na == nb &&
                       (!na || !memcmp(ia, ib, sizeof *ia * (size_t)na));
            free(ia);
            free(ib);
            if (!same) {
                fprintf(stderr, "  sample %d (flags %u) differs\n", i, flags);
                return 0;
            }
        }
    for (int id = 0; id < kiln_tokenizer_vocab_size(a); id++)
        for (int prev = -1; prev < 2; prev++) {
            size_t la, lb;
            const char *pa = kiln_tokenizer_decode(a, prev, id, &la),
                       *pb = kiln_tokenizer_decode(b, prev, id, &lb);
            if (!pa || !pb || la != lb || memcmp(pa, pb, la)) {
                fprintf(stderr, "  token %d decodes differently\n", id);
                return 0;
            }
        }
    return kiln_tokenizer_bos(a) == kiln_tokenizer_bos(b) &&
           kiln_tokenizer_eos(a) == kiln_tokenizer_eos(b) &&
           kiln_tokenizer_vocab_size(a) == kiln_tokenizer_vocab_size(b);
}

TEST(section_round_trip_and_damage) {
    kiln_tokenizer *t = synthetic(1, 1, 1, NULL), *u;
    ASSERT(t);
    ASSERT((u = reload(t)) != NULL);
    ASSERT(same_encodings(t, u));
    kiln_tokenizer_free(u);
    kiln_wbuf b = {0};
    kiln_tokenizer_serialize(t, &b);
    ASSERT(!b.failed);
    /* Every truncation is an error naming the blob; never a crash. */
    for (size_t cut = 0; cut < b.len; cut += cut < 64 || b.len - cut < 600 ? 1 : 97) {
        kiln_status st = kiln_tokenizer_deserialize(b.data, cut, "test blob", &u);
        ASSERT_MSG(st == KILN_ERR_FORMAT && !u, "cut at %zu: status %d", cut, st);
        ASSERT_CONTAINS(kiln_last_error(), "test blob");
    }
    /* Trailing bytes, and flipped bytes (errors or another valid tokenizer). */
    uint8_t *copy = malloc(b.len + 1);
    memcpy(copy, b.data, b.len);
    copy[b.len] = 0;
    ASSERT_EQ_I(kiln_tokenizer_deserialize(copy, b.len + 1, "test blob", &u), KILN_ERR_FORMAT);
    unsigned long long rs = 5;
    for (int k = 0; k < 3000; k++) {
        memcpy(copy, b.data, b.len);
        size_t at = kt_rand(&rs) % b.len;
        copy[at] ^= (uint8_t)(1u << (kt_rand(&rs) % 8));
        if (kiln_tokenizer_deserialize(copy, b.len, "test blob", &u) == KILN_OK) {
            int n;
            int32_t *ids = enc(u, "hello <|s|> wd", 14, 1, &n); /* still safe to use */
            free(ids);
            kiln_tokenizer_free(u);
        }
    }
    /* Specific rules: unknown type, model, flags; ids out of range. */
    memcpy(copy, b.data, b.len);
    copy[0] = 9;
    ASSERT_EQ_I(kiln_tokenizer_deserialize(copy, b.len, "test blob", &u), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "unknown tokenizer type 9");
    memcpy(copy, b.data, b.len);
    copy[16] = 7;
    ASSERT_EQ_I(kiln_tokenizer_deserialize(copy, b.len, "test blob", &u), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "model 7");
    memcpy(copy, b.data, b.len);
    copy[23] = 0x80;
    ASSERT_EQ_I(kiln_tokenizer_deserialize(copy, b.len, "test blob", &u), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "flags");
    free(copy);
    kiln_wbuf_free(&b);
    kiln_tokenizer_free(t);
}

TEST(out_of_memory_everywhere) {
    const char *path = write_synthetic(1, 0, 1, NULL);
    ASSERT(path);
    kiln_tokenizer *ref = NULL;
    ASSERT_OK(kiln_tokenizer_load(path, &ref));
    kiln_wbuf b = {0};
    kiln_tokenizer_serialize(ref, &b);
    int32_t ids[64];
    int ok_load = 0, ok_des = 0, ok_enc = 0;
    for (long k = 1; k < 4000 && !(ok_load && ok_des && ok_enc); k++) {
        kiln_tokenizer *t = NULL;
        kiln_fail_alloc_after(k);
        kiln_status st = kiln_tokenizer_load(path, &t);
        kiln_fail_alloc_after(0);
        ASSERT_MSG(st == KILN_OK || st == KILN_ERR_NOMEM, "load with allocation %ld failing: %d %s",
                   k, st, kiln_last_error());
        ok_load |= st == KILN_OK;
        kiln_tokenizer_free(t);
        kiln_fail_alloc_after(k);
        st = kiln_tokenizer_deserialize(b.data, b.len, "blob", &t);
        kiln_fail_alloc_after(0);
        ASSERT_MSG(st == KILN_OK || st == KILN_ERR_NOMEM,
                   "deserialize with allocation %ld failing: %d %s", k, st, kiln_last_error());
        ok_des |= st == KILN_OK;
        kiln_tokenizer_free(t);
        int n;
        kiln_fail_alloc_after(k);
        static const char text[] = "hello e\xCC\x81 <|s|> wd";
        st = kiln_tokenizer_encode_flags(ref, text, sizeof text - 1, 1, ids, 64, &n);
        kiln_fail_alloc_after(0);
        ASSERT(st == KILN_OK || st == KILN_ERR_NOMEM);
        ok_enc |= st == KILN_OK;
    }
    ASSERT(ok_load && ok_des && ok_enc);
    kiln_wbuf_free(&b);
    kiln_tokenizer_free(ref);
}

/* ---- tokenizer.json features Kiln refuses ------------------------------------------------ */

TEST(json_refusals_name_the_feature) {
    static const struct {
        const char *json, *want;
        kiln_status st;
    } cases[] = {
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{},\"merges\":[]}}", "WordPiece",
         KILN_ERR_UNSUPPORTED},
        {"{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}",
         "byte_fallback", KILN_ERR_UNSUPPORTED},
        {"{\"normalizer\":{\"type\":\"Lowercase\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_"
         "prefix_space\":false},"
         "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
         "Lowercase", KILN_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}"
         "}",
         "Metaspace", KILN_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":"
         "\"Removed\"},"
         "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
         "Removed", KILN_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true},\"model\":{"
         "\"vocab\":{\"a\":0},"
         "\"merges\":[]}}",
         "add_prefix_space", KILN_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?<=a)b\"}},\"decoder\":{"
         "\"type\":"
         "\"ByteLevel\"},\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
         "lookbehind", KILN_ERR_UNSUPPORTED},
        {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}", "not a byte-level",
         KILN_ERR_UNSUPPORTED},
        {"{\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"vocab\":{\"a\":0,\"b\":1},\"merges\":["
         "\"a b\"]}}",
         "merged token", KILN_ERR_FORMAT},
        {"{\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":["
         "]}}",
         "twice", KILN_ERR_FORMAT},
        {"{\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}",
         "model.vocab", KILN_ERR_FORMAT},
        {"{\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}"
         "}",
         "one space", KILN_ERR_FORMAT},
        {"{\"model\":{\"vocab\":{\"a\":0}", "expected", KILN_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[64];
        snprintf(path, sizeof path, "bad%zu.json", i);
        ASSERT(kt_write_file(kt_path(path), cases[i].json, strlen(cases[i].json)) == 0);
        kiln_tokenizer *t = NULL;
        kiln_status st = kiln_tokenizer_load(kt_path(path), &t);
        ASSERT_MSG(st == cases[i].st && !t, "case %zu: status %d (%s)", i, st,
                   st ? kiln_last_error() : "loaded");
        ASSERT_CONTAINS(kiln_last_error(), cases[i].want);
    }
}

/* ---- GGUF vocabularies ---------------------------------------------------------------------- */

/* A SentencePiece vocabulary: <unk> <s> </s>, 256 <0xNN>, then pieces with scores. */
static kt_gguf *spm_gguf(int add_space_prefix) {
    static const char *const pieces[] = {"\xE2\x96\x81",
                                         "a",
                                         "b",
                                         "c",
                                         "\xE2\x96\x81"
                                         "a",
                                         "ab",
                                         "\xE2\x96\x81"
                                         "ab",
                                         "bc",
                                         "<u>"};
    static const float scores[] = {-1, -2, -3, -4, -5, -6, -7, -6, 0};
    enum { NP = 9, NV = 259 + NP };
    const char *toks[NV];
    float sc[NV];
    int32_t types[NV];
    static char bytes[256][8];
    for (int i = 0; i < NV; i++) {
        sc[i] = 0;
        if (i < 3)
            toks[i] = i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>", types[i] = i ? 3 : 2;
        else if (i < 259)
            snprintf(bytes[i - 3], 8, "<0x%02X>", i - 3), toks[i] = bytes[i - 3], types[i] = 6;
        else
            toks[i] = pieces[i - 259], sc[i] = scores[i - 259], types[i] = i - 259 == 8 ? 4 : 1;
    }
    kt_gguf *g = kt_gguf_new();
    kt_gguf_str(g, "general.architecture", "llama");
    kt_gguf_str(g, "tokenizer.ggml.model", "llama");
    kt_gguf_strs(g, "tokenizer.ggml.tokens", toks, NV);
    kt_gguf_f32s(g, "tokenizer.ggml.scores", sc, NV);
    kt_gguf_i32s(g, "tokenizer.ggml.token_type", types, NV);
    kt_gguf_u32(g, "tokenizer.ggml.bos_token_id", 1);
    kt_gguf_u32(g, "tokenizer.ggml.eos_token_id", 2);
    kt_gguf_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    if (!add_space_prefix) kt_gguf_u32(g, "tokenizer.ggml.add_space_prefix", 0);
    return g;
}
enum { S_SP = 259, S_A, S_B, S_C, S_SPA, S_AB, S_SPAB, S_BC, S_U };
#define SB(c) (3 + (int32_t)(unsigned char)(c))

static kiln_tokenizer *load_gguf(kt_gguf *g, const char *name) {
    kiln_tokenizer *t = NULL;
    if (kt_gguf_write(g, kt_path(name)) || kiln_tokenizer_load(kt_path(name), &t))
        fprintf(stderr, "  load: %s\n", kiln_last_error());
    kt_gguf_free(g);
    return t;
}

TEST(gguf_sentencepiece) {
    kiln_tokenizer *t = load_gguf(spm_gguf(1), "spm.gguf");
    ASSERT(t);
    ASSERT_EQ_I(kiln_tokenizer_bos(t), 1);
    /* A space before the text; the best score merges first: "▁a" (-5) beats
     * "ab" (-6), then "bc" (-6) beats "▁ab" (-7). */
    ASSERT_IDS(t, "abc", 0, 0, S_SPA, S_BC);
    ASSERT_IDS(t, "ab", 0, 0, S_SPAB);
    ASSERT_IDS(t, "bc", 0, 0, S_SP, S_BC);
    ASSERT_IDS(t, "a bc", 0, 0, S_SPA, S_SP, S_BC);
    ASSERT_IDS(t, "", 0, 0);
    /* Byte fallback for what no piece covers. */
    ASSERT_IDS(t, "d\xC3\xA9", 0, 0, S_SP, SB('d'), SB(0xC3), SB(0xA9));
    /* BOS when asked (add_bos_token defaults to on for llama vocabularies). */
    ASSERT_IDS(t, "a", KILN_TOKENIZE_ADD_SPECIAL, 0, 1, S_SPA);
    /* Special tokens in the text, a space after each; or plain text. */
    ASSERT_IDS(t, "<s>a", 0, 0, 1, S_SPA);
    ASSERT_IDS(t, "<s>", KILN_TOKENIZE_PLAIN_SPECIAL, 0, S_SP, SB('<'), SB('s'), SB('>'));
    ASSERT_IDS(t, "a<u>b", KILN_TOKENIZE_PLAIN_SPECIAL, 0, S_SPA, S_U, S_SP, S_B);
    /* Decoding drops the space it added, keeps a real one. */
    ASSERT(round_trip(t, "ab c", 4, NULL, 0));
    ASSERT(round_trip(t, " ab", 3, NULL, 0));
    ASSERT(round_trip(t, "d\xC3\xA9<s>a b", strlen("d\xC3\xA9<s>a b"), NULL, 0));
    /* Through the section form. */
    kiln_tokenizer *u = reload(t);
    ASSERT(u);
    ASSERT(same_encodings(t, u));
    kiln_tokenizer_free(u);
    kiln_tokenizer_free(t);
    t = load_gguf(spm_gguf(0), "spm0.gguf");
    ASSERT(t);
    ASSERT_IDS(t, "ab", 0, 0, S_AB);
    ASSERT(round_trip(t, " ab c", 5, NULL, 0));
    kiln_tokenizer_free(t);
}

/* A byte-level vocabulary as GGUF: the 256 byte characters, then merges. */
static kt_gguf *bpe_gguf(const char *pre) {
    enum { NV = 256 + N_MERGES + 1 };
    char *toks[NV];
    int32_t types[NV];
    const char *merges[N_MERGES];
    char mbuf[N_MERGES][64];
    for (int b = 0; b < 256; b++) {
        uint8_t ch[5] = {0};
        kiln_utf8_encode(kiln_tok_byte_char((uint8_t)b), ch);
        toks[b] = strdup((char *)ch);
        types[b] = 1;
    }
    for (int i = 0; i < N_MERGES; i++) {
        char joined[64];
        snprintf(joined, sizeof joined, "%s%s", MERGES[i][0], MERGES[i][1]);
        toks[256 + i] = strdup(joined);
        types[256 + i] = 1;
        snprintf(mbuf[i], sizeof mbuf[i], "%s %s", MERGES[i][0], MERGES[i][1]);
        merges[i] = mbuf[i];
    }
    toks[NV - 1] = strdup("<|eot|>");
    types[NV - 1] = 3;
    kt_gguf *g = kt_gguf_new();
    kt_gguf_str(g, "tokenizer.ggml.model", "gpt2");
    if (pre) kt_gguf_str(g, "tokenizer.ggml.pre", pre);
    kt_gguf_strs(g, "tokenizer.ggml.tokens", (const char *const *)toks, NV);
    kt_gguf_i32s(g, "tokenizer.ggml.token_type", types, NV);
    kt_gguf_strs(g, "tokenizer.ggml.merges", merges, N_MERGES);
    kt_gguf_u32(g, "tokenizer.ggml.eos_token_id", NV - 1);
    for (int i = 0; i < NV; i++)
        free(toks[i]);
    return g;
}
enum { G_EOT = 256 + N_MERGES };

TEST(gguf_byte_level) {
    kiln_tokenizer *t = load_gguf(bpe_gguf("gpt-2"), "bpe.gguf");
    ASSERT(t);
    ASSERT_IDS(t, "hello world<|eot|>", 0, 0, T_HELLO, T_SP_WORLD, G_EOT);
    ASSERT_IDS(t, "abc aaa", 0, 0, B('a'), T_BC, B(' '), T_AA, B('a'));
    ASSERT(round_trip(t, "hello \xFF world<|eot|>\xC3\xA9",
                      strlen("hello \xFF world<|eot|>\xC3\xA9"), NULL, 0));
    ASSERT_EQ_I(kiln_tokenizer_eos(t), G_EOT);
    ASSERT(kiln_tokenizer_is_special(t, G_EOT));
    kiln_tokenizer_free(t);
    /* SmolLM2's pre-tokenizer: digits one by one first. */
    t = load_gguf(bpe_gguf("smollm"), "bpe_smol.gguf");
    ASSERT(t);
    ASSERT_IDS(t, "a12", 0, 0, B('a'), B('1'), B('2'));
    kiln_tokenizer_free(t);
    /* What is refused, and why. */
    ASSERT(!load_gguf(bpe_gguf("falcon-x"), "bad_pre.gguf"));
    ASSERT_CONTAINS(kiln_last_error(), "falcon-x");
    kt_gguf *g = bpe_gguf("gpt-2");
    kt_gguf_drop_kv(g, "tokenizer.ggml.model");
    kt_gguf_str(g, "tokenizer.ggml.model", "bert");
    ASSERT(!load_gguf(g, "bad_model.gguf"));
    ASSERT_CONTAINS(kiln_last_error(), "bert");
    g = bpe_gguf("gpt-2");
    const char *bad_merge[] = {"h e", "q z"};
    kt_gguf_drop_kv(g, "tokenizer.ggml.merges");
    kt_gguf_strs(g, "tokenizer.ggml.merges", bad_merge, 2);
    ASSERT(!load_gguf(g, "bad_merge.gguf"));
    ASSERT_CONTAINS(kiln_last_error(), "merge 1");
    g = bpe_gguf("gpt-2");
    int32_t few[3] = {1, 1, 1};
    kt_gguf_drop_kv(g, "tokenizer.ggml.token_type");
    kt_gguf_i32s(g, "tokenizer.ggml.token_type", few, 3);
    ASSERT(!load_gguf(g, "bad_types.gguf"));
    ASSERT_CONTAINS(kiln_last_error(), "token_type");
    g = bpe_gguf("gpt-2");
    kt_gguf_u32(g, "tokenizer.ggml.bos_token_id", 100000);
    ASSERT(!load_gguf(g, "bad_bos.gguf"));
    ASSERT_CONTAINS(kiln_last_error(), "bos_token_id");
}

/* Writes a tiny llama GGUF model carrying vocabulary v (freed). */
static int write_model_with_vocab(kt_gguf *v, const char *path) {
    kt_l2c_config c = {16, 24, 1, 2, 2, G_EOT + 1, 16, 1, 9};
    size_t len, glen;
    uint8_t *l2c = kt_llama2c_bytes(&c, &len);
    if (!l2c) return -1;
    kt_gguf *g = kt_gguf_from_llama2c(l2c, 0);
    free(l2c);
    for (int i = 0; i < v->n_kv; i++) { /* graft the vocabulary onto the model */
        kt_gguf_kv *kv = &v->kv[i];
        kt_gguf_drop_kv(g, kv->key);
        g->kv = realloc(g->kv, sizeof *g->kv * (size_t)(g->n_kv + 1));
        g->kv[g->n_kv].key = strdup(kv->key);
        g->kv[g->n_kv].type = kv->type;
        g->kv[g->n_kv].payload = malloc(kv->len);
        memcpy(g->kv[g->n_kv].payload, kv->payload, kv->len);
        g->kv[g->n_kv].len = kv->len;
        g->n_kv++;
    }
    kt_gguf_free(v);
    uint8_t *bytes = kt_gguf_bytes(g, &glen);
    kt_gguf_free(g);
    int rc = kt_write_file(path, bytes, glen);
    free(bytes);
    return rc;
}

/* A tiny llama GGUF model with the byte-level vocabulary compiles into a
 * program whose tokenizer encodes as the GGUF does. */
TEST(compiled_program_keeps_the_tokenizer) {
    ASSERT(write_model_with_vocab(bpe_gguf("llama-bpe"), kt_path("tok_model.gguf")) == 0);
    ASSERT_OK(kt_compile(kt_path("tok_model.gguf"), NULL, kt_path("tok_model.kiln"), 8, 0, NULL));
    kiln_program *p;
    kiln_tokenizer *a, *b;
    ASSERT_OK(kiln_program_open(kt_path("tok_model.kiln"), &p));
    ASSERT_OK(kiln_tokenizer_from_program(p, &a));
    kiln_program_close(p);
    ASSERT_OK(kiln_tokenizer_load(kt_path("tok_model.gguf"), &b));
    ASSERT(same_encodings(a, b));
    ASSERT_IDS(a, "hello world", 0, 0, T_HELLO, T_SP_WORLD);
    kiln_tokenizer_free(a);
    kiln_tokenizer_free(b);
}

static void keep_line(void *user, const char *line) {
    snprintf((char *)user, 512, "%s", line);
}

/* A vocabulary Kiln cannot run does not stop the compile: the program has
 * no tokenizer, and the log says why. */
TEST(unrunnable_tokenizer_compiles_without_one) {
    ASSERT(write_model_with_vocab(bpe_gguf("falcon-x"), kt_path("tok_falcon.gguf")) == 0);
    char line[512] = "";
    kiln_compile_options o;
    kiln_compile_options_init(&o);
    o.input = kt_path("tok_falcon.gguf");
    o.output = kt_path("tok_falcon.kiln");
    o.prefill = 8;
    o.log = keep_line;
    o.log_user = line;
    o.quant = "keep";
    ASSERT_OK(kiln_compile(&o));
    kiln_program *p;
    kiln_tokenizer *t;
    ASSERT_OK(kiln_program_open(kt_path("tok_falcon.kiln"), &p));
    ASSERT_EQ_I(kiln_tokenizer_from_program(p, &t), KILN_ERR_UNSUPPORTED);
    kiln_program_close(p);
    ASSERT_CONTAINS(line, "no tokenizer stored: 'tok_falcon.gguf': tokenizer.ggml.pre 'falcon-x'");
}

/* ---- many threads, one tokenizer --------------------------------------------------------------
 */

typedef struct {
    const kiln_tokenizer *t;
    int ok;
} thread_arg;

static void *encode_many(void *p) {
    thread_arg *a = p;
    a->ok = 1;
    for (int round = 0; round < 50 && a->ok; round++)
        for (int i = 0; i < N_SAMPLES && a->ok; i++) {
            int n;
            int32_t *ids = enc(a->t, SAMPLES[i], strlen(SAMPLES[i]), 0, &n);
            size_t len;
            char *back = ids && n >= 0 ? dec(a->t, ids, n, &len) : NULL;
            a->ok = back != NULL;
            free(ids);
            free(back);
        }
    return NULL;
}

TEST(threads_share_a_tokenizer) {
    kiln_tokenizer *t = synthetic(1, 0, 0, NULL);
    ASSERT(t);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].t = t;
        ASSERT(pthread_create(&th[i], NULL, encode_many, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        ASSERT(args[i].ok);
    kiln_tokenizer_free(t);
}

/* ---- the real tokenizers (shared data)
 * ------------------------------------------------------------ */

static kiln_tokenizer *shared_tokenizer(const char *rel) {
    const char *dir = kt_shared_data();
    if (!dir) return NULL;
    char path[1400];
    snprintf(path, sizeof path, "%s/tokenizers/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    kiln_tokenizer *t = NULL;
    if (kiln_tokenizer_load(path, &t)) fprintf(stderr, "  load %s: %s\n", rel, kiln_last_error());
    return t;
}

/* NFC of UTF-8 text through the library, for expected decodings. */
static char *nfc_utf8(const char *s, size_t len, size_t *out_len) {
    uint32_t *cp = malloc(sizeof *cp * (len + 1)), *nf = malloc(sizeof *nf * (4 * len + 1));
    char *out = malloc(4 * len + 1);
    size_t n = 0, w = 0;
    for (size_t i = 0, used; i < len; i += used)
        cp[n++] = kiln_utf8_decode((const uint8_t *)s + i, len - i, &used);
    size_t m = kiln_uc_nfc(cp, n, nf);
    for (size_t i = 0; i < m; i++)
        w += kiln_utf8_encode(nf[i], (uint8_t *)out + w);
    free(cp);
    free(nf);
    *out_len = w;
    return out;
}

TEST(cases_json_qwen3_llama3) {
    const char *dir = kt_shared_data();
    if (!dir) SKIP("../shared/data is absent");
    char path[1400];
    snprintf(path, sizeof path, "%s/tokenizers/cases.json", dir);
    size_t len;
    char *text = kt_read_file(path, &len);
    if (!text) SKIP("%s is absent", path);
    kiln_json_doc doc;
    ASSERT_OK(kiln_json_parse(text, len, "cases.json", 0, &doc));
    static const char *names[] = {"qwen3", "llama3"};
    int checked = 0;
    for (int k = 0; k < 2; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "%s/tokenizer.json", names[k]);
        kiln_tokenizer *t = shared_tokenizer(rel);
        if (!t) {
            fprintf(stderr, "  %s: tokenizer.json absent\n", names[k]);
            continue;
        }
        /* And through the section form, as a program stores it. */
        kiln_tokenizer *u = reload(t);
        ASSERT(u);
        int pass = 0;
        for (size_t i = 0; i < doc.root->len; i++) {
            const kiln_json *c = &doc.root->items[i], *s = kiln_json_get(c, "text"),
                            *ids = kiln_json_get(c, names[k]);
            ASSERT(s && ids && ids->type == KILN_JSON_ARRAY);
            int32_t *want = malloc(sizeof *want * (ids->len + 1));
            for (size_t j = 0; j < ids->len; j++)
                want[j] = (int32_t)ids->items[j].i;
            int ok = same_ids(t, s->s, s->len, 0, want, (int)ids->len) &&
                     same_ids(u, s->s, s->len, 0, want, (int)ids->len);
            /* Decoding gives the text back (NFC for Qwen3, which normalizes). */
            size_t wl;
            char *wtext = k == 0 ? nfc_utf8(s->s, s->len, &wl) : NULL;
            ok = ok && round_trip(t, s->s, s->len, wtext ? wtext : s->s, wtext ? wl : s->len);
            free(wtext);
            free(want);
            if (!ok) fprintf(stderr, "  %s: case %zu\n", names[k], i);
            pass += ok;
        }
        fprintf(stderr, "  %s: %d/%zu cases of cases.json\n", names[k], pass, doc.root->len);
        ASSERT_EQ_I(pass, doc.root->len);
        checked++;
        kiln_tokenizer_free(t);
        kiln_tokenizer_free(u);
    }
    kiln_json_free(&doc);
    free(text);
    if (!checked) SKIP("no tokenizer.json in ../shared/data/tokenizers");
}

/* llama.cpp's test vectors: NAME.inp (cases split by "\n__ggml_vocab_test__\n"),
 * NAME.out (one line of ids per case); encoded without parsing special text,
 * as llama.cpp's test-tokenizer-0 does. Returns the cases that passed, -1
 * when the files are absent. */
static int run_vectors(const kiln_tokenizer *t, const char *name, int *total) {
    const char *dir = kt_shared_data();
    char path[1400];
    size_t il, ol;
    snprintf(path, sizeof path, "%s/tokenizers/llama.cpp-vocab/ggml-vocab-%s.gguf.inp", dir, name);
    char *inp = kt_read_file(path, &il);
    snprintf(path, sizeof path, "%s/tokenizers/llama.cpp-vocab/ggml-vocab-%s.gguf.out", dir, name);
    char *out = kt_read_file(path, &ol);
    if (!inp || !out) {
        free(inp);
        free(out);
        return -1;
    }
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    int pass = 0;
    *total = 0;
    char *p = inp, *q = out, *end = inp + il;
    while (p < end) {
        char *s = strstr(p, SEP);
        size_t len = s ? (size_t)(s - p) : (size_t)(end - p);
        char *nl = strchr(q, '\n');
        if (nl) *nl = 0;
        int32_t want[1024];
        int nw = 0;
        for (char *x = q; *x;) {
            char *e;
            long v = strtol(x, &e, 10);
            if (e == x) break;
            want[nw++] = (int32_t)v;
            x = e;
        }
        int ok = same_ids(t, p, len, KILN_TOKENIZE_PLAIN_SPECIAL, want, nw);
        if (!ok) fprintf(stderr, "  %s: case %d\n", name, *total);
        pass += ok;
        ++*total;
        if (!s) break;
        p = s + sizeof SEP - 1;
        q = nl ? nl + 1 : q + strlen(q);
    }
    free(inp);
    free(out);
    return pass;
}

TEST(llama_cpp_vectors) {
    if (!kt_shared_data()) SKIP("../shared/data is absent");
    static const struct {
        const char *vectors, *tokenizer;
    } sets[] = {
        {"llama-spm", "llama.cpp-vocab/ggml-vocab-llama-spm.gguf"},
        {"gpt-2", "llama.cpp-vocab/ggml-vocab-gpt-2.gguf"},
        {"qwen2", "qwen3/tokenizer.json"},
        {"llama-bpe", "llama3/tokenizer.json"},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        kiln_tokenizer *t = shared_tokenizer(sets[i].tokenizer);
        if (!t) {
            fprintf(stderr, "  %s: %s absent\n", sets[i].vectors, sets[i].tokenizer);
            continue;
        }
        int total = 0, pass = run_vectors(t, sets[i].vectors, &total);
        kiln_tokenizer_free(t);
        if (pass < 0) continue;
        fprintf(stderr, "  %s: %d/%d vectors\n", sets[i].vectors, pass, total);
        ASSERT_EQ_I(pass, total);
        ran++;
    }
    if (!ran) SKIP("no llama.cpp vectors in ../shared/data/tokenizers");
}

/* Any bytes round-trip exactly through the byte-level tokenizers without
 * normalization; the SentencePiece one too. */
TEST(real_round_trips) {
    static const char *rels[] = {"llama3/tokenizer.json", "llama.cpp-vocab/ggml-vocab-gpt-2.gguf",
                                 "llama.cpp-vocab/ggml-vocab-llama-spm.gguf",
                                 "qwen3/tokenizer.json"};
    int ran = 0;
    for (int k = 0; k < 4; k++) {
        kiln_tokenizer *t = shared_tokenizer(rels[k]);
        if (!t) continue;
        ran++;
        for (int i = 0; i < N_SAMPLES; i++) {
            const char *s = SAMPLES[i];
            size_t wl, len = strlen(s);
            char *want = k == 3 ? nfc_utf8(s, len, &wl) : NULL;
            ASSERT_MSG(round_trip(t, s, len, want ? want : s, want ? wl : len), "%s: sample %d",
                       rels[k], i);
            free(want);
        }
        unsigned long long rs = 11 + (unsigned long long)k;
        char buf[300];
        for (int r = 0; r < 300 && k < 3; r++) { /* random bytes, valid UTF-8 or not */
            size_t n = kt_rand(&rs) % sizeof buf;
            for (size_t j = 0; j < n; j++) {
                unsigned x = kt_rand(&rs);
                buf[j] = (char)(r % 2 ? 32 + x % 95 : x & 0xff);
            }
            ASSERT_MSG(round_trip(t, buf, n, NULL, 0), "%s: random string %d", rels[k], r);
        }
        kiln_tokenizer_free(t);
    }
    if (!ran) SKIP("no tokenizers in ../shared/data/tokenizers");
}

/* Ids that Hugging Face `tokenizers` gave, in the file $KILN_TOKENIZER_REF
 * (made by tests/test_tokenizer_hf.sh): a JSON list of {tokenizer (a path),
 * flags (KILN_TOKENIZE_*), text, ids, decoded}. Skipped when unset. */
TEST(hf_reference_file) {
    const char *path = getenv("KILN_TOKENIZER_REF");
    if (!path || !*path) SKIP("KILN_TOKENIZER_REF is not set (tests/test_tokenizer_hf.sh sets it)");
    size_t len;
    char *text = kt_read_file(path, &len);
    ASSERT_MSG(text, "cannot read %s", path);
    kiln_json_doc doc;
    ASSERT_OK(kiln_json_parse(text, len, path, 0, &doc));
    enum { MAX_TOK = 8 };
    const char *names[MAX_TOK];
    kiln_tokenizer *toks[MAX_TOK];
    int n_tok = 0, pass = 0, fail = 0;
    for (size_t i = 0; i < doc.root->len; i++) {
        const kiln_json *c = &doc.root->items[i], *tj = kiln_json_get(c, "tokenizer"),
                        *tx = kiln_json_get(c, "text"), *ids = kiln_json_get(c, "ids"),
                        *fl = kiln_json_get(c, "flags"), *de = kiln_json_get(c, "decoded");
        ASSERT(tj && tx && ids && fl && tj->type == KILN_JSON_STRING &&
               ids->type == KILN_JSON_ARRAY);
        int k = 0;
        while (k < n_tok && strcmp(names[k], tj->s))
            k++;
        if (k == n_tok) {
            ASSERT(n_tok < MAX_TOK);
            names[k] = tj->s;
            ASSERT_OK(kiln_tokenizer_load(tj->s, &toks[k]));
            n_tok++;
        }
        int32_t *want = malloc(sizeof *want * (ids->len + 1));
        for (size_t j = 0; j < ids->len; j++)
            want[j] = (int32_t)ids->items[j].i;
        int ok = same_ids(toks[k], tx->s, tx->len, (unsigned)fl->i, want, (int)ids->len);
        if (ok && de && de->type == KILN_JSON_STRING)
            ok = round_trip(toks[k], tx->s, tx->len, de->s, de->len);
        if (!ok && fail < 10) fprintf(stderr, "  entry %zu (%s)\n", i, kiln_basename(tj->s));
        pass += ok;
        fail += !ok;
        free(want);
    }
    fprintf(stderr, "  %d of %zu texts agree with Hugging Face tokenizers\n", pass, doc.root->len);
    for (int k = 0; k < n_tok; k++)
        kiln_tokenizer_free(toks[k]);
    kiln_json_free(&doc);
    free(text);
    ASSERT_EQ_I(fail, 0);
}

TEST_MAIN(utf8_keeps_every_byte, unicode_categories_and_folding, nfc, regex_semantics,
          regex_refuses_what_it_cannot_do, regex_long_inputs, bpe_merges_by_rank, bpe_added_tokens,
          bpe_nfc_and_ignore_merges, bpe_special_tokens_from_template_and_config,
          decode_streams_whole_characters, section_round_trip_and_damage, out_of_memory_everywhere,
          json_refusals_name_the_feature, gguf_sentencepiece, gguf_byte_level,
          compiled_program_keeps_the_tokenizer, unrunnable_tokenizer_compiles_without_one,
          threads_share_a_tokenizer, cases_json_qwen3_llama3, llama_cpp_vectors, real_round_trips,
          hf_reference_file)
