/* test_generate.c: kiln_generate end to end. The stories260K acceptance
 * (greedy text equal to what llama2.c's run.c prints, from expected.json),
 * self-consistency on the same model (prefixes, prefill chunk sizes), the
 * argument checks made before any work, and seeded sampling. */
#include <ctype.h>
#include <stdint.h>

#include "fixtures.h"
#include "harness.h"
#include "kiln/kiln_llm.h"

/* ---- a JSON reader for expected.json's shape -------------------------------- */
/* An array of flat objects whose values are strings, numbers or booleans. */

typedef struct {
    char *prompt, *text;
    int steps, prompt_tokens, generated_tokens, stopped_at_bos;
    double temperature;
} gen_case;

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

static void put_utf8(char **o, unsigned cp) {
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    char *u = *o;
    for (int i = n - 1; i > 0; i--, cp >>= 6)
        u[i] = (char)(0x80 | (cp & 63));
    u[0] = (char)(lead[n] | cp);
    *o = u + n;
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (unsigned)d;
    }
    return 0;
}

/* p at the opening quote; *out gets a malloc'd, NUL-terminated copy (the
 * decoded text never is longer than its escaped form). NULL on bad input. */
static const char *json_string(const char *p, char **out) {
    if (*p++ != '"') return NULL;
    char *o = *out = malloc(strlen(p) + 1);
    while (o && *p && *p != '"') {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        unsigned cp, lo;
        switch (p[1]) {
        case 'n':
            *o++ = '\n';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case '"':
        case '\\':
        case '/':
            *o++ = p[1];
            break;
        case 'u':
            if (hex4(p + 2, &cp)) goto bad;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[2] == '\\' && p[3] == 'u' && !hex4(p + 4, &lo) &&
                lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            put_utf8(&o, cp);
            break;
        default:
            goto bad;
        }
        p += 2;
    }
    if (!o || *p != '"') goto bad;
    *o = 0;
    return p + 1;
bad:
    free(*out);
    *out = NULL;
    return NULL;
}

static void free_cases(gen_case *c, int n) {
    for (int i = 0; c && i < n; i++) {
        free(c[i].prompt);
        free(c[i].text);
    }
    free(c);
}

/* Parses the file into *out; returns the count, or -1 on malformed input. */
static int parse_cases(const char *json, gen_case **out) {
    int n = 0, cap = 0;
    gen_case *cs = NULL;
    const char *p = json_ws(json);
    if (*p++ != '[') return -1;
    for (p = json_ws(p); *p != ']';) {
        if (*p++ != '{') goto bad;
        if (n == cap) {
            gen_case *c2 = realloc(cs, sizeof *cs * (size_t)(cap = cap ? 2 * cap : 8));
            if (!c2) goto bad;
            cs = c2;
        }
        gen_case *c = &cs[n++];
        memset(c, 0, sizeof *c);
        for (p = json_ws(p); *p != '}';) {
            char *key = NULL, *sval = NULL;
            double num = 0;
            int is_str = 0;
            if (!(p = json_string(p, &key))) goto bad;
            p = json_ws(p);
            if (*p++ != ':') goto bad_key;
            p = json_ws(p);
            if (*p == '"') {
                if (!(p = json_string(p, &sval))) goto bad_key;
                is_str = 1;
            } else if (!strncmp(p, "true", 4))
                num = 1, p += 4;
            else if (!strncmp(p, "false", 5))
                num = 0, p += 5;
            else {
                char *end;
                num = strtod(p, &end);
                if (end == p) goto bad_key;
                p = end;
            }
            if (!strcmp(key, "prompt") && is_str)
                c->prompt = sval, sval = NULL;
            else if (!strcmp(key, "text") && is_str)
                c->text = sval, sval = NULL;
            else if (!strcmp(key, "steps"))
                c->steps = (int)num;
            else if (!strcmp(key, "temperature"))
                c->temperature = num;
            else if (!strcmp(key, "prompt_tokens"))
                c->prompt_tokens = (int)num;
            else if (!strcmp(key, "generated_tokens"))
                c->generated_tokens = (int)num;
            else if (!strcmp(key, "stopped_at_bos"))
                c->stopped_at_bos = num != 0;
            free(key);
            free(sval);
            p = json_ws(p);
            if (*p == ',')
                p = json_ws(p + 1);
            else if (*p != '}')
                goto bad;
            continue;
        bad_key:
            free(key);
            goto bad;
        }
        if (!c->prompt || !c->text) goto bad;
        p = json_ws(p + 1);
        if (*p == ',')
            p = json_ws(p + 1);
        else if (*p != ']')
            goto bad;
    }
    *out = cs;
    return n;
bad:
    free_cases(cs, n);
    return -1;
}

