/* cmd_generate.c: `kiln generate -m model.kiln (-p PROMPT | --prompt-ids IDS)`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    "  --temp T             temperature; 0 = greedy (default 0.8)\n"
    "  --seed S             sampler seed; -1 (default) = random, printed on stderr\n"
    "  --print-ids          print only the generated ids on one line\n"
    "  -h, --help           this text\n"
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
} printer;

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
    if (s && len) fwrite(s, 1, len, stdout);
    p->prev = id;
}

static void print_flush(printer *p) {
    size_t len;
    const char *s = p->detok ? kiln_detokenizer_flush(p->detok, &len) : NULL;
    if (s && len) fwrite(s, 1, len, stdout);
}

static int on_token(void *user, int32_t id) {
    printer *p = user;
    if (p->print_ids) printf("%s%d", p->count ? " " : "", id);
    else print_token(p, id);
    fflush(stdout);
    p->count++;
    return kiln_cli_interrupted != 0;
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

int kiln_cmd_generate(int argc, char **argv) {
    const char *cmd = "generate", *model = NULL, *prompt = NULL, *prompt_ids = NULL;
    long long n_predict = -1, seed = -1;
    double temp = 0.8;
    int print_ids = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(HELP, stdout);
            return KILN_EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "--prompt-ids")) {
            if (!(prompt_ids = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (kiln_cli_int(val, -1, 1 << 24, &n_predict))
                return kiln_cli_usage_error(cmd, "-n must be -1 or a count >= 0, got '%s'", val);
        } else if (!strcmp(a, "--temp")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (kiln_cli_float(val, 0, 100, &temp))
                return kiln_cli_usage_error(cmd, "--temp must be a number in 0..100, got '%s'", val);
        } else if (!strcmp(a, "--seed")) {
            if (!(val = kiln_cli_value(cmd, argc, argv, &i))) return KILN_EXIT_USAGE;
            if (kiln_cli_int(val, -1, (long long)0x7fffffffffffffffLL, &seed))
                return kiln_cli_usage_error(cmd, "--seed must be -1 or a non-negative integer, got '%s'", val);
        } else if (!strcmp(a, "--print-ids")) {
            print_ids = 1;
        } else {
            return kiln_cli_usage_error(cmd, "unknown argument '%s'", a);
        }
    }
    if (!model) return kiln_cli_usage_error(cmd, "no model given (-m FILE)");
    if (!prompt == !prompt_ids) return kiln_cli_usage_error(cmd, "give exactly one of -p and --prompt-ids");

    kiln_program *prog = NULL;
    kiln_session *sess = NULL;
    kiln_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n_ids = 0, rc = KILN_EXIT_OK;
    printer pr = {NULL, NULL, -1, 0, 0};
    kiln_status st = kiln_program_open(model, &prog);
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
    o.n_predict = (int)n_predict;
    o.temperature = (float)temp;
    if (seed < 0) {
        seed = (long long)((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0x7fffffffffffLL;
        if (temp > 0) fprintf(stderr, "kiln generate: seed %lld\n", seed);
    }
    o.seed = (uint64_t)seed;
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
    if ((st = kiln_generate_check(prog, ids, n_ids, &o))) {
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    /* Echo the prompt in text mode as decoded from its tokens (llama2.c: as
     * run.c does, the BOS it starts with is not shown). */
    if (!print_ids) { /* tok is set: text mode needs it */
        for (int i = 0; i < n_ids; i++) {
            if (runc && i == 0 && ids[0] == kiln_tokenizer_bos(tok)) {
                pr.prev = ids[0];
                continue;
            }
            print_token(&pr, ids[i]);
        }
    }
    kiln_generate_result res;
    st = kiln_generate(sess, ids, n_ids, &o, &res);
    if (st) {
        if (!print_ids) fflush(stdout);
        rc = kiln_cli_fail(cmd, st);
        goto done;
    }
    if (!print_ids) print_flush(&pr);
    printf("\n");
    if (kiln_cli_interrupted) {
        fprintf(stderr, "kiln generate: interrupted after %d tokens\n", res.n_generated);
        rc = KILN_EXIT_INTERRUPTED;
    }
done:
    kiln_detokenizer_free(pr.detok);
    free(ids);
    kiln_tokenizer_free(tok);
    kiln_session_destroy(sess);
    kiln_program_close(prog);
    return rc;
}
