/* cmd_debug.c: `kiln debug`, the per-node accuracy debugger. Runs one method
 * call on the backend under test and on a reference backend (the same
 * program opened twice, kiln_open_options.backend) with the same inputs and
 * the same history, captures every node's output through the executor's
 * node observer, and prints per node how far the backend is from the
 * reference, plus the node's own error: the node run alone on the backend,
 * given exactly the reference's inputs (kiln_program_exec_node), which tells
 * a wrong kernel from error carried in by earlier nodes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "kiln/kiln_compile.h"
#include "devtools/compare.h"
#include "runtime/runtime.h"
#include "devtools/tensors.h"

static const char *CMD = "debug";

/* ---- options -------------------------------------------------------------------------------- */

typedef struct {
    const char *model, *method, *backend, *reference, *prompt, *inputs, *dump, *against,
        *against_tok;
    double threshold;
    long long position, tokens, seed, threads;
    int have_position, have_tokens;
} options;

#define OPT(field) offsetof(options, field)

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .bits = KILN_CLI_NONEMPTY, .help = "compiled program (required)"},
    {KILN_CLI_STR, "--method", "NAME|INDEX", OPT(method), .bits = KILN_CLI_NONEMPTY,
     .help = "the method call to debug (default: prefill when the\n"
             "program has it, else method 0)"},
    {KILN_CLI_STR, "--backend", "NAME", OPT(backend), .bits = KILN_CLI_NONEMPTY,
     .help = "the backend under test, every node on it (cpu, ref,\n"
             "test); default: the backends the program was\n"
             "compiled for"},
    {KILN_CLI_STR, "--reference", "NAME", OPT(reference), .bits = KILN_CLI_NONEMPTY,
     .help = "the reference backend (default ref)"},
    {KILN_CLI_STR, "-p, --prompt", "TEXT", OPT(prompt), /* may be empty text */
     .help = "language model: the tokens (the program's tokenizer,\n"
             "BOS where it adds one); past its end, or without\n"
             "it, random valid tokens (--seed)"},
    {KILN_CLI_I64, "--position", "N", OPT(position), .lo = 0, .hi = KILN_CLI_NO_MAX,
     .help = "language model: the position of the debugged call,\n"
             "after N tokens of history (default: prefill 0;\n"
             "decode: the prompt's last token, else 0)"},
    {KILN_CLI_I64, "-n, --tokens", "N", OPT(tokens), .lo = 1, .hi = KILN_CLI_NO_MAX,
     .help = "language model, prefill: tokens in the call\n"
             "(default: the rest of the prompt, else 16; at most\n"
             "the prefill size and the context left)"},
    {KILN_CLI_I64, "--seed", "S", OPT(seed), .lo = 0, .hi = KILN_CLI_NO_MAX,
     .help = "random tokens and inputs (default 0)"},
    {KILN_CLI_STR, "--inputs", "DIR", OPT(inputs), .path = KILN_CLI_IN_DIR,
     .bits = KILN_CLI_NONEMPTY,
     .help = "the call's inputs from a tensor folder\n"
             "(docs/TENSORS.md; a --dump folder will do); a\n"
             "language model's history is still built to the\n"
             "'pos' input"},
    {KILN_CLI_DOUBLE, "--threshold", "COS", OPT(threshold), .lo = 0, .hi = 1,
     .rule = "is a cosine similarity in {range}",
     .help = "a node is past the threshold when its cosine is\n"
             "below COS (default 0.999; 0..1)"},
    {KILN_CLI_STR, "--dump", "DIR", OPT(dump), .path = KILN_CLI_OUT_DIR, .bits = KILN_CLI_NONEMPTY,
     .help = "write the call's inputs (role input) and every\n"
             "node's output (role backend, role reference; node\n"
             "and op named) as a tensor folder"},
    {KILN_CLI_STR, "--against", "CHECKPOINT", OPT(against), .path = KILN_CLI_IN_PATH,
     .bits = KILN_CLI_NONEMPTY,
     .help = "also compile CHECKPOINT (the unquantized source)\n"
             "into a temporary f32 program on ref and show the\n"
             "reference's error against it per node (quant_cos,\n"
             "quant_rel: the quantization error), nodes matched\n"
             "by name"},
    {KILN_CLI_STR, "--against-tokenizer", "FILE", OPT(against_tok), .path = KILN_CLI_IN_FILE,
     .bits = KILN_CLI_NONEMPTY,
     .help = "the tokenizer --against's checkpoint needs\n"
             "(llama2.c checkpoints)"},
    {KILN_CLI_I64, "-t, --threads", "N", OPT(threads), .lo = 1, .hi = KILN_MAX_THREADS,
     .help = "threads of the backend under test"},
    {KILN_CLI_END},
};

/* --position and --tokens not given: -1 and 0 (have_* are set after parsing). */
static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->reference = "ref";
    o->threshold = 0.999;
    o->position = -1;
}

static const kiln_cli_command COMMAND = {
    .name = "debug",
    .about = "usage: kiln debug -m MODEL.kiln [options]\n"
             "\n"
             "Runs one method call on the backend under test and on a reference backend\n"
             "with the same inputs and the same history, captures every node's output on\n"
             "both, and prints per node: id, name, op, backend, compute unit; the cosine\n"
             "similarity, the largest absolute error, the relative error (max |a - r| /\n"
             "max |r|) and the SNR in dB of the backend's output a against the\n"
             "reference's r; and the node's own error (own_cos, own_rel): the node run\n"
             "alone on the backend given exactly the reference's inputs. Two nodes are\n"
             "marked: the first whose cosine is below --threshold (where the outputs\n"
             "part) and the first whose own cosine is (the node that computes wrongly;\n"
             "error carried in from earlier nodes does not count against it). A summary\n"
             "names both. A kv_store node is compared on the cache rows the call's\n"
             "attention reads (0 .. position + tokens), its own error on the rows it\n"
             "writes (run on a copy of the reference's cache).\n"
             "\n"
             "A language model (methods prefill and decode): both sessions first prefill\n"
             "the tokens before --position, each on its own backend (the prompt's tokens,\n"
             "then random valid ones), then the debugged call runs: prefill on the next\n"
             "tokens (every row's logits kept), decode on the token at --position.\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  kiln debug -m smollm2.kiln -p \"The capital of France is\"\n"
             "  kiln debug -m smollm2.kiln --method decode --position 300 --threshold 0.99\n"
             "  kiln debug -m perturbed.kiln --reference ref --dump dbg/\n",
    .column = 25,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .stray = "unexpected argument '%s' (the program goes after -m)",
};

