/* cpu/frames.c: gather_frames on the CPU, the no-GPU path and the reference the CUDA kernel is
 * held to bit for bit (the per-pixel arithmetic is frames_math.h, shared with cuda/frames.cu).
 * Layouts (elements): storage frames rgb [H, W, C] (uint8 / float32) or yuv420 planes (uint8
 * Y [H, W], U [ch, cw], V [ch, cw]); out [M, H', W', C] with any strides. Work is split over
 * (frame, output row) pairs. Benchmark: python benchmarks/bench_frames.py --device cpu
 */
#include <string.h>

#include "../frames_math.h"
#include "../robocache.h"
#include "parallel.h"

/* One source row: rgb element (x, c) at p[x * C + c] (uint8 or float32), yuv420 luma p[x] and
 * chroma u[x / 2], v[x / 2]. */
typedef struct {
    const void *p;
    const uint8_t *u, *v;
} src_row;

static inline float decoded(const rc_gather_frames_args *a, const src_row *r, int64_t x, int c) {
    if (a->format == RC_FRAMES_YUV420)
        return (float)rc_yuv_channel(((const uint8_t *)r->p)[x], r->u[x >> 1], r->v[x >> 1], c,
                                     a->yuv);
    if (a->storage_dtype == RC_U8) return (float)((const uint8_t *)r->p)[x * a->channels + c];
    return ((const float *)r->p)[x * a->channels + c];
}

static inline void store(char *p, float v, const rc_gather_frames_args *a) {
    uint16_t h;
    float f;
    switch (a->out_dtype) {
    case RC_U8: *(uint8_t *)p = rc_to_u8(v); break;
    case RC_F16: h = rc_f32_to_f16(rc_frame_scaled(v, a->scale)); memcpy(p, &h, 2); break;
    case RC_BF16: h = rc_f32_to_bf16(rc_frame_scaled(v, a->scale)); memcpy(p, &h, 2); break;
    default: f = rc_frame_scaled(v, a->scale); memcpy(p, &f, 4); break;
    }
}

/* Source row s of the frame at `frame` (bytes). */
static inline src_row row_of(const rc_gather_frames_args *a, const char *frame, int64_t s) {
    src_row r = {NULL, NULL, NULL};
    if (a->format == RC_FRAMES_YUV420) {
        const int64_t cw = (a->width + 1) / 2, ch = (a->height + 1) / 2;
        const uint8_t *y = (const uint8_t *)frame;
        r.p = y + s * a->width;
        r.u = y + a->height * a->width + (s >> 1) * cw;
        r.v = r.u + ch * cw;
    } else {
        r.p = frame + s * a->width * a->channels * rc_dtype_size(a->storage_dtype);
    }
    return r;
}

/* Per call: what the rows share. uint8 sources without resize only produce 0..255, so their
 * outputs come from a table of the 256 converted values (the CUDA kernel does the same): a
 * division and a software half rounding per element would cost more than the decode. */
typedef struct {
    const rc_gather_frames_args *a;
    int resize, copy, table;
    float sy, sx;
    uint8_t lut[256 * 4]; /* table: the out bytes of value i at i * out element size */
} frames_plan;

/* Output row yo of frame m from uint8 source row r, no resize, through the table. */
static void table_row(const frames_plan *p, char *orow, const src_row *r) {
    const rc_gather_frames_args *a = p->a;
    const int64_t Wo = a->out_width, C = a->channels;
    const int oes = rc_dtype_size(a->out_dtype);
    const int64_t sx = a->out_stride_x * oes, sc = a->out_stride_c * oes;
    const uint8_t *src = (const uint8_t *)r->p;
    const int yuv = a->format == RC_FRAMES_YUV420;
    for (int64_t x = 0; x < Wo; x++) {
        int32_t q[4] = {0, 0, 0, 0};
        if (yuv) { /* luma once per pixel, as the CUDA kernel's interleaved path */
            const int32_t luma = rc_yuv_luma(src[x], a->yuv);
            const int32_t cu = 8 * (r->u[x >> 1] - 128), cv = 8 * (r->v[x >> 1] - 128);
            q[0] = rc_yuv_r(luma, cv, a->yuv);
            q[1] = rc_yuv_g(luma, cu, cv, a->yuv);
            q[2] = rc_yuv_b(luma, cu, a->yuv);
        } else {
            for (int c = 0; c < C; c++) q[c] = src[x * C + c];
        }
        char *px = orow + x * sx;
        switch (oes) {
        case 1: for (int c = 0; c < C; c++) px[c * sc] = (char)q[c]; break;
        case 2: for (int c = 0; c < C; c++) memcpy(px + c * sc, p->lut + 2 * q[c], 2); break;
        default: for (int c = 0; c < C; c++) memcpy(px + c * sc, p->lut + 4 * q[c], 4); break;
        }
    }
}

