/* test_hf.c: Hugging Face folders. Kiln's logits against transformers'
 * (tests/data/hf, made by scripts/make_hf_fixtures.py) for Llama (plain,
 * llama3 rope scaling, tied), Qwen2 and Qwen3 (sharded) in f32, f16 and
 * bf16; the JSON parser; and damaged folders, each refused with a message
 * naming the file and the key or tensor. */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "fixtures.h"
#include "harness.h"
#include "import/import.h"
#include "import/safetensors.h"
#include "kiln/kiln.h"
#include "kiln/kiln_llm.h"

#define TOL 1e-4
#define DATA KILN_SOURCE_DIR "/tests/data/hf"

static const char *FIXTURES[] = {"llama_f32", "llama3_rope_bf16", "llama_tied_f16", "qwen2_bf16",
                                 "qwen3_f32_sharded"};

/* ---- folders in the test's temporary directory ----------------------------- */

static char g_dirs[64][512];
static int g_n_dirs;

static void rm_dirs(void) {
    for (int i = 0; i < g_n_dirs; i++) {
        DIR *d = opendir(g_dirs[i]);
        if (d) {
            struct dirent *e;
            char p[1100];
            while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                    if (snprintf(p, sizeof p, "%s/%s", g_dirs[i], e->d_name) < (int)sizeof p)
                        unlink(p);
                }
            closedir(d);
        }
        rmdir(g_dirs[i]);
    }
}

/* A new empty folder under the temporary directory (removed at exit). */
static const char *new_dir(const char *name) {
    static int registered;
    const char *p = kt_path(name);
    if (!registered) {
        registered = 1;
        atexit(rm_dirs); /* after kt_tmpdir's, so it runs first */
    }
    if (mkdir(p, 0700) != 0 || g_n_dirs == 64) return NULL;
    snprintf(g_dirs[g_n_dirs], sizeof g_dirs[0], "%s", p);
    return g_dirs[g_n_dirs++];
}

static int copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char a[1100], b[1100];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    size_t n;
    char *d = kt_read_file(a, &n);
    if (!d) return -1;
    int rc = kt_write_file(b, d, n);
    free(d);
    return rc;
}

/* A copy of fixture llama_f32 (config, generation config, weights). */
static const char *llama_copy(const char *name) {
    const char *dir = new_dir(name);
    if (!dir) return NULL;
    static const char *files[] = {"config.json", "generation_config.json", "model.safetensors"};
    for (int i = 0; i < 3; i++)
        if (copy_file(DATA "/llama_f32", dir, files[i])) return NULL;
    return dir;
}

/* Replaces the first `from` in dir/file with `to`; 0 when done. */
static int edit_file(const char *dir, const char *file, const char *from, const char *to) {
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    size_t n;
    char *d = kt_read_file(p, &n);
    if (!d) return -1;
    char *at = strstr(d, from);
    if (!at) {
        free(d);
        return -1;
    }
    size_t fl = strlen(from), tl = strlen(to);
    char *o = malloc(n - fl + tl + 1);
    memcpy(o, d, (size_t)(at - d));
    memcpy(o + (at - d), to, tl);
    memcpy(o + (at - d) + tl, at + fl, n - (size_t)(at - d) - fl);
    int rc = kt_write_file(p, o, n - fl + tl);
    free(o);
    free(d);
    return rc;
}

/* Imports a folder; returns the status (the message in kiln_last_error). */
static kiln_status import_dir(const char *dir) {
    kiln_import imp;
    kiln_module m;
    memset(&m, 0, sizeof m);
    kiln_status st = kiln_import_open(dir, NULL, &imp, &m);
    kiln_module_free(&m);
    kiln_import_close(&imp);
    return st;
}

/* ---- logits against transformers -------------------------------------------- */

typedef struct {
    int32_t ids[64];
    int n, vocab;
    float *logits; /* n x vocab */
} oracle;

static int load_oracle(const char *dir, oracle *o) {
    char p[1100];
    snprintf(p, sizeof p, "%s/oracle.json", dir);
    size_t n;
    char *text = kt_read_file(p, &n);
    if (!text) return -1;
    kiln_json_doc doc;
    int rc = -1;
    if (kiln_json_parse(text, n, "oracle.json", 0, &doc) == KILN_OK) {
        const kiln_json *ids = kiln_json_get(doc.root, "ids");
        int64_t v = 0;
        if (ids && ids->type == KILN_JSON_ARRAY && ids->len <= 64 &&
            kiln_json_get_int(doc.root, "oracle.json", "vocab", 1, &v) == KILN_OK) {
            o->n = (int)ids->len;
            o->vocab = (int)v;
            for (int i = 0; i < o->n; i++)
                o->ids[i] = (int32_t)ids->items[i].i;
            snprintf(p, sizeof p, "%s/logits.f32", dir);
            size_t len;
            o->logits = (float *)kt_read_file(p, &len);
            if (o->logits && len == sizeof(float) * (size_t)o->n * (size_t)o->vocab) rc = 0;
        }
        kiln_json_free(&doc);
    }
    free(text);
    return rc;
}

/* Prefill all positions in one call, then again: prefill `split` tokens
 * and decode the rest one at a time. Worst relative error over all. */
static int run_fixture(const char *name, double *worst_prefill, double *worst_decode) {
    char dir[1100], prog[600];
    snprintf(dir, sizeof dir, "%s/%s", DATA, name);
    snprintf(prog, sizeof prog, "%s", kt_path(name));
    strcat(prog, ".kiln");
    oracle o = {0};
    if (load_oracle(dir, &o)) {
        fprintf(stderr, "  %s: cannot read the oracle\n", name);
        return -1;
    }
    /* f32 KV cache: the comparison with transformers' f32 logits is about exactness. */
    if (kt_compile_kv(dir, NULL, prog, 16, 64, NULL, "f32")) {
        fprintf(stderr, "  %s: compile: %s\n", name, kiln_last_error());
        free(o.logits);
        return -1;
    }
    kiln_program *p = NULL;
    kiln_session *s = NULL;
    int rc = -1, pre, dec, V = o.vocab, split = o.n / 2;
    if (kiln_program_open(prog, &p) || kiln_session_create(p, &s) ||
        kiln_program_find_method(p, "prefill", &pre) || kiln_program_find_method(p, "decode", &dec))
        goto done;
    int64_t n = o.n, one = 1, shape[4];
    int32_t zero = 0, all = 1;
    const void *out;
    kiln_session_set_input(s, pre, 0, o.ids, KILN_I32, 1, &n);
    kiln_session_set_input(s, pre, 1, &zero, KILN_I32, 1, &one);
    kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one);
    if (kiln_session_execute(s, pre) || kiln_session_get_output(s, pre, 0, &out, NULL, NULL, shape))
        goto done;
    if (shape[0] != o.n || shape[1] != V) goto done;
    for (int t = 0; t < o.n; t++) {
        double e = kt_rel_err((const float *)out + (size_t)t * V, o.logits + (size_t)t * V, V);
        if (e > *worst_prefill) *worst_prefill = e;
    }
    kiln_session_reset(s);
    n = split;
    kiln_session_set_input(s, pre, 0, o.ids, KILN_I32, 1, &n);
    if (kiln_session_execute(s, pre)) goto done;
    for (int t = split; t < o.n; t++) {
        int32_t pos = t;
        kiln_session_set_input(s, dec, 0, &o.ids[t], KILN_I32, 1, &one);
        kiln_session_set_input(s, dec, 1, &pos, KILN_I32, 1, &one);
        if (kiln_session_execute(s, dec) ||
            kiln_session_get_output(s, dec, 0, &out, NULL, NULL, NULL))
            goto done;
        double e = kt_rel_err(out, o.logits + (size_t)t * V, V);
        if (e > *worst_decode) *worst_decode = e;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "  %s: %s\n", name, kiln_last_error());
    kiln_session_destroy(s);
    kiln_program_close(p);
    free(o.logits);
    return rc;
}

TEST(logits_match_transformers) {
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) {
        double wp = 0, wd = 0;
        ASSERT_MSG(run_fixture(FIXTURES[i], &wp, &wd) == 0, "fixture %s failed to run",
                   FIXTURES[i]);
        printf("  %-18s worst relative error: prefill %.3g, decode %.3g\n", FIXTURES[i], wp, wd);
        ASSERT_MSG(wp <= TOL && wd <= TOL, "%s: relative error %.3g / %.3g > %g", FIXTURES[i], wp,
                   wd, TOL);
    }
}

/* The comparison can fail: one changed weight in the checkpoint moves the
 * logits far past the tolerance. */
