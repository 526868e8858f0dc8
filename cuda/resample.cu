/* cuda/resample.cu: resample on the GPU, bit-identical to csrc/cpu/resample.c (slerp aside).
 * Layouts (elements): out [B,T,D] contiguous, is_pad [B,T]; inputs strided (robocache.h).
 * One block per (row, tile of targets): phase 1 locates each target (block-wide splitters,
 * then the run of times the tile needs staged in shared memory, or a lane-group search;
 * cuda/resample_device.cuh), phase 2 streams the tile's output rows
 * with 16-byte loads and stores across the feature dim when the layout allows.
 * Caller's stream, no host sync. Benchmark: python benchmarks/bench_resample.py
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/resample_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"
#include "resample_device.cuh"

namespace {

using rc::kThreads;
using rc::kMaxTile;

template <typename T>
__global__ void __launch_bounds__(kThreads, 8) /* 8 blocks per SM: overlap phase 1 with phase 2 */
resample_kernel(const rc_resample_args a, int tile, int L, int64_t tiles_per_row, bool vec,
                int64_t chunk, int stage_bytes) {
    __shared__ int64_t s_r0[kMaxTile], s_r1[kMaxTile];
    __shared__ double s_w[kMaxTile];
    extern __shared__ double s_stage[]; /* phase 1's splitters and staged times */
    const int64_t b = blockIdx.x / tiles_per_row;
    const int64_t t_begin = (blockIdx.x - b * tiles_per_row) * tile;
    const int count = (int)min((int64_t)tile, a.targets - t_begin);
    const int g = threadIdx.x / L; /* this lane's target in the tile */
    const bool active = g < count;
    const int64_t t = t_begin + g;
    const int tes = rc_dtype_size(a.times_dtype);
    int64_t v0, t0, n;
    rc_row_span(&v0, &t0, &n, &a, b);
    const char *xp = (const char *)a.new_times +
                     (b * a.new_times_stride_b + (active ? t : 0) * a.new_times_stride_t) * tes;
    rc_locate loc;
    rc::locate_tile(&loc, a.times_dtype, (const char *)a.times + t0 * tes, a.times_stride_s, n, xp,
                    active, L, a.mode, a.tolerance, s_stage, stage_bytes);
    if (active && (threadIdx.x & (L - 1)) == 0) {
        if (a.is_pad && blockIdx.y == 0) a.is_pad[b * a.targets + t] = loc.pad;
        s_r0[g] = loc.i0 < 0 ? -1 : v0 + loc.i0 * a.values_stride_s;
        s_r1[g] = loc.i0 < 0 ? -1 : v0 + loc.i1 * a.values_stride_s;
        s_w[g] = loc.w;
    }
    __syncthreads();
    const rc::Tile tl = {s_r0, s_r1, s_w, count};
    /* blockIdx.y: this block's slice [e0, e0 + chunk) of the feature dim (elements) */
    const int64_t e0 = (int64_t)blockIdx.y * chunk;
    const int64_t d = min(chunk, a.features - e0);
    rc::write_rows<T>((T *)a.out + (b * a.targets + t_begin) * a.features + e0, a.features,
                      (const T *)a.values + e0 * a.values_stride_d, d, a.values_stride_d, a.mode,
                      vec, tl);
}

template <typename T>
rc_status launch(const rc_resample_args &a, int device, cudaStream_t stream) {
    if (a.features > ((int64_t)1 << 30)) /* phase 2 indexes a tile's units with int */
        return rc_fail(RC_ERR_VALUE, "resample: rows of %lld features are too large for the "
                       "CUDA kernel", (long long)a.features);
    const int es = (int)sizeof(T);
    /* 16-byte units need every row start aligned: base, row strides and the row size */
    const bool vec = a.values_stride_d == 1 && (a.features * es) % 16 == 0 &&
                     rc::aligned16(a.values) && rc::aligned16(a.out) &&
                     (a.values_stride_s * es) % 16 == 0 &&
                     (a.offsets || (a.values_stride_b * es) % 16 == 0);
    const int64_t units = vec ? a.features * es / 16 : a.features;
    int64_t tile;
    int L;
    /* 2-byte values: 4096 units (64 KiB) per block, up to kMaxTile targets. Their block does
     * half the bytes per located target, and its fixed cost showed on B64 S16384 T4096 D128
     * bf16 (97 / 77 / 69 / 66 us at 32 / 64 / 128 / 256 targets per block); float32 is best
     * at 2048 / 128 (docs/perf-notes.md v9) */
    const bool narrow = es <= 2;
    rc::choose_tile(&tile, &L, a.batch, a.targets, units, narrow ? 4096 : 2048, narrow ? kMaxTile : 128,
                    device);
    const int64_t tiles_per_row = (a.targets + tile - 1) / tile;
    const int64_t blocks = a.batch * tiles_per_row;
    if (blocks > INT32_MAX) return rc_fail(RC_ERR_VALUE, "resample: batch * targets too large");
    /* Few long rows (a batch of camera frames: 64 rows of 196,608 bytes) leave most SMs idle
     * with one block per row; split the feature dim across blockIdx.y until the grid covers the
     * GPU twice, keeping >= 1024 units (16 KiB vectorized) per block. Slerp keeps whole rows. */
    int64_t splits = 1;
    const int64_t sms = rc::sm_count(device);
    while (a.mode != RC_SLERP && splits < 32768 && blocks * splits < 2 * sms &&
           units / (2 * splits) >= 1024)
        splits *= 2;
    const int64_t per = vec ? 16 / es : 1; /* elements per unit */
    const int64_t chunk = (units + splits - 1) / splits * per;
    const int stage = rc::stage_bytes(device, kMaxTile * 24, 8);
    resample_kernel<T><<<dim3((unsigned)blocks, (unsigned)splits), kThreads, stage, stream>>>(
        a, (int)tile, L, tiles_per_row, vec, chunk, stage);
    return RC_CUDA_CHECK(cudaGetLastError(), "resample kernel launch");
}

rc_status dispatch(const rc_resample_args &a, int dev, cudaStream_t s) {
    return rc::with_value_type(a.values_dtype, [&](auto tag) {
        return launch<typename decltype(tag)::type>(a, dev, s);
    });
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
