/* cmd_chat.c: `kiln chat`, an interactive multi-turn loop that keeps the KV
 * cache between turns (each turn prefills only what the new render does not
 * share with the ids already cached) and keeps the conversation inside the
 * context (the oldest turns dropped, answers cut at the limit), `kiln chat
 * --render-only` (a conversation in JSON to the prompt text), and the chat
 * helpers `kiln generate --chat` shares. */
#include <errno.h>
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
             "with it as \"messages\": the conversation to render\n"
             "(--render-only) or to go on from (answered first\n"
             "when it ends with a user message); roles system,\n"
             "user, assistant, and for Llama-3.1+ tool results\n"
             "(\"tool\"/\"ipython\"); no tool definitions or tool\n"
             "calls, no NUL bytes"},
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
             "\n"
             "The conversation stays inside the program's context: before a turn whose\n"
             "render leaves less room than the answer needs (-n tokens, at most a quarter\n"
             "of the context; with -n -1 a quarter), the oldest turns (each user message\n"
             "with the answers after it; a first system message stays) are dropped, said\n"
             "on stderr, and the cache is re-prefilled from the first token that changed.\n"
             "An answer that reaches the end of the context is cut there (said on\n"
             "stderr). A line that does not fit even alone (with the system message and\n"
             "room for one new token), or holds a NUL byte, is an error for that turn:\n"
             "it is skipped, and chat goes on with the next line.\n"
             "\n",
    .notes = "\n"
             "Exit code: 0; 1 when a turn was skipped (the error is on stderr) or on a\n"
             "failure that ends the chat; 2 usage; 130 interrupted.\n"
             "\n"
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

/* The bytes of a file (NULL with errno set when it cannot be read). */
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
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(t);
        errno = EIO;
        return NULL;
    }
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
        /* The formats take NUL-terminated text: a \u0000 would cut it. */
        const kiln_json *nul = strlen(c->s) != c->len ? c : strlen(r->s) != r->len ? r : NULL;
        if (nul)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': message %zu: its %s holds a NUL byte (\\u0000) at byte %zu, "
                              "which Kiln's chat formats cannot render",
                              file, i, nul == c ? "content" : "role", strlen(nul->s));
    }
    *out = root;
    return KILN_OK;
}

/* Reads and checks a --messages file: *list is borrowed from *doc, which
 * lives on *text (free both, even after a failure). */
static kiln_status load_messages(const char *file, char **text, kiln_json_doc *doc,
                                 const kiln_json **list) {
    size_t len = 0;
    if (!(*text = read_file(file, &len)))
        return kiln_error(KILN_ERR_IO, "--messages: cannot read '%s': %s", file, strerror(errno));
    kiln_status st = kiln_json_parse(*text, len, file, 0, doc);
    return st ? st : messages_of(doc->root, file, list);
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
    if (!st) st = load_messages(messages, &text, &doc, &list);
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
    kiln_chat_message *conv; /* each message owns its role and content */
    int n_conv, cap_conv;
    int32_t *past; /* the ids the cache holds, positions 0..n_past */
    int n_past, ctx, turn;
    int reserve; /* the room for an answer a turn's render must leave, else old turns go */
    int skipped; /* turns refused (an error on stderr; the exit code is 1) */
    answer ans;
} conversation;

/* Appends a copy of a message; 0, or -1 when out of memory. */
static int conv_push(conversation *c, const char *role, const char *content) {
    if (c->n_conv == c->cap_conv) {
        int cap = c->cap_conv ? 2 * c->cap_conv : 16;
        kiln_chat_message *m = realloc(c->conv, sizeof *m * (size_t)cap);
        if (!m) return -1;
        c->conv = m;
        c->cap_conv = cap;
    }
    char *r = strdup(role), *t = strdup(content);
    if (!r || !t) {
        free(r);
        free(t);
        return -1;
    }
    c->conv[c->n_conv++] = (kiln_chat_message){r, t};
    return 0;
}

/* Removes the messages [from, to). */
static void conv_drop(conversation *c, int from, int to) {
    for (int i = from; i < to; i++) {
        free((char *)c->conv[i].role);
        free((char *)c->conv[i].content);
    }
    if (c->n_conv > to) /* conv is NULL while empty */
        memmove(c->conv + from, c->conv + to, sizeof *c->conv * (size_t)(c->n_conv - to));
    c->n_conv -= to - from;
}

/* msgs[0..n) rendered with the assistant's generation prompt, as ids. */
static kiln_status render_ids(const conversation *c, const kiln_chat_message *msgs, int n,
                              int32_t **ids, int *n_ids) {
    char *text = NULL;
    size_t len;
    kiln_chat_options co = c->co;
    co.add_generation_prompt = 1;
    kiln_status st = kiln_chat_render_with(c->fmt, msgs, n, &co, &text, &len);
    if (!st) st = kiln_cli_chat_encode(c->tok, text, len, ids, n_ids);
    kiln_chat_free(text);
    return st;
}

/* Starts the conversation with the messages of --messages; 0 or the exit
 * code. */
