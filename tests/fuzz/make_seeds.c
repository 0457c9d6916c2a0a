/* make_seeds.c: writes the fuzzers' seed corpus, built through the real
 * writers by the test fixtures: small llama2.c checkpoints and tokenizers
 * (for fuzz_llama2c), the same models as GGUF files in f32, f16, q8_0 and
 * q4_0 (for fuzz_gguf), small compiled programs (for fuzz_program), traces
 * of those programs run (fuzz_trace), .npy files and tensor folders written
 * by the .npy writer (fuzz_npy), safetensors files: the Hugging Face
 * fixtures' headers over shrunk shapes, and edge cases (fuzz_safetensors),
 * tokenizer.json files: the Qwen2 fixture's and synthetic ones
 * (fuzz_tokenizer_json), and chat templates of each family with a
 * conversation (fuzz_chat).
 *
 *   make_seeds DIR   ->  DIR/llama2c/..., DIR/gguf/..., DIR/program/...,
 *                        DIR/trace/..., DIR/npy/..., DIR/safetensors/...,
 *                        DIR/tokenizer_json/..., DIR/chat/... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "devtools/tensors.h"
#include "fixtures.h"
#include "gguf_writer.h"
#include "harness.h"
#include "import/safetensors.h"
#include "kiln/kiln.h"
#include "kiln/kiln_trace.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"

#define HF_DATA KILN_SOURCE_DIR "/tests/data/hf"

static int save(const char *dir, const char *name, const void *a, size_t na, const void *b,
                size_t nb) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    int ok = fwrite(a, 1, na, f) == na && (!nb || fwrite(b, 1, nb, f) == nb);
    return fclose(f) != 0 || !ok;
}

/* ---- traces ------------------------------------------------------------------------ */

/* Runs prefill of 3 tokens and 2 decodes of `prog` with a trace attached. */
static int write_trace(const char *prog, const char *path) {
    kiln_program *p;
    kiln_session *s = NULL;
    kiln_trace *t = NULL;
    if (kiln_program_open(prog, &p)) return 1;
    int pre, dec, rc = 1;
    int32_t toks[3] = {1, 2, 3}, pos = 0, all = 0;
    int64_t three = 3, one = 1;
    if (kiln_program_find_method(p, "prefill", &pre) ||
        kiln_program_find_method(p, "decode", &dec) || kiln_session_create(p, &s) ||
        kiln_trace_create(&t) || kiln_session_set_trace(s, t) ||
        kiln_session_set_input(s, pre, 0, toks, KILN_I32, 1, &three) ||
        kiln_session_set_input(s, pre, 1, &pos, KILN_I32, 1, &one) ||
        kiln_session_set_input(s, pre, 2, &all, KILN_I32, 1, &one) || kiln_session_execute(s, pre))
        goto done;
    for (int i = 0; i < 2; i++) {
        int32_t tok = 4 + i, p2 = 3 + i;
        if (kiln_session_set_input(s, dec, 0, &tok, KILN_I32, 1, &one) ||
            kiln_session_set_input(s, dec, 1, &p2, KILN_I32, 1, &one) ||
            kiln_session_execute(s, dec))
            goto done;
    }
    kiln_trace_set_positions(t, 5);
    rc = kiln_trace_write(t, s, path) != KILN_OK;
done:
    if (rc) fprintf(stderr, "make_seeds: trace of %s: %s\n", prog, kiln_last_error());
    kiln_session_set_trace(s, NULL);
    kiln_trace_free(t);
    kiln_session_destroy(s);
    kiln_program_close(p);
    return rc;
}

