/* hf.c: Hugging Face folders: config.json (LlamaForCausalLM,
 * Qwen2ForCausalLM, Qwen3ForCausalLM) onto the Llama-family config, the
 * safetensors weights renamed to Kiln's (GGUF) tensor names, llama3 rope
 * scaling as frequency factors, and the tokenizer files, chat template and
 * end tokens stored as metadata. HF stores Q and K as trained and rotates
 * halves (NEOX), and its matrices are [out, in] row-major: Kiln's [N, K]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"
#include "import/import.h"
#include "import/safetensors.h"
#include "ir/ops.h"
#include "llm/vl.h"

#define MAX_META_FILE ((size_t)64 << 20) /* the program reader's limit on one metadata string */

/* ---- the JSON files of the folder ------------------------------------------ */

typedef struct jfile {
    kiln_file_map map;
    kiln_json_doc doc;
    char what[600]; /* "'folder/config.json'" */
    int found;
} jfile;

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Names `file` of the folder for messages: its last folder and itself. */
static void name_in_dir(char *out, size_t cap, const char *dir, const char *file) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    snprintf(out, cap, "'%.*s/%s'", (int)(n - b), dir + b, file);
}

static kiln_status jfile_open(jfile *f, const char *dir, const char *file, int required,
                              int parse) {
    memset(f, 0, sizeof *f);
    name_in_dir(f->what, sizeof f->what, dir, file);
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
        return kiln_error(KILN_ERR_INVALID_ARG, "path '%s/%s' is too long", dir, file);
    if (!is_file(path))
        return required ? kiln_error(KILN_ERR_IO, "%s is missing: a Hugging Face folder needs it",
                                     f->what)
                        : KILN_OK;
    kiln_status st = kiln_file_map_open(path, &f->map);
    if (st) return st;
    f->found = 1;
    if (!parse) return KILN_OK;
    if ((st = kiln_json_parse((const char *)f->map.data, f->map.size, f->what, 0, &f->doc)))
        return st;
    if (f->doc.root->type != KILN_JSON_OBJECT)
        return kiln_error(KILN_ERR_FORMAT, "%s: should be a JSON object, found %s", f->what,
                          kiln_json_type_name(f->doc.root->type));
    return KILN_OK;
}

static void jfile_close(jfile *f) {
    kiln_json_free(&f->doc);
    kiln_file_map_close(&f->map);
}

/* Stores a whole file as one metadata string. */
static kiln_status store_file(kiln_module *m, const jfile *f, const char *key) {
    if (f->map.size > MAX_META_FILE)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: %zu bytes, more than the %zu a program stores in one string",
                          f->what, f->map.size, MAX_META_FILE);
    if (f->map.size && memchr(f->map.data, 0, f->map.size))
        return kiln_error(KILN_ERR_FORMAT, "%s holds a NUL byte", f->what);
    char *s = kiln_strndup((const char *)f->map.data, f->map.size);
    if (!s) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = kiln_meta_set_str(m, key, s);
    kiln_free(s);
    return st;
}

/* An integer member in lo..hi (absent and not required: *out untouched). */
static kiln_status get_int(const kiln_json *o, const char *what, const char *key, int required,
                           int64_t lo, int64_t hi, int *out) {
    int64_t v = *out;
    kiln_status st = kiln_json_get_int(o, what, key, required, &v);
    if (st) return st;
    if (v < lo || v > hi)
        return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' is %lld, out of range %lld..%lld", what,
                          key, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return KILN_OK;
}

/* A boolean flag that must be false (or absent) for Kiln to build the model. */
static kiln_status must_be_false(const kiln_json *o, const char *what, const char *key,
                                 const char *why) {
    int b = 0;
    kiln_status st = kiln_json_get_bool(o, what, key, 0, &b);
    if (st) return st;
    if (b)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: key '%s' is true (%s), which Kiln does not build", what, key, why);
    return KILN_OK;
}

/* ---- rope scaling ---------------------------------------------------------- */

/* Llama-3 rope scaling (Meta's reference and transformers'
 * _compute_llama3_parameters): wavelengths longer than
 * original_max_position_embeddings / low_freq_factor are divided by
 * `factor`, shorter than .../high_freq_factor kept, and in between blended.
 * Kiln's rope divides each frequency by ff[j]; this computes those
 * divisors. */
