/* py_lossless.c: robocache._C.encode_lossless, decode_lossless and lossless_bound, the lossless frame
 * tier's coder: argument checks and dispatch to rc_encode_lossless_cpu (csrc/cpu/lossless.c) and
 * rc_decode_lossless_cpu / rc_decode_lossless_cuda (cuda/lossless.cu). Format: lossless_math.h.
 * Shapes (elements): rows / out [M, H*W + 2*ch*cw] uint8 (I420); coded [n, capacity] uint8 and
 * sizes [n] int64 (encode); data [S] uint8, offsets [N+1] int64, ids [M] int64 (decode).
 * Benchmark: python benchmarks/bench_lossless.py
 */
#include <stdio.h>
#include <string.h>

#include "lossless_math.h"
#include "module.h"

PyDoc_STRVAR(encode_lossless_doc,
"encode_lossless(out, sizes, rows, *, height, width, band=None, threads=None)\n"
"--\n"
"\n"
"Codes I420 frames losslessly (MED predictor + interleaved rANS, in chunks a GPU decodes in parallel).\n"
"\n"
"Parameters\n"
"----------\n"
"out : uint8 array [n, capacity], C-contiguous, host\n"
"    Row i gets frame i's coded bytes (then junk); capacity >= lossless_bound(height, width, band).\n"
"sizes : int64 array [n], host\n"
"    sizes[i] = the bytes of frame i (a multiple of 16).\n"
"rows : uint8 array [n, height*width + 2*((height+1)//2)*((width+1)//2)], C-contiguous, host\n"
"    The frames' Y, U and V planes back to back (gather_frames' 'yuv420' storage).\n"
"height, width : int\n"
"band : int, optional\n"
"    Rows per chunk, a multiple of 32 (default: the smallest giving 32768 pixels of luma a chunk).\n"
"threads : int, optional\n"
"    Threads (frames in parallel); default: robocache's CPU threads.\n"
"\n"
"Returns\n"
"-------\n"
"sizes. The same frame gives the same bytes on every machine; docs/frame-storage.md.\n");

PyDoc_STRVAR(decode_lossless_doc,
"decode_lossless(out, data, offsets, ids, *, height, width, scratch=None, stream=None)\n"
"--\n"
"\n"
"Decodes coded frames ids[m] of data into the I420 rows out[m] (bit-exact: the frames coded).\n"
"\n"
"Parameters\n"
"----------\n"
"out : uint8 array [M, height*width + 2*((height+1)//2)*((width+1)//2)], C-contiguous\n"
"    The call's device. Rows of ids < 0 are left as they are.\n"
"data : uint8 array [S]\n"
"    Frames back to back, each starting 16-byte aligned. With CUDA out: on its device, or pinned host\n"
"    memory (then scratch is needed).\n"
"offsets : int64 array [N+1], on out's device\n"
"    Frame i is data[offsets[i]:offsets[i+1]].\n"
"ids : int64 array [M], on out's device\n"
"    Frames to decode, < N (the CPU checks; CUDA skips those >= N).\n"
"height, width : int\n"
"scratch : uint8 array [M, K], CUDA only, optional\n"
"    Device memory the sampled frames are copied to first when data is host memory; K >= the\n"
"    largest frame's bytes.\n"
"stream : int or stream object, optional\n"
"    CUDA stream; default: the framework's current stream for out's device.\n"
"\n"
"Returns\n"
"-------\n"
"out. The CPU checks every frame it decodes (a damaged one raises ValueError naming it); CUDA trusts\n"
"the data but never reads or writes outside the spans it is given.\n");

PyDoc_STRVAR(lossless_bound_doc,
"lossless_bound(height, width, band=None)\n"
"--\n"
"\n"
"Bytes a coded frame of height x width may take, at most: the row size encode_lossless needs.\n");

/* interned: encode's keywords, then decode's (a function's keywords are one contiguous run) */
enum { E_OUT, E_SIZES, E_ROWS, E_HEIGHT, E_WIDTH, E_BAND, E_THREADS, E_COUNT };
enum { D_OUT, D_DATA, D_OFFSETS, D_IDS, D_HEIGHT, D_WIDTH, D_SCRATCH, D_STREAM, D_COUNT };
static const char *const names[E_COUNT + D_COUNT] = {
    "out", "sizes", "rows", "height", "width", "band", "threads",
    "out", "data", "offsets", "ids", "height", "width", "scratch", "stream"};

#define MAX_SIDE 65535 /* rows and columns of a frame: ample for video, and u32 pixel counts */

/* band= as rows per chunk: not given or None -> the smallest multiple of 32 with >= 32768 luma pixels
 * (a GPU warp's work between two states' flushes: 128 B of states stay < 3% of a 180x320 frame). */
