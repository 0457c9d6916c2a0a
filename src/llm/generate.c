/* generate.c: the generation loop. The prompt goes through `prefill` in
 * chunks no longer than the method takes, then one `decode` per token. The
 * context is checked before any work. */
#include <math.h>
#include <string.h>

#include "kiln/kiln_llm.h"
#include "llm/sampler.h"
#include "runtime/runtime.h"

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

/* Looks up the two LLM methods and their input indices. */
typedef struct {
    int prefill, decode;
    int pre_tokens, pre_pos, pre_all, dec_tokens, dec_pos; /* input indices, by name */
    int prefill_max, ctx, vocab;
    const int64_t *end_ids; /* tokens that end generation (from the program) */
    int n_end;
} llm_methods;

static kiln_status input_index(const kiln_program *p, int method, const char *name, int *index) {
    kiln_tensor_info info;
    for (int i = 0; i < kiln_method_input_count(p, method); i++)
        if (kiln_method_input_info(p, method, i, &info) == KILN_OK && !strcmp(info.name, name)) {
            *index = i;
            return KILN_OK;
        }
    return kiln_error(KILN_ERR_FORMAT, "not an LLM program: method '%s' has no input '%s'",
                      kiln_program_method_name(p, method), name);
}

static kiln_status find_methods(const kiln_program *p, llm_methods *lm) {
    kiln_status st;
    int64_t ctx, vocab;
    if ((st = kiln_program_find_method(p, "prefill", &lm->prefill)) ||
        (st = kiln_program_find_method(p, "decode", &lm->decode)))
        return kiln_error_wrap(st, "not an LLM program");
    if ((st = kiln_program_meta_int(p, "llm.context_length", &ctx)) ||
        (st = kiln_program_meta_int(p, "llm.vocab_size", &vocab)))
        return kiln_error_wrap(st, "not an LLM program");
    if ((st = input_index(p, lm->prefill, "tokens", &lm->pre_tokens)) ||
        (st = input_index(p, lm->prefill, "pos", &lm->pre_pos)) ||
        (st = input_index(p, lm->prefill, "all_logits", &lm->pre_all)) ||
        (st = input_index(p, lm->decode, "tokens", &lm->dec_tokens)) ||
        (st = input_index(p, lm->decode, "pos", &lm->dec_pos)))
        return st;
    const kiln_meta *end = kiln_meta_find(&p->mod, "llm.end_token_ids");
    lm->end_ids = end && end->type == KILN_META_INT_ARRAY ? end->ia : NULL;
    lm->n_end = lm->end_ids ? (int)end->n : 0;
    lm->prefill_max = p->mod.methods[lm->prefill].max_tokens;
    lm->ctx = (int)ctx;
    lm->vocab = (int)vocab;
    return KILN_OK;
}

/* Runs prefill on tokens[0..n) at pos in chunks; leaves the last token's
 * logits readable from the last chunk's output. */
static kiln_status prefill_chunks(kiln_session *s, const llm_methods *lm, const int32_t *tokens,
                                  int n, int pos, const float **logits) {
    int32_t zero = 0;
    int64_t one = 1;
    kiln_status st = kiln_session_set_input(s, lm->prefill, lm->pre_all, &zero, KILN_I32, 1, &one);
    for (int done = 0; !st && done < n;) {
        int chunk = n - done < lm->prefill_max ? n - done : lm->prefill_max;
        int64_t len = chunk;
        int32_t p = pos + done;
        if ((st = kiln_session_set_input(s, lm->prefill, lm->pre_tokens, tokens + done, KILN_I32, 1, &len)) ||
            (st = kiln_session_set_input(s, lm->prefill, lm->pre_pos, &p, KILN_I32, 1, &one)) ||
            (st = kiln_session_execute(s, lm->prefill)))
            return st;
        done += chunk;
    }
    if (st) return st;
    const void *out;
    st = kiln_session_get_output(s, lm->prefill, 0, &out, NULL, NULL, NULL);
    *logits = out;
    return st;
}

static kiln_status decode_one(kiln_session *s, const llm_methods *lm, int32_t token, int pos,
                              const float **logits) {
    int64_t one = 1;
    int32_t p = pos;
    kiln_status st;
    if ((st = kiln_session_set_input(s, lm->decode, lm->dec_tokens, &token, KILN_I32, 1, &one)) ||
        (st = kiln_session_set_input(s, lm->decode, lm->dec_pos, &p, KILN_I32, 1, &one)) ||
        (st = kiln_session_execute(s, lm->decode)))
        return st;
    const void *out;
    st = kiln_session_get_output(s, lm->decode, 0, &out, NULL, NULL, NULL);
    *logits = out;
    return st;
}

