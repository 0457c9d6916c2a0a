/* sampler.c: greedy and temperature sampling. */
#include <math.h>

#include "llm/sampler.h"

int kiln_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

uint32_t kiln_rng_u32(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}

float kiln_rng_f32(uint64_t *s) { return (float)(kiln_rng_u32(s) >> 8) / 16777216.0f; }

int kiln_sample(const float *logits, int n, float temperature, uint64_t *rng, float *probs) {
    if (temperature <= 0.0f) return kiln_argmax(logits, n);
    float max = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        probs[i] = expf((logits[i] - max) / temperature);
        sum += probs[i];
    }
    float r = kiln_rng_f32(rng) * (float)sum, acc = 0.0f;
    for (int i = 0; i < n; i++) {
        acc += probs[i];
        if (r < acc) return i;
    }
    return kiln_argmax(logits, n); /* rounding left r at the very top */
}
