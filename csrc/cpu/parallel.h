/* parallel.h: a fork-join loop over an index range for the CPU kernels (pthreads). */
#ifndef RC_PARALLEL_H
#define RC_PARALLEL_H

#include <stdint.h>

typedef void (*rc_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) split into at most num_threads contiguous blocks of at least `grain`
 * items; the calling thread takes the first block. Never fails: a thread that cannot be
 * started has its block run on the calling thread. */
void rc_parallel_for(int64_t n, int64_t grain, int num_threads, rc_range_fn fn, void *ctx);

#endif
