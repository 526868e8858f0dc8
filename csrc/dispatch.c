/* dispatch.c: the tail every op ends with, written once: the device of the call picks the CPU or
 * the CUDA kernel, which runs without the GIL; a CUDA array in a CPU-only build and a failed
 * rc_status become the op's exception. rc_require_cuda is how the ops, their argument helpers
 * and module.c's CUDA queries test for a CPU-only build: none has an RC_WITH_CUDA branch of its
 * own (the DLPack bridge's stream handling and module.c's build facts aside).
 * Per call, not per element: nothing here shows in a benchmark.
 */
#include "module.h"

int rc_run(rc_call *c, const rc_kernels *k, void *job, int work) {
    rc_status status = RC_OK;
    if (c->device_type != RC_DEVICE_CUDA) {
        if (work) {
            const int threads = c->st->num_threads;
            Py_BEGIN_ALLOW_THREADS
            status = k->cpu(job, threads);
            Py_END_ALLOW_THREADS
        }
    } else {
        void *stream;
        if (rc_require_cuda(c->st, c->first_name, c->device_id) != 0 ||
            rc_call_stream(c, &stream) != 0)
            return -1;
        if (work) {
            Py_BEGIN_ALLOW_THREADS
            status = k->cuda(job, c->device_id, stream);
            Py_END_ALLOW_THREADS
        }
    }
    if (status != RC_OK) {
        rc_raise_status(c->st, status);
        return -1;
    }
    return 0;
}

int rc_require_cuda(rc_state *st, const char *name, int device) {
#ifdef RC_WITH_CUDA
    return 0;
#else
    rc_no_cuda_error(st, name, device);
    return -1;
#endif
}
