/* module.h: what the CPython glue files share: module state, the ops' hook table (module.c),
 * the dispatch tail (dispatch.c), the message and exception helpers (messages.c), the per-call
 * import context (dlpack_bridge.c) and the argument helpers (args.c). module.c sits on top and
 * reaches each op only through its rc_op; files call down, never up (tests/test_layering.py).
 * Kernel code never includes this. */
#ifndef RC_MODULE_H
#define RC_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dlpack.h"
#include "robocache.h"

#define RC_API_CACHE 16   /* distinct array types remembered (torch.Tensor, Parameter, ...) */
#define RC_MAX_IMPORTS 96 /* arrays one call may import or allocate (fuse: 3 per stream) */
#define RC_MAX_NAMES 128  /* interned names of all ops together (module.c checks at exec) */

/* The ops, in module.c's table; an op's id says where its names are in rc_state. */
typedef enum {
    RC_OP_RESAMPLE, RC_OP_VOXELIZE, RC_OP_FUSE, RC_OP_GATHER_FRAMES, RC_OP_DECODE_JPEG,
    RC_OP_COPY_PLANES, RC_OP_LOSSLESS, RC_NUM_OPS
} rc_op_id;

/* resample's modes in rc_mode order, for the name lists of the ops that take them */
#define RC_MODE_NAMES "linear", "nearest", "previous", "next", "slerp"

typedef struct {
    PyTypeObject *type;            /* strong ref */
    const DLPackExchangeAPI *api;  /* NULL: the type has no usable exchange API */
    int is_torch;                  /* a torch.Tensor (sub)type: outputs come from torch.empty */
} rc_api_entry;

typedef struct {
    PyObject *CudaError;           /* robocache.CudaError */
    PyObject *fallback;            /* robocache._fallback, imported on first need */
    /* for Tensor.new_empty: the method name, torch dtypes by rc_dtype, kwnames ("dtype",);
     * filled on first need */
    PyObject *str_new_empty, *torch_dtypes[RC_NUM_DTYPES], *kwnames_dtype;
    rc_api_entry apis[RC_API_CACHE];
    int n_apis;
    int num_threads;
    /* the ops' interned names (keywords, then choices such as mode names), compared by pointer
     * first; op `id` owns names[first_name[id]...] (rc_op_names), listed by its rc_op */
    PyObject *names[RC_MAX_NAMES];
    int first_name[RC_NUM_OPS];
    int n_names;
} rc_state;

/* One imported (or allocated) array, released at the end of the call. */
typedef struct {
    PyObject *obj;      /* new ref: keeps the array (or its contiguous copy) alive */
    void *managed;      /* DLManagedTensor[Versioned]* whose deleter we owe, or NULL */
    int versioned;
    const char *name;   /* argument name (outlives the call), for the aliasing check */
    uintptr_t lo, hi;   /* bytes [lo, hi) its view can reach; lo == hi when empty */
} rc_import;

typedef struct {
    rc_state *st;
    PyObject *stream_arg;          /* borrowed: stream= as given, or NULL */
    int device_type, device_id;    /* of the first array imported; device_type 0 = none yet */
    const char *first_name;        /* argument name of that first array (a literal) */
    PyTypeObject *first_type;      /* borrowed: its type, for the same-framework check */
    int have_stream;
    void *stream;                  /* resolved cudaStream_t for CUDA calls */
    int copied;                    /* the call made a contiguous copy of an input */
    int joined;                    /* stream= with copies, not the current stream: ... */
    void *current;                 /* ... that one, which waits for `stream` at release */
    const DLPackExchangeAPI *api;  /* exchange API of the first array, if any */
    rc_import imports[RC_MAX_IMPORTS];
    int n_imports;
} rc_call;

/* Inline, in no .c file: every glue file needs it, and module.c (the top) calls the ops. */
static inline rc_state *rc_get_state(PyObject *module) {
    return (rc_state *)PyModule_GetState(module);
}

/* ---- the ops' hook table ---- */

/* One op's glue (py_<op>.c), all it exposes: module.c adds its functions to robocache._C and
 * interns its names into the module state at exec, drops them at clear. An op file never calls
 * module.c (tests/test_layering.py). */
