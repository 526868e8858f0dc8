/* py_fuse.c: robocache.fuse: parsing of the stream list/dict and per-stream modes,
 * validation naming the stream and argument, output allocation, dispatch to rc_fuse_cpu /
 * rc_fuse_cuda (one launch for every stream).
 * Shapes (elements): K streams, each dense (values [B,S_k,...], times [B,S_k]), one row
 * (values [S_k,...], times [S_k]) or ragged (values [N_k,...], times [N_k], offsets [E+1]);
 * new_times [B,T] (or [T]); index [B] when ragged; out [B,T,F], F = sum D_k; is_pad [B,T,K].
 * Benchmark: python benchmarks/bench_fuse.py
 */
#include <string.h>

#include "module.h"

const char rc_fuse_doc_text[] =
"fuse(streams, new_times, *, modes=None, index=None, out=None, return_mask=False,\n"
"     tolerance=1e-4, check=None, stream=None)\n"
"--\n"
"\n"
"Several timestamped streams resampled onto one timeline and concatenated on the feature\n"
"axis, in one kernel launch. Stream k's columns equal robocache.resample of that stream alone.\n"
"\n"
"Parameters\n"
"----------\n"
"streams : list of (values, times) pairs, or dict name -> (values, times)\n"
"    1 to 16 streams, each at its own rate, all in one form: dense (values [B,S_k,...],\n"
"    times [B,S_k]), one row ([S_k,...], [S_k]) or ragged (values, times, offsets) triples\n"
"    (values [N_k,...], times [N_k], offsets [E+1] int64, the same E for every stream). One\n"
"    value dtype and one times dtype for all. A dict's order is the concatenation order.\n"
"new_times : array [B,T] or [T]\n"
"    Target times, dtype of the streams' times (float64/float32 seconds, int64 ns).\n"
"modes : str, list of str or dict name -> str, optional\n"
"    'linear' (default), 'nearest', 'previous', 'next' or 'slerp', for all streams or per\n"
"    stream (a list of K, or a dict for dict streams: unnamed streams stay 'linear').\n"
"index : int64 array [B], optional\n"
"    Ragged form: output row b reads episode index[b] of every stream.\n"
"out : array [B,T,F] (or [T,F]), optional\n"
"    C-contiguous, dtype of values; F = the sum of the streams' flattened feature sizes.\n"
"return_mask : bool\n"
"    Also return is_pad [B,T,K] (or [T,K]): per stream, target outside its span by more than\n"
"    tolerance.\n"
"tolerance : float\n"
"    Seconds (scaled to ns for int64 times).\n"
"check : bool or None\n"
"    GPU only: also validate content, at the cost of host syncs. CPU inputs are always\n"
"    validated.\n"
"stream : int or stream object, optional\n"
"    CUDA stream to run on; default: the framework's current stream.\n"
"\n"
"Returns\n"
"-------\n"
"out, or (out, is_pad) with return_mask=True. See docs/fuse.md.\n";

enum { A_STREAMS, A_NEW_TIMES, A_MODES, A_INDEX, A_OUT, A_RETURN_MASK, A_TOLERANCE, A_CHECK,
       A_STREAM, A_COUNT };

#define K_MAX RC_FUSE_MAX_STREAMS
#define LABEL_LEN 72

static int parse_args(rc_state *st, PyObject **slot, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
    PyObject *const names[A_COUNT] = {st->kw_streams, st->kw_new_times, st->kw_modes,
                                      st->kw_index, st->kw_out, st->kw_return_mask,
                                      st->kw_tolerance, st->kw_check, st->kw_stream};
    for (int i = 0; i < A_COUNT; i++) slot[i] = NULL;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError,
                     "fuse() takes 2 positional arguments (streams, new_times) but %zd were given",
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
            PyErr_Format(PyExc_TypeError, "fuse() got an unexpected keyword argument '%U'", key);
            return -1;
        }
        if (slot[found]) {
            PyErr_Format(PyExc_TypeError, "fuse() got multiple values for argument '%U'", key);
            return -1;
        }
        slot[found] = args[nargs + k];
    }
    for (int i = 0; i < 2; i++)
        if (!slot[i]) {
            PyErr_Format(PyExc_TypeError, "fuse() missing required argument '%U'", names[i]);
            return -1;
        }
    return 0;
}

