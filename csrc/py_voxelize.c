/* py_voxelize.c: robocache.voxelize: argument parsing, import and validation of the arrays,
 * output and workspace allocation, dispatch to rc_voxelize_cpu / rc_voxelize_cuda.
 * Shapes (elements): points dense [B,N,3] (+ lengths [B]), ragged [P,3] + offsets [B+1], or one
 * cloud [N,3]; features the same with a last dim F; out [B,X,Y,Z] or [B,F,X,Y,Z].
 * Benchmark: python benchmarks/bench_voxelize.py
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "module.h"

PyDoc_STRVAR(voxelize_doc,
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
"See docs/voxelize.md for exact semantics.\n");

enum { A_POINTS, A_FEATURES, A_LENGTHS, A_OFFSETS, A_GRID, A_VOXEL_SIZE, A_ORIGIN, A_MODE,
       A_DTYPE, A_OUT, A_DETERMINISTIC, A_RETURN_DROPPED, A_CHECK, A_STREAM, A_COUNT,
       N_MODES = A_COUNT, N_NAMES = N_MODES + 5 }; /* interned: the keywords, then the modes */

static const char *const names[N_NAMES] = {
    "points", "features", "lengths", "offsets", "grid", "voxel_size", "origin", "mode", "dtype",
    "out", "deterministic", "return_dropped", "check", "stream",
    "occupancy", "count", "sum", "mean", "max"}; /* rc_vox_mode order */

/* One call: its arguments, the arrays it imported or made, the kernel's arguments. */
typedef struct {
    PyObject *arg[A_COUNT];        /* borrowed; NULL: not given */
    PyObject *mode_name;           /* borrowed: the interned name of mode, for messages */
    int dtype_arg;                 /* rc_dtype of dtype=, -1 when not given */
    int return_dropped, feat_mode, ragged, unbatched;
    int lead;                      /* dims of points before xyz */
    int64_t out_shape[5];
    int out_ndim;
    int64_t out_bytes, ws_bytes;
    rc_tensor points, features, lengths, offsets, out, dropped, ws;
    PyObject *out_obj, *dropped_obj, *ws_obj; /* new refs, or NULL */
    rc_voxelize_args va;
    rc_check_result verdict;       /* of the content check */
} job;

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

/* The options against each other: finite geometry, one form, features exactly when the mode
 * reduces them. */
