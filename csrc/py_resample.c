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

static int parse_args(rc_state *st, PyObject **slot, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
    PyObject *const names[A_COUNT] = {st->kw_values, st->kw_times, st->kw_new_times,
                                      st->kw_mode, st->kw_offsets, st->kw_index,
                                      st->kw_lengths, st->kw_out, st->kw_return_mask,
                                      st->kw_tolerance, st->kw_check, st->kw_stream};
    static const int required[] = {A_VALUES, A_TIMES, A_NEW_TIMES};
    static const rc_signature sig = {"resample", "values, times, new_times", 3, required, 3};
    return rc_parse_slots(slot, names, A_COUNT, &sig, args, nargs, kwnames);
}

PyObject *rc_py_resample(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    PyObject *a_[A_COUNT];
    if (parse_args(st, a_, args, nargs, kwnames) != 0) return NULL;

    rc_mode mode = RC_LINEAR;
    int return_mask, check;
    double tolerance;
    if (a_[A_MODE] && rc_parse_mode(st, &mode, a_[A_MODE], "mode") != 0) return NULL;
    if (rc_parse_flag(&return_mask, a_[A_RETURN_MASK], 0) != 0) return NULL;
    if (rc_parse_tolerance(&tolerance, a_[A_TOLERANCE]) != 0) return NULL;
    const int ragged = !rc_is_none(a_[A_OFFSETS]) || !rc_is_none(a_[A_INDEX]);
    if (ragged && (rc_is_none(a_[A_OFFSETS]) || rc_is_none(a_[A_INDEX]))) {
        PyErr_SetString(PyExc_ValueError,
                        "offsets and index: the ragged form needs both (offsets [E+1] and "
                        "index [B])");
        return NULL;
    }
    if (ragged && !rc_is_none(a_[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError,
                        "lengths: only for the dense form; ragged episodes are delimited by "
                        "offsets");
        return NULL;
    }

    rc_call call;
    rc_call_init(&call, st, a_[A_STREAM]);
    rc_tensor values, times, new_times, offsets, index, lengths, out, mask;
    PyObject *out_obj = NULL, *mask_obj = NULL;
    rc_resample_args ra;
    memset(&ra, 0, sizeof ra);

    if (rc_import_array(&call, &values, a_[A_VALUES], "values", 0) != 0) goto fail;
    if (rc_import_array(&call, &times, a_[A_TIMES], "times", 0) != 0) goto fail;
    if (rc_import_array(&call, &new_times, a_[A_NEW_TIMES], "new_times", 0) != 0) goto fail;

    /* ---- shapes: which form, B, S/N, T, and where the feature dims start ---- */
    int lead; /* dims of values before the features */
    int unbatched = 0;
    if (rc_expect_times_dtype(&times, "times")) goto fail;
    if (new_times.dtype != times.dtype) {
        PyErr_Format(PyExc_TypeError, "new_times: expected the dtype of times (%s), got %s",
                     rc_dtype_name(times.dtype), rc_dtype_name(new_times.dtype));
        goto fail;
    }
    if (ragged) {
        if (rc_import_array(&call, &offsets, a_[A_OFFSETS], "offsets", 0) != 0) goto fail;
        if (rc_import_array(&call, &index, a_[A_INDEX], "index", 0) != 0) goto fail;
        if (rc_expect_dtype(&offsets, RC_I64, "offsets") ||
            rc_expect_dtype(&index, RC_I64, "index"))
            goto fail;
        if (rc_expect_ndim(&times, 1, "times", "[N] for the ragged form") ||
            rc_expect_ndim(&offsets, 1, "offsets", "[E+1]") ||
            rc_expect_ndim(&index, 1, "index", "[B]") ||
            rc_expect_ndim(&new_times, 2, "new_times", "[B, T]"))
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
        if (rc_expect_ndim(&new_times, 2, "new_times", "[B, T] (times is [B, S])")) goto fail;
        lead = 2;
    } else if (times.ndim == 1) {
        unbatched = 1;
        ra.batch = 1;
        ra.samples = times.shape[0];
        ra.times_stride_s = times.strides[0];
        if (rc_expect_ndim(&new_times, 1, "new_times", "[T] (times is [S])")) goto fail;
        if (!rc_is_none(a_[A_LENGTHS])) {
            PyErr_SetString(PyExc_ValueError, "lengths: needs batched times [B, S]");
            goto fail;
        }
        lead = 1;
    } else {
        char s[128];
        PyErr_Format(PyExc_ValueError, "times: expected [B, S], [S] or ragged [N]; got shape %s",
                     rc_dims_str(s, sizeof s, times.ndim, times.shape));
        goto fail;
    }
    if (rc_expect_leading(&values, &times, lead, "values", "times")) goto fail;
    if (!unbatched && new_times.shape[0] != ra.batch) {
        PyErr_Format(PyExc_ValueError, "new_times: expected %lld rows (%s), got %lld",
                     (long long)ra.batch, ragged ? "len(index)" : "batch of times",
                     (long long)new_times.shape[0]);
        goto fail;
    }
    ra.targets = new_times.shape[new_times.ndim - 1];
    ra.new_times_stride_t = new_times.strides[new_times.ndim - 1];
    ra.new_times_stride_b = unbatched ? 0 : new_times.strides[0];

    if (!rc_is_none(a_[A_LENGTHS])) {
        if (rc_import_array(&call, &lengths, a_[A_LENGTHS], "lengths", 0) != 0) goto fail;
        if (rc_expect_dtype(&lengths, RC_I64, "lengths") ||
            rc_expect_ndim(&lengths, 1, "lengths", "[B]"))
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
    if (rc_expect_mode_dtype(st, &values, mode, "values") ||
        rc_expect_quaternions(&values, lead, mode, "values"))
        goto fail;
    if (!rc_flatten_trailing(&ra.features, &ra.values_stride_d, &values, lead)) {
        /* e.g. a permuted image [S,W,H,C]: copy once through its own framework */
        if (rc_import_contiguous(&call, &values, a_[A_VALUES], "values") != 0) goto fail;
        rc_flatten_trailing(&ra.features, &ra.values_stride_d, &values, lead);
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
    if (rc_out_arg(&call, &out_obj, &out, a_[A_OUT], a_[A_VALUES], out_ndim, out_shape,
                   values.dtype) != 0)
        goto fail;
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
    if (rc_parse_flag(&check, a_[A_CHECK], 0) != 0) goto fail;
    if ((check || !on_cuda) && rc_check_resample(&call, a_[A_VALUES], &ra, 1, ragged, NULL) != 0)
        goto fail;
    rc_status status = RC_OK;
    if (!on_cuda) {
        /* nothing to write: no features and no mask (a huge broadcast new_times would
         * otherwise search for nothing) */
        if (ra.batch * ra.targets > 0 && (ra.features > 0 || ra.is_pad)) {
            int nt = st->num_threads;
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_cpu(&ra, nt);
            Py_END_ALLOW_THREADS
        }
    } else {
#ifdef RC_WITH_CUDA
        void *stream;
        if (rc_call_stream(&call, &stream) != 0) goto fail;
        if (ra.batch * ra.targets > 0 && (ra.features > 0 || ra.is_pad)) {
            Py_BEGIN_ALLOW_THREADS
            status = rc_resample_cuda(&ra, call.device_id, stream);
            Py_END_ALLOW_THREADS
        }
#else
        rc_no_cuda_error(st, "values", call.device_id);
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
}
