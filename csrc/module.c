/* module.c: robocache._C: module state, the hook table of the ops (each py_<op>.c adds its
 * functions and interned names through its rc_op), build facts, the DataLoader's graph launch.
 * DLPack handling lives in dlpack_bridge.c. Multi-phase init (PEP 489), state in the module
 * object, no globals besides the method and hook tables. */
#include <stdlib.h>
#include <unistd.h>

#include "module.h"

#ifndef RC_VERSION
#define RC_VERSION "0.0.0"
#endif
#ifndef RC_CUDA_ARCHS
#define RC_CUDA_ARCHS ""
#endif
#ifndef RC_CUDA_TOOLKIT /* the nvcc release the kernels were built with, "12.4.131" */
#define RC_CUDA_TOOLKIT ""
#endif
#ifdef RC_WITH_CUDA
#undef RC_CUDA_MISSING
#define RC_CUDA_MISSING ""
#elif !defined(RC_CUDA_MISSING) /* setup.py: "no-toolkit" (none found) or "disabled" (ROBOCACHE_CUDA=0) */
#define RC_CUDA_MISSING "no-toolkit"
#endif

static int default_threads(void) {
    const char *env = getenv("ROBOCACHE_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

PyDoc_STRVAR(set_num_threads_doc,
"set_num_threads(n)\n--\n\nThreads used by the CPU kernels (default: ROBOCACHE_NUM_THREADS or\n"
"the number of online CPUs).");

static PyObject *set_num_threads(PyObject *module, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 1 || n > 256) {
        PyErr_Format(PyExc_ValueError, "n: expected 1..256 threads, got %ld", n);
        return NULL;
    }
    rc_get_state(module)->num_threads = (int)n;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(get_num_threads_doc, "get_num_threads()\n--\n\nThreads used by the CPU kernels.");

static PyObject *get_num_threads(PyObject *module, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(rc_get_state(module)->num_threads);
}

PyDoc_STRVAR(build_info_doc,
"_build_info()\n--\n\nBuild and runtime facts: version, whether CUDA was compiled in (else why\n"
"not), the CUDA archs and toolkit release, the runtime and driver CUDA versions and the devices\n"
"the runtime sees. Costs nothing in a CPU-only build (no CUDA call).");

static PyObject *build_info(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    PyObject *devices = PyList_New(0);
    if (!devices) return NULL;
    int cuda = 0, runtime = 0, driver = 0;
    const char *device_error = "";
#ifdef RC_WITH_CUDA
    cuda = 1;
    runtime = rc_runtime_version_cuda();
    driver = rc_driver_version_cuda();
    int count = 0;
    if (rc_device_count_cuda(&count) != RC_OK) device_error = rc_last_error();
    for (int i = 0; i < count; i++) {
        char name[256];
        int major = 0, minor = 0;
        if (rc_device_name_cuda(name, (int)sizeof name, &major, &minor, i) != RC_OK) continue;
        PyObject *d = Py_BuildValue("{s:i,s:s,s:(ii)}", "index", i, "name", name,
                                    "capability", major, minor);
        if (!d || PyList_Append(devices, d) != 0) {
            Py_XDECREF(d);
            Py_DECREF(devices);
            return NULL;
        }
        Py_DECREF(d);
    }
#endif
    PyObject *info = Py_BuildValue("{s:s,s:O,s:s,s:s,s:s,s:i,s:i,s:O,s:s}", "version", RC_VERSION,
                                   "cuda", cuda ? Py_True : Py_False, "cpu_only_reason",
                                   RC_CUDA_MISSING, "archs", RC_CUDA_ARCHS, "cuda_toolkit",
                                   RC_CUDA_TOOLKIT, "cuda_runtime", runtime, "cuda_driver", driver,
                                   "devices", devices, "device_error", device_error);
    Py_DECREF(devices);
    return info;
}

PyDoc_STRVAR(graph_launch_doc,
"_graph_launch(exec, stream, consumer, consumer_event, done, ready, device)\n--\n\n"
"The DataLoader's batch replay (robocache/batch_graph.py): `stream` waits for the work queued\n"
"on `consumer` (recording `consumer_event` there), launches the cudaGraphExec_t `exec` on\n"
"`stream` and records `done` after it; then `consumer` waits for the event `ready` (the batch\n"
"it takes now; 0: no wait). All arguments are raw CUDA handles as ints, all of `device`.");

static PyObject *graph_launch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    rc_state *st = rc_get_state(module);
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "_graph_launch: expected 7 arguments, got %zd", nargs);
        return NULL;
    }
    void *h[6];
    for (int i = 0; i < 6; i++) {
        h[i] = PyLong_AsVoidPtr(args[i]);
        if (PyErr_Occurred()) return NULL;
        /* a null stream is the legacy default stream (torch's default), a null `ready` no wait;
         * a null graph or event to record is an error */
        if (!h[i] && i != 1 && i != 2 && i != 5) {
            PyErr_Format(PyExc_ValueError, "_graph_launch: argument %d is a null handle", i);
            return NULL;
        }
    }
    long device = PyLong_AsLong(args[6]);
    if (device == -1 && PyErr_Occurred()) return NULL;
    if (device < 0 || device > 1024) {
        PyErr_Format(PyExc_ValueError, "_graph_launch: device: expected a CUDA device index, got %ld", device);
        return NULL;
    }
    if (rc_require_cuda(st, "_graph_launch", (int)device) != 0) return NULL;
    rc_status status;
    Py_BEGIN_ALLOW_THREADS
    status = RC_CUDA_LAUNCH(rc_graph_launch_cuda(h[0], h[1], h[2], h[3], h[4], h[5], (int)device));
    Py_END_ALLOW_THREADS
    if (status != RC_OK) return rc_raise_status(st, status);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(host_register_doc,
"_host_register(ptr, nbytes, read_only)\n--\n\n"
"Page-locks the `nbytes` host bytes at address `ptr` and maps them for every device, at `ptr`\n"
"itself (robocache/frames/pinned.py). read_only: devices only read them, the way a file's\n"
"page-cache pages are pinned in place. Raises CudaError naming the CUDA error when refused.");

