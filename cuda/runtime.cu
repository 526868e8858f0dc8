/* cuda/runtime.cu: facts about the CUDA runtime and devices (`python -m robocache info`,
 * robocache.build_info()), what a pointer is (pinned host or device memory: gather_frames'
 * storage check), and the stream/graph plumbing the glue and the DataLoader need.
 * No kernels. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "../csrc/robocache.h"
#include "cuda_util.cuh"

extern "C" rc_status rc_device_count_cuda(int *count) {
    cudaError_t e = cudaGetDeviceCount(count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) { /* a CPU machine */
        *count = 0;
        return RC_OK;
    }
    if (e != cudaSuccess) *count = 0;
    return RC_CUDA_CHECK(e, "cudaGetDeviceCount");
}

extern "C" rc_status rc_device_name_cuda(char *name, int name_len, int *major, int *minor,
                                         int device) {
    cudaDeviceProp p;
    rc_status st = RC_CUDA_CHECK(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    if (st != RC_OK) return st;
    snprintf(name, (size_t)name_len, "%s", p.name);
    *major = p.major;
    *minor = p.minor;
    return RC_OK;
}

extern "C" int rc_runtime_version_cuda(void) {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    return v;
}

extern "C" rc_status rc_stream_wait_cuda(void *waiter, void *signaler, int device) {
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        e = cudaEventRecord(ev, (cudaStream_t)signaler);
        if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
        cudaEventDestroy(ev); /* released once the wait has been satisfied */
    }
    /* the order must hold even when the event path fails: wait on the host instead */
    if (e != cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)signaler);
    st = RC_CUDA_CHECK(e, "stream wait");
    rc_status left = guard.leave();
    return st != RC_OK ? st : left;
}

extern "C" rc_status rc_graph_launch_cuda(void *exec, void *stream, void *consumer, void *consumer_event,
                                          void *done, void *ready, int device) {
    /* one C call instead of five Python ones (stream context, wait, replay, record, the
     * consumer's wait): in a host-bound training step the loader's cost is its host time per
     * batch (docs/perf-notes.md v10, v11) */
    rc_device_guard guard;
    rc_status st = guard.enter(device);
    if (st != RC_OK) return st;
    cudaStream_t s = (cudaStream_t)stream, c = (cudaStream_t)consumer;
    st = RC_CUDA_CHECK(cudaEventRecord((cudaEvent_t)consumer_event, c), "cudaEventRecord");
    if (st == RC_OK) st = RC_CUDA_CHECK(cudaStreamWaitEvent(s, (cudaEvent_t)consumer_event, 0), "cudaStreamWaitEvent");
    if (st == RC_OK) st = RC_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, s), "cudaGraphLaunch");
    if (st == RC_OK) st = RC_CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, s), "cudaEventRecord");
    if (st == RC_OK && ready) st = RC_CUDA_CHECK(cudaStreamWaitEvent(c, (cudaEvent_t)ready, 0), "cudaStreamWaitEvent");
    rc_status left = guard.leave();
    return st != RC_OK ? st : left;
}

extern "C" rc_status rc_pointer_kind_cuda(int *kind, int *device, void **device_ptr,
                                         const void *ptr) {
    *kind = 0;
    *device = -1;
    *device_ptr = NULL;
    cudaPointerAttributes attr;
    cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
    if (e == cudaErrorInvalidValue) { /* older runtimes: memory they never saw */
        (void)cudaGetLastError();
        return RC_OK;
    }
    rc_status st = RC_CUDA_CHECK(e, "cudaPointerGetAttributes");
    if (st != RC_OK) return st;
    if (attr.type == cudaMemoryTypeHost) {
        /* pinned: with unified addressing devicePointer is ptr itself; ask anyway, a system
         * without it maps pinned memory at another address (or not at all) */
        *kind = 1;
        *device = attr.device;
        *device_ptr = attr.devicePointer;
    } else if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
        *kind = 2;
        *device = attr.device;
        *device_ptr = attr.devicePointer;
    }
    return RC_OK;
}

/* A failed registration leaves its error for the next cudaGetLastError, which would then blame the
 * next kernel launch: cleared here, reported through the status. */
extern "C" rc_status rc_host_register_cuda(void *ptr, size_t nbytes, int read_only) {
    unsigned flags = cudaHostRegisterPortable | cudaHostRegisterMapped;
    if (read_only) flags |= cudaHostRegisterReadOnly;
    cudaError_t e = cudaHostRegister(ptr, nbytes, flags);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return RC_CUDA_CHECK(e, "cudaHostRegister");
}

extern "C" rc_status rc_host_unregister_cuda(void *ptr) {
    cudaError_t e = cudaHostUnregister(ptr);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return RC_CUDA_CHECK(e, "cudaHostUnregister");
}

extern "C" int rc_driver_version_cuda(void) {
    int v = 0;
    cudaDriverGetVersion(&v);
    return v;
}
