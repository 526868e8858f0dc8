/* cuda/resample.cu: resample on the GPU, bit-identical to csrc/cpu/resample.c (slerp aside).
 * Layouts (elements): out [B,T,D] contiguous, is_pad [B,T]; inputs strided (robocache.h).
 * One block per (row, tile of targets): phase 1 locates each target once (binary search,
 * results in shared memory), phase 2 streams the tile's output rows with 16-byte loads and
 * stores across the feature dim when the layout allows. Caller's stream, no host sync.
 * Benchmark: python benchmarks/bench_resample.py
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/resample_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTile = 256; /* targets per block; phase 1 uses one thread per target */

struct Tile {
    const int64_t *r0, *r1; /* element offset of each target's rows in values; -1: empty row */
    const double *w;
    int count;              /* targets in this tile */
    int64_t first_out_row;  /* b * T + first target */
};

/* ---- element types and the lerp, exactly as the CPU does it ---- */

struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(f16_t x) { return rc_f16_to_f32(x.bits); }
__device__ __forceinline__ float to_f32(bf16_t x) { return rc_bf16_to_f32(x.bits); }
__device__ __forceinline__ void from_f32(float &o, float x) { o = x; }
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

/* ---- phase 2 bodies ---- */

/* Copy modes (and edge/exact hits): moves units of U bytes; `su` is the source unit stride. */
template <typename U>
struct CopyBody {
    __device__ void operator()(const rc_resample_args &a, const Tile &t, int64_t units,
                               int64_t su) const {
        const int es = rc_dtype_size(a.values_dtype);
        U *out = (U *)a.out + t.first_out_row * units;
        const int n = t.count * (int)units;
#pragma unroll 4
        for (int k = threadIdx.x; k < n; k += kThreads) {
            int i = k / (int)units, c = k - i * (int)units;
            int64_t r = t.r0[i];
            U v;
            if (r >= 0) v = ((const U *)((const char *)a.values + r * es))[c * su];
            else memset(&v, 0, sizeof v);
            out[k] = v;
        }
    }
};

/* Linear: units of N elements of T (N > 1 only when contiguous and 16-byte aligned). */
template <typename T, int N>
struct LerpBody {
    __device__ void operator()(const rc_resample_args &a, const Tile &t, int64_t units,
                               int64_t su) const {
        using V = Vec<T, N>;
        V *out = (V *)a.out + t.first_out_row * units;
        const int n = t.count * (int)units;
#pragma unroll 4
        for (int k = threadIdx.x; k < n; k += kThreads) {
            int i = k / (int)units, c = k - i * (int)units;
            int64_t r0 = t.r0[i], r1 = t.r1[i];
            double w = t.w[i];
            V o;
            if (r0 < 0) {
                memset(&o, 0, sizeof o);
            } else {
                V x = ((const V *)((const T *)a.values + r0))[c * su];
                if (w == 0.0) {
                    o = x; /* exactly on a sample: keep it bit for bit (inf stays inf) */
                } else {
                    V y = ((const V *)((const T *)a.values + r1))[c * su];
#pragma unroll
                    for (int j = 0; j < N; j++) o.v[j] = lerp<T>(x.v[j], y.v[j], w);
                }
            }
            out[k] = o;
        }
    }
};

/* Slerp: one thread per quaternion; computed in float (double for float64 values). */
template <typename T, typename Acc>
struct SlerpBody {
    __device__ void operator()(const rc_resample_args &a, const Tile &t, int64_t units,
                               int64_t su) const {
        T *out = (T *)a.out + t.first_out_row * units * 4;
        const int n = t.count * (int)units;
        for (int k = threadIdx.x; k < n; k += kThreads) {
            int i = k / (int)units, c = k - i * (int)units;
            int64_t r0 = t.r0[i], r1 = t.r1[i];
            T *o = out + (int64_t)k * 4;
            if (r0 < 0) {
                memset(o, 0, 4 * sizeof(T));
                continue;
            }
            const T *x = (const T *)a.values + r0, *y = (const T *)a.values + r1;
            Acc q0[4], q1[4], r[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                q0[j] = (Acc)to_f32_or_self(x[(c * 4 + j) * su]);
                q1[j] = (Acc)to_f32_or_self(y[(c * 4 + j) * su]);
            }
            slerp(r, q0, q1, (Acc)t.w[i]);
#pragma unroll
            for (int j = 0; j < 4; j++) store(o[j], r[j]);
        }
    }
    __device__ static float to_f32_or_self(float x) { return x; }
    __device__ static float to_f32_or_self(f16_t x) { return to_f32(x); }
    __device__ static float to_f32_or_self(bf16_t x) { return to_f32(x); }
    __device__ static double to_f32_or_self(double x) { return x; }
    __device__ static void slerp(float *r, const float *q0, const float *q1, float w) {
        rc_slerp_f32(r, q0, q1, w);
    }
    __device__ static void slerp(double *r, const double *q0, const double *q1, double w) {
        rc_slerp_f64(r, q0, q1, w);
    }
    __device__ static void store(float &o, float x) { o = x; }
    __device__ static void store(double &o, double x) { o = x; }
    __device__ static void store(f16_t &o, float x) { from_f32(o, x); }
    __device__ static void store(bf16_t &o, float x) { from_f32(o, x); }
};

