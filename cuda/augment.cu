/* cuda/augment.cu: the augmented frame gather on the GPU, bit-identical to csrc/cpu/augment.c (the
 * per-pixel chain is augment_math.h). Layouts (elements): storage as gather_frames (rgb [H, W, 3]
 * uint8 / float32, or yuv420 planes; device memory or the device alias of pinned host memory);
 * parameter rows [count / aug_group, RC_AUG_NPARAMS] float32; out [M, H', W', 3] with any strides.
 * A block per (frame, band of output rows): it tabulates its frame's antialiased-resize taps for the
 * whole window in shared memory (a pixel then reads its taps instead of computing ~50 weights), and
 * each thread makes whole pixels. Rows without an affine or sharpness (most: GR00T's chains) run in
 * a lean kernel of their own; the others in one with the whole chain. Where a row has a contrast op,
 * a first pass of the same blocks sums each row's grayscale in rc_aug_tree's order (a simple row's
 * image before the op is kept in the scratch, so its resize is computed once) and a second gives
 * each frame's mean.
 * Caller's stream, no host sync. Benchmark: python benchmarks/bench_augment.py
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/augment_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kThreads = RC_AUG_LANES; /* the sums' lanes are the block's threads */
constexpr int kBandPixels = 4096;      /* output pixels per block: ~16 per thread */
constexpr int kMaxShared = 48 * 1024;  /* the tables' budget without an opt-in */
constexpr int kMaxSeparable = 100 * 1024; /* the separable sums pass's shared memory: 2 blocks per SM */
constexpr int kMaxBandRows = 16;

struct Plan {
    int rows;      /* output rows per block */
    int bands;     /* blocks per frame */
    int taps;      /* table weights per entry; 0: no tables (the taps are computed where used) */
    int shared;    /* bytes of the tables (a multiple of 16) */
    int span;      /* source rows the separable sums pass holds; 0: that pass is not used */
    int sums_shared; /* bytes of the sums pass's shared memory: tables, horizontal sums, row partials */
};

__device__ __forceinline__ const float *params_of(const rc_gather_frames_args &a, int64_t m) {
    return a.aug + (m / a.aug_group) * a.aug_stride;
}

__device__ __forceinline__ const char *frame_of(const rc_gather_frames_args &a, int64_t m) {
    const int64_t id = a.ids[m * a.ids_stride];
    if (id < 0 || id >= a.frames) return NULL; /* padding, or an id the CPU glue would reject */
    return (const char *)a.storage + id * a.frame_stride * rc_dtype_size(a.storage_dtype);
}

/* The block's frame context, with its resize tables built in shared memory when the frame is resized
 * with antialiasing (block-uniform: one frame per block). */
__device__ rc_aug_ctx block_ctx(const rc_gather_frames_args &a, const Plan &pl, int64_t m, char *sm,
                                rc_aa_table *ty, rc_aa_table *tx) {
    rc_aug_ctx c = {&a, frame_of(a, m), params_of(a, m), 0.0f, NULL, NULL};
    const float *p = c.p;
    const int32_t ch = (int32_t)p[RC_AUG_CROP_H], cw = (int32_t)p[RC_AUG_CROP_W];
    const int32_t rh = (int32_t)p[RC_AUG_RESIZE_H], rw = (int32_t)p[RC_AUG_RESIZE_W];
    if (!c.frame || !pl.taps || !a.antialias || (rh == ch && rw == cw)) return c;
    const int32_t Ho = (int32_t)a.out_height, Wo = (int32_t)a.out_width, k = pl.taps;
    int32_t *lo = (int32_t *)sm, *n = lo + Ho + Wo;
    float *w = (float *)(n + Ho + Wo);
    const int32_t ot = (int32_t)p[RC_AUG_OUT_TOP], ol = (int32_t)p[RC_AUG_OUT_LEFT];
    for (int32_t i = threadIdx.x; i < Ho + Wo; i += blockDim.x) {
        if (i < Ho) rc_aa_fill(lo + i, n + i, w + (int64_t)i * k, k, i, ch, rh, ot);
        else rc_aa_fill(lo + i, n + i, w + (int64_t)i * k, k, i - Ho, cw, rw, ol);
    }
    *ty = {lo, n, w, k};
    *tx = {lo + Ho, n + Ho, w + (int64_t)Ho * k, k};
    c.ty = ty;
    c.tx = tx;
    return c;
}

