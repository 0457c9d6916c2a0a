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
#include <time.h>
#include <unistd.h>

#include "devtools/devtools.h"
#include "cli.h"
#include "image.h"
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
             "llama3.2, llama3.3, qwen3vl, qwen3vl-thinking, or a\n"
             "Jinja file whose format is detected (default: the\n"
             "program's)"},
    {KILN_CLI_STR, "--chat-date", "DATE", OPT(date),
     .help = "Llama-3.1+'s \"Today Date\" (e.g. \"26 Jul 2024\");\n"
             "default: $KILN_CHAT_DATE, else the template's own\n"
             "(3.2: today, 3.1/3.3: 26 Jul 2024)"},
    {KILN_CLI_TABLE, NULL, NULL, OPT(smp), .table = kiln_cli_sampling_flags},
    {KILN_CLI_SET, "--render-only", NULL, OPT(render_only), .lo = 1,
     .help = "print the rendered prompt of --messages and exit"},
    {KILN_CLI_STR, "--messages", "FILE", OPT(messages), .path = KILN_CLI_IN_FILE,
     .help = "JSON array of {\"role\", \"content\"}, or an object\n"
             "with it as \"messages\" (a content: a string, or a\n"
             "list of text and image parts): the conversation\n"
             "to render (--render-only) or to go on from (answered first\n"
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
             "\n"
             "Images (a vision-language program, Qwen3-VL): a line \"/image PATH\" (PNG,\n"
             "JPEG or a uint8 .npy) reads and encodes the image at once and attaches it\n"
             "to the next message, ahead of its text (one or more per message); in\n"
             "--messages a content may be a list of parts, {\"type\": \"text\", \"text\"}\n"
             "and {\"type\": \"image\", \"image\": PATH}, rendered in their order. An\n"
             "image is encoded once: later turns reuse its visual tokens and its rows in\n"
             "the cache.\n"
             "\n",
    .notes = "\n"
             "Exit code: 0; 1 when a turn was skipped (the error is on stderr) or on a\n"
             "failure that ends the chat; 2 usage; 130 interrupted.\n"
             "\n"
             "example:\n"
             "  kiln chat -m smollm2.kiln --temp 0 -n 128\n"
             "  printf '/image cat.jpg\\nWhat is this?\\n' | kiln chat -m qwen3vl.kiln\n",
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
                          "llama3.1, llama3.2, llama3.3, qwen3vl, qwen3vl-thinking nor a "
                          "readable file",
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

/* Appends len bytes to the NUL-terminated text *s of *n bytes in a buffer
 * of *cap; 0, or -1 out of memory (the text as it was). */
static int text_append(char **s, size_t *n, size_t *cap, const char *p, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t c = (*n + len + 1) * 2;
        char *t = realloc(*s, c);
        if (!t) return -1;
        *s = t, *cap = c;
    }
    memcpy(*s + *n, p, len);
    *n += len;
    (*s)[*n] = 0;
    return 0;
}

/* ---- images (vision-language programs) ---------------------------------- */

kiln_status kiln_cli_image_placeholder(const kiln_llm *lm, const kiln_tokenizer *tok, char **out) {
    const kiln_llm_vision *v = kiln_llm_get_vision(lm);
    if (!v)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the program has no vision encoder (no method 'encode_image'): it "
                          "takes no images");
    const int32_t tid[3] = {v->vision_start, v->image_token, v->vision_end};
    const char *piece[3];
    size_t len[3], total = 1;
    for (int k = 0; k < 3; k++) {
        piece[k] = kiln_tokenizer_decode(tok, -1, tid[k], &len[k]);
        if (!piece[k] || !len[k])
            return kiln_error(KILN_ERR_FORMAT, "the program's tokenizer has no text for id %d",
                              tid[k]);
        total += len[k];
    }
    char *s = malloc(total);
    if (!s) return kiln_error(KILN_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        memcpy(s + n, piece[k], len[k]);
        n += len[k];
    }
    s[n] = 0;
    *out = s;
    return KILN_OK;
}

