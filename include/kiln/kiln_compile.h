/* kiln_compile.h: compile a checkpoint into a `.kiln` program.
 *
 * The compiler imports a checkpoint (a llama2.c `.bin` with its
 * `tokenizer.bin`, a GGUF file, or a Hugging Face folder: config.json,
 * *.safetensors, tokenizer.json), builds one graph per method (`prefill`,
 * `decode`), prunes, quantizes, partitions, calibrates (when asked),
 * packs and plans them, and writes the program file, which it then reopens
 * and verifies (docs/ARCHITECTURE.md §1). Errors follow kiln.h: a status plus
 * kiln_last_error().
 */
#ifndef KILN_COMPILE_H
#define KILN_COMPILE_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Progress of a long step (writing weights, calibration, --check), and
 * between steps with done = total = 0 (the stage about to start:
 * "quantize", "calibrate" when calibration runs, "prepare", "write",
 * "verify", "rename"). Return non-zero to cancel: the compiler then
 * stops, removes its partial output and returns KILN_ERR_CANCELLED; a stop
 * asked for at "rename" or before leaves no file (an old one stays). */
typedef int (*kiln_progress_fn)(void *user, const char *stage, uint64_t done, uint64_t total);

typedef struct kiln_compile_options {
    const char *input;     /* checkpoint path (required) */
    const char *tokenizer; /* tokenizer path, or NULL when the checkpoint has one */
    const char *output;    /* program path to write (required) */
    int prefill;           /* most tokens per prefill call; 0 = 128 */
    int max_seq;           /* context length; 0 = the model's, capped at 4096 */
    /* Comma-separated backends in order of preference ("ref", or
     * "test:refuse=rms_norm"); NULL = the best available. */
    const char *backends;
    /* Weight format of matmul and embedding weights: "keep" (default: as
     * stored, quantized blocks included), "f32", "f16", "q8_0", "q4_0".
     * Norms, biases, positions and state are never touched. */
    const char *quant;
    /* 1: a weight that cannot take the format (rows not whole blocks) keeps
     * its dtype and is reported; 0: that is an error naming the tensor. */
    int quant_fallback;
    /* Element type of the KV cache (the `kv_cache.k.N` / `kv_cache.v.N`
     * states): "f16" (NULL = the default: half the session memory; keys and
     * values are rounded to nearest even when stored) or "f32" (exact). Any
     * other string is KILN_ERR_INVALID_ARG. `kiln info` shows it as the
     * dtype of those states. */
    const char *kv_type;
    /* 0 (default): q4_0, q4_1, q8_0, q4_K and q6_K weights read by nodes on
     * the cpu backend are stored packed (q4_0x8 / q4_1x8 / q8_0x8 / q4_Kx8 /
     * q6_Kx8: 8 rows
     * interleaved, docs/FORMAT.md §6.1), the layout its kernels want; the
     * plain copy is not kept. 1: stored as imported. */
    int no_pack;
    /* Partition check, after the program is written and verified: sample
     * calls (a prefill of a few random tokens, then a few decodes) run on
     * the program as compiled and on ref; each node of a partition not on
     * ref is also run alone on its backend given ref's inputs, and one line
     * per partition is logged: its worst node's cosine similarity and
     * relative error against ref, the times on its backend and on ref and
     * their ratio. 0: no check (default). 1: a partition whose worst node's
     * cosine is below check_threshold fails the compile with
     * KILN_ERR_BACKEND naming the method, partition, backend and node; no
     * output is written. 2: such partitions are moved to ref (said in the
     * log, marked fallback by `kiln info`) and the program is written
     * again. */
    int check;
    /* Cosine similarity a node's own output must reach, in (0, 1]; 0 = the
     * default, 0.99. */
    double check_threshold;
    /* Calibration: before each backend's prepare, the program as compiled
     * so far runs on ref over a text (its first calibrate_tokens tokens,
     * encoded as generation encodes a prompt: through prefill, the last
     * eighth, at most 16, through decode), and the range of every f32
     * value and of every attention's scaled scores is stored in the
     * program's "calibration.*" metadata (docs/FORMAT.md §7.1), for a
     * backend that quantizes activations. It runs when such a backend is
     * listed, or when either field below is set. Path of a UTF-8 text
     * file; NULL = a built-in English text of a few paragraphs. An empty
     * text, one with fewer tokens than asked for, or a count past the
     * context is KILN_ERR_INVALID_ARG. */
    const char *calibrate;
    /* Tokens of the text to run, 8..1048576; 0 = 128 (at most the
     * context). */
    int calibrate_tokens;
    kiln_progress_fn progress; /* may be NULL */
    void *progress_user;
    /* Receives one line per notable step (what was converted); may be NULL. */
    void (*log)(void *user, const char *line);
    void *log_user;
    /* Vision-language models: the most patches one encode_image call takes
     * (a multiple of merge x merge, at most 1048576; the arena and the
     * attention grow with it); 0 = 4096 (a 1024 x 1024 image at Qwen3-VL's
     * 16-pixel patches). An image the processor would give more patches is
     * resized within it. Set on a text-only model: KILN_ERR_INVALID_ARG. */
    int max_image_patches;
} kiln_compile_options;

/* Fills `options` with the defaults above. */
KILN_API void kiln_compile_options_init(kiln_compile_options *options);

/* Compiles; the output is written to a temporary file beside it and renamed
 * into place only once complete and verified, so a failure never leaves a
 * partial program. Not thread-safe with respect to the same output path. */
KILN_API kiln_status kiln_compile(const kiln_compile_options *options);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILE_H */