static int check_options(const job *j) {
    for (int k = 0; k < 3; k++) {
        if (!(j->va.voxel_size[k] > 0.0 && isfinite(j->va.voxel_size[k]))) {
            PyErr_Format(PyExc_ValueError, "voxel_size: expected finite sizes > 0, got %R",
                         j->arg[A_VOXEL_SIZE]);
            return -1;
        }
        if (!isfinite(j->va.origin[k])) {
            PyErr_Format(PyExc_ValueError, "origin: expected finite numbers, got %R",
                         j->arg[A_ORIGIN]);
            return -1;
        }
    }
    if (j->ragged && !rc_is_none(j->arg[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError,
                        "lengths: only for the dense form [B, N, 3]; ragged clouds are delimited "
                        "by offsets");
        return -1;
    }
    if (j->feat_mode && rc_is_none(j->arg[A_FEATURES])) {
        PyErr_Format(PyExc_ValueError,
                     "features: mode '%U' reduces features per voxel; pass features [B, N, F] "
                     "(or [P, F] with offsets)",
                     j->mode_name);
        return -1;
    }
    if (!j->feat_mode && !rc_is_none(j->arg[A_FEATURES])) {
        PyErr_Format(PyExc_ValueError,
                     "features: mode '%U' does not use features; use mode 'sum', 'mean' or "
                     "'max'",
                     j->mode_name);
        return -1;
    }
    return 0;
}

/* Keywords and options: everything that needs no array. */
static int parse(const rc_state *st, job *j, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames) {
    static const int required[] = {A_POINTS, A_GRID, A_VOXEL_SIZE, A_ORIGIN};
    static const rc_signature sig = {"voxelize", "points", 1, required, 4};
    PyObject *const *name = rc_op_names(st, RC_OP_VOXELIZE);
    rc_voxelize_args *va = &j->va;
    int mode = RC_VOX_OCCUPANCY, deterministic;
    if (rc_parse_slots(j->arg, name, A_COUNT, &sig, args, nargs, kwnames) != 0) return -1;
    if (j->arg[A_MODE]) {
        mode = rc_name_index(j->arg[A_MODE], name + N_MODES, "mode",
                             "'occupancy', 'count', 'sum', 'mean' or 'max'");
        if (mode < 0) return -1;
    }
    if (parse_dtype(&j->dtype_arg, j->arg[A_DTYPE]) != 0 ||
        rc_parse_flag(&deterministic, j->arg[A_DETERMINISTIC], 1) != 0 ||
        rc_parse_flag(&j->return_dropped, j->arg[A_RETURN_DROPPED], 0) != 0 ||
        parse_grid(va->grid, j->arg[A_GRID]) != 0 ||
        parse_vec3(va->voxel_size, j->arg[A_VOXEL_SIZE], "voxel_size", 1) != 0 ||
        parse_vec3(va->origin, j->arg[A_ORIGIN], "origin", 0) != 0)
        return -1;
    va->mode = (rc_vox_mode)mode;
    va->deterministic = deterministic;
    j->mode_name = name[N_MODES + mode];
    j->feat_mode = mode >= RC_VOX_SUM;
    j->ragged = !rc_is_none(j->arg[A_OFFSETS]);
    return check_options(j);
}

/* points: float coordinates in one of the forms dense [B,N,3], ragged [P,3] + offsets, one
 * cloud [N,3]. */
static int import_points(rc_call *c, job *j) {
    const rc_tensor *p = &j->points;
    char s[160];
    if (rc_import_array(c, &j->points, j->arg[A_POINTS], "points", 0) != 0) return -1;
    if (!rc_dtype_is_float(p->dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "points: expected float32, float64, float16 or bfloat16 coordinates, got %s",
                     rc_dtype_name(p->dtype));
        return -1;
    }
    if (j->ragged || p->ndim == 2) {
        if (p->ndim != 2) {
            PyErr_Format(PyExc_ValueError,
                         "points: the ragged form (offsets given) expects [P, 3], got shape %s",
                         rc_dims_str(s, sizeof s, p->ndim, p->shape));
            return -1;
        }
        j->unbatched = !j->ragged;
    } else if (p->ndim != 3) {
        PyErr_Format(PyExc_ValueError,
                     "points: expected [B, N, 3], [N, 3], or [P, 3] with offsets; got shape %s",
                     rc_dims_str(s, sizeof s, p->ndim, p->shape));
        return -1;
    }
    if (p->shape[p->ndim - 1] != 3) {
        PyErr_Format(PyExc_ValueError, "points: expected x, y, z in a last dim of 3, got shape %s",
                     rc_dims_str(s, sizeof s, p->ndim, p->shape));
        return -1;
    }
    if (j->unbatched && !rc_is_none(j->arg[A_LENGTHS])) {
        PyErr_SetString(PyExc_ValueError, "lengths: needs batched points [B, N, 3]");
        return -1;
    }
    j->lead = p->ndim - 1;
    return 0;
}

/* Which points make each cloud: offsets [B+1] (ragged), lengths [B] (dense, optional). */
static int import_clouds(rc_call *c, job *j) {
    rc_voxelize_args *va = &j->va;
    const rc_tensor *p = &j->points;
    if (j->ragged) {
        if (rc_import_array(c, &j->offsets, j->arg[A_OFFSETS], "offsets", 0) != 0 ||
            expect_int64_vector(&j->offsets, "offsets", -1, "[B+1]"))
            return -1;
        if (j->offsets.shape[0] < 1) {
            PyErr_SetString(PyExc_ValueError, "offsets: expected [B+1] with at least one entry");
            return -1;
        }
        va->batch = j->offsets.shape[0] - 1;
        va->points_per_cloud = p->shape[0];
        va->offsets = (const int64_t *)j->offsets.data;
        va->offsets_stride = j->offsets.strides[0];
        va->points_stride_n = p->strides[0];
    } else if (j->unbatched) {
        va->batch = 1;
        va->points_per_cloud = p->shape[0];
        va->points_stride_n = p->strides[0];
    } else {
        va->batch = p->shape[0];
        va->points_per_cloud = p->shape[1];
        va->points_stride_b = p->strides[0];
        va->points_stride_n = p->strides[1];
        if (!rc_is_none(j->arg[A_LENGTHS])) {
            if (rc_import_array(c, &j->lengths, j->arg[A_LENGTHS], "lengths", 0) != 0 ||
                expect_int64_vector(&j->lengths, "lengths", va->batch, "[B] (B = points.shape[0])"))
                return -1;
            va->lengths = (const int64_t *)j->lengths.data;
            va->lengths_stride = j->lengths.strides[0];
        }
    }
    va->points_stride_c = p->strides[j->lead];
    va->points = p->data;
    va->points_dtype = p->dtype;
    return 0;
}

/* features [B,N,F] / [P,F] / [N,F] of modes sum, mean and max. */
static int import_features(rc_call *c, job *j) {
    if (!j->feat_mode) return 0;
    rc_voxelize_args *va = &j->va;
    const rc_tensor *f = &j->features, *p = &j->points;
    const int lead = j->lead;
    if (rc_import_array(c, &j->features, j->arg[A_FEATURES], "features", 0) != 0) return -1;
    if (!rc_dtype_is_float(f->dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "features: expected a float dtype (float32, float64, float16, "
                     "bfloat16), got %s",
                     rc_dtype_name(f->dtype));
        return -1;
    }
    int same = f->ndim == p->ndim;
    for (int d = 0; same && d < lead; d++) same = f->shape[d] == p->shape[d];
    if (!same) {
        char s1[160], s2[160];
        PyErr_Format(PyExc_ValueError,
                     "features: expected the leading dims of points plus F, i.e. [%s..., F], "
                     "got shape %s (points %s)",
                     lead == 2 ? "B, N, " : "N, ", rc_dims_str(s1, sizeof s1, f->ndim, f->shape),
                     rc_dims_str(s2, sizeof s2, p->ndim, p->shape));
        return -1;
    }
    va->features = f->data;
    va->features_dtype = f->dtype;
    va->channels = f->shape[lead];
    va->features_stride_b = lead == 2 ? f->strides[0] : 0;
    va->features_stride_n = f->strides[lead - 1];
    va->features_stride_c = f->strides[lead];
    return 0;
}

static int import_inputs(rc_call *c, job *j) {
    if (import_points(c, j) != 0 || import_clouds(c, j) != 0) return -1;
    return import_features(c, j);
}

/* The output dtype: dtype= or the mode's default, among those the mode writes. */
static int output_dtype(job *j) {
    const int dt = j->dtype_arg;
    rc_dtype out_dt;
    if (j->va.mode == RC_VOX_OCCUPANCY) {
        out_dt = dt < 0 ? RC_F32 : (rc_dtype)dt;
        if (!(rc_dtype_is_float(out_dt) || out_dt == RC_U8 || out_dt == RC_BOOL)) {
            PyErr_Format(PyExc_TypeError,
                         "dtype: mode 'occupancy' writes float32 (default), float64, float16, "
                         "bfloat16, uint8 or bool, got %s",
                         rc_dtype_name(out_dt));
            return -1;
        }
    } else if (j->va.mode == RC_VOX_COUNT) {
        out_dt = dt < 0 ? RC_I32 : (rc_dtype)dt;
        if (out_dt != RC_I32 && out_dt != RC_I64) {
            PyErr_Format(PyExc_TypeError,
                         "dtype: mode 'count' writes int32 (default) or int64, got %s",
                         rc_dtype_name(out_dt));
            return -1;
        }
    } else {
        out_dt = dt >= 0 ? (rc_dtype)dt : j->va.features_dtype == RC_F64 ? RC_F64 : RC_F32;
        if (out_dt != RC_F32 && out_dt != RC_F64) {
            PyErr_Format(PyExc_TypeError, "dtype: mode '%U' writes float32 or float64, got %s",
                         j->mode_name, rc_dtype_name(out_dt));
            return -1;
        }
    }
    j->va.out_dtype = out_dt;
    return 0;
}

/* The output's shape and bytes and the workspace's bytes, refused when no memory could hold
 * them (before the framework tries, with a message naming grid or the batch). */
static int output_size(job *j, int on_cuda) {
    rc_voxelize_args *va = &j->va;
    char s[160];
    j->out_ndim = 0;
    if (!j->unbatched) j->out_shape[j->out_ndim++] = va->batch;
    if (j->feat_mode) j->out_shape[j->out_ndim++] = va->channels;
    for (int k = 0; k < 3; k++) j->out_shape[j->out_ndim++] = va->grid[k];
    j->out_bytes = rc_dtype_size(va->out_dtype);
    for (int d = 0; d < j->out_ndim; d++) j->out_bytes = mul_or_neg(j->out_bytes, j->out_shape[d]);
    if (j->out_bytes < 0 || j->out_bytes > ((int64_t)1 << 52)) {
        PyErr_Format(PyExc_ValueError,
                     "grid: (%lld, %lld, %lld) voxels make an output %s of %s far beyond any "
                     "memory; use a coarser voxel_size or a smaller grid",
                     (long long)va->grid[0], (long long)va->grid[1], (long long)va->grid[2],
                     rc_dims_str(s, sizeof s, j->out_ndim, j->out_shape),
                     rc_dtype_name(va->out_dtype));
        return -1;
    }
    const int64_t slots = j->ragged ? va->points_per_cloud : va->batch * va->points_per_cloud;
    if (j->feat_mode && va->channels > 0 && slots >= (int64_t)INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "points: %lld points in one call; modes sum/mean/max handle fewer than "
                     "2^31 (split the batch)",
                     (long long)slots);
        return -1;
    }
    const int64_t cells = j->feat_mode ? mul_or_neg(slots, va->channels) : 0;
    if (cells < 0 || cells > ((int64_t)1 << 48)) { /* keeps the workspace size in int64 */
        PyErr_Format(PyExc_ValueError,
                     "features: %lld points x %lld channels need a workspace far beyond any "
                     "memory (split the batch or the channels)",
                     (long long)slots, (long long)va->channels);
        return -1;
    }
    va->cuda_layout = on_cuda; /* the CUDA kernels' own workspace (voxelize_math.h) */
    j->ws_bytes = rc_voxelize_workspace_size(va);
    if (!on_cuda && j->out_bytes + j->ws_bytes > physical_memory()) {
        PyErr_Format(PyExc_MemoryError,
                     "grid: (%lld, %lld, %lld) voxels make an output %s of %s (%lld bytes), more "
                     "than this machine's memory",
                     (long long)va->grid[0], (long long)va->grid[1], (long long)va->grid[2],
                     rc_dims_str(s, sizeof s, j->out_ndim, j->out_shape),
                     rc_dtype_name(va->out_dtype), (long long)j->out_bytes);
        return -1;
    }
    return 0;
}

