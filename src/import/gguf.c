/* gguf.c: GGUF files. The container (header, typed metadata, tensor infos,
 * aligned data) is parsed with every count and offset checked; the import
 * maps the architectures Kiln knows (llama, qwen2, qwen3) onto the Llama
 * family graph, keeps quantized blocks as they are, and stores all
 * metadata (tokenizer.ggml.*, chat template, ...) in the program as found. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "import/gguf.h"
#include "import/import.h"
#include "ir/ops.h"

#define MAX_KEY 65536
#define MAX_STRING ((uint64_t)1 << 30)

const char *kiln_ggml_type_name(uint32_t t) {
    static const char *names[] = {
        "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
        "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
        "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
    return t < sizeof names / sizeof *names ? names[t] : "unknown";
}

static int ggml_to_dtype(uint32_t t) {
    switch (t) {
    case 0:
        return KILN_F32;
    case 1:
        return KILN_F16;
    case 2:
        return KILN_Q4_0;
    case 3:
        return KILN_Q4_1;
    case 8:
        return KILN_Q8_0;
    case 12:
        return KILN_Q4_K;
    case 14:
        return KILN_Q6_K;
    case 30:
        return KILN_BF16;
    }
    return -1;
}

static uint64_t scalar_size(uint32_t t) {
    switch (t) {
    case KILN_GGUF_U8:
    case KILN_GGUF_I8:
    case KILN_GGUF_BOOL:
        return 1;
    case KILN_GGUF_U16:
    case KILN_GGUF_I16:
        return 2;
    case KILN_GGUF_U32:
    case KILN_GGUF_I32:
    case KILN_GGUF_F32:
        return 4;
    case KILN_GGUF_U64:
    case KILN_GGUF_I64:
    case KILN_GGUF_F64:
        return 8;
    }
    return 0;
}

/* Skips one string (u64 length + bytes). */
static void skip_string(kiln_rbuf *r, const char *field) {
    uint64_t n = kiln_rbuf_u64(r, field);
    if (r->failed) return;
    if (n > MAX_STRING || n > r->len - r->pos) {
        kiln_rbuf_fail(r, "string '%s' of %llu bytes runs past the end of the file", field,
                       (unsigned long long)n);
        return;
    }
    r->pos += (size_t)n;
}

static char *read_string(kiln_rbuf *r, const char *field, uint64_t max) {
    uint64_t n = kiln_rbuf_u64(r, field);
    if (r->failed) return NULL;
    if (n > max || n > r->len - r->pos) {
        kiln_rbuf_fail(r, "string '%s' has length %llu (limit %llu, %zu bytes left)", field,
                       (unsigned long long)n, (unsigned long long)max, r->len - r->pos);
        return NULL;
    }
    const char *p = kiln_rbuf_bytes(r, field, (size_t)n);
    if (memchr(p, 0, (size_t)n)) {
        kiln_rbuf_fail(r, "string '%s' contains a NUL byte", field);
        return NULL;
    }
    char *s = kiln_strndup(p, (size_t)n);
    if (!s) kiln_rbuf_fail(r, "out of memory");
    return s;
}

static void read_value(kiln_rbuf *r, kiln_gguf_kv *kv) {
    size_t start = r->pos;
    if (kv->type == KILN_GGUF_STRING) {
        skip_string(r, kv->key);
    } else if (kv->type == KILN_GGUF_ARRAY) {
        kv->elem_type = kiln_rbuf_u32(r, kv->key);
        kv->n = kiln_rbuf_u64(r, kv->key);
        if (r->failed) return;
        start = r->pos;
        if (kv->elem_type == KILN_GGUF_STRING) {
            if (kv->n > r->len - r->pos) { /* every string takes at least 8 bytes */
                kiln_rbuf_fail(r, "array '%s' claims %llu strings", kv->key,
                               (unsigned long long)kv->n);
                return;
            }
            for (uint64_t i = 0; i < kv->n && !r->failed; i++)
                skip_string(r, kv->key);
        } else {
            uint64_t es = scalar_size(kv->elem_type), total;
            if (!es) {
                kiln_rbuf_fail(r,
                               "array '%s' has element type %u (nested arrays are not GGUF "
                               "metadata Kiln reads)",
                               kv->key, kv->elem_type);
                return;
            }
            if (!kiln_mul_ok(es, kv->n, &total) || total > r->len - r->pos) {
                kiln_rbuf_fail(r, "array '%s' of %llu elements runs past the end of the file",
                               kv->key, (unsigned long long)kv->n);
                return;
            }
            r->pos += (size_t)total;
        }
    } else {
        uint64_t es = scalar_size(kv->type);
        if (!es) {
            kiln_rbuf_fail(r, "metadata key '%s' has unknown value type %u", kv->key, kv->type);
            return;
        }
        kiln_rbuf_bytes(r, kv->key, (size_t)es);
    }
    if (!r->failed) {
        kv->raw = r->data + start;
        kv->raw_len = r->pos - start;
    }
}

