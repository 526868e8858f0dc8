/* messages.c: the words every CPython glue file puts in its errors: dtype names, shapes as
 * "[d0, d1]", the exception for a failed rc_status and the one for a CUDA array in a CPU-only
 * build. Below dlpack_bridge.c and args.c in the file graph (both call these, neither is called
 * from here), so no two glue files need each other (tests/test_layering.py).
 * Per call, not per element: nothing here shows in a benchmark.
 */
#include <stdio.h>

#include "module.h"

static const char *const dtype_names[RC_NUM_DTYPES] = {
    "float32", "float64", "float16", "bfloat16", "int8",   "int16", "int32",
    "int64",   "uint8",   "uint16",  "uint32",   "uint64", "bool"};

const char *rc_dtype_name(rc_dtype dt) { return dtype_names[dt]; }

const char *rc_dims_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

PyObject *rc_raise_status(rc_state *st, rc_status status) {
    PyObject *type;
    switch (status) {
    case RC_ERR_VALUE: type = PyExc_ValueError; break;
    case RC_ERR_TYPE: type = PyExc_TypeError; break;
    case RC_ERR_NOMEM: type = PyExc_MemoryError; break;
    default: type = st->CudaError; break;
    }
    PyErr_SetString(type, rc_last_error());
    return NULL;
}

PyObject *rc_no_cuda_error(rc_state *st, const char *name, int device_id) {
    PyErr_Format(st->CudaError,
                 "%s is on cuda:%d but this robocache was built without CUDA; reinstall with "
                 "nvcc on PATH (or CUDA_HOME set, or ROBOCACHE_CUDA=1)",
                 name, device_id);
    return NULL;
}