/* out= checked against the mode's dtype and shape, else a new array like points. */
static int output_array(rc_call *c, job *j) {
    const rc_dtype dt = j->va.out_dtype;
    if (rc_is_none(j->arg[A_OUT]))
        return allocate_named(c, &j->out_obj, &j->out, j->arg[A_POINTS], j->out_ndim, j->out_shape,
                              dt, "grid");
    if (rc_import_array(c, &j->out, j->arg[A_OUT], "out", 1) != 0) return -1;
    if (j->out.dtype != dt) { /* names the mode and where the dtype came from */
        PyErr_Format(PyExc_TypeError, "out: expected dtype %s (mode '%U'%s), got %s",
                     rc_dtype_name(dt), j->mode_name,
                     j->dtype_arg >= 0 ? ", dtype=" : ", default dtype", rc_dtype_name(j->out.dtype));
        return -1;
    }
    if (rc_expect_out(&j->out, j->out_ndim, j->out_shape) || rc_expect_no_alias(c, "out")) return -1;
    j->out_obj = j->arg[A_OUT];
    Py_INCREF(j->out_obj);
    return 0;
}

/* out, dropped [B] with return_dropped, and the workspace of sum/mean/max or of occupancy's
 * bitmap. */
static int allocate_outputs(rc_call *c, job *j) {
    const int on_cuda = c->device_type == RC_DEVICE_CUDA;
    if (output_dtype(j) != 0 || output_size(j, on_cuda) != 0 || output_array(c, j) != 0)
        return -1;
    j->va.out = j->out.data;
    if (j->return_dropped) {
        if (rc_alloc_array(c, &j->dropped_obj, &j->dropped, j->arg[A_POINTS], j->unbatched ? 0 : 1,
                           &j->va.batch, RC_I64) != 0)
            return -1;
        j->va.dropped = (int64_t *)j->dropped.data;
    }
    if (j->ws_bytes > 0) {
        int64_t words = (j->ws_bytes + 7) / 8;
        if (allocate_named(c, &j->ws_obj, &j->ws, j->arg[A_POINTS], 1, &words, RC_I64,
                           "points (workspace of sum/mean/max, or occupancy's bitmap)") != 0)
            return -1;
        j->va.workspace = j->ws.data;
    }
    return 0;
}

