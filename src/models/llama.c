/* llama.c: the Llama-family graph, built once per method. Node names are
 * stable (blk.3.attn_q) and shared by both methods, so info, traces and the
 * debugger speak of the same thing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ops.h"
#include "models/builder.h"
#include "models/llama.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) return kiln_error(KILN_ERR_FORMAT, __VA_ARGS__);                              \
    } while (0)

kiln_status kiln_llama_check(const kiln_llama_config *c, const char *src) {
    CHECK(c->n_embd > 0 && c->n_embd <= 65536, "%s: model width (dim) %d out of range 1..65536",
          src, c->n_embd);
    CHECK(c->n_ff > 0 && c->n_ff <= 1 << 20, "%s: MLP width (hidden_dim) %d out of range", src,
          c->n_ff);
    CHECK(c->n_layer > 0 && c->n_layer <= 1024, "%s: layer count %d out of range 1..1024", src,
          c->n_layer);
    CHECK(c->n_head > 0 && c->n_head <= 1024, "%s: head count %d out of range 1..1024", src,
          c->n_head);
    CHECK(c->n_head_kv > 0 && c->n_head % c->n_head_kv == 0,
          "%s: KV head count %d must divide the head count %d", src, c->n_head_kv, c->n_head);
    CHECK(c->head_dim > 0 && c->head_dim % 2 == 0 && c->head_dim <= 4096,
          "%s: head size %d must be even and at most 4096", src, c->head_dim);
    CHECK(c->n_vocab > 0 && c->n_vocab <= 1 << 22, "%s: vocabulary size %d out of range 1..4194304",
          src, c->n_vocab);
    CHECK(c->n_ctx_train > 0 && c->n_ctx_train <= 1 << 24, "%s: context length %d out of range",
          src, c->n_ctx_train);
    CHECK(c->norm_eps > 0 && c->norm_eps < 1, "%s: norm epsilon %g out of range (0, 1)", src,
          c->norm_eps);
    CHECK(c->n_rot >= 0 && c->n_rot <= c->head_dim && c->n_rot % 2 == 0,
          "%s: rope dimension count %d must be even and at most the head size %d", src, c->n_rot,
          c->head_dim);
    CHECK(c->rope_theta > 0 && isfinite(c->rope_theta), "%s: rope theta %g must be positive", src,
          c->rope_theta);
    if (c->mrope) {
        int sum = c->mrope_section[0] + c->mrope_section[1] + c->mrope_section[2];
        CHECK(c->mrope_section[0] >= 0 && c->mrope_section[1] >= 0 && c->mrope_section[2] >= 0 &&
                  sum == c->head_dim / 2,
              "%s: mrope_section [%d, %d, %d] must be 3 counts adding up to head_dim / 2 = %d", src,
              c->mrope_section[0], c->mrope_section[1], c->mrope_section[2], c->head_dim / 2);
        CHECK(!c->n_rot || c->n_rot == c->head_dim, "%s: M-RoPE rotates the whole head", src);
    }
    if (c->vision.depth) {
        kiln_status st = kiln_vision_check(&c->vision, src);
        if (st) return st;
        CHECK(c->mrope, "%s: a vision tower needs M-RoPE", src);
        CHECK(c->vision.out_embd == c->n_embd,
              "%s: vision out_hidden_size %d differs from the text hidden_size %d", src,
              c->vision.out_embd, c->n_embd);
        CHECK(c->vision.n_deepstack <= c->n_layer,
              "%s: %d DeepStack features but only %d text layers", src, c->vision.n_deepstack,
              c->n_layer);
        const int ids[3] = {c->vision.image_token, c->vision.vision_start, c->vision.vision_end};
        static const char *const id_names[3] = {"image_token_id", "vision_start_token_id",
                                                "vision_end_token_id"};
        for (int i = 0; i < 3; i++)
            CHECK(ids[i] >= 0 && ids[i] < c->n_vocab, "%s: %s %d is outside the vocabulary 0..%d",
                  src, id_names[i], ids[i], c->n_vocab - 1);
    }
    return KILN_OK;
}

/* Checks that constant `name` is there with shape [a] or [a, b], and that a
 * 1-D one (a norm, a bias, frequency factors) is f32, as every op reads it. */
