/* parallel.c: fork-join over an index range with pthreads.
 * Threads are started per call: kernels only ask for them when each block has enough work
 * (the grain) to pay the ~20 us a thread costs to start and join. */
#include "parallel.h"

#include <pthread.h>

#define RC_MAX_THREADS 256

typedef struct {
    rc_range_fn fn;
    void *ctx;
    int64_t begin, end;
} rc_block;

static void *run_block(void *p) {
    rc_block *blk = (rc_block *)p;
    blk->fn(blk->ctx, blk->begin, blk->end);
    return NULL;
}

void rc_parallel_for(int64_t n, int64_t grain, int num_threads, rc_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t nt = (n + grain - 1) / grain;
    if (nt > num_threads) nt = num_threads;
    if (nt > RC_MAX_THREADS) nt = RC_MAX_THREADS;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    rc_block blocks[RC_MAX_THREADS];
    pthread_t threads[RC_MAX_THREADS];
    int started[RC_MAX_THREADS];
    for (int64_t i = 0; i < nt; i++) {
        blocks[i].fn = fn;
        blocks[i].ctx = ctx;
        blocks[i].begin = n * i / nt;
        blocks[i].end = n * (i + 1) / nt;
    }
    for (int64_t i = 1; i < nt; i++)
        started[i] = pthread_create(&threads[i], NULL, run_block, &blocks[i]) == 0;
    run_block(&blocks[0]);
    for (int64_t i = 1; i < nt; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else run_block(&blocks[i]);
    }
}
