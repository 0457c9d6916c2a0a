/* cmd_chat.c: `kiln chat`, an interactive multi-turn loop that keeps the KV
 * cache between turns (each turn prefills only what the new render does not
 * share with the ids already cached), `kiln chat --render-only` (a
 * conversation in JSON to the prompt text), and the chat helpers
 * `kiln generate --chat` shares. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devtools/devtools.h"
#include "cli.h"
#include "kiln/kiln_llm.h"

typedef struct {
    const char *model, *system, *chat_template, *messages, *date;
    int think, render_only, generation_prompt;
    kiln_cli_sampling smp;
} options;

#define OPT(field) offsetof(options, field)

static const kiln_cli_flag FLAGS[] = {
    {KILN_CLI_STR, "-m, --model", "FILE", OPT(model), .path = KILN_CLI_IN_FILE,
     .help = "compiled program (required but with --render-only\n"
             "and --chat-template)"},
    {KILN_CLI_STR, "--system", "TEXT", OPT(system), .help = "system message"},
    {KILN_CLI_SWITCH, "--think, --no-think", NULL, OPT(think),
     .help = "Qwen3's thinking switch (default: think)"},
    {KILN_CLI_STR, "--chat-template", "NAME|FILE", OPT(chat_template),
     .help = "chatml, smollm2, qwen3, llama3, llama3.1,\n"
             "llama3.2, llama3.3, or a Jinja file whose format is\n"
             "detected (default: the program's)"},
    {KILN_CLI_STR, "--chat-date", "DATE", OPT(date),
     .help = "Llama-3.1+'s \"Today Date\" (e.g. \"26 Jul 2024\");\n"
             "default: $KILN_CHAT_DATE, else the template's own\n"
             "(3.2: today, 3.1/3.3: 26 Jul 2024)"},
    {KILN_CLI_TABLE, NULL, NULL, OPT(smp), .table = kiln_cli_sampling_flags},
    {KILN_CLI_SET, "--render-only", NULL, OPT(render_only), .lo = 1,
     .help = "print the rendered prompt of --messages and exit"},
    {KILN_CLI_STR, "--messages", "FILE", OPT(messages), .path = KILN_CLI_IN_FILE,
     .help = "JSON array of {\"role\", \"content\"}, or an object\n"
             "with it as \"messages\" (--render-only); roles\n"
             "system, user, assistant, and for Llama-3.1+ tool\n"
             "results (\"tool\"/\"ipython\"); no tool definitions\n"
             "or tool calls"},
    {KILN_CLI_SET, "--no-generation-prompt", NULL, OPT(generation_prompt), .lo = 0,
     .help = "render without the assistant prompt (--render-only)"},
    {KILN_CLI_END},
};

static void init(void *p) {
    options *o = p;
    memset(o, 0, sizeof *o);
    o->think = 1;
    o->generation_prompt = 1;
    kiln_cli_sampling_init(&o->smp);
}

static const kiln_cli_command COMMAND = {
    .name = "chat",
    .about = "usage: kiln chat -m MODEL.kiln [options]\n"
             "       kiln chat --render-only --messages FILE.json (-m MODEL.kiln | --chat-template "
             "NAME|FILE)\n"
             "\n"
             "Reads one user turn per line from stdin and prints each answer as it is\n"
             "generated. The KV cache is kept between turns: each turn keeps the cached\n"
             "tokens the new render starts with and prefills only the rest (stats on\n"
             "stderr; a render that departs from the cache, as Qwen3's does when it drops\n"
             "past <think> blocks, keeps the part before the change).\n"
             "\n",
    .notes = "\n"
             "example:\n"
             "  kiln chat -m smollm2.kiln --temp 0 -n 128\n",
    .column = 26,
    .flags = FLAGS,
    .size = sizeof(options),
    .init = init,
    .unknown = "unknown argument '%s'",
};

kiln_status kiln_cli_chat_format(const kiln_program *prog, const char *override,
                                 kiln_chat_format *out) {
    if (!override) return kiln_chat_format_from_program(prog, out);
    if (kiln_chat_format_from_name(override, out) == KILN_OK) return KILN_OK;
    FILE *f = fopen(override, "rb");
    if (!f)
        return kiln_error(KILN_ERR_IO,
                          "--chat-template '%s' is neither chatml, smollm2, qwen3, llama3, "
                          "llama3.1, llama3.2, llama3.3 nor a readable file",
                          override);
    size_t cap = 1 << 16, n = 0, got;
    char *t = malloc(cap);
    while (t && (got = fread(t + n, 1, cap - 1 - n, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *u = realloc(t, cap *= 2);
            if (!u) free(t);
            t = u;
        }
    }
    fclose(f);
    if (!t) return kiln_error(KILN_ERR_NOMEM, "out of memory reading '%s'", override);
    t[n] = 0;
    kiln_status st = kiln_chat_format_detect(t, out);
    free(t);
    return st ? kiln_error_wrap(st, "'%s'", override) : KILN_OK;
}

kiln_status kiln_cli_chat_encode(const kiln_tokenizer *tok, const char *text, size_t len,
                                 int32_t **ids, int *n_ids) {
    int cap = 2 * (int)len + 3;
    int32_t *a = malloc(sizeof *a * (size_t)cap);
    if (!a) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    /* Special tokens in the text are parsed; BOS is added only where the
     * tokenizer adds one and the rendered text does not start with it. */
    kiln_status st = kiln_tokenizer_encode_flags(tok, text, len, 0, a + 1, cap - 1, n_ids);
    int bos = kiln_tokenizer_bos(tok), probe[4], n_probe = 0;
    if (!st && bos >= 0 &&
        kiln_tokenizer_encode_flags(tok, "", 0, KILN_TOKENIZE_ADD_SPECIAL, probe, 4, &n_probe) ==
            KILN_OK &&
        n_probe > 0 && probe[0] == bos && (*n_ids == 0 || a[1] != bos)) {
        a[0] = bos;
        ++*n_ids;
    } else {
        memmove(a, a + 1, sizeof *a * (size_t)*n_ids);
    }
    if (st) {
        free(a);
        return st;
    }
    *ids = a;
    return KILN_OK;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, got;
    char *t = malloc(cap);
    while (t && (got = fread(t + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *u = realloc(t, cap *= 2);
            if (!u) free(t);
            t = u;
        }
    }
    fclose(f);
    *len = n;
    return t;
}