static int load_history(conversation *c, const options *opt) {
    const char *cmd = COMMAND.name;
    char *text = NULL;
    kiln_json_doc doc = {0};
    const kiln_json *list = NULL;
    int rc = 0;
    kiln_status st = load_messages(opt->messages, &text, &doc, &list);
    if (!st && opt->system && list->len > 0 &&
        !strcmp(kiln_json_get(&list->items[0], "role")->s, "system"))
        rc = kiln_cli_usage_error(cmd,
                                  "--system and the system message of --messages '%s': give "
                                  "one of them",
                                  opt->messages);
    for (size_t i = 0; !st && !rc && i < list->len; i++)
        if (conv_push(c, kiln_json_get(&list->items[i], "role")->s,
                      kiln_json_get(&list->items[i], "content")->s))
            st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (st) rc = kiln_cli_fail(cmd, st);
    kiln_json_free(&doc);
    free(text);
    return rc;
}

/* Opens the program and everything a turn needs; 0 or the exit code. */
static int conversation_open(conversation *c, options *opt) {
    const char *cmd = COMMAND.name;
    int rc;
    if (opt->system && conv_push(c, "system", opt->system))
        return kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
    if (opt->messages && (rc = load_history(c, opt))) return rc;
    kiln_status st = kiln_program_open_with(opt->model, &opt->smp.open, &c->prog);
    if (!st) st = kiln_tokenizer_from_program(c->prog, &c->tok);
    if (!st) st = kiln_cli_chat_format(c->prog, opt->chat_template, &c->fmt);
    if (!st) st = kiln_llm_bind(c->prog, &c->lm);
    if (!st) st = kiln_session_create(c->prog, &c->sess);
    if (!st) st = kiln_detokenizer_create(c->tok, &c->ans.detok);
    if (!st && c->n_conv) { /* a role the format does not render is refused now */
        char *text = NULL;
        st = kiln_chat_render_with(c->fmt, c->conv, c->n_conv, &c->co, &text, NULL);
        kiln_chat_free(text);
    }
    if (st) return kiln_cli_fail(cmd, st);
    c->ctx = kiln_llm_get_limits(c->lm)->context;
    if (!(c->past = malloc(sizeof *c->past * (size_t)c->ctx)) ||
        !(c->ans.ids = malloc(sizeof *c->ans.ids * (size_t)c->ctx)))
        return kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
    kiln_cli_sampling_seed(cmd, &opt->smp);
    c->gen = opt->smp.gen;
    c->gen.on_token = on_token;
    c->gen.user = &c->ans;
    /* Room for -n tokens, but no more than a quarter of the context (-n -1:
     * a quarter), so that a long -n does not empty the history every turn. */
    int quarter = c->ctx / 4 > 0 ? c->ctx / 4 : 1, n = c->gen.n_predict;
    c->reserve = n >= 0 && n < quarter ? (n > 0 ? n : 1) : quarter;
    return 0;
}