static rc_status check_cpu(void *p, int threads) {
    job *j = p;
    return rc_voxelize_check_cpu(&j->verdict, &j->va);
}
static rc_status check_cuda(void *p, int device, void *stream) {
    job *j = p;
    return RC_CUDA_LAUNCH(rc_voxelize_check_cuda(&j->verdict, &j->va, device, stream));
}
static const rc_kernels checks = {check_cpu, check_cuda};

static rc_status run_cpu(void *va, int threads) { return rc_voxelize_cpu(va, threads); }
static rc_status run_cuda(void *va, int device, void *stream) {
    return RC_CUDA_LAUNCH(rc_voxelize_cuda(va, device, stream));
}
static const rc_kernels kernels = {run_cpu, run_cuda};

/* The verdict of the content check as the ValueError naming what is wrong. */
static int verdict_error(const job *j) {
    if (j->verdict.kind == RC_CHECK_OFFSETS) {
        PyErr_Format(PyExc_ValueError,
                     "offsets must start at 0, never decrease and end at P=%lld (len(points)); "
                     "bad at position %lld",
                     (long long)j->va.points_per_cloud, (long long)j->verdict.row);
        return -1;
    }
    if (j->verdict.kind == RC_CHECK_LENGTHS) {
        PyErr_Format(PyExc_ValueError, "lengths[%lld] is outside [0, %lld] (points per cloud)",
                     (long long)j->verdict.row, (long long)j->va.points_per_cloud);
        return -1;
    }
    return 0;
}

