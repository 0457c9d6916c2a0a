/* pool.c: the persistent thread pool. n - 1 worker threads are created once;
 * the caller of kiln_pool_run is worker 0. A job is published by bumping a
 * generation counter: workers poll it for a while after each job (decode
 * dispatches ~200 jobs per token, back to back), then sleep on a condition
 * variable. A worker joins a job only while the caller is still in its own
 * share; once the caller is done it closes the job and waits for the workers
 * that joined, never for one that was preempted before joining (on a loaded
 * machine that would cost a scheduler time slice per job). Running a job
 * allocates nothing and takes no lock unless a worker sleeps. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/pool.h"

/* How long a worker polls for the next job before it sleeps: longer than
 * the gap between two nodes of a decode, short enough not to burn a core
 * another process could use between tokens. */
#define SPIN_WORKER_NS 100000
/* How long the caller polls for joined workers to finish before it yields
 * its core at each poll (a worker was preempted mid-job: let it run). */
#define SPIN_CALLER_NS 20000
/* Polls between two clock reads. */
#define POLLS_PER_CLOCK 64

/* The join word of the current job: its generation in the high 32 bits,
 * CLOSED once the caller has finished its share, and the number of workers
 * that joined in the low bits. */
#define CLOSED ((uint64_t)1 << 31)

typedef struct worker {
    kiln_pool *pool;
    int ith;
    pthread_t thread;
} worker;

struct kiln_pool {
    int n;         /* workers, the caller included */
    int n_started; /* threads running (n - 1 once created) */
    worker *workers;
    atomic_int busy;       /* 1 while a job is in flight: a second caller runs alone */
    atomic_uint gen;       /* bumped once per job */
    _Atomic uint64_t join; /* see CLOSED */
    atomic_int finished;   /* joined workers that have returned from fn */
    atomic_int sleepers;   /* workers blocked on cv */
    atomic_int stop;
    /* The current job: written before join and gen are published, read by a
     * worker only after it joined. */
    kiln_pool_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Joins job g unless it is closed (or already replaced by a later one). */
static int try_join(kiln_pool *p, unsigned g) {
    uint64_t w = atomic_load(&p->join);
    for (;;) {
        if ((unsigned)(w >> 32) != g || (w & CLOSED)) return 0;
        if (atomic_compare_exchange_weak(&p->join, &w, w + 1)) return 1;
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    kiln_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int64_t t0 = 0;
        for (int polls = 0; (g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen;
             polls++) {
            if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
            if (polls % POLLS_PER_CLOCK) {
                cpu_relax();
                continue;
            }
            int64_t t = now_ns();
            if (!t0) t0 = t;
            if (t - t0 < SPIN_WORKER_NS) continue;
            /* Sleep. sleepers is raised before gen is read again and the
             * caller reads sleepers after raising gen (both seq_cst), so one
             * of the two sees the other: no wake-up is lost. */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            t0 = 0;
        }
        seen = g;
        if (!try_join(p, g)) continue; /* too late: the others did the work */
        p->fn(p->ctx, w->ith, p->n);
        atomic_fetch_add_explicit(&p->finished, 1, memory_order_release);
    }
}

static void wake_all(kiln_pool *p) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

kiln_status kiln_pool_create(int n_threads, kiln_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096)
        return kiln_error(KILN_ERR_INVALID_ARG, "thread pool size %d is out of range 1..4096",
                          n_threads);
    kiln_pool *p = kiln_calloc(1, sizeof *p);
    if (!p || !(p->workers = kiln_calloc((size_t)n_threads, sizeof *p->workers))) {
        kiln_free(p);
        return kiln_error(KILN_ERR_NOMEM, "out of memory creating a pool of %d threads", n_threads);
    }
    p->n = n_threads;
    atomic_init(&p->busy, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->join, CLOSED);
    atomic_init(&p->finished, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, 0);
    if (pthread_mutex_init(&p->mu, NULL)) {
        kiln_free(p->workers);
        kiln_free(p);
        return kiln_error(KILN_ERR_BACKEND, "cannot create the thread pool's mutex");
    }
    if (pthread_cond_init(&p->cv, NULL)) {
        pthread_mutex_destroy(&p->mu);
        kiln_free(p->workers);
        kiln_free(p);
        return kiln_error(KILN_ERR_BACKEND, "cannot create the thread pool's condition variable");
    }
    /* Workers take no signals (they stay with the application's threads)
     * and get a stack of known size (musl's default is 128 KiB). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (!rc) rc = pthread_attr_setstacksize(&attr, (size_t)1 << 20);
    for (int i = 1; !rc && i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
        rc = pthread_create(&p->workers[i].thread, &attr, worker_main, &p->workers[i]);
        if (!rc) p->n_started++;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        int started = p->n_started;
        kiln_pool_destroy(p);
        return kiln_error(KILN_ERR_BACKEND, "cannot start thread %d of %d: %s", started + 2,
                          n_threads, strerror(rc));
    }
    *out = p;
    return KILN_OK;
}

void kiln_pool_destroy(kiln_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    wake_all(p);
    for (int i = 1; i <= p->n_started; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    kiln_free(p->workers);
    kiln_free(p);
}

int kiln_pool_threads(const kiln_pool *p) {
    return p->n;
}

void kiln_pool_run(kiln_pool *p, kiln_pool_fn fn, void *ctx) {
    int idle = 0;
    if (p->n == 1 || !atomic_compare_exchange_strong(&p->busy, &idle, 1)) {
        fn(ctx, 0, 1); /* alone: no worker, or another thread's job is in flight */
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    atomic_store(&p->join, (uint64_t)g << 32); /* open, nobody joined */
    atomic_store(&p->gen, g);                  /* publishes the job */
    if (atomic_load(&p->sleepers) > 0) wake_all(p);
    fn(ctx, 0, p->n);
    /* Close the job; wait for the workers that joined it. */
    int joined = (int)(atomic_fetch_or(&p->join, CLOSED) & (CLOSED - 1));
    int64_t t0 = 0;
    int yielding = 0;
    for (int polls = 0; atomic_load_explicit(&p->finished, memory_order_acquire) < joined;
         polls++) {
        if (yielding) {
            sched_yield();
        } else if (polls % POLLS_PER_CLOCK) {
            cpu_relax();
        } else {
            int64_t t = now_ns();
            if (!t0) t0 = t;
            yielding = t - t0 >= SPIN_CALLER_NS;
        }
    }
    atomic_store_explicit(&p->busy, 0, memory_order_release);
}
