/* py_resample.c: robocache.resample: argument parsing, validation, output allocation and
 * dispatch to rc_resample_cpu / rc_resample_cuda.
 * Shapes (elements): dense values [B,S,...] times [B,S] new_times [B,T] (or unbatched [S,...],
 * [S], [T]); ragged values [N,...] times [N] offsets [E+1] index [B] new_times [B,T].
 * Benchmark: python benchmarks/bench_resample.py
 */
#include <math.h>
#include <string.h>

#include "module.h"

const char rc_resample_doc_text[] =
"resample(values, times, new_times, *, mode='linear', offsets=None, index=None, lengths=None,\n"
"         out=None, return_mask=False, tolerance=1e-4, check=None, stream=None)\n"
"--\n"
"\n"
"Value of timestamped signals at new times, on the inputs' device.\n"
"\n"
"Parameters\n"
"----------\n"
"values : array [B,S,...] (dense), [S,...] (one row) or [N,...] (ragged)\n"
"    Any DLPack array (torch, numpy, cupy). Trailing dims are features.\n"
"times : array [B,S], [S] or [N]\n"
"    float64 / float32 seconds or int64 nanoseconds, non-decreasing per row.\n"
"new_times : array [B,T] or [T]\n"
"    Target times, same dtype as times.\n"
"mode : {'linear', 'nearest', 'previous', 'next', 'slerp'}\n"
"    'slerp' takes unit quaternions (x, y, z, w) in a last dim of 4.\n"
"offsets, index : int64 arrays [E+1] and [B], optional\n"
"    Ragged form: episode e is samples [offsets[e], offsets[e+1]); row b reads episode index[b].\n"
"lengths : int64 array [B], optional\n"
"    Dense form: row b has only its first lengths[b] samples.\n"
"out : array [B,T,...], optional\n"
"    C-contiguous, dtype of values; written in place and returned.\n"
"return_mask : bool\n"
"    Also return is_pad [B,T]: target outside the row's span by more than tolerance.\n"
"tolerance : float\n"
"    Seconds (scaled to ns for int64 times).\n"
"check : bool or None\n"
"    GPU only: also validate content (sorted finite times, offsets, index, lengths), at\n"
"    the cost of a host sync. CPU inputs are always validated.\n"
"stream : int or stream object, optional\n"
"    CUDA stream to run on; default: the framework's current stream.\n"
"\n"
"Returns\n"
"-------\n"
"out, or (out, is_pad) with return_mask=True. See docs/resample.md for exact semantics.\n";

enum { A_VALUES, A_TIMES, A_NEW_TIMES, A_MODE, A_OFFSETS, A_INDEX, A_LENGTHS, A_OUT,
       A_RETURN_MASK, A_TOLERANCE, A_CHECK, A_STREAM, A_COUNT };

/* Maps fastcall arguments to slots; keywords are compared by pointer (interned) first. */
static int parse_args(rc_state *st, PyObject **slot, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
    PyObject *const names[A_COUNT] = {st->kw_values, st->kw_times, st->kw_new_times,
                                      st->kw_mode, st->kw_offsets, st->kw_index,
                                      st->kw_lengths, st->kw_out, st->kw_return_mask,
                                      st->kw_tolerance, st->kw_check, st->kw_stream};
    for (int i = 0; i < A_COUNT; i++) slot[i] = NULL;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError,
                     "resample() takes 3 positional arguments (values, times, new_times) but %zd "
                     "were given",
                     nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) slot[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < A_COUNT && found < 0; i++)
            if (key == names[i]) found = i;
        for (int i = 0; i < A_COUNT && found < 0; i++)
            if (PyUnicode_Compare(key, names[i]) == 0) found = i;
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "resample() got an unexpected keyword argument '%U'",
                         key);
            return -1;
        }
        if (slot[found]) {
            PyErr_Format(PyExc_TypeError, "resample() got multiple values for argument '%U'",
                         key);
            return -1;
        }
        slot[found] = args[nargs + k];
    }
    for (int i = 0; i < 3; i++)
        if (!slot[i]) {
            PyErr_Format(PyExc_TypeError, "resample() missing required argument '%U'", names[i]);
            return -1;
        }
    return 0;
}

