/* cmd_generate.c: `kiln generate -m model.kiln (-p PROMPT | --prompt-ids IDS)`. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "devtools/devtools.h"
#include "image.h"
#include "kiln/kiln_llm.h"

typedef struct {
    const char *model, *prompt, *prompt_ids, *stats_json, *system, *chat_template, *trace;
    int chat, think, print_ids, no_stats;
    kiln_cli_strs stop, images;
    kiln_cli_sampling smp;
} options;

#define OPT(field) offsetof(options, field)

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .help = "compiled program (required)"},
    {KILN_CLI_STR, "-p, --prompt", "TEXT", OPT(prompt),
     .help = "prompt text; BOS is added where the tokenizer says so"},
    {KILN_CLI_STR, "--prompt-ids", "IDS", OPT(prompt_ids),
     .help = "prompt token ids, space- or comma-separated, used as given"},
    {KILN_CLI_STRS, "--image", "FILE", OPT(images), .bits = KILN_CLI_NONEMPTY,
     .help = "an image for a vision-language program (PNG, JPEG or\n"
             "a uint8 .npy); repeatable. Without --chat the prompt\n"
             "holds the model's image placeholder once per image,\n"
             "in order (Qwen3-VL: <|vision_start|><|image_pad|>\n"
             "<|vision_end|>), and each pad becomes the image's\n"
             "tokens; with --chat the images lead the user turn"},
    {KILN_CLI_TABLE, NULL, NULL, OPT(smp), .table = kiln_cli_sampling_flags},
    {KILN_CLI_SET, "--ignore-eos", NULL, OPT(smp.gen.ignore_eos), .lo = 1,
     .help = "end tokens do not stop generation: they are kept and\n"
             "printed like any other (with -n N: exactly N tokens,\n"
             "as llama.cpp's --ignore-eos, for benchmarks)"},
    {KILN_CLI_STRS, "--stop", "STRING", OPT(stop), .bits = KILN_CLI_NONEMPTY,
     .help = "stop when the generated text ends with STRING (not\n"
             "printed); repeatable; not with --print-ids"},
    {KILN_CLI_SET, "--chat", NULL, OPT(chat), .lo = 1,
     .help = "render -p as a user turn with the chat template and\n"
             "print only the answer"},
    {KILN_CLI_STR, "--system", "TEXT", OPT(system), .help = "system message (--chat)"},
    {KILN_CLI_SWITCH, "--think, --no-think", NULL, OPT(think),
     .help = "Qwen3's thinking switch (--chat; default think)"},
    {KILN_CLI_STR, "--chat-template", "NAME|FILE", OPT(chat_template),
     .help = "chatml, smollm2, qwen3, llama3, llama3.1,\n"
             "llama3.2, llama3.3, qwen3vl, qwen3vl-thinking or a\n"
             "Jinja file (--chat; default: the program's template)"},
    {KILN_CLI_SET, "--print-ids", NULL, OPT(print_ids), .lo = 1,
     .help = "print only the generated ids on one line"},
    {KILN_CLI_STR, "--stats-json", "FILE", OPT(stats_json), .path = KILN_CLI_OUT_FILE,
     .help = "write the generation statistics as JSON to FILE"},
    {KILN_CLI_STR, "--trace", "FILE", OPT(trace), .path = KILN_CLI_OUT_FILE,
     .help = "record a profile of every method call (docs/TRACE.md;\n"
             "read it with kiln inspect)"},
    {KILN_CLI_SET, "--no-stats", NULL, OPT(no_stats), .lo = 1,
     .help = "no statistics block on stderr"},
    {KILN_CLI_END},
};

static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->think = 1;
    kiln_cli_sampling_init(&o->smp);
}

static const kiln_cli_command COMMAND = {
    .name = "generate",
    .about = "usage: kiln generate -m MODEL.kiln (-p PROMPT | --prompt-ids \"1 2 3\") [options]\n"
             "\n"
             "Feeds the prompt through prefill (in chunks), then decodes new tokens.\n"
             "Text mode prints the prompt as decoded from its tokens, the generated\n"
             "text, and a newline. Generation stops at an end token, after -n tokens, or\n"
             "when prompt + generated tokens fill the context, which stderr then says\n"
             "(exit code 0); a prompt that leaves no room for a new token is an error\n"
             "(but with -n 0).\n"
             "\n",
    .notes = "\n"
             "Samplers run in llama.cpp's order: repeat penalty, top-k, top-p, min-p,\n"
             "temperature. After generating, statistics (tokens, load time, time to\n"
             "first token, prefill and decode speed, sampling time, peak RSS) go to\n"
             "stderr.\n"
             "\n"
             "examples:\n"
             "  kiln generate -m stories.kiln -p \"Once upon a time\" -n 64 --temp 0\n"
             "  kiln generate -m qwen3vl.kiln --image cat.jpg --chat -p \"What is this?\"\n",
    .column = 23,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .unknown = "unknown argument '%s'",
};

/* Prints tokens as they come. llama2.c programs follow run.c exactly (a
 * lone byte that is neither printable nor space is skipped); every other
 * tokenizer streams through a detokenizer, so a character split across
 * byte-level tokens is printed whole, never as half a UTF-8 sequence. */
