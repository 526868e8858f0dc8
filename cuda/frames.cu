/* cuda/frames.cu: gather_frames on the GPU, bit-identical to csrc/cpu/frames.c.
 * Layouts (elements): storage frames of rgb [H, W, C] (uint8 / float32) or yuv420 planes
 * (uint8 Y [H, W], U [ch, cw], V [ch, cw]); out [M, H', W', C] with any strides (planar or
 * interleaved). One block per (frame, band of output rows): the band's source rows are staged in
 * shared memory with 16-byte loads, then every output element is written once, 16 bytes per
 * thread where out's layout allows. Caller's stream, no host sync.
 * Benchmark: python benchmarks/bench_frames.py
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include <type_traits>

#include "../csrc/frames_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kThreads = 256;
/* Shared memory a block stages (the band's source rows): 16 KiB is 8 rows of a 640x3 uint8
 * frame, 16 of its YUV planes. Enough bytes per block that the block's fixed costs (the id
 * load, one barrier) stay small next to its memory traffic, while 8 blocks still fit an SM,
 * so loads of some blocks overlap the stores of others. For pinned host storage each SM then
 * has ~100 KiB of reads in flight: the bus's latency (~2 us) times its bandwidth (~50 GB/s)
 * is met many times over across the SMs. ROBOCACHE_FRAMES_STAGE_BYTES overrides it (tuning). */
constexpr int kStageBytes = 16384;
constexpr int kMaxStageBytes = 48 * 1024; /* dynamic shared memory without an opt-in */

enum Layout { kInterleaved = 0, kPlanar = 1, kGeneral = 2 };

/* Grid math, computed once per call on the host. */
struct Plan {
    int rows;          /* output rows per block (a band) */
    int bpf;           /* blocks per output frame */
    int stage;         /* 1: source rows go through shared memory; 0: read from storage */
    int luma_region;   /* bytes of shared memory for the band's rows (rgb) or Y rows */
    int chroma_region; /* bytes for each of the U and V rows (yuv420) */
    int layout;        /* Layout */
    int lines_per_row; /* planar: channels (a line per channel); else 1 */
    int line_len;      /* elements per line: W' (planar) or W' * C */
    int units;         /* 16-byte groups of a line (one more for a misaligned start) */
    float sy, sx;      /* resize scales, (float)in / out */
};

/* Output element types: the conversion of a float32 value (frames_math.h). */
struct OutU8 {
    using T = uint8_t;
    static __device__ __forceinline__ T from(float v, float) { return rc_to_u8(v); }
};
struct OutF32 {
    using T = float;
    static __device__ __forceinline__ T from(float v, float s) { return rc_frames_scaled(v, s); }
};
struct OutF16 {
    using T = uint16_t;
    static __device__ __forceinline__ T from(float v, float s) {
        return rc_f32_to_f16(rc_frames_scaled(v, s));
    }
};
struct OutBF16 {
    using T = uint16_t;
    static __device__ __forceinline__ T from(float v, float s) {
        return rc_f32_to_bf16(rc_frames_scaled(v, s));
    }
};

/* Copies bytes [src, src + n) to shared memory at dst and returns where src's first byte
 * landed. It loads the 16-byte aligned window around the range: every 16-byte aligned chunk
 * that holds a byte of the range lies in that byte's page, so reading all of it cannot fault,
 * and any row alignment gets full-width loads. Four loads per thread are issued before the
 * first store: reads of pinned host memory take microseconds to come back over the bus. */
__device__ __forceinline__ const char *stage(char *dst, const char *src, int64_t n) {
    const uintptr_t a0 = (uintptr_t)src & ~(uintptr_t)15;
    const int count = (int)((((uintptr_t)src + (uintptr_t)n + 15) & ~(uintptr_t)15) - a0) >> 4;
    const uint4 *s = (const uint4 *)a0;
    uint4 *d = (uint4 *)dst;
    int i = threadIdx.x;
    for (; i + 3 * kThreads < count; i += 4 * kThreads) {
        const uint4 r0 = __ldg(s + i), r1 = __ldg(s + i + kThreads);
        const uint4 r2 = __ldg(s + i + 2 * kThreads), r3 = __ldg(s + i + 3 * kThreads);
        d[i] = r0;
        d[i + kThreads] = r1;
        d[i + 2 * kThreads] = r2;
        d[i + 3 * kThreads] = r3;
    }
    for (; i < count; i += kThreads) d[i] = __ldg(s + i);
    return dst + ((uintptr_t)src - a0);
}

