/* py_jpeg.c: robocache._C.decode_jpeg and jpeg_backend, the compressed frame tier's GPU decode:
 * argument checks, each bitstream's header checked on the host (size, 4:2:0, baseline), and
 * dispatch to rc_jpeg_decode_cuda (cuda/jpeg.cu, nvJPEG).
 * Shapes (elements): storage [S] uint8 host bytes, offsets [N+1] int64 host, ids [M] int64 host,
 * out [M, H*W + 2*ch*cw] uint8 on a GPU (I420 rows, gather_frames' yuv420 storage).
 * Benchmark: python benchmarks/bench_scale.py --decode-only
 */
#include <stdlib.h>
#include <string.h>

#include "module.h"

const char rc_decode_jpeg_doc_text[] =
"decode_jpeg(storage, offsets, ids, out, *, height, width, library=None, backend='auto', stream=None)\n"
"--\n"
"\n"
"Decodes JPEG frames ids[m] of storage into the I420 rows out[m] on the GPU (nvJPEG, batched).\n"
"\n"
"Parameters\n"
"----------\n"
"storage : uint8 array [S], host memory\n"
"    The frames' JPEG bitstreams back to back (baseline, 3 components, 4:2:0).\n"
"offsets : int64 array [N+1], host\n"
"    Frame i is storage[offsets[i]:offsets[i+1]].\n"
"ids : int64 array [M], host\n"
"    Frames to decode, each in [0, N).\n"
"out : uint8 array [M, height*width + 2*((height+1)//2)*((width+1)//2)], C-contiguous, CUDA\n"
"    Row m gets frame ids[m] as I420 planes (gather_frames' 'yuv420' storage).\n"
"height, width : int\n"
"    Every frame's size; a frame of another size or layout raises ValueError before any decode.\n"
"library : str, optional\n"
"    The nvJPEG shared library to load on first use (default: libnvjpeg.so.13, .12).\n"
"backend : str\n"
"    nvJPEG's decoder: 'auto' (the JPEG engines where the GPU has them, else GPU Huffman decoding,\n"
"    else nvJPEG's default), or one of 'hardware', 'gpu_hybrid', 'hybrid' (Huffman on the CPU),\n"
"    'default', which must then exist. One decoder per device and backend.\n"
"stream : int or stream object, optional\n"
"    CUDA stream; default: the framework's current stream for out's device.\n"
"\n"
"Returns\n"
"-------\n"
"out. The host parses each bitstream (nvJPEG's batched API); docs/frame-storage.md.\n";

const char rc_jpeg_backend_doc_text[] =
"jpeg_backend(device, library=None, backend='auto')\n"
"--\n"
"\n"
"Loads nvJPEG and creates the decoder of (device, backend); returns its backend and version as text.\n";

enum { A_STORAGE, A_OFFSETS, A_IDS, A_OUT, A_HEIGHT, A_WIDTH, A_LIBRARY, A_BACKEND, A_STREAM, A_COUNT };

/* rc_name_index's order: index - 1 is nvJPEG's NVJPEG_BACKEND_* (auto: -1) */
static const char *const backend_names[5] = {"auto", "default", "hybrid", "gpu_hybrid", "hardware"};
#define BACKEND_CHOICES "'auto', 'hardware', 'gpu_hybrid', 'hybrid' or 'default'"

_Static_assert(sizeof(((rc_state *)0)->jpeg_kw) == A_COUNT * sizeof(PyObject *),
               "rc_state.jpeg_kw holds one name per argument");

int rc_jpeg_init_state(rc_state *st) {
    static const char *const names[A_COUNT] = {"storage", "offsets", "ids", "out",
                                               "height", "width", "library", "backend",
                                               "stream"};
    for (int i = 0; i < A_COUNT; i++) {
        st->jpeg_kw[i] = PyUnicode_InternFromString(names[i]);
        if (!st->jpeg_kw[i]) return -1;
    }
    for (int i = 0; i < 5; i++) {
        st->jpeg_backend_names[i] = PyUnicode_InternFromString(backend_names[i]);
        if (!st->jpeg_backend_names[i]) return -1;
    }
    return 0;
}

void rc_jpeg_clear_state(rc_state *st) {
    for (int i = 0; i < A_COUNT; i++) Py_CLEAR(st->jpeg_kw[i]);
    for (int i = 0; i < 5; i++) Py_CLEAR(st->jpeg_backend_names[i]);
}

/* The frame header of one bitstream: 0 when it is a baseline/extended 8-bit JPEG of height x
 * width with 3 components sampled 4:2:0 (Y 2x2, Cb and Cr 1x1); else a reason. Reads only the
 * markers before the first SOF (a few hundred bytes): cheap next to the decode, and it keeps a
 * wrong-sized frame from writing past its row. */