typedef struct {
    const kiln_tokenizer *tok;
    kiln_detokenizer *detok; /* NULL: run.c's rules */
    int prev;
    int print_ids;
    int count;
    /* --stop: generated text not yet printed because it could be the start
     * of a stop string (only the longest such tail is held). */
    int generating, stopped;
    const char *const *stop;
    int n_stop;
    char *held;
    size_t n_held, cap_held;
} printer;

/* Length of the longest suffix of t[0..n) that is a proper prefix of a stop
 * string: the bytes that must wait for the next token. */
static size_t stop_prefix_tail(const printer *p, const char *t, size_t n) {
    size_t best = 0;
    for (int k = 0; k < p->n_stop; k++) {
        size_t sl = strlen(p->stop[k]);
        for (size_t l = sl - 1 < n ? sl - 1 : n; l > best; l--)
            if (!memcmp(t + n - l, p->stop[k], l)) {
                best = l;
                break;
            }
    }
    return best;
}

/* Writes generated text, holding back what could start a stop string; on a
 * match prints what comes before it and marks the printer stopped. Every
 * occurrence starts inside the held bytes or the new ones, since held
 * bytes are exactly the longest suffix that could start one. */
static void emit(printer *p, const char *s, size_t len) {
    if (!p->n_stop || !p->generating) {
        fwrite(s, 1, len, stdout);
        return;
    }
    if (p->stopped || !len) return;
    if (p->n_held + len > p->cap_held) {
        size_t cap = (p->n_held + len) * 2 + 64;
        char *b = realloc(p->held, cap);
        if (!b) { /* no room to hold back: print as is */
            fwrite(p->held, 1, p->n_held, stdout);
            fwrite(s, 1, len, stdout);
            p->n_held = 0;
            return;
        }
        p->held = b;
        p->cap_held = cap;
    }
    memcpy(p->held + p->n_held, s, len);
    p->n_held += len;
    size_t first = p->n_held;
    for (int k = 0; k < p->n_stop; k++) {
        size_t sl = strlen(p->stop[k]);
        for (size_t i = 0; i + sl <= p->n_held && i < first; i++)
            if (!memcmp(p->held + i, p->stop[k], sl)) {
                first = i;
                break;
            }
    }
    if (first < p->n_held) {
        fwrite(p->held, 1, first, stdout);
        p->n_held = 0;
        p->stopped = 1;
        return;
    }
    size_t keep = stop_prefix_tail(p, p->held, p->n_held);
    fwrite(p->held, 1, p->n_held - keep, stdout);
    memmove(p->held, p->held + p->n_held - keep, keep);
    p->n_held = keep;
}