TEST(a_changed_weight_is_detected) {
    const char *dir = llama_copy("changed");
    ASSERT(dir);
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    size_t n;
    uint8_t *d = (uint8_t *)kt_read_file(p, &n);
    ASSERT(d);
    kiln_safetensors sf = {0};
    ASSERT_OK(kiln_safetensors_parse(&sf, d, n, p));
    const kiln_st_tensor *t = kiln_safetensors_find(&sf, "model.layers.1.self_attn.v_proj.weight");
    ASSERT(t);
    float w;
    memcpy(&w, d + t->offset + 40, 4);
    w += 0.5f;
    memcpy(d + t->offset + 40, &w, 4);
    kiln_safetensors_free(&sf);
    ASSERT(kt_write_file(p, d, n) == 0);
    free(d);
    oracle o = {0};
    ASSERT(load_oracle(DATA "/llama_f32", &o) == 0);
    ASSERT_OK(kt_compile(dir, NULL, kt_path("changed.kiln"), 16, 64, NULL));
    kiln_program *prog;
    kiln_session *s;
    ASSERT_OK(kiln_program_open(kt_path("changed.kiln"), &prog));
    ASSERT_OK(kiln_session_create(prog, &s));
    int pre;
    ASSERT_OK(kiln_program_find_method(prog, "prefill", &pre));
    int64_t len = o.n, one = 1;
    int32_t zero = 0, all = 1;
    ASSERT_OK(kiln_session_set_input(s, pre, 0, o.ids, KILN_I32, 1, &len));
    ASSERT_OK(kiln_session_set_input(s, pre, 1, &zero, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one));
    ASSERT_OK(kiln_session_execute(s, pre));
    const void *out;
    ASSERT_OK(kiln_session_get_output(s, pre, 0, &out, NULL, NULL, NULL));
    double worst = 0;
    for (int t2 = 0; t2 < o.n; t2++) {
        double e = kt_rel_err((const float *)out + (size_t)t2 * o.vocab,
                              o.logits + (size_t)t2 * o.vocab, o.vocab);
        if (e > worst) worst = e;
    }
    kiln_session_destroy(s);
    kiln_program_close(prog);
    free(o.logits);
    ASSERT_MSG(worst > 100 * TOL, "a changed weight gave only %.3g relative error", worst);
}

/* ---- what the import stores ------------------------------------------------ */

TEST(config_and_metadata) {
    kiln_import imp;
    kiln_module m;
    memset(&m, 0, sizeof m);
    ASSERT_OK(kiln_import_open(DATA "/qwen2_bf16", NULL, &imp, &m));
    ASSERT_STR_EQ(imp.format, "hf");
    ASSERT_STR_EQ(imp.cfg.arch, "qwen2");
    ASSERT_EQ_I(imp.cfg.n_embd, 64);
    ASSERT_EQ_I(imp.cfg.n_head_kv, 2);
    ASSERT_EQ_I(imp.cfg.head_dim, 16);
    ASSERT_EQ_I(imp.cfg.qkv_bias, 1);
    ASSERT_EQ_I(imp.cfg.rope_mode, 1);
    ASSERT_NEAR(imp.cfg.rope_theta, 1e6, 1);
    const kiln_meta *e = kiln_meta_find(&m, "llm.end_token_ids");
    ASSERT(e && e->type == KILN_META_INT_ARRAY && e->n == 2);
    ASSERT_EQ_I(e->ia[0], 2); /* generation_config.json's list, in order */
    ASSERT_EQ_I(e->ia[1], 1);
    e = kiln_meta_find(&m, "hf.tokenizer_json");
    ASSERT(e && e->type == KILN_META_STR);
    ASSERT_CONTAINS(e->s, "\"BPE\"");
    e = kiln_meta_find(&m, "hf.tokenizer_config_json");
    ASSERT(e && e->type == KILN_META_STR);
    ASSERT_CONTAINS(e->s, "<|im_end|>");
    e = kiln_meta_find(&m, "tokenizer.chat_template"); /* from chat_template.jinja */
    ASSERT(e && e->type == KILN_META_STR);
    ASSERT_CONTAINS(e->s, "<|im_start|>assistant");
    /* Norms and biases of a bf16 checkpoint are f32 constants; matrices stay bf16. */
    int k = kiln_module_find_const(&m, "blk.0.attn_q.bias");
    ASSERT(k >= 0);
    ASSERT_EQ_I(m.consts[k].dtype, KILN_F32);
    ASSERT(m.consts[k].owned);
    k = kiln_module_find_const(&m, "blk.1.ffn_down.weight");
    ASSERT(k >= 0);
    ASSERT_EQ_I(m.consts[k].dtype, KILN_BF16);
    ASSERT_EQ_I(m.consts[k].ne[0], 64);
    ASSERT_EQ_I(m.consts[k].ne[1], 96);
    kiln_module_free(&m);
    kiln_import_close(&imp);

    memset(&m, 0, sizeof m);
    ASSERT_OK(kiln_import_open(DATA "/llama3_rope_bf16", NULL, &imp, &m));
    ASSERT_EQ_I(imp.cfg.rope_freqs, 1);
    k = kiln_module_find_const(&m, "rope_freqs.weight");
    ASSERT(k >= 0);
    ASSERT_EQ_I(m.consts[k].ne[0], 8);
    const float *ff = m.consts[k].data;
    /* head_dim 16, theta 1e4, original context 64: wavelength 6.3 kept,
     * 19.9 and 62.8 blended, 199 and longer divided by 8. */
    ASSERT_NEAR(ff[0], 1.0, 1e-6);
    ASSERT(ff[1] > 1.0f && ff[1] < ff[2] && ff[2] < 8.0f);
    for (int j = 3; j < 8; j++)
        ASSERT_NEAR(ff[j], 8.0, 1e-6);
    double wl = 2 * 3.14159265358979 * pow(1e4, 2.0 / 16), sm = (64 / wl - 1.0) / 3.0;
    ASSERT_NEAR(ff[1], 1.0 / ((1 - sm) / 8 + sm), 1e-5);
    e = kiln_meta_find(&m, "llm.end_token_ids");
    ASSERT(e && e->n == 1 && e->ia[0] == 2);
    kiln_module_free(&m);
    kiln_import_close(&imp);

    memset(&m, 0, sizeof m);
    ASSERT_OK(kiln_import_open(DATA "/llama_tied_f16", NULL, &imp, &m));
    ASSERT_EQ_I(imp.cfg.tied_output, 1);
    ASSERT(kiln_module_find_const(&m, "output.weight") < 0);
    kiln_module_free(&m);
    kiln_import_close(&imp);

    memset(&m, 0, sizeof m);
    ASSERT_OK(kiln_import_open(DATA "/qwen3_f32_sharded", NULL, &imp, &m));
    ASSERT_EQ_I(imp.n_maps, 5); /* each shard mapped once */
    ASSERT_EQ_I(imp.cfg.head_dim, 24);
    ASSERT_EQ_I(imp.cfg.qk_norm, 1);
    kiln_module_free(&m);
    kiln_import_close(&imp);
}

/* The tokenizer built from tokenizer.json encodes as transformers does
 * (encode(text, add_special_tokens=False), recorded in oracle.json). */
TEST(tokenizer_matches_transformers) {
    ASSERT_OK(kt_compile(DATA "/qwen2_bf16", NULL, kt_path("tok.kiln"), 8, 32, NULL));
    kiln_program *prog;
    ASSERT_OK(kiln_program_open(kt_path("tok.kiln"), &prog));
    kiln_tokenizer *tok = NULL;
    kiln_status st = kiln_tokenizer_from_program(prog, &tok);
    kiln_program_close(prog);
    if (st) SKIP("no tokenizer built from tokenizer.json: %s", kiln_last_error());
    size_t n;
    char *text = kt_read_file(DATA "/qwen2_bf16/oracle.json", &n);
    ASSERT(text);
    kiln_json_doc d;
    ASSERT_OK(kiln_json_parse(text, n, "oracle.json", 0, &d));
    free(text);
    const kiln_json *cases = kiln_json_get(d.root, "tokenizer");
    ASSERT(cases && cases->type == KILN_JSON_ARRAY && cases->len > 0);
    for (size_t i = 0; i < cases->len; i++) {
        const kiln_json *t = kiln_json_get(&cases->items[i], "text"),
                        *want = kiln_json_get(&cases->items[i], "ids");
        ASSERT(t && want && want->len < 256);
        int32_t ids[256];
        int got = 0;
        ASSERT_OK(kiln_tokenizer_encode_flags(tok, t->s, t->len, 0, ids, 256, &got));
        int same = got == (int)want->len;
        for (int k = 0; same && k < got; k++)
            same = ids[k] == want->items[k].i;
        if (!same) {
            fprintf(stderr, "  kiln:");
            for (int k = 0; k < got; k++)
                fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n");
        }
        ASSERT_MSG(same, "text %zu (\"%s\"): %d ids from Kiln, %zu from transformers", i, t->s, got,
                   want->len);
    }
    kiln_json_free(&d);
    kiln_tokenizer_free(tok);
}