static kiln_status llama3_factors(const kiln_json *rs, const char *what, float theta, int n_rot,
                                  float **out) {
    double factor, lo, hi, old_ctx;
    kiln_status st;
    if ((st = kiln_json_get_num(rs, what, "factor", 1, &factor)) ||
        (st = kiln_json_get_num(rs, what, "low_freq_factor", 1, &lo)) ||
        (st = kiln_json_get_num(rs, what, "high_freq_factor", 1, &hi)) ||
        (st = kiln_json_get_num(rs, what, "original_max_position_embeddings", 1, &old_ctx)))
        return st;
    if (!(factor > 0) || !(lo > 0) || !(hi > lo) || !(old_ctx >= 1))
        return kiln_error(
            KILN_ERR_FORMAT,
            "%s: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor "
            "and original_max_position_embeddings >= 1 (found %g, %g, %g, %g)",
            what, factor, lo, hi, old_ctx);
    float *ff = kiln_malloc(sizeof(float) * (size_t)(n_rot / 2));
    if (!ff) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    double lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (int j = 0; j < n_rot / 2; j++) {
        double inv_freq = 1.0 / pow((double)theta, (double)(2 * j) / (double)n_rot);
        double wavelen = 2.0 * 3.14159265358979323846 / inv_freq, div;
        if (wavelen < hi_wavelen) {
            div = 1.0;
        } else if (wavelen > lo_wavelen) {
            div = factor;
        } else {
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            div = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        ff[j] = (float)div;
    }
    *out = ff;
    return KILN_OK;
}

/* ---- tensor names ---------------------------------------------------------- */

enum { X = 0, DIM_D, DIM_F, DIM_V, DIM_QD, DIM_KVD, DIM_HD }; /* shape codes */
enum { ALWAYS = 0, IF_BIAS, IF_QK_NORM, IF_UNTIED };          /* when needed */

typedef struct {
    const char *hf, *kiln;
    int a, b; /* expected shape [a] or [a, b] */
    int when;
} tensor_rule;

static const tensor_rule GLOBAL[] = {
    {"model.embed_tokens.weight", "token_embd.weight", DIM_V, DIM_D, ALWAYS},
    {"model.norm.weight", "output_norm.weight", DIM_D, X, ALWAYS},
    {"lm_head.weight", "output.weight", DIM_V, DIM_D, IF_UNTIED},
};

static const tensor_rule LAYER[] = {
    {"input_layernorm.weight", "blk.%d.attn_norm.weight", DIM_D, X, ALWAYS},
    {"self_attn.q_proj.weight", "blk.%d.attn_q.weight", DIM_QD, DIM_D, ALWAYS},
    {"self_attn.k_proj.weight", "blk.%d.attn_k.weight", DIM_KVD, DIM_D, ALWAYS},
    {"self_attn.v_proj.weight", "blk.%d.attn_v.weight", DIM_KVD, DIM_D, ALWAYS},
    {"self_attn.o_proj.weight", "blk.%d.attn_output.weight", DIM_D, DIM_QD, ALWAYS},
    {"self_attn.q_proj.bias", "blk.%d.attn_q.bias", DIM_QD, X, IF_BIAS},
    {"self_attn.k_proj.bias", "blk.%d.attn_k.bias", DIM_KVD, X, IF_BIAS},
    {"self_attn.v_proj.bias", "blk.%d.attn_v.bias", DIM_KVD, X, IF_BIAS},
    {"self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight", DIM_HD, X, IF_QK_NORM},
    {"self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight", DIM_HD, X, IF_QK_NORM},
    {"post_attention_layernorm.weight", "blk.%d.ffn_norm.weight", DIM_D, X, ALWAYS},
    {"mlp.gate_proj.weight", "blk.%d.ffn_gate.weight", DIM_F, DIM_D, ALWAYS},
    {"mlp.up_proj.weight", "blk.%d.ffn_up.weight", DIM_F, DIM_D, ALWAYS},
    {"mlp.down_proj.weight", "blk.%d.ffn_down.weight", DIM_D, DIM_F, ALWAYS},
};

#define N_GLOBAL (sizeof GLOBAL / sizeof *GLOBAL)
#define N_LAYER (sizeof LAYER / sizeof *LAYER)

static int64_t dim_of(const kiln_llama_config *c, int code) {
    switch (code) {
    case DIM_D:
        return c->n_embd;
    case DIM_F:
        return c->n_ff;
    case DIM_V:
        return c->n_vocab;
    case DIM_QD:
        return (int64_t)c->n_head * c->head_dim;
    case DIM_KVD:
        return (int64_t)c->n_head_kv * c->head_dim;
    case DIM_HD:
        return c->head_dim;
    }
    return 0;
}

static int needed(const kiln_llama_config *c, int when) {
    switch (when) {
    case IF_BIAS:
        return c->qkv_bias;
    case IF_QK_NORM:
        return c->qk_norm;
    case IF_UNTIED:
        return !c->tied_output;
    }
    return 1;
}

/* Finds the rule for an HF name; *layer is the block index (-1: global). */
static const tensor_rule *rule_for(const char *name, int n_layer, int *layer, int *bad_layer) {
    *layer = -1;
    *bad_layer = 0;
    for (size_t i = 0; i < N_GLOBAL; i++)
        if (!strcmp(name, GLOBAL[i].hf)) return &GLOBAL[i];
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1)) return NULL;
    const char *p = name + sizeof prefix - 1;
    long l = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 8)
        l = l * 10 + (*p++ - '0'), digits++;
    if (!digits || *p != '.' || (digits > 1 && p[-digits] == '0')) return NULL;
    p++;
    for (size_t i = 0; i < N_LAYER; i++)
        if (!strcmp(p, LAYER[i].hf)) {
            if (l >= n_layer) {
                *bad_layer = 1;
                return NULL;
            }
            *layer = (int)l;
            return &LAYER[i];
        }
    return NULL;
}

/* Adds `name` from checkpoint tensor t's bytes at `data` (t itself or a
 * slice of it) with shape ne: 1-D tensors become owned f32 (every op reads
 * norms and biases as f32); matrices keep their dtype and borrow the map
 * unless it leaves them misaligned for their dtype. */
static kiln_status check_dtype(const kiln_st_tensor *t, const char *file) {
    if (t->dtype >= 0) return KILN_OK;
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "'%s': tensor '%s' has dtype %s; Kiln reads F32, F16 and BF16", file, t->name,
                      t->dtype_name);
}

static kiln_status add_data(kiln_module *m, const char *name, const kiln_st_tensor *t, int ndim,
                            const int64_t *ne, const uint8_t *data, const char *file) {
    kiln_status st = check_dtype(t, file);
    if (st) return st;
    kiln_dtype dt = (kiln_dtype)t->dtype;
    size_t esize = dt == KILN_F32 ? 4 : 2;
    uint64_t nbytes = (uint64_t)ne[0] * (ndim == 2 ? (uint64_t)ne[1] : 1u) * esize;
    int k;
    if (ndim == 1 && dt != KILN_F32) {
        float *f = kiln_malloc(sizeof(float) * (size_t)ne[0]);
        if (!f) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < ne[0]; i++) {
            uint16_t h;
            memcpy(&h, data + 2 * i, 2);
            f[i] = dt == KILN_F16 ? kiln_f16_to_f32(h) : kiln_bf16_to_f32(h);
        }
        k = kiln_module_add_const_owned(m, name, KILN_F32, 1, ne, f);
    } else if ((uintptr_t)data % esize) {
        void *copy = kiln_malloc((size_t)nbytes);
        if (!copy) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        memcpy(copy, data, (size_t)nbytes);
        k = kiln_module_add_const_owned(m, name, dt, ndim, ne, copy);
    } else {
        k = kiln_module_add_const(m, name, dt, ndim, ne, data);
    }
    return k < 0 ? kiln_error_wrap(KILN_ERR_FORMAT, "'%s': tensor '%s'", file, t->name) : KILN_OK;
}

