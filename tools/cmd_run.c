/* cmd_run.c: `kiln run`, the executor runner: runs a program's methods for N
 * timed iterations on given or random inputs, prints each iteration's time
 * and a summary, and writes the last iteration's tensors in the tensor-folder
 * format (docs/TENSORS.md, src/devtools/tensors.c). For a language model,
 * `--method all` is one session: each iteration prefills a prompt and
 * decodes tokens after it, continuing the KV cache across iterations and
 * resetting it when the context is full. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "devtools/devtools.h"

static const char *CMD = "run";

/* ---- options ------------------------------------------------------------------- */

typedef struct {
    const char *model, *method, *inputs, *output_dir, *backend, *trace, *qnn_lib, *image_size;
    long long iterations, warm_up, seed, threads, prompt_len, gen_len;
    int have_seed, have_prompt_len, have_gen_len;
} options;

#define OPT(field) offsetof(options, field)

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .bits = KILN_CLI_NONEMPTY, .help = "compiled program (required)"},
    {KILN_CLI_STR, "--method", "NAME|INDEX|all", OPT(method), .bits = KILN_CLI_NONEMPTY,
     .help = "the method to run (default all: every method in\n"
             "turn, sharing the session)"},
    {KILN_CLI_I64, "--iteration", "N", OPT(iterations), .alias = "--iterations", .lo = 1,
     .hi = 10000000, .help = "timed iterations (default 1)"},
    {KILN_CLI_I64, "--warm-up", "K", OPT(warm_up), .lo = 0, .hi = 10000000,
     .help = "untimed iterations first (default 0)"},
    {KILN_CLI_STR, "--inputs", "DIR|FILE", OPT(inputs), .path = KILN_CLI_IN_PATH,
     .bits = KILN_CLI_NONEMPTY,
     .help = "inputs: a tensor folder (manifest.json + .npy,\n"
             "docs/TENSORS.md), or one .npy for a one-input\n"
             "method; checked against the declared inputs"},
    {KILN_CLI_I64, "--random-inputs", "SEED", OPT(seed), .lo = 0, .hi = KILN_CLI_NO_MAX,
     .help = "make valid random inputs (token ids inside the\n"
             "vocabulary, positions inside the context, floats in\n"
             "[-1, 1), other integers 0); with --inputs, makes\n"
             "only those the folder lacks (default without\n"
             "--inputs: seed 0)"},
    {KILN_CLI_STR, "--trace", "FILE", OPT(trace), .path = KILN_CLI_OUT_FILE,
     .bits = KILN_CLI_NONEMPTY,
     .help = "record a profile of every method call, warm-ups\n"
             "included (docs/TRACE.md; read it with kiln inspect)"},
    {KILN_CLI_STR, "--output-dir", "DIR", OPT(output_dir), .path = KILN_CLI_OUT_DIR,
     .bits = KILN_CLI_NONEMPTY,
     .help = "write the last iteration's inputs and outputs of\n"
             "every method run, as a tensor folder"},
    KILN_CLI_BACKEND(OPT(backend)),
    KILN_CLI_QNN_LIB(OPT(qnn_lib)),
    {KILN_CLI_I64, "-t, --threads", "N", OPT(threads), .lo = 1, .hi = KILN_MAX_THREADS,
     .help = "threads to compute with (default: $KILN_THREADS,\n"
             "else every core this process may run on)"},
    {KILN_CLI_I64, "--prompt-len", "N", OPT(prompt_len), .lo = 0, .hi = 1 << 30,
     .help = "language model, --method all: tokens prefilled per\n"
             "iteration (default 32; 0 = none); random inputs of\n"
             "a single method: the token count (default: 32, at\n"
             "most the method's maximum)"},
    {KILN_CLI_I64, "--gen-len", "N", OPT(gen_len), .lo = 0, .hi = 1 << 30,
     .help = "language model, --method all: tokens decoded per\n"
             "iteration (default 16)"},
    {KILN_CLI_STR, "--image-size", "WxH", OPT(image_size), .bits = KILN_CLI_NONEMPTY,
     .help = "vision-language model, --method all: the random\n"
             "image each iteration encodes, in pixels (default\n"
             "224x224; rounded down to whole merged patches)"},
    {KILN_CLI_END},
};

/* Not given: -1 (the defaults are set after parsing, where have_* are). */
static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->method = "all";
    o->iterations = 1;
    o->seed = o->prompt_len = o->gen_len = -1;
}