/* transformers 4 wrote the chat template into tokenizer_config.json. */
TEST(chat_template_from_tokenizer_config) {
    const char *dir = llama_copy("tmpl");
    ASSERT(dir);
    char p[1100];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    const char *tc =
        "{\"eos_token\": \"</s>\", \"chat_template\": \"{{ bos_token }}\\u00e9\\ud83d\\ude00\"}";
    ASSERT(kt_write_file(p, tc, strlen(tc)) == 0);
    ASSERT_OK(kt_compile(dir, NULL, kt_path("tmpl.kiln"), 8, 32, NULL));
    kiln_program *prog;
    ASSERT_OK(kiln_program_open(kt_path("tmpl.kiln"), &prog));
    ASSERT_STR_EQ(kiln_program_meta_str(prog, "tokenizer.chat_template"),
                  "{{ bos_token }}\xc3\xa9\xf0\x9f\x98\x80");
    ASSERT_STR_EQ(kiln_program_meta_str(prog, "hf.tokenizer_config_json"), tc);
    ASSERT_STR_EQ(kiln_program_meta_str(prog, "general.architecture"), "llama");
    kiln_program_close(prog);
}

/* Processor-era folders (Qwen-VL's) keep the template in chat_template.json;
 * tokenizer_config.json's, when it has one, comes first. */
TEST(chat_template_from_chat_template_json) {
    const char *dir = llama_copy("tmpl_json");
    ASSERT(dir);
    char p[1100];
    snprintf(p, sizeof p, "%s/chat_template.json", dir);
    const char *cj = "{\"chat_template\": \"{%- for m in messages %}\\u00e9{% endfor %}\"}";
    ASSERT(kt_write_file(p, cj, strlen(cj)) == 0);
    ASSERT_OK(kt_compile(dir, NULL, kt_path("tmpl_json.kiln"), 8, 32, NULL));
    kiln_program *prog;
    ASSERT_OK(kiln_program_open(kt_path("tmpl_json.kiln"), &prog));
    ASSERT_STR_EQ(kiln_program_meta_str(prog, "tokenizer.chat_template"),
                  "{%- for m in messages %}\xc3\xa9{% endfor %}");
    kiln_program_close(prog);
    /* A template that is not a string, or holds a NUL, names the file. */
    const char *bad[] = {"{\"chat_template\": 3}", "{\"chat_template\": \"a\\u0000b\"}",
                         "{\"template\": \"x\"}"};
    const char *why[] = {"key 'chat_template' should be a string", "holds a NUL",
                         "key 'chat_template' is missing"};
    for (int i = 0; i < 3; i++) {
        ASSERT(kt_write_file(p, bad[i], strlen(bad[i])) == 0);
        ASSERT(kt_compile(dir, NULL, kt_path("tmpl_json.kiln"), 8, 32, NULL) == KILN_ERR_FORMAT);
        ASSERT_CONTAINS(kiln_last_error(), "tmpl_json/chat_template.json'");
        ASSERT_CONTAINS(kiln_last_error(), why[i]);
    }
    /* tokenizer_config.json's template wins. */
    ASSERT(kt_write_file(p, cj, strlen(cj)) == 0);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    const char *tc = "{\"chat_template\": \"from the tokenizer\"}";
    ASSERT(kt_write_file(p, tc, strlen(tc)) == 0);
    ASSERT_OK(kt_compile(dir, NULL, kt_path("tmpl_json.kiln"), 8, 32, NULL));
    ASSERT_OK(kiln_program_open(kt_path("tmpl_json.kiln"), &prog));
    ASSERT_STR_EQ(kiln_program_meta_str(prog, "tokenizer.chat_template"), "from the tokenizer");
    kiln_program_close(prog);
}

/* Every allocation of an import fails once in turn: a clean error each
 * time, never a crash or a leak (ASan checks the leaks). */
TEST(import_survives_allocation_failures) {
    int ok = 0;
    for (long n = 1; n < 20000 && !ok; n++) {
        kiln_import imp;
        kiln_module m;
        memset(&m, 0, sizeof m);
        kiln_fail_alloc_after(n);
        kiln_status st = kiln_import_open(DATA "/qwen2_bf16", NULL, &imp, &m);
        kiln_fail_alloc_after(0);
        kiln_module_free(&m);
        kiln_import_close(&imp);
        if (st == KILN_OK)
            ok = 1;
        else
            ASSERT_MSG(kiln_last_error()[0], "allocation %ld: an error with no message", n);
    }
    ASSERT(ok);
}

/* ---- the JSON parser ----------------------------------------------------- */

static kiln_status parse(const char *text, kiln_json_doc *doc) {
    return kiln_json_parse(text, strlen(text), "'t.json'", 0, doc);
}

TEST(json_values) {
    kiln_json_doc d;
    ASSERT_OK(parse(
        " {\"a\": [1, -0, 2.5, 1e3, -9223372036854775808, 9223372036854775807, 9223372036854775808,"
        " 12345678901234567, true, false, null, "
        "\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20ac\\ud834\\udd1e\"],"
        " \"b\": {}, \"c\": [], \"\": 7, \"nul\\u0000\": 1} ",
        &d));
    const kiln_json *a = kiln_json_get(d.root, "a");
    ASSERT(a && a->type == KILN_JSON_ARRAY && a->len == 12);
    ASSERT(a->items[0].is_int && a->items[0].i == 1);
    ASSERT(a->items[1].is_int && a->items[1].i == 0);
    ASSERT(!a->items[2].is_int && a->items[2].num == 2.5);
    ASSERT(a->items[3].is_int && a->items[3].i == 1000);
    ASSERT(a->items[4].is_int && a->items[4].i == INT64_MIN);
    ASSERT(a->items[5].is_int && a->items[5].i == INT64_MAX);
    ASSERT(!a->items[6].is_int);                                        /* 2^63 does not fit */
    ASSERT(a->items[7].is_int && a->items[7].i == 12345678901234567LL); /* exact past 2^53 */
    ASSERT(a->items[8].type == KILN_JSON_BOOL && a->items[8].b == 1);
    ASSERT(a->items[9].type == KILN_JSON_BOOL && a->items[9].b == 0);
    ASSERT(a->items[10].type == KILN_JSON_NULL);
    ASSERT(a->items[11].type == KILN_JSON_STRING);
    ASSERT_EQ_I(a->items[11].len, 19);
    ASSERT(memcmp(a->items[11].s, "x\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e", 20) ==
           0);
    ASSERT(kiln_json_get(d.root, "b")->type == KILN_JSON_OBJECT);
    ASSERT(kiln_json_get(d.root, "c")->len == 0);
    ASSERT(kiln_json_get(d.root, "")->i == 7);
    ASSERT(kiln_json_get(d.root, "nul") == NULL); /* "nul\0" is another name */
    ASSERT(kiln_json_get(d.root, "zz") == NULL);
    ASSERT(kiln_json_get(a, "a") == NULL);
    ASSERT_EQ_I(a->offset, 7);
    kiln_json_free(&d);
    kiln_json_free(&d); /* twice: a no-op */
    ASSERT_OK(parse("\"\xe2\x82\xac \xf0\x9f\x98\x80\"", &d));
    ASSERT_STR_EQ(d.root->s, "\xe2\x82\xac \xf0\x9f\x98\x80");
    kiln_json_free(&d);
    ASSERT_OK(parse("0", &d));
    ASSERT(d.root->is_int && d.root->i == 0);
    kiln_json_free(&d);
}

