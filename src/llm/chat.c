/* chat.c: chat formats written in C. Each renderer reproduces, byte for
 * byte, what the checkpoint's Jinja chat template renders for plain
 * system/user/assistant conversations (no tools); detection picks the
 * family from distinctive text in the stored template. */
#include <string.h>

#include "base/base.h"
#include "llm/chat.h"

void kiln_chat_buf_put(kiln_chat_buf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (len == (size_t)-1) len = strlen(s);
    if (b->n + len + 1 > b->cap) {
        size_t cap = (b->n + len + 1) * 2 + 256;
        char *p = kiln_realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, len);
    b->n += len;
    b->s[b->n] = 0;
}

static void put(kiln_chat_buf *b, const char *s) { kiln_chat_buf_put(b, s, (size_t)-1); }

/* ---- names and detection --------------------------------------------------- */

static const struct {
    const char *name;
    kiln_chat_format format;
} g_names[] = {
    {"chatml", KILN_CHAT_CHATML},
    {"smollm2", KILN_CHAT_SMOLLM2},
    {"qwen3", KILN_CHAT_QWEN3},
    {"llama3", KILN_CHAT_LLAMA3},
};

const char *kiln_chat_format_name(kiln_chat_format f) {
    for (size_t i = 0; i < sizeof g_names / sizeof *g_names; i++)
        if (g_names[i].format == f) return g_names[i].name;
    return "none";
}

kiln_status kiln_chat_format_from_name(const char *name, kiln_chat_format *out) {
    for (size_t i = 0; i < sizeof g_names / sizeof *g_names; i++)
        if (!strcmp(g_names[i].name, name)) {
            *out = g_names[i].format;
            return KILN_OK;
        }
    return kiln_error(KILN_ERR_INVALID_ARG, "unknown chat format '%s' (known: chatml, smollm2, qwen3, llama3)",
                      name);
}

kiln_status kiln_chat_format_detect(const char *tmpl, kiln_chat_format *out) {
    *out = KILN_CHAT_NONE;
    if (!tmpl || !*tmpl) return kiln_error(KILN_ERR_UNSUPPORTED, "no chat template to detect a format from");
    int im = strstr(tmpl, "<|im_start|>") != NULL;
    int hdr = strstr(tmpl, "<|start_header_id|>") != NULL;
    if (im && strstr(tmpl, "named SmolLM")) *out = KILN_CHAT_SMOLLM2;
    else if (im && strstr(tmpl, "enable_thinking") && strstr(tmpl, "</think>")) *out = KILN_CHAT_QWEN3;
    else if (hdr && strstr(tmpl, "<|eot_id|>")) {
        /* Llama-3.1 and later add a dated system preamble and tool blocks. */
        if (strstr(tmpl, "Cutting Knowledge Date"))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "chat template: Llama-3 header format with the Llama-3.1+ 'Cutting Knowledge "
                              "Date' system preamble, which Kiln does not render");
        *out = KILN_CHAT_LLAMA3;
    } else if (im && !strstr(tmpl, "You are") && !strstr(tmpl, "<think>")) *out = KILN_CHAT_CHATML;
    if (*out != KILN_CHAT_NONE) return KILN_OK;
    char head[61];
    size_t n = strlen(tmpl) < 60 ? strlen(tmpl) : 60;
    memcpy(head, tmpl, n);
    head[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (head[i] == '\n' || head[i] == '\r') head[i] = ' ';
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "chat template not recognised (%s%s%s; %zu bytes, starting '%s'): Kiln renders "
                      "chatml, smollm2, qwen3 and llama3; pick one with --chat-template NAME",
                      im ? "ChatML markers <|im_start|>" : "no ChatML markers",
                      hdr ? ", Llama-3 headers <|start_header_id|>" : "",
                      im && strstr(tmpl, "You are") ? ", a default system message" : "", strlen(tmpl), head);
}

kiln_status kiln_chat_format_from_program(const kiln_program *p, kiln_chat_format *out) {
    const char *t = kiln_program_meta_str(p, "tokenizer.chat_template");
    *out = KILN_CHAT_NONE;
    if (!t)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "the program stores no chat template (metadata 'tokenizer.chat_template'); "
                          "give one with --chat-template NAME|FILE");
    return kiln_chat_format_detect(t, out);
}

/* ---- renderers ----------------------------------------------------------- */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Plain ChatML: "<|im_start|>role\ncontent<|im_end|>\n" per message. SmolLM2
 * first adds its default system message when the first is not system. */
static void render_chatml(kiln_chat_buf *b, const kiln_chat_message *m, int n, int smollm) {
    for (int i = 0; i < n; i++) {
        if (smollm && i == 0 && strcmp(m[0].role, "system"))
            put(b, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                   "Face<|im_end|>\n");
        put(b, "<|im_start|>");
        put(b, m[i].role);
        put(b, "\n");
        put(b, m[i].content);
        put(b, "<|im_end|>\n");
    }
}

