/* cpu/lossless.c: the lossless frame tier's coder on the CPU: the encoder (at ingest) and the reference
 * decoder (the no-GPU path, and the oracle cuda/lossless.cu is tested against bit for bit). Format and
 * shared arithmetic: lossless_math.h. Layouts (bytes): rows / out [n, H*W + 2*ch*cw] I420; coded frames
 * [n, capacity] (encode) or back to back with offsets [N+1] (decode). Frames run in parallel, each
 * on one thread. Benchmark: python benchmarks/bench_lossless.py
 */
#include <stdlib.h>
#include <string.h>

#include "../lossless_math.h"
#include "../robocache.h"
#include "parallel.h"

int64_t rc_lossless_bound(int64_t height, int64_t width, int64_t band) {
    const int64_t pixels = height * width + 2 * ((height + 1) / 2) * ((width + 1) / 2);
    /* per chunk: a directory entry, 32 states, alignment; words: at most 12.1 bits a symbol plus a
     * state's 16 bits per lane (docs/frame-storage.md), bounded here by 2 bytes a pixel */
    return RC_LL_HEADER + 3 * RC_LL_MAX_TABLE + 4 + rc_ll_chunks(height, band) * (4 + 4 * RC_LL_LANES + 4 + 4) +
           2 * pixels + RC_LL_ALIGN;
}

/* ---- encoder -------------------------------------------------------------------------------- */

static void put_u16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v) { put_u16(p, v & 0xffff); put_u16(p + 2, v >> 16); }

/* Symbol counts -> frequencies summing to RC_LL_TOTAL, every present symbol at least 1 (deterministic:
 * the same frame gives the same bytes on every machine). */
static void normalize(uint32_t freq[256], const uint64_t count[256], uint64_t n) {
    uint32_t sum = 0, top = 0;
    for (int s = 0; s < 256; s++) {
        freq[s] = count[s] ? (uint32_t)((count[s] * RC_LL_TOTAL + n / 2) / n) : 0;
        if (count[s] && !freq[s]) freq[s] = 1;
        sum += freq[s];
        if (count[s] > count[top]) top = (uint32_t)s;
    }
    if (sum < RC_LL_TOTAL) freq[top] += RC_LL_TOTAL - sum;
    while (sum > RC_LL_TOTAL) { /* rounding up small counts overshot: take it from the largest */
        int big = 0;
        for (int s = 1; s < 256; s++)
            if (freq[s] > freq[big]) big = s;
        const uint32_t take = freq[big] - 1 < sum - RC_LL_TOTAL ? freq[big] - 1 : sum - RC_LL_TOTAL;
        freq[big] -= take;
        sum -= take;
    }
}

/* The table's bytes (rc_ll_read_table's encoding) at p; returns how many. */
static int32_t write_table(uint8_t *p, const uint32_t freq[256]) {
    int32_t i = 0;
    for (int s = 0; s < 256;) {
        if (freq[s] == 0) {
            int run = 1;
            while (s + run < 256 && run < 256 && freq[s + run] == 0) run++;
            p[i++] = 0;
            p[i++] = (uint8_t)(run - 1);
            s += run;
        } else {
            if (freq[s] < 0x80) {
                p[i++] = (uint8_t)freq[s];
            } else {
                p[i++] = (uint8_t)(0x80 | (freq[s] >> 8));
                p[i++] = (uint8_t)(freq[s] & 0xff);
            }
            s++;
        }
    }
    return i;
}

/* Plane p's symbols (chunk-local MED residuals) into sym, in the plane's I420 layout. */
static void plane_symbols(uint8_t *sym, const uint8_t *px, int64_t rows, int64_t cols, int64_t band) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *cur = px + r * cols, *up = cur - cols;
        const int64_t local = r % band;
        for (int64_t x = 0; x < cols; x++) {
            const int32_t left = x ? cur[x - 1] : 0, u = local ? up[x] : 0, ul = local && x ? up[x - 1] : 0;
            sym[r * cols + x] = (uint8_t)rc_ll_symbol(cur[x], rc_ll_predict(left, u, ul, local, x));
        }
    }
}

/* One chunk (rows x cols symbols at sym) coded at out: its states, then its words in the order the
 * decoder reads them. Returns the bytes written (a multiple of 4), or -1 past cap. `words` holds at
 * least rows * cols + 65 entries. */
