/* kiln_llm.h: text in, text out on top of kiln.h.
 *
 * The tokenizer stored in a program, a sampler, and the generation loop that
 * feeds a prompt through `prefill` in chunks and then runs `decode`.
 */
#ifndef KILN_LLM_H
#define KILN_LLM_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tokenizer kiln_tokenizer;

/* A tokenizer is one of:
 *   - llama2.c's SentencePiece-style BPE (tokenizer.bin: pieces with scores,
 *     <0xNN> byte fallback, run.c's rules: a " " token before the text);
 *   - byte-level BPE as Hugging Face `tokenizers` runs it (GPT-2, Llama-3,
 *     Qwen2/3, SmolLM2): added tokens matched first, NFC where the tokenizer
 *     asks for it, the pre-tokenizer's regex splits, merges by rank;
 *   - SentencePiece BPE of GGUF `llama` vocabularies as llama.cpp runs them
 *     (scores, U+2581 for spaces, byte fallback, add_space_prefix).
 * All are stored in a program's tokenizer section at compile time; loading
 * one reads no JSON. Every tokenizer is immutable once made: thread-safe to
 * use from many threads. */

/* Loads the tokenizer stored in a program. The tokenizer is independent of
 * the program afterwards; free it with kiln_tokenizer_free. */
KILN_API kiln_status kiln_tokenizer_from_program(const kiln_program *program, kiln_tokenizer **out);

/* Loads a llama2.c `tokenizer.bin` holding `vocab_size` pieces (0: as many
 * as the file holds, read to its end). */
KILN_API kiln_status kiln_tokenizer_load_llama2c(const char *path, int vocab_size,
                                                 kiln_tokenizer **out);

/* Loads a tokenizer file: a Hugging Face tokenizer.json (with the
 * tokenizer_config.json beside it when there is one: bos/eos tokens,
 * add_bos_token), a GGUF file (its tokenizer.ggml.* metadata; a vocabulary-
 * only GGUF will do), or a llama2.c tokenizer.bin (vocabulary: every record
 * in the file). KILN_ERR_UNSUPPORTED names what Kiln does not run (another
 * tokenizer model, pre-tokenizer, normalizer or regex feature). */
KILN_API kiln_status kiln_tokenizer_load(const char *path, kiln_tokenizer **out);

KILN_API void kiln_tokenizer_free(kiln_tokenizer *tok);

KILN_API int kiln_tokenizer_vocab_size(const kiln_tokenizer *tok);
KILN_API int kiln_tokenizer_bos(const kiln_tokenizer *tok); /* -1 when none */
KILN_API int kiln_tokenizer_eos(const kiln_tokenizer *tok); /* -1 when none */
/* 1 for control tokens (BOS, EOS, <|im_start|>, ...; llama2.c: BOS and EOS),
 * 0 otherwise and for ids outside the vocabulary. */
KILN_API int kiln_tokenizer_is_special(const kiln_tokenizer *tok, int id);

/* Flags of kiln_tokenizer_encode_flags. With none, encoding is Hugging
 * Face's encode(text, add_special_tokens=False): special-token text in the
 * input is recognised, nothing is added around it. */
#define KILN_TOKENIZE_ADD_SPECIAL                                                                  \
    1u /* add what the tokenizer puts around a text (BOS and/or EOS) */
#define KILN_TOKENIZE_PLAIN_SPECIAL                                                                \
    2u /* special-token text is plain text (non-special added tokens still match) */

/* Encodes `len` bytes of text (any bytes; invalid UTF-8 is kept byte for
 * byte). Writes at most `cap` ids to `ids` and the count needed to *n_ids;
 * when the count is over `cap` it returns KILN_ERR_INVALID_ARG (call again
 * with a bigger buffer). 2 * len + 2 ids always suffice (len + 2 but for
 * SentencePiece tokenizers, where each run of text after an added token may
 * gain a space token). */
