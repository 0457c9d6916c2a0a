/* chat.c: chat formats written in C. Each renderer reproduces, byte for
 * byte, what the checkpoint's Jinja chat template renders (as transformers'
 * apply_chat_template runs it) for system/user/assistant conversations, and
 * Llama-3.1+'s tool results; detection picks the family from distinctive
 * text in the stored template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static void put(kiln_chat_buf *b, const char *s) {
    kiln_chat_buf_put(b, s, (size_t)-1);
}

/* ---- names and detection --------------------------------------------------- */

static const struct {
    const char *name;
    kiln_chat_format format;
} g_names[] = {
    {"chatml", KILN_CHAT_CHATML},    {"smollm2", KILN_CHAT_SMOLLM2},
    {"qwen3", KILN_CHAT_QWEN3},      {"llama3", KILN_CHAT_LLAMA3},
    {"llama3.1", KILN_CHAT_LLAMA31}, {"llama3.2", KILN_CHAT_LLAMA32},
    {"llama3.3", KILN_CHAT_LLAMA31}, /* 3.3's template is 3.1's */
    {"qwen3vl", KILN_CHAT_QWEN3VL},  {"qwen3vl-thinking", KILN_CHAT_QWEN3VL_THINKING},
};

const char *kiln_chat_format_name(kiln_chat_format f) {
    for (size_t i = 0; i < sizeof g_names / sizeof *g_names; i++)
        if (g_names[i].format == f) return g_names[i].name;
    return "none";
}

const char *kiln_chat_format_image_placeholder(kiln_chat_format f) {
    return f == KILN_CHAT_QWEN3VL || f == KILN_CHAT_QWEN3VL_THINKING
               ? "<|vision_start|><|image_pad|><|vision_end|>"
               : NULL;
}

kiln_status kiln_chat_format_from_name(const char *name, kiln_chat_format *out) {
    for (size_t i = 0; i < sizeof g_names / sizeof *g_names; i++)
        if (!strcmp(g_names[i].name, name)) {
            *out = g_names[i].format;
            return KILN_OK;
        }
    return kiln_error(KILN_ERR_INVALID_ARG,
                      "unknown chat format '%s' (known: chatml, smollm2, qwen3, llama3, llama3.1, "
                      "llama3.2, llama3.3, qwen3vl, qwen3vl-thinking)",
                      name);
}

kiln_status kiln_chat_format_detect(const char *tmpl, kiln_chat_format *out) {
    *out = KILN_CHAT_NONE;
    if (!tmpl || !*tmpl)
        return kiln_error(KILN_ERR_UNSUPPORTED, "no chat template to detect a format from");
    int im = strstr(tmpl, "<|im_start|>") != NULL;
    int hdr = strstr(tmpl, "<|start_header_id|>") != NULL;
    /* Near relatives render differently and must not match: SmolLM3 (has
     * SmolLM2's default system message and enable_thinking), Qwen3.5 (opens
     * the generation prompt with "<think>\n"), QwQ and Nemotron (no Qwen3
     * tool loop), functionary and firefunction (Llama-3 headers with
     * functions). */
    int thinking = strstr(tmpl, "enable_thinking") != NULL;
    /* Qwen3-VL: the image placeholder written into the template. The
     * Thinking template renders parts through its render_content macro
     * (Qwen3.5's takes a third argument) and always opens a <think> block;
     * the Instruct one loops over parts per role and has no default system
     * message (Qwen2-VL's and Qwen2.5-VL's have one) and no <think>. */
    int vl = im && strstr(tmpl, "<|vision_start|><|image_pad|><|vision_end|>") &&
             strstr(tmpl, "image_count = namespace(value=0)");
    if (vl && strstr(tmpl, "macro render_content(content, do_vision_count)") &&
        strstr(tmpl, "multi_step_tool") &&
        strstr(tmpl, "'<|im_start|>assistant\\n<think>\\n' }}") && !thinking)
        *out = KILN_CHAT_QWEN3VL_THINKING;
    else if (vl && strstr(tmpl, "for content_item in message.content") &&
             !strstr(tmpl, "render_content") && !strstr(tmpl, "<think>") &&
             !strstr(tmpl, "You are a helpful assistant"))
        *out = KILN_CHAT_QWEN3VL;
    else if (im &&
             strstr(tmpl, "You are a helpful AI assistant named SmolLM, trained by Hugging Face") &&
             !thinking)
        *out = KILN_CHAT_SMOLLM2;
    else if (im && thinking && strstr(tmpl, "</think>") && strstr(tmpl, "multi_step_tool") &&
             !strstr(tmpl, "'<think>\\n' }}"))
        *out = KILN_CHAT_QWEN3;
    else if (hdr && strstr(tmpl, "<|eot_id|>") &&
             (strstr(tmpl, "function") || strstr(tmpl, "builtin_tools")) &&
             !strstr(tmpl, "Cutting Knowledge Date"))
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "chat template: Llama-3 headers with function-calling blocks "
                          "(functionary, firefunction?), which Kiln does not render");
    else if (hdr && strstr(tmpl, "<|eot_id|>")) {
        /* Meta's Llama-3.1+ templates always open with a dated system
         * block; 3.2's date is today's (strftime_now), 3.1's and 3.3's a
         * fixed one. Others with the preamble (functionary's) differ. */
        if (strstr(tmpl, "Cutting Knowledge Date")) {
            if (!strstr(tmpl, "Cutting Knowledge Date: December 2023") ||
                !strstr(tmpl, "\"Today Date: \" + date_string") || !strstr(tmpl, "ipython"))
                return kiln_error(
                    KILN_ERR_UNSUPPORTED,
                    "chat template: Llama-3 headers with a 'Cutting Knowledge Date' preamble, but "
                    "not Meta's Llama-3.1/3.2/3.3 template (no \"Today Date: \" + date_string); "
                    "Kiln does not render it");
            *out = strstr(tmpl, "strftime_now") ? KILN_CHAT_LLAMA32 : KILN_CHAT_LLAMA31;
        } else {
            *out = KILN_CHAT_LLAMA3;
        }
    } else if (im && !strstr(tmpl, "You are") && !strstr(tmpl, "<think>"))
        *out = KILN_CHAT_CHATML;
    if (*out != KILN_CHAT_NONE) return KILN_OK;
    char head[61];
    size_t n = strlen(tmpl) < 60 ? strlen(tmpl) : 60;
    memcpy(head, tmpl, n);
    head[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (head[i] == '\n' || head[i] == '\r') head[i] = ' ';
    return kiln_error(
        KILN_ERR_UNSUPPORTED,
        "chat template not recognised (%s%s%s; %zu bytes, starting '%s'): Kiln renders "
        "chatml, smollm2, qwen3, llama3, llama3.1/3.2 and qwen3vl(-thinking); pick one with "
        "--chat-template NAME",
        im ? "ChatML markers <|im_start|>" : "no ChatML markers",
        hdr ? ", Llama-3 headers <|start_header_id|>" : "",
        im && strstr(tmpl, "You are") ? ", a default system message" : "", strlen(tmpl), head);
}

