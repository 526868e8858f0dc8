/* py_jpeg.c: robocache._C.decode_jpeg and jpeg_backend, the compressed frame tier's GPU decode:
 * argument checks, each bitstream's header checked on the host (size, 4:2:0, baseline), and
 * dispatch to rc_decode_jpeg_cuda (cuda/jpeg.cu, nvJPEG).
 * Shapes (elements): storage [S] uint8 host bytes, offsets [N+1] int64 host, ids [M] int64 host,
 * out [M, H*W + 2*ch*cw] uint8 on a GPU (I420 rows, gather_frames' yuv420 storage).
 * Benchmark: python benchmarks/bench_scale.py --decode-only
 */
#include <stdlib.h>
#include <string.h>

#include "module.h"

PyDoc_STRVAR(decode_jpeg_doc,
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
"out. The host parses each bitstream (nvJPEG's batched API); docs/frame-storage.md.\n");

PyDoc_STRVAR(jpeg_backend_doc,
"jpeg_backend(device, library=None, backend='auto')\n"
"--\n"
"\n"
"Loads nvJPEG and creates the decoder of (device, backend); returns its backend and version as text.\n");

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

enum { A_STORAGE, A_OFFSETS, A_IDS, A_OUT, A_HEIGHT, A_WIDTH, A_LIBRARY, A_BACKEND, A_STREAM, A_COUNT,
       N_BACKENDS = A_COUNT, N_NAMES = N_BACKENDS + 5 }; /* interned: keywords, then backends */

/* the backends in rc_name_index's order: index - 1 is nvJPEG's NVJPEG_BACKEND_* (auto: -1) */
static const char *const names[N_NAMES] = {
    "storage", "offsets", "ids", "out", "height", "width", "library", "backend", "stream",
    "auto", "default", "hybrid", "gpu_hybrid", "hardware"};
#define BACKEND_CHOICES "'auto', 'hardware', 'gpu_hybrid', 'hybrid' or 'default'"

/* One call: its arguments, the arrays it imported, the sampled bitstreams. */
typedef struct {
    PyObject *arg[A_COUNT];  /* borrowed; NULL: not given */
    rc_tensor storage, offsets, ids, out;
    int64_t height, width, count;
    const char *library;     /* borrowed from library=, or NULL */
    int backend;             /* NVJPEG_BACKEND_*, -1: robocache chooses */
    const uint8_t **data;    /* owned: bitstream m starts at data[m] ... */
    size_t *lengths;         /* owned: ... and has lengths[m] bytes */
} job;

/* backend= as nvJPEG's number (auto: -1), or -2 with the exception set. */
static int parse_backend(PyObject *obj, PyObject *const *backend_names) {
    if (rc_is_none(obj)) return -1;
    return rc_name_index(obj, backend_names, "backend", BACKEND_CHOICES) - 1;
}

/* Keywords and options: the frames' size, the library and the backend. */
static int parse(const rc_state *st, job *j, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames) {
    static const int required[] = {A_STORAGE, A_OFFSETS, A_IDS, A_OUT, A_HEIGHT, A_WIDTH};
    static const rc_signature sig = {"decode_jpeg", "storage, offsets, ids, out", 4, required, 6};
    PyObject *const *name = rc_op_names(st, RC_OP_DECODE_JPEG);
    if (rc_parse_slots(j->arg, name, A_COUNT, &sig, args, nargs, kwnames) != 0) return -1;
    j->backend = parse_backend(j->arg[A_BACKEND], name + N_BACKENDS);
    if (j->backend < -1) return -1;
    /* 65535: JPEG's limit on a side */
    if (rc_parse_int_range(&j->height, j->arg[A_HEIGHT], "height", 1, 65535) ||
        rc_parse_int_range(&j->width, j->arg[A_WIDTH], "width", 1, 65535))
        return -1;
    if (rc_is_none(j->arg[A_LIBRARY])) return 0;
    if (!PyUnicode_Check(j->arg[A_LIBRARY])) {
        PyErr_Format(PyExc_TypeError, "library: expected a str path, got %.100s",
                     Py_TYPE(j->arg[A_LIBRARY])->tp_name);
        return -1;
    }
    j->library = PyUnicode_AsUTF8(j->arg[A_LIBRARY]);
    return j->library ? 0 : -1;
}