static int check_args(const options *o);

/* 1 to go on, else 0 with *rc the exit code (the help printed, or a usage
 * error). */
static int parse_args(int argc, char **argv, options *o, int *rc) {
    if (!kiln_cli_parse(&COMMAND, argc, argv, o, rc)) return 0;
    o->have_position = o->position >= 0;
    o->have_tokens = o->tokens > 0;
    if (!o->have_position) o->position = 0;
    return !(*rc = check_args(o));
}

/* The rules between flags: 0, or the exit code of a usage error (printed). */
static int check_args(const options *o) {
    if (!o->model) return kiln_cli_usage_error(CMD, "no program given (-m MODEL.kiln)");
    const char *be[2] = {o->backend, o->reference}, *flag[2] = {"--backend", "--reference"};
    for (int k = 0; k < 2; k++)
        if (be[k] && !kiln_backend_find(be[k]))
            return kiln_cli_usage_error(
                CMD, "%s '%s': this build has no such backend (cpu, ref, test)", flag[k], be[k]);
    if (o->inputs && o->have_tokens)
        return kiln_cli_usage_error(CMD, "--tokens and --inputs: the inputs give the tokens");
    if (o->against_tok && !o->against)
        return kiln_cli_usage_error(CMD, "--against-tokenizer goes with --against");
    return 0;
}

/* ---- random numbers ------------------------------------------------------------------------- */

/* ---- comparing two tensors ------------------------------------------------------------------ */

/* A tensor's compared part: the whole output, or a kv_store's cache rows. */
typedef struct {
    kiln_dtype dtype;
    int ndim;
    int64_t ne[KILN_MAX_DIMS];
    const void *data;
} region;

typedef struct {
    int valid;    /* 0: not compared (n/a) */
    int mismatch; /* the shapes or dtypes differ */
    double cos, max_abs, rel, snr_db;
} cmp;

/* a against the reference r. Any non-finite value makes every figure NaN
 * (past any threshold). */
static cmp compare(const region *a, const region *r) {
    cmp c = {1, 0, NAN, NAN, NAN, NAN};
    if (a->ndim != r->ndim || memcmp(a->ne, r->ne, (size_t)a->ndim * sizeof *a->ne)) {
        c.mismatch = 1;
        return c;
    }
    kiln_cmp v;
    kiln_compare_values(a->dtype, a->data, r->dtype, r->data, 0, kiln_shape_elems(a->ndim, a->ne), &v);
    c.cos = v.cos;
    c.max_abs = v.max_abs;
    c.rel = v.rel;
    c.snr_db = v.snr_db;
    return c;
}

static int past(const cmp *c, double threshold) {
    return c->valid && (c->mismatch || !(c->cos >= threshold));
}

/* ---- the debugger --------------------------------------------------------------------------- */

/* One node of the debugged method. */
typedef struct {
    void *data; /* the backend's output (its region), malloc'd */
    region got;
    void *f32; /* --against: the f32 program's output (region), malloc'd */
    region f32r;
    char unit[80];
    int ran;      /* the backend ran it */
    int fallback; /* on ref although another backend was asked for */
    cmp err;      /* backend vs reference */
    cmp own;      /* the node alone on the backend, the reference's inputs, vs the reference */
    cmp quant;    /* reference vs the f32 program */
    int own_failed;
} node_rec;

/* One program and its session. */
typedef struct {
    kiln_program *prog;
    kiln_session *sess;
    int method;                         /* the debugged method's index here */
    int pre, pre_tok, pre_pos, pre_all; /* language model: prefill and its inputs here */
} side;

typedef struct {
    const options *o;
    side be, rf, fp; /* backend under test, reference, --against's f32 program */
    int method;      /* index of the debugged method (backend and reference) */
    const kiln_graph *g;
    node_rec *rec;
    int *fp_node; /* f32 program: the node of the same name per node, or -1 */
    /* own error */
    void *own_buf, *scratch;
    uint64_t scratch_bytes;
    int own_ok; /* own_buf holds this node's own output */
    /* --dump */
    kiln_tensor_folder dump;
    int dumping;
    int n_dumped;
    kiln_status failed; /* set by an observer that stopped the call */
    /* the language model */
    int llm;
    int pre, dec;                                    /* method indices */
    int pre_tok, pre_pos, pre_all, dec_tok, dec_pos; /* input indices */
    int64_t vocab, ctx, prefill_max;
    int32_t *prompt;
    int n_prompt;
    /* the call's inputs (per input of the method) */
    int n_in;
    kiln_tensor_info *in_info;
    void **in_data;
    int64_t (*in_shape)[KILN_MAX_DIMS];
    int64_t position, n_tokens; /* language model: where the call is, its tokens */
} debugger;

static const kiln_node *node_at(const debugger *d, int i) {
    return &d->g->nodes[i];
}

/* The compared part of node n's output: a kv_store's cache rows 0 .. pos + T
 * (`written`: pos .. pos + T), else all of it. */
static region region_of(const kiln_node *n, const kiln_tensor *const *in, const kiln_tensor *out,
                        const void *data, int written) {
    region r = {out->dtype, out->ndim, {0}, data};
    memcpy(r.ne, out->ne, sizeof r.ne);
    if (n->op == KILN_OP_KV_STORE && out->ndim == 2) {
        int64_t pos = *(const int32_t *)in[2]->data, T = in[1]->ne[0];
        if (pos < 0) pos = 0;
        int64_t end = pos + T < out->ne[0] ? pos + T : out->ne[0];
        if (written) {
            r.data = (const uint8_t *)data +
                     kiln_shape_bytes(out->dtype, 1, &out->ne[1]) * (uint64_t)pos;
            r.ne[0] = end - pos;
        } else {
            r.ne[0] = end;
        }
    }
    return r;
}