/* The workspace goes back to the framework's allocator when we return, which orders its reuse
 * on the framework's current stream: a stream= other than that one must finish first. */
static int workspace_needs_sync(const rc_call *c) {
    void *current = NULL;
    return !(c->api && c->api->current_work_stream &&
             c->api->current_work_stream(kDLCUDA, c->device_id, &current) == 0 &&
             current == c->stream);
}

/* Content (offsets, lengths: O(B), always on the CPU; on the GPU when asked, a sync), then the
 * kernel. */
static int run(rc_call *c, job *j) {
    const int on_cuda = c->device_type == RC_DEVICE_CUDA;
    int check;
    if (rc_parse_flag(&check, j->arg[A_CHECK], !on_cuda) != 0) return -1;
    if (rc_run(c, &checks, j, check || !on_cuda) != 0 || verdict_error(j) != 0) return -1;
    if (on_cuda && c->stream_arg && j->ws_bytes > 0) j->va.sync = workspace_needs_sync(c);
    return rc_run(c, &kernels, &j->va, 1);
}

static PyObject *voxelize(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    job j;
    memset(&j, 0, sizeof j);
    if (parse(st, &j, args, nargs, kwnames) != 0) return NULL;
    rc_call call;
    rc_call_init(&call, st, j.arg[A_STREAM]);
    PyObject *result = NULL;
    if (import_inputs(&call, &j) == 0 && allocate_outputs(&call, &j) == 0 && run(&call, &j) == 0) {
        result = rc_result(j.out_obj, j.dropped_obj); /* (out, dropped) with return_dropped */
        j.out_obj = j.dropped_obj = NULL;
    }
    rc_call_release(&call);
    Py_XDECREF(j.ws_obj);
    Py_XDECREF(j.out_obj);
    Py_XDECREF(j.dropped_obj);
    return result;
}

static PyMethodDef methods[] = {
    {"voxelize", (PyCFunction)(void (*)(void))voxelize, METH_FASTCALL | METH_KEYWORDS, voxelize_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_voxelize_op = {RC_OP_VOXELIZE, methods, names, N_NAMES};
