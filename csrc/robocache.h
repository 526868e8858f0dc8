/* robocache.h: the kernel ABI shared by the CPython glue (csrc/), the CPU kernels (csrc/cpu/)
 * and the CUDA launchers (cuda/).
 *
 * Kernels see only plain views: pointers, element strides and sizes, already validated by the
 * glue (py_<op>.c). Every entry point returns rc_status; on failure the message is in a
 * thread-local buffer (rc_last_error). Nothing here prints, exits or allocates device memory.
 * Exported names: rc_<op>_<device>; argument order: outputs, inputs, sizes/options, stream.
 */
#ifndef ROBOCACHE_H
#define ROBOCACHE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RC_OK = 0,
    RC_ERR_VALUE = 1,       /* bad argument content: ValueError */
    RC_ERR_TYPE = 2,        /* bad dtype: TypeError */
    RC_ERR_CUDA = 3,        /* a CUDA runtime call failed: robocache.CudaError */
    RC_ERR_NOMEM = 4,       /* host allocation failed: MemoryError */
    RC_ERR_UNSUPPORTED = 5, /* built without CUDA, or no device: robocache.CudaError */
} rc_status;

/* Element types. Sizes in bytes: rc_dtype_size(). */
typedef enum {
    RC_F32 = 0, RC_F64, RC_F16, RC_BF16,
    RC_I8, RC_I16, RC_I32, RC_I64,
    RC_U8, RC_U16, RC_U32, RC_U64,
    RC_BOOL,
    RC_NUM_DTYPES
} rc_dtype;

#ifdef __CUDACC__
#define RC_INLINE __host__ __device__ static inline
#else
#define RC_INLINE static inline
#endif

/* Bytes per element, one nibble per dtype (callable from kernels: no tables). */
RC_INLINE int rc_dtype_size(rc_dtype t) { return (int)((0x1842184212284ull >> (4 * t)) & 0xf); }
RC_INLINE int rc_dtype_is_float(rc_dtype t) { return t <= RC_BF16; }

#define RC_MAX_DIMS 8

/* Device kinds of rc_tensor.device_type (same numbers as DLPack's DLDeviceType). */
#define RC_DEVICE_CPU 1
#define RC_DEVICE_CUDA 2

/* A strided view of someone else's memory. */
typedef struct {
    void *data;                   /* first element (DLPack byte_offset already applied) */
    int64_t shape[RC_MAX_DIMS];
    int64_t strides[RC_MAX_DIMS]; /* in elements, never NULL-equivalent: filled for compact */
    int32_t ndim;
    rc_dtype dtype;
    int32_t device_type;          /* RC_DEVICE_CPU (also pinned host) or RC_DEVICE_CUDA */
    int32_t device_id;
} rc_tensor;

