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
    static const int required[] = {A_STREAMS, A_NEW_TIMES};
    static const rc_signature sig = {"fuse", "streams, new_times", 2, required, 2};
    return rc_parse_slots(slot, names, A_COUNT, &sig, args, nargs, kwnames);
}

/* modes: None (all linear), a str for all, a list/tuple of K, or (dict streams) a dict
 * name -> str where unnamed streams stay linear. keys[k]: stream k's dict key or NULL. */
static int parse_modes(rc_state *st, rc_mode *modes, PyObject *obj, int K, PyObject **keys,
                       const char (*labels)[LABEL_LEN]) {
    for (int k = 0; k < K; k++) modes[k] = RC_LINEAR;
    if (rc_is_none(obj)) return 0;
    if (PyUnicode_Check(obj)) {
        if (rc_parse_mode(st, &modes[0], obj, "modes") != 0) return -1;
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
            if (rc_parse_mode(st, &modes[k], PySequence_Fast_GET_ITEM(obj, k), name) != 0)
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
            if (rc_parse_mode(st, &modes[found], val, name) != 0) return -1;
        }
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "modes: expected None, a str, a list of str or a dict name -> str, got %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
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
    double tolerance;
    if (parse_modes(st, modes, a_[A_MODES], (int)K, keys, labels) != 0) return NULL;
    if (rc_parse_flag(&return_mask, a_[A_RETURN_MASK], 0) != 0) return NULL;
    if (rc_parse_tolerance(&tolerance, a_[A_TOLERANCE]) != 0) return NULL;
    if (ragged && rc_is_none(a_[A_INDEX])) {
        PyErr_SetString(PyExc_ValueError,
                        "index: ragged streams (values, times, offsets) need index [B], the "
                        "episode of each output row");
        return NULL;
    }
    if (!ragged && !rc_is_none(a_[A_INDEX])) {
        PyErr_SetString(PyExc_ValueError,
                        "index: only for ragged streams, given as (values, times, offsets) "
                        "triples");
        return NULL;
    }

    rc_call call;
    rc_call_init(&call, st, a_[A_STREAM]);
    rc_tensor values[K_MAX], times[K_MAX], offsets[K_MAX], new_times, index, out, mask;
    PyObject *out_obj = NULL, *mask_obj = NULL;
    rc_fuse_args fa;
    memset(&fa, 0, sizeof fa);
    fa.num_streams = (int32_t)K;
    int unbatched = 0;
    char s1[128];

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
    if (rc_expect_times_dtype(&new_times, "new_times")) goto fail;
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
        if (rc_expect_mode_dtype(st, &values[k], modes[k], names[k][0])) goto fail;
    }

    /* ---- shapes: the form, B and T, then each stream ---- */
    if (ragged) {
        if (rc_import_array(&call, &index, a_[A_INDEX], "index", 0) != 0) goto fail;
        if (rc_expect_dtype(&index, RC_I64, "index") || rc_expect_ndim(&index, 1, "index", "[B]") ||
            rc_expect_ndim(&new_times, 2, "new_times", "[B, T] (ragged streams)"))
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
                     rc_dims_str(s1, sizeof s1, new_times.ndim, new_times.shape));
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
            if (rc_expect_dtype(o, RC_I64, names[k][2]) ||
                rc_expect_ndim(o, 1, names[k][2], "[E+1]") ||
                rc_expect_ndim(t, 1, names[k][1], "[N] for a ragged stream"))
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
            if (rc_expect_ndim(t, 1, names[k][1], "[S] (new_times is [T])")) goto fail;
            s->samples = t->shape[0];
            s->times_stride_s = t->strides[0];
            lead = 1;
        } else {
            if (rc_expect_ndim(t, 2, names[k][1], "[B, S] (new_times is [B, T])")) goto fail;
            if (t->shape[0] != fa.batch) {
                PyErr_Format(PyExc_ValueError,
                             "%s: expected %lld rows (the rows of new_times), got shape %s",
                             names[k][1], (long long)fa.batch,
                             rc_dims_str(s1, sizeof s1, t->ndim, t->shape));
                goto fail;
            }
            s->samples = t->shape[1];
            s->times_stride_b = t->strides[0];
            s->times_stride_s = t->strides[1];
            lead = 2;
        }
        if (rc_expect_leading(v, t, lead, names[k][0], "its times") ||
            rc_expect_quaternions(v, lead, modes[k], names[k][0]))
            goto fail;
        if (!rc_flatten_trailing(&s->features, &s->values_stride_d, v, lead)) {
            if (rc_import_contiguous(&call, v, parts[k][0], names[k][0]) != 0) goto fail;
            rc_flatten_trailing(&s->features, &s->values_stride_d, v, lead);
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
    if (rc_out_arg(&call, &out_obj, &out, a_[A_OUT], parts[0][0], out_ndim, out_shape,
                   fa.values_dtype) != 0)
        goto fail;
    fa.out = out.data;
    if (return_mask) {
        if (rc_alloc_array(&call, &mask_obj, &mask, parts[0][0], out_ndim, pad_shape,
                           RC_BOOL) != 0)
            goto fail;
        fa.is_pad = (uint8_t *)mask.data;
    }

    /* ---- content check (per stream, as resample) and dispatch ---- */
    const int on_cuda = call.device_type == RC_DEVICE_CUDA;
    if (rc_parse_flag(&check, a_[A_CHECK], 0) != 0) goto fail;
    if (check || !on_cuda) {
        rc_resample_args ras[K_MAX];
        const char *label_of[K_MAX];
        for (Py_ssize_t k = 0; k < K; k++) {
            as_resample(&ras[k], &fa, (int)k);
            label_of[k] = labels[k];
        }
        if (rc_check_resample(&call, parts[0][0], ras, (int)K, ragged, label_of) != 0) goto fail;
    }
    rc_status status = RC_OK;
    if (!on_cuda) {
        if (fa.batch * fa.targets > 0 && (fa.out_features > 0 || fa.is_pad)) {
            int nt = st->num_threads;
            Py_BEGIN_ALLOW_THREADS
            status = rc_fuse_cpu(&fa, nt);
            Py_END_ALLOW_THREADS
        }
    } else {
#ifdef RC_WITH_CUDA
        void *stream;
        if (rc_call_stream(&call, &stream) != 0) goto fail;
        if (fa.batch * fa.targets > 0 && (fa.out_features > 0 || fa.is_pad)) {
            Py_BEGIN_ALLOW_THREADS
            status = rc_fuse_cuda(&fa, call.device_id, stream);
            Py_END_ALLOW_THREADS
        }
#else
        rc_no_cuda_error(st, names[0][0], call.device_id);
        goto fail;
#endif
    }
    if (status != RC_OK) { rc_raise_status(st, status); goto fail; }

    rc_call_release(&call);
    return rc_result(out_obj, mask_obj); /* (out, is_pad) with return_mask */

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
