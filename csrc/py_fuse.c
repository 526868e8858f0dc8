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

PyDoc_STRVAR(fuse_doc,
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
"out, or (out, is_pad) with return_mask=True. See docs/fuse.md.\n");

enum { A_STREAMS, A_NEW_TIMES, A_MODES, A_INDEX, A_OUT, A_RETURN_MASK, A_TOLERANCE, A_CHECK,
       A_STREAM, A_COUNT, N_MODES = A_COUNT, N_NAMES = N_MODES + 5 }; /* keywords, then modes */

static const char *const names[N_NAMES] = {
    "streams", "new_times", "modes", "index", "out", "return_mask", "tolerance", "check",
    "stream", RC_MODE_NAMES};

#define K_MAX RC_FUSE_MAX_STREAMS
#define LABEL_LEN 72

/* One call: its arguments, the streams' parts and labels, the arrays it imported or made, the
 * kernel's arguments. */
typedef struct {
    PyObject *arg[A_COUNT];            /* borrowed; NULL: not given */
    int K, ragged, unbatched, return_mask;
    double tolerance;
    PyObject *items[K_MAX], *keys[K_MAX]; /* borrowed: stream k, its dict key (or NULL) */
    PyObject *parts[K_MAX][3];         /* borrowed: values, times (, offsets) of stream k */
    char labels[K_MAX][LABEL_LEN];     /* "streams[0]", "streams['arm']" */
    char part_names[K_MAX][3][LABEL_LEN + 12]; /* "streams[0] values": outlive the call */
    rc_mode modes[K_MAX];
    rc_tensor values[K_MAX], times[K_MAX], offsets[K_MAX], new_times, index, out, mask;
    PyObject *out_obj, *mask_obj;      /* new refs, or NULL */
    rc_fuse_args fa;
} job;

/* modes: None (all linear), a str for all, a list/tuple of K, or (dict streams) a dict
 * name -> str where unnamed streams stay linear. keys[k]: stream k's dict key or NULL. */
