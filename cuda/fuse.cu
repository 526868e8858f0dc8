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
#include "resample_device.cuh"

namespace {

using rc::kThreads;
constexpr int kMaxTile = 128; /* targets per block */

/* 16-byte units need every row start of the stream aligned, in values and in out. */
__device__ __forceinline__ bool vec_ok(const rc_fuse_args &a, const rc_fuse_stream &s, int es) {
    return s.values_stride_d == 1 && (s.features * es) % 16 == 0 && rc::aligned16(s.values) &&
           rc::aligned16(a.out) && (s.column * es) % 16 == 0 && (a.out_features * es) % 16 == 0 &&
           (s.values_stride_s * es) % 16 == 0 && (s.offsets || (s.values_stride_b * es) % 16 == 0);
}

/* ---- the kernel: for each stream, phase 1 then phase 2 ---- */

template <typename T>
__global__ void __launch_bounds__(kThreads)
fuse_kernel(const rc_fuse_args a, int tile, int L, int64_t tiles_per_row) {
    __shared__ int64_t s_r0[kMaxTile], s_r1[kMaxTile];
    __shared__ double s_w[kMaxTile];
    /* phase 1's splitters. No stage of times: a fuse tile's targets are few with 32 lanes each,
     * so the lane-group search ends in one step, and staging measured slower (perf-notes v13) */
    __shared__ double s_split[kThreads];
    const int64_t b = blockIdx.x / tiles_per_row;
    const int64_t t_begin = (blockIdx.x - b * tiles_per_row) * tile;
    const int count = (int)min((int64_t)tile, a.targets - t_begin);
    const int g = threadIdx.x / L; /* this lane's target in the tile */
    const bool active = g < count;
    const int64_t t = t_begin + g;
    const int tes = rc_dtype_size(a.times_dtype);
    const char *xp = (const char *)a.new_times +
                     (b * a.new_times_stride_b + (active ? t : 0) * a.new_times_stride_t) * tes;
    const rc::Tile tl = {s_r0, s_r1, s_w, count};
    const int64_t F = a.out_features;
    T *out_tile = (T *)a.out + (b * a.targets + t_begin) * F;
    for (int k = 0; k < a.num_streams; k++) {
        const rc_fuse_stream &s = a.streams[k];
        int64_t v0, t0, n;
        rc_fuse_row_span(&v0, &t0, &n, &a, &s, b);
        rc_locate loc;
        rc::locate_tile(&loc, a.times_dtype, (const char *)s.times + t0 * tes, s.times_stride_s,
                        n, xp, active, L, s.mode, a.tolerance, s_split, 0);
        if (active && (threadIdx.x & (L - 1)) == 0) {
            if (a.is_pad) a.is_pad[(b * a.targets + t) * a.num_streams + k] = loc.pad;
            s_r0[g] = loc.i0 < 0 ? -1 : v0 + loc.i0 * s.values_stride_s;
            s_r1[g] = loc.i0 < 0 ? -1 : v0 + loc.i1 * s.values_stride_s;
            s_w[g] = loc.w;
        }
        __syncthreads();
        rc::write_rows<T>(out_tile + s.column, F, (const T *)s.values, s.features,
                          s.values_stride_d, s.mode, vec_ok(a, s, (int)sizeof(T)), tl);
        __syncthreads(); /* the next stream overwrites s_r0/s_r1/s_w */
    }
}

template <typename T>
rc_status launch(const rc_fuse_args &a, int device, cudaStream_t stream) {
    const int es = rc_dtype_size(a.values_dtype);
    for (int k = 0; k < a.num_streams; k++)
        if (a.streams[k].features > ((int64_t)1 << 30) / kMaxTile) /* phase 2 indexes with int */
            return rc_fail(RC_ERR_VALUE, "fuse: stream %d has %lld features, too many for the "
                           "CUDA kernel", k, (long long)a.streams[k].features);
    /* the tile is sized by the whole output row: every stream's columns are written per tile */
    const int64_t units = (a.out_features * es + 15) / 16;
    int64_t tile;
    int L;
    rc::choose_tile(&tile, &L, a.batch, a.targets, units, 2048, kMaxTile, device);
    const int64_t tiles_per_row = (a.targets + tile - 1) / tile;
    const int64_t blocks = a.batch * tiles_per_row;
    if (blocks > INT32_MAX) return rc_fail(RC_ERR_VALUE, "fuse: batch * targets too large");
    fuse_kernel<T><<<(unsigned)blocks, kThreads, 0, stream>>>(a, (int)tile, L, tiles_per_row);
    return RC_CUDA_CHECK(cudaGetLastError(), "fuse kernel launch");
}

rc_status dispatch(const rc_fuse_args &a, int dev, cudaStream_t s) {
    return rc::with_value_type(a.values_dtype, [&](auto tag) {
        return launch<typename decltype(tag)::type>(a, dev, s);
    });
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