/* One source row, decoded per element: rgb element (x, c) at p[x * C + c]; yuv420 luma at
 * p[x], chroma at u[x / 2], v[x / 2]. Values are returned as floats (exact for bytes). */
template <typename S, bool YUV>
struct SrcRow {
    const S *p;
    const uint8_t *u, *v;
    __device__ __forceinline__ float at(int x, int c, int C, const int32_t *k) const {
        if (YUV) return (float)rc_yuv_channel(p[x], u[x >> 1], v[x >> 1], c, k);
        return (float)p[x * C + c];
    }
};

template <int V, typename O>
union Pack {
    uint4 q;
    O e[V];
};

/* Block (m, band): output rows [yb, ye) of frame m. Lines are the contiguous runs of out along
 * its fastest axis (a row of W' * C for interleaved out, a row of one channel for planar out);
 * a unit is the 16 bytes of a line a thread writes. */
template <typename S, bool YUV, typename Out, bool RESIZE>
__global__ void __launch_bounds__(kThreads) frames_kernel(const rc_frames_args a, const Plan p) {
    using O = typename Out::T;
    constexpr int V = 16 / (int)sizeof(O);
    /* uint8 sources without resize only ever produce 0..255: their outputs come from a table
     * (a float division and a half rounding per element cost as much as the memory traffic) */
    constexpr bool kTable = !RESIZE && std::is_same<S, uint8_t>::value;
    constexpr bool kCopy = kTable && std::is_same<Out, OutU8>::value;
    extern __shared__ uint4 smem[];
    __shared__ O table[kTable && !kCopy ? 256 : 1];

    const int64_t m = blockIdx.x / (unsigned)p.bpf;
    const int yb = (int)(blockIdx.x - m * p.bpf) * p.rows;
    const int ye = min(yb + p.rows, (int)a.out_height);
    const int64_t id = a.ids[m * a.ids_stride];
    const bool valid = id >= 0 && id < a.frames; /* other ids write zeros */
    const int W = (int)a.width, H = (int)a.height, C = (int)a.channels;
    const int cw = (W + 1) >> 1;
    const int rowlen = YUV ? W : W * C; /* elements of S per source row */

    int s_lo, s_hi; /* source rows of the band */
    if (RESIZE) {
        s_lo = rc_axis_weights(yb, p.sy, H).i0;
        s_hi = rc_axis_weights(ye - 1, p.sy, H).i1;
    } else {
        s_lo = yb;
        s_hi = ye - 1;
    }
    const int c_lo = s_lo >> 1;
    const S *rows = NULL;
    const uint8_t *urows = NULL, *vrows = NULL;
    if (kTable && !kCopy)
        for (int i = threadIdx.x; i < 256; i += kThreads) table[i] = Out::from((float)i, a.scale);
    if (valid) {
        const S *frame = (const S *)a.storage + id * a.frame_stride;
        const uint8_t *uplane = (const uint8_t *)frame + (int64_t)H * W;
        const uint8_t *vplane = uplane + (int64_t)((H + 1) >> 1) * cw;
        if (p.stage) {
            char *sm = (char *)smem;
            rows = (const S *)stage(sm, (const char *)(frame + (int64_t)s_lo * rowlen),
                                    (int64_t)(s_hi - s_lo + 1) * rowlen * (int64_t)sizeof(S));
            if (YUV) {
                const int64_t cn = (int64_t)((s_hi >> 1) - c_lo + 1) * cw;
                urows = (const uint8_t *)stage(sm + p.luma_region,
                                               (const char *)(uplane + (int64_t)c_lo * cw), cn);
                vrows = (const uint8_t *)stage(sm + p.luma_region + p.chroma_region,
                                               (const char *)(vplane + (int64_t)c_lo * cw), cn);
            }
        } else { /* rows too long to stage: read them where they are */
            rows = frame + (int64_t)s_lo * rowlen;
            urows = uplane + (int64_t)c_lo * cw;
            vrows = vplane + (int64_t)c_lo * cw;
        }
    }
    __syncthreads(); /* block-uniform: valid and the table */

    const int per_row = p.lines_per_row, n = p.line_len, units = p.units;
    const int total = (ye - yb) * per_row * units; /* the host keeps it below 2^31 */
    const int32_t *k = a.yuv;
    const int64_t sx_out = a.out_stride_x, sc_out = a.out_stride_c;
    for (int j = threadIdx.x; j < total; j += kThreads) {
        const int line = j / units, unit = j - line * units;
        const int dy = line / per_row, cfix = line - dy * per_row;
        const int yo = yb + dy;
        O *base = (O *)a.out + m * a.out_stride_m + (int64_t)yo * a.out_stride_y +
                  (p.layout == kPlanar ? cfix * sc_out : 0);
        /* contiguous lines: units start on 16-byte boundaries of out */
        const int skew = p.layout == kGeneral ? 0 : (int)(((uintptr_t)base / sizeof(O)) & (V - 1));
        const int e0 = unit * V - skew;
        const bool full = p.layout != kGeneral && e0 >= 0 && e0 + V <= n;
        int x, c; /* element max(e0, 0) of the line */
        {
            const int e = e0 > 0 ? e0 : 0;
            if (p.layout == kPlanar) { x = e; c = cfix; }
            else { x = e / C; c = e - x * C; }
        }
        SrcRow<S, YUV> r0 = {NULL, NULL, NULL}, r1 = {NULL, NULL, NULL};
        rc_axis_lerp wy = {0, 0, 1.0f, 0.0f};
        if (valid) {
            int s0 = yo, s1 = yo;
            if (RESIZE) {
                wy = rc_axis_weights(yo, p.sy, H);
                s0 = wy.i0;
                s1 = wy.i1;
            }
            r0.p = rows + (int64_t)(s0 - s_lo) * rowlen;
            r1.p = rows + (int64_t)(s1 - s_lo) * rowlen;
            if (YUV) {
                r0.u = urows + (int64_t)((s0 >> 1) - c_lo) * cw;
                r0.v = vrows + (int64_t)((s0 >> 1) - c_lo) * cw;
                r1.u = urows + (int64_t)((s1 >> 1) - c_lo) * cw;
                r1.v = vrows + (int64_t)((s1 >> 1) - c_lo) * cw;
            }
        }
        Pack<V, O> pack;
        /* uint8 rgb to uint8 interleaved out, source and out in step: a 16-byte copy */
        if (kCopy && !YUV && p.layout == kInterleaved && full && valid &&
            (((uintptr_t)(r0.p + e0)) & 15) == 0) {
            *(uint4 *)(base + e0) = *(const uint4 *)(r0.p + e0);
            continue;
        }
        int cached = -1; /* the pixel whose channels are in px (resize) or q0..q2 (yuv) */
        float px[4] = {0.f, 0.f, 0.f, 0.f};
        int32_t q0 = 0, q1 = 0, q2 = 0;
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int e = e0 + i;
            if (e < 0 || e >= n) continue;
            O o = (O)0;
            if (valid) {
                if (kTable) {
                    int b;
                    if (YUV && p.layout != kPlanar) { /* a pixel's 3 channels are neighbors */
                        if (x != cached) {
                            const int32_t luma = rc_yuv_luma(r0.p[x], k);
                            const int32_t cu = 8 * (r0.u[x >> 1] - 128), cv = 8 * (r0.v[x >> 1] - 128);
                            q0 = rc_yuv_r(luma, cv, k);
                            q1 = rc_yuv_g(luma, cu, cv, k);
                            q2 = rc_yuv_b(luma, cu, k);
                            cached = x;
                        }
                        b = c == 0 ? q0 : (c == 1 ? q1 : q2);
                    } else {
                        b = YUV ? rc_yuv_channel(r0.p[x], r0.u[x >> 1], r0.v[x >> 1], c, k)
                                : (int)r0.p[p.layout == kInterleaved ? e : x * C + c];
                    }
                    o = kCopy ? (O)b : table[kTable && !kCopy ? b : 0];
                } else if (!RESIZE) {
                    o = Out::from(r0.at(x, c, C, k), a.scale);
                } else {
                    if (x != cached) { /* the pixel's channels once, used by its C elements */
                        const rc_axis_lerp wx = rc_axis_weights(x, p.sx, W);
                        const int lo = p.layout == kPlanar ? cfix : 0;
                        const int hi = p.layout == kPlanar ? cfix : C - 1;
#pragma unroll
                        for (int cc = 0; cc < 4; cc++)
                            if (cc >= lo && cc <= hi)
                                px[cc] = rc_bilinear(r0.at(wx.i0, cc, C, k), r0.at(wx.i1, cc, C, k),
                                                     r1.at(wx.i0, cc, C, k), r1.at(wx.i1, cc, C, k),
                                                     &wy, &wx);
                        cached = x;
                    }
                    const float v = c == 0 ? px[0] : c == 1 ? px[1] : c == 2 ? px[2] : px[3];
                    o = Out::from(v, a.scale);
                }
            }
            if (full) pack.e[i] = o;
            else if (p.layout == kGeneral) base[x * sx_out + c * sc_out] = o;
            else base[e] = o;
            if (p.layout == kPlanar) x++;
            else if (++c == C) { c = 0; x++; }
        }
        if (full) *(uint4 *)(base + e0) = pack.q;
    }
}