void kiln_gguf_free(kiln_gguf *g) {
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++)
        kiln_free(g->kv[i].key);
    for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++)
        kiln_free(g->tensors[i].name);
    kiln_free(g->kv);
    kiln_free(g->tensors);
    memset(g, 0, sizeof *g);
}

kiln_status kiln_gguf_parse(const uint8_t *data, uint64_t size, const char *path, kiln_gguf *g) {
    memset(g, 0, sizeof *g);
    char what[600];
    snprintf(what, sizeof what, "'%s'", kiln_basename(path));
    kiln_rbuf r;
    kiln_rbuf_init(&r, data, (size_t)size, 0, what);
    const char *magic = kiln_rbuf_bytes(&r, "magic", 4);
    if (magic && memcmp(magic, "GGUF", 4) != 0) {
        r.pos = 0;
        kiln_rbuf_fail(&r, "not a GGUF file (magic is not 'GGUF')");
    }
    g->version = kiln_rbuf_u32(&r, "version");
    if (!r.failed && g->version != 2 && g->version != 3) {
        r.pos -= 4;
        kiln_rbuf_fail(&r, "GGUF version %u; Kiln reads versions 2 and 3", g->version);
    }
    uint64_t nt = kiln_rbuf_u64(&r, "tensor_count"), nkv = kiln_rbuf_u64(&r, "metadata_kv_count");
    if (r.failed) return kiln_rbuf_status(&r);
    /* Each key/value takes at least 12 bytes, each tensor info at least 24. */
    if (nkv > (r.len - r.pos) / 12 || nt > (r.len - r.pos) / 24) {
        kiln_rbuf_fail(
            &r, "header claims %llu metadata keys and %llu tensors, more than the file can hold",
            (unsigned long long)nkv, (unsigned long long)nt);
        return kiln_rbuf_status(&r);
    }
    if (!(g->kv = kiln_calloc((size_t)nkv + 1, sizeof *g->kv)) ||
        !(g->tensors = kiln_calloc((size_t)nt + 1, sizeof *g->tensors)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory reading %s", what);
    for (uint64_t i = 0; i < nkv; i++) {
        kiln_gguf_kv *kv = &g->kv[i];
        if (!(kv->key = read_string(&r, "metadata key", MAX_KEY))) return kiln_rbuf_status(&r);
        g->n_kv++;
        kv->type = kiln_rbuf_u32(&r, kv->key);
        read_value(&r, kv);
        if (r.failed) return kiln_rbuf_status(&r);
    }
    int64_t align = 32;
    kiln_status st = kiln_gguf_get_int(g, path, "general.alignment", 0, &align);
    if (st) return st;
    if (align < 1 || align > 65536 || (align & (align - 1)))
        return kiln_error(KILN_ERR_FORMAT, "%s: general.alignment is %lld, expected a power of two",
                          what, (long long)align);
    g->alignment = (uint64_t)align;
    for (uint64_t i = 0; i < nt; i++) {
        kiln_gguf_tensor *t = &g->tensors[i];
        if (!(t->name = read_string(&r, "tensor name", MAX_KEY))) return kiln_rbuf_status(&r);
        g->n_tensors++;
        uint32_t nd = kiln_rbuf_u32(&r, t->name);
        if (!r.failed && (nd < 1 || nd > 4))
            kiln_rbuf_fail(&r, "tensor '%s' has %u dims (1..4)", t->name, nd);
        for (uint32_t d = 0; d < nd && !r.failed; d++) {
            uint64_t n = kiln_rbuf_u64(&r, t->name);
            if (!r.failed && (n == 0 || n > ((uint64_t)1 << 40)))
                kiln_rbuf_fail(&r, "tensor '%s' dim %u is %llu", t->name, d, (unsigned long long)n);
            t->ne[d] = (int64_t)n;
        }
        t->ndim = (int)nd;
        t->ggml_type = kiln_rbuf_u32(&r, t->name);
        t->offset = kiln_rbuf_u64(&r, t->name);
        if (r.failed) return kiln_rbuf_status(&r);
        t->dtype = ggml_to_dtype(t->ggml_type);
        if (t->offset % g->alignment)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: tensor '%s' offset %llu is not a multiple of the alignment %llu",
                              what, t->name, (unsigned long long)t->offset,
                              (unsigned long long)g->alignment);
    }
    g->data_offset = kiln_align_up(r.pos, g->alignment);
    /* A file with no tensors (llama.cpp's vocabulary-only GGUFs) may end
     * before the padding that would start its empty data section. */
    if (nt == 0 && g->data_offset > size) g->data_offset = size;
    if (g->data_offset > size)
        return kiln_error(KILN_ERR_FORMAT,
                          "%s: data section starts at %llu, past the end of the file (%llu bytes)",
                          what, (unsigned long long)g->data_offset, (unsigned long long)size);
    for (uint64_t i = 0; i < nt; i++) {
        kiln_gguf_tensor *t = &g->tensors[i];
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(g->tensors[j].name, t->name))
                return kiln_error(KILN_ERR_FORMAT, "%s: tensor '%s' appears twice", what, t->name);
        if (t->dtype < 0) continue; /* an error only if the model uses it */
        int64_t ne_rev[4];
        for (int d = 0; d < t->ndim; d++)
            ne_rev[d] = t->ne[t->ndim - 1 - d];
        t->nbytes = kiln_shape_bytes((kiln_dtype)t->dtype, t->ndim, ne_rev);
        if (!t->nbytes)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: tensor '%s' of type %s has rows of %lld, not whole blocks of %d",
                              what, t->name, kiln_ggml_type_name(t->ggml_type), (long long)t->ne[0],
                              kiln_dtype_block((kiln_dtype)t->dtype));
        uint64_t avail = size - g->data_offset;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return kiln_error(KILN_ERR_FORMAT,
                              "%s: tensor '%s': offset %llu + size %llu exceeds the data section "
                              "of %llu bytes (truncated file?)",
                              what, t->name, (unsigned long long)(g->data_offset + t->offset),
                              (unsigned long long)t->nbytes, (unsigned long long)size);
        t->data = data + g->data_offset + t->offset;
    }
    return KILN_OK;
}

