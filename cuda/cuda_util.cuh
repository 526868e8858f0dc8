/* cuda_util.cuh: error checking and the device guard shared by the CUDA launchers.
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

#endif
