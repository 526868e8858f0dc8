/* dlpack_bridge.c: the only file that touches DLPack capsules and the DLPack C exchange API.
 *
 * Imports any producer's array as an rc_tensor view (elements, strides in elements), in one of
 * two ways: the exchange API of the argument's type (torch >= 2.10: ~0.1 us per tensor, no
 * capsule, stream from current_work_stream), or `__dlpack__(stream=..., max_version=(1, 0))`
 * with the spec's consumer duties (rename to used_*, call the deleter exactly once, check the
 * major version). Outputs are allocated by the framework of an input (no allocator here).
 */
#include <string.h>

#include "module.h"

/* ---- dtypes and devices ------------------------------------------------------------------ */

static int dtype_from_dl(rc_dtype *out, DLDataType t) {
    switch (t.code) {
    case kDLFloat:
        if (t.bits == 32) { *out = RC_F32; return 0; }
        if (t.bits == 64) { *out = RC_F64; return 0; }
        if (t.bits == 16) { *out = RC_F16; return 0; }
        return -1;
    case kDLBfloat:
        if (t.bits == 16) { *out = RC_BF16; return 0; }
        return -1;
    case kDLInt:
    case kDLUInt: {
        int base = t.code == kDLInt ? RC_I8 : RC_U8;
        switch (t.bits) {
        case 8: *out = (rc_dtype)(base + 0); return 0;
        case 16: *out = (rc_dtype)(base + 1); return 0;
        case 32: *out = (rc_dtype)(base + 2); return 0;
        case 64: *out = (rc_dtype)(base + 3); return 0;
        }
        return -1;
    }
    case kDLBool:
        if (t.bits == 8) { *out = RC_BOOL; return 0; }
        return -1;
    }
    return -1;
}

static DLDataType dtype_to_dl(rc_dtype dt) {
    DLDataType t;
    t.lanes = 1;
    t.bits = (uint8_t)(8 * rc_dtype_size(dt));
    if (dt == RC_BF16) t.code = kDLBfloat;
    else if (rc_dtype_is_float(dt)) t.code = kDLFloat;
    else if (dt == RC_BOOL) t.code = kDLBool;
    else if (dt >= RC_U8) t.code = kDLUInt;
    else t.code = kDLInt;
    return t;
}

static const char *device_kind(int device_type) {
    return device_type == RC_DEVICE_CUDA ? "cuda" : "cpu";
}

int rc_is_contiguous(const rc_tensor *v) {
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] == 0) return 1; /* empty: any strides will do (numpy reports 0s) */
    int64_t expect = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != expect) return 0;
        expect *= v->shape[d];
    }
    return 1;
}

/* Bytes [lo, hi) a view can reach. */
typedef struct {
    uintptr_t lo, hi;
} rc_span;

/* Fills *v from a DLTensor (copying shape/strides: the producer's arrays may not outlive it) and
 * *span with the bytes it reaches. Whatever the producer wrote, nothing here overflows, and a
 * view that passes cannot make a kernel's index arithmetic overflow either: the element count
 * and every stride walk fit in int64 bytes, and the reachable range fits in the address space.
 * (Whether that memory exists is the producer's promise; robocache cannot check it.) */