const kiln_gguf_kv *kiln_gguf_find(const kiln_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

static kiln_status missing(const char *path, const char *key) {
    return kiln_error(KILN_ERR_FORMAT, "'%s': metadata key '%s' is missing", kiln_basename(path),
                      key);
}

static kiln_status wrong_type(const char *path, const char *key, const char *want, uint32_t type) {
    return kiln_error(KILN_ERR_FORMAT, "'%s': metadata key '%s' should be %s, found value type %u",
                      kiln_basename(path), key, want, type);
}

kiln_status kiln_gguf_get_int(const kiln_gguf *g, const char *path, const char *key, int required,
                              int64_t *out) {
    const kiln_gguf_kv *kv = kiln_gguf_find(g, key);
    if (!kv) return required ? missing(path, key) : KILN_OK;
    const uint8_t *p = kv->raw;
    switch (kv->type) {
    case KILN_GGUF_U8:
        *out = p[0];
        return KILN_OK;
    case KILN_GGUF_I8:
        *out = (int8_t)p[0];
        return KILN_OK;
    case KILN_GGUF_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return KILN_OK;
    }
    case KILN_GGUF_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return KILN_OK;
    }
    case KILN_GGUF_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return KILN_OK;
    }
    case KILN_GGUF_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return KILN_OK;
    }
    case KILN_GGUF_BOOL:
        *out = p[0] != 0;
        return KILN_OK;
    case KILN_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > INT64_MAX) return wrong_type(path, key, "an integer below 2^63", kv->type);
        *out = (int64_t)v;
        return KILN_OK;
    }
    case KILN_GGUF_I64:
        memcpy(out, p, 8);
        return KILN_OK;
    }
    return wrong_type(path, key, "an integer", kv->type);
}

