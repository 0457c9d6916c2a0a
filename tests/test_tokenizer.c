/* test_tokenizer.c: the llama2.c tokenizer rules (BOS, dummy-prefix space,
 * byte fallback, best-score-first merges with leftmost ties, a leading space
 * dropped after BOS) on tokenizers the tests write themselves, and token
 * counts and round trips on the real tok512.bin when the shared data is
 * present; the heap encoder against the old quadratic one (kept here as the
 * oracle) on generated text up to 30 KB. */
#include <stdint.h>

#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln_llm.h"

/* Ids in kt_write_tokenizer's vocabulary: 3 specials, 256 bytes, then
 * " " (score 0), "e" (-1), "t" (-2), ... in the order of its table. */
#define BYTE(b) (3 + (b))
enum {
    SYN_VOCAB = 300,
    T_SPACE = 259,
    T_E,
    T_T,
    T_A,
    T_O,
    T_N,
    T_H,
    T_S,
    T_SP_T,
    T_HE,
    T_SP_THE,
    T_TH,
    T_AN,
    T_SP_A,
    T_IN,
    T_SP_AN,
    T_ND,
    T_SP_AND,
};

static kiln_tokenizer *synthetic(void) {
    const char *path = kt_path("syn_tok.bin");
    if (kt_write_tokenizer(path, SYN_VOCAB)) return NULL;
    kiln_tokenizer *t = NULL;
    if (kiln_tokenizer_load_llama2c(path, SYN_VOCAB, &t)) {
        fprintf(stderr, "  load: %s\n", kiln_last_error());
        return NULL;
    }
    return t;
}

/* Encodes `len` bytes into a malloc'd array; -1 count on failure. */
static int32_t *encode(const kiln_tokenizer *t, const char *s, size_t len, int bos, int *n) {
    int cap = (int)len + 3;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    *n = -1;
    if (ids && kiln_tokenizer_encode(t, s, len, bos, ids, cap, n)) {
        fprintf(stderr, "  encode: %s\n", kiln_last_error());
        *n = -1;
    }
    return ids;
}

/* Decodes ids by run.c's rules (each piece after its predecessor) into a
 * malloc'd buffer; skips nothing. Returns NULL on an unknown id. */
static char *decode_all(const kiln_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = 16, k = 0;
    char *out = malloc(cap);
    int prev = -1;
    for (int i = 0; out && i < n; i++) {
        size_t pl;
        const char *p = kiln_tokenizer_decode(t, prev, ids[i], &pl);
        if (!p) {
            free(out);
            return NULL;
        }
        if (i == 0 && ids[0] == kiln_tokenizer_bos(t)) pl = 0; /* BOS shows as nothing */
        if (k + pl + 1 > cap) {
            while (k + pl + 1 > cap)
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
        prev = ids[i];
    }
    if (out) out[k] = 0;
    *len = k;
    return out;
}

static int ids_equal(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, sizeof *a * (size_t)na) == 0);
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* ASSERTs that `s` encodes (with BOS) to exactly want[0..nw). */
#define ASSERT_ENCODES(t, s, ...)                                                                  \
    do {                                                                                           \
        static const int32_t want_[] = {__VA_ARGS__};                                              \
        int nw_ = (int)(sizeof want_ / sizeof *want_), n_;                                         \
        int32_t *got_ = encode(t, s, strlen(s), 1, &n_);                                           \
        int same_ = got_ && ids_equal(got_, n_, want_, nw_);                                       \
        if (!same_) {                                                                              \
            print_ids("want", want_, nw_);                                                         \
            if (got_) print_ids("got ", got_, n_);                                                 \
        }                                                                                          \
        free(got_);                                                                                \
        ASSERT_MSG(same_, "\"%s\" encoded wrongly", s);                                            \
    } while (0)

/* Writes a llama2.c tokenizer.bin holding exactly the n pieces (empty ones
 * allowed) with their scores. */
static int write_records(const char *path, const char *const *pieces, const float *scores, int n) {
    size_t cap = 4 + (size_t)n * 8;
    for (int i = 0; i < n; i++)
        cap += strlen(pieces[i]);
    uint8_t *b = malloc(cap), *p = b + 4;
    if (!b) return -1;
    int32_t maxlen = 0;
    for (int i = 0; i < n; i++) {
        int32_t l = (int32_t)strlen(pieces[i]);
        if (l > maxlen) maxlen = l;
        memcpy(p, &scores[i], 4);
        memcpy(p + 4, &l, 4);
        memcpy(p + 8, pieces[i], (size_t)l);
        p += 8 + l;
    }
    memcpy(b, &maxlen, 4);
    int r = kt_write_file(path, b, (size_t)(p - b));
    free(b);
    return r;
}