static void frames_range(void *ctx, int64_t begin, int64_t end) {
    const frames_plan *p = (const frames_plan *)ctx;
    const rc_gather_frames_args *a = p->a;
    const int64_t Ho = a->out_height, Wo = a->out_width, C = a->channels;
    const int oes = rc_dtype_size(a->out_dtype);
    for (int64_t q = begin; q < end; q++) {
        const int64_t m = q / Ho, yo = q % Ho;
        char *orow = (char *)a->out + (m * a->out_stride_m + yo * a->out_stride_y) * oes;
        const int64_t id = a->ids[m * a->ids_stride];
        if (id < 0 || id >= a->frames) { /* padding: zeros (the glue rejects id >= frames) */
            for (int64_t x = 0; x < Wo; x++)
                for (int c = 0; c < C; c++)
                    memset(orow + (x * a->out_stride_x + c * a->out_stride_c) * oes, 0, oes);
            continue;
        }
        const char *frame = (const char *)a->storage +
                            id * a->frame_stride * rc_dtype_size(a->storage_dtype);
        if (p->copy) {
            memcpy(orow, row_of(a, frame, yo).p, (size_t)(Wo * C));
            continue;
        }
        if (!p->resize) {
            const src_row r = row_of(a, frame, yo);
            if (p->table) {
                table_row(p, orow, &r);
                continue;
            }
            for (int64_t x = 0; x < Wo; x++)
                for (int c = 0; c < C; c++)
                    store(orow + (x * a->out_stride_x + c * a->out_stride_c) * oes,
                          decoded(a, &r, x, c), a);
            continue;
        }
        const rc_axis_lerp wy = rc_axis_weights((int32_t)yo, p->sy, (int32_t)a->height);
        const src_row r0 = row_of(a, frame, wy.i0), r1 = row_of(a, frame, wy.i1);
        for (int64_t x = 0; x < Wo; x++) {
            const rc_axis_lerp wx = rc_axis_weights((int32_t)x, p->sx, (int32_t)a->width);
            for (int c = 0; c < C; c++) {
                const float v = rc_bilinear(decoded(a, &r0, wx.i0, c), decoded(a, &r0, wx.i1, c),
                                            decoded(a, &r1, wx.i0, c), decoded(a, &r1, wx.i1, c),
                                            &wy, &wx);
                store(orow + (x * a->out_stride_x + c * a->out_stride_c) * oes, v, a);
            }
        }
    }
}

rc_status rc_gather_frames_cpu(const rc_gather_frames_args *args, int num_threads) {
    const int64_t rows = args->count * args->out_height;
    if (rows == 0 || args->out_width == 0) return RC_OK;
    frames_plan p;
    const int64_t Wo = args->out_width, C = args->channels;
    p.a = args;
    p.resize = args->out_height != args->height || Wo != args->width;
    p.sy = (float)args->height / (float)args->out_height;
    p.sx = (float)args->width / (float)Wo;
    p.table = !p.resize && args->storage_dtype == RC_U8;
    /* uint8 rgb into uint8 out with its (x, c) packed: the row is a copy */
    p.copy = p.table && args->format == RC_FRAMES_RGB && args->out_dtype == RC_U8 &&
             (Wo == 1 || args->out_stride_x == C) && (C == 1 || args->out_stride_c == 1);
    if (p.table) {
        const int oes = rc_dtype_size(args->out_dtype);
        for (int i = 0; i < 256; i++) store((char *)p.lut + i * oes, (float)i, args);
    }
    /* a row element costs a few ns (~20 with resize): each thread gets >= ~100 us of work */
    const int64_t grain = 40000 / (Wo * C + 1) + 1;
    rc_parallel_for(rows, grain, num_threads, frames_range, &p);
    return RC_OK;
}
