/* calibrate.c: the calibration pass. The module as compiled so far is
 * written to a temporary program, opened with every node on ref and run
 * over a text; the range of every f32 value and of every attention's
 * scaled scores is stored as "calibration.*" metadata, from which a
 * backend that quantizes activations (backend.h: wants_ranges) makes its
 * per-tensor encodings when it prepares.
 *
 * The run is the one generation makes: the first N tokens of the text, the
 * first N - D through prefill in chunks of its size, the last D one at a
 * time through decode at the positions that follow, so each method's
 * values are seen with a cache holding real rows. Ranges are merged by
 * value name across methods: prefill and decode are built by the same
 * builder, so "blk.3.attn_q" is one tensor to a backend, whichever method
 * it runs in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "compiler/passes.h"
#include "format/format.h"
#include "kiln/kiln_llm.h"
#include "llm/tokenizer.h"
#include "runtime/runtime.h"

#define DEFAULT_TOKENS 128
#define MIN_TOKENS 8
#define MAX_TOKENS (1 << 20)
#define MAX_DECODE 16
#define N_WIDEST 5 /* ranges named in the log */
/* Tokens of the text past the N calibrated, kept as calibration.held_out:
 * compile --check's sample calls run on them (a text, not random ids, and
 * one the ranges were not taken from) */
#define HELD_OUT 16

/* ---- the built-in text ---------------------------------------------------------------------- */

/* A few paragraphs of plain English of several kinds (narrative, how-to,
 * figures, dialogue, a list), about 600 tokens with the tokenizers of
 * SmolLM2 and Llama: ranges seen on varied text, not one register. */
static const char BUILTIN_TEXT[] =
    "The ferry left the harbour a little after seven, when the fog had thinned enough to show "
    "the lighthouse on the point. Most of the passengers stayed inside with their coffee, but "
    "an old man in a green coat stood at the rail and counted the buoys as they slid past: one, "
    "two, three, and then the long gap before the channel opened into the bay. He had made the "
    "crossing every Tuesday for thirty-one years, first to sell fish and later to visit his "
    "sister, and he claimed he could tell the season by the colour of the water alone.\n"
    "\n"
    "To repot a plant without hurting it, water it the day before, so the soil holds together. "
    "Choose a new pot about two centimetres wider than the old one, with a hole in the bottom. "
    "Turn the plant upside down, support the stem between your fingers, and tap the rim until "
    "the root ball slides out. Loosen the outer roots gently, set the plant at the same depth "
    "as before, fill the gaps with fresh compost, and press it down lightly. Keep it out of "
    "direct sun for a week while the roots settle.\n"
    "\n"
    "In 2019 the town library lent 48,250 books, 6,100 films and 1,375 board games; by 2023 "
    "the figures were 51,900, 3,480 and 2,960. Opening hours rose from 42 to 55 a week, and "
    "the reading room, which seats 80 people, was full on most Saturday afternoons. The budget "
    "grew by 12.5 percent over the same period, roughly in line with prices.\n"
    "\n"
    "\"Are you sure this is the right road?\" Maya asked, looking at the map upside down.\n"
    "\"Quite sure,\" said her brother. \"The sign back there said the bridge is closed, so we "
    "go round by the mill and cross at the ford.\"\n"
    "\"You said that an hour ago, about a different mill.\"\n"
    "He laughed and admitted she had a point, but he kept driving anyway.\n"
    "\n"
    "Things to check before a long walk in the hills: the weather forecast for the whole day, "
    "not only the morning; how many hours of daylight are left; water, at least a litre and a "
    "half per person; a warm layer and a waterproof jacket, even in summer; a charged phone and "
    "a paper map, because screens fail in the cold; and someone at home who knows your route "
    "and when you expect to be back.\n"
    "\n"
    "Why does bread go stale? Not mainly because it dries out, although it does lose some "
    "water. As a loaf cools, the starch in it slowly rearranges into tighter, more ordered "
    "crystals, and the crumb becomes firm and crumbly. Warming the bread for a few minutes "
    "undoes part of this change, which is why an old roll tastes almost fresh straight from the "
    "oven, and then turns hard again even faster once it has cooled.\n";

/* ---- the text ------------------------------------------------------------------------------- */

typedef struct {
    const char *label;  /* for messages and the metadata: the path, or "built-in" */
    const char *stored; /* calibration.text: the basename, or "built-in" */
    kiln_file_map map;
    const char *text;
    size_t len;
} text;

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int only_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_space(s[i])) return 0;
    return 1;
}