TEST(json_reader) {
    const char *doc =
        " [ {\"prompt\": \"a\\\"b\\\\c\\nd\\u00e9\\ud83d\\ude00\", \"text\": \"\", \"steps\": 12,"
        " \"temperature\": 0.5, \"stopped_at_bos\": true},\n{\"prompt\":\"\",\"text\":\"x\"} ] ";
    gen_case *c = NULL;
    int n = parse_cases(doc, &c);
    ASSERT_EQ_I(n, 2);
    int ok = !strcmp(c[0].prompt, "a\"b\\c\nd\xC3\xA9\xF0\x9F\x98\x80") && c[0].steps == 12 &&
             c[0].temperature == 0.5 && c[0].stopped_at_bos == 1 && !strcmp(c[1].text, "x") &&
             c[1].stopped_at_bos == 0;
    free_cases(c, n);
    ASSERT(ok);
    ASSERT_EQ_I(parse_cases("[{\"prompt\": \"unterminated}]", &c), -1);
    ASSERT_EQ_I(parse_cases("[{\"prompt\": \"\\q\", \"text\": \"\"}]", &c), -1);
}

/* ---- helpers ------------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    int n, cap;
    int stop_after; /* > 0: ask to stop after this many */
} collector;

static int on_token(void *user, int32_t id) {
    collector *c = user;
    if (c->n < c->cap) c->ids[c->n] = id;
    c->n++;
    return c->stop_after > 0 && c->n >= c->stop_after;
}

/* Generates into c (reset first); returns the status. */
static kiln_status gen(kiln_session *s, const int32_t *prompt, int n_prompt, int n_predict,
                       float temp, uint64_t seed, collector *c, kiln_generate_result *res) {
    kiln_generate_options o;
    kiln_generate_options_init(&o);
    o.n_predict = n_predict;
    o.temperature = temp;
    o.seed = seed;
    o.on_token = on_token;
    o.user = c;
    c->n = 0;
    return kiln_generate(s, prompt, n_prompt, &o, res);
}

typedef struct {
    char *s;
    size_t len, cap;
} text_buf;

/* Appends a decoded piece as run.c's safe_printf prints it: nothing for an
 * empty piece or a lone byte that is neither printable nor whitespace. */
static void put_piece(text_buf *b, const kiln_tokenizer *t, int prev, int id) {
    size_t len;
    const char *p = kiln_tokenizer_decode(t, prev, id, &len);
    if (!p || !len) return;
    if (len == 1 && !(isprint((unsigned char)p[0]) || isspace((unsigned char)p[0]))) return;
    if (b->len + len + 1 > b->cap) {
        b->cap = (b->len + len + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, p, len);
    b->len += len;
    b->s[b->len] = 0;
}

/* run.c's stdout: the prompt's tokens after the first (BOS), each decoded
 * after its predecessor, then the generated tokens. */
static char *run_c_text(const kiln_tokenizer *t, const int32_t *prompt, int n_prompt,
                        const int32_t *gen_ids, int n_gen) {
    text_buf b = {calloc(1, 1), 0, 1};
    int prev = prompt[0];
    for (int i = 1; i < n_prompt + n_gen; i++) {
        int id = i < n_prompt ? prompt[i] : gen_ids[i - n_prompt];
        put_piece(&b, t, prev, id);
        prev = id;
    }
    return b.s;
}

static int32_t *encode(const kiln_tokenizer *t, const char *text, int *n) {
    size_t len = strlen(text);
    int cap = (int)len + 3;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (ids && kiln_tokenizer_encode(t, text, len, 1, ids, cap, n)) *n = -1;
    return ids;
}

static const char *stories_file(const char *name) {
    static char bufs[4][1200];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, sizeof bufs[0], "%s/models/stories260K/%s", kt_shared_data(), name);
    return b;
}

/* Compiles stories260K once per prefill size (0: the default) and backend
 * list (NULL: the default; "ref" for run.c's exact text). NULL when the
 * shared data is absent or compiling failed (message printed). */
static const char *stories_program_on(int prefill, const char *backends) {
    static char done[4][600];
    int k = (prefill ? 1 : 0) + (backends ? 2 : 0);
    if (!kt_shared_data()) return NULL;
    if (!done[k][0]) {
        char name[48];
        snprintf(name, sizeof name, "stories_p%d_%s.kiln", prefill,
                 backends ? backends : "default");
        const char *out = kt_path(name);
        if (kt_compile(stories_file("stories260K.bin"), stories_file("tok512.bin"), out, prefill, 0,
                       backends)) {
            fprintf(stderr, "  compile stories260K: %s\n", kiln_last_error());
            return NULL;
        }
        snprintf(done[k], sizeof done[k], "%s", out);
    }
    return done[k];
}