static int view_from_dl(rc_tensor *v, rc_span *span, const DLTensor *dl, const char *name) {
    if (dl->ndim < 0) {
        PyErr_Format(PyExc_BufferError, "%s: the DLPack tensor has ndim %d", name, (int)dl->ndim);
        return -1;
    }
    if (dl->ndim > RC_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: %d dimensions; robocache handles at most %d", name,
                     (int)dl->ndim, RC_MAX_DIMS);
        return -1;
    }
    if (dl->ndim > 0 && !dl->shape) {
        PyErr_Format(PyExc_BufferError, "%s: the DLPack tensor has %d dims but no shape array",
                     name, (int)dl->ndim);
        return -1;
    }
    if (dl->dtype.lanes != 1) {
        PyErr_Format(PyExc_BufferError, "%s: vector dtypes (lanes=%d) are not supported", name,
                     (int)dl->dtype.lanes);
        return -1;
    }
    if (dtype_from_dl(&v->dtype, dl->dtype) != 0) {
        PyErr_Format(PyExc_TypeError,
                     "%s: unsupported dtype (DLPack type code %d, %d bits); expected a float, "
                     "integer or bool dtype",
                     name, (int)dl->dtype.code, (int)dl->dtype.bits);
        return -1;
    }
    switch ((int)dl->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: /* pinned host memory: the CPU kernels read it directly */
        v->device_type = RC_DEVICE_CPU;
        v->device_id = 0;
        break;
    case kDLCUDA:
    case kDLCUDAManaged:
        v->device_type = RC_DEVICE_CUDA;
        v->device_id = dl->device.device_id;
        break;
    default:
        PyErr_Format(PyExc_BufferError,
                     "%s: arrays on DLPack device type %d are not supported (CPU and CUDA only)",
                     name, (int)dl->device.device_type);
        return -1;
    }
    v->ndim = dl->ndim;
    int empty = 0;
    for (int d = 0; d < dl->ndim; d++) {
        if (dl->shape[d] < 0) {
            PyErr_Format(PyExc_BufferError, "%s: the DLPack shape has a negative size %lld (dim %d)",
                         name, (long long)dl->shape[d], d);
            return -1;
        }
        empty |= dl->shape[d] == 0;
        v->shape[d] = dl->shape[d];
    }
    const int64_t es = rc_dtype_size(v->dtype);
    int64_t count = 1, lo = 0, hi = 0; /* elements; offsets of the lowest/highest element */
    int bad = 0;
    for (int d = 0; d < dl->ndim && !empty; d++)
        bad |= __builtin_mul_overflow(count, dl->shape[d], &count);
    if (bad || (!empty && count > INT64_MAX / es)) {
        char s[160];
        PyErr_Format(PyExc_ValueError, "%s: shape %s has more elements than robocache can index",
                     name, rc_dims_str(s, sizeof s, v->ndim, v->shape));
        return -1;
    }
    int64_t expect = 1;
    for (int d = dl->ndim - 1; d >= 0; d--) {
        v->strides[d] = dl->strides ? dl->strides[d] : expect;
        if (!empty) expect *= dl->shape[d]; /* <= count: no overflow */
        if (empty || dl->shape[d] < 2) continue;
        int64_t walk; /* (n - 1) * stride elements */
        if (__builtin_mul_overflow(dl->shape[d] - 1, v->strides[d], &walk) ||
            __builtin_add_overflow(walk > 0 ? hi : lo, walk, walk > 0 ? &hi : &lo))
            bad = 1;
    }
    /* hi - lo + 1 elements of es bytes each must fit int64 */
    int64_t reach;
    if (!bad && !empty)
        bad = __builtin_sub_overflow(hi, lo, &reach) || reach > INT64_MAX / es - 1;
    if (bad) {
        char s1[160], s2[160];
        PyErr_Format(PyExc_ValueError,
                     "%s: strides %s with shape %s reach beyond 2^63 bytes", name,
                     rc_dims_str(s1, sizeof s1, v->ndim, v->strides),
                     rc_dims_str(s2, sizeof s2, v->ndim, v->shape));
        return -1;
    }
    if (dl->byte_offset > (uint64_t)INT64_MAX ||
        (uintptr_t)dl->data > UINTPTR_MAX - (uintptr_t)dl->byte_offset) {
        PyErr_Format(PyExc_BufferError, "%s: the DLPack byte_offset %llu is past the address space",
                     name, (unsigned long long)dl->byte_offset);
        return -1;
    }
    const uintptr_t first = (uintptr_t)dl->data + (uintptr_t)dl->byte_offset;
    span->lo = span->hi = first;
    if (!empty) {
        if (!dl->data) {
            PyErr_Format(PyExc_BufferError, "%s: the DLPack data pointer is NULL for %lld elements",
                         name, (long long)count);
            return -1;
        }
        /* the lowest and one past the highest byte stay inside the address space */
        const uintptr_t below = (uintptr_t)(-lo) * (uintptr_t)es, above = (uintptr_t)(hi + 1) * (uintptr_t)es;
        if (first < below || first - below == 0 || UINTPTR_MAX - first < above) {
            PyErr_Format(PyExc_BufferError,
                         "%s: the DLPack strides reach outside the address space from %p", name,
                         (void *)first);
            return -1;
        }
        span->lo = first - below;
        span->hi = first + above;
    }
    v->data = (void *)first;
    return 0;
}

/* 1 when the first element of a non-empty view is not aligned to its size (numpy can export
 * such arrays: np.frombuffer(..., offset=1)); the kernels load whole elements. */
static int misaligned(const rc_tensor *v, const rc_span *span) {
    return span->hi != span->lo && (uintptr_t)v->data % (uintptr_t)rc_dtype_size(v->dtype) != 0;
}

/* ---- the exchange API, looked up once per type ------------------------------------------- */

static void framework_name(char *buf, size_t n, PyTypeObject *tp);