kiln_status kiln_chat_format_from_program(const kiln_program *p, kiln_chat_format *out) {
    const char *t = kiln_program_meta_str(p, "tokenizer.chat_template");
    *out = KILN_CHAT_NONE;
    if (!t)
        return kiln_error(
            KILN_ERR_UNSUPPORTED,
            "the program stores no chat template (metadata 'tokenizer.chat_template'); "
            "give one with --chat-template NAME|FILE");
    return kiln_chat_format_detect(t, out);
}

/* ---- renderers ----------------------------------------------------------- */

/* Length of the whitespace character Python's str.isspace() accepts at s
 * (Jinja's trim is str.strip()), 0 when there is none. */
static size_t ws_len(const unsigned char *s, const unsigned char *end) {
    size_t left = (size_t)(end - s);
    if (!left) return 0;
    if ((*s >= 0x09 && *s <= 0x0d) || (*s >= 0x1c && *s <= 0x20)) return 1;
    if (left >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2; /* U+0085, U+00A0 */
    if (left < 3) return 0;
    unsigned c = (unsigned)s[0] << 16 | (unsigned)s[1] << 8 | s[2];
    if (c == 0xe19a80 || c == 0xe38080) return 3;                  /* U+1680, U+3000 */
    if (c >= 0xe28080 && c <= 0xe2808a) return 3;                  /* U+2000..U+200A */
    if (c == 0xe280a8 || c == 0xe280a9 || c == 0xe280af) return 3; /* U+2028, U+2029, U+202F */
    if (c == 0xe2819f) return 3;                                   /* U+205F */
    return 0;
}

/* The whitespace character ending just before e, 0 when none. */
static size_t ws_len_back(const unsigned char *s, const unsigned char *e) {
    for (size_t k = 1; k <= 3 && (size_t)(e - s) >= k; k++)
        if (ws_len(e - k, e) == k) return k;
    return 0;
}

/* Appends s as Jinja's `s | trim` gives it. */
static void put_trimmed(kiln_chat_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s, *e = p + strlen(s);
    size_t k;
    while ((k = ws_len(p, e)))
        p += k;
    while (e > p && (k = ws_len_back(p, e)))
        e -= k;
    kiln_chat_buf_put(b, (const char *)p, (size_t)(e - p));
}

/* Appends s as a JSON string the way transformers' tojson filter writes it
 * (json.dumps, ensure_ascii=False): quotes, backslash and control
 * characters escaped, everything else as it is. */
static void put_json_string(kiln_chat_buf *b, const char *s) {
    put(b, "\"");
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        kiln_chat_buf_put(b, run, (size_t)(s - run));
        if (!c) break;
        char esc[8];
        switch (c) {
        case '"':
            put(b, "\\\"");
            break;
        case '\\':
            put(b, "\\\\");
            break;
        case '\n':
            put(b, "\\n");
            break;
        case '\r':
            put(b, "\\r");
            break;
        case '\t':
            put(b, "\\t");
            break;
        case '\b':
            put(b, "\\b");
            break;
        case '\f':
            put(b, "\\f");
            break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(b, esc);
        }
        run = s + 1;
    }
    put(b, "\"");
}

