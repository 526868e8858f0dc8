/* args.c: argument helpers shared by the py_<op>.c files: keyword slots, flags, names among an
 * op's interned choices, shape and dtype checks (each raising the message the ops have always
 * raised), resample/fuse's content check and its errors, and the (out, extra) result.
 * Per call, not per element: nothing here shows in a benchmark.
 */
#include <string.h>

#include "module.h"

int rc_is_none(PyObject *o) { return !o || o == Py_None; }

int rc_parse_slots(PyObject **slot, PyObject *const *names, int n, const rc_signature *sig,
                   PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs > sig->max_positional) {
        int keyword_only_required = 0; /* then say how to pass them */
        for (int i = 0; i < sig->n_required; i++)
            keyword_only_required |= sig->required[i] >= sig->max_positional;
        PyErr_Format(PyExc_TypeError,
                     "%s() takes %d positional argument%s (%s) but %zd were given%s", sig->func,
                     sig->max_positional, sig->max_positional == 1 ? "" : "s", sig->positional,
                     nargs, keyword_only_required ? "; pass the others by keyword" : "");
        return -1;
    }
    for (int i = 0; i < n; i++) slot[i] = NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) slot[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < n && found < 0; i++)
            if (key == names[i]) found = i;
        for (int i = 0; i < n && found < 0; i++)
            if (PyUnicode_Compare(key, names[i]) == 0) found = i;
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         sig->func, key);
            return -1;
        }
        if (slot[found]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'",
                         sig->func, key);
            return -1;
        }
        slot[found] = args[nargs + k];
    }
    for (int i = 0; i < sig->n_required; i++)
        if (!slot[sig->required[i]]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%U'", sig->func,
                         names[sig->required[i]]);
            return -1;
        }
    return 0;
}

int rc_parse_flag(int *flag, PyObject *obj, int dflt) {
    if (rc_is_none(obj)) { *flag = dflt; return 0; }
    int v = PyObject_IsTrue(obj);
    if (v < 0) return -1;
    *flag = v;
    return 0;
}

int rc_parse_int_range(int64_t *v, PyObject *obj, const char *arg, int64_t lo, int64_t hi) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an int, got %.100s", arg,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow || x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "%s: expected an int in [%lld, %lld], got %R", arg,
                     (long long)lo, (long long)hi, obj);
        return -1;
    }
    *v = x;
    return 0;
}

int rc_name_index(PyObject *obj, PyObject *const names[5], const char *arg,
                  const char *choices) {
    for (int m = 0; m < 5; m++)
        if (obj == names[m]) return m;
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a str such as '%U', got %.100s", arg,
                     names[0], Py_TYPE(obj)->tp_name);
        return -1;
    }
    for (int m = 0; m < 5; m++)
        if (PyUnicode_Compare(obj, names[m]) == 0) return m;
    PyErr_Format(PyExc_ValueError, "%s: expected %s, got %R", arg, choices, obj);
    return -1;
}

int rc_parse_mode(rc_mode *mode, PyObject *obj, PyObject *const modes[5], const char *name) {
    int m = rc_name_index(obj, modes, name,
                          "'linear', 'nearest', 'previous', 'next' or 'slerp'");
    if (m < 0) return -1;
    *mode = (rc_mode)m;
    return 0;
}

int rc_parse_tolerance(double *tolerance, PyObject *obj) {
    *tolerance = 1e-4;
    if (rc_is_none(obj)) return 0;
    *tolerance = PyFloat_AsDouble(obj);
    if (*tolerance == -1.0 && PyErr_Occurred()) return -1;
    if (!(*tolerance >= 0.0)) {
        PyErr_Format(PyExc_ValueError, "tolerance: expected a number >= 0, got %R", obj);
        return -1;
    }
    return 0;
}

int rc_shape_error(const rc_tensor *v, const char *name, const char *what) {
    char s[128];
    PyErr_Format(PyExc_ValueError, "%s: expected %s, got shape %s", name, what,
                 rc_dims_str(s, sizeof s, v->ndim, v->shape));
    return -1;
}

int rc_expect_ndim(const rc_tensor *v, int ndim, const char *name, const char *what) {
    return v->ndim == ndim ? 0 : rc_shape_error(v, name, what);
}