/* ---- phase 1: locate each target with a group of lanes ---- */

/* Finding, for each target, the first sample with t > x is a chain of dependent loads, and
 * with times cold in L2 that latency (not bandwidth) bounds small batches. Two stages cut the
 * chain to ~2 loads for rows up to ~10^4 samples:
 * 1. the block (all its targets share one row) loads 256 evenly spaced splitters at once and
 *    each target finds its bucket among them in shared memory;
 * 2. a group of L lanes (a power of two <= 32, consecutive in a warp) searches the bucket,
 *    each lane probing one of L split points per step, so a step divides the range by ~L+1.
 * Step sizes are approximate on purpose (no integer division); the bounds stay exact, so the
 * answer is the CPU's binary-search answer. Every lane of the block calls this. */
constexpr int64_t kSplitMin = 128; /* shorter rows skip stage 1: the group search alone takes <= 2 steps */

template <typename T>
__device__ int64_t tile_upper_bound(const T *t, int64_t st, int64_t n, T x, bool active, int L,
                                    T *s_split) {
    int64_t lo = 0, hi = active ? n : 0; /* the answer is in [lo, hi] */
    if (n > kSplitMin) {                 /* uniform across the block: same row */
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
    return lo;
}

template <typename T>
__device__ void locate_tile(rc_locate *loc, const T *t, int64_t st, int64_t n, const T *xp,
                            bool active, int L, rc_mode mode, double tol, void *s_split);
#define RC_LOCATE_TILE(T, FINISH)                                                               \
    template <>                                                                                 \
    __device__ void locate_tile<T>(rc_locate * loc, const T *t, int64_t st, int64_t n,          \
                                   const T *xp, bool active, int L, rc_mode mode, double tol,   \
                                   void *s_split) {                                             \
        const T x = active ? *xp : (T)0;                                                        \
        const int64_t j = tile_upper_bound<T>(t, st, n, x, active, L, (T *)s_split) - 1;        \
        if (active) FINISH(loc, t, st, n, x, j, mode, tol);                                     \
    }
RC_LOCATE_TILE(float, rc_locate_f32_finish)
RC_LOCATE_TILE(double, rc_locate_f64_finish)
RC_LOCATE_TILE(int64_t, rc_locate_i64_finish)

/* ---- the kernel: phase 1 (locate) is shared by every body ---- */

template <class Body>
__global__ void __launch_bounds__(kThreads)
resample_kernel(const rc_resample_args a, int tile, int L, int64_t tiles_per_row, int64_t units,
                int64_t su, Body body) {
    __shared__ int64_t s_r0[kMaxTile], s_r1[kMaxTile];
    __shared__ double s_w[kMaxTile];
    __shared__ double s_split[kThreads]; /* stage-1 splitters, as the times' type */
    const int64_t b = blockIdx.x / tiles_per_row;
    const int64_t t_begin = (blockIdx.x - b * tiles_per_row) * tile;
    const int count = (int)min((int64_t)tile, a.targets - t_begin);
    const int g = threadIdx.x / L; /* this lane's target in the tile */
    const bool active = g < count;
    {
        const int tes = rc_dtype_size(a.times_dtype);
        int64_t v0, t0, n;
        rc_row_span(&v0, &t0, &n, &a, b);
        const int64_t t = t_begin + g;
        const char *tp = (const char *)a.times + t0 * tes;
        const char *xp = (const char *)a.new_times +
                         (b * a.new_times_stride_b + (active ? t : 0) * a.new_times_stride_t) * tes;
        rc_locate loc;
        if (a.times_dtype == RC_F64)
            locate_tile<double>(&loc, (const double *)tp, a.times_stride_s, n, (const double *)xp,
                                active, L, a.mode, a.tolerance, s_split);
        else if (a.times_dtype == RC_F32)
            locate_tile<float>(&loc, (const float *)tp, a.times_stride_s, n, (const float *)xp,
                               active, L, a.mode, a.tolerance, s_split);
        else
            locate_tile<int64_t>(&loc, (const int64_t *)tp, a.times_stride_s, n,
                                 (const int64_t *)xp, active, L, a.mode, a.tolerance, s_split);
        if (active && (threadIdx.x & (L - 1)) == 0) {
            if (a.is_pad) a.is_pad[b * a.targets + t] = loc.pad;
            s_r0[g] = loc.i0 < 0 ? -1 : v0 + loc.i0 * a.values_stride_s;
            s_r1[g] = loc.i0 < 0 ? -1 : v0 + loc.i1 * a.values_stride_s;
            s_w[g] = loc.w;
        }
    }
    __syncthreads();
    Tile tl = {s_r0, s_r1, s_w, count, b * a.targets + t_begin};
    body(a, tl, units, su);
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

template <class Body>
rc_status launch(const rc_resample_args &a, int64_t units, int64_t su, int device,
                 cudaStream_t stream, Body body) {
    if (units > ((int64_t)1 << 30)) /* phase 2 indexes a tile's units with int */
        return rc_fail(RC_ERR_VALUE, "resample: rows of %lld vector units are too large for the "
                       "CUDA kernel", (long long)units);
    /* Tile: ~2048 units of phase-2 work per block (so the search is amortized over enough
     * bytes), at most 128 targets, and small enough that the grid covers every SM ~4 times. */
    int64_t tile = 2048 / (units > 0 ? units : 1);
    const int64_t fill = (a.batch * a.targets + 4 * sm_count(device) - 1) / (4 * sm_count(device));
    if (tile > 128) tile = 128;
    if (tile > fill) tile = fill;
    if (tile > a.targets) tile = a.targets;
    if (tile < 1) tile = 1;
    int L = 32;
    while (L > 1 && (int64_t)L * tile > kThreads) L >>= 1;
    const int64_t tiles_per_row = (a.targets + tile - 1) / tile;
    const int64_t blocks = a.batch * tiles_per_row;
    if (blocks > INT32_MAX) return rc_fail(RC_ERR_VALUE, "resample: batch * targets too large");
    resample_kernel<Body><<<(unsigned)blocks, kThreads, 0, stream>>>(a, (int)tile, L,
                                                                   tiles_per_row, units, su, body);
    return RC_CUDA_CHECK(cudaGetLastError(), "resample kernel launch");
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

rc_status dispatch(const rc_resample_args &a, int dev, cudaStream_t s) {
    const int es = rc_dtype_size(a.values_dtype);
    const int64_t D = a.features, sd = a.values_stride_d;
    /* 16-byte units need every row start aligned: base, row strides and the row size */
    const bool vec = sd == 1 && (D * es) % 16 == 0 && aligned16(a.values) && aligned16(a.out) &&
                     (a.values_stride_s * es) % 16 == 0 &&
                     (a.offsets || (a.values_stride_b * es) % 16 == 0);
    if (a.mode == RC_SLERP) {
        switch (a.values_dtype) {
        case RC_F32: return launch(a, D / 4, sd, dev, s, SlerpBody<float, float>());
        case RC_F64: return launch(a, D / 4, sd, dev, s, SlerpBody<double, double>());
        case RC_F16: return launch(a, D / 4, sd, dev, s, SlerpBody<f16_t, float>());
        default: return launch(a, D / 4, sd, dev, s, SlerpBody<bf16_t, float>());
        }
    }
    if (a.mode == RC_LINEAR) {
        switch (a.values_dtype) {
        case RC_F32:
            return vec ? launch(a, D / 4, 1, dev, s, LerpBody<float, 4>())
                       : launch(a, D, sd, dev, s, LerpBody<float, 1>());
        case RC_F64:
            return vec ? launch(a, D / 2, 1, dev, s, LerpBody<double, 2>())
                       : launch(a, D, sd, dev, s, LerpBody<double, 1>());
        case RC_F16:
            return vec ? launch(a, D / 8, 1, dev, s, LerpBody<f16_t, 8>())
                       : launch(a, D, sd, dev, s, LerpBody<f16_t, 1>());
        default:
            return vec ? launch(a, D / 8, 1, dev, s, LerpBody<bf16_t, 8>())
                       : launch(a, D, sd, dev, s, LerpBody<bf16_t, 1>());
        }
    }
    if (vec) return launch(a, D * es / 16, 1, dev, s, CopyBody<uint4>());
    switch (es) {
    case 1: return launch(a, D, sd, dev, s, CopyBody<uint8_t>());
    case 2: return launch(a, D, sd, dev, s, CopyBody<uint16_t>());
    case 4: return launch(a, D, sd, dev, s, CopyBody<uint32_t>());
    default: return launch(a, D, sd, dev, s, CopyBody<unsigned long long>());
    }
}

/* ---- content check: offsets first, then one block per output row ---- */

__device__ void report(int64_t *scratch, int64_t kind, int64_t row, int64_t i) {
    if (atomicCAS((unsigned long long *)scratch, 0ull, (unsigned long long)kind) == 0ull) {
        scratch[1] = row;
        scratch[2] = i;
    }
}

__global__ void check_offsets_kernel(int64_t *scratch, const rc_resample_args a) {
    const int64_t *off = a.offsets;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e <= a.episodes;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t v = off[e * a.offsets_stride];
        bool bad = (e == 0 && v != 0) || (e == a.episodes && v != a.samples) ||
                   (e > 0 && v < off[(e - 1) * a.offsets_stride]);
        if (bad) report(scratch, RC_CHECK_OFFSETS, e, 0);
    }
}

template <typename T>
__device__ bool finite(T x) { return isfinite((double)x); }
template <>
__device__ bool finite<int64_t>(int64_t) { return true; }

template <typename T>
__global__ void check_rows_kernel(int64_t *scratch, const rc_resample_args a) {
    __shared__ int ok;
    const int64_t b = blockIdx.x;
    if (threadIdx.x == 0) {
        ok = scratch[0] == 0; /* offsets already bad: their spans cannot be trusted */
        if (ok && a.offsets) {
            int64_t e = a.index[b * a.index_stride];
            if (e < 0 || e >= a.episodes) { report(scratch, RC_CHECK_INDEX, b, 0); ok = 0; }
        } else if (ok && a.lengths) {
            int64_t n = a.lengths[b * a.lengths_stride];
            if (n < 0 || n > a.samples) { report(scratch, RC_CHECK_LENGTHS, b, 0); ok = 0; }
        }
    }
    __syncthreads();
    if (!ok) return;
    int64_t v0, t0, n;
    rc_row_span(&v0, &t0, &n, &a, b);
    const T *t = (const T *)a.times + t0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        T x = t[i * a.times_stride_s];
        if (!finite(x)) report(scratch, RC_CHECK_TIMES_NONFINITE, b, i);
        else if (i > 0 && x < t[(i - 1) * a.times_stride_s])
            report(scratch, RC_CHECK_TIMES_UNSORTED, b, i);
    }
}

} // namespace