kiln_status kiln_check_weight(const kiln_module *m, const char *name, int ndim, int64_t a,
                              int64_t b, const char *src) {
    char want[96], got[96];
    int64_t ne[2] = {a, b};
    kiln_shape_str(ndim, ne, want, sizeof want);
    int k = kiln_module_find_const(m, name);
    if (k < 0)
        return kiln_error(KILN_ERR_FORMAT, "%s: tensor '%s' is missing (expected shape %s)", src,
                          name, want);
    const kiln_const *t = &m->consts[k];
    if (t->ndim != ndim || t->ne[0] != a || (ndim == 2 && t->ne[1] != b))
        return kiln_error(KILN_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", src, name,
                          kiln_shape_str(t->ndim, t->ne, got, sizeof got), want);
    if (t->ndim == 1 && t->dtype != KILN_F32)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s: tensor '%s' is %s; Kiln needs norms and biases in f32", src, name,
                          kiln_dtype_name(t->dtype));
    return KILN_OK;
}

kiln_status kiln_llama_check_weights(const kiln_module *m, const kiln_llama_config *c,
                                     const char *src) {
    int64_t D = c->n_embd, F = c->n_ff, V = c->n_vocab, hd = c->head_dim;
    int64_t qd = (int64_t)c->n_head * hd, kvd = (int64_t)c->n_head_kv * hd;
    int n_rot = c->n_rot ? c->n_rot : c->head_dim;
    struct {
        const char *name;
        int ndim;
        int64_t a, b;
        int needed;
    } w[] = {
        {"token_embd.weight", 2, V, D, 1},
        {"output_norm.weight", 1, D, 0, 1},
        {"output.weight", 2, V, D, !c->tied_output},
        {"rope_freqs.weight", 1, n_rot / 2, 0, c->rope_freqs},
        {"blk.%d.attn_norm.weight", 1, D, 0, 1},
        {"blk.%d.attn_q.weight", 2, qd, D, 1},
        {"blk.%d.attn_k.weight", 2, kvd, D, 1},
        {"blk.%d.attn_v.weight", 2, kvd, D, 1},
        {"blk.%d.attn_output.weight", 2, D, qd, 1},
        {"blk.%d.attn_q.bias", 1, qd, 0, c->qkv_bias},
        {"blk.%d.attn_k.bias", 1, kvd, 0, c->qkv_bias},
        {"blk.%d.attn_v.bias", 1, kvd, 0, c->qkv_bias},
        {"blk.%d.attn_q_norm.weight", 1, hd, 0, c->qk_norm},
        {"blk.%d.attn_k_norm.weight", 1, hd, 0, c->qk_norm},
        {"blk.%d.ffn_norm.weight", 1, D, 0, 1},
        {"blk.%d.ffn_gate.weight", 2, F, D, 1},
        {"blk.%d.ffn_up.weight", 2, F, D, 1},
        {"blk.%d.ffn_down.weight", 2, D, F, 1},
    };
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        if (!w[i].needed) continue;
        int per_layer = strchr(w[i].name, '%') != NULL;
        for (int l = 0; l < (per_layer ? c->n_layer : 1); l++) {
            char name[KILN_NAME_MAX];
            snprintf(name, sizeof name, w[i].name, l);
            kiln_status st = kiln_check_weight(m, name, w[i].ndim, w[i].a, w[i].b, src);
            if (st) return st;
        }
    }
    return c->vision.depth ? kiln_vision_check_weights(m, &c->vision, src) : KILN_OK;
}

typedef kiln_builder builder;
#define C kiln_b_const
#define N kiln_b_node
#define IN KILN_IN

