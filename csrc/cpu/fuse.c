/* cpu/fuse.c: fuse on the CPU: K streams resampled onto one timeline in one parallel pass.
 * Layouts (elements): out [B,T,F] contiguous with stream k in columns [column_k, column_k+D_k),
 * is_pad [B,T,K]; inputs strided, see rc_fuse_args in robocache.h. Work is split over
 * (row, target) pairs; inside a block each stream is swept in turn (its times and values stay
 * in cache, its gallop hint carries from target to target). The per-element arithmetic is
 * cpu/resample.c's, so each stream's columns equal rc_resample_cpu of that stream bit for bit.
 * Benchmark: python benchmarks/bench_fuse.py --device cpu
 */
#include <string.h>

#include "../fuse_math.h"
#include "../robocache.h"
#include "parallel.h"

/* ---- row writers: the same expressions as cpu/resample.c (built with -ffp-contract=off) ---- */

static float load_f(const char *p, rc_dtype dt) {
    switch (dt) {
    case RC_F16: { uint16_t h; memcpy(&h, p, 2); return rc_f16_to_f32(h); }
    case RC_BF16: { uint16_t h; memcpy(&h, p, 2); return rc_bf16_to_f32(h); }
    default: { float f; memcpy(&f, p, 4); return f; }
    }
}

static void store_f(char *p, float f, rc_dtype dt) {
    uint16_t h;
    switch (dt) {
    case RC_F16: h = rc_f32_to_f16(f); memcpy(p, &h, 2); break;
    case RC_BF16: h = rc_f32_to_bf16(f); memcpy(p, &h, 2); break;
    default: memcpy(p, &f, 4); break;
    }
}

static void copy_row(char *out, const char *r, int64_t D, int64_t sd, int es) {
    if (sd == 1) {
        memcpy(out, r, (size_t)(D * es));
        return;
    }
    for (int64_t k = 0; k < D; k++) memcpy(out + k * es, r + k * sd * es, (size_t)es);
}

static void lerp_f32_contig(float *restrict o, const float *restrict a, const float *restrict b,
                            float w, int64_t D) {
    for (int64_t k = 0; k < D; k++) o[k] = a[k] + w * (b[k] - a[k]);
}

static void lerp_row(char *out, const char *r0, const char *r1, double w, int64_t D,
                     int64_t sd, rc_dtype dt) {
    if (dt == RC_F32 && sd == 1) {
        lerp_f32_contig((float *)out, (const float *)r0, (const float *)r1, (float)w, D);
        return;
    }
    if (dt == RC_F64) {
        const double *a = (const double *)r0, *b = (const double *)r1;
        double *o = (double *)out;
        for (int64_t k = 0; k < D; k++) o[k] = a[k * sd] + w * (b[k * sd] - a[k * sd]);
        return;
    }
    float wf = (float)w;
    if (dt == RC_F32) {
        const float *a = (const float *)r0, *b = (const float *)r1;
        float *o = (float *)out;
        for (int64_t k = 0; k < D; k++) o[k] = a[k * sd] + wf * (b[k * sd] - a[k * sd]);
        return;
    }
    for (int64_t k = 0; k < D; k++) { /* half types: float32 math, one rounding at the end */
        float a = load_f(r0 + k * sd * 2, dt), b = load_f(r1 + k * sd * 2, dt);
        store_f(out + k * 2, a + wf * (b - a), dt);
    }
}

static void slerp_row(char *out, const char *r0, const char *r1, double w, int64_t D,
                      int64_t sd, rc_dtype dt) {
    int es = rc_dtype_size(dt);
    for (int64_t q = 0; q < D; q += 4) {
        if (dt == RC_F64) {
            double a[4], b[4], r[4];
            for (int k = 0; k < 4; k++) {
                memcpy(&a[k], r0 + (q + k) * sd * es, 8);
                memcpy(&b[k], r1 + (q + k) * sd * es, 8);
            }
            rc_slerp_f64(r, a, b, w);
            memcpy(out + q * es, r, 32);
        } else {
            float a[4], b[4], r[4];
            for (int k = 0; k < 4; k++) {
                a[k] = load_f(r0 + (q + k) * sd * es, dt);
                b[k] = load_f(r1 + (q + k) * sd * es, dt);
            }
            rc_slerp_f32(r, a, b, (float)w);
            for (int k = 0; k < 4; k++) store_f(out + (q + k) * es, r[k], dt);
        }
    }
}

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
        char *o = (char *)a->out + (p * F + s->column) * es;
        if (loc.i0 < 0) {
            memset(o, 0, (size_t)(D * es));
            continue;
        }
        const char *r0 = (const char *)s->values + (v0 + loc.i0 * s->values_stride_s) * es;
        const char *r1 = (const char *)s->values + (v0 + loc.i1 * s->values_stride_s) * es;
        if (s->mode == RC_SLERP)
            slerp_row(o, r0, r1, loc.w, D, sd, a->values_dtype);
        else if (loc.w != 0.0) /* w == 0: exactly on a sample, copy it (keeps inf/NaN exact) */
            lerp_row(o, r0, r1, loc.w, D, sd, a->values_dtype);
        else
            copy_row(o, r0, D, sd, es);
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