/* The messages of a --messages document: an array, or an object holding it
 * as "messages". Tool definitions and tool calls are refused by name. */
static kiln_status messages_of(const kiln_json *root, const char *file, const kiln_json **out) {
    const kiln_json *tools = kiln_json_get(root, "tools");
    if (root->type == KILN_JSON_OBJECT) root = kiln_json_get(root, "messages");
    if (tools && tools->type != KILN_JSON_NULL &&
        !(tools->type == KILN_JSON_ARRAY && tools->len == 0))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "'%s': \"tools\" (tool definitions): Kiln's chat formats render "
                          "none (tool results in \"tool\" messages are rendered for Llama-3.1+)",
                          file);
    if (!root || root->type != KILN_JSON_ARRAY)
        return kiln_error(KILN_ERR_FORMAT,
                          "'%s': expected an array of messages, or an object with one as "
                          "\"messages\"",
                          file);
    for (size_t i = 0; i < root->len; i++) {
        const kiln_json *r = kiln_json_get(&root->items[i], "role");
        const kiln_json *c = kiln_json_get(&root->items[i], "content");
        const kiln_json *calls = kiln_json_get(&root->items[i], "tool_calls");
        if (calls && calls->type != KILN_JSON_NULL &&
            !(calls->type == KILN_JSON_ARRAY && calls->len == 0))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "'%s': message %zu has \"tool_calls\": Kiln's chat formats "
                              "render no tool calls",
                              file, i);
        if (!r || !c || r->type != KILN_JSON_STRING || c->type != KILN_JSON_STRING)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': message %zu needs string 'role' and 'content'", file, i);
    }
    *out = root;
    return KILN_OK;
}