/* Writes a llama2.c tokenizer.bin: the 3 specials, the 256 byte pieces, then
 * `n` pieces with their scores. */
static int write_custom(const char *path, const char *const *pieces, const float *scores, int n) {
    const char **all = malloc(sizeof *all * (size_t)(259 + n));
    float *sc = calloc((size_t)(259 + n), sizeof *sc);
    static char bytes[256][8];
    int r = -1;
    if (all && sc) {
        all[0] = "<unk>", all[1] = "\n<s>\n", all[2] = "\n</s>\n";
        for (int b = 0; b < 256; b++) {
            snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
            all[3 + b] = bytes[b];
        }
        for (int i = 0; i < n; i++)
            all[259 + i] = pieces[i], sc[259 + i] = scores[i];
        r = write_records(path, all, sc, 259 + n);
    }
    free(all);
    free(sc);
    return r;
}

/* ---- the rules, on the synthetic tokenizer ----------------------------------- */

TEST(bos_and_dummy_prefix) {
    kiln_tokenizer *t = synthetic();
    ASSERT(t);
    ASSERT_EQ_I(kiln_tokenizer_vocab_size(t), SYN_VOCAB);
    ASSERT_EQ_I(kiln_tokenizer_bos(t), 1);
    ASSERT_EQ_I(kiln_tokenizer_eos(t), 2);
    int32_t ids[8];
    int n = -1;
    /* Empty text: BOS only, no dummy prefix; without BOS, nothing. */
    ASSERT_OK(kiln_tokenizer_encode(t, "", 0, 1, ids, 8, &n));
    ASSERT_EQ_I(n, 1);
    ASSERT_EQ_I(ids[0], 1);
    ASSERT_OK(kiln_tokenizer_encode(t, "", 0, 0, ids, 8, &n));
    ASSERT_EQ_I(n, 0);
    /* Non-empty text: the " " token goes first (after BOS when asked). */
    ASSERT_OK(kiln_tokenizer_encode(t, "e", 1, 1, ids, 8, &n));
    ASSERT_EQ_I(n, 3);
    ASSERT_EQ_I(ids[0], 1);
    ASSERT_EQ_I(ids[1], T_SPACE);
    ASSERT_EQ_I(ids[2], T_E);
    ASSERT_OK(kiln_tokenizer_encode(t, "e", 1, 0, ids, 8, &n));
    ASSERT_EQ_I(n, 2);
    ASSERT_EQ_I(ids[0], T_SPACE);
    ASSERT_EQ_I(ids[1], T_E);
    /* The dummy prefix merges like any space: "a" -> " a". */
    ASSERT_ENCODES(t, "a", 1, T_SP_A);
    /* A text that starts with a space gets a second one in front. */
    ASSERT_ENCODES(t, " e", 1, T_SPACE, T_SPACE, T_E);
    kiln_tokenizer_free(t);
}

TEST(byte_fallback) {
    kiln_tokenizer *t = synthetic();
    ASSERT(t);
    /* "é" is not a piece: its two UTF-8 bytes become <0xC3><0xA9>. */
    ASSERT_ENCODES(t, "\xC3\xA9", 1, T_SPACE, BYTE(0xC3), BYTE(0xA9));
    /* ASCII letters missing from the vocabulary fall back too. */
    ASSERT_ENCODES(t, "z", 1, T_SPACE, BYTE('z'));
    /* A 4-byte code point (U+1F600), and a lone continuation byte. */
    ASSERT_ENCODES(t, "\xF0\x9F\x98\x80", 1, T_SPACE, BYTE(0xF0), BYTE(0x9F), BYTE(0x98),
                   BYTE(0x80));
    ASSERT_ENCODES(t,
                   "\x80"
                   "e",
                   1, T_SPACE, BYTE(0x80), T_E);
    /* Byte pieces do not merge with letters ("<0x69>n" is no piece). */
    ASSERT_ENCODES(t, "in", 1, T_SPACE, BYTE('i'), T_N);
    /* Each byte token decodes to exactly its byte, NUL included. */
    for (int b = 0; b < 256; b++) {
        size_t len = 99;
        const char *p = kiln_tokenizer_decode(t, T_E, BYTE(b), &len);
        ASSERT(p);
        ASSERT_EQ_I(len, 1);
        ASSERT_EQ_I((unsigned char)p[0], b);
    }
    int n;
    int32_t *ids = encode(t, "\xC3\xA9", 2, 1, &n);
    size_t len;
    char *back = decode_all(t, ids, n, &len);
    ASSERT(back);
    ASSERT_EQ_I(len, 2);
    ASSERT(memcmp(back, "\xC3\xA9", 2) == 0);
    free(back);
    free(ids);
    kiln_tokenizer_free(t);
}