kiln_status kiln_gguf_get_float(const kiln_gguf *g, const char *path, const char *key, int required,
                                double *out) {
    const kiln_gguf_kv *kv = kiln_gguf_find(g, key);
    if (!kv) return required ? missing(path, key) : KILN_OK;
    if (kv->type == KILN_GGUF_F32) {
        float f;
        memcpy(&f, kv->raw, 4);
        *out = f;
    } else if (kv->type == KILN_GGUF_F64) {
        memcpy(out, kv->raw, 8);
    } else {
        int64_t i;
        if (kiln_gguf_get_int(g, path, key, 1, &i))
            return wrong_type(path, key, "a number", kv->type);
        *out = (double)i;
    }
    if (!isfinite(*out)) return wrong_type(path, key, "a finite number", kv->type);
    return KILN_OK;
}

kiln_status kiln_gguf_get_str(const kiln_gguf *g, const char *path, const char *key, int required,
                              const char **s, uint64_t *len) {
    const kiln_gguf_kv *kv = kiln_gguf_find(g, key);
    if (!kv) return required ? missing(path, key) : KILN_OK;
    if (kv->type != KILN_GGUF_STRING) return wrong_type(path, key, "a string", kv->type);
    memcpy(len, kv->raw, 8);
    *s = (const char *)kv->raw + 8;
    return KILN_OK;
}

/* ---- import -------------------------------------------------------------- */

