/* cmd_tokenize.c: `kiln tokenize (-m MODEL.kiln | --tokenizer FILE)`: text on
 * stdin to ids on stdout, or with --decode ids to the exact bytes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln/kiln_llm.h"

typedef struct {
    const char *model, *tokenizer, *qnn_lib;
    int json, decode, add_special, plain_special;
} options;

#define OPT(field) offsetof(options, field)

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .help = "the tokenizer of a compiled program"},
    {KILN_CLI_STR, "--tokenizer", "FILE", OPT(tokenizer), .path = KILN_CLI_IN_FILE,
     .help = "a tokenizer.json (tokenizer_config.json beside it is\n"
             "read too), a GGUF file, or a llama2.c tokenizer.bin"},
    {KILN_CLI_SET, "--json", NULL, OPT(json), .lo = 1, .help = "print one JSON array instead"},
    {KILN_CLI_SET, "--add-special", NULL, OPT(add_special), .lo = 1,
     .help = "add what the tokenizer puts around a text (BOS/EOS)"},
    {KILN_CLI_SET, "--no-parse-special", NULL, OPT(plain_special), .lo = 1,
     .help = "special-token text is plain text"},
    {KILN_CLI_SET, "--decode", NULL, OPT(decode), .lo = 1,
     .help = "read ids (space-, comma- or newline-separated, or a JSON\n"
             "array) from stdin and write the exact bytes they decode to"},
    KILN_CLI_QNN_LIB(OPT(qnn_lib)),
    {KILN_CLI_END},
};

static void init(void *o) {
    memset(o, 0, sizeof(options));
}

static const kiln_cli_command COMMAND = {
    .name = "tokenize",
    .about = "usage: kiln tokenize (-m MODEL.kiln | --tokenizer FILE) [options] < input\n"
             "\n"
             "Reads all of stdin byte for byte (a trailing newline is part of the text)\n"
             "and prints its token ids, space-separated, on one line. Like Hugging Face's\n"
             "encode(text, add_special_tokens=False): special tokens written in the text\n"
             "are recognised and nothing is added around it.\n"
             "\n",
    .notes = "\n"
             "examples:\n"
             "  printf 'Hello world' | kiln tokenize --tokenizer qwen3/tokenizer.json\n"
             "  echo '<|im_start|>user' | kiln tokenize -m smollm2.kiln --json\n"
             "  printf 'Hi' | kiln tokenize -m llama.kiln --add-special --no-parse-special\n"
             "  echo '9707 11 1879' | kiln tokenize --tokenizer qwen3/tokenizer.json --decode\n",
    .column = 24,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .unknown = "unknown argument '%s'",
};

/* All of stdin; NULL on a read error or out of memory. */
static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b2 = cap < ((size_t)1 << 30) ? realloc(buf, cap *= 2) : NULL;
        if (!b2) {
            free(buf);
            return NULL;
        }
        buf = b2;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int encode(const char *cmd, const kiln_tokenizer *tok, const char *text, size_t len,
                  unsigned flags, int json) {
    size_t cap = 2 * len + 8;
    if (cap > 0x7fffffff) return kiln_cli_fail(cmd, KILN_ERR_INVALID_ARG);
    int32_t *ids = malloc(sizeof *ids * cap);
    int n = 0;
    if (!ids) return kiln_cli_fail(cmd, KILN_ERR_NOMEM);
    kiln_status st = kiln_tokenizer_encode_flags(tok, text, len, flags, ids, (int)cap, &n);
    if (st) {
        free(ids);
        return kiln_cli_fail(cmd, st);
    }
    if (json) putchar('[');
    for (int i = 0; i < n; i++)
        printf(i ? (json ? ",%d" : " %d") : "%d", ids[i]);
    puts(json ? "]" : "");
    free(ids);
    return kiln_cli_flush() ? KILN_EXIT_FAIL : KILN_EXIT_OK;
}

static int decode(const char *cmd, const kiln_tokenizer *tok, const char *text, size_t len) {
    kiln_detokenizer *d;
    kiln_status st = kiln_detokenizer_create(tok, &d);
    if (st) return kiln_cli_fail(cmd, st);
    int rc = KILN_EXIT_OK;
    size_t i = 0;
    while (i < len) {
        char c = text[i];
        if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') {
            i++;
            continue;
        }
        long long v = 0;
        size_t j = i;
        while (j < len && text[j] >= '0' && text[j] <= '9' && v <= 0x7fffffff)
            v = v * 10 + (text[j++] - '0');
        if (j == i || v > 0x7fffffff || (j < len && !strchr(" ,\n\r\t[]", text[j]))) {
            fprintf(stderr, "kiln %s: stdin byte %zu: expected a token id, found '%.20s'\n", cmd, i,
                    text + i);
            rc = KILN_EXIT_FAIL;
            break;
        }
        size_t n;
        const char *p = kiln_detokenizer_push(d, (int)v, &n);
        if (!p) {
            fprintf(stderr, "kiln %s: token id %lld is outside the vocabulary of %d\n", cmd, v,
                    kiln_tokenizer_vocab_size(tok));
            rc = KILN_EXIT_FAIL;
            break;
        }
        fwrite(p, 1, n, stdout);
        i = j;
    }
    size_t n;
    const char *p = kiln_detokenizer_flush(d, &n);
    fwrite(p, 1, n, stdout);
    kiln_detokenizer_free(d);
    if (kiln_cli_flush()) rc = KILN_EXIT_FAIL;
    return rc;
}

int kiln_cmd_tokenize(int argc, char **argv) {
    const char *cmd = COMMAND.name;
    options o;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &o, &rc)) return rc;
    unsigned flags = (o.add_special ? KILN_TOKENIZE_ADD_SPECIAL : 0) |
                     (o.plain_special ? KILN_TOKENIZE_PLAIN_SPECIAL : 0);
    if (!o.model == !o.tokenizer)
        return kiln_cli_usage_error(cmd, "give exactly one of -m MODEL.kiln and --tokenizer FILE");
    if (o.decode && (flags || o.json))
        return kiln_cli_usage_error(
            cmd, "--decode takes no --json, --add-special or --no-parse-special");
    if ((rc = kiln_cli_qnn_lib(cmd, o.qnn_lib))) return rc;

    kiln_tokenizer *tok = NULL;
    kiln_status st;
    if (o.model) {
        kiln_program *prog;
        if (!(st = kiln_program_open(o.model, &prog))) {
            st = kiln_tokenizer_from_program(prog, &tok);
            kiln_program_close(prog);
        }
    } else {
        st = kiln_tokenizer_load(o.tokenizer, &tok);
    }
    if (st) return kiln_cli_fail(cmd, st);
    size_t len = 0;
    char *text = read_all(stdin, &len);
    if (!text) {
        fprintf(stderr, "kiln %s: cannot read stdin\n", cmd);
        rc = KILN_EXIT_FAIL;
    } else {
        rc = o.decode ? decode(cmd, tok, text, len) : encode(cmd, tok, text, len, flags, o.json);
    }
    free(text);
    kiln_tokenizer_free(tok);
    return rc;
}
