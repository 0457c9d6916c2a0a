/* llm.c: the LLM program contract (kiln_llm.h): binds a program's prefill
 * and decode methods once and runs tokens through them. Built on kiln.h
 * alone, so it reads the program as any embedder would. */
#include <string.h>

#include "base/base.h"
#include "kiln/kiln_llm.h"

struct kiln_llm {
    const kiln_program *prog;
    kiln_llm_limits lim;
    int prefill, decode;
    int pre_tokens, pre_pos, pre_all; /* input indices; pre_all -1 when absent */
    int dec_tokens, dec_pos;
    const int64_t *end_ids;
    int n_end;
};

/* What one method input must be: dtype i32, one dimension, that size;
 * dynamic 1 when its dimension must be the token count. */
typedef struct {
    const char *name;
    int64_t size; /* 0: any (the method's token count) */
    int dynamic;
} input_rule;

static kiln_status check_input(const kiln_program *p, int method, int index, const input_rule *r) {
    kiln_tensor_info info;
    kiln_status st = kiln_method_input_info(p, method, index, &info);
    if (st) return st;
    const char *mname = kiln_program_method_name(p, method);
    if (info.dtype != KILN_I32 || info.ndim != 1 || (r->size && info.shape[0] != r->size))
        return kiln_error(
            KILN_ERR_FORMAT,
            "not an LLM program: input '%s' of method '%s' is %s with %d dims, not i32 [%s]",
            r->name, mname, kiln_dtype_name(info.dtype) ? kiln_dtype_name(info.dtype) : "?",
            info.ndim, r->size ? "1" : "tokens");
    if (r->dynamic && !(info.dynamic_mask & 1u) && info.shape[0] > 1)
        return kiln_error(
            KILN_ERR_UNSUPPORTED,
            "method '%s' takes a fixed %lld tokens (input '%s' has no dynamic dimension): "
            "fixed-size prefill (padded, with an n_tokens input) is not bound yet",
            mname, (long long)info.shape[0], r->name);
    return KILN_OK;
}

/* Finds each rule's input in `method` (index or -1) and refuses any input
 * no rule names. Rules with required set must be there. */
static kiln_status bind_inputs(const kiln_program *p, int method, const input_rule *rules,
                               int n_rules, int n_required, int *index) {
    const char *mname = kiln_program_method_name(p, method);
    for (int r = 0; r < n_rules; r++)
        index[r] = -1;
    for (int i = 0; i < kiln_method_input_count(p, method); i++) {
        kiln_tensor_info info;
        kiln_status st = kiln_method_input_info(p, method, i, &info);
        if (st) return st;
        int r = 0;
        while (r < n_rules && strcmp(rules[r].name, info.name))
            r++;
        if (r == n_rules)
            return kiln_error(
                KILN_ERR_UNSUPPORTED,
                "method '%s' has input '%s', which the LLM contract does not know (kiln_llm.h)",
                mname, info.name);
        if ((st = check_input(p, method, i, &rules[r]))) return st;
        index[r] = i;
    }
    for (int r = 0; r < n_required; r++)
        if (index[r] < 0)
            return kiln_error(KILN_ERR_FORMAT, "not an LLM program: method '%s' has no input '%s'",
                              mname, rules[r].name);
    return KILN_OK;
}

static kiln_status check_logits(const kiln_program *p, int method, int vocab) {
    kiln_tensor_info info;
    const char *mname = kiln_program_method_name(p, method);
    if (kiln_method_output_count(p, method) < 1 || kiln_method_output_info(p, method, 0, &info))
        return kiln_error(KILN_ERR_FORMAT, "not an LLM program: method '%s' has no output", mname);
    if (info.dtype != KILN_F32 || info.ndim != 2 || info.shape[1] != vocab)
        return kiln_error(
            KILN_ERR_FORMAT,
            "not an LLM program: output '%s' of method '%s' is not f32 [tokens, %d] (the logits)",
            info.name, mname, vocab);
    return KILN_OK;
}

static kiln_status meta_positive(const kiln_program *p, const char *key, int *out) {
    int64_t v;
    if (kiln_program_meta_int(p, key, &v))
        return kiln_error(KILN_ERR_FORMAT, "not an LLM program: no integer metadata '%s'", key);
    if (v < 1 || v > INT32_MAX)
        return kiln_error(KILN_ERR_FORMAT,
                          "not an LLM program: metadata '%s' is %lld, outside 1..%d", key,
                          (long long)v, INT32_MAX);
    *out = (int)v;
    return KILN_OK;
}