static kiln_status build_method(kiln_module *m, const kiln_llama_config *c, const char *name,
                                int max_tokens, int with_flag) {
    kiln_graph *g = kiln_module_add_method(m, name, max_tokens);
    if (!g) return kiln_last_status();
    builder b = {g, m, 0};
    /* Shapes below: T tokens of this call (1..max_tokens), D = n_embd,
     * H = n_head, KV = n_head_kv, hd = head_dim, F = n_ff, V = n_vocab,
     * S = max_seq (the cache rows). Weights are [out, in], as GGUF stores them. */
    int64_t tok_shape[1] = {max_tokens}, one[1] = {1};
    uint32_t dyn = max_tokens > 1 ? 1u : 0u;
    int tokens = kiln_graph_input(g, "tokens", KILN_I32, 1, tok_shape, dyn); /* (T) */
    int pos = kiln_graph_input(g, "pos", KILN_I32, 1, one, 0); /* (1): the first cache row */
    int flag = with_flag ? kiln_graph_input(g, "all_logits", KILN_I32, 1, one, 0) : 0; /* (1) */
    if (tokens < 0 || pos < 0 || flag < 0) return kiln_last_status();
    /* M-RoPE: (T, 3) rope positions (t, h, w), apart from the cache row: after
     * an image they run behind it. With a vision tower prefill also takes the
     * visual tokens: (T, D) rows that replace the token embeddings where
     * visual_mask is set, and one (T, D) DeepStack feature per early layer,
     * zero outside the visual rows. */
    int64_t pos3[2] = {max_tokens, 3}, rows[2] = {max_tokens, c->n_embd};
    int rope_pos = c->mrope ? kiln_b_input(&b, "rope_pos", KILN_I32, 2, pos3, dyn) : -1;
    int vis = -1, vis_mask = -1, ds[KILN_MAX_DEEPSTACK];
    int n_ds = c->vision.depth && with_flag ? c->vision.n_deepstack : 0;
    if (c->vision.depth && with_flag) {
        vis = kiln_b_input(&b, "visual", KILN_F32, 2, rows, dyn);
        vis_mask = kiln_b_input(&b, "visual_mask", KILN_I32, 1, tok_shape, dyn);
        for (int k = 0; k < n_ds; k++) {
            char nm[32];
            snprintf(nm, sizeof nm, "deepstack.%d", k);
            ds[k] = kiln_b_input(&b, nm, KILN_F32, 2, rows, dyn);
        }
    }
    if (b.failed) return kiln_last_status();

    /* token_embd.weight (V, D) -> x (T, D): the residual stream */
    int x = N(&b, KILN_OP_GET_ROWS, "token_embd", 0, IN(C(&b, "token_embd.weight", 0), tokens),
              NULL, NULL);
    if (vis >= 0)
        x = N(&b, KILN_OP_MERGE_ROWS, "visual_merge", 0, IN(x, vis, vis_mask), NULL, NULL);
    float eps[KILN_MAX_FATTR] = {c->norm_eps};
    float theta[KILN_MAX_FATTR] = {c->rope_theta};
    float div[KILN_MAX_FATTR] = {sqrtf((float)c->head_dim)};
    int n_rot = c->n_rot ? c->n_rot : c->head_dim;
    int32_t rope_q[KILN_MAX_IATTR] = {c->n_head, c->head_dim, c->rope_mode, n_rot};
    int32_t rope_k[KILN_MAX_IATTR] = {c->n_head_kv, c->head_dim, c->rope_mode, n_rot};
    int32_t attn[KILN_MAX_IATTR] = {c->n_head, c->n_head_kv, c->head_dim};
    int32_t mrope_q[KILN_MAX_IATTR] = {
        c->n_head,           c->head_dim,         KILN_ROPEM_INTERLEAVED,
        c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]};
    int32_t mrope_k[KILN_MAX_IATTR] = {c->n_head_kv,           c->head_dim,
                                       KILN_ROPEM_INTERLEAVED, c->mrope_section[0],
                                       c->mrope_section[1],    c->mrope_section[2]};
    int freqs = c->rope_freqs ? C(&b, "rope_freqs.weight", 0)
                              : -1; /* (n_rot / 2): Llama-3 frequency factors */

    for (int l = 0; l < c->n_layer && !b.failed; l++) {
        /* attn_norm.weight (D); attn_q (H*hd, D); attn_k, attn_v (KV*hd, D) */
        int h = N(&b, KILN_OP_RMS_NORM, "blk.%d.attn_norm", l,
                  IN(x, C(&b, "blk.%d.attn_norm.weight", l)), NULL, eps); /* (T, D) */
        int q = N(&b, KILN_OP_MATMUL, "blk.%d.attn_q", l, IN(h, C(&b, "blk.%d.attn_q.weight", l)),
                  NULL, NULL); /* (T, H*hd) */
        int k = N(&b, KILN_OP_MATMUL, "blk.%d.attn_k", l, IN(h, C(&b, "blk.%d.attn_k.weight", l)),
                  NULL, NULL); /* (T, KV*hd) */
        int v = N(&b, KILN_OP_MATMUL, "blk.%d.attn_v", l, IN(h, C(&b, "blk.%d.attn_v.weight", l)),
                  NULL, NULL); /* (T, KV*hd) */
        if (c->qkv_bias) {     /* Qwen2: attn_q.bias (H*hd), attn_k.bias and attn_v.bias (KV*hd) */
            q = N(&b, KILN_OP_ADD, "blk.%d.attn_q_bias", l, IN(q, C(&b, "blk.%d.attn_q.bias", l)),
                  NULL, NULL);
            k = N(&b, KILN_OP_ADD, "blk.%d.attn_k_bias", l, IN(k, C(&b, "blk.%d.attn_k.bias", l)),
                  NULL, NULL);
            v = N(&b, KILN_OP_ADD, "blk.%d.attn_v_bias", l, IN(v, C(&b, "blk.%d.attn_v.bias", l)),
                  NULL, NULL);
        }
        if (c->qk_norm) { /* Qwen3: attn_q_norm.weight, attn_k_norm.weight (hd): one norm per head
                           */
            q = N(&b, KILN_OP_RMS_NORM, "blk.%d.attn_q_norm", l,
                  IN(q, C(&b, "blk.%d.attn_q_norm.weight", l)), NULL, eps);
            k = N(&b, KILN_OP_RMS_NORM, "blk.%d.attn_k_norm", l,
                  IN(k, C(&b, "blk.%d.attn_k_norm.weight", l)), NULL, eps);
        }
        if (rope_pos >= 0) {
            q = N(&b, KILN_OP_ROPE_MULTI, "blk.%d.rope_q", l, IN(q, rope_pos), mrope_q, theta);
            k = N(&b, KILN_OP_ROPE_MULTI, "blk.%d.rope_k", l, IN(k, rope_pos), mrope_k, theta);
        } else if (freqs >= 0) { /* rope keeps the shapes: q (T, H*hd), k (T, KV*hd) */
            q = N(&b, KILN_OP_ROPE, "blk.%d.rope_q", l, IN(q, pos, freqs), rope_q, theta);
            k = N(&b, KILN_OP_ROPE, "blk.%d.rope_k", l, IN(k, pos, freqs), rope_k, theta);
        } else {
            q = N(&b, KILN_OP_ROPE, "blk.%d.rope_q", l, IN(q, pos), rope_q, theta);
            k = N(&b, KILN_OP_ROPE, "blk.%d.rope_k", l, IN(k, pos), rope_k, theta);
        }
        char sname[64];
        snprintf(sname, sizeof sname, "kv_cache.k.%d", l);
        int kc = b.failed ? -1 : kiln_graph_state(g, m, sname);
        snprintf(sname, sizeof sname, "kv_cache.v.%d", l);
        int vc = b.failed ? -1 : kiln_graph_state(g, m, sname);
        if (kc < 0 || vc < 0) return kiln_last_status();
        /* kv_cache.k.L, kv_cache.v.L (S, KV*hd): rows pos..pos+T-1 written; the
         * views carry "after the write" to attention */
        kc = N(&b, KILN_OP_KV_STORE, "blk.%d.kv_store_k", l, IN(kc, k, pos), NULL, NULL);
        vc = N(&b, KILN_OP_KV_STORE, "blk.%d.kv_store_v", l, IN(vc, v, pos), NULL, NULL);
        int a = N(&b, KILN_OP_ATTENTION, "blk.%d.attn", l, IN(q, kc, vc, pos), attn,
                  div); /* (T, H*hd) */
        /* attn_output.weight (D, H*hd) */
        int o = N(&b, KILN_OP_MATMUL, "blk.%d.attn_output", l,
                  IN(a, C(&b, "blk.%d.attn_output.weight", l)), NULL, NULL);     /* (T, D) */
        x = N(&b, KILN_OP_ADD, "blk.%d.attn_residual", l, IN(x, o), NULL, NULL); /* (T, D) */
        /* ffn_norm.weight (D); ffn_gate, ffn_up (F, D); ffn_down (D, F) */
        h = N(&b, KILN_OP_RMS_NORM, "blk.%d.ffn_norm", l, IN(x, C(&b, "blk.%d.ffn_norm.weight", l)),
              NULL, eps); /* (T, D) */
        int gt = N(&b, KILN_OP_MATMUL, "blk.%d.ffn_gate", l,
                   IN(h, C(&b, "blk.%d.ffn_gate.weight", l)), NULL, NULL); /* (T, F) */
        int up = N(&b, KILN_OP_MATMUL, "blk.%d.ffn_up", l, IN(h, C(&b, "blk.%d.ffn_up.weight", l)),
                   NULL, NULL);                                                         /* (T, F) */
        int sw = N(&b, KILN_OP_SWIGLU, "blk.%d.ffn_swiglu", l, IN(gt, up), NULL, NULL); /* (T, F) */
        int d = N(&b, KILN_OP_MATMUL, "blk.%d.ffn_down", l,
                  IN(sw, C(&b, "blk.%d.ffn_down.weight", l)), NULL, NULL);      /* (T, D) */
        x = N(&b, KILN_OP_ADD, "blk.%d.ffn_residual", l, IN(x, d), NULL, NULL); /* (T, D) */
        if (l < n_ds) /* DeepStack: the visual rows get the feature of vision block k */
            x = N(&b, KILN_OP_ADD, "blk.%d.deepstack", l, IN(x, ds[l]), NULL, NULL);
    }
    /* output_norm.weight (D); output.weight (V, D), or token_embd.weight when tied */
    int h = N(&b, KILN_OP_RMS_NORM, "output_norm", 0, IN(x, C(&b, "output_norm.weight", 0)), NULL,
              eps); /* (T, D) */
    int w = C(&b, c->tied_output ? "token_embd.weight" : "output.weight", 0);
    /* logits (T, V) when all_logits is 1, else (1, V): the last row */
    int logits = with_flag ? N(&b, KILN_OP_LOGITS, "logits", 0, IN(h, w, flag), NULL, NULL)
                           : N(&b, KILN_OP_LOGITS, "logits", 0, IN(h, w), NULL, NULL);
    if (b.failed) return kiln_error_wrap(kiln_last_status(), "building method '%s'", name);
    return kiln_graph_output(g, logits);
}