kiln_status kiln_cli_images_then_text(const char *placeholder, int n, const char *text,
                                      char **out) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    int oom = 0;
    for (int i = 0; i < n && !oom; i++)
        oom = text_append(&s, &len, &cap, placeholder, strlen(placeholder));
    if (oom || text_append(&s, &len, &cap, text, strlen(text))) {
        free(s);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    *out = s;
    return KILN_OK;
}

kiln_status kiln_cli_image_check(const kiln_llm *lm, const int32_t *ids, int n_ids, int n_imgs) {
    const kiln_llm_vision *v = kiln_llm_get_vision(lm);
    int pads = 0;
    for (int i = 0; v && i < n_ids; i++)
        pads += ids[i] == v->image_token;
    if (pads != n_imgs)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "the prompt holds %d image placeholder%s (image pad, id %d) for %d "
                          "image%s: give one per image, in order",
                          pads, pads == 1 ? "" : "s", v ? v->image_token : -1, n_imgs,
                          n_imgs == 1 ? "" : "s");
    return KILN_OK;
}

kiln_status kiln_cli_image_encode(kiln_session *sess, const kiln_llm *lm, const char *path,
                                  kiln_llm_image **out, char *info, size_t info_size) {
    const kiln_llm_vision *v = kiln_llm_get_vision(lm);
    if (!v)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "image '%s': the program has no vision encoder (no method "
                          "'encode_image')",
                          path);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t *rgb;
    int h, w, gt, gh, gw;
    kiln_status st = kiln_image_load(path, &rgb, &h, &w);
    if (st) return st;
    st = kiln_llm_encode_rgb(sess, lm, rgb, h, w, out);
    kiln_image_free(rgb);
    if (st) return kiln_error_wrap(st, "image '%s'", path);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kiln_llm_image_grid(*out, &gt, &gh, &gw);
    if (info)
        snprintf(info, info_size,
                 "'%s': %d x %d pixels, resized to %d x %d, %d tokens, encoded in %.1f ms", path, w,
                 h, gw * v->patch, gh * v->patch, kiln_llm_image_tokens(*out),
                 (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    return KILN_OK;
}

kiln_status kiln_cli_image_expand(const kiln_llm *lm, int32_t **ids, int *n_ids,
                                  kiln_llm_image *const *imgs, int n_imgs, const int *serial,
                                  int **row_serial) {
    kiln_status st = kiln_cli_image_check(lm, *ids, *n_ids, n_imgs);
    if (st) return st;
    const kiln_llm_vision *v = kiln_llm_get_vision(lm);
    int64_t total = *n_ids - n_imgs; /* one pad per image */
    for (int k = 0; k < n_imgs; k++)
        total += kiln_llm_image_tokens(imgs[k]);
    if (total > INT32_MAX / 2)
        return kiln_error(KILN_ERR_INVALID_ARG, "the prompt with its images is too long");
    int32_t *out = malloc(sizeof *out * (size_t)(total ? total : 1));
    int *rs = row_serial ? calloc((size_t)(total ? total : 1), sizeof *rs) : NULL;
    if (!out || (row_serial && !rs)) {
        free(out);
        free(rs);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    int n = 0, k = 0;
    for (int i = 0; i < *n_ids; i++) {
        if (!v || (*ids)[i] != v->image_token) {
            out[n++] = (*ids)[i];
            continue;
        }
        for (int j = 0; j < kiln_llm_image_tokens(imgs[k]); j++) {
            if (rs) rs[n] = serial ? serial[k] : k + 1;
            out[n++] = v->image_token;
        }
        k++;
    }
    free(*ids);
    *ids = out, *n_ids = n;
    if (row_serial) *row_serial = rs;
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
        if (!r || !c || r->type != KILN_JSON_STRING ||
            (c->type != KILN_JSON_STRING && c->type != KILN_JSON_ARRAY))
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': message %zu needs a string 'role' and a 'content' (a "
                              "string, or a list of text and image parts)",
                              file, i);
        /* The formats take NUL-terminated text: a \u0000 would cut it. */
        const kiln_json *nul = c->type == KILN_JSON_STRING && strlen(c->s) != c->len ? c
                               : strlen(r->s) != r->len                              ? r
                                                                                     : NULL;
        if (nul)
            return kiln_error(KILN_ERR_FORMAT,
                              "'%s': message %zu: its %s holds a NUL byte (\\u0000) at byte %zu, "
                              "which Kiln's chat formats cannot render",
                              file, i, nul == c ? "content" : "role", strlen(nul->s));
    }
    *out = root;
    return KILN_OK;
}

