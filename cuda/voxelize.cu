/* cuda/voxelize.cu: voxelize on the GPU, bit-identical to csrc/cpu/voxelize.c in deterministic
 * mode (every mode is; deterministic=False only changes sum/mean to float atomics).
 * Layouts (elements): out [B,X,Y,Z] or [B,F,X,Y,Z] contiguous, dropped [B]; points/features
 * strided (robocache.h). The dense grid dominates the bytes, so every path writes it once:
 * - occupancy of a small grid: a block per (cloud, slab of voxels) reads all of its cloud's
 *   points, sets its slab's bits in shared memory and writes the slab, zeros included (one
 *   launch, no memset; the points are re-read from L2, bounded to twice the output's bytes);
 * - occupancy of a grid of >= 32 MiB whose bitmap fits in half of L2: bits set in that bitmap
 *   (random atomics that stay in L2), then one kernel writes the whole grid from it;
 * - otherwise (count, sum/mean/max, occupancy of clouds too big for the slabs):
 *   cudaMemsetAsync of the grid, then the points scatter sparse stores and atomics into it
 *   (sum/mean/max through per-point slots).
 * Point loops read 4 points per thread (three 16-byte loads when float32 points are
 * contiguous). Caller's stream, no host sync.
 * Benchmark: benchmarks/bench_voxelize.py
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "../csrc/voxelize_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

typedef unsigned long long ull;

/* ---- where a block's points are ---- */

struct Cloud {
    int64_t b, r0, r1, s0; /* points [r0, r1) of cloud b; slot (flat) index of point r is s0 + r */
};

/* Clamped like the CPU path: unchecked offsets/lengths never read outside the arrays. */
__device__ __forceinline__ Cloud cloud_of(const rc_voxelize_args &a, int64_t b) {
    Cloud c;
    c.b = b;
    const int64_t n = a.points_per_cloud;
    if (a.offsets) {
        int64_t lo = __ldg(a.offsets + b * a.offsets_stride);
        int64_t hi = __ldg(a.offsets + (b + 1) * a.offsets_stride);
        lo = lo < 0 ? 0 : (lo > n ? n : lo);
        hi = hi < lo ? lo : (hi > n ? n : hi);
        c.r0 = lo;
        c.r1 = hi;
        c.s0 = 0;
    } else {
        int64_t hi = a.lengths ? __ldg(a.lengths + b * a.lengths_stride) : n;
        c.r0 = 0;
        c.r1 = hi < 0 ? 0 : (hi > n ? n : hi);
        c.s0 = b * n;
    }
    return c;
}

