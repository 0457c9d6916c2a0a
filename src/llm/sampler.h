/* sampler.h: choosing the next token from logits, with llama.cpp's default
 * chain: repeat penalty -> top-k -> top-p -> min-p -> temperature -> draw. */
#ifndef KILN_LLM_SAMPLER_H
#define KILN_LLM_SAMPLER_H

#include <stdint.h>

#include "kiln/kiln.h"

/* Index of the largest logit; ties go to the lowest index. */
int kiln_argmax(const float *logits, int n);
/* xorshift* generator, as llama2.c's run.c. */
uint32_t kiln_rng_u32(uint64_t *state);
float kiln_rng_f32(uint64_t *state); /* in [0, 1) */

typedef struct {
    float temperature;    /* 0 = argmax of the raw logits, nothing else applied */
    int top_k;            /* 0 = off */
    float top_p;          /* (0, 1]; 1 = off */
    float min_p;          /* [0, 1]; 0 = off */
    float repeat_penalty; /* > 0; 1 = off */
} kiln_sampler_params;

typedef struct {
    float logit;
    int32_t id;
} kiln_candidate;

/* A sampler owns its scratch (a candidate per vocabulary entry and a mark
 * per id), allocated once by init: sampling allocates nothing. */
typedef struct {
    kiln_sampler_params params;
    int n_vocab;
    uint64_t rng;
    kiln_candidate *cand; /* [n_vocab] */
    unsigned char *seen;  /* [n_vocab], all 0 between calls */
} kiln_sampler;

/* seed 0 is replaced by a fixed non-zero state (xorshift needs one). */
kiln_status kiln_sampler_init(kiln_sampler *s, const kiln_sampler_params *params, int n_vocab,
                              uint64_t seed);
void kiln_sampler_free(kiln_sampler *s); /* also after a failed init */

/* The next token from logits[n_vocab]. `recent` holds the last n_recent
 * tokens of the context (the repeat penalty's window; each distinct id is
 * penalised once: a positive logit divided by the penalty, another
 * multiplied by it). */
int kiln_sampler_sample(kiln_sampler *s, const float *logits, const int32_t *recent, int n_recent);

#endif