static kiln_status keep_region(const region *r, void **buf, region *kept, const char *what) {
    uint64_t bytes = kiln_shape_bytes(r->dtype, r->ndim, r->ne);
    free(*buf);
    if (!(*buf = malloc(bytes ? (size_t)bytes : 1)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory keeping the output of node '%s'", what);
    if (bytes) memcpy(*buf, r->data, (size_t)bytes);
    *kept = *r;
    kept->data = *buf;
    return KILN_OK;
}

static kiln_status dump_region(debugger *d, const kiln_node *n, const char *role, const region *r) {
    kiln_npy_dtype t;
    if (kiln_npy_dtype_from_kiln(r->dtype, &t)) return KILN_OK; /* no file dtype: not dumped */
    kiln_tensor_desc desc = {d->g->values[n->out].name, d->g->name, role,    n->name,
                             kiln_op_name(n->op),       t,          r->ndim, r->ne};
    kiln_status st = kiln_tensor_folder_add(&d->dump, &desc, r->data);
    d->n_dumped += !st;
    return st;
}

static int stop(debugger *d, kiln_status st) {
    d->failed = st;
    return 1;
}

/* The backend under test: keep every node's output and its compute unit. */
static int observe_backend(void *user, int method, int i, const kiln_tensor *const *in,
                           const kiln_tensor *out, int phase) {
    debugger *d = user;
    if (kiln_cli_interrupted) return stop(d, kiln_error(KILN_ERR_CANCELLED, "interrupted"));
    if (phase != 1) return 0;
    const kiln_node *n = node_at(d, i);
    const kiln_program *p = d->be.prog;
    node_rec *r = &d->rec[i];
    const kiln_backend *b = p->backends[n->backend];
    const char *unit = b->unit ? b->unit(p->backend_ctx[n->backend], n, in) : NULL;
    snprintf(r->unit, sizeof r->unit, "%s", unit ? unit : "-");
    r->fallback = kiln_program_node_is_fallback(p, n);
    region reg = region_of(n, in, out, out->data, 0);
    kiln_status st = keep_region(&reg, &r->data, &r->got, n->name);
    if (!st && d->dumping) st = dump_region(d, n, "backend", &reg);
    if (st) return stop(d, st);
    r->ran = 1;
    return 0;
}

/* --against's f32 program: keep the outputs of nodes the debugged method has. */
static int observe_f32(void *user, int method, int j, const kiln_tensor *const *in,
                       const kiln_tensor *out, int phase) {
    debugger *d = user;
    if (kiln_cli_interrupted) return stop(d, kiln_error(KILN_ERR_CANCELLED, "interrupted"));
    if (phase != 1) return 0;
    for (int i = 0; i < d->g->n_nodes; i++) {
        if (d->fp_node[i] != j) continue;
        const kiln_node *n = &d->fp.prog->mod.methods[method].nodes[j];
        region reg = region_of(n, in, out, out->data, 0);
        kiln_status st = keep_region(&reg, &d->rec[i].f32, &d->rec[i].f32r, n->name);
        if (st) return stop(d, st);
    }
    return 0;
}

/* The reference: before a node, run it alone on the backend under test with
 * the reference's inputs; after it, compare. */
static int observe_reference(void *user, int method, int i, const kiln_tensor *const *in,
                             const kiln_tensor *out, int phase) {
    debugger *d = user;
    if (kiln_cli_interrupted) return stop(d, kiln_error(KILN_ERR_CANCELLED, "interrupted"));
    const kiln_node *n = node_at(d, i);
    node_rec *r = &d->rec[i];
    if (phase == 0) {
        d->own_ok = 0;
        kiln_tensor o = *out; /* a kv_store writes into a copy of the reference's cache there */
        o.data = d->own_buf;
        if (n->op != KILN_OP_KV_STORE && d->g->values[n->out].kind != KILN_VAL_ACT)
            return 0; /* another op writing state: no own error (n/a) */
        kiln_status st =
            kiln_program_exec_node(d->be.prog, d->be.method, i, in, &o, d->scratch, d->scratch_bytes);
        if (st) {
            fprintf(stderr, "kiln debug: node %d '%s' alone on the backend: %s\n", i, n->name,
                    kiln_last_error());
            r->own_failed = 1;
        } else {
            d->own_ok = 1;
        }
        return 0;
    }
    region ref = region_of(n, in, out, out->data, 0);
    if (r->ran) r->err = compare(&r->got, &ref);
    if (d->own_ok) {
        region own = region_of(n, in, out, d->own_buf, 1),
               refw = region_of(n, in, out, out->data, 1);
        r->own = compare(&own, &refw);
    }
    if (r->f32) r->quant = compare(&ref, &r->f32r);
    if (d->dumping) {
        kiln_status st = dump_region(d, n, "reference", &ref);
        if (st) return stop(d, st);
    }
    return 0;
}

/* ---- the language model: history and inputs ------------------------------------------------- */

static int is_i32_vec(const kiln_program *p, int method, int input, int64_t len) {
    kiln_tensor_info t;
    return input >= 0 && !kiln_method_input_info(p, method, input, &t) && t.dtype == KILN_I32 &&
           t.ndim == 1 && (len < 0 || t.shape[0] == len);
}

/* prefill (tokens [P], pos [1], all_logits [1]) and decode (tokens [1],
 * pos [1]), all i32, and the vocabulary and context in the metadata: what
 * src/models/llama.c builds. */
static int detect_llm(debugger *d) {
    const kiln_program *p = d->be.prog;
    if (kiln_program_meta_int(p, "llm.vocab_size", &d->vocab) || d->vocab < 1 ||
        kiln_program_meta_int(p, "llm.context_length", &d->ctx) || d->ctx < 1 ||
        kiln_program_find_method(p, "prefill", &d->pre) ||
        kiln_program_find_method(p, "decode", &d->dec))
        return 0;
    d->pre_tok = kiln_method_input_index(p, d->pre, "tokens");
    d->pre_pos = kiln_method_input_index(p, d->pre, "pos");
    d->pre_all = kiln_method_input_index(p, d->pre, "all_logits");
    d->dec_tok = kiln_method_input_index(p, d->dec, "tokens");
    d->dec_pos = kiln_method_input_index(p, d->dec, "pos");
    if (!is_i32_vec(p, d->pre, d->pre_tok, -1) || !is_i32_vec(p, d->pre, d->pre_pos, 1) ||
        !is_i32_vec(p, d->pre, d->pre_all, 1) || !is_i32_vec(p, d->dec, d->dec_tok, 1) ||
        !is_i32_vec(p, d->dec, d->dec_pos, 1) || kiln_method_input_count(p, d->pre) != 3 ||
        kiln_method_input_count(p, d->dec) != 2)
        return 0;
    kiln_tensor_info t;
    kiln_method_input_info(p, d->pre, d->pre_tok, &t);
    d->prefill_max = t.shape[0];
    return d->prefill_max >= 1 && (d->method == d->pre || d->method == d->dec);
}

/* The token at context position q: the prompt's, then a hash of (seed, q). */
static int32_t token_at(const debugger *d, int64_t q) {
    if (q < d->n_prompt) return d->prompt[q];
    return kiln_token_at((uint64_t)d->o->seed, q, d->vocab);
}

/* Prefills tokens 0 .. d->position - 1 on one side, in calls of at most the
 * prefill size. */
static kiln_status build_history(debugger *d, side *s, const char *label) {
    if (kiln_program_find_method(s->prog, "prefill", &s->pre) ||
        (s->pre_tok = kiln_method_input_index(s->prog, s->pre, "tokens")) < 0 ||
        (s->pre_pos = kiln_method_input_index(s->prog, s->pre, "pos")) < 0 ||
        (s->pre_all = kiln_method_input_index(s->prog, s->pre, "all_logits")) < 0)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "%s: no prefill method taking tokens, pos and all_logits", label);
    int32_t *tok = malloc((size_t)d->prefill_max * sizeof *tok);
    if (!tok) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (int64_t q = 0; q < d->position && !st;) {
        int64_t n = d->position - q < d->prefill_max ? d->position - q : d->prefill_max;
        int32_t pos = (int32_t)q, all = 0;
        int64_t one = 1;
        for (int64_t k = 0; k < n; k++)
            tok[k] = token_at(d, q + k);
        if (kiln_cli_interrupted) st = kiln_error(KILN_ERR_CANCELLED, "interrupted");
        if (!st) st = kiln_session_set_input(s->sess, s->pre, s->pre_tok, tok, KILN_I32, 1, &n);
        if (!st) st = kiln_session_set_input(s->sess, s->pre, s->pre_pos, &pos, KILN_I32, 1, &one);
        if (!st) st = kiln_session_set_input(s->sess, s->pre, s->pre_all, &all, KILN_I32, 1, &one);
        if (!st) st = kiln_session_execute(s->sess, s->pre);
        if (st)
            st = kiln_error_wrap(st, "%s: building the history: prefill of %lld tokens at %lld",
                                 label, (long long)n, (long long)q);
        q += n;
    }
    free(tok);
    return st;
}

/* ---- the call's inputs ---------------------------------------------------------------------- */

static kiln_status inputs_alloc(debugger *d) {
    const kiln_program *p = d->be.prog;
    d->n_in = kiln_method_input_count(p, d->method);
    d->in_info = calloc((size_t)d->n_in + 1, sizeof *d->in_info);
    d->in_data = calloc((size_t)d->n_in + 1, sizeof *d->in_data);
    d->in_shape = calloc((size_t)d->n_in + 1, sizeof *d->in_shape);
    if (!d->in_info || !d->in_data || !d->in_shape)
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < d->n_in; i++) {
        kiln_tensor_info *t = &d->in_info[i];
        kiln_status st = kiln_method_input_info(p, d->method, i, t);
        if (st) return st;
        uint64_t n = kiln_shape_bytes(t->dtype, t->ndim, t->shape);
        if (!(d->in_data[i] = calloc(1, n ? (size_t)n : 1)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory for input '%s'", t->name);
        memcpy(d->in_shape[i], t->shape, sizeof t->shape);
    }
    return KILN_OK;
}

/* Valid random values for input i; T is the token count of a dynamic dim. */
static void random_input(debugger *d, int i, int64_t T) {
    const kiln_tensor_info *t = &d->in_info[i];
    for (int k = 0; k < t->ndim; k++)
        d->in_shape[i][k] = t->dynamic_mask >> k & 1 ? T : t->shape[k];
    uint64_t n = kiln_shape_elems(t->ndim, d->in_shape[i]);
    uint64_t s = kiln_mix64((uint64_t)d->o->seed ^ kiln_mix64((uint64_t)i + 1));
    for (uint64_t k = 0; k < n; k++) {
        uint64_t x = kiln_mix64(s + k);
        float f = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        switch (t->dtype) {
        case KILN_I32:
            ((int32_t *)d->in_data[i])[k] = 0;
            break;
        case KILN_F32:
            ((float *)d->in_data[i])[k] = f;
            break;
        case KILN_F16:
            ((uint16_t *)d->in_data[i])[k] = kiln_f32_to_f16(f);
            break;
        case KILN_BF16:
            ((uint16_t *)d->in_data[i])[k] = kiln_f32_to_bf16(f);
            break;
        default:
            break;
        }
    }
}

/* --inputs: every input of the method from the folder, checked against
 * its declaration. */
static kiln_status read_inputs(debugger *d) {
    kiln_tensor_folder f = {0};
    struct stat sb;
    const char *dir = d->o->inputs;
    if (stat(dir, &sb) != 0)
        return kiln_error(KILN_ERR_IO, "cannot open '%s' (--inputs): %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "--inputs '%s' is not a folder: give a tensor folder (docs/TENSORS.md)",
                          dir);
    kiln_status st = kiln_tensor_folder_read(dir, &f);
    if (st) return st;
    const char *mname = d->g->name;
    char missing[512] = "";
    size_t nm = 0;
    for (int i = 0; i < d->n_in && !st; i++) {
        const kiln_tensor_entry *e =
            kiln_tensor_folder_find(&f, mname, "input", NULL, d->in_info[i].name);
        if (!e) {
            if (nm < sizeof missing)
                nm += (size_t)snprintf(missing + nm, sizeof missing - nm, "%s'%s'", nm ? ", " : "",
                                       d->in_info[i].name);
            continue;
        }
        char src[1200];
        snprintf(src, sizeof src, "%s/%s", f.dir, e->file);
        if ((st = kiln_tensor_check_input(mname, &d->in_info[i], e->dtype, e->ndim, e->shape, src)))
            break;
        memcpy(d->in_shape[i], e->shape, (size_t)e->ndim * sizeof *e->shape);
        if (e->nbytes) memcpy(d->in_data[i], e->data, (size_t)e->nbytes);
    }
    /* an input for this method that it does not have: a misspelt name */
    for (int k = 0; !st && !nm && k < f.n; k++) {
        const kiln_tensor_entry *e = &f.items[k];
        if ((e->role && strcmp(e->role, "input")) || e->node ||
            (e->method && strcmp(e->method, mname)))
            continue;
        int known = 0;
        for (int i = 0; i < d->n_in; i++)
            known |= !strcmp(e->name, d->in_info[i].name);
        if (!known && e->method)
            st = kiln_error(KILN_ERR_INVALID_ARG, "'%s/%s': tensor '%s' is no input of method '%s'",
                            f.dir, e->file, e->name, mname);
    }
    if (!st && nm)
        st = kiln_error(KILN_ERR_INVALID_ARG, "'%s' lacks input %s of method '%s'", dir, missing,
                        mname);
    kiln_tensor_folder_free(&f);
    return st;
}

static kiln_status set_inputs(debugger *d, side *s) {
    for (int i = 0; i < d->n_in; i++) {
        kiln_status st =
            kiln_session_set_input(s->sess, s->method, i, d->in_data[i], d->in_info[i].dtype,
                                   d->in_info[i].ndim, d->in_shape[i]);
        if (st) return st;
    }
    return KILN_OK;
}

/* ---- --against: the f32 program ------------------------------------------------------------- */

/* Compiles --against into tmpdir/f32.kiln (tmpdir: a private folder made
 * here, removed by the caller) and opens it. */
static kiln_status against_open(debugger *d, char *tmpdir, size_t cap) {
    const options *o = d->o;
    const char *tdir = getenv("TMPDIR");
    char tmp[1200];
    snprintf(tmpdir, cap, "%s/kiln-debug-XXXXXX", tdir && *tdir ? tdir : "/tmp");
    if (!mkdtemp(tmpdir)) {
        kiln_status st = kiln_error(KILN_ERR_IO, "cannot make a temporary folder '%s': %s", tmpdir,
                                    strerror(errno));
        tmpdir[0] = 0;
        return st;
    }
    snprintf(tmp, sizeof tmp, "%s/f32.kiln", tmpdir);
    kiln_compile_options co;
    kiln_compile_options_init(&co);
    co.input = o->against;
    co.tokenizer = o->against_tok;
    co.output = tmp;
    co.quant = "f32";
    co.backends = "ref";
    co.progress = kiln_cli_progress; /* a bar on a terminal; Ctrl-C stops it */
    int64_t v;
    if (!kiln_program_meta_int(d->be.prog, "llm.prefill_max_tokens", &v)) co.prefill = (int)v;
    if (d->ctx > 0) co.max_seq = (int)d->ctx;
    /* the same KV cache element type: the comparison is of the weights */
    const kiln_module *m = &d->be.prog->mod;
    for (int s = 0; s < m->n_states; s++)
        if (m->states[s].dtype == KILN_F32) co.kv_type = "f32";
    fprintf(stderr, "kiln debug: compiling %s to an f32 program (%s)\n", kiln_basename(o->against),
            tmp);
    kiln_status st = kiln_compile(&co);
    if (st) return kiln_error_wrap(st, "--against '%s'", o->against);
    kiln_open_options oo;
    memset(&oo, 0, sizeof oo);
    if ((st = kiln_program_open_with(tmp, &oo, &d->fp.prog))) return st;
    if ((st = kiln_program_find_method(d->fp.prog, d->g->name, &d->fp.method)))
        return kiln_error(KILN_ERR_INVALID_ARG, "--against '%s': its program has no method '%s'",
                          o->against, d->g->name);
    /* the same inputs */
    if (kiln_method_input_count(d->fp.prog, d->fp.method) != d->n_in)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "--against '%s': method '%s' takes other inputs than the program's",
                          o->against, d->g->name);
    for (int i = 0; i < d->n_in; i++) {
        kiln_tensor_info t;
        if ((st = kiln_method_input_info(d->fp.prog, d->fp.method, i, &t))) return st;
        if (strcmp(t.name, d->in_info[i].name) || t.dtype != d->in_info[i].dtype ||
            t.ndim != d->in_info[i].ndim || memcmp(t.shape, d->in_info[i].shape, sizeof t.shape))
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "--against '%s': method '%s' input '%s' differs from the program's",
                              o->against, d->g->name, t.name);
    }
    const kiln_graph *fg = &d->fp.prog->mod.methods[d->fp.method];
    if (!(d->fp_node = malloc((size_t)d->g->n_nodes * sizeof *d->fp_node)))
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    int matched = 0;
    for (int i = 0; i < d->g->n_nodes; i++) {
        d->fp_node[i] = -1;
        for (int j = 0; j < fg->n_nodes && d->fp_node[i] < 0; j++)
            if (!strcmp(fg->nodes[j].name, d->g->nodes[i].name)) d->fp_node[i] = j;
        matched += d->fp_node[i] >= 0;
    }
    fprintf(stderr, "kiln debug: %d of %d nodes matched by name in the f32 program\n", matched,
            d->g->n_nodes);
    return kiln_session_create(d->fp.prog, &d->fp.sess);
}