kiln_status kiln_llama_build(kiln_module *m, const kiln_llama_config *c, int prefill, int max_seq) {
    kiln_status st = kiln_llama_check(c, c->arch);
    if (st) return st;
    if (prefill < 1 || prefill > max_seq)
        return kiln_error(KILN_ERR_INVALID_ARG, "prefill size %d must be in 1..max-seq (%d)",
                          prefill, max_seq);
    if (c->kv_dtype != KILN_F32 && c->kv_dtype != KILN_F16)
        return kiln_error(KILN_ERR_INVALID_ARG, "KV cache dtype %s is not f16 or f32",
                          kiln_dtype_name(c->kv_dtype) ? kiln_dtype_name(c->kv_dtype) : "?");
    /* (layer) x (max_seq, n_head_kv * head_dim), f16 or f32 */
    int64_t kv[2] = {max_seq, (int64_t)c->n_head_kv * c->head_dim};
    for (int l = 0; l < c->n_layer; l++) {
        char name[64];
        snprintf(name, sizeof name, "kv_cache.k.%d", l);
        if (kiln_module_add_state(m, name, c->kv_dtype, 2, kv) < 0) return kiln_last_status();
        snprintf(name, sizeof name, "kv_cache.v.%d", l);
        if (kiln_module_add_state(m, name, c->kv_dtype, 2, kv) < 0) return kiln_last_status();
    }
    struct {
        const char *key;
        int64_t v;
    } ints[] = {
        {"llm.embedding_length", c->n_embd}, {"llm.feed_forward_length", c->n_ff},
        {"llm.block_count", c->n_layer},     {"llm.head_count", c->n_head},
        {"llm.head_count_kv", c->n_head_kv}, {"llm.head_dim", c->head_dim},
        {"llm.vocab_size", c->n_vocab},      {"llm.context_length_train", c->n_ctx_train},
        {"llm.context_length", max_seq},     {"llm.prefill_max_tokens", prefill},
        {"llm.rope_mode", c->rope_mode},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if ((st = kiln_meta_set_int(m, ints[i].key, ints[i].v))) return st;
    if ((st = kiln_meta_set_str(m, "general.architecture", c->arch)) ||
        (st = kiln_meta_set_float(m, "llm.rope_theta", c->rope_theta)) ||
        (st = kiln_meta_set_float(m, "llm.norm_eps", c->norm_eps)))
        return st;
    if (c->mrope) {
        int64_t sec[3] = {c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]};
        if ((st = kiln_meta_set_int_array(m, "llm.rope_sections", sec, 3))) return st;
    }
    if (c->vision.depth && (st = kiln_vision_build(m, &c->vision))) return st;
    if ((st = build_method(m, c, "prefill", prefill, 1))) return st;
    return build_method(m, c, "decode", 1, 0);
}