__device__ __forceinline__ double feature(const rc_voxelize_args &a, int64_t b, int64_t r,
                                          int64_t c) {
    return rc_vox_load(a.features,
                       b * a.features_stride_b + r * a.features_stride_n + c * a.features_stride_c,
                       a.features_dtype);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ ull warp_max(ull v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ull w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* A cheap pre-test on x before the exact binning (three float64 divisions): a point passes
 * when x's cell, approximated with a multiply by 1/size, lies in [lo, hi). The approximation is
 * within 3 ulp of the exact quotient, far less than a cell for any in-grid point, so a window
 * one cell wider than the wanted x-planes on each side never rejects a point that bins there.
 * Points a window rejects count as neither seen nor kept. */
struct XWindow {
    int on;
    double origin, inv, lo, hi;
};

/* ---- the point loop shared by every scatter-like pass ----
 * Visits cloud cl's points in groups of 4 consecutive slot indices: groups first, first + step,
 * ... of the cloud's (thread units); the trip count is uniform across the block so bodies may
 * use warp collectives. Adds to seen / kept how many in-range points the thread saw and kept. */
template <class Body>
__device__ __forceinline__ void visit_points(const rc_voxelize_args &a, const rc_vox_geom &g,
                                             const Cloud &cl, int64_t first, int64_t step,
                                             int vec, const Body &body, unsigned &seen,
                                             unsigned &kept, XWindow win = XWindow{0, 0, 0, 0, 0}) {
    const int64_t f0 = cl.s0 + cl.r0, f1 = cl.s0 + cl.r1;
    const int64_t g0 = f0 >> 2, g1 = (f1 + 3) >> 2;
    for (int64_t base = g0 + first; base < g1; base += step) {
        const int64_t grp = base + threadIdx.x, f = grp * 4;
        double x[4], y[4], z[4];
        bool in[4];
        if (grp < g1 && vec && f >= f0 && f + 4 <= f1) {
            /* 4 contiguous float32 points = 48 bytes = three aligned 16-byte loads */
            const float4 *p4 = (const float4 *)a.points + 3 * grp;
            const float4 q0 = __ldg(p4), q1 = __ldg(p4 + 1), q2 = __ldg(p4 + 2);
            x[0] = q0.x; y[0] = q0.y; z[0] = q0.z;
            x[1] = q0.w; y[1] = q1.x; z[1] = q1.y;
            x[2] = q1.z; y[2] = q1.w; z[2] = q2.x;
            x[3] = q2.y; y[3] = q2.z; z[3] = q2.w;
#pragma unroll
            for (int k = 0; k < 4; k++) in[k] = true;
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                in[k] = grp < g1 && f + k >= f0 && f + k < f1;
                x[k] = y[k] = z[k] = 0.0;
                if (in[k]) {
                    const int64_t e =
                        cl.b * a.points_stride_b + (f + k - cl.s0) * a.points_stride_n;
                    x[k] = rc_vox_load(a.points, e, a.points_dtype);
                    y[k] = rc_vox_load(a.points, e + a.points_stride_c, a.points_dtype);
                    z[k] = rc_vox_load(a.points, e + 2 * a.points_stride_c, a.points_dtype);
                }
            }
        }
        int64_t v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (win.on) {
                const double q = (x[k] - win.origin) * win.inv; /* NaN passes: binned, dropped */
                if (q < win.lo || q >= win.hi) in[k] = false;
            }
            v[k] = in[k] ? rc_vox_bin(&g, x[k], y[k], z[k]) : -1;
            seen += in[k];
            kept += v[k] >= 0;
        }
        body(a, cl, f - cl.s0, v);
    }
}

/* The block's totals of seen and kept, in thread 0 (every thread of the Warps must call it). */
template <int Warps = kWarps>
__device__ __forceinline__ void block_totals(unsigned seen, unsigned kept, ull &ts, ull &tk) {
    __shared__ unsigned s_seen[Warps], s_kept[Warps];
    seen = warp_sum(seen);
    kept = warp_sum(kept);
    if ((threadIdx.x & 31) == 0) {
        s_seen[threadIdx.x >> 5] = seen;
        s_kept[threadIdx.x >> 5] = kept;
    }
    __syncthreads();
    ts = tk = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < Warps; w++) {
            ts += s_seen[w];
            tk += s_kept[w];
        }
}

/* Block (b, chunk) of `chunks` per cloud visits its share of cloud b's points; the block adds
 * its kept and dropped points to kept_out[b] and dropped[b] with one atomic each. */
template <class Body>
__global__ void __launch_bounds__(kThreads)
points_kernel(const rc_voxelize_args a, const rc_vox_geom g, int64_t chunks, int vec,
              ull *kept_out, int64_t *dropped, Body body) {
    const int64_t b = blockIdx.x / chunks, chunk = blockIdx.x - b * chunks;
    const Cloud cl = cloud_of(a, b);
    unsigned seen = 0, kept = 0;
    visit_points(a, g, cl, chunk * kThreads, chunks * kThreads, vec, body, seen, kept);
    if (!kept_out && !dropped) return;
    ull ts, tk;
    block_totals(seen, kept, ts, tk);
    if (threadIdx.x == 0) {
        if (kept_out && tk) atomicAdd(kept_out + b, tk);
        if (dropped && ts > tk) atomicAdd((ull *)dropped + b, ts - tk);
    }
}

/* ---- bodies: what a pass does with 4 points (r = point index in the cloud of point 0) ---- */

struct NoBody { /* F == 0: only the dropped count */
    __device__ void operator()(const rc_voxelize_args &, const Cloud &, int64_t,
                               const int64_t *) const {}
};

/* Occupancy: plain stores of the same value; racing writers agree, so no atomics. */
template <typename U>
struct Occupancy {
    int64_t V;
    U one;
    __device__ void operator()(const rc_voxelize_args &a, const Cloud &cl, int64_t,
                               const int64_t *v) const {
        U *out = (U *)a.out + cl.b * V;
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (v[k] >= 0) out[v[k]] = one;
    }
};

