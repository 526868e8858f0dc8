/* cpu/resample.c: resample on the CPU, the no-GPU path and the reference the CUDA kernel
 * is held to (bit for bit, except slerp's libm calls).
 * Layouts (elements): out [B,T,D] contiguous, is_pad [B,T]; inputs strided, see
 * rc_resample_args in robocache.h. Work is split over (row, target) pairs: one binary search
 * each, then D features written. Benchmark: python benchmarks/bench_resample.py --device cpu
 */
#include <stdlib.h>
#include <string.h>

#include "../resample_math.h"
#include "../robocache.h"
#include "parallel.h"
#include "rows.h"

static void resample_range(void *ctx, int64_t begin, int64_t end) {
    const rc_resample_args *a = (const rc_resample_args *)ctx;
    const int es = rc_dtype_size(a->values_dtype), tes = rc_dtype_size(a->times_dtype);
    const int64_t T = a->targets, D = a->features, sd = a->values_stride_d;
    int64_t cur_b = -1, v0 = 0, t0 = 0, n = 0, hint = -1;
    for (int64_t p = begin; p < end; p++) {
        int64_t b = p / T, t = p % T;
        if (b != cur_b) {
            rc_row_span(&v0, &t0, &n, a, b);
            cur_b = b;
            hint = -1;
        }
        rc_locate loc;
        rc_locate_any(&loc, a->times_dtype, (const char *)a->times + t0 * tes, a->times_stride_s,
                      n, (const char *)a->new_times +
                             (b * a->new_times_stride_b + t * a->new_times_stride_t) * tes,
                      a->mode, a->tolerance, &hint);
        if (a->is_pad) a->is_pad[p] = loc.pad;
        write_target((char *)a->out + p * D * es, &loc, (const char *)a->values, v0,
                     a->values_stride_s, D, sd, a->mode, a->values_dtype, es);
    }
}

rc_status rc_resample_cpu(const rc_resample_args *args, int num_threads) {
    int64_t pairs = args->batch * args->targets;
    /* A pair costs ~25 ns + ~1 ns per feature; starting a thread costs ~20-40 us, so each
     * thread gets at least ~100 us of work. */
    int64_t grain = 100000 / (args->features + 25) + 1;
    rc_parallel_for(pairs, grain, num_threads, resample_range, (void *)args);
    return RC_OK;
}

/* ---- content validation ------------------------------------------------------------------ */

#define RC_DEFINE_CHECK_TIMES(NAME, T, IS_FINITE)                                                \
    static int64_t NAME(int64_t *bad_i, const T *t, int64_t st, int64_t n) {                   \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T x = t[i * st];                                                                   \
            if (!IS_FINITE(x)) { *bad_i = i; return RC_CHECK_TIMES_NONFINITE; }                \
            if (i > 0 && x < t[(i - 1) * st]) { *bad_i = i; return RC_CHECK_TIMES_UNSORTED; }  \
        }                                                                                      \
        return RC_CHECK_OK;                                                                    \
    }
#define RC_ALWAYS_FINITE(x) ((void)(x), 1)
RC_DEFINE_CHECK_TIMES(check_times_f32, float, isfinite)
RC_DEFINE_CHECK_TIMES(check_times_f64, double, isfinite)
RC_DEFINE_CHECK_TIMES(check_times_i64, int64_t, RC_ALWAYS_FINITE)

static int64_t check_times(int64_t *bad_i, const rc_resample_args *a, int64_t t0, int64_t n) {
    const char *t = (const char *)a->times + t0 * rc_dtype_size(a->times_dtype);
    if (a->times_dtype == RC_F32) return check_times_f32(bad_i, (const float *)t, a->times_stride_s, n);
    if (a->times_dtype == RC_F64) return check_times_f64(bad_i, (const double *)t, a->times_stride_s, n);
    return check_times_i64(bad_i, (const int64_t *)t, a->times_stride_s, n);
}

static rc_status found(rc_check_result *r, int64_t kind, int64_t row, int64_t i) {
    r->kind = kind;
    r->row = row;
    r->i = i;
    return RC_OK;
}

rc_status rc_resample_check_cpu(rc_check_result *result, const rc_resample_args *a) {
    found(result, RC_CHECK_OK, 0, 0);
    if (a->offsets) {
        const int64_t *off = a->offsets, so = a->offsets_stride;
        if (off[0] != 0) return found(result, RC_CHECK_OFFSETS, 0, 0);
        for (int64_t e = 0; e < a->episodes; e++)
            if (off[(e + 1) * so] < off[e * so]) return found(result, RC_CHECK_OFFSETS, e + 1, 0);
        if (off[a->episodes * so] != a->samples)
            return found(result, RC_CHECK_OFFSETS, a->episodes, 0);
        for (int64_t b = 0; b < a->batch; b++) {
            int64_t e = a->index[b * a->index_stride];
            if (e < 0 || e >= a->episodes) return found(result, RC_CHECK_INDEX, b, 0);
        }
    } else if (a->lengths) {
        for (int64_t b = 0; b < a->batch; b++) {
            int64_t n = a->lengths[b * a->lengths_stride];
            if (n < 0 || n > a->samples) return found(result, RC_CHECK_LENGTHS, b, 0);
        }
    }
    /* ragged: each episode's times are scanned once, at the first row that reads it (a batch
     * of B rows from a few long episodes would otherwise scan B * length samples; B=2000 rows
     * of one 800k-sample episode took 0.7 s). Without the byte map (allocation failed) every
     * row is scanned, as before: the same verdict, only slower. */
    uint8_t *seen = a->offsets && a->batch > 1 ? calloc((size_t)a->episodes + 1, 1) : NULL;
    for (int64_t b = 0; b < a->batch; b++) {
        if (seen) {
            int64_t e = a->index[b * a->index_stride];
            if (seen[e]) continue;
            seen[e] = 1;
        }
        int64_t v0, t0, n, bad_i = 0;
        rc_row_span(&v0, &t0, &n, a, b);
        int64_t kind = check_times(&bad_i, a, t0, n);
        if (kind != RC_CHECK_OK) {
            found(result, kind, b, bad_i);
            break;
        }
    }
    free(seen);
    return RC_OK;
}
