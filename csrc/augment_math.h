/* augment_math.h: one output pixel of an augmented frame gather, written once for both devices.
 *
 * Included by csrc/cpu/augment.c (C11) and cuda/augment.cu (CUDA C++). The chain per output pixel
 * (x, y) of an out_height x out_width frame, with the parameters of its sample (rc_aug_param):
 *   hflip (of the output) -> affine/rotation (inverse map into the image it acts on, nearest or
 *   bilinear, fill 0) -> hflip (of the affine's input) -> the window (out_top, out_left) of the
 *   resized crop -> resize of the crop box (torch's bilinear, antialiased as torchvision's resize)
 *   -> the stored frame (YUV 4:2:0 converted as gather_frames does, or RGB)
 * then the colour ops of the sample in its order on values in [0, 1] (torchvision v2's float
 * formulas: brightness, contrast, saturation, hue, sharpness), then (v - mean) / std.
 * Every float operation is rounded once on both devices (RC_FMUL & co., gcc -ffp-contract=off), so
 * CPU and CUDA agree bit for bit. Semantics and their torchvision oracles: docs/loader.md#augmentation.
 */
#ifndef RC_AUGMENT_MATH_H
#define RC_AUGMENT_MATH_H

#include <math.h>
#include <stdint.h>

#include "frames_math.h"
#include "robocache.h"

#define M_(a, b) RC_FMUL(a, b)
#define A_(a, b) RC_FADD(a, b)
#define S_(a, b) RC_FSUB(a, b)
#define D_(a, b) RC_FDIV(a, b)

/* The source pixel (sy, sx) of stored frame `frame` as float RGB (0..255). */
RC_HD void rc_aug_source(float px[3], const rc_gather_frames_args *a, const char *frame, int32_t sy,
                         int32_t sx) {
    const int64_t W = a->width;
    if (a->format == RC_FRAMES_YUV420) {
        const int64_t cw = (W + 1) >> 1, ch = (a->height + 1) >> 1;
        const uint8_t *yp = (const uint8_t *)frame;
        const uint8_t *up = yp + a->height * W, *vp = up + ch * cw;
        const int64_t c = (int64_t)(sy >> 1) * cw + (sx >> 1);
        const int32_t luma = rc_yuv_luma(yp[(int64_t)sy * W + sx], a->yuv);
        const int32_t cu = 8 * (up[c] - 128), cv = 8 * (vp[c] - 128);
        px[0] = (float)rc_yuv_r(luma, cv, a->yuv);
        px[1] = (float)rc_yuv_g(luma, cu, cv, a->yuv);
        px[2] = (float)rc_yuv_b(luma, cu, a->yuv);
    } else if (a->storage_dtype == RC_U8) {
        const uint8_t *p = (const uint8_t *)frame + ((int64_t)sy * W + sx) * 3;
        px[0] = (float)p[0], px[1] = (float)p[1], px[2] = (float)p[2];
    } else {
        const float *p = (const float *)frame + ((int64_t)sy * W + sx) * 3;
        px[0] = p[0], px[1] = p[1], px[2] = p[2];
    }
}

/* ---- resize: torch's _upsample_bilinear2d_aa (what torchvision v2's resize runs, antialias=True)
 * One axis: output index i of n_out taken from n_in inputs (scale = n_in / n_out as float): the
 * taps [lo, lo + n) and the triangle filter's weights, normalized by their sum, as torch's CPU kernel
 * computes them (center and the window bounds in double, the weights in float). */
typedef struct {
    int32_t lo, n;
    float center, invscale, total;
} rc_aa_axis;

RC_HD float rc_aa_filter(double x) {
    float f = (float)x;
    if (f < 0.0f) f = -f;
    return f < 1.0f ? S_(1.0f, f) : 0.0f;
}

RC_HD float rc_aa_weight(const rc_aa_axis *w, int32_t j) {
    return rc_aa_filter(((double)(float)((float)(j + w->lo) - w->center) + 0.5) * (double)w->invscale);
}