/* kiln_generate_check for ids that go in at start_pos. */
static kiln_status check_at(const kiln_program *p, const int32_t *prompt, int n_prompt, int start,
                            const kiln_generate_options *o) {
    llm_methods lm;
    kiln_status st = find_methods(p, &lm);
    if (st) return st;
    if (n_prompt < 1) return kiln_error(KILN_ERR_INVALID_ARG, "the prompt has no tokens");
    if (start < 0 || start >= lm.ctx)
        return kiln_error(KILN_ERR_INVALID_ARG, "start position %d is outside the context 0..%d", start, lm.ctx - 1);
    if ((int64_t)start + n_prompt > lm.ctx) {
        if (!start)
            return kiln_error(KILN_ERR_INVALID_ARG, "the prompt has %d tokens, more than the context of %d",
                              n_prompt, lm.ctx);
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%d new tokens at position %d = %lld tokens, more than the context of %d", n_prompt,
                          start, (long long)start + n_prompt, lm.ctx);
    }
    if (o->n_predict < -1)
        return kiln_error(KILN_ERR_INVALID_ARG, "n_predict %d: use -1 (no limit) or a count >= 0", o->n_predict);
    if (o->n_predict >= 0 && (int64_t)start + n_prompt + o->n_predict > lm.ctx)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "prompt (%d tokens) + %d new tokens = %lld exceeds the context of %d",
                          start + n_prompt, o->n_predict, (long long)start + n_prompt + o->n_predict, lm.ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= lm.vocab)
            return kiln_error(KILN_ERR_INVALID_ARG, "prompt token %d is id %d, outside the vocabulary 0..%d",
                              i, prompt[i], lm.vocab - 1);
    if (!(o->temperature >= 0.0f)) return kiln_error(KILN_ERR_INVALID_ARG, "temperature %g must be a number >= 0", (double)o->temperature);
    if (o->top_k < 0) return kiln_error(KILN_ERR_INVALID_ARG, "top_k %d must be >= 0 (0 = off)", o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return kiln_error(KILN_ERR_INVALID_ARG, "top_p %g must be in (0, 1] (1 = off)", (double)o->top_p);
    if (!(o->min_p >= 0.0f && o->min_p <= 1.0f))
        return kiln_error(KILN_ERR_INVALID_ARG, "min_p %g must be in [0, 1] (0 = off)", (double)o->min_p);
    if (!(o->repeat_penalty > 0.0f) || isinf(o->repeat_penalty))
        return kiln_error(KILN_ERR_INVALID_ARG, "repeat_penalty %g must be a number > 0 (1 = off)",
                          (double)o->repeat_penalty);
    if (o->repeat_last_n < -1)
        return kiln_error(KILN_ERR_INVALID_ARG, "repeat_last_n %d must be >= -1 (-1 = the whole context, 0 = off)",
                          o->repeat_last_n);
    return KILN_OK;
}

kiln_status kiln_generate_check(const kiln_program *p, const int32_t *prompt, int n_prompt,
                                const kiln_generate_options *o) {
    return check_at(p, prompt, n_prompt, 0, o);
}

kiln_status kiln_generate_continue(kiln_session *s, const int32_t *prompt, int n_prompt, int start,
                                   const kiln_generate_options *o, kiln_generate_result *res) {
    memset(res, 0, sizeof *res);
    const kiln_program *p = kiln_session_program(s);
    llm_methods lm;
    kiln_status st = check_at(p, prompt, n_prompt, start, o);
    if (st || (st = find_methods(p, &lm))) return st;
    int limit = o->n_predict >= 0 ? o->n_predict : lm.ctx - start - n_prompt;
    kiln_sampler_params sp = {o->temperature, o->top_k, o->top_p, o->min_p, o->repeat_penalty};
    kiln_sampler smp;
    /* This call's context (prompt, then generated tokens; history[i] is
     * position start + i): the repeat penalty's window is its tail. Only
     * kept when the penalty is on. */
    int window = o->repeat_last_n < 0 ? lm.ctx : o->repeat_last_n;
    int track = o->temperature > 0 && o->repeat_penalty != 1.0f && window > 0;
    int32_t *history = NULL;
    if ((st = kiln_sampler_init(&smp, &sp, lm.vocab, o->seed))) return st;
    if (track && !(history = kiln_malloc(sizeof *history * (size_t)lm.ctx))) {
        kiln_sampler_free(&smp);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    if (history) memcpy(history, prompt, sizeof *history * (size_t)n_prompt);
    if (start == 0 && (st = kiln_session_reset(s))) goto done;
    double t0 = kiln_now_ms();
    const float *logits;
    if ((st = prefill_chunks(s, &lm, prompt, n_prompt, start, &logits))) goto done;
    res->n_prompt = n_prompt;
    double t1 = kiln_now_ms();
    res->prefill_ms = t1 - t0;
    int pos = start + n_prompt;
    res->n_past = pos;
    while (res->n_generated < limit) {
        int n_hist = track ? pos - start : 0;
        int n_recent = n_hist < window ? n_hist : window;
        double ts = kiln_now_ms();
        int next = kiln_sampler_sample(&smp, logits, history ? history + n_hist - n_recent : NULL, n_recent);
        double te = kiln_now_ms();
        res->sampling_ms += te - ts;
        if (res->n_generated == 0 && res->ttft_ms == 0) res->ttft_ms = te - t0;
        int is_end = 0;
        for (int e = 0; e < lm.n_end; e++) is_end |= lm.end_ids[e] == next;
        if (is_end) {
            res->stopped_at_end = 1;
            break;
        }
        res->n_generated++;
        if (history && pos < lm.ctx) history[pos - start] = next;
        if (o->on_token && o->on_token(o->user, next)) break;
        if (res->n_generated == limit || pos >= lm.ctx) break; /* the last token needs no forward pass */
        if ((st = decode_one(s, &lm, next, pos, &logits))) goto done;
        pos++;
        res->n_past = pos;
    }
    res->decode_ms = kiln_now_ms() - t1;
done:
    kiln_free(history);
    kiln_sampler_free(&smp);
    return st;
}

kiln_status kiln_generate(kiln_session *s, const int32_t *prompt, int n_prompt,
                          const kiln_generate_options *o, kiln_generate_result *res) {
    return kiln_generate_continue(s, prompt, n_prompt, 0, o, res);
}