static int64_t encode_chunk(uint8_t *out, int64_t cap, const uint8_t *sym, int64_t rows, int64_t cols,
                            const uint32_t *freq, const uint32_t *cum, uint16_t *words) {
    uint32_t x[RC_LL_LANES];
    for (int t = 0; t < RC_LL_LANES; t++) x[t] = RC_LL_LOW;
    int64_t nw = 0;
    const int64_t passes = (rows + RC_LL_LANES - 1) / RC_LL_LANES;
    /* the decoder's order reversed: passes, steps and lanes all descending */
    for (int64_t p = passes - 1; p >= 0; p--) {
        const int64_t lanes = rows - p * RC_LL_LANES < RC_LL_LANES ? rows - p * RC_LL_LANES : RC_LL_LANES;
        for (int64_t s = cols + lanes - 2; s >= 0; s--) {
            for (int64_t t = lanes - 1; t >= 0; t--) {
                const int64_t col = s - t;
                if (col < 0 || col >= cols) continue;
                const uint32_t v = sym[(p * RC_LL_LANES + t) * cols + col], f = freq[v];
                uint32_t st = x[t];
                /* flushes the low word without a branch (as the decoder reads it) */
                const int64_t flush = (uint64_t)st >= ((uint64_t)(RC_LL_LOW >> RC_LL_PREC) << 16) * f;
                words[nw] = (uint16_t)(st & 0xffff);
                nw += flush;
                st = flush ? st >> 16 : st;
                x[t] = ((st / f) << RC_LL_PREC) + st % f + cum[v];
            }
        }
    }
    const int64_t lanes = rows < RC_LL_LANES ? rows : RC_LL_LANES;
    const int64_t bytes = 4 * lanes + ((2 * nw + 3) & ~(int64_t)3);
    if (bytes > cap) return -1;
    for (int64_t t = 0; t < lanes; t++) put_u32(out + 4 * t, x[t]);
    uint8_t *w = out + 4 * lanes;
    for (int64_t i = 0; i < nw; i++) put_u16(w + 2 * i, words[nw - 1 - i]);
    memset(w + 2 * nw, 0, (size_t)(bytes - 4 * lanes - 2 * nw));
    return bytes;
}

/* One frame; returns its bytes, or -1 past cap. sym: scratch of one I420 row; words: of a chunk. */
static int64_t encode_frame(uint8_t *out, int64_t cap, const uint8_t *row, int64_t h, int64_t w, int64_t band,
                            uint8_t *sym, uint16_t *words) {
    uint32_t freq[3][256], cum[3][257];
    int64_t pos = RC_LL_HEADER;
    if (cap < RC_LL_HEADER + 3 * RC_LL_MAX_TABLE + 4) return -1;
    for (int p = 0; p < 3; p++) {
        const int64_t rows = rc_ll_plane_rows(p, h), cols = rc_ll_plane_cols(p, w), off = rc_ll_plane_offset(p, h, w);
        plane_symbols(sym + off, row + off, rows, cols, band);
        uint64_t count[256] = {0};
        for (int64_t i = 0; i < rows * cols; i++) count[sym[off + i]]++;
        normalize(freq[p], count, (uint64_t)(rows * cols));
        cum[p][0] = 0;
        for (int s = 0; s < 256; s++) cum[p][s + 1] = cum[p][s] + freq[p][s];
        pos += write_table(out + pos, freq[p]);
        put_u16(out + 14 + 2 * p, (uint32_t)(pos - RC_LL_HEADER));
    }
    put_u32(out, RC_LL_MAGIC);
    put_u32(out + 4, (uint32_t)h);
    put_u32(out + 8, (uint32_t)w);
    put_u16(out + 12, (uint32_t)band);
    while (pos & 3) out[pos++] = 0;
    const int64_t n_chunks = rc_ll_chunks(h, band), dir = pos, streams = dir + 4 * n_chunks;
    if (streams > cap) return -1;
    pos = streams;
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t first;
        const int p = rc_ll_chunk_plane(c, h, band, &first);
        const int64_t rows_left = rc_ll_plane_rows(p, h) - first, cols = rc_ll_plane_cols(p, w);
        const int64_t rows = rows_left < band ? rows_left : band;
        const int64_t n = encode_chunk(out + pos, cap - pos, sym + rc_ll_plane_offset(p, h, w) + first * cols, rows,
                                       cols, freq[p], cum[p], words);
        if (n < 0) return -1;
        pos += n;
        put_u32(out + dir + 4 * c, (uint32_t)(pos - streams));
    }
    const int64_t size = (pos + RC_LL_ALIGN - 1) / RC_LL_ALIGN * RC_LL_ALIGN;
    if (size > cap) return -1;
    memset(out + pos, 0, (size_t)(size - pos));
    return size;
}

typedef struct {
    const rc_encode_lossless_args *a;
} encode_ctx;