/* Qwen3 (no tools): a first system message leads; assistant messages lose
 * their <think>...</think> part, except those after the last user message,
 * which keep it as a normalised <think> block (the last one always). */
static void render_qwen3(kiln_chat_buf *b, const kiln_chat_message *m, int n) {
    if (n > 0 && !strcmp(m[0].role, "system")) {
        put(b, "<|im_start|>system\n");
        put(b, m[0].content);
        put(b, "<|im_end|>\n");
    }
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user")) {
            const char *c = m[i].content;
            size_t l = strlen(c);
            int tool_resp = l >= 15 && !strncmp(c, "<tool_response>", 15) && l >= 16 &&
                            !strcmp(c + l - 16, "</tool_response>");
            if (!tool_resp) {
                last_query = i;
                break;
            }
        }
    for (int i = 0; i < n; i++) {
        const char *role = m[i].role, *c = m[i].content;
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            put(b, "<|im_start|>");
            put(b, role);
            put(b, "\n");
            put(b, c);
            put(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            /* content = after the last </think>, lstrip('\n'); reasoning =
             * before the first </think>, rstrip('\n'), after the last
             * <think>, lstrip('\n'). */
            const char *content = c, *r0 = "", *r1 = r0;
            const char *close = strstr(c, "</think>");
            if (close) {
                const char *last = close, *q;
                while ((q = strstr(last + 1, "</think>"))) last = q;
                content = last + 8;
                while (*content == '\n') content++;
                r0 = c;
                r1 = close;
                while (r1 > r0 && r1[-1] == '\n') r1--;
                for (const char *p = r0; p + 7 <= r1; p++)
                    if (!strncmp(p, "<think>", 7)) r0 = p + 7, p += 6;
                while (r0 < r1 && *r0 == '\n') r0++;
            }
            if (i > last_query && (i == n - 1 || r1 > r0)) {
                while (r0 < r1 && *r0 == '\n') r0++; /* strip('\n') */
                while (r1 > r0 && r1[-1] == '\n') r1--;
                put(b, "<|im_start|>assistant\n<think>\n");
                kiln_chat_buf_put(b, r0, (size_t)(r1 - r0));
                put(b, "\n</think>\n\n");
                while (*content == '\n') content++;
                put(b, content);
            } else {
                put(b, "<|im_start|>assistant\n");
                put(b, content);
            }
            put(b, "<|im_end|>\n");
        }
    }
}

/* Llama-3: BOS, then per message a header, the trimmed content and
 * <|eot_id|>. The template adds the assistant header whatever
 * add_generation_prompt says. */
static void render_llama3(kiln_chat_buf *b, const kiln_chat_message *m, int n) {
    for (int i = 0; i < n; i++) {
        if (i == 0) put(b, "<|begin_of_text|>");
        put(b, "<|start_header_id|>");
        put(b, m[i].role);
        put(b, "<|end_header_id|>\n\n");
        const char *s = m[i].content, *e = s + strlen(s);
        while (s < e && is_ws(*s)) s++;
        while (e > s && is_ws(e[-1])) e--;
        kiln_chat_buf_put(b, s, (size_t)(e - s));
        put(b, "<|eot_id|>");
    }
    put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

kiln_status kiln_chat_render(kiln_chat_format f, const kiln_chat_message *m, int n, int add_generation_prompt,
                             int enable_thinking, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    if (n < 0 || (n > 0 && !m)) return kiln_error(KILN_ERR_INVALID_ARG, "chat: %d messages", n);
    for (int i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return kiln_error(KILN_ERR_INVALID_ARG, "chat message %d has no %s", i, m[i].role ? "content" : "role");
        if (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") && strcmp(m[i].role, "assistant"))
            return kiln_error(KILN_ERR_UNSUPPORTED, "chat message %d: role '%s' (Kiln renders system, user, assistant)",
                              i, m[i].role);
    }
    kiln_chat_buf b = {0};
    switch (f) {
    case KILN_CHAT_CHATML:
    case KILN_CHAT_SMOLLM2:
        render_chatml(&b, m, n, f == KILN_CHAT_SMOLLM2);
        if (add_generation_prompt) put(&b, "<|im_start|>assistant\n");
        break;
    case KILN_CHAT_QWEN3:
        render_qwen3(&b, m, n);
        if (add_generation_prompt) {
            put(&b, "<|im_start|>assistant\n");
            if (!enable_thinking) put(&b, "<think>\n\n</think>\n\n");
        }
        break;
    case KILN_CHAT_LLAMA3: render_llama3(&b, m, n); break;
    default: return kiln_error(KILN_ERR_INVALID_ARG, "chat: unknown format %d", (int)f);
    }
    put(&b, ""); /* an empty conversation still gets a string */
    if (b.oom) {
        kiln_free(b.s);
        return kiln_error(KILN_ERR_NOMEM, "out of memory rendering a chat");
    }
    *out = b.s;
    if (len) *len = b.n;
    return KILN_OK;
}

void kiln_chat_free(char *s) { kiln_free(s); }