static const char *stories_program(int prefill) {
    return stories_program_on(prefill, NULL);
}

/* ---- (a) stories260K acceptance --------------------------------------------------- */

TEST(stories260K_matches_run_c) {
    if (!kt_shared_data())
        SKIP("shared data not found (set KILN_SHARED_DATA): stories260K acceptance not run");
    char *json = kt_read_file(stories_file("expected.json"), NULL);
    ASSERT_MSG(json, "cannot read %s", stories_file("expected.json"));
    gen_case *cases = NULL;
    int n_cases = parse_cases(json, &cases);
    free(json);
    ASSERT_MSG(n_cases > 0, "expected.json: no cases parsed");
    /* run.c's exact text: on ref (the default backend is checked against ref
     * at a tolerance by stories260K_default_backend_close_to_ref). */
    const char *path = stories_program_on(0, "ref");
    ASSERT(path);
    kiln_program *p;
    kiln_session *s;
    kiln_tokenizer *t;
    ASSERT_OK(kiln_program_open(path, &p));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_tokenizer_from_program(p, &t));
    int failures = 0;
    for (int i = 0; i < n_cases; i++) {
        const gen_case *c = &cases[i];
        int n;
        int32_t *prompt = encode(t, c->prompt, &n);
        if (n != c->prompt_tokens) {
            fprintf(stderr, "  case %d \"%s\": %d prompt tokens, expected %d\n", i, c->prompt, n,
                    c->prompt_tokens);
            failures++;
            free(prompt);
            continue;
        }
        /* run.c forwards positions 0..steps-1 and samples after each one from
         * the prompt's last token on: steps - prompt_tokens + 1 sampled
         * tokens, all printed (unless one is BOS). expected.json's
         * generated_tokens is steps - prompt_tokens, one fewer than the
         * tokens its text holds, hence n_predict = generated_tokens + 1. */
        if (c->steps != c->prompt_tokens + c->generated_tokens && !c->stopped_at_bos) {
            fprintf(stderr, "  case %d: steps %d != prompt %d + generated %d\n", i, c->steps,
                    c->prompt_tokens, c->generated_tokens);
            failures++;
        }
        int n_predict = c->generated_tokens + 1;
        collector col = {malloc(sizeof(int32_t) * (size_t)n_predict), 0, n_predict, 0};
        kiln_generate_result res;
        kiln_status st = gen(s, prompt, n, n_predict, (float)c->temperature, 1, &col, &res);
        if (st) {
            fprintf(stderr, "  case %d: kiln_generate: %s\n", i, kiln_last_error());
            failures++;
        } else {
            char *text = run_c_text(t, prompt, n, col.ids, col.n);
            int same = !strcmp(text, c->text);
            if (!same) {
                size_t k = 0;
                while (text[k] && text[k] == c->text[k])
                    k++;
                fprintf(stderr,
                        "  case %d \"%s\": text differs at byte %zu\n    kiln:     \"%.60s\"\n    "
                        "run.c:    \"%.60s\"\n",
                        i, c->prompt, k, text + k, c->text + k);
            }
            if (res.stopped_at_end != c->stopped_at_bos) {
                fprintf(stderr, "  case %d: stopped_at_end %d, stopped_at_bos %d\n", i,
                        res.stopped_at_end, c->stopped_at_bos);
                same = 0;
            }
            if (res.n_prompt != n || res.n_generated != col.n ||
                (!c->stopped_at_bos && res.n_generated != n_predict)) {
                fprintf(stderr,
                        "  case %d: n_prompt %d, n_generated %d (callback saw %d, want %d)\n", i,
                        res.n_prompt, res.n_generated, col.n, n_predict);
                same = 0;
            }
            printf(
                "  case %d: %d prompt + %d generated tokens, prefill %.1f ms, decode %.1f ms: %s\n",
                i, res.n_prompt, res.n_generated, res.prefill_ms, res.decode_ms,
                same ? "same as run.c" : "DIFFERENT");
            failures += !same;
            free(text);
        }
        free(col.ids);
        free(prompt);
    }
    kiln_tokenizer_free(t);
    kiln_session_destroy(s);
    kiln_program_close(p);
    free_cases(cases, n_cases);
    ASSERT_MSG(failures == 0, "%d of the expected.json checks failed", failures);
}