static kiln_status text_open(text *t, const char *path) {
    memset(t, 0, sizeof *t);
    if (!path) {
        t->label = t->stored = "built-in";
        t->text = BUILTIN_TEXT;
        t->len = sizeof BUILTIN_TEXT - 1;
        return KILN_OK;
    }
    t->label = path;
    t->stored = kiln_basename(path);
    kiln_status st = kiln_file_map_open(path, &t->map);
    if (st) return kiln_error_wrap(st, "calibration text");
    t->text = (const char *)t->map.data;
    t->len = t->map.size;
    if (only_space(t->text, t->len))
        return kiln_error(KILN_ERR_INVALID_ARG, "calibration text '%s' is empty", path);
    return KILN_OK;
}

/* Where to cut a long text near `want` bytes: after the last whitespace of
 * the 1 KiB before it (so no word is split), else at want. */
static size_t cut_at_space(const char *s, size_t want) {
    for (size_t i = want; i > 0 && i + 1024 > want; i--)
        if (is_space(s[i - 1])) return i;
    return want;
}

/* The text's tokens as generation encodes a prompt (BOS first where the
 * tokenizer puts one), at least `need` of them when the text has that many
 * (*ids, kiln_malloc'd; *n may be more). A long text is encoded from a
 * prefix cut at a space, grown until it gives a margin past `need`, so a
 * large file costs about what is used: only the prefix's last tokens can
 * differ from the whole text's, and they are past the margin. */
static kiln_status text_tokens(const text *t, const kiln_tokenizer *tok, int need, int32_t **ids,
                               int *n) {
    *ids = NULL;
    *n = 0;
    size_t want = (size_t)need * 16 + 4096;
    for (;;) {
        size_t len = t->len <= want ? t->len : cut_at_space(t->text, want);
        kiln_free(*ids);
        if (len > ((size_t)1 << 29) || !(*ids = kiln_malloc((2 * len + 2) * sizeof **ids)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory encoding calibration text '%s'",
                              t->label);
        kiln_status st = kiln_tokenizer_encode(tok, t->text, len, 1, *ids, (int)(2 * len + 2), n);
        if (st) return kiln_error_wrap(st, "calibration text '%s'", t->label);
        if (len == t->len || *n >= need + 8) return KILN_OK;
        want *= 4;
    }
}

/* ---- the observer --------------------------------------------------------------------------- */

typedef struct {
    float lo, hi;
    int seen;
} range;

typedef struct {
    const kiln_module *mod;   /* the program's (names, ops) */
    range **vals;             /* per method, per value */
    range **scores;           /* per method, per node: an attention's scaled scores */
    int bad_method, bad_node; /* the first node that made a value not finite, or -1 */
    int bad_scores;           /* ... in its scores (else in its output) */
} recorder;

static void widen(range *r, float lo, float hi) {
    if (!r->seen || lo < r->lo) r->lo = lo;
    if (!r->seen || hi > r->hi) r->hi = hi;
    r->seen = 1;
}

static inline float cache_at(const kiln_tensor *c, int64_t idx) {
    return c->dtype == KILN_F16 ? kiln_f16_to_f32(((const uint16_t *)c->data)[idx])
                                : ((const float *)c->data)[idx];
}

/* The scaled scores q.k / div of an attention about to run: in[0] q
 * (T, H*hd) f32, in[1] the K cache (S, KV*hd) with rows 0..pos+T-1 written,
 * in[3] pos; query t of head h attends to positions 0..pos+t, against the
 * cache's head h / (H / KV). The arithmetic of ref's k_attention. Returns 0
 * when a score is not finite. */
static int scores_range(const kiln_node *n, const kiln_tensor *const *in, range *r) {
    const float *q = in[0]->data;
    const kiln_tensor *kc = in[1];
    int32_t pos = *(const int32_t *)in[3]->data;
    int64_t T = in[0]->ne[0], S = kc->ne[0];
    int nh = n->iattr[KILN_ATTN_N_HEAD], nkv = n->iattr[KILN_ATTN_N_KV_HEAD];
    int hd = n->iattr[KILN_ATTN_HEAD_DIM];
    int64_t kvw = (int64_t)nkv * hd;
    float div = n->fattr[0];
    if (pos < 0 || pos > S || T > S - pos || nkv < 1 || nh % nkv) return 1; /* ref refuses it */
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *qh = q + t * nh * hd + (int64_t)h * hd;
            int64_t kvo = (int64_t)(h / (nh / nkv)) * hd;
            for (int64_t s = 0; s <= pos + t; s++) {
                float score = 0.0f;
                for (int i = 0; i < hd; i++)
                    score += qh[i] * cache_at(kc, s * kvw + kvo + i);
                score /= div;
                if (!isfinite(score)) return 0;
                if (score < lo) lo = score;
                if (score > hi) hi = score;
            }
        }
    if (lo <= hi) widen(r, lo, hi);
    return 1;
}