/* ---- errors: thread-local last message ------------------------------------------------ */
rc_status rc_fail(rc_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const char *rc_last_error(void);

/* ---- resample ------------------------------------------------------------------------- */

typedef enum { RC_LINEAR = 0, RC_NEAREST, RC_PREVIOUS, RC_NEXT, RC_SLERP } rc_mode;

/* Output row b reads one time series: dense row b (its first lengths[b] samples, or all S),
 * or ragged episode index[b] = samples [offsets[e], offsets[e+1]) of values/times. Features
 * (trailing dims of values, flattened) are D; slerp treats them as D/4 quaternions x,y,z,w. */
typedef struct {
    /* outputs */
    void *out;                 /* [B, T, D] C-contiguous, dtype values_dtype */
    uint8_t *is_pad;           /* [B, T] C-contiguous bool, or NULL */
    /* inputs (strides in elements) */
    const void *values;        /* dense [B, S, D], ragged [N, D] */
    int64_t values_stride_b, values_stride_s, values_stride_d; /* stride_b unused when ragged */
    const void *times;         /* dense [B, S], ragged [N] */
    int64_t times_stride_b, times_stride_s;
    const void *new_times;     /* [B, T], same dtype as times */
    int64_t new_times_stride_b, new_times_stride_t;
    const int64_t *offsets;    /* ragged: [E + 1]; NULL when dense */
    int64_t offsets_stride;
    const int64_t *index;      /* ragged: [B] episode per output row */
    int64_t index_stride;
    const int64_t *lengths;    /* dense: [B] valid samples per row, or NULL for all S */
    int64_t lengths_stride;
    /* sizes and options */
    int64_t batch;             /* B */
    int64_t samples;           /* dense: S per row; ragged: N in total */
    int64_t targets;           /* T */
    int64_t features;          /* D */
    int64_t episodes;          /* ragged: E */
    rc_dtype values_dtype;
    rc_dtype times_dtype;      /* RC_F32, RC_F64 or RC_I64 (nanoseconds) */
    rc_mode mode;
    double tolerance;          /* is_pad margin in units of times (the glue scales ns) */
} rc_resample_args;

/* What the content check found: kind 0 = nothing wrong. */
typedef enum {
    RC_CHECK_OK = 0,
    RC_CHECK_TIMES_UNSORTED = 1, /* row, i: times[i] < times[i-1] */
    RC_CHECK_TIMES_NONFINITE = 2,/* row, i */
    RC_CHECK_OFFSETS = 3,        /* e: offsets[0] != 0, decreasing at e, or offsets[E] != N */
    RC_CHECK_INDEX = 4,          /* row: index[row] outside [0, E) */
    RC_CHECK_LENGTHS = 5,        /* row: lengths[row] outside [0, S] */
} rc_check_kind;

typedef struct {
    int64_t kind; /* rc_check_kind */
    int64_t row;  /* output row, or episode for offsets */
    int64_t i;    /* sample index within the row/episode */
} rc_check_result;

/* CPU: runs on `num_threads` threads (1 = the calling thread only). */
rc_status rc_resample_cpu(const rc_resample_args *args, int num_threads);
/* Content validation on the CPU; fills *result (kind 0 when valid). Ragged: only the episodes
 * referenced by index are scanned. */
rc_status rc_resample_check_cpu(rc_check_result *result, const rc_resample_args *args);

/* CUDA (defined in cuda/resample.cu; absent from CPU-only builds). `stream` is a cudaStream_t
 * owned by the caller; `device` is made current for the call and restored. No host sync. */
rc_status rc_resample_cuda(const rc_resample_args *args, int device, void *stream);
/* Device-side content validation. `scratch` is 3 int64 of device memory owned by the caller.
 * Syncs `stream` to read the verdict into *result: only used when the caller asked (check=True). */
rc_status rc_resample_check_cuda(rc_check_result *result, int64_t *scratch,
                                 const rc_resample_args *args, int device, void *stream);

/* ---- voxelize ------------------------------------------------------------------------- */

typedef enum { RC_VOX_OCCUPANCY = 0, RC_VOX_COUNT, RC_VOX_SUM, RC_VOX_MEAN, RC_VOX_MAX } rc_vox_mode;

/* Cloud b is points [r0, r1) of `points` (dense: r0 = 0, r1 = lengths[b] or N, addressed
 * b * stride_b + r * stride_n; ragged: offsets[b], offsets[b+1], stride_b = 0). Its slot index
 * (workspace rows) is b * N + r when dense, r when ragged. Voxel of a point:
 * i = floor(((double)p - origin) / voxel_size) per axis in float64, kept when 0 <= i < grid
 * on all three axes; V = X * Y * Z and v = (ix * Y + iy) * Z + iz. Semantics: docs/voxelize.md. */
typedef struct {
    /* outputs */
    void *out;                 /* [B, X, Y, Z] (occupancy, count) or [B, F, X, Y, Z] (sum, mean,
                                  max), C-contiguous, dtype out_dtype; overwritten entirely */
    int64_t *dropped;          /* [B] points of cloud b out of the grid or non-finite, or NULL */
    void *workspace;           /* rc_voxelize_workspace_size() bytes on the device of out, 8-byte
                                  aligned, contents undefined on entry (the kernels zero it) */
    /* inputs (strides in elements) */
    const void *points;        /* dense [B, N, 3], ragged [P, 3] */
    int64_t points_stride_b, points_stride_n, points_stride_c;
    const void *features;      /* dense [B, N, F], ragged [P, F]; NULL for occupancy/count */
    int64_t features_stride_b, features_stride_n, features_stride_c;
    const int64_t *lengths;    /* dense: [B] valid points per cloud, or NULL for all N */
    int64_t lengths_stride;
    const int64_t *offsets;    /* ragged: [B + 1]; NULL when dense */
    int64_t offsets_stride;
    /* sizes and options */
    int64_t batch;             /* B */
    int64_t points_per_cloud;  /* dense: N; ragged: P (rows of points) */
    int64_t channels;          /* F (0 for occupancy/count) */
    int64_t grid[3];           /* X, Y, Z, each >= 1 */
    double voxel_size[3];      /* > 0, finite */
    double origin[3];          /* finite */
    rc_dtype points_dtype;     /* RC_F32, RC_F64, RC_F16, RC_BF16 */
    rc_dtype features_dtype;   /* same set */
    rc_dtype out_dtype;        /* occupancy: F32/F64/F16/BF16/U8/BOOL; count: I32/I64;
                                  sum/mean/max: F32/F64 */
    rc_vox_mode mode;
    int32_t deterministic;     /* 1: sum/mean in 64-bit fixed point (bitwise reproducible) */
    int32_t sync;              /* CUDA: wait for the stream before returning (the workspace's
                                  allocator does not order its reuse on this stream) */
    int32_t cuda_layout;       /* 1: the CUDA kernels' workspace (voxelize_math.h), which adds
                                  a bitmap of B*X*Y*Z bits for big occupancy grids; set by the
                                  binding for CUDA calls only, 0 for the CPU */
} rc_voxelize_args;

/* Bytes of workspace the call needs (voxelize_math.h): sum/mean/max's slots; with
 * `cuda_layout` set, occupancy's B*X*Y*Z-bit bitmap of a big grid; otherwise 0. */
int64_t rc_voxelize_workspace_size(const rc_voxelize_args *args);

/* CPU: runs on `num_threads` threads; the result does not depend on the thread count. */
rc_status rc_voxelize_cpu(const rc_voxelize_args *args, int num_threads);
/* Content validation on the CPU: offsets from 0, non-decreasing, ending at P (kind
 * RC_CHECK_OFFSETS, row = position); lengths in [0, N] (RC_CHECK_LENGTHS, row = cloud). */
rc_status rc_voxelize_check_cpu(rc_check_result *result, const rc_voxelize_args *args);

/* CUDA (cuda/voxelize.cu; absent from CPU-only builds), on `stream`; no host sync unless
 * args->sync. */
rc_status rc_voxelize_cuda(const rc_voxelize_args *args, int device, void *stream);
/* Copies lengths/offsets to the host and runs rc_voxelize_check_cpu: syncs `stream`. */
rc_status rc_voxelize_check_cuda(rc_check_result *result, const rc_voxelize_args *args,
                                 int device, void *stream);

/* ---- fuse: K resamples onto one timeline, concatenated on the feature axis ----------------- */

#define RC_FUSE_MAX_STREAMS 16

/* One stream of a fuse call: resample's per-series fields (rc_resample_args) plus where its
 * D features land in the output row. Output row b reads dense row b, or ragged episode index[b]
 * = samples [offsets[e], offsets[e+1]) of this stream (every stream has E episodes). */
typedef struct {
    const void *values;        /* dense [B, S, D], ragged [N, D]; dtype rc_fuse_args.values_dtype */
    int64_t values_stride_b, values_stride_s, values_stride_d; /* elements; stride_b 0 if ragged */
    const void *times;         /* dense [B, S], ragged [N]; dtype rc_fuse_args.times_dtype */
    int64_t times_stride_b, times_stride_s;
    const int64_t *offsets;    /* ragged: [E + 1]; NULL when dense */
    int64_t offsets_stride;
    int64_t samples;           /* dense: S per row; ragged: N in total */
    int64_t features;          /* D (may be 0) */
    int64_t column;            /* first output feature: sum of the D of the streams before */
    rc_mode mode;
} rc_fuse_stream;

typedef struct {
    /* outputs */
    void *out;                 /* [B, T, F] C-contiguous, F = sum of D, dtype values_dtype */
    uint8_t *is_pad;           /* [B, T, K] C-contiguous bool (K = num_streams), or NULL */
    /* inputs shared by the streams (strides in elements) */
    const void *new_times;     /* [B, T], dtype times_dtype */
    int64_t new_times_stride_b, new_times_stride_t;
    const int64_t *index;      /* ragged: [B] episode per output row; NULL when dense */
    int64_t index_stride;
    /* sizes and options */
    int64_t batch;             /* B */
    int64_t targets;           /* T */
    int64_t out_features;      /* F */
    int64_t episodes;          /* ragged: E, shared by every stream */
    int32_t num_streams;       /* K, 1..RC_FUSE_MAX_STREAMS */
    rc_dtype values_dtype;     /* one dtype for every stream (and out) */
    rc_dtype times_dtype;      /* RC_F32, RC_F64 or RC_I64, every stream and new_times */
    double tolerance;          /* is_pad margin in units of times (the glue scales ns) */
    rc_fuse_stream streams[RC_FUSE_MAX_STREAMS]; /* passed to the CUDA kernel by value */
} rc_fuse_args;

/* Out columns [column, column + D) of stream k equal rc_resample_* of that stream alone, bit
 * for bit (slerp on CUDA aside: libm vs CUDA math). Content is validated by the glue with
 * rc_resample_check_* per stream. CPU: one parallel pass over (row, target) pairs. */
rc_status rc_fuse_cpu(const rc_fuse_args *args, int num_threads);
/* CUDA (cuda/fuse.cu): ONE kernel launch for all streams on `stream`; no host sync. */
rc_status rc_fuse_cuda(const rc_fuse_args *args, int device, void *stream);

/* ---- gather_frames: sampled video frames -> a batch (decode, resize, cast, layout) ----------- */

typedef enum { RC_FRAMES_RGB = 0, RC_FRAMES_YUV420 = 1 } rc_frame_format;
typedef enum { RC_MATRIX_BT601 = 0, RC_MATRIX_BT709 = 1, RC_MATRIX_BT2020 = 2 } rc_yuv_matrix;

/* out[m] = frame ids[m] of storage, decoded to height x width x channels, bilinearly resized to
 * out_height x out_width when that differs, cast to out_dtype. ids[m] < 0 writes zeros (CUDA:
 * also ids[m] >= frames, which the CPU binding rejects). Semantics: docs/frames.md;
 * arithmetic: frames_math.h. */
typedef struct {
    /* outputs */
    void *out;                 /* [M, out_height, out_width, channels], any element strides >= 0
                                  (planar or interleaved), dtype out_dtype; elements distinct */
    int64_t out_stride_m, out_stride_y, out_stride_x, out_stride_c;
    /* inputs (strides in elements) */
    const void *storage;       /* frame f at storage + f * frame_stride, rows contiguous:
                                  rgb [height, width, channels] of storage_dtype; yuv420 uint8
                                  Y [height, width], U [ch, cw], V [ch, cw] back to back,
                                  ch = (height + 1) / 2, cw = (width + 1) / 2. CUDA: a device
                                  pointer (pinned host memory: its device alias, UVA) */
    int64_t frame_stride;      /* elements from one frame to the next, >= 0 */
    const int64_t *ids;        /* [M] on the device of out */
    int64_t ids_stride;
    /* sizes and options */
    int64_t count;             /* M */
    int64_t frames;            /* N, frames in storage */
    int64_t height, width;     /* decoded frame, each in [1, 2^24] */
    int64_t channels;          /* 1..4 (rgb), 3 (yuv420) */
    int64_t out_height, out_width; /* each in [0, 2^24] */
    rc_frame_format format;
    rc_dtype storage_dtype;    /* rgb: RC_U8 or RC_F32; yuv420: RC_U8 */
    rc_dtype out_dtype;        /* RC_U8, RC_F32, RC_F16, RC_BF16 */
    int32_t yuv[6];            /* yuv420: rc_yuv_coeffs(matrix, full_range) (frames_math.h) */
    float scale;               /* float out: divide by it when > 0 (0: no division) */
    /* augmentation (NULL aug: none). out[m] is frame ids[m] under the transform of parameter row
       m / aug_group: geometry and colour (augment_math.h), values in [0, 1] (uint8 out: * 255,
       rounded), then (v - mean[c]) / std[c]. Needs channels 3; scale is ignored. */
    const float *aug;          /* [count / aug_group, RC_AUG_NPARAMS] float32, on the device of out */
    int64_t aug_stride;        /* elements from one parameter row to the next */
    int64_t aug_group;         /* output frames per parameter row (a window's T steps), >= 1 */
    double *aug_scratch;       /* rc_aug_scratch_elements() float64 on the device of out, when a
                                  parameter row holds a contrast op: row sums [count, out_height],
                                  frame means [count], then (CUDA) the image before the op as float32
                                  [count, out_height, out_width, 3]; else NULL */
    int32_t antialias;         /* resize: torchvision's antialiased bilinear (1) or plain (0) */
    int32_t normalize;         /* apply mean/std */
    float mean[3], std[3];
} rc_gather_frames_args;

/* Elements of float64 an augmented gather's scratch holds (see aug_scratch). */
static inline int64_t rc_aug_scratch_elements(int64_t count, int64_t height, int64_t width) {
    return count * (height + 1) + (3 * count * height * width + 1) / 2;
}

/* A parameter row of an augmented gather (float32; integers stored exactly). */
enum {
    RC_AUG_CROP_TOP, RC_AUG_CROP_LEFT, RC_AUG_CROP_H, RC_AUG_CROP_W, /* box of the stored frame */
    RC_AUG_RESIZE_H, RC_AUG_RESIZE_W,   /* the box resized to (= the box: no resize) */
    RC_AUG_OUT_TOP, RC_AUG_OUT_LEFT,    /* out's window of the resized box (out_height x out_width) */
    RC_AUG_FLIP,                        /* 0 none; 1 mirror out (after the affine); 2 before it */
    RC_AUG_AFFINE,                      /* 0 none; 1 nearest; 2 bilinear */
    RC_AUG_THETA,                       /* 6: torchvision's inverse affine matrix, pixels about
                                           the window's center */
    RC_AUG_NCOLOR = RC_AUG_THETA + 6,   /* ops in the list that follows, <= RC_AUG_MAX_COLOR */
    RC_AUG_COLOR,                       /* (op, factor) pairs, applied in this order */
    RC_AUG_MAX_COLOR = 8,
    RC_AUG_NPARAMS = RC_AUG_COLOR + 2 * RC_AUG_MAX_COLOR
};
/* Colour ops (rc_aug_pointwise): factors as torchvision v2's adjust_* take them. */
enum { RC_COLOR_NONE = 0, RC_COLOR_BRIGHTNESS, RC_COLOR_CONTRAST, RC_COLOR_SATURATION, RC_COLOR_HUE,
       RC_COLOR_SHARPNESS, RC_COLOR_GRAYSCALE,
       RC_COLOR_AFFINE /* where the affine of RC_AUG_AFFINE acts in the list (factor unused) */ };

/* CPU: one parallel pass over the (m, output row) pairs. The glue has checked ids < frames. */
rc_status rc_gather_frames_cpu(const rc_gather_frames_args *args, int num_threads);
/* CUDA (cuda/frames.cu): one launch on `stream`, no host sync; bit-identical to the CPU. */
rc_status rc_gather_frames_cuda(const rc_gather_frames_args *args, int device, void *stream);
/* The augmented gather (args->aug set): CPU (cpu/augment.c) and CUDA (cuda/augment.cu, a mean pass
 * when some row has a contrast op, then one pass; no host sync), bit-identical. */
rc_status rc_augment_frames_cpu(const rc_gather_frames_args *args, int num_threads);
rc_status rc_augment_frames_cuda(const rc_gather_frames_args *args, int device, void *stream);

/* ---- decode_jpeg: the compressed tier's JPEG frames -> I420 rows on the GPU (cuda/jpeg.cu) ---- */

/* out: [count, H*W + 2*ceil(H/2)*ceil(W/2)] uint8 on `device`, row m = bitstream m decoded to
 * its 4:2:0 planes. data/lengths: count host bitstreams, already checked by the glue to be
 * baseline 4:2:0 JPEGs of height x width. nvJPEG (batched) is loaded from `library` (NULL: the
 * usual sonames) on first use; work is queued on `stream`, after host-side parsing. backend: -1
 * lets robocache choose (JPEG engines, GPU Huffman, default), or one of nvJPEG's
 * NVJPEG_BACKEND_* (0 default, 1 hybrid, 2 gpu_hybrid, 3 hardware), which must then exist. */
rc_status rc_decode_jpeg_cuda(uint8_t *out, const uint8_t *const *data, const size_t *lengths,
                              int64_t count, int64_t height, int64_t width, const char *library,
                              int device, int backend, void *stream);
/* "<backend> (nvJPEG x.y.z, <library>)" of the decoder of (device, backend), creating it. */
rc_status rc_jpeg_backend_cuda(char *name, int name_len, const char *library, int device, int backend);

/* ---- lossless frames: I420 planes <-> MED + interleaved rANS (format: lossless_math.h) ---- */

/* Frame i of rows [count, H*W + 2*ch*cw] (I420) coded into out row i; sizes[i] = its bytes, a multiple
 * of 16 (zero padding). band: rows per chunk, a multiple of 32 in [32, 65504]. */
typedef struct {
    uint8_t *out;              /* [count, capacity] host, C-contiguous */
    int64_t *sizes;            /* [count] host */
    const uint8_t *rows;       /* [count, H*W + 2*ch*cw] host, C-contiguous */
    int64_t count, height, width, band;
    int64_t capacity;          /* bytes of an out row: >= rc_lossless_bound(height, width, band) */
} rc_encode_lossless_args;

/* Bytes a coded frame of height x width (each >= 1) in chunks of `band` rows may take, at most. */
int64_t rc_lossless_bound(int64_t height, int64_t width, int64_t band);
/* CPU only (the tier codes at ingest); frames in parallel on `num_threads`. */
rc_status rc_encode_lossless_cpu(const rc_encode_lossless_args *args, int num_threads);

/* out[m] = coded frame ids[m] decoded to its I420 planes. ids[m] < 0 leaves out[m] as it was (CUDA:
 * also ids[m] >= frames, which the CPU rejects). */
typedef struct {
    uint8_t *out;              /* [count, H*W + 2*ch*cw], C-contiguous, on the device of the call */
    uint8_t *scratch;          /* CUDA with data_on_host: [count, scratch_bytes] device memory the
                                  sampled frames are copied to first; else NULL */
    const uint8_t *data;       /* coded frames back to back; CUDA: device memory, or the device alias
                                  of pinned host memory (data_on_host); frame starts 16-byte aligned */
    int64_t data_bytes;        /* S: bytes at data (no span reaches past them) */
    const int64_t *offsets;    /* [frames + 1]: frame i = data[offsets[i], offsets[i+1]); CUDA: device */
    int64_t offsets_stride;
    const int64_t *ids;        /* [count]; CUDA: device */
    int64_t ids_stride;
    int64_t count, frames, height, width;
    int64_t scratch_bytes;     /* >= the largest sampled frame's bytes (a larger one decodes garbage) */
    int32_t data_on_host;
} rc_decode_lossless_args;

/* CPU: checks every sampled frame (header, tables, chunk spans; each stream must end exactly where
 * its words do, every state back at its start): a corrupt frame is RC_ERR_VALUE naming it. */
rc_status rc_decode_lossless_cpu(const rc_decode_lossless_args *args, int num_threads);
/* CUDA (cuda/lossless.cu): a copy launch (data_on_host) and one decode launch, a warp per chunk, on
 * `stream`; no host sync. Trusts its input (the tier wrote it) but stays inside every span it is
 * given: a corrupt frame decodes to garbage in its own row. */
rc_status rc_decode_lossless_cuda(const rc_decode_lossless_args *args, int device, void *stream);

/* ---- CUDA runtime facts for `robocache info` (cuda/runtime.cu) ------------------------- */
/* What `ptr` is to the CUDA runtime: *kind 0 = host memory it does not know (pageable), 1 =
 * pinned host memory (page-locked, cudaHostAlloc / cudaHostRegister), 2 = device or managed
 * memory of device *device. For pinned memory *device_ptr is the address kernels use (the same
 * pointer under unified addressing), NULL when no device can reach it. */
rc_status rc_pointer_kind_cuda(int *kind, int *device, void **device_ptr, const void *ptr);
/* Page-locks the `nbytes` host bytes at `ptr` and maps them for every device (portable, mapped:
 * kernels read them at `ptr` itself under unified addressing). read_only: devices only read them,
 * which is what lets a file's page-cache pages (a shared read-only map) be pinned in place.
 * rc_host_unregister_cuda undoes it; `ptr` is the address registered. */
rc_status rc_host_register_cuda(void *ptr, size_t nbytes, int read_only);
rc_status rc_host_unregister_cuda(void *ptr);
rc_status rc_device_count_cuda(int *count); /* 0 devices is RC_OK with *count = 0 */
rc_status rc_device_name_cuda(char *name, int name_len, int *major, int *minor, int device);
int rc_runtime_version_cuda(void);
int rc_driver_version_cuda(void);
/* `waiter` waits (on the device, no host sync) for the work enqueued so far on `signaler`, both
 * streams of `device`. A failure falls back to synchronizing `signaler`. */
rc_status rc_stream_wait_cuda(void *waiter, void *signaler, int device);
/* The DataLoader's replay of a captured batch (robocache/batch_graph.py) in one call: `stream`
 * waits for the work enqueued so far on `consumer` (through `consumer_event`, re-recorded), then
 * the instantiated graph `exec` (a cudaGraphExec_t) is launched on `stream` and `done` (a
 * cudaEvent_t) is recorded after it; last, `consumer` waits for `ready` (the batch it takes now)
 * unless `ready` is NULL. Handles are borrowed, all of `device`; no host sync. */
rc_status rc_graph_launch_cuda(void *exec, void *stream, void *consumer, void *consumer_event, void *done,
                               void *ready, int device);

#ifdef __cplusplus
}
#endif
#endif /* ROBOCACHE_H */