/* The image of a simple row before its contrast op, materialized by the sums pass (float RGB of each
 * output pixel, after the scratch's row sums and means) so that the pixels pass does not compute the
 * resize twice: pixel (m, y, x) at img + ((m * Ho + y) * Wo + x) * 3. */
__device__ __forceinline__ float *image_of(const rc_gather_frames_args &a, int64_t m) {
    return (float *)(a.aug_scratch + a.count * (a.out_height + 1)) + m * a.out_height * a.out_width * 3;
}

/* A simple row's band through the separable resize, for the sums pass: the horizontal sums of the
 * band's source rows computed once into shared memory (each the value the per-pixel path computes for
 * every output row that uses that source row, in the same order of adds), then each pixel's vertical
 * sum, its ops before the contrast op, the image kept, and the grayscale row sums in rc_aug_tree's
 * order for all the band's rows at once. The per-pixel path read ~35 source pixels per output pixel
 * through L1 (the kernel's bound); this reads ~2.5 x 7. False (block-uniform) when the band's source
 * rows exceed the plan's span: the caller takes the per-pixel path. */
__device__ bool separable_sums(const rc_gather_frames_args &a, const Plan &pl, const rc_aug_ctx &c, int64_t m,
                               int stop, int32_t y0, int32_t y1, char *sm) {
    const rc_aa_table &ty = *c.ty, &tx = *c.tx;
    int32_t r0 = INT32_MAX, r1 = 0;
    for (int32_t y = y0; y < y1; y++) r0 = min(r0, ty.lo[y]), r1 = max(r1, ty.lo[y] + ty.n[y]);
    const int32_t span = r1 - r0, Wo = (int32_t)a.out_width, L = RC_AUG_LANES;
    if (span > pl.span) return false;
    float *hs = (float *)(sm + pl.shared);
    double *partial = (double *)(hs + (int64_t)pl.span * Wo * 3);
    const int32_t top = (int32_t)c.p[RC_AUG_CROP_TOP] + r0, left = (int32_t)c.p[RC_AUG_CROP_LEFT];
    for (int32_t q = threadIdx.x; q < span * Wo; q += kThreads) {
        const int32_t r = q / Wo, x = q - r * Wo, sx = left + tx.lo[x];
        const float *w = tx.w + (int64_t)x * tx.k;
        float row[3] = {0.0f, 0.0f, 0.0f}, px[3];
        for (int32_t t = 0; t < tx.n[x]; t++) {
            rc_aug_source(px, &a, c.frame, top + r, sx + t);
            for (int k = 0; k < 3; k++) row[k] = RC_FADD(row[k], RC_FMUL(w[t], px[k]));
        }
        for (int k = 0; k < 3; k++) hs[(int64_t)q * 3 + k] = row[k];
    }
    __syncthreads();
    float *img = image_of(a, m);
    for (int32_t y = y0; y < y1; y++) {
        const float *w = ty.w + (int64_t)y * ty.k, *h = hs + (int64_t)(ty.lo[y] - r0) * Wo * 3;
        double s = 0.0;
        for (int32_t x = threadIdx.x; x < Wo; x += L) {
            const int64_t col = (int64_t)rc_aug_column(c.p, x, Wo) * 3;
            float v[3] = {0.0f, 0.0f, 0.0f};
            for (int32_t t = 0; t < ty.n[y]; t++)
                for (int k = 0; k < 3; k++) v[k] = RC_FADD(v[k], RC_FMUL(w[t], h[(int64_t)t * Wo * 3 + col + k]));
            rc_aug_simple_finish(v, c.p, stop, c.mean);
            float *e = img + ((int64_t)y * Wo + x) * 3;
            e[0] = v[0], e[1] = v[1], e[2] = v[2];
            s = __dadd_rn(s, (double)rc_gray(v));
        }
        partial[(y - y0) * L + threadIdx.x] = s;
    }
    __syncthreads();
    for (int h = L / 2; h > 0; h >>= 1) { /* every row's tree at once, each in rc_aug_tree's order */
        for (int i = threadIdx.x; i < (y1 - y0) * h; i += kThreads) {
            double *row = partial + (i / h) * L;
            row[i % h] = __dadd_rn(row[i % h], row[i % h + h]);
        }
        __syncthreads();
    }
    for (int32_t y = y0 + threadIdx.x; y < y1; y += kThreads) a.aug_scratch[m * a.out_height + y] = partial[(y - y0) * L];
    return true;
}