static int parse_band(int64_t *band, PyObject *obj, int64_t height, int64_t width) {
    if (rc_is_none(obj)) {
        int64_t b = (32768 + width - 1) / width;
        b = (b + RC_LL_LANES - 1) / RC_LL_LANES * RC_LL_LANES;
        const int64_t all = (height + RC_LL_LANES - 1) / RC_LL_LANES * RC_LL_LANES;
        *band = b < all ? b : all;
        return 0;
    }
    if (rc_parse_int_range(band, obj, "band", RC_LL_LANES, 65504) != 0) return -1;
    if (*band % RC_LL_LANES) {
        PyErr_Format(PyExc_ValueError, "band: expected a multiple of %d (a warp's rows), got %lld", RC_LL_LANES,
                     (long long)*band);
        return -1;
    }
    return 0;
}

static int64_t i420_bytes(int64_t h, int64_t w) { return h * w + 2 * ((h + 1) / 2) * ((w + 1) / 2); }

/* A 2-D C-contiguous uint8 host array of `cols` columns (cols < 0: any), rows `rows` (< 0: any). */
static int expect_rows(const rc_tensor *v, const char *name, int64_t rows, int64_t cols, const char *what) {
    if (rc_expect_dtype(v, RC_U8, name)) return -1;
    if (v->ndim != 2 || (rows >= 0 && v->shape[0] != rows) || (cols >= 0 && v->shape[1] != cols) ||
        !rc_is_contiguous(v)) {
        char buf[96], r[24], c[24];
        snprintf(r, sizeof r, rows < 0 ? "n" : "%lld", (long long)rows);
        snprintf(c, sizeof c, cols < 0 ? "k" : "%lld", (long long)cols);
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous uint8 [%s, %s] (%s), got shape %s", name, r, c,
                     what, rc_dims_str(buf, sizeof buf, v->ndim, v->shape));
        return -1;
    }
    return 0;
}

/* ---- encode ---------------------------------------------------------------------------------- */

typedef struct {
    rc_encode_lossless_args a;
    int64_t threads; /* 0: the module's */
} encode_job;

static rc_status encode_cpu(void *p, int threads) {
    const encode_job *j = p;
    return rc_encode_lossless_cpu(&j->a, j->threads > 0 ? (int)j->threads : threads);
}
static const rc_kernels encode_kernels = {encode_cpu, NULL}; /* CUDA arrays are refused first */

static int import_encode(rc_call *c, encode_job *j, PyObject *const *arg) {
    rc_encode_lossless_args *a = &j->a;
    rc_tensor rows, out, sizes;
    const int64_t fb = i420_bytes(a->height, a->width);
    if (rc_import_array(c, &rows, arg[E_ROWS], "rows", 0) != 0 ||
        expect_rows(&rows, "rows", -1, fb, "one I420 frame a row"))
        return -1;
    a->count = rows.shape[0];
    if (rc_import_array(c, &sizes, arg[E_SIZES], "sizes", 1) != 0 || rc_expect_dtype(&sizes, RC_I64, "sizes") ||
        rc_expect_ndim(&sizes, 1, "sizes", "[n]") || rc_expect_no_alias(c, "sizes"))
        return -1;
    if (sizes.shape[0] != a->count || !rc_is_contiguous(&sizes)) {
        PyErr_Format(PyExc_ValueError, "sizes: expected a contiguous int64 [%lld] (one per row of rows), got %lld",
                     (long long)a->count, (long long)sizes.shape[0]);
        return -1;
    }
    const int64_t need = rc_lossless_bound(a->height, a->width, a->band);
    if (rc_import_array(c, &out, arg[E_OUT], "out", 1) != 0 ||
        expect_rows(&out, "out", a->count, -1, "a coded frame a row") || rc_expect_no_alias(c, "out"))
        return -1;
    if (out.shape[1] < need) {
        PyErr_Format(PyExc_ValueError, "out: rows of %lld bytes cannot hold every frame: expected >= "
                     "lossless_bound(%lld, %lld) = %lld", (long long)out.shape[1], (long long)a->height,
                     (long long)a->width, (long long)need);
        return -1;
    }
    if (c->device_type == RC_DEVICE_CUDA) {
        PyErr_SetString(PyExc_ValueError, "rows: expected host arrays (the lossless tier codes frames on the CPU, "
                        "at ingest)");
        return -1;
    }
    a->out = (uint8_t *)out.data;
    a->sizes = (int64_t *)sizes.data;
    a->rows = (const uint8_t *)rows.data;
    a->capacity = out.shape[1];
    return 0;
}