static const rc_api_entry *type_entry(rc_state *st, PyTypeObject *tp) {
    static const rc_api_entry uncached = {NULL, NULL, 0};
    for (int i = 0; i < st->n_apis; i++)
        if (st->apis[i].type == tp) return &st->apis[i];
    const DLPackExchangeAPI *api = NULL;
    PyObject *cap = PyObject_GetAttrString((PyObject *)tp, "__dlpack_c_exchange_api__");
    if (cap && PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
        const DLPackExchangeAPIHeader *h =
            (const DLPackExchangeAPIHeader *)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
        /* walk back to a 1.x table that has every function this file calls (1.2+); a few
         * steps at most, so a table whose prev_api loops cannot hang the call */
        for (int steps = 0; h && !(h->version.major == 1 && h->version.minor >= 2); steps++)
            h = steps < 8 ? h->prev_api : NULL;
        api = (const DLPackExchangeAPI *)h;
    }
    Py_XDECREF(cap); /* the table itself lives as long as the process (spec) */
    PyErr_Clear();
    char fw[64];
    framework_name(fw, sizeof fw, tp);
    if (st->n_apis == RC_API_CACHE) { /* full: answer without remembering */
        static rc_api_entry e;
        e.type = tp;
        e.api = api;
        e.is_torch = strcmp(fw, "torch") == 0;
        return api || e.is_torch ? &e : &uncached;
    }
    rc_api_entry *e = &st->apis[st->n_apis++];
    Py_INCREF(tp);
    e->type = tp;
    e->api = api;
    e->is_torch = strcmp(fw, "torch") == 0;
    return e;
}

static const DLPackExchangeAPI *exchange_api(rc_state *st, PyTypeObject *tp) {
    return type_entry(st, tp)->api;
}

/* ---- call context ------------------------------------------------------------------------ */

void rc_call_init(rc_call *c, rc_state *st, PyObject *stream_arg) {
    memset(c, 0, sizeof *c);
    c->st = st;
    c->stream_arg = (stream_arg == Py_None) ? NULL : stream_arg;
}

static int record(rc_call *c, PyObject *obj, void *managed, int versioned, const char *name,
                  const rc_span *span) {
    if (c->n_imports == RC_MAX_IMPORTS) {
        PyErr_SetString(PyExc_RuntimeError, "robocache: too many arrays in one call");
        return -1;
    }
    rc_import *im = &c->imports[c->n_imports++];
    Py_INCREF(obj);
    im->obj = obj;
    im->managed = managed;
    im->versioned = versioned;
    im->name = name;
    im->lo = span->lo;
    im->hi = span->hi;
    return 0;
}

int rc_expect_no_alias(rc_call *c, const char *name) {
    if (c->n_imports < 1) return 0;
    const rc_import *out = &c->imports[c->n_imports - 1];
    if (out->lo == out->hi) return 0;
    for (int i = 0; i < c->n_imports - 1; i++) {
        const rc_import *in = &c->imports[i];
        if (in->lo < out->hi && out->lo < in->hi) {
            PyErr_Format(PyExc_ValueError,
                         "%s overlaps the memory of %s; robocache reads its inputs while it "
                         "writes %s, so it cannot compute in place (pass a separate array)",
                         name, in->name, name);
            return -1;
        }
    }
    return 0;
}

/* The pending exception, raised by a producer's DLPack method `what` while importing `name`,
 * becomes BufferError("<name>: <what> raised <type>: <first line>") with the original as its
 * __cause__. MemoryError and non-Exception exceptions (KeyboardInterrupt) pass unchanged. */
static void blame_producer(const char *name, const char *what) {
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value) PyException_SetTraceback(value, tb);
    PyObject *msg = value ? PyObject_Str(value) : NULL;
    const char *text = msg ? PyUnicode_AsUTF8(msg) : NULL;
    if (!text) {
        PyErr_Clear();
        text = "";
    }
    char first[304]; /* torch appends a C++ backtrace after the first line */
    size_t len = strcspn(text, "\n");
    snprintf(first, sizeof first, "%.*s%s", (int)(len < 300 ? len : 300), text,
             len > 300 ? "..." : "");
    PyErr_Format(PyExc_BufferError, "%s: %s raised %s: %s", name, what,
                 ((PyTypeObject *)type)->tp_name, first);
    Py_XDECREF(msg);
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    if (v2 && value) {
        PyException_SetContext(v2, value); /* steals one reference */
        Py_INCREF(value);
        PyException_SetCause(v2, value);   /* steals the other */
        value = NULL;
    }
    PyErr_Restore(t2, v2, tb2);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

