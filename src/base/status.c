/* status.c: the error half of "errors are values": the status texts, the
 * thread-local message and status that kiln_error sets and kiln_error_wrap
 * prefixes, and the library version. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"

static _Thread_local char g_msg[2048];
static _Thread_local kiln_status g_status;

kiln_status kiln_last_status(void) {
    return g_status;
}

const char *kiln_strerror(kiln_status status) {
    switch (status) {
    case KILN_OK:
        return "ok";
    case KILN_ERR_IO:
        return "i/o error";
    case KILN_ERR_FORMAT:
        return "format error";
    case KILN_ERR_UNSUPPORTED:
        return "unsupported";
    case KILN_ERR_INVALID_ARG:
        return "invalid argument";
    case KILN_ERR_NOMEM:
        return "out of memory";
    case KILN_ERR_BACKEND:
        return "backend error";
    case KILN_ERR_VERSION:
        return "format version mismatch";
    case KILN_ERR_CANCELLED:
        return "cancelled";
    }
    return "unknown status";
}

const char *kiln_last_error(void) {
    return g_msg;
}

const char *kiln_version(void) {
    return KILN_VERSION_STRING;
}

kiln_status kiln_error(kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    g_status = status;
    return status;
}

kiln_status kiln_error_wrap(kiln_status status, const char *fmt, ...) {
    char prefix[512], old[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    /* Truncation keeps the start of the message, which names the most. */
    size_t n = strlen(prefix);
    memcpy(g_msg, prefix, n);
    if (n + 2 < sizeof g_msg) {
        memcpy(g_msg + n, ": ", 2);
        size_t room = sizeof g_msg - n - 3, m = strlen(old);
        if (m > room) m = room;
        memcpy(g_msg + n + 2, old, m);
        g_msg[n + 2 + m] = 0;
    } else {
        g_msg[n] = 0;
    }
    g_status = status;
    return status;
}
