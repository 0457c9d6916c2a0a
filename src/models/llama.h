/* llama.h: the Llama family (llama2.c models, SmolLM2, Llama-3, Qwen2,
 * Qwen3) as one configurable graph builder. Importers fill the config and
 * add the weights to the module under the GGUF tensor names
 * (token_embd.weight, blk.N.attn_q.weight, ...); the builder wires them. */
#ifndef KILN_MODELS_LLAMA_H
#define KILN_MODELS_LLAMA_H

#include "ir/graph.h"

#define KILN_MAX_DEEPSTACK 8
/* encode_image's default patch limit: 4096 patches of 16 x 16 pixels is a
 * 1024 x 1024 image (the compiler's --max-image-patches changes it). */
#define KILN_VISION_MAX_PATCHES 4096

/* A vision tower (Qwen3-VL's): patches in, visual tokens of the text width
 * out, through `encode_image`. depth 0 = a text-only model. */
typedef struct kiln_vision_config {
    int depth;          /* transformer blocks */
    int n_embd, n_ff;   /* block width, MLP width */
    int n_head;         /* head_dim = n_embd / n_head */
    int in_channels;    /* 3 */
    int patch;          /* pixels per patch side */
    int temporal_patch; /* frames per patch (an image is repeated to fill them) */
    int merge;          /* merge x merge patches become one visual token */
    int out_embd;       /* the text model's width */
    int n_pos_embd;     /* learned position embeddings, a square grid */
    int gelu_tanh;      /* the blocks' MLP: 1 gelu_pytorch_tanh, 0 gelu (erf) */
    float rope_theta;   /* the axial 2-D rope */
    float norm_eps;     /* layer norms */
    int n_deepstack;    /* features taken after these blocks, added to text layers 0.. */
    int deepstack_layer[KILN_MAX_DEEPSTACK];
    int max_patches; /* the most patches one encode_image call takes */
    /* the prompt's tokens: <|vision_start|> <|image_pad|> x n <|vision_end|> */
    int image_token, vision_start, vision_end;
    /* the image processor (preprocessor_config.json): resize within
     * min..max pixels to multiples of patch x merge, then
     * (x * rescale - mean[c]) / std[c] */
    int64_t min_pixels, max_pixels;
    float rescale, mean[3], std[3];
} kiln_vision_config;

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
    int rope_mode;        /* KILN_ROPE_ADJACENT or KILN_ROPE_NEOX */
    int n_rot;            /* rotated dims per head; 0 = head_dim */
    int tied_output;      /* the output projection is token_embd.weight */
    int qk_norm;          /* per-head rms_norm of q and k (Qwen3) */
    int qkv_bias;         /* biases on q, k, v (Qwen2) */
    int rope_freqs;       /* a rope_freqs.weight constant scales frequencies (Llama-3) */
    int mrope;            /* 3 rope position streams (t, h, w), interleaved M-RoPE (Qwen3-VL) */
    int mrope_section[3]; /* frequencies per stream */
    kiln_vision_config vision;
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

/* Checks that constant `name` is in the module with shape [a] (ndim 1) or
 * [a, b], and f32 when 1-D; errors name the tensor and `source`. */
kiln_status kiln_check_weight(const kiln_module *m, const char *name, int ndim, int64_t a,
                              int64_t b, const char *source);

/* Stores the config as metadata and builds the `prefill` (1..prefill
 * tokens at a start position, flag for all-position logits) and `decode`
 * (one token) methods, with one KV cache of max_seq positions in state. */
kiln_status kiln_llama_build(kiln_module *m, const kiln_llama_config *c, int prefill, int max_seq);

/* The vision tower (models/vision.c): checks its config and weights, and
 * builds `encode_image`. Called by kiln_llama_build when vision.depth > 0. */
kiln_status kiln_vision_check(const kiln_vision_config *v, const char *source);
kiln_status kiln_vision_check_weights(const kiln_module *m, const kiln_vision_config *v,
                                      const char *source);
kiln_status kiln_vision_build(kiln_module *m, const kiln_vision_config *v);

#endif
