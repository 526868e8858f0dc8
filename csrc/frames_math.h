/* frames_math.h: the per-pixel arithmetic of gather_frames, written once for both devices.
 *
 * Included by csrc/cpu/frames.c (C11) and cuda/frames.cu (CUDA C++). Sharing this text is what
 * makes the CPU and CUDA results equal bit for bit: the YUV conversion is integer arithmetic,
 * and the bilinear weights and blend are float32 operations each rounded once (CUDA: the _rn
 * intrinsics, so nvcc cannot contract a*b+c into an FMA on its own; gcc builds with
 * -ffp-contract=off); the one fused operation is written out on both sides.
 * Semantics and the measurements behind them: docs/frames.md.
 */
#ifndef RC_FRAMES_MATH_H
#define RC_FRAMES_MATH_H

#include <stdint.h>

#include "resample_math.h" /* RC_HD; rc_f32_to_f16 / rc_f32_to_bf16 (round to nearest even) */
#include "robocache.h"

#ifdef __CUDA_ARCH__
#define RC_FMUL(a, b) __fmul_rn((a), (b))
#define RC_FADD(a, b) __fadd_rn((a), (b))
#define RC_FSUB(a, b) __fsub_rn((a), (b))
#define RC_FDIV(a, b) __fdiv_rn((a), (b))
#define RC_RINT(a) rintf(a)
#else
#define RC_FMUL(a, b) ((a) * (b))
#define RC_FADD(a, b) ((a) + (b))
#define RC_FSUB(a, b) ((a) - (b))
#define RC_FDIV(a, b) ((a) / (b))
#define RC_RINT(a) rintf(a) /* the default rounding mode: half to even */
#endif

/* ---- YUV 4:2:0 -> RGB ------------------------------------------------------------------------
 * FFmpeg's swscale (what PyAV's to_ndarray(format="rgb24") runs) converts yuv420p to rgb24 with
 * 16-bit fixed point: each of luma and the chroma terms is (8 * sample - offset) * coefficient,
 * keeping the high 16 bits (a floor), and the terms are added and clamped to 0..255. Chroma is
 * not interpolated: one U, V sample colors its 2x2 block. Doing the same arithmetic here makes
 * a frame stored as YUV give exactly the bytes PyAV would have handed back as RGB (measured
 * bit-exact on real H.264 and AV1 files and on every (U, V) pair; docs/frames.md). A
 * correctly rounded conversion would differ from PyAV by up to 3. */

enum { RC_YUV_Y, RC_YUV_YOFF, RC_YUV_VR, RC_YUV_UG, RC_YUV_VG, RC_YUV_UB, RC_YUV_NCOEFFS };

/* The coefficients of `matrix` (rc_yuv_matrix) and range, in units of 2^-13: the matrix's
 * Kr/Kb terms (R = Y + 2(1-Kr)V, B = Y + 2(1-Kb)U, G = Y - 2Kb(1-Kb)/Kg U - 2Kr(1-Kr)/Kg V), each
 * scaled by 255/224 (chroma) and 255/219 (luma) for limited range, rounded to 16.16 and then to
 * 2^-13 as swscale does (full range takes the 16.16 chroma values times 224/255, truncated).
 * tests/reference.py derives the same numbers from Kr, Kb. Host only (the binding fills
 * rc_gather_frames_args.yuv with them). */
static inline void rc_yuv_coeffs(int32_t k[RC_YUV_NCOEFFS], int matrix, int full_range) {
    static const int16_t table[3][2][RC_YUV_NCOEFFS] = {
        /* y, yoff, vr, ug, vg, ub: limited range, then full range */
        {{9539, 128, 13075, -3209, -6660, 16525}, {8192, 0, 11485, -2819, -5850, 14516}}, /* 601 */
        {{9539, 128, 14686, -1747, -4366, 17305}, {8192, 0, 12901, -1534, -3835, 15201}}, /* 709 */
        {{9539, 128, 13752, -1535, -5328, 17545}, {8192, 0, 12080, -1348, -4680, 15412}}, /* 2020 */
    };
    for (int i = 0; i < RC_YUV_NCOEFFS; i++) k[i] = table[matrix][full_range ? 1 : 0][i];
}

/* The high half of a signed 16 x 16 bit product (x86 pmulhw): floor(a * b / 65536). Both
 * compilers shift signed values arithmetically. */
RC_HD int32_t rc_mulhi(int32_t a, int32_t b) { return (a * b) >> 16; }

/* The terms of a pixel with luma y and chroma u, v (0..255 each): luma once, then each channel
 * from it and the centered chroma cu = 8 * (u - 128), cv = 8 * (v - 128). */