/* Greedy text for n tokens is a prefix of the text for n + k tokens. */
TEST(stories260K_greedy_prefixes) {
    if (!kt_shared_data()) SKIP("shared data not found");
    const char *path = stories_program(0);
    ASSERT(path);
    kiln_program *p;
    kiln_session *s;
    kiln_tokenizer *t;
    ASSERT_OK(kiln_program_open(path, &p));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_tokenizer_from_program(p, &t));
    static const char *const prompts[] = {"Tom had a red ball",     "The cat sat",
                                          "One day, a little bird", "Sue was happy because",
                                          "\"Look!\" said Ben.",    "Zz"};
    static const int lens[] = {1, 7, 30, 90};
    int bad = 0;
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts && !bad; i++) {
        int n;
        int32_t *prompt = encode(t, prompts[i], &n);
        int32_t longest[90];
        char *long_text = NULL;
        for (int k = 3; k >= 0 && !bad; k--) {
            int32_t ids[90];
            collector col = {ids, 0, 90, 0};
            kiln_generate_result res;
            if (gen(s, prompt, n, lens[k], 0.0f, 7 + (uint64_t)k, &col, &res)) {
                fprintf(stderr, "  \"%s\": %s\n", prompts[i], kiln_last_error());
                bad = 1;
                break;
            }
            char *text = run_c_text(t, prompt, n, ids, col.n);
            if (k == 3) {
                memcpy(longest, ids, sizeof ids);
                long_text = text;
                if (res.stopped_at_end)
                    fprintf(stderr, "  \"%s\" ended after %d tokens\n", prompts[i], col.n);
                continue;
            }
            /* A shorter run is the longer one cut (or equal, if it ended). */
            bad = col.n > lens[k] || memcmp(ids, longest, sizeof *ids * (size_t)col.n) ||
                  strncmp(text, long_text, strlen(text));
            if (bad)
                fprintf(stderr, "  \"%s\": %d tokens are not a prefix of %d\n", prompts[i], lens[k],
                        lens[3]);
            free(text);
        }
        free(long_text);
        free(prompt);
    }
    kiln_tokenizer_free(t);
    kiln_session_destroy(s);
    kiln_program_close(p);
    ASSERT(!bad);
}

/* Prompts longer than a prefill call, and around its boundary, give the same
 * tokens with prefill chunks of 128 and of 7. */
TEST(stories260K_prefill_chunk_size_does_not_matter) {
    if (!kt_shared_data()) SKIP("shared data not found");
    const char *pa = stories_program(0), *pb = stories_program(7);
    ASSERT(pa && pb);
    kiln_program *a, *b;
    kiln_session *sa, *sb;
    ASSERT_OK(kiln_program_open(pa, &a));
    ASSERT_OK(kiln_program_open(pb, &b));
    int64_t pm;
    ASSERT_OK(kiln_program_meta_int(a, "llm.prefill_max_tokens", &pm));
    ASSERT_EQ_I(pm, 128);
    ASSERT_OK(kiln_program_meta_int(b, "llm.prefill_max_tokens", &pm));
    ASSERT_EQ_I(pm, 7);
    ASSERT_OK(kiln_session_create(a, &sa));
    ASSERT_OK(kiln_session_create(b, &sb));
    static const int lens[] = {127, 128, 129, 300};
    unsigned long long rs = 99;
    int32_t prompt[300];
    prompt[0] = 1;
    for (int i = 1; i < 300; i++)
        prompt[i] = 3 + (int32_t)(kt_rand(&rs) % 509);
    int bad = 0;
    for (int k = 0; k < 4 && !bad; k++) {
        int32_t ia[40], ib[40];
        collector ca = {ia, 0, 40, 0}, cb = {ib, 0, 40, 0};
        kiln_generate_result ra, rb;
        ASSERT_OK(gen(sa, prompt, lens[k], 40, 0.0f, 1, &ca, &ra));
        ASSERT_OK(gen(sb, prompt, lens[k], 40, 0.0f, 1, &cb, &rb));
        ASSERT_EQ_I(ra.n_prompt, lens[k]);
        bad = ca.n != cb.n || ra.stopped_at_end != rb.stopped_at_end ||
              memcmp(ia, ib, sizeof *ia * (size_t)ca.n);
        if (bad)
            fprintf(stderr, "  prompt of %d tokens: prefill 128 and prefill 7 differ\n", lens[k]);
    }
    kiln_session_destroy(sa);
    kiln_session_destroy(sb);
    kiln_program_close(a);
    kiln_program_close(b);
    ASSERT(!bad);
}