int rc_expect_dtype(const rc_tensor *v, rc_dtype dt, const char *name) {
    if (v->dtype == dt) return 0;
    PyErr_Format(PyExc_TypeError, "%s: expected dtype %s, got %s", name, rc_dtype_name(dt),
                 rc_dtype_name(v->dtype));
    return -1;
}

int rc_expect_times_dtype(const rc_tensor *v, const char *name) {
    if (v->dtype == RC_F64 || v->dtype == RC_F32 || v->dtype == RC_I64) return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s: expected float64 or float32 seconds, or int64 nanoseconds; got %s", name,
                 rc_dtype_name(v->dtype));
    return -1;
}

int rc_expect_leading(const rc_tensor *v, const rc_tensor *t, int lead, const char *name,
                      const char *times_name) {
    char s1[128], s2[128];
    if (v->ndim < lead) {
        PyErr_Format(PyExc_ValueError, "%s: expected at least %d dims, got shape %s", name, lead,
                     rc_dims_str(s1, sizeof s1, v->ndim, v->shape));
        return -1;
    }
    for (int d = 0; d < lead; d++)
        if (v->shape[d] != t->shape[d]) {
            PyErr_Format(PyExc_ValueError, "%s: shape %s does not start with the shape of %s %s",
                         name, rc_dims_str(s1, sizeof s1, v->ndim, v->shape), times_name,
                         rc_dims_str(s2, sizeof s2, t->ndim, t->shape));
            return -1;
        }
    return 0;
}

int rc_expect_mode_dtype(const rc_tensor *v, rc_mode mode, const char *name) {
    static const char *const modes[5] = {RC_MODE_NAMES};
    if ((mode != RC_LINEAR && mode != RC_SLERP) || rc_dtype_is_float(v->dtype)) return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s: mode '%s' needs a floating dtype, got %s (use 'nearest', 'previous' or "
                 "'next' for integer and bool streams)",
                 name, modes[mode], rc_dtype_name(v->dtype));
    return -1;
}

int rc_expect_quaternions(const rc_tensor *v, int lead, rc_mode mode, const char *name) {
    if (mode != RC_SLERP || (v->ndim > lead && v->shape[v->ndim - 1] == 4)) return 0;
    char s[128];
    PyErr_Format(PyExc_ValueError,
                 "%s: mode 'slerp' needs quaternions (x, y, z, w) in a last dim of 4, got shape "
                 "%s",
                 name, rc_dims_str(s, sizeof s, v->ndim, v->shape));
    return -1;
}

int rc_flatten_trailing(int64_t *count, int64_t *stride, const rc_tensor *v, int first) {
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
            int64_t next; /* a stride that overflows here cannot be the flattening one */
            if (__builtin_mul_overflow(inner_stride, inner_extent, &next) || v->strides[d] != next)
                return 0;
            inner_extent *= v->shape[d];
        }
    }
    return 1;
}

int rc_expect_out(const rc_tensor *out, int ndim, const int64_t *shape) {
    int same = out->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = out->shape[d] == shape[d];
    if (!same) {
        char s1[160], s2[160];
        PyErr_Format(PyExc_ValueError, "out: expected shape %s, got %s",
                     rc_dims_str(s1, sizeof s1, ndim, shape),
                     rc_dims_str(s2, sizeof s2, out->ndim, out->shape));
        return -1;
    }
    if (!rc_is_contiguous(out)) {
        PyErr_SetString(PyExc_ValueError, "out: must be C-contiguous");
        return -1;
    }
    return 0;
}

