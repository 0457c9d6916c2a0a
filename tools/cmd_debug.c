/* cmd_debug.c: `kiln debug`, the per-node accuracy debugger. The debugging
 * engine (devtools/debugger.h) runs one method call on the backend under
 * test and on a reference backend (the same program opened twice) with the
 * same inputs and the same history, and says per node how far the backend
 * is from the reference, plus the node's own error: the node run alone on
 * the backend, given exactly the reference's inputs, which tells a wrong
 * kernel from error carried in by earlier nodes. This file plans the call
 * (a language model's position, tokens and history; inputs from a folder or
 * random), compiles --against's f32 program, and prints the table, the
 * summary and the --dump folder. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "devtools/devtools.h"
#include "kiln/kiln_compile.h"
#include "kiln/kiln_llm.h"

static const char *CMD = "debug";

/* ---- options -------------------------------------------------------------------------------- */

typedef struct {
    const char *model, *method, *backend, *reference, *prompt, *inputs, *dump, *against,
        *against_tok, *qnn_lib;
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
             "test; a delegate, qnn or testd, runs each node as\n"
             "a graph of its own); default: the backends the\n"
             "program was compiled for"},
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
             "below COS (0..1; default: the bar of the delegate\n"
             "the program runs on, for its precision, as compile\n"
             "--check holds it to (qnn: 0.999 fp16, 0.99 16a8w),\n"
             "else 0.999)"},
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
    KILN_CLI_QNN_LIB(OPT(qnn_lib)),
    {KILN_CLI_END},
};

/* --position and --tokens not given: -1 and 0 (have_* are set after parsing). */
static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->reference = "ref";
    o->threshold = -1; /* not given: the delegate's bar, else 0.999 */
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
    return !(*rc = check_args(o)) && !(*rc = kiln_cli_qnn_lib(CMD, o->qnn_lib));
}

/* The rules between flags: 0, or the exit code of a usage error (printed). */
static int check_args(const options *o) {
    if (!o->model) return kiln_cli_usage_error(CMD, "no program given (-m MODEL.kiln)");
    const char *be[2] = {o->backend, o->reference}, *flag[2] = {"--backend", "--reference"};
    for (int k = 0; k < 2; k++)
        if (be[k] && !kiln_backend_available(be[k]))
            return kiln_cli_usage_error(
                CMD, "%s '%s': this build has no such backend (cpu, ref, test)", flag[k], be[k]);
    if (o->inputs && o->have_tokens)
        return kiln_cli_usage_error(CMD, "--tokens and --inputs: the inputs give the tokens");
    if (o->against_tok && !o->against)
        return kiln_cli_usage_error(CMD, "--against-tokenizer goes with --against");
    return 0;
}

/* ---- the debugged call --------------------------------------------------------------------- */

static int past(const kiln_debug_cmp *c, double threshold) {
    return c->valid && (c->mismatch || !(c->v.cos >= threshold));
}

/* What the report shows of one node of the debugged method. */
typedef struct {
    char unit[80];
    int ran;              /* the backend ran it */
    int fallback;         /* on ref although another backend was asked for */
    kiln_debug_cmp err;   /* backend vs reference */
    kiln_debug_cmp own;   /* the node alone on the backend, the reference's inputs, vs it */
    kiln_debug_cmp quant; /* reference vs the f32 program */
    int own_failed;
} node_rec;

