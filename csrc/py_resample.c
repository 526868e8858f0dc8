/* py_resample.c: robocache.resample: argument parsing, import and validation of the arrays,
 * output allocation, dispatch to rc_resample_cpu / rc_resample_cuda.
 * Shapes (elements): dense values [B,S,...] times [B,S] new_times [B,T] (or unbatched [S,...],
 * [S], [T]); ragged values [N,...] times [N] offsets [E+1] index [B] new_times [B,T].
 * Benchmark: python benchmarks/bench_resample.py
 */
#include <math.h>
#include <string.h>

#include "module.h"

PyDoc_STRVAR(resample_doc,
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
"out, or (out, is_pad) with return_mask=True. See docs/resample.md for exact semantics.\n");

enum { A_VALUES, A_TIMES, A_NEW_TIMES, A_MODE, A_OFFSETS, A_INDEX, A_LENGTHS, A_OUT,
       A_RETURN_MASK, A_TOLERANCE, A_CHECK, A_STREAM, A_COUNT,
       N_MODES = A_COUNT, N_NAMES = N_MODES + 5 }; /* interned: the keywords, then the modes */

static const char *const names[N_NAMES] = {
    "values", "times", "new_times", "mode", "offsets", "index", "lengths", "out",
    "return_mask", "tolerance", "check", "stream", RC_MODE_NAMES};

/* One call: its arguments, the arrays it imported or made, the kernel's arguments. */
typedef struct {
    PyObject *arg[A_COUNT];       /* borrowed; NULL: not given */
    rc_mode mode;
    int return_mask, ragged, unbatched;
    int lead;                     /* dims of values before the features */
    double tolerance;
    rc_tensor values, times, new_times, offsets, index, lengths, out, mask;
    PyObject *out_obj, *mask_obj; /* new refs, or NULL */
    rc_resample_args ra;
} job;