TEST(json_errors_name_offset_and_expectation) {
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"", "byte 0 (line 1, column 1): expected a value"},
        {"{\"a\": 1,}", "byte 8 (line 1, column 9): expected a member name (a string) after ','"},
        {"[1 2]",
         "byte 3 (line 1, column 4): expected ',' or ']' after an array element, found '2'"},
        {"{\"a\" 1}", "byte 5 (line 1, column 6): expected ':' after a member name, found '1'"},
        {"{\n  \"a\": tru}", "byte 9 (line 2, column 8): expected a value"},
        {"{\"a\": 1} x", "byte 9 (line 1, column 10): expected the end of input"},
        {"01", "byte 1 (line 1, column 2): number with a leading zero"},
        {"1.", "expected a digit after '.', found end of input"},
        {"1e+", "expected a digit in the exponent"},
        {"-", "expected a digit, found end of input"},
        {"1e999", "out of the range of a double"},
        {"\"abc", "byte 0 (line 1, column 1): string starting here has no closing '\"'"},
        {"\"a\tb\"", "byte 2 (line 1, column 3): control character 0x09 inside a string"},
        {"\"\\x\"", "byte 1 (line 1, column 2): expected an escape"},
        {"\"\\u12g4\"", "expected 4 hex digits after '\\u'"},
        {"\"\\ud800\"", "high surrogate \\uD800 is not followed by a low surrogate"},
        {"\"\\ud800\\u0041\"", "high surrogate"},
        {"\"\\udc00\"", "lone low surrogate \\uDC00"},
        {"\"\xc3\x28\"", "byte 1 (line 1, column 2): invalid UTF-8 byte 0xc3"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8 byte 0xed"},     /* an encoded surrogate */
        {"\"\xc0\xaf\"", "invalid UTF-8 byte 0xc0"},         /* overlong */
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8 byte 0xf4"}, /* past U+10FFFF */
        {"{\"a\": 1, \"b\": 2, \"a\": 3}",
         "byte 17 (line 1, column 18): member name \"a\" appears twice"},
        {"nul", "expected a value"},
        {"[\x01]", "found byte 0x01"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kiln_json_doc d;
        kiln_status st = parse(cases[i].text, &d);
        ASSERT_MSG(st == KILN_ERR_FORMAT, "case %zu (%s) parsed", i, cases[i].text);
        ASSERT_CONTAINS(kiln_last_error(), "'t.json': ");
        ASSERT_CONTAINS(kiln_last_error(), cases[i].msg);
        ASSERT(d.root == NULL && d.arena == NULL);
    }
    /* The depth limit, on the way down. */
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = 0;
    kiln_json_doc d;
    ASSERT(kiln_json_parse(deep, 200, "'t.json'", 0, &d) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(),
                    "byte 128 (line 1, column 129): arrays and objects nested deeper than 128");
    ASSERT(kiln_json_parse("[[[1]]]", 7, "'t.json'", 3, &d) == KILN_OK);
    kiln_json_free(&d);
    ASSERT(kiln_json_parse("[[[1]]]", 7, "'t.json'", 2, &d) == KILN_ERR_FORMAT);
    /* Input that is not NUL-terminated is read only up to len, messages too
     * (found by fuzz_json). */
    char *exact = malloc(5);
    memcpy(exact, "1e999", 5);
    ASSERT(kiln_json_parse(exact, 5, "'t.json'", 0, &d) == KILN_ERR_FORMAT);
    free(exact);
    ASSERT_CONTAINS(kiln_last_error(), "number 1e999 is out of the range of a double");
    ASSERT(kiln_json_parse("12345", 2, "'t.json'", 0, &d) == KILN_OK);
    ASSERT_EQ_I(d.root->i, 12);
    kiln_json_free(&d);
}