/* ---- the report ----------------------------------------------------------------------------- */

static const char *fmt_num(char *buf, size_t cap, double v, int kind) {
    /* kind 0: cosine, 1: error, 2: dB */
    if (isnan(v)) return "nan";
    if (isinf(v)) return v > 0 ? "inf" : "-inf";
    if (kind == 0)
        snprintf(buf, cap, "%.6f", v);
    else if (kind == 1)
        snprintf(buf, cap, v == 0 ? "0" : "%.2e", v);
    else
        snprintf(buf, cap, "%.1f", v);
    return buf;
}

/* The row's cells, in column order. */
enum {
    C_ID,
    C_NODE,
    C_OP,
    C_BACKEND,
    C_UNIT,
    C_COS,
    C_MAX,
    C_REL,
    C_SNR,
    C_OWN_COS,
    C_OWN_REL,
    C_Q_COS,
    C_Q_REL,
    C_COUNT
};
static const char *COL_NAME[C_COUNT] = {"id",      "node",      "op",       "backend", "unit",
                                        "cos",     "max_abs",   "rel",      "snr_db",  "own_cos",
                                        "own_rel", "quant_cos", "quant_rel"};

static void row_cells(const debugger *d, int i, char cell[C_COUNT][96]) {
    const kiln_node *n = node_at(d, i);
    const node_rec *r = &d->rec[i];
    char t[64];
    snprintf(cell[C_ID], 96, "%d", i);
    snprintf(cell[C_NODE], 96, "%s", n->name);
    snprintf(cell[C_OP], 96, "%s", kiln_op_name(n->op));
    snprintf(cell[C_BACKEND], 96, "%s%s", d->be.prog->mod.backends[n->backend],
             r->fallback ? "*" : "");
    snprintf(cell[C_UNIT], 96, "%s", r->ran ? r->unit : "-");
    const cmp *c = &r->err;
    if (!c->valid || c->mismatch) {
        for (int k = C_COS; k <= C_SNR; k++)
            snprintf(cell[k], 96, "%s", c->mismatch ? "shape" : "n/a");
    } else {
        snprintf(cell[C_COS], 96, "%s", fmt_num(t, sizeof t, c->cos, 0));
        snprintf(cell[C_MAX], 96, "%s", fmt_num(t, sizeof t, c->max_abs, 1));
        snprintf(cell[C_REL], 96, "%s", fmt_num(t, sizeof t, c->rel, 1));
        snprintf(cell[C_SNR], 96, "%s", fmt_num(t, sizeof t, c->snr_db, 2));
    }
    const cmp *pairs[2] = {&r->own, &r->quant};
    for (int k = 0; k < 2; k++) {
        c = pairs[k];
        const char *none = k == 0 && r->own_failed ? "error" : "n/a";
        snprintf(cell[C_OWN_COS + 2 * k], 96, "%s",
                 !c->valid     ? none
                 : c->mismatch ? "shape"
                               : fmt_num(t, sizeof t, c->cos, 0));
        snprintf(cell[C_OWN_REL + 2 * k], 96, "%s",
                 !c->valid     ? none
                 : c->mismatch ? "shape"
                               : fmt_num(t, sizeof t, c->rel, 1));
    }
}

