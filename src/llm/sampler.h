/* sampler.h: choosing the next token from logits. */
#ifndef KILN_LLM_SAMPLER_H
#define KILN_LLM_SAMPLER_H

#include <stdint.h>

/* Index of the largest logit; ties go to the lowest index. */
int kiln_argmax(const float *logits, int n);
/* xorshift* generator, as llama2.c's run.c. */
uint32_t kiln_rng_u32(uint64_t *state);
float kiln_rng_f32(uint64_t *state); /* in [0, 1) */
/* Samples from softmax(logits / temperature); temperature 0 is argmax.
 * `probs` is scratch of n floats. */
int kiln_sample(const float *logits, int n, float temperature, uint64_t *rng, float *probs);

#endif