/* The images of one message, in the order its content names them; an
 * image is encoded once (enc), when a render first needs it, and its rows
 * in the cache are known by its serial. */
typedef struct {
    char *path;
    kiln_llm_image *enc;
    int serial;
} chat_image;
typedef struct {
    chat_image *v;
    int n;
} chat_images;

static void images_free(chat_images *im) {
    for (int i = 0; i < im->n; i++) {
        free(im->v[i].path);
        kiln_llm_image_free(im->v[i].enc);
    }
    free(im->v);
    im->v = NULL, im->n = 0;
}

/* Appends an image file (not yet encoded); 0 or -1 out of memory. */
static int images_add(chat_images *im, const char *path, int serial) {
    chat_image *v = realloc(im->v, sizeof *v * (size_t)(im->n + 1));
    if (!v) return -1;
    im->v = v;
    if (!(v[im->n].path = strdup(path))) return -1;
    v[im->n].enc = NULL, v[im->n].serial = serial;
    im->n++;
    return 0;
}

/* A message's content as the formats take it: a string as it is; a list of
 * parts ({"type": "text", "text"}, {"type": "image", "image" | "path" |
 * "url"}, {"type": "image_url", "image_url": {"url"}}, as transformers and
 * OpenAI write them) as its texts with the model's placeholder for each
 * image, in order (what Qwen3-VL's templates render), the images' files
 * into *im. placeholder NULL: the program takes no images. Qwen3-VL
 * Instruct's template renders the images of user messages only: one in
 * another role is an error, not an image dropped. */
static kiln_status message_content(const kiln_json *c, const char *file, size_t i, const char *role,
                                   kiln_chat_format fmt, const char *placeholder, int *serial,
                                   char **out, chat_images *im) {
    if (c->type == KILN_JSON_STRING)
        return (*out = strdup(c->s)) ? KILN_OK : kiln_error(KILN_ERR_NOMEM, "out of memory");
    char *t = NULL;
    size_t len = 0, cap = 0;
    kiln_status st =
        text_append(&t, &len, &cap, "", 0) ? kiln_error(KILN_ERR_NOMEM, "out of memory") : KILN_OK;
    for (size_t k = 0; !st && k < c->len; k++) {
        const kiln_json *part = &c->items[k], *type = kiln_json_get(part, "type");
        const char *ty = type && type->type == KILN_JSON_STRING ? type->s : "";
        const kiln_json *v = NULL;
        if (!strcmp(ty, "text")) {
            v = kiln_json_get(part, "text");
            if (!v || v->type != KILN_JSON_STRING || strlen(v->s) != v->len)
                st = kiln_error(KILN_ERR_FORMAT,
                                "'%s': message %zu part %zu: a text part needs a string "
                                "'text' without NUL bytes",
                                file, i, k);
            else if (text_append(&t, &len, &cap, v->s, v->len))
                st = kiln_error(KILN_ERR_NOMEM, "out of memory");
            continue;
        }
        if (!strcmp(ty, "image"))
            for (int j = 0; j < 3 && !(v && v->type == KILN_JSON_STRING); j++)
                v = kiln_json_get(part, (const char *[]){"image", "path", "url"}[j]);
        else if (!strcmp(ty, "image_url") && (v = kiln_json_get(part, "image_url")))
            v = v->type == KILN_JSON_OBJECT ? kiln_json_get(v, "url") : v;
        else {
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "'%s': message %zu part %zu: type '%.40s': Kiln reads text and "
                            "image parts",
                            file, i, k, ty);
            break;
        }
        const char *path = v && v->type == KILN_JSON_STRING ? v->s : NULL;
        if (!path || !*path)
            st = kiln_error(KILN_ERR_FORMAT,
                            "'%s': message %zu part %zu: an image part needs the image file's "
                            "path ('image', 'path' or 'url')",
                            file, i, k);
        else if (!strncmp(path, "file://", 7))
            path += 7;
        else if (strstr(path, "://") || !strncmp(path, "data:", 5))
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "'%s': message %zu part %zu: image '%.80s': Kiln reads image files "
                            "(a path or file://), not URLs or data URIs",
                            file, i, k, path);
        if (!st && !placeholder)
            st = kiln_error(KILN_ERR_INVALID_ARG,
                            "'%s': message %zu part %zu: an image, and the program has no "
                            "vision encoder (or none was given: -m)",
                            file, i, k);
        if (!st && fmt == KILN_CHAT_QWEN3VL && strcmp(role, "user"))
            st = kiln_error(KILN_ERR_UNSUPPORTED,
                            "'%s': message %zu part %zu: an image in a '%.20s' message; the "
                            "qwen3vl template renders images in user messages only",
                            file, i, k, role);
        if (!st && (text_append(&t, &len, &cap, placeholder, strlen(placeholder)) ||
                    images_add(im, path, ++*serial)))
            st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    if (st)
        free(t);
    else
        *out = t;
    return st;
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

