/* make_random_vl.c: a Qwen3-VL-2B-Instruct folder with random weights in the
 * published shapes, for the wide oracle test (tests/test_vl_wide.sh) and the
 * benchmarks (bench/vl.sh):
 *
 *   make_random_vl DIR [--text-layers N] [--vision-layers N] [--seed S]
 *
 * makes DIR (when missing) and writes DIR/config.json (the released config,
 * transformers 4's form: rope_theta and rope_scaling at the top of
 * text_config), DIR/preprocessor_config.json (the released image processor)
 * and DIR/model.safetensors in bf16, the released checkpoint's names. With
 * fewer vision layers than the released 24 the DeepStack layers are the
 * first ones (0, 1, ..).
 *
 * Every value is a function of (seed, tensor name, index) alone: element i
 * of tensor NAME is k / 128 with k = the top byte of splitmix64(seed ^
 * fnv1a(NAME) + i) - 128, times a power of two per tensor (matrices about
 * 1/sqrt(fan_in), biases 1/8, embeddings 1/2); norm weights are 1 + k/512
 * rounded down to a multiple of 1/128. Each is exact in bf16, so transformers
 * (float32, scripts/make_vl_fixtures.py) and Kiln read the same numbers. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TENSORS 1024

/* The released Qwen3-VL-2B-Instruct shapes. */
enum {
    HIDDEN = 2048,
    FFN = 6144,
    HEADS = 16,
    KV_HEADS = 8,
    HEAD_DIM = 128,
    VOCAB = 151936,
    TEXT_LAYERS = 28,
    V_HIDDEN = 1024,
    V_FFN = 4096,
    V_HEADS = 16,
    PATCH = 16,
    TEMPORAL = 2,
    MERGE = 2,
    POS_EMBED = 2304,
    V_LAYERS = 24,
};

typedef enum { MATRIX, BIAS, NORM, EMBED } kind;

typedef struct {
    char name[128];
    int64_t shape[5];
    int ndim;
    kind k;
    int fan_in;
    uint64_t offset, bytes;
} tensor;

static tensor g_t[MAX_TENSORS];
static int g_n;