static const kiln_cli_command COMMAND = {
    .name = "run",
    .about = "usage: kiln run -m MODEL.kiln [options]\n"
             "\n"
             "Runs a program's methods for N timed iterations and prints one line per\n"
             "iteration (\"iteration 3: 12.41 ms\") and a summary (min, p50, p90, max,\n"
             "mean, stddev; percentiles are nearest-rank). Warm-up iterations are the\n"
             "same calls, untimed; the session continues from them.\n"
             "\n"
             "A language model (methods prefill and decode) under --method all is one\n"
             "session: each iteration prefills --prompt-len tokens (in calls of at most\n"
             "the prefill size) and decodes --gen-len tokens one at a time after them;\n"
             "the KV cache is kept across iterations. Before a call would pass the\n"
             "context, the session is reset (said on stderr; the reset is not timed).\n"
             "The token at context position p is a hash of (SEED, p), so any history is\n"
             "replayed by a fresh session: --prompt-len P --gen-len 1 --iteration 1\n"
             "decodes at position P after exactly the tokens a long run had there.\n"
             "A vision-language model (also encode_image) under --method all encodes\n"
             "a random --image-size image each iteration and prefills it, between its\n"
             "vision start and end tokens, before the --prompt-len text tokens.\n"
             "Any other program, a single method, or --inputs: each iteration runs\n"
             "each method once on the same inputs, state kept.\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  kiln run -m smollm2.kiln --method all --iteration 50 --warm-up 2\n"
             "  kiln run -m smollm2.kiln --method decode --iteration 100 -t 4\n"
             "  kiln run -m model.kiln --method prefill --inputs in/ --output-dir out/\n"
             "  kiln run -m qwen3vl.kiln --image-size 448x448 --prompt-len 16 --gen-len 8\n",
    .column = 25,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .stray = "unexpected argument '%s' (the program goes after -m)",
};

/* 1 to go on, else 0 with *rc the exit code. */
static int parse_args(int argc, char **argv, options *o, int *rc) {
    if (!kiln_cli_parse(&COMMAND, argc, argv, o, rc)) return 0;
    o->have_seed = o->seed >= 0;
    o->have_prompt_len = o->prompt_len >= 0;
    o->have_gen_len = o->gen_len >= 0;
    if (!o->have_seed) o->seed = 0;
    if (!o->have_prompt_len) o->prompt_len = 32;
    if (!o->have_gen_len) o->gen_len = 16;
    if (!o->model) {
        *rc = kiln_cli_usage_error(CMD, "no program given (-m MODEL.kiln)");
        return 0;
    }
    return !(*rc = kiln_cli_qnn_lib(CMD, o->qnn_lib));
}

/* ---- random numbers ------------------------------------------------------------------ */

/* ---- the runner ---------------------------------------------------------------------- */

typedef struct {
    kiln_tensor_info info;
    kiln_npy_dtype ftype; /* the file dtype of info.dtype */
    void *data;           /* sized for the declared maximum */
    int64_t shape[KILN_MAX_DIMS];
} slot;

typedef struct {
    kiln_npy_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    void *data;
    int have;
} kept; /* a tensor copied for --output-dir */

typedef struct {
    int index;
    const char *name;
    int n_in, n_out;
    slot *in;
    kept *keep_in, *keep_out;
    int kept_any;
} method;

typedef struct {
    const options *o;
    kiln_program *prog;
    kiln_session *sess;
    method *m;
    int n_m;
    kiln_llm *lm;       /* the program bound as an LLM, or NULL when it is none */
    int64_t vocab, ctx; /* its limits; 0 when it is none */
    /* the language-model loop */
    int llm;
    method *pre, *dec;
    int pre_tok, pre_pos, pre_all, dec_tok, dec_pos; /* pre_all -1 when the program has none */
    int64_t prefill_max;
    int64_t pos; /* tokens in the session */
    int capture; /* keep tensors for --output-dir (the last iteration) */
    /* a vision-language model: an image encoded and prefilled per iteration */
    const kiln_llm_vision *vis; /* NULL: none */
    int grid_h, grid_w, rope_delta;
    float *pixels;
    int32_t *ids; /* one iteration's prompt */
} runner;

static int find_input(const method *m, const char *name) {
    for (int i = 0; i < m->n_in; i++)
        if (!strcmp(m->in[i].info.name, name)) return i;
    return -1;
}

static void input_names(const method *m, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n_in && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", m->in[i].info.name);
}

static uint64_t slot_bytes(const slot *s, const int64_t *shape) {
    return kiln_shape_bytes(s->info.dtype, s->info.ndim, shape);
}

static kiln_status method_init(runner *r, int index, method *m) {
    const kiln_program *p = r->prog;
    m->index = index;
    m->name = kiln_program_method_name(p, index);
    m->n_in = kiln_method_input_count(p, index);
    m->n_out = kiln_method_output_count(p, index);
    m->in = calloc((size_t)m->n_in + 1, sizeof *m->in);
    m->keep_in = calloc((size_t)m->n_in + 1, sizeof *m->keep_in);
    m->keep_out = calloc((size_t)m->n_out + 1, sizeof *m->keep_out);
    if (!m->in || !m->keep_in || !m->keep_out) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_in; i++) {
        slot *s = &m->in[i];
        kiln_status st = kiln_method_input_info(p, index, i, &s->info);
        if (st) return st;
        if (kiln_npy_dtype_from_kiln(s->info.dtype, &s->ftype))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "method '%s' input '%s' has dtype %s, which kiln run cannot make",
                              m->name, s->info.name, kiln_dtype_name(s->info.dtype));
        memcpy(s->shape, s->info.shape, sizeof s->shape);
        uint64_t n = slot_bytes(s, s->info.shape);
        if (!(s->data = calloc(1, n ? (size_t)n : 1)))
            return kiln_error(KILN_ERR_NOMEM, "out of memory for input '%s'", s->info.name);
    }
    return KILN_OK;
}

static void method_free(method *m) {
    for (int i = 0; m->in && i < m->n_in; i++)
        free(m->in[i].data);
    for (int i = 0; m->keep_in && i < m->n_in; i++)
        free(m->keep_in[i].data);
    for (int i = 0; m->keep_out && i < m->n_out; i++)
        free(m->keep_out[i].data);
    free(m->in);
    free(m->keep_in);
    free(m->keep_out);
}

