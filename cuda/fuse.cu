/* cuda/fuse.cu: fuse on the GPU: K streams resampled onto one timeline in ONE launch,
 * bit-identical to csrc/cpu/fuse.c (slerp aside) and so to K separate resample calls.
 * Layouts (elements): out [B,T,F] contiguous, stream k in columns [column_k, column_k + D_k),
 * is_pad [B,T,K]; inputs strided (robocache.h). The K stream descriptors travel by value in
 * the kernel parameters (rc_fuse_args, < 2 KB). One block per (row, tile of targets) sweeps the
 * streams: locate the tile's targets in stream k (resample's splitter + group search), then
 * stream its columns with 16-byte units where the layout allows. Caller's stream, no sync.
 * Benchmark: python benchmarks/bench_fuse.py
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/fuse_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTile = 128; /* targets per block */

/* The located tile of one stream, in shared memory. */
struct Tile {
    const int64_t *r0, *r1; /* element offset of each target's rows in values; -1: empty row */
    const double *w;
    int count;              /* targets in this tile */
    int64_t first_out_row;  /* b * T + first target */
};

/* ---- element types and the lerp, exactly as the CPU (and cuda/resample.cu) does it ---- */

struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(f16_t x) { return rc_f16_to_f32(x.bits); }
__device__ __forceinline__ float to_f32(bf16_t x) { return rc_bf16_to_f32(x.bits); }
__device__ __forceinline__ double to_f32(double x) { return x; } /* slerp loads only */
__device__ __forceinline__ void from_f32(float &o, float x) { o = x; }
__device__ __forceinline__ void from_f32(double &o, double x) { o = x; }
__device__ __forceinline__ void from_f32(f16_t &o, float x) { o.bits = rc_f32_to_f16(x); }
__device__ __forceinline__ void from_f32(bf16_t &o, float x) { o.bits = rc_f32_to_bf16(x); }

