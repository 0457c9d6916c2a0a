/* fuzz_chat.c: libFuzzer target for the chat formats (src/llm/chat.c). The
 * bytes are a Jinja chat template, then after a NUL byte a conversation:
 * messages split at 0x01 bytes, each one's first byte choosing its role
 * (system, user, assistant, tool, ipython, or another), the rest its
 * content. The template's format is detected; the conversation is rendered
 * in every format, with and without the generation prompt and thinking,
 * and the date option taken from the template's first line for Llama-3.1+.
 * Any crash, sanitizer report, leak or broken promise (a render that fails
 * without a message, a length that is not the string's) is a bug. */
#include <string.h>

#include "fuzz_common.h"
#include "kiln/kiln_llm.h"

#define MAX_MESSAGES 64

static const char *const ROLES[] = {"system", "user", "assistant", "tool", "ipython", "model"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    /* text: the template up to the first NUL, then the conversation */
    size_t tlen = strlen(text);
    kiln_chat_format f;
    fz_clear_error();
    kiln_status st = kiln_chat_format_detect(text, &f);
    if (st)
        fz_check_failure(st);
    else if (f == KILN_CHAT_NONE)
        abort(); /* KILN_OK names a format */
    kiln_chat_message m[MAX_MESSAGES];
    int n = 0;
    char *p = tlen < size ? text + tlen + 1 : text + size;
    for (char *end = text + size; p < end && n < MAX_MESSAGES;) {
        char *next = memchr(p, 0x01, (size_t)(end - p));
        if (next) *next = 0;
        m[n].role = ROLES[(unsigned char)*p % 6];
        m[n].content = *p ? p + 1 : p;
        n++;
        p = next ? next + 1 : end;
    }
    char date[32];
    size_t dl = strcspn(text, "\n");
    snprintf(date, sizeof date, "%.*s", (int)(dl < 31 ? dl : 31), text);
    for (int fmt = KILN_CHAT_CHATML; fmt <= KILN_CHAT_QWEN3VL_THINKING; fmt++)
        for (int opt = 0; opt < 4; opt++) {
            kiln_chat_options o;
            kiln_chat_options_init(&o);
            o.add_generation_prompt = opt & 1;
            o.enable_thinking = opt >> 1 & 1;
            o.date = opt == 3 ? date : "26 Jul 2024";
            char *out;
            size_t len;
            fz_clear_error();
            st = kiln_chat_render_with((kiln_chat_format)fmt, m, n, &o, &out, &len);
            if (st) {
                fz_check_failure(st);
                if (out) abort();
                continue;
            }
            if (!out || strlen(out) != len) abort(); /* contents hold no NUL */
            kiln_chat_free(out);
        }
    free(text);
    return 0;
}
