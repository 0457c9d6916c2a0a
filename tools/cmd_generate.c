/* cmd_generate.c: `kiln generate -m model.kiln (-p PROMPT | --prompt-ids IDS)`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kiln/kiln_llm.h"

static const char *HELP =
    "usage: kiln generate -m MODEL.kiln (-p PROMPT | --prompt-ids \"1 2 3\") [options]\n"
    "\n"
    "Feeds the prompt through prefill (in chunks), then decodes new tokens.\n"
    "Text mode prints the prompt as decoded from its tokens, the generated\n"
    "text, and a newline.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE     compiled program (required)\n"
    "  -p, --prompt TEXT    prompt text; BOS is added where the tokenizer says so\n"
    "  --prompt-ids IDS     prompt token ids, space- or comma-separated, used as given\n"
    "  -n, --n-predict N    most new tokens; -1 (default): until an end token or\n"
    "                       the context is full\n"
    "  --temp T             temperature; 0 = greedy, where only the repeat penalty\n"
    "                       applies (default 0.8)\n"
    "  --top-k N            keep the N most likely tokens; 0 = off (default 40)\n"
    "  --top-p P            keep the most likely tokens up to probability P, in\n"
    "                       (0, 1]; 1 = off (default 0.95)\n"
    "  --min-p P            drop tokens less likely than P times the best, in\n"
    "                       [0, 1]; 0 = off (default 0.05)\n"
    "  --repeat-penalty F   penalise tokens seen in the last N; > 0, 1 = off\n"
    "                       (default 1.0)\n"
    "  --repeat-last-n N    the penalty's window; -1 = whole context, 0 = off\n"
    "                       (default 64)\n"
    "  --seed S             sampler seed; -1 (default) = random, printed on stderr\n"
    "  -t, --threads N      threads to compute with (default: $KILN_THREADS, else\n"
    "                       every core this process may run on)\n"
    "  --stop STRING        stop when the generated text ends with STRING (not\n"
    "                       printed); repeatable; not with --print-ids\n"
    "  --chat               render -p as a user turn with the chat template and\n"
    "                       print only the answer\n"
    "  --system TEXT        system message (--chat)\n"
    "  --think, --no-think  Qwen3's thinking switch (--chat; default think)\n"
    "  --chat-template NAME|FILE  chatml, smollm2, qwen3, llama3, llama3.1,\n"
    "                       llama3.2, llama3.3 or a Jinja file\n"
    "                       (--chat; default: the program's template)\n"
    "  --print-ids          print only the generated ids on one line\n"
    "  --stats-json FILE    write the generation statistics as JSON to FILE\n"
    "  --trace FILE         record a profile of every method call (docs/TRACE.md;\n"
    "                       read it with kiln inspect)\n"
    "  --no-stats           no statistics block on stderr\n"
    "  -h, --help           this text\n"
    "\n"
    "Samplers run in llama.cpp's order: repeat penalty, top-k, top-p, min-p,\n"
    "temperature. After generating, statistics (tokens, load time, time to\n"
    "first token, prefill and decode speed, sampling time, peak RSS) go to\n"
    "stderr.\n"
    "\n"
    "example:\n"
    "  kiln generate -m stories.kiln -p \"Once upon a time\" -n 64 --temp 0\n";

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
    char *const *stop;
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
    if (!p->stopped && p->n_held) fwrite(p->held, 1, p->n_held, stdout); /* could have been a stop string, was not */
    p->n_held = 0;
}

static int on_token(void *user, int32_t id) {
    printer *p = user;
    if (p->print_ids) printf("%s%d", p->count ? " " : "", id);
    else print_token(p, id);
    fflush(stdout);
    p->count++;
    return kiln_cli_interrupted != 0 || p->stopped;
}

static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16, k = 0;
    int32_t *a = malloc(sizeof *a * (size_t)cap);
    if (!a) return -1;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
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