/* storage, offsets and ids on the host (nvJPEG parses each bitstream there), each in a call of
 * its own so that none sets the device of out's call. */
static int import_host(rc_call *sc, rc_call *hc, job *j) {
    if (rc_import_array(sc, &j->storage, j->arg[A_STORAGE], "storage", 0) != 0) return -1;
    if (rc_expect_dtype(&j->storage, RC_U8, "storage") ||
        rc_expect_ndim(&j->storage, 1, "storage", "[S] bytes"))
        return -1;
    if (j->storage.device_type != RC_DEVICE_CPU ||
        (j->storage.shape[0] > 1 && j->storage.strides[0] != 1)) {
        PyErr_SetString(PyExc_ValueError, "storage: expected contiguous bytes in host memory "
                        "(nvJPEG parses each bitstream on the host)");
        return -1;
    }
    if (rc_import_array(hc, &j->offsets, j->arg[A_OFFSETS], "offsets", 0) != 0) return -1;
    if (rc_expect_dtype(&j->offsets, RC_I64, "offsets") ||
        rc_expect_ndim(&j->offsets, 1, "offsets", "[N+1]"))
        return -1;
    if (rc_import_array(hc, &j->ids, j->arg[A_IDS], "ids", 0) != 0) return -1;
    if (rc_expect_dtype(&j->ids, RC_I64, "ids") || rc_expect_ndim(&j->ids, 1, "ids", "[M]"))
        return -1;
    if (j->offsets.device_type != RC_DEVICE_CPU || j->ids.device_type != RC_DEVICE_CPU) {
        PyErr_SetString(PyExc_ValueError, "offsets and ids: expected host arrays (the host hands "
                        "each sampled bitstream to nvJPEG)");
        return -1;
    }
    return 0;
}

/* out [M, one I420 row], C-contiguous uint8: the call's device. */
static int import_out(rc_call *c, job *j) {
    const int64_t H = j->height, W = j->width, row = H * W + 2 * ((H + 1) / 2) * ((W + 1) / 2);
    const rc_tensor *o = &j->out;
    j->count = j->ids.shape[0];
    if (rc_import_array(c, &j->out, j->arg[A_OUT], "out", 1) != 0) return -1;
    if (rc_expect_dtype(o, RC_U8, "out")) return -1;
    if (o->ndim != 2 || o->shape[0] != j->count || o->shape[1] != row || !rc_is_contiguous(o)) {
        char buf[96];
        PyErr_Format(PyExc_ValueError, "out: expected a C-contiguous [%lld, %lld] (one I420 row per "
                     "id), got shape %s", (long long)j->count, (long long)row,
                     rc_dims_str(buf, sizeof buf, o->ndim, o->shape));
        return -1;
    }
    if (j->offsets.shape[0] < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets: expected [N+1] with N >= 0, got an empty array");
        return -1;
    }
    return 0;
}

/* Every sampled bitstream: its id in range, its span inside storage and its header of the
 * right kind; kept in j->data / j->lengths for the decoder. */