/* Returns 0 when a value is not finite. */
static int tensor_range(const kiln_tensor *t, range *r) {
    const float *x = t->data;
    uint64_t n = kiln_shape_elems(t->ndim, t->ne);
    if (!n) return 1;
    float lo = x[0], hi = x[0];
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return 0;
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    widen(r, lo, hi);
    return 1;
}

/* Phase 0 of an attention: its scores; phase 1 of any node: its output
 * when f32 and its own (a kv_store's is a view of the whole cache, whose
 * new rows are its input's values). A value not finite stops the run. */
static int observe(void *user, int method, int node, const kiln_tensor *const *in,
                   const kiln_tensor *out, int phase) {
    recorder *r = user;
    const kiln_graph *g = &r->mod->methods[method];
    const kiln_node *n = &g->nodes[node];
    int ok = 1;
    if (phase == 0 && n->op == KILN_OP_ATTENTION)
        ok = scores_range(n, in, &r->scores[method][node]);
    else if (phase == 1 && out->dtype == KILN_F32 && g->values[n->out].kind == KILN_VAL_ACT)
        ok = tensor_range(out, &r->vals[method][n->out]);
    if (ok) return 0;
    r->bad_method = method;
    r->bad_node = node;
    r->bad_scores = phase == 0;
    return 1;
}

/* ---- the run -------------------------------------------------------------------------------- */

typedef struct {
    int tokens, prefill, prefill_calls, decode;
} run_counts;

static kiln_status progress(const kiln_compile_options *o, uint64_t done, uint64_t total) {
    if (o->progress && o->progress(o->progress_user, "calibrate", done, total))
        return kiln_error(KILN_ERR_CANCELLED, "compile: stopped while calibrating");
    return KILN_OK;
}

/* ids[0..c->tokens) through prefill (c->prefill of them, in chunks of its
 * size) then decode, from an empty cache. */
static kiln_status run_tokens(kiln_session *s, const kiln_llm *llm, const int32_t *ids,
                              run_counts *c, const kiln_compile_options *o) {
    int chunk = kiln_llm_get_limits(llm)->prefill_max;
    uint64_t total = (uint64_t)c->tokens;
    kiln_status st;
    for (int first = 0; first < c->prefill; first += chunk) {
        int len = c->prefill - first < chunk ? c->prefill - first : chunk;
        if ((st = kiln_llm_prefill(s, llm, ids + first, len, first, len, NULL))) return st;
        c->prefill_calls++;
        if ((st = progress(o, (uint64_t)(first + len), total))) return st;
    }
    for (int p = c->prefill; p < c->tokens; p++)
        if ((st = kiln_llm_decode(s, llm, ids[p], p, NULL)) ||
            (st = progress(o, (uint64_t)p + 1, total)))
            return st;
    return KILN_OK;
}

/* Opens the program at `path` with every node on ref and runs ids through
 * it with the recorder attached. */
static kiln_status run_program(const char *path, const int32_t *ids, run_counts *c, recorder *r,
                               const kiln_compile_options *o) {
    kiln_open_options oo;
    memset(&oo, 0, sizeof oo);
    oo.backend = "ref"; /* no backend of the module opens, no blob loads */
    kiln_program *p = NULL;
    kiln_session *s = NULL;
    kiln_llm *llm = NULL;
    kiln_status st = kiln_program_open_with(path, &oo, &p);
    if (!st) st = kiln_llm_bind(p, &llm);
    if (!st) st = kiln_session_create(p, &s);
    if (!st) {
        r->mod = kiln_program_module(p);
        kiln_session_set_observer(s, observe, r);
        st = run_tokens(s, llm, ids, c, o);
        if (st == KILN_ERR_CANCELLED && r->bad_node >= 0) {
            const kiln_graph *g = &r->mod->methods[r->bad_method];
            st = kiln_error(KILN_ERR_BACKEND, "method '%s', node '%s': %s not finite on ref",
                            g->name, g->nodes[r->bad_node].name,
                            r->bad_scores ? "an attention score is" : "a value of its output is");
        }
    }
    kiln_session_destroy(s);
    kiln_llm_free(llm);
    r->mod = NULL; /* the module dies with the program; the ranges stay, by index */
    kiln_program_close(p);
    return st;
}