/* _rn intrinsics: nvcc would otherwise fuse a + w*(b-a) into an FMA and differ from the CPU */
template <typename T>
__device__ __forceinline__ T lerp(T a, T b, double w) {
    T o;
    float wf = (float)w, fa = to_f32(a);
    from_f32(o, __fadd_rn(fa, __fmul_rn(wf, __fsub_rn(to_f32(b), fa))));
    return o;
}
template <>
__device__ __forceinline__ double lerp<double>(double a, double b, double w) {
    return __dadd_rn(a, __dmul_rn(w, __dsub_rn(b, a)));
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

/* Where stream s's columns of output row r start, in units of U. */
template <typename U>
__device__ __forceinline__ U *out_units(const rc_fuse_args &a, const rc_fuse_stream &s) {
    return (U *)((char *)a.out + s.column * rc_dtype_size(a.values_dtype));
}

/* ---- phase 2: write one stream's columns of the tile ---- */

/* Copy modes and edge/exact hits: `units` of U per target, source unit stride `su`. */
template <typename U>
__device__ void copy_cols(const rc_fuse_args &a, const rc_fuse_stream &s, const Tile &t,
                          int units, int64_t su) {
    const int es = rc_dtype_size(a.values_dtype);
    const int64_t row_units = a.out_features * es / (int64_t)sizeof(U);
    U *out = out_units<U>(a, s) + t.first_out_row * row_units;
    const int n = t.count * units;
#pragma unroll 4
    for (int k = threadIdx.x; k < n; k += kThreads) {
        int i = k / units, c = k - i * units;
        int64_t r = t.r0[i];
        U v;
        if (r >= 0) v = ((const U *)((const char *)s.values + r * es))[c * su];
        else memset(&v, 0, sizeof v);
        out[i * row_units + c] = v;
    }
}

/* Linear: units of N elements of T (N > 1 only when contiguous and 16-byte aligned). */
template <typename T, int N>
__device__ void lerp_cols(const rc_fuse_args &a, const rc_fuse_stream &s, const Tile &t,
                          int units, int64_t su) {
    using V = Vec<T, N>;
    const int64_t row_units = a.out_features / N;
    V *out = out_units<V>(a, s) + t.first_out_row * row_units;
    const int n = t.count * units;
#pragma unroll 4
    for (int k = threadIdx.x; k < n; k += kThreads) {
        int i = k / units, c = k - i * units;
        int64_t r0 = t.r0[i], r1 = t.r1[i];
        double w = t.w[i];
        V o;
        if (r0 < 0) {
            memset(&o, 0, sizeof o);
        } else {
            V x = ((const V *)((const T *)s.values + r0))[c * su];
            if (w == 0.0) {
                o = x; /* exactly on a sample: keep it bit for bit (inf stays inf) */
            } else {
                V y = ((const V *)((const T *)s.values + r1))[c * su];
#pragma unroll
                for (int j = 0; j < N; j++) o.v[j] = lerp<T>(x.v[j], y.v[j], w);
            }
        }
        out[i * row_units + c] = o;
    }
}

__device__ __forceinline__ void slerp(float *r, const float *q0, const float *q1, float w) {
    rc_slerp_f32(r, q0, q1, w);
}
__device__ __forceinline__ void slerp(double *r, const double *q0, const double *q1, double w) {
    rc_slerp_f64(r, q0, q1, w);
}

/* Slerp: one thread per quaternion, in float (double for float64 values). */
template <typename T, typename Acc>
__device__ void slerp_cols(const rc_fuse_args &a, const rc_fuse_stream &s, const Tile &t,
                           int quats, int64_t sd) {
    const int64_t F = a.out_features;
    T *out = out_units<T>(a, s) + t.first_out_row * F;
    const int n = t.count * quats;
    for (int k = threadIdx.x; k < n; k += kThreads) {
        int i = k / quats, c = k - i * quats;
        int64_t r0 = t.r0[i], r1 = t.r1[i];
        T *o = out + i * F + (int64_t)c * 4;
        if (r0 < 0) {
            memset(o, 0, 4 * sizeof(T));
            continue;
        }
        const T *x = (const T *)s.values + r0, *y = (const T *)s.values + r1;
        Acc q0[4], q1[4], r[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q0[j] = (Acc)to_f32(x[(c * 4 + j) * sd]);
            q1[j] = (Acc)to_f32(y[(c * 4 + j) * sd]);
        }
        slerp(r, q0, q1, (Acc)t.w[i]);
#pragma unroll
        for (int j = 0; j < 4; j++) from_f32(o[j], r[j]);
    }
}

__device__ __forceinline__ bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* 16-byte units need every row start of the stream aligned, in values and in out. */
__device__ __forceinline__ bool vec_ok(const rc_fuse_args &a, const rc_fuse_stream &s, int es) {
    return s.values_stride_d == 1 && (s.features * es) % 16 == 0 && aligned16(s.values) &&
           aligned16(a.out) && (s.column * es) % 16 == 0 && (a.out_features * es) % 16 == 0 &&
           (s.values_stride_s * es) % 16 == 0 && (s.offsets || (s.values_stride_b * es) % 16 == 0);
}

/* Value kinds: float types take every mode, integer/bool types (by size) copy only. */
template <typename T> struct Kind { static constexpr bool is_float = false; };
template <> struct Kind<float> { static constexpr bool is_float = true; using Acc = float; };
template <> struct Kind<double> { static constexpr bool is_float = true; using Acc = double; };
template <> struct Kind<f16_t> { static constexpr bool is_float = true; using Acc = float; };
template <> struct Kind<bf16_t> { static constexpr bool is_float = true; using Acc = float; };

template <typename T>
__device__ void write_cols(const rc_fuse_args &a, const rc_fuse_stream &s, const Tile &t) {
    constexpr int es = (int)sizeof(T);
    const int64_t D = s.features, sd = s.values_stride_d;
    const bool vec = vec_ok(a, s, es);
    if constexpr (Kind<T>::is_float) {
        if (s.mode == RC_SLERP) {
            slerp_cols<T, typename Kind<T>::Acc>(a, s, t, (int)(D / 4), sd);
            return;
        }
        if (s.mode == RC_LINEAR) {
            if (vec) lerp_cols<T, 16 / es>(a, s, t, (int)(D * es / 16), 1);
            else lerp_cols<T, 1>(a, s, t, (int)D, sd);
            return;
        }
    }
    if (vec) copy_cols<uint4>(a, s, t, (int)(D * es / 16), 1);
    else if constexpr (es == 1) copy_cols<uint8_t>(a, s, t, (int)D, sd);
    else if constexpr (es == 2) copy_cols<uint16_t>(a, s, t, (int)D, sd);
    else if constexpr (es == 4) copy_cols<uint32_t>(a, s, t, (int)D, sd);
    else copy_cols<unsigned long long>(a, s, t, (int)D, sd);
}

/* ---- phase 1: locate each target with a group of lanes (as cuda/resample.cu) ---- */

/* The answer is the exact upper bound (first sample with t > x), the same j the CPU's binary
 * search finds, so how it is found cannot change a bit of the output. Two stages cut the chain
 * of dependent loads: 256 block-wide splitters (all the block's targets share one row), then a
 * group of L lanes probing L split points per step inside the bucket. Every lane calls this. */
constexpr int64_t kSplitMin = 128; /* shorter rows: the group search alone takes <= 2 steps */

template <typename T>
__device__ int64_t tile_upper_bound(const T *t, int64_t st, int64_t n, T x, bool active, int L,
                                    T *s_split) {
    int64_t lo = 0, hi = active ? n : 0; /* the answer is in [lo, hi] */
    if (n > kSplitMin) {                 /* uniform across the block: same row and stream */
        const int64_t step0 = n / (kThreads + 1);
        s_split[threadIdx.x] = t[(threadIdx.x + 1) * step0 * st];
        __syncthreads();
        if (active) {
            int c = 0, e = kThreads; /* c = splitters <= x */
            while (c < e) {
                int m = (c + e) >> 1;
                if (s_split[m] <= x) c = m + 1; else e = m;
            }
            if (c > 0) lo = c * step0 + 1;
            if (c < kThreads) hi = (c + 1) * step0;
        }
    } /* no barrier here: the kernel's barrier after phase 1 orders reuse of s_split */
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
    return lo;
}

template <typename T>
__device__ void locate_tile(rc_locate *loc, const T *t, int64_t st, int64_t n, const T *xp,
                            bool active, int L, rc_mode mode, double tol, void *s_split);
#define RC_FUSE_LOCATE_TILE(T, FINISH)                                                          \
    template <>                                                                                 \
    __device__ void locate_tile<T>(rc_locate * loc, const T *t, int64_t st, int64_t n,          \
                                   const T *xp, bool active, int L, rc_mode mode, double tol,   \
                                   void *s_split) {                                             \
        const T x = active ? *xp : (T)0;                                                        \
        const int64_t j = tile_upper_bound<T>(t, st, n, x, active, L, (T *)s_split) - 1;        \
        if (active) FINISH(loc, t, st, n, x, j, mode, tol);                                     \
    }
RC_FUSE_LOCATE_TILE(float, rc_locate_f32_finish)
RC_FUSE_LOCATE_TILE(double, rc_locate_f64_finish)
RC_FUSE_LOCATE_TILE(int64_t, rc_locate_i64_finish)

/* ---- the kernel: for each stream, phase 1 then phase 2 ---- */

template <typename T>
__global__ void __launch_bounds__(kThreads)
fuse_kernel(const rc_fuse_args a, int tile, int L, int64_t tiles_per_row) {
    __shared__ int64_t s_r0[kMaxTile], s_r1[kMaxTile];
    __shared__ double s_w[kMaxTile];
    __shared__ double s_split[kThreads]; /* stage-1 splitters, as the times' type */
    const int64_t b = blockIdx.x / tiles_per_row;
    const int64_t t_begin = (blockIdx.x - b * tiles_per_row) * tile;
    const int count = (int)min((int64_t)tile, a.targets - t_begin);
    const int g = threadIdx.x / L; /* this lane's target in the tile */
    const bool active = g < count;
    const int64_t t = t_begin + g;
    const int tes = rc_dtype_size(a.times_dtype);
    const char *xp = (const char *)a.new_times +
                     (b * a.new_times_stride_b + (active ? t : 0) * a.new_times_stride_t) * tes;
    const Tile tl = {s_r0, s_r1, s_w, count, b * a.targets + t_begin};
    for (int k = 0; k < a.num_streams; k++) {
        const rc_fuse_stream &s = a.streams[k];
        int64_t v0, t0, n;
        rc_fuse_row_span(&v0, &t0, &n, &a, &s, b);
        const char *tp = (const char *)s.times + t0 * tes;
        rc_locate loc;
        if (a.times_dtype == RC_F64)
            locate_tile<double>(&loc, (const double *)tp, s.times_stride_s, n,
                                (const double *)xp, active, L, s.mode, a.tolerance, s_split);
        else if (a.times_dtype == RC_F32)
            locate_tile<float>(&loc, (const float *)tp, s.times_stride_s, n, (const float *)xp,
                               active, L, s.mode, a.tolerance, s_split);
        else
            locate_tile<int64_t>(&loc, (const int64_t *)tp, s.times_stride_s, n,
                                 (const int64_t *)xp, active, L, s.mode, a.tolerance, s_split);
        if (active && (threadIdx.x & (L - 1)) == 0) {
            if (a.is_pad) a.is_pad[(b * a.targets + t) * a.num_streams + k] = loc.pad;
            s_r0[g] = loc.i0 < 0 ? -1 : v0 + loc.i0 * s.values_stride_s;
            s_r1[g] = loc.i0 < 0 ? -1 : v0 + loc.i1 * s.values_stride_s;
            s_w[g] = loc.w;
        }
        __syncthreads();
        write_cols<T>(a, s, tl);
        __syncthreads(); /* the next stream overwrites s_r0/s_r1/s_w */
    }
}

int sm_count(int device) {
    static int cache[64]; /* benign race: every writer stores the same value */
    if (device >= 0 && device < 64 && cache[device]) return cache[device];
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n < 1)
        n = 132;
    if (device >= 0 && device < 64) cache[device] = n;
    return n;
}

