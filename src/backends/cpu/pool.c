/* pool.c: the persistent thread pool (placeholder: runs on the caller). */
#include "backends/cpu/pool.h"

struct kiln_pool {
    int n;
};

kiln_status kiln_pool_create(int n_threads, kiln_pool **out) {
    kiln_pool *p = kiln_calloc(1, sizeof *p);
    if (!p) return kiln_error(KILN_ERR_NOMEM, "out of memory creating a thread pool");
    p->n = 1;
    *out = p;
    return KILN_OK;
}

void kiln_pool_destroy(kiln_pool *pool) { kiln_free(pool); }

int kiln_pool_threads(const kiln_pool *pool) { return pool->n; }

void kiln_pool_run(kiln_pool *pool, kiln_pool_fn fn, void *ctx) { fn(ctx, 0, 1); }