static int parse_modes(rc_mode *modes, PyObject *const *mode_names, PyObject *obj, int K,
                       PyObject *const *keys, const char (*labels)[LABEL_LEN]) {
    for (int k = 0; k < K; k++) modes[k] = RC_LINEAR;
    if (rc_is_none(obj)) return 0;
    if (PyUnicode_Check(obj)) {
        if (rc_parse_mode(&modes[0], obj, mode_names, "modes") != 0) return -1;
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
            if (rc_parse_mode(&modes[k], PySequence_Fast_GET_ITEM(obj, k), mode_names, name) != 0)
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
            if (rc_parse_mode(&modes[found], val, mode_names, name) != 0) return -1;
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

/* Stream k's label for messages ("streams[0]", "streams['arm']": key_repr NULL or the key's
 * repr) and the names of its parts, written from a local copy of the label (gcc's -Wrestrict
 * cannot tell two fields of one struct apart). */
static void name_stream(job *j, int k, const char *key_repr) {
    char label[LABEL_LEN];
    if (key_repr) snprintf(label, sizeof label, "streams[%.60s]", key_repr);
    else snprintf(label, sizeof label, "streams[%d]", k);
    memcpy(j->labels[k], label, sizeof label);
    snprintf(j->part_names[k][0], sizeof j->part_names[k][0], "%.64s values", label);
    snprintf(j->part_names[k][1], sizeof j->part_names[k][1], "%.64s times", label);
    snprintf(j->part_names[k][2], sizeof j->part_names[k][2], "%.64s offsets", label);
}

/* The streams container: a list/tuple of streams, or a dict name -> stream (its keys kept for
 * modes=), each labelled for the messages. */
static int parse_container(job *j, PyObject *sobj) {
    Py_ssize_t K;
    if (PyDict_Check(sobj)) {
        K = PyDict_GET_SIZE(sobj);
        if (K > K_MAX) goto too_many;
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *val;
        while (PyDict_Next(sobj, &pos, &key, &val)) {
            j->keys[k] = key;
            j->items[k] = val;
            PyObject *r = PyObject_Repr(key);
            const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
            if (!rs) {
                Py_XDECREF(r);
                return -1;
            }
            name_stream(j, (int)k, rs);
            Py_DECREF(r);
            k++;
        }
    } else if (PyList_Check(sobj) || PyTuple_Check(sobj)) {
        K = PySequence_Fast_GET_SIZE(sobj);
        if (K > K_MAX) goto too_many;
        for (Py_ssize_t k = 0; k < K; k++) {
            j->items[k] = PySequence_Fast_GET_ITEM(sobj, k);
            name_stream(j, (int)k, NULL);
        }
    } else {
        PyErr_Format(PyExc_TypeError,
                     "streams: expected a list of (values, times) pairs or a dict name -> "
                     "(values, times), got %.100s",
                     Py_TYPE(sobj)->tp_name);
        return -1;
    }
    if (K == 0) {
        PyErr_SetString(PyExc_ValueError, "streams: expected at least one stream, got none");
        return -1;
    }
    j->K = (int)K;
    return 0;

too_many:
    PyErr_Format(PyExc_ValueError,
                 "streams: %zd streams, at most %d fit one launch; fuse them in groups and "
                 "concatenate",
                 K, K_MAX);
    return -1;
}

/* Each stream: a (values, times) pair or a (values, times, offsets) triple, one form for all. */
static int parse_streams(job *j) {
    for (int k = 0; k < j->K; k++) {
        PyObject *it = j->items[k];
        Py_ssize_t n = (PyTuple_Check(it) || PyList_Check(it)) ? PySequence_Fast_GET_SIZE(it) : -1;
        if (n != 2 && n != 3) {
            PyErr_Format(PyExc_TypeError,
                         "%s: expected a (values, times) pair or a ragged (values, times, "
                         "offsets) triple, got %.100s%s",
                         j->labels[k], Py_TYPE(it)->tp_name,
                         n >= 0 ? " of another length" : "");
            return -1;
        }
        if (k == 0) j->ragged = n == 3;
        if ((n == 3) != j->ragged) {
            PyErr_Format(PyExc_ValueError,
                         "%s: a %s, but streams[0] is a %s; all streams must be dense (values, "
                         "times) pairs or all ragged (values, times, offsets) triples",
                         j->labels[k], n == 3 ? "triple" : "pair", j->ragged ? "triple" : "pair");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) j->parts[k][i] = PySequence_Fast_GET_ITEM(it, i);
    }
    return 0;
}

/* Keywords, the streams and the options: everything that needs no array. */
static int parse(const rc_state *st, job *j, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames) {
    static const int required[] = {A_STREAMS, A_NEW_TIMES};
    static const rc_signature sig = {"fuse", "streams, new_times", 2, required, 2};
    PyObject *const *name = rc_op_names(st, RC_OP_FUSE);
    if (rc_parse_slots(j->arg, name, A_COUNT, &sig, args, nargs, kwnames) != 0 ||
        parse_container(j, j->arg[A_STREAMS]) != 0 || parse_streams(j) != 0)
        return -1;
    if (parse_modes(j->modes, name + N_MODES, j->arg[A_MODES], j->K, j->keys, j->labels) != 0 ||
        rc_parse_flag(&j->return_mask, j->arg[A_RETURN_MASK], 0) != 0 ||
        rc_parse_tolerance(&j->tolerance, j->arg[A_TOLERANCE]) != 0)
        return -1;
    if (j->ragged && rc_is_none(j->arg[A_INDEX])) {
        PyErr_SetString(PyExc_ValueError,
                        "index: ragged streams (values, times, offsets) need index [B], the "
                        "episode of each output row");
        return -1;
    }
    if (!j->ragged && !rc_is_none(j->arg[A_INDEX])) {
        PyErr_SetString(PyExc_ValueError,
                        "index: only for ragged streams, given as (values, times, offsets) "
                        "triples");
        return -1;
    }
    return 0;
}

/* Every array of the streams, values of stream 0 first (its framework and device are the
 * call's), then new_times; one times dtype and one values dtype for all. */
static int import_streams(rc_call *c, job *j) {
    rc_fuse_args *fa = &j->fa;
    for (int k = 0; k < j->K; k++) {
        if (rc_import_array(c, &j->values[k], j->parts[k][0], j->part_names[k][0], 0) != 0 ||
            rc_import_array(c, &j->times[k], j->parts[k][1], j->part_names[k][1], 0) != 0)
            return -1;
        if (j->ragged &&
            rc_import_array(c, &j->offsets[k], j->parts[k][2], j->part_names[k][2], 0) != 0)
            return -1;
    }
    if (rc_import_array(c, &j->new_times, j->arg[A_NEW_TIMES], "new_times", 0) != 0) return -1;
    if (rc_expect_times_dtype(&j->new_times, "new_times")) return -1;
    fa->times_dtype = j->new_times.dtype;
    fa->values_dtype = j->values[0].dtype;
    for (int k = 0; k < j->K; k++) {
        if (j->times[k].dtype != j->new_times.dtype) {
            PyErr_Format(PyExc_TypeError, "%s: expected the dtype of new_times (%s), got %s",
                         j->part_names[k][1], rc_dtype_name(j->new_times.dtype),
                         rc_dtype_name(j->times[k].dtype));
            return -1;
        }
        if (j->values[k].dtype != fa->values_dtype) {
            PyErr_Format(PyExc_TypeError,
                         "%s: dtype %s differs from %s (%s); fuse concatenates the streams, so "
                         "they need one value dtype (cast first)",
                         j->part_names[k][0], rc_dtype_name(j->values[k].dtype),
                         j->part_names[0][0], rc_dtype_name(fa->values_dtype));
            return -1;
        }
        if (rc_expect_mode_dtype(&j->values[k], j->modes[k], j->part_names[k][0])) return -1;
    }
    return 0;
}

/* The form's B and T: index [B] with new_times [B, T] (ragged), new_times [B, T] or [T]. */
static int import_timeline(rc_call *c, job *j) {
    rc_fuse_args *fa = &j->fa;
    const rc_tensor *nt = &j->new_times;
    if (j->ragged) {
        if (rc_import_array(c, &j->index, j->arg[A_INDEX], "index", 0) != 0) return -1;
        if (rc_expect_dtype(&j->index, RC_I64, "index") ||
            rc_expect_ndim(&j->index, 1, "index", "[B]") ||
            rc_expect_ndim(nt, 2, "new_times", "[B, T] (ragged streams)"))
            return -1;
        fa->batch = j->index.shape[0];
        fa->index = (const int64_t *)j->index.data;
        fa->index_stride = j->index.strides[0];
        if (nt->shape[0] != fa->batch) {
            PyErr_Format(PyExc_ValueError, "new_times: expected %lld rows (len(index)), got %lld",
                         (long long)fa->batch, (long long)nt->shape[0]);
            return -1;
        }
    } else if (nt->ndim == 2) {
        fa->batch = nt->shape[0];
    } else if (nt->ndim == 1) {
        j->unbatched = 1;
        fa->batch = 1;
    } else {
        char s[128];
        PyErr_Format(PyExc_ValueError, "new_times: expected [B, T] or [T], got shape %s",
                     rc_dims_str(s, sizeof s, nt->ndim, nt->shape));
        return -1;
    }
    fa->new_times = nt->data;
    fa->targets = nt->shape[nt->ndim - 1];
    fa->new_times_stride_t = nt->strides[nt->ndim - 1];
    fa->new_times_stride_b = j->unbatched ? 0 : nt->strides[0];
    return 0;
}

/* Stream k's times in the call's form: offsets [E+1] (the same E for all) with times [N],
 * times [S] for one row, or times [B, S]. Returns the dims of values before its features, or
 * -1 with the exception set. */
static int stream_times(job *j, int k) {
    rc_fuse_stream *s = &j->fa.streams[k];
    const rc_tensor *t = &j->times[k];
    const char *times_name = j->part_names[k][1], *offsets_name = j->part_names[k][2];
    if (j->ragged) {
        const rc_tensor *o = &j->offsets[k];
        if (rc_expect_dtype(o, RC_I64, offsets_name) || rc_expect_ndim(o, 1, offsets_name, "[E+1]") ||
            rc_expect_ndim(t, 1, times_name, "[N] for a ragged stream"))
            return -1;
        if (o->shape[0] < 1) {
            PyErr_Format(PyExc_ValueError, "%s: expected [E+1] with at least one entry", offsets_name);
            return -1;
        }
        if (k == 0) j->fa.episodes = o->shape[0] - 1;
        else if (o->shape[0] - 1 != j->fa.episodes) {
            PyErr_Format(PyExc_ValueError,
                         "%s: expected [%lld] like %s (the streams share their episodes), "
                         "got [%lld]",
                         offsets_name, (long long)(j->fa.episodes + 1), j->part_names[0][2],
                         (long long)o->shape[0]);
            return -1;
        }
        s->offsets = (const int64_t *)o->data;
        s->offsets_stride = o->strides[0];
        s->samples = t->shape[0];
        s->times_stride_s = t->strides[0];
        return 1;
    }
    if (j->unbatched) {
        if (rc_expect_ndim(t, 1, times_name, "[S] (new_times is [T])")) return -1;
        s->samples = t->shape[0];
        s->times_stride_s = t->strides[0];
        return 1;
    }
    if (rc_expect_ndim(t, 2, times_name, "[B, S] (new_times is [B, T])")) return -1;
    if (t->shape[0] != j->fa.batch) {
        char buf[128];
        PyErr_Format(PyExc_ValueError,
                     "%s: expected %lld rows (the rows of new_times), got shape %s", times_name,
                     (long long)j->fa.batch, rc_dims_str(buf, sizeof buf, t->ndim, t->shape));
        return -1;
    }
    s->samples = t->shape[1];
    s->times_stride_b = t->strides[0];
    s->times_stride_s = t->strides[1];
    return 2;
}

/* Stream k's values against its times and mode, features flattened (copied once when they
 * cannot be), and its columns in out: after the F columns of the streams before it. */
static int stream_values(rc_call *c, job *j, int k, int lead, int64_t *F) {
    rc_fuse_stream *s = &j->fa.streams[k];
    rc_tensor *v = &j->values[k];
    const char *name = j->part_names[k][0];
    if (rc_expect_leading(v, &j->times[k], lead, name, "its times") ||
        rc_expect_quaternions(v, lead, j->modes[k], name))
        return -1;
    if (!rc_flatten_trailing(&s->features, &s->values_stride_d, v, lead)) {
        if (rc_import_contiguous(c, v, j->parts[k][0], name) != 0) return -1;
        rc_flatten_trailing(&s->features, &s->values_stride_d, v, lead);
    }
    s->values = v->data;
    s->values_stride_s = v->strides[lead - 1];
    s->values_stride_b = lead == 2 ? v->strides[0] : 0;
    s->times = j->times[k].data;
    s->mode = j->modes[k];
    s->column = *F;
    *F += s->features;
    return 0;
}

/* Every input array, checked and described in the kernel's arguments. */
static int import_inputs(rc_call *c, job *j) {
    if (import_streams(c, j) != 0 || import_timeline(c, j) != 0) return -1;
    int64_t F = 0;
    for (int k = 0; k < j->K; k++) {
        const int lead = stream_times(j, k);
        if (lead < 0 || stream_values(c, j, k, lead, &F) != 0) return -1;
    }
    j->fa.num_streams = (int32_t)j->K;
    j->fa.out_features = F;
    j->fa.tolerance = j->fa.times_dtype == RC_I64 ? j->tolerance * 1e9 : j->tolerance;
    return 0;
}

/* out [B,T,F] (or [T,F]) and, with return_mask, is_pad [B,T,K] (or [T,K]). */
static int allocate_outputs(rc_call *c, job *j) {
    rc_fuse_args *fa = &j->fa;
    int64_t out_shape[3], pad_shape[3];
    int ndim = 0;
    if (!j->unbatched) out_shape[ndim++] = fa->batch;
    out_shape[ndim++] = fa->targets;
    memcpy(pad_shape, out_shape, sizeof(int64_t) * (size_t)ndim);
    pad_shape[ndim] = j->K;
    out_shape[ndim++] = fa->out_features;
    if (rc_out_arg(c, &j->out_obj, &j->out, j->arg[A_OUT], j->parts[0][0], ndim, out_shape,
                   fa->values_dtype) != 0)
        return -1;
    fa->out = j->out.data;
    if (!j->return_mask) return 0;
    if (rc_alloc_array(c, &j->mask_obj, &j->mask, j->parts[0][0], ndim, pad_shape, RC_BOOL) != 0)
        return -1;
    fa->is_pad = (uint8_t *)j->mask.data;
    return 0;
}

static rc_status run_cpu(void *fa, int threads) { return rc_fuse_cpu(fa, threads); }
static rc_status run_cuda(void *fa, int device, void *stream) {
    return RC_CUDA_LAUNCH(rc_fuse_cuda(fa, device, stream));
}
static const rc_kernels kernels = {run_cpu, run_cuda};

/* Content per stream, as resample checks it (always on the CPU; on the GPU when asked: a host
 * sync), then the one launch for every stream. */
static int run(rc_call *c, job *j) {
    const rc_fuse_args *fa = &j->fa;
    int check;
    if (rc_parse_flag(&check, j->arg[A_CHECK], 0) != 0) return -1;
    if (check || c->device_type != RC_DEVICE_CUDA) {
        rc_resample_args ras[K_MAX];
        const char *label_of[K_MAX];
        for (int k = 0; k < j->K; k++) {
            as_resample(&ras[k], fa, k);
            label_of[k] = j->labels[k];
        }
        if (rc_check_resample(c, j->parts[0][0], ras, j->K, j->ragged, label_of) != 0) return -1;
    }
    return rc_run(c, &kernels, &j->fa,
                  fa->batch * fa->targets > 0 && (fa->out_features > 0 || fa->is_pad));
}

static PyObject *fuse(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    job j;
    memset(j.keys, 0, sizeof j.keys);
    memset(&j.fa, 0, sizeof j.fa);
    j.unbatched = 0;
    j.out_obj = j.mask_obj = NULL;
    if (parse(st, &j, args, nargs, kwnames) != 0) return NULL;
    rc_call call;
    rc_call_init(&call, st, j.arg[A_STREAM]);
    PyObject *result = NULL;
    if (import_inputs(&call, &j) == 0 && allocate_outputs(&call, &j) == 0 && run(&call, &j) == 0) {
        result = rc_result(j.out_obj, j.mask_obj); /* (out, is_pad) with return_mask */
        j.out_obj = j.mask_obj = NULL;
    }
    rc_call_release(&call);
    Py_XDECREF(j.out_obj);
    Py_XDECREF(j.mask_obj);
    return result;
}

static PyMethodDef methods[] = {
    {"fuse", (PyCFunction)(void (*)(void))fuse, METH_FASTCALL | METH_KEYWORDS, fuse_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_fuse_op = {RC_OP_FUSE, methods, names, N_NAMES};
