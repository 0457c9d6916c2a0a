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

/* Loads the tokenizer stored in a program. The tokenizer is independent of
 * the program afterwards; free it with kiln_tokenizer_free. Thread-safe to
 * use from many threads once made. */
kiln_status kiln_tokenizer_from_program(const kiln_program *program, kiln_tokenizer **out);

/* Loads a llama2.c `tokenizer.bin` holding `vocab_size` pieces. */
kiln_status kiln_tokenizer_load_llama2c(const char *path, int vocab_size, kiln_tokenizer **out);

void kiln_tokenizer_free(kiln_tokenizer *tok);

int kiln_tokenizer_vocab_size(const kiln_tokenizer *tok);
int kiln_tokenizer_bos(const kiln_tokenizer *tok); /* -1 when none */
int kiln_tokenizer_eos(const kiln_tokenizer *tok); /* -1 when none */

/* Encodes `len` bytes of text. add_bos: put the BOS token first. Writes at
 * most `cap` ids to `ids` and the count needed to *n_ids; when the count is
 * over `cap` it returns KILN_ERR_INVALID_ARG (call again with a bigger
 * buffer). */
kiln_status kiln_tokenizer_encode(const kiln_tokenizer *tok, const char *text, size_t len,
                                  int add_bos, int32_t *ids, int cap, int *n_ids);

/* The bytes token `id` decodes to when it follows `prev` (-1: none), by the
 * tokenizer's rules (a leading space after BOS is dropped, byte tokens become
 * their byte). *len receives the length; the pointer is borrowed from the
 * tokenizer. Returns NULL for an id outside the vocabulary. */
const char *kiln_tokenizer_decode(const kiln_tokenizer *tok, int prev, int id, size_t *len);

/* ---- generation --------------------------------------------------------- */

typedef struct kiln_generate_options {
    int n_predict;        /* most new tokens; -1 = until an end token or the context is full */
    float temperature;    /* 0 = greedy (ties to the lowest id) */
    uint64_t seed;        /* sampler seed */
    /* Called for each generated token (not for end tokens); return non-zero
     * to stop. May be NULL. */
    int (*on_token)(void *user, int32_t id);
    void *user;
} kiln_generate_options;

void kiln_generate_options_init(kiln_generate_options *options);

typedef struct kiln_generate_result {
    int n_prompt;    /* prompt tokens processed */
    int n_generated; /* tokens generated (end token not counted) */
    int stopped_at_end; /* 1 when an end token stopped generation */
    double prefill_ms, decode_ms;
} kiln_generate_result;

/* Runs a prompt through `prefill` (in chunks no longer than the method
 * allows) and generates with `decode`, starting from position 0 of a session
 * that this call resets first. A prompt longer than the context, or an
 * explicit n_predict that would take prompt + generation past it, is
 * KILN_ERR_INVALID_ARG before any work. */
kiln_status kiln_generate(kiln_session *session, const int32_t *prompt, int n_prompt,
                          const kiln_generate_options *options, kiln_generate_result *result);

/* The checks kiln_generate makes before any work (context, ids, options),
 * so a caller can validate before printing anything. */
kiln_status kiln_generate_check(const kiln_program *program, const int32_t *prompt, int n_prompt,
                                const kiln_generate_options *options);

#ifdef __cplusplus
}
#endif
#endif /* KILN_LLM_H */