static int parse_mode(rc_state *st, rc_mode *mode, PyObject *obj) {
    *mode = RC_LINEAR;
    if (!obj) return 0;
    for (int m = 0; m < 5; m++)
        if (obj == st->mode_names[m]) { *mode = (rc_mode)m; return 0; }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "mode: expected a str such as 'linear', got %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    for (int m = 0; m < 5; m++)
        if (PyUnicode_Compare(obj, st->mode_names[m]) == 0) { *mode = (rc_mode)m; return 0; }
    PyErr_Format(PyExc_ValueError,
                 "mode: expected 'linear', 'nearest', 'previous', 'next' or 'slerp', got %R", obj);
    return -1;
}

/* optional bool-ish argument: None -> dflt */
static int parse_flag(int *flag, PyObject *obj, int dflt) {
    if (!obj || obj == Py_None) { *flag = dflt; return 0; }
    int v = PyObject_IsTrue(obj);
    if (v < 0) return -1;
    *flag = v;
    return 0;
}

static int is_none(PyObject *o) { return !o || o == Py_None; }

static const char *dims_str(char *buf, size_t n, const rc_tensor *v) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < v->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)v->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static int expect_ndim(const rc_tensor *v, int ndim, const char *name, const char *what) {
    if (v->ndim == ndim) return 0;
    char s[128];
    PyErr_Format(PyExc_ValueError, "%s: expected %s, got shape %s", name, what,
                 dims_str(s, sizeof s, v));
    return -1;
}

static int expect_dtype(const rc_tensor *v, rc_dtype dt, const char *name) {
    if (v->dtype == dt) return 0;
    PyErr_Format(PyExc_TypeError, "%s: expected dtype %s, got %s", name, rc_dtype_name(dt),
                 rc_dtype_name(v->dtype));
    return -1;
}

/* Flattens dims [first, ndim) of v into one strided dim; 0 if they do not form one. */
static int flatten_trailing(int64_t *count, int64_t *stride, const rc_tensor *v, int first) {
    *count = 1;
    *stride = 1;
    int64_t inner_stride = 0, inner_extent = 0; /* last kept dim: stride, shape */
    int have = 0;
    for (int d = v->ndim - 1; d >= first; d--) *count *= v->shape[d];
    if (*count == 0) return 1;
    for (int d = v->ndim - 1; d >= first; d--) {
        if (v->shape[d] == 1) continue;
        if (!have) {
            inner_stride = v->strides[d];
            inner_extent = v->shape[d];
            *stride = inner_stride;
            have = 1;
        } else {
            if (v->strides[d] != inner_stride * inner_extent) return 0;
            inner_extent *= v->shape[d];
        }
    }
    return 1;
}

static PyObject *content_error(const rc_check_result *r, const rc_resample_args *a,
                               int ragged) {
    char where[96];
    if (ragged)
        snprintf(where, sizeof where, "episode %lld (output row %lld)",
                 (long long)(r->kind <= RC_CHECK_TIMES_NONFINITE && a->index
                                 ? a->index[r->row * a->index_stride] : r->row),
                 (long long)r->row);
    else
        snprintf(where, sizeof where, "row %lld", (long long)r->row);
    switch (r->kind) {
    case RC_CHECK_TIMES_UNSORTED:
        PyErr_Format(PyExc_ValueError,
                     "times must be non-decreasing per row: %s decreases at sample %lld", where,
                     (long long)r->i);
        break;
    case RC_CHECK_TIMES_NONFINITE:
        PyErr_Format(PyExc_ValueError, "times must be finite: %s has NaN/inf at sample %lld",
                     where, (long long)r->i);
        break;
    case RC_CHECK_OFFSETS:
        PyErr_Format(PyExc_ValueError,
                     "offsets must start at 0, never decrease and end at N=%lld (len(times)); "
                     "bad at position %lld",
                     (long long)a->samples, (long long)r->row);
        break;
    case RC_CHECK_INDEX:
        PyErr_Format(PyExc_ValueError, "index[%lld] is outside [0, %lld) (episodes)",
                     (long long)r->row, (long long)a->episodes);
        break;
    default:
        PyErr_Format(PyExc_ValueError, "lengths[%lld] is outside [0, %lld] (samples per row)",
                     (long long)r->row, (long long)a->samples);
        break;
    }
    return NULL;
}