static int collect_bitstreams(job *j) {
    const int64_t M = j->count, N = j->offsets.shape[0] - 1;
    const int64_t *off = (const int64_t *)j->offsets.data, os = j->offsets.strides[0];
    const int64_t *idp = (const int64_t *)j->ids.data, is = j->ids.strides[0];
    j->data = (const uint8_t **)malloc((size_t)(M > 0 ? M : 1) * sizeof *j->data);
    j->lengths = (size_t *)malloc((size_t)(M > 0 ? M : 1) * sizeof *j->lengths);
    if (!j->data || !j->lengths) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t m = 0; m < M; m++) {
        const int64_t id = idp[m * is];
        if (id < 0 || id >= N) {
            PyErr_Format(PyExc_ValueError, "ids[%lld] = %lld is out of range for %lld frames",
                         (long long)m, (long long)id, (long long)N);
            return -1;
        }
        const int64_t a = off[id * os], b = off[(id + 1) * os];
        if (a < 0 || b < a || b > j->storage.shape[0]) {
            PyErr_Format(PyExc_ValueError, "offsets[%lld:%lld] = (%lld, %lld) is not a span of "
                         "storage's %lld bytes", (long long)id, (long long)id + 2, (long long)a,
                         (long long)b, (long long)j->storage.shape[0]);
            return -1;
        }
        const uint8_t *p = (const uint8_t *)j->storage.data + a;
        const char *why = check_header(p, b - a, j->height, j->width);
        if (why) {
            PyErr_Format(PyExc_ValueError, "storage: frame %lld is %s (expected a %lldx%lld "
                         "baseline 4:2:0 JPEG)", (long long)id, why, (long long)j->height,
                         (long long)j->width);
            return -1;
        }
        j->data[m] = p;
        j->lengths[m] = (size_t)(b - a);
    }
    return 0;
}

static rc_status decode_cuda(void *p, int device, void *stream) {
    const job *j = p;
    return RC_CUDA_LAUNCH(rc_decode_jpeg_cuda((uint8_t *)j->out.data, j->data, j->lengths, j->count,
                                              j->height, j->width, j->library, device, j->backend,
                                              stream));
}
static const rc_kernels kernels = {NULL, decode_cuda}; /* run() refuses CPU out first */

static int run(rc_call *c, job *j) {
    if (c->device_type != RC_DEVICE_CUDA) {
        PyErr_SetString(PyExc_ValueError, "out: expected a CUDA array (the CPU path decodes with "
                        "PyAV: robocache.frames.jpeg)");
        return -1;
    }
    return rc_run(c, &kernels, j, 1);
}

static PyObject *decode_jpeg(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    job j;
    memset(&j, 0, sizeof j);
    if (parse(st, &j, args, nargs, kwnames) != 0) return NULL;
    rc_call call, scall, hcall; /* out (the GPU), storage, offsets + ids (host) */
    rc_call_init(&call, st, j.arg[A_STREAM]);
    rc_call_init(&scall, st, NULL);
    rc_call_init(&hcall, st, NULL);
    PyObject *result = NULL;
    if (import_host(&scall, &hcall, &j) != 0 || import_out(&call, &j) != 0 ||
        collect_bitstreams(&j) != 0 || run(&call, &j) != 0)
        goto fail;
    result = j.arg[A_OUT];
    Py_INCREF(result);
fail:
    free(j.data);
    free(j.lengths);
    rc_call_release(&hcall);
    rc_call_release(&scall);
    rc_call_release(&call);
    return result;
}

static PyObject *jpeg_backend(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
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
    const int backend = parse_backend(nargs == 3 ? args[2] : NULL,
                                      rc_op_names(st, RC_OP_DECODE_JPEG) + N_BACKENDS);
    if (backend < -1 || rc_require_cuda(st, "jpeg_backend", (int)device) != 0) return NULL;
    char name[640];
    rc_status status;
    Py_BEGIN_ALLOW_THREADS
    status = RC_CUDA_LAUNCH(rc_jpeg_backend_cuda(name, (int)sizeof name, library, (int)device, backend));
    Py_END_ALLOW_THREADS
    if (status != RC_OK) return rc_raise_status(st, status);
    return PyUnicode_FromString(name);
}

static PyMethodDef methods[] = {
    {"decode_jpeg", (PyCFunction)(void (*)(void))decode_jpeg, METH_FASTCALL | METH_KEYWORDS,
     decode_jpeg_doc},
    {"jpeg_backend", (PyCFunction)(void (*)(void))jpeg_backend, METH_FASTCALL, jpeg_backend_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_decode_jpeg_op = {RC_OP_DECODE_JPEG, methods, names, N_NAMES};