KILN_API kiln_status kiln_tokenizer_encode_flags(const kiln_tokenizer *tok, const char *text,
                                                 size_t len, unsigned flags, int32_t *ids, int cap,
                                                 int *n_ids);

/* kiln_tokenizer_encode_flags with KILN_TOKENIZE_ADD_SPECIAL when add_bos is
 * non-zero: BOS goes first where the tokenizer asks for it (llama2.c, Llama
 * GGUFs: yes; Qwen, SmolLM2: no). */
KILN_API kiln_status kiln_tokenizer_encode(const kiln_tokenizer *tok, const char *text, size_t len,
                                           int add_bos, int32_t *ids, int cap, int *n_ids);

/* The bytes token `id` decodes to when it follows `prev` (-1: none), by the
 * tokenizer's rules (llama2.c: a leading space after BOS is dropped; GGUF
 * SentencePiece: the space the encoder put first, or after an added token,
 * is dropped; byte tokens become their byte; special tokens their text).
 * A byte-level token may end inside a UTF-8 character: to print a stream,
 * use kiln_detokenizer. *len receives the length; the pointer is borrowed
 * from the tokenizer. Returns NULL for an id outside the vocabulary. */
KILN_API const char *kiln_tokenizer_decode(const kiln_tokenizer *tok, int prev, int id,
                                           size_t *len);

/* Streaming decode that never splits a UTF-8 character: each push returns
 * the bytes that end on a whole character, holding back the start of an
 * unfinished one until a later token completes it (bytes that can never
 * become a valid character are let out as they are). The concatenation of
 * every push and the final flush is exactly the concatenation of the
 * pieces. One detokenizer per stream; it borrows the tokenizer. */
typedef struct kiln_detokenizer kiln_detokenizer;
KILN_API kiln_status kiln_detokenizer_create(const kiln_tokenizer *tok, kiln_detokenizer **out);
/* The bytes ready after token `id` (*len may be 0), valid until the next
 * call; NULL for an id outside the vocabulary (nothing changes then). */
KILN_API const char *kiln_detokenizer_push(kiln_detokenizer *d, int id, size_t *len);
/* What is held back (an unfinished character at the end), then empty. */
KILN_API const char *kiln_detokenizer_flush(kiln_detokenizer *d, size_t *len);
KILN_API void kiln_detokenizer_free(kiln_detokenizer *d);

/* ---- the LLM program contract -------------------------------------------- */

/* A kiln_llm is a program bound as a language model: its `prefill` and
 * `decode` methods, their inputs, the context, the vocabulary and the end
 * ids, found once. Every caller that feeds tokens through a program (the
 * generation loop, perplexity, bench, run, debug, compile --check) goes
 * through it, so the contract lives here and nowhere else.
 *
 * What a program must hold to bind (the compiler writes exactly this):
 *   metadata  llm.context_length  int: positions a session's cache holds
 *             llm.vocab_size      int: logits per token
 *             llm.end_token_ids   int array, optional: ids that end generation
 *   prefill   inputs  tokens      i32 [P], its one dimension dynamic (1..P)
 *                     pos         i32 [1]: position of tokens[0]; the rope
 *                                 position and the cache row of every token
 *                     all_logits  i32 [1], optional: 1 = logits of every row
 *             output 0 logits     f32 [T, vocab] when all_logits is 1, else
 *                                 [1, vocab] (the last row)
 *   decode    inputs  tokens i32 [1], pos i32 [1]; output 0 logits f32 [1, vocab]
 * M-RoPE programs (Qwen3-VL) add to both methods `rope_pos` i32 [T, 3], the
 * (time, height, width) rope position of each token, kept apart from the
 * cache row `pos`: after an image they differ. A vision tower adds to
 * prefill `visual` f32 [T, n_embd] and `visual_mask` i32 [T] (the rows
 * that take a visual token), `deepstack.K` f32 [T, n_embd] (K <
 * vision.deepstack_count), and a method `encode_image` (inputs pixels,
 * rope_pos [N, 2], interp_idx [N, 4], interp_w [N, 4]; outputs visual and
 * deepstack.K) with vision.* metadata. The handle sets all of these itself
 * (the image API below); text alone gets three equal streams and no
 * visual rows.
 * Any other input is refused at bind (KILN_ERR_UNSUPPORTED names it), never
 * left unset. How the program that comes next will bind, through an input
 * of its own name, so today's programs bind unchanged:
 *   - A backend whose prefill has a fixed size (NPU graphs are static):
 *     `tokens` i32 [P] with no dynamic dimension plus `n_tokens` i32 [1], the
 *     real count. The handle pads each chunk to P (repeating its last id),
 *     sets n_tokens, and hands on only the real rows; prefill_fixed says so.
 *
 * Ownership: a kiln_llm borrows its program (close the program after every
 * handle bound to it is freed) and is immutable once bound: thread-safe,
 * shared by any number of sessions of that program. The calls that run it
 * take the session: one session must not be used by two threads at once,
 * as kiln.h says. Errors follow kiln.h. */