/* The program's image placeholder into *out (free()), or NULL for a
 * program without a vision encoder. */
static kiln_status program_placeholder(const kiln_program *prog, char **out) {
    kiln_llm *lm = NULL;
    kiln_tokenizer *tok = NULL;
    *out = NULL;
    kiln_status st = kiln_llm_bind(prog, &lm);
    if (!st && kiln_llm_get_vision(lm) && !(st = kiln_tokenizer_from_program(prog, &tok)))
        st = kiln_cli_image_placeholder(lm, tok, out);
    kiln_tokenizer_free(tok);
    kiln_llm_free(lm);
    return st;
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
    char *out = NULL, *text = NULL, *ph = NULL;
    size_t len = 0, n = 0;
    kiln_chat_format fmt;
    chat_images im = {0};
    int serial = 0;
    kiln_status st = KILN_OK;
    if (model) st = kiln_program_open(model, &prog);
    if (!st) st = kiln_cli_chat_format(prog, tmpl, &fmt);
    if (!st && prog) st = program_placeholder(prog, &ph);
    const char *fph = st || prog ? NULL : kiln_chat_format_image_placeholder(fmt);
    if (fph && !(ph = strdup(fph))) st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    if (!st) st = load_messages(messages, &text, &doc, &list);
    if (!st && !(m = calloc(list->len + 1, sizeof *m)))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (; !st && n < list->len; n++) {
        char *content = NULL;
        m[n].role = kiln_json_get(&list->items[n], "role")->s;
        st = message_content(kiln_json_get(&list->items[n], "content"), messages, n, m[n].role, fmt,
                             ph, &serial, &content, &im);
        m[n].content = content;
    }
    if (!st) st = kiln_chat_render_with(fmt, m, (int)list->len, co, &out, &len);
    int rc = st ? kiln_cli_fail(cmd, st) : KILN_EXIT_OK;
    if (!st) fwrite(out, 1, len, stdout);
    kiln_chat_free(out);
    for (size_t i = 0; m && i < n; i++)
        free((char *)m[i].content);
    free(m);
    images_free(&im);
    free(ph);
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
    text_append(&a->text, &a->n, &a->cap, s, len); /* out of memory: the text is cut */
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

/* A conversation: the program, its session, the messages so far (each with
 * its images) and the ids its KV cache holds. */
typedef struct {
    kiln_program *prog;
    kiln_session *sess;
    kiln_tokenizer *tok;
    kiln_llm *lm;
    kiln_chat_format fmt;
    kiln_chat_options co;
    kiln_generate_options gen;
    kiln_chat_message *conv; /* each message owns its role and content */
    chat_images *imgs;       /* conv[i]'s images */
    int n_conv, cap_conv;
    char *placeholder;   /* the program's image placeholder; NULL: it takes no images */
    chat_images pending; /* /image lines for the next user message */
    int serial;          /* the last image serial given */
    int32_t *past;       /* the ids the cache holds, positions 0..n_past */
    int *past_serial;    /* per cached row: its image's serial, 0 for text */
    int n_past, ctx, turn;
    int delta;   /* the rope delta after the cached rows (an image moves it) */
    int reserve; /* the room for an answer a turn's render must leave, else old turns go */
    int skipped; /* turns refused (an error on stderr; the exit code is 1) */
    answer ans;
} conversation;

/* Appends a copy of a message with the images *im (moved: *im is emptied);
 * 0, or -1 when out of memory. */
static int conv_push_images(conversation *c, const char *role, const char *content,
                            chat_images *im) {
    if (c->n_conv == c->cap_conv) {
        int cap = c->cap_conv ? 2 * c->cap_conv : 16;
        kiln_chat_message *m = realloc(c->conv, sizeof *m * (size_t)cap);
        if (!m) return -1;
        c->conv = m;
        chat_images *v = realloc(c->imgs, sizeof *v * (size_t)cap);
        if (!v) return -1;
        c->imgs = v;
        c->cap_conv = cap;
    }
    char *r = strdup(role), *t = strdup(content);
    if (!r || !t) {
        free(r);
        free(t);
        return -1;
    }
    c->imgs[c->n_conv] = im ? *im : (chat_images){0};
    if (im) *im = (chat_images){0};
    c->conv[c->n_conv++] = (kiln_chat_message){r, t};
    return 0;
}

static int conv_push(conversation *c, const char *role, const char *content) {
    return conv_push_images(c, role, content, NULL);
}

/* Removes the messages [from, to). */
static void conv_drop(conversation *c, int from, int to) {
    for (int i = from; i < to; i++) {
        free((char *)c->conv[i].role);
        free((char *)c->conv[i].content);
        images_free(&c->imgs[i]);
    }
    if (c->n_conv > to) { /* conv is NULL while empty */
        memmove(c->conv + from, c->conv + to, sizeof *c->conv * (size_t)(c->n_conv - to));
        memmove(c->imgs + from, c->imgs + to, sizeof *c->imgs * (size_t)(c->n_conv - to));
    }
    c->n_conv -= to - from;
}

/* A render as the cache takes it: its ids with each image's run of pads,
 * per row the image's serial (0: text), and the images in order. */
typedef struct {
    int32_t *ids;
    int *serial;
    int n;
    kiln_llm_image **imgs;
    int n_imgs;
} rendered;

static void rendered_free(rendered *r) {
    free(r->ids);
    free(r->serial);
    free(r->imgs);
    memset(r, 0, sizeof *r);
}

/* Encodes an image the first time it is needed (said on stderr, with
 * `note` after). */
static kiln_status image_ready(conversation *c, chat_image *im, const char *note) {
    if (im->enc) return KILN_OK;
    char info[512];
    kiln_status st = kiln_cli_image_encode(c->sess, c->lm, im->path, &im->enc, info, sizeof info);
    if (!st) fprintf(stderr, "kiln chat: image %s%s\n", info, note);
    return st;
}

/* The messages conv[0] (when head) and conv[from..n_conv) rendered with the
 * assistant's generation prompt, as the cache takes them (*r). */
static kiln_status render_ids(conversation *c, int head, int from, rendered *r) {
    memset(r, 0, sizeof *r);
    int n = (head ? 1 : 0) + c->n_conv - from, n_imgs = 0, k = 0;
    kiln_chat_message *m = malloc(sizeof *m * (size_t)(n ? n : 1));
    int *which = malloc(sizeof *which * (size_t)(n ? n : 1)); /* indices into c->conv */
    if (!m || !which) {
        free(m);
        free(which);
        return kiln_error(KILN_ERR_NOMEM, "out of memory");
    }
    if (head) which[k++] = 0;
    for (int i = from; i < c->n_conv; i++)
        which[k++] = i;
    for (int j = 0; j < n; j++) {
        m[j] = c->conv[which[j]];
        n_imgs += c->imgs[which[j]].n;
    }
    int *serial = malloc(sizeof *serial * (size_t)(n_imgs ? n_imgs : 1));
    kiln_status st = KILN_OK;
    if (!serial || !(r->imgs = malloc(sizeof *r->imgs * (size_t)(n_imgs ? n_imgs : 1))))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    for (int j = 0; !st && j < n; j++) {
        chat_images *im = &c->imgs[which[j]];
        for (int q = 0; !st && q < im->n; q++) {
            st = image_ready(c, &im->v[q], "");
            serial[r->n_imgs] = im->v[q].serial;
            r->imgs[r->n_imgs++] = im->v[q].enc;
        }
    }
    free(which);
    char *text = NULL;
    size_t len;
    kiln_chat_options co = c->co;
    co.add_generation_prompt = 1;
    if (!st) st = kiln_chat_render_with(c->fmt, m, n, &co, &text, &len);
    if (!st) st = kiln_cli_chat_encode(c->tok, text, len, &r->ids, &r->n);
    kiln_chat_free(text);
    free(m);
    if (!st && c->placeholder)
        st = kiln_cli_image_expand(c->lm, &r->ids, &r->n, r->imgs, r->n_imgs, serial, &r->serial);
    else if (!st && !(r->serial = calloc((size_t)(r->n ? r->n : 1), sizeof *r->serial)))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    free(serial);
    if (st) rendered_free(r);
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
    for (size_t i = 0; !st && !rc && i < list->len; i++) {
        char *content = NULL;
        chat_images im = {0};
        st = message_content(kiln_json_get(&list->items[i], "content"), opt->messages, i,
                             kiln_json_get(&list->items[i], "role")->s, c->fmt, c->placeholder,
                             &c->serial, &content, &im);
        for (int k = 0; !st && k < im.n; k++) /* a bad image is said now */
            if ((st = image_ready(c, &im.v[k], "")))
                st = kiln_error_wrap(st, "'%s': message %zu", opt->messages, i);
        if (!st && conv_push_images(c, kiln_json_get(&list->items[i], "role")->s, content, &im))
            st = kiln_error(KILN_ERR_NOMEM, "out of memory");
        images_free(&im);
        free(content);
    }
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
    kiln_status st = kiln_program_open_with(opt->model, &opt->smp.open, &c->prog);
    if (!st) st = kiln_tokenizer_from_program(c->prog, &c->tok);
    if (!st) st = kiln_cli_chat_format(c->prog, opt->chat_template, &c->fmt);
    if (!st) st = kiln_llm_bind(c->prog, &c->lm);
    if (!st && kiln_llm_get_vision(c->lm))
        st = kiln_cli_image_placeholder(c->lm, c->tok, &c->placeholder);
    if (!st) st = kiln_session_create(c->prog, &c->sess);
    if (!st) st = kiln_detokenizer_create(c->tok, &c->ans.detok);
    if (st) return kiln_cli_fail(cmd, st);
    if (opt->messages && (rc = load_history(c, opt))) return rc;
    if (c->n_conv) { /* a role the format does not render is refused now */
        char *text = NULL;
        st = kiln_chat_render_with(c->fmt, c->conv, c->n_conv, &c->co, &text, NULL);
        kiln_chat_free(text);
    }
    if (st) return kiln_cli_fail(cmd, st);
    c->ctx = kiln_llm_get_limits(c->lm)->context;
    if (!(c->past = malloc(sizeof *c->past * (size_t)c->ctx)) ||
        !(c->past_serial = malloc(sizeof *c->past_serial * (size_t)c->ctx)) ||
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
    free(c->imgs);
    images_free(&c->pending);
    free(c->placeholder);
    free(c->past);
    free(c->past_serial);
    free(c->ans.ids);
    free(c->ans.text);
    kiln_detokenizer_free(c->ans.detok);
    kiln_tokenizer_free(c->tok);
    kiln_session_destroy(c->sess);
    kiln_llm_free(c->lm);
    kiln_program_close(c->prog);
}

/* Fits the turn that starts at message `cur` (the last user message) into
 * the context: *r receives its render. 0 when it fits, the oldest turns
 * dropped first (whole turns: a user message and what follows it up to the
 * next; a first system message stays) while the render leaves less than
 * c->reserve for the answer; -1 when the turn does not fit even alone (an
 * error on stderr; its messages are removed); or an exit code. */
static int fit_turn(conversation *c, int cur, rendered *r) {
    const char *cmd = COMMAND.name;
    kiln_status st = render_ids(c, 0, 0, r);
    int n_alone = r->n, head = c->n_conv > 0 && !strcmp(c->conv[0].role, "system");
    if (!st && r->n + c->reserve > c->ctx && cur > head) {
        /* The turn alone: the first system message (if any), the turn's
         * messages and the generation prompt. */
        rendered alone;
        if (!(st = render_ids(c, head, cur, &alone))) n_alone = alone.n;
        rendered_free(&alone);
    }
    if (st) {
        fprintf(stderr, "kiln chat: error: turn %d: %s; turn skipped\n", c->turn,
                kiln_last_error());
        conv_drop(c, cur, c->n_conv);
        c->skipped++;
        return -1;
    }
    if (n_alone >= c->ctx) {
        fprintf(stderr,
                "kiln chat: error: turn %d: it takes %d tokens alone (with the system message "
                "and the assistant's prompt), the context holds %d: no room for an answer; "
                "turn skipped\n",
                c->turn, n_alone, c->ctx);
        conv_drop(c, cur, c->n_conv);
        rendered_free(r);
        c->skipped++;
        return -1;
    }
    int before = r->n, turns = 0, msgs = 0;
    while (r->n + c->reserve > c->ctx && head < cur) {
        int next = head + 1;
        while (next < cur && strcmp(c->conv[next].role, "user"))
            next++;
        conv_drop(c, head, next);
        turns++;
        msgs += next - head;
        cur -= next - head;
        rendered_free(r);
        if ((st = render_ids(c, 0, 0, r))) return kiln_cli_fail(cmd, st);
    }
    if (turns)
        fprintf(stderr,
                "kiln chat: turn %d: context full: dropped the oldest %d turn%s (%d messages), "
                "%d tokens freed (the conversation now takes %d of %d)\n",
                c->turn, turns, turns == 1 ? "" : "s", msgs, before - r->n, r->n, c->ctx);
    return 0;
}

/* One turn: the conversation so far (its last user message and what follows
 * already in c->conv) fitted into the context, rendered, the ids the cache
 * does not hold prefilled, the answer streamed and added. 0 (also for a
 * turn refused: c->skipped counts it), or the exit code. */
static int conversation_turn(conversation *c) {
    const char *cmd = COMMAND.name;
    rendered r;
    int turn = ++c->turn, cur = c->n_conv - 1;
    while (cur > 0 && strcmp(c->conv[cur].role, "user"))
        cur--;
    int rc = fit_turn(c, cur, &r);
    if (rc) return rc < 0 ? 0 : rc;
    /* Keep the longest cached prefix the new render shares (as llama.cpp's
     * server does): the cache's rows past it are overwritten by this
     * prefill and never read before (attention at position p reads rows
     * 0..p). At least one id is prefilled, for the logits. After old turns
     * were dropped this is where the render first changed. An image's rows
     * match by its serial, not its ids (every pad is the same id); an image
     * in the cached rows past the prefix moved the rope positions after it
     * by an amount those rows alone record, so then the turn starts again
     * from row 0 (the images stay encoded). */
    int start = 0;
    while (start < c->n_past && start < r.n - 1 && c->past[start] == r.ids[start] &&
           c->past_serial[start] == r.serial[start])
        start++;
    for (int i = start; i < c->n_past && start; i++)
        if (c->past_serial[i]) start = 0;
    if (start && r.serial[start] && r.serial[start - 1] == r.serial[start]) start = 0;
    if (start < c->n_past)
        fprintf(stderr,
                "kiln chat: turn %d: reusing %d of %d cached tokens (the conversation's tokens "
                "changed after them)\n",
                turn, start, c->n_past);
    int skip = 0; /* the images wholly in the rows kept */
    for (int i = 0; i < start; i++)
        skip += r.serial[i] && (i == 0 || r.serial[i - 1] != r.serial[i]);
    memcpy(c->past, r.ids, sizeof *r.ids * (size_t)r.n);
    memcpy(c->past_serial, r.serial, sizeof *r.serial * (size_t)r.n);
    c->ans.n = 0;
    c->ans.n_ids = 0;
    if (c->ans.text) c->ans.text[0] = 0;
    kiln_generate_result res;
    int delta = start ? c->delta : 0;
    kiln_status st = kiln_generate_images(c->sess, r.ids + start, r.n - start, start, r.imgs + skip,
                                          r.n_imgs - skip, &delta, &c->gen, &res);
    int n_ids = r.n;
    rendered_free(&r);
    if (st) {
        fflush(stdout);
        c->n_past = 0; /* what the cache holds is not known now */
        return kiln_cli_fail(cmd, st);
    }
    c->delta = delta;
    size_t fl;
    const char *rest = kiln_detokenizer_flush(c->ans.detok, &fl);
    answer_put(&c->ans, rest, fl);
    fputc('\n', stdout);
    fflush(stdout);
    /* The cache now holds the prompt and the generated ids that went
     * through decode. */
    memcpy(c->past + n_ids, c->ans.ids, sizeof *c->past * (size_t)(res.n_past - n_ids));
    memset(c->past_serial + n_ids, 0, sizeof *c->past_serial * (size_t)(res.n_past - n_ids));
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

/* A line "/image PATH": the image is read and encoded now and goes with the
 * next user message. */
static void attach_image(conversation *c, const char *path) {
    while (*path == ' ' || *path == '\t')
        path++;
    kiln_status st = KILN_OK;
    if (!*path)
        st = kiln_error(KILN_ERR_INVALID_ARG, "/image needs a file: /image PATH");
    else if (!c->placeholder)
        st = kiln_error(KILN_ERR_INVALID_ARG,
                        "/image: the program has no vision encoder (no method 'encode_image')");
    else if (images_add(&c->pending, path, c->serial + 1))
        st = kiln_error(KILN_ERR_NOMEM, "out of memory");
    else if ((st = image_ready(c, &c->pending.v[c->pending.n - 1],
                               "; it goes with the next message")))
        free(c->pending.v[--c->pending.n].path);
    else
        c->serial++;
    if (st) {
        fprintf(stderr, "kiln chat: error: %s\n", kiln_last_error());
        c->skipped++;
    }
}

/* A user line with the pending images before its text, as Qwen3-VL's
 * template renders images then text; 0 or -1 out of memory. */
static int push_user(conversation *c, const char *line) {
    char *t = NULL; /* pending images imply a placeholder */
    if (kiln_cli_images_then_text(c->placeholder ? c->placeholder : "", c->pending.n, line, &t))
        return -1;
    int rc = conv_push_images(c, "user", t, &c->pending);
    free(t);
    return rc;
}

/* Reads the user's lines from stdin, one turn each (a line "/image PATH"
 * attaches an image to the next); the exit code. */
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
        if (!strncmp(line, "/image", 6) && (!line[6] || line[6] == ' ' || line[6] == '\t')) {
            attach_image(c, line + 6);
            continue;
        }
        if (push_user(c, line)) {
            rc = kiln_cli_fail(cmd, kiln_error(KILN_ERR_NOMEM, "out of memory"));
            break;
        }
        if ((rc = conversation_turn(c)) || kiln_cli_interrupted) break;
    }
    if (!rc && c->pending.n) {
        fprintf(stderr,
                "kiln chat: error: %d image%s given with /image, and no message followed: not "
                "used\n",
                c->pending.n, c->pending.n == 1 ? "" : "s");
        c->skipped++;
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