TEST(merges_best_score_first) {
    kiln_tokenizer *t = synthetic();
    ASSERT(t);
    /* " t"(-8) first, then "he"(-9), then " the"(-10). */
    ASSERT_ENCODES(t, "the", 1, T_SP_THE);
    /* "an"(-12) before " a"(-13), then " an"(-15) ("d" is no piece: a byte). */
    ASSERT_ENCODES(t, "ant", 1, T_SP_AN, T_T);
    ASSERT_ENCODES(t, "and", 1, T_SP_AN, BYTE('d'));
    /* "he"(-9) beats "en"(-19): " " he n, never " " h en. */
    ASSERT_ENCODES(t, "hen", 1, T_SPACE, T_HE, T_N);
    /* "th"(-11) would block "he"(-9) if taken first; best score wins. */
    ASSERT_ENCODES(t, "xthe", 1, T_SPACE, BYTE('x'), T_T, T_HE);
    ASSERT_ENCODES(t, "the the", 1, T_SP_THE, T_SP_THE);
    kiln_tokenizer_free(t);
}

TEST(merges_leftmost_on_ties) {
    /* "aa" and "ab" score alike: in "aaa" the leftmost "aa" merges first;
     * in "aab" the better-scoring "ab" wins although it is to the right. */
    static const char *const pieces[] = {" ", "a", "b", "aa", "ab", "ba"};
    static const float scores[] = {0, 0, 0, 5, 7, 5};
    const char *path = kt_path("ties.bin");
    ASSERT(write_custom(path, pieces, scores, 6) == 0);
    kiln_tokenizer *t;
    ASSERT_OK(kiln_tokenizer_load_llama2c(path, 265, &t));
    enum { SP = 259, A, B, AA, AB, BA };
    ASSERT_ENCODES(t, "aaa", 1, SP, AA, A);
    ASSERT_ENCODES(t, "aab", 1, SP, A, AB);
    /* "ba"(5) ties with "aa"(5) in "baa": leftmost "ba" first. */
    ASSERT_ENCODES(t, "baa", 1, SP, BA, A);
    ASSERT_ENCODES(t, "aaaa", 1, SP, AA, AA);
    kiln_tokenizer_free(t);
}

TEST(decode_rules) {
    kiln_tokenizer *t = synthetic();
    ASSERT(t);
    size_t len;
    const char *p = kiln_tokenizer_decode(t, 1, T_SP_THE, &len); /* after BOS: space dropped */
    ASSERT(p && len == 3 && memcmp(p, "the", 3) == 0);
    p = kiln_tokenizer_decode(t, T_E, T_SP_THE, &len);
    ASSERT(p && len == 4 && memcmp(p, " the", 4) == 0);
    p = kiln_tokenizer_decode(t, -1, T_SP_THE, &len);
    ASSERT(p && len == 4 && memcmp(p, " the", 4) == 0);
    p = kiln_tokenizer_decode(t, 1, T_SPACE, &len); /* the dummy prefix alone: nothing */
    ASSERT(p && len == 0);
    p = kiln_tokenizer_decode(t, 1, T_HE, &len); /* no leading space: unchanged */
    ASSERT(p && len == 2 && memcmp(p, "he", 2) == 0);
    p = kiln_tokenizer_decode(t, 1, BYTE(' '), &len); /* a byte token is not a piece with a space */
    ASSERT(p && len == 1 && p[0] == ' ');
    ASSERT(kiln_tokenizer_decode(t, -1, SYN_VOCAB, &len) == NULL);
    ASSERT(kiln_tokenizer_decode(t, -1, -1, &len) == NULL);
    kiln_tokenizer_free(t);
}

TEST(encode_reports_room_needed) {
    kiln_tokenizer *t = synthetic();
    ASSERT(t);
    int32_t ids[3];
    int n = -1;
    kiln_status st = kiln_tokenizer_encode(t, "zzzz", 4, 1, ids, 3, &n);
    ASSERT_EQ_I(st, KILN_ERR_INVALID_ARG);
    ASSERT_EQ_I(n, 6); /* BOS, " ", 4 bytes */
    ASSERT_CONTAINS(kiln_last_error(), "6");
    ASSERT_CONTAINS(kiln_last_error(), "3");
    kiln_tokenizer_free(t);
}

/* encode -> decode gives back the exact bytes, with BOS (the dummy space
 * dropped after it) and without (the dummy space shows). */