RC_HD rc_aa_axis rc_aa_setup(int32_t i, int32_t n_in, int32_t n_out) {
    rc_aa_axis w;
    const float scale = D_((float)n_in, (float)n_out);
    const float support = scale >= 1.0f ? scale : 1.0f;
    w.center = (float)((double)scale * ((double)i + 0.5));
    w.invscale = scale >= 1.0f ? (float)(1.0 / (double)scale) : 1.0f;
    int64_t lo = (int64_t)((double)S_(w.center, support) + 0.5);
    if (lo < 0) lo = 0;
    int64_t hi = (int64_t)((double)A_(w.center, support) + 0.5);
    if (hi > n_in) hi = n_in;
    w.lo = (int32_t)lo;
    w.n = (int32_t)(hi - lo);
    w.total = 0.0f;
    for (int32_t j = 0; j < w.n; j++) w.total = A_(w.total, rc_aa_weight(&w, j));
    return w;
}

RC_HD float rc_aa_tap(const rc_aa_axis *w, int32_t j) {
    const float f = rc_aa_weight(w, j);
    return w->total != 0.0f ? D_(f, w->total) : f;
}

/* The antialiased resize's taps of every window row (or column): entry i (window index i, the
 * resized box's i + out_top) has n[i] taps from source index lo[i] (relative to the crop box) with
 * weights w[i * k .. i * k + n[i]), the values rc_aa_tap gives. The CUDA kernel builds them per block
 * in shared memory; the CPU computes each tap where it is used (the same floats). */
typedef struct {
    const int32_t *lo, *n;
    const float *w;
    int32_t k; /* weights per entry (the most taps an entry may have) */
} rc_aa_table;

/* Taps of window index i along an axis whose crop box has n_in pixels resized to n_out, out's window
 * starting at `offset`: into lo, n and w[0 .. k) (n <= k checked by the caller's bound). */
RC_HD void rc_aa_fill(int32_t *lo, int32_t *n, float *w, int32_t k, int32_t i, int32_t n_in, int32_t n_out,
                      int32_t offset) {
    const rc_aa_axis ax = rc_aa_setup(i + offset, n_in, n_out);
    *lo = ax.lo;
    *n = ax.n < k ? ax.n : k;
    for (int32_t j = 0; j < *n; j++) w[j] = rc_aa_tap(&ax, j);
}

/* One frame's chain: the call, the stored frame, its sample's parameter row, its contrast op's image
 * mean, and the resize's tap tables (NULL: computed per tap). */
typedef struct {
    const rc_gather_frames_args *a;
    const char *frame;
    const float *p;
    float mean;
    const rc_aa_table *ty, *tx;
} rc_aug_ctx;