/* Plain ChatML: "<|im_start|>role\ncontent<|im_end|>\n" per message. SmolLM2
 * first adds its default system message when the first is not system. */
static void render_chatml(kiln_chat_buf *b, const kiln_chat_message *m, int n, int smollm) {
    for (int i = 0; i < n; i++) {
        if (smollm && i == 0 && strcmp(m[0].role, "system"))
            put(b, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                   "Hugging "
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
                while ((q = strstr(last + 1, "</think>")))
                    last = q;
                content = last + 8;
                while (*content == '\n')
                    content++;
                r0 = c;
                r1 = close;
                while (r1 > r0 && r1[-1] == '\n')
                    r1--;
                for (const char *p = r0; p + 7 <= r1; p++)
                    if (!strncmp(p, "<think>", 7)) r0 = p + 7, p += 6;
                while (r0 < r1 && *r0 == '\n')
                    r0++;
            }
            if (i > last_query && (i == n - 1 || r1 > r0)) {
                while (r0 < r1 && *r0 == '\n')
                    r0++; /* strip('\n') */
                while (r1 > r0 && r1[-1] == '\n')
                    r1--;
                put(b, "<|im_start|>assistant\n<think>\n");
                kiln_chat_buf_put(b, r0, (size_t)(r1 - r0));
                put(b, "\n</think>\n\n");
                while (*content == '\n')
                    content++;
                put(b, content);
            } else {
                put(b, "<|im_start|>assistant\n");
                put(b, content);
            }
            put(b, "<|im_end|>\n");
        }
    }
}

/* Qwen3-VL Instruct (no tools): a first system message leads; the loop
 * renders user and assistant messages as ChatML and no system message (a
 * later one is dropped, as the template drops it). */
static void render_qwen3vl(kiln_chat_buf *b, const kiln_chat_message *m, int n) {
    for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system") && i > 0) continue;
        put(b, "<|im_start|>");
        put(b, m[i].role);
        put(b, "\n");
        put(b, m[i].content);
        put(b, "<|im_end|>\n");
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
        put_trimmed(b, m[i].content);
        put(b, "<|eot_id|>");
    }
    put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int is_tool_role(const char *role) {
    return !strcmp(role, "tool") || !strcmp(role, "ipython");
}

/* Llama-3.1/3.2/3.3 without tool definitions: BOS, a system block that
 * always comes (the dated preamble, then the trimmed first system message
 * if any), the other messages as Llama-3 renders them, except tool results:
 * an "ipython" header and the content through tojson (a string is iterable
 * to Jinja, so the template quotes it). */