static int render_only(const char *cmd, const char *model, const char *tmpl, const char *messages,
                       const kiln_chat_options *co) {
    if (!messages) return kiln_cli_usage_error(cmd, "--render-only needs --messages FILE");
    if (!model && !tmpl)
        return kiln_cli_usage_error(cmd, "--render-only needs -m MODEL or --chat-template");
    kiln_program *prog = NULL;
    kiln_json_doc doc = {0};
    const kiln_json *list = NULL;
    kiln_chat_message *m = NULL;
    char *out = NULL, *text = NULL;
    size_t len = 0;
    kiln_chat_format fmt;
    kiln_status st = KILN_OK;
    if (!tmpl) st = kiln_program_open(model, &prog);
    if (!st) st = kiln_cli_chat_format(prog, tmpl, &fmt);
    if (!st && !(text = read_file(messages, &len)))
        st = kiln_error(KILN_ERR_IO, "cannot read '%s'", messages);
    if (!st) st = kiln_json_parse(text, len, messages, 0, &doc);
    if (!st) st = messages_of(doc.root, messages, &list);
    if (!st && !(m = calloc(list->len + 1, sizeof *m)))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < list->len; i++)
        m[i] = (kiln_chat_message){kiln_json_get(&list->items[i], "role")->s,
                                   kiln_json_get(&list->items[i], "content")->s};
    if (!st) st = kiln_chat_render_with(fmt, m, (int)list->len, co, &out, &len);
    int rc = st ? kiln_cli_fail(cmd, st) : KILN_EXIT_OK;
    if (!st) fwrite(out, 1, len, stdout);
    kiln_chat_free(out);
    free(m);
    kiln_json_free(&doc);
    free(text);
    kiln_program_close(prog);
    return rc;
}

/* Streams an answer: prints through a detokenizer and keeps the text for
 * the conversation, and the ids for the cache's record. */
typedef struct {
    kiln_detokenizer *detok;
    char *text;
    size_t n, cap;
    int32_t *ids;
    int n_ids;
} answer;

static void answer_put(answer *a, const char *s, size_t len) {
    if (!s || !len) return;
    fwrite(s, 1, len, stdout);
    if (a->n + len + 1 > a->cap) {
        size_t cap = (a->n + len + 1) * 2;
        char *t = realloc(a->text, cap);
        if (!t) return;
        a->text = t;
        a->cap = cap;
    }
    memcpy(a->text + a->n, s, len);
    a->n += len;
    a->text[a->n] = 0;
}

static int on_token(void *user, int32_t id) {
    answer *a = user;
    size_t len;
    a->ids[a->n_ids++] = id;
    const char *s = kiln_detokenizer_push(a->detok, id, &len);
    answer_put(a, s, len);
    fflush(stdout);
    return kiln_cli_interrupted != 0;
}

/* A conversation: the program, its session, the messages so far and the
 * ids its KV cache holds. */
typedef struct {
    kiln_program *prog;
    kiln_session *sess;
    kiln_tokenizer *tok;
    kiln_llm *lm;
    kiln_chat_format fmt;
    kiln_chat_options co;
    kiln_generate_options gen;
    kiln_chat_message *conv; /* each message owns its content; grows by two a turn */
    int n_conv, cap_conv;
    int32_t *past; /* the ids the cache holds, positions 0..n_past */
    int n_past, ctx, turn;
    answer ans;
} conversation;

/* Opens the program and everything a turn needs; 0 or the exit code. */
static int conversation_open(conversation *c, options *opt) {
    const char *cmd = COMMAND.name;
    kiln_status st = kiln_program_open_with(opt->model, &opt->smp.open, &c->prog);
    if (!st) st = kiln_tokenizer_from_program(c->prog, &c->tok);
    if (!st) st = kiln_cli_chat_format(c->prog, opt->chat_template, &c->fmt);
    if (!st) st = kiln_llm_bind(c->prog, &c->lm);
    if (!st) st = kiln_session_create(c->prog, &c->sess);
    if (!st) st = kiln_detokenizer_create(c->tok, &c->ans.detok);
    if (st) return kiln_cli_fail(cmd, st);
    c->ctx = kiln_llm_get_limits(c->lm)->context;
    if (!(c->past = malloc(sizeof *c->past * (size_t)c->ctx)) ||
        !(c->ans.ids = malloc(sizeof *c->ans.ids * (size_t)c->ctx)))
        return kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
    kiln_cli_sampling_seed(cmd, &opt->smp);
    c->gen = opt->smp.gen;
    c->gen.on_token = on_token;
    c->gen.user = &c->ans;
    c->cap_conv = 16;
    if (!(c->conv = malloc(sizeof *c->conv * (size_t)c->cap_conv)))
        return kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
    if (opt->system) c->conv[c->n_conv++] = (kiln_chat_message){"system", strdup(opt->system)};
    return 0;
}

static void conversation_close(conversation *c) {
    for (int i = 0; i < c->n_conv; i++)
        free((char *)c->conv[i].content);
    free(c->conv);
    free(c->past);
    free(c->ans.ids);
    free(c->ans.text);
    kiln_detokenizer_free(c->ans.detok);
    kiln_tokenizer_free(c->tok);
    kiln_session_destroy(c->sess);
    kiln_llm_free(c->lm);
    kiln_program_close(c->prog);
}