static int round_trips(const kiln_tokenizer *t, const char *s, size_t len) {
    for (int bos = 0; bos < 2; bos++) {
        int n;
        int32_t *ids = encode(t, s, len, bos, &n);
        if (!ids || n < 0) {
            free(ids);
            return 0;
        }
        size_t got;
        char *back = decode_all(t, ids, n, &got);
        int lead = !bos && len > 0; /* the dummy prefix */
        int ok = back && got == len + (size_t)lead && (!lead || back[0] == ' ') &&
                 memcmp(back + lead, s, len) == 0;
        if (!ok)
            fprintf(stderr, "  round trip (bos %d) of %zu bytes gave %zu\n", bos, len,
                    back ? got : 0);
        free(back);
        free(ids);
        if (!ok) return 0;
    }
    return 1;
}

static const char *const SAMPLES[] = {
    "",
    " ",
    "  ",
    "a",
    "the",
    "Once upon a time",
    " leading space",
    "trailing space ",
    "Lily and Tom went to the park",
    "line\nbreak\ttab",
    "caf\xC3\xA9 na\xC3\xAFve",
    "\xF0\x9F\x98\x80\xF0\x9F\x8E\x89 emoji",
    "\xE4\xB8\xAD\xE6\x96\x87",
    "<0x41> <s> </s>",
    "\"quoted\" \\backslash\\",
    "\xC3",
    "\xF0\x9F",
    "\xFF\xFE\x80\x80\x80\x80\x80",
};

static void random_bytes(char *buf, size_t n, unsigned long long *rs, int printable) {
    for (size_t i = 0; i < n; i++) {
        unsigned r = kt_rand(rs);
        buf[i] = printable ? (char)(32 + r % 95) : (char)(r & 0xff);
    }
}

static int round_trip_many(const kiln_tokenizer *t) {
    for (size_t i = 0; i < sizeof SAMPLES / sizeof *SAMPLES; i++)
        if (!round_trips(t, SAMPLES[i], strlen(SAMPLES[i]))) {
            fprintf(stderr, "  sample %zu \"%s\"\n", i, SAMPLES[i]);
            return 0;
        }
    unsigned long long rs = 77;
    char buf[200];
    for (int k = 0; k < 300; k++) {
        size_t n = kt_rand(&rs) % sizeof buf;
        random_bytes(buf, n, &rs, k & 1);
        if (!round_trips(t, buf, n)) {
            fprintf(stderr, "  random string %d (%zu bytes)\n", k, n);
            return 0;
        }
    }
    return 1;
}

TEST(round_trip_synthetic) {
    kiln_tokenizer *t = synthetic();
    ASSERT(t);
    int ok = round_trip_many(t);
    kiln_tokenizer_free(t);
    ASSERT(ok);
}

/* The tokenizer a program stores encodes as the file it came from. */
TEST(program_tokenizer_matches_file) {
    kt_l2c_config c = {16, 24, 1, 2, 2, SYN_VOCAB, 16, 1, 5};
    ASSERT(kt_write_llama2c(kt_path("tokm.bin"), &c) == 0);
    ASSERT(kt_write_tokenizer(kt_path("tokm_tok.bin"), SYN_VOCAB) == 0);
    ASSERT_OK(
        kt_compile(kt_path("tokm.bin"), kt_path("tokm_tok.bin"), kt_path("tokm.kiln"), 8, 0, NULL));
    kiln_program *p;
    ASSERT_OK(kiln_program_open(kt_path("tokm.kiln"), &p));
    kiln_tokenizer *a, *b = NULL;
    ASSERT_OK(kiln_tokenizer_from_program(p, &a));
    kiln_program_close(p); /* the tokenizer does not depend on the program */
    ASSERT_OK(kiln_tokenizer_load_llama2c(kt_path("tokm_tok.bin"), SYN_VOCAB, &b));
    ASSERT_EQ_I(kiln_tokenizer_vocab_size(a), SYN_VOCAB);
    ASSERT_EQ_I(kiln_tokenizer_bos(a), kiln_tokenizer_bos(b));
    ASSERT_EQ_I(kiln_tokenizer_eos(a), kiln_tokenizer_eos(b));
    int same = 1;
    for (size_t i = 0; i < sizeof SAMPLES / sizeof *SAMPLES && same; i++) {
        int na, nb;
        int32_t *ia = encode(a, SAMPLES[i], strlen(SAMPLES[i]), 1, &na);
        int32_t *ib = encode(b, SAMPLES[i], strlen(SAMPLES[i]), 1, &nb);
        same = ia && ib && na >= 0 && ids_equal(ia, na, ib, nb);
        free(ia);
        free(ib);
    }
    for (int id = 0; id < SYN_VOCAB && same; id++) {
        size_t la, lb;
        const char *pa = kiln_tokenizer_decode(a, 1, id, &la),
                   *pb = kiln_tokenizer_decode(b, 1, id, &lb);
        same = pa && pb && la == lb && memcmp(pa, pb, la) == 0;
    }
    kiln_tokenizer_free(a);
    kiln_tokenizer_free(b);
    ASSERT(same);
}

