/* lossless_math.h: the lossless frame tier's coded format and per-symbol arithmetic, written once for
 * the CPU coder (csrc/cpu/lossless.c, C11) and the GPU decoder (cuda/lossless.cu, CUDA C++).
 *
 * A frame is its I420 planes (Y [H, W], U and V [ch, cw], ch = ceil(H/2), cw = ceil(W/2)), each cut
 * into CHUNKS of `band` rows (a multiple of 32; the last chunk may be shorter). In a chunk every pixel
 * is predicted by LOCO-I's median predictor (MED) from its left, up and up-left neighbours, restarting
 * at the chunk's first row, so chunks decode independently. The residual (pixel - prediction, mod 256)
 * is zigzag-mapped to a byte and coded by rANS (32-bit states, 16-bit words, 12-bit frequencies, one
 * static table per plane) with 32 interleaved states: state t codes row t of each 32-row pass, and the
 * symbols go in WAVEFRONT order: at step s of a pass, row t codes column s - t. A GPU warp decodes a
 * chunk with lane t on row t: the pixel above lane t's is the one lane t-1 made the step before (a
 * shuffle), so the inverse predictor runs in the same loop as the entropy decoder.
 *
 * Bytes of a coded frame (little-endian), padded with zeros to a multiple of 16:
 *   0  u32 magic RC_LL_MAGIC        4  u32 height         8  u32 width
 *   12 u16 band                     14 u16 table_end[3]: the end of plane p's table, from byte 20
 *   20 the 3 tables (rc_ll_write_table's encoding), zero-padded to a multiple of 4
 *   .. u32 chunk_end[n_chunks]: the end of chunk c's stream, from the first stream's start
 *   .. the streams, each 4-byte aligned: its lanes' initial states (u32 x min(32, rows)), then its
 *      16-bit words in the order the decoder reads them
 * Measurements behind the choices (MED over row delta, one table per plane, 12-bit precision):
 * docs/perf-notes.md, benchmarks/bench_lossless.py.
 */
#ifndef RC_LOSSLESS_MATH_H
#define RC_LOSSLESS_MATH_H

#include <stdint.h>

#include "robocache.h"

#define RC_LL_MAGIC 0x314C4352u /* "RCL1" */
#define RC_LL_LANES 32          /* interleaved states: a warp's lanes, rows of a pass */
#define RC_LL_PREC 12           /* frequencies sum to 1 << RC_LL_PREC */
#define RC_LL_TOTAL (1u << RC_LL_PREC)
#define RC_LL_LOW (1u << 16)    /* a state lives in [RC_LL_LOW, 2^32) between symbols */
#define RC_LL_HEADER 20
#define RC_LL_MAX_TABLE 512     /* bytes of one table, at most (2 per symbol) */
#define RC_LL_ALIGN 16          /* a coded frame's size is a multiple of it (the GPU copies uint4) */

/* A plane's geometry: rows x cols, split in ceil(rows / band) chunks. */
RC_INLINE int64_t rc_ll_plane_rows(int p, int64_t h) { return p == 0 ? h : (h + 1) / 2; }
RC_INLINE int64_t rc_ll_plane_cols(int p, int64_t w) { return p == 0 ? w : (w + 1) / 2; }
RC_INLINE int64_t rc_ll_plane_chunks(int p, int64_t h, int64_t band) {
    return (rc_ll_plane_rows(p, h) + band - 1) / band;
}
RC_INLINE int64_t rc_ll_chunks(int64_t h, int64_t band) {
    return rc_ll_plane_chunks(0, h, band) + 2 * rc_ll_plane_chunks(1, h, band);
}
/* Byte offset of plane p in an I420 row. */
RC_INLINE int64_t rc_ll_plane_offset(int p, int64_t h, int64_t w) {
    const int64_t y = h * w, c = ((h + 1) / 2) * ((w + 1) / 2);
    return p == 0 ? 0 : (p == 1 ? y : y + c);
}
/* Chunk index c of a frame -> its plane and first row in that plane. */
RC_INLINE int rc_ll_chunk_plane(int64_t c, int64_t h, int64_t band, int64_t *first_row) {
    const int64_t ny = rc_ll_plane_chunks(0, h, band), nc = rc_ll_plane_chunks(1, h, band);
    const int p = c < ny ? 0 : (c < ny + nc ? 1 : 2);
    *first_row = (p == 0 ? c : (p == 1 ? c - ny : c - ny - nc)) * band;
    return p;
}

/* MED: min(a, b) when c >= max(a, b), max(a, b) when c <= min(a, b), else a + b - c: the median of a,
 * b and a + b - c, computed without branches (a data-dependent branch here mispredicts on every
 * edge). On a chunk's first row the left neighbour (128 for its first pixel), in its first column the
 * one above. */