/* Copies a tensor into k (grows its buffer). */
static kiln_status keep(kept *k, kiln_dtype dtype, int ndim, const int64_t *shape, const void *data,
                        const char *what) {
    kiln_npy_dtype t;
    if (kiln_npy_dtype_from_kiln(dtype, &t))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "%s has dtype %s, which a tensor folder cannot hold", what,
                          kiln_dtype_name(dtype) ? kiln_dtype_name(dtype) : "?");
    uint64_t n = kiln_shape_bytes(dtype, ndim, shape);
    void *p = realloc(k->data, n ? (size_t)n : 1);
    if (!p) return kiln_error(KILN_ERR_NOMEM, "out of memory keeping %s", what);
    k->data = p;
    if (n) memcpy(p, data, (size_t)n);
    k->dtype = t;
    k->ndim = ndim;
    memcpy(k->shape, shape, (size_t)ndim * sizeof *shape);
    k->have = 1;
    return KILN_OK;
}

/* After a call of m in the last iteration: its inputs and outputs. */
static kiln_status keep_call(runner *r, method *m) {
    char what[300];
    for (int i = 0; i < m->n_in; i++) {
        slot *s = &m->in[i];
        snprintf(what, sizeof what, "method '%s' input '%s'", m->name, s->info.name);
        kiln_status st = keep(&m->keep_in[i], s->info.dtype, s->info.ndim, s->shape, s->data, what);
        if (st) return st;
    }
    for (int i = 0; i < m->n_out; i++) {
        const void *data;
        kiln_dtype dt;
        int nd;
        int64_t shape[KILN_MAX_DIMS];
        kiln_tensor_info info;
        kiln_status st = kiln_method_output_info(r->prog, m->index, i, &info);
        if (!st) st = kiln_session_get_output(r->sess, m->index, i, &data, &dt, &nd, shape);
        if (st) return st;
        snprintf(what, sizeof what, "method '%s' output '%s'", m->name, info.name);
        if ((st = keep(&m->keep_out[i], dt, nd, shape, data, what))) return st;
    }
    m->kept_any = 1;
    return KILN_OK;
}

static kiln_status set_inputs(runner *r, const method *m) {
    for (int i = 0; i < m->n_in; i++) {
        const slot *s = &m->in[i];
        kiln_status st = kiln_session_set_input(r->sess, m->index, i, s->data, s->info.dtype,
                                                s->info.ndim, s->shape);
        if (st) return st;
    }
    return KILN_OK;
}

/* One timed call: set the inputs, execute. */
static kiln_status call(runner *r, method *m, double *ms) {
    if (kiln_cli_interrupted) return kiln_error(KILN_ERR_CANCELLED, "interrupted");
    double t0 = kiln_now_ms();
    kiln_status st = set_inputs(r, m);
    if (!st) st = kiln_session_execute(r->sess, m->index);
    *ms += kiln_now_ms() - t0;
    if (!st && r->capture) st = keep_call(r, m);
    return st;
}

/* ---- inputs ------------------------------------------------------------------------------ */

/* Whether input i of method m is, in an LLM program, the prefill input
 * `pre` or the decode input `dec` of the contract (kiln_llm.h). */
static int llm_input_is(const runner *r, const method *m, int i, kiln_llm_input pre,
                        kiln_llm_input dec) {
    if (!r->lm) return 0;
    if (m->index == kiln_llm_prefill_method(r->lm)) return i == kiln_llm_input_index(r->lm, pre);
    return m->index == kiln_llm_decode_method(r->lm) && i == kiln_llm_input_index(r->lm, dec);
}

/* Fills slot s with valid random values; T is the token count for a
 * dynamic dimension. */