typedef struct kiln_llm kiln_llm;

typedef struct kiln_llm_limits {
    int context;       /* positions the cache holds: prompt + generation */
    int vocab;         /* logits per token */
    int prefill_max;   /* most tokens one prefill call takes (longer inputs go in chunks) */
    int prefill_fixed; /* 1: every prefill call runs prefill_max rows (padded); 0 today */
    int all_logits;    /* 1: prefill can return the logits of every row */
} kiln_llm_limits;

/* Binds a program as above. KILN_ERR_FORMAT names what is missing or has
 * the wrong dtype or shape ("not an LLM program: method 'prefill' has no
 * input 'pos'"); KILN_ERR_UNSUPPORTED an input the handle does not know.
 * Free the handle with kiln_llm_free (NULL is a no-op). */
KILN_API kiln_status kiln_llm_bind(const kiln_program *program, kiln_llm **out);
KILN_API void kiln_llm_free(kiln_llm *llm);

KILN_API const kiln_program *kiln_llm_program(const kiln_llm *llm); /* borrowed */
/* Borrowed, lives as long as the handle. */
KILN_API const kiln_llm_limits *kiln_llm_get_limits(const kiln_llm *llm);
/* Method indices of the two methods (for a trace, an observer, a report). */
KILN_API int kiln_llm_prefill_method(const kiln_llm *llm);
KILN_API int kiln_llm_decode_method(const kiln_llm *llm);
/* The inputs the contract names, for a caller that sets a method's inputs
 * itself (`kiln run` records every call's inputs): the input's index in
 * its method, or -1 when the program has none (all_logits is optional). */
typedef enum kiln_llm_input {
    KILN_LLM_PREFILL_TOKENS = 0,
    KILN_LLM_PREFILL_POS = 1,
    KILN_LLM_PREFILL_ALL_LOGITS = 2,
    KILN_LLM_DECODE_TOKENS = 3,
    KILN_LLM_DECODE_POS = 4,
    /* M-RoPE programs (Qwen3-VL): i32 [tokens, 3], the (time, height,
     * width) rope positions, kept apart from the cache row `pos` */
    KILN_LLM_PREFILL_ROPE_POS = 5,
    KILN_LLM_DECODE_ROPE_POS = 6,
    /* vision-language programs: f32 [tokens, n_embd] visual tokens and
     * i32 [tokens] 1 where a row takes one (kiln_llm_prefill_images) */
    KILN_LLM_PREFILL_VISUAL = 7,
    KILN_LLM_PREFILL_VISUAL_MASK = 8,
} kiln_llm_input;
KILN_API int kiln_llm_input_index(const kiln_llm *llm, kiln_llm_input which);

