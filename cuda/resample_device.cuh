/* resample_device.cuh: the device half of resampling, shared by cuda/resample.cu and
 * cuda/fuse.cu: locating a tile of targets in one row (phase 1) and writing the tile's output
 * rows (phase 2). The per-target arithmetic is csrc/resample_math.h, the same text the CPU
 * compiles, so results match the CPU bit for bit (slerp aside).
 * Layout (elements): a tile's output rows start at `out`, `out_stride` units apart.
 */
#ifndef RC_RESAMPLE_DEVICE_CUH
#define RC_RESAMPLE_DEVICE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/resample_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace rc {

constexpr int kThreads = 256;   /* threads per block */
constexpr int kMaxTile = 256;   /* targets per block; phase 1 needs a lane per target */
constexpr int64_t kSplitMin = 128; /* rows shorter than this skip the splitter stage */

/* One located tile, in shared memory. */
struct Tile {
    const int64_t *r0, *r1; /* element offset of each target's rows in values; -1: empty row */
    const double *w;
    int count;              /* targets in this tile */
};

/* ---- element types and the lerp, exactly as the CPU does it ---------------------------- */

struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(f16_t x) { return rc_f16_to_f32(x.bits); }
__device__ __forceinline__ float to_acc(bf16_t x) { return rc_bf16_to_f32(x.bits); }
__device__ __forceinline__ void from_acc(float &o, float x) { o = x; }
__device__ __forceinline__ void from_acc(double &o, double x) { o = x; }
__device__ __forceinline__ void from_acc(f16_t &o, float x) { o.bits = rc_f32_to_f16(x); }
__device__ __forceinline__ void from_acc(bf16_t &o, float x) { o.bits = rc_f32_to_bf16(x); }

/* _rn intrinsics: nvcc would otherwise fuse a + w*(b-a) into an FMA and differ from the CPU */
template <typename T>
__device__ __forceinline__ T lerp(T a, T b, double w) {
    T o;
    float wf = (float)w, fa = to_acc(a);
    from_acc(o, __fadd_rn(fa, __fmul_rn(wf, __fsub_rn(to_acc(b), fa))));
    return o;
}
template <>
__device__ __forceinline__ double lerp<double>(double a, double b, double w) {
    return __dadd_rn(a, __dmul_rn(w, __dsub_rn(b, a)));
}

