/* registry.c: the backends built into this library. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"

static const kiln_backend *const g_backends[] = {
    &kiln_backend_ref_impl,   &kiln_backend_test_impl, &kiln_backend_cpu_impl,
    &kiln_backend_testd_impl, &kiln_backend_qnn_impl,
};

const kiln_backend *kiln_backend_find(const char *name) {
    for (size_t i = 0; i < sizeof g_backends / sizeof *g_backends; i++)
        if (strcmp(g_backends[i]->name, name) == 0) return g_backends[i];
    return NULL;
}

void kiln_backend_names(char *buf, size_t cap) {
    size_t l = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof g_backends / sizeof *g_backends && l < cap; i++)
        l += (size_t)snprintf(buf + l, cap - l, "%s%s", i ? ", " : "", g_backends[i]->name);
}

const kiln_backend *kiln_backend_ref(void) {
    return &kiln_backend_ref_impl;
}

const char *kiln_backend_default(void) {
    return "cpu";
}
