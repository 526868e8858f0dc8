/* cuda/augment.cu: the augmented frame gather on the GPU, bit-identical to csrc/cpu/augment.c (the
 * per-pixel chain is augment_math.h). Layouts (elements): storage as gather_frames (rgb [H, W, 3]
 * uint8 / float32, or yuv420 planes; device memory or the device alias of pinned host memory);
 * parameter rows [count / aug_group, RC_AUG_NPARAMS] float32; out [M, H', W', 3] with any strides.
 * A thread per output pixel, all three channels; where some row has a contrast op, two small passes
 * first give each frame's mean (row sums in x order, then in y order, float64, as the CPU sums).
 * Caller's stream, no host sync. Benchmark: python benchmarks/bench_augment.py
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/augment_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ const float *params_of(const rc_gather_frames_args &a, int64_t m) {
    return a.aug + (m / a.aug_group) * a.aug_stride;
}

__device__ __forceinline__ const char *frame_of(const rc_gather_frames_args &a, int64_t m) {
    const int64_t id = a.ids[m * a.ids_stride];
    if (id < 0 || id >= a.frames) return NULL; /* padding, or an id the CPU glue would reject */
    return (const char *)a.storage + id * a.frame_stride * rc_dtype_size(a.storage_dtype);
}

/* Row sums of the grayscale before each frame's contrast op: thread (m, y), x in order. */
__global__ void __launch_bounds__(kThreads) sums_kernel(const rc_gather_frames_args a) {
    const int64_t rows = a.count * a.out_height;
    for (int64_t q = blockIdx.x * (int64_t)kThreads + threadIdx.x; q < rows; q += (int64_t)gridDim.x * kThreads) {
        const int64_t m = q / a.out_height, y = q - m * a.out_height;
        const float *p = params_of(a, m);
        const int n = (int)p[RC_AUG_NCOLOR], c = rc_aug_find(p, n, RC_COLOR_CONTRAST);
        const char *frame = frame_of(a, m);
        double s = 0.0;
        if (frame && c < n)
            for (int64_t x = 0; x < a.out_width; x++) {
                float v[3];
                rc_aug_pixel(v, &a, frame, p, 0.0f, (int32_t)y, (int32_t)x, c);
                s = __dadd_rn(s, (double)rc_gray(v));
            }
        a.aug_scratch[m * a.out_height + y] = s;
    }
}

/* Each frame's mean: its row sums in y order. */
__global__ void means_kernel(const rc_gather_frames_args a) {
    const int64_t m = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (m >= a.count) return;
    double s = 0.0;
    for (int64_t y = 0; y < a.out_height; y++) s = __dadd_rn(s, a.aug_scratch[m * a.out_height + y]);
    a.aug_scratch[a.count * a.out_height + m] = __ddiv_rn(s, (double)(a.out_height * a.out_width));
}

template <typename O, int KIND> /* KIND: 0 as is, 1 f16 bits, 2 bf16 bits */
__global__ void __launch_bounds__(kThreads) pixels_kernel(const rc_gather_frames_args a) {
    const int64_t Ho = a.out_height, Wo = a.out_width, total = a.count * Ho * Wo;
    for (int64_t q = blockIdx.x * (int64_t)kThreads + threadIdx.x; q < total; q += (int64_t)gridDim.x * kThreads) {
        const int64_t m = q / (Ho * Wo), r = q - m * Ho * Wo, y = r / Wo, x = r - y * Wo;
        const float *p = params_of(a, m);
        const char *frame = frame_of(a, m);
        float v[3] = {0.0f, 0.0f, 0.0f};
        O *px = (O *)a.out + m * a.out_stride_m + y * a.out_stride_y + x * a.out_stride_x;
        if (frame) {
            const float mean = a.aug_scratch ? (float)a.aug_scratch[a.count * Ho + m] : 0.0f;
            rc_aug_pixel(v, &a, frame, p, mean, (int32_t)y, (int32_t)x, (int)p[RC_AUG_NCOLOR]);
        }
#pragma unroll
        for (int c = 0; c < 3; c++) {
            float f = v[c];
            if (frame && a.normalize) f = __fdiv_rn(__fsub_rn(f, a.mean[c]), a.std[c]);
            O *e = px + c * a.out_stride_c;
            if (!frame) *e = (O)0; /* padding: zeros, as gather_frames */
            else if constexpr (KIND == 1) *e = rc_f32_to_f16(f);
            else if constexpr (KIND == 2) *e = rc_f32_to_bf16(f);
            else if constexpr (sizeof(O) == 1) *e = rc_to_u8(__fmul_rn(f, 255.0f));
            else *e = f;
        }
    }
}

unsigned grid_for(int64_t n, int device) {
    const int64_t want = (n + kThreads - 1) / kThreads;
    const int64_t cap = (int64_t)(rc_device_attr(device, RC_ATTR_SMS) > 0 ? rc_device_attr(device, RC_ATTR_SMS) : 80) * 64;
    return (unsigned)(want < cap ? (want > 0 ? want : 1) : cap);
}

rc_status run(const rc_gather_frames_args &a, int device, cudaStream_t s) {
    const int64_t total = a.count * a.out_height * a.out_width;
    if (total == 0) return RC_OK;
    if (a.aug_scratch) {
        sums_kernel<<<grid_for(a.count * a.out_height, device), kThreads, 0, s>>>(a);
        rc_status st = RC_CUDA_CHECK(cudaGetLastError(), "augment sums kernel launch");
        if (st != RC_OK) return st;
        means_kernel<<<(unsigned)((a.count + 127) / 128), 128, 0, s>>>(a);
        st = RC_CUDA_CHECK(cudaGetLastError(), "augment means kernel launch");
        if (st != RC_OK) return st;
    }
    const unsigned g = grid_for(total, device);
    switch (a.out_dtype) {
    case RC_U8: pixels_kernel<uint8_t, 0><<<g, kThreads, 0, s>>>(a); break;
    case RC_F32: pixels_kernel<float, 0><<<g, kThreads, 0, s>>>(a); break;
    case RC_F16: pixels_kernel<uint16_t, 1><<<g, kThreads, 0, s>>>(a); break;
    case RC_BF16: pixels_kernel<uint16_t, 2><<<g, kThreads, 0, s>>>(a); break;
    default: return rc_fail(RC_ERR_TYPE, "gather_frames: unsupported out dtype for augmentation");
    }
    return RC_CUDA_CHECK(cudaGetLastError(), "augment kernel launch");
}

} // namespace

extern "C" rc_status rc_augment_frames_cuda(const rc_gather_frames_args *args, int device, void *stream) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = run(*args, device, (cudaStream_t)stream);
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}