static int trace_seeds(const char *dir, const char *l2c_model, const char *tok) {
    char prog[1200], path[1200];
    int rc = 0;
    static const char *const backends[] = {NULL, "test:refuse=rms_norm+swiglu"};
    for (int i = 0; i < 2; i++) {
        snprintf(prog, sizeof prog, "%s/traced%d.kiln", dir, i);
        snprintf(path, sizeof path, "%s/model%d.trace", dir, i);
        if (kt_compile(l2c_model, tok, prog, 4, 8, backends[i])) {
            fprintf(stderr, "make_seeds: %s\n", kiln_last_error());
            rc = 1;
            continue;
        }
        rc |= write_trace(prog, path);
        remove(prog);
    }
    return rc;
}

/* ---- .npy files and tensor folders ----------------------------------------------------- */

static int npy_seeds(const char *dir) {
    static const struct {
        kiln_npy_dtype dtype;
        int ndim;
        int64_t shape[3];
        const char *name, *json_dtype;
    } arrays[] = {
        {KILN_NPY_I32, 1, {5}, "tokens", "i32"}, {KILN_NPY_F32, 2, {2, 3}, "x", "f32"},
        {KILN_NPY_F16, 0, {0}, "s", "f16"},      {KILN_NPY_BF16, 1, {0}, "e", "bf16"},
        {KILN_NPY_F64, 1, {1}, "d", "f64"},      {KILN_NPY_I64, 3, {2, 1, 2}, "l", "i64"},
    };
    static const uint8_t data[64] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5};
    int rc = 0;
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) {
        kiln_wbuf b = {0};
        if (kiln_npy_encode(&b, arrays[i].dtype, arrays[i].ndim, arrays[i].shape, data)) {
            rc = 1;
            continue;
        }
        char name[64], m[600], sh[64] = "";
        snprintf(name, sizeof name, "%s.npy", arrays[i].name);
        rc |= save(dir, name, b.data, b.len, NULL, 0);
        for (int d = 0; d < arrays[i].ndim; d++)
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%lld", d ? "," : "",
                     (long long)arrays[i].shape[d]);
        /* manifest.json, NUL, a.npy: the folder fuzz_npy writes */
        int n = snprintf(m, sizeof m,
                         "{\"format\": \"kiln-tensors\", \"version\": 1, \"tensors\": [{\"name\": "
                         "\"%s\", \"file\": \"a.npy\", \"dtype\": \"%s\", \"shape\": [%s]%s}]}",
                         arrays[i].name, arrays[i].json_dtype, sh,
                         i == 0 ? ", \"method\": \"prefill\", \"role\": \"input\"" : "");
        m[n++] = 0;
        snprintf(name, sizeof name, "folder-%s", arrays[i].name);
        rc |= save(dir, name, m, (size_t)n, b.data, b.len);
        kiln_wbuf_free(&b);
    }
    return rc;
}

/* ---- safetensors --------------------------------------------------------------------- */

typedef struct {
    const char *name, *dtype;
    int ndim;
    int64_t shape[4];
    int bits; /* per element */
} st_spec;

/* A safetensors file of the tensors in order, the header padded to 8 bytes
 * with spaces as the reference writer does; the data a byte pattern. */
static int write_st(const char *dir, const char *file, const st_spec *t, int n, int metadata) {
    size_t cap = 1 << 16, len = 0;
    char *h = malloc(cap);
    uint8_t *d = calloc(1, 1 << 16);
    if (!h || !d) return 1;
    len += (size_t)snprintf(h, cap, "{%s", metadata ? "\"__metadata__\":{\"format\":\"pt\"}" : "");
    uint64_t off = 0;
    for (int i = 0; i < n && len < cap - 600; i++) {
        uint64_t elems = 1;
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                i || metadata ? "," : "", t[i].name, t[i].dtype);
        for (int k = 0; k < t[i].ndim; k++) {
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", k ? "," : "",
                                    (long long)t[i].shape[k]);
            elems *= (uint64_t)t[i].shape[k];
        }
        uint64_t nb = elems * (uint64_t)t[i].bits / 8;
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8)
        h[len++] = ' ';
    uint8_t hl[8];
    for (int i = 0; i < 8; i++)
        hl[i] = (uint8_t)((uint64_t)len >> (8 * i));
    for (uint64_t i = 0; i < off && i < (1 << 16); i++)
        d[i] = (uint8_t)(0x3c + i % 7);
    char *all = malloc(8 + len);
    int rc = !all || off > (1 << 16);
    if (!rc) {
        memcpy(all, hl, 8);
        memcpy(all + 8, h, len);
        rc = save(dir, file, all, 8 + len, d, (size_t)off);
    }
    free(all);
    free(h);
    free(d);
    return rc;
}