static void print_token(printer *p, int id) {
    size_t len;
    const char *s;
    if (p->detok) {
        s = kiln_detokenizer_push(p->detok, id, &len);
    } else {
        s = kiln_tokenizer_decode(p->tok, p->prev, id, &len);
        if (s && len == 1) {
            unsigned char c = (unsigned char)s[0];
            if (!((c >= 32 && c < 127) || (c >= 9 && c <= 13))) s = NULL;
        }
    }
    if (s && len) emit(p, s, len);
    p->prev = id;
}

static void print_flush(printer *p) {
    size_t len;
    const char *s = p->detok ? kiln_detokenizer_flush(p->detok, &len) : NULL;
    if (s && len) emit(p, s, len);
    if (!p->stopped && p->n_held)
        fwrite(p->held, 1, p->n_held, stdout); /* could have been a stop string, was not */
    p->n_held = 0;
}

static int on_token(void *user, int32_t id) {
    printer *p = user;
    if (p->print_ids)
        printf("%s%d", p->count ? " " : "", id);
    else
        print_token(p, id);
    kiln_cli_flush();
    p->count++;
    return kiln_cli_interrupted != 0 || p->stopped || kiln_cli_stdout_failed(); /* /dev/full */
}

static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16, k = 0;
    int32_t *a = malloc(sizeof *a * (size_t)cap);
    if (!a) return -1;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
            s++;
        if (!*s) break;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || v > 0x7fffffff) {
            free(a);
            return -1;
        }
        if (k == cap) {
            int32_t *b = realloc(a, sizeof *a * (size_t)(cap *= 2));
            if (!b) {
                free(a);
                return -1;
            }
            a = b;
        }
        a[k++] = (int32_t)v;
        s = end;
    }
    *ids = a;
    *n = k;
    return 0;
}

static void print_stats(FILE *f, const kiln_generate_result *r, double load_ms, long long rss) {
    double pre_tps = r->prefill_ms > 0 ? r->n_prompt * 1000.0 / r->prefill_ms : 0;
    double dec_tps = r->decode_ms > 0 ? r->n_generated * 1000.0 / r->decode_ms : 0;
    fprintf(f,
            "kiln generate: prompt %d tokens, generated %d tokens\n"
            "kiln generate: load %.1f ms, time to first token %.1f ms\n"
            "kiln generate: prefill %.1f tokens/s, decode %.1f tokens/s, sampling %.1f ms\n"
            "kiln generate: peak RSS %.1f MiB\n",
            r->n_prompt, r->n_generated, load_ms, r->ttft_ms, pre_tps, dec_tps, r->sampling_ms,
            (double)rss / (1024.0 * 1024.0));
}

static kiln_status write_stats_json(const char *path, const kiln_generate_result *r, double load_ms,
                                    long long rss) {
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) return st;
    FILE *f = out.f;
    double pre_tps = r->prefill_ms > 0 ? r->n_prompt * 1000.0 / r->prefill_ms : 0;
    double dec_tps = r->decode_ms > 0 ? r->n_generated * 1000.0 / r->decode_ms : 0;
    fprintf(
        f,
        "{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"load_ms\": %.3f, \"ttft_ms\": %.3f, "
        "\"prefill_tps\": %.3f, \"decode_tps\": %.3f, \"sampling_ms\": %.3f, \"peak_rss_bytes\": "
        "%lld}\n",
        r->n_prompt, r->n_generated, load_ms, r->ttft_ms, pre_tps, dec_tps, r->sampling_ms, rss);
    return kiln_outfile_commit(&out);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Peak resident set size in bytes (Linux reports ru_maxrss in KiB). */
static long long peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
#ifdef __APPLE__
    return (long long)ru.ru_maxrss;
#else
    return (long long)ru.ru_maxrss * 1024;
#endif
}

