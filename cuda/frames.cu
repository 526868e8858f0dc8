/* cuda/frames.cu: gather_frames on the GPU, bit-identical to csrc/cpu/frames.c.
 * Layouts (elements): storage frames of rgb [H, W, C] (uint8 / float32) or yuv420 planes
 * (uint8 Y [H, W], U [ch, cw], V [ch, cw]); out [M, H', W', C] with any strides (planar or
 * interleaved). One block per (frame, band of output rows): the band's source rows are staged in
 * shared memory with 16-byte loads, then every output element is written once: by whole pixels
 * per thread for 3-channel out with aligned lines (pixels_kernel; interleaved runs pass through a
 * per-warp transpose in shared memory so that stores are contiguous), else 16 bytes of a line per
 * thread element by element (elements_kernel). Caller's stream, no host sync.
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
/* Resize from rgb: a band of R output rows stages ~R * in / out + 2 source rows, and its work is
 * R * W' / 4 pixel groups; at 16 KiB a 480x640 -> 224x224 band is 2 output rows, 112 groups for
 * 256 threads, at 48 KiB (the most without an opt-in) 10 rows. yuv420 rows are half as long:
 * 16 KiB is already 7 output rows there, and more rows measured slower (fewer, longer blocks
 * with 4 per SM: the last wave runs part-empty). Stage sweep: docs/frames.md. */
constexpr int kResizeRgbStageBytes = 48 * 1024;
constexpr int kMaxStageBytes = 48 * 1024; /* dynamic + static shared memory without an opt-in */
constexpr int kTableBytes = 256 * 4;      /* the static output table, reserved out of it */

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
    int align;         /* pixels_kernel: bytes (1..16) every output line start is aligned to */
    int scratch;       /* pixels_kernel: byte offset of the warps' store transpose, or -1 */
    float sy, sx;      /* resize scales, (float)in / out */
};