/* Adds one checkpoint tensor under its Kiln name, its shape checked. */
static kiln_status add_tensor(kiln_module *m, const kiln_safetensors *sf, const kiln_st_tensor *t,
                              const tensor_rule *r, int layer, const kiln_llama_config *c) {
    const char *file = sf->files[t->file];
    char name[KILN_NAME_MAX], want[96], got[96];
    snprintf(name, sizeof name, r->kiln, layer);
    int ndim = r->b == X ? 1 : 2;
    int64_t ne[2] = {dim_of(c, r->a), dim_of(c, r->b)};
    kiln_shape_str(ndim, ne, want, sizeof want);
    int same = t->ndim == ndim && t->shape[0] == ne[0] && (ndim == 1 || t->shape[1] == ne[1]);
    if (!same) {
        int64_t sh[4] = {0};
        for (int d = 0; d < t->ndim && d < 4; d++)
            sh[d] = t->shape[d];
        return kiln_error(
            KILN_ERR_FORMAT,
            "'%s': tensor '%s' (Kiln's '%s') has shape %s, expected %s from config.json", file,
            t->name, name, kiln_shape_str(t->ndim < 4 ? t->ndim : 4, sh, got, sizeof got), want);
    }
    return add_data(m, name, t, ndim, ne, t->data, file);
}

/* ---- the vision tower's tensors ------------------------------------------- */

/* Parses "<prefix><N>.<rest>"; returns rest or NULL. */
static const char *indexed(const char *name, const char *prefix, int limit, int *index) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n)) return NULL;
    const char *p = name + n;
    long l = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 8)
        l = l * 10 + (*p++ - '0'), digits++;
    if (!digits || *p != '.' || (digits > 1 && p[-digits] == '0') || l >= limit) return NULL;
    *index = (int)l;
    return p + 1;
}

/* One model.visual.* tensor under Kiln's v.* names: qkv is split into q, k
 * and v (row slices of the same bytes); the patch embedding's 5-D
 * convolution kernel is read as the [width, channels x frames x patch^2]
 * matrix it is. Shapes are checked by kiln_vision_check_weights. */
static kiln_status add_vision_tensor(kiln_module *m, const kiln_st_tensor *t,
                                     const kiln_vision_config *v, const char *file) {
    static const struct {
        const char *hf, *kiln;
    } block[] = {{"norm1.weight", "ln1.weight"},
                 {"norm1.bias", "ln1.bias"},
                 {"norm2.weight", "ln2.weight"},
                 {"norm2.bias", "ln2.bias"},
                 {"attn.proj.weight", "attn_out.weight"},
                 {"attn.proj.bias", "attn_out.bias"},
                 {"mlp.linear_fc1.weight", "ffn_up.weight"},
                 {"mlp.linear_fc1.bias", "ffn_up.bias"},
                 {"mlp.linear_fc2.weight", "ffn_down.weight"},
                 {"mlp.linear_fc2.bias", "ffn_down.bias"}},
      merger[] = {{"norm.weight", "norm.weight"},      {"norm.bias", "norm.bias"},
                  {"linear_fc1.weight", "fc1.weight"}, {"linear_fc1.bias", "fc1.bias"},
                  {"linear_fc2.weight", "fc2.weight"}, {"linear_fc2.bias", "fc2.bias"}};
    const char *name = t->name + strlen("model.visual."), *rest;
    char kname[KILN_NAME_MAX];
    int64_t ne[2] = {t->ndim > 0 ? t->shape[0] : 0, t->ndim > 1 ? t->shape[1] : 0};
    int ndim = t->ndim, idx;
    kname[0] = 0;
    if (!strcmp(name, "patch_embed.proj.weight")) {
        ne[1] = 1;
        for (int d = 1; d < t->ndim; d++)
            ne[1] *= t->shape[d];
        ndim = 2;
        snprintf(kname, sizeof kname, "v.patch_embd.weight");
    } else if (!strcmp(name, "patch_embed.proj.bias")) {
        snprintf(kname, sizeof kname, "v.patch_embd.bias");
    } else if (!strcmp(name, "pos_embed.weight")) {
        snprintf(kname, sizeof kname, "v.pos_embd.weight");
    } else if ((rest = indexed(name, "blocks.", v->depth, &idx))) {
        if (!strcmp(rest, "attn.qkv.weight") || !strcmp(rest, "attn.qkv.bias")) {
            int is_w = rest[9] == 'w';
            if (t->ndim != (is_w ? 2 : 1) || t->shape[0] != 3 * (int64_t)v->n_embd ||
                (is_w && t->shape[1] != v->n_embd))
                return kiln_error(KILN_ERR_FORMAT,
                                  "'%s': tensor '%s' must be [%d%s] (q, k and v stacked)", file,
                                  t->name, 3 * v->n_embd, is_w ? ", hidden_size" : "");
            kiln_status st = check_dtype(t, file);
            if (st) return st;
            size_t part = (size_t)t->nbytes / 3;
            int64_t sne[2] = {v->n_embd, v->n_embd};
            static const char *const qkv[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; i++) {
                snprintf(kname, sizeof kname, "v.blk.%d.attn_%s.%s", idx, qkv[i],
                         is_w ? "weight" : "bias");
                st = add_data(m, kname, t, is_w ? 2 : 1, sne, t->data + i * part, file);
                if (st) return st;
            }
            return KILN_OK;
        }
        for (size_t i = 0; i < sizeof block / sizeof *block && !kname[0]; i++)
            if (!strcmp(rest, block[i].hf))
                snprintf(kname, sizeof kname, "v.blk.%d.%s", idx, block[i].kiln);
    } else if ((rest = indexed(name, "deepstack_merger_list.", v->n_deepstack, &idx)) ||
               !strncmp(name, "merger.", 7)) {
        char pre[32];
        if (rest)
            snprintf(pre, sizeof pre, "v.deepstack.%d", idx);
        else
            snprintf(pre, sizeof pre, "v.merger"), rest = name + 7;
        for (size_t i = 0; i < sizeof merger / sizeof *merger && !kname[0]; i++)
            if (!strcmp(rest, merger[i].hf))
                snprintf(kname, sizeof kname, "%s.%s", pre, merger[i].kiln);
    }
    if (!kname[0])
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "'%s': tensor '%s' is not one Kiln maps for the Qwen3-VL vision tower "
                          "with this config.json",
                          file, t->name);
    if (ndim < 1 || ndim > 2)
        return kiln_error(KILN_ERR_FORMAT, "'%s': tensor '%s' has %d dims, expected %s", file,
                          t->name, t->ndim, kname[strlen(kname) - 1] == 's' ? "1" : "2");
    return add_data(m, kname, t, ndim, ne, t->data, file);
}