/* ---- (b) argument checks ---------------------------------------------------------- */

#define ERR_CTX 32
#define ERR_VOCAB 300

static const char *small_program(void) {
    static char done[600];
    if (!done[0]) {
        kt_l2c_config c = {16, 32, 1, 2, 2, ERR_VOCAB, ERR_CTX, 1, 31};
        if (kt_write_llama2c(kt_path("small.bin"), &c) ||
            kt_write_tokenizer(kt_path("small_tok.bin"), ERR_VOCAB))
            return NULL;
        const char *out = kt_path("small.kiln");
        if (kt_compile(kt_path("small.bin"), kt_path("small_tok.bin"), out, 8, ERR_CTX, NULL)) {
            fprintf(stderr, "  compile: %s\n", kiln_last_error());
            return NULL;
        }
        snprintf(done, sizeof done, "%s", out);
    }
    return done;
}

/* The decode logits a session gives for `token` at `pos` (copied to out). */
static kiln_status decode_at(kiln_session *s, int32_t token, int32_t pos, float *out, int vocab) {
    int dec;
    int64_t one = 1;
    const void *l;
    kiln_status st;
    if ((st = kiln_program_find_method(kiln_session_program(s), "decode", &dec)) ||
        (st = kiln_session_set_input(s, dec, 0, &token, KILN_I32, 1, &one)) ||
        (st = kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one)) ||
        (st = kiln_session_execute(s, dec)) ||
        (st = kiln_session_get_output(s, dec, 0, &l, NULL, NULL, NULL)))
        return st;
    memcpy(out, l, sizeof(float) * (size_t)vocab);
    return KILN_OK;
}

/* One rejected call: INVALID_ARG from both entry points, a message holding
 * every string in `needles` ('|'-separated), no token reported, a zeroed
 * result, and the session's state untouched. */
static int expect_rejected(kiln_session *s, const int32_t *prompt, int n_prompt, int n_predict,
                           float temp, const char *needles) {
    kiln_generate_options o;
    kiln_generate_options_init(&o);
    o.n_predict = n_predict;
    o.temperature = temp;
    int32_t ids[4];
    collector col = {ids, 0, 4, 0};
    o.on_token = on_token;
    o.user = &col;
    kiln_generate_result res;
    memset(&res, 0x5a, sizeof res);
    kiln_status st = kiln_generate(s, prompt, n_prompt, &o, &res);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    kiln_status st2 = kiln_generate_check(kiln_session_program(s), prompt, n_prompt, &o);
    int ok = st == KILN_ERR_INVALID_ARG && st2 == KILN_ERR_INVALID_ARG &&
             !strcmp(msg, kiln_last_error()) && col.n == 0 && res.n_prompt == 0 &&
             res.n_generated == 0 && res.stopped_at_end == 0;
    char want[256];
    snprintf(want, sizeof want, "%s", needles);
    for (char *w = strtok(want, "|"); w; w = strtok(NULL, "|"))
        if (!strstr(msg, w)) ok = 0;
    if (!ok)
        fprintf(stderr,
                "  n_prompt %d, n_predict %d, temp %g: status %d/%d, %d tokens, message \"%s\" "
                "(want \"%s\")\n",
                n_prompt, n_predict, (double)temp, st, st2, col.n, msg, needles);
    return ok;
}

