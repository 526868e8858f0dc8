/* resample_math.h: the per-target arithmetic of resample, written once for both devices.
 *
 * Included by csrc/cpu/resample.c (C11) and cuda/resample.cu (CUDA C++): RC_HD marks the
 * functions __host__ __device__ under nvcc. Sharing this text is what makes the CPU and CUDA
 * paths agree bit for bit: same search, same weight formula, same rounding (the CUDA side must
 * not contract a*b+c into an FMA here, hence the explicit _rn intrinsics there).
 */
#ifndef RC_RESAMPLE_MATH_H
#define RC_RESAMPLE_MATH_H

#include <stdint.h>
#include <string.h>
#ifndef __CUDACC__
#include <math.h>
#endif

#include "robocache.h"

#ifdef __CUDACC__
#define RC_HD __host__ __device__ __forceinline__
#else
#define RC_HD static inline
#endif

/* Which samples (relative to the row start) a target takes, and the lerp weight. */
typedef struct {
    int64_t i0, i1; /* -1 when the row is empty */
    double w;       /* in [0, 1); 0 unless linear/slerp between two samples */
    uint8_t pad;    /* outside [t0 - tol, tlast + tol], or NaN target, or empty row */
} rc_locate;

/* ---- half types: bit-exact conversions, round to nearest even -------------------------- */

RC_HD float rc_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
RC_HD uint32_t rc_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

RC_HD float rc_bf16_to_f32(uint16_t h) { return rc_bits_to_f32((uint32_t)h << 16); }

RC_HD uint16_t rc_f32_to_bf16(float f) {
    uint32_t u = rc_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

RC_HD float rc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return rc_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {                        /* zero or subnormal: exact in float */
        float f = (float)man * 5.9604644775390625e-8f; /* 2^-24 */
        return sign ? -f : f;
    }
    return rc_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

RC_HD uint16_t rc_f32_to_f16(float f) {
    uint32_t u = rc_f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf (>= 65520) */
    if (a < 0x38800000u) {                 /* below 2^-14: subnormal half or zero */
        if (a < 0x33000000u) return sign;  /* below half the smallest subnormal: +-0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;         /* to units of 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u;          /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);        /* round to nearest even on the dropped 13 bits */
    return (uint16_t)(sign | (r >> 13));
}

/* ---- search ----------------------------------------------------------------------------- */

/* The search: j = the last sample with t[j] <= x among t[0..n-1] (stride st), -1 if none.
 * So duplicates resolve to the later sample and t[j] < t[j+1]. `hint` (CPU, may be NULL): the
 * previous target's j in this row. Targets of a window are usually sorted, so galloping
 * forward from it costs O(log gap) instead of O(log n); j is the same either way. The GPU
 * searches its own way (cuda/resample_device.cuh) and calls _finish, or the _weigh half with
 * the four times it needs from shared memory: the row's first and last (t0, tl) and t[j],
 * t[j+1] (a, b; any value when j < 0 or j >= n - 1, where they are not read). */
#define RC_DEFINE_LOCATE(NAME, T, SUB_TO_DOUBLE)                                             \
    RC_HD void NAME##_weigh(rc_locate *loc, T t0, T tl, T a, T b, int64_t n, T x, int64_t j,  \
                            rc_mode mode, double tol) {                                        \
        if (n <= 0) { loc->i0 = loc->i1 = -1; loc->w = 0.0; loc->pad = 1; return; }           \
        /* written so a NaN target fails both tests and counts as padding */                   \
        loc->pad = !((x >= t0 || SUB_TO_DOUBLE(t0, x) <= tol) &&                               \
                     (x <= tl || SUB_TO_DOUBLE(x, tl) <= tol));                                \
        loc->w = 0.0;                                                                          \
        if (j < 0) { loc->i0 = loc->i1 = 0; return; }                                          \
        if (j >= n - 1) { loc->i0 = loc->i1 = n - 1; return; }                                 \
        switch (mode) {                                                                        \
        case RC_LINEAR: case RC_SLERP:                                                         \
            loc->i0 = j; loc->i1 = j + 1;                                                      \
            loc->w = (double)(SUB_TO_DOUBLE(x, a) / SUB_TO_DOUBLE(b, a));                      \
            break;                                                                             \
        case RC_PREVIOUS: loc->i0 = loc->i1 = j; break;                                        \
        case RC_NEXT: loc->i0 = loc->i1 = (a == x) ? j : j + 1; break;                         \
        default: /* RC_NEAREST: ties go to the earlier sample, as LeRobot's frame pick (argmin) */ \
            loc->i0 = loc->i1 = (SUB_TO_DOUBLE(b, x) < SUB_TO_DOUBLE(x, a)) ? j + 1 : j;       \
            break;                                                                             \
        }                                                                                      \
    }                                                                                          \
    RC_HD void NAME##_finish(rc_locate *loc, const T *t, int64_t st, int64_t n, T x,          \
                             int64_t j, rc_mode mode, double tol) {                            \
        const int some = n > 0, inner = j >= 0 && j < n - 1; /* no read of t[-1] if empty */   \
        NAME##_weigh(loc, some ? t[0] : x, some ? t[(n - 1) * st] : x, inner ? t[j * st] : x,  \
                     inner ? t[(j + 1) * st] : x, n, x, j, mode, tol);                         \
    }                                                                                          \
    RC_HD void NAME(rc_locate *loc, const T *t, int64_t st, int64_t n, T x, rc_mode mode,      \
                    double tol, int64_t *hint) {                                               \
        int64_t lo = 0, hi = n; /* the first t > x is in [lo, hi] */                           \
        if (hint && *hint >= 0 && *hint < n && t[*hint * st] <= x) {                           \
            lo = *hint + 1;                                                                    \
            int64_t step = 1;                                                                  \
            while (lo + step - 1 < n && t[(lo + step - 1) * st] <= x) {                        \
                lo += step;                                                                    \
                step <<= 1;                                                                    \
            }                                                                                  \
            hi = lo + step - 1 < n ? lo + step - 1 : n;                                        \
        }                                                                                      \
        while (lo < hi) {                                                                      \
            int64_t mid = lo + ((hi - lo) >> 1);                                               \
            if (t[mid * st] <= x) lo = mid + 1; else hi = mid;                                 \
        }                                                                                      \
        if (hint) *hint = lo - 1;                                                              \
        NAME##_finish(loc, t, st, n, x, lo - 1, mode, tol);                                    \
    }

