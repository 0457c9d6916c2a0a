/* sampler.c: greedy and llama.cpp-ordered sampling (repeat penalty, top-k,
 * top-p, min-p, temperature, then a draw from the distribution). Scratch is
 * allocated once per sampler; choosing a token allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
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

float kiln_rng_f32(uint64_t *s) {
    return (float)(kiln_rng_u32(s) >> 8) / 16777216.0f;
}

kiln_status kiln_sampler_init(kiln_sampler *s, const kiln_sampler_params *params, int n_vocab,
                              uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->params = *params;
    s->n_vocab = n_vocab;
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    /* Plain argmax needs no scratch. */
    if (params->temperature <= 0.0f && params->repeat_penalty == 1.0f) return KILN_OK;
    s->cand = kiln_malloc(sizeof *s->cand * (size_t)n_vocab);
    s->seen = kiln_calloc((size_t)n_vocab, 1);
    if (!s->cand || !s->seen) {
        kiln_sampler_free(s);
        return kiln_error(KILN_ERR_NOMEM, "out of memory for the sampler's scratch (%d tokens)",
                          n_vocab);
    }
    return KILN_OK;
}

void kiln_sampler_free(kiln_sampler *s) {
    kiln_free(s->cand);
    kiln_free(s->seen);
    s->cand = NULL;
    s->seen = NULL;
}

/* Larger logit first; equal logits by lower id, so the order is total and
 * the result does not depend on qsort's (unstable) algorithm. */
static int before(const kiln_candidate *a, const kiln_candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb) {
    const kiln_candidate *a = pa, *b = pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Moves the k best candidates of c[0..n) to c[0..k) (in no order):
 * quickselect, O(n) on average. */
static void select_top(kiln_candidate *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        kiln_candidate pivot = c[lo + (hi - lo) / 2], t;
        int i = lo, j = hi;
        while (i <= j) {
            while (i <= hi && before(&c[i], &pivot))
                i++; /* bounds: NaN logits order nothing */
            while (j >= lo && before(&pivot, &c[j]))
                j--;
            if (i <= j) {
                t = c[i], c[i] = c[j], c[j] = t;
                i++, j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

int kiln_sampler_sample(kiln_sampler *s, const float *logits, const int32_t *recent, int n_recent) {
    const kiln_sampler_params *p = &s->params;
    int n = s->n_vocab;
    if (p->temperature <= 0.0f && p->repeat_penalty == 1.0f) return kiln_argmax(logits, n);
    kiln_candidate *c = s->cand;
    for (int i = 0; i < n; i++) {
        c[i].logit = logits[i];
        c[i].id = i;
    }
    /* Repeat penalty, once per distinct id in the window. */
    if (p->repeat_penalty != 1.0f) {
        for (int i = 0; i < n_recent; i++) {
            int32_t t = recent[i];
            if (t < 0 || t >= n || s->seen[t]) continue;
            s->seen[t] = 1;
            c[t].logit =
                c[t].logit > 0 ? c[t].logit / p->repeat_penalty : c[t].logit * p->repeat_penalty;
        }
        for (int i = 0; i < n_recent; i++)
            if (recent[i] >= 0 && recent[i] < n) s->seen[recent[i]] = 0;
    }
    /* Greedy: as llama.cpp, penalties come first, then the best (lowest id
     * on ties); top-k/p and min-p cannot change the best candidate. */
    if (p->temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        return best;
    }
    /* Top-k, then sort what is left, best first. */
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (k < n) select_top(c, n, k);
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
    /* Top-p: the fewest best candidates whose probability (softmax over the
     * top-k at temperature 1) reaches top_p. */
    float max = c[0].logit;
    if (p->top_p < 1.0f) {
        double sum = 0, cum = 0;
        for (int i = 0; i < k; i++)
            sum += exp((double)c[i].logit - max);
        for (int i = 0; i < k; i++) {
            cum += exp((double)c[i].logit - max) / sum;
            if (cum >= p->top_p) {
                k = i + 1;
                break;
            }
        }
    }
    /* Min-p: probability at least min_p times the best one's, i.e. a logit
     * at least max + log(min_p). */
    if (p->min_p > 0.0f) {
        float floor_logit = max + logf(p->min_p);
        int keep = 1;
        while (keep < k && c[keep].logit >= floor_logit)
            keep++;
        k = keep;
    }
    /* Temperature, then a draw from softmax(logit / temperature). */
    double sum = 0;
    for (int i = 0; i < k; i++) {
        c[i].logit = (float)exp(((double)c[i].logit - max) / p->temperature);
        sum += c[i].logit;
    }
    double r = kiln_rng_f32(&s->rng) * sum, acc = 0;
    for (int i = 0; i < k; i++) {
        acc += c[i].logit;
        if (r < acc) return c[i].id;
    }
    return c[k - 1].id; /* rounding left r at the very top */
}