/* The rules between flags: 0, or 2 after the message. */
static int check_args(const options *o) {
    const char *cmd = COMMAND.name;
    if (!o->model) return kiln_cli_usage_error(cmd, "no model given (-m FILE)");
    if (!o->prompt == !o->prompt_ids)
        return kiln_cli_usage_error(cmd, "give exactly one of -p and --prompt-ids");
    if (o->chat && !o->prompt) return kiln_cli_usage_error(cmd, "--chat needs -p TEXT");
    if (!o->chat && (o->system || o->chat_template))
        return kiln_cli_usage_error(cmd, "--system and --chat-template need --chat");
    if (o->stop.n && o->print_ids)
        return kiln_cli_usage_error(cmd,
                                    "--stop works on text; it cannot be used with --print-ids");
    return 0;
}

/* A user turn with n images: the model's placeholder once per image, then
 * the text, as Qwen3-VL's chat template renders a message whose content is
 * the images and then the text. */
static kiln_status image_turn(const kiln_program *prog, const kiln_tokenizer *tok, int n,
                              const char *text, char **out) {
    kiln_llm *lm;
    kiln_status st = kiln_llm_bind(prog, &lm);
    if (st) return st;
    char *ph = NULL;
    if ((st = kiln_cli_image_placeholder(lm, tok, &ph)))
        st = kiln_error_wrap(st, "--image");
    else
        st = kiln_cli_images_then_text(ph, n, text, out);
    free(ph);
    kiln_llm_free(lm);
    return st;
}

/* The prompt's ids into *ids (malloc'd): --prompt-ids as given, or -p
 * rendered as a user turn (--chat) or encoded (BOS where the tokenizer adds
 * one). 0, or the exit code after the message. */
static int prompt_tokens(const options *o, const kiln_program *prog, const kiln_tokenizer *tok,
                         int32_t **ids, int *n_ids) {
    const char *cmd = COMMAND.name;
    kiln_status st;
    if (o->prompt_ids) {
        if (parse_ids(o->prompt_ids, ids, n_ids) || *n_ids == 0)
            return kiln_cli_usage_error(cmd, "--prompt-ids must be non-negative integers, got '%s'",
                                        o->prompt_ids);
        return 0;
    }
    if (o->chat) {
        kiln_chat_message msgs[2];
        int n_msgs = 0;
        kiln_chat_format fmt;
        char *text = NULL;
        size_t len;
        char *user = NULL;
        if (o->system) msgs[n_msgs++] = (kiln_chat_message){"system", o->system};
        if (o->images.n && (st = image_turn(prog, tok, o->images.n, o->prompt, &user)))
            return kiln_cli_fail(cmd, st);
        msgs[n_msgs++] = (kiln_chat_message){"user", user ? user : o->prompt};
        if (!(st = kiln_cli_chat_format(prog, o->chat_template, &fmt)) &&
            !(st = kiln_chat_render(fmt, msgs, n_msgs, 1, o->think, &text, &len)))
            st = kiln_cli_chat_encode(tok, text, len, ids, n_ids);
        kiln_chat_free(text);
        free(user);
        return st ? kiln_cli_fail(cmd, st) : 0;
    }
    size_t len = strlen(o->prompt);
    int cap = 2 * (int)len + 3; /* SentencePiece may need two ids a byte around added tokens */
    if (!(*ids = malloc(sizeof **ids * (size_t)cap))) return kiln_cli_fail(cmd, KILN_ERR_NOMEM);
    st = kiln_tokenizer_encode(tok, o->prompt, len, 1, *ids, cap, n_ids);
    return st ? kiln_cli_fail(cmd, st) : 0;
}

/* Loads and encodes each --image (in order) into imgs[], and replaces the
 * prompt's image pads, one per image, by that image's run of tokens. */