static const char *check_header(const uint8_t *p, int64_t n, int64_t height, int64_t width) {
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return "not a JPEG (no SOI marker)";
    int64_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF) return "corrupt marker sequence";
        const uint8_t marker = p[i + 1];
        if (marker == 0xFF) { i++; continue; } /* fill byte */
        const int64_t len = ((int64_t)p[i + 2] << 8) | p[i + 3];
        if (len < 2 || i + 2 + len > n) return "truncated header segment";
        if (marker == 0xC0 || marker == 0xC1) {
            const uint8_t *s = p + i + 4;
            if (len < 8 + 9 || s[0] != 8) return "not 8-bit";
            const int64_t h = ((int64_t)s[1] << 8) | s[2], w = ((int64_t)s[3] << 8) | s[4];
            if (h != height || w != width) return "a frame of another size";
            if (s[5] != 3 || s[7] != 0x22 || s[10] != 0x11 || s[13] != 0x11)
                return "not 3 components sampled 4:2:0";
            return NULL;
        }
        if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)
            return "not a baseline JPEG (progressive, lossless or arithmetic coded)";
        if (marker == 0xDA) return "no frame header before the scan";
        i += 2 + len;
    }
    return "truncated before the frame header";
}

PyObject *rc_py_decode_jpeg(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    PyObject *a_[A_COUNT];
    static const int required[] = {A_STORAGE, A_OFFSETS, A_IDS, A_OUT, A_HEIGHT, A_WIDTH};
    static const rc_signature sig = {"decode_jpeg", "storage, offsets, ids, out", 4, required, 6};
    if (rc_parse_slots(a_, st->jpeg_kw, A_COUNT, &sig, args, nargs, kwnames) != 0) return NULL;

    rc_call call, scall, hcall; /* out (the GPU), storage, offsets + ids (host) */
    rc_call_init(&call, st, a_[A_STREAM]);
    rc_call_init(&scall, st, NULL);
    rc_call_init(&hcall, st, NULL);
    const uint8_t **data = NULL;
    size_t *lengths = NULL;
    rc_tensor storage, offsets, ids, out;
    int64_t H, W;
    const char *library = NULL;
    int backend = -1;
    if (!rc_is_none(a_[A_BACKEND])) {
        backend = rc_name_index(a_[A_BACKEND], st->jpeg_backend_names, "backend", BACKEND_CHOICES) - 1;
        if (backend < -1) goto fail;
    }
    /* 65535: JPEG's limit on a side */
    if (rc_parse_int_range(&H, a_[A_HEIGHT], "height", 1, 65535) ||
        rc_parse_int_range(&W, a_[A_WIDTH], "width", 1, 65535))
        goto fail;
    if (!rc_is_none(a_[A_LIBRARY])) {
        if (!PyUnicode_Check(a_[A_LIBRARY])) {
            PyErr_Format(PyExc_TypeError, "library: expected a str path, got %.100s",
                         Py_TYPE(a_[A_LIBRARY])->tp_name);
            goto fail;
        }
        library = PyUnicode_AsUTF8(a_[A_LIBRARY]);
        if (!library) goto fail;
    }

    if (rc_import_array(&scall, &storage, a_[A_STORAGE], "storage", 0) != 0) goto fail;
    if (rc_expect_dtype(&storage, RC_U8, "storage") || rc_expect_ndim(&storage, 1, "storage", "[S] bytes"))
        goto fail;
    if (storage.device_type != RC_DEVICE_CPU || (storage.shape[0] > 1 && storage.strides[0] != 1)) {
        PyErr_SetString(PyExc_ValueError, "storage: expected contiguous bytes in host memory "
                        "(nvJPEG parses each bitstream on the host)");
        goto fail;
    }
    if (rc_import_array(&hcall, &offsets, a_[A_OFFSETS], "offsets", 0) != 0) goto fail;
    if (rc_expect_dtype(&offsets, RC_I64, "offsets") ||
        rc_expect_ndim(&offsets, 1, "offsets", "[N+1]"))
        goto fail;
    if (rc_import_array(&hcall, &ids, a_[A_IDS], "ids", 0) != 0) goto fail;
    if (rc_expect_dtype(&ids, RC_I64, "ids") || rc_expect_ndim(&ids, 1, "ids", "[M]")) goto fail;
    if (offsets.device_type != RC_DEVICE_CPU || ids.device_type != RC_DEVICE_CPU) {
        PyErr_SetString(PyExc_ValueError, "offsets and ids: expected host arrays (the host hands "
                        "each sampled bitstream to nvJPEG)");
        goto fail;
    }
    if (rc_import_array(&call, &out, a_[A_OUT], "out", 1) != 0) goto fail;
    const int64_t row = H * W + 2 * ((H + 1) / 2) * ((W + 1) / 2);
    const int64_t M = ids.shape[0], N = offsets.shape[0] - 1;
    if (rc_expect_dtype(&out, RC_U8, "out")) goto fail;
    if (out.ndim != 2 || out.shape[0] != M || out.shape[1] != row || !rc_is_contiguous(&out)) {
        char buf[96];
        PyErr_Format(PyExc_ValueError, "out: expected a C-contiguous [%lld, %lld] (one I420 row per "
                     "id), got shape %s", (long long)M, (long long)row,
                     rc_dims_str(buf, sizeof buf, out.ndim, out.shape));
        goto fail;
    }
    if (N < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets: expected [N+1] with N >= 0, got an empty array");
        goto fail;
    }

    /* ---- content: every sampled bitstream in range and of the right kind ---- */
    const int64_t *off = (const int64_t *)offsets.data, os = offsets.strides[0];
    const int64_t *idp = (const int64_t *)ids.data, is = ids.strides[0];
    data = (const uint8_t **)malloc((size_t)(M > 0 ? M : 1) * sizeof *data);
    lengths = (size_t *)malloc((size_t)(M > 0 ? M : 1) * sizeof *lengths);
    if (!data || !lengths) { PyErr_NoMemory(); goto fail; }
    for (int64_t m = 0; m < M; m++) {
        const int64_t id = idp[m * is];
        if (id < 0 || id >= N) {
            PyErr_Format(PyExc_ValueError, "ids[%lld] = %lld is out of range for %lld frames",
                         (long long)m, (long long)id, (long long)N);
            goto fail;
        }
        const int64_t a = off[id * os], b = off[(id + 1) * os];
        if (a < 0 || b < a || b > storage.shape[0]) {
            PyErr_Format(PyExc_ValueError, "offsets[%lld:%lld] = (%lld, %lld) is not a span of "
                         "storage's %lld bytes", (long long)id, (long long)id + 2, (long long)a,
                         (long long)b, (long long)storage.shape[0]);
            goto fail;
        }
        const uint8_t *p = (const uint8_t *)storage.data + a;
        const char *why = check_header(p, b - a, H, W);
        if (why) {
            PyErr_Format(PyExc_ValueError, "storage: frame %lld is %s (expected a %lldx%lld "
                         "baseline 4:2:0 JPEG)", (long long)id, why, (long long)H, (long long)W);
            goto fail;
        }
        data[m] = p;
        lengths[m] = (size_t)(b - a);
    }

    if (call.device_type != RC_DEVICE_CUDA) {
        PyErr_SetString(PyExc_ValueError, "out: expected a CUDA array (the CPU path decodes with "
                        "PyAV: robocache.frames.jpeg)");
        goto fail;
    }
#ifdef RC_WITH_CUDA
    {
        void *stream;
        if (rc_call_stream(&call, &stream) != 0) goto fail;
        rc_status status = RC_OK;
        Py_BEGIN_ALLOW_THREADS
        status = rc_jpeg_decode_cuda((uint8_t *)out.data, data, lengths, M, H, W, library,
                                     call.device_id, backend, stream);
        Py_END_ALLOW_THREADS
        if (status != RC_OK) { rc_raise_status(st, status); goto fail; }
    }
#else
    rc_no_cuda_error(st, "out", call.device_id);
    goto fail;
#endif
    free(data);
    free(lengths);
    rc_call_release(&hcall);
    rc_call_release(&scall);
    rc_call_release(&call);
    Py_INCREF(a_[A_OUT]);
    return a_[A_OUT];

fail:
    free(data);
    free(lengths);
    rc_call_release(&hcall);
    rc_call_release(&scall);
    rc_call_release(&call);
    return NULL;
}

PyObject *rc_py_jpeg_backend(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    rc_state *st = rc_get_state(module);
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "jpeg_backend(device, library=None, backend='auto')");
        return NULL;
    }
    long device = PyLong_AsLong(args[0]);
    if (device == -1 && PyErr_Occurred()) return NULL;
    const char *library = NULL;
    if (nargs >= 2 && args[1] != Py_None) {
        library = PyUnicode_AsUTF8(args[1]);
        if (!library) return NULL;
    }
    int backend = -1;
    if (nargs == 3 && args[2] != Py_None) {
        backend = rc_name_index(args[2], st->jpeg_backend_names, "backend", BACKEND_CHOICES) - 1;
        if (backend < -1) return NULL;
    }
#ifdef RC_WITH_CUDA
    char name[640];
    rc_status status;
    Py_BEGIN_ALLOW_THREADS
    status = rc_jpeg_backend(name, (int)sizeof name, library, (int)device, backend);
    Py_END_ALLOW_THREADS
    if (status != RC_OK) return rc_raise_status(st, status);
    return PyUnicode_FromString(name);
#else
    (void)library;
    return rc_no_cuda_error(st, "jpeg_backend", (int)device);
#endif
}