/* A fixture's tensors (names and dtypes as transformers wrote them), every
 * dimension shrunk to at most 2. */
static int shrink_fixture(const char *dir, const char *rel, const char *out) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", HF_DATA, rel);
    size_t len;
    uint8_t *b = (uint8_t *)kt_read_file(path, &len);
    kiln_safetensors sf = {0};
    if (!b || kiln_safetensors_parse(&sf, b, len, path)) {
        fprintf(stderr, "make_seeds: %s: %s\n", path, kiln_last_error());
        free(b);
        return 1;
    }
    int n = (int)sf.n_tensors < 64 ? (int)sf.n_tensors : 64;
    st_spec t[64];
    for (int i = 0; i < n; i++) {
        const kiln_st_tensor *s = &sf.tensors[i];
        uint64_t elems = 1;
        for (int k = 0; k < s->ndim; k++)
            elems *= (uint64_t)s->shape[k];
        t[i].name = s->name;
        t[i].dtype = s->dtype_name;
        t[i].ndim = s->ndim < 4 ? s->ndim : 4;
        t[i].bits = elems ? (int)(s->nbytes * 8 / elems) : 32;
        for (int k = 0; k < t[i].ndim; k++)
            t[i].shape[k] = s->shape[k] < 2 ? s->shape[k] : 2;
    }
    int rc = write_st(dir, out, t, n, 1);
    kiln_safetensors_free(&sf);
    free(b);
    return rc;
}

static int safetensors_seeds(const char *dir) {
    static const char *const fixtures[][2] = {
        {"llama_f32/model.safetensors", "llama_f32.safetensors"},
        {"llama3_rope_bf16/model.safetensors", "llama3_rope_bf16.safetensors"},
        {"llama_tied_f16/model.safetensors", "llama_tied_f16.safetensors"},
        {"qwen2_bf16/model.safetensors", "qwen2_bf16.safetensors"},
        {"qwen3_f32_sharded/model-00001-of-00005.safetensors", "qwen3_shard1.safetensors"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++)
        rc |= shrink_fixture(dir, fixtures[i][0], fixtures[i][1]);
    /* Every dtype of the format; a scalar; empty tensors at the start, between
     * two and at the end; the header alone. */
    static const st_spec dtypes[] = {
        {"e0", "F32", 1, {0}, 32},     {"a", "F64", 1, {1}, 64},    {"b", "I64", 1, {2}, 64},
        {"c", "U32", 2, {1, 2}, 32},   {"d", "I16", 1, {3}, 16},    {"s", "F32", 0, {0}, 32},
        {"e1", "BF16", 2, {2, 0}, 16}, {"f", "U8", 1, {5}, 8},      {"g", "BOOL", 1, {2}, 8},
        {"h", "F8_E4M3", 1, {3}, 8},   {"i", "F8_E5M2", 1, {1}, 8}, {"j", "F6_E2M3", 1, {4}, 6},
        {"k", "F4", 1, {6}, 4},        {"l", "C64", 1, {1}, 64},    {"m", "F16", 1, {3}, 16},
        {"n", "I8", 1, {2}, 8},        {"o", "F8_E8M0", 1, {1}, 8}, {"e2", "F32", 1, {0}, 32},
    };
    rc |= write_st(dir, "dtypes.safetensors", dtypes, (int)(sizeof dtypes / sizeof *dtypes), 0);
    rc |= write_st(dir, "one.safetensors", dtypes + 1, 1, 1);
    rc |= write_st(dir, "header_only.safetensors", dtypes, 0, 1);
    return rc;
}
/* ---- tokenizer.json ----------------------------------------------------------------- */

static void jstr(char **p, const char *s) {
    *(*p)++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') *(*p)++ = '\\';
        *(*p)++ = *s;
    }
    *(*p)++ = '"';
}