/* ---- the real tok512.bin ---------------------------------------------------------- */

/* shared data folder/rel when that file exists (a rotating static buffer). */
static const char *shared_file(const char *rel) {
    static char bufs[4][1200];
    static int k;
    char *path = bufs[k++ & 3];
    const char *d = kt_shared_data();
    if (!d) return NULL;
    snprintf(path, sizeof bufs[0], "%s/%s", d, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    return path;
}

/* Reads the JSON string at *p (after its opening quote) into out;
 * advances past the closing quote. Handles \n \t \" \\ \/ \b \f \r \uXXXX. */
static int json_string(const char **p, char *out, size_t cap) {
    const char *s = *p;
    size_t k = 0;
    while (*s && *s != '"') {
        unsigned cp = (unsigned char)*s++;
        if (cp == '\\') {
            char e = *s++;
            switch (e) {
            case 'n':
                cp = '\n';
                break;
            case 't':
                cp = '\t';
                break;
            case 'r':
                cp = '\r';
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case '"':
            case '\\':
            case '/':
                cp = (unsigned char)e;
                break;
            case 'u': {
                char hex[5] = {0};
                if (strlen(s) < 4) return -1;
                memcpy(hex, s, 4);
                cp = (unsigned)strtoul(hex, NULL, 16);
                s += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                    memcpy(hex, s + 2, 4);
                    cp = 0x10000 + ((cp - 0xD800) << 10) +
                         ((unsigned)strtoul(hex, NULL, 16) - 0xDC00);
                    s += 6;
                }
                char u[4];
                int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
                static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
                for (int i = n - 1; i > 0; i--, cp >>= 6)
                    u[i] = (char)(0x80 | (cp & 63));
                u[0] = (char)(lead[n] | cp);
                if (k + (size_t)n >= cap) return -1;
                memcpy(out + k, u, (size_t)n);
                k += (size_t)n;
                continue;
            }
            default:
                return -1;
            }
        }
        if (k + 1 >= cap) return -1;
        out[k++] = (char)cp;
    }
    if (*s != '"') return -1;
    out[k] = 0;
    *p = s + 1;
    return 0;
}

TEST(tok512_prompt_counts_and_round_trips) {
    const char *tokp = shared_file("models/stories260K/tok512.bin");
    const char *expp = tokp ? shared_file("models/stories260K/expected.json") : NULL;
    if (!tokp || !expp) SKIP("shared data (models/stories260K) not found");
    char *json = kt_read_file(expp, NULL);
    ASSERT(json);
    kiln_tokenizer *t;
    ASSERT_OK(kiln_tokenizer_load_llama2c(tokp, 512, &t));
    ASSERT_EQ_I(kiln_tokenizer_bos(t), 1);
    /* Each object lists "prompt" before "prompt_tokens". */
    int entries = 0, bad = 0;
    for (const char *p = json; (p = strstr(p, "\"prompt\""));) {
        char prompt[1024];
        const char *v = strchr(p + 8, '"');
        if (!v || (v++, json_string(&v, prompt, sizeof prompt))) {
            bad = 1;
            break;
        }
        const char *q = strstr(v, "\"prompt_tokens\"");
        const char *colon = q ? strchr(q, ':') : NULL;
        if (!colon) {
            bad = 1;
            break;
        }
        int want = (int)strtol(colon + 1, NULL, 10);
        int n;
        int32_t *ids = encode(t, prompt, strlen(prompt), 1, &n);
        free(ids);
        if (n != want)
            fprintf(stderr, "  \"%s\": %d tokens, expected.json says %d\n", prompt, n, want);
        bad |= n != want;
        bad |= !round_trips(t, prompt, strlen(prompt));
        entries++;
        p = colon;
    }
    free(json);
    int ok = !bad && round_trip_many(t);
    /* A few fixed encodings: whole words merge to one piece each. */
    int n;
    int32_t *ids = encode(t, "Once upon a time", 16, 1, &n);
    ok &= n == 5 && ids[0] == 1;
    free(ids);
    kiln_tokenizer_free(t);
    ASSERT_MSG(entries >= 4, "found %d prompts in expected.json", entries);
    ASSERT(ok);
}

/* kiln_tokenizer_load tells a tokenizer.bin by elimination and takes every
 * record in it (vocab_size 0 does the same); a file whose records do not end
 * at its end is refused. */