kiln_status kiln_gguf_store_meta(kiln_module *m, const kiln_gguf *g, const char *path,
                                 const kiln_gguf_kv *kv) {
    const char *key = kv->key;
    if (kv->type == KILN_GGUF_STRING) {
        const char *s;
        uint64_t n;
        kiln_gguf_get_str(g, path, kv->key, 1, &s, &n);
        char *copy = kiln_strndup(s, (size_t)n);
        if (!copy) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        kiln_status st = kiln_meta_set_str(m, key, copy);
        kiln_free(copy);
        return st;
    }
    if (kv->type == KILN_GGUF_F32 || kv->type == KILN_GGUF_F64) {
        double f;
        kiln_status st = kiln_gguf_get_float(g, path, kv->key, 1, &f);
        return st ? st : kiln_meta_set_float(m, key, f);
    }
    if (kv->type != KILN_GGUF_ARRAY) {
        int64_t i;
        kiln_status st = kiln_gguf_get_int(g, path, kv->key, 1, &i);
        return st ? st : kiln_meta_set_int(m, key, i);
    }
    const uint8_t *p = kv->raw; /* the first element */
    if (kv->elem_type == KILN_GGUF_STRING) {
        char **sa = kiln_calloc((size_t)kv->n + 1, sizeof *sa);
        if (!sa) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (uint64_t i = 0; i < kv->n; i++) {
            uint64_t n;
            memcpy(&n, p, 8);
            sa[i] =
                kiln_strndup((const char *)p + 8, (size_t)n); /* may hold NUL bytes: cut there */
            p += 8 + n;
            if (!sa[i]) {
                for (uint64_t j = 0; j < i; j++)
                    kiln_free(sa[j]);
                kiln_free(sa);
                return kiln_error(KILN_ERR_NOMEM, "out of memory");
            }
        }
        return kiln_meta_set_str_array_owned(m, key, sa, (uint32_t)kv->n);
    }
    if (kv->elem_type == KILN_GGUF_F32 || kv->elem_type == KILN_GGUF_F64) {
        double *fa = kiln_malloc(sizeof(double) * ((size_t)kv->n + 1));
        if (!fa) return kiln_error(KILN_ERR_NOMEM, "out of memory");
        for (uint64_t i = 0; i < kv->n; i++) {
            if (kv->elem_type == KILN_GGUF_F32) {
                float f;
                memcpy(&f, p + 4 * i, 4);
                fa[i] = f;
            } else {
                memcpy(&fa[i], p + 8 * i, 8);
            }
        }
        return kiln_meta_set_float_array_owned(m, key, fa, (uint32_t)kv->n);
    }
    int64_t *ia = kiln_malloc(sizeof(int64_t) * ((size_t)kv->n + 1));
    if (!ia) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    uint64_t es = scalar_size(kv->elem_type);
    for (uint64_t i = 0; i < kv->n; i++) {
        const uint8_t *q = p + es * i;
        switch (kv->elem_type) {
        case KILN_GGUF_U8:
        case KILN_GGUF_BOOL:
            ia[i] = q[0];
            break;
        case KILN_GGUF_I8:
            ia[i] = (int8_t)q[0];
            break;
        case KILN_GGUF_U16: {
            uint16_t v;
            memcpy(&v, q, 2);
            ia[i] = v;
            break;
        }
        case KILN_GGUF_I16: {
            int16_t v;
            memcpy(&v, q, 2);
            ia[i] = v;
            break;
        }
        case KILN_GGUF_U32: {
            uint32_t v;
            memcpy(&v, q, 4);
            ia[i] = v;
            break;
        }
        case KILN_GGUF_I32: {
            int32_t v;
            memcpy(&v, q, 4);
            ia[i] = v;
            break;
        }
        default:
            memcpy(&ia[i], q, 8);
            break;
        }
    }
    return kiln_meta_set_int_array_owned(m, key, ia, (uint32_t)kv->n);
}

kiln_status kiln_gguf_import(kiln_import *imp, const char *path, kiln_module *m) {
    const kiln_file_map *map;
    kiln_status st = kiln_import_map(imp, path, &map);
    if (st) return st;
    kiln_gguf g;
    if ((st = kiln_gguf_parse(map->data, map->size, path, &g))) goto done;
    imp->format = "gguf";
    const char *file = kiln_basename(path);
    const char *arch;
    uint64_t arch_len;
    if ((st = kiln_gguf_get_str(&g, path, "general.architecture", 1, &arch, &arch_len))) goto done;
    kiln_llama_config *c = &imp->cfg;
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%.*s", (int)(arch_len < 31 ? arch_len : 31), arch);
    int is_llama = !strcmp(c->arch, "llama"), is_qwen2 = !strcmp(c->arch, "qwen2"),
        is_qwen3 = !strcmp(c->arch, "qwen3");
    if ((!is_llama && !is_qwen2 && !is_qwen3) || arch_len >= 31) {
        st = kiln_error(KILN_ERR_UNSUPPORTED,
                        "'%s': architecture '%.*s' is not one Kiln builds (llama, qwen2, qwen3)",
                        file, (int)(arch_len > 64 ? 64 : arch_len), arch);
        goto done;
    }
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, c->arch), key)
    int64_t v;
    double f;
    struct {
        const char *suffix;
        int *dst;
        int required;
    } ints[] = {
        {"embedding_length", &c->n_embd, 1},    {"feed_forward_length", &c->n_ff, 1},
        {"block_count", &c->n_layer, 1},        {"attention.head_count", &c->n_head, 1},
        {"context_length", &c->n_ctx_train, 1},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        v = 0;
        snprintf(key, sizeof key, "%s.%s", c->arch, ints[i].suffix);
        if ((st = kiln_gguf_get_int(&g, path, key, ints[i].required, &v))) goto done;
        if (v < 0 || v > (1 << 24)) {
            st = kiln_error(KILN_ERR_FORMAT, "'%s': metadata key '%s' is %lld, out of range", file,
                            key, (long long)v);
            goto done;
        }
        *ints[i].dst = (int)v;
    }
    v = c->n_head;
    if ((st = kiln_gguf_get_int(&g, path, KEY("attention.head_count_kv"), 0, &v))) goto done;
    c->n_head_kv = v > 0 && v <= 4096 ? (int)v : 0;
    v = c->n_head > 0 ? c->n_embd / c->n_head : 0;
    if ((st = kiln_gguf_get_int(&g, path, KEY("attention.key_length"), 0, &v))) goto done;
    c->head_dim = v > 0 && v <= 4096 ? (int)v : 0;
    v = c->head_dim;
    if ((st = kiln_gguf_get_int(&g, path, KEY("rope.dimension_count"), 0, &v))) goto done;
    c->n_rot = v >= 0 && v <= 4096 ? (int)v : -1;
    f = 1e-5;
    if ((st = kiln_gguf_get_float(&g, path, KEY("attention.layer_norm_rms_epsilon"), 0, &f)))
        goto done;
    c->norm_eps = (float)f;
    f = 10000.0;
    if ((st = kiln_gguf_get_float(&g, path, KEY("rope.freq_base"), 0, &f))) goto done;
    c->rope_theta = (float)f;