/* Occupancy of a big grid: set the voxel's bit in the bitmap (flat index b*V + v). The bitmap
 * (B*V/8 bytes, at most half of L2) stays resident, so these atomics resolve in L2 instead of
 * costing a DRAM read-modify-write each; their result is unused (reductions, no round trip). */
struct Bits {
    int64_t V;
    uint32_t *words;
    __device__ void operator()(const rc_voxelize_args &, const Cloud &cl, int64_t,
                               const int64_t *v) const {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (v[k] < 0) continue;
            const int64_t i = cl.b * V + v[k];
            atomicOr(words + (i >> 5), 1u << (i & 31));
        }
    }
};

template <typename T>
struct Count {
    int64_t V;
    __device__ void operator()(const rc_voxelize_args &a, const Cloud &cl, int64_t,
                               const int64_t *v) const {
        T *out = (T *)a.out + cl.b * V;
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (v[k] >= 0) atomicAdd(out + v[k], (T)1);
    }
};

/* Deterministic sum/mean, pass 1: the largest finite |feature| per (cloud, channel). */
struct Stats {
    ull *maxabs; /* [B*F] bits of non-negative doubles: unsigned order == float order */
    __device__ void operator()(const rc_voxelize_args &a, const Cloud &cl, int64_t r,
                               const int64_t *v) const {
        const int64_t F = a.channels;
        for (int64_t c = 0; c < F; c++) {
            ull m = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (v[k] < 0) continue;
                ull bits = rc_vox_f64_bits(fabs(feature(a, cl.b, r + k, c)));
                if (bits < 0x7ff0000000000000ull && bits > m) m = bits;
            }
            m = warp_max(m);
            if ((threadIdx.x & 31) == 0 && m) atomicMax(maxabs + cl.b * F + c, m);
        }
    }
};

/* Sum/mean/max, pass 2: claim each voxel's slot, then accumulate into it.
 * Kind 0: fixed point (deterministic sum/mean); 1: float atomics; 2: max keys.
 * O: the output element (float or double), which also sizes the claim word. */
template <int Kind, typename O>
struct Scatter {
    int64_t V;
    uint32_t *counts;
    char *acc;
    uint8_t *flags;
    const ull *kept, *maxabs;
    __device__ void operator()(const rc_voxelize_args &a, const Cloud &cl, int64_t r,
                               const int64_t *v) const {
        const int64_t F = a.channels;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (v[k] < 0) continue;
            const int64_t mine = cl.s0 + r + k;
            int64_t slot;
            if (sizeof(O) == 8) {
                ull *w = (ull *)a.out + cl.b * F * V + v[k];
                ull old = atomicCAS(w, 0ull, (ull)mine + 1);
                slot = old ? (int64_t)old - 1 : mine;
            } else {
                unsigned *w = (unsigned *)a.out + cl.b * F * V + v[k];
                unsigned old = atomicCAS(w, 0u, (unsigned)(mine + 1));
                slot = old ? (int64_t)old - 1 : mine;
            }
            atomicAdd(counts + slot, 1u);
            for (int64_t c = 0; c < F; c++) {
                const double f = feature(a, cl.b, r + k, c);
                const int64_t i = slot * F + c;
                if (Kind == 0) {
                    const uint32_t sp = rc_vox_special(f);
                    if (sp) {
                        unsigned *word = (unsigned *)(flags + (i & ~(int64_t)3));
                        atomicOr(word, sp << (8 * (i & 3)));
                    } else {
                        const int s = rc_vox_shift(kept[cl.b], maxabs[cl.b * F + c]);
                        atomicAdd((ull *)acc + i, (ull)rc_vox_to_fixed(f, s));
                    }
                } else if (Kind == 1) {
                    if (sizeof(O) == 8) atomicAdd((double *)acc + i, f);
                    else atomicAdd((float *)acc + i, rc_vox_to_f32(f));
                } else {
                    if (sizeof(O) == 8) atomicMax((ull *)acc + i, (ull)rc_vox_key64(f));
                    else atomicMax((unsigned *)acc + i, rc_vox_key32(rc_vox_to_f32(f)));
                }
            }
        }
    }
};

__device__ __forceinline__ void store_out(float *o, double x) { *o = rc_vox_to_f32(x); }
__device__ __forceinline__ void store_out(double *o, double x) { *o = x; }