/* Output element types: the conversion of a float32 value (frames_math.h). */
struct OutU8 {
    using T = uint8_t;
    static __device__ __forceinline__ T from(float v, float) { return rc_to_u8(v); }
};
struct OutF32 {
    using T = float;
    static __device__ __forceinline__ T from(float v, float s) { return rc_frame_scaled(v, s); }
};
struct OutF16 {
    using T = uint16_t;
    static __device__ __forceinline__ T from(float v, float s) {
        return rc_f32_to_f16(rc_frame_scaled(v, s));
    }
};
struct OutBF16 {
    using T = uint16_t;
    static __device__ __forceinline__ T from(float v, float s) {
        return rc_f32_to_bf16(rc_frame_scaled(v, s));
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

/* The source rows of a block's band: staged in shared memory, or where they are in storage
 * (rows too long to stage); row s of the frame (and its chroma row s / 2) as a SrcRow. */
template <typename S, bool YUV>
struct Band {
    const S *rows;
    const uint8_t *urows, *vrows;
    int s_lo, c_lo;
    __device__ __forceinline__ SrcRow<S, YUV> row(int s, int rowlen, int cw) const {
        SrcRow<S, YUV> r = {rows + (int64_t)(s - s_lo) * rowlen, NULL, NULL};
        if (YUV) {
            r.u = urows + (int64_t)((s >> 1) - c_lo) * cw;
            r.v = vrows + (int64_t)((s >> 1) - c_lo) * cw;
        }
        return r;
    }
};

/* Stages the source rows that output rows [yb, ye) of frame `id` read (nothing when !valid). */
template <typename S, bool YUV, bool RESIZE>
__device__ __forceinline__ Band<S, YUV> load_band(const rc_gather_frames_args &a, const Plan &p, char *sm,
                                                  int64_t id, bool valid, int yb, int ye) {
    const int W = (int)a.width, H = (int)a.height, C = (int)a.channels;
    const int cw = (W + 1) >> 1;
    const int rowlen = YUV ? W : W * C; /* elements of S per source row */
    int s_lo, s_hi;                     /* source rows of the band */
    if (RESIZE) {
        s_lo = rc_axis_weights(yb, p.sy, H).i0;
        s_hi = rc_axis_weights(ye - 1, p.sy, H).i1;
    } else {
        s_lo = yb;
        s_hi = ye - 1;
    }
    Band<S, YUV> b = {NULL, NULL, NULL, s_lo, s_lo >> 1};
    if (!valid) return b;
    const S *frame = (const S *)a.storage + id * a.frame_stride;
    const uint8_t *uplane = (const uint8_t *)frame + (int64_t)H * W;
    const uint8_t *vplane = uplane + (int64_t)((H + 1) >> 1) * cw;
    if (p.stage) {
        b.rows = (const S *)stage(sm, (const char *)(frame + (int64_t)s_lo * rowlen),
                                  (int64_t)(s_hi - s_lo + 1) * rowlen * (int64_t)sizeof(S));
        if (YUV) {
            const int64_t cn = (int64_t)((s_hi >> 1) - b.c_lo + 1) * cw;
            b.urows = (const uint8_t *)stage(sm + p.luma_region,
                                             (const char *)(uplane + (int64_t)b.c_lo * cw), cn);
            b.vrows = (const uint8_t *)stage(sm + p.luma_region + p.chroma_region,
                                             (const char *)(vplane + (int64_t)b.c_lo * cw), cn);
        }
    } else { /* rows too long to stage: read them where they are */
        b.rows = frame + (int64_t)s_lo * rowlen;
        b.urows = uplane + (int64_t)b.c_lo * cw;
        b.vrows = vplane + (int64_t)b.c_lo * cw;
    }
    return b;
}

template <int V, typename O>
union Pack {
    uint4 q;
    O e[V];
};

/* Block (m, band): output rows [yb, ye) of frame m. Lines are the contiguous runs of out along
 * its fastest axis (a row of W' * C for interleaved out, a row of one channel for planar out);
 * a unit is the 16 bytes of a line a thread writes. */
template <typename S, bool YUV, typename Out, bool RESIZE>
__global__ void __launch_bounds__(kThreads) elements_kernel(const rc_gather_frames_args a, const Plan p) {
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

    const Band<S, YUV> band = load_band<S, YUV, RESIZE>(a, p, (char *)smem, id, valid, yb, ye);
    if (kTable && !kCopy)
        for (int i = threadIdx.x; i < 256; i += kThreads) table[i] = Out::from((float)i, a.scale);
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
            r0 = band.row(s0, rowlen, cw);
            r1 = band.row(s1, rowlen, cw);
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

/* N consecutive elements at p into registers, with the widest loads p's alignment allows
 * (staged rows sit at their storage alignment modulo 16: a 640-wide plane's are all aligned). */
template <typename W, typename T, int N>
__device__ __forceinline__ void load_as(T (&b)[N], const T *p) {
    union {
        W w[N * sizeof(T) / sizeof(W)];
        T t[N];
    } u;
#pragma unroll
    for (int k = 0; k < (int)(N * sizeof(T) / sizeof(W)); k++) u.w[k] = ((const W *)p)[k];
#pragma unroll
    for (int i = 0; i < N; i++) b[i] = u.t[i];
}
template <typename T, int N>
__device__ __forceinline__ void load_run(T (&b)[N], const T *p) {
    constexpr int B = N * (int)sizeof(T);
    const unsigned al = (unsigned)(uintptr_t)p;
    if constexpr (B % 16 == 0) if ((al & 15) == 0) return load_as<uint4>(b, p);
    if constexpr (B % 8 == 0) if ((al & 7) == 0) return load_as<uint2>(b, p);
    if constexpr (B % 4 == 0 && sizeof(T) < 4) if ((al & 3) == 0) return load_as<uint32_t>(b, p);
    if constexpr (B % 2 == 0 && sizeof(T) == 1) if ((al & 1) == 0) return load_as<uint16_t>(b, p);
#pragma unroll
    for (int i = 0; i < N; i++) b[i] = p[i];
}

/* N consecutive out elements from registers: the widest stores that both N's bytes and
 * `align` (what the host found every line start aligned to) allow. */
template <typename W, typename T, int N>
__device__ __forceinline__ void store_as(T *p, const T (&b)[N]) {
    union {
        W w[N * sizeof(T) / sizeof(W)];
        T t[N];
    } u;
#pragma unroll
    for (int i = 0; i < N; i++) u.t[i] = b[i];
#pragma unroll
    for (int k = 0; k < (int)(N * sizeof(T) / sizeof(W)); k++) ((W *)p)[k] = u.w[k];
}
template <typename T, int N>
__device__ __forceinline__ void store_run(T *p, const T (&b)[N], int align) {
    constexpr int B = N * (int)sizeof(T);
    if constexpr (B % 16 == 0) if (align >= 16) return store_as<uint4>(p, b);
    if constexpr (B % 8 == 0) if (align >= 8) return store_as<uint2>(p, b);
    if constexpr (B % 4 == 0 && sizeof(T) < 4) if (align >= 4) return store_as<uint32_t>(p, b);
#pragma unroll
    for (int i = 0; i < N; i++) p[i] = b[i];
}

/* Channels of source pixel x of row r, as floats (exact for bytes). */
template <typename S, bool YUV>
__device__ __forceinline__ void source_pixel(float (&px)[3], const SrcRow<S, YUV> &r, int x,
                                             const int32_t *k) {
    if constexpr (YUV) {
        const int32_t luma = rc_yuv_luma(r.p[x], k);
        const int32_t cu = 8 * (r.u[x >> 1] - 128), cv = 8 * (r.v[x >> 1] - 128);
        px[0] = (float)rc_yuv_r(luma, cv, k);
        px[1] = (float)rc_yuv_g(luma, cu, cv, k);
        px[2] = (float)rc_yuv_b(luma, cu, k);
    } else {
#pragma unroll
        for (int c = 0; c < 3; c++) px[c] = (float)r.p[x * 3 + c];
    }
}

/* 3-channel interleaved or planar out whose line starts are all aligned to p.align bytes.
 * A thread owns G whole pixels of one output row: every channel of them in registers, no
 * per-element branch, then one store run per line. Without resize G is one 16-byte unit of a
 * planar line (16 uint8, 8 half, 4 float32 pixels; an interleaved run of them is 3 units) and
 * its luma, chroma or rgb bytes come in one or a few shared loads; with resize, whose pixels
 * cost ~100 operations each, G = 4 keeps enough groups per band to occupy the block. */
template <typename S, bool YUV, typename Out, bool RESIZE>
__global__ void __launch_bounds__(kThreads) pixels_kernel(const rc_gather_frames_args a, const Plan p) {
    using O = typename Out::T;
    constexpr int G = RESIZE ? 4 : 16 / (int)sizeof(O);
    constexpr bool kBytes = std::is_same<S, uint8_t>::value;
    /* uint8 sources without resize: float outputs from a 256-entry table (see elements_kernel) */
    constexpr bool kTable = !RESIZE && kBytes && !std::is_same<Out, OutU8>::value;
    extern __shared__ uint4 smem[];
    __shared__ O table[kTable ? 256 : 1];

    const int64_t m = blockIdx.x / (unsigned)p.bpf;
    const int yb = (int)(blockIdx.x - m * p.bpf) * p.rows;
    const int ye = min(yb + p.rows, (int)a.out_height);
    const int64_t id = a.ids[m * a.ids_stride];
    const bool valid = id >= 0 && id < a.frames; /* other ids write zeros */
    const int W = (int)a.width, H = (int)a.height, Wo = (int)a.out_width;
    const int cw = (W + 1) >> 1;
    const int rowlen = YUV ? W : W * 3;
    const Band<S, YUV> band = load_band<S, YUV, RESIZE>(a, p, (char *)smem, id, valid, yb, ye);
    if (kTable)
        for (int i = threadIdx.x; i < 256; i += kThreads) table[i] = Out::from((float)i, a.scale);
    __syncthreads(); /* block-uniform: valid and the table */

    const int groups = (Wo + G - 1) / G;
    const int total = (ye - yb) * groups; /* the host keeps it below 2^31 */
    const int32_t *k = a.yuv;
    const int lane = threadIdx.x & 31;
    /* Interleaved out without resize: a group's run is 3 x 16 bytes, and stored from registers,
     * lane after lane 48 bytes apart, each 16-byte store fills half of a sector. The warp's runs
     * go through shared memory instead (p.scratch, 96 x 16 bytes per warp, both sides free of bank
     * conflicts), so that each of its three stores covers 512 contiguous bytes of out. */
    const bool transpose = !RESIZE && p.scratch >= 0;
    uint4 *const wt = (uint4 *)((char *)smem + (transpose ? p.scratch : 0)) + (threadIdx.x >> 5) * 96;
    for (int j0 = threadIdx.x - lane; j0 < total; j0 += kThreads) { /* warp-uniform trips */
        const int j = j0 + lane;
        O *mine = NULL; /* where this lane's run goes through the transpose */
        if (j < total) {
            const int dy = j / groups, x0 = (j - dy * groups) * G;
            const int yo = yb + dy;
            const bool tail = x0 + G > Wo; /* the row's last group: pixels past Wo - 1 repeat it */
            O v[3][G];
            if (!valid) {
#pragma unroll
                for (int i = 0; i < G; i++) v[0][i] = v[1][i] = v[2][i] = (O)0;
            } else if (!RESIZE) {
                const SrcRow<S, YUV> r = band.row(yo, rowlen, cw);
                if constexpr (YUV) {
                    uint8_t yy[G], uu[G / 2], vv[G / 2];
                    if (!tail) { /* x0 is even: the group's chroma pairs are its own */
                        load_run(yy, r.p + x0);
                        load_run(uu, r.u + (x0 >> 1));
                        load_run(vv, r.v + (x0 >> 1));
                    } else {
#pragma unroll
                        for (int i = 0; i < G; i++) {
                            const int x = min(x0 + i, Wo - 1);
                            yy[i] = r.p[x];
                            if (!(i & 1)) uu[i >> 1] = r.u[x >> 1], vv[i >> 1] = r.v[x >> 1];
                        }
                    }
#pragma unroll
                    for (int i = 0; i < G; i++) {
                        const int32_t luma = rc_yuv_luma(yy[i], k);
                        const int32_t cu = 8 * (uu[i >> 1] - 128), cv = 8 * (vv[i >> 1] - 128);
                        const int32_t q[3] = {rc_yuv_r(luma, cv, k), rc_yuv_g(luma, cu, cv, k),
                                              rc_yuv_b(luma, cu, k)};
#pragma unroll
                        for (int c = 0; c < 3; c++) v[c][i] = kTable ? table[q[c]] : (O)q[c];
                    }
                } else {
                    S s[3 * G];
                    if (!tail) {
                        load_run(s, r.p + 3 * x0);
                    } else {
#pragma unroll
                        for (int i = 0; i < G; i++)
#pragma unroll
                            for (int c = 0; c < 3; c++) s[3 * i + c] = r.p[3 * min(x0 + i, Wo - 1) + c];
                    }
#pragma unroll
                    for (int i = 0; i < G; i++)
#pragma unroll
                        for (int c = 0; c < 3; c++) {
                            if constexpr (kTable) v[c][i] = table[s[3 * i + c]];
                            else if constexpr (kBytes) v[c][i] = (O)s[3 * i + c]; /* uint8 planar */
                            else v[c][i] = Out::from((float)s[3 * i + c], a.scale);
                        }
                }
            } else {
                const rc_axis_lerp wy = rc_axis_weights(yo, p.sy, H);
                const SrcRow<S, YUV> r0 = band.row(wy.i0, rowlen, cw), r1 = band.row(wy.i1, rowlen, cw);
#pragma unroll
                for (int i = 0; i < G; i++) {
                    const rc_axis_lerp wx = rc_axis_weights(min(x0 + i, Wo - 1), p.sx, W);
                    float p00[3], p01[3], p10[3], p11[3];
                    source_pixel(p00, r0, wx.i0, k);
                    source_pixel(p01, r0, wx.i1, k);
                    source_pixel(p10, r1, wx.i0, k);
                    source_pixel(p11, r1, wx.i1, k);
#pragma unroll
                    for (int c = 0; c < 3; c++)
                        v[c][i] = Out::from(rc_bilinear(p00[c], p01[c], p10[c], p11[c], &wy, &wx), a.scale);
                }
            }
            O *base = (O *)a.out + m * a.out_stride_m + (int64_t)yo * a.out_stride_y;
            const int n = tail ? Wo - x0 : G;
            if (p.layout == kInterleaved) {
                O *dst = base + 3 * x0;
                if (!tail) {
                    O run[3 * G];
#pragma unroll
                    for (int i = 0; i < G; i++)
#pragma unroll
                        for (int c = 0; c < 3; c++) run[3 * i + c] = v[c][i];
                    if (transpose) {
                        store_run((O *)(wt + 3 * lane), run, 16);
                        mine = dst;
                    } else {
                        store_run(dst, run, p.align);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < G; i++)
                        if (i < n)
#pragma unroll
                            for (int c = 0; c < 3; c++) dst[3 * i + c] = v[c][i];
                }
            } else {
#pragma unroll
                for (int c = 0; c < 3; c++) {
                    O *dst = base + c * a.out_stride_c + x0;
                    if (!tail) {
                        store_run(dst, v[c], p.align);
                    } else {
#pragma unroll
                        for (int i = 0; i < G; i++)
                            if (i < n) dst[i] = v[c][i];
                    }
                }
            }
        }
        if (transpose) { /* warp-uniform */
            __syncwarp();
#pragma unroll
            for (int u = 0; u < 3; u++) {
                const int q = u * 32 + lane, s = q / 3; /* unit q of the warp: part q - 3s of lane s's run */
                uint4 *d = (uint4 *)__shfl_sync(0xffffffffu, (uintptr_t)mine, s);
                if (d) d[q - 3 * s] = wt[q]; /* none for lanes past the band or a row's tail group */
            }
            __syncwarp(); /* wt is written again by the next trip */
        }
    }
}

template <typename S, bool YUV, typename Out, bool RESIZE>
rc_status launch(const rc_gather_frames_args &a, const Plan &p, bool pixels, int64_t blocks, int smem_bytes,
                 cudaStream_t stream) {
    if (pixels)
        pixels_kernel<S, YUV, Out, RESIZE><<<(unsigned)blocks, kThreads, smem_bytes, stream>>>(a, p);
    else
        elements_kernel<S, YUV, Out, RESIZE><<<(unsigned)blocks, kThreads, smem_bytes, stream>>>(a, p);
    return RC_CUDA_CHECK(cudaGetLastError(), "gather_frames kernel launch");
}

template <typename S, bool YUV, typename Out>
rc_status launch_resize(const rc_gather_frames_args &a, const Plan &p, bool resize, bool pixels,
                        int64_t blocks, int smem, cudaStream_t s) {
    return resize ? launch<S, YUV, Out, true>(a, p, pixels, blocks, smem, s)
                  : launch<S, YUV, Out, false>(a, p, pixels, blocks, smem, s);
}

template <typename S, bool YUV>
rc_status launch_out(const rc_gather_frames_args &a, const Plan &p, bool resize, bool pixels,
                     int64_t blocks, int smem, cudaStream_t s) {
    switch (a.out_dtype) {
    case RC_U8: return launch_resize<S, YUV, OutU8>(a, p, resize, pixels, blocks, smem, s);
    case RC_F32: return launch_resize<S, YUV, OutF32>(a, p, resize, pixels, blocks, smem, s);
    case RC_F16: return launch_resize<S, YUV, OutF16>(a, p, resize, pixels, blocks, smem, s);
    case RC_BF16: return launch_resize<S, YUV, OutBF16>(a, p, resize, pixels, blocks, smem, s);
    default: return rc_fail(RC_ERR_TYPE, "gather_frames: unsupported out dtype");
    }
}

/* ROBOCACHE_FRAMES_STAGE_BYTES (tuning), or 0 for the per-case defaults. */
int stage_override() {
    static int budget = -1; /* read once; a benign race writes the same value */
    if (budget < 0) {
        const char *env = getenv("ROBOCACHE_FRAMES_STAGE_BYTES");
        int b = env ? atoi(env) : 0;
        budget = b >= 1024 && b <= kMaxStageBytes ? b : 0;
    }
    return budget;
}

int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

rc_status run(const rc_gather_frames_args &a, cudaStream_t stream) {
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
    /* whole pixels per thread: 3 channels, contiguous lines; uint8 rgb into uint8 interleaved
     * out without resize stays a 16-byte copy in elements_kernel */
    const bool copy = !resize && !yuv && es == 1 && oes == 1 && p.layout == kInterleaved;
    const bool pixels = C == 3 && p.layout != kGeneral && !copy;
    int64_t al = 16; /* what every line start is aligned to, in bytes */
    while (al > 1 && ((uintptr_t)a.out % al || (a.out_stride_m * oes) % al ||
                      (a.out_stride_y * oes) % al ||
                      (p.layout == kPlanar && (a.out_stride_c * oes) % al)))
        al /= 2;
    p.align = (int)al;

    /* the warps' store transpose (pixels_kernel): interleaved out of 2- or 4-byte elements, no
     * resize, 16-byte lines. Not for uint8 out: its 16-pixel groups need 66 registers, 3 blocks
     * per SM, too few warps to hide the extra round trip (H100: 54 -> 60 us, docs/perf-notes.md) */
    const int64_t scratch =
        pixels && !resize && oes >= 2 && p.layout == kInterleaved && al >= 16 ? kThreads * 48 : 0;
    /* rows per band: as many as fill the stage budget with their source rows. Next to the 12 KiB
     * scratch the stage gives up 2 KiB, so that 8 blocks of 256 threads still fit an SM's 228 KiB
     * (with their 1 KiB table and the 1 KiB the SM reserves per block). */
    const int64_t row_bytes = yuv ? a.width : a.width * C * es; /* luma / rgb row */
    const int64_t band_bytes = yuv ? a.width + cw : row_bytes;   /* per source row, all planes */
    const int64_t budget = stage_override() ? stage_override()
                                            : resize && !yuv ? kResizeRgbStageBytes
                                            : scratch ? kStageBytes - 2048 : kStageBytes;
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
    /* shared memory for a band of `rows` output rows; the static table shares the limit */
    int64_t luma, chroma, smem;
    for (;;) {
        int64_t span = resize ? (int64_t)((double)(rows - 1) * p.sy) + 4 : rows;
        if (span > a.height) span = a.height;
        const int64_t cspan = span / 2 + 2 < ch ? span / 2 + 2 : ch;
        /* +32: the 16-byte window around a range reaches up to 15 bytes past either end */
        luma = round16(span * row_bytes + 32);
        chroma = yuv ? round16(cspan * cw + 32) : 0;
        smem = luma + 2 * chroma;
        if (smem + scratch <= kMaxStageBytes - kTableBytes || rows == 1) break;
        rows--;
    }
    p.rows = (int)rows;
    p.stage = smem + scratch <= kMaxStageBytes - kTableBytes;
    p.luma_region = (int)(p.stage ? luma : 0);
    p.chroma_region = (int)(p.stage ? chroma : 0);
    p.scratch = scratch ? (int)(p.stage ? smem : 0) : -1;
    p.bpf = (int)((Ho + rows - 1) / rows);
    const int64_t blocks = a.count * p.bpf;
    if (blocks > INT32_MAX)
        return rc_fail(RC_ERR_VALUE, "gather_frames: %lld frames of %lld rows are too many for "
                       "one launch", (long long)a.count, (long long)Ho);
    const int smem_bytes = (int)((p.stage ? smem : 0) + scratch);
    if (yuv) return launch_out<uint8_t, true>(a, p, resize, pixels, blocks, smem_bytes, stream);
    if (a.storage_dtype == RC_F32)
        return launch_out<float, false>(a, p, resize, pixels, blocks, smem_bytes, stream);
    return launch_out<uint8_t, false>(a, p, resize, pixels, blocks, smem_bytes, stream);
}

} // namespace

extern "C" rc_status rc_gather_frames_cuda(const rc_gather_frames_args *args, int device, void *stream) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    st = run(*args, (cudaStream_t)stream);
    rc_status st2 = guard.leave();
    return st != RC_OK ? st : st2;
}