template <typename S, bool YUV, typename Out, bool RESIZE>
rc_status launch(const rc_frames_args &a, const Plan &p, int64_t blocks, int smem_bytes,
                 cudaStream_t stream) {
    frames_kernel<S, YUV, Out, RESIZE><<<(unsigned)blocks, kThreads, smem_bytes, stream>>>(a, p);
    return RC_CUDA_CHECK(cudaGetLastError(), "gather_frames kernel launch");
}

template <typename S, bool YUV, typename Out>
rc_status launch_resize(const rc_frames_args &a, const Plan &p, bool resize, int64_t blocks,
                        int smem, cudaStream_t s) {
    return resize ? launch<S, YUV, Out, true>(a, p, blocks, smem, s)
                  : launch<S, YUV, Out, false>(a, p, blocks, smem, s);
}

template <typename S, bool YUV>
rc_status launch_out(const rc_frames_args &a, const Plan &p, bool resize, int64_t blocks,
                     int smem, cudaStream_t s) {
    switch (a.out_dtype) {
    case RC_U8: return launch_resize<S, YUV, OutU8>(a, p, resize, blocks, smem, s);
    case RC_F32: return launch_resize<S, YUV, OutF32>(a, p, resize, blocks, smem, s);
    case RC_F16: return launch_resize<S, YUV, OutF16>(a, p, resize, blocks, smem, s);
    case RC_BF16: return launch_resize<S, YUV, OutBF16>(a, p, resize, blocks, smem, s);
    default: return rc_fail(RC_ERR_TYPE, "gather_frames: unsupported out dtype");
    }
}

