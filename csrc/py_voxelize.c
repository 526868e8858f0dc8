/* py_voxelize.c: robocache.voxelize: argument parsing, validation, output and workspace
 * allocation, dispatch to rc_voxelize_cpu / rc_voxelize_cuda.
 * Shapes (elements): points dense [B,N,3] (+ lengths [B]), ragged [P,3] + offsets [B+1], or one
 * cloud [N,3]; features the same with a last dim F; out [B,X,Y,Z] or [B,F,X,Y,Z].
 * Benchmark: python benchmarks/bench_voxelize.py
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "module.h"

const char rc_voxelize_doc_text[] =
"voxelize(points, *, features=None, lengths=None, offsets=None, grid, voxel_size, origin,\n"
"         mode='occupancy', dtype=None, out=None, deterministic=True, return_dropped=False,\n"
"         check=None, stream=None)\n"
"--\n"
"\n"
"Point clouds to dense voxel grids, on the inputs' device.\n"
"\n"
"Parameters\n"
"----------\n"
"points : array [B,N,3] (dense), [P,3] with offsets (ragged) or [N,3] (one cloud)\n"
"    x, y, z in float32, float64, float16 or bfloat16. Any DLPack array (torch, numpy, cupy).\n"
"features : array [B,N,F], [P,F] or [N,F], optional\n"
"    Float values reduced per voxel by modes 'sum', 'mean' and 'max' (required there).\n"
"lengths : int64 array [B], optional\n"
"    Dense form: cloud b is only its first lengths[b] points (the rest is padding).\n"
"offsets : int64 array [B+1], optional\n"
"    Ragged form: cloud b is points[offsets[b]:offsets[b+1]].\n"
"grid : (X, Y, Z) ints, or one int for a cube\n"
"voxel_size : float or (sx, sy, sz)\n"
"    Edge of a voxel per axis, > 0.\n"
"origin : (ox, oy, oz)\n"
"    Corner of voxel (0, 0, 0). Voxel of p: floor((p - origin) / voxel_size) per axis,\n"
"    in float64; kept when 0 <= index < grid, else dropped (also NaN/inf points).\n"
"mode : {'occupancy', 'count', 'sum', 'mean', 'max'}\n"
"dtype : optional\n"
"    Output dtype. occupancy: float32 (default), float64, float16, bfloat16, uint8, bool;\n"
"    count: int32 (default), int64; sum/mean/max: float32 (default; float64 when features\n"
"    are float64), float64.\n"
"out : array, optional\n"
"    C-contiguous, writable, the output's shape and dtype; written in place and returned.\n"
"deterministic : bool\n"
"    True (default): bitwise reproducible on CPU and GPU, CPU == GPU (sum/mean accumulate in\n"
"    64-bit fixed point). False: sum/mean may use float atomics on the GPU.\n"
"return_dropped : bool\n"
"    Also return dropped [B] int64: points of each cloud outside the grid or not finite.\n"
"check : bool or None\n"
"    Validate offsets/lengths content. Always on the CPU; on the GPU only when True (a sync).\n"
"stream : int or stream object, optional\n"
"    CUDA stream to run on; default: the framework's current stream.\n"
"\n"
"Returns\n"
"-------\n"
"out [B,X,Y,Z] (occupancy, count) or [B,F,X,Y,Z] (sum, mean, max), out[b, x, y, z] being voxel\n"
"(x, y, z) of cloud b; without the B dim for one cloud. (out, dropped) with return_dropped.\n"
"See docs/voxelize.md for exact semantics.\n";

enum { A_POINTS, A_FEATURES, A_LENGTHS, A_OFFSETS, A_GRID, A_VOXEL_SIZE, A_ORIGIN, A_MODE,
       A_DTYPE, A_OUT, A_DETERMINISTIC, A_RETURN_DROPPED, A_CHECK, A_STREAM, A_COUNT };

static int parse_args(rc_state *st, PyObject **slot, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
    PyObject *const names[A_COUNT] = {st->kw_points, st->kw_features, st->kw_lengths,
                                      st->kw_offsets, st->kw_grid, st->kw_voxel_size,
                                      st->kw_origin, st->kw_mode, st->kw_dtype, st->kw_out,
                                      st->kw_deterministic, st->kw_return_dropped,
                                      st->kw_check, st->kw_stream};
    static const int required[] = {A_POINTS, A_GRID, A_VOXEL_SIZE, A_ORIGIN};
    static const rc_signature sig = {"voxelize", "points", 1, required, 4};
    return rc_parse_slots(slot, names, A_COUNT, &sig, args, nargs, kwnames);
}

static int parse_mode(rc_state *st, rc_vox_mode *mode, PyObject *obj) {
    *mode = RC_VOX_OCCUPANCY;
    if (!obj) return 0;
    int m = rc_name_index(obj, st->vox_mode_names, "mode",
                          "'occupancy', 'count', 'sum', 'mean' or 'max'");
    if (m < 0) return -1;
    *mode = (rc_vox_mode)m;
    return 0;
}

/* dtype= as a str ('uint8'), a numpy dtype or type (np.uint8), a torch dtype (torch.uint8) or
 * the Python type bool. *dt = -1 for None. */