/* Pixel (y, x) of out's window of the resized crop box, as float RGB (0..255). */
RC_HD void rc_aug_resized(float out[3], const rc_aug_ctx *c, int32_t y, int32_t x) {
    const rc_gather_frames_args *a = c->a;
    const float *p = c->p;
    const int32_t top = (int32_t)p[RC_AUG_CROP_TOP], left = (int32_t)p[RC_AUG_CROP_LEFT];
    const int32_t ch = (int32_t)p[RC_AUG_CROP_H], cw = (int32_t)p[RC_AUG_CROP_W];
    const int32_t rh = (int32_t)p[RC_AUG_RESIZE_H], rw = (int32_t)p[RC_AUG_RESIZE_W];
    const int32_t ry = y + (int32_t)p[RC_AUG_OUT_TOP], rx = x + (int32_t)p[RC_AUG_OUT_LEFT];
    if (rh == ch && rw == cw) { /* torchvision returns a same-size resize unchanged */
        rc_aug_source(out, a, c->frame, top + ry, left + rx);
        return;
    }
    float px[3];
    out[0] = out[1] = out[2] = 0.0f;
    if (!a->antialias) { /* torch's upsample_bilinear2d (frames_math.h) */
        const rc_axis_lerp wy = rc_axis_weights(ry, D_((float)ch, (float)rh), ch);
        const rc_axis_lerp wx = rc_axis_weights(rx, D_((float)cw, (float)rw), cw);
        float q[4][3];
        rc_aug_source(q[0], a, c->frame, top + wy.i0, left + wx.i0);
        rc_aug_source(q[1], a, c->frame, top + wy.i0, left + wx.i1);
        rc_aug_source(q[2], a, c->frame, top + wy.i1, left + wx.i0);
        rc_aug_source(q[3], a, c->frame, top + wy.i1, left + wx.i1);
        for (int k = 0; k < 3; k++) out[k] = rc_bilinear(q[0][k], q[1][k], q[2][k], q[3][k], &wy, &wx);
        return;
    }
    if (c->ty) { /* the block's tables */
        const int32_t ny = c->ty->n[y], nx = c->tx->n[x];
        const int32_t sy = top + c->ty->lo[y], sx = left + c->tx->lo[x];
        const float *wy = c->ty->w + (int64_t)y * c->ty->k, *wx = c->tx->w + (int64_t)x * c->tx->k;
        for (int32_t ty = 0; ty < ny; ty++) { /* rows of horizontal sums, as torch's separable passes */
            float row[3] = {0.0f, 0.0f, 0.0f};
            for (int32_t tx = 0; tx < nx; tx++) {
                rc_aug_source(px, a, c->frame, sy + ty, sx + tx);
                for (int k = 0; k < 3; k++) row[k] = A_(row[k], M_(wx[tx], px[k]));
            }
            for (int k = 0; k < 3; k++) out[k] = A_(out[k], M_(wy[ty], row[k]));
        }
        return;
    }
    const rc_aa_axis wy = rc_aa_setup(ry, ch, rh), wx = rc_aa_setup(rx, cw, rw);
    for (int32_t ty = 0; ty < wy.n; ty++) {
        float row[3] = {0.0f, 0.0f, 0.0f};
        for (int32_t tx = 0; tx < wx.n; tx++) {
            const float w = rc_aa_tap(&wx, tx);
            rc_aug_source(px, a, c->frame, top + wy.lo + ty, left + wx.lo + tx);
            for (int k = 0; k < 3; k++) row[k] = A_(row[k], M_(w, px[k]));
        }
        const float w = rc_aa_tap(&wy, ty);
        for (int k = 0; k < 3; k++) out[k] = A_(out[k], M_(w, row[k]));
    }
}

/* Pixel (y, x) of the image before the affine: the resized crop's out_height x out_width window,
 * mirrored when the flip comes before the affine, in [0, 1]. */
RC_HD void rc_aug_base(float v[3], const rc_aug_ctx *c, int32_t y, int32_t x) {
    if ((int32_t)c->p[RC_AUG_FLIP] == 2) x = (int32_t)c->a->out_width - 1 - x;
    rc_aug_resized(v, c, y, x);
    for (int k = 0; k < 3; k++) v[k] = D_(v[k], 255.0f);
}

/* ---- colour: torchvision v2's float formulas ------------------------------------------------- */

RC_HD float rc_clamp01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }

/* rgb_to_grayscale: 0.2989 r + 0.587 g + 0.114 b */
RC_HD float rc_gray(const float v[3]) {
    return A_(A_(M_(v[0], 0.2989f), M_(v[1], 0.587f)), M_(v[2], 0.114f));
}

/* _blend(image, other, ratio): ratio * image + (1 - ratio) * other, clamped to [0, 1] */
RC_HD float rc_blend(float v, float other, float ratio) {
    return rc_clamp01(A_(M_(v, ratio), M_(other, S_(1.0f, ratio))));
}