/* Pass 3: every claimed slot (count > 0) writes its voxel's F channels, overwriting the claim. */
template <int Kind, typename O>
__global__ void __launch_bounds__(kThreads)
finish_kernel(const rc_voxelize_args a, const rc_vox_geom g, int64_t chunks, int64_t V,
              const uint32_t *counts, const char *acc, const uint8_t *flags, const ull *kept,
              const ull *maxabs) {
    const int64_t b = blockIdx.x / chunks, chunk = blockIdx.x - b * chunks;
    const Cloud cl = cloud_of(a, b);
    const int64_t F = a.channels;
    const int mean = a.mode == RC_VOX_MEAN;
    for (int64_t r = cl.r0 + chunk * kThreads + threadIdx.x; r < cl.r1; r += chunks * kThreads) {
        const int64_t slot = cl.s0 + r;
        const uint32_t cnt = counts[slot];
        if (!cnt) continue;
        const int64_t e = b * a.points_stride_b + r * a.points_stride_n, sc = a.points_stride_c;
        const int64_t v = rc_vox_bin(&g, rc_vox_load(a.points, e, a.points_dtype),
                                     rc_vox_load(a.points, e + sc, a.points_dtype),
                                     rc_vox_load(a.points, e + 2 * sc, a.points_dtype));
        O *out = (O *)a.out + b * F * V + v;
        for (int64_t c = 0; c < F; c++) {
            const int64_t i = slot * F + c;
            double x;
            if (Kind == 0) {
                x = rc_vox_fixed_result(((const int64_t *)acc)[i], flags[i],
                                        rc_vox_shift(kept[b], maxabs[b * F + c]), cnt, mean);
            } else if (Kind == 1) {
                if (sizeof(O) == 8) {
                    const double s = ((const double *)acc)[i];
                    x = mean ? __ddiv_rn(s, (double)cnt) : s;
                } else {
                    const float s = ((const float *)acc)[i];
                    x = mean ? __fdiv_rn(s, (float)cnt) : s;
                }
            } else {
                x = sizeof(O) == 8 ? rc_vox_unkey64(((const ull *)acc)[i])
                                   : (double)rc_vox_unkey32(((const unsigned *)acc)[i]);
            }
            store_out(out + c * V, x);
        }
    }
}

/* ---- occupancy of a big grid, pass 2: bitmap -> dense output ----
 * Every output byte is written once, in order. Vector path (out 16-byte aligned): a warp takes
 * 32 consecutive bitmap words (one coalesced 128-byte load), which cover 1024 outputs =
 * 64 * sizeof(U) 16-byte vectors; in each of 2 * sizeof(U) steps lane l builds vector
 * 32 * step + l from the bits of the word that covers it (fetched with a shuffle), so each warp
 * store is one contiguous 512-byte run. Outputs past the last whole vector (B*V not a multiple
 * of 16 / sizeof(U)) and every output of a misaligned `out` take the scalar loop. */
template <typename U>
__device__ __forceinline__ uint4 expand16(uint32_t bits, U one) {
    constexpr int E = 16 / sizeof(U);
    union {
        uint4 v;
        U e[E];
    } r;
#pragma unroll
    for (int k = 0; k < E; k++) r.e[k] = ((bits >> k) & 1u) ? one : (U)0;
    return r.v;
}

template <typename U>
__global__ void __launch_bounds__(kThreads)
expand_kernel(U *out, const uint32_t *__restrict__ words, int64_t n, U one, int vec) {
    constexpr int E = 16 / sizeof(U);   /* outputs per 16-byte vector (divides 32) */
    constexpr int steps = 2 * sizeof(U); /* 64 * sizeof(U) vectors per 32 words, 32 per step */
    const int64_t nwords = (n + 31) >> 5, nvec = vec ? n / E : 0;
    const int64_t tid = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    const int64_t nthreads = (int64_t)gridDim.x * kThreads;
    const int lane = threadIdx.x & 31;
    if (vec) {
        uint4 *o4 = (uint4 *)out;
        const int64_t groups = (nvec * E + 1023) >> 10; /* groups of 32 words with a whole vector */
        for (int64_t grp = tid >> 5; grp < groups; grp += nthreads >> 5) { /* warp-uniform */
            const int64_t w = (grp << 5) + lane;
            const uint32_t mine = w < nwords ? __ldg(words + w) : 0u;
#pragma unroll
            for (int step = 0; step < steps; step++) {
                const int j = step * 32 + lane; /* vector within the group */
                const uint32_t word = __shfl_sync(0xffffffffu, mine, (j * E) >> 5);
                const int64_t gj = grp * (64 * (int64_t)sizeof(U)) + j;
                /* streaming (evict-first) stores: the grid passes through L2 once and should
                 * not push out the bitmap words still to be read */
                if (gj < nvec) __stcs(o4 + gj, expand16<U>(word >> ((j * E) & 31), one));
            }
        }
    }
    for (int64_t i = nvec * E + tid; i < n; i += nthreads)
        out[i] = ((__ldg(words + (i >> 5)) >> (i & 31)) & 1u) ? one : (U)0;
}