/* Row sums of the grayscale before each frame's contrast op: lane l takes x = l, l + 256, ... in
 * order, then the tree (rc_aug_tree's order). SIMPLE: only simple rows (rc_aug_simple), whose image
 * before the contrast op is kept; else only the others. */
template <bool SIMPLE>
__global__ void __launch_bounds__(kThreads) sums_kernel(const __grid_constant__ rc_gather_frames_args a, const Plan pl) {
    extern __shared__ uint4 smem[];
    __shared__ double partial[RC_AUG_LANES];
    __shared__ rc_aa_table ty, tx;
    const int64_t m = blockIdx.x / pl.bands;
    const float *p = params_of(a, m);
    const int n = (int)p[RC_AUG_NCOLOR], k = rc_aug_find(p, n, RC_COLOR_CONTRAST);
    if (k == n || rc_aug_simple(p) != SIMPLE) return;            /* block-uniform */
    const int32_t Wo = (int32_t)a.out_width;
    const int32_t y0 = (int32_t)(blockIdx.x - m * pl.bands) * pl.rows;
    const int32_t y1 = min(y0 + pl.rows, (int32_t)a.out_height);
    rc_aug_ctx c = block_ctx(a, pl, m, (char *)smem, &ty, &tx);
    __syncthreads();
    if constexpr (SIMPLE)
        if (c.ty && pl.span && separable_sums(a, pl, c, m, k, y0, y1, (char *)smem)) return;
    float *img = image_of(a, m);
    const int l = threadIdx.x;
    for (int32_t y = y0; y < y1; y++) {
        double s = 0.0;
        if (c.frame)
            for (int32_t x = l; x < Wo; x += RC_AUG_LANES) {
                float v[3];
                if constexpr (SIMPLE) {
                    rc_aug_simple_pixel(v, &c, y, x, k);
                    float *e = img + ((int64_t)y * Wo + x) * 3;
                    e[0] = v[0], e[1] = v[1], e[2] = v[2];
                } else {
                    rc_aug_pixel(v, &c, y, x, k);
                }
                s = __dadd_rn(s, (double)rc_gray(v));
            }
        partial[l] = s;
        __syncthreads();
        for (int h = RC_AUG_LANES / 2; h > 0; h >>= 1) {
            if (l < h) partial[l] = __dadd_rn(partial[l], partial[l + h]);
            __syncthreads();
        }
        if (l == 0) a.aug_scratch[m * a.out_height + y] = partial[0];
        __syncthreads();
    }
}

/* Each frame's mean: its row sums in y order. */
__global__ void means_kernel(const __grid_constant__ rc_gather_frames_args a) {
    const int64_t m = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (m >= a.count) return;
    double s = 0.0;
    for (int64_t y = 0; y < a.out_height; y++) s = __dadd_rn(s, a.aug_scratch[m * a.out_height + y]);
    a.aug_scratch[a.count * a.out_height + m] = __ddiv_rn(s, (double)(a.out_height * a.out_width));
}