/* Keywords and options: everything that needs no array. */
static int parse(const rc_state *st, job *j, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames) {
    static const int required[] = {A_VALUES, A_TIMES, A_NEW_TIMES};
    static const rc_signature sig = {"resample", "values, times, new_times", 3, required, 3};
    PyObject *const *name = rc_op_names(st, RC_OP_RESAMPLE);
    if (rc_parse_slots(j->arg, name, A_COUNT, &sig, args, nargs, kwnames) != 0) return -1;
    j->mode = RC_LINEAR;
    if (j->arg[A_MODE] && rc_parse_mode(&j->mode, j->arg[A_MODE], name + N_MODES, "mode") != 0)
        return -1;
    if (rc_parse_flag(&j->return_mask, j->arg[A_RETURN_MASK], 0) != 0 ||
        rc_parse_tolerance(&j->tolerance, j->arg[A_TOLERANCE]) != 0)
        return -1;
    const int offsets = !rc_is_none(j->arg[A_OFFSETS]), index = !rc_is_none(j->arg[A_INDEX]);
    j->ragged = offsets || index;
    if (j->ragged && !(offsets && index)) {
        PyErr_SetString(PyExc_ValueError,
                        "offsets and index: the ragged form needs both (offsets [E+1] and "
                        "index [B])");
        return -1;
    }
    if (j->ragged && !rc_is_none(j->arg[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError,
                        "lengths: only for the dense form; ragged episodes are delimited by "
                        "offsets");
        return -1;
    }
    return 0;
}

/* Ragged form: times [N], offsets [E+1], index [B], new_times [B, T]. */
static int import_ragged(rc_call *c, job *j) {
    rc_resample_args *ra = &j->ra;
    if (rc_import_array(c, &j->offsets, j->arg[A_OFFSETS], "offsets", 0) != 0 ||
        rc_import_array(c, &j->index, j->arg[A_INDEX], "index", 0) != 0)
        return -1;
    if (rc_expect_dtype(&j->offsets, RC_I64, "offsets") ||
        rc_expect_dtype(&j->index, RC_I64, "index"))
        return -1;
    if (rc_expect_ndim(&j->times, 1, "times", "[N] for the ragged form") ||
        rc_expect_ndim(&j->offsets, 1, "offsets", "[E+1]") ||
        rc_expect_ndim(&j->index, 1, "index", "[B]") ||
        rc_expect_ndim(&j->new_times, 2, "new_times", "[B, T]"))
        return -1;
    if (j->offsets.shape[0] < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets: expected [E+1] with at least one entry");
        return -1;
    }
    ra->batch = j->index.shape[0];
    ra->samples = j->times.shape[0];
    ra->episodes = j->offsets.shape[0] - 1;
    ra->offsets = (const int64_t *)j->offsets.data;
    ra->offsets_stride = j->offsets.strides[0];
    ra->index = (const int64_t *)j->index.data;
    ra->index_stride = j->index.strides[0];
    ra->times_stride_s = j->times.strides[0];
    j->lead = 1;
    return 0;
}

/* Dense form: times [B, S] with new_times [B, T], or one row: times [S] with new_times [T]. */
static int dense_form(job *j) {
    rc_resample_args *ra = &j->ra;
    const rc_tensor *t = &j->times;
    if (t->ndim == 2) {
        ra->batch = t->shape[0];
        ra->samples = t->shape[1];
        ra->times_stride_b = t->strides[0];
        ra->times_stride_s = t->strides[1];
        j->lead = 2;
        return rc_expect_ndim(&j->new_times, 2, "new_times", "[B, T] (times is [B, S])");
    }
    if (t->ndim == 1) {
        j->unbatched = 1;
        ra->batch = 1;
        ra->samples = t->shape[0];
        ra->times_stride_s = t->strides[0];
        j->lead = 1;
        if (rc_expect_ndim(&j->new_times, 1, "new_times", "[T] (times is [S])")) return -1;
        if (!rc_is_none(j->arg[A_LENGTHS])) {
            PyErr_SetString(PyExc_ValueError, "lengths: needs batched times [B, S]");
            return -1;
        }
        return 0;
    }
    char s[128];
    PyErr_Format(PyExc_ValueError, "times: expected [B, S], [S] or ragged [N]; got shape %s",
                 rc_dims_str(s, sizeof s, t->ndim, t->shape));
    return -1;
}

/* lengths [B] of the dense form, when given. */
static int import_lengths(rc_call *c, job *j) {
    if (rc_is_none(j->arg[A_LENGTHS])) return 0;
    const rc_tensor *l = &j->lengths;
    if (rc_import_array(c, &j->lengths, j->arg[A_LENGTHS], "lengths", 0) != 0) return -1;
    if (rc_expect_dtype(l, RC_I64, "lengths") || rc_expect_ndim(l, 1, "lengths", "[B]"))
        return -1;
    if (l->shape[0] != j->ra.batch) {
        PyErr_Format(PyExc_ValueError, "lengths: expected [%lld], got [%lld]",
                     (long long)j->ra.batch, (long long)l->shape[0]);
        return -1;
    }
    j->ra.lengths = (const int64_t *)l->data;
    j->ra.lengths_stride = l->strides[0];
    return 0;
}

/* values: dtype against the mode, features flattened (copied once when they cannot be). */
static int values_features(rc_call *c, job *j) {
    rc_resample_args *ra = &j->ra;
    rc_tensor *v = &j->values;
    if (rc_expect_mode_dtype(v, j->mode, "values") ||
        rc_expect_quaternions(v, j->lead, j->mode, "values"))
        return -1;
    if (!rc_flatten_trailing(&ra->features, &ra->values_stride_d, v, j->lead)) {
        /* e.g. a permuted image [S,W,H,C]: copy once through its own framework */
        if (rc_import_contiguous(c, v, j->arg[A_VALUES], "values") != 0) return -1;
        rc_flatten_trailing(&ra->features, &ra->values_stride_d, v, j->lead);
    }
    ra->values = v->data;
    ra->values_dtype = v->dtype;
    ra->values_stride_s = v->strides[j->lead - 1];
    ra->values_stride_b = (j->lead == 2) ? v->strides[0] : 0;
    ra->times = j->times.data;
    ra->times_dtype = j->times.dtype;
    ra->new_times = j->new_times.data;
    ra->mode = j->mode;
    ra->tolerance = j->times.dtype == RC_I64 ? j->tolerance * 1e9 : j->tolerance;
    return 0;
}

/* Every input array: the form (ragged, dense, one row), B, S/N, T and the features. */
static int import_inputs(rc_call *c, job *j) {
    rc_resample_args *ra = &j->ra;
    if (rc_import_array(c, &j->values, j->arg[A_VALUES], "values", 0) != 0 ||
        rc_import_array(c, &j->times, j->arg[A_TIMES], "times", 0) != 0 ||
        rc_import_array(c, &j->new_times, j->arg[A_NEW_TIMES], "new_times", 0) != 0)
        return -1;
    if (rc_expect_times_dtype(&j->times, "times")) return -1;
    if (j->new_times.dtype != j->times.dtype) {
        PyErr_Format(PyExc_TypeError, "new_times: expected the dtype of times (%s), got %s",
                     rc_dtype_name(j->times.dtype), rc_dtype_name(j->new_times.dtype));
        return -1;
    }
    if ((j->ragged ? import_ragged(c, j) : dense_form(j)) != 0) return -1;
    if (rc_expect_leading(&j->values, &j->times, j->lead, "values", "times")) return -1;
    const rc_tensor *nt = &j->new_times;
    if (!j->unbatched && nt->shape[0] != ra->batch) {
        PyErr_Format(PyExc_ValueError, "new_times: expected %lld rows (%s), got %lld",
                     (long long)ra->batch, j->ragged ? "len(index)" : "batch of times",
                     (long long)nt->shape[0]);
        return -1;
    }
    ra->targets = nt->shape[nt->ndim - 1];
    ra->new_times_stride_t = nt->strides[nt->ndim - 1];
    ra->new_times_stride_b = j->unbatched ? 0 : nt->strides[0];
    if (import_lengths(c, j) != 0) return -1;
    return values_features(c, j);
}

/* out [B, T, ...] (or [T, ...]) and, with return_mask, is_pad [B, T] (or [T]). */
static int allocate_outputs(rc_call *c, job *j) {
    int64_t shape[RC_MAX_DIMS + 1];
    int ndim = 0;
    if (!j->unbatched) shape[ndim++] = j->ra.batch;
    shape[ndim++] = j->ra.targets;
    for (int d = j->lead; d < j->values.ndim; d++) shape[ndim++] = j->values.shape[d];
    if (ndim > RC_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "values: too many dims for the output (max %d)",
                     RC_MAX_DIMS);
        return -1;
    }
    if (rc_out_arg(c, &j->out_obj, &j->out, j->arg[A_OUT], j->arg[A_VALUES], ndim, shape,
                   j->values.dtype) != 0)
        return -1;
    j->ra.out = j->out.data;
    if (!j->return_mask) return 0;
    if (rc_alloc_array(c, &j->mask_obj, &j->mask, j->arg[A_VALUES], j->unbatched ? 1 : 2, shape,
                       RC_BOOL) != 0)
        return -1;
    j->ra.is_pad = (uint8_t *)j->mask.data;
    return 0;
}

