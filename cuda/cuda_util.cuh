/* cuda_util.cuh: error checking, the device guard and device attributes shared by the CUDA
 * launchers.
 * Every CUDA call goes through RC_CUDA_CHECK, which records the CUDA error string with the file
 * and line in robocache's last-error buffer; nothing prints or aborts. */
#ifndef RC_CUDA_UTIL_CUH
#define RC_CUDA_UTIL_CUH

#include <cuda_runtime.h>

#include "../csrc/robocache.h"

static inline rc_status rc_cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return RC_OK;
    return rc_fail(RC_ERR_CUDA, "%s failed: %s (%s) at %s:%d", what, cudaGetErrorString(e),
                   cudaGetErrorName(e), file, line);
}
#define RC_CUDA_CHECK(call, what) rc_cuda_check((call), (what), __FILE__, __LINE__)

/* Makes `device` current for a call and restores the caller's device after (multi-GPU safe). */
struct rc_device_guard {
    int prev = -1;
    bool changed = false;
    rc_status enter(int device) {
        rc_status st = RC_CUDA_CHECK(cudaGetDevice(&prev), "cudaGetDevice");
        if (st != RC_OK || prev == device) return st;
        changed = true;
        return RC_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice");
    }
    rc_status leave() {
        if (!changed) return RC_OK;
        changed = false;
        return RC_CUDA_CHECK(cudaSetDevice(prev), "cudaSetDevice (restore)");
    }
};

/* The device attributes launchers size their grids by, asked once per device: they are needed
 * on every call. */
enum rc_attr {
    RC_ATTR_SMS,           /* multiprocessors */
    RC_ATTR_L2_BYTES,      /* L2 cache */
    RC_ATTR_SMEM_PER_SM,   /* shared memory an SM holds, bytes */
    RC_ATTR_SMEM_RESERVED, /* shared memory the system keeps per block, bytes */
    RC_ATTR_THREADS_PER_SM,
    RC_ATTR_COUNT
};

/* Attribute `which` of `device`; 0 when the query fails (callers keep a fallback). */
static inline int rc_device_attr(int device, rc_attr which) {
    static const cudaDeviceAttr kAttrs[RC_ATTR_COUNT] = {
        cudaDevAttrMultiProcessorCount, cudaDevAttrL2CacheSize,
        cudaDevAttrMaxSharedMemoryPerMultiprocessor, cudaDevAttrReservedSharedMemoryPerBlock,
        cudaDevAttrMaxThreadsPerMultiProcessor};
    static int cache[64][RC_ATTR_COUNT]; /* 0: not asked; -1: unknown. Benign race: every
                                          * writer stores the same value */
    if (device >= 0 && device < 64 && cache[device][which])
        return cache[device][which] > 0 ? cache[device][which] : 0;
    int n = 0;
    if (cudaDeviceGetAttribute(&n, kAttrs[which], device) != cudaSuccess || n < 0) {
        (void)cudaGetLastError(); /* not sticky; keep it out of the later launch checks */
        n = 0;
    }
    if (device >= 0 && device < 64) cache[device][which] = n > 0 ? n : -1;
    return n;
}

#endif