typedef struct {
    rc_op_id id;
    PyMethodDef *methods;      /* NULL-terminated */
    const char *const *names;  /* interned in this order; the op indexes them by its own enum */
    int n_names;
} rc_op;

extern const rc_op rc_resample_op, rc_voxelize_op, rc_fuse_op, rc_gather_frames_op,
    rc_decode_jpeg_op, rc_copy_planes_op, rc_lossless_op;

/* The interned names op `id` listed, in its order. */
static inline PyObject *const *rc_op_names(const rc_state *st, rc_op_id id) {
    return st->names + st->first_name[id];
}

/* ---- the dispatch tail (dispatch.c) ---- */

/* An op's two kernels over its own job struct: adapters around rc_<op>_cpu / rc_<op>_cuda
 * (robocache.h), since a kernel cannot be called through a pointer of another type. */
typedef struct {
    rc_status (*cpu)(void *job, int num_threads);         /* NULL: the op refuses CPU arrays first */
    rc_status (*cuda)(void *job, int device, void *stream);
} rc_kernels;

/* The body of a CUDA adapter: the launcher call, which a CPU-only build does not have (rc_run
 * raises CudaError there before any adapter could run); sizeof still type-checks the call there
 * without making it. */
#ifdef RC_WITH_CUDA
#define RC_CUDA_LAUNCH(call) (call)
#else
#define RC_CUDA_LAUNCH(call) ((void)sizeof(call), RC_ERR_UNSUPPORTED)
#endif

/* Runs the kernel of the call's device on `job`, without the GIL: the CPU one on the module's
 * threads, the CUDA one on the call's stream (resolved even when work is 0, which launches
 * nothing). A CUDA call in a CPU-only build raises CudaError naming the call's first argument; a
 * failed rc_status raises its exception. Returns 0, or -1 with the exception set. */
int rc_run(rc_call *c, const rc_kernels *k, void *job, int work);

/* Before a CUDA call outside rc_run (a runtime query, a pointer's kind): 0 in a CUDA build; in a
 * CPU-only build CudaError "<name> is on cuda:<device> but ... built without CUDA", -1. */
int rc_require_cuda(rc_state *st, const char *name, int device);

/* ---- messages and exceptions (messages.c) ---- */

/* The dtype's name as numpy and torch spell it ("float32", "bool"). */
const char *rc_dtype_name(rc_dtype dt);
/* Writes "[d0, d1, ...]" into buf (truncated to n) and returns buf. */
const char *rc_dims_str(char *buf, size_t n, int ndim, const int64_t *shape);
/* Raises the exception for a failed rc_status (message from rc_last_error). Returns NULL. */
PyObject *rc_raise_status(rc_state *st, rc_status status);
/* Raises CudaError "<name> is on cuda:<id> but this robocache was built without CUDA"; NULL. */
PyObject *rc_no_cuda_error(rc_state *st, const char *name, int device_id);

/* ---- the per-call import context (dlpack_bridge.c) ---- */

void rc_call_init(rc_call *c, rc_state *st, PyObject *stream_arg);
void rc_call_release(rc_call *c);

/* Imports obj (any DLPack producer) as a view valid until rc_call_release. `name` is the
 * argument name used in error messages (it must outlive the call). writable: reject read-only
 * and misaligned arrays (for out=); an input whose data is not aligned to its element size is
 * replaced by an aligned copy. Every DLPack problem raises BufferError naming `name` (the
 * producer's own exception, if any, is its __cause__). Returns 0, or -1 with an exception set. */
int rc_import_array(rc_call *c, rc_tensor *view, PyObject *obj, const char *name, int writable);

/* out= (the last array imported) shares no byte with any other array of the call, else
 * ValueError naming both: the kernels read their inputs while writing out. */
int rc_expect_no_alias(rc_call *c, const char *name);

/* Allocates a C-contiguous array in the framework and on the device of `like` (an argument
 * already imported): through the exchange API's allocator when the type offers it, else
 * robocache._fallback.empty. *out_obj is a new reference. Returns 0 or -1. */
int rc_alloc_array(rc_call *c, PyObject **out_obj, rc_tensor *view, PyObject *like, int ndim,
                   const int64_t *shape, rc_dtype dtype);

/* A contiguous copy of obj made by its own framework (robocache._fallback.contiguous), imported
 * in place of obj. Used once when trailing dims cannot be flattened into one stride. */