/* ---- config ---------------------------------------------------------------- */

/* Every key of object o is one of known[0..n): else an error naming the
 * first other key and what (`part`) Kiln reads it for. */
static kiln_status only_known_keys(const kiln_json *o, const char *what, const char *const *known,
                                   size_t n, const char *part) {
    for (size_t i = 0; i < o->len; i++) {
        size_t k = 0;
        while (k < n && strcmp(known[k], o->keys[i].s))
            k++;
        if (k == n)
            return kiln_error(KILN_ERR_UNSUPPORTED, "%s: key '%.80s' is not one Kiln reads for %s",
                              what, o->keys[i].s, part);
    }
    return KILN_OK;
}

/* Qwen3-VL's vision_config. Every key that changes what the tower computes
 * is read; a value Kiln does not build is an error naming the key. */
static kiln_status read_vision(const kiln_json *o, const char *what, kiln_vision_config *v) {
    const int MAX = 1 << 30;
    kiln_status st;
    memset(v, 0, sizeof *v);
    v->in_channels = 3, v->temporal_patch = 2, v->merge = 2, v->patch = 16;
    v->rope_theta = 10000.0f, v->norm_eps = 1e-6f;
    if ((st = get_int(o, what, "depth", 1, 1, 256, &v->depth)) ||
        (st = get_int(o, what, "hidden_size", 1, 1, 65536, &v->n_embd)) ||
        (st = get_int(o, what, "intermediate_size", 1, 1, MAX, &v->n_ff)) ||
        (st = get_int(o, what, "num_heads", 1, 1, 4096, &v->n_head)) ||
        (st = get_int(o, what, "out_hidden_size", 1, 1, 65536, &v->out_embd)) ||
        (st = get_int(o, what, "num_position_embeddings", 1, 1, MAX, &v->n_pos_embd)) ||
        (st = get_int(o, what, "in_channels", 0, 1, 16, &v->in_channels)) ||
        (st = get_int(o, what, "patch_size", 0, 1, 64, &v->patch)) ||
        (st = get_int(o, what, "temporal_patch_size", 0, 1, 16, &v->temporal_patch)) ||
        (st = get_int(o, what, "spatial_merge_size", 0, 1, 8, &v->merge)))
        return st;
    const char *act = "gelu_pytorch_tanh";
    if ((st = kiln_json_get_str(o, what, "hidden_act", 0, &act, NULL))) return st;
    if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_new") || !strcmp(act, "gelu_fast"))
        v->gelu_tanh = 1;
    else if (!strcmp(act, "gelu"))
        v->gelu_tanh = 0;
    else
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: key 'hidden_act' is '%.40s'; Kiln builds the vision MLP with "
                          "gelu or gelu_pytorch_tanh",
                          what, act);
    const kiln_json *ds = NULL, *rp = NULL;
    if ((st = kiln_json_get_arr(o, what, "deepstack_visual_indexes", 0, &ds)) ||
        (st = kiln_json_get_obj(o, what, "rope_parameters", 0, &rp)))
        return st;
    if (ds && ds->len > KILN_MAX_DEEPSTACK)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: key 'deepstack_visual_indexes' lists %zu layers; Kiln takes at "
                          "most %d",
                          what, ds->len, KILN_MAX_DEEPSTACK);
    for (size_t i = 0; ds && i < ds->len; i++) {
        const kiln_json *e = &ds->items[i];
        if (e->type != KILN_JSON_NUMBER || !e->is_int || e->i < 0 || e->i >= v->depth)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: key 'deepstack_visual_indexes' entry %zu is not a block "
                              "index in 0..%d",
                              what, i, v->depth - 1);
        v->deepstack_layer[v->n_deepstack++] = (int)e->i;
    }
    if (rp) {
        char rwhat[700];
        snprintf(rwhat, sizeof rwhat, "%s: rope_parameters", what);
        const char *type = "axial";
        double theta = v->rope_theta;
        if ((st = kiln_json_get_str(rp, rwhat, "rope_type", 0, &type, NULL)) ||
            (st = kiln_json_get_num(rp, rwhat, "rope_theta", 0, &theta)))
            return st;
        if (strcmp(type, "axial") && strcmp(type, "default"))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "%s: key 'rope_type' is '%.40s'; Kiln builds the axial vision rope",
                              rwhat, type);
        v->rope_theta = (float)theta;
    }
    /* transformers 5.25 keys this tower has no use for, or that must be off */
    static const char *const known[] = {"depth",
                                        "hidden_size",
                                        "intermediate_size",
                                        "num_heads",
                                        "out_hidden_size",
                                        "num_position_embeddings",
                                        "in_channels",
                                        "patch_size",
                                        "temporal_patch_size",
                                        "spatial_merge_size",
                                        "hidden_act",
                                        "deepstack_visual_indexes",
                                        "rope_parameters",
                                        "model_type",
                                        "initializer_range",
                                        "dtype",
                                        "torch_dtype",
                                        "_name_or_path"};
    if ((st = only_known_keys(o, what, known, sizeof known / sizeof *known,
                              "the Qwen3-VL vision tower")))
        return st;
    v->max_patches = KILN_VISION_MAX_PATCHES;
    return KILN_OK;
}

/* A member that must be an array of 3 numbers, each > 0 when `positive`. */
static kiln_status get_rgb(const kiln_json *o, const char *what, const char *key, int positive,
                           float out[3]) {
    const kiln_json *a;
    kiln_status st = kiln_json_get_arr(o, what, key, 0, &a);
    if (st || !a) return st;
    int ok = a->len == 3;
    for (size_t i = 0; ok && i < 3; i++)
        ok = a->items[i].type == KILN_JSON_NUMBER && (!positive || a->items[i].num > 0);
    if (!ok)
        return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' should be 3 numbers (R, G, B)%s", what,
                          key, positive ? ", each > 0" : "");
    for (int i = 0; i < 3; i++)
        out[i] = (float)a->items[i].num;
    return KILN_OK;
}

