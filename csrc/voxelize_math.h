/* voxelize_math.h: the per-point arithmetic of voxelize, written once for both devices.
 *
 * Included by csrc/cpu/voxelize.c (C11) and cuda/voxelize.cu (CUDA C++). Sharing this text is
 * what makes the CPU and CUDA results identical bit for bit: the same float64 binning, the same
 * fixed-point quantization of features for deterministic sum/mean, the same order-preserving
 * keys for max, the same final rounding. Explicit _rn intrinsics on the device keep nvcc from
 * contracting or approximating anything here.
 */
#ifndef RC_VOXELIZE_MATH_H
#define RC_VOXELIZE_MATH_H

#include <stdint.h>
#include <string.h>
#ifndef __CUDACC__
#include <math.h>
#endif

#include "resample_math.h" /* RC_HD and the bit-exact float16/bfloat16 conversions */
#include "robocache.h"

/* ---- loads ---------------------------------------------------------------------------------- */

/* Element i of a float array of dtype dt, widened to double (exact for every float dtype). */
RC_HD double rc_vox_load(const void *base, int64_t i, rc_dtype dt) {
    switch (dt) {
    case RC_F64: return ((const double *)base)[i];
    case RC_F16: return (double)rc_f16_to_f32(((const uint16_t *)base)[i]);
    case RC_BF16: return (double)rc_bf16_to_f32(((const uint16_t *)base)[i]);
    default: return (double)((const float *)base)[i];
    }
}

/* ---- binning -------------------------------------------------------------------------------- */

/* The grid, by value (kernels get it as a parameter, no pointer chasing). */
typedef struct {
    double origin[3], size[3], extent[3]; /* extent: X, Y, Z as doubles (exact: < 2^53) */
    int64_t Y, Z;
} rc_vox_geom;

RC_HD rc_vox_geom rc_vox_geom_of(const rc_voxelize_args *a) {
    rc_vox_geom g;
    for (int k = 0; k < 3; k++) {
        g.origin[k] = a->origin[k];
        g.size[k] = a->voxel_size[k];
        g.extent[k] = (double)a->grid[k];
    }
    g.Y = a->grid[1];
    g.Z = a->grid[2];
    return g;
}

/* (p - origin) / size: one rounding for the subtraction, one for the division. The voxel index
 * is its floor; since extents are integers, 0 <= floor(q) < extent exactly when
 * 0 <= q < extent, and then floor(q) is the truncation (int64_t)q: no floor() call needed. */
RC_HD double rc_vox_cell(double p, double origin, double size) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(__dsub_rn(p, origin), size);
#else
    return (p - origin) / size;
#endif
}

/* Linear voxel index v = (ix * Y + iy) * Z + iz within one cloud's grid, or -1 when the point
 * is outside [0, grid) on some axis or not finite (NaN fails every comparison). */
RC_HD int64_t rc_vox_bin(const rc_vox_geom *g, double x, double y, double z) {
    double fx = rc_vox_cell(x, g->origin[0], g->size[0]);
    double fy = rc_vox_cell(y, g->origin[1], g->size[1]);
    double fz = rc_vox_cell(z, g->origin[2], g->size[2]);
    if (!(fx >= 0.0 && fx < g->extent[0] && fy >= 0.0 && fy < g->extent[1] && fz >= 0.0 &&
          fz < g->extent[2]))
        return -1;
    return ((int64_t)fx * g->Y + (int64_t)fy) * g->Z + (int64_t)fz;
}

/* ---- deterministic sum/mean: 64-bit fixed point --------------------------------------------
 * Cloud b, channel c is quantized as q = rint(f * 2^S) with
 *     S = 62 - e - L,  m = max |f| over the cloud's kept points (finite values only),
 *     m < 2^e (e from m's exponent), kept <= 2^L.
 * Then |q| <= 2^(62-L) and any voxel's sum of at most `kept` values stays below 2^62: the int64
 * sum never overflows, and integer addition does not care about order. Non-finite features set
 * flag bits instead, combined the way IEEE addition combines them. */

#define RC_VOX_POS_INF 1u
#define RC_VOX_NEG_INF 2u
#define RC_VOX_NAN 4u

