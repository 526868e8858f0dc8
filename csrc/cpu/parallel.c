/* parallel.c: fork-join over an index range on a persistent pthread pool.
 * Workers are started once and sleep on a condition variable between jobs: starting threads
 * per call cost ~20 us each on a bare machine and hundreds of us in sandboxed ones (measured:
 * a 16-thread call went from ~0.4 ms to ~4 ms), which a loader calling every batch cannot pay.
 * One job runs at a time; a caller that finds the pool busy runs its job on its own thread.
 * After fork() the child starts with an empty pool (its threads did not survive the fork).
 * Workers run each job in the caller's floating-point environment (rounding, and on x86 the
 * MXCSR flush-to-zero / denormals-are-zero bits that torch.set_flush_denormal sets per thread):
 * otherwise a block's result would depend on which thread ran it.
 */
#include "parallel.h"

#include <fenv.h>
#include <pthread.h>
#include <stdint.h>

#define RC_MAX_THREADS 256

typedef struct {
    pthread_mutex_t lock;      /* guards everything below */
    pthread_cond_t wake;       /* workers wait for a new job (generation changes) */
    pthread_cond_t done;       /* the caller waits for `running` to reach 0 */
    pthread_mutex_t job_lock;  /* held by the caller of the job in progress */
    int n_workers;
    unsigned long generation;  /* bumped per job */
    rc_range_fn fn;
    void *ctx;
    int64_t n, n_blocks;
    int64_t next_block;        /* next block to hand out */
    int active;                /* workers with id < active take part in the current job */
    int running;               /* of those, still on the current job */
    fenv_t env;                /* the caller's floating-point environment for this job */
} rc_pool;

static rc_pool pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                       PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, NULL,
                       0, 0, 0, 0, 0, {0}};
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* generation when each worker was started: a job posted while it was still starting up must
 * count as new to it (reading pool.generation on its first lock would miss that job) */
static unsigned long born[RC_MAX_THREADS];

/* Takes and runs blocks of the current job until none is left. Called with pool.lock held;
 * returns with it held. */
static void drain(void) {
    while (pool.next_block < pool.n_blocks) {
        int64_t i = pool.next_block++;
        rc_range_fn fn = pool.fn;
        void *ctx = pool.ctx;
        int64_t begin = pool.n * i / pool.n_blocks, end = pool.n * (i + 1) / pool.n_blocks;
        pthread_mutex_unlock(&pool.lock);
        fn(ctx, begin, end);
        pthread_mutex_lock(&pool.lock);
    }
}

static void *worker(void *arg) {
    const int id = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    unsigned long seen = born[id];
    for (;;) {
        while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.generation;
        if (id >= pool.active) continue; /* the job asked for fewer threads */
        fesetenv(&pool.env);
        drain();
        if (--pool.running == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

static void reset_in_child(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pool.lock = m;
    pool.job_lock = m;
    pool.wake = c;
    pool.done = c;
    pool.n_workers = 0;
    pool.running = 0;
    pool.next_block = pool.n_blocks = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_in_child); }

/* Grows the pool to `want` workers (best effort: fewer if threads cannot be started). */
static void grow(int want) {
    if (want > RC_MAX_THREADS - 1) want = RC_MAX_THREADS - 1;
    while (pool.n_workers < want) {
        pthread_t th;
        pthread_attr_t attr;
        born[pool.n_workers] = pool.generation;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &attr, worker, (void *)(intptr_t)pool.n_workers);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        pool.n_workers++;
    }
}

void rc_parallel_for(int64_t n, int64_t grain, int num_threads, rc_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t nt = (n + grain - 1) / grain;
    if (nt > num_threads) nt = num_threads;
    if (nt > RC_MAX_THREADS) nt = RC_MAX_THREADS;
    if (nt <= 1 || pthread_mutex_trylock(&pool.job_lock) != 0) {
        fn(ctx, 0, n); /* small job, or another thread's job holds the pool */
        return;
    }
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&pool.lock);
    grow((int)nt - 1);
    int helpers = pool.n_workers < nt - 1 ? pool.n_workers : (int)nt - 1;
    /* blocks: a few per thread so an unlucky slow thread does not hold everyone up */
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.n_blocks = (helpers + 1) * 4 < n ? (int64_t)(helpers + 1) * 4 : n;
    pool.next_block = 0;
    fegetenv(&pool.env);
    pool.active = pool.running = helpers;
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    drain();
    while (pool.running > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pool.fn = NULL;
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
}
