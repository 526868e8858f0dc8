/* cuda/lossless.cu: the lossless frame tier's per-batch decode on the GPU: coded frames (MED + 32
 * interleaved rANS states per chunk, csrc/lossless_math.h) -> I420 rows, bit-identical to the CPU
 * reference (csrc/cpu/lossless.c). Layouts (elements): out [count, H*W + 2*ch*cw] uint8; data [S]
 * uint8 with offsets [N+1] int64 and ids [count] int64 on the device; scratch [count, K] uint8.
 * Two launches on the caller's stream, no host sync: the sampled frames' bytes copied from pinned host
 * memory into scratch (skipped when data is device memory), then one warp per chunk: lane t decodes row
 * t of each 32-row pass, the pixel above coming from lane t-1 by a shuffle (the wavefront order).
 * Benchmark: python benchmarks/bench_lossless.py (CPU); tests/test_lossless.py checks it against the CPU.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/lossless_math.h"
#include "../csrc/robocache.h"
#include "cuda_util.cuh"

namespace {

constexpr int kWarps = 4; /* chunks a block decodes: 4 warps x 6 KB of tables in shared memory */
constexpr unsigned kFull = 0xffffffffu;

/* Row m of scratch = frame ids[m]'s bytes (at most K of them): a block a frame, 16 bytes a thread and
 * step where the span is aligned (the encoder pads every frame to 16 bytes), else byte by byte. */
__global__ void copy_frames(rc_decode_lossless_args a) {
    const int64_t m = blockIdx.x;
    const int64_t id = a.ids[m * a.ids_stride];
    if (id < 0 || id >= a.frames) return;
    int64_t lo = a.offsets[id * a.offsets_stride], hi = a.offsets[(id + 1) * a.offsets_stride];
    if (lo < 0 || lo > a.data_bytes) return;
    hi = hi > a.data_bytes ? a.data_bytes : hi;
    const int64_t n = hi - lo < a.scratch_bytes ? hi - lo : a.scratch_bytes;
    const uint8_t *src = a.data + lo;
    uint8_t *dst = a.scratch + m * a.scratch_bytes;
    int64_t done = 0;
    if ((((uintptr_t)src | (uintptr_t)dst) & 15) == 0) {
        const int64_t vecs = n / 16;
        for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x)
            reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(src)[i];
        done = vecs * 16;
    }
    for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

/* One plane's table in shared memory: slot -> symbol, and each symbol's frequency and start; `parsed`
 * holds lane 0's reading of the table bytes (in shared memory, not a 1 KB array on every thread's stack). */
struct table {
    uint8_t sym[RC_LL_TOTAL];
    uint16_t freq[256], cum[256];
    uint32_t parsed[256];
};

/* The warp fills t from the table bytes at p (n of them): lane 0 parses (<= 512 bytes), the lanes
 * add up the starts (a warp scan over 8 symbols a lane) and fill 128 slots each. false: damaged. */
__device__ bool load_table(table *t, const uint8_t *p, int32_t n, int lane) {
    int ok = 0;
    if (lane == 0) ok = rc_ll_read_table(t->parsed, p, n) == n;
    if (!__shfl_sync(kFull, ok, 0)) return false;
    __syncwarp();
    for (int k = 0; k < 8; k++) t->freq[8 * lane + k] = (uint16_t)t->parsed[8 * lane + k];
    __syncwarp();
    uint32_t mine = 0;
    for (int k = 0; k < 8; k++) mine += t->freq[8 * lane + k];
    uint32_t below = mine;
    for (int d = 1; d < 32; d <<= 1) {
        const uint32_t v = __shfl_up_sync(kFull, below, d);
        if (lane >= d) below += v;
    }
    uint32_t c = below - mine;
    for (int k = 0; k < 8; k++) {
        t->cum[8 * lane + k] = (uint16_t)c;
        c += t->freq[8 * lane + k];
    }
    __syncwarp();
    /* slots [128 lane, 128 lane + 128): the symbol of the first by binary search, then a walk */
    const uint32_t first = 128u * (uint32_t)lane;
    int lo = 0, hi = 255;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (t->cum[mid] <= first) lo = mid; else hi = mid - 1;
    }
    int s = lo;
    for (uint32_t slot = first; slot < first + 128; slot++) {
        while (s < 255 && t->cum[s + 1] <= slot) s++;
        t->sym[slot] = (uint8_t)s;
    }
    __syncwarp();
    return true;
}

/* Word i of a chunk's stream: an aligned 16-bit load where the words are aligned (always, for frames
 * the encoder wrote at 16-byte-aligned starts), else two bytes; 0 past the last word. */
__device__ __forceinline__ uint32_t word_at(const uint8_t *w, int64_t i, int64_t nw, bool aligned) {
    if (i >= nw) return 0;
    return aligned ? (uint32_t)reinterpret_cast<const uint16_t *>(w)[i] : rc_ll_u16(w + 2 * i);
}

