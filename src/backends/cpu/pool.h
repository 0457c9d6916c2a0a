/* pool.h: a persistent thread pool. Threads are created once (at program
 * open) and wait between jobs; running a job allocates nothing and creates
 * no thread. The calling thread is worker 0. */
#ifndef KILN_CPU_POOL_H
#define KILN_CPU_POOL_H

#include "base/base.h"

typedef struct kiln_pool kiln_pool;

/* fn(ctx, ith, nth): one worker's part of a job, 0 <= ith < nth. */
typedef void (*kiln_pool_fn)(void *ctx, int ith, int nth);

kiln_status kiln_pool_create(int n_threads, kiln_pool **out);
void kiln_pool_destroy(kiln_pool *pool); /* NULL is a no-op */
int kiln_pool_threads(const kiln_pool *pool);
/* Runs a job and returns when it is done. fn runs on the caller (ith 0) and
 * on each worker that joins before the caller's own call returns (nth = the
 * pool's size); a worker that was not scheduled in time skips the job rather
 * than delay it. So fn must take its work from a shared counter in ctx until
 * none is left (whoever runs does all of it), never a fixed share per ith.
 * When another thread is already running a job on this pool (two sessions
 * of one program executing at once), fn runs on the calling thread alone
 * (ith 0, nth 1). Results must never depend on the split. */
void kiln_pool_run(kiln_pool *pool, kiln_pool_fn fn, void *ctx);

#endif /* KILN_CPU_POOL_H */