static kiln_status attach_images(const options *o, kiln_session *sess, int32_t **ids, int *n_ids,
                                 kiln_llm_image **imgs) {
    kiln_llm *lm;
    kiln_status st = kiln_llm_bind(kiln_session_program(sess), &lm);
    if (st) return st;
    if (!kiln_llm_get_vision(lm))
        st = kiln_error(KILN_ERR_INVALID_ARG,
                        "--image: the program has no vision encoder (no method 'encode_image')");
    else
        st = kiln_cli_image_check(lm, *ids, *n_ids, o->images.n);
    for (int k = 0; !st && k < o->images.n; k++) {
        char info[512];
        st = kiln_cli_image_encode(sess, lm, o->images.v[k], &imgs[k], info, sizeof info);
        if (!st && !o->no_stats) fprintf(stderr, "kiln generate: image %d %s\n", k + 1, info);
    }
    if (!st) st = kiln_cli_image_expand(lm, ids, n_ids, imgs, o->images.n, NULL, NULL);
    kiln_llm_free(lm);
    return st;
}

/* Echoes the prompt in text mode as decoded from its tokens (llama2.c: as
 * run.c does, the BOS it starts with is not shown). */
static void echo_prompt(printer *pr, const int32_t *ids, int n_ids, int runc) {
    for (int i = 0; i < n_ids; i++) {
        if (runc && i == 0 && ids[0] == kiln_tokenizer_bos(pr->tok)) {
            pr->prev = ids[0];
            continue;
        }
        print_token(pr, ids[i]);
    }
}

/* A prompt with no room for a new token in the program's context is an
 * error, but with -n 0 (a prefill alone). */
static kiln_status check_room(const kiln_program *prog, int n_ids, int n_predict, int *ctx) {
    kiln_llm *lm;
    kiln_status st = kiln_llm_bind(prog, &lm);
    if (st) return st;
    *ctx = kiln_llm_get_limits(lm)->context;
    kiln_llm_free(lm);
    if (n_predict != 0 && n_ids >= *ctx)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the prompt has %d tokens, the context holds %d: no room for a new "
                          "token",
                          n_ids, *ctx);
    return KILN_OK;
}

/* The statistics on stderr (unless --no-stats) and in --stats-json; the
 * exit code of a generation that ran. A generation the context cut short is
 * said whatever --no-stats says. */
static int report(const options *o, const kiln_generate_result *res, double load_ms, int ctx) {
    int rc = KILN_EXIT_OK;
    if (res->stopped_at_context && o->smp.gen.n_predict > 0)
        fprintf(stderr,
                "kiln generate: stopped at the context limit: prompt %d + %d generated tokens "
                "fill the context of %d (-n asked for %d)\n",
                res->n_prompt, res->n_generated, ctx, o->smp.gen.n_predict);
    else if (res->stopped_at_context)
        fprintf(stderr,
                "kiln generate: stopped at the context limit: prompt %d + %d generated tokens "
                "fill the context of %d\n",
                res->n_prompt, res->n_generated, ctx);
    long long rss = peak_rss();
    if (!o->no_stats) print_stats(stderr, res, load_ms, rss);
    if (o->stats_json && write_stats_json(o->stats_json, res, load_ms, rss)) {
        fprintf(stderr, "kiln generate: error: --stats-json: %s\n", kiln_last_error());
        rc = KILN_EXIT_FAIL;
    }
    if (kiln_cli_interrupted) {
        fprintf(stderr, "kiln generate: interrupted after %d tokens\n", res->n_generated);
        rc = KILN_EXIT_INTERRUPTED;
    }
    return rc;
}

/* Writes what the trace recorded, even after a failure, and frees it;
 * returns rc, or the exit code of a failed write. */
static int finish_trace(const options *o, kiln_trace *trace, kiln_session *sess, int rc) {
    kiln_status ts = kiln_trace_write(trace, sess, o->trace);
    if (ts)
        rc = kiln_cli_fail(COMMAND.name, ts);
    else if (!o->no_stats)
        fprintf(stderr, "kiln generate: trace of %lld events written to %s\n",
                (long long)kiln_trace_event_count(trace), o->trace);
    kiln_session_set_trace(sess, NULL);
    kiln_trace_free(trace);
    return rc;
}