static void describe(const debugger *d, int i, char *buf, size_t cap) {
    const kiln_node *n = node_at(d, i);
    snprintf(buf, cap, "node %d %s (%s on %s)", i, n->name, kiln_op_name(n->op),
             d->be.prog->mod.backends[n->backend]);
}

static void report(const debugger *d) {
    const options *o = d->o;
    int n = d->g->n_nodes, ncol = d->fp.prog ? C_COUNT : C_Q_COS;
    int first = -1, first_own = -1, any_fallback = 0;
    for (int i = 0; i < n; i++) {
        if (first < 0 && past(&d->rec[i].err, o->threshold)) first = i;
        if (first_own < 0 && past(&d->rec[i].own, o->threshold)) first_own = i;
        any_fallback |= d->rec[i].fallback;
    }
    char(*cells)[C_COUNT][96] = malloc((size_t)(n + 1) * sizeof *cells);
    if (!cells) return;
    int w[C_COUNT];
    for (int k = 0; k < C_COUNT; k++) {
        snprintf(cells[0][k], 96, "%s", COL_NAME[k]);
        w[k] = (int)strlen(COL_NAME[k]);
    }
    for (int i = 0; i < n; i++) {
        row_cells(d, i, cells[i + 1]);
        for (int k = 0; k < ncol; k++)
            if ((int)strlen(cells[i + 1][k]) > w[k]) w[k] = (int)strlen(cells[i + 1][k]);
    }
    for (int i = 0; i <= n; i++) {
        char line[1400];
        size_t l = 0;
        for (int k = 0; k < ncol && l < sizeof line; k++) {
            /* text columns left-aligned, numbers right-aligned */
            int left = k >= C_NODE && k <= C_UNIT;
            l += (size_t)snprintf(line + l, sizeof line - l, "%s%*s", k ? "  " : "",
                                  left ? -w[k] : w[k], cells[i][k]);
        }
        if (i > 0 && (i - 1 == first || i - 1 == first_own) && l < sizeof line)
            snprintf(line + l, sizeof line - l, "  <- %s%s%s",
                     i - 1 == first ? "first past threshold" : "",
                     i - 1 == first && i - 1 == first_own ? ", " : "",
                     i - 1 == first_own ? "first own error" : "");
        else
            while (l > 0 && line[l - 1] == ' ')
                line[--l] = 0;
        puts(line);
    }
    free(cells);
    if (any_fallback)
        printf("* ref standing in for a backend that does not run the node (a fallback)\n");

    char what[400];
    printf("\nsummary: %d node%s, threshold cos %g\n", n, n == 1 ? "" : "s", o->threshold);
    if (first >= 0) {
        char t[64];
        describe(d, first, what, sizeof what);
        char t2[64];
        printf("first past threshold: %s: cos %s, rel %s\n", what,
               d->rec[first].err.mismatch ? "shape"
                                          : fmt_num(t, sizeof t, d->rec[first].err.cos, 0),
               d->rec[first].err.mismatch ? "shape"
                                          : fmt_num(t2, sizeof t2, d->rec[first].err.rel, 1));
    } else {
        printf("first past threshold: none (every node's cos >= %g)\n", o->threshold);
    }
    if (first_own >= 0) {
        char t[64];
        describe(d, first_own, what, sizeof what);
        printf("first own error: %s: own cos %s given the reference's inputs\n", what,
               d->rec[first_own].own.mismatch ? "shape"
                                              : fmt_num(t, sizeof t, d->rec[first_own].own.cos, 0));
    } else {
        printf("first own error: none (every node given the reference's inputs has cos >= %g)\n",
               o->threshold);
    }
    if (d->fp.prog) {
        int worst = -1;
        double low = INFINITY;
        for (int i = 0; i < n; i++) {
            const cmp *q = &d->rec[i].quant;
            double key = q->mismatch || isnan(q->cos) ? -INFINITY : q->cos;
            if (q->valid && (worst < 0 || key < low)) worst = i, low = key;
        }
        if (worst >= 0) {
            char t[64], t2[64];
            describe(d, worst, what, sizeof what);
            printf("quantization (reference vs the f32 program): lowest cos at %s: quant_cos %s, "
                   "quant_rel %s\n",
                   what,
                   d->rec[worst].quant.mismatch ? "shape"
                                                : fmt_num(t, sizeof t, d->rec[worst].quant.cos, 0),
                   d->rec[worst].quant.mismatch
                       ? "shape"
                       : fmt_num(t2, sizeof t2, d->rec[worst].quant.rel, 1));
        }
    }
    if (first_own >= 0) {
        describe(d, first_own, what, sizeof what);
        printf("verdict: %s computes wrongly on its own", what);
        if (first >= 0 && first < first_own)
            printf("; the outputs part earlier, at node %d %s, from error carried in", first,
                   node_at(d, first)->name);
        printf("\n");
    } else if (first >= 0) {
        describe(d, first, what, sizeof what);
        printf("verdict: no node is wrong on its own; small errors add up, past the threshold "
               "first at %s\n",
               what);
    } else {
        printf("verdict: the backend agrees with the reference at every node\n");
    }
}