TEST(json_typed_getters) {
    kiln_json_doc d;
    ASSERT_OK(parse("{\"i\": 3, \"f\": 0.5, \"s\": \"x\", \"b\": true, \"n\": null, \"o\": {}, "
                    "\"a\": [], \"big\": 1e30}",
                    &d));
    int64_t i = -1;
    double f = 0;
    int b = 0;
    const char *s = NULL;
    const kiln_json *o = NULL;
    ASSERT_OK(kiln_json_get_int(d.root, "'t.json'", "i", 1, &i));
    ASSERT_EQ_I(i, 3);
    ASSERT_OK(kiln_json_get_num(d.root, "'t.json'", "i", 1, &f));
    ASSERT_NEAR(f, 3, 0);
    ASSERT_OK(kiln_json_get_num(d.root, "'t.json'", "f", 1, &f));
    ASSERT_NEAR(f, 0.5, 0);
    ASSERT_OK(kiln_json_get_str(d.root, "'t.json'", "s", 1, &s, NULL));
    ASSERT_STR_EQ(s, "x");
    ASSERT_OK(kiln_json_get_bool(d.root, "'t.json'", "b", 1, &b));
    ASSERT_EQ_I(b, 1);
    ASSERT_OK(kiln_json_get_obj(d.root, "'t.json'", "o", 1, &o));
    ASSERT_OK(kiln_json_get_arr(d.root, "'t.json'", "a", 1, &o));
    i = 42; /* absent or null and optional: untouched */
    ASSERT_OK(kiln_json_get_int(d.root, "'t.json'", "n", 0, &i));
    ASSERT_OK(kiln_json_get_int(d.root, "'t.json'", "zz", 0, &i));
    ASSERT_EQ_I(i, 42);
    ASSERT(kiln_json_get_int(d.root, "'t.json'", "zz", 1, &i) == KILN_ERR_FORMAT);
    ASSERT_STR_EQ(kiln_last_error(), "'t.json': key 'zz' is missing");
    ASSERT(kiln_json_get_int(d.root, "'t.json'", "n", 1, &i) == KILN_ERR_FORMAT);
    ASSERT_STR_EQ(kiln_last_error(), "'t.json': key 'n' is missing");
    ASSERT(kiln_json_get_int(d.root, "'t.json'", "s", 1, &i) == KILN_ERR_FORMAT);
    ASSERT_STR_EQ(kiln_last_error(),
                  "'t.json': key 's' should be an integer, found a string (byte 24)");
    ASSERT(kiln_json_get_int(d.root, "'t.json'", "f", 1, &i) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(),
                    "key 'f' should be an integer, found a number with a fraction");
    ASSERT(kiln_json_get_int(d.root, "'t.json'", "big", 1, &i) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "found an integer beyond the int64 range");
    ASSERT(kiln_json_get_bool(d.root, "'t.json'", "i", 1, &b) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 'i' should be true or false, found a number");
    ASSERT(kiln_json_get_str(d.root, "'t.json'", "o", 1, &s, NULL) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 'o' should be a string, found an object");
    ASSERT(kiln_json_get_obj(d.root, "'t.json'", "a", 1, &o) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 'a' should be an object, found an array");
    ASSERT(kiln_json_get_arr(d.root, "'t.json'", "b", 1, &o) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 'b' should be an array, found a boolean");
    kiln_json_free(&d);
}

/* The strict integer getters: written as integers, within the range. */
TEST(json_strict_integers) {
    kiln_json_doc d;
    ASSERT_OK(parse("{\"max\": 18446744073709551615, \"over\": 18446744073709551616, "
                    "\"i63\": 9223372036854775807, \"i63p\": 9223372036854775808, "
                    "\"min\": -9223372036854775808, \"minm\": -9223372036854775809, "
                    "\"f\": 1.5, \"z\": 2.0, \"e\": 1e3, \"neg\": -3, \"s\": \"7\", \"n\": null}",
                    &d));
    const char *W = "'t.json'";
    uint64_t u = 0;
    int64_t i = 0;
    ASSERT_OK(kiln_json_get_u64(d.root, W, "max", 1, UINT64_MAX, &u));
    ASSERT(u == UINT64_MAX);
    ASSERT_OK(kiln_json_get_u64(d.root, W, "i63p", 1, UINT64_MAX, &u));
    ASSERT(u == (uint64_t)1 << 63);
    ASSERT_OK(kiln_json_get_i64(d.root, W, "i63", 1, INT64_MIN, INT64_MAX, &i));
    ASSERT(i == INT64_MAX);
    ASSERT_OK(kiln_json_get_i64(d.root, W, "min", 1, INT64_MIN, INT64_MAX, &i));
    ASSERT(i == INT64_MIN);
    ASSERT_OK(kiln_json_get_i64(d.root, W, "neg", 1, -3, 0, &i));
    ASSERT_EQ_I(i, -3);
    u = 42; /* optional and null: untouched */
    ASSERT_OK(kiln_json_get_u64(d.root, W, "n", 0, UINT64_MAX, &u));
    ASSERT_EQ_U(u, 42);
    ASSERT(kiln_json_get_u64(d.root, W, "n", 1, UINT64_MAX, &u) == KILN_ERR_FORMAT);
    ASSERT_STR_EQ(kiln_last_error(), "'t.json': key 'n' is missing");

    ASSERT(kiln_json_get_u64(d.root, W, "over", 1, UINT64_MAX, &u) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "'t.json': key 'over' should be an integer in "
                                       "0..18446744073709551615, found an integer beyond 64 bits "
                                       "(byte 38)");
    ASSERT(kiln_json_get_u64(d.root, W, "i63p", 1, 1000, &u) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(),
                    "key 'i63p' should be an integer in 0..1000, found 9223372036854775808");
    ASSERT(kiln_json_get_u64(d.root, W, "neg", 1, UINT64_MAX, &u) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "found -3");
    ASSERT(kiln_json_get_i64(d.root, W, "i63p", 1, INT64_MIN, INT64_MAX, &i) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(),
                    "key 'i63p' should be an integer, found 9223372036854775808");
    ASSERT(kiln_json_get_i64(d.root, W, "minm", 1, INT64_MIN, INT64_MAX, &i) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 'minm' should be an integer, found an integer beyond");
    ASSERT(kiln_json_get_i64(d.root, W, "neg", 1, 0, 10, &i) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 'neg' should be an integer in 0..10, found -3");
    static const char *const fractional[] = {"f", "z", "e"};
    for (int k = 0; k < 3; k++) {
        ASSERT(kiln_json_get_u64(d.root, W, fractional[k], 1, UINT64_MAX, &u) == KILN_ERR_FORMAT);
        ASSERT_CONTAINS(kiln_last_error(), "found a number with a fraction or an exponent");
        ASSERT(kiln_json_get_i64(d.root, W, fractional[k], 1, INT64_MIN, INT64_MAX, &i) ==
               KILN_ERR_FORMAT);
        ASSERT_CONTAINS(kiln_last_error(), "found a number with a fraction or an exponent");
    }
    ASSERT_OK(kiln_json_get_int(d.root, W, "e", 1, &i)); /* the lenient getter takes 1e3 */
    ASSERT_EQ_I(i, 1000);
    ASSERT(kiln_json_get_u64(d.root, W, "s", 1, UINT64_MAX, &u) == KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "key 's' should be an integer in 0..18446744073709551615, "
                                       "found a string");
    kiln_json_free(&d);
}

/* A large object: lookups by binary search find every member. */
TEST(json_large_object) {
    size_t cap = 40000 * 24, n = 0;
    char *t = malloc(cap);
    n += (size_t)snprintf(t + n, cap - n, "{");
    for (int i = 0; i < 40000; i++)
        n += (size_t)snprintf(t + n, cap - n, "%s\"k%d\": %d", i ? "," : "", i * 7919 % 40000, i);
    n += (size_t)snprintf(t + n, cap - n, "}");
    kiln_json_doc d;
    ASSERT_OK(kiln_json_parse(t, n, "'big.json'", 0, &d));
    free(t);
    ASSERT_EQ_I(d.root->len, 40000);
    for (int i = 0; i < 40000; i += 97) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i * 7919 % 40000);
        const kiln_json *v = kiln_json_get(d.root, k);
        ASSERT_MSG(v && v->i == i, "member %s", k);
    }
    kiln_json_free(&d);
}

/* ---- damaged folders ------------------------------------------------------- */

/* One tensor entry for write_st; offsets are laid out in order unless
 * `raw_offsets` gives them. */
typedef struct {
    char name[128];
    char dtype[16];
    int ndim;
    int64_t shape[4];
    const uint8_t *data;
    uint64_t nbytes;
    int raw_offsets;
    uint64_t begin, end;
} st_entry;

static int g_misalign;  /* write_st: leave the data at an odd offset */
static int g_extra_pad; /* write_st: padding spaces beyond the alignment */

static int write_st(const char *path, const st_entry *e, int n) {
    size_t cap = 65536, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = e[i].raw_offsets ? e[i].begin : off,
                 en = e[i].raw_offsets ? e[i].end : off + e[i].nbytes;
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)e[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)b, (unsigned long long)en);
        off += e[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8 != (g_misalign ? 1u : 0u))
        h[len++] = ' '; /* padded as the reference writer does */
    for (int i = 0; i < g_extra_pad; i++)
        h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint8_t hl[8];
    for (int i = 0; i < 8; i++)
        hl[i] = (uint8_t)((uint64_t)len >> (8 * i));
    fwrite(hl, 1, 8, f);
    fwrite(h, 1, len, f);
    for (int i = 0; i < n; i++)
        fwrite(e[i].data, 1, e[i].nbytes, f);
    free(h);
    return fclose(f);
}

/* The tensors of fixture llama_f32, for rewriting; *buf keeps the bytes. */
static int llama_entries(st_entry *e, int *n, uint8_t **buf) {
    size_t len;
    *buf = (uint8_t *)kt_read_file(DATA "/llama_f32/model.safetensors", &len);
    if (!*buf) return -1;
    kiln_safetensors sf = {0};
    if (kiln_safetensors_parse(&sf, *buf, len, "model.safetensors")) return -1;
    *n = (int)sf.n_tensors;
    for (size_t i = 0; i < sf.n_tensors; i++) {
        const kiln_st_tensor *t = &sf.tensors[i];
        memset(&e[i], 0, sizeof e[i]);
        snprintf(e[i].name, sizeof e[i].name, "%s", t->name);
        snprintf(e[i].dtype, sizeof e[i].dtype, "%s", t->dtype_name);
        e[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            e[i].shape[d] = t->shape[d];
        e[i].data = t->data;
        e[i].nbytes = t->nbytes;
    }
    kiln_safetensors_free(&sf);
    return 0;
}

static st_entry *find_entry(st_entry *e, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name)) return &e[i];
    return NULL;
}

/* Imports dir and expects `st` with a message holding every needle. */
#define EXPECT_IMPORT_ERROR(dir, status, ...)                                                      \
    do {                                                                                           \
        kiln_status st_ = import_dir(dir);                                                         \
        ASSERT_MSG(st_ == (status), "import gave %d, expected %d: %s", st_, status,                \
                   kiln_last_error());                                                             \
        const char *needles_[] = {__VA_ARGS__};                                                    \
        for (size_t k_ = 0; k_ < sizeof needles_ / sizeof *needles_; k_++)                         \
            ASSERT_CONTAINS(kiln_last_error(), needles_[k_]);                                      \
    } while (0)

/* A copy of fixture qwen3vl_tiny_f32 with `from` replaced by `to` in its
 * config.json. */
static const char *vl_copy(const char *name, const char *from, const char *to) {
    const char *dir = new_dir(name);
    if (!dir) return NULL;
    static const char *files[] = {"config.json", "generation_config.json", "model.safetensors",
                                  "preprocessor_config.json"};
    for (int i = 0; i < 4; i++)
        if (copy_file(DATA "/qwen3vl_tiny_f32", dir, files[i])) return NULL;
    return edit_file(dir, "config.json", from, to) ? NULL : dir;
}

/* A Qwen3-VL config Kiln cannot build names the key (and the value). */
TEST(vl_config_errors_name_the_key) {
    const char *dir = vl_copy("vl_act", "\"hidden_act\": \"gelu_pytorch_tanh\"",
                              "\"hidden_act\": \"quick_gelu\"");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED,
                        "vl_act/config.json': vision_config: key 'hidden_act' is 'quick_gelu'");
    dir = vl_copy("vl_key", "\"depth\": 3,", "\"depth\": 3, \"window_size\": 112,");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED, "vision_config: key 'window_size' is not one");
    dir = vl_copy("vl_ds", "\"deepstack_visual_indexes\": [\n      0,\n      2",
                  "\"deepstack_visual_indexes\": [\n      0,\n      3");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "key 'deepstack_visual_indexes' entry 1 is not a block index in 0..2");
    dir = vl_copy("vl_sections", "\"mrope_section\": [\n        2,\n        3,\n        3",
                  "\"mrope_section\": [\n        2,\n        3,\n        4");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "mrope_section [2, 3, 4]");
    dir = vl_copy("vl_token", "\"image_token_id\": 250", "\"image_token_id\": 300");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "image_token_id 300 is outside the vocabulary");
    dir = vl_copy("vl_novision", "\"vision_config\"", "\"vision_config_\"");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "key 'vision_config' is missing");

    /* the image processor's settings: what Kiln would do otherwise names
     * the file and the key */
    static const struct {
        const char *name, *from, *to, *want;
        kiln_status st;
    } proc[] = {
        {"pp_patch", "\"patch_size\": 8", "\"patch_size\": 16",
         "pp_patch/preprocessor_config.json': key 'patch_size' does not match config.json's "
         "vision_config (patch 8, merge 2, temporal patch 2)",
         KILN_ERR_FORMAT},
        {"pp_resample", "\"resample\": 3", "\"resample\": 2",
         "key 'resample' is 2; Kiln resizes as PIL's BICUBIC (3) does", KILN_ERR_UNSUPPORTED},
        {"pp_norm", "\"do_normalize\": true", "\"do_normalize\": false",
         "key 'do_normalize' is false", KILN_ERR_UNSUPPORTED},
        {"pp_key", "\"do_resize\": true", "\"do_resize\": true, \"do_pad\": true",
         "key 'do_pad' is not one Kiln reads for the Qwen3-VL image processor",
         KILN_ERR_UNSUPPORTED},
        {"pp_range", "\"shortest_edge\": 1024", "\"shortest_edge\": 9000",
         "the pixel floor 9000 (size.shortest_edge) is above the cap 4096", KILN_ERR_FORMAT},
        {"pp_mean", "\"image_mean\": [", "\"image_mean\": [0.1, ",
         "key 'image_mean' should be 3 numbers", KILN_ERR_FORMAT},
        {"pp_std", "\"image_std\": [\n    0.5", "\"image_std\": [\n    0",
         "key 'image_std' should be 3 numbers (R, G, B), each > 0", KILN_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof proc / sizeof *proc; i++) {
        dir = vl_copy(proc[i].name, "\"depth\": 3", "\"depth\": 3");
        ASSERT(dir);
        ASSERT_MSG(edit_file(dir, "preprocessor_config.json", proc[i].from, proc[i].to) == 0, "%s",
                   proc[i].name);
        EXPECT_IMPORT_ERROR(dir, proc[i].st, proc[i].want);
    }
    /* no processor settings at all; then transformers 5's processor_config
     * json, which nests them under "image_processor" */
    dir = vl_copy("pp_none", "\"depth\": 3", "\"depth\": 3");
    ASSERT(dir);
    char pp[1100], pc[1100];
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", dir);
    snprintf(pc, sizeof pc, "%s/processor_config.json", dir);
    size_t n;
    char *text = kt_read_file(pp, &n);
    ASSERT(text && remove(pp) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_IO,
                        "pp_none/preprocessor_config.json' is missing (and processor_config.json)");
    char *nested = malloc(n + 64);
    int len =
        snprintf(nested, n + 64,
                 "{\"processor_class\": \"Qwen3VLProcessor\", \"image_processor\": %s}", text);
    ASSERT(len > 0 && kt_write_file(pc, nested, (size_t)len) == 0);
    ASSERT_OK(import_dir(dir));
    ASSERT(kt_write_file(pc, "{\"image_processor\": 3}", 22) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "processor_config.json': key 'image_processor'");
    free(nested);
    free(text);
}