/* A processor switch that must be on (or absent): Kiln always does it. */
static kiln_status must_be_true(const kiln_json *o, const char *what, const char *key) {
    int b = 1;
    kiln_status st = kiln_json_get_bool(o, what, key, 0, &b);
    if (st) return st;
    if (!b)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: key '%s' is false; Kiln's image processor always does this step",
                          what, key);
    return KILN_OK;
}

/* The image processor's settings (Qwen2VLImageProcessor, as Qwen3-VL uses
 * it): preprocessor_config.json, or processor_config.json's
 * "image_processor" (transformers 5 writes that one). Patch sizes must
 * match the tower's; anything else Kiln would not do is an error naming
 * the key. */
static kiln_status read_processor(const char *dir, kiln_vision_config *v) {
    jfile f;
    const kiln_json *o;
    char what[700];
    kiln_status st = jfile_open(&f, dir, "preprocessor_config.json", 0, 1);
    if (st) goto done;
    if (f.found) {
        o = f.doc.root;
        snprintf(what, sizeof what, "%s", f.what);
    } else {
        jfile_close(&f);
        if ((st = jfile_open(&f, dir, "processor_config.json", 0, 1))) goto done;
        if (!f.found) {
            char name[700];
            name_in_dir(name, sizeof name, dir, "preprocessor_config.json");
            st = kiln_error(KILN_ERR_IO,
                            "%s is missing (and processor_config.json): a Qwen3-VL folder needs "
                            "its image processor's settings",
                            name);
            goto done;
        }
        if ((st = kiln_json_get_obj(f.doc.root, f.what, "image_processor", 1, &o))) goto done;
        snprintf(what, sizeof what, "%s: image_processor", f.what);
    }
    int patch = v->patch, merge = v->merge, tp = v->temporal_patch, resample = 3;
    if ((st = get_int(o, what, "patch_size", 0, 1, 64, &patch)) ||
        (st = get_int(o, what, "merge_size", 0, 1, 8, &merge)) ||
        (st = get_int(o, what, "temporal_patch_size", 0, 1, 16, &tp)) ||
        (st = get_int(o, what, "resample", 0, 0, 5, &resample)))
        goto done;
    const char *pkey = patch != v->patch         ? "patch_size"
                       : merge != v->merge       ? "merge_size"
                       : tp != v->temporal_patch ? "temporal_patch_size"
                                                 : NULL;
    if (pkey) {
        st = kiln_error(KILN_ERR_FORMAT,
                        "%s: key '%s' does not match config.json's vision_config (patch %d, "
                        "merge %d, temporal patch %d)",
                        what, pkey, v->patch, v->merge, v->temporal_patch);
        goto done;
    }
    if (resample != 3) {
        st = kiln_error(KILN_ERR_UNSUPPORTED,
                        "%s: key 'resample' is %d; Kiln resizes as PIL's BICUBIC (3) does", what,
                        resample);
        goto done;
    }
    /* Qwen3-VL's published settings, for the keys a folder leaves out */
    v->min_pixels = 65536, v->max_pixels = 16777216, v->rescale = 1.0f / 255.0f;
    for (int c = 0; c < 3; c++)
        v->mean[c] = 0.5f, v->std[c] = 0.5f;
    const kiln_json *size = NULL;
    int64_t lo = v->min_pixels, hi = v->max_pixels;
    const int64_t CAP = (int64_t)KILN_VL_MAX_SIDE * KILN_VL_MAX_SIDE;
    if ((st = kiln_json_get_obj(o, what, "size", 0, &size))) goto done;
    if (size) {
        char swhat[760];
        snprintf(swhat, sizeof swhat, "%s: size", what);
        if ((st = kiln_json_get_i64(size, swhat, "shortest_edge", 1, 1, CAP, &lo)) ||
            (st = kiln_json_get_i64(size, swhat, "longest_edge", 1, 1, CAP, &hi)))
            goto done;
    } else if ((st = kiln_json_get_i64(o, what, "min_pixels", 0, 1, CAP, &lo)) ||
               (st = kiln_json_get_i64(o, what, "max_pixels", 0, 1, CAP, &hi)))
        goto done;
    if (lo > hi) {
        st = kiln_error(KILN_ERR_FORMAT,
                        "%s: the pixel floor %lld (size.shortest_edge) is above the cap %lld "
                        "(size.longest_edge)",
                        what, (long long)lo, (long long)hi);
        goto done;
    }
    v->min_pixels = lo, v->max_pixels = hi;
    double rescale = v->rescale;
    if ((st = kiln_json_get_num(o, what, "rescale_factor", 0, &rescale)) ||
        (st = get_rgb(o, what, "image_mean", 0, v->mean)) ||
        (st = get_rgb(o, what, "image_std", 1, v->std)) ||
        (st = must_be_true(o, what, "do_resize")) || (st = must_be_true(o, what, "do_rescale")) ||
        (st = must_be_true(o, what, "do_normalize")) ||
        (st = must_be_true(o, what, "do_convert_rgb")))
        goto done;
    if (!(rescale > 0)) {
        st = kiln_error(KILN_ERR_FORMAT, "%s: key 'rescale_factor' should be > 0", what);
        goto done;
    }
    v->rescale = (float)rescale;
    static const char *const known[] = {"patch_size",
                                        "merge_size",
                                        "temporal_patch_size",
                                        "resample",
                                        "size",
                                        "min_pixels",
                                        "max_pixels",
                                        "rescale_factor",
                                        "image_mean",
                                        "image_std",
                                        "do_resize",
                                        "do_rescale",
                                        "do_normalize",
                                        "do_convert_rgb",
                                        "processor_class",
                                        "image_processor_type",
                                        "data_format",
                                        "input_data_format",
                                        "return_tensors",
                                        "device",
                                        "disable_grouping"};
    st = only_known_keys(o, what, known, sizeof known / sizeof *known,
                         "the Qwen3-VL image processor");
done:
    jfile_close(&f);
    return st;
}