static int write_stats_json(const char *path, const kiln_generate_result *r, double load_ms, long long rss) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    double pre_tps = r->prefill_ms > 0 ? r->n_prompt * 1000.0 / r->prefill_ms : 0;
    double dec_tps = r->decode_ms > 0 ? r->n_generated * 1000.0 / r->decode_ms : 0;
    fprintf(f,
            "{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"load_ms\": %.3f, \"ttft_ms\": %.3f, "
            "\"prefill_tps\": %.3f, \"decode_tps\": %.3f, \"sampling_ms\": %.3f, \"peak_rss_bytes\": %lld}\n",
            r->n_prompt, r->n_generated, load_ms, r->ttft_ms, pre_tps, dec_tps, r->sampling_ms, rss);
    return fclose(f) ? -1 : 0;
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

int kiln_cmd_generate(int argc, char **argv) {
    const char *cmd = "generate", *model = NULL, *prompt = NULL, *prompt_ids = NULL;
    const char *stats_json = NULL, *system = NULL, *chat_template = NULL, *trace_path = NULL;
    kiln_trace *trace = NULL;
    int chat = 0, think = 1;
    kiln_cli_sampling smp;
    kiln_cli_sampling_init(&smp);
    int print_ids = 0, no_stats = 0, n_stop = 0;
    enum { MAX_STOP = 32 };
    char *stop[MAX_STOP];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        int used = kiln_cli_sampling_flag(cmd, argc, argv, &i, &smp);
        if (used < 0) return KILN_EXIT_USAGE;
        if (used) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(HELP, stdout);
            return KILN_EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--prompt-ids")) {
            if (!(prompt_ids = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--stop")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (!*val) return kiln_cli_usage_error(cmd, "--stop needs a non-empty string");
            if (n_stop == MAX_STOP) return kiln_cli_usage_error(cmd, "--stop given more than %d times", MAX_STOP);
            stop[n_stop++] = argv[i];
        } else if (!strcmp(a, "--trace")) {
            if (!(trace_path = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--stats-json")) {
            if (!(stats_json = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--think")) {
            think = 1;
        } else if (!strcmp(a, "--no-think")) {
            think = 0;
        } else if (!strcmp(a, "--system")) {
            if (!(system = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(chat_template = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--no-stats")) {
            no_stats = 1;
        } else if (!strcmp(a, "--print-ids")) {
            print_ids = 1;
        } else {
            return kiln_cli_usage_error(cmd, "unknown argument '%s'", a);
        }
    }
    if (!model) return kiln_cli_usage_error(cmd, "no model given (-m FILE)");
    if (!prompt == !prompt_ids) return kiln_cli_usage_error(cmd, "give exactly one of -p and --prompt-ids");
    if (chat && !prompt) return kiln_cli_usage_error(cmd, "--chat needs -p TEXT");
    if (!chat && (system || chat_template)) return kiln_cli_usage_error(cmd, "--system and --chat-template need --chat");
    if (n_stop && print_ids) return kiln_cli_usage_error(cmd, "--stop works on text; it cannot be used with --print-ids");

    kiln_program *prog = NULL;
    kiln_session *sess = NULL;
    kiln_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n_ids = 0, rc = KILN_EXIT_OK;
    printer pr = {NULL, NULL, -1, 0, 0, 0, 0, stop, n_stop, NULL, 0, 0};
    double load_t0 = now_ms();
    kiln_status st = kiln_cli_open_program(model, &smp, &prog);
    /* Ids in, ids out needs no tokenizer. */
    if (!st && !(prompt_ids && print_ids)) st = kiln_tokenizer_from_program(prog, &tok);
    if (st) {
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    if (prompt_ids) {
        if (parse_ids(prompt_ids, &ids, &n_ids) || n_ids == 0) {
            rc = kiln_cli_usage_error(cmd, "--prompt-ids must be non-negative integers, got '%s'", prompt_ids);
            goto done;
        }
    } else if (chat) {
        kiln_chat_message msgs[2];
        int n_msgs = 0;
        kiln_chat_format fmt;
        char *text = NULL;
        size_t len;
        if (system) msgs[n_msgs++] = (kiln_chat_message){"system", system};
        msgs[n_msgs++] = (kiln_chat_message){"user", prompt};
        if ((st = kiln_cli_chat_format(prog, chat_template, &fmt)) ||
            (st = kiln_chat_render(fmt, msgs, n_msgs, 1, think, &text, &len)) ||
            (st = kiln_cli_chat_encode(tok, text, len, &ids, &n_ids))) {
            kiln_chat_free(text);
            rc = kiln_cli_fail(cmd, st);
            goto done;
        }
        kiln_chat_free(text);
    } else {
        size_t len = strlen(prompt);
        int cap = 2 * (int)len + 3; /* SentencePiece may need two ids a byte around added tokens */
        ids = malloc(sizeof *ids * (size_t)cap);
        if (!ids) {
            rc = kiln_cli_fail(cmd, KILN_ERR_NOMEM);
            goto done;
        }
        if ((st = kiln_tokenizer_encode(tok, prompt, len, 1, ids, cap, &n_ids))) {
            rc = kiln_cli_fail(cmd, st);
            goto done;
        }
    }
    kiln_generate_options o;
    kiln_generate_options_init(&o);
    kiln_cli_sampling_apply(cmd, &smp, &o);
    pr.tok = tok;
    pr.print_ids = print_ids;
    const char *tok_model = kiln_program_meta_str(prog, "tokenizer.model");
    int runc = tok_model && !strcmp(tok_model, "llama2c");
    if (tok && !print_ids && !runc && (st = kiln_detokenizer_create(tok, &pr.detok))) {
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    o.on_token = on_token;
    o.user = &pr;
    if ((st = kiln_session_create(prog, &sess))) {
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    double load_ms = now_ms() - load_t0;
    if (trace_path && ((st = kiln_trace_create(&trace)) || (st = kiln_session_set_trace(sess, trace)))) {
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    if ((st = kiln_generate_check(prog, ids, n_ids, &o))) {
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    /* Echo the prompt in text mode as decoded from its tokens (llama2.c: as
     * run.c does, the BOS it starts with is not shown). */
    if (!print_ids && !chat) { /* tok is set: text mode needs it */
        for (int i = 0; i < n_ids; i++) {
            if (runc && i == 0 && ids[0] == kiln_tokenizer_bos(tok)) {
                pr.prev = ids[0];
                continue;
            }
            print_token(&pr, ids[i]);
        }
    }
    kiln_generate_result res;
    pr.generating = 1;
    st = kiln_generate(sess, ids, n_ids, &o, &res);
    if (trace) kiln_trace_set_positions(trace, st ? 0 : res.n_prompt + res.n_generated);
    if (st) {
        if (!print_ids) fflush(stdout);
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    if (!print_ids) print_flush(&pr);
    printf("\n");
    fflush(stdout);
    long long rss = peak_rss();
    if (!no_stats) print_stats(stderr, &res, load_ms, rss);
    if (stats_json && write_stats_json(stats_json, &res, load_ms, rss)) {
        fprintf(stderr, "kiln generate: error: cannot write '%s'\n", stats_json);
        rc = KILN_EXIT_FAIL;
    }
    if (kiln_cli_interrupted) {
        fprintf(stderr, "kiln generate: interrupted after %d tokens\n", res.n_generated);
        rc = KILN_EXIT_INTERRUPTED;
    }
done:
    if (trace) { /* what was recorded, even after a failure */
        kiln_status ts = kiln_trace_write(trace, sess, trace_path);
        if (ts) rc = kiln_cli_fail(cmd, ts);
        else if (!no_stats)
            fprintf(stderr, "kiln generate: trace of %lld events written to %s\n",
                    (long long)kiln_trace_event_count(trace), trace_path);
        kiln_session_set_trace(sess, NULL);
        kiln_trace_free(trace);
    }
    free(pr.held);
    kiln_detokenizer_free(pr.detok);
    free(ids);
    kiln_tokenizer_free(tok);
    kiln_session_destroy(sess);
    kiln_program_close(prog);
    return rc;
}