TEST(config_errors_name_file_and_key) {
    const char *dir = llama_copy("cfg_missing");
    ASSERT(dir);
    ASSERT(edit_file(dir, "config.json", "\"hidden_size\": 64,", "") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "'cfg_missing/config.json': key 'hidden_size' is missing");

    dir = llama_copy("cfg_type");
    ASSERT(edit_file(dir, "config.json", "\"num_hidden_layers\": 2",
                     "\"num_hidden_layers\": \"2\"") == 0);
    EXPECT_IMPORT_ERROR(
        dir, KILN_ERR_FORMAT,
        "'cfg_type/config.json': key 'num_hidden_layers' should be an integer, found a string");

    dir = llama_copy("cfg_float");
    ASSERT(edit_file(dir, "config.json", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": [1e-05]") ==
           0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "config.json': key 'rms_norm_eps' should be a number, found an array");

    dir = llama_copy("cfg_bool");
    ASSERT(edit_file(dir, "config.json", "\"tie_word_embeddings\": false",
                     "\"tie_word_embeddings\": 0") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "key 'tie_word_embeddings' should be true or false, found a number");

    dir = llama_copy("cfg_arch");
    ASSERT(edit_file(dir, "config.json", "LlamaForCausalLM", "GPT2LMHeadModel") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED,
                        "config.json': architecture 'GPT2LMHeadModel' is not one Kiln builds");

    dir = llama_copy("cfg_json");
    ASSERT(edit_file(dir, "config.json", "\"attention_bias\": false,",
                     "\"attention_bias\": false,,") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'cfg_json/config.json': byte ",
                        "expected a member name");

    dir = llama_copy("cfg_range");
    ASSERT(edit_file(dir, "config.json", "\"num_attention_heads\": 4",
                     "\"num_attention_heads\": -4") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "key 'num_attention_heads' is -4, out of range");

    dir = llama_copy("cfg_heads");
    ASSERT(edit_file(dir, "config.json", "\"num_key_value_heads\": 2",
                     "\"num_key_value_heads\": 3") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "config.json': KV head count 3 must divide the head count 4");

    dir = llama_copy("cfg_rope");
    ASSERT(edit_file(dir, "config.json", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"") ==
           0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED,
                        "config.json': key 'rope_parameters.rope_type' is 'yarn'");

    dir = llama_copy("cfg_rope_v4");
    ASSERT(
        edit_file(
            dir, "config.json", "\"rope_parameters\": {",
            "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}, \"rope_parameters\": {") ==
        0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED, "key 'rope_scaling.rope_type' is 'dynamic'");

    dir = llama_copy("cfg_llama3");
    ASSERT(edit_file(dir, "config.json", "\"rope_type\": \"default\"",
                     "\"rope_type\": \"llama3\", \"factor\": 8") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "config.json': rope_parameters: key 'low_freq_factor' is missing");

    dir = llama_copy("cfg_bias");
    ASSERT(edit_file(dir, "config.json", "\"attention_bias\": false", "\"attention_bias\": true") ==
           0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED, "key 'attention_bias' is true");

    dir = llama_copy("cfg_quant");
    ASSERT(edit_file(dir, "config.json", "\"mlp_bias\": false",
                     "\"quantization_config\": {\"quant_method\": \"gptq\"}") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED,
                        "config.json': key 'quantization_config' is set");

    dir = llama_copy("cfg_eos");
    ASSERT(edit_file(dir, "generation_config.json", "\"eos_token_id\": 2",
                     "\"eos_token_id\": [2, \"x\"]") == 0);
    EXPECT_IMPORT_ERROR(
        dir, KILN_ERR_FORMAT,
        "'cfg_eos/generation_config.json': key 'eos_token_id' should be an integer or a list");

    dir = llama_copy("cfg_eos_range");
    ASSERT(edit_file(dir, "generation_config.json", "\"eos_token_id\": 2",
                     "\"eos_token_id\": 256") == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "key 'eos_token_id' holds 256, outside the vocabulary of 256");

    dir = new_dir("cfg_none");
    ASSERT(dir);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_IO, "'cfg_none/config.json' is missing");

    dir = llama_copy("cfg_weights");
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_IO, "no model.safetensors or model.safetensors.index.json");
}