RC_HD uint64_t rc_vox_f64_bits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }
RC_HD double rc_vox_bits_f64(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

RC_HD int rc_vox_shift(uint64_t kept, uint64_t maxabs_bits) {
    if (maxabs_bits == 0 || kept == 0) return 0;
    int biased = (int)((maxabs_bits >> 52) & 0x7ff);
    int e = (biased > 0 ? biased : 1) - 1022; /* m < 2^e; subnormals get the bound 2^-1022 */
    int L = 0;
    if (kept > 1) {
#ifdef __CUDA_ARCH__
        L = 64 - __clzll((long long)(kept - 1));
#else
        L = 64 - __builtin_clzll(kept - 1);
#endif
    }
    return 62 - e - L;
}

/* Flag bits of a non-finite value; 0 for finite ones. */
RC_HD uint32_t rc_vox_special(double f) {
    uint64_t u = rc_vox_f64_bits(f);
    if ((u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull) return 0;
    if (u & 0x000fffffffffffffull) return RC_VOX_NAN;
    return (u >> 63) ? RC_VOX_NEG_INF : RC_VOX_POS_INF;
}

/* 2^k, exactly, for -1022 <= k <= 1023. */
RC_HD double rc_vox_pow2(int k) { return rc_vox_bits_f64((uint64_t)(k + 1023) << 52); }

/* x * 2^k for the k of this file (|k| < 1100): two power-of-two factors, each representable.
 * Exact unless the result is subnormal or overflows, and then the same on both devices. */
RC_HD double rc_vox_scale(double x, int k) {
    const int h = k / 2;
#ifdef __CUDA_ARCH__
    return __dmul_rn(__dmul_rn(x, rc_vox_pow2(h)), rc_vox_pow2(k - h));
#else
    return x * rc_vox_pow2(h) * rc_vox_pow2(k - h);
#endif
}

/* rint(f * 2^shift) for |f| <= m (see above): |result| <= 2^62, round half to even. */
RC_HD int64_t rc_vox_to_fixed(double f, int shift) {
    const double x = rc_vox_scale(f, shift);
#ifdef __CUDA_ARCH__
    return __double2ll_rn(x);
#else
    /* below 2^52 adding and removing 2^52 rounds to an integer (half to even); above it every
     * double is already an integer */
    const double two52 = 4503599627370496.0, ax = fabs(x);
    if (!(ax < two52)) return (int64_t)x;
    const int64_t r = (int64_t)((ax + two52) - two52);
    return x < 0 ? -r : r;
#endif
}

/* A voxel's sum (or mean when count > 0 and mean) from its fixed-point sum and flags, as
 * double; the caller rounds once to the output dtype. */
RC_HD double rc_vox_fixed_result(int64_t q, uint32_t flags, int shift, uint32_t count, int mean) {
    if (flags) {
        if ((flags & RC_VOX_NAN) || flags == (RC_VOX_POS_INF | RC_VOX_NEG_INF))
            return rc_vox_bits_f64(0x7ff8000000000000ull);
        return rc_vox_bits_f64((flags & RC_VOX_POS_INF) ? 0x7ff0000000000000ull
                                                         : 0xfff0000000000000ull);
    }
#ifdef __CUDA_ARCH__
    double s = rc_vox_scale(__ll2double_rn(q), -shift);
    return mean ? __ddiv_rn(s, __uint2double_rn(count)) : s;
#else
    double s = rc_vox_scale((double)q, -shift);
    return mean ? s / (double)count : s;
#endif
}

/* ---- max: order-preserving keys --------------------------------------------------------------
 * Unsigned keys that sort like the floats they encode, with NaN (canonicalized to +qNaN) above
 * +inf so that NaN wins, as numpy.maximum does. Key 0 would be a negative NaN: it never occurs
 * and marks "no value yet". */

RC_HD uint32_t rc_vox_key32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

RC_HD float rc_vox_unkey32(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

RC_HD uint64_t rc_vox_key64(double f) {
    uint64_t u = rc_vox_f64_bits(f);
    if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) u = 0x7ff8000000000000ull;
    return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}

RC_HD double rc_vox_unkey64(uint64_t k) {
    uint64_t u = (k & 0x8000000000000000ull) ? (k & 0x7fffffffffffffffull) : ~k;
    return rc_vox_bits_f64(u);
}

RC_HD float rc_vox_to_f32(double f) {
#ifdef __CUDA_ARCH__
    return __double2float_rn(f);
#else
    return (float)f;
#endif
}

/* ---- workspace -------------------------------------------------------------------------------
 * Sum/mean/max reduce into "slots": a touched voxel's slot is the index of the first point that
 * claimed it (claimed by writing slot + 1 into the voxel's channel-0 word of the zeroed output,
 * which the final pass overwrites). Per slot: a count and F accumulators; deterministic sum/mean
 * add the per-cloud statistics that fix the scale and per-slot flags for non-finite features.
 *
 * CUDA occupancy of a grid of >= RC_VOX_BITMAP_MIN bytes (args->cuda_layout set by the binding)
 * sets bits of a bitmap instead of storing into the output, then expands the bitmap into the
 * whole output in one coalesced pass (cuda/voxelize.cu). Only worth it when the output is about
 * the size of L2 or more (A100: 40 MB, H100: 50 MB); smaller grids are written in slabs from
 * shared memory. The CPU never uses it. */

#define RC_VOX_BITMAP_MIN ((int64_t)32 << 20) /* output bytes: 32 MiB (not tuned finely) */

typedef struct {
    int64_t kept, maxabs;   /* [B] u64, [B*F] u64 (bits of double): deterministic sum/mean */
    int64_t counts;         /* [slots] u32 */
    int64_t acc;            /* [slots*F] of acc_size bytes */
    int64_t flags;          /* [slots*F] u8: deterministic sum/mean */
    int64_t bitmap;         /* [ceil(B*V/32)] u32: occupancy; bit i of word w = flat voxel 32w+i */
    int64_t bitmap_bytes;   /* 0 when there is no bitmap */
    int64_t total;          /* bytes */
    int64_t slots;
    int acc_size;           /* 8: int64 fixed point / double / u64 keys; 4: float / u32 keys */
    int fixed;              /* deterministic sum/mean */
} rc_vox_layout;

RC_HD int64_t rc_vox_align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

RC_HD int rc_vox_uses_slots(rc_vox_mode m) { return m == RC_VOX_SUM || m == RC_VOX_MEAN || m == RC_VOX_MAX; }

RC_HD void rc_vox_layout_of(rc_vox_layout *l, const rc_voxelize_args *a) {
    memset(l, 0, sizeof *l);
    const int64_t B = a->batch, V = a->grid[0] * a->grid[1] * a->grid[2];
    if (a->cuda_layout && a->mode == RC_VOX_OCCUPANCY) {
        if (B * V * rc_dtype_size(a->out_dtype) < RC_VOX_BITMAP_MIN) return;
        l->bitmap = 0;
        l->bitmap_bytes = rc_vox_align16((B * V + 31) / 32 * 4);
        l->total = l->bitmap + l->bitmap_bytes;
        return;
    }
    if (!rc_vox_uses_slots(a->mode) || a->channels == 0) return;
    const int64_t F = a->channels;
    l->fixed = a->deterministic && a->mode != RC_VOX_MAX;
    l->acc_size = (l->fixed || a->out_dtype == RC_F64) ? 8 : 4;
    l->slots = a->offsets ? a->points_per_cloud : B * a->points_per_cloud;
    int64_t at = 0;
    if (l->fixed) {
        l->kept = at;
        at = rc_vox_align16(at + B * 8);
        l->maxabs = at;
        at = rc_vox_align16(at + B * F * 8);
    }
    l->counts = at;
    at = rc_vox_align16(at + l->slots * 4);
    l->acc = at;
    at = rc_vox_align16(at + l->slots * F * l->acc_size);
    if (l->fixed) {
        l->flags = at;
        at = rc_vox_align16(at + l->slots * F);
    }
    l->total = at;
}

#endif /* RC_VOXELIZE_MATH_H */