static void random_input(const runner *r, const method *m, int i, slot *s, int64_t T,
                         uint64_t seed) {
    for (int d = 0; d < s->info.ndim; d++)
        s->shape[d] = s->info.dynamic_mask >> d & 1 ? T : s->info.shape[d];
    uint64_t n = kiln_shape_elems(s->info.ndim, s->shape);
    uint64_t st = kiln_mix64(seed ^ kiln_mix64((uint64_t)m->index * 0x10001u + (uint64_t)i + 1));
    if (s->info.dtype == KILN_I32) {
        int32_t *v = s->data;
        int is_tok = llm_input_is(r, m, i, KILN_LLM_PREFILL_TOKENS, KILN_LLM_DECODE_TOKENS);
        int is_pos = llm_input_is(r, m, i, KILN_LLM_PREFILL_POS, KILN_LLM_DECODE_POS);
        /* a position leaving room for the call's tokens */
        int64_t room = r->ctx - (T > 0 ? T : 1);
        for (uint64_t k = 0; k < n; k++) {
            uint64_t x = kiln_mix64(st + k);
            v[k] = is_tok                ? (int32_t)(x % (uint64_t)r->vocab)
                   : is_pos && room >= 0 ? (int32_t)(x % (uint64_t)(room + 1))
                                         : 0;
        }
    } else {
        for (uint64_t k = 0; k < n; k++) {
            float f = (float)((double)(kiln_mix64(st + k) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            if (s->info.dtype == KILN_F32)
                ((float *)s->data)[k] = f;
            else if (s->info.dtype == KILN_F16)
                ((uint16_t *)s->data)[k] = kiln_f32_to_f16(f);
            else
                ((uint16_t *)s->data)[k] = kiln_f32_to_bf16(f);
        }
    }
}

static kiln_status take_input(slot *s, const char *method_name, kiln_npy_dtype dt, int ndim,
                              const int64_t *shape, const void *data, const char *source) {
    kiln_status st = kiln_tensor_check_input(method_name, &s->info, dt, ndim, shape, source);
    if (st) return st;
    memcpy(s->shape, shape, (size_t)ndim * sizeof *shape);
    uint64_t n = slot_bytes(s, shape);
    if (n) memcpy(s->data, data, (size_t)n);
    return KILN_OK;
}

/* Every input tensor of the folder must be an input of a method run (or be
 * for a method not run): a misspelt name is an error, not silently random. */
static kiln_status check_unused(const runner *r, const kiln_tensor_folder *f) {
    for (int k = 0; k < f->n; k++) {
        const kiln_tensor_entry *e = &f->items[k];
        if ((e->role && strcmp(e->role, "input")) || e->node) continue;
        char names[512] = "";
        if (e->method) {
            int known = 0;
            for (int j = 0; j < kiln_program_method_count(r->prog); j++)
                known |= !strcmp(e->method, kiln_program_method_name(r->prog, j));
            if (!known)
                return kiln_error(
                    KILN_ERR_INVALID_ARG,
                    "'%s/%s': tensor '%s' is for method '%s', which the program lacks", f->dir,
                    e->file, e->name, e->method);
            for (int j = 0; j < r->n_m; j++)
                if (!strcmp(e->method, r->m[j].name) && find_input(&r->m[j], e->name) < 0) {
                    input_names(&r->m[j], names, sizeof names);
                    return kiln_error(
                        KILN_ERR_INVALID_ARG,
                        "'%s/%s': tensor '%s' is no input of method '%s' (its inputs: %s)", f->dir,
                        e->file, e->name, e->method, names);
                }
            continue;
        }
        int used = 0;
        for (int j = 0; j < r->n_m && !used; j++)
            used = find_input(&r->m[j], e->name) >= 0;
        if (!used) {
            size_t l = 0;
            for (int j = 0; j < r->n_m && l < sizeof names; j++) {
                char one[400];
                input_names(&r->m[j], one, sizeof one);
                l += (size_t)snprintf(names + l, sizeof names - l, "%s%s: %s", j ? "; " : "",
                                      r->m[j].name, one);
            }
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "'%s/%s': tensor '%s' is no input of the methods run (%s)", f->dir,
                              e->file, e->name, names);
        }
    }
    return KILN_OK;
}

/* The token count of method m's calls: that of an input given with a
 * dynamic dimension, else --prompt-len (checked against the maximum), else
 * 32 or the maximum when smaller; 1 for a method without one. */
static kiln_status token_count(const runner *r, const method *m, const uint8_t *given, int64_t *T,
                               int *usage) {
    *T = 1;
    for (int i = 0; i < m->n_in; i++)
        for (int d = 0; d < m->in[i].info.ndim; d++)
            if (given[i] && m->in[i].info.dynamic_mask >> d & 1) {
                *T = m->in[i].shape[d];
                return KILN_OK;
            }
    for (int i = 0; i < m->n_in; i++)
        for (int d = 0; d < m->in[i].info.ndim; d++) {
            if (!(m->in[i].info.dynamic_mask >> d & 1)) continue;
            int64_t max = m->in[i].info.shape[d];
            if (r->o->have_prompt_len && (r->o->prompt_len < 1 || r->o->prompt_len > max)) {
                *usage = 1;
                return kiln_error(
                    KILN_ERR_INVALID_ARG,
                    "--prompt-len %lld: method '%s' input '%s' takes 1..%lld tokens per call",
                    r->o->prompt_len, m->name, m->in[i].info.name, (long long)max);
            }
            *T = r->o->have_prompt_len ? r->o->prompt_len : max < 32 ? max : 32;
            return KILN_OK;
        }
    return KILN_OK;
}

/* Sets up every input of every method run: from --inputs, the rest random
 * (when allowed). *usage is set for errors that are the command line's. */
static kiln_status load_inputs(runner *r, int *usage) {
    const options *o = r->o;
    kiln_tensor_folder f = {0};
    kiln_status st = KILN_OK;
    int random = !o->inputs || o->have_seed, is_dir = 0;
    if (o->inputs) {
        struct stat sb;
        if (stat(o->inputs, &sb) != 0)
            return kiln_error(KILN_ERR_IO, "cannot open '%s' (--inputs): %s", o->inputs,
                              strerror(errno));
        is_dir = S_ISDIR(sb.st_mode);
        if (!is_dir) {
            if (r->n_m != 1 || r->m[0].n_in != 1) {
                char names[512];
                input_names(&r->m[0], names, sizeof names);
                *usage = 1;
                if (r->n_m != 1)
                    return kiln_error(
                        KILN_ERR_INVALID_ARG,
                        "--inputs FILE is one tensor, for one method with one input; --method all "
                        "runs %d methods: give a tensor folder (docs/TENSORS.md)",
                        r->n_m);
                return kiln_error(
                    KILN_ERR_INVALID_ARG,
                    "--inputs FILE is one tensor, but method '%s' has %d inputs (%s): give a "
                    "tensor folder (docs/TENSORS.md)",
                    r->m[0].name, r->m[0].n_in, names);
            }
            kiln_npy one;
            if ((st = kiln_npy_read(o->inputs, &one))) return st;
            st = take_input(&r->m[0].in[0], r->m[0].name, one.dtype, one.ndim, one.shape, one.data,
                            o->inputs);
            kiln_npy_free(&one);
            return st;
        }
        if ((st = kiln_tensor_folder_read(o->inputs, &f))) return st;
        if ((st = check_unused(r, &f))) goto done;
    }
    for (int j = 0; j < r->n_m; j++) {
        method *m = &r->m[j];
        uint8_t given[256] = {0};
        char missing[512] = "";
        size_t nm = 0;
        if (m->n_in > 256) {
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "method '%s' has %d inputs, kiln run takes at most 256", m->name,
                            m->n_in);
            goto done;
        }
        for (int i = 0; is_dir && i < m->n_in; i++) {
            slot *s = &m->in[i];
            const kiln_tensor_entry *e =
                kiln_tensor_folder_find(&f, m->name, "input", NULL, s->info.name);
            if (e) {
                char src[1200];
                snprintf(src, sizeof src, "%s/%s", f.dir, e->file);
                if ((st = take_input(s, m->name, e->dtype, e->ndim, e->shape, e->data, src)))
                    goto done;
                given[i] = 1;
            } else if (!random && nm < sizeof missing) {
                nm += (size_t)snprintf(missing + nm, sizeof missing - nm, "%s'%s'", nm ? ", " : "",
                                       s->info.name);
            }
        }
        if (nm) {
            st = kiln_error(
                KILN_ERR_INVALID_ARG,
                "'%s' lacks input %s of method '%s' (add it, or pass --random-inputs SEED to make "
                "the missing ones)",
                o->inputs, missing, m->name);
            goto done;
        }
        int64_t T;
        if ((st = token_count(r, m, given, &T, usage))) goto done;
        for (int i = 0; i < m->n_in; i++)
            if (!given[i]) random_input(r, m, i, &m->in[i], T, (uint64_t)o->seed);
    }
done:
    kiln_tensor_folder_free(&f);
    return st;
}