TEST(generate_rejects_bad_arguments_before_any_work) {
    const char *path = small_program();
    ASSERT(path);
    kiln_program *p;
    kiln_session *s, *ref;
    ASSERT_OK(kiln_program_open(path, &p));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_session_create(p, &ref));
    int32_t prompt[ERR_CTX + 1];
    for (int i = 0; i <= ERR_CTX; i++)
        prompt[i] = 3 + (i * 41) % (ERR_VOCAB - 3);
    /* Both sessions hold the cache of the same 6 + 5 tokens. */
    int32_t got[8];
    collector col = {got, 0, 8, 0};
    kiln_generate_result res;
    ASSERT_OK(gen(s, prompt, 6, 5, 0.0f, 1, &col, &res));
    ASSERT_OK(gen(ref, prompt, 6, 5, 0.0f, 1, &col, &res));
    ASSERT_EQ_I(res.n_generated, 5);

    int ok = 1;
    ok &= expect_rejected(s, prompt, ERR_CTX + 1, -1, 0.0f, "33|32"); /* prompt > context */
    ok &= expect_rejected(s, prompt, 10, -2, 0.0f, "-2");             /* n_predict < -1 */
    ok &= expect_rejected(s, prompt, 10, -1000000, 0.0f, "-1000000");
    ok &= expect_rejected(s, prompt, 0, 4, 0.0f, "no tokens"); /* empty prompt */
    ok &= expect_rejected(s, prompt, -3, 4, 0.0f, "no tokens");
    int32_t bad_ids[6] = {1, 5, 7, 9, ERR_VOCAB, 11};
    ok &= expect_rejected(s, bad_ids, 6, 4, 0.0f, "token 4|300|299"); /* id past the vocabulary */
    bad_ids[4] = -5;
    ok &= expect_rejected(s, bad_ids, 6, 4, 0.0f, "token 4|-5|299"); /* negative id */
    /* The message for a bad temperature names only the rule, not the value
     * (see the report: a "%g" would help); check what it says today. */
    ok &= expect_rejected(s, prompt, 10, 4, -0.5f, "temperature -0.5 must be");
    ok &= expect_rejected(s, prompt, 10, 4, NAN, "temperature");
    ASSERT(ok);

    /* No work was done: s still holds its cache, exactly like ref. */
    float la[ERR_VOCAB], lb[ERR_VOCAB];
    ASSERT_OK(decode_at(s, 42, 10, la, ERR_VOCAB));
    ASSERT_OK(decode_at(ref, 42, 10, lb, ERR_VOCAB));
    ASSERT(memcmp(la, lb, sizeof la) == 0);

    /* The limits themselves are allowed: a prompt filling the context with
     * nothing to predict, and prompt + n_predict equal to the context (or
     * past it: generation stops at the context, as
     * generate_stops_at_the_context checks). */
    col.n = 0;
    ASSERT_OK(gen(s, prompt, ERR_CTX, -1, 0.0f, 1, &col, &res));
    ASSERT_EQ_I(res.n_prompt, ERR_CTX);
    ASSERT_EQ_I(res.n_generated, 0);
    ASSERT_OK(gen(s, prompt, ERR_CTX, 0, 0.0f, 1, &col, &res));
    ASSERT_EQ_I(res.n_generated, 0);
    int32_t many[ERR_CTX];
    collector cm = {many, 0, ERR_CTX, 0};
    ASSERT_OK(gen(s, prompt, 10, 22, 0.0f, 1, &cm, &res));
    ASSERT(res.n_generated == 22 || res.stopped_at_end);
    ASSERT_EQ_I(res.stopped_at_context, 0);
    ASSERT_OK(gen(s, prompt, 10, 2147483647, 0.0f, 1, &cm, &res)); /* no int overflow */
    ASSERT(res.n_generated == 22 || res.stopped_at_end);
    kiln_session_destroy(s);
    kiln_session_destroy(ref);
    kiln_program_close(p);
}

/* Without an end token (no tokenizer in the program), n_predict -1 runs until
 * the context is full; a callback returning non-zero stops at once. */
TEST(generate_fills_context_and_stops_on_request) {
    kt_l2c_config c = {16, 32, 1, 2, 2, 64, 40, 0, 32};
    ASSERT(kt_write_llama2c(kt_path("notok.bin"), &c) == 0);
    ASSERT_OK(kt_compile(kt_path("notok.bin"), NULL, kt_path("notok.kiln"), 8, 0, NULL));
    kiln_program *p;
    kiln_session *s;
    ASSERT_OK(kiln_program_open(kt_path("notok.kiln"), &p));
    ASSERT_OK(kiln_session_create(p, &s));
    int32_t prompt[5] = {1, 10, 20, 30, 40}, ids[64];
    collector col = {ids, 0, 64, 0};
    kiln_generate_result res;
    ASSERT_OK(gen(s, prompt, 5, -1, 0.8f, 3, &col, &res));
    ASSERT_EQ_I(res.n_generated, 40 - 5);
    ASSERT_EQ_I(col.n, 40 - 5);
    ASSERT_EQ_I(res.stopped_at_end, 0);
    collector stop = {ids, 0, 64, 4};
    ASSERT_OK(gen(s, prompt, 5, 20, 0.8f, 3, &stop, &res));
    ASSERT_EQ_I(stop.n, 4);
    ASSERT_EQ_I(res.n_generated, 4);
    kiln_session_destroy(s);
    kiln_program_close(p);
}

/* n_predict is the most new tokens and the context caps them: past the
 * context, generation goes on to what fits and says so in
 * stopped_at_context (the tokens are those of a run that asked for exactly
 * what fits); at or under it, or stopped by the caller, it does not. A
 * continuation stops at the context the same way. */