/* The end ids (*n of them, maybe 0; borrowed), and whether `id` is one. */
KILN_API const int64_t *kiln_llm_end_ids(const kiln_llm *llm, int *n);
KILN_API int kiln_llm_is_end(const kiln_llm *llm, int32_t id);

/* The checks every run call makes before any work: n >= 1 ids at positions
 * start.. inside the context, each id in the vocabulary.
 * KILN_ERR_INVALID_ARG names the id or the count and the limit. */
KILN_API kiln_status kiln_llm_check_tokens(const kiln_llm *llm, const int32_t *ids, int n,
                                           int start);

/* Runs ids[0..n) through prefill at positions start.., in chunks of at most
 * `chunk` tokens (0 or more than prefill_max: prefill_max), and points
 * *logits (may be NULL) at the last token's logits [vocab]: borrowed from
 * the session, valid until its next execute. The cache must hold positions
 * 0..start-1; the rows start..start+n-1 are written. Nothing is reset. */
KILN_API kiln_status kiln_llm_prefill(kiln_session *session, const kiln_llm *llm,
                                      const int32_t *ids, int n, int start, int chunk,
                                      const float **logits);

/* kiln_llm_prefill with every row's logits: after each chunk, fn receives
 * the chunk's first index in ids, its length and its logits [len, vocab]
 * (borrowed for the call). A non-zero return stops with
 * KILN_ERR_CANCELLED. chunk as for kiln_llm_prefill.
 * KILN_ERR_UNSUPPORTED when the program's prefill has no all_logits. */
typedef int (*kiln_llm_rows_fn)(void *user, int first, int len, const float *logits);
KILN_API kiln_status kiln_llm_prefill_rows(kiln_session *session, const kiln_llm *llm,
                                           const int32_t *ids, int n, int start, int chunk,
                                           kiln_llm_rows_fn fn, void *user);

/* Runs one token through decode at position pos; *logits (may be NULL) as
 * for kiln_llm_prefill. */
KILN_API kiln_status kiln_llm_decode(kiln_session *session, const kiln_llm *llm, int32_t id,
                                     int pos, const float **logits);

/* Runs one token through decode at cache row pos with rope position
 * pos + rope_delta in every stream (what kiln_llm_prefill_images returned);
 * kiln_llm_decode is rope_delta 0. A non-zero delta on a program without
 * M-RoPE is KILN_ERR_INVALID_ARG. */
KILN_API kiln_status kiln_llm_decode_rope(kiln_session *session, const kiln_llm *llm, int32_t id,
                                          int pos, int rope_delta, const float **logits);

/* ---- images (vision-language programs) ----------------------------------- */

/* A program with an `encode_image` method (Qwen3-VL). The prompt marks each
 * image as vision_start, image_token x tokens, vision_end; the image's
 * pixels are patches of channels x temporal_patch x patch x patch values
 * (the Hugging Face processor's pixel_values rows), grid_t x grid_h x grid_w
 * of them, each merge x merge block consecutive. */
typedef struct kiln_llm_vision {
    int patch, temporal_patch, merge, channels;
    int max_patches; /* most patches one image may have */
    int32_t image_token, vision_start, vision_end;
    int n_embd;      /* width of a visual token */
    int n_deepstack; /* features per visual token added into the first text layers */
    /* The image processor (the checkpoint's preprocessor_config.json), as
     * kiln_llm_encode_rgb applies it: an image is resized to multiples of
     * patch x merge within min_pixels..max_pixels (max_pixels here is also
     * capped at what max_patches allows), then each value x becomes
     * (x * rescale - mean[c]) / std[c]. */
    int64_t min_pixels, max_pixels;
    float rescale, mean[3], std[3];
} kiln_llm_vision;

/* Borrowed, lives as long as the handle; NULL for a text-only program. */
KILN_API const kiln_llm_vision *kiln_llm_get_vision(const kiln_llm *llm);
KILN_API int kiln_llm_encode_method(const kiln_llm *llm); /* -1 when text-only */