TEST(load_counts_the_records) {
    const char *path = kt_path("count_tok.bin");
    ASSERT(kt_write_tokenizer(path, SYN_VOCAB) == 0);
    kiln_tokenizer *a, *b, *c;
    ASSERT_OK(kiln_tokenizer_load(path, &a));
    ASSERT_OK(kiln_tokenizer_load_llama2c(path, 0, &b));
    ASSERT_OK(kiln_tokenizer_load_llama2c(path, SYN_VOCAB, &c));
    ASSERT_EQ_I(kiln_tokenizer_vocab_size(a), SYN_VOCAB);
    ASSERT_EQ_I(kiln_tokenizer_vocab_size(b), SYN_VOCAB);
    for (size_t i = 0; i < sizeof SAMPLES / sizeof *SAMPLES; i++) {
        int na, nc;
        int32_t *ia = encode(a, SAMPLES[i], strlen(SAMPLES[i]), 1, &na);
        int32_t *ic = encode(c, SAMPLES[i], strlen(SAMPLES[i]), 1, &nc);
        int same = ia && ic && na >= 0 && ids_equal(ia, na, ic, nc);
        free(ia);
        free(ic);
        ASSERT_MSG(same, "sample %zu", i);
    }
    kiln_tokenizer_free(a);
    kiln_tokenizer_free(b);
    kiln_tokenizer_free(c);
    size_t len;
    uint8_t *bytes = kt_tokenizer_bytes(SYN_VOCAB, &len);
    ASSERT(kt_write_file(kt_path("cut_tok.bin"), bytes, len - 3) == 0);
    free(bytes);
    ASSERT_EQ_I(kiln_tokenizer_load(kt_path("cut_tok.bin"), &a), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "cut_tok.bin");
    ASSERT_EQ_I(kiln_tokenizer_load_llama2c(kt_path("cut_tok.bin"), -1, &a), KILN_ERR_INVALID_ARG);
}

/* ---- the old quadratic encoder, as the oracle ------------------------------------ */

/* A tokenizer.bin as the old encoder saw it, read here without the library. */
typedef struct {
    char *data; /* the file; pieces point into it */
    int n, max_len;
    const char **pieces;
    int *lens;
    float *scores;
    int *sorted; /* ids by piece bytes, then by id */
    int byte_id[256];
} old_vocab;

static int cmp_piece(const char *a, int la, const char *b, int lb) {
    int c = memcmp(a, b, (size_t)(la < lb ? la : lb));
    return c ? c : la - lb;
}

static const old_vocab *g_sort_vocab; /* for qsort */
static int by_piece_then_id(const void *x, const void *y) {
    const old_vocab *v = g_sort_vocab;
    int a = *(const int *)x, b = *(const int *)y;
    int c = cmp_piece(v->pieces[a], v->lens[a], v->pieces[b], v->lens[b]);
    return c ? c : a - b;
}

/* Lowest id whose piece is s[0..n), or -1: the first of the equal run. */
static int old_lookup(const old_vocab *v, const char *s, int n) {
    int lo = 0, hi = v->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2, id = v->sorted[mid];
        if (cmp_piece(v->pieces[id], v->lens[id], s, n) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < v->n && cmp_piece(v->pieces[v->sorted[lo]], v->lens[v->sorted[lo]], s, n) == 0
               ? v->sorted[lo]
               : -1;
}

static void old_vocab_free(old_vocab *v) {
    free(v->data);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    free(v->sorted);
}

/* Reads every record of the file: {i32 max_len} then {f32 score, i32 len, bytes}... */
static int old_vocab_read(const char *path, old_vocab *v) {
    memset(v, 0, sizeof *v);
    size_t len;
    if (!(v->data = kt_read_file(path, &len)) || len < 4) return -1;
    size_t cap = len / 8;
    v->pieces = malloc(sizeof *v->pieces * cap);
    v->lens = malloc(sizeof *v->lens * cap);
    v->scores = malloc(sizeof *v->scores * cap);
    v->sorted = malloc(sizeof *v->sorted * cap);
    if (!v->pieces || !v->lens || !v->scores || !v->sorted) return -1;
    for (size_t at = 4; at + 8 <= len; v->n++) {
        int32_t l;
        memcpy(&v->scores[v->n], v->data + at, 4);
        memcpy(&l, v->data + at + 4, 4);
        if (l < 0 || (size_t)l > len - at - 8) return -1;
        v->pieces[v->n] = v->data + at + 8;
        v->lens[v->n] = l;
        if (l > v->max_len) v->max_len = l;
        v->sorted[v->n] = v->n;
        at += 8 + (size_t)l;
    }
    g_sort_vocab = v;
    qsort(v->sorted, (size_t)v->n, sizeof *v->sorted, by_piece_then_id);
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        v->byte_id[b] = old_lookup(v, piece, 6);
    }
    return 0;
}