/* adjust_hue: RGB -> HSV (Pillow's formulas, as torchvision), h + factor mod 1, back to RGB */
RC_HD void rc_hue(float v[3], float factor) {
    const float r = v[0], g = v[1], b = v[2];
    const float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    const int eqc = maxc == minc;
    const float range = S_(maxc, minc);
    const float s = D_(range, eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : range;
    const float rc = D_(S_(maxc, r), div), gc = D_(S_(maxc, g), div), bc = D_(S_(maxc, b), div);
    float h;
    if (maxc == r) h = S_(bc, gc);
    else if (maxc == g) h = S_(A_(rc, 2.0f), bc);
    else h = S_(A_(gc, 4.0f), rc);
    h = A_(M_(h, 1.0f / 6.0f), 1.0f); /* in [0, 2): fmod(h, 1) is h - floor(h), exactly */
    h = S_(h, floorf(h));
    /* (h + factor) mod 1, Python's remainder (non-negative) */
    h = A_(h, factor);
    h = S_(h, floorf(h));
    if (h >= 1.0f) h = 0.0f;
    const float h6 = M_(h, 6.0f), fi = floorf(h6), f = S_(h6, fi);
    const int i = ((int)fi) % 6;
    const float sxf = M_(s, f), oms = S_(1.0f, s);
    const float q = rc_clamp01(M_(S_(1.0f, sxf), maxc));
    const float t = rc_clamp01(M_(A_(sxf, oms), maxc));
    const float pp = rc_clamp01(M_(oms, maxc));
    const float vv = maxc;
    switch (i) {
    case 0: v[0] = vv, v[1] = t, v[2] = pp; break;
    case 1: v[0] = q, v[1] = vv, v[2] = pp; break;
    case 2: v[0] = pp, v[1] = vv, v[2] = t; break;
    case 3: v[0] = pp, v[1] = q, v[2] = vv; break;
    case 4: v[0] = t, v[1] = pp, v[2] = vv; break;
    default: v[0] = vv, v[1] = pp, v[2] = q; break;
    }
}

/* The pointwise colour ops [from, to) of the sample's list on v; `mean`: its contrast op's mean. */
RC_HD void rc_aug_pointwise(float v[3], const float *p, int from, int to, float mean) {
    for (int k = from; k < to; k++) {
        const int op = (int)p[RC_AUG_COLOR + 2 * k];
        const float f = p[RC_AUG_COLOR + 2 * k + 1];
        float g;
        switch (op) {
        case RC_COLOR_BRIGHTNESS:
            for (int c = 0; c < 3; c++) v[c] = rc_clamp01(M_(v[c], f));
            break;
        case RC_COLOR_CONTRAST:
            for (int c = 0; c < 3; c++) v[c] = rc_blend(v[c], mean, f);
            break;
        case RC_COLOR_SATURATION:
            g = rc_gray(v);
            for (int c = 0; c < 3; c++) v[c] = rc_blend(v[c], g, f);
            break;
        case RC_COLOR_HUE: rc_hue(v, f); break;
        case RC_COLOR_GRAYSCALE:
            g = rc_gray(v);
            v[0] = v[1] = v[2] = g;
            break;
        default: break;
        }
    }
}

/* Index of the sample's op `op` among its first n colour ops, or n. */
RC_HD int rc_aug_find(const float *p, int n, int op) {
    for (int k = 0; k < n; k++)
        if ((int)p[RC_AUG_COLOR + 2 * k] == op) return k;
    return n;
}

/* The 3x3 blur of adjust_sharpness ([[1,1,1],[1,5,1],[1,1,1]] / 13) around v, the neighbours from
 * `at` (the image before the sharpness op), blended with factor f; border pixels keep their values. */
#define RC_AUG_SHARPEN(v, f, y, x, at)                                                              \
    do {                                                                                           \
        if ((y) > 0 && (x) > 0 && (y) < (int32_t)c->a->out_height - 1 &&                           \
            (x) < (int32_t)c->a->out_width - 1) {                                                  \
            float blur_[3] = {0.0f, 0.0f, 0.0f}, q_[3];                                           \
            for (int dy_ = -1; dy_ <= 1; dy_++)                                                    \
                for (int dx_ = -1; dx_ <= 1; dx_++) {                                              \
                    if (dy_ == 0 && dx_ == 0) {                                                    \
                        for (int c_ = 0; c_ < 3; c_++) blur_[c_] = A_(blur_[c_], M_(v[c_], 5.0f / 13.0f)); \
                        continue;                                                                  \
                    }                                                                              \
                    at(q_, (y) + dy_, (x) + dx_);                                                  \
                    for (int c_ = 0; c_ < 3; c_++) blur_[c_] = A_(blur_[c_], M_(q_[c_], 1.0f / 13.0f)); \
                }                                                                                  \
            for (int c_ = 0; c_ < 3; c_++)                                                         \
                v[c_] = rc_clamp01(A_(v[c_], M_(S_(1.0f, (f)), S_(blur_[c_], v[c_]))));             \
        }                                                                                          \
    } while (0)

/* The image before the affine after its colour ops [0, stop) (sharpness included), at (y, x). */
RC_HD void rc_aug_head(float v[3], const rc_aug_ctx *c, int32_t y, int32_t x, int stop) {
    const float *p = c->p;
    const int sharp = rc_aug_find(p, stop, RC_COLOR_SHARPNESS);
    rc_aug_base(v, c, y, x);
    rc_aug_pointwise(v, p, 0, sharp, c->mean);
    if (sharp == stop) return;
#define RC_AUG_AT_(q, yy, xx) (rc_aug_base(q, c, yy, xx), rc_aug_pointwise(q, p, 0, sharp, c->mean))
    RC_AUG_SHARPEN(v, p[RC_AUG_COLOR + 2 * sharp + 1], y, x, RC_AUG_AT_);
#undef RC_AUG_AT_
    rc_aug_pointwise(v, p, sharp + 1, stop, c->mean);
}

/* The affine's output at (y, x): torchvision's affine_grid + grid_sample of the head image after
 * its first k colour ops (align_corners=False, zero padding; bilinear multiplies by the sampled
 * ones-mask, as torchvision's fill path does). */
RC_HD void rc_aug_warped(float v[3], const rc_aug_ctx *c, int32_t y, int32_t x, int k) {
    const int32_t Ho = (int32_t)c->a->out_height, Wo = (int32_t)c->a->out_width;
    const int interp = (int32_t)c->p[RC_AUG_AFFINE];
    const float *t = c->p + RC_AUG_THETA;
    const float hw = M_(0.5f, (float)Wo), hh = M_(0.5f, (float)Ho);
    const float xb = S_((float)x, M_(0.5f, (float)(Wo - 1))), yb = S_((float)y, M_(0.5f, (float)(Ho - 1)));
    const float gx = A_(A_(M_(xb, D_(t[0], hw)), M_(yb, D_(t[1], hw))), D_(t[2], hw));
    const float gy = A_(A_(M_(xb, D_(t[3], hh)), M_(yb, D_(t[4], hh))), D_(t[5], hh));
    const float ix = D_(S_(M_(A_(gx, 1.0f), (float)Wo), 1.0f), 2.0f);
    const float iy = D_(S_(M_(A_(gy, 1.0f), (float)Ho), 1.0f), 2.0f);
    v[0] = v[1] = v[2] = 0.0f;
    if (interp == 1) {
        const float nx = RC_RINT(ix), ny = RC_RINT(iy);
        if (nx >= 0.0f && nx < (float)Wo && ny >= 0.0f && ny < (float)Ho)
            rc_aug_head(v, c, (int32_t)ny, (int32_t)nx, k);
        return;
    }
    const float x0 = floorf(ix), y0 = floorf(iy);
    const float wx1 = S_(ix, x0), wy1 = S_(iy, y0);
    const float wx0 = S_(A_(x0, 1.0f), ix), wy0 = S_(A_(y0, 1.0f), iy);
    const float w[4] = {M_(wx0, wy0), M_(wx1, wy0), M_(wx0, wy1), M_(wx1, wy1)};
    float mask = 0.0f, q[3];
    for (int j = 0; j < 4; j++) {
        const float sx = A_(x0, (float)(j & 1)), sy = A_(y0, (float)(j >> 1));
        if (!(sx >= 0.0f && sx < (float)Wo && sy >= 0.0f && sy < (float)Ho)) continue;
        rc_aug_head(q, c, (int32_t)sy, (int32_t)sx, k);
        for (int ch = 0; ch < 3; ch++) v[ch] = A_(v[ch], M_(w[j], q[ch]));
        mask = A_(mask, w[j]);
    }
    for (int ch = 0; ch < 3; ch++) v[ch] = M_(v[ch], mask);
}

/* Output pixel (y, x) after the sample's op list [0, stop), in [0, 1]. The list may hold the affine
 * (RC_COLOR_AFFINE, once, where the transforms put it: first for a geometric stage) and sharpness
 * (once); c->mean is the image mean of its contrast op. A flip after the affine mirrors x first:
 * every later op commutes with it. */
RC_HD void rc_aug_pixel(float v[3], const rc_aug_ctx *c, int32_t y, int32_t x, int stop) {
    const float *p = c->p;
    const int n = (int)p[RC_AUG_NCOLOR];
    const int k = (int32_t)p[RC_AUG_AFFINE] ? rc_aug_find(p, n, RC_COLOR_AFFINE) : n;
    if ((int32_t)p[RC_AUG_FLIP] == 1) x = (int32_t)c->a->out_width - 1 - x;
    if (stop <= k) {
        rc_aug_head(v, c, y, x, stop);
        return;
    }
    const int sharp = k + 1 + rc_aug_find(p + 2 * (k + 1), stop - k - 1, RC_COLOR_SHARPNESS);
    rc_aug_warped(v, c, y, x, k);
    rc_aug_pointwise(v, p, k + 1, sharp, c->mean);
    if (sharp == stop) return;
#define RC_AUG_AT_(q, yy, xx) (rc_aug_warped(q, c, yy, xx, k), rc_aug_pointwise(q, p, k + 1, sharp, c->mean))
    RC_AUG_SHARPEN(v, p[RC_AUG_COLOR + 2 * sharp + 1], y, x, RC_AUG_AT_);
#undef RC_AUG_AT_
    rc_aug_pointwise(v, p, sharp + 1, stop, c->mean);
}

/* A row without an affine and without sharpness: its pixels need no neighbour and no warp, so a
 * lean kernel makes them (cuda/augment.cu). */
RC_HD int rc_aug_simple(const float *p) {
    const int n = (int)p[RC_AUG_NCOLOR];
    return !(int32_t)p[RC_AUG_AFFINE] && rc_aug_find(p, n, RC_COLOR_SHARPNESS) == n;
}

/* A simple row's out column x as a column of the resized window: without an affine a flip before it
 * and one after it mirror alike. */
RC_HD int32_t rc_aug_column(const float *p, int32_t x, int64_t width) {
    const int32_t flip = (int32_t)p[RC_AUG_FLIP];
    return flip == 1 || flip == 2 ? (int32_t)width - 1 - x : x;
}

/* A simple row's pixel from its resized value `v` (0..255): to [0, 1], then its ops [0, stop). */
RC_HD void rc_aug_simple_finish(float v[3], const float *p, int stop, float mean) {
    for (int k = 0; k < 3; k++) v[k] = D_(v[k], 255.0f);
    rc_aug_pointwise(v, p, 0, stop, mean);
}

/* A simple row's pixel (y, x) after its ops [0, stop) (rc_aug_pixel's value, the same floats). */
RC_HD void rc_aug_simple_pixel(float v[3], const rc_aug_ctx *c, int32_t y, int32_t x, int stop) {
    rc_aug_resized(v, c, y, rc_aug_column(c->p, x, c->a->out_width));
    rc_aug_simple_finish(v, c->p, stop, c->mean);
}

/* Bound on the taps of an entry of an antialiased resize table: the crop box holds at most the frame
 * (`n_in`) and the resized box at least out's window (`n_out`), so the scale (support) is at most
 * n_in / n_out and an entry spans at most 2 * support + 2 source pixels (4 when upsampling). */
RC_HD int32_t rc_aa_max_taps(int64_t n_in, int64_t n_out) {
    const int64_t t = (2 * n_in) / (n_out > 0 ? n_out : 1) + 3;
    return (int32_t)(t > 4 ? t : 4);
}

/* The fixed order of a row's grayscale sum over x (float64), shared by the CPU and the CUDA kernel:
 * RC_AUG_LANES partial sums (lane l takes x = l, l + LANES, ... in order), then a halving tree. */
#define RC_AUG_LANES 256
RC_HD double rc_aug_tree(double *partial) {
    for (int s = RC_AUG_LANES / 2; s > 0; s >>= 1)
        for (int l = 0; l < s; l++) partial[l] = partial[l] + partial[l + s];
    return partial[0];
}

#undef RC_AUG_SHARPEN
#undef M_
#undef A_
#undef S_
#undef D_

#endif /* RC_AUGMENT_MATH_H */