/* An image encoded once: its visual tokens and DeepStack features, owned by
 * the caller, valid for any session of the handle's program, reused across
 * turns and prefills. */
typedef struct kiln_llm_image kiln_llm_image;

/* Runs encode_image on pixels [grid_t grid_h grid_w, channels temporal_patch
 * patch^2]. KILN_ERR_INVALID_ARG when the grid is not whole merge blocks or
 * holds more than max_patches patches, or the program is text-only. */
KILN_API kiln_status kiln_llm_encode_image(kiln_session *session, const kiln_llm *llm,
                                           const float *pixels, int grid_t, int grid_h, int grid_w,
                                           kiln_llm_image **out);
/* An 8-bit RGB image, h x w x 3 bytes row by row, through the image
 * processor (kiln_llm_vision: resize, rescale, normalise, patchify, as
 * transformers' Qwen2-VL/Qwen3-VL processor does it) and encode_image.
 * KILN_ERR_INVALID_ARG for a side < 1, an aspect ratio over 200 (the
 * processor refuses those too) or a text-only program. */
KILN_API kiln_status kiln_llm_encode_rgb(kiln_session *session, const kiln_llm *llm,
                                         const uint8_t *rgb, int h, int w, kiln_llm_image **out);
/* The grid it was encoded at, in patches. */
KILN_API void kiln_llm_image_grid(const kiln_llm_image *image, int *grid_t, int *grid_h,
                                  int *grid_w);
/* The image tokens it takes in a prompt: grid_t grid_h grid_w / merge^2. */
KILN_API int kiln_llm_image_tokens(const kiln_llm_image *image);
KILN_API void kiln_llm_image_free(kiln_llm_image *image); /* NULL is a no-op */

/* kiln_llm_prefill for ids[0..n) holding images[0..n_images) as runs of
 * image_token, in order. The rope positions follow transformers' Qwen3-VL:
 * text counts up, an image's tokens take (t, row, col) over its merged
 * grid from where the text was, and the text after it goes on from the
 * largest of those + 1. *rope_delta holds on entry what the cache rows
 * 0..start-1 left (0 for a fresh context) and on return the delta for the
 * rows after these (pass it to kiln_llm_decode_rope and the next prefill).
 * A chunk may split an image: the result is the same. KILN_ERR_INVALID_ARG
 * when the image tokens do not match the images (count or run length) or
 * an image belongs to another program. n_images 0 is text (also on a
 * text-only program, with *rope_delta 0). */
KILN_API kiln_status kiln_llm_prefill_images(kiln_session *session, const kiln_llm *llm,
                                             const int32_t *ids, int n, int start,
                                             kiln_llm_image *const *images, int n_images, int chunk,
                                             int *rope_delta, const float **logits);

/* ---- generation --------------------------------------------------------- */

/* Sampling follows llama.cpp's default sampler chain, with its defaults
 * (kiln_generate_options_init): the repeat penalty over the last
 * repeat_last_n tokens of the context (prompt included), then top-k, top-p,
 * min-p, temperature, and a draw from the resulting distribution.
 * Temperature 0 is greedy: the argmax of the raw logits (ties to the lowest
 * id), whatever the other settings. Out-of-range values are
 * KILN_ERR_INVALID_ARG, with a message naming the option and value. */
