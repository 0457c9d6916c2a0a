/* llama.h: the Llama family (llama2.c models, SmolLM2, Llama-3, Qwen2,
 * Qwen3) as one configurable graph builder. Importers fill the config and
 * add the weights to the module under the GGUF tensor names
 * (token_embd.weight, blk.N.attn_q.weight, ...); the builder wires them. */
#ifndef KILN_MODELS_LLAMA_H
#define KILN_MODELS_LLAMA_H

#include "ir/graph.h"

typedef struct kiln_llama_config {
    char arch[32]; /* "llama2c", "llama", "qwen2", "qwen3" */
    int n_embd;    /* model width */
    int n_ff;      /* MLP hidden width */
    int n_layer;
    int n_head, n_head_kv, head_dim;
    int n_vocab;
    int n_ctx_train; /* the context the model was trained for */
    float norm_eps;
    float rope_theta;
    int rope_mode;       /* KILN_ROPE_ADJACENT or KILN_ROPE_NEOX */
    int n_rot;           /* rotated dims per head; 0 = head_dim */
    int tied_output;     /* the output projection is token_embd.weight */
    int qk_norm;         /* per-head rms_norm of q and k (Qwen3) */
    int qkv_bias;        /* biases on q, k, v (Qwen2) */
    int rope_freqs;      /* a rope_freqs.weight constant scales frequencies (Llama-3) */
    kiln_dtype kv_dtype; /* KV cache states: KILN_F16 or KILN_F32 (a compile choice, not the
                            checkpoint's: importers leave 0 = f32, the compiler sets it) */
} kiln_llama_config;

/* Checks a config (every field in range, heads dividing widths); errors
 * name the field and the file. */
kiln_status kiln_llama_check(const kiln_llama_config *c, const char *source);

/* Checks that every weight the config needs is in the module with the shape
 * it needs (errors name the tensor, the file, expected and found). */
kiln_status kiln_llama_check_weights(const kiln_module *m, const kiln_llama_config *c,
                                     const char *source);

/* Stores the config as metadata and builds the `prefill` (1..prefill
 * tokens at a start position, flag for all-position logits) and `decode`
 * (one token) methods, with one KV cache of max_seq positions in state. */
kiln_status kiln_llama_build(kiln_module *m, const kiln_llama_config *c, int prefill, int max_seq);

#endif