/* Raises the ValueError for a failed resample content check; label ("streams[0]") or NULL. */
static void content_error(const rc_check_result *r, const rc_resample_args *a, int ragged,
                          const char *label) {
    char where[96], pre[96];
    if (ragged)
        snprintf(where, sizeof where, "episode %lld (output row %lld)",
                 (long long)(r->kind <= RC_CHECK_TIMES_NONFINITE && a->index
                                 ? a->index[r->row * a->index_stride] : r->row),
                 (long long)r->row);
    else
        snprintf(where, sizeof where, "row %lld", (long long)r->row);
    snprintf(pre, sizeof pre, "%s%s", label ? label : "", label ? " " : "");
    switch (r->kind) {
    case RC_CHECK_TIMES_UNSORTED:
        PyErr_Format(PyExc_ValueError,
                     "%stimes must be non-decreasing per row: %s decreases at sample %lld", pre,
                     where, (long long)r->i);
        break;
    case RC_CHECK_TIMES_NONFINITE:
        PyErr_Format(PyExc_ValueError, "%stimes must be finite: %s has NaN/inf at sample %lld",
                     pre, where, (long long)r->i);
        break;
    case RC_CHECK_OFFSETS:
        PyErr_Format(PyExc_ValueError,
                     "%soffsets must start at 0, never decrease and end at N=%lld (len(times)); "
                     "bad at position %lld",
                     pre, (long long)a->samples, (long long)r->row);
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
}

int rc_out_arg(rc_call *c, PyObject **out_obj, rc_tensor *out, PyObject *arg, PyObject *like,
               int ndim, const int64_t *shape, rc_dtype dt) {
    if (rc_is_none(arg)) return rc_alloc_array(c, out_obj, out, like, ndim, shape, dt);
    if (rc_import_array(c, out, arg, "out", 1) != 0 || rc_expect_dtype(out, dt, "out") ||
        rc_expect_out(out, ndim, shape) || rc_expect_no_alias(c, "out"))
        return -1;
    *out_obj = arg;
    Py_INCREF(arg);
    return 0;
}

/* One argument set checked on the CPU, without the GIL. */
static int check_cpu(rc_state *st, const rc_resample_args *ra, int ragged, const char *label) {
    rc_check_result verdict = {0, 0, 0};
    rc_status status;
    Py_BEGIN_ALLOW_THREADS
    status = rc_resample_check_cpu(&verdict, ra);
    Py_END_ALLOW_THREADS
    if (status != RC_OK) { rc_raise_status(st, status); return -1; }
    if (verdict.kind != RC_CHECK_OK) { content_error(&verdict, ra, ragged, label); return -1; }
    return 0;
}

/* The same on the GPU (a host sync); scratch: 3 int64 on the device. */
static int check_cuda(rc_state *st, int64_t *scratch, const rc_resample_args *ra, int ragged,
                      const char *label, int device_id, void *stream) {
    rc_check_result verdict = {0, 0, 0};
    rc_status status;
    Py_BEGIN_ALLOW_THREADS
    status = RC_CUDA_LAUNCH(rc_resample_check_cuda(&verdict, scratch, ra, device_id, stream));
    Py_END_ALLOW_THREADS
    if (status != RC_OK) { rc_raise_status(st, status); return -1; }
    if (verdict.kind != RC_CHECK_OK) {
        /* index values live on the device: report the row only */
        rc_resample_args no_index = *ra;
        no_index.index = NULL;
        content_error(&verdict, &no_index, ragged, label);
        return -1;
    }
    return 0;
}

int rc_check_resample(rc_call *c, PyObject *like, const rc_resample_args *ra, int n, int ragged,
                      const char *const *labels) {
    if (c->device_type != RC_DEVICE_CUDA) {
        for (int k = 0; k < n; k++)
            if (check_cpu(c->st, &ra[k], ragged, labels ? labels[k] : NULL) != 0) return -1;
        return 0;
    }
    void *stream;
    if (rc_require_cuda(c->st, c->first_name, c->device_id) != 0 || rc_call_stream(c, &stream) != 0)
        return -1;
    PyObject *scratch_obj = NULL;
    rc_tensor scratch;
    int64_t three = 3;
    if (rc_alloc_array(c, &scratch_obj, &scratch, like, 1, &three, RC_I64) != 0) return -1;
    int bad = 0;
    for (int k = 0; k < n && !bad; k++)
        bad = check_cuda(c->st, (int64_t *)scratch.data, &ra[k], ragged,
                         labels ? labels[k] : NULL, c->device_id, stream);
    Py_DECREF(scratch_obj);
    return bad ? -1 : 0;
}

PyObject *rc_result(PyObject *out, PyObject *extra) {
    if (!extra) return out;
    PyObject *result = PyTuple_Pack(2, out, extra);
    Py_DECREF(out);
    Py_DECREF(extra);
    return result;
}