/* ---- occupancy of a small grid: one block per (cloud, slab of S voxels) ----
 * Every block visits all of its cloud's points (from L2 after the first block), sets the bits of
 * its slab's voxels in shared memory, then writes the whole slab. The slab of cloud b's first
 * block also counts the cloud's dropped points and stores them (no atomics, so no memset). */
constexpr int kOccSlabMax = 65536; /* voxels: an 8 KiB shared bitmap */
constexpr int kOccThreads = 1024;  /* a thread per 4 points of a 4096-point cloud: one round of
                                      loads in flight, not a chain of them */

struct SlabBits {
    int64_t v0, S;
    uint32_t *bits;
    __device__ void operator()(const rc_voxelize_args &, const Cloud &, int64_t,
                               const int64_t *v) const {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t i = v[k] - v0;
            if (i >= 0 && i < S) atomicOr(bits + (i >> 5), 1u << (i & 31)); /* v = -1: i < 0 */
        }
    }
};

template <typename U>
__global__ void __launch_bounds__(kOccThreads)
occupancy_slab_kernel(const rc_voxelize_args a, const rc_vox_geom g, int64_t V, int log2S,
                      int64_t slabs, int vec_points, int vec_out, U one) {
    __shared__ uint32_t bits[kOccSlabMax / 32];
    const int64_t b = blockIdx.x / slabs, s = blockIdx.x - b * slabs;
    const int64_t S = (int64_t)1 << log2S, v0 = s << log2S;
    const int64_t nv = V - v0 < S ? V - v0 : S;
    for (int64_t i = threadIdx.x; i < (nv + 31) >> 5; i += kOccThreads) bits[i] = 0;
    __syncthreads();
    /* only points whose x-plane the slab covers, except in the block that counts dropped */
    const int64_t YZ = g.Y * g.Z;
    const XWindow win = {!(s == 0 && a.dropped), g.origin[0], 1.0 / g.size[0],
                         (double)(v0 / YZ) - 1.0, (double)((v0 + nv - 1) / YZ) + 2.0};
    unsigned seen = 0, kept = 0;
    visit_points(a, g, cloud_of(a, b), 0, kOccThreads, vec_points, SlabBits{v0, S, bits}, seen,
                 kept, win);
    __syncthreads();
    if (!win.on) { /* uniform across the block */
        ull ts, tk;
        block_totals<kOccThreads / 32>(seen, kept, ts, tk);
        if (threadIdx.x == 0) a.dropped[b] = (int64_t)(ts - tk);
    }
    U *out = (U *)a.out + b * V + v0;
    if (vec_out) { /* out + b*V + v0 is 16-byte aligned and nv a multiple of E */
        constexpr int E = 16 / sizeof(U); /* divides 32: a vector's bits lie in one word */
        for (int64_t j = threadIdx.x; j < nv / E; j += kOccThreads)
            ((uint4 *)out)[j] = expand16<U>(bits[(j * E) >> 5] >> ((j * E) & 31), one);
    } else {
        for (int64_t i = threadIdx.x; i < nv; i += kOccThreads)
            out[i] = ((bits[i >> 5] >> (i & 31)) & 1u) ? one : (U)0;
    }
}

/* ---- launchers ---- */

struct Launch {
    const rc_voxelize_args &a;
    rc_vox_geom g;
    cudaStream_t s;
    int64_t chunks4, chunks1; /* blocks per cloud for the 4-point loop and the 1-point loop */
    int vec;