/* ---- main ----------------------------------------------------------------------------------- */

/* A name or an index; -1 (usage error printed) when neither. */
static int pick_method(const kiln_program *p, const char *s) {
    int idx;
    if (!kiln_program_find_method(p, s, &idx)) return idx;
    long long v;
    int n = kiln_program_method_count(p);
    if (!kiln_cli_int(s, 0, n - 1, &v)) return (int)v;
    char names[512];
    size_t l = 0;
    names[0] = 0;
    for (int i = 0; i < n && l < sizeof names; i++)
        l += (size_t)snprintf(names + l, sizeof names - l, "%s%d: %s", i ? ", " : "", i,
                              kiln_program_method_name(p, i));
    kiln_cli_usage_error(CMD, "--method '%s' is no method of the program (it has %s)", s, names);
    return -1;
}

/* The language model's call: position, tokens, inputs. 0, or a usage
 * error's exit code (printed); *st a failure. */
static int plan_llm_call(debugger *d, kiln_status *st) {
    const options *o = d->o;
    int is_pre = d->method == d->pre;
    if (o->prompt) {
        kiln_tokenizer *tok = NULL;
        size_t len = strlen(o->prompt);
        int cap = (int)(2 * len + 2), n = 0;
        if ((*st = kiln_tokenizer_from_program(d->be.prog, &tok))) return 0;
        if (!(d->prompt = malloc((size_t)cap * sizeof *d->prompt))) {
            kiln_tokenizer_free(tok);
            *st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            return 0;
        }
        *st = kiln_tokenizer_encode(tok, o->prompt, len, 1, d->prompt, cap, &n);
        kiln_tokenizer_free(tok);
        if (*st) return 0;
        d->n_prompt = n;
        for (int k = 0; k < n; k++)
            if (d->prompt[k] < 0 || d->prompt[k] >= d->vocab) {
                *st = kiln_error(KILN_ERR_INVALID_ARG,
                                 "the prompt's token %d is id %d, outside the vocabulary (%lld)", k,
                                 d->prompt[k], (long long)d->vocab);
                return 0;
            }
    }
    if (o->inputs) {
        int ti = is_pre ? d->pre_tok : d->dec_tok, pi = is_pre ? d->pre_pos : d->dec_pos;
        int32_t pos = *(const int32_t *)d->in_data[pi];
        d->n_tokens = d->in_shape[ti][0];
        if (o->have_position && o->position != pos)
            return kiln_cli_usage_error(CMD, "--position %lld, but the input 'pos' of '%s' says %d",
                                        o->position, o->inputs, (int)pos);
        if (pos < 0 || pos + d->n_tokens > d->ctx) {
            *st = kiln_error(KILN_ERR_INVALID_ARG,
                             "'%s': input 'pos' %d with %lld tokens passes the context (%lld "
                             "positions, 0..%lld)",
                             o->inputs, (int)pos, (long long)d->n_tokens, (long long)d->ctx,
                             (long long)d->ctx - 1);
            return 0;
        }
        const int32_t *ids = d->in_data[ti];
        for (int64_t k = 0; k < d->n_tokens; k++)
            if (ids[k] < 0 || ids[k] >= d->vocab) {
                *st = kiln_error(KILN_ERR_INVALID_ARG,
                                 "'%s': input 'tokens' [%lld] is %d, outside the vocabulary "
                                 "(0..%lld)",
                                 o->inputs, (long long)k, (int)ids[k], (long long)d->vocab - 1);
                return 0;
            }
        d->position = pos;
        return 0;
    }
    d->position = o->have_position  ? o->position
                  : is_pre          ? 0
                  : d->n_prompt > 0 ? d->n_prompt - 1
                                    : 0;
    if (d->position >= d->ctx)
        return kiln_cli_usage_error(CMD,
                                    "--position %lld is past the context: the program holds %lld "
                                    "positions (0..%lld)",
                                    (long long)d->position, (long long)d->ctx,
                                    (long long)d->ctx - 1);
    if (!is_pre) {
        if (o->have_tokens)
            return kiln_cli_usage_error(CMD,
                                        "--tokens applies to prefill (decode takes one token)");
        d->n_tokens = 1;
    } else {
        int64_t room = d->ctx - d->position, max = room < d->prefill_max ? room : d->prefill_max;
        if (o->have_tokens) {
            if (o->tokens > max)
                return kiln_cli_usage_error(
                    CMD,
                    "--tokens %lld: a prefill call at position %lld takes 1..%lld (prefill "
                    "size %lld, context %lld)",
                    o->tokens, (long long)d->position, (long long)max, (long long)d->prefill_max,
                    (long long)d->ctx);
            d->n_tokens = o->tokens;
        } else {
            d->n_tokens = d->n_prompt > d->position ? d->n_prompt - d->position : 16;
            if (d->n_tokens > max) d->n_tokens = max;
        }
    }
    int ti = is_pre ? d->pre_tok : d->dec_tok, pi = is_pre ? d->pre_pos : d->dec_pos;
    for (int64_t k = 0; k < d->n_tokens; k++)
        ((int32_t *)d->in_data[ti])[k] = token_at(d, d->position + k);
    d->in_shape[ti][0] = d->n_tokens;
    *(int32_t *)d->in_data[pi] = (int32_t)d->position;
    if (is_pre) *(int32_t *)d->in_data[d->pre_all] = 1; /* every row's logits */
    return 0;
}