/* ---- the ranges ----------------------------------------------------------------------------- */

typedef struct {
    char *name; /* owned until stored */
    int op;     /* of the node that makes it */
    int scores; /* an attention's scores */
    int order;  /* first seen (methods in order, values in order) */
    float lo, hi;
} entry;

static int by_name(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->order - y->order;
}

static int by_order(const void *a, const void *b) {
    return ((const entry *)a)->order - ((const entry *)b)->order;
}

/* Every range seen, one entry per name (the union over methods), in the
 * order first seen. `m` is the module the program was written from: the
 * same methods, values and nodes, by index. */
static kiln_status merge(const kiln_module *m, const recorder *r, entry **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    int n = 0;
    for (int k = 0; k < m->n_methods; k++)
        n += m->methods[k].n_values + m->methods[k].n_nodes;
    entry *e = kiln_calloc((size_t)n + 1, sizeof *e);
    if (!e) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    n = 0;
    kiln_status st = KILN_OK;
    for (int k = 0; k < m->n_methods && !st; k++) {
        const kiln_graph *g = &m->methods[k];
        for (int i = 0; i < g->n_nodes && !st; i++) {
            const kiln_node *nd = &g->nodes[i];
            const range *ro = &r->vals[k][nd->out], *rs = &r->scores[k][i];
            for (int sc = 0; sc < 2; sc++) {
                const range *q = sc ? rs : ro;
                if (!q->seen) continue;
                char name[KILN_NAME_MAX + 16];
                snprintf(name, sizeof name, "%s%s", sc ? "scores:" : "",
                         sc ? nd->name : g->values[nd->out].name);
                entry *x = &e[n];
                if (!(x->name = kiln_strdup(name))) {
                    st = kiln_error(KILN_ERR_NOMEM, "out of memory");
                    break;
                }
                x->op = nd->op;
                x->scores = sc;
                x->order = n++;
                x->lo = q->lo;
                x->hi = q->hi;
            }
        }
    }
    if (!st) { /* one entry per name: the union of its ranges, kept where first seen */
        qsort(e, (size_t)n, sizeof *e, by_name);
        int u = 0;
        for (int i = 0; i < n; i++) {
            if (u && !strcmp(e[u - 1].name, e[i].name)) {
                if (e[i].lo < e[u - 1].lo) e[u - 1].lo = e[i].lo;
                if (e[i].hi > e[u - 1].hi) e[u - 1].hi = e[i].hi;
                kiln_free(e[i].name);
                continue;
            }
            e[u++] = e[i];
        }
        n = u;
        qsort(e, (size_t)n, sizeof *e, by_order);
    }
    *out = e;
    *n_out = n;
    return st;
}

static void free_entries(entry *e, int n) {
    for (int i = 0; e && i < n; i++)
        kiln_free(e[i].name);
    kiln_free(e);
}

/* calibration.names and calibration.ranges, taking the names out of e. */
static kiln_status store(kiln_module *m, entry *e, int n, int tokens, const char *label) {
    char **names = kiln_calloc((size_t)n + 1, sizeof *names);
    double *lohi = kiln_calloc(2 * (size_t)n + 1, sizeof *lohi);
    if (!names || !lohi) {
        kiln_free(names);
        kiln_free(lohi);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        names[i] = e[i].name;
        e[i].name = NULL;
        lohi[2 * i] = e[i].lo;
        lohi[2 * i + 1] = e[i].hi;
    }
    kiln_status st = kiln_meta_set_str_array_owned(m, "calibration.names", names, (uint32_t)n);
    if (!st)
        st = kiln_meta_set_float_array_owned(m, "calibration.ranges", lohi, (uint32_t)n * 2);
    else
        kiln_free(lohi);
    if (!st) st = kiln_meta_set_int(m, "calibration.tokens", tokens);
    if (!st) st = kiln_meta_set_str(m, "calibration.text", label);
    return st;
}

static void log_line(const kiln_compile_options *o, const char *line) {
    if (o->log) o->log(o->log_user, line);
}