    template <class Body>
    rc_status points(ull *kept_out, int64_t *dropped, Body body, const char *what) const {
        if (a.batch == 0) return RC_OK;
        points_kernel<Body><<<(unsigned)(a.batch * chunks4), kThreads, 0, s>>>(
            a, g, chunks4, vec, kept_out, dropped, body);
        return RC_CUDA_CHECK(cudaGetLastError(), what);
    }
};

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

template <int Kind, typename O>
rc_status slots(const Launch &L, const rc_vox_layout &l, int64_t V) {
    const rc_voxelize_args &a = L.a;
    char *ws = (char *)a.workspace;
    Scatter<Kind, O> body;
    body.V = V;
    body.counts = (uint32_t *)(ws + l.counts);
    body.acc = ws + l.acc;
    body.flags = (uint8_t *)(ws + l.flags);
    body.kept = (const ull *)(ws + l.kept);
    body.maxabs = (const ull *)(ws + l.maxabs);
    rc_status st;
    if (Kind == 0) {
        Stats stats = {(ull *)(ws + l.maxabs)};
        st = L.points((ull *)(ws + l.kept), a.dropped, stats, "voxelize stats kernel launch");
        if (st != RC_OK) return st;
        st = L.points(nullptr, nullptr, body, "voxelize scatter kernel launch");
    } else {
        st = L.points(nullptr, a.dropped, body, "voxelize scatter kernel launch");
    }
    if (st != RC_OK || a.batch == 0) return st;
    finish_kernel<Kind, O><<<(unsigned)(a.batch * L.chunks1), kThreads, 0, L.s>>>(
        a, L.g, L.chunks1, V, body.counts, body.acc, body.flags, body.kept, body.maxabs);
    return RC_CUDA_CHECK(cudaGetLastError(), "voxelize finish kernel launch");
}

template <typename O>
rc_status slots_for(const Launch &L, const rc_vox_layout &l, int64_t V) {
    if (L.a.mode == RC_VOX_MAX) return slots<2, O>(L, l, V);
    return l.fixed ? slots<0, O>(L, l, V) : slots<1, O>(L, l, V);
}

template <typename U>
Occupancy<U> occupancy(int64_t V, U one) {
    Occupancy<U> o;
    o.V = V;
    o.one = one;
    return o;
}

/* Calls f(one): `one` is 1 in the occupancy output's dtype, as the unsigned type of its size
 * (occupancy writes 0 or that bit pattern, whatever the dtype). */
template <class F>
rc_status with_one(rc_dtype dt, F &&f) {
    switch (rc_dtype_size(dt)) {
    case 1: return f((uint8_t)1);
    case 2: return f((uint16_t)(dt == RC_F16 ? 0x3c00 : 0x3f80));
    case 4: return f(0x3f800000u);
    default: return f(0x3ff0000000000000ull);
    }
}

template <typename U>
rc_status expand(const rc_voxelize_args &a, const uint32_t *words, int64_t n, U one,
                 cudaStream_t s) {
    if (n == 0) return RC_OK;
    const int vec = aligned16(a.out);
    /* a warp per 32 words (vec) or a thread per output; a grid-stride loop covers the rest */
    int64_t blocks = ceil_div(vec ? 32 * ceil_div(n, 1024) : n, kThreads);
    if (blocks > ((int64_t)1 << 16)) blocks = (int64_t)1 << 16;
    expand_kernel<U><<<(unsigned)blocks, kThreads, 0, s>>>((U *)a.out, words, n, one, vec);
    return RC_CUDA_CHECK(cudaGetLastError(), "voxelize expand kernel launch");
}

/* Occupancy of a big grid through the bitmap: zero it (B*V/8 bytes instead of the output), set
 * bits, then write the whole output once from it. */
rc_status occupancy_bitmap(const Launch &L, const rc_vox_layout &l, int64_t V) {
    const rc_voxelize_args &a = L.a;
    uint32_t *words = (uint32_t *)((char *)a.workspace + l.bitmap);
    rc_status st = RC_CUDA_CHECK(cudaMemsetAsync(words, 0, (size_t)l.bitmap_bytes, L.s),
                                 "cudaMemsetAsync (bitmap)");
    if (st == RC_OK && a.dropped)
        st = RC_CUDA_CHECK(cudaMemsetAsync(a.dropped, 0, (size_t)(a.batch * 8), L.s),
                           "cudaMemsetAsync (dropped)");
    if (st == RC_OK) st = L.points(nullptr, a.dropped, Bits{V, words}, "voxelize bits kernel launch");
    if (st != RC_OK) return st;
    const int64_t n = a.batch * V;
    return with_one(a.out_dtype, [&](auto one) { return expand(a, words, n, one, L.s); });
}

