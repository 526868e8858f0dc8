/* cpu/rows.h: the row writers shared by cpu/resample.c and cpu/fuse.c, so that each fuse stream's
 * columns equal rc_resample_cpu of that stream bit for bit. Rows are D elements (input strided by
 * sd); the same expressions as the CUDA kernels, built with -ffp-contract=off: keep them so. */
#ifndef RC_CPU_ROWS_H
#define RC_CPU_ROWS_H

#include <string.h>

#include "../resample_math.h"

static inline float load_f(const char *p, rc_dtype dt) {
    switch (dt) {
    case RC_F16: { uint16_t h; memcpy(&h, p, 2); return rc_f16_to_f32(h); }
    case RC_BF16: { uint16_t h; memcpy(&h, p, 2); return rc_bf16_to_f32(h); }
    default: { float f; memcpy(&f, p, 4); return f; }
    }
}

static inline void store_f(char *p, float f, rc_dtype dt) {
    uint16_t h;
    switch (dt) {
    case RC_F16: h = rc_f32_to_f16(f); memcpy(p, &h, 2); break;
    case RC_BF16: h = rc_f32_to_bf16(f); memcpy(p, &h, 2); break;
    default: memcpy(p, &f, 4); break;
    }
}

/* out[0..D) = row r (strided by sd elements of size es). */
static inline void copy_row(char *out, const char *r, int64_t D, int64_t sd, int es) {
    if (sd == 1) {
        memcpy(out, r, (size_t)(D * es));
        return;
    }
    for (int64_t k = 0; k < D; k++) memcpy(out + k * es, r + k * sd * es, (size_t)es);
}

/* unit-stride float32 rows get their own loop so the compiler vectorizes it */
static inline void lerp_f32_contig(float *restrict o, const float *restrict a,
                                   const float *restrict b, float w, int64_t D) {
    for (int64_t k = 0; k < D; k++) o[k] = a[k] + w * (b[k] - a[k]);
}

static inline void lerp_row(char *out, const char *r0, const char *r1, double w, int64_t D,
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

static inline void slerp_row(char *out, const char *r0, const char *r1, double w, int64_t D,
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

/* Target row o (D elements of size es) from the samples loc picked out of one series whose row
 * starts at element v0 of values (samples stride_s apart): zeros for an empty row, else slerp,
 * lerp, or a copy of sample i0 when w == 0 (exactly on a sample: keeps inf/NaN exact). */
static inline void write_target(char *o, const rc_locate *loc, const char *values, int64_t v0,
                                int64_t stride_s, int64_t D, int64_t sd, rc_mode mode,
                                rc_dtype dt, int es) {
    if (D == 0) return; /* zero features: o and values may be NULL (torch's empty storage) */
    if (loc->i0 < 0) {
        memset(o, 0, (size_t)(D * es));
        return;
    }
    const char *r0 = values + (v0 + loc->i0 * stride_s) * es;
    const char *r1 = values + (v0 + loc->i1 * stride_s) * es;
    if (mode == RC_SLERP)
        slerp_row(o, r0, r1, loc->w, D, sd, dt);
    else if (loc->w != 0.0)
        lerp_row(o, r0, r1, loc->w, D, sd, dt);
    else
        copy_row(o, r0, D, sd, es);
}

#endif /* RC_CPU_ROWS_H */