template <typename T>
rc_status launch(const rc_fuse_args &a, int device, cudaStream_t stream) {
    const int es = rc_dtype_size(a.values_dtype);
    for (int k = 0; k < a.num_streams; k++)
        if (a.streams[k].features > ((int64_t)1 << 30) / kMaxTile) /* phase 2 indexes with int */
            return rc_fail(RC_ERR_VALUE, "fuse: stream %d has %lld features, too many for the "
                           "CUDA kernel", k, (long long)a.streams[k].features);
    /* Tile: ~2048 16-byte units of output per block (so each stream's search is amortized
     * over enough bytes), at most 128 targets, and small enough that the grid covers every
     * SM ~4 times. */
    const int64_t units = (a.out_features * es + 15) / 16;
    int64_t tile = 2048 / (units > 0 ? units : 1);
    const int64_t fill = (a.batch * a.targets + 4 * sm_count(device) - 1) / (4 * sm_count(device));
    if (tile > kMaxTile) tile = kMaxTile;
    if (tile > fill) tile = fill;
    if (tile > a.targets) tile = a.targets;
    if (tile < 1) tile = 1;
    int L = 32;
    while (L > 1 && (int64_t)L * tile > kThreads) L >>= 1;
    const int64_t tiles_per_row = (a.targets + tile - 1) / tile;
    const int64_t blocks = a.batch * tiles_per_row;
    if (blocks > INT32_MAX) return rc_fail(RC_ERR_VALUE, "fuse: batch * targets too large");
    fuse_kernel<T><<<(unsigned)blocks, kThreads, 0, stream>>>(a, (int)tile, L, tiles_per_row);
    return RC_CUDA_CHECK(cudaGetLastError(), "fuse kernel launch");
}

rc_status dispatch(const rc_fuse_args &a, int dev, cudaStream_t s) {
    switch (a.values_dtype) {
    case RC_F32: return launch<float>(a, dev, s);
    case RC_F64: return launch<double>(a, dev, s);
    case RC_F16: return launch<f16_t>(a, dev, s);
    case RC_BF16: return launch<bf16_t>(a, dev, s);
    default: break;
    }
    switch (rc_dtype_size(a.values_dtype)) { /* integers and bool: bits are copied */
    case 1: return launch<uint8_t>(a, dev, s);
    case 2: return launch<uint16_t>(a, dev, s);
    case 4: return launch<uint32_t>(a, dev, s);
    default: return launch<unsigned long long>(a, dev, s);
    }
}

} // namespace

extern "C" rc_status rc_fuse_cuda(const rc_fuse_args *args, int device, void *stream) {
    if (args->num_streams < 1 || args->num_streams > RC_FUSE_MAX_STREAMS)
        return rc_fail(RC_ERR_VALUE, "fuse: %d streams (expected 1..%d)", (int)args->num_streams,
                       RC_FUSE_MAX_STREAMS);
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = dispatch(*args, device, (cudaStream_t)stream);
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}