/* The merge pair i (tokens i, i+1) would make, and its score: pid -1 when none. */
static void old_pair(const old_vocab *v, const int32_t *tok, int i, char *buf, int *pid,
                     float *psc) {
    int la = v->lens[tok[i]], lb = v->lens[tok[i + 1]];
    pid[i] = -1;
    if (la + lb > v->max_len) return;
    memcpy(buf, v->pieces[tok[i]], (size_t)la);
    memcpy(buf + la, v->pieces[tok[i + 1]], (size_t)lb);
    pid[i] = old_lookup(v, buf, la + lb);
    psc[i] = pid[i] >= 0 ? v->scores[pid[i]] : 0.0f;
}

/* The old kiln_tok_encode_llama2c (run.c's loop): after each merge, every
 * adjacent pair is scanned again for the best score above -1e10 (strict >:
 * ties to the leftmost) and the tokens after it move down one, O(n^2). The
 * one change: each pair's lookup is kept in pid/psc and redone only for the
 * two pairs a merge changes, which leaves the rule as it was and tens of KB
 * take a second rather than minutes. A malloc'd array; NULL when out of
 * memory. */
static int32_t *old_encode(const old_vocab *v, const char *text, size_t len, int bos, int *n_out) {
    int32_t *tok = malloc(sizeof *tok * (len + 2));
    int *pid = malloc(sizeof *pid * (len + 2));
    float *psc = malloc(sizeof *psc * (len + 2));
    char *buf = malloc((size_t)v->max_len * 2 + 8);
    int n = 0;
    if (!tok || !pid || !psc || !buf) goto fail;
    if (bos && v->n > 1) tok[n++] = 1;
    if (len > 0) {
        int sp = old_lookup(v, " ", 1);
        if (sp >= 0) tok[n++] = sp;
    }
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xC0) == 0x80)
            j++;
        int id = old_lookup(v, text + i, (int)(j - i));
        if (id >= 0)
            tok[n++] = id;
        else
            for (size_t k = i; k < j; k++) {
                int b = v->byte_id[(unsigned char)text[k]];
                tok[n++] = b >= 0 ? b : 0;
            }
        i = j;
    }
    for (int i = 0; i + 1 < n; i++)
        old_pair(v, tok, i, buf, pid, psc);
    for (;;) {
        float best = -1e10f;
        int best_i = -1;
        for (int i = 0; i + 1 < n; i++)
            if (pid[i] >= 0 && psc[i] > best) {
                best = psc[i];
                best_i = i;
            }
        if (best_i < 0) break;
        tok[best_i] = pid[best_i];
        memmove(tok + best_i + 1, tok + best_i + 2, sizeof *tok * (size_t)(n - best_i - 2));
        if (n - best_i - 3 > 0) { /* pairs best_i+2.. become best_i+1.. */
            memmove(pid + best_i + 1, pid + best_i + 2, sizeof *pid * (size_t)(n - best_i - 3));
            memmove(psc + best_i + 1, psc + best_i + 2, sizeof *psc * (size_t)(n - best_i - 3));
        }
        n--;
        if (best_i > 0) old_pair(v, tok, best_i - 1, buf, pid, psc);
        if (best_i + 1 < n) old_pair(v, tok, best_i, buf, pid, psc);
    }
    free(pid);
    free(psc);
    free(buf);
    *n_out = n;
    return tok;
fail:
    free(tok);
    free(pid);
    free(psc);
    free(buf);
    return NULL;
}

/* n bytes of text that mixes what a vocabulary holds with what it does not:
 * words of `letters`, story words, runs of spaces, punctuation, 2- to 4-byte
 * UTF-8, bytes of no character (a lone continuation byte, 0xFF) and control
 * bytes; the end may cut a character. malloc'd. */
static char *mixed_text(size_t n, unsigned long long seed, const char *letters) {
    static const char *const words[] = {"Once", "upon", "the", "and", "Lily", "time", "they"};
    static const char *const utf8[] = {"\xC3\xA9", "\xC3\xAF", "\xE4\xB8\xAD", "\xE2\x82\xAC",
                                       "\xF0\x9F\x98\x80"};
    static const char punct[] = ".,!?\"'-\n\t";
    char *s = malloc(n + 16);
    size_t k = 0, nl = strlen(letters);
    while (s && k < n) {
        unsigned r = kt_rand(&seed) % 16;
        if (r < 9) {
            for (unsigned w = 1 + kt_rand(&seed) % 8; w > 0; w--)
                s[k++] = letters[kt_rand(&seed) % nl];
        } else if (r < 11) {
            for (unsigned w = 1 + kt_rand(&seed) % 3; w > 0; w--)
                s[k++] = ' ';
        } else if (r == 11) {
            s[k++] = punct[kt_rand(&seed) % (sizeof punct - 1)];
        } else if (r == 12) {
            const char *u = utf8[kt_rand(&seed) % (sizeof utf8 / sizeof *utf8)];
            memcpy(s + k, u, strlen(u));
            k += strlen(u);
        } else if (r == 13) {
            s[k++] = (char)(0x80 + kt_rand(&seed) % 128);
        } else if (r == 14) {
            s[k++] = (char)(1 + kt_rand(&seed) % 31);
        } else {
            const char *w = words[kt_rand(&seed) % (sizeof words / sizeof *words)];
            memcpy(s + k, w, strlen(w));
            k += strlen(w);
        }
    }
    return s;
}