PyObject *rc_py_resample(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    PyObject *a_[A_COUNT];
    if (parse_args(st, a_, args, nargs, kwnames) != 0) return NULL;

    rc_mode mode;
    int return_mask, check;
    double tolerance = 1e-4;
    if (parse_mode(st, &mode, a_[A_MODE]) != 0) return NULL;
    if (parse_flag(&return_mask, a_[A_RETURN_MASK], 0) != 0) return NULL;
    if (!is_none(a_[A_TOLERANCE])) {
        tolerance = PyFloat_AsDouble(a_[A_TOLERANCE]);
        if (tolerance == -1.0 && PyErr_Occurred()) return NULL;
        if (!(tolerance >= 0.0)) {
            PyErr_Format(PyExc_ValueError, "tolerance: expected a number >= 0, got %R",
                         a_[A_TOLERANCE]);
            return NULL;
        }
    }
    const int ragged = !is_none(a_[A_OFFSETS]) || !is_none(a_[A_INDEX]);
    if (ragged && (is_none(a_[A_OFFSETS]) || is_none(a_[A_INDEX]))) {
        PyErr_SetString(PyExc_ValueError,
                        "offsets and index: the ragged form needs both (offsets [E+1] and "
                        "index [B])");
        return NULL;
    }
    if (ragged && !is_none(a_[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError,
                        "lengths: only for the dense form; ragged episodes are delimited by "
                        "offsets");
        return NULL;
    }

    rc_call call;
    rc_call_init(&call, st, a_[A_STREAM]);
    rc_tensor values, times, new_times, offsets, index, lengths, out, mask;
    PyObject *out_obj = NULL, *mask_obj = NULL, *result = NULL;
    rc_resample_args ra;
    memset(&ra, 0, sizeof ra);

    if (rc_import_array(&call, &values, a_[A_VALUES], "values", 0) != 0) goto fail;
    if (rc_import_array(&call, &times, a_[A_TIMES], "times", 0) != 0) goto fail;
    if (rc_import_array(&call, &new_times, a_[A_NEW_TIMES], "new_times", 0) != 0) goto fail;

    /* ---- shapes: which form, B, S/N, T, and where the feature dims start ---- */
    int lead; /* dims of values before the features */
    int unbatched = 0;
    if (times.dtype != RC_F64 && times.dtype != RC_F32 && times.dtype != RC_I64) {
        PyErr_Format(PyExc_TypeError,
                     "times: expected float64 or float32 seconds, or int64 nanoseconds; got %s",
                     rc_dtype_name(times.dtype));
        goto fail;
    }
    if (new_times.dtype != times.dtype) {
        PyErr_Format(PyExc_TypeError, "new_times: expected the dtype of times (%s), got %s",
                     rc_dtype_name(times.dtype), rc_dtype_name(new_times.dtype));
        goto fail;
    }
    if (ragged) {
        if (rc_import_array(&call, &offsets, a_[A_OFFSETS], "offsets", 0) != 0) goto fail;
        if (rc_import_array(&call, &index, a_[A_INDEX], "index", 0) != 0) goto fail;
        if (expect_dtype(&offsets, RC_I64, "offsets") || expect_dtype(&index, RC_I64, "index"))
            goto fail;
        if (expect_ndim(&times, 1, "times", "[N] for the ragged form") ||
            expect_ndim(&offsets, 1, "offsets", "[E+1]") ||
            expect_ndim(&index, 1, "index", "[B]") ||
            expect_ndim(&new_times, 2, "new_times", "[B, T]"))
            goto fail;
        if (offsets.shape[0] < 1) {
            PyErr_SetString(PyExc_ValueError, "offsets: expected [E+1] with at least one entry");
            goto fail;
        }
        ra.batch = index.shape[0];
        ra.samples = times.shape[0];
        ra.episodes = offsets.shape[0] - 1;
        ra.offsets = (const int64_t *)offsets.data;
        ra.offsets_stride = offsets.strides[0];
        ra.index = (const int64_t *)index.data;
        ra.index_stride = index.strides[0];
        ra.times_stride_s = times.strides[0];
        lead = 1;
    } else if (times.ndim == 2) {
        ra.batch = times.shape[0];
        ra.samples = times.shape[1];
        ra.times_stride_b = times.strides[0];
        ra.times_stride_s = times.strides[1];
        if (expect_ndim(&new_times, 2, "new_times", "[B, T] (times is [B, S])")) goto fail;
        lead = 2;
    } else if (times.ndim == 1) {
        unbatched = 1;
        ra.batch = 1;
        ra.samples = times.shape[0];
        ra.times_stride_s = times.strides[0];
        if (expect_ndim(&new_times, 1, "new_times", "[T] (times is [S])")) goto fail;
        if (!is_none(a_[A_LENGTHS])) {
            PyErr_SetString(PyExc_ValueError, "lengths: needs batched times [B, S]");
            goto fail;
        }
        lead = 1;
    } else {
        char s[128];
        PyErr_Format(PyExc_ValueError, "times: expected [B, S], [S] or ragged [N]; got shape %s",
                     dims_str(s, sizeof s, &times));
        goto fail;
    }
    if (values.ndim < lead) {
        char s[128];
        PyErr_Format(PyExc_ValueError, "values: expected at least %d dims, got shape %s", lead,
                     dims_str(s, sizeof s, &values));
        goto fail;
    }
    for (int d = 0; d < lead; d++)
        if (values.shape[d] != times.shape[d]) {
            char s1[128], s2[128];
            PyErr_Format(PyExc_ValueError,
                         "values: shape %s does not start with the shape of times %s",
                         dims_str(s1, sizeof s1, &values), dims_str(s2, sizeof s2, &times));
            goto fail;
        }
    if (!unbatched && new_times.shape[0] != ra.batch) {
        PyErr_Format(PyExc_ValueError, "new_times: expected %lld rows (%s), got %lld",
                     (long long)ra.batch, ragged ? "len(index)" : "batch of times",
                     (long long)new_times.shape[0]);
        goto fail;
    }
    ra.targets = new_times.shape[new_times.ndim - 1];
    ra.new_times_stride_t = new_times.strides[new_times.ndim - 1];
    ra.new_times_stride_b = unbatched ? 0 : new_times.strides[0];

    if (!is_none(a_[A_LENGTHS])) {
        if (rc_import_array(&call, &lengths, a_[A_LENGTHS], "lengths", 0) != 0) goto fail;
        if (expect_dtype(&lengths, RC_I64, "lengths") ||
            expect_ndim(&lengths, 1, "lengths", "[B]"))
            goto fail;
        if (lengths.shape[0] != ra.batch) {
            PyErr_Format(PyExc_ValueError, "lengths: expected [%lld], got [%lld]",
                         (long long)ra.batch, (long long)lengths.shape[0]);
            goto fail;
        }
        ra.lengths = (const int64_t *)lengths.data;
        ra.lengths_stride = lengths.strides[0];
    }

    /* ---- values: dtype vs mode, features ---- */
    if ((mode == RC_LINEAR || mode == RC_SLERP) && !rc_dtype_is_float(values.dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "values: mode '%U' needs a floating dtype, got %s (use 'nearest', "
                     "'previous' or 'next' for integer and bool streams)",
                     st->mode_names[mode], rc_dtype_name(values.dtype));
        goto fail;
    }
    if (mode == RC_SLERP && (values.ndim == lead || values.shape[values.ndim - 1] != 4)) {
        char s[128];
        PyErr_Format(PyExc_ValueError,
                     "values: mode 'slerp' needs quaternions (x, y, z, w) in a last dim of 4, got "
                     "shape %s",
                     dims_str(s, sizeof s, &values));
        goto fail;
    }
    if (!flatten_trailing(&ra.features, &ra.values_stride_d, &values, lead)) {
        /* e.g. a permuted image [S,W,H,C]: copy once through its own framework */
        if (rc_import_contiguous(&call, &values, a_[A_VALUES], "values") != 0) goto fail;
        flatten_trailing(&ra.features, &ra.values_stride_d, &values, lead);
    }
    ra.values = values.data;
    ra.values_dtype = values.dtype;
    ra.values_stride_s = values.strides[lead - 1];
    ra.values_stride_b = (lead == 2) ? values.strides[0] : 0;
    ra.times = times.data;
    ra.times_dtype = times.dtype;
    ra.new_times = new_times.data;
    ra.mode = mode;
    ra.tolerance = times.dtype == RC_I64 ? tolerance * 1e9 : tolerance;

    /* ---- outputs ---- */
    int64_t out_shape[RC_MAX_DIMS + 1];
    int out_ndim = 0;
    if (!unbatched) out_shape[out_ndim++] = ra.batch;
    out_shape[out_ndim++] = ra.targets;
    for (int d = lead; d < values.ndim; d++) out_shape[out_ndim++] = values.shape[d];
    if (out_ndim > RC_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "values: too many dims for the output (max %d)",
                     RC_MAX_DIMS);
        goto fail;
    }
    if (!is_none(a_[A_OUT])) {
        if (rc_import_array(&call, &out, a_[A_OUT], "out", 1) != 0) goto fail;
        if (expect_dtype(&out, values.dtype, "out")) goto fail;
        int same = out.ndim == out_ndim;
        for (int d = 0; same && d < out_ndim; d++) same = out.shape[d] == out_shape[d];
        if (!same) {
            char s[128];
            rc_tensor want = out;
            want.ndim = out_ndim;
            memcpy(want.shape, out_shape, sizeof(int64_t) * (size_t)out_ndim);
            char s2[128];
            PyErr_Format(PyExc_ValueError, "out: expected shape %s, got %s",
                         dims_str(s2, sizeof s2, &want), dims_str(s, sizeof s, &out));
            goto fail;
        }
        if (!rc_is_contiguous(&out)) {
            PyErr_SetString(PyExc_ValueError, "out: must be C-contiguous");
            goto fail;
        }
        out_obj = a_[A_OUT];
        Py_INCREF(out_obj);
    } else if (rc_alloc_array(&call, &out_obj, &out, a_[A_VALUES], out_ndim, out_shape,
                              values.dtype) != 0) {
        goto fail;
    }
    ra.out = out.data;
    if (return_mask) {
        /* is_pad has the leading [B, T] (or [T]) of out */
        if (rc_alloc_array(&call, &mask_obj, &mask, a_[A_VALUES], unbatched ? 1 : 2, out_shape,
                           RC_BOOL) != 0)
            goto fail;
        ra.is_pad = (uint8_t *)mask.data;
    }

    /* ---- content check and dispatch ---- */
    /* content is always checked on the CPU (cheap next to the work); on the GPU only when
     * asked, since reading the verdict back is a host sync */
    const int on_cuda = call.device_type == RC_DEVICE_CUDA;
    if (parse_flag(&check, a_[A_CHECK], 0) != 0) goto fail;
    check = check || !on_cuda;
    rc_status status = RC_OK;
    rc_check_result verdict = {0, 0, 0};
    if (!on_cuda) {
        if (check) {
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_check_cpu(&verdict, &ra);
            Py_END_ALLOW_THREADS
            if (status != RC_OK) { rc_raise_status(st, status); goto fail; }
            if (verdict.kind != RC_CHECK_OK) { content_error(&verdict, &ra, ragged); goto fail; }
        }
        if (ra.batch * ra.targets > 0) {
            int nt = st->num_threads;
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_cpu(&ra, nt);
            Py_END_ALLOW_THREADS
        }
    } else {
#ifdef RC_WITH_CUDA
        void *stream;
        if (rc_call_stream(&call, &stream) != 0) goto fail;
        if (check) {
            PyObject *scratch_obj = NULL;
            rc_tensor scratch;
            int64_t three = 3;
            if (rc_alloc_array(&call, &scratch_obj, &scratch, a_[A_VALUES], 1, &three,
                               RC_I64) != 0)
                goto fail;
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_check_cuda(&verdict, (int64_t *)scratch.data, &ra,
                                            call.device_id, stream);
            Py_END_ALLOW_THREADS
            Py_DECREF(scratch_obj);
            if (status != RC_OK) { rc_raise_status(st, status); goto fail; }
            if (verdict.kind != RC_CHECK_OK) {
                /* index values live on the device: report the row only */
                rc_resample_args no_index = ra;
                no_index.index = NULL;
                content_error(&verdict, &no_index, ragged);
                goto fail;
            }
        }
        if (ra.batch * ra.targets > 0) {
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_cuda(&ra, call.device_id, stream);
            Py_END_ALLOW_THREADS
        }
#else
        PyErr_Format(st->CudaError,
                     "values is on cuda:%d but this robocache was built without CUDA; reinstall "
                     "with nvcc on PATH (or CUDA_HOME set, or ROBOCACHE_CUDA=1)",
                     call.device_id);
        goto fail;
#endif
    }
    if (status != RC_OK) { rc_raise_status(st, status); goto fail; }

    rc_call_release(&call);
    if (return_mask) {
        result = PyTuple_Pack(2, out_obj, mask_obj);
        Py_DECREF(out_obj);
        Py_DECREF(mask_obj);
        return result;
    }
    return out_obj;

fail:
    rc_call_release(&call);
    Py_XDECREF(out_obj);
    Py_XDECREF(mask_obj);
    return NULL;
}