static kiln_status read_config(const jfile *f, kiln_llama_config *c, float **freqs) {
    const kiln_json *o = f->doc.root, *root = o;
    const char *what = f->what;
    char twhat[640], vwhat[640];
    const kiln_json *archs;
    kiln_status st = kiln_json_get_arr(o, what, "architectures", 1, &archs);
    if (st) return st;
    if (archs->len == 0 || archs->items[0].type != KILN_JSON_STRING)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: key 'architectures' should be a non-empty array of strings", what);
    const char *arch = archs->items[0].s;
    memset(c, 0, sizeof *c);
    if (!strcmp(arch, "LlamaForCausalLM"))
        snprintf(c->arch, sizeof c->arch, "llama");
    else if (!strcmp(arch, "Qwen2ForCausalLM"))
        snprintf(c->arch, sizeof c->arch, "qwen2");
    else if (!strcmp(arch, "Qwen3ForCausalLM"))
        snprintf(c->arch, sizeof c->arch, "qwen3");
    else if (!strcmp(arch, "Qwen3VLForConditionalGeneration"))
        snprintf(c->arch, sizeof c->arch, "qwen3vl");
    else
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: architecture '%.100s' is not one Kiln builds (LlamaForCausalLM, "
                          "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3VLForConditionalGeneration)",
                          what, arch);
    int is_qwen2 = !strcmp(c->arch, "qwen2"), is_vl = !strcmp(c->arch, "qwen3vl");
    int is_qwen3 = !strcmp(c->arch, "qwen3") || is_vl;
    if (is_vl) { /* the text model's keys live in text_config */
        const kiln_json *vc;
        if ((st = kiln_json_get_obj(root, what, "text_config", 1, &o)) ||
            (st = kiln_json_get_obj(root, what, "vision_config", 1, &vc)))
            return st;
        snprintf(twhat, sizeof twhat, "%s: text_config", f->what);
        snprintf(vwhat, sizeof vwhat, "%s: vision_config", f->what);
        what = twhat;
        if ((st = read_vision(vc, vwhat, &c->vision))) return st;
        /* the transformers defaults are Qwen3-VL's own ids */
        kiln_vision_config *v = &c->vision;
        v->image_token = 151655, v->vision_start = 151652, v->vision_end = 151653;
        const char *top = f->what;
        if ((st = get_int(root, top, "image_token_id", 0, 0, INT32_MAX, &v->image_token)) ||
            (st = get_int(root, top, "vision_start_token_id", 0, 0, INT32_MAX, &v->vision_start)) ||
            (st = get_int(root, top, "vision_end_token_id", 0, 0, INT32_MAX, &v->vision_end)))
            return st;
    }

    const int MAX = 1 << 30;
    if ((st = get_int(o, what, "hidden_size", 1, 1, MAX, &c->n_embd)) ||
        (st = get_int(o, what, "intermediate_size", 1, 1, MAX, &c->n_ff)) ||
        (st = get_int(o, what, "num_hidden_layers", 1, 1, MAX, &c->n_layer)) ||
        (st = get_int(o, what, "num_attention_heads", 1, 1, MAX, &c->n_head)) ||
        (st = get_int(o, what, "vocab_size", 1, 1, MAX, &c->n_vocab)))
        return st;
    c->n_head_kv = c->n_head;
    c->head_dim = c->n_embd / c->n_head;
    c->n_ctx_train = is_qwen2 || is_qwen3 ? 32768 : 2048; /* the transformers defaults */
    if ((st = get_int(o, what, "num_key_value_heads", 0, 1, MAX, &c->n_head_kv)) ||
        (st = get_int(o, what, "head_dim", 0, 1, MAX, &c->head_dim)) ||
        (st = get_int(o, what, "max_position_embeddings", 0, 1, MAX, &c->n_ctx_train)))
        return st;
    double eps = 1e-6, theta = 10000.0;
    if ((st = kiln_json_get_num(o, what, "rms_norm_eps", 0, &eps))) return st;
    c->norm_eps = (float)eps;

    /* What the model computes that Kiln's graph does not. */
    const char *act = "silu";
    if ((st = kiln_json_get_str(o, what, "hidden_act", 0, &act, NULL))) return st;
    if (strcmp(act, "silu"))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: key 'hidden_act' is '%.40s'; Kiln builds SiLU-gated MLPs", what,
                          act);
    const kiln_json *qc = kiln_json_get(o, "quantization_config");
    if (qc && qc->type != KILN_JSON_NULL)
        return kiln_error(
            KILN_ERR_UNSUPPORTED,
            "%s: key 'quantization_config' is set: a pre-quantized checkpoint (GPTQ, AWQ, "
            "FP8, ...), which Kiln does not read; use the F32/F16/BF16 weights",
            what);
    if ((st = must_be_false(o, what, "mlp_bias", "biases in the MLP")) ||
        (st = must_be_false(o, what, "use_sliding_window", "sliding-window attention")))
        return st;
    if (!is_qwen2 &&
        (st = must_be_false(o, what, "attention_bias", "biases on q, k, v and o_proj")))
        return st;
    const kiln_json *lt = NULL;
    if ((st = kiln_json_get_arr(o, what, "layer_types", 0, &lt))) return st;
    for (size_t i = 0; lt && i < lt->len; i++)
        if (lt->items[i].type != KILN_JSON_STRING || strcmp(lt->items[i].s, "full_attention"))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "%s: key 'layer_types' entry %zu is not \"full_attention\"", what, i);
    int tie = 0;
    if ((st = kiln_json_get_bool(o, what, "tie_word_embeddings", 0, &tie)) ||
        (is_vl && (st = kiln_json_get_bool(root, f->what, "tie_word_embeddings", 0, &tie))))
        return st;
    c->tied_output = tie;

    /* Rope: transformers 4 writes rope_theta and rope_scaling at the top;
     * transformers 5 writes both inside rope_parameters. */
    char rwhat[700];
    const kiln_json *rs = NULL, *rp = NULL;
    if ((st = kiln_json_get_num(o, what, "rope_theta", 0, &theta)) ||
        (st = kiln_json_get_obj(o, what, "rope_scaling", 0, &rs)) ||
        (st = kiln_json_get_obj(o, what, "rope_parameters", 0, &rp)))
        return st;
    const char *rkey = rs ? "rope_scaling" : "rope_parameters";
    if (!rs) rs = rp;
    snprintf(rwhat, sizeof rwhat, "%s: %s", what, rkey);
    if (rp && (st = kiln_json_get_num(rp, rwhat, "rope_theta", 0, &theta))) return st;
    c->rope_theta = (float)theta;
    c->rope_mode = KILN_ROPE_NEOX;
    c->qkv_bias = is_qwen2;
    c->qk_norm = is_qwen3;
    *freqs = NULL;
    if (is_vl && !rs)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: no 'rope_parameters' (or 'rope_scaling') with the mrope_section",
                          what);
    if (rs) {
        const char *type = NULL;
        if ((st = kiln_json_get_str(rs, rwhat, "rope_type", 0, &type, NULL))) return st;
        if (!type && (st = kiln_json_get_str(rs, rwhat, "type", 0, &type, NULL))) return st;
        if (!type)
            return kiln_error(KILN_ERR_FORMAT, "%s: key '%s' has no 'rope_type' (or 'type')", what,
                              rkey);
        if (!strcmp(type, "llama3")) {
            /* A nonsense theta fails kiln_llama_check below; guard pow() here. */
            if (!(theta > 0) || !isfinite(theta))
                return kiln_error(KILN_ERR_FORMAT, "%s: rope_theta %g must be positive", what,
                                  theta);
            if (c->head_dim < 2 || c->head_dim > 4096 || c->head_dim % 2)
                return kiln_error(KILN_ERR_FORMAT, "%s: head size %d must be even and at most 4096",
                                  what, c->head_dim);
            if ((st = llama3_factors(rs, rwhat, c->rope_theta, c->head_dim, freqs))) return st;
            c->rope_freqs = 1;
        } else if (!strcmp(type, "default") && is_vl) {
            const kiln_json *sec;
            int inter = 0;
            if ((st = kiln_json_get_arr(rs, rwhat, "mrope_section", 1, &sec)) ||
                (st = kiln_json_get_bool(rs, rwhat, "mrope_interleaved", 0, &inter)))
                return st;
            if (!inter)
                return kiln_error(KILN_ERR_UNSUPPORTED,
                                  "%s: key 'mrope_interleaved' is false: Kiln builds Qwen3-VL's "
                                  "interleaved M-RoPE",
                                  rwhat);
            if (sec->len != 3)
                return kiln_error(KILN_ERR_FORMAT, "%s: key 'mrope_section' must list 3 counts",
                                  rwhat);
            for (int i = 0; i < 3; i++) {
                const kiln_json *e = &sec->items[i];
                if (e->type != KILN_JSON_NUMBER || !e->is_int || e->i < 0 || e->i > 4096)
                    return kiln_error(KILN_ERR_FORMAT,
                                      "%s: key 'mrope_section' entry %d is not a count", rwhat, i);
                c->mrope_section[i] = (int)e->i;
            }
            c->mrope = 1;
        } else if (strcmp(type, "default")) {
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "%s: key '%s.rope_type' is '%.40s'; Kiln supports 'default' and "
                              "'llama3' rope",
                              what, rkey, type);
        }
    }
    return KILN_OK;
}