void rc_call_release(rc_call *c) {
#ifdef RC_WITH_CUDA
    /* stream= other than the current stream: our copies and temporaries go back to the
     * framework's allocator below, which orders reuse on its current stream; make that stream
     * wait for the kernel first (no host sync) */
    if (c->joined) rc_stream_wait_cuda(c->current, c->stream, c->device_id);
    c->joined = 0;
#endif
    /* Deleters and capsule destructors may run Python code (a producer written with ctypes,
     * cffi, ...): they must not run with our pending exception set, nor lose it. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    for (int i = c->n_imports - 1; i >= 0; i--) {
        rc_import *im = &c->imports[i];
        if (im->managed && im->versioned) {
            DLManagedTensorVersioned *mt = (DLManagedTensorVersioned *)im->managed;
            if (mt->deleter) mt->deleter(mt);
        } else if (im->managed) {
            DLManagedTensor *mt = (DLManagedTensor *)im->managed;
            if (mt->deleter) mt->deleter(mt);
        }
        Py_XDECREF(im->obj);
    }
    c->n_imports = 0;
    if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL); /* a deleter must not raise */
    if (type) PyErr_Restore(type, value, tb);
}

/* Py_DECREF that keeps the pending exception: the object may be the last owner of a producer's
 * tensor whose deleter runs Python code. */
static void decref_keep_error(PyObject *o) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_DECREF(o);
    if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL);
    PyErr_Restore(type, value, tb);
}

static PyObject *fallback(rc_state *st) {
    if (!st->fallback) st->fallback = PyImport_ImportModule("robocache._fallback");
    return st->fallback; /* borrowed */
}

/* A stream object or handle given as stream=: int, .cuda_stream (torch), .ptr (cupy), or the
 * __cuda_stream__ protocol ((version, handle)). */
static int parse_stream_arg(void **stream, PyObject *arg) {
    PyObject *h = NULL;
    if (PyLong_Check(arg)) {
        h = arg;
        Py_INCREF(h);
    } else if (PyObject_HasAttrString(arg, "__cuda_stream__")) {
        PyObject *t = PyObject_CallMethod(arg, "__cuda_stream__", NULL);
        if (t && PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 2) {
            h = PyTuple_GET_ITEM(t, 1);
            Py_INCREF(h);
        }
        Py_XDECREF(t);
    } else if (PyObject_HasAttrString(arg, "cuda_stream")) {
        h = PyObject_GetAttrString(arg, "cuda_stream");
    } else if (PyObject_HasAttrString(arg, "ptr")) {
        h = PyObject_GetAttrString(arg, "ptr");
    }
    if (!h || !PyLong_Check(h)) {
        Py_XDECREF(h);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "stream: expected a CUDA stream handle (int) or a stream object "
                     "(torch.cuda.Stream, cupy Stream), got %.100s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    *stream = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    return PyErr_Occurred() ? -1 : 0;
}

/* Resolves the call's stream for CUDA device `device_id`; `obj` is the array asking (used to
 * pick the framework when it offers no exchange API). */
/* The framework's current stream on device_id (torch: through the exchange API). */
static int current_stream(rc_call *c, int device_id, PyObject *obj, void **s) {
    if (c->api && c->api->current_work_stream)
        return c->api->current_work_stream(kDLCUDA, device_id, s) != 0 ? -1 : 0;
    PyObject *fb = fallback(c->st);
    if (!fb) return -1;
    PyObject *h = PyObject_CallMethod(fb, "current_stream", "Oi", obj, device_id);
    if (!h) return -1;
    *s = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    return PyErr_Occurred() ? -1 : 0;
}

static int resolve_stream(rc_call *c, int device_id, PyObject *obj) {
    if (c->have_stream) return 0;
    void *s = NULL;
    if (c->stream_arg) {
        if (parse_stream_arg(&s, c->stream_arg) != 0) return -1;
    } else if (current_stream(c, device_id, obj, &s) != 0) {
        return -1;
    }
    c->stream = s;
    c->have_stream = 1;
    return 0;
}

int rc_call_stream(rc_call *c, void **stream) {
    PyObject *first = c->n_imports ? c->imports[0].obj : Py_None;
    if (!c->have_stream && resolve_stream(c, c->device_id, first) != 0) return -1;
#ifdef RC_WITH_CUDA
    /* Called right before the launch. With stream= other than the current stream, the
     * contiguous copies this call made (on the current stream, freed to its allocator when the
     * call returns) are ordered both ways: the kernel's stream waits for them now, the current
     * stream waits for the kernel at release. No copies: stream= is left fully independent. */
    if (c->stream_arg && c->copied && !c->joined && c->device_type == kDLCUDA) {
        void *cur = NULL;
        if (current_stream(c, c->device_id, first, &cur) != 0) return -1;
        if (cur != c->stream) {
            rc_status st = rc_stream_wait_cuda(c->stream, cur, c->device_id);
            if (st != RC_OK) { rc_raise_status(c->st, st); return -1; }
            c->current = cur;
            c->joined = 1;
        }
    }
#endif
    *stream = c->stream;
    return 0;
}

/* The framework an array type belongs to ("torch", "numpy", "cupy"): the root of its module. */
static void framework_name(char *buf, size_t n, PyTypeObject *tp) {
    const char *name = tp->tp_name, *dot = strchr(name, '.');
    PyObject *mod = NULL;
    if (!dot) { /* heap types keep their module in __module__ */
        mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
        name = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
        if (!name) {
            PyErr_Clear();
            name = tp->tp_name;
        }
        dot = strchr(name, '.');
    }
    size_t len = dot ? (size_t)(dot - name) : strlen(name);
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), name);
    Py_XDECREF(mod);
}

