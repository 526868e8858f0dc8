/* cpu/augment.c: the augmented frame gather on the CPU, the no-GPU path and the reference the CUDA
 * kernel is held to bit for bit (the per-pixel chain is augment_math.h, shared with cuda/augment.cu).
 * Layouts (elements): storage as gather_frames (rgb [H, W, 3] uint8 / float32, or yuv420 planes);
 * parameter rows [count / aug_group, RC_AUG_NPARAMS]; out [M, H', W', 3] with any strides.
 * Work: a mean pass over (frame, row) pairs where a contrast op needs the image mean (row sums in
 * rc_aug_tree's order, then rows in order: the CUDA kernel's sums), then the (frame, row) pairs of out.
 * The resize's taps are computed where used (the CUDA kernel tabulates the same floats). Benchmark: python benchmarks/bench_augment.py --device cpu
 */
#include <string.h>

#include "../augment_math.h"
#include "../robocache.h"
#include "parallel.h"

/* Parameter row of output frame m. */
static const float *params_of(const rc_gather_frames_args *a, int64_t m) {
    return a->aug + (m / a->aug_group) * a->aug_stride;
}

/* Stored frame of output frame m, or NULL for padding (ids < 0; the glue rejects ids >= frames). */
static const char *frame_of(const rc_gather_frames_args *a, int64_t m) {
    const int64_t id = a->ids[m * a->ids_stride];
    if (id < 0 || id >= a->frames) return NULL;
    return (const char *)a->storage + id * a->frame_stride * rc_dtype_size(a->storage_dtype);
}

/* Where the mean of frame m's image before its contrast op lives (float64 scratch). */
static double *row_sums(const rc_gather_frames_args *a, int64_t m) { return a->aug_scratch + m * a->out_height; }
static double *frame_mean(const rc_gather_frames_args *a, int64_t m) {
    return a->aug_scratch + a->count * a->out_height + m;
}

/* Row sums (float64, in rc_aug_tree's order) of the grayscale of the image before each frame's
 * contrast op. */
static void sums_range(void *ctx, int64_t begin, int64_t end) {
    const rc_gather_frames_args *a = (const rc_gather_frames_args *)ctx;
    const int64_t Ho = a->out_height;
    double partial[RC_AUG_LANES];
    for (int64_t q = begin; q < end; q++) {
        const int64_t m = q / Ho, y = q % Ho;
        const rc_aug_ctx c = {a, frame_of(a, m), params_of(a, m), 0.0f, NULL, NULL};
        const int n = (int)c.p[RC_AUG_NCOLOR], k = rc_aug_find(c.p, n, RC_COLOR_CONTRAST);
        for (int l = 0; l < RC_AUG_LANES; l++) partial[l] = 0.0;
        if (c.frame && k < n)
            for (int64_t x = 0; x < a->out_width; x++) {
                float v[3];
                rc_aug_pixel(v, &c, (int32_t)y, (int32_t)x, k);
                partial[x % RC_AUG_LANES] += (double)rc_gray(v);
            }
        row_sums(a, m)[y] = rc_aug_tree(partial);
    }
}

static void store(char *px, const float v[3], const rc_gather_frames_args *a, int64_t sc) {
    for (int c = 0; c < 3; c++) {
        float f = v[c];
        if (a->normalize) f = (f - a->mean[c]) / a->std[c];
        char *e = px + c * sc;
        uint16_t h;
        switch (a->out_dtype) {
        case RC_U8: *(uint8_t *)e = rc_to_u8(f * 255.0f); break;
        case RC_F16: h = rc_f32_to_f16(f); memcpy(e, &h, 2); break;
        case RC_BF16: h = rc_f32_to_bf16(f); memcpy(e, &h, 2); break;
        default: memcpy(e, &f, 4); break;
        }
    }
}

static void pixels_range(void *ctx, int64_t begin, int64_t end) {
    const rc_gather_frames_args *a = (const rc_gather_frames_args *)ctx;
    const int64_t Ho = a->out_height, Wo = a->out_width;
    const int oes = rc_dtype_size(a->out_dtype);
    for (int64_t q = begin; q < end; q++) {
        const int64_t m = q / Ho, y = q % Ho;
        char *orow = (char *)a->out + (m * a->out_stride_m + y * a->out_stride_y) * oes;
        const rc_aug_ctx c = {a, frame_of(a, m), params_of(a, m),
                              a->aug_scratch ? (float)*frame_mean(a, m) : 0.0f, NULL, NULL};
        for (int64_t x = 0; x < Wo; x++) {
            float v[3] = {0.0f, 0.0f, 0.0f};
            char *px = orow + x * a->out_stride_x * oes;
            if (!c.frame) { /* padding: zeros, as gather_frames */
                for (int k = 0; k < 3; k++) memset(px + k * a->out_stride_c * oes, 0, (size_t)oes);
                continue;
            }
            rc_aug_pixel(v, &c, (int32_t)y, (int32_t)x, (int)c.p[RC_AUG_NCOLOR]);
            store(px, v, a, a->out_stride_c * oes);
        }
    }
}

rc_status rc_augment_frames_cpu(const rc_gather_frames_args *args, int num_threads) {
    const int64_t rows = args->count * args->out_height;
    if (rows == 0 || args->out_width == 0) return RC_OK;
    /* a pixel costs ~0.1-2 us (resize taps): each thread gets >= ~100 us of work */
    const int64_t grain = 200 / (args->out_width + 1) + 1;
    if (args->aug_scratch) {
        rc_parallel_for(rows, grain, num_threads, sums_range, (void *)args);
        for (int64_t m = 0; m < args->count; m++) { /* y order, as the CUDA kernel */
            double s = 0.0;
            for (int64_t y = 0; y < args->out_height; y++) s += row_sums(args, m)[y];
            *frame_mean(args, m) = s / (double)(args->out_height * args->out_width);
        }
    }
    rc_parallel_for(rows, grain, num_threads, pixels_range, (void *)args);
    return RC_OK;
}