static int is_none(PyObject *o) { return !o || o == Py_None; }

static int parse_flag(int *flag, PyObject *obj, int dflt) {
    if (!obj || obj == Py_None) { *flag = dflt; return 0; }
    int v = PyObject_IsTrue(obj);
    if (v < 0) return -1;
    *flag = v;
    return 0;
}

/* One mode string; `name` says where it came from ("modes", "modes[2]", "modes['imu']"). */
static int parse_one_mode(rc_state *st, rc_mode *mode, PyObject *obj, const char *name) {
    for (int m = 0; m < 5; m++)
        if (obj == st->mode_names[m]) { *mode = (rc_mode)m; return 0; }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a str such as 'linear', got %.100s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    for (int m = 0; m < 5; m++)
        if (PyUnicode_Compare(obj, st->mode_names[m]) == 0) { *mode = (rc_mode)m; return 0; }
    PyErr_Format(PyExc_ValueError,
                 "%s: expected 'linear', 'nearest', 'previous', 'next' or 'slerp', got %R", name,
                 obj);
    return -1;
}

/* modes: None (all linear), a str for all, a list/tuple of K, or (dict streams) a dict
 * name -> str where unnamed streams stay linear. keys[k]: stream k's dict key or NULL. */
static int parse_modes(rc_state *st, rc_mode *modes, PyObject *obj, int K, PyObject **keys,
                       const char (*labels)[LABEL_LEN]) {
    for (int k = 0; k < K; k++) modes[k] = RC_LINEAR;
    if (is_none(obj)) return 0;
    if (PyUnicode_Check(obj)) {
        if (parse_one_mode(st, &modes[0], obj, "modes") != 0) return -1;
        for (int k = 1; k < K; k++) modes[k] = modes[0];
        return 0;
    }
    char name[LABEL_LEN + 16];
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        if (n != K) {
            PyErr_Format(PyExc_ValueError, "modes: expected %d modes (one per stream), got %zd",
                         K, n);
            return -1;
        }
        for (int k = 0; k < K; k++) {
            snprintf(name, sizeof name, "modes[%d]", k);
            if (parse_one_mode(st, &modes[k], PySequence_Fast_GET_ITEM(obj, k), name) != 0)
                return -1;
        }
        return 0;
    }
    if (PyDict_Check(obj)) {
        if (!keys[0]) {
            PyErr_SetString(PyExc_TypeError,
                            "modes: a dict of modes needs streams given as a dict (name -> "
                            "stream); pass a list of modes for a list of streams");
            return -1;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *val;
        while (PyDict_Next(obj, &pos, &key, &val)) {
            int found = -1;
            for (int k = 0; k < K && found < 0; k++) {
                int eq = PyObject_RichCompareBool(key, keys[k], Py_EQ);
                if (eq < 0) return -1;
                if (eq) found = k;
            }
            if (found < 0) {
                PyErr_Format(PyExc_ValueError, "modes: %R is not the name of a stream", key);
                return -1;
            }
            snprintf(name, sizeof name, "modes for %s", labels[found]);
            if (parse_one_mode(st, &modes[found], val, name) != 0) return -1;
        }
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "modes: expected None, a str, a list of str or a dict name -> str, got %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

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
    int64_t inner_stride = 0, inner_extent = 0;
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

/* Stream k as a resample call, for the content checks of rc_resample_check_*. */
static void as_resample(rc_resample_args *ra, const rc_fuse_args *fa, int k) {
    const rc_fuse_stream *s = &fa->streams[k];
    memset(ra, 0, sizeof *ra);
    ra->values = s->values;
    ra->values_stride_b = s->values_stride_b;
    ra->values_stride_s = s->values_stride_s;
    ra->values_stride_d = s->values_stride_d;
    ra->times = s->times;
    ra->times_stride_b = s->times_stride_b;
    ra->times_stride_s = s->times_stride_s;
    ra->new_times = fa->new_times;
    ra->new_times_stride_b = fa->new_times_stride_b;
    ra->new_times_stride_t = fa->new_times_stride_t;
    ra->offsets = s->offsets;
    ra->offsets_stride = s->offsets_stride;
    ra->index = s->offsets ? fa->index : NULL;
    ra->index_stride = fa->index_stride;
    ra->batch = fa->batch;
    ra->samples = s->samples;
    ra->targets = fa->targets;
    ra->features = s->features;
    ra->episodes = fa->episodes;
    ra->values_dtype = fa->values_dtype;
    ra->times_dtype = fa->times_dtype;
    ra->mode = s->mode;
    ra->tolerance = fa->tolerance;
}

static void content_error(const rc_check_result *r, const rc_resample_args *a, int ragged,
                          const char *label) {
    char where[96];
    if (ragged)
        snprintf(where, sizeof where, "episode %lld (output row %lld)",
                 (long long)(a->index ? a->index[r->row * a->index_stride] : r->row),
                 (long long)r->row);
    else
        snprintf(where, sizeof where, "row %lld", (long long)r->row);
    switch (r->kind) {
    case RC_CHECK_TIMES_UNSORTED:
        PyErr_Format(PyExc_ValueError,
                     "%s times must be non-decreasing per row: %s decreases at sample %lld",
                     label, where, (long long)r->i);
        break;
    case RC_CHECK_TIMES_NONFINITE:
        PyErr_Format(PyExc_ValueError, "%s times must be finite: %s has NaN/inf at sample %lld",
                     label, where, (long long)r->i);
        break;
    case RC_CHECK_OFFSETS:
        PyErr_Format(PyExc_ValueError,
                     "%s offsets must start at 0, never decrease and end at N=%lld (len(times)); "
                     "bad at position %lld",
                     label, (long long)a->samples, (long long)r->row);
        break;
    default: /* RC_CHECK_INDEX: the only other kind without lengths */
        PyErr_Format(PyExc_ValueError, "index[%lld] is outside [0, %lld) (episodes)",
                     (long long)r->row, (long long)a->episodes);
        break;
    }
}

PyObject *rc_py_fuse(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    PyObject *a_[A_COUNT];
    if (parse_args(st, a_, args, nargs, kwnames) != 0) return NULL;

    /* ---- the streams container: items, dict keys, labels for messages ---- */
    PyObject *items[K_MAX], *keys[K_MAX] = {NULL}; /* borrowed */
    char labels[K_MAX][LABEL_LEN];
    char names[K_MAX][3][LABEL_LEN + 12]; /* "streams[0] values": must outlive the call */
    Py_ssize_t K;
    PyObject *sobj = a_[A_STREAMS];
    if (PyDict_Check(sobj)) {
        K = PyDict_GET_SIZE(sobj);
        if (K > K_MAX) goto too_many;
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *val;
        while (PyDict_Next(sobj, &pos, &key, &val)) {
            keys[k] = key;
            items[k] = val;
            PyObject *r = PyObject_Repr(key);
            const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
            if (!rs) {
                Py_XDECREF(r);
                return NULL;
            }
            snprintf(labels[k], LABEL_LEN, "streams[%.60s]", rs);
            Py_DECREF(r);
            k++;
        }
    } else if (PyList_Check(sobj) || PyTuple_Check(sobj)) {
        K = PySequence_Fast_GET_SIZE(sobj);
        if (K > K_MAX) goto too_many;
        for (Py_ssize_t k = 0; k < K; k++) {
            items[k] = PySequence_Fast_GET_ITEM(sobj, k);
            snprintf(labels[k], LABEL_LEN, "streams[%d]", (int)k);
        }
    } else {
        PyErr_Format(PyExc_TypeError,
                     "streams: expected a list of (values, times) pairs or a dict name -> "
                     "(values, times), got %.100s",
                     Py_TYPE(sobj)->tp_name);
        return NULL;
    }
    if (K == 0) {
        PyErr_SetString(PyExc_ValueError, "streams: expected at least one stream, got none");
        return NULL;
    }

    /* each stream: a (values, times) pair or a (values, times, offsets) triple, one form */
    PyObject *parts[K_MAX][3];
    int ragged = 0;
    for (Py_ssize_t k = 0; k < K; k++) {
        PyObject *it = items[k];
        Py_ssize_t n = (PyTuple_Check(it) || PyList_Check(it)) ? PySequence_Fast_GET_SIZE(it) : -1;
        if (n != 2 && n != 3) {
            PyErr_Format(PyExc_TypeError,
                         "%s: expected a (values, times) pair or a ragged (values, times, "
                         "offsets) triple, got %.100s%s",
                         labels[k], Py_TYPE(it)->tp_name,
                         n >= 0 ? " of another length" : "");
            return NULL;
        }
        if (k == 0) ragged = n == 3;
        if ((n == 3) != ragged) {
            PyErr_Format(PyExc_ValueError,
                         "%s: a %s, but streams[0] is a %s; all streams must be dense (values, "
                         "times) pairs or all ragged (values, times, offsets) triples",
                         labels[k], n == 3 ? "triple" : "pair", ragged ? "triple" : "pair");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) parts[k][i] = PySequence_Fast_GET_ITEM(it, i);
        snprintf(names[k][0], sizeof names[k][0], "%.64s values", labels[k]);
        snprintf(names[k][1], sizeof names[k][1], "%.64s times", labels[k]);
        snprintf(names[k][2], sizeof names[k][2], "%.64s offsets", labels[k]);
    }

    /* ---- options ---- */
    rc_mode modes[K_MAX];
    int return_mask, check;
    double tolerance = 1e-4;
    if (parse_modes(st, modes, a_[A_MODES], (int)K, keys, labels) != 0) return NULL;
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
    if (ragged && is_none(a_[A_INDEX])) {
        PyErr_SetString(PyExc_ValueError,
                        "index: ragged streams (values, times, offsets) need index [B], the "
                        "episode of each output row");
        return NULL;
    }
    if (!ragged && !is_none(a_[A_INDEX])) {
        PyErr_SetString(PyExc_ValueError,
                        "index: only for ragged streams, given as (values, times, offsets) "
                        "triples");
        return NULL;
    }

    rc_call call;
    rc_call_init(&call, st, a_[A_STREAM]);
    rc_tensor values[K_MAX], times[K_MAX], offsets[K_MAX], new_times, index, out, mask;
    PyObject *out_obj = NULL, *mask_obj = NULL, *result = NULL;
    rc_fuse_args fa;
    memset(&fa, 0, sizeof fa);
    fa.num_streams = (int32_t)K;
    int unbatched = 0;
    char s1[128], s2[128];

    /* values of stream 0 first: its framework and device are the call's */
    for (Py_ssize_t k = 0; k < K; k++) {
        if (rc_import_array(&call, &values[k], parts[k][0], names[k][0], 0) != 0) goto fail;
        if (rc_import_array(&call, &times[k], parts[k][1], names[k][1], 0) != 0) goto fail;
        if (ragged &&
            rc_import_array(&call, &offsets[k], parts[k][2], names[k][2], 0) != 0)
            goto fail;
    }
    if (rc_import_array(&call, &new_times, a_[A_NEW_TIMES], "new_times", 0) != 0) goto fail;

    /* ---- dtypes: one times dtype, one values dtype ---- */
    if (new_times.dtype != RC_F64 && new_times.dtype != RC_F32 && new_times.dtype != RC_I64) {
        PyErr_Format(PyExc_TypeError,
                     "new_times: expected float64 or float32 seconds, or int64 nanoseconds; "
                     "got %s",
                     rc_dtype_name(new_times.dtype));
        goto fail;
    }
    fa.times_dtype = new_times.dtype;
    fa.values_dtype = values[0].dtype;
    for (Py_ssize_t k = 0; k < K; k++) {
        if (times[k].dtype != new_times.dtype) {
            PyErr_Format(PyExc_TypeError, "%s: expected the dtype of new_times (%s), got %s",
                         names[k][1], rc_dtype_name(new_times.dtype),
                         rc_dtype_name(times[k].dtype));
            goto fail;
        }
        if (values[k].dtype != fa.values_dtype) {
            PyErr_Format(PyExc_TypeError,
                         "%s: dtype %s differs from %s (%s); fuse concatenates the streams, so "
                         "they need one value dtype (cast first)",
                         names[k][0], rc_dtype_name(values[k].dtype), names[0][0],
                         rc_dtype_name(fa.values_dtype));
            goto fail;
        }
        if ((modes[k] == RC_LINEAR || modes[k] == RC_SLERP) &&
            !rc_dtype_is_float(values[k].dtype)) {
            PyErr_Format(PyExc_TypeError,
                         "%s: mode '%U' needs a floating dtype, got %s (use 'nearest', "
                         "'previous' or 'next' for integer and bool streams)",
                         names[k][0], st->mode_names[modes[k]], rc_dtype_name(values[k].dtype));
            goto fail;
        }
    }

    /* ---- shapes: the form, B and T, then each stream ---- */
    if (ragged) {
        if (rc_import_array(&call, &index, a_[A_INDEX], "index", 0) != 0) goto fail;
        if (expect_dtype(&index, RC_I64, "index") || expect_ndim(&index, 1, "index", "[B]") ||
            expect_ndim(&new_times, 2, "new_times", "[B, T] (ragged streams)"))
            goto fail;
        fa.batch = index.shape[0];
        fa.index = (const int64_t *)index.data;
        fa.index_stride = index.strides[0];
        if (new_times.shape[0] != fa.batch) {
            PyErr_Format(PyExc_ValueError, "new_times: expected %lld rows (len(index)), got %lld",
                         (long long)fa.batch, (long long)new_times.shape[0]);
            goto fail;
        }
    } else if (new_times.ndim == 2) {
        fa.batch = new_times.shape[0];
    } else if (new_times.ndim == 1) {
        unbatched = 1;
        fa.batch = 1;
    } else {
        PyErr_Format(PyExc_ValueError, "new_times: expected [B, T] or [T], got shape %s",
                     dims_str(s1, sizeof s1, &new_times));
        goto fail;
    }
    fa.new_times = new_times.data;
    fa.targets = new_times.shape[new_times.ndim - 1];
    fa.new_times_stride_t = new_times.strides[new_times.ndim - 1];
    fa.new_times_stride_b = unbatched ? 0 : new_times.strides[0];

    int64_t F = 0;
    for (Py_ssize_t k = 0; k < K; k++) {
        rc_fuse_stream *s = &fa.streams[k];
        const rc_tensor *t = &times[k];
        rc_tensor *v = &values[k];
        int lead;
        if (ragged) {
            const rc_tensor *o = &offsets[k];
            if (expect_dtype(o, RC_I64, names[k][2]) ||
                expect_ndim(o, 1, names[k][2], "[E+1]") ||
                expect_ndim(t, 1, names[k][1], "[N] for a ragged stream"))
                goto fail;
            if (o->shape[0] < 1) {
                PyErr_Format(PyExc_ValueError, "%s: expected [E+1] with at least one entry",
                             names[k][2]);
                goto fail;
            }
            if (k == 0) fa.episodes = o->shape[0] - 1;
            else if (o->shape[0] - 1 != fa.episodes) {
                PyErr_Format(PyExc_ValueError,
                             "%s: expected [%lld] like %s (the streams share their episodes), "
                             "got [%lld]",
                             names[k][2], (long long)(fa.episodes + 1), names[0][2],
                             (long long)o->shape[0]);
                goto fail;
            }
            s->offsets = (const int64_t *)o->data;
            s->offsets_stride = o->strides[0];
            s->samples = t->shape[0];
            s->times_stride_s = t->strides[0];
            lead = 1;
        } else if (unbatched) {
            if (expect_ndim(t, 1, names[k][1], "[S] (new_times is [T])")) goto fail;
            s->samples = t->shape[0];
            s->times_stride_s = t->strides[0];
            lead = 1;
        } else {
            if (expect_ndim(t, 2, names[k][1], "[B, S] (new_times is [B, T])")) goto fail;
            if (t->shape[0] != fa.batch) {
                PyErr_Format(PyExc_ValueError,
                             "%s: expected %lld rows (the rows of new_times), got shape %s",
                             names[k][1], (long long)fa.batch, dims_str(s1, sizeof s1, t));
                goto fail;
            }
            s->samples = t->shape[1];
            s->times_stride_b = t->strides[0];
            s->times_stride_s = t->strides[1];
            lead = 2;
        }
        if (v->ndim < lead) {
            PyErr_Format(PyExc_ValueError, "%s: expected at least %d dims, got shape %s",
                         names[k][0], lead, dims_str(s1, sizeof s1, v));
            goto fail;
        }
        for (int d = 0; d < lead; d++)
            if (v->shape[d] != t->shape[d]) {
                PyErr_Format(PyExc_ValueError,
                             "%s: shape %s does not start with the shape of its times %s",
                             names[k][0], dims_str(s1, sizeof s1, v),
                             dims_str(s2, sizeof s2, t));
                goto fail;
            }
        if (modes[k] == RC_SLERP && (v->ndim == lead || v->shape[v->ndim - 1] != 4)) {
            PyErr_Format(PyExc_ValueError,
                         "%s: mode 'slerp' needs quaternions (x, y, z, w) in a last dim of 4, "
                         "got shape %s",
                         names[k][0], dims_str(s1, sizeof s1, v));
            goto fail;
        }
        if (!flatten_trailing(&s->features, &s->values_stride_d, v, lead)) {
            if (rc_import_contiguous(&call, v, parts[k][0], names[k][0]) != 0) goto fail;
            flatten_trailing(&s->features, &s->values_stride_d, v, lead);
        }
        s->values = v->data;
        s->values_stride_s = v->strides[lead - 1];
        s->values_stride_b = lead == 2 ? v->strides[0] : 0;
        s->times = t->data;
        s->mode = modes[k];
        s->column = F;
        F += s->features;
    }
    fa.out_features = F;
    fa.tolerance = fa.times_dtype == RC_I64 ? tolerance * 1e9 : tolerance;

    /* ---- outputs: out [B,T,F] (or [T,F]), is_pad [B,T,K] (or [T,K]) ---- */
    int64_t out_shape[3], pad_shape[3];
    int out_ndim = 0;
    if (!unbatched) out_shape[out_ndim++] = fa.batch;
    out_shape[out_ndim++] = fa.targets;
    memcpy(pad_shape, out_shape, sizeof(int64_t) * (size_t)out_ndim);
    pad_shape[out_ndim] = K;
    out_shape[out_ndim++] = F;
    if (!is_none(a_[A_OUT])) {
        if (rc_import_array(&call, &out, a_[A_OUT], "out", 1) != 0) goto fail;
        if (expect_dtype(&out, fa.values_dtype, "out")) goto fail;
        int same = out.ndim == out_ndim;
        for (int d = 0; same && d < out_ndim; d++) same = out.shape[d] == out_shape[d];
        if (!same) {
            rc_tensor want = out;
            want.ndim = out_ndim;
            memcpy(want.shape, out_shape, sizeof(int64_t) * (size_t)out_ndim);
            PyErr_Format(PyExc_ValueError, "out: expected shape %s, got %s",
                         dims_str(s2, sizeof s2, &want), dims_str(s1, sizeof s1, &out));
            goto fail;
        }
        if (!rc_is_contiguous(&out)) {
            PyErr_SetString(PyExc_ValueError, "out: must be C-contiguous");
            goto fail;
        }
        out_obj = a_[A_OUT];
        Py_INCREF(out_obj);
    } else if (rc_alloc_array(&call, &out_obj, &out, parts[0][0], out_ndim, out_shape,
                              fa.values_dtype) != 0) {
        goto fail;
    }
    fa.out = out.data;
    if (return_mask) {
        if (rc_alloc_array(&call, &mask_obj, &mask, parts[0][0], out_ndim, pad_shape,
                           RC_BOOL) != 0)
            goto fail;
        fa.is_pad = (uint8_t *)mask.data;
    }

    /* ---- content check (per stream, as resample) and dispatch ---- */
    const int on_cuda = call.device_type == RC_DEVICE_CUDA;
    if (parse_flag(&check, a_[A_CHECK], 0) != 0) goto fail;
    check = check || !on_cuda;
    rc_status status = RC_OK;
    rc_check_result verdict = {0, 0, 0};
    rc_resample_args ra;
    if (!on_cuda) {
        for (Py_ssize_t k = 0; k < K && check; k++) {
            as_resample(&ra, &fa, (int)k);
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_check_cpu(&verdict, &ra);
            Py_END_ALLOW_THREADS
            if (status != RC_OK) { rc_raise_status(st, status); goto fail; }
            if (verdict.kind != RC_CHECK_OK) {
                content_error(&verdict, &ra, ragged, labels[k]);
                goto fail;
            }
        }
        if (fa.batch * fa.targets > 0) {
            int nt = st->num_threads;
            Py_BEGIN_ALLOW_THREADS
            status = rc_fuse_cpu(&fa, nt);
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
            if (rc_alloc_array(&call, &scratch_obj, &scratch, parts[0][0], 1, &three,
                               RC_I64) != 0)
                goto fail;
            for (Py_ssize_t k = 0; k < K && status == RC_OK && verdict.kind == RC_CHECK_OK;
                 k++) {
                as_resample(&ra, &fa, (int)k);
                Py_BEGIN_ALLOW_THREADS
                status = rc_resample_check_cuda(&verdict, (int64_t *)scratch.data, &ra,
                                                call.device_id, stream);
                Py_END_ALLOW_THREADS
                if (status == RC_OK && verdict.kind != RC_CHECK_OK) {
                    ra.index = NULL; /* index values live on the device: report the row */
                    content_error(&verdict, &ra, ragged, labels[k]);
                }
            }
            Py_DECREF(scratch_obj);
            if (status != RC_OK) { rc_raise_status(st, status); goto fail; }
            if (verdict.kind != RC_CHECK_OK) goto fail;
        }
        if (fa.batch * fa.targets > 0) {
            Py_BEGIN_ALLOW_THREADS
            status = rc_fuse_cuda(&fa, call.device_id, stream);
            Py_END_ALLOW_THREADS
        }
#else
        PyErr_Format(st->CudaError,
                     "%s is on cuda:%d but this robocache was built without CUDA; reinstall "
                     "with nvcc on PATH (or CUDA_HOME set, or ROBOCACHE_CUDA=1)",
                     names[0][0], call.device_id);
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

too_many:
    PyErr_Format(PyExc_ValueError,
                 "streams: %zd streams, at most %d fit one launch; fuse them in groups and "
                 "concatenate",
                 K, K_MAX);
    return NULL;
}