static kiln_status bind(const kiln_program *p, kiln_llm *lm) {
    memset(lm, 0, sizeof *lm);
    lm->prog = p;
    kiln_status st;
    if (kiln_program_find_method(p, "prefill", &lm->prefill) ||
        kiln_program_find_method(p, "decode", &lm->decode))
        return kiln_error(KILN_ERR_FORMAT,
                          "not an LLM program: it needs methods 'prefill' and 'decode'");
    if ((st = meta_positive(p, "llm.context_length", &lm->lim.context)) ||
        (st = meta_positive(p, "llm.vocab_size", &lm->lim.vocab)))
        return st;
    static const input_rule pre[] = {{"tokens", 0, 1}, {"pos", 1, 0}, {"all_logits", 1, 0}};
    static const input_rule dec[] = {{"tokens", 1, 0}, {"pos", 1, 0}};
    int ip[3], id[2];
    if ((st = bind_inputs(p, lm->prefill, pre, 3, 2, ip)) ||
        (st = bind_inputs(p, lm->decode, dec, 2, 2, id)) ||
        (st = check_logits(p, lm->prefill, lm->lim.vocab)) ||
        (st = check_logits(p, lm->decode, lm->lim.vocab)))
        return st;
    lm->pre_tokens = ip[0], lm->pre_pos = ip[1], lm->pre_all = ip[2];
    lm->dec_tokens = id[0], lm->dec_pos = id[1];
    kiln_tensor_info info;
    if ((st = kiln_method_input_info(p, lm->prefill, lm->pre_tokens, &info))) return st;
    if (info.shape[0] < 1 || info.shape[0] > lm->lim.context)
        return kiln_error(
            KILN_ERR_FORMAT,
            "not an LLM program: prefill takes %lld tokens, outside 1..%d (the context)",
            (long long)info.shape[0], lm->lim.context);
    lm->lim.prefill_max = (int)info.shape[0];
    lm->lim.all_logits = lm->pre_all >= 0;
    if (kiln_program_meta_ints(p, "llm.end_token_ids", &lm->end_ids, &lm->n_end)) {
        lm->end_ids = NULL;
        lm->n_end = 0;
    }
    return KILN_OK;
}

kiln_status kiln_llm_bind(const kiln_program *p, kiln_llm **out) {
    *out = NULL;
    if (!p) return kiln_error(KILN_ERR_INVALID_ARG, "kiln_llm_bind: no program");
    kiln_llm *lm = kiln_malloc(sizeof *lm);
    if (!lm) return kiln_error(KILN_ERR_NOMEM, "out of memory binding an LLM program");
    kiln_status st = bind(p, lm);
    if (st) {
        kiln_free(lm);
        return st;
    }
    *out = lm;
    return KILN_OK;
}

void kiln_llm_free(kiln_llm *lm) {
    kiln_free(lm);
}

const kiln_program *kiln_llm_program(const kiln_llm *lm) {
    return lm->prog;
}
const kiln_llm_limits *kiln_llm_get_limits(const kiln_llm *lm) {
    return &lm->lim;
}
int kiln_llm_prefill_method(const kiln_llm *lm) {
    return lm->prefill;
}
int kiln_llm_decode_method(const kiln_llm *lm) {
    return lm->decode;
}

int kiln_llm_input_index(const kiln_llm *lm, kiln_llm_input which) {
    switch (which) {
    case KILN_LLM_PREFILL_TOKENS:
        return lm->pre_tokens;
    case KILN_LLM_PREFILL_POS:
        return lm->pre_pos;
    case KILN_LLM_PREFILL_ALL_LOGITS:
        return lm->pre_all;
    case KILN_LLM_DECODE_TOKENS:
        return lm->dec_tokens;
    case KILN_LLM_DECODE_POS:
        return lm->dec_pos;
    }
    return -1;
}

const int64_t *kiln_llm_end_ids(const kiln_llm *lm, int *n) {
    *n = lm->n_end;
    return lm->end_ids;
}

int kiln_llm_is_end(const kiln_llm *lm, int32_t id) {
    for (int e = 0; e < lm->n_end; e++)
        if (lm->end_ids[e] == id) return 1;
    return 0;
}