/* End-of-generation ids: generation_config.json's eos_token_id, else
 * config.json's (an integer or a list of them). */
static kiln_status end_tokens(kiln_module *m, const jfile *gen, const jfile *cfg, int n_vocab) {
    const jfile *src = NULL;
    const kiln_json *v = NULL;
    if (gen->found && (v = kiln_json_get(gen->doc.root, "eos_token_id")) &&
        v->type != KILN_JSON_NULL)
        src = gen;
    else if ((v = kiln_json_get(cfg->doc.root, "eos_token_id")) && v->type != KILN_JSON_NULL)
        src = cfg;
    if (!src) return KILN_OK;
    size_t n = v->type == KILN_JSON_ARRAY ? v->len : 1;
    if (n == 0) return KILN_OK;
    if (n > 1024)
        return kiln_error(KILN_ERR_FORMAT, "%s: key 'eos_token_id' lists %zu ids", src->what, n);
    int64_t ids[1024];
    for (size_t i = 0; i < n; i++) {
        const kiln_json *e = v->type == KILN_JSON_ARRAY ? &v->items[i] : v;
        if (e->type != KILN_JSON_NUMBER || !e->is_int)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: key 'eos_token_id' should be an integer or a list of integers, "
                              "found %s (byte %zu)",
                              src->what, kiln_json_type_name(e->type), e->offset);
        if (e->i < 0 || e->i >= n_vocab)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: key 'eos_token_id' holds %lld, outside the vocabulary of %d",
                              src->what, (long long)e->i, n_vocab);
        ids[i] = e->i;
    }
    return kiln_meta_set_int_array(m, "llm.end_token_ids", ids, (uint32_t)n);
}

/* Tokenizer files as found, and the chat template: tokenizer_config.json's
 * chat_template (a string, or a list of {name, template} whose "default"
 * is taken), else chat_template.jinja, else chat_template.json's
 * chat_template (where processor-era repositories, Qwen-VL's among them,
 * keep it). */