static PyObject *host_register(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    rc_state *st = rc_get_state(module);
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "_host_register: expected 3 arguments, got %zd", nargs);
        return NULL;
    }
    void *ptr = PyLong_AsVoidPtr(args[0]);
    if (!ptr && PyErr_Occurred()) return NULL;
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[1]);
    if (nbytes == -1 && PyErr_Occurred()) return NULL;
    int read_only = PyObject_IsTrue(args[2]);
    if (read_only < 0) return NULL;
    if (!ptr || nbytes <= 0) {
        PyErr_Format(PyExc_ValueError, "_host_register: expected a non-null address and nbytes > 0, got nbytes=%zd",
                     nbytes);
        return NULL;
    }
    if (rc_require_cuda(st, "_host_register", 0) != 0) return NULL;
    rc_status status;
    Py_BEGIN_ALLOW_THREADS /* 0.1-0.2 s per GB: the driver locks and maps every page */
    status = RC_CUDA_LAUNCH(rc_host_register_cuda(ptr, (size_t)nbytes, read_only));
    Py_END_ALLOW_THREADS
    if (status != RC_OK) return rc_raise_status(st, status);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(host_unregister_doc,
"_host_unregister(ptr)\n--\n\nUndoes _host_register for the address it was given.");

static PyObject *host_unregister(PyObject *module, PyObject *arg) {
    rc_state *st = rc_get_state(module);
    void *ptr = PyLong_AsVoidPtr(arg);
    if (!ptr && PyErr_Occurred()) return NULL;
    if (rc_require_cuda(st, "_host_unregister", 0) != 0) return NULL;
    rc_status status;
    Py_BEGIN_ALLOW_THREADS
    status = RC_CUDA_LAUNCH(rc_host_unregister_cuda(ptr));
    Py_END_ALLOW_THREADS
    if (status != RC_OK) return rc_raise_status(st, status);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_num_threads", set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", get_num_threads, METH_NOARGS, get_num_threads_doc},
    {"_build_info", build_info, METH_NOARGS, build_info_doc},
    {"_host_register", (PyCFunction)(void (*)(void))host_register, METH_FASTCALL, host_register_doc},
    {"_host_unregister", host_unregister, METH_O, host_unregister_doc},
    {"_graph_launch", (PyCFunction)(void (*)(void))graph_launch, METH_FASTCALL, graph_launch_doc},
    {NULL, NULL, 0, NULL},
};