TEST(generate_stops_at_the_context) {
    kt_l2c_config c = {16, 32, 1, 2, 2, 64, 40, 0, 32};
    ASSERT(kt_write_llama2c(kt_path("notok.bin"), &c) == 0);
    ASSERT_OK(kt_compile(kt_path("notok.bin"), NULL, kt_path("notok.kiln"), 8, 0, NULL));
    kiln_program *p;
    kiln_session *s;
    ASSERT_OK(kiln_program_open(kt_path("notok.kiln"), &p));
    ASSERT_OK(kiln_session_create(p, &s));
    int32_t prompt[40], ids[64], want[64];
    for (int i = 0; i < 40; i++)
        prompt[i] = 2 + (i * 7) % 60;
    kiln_generate_result res;
    collector exact = {want, 0, 64, 0};
    ASSERT_OK(gen(s, prompt, 5, 35, 0.8f, 3, &exact, &res));
    ASSERT_EQ_I(res.n_generated, 35);
    ASSERT_EQ_I(res.stopped_at_context, 0); /* n_predict ended it: exactly what fits */
    const int over[] = {36, 100, 1 << 24, 2147483647, -1};
    for (int k = 0; k < 5; k++) {
        collector col = {ids, 0, 64, 0};
        ASSERT_OK(gen(s, prompt, 5, over[k], 0.8f, 3, &col, &res));
        ASSERT_MSG(res.n_generated == 35 && col.n == 35 && res.stopped_at_context == 1 &&
                       res.n_past == 39 && !memcmp(ids, want, sizeof *ids * 35),
                   "n_predict %d: %d tokens, stopped_at_context %d, n_past %d", over[k],
                   res.n_generated, res.stopped_at_context, res.n_past);
    }
    /* Stopped by the caller before the context: not the context's doing. */
    collector stop = {ids, 0, 64, 4};
    ASSERT_OK(gen(s, prompt, 5, 100, 0.8f, 3, &stop, &res));
    ASSERT_EQ_I(res.n_generated, 4);
    ASSERT_EQ_I(res.stopped_at_context, 0);
    /* A prompt filling the context: nothing fits (n_predict 0 asks for nothing). */
    collector none = {ids, 0, 64, 0};
    ASSERT_OK(gen(s, prompt, 40, 8, 0.8f, 3, &none, &res));
    ASSERT_EQ_I(res.n_generated, 0);
    ASSERT_EQ_I(none.n, 0);
    ASSERT_EQ_I(res.stopped_at_context, 1);
    ASSERT_OK(gen(s, prompt, 40, 0, 0.8f, 3, &none, &res));
    ASSERT_EQ_I(res.stopped_at_context, 0);
    /* A continuation at position 30 with 5 new ids has room for 5 tokens. */
    collector col = {ids, 0, 64, 0};
    ASSERT_OK(gen(s, prompt, 30, 0, 0.0f, 1, &col, &res));
    kiln_generate_options o;
    kiln_generate_options_init(&o);
    o.n_predict = 50;
    o.temperature = 0.0f;
    o.on_token = on_token;
    o.user = &col;
    ASSERT_OK(kiln_generate_continue(s, prompt + 30, 5, 30, &o, &res));
    ASSERT_EQ_I(res.n_generated, 5);
    ASSERT_EQ_I(res.stopped_at_context, 1);
    ASSERT_EQ_I(res.n_past, 39);
    kiln_session_destroy(s);
    kiln_program_close(p);
}

/* ---- (c) sampling ------------------------------------------------------------------ */