static rc_status run_cpu(void *ra, int threads) { return rc_resample_cpu(ra, threads); }
static rc_status run_cuda(void *ra, int device, void *stream) {
    return RC_CUDA_LAUNCH(rc_resample_cuda(ra, device, stream));
}
static const rc_kernels kernels = {run_cpu, run_cuda};

/* Content, then the kernel. Content is always checked on the CPU (cheap next to the work); on
 * the GPU only when asked, since reading the verdict back is a host sync. */
static int run(rc_call *c, job *j) {
    const rc_resample_args *ra = &j->ra;
    int check;
    if (rc_parse_flag(&check, j->arg[A_CHECK], 0) != 0) return -1;
    if ((check || c->device_type != RC_DEVICE_CUDA) &&
        rc_check_resample(c, j->arg[A_VALUES], ra, 1, j->ragged, NULL) != 0)
        return -1;
    /* nothing to write: no features and no mask (a huge broadcast new_times would otherwise
     * search for nothing) */
    return rc_run(c, &kernels, &j->ra, ra->batch * ra->targets > 0 && (ra->features > 0 || ra->is_pad));
}

static PyObject *resample(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    job j;
    memset(&j, 0, sizeof j);
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
    {"resample", (PyCFunction)(void (*)(void))resample, METH_FASTCALL | METH_KEYWORDS, resample_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_resample_op = {RC_OP_RESAMPLE, methods, names, N_NAMES};