static void add(const char *name, kind k, int ndim, const int64_t *shape) {
    tensor *t = &g_t[g_n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim, t->k = k;
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (uint64_t)(t->shape[d] = shape[d]);
    t->fan_in = (int)(n / (uint64_t)shape[0]);
    t->bytes = n * 2;
}

static void add2(const char *name, kind k, int64_t rows, int64_t cols) {
    int64_t s[2] = {rows, cols};
    add(name, k, 2, s);
}

static void add1(const char *name, kind k, int64_t n) {
    add(name, k, 1, &n);
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* float -> bf16 for values that are exact in bf16 */
static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float value(const tensor *t, uint64_t base, uint64_t i) {
    int k = (int)(splitmix64(base + i) >> 56) - 128;
    switch (t->k) {
    case NORM:
        return 1.0f + (float)(k >> 2) / 128.0f;
    case BIAS:
        return (float)k / 1024.0f;
    case EMBED:
        return (float)k / 256.0f;
    case MATRIX:
        break;
    }
    /* 2^-round(log2(sqrt(fan_in))) */
    float scale = ldexpf(1.0f, -(int)lrint(0.5 * log2((double)t->fan_in)));
    return (float)k / 128.0f * scale;
}

static int write_tensor(FILE *f, const tensor *t, uint64_t seed) {
    static uint16_t buf[1 << 16];
    uint64_t n = t->bytes / 2, base = seed ^ fnv1a(t->name);
    for (uint64_t i = 0; i < n;) {
        size_t m = n - i < (uint64_t)(1 << 16) ? (size_t)(n - i) : (size_t)1 << 16;
        for (size_t j = 0; j < m; j++)
            buf[j] = bf16(value(t, base, i + j));
        if (fwrite(buf, 2, m, f) != m) return -1;
        i += m;
    }
    return 0;
}

static void tensors(int text_layers, int vision_layers, int n_ds) {
    char nm[128];
    add2("model.language_model.embed_tokens.weight", EMBED, VOCAB, HIDDEN);
    add1("model.language_model.norm.weight", NORM, HIDDEN);
    for (int l = 0; l < text_layers; l++) {
#define TL(s) (snprintf(nm, sizeof nm, "model.language_model.layers.%d.%s", l, s), nm)
        add1(TL("input_layernorm.weight"), NORM, HIDDEN);
        add1(TL("post_attention_layernorm.weight"), NORM, HIDDEN);
        add2(TL("self_attn.q_proj.weight"), MATRIX, HEADS * HEAD_DIM, HIDDEN);
        add2(TL("self_attn.k_proj.weight"), MATRIX, KV_HEADS * HEAD_DIM, HIDDEN);
        add2(TL("self_attn.v_proj.weight"), MATRIX, KV_HEADS * HEAD_DIM, HIDDEN);
        add2(TL("self_attn.o_proj.weight"), MATRIX, HIDDEN, HEADS * HEAD_DIM);
        add1(TL("self_attn.q_norm.weight"), NORM, HEAD_DIM);
        add1(TL("self_attn.k_norm.weight"), NORM, HEAD_DIM);
        add2(TL("mlp.gate_proj.weight"), MATRIX, FFN, HIDDEN);
        add2(TL("mlp.up_proj.weight"), MATRIX, FFN, HIDDEN);
        add2(TL("mlp.down_proj.weight"), MATRIX, HIDDEN, FFN);
#undef TL
    }
    int64_t pe[5] = {V_HIDDEN, 3, TEMPORAL, PATCH, PATCH};
    add("model.visual.patch_embed.proj.weight", MATRIX, 5, pe);
    add1("model.visual.patch_embed.proj.bias", BIAS, V_HIDDEN);
    add2("model.visual.pos_embed.weight", EMBED, POS_EMBED, V_HIDDEN);
    for (int l = 0; l < vision_layers; l++) {
#define VL(s) (snprintf(nm, sizeof nm, "model.visual.blocks.%d.%s", l, s), nm)
        add1(VL("norm1.weight"), NORM, V_HIDDEN);
        add1(VL("norm1.bias"), BIAS, V_HIDDEN);
        add1(VL("norm2.weight"), NORM, V_HIDDEN);
        add1(VL("norm2.bias"), BIAS, V_HIDDEN);
        add2(VL("attn.qkv.weight"), MATRIX, 3 * V_HIDDEN, V_HIDDEN);
        add1(VL("attn.qkv.bias"), BIAS, 3 * V_HIDDEN);
        add2(VL("attn.proj.weight"), MATRIX, V_HIDDEN, V_HIDDEN);
        add1(VL("attn.proj.bias"), BIAS, V_HIDDEN);
        add2(VL("mlp.linear_fc1.weight"), MATRIX, V_FFN, V_HIDDEN);
        add1(VL("mlp.linear_fc1.bias"), BIAS, V_FFN);
        add2(VL("mlp.linear_fc2.weight"), MATRIX, V_HIDDEN, V_FFN);
        add1(VL("mlp.linear_fc2.bias"), BIAS, V_HIDDEN);
#undef VL
    }
    const int merged = V_HIDDEN * MERGE * MERGE;
    for (int m = -1; m < n_ds; m++) {
        char pre[64];
        if (m < 0)
            snprintf(pre, sizeof pre, "model.visual.merger");
        else
            snprintf(pre, sizeof pre, "model.visual.deepstack_merger_list.%d", m);
        /* the merger normalises each patch before the 2x2 merge; DeepStack's
         * mergers normalise the merged row */
        int norm_w = m < 0 ? V_HIDDEN : merged;
#define ML(s) (snprintf(nm, sizeof nm, "%s.%s", pre, s), nm)
        add1(ML("norm.weight"), NORM, norm_w);
        add1(ML("norm.bias"), BIAS, norm_w);
        add2(ML("linear_fc1.weight"), MATRIX, merged, merged);
        add1(ML("linear_fc1.bias"), BIAS, merged);
        add2(ML("linear_fc2.weight"), MATRIX, HIDDEN, merged);
        add1(ML("linear_fc2.bias"), BIAS, HIDDEN);
#undef ML
    }
}

static int write_text(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        perror(p);
        return -1;
    }
    return 0;
}

static int write_config(const char *dir, int text_layers, int vision_layers, const int *ds,
                        int n_ds) {
    char dsl[64] = "";
    for (int i = 0; i < n_ds; i++)
        snprintf(dsl + strlen(dsl), sizeof dsl - strlen(dsl), "%s%d", i ? ", " : "", ds[i]);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "{\n"
             "  \"architectures\": [\"Qwen3VLForConditionalGeneration\"],\n"
             "  \"image_token_id\": 151655,\n"
             "  \"model_type\": \"qwen3_vl\",\n"
             "  \"text_config\": {\n"
             "    \"attention_bias\": false,\n"
             "    \"attention_dropout\": 0.0,\n"
             "    \"bos_token_id\": 151643,\n"
             "    \"dtype\": \"bfloat16\",\n"
             "    \"eos_token_id\": 151645,\n"
             "    \"head_dim\": %d,\n"
             "    \"hidden_act\": \"silu\",\n"
             "    \"hidden_size\": %d,\n"
             "    \"initializer_range\": 0.02,\n"
             "    \"intermediate_size\": %d,\n"
             "    \"max_position_embeddings\": 262144,\n"
             "    \"model_type\": \"qwen3_vl_text\",\n"
             "    \"num_attention_heads\": %d,\n"
             "    \"num_hidden_layers\": %d,\n"
             "    \"num_key_value_heads\": %d,\n"
             "    \"rms_norm_eps\": 1e-06,\n"
             "    \"rope_scaling\": {\n"
             "      \"mrope_interleaved\": true,\n"
             "      \"mrope_section\": [24, 20, 20],\n"
             "      \"rope_type\": \"default\"\n"
             "    },\n"
             "    \"rope_theta\": 5000000,\n"
             "    \"tie_word_embeddings\": true,\n"
             "    \"use_cache\": true,\n"
             "    \"vocab_size\": %d\n"
             "  },\n"
             "  \"tie_word_embeddings\": true,\n"
             "  \"transformers_version\": \"4.57.0.dev0\",\n"
             "  \"video_token_id\": 151656,\n"
             "  \"vision_config\": {\n"
             "    \"deepstack_visual_indexes\": [%s],\n"
             "    \"depth\": %d,\n"
             "    \"hidden_act\": \"gelu_pytorch_tanh\",\n"
             "    \"hidden_size\": %d,\n"
             "    \"in_channels\": 3,\n"
             "    \"initializer_range\": 0.02,\n"
             "    \"intermediate_size\": %d,\n"
             "    \"model_type\": \"qwen3_vl\",\n"
             "    \"num_heads\": %d,\n"
             "    \"num_position_embeddings\": %d,\n"
             "    \"out_hidden_size\": %d,\n"
             "    \"patch_size\": %d,\n"
             "    \"spatial_merge_size\": %d,\n"
             "    \"temporal_patch_size\": %d\n"
             "  },\n"
             "  \"vision_end_token_id\": 151653,\n"
             "  \"vision_start_token_id\": 151652\n"
             "}\n",
             HEAD_DIM, HIDDEN, FFN, HEADS, text_layers, KV_HEADS, VOCAB, dsl, vision_layers,
             V_HIDDEN, V_FFN, V_HEADS, POS_EMBED, HIDDEN, PATCH, MERGE, TEMPORAL);
    /* the released preprocessor_config.json: the rest are the processor's
     * defaults */
    static const char proc[] =
        "{\n"
        "  \"size\": {\"longest_edge\": 16777216, \"shortest_edge\": 65536},\n"
        "  \"patch_size\": 16,\n"
        "  \"temporal_patch_size\": 2,\n"
        "  \"merge_size\": 2,\n"
        "  \"image_mean\": [0.5, 0.5, 0.5],\n"
        "  \"image_std\": [0.5, 0.5, 0.5],\n"
        "  \"processor_class\": \"Qwen3VLProcessor\",\n"
        "  \"image_processor_type\": \"Qwen2VLImageProcessorFast\"\n"
        "}\n";
    return write_text(dir, "config.json", cfg) || write_text(dir, "preprocessor_config.json", proc)
               ? -1
               : 0;
}