__device__ __forceinline__ void slerp(float *r, const float *q0, const float *q1, float w) {
    rc_slerp_f32(r, q0, q1, w);
}
__device__ __forceinline__ void slerp(double *r, const double *q0, const double *q1, double w) {
    rc_slerp_f64(r, q0, q1, w);
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

/* Value kinds: float types take every mode, integer/bool types (by size) are copied. */
template <typename T> struct Kind { static constexpr bool is_float = false; };
template <> struct Kind<float> { static constexpr bool is_float = true; using Acc = float; };
template <> struct Kind<double> { static constexpr bool is_float = true; using Acc = double; };
template <> struct Kind<f16_t> { static constexpr bool is_float = true; using Acc = float; };
template <> struct Kind<bf16_t> { static constexpr bool is_float = true; using Acc = float; };

__host__ __device__ __forceinline__ bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* ---- phase 2: write the tile's rows ---------------------------------------------------- */

/* Thread k of a phase-2 loop takes units k, k + kThreads, ... of the tile (unit c of target
 * i at k = i * units + c). The next (i, c) comes from a carry instead of a division per unit:
 * an integer division is ~25 instructions, more than the rest of a 16-byte copy. */
struct UnitWalk {
    int i, c, di, dc, units;
    __device__ explicit UnitWalk(int units_) : units(units_) {
        i = threadIdx.x / units;
        c = threadIdx.x - i * units;
        di = kThreads / units;
        dc = kThreads - di * units;
    }
    __device__ void next() {
        i += di;
        c += dc;
        if (c >= units) {
            c -= units;
            i++;
        }
    }
};

/* Copy modes and edge/exact hits: `units` of U per target, source unit stride `su`. */
template <typename U>
__device__ void copy_rows(U *out, int64_t out_stride, const void *values, int es, const Tile &t,
                          int units, int64_t su) {
#pragma unroll 4
    for (UnitWalk u(units); u.i < t.count; u.next()) {
        const int i = u.i, c = u.c;
        int64_t r = t.r0[i];
        U v;
        if (r >= 0) v = ((const U *)((const char *)values + r * es))[c * su];
        else memset(&v, 0, sizeof v);
        out[i * out_stride + c] = v;
    }
}

/* Linear: units of N elements of T (N > 1 only when contiguous and 16-byte aligned). */
template <typename T, int N>
__device__ void lerp_rows(Vec<T, N> *out, int64_t out_stride, const T *values, const Tile &t,
                          int units, int64_t su) {
    using V = Vec<T, N>;
#pragma unroll 4
    for (UnitWalk u(units); u.i < t.count; u.next()) {
        const int i = u.i, c = u.c;
        int64_t r0 = t.r0[i], r1 = t.r1[i];
        double w = t.w[i];
        V o;
        if (r0 < 0) {
            memset(&o, 0, sizeof o);
        } else {
            V x = ((const V *)(values + r0))[c * su];
            if (w == 0.0) {
                o = x; /* exactly on a sample: keep it bit for bit (inf stays inf) */
            } else {
                V y = ((const V *)(values + r1))[c * su];
#pragma unroll
                for (int j = 0; j < N; j++) o.v[j] = lerp<T>(x.v[j], y.v[j], w);
            }
        }
        /* evict-first: a big output streaming through L2 would push out the value rows and
         * times still to be read (B64 S16384 T4096 D128 bf16: -5%, docs/perf-notes.md v12) */
        if constexpr (sizeof(V) == 16) __stcs((uint4 *)&out[i * out_stride + c], *(const uint4 *)&o);
        else out[i * out_stride + c] = o;
    }
}

/* Slerp: one thread per quaternion (x, y, z, w), in float (double for float64 values). */
template <typename T>
__device__ void slerp_rows(T *out, int64_t out_stride, const T *values, const Tile &t, int quats,
                           int64_t sd) {
    using Acc = typename Kind<T>::Acc;
    const int n = t.count * quats;
    for (int k = threadIdx.x; k < n; k += kThreads) {
        int i = k / quats, c = k - i * quats;
        int64_t r0 = t.r0[i], r1 = t.r1[i];
        T *o = out + i * out_stride + (int64_t)c * 4;
        if (r0 < 0) {
            memset(o, 0, 4 * sizeof(T));
            continue;
        }
        const T *x = values + r0, *y = values + r1;
        Acc q0[4], q1[4], r[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q0[j] = (Acc)to_acc(x[(c * 4 + j) * sd]);
            q1[j] = (Acc)to_acc(y[(c * 4 + j) * sd]);
        }
        slerp(r, q0, q1, (Acc)t.w[i]);
#pragma unroll
        for (int j = 0; j < 4; j++) from_acc(o[j], r[j]);
    }
}

/* Phase 2 for one series of D features of T (stride sd): picks 16-byte units when `vec`.
 * `out` is the tile's first output row at the series' first column; rows are `out_row`
 * elements apart. */
template <typename T>
__device__ void write_rows(T *out, int64_t out_row, const T *values, int64_t D, int64_t sd,
                           rc_mode mode, bool vec, const Tile &t) {
    constexpr int es = (int)sizeof(T);
    if constexpr (Kind<T>::is_float) {
        if (mode == RC_SLERP) {
            slerp_rows<T>(out, out_row, values, t, (int)(D / 4), sd);
            return;
        }
        if (mode == RC_LINEAR) {
            if (vec)
                lerp_rows<T, 16 / es>((Vec<T, 16 / es> *)out, out_row * es / 16, values, t,
                                      (int)(D * es / 16), 1);
            else
                lerp_rows<T, 1>((Vec<T, 1> *)out, out_row, values, t, (int)D, sd);
            return;
        }
    }
    if (vec) copy_rows<uint4>((uint4 *)out, out_row * es / 16, values, es, t, (int)(D * es / 16), 1);
    else if constexpr (es == 1) copy_rows<uint8_t>((uint8_t *)out, out_row, values, es, t, (int)D, sd);
    else if constexpr (es == 2) copy_rows<uint16_t>((uint16_t *)out, out_row, values, es, t, (int)D, sd);
    else if constexpr (es == 4) copy_rows<uint32_t>((uint32_t *)out, out_row, values, es, t, (int)D, sd);
    else copy_rows<unsigned long long>((unsigned long long *)out, out_row, values, es, t, (int)D, sd);
}

/* ---- phase 1: locate the tile's targets ------------------------------------------------ */

/* Finding, for each target x, j = the last sample with t[j] <= x is a chain of dependent
 * loads, and with times cold in L2 that latency (not bandwidth) bounds small batches and the
 * start of big ones (the whole grid of a big call locates at once, in one wave). So:
 * 1. the block (all its targets share one row) loads 256 evenly spaced splitters at once and
 *    each target finds its bucket among them in shared memory;
 * 2. when the buckets of the tile's targets lie in a run of at most `stage` samples (a
 *    loader's window, or a whole episode at a lower rate), the block copies that run into
 *    shared memory with one coalesced load and every target ends its search there: two
 *    round trips in all, whatever the row length. Rows of <= kSplitMin samples are staged
 *    whole. `stage` 0 (fuse) skips this;
 * 3. otherwise (targets spread over the row, or unsorted) a group of L lanes (a power of two
 *    <= 32, consecutive in a warp) searches its bucket in global memory, each lane probing one
 *    of L split points per step, so a step divides the range by ~L+1. Step sizes are
 *    approximate on purpose (no integer division); the bounds stay exact.
 * Every way gives the CPU's binary-search answer. Every lane of the block calls this with the
 * same row; the caller's barrier after phase 1 orders any reuse of `s`. */
template <typename T, void (*WEIGH)(rc_locate *, T, T, T, T, int64_t, T, int64_t, rc_mode, double),
          void (*FINISH)(rc_locate *, const T *, int64_t, int64_t, T, int64_t, rc_mode, double)>
__device__ void locate_tile_t(rc_locate *loc, const T *t, int64_t st, int64_t n, const T *xp,
                              bool active, int L, rc_mode mode, double tol, T *s, int stage) {
    __shared__ int s_c[2]; /* lowest and highest bucket of the tile's targets */
    const T x = active ? *xp : (T)0;
    int64_t lo = 0, hi = active ? n : 0; /* the first t > x is in [lo, hi] */
    int64_t r0 = 0, r1 = n - 1;          /* the run of samples that holds every [lo - 1, hi] */
    if (n > kSplitMin) {                 /* uniform across the block: same row */
        const int64_t step0 = n / (kThreads + 1);
        s[threadIdx.x] = t[(threadIdx.x + 1) * step0 * st];
        if (threadIdx.x == 0 && stage > 0) {
            s_c[0] = kThreads;
            s_c[1] = 0;
        }
        __syncthreads();
        int c = 0, e = kThreads; /* c = splitters <= x */
        if (active) {
            while (c < e) {
                int m = (c + e) >> 1;
                if (s[m] <= x) c = m + 1; else e = m;
            }
            if (c > 0) lo = c * step0 + 1;
            if (c < kThreads) hi = (c + 1) * step0;
        }
        if (stage > 0) {
            const int cmin = __reduce_min_sync(0xffffffffu, active ? c : kThreads);
            const int cmax = __reduce_max_sync(0xffffffffu, active ? c : 0);
            if ((threadIdx.x & 31) == 0) {
                atomicMin(&s_c[0], cmin);
                atomicMax(&s_c[1], cmax);
            }
            __syncthreads(); /* also: every splitter read is done before the stage overwrites s */
            r0 = s_c[0] * step0; /* lo - 1 of the lowest bucket */
            r1 = s_c[1] < kThreads ? (s_c[1] + 1) * step0 : n - 1;
        }
    }
    if (stage > 0 && r1 - r0 < stage) { /* uniform: s_c and n are the block's */
        for (int64_t i = threadIdx.x; i <= r1 - r0; i += kThreads) s[i] = t[(r0 + i) * st];
        T t0 = x, tl = x;
        if (active && n > 0) {
            t0 = t[0];
            tl = t[(n - 1) * st];
        }
        __syncthreads();
        if (!active) return;
        while (lo < hi) {
            int64_t mid = lo + ((hi - lo) >> 1);
            if (s[mid - r0] <= x) lo = mid + 1; else hi = mid;
        }
        const int64_t j = lo - 1; /* inner j: r0 <= j and j + 1 <= r1 */
        const bool inner = j >= 0 && j < n - 1;
        WEIGH(loc, t0, tl, inner ? s[j - r0] : x, inner ? s[j + 1 - r0] : x, n, x, j, mode, tol);
        return;
    }
    const int lane = threadIdx.x & 31, k = lane & (L - 1), shift = lane & ~(L - 1);
    const unsigned bits = L == 32 ? 0xffffffffu : ((1u << L) - 1u);
    const float inv = 1.0f / (float)(L + 1);
    while (__any_sync(0xffffffffu, lo < hi)) {
        const int64_t len = hi - lo;
        const int64_t step = max((int64_t)1, (int64_t)((float)len * inv));
        const int64_t p = min(lo + (k + 1) * step, hi - 1);
        const bool le = lo < hi && t[p * st] <= x;
        const int cnt = __popc((__ballot_sync(0xffffffffu, le) >> shift) & bits);
        if (lo < hi) {
            const int64_t nlo = cnt > 0 ? min(lo + cnt * step, hi - 1) + 1 : lo;
            hi = cnt < L ? min(lo + (cnt + 1) * step, hi - 1) : hi;
            lo = nlo;
        }
    }
    if (active) FINISH(loc, t, st, n, x, lo - 1, mode, tol);
}

/* Phase 1 for one row of times (t: its first sample, st: stride, n: samples) and this lane's
 * target *xp; `loc` is written for active lanes. `s`: the block's shared stage of
 * `stage_bytes` (>= kThreads * 8 bytes, the splitters; stage_bytes 0: splitters only). */
__device__ __forceinline__ void locate_tile(rc_locate *loc, rc_dtype tdt, const void *t,
                                            int64_t st, int64_t n, const void *xp, bool active,
                                            int L, rc_mode mode, double tol, double *s,
                                            int stage_bytes) {
    if (tdt == RC_F64)
        locate_tile_t<double, rc_locate_f64_weigh, rc_locate_f64_finish>(
            loc, (const double *)t, st, n, (const double *)xp, active, L, mode, tol, s,
            stage_bytes / 8);
    else if (tdt == RC_F32)
        locate_tile_t<float, rc_locate_f32_weigh, rc_locate_f32_finish>(
            loc, (const float *)t, st, n, (const float *)xp, active, L, mode, tol, (float *)s,
            stage_bytes / 4);
    else
        locate_tile_t<int64_t, rc_locate_i64_weigh, rc_locate_i64_finish>(
            loc, (const int64_t *)t, st, n, (const int64_t *)xp, active, L, mode, tol,
            (int64_t *)s, stage_bytes / 8);
}

/* ---- dispatch on the value dtype ---------------------------------------------------- */

template <typename T> struct type_tag { using type = T; };

/* Calls f(type_tag<T>{}) with the storage type of dt: the four float types by name, integers
 * and bool by size (their bits are only copied). */
template <class F>
rc_status with_value_type(rc_dtype dt, F &&f) {
    switch (dt) {
    case RC_F32: return f(type_tag<float>{});
    case RC_F64: return f(type_tag<double>{});
    case RC_F16: return f(type_tag<f16_t>{});
    case RC_BF16: return f(type_tag<bf16_t>{});
    default: break;
    }
    switch (rc_dtype_size(dt)) {
    case 1: return f(type_tag<uint8_t>{});
    case 2: return f(type_tag<uint16_t>{});
    case 4: return f(type_tag<uint32_t>{});
    default: return f(type_tag<unsigned long long>{});
    }
}

/* ---- grid sizing ------------------------------------------------------------------------ */

inline int sm_count(int device) {
    const int n = rc_device_attr(device, RC_ATTR_SMS);
    return n > 0 ? n : 132;
}

/* Bytes of a block's phase-1 stage (dynamic shared memory): as many as still let `blocks`
 * blocks (fewer where the SM holds fewer threads) share an SM beside `static_bytes` each, at
 * most kStageMax, at least the splitters' kThreads * 8. 16 KiB on an H100/H200; a 256-target
 * tile of a whole episode at a quarter of its rate spans ~1,100 float64 samples (9 KiB). */
constexpr int kStageMax = 16384;
inline int stage_bytes(int device, int static_bytes, int blocks) {
    const int threads = rc_device_attr(device, RC_ATTR_THREADS_PER_SM);
    if (threads >= kThreads && threads / kThreads < blocks) blocks = threads / kThreads;
    const int smem = rc_device_attr(device, RC_ATTR_SMEM_PER_SM);
    int per = (smem > 0 ? smem : 65536) / blocks - rc_device_attr(device, RC_ATTR_SMEM_RESERVED) -
              static_bytes;
    per &= ~255;
    return per > kStageMax ? kStageMax : per < kThreads * 8 ? kThreads * 8 : per;
}

/* Tile of targets per block and search lanes per target: ~`work` units of phase-2 work per
 * block (so the search and the block's fixed cost are amortized over enough bytes), at most
 * `cap` targets, and small enough that the grid covers every SM ~4 times; then as many lanes
 * per target as fit. */
inline void choose_tile(int64_t *tile, int *lanes, int64_t batch, int64_t targets,
                        int64_t units, int64_t work, int64_t cap, int device) {
    int64_t t = work / (units > 0 ? units : 1);
    const int64_t sms = sm_count(device);
    const int64_t fill = (batch * targets + 4 * sms - 1) / (4 * sms);
    if (t > cap) t = cap;
    if (t > fill) t = fill;
    if (t > targets) t = targets;
    if (t < 1) t = 1;
    int L = 32;
    while (L > 1 && (int64_t)L * t > kThreads) L >>= 1;
    *tile = t;
    *lanes = L;
}

} // namespace rc

#endif