static void conversation_close(conversation *c) {
    conv_drop(c, 0, c->n_conv);
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

/* The turn that starts at message `cur` (the last user message), alone: the
 * tokens of the first system message (if any), the turn's messages and the
 * generation prompt, into *n. */
static kiln_status turn_alone(const conversation *c, int cur, int *n) {
    int head = c->n_conv > 0 && !strcmp(c->conv[0].role, "system"), k = 0;
    kiln_chat_message *m = malloc(sizeof *m * (size_t)(c->n_conv - cur + 1));
    if (!m) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (head && cur > 0) m[k++] = c->conv[0];
    for (int i = cur; i < c->n_conv; i++)
        m[k++] = c->conv[i];
    int32_t *ids = NULL;
    kiln_status st = render_ids(c, m, k, &ids, n);
    free(ids);
    free(m);
    return st;
}

/* Fits the turn that starts at message `cur` (the last user message) into
 * the context: *ids receives its render. 0 when it fits, the oldest turns
 * dropped first (whole turns: a user message and what follows it up to the
 * next; a first system message stays) while the render leaves less than
 * c->reserve for the answer; -1 when the turn does not fit even alone (an
 * error on stderr; its messages are removed); or an exit code. */
static int fit_turn(conversation *c, int cur, int32_t **ids, int *n_ids) {
    const char *cmd = COMMAND.name;
    kiln_status st = render_ids(c, c->conv, c->n_conv, ids, n_ids);
    int n_alone = *n_ids, head = c->n_conv > 0 && !strcmp(c->conv[0].role, "system");
    if (!st && *n_ids + c->reserve > c->ctx && cur > head) st = turn_alone(c, cur, &n_alone);
    if (st) return kiln_cli_fail(cmd, st);
    if (n_alone >= c->ctx) {
        fprintf(stderr,
                "kiln chat: error: turn %d: it takes %d tokens alone (with the system message "
                "and the assistant's prompt), the context holds %d: no room for an answer; "
                "turn skipped\n",
                c->turn, n_alone, c->ctx);
        conv_drop(c, cur, c->n_conv);
        c->skipped++;
        return -1;
    }
    int before = *n_ids, turns = 0, msgs = 0;
    while (*n_ids + c->reserve > c->ctx && head < cur) {
        int next = head + 1;
        while (next < cur && strcmp(c->conv[next].role, "user"))
            next++;
        conv_drop(c, head, next);
        turns++;
        msgs += next - head;
        cur -= next - head;
        free(*ids);
        *ids = NULL;
        if ((st = render_ids(c, c->conv, c->n_conv, ids, n_ids))) return kiln_cli_fail(cmd, st);
    }
    if (turns)
        fprintf(stderr,
                "kiln chat: turn %d: context full: dropped the oldest %d turn%s (%d messages), "
                "%d tokens freed (the conversation now takes %d of %d)\n",
                c->turn, turns, turns == 1 ? "" : "s", msgs, before - *n_ids, *n_ids, c->ctx);
    return 0;
}

/* One turn: the conversation so far (its last user message and what follows
 * already in c->conv) fitted into the context, rendered, the ids the cache
 * does not hold prefilled, the answer streamed and added. 0 (also for a
 * turn refused: c->skipped counts it), or the exit code. */
static int conversation_turn(conversation *c) {
    const char *cmd = COMMAND.name;
    int32_t *ids = NULL;
    int n_ids = 0, turn = ++c->turn, cur = c->n_conv - 1;
    while (cur > 0 && strcmp(c->conv[cur].role, "user"))
        cur--;
    int r = fit_turn(c, cur, &ids, &n_ids);
    if (r) {
        free(ids);
        return r < 0 ? 0 : r;
    }
    /* Keep the longest cached prefix the new render shares (as llama.cpp's
     * server does): the cache's rows past it are overwritten by this
     * prefill and never read before (attention at position p reads rows
     * 0..p). At least one id is prefilled, for the logits. After old turns
     * were dropped this is where the render first changed. */
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
    kiln_status st =
        kiln_generate_continue(c->sess, ids + start, n_ids - start, start, &c->gen, &res);
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
    if (res.stopped_at_context)
        fprintf(stderr,
                "kiln chat: turn %d: the answer hit the context limit (%d tokens) after %d "
                "token%s: cut there\n",
                turn, c->ctx, res.n_generated, res.n_generated == 1 ? "" : "s");
    fprintf(stderr, "kiln chat: turn %d: prefilled %d new tokens at position %d, generated %d\n",
            turn, n_ids - start, start, res.n_generated);
    if (conv_push(c, "assistant", c->ans.text ? c->ans.text : ""))
        return kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
    return 0;
}

/* Reads the user's lines from stdin, one turn each; the exit code. */
static int chat_loop(conversation *c) {
    const char *cmd = COMMAND.name;
    char *line = NULL;
    size_t line_cap = 0;
    int tty = isatty(0), rc = 0;
    for (;;) {
        if (tty) fputs("> ", stderr);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0 || kiln_cli_interrupted) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (!got) continue;
        if (strlen(line) != (size_t)got) {
            fprintf(stderr,
                    "kiln chat: error: turn %d: the line holds a NUL byte (byte %zu), which "
                    "Kiln's chat formats cannot render; turn skipped\n",
                    ++c->turn, strlen(line));
            c->skipped++;
            continue;
        }
        if (conv_push(c, "user", line)) {
            rc = kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
            break;
        }
        if ((rc = conversation_turn(c)) || kiln_cli_interrupted) break;
    }
    free(line);
    return rc;
}

int kiln_cmd_chat(int argc, char **argv) {
    const char *cmd = COMMAND.name;
    options opt;
    int rc;
    if (!kiln_cli_parse(&COMMAND, argc, argv, &opt, &rc)) return rc;
    if ((rc = kiln_cli_qnn_lib(cmd, opt.smp.qnn_lib))) return rc;
    kiln_chat_options co;
    kiln_chat_options_init(&co);
    co.add_generation_prompt = opt.generation_prompt;
    co.enable_thinking = opt.think;
    co.date = opt.date;
    if (opt.render_only) return render_only(cmd, opt.model, opt.chat_template, opt.messages, &co);
    if (!opt.model) return kiln_cli_usage_error(cmd, "no model given (-m FILE)");
    if (!opt.generation_prompt)
        return kiln_cli_usage_error(cmd, "--no-generation-prompt needs --render-only");

    conversation c;
    memset(&c, 0, sizeof c);
    c.co = co;
    if ((rc = conversation_open(&c, &opt))) goto done;
    /* A --messages conversation that ends with a user message is answered
     * first. */
    if (c.n_conv && !strcmp(c.conv[c.n_conv - 1].role, "user") && (rc = conversation_turn(&c)))
        goto done;
    if (!kiln_cli_interrupted && (rc = chat_loop(&c))) goto done;
    rc = c.skipped ? KILN_EXIT_FAIL : KILN_EXIT_OK;
    if (kiln_cli_interrupted) rc = KILN_EXIT_INTERRUPTED;
done:
    conversation_close(&c);
    return rc;
}