/* ---- the language-model loop ------------------------------------------------------------ */

/* Whether the methods run are an LLM's prefill and decode (the program
 * bound as kiln_llm.h says), and where their inputs are. */
static int is_llm(runner *r) {
    if (!r->lm) return 0;
    r->vis = kiln_llm_get_vision(r->lm);
    if (r->n_m != (r->vis ? 3 : 2)) return 0;
    for (int j = 0; j < r->n_m; j++) {
        if (r->m[j].index == kiln_llm_prefill_method(r->lm)) r->pre = &r->m[j];
        if (r->m[j].index == kiln_llm_decode_method(r->lm)) r->dec = &r->m[j];
    }
    if (!r->pre || !r->dec) return 0;
    r->pre_tok = kiln_llm_input_index(r->lm, KILN_LLM_PREFILL_TOKENS);
    r->pre_pos = kiln_llm_input_index(r->lm, KILN_LLM_PREFILL_POS);
    r->pre_all = kiln_llm_input_index(r->lm, KILN_LLM_PREFILL_ALL_LOGITS);
    r->dec_tok = kiln_llm_input_index(r->lm, KILN_LLM_DECODE_TOKENS);
    r->dec_pos = kiln_llm_input_index(r->lm, KILN_LLM_DECODE_POS);
    r->prefill_max = kiln_llm_get_limits(r->lm)->prefill_max;
    return 1;
}

static void reset_session(runner *r, const char *label, const char *before) {
    fprintf(stderr,
            "kiln run: %s: the context (%lld tokens) is full: session reset before %s at position "
            "%lld\n",
            label, (long long)r->ctx, before, (long long)r->pos);
    kiln_session_reset(r->sess);
    r->pos = 0;
    r->rope_delta = 0;
}

/* The text token at context position p of a vision-language run: never an
 * image placeholder (those come only with an image). */
static int32_t text_token(const runner *r, int64_t p) {
    int32_t t = kiln_token_at((uint64_t)r->o->seed, p, r->vocab);
    return t == r->vis->image_token ? (int32_t)((t + 1) % r->vocab) : t;
}

/* One vision-language iteration through the kiln_llm image API: encode
 * the image, prefill [start, image x n, end, text], decode; all timed. */