kiln_status kiln_llm_check_tokens(const kiln_llm *lm, const int32_t *ids, int n, int start) {
    int ctx = lm->lim.context;
    if (n < 1) return kiln_error(KILN_ERR_INVALID_ARG, "no tokens to run");
    if (start < 0 || start >= ctx)
        return kiln_error(KILN_ERR_INVALID_ARG, "start position %d is outside the context 0..%d",
                          start, ctx - 1);
    if ((int64_t)start + n > ctx) {
        if (!start)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "the prompt has %d tokens, more than the context of %d", n, ctx);
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%d new tokens at position %d = %lld tokens, more than the context of %d",
                          n, start, (long long)start + n, ctx);
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lm->lim.vocab)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "token %d is id %d, outside the vocabulary 0..%d", i, ids[i],
                              lm->lim.vocab - 1);
    return KILN_OK;
}

static kiln_status check_session(const kiln_session *s, const kiln_llm *lm) {
    if (kiln_session_program(s) != lm->prog)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the session was made from another program than the LLM handle's");
    return KILN_OK;
}

static kiln_status set_i32(kiln_session *s, int method, int input, const int32_t *v, int64_t n) {
    return kiln_session_set_input(s, method, input, v, KILN_I32, 1, &n);
}

static kiln_status logits_of(kiln_session *s, int method, const float **logits) {
    const void *out;
    kiln_status st = kiln_session_get_output(s, method, 0, &out, NULL, NULL, NULL);
    if (!st && logits) *logits = out;
    return st;
}

/* One prefill call on ids[0..n) at pos (n <= prefill_max). */
static kiln_status prefill_call(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                                int pos) {
    int32_t p = pos;
    kiln_status st;
    if ((st = set_i32(s, lm->prefill, lm->pre_tokens, ids, n)) ||
        (st = set_i32(s, lm->prefill, lm->pre_pos, &p, 1)))
        return st;
    return kiln_session_execute(s, lm->prefill);
}

static kiln_status set_all_logits(kiln_session *s, const kiln_llm *lm, int32_t on) {
    return lm->pre_all >= 0 ? set_i32(s, lm->prefill, lm->pre_all, &on, 1) : KILN_OK;
}

/* The chunk length a caller's `chunk` means (validated by the callers). */
static int chunk_len(const kiln_llm *lm, int chunk) {
    return !chunk || chunk > lm->lim.prefill_max ? lm->lim.prefill_max : chunk;
}

kiln_status kiln_llm_prefill(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                             int start, int chunk, const float **logits) {
    kiln_status st;
    if (chunk < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "chunk %d must be >= 0 (0 = prefill's most)",
                          chunk);
    chunk = chunk_len(lm, chunk);
    if ((st = check_session(s, lm)) || (st = kiln_llm_check_tokens(lm, ids, n, start)) ||
        (st = set_all_logits(s, lm, 0)))
        return st;
    for (int done = 0; done < n;) {
        int len = n - done < chunk ? n - done : chunk;
        if ((st = prefill_call(s, lm, ids + done, len, start + done))) return st;
        done += len;
    }
    return logits_of(s, lm->prefill, logits);
}

kiln_status kiln_llm_prefill_rows(kiln_session *s, const kiln_llm *lm, const int32_t *ids, int n,
                                  int start, int chunk, kiln_llm_rows_fn fn, void *user) {
    kiln_status st;
    if (lm->pre_all < 0)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "method 'prefill' has no 'all_logits' input: it gives the last row only");
    if (chunk < 0)
        return kiln_error(KILN_ERR_INVALID_ARG, "chunk %d must be >= 0 (0 = prefill's most)",
                          chunk);
    chunk = chunk_len(lm, chunk);
    if ((st = check_session(s, lm)) || (st = kiln_llm_check_tokens(lm, ids, n, start)) ||
        (st = set_all_logits(s, lm, 1)))
        return st;
    for (int done = 0; done < n;) {
        int len = n - done < chunk ? n - done : chunk;
        const float *rows;
        if ((st = prefill_call(s, lm, ids + done, len, start + done)) ||
            (st = logits_of(s, lm->prefill, &rows)))
            return st;
        if (fn && fn(user, done, len, rows))
            return kiln_error(KILN_ERR_CANCELLED,
                              "prefill stopped by its caller after %d of %d tokens", done + len, n);
        done += len;
    }
    return KILN_OK;
}

kiln_status kiln_llm_decode(kiln_session *s, const kiln_llm *lm, int32_t id, int pos,
                            const float **logits) {
    kiln_status st;
    int32_t p = pos;
    if ((st = check_session(s, lm)) || (st = kiln_llm_check_tokens(lm, &id, 1, pos)) ||
        (st = set_i32(s, lm->decode, lm->dec_tokens, &id, 1)) ||
        (st = set_i32(s, lm->decode, lm->dec_pos, &p, 1)) ||
        (st = kiln_session_execute(s, lm->decode)))
        return st;
    return logits_of(s, lm->decode, logits);
}