/* Out's pixels. SIMPLE: only simple rows (their image before a contrast op read back from the sums
 * pass), with the registers of that path alone; else only the others, the whole chain per pixel. */
template <typename O, int KIND, bool SIMPLE> /* KIND: 0 as is, 1 f16 bits, 2 bf16 bits */
__global__ void __launch_bounds__(kThreads) pixels_kernel(const __grid_constant__ rc_gather_frames_args a, const Plan pl) {
    extern __shared__ uint4 smem[];
    __shared__ rc_aa_table ty, tx;
    const int64_t m = blockIdx.x / pl.bands;
    const float *p = params_of(a, m);
    if (rc_aug_simple(p) != SIMPLE) return;                     /* block-uniform */
    const int32_t Wo = (int32_t)a.out_width;
    const int32_t y0 = (int32_t)(blockIdx.x - m * pl.bands) * pl.rows;
    const int32_t y1 = min(y0 + pl.rows, (int32_t)a.out_height);
    const int n = (int)p[RC_AUG_NCOLOR];
    const int k = a.aug_scratch ? rc_aug_find(p, n, RC_COLOR_CONTRAST) : n;
    rc_aug_ctx c = {&a, frame_of(a, m), p, 0.0f, NULL, NULL};
    if (!SIMPLE || k == n) c = block_ctx(a, pl, m, (char *)smem, &ty, &tx);   /* the resize is computed here */
    if (c.frame && a.aug_scratch) c.mean = (float)a.aug_scratch[a.count * a.out_height + m];
    __syncthreads();
    const float *img = image_of(a, m);
    O *base = (O *)a.out + m * a.out_stride_m;
    for (int32_t q = threadIdx.x; q < (y1 - y0) * Wo; q += kThreads) {
        const int32_t y = y0 + q / Wo, x = q - (q / Wo) * Wo;
        float v[3] = {0.0f, 0.0f, 0.0f};
        if (c.frame) {
            if constexpr (SIMPLE) {
                if (k < n) {
                    const float *e = img + ((int64_t)y * Wo + x) * 3;
                    v[0] = e[0], v[1] = e[1], v[2] = e[2];
                    rc_aug_pointwise(v, p, k, n, c.mean);
                } else {
                    rc_aug_simple_pixel(v, &c, y, x, n);
                }
            } else {
                rc_aug_pixel(v, &c, y, x, n);
            }
        }
        O *px = base + (int64_t)y * a.out_stride_y + (int64_t)x * a.out_stride_x;
#pragma unroll
        for (int ch = 0; ch < 3; ch++) {
            float f = v[ch];
            if (c.frame && a.normalize) f = __fdiv_rn(__fsub_rn(f, a.mean[ch]), a.std[ch]);
            O *e = px + ch * a.out_stride_c;
            if (!c.frame) *e = (O)0; /* padding: zeros, as gather_frames */
            else if constexpr (KIND == 1) *e = rc_f32_to_f16(f);
            else if constexpr (KIND == 2) *e = rc_f32_to_bf16(f);
            else if constexpr (sizeof(O) == 1) *e = rc_to_u8(__fmul_rn(f, 255.0f));
            else *e = f;
        }
    }
}

template <typename O, int KIND>
void launch_pixels(const rc_gather_frames_args &a, const Plan &pl, unsigned blocks, cudaStream_t s) {
    pixels_kernel<O, KIND, true><<<blocks, kThreads, pl.shared, s>>>(a, pl);
    pixels_kernel<O, KIND, false><<<blocks, kThreads, pl.shared, s>>>(a, pl);
}

/* The separable sums pass's band: the most output rows (<= rows) whose source rows fit its shared
 * memory, bounded for any crop box (scale <= height / out_height, each entry <= taps). */