typedef struct {
    const options *o;
    kiln_debugger *dbg;       /* the engine: the program on the backend and on the reference */
    const kiln_program *prog; /* the program under test */
    int method;               /* index of the debugged method */
    const kiln_graph *g;
    node_rec *rec;
    int against; /* --against's f32 program runs beside */
    /* --dump */
    kiln_tensor_folder dump;
    int dumping;
    int n_dumped;
    /* the language model: NULL when the method is not its prefill or decode */
    const kiln_llm *llm;
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

static kiln_status dump_part(debugger *d, const kiln_debug_node *e, const char *role) {
    kiln_npy_dtype t;
    const kiln_debug_tensor *r = &e->out;
    if (kiln_npy_dtype_from_kiln(r->dtype, &t)) return KILN_OK; /* no file dtype: not dumped */
    kiln_tensor_desc desc = {d->g->values[e->node->out].name, d->g->name, role,    e->node->name,
                             kiln_op_name(e->node->op),       t,          r->ndim, r->ne};
    kiln_status st = kiln_tensor_folder_add(&d->dump, &desc, r->data);
    d->n_dumped += !st;
    return st;
}

/* The engine's word on each node: the backend's unit, then the comparisons
 * once the reference has run it; --dump writes both outputs. */
static kiln_status on_node(void *user, const kiln_debug_node *e) {
    debugger *d = user;
    node_rec *r = &d->rec[e->index];
    if (e->side == KILN_DEBUG_BACKEND) {
        snprintf(r->unit, sizeof r->unit, "%s", e->unit ? e->unit : "-");
        r->fallback = e->fallback;
        r->ran = 1;
        return d->dumping ? dump_part(d, e, "backend") : KILN_OK;
    }
    if (e->own_status == KILN_ERR_UNSUPPORTED) {
        r->own_failed = 0; /* a delegate's node does not run alone: n/a */
    } else if (e->own_status) {
        fprintf(stderr, "kiln debug: node %d '%s' alone on the backend: %s\n", e->index,
                e->node->name, e->own_error);
        r->own_failed = 1;
    }
    r->err = e->carried;
    r->own = e->own;
    r->quant = e->against;
    return d->dumping ? dump_part(d, e, "reference") : KILN_OK;
}

static int interrupted(void *user) {
    (void)user;
    return kiln_cli_interrupted;
}

/* The token at context position q: the prompt's, then a hash of (seed, q). */
static int32_t token_at(const debugger *d, int64_t q) {
    if (q < d->n_prompt) return d->prompt[q];
    return kiln_token_at((uint64_t)d->o->seed, q, kiln_llm_get_limits(d->llm)->vocab);
}

/* A language model's history: tokens 0 .. position - 1 prefilled on each
 * side. */
static kiln_status build_history(debugger *d) {
    int32_t *ids = malloc((size_t)d->position * sizeof *ids);
    if (!ids) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int64_t q = 0; q < d->position; q++)
        ids[q] = token_at(d, q);
    kiln_status st = kiln_debugger_history(d->dbg, ids, (int)d->position);
    free(ids);
    return st;
}

/* ---- the call's inputs ---------------------------------------------------------------------- */

static kiln_status inputs_alloc(debugger *d) {
    const kiln_program *p = d->prog;
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

static kiln_status set_inputs(debugger *d) {
    for (int i = 0; i < d->n_in; i++) {
        kiln_status st =
            kiln_debugger_set_input(d->dbg, d->method, i, d->in_data[i], d->in_info[i].dtype,
                                    d->in_info[i].ndim, d->in_shape[i]);
        if (st) return st;
    }
    return KILN_OK;
}

/* ---- --against: the f32 program ------------------------------------------------------------- */

/* Compiles --against into tmpdir/f32.kiln (tmpdir: a private folder made
 * here, removed by the caller) and runs it beside the other two. */
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
    const kiln_llm *lm = kiln_debugger_llm(d->dbg);
    if (lm) {
        co.prefill = kiln_llm_get_limits(lm)->prefill_max;
        co.max_seq = kiln_llm_get_limits(lm)->context;
    }
    /* the same KV cache element type: the comparison is of the weights */
    const kiln_module *m = kiln_program_module(d->prog);
    for (int s = 0; s < m->n_states; s++)
        if (m->states[s].dtype == KILN_F32) co.kv_type = "f32";
    fprintf(stderr, "kiln debug: compiling %s to an f32 program (%s)\n", kiln_basename(o->against),
            tmp);
    kiln_status st = kiln_compile(&co);
    if (st) return kiln_error_wrap(st, "--against '%s'", o->against);
    int matched;
    if ((st = kiln_debugger_against(d->dbg, tmp, d->method, &matched)))
        return kiln_error_wrap(st, "--against '%s'", o->against);
    fprintf(stderr, "kiln debug: %d of %d nodes matched by name in the f32 program\n", matched,
            d->g->n_nodes);
    d->against = 1;
    return KILN_OK;
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
    snprintf(cell[C_BACKEND], 96, "%s%s", kiln_program_module(d->prog)->backends[n->backend],
             r->fallback ? "*" : "");
    snprintf(cell[C_UNIT], 96, "%s", r->ran ? r->unit : "-");
    const kiln_debug_cmp *c = &r->err;
    if (!c->valid || c->mismatch) {
        for (int k = C_COS; k <= C_SNR; k++)
            snprintf(cell[k], 96, "%s", c->mismatch ? "shape" : "n/a");
    } else {
        snprintf(cell[C_COS], 96, "%s", fmt_num(t, sizeof t, c->v.cos, 0));
        snprintf(cell[C_MAX], 96, "%s", fmt_num(t, sizeof t, c->v.max_abs, 1));
        snprintf(cell[C_REL], 96, "%s", fmt_num(t, sizeof t, c->v.rel, 1));
        snprintf(cell[C_SNR], 96, "%s", fmt_num(t, sizeof t, c->v.snr_db, 2));
    }
    const kiln_debug_cmp *pairs[2] = {&r->own, &r->quant};
    for (int k = 0; k < 2; k++) {
        c = pairs[k];
        const char *none = k == 0 && r->own_failed ? "error" : "n/a";
        snprintf(cell[C_OWN_COS + 2 * k], 96, "%s",
                 !c->valid     ? none
                 : c->mismatch ? "shape"
                               : fmt_num(t, sizeof t, c->v.cos, 0));
        snprintf(cell[C_OWN_REL + 2 * k], 96, "%s",
                 !c->valid     ? none
                 : c->mismatch ? "shape"
                               : fmt_num(t, sizeof t, c->v.rel, 1));
    }
}