/* log2 of the voxels per block of the small-grid occupancy path, or -1 for another path. Slabs
 * grow from 2048 voxels while there are more than 128 blocks (about one wave of 1024-thread
 * blocks) or while a slab's output is under 6 bytes per point of its cloud: every block re-reads
 * the cloud's 12-byte points, so that bounds the re-reads to twice the output's bytes. */
int occupancy_slab_log2(const rc_voxelize_args &a, int64_t V, int64_t per_cloud) {
    const int64_t size = rc_dtype_size(a.out_dtype);
    if (a.batch * V * size >= RC_VOX_BITMAP_MIN) return -1;
    int log2S = 11;
    auto small = [&](int k) { return (size << k) < 6 * per_cloud; };
    while (((int64_t)1 << log2S) < kOccSlabMax && ((int64_t)1 << log2S) < V &&
           (a.batch * ceil_div(V, (int64_t)1 << log2S) > 128 || small(log2S)))
        log2S++;
    return ((int64_t)1 << log2S) < V && small(log2S) ? -1 : log2S;
}

template <typename U>
rc_status occupancy_slabs_of(const Launch &L, int64_t V, int log2S, U one) {
    const rc_voxelize_args &a = L.a;
    const int64_t slabs = ceil_div(V, (int64_t)1 << log2S);
    const int vec_out = aligned16(a.out) && (V * (int64_t)sizeof(U)) % 16 == 0;
    occupancy_slab_kernel<U><<<(unsigned)(a.batch * slabs), kOccThreads, 0, L.s>>>(
        a, L.g, V, log2S, slabs, L.vec, vec_out, one);
    return RC_CUDA_CHECK(cudaGetLastError(), "voxelize occupancy slab kernel launch");
}

rc_status occupancy_slabs(const Launch &L, int64_t V, int log2S) {
    return with_one(L.a.out_dtype, [&](auto one) { return occupancy_slabs_of(L, V, log2S, one); });
}