static void encode_range(void *ctx, int64_t begin, int64_t end) {
    const rc_encode_lossless_args *a = ((encode_ctx *)ctx)->a;
    const int64_t fb = a->height * a->width + 2 * ((a->height + 1) / 2) * ((a->width + 1) / 2);
    uint8_t *sym = (uint8_t *)malloc((size_t)fb);
    uint16_t *words = (uint16_t *)malloc((size_t)(a->band * a->width + 65) * sizeof(uint16_t));
    for (int64_t i = begin; i < end; i++)
        a->sizes[i] = sym && words ? encode_frame(a->out + i * a->capacity, a->capacity, a->rows + i * fb,
                                                  a->height, a->width, a->band, sym, words)
                                   : -2;
    free(words);
    free(sym);
}

rc_status rc_encode_lossless_cpu(const rc_encode_lossless_args *a, int num_threads) {
    encode_ctx ctx = {a};
    rc_parallel_for(a->count, 1, num_threads, encode_range, &ctx);
    for (int64_t i = 0; i < a->count; i++) {
        if (a->sizes[i] == -2) return rc_fail(RC_ERR_NOMEM, "no host memory for the lossless encoder's scratch");
        if (a->sizes[i] < 0)
            return rc_fail(RC_ERR_VALUE, "frame %lld does not fit the %lld bytes of its out row (expected >= "
                           "lossless_bound(%lld, %lld))", (long long)i, (long long)a->capacity,
                           (long long)a->height, (long long)a->width);
    }
    return RC_OK;
}

/* ---- decoder -------------------------------------------------------------------------------- */

/* A plane's table, ready to decode: slot -> symbol, and each symbol's frequency and start. */
typedef struct {
    uint8_t sym[RC_LL_TOTAL];
    uint32_t freq[256], cum[256];
} table;

static void build_table(table *t) {
    uint32_t c = 0;
    for (int s = 0; s < 256; s++) {
        t->cum[s] = c;
        for (uint32_t k = 0; k < t->freq[s]; k++) t->sym[c + k] = (uint8_t)s;
        c += t->freq[s];
    }
}

/* One chunk's stream (n bytes at p) into the plane's rows [first, first + rows) at px (cols wide).
 * 0, or -1 when the stream is not one this chunk's pixels coded to. */
static int decode_chunk(uint8_t *px, int64_t rows, int64_t cols, const uint8_t *p, int64_t n, const table *tb) {
    const int64_t lanes = rows < RC_LL_LANES ? rows : RC_LL_LANES;
    if (n < 4 * lanes) return -1;
    uint32_t x[RC_LL_LANES];
    for (int64_t t = 0; t < lanes; t++) {
        x[t] = rc_ll_u32(p + 4 * t);
        if (x[t] < RC_LL_LOW) return -1;
    }
    const uint8_t *w = p + 4 * lanes;
    const int64_t nw = (n - 4 * lanes) / 2;
    int64_t pos = 0;
    const int64_t passes = (rows + RC_LL_LANES - 1) / RC_LL_LANES;
    for (int64_t q = 0; q < passes; q++) {
        const int64_t active = rows - q * RC_LL_LANES < RC_LL_LANES ? rows - q * RC_LL_LANES : RC_LL_LANES;
        for (int64_t s = 0; s < cols + active - 1; s++) {
            const int64_t t0 = s - cols + 1 > 0 ? s - cols + 1 : 0, t1 = s < active - 1 ? s : active - 1;
            for (int64_t t = t0; t <= t1; t++) {
                const int64_t r = q * RC_LL_LANES + t, col = s - t;
                const uint32_t slot = x[t] & (RC_LL_TOTAL - 1), v = tb->sym[slot];
                /* renormalized without a branch: whether a lane reads is data, and mispredicts */
                const uint32_t y = rc_ll_advance(x[t], tb->freq[v], tb->cum[v]), need = y < RC_LL_LOW;
                const uint32_t word = pos < nw ? rc_ll_u16(w + 2 * pos) : 0;
                x[t] = need ? (y << 16) | word : y;
                pos += need;
                uint8_t *cur = px + r * cols;
                const int32_t left = col ? cur[col - 1] : 0, up = r ? cur[col - cols] : 0,
                              ul = r && col ? cur[col - cols - 1] : 0;
                cur[col] = rc_ll_pixel(v, rc_ll_predict(left, up, ul, r, col));
            }
        }
    }
    /* the words end here (up to the 4-byte padding) and every state is back where the encoder began */
    if (pos > nw || (4 * lanes + ((2 * pos + 3) & ~(int64_t)3)) != n) return -1;
    for (int64_t t = 0; t < lanes; t++)
        if (x[t] != RC_LL_LOW) return -1;
    return 0;
}

#define BAD_HEADER (-3) /* decode_frame: the header, a table or the chunk directory is damaged */