int rc_import_contiguous(rc_call *c, rc_tensor *view, PyObject *obj, const char *name);

/* The CUDA stream of this call (explicit stream=, else the framework's current stream). */
int rc_call_stream(rc_call *c, void **stream);

int rc_is_contiguous(const rc_tensor *v);

/* ---- argument helpers (args.c): return 0, or -1 with the exception set, unless said ---- */

/* 1 when an optional argument was not given or is None. */
int rc_is_none(PyObject *o);
/* An op's call signature, for rc_parse_slots and its error messages. */
typedef struct {
    const char *func;       /* "resample" */
    const char *positional; /* "values, times, new_times" */
    int max_positional;
    const int *required;    /* slot indices that must be given */
    int n_required;
} rc_signature;
/* Fastcall args to slot[0..n) by names (interned: pointers compared first); NULL = not given. */
int rc_parse_slots(PyObject **slot, PyObject *const *names, int n, const rc_signature *sig,
                   PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* An int argument in [lo, hi] (not a bool): TypeError / ValueError naming `arg` otherwise. */
int rc_parse_int_range(int64_t *v, PyObject *obj, const char *arg, int64_t lo, int64_t hi);
/* Optional bool-ish argument: not given or None -> dflt, else its truth value. */
int rc_parse_flag(int *flag, PyObject *obj, int dflt);
/* Index of obj among 5 interned names (arg and "'a', 'b' or 'c'" name it in errors), or -1. */
int rc_name_index(PyObject *obj, PyObject *const names[5], const char *arg, const char *choices);
/* A resample mode name ('linear', ...) among the op's interned RC_MODE_NAMES `modes`; `name` is
 * the argument it came from ("modes[2]"). */
int rc_parse_mode(rc_mode *mode, PyObject *obj, PyObject *const modes[5], const char *name);
/* tolerance=: 1e-4 when not given or None, else a number >= 0 (seconds). */
int rc_parse_tolerance(double *tolerance, PyObject *obj);
/* Raises ValueError "<name>: expected <what>, got shape [...]"; returns -1. */
int rc_shape_error(const rc_tensor *v, const char *name, const char *what);
/* v has ndim dims, else rc_shape_error. */
int rc_expect_ndim(const rc_tensor *v, int ndim, const char *name, const char *what);
/* v has dtype dt, else TypeError naming both. */
int rc_expect_dtype(const rc_tensor *v, rc_dtype dt, const char *name);
/* v is a times dtype: float64 / float32 seconds or int64 nanoseconds. */
int rc_expect_times_dtype(const rc_tensor *v, const char *name);
/* values v has at least `lead` dims and starts with the shape of its times t. */
int rc_expect_leading(const rc_tensor *v, const rc_tensor *t, int lead, const char *name,
                      const char *times_name);
/* linear and slerp need floating values. */
int rc_expect_mode_dtype(const rc_tensor *v, rc_mode mode, const char *name);
/* slerp needs quaternions (x, y, z, w) in a last dim of 4 after the `lead` dims. */
int rc_expect_quaternions(const rc_tensor *v, int lead, rc_mode mode, const char *name);
/* Dims [first, ndim) of v as one strided dim: 1, or 0 (no exception) where they are not one. */
int rc_flatten_trailing(int64_t *count, int64_t *stride, const rc_tensor *v, int first);
/* out= (already imported) has exactly this shape and is C-contiguous. */
int rc_expect_out(const rc_tensor *out, int ndim, const int64_t *shape);
/* *out_obj (new ref): out= checked (writable, dt, shape, contiguous), else an array like `like`. */
int rc_out_arg(rc_call *c, PyObject **out_obj, rc_tensor *out, PyObject *arg, PyObject *like,
               int ndim, const int64_t *shape, rc_dtype dt);
/* Content check of n resample arg sets (fuse: per stream, labels[k]) on the call's device. */
int rc_check_resample(rc_call *c, PyObject *like, const rc_resample_args *ra, int n, int ragged,
                      const char *const *labels);
/* out alone, or (out, extra) when extra is not NULL; steals both references. */
PyObject *rc_result(PyObject *out, PyObject *extra);

#endif /* RC_MODULE_H */