rc_status dispatch(const rc_voxelize_args &a, int device, cudaStream_t s) {
    if (a.batch == 0) return RC_OK;
    const int64_t V = a.grid[0] * a.grid[1] * a.grid[2];
    const int feat_mode = a.mode >= RC_VOX_SUM;
    const int64_t out_bytes =
        a.batch * (feat_mode ? a.channels : 1) * V * rc_dtype_size(a.out_dtype);
    rc_vox_layout l;
    rc_vox_layout_of(&l, &a);

    const int64_t per_cloud =
        a.offsets ? ceil_div(a.points_per_cloud, a.batch) : a.points_per_cloud;
    Launch L = {a, rc_vox_geom_of(&a), s, 1, 1, 0};
    L.chunks4 = ceil_div(ceil_div(per_cloud, 4) + 1, kThreads);
    L.chunks1 = ceil_div(per_cloud, kThreads);
    const int64_t max_chunks = (int64_t)INT32_MAX / a.batch;
    if (L.chunks4 < 1) L.chunks4 = 1;
    if (L.chunks1 < 1) L.chunks1 = 1;
    if (L.chunks4 > max_chunks) L.chunks4 = max_chunks;
    if (L.chunks1 > max_chunks) L.chunks1 = max_chunks;
    /* flat slot index f is element 3f of points: dense contiguous [B,N,3] or ragged [P,3] */
    L.vec = a.points_dtype == RC_F32 && a.points_stride_c == 1 && a.points_stride_n == 3 &&
            (a.offsets || a.batch == 1 || a.points_stride_b == 3 * a.points_per_cloud) &&
            aligned16(a.points);

    /* paths that write the whole output themselves */
    if (a.mode == RC_VOX_OCCUPANCY) {
        /* a big grid whose bitmap fits comfortably in L2 (half of it: the points stream through
         * L2 too) */
        if (l.bitmap_bytes > 0 && l.bitmap_bytes <= rc_device_attr(device, RC_ATTR_L2_BYTES) / 2)
            return occupancy_bitmap(L, l, V);
        const int log2S = occupancy_slab_log2(a, V, per_cloud);
        if (log2S >= 0) /* under 32 MiB of output: far fewer than 2^31 blocks */
            return occupancy_slabs(L, V, log2S);
    }

    /* the rest: the dense grid zeroed at full bandwidth, then sparse stores */
    rc_status st = RC_OK;
    if (out_bytes > 0)
        st = RC_CUDA_CHECK(cudaMemsetAsync(a.out, 0, (size_t)out_bytes, s),
                           "cudaMemsetAsync (out)");
    if (st == RC_OK && a.dropped)
        st = RC_CUDA_CHECK(cudaMemsetAsync(a.dropped, 0, (size_t)(a.batch * 8), s),
                           "cudaMemsetAsync (dropped)");
    if (st == RC_OK && l.total && !l.bitmap_bytes) /* an unused bitmap needs no zeros */
        st = RC_CUDA_CHECK(cudaMemsetAsync(a.workspace, 0, (size_t)l.total, s),
                           "cudaMemsetAsync (workspace)");
    if (st != RC_OK) return st;

    switch (a.mode) {
    case RC_VOX_OCCUPANCY:
        return with_one(a.out_dtype, [&](auto one) {
            return L.points(nullptr, a.dropped, occupancy(V, one), "voxelize kernel launch");
        });
    case RC_VOX_COUNT:
        if (a.out_dtype == RC_I32) return L.points(nullptr, a.dropped, Count<int>{V}, "voxelize kernel launch");
        return L.points(nullptr, a.dropped, Count<ull>{V}, "voxelize kernel launch");
    default:
        if (a.channels == 0) /* nothing to write; only dropped, when asked */
            return a.dropped ? L.points(nullptr, a.dropped, NoBody(), "voxelize kernel launch")
                             : RC_OK;
        return a.out_dtype == RC_F64 ? slots_for<double>(L, l, V) : slots_for<float>(L, l, V);
    }
}

} // namespace

extern "C" rc_status rc_voxelize_cuda(const rc_voxelize_args *args, int device, void *stream) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = dispatch(*args, device, (cudaStream_t)stream);
    if (st == RC_OK && args->sync)
        st = RC_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}

extern "C" rc_status rc_voxelize_check_cuda(rc_check_result *result, const rc_voxelize_args *args,
                                            int device, void *stream) {
    const rc_voxelize_args &a = *args;
    cudaStream_t s = (cudaStream_t)stream;
    result->kind = RC_CHECK_OK;
    result->row = 0;
    result->i = 0;
    const int64_t *src = a.offsets ? a.offsets : a.lengths;
    if (!src) return RC_OK;
    const int64_t n = a.offsets ? a.batch + 1 : a.batch, stride = a.offsets ? a.offsets_stride
                                                                            : a.lengths_stride;
    if (n == 0) return RC_OK;
    /* a page-locked staging buffer would be faster; this path runs only when check=True */
    int64_t *host = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!host) return rc_fail(RC_ERR_NOMEM, "voxelize check: cannot allocate %lld bytes",
                              (long long)(n * 8));
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st == RC_OK && stride >= 1)
        st = RC_CUDA_CHECK(cudaMemcpy2DAsync(host, sizeof(int64_t), src,
                                             (size_t)stride * sizeof(int64_t), sizeof(int64_t),
                                             (size_t)n, cudaMemcpyDeviceToHost, s),
                           "cudaMemcpy2DAsync");
    for (int64_t i = 0; st == RC_OK && stride < 1 && i < n; i++) /* broadcast or reversed */
        st = RC_CUDA_CHECK(cudaMemcpyAsync(host + i, src + i * stride, sizeof(int64_t),
                                           cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync");
    if (st == RC_OK) st = RC_CUDA_CHECK(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (st == RC_OK) {
        rc_voxelize_args h = a;
        if (a.offsets) {
            h.offsets = host;
            h.offsets_stride = 1;
        } else {
            h.lengths = host;
            h.lengths_stride = 1;
        }
        st = rc_voxelize_check_cpu(result, &h);
    }
    rc_status st2 = guard.leave();
    free(host);
    return st != RC_OK ? st : st2;
}