int kiln_cmd_generate(int argc, char **argv) {
    const char *cmd = COMMAND.name;
    options opt;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &opt, &rc)) return rc;
    if ((rc = check_args(&opt)) || (rc = kiln_cli_qnn_lib(cmd, opt.smp.qnn_lib))) return rc;

    kiln_program *prog = NULL;
    kiln_session *sess = NULL;
    kiln_tokenizer *tok = NULL;
    kiln_trace *trace = NULL;
    int32_t *ids = NULL;
    int n_ids = 0, print_ids = opt.print_ids, ctx = 0;
    kiln_llm_image *imgs[sizeof opt.images.v / sizeof *opt.images.v] = {NULL};
    printer pr = {NULL, NULL, -1, print_ids, 0, 0, 0, opt.stop.v, opt.stop.n, NULL, 0, 0};
    double load_t0 = now_ms();
    kiln_status st = kiln_program_open_with(opt.model, &opt.smp.open, &prog);
    /* Ids in, ids out needs no tokenizer. */
    if (!st && !(opt.prompt_ids && print_ids)) st = kiln_tokenizer_from_program(prog, &tok);
    if (st) goto fail;
    if ((rc = prompt_tokens(&opt, prog, tok, &ids, &n_ids))) goto done;
    kiln_cli_sampling_seed(cmd, &opt.smp);
    kiln_generate_options o = opt.smp.gen;
    o.on_token = on_token;
    o.user = &pr;
    pr.tok = tok;
    const char *tok_model = kiln_program_meta_str(prog, "tokenizer.model");
    int runc = tok_model && !strcmp(tok_model, "llama2c");
    if ((tok && !print_ids && !runc && (st = kiln_detokenizer_create(tok, &pr.detok))) ||
        (st = kiln_session_create(prog, &sess)))
        goto fail;
    double load_ms = now_ms() - load_t0;
    if (opt.trace &&
        ((st = kiln_trace_create(&trace)) || (st = kiln_session_set_trace(sess, trace))))
        goto fail;
    /* text mode echoes the prompt as written, an image's pad once */
    int32_t *echo = NULL;
    int n_echo = n_ids;
    if (!print_ids && !opt.chat && !(echo = malloc(sizeof *echo * (size_t)n_ids))) {
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (echo) memcpy(echo, ids, sizeof *echo * (size_t)n_ids);
    if ((opt.images.n && (st = attach_images(&opt, sess, &ids, &n_ids, imgs))) ||
        (st = kiln_generate_check(prog, ids, n_ids, &o)) ||
        (st = check_room(prog, n_ids, o.n_predict, &ctx))) {
        free(echo);
        goto fail;
    }
    if (echo) echo_prompt(&pr, echo, n_echo, runc); /* tok is set: text mode */
    free(echo);
    kiln_generate_result res;
    pr.generating = 1;
    st = kiln_generate_images(sess, ids, n_ids, 0, imgs, opt.images.n, NULL, &o, &res);
    if (trace) kiln_trace_set_positions(trace, st ? 0 : res.n_prompt + res.n_generated);
    if (st) {
        if (!print_ids) kiln_cli_flush();
        goto fail;
    }
    if (!print_ids) print_flush(&pr);
    printf("\n");
    kiln_cli_flush();
    rc = report(&opt, &res, load_ms, ctx);
    goto done;
fail:
    rc = kiln_cli_fail(cmd, st);
done:
    if (trace) rc = finish_trace(&opt, trace, sess, rc);
    free(pr.held);
    for (int k = 0; k < opt.images.n; k++)
        kiln_llm_image_free(imgs[k]);
    kiln_detokenizer_free(pr.detok);
    free(ids);
    kiln_tokenizer_free(tok);
    kiln_session_destroy(sess);
    kiln_program_close(prog);
    return rc;
}