RC_INLINE int32_t rc_ll_med(int32_t a, int32_t b, int32_t c) {
    const int32_t mx = a > b ? a : b, mn = a > b ? b : a, g = a + b - c;
    const int32_t lo = mx < g ? mx : g;
    return mn > lo ? mn : lo;
}
RC_INLINE int32_t rc_ll_predict(int32_t left, int32_t up, int32_t upleft, int64_t row, int64_t col) {
    if (row == 0) return col == 0 ? 128 : left;
    return col == 0 ? up : rc_ll_med(left, up, upleft);
}

/* Residual byte -> symbol: 0, -1, 1, -2, 2, ... -> 0, 1, 2, 3, 4, ... (small magnitudes first, so the
 * tables' zero runs gather at the end); and back to the pixel. */
RC_INLINE uint32_t rc_ll_symbol(int32_t pixel, int32_t pred) {
    const int32_t r = (int32_t)(int8_t)(uint8_t)(pixel - pred);
    return r >= 0 ? (uint32_t)(2 * r) : (uint32_t)(-2 * r - 1);
}
RC_INLINE uint8_t rc_ll_pixel(uint32_t sym, int32_t pred) {
    const int32_t r = (sym & 1u) ? -(int32_t)((sym + 1) >> 1) : (int32_t)(sym >> 1);
    return (uint8_t)(pred + r);
}

/* One rANS decode step of state x for the symbol whose slot is x's low RC_LL_PREC bits (frequency f,
 * cumulative cum); the caller then reads a word when the result is below RC_LL_LOW (at most one). */
RC_INLINE uint32_t rc_ll_advance(uint32_t x, uint32_t f, uint32_t cum) {
    return f * (x >> RC_LL_PREC) + (x & (RC_LL_TOTAL - 1)) - cum;
}

/* Reads one table at p (n bytes available) into freq[256]: bytes 1..127 a frequency; 0x00 n: n + 1
 * symbols of frequency 0; 0x80 | hi, lo: the frequency (hi << 8) | lo. Returns the bytes read, or -1
 * when the table runs past n, past 256 symbols, or does not sum to RC_LL_TOTAL. */
RC_INLINE int32_t rc_ll_read_table(uint32_t freq[256], const uint8_t *p, int32_t n) {
    int32_t i = 0, s = 0;
    uint32_t sum = 0;
    while (s < 256) {
        if (i >= n) return -1;
        const uint32_t b = p[i++];
        if (b == 0) {
            if (i >= n) return -1;
            const int32_t run = (int32_t)p[i++] + 1;
            if (s + run > 256) return -1;
            for (int32_t k = 0; k < run; k++) freq[s++] = 0;
        } else if (b < 0x80) {
            freq[s++] = b;
            sum += b;
        } else {
            if (i >= n) return -1;
            const uint32_t f = ((b & 0x7f) << 8) | p[i++];
            freq[s++] = f;
            sum += f;
        }
    }
    return sum == RC_LL_TOTAL ? i : -1;
}

RC_INLINE uint32_t rc_ll_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
RC_INLINE uint32_t rc_ll_u16(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

/* Where a frame's parts are, from its header (n bytes): 0, or -1 when the header does not describe a
 * frame of h x w or runs past n. The chunk directory is at dir, the streams at streams. */
typedef struct {
    int64_t band, n_chunks, dir, streams;
    int32_t table_start[3], table_end[3];
} rc_ll_layout;

RC_INLINE int rc_ll_parse_header(rc_ll_layout *lay, const uint8_t *p, int64_t n, int64_t h, int64_t w) {
    if (n < RC_LL_HEADER || rc_ll_u32(p) != RC_LL_MAGIC || rc_ll_u32(p + 4) != (uint32_t)h ||
        rc_ll_u32(p + 8) != (uint32_t)w)
        return -1;
    lay->band = rc_ll_u16(p + 12);
    if (lay->band < RC_LL_LANES || lay->band % RC_LL_LANES) return -1;
    int32_t start = RC_LL_HEADER;
    for (int k = 0; k < 3; k++) {
        lay->table_start[k] = start;
        lay->table_end[k] = RC_LL_HEADER + (int32_t)rc_ll_u16(p + 14 + 2 * k);
        if (lay->table_end[k] <= start) return -1;
        start = lay->table_end[k];
    }
    lay->n_chunks = rc_ll_chunks(h, lay->band);
    lay->dir = (start + 3) & ~3;
    lay->streams = lay->dir + 4 * lay->n_chunks;
    return lay->streams <= n ? 0 : -1;
}

#endif /* RC_LOSSLESS_MATH_H */