int stage_budget() {
    static int budget = 0; /* read once; a benign race writes the same value */
    if (!budget) {
        const char *env = getenv("ROBOCACHE_FRAMES_STAGE_BYTES");
        int b = env ? atoi(env) : 0;
        budget = b >= 1024 && b <= kMaxStageBytes ? b : kStageBytes;
    }
    return budget;
}

int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

rc_status run(const rc_frames_args &a, cudaStream_t stream) {
    const int64_t Ho = a.out_height, Wo = a.out_width, C = a.channels;
    if (a.count == 0 || Ho == 0 || Wo == 0) return RC_OK;
    const bool yuv = a.format == RC_FRAMES_YUV420;
    const bool resize = Ho != a.height || Wo != a.width;
    const int64_t es = rc_dtype_size(a.storage_dtype), oes = rc_dtype_size(a.out_dtype);
    const int64_t cw = (a.width + 1) / 2, ch = (a.height + 1) / 2;
    Plan p;
    p.sy = (float)a.height / (float)Ho;
    p.sx = (float)a.width / (float)Wo;
    /* which output axis is contiguous decides what a thread's 16 bytes are */
    const bool x_packed = Wo == 1 || a.out_stride_x == (C == 1 ? 1 : C);
    const bool c_packed = C == 1 || a.out_stride_c == 1;
    if (x_packed && c_packed) p.layout = kInterleaved;
    else if (Wo == 1 || a.out_stride_x == 1) p.layout = kPlanar;
    else p.layout = kGeneral;
    p.lines_per_row = p.layout == kPlanar ? (int)C : 1;
    p.line_len = (int)(p.layout == kPlanar ? Wo : Wo * C);
    const int V = (int)(16 / oes);
    p.units = (p.line_len + (p.layout == kGeneral ? 0 : V - 1) + V - 1) / V;

    /* rows per band: as many as fill the stage budget with their source rows */
    const int64_t row_bytes = yuv ? a.width : a.width * C * es; /* luma / rgb row */
    const int64_t band_bytes = yuv ? a.width + cw : row_bytes;   /* per source row, all planes */
    const int64_t budget = stage_budget();
    int64_t rows;
    if (!resize) {
        rows = budget / band_bytes;
        if (yuv) rows &= ~(int64_t)1; /* bands of whole row pairs read each chroma row once */
    } else {
        /* a band of R output rows reads at most (R - 1) * sy + 4 source rows */
        rows = (int64_t)((double)(budget / band_bytes - 4) / p.sy) + 1;
    }
    if (rows < 1) rows = 1;
    if (rows > Ho) rows = Ho;
    /* keep the per-block work index in int */
    const int64_t per_row_units = (int64_t)p.lines_per_row * p.units;
    if (per_row_units > INT32_MAX / 2)
        return rc_fail(RC_ERR_VALUE, "gather_frames: output rows of %lld elements are too long "
                       "for the CUDA kernel", (long long)(Wo * C));
    if (rows * per_row_units > INT32_MAX / 2) rows = (INT32_MAX / 2) / per_row_units;
    p.rows = (int)rows;
    int64_t span = resize ? (int64_t)((double)(rows - 1) * p.sy) + 4 : rows;
    if (span > a.height) span = a.height;
    const int64_t cspan = span / 2 + 2 < ch ? span / 2 + 2 : ch;
    /* +32: the 16-byte window around a range reaches up to 15 bytes past either end */
    const int64_t luma = round16(span * row_bytes + 32), chroma = yuv ? round16(cspan * cw + 32) : 0;
    const int64_t smem = luma + 2 * chroma;
    p.stage = smem <= kMaxStageBytes;
    p.luma_region = (int)(p.stage ? luma : 0);
    p.chroma_region = (int)(p.stage ? chroma : 0);
    p.bpf = (int)((Ho + rows - 1) / rows);
    const int64_t blocks = a.count * p.bpf;
    if (blocks > INT32_MAX)
        return rc_fail(RC_ERR_VALUE, "gather_frames: %lld frames of %lld rows are too many for "
                       "one launch", (long long)a.count, (long long)Ho);
    const int smem_bytes = p.stage ? (int)smem : 0;
    if (yuv) return launch_out<uint8_t, true>(a, p, resize, blocks, smem_bytes, stream);
    if (a.storage_dtype == RC_F32) return launch_out<float, false>(a, p, resize, blocks, smem_bytes, stream);
    return launch_out<uint8_t, false>(a, p, resize, blocks, smem_bytes, stream);
}

} // namespace

extern "C" rc_status rc_frames_cuda(const rc_frames_args *args, int device, void *stream) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = run(*args, (cudaStream_t)stream);
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}