extern "C" rc_status rc_resample_cuda(const rc_resample_args *args, int device, void *stream) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = dispatch(*args, device, (cudaStream_t)stream);
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}

extern "C" rc_status rc_resample_check_cuda(rc_check_result *result, int64_t *scratch,
                                            const rc_resample_args *args, int device,
                                            void *stream) {
    const rc_resample_args &a = *args;
    cudaStream_t s = (cudaStream_t)stream;
    int64_t host[3] = {0, 0, 0};
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = RC_CUDA_CHECK(cudaMemsetAsync(scratch, 0, 3 * sizeof(int64_t), s), "cudaMemsetAsync");
    if (st == RC_OK && a.offsets) {
        check_offsets_kernel<<<(unsigned)((a.episodes + 1 + 255) / 256 < 1024
                                             ? (a.episodes + 1 + 255) / 256 : 1024),
                               256, 0, s>>>(scratch, a);
        st = RC_CUDA_CHECK(cudaGetLastError(), "check_offsets_kernel launch");
    }
    if (st == RC_OK && a.batch > 0) {
        if (a.times_dtype == RC_F32) check_rows_kernel<float><<<(unsigned)a.batch, 256, 0, s>>>(scratch, a);
        else if (a.times_dtype == RC_F64) check_rows_kernel<double><<<(unsigned)a.batch, 256, 0, s>>>(scratch, a);
        else check_rows_kernel<int64_t><<<(unsigned)a.batch, 256, 0, s>>>(scratch, a);
        st = RC_CUDA_CHECK(cudaGetLastError(), "check_rows_kernel launch");
    }
    if (st == RC_OK)
        st = RC_CUDA_CHECK(cudaMemcpyAsync(host, scratch, sizeof host, cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync");
    if (st == RC_OK) st = RC_CUDA_CHECK(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    rc_status st2 = guard.leave();
    result->kind = host[0];
    result->row = host[1];
    result->i = host[2];
    return st != RC_OK ? st : st2;
}