TEST(safetensors_errors_name_file_and_tensor) {
    static st_entry e[64];
    int n;
    uint8_t *buf;
    ASSERT(llama_entries(e, &n, &buf) == 0);
    char p[1100];

    /* Truncated: the last tensors run past the end. */
    const char *dir = llama_copy("st_trunc");
    ASSERT(dir);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    size_t len;
    char *whole = kt_read_file(p, &len);
    ASSERT(whole && kt_write_file(p, whole, len - 1000) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'model.safetensors': tensor '",
                        "run past the end of the data", "truncated");
    ASSERT(kt_write_file(p, whole, 6) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'model.safetensors': 6 bytes, too short");
    ASSERT(kt_write_file(p, whole, 100) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'model.safetensors': header length",
                        "runs past the end of the file");

    /* A header that is not JSON. */
    whole[8 + 15] = '#'; /* {"__metadata__"#{ */
    ASSERT(kt_write_file(p, whole, len) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'model.safetensors': header (JSON of ",
                        " bytes from file byte 8): byte 15 (line 1, "
                        "column 16): expected ':' after a member name, found '#'");
    whole[8] = 'x';
    ASSERT(kt_write_file(p, whole, len) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "does not start with '{'");
    free(whole);

    /* A tensor of the wrong shape (consistent with its bytes). */
    st_entry *q = find_entry(e, n, "model.layers.1.self_attn.q_proj.weight");
    ASSERT(q);
    st_entry save = *q;
    q->shape[0] = 32;
    q->nbytes /= 2;
    ASSERT(write_st(p, e, n) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "'model.safetensors': tensor 'model.layers.1.self_attn.q_proj.weight' "
                        "(Kiln's 'blk.1.attn_q.weight') "
                        "has shape [32, 64], expected [64, 64]");
    *q = save;

    /* Shape and data_offsets that disagree. */
    q->shape[1] = 63;
    ASSERT(write_st(p, e, n) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "tensor 'model.layers.1.self_attn.q_proj.weight': data_offsets",
                        "hold 16384 bytes, but F32 [64, 63] needs 16128");
    *q = save;

    /* An unknown dtype, and a known one Kiln does not read. */
    snprintf(q->dtype, sizeof q->dtype, "Q7");
    ASSERT(write_st(p, e, n) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "'model.safetensors': tensor 'model.layers.1.self_attn.q_proj.weight' has "
                        "unknown dtype 'Q7'");
    snprintf(q->dtype, sizeof q->dtype, "I32");
    ASSERT(write_st(p, e, n) == 0);
    EXPECT_IMPORT_ERROR(
        dir, KILN_ERR_UNSUPPORTED,
        "'model.safetensors': tensor 'model.layers.1.self_attn.q_proj.weight' has dtype I32");
    *q = save;

    /* data_offsets past the file. */
    st_entry *last = &e[n - 1];
    save = *last;
    last->raw_offsets = 1;
    last->begin = 1u << 30;
    last->end = last->begin + last->nbytes;
    ASSERT(write_st(p, e, n) == 0);
    char want[300];
    snprintf(want, sizeof want,
             "'model.safetensors': tensor '%s': data_offsets [1073741824, %llu] run past the end",
             last->name, (unsigned long long)last->end);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, want);

    /* Two tensors sharing bytes. */
    last->begin = 0;
    last->end = last->nbytes;
    ASSERT(write_st(p, e, n) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'model.safetensors': tensors '", "overlap");
    *last = save;

    /* A tensor Kiln does not map, and a missing one. */
    st_entry *extra = &e[n];
    *extra = e[0];
    snprintf(extra->name, sizeof extra->name, "model.layers.0.self_attn.o_proj.bias");
    ASSERT(write_st(p, e, n + 1) == 0);
    EXPECT_IMPORT_ERROR(
        dir, KILN_ERR_UNSUPPORTED,
        "'model.safetensors': tensor 'model.layers.0.self_attn.o_proj.bias' is not one Kiln maps");
    snprintf(extra->name, sizeof extra->name, "model.layers.2.mlp.up_proj.weight");
    ASSERT(write_st(p, e, n + 1) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED, "tensor 'model.layers.2.mlp.up_proj.weight'",
                        "past num_hidden_layers");
    st_entry *up = find_entry(e, n, "model.layers.1.mlp.up_proj.weight");
    ASSERT(up);
    snprintf(up->name, sizeof up->name, "model.layers.1.mlp.upp_proj.weight");
    ASSERT(write_st(p, e, n) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_UNSUPPORTED,
                        "tensor 'model.layers.1.mlp.upp_proj.weight' is not one Kiln maps");
    snprintf(up->name, sizeof up->name, "model.layers.1.mlp.up_proj.weight");

    /* Misaligned data (a header length that is not a multiple of 4) still
     * imports: the constant is copied to aligned memory. */
    g_misalign = 1;
    ASSERT(write_st(p, e, n) == 0);
    g_misalign = 0;
    kiln_import imp;
    kiln_module m;
    memset(&m, 0, sizeof m);
    ASSERT_OK(kiln_import_open(dir, NULL, &imp, &m));
    for (int k = 0; k < m.n_consts; k++)
        ASSERT_MSG((uintptr_t)m.consts[k].data % 4 == 0 && m.consts[k].owned, "constant %s",
                   m.consts[k].name);
    kiln_module_free(&m);
    kiln_import_close(&imp);
    ASSERT_OK(kt_compile(dir, NULL, kt_path("misaligned.kiln"), 8, 32, NULL));
    free(buf);
}

TEST(sharded_index_errors) {
    const char *src = DATA "/qwen3_f32_sharded";
    const char *dir = new_dir("shards");
    ASSERT(dir);
    static const char *files[] = {"config.json",
                                  "model.safetensors.index.json",
                                  "model-00001-of-00005.safetensors",
                                  "model-00002-of-00005.safetensors",
                                  "model-00003-of-00005.safetensors",
                                  "model-00004-of-00005.safetensors",
                                  "model-00005-of-00005.safetensors"};
    for (int i = 0; i < 7; i++)
        ASSERT(copy_file(src, dir, files[i]) == 0);
    ASSERT_OK(import_dir(dir));
    static const struct {
        const char *from, *to;
        kiln_status st;
        const char *msg;
    } cases[] = {
        {"\"model.norm.weight\": \"model-00004-of-00005.safetensors\"",
         "\"model.norm.weight\": \"model-00003-of-00005.safetensors\"", KILN_ERR_FORMAT,
         "'model.safetensors.index.json': tensor 'model.norm.weight' should be in "
         "'model-00003-of-00005.safetensors', "
         "but is in 'model-00004-of-00005.safetensors'"},
        {"\"lm_head.weight\": \"model-00005-of-00005.safetensors\"",
         "\"lm_head.weight\": \"model-00004-of-00005.safetensors\"", KILN_ERR_FORMAT,
         "tensor 'lm_head.weight' should be in 'model-00004-of-00005.safetensors', but no listed "
         "shard has it"},
        {"\"lm_head.weight\": \"model-00005-of-00005.safetensors\"",
         "\"lm_head.weight\": \"../model-00005-of-00005.safetensors\"", KILN_ERR_FORMAT,
         "weight_map['lm_head.weight'] is '../model-00005-of-00005.safetensors', not a file name"},
        {"\"lm_head.weight\": \"model-00005-of-00005.safetensors\"",
         "\"lm_head.weight\": \"model-00006-of-00005.safetensors\"", KILN_ERR_IO,
         "shard 'model-00006-of-00005.safetensors' (of tensor 'lm_head.weight') is not in"},
        {"\"lm_head.weight\": \"model-00005-of-00005.safetensors\"", "\"lm_head.weight\": 5",
         KILN_ERR_FORMAT, "weight_map['lm_head.weight'] should be a file name, found a number"},
        {"\"weight_map\"", "\"weight_mapp\"", KILN_ERR_FORMAT,
         "'model.safetensors.index.json': key 'weight_map' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ASSERT(copy_file(src, dir, "model.safetensors.index.json") == 0);
        ASSERT(edit_file(dir, "model.safetensors.index.json", cases[i].from, cases[i].to) == 0);
        EXPECT_IMPORT_ERROR(dir, cases[i].st, cases[i].msg);
    }
}

/* A safetensors file in memory: the header length (strlen(header) + delta),
 * the header, then `data_len` bytes (data_first, then 0x40 0x41 ...). */
static size_t st_mem(uint8_t *out, const char *header, int delta, size_t data_len, int data_first) {
    size_t h = strlen(header);
    uint64_t n = (uint64_t)((int64_t)h + delta);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (8 * i));
    memcpy(out + 8, header, h);
    for (size_t i = 0; i < data_len; i++)
        out[8 + h + i] = (uint8_t)(i == 0 && data_first >= 0 ? data_first : 0x40 + (int)i);
    return 8 + h + data_len;
}

/* Parses one in-memory file; NULL when it parsed, else the message. */
static const char *st_try(const char *header, int delta, size_t data_len, int data_first,
                          size_t *n_tensors) {
    static uint8_t buf[4096];
    size_t n = st_mem(buf, header, delta, data_len, data_first);
    kiln_safetensors sf = {0};
    kiln_status s = kiln_safetensors_parse(&sf, buf, n, "dir/t.safetensors");
    if (n_tensors) *n_tensors = sf.n_tensors;
    kiln_safetensors_free(&sf);
    return s ? kiln_last_error() : NULL;
}

#define ST_OK(header, data_len, want_tensors)                                                      \
    do {                                                                                           \
        size_t nt_;                                                                                \
        const char *e_ = st_try(header, 0, data_len, -1, &nt_);                                    \
        ASSERT_MSG(!e_, "%s: %s", header, e_);                                                     \
        ASSERT_EQ_I(nt_, want_tensors);                                                            \
    } while (0)
#define ST_ERR(header, delta, data_len, data_first, ...)                                           \
    do {                                                                                           \
        const char *e_ = st_try(header, delta, data_len, data_first, NULL);                        \
        ASSERT_MSG(e_, "%s (header length %+d, %d data bytes) parsed", header, delta,              \
                   (int)(data_len));                                                               \
        const char *needles_[] = {__VA_ARGS__};                                                    \
        for (size_t k_ = 0; k_ < sizeof needles_ / sizeof *needles_; k_++)                         \
            ASSERT_CONTAINS(e_, needles_[k_]);                                                     \
    } while (0)

#define T_A(b, e) "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #b "," #e "]}"
#define T_B(b, e) "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[" #b "," #e "]}"
#define T_E(b, e) "\"e\":{\"dtype\":\"F32\",\"shape\":[4,0],\"data_offsets\":[" #b "," #e "]}"

/* The tensors must cover the data exactly (the reference reader's rule): a
 * header length a byte off, a hole, an overlap or trailing bytes is an error
 * naming the file and the gap; any order, padding spaces and empty tensors
 * at a boundary are fine. */
TEST(safetensors_cover_their_data_exactly) {
    /* Exact covers: in file order, in reverse, listed out of order, padded. */
    ST_OK("{" T_A(0, 8) "," T_B(8, 14) "}", 14, 2);
    ST_OK("{" T_B(0, 6) "," T_A(6, 14) "}", 14, 2);
    ST_OK("{" T_A(6, 14) "," T_B(0, 6) "}", 14, 2);
    ST_OK("{\"__metadata__\":{\"format\":\"pt\"}," T_A(0, 8) "}      ", 8, 1);
    ST_OK("{\"__metadata__\":{}}", 0, 0);
    ST_OK("{}", 0, 0);
    /* Empty tensors at the start, between two tensors, at the end, alone. */
    ST_OK("{" T_E(0, 0) "," T_A(0, 8) "," T_B(8, 14) "}", 14, 3);
    ST_OK("{" T_A(0, 8) "," T_E(8, 8) "," T_B(8, 14) "}", 14, 3);
    ST_OK("{" T_B(8, 14) "," T_A(0, 8) "," T_E(14, 14) "}", 14, 3);
    ST_OK("{" T_E(0, 0) "}", 0, 1);
    ST_ERR("{" T_A(0, 8) "," T_E(4, 4) "," T_B(8, 14) "}", 0, 14, -1,
           "'t.safetensors': empty tensor 'e' (data_offsets [4, 4]) lies inside tensor 'a' "
           "(data_offsets [0, 8])");

    /* Trailing bytes; data but no tensor. */
    ST_ERR("{" T_A(0, 8) "," T_B(8, 14) "}", 0, 17, -1,
           "'t.safetensors': 3 trailing bytes after the last tensor, 'b' (data bytes [14, 17) at "
           "file offset ");
    ST_ERR("{" T_A(0, 8) "}", 0, 9, -1, "'t.safetensors': 1 trailing byte after the last tensor");
    ST_ERR("{\"__metadata__\":{}}", 0, 4, -1,
           "'t.safetensors': the header lists no tensor, but 4 bytes of data follow it");

    /* Holes: between two tensors, before the first. */
    char want[200];
    const char *h = "{" T_A(0, 8) "," T_B(10, 16) "}";
    snprintf(want, sizeof want,
             "'t.safetensors': data bytes [8, 10) (2 bytes at file offset %zu, between tensors "
             "'a' and 'b') are not covered by any tensor",
             8 + strlen(h) + 8);
    ST_ERR(h, 0, 16, -1, want);
    ST_ERR("{" T_B(8, 14) "," T_A(2, 10) "}", 0, 16, -1,
           "'t.safetensors': data bytes [0, 2) (2 bytes at file offset ",
           "before the first tensor, 'a') are not covered by any tensor");

    /* Overlap, and the same bytes twice. */
    ST_ERR("{" T_A(0, 8) "," T_B(6, 12) "}", 0, 12, -1,
           "'t.safetensors': tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [6, 12]) "
           "overlap");
    ST_ERR("{" T_A(0, 8) ",\"c\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
           -1, "'t.safetensors': tensors '", "overlap");

    /* A header length one byte short. With padding the JSON still parses,
     * every tensor moves a byte, and the last data byte is left over; without
     * padding the JSON is cut. */
    ST_ERR("{" T_A(0, 8) "," T_B(8, 14) "}  ", -1, 14, -1,
           "'t.safetensors': 1 trailing byte after the last tensor, 'b' (data bytes [14, 15)",
           "a wrong header length?");
    h = "{" T_A(0, 8) "," T_B(8, 14) "}";
    snprintf(want, sizeof want,
             "'t.safetensors': header (JSON of %zu bytes from file byte 8): byte %zu (line 1, "
             "column %zu): expected ',' or '}' after an object member, found end of input",
             strlen(h) - 1, strlen(h) - 1, strlen(h));
    ST_ERR(h, -1, 14, -1, want);
    /* One byte long: the first data byte joins the header; a space there
     * still parses, and the data is a byte short. */
    snprintf(want, sizeof want,
             "'t.safetensors': the header (%zu bytes from file byte 8, as the header length says) "
             "ends with byte 0x00 at file byte %zu, not '}': the header length is wrong",
             strlen(h) + 1, 8 + strlen(h));
    ST_ERR(h, 1, 14, 0x00, want);
    ST_ERR(h, 1, 14, 'x', "ends with 'x' at file byte");
    ST_ERR(h, 1, 14, ' ',
           "'t.safetensors': tensor 'b': data_offsets [8, 14] run past the end of "
           "the data (13 bytes");
    /* Cut well inside: not '}' at the end. */
    ST_ERR(h, -10, 14, -1, "the header length is wrong, or the header is cut");

    /* The same through an import of a real checkpoint: before this check a
     * header length a byte short compiled into a program of NaN logits. */
    static st_entry e[64];
    int n;
    uint8_t *buf;
    ASSERT(llama_entries(e, &n, &buf) == 0);
    const char *dir = llama_copy("st_cover");
    ASSERT(dir);
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    g_extra_pad = 8;
    ASSERT(write_st(p, e, n) == 0);
    g_extra_pad = 0;
    ASSERT_OK(import_dir(dir)); /* padded: fine */
    size_t len;
    uint8_t *whole = (uint8_t *)kt_read_file(p, &len);
    ASSERT(whole);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | whole[i];
    for (int i = 0; i < 8; i++) /* the header length a byte short */
        whole[i] = (uint8_t)((hl - 1) >> (8 * i));
    ASSERT(kt_write_file(p, whole, len) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "'model.safetensors': 1 trailing byte after the last",
                        "a wrong header length?");
    for (int i = 0; i < 8; i++)
        whole[i] = (uint8_t)(hl >> (8 * i));
    uint8_t *more = malloc(len + 5);
    memcpy(more, whole, len);
    memset(more + len, 0, 5);
    ASSERT(kt_write_file(p, more, len + 5) == 0);
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT,
                        "'model.safetensors': 5 trailing bytes after the last");
    /* A hole: a tensor moved 4 bytes on, past its old end. */
    st_entry *last = &e[n - 1];
    last->raw_offsets = 1;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += e[i].nbytes;
    last->begin = total - last->nbytes + 4;
    last->end = total + 4;
    ASSERT(write_st(p, e, n) == 0); /* writes `total` bytes: the last tensor runs 4 past */
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, "run past the end of the data");
    FILE *f = fopen(p, "ab");
    ASSERT(f && fwrite("\0\0\0\0", 1, 4, f) == 4 && fclose(f) == 0);
    snprintf(
        want, sizeof want, "'model.safetensors': data bytes [%llu, %llu) (4 bytes at file offset",
        (unsigned long long)(total - last->nbytes), (unsigned long long)(total - last->nbytes + 4));
    EXPECT_IMPORT_ERROR(dir, KILN_ERR_FORMAT, want, "are not covered by any tensor");
    free(more);
    free(whole);
    free(buf);
}