static int parse_dtype(int *dt, PyObject *obj) {
    *dt = -1;
    if (rc_is_none(obj)) return 0;
    PyObject *s = NULL;
    if (PyUnicode_Check(obj)) {
        s = obj;
        Py_INCREF(s);
    } else if (PyType_Check(obj)) {
        s = PyObject_GetAttrString(obj, "__name__"); /* np.uint8, np.bool_, bool */
    } else {
        s = PyObject_GetAttrString(obj, "name"); /* np.dtype */
        if (!s || !PyUnicode_Check(s)) {
            PyErr_Clear();
            Py_XDECREF(s);
            s = PyObject_Str(obj); /* torch.uint8 */
        }
    }
    if (!s) return -1;
    const char *name = PyUnicode_AsUTF8(s);
    if (!name) {
        Py_DECREF(s);
        return -1;
    }
    if (strncmp(name, "torch.", 6) == 0) name += 6;
    size_t n = strlen(name);
    for (int t = 0; t < RC_NUM_DTYPES; t++) {
        const char *want = rc_dtype_name((rc_dtype)t);
        if (strcmp(name, want) == 0 || (n == strlen(want) + 1 && name[n - 1] == '_' &&
                                        strncmp(name, want, n - 1) == 0)) {
            *dt = t;
            Py_DECREF(s);
            return 0;
        }
    }
    PyErr_Format(PyExc_TypeError, "dtype: expected a dtype name such as 'float32' or 'uint8', "
                 "got %R", obj);
    Py_DECREF(s);
    return -1;
}

/* Three floats, or one (broadcast) when scalar_ok. */
static int parse_vec3(double v[3], PyObject *obj, const char *name, int scalar_ok) {
    if (scalar_ok && (PyFloat_Check(obj) || PyLong_Check(obj) ||
                      (PyNumber_Check(obj) && !PySequence_Check(obj)))) {
        double x = PyFloat_AsDouble(obj);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        v[0] = v[1] = v[2] = x;
        return 0;
    }
    PyObject *seq = PySequence_Check(obj) ? PySequence_Fast(obj, "") : NULL;
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 3) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected %s3 numbers (x, y, z), got %.100s", name,
                     scalar_ok ? "a number or " : "", Py_TYPE(obj)->tp_name);
        return -1;
    }
    for (int k = 0; k < 3; k++) {
        v[k] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, k));
        if (v[k] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: expected %s3 numbers (x, y, z), got %R", name,
                         scalar_ok ? "a number or " : "", obj);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static int parse_grid(int64_t g[3], PyObject *obj) {
    PyObject *items[3] = {NULL, NULL, NULL};
    PyObject *seq = NULL;
    if (PyIndex_Check(obj) && !PySequence_Check(obj)) {
        items[0] = items[1] = items[2] = obj;
    } else {
        seq = PySequence_Check(obj) ? PySequence_Fast(obj, "") : NULL;
        if (!seq || PySequence_Fast_GET_SIZE(seq) != 3) {
            Py_XDECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "grid: expected (X, Y, Z) ints or one int, got %R", obj);
            return -1;
        }
        for (int k = 0; k < 3; k++) items[k] = PySequence_Fast_GET_ITEM(seq, k);
    }
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        PyObject *i = PyNumber_Index(items[k]);
        long long x = i ? PyLong_AsLongLong(i) : -1;
        Py_XDECREF(i);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "grid: expected (X, Y, Z) ints, got %R", obj);
            rc = -1;
        } else if (x < 1) {
            PyErr_Format(PyExc_ValueError, "grid: every axis needs at least 1 voxel, got %R", obj);
            rc = -1;
        } else {
            g[k] = (int64_t)x;
        }
    }
    Py_XDECREF(seq);
    return rc;
}