/* Every array of a call must come from the framework of the first one (values) and live on
 * its device. Types sharing an exchange API (torch.Tensor, nn.Parameter) are one framework. */
static int check_same(rc_call *c, const rc_tensor *v, PyObject *obj, const char *name) {
    PyTypeObject *tp = Py_TYPE(obj);
    if (c->device_type == 0) {
        c->device_type = v->device_type;
        c->device_id = v->device_id;
        c->first_name = name;
        c->first_type = tp;
        return 0;
    }
    if (tp != c->first_type) {
        const DLPackExchangeAPI *a1 = exchange_api(c->st, c->first_type);
        const DLPackExchangeAPI *a2 = exchange_api(c->st, tp);
        char f1[64], f2[64];
        framework_name(f1, sizeof f1, c->first_type);
        framework_name(f2, sizeof f2, tp);
        if ((a1 || a2) ? a1 != a2 : strcmp(f1, f2) != 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s is a %s array but %s is a %s array; pass arrays of one framework",
                         name, f2, c->first_name, f1);
            return -1;
        }
    }
    if (v->device_type != c->device_type || v->device_id != c->device_id) {
        PyErr_Format(PyExc_ValueError, "%s is on %s:%d but %s is on %s:%d", name,
                     device_kind(v->device_type), v->device_id, c->first_name,
                     device_kind(c->device_type), c->device_id);
        return -1;
    }
    return 0;
}

/* ---- import through __dlpack__ ----------------------------------------------------------- */

static int dlpack_device(int *type, int *id, PyObject *obj, const char *name) {
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!dev) {
        blame_producer(name, "__dlpack_device__()");
        return -1;
    }
    int ok = PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2 &&
             PyLong_Check(PyTuple_GET_ITEM(dev, 0)) && PyLong_Check(PyTuple_GET_ITEM(dev, 1));
    if (ok) {
        long t = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
        long i = PyLong_AsLong(PyTuple_GET_ITEM(dev, 1));
        ok = !PyErr_Occurred() && t >= 0 && t <= INT32_MAX && i >= 0 && i <= INT32_MAX;
        *type = (int)t;
        *id = (int)i;
    }
    if (!ok) {
        PyErr_Clear();
        PyErr_Format(PyExc_BufferError,
                     "%s.__dlpack_device__() returned %R, not a (device_type, device_id) pair of "
                     "ints >= 0",
                     name, dev);
    }
    Py_DECREF(dev);
    return ok ? 0 : -1;
}

/* Calls obj.__dlpack__(stream=..., max_version=(1, 0)); an older producer that rejects
 * max_version is asked again without it (it then returns a legacy capsule). */
static PyObject *call_dlpack(PyObject *obj, PyObject *stream) {
    PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
    if (!meth) return NULL;
    PyObject *kw = PyDict_New(), *args = PyTuple_New(0), *cap = NULL;
    if (!kw || !args) goto done;
    if (stream && PyDict_SetItemString(kw, "stream", stream) != 0) goto done;
    PyObject *ver = Py_BuildValue("(ii)", 1, 0);
    if (!ver || PyDict_SetItemString(kw, "max_version", ver) != 0) {
        Py_XDECREF(ver);
        goto done;
    }
    Py_DECREF(ver);
    cap = PyObject_Call(meth, args, kw);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyDict_DelItemString(kw, "max_version");
        cap = PyObject_Call(meth, args, kw);
    }
done:
    Py_XDECREF(kw);
    Py_XDECREF(args);
    Py_DECREF(meth);
    return cap;
}

/* Imports obj through obj.__dlpack__(): the spec's consumer duties (rename the capsule to
 * used_*, call the deleter exactly once, read nothing past the version unless its major is 1). */