static kiln_status vl_iteration(runner *r, const char *label, double *ms) {
    const kiln_llm_vision *v = r->vis;
    kiln_llm_image *im = NULL;
    if (kiln_cli_interrupted) return kiln_error(KILN_ERR_CANCELLED, "interrupted");
    double t0 = kiln_now_ms();
    kiln_status st = kiln_llm_encode_image(r->sess, r->lm, r->pixels, 1, r->grid_h, r->grid_w, &im);
    if (st) return kiln_error_wrap(st, "%s: encode_image", label);
    int n_img = kiln_llm_image_tokens(im);
    int64_t n = 2 + n_img + r->o->prompt_len;
    *ms += kiln_now_ms() - t0;
    if (r->pos + n > r->ctx) reset_session(r, label, "prefill");
    r->ids[0] = v->vision_start;
    for (int k = 0; k < n_img; k++)
        r->ids[1 + k] = v->image_token;
    r->ids[1 + n_img] = v->vision_end;
    for (int64_t k = 2 + n_img; k < n; k++)
        r->ids[k] = text_token(r, r->pos + k);
    t0 = kiln_now_ms();
    st = kiln_llm_prefill_images(r->sess, r->lm, r->ids, (int)n, (int)r->pos, &im, 1, 0,
                                 &r->rope_delta, NULL);
    *ms += kiln_now_ms() - t0;
    kiln_llm_image_free(im);
    if (st)
        return kiln_error_wrap(st, "%s: prefill of an image and %lld tokens at position %lld",
                               label, r->o->prompt_len, (long long)r->pos);
    r->pos += n;
    for (long long g = 0; g < r->o->gen_len; g++) {
        if (kiln_cli_interrupted) return kiln_error(KILN_ERR_CANCELLED, "interrupted");
        if (r->pos + 1 > r->ctx) reset_session(r, label, "decode");
        t0 = kiln_now_ms();
        st = kiln_llm_decode_rope(r->sess, r->lm, text_token(r, r->pos), (int)r->pos, r->rope_delta,
                                  NULL);
        *ms += kiln_now_ms() - t0;
        if (st) return kiln_error_wrap(st, "%s: decode at position %lld", label, (long long)r->pos);
        r->pos++;
    }
    return KILN_OK;
}

/* --image-size WxH -> the merged patch grid of a random image, its pixels
 * and the prompt buffer; 0, or a usage error's exit code. */
static int plan_image(runner *r, kiln_status *st) {
    const kiln_llm_vision *v = r->vis;
    const char *s = r->o->image_size ? r->o->image_size : "224x224";
    char *end;
    long w = strtol(s, &end, 10), h = *end == 'x' ? strtol(end + 1, &end, 10) : 0;
    int unit = v->patch * v->merge;
    if (*end || w < unit || h < unit || w > 100000 || h > 100000)
        return kiln_cli_usage_error(CMD,
                                    "--image-size '%s': want WxH in pixels, each %d..100000 (one "
                                    "merged patch is %d pixels)",
                                    s, unit, unit);
    r->grid_w = (int)(w / unit) * v->merge, r->grid_h = (int)(h / unit) * v->merge;
    int64_t patches = (int64_t)r->grid_h * r->grid_w, n_img = patches / (v->merge * v->merge);
    if (patches > v->max_patches)
        return kiln_cli_usage_error(CMD,
                                    "--image-size %s is %lld patches; the program's encode_image "
                                    "takes at most %d",
                                    s, (long long)patches, v->max_patches);
    if (2 + n_img + r->o->prompt_len > r->ctx)
        return kiln_cli_usage_error(CMD,
                                    "--image-size %s (%lld image tokens) and --prompt-len %lld "
                                    "pass the context (%lld tokens)",
                                    s, (long long)n_img, r->o->prompt_len, (long long)r->ctx);
    if (r->o->output_dir)
        return kiln_cli_usage_error(CMD, "--output-dir takes single methods or a text model's "
                                         "loop, not a vision-language run");
    int64_t P = (int64_t)v->channels * v->temporal_patch * v->patch * v->patch;
    r->pixels = malloc(sizeof(float) * (size_t)(patches * P));
    r->ids = malloc(sizeof(int32_t) * (size_t)(2 + n_img + r->o->prompt_len));
    if (!r->pixels || !r->ids) {
        *st = kiln_error(KILN_ERR_NOMEM, "out of memory for a %s image", s);
        return 0;
    }
    uint64_t seed = kiln_mix64((uint64_t)r->o->seed ^ 0x696d616765ull);
    for (int64_t k = 0; k < patches * P; k++) /* in [-1, 1), as normalised pixels are */
        r->pixels[k] =
            (float)((double)(kiln_mix64(seed + (uint64_t)k) >> 11) / 9007199254740992.0 * 2.0 -
                    1.0);
    return 0;
}

static kiln_status llm_iteration(runner *r, const char *label, double *ms) {
    uint64_t seed = (uint64_t)r->o->seed;
    kiln_status st = KILN_OK;
    slot *tok = &r->pre->in[r->pre_tok], *pos = &r->pre->in[r->pre_pos],
         *all = r->pre_all >= 0 ? &r->pre->in[r->pre_all] : NULL;
    for (long long done = 0; done < r->o->prompt_len;) {
        int64_t n =
            r->o->prompt_len - done < r->prefill_max ? r->o->prompt_len - done : r->prefill_max;
        if (r->pos + n > r->ctx) reset_session(r, label, "prefill");
        for (int64_t k = 0; k < n; k++)
            ((int32_t *)tok->data)[k] = kiln_token_at(seed, r->pos + k, r->vocab);
        tok->shape[0] = n;
        *(int32_t *)pos->data = (int32_t)r->pos;
        if (all) *(int32_t *)all->data = 0;
        if ((st = call(r, r->pre, ms)))
            return kiln_error_wrap(st, "%s: prefill of %lld tokens at position %lld", label,
                                   (long long)n, (long long)r->pos);
        r->pos += n;
        done += n;
    }
    tok = &r->dec->in[r->dec_tok];
    pos = &r->dec->in[r->dec_pos];
    for (long long g = 0; g < r->o->gen_len; g++) {
        if (r->pos + 1 > r->ctx) reset_session(r, label, "decode");
        *(int32_t *)tok->data = kiln_token_at(seed, r->pos, r->vocab);
        *(int32_t *)pos->data = (int32_t)r->pos;
        if ((st = call(r, r->dec, ms)))
            return kiln_error_wrap(st, "%s: decode at position %lld", label, (long long)r->pos);
        r->pos++;
    }
    return KILN_OK;
}