/* Frame bytes (n at p) into an I420 row: 0, BAD_HEADER, or the failing chunk + 1. */
static int64_t decode_frame(uint8_t *out, const uint8_t *p, int64_t n, int64_t h, int64_t w, table *tb) {
    rc_ll_layout lay;
    if (rc_ll_parse_header(&lay, p, n, h, w) != 0) return BAD_HEADER;
    for (int k = 0; k < 3; k++) {
        if (rc_ll_read_table(tb[k].freq, p + lay.table_start[k], lay.table_end[k] - lay.table_start[k]) !=
            lay.table_end[k] - lay.table_start[k])
            return BAD_HEADER;
        build_table(&tb[k]);
    }
    int64_t start = 0;
    for (int64_t c = 0; c < lay.n_chunks; c++) {
        const int64_t end = rc_ll_u32(p + lay.dir + 4 * c);
        if (end < start || lay.streams + end > n) return BAD_HEADER;
        int64_t first;
        const int k = rc_ll_chunk_plane(c, h, lay.band, &first);
        const int64_t left = rc_ll_plane_rows(k, h) - first, cols = rc_ll_plane_cols(k, w);
        if (decode_chunk(out + rc_ll_plane_offset(k, h, w) + first * cols, left < lay.band ? left : lay.band, cols,
                         p + lay.streams + start, end - start, &tb[k]) != 0)
            return c + 1;
        start = end;
    }
    return 0;
}

typedef struct {
    const rc_decode_lossless_args *a;
    int64_t *failed; /* [count]: decode_frame's result, -1: no memory */
} decode_ctx;

static void decode_range(void *ctx, int64_t begin, int64_t end) {
    const decode_ctx *d = (const decode_ctx *)ctx;
    const rc_decode_lossless_args *a = d->a;
    const int64_t fb = a->height * a->width + 2 * ((a->height + 1) / 2) * ((a->width + 1) / 2);
    table *tb = (table *)malloc(3 * sizeof(table));
    for (int64_t m = begin; m < end; m++) {
        const int64_t id = a->ids[m * a->ids_stride];
        if (id < 0) continue;
        const int64_t lo = a->offsets[id * a->offsets_stride], hi = a->offsets[(id + 1) * a->offsets_stride];
        d->failed[m] = tb ? decode_frame(a->out + m * fb, a->data + lo, hi - lo, a->height, a->width, tb) : -1;
    }
    free(tb);
}

rc_status rc_decode_lossless_cpu(const rc_decode_lossless_args *a, int num_threads) {
    for (int64_t m = 0; m < a->count; m++) { /* ids and spans first: cheap, and names the argument */
        const int64_t id = a->ids[m * a->ids_stride];
        if (id >= a->frames)
            return rc_fail(RC_ERR_VALUE, "ids[%lld] = %lld is out of range for %lld frames (ids < 0 are skipped)",
                           (long long)m, (long long)id, (long long)a->frames);
        if (id < 0) continue;
        const int64_t lo = a->offsets[id * a->offsets_stride], hi = a->offsets[(id + 1) * a->offsets_stride];
        if (lo < 0 || hi < lo || hi > a->data_bytes)
            return rc_fail(RC_ERR_VALUE, "offsets[%lld:%lld] = (%lld, %lld) is not a span of data's %lld bytes",
                           (long long)id, (long long)id + 2, (long long)lo, (long long)hi, (long long)a->data_bytes);
    }
    int64_t *failed = (int64_t *)calloc((size_t)(a->count > 0 ? a->count : 1), sizeof(int64_t));
    if (!failed) return rc_fail(RC_ERR_NOMEM, "no host memory for %lld decode results", (long long)a->count);
    decode_ctx ctx = {a, failed};
    rc_parallel_for(a->count, 1, num_threads, decode_range, &ctx);
    rc_status st = RC_OK;
    for (int64_t m = 0; m < a->count && st == RC_OK; m++) {
        if (failed[m] == -1) {
            st = rc_fail(RC_ERR_NOMEM, "no host memory for the lossless decoder's tables");
        } else if (failed[m] == BAD_HEADER) {
            st = rc_fail(RC_ERR_VALUE, "data: frame %lld (ids[%lld]) is not a lossless frame of %lldx%lld "
                         "(header, tables or chunk directory damaged)", (long long)a->ids[m * a->ids_stride],
                         (long long)m, (long long)a->height, (long long)a->width);
        } else if (failed[m] > 0) {
            st = rc_fail(RC_ERR_VALUE, "data: chunk %lld of frame %lld (ids[%lld]) does not decode to its pixels "
                         "(damaged)", (long long)failed[m] - 1, (long long)a->ids[m * a->ids_stride], (long long)m);
        }
    }
    free(failed);
    return st;
}