/* Warp (m, c): chunk c of sampled frame m, if the frame has that many. */
__global__ void __launch_bounds__(32 * kWarps) decode_chunks(rc_decode_lossless_args a, int64_t max_chunks) {
    __shared__ table tables[kWarps];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t g = (int64_t)blockIdx.x * kWarps + warp;
    if (g >= a.count * max_chunks) return;
    const int64_t m = g / max_chunks, c = g % max_chunks;
    const int64_t id = a.ids[m * a.ids_stride];
    if (id < 0 || id >= a.frames) return;
    const int64_t lo = a.offsets[id * a.offsets_stride], hi = a.offsets[(id + 1) * a.offsets_stride];
    if (lo < 0 || hi < lo || hi > a.data_bytes) return;
    const uint8_t *src;
    int64_t n;
    if (a.data_on_host) {
        src = a.scratch + m * a.scratch_bytes;
        n = hi - lo < a.scratch_bytes ? hi - lo : a.scratch_bytes;
    } else {
        src = a.data + lo;
        n = hi - lo;
    }
    const int64_t H = a.height, W = a.width;
    rc_ll_layout lay;
    if (rc_ll_parse_header(&lay, src, n, H, W) != 0 || c >= lay.n_chunks) return;
    int64_t first;
    const int k = rc_ll_chunk_plane(c, H, lay.band, &first);
    table *tb = &tables[warp];
    if (!load_table(tb, src + lay.table_start[k], lay.table_end[k] - lay.table_start[k], lane)) return;
    const int64_t begin = c ? rc_ll_u32(src + lay.dir + 4 * (c - 1)) : 0, end = rc_ll_u32(src + lay.dir + 4 * c);
    const int64_t left = rc_ll_plane_rows(k, H) - first, cols = rc_ll_plane_cols(k, W);
    const int64_t rows = left < lay.band ? left : lay.band, lanes = rows < 32 ? rows : 32;
    if (begin > end || lay.streams + end > n || end - begin < 4 * lanes) return;
    const uint8_t *stream = src + lay.streams + begin, *words = stream + 4 * lanes;
    const int64_t nw = (end - begin - 4 * lanes) / 2;
    const bool aligned = ((uintptr_t)words & 1) == 0;
    uint32_t x = lane < lanes ? rc_ll_u32(stream + 4 * lane) : RC_LL_LOW;
    uint8_t *px = a.out + m * (H * W + 2 * ((H + 1) / 2) * ((W + 1) / 2)) + rc_ll_plane_offset(k, H, W) + first * cols;
    int64_t pos = 0;
    for (int64_t q = 0; q < rows; q += 32) {
        const int64_t active = rows - q < 32 ? rows - q : 32, r = q + lane;
        uint8_t *cur = px + r * cols;
        int32_t mine = 0, up_before = 0; /* my last pixel (left, and lane+1's up); the up I got last step */
        for (int64_t s = 0; s < cols + active - 1; s++) {
            const int64_t col = s - lane;
            const bool on = lane < active && col >= 0 && col < cols;
            uint32_t v = 0, y = 0;
            if (on) {
                v = tb->sym[x & (RC_LL_TOTAL - 1)];
                y = rc_ll_advance(x, tb->freq[v], tb->cum[v]);
            }
            const bool need = on && y < RC_LL_LOW;
            const unsigned mask = __ballot_sync(kFull, need);
            /* lanes read the words in lane order: the encoder wrote them for that order */
            if (on) x = need ? (y << 16) | word_at(words, pos + __popc(mask & ((1u << lane) - 1)), nw, aligned) : y;
            pos += __popc(mask);
            /* the pixel above: lane - 1's at this column, made last step; lane 0 reads the pass above's */
            int32_t up = __shfl_up_sync(kFull, mine, 1);
            if (on && lane == 0 && r > 0) up = cur[col - cols];
            if (on) {
                const int32_t ul = col ? up_before : 0;
                const uint8_t p = rc_ll_pixel(v, rc_ll_predict(mine, up, ul, r, col));
                cur[col] = p;
                mine = p;
                up_before = up;
            }
        }
        __syncwarp(); /* this pass's last row, read by the next pass's lane 0 */
    }
}

}  // namespace

extern "C" rc_status rc_decode_lossless_cuda(const rc_decode_lossless_args *args, int device, void *stream) {
    const rc_decode_lossless_args a = *args;
    if (a.count <= 0) return RC_OK;
    if (a.data_on_host && (!a.scratch || a.scratch_bytes <= 0))
        return rc_fail(RC_ERR_VALUE, "decode_lossless: host data needs device scratch");
    if (a.count > (int64_t)1 << 30) return rc_fail(RC_ERR_VALUE, "%lld frames in one call (max 2^30)", (long long)a.count);
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    cudaStream_t s = (cudaStream_t)stream;
    if (a.data_on_host) {
        copy_frames<<<(unsigned)a.count, 256, 0, s>>>(a);
        st = RC_CUDA_CHECK(cudaGetLastError(), "lossless copy launch");
    }
    if (st == RC_OK) {
        /* chunks of the smallest band (32 rows): warps past a frame's own chunk count return at once */
        const int64_t max_chunks = rc_ll_chunks(a.height, RC_LL_LANES);
        const int64_t blocks = (a.count * max_chunks + kWarps - 1) / kWarps;
        if (blocks > 0x7fffffff) {
            (void)guard.leave();
            return rc_fail(RC_ERR_VALUE, "%lld frames of %lld rows in one call: more than 2^31 blocks; decode "
                           "fewer at a time", (long long)a.count, (long long)a.height);
        }
        decode_chunks<<<(unsigned)blocks, 32 * kWarps, 0, s>>>(a, max_chunks);
        st = RC_CUDA_CHECK(cudaGetLastError(), "lossless decode launch");
    }
    rc_status left = guard.leave();
    return st != RC_OK ? st : left;
}