TEST(sampling_is_seeded) {
    const char *path = small_program();
    ASSERT(path);
    kiln_program *p, *p2;
    kiln_session *s, *s2;
    ASSERT_OK(kiln_program_open(path, &p));
    ASSERT_OK(kiln_program_open(path, &p2));
    ASSERT_OK(kiln_session_create(p, &s));
    ASSERT_OK(kiln_session_create(p2, &s2));
    int32_t prompt[4] = {1, 262, 264, 263};
    enum { N = 24, SEEDS = 5 };
    int32_t runs[SEEDS][N], again[N];
    int counts[SEEDS];
    kiln_generate_result res;
    for (int k = 0; k < SEEDS; k++) {
        collector col = {runs[k], 0, N, 0};
        ASSERT_OK(gen(s, prompt, 4, N, 1.0f, 1000 + (uint64_t)k, &col, &res));
        counts[k] = col.n;
        /* The same seed again, in another session of another program. */
        collector c2 = {again, 0, N, 0};
        ASSERT_OK(gen(s2, prompt, 4, N, 1.0f, 1000 + (uint64_t)k, &c2, &res));
        ASSERT_EQ_I(c2.n, col.n);
        ASSERT_MSG(memcmp(again, runs[k], sizeof *again * (size_t)col.n) == 0,
                   "seed %d is not reproducible", 1000 + k);
    }
    /* Different seeds give different tokens (each run has its first few at
     * least; the chance of two equal 8-token runs here is negligible). */
    for (int a = 0; a < SEEDS; a++) {
        ASSERT_MSG(counts[a] >= 8, "seed %d ended after %d tokens", 1000 + a, counts[a]);
        for (int b = a + 1; b < SEEDS; b++)
            ASSERT_MSG(memcmp(runs[a], runs[b], sizeof(int32_t) * 8),
                       "seeds %d and %d give the same tokens", 1000 + a, 1000 + b);
    }
    /* Greedy ignores the seed. */
    int32_t g1[N], g2[N];
    collector a1 = {g1, 0, N, 0}, a2 = {g2, 0, N, 0};
    ASSERT_OK(gen(s, prompt, 4, N, 0.0f, 1, &a1, &res));
    ASSERT_OK(gen(s, prompt, 4, N, 0.0f, 999, &a2, &res));
    ASSERT_EQ_I(a1.n, a2.n);
    ASSERT(memcmp(g1, g2, sizeof *g1 * (size_t)a1.n) == 0);
    kiln_session_destroy(s);
    kiln_session_destroy(s2);
    kiln_program_close(p);
    kiln_program_close(p2);
}

/* The default backend (cpu) gives ref's logits on stories260K within 1e-3
 * of the largest (summation order, and the f16 cache's rounding), at every
 * position of a prefill and of the decodes after it. */
static kiln_status all_logits(const char *path, const int32_t *toks, int n, float *out, int vocab) {
    kiln_program *p;
    kiln_session *s = NULL;
    int pre, dec;
    int64_t len = n - 4, one = 1;
    int32_t zero = 0, all = 1;
    const void *o;
    kiln_status st = kiln_program_open(path, &p);
    if (st) return st;
    if (!(st = kiln_session_create(p, &s)) &&
        !(st = kiln_program_find_method(p, "prefill", &pre)) &&
        !(st = kiln_program_find_method(p, "decode", &dec)) &&
        !(st = kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &len)) &&
        !(st = kiln_session_set_input(s, pre, 1, &zero, KILN_I32, 1, &one)) &&
        !(st = kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one)) &&
        !(st = kiln_session_execute(s, pre)) &&
        !(st = kiln_session_get_output(s, pre, 0, &o, NULL, NULL, NULL)))
        memcpy(out, o, sizeof(float) * (size_t)len * (size_t)vocab);
    for (int32_t t = (int32_t)len; !st && t < n; t++)
        if (!(st = kiln_session_set_input(s, dec, 0, &toks[t], KILN_I32, 1, &one)) &&
            !(st = kiln_session_set_input(s, dec, 1, &t, KILN_I32, 1, &one)) &&
            !(st = kiln_session_execute(s, dec)) &&
            !(st = kiln_session_get_output(s, dec, 0, &o, NULL, NULL, NULL)))
            memcpy(out + (size_t)t * (size_t)vocab, o, sizeof(float) * (size_t)vocab);
    kiln_session_destroy(s);
    kiln_program_close(p);
    return st;
}

TEST(stories260K_default_backend_close_to_ref) {
    if (!kt_shared_data()) SKIP("shared data not found (set KILN_SHARED_DATA)");
    const char *pd = stories_program(0), *pr = stories_program_on(0, "ref");
    ASSERT(pd && pr);
    enum { N = 24, V = 512 };
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = (int32_t)(1 + (i * 37) % (V - 1));
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    ASSERT_OK(all_logits(pd, toks, N, a, V));
    ASSERT_OK(all_logits(pr, toks, N, b, V));
    double worst = 0, e;
    for (int t = 0; t < N; t++)
        if ((e = kt_rel_err(a + (size_t)t * V, b + (size_t)t * V, V)) > worst) worst = e;
    free(a);
    free(b);
    printf("  default backend vs ref: worst relative error %.3g (bound 1e-3)\n", worst);
    ASSERT(worst <= 1e-3);
}

TEST_MAIN(json_reader, stories260K_matches_run_c, stories260K_default_backend_close_to_ref,
          stories260K_greedy_prefixes, stories260K_prefill_chunk_size_does_not_matter,
          generate_rejects_bad_arguments_before_any_work,
          generate_fills_context_and_stops_on_request, generate_stops_at_the_context,
          sampling_is_seeded)