typedef struct kiln_generate_options {
    int n_predict;     /* most new tokens (the context caps them too: see
                        * kiln_generate_result.stopped_at_context); -1 = until an end
                        * token or the context is full */
    float temperature; /* >= 0; default 0.8; 0 = greedy (ties to the lowest id; only the
                        * repeat penalty applies before it, as in llama.cpp) */
    uint64_t seed;     /* sampler seed; default 1 (0 is taken as a fixed non-zero state) */
    /* Called for each generated token (not for end tokens); return non-zero
     * to stop. May be NULL. */
    int (*on_token)(void *user, int32_t id);
    void *user;
    int top_k;            /* keep the k most likely tokens; >= 0, default 40, 0 = off */
    float top_p;          /* keep the fewest most likely tokens whose probability
                           * sums to top_p; 0 < top_p <= 1, default 0.95, 1 = off */
    float min_p;          /* drop tokens less likely than min_p times the most
                           * likely one; 0..1, default 0.05, 0 = off */
    float repeat_penalty; /* > 0, default 1.0 = off: each distinct token among the
                           * last repeat_last_n has a positive logit divided by it,
                           * any other multiplied by it */
    int repeat_last_n;    /* the penalty's window; >= -1, default 64, 0 = off,
                           * -1 = the whole context */
    int ignore_eos;       /* 1: end tokens do not stop generation (they are kept and
                           * decoded like any other: benchmarks over a fixed count);
                           * default 0 */
} kiln_generate_options;

/* Sets every option to its default (above). */
KILN_API void kiln_generate_options_init(kiln_generate_options *options);

typedef struct kiln_generate_result {
    int n_prompt;       /* prompt tokens processed */
    int n_generated;    /* tokens generated (end token not counted) */
    int stopped_at_end; /* 1 when an end token stopped generation */
    double prefill_ms;  /* the prompt through prefill */
    double decode_ms;   /* from the end of prefill to the end of generation */
    double ttft_ms;     /* time to first token: from the start of prefill until
                         * the first new token is chosen (0 when none is) */
    double sampling_ms; /* time spent choosing tokens (part of the above) */
    int n_past;         /* positions the session's cache holds after the call: the
                         * prompt, then every generated token that went through
                         * decode (an end token and the last token of a run cut
                         * short by n_predict, on_token or the context do not) */

    /* 1 when the context ended generation: every position was taken (prompt
     * + generated = the context) before an end token, and n_predict was -1
     * or asked for more. */
    int stopped_at_context;
} kiln_generate_result;

/* Runs a prompt through `prefill` (in chunks no longer than the method
 * allows) and generates with `decode`, starting from position 0 of a session
 * that this call resets first. A prompt longer than the context is
 * KILN_ERR_INVALID_ARG before any work. Generation ends at an end token,
 * after n_predict tokens, when on_token asks, or when the context is full
 * (prompt + generated tokens = the context; result->stopped_at_context then
 * says so), whichever comes first: an n_predict past the context generates
 * what fits, as llama.cpp stops at its context. A prompt that fills the
 * context exactly generates nothing (stopped_at_context, unless n_predict
 * is 0). */
KILN_API kiln_status kiln_generate(kiln_session *session, const int32_t *prompt, int n_prompt,
                                   const kiln_generate_options *options,
                                   kiln_generate_result *result);

/* Continues a session without resetting it: runs the `n_new` ids through
 * prefill at positions start_pos.. (the cache must hold positions
 * 0..start_pos-1, e.g. result->n_past of an earlier call on this session),
 * then generates as kiln_generate does. start_pos may also be below what
 * the cache holds, to rewind it (keep a common prefix, replace the rest):
 * the rows from start_pos on are overwritten before they are read, since
 * attention at position p reads rows 0..p only. start_pos 0 resets the
 * session first, which makes it kiln_generate. The repeat penalty's window
 * sees only this call's ids and tokens. result->n_prompt is n_new.
 * start_pos + n_new past the context is KILN_ERR_INVALID_ARG before any
 * work; generation stops at the context as kiln_generate's does. Used for
 * multi-turn chat, where each turn prefills only what the new render does
 * not share with the cache. */
KILN_API kiln_status kiln_generate_continue(kiln_session *session, const int32_t *new_ids,
                                            int n_new, int start_pos,
                                            const kiln_generate_options *options,
                                            kiln_generate_result *result);

