/* fuzz_common.h: what the fuzz targets share: the library's contract on
 * failure, a temporary file or folder for loaders that take a path, and the
 * compiler's middle (build, verify, plan) for a model that imported. */
#ifndef KILN_FUZZ_COMMON_H
#define KILN_FUZZ_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/passes.h"
#include "ir/graph.h"
#include "models/llama.h"

/* A failure is a known negative status with a message; anything else aborts
 * (which the fuzzer reports). */
static inline void fz_check_failure(kiln_status st) {
    if (st >= 0 || st < KILN_ERR_CANCELLED || !kiln_last_error()[0]) {
        fprintf(stderr, "status %d with message \"%s\"\n", (int)st, kiln_last_error());
        abort();
    }
}

/* Empties the thread's message, so a failure that sets none is caught. */
static inline void fz_clear_error(void) {
    kiln_error(KILN_OK, "%s", "");
}

/* Writes the bytes to $TMPDIR/kiln-fuzz-<pid>.<ext>; 0 on success. */
static inline int fz_write_temp(const uint8_t *data, size_t size, const char *ext, char *path,
                                size_t cap) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/kiln-fuzz-%ld.%s", dir && *dir ? dir : "/tmp", (long)getpid(), ext);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A fresh folder $TMPDIR/kiln-fuzz-<pid>.d for loaders that read a folder;
 * 0 on success. The caller removes what it writes, then the folder. */
static inline int fz_temp_dir(char *path, size_t cap) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/kiln-fuzz-%ld.d", dir && *dir ? dir : "/tmp", (long)getpid());
    return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/* Writes the bytes to DIR/NAME; 0 on success. */
static inline int fz_write_in(const char *dir, const char *name, const void *data, size_t size) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Most layers built: the verifier's arena-overlap check and the planner are
 * quadratic in a method's values (~20 per layer), so a 1024-layer header
 * costs seconds under the sanitizers and would read as a timeout. */
#define FZ_MAX_LAYERS 16

/* What the compiler does with an imported model before writing it, with a
 * short context so the graphs stay small (the shapes are the model's). */
static inline kiln_status fz_build_and_plan(kiln_module *m, const kiln_llama_config *cfg) {
    if (cfg->n_layer > FZ_MAX_LAYERS) return KILN_OK;
    int max_seq = cfg->n_ctx_train < 16 ? cfg->n_ctx_train : 16;
    kiln_status st = kiln_llama_build(m, cfg, max_seq < 4 ? max_seq : 4, max_seq);
    if (!st) st = kiln_module_verify(m, 0);
    int ref = 0;
    if (!st) st = kiln_module_add_backend(m, "ref", &ref);
    for (int i = 0; i < m->n_methods && !st; i++) {
        for (int j = 0; j < m->methods[i].n_nodes; j++)
            m->methods[i].nodes[j].backend = ref;
        st = kiln_graph_partition(&m->methods[i]);
        if (!st) st = kiln_graph_plan(&m->methods[i], m);
    }
    if (!st) st = kiln_module_verify(m, 1);
    return st;
}

#endif