int kiln_cmd_debug(int argc, char **argv) {
    options o;
    int rc;
    if (!parse_args(argc, argv, &o, &rc)) return rc;

    debugger d;
    memset(&d, 0, sizeof d);
    d.o = &o;
    char tmpdir[1100] = ""; /* --against's program lives here */
    kiln_status st = KILN_OK;
    kiln_open_options oo;
    memset(&oo, 0, sizeof oo);
    oo.n_threads = (int)o.threads;
    oo.backend = o.backend;
    if ((st = kiln_program_open_with(o.model, &oo, &d.be.prog))) return kiln_cli_fail(CMD, st);
    oo.backend = o.reference;
    if ((st = kiln_program_open_with(o.model, &oo, &d.rf.prog))) goto fail;

    const char *mname = o.method;
    if (!mname) mname = kiln_program_find_method(d.be.prog, "prefill", &d.method) ? "0" : "prefill";
    if ((d.method = pick_method(d.be.prog, mname)) < 0) {
        rc = KILN_EXIT_USAGE;
        goto out;
    }
    d.be.method = d.rf.method = d.method;
    d.g = &d.be.prog->mod.methods[d.method];
    d.llm = detect_llm(&d);
    if (!d.llm && (o.prompt || o.have_position || o.have_tokens)) {
        rc = kiln_cli_usage_error(CMD,
                                  "%s applies to a language model's prefill or decode; method "
                                  "'%s' is not one",
                                  o.prompt          ? "--prompt"
                                  : o.have_position ? "--position"
                                                    : "--tokens",
                                  d.g->name);
        goto out;
    }
    if ((st = inputs_alloc(&d))) goto fail;
    if (o.inputs && (st = read_inputs(&d))) goto fail;
    if (d.llm) {
        if ((rc = plan_llm_call(&d, &st)) || st) goto done_plan;
    } else if (!o.inputs) {
        int64_t T = 1;
        for (int i = 0; i < d.n_in; i++)
            for (int k = 0; k < d.in_info[i].ndim; k++)
                if (d.in_info[i].dynamic_mask >> k & 1)
                    T = d.in_info[i].shape[k] < 16 ? d.in_info[i].shape[k] : 16;
        for (int i = 0; i < d.n_in; i++)
            random_input(&d, i, T);
    }
done_plan:
    if (rc) goto out;
    if (st) goto fail;

    if ((st = kiln_session_create(d.be.prog, &d.be.sess)) ||
        (st = kiln_session_create(d.rf.prog, &d.rf.sess)))
        goto fail;
    if (o.against && (st = against_open(&d, tmpdir, sizeof tmpdir))) goto fail;
    if (o.dump) {
        if ((st = kiln_tensor_folder_create(o.dump, &d.dump))) goto fail;
        d.dumping = 1;
    }
    if (!(d.rec = calloc((size_t)d.g->n_nodes + 1, sizeof *d.rec))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* the own-error buffers: the largest output, the method's scratch */
    uint64_t own_bytes = 64;
    for (int i = 0; i < d.g->n_nodes; i++) {
        const kiln_value *v = &d.g->values[d.g->nodes[i].out];
        uint64_t b = kiln_shape_bytes(v->dtype, v->ndim, v->ne);
        if (b > own_bytes) own_bytes = b;
    }
    d.scratch_bytes = kiln_method_scratch_bytes(d.be.prog, d.method);
    if (!(d.own_buf = kiln_aligned_alloc((size_t)own_bytes)) ||
        !(d.scratch = kiln_aligned_alloc((size_t)(d.scratch_bytes ? d.scratch_bytes : 64)))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory for the own-error buffers");
        goto fail;
    }

    /* the header */
    char used[256] = "";
    const kiln_module *bm = &d.be.prog->mod;
    for (int b = 0; b < bm->n_backends; b++) {
        int any = 0;
        for (int i = 0; i < d.g->n_nodes && !any; i++)
            any = d.g->nodes[i].backend == b;
        size_t l = strlen(used);
        if (any && l < sizeof used)
            snprintf(used + l, sizeof used - l, "%s%s", l ? "+" : "", bm->backends[b]);
    }
    if (d.llm) {
        char hist[200];
        int64_t from_prompt = d.n_prompt < d.position ? d.n_prompt : d.position;
        if (d.position == 0)
            snprintf(hist, sizeof hist, "no history");
        else
            snprintf(hist, sizeof hist,
                     "history: %lld tokens (%lld the prompt's, %lld random) "
                     "prefilled on each side",
                     (long long)d.position, (long long)from_prompt,
                     (long long)(d.position - from_prompt));
        printf("kiln debug: %s: method '%s', %lld token%s at position %lld; %s\n",
               kiln_basename(o.model), d.g->name, (long long)d.n_tokens, d.n_tokens == 1 ? "" : "s",
               (long long)d.position, hist);
    } else
        printf("kiln debug: %s: method '%s' on %s inputs\n", kiln_basename(o.model), d.g->name,
               o.inputs ? "given" : "random");
    printf("backend %s (%s) vs reference %s; threshold cos %g\n\n", used,
           o.backend ? "--backend" : "as compiled", o.reference, o.threshold);
    fflush(stdout);

    side *sides[3] = {&d.fp, &d.be, &d.rf};
    const char *labels[3] = {"f32 program", "backend", "reference"};
    kiln_node_observer obs[3] = {observe_f32, observe_backend, observe_reference};
    for (int k = 0; k < 3; k++) {
        side *s = sides[k];
        if (!s->sess) continue;
        if (d.llm && d.position > 0 && (st = build_history(&d, s, labels[k]))) goto fail;
        if ((st = set_inputs(&d, s))) goto fail;
        kiln_session_set_observer(s->sess, obs[k], &d);
        d.failed = KILN_OK;
        st = kiln_session_execute(s->sess, s->method);
        kiln_session_set_observer(s->sess, NULL, NULL);
        if (d.failed) st = d.failed;
        if (st) {
            st = kiln_error_wrap(st, "%s", labels[k]);
            goto fail;
        }
    }
    if (d.dumping) {
        for (int i = 0; i < d.n_in && !st; i++) {
            kiln_npy_dtype t;
            if (kiln_npy_dtype_from_kiln(d.in_info[i].dtype, &t)) continue;
            kiln_tensor_desc desc = {d.in_info[i].name, d.g->name,    "input", NULL, NULL, t,
                                     d.in_info[i].ndim, d.in_shape[i]};
            if (!(st = kiln_tensor_folder_add(&d.dump, &desc, d.in_data[i]))) d.n_dumped++;
        }
        if (st || (st = kiln_tensor_folder_finish(&d.dump))) goto fail;
    }
    report(&d);
    if (d.dumping) fprintf(stderr, "kiln debug: wrote %d tensors to %s\n", d.n_dumped, o.dump);
    rc = KILN_EXIT_OK;
    goto out;
fail:
    rc = kiln_cli_fail(CMD, st);
out:
    for (int i = 0; d.rec && i < d.g->n_nodes; i++) {
        free(d.rec[i].data);
        free(d.rec[i].f32);
    }
    free(d.rec);
    free(d.fp_node);
    kiln_aligned_free(d.own_buf);
    kiln_aligned_free(d.scratch);
    kiln_tensor_folder_free(&d.dump);
    for (int i = 0; d.in_data && i < d.n_in; i++)
        free(d.in_data[i]);
    free(d.in_data);
    free(d.in_info);
    free(d.in_shape);
    free(d.prompt);
    kiln_session_destroy(d.fp.sess);
    kiln_session_destroy(d.be.sess);
    kiln_session_destroy(d.rf.sess);
    kiln_program_close(d.fp.prog);
    kiln_program_close(d.be.prog);
    kiln_program_close(d.rf.prog);
    if (tmpdir[0]) {
        char path[1200];
        snprintf(path, sizeof path, "%s/f32.kiln", tmpdir);
        remove(path);
        rmdir(tmpdir);
    }
    return rc;
}