/* After the first line: the union per op, the attention scores', and the
 * widest ranges. */
static void log_ranges(const kiln_compile_options *o, const entry *e, int n) {
    char line[1024];
    float op_lo[KILN_OP_COUNT], op_hi[KILN_OP_COUNT], s_lo = 0, s_hi = 0;
    int op_seen[KILN_OP_COUNT] = {0}, s_seen = 0;
    for (int i = 0; i < n; i++) {
        float *lo = e[i].scores ? &s_lo : &op_lo[e[i].op],
              *hi = e[i].scores ? &s_hi : &op_hi[e[i].op];
        int *seen = e[i].scores ? &s_seen : &op_seen[e[i].op];
        if (!*seen || e[i].lo < *lo) *lo = e[i].lo;
        if (!*seen || e[i].hi > *hi) *hi = e[i].hi;
        *seen = 1;
    }
    size_t len = (size_t)snprintf(line, sizeof line, "calibrate: by op:");
    const char *sep = " ";
    for (int op = 0; op < KILN_OP_COUNT && len < sizeof line; op++)
        if (op_seen[op]) {
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%s [%.4g, %.4g]", sep,
                                    kiln_op_name(op), op_lo[op], op_hi[op]);
            sep = ", ";
        }
    log_line(o, line);
    if (s_seen) {
        snprintf(line, sizeof line, "calibrate: attention scores from %.4g to %.4g", s_lo, s_hi);
        log_line(o, line);
    }
    int top[N_WIDEST], n_top = 0; /* by width, widest first; ties: first seen */
    for (int i = 0; i < n; i++) {
        int at = n_top;
        while (at > 0 && e[i].hi - e[i].lo > e[top[at - 1]].hi - e[top[at - 1]].lo)
            at--;
        if (at == N_WIDEST) continue;
        if (n_top < N_WIDEST) n_top++;
        memmove(&top[at + 1], &top[at], (size_t)(n_top - 1 - at) * sizeof *top);
        top[at] = i;
    }
    for (int k = 0; k < n_top; k++) {
        const entry *x = &e[top[k]];
        snprintf(line, sizeof line, "calibrate: widest #%d: %s [%.4g, %.4g]", k + 1, x->name, x->lo,
                 x->hi);
        log_line(o, line);
    }
}

/* ---- the pass ------------------------------------------------------------------------------- */

/* A backend listed that asks for ranges. */
static int ranges_wanted(const kiln_module *m) {
    for (int b = 0; b < m->n_backends; b++) {
        const kiln_backend *be = kiln_backend_find(m->backends[b]);
        if (be && be->wants_ranges && be->wants_ranges(m)) return 1;
    }
    return 0;
}

/* The module written as a program to out's temporary file. */
static kiln_status write_program(kiln_module *m, const char *output, kiln_outfile *out) {
    kiln_status st;
    /* planned now (prepare may change the weights: compile.c plans again);
     * planning is a pure function of the graph, so twice is harmless */
    for (int k = 0; k < m->n_methods; k++)
        if ((st = kiln_graph_plan(&m->methods[k], m))) return st;
    if ((st = kiln_module_verify(m, 1)) || (st = kiln_outfile_open(out, output))) return st;
    if (!out->tmp)
        return kiln_error(KILN_ERR_INVALID_ARG, "'%s' is not a regular file: a program is one",
                          output);
    /* A delegate's partitions have no blob yet: the file says so (blob -1),
     * which verifies, and opening with every node on ref loads none. */
    if ((st = kiln_program_write_to(m, out->f, out->tmp, NULL, NULL)) ||
        (st = kiln_outfile_finish(out)))
        return st;
    return KILN_OK;
}