void plan_separable(Plan &pl, const rc_gather_frames_args &a) {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) optin = 0;
    const int budget = min(optin - 4 * 1024, kMaxSeparable); /* the static partials of the other path */
    pl.span = 0;
    pl.sums_shared = pl.shared;
    if (!pl.taps) return;
    for (int r = min(pl.rows, kMaxBandRows); r >= 2; r--) {
        const int64_t span = ((int64_t)(r - 1) * a.height + a.out_height - 1) / a.out_height + 2 + pl.taps;
        const int64_t bytes = pl.shared + span * a.out_width * 12 + (int64_t)r * RC_AUG_LANES * 8;
        if (bytes <= budget) {
            pl.rows = r, pl.span = (int)span, pl.sums_shared = (int)bytes;
            return;
        }
    }
}

rc_status run(const rc_gather_frames_args &a, cudaStream_t s) {
    const int64_t Ho = a.out_height, Wo = a.out_width;
    if (a.count == 0 || Ho == 0 || Wo == 0) return RC_OK;
    Plan pl;
    pl.rows = (int)(kBandPixels / Wo > 0 ? (kBandPixels / Wo < Ho ? kBandPixels / Wo : Ho) : 1);
    const int32_t k = max(rc_aa_max_taps(a.height, Ho), rc_aa_max_taps(a.width, Wo));
    const int64_t table = ((Ho + Wo) * (int64_t)(2 + k) * 4 + 15) / 16 * 16;
    pl.taps = a.antialias && table <= kMaxShared ? k : 0; /* else the taps are computed where used */
    pl.shared = pl.taps ? (int)table : 0;
    if (a.aug_scratch) plan_separable(pl, a);
    else pl.span = 0, pl.sums_shared = pl.shared;
    pl.bands = (int)((Ho + pl.rows - 1) / pl.rows);
    if (a.count * pl.bands > INT32_MAX)
        return rc_fail(RC_ERR_VALUE, "gather_frames: %lld frames of %lld rows are too many for one launch",
                       (long long)a.count, (long long)Ho);
    const unsigned blocks = (unsigned)(a.count * pl.bands);
    if (a.aug_scratch) {
        if (pl.sums_shared > kMaxShared) {
            rc_status st = RC_CUDA_CHECK(cudaFuncSetAttribute(sums_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                              pl.sums_shared), "augment sums kernel shared memory");
            if (st != RC_OK) return st;
        }
        sums_kernel<true><<<blocks, kThreads, pl.sums_shared, s>>>(a, pl);
        sums_kernel<false><<<blocks, kThreads, pl.shared, s>>>(a, pl);
        rc_status st = RC_CUDA_CHECK(cudaGetLastError(), "augment sums kernel launch");
        if (st != RC_OK) return st;
        means_kernel<<<(unsigned)((a.count + 127) / 128), 128, 0, s>>>(a);
        st = RC_CUDA_CHECK(cudaGetLastError(), "augment means kernel launch");
        if (st != RC_OK) return st;
    }
    /* two launches over the same blocks: the simple rows' lean kernel, then the whole chain's (each block
     * leaves at once in the kernel that is not its row's): each runs with its own registers */
    switch (a.out_dtype) {
    case RC_U8: launch_pixels<uint8_t, 0>(a, pl, blocks, s); break;
    case RC_F32: launch_pixels<float, 0>(a, pl, blocks, s); break;
    case RC_F16: launch_pixels<uint16_t, 1>(a, pl, blocks, s); break;
    case RC_BF16: launch_pixels<uint16_t, 2>(a, pl, blocks, s); break;
    default: return rc_fail(RC_ERR_TYPE, "gather_frames: unsupported out dtype for augmentation");
    }
    return RC_CUDA_CHECK(cudaGetLastError(), "augment kernel launch");
}

} // namespace

extern "C" rc_status rc_augment_frames_cuda(const rc_gather_frames_args *args, int device, void *stream) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = run(*args, (cudaStream_t)stream);
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}