static kiln_status plain_iteration(runner *r, const char *label, double *ms) {
    for (int j = 0; j < r->n_m; j++) {
        kiln_status st = call(r, &r->m[j], ms);
        if (st) return kiln_error_wrap(st, "%s", label);
    }
    return KILN_OK;
}

/* ---- output ------------------------------------------------------------------------------------
 */

/* Writes what keep_call kept into folder f (made before the run, so that a
 * folder that cannot be made fails before any work). */
static kiln_status write_outputs(runner *r, kiln_tensor_folder *f, int *count) {
    kiln_status st = KILN_OK;
    *count = 0;
    for (int j = 0; !st && j < r->n_m; j++) {
        method *m = &r->m[j];
        if (!m->kept_any) continue;
        for (int pass = 0; pass < 2 && !st; pass++) {
            int n = pass ? m->n_out : m->n_in;
            for (int i = 0; i < n && !st; i++) {
                const kept *k = pass ? &m->keep_out[i] : &m->keep_in[i];
                kiln_tensor_info info;
                if (!k->have) continue;
                st = pass ? kiln_method_output_info(r->prog, m->index, i, &info)
                          : kiln_method_input_info(r->prog, m->index, i, &info);
                kiln_tensor_desc d = {info.name, m->name, pass ? "output" : "input",
                                      NULL,      NULL,    k->dtype,
                                      k->ndim,   k->shape};
                if (!st) st = kiln_tensor_folder_add(f, &d, k->data);
                *count += !st;
            }
        }
    }
    return st ? st : kiln_tensor_folder_finish(f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least p% of samples at or below it. */
static double percentile(const double *sorted, long long n, double p) {
    long long k = (long long)ceil(p / 100.0 * (double)n) - 1;
    return sorted[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static void summary(const double *ms, long long n) {
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return;
    memcpy(s, ms, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double sum = 0, ss = 0;
    for (long long i = 0; i < n; i++)
        sum += s[i];
    double mean = sum / (double)n;
    for (long long i = 0; i < n; i++)
        ss += (s[i] - mean) * (s[i] - mean);
    double sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    printf("summary: %lld iteration%s: min %.2f ms, p50 %.2f ms, p90 %.2f ms, max %.2f ms, mean "
           "%.2f ms, "
           "stddev %.2f ms\n",
           n, n == 1 ? "" : "s", s[0], percentile(s, n, 50), percentile(s, n, 90), s[n - 1], mean,
           sd);
    free(s);
}

/* "cpu+ref": the backends the nodes of the methods run use. */
/* ---- main --------------------------------------------------------------------------------------
 */

/* Which methods: "all", a name, or an index; -1 all, else the index; -2 a usage error (printed). */
static int pick_method(const kiln_program *p, const char *s) {
    if (!strcmp(s, "all")) return -1;
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
    kiln_cli_usage_error(CMD, "--method '%s' is no method of the program (it has %s; or all)", s,
                         names);
    return -2;
}

/* The methods run, their inputs, and the rules of --gen-len and
 * --prompt-len, once the program is open: 0 with *st the failure (or
 * KILN_OK), or the exit code of a usage error (printed). */
static int plan_run(runner *r, int which, kiln_status *st) {
    const options *o = r->o;
    if (!kiln_llm_bind(r->prog, &r->lm)) {
        r->vocab = kiln_llm_get_limits(r->lm)->vocab;
        r->ctx = kiln_llm_get_limits(r->lm)->context;
    }
    r->n_m = which < 0 ? kiln_program_method_count(r->prog) : 1;
    if (!(r->m = calloc((size_t)r->n_m + 1, sizeof *r->m))) {
        *st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        return 0;
    }
    for (int j = 0; j < r->n_m; j++)
        if ((*st = method_init(r, which < 0 ? j : which, &r->m[j]))) return 0;
    r->llm = which < 0 && !o->inputs && is_llm(r);
    if (o->have_gen_len && !r->llm)
        return kiln_cli_usage_error(
            CMD, "--gen-len applies to --method all on a language model (prefill and decode) "
                 "without --inputs");
    if (r->llm) {
        if (o->prompt_len > r->ctx)
            return kiln_cli_usage_error(CMD,
                                        "--prompt-len %lld is more than the context (%lld tokens)",
                                        o->prompt_len, (long long)r->ctx);
        if (!r->vis && o->prompt_len + o->gen_len == 0)
            return kiln_cli_usage_error(CMD, "--prompt-len 0 and --gen-len 0: nothing to run");
        return r->vis ? plan_image(r, st) : 0;
    }
    if (o->image_size)
        return kiln_cli_usage_error(CMD, "--image-size applies to --method all on a "
                                         "vision-language model without --inputs");
    int usage = 0;
    if ((*st = load_inputs(r, &usage)))
        return usage ? kiln_cli_usage_error(CMD, "%s", kiln_last_error()) : 0;
    if (o->have_prompt_len) {
        int dyn = 0;
        for (int j = 0; j < r->n_m; j++)
            for (int i = 0; i < r->m[j].n_in; i++)
                dyn |= r->m[j].in[i].info.dynamic_mask != 0;
        if (!dyn || (o->inputs && !o->have_seed))
            return kiln_cli_usage_error(
                CMD, "--prompt-len applies to --method all on a language model, or to "
                     "random inputs of a method that takes a token count");
    }
    return 0;
}

/* What runs, on stderr. */
static void say_what(const runner *r) {
    const options *o = r->o;
    char used[256], what[512];
    kiln_program_backends_used(r->prog, r->n_m == 1 ? r->m[0].index : -1, used, sizeof used);
    if (r->llm && r->vis)
        snprintf(what, sizeof what,
                 "encode a %d x %d patch image (%d tokens), prefill it + %lld tokens, decode %lld "
                 "per iteration, one session (context %lld)",
                 r->grid_w, r->grid_h, r->grid_w * r->grid_h / (r->vis->merge * r->vis->merge),
                 o->prompt_len, o->gen_len, (long long)r->ctx);
    else if (r->llm)
        snprintf(what, sizeof what,
                 "prefill %lld + decode %lld tokens per iteration, one session (context %lld)",
                 o->prompt_len, o->gen_len, (long long)r->ctx);
    else if (r->n_m == 1)
        snprintf(what, sizeof what, "method '%s'", r->m[0].name);
    else
        snprintf(what, sizeof what, "every method in turn (%d)", r->n_m);
    fprintf(stderr, "kiln run: %s: %s, %lld iteration%s after %lld warm-up, backend %s\n",
            kiln_basename(o->model), what, o->iterations, o->iterations == 1 ? "" : "s", o->warm_up,
            used);
}

/* The warm-ups, then the timed iterations (their times into times[],
 * printed); the last one's tensors kept for --output-dir. */
static kiln_status iterate(runner *r, double *times) {
    const options *o = r->o;
    for (long long it = -o->warm_up; it < o->iterations; it++) {
        char label[64];
        if (it < 0)
            snprintf(label, sizeof label, "warm-up %lld", it + o->warm_up + 1);
        else
            snprintf(label, sizeof label, "iteration %lld", it + 1);
        r->capture = o->output_dir && it == o->iterations - 1;
        double ms = 0;
        kiln_status st = r->llm && r->vis ? vl_iteration(r, label, &ms)
                         : r->llm         ? llm_iteration(r, label, &ms)
                                          : plain_iteration(r, label, &ms);
        if (st) return st;
        if (it >= 0) {
            times[it] = ms;
            printf("%s: %.2f ms\n", label, ms);
            kiln_cli_flush();
        }
    }
    return KILN_OK;
}

/* Writes what the trace recorded, a failed iteration included, and frees
 * it; returns rc, or the exit code of a failed write. */
static int finish_trace(const runner *r, kiln_trace *trace, int rc) {
    if (r->llm) kiln_trace_set_positions(trace, r->pos);
    kiln_status ts = kiln_trace_write(trace, r->sess, r->o->trace);
    if (ts)
        rc = kiln_cli_fail(CMD, ts);
    else
        fprintf(stderr, "kiln run: trace of %lld events written to %s\n",
                (long long)kiln_trace_event_count(trace), r->o->trace);
    kiln_trace_free(trace);
    return rc;
}

int kiln_cmd_run(int argc, char **argv) {
    options o;
    int rc;
    if (!parse_args(argc, argv, &o, &rc)) return rc;

    runner r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    double *times = NULL;
    kiln_trace *trace = NULL;
    kiln_tensor_folder out_dir = {0};
    kiln_status st = KILN_OK;
    kiln_open_options oo;
    memset(&oo, 0, sizeof oo);
    oo.n_threads = (int)o.threads;
    oo.backend = o.backend;
    if ((st = kiln_program_open_with(o.model, &oo, &r.prog))) return kiln_cli_fail(CMD, st);
    int which = pick_method(r.prog, o.method);
    if (which == -2) {
        rc = KILN_EXIT_USAGE;
        goto out;
    }
    if ((rc = plan_run(&r, which, &st))) goto out;
    if (st || (st = kiln_session_create(r.prog, &r.sess))) goto fail;
    if (o.trace &&
        ((st = kiln_trace_create(&trace)) || (st = kiln_session_set_trace(r.sess, trace))))
        goto fail;
    if (o.output_dir && (st = kiln_tensor_folder_create(o.output_dir, &out_dir))) goto fail;
    if (!(times = calloc((size_t)o.iterations, sizeof *times))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    say_what(&r);
    if ((st = iterate(&r, times))) goto fail;
    summary(times, o.iterations);
    if (o.output_dir) {
        int n;
        if ((st = write_outputs(&r, &out_dir, &n))) goto fail;
        fprintf(stderr, "kiln run: wrote %d tensors to %s\n", n, o.output_dir);
    }
    rc = KILN_EXIT_OK;
    goto out;
fail:
    rc = kiln_cli_fail(CMD, st);
out:
    if (trace) rc = finish_trace(&r, trace, rc);
    kiln_tensor_folder_free(&out_dir);
    free(times);
    for (int j = 0; r.m && j < r.n_m; j++)
        method_free(&r.m[j]);
    free(r.m);
    kiln_session_destroy(r.sess);
    kiln_llm_free(r.lm);
    free(r.pixels);
    free(r.ids);
    kiln_program_close(r.prog);
    return rc;
}