/* A byte-level BPE tokenizer.json: the 256 byte characters, a few merges
 * (as "a b" strings or pairs), added tokens, and variant `v`'s normalizer,
 * pre-tokenizer and post-processor; then NUL and a tokenizer_config.json. */
static int synthetic_tokenizer(const char *dir, int v) {
    static const char *const merges[][2] = {{"h", "e"},    {"l", "l"},        {"he", "ll"},
                                            {"hell", "o"}, {"\xC4\xA0", "w"}, {"o", "r"},
                                            {"1", "2"}};
    char *buf = malloc(1 << 16), *p = buf;
    if (!buf) return 1;
    p += sprintf(p, "{\"version\":\"1.0\",\"added_tokens\":["
                    "{\"id\":263,\"content\":\"<|s|>\",\"special\":true,\"lstrip\":false,"
                    "\"rstrip\":false,\"single_word\":false,\"normalized\":false},"
                    "{\"id\":264,\"content\":\"<|e|>\",\"special\":true},"
                    "{\"id\":265,\"content\":\"[L]\",\"special\":true,\"lstrip\":true},"
                    "{\"id\":266,\"content\":\"wd\",\"special\":false,\"single_word\":true,"
                    "\"rstrip\":true}],");
    if (v == 0)
        p += sprintf(p, "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
                        "\"NFC\"}]},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                        "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t)|[^\\\\r\\\\n"
                        "\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
                        "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":"
                        "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_"
                        "space\":false,\"use_regex\":false}]},\"post_processor\":{\"type\":"
                        "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|s|>\","
                        "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
                        "{\"SpecialToken\":{\"id\":\"<|e|>\",\"type_id\":0}}],\"special_tokens\":"
                        "{\"<|s|>\":{\"id\":\"<|s|>\",\"ids\":[263]},\"<|e|>\":{\"id\":\"<|e|>\","
                        "\"ids\":[264]}}},\"decoder\":{\"type\":\"ByteLevel\"},");
    else
        p += sprintf(p, "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\","
                        "\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                        "{\"type\":\"Split\",\"pattern\":{\"String\":\"--\"}},{\"type\":"
                        "\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]},"
                        "\"post_processor\":{\"type\":\"ByteLevel\"},\"decoder\":null,");
    p += sprintf(p,
                 "\"model\":{\"type\":\"BPE\",\"unk_token\":null,\"byte_fallback\":false,"
                 "\"ignore_merges\":%s,\"vocab\":{",
                 v ? "true" : "false");
    for (int b = 0; b < 256; b++) {
        uint8_t ch[5] = {0};
        ch[kiln_utf8_encode(kiln_tok_byte_char((uint8_t)b), ch)] = 0;
        if (b) *p++ = ',';
        jstr(&p, (const char *)ch);
        p += sprintf(p, ":%d", b);
    }
    int n = (int)(sizeof merges / sizeof *merges);
    for (int i = 0; i < n; i++) {
        char joined[32];
        snprintf(joined, sizeof joined, "%s%s", merges[i][0], merges[i][1]);
        *p++ = ',';
        jstr(&p, joined);
        p += sprintf(p, ":%d", 256 + i);
    }
    p += sprintf(p, "},\"merges\":[");
    for (int i = 0; i < n; i++) {
        char m[32];
        snprintf(m, sizeof m, "%s %s", merges[i][0], merges[i][1]);
        if (i) *p++ = ',';
        if (i % 2) {
            jstr(&p, m);
        } else {
            p += sprintf(p, "[");
            jstr(&p, merges[i][0]);
            *p++ = ',';
            jstr(&p, merges[i][1]);
            *p++ = ']';
        }
    }
    p += sprintf(p, "]}}");
    *p++ = 0;
    p += sprintf(p, v ? "{\"bos_token\":null,\"eos_token\":\"<|e|>\"}"
                      : "{\"bos_token\":{\"content\":\"<|s|>\"},\"eos_token\":\"<|e|>\","
                        "\"add_bos_token\":true,\"add_eos_token\":false}");
    char name[64];
    snprintf(name, sizeof name, "synthetic%d", v);
    int rc = save(dir, name, buf, (size_t)(p - buf), NULL, 0);
    free(buf);
    return rc;
}

static int tokenizer_seeds(const char *dir) {
    size_t jl, cl;
    char *j = kt_read_file(HF_DATA "/qwen2_bf16/tokenizer.json", &jl),
         *c = kt_read_file(HF_DATA "/qwen2_bf16/tokenizer_config.json", &cl);
    int rc = !j || !c;
    if (!rc) {
        j[jl] = 0; /* kt_read_file leaves a byte for the NUL: the separator */
        rc = save(dir, "qwen2", j, jl + 1, c, cl) | save(dir, "qwen2_alone", j, jl, NULL, 0);
    }
    free(j);
    free(c);
    return rc | synthetic_tokenizer(dir, 0) | synthetic_tokenizer(dir, 1);
}

/* ---- chat templates ------------------------------------------------------------------ */

/* One template per family Kiln detects (only the text detection looks at),
 * and a conversation: messages split at 0x01, the first byte choosing the
 * role by its value mod 6 (H system, I user, J assistant, K tool, L ipython). */
static int chat_seeds(const char *dir) {
    static const char *const templates[][2] = {
        {"chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                   "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"},
        {"smollm2", "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a "
                    "helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
                    "{% endif %}<|im_start|>"},
        {"qwen3", "{%- set ns = namespace(multi_step_tool=true) %}<|im_start|>{%- if "
                  "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n"
                  "</think>\\n\\n' }}{%- endif %}"},
        {"llama3", "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ "
                   "message['role'] }}<|end_header_id|>\\n\\n{{ message['content'] | trim }}"
                   "<|eot_id|>{% endfor %}"},
        {"llama31", "<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: "
                    "December 2023\\n{{- \"Today Date: \" + date_string }}ipython<|eot_id|>"},
        {"llama32", "{%- set date_string = strftime_now(\"%d %b %Y\") %}<|start_header_id|>"
                    "Cutting Knowledge Date: December 2023\\n\"Today Date: \" + date_string "
                    "ipython<|eot_id|>"},
        {"functionary", "<|start_header_id|>{{ functions }}<|eot_id|>"},
        {"unknown", "{{ messages }}"},
    };
    static const char conv[] = "Hbe brief  \x01IHello\xe3\x80\x80 <think>\x01J<think>\nhm\n"
                               "</think>\n\nHi\x01KRESULT \"q\"\\\n\x01L{\"x\": 1}\x01IHow?"
                               "\x01M?";
    int rc = 0;
    for (size_t i = 0; i < sizeof templates / sizeof *templates; i++)
        rc |= save(dir, templates[i][0], templates[i][1], strlen(templates[i][1]) + 1, conv,
                   sizeof conv - 1);
    size_t n;
    char *t = kt_read_file(HF_DATA "/qwen2_bf16/chat_template.jinja", &n);
    if (t) {
        t[n] = 0;
        rc |= save(dir, "qwen2_fixture", t, n + 1, conv, sizeof conv - 1);
    }
    free(t);
    return rc | !t;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    char l2c[1024], gguf[1024], prog[1024], path[1200], tok[1200], sub[5][1024];
    snprintf(l2c, sizeof l2c, "%s/llama2c", argv[1]);
    snprintf(gguf, sizeof gguf, "%s/gguf", argv[1]);
    snprintf(prog, sizeof prog, "%s/program", argv[1]);
    static const char *const subs[5] = {"trace", "npy", "safetensors", "tokenizer_json", "chat"};
    mkdir(argv[1], 0755);
    mkdir(l2c, 0755);
    mkdir(gguf, 0755);
    mkdir(prog, 0755);
    for (int i = 0; i < 5; i++) {
        snprintf(sub[i], sizeof sub[i], "%s/%s", argv[1], subs[i]);
        mkdir(sub[i], 0755);
    }
    /* dim, hidden, layers, heads, kv_heads, vocab, seq, shared, seed */
    static const kt_l2c_config models[] = {
        {8, 8, 1, 2, 1, 8, 8, 1, 1},    /* the smallest: shared classifier */
        {8, 12, 2, 2, 2, 16, 8, 0, 2},  /* stored classifier, two layers */
        {12, 10, 1, 3, 1, 12, 6, 1, 3}, /* MQA, odd widths */
        {32, 32, 1, 4, 2, 8, 4, 0, 4},  /* widths of whole q8_0 / q4_0 blocks */
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        snprintf(path, sizeof path, "%s/model%zu.bin", l2c, i);
        rc |= kt_write_llama2c(path, &models[i]);
        snprintf(tok, sizeof tok, "%s/tok%d.bin", l2c, models[i].vocab);
        rc |= kt_write_tokenizer(tok, models[i].vocab);
        char out[1300];
        snprintf(out, sizeof out, "%s/model%zu.kiln", prog, i);
        if (kt_compile(path, i == 1 ? NULL : tok, out, 4, 8, NULL)) {
            fprintf(stderr, "make_seeds: %s\n", kiln_last_error());
            rc = 1;
        }
        if (i) continue;
        /* the first also with testd: a blob, several partitions per method */
        snprintf(out, sizeof out, "%s/model%zu.testd.kiln", prog, i);
        if (kt_compile(path, tok, out, 4, 8, "testd:refuse=swiglu,cpu")) {
            fprintf(stderr, "make_seeds: %s\n", kiln_last_error());
            rc = 1;
        }
    }
    /* GGUF: every model in f32 and f16, the block-wide one also quantized. */
    static const struct {
        size_t model;
        uint32_t type;
        const char *name;
    } ggufs[] = {{0, 0, "f32"}, {1, 1, "f16"}, {2, 0, "f32"}, {3, 8, "q8_0"}, {3, 2, "q4_0"}};
    for (size_t i = 0; i < sizeof ggufs / sizeof *ggufs; i++) {
        size_t len;
        uint8_t *b = kt_llama2c_bytes(&models[ggufs[i].model], &len);
        kt_gguf *g = b ? kt_gguf_from_llama2c(b, ggufs[i].type) : NULL;
        snprintf(path, sizeof path, "%s/model%zu-%s.gguf", gguf, ggufs[i].model, ggufs[i].name);
        rc |= !g || kt_gguf_write(g, path);
        if (g) kt_gguf_free(g);
        free(b);
    }
    snprintf(path, sizeof path, "%s/model0.bin", l2c);
    snprintf(tok, sizeof tok, "%s/tok8.bin", l2c);
    rc |= trace_seeds(sub[0], path, tok);
    rc |= npy_seeds(sub[1]);
    rc |= safetensors_seeds(sub[2]);
    rc |= tokenizer_seeds(sub[3]);
    rc |= chat_seeds(sub[4]);
    snprintf(tok, sizeof tok, "%s/tok300.bin", l2c);
    rc |= kt_write_tokenizer(tok, 300);
    if (rc) fprintf(stderr, "make_seeds: could not write every seed\n");
    return rc ? 1 : 0;
}