/* The hook table: every op's functions and names (py_<op>.c), in no particular order. */
static const rc_op *const ops[] = {&rc_resample_op, &rc_voxelize_op, &rc_fuse_op,
                                   &rc_gather_frames_op, &rc_decode_jpeg_op, &rc_copy_planes_op,
                                   &rc_lossless_op};
_Static_assert(sizeof ops / sizeof *ops == RC_NUM_OPS, "module.c's table lists every rc_op_id");

/* Op's functions into the module, its names interned after the names of the ops before it. */
static int add_op(PyObject *m, rc_state *st, const rc_op *op) {
    if (st->n_names + op->n_names > RC_MAX_NAMES) {
        PyErr_Format(PyExc_SystemError, "robocache._C: more than RC_MAX_NAMES (%d) interned names",
                     RC_MAX_NAMES);
        return -1;
    }
    st->first_name[op->id] = st->n_names;
    for (int i = 0; i < op->n_names; i++) {
        PyObject *name = PyUnicode_InternFromString(op->names[i]);
        if (!name) return -1;
        st->names[st->n_names++] = name;
    }
    return PyModule_AddFunctions(m, op->methods);
}

static int exec_module(PyObject *m) {
    rc_state *st = rc_get_state(m);
    st->num_threads = default_threads();
    st->CudaError = PyErr_NewExceptionWithDoc(
        "robocache.CudaError", "A CUDA runtime call failed, or CUDA is not available.",
        PyExc_RuntimeError, NULL);
    if (!st->CudaError || PyModule_AddObjectRef(m, "CudaError", st->CudaError) != 0) return -1;
    for (int i = 0; i < RC_NUM_OPS; i++)
        if (add_op(m, st, ops[i]) != 0) return -1;
#ifdef RC_WITH_CUDA
    if (PyModule_AddIntConstant(m, "WITH_CUDA", 1) != 0) return -1;
#else
    if (PyModule_AddIntConstant(m, "WITH_CUDA", 0) != 0) return -1;
#endif
    return PyModule_AddStringConstant(m, "__version__", RC_VERSION);
}

static int traverse(PyObject *m, visitproc visit, void *arg) {
    rc_state *st = rc_get_state(m);
    if (!st) return 0;
    Py_VISIT(st->CudaError);
    Py_VISIT(st->fallback);
    for (int i = 0; i < st->n_apis; i++) Py_VISIT(st->apis[i].type);
    return 0;
}

static int clear(PyObject *m) {
    rc_state *st = rc_get_state(m);
    if (!st) return 0;
    Py_CLEAR(st->CudaError);
    Py_CLEAR(st->fallback);
    Py_CLEAR(st->str_new_empty);
    Py_CLEAR(st->kwnames_dtype);
    for (int i = 0; i < RC_NUM_DTYPES; i++) Py_CLEAR(st->torch_dtypes[i]);
    for (int i = 0; i < st->n_apis; i++) Py_CLEAR(st->apis[i].type);
    st->n_apis = 0;
    for (int i = 0; i < st->n_names; i++) Py_CLEAR(st->names[i]);
    st->n_names = 0;
    return 0;
}

static void free_module(void *m) { clear((PyObject *)m); }

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "robocache._C",
    "robocache's compiled core: DLPack bridge, CPU kernels and CUDA launchers.",
    sizeof(rc_state), methods, slots, traverse, clear, free_module,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&moduledef); }