static PyObject *encode_lossless(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const int required[] = {E_OUT, E_SIZES, E_ROWS, E_HEIGHT, E_WIDTH};
    static const rc_signature sig = {"encode_lossless", "out, sizes, rows", 3, required, 5};
    rc_state *st = rc_get_state(module);
    PyObject *arg[E_COUNT];
    encode_job j;
    memset(&j, 0, sizeof j);
    if (rc_parse_slots(arg, rc_op_names(st, RC_OP_LOSSLESS), E_COUNT, &sig, args, nargs, kwnames) != 0 ||
        rc_parse_int_range(&j.a.height, arg[E_HEIGHT], "height", 1, MAX_SIDE) ||
        rc_parse_int_range(&j.a.width, arg[E_WIDTH], "width", 1, MAX_SIDE) ||
        parse_band(&j.a.band, arg[E_BAND], j.a.height, j.a.width) != 0 ||
        (!rc_is_none(arg[E_THREADS]) && rc_parse_int_range(&j.threads, arg[E_THREADS], "threads", 1, 1024) != 0))
        return NULL;
    rc_call call;
    rc_call_init(&call, st, NULL);
    PyObject *result = NULL;
    if (import_encode(&call, &j, arg) == 0 && rc_run(&call, &encode_kernels, &j, j.a.count > 0) == 0) {
        result = arg[E_SIZES];
        Py_INCREF(result);
    }
    rc_call_release(&call);
    return result;
}

/* ---- decode ---------------------------------------------------------------------------------- */

static rc_status decode_cpu(void *a, int threads) { return rc_decode_lossless_cpu(a, threads); }
static rc_status decode_cuda(void *a, int device, void *stream) {
    return RC_CUDA_LAUNCH(rc_decode_lossless_cuda(a, device, stream));
}
static const rc_kernels decode_kernels = {decode_cpu, decode_cuda};

/* A 1-D int64 array on the call's device. */
static int import_index(rc_call *c, rc_tensor *v, PyObject *obj, const char *name, const char *what) {
    if (rc_import_array(c, v, obj, name, 0) != 0 || rc_expect_dtype(v, RC_I64, name) ||
        rc_expect_ndim(v, 1, name, what))
        return -1;
    if (v->device_type != c->device_type || v->device_id != c->device_id) {
        PyErr_Format(PyExc_ValueError, "%s: expected an array on out's device (%s:%d)", name,
                     c->device_type == RC_DEVICE_CUDA ? "cuda" : "cpu", c->device_id);
        return -1;
    }
    return 0;
}

/* ids (it sets the call's device), offsets and scratch there, then out, imported last: no array of
 * the call shares a byte with it. */
static int import_decode(rc_call *c, rc_decode_lossless_args *a, PyObject *const *arg) {
    rc_tensor out, ids, offsets, scratch;
    if (rc_import_array(c, &ids, arg[D_IDS], "ids", 0) != 0 || rc_expect_dtype(&ids, RC_I64, "ids") ||
        rc_expect_ndim(&ids, 1, "ids", "[M]") || import_index(c, &offsets, arg[D_OFFSETS], "offsets", "[N+1]"))
        return -1;
    a->count = ids.shape[0];
    if (offsets.shape[0] < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets: expected [N+1] with N >= 0, got an empty array");
        return -1;
    }
    a->ids = (const int64_t *)ids.data;
    a->ids_stride = ids.strides[0];
    a->offsets = (const int64_t *)offsets.data;
    a->offsets_stride = offsets.strides[0];
    a->frames = offsets.shape[0] - 1;
    if (!rc_is_none(arg[D_SCRATCH])) {
        if (c->device_type != RC_DEVICE_CUDA) {
            PyErr_SetString(PyExc_ValueError, "scratch: only for CUDA calls (the CPU decodes from data itself)");
            return -1;
        }
        if (rc_import_array(c, &scratch, arg[D_SCRATCH], "scratch", 1) != 0 ||
            expect_rows(&scratch, "scratch", a->count, -1, "device bytes for each sampled frame"))
            return -1;
        a->scratch = (uint8_t *)scratch.data;
        a->scratch_bytes = scratch.shape[1];
    }
    if (rc_import_array(c, &out, arg[D_OUT], "out", 1) != 0 ||
        expect_rows(&out, "out", a->count, i420_bytes(a->height, a->width), "one I420 frame per id") ||
        rc_expect_no_alias(c, "out"))
        return -1;
    a->out = (uint8_t *)out.data;
    return 0;
}

/* data, in a call of its own (pinned host memory read by a CUDA call is allowed): bytes, contiguous,
 * not overlapping out, and where the kernel can read it. */