/* Many damaged files of each kind: config.json and model.safetensors
 * truncated at every 1/40 (1/50) of their length and broken at their JSON
 * punctuation; each is an error naming the file, never a crash. */
static int damaged_case(const char *dir, const char *file, const char *data, size_t len, int *n) {
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (kt_write_file(p, data, len)) return -1;
    kiln_status st = import_dir(dir);
    (*n)++;
    if (st == KILN_OK || !strstr(kiln_last_error(), file)) {
        fprintf(stderr, "  %s damaged (%zu bytes) gave %d: %s\n", file, len, st, kiln_last_error());
        return -1;
    }
    return 0;
}

TEST(many_damaged_configs_and_safetensors) {
    const char *dir = llama_copy("damaged_many");
    ASSERT(dir);
    char p[1100];
    size_t clen, slen;
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *cfg = kt_read_file(p, &clen);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    char *st = kt_read_file(p, &slen);
    ASSERT(cfg && st);
    int n_cfg = 0, n_st = 0, bad = 0;
    for (int k = 0; k < 40; k++)
        bad |= damaged_case(dir, "config.json", cfg, clen * (size_t)k / 40, &n_cfg);
    for (size_t i = 0, hits = 0; i < clen && hits < 15; i++)
        if (cfg[i] == ':' || cfg[i] == ',') {
            char *c = malloc(clen);
            memcpy(c, cfg, clen);
            c[i] = '#';
            bad |= damaged_case(dir, "config.json", c, clen, &n_cfg);
            free(c);
            hits++;
        }
    snprintf(p, sizeof p, "%s/config.json", dir);
    ASSERT(kt_write_file(p, cfg, clen) == 0);
    ASSERT_OK(import_dir(dir)); /* the intact file imports */
    for (int k = 0; k < 50; k++)
        bad |= damaged_case(dir, "model.safetensors", st, slen * (size_t)k / 50, &n_st);
    uint64_t hlen;
    memcpy(&hlen, st, 8);
    static const uint64_t lens[3] = {0, 1, (uint64_t)1 << 62};
    for (int k = 0; k < 3; k++) {
        char *c = malloc(slen);
        memcpy(c, st, slen);
        memcpy(c, &lens[k], 8);
        bad |= damaged_case(dir, "model.safetensors", c, slen, &n_st);
        free(c);
    }
    for (size_t i = 8, hits = 0; i < 8 + hlen && hits < 10; i++)
        if (st[i] == ':' || st[i] == '[' || st[i] == ']') {
            char *c = malloc(slen);
            memcpy(c, st, slen);
            c[i] = '#';
            bad |= damaged_case(dir, "model.safetensors", c, slen, &n_st);
            free(c);
            hits++;
        }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ASSERT(kt_write_file(p, st, slen) == 0);
    free(cfg);
    free(st);
    printf("  %d damaged config.json and %d damaged model.safetensors rejected\n", n_cfg, n_st);
    ASSERT(!bad);
    ASSERT(n_cfg >= 50 && n_st >= 50);
}

TEST_MAIN(many_damaged_configs_and_safetensors, logits_match_transformers,
          a_changed_weight_is_detected, config_and_metadata, chat_template_from_tokenizer_config,
          chat_template_from_chat_template_json, tokenizer_matches_transformers,
          import_survives_allocation_failures, json_values, json_errors_name_offset_and_expectation,
          json_typed_getters, json_strict_integers, json_large_object,
          config_errors_name_file_and_key, vl_config_errors_name_the_key,
          safetensors_errors_name_file_and_tensor, safetensors_cover_their_data_exactly,
          sharded_index_errors)