static void render_llama31(kiln_chat_buf *b, const kiln_chat_message *m, int n, const char *date) {
    int first = n > 0 && !strcmp(m[0].role, "system");
    put(b, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\nToday Date: ");
    put(b, date);
    put(b, "\n\n");
    if (first) put_trimmed(b, m[0].content);
    put(b, "<|eot_id|>");
    for (int i = first; i < n; i++) {
        if (is_tool_role(m[i].role)) {
            put(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            put_json_string(b, m[i].content);
        } else {
            put(b, "<|start_header_id|>");
            put(b, m[i].role);
            put(b, "<|end_header_id|>\n\n");
            put_trimmed(b, m[i].content);
        }
        put(b, "<|eot_id|>");
    }
}

/* ---- the date of Llama-3.1+ system blocks -------------------------------- */

#define KILN_CHAT_DATE_MAX 64

/* A date goes into the prompt as it is; it must be one short line. */
static kiln_status check_date(const char *date, const char *from) {
    size_t n = strlen(date);
    if (!n || n >= KILN_CHAT_DATE_MAX)
        return kiln_error(KILN_ERR_INVALID_ARG,
                          "chat date '%s' (%s): expected 1 to %d bytes, like '26 Jul 2024'", date,
                          from, KILN_CHAT_DATE_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)date[i] < 0x20 || date[i] == 0x7f)
            return kiln_error(KILN_ERR_INVALID_ARG,
                              "chat date (%s): control character 0x%02x at byte %zu", from,
                              (unsigned)(unsigned char)date[i], i);
    return KILN_OK;
}

/* The template's date_string: the caller's, else KILN_CHAT_DATE, else 3.2's
 * strftime_now("%d %b %Y") (local time, C locale month names) or 3.1's fixed
 * "26 Jul 2024". */
static kiln_status chat_date(kiln_chat_format f, const char *given, char out[KILN_CHAT_DATE_MAX]) {
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const char *env = getenv("KILN_CHAT_DATE");
    const char *from = given ? "kiln_chat_options.date" : "environment variable KILN_CHAT_DATE";
    if (!given && env && *env) given = env;
    if (given) {
        kiln_status st = check_date(given, from);
        if (st) return st;
        strcpy(out, given);
        return KILN_OK;
    }
    if (f == KILN_CHAT_LLAMA31) {
        strcpy(out, "26 Jul 2024");
        return KILN_OK;
    }
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || !localtime_r(&now, &tm) || tm.tm_mon < 0 || tm.tm_mon > 11)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "chat: cannot read today's date for the Llama-3.2 system block; "
                          "set KILN_CHAT_DATE");
    snprintf(out, KILN_CHAT_DATE_MAX, "%02d %s %04d", tm.tm_mday, months[tm.tm_mon],
             tm.tm_year + 1900);
    return KILN_OK;
}

/* ---- rendering ------------------------------------------------------------ */

void kiln_chat_options_init(kiln_chat_options *o) {
    memset(o, 0, sizeof *o);
    o->add_generation_prompt = 1;
    o->enable_thinking = 1;
}

kiln_status kiln_chat_render_with(kiln_chat_format f, const kiln_chat_message *m, int n,
                                  const kiln_chat_options *o, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    if (n < 0 || (n > 0 && !m)) return kiln_error(KILN_ERR_INVALID_ARG, "chat: %d messages", n);
    int llama31 = f == KILN_CHAT_LLAMA31 || f == KILN_CHAT_LLAMA32;
    for (int i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return kiln_error(KILN_ERR_INVALID_ARG, "chat message %d has no %s", i,
                              m[i].role ? "content" : "role");
        if (llama31 && is_tool_role(m[i].role)) continue;
        if (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") &&
            strcmp(m[i].role, "assistant"))
            return kiln_error(KILN_ERR_UNSUPPORTED,
                              "chat message %d: role '%s' (Kiln renders system, user, "
                              "assistant%s in the %s format)",
                              i, m[i].role, llama31 ? ", tool and ipython" : "",
                              kiln_chat_format_name(f));
    }
    char date[KILN_CHAT_DATE_MAX];
    kiln_status st;
    if (llama31 && (st = chat_date(f, o->date, date))) return st;
    kiln_chat_buf b = {0};
    switch (f) {
    case KILN_CHAT_CHATML:
    case KILN_CHAT_SMOLLM2:
        render_chatml(&b, m, n, f == KILN_CHAT_SMOLLM2);
        if (o->add_generation_prompt) put(&b, "<|im_start|>assistant\n");
        break;
    case KILN_CHAT_QWEN3:
        render_qwen3(&b, m, n);
        if (o->add_generation_prompt) {
            put(&b, "<|im_start|>assistant\n");
            if (!o->enable_thinking) put(&b, "<think>\n\n</think>\n\n");
        }
        break;
    case KILN_CHAT_QWEN3VL:
        render_qwen3vl(&b, m, n);
        if (o->add_generation_prompt) put(&b, "<|im_start|>assistant\n");
        break;
    case KILN_CHAT_QWEN3VL_THINKING: /* Qwen3's, always thinking */
        render_qwen3(&b, m, n);
        if (o->add_generation_prompt) put(&b, "<|im_start|>assistant\n<think>\n");
        break;
    case KILN_CHAT_LLAMA3:
        render_llama3(&b, m, n);
        break;
    case KILN_CHAT_LLAMA31:
    case KILN_CHAT_LLAMA32:
        render_llama31(&b, m, n, date);
        if (o->add_generation_prompt) put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    default:
        return kiln_error(KILN_ERR_INVALID_ARG, "chat: unknown format %d", (int)f);
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

kiln_status kiln_chat_render(kiln_chat_format f, const kiln_chat_message *m, int n,
                             int add_generation_prompt, int enable_thinking, char **out,
                             size_t *len) {
    kiln_chat_options o;
    kiln_chat_options_init(&o);
    o.add_generation_prompt = add_generation_prompt;
    o.enable_thinking = enable_thinking;
    return kiln_chat_render_with(f, m, n, &o, out, len);
}

void kiln_chat_free(char *s) {
    kiln_free(s);
}