static int import_data(rc_call *dc, const rc_call *c, rc_decode_lossless_args *a, PyObject *obj) {
    rc_tensor d;
    if (rc_import_array(dc, &d, obj, "data", 0) != 0 || rc_expect_dtype(&d, RC_U8, "data") ||
        rc_expect_ndim(&d, 1, "data", "[S] bytes"))
        return -1;
    if (d.shape[0] > 1 && d.strides[0] != 1) {
        PyErr_SetString(PyExc_ValueError, "data: expected contiguous bytes");
        return -1;
    }
    const rc_import *di = &dc->imports[dc->n_imports - 1], *oi = &c->imports[c->n_imports - 1]; /* out */
    if (di->lo < oi->hi && oi->lo < di->hi) {
        PyErr_SetString(PyExc_ValueError, "out overlaps the memory of data (pass a separate array)");
        return -1;
    }
    a->data = (const uint8_t *)d.data;
    a->data_bytes = d.shape[0];
    const int on_cuda = c->device_type == RC_DEVICE_CUDA;
    if (d.device_type == RC_DEVICE_CUDA && (!on_cuda || d.device_id != c->device_id)) {
        PyErr_Format(PyExc_ValueError, "data is on cuda:%d but out is on %s:%d", d.device_id, on_cuda ? "cuda" : "cpu",
                     c->device_id);
        return -1;
    }
    if (!on_cuda || d.device_type == RC_DEVICE_CUDA || a->count == 0) return 0;
    /* host data on a CUDA call: pinned, read through its device alias into scratch */
    if (!a->scratch) {
        PyErr_SetString(PyExc_ValueError, "scratch: needed when data is host memory and out is on a GPU (device "
                        "bytes [M, largest frame] the sampled frames are copied to)");
        return -1;
    }
    int kind = 0, where = -1;
    void *alias = NULL;
    if (rc_require_cuda(c->st, "out", c->device_id) != 0) return -1;
    rc_status status = RC_CUDA_LAUNCH(rc_pointer_kind_cuda(&kind, &where, &alias, d.data));
    if (status != RC_OK) {
        rc_raise_status(c->st, status);
        return -1;
    }
    if (kind != 1 || !alias) {
        PyErr_Format(PyExc_ValueError, "data is %s host memory; pin it (robocache.frames.pinned.pin) or move it to "
                     "cuda:%d: the GPU copies the sampled frames over the bus", kind == 0 ? "pageable" : "unmapped",
                     c->device_id);
        return -1;
    }
    a->data = (const uint8_t *)alias;
    a->data_on_host = 1;
    return 0;
}

static PyObject *decode_lossless(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const int required[] = {D_OUT, D_DATA, D_OFFSETS, D_IDS, D_HEIGHT, D_WIDTH};
    static const rc_signature sig = {"decode_lossless", "out, data, offsets, ids", 4, required, 6};
    rc_state *st = rc_get_state(module);
    PyObject *arg[D_COUNT];
    rc_decode_lossless_args a;
    memset(&a, 0, sizeof a);
    if (rc_parse_slots(arg, rc_op_names(st, RC_OP_LOSSLESS) + E_COUNT, D_COUNT, &sig, args, nargs, kwnames) != 0 ||
        rc_parse_int_range(&a.height, arg[D_HEIGHT], "height", 1, MAX_SIDE) ||
        rc_parse_int_range(&a.width, arg[D_WIDTH], "width", 1, MAX_SIDE))
        return NULL;
    rc_call call, dcall; /* data has a call of its own: it may be pinned host memory */
    rc_call_init(&call, st, arg[D_STREAM]);
    rc_call_init(&dcall, st, arg[D_STREAM]);
    PyObject *result = NULL;
    if (import_decode(&call, &a, arg) == 0 && import_data(&dcall, &call, &a, arg[D_DATA]) == 0 &&
        rc_run(&call, &decode_kernels, &a, a.count > 0) == 0) {
        result = arg[D_OUT];
        Py_INCREF(result);
    }
    rc_call_release(&dcall);
    rc_call_release(&call);
    return result;
}

static PyObject *lossless_bound(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    int64_t h, w, band;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "lossless_bound(height, width, band=None)");
        return NULL;
    }
    if (rc_parse_int_range(&h, args[0], "height", 1, MAX_SIDE) || rc_parse_int_range(&w, args[1], "width", 1, MAX_SIDE) ||
        parse_band(&band, nargs == 3 ? args[2] : NULL, h, w) != 0)
        return NULL;
    return PyLong_FromLongLong(rc_lossless_bound(h, w, band));
}

static PyMethodDef methods[] = {
    {"encode_lossless", (PyCFunction)(void (*)(void))encode_lossless, METH_FASTCALL | METH_KEYWORDS,
     encode_lossless_doc},
    {"decode_lossless", (PyCFunction)(void (*)(void))decode_lossless, METH_FASTCALL | METH_KEYWORDS,
     decode_lossless_doc},
    {"lossless_bound", (PyCFunction)(void (*)(void))lossless_bound, METH_FASTCALL, lossless_bound_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_lossless_op = {RC_OP_LOSSLESS, methods, names, E_COUNT + D_COUNT};