static int import_capsule(rc_call *c, rc_tensor *view, rc_span *span, PyObject *obj,
                          const char *name, int writable) {
    int dev_type, dev_id;
    if (dlpack_device(&dev_type, &dev_id, obj, name) != 0) return -1;
    PyObject *stream = NULL;
    if (dev_type == kDLCUDA || dev_type == kDLCUDAManaged) {
        /* no stream to ask for, and no kernel to run: say so before calling the producer */
#ifndef RC_WITH_CUDA
        rc_no_cuda_error(c->st, name, dev_id);
        return -1;
#else
        int count = 0;
        if (rc_device_count_cuda(&count) != RC_OK || dev_id >= count) {
            PyErr_Format(c->st->CudaError, "%s is on cuda:%d but the CUDA runtime sees %d device%s",
                         name, dev_id, count, count == 1 ? "" : "s");
            return -1;
        }
#endif
        if (resolve_stream(c, dev_id, obj) != 0) return -1;
        /* the spec reserves 0; the legacy default stream is 1 */
        stream = c->stream ? PyLong_FromVoidPtr(c->stream) : PyLong_FromLong(1);
        if (!stream) return -1;
    } else if (dev_type != kDLCPU && dev_type != kDLCUDAHost) {
        PyErr_Format(PyExc_BufferError,
                     "%s: arrays on DLPack device type %d are not supported (CPU and CUDA only)",
                     name, dev_type);
        return -1;
    }
    PyObject *cap = call_dlpack(obj, stream);
    Py_XDECREF(stream);
    if (!cap) {
        blame_producer(name, "__dlpack__()");
        return -1;
    }

    /* Until renamed, the capsule's destructor (the producer's) still owns the managed tensor:
     * every exit before the rename leaves it to that destructor. After the rename we owe the
     * deleter: record() takes that duty, or we pay it here when record() fails. */
    int rc = -1, versioned = PyCapsule_IsValid(cap, "dltensor_versioned");
    void *managed = NULL;
    const DLTensor *dl = NULL;
    if (versioned) {
        DLManagedTensorVersioned *mt =
            (DLManagedTensorVersioned *)PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (mt->version.major != DLPACK_MAJOR_VERSION) {
            PyErr_Format(PyExc_BufferError,
                         "%s: DLPack version %u.%u is not supported (robocache reads 1.x)", name,
                         (unsigned)mt->version.major, (unsigned)mt->version.minor);
            goto done;
        }
        if (writable && (mt->flags & DLPACK_FLAG_BITMASK_READ_ONLY)) {
            PyErr_Format(PyExc_ValueError, "%s is read-only; robocache writes into it", name);
            goto done;
        }
        managed = mt;
        dl = &mt->dl_tensor;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *mt = (DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor");
        managed = mt;
        dl = &mt->dl_tensor;
    } else {
        const char *cname = PyCapsule_CheckExact(cap) ? PyCapsule_GetName(cap) : NULL;
        PyErr_Clear();
        if (PyCapsule_CheckExact(cap))
            PyErr_Format(PyExc_BufferError,
                         "%s.__dlpack__() returned a capsule named %s%s%s, not an unused "
                         "DLPack capsule (\"dltensor_versioned\" or \"dltensor\")",
                         name, cname ? "\"" : "", cname ? cname : "NULL", cname ? "\"" : "");
        else
            PyErr_Format(PyExc_BufferError,
                         "%s.__dlpack__() returned %.100s, not a DLPack capsule", name,
                         Py_TYPE(cap)->tp_name);
        goto done;
    }
    if (view_from_dl(view, span, dl, name) != 0) goto done;
    if ((int)dl->device.device_type != dev_type ||
        ((dev_type == kDLCUDA || dev_type == kDLCUDAManaged) && dl->device.device_id != dev_id)) {
        PyErr_Format(PyExc_BufferError,
                     "%s: __dlpack_device__() said (%d, %d) but __dlpack__() exported a tensor "
                     "on (%d, %d)",
                     name, dev_type, dev_id, (int)dl->device.device_type,
                     (int)dl->device.device_id);
        goto done;
    }
    if (PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") != 0)
        goto done;
    rc = record(c, obj, managed, versioned, name, span);
    if (rc != 0) { /* renamed: nobody else will call the deleter */
        if (versioned) {
            DLManagedTensorVersioned *mt = (DLManagedTensorVersioned *)managed;
            if (mt->deleter) mt->deleter(mt);
        } else {
            DLManagedTensor *mt = (DLManagedTensor *)managed;
            if (mt->deleter) mt->deleter(mt);
        }
    }
done:
    decref_keep_error(cap); /* the producer's destructor may run Python code */
    return rc;
}

enum { IMPORT_WRITABLE = 1, IMPORT_OURS = 2 };

static int import_copy(rc_call *c, rc_tensor *view, PyObject *obj, const char *name);

/* flags: IMPORT_WRITABLE (out=), IMPORT_OURS (robocache allocated or copied it: it may come
 * from _fallback's framework, numpy, rather than the caller's when that one has no allocator). */
static int import_any(rc_call *c, rc_tensor *view, PyObject *obj, const char *name, int flags) {
    const DLPackExchangeAPI *api = exchange_api(c->st, Py_TYPE(obj));
    rc_span span;
    if (api && api->dltensor_from_py_object_no_sync) {
        DLTensor dl;
        if (api->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_BufferError, "%s: the DLPack exchange API failed", name);
            blame_producer(name, "the DLPack exchange API");
            return -1;
        }
        if (view_from_dl(view, &span, &dl, name) != 0) return -1;
        if (!c->api) c->api = api;
        if (record(c, obj, NULL, 0, name, &span) != 0) return -1;
    } else if (PyObject_HasAttrString(obj, "__dlpack__")) {
        if (import_capsule(c, view, &span, obj, name, flags & IMPORT_WRITABLE) != 0) return -1;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "%s: expected an array supporting DLPack (torch, numpy, cupy, jax), got "
                     "%.100s",
                     name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (misaligned(view, &span)) {
        if ((flags & (IMPORT_WRITABLE | IMPORT_OURS)) == 0) {
            if (check_same(c, view, obj, name) != 0) return -1;
            return import_copy(c, view, obj, name); /* an aligned copy, made once */
        }
        PyErr_Format(PyExc_BufferError,
                     "%s: its data at %p is not aligned to its %d-byte elements%s", name,
                     view->data, rc_dtype_size(view->dtype),
                     (flags & IMPORT_WRITABLE) ? "; robocache writes whole elements" : "");
        return -1;
    }
    if (flags & IMPORT_OURS) /* same device, whatever the framework */
        return view->device_type == c->device_type && view->device_id == c->device_id
                   ? 0 : check_same(c, view, obj, name);
    return check_same(c, view, obj, name);
}

int rc_import_array(rc_call *c, rc_tensor *view, PyObject *obj, const char *name, int writable) {
    return import_any(c, view, obj, name, writable ? IMPORT_WRITABLE : 0);
}

/* A C-contiguous (and aligned) copy of obj made by its own framework, imported in its place. */
static int import_copy(rc_call *c, rc_tensor *view, PyObject *obj, const char *name) {
    c->copied = 1;
    PyObject *fb = fallback(c->st);
    if (!fb) return -1;
    PyObject *copy = PyObject_CallMethod(fb, "contiguous", "O", obj);
    if (!copy) return -1;
    int rc = import_any(c, view, copy, name, IMPORT_OURS);
    decref_keep_error(copy); /* the import record keeps it alive */
    return rc;
}

int rc_import_contiguous(rc_call *c, rc_tensor *view, PyObject *obj, const char *name) {
    return import_copy(c, view, obj, name);
}

/* ---- allocation --------------------------------------------------------------------------- */

typedef struct {
    int set;
    char kind[64];
    char message[256];
} alloc_error;

static void alloc_set_error(void *ctx, const char *kind, const char *message) {
    alloc_error *e = (alloc_error *)ctx;
    e->set = 1;
    snprintf(e->kind, sizeof e->kind, "%s", kind ? kind : "Error");
    snprintf(e->message, sizeof e->message, "%s", message ? message : "");
}

/* like.new_empty(shape[, dtype=...]): a plain caching-allocator tensor on like's device.
 * (A tensor made by the exchange API's allocator is wrapped through DLPack, and torch's
 * Tensor.record_stream silently skips such storage: a loader handing batches across streams
 * saw its memory reused early. new_empty costs ~1.4 us, about what that allocator did.) */
static PyObject *torch_new_empty(rc_call *c, PyObject *like, int ndim, const int64_t *shape,
                                 rc_dtype dtype, const DLPackExchangeAPI *api) {
    rc_state *st = c->st;
    if (!st->str_new_empty) {
        PyObject *torch = PyImport_ImportModule("torch");
        if (!torch) return NULL;
        for (int i = 0; i < RC_NUM_DTYPES; i++) { /* uint16..64 only since torch 2.3 */
            st->torch_dtypes[i] = PyObject_GetAttrString(torch, rc_dtype_name((rc_dtype)i));
            if (!st->torch_dtypes[i]) PyErr_Clear();
        }
        Py_DECREF(torch);
        st->kwnames_dtype = Py_BuildValue("(s)", "dtype");
        st->str_new_empty = PyUnicode_InternFromString("new_empty");
        if (!st->kwnames_dtype || !st->str_new_empty) return NULL;
    }
    /* the dtype keyword costs ~0.3 us: leave it out when like already has the dtype */
    DLTensor dl;
    rc_dtype like_dtype = RC_NUM_DTYPES;
    if (api && api->dltensor_from_py_object_no_sync &&
        api->dltensor_from_py_object_no_sync(like, &dl) == 0) {
        rc_tensor v;
        rc_span span;
        if (view_from_dl(&v, &span, &dl, "out") == 0) like_dtype = v.dtype;
    }
    PyErr_Clear();
    if (like_dtype != dtype && !st->torch_dtypes[dtype]) {
        PyErr_Format(PyExc_TypeError, "this torch has no %s dtype for the output",
                     rc_dtype_name(dtype));
        return NULL;
    }
    PyObject *shp = PyTuple_New(ndim), *res = NULL;
    if (!shp) return NULL;
    for (int d = 0; d < ndim; d++) {
        PyObject *n = PyLong_FromLongLong(shape[d]);
        if (!n) goto done;
        PyTuple_SET_ITEM(shp, d, n);
    }
    PyObject *args[3] = {like, shp, st->torch_dtypes[dtype]};
    if (like_dtype == dtype)
        res = PyObject_VectorcallMethod(st->str_new_empty, args, 2, NULL);
    else
        res = PyObject_VectorcallMethod(st->str_new_empty, args, 2, st->kwnames_dtype);
done:
    Py_DECREF(shp);
    return res;
}

int rc_alloc_array(rc_call *c, PyObject **out_obj, rc_tensor *view, PyObject *like, int ndim,
                   const int64_t *shape, rc_dtype dtype) {
    *out_obj = NULL;
    const rc_api_entry *entry = type_entry(c->st, Py_TYPE(like));
    const DLPackExchangeAPI *api = entry->api;
    if (entry->is_torch) {
        PyObject *arr = torch_new_empty(c, like, ndim, shape, dtype, api);
        if (!arr) return -1;
        if (import_any(c, view, arr, "out", IMPORT_WRITABLE | IMPORT_OURS) != 0) {
            Py_DECREF(arr);
            return -1;
        }
        *out_obj = arr;
        return 0;
    }
    if (api && api->managed_tensor_allocator && api->managed_tensor_to_py_object_no_sync) {
        DLTensor proto;
        memset(&proto, 0, sizeof proto);
        proto.device.device_type = c->device_type == RC_DEVICE_CUDA ? kDLCUDA : kDLCPU;
        proto.device.device_id = c->device_type == RC_DEVICE_CUDA ? c->device_id : 0;
        proto.ndim = ndim;
        proto.dtype = dtype_to_dl(dtype);
        proto.shape = (int64_t *)shape;
        DLManagedTensorVersioned *mt = NULL;
        alloc_error err = {0};
        if (api->managed_tensor_allocator(&proto, &mt, &err, alloc_set_error) != 0 || !mt) {
            if (!PyErr_Occurred())
                PyErr_Format(strstr(err.kind, "Memory") ? PyExc_MemoryError : PyExc_RuntimeError,
                             "could not allocate the output: %s: %s", err.kind, err.message);
            return -1;
        }
        rc_span span;
        if (view_from_dl(view, &span, &mt->dl_tensor, "out") != 0) {
            if (mt->deleter) mt->deleter(mt);
            return -1;
        }
        void *py = NULL;
        if (api->managed_tensor_to_py_object_no_sync(mt, &py) != 0) return -1;
        *out_obj = (PyObject *)py;
        return 0;
    }
    PyObject *fb = fallback(c->st);
    if (!fb) return -1;
    PyObject *shp = PyTuple_New(ndim);
    if (!shp) return -1;
    for (int d = 0; d < ndim; d++) {
        PyObject *n = PyLong_FromLongLong(shape[d]);
        if (!n) {
            Py_DECREF(shp);
            return -1;
        }
        PyTuple_SET_ITEM(shp, d, n);
    }
    PyObject *arr = PyObject_CallMethod(fb, "empty", "OOs", like, shp, rc_dtype_name(dtype));
    Py_DECREF(shp);
    if (!arr) return -1;
    if (import_any(c, view, arr, "out", IMPORT_WRITABLE | IMPORT_OURS) != 0) {
        Py_DECREF(arr);
        return -1;
    }
    *out_obj = arr;
    return 0;
}