/* Differences in the times' own precision: float stays float (the weight is float32 math for
 * float32 times), int64 nanoseconds subtract exactly before converting. */
#define RC_SUB_F32(p, q) ((float)((p) - (q)))
#define RC_SUB_F64(p, q) ((double)((p) - (q)))
#define RC_SUB_I64(p, q) ((double)((int64_t)((uint64_t)(p) - (uint64_t)(q))))

RC_DEFINE_LOCATE(rc_locate_f32, float, RC_SUB_F32)
RC_DEFINE_LOCATE(rc_locate_f64, double, RC_SUB_F64)
RC_DEFINE_LOCATE(rc_locate_i64, int64_t, RC_SUB_I64)

/* Dispatch on the times dtype; pointers are to the row's first sample / the target. */
RC_HD void rc_locate_any(rc_locate *loc, rc_dtype tdt, const void *t, int64_t st, int64_t n,
                         const void *x, rc_mode mode, double tol, int64_t *hint) {
    if (tdt == RC_F64)
        rc_locate_f64(loc, (const double *)t, st, n, *(const double *)x, mode, tol, hint);
    else if (tdt == RC_F32)
        rc_locate_f32(loc, (const float *)t, st, n, *(const float *)x, mode, tol, hint);
    else
        rc_locate_i64(loc, (const int64_t *)t, st, n, *(const int64_t *)x, mode, tol, hint);
}

/* Row b's series: element offsets of its first sample in values (*v0) and times (*t0), and its
 * sample count (*n). The glue has validated index/offsets/lengths (or the caller chose not to). */
RC_HD void rc_row_span(int64_t *v0, int64_t *t0, int64_t *n, const rc_resample_args *a,
                       int64_t b) {
    if (a->offsets) {
        int64_t e = a->index[b * a->index_stride];
        int64_t s = a->offsets[e * a->offsets_stride];
        *n = a->offsets[(e + 1) * a->offsets_stride] - s;
        *v0 = s * a->values_stride_s;
        *t0 = s * a->times_stride_s;
    } else {
        *n = a->lengths ? a->lengths[b * a->lengths_stride] : a->samples;
        *v0 = b * a->values_stride_b;
        *t0 = b * a->times_stride_b;
    }
}

/* ---- slerp on one quaternion (x, y, z, w), float or double ------------------------------ */

#define RC_DEFINE_SLERP(NAME, T, ACOS, SIN, SQRT)                                              \
    RC_HD void NAME(T r[4], const T q0[4], const T q1in[4], T w) {                             \
        T q1[4] = {q1in[0], q1in[1], q1in[2], q1in[3]};                                        \
        T d = q0[0] * q1[0] + q0[1] * q1[1] + q0[2] * q1[2] + q0[3] * q1[3];                   \
        if (d < (T)0) { /* shortest arc: q and -q are the same rotation */                     \
            for (int k = 0; k < 4; k++) q1[k] = -q1[k];                                        \
            d = -d;                                                                            \
        }                                                                                      \
        T a, b;                                                                                \
        if (d > (T)0.9995) { a = (T)1 - w; b = w; } /* tiny angle: nlerp, sin() ill-posed */ \
        else {                                                                                 \
            T th = ACOS(d), s = SIN(th);                                                       \
            a = SIN(((T)1 - w) * th) / s; b = SIN(w * th) / s;                                 \
        }                                                                                      \
        T nn = (T)0;                                                                           \
        for (int k = 0; k < 4; k++) { r[k] = a * q0[k] + b * q1[k]; nn += r[k] * r[k]; }       \
        if (nn > (T)0) { T inv = (T)1 / SQRT(nn); for (int k = 0; k < 4; k++) r[k] *= inv; }   \
    }

RC_DEFINE_SLERP(rc_slerp_f32, float, acosf, sinf, sqrtf)
RC_DEFINE_SLERP(rc_slerp_f64, double, acos, sin, sqrt)

#endif /* RC_RESAMPLE_MATH_H */