static int expect_int64_vector(const rc_tensor *v, const char *name, int64_t len,
                               const char *what) {
    if (rc_expect_dtype(v, RC_I64, name)) return -1;
    if (v->ndim != 1 || (len >= 0 && v->shape[0] != len)) return rc_shape_error(v, name, what);
    return 0;
}

static int64_t mul_or_neg(int64_t a, int64_t b) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
    return r;
}

/* The output is about to be allocated: a clear error naming grid instead of the framework's. */
static int allocate_named(rc_call *c, PyObject **obj, rc_tensor *view, PyObject *like, int ndim,
                          const int64_t *shape, rc_dtype dt, const char *what) {
    if (rc_alloc_array(c, obj, view, like, ndim, shape, dt) == 0) return 0;
    if (PyErr_ExceptionMatches(PyExc_MemoryError) || PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        char s[160];
        PyErr_Format(PyExc_MemoryError, "%s: cannot allocate %s %s: %S", what,
                     rc_dtype_name(dt), rc_dims_str(s, sizeof s, ndim, shape),
                     value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return -1;
}

static int64_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page : INT64_MAX;
}

PyObject *rc_py_voxelize(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    PyObject *a_[A_COUNT];
    if (parse_args(st, a_, args, nargs, kwnames) != 0) return NULL;

    rc_vox_mode mode;
    int dtype_arg, deterministic, return_dropped, check;
    rc_voxelize_args va;
    memset(&va, 0, sizeof va);
    if (parse_mode(st, &mode, a_[A_MODE]) != 0 || parse_dtype(&dtype_arg, a_[A_DTYPE]) != 0 ||
        rc_parse_flag(&deterministic, a_[A_DETERMINISTIC], 1) != 0 ||
        rc_parse_flag(&return_dropped, a_[A_RETURN_DROPPED], 0) != 0 ||
        parse_grid(va.grid, a_[A_GRID]) != 0 ||
        parse_vec3(va.voxel_size, a_[A_VOXEL_SIZE], "voxel_size", 1) != 0 ||
        parse_vec3(va.origin, a_[A_ORIGIN], "origin", 0) != 0)
        return NULL;
    for (int k = 0; k < 3; k++) {
        if (!(va.voxel_size[k] > 0.0 && isfinite(va.voxel_size[k]))) {
            PyErr_Format(PyExc_ValueError, "voxel_size: expected finite sizes > 0, got %R",
                         a_[A_VOXEL_SIZE]);
            return NULL;
        }
        if (!isfinite(va.origin[k])) {
            PyErr_Format(PyExc_ValueError, "origin: expected finite numbers, got %R",
                         a_[A_ORIGIN]);
            return NULL;
        }
    }
    const int feat_mode = mode >= RC_VOX_SUM;
    const int ragged = !rc_is_none(a_[A_OFFSETS]);
    if (ragged && !rc_is_none(a_[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError,
                        "lengths: only for the dense form [B, N, 3]; ragged clouds are delimited "
                        "by offsets");
        return NULL;
    }
    if (feat_mode && rc_is_none(a_[A_FEATURES])) {
        PyErr_Format(PyExc_ValueError,
                     "features: mode '%U' reduces features per voxel; pass features [B, N, F] "
                     "(or [P, F] with offsets)",
                     st->vox_mode_names[mode]);
        return NULL;
    }
    if (!feat_mode && !rc_is_none(a_[A_FEATURES])) {
        PyErr_Format(PyExc_ValueError,
                     "features: mode '%U' does not use features; use mode 'sum', 'mean' or "
                     "'max'",
                     st->vox_mode_names[mode]);
        return NULL;
    }

    rc_call call;
    rc_call_init(&call, st, a_[A_STREAM]);
    rc_tensor points, features, lengths, offsets, out, dropped, ws;
    PyObject *out_obj = NULL, *dropped_obj = NULL, *ws_obj = NULL;
    char s1[160], s2[160];

    if (rc_import_array(&call, &points, a_[A_POINTS], "points", 0) != 0) goto fail;
    if (!rc_dtype_is_float(points.dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "points: expected float32, float64, float16 or bfloat16 coordinates, got %s",
                     rc_dtype_name(points.dtype));
        goto fail;
    }
    /* ---- form: dense [B,N,3], ragged [P,3] + offsets, one cloud [N,3] ---- */
    int unbatched = 0;
    if (ragged || points.ndim == 2) {
        if (points.ndim != 2) {
            PyErr_Format(PyExc_ValueError,
                         "points: the ragged form (offsets given) expects [P, 3], got shape %s",
                         rc_dims_str(s1, sizeof s1, points.ndim, points.shape));
            goto fail;
        }
        unbatched = !ragged;
    } else if (points.ndim != 3) {
        PyErr_Format(PyExc_ValueError,
                     "points: expected [B, N, 3], [N, 3], or [P, 3] with offsets; got shape %s",
                     rc_dims_str(s1, sizeof s1, points.ndim, points.shape));
        goto fail;
    }
    if (points.shape[points.ndim - 1] != 3) {
        PyErr_Format(PyExc_ValueError,
                     "points: expected x, y, z in a last dim of 3, got shape %s",
                     rc_dims_str(s1, sizeof s1, points.ndim, points.shape));
        goto fail;
    }
    if (unbatched && !rc_is_none(a_[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError, "lengths: needs batched points [B, N, 3]");
        goto fail;
    }
    const int lead = points.ndim - 1; /* dims before xyz */
    if (ragged) {
        if (rc_import_array(&call, &offsets, a_[A_OFFSETS], "offsets", 0) != 0 ||
            expect_int64_vector(&offsets, "offsets", -1, "[B+1]"))
            goto fail;
        if (offsets.shape[0] < 1) {
            PyErr_SetString(PyExc_ValueError, "offsets: expected [B+1] with at least one entry");
            goto fail;
        }
        va.batch = offsets.shape[0] - 1;
        va.points_per_cloud = points.shape[0];
        va.offsets = (const int64_t *)offsets.data;
        va.offsets_stride = offsets.strides[0];
        va.points_stride_n = points.strides[0];
    } else if (unbatched) {
        va.batch = 1;
        va.points_per_cloud = points.shape[0];
        va.points_stride_n = points.strides[0];
    } else {
        va.batch = points.shape[0];
        va.points_per_cloud = points.shape[1];
        va.points_stride_b = points.strides[0];
        va.points_stride_n = points.strides[1];
        if (!rc_is_none(a_[A_LENGTHS])) {
            if (rc_import_array(&call, &lengths, a_[A_LENGTHS], "lengths", 0) != 0 ||
                expect_int64_vector(&lengths, "lengths", va.batch, "[B] (B = points.shape[0])"))
                goto fail;
            va.lengths = (const int64_t *)lengths.data;
            va.lengths_stride = lengths.strides[0];
        }
    }
    va.points_stride_c = points.strides[lead];
    va.points = points.data;
    va.points_dtype = points.dtype;

    /* ---- features ---- */
    if (feat_mode) {
        if (rc_import_array(&call, &features, a_[A_FEATURES], "features", 0) != 0) goto fail;
        if (!rc_dtype_is_float(features.dtype)) {
            PyErr_Format(PyExc_TypeError,
                         "features: expected a float dtype (float32, float64, float16, "
                         "bfloat16), got %s",
                         rc_dtype_name(features.dtype));
            goto fail;
        }
        int same = features.ndim == points.ndim;
        for (int d = 0; same && d < lead; d++) same = features.shape[d] == points.shape[d];
        if (!same) {
            PyErr_Format(PyExc_ValueError,
                         "features: expected the leading dims of points plus F, i.e. [%s..., F], "
                         "got shape %s (points %s)",
                         lead == 2 ? "B, N, " : "N, ",
                         rc_dims_str(s1, sizeof s1, features.ndim, features.shape),
                         rc_dims_str(s2, sizeof s2, points.ndim, points.shape));
            goto fail;
        }
        va.features = features.data;
        va.features_dtype = features.dtype;
        va.channels = features.shape[lead];
        va.features_stride_b = lead == 2 ? features.strides[0] : 0;
        va.features_stride_n = features.strides[lead - 1];
        va.features_stride_c = features.strides[lead];
    }

    /* ---- output dtype and shape ---- */
    rc_dtype out_dt;
    if (mode == RC_VOX_OCCUPANCY) {
        out_dt = dtype_arg < 0 ? RC_F32 : (rc_dtype)dtype_arg;
        if (!(rc_dtype_is_float(out_dt) || out_dt == RC_U8 || out_dt == RC_BOOL)) {
            PyErr_Format(PyExc_TypeError,
                         "dtype: mode 'occupancy' writes float32 (default), float64, float16, "
                         "bfloat16, uint8 or bool, got %s",
                         rc_dtype_name(out_dt));
            goto fail;
        }
    } else if (mode == RC_VOX_COUNT) {
        out_dt = dtype_arg < 0 ? RC_I32 : (rc_dtype)dtype_arg;
        if (out_dt != RC_I32 && out_dt != RC_I64) {
            PyErr_Format(PyExc_TypeError,
                         "dtype: mode 'count' writes int32 (default) or int64, got %s",
                         rc_dtype_name(out_dt));
            goto fail;
        }
    } else {
        out_dt = dtype_arg >= 0 ? (rc_dtype)dtype_arg : va.features_dtype == RC_F64 ? RC_F64 : RC_F32;
        if (out_dt != RC_F32 && out_dt != RC_F64) {
            PyErr_Format(PyExc_TypeError, "dtype: mode '%U' writes float32 or float64, got %s",
                         st->vox_mode_names[mode], rc_dtype_name(out_dt));
            goto fail;
        }
    }
    va.out_dtype = out_dt;
    va.mode = mode;
    va.deterministic = deterministic;

    int64_t out_shape[5];
    int out_ndim = 0;
    if (!unbatched) out_shape[out_ndim++] = va.batch;
    if (feat_mode) out_shape[out_ndim++] = va.channels;
    for (int k = 0; k < 3; k++) out_shape[out_ndim++] = va.grid[k];
    int64_t out_bytes = rc_dtype_size(out_dt);
    for (int d = 0; d < out_ndim; d++) out_bytes = mul_or_neg(out_bytes, out_shape[d]);
    if (out_bytes < 0 || out_bytes > ((int64_t)1 << 52)) {
        PyErr_Format(PyExc_ValueError,
                     "grid: (%lld, %lld, %lld) voxels make an output %s of %s far beyond any "
                     "memory; use a coarser voxel_size or a smaller grid",
                     (long long)va.grid[0], (long long)va.grid[1], (long long)va.grid[2],
                     rc_dims_str(s1, sizeof s1, out_ndim, out_shape), rc_dtype_name(out_dt));
        goto fail;
    }
    va.workspace = NULL;
    const int64_t slots = ragged ? va.points_per_cloud : va.batch * va.points_per_cloud;
    if (feat_mode && va.channels > 0 && slots >= (int64_t)INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "points: %lld points in one call; modes sum/mean/max handle fewer than "
                     "2^31 (split the batch)",
                     (long long)slots);
        goto fail;
    }
    const int64_t cells = feat_mode ? mul_or_neg(slots, va.channels) : 0;
    if (cells < 0 || cells > ((int64_t)1 << 48)) { /* keeps the workspace size in int64 */
        PyErr_Format(PyExc_ValueError,
                     "features: %lld points x %lld channels need a workspace far beyond any "
                     "memory (split the batch or the channels)",
                     (long long)slots, (long long)va.channels);
        goto fail;
    }
    const int on_cuda = call.device_type == RC_DEVICE_CUDA;
    va.cuda_layout = on_cuda; /* the CUDA kernels' own workspace (voxelize_math.h) */
    const int64_t ws_bytes = rc_voxelize_workspace_size(&va);
    if (!on_cuda && out_bytes + ws_bytes > physical_memory()) {
        PyErr_Format(PyExc_MemoryError,
                     "grid: (%lld, %lld, %lld) voxels make an output %s of %s (%lld bytes), more "
                     "than this machine's memory",
                     (long long)va.grid[0], (long long)va.grid[1], (long long)va.grid[2],
                     rc_dims_str(s1, sizeof s1, out_ndim, out_shape), rc_dtype_name(out_dt),
                     (long long)out_bytes);
        goto fail;
    }

    /* ---- outputs ---- */
    if (!rc_is_none(a_[A_OUT])) {
        if (rc_import_array(&call, &out, a_[A_OUT], "out", 1) != 0) goto fail;
        if (out.dtype != out_dt) { /* names the mode and where the dtype came from */
            PyErr_Format(PyExc_TypeError, "out: expected dtype %s (mode '%U'%s), got %s",
                         rc_dtype_name(out_dt), st->vox_mode_names[mode],
                         dtype_arg >= 0 ? ", dtype=" : ", default dtype",
                         rc_dtype_name(out.dtype));
            goto fail;
        }
        if (rc_expect_out(&out, out_ndim, out_shape) || rc_expect_no_alias(&call, "out"))
            goto fail;
        out_obj = a_[A_OUT];
        Py_INCREF(out_obj);
    } else if (allocate_named(&call, &out_obj, &out, a_[A_POINTS], out_ndim, out_shape, out_dt,
                              "grid") != 0) {
        goto fail;
    }
    va.out = out.data;
    if (return_dropped) {
        if (rc_alloc_array(&call, &dropped_obj, &dropped, a_[A_POINTS], unbatched ? 0 : 1,
                           &va.batch, RC_I64) != 0)
            goto fail;
        va.dropped = (int64_t *)dropped.data;
    }
    if (ws_bytes > 0) {
        int64_t words = (ws_bytes + 7) / 8;
        if (allocate_named(&call, &ws_obj, &ws, a_[A_POINTS], 1, &words, RC_I64,
                           "points (workspace of sum/mean/max, or occupancy's bitmap)") != 0)
            goto fail;
        va.workspace = ws.data;
    }

    /* ---- content check and dispatch ---- */
    if (rc_parse_flag(&check, a_[A_CHECK], !on_cuda) != 0) goto fail;
    if (!on_cuda) check = 1; /* O(B) on the CPU: always */
    rc_status status = RC_OK;
    rc_check_result verdict = {0, 0, 0};
    void *stream = NULL;
    if (on_cuda) {
#ifdef RC_WITH_CUDA
        if (rc_call_stream(&call, &stream) != 0) goto fail;
        if (call.stream_arg && ws_bytes > 0) {
            /* the workspace (slots, or occupancy's bitmap) goes back to the framework's
             * allocator when we return; it orders reuse on the framework's current stream, so a
             * different stream= must finish before then */
            void *current = NULL;
            va.sync = !(call.api && call.api->current_work_stream &&
                        call.api->current_work_stream(kDLCUDA, call.device_id, &current) == 0 &&
                        current == stream);
        }
        if (check) {
            Py_BEGIN_ALLOW_THREADS
            status = rc_voxelize_check_cuda(&verdict, &va, call.device_id, stream);
            Py_END_ALLOW_THREADS
        }
#else
        rc_no_cuda_error(st, "points", call.device_id);
        goto fail;
#endif
    } else {
        status = rc_voxelize_check_cpu(&verdict, &va);
    }
    if (status != RC_OK) { rc_raise_status(st, status); goto fail; }
    if (verdict.kind == RC_CHECK_OFFSETS) {
        PyErr_Format(PyExc_ValueError,
                     "offsets must start at 0, never decrease and end at P=%lld (len(points)); "
                     "bad at position %lld",
                     (long long)va.points_per_cloud, (long long)verdict.row);
        goto fail;
    }
    if (verdict.kind == RC_CHECK_LENGTHS) {
        PyErr_Format(PyExc_ValueError, "lengths[%lld] is outside [0, %lld] (points per cloud)",
                     (long long)verdict.row, (long long)va.points_per_cloud);
        goto fail;
    }
    if (on_cuda) {
#ifdef RC_WITH_CUDA
        Py_BEGIN_ALLOW_THREADS
        status = rc_voxelize_cuda(&va, call.device_id, stream);
        Py_END_ALLOW_THREADS
#endif
    } else {
        int nt = st->num_threads;
        Py_BEGIN_ALLOW_THREADS
        status = rc_voxelize_cpu(&va, nt);
        Py_END_ALLOW_THREADS
    }
    (void)stream;
    if (status != RC_OK) { rc_raise_status(st, status); goto fail; }

    rc_call_release(&call);
    Py_XDECREF(ws_obj);
    return rc_result(out_obj, dropped_obj); /* (out, dropped) with return_dropped */

fail:
    rc_call_release(&call);
    Py_XDECREF(ws_obj);
    Py_XDECREF(out_obj);
    Py_XDECREF(dropped_obj);
    return NULL;
}
