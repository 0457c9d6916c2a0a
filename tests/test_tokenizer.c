/* test_tokenizer.c: the llama2.c tokenizer rules (BOS, dummy-prefix space,
 * byte fallback, best-score-first merges with leftmost ties, a leading space
 * dropped after BOS) on tokenizers the tests write themselves, and token
 * counts and round trips on the real tok512.bin when the shared data is
 * present. */
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

/* Writes a llama2.c tokenizer.bin: the 3 specials, the 256 byte pieces, then
 * `n` pieces with their scores. */
static int write_custom(const char *path, const char *const *pieces, const float *scores, int n) {
    size_t cap = 4 + (size_t)(259 + n) * 8 + 3 * 8 + 256 * 6;
    for (int i = 0; i < n; i++)
        cap += strlen(pieces[i]);
    uint8_t *b = malloc(cap), *p = b + 4;
    int32_t maxlen = 6;
    for (int i = 0; i < 259 + n; i++) {
        char tmp[8];
        const char *s;
        float sc = 0.0f;
        if (i < 3)
            s = i == 0 ? "<unk>" : i == 1 ? "\n<s>\n" : "\n</s>\n";
        else if (i < 259)
            snprintf(tmp, sizeof tmp, "<0x%02X>", i - 3), s = tmp;
        else
            s = pieces[i - 259], sc = scores[i - 259];
        int32_t l = (int32_t)strlen(s);
        if (l > maxlen) maxlen = l;
        memcpy(p, &sc, 4);
        memcpy(p + 4, &l, 4);
        memcpy(p + 8, s, (size_t)l);
        p += 8 + l;
    }
    memcpy(b, &maxlen, 4);
    int r = kt_write_file(path, b, (size_t)(p - b));
    free(b);
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

TEST_MAIN(bos_and_dummy_prefix, byte_fallback, merges_best_score_first, merges_leftmost_on_ties,
          decode_rules, encode_reports_room_needed, round_trip_synthetic,
          program_tokenizer_matches_file, tok512_prompt_counts_and_round_trips,
          load_counts_the_records)
