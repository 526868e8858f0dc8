/* cpu/fuse.c: fuse on the CPU: K streams resampled onto one timeline in one parallel pass.
 * Layouts (elements): out [B,T,F] contiguous with stream k in columns [column_k, column_k+D_k),
 * is_pad [B,T,K]; inputs strided, see rc_fuse_args in robocache.h. Work is split over
 * (row, target) pairs; inside a block each stream is swept in turn (its times and values stay
 * in cache, its gallop hint carries from target to target). The per-element arithmetic is
 * cpu/rows.h, shared with cpu/resample.c, so each stream's columns equal rc_resample_cpu of that
 * stream bit for bit.
 * Benchmark: python benchmarks/bench_fuse.py --device cpu
 */
#include <string.h>

#include "../fuse_math.h"
#include "../robocache.h"
#include "parallel.h"
#include "rows.h"

/* ---- the pass ---- */

/* Pairs [begin, end) of one stream. */
static void fuse_stream_range(const rc_fuse_args *a, int k, int64_t begin, int64_t end) {
    const rc_fuse_stream *s = &a->streams[k];
    const int es = rc_dtype_size(a->values_dtype), tes = rc_dtype_size(a->times_dtype);
    const int64_t T = a->targets, F = a->out_features, D = s->features, sd = s->values_stride_d;
    const int K = a->num_streams;
    int64_t cur_b = -1, v0 = 0, t0 = 0, n = 0, hint = -1;
    for (int64_t p = begin; p < end; p++) {
        int64_t b = p / T, t = p % T;
        if (b != cur_b) {
            rc_fuse_row_span(&v0, &t0, &n, a, s, b);
            cur_b = b;
            hint = -1;
        }
        rc_locate loc;
        rc_locate_any(&loc, a->times_dtype, (const char *)s->times + t0 * tes, s->times_stride_s,
                      n, (const char *)a->new_times +
                             (b * a->new_times_stride_b + t * a->new_times_stride_t) * tes,
                      s->mode, a->tolerance, &hint);
        if (a->is_pad) a->is_pad[p * K + k] = loc.pad;
        write_target((char *)a->out + (p * F + s->column) * es, &loc, (const char *)s->values, v0,
                     s->values_stride_s, D, sd, s->mode, a->values_dtype, es);
    }
}

static void fuse_range(void *ctx, int64_t begin, int64_t end) {
    const rc_fuse_args *a = (const rc_fuse_args *)ctx;
    for (int k = 0; k < a->num_streams; k++) fuse_stream_range(a, k, begin, end);
}

rc_status rc_fuse_cpu(const rc_fuse_args *args, int num_threads) {
    if (args->num_streams < 1 || args->num_streams > RC_FUSE_MAX_STREAMS)
        return rc_fail(RC_ERR_VALUE, "fuse: %d streams (expected 1..%d)", (int)args->num_streams,
                       RC_FUSE_MAX_STREAMS);
    int64_t pairs = args->batch * args->targets;
    /* as resample: ~25 ns per (pair, stream) search + ~1 ns per output feature; at least
     * ~100 us of work per thread, since starting one costs ~20-40 us */
    int64_t grain = 100000 / (args->out_features + 25 * (int64_t)args->num_streams) + 1;
    rc_parallel_for(pairs, grain, num_threads, fuse_range, (void *)args);
    return RC_OK;
}