#undef KEY
    /* GGUF llama stores Q and K permuted for adjacent-pair rope; qwen2/3 are
     * stored as trained and rotate halves. */
    c->rope_mode = is_llama ? KILN_ROPE_ADJACENT : KILN_ROPE_NEOX;
    c->qkv_bias = is_qwen2;
    c->qk_norm = is_qwen3;

    /* Tensors: ggml's ne[0] is the contiguous dim, so shapes reverse. */
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const kiln_gguf_tensor *t = &g.tensors[i];
        if (t->dtype < 0) {
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "'%s': tensor '%s' has type %s, which Kiln does not read "
                            "(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K); requantize it",
                            file, t->name, kiln_ggml_type_name(t->ggml_type));
            goto done;
        }
        int64_t ne[4];
        for (int d = 0; d < t->ndim; d++)
            ne[d] = t->ne[t->ndim - 1 - d];
        if (kiln_module_add_const(m, t->name, (kiln_dtype)t->dtype, t->ndim, ne, t->data) < 0) {
            st = kiln_error_wrap(KILN_ERR_FORMAT, "'%s'", file);
            goto done;
        }
    }
    int emb = kiln_module_find_const(m, "token_embd.weight");
    if (emb < 0) {
        st = kiln_error(KILN_ERR_FORMAT, "'%s': tensor 'token_embd.weight' is missing", file);
        goto done;
    }
    c->n_vocab = (int)m->consts[emb].ne[0];
    c->tied_output = kiln_module_find_const(m, "output.weight") < 0;
    c->rope_freqs = kiln_module_find_const(m, "rope_freqs.weight") >= 0;
    char src[600];
    snprintf(src, sizeof src, "'%s'", file);
    if ((st = kiln_llama_check(c, src)) || (st = kiln_llama_check_weights(m, c, src))) goto done;
    for (uint64_t i = 0; i < g.n_kv; i++)
        if ((st = kiln_gguf_store_meta(m, &g, path, &g.kv[i]))) goto done;
    /* Generation ends at EOS and at the end-of-turn token when there is one. */
    int64_t end[2], n_end = 0, id = -1;
    if ((st = kiln_gguf_get_int(&g, path, "tokenizer.ggml.eos_token_id", 0, &id))) goto done;
    if (id >= 0 && id < c->n_vocab) end[n_end++] = id;
    id = -1;
    if ((st = kiln_gguf_get_int(&g, path, "tokenizer.ggml.eot_token_id", 0, &id))) goto done;
    if (id >= 0 && id < c->n_vocab && (n_end == 0 || end[0] != id)) end[n_end++] = id;
    if (n_end && (st = kiln_meta_set_int_array(m, "llm.end_token_ids", end, (uint32_t)n_end)))
        goto done;
done:
    kiln_gguf_free(&g);
    return st;
}