kiln_status kiln_module_calibrate(kiln_module *m, const kiln_compile_options *o) {
    if (!o->calibrate && !o->calibrate_tokens && !ranges_wanted(m)) return KILN_OK;
    double t0 = kiln_now_ms();
    int64_t context = kiln_meta_int_or(m, "llm.context_length", 0);
    int want = o->calibrate_tokens;
    if (want && (want < MIN_TOKENS || want > MAX_TOKENS))
        return kiln_error(KILN_ERR_INVALID_ARG, "--calibrate-tokens %d is outside %d..%d", want,
                          MIN_TOKENS, MAX_TOKENS);
    if (want > context)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "--calibrate-tokens %d is more than the context holds (%lld positions: "
                          "--max-seq)",
                          want, (long long)context);
    if (!want) want = context < DEFAULT_TOKENS ? (int)context : DEFAULT_TOKENS;
    if (want < 2)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "calibration needs at least 2 positions of context, the program has %lld",
                          (long long)context);
    kiln_status st = progress(o, 0, 0);
    if (st) return st;

    text t;
    kiln_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    kiln_outfile out = {.slot = -1};
    recorder r = {.bad_method = -1, .bad_node = -1};
    run_counts c = {.tokens = want};
    entry *e = NULL;
    int n_e = 0;
    char line[512];
    if ((st = text_open(&t, o->calibrate))) goto done;
    if (!m->tokenizer_len) {
        st = kiln_error(KILN_ERR_UNSUPPORTED,
                        "calibration encodes a text, and the checkpoint has no tokenizer (give "
                        "--tokenizer)");
        goto done;
    }
    if ((st = kiln_tokenizer_deserialize(m->tokenizer, (size_t)m->tokenizer_len,
                                         "the module's tokenizer", &tok)) ||
        (st = text_tokens(&t, tok, want + HELD_OUT, &ids, &n_ids)))
        goto done;
    if (n_ids < want) {
        st = o->calibrate_tokens
                 ? kiln_error(KILN_ERR_INVALID_ARG,
                              "calibration text '%s' has %d tokens, fewer than the %d "
                              "--calibrate-tokens asks for",
                              t.label, n_ids, want)
                 : kiln_error(KILN_ERR_INVALID_ARG,
                              "calibration text '%s' has %d tokens, fewer than the %d calibration "
                              "runs by default (--calibrate-tokens N asks for fewer)",
                              t.label, n_ids, want);
        goto done;
    }
    c.decode = want / 8 < 1 ? 1 : want / 8 > MAX_DECODE ? MAX_DECODE : want / 8;
    c.prefill = want - c.decode;

    /* per method, by value and node index: the program written from m has
     * m's methods, values and nodes */
    if (!(r.vals = kiln_calloc((size_t)m->n_methods + 1, sizeof *r.vals)) ||
        !(r.scores = kiln_calloc((size_t)m->n_methods + 1, sizeof *r.scores))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < m->n_methods; k++)
        if (!(r.vals[k] = kiln_calloc((size_t)m->methods[k].n_values + 1, sizeof(range))) ||
            !(r.scores[k] = kiln_calloc((size_t)m->methods[k].n_nodes + 1, sizeof(range)))) {
            st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
    if ((st = write_program(m, o->output, &out))) {
        st = kiln_error_wrap(st, "calibration: writing the program to run");
        goto done;
    }
    if ((st = run_program(out.tmp, ids, &c, &r, o))) {
        if (st != KILN_ERR_CANCELLED) st = kiln_error_wrap(st, "calibration: running on ref");
        goto done;
    }
    if ((st = merge(m, &r, &e, &n_e))) goto done;
    snprintf(line, sizeof line,
             "calibrate: %d tokens of '%s' on ref (%d prefill in %d call%s, %d decode), %d "
             "ranges, %.1f s",
             c.tokens, t.stored, c.prefill, c.prefill_calls, c.prefill_calls == 1 ? "" : "s",
             c.decode, n_e, (kiln_now_ms() - t0) / 1e3);
    log_line(o, line);
    log_ranges(o, e, n_e);
    st = store(m, e, n_e, c.tokens, t.stored);
    int n_held = n_ids - want < HELD_OUT ? n_ids - want : HELD_OUT;
    int64_t *held = n_held > 0 ? kiln_malloc(sizeof(int64_t) * (size_t)n_held) : NULL;
    for (int i = 0; held && i < n_held; i++)
        held[i] = ids[want + i];
    if (!st && n_held > 0)
        st = held ? kiln_meta_set_int_array_owned(m, "calibration.held_out", held, (uint32_t)n_held)
                  : kiln_error(KILN_ERR_NOMEM, "out of memory");
    else
        kiln_free(held);

done:
    kiln_outfile_discard(&out);
    free_entries(e, n_e);
    for (int k = 0; r.vals && k < m->n_methods; k++)
        kiln_free(r.vals[k]);
    for (int k = 0; r.scores && k < m->n_methods; k++)
        kiln_free(r.scores[k]);
    kiln_free(r.vals);
    kiln_free(r.scores);
    kiln_free(ids);
    kiln_tokenizer_free(tok);
    kiln_file_map_close(&t.map);
    return st;
}