static kiln_status tokenizer_meta(kiln_module *m, const char *dir) {
    jfile tj, tc, jinja, cj;
    kiln_status st;
    memset(&tc, 0, sizeof tc);
    memset(&jinja, 0, sizeof jinja);
    memset(&cj, 0, sizeof cj);
    if ((st = jfile_open(&tj, dir, "tokenizer.json", 0, 1))) goto done;
    if (tj.found && (st = store_file(m, &tj, "hf.tokenizer_json"))) goto done;
    if ((st = jfile_open(&tc, dir, "tokenizer_config.json", 0, 1))) goto done;
    const char *tmpl = NULL;
    if (tc.found) {
        if ((st = store_file(m, &tc, "hf.tokenizer_config_json"))) goto done;
        const kiln_json *ct = kiln_json_get(tc.doc.root, "chat_template");
        if (ct && ct->type == KILN_JSON_STRING) {
            tmpl = ct->s;
        } else if (ct && ct->type == KILN_JSON_ARRAY) {
            for (size_t i = 0; i < ct->len && !tmpl; i++) {
                const char *nm = NULL, *t = NULL;
                if ((st = kiln_json_get_str(&ct->items[i], tc.what, "name", 0, &nm, NULL)) ||
                    (st = kiln_json_get_str(&ct->items[i], tc.what, "template", 0, &t, NULL)))
                    goto done;
                if (nm && t && !strcmp(nm, "default")) tmpl = t;
            }
        } else if (ct && ct->type != KILN_JSON_NULL) {
            st = kiln_error(
                KILN_ERR_FORMAT,
                "%s: key 'chat_template' should be a string or a list of {name, template}, "
                "found %s",
                tc.what, kiln_json_type_name(ct->type));
            goto done;
        }
    }
    if (tmpl) {
        st = kiln_meta_set_str(m, "tokenizer.chat_template", tmpl);
        goto done;
    }
    if ((st = jfile_open(&jinja, dir, "chat_template.jinja", 0, 0))) goto done;
    if (jinja.found) {
        st = store_file(m, &jinja, "tokenizer.chat_template");
        goto done;
    }
    if ((st = jfile_open(&cj, dir, "chat_template.json", 0, 1)) || !cj.found) goto done;
    size_t len = 0;
    if ((st = kiln_json_get_str(cj.doc.root, cj.what, "chat_template", 1, &tmpl, &len))) goto done;
    if (strlen(tmpl) != len)
        st = kiln_error(KILN_ERR_FORMAT, "%s: key 'chat_template' holds a NUL character", cj.what);
    else
        st = kiln_meta_set_str(m, "tokenizer.chat_template", tmpl);
done:
    jfile_close(&tj);
    jfile_close(&tc);
    jfile_close(&jinja);
    jfile_close(&cj);
    return st;
}

/* ---- import ---------------------------------------------------------------- */

kiln_status kiln_hf_import(kiln_import *imp, const char *dir, kiln_module *m) {
    jfile cfgf, gen;
    kiln_safetensors sf;
    float *freqs = NULL;
    memset(&gen, 0, sizeof gen);
    memset(&sf, 0, sizeof sf);
    kiln_llama_config *c = &imp->cfg;
    kiln_status st = jfile_open(&cfgf, dir, "config.json", 1, 1);
    if (st || (st = read_config(&cfgf, c, &freqs))) goto done;
    if ((st = kiln_safetensors_open_dir(imp, dir, &sf))) goto done;
    imp->format = "hf";

    /* A tied model has no lm_head.weight; an untied one saved without it is
     * read as tied, as llama.cpp's converter does. */
    if (!c->tied_output && !kiln_safetensors_find(&sf, "lm_head.weight")) c->tied_output = 1;
    /* Shapes are checked below against these before any cast can bite. */
    if ((st = kiln_llama_check(c, cfgf.what))) goto done;
    if (c->vision.depth && (st = read_processor(dir, &c->vision))) goto done;

    for (size_t i = 0; i < sf.n_tensors; i++) {
        const kiln_st_tensor *t = &sf.tensors[i];
        int layer, bad_layer;
        const char *tname = t->name;
        char alt[KILN_NAME_MAX];
        if (c->vision.depth) { /* Qwen3-VL: model.visual.*, model.language_model.* */
            if (!strncmp(tname, "model.visual.", 13)) {
                if ((st = add_vision_tensor(m, t, &c->vision, sf.files[t->file]))) goto done;
                continue;
            }
            if (!strncmp(tname, "model.language_model.", 21)) {
                snprintf(alt, sizeof alt, "model.%s", tname + 21);
                tname = alt;
            }
        }
        const tensor_rule *r = rule_for(tname, c->n_layer, &layer, &bad_layer);
        if (!r && strstr(t->name, "rotary_emb.inv_freq"))
            continue;                                              /* old checkpoints: recomputed */
        if (r && r->when == IF_UNTIED && c->tied_output) continue; /* lm_head of a tied model */
        if (!r || !needed(c, r->when)) {
            st = kiln_error(KILN_ERR_UNSUPPORTED, "'%s': tensor '%s' is not one Kiln maps for %s%s",
                            sf.files[t->file], t->name, c->arch,
                            bad_layer ? " (its layer is past num_hidden_layers)"
                            : r       ? " with this config.json (it would be dropped)"
                                      : "");
            goto done;
        }
        if ((st = add_tensor(m, &sf, t, r, layer, c))) goto done;
    }
    /* Every weight the config needs, named as the checkpoint names it. */
    for (int l = -1; l < c->n_layer; l++) {
        const tensor_rule *rules = l < 0 ? GLOBAL : LAYER;
        size_t n = l < 0 ? N_GLOBAL : N_LAYER;
        for (size_t i = 0; i < n; i++) {
            char name[KILN_NAME_MAX];
            snprintf(name, sizeof name, rules[i].kiln, l);
            if (!needed(c, rules[i].when) || kiln_module_find_const(m, name) >= 0) continue;
            if (l < 0)
                st = kiln_error(KILN_ERR_FORMAT, "'%s': tensor '%s' is missing", dir, rules[i].hf);
            else
                st = kiln_error(KILN_ERR_FORMAT, "'%s': tensor 'model.layers.%d.%s' is missing",
                                dir, l, rules[i].hf);
            goto done;
        }
    }
    if (c->rope_freqs) {
        int64_t ne[1] = {c->head_dim / 2};
        float *f = freqs;
        freqs = NULL;
        if (kiln_module_add_const_owned(m, "rope_freqs.weight", KILN_F32, 1, ne, f) < 0) {
            st = kiln_error_wrap(KILN_ERR_NOMEM, "'%s'", dir);
            goto done;
        }
    }
    char src[700];
    snprintf(src, sizeof src, "'%s'", dir);
    if ((st = kiln_llama_check_weights(m, c, src))) goto done;

    if ((st = jfile_open(&gen, dir, "generation_config.json", 0, 1))) goto done;
    if ((st = end_tokens(m, &gen, &cfgf, c->n_vocab))) goto done;
    st = tokenizer_meta(m, dir);
done:
    kiln_free(freqs);
    kiln_safetensors_free(&sf);
    jfile_close(&gen);
    jfile_close(&cfgf);
    return st;
}