static int write_safetensors(const char *dir, uint64_t seed) {
    size_t cap = 1 << 20, len = 0;
    char *h = malloc(cap);
    if (!h) return -1;
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < g_n; i++) {
        tensor *t = &g_t[i];
        t->offset = off;
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[",
                                t->name);
        for (int d = 0; d < t->ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)t->shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + t->bytes));
        off += t->bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8)
        h[len++] = ' ';
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopen(p, "wb");
    uint8_t n8[8];
    for (int b = 0; b < 8; b++)
        n8[b] = (uint8_t)((uint64_t)len >> (8 * b));
    int rc = !f || fwrite(n8, 1, 8, f) != 8 || fwrite(h, 1, len, f) != len;
    for (int i = 0; !rc && i < g_n; i++)
        rc = write_tensor(f, &g_t[i], seed);
    if (f && fclose(f)) rc = 1;
    free(h);
    if (rc) perror(p);
    return rc ? -1 : 0;
}

static int count(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    int text_layers = TEXT_LAYERS, vision_layers = V_LAYERS, seed = 1;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        int bad = 0;
        if (!strcmp(argv[i], "--text-layers") && i + 1 < argc)
            bad = count(argv[++i], 1, TEXT_LAYERS, &text_layers);
        else if (!strcmp(argv[i], "--vision-layers") && i + 1 < argc)
            bad = count(argv[++i], 1, V_LAYERS, &vision_layers);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            bad = count(argv[++i], 0, 1 << 30, &seed);
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "make_random_vl: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: make_random_vl DIR [--text-layers N (1-28)] [--vision-layers N "
                        "(1-24)] [--seed S]\n");
        return 2;
    }
    /* the released DeepStack layers, or the first ones of a shallower tower */
    int ds[3] = {5, 11, 17}, n_ds = 3;
    if (vision_layers < V_LAYERS) {
        n_ds = vision_layers < 3 ? vision_layers : 3;
        for (int i = 0; i < n_ds; i++)
            ds[i] = i;
    }
    if (n_ds > text_layers) n_ds = text_layers;
    tensors(text_layers, vision_layers, n_ds);
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "make_random_vl: cannot make '%s': %s\n", dir, strerror(errno));
        return 1;
    }
    if (write_config(dir, text_layers, vision_layers, ds, n_ds) ||
        write_safetensors(dir, (uint64_t)seed))
        return 1;
    return 0;
}
