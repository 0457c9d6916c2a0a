/* generate.c: the generation loop on a kiln_llm (llm.c): the prompt through
 * prefill in chunks, then one decode per token. Everything is checked
 * before any work. */
#include <math.h>
#include <string.h>

#include "kiln/kiln_llm.h"
#include "base/base.h"
#include "llm/sampler.h"

void kiln_generate_options_init(kiln_generate_options *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->temperature = 0.8f;
    o->seed = 1;
    o->top_k = 40;
    o->top_p = 0.95f;
    o->min_p = 0.05f;
    o->repeat_penalty = 1.0f;
    o->repeat_last_n = 64;
}

/* kiln_generate_check for ids that go in at start_pos. */
static kiln_status check_at(const kiln_llm *lm, const int32_t *prompt, int n_prompt, int start,
                            const kiln_generate_options *o) {
    kiln_status st = kiln_llm_check_tokens(lm, prompt, n_prompt, start);
    if (st) return st;
    if (o->n_predict < -1)
        return kiln_error(KILN_ERR_INVALID_ARG, "n_predict %d: use -1 (no limit) or a count >= 0",
                          o->n_predict);
    if (!(o->temperature >= 0.0f))
        return kiln_error(KILN_ERR_INVALID_ARG, "temperature %g must be a number >= 0",
                          (double)o->temperature);
    if (o->top_k < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "top_k %d must be >= 0 (0 = off)", o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return kiln_error(KILN_ERR_INVALID_ARG, "top_p %g must be in (0, 1] (1 = off)",
                          (double)o->top_p);
    if (!(o->min_p >= 0.0f && o->min_p <= 1.0f))
        return kiln_error(KILN_ERR_INVALID_ARG, "min_p %g must be in [0, 1] (0 = off)",
                          (double)o->min_p);
    if (!(o->repeat_penalty > 0.0f) || isinf(o->repeat_penalty))
        return kiln_error(KILN_ERR_INVALID_ARG, "repeat_penalty %g must be a number > 0 (1 = off)",
                          (double)o->repeat_penalty);
    if (o->repeat_last_n < -1)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "repeat_last_n %d must be >= -1 (-1 = the whole context, 0 = off)",
                          o->repeat_last_n);
    return KILN_OK;
}

kiln_status kiln_generate_check(const kiln_program *p, const int32_t *prompt, int n_prompt,
                                const kiln_generate_options *o) {
    kiln_llm *lm;
    kiln_status st = kiln_llm_bind(p, &lm);
    if (st) return st;
    st = check_at(lm, prompt, n_prompt, 0, o);
    kiln_llm_free(lm);
    return st;
}

kiln_status kiln_generate_images(kiln_session *s, const int32_t *prompt, int n_prompt, int start,
                                 kiln_llm_image *const *images, int n_images, int *rope_delta,
                                 const kiln_generate_options *o, kiln_generate_result *res) {
    memset(res, 0, sizeof *res);
    int delta = rope_delta && start > 0 ? *rope_delta : 0;
    kiln_llm *lm;
    kiln_status st = kiln_llm_bind(kiln_session_program(s), &lm);
    if (st) return st;
    if ((st = check_at(lm, prompt, n_prompt, start, o))) {
        kiln_llm_free(lm);
        return st;
    }
    const int ctx = kiln_llm_get_limits(lm)->context, vocab = kiln_llm_get_limits(lm)->vocab;
    /* n_predict is the most new tokens; the context caps them too (the
     * prompt and every generated token take a position each). */
    const int room = ctx - start - n_prompt;
    const int limit = o->n_predict >= 0 && o->n_predict < room ? o->n_predict : room;
    kiln_sampler_params sp = {o->temperature, o->top_k, o->top_p, o->min_p, o->repeat_penalty};
    kiln_sampler smp;
    /* This call's context (prompt, then generated tokens; history[i] is
     * position start + i): the repeat penalty's window is its tail. Only
     * kept when the penalty is on. */
    int window = o->repeat_last_n < 0 ? ctx : o->repeat_last_n;
    int track = o->temperature > 0 && o->repeat_penalty != 1.0f && window > 0;
    int32_t *history = NULL;
    if ((st = kiln_sampler_init(&smp, &sp, vocab, o->seed))) {
        kiln_llm_free(lm);
        return st;
    }
    if (track && !(history = kiln_malloc(sizeof *history * (size_t)ctx))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (history) memcpy(history, prompt, sizeof *history * (size_t)n_prompt);
    if (start == 0 && (st = kiln_session_reset(s))) goto done;
    double t0 = kiln_now_ms();
    const float *logits;
    if ((st = kiln_llm_prefill_images(s, lm, prompt, n_prompt, start, images, n_images, 0, &delta,
                                      &logits)))
        goto done;
    if (rope_delta) *rope_delta = delta;
    res->n_prompt = n_prompt;
    double t1 = kiln_now_ms();
    res->prefill_ms = t1 - t0;
    int pos = start + n_prompt;
    res->n_past = pos;
    while (res->n_generated < limit) {
        int n_hist = track ? pos - start : 0;
        int n_recent = n_hist < window ? n_hist : window;
        double ts = kiln_now_ms();
        int next = kiln_sampler_sample(&smp, logits, history ? history + n_hist - n_recent : NULL,
                                       n_recent);
        double te = kiln_now_ms();
        res->sampling_ms += te - ts;
        if (res->n_generated == 0 && res->ttft_ms == 0) res->ttft_ms = te - t0;
        if (!o->ignore_eos && kiln_llm_is_end(lm, next)) {
            res->stopped_at_end = 1;
            break;
        }
        res->n_generated++;
        if (history && pos < ctx) history[pos - start] = next;
        if (o->on_token && o->on_token(o->user, next)) break;
        if (res->n_generated == limit || pos >= ctx)
            break; /* the last token needs no forward pass */
        if ((st = kiln_llm_decode_rope(s, lm, next, pos, delta, &logits))) goto done;
        pos++;
        res->n_past = pos;
    }
    res->decode_ms = kiln_now_ms() - t1;
    /* The context, not n_predict or an end token, ended the answer. */
    res->stopped_at_context = !res->stopped_at_end && res->n_generated == room &&
                              (o->n_predict < 0 || o->n_predict > room);
done:
    kiln_free(history);
    kiln_sampler_free(&smp);
    kiln_llm_free(lm);
    return st;
}

kiln_status kiln_generate_continue(kiln_session *s, const int32_t *prompt, int n_prompt, int start,
                                   const kiln_generate_options *o, kiln_generate_result *res) {
    return kiln_generate_images(s, prompt, n_prompt, start, NULL, 0, NULL, o, res);
}

kiln_status kiln_generate(kiln_session *s, const int32_t *prompt, int n_prompt,
                          const kiln_generate_options *o, kiln_generate_result *res) {
    return kiln_generate_continue(s, prompt, n_prompt, 0, o, res);
}