RC_HD int32_t rc_yuv_luma(int32_t y, const int32_t *k) {
    return rc_mulhi(8 * y - k[RC_YUV_YOFF], k[RC_YUV_Y]);
}
RC_HD int32_t rc_clamp_u8(int32_t x) { return x < 0 ? 0 : (x > 255 ? 255 : x); }
RC_HD int32_t rc_yuv_r(int32_t luma, int32_t cv, const int32_t *k) {
    return rc_clamp_u8(luma + rc_mulhi(cv, k[RC_YUV_VR]));
}
RC_HD int32_t rc_yuv_g(int32_t luma, int32_t cu, int32_t cv, const int32_t *k) {
    return rc_clamp_u8(luma + rc_mulhi(cu, k[RC_YUV_UG]) + rc_mulhi(cv, k[RC_YUV_VG]));
}
RC_HD int32_t rc_yuv_b(int32_t luma, int32_t cu, const int32_t *k) {
    return rc_clamp_u8(luma + rc_mulhi(cu, k[RC_YUV_UB]));
}

/* Channel c (0 R, 1 G, 2 B) of the pixel with luma y and chroma u, v. */
RC_HD int32_t rc_yuv_channel(int32_t y, int32_t u, int32_t v, int c, const int32_t *k) {
    const int32_t luma = rc_yuv_luma(y, k), cu = 8 * (u - 128), cv = 8 * (v - 128);
    return c == 0 ? rc_yuv_r(luma, cv, k) : (c == 1 ? rc_yuv_g(luma, cu, cv, k) : rc_yuv_b(luma, cu, k));
}

/* ---- bilinear resize: torch's upsample_bilinear2d (align_corners=False, no antialias) ------- */

/* Output index d of an axis resized from n_in to n_out (scale = (float)n_in / n_out): the two
 * input indices and their weights, as torch computes them in float32. The source coordinate
 * (d + 0.5) * scale - 0.5 is rounded once: torch's CPU (AVX2 build) and CUDA kernels compile it
 * to a fused multiply-add, and rounding the product separately moves it by up to an ulp of the
 * coordinate, which shows (measured: 480 -> 224, up to 0.004 on 0..255 values against
 * torch's 3e-5). The host gets the fused result from double arithmetic: the product of two
 * floats and the sum with 0.5 are exact in double, so its one rounding to float is fmaf's. */
typedef struct {
    int32_t i0, i1;
    float l0, l1;
} rc_axis_lerp;

RC_HD rc_axis_lerp rc_axis_weights(int32_t d, float scale, int32_t n_in) {
    rc_axis_lerp w;
    const float mid = RC_FADD((float)d, 0.5f);
#ifdef __CUDA_ARCH__
    float src = __fmaf_rn(scale, mid, -0.5f);
#else
    float src = (float)((double)scale * (double)mid - 0.5);
#endif
    if (!(src > 0.0f)) src = 0.0f;
    w.i0 = (int32_t)src; /* src >= 0: truncation is floor, and i0 <= n_in - 1 */
    if (w.i0 > n_in - 1) w.i0 = n_in - 1;
    w.i1 = w.i0 < n_in - 1 ? w.i0 + 1 : w.i0;
    w.l1 = RC_FSUB(src, (float)w.i0); /* exact */
    w.l0 = RC_FSUB(1.0f, w.l1);
    return w;
}

/* l0y * (l0x * p00 + l1x * p01) + l1y * (l0x * p10 + l1x * p11), every operation rounded. */
RC_HD float rc_bilinear(float p00, float p01, float p10, float p11, const rc_axis_lerp *wy,
                        const rc_axis_lerp *wx) {
    const float top = RC_FADD(RC_FMUL(wx->l0, p00), RC_FMUL(wx->l1, p01));
    const float bot = RC_FADD(RC_FMUL(wx->l0, p10), RC_FMUL(wx->l1, p11));
    return RC_FADD(RC_FMUL(wy->l0, top), RC_FMUL(wy->l1, bot));
}

/* ---- output conversion ---------------------------------------------------------------------- */

/* uint8 out: round half to even, clamp to 0..255 (NaN -> 0); integer-valued inputs (decoded
 * bytes, no resize) come back unchanged. */
RC_HD uint8_t rc_to_u8(float v) {
    v = RC_RINT(v);
    return v >= 255.0f ? (uint8_t)255 : (v > 0.0f ? (uint8_t)v : (uint8_t)0);
}

/* Float out: v / scale (a true division, as torch's x / 255.0) when scale > 0, then rounded to
 * out_dtype; the 16-bit types come back as their bits. */
RC_HD float rc_frame_scaled(float v, float scale) { return scale > 0.0f ? RC_FDIV(v, scale) : v; }

#endif /* RC_FRAMES_MATH_H */
