/* chat.h: internals of the chat formats (chat.c): a growing byte buffer the
 * renderers write into. Not installed. */
#ifndef KILN_LLM_CHAT_H
#define KILN_LLM_CHAT_H

#include <stddef.h>

#include "kiln/kiln_llm.h"

typedef struct kiln_chat_buf {
    char *s;
    size_t n, cap;
    int oom; /* set when a growth failed; later appends do nothing */
} kiln_chat_buf;

/* Appends len bytes (strlen when len is (size_t)-1). */
void kiln_chat_buf_put(kiln_chat_buf *b, const char *s, size_t len);

#endif