/* kiln_generate_continue for a prompt holding images (a vision-language
 * program): ids[0..n_prompt) hold images[0..n_images) as runs of
 * image_token, in order (kiln_llm_prefill_images), and decode carries the
 * rope delta. *rope_delta holds on entry the delta the cache rows before
 * start_pos left (ignored when start_pos is 0) and on return the one after
 * this prompt (generated tokens do not change it); NULL when the caller
 * keeps none (a fresh prompt). n_images 0 and rope_delta NULL is
 * kiln_generate_continue. */
KILN_API kiln_status kiln_generate_images(kiln_session *session, const int32_t *prompt,
                                          int n_prompt, int start_pos,
                                          kiln_llm_image *const *images, int n_images,
                                          int *rope_delta, const kiln_generate_options *options,
                                          kiln_generate_result *result);

/* The checks kiln_generate makes before any work (the prompt fits the
 * context, ids, options), so a caller can validate before printing
 * anything. */
KILN_API kiln_status kiln_generate_check(const kiln_program *program, const int32_t *prompt,
                                         int n_prompt, const kiln_generate_options *options);

/* ---- chat formats ------------------------------------------------------- */

/* Chat formats Kiln renders in C (no Jinja engine), each byte for byte what
 * the checkpoint's own template renders through transformers'
 * apply_chat_template for system/user/assistant messages (no tool
 * definitions, no tool calls):
 *   CHATML  "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message;
 *   SMOLLM2 ChatML, with SmolLM2's default system message ("You are a
 *           helpful AI assistant named SmolLM, trained by Hugging Face")
 *           when the first message is not a system one;
 *   QWEN3   ChatML as Qwen3's template renders it: the first system message
 *           leads, assistant history loses its <think> part except after
 *           the last user message; enable_thinking == 0 follows the
 *           generation prompt with "<think>\n\n</think>\n\n";
 *   LLAMA3  <|begin_of_text|>, then <|start_header_id|>ROLE<|end_header_id|>
 *           "\n\n" + trimmed content + <|eot_id|>; the assistant header
 *           always ends it (Meta's Llama-3 template adds it unconditionally);
 *   LLAMA31 Llama-3.1 and 3.3: <|begin_of_text|>, a system block that is
 *           always there: "<|start_header_id|>system<|end_header_id|>\n\n"
 *           "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n"
 *           + the first system message trimmed (if any) + <|eot_id|>; then
 *           the other messages as LLAMA3 renders them, and the assistant
 *           header when add_generation_prompt is set. A "tool" or "ipython"
 *           message (a tool result) becomes
 *           "<|start_header_id|>ipython<|end_header_id|>\n\n" + its content
 *           as a JSON string (the template applies tojson to it: quotes,
 *           backslashes and control characters escaped) + <|eot_id|>.
 *           DATE is "26 Jul 2024" unless overridden (kiln_chat_options.date);
 *   LLAMA32 Llama-3.2: LLAMA31 with today's date ("02 Dec 2026": the
 *           template's strftime_now("%d %b %Y"), local time, English month
 *           names) unless overridden;
 *   QWEN3VL Qwen3-VL Instruct: ChatML, the first system message leading and
 *           later system messages dropped (the template's loop renders only
 *           user and assistant messages);
 *   QWEN3VL_THINKING  Qwen3-VL Thinking: QWEN3's rendering, whose
 *           generation prompt always opens a think block:
 *           "<|im_start|>assistant\n<think>\n".
 * Images are the caller's: a message's content holds the placeholder
 * (kiln_chat_format_image_placeholder) where each image goes, as the
 * templates render image parts.
 * Trimming is Jinja's (Python's str.strip(): Unicode whitespace too).
 * Thread-safe: no state (LLAMA31/32 read the environment variable
 * KILN_CHAT_DATE and the clock). */