/* One turn: the conversation so far plus the user's line (already in
 * c->conv) rendered, the ids the cache does not hold prefilled, the answer
 * streamed and added. 0, or the exit code. */
static int conversation_turn(conversation *c) {
    const char *cmd = COMMAND.name;
    char *text = NULL;
    size_t len;
    int32_t *ids = NULL;
    int n_ids = 0, turn = ++c->turn;
    c->co.add_generation_prompt = 1;
    kiln_status st = kiln_chat_render_with(c->fmt, c->conv, c->n_conv, &c->co, &text, &len);
    if (!st) st = kiln_cli_chat_encode(c->tok, text, len, &ids, &n_ids);
    kiln_chat_free(text);
    if (st) return kiln_cli_fail(cmd, st);
    if (n_ids >= c->ctx) {
        fprintf(stderr,
                "kiln chat: error: turn %d: the conversation has %d tokens, the context holds %d\n",
                turn, n_ids, c->ctx);
        free(ids);
        return KILN_EXIT_FAIL;
    }
    /* Keep the longest cached prefix the new render shares (as llama.cpp's
     * server does): the cache's rows past it are overwritten by this
     * prefill and never read before (attention at position p reads rows
     * 0..p). At least one id is prefilled, for the logits. */
    int start = 0;
    while (start < c->n_past && start < n_ids - 1 && c->past[start] == ids[start])
        start++;
    if (start < c->n_past)
        fprintf(stderr,
                "kiln chat: turn %d: reusing %d of %d cached tokens (the conversation's tokens "
                "changed after them)\n",
                turn, start, c->n_past);
    memcpy(c->past, ids, sizeof *ids * (size_t)n_ids);
    c->ans.n = 0;
    c->ans.n_ids = 0;
    if (c->ans.text) c->ans.text[0] = 0;
    kiln_generate_result res;
    st = kiln_generate_continue(c->sess, ids + start, n_ids - start, start, &c->gen, &res);
    free(ids);
    if (st) {
        fflush(stdout);
        return kiln_cli_fail(cmd, st);
    }
    size_t fl;
    const char *rest = kiln_detokenizer_flush(c->ans.detok, &fl);
    answer_put(&c->ans, rest, fl);
    fputc('\n', stdout);
    fflush(stdout);
    /* The cache now holds the prompt and the generated ids that went
     * through decode. */
    memcpy(c->past + n_ids, c->ans.ids, sizeof *c->past * (size_t)(res.n_past - n_ids));
    c->n_past = res.n_past;
    fprintf(stderr, "kiln chat: turn %d: prefilled %d new tokens at position %d, generated %d\n",
            turn, n_ids - start, start, res.n_generated);
    c->conv[c->n_conv++] = (kiln_chat_message){"assistant", strdup(c->ans.text ? c->ans.text : "")};
    return 0;
}

int kiln_cmd_chat(int argc, char **argv) {
    const char *cmd = COMMAND.name;
    options opt;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &opt, &rc)) return rc;
    kiln_chat_options co;
    kiln_chat_options_init(&co);
    co.add_generation_prompt = opt.generation_prompt;
    co.enable_thinking = opt.think;
    co.date = opt.date;
    if (opt.render_only) return render_only(cmd, opt.model, opt.chat_template, opt.messages, &co);
    if (!opt.model) return kiln_cli_usage_error(cmd, "no model given (-m FILE)");

    conversation c;
    memset(&c, 0, sizeof c);
    c.co = co;
    char *line = NULL;
    size_t line_cap = 0;
    int tty = isatty(0);
    if ((rc = conversation_open(&c, &opt))) goto done;
    for (;;) {
        if (tty) fputs("> ", stderr);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0 || kiln_cli_interrupted) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (!got) continue;
        if (c.n_conv + 2 > c.cap_conv) {
            kiln_chat_message *m = realloc(c.conv, sizeof *c.conv * (size_t)(c.cap_conv *= 2));
            if (!m) break;
            c.conv = m;
        }
        c.conv[c.n_conv++] = (kiln_chat_message){"user", strdup(line)};
        if ((rc = conversation_turn(&c))) goto done;
        if (kiln_cli_interrupted) break;
    }
    if (kiln_cli_interrupted) rc = KILN_EXIT_INTERRUPTED;
done:
    free(line);
    conversation_close(&c);
    return rc;
}