/* The tokenizer file at path encodes generated texts of many lengths, with
 * and without BOS, exactly as the old encoder did. */
static int same_as_old(const char *path, const char *letters) {
    static const size_t lens[] = {0, 1, 2, 3, 7, 64, 1000, 10000, 30000};
    old_vocab v;
    kiln_tokenizer *t = NULL;
    int ok = old_vocab_read(path, &v) == 0 && !kiln_tokenizer_load_llama2c(path, 0, &t);
    if (!ok) fprintf(stderr, "  %s: cannot read (%s)\n", path, kiln_last_error());
    for (size_t i = 0; ok && i < sizeof lens / sizeof *lens; i++) {
        char *text = mixed_text(lens[i], 1000 + i, letters);
        for (int bos = 0; ok && bos < 2; bos++) {
            int na, nb;
            int32_t *a = encode(t, text, lens[i], bos, &na);
            int32_t *b = old_encode(&v, text, lens[i], bos, &nb);
            ok = a && b && na >= 0 && ids_equal(a, na, b, nb);
            if (!ok && a && b) {
                int at = 0;
                while (at < na && at < nb && a[at] == b[at])
                    at++;
                fprintf(stderr,
                        "  %zu bytes, bos %d: %d tokens, the old encoder %d; first "
                        "difference at token %d (%d, old %d)\n",
                        lens[i], bos, na, nb, at, at < na ? a[at] : -1, at < nb ? b[at] : -1);
            }
            free(a);
            free(b);
        }
        free(text);
    }
    kiln_tokenizer_free(t);
    old_vocab_free(&v);
    return ok;
}

TEST(same_as_old_encoder_synthetic) {
    const char *path = kt_path("old_syn_tok.bin");
    ASSERT(kt_write_tokenizer(path, SYN_VOCAB) == 0);
    ASSERT(same_as_old(path, "etaonhsdzx"));
}

/* Equal scores everywhere (ties go to the leftmost), a piece twice (the
 * lower id is the one found) and one scoring below -1e10 (never merged). */
TEST(same_as_old_encoder_ties) {
    static const char *const pieces[] = {" ",   "a",   "b",   "c",   "aa",   "ab",   "ba",  "bb",
                                         "ac",  "ca",  "cb",  " a",  " b",   "aaa",  "aba", "bab",
                                         "abc", "bca", " ab", " aa", "abab", "aaaa", "ab",  "cc"};
    static const float scores[] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 1, 1,
                                   2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 5, -2e10f};
    const char *path = kt_path("old_ties_tok.bin");
    ASSERT(write_custom(path, pieces, scores, (int)(sizeof pieces / sizeof *pieces)) == 0);
    ASSERT(same_as_old(path, "abc"));
}

/* An empty <unk> and no byte pieces but <0x63> ("c"): characters missing
 * from the vocabulary become empty tokens, which merge too; an empty piece
 * and "a" twice more; ties. */
TEST(same_as_old_encoder_odd_vocab) {
    static const char *const pieces[] = {"",  "\n<s>\n", "\n</s>\n", " ",   "a",
                                         "b", "",        "ab",       " a",  "ba",
                                         "a", "bb",      " ",        "aab", "<0x63>"};
    static const float scores[] = {-1, 0, 0, 0, 0, 0, 4, 1, 1, 1, 7, 1, 0, 2, 0};
    const char *path = kt_path("old_odd_tok.bin");
    ASSERT(write_records(path, pieces, scores, (int)(sizeof pieces / sizeof *pieces)) == 0);
    ASSERT(same_as_old(path, "abcx"));
}

TEST(same_as_old_encoder_tok512) {
    const char *path = shared_file("models/stories260K/tok512.bin");
    if (!path) SKIP("shared data (models/stories260K) not found");
    ASSERT(same_as_old(path, "etaoinshrdlucmfwypvbgk"));
}

TEST_MAIN(bos_and_dummy_prefix, byte_fallback, merges_best_score_first, merges_leftmost_on_ties,
          decode_rules, encode_reports_room_needed, round_trip_synthetic,
          program_tokenizer_matches_file, tok512_prompt_counts_and_round_trips,
          load_counts_the_records, same_as_old_encoder_synthetic, same_as_old_encoder_ties,
          same_as_old_encoder_odd_vocab, same_as_old_encoder_tok512)