typedef enum kiln_chat_format {
    KILN_CHAT_NONE = 0,
    KILN_CHAT_CHATML = 1,
    KILN_CHAT_SMOLLM2 = 2,
    KILN_CHAT_QWEN3 = 3,
    KILN_CHAT_LLAMA3 = 4,
    KILN_CHAT_LLAMA31 = 5, /* also Llama-3.3 */
    KILN_CHAT_LLAMA32 = 6,
    KILN_CHAT_QWEN3VL = 7,
    KILN_CHAT_QWEN3VL_THINKING = 8,
} kiln_chat_format;

typedef struct kiln_chat_message {
    const char *role;    /* "system", "user" or "assistant"; LLAMA31/32 also
                          * "tool" or "ipython" (a tool's result) */
    const char *content; /* UTF-8, NUL-terminated */
} kiln_chat_message;

/* The format a Jinja chat template's text belongs to, found from
 * distinctive substrings (SmolLM2's default system message, Qwen3's
 * enable_thinking, Llama-3's header tokens, with "Cutting Knowledge Date"
 * for 3.1+ and strftime_now for 3.2's dated variant, ChatML's
 * <|im_start|>). A template Kiln cannot match is KILN_ERR_UNSUPPORTED,
 * with a message saying what was found in it. */
KILN_API kiln_status kiln_chat_format_detect(const char *template_text, kiln_chat_format *out);

/* kiln_chat_format_detect on the program's "tokenizer.chat_template";
 * KILN_ERR_UNSUPPORTED when the program stores none. */
KILN_API kiln_status kiln_chat_format_from_program(const kiln_program *program,
                                                   kiln_chat_format *out);

/* "chatml", "smollm2", "qwen3", "llama3", "llama3.1", "llama3.2",
 * "llama3.3" (= LLAMA31), "qwen3vl" and "qwen3vl-thinking" to a format;
 * other names are KILN_ERR_INVALID_ARG. */
KILN_API kiln_status kiln_chat_format_from_name(const char *name, kiln_chat_format *out);
/* The name of a format ("none" for KILN_CHAT_NONE or unknown values); static. */
KILN_API const char *kiln_chat_format_name(kiln_chat_format format);
/* The text a format's template writes for an image part
 * ("<|vision_start|><|image_pad|><|vision_end|>" for QWEN3VL and
 * QWEN3VL_THINKING), or NULL for a format without images; static. */
KILN_API const char *kiln_chat_format_image_placeholder(kiln_chat_format format);

typedef struct kiln_chat_options {
    int add_generation_prompt; /* end with the assistant's generation prompt; default 1
                                * (LLAMA3 adds it whatever this says, as its template does) */
    int enable_thinking;       /* QWEN3 only; default 1; 0: the empty think block */
    const char *date;          /* LLAMA31/32's "Today Date" (the templates' date_string,
                                * e.g. "26 Jul 2024"), 1 to 63 bytes, no control characters.
                                * NULL (default): the environment variable KILN_CHAT_DATE
                                * when set and non-empty, else the format's own date */
} kiln_chat_options;

/* Sets every option to its default (above). */
KILN_API void kiln_chat_options_init(kiln_chat_options *options);

/* Renders `n` messages as the format does. *out receives a NUL-terminated
 * string the caller frees with kiln_chat_free, *len (may be NULL) its
 * length. A role the format does not render is KILN_ERR_UNSUPPORTED; a bad
 * date (options or KILN_CHAT_DATE) is KILN_ERR_INVALID_ARG. */
KILN_API kiln_status kiln_chat_render_with(kiln_chat_format format, const kiln_chat_message *msgs,
                                           int n, const kiln_chat_options *options, char **out,
                                           size_t *len);

/* kiln_chat_render_with with the default options but these two. */
KILN_API kiln_status kiln_chat_render(kiln_chat_format format, const kiln_chat_message *msgs, int n,
                                      int add_generation_prompt, int enable_thinking, char **out,
                                      size_t *len);
KILN_API void kiln_chat_free(char *s); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif /* KILN_LLM_H */