static void describe(const debugger *d, int i, char *buf, size_t cap) {
    const kiln_node *n = node_at(d, i);
    snprintf(buf, cap, "node %d %s (%s on %s)", i, n->name, kiln_op_name(n->op),
             kiln_program_module(d->prog)->backends[n->backend]);
}

static void report(const debugger *d) {
    const options *o = d->o;
    int n = d->g->n_nodes, ncol = d->against ? C_COUNT : C_Q_COS;
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
                                          : fmt_num(t, sizeof t, d->rec[first].err.v.cos, 0),
               d->rec[first].err.mismatch ? "shape"
                                          : fmt_num(t2, sizeof t2, d->rec[first].err.v.rel, 1));
    } else {
        printf("first past threshold: none (every node's cos >= %g)\n", o->threshold);
    }
    if (first_own >= 0) {
        char t[64];
        describe(d, first_own, what, sizeof what);
        printf("first own error: %s: own cos %s given the reference's inputs\n", what,
               d->rec[first_own].own.mismatch
                   ? "shape"
                   : fmt_num(t, sizeof t, d->rec[first_own].own.v.cos, 0));
    } else {
        printf("first own error: none (every node given the reference's inputs has cos >= %g)\n",
               o->threshold);
    }
    int unseen = 0;
    for (int i = 0; i < n; i++)
        unseen += !d->rec[i].ran;
    if (unseen)
        printf("not observed: %d node%s inside delegate partitions (a delegate shows only the "
               "outputs that leave a partition; own_cos there is the node run alone through the "
               "delegate's lowering)\n",
               unseen, unseen == 1 ? "" : "s");
    if (d->against) {
        int worst = -1;
        double low = INFINITY;
        for (int i = 0; i < n; i++) {
            const kiln_debug_cmp *q = &d->rec[i].quant;
            double key = q->mismatch || isnan(q->v.cos) ? -INFINITY : q->v.cos;
            if (q->valid && (worst < 0 || key < low)) worst = i, low = key;
        }
        if (worst >= 0) {
            char t[64], t2[64];
            describe(d, worst, what, sizeof what);
            printf("quantization (reference vs the f32 program): lowest cos at %s: quant_cos %s, "
                   "quant_rel %s\n",
                   what,
                   d->rec[worst].quant.mismatch
                       ? "shape"
                       : fmt_num(t, sizeof t, d->rec[worst].quant.v.cos, 0),
                   d->rec[worst].quant.mismatch
                       ? "shape"
                       : fmt_num(t2, sizeof t2, d->rec[worst].quant.v.rel, 1));
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
        printf("verdict: the backend agrees with the reference at every node%s\n",
               unseen ? " it shows" : "");
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
    const kiln_llm_limits *lim = kiln_llm_get_limits(d->llm);
    int64_t vocab = lim->vocab, ctx = lim->context, prefill_max = lim->prefill_max;
    int is_pre = d->method == kiln_llm_prefill_method(d->llm);
    /* the inputs the contract names */
    int ti =
        kiln_llm_input_index(d->llm, is_pre ? KILN_LLM_PREFILL_TOKENS : KILN_LLM_DECODE_TOKENS);
    int pi = kiln_llm_input_index(d->llm, is_pre ? KILN_LLM_PREFILL_POS : KILN_LLM_DECODE_POS);
    int ai = is_pre ? kiln_llm_input_index(d->llm, KILN_LLM_PREFILL_ALL_LOGITS) : -1;
    if (o->prompt) {
        kiln_tokenizer *tok = NULL;
        size_t len = strlen(o->prompt);
        int cap = (int)(2 * len + 2), n = 0;
        if ((*st = kiln_tokenizer_from_program(d->prog, &tok))) return 0;
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
            if (d->prompt[k] < 0 || d->prompt[k] >= vocab) {
                *st = kiln_error(KILN_ERR_INVALID_ARG,
                                 "the prompt's token %d is id %d, outside the vocabulary (%lld)", k,
                                 d->prompt[k], (long long)vocab);
                return 0;
            }
    }
    if (o->inputs) {
        int32_t pos = *(const int32_t *)d->in_data[pi];
        d->n_tokens = d->in_shape[ti][0];
        if (o->have_position && o->position != pos)
            return kiln_cli_usage_error(CMD, "--position %lld, but the input 'pos' of '%s' says %d",
                                        o->position, o->inputs, (int)pos);
        if (pos < 0 || pos + d->n_tokens > ctx) {
            *st = kiln_error(KILN_ERR_INVALID_ARG,
                             "'%s': input 'pos' %d with %lld tokens passes the context (%lld "
                             "positions, 0..%lld)",
                             o->inputs, (int)pos, (long long)d->n_tokens, (long long)ctx,
                             (long long)ctx - 1);
            return 0;
        }
        const int32_t *ids = d->in_data[ti];
        for (int64_t k = 0; k < d->n_tokens; k++)
            if (ids[k] < 0 || ids[k] >= vocab) {
                *st = kiln_error(KILN_ERR_INVALID_ARG,
                                 "'%s': input 'tokens' [%lld] is %d, outside the vocabulary "
                                 "(0..%lld)",
                                 o->inputs, (long long)k, (int)ids[k], (long long)vocab - 1);
                return 0;
            }
        d->position = pos;
        return 0;
    }
    d->position = o->have_position  ? o->position
                  : is_pre          ? 0
                  : d->n_prompt > 0 ? d->n_prompt - 1
                                    : 0;
    if (d->position >= ctx)
        return kiln_cli_usage_error(CMD,
                                    "--position %lld is past the context: the program holds %lld "
                                    "positions (0..%lld)",
                                    (long long)d->position, (long long)ctx, (long long)ctx - 1);
    if (!is_pre) {
        if (o->have_tokens)
            return kiln_cli_usage_error(CMD,
                                        "--tokens applies to prefill (decode takes one token)");
        d->n_tokens = 1;
    } else {
        int64_t room = ctx - d->position, max = room < prefill_max ? room : prefill_max;
        if (o->have_tokens) {
            if (o->tokens > max)
                return kiln_cli_usage_error(
                    CMD,
                    "--tokens %lld: a prefill call at position %lld takes 1..%lld (prefill "
                    "size %lld, context %lld)",
                    o->tokens, (long long)d->position, (long long)max, (long long)prefill_max,
                    (long long)ctx);
            d->n_tokens = o->tokens;
        } else {
            d->n_tokens = d->n_prompt > d->position ? d->n_prompt - d->position : 16;
            if (d->n_tokens > max) d->n_tokens = max;
        }
    }
    for (int64_t k = 0; k < d->n_tokens; k++)
        ((int32_t *)d->in_data[ti])[k] = token_at(d, d->position + k);
    d->in_shape[ti][0] = d->n_tokens;
    *(int32_t *)d->in_data[pi] = (int32_t)d->position;
    if (ai >= 0) *(int32_t *)d->in_data[ai] = 1; /* every row's logits */
    /* A vision-language program's other per-token inputs: text rows (rope
     * positions equal to the rows in all three streams, no visual tokens:
     * the buffers are zero). */
    for (int i = 0; i < d->n_in; i++)
        if (i != ti && d->in_info[i].dynamic_mask & 1u) d->in_shape[i][0] = d->n_tokens;
    int ri =
        kiln_llm_input_index(d->llm, is_pre ? KILN_LLM_PREFILL_ROPE_POS : KILN_LLM_DECODE_ROPE_POS);
    for (int64_t k = 0; ri >= 0 && k < 3 * d->n_tokens; k++)
        ((int32_t *)d->in_data[ri])[k] = (int32_t)(d->position + k / 3);
    return 0;
}

/* The report's first lines: the program, the call and what runs it. */
static void print_header(const debugger *d) {
    char used[256];
    kiln_program_backends_used(d->prog, d->method, used, sizeof used);
    if (d->llm) {
        char hist[200];
        int64_t from_prompt = d->n_prompt < d->position ? d->n_prompt : d->position;
        if (d->position == 0)
            snprintf(hist, sizeof hist, "no history");
        else
            snprintf(hist, sizeof hist,
                     "history: %lld tokens (%lld the prompt's, %lld random) "
                     "prefilled on each side",
                     (long long)d->position, (long long)from_prompt,
                     (long long)(d->position - from_prompt));
        printf("kiln debug: %s: method '%s', %lld token%s at position %lld; %s\n",
               kiln_basename(d->o->model), d->g->name, (long long)d->n_tokens,
               d->n_tokens == 1 ? "" : "s", (long long)d->position, hist);
    } else
        printf("kiln debug: %s: method '%s' on %s inputs\n", kiln_basename(d->o->model), d->g->name,
               d->o->inputs ? "given" : "random");
    printf("backend %s (%s) vs reference %s; threshold cos %g\n\n", used,
           d->o->backend ? "--backend" : "as compiled", d->o->reference, d->o->threshold);
    kiln_cli_flush();
}

/* Adds the call's inputs to the --dump folder and finishes it. */
static kiln_status dump_inputs(debugger *d) {
    kiln_status st = KILN_OK;
    for (int i = 0; i < d->n_in && !st; i++) {
        kiln_npy_dtype t;
        if (kiln_npy_dtype_from_kiln(d->in_info[i].dtype, &t)) continue;
        kiln_tensor_desc desc = {d->in_info[i].name, d->g->name,    "input", NULL, NULL, t,
                                 d->in_info[i].ndim, d->in_shape[i]};
        if (!(st = kiln_tensor_folder_add(&d->dump, &desc, d->in_data[i]))) d->n_dumped++;
    }
    return st ? st : kiln_tensor_folder_finish(&d->dump);
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
    kiln_debugger_options dopt;
    memset(&dopt, 0, sizeof dopt);
    dopt.backend = o.backend;
    dopt.reference = o.reference;
    dopt.n_threads = (int)o.threads;
    dopt.label[KILN_DEBUG_AGAINST] = "f32 program";
    dopt.cancel = interrupted;
    if ((st = kiln_debugger_open(o.model, &dopt, &d.dbg))) return kiln_cli_fail(CMD, st);
    d.prog = kiln_debugger_program(d.dbg, KILN_DEBUG_BACKEND);
    if (o.threshold < 0)
        o.threshold = kiln_debugger_bar(d.dbg) > 0 ? kiln_debugger_bar(d.dbg) : 0.999;

    const char *mname = o.method;
    if (!mname) mname = kiln_program_find_method(d.prog, "prefill", &d.method) ? "0" : "prefill";
    if ((d.method = pick_method(d.prog, mname)) < 0) {
        rc = KILN_EXIT_USAGE;
        goto out;
    }
    d.g = &kiln_program_module(d.prog)->methods[d.method];
    const kiln_llm *lm = kiln_debugger_llm(d.dbg);
    if (lm && (d.method == kiln_llm_prefill_method(lm) || d.method == kiln_llm_decode_method(lm)))
        d.llm = lm;
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

    if (o.against && (st = against_open(&d, tmpdir, sizeof tmpdir))) goto fail;
    if (o.dump) {
        if ((st = kiln_tensor_folder_create(o.dump, &d.dump))) goto fail;
        d.dumping = 1;
    }
    if (!(d.rec = calloc((size_t)d.g->n_nodes + 1, sizeof *d.rec))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }

    print_header(&d);

    /* the call on each side, after the history: the f32 program, the
     * backend, the reference with each node's own error */
    kiln_debug_hooks h = {KILN_DEBUG_RUN_BACKEND | KILN_DEBUG_RUN_REFERENCE | KILN_DEBUG_OWN |
                              (d.against ? KILN_DEBUG_RUN_AGAINST : 0),
                          on_node, NULL, &d};
    if ((d.llm && d.position > 0 && (st = build_history(&d))) || (st = set_inputs(&d)) ||
        (st = kiln_debugger_execute(d.dbg, d.method, &h)))
        goto fail;
    if (d.dumping && (st = dump_inputs(&d))) goto fail;
    report(&d);
    if (d.dumping) fprintf(stderr, "kiln debug: wrote %d tensors to %s\n", d.n_dumped, o.dump);
    rc = KILN_EXIT_OK;
    goto out;
fail:
    rc = kiln_cli_fail(CMD, st);
out:
    free(d.rec);
    kiln_tensor_folder_free(&d.dump);
    for (int i = 0; d.in_data && i < d.n_in; i++)
        free(d.in_data[i]);
    free(d.in_data);
    free(d.in_info);
    free(d.in_shape);
    free(d.prompt);
    kiln_debugger_close(d.dbg);
    if (tmpdir[0]) {
        char path[1200];
        snprintf(path, sizeof path, "%s/f32.kiln", tmpdir);
        remove(path);
        rmdir(tmpdir);
    }
    return rc;
}
