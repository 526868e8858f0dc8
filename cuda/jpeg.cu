/* cuda/jpeg.cu: the compressed frame tier's per-batch decode: JPEG bitstreams (4:2:0, as
 * robocache's ingest writes them) -> I420 rows on the GPU through nvJPEG's batched decoder.
 * Layout (elements): out [count, H*W + 2*ch*cw] uint8 on the device, one row per bitstream
 * (Y, then U, then V of ch x cw = ceil(H/2) x ceil(W/2)); data/lengths: host arrays of count.
 * nvJPEG is loaded with dlopen on first use (like cudart, users need only the driver until they
 * ask for this tier); its declarations are our own (nvjpeg_abi.cuh), so building needs no nvJPEG.
 * Benchmark: python benchmarks/bench_scale.py --decode-only */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../csrc/robocache.h"
#include "cuda_util.cuh"
#include "nvjpeg_abi.cuh"

namespace {

struct nvjpeg_api {
    void *lib = nullptr;
    char path[512] = {0};
    nvjpeg_create_ex_fn create_ex = nullptr;
    nvjpeg_destroy_fn destroy = nullptr;
    nvjpeg_state_create_fn state_create = nullptr;
    nvjpeg_batched_init_fn batched_init = nullptr;
    nvjpeg_batched_fn batched = nullptr;
    nvjpeg_get_property_fn get_property = nullptr;
};

/* One decoder per device and backend asked for (auto or one named): nvJPEG's handle and state are
 * bound to the device current at creation and a state decodes one batch at a time, so calls on one
 * decoder are serialized by its lock. (Several states of one handle decoding at once from the
 * threads of one process failed with NVJPEG_STATUS_ALLOCATOR_FAILURE on the H100's hardware
 * backend; a handle per state is untried: docs/perf-notes.md.) */
struct decoder {
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    nvjpegHandle_t handle = nullptr;
    nvjpegJpegState_t state = nullptr;
    int backend = -1;   /* NVJPEG_BACKEND_* in use */
    int batch = 0;      /* batch size the state is initialized for */
};

pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;
nvjpeg_api g_api;
constexpr int kChoices = 5; /* auto, then NVJPEG_BACKEND_DEFAULT .. HARDWARE */
decoder g_dec[64][kChoices];

const char *status_name(int s) {
    static const char *const names[] = {
        "SUCCESS", "NOT_INITIALIZED", "INVALID_PARAMETER", "BAD_JPEG", "JPEG_NOT_SUPPORTED",
        "ALLOCATOR_FAILURE", "EXECUTION_FAILED", "ARCH_MISMATCH", "INTERNAL_ERROR",
        "IMPLEMENTATION_NOT_SUPPORTED", "INCOMPLETE_BITSTREAM"};
    return s >= 0 && s <= 10 ? names[s] : "unknown status";
}

rc_status jpeg_fail(int s, const char *what) {
    /* BAD_JPEG/INCOMPLETE_BITSTREAM are data problems (ValueError); the rest, CUDA/library ones */
    rc_status kind = (s == 3 || s == 10) ? RC_ERR_VALUE : RC_ERR_CUDA;
    return rc_fail(kind, "nvJPEG %s failed: NVJPEG_STATUS_%s (%d)", what, status_name(s), s);
}

template <typename F> rc_status sym(F *fn, const char *name) {
    *fn = (F)dlsym(g_api.lib, name);
    if (!*fn)
        return rc_fail(RC_ERR_UNSUPPORTED, "%s has no symbol %s (not an nvJPEG library?)", g_api.path,
                       name);
    return RC_OK;
}

/* Loads nvJPEG once: `library` (a path or soname) or, when NULL/empty, the CUDA 13 and 12
 * sonames. A later call with another path keeps the first library. */
rc_status load(const char *library) {
    pthread_mutex_lock(&g_load_lock);
    rc_status st = RC_OK;
    if (!g_api.lib) {
        const char *names[] = {library, "libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"};
        const int first = (library && library[0]) ? 0 : 1;
        const int last = (library && library[0]) ? 1 : 4;
        const char *err = "";
        for (int i = first; i < last && !g_api.lib; i++) {
            g_api.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            if (g_api.lib)
                snprintf(g_api.path, sizeof g_api.path, "%s", names[i]);
            else
                err = dlerror();
        }
        if (!g_api.lib) {
            st = rc_fail(RC_ERR_UNSUPPORTED,
                         "nvJPEG could not be loaded (%s); the compressed frame tier decodes on the "
                         "GPU with it: install torchvision or nvidia-nvjpeg-cu12/-cu13, or point "
                         "ROBOCACHE_NVJPEG at libnvjpeg.so",
                         err ? err : "not found");
        } else if ((st = sym(&g_api.create_ex, "nvjpegCreateEx")) != RC_OK ||
                   (st = sym(&g_api.destroy, "nvjpegDestroy")) != RC_OK ||
                   (st = sym(&g_api.state_create, "nvjpegJpegStateCreate")) != RC_OK ||
                   (st = sym(&g_api.batched_init, "nvjpegDecodeBatchedInitialize")) != RC_OK ||
                   (st = sym(&g_api.batched, "nvjpegDecodeBatched")) != RC_OK ||
                   (st = sym(&g_api.get_property, "nvjpegGetProperty")) != RC_OK) {
            dlclose(g_api.lib);
            g_api = nvjpeg_api();
        }
    }
    pthread_mutex_unlock(&g_load_lock);
    return st;
}

/* The backends to try for `choice` (-1: auto; else one NVJPEG_BACKEND_*, alone): auto takes the
 * A100/H100 JPEG engines, then GPU Huffman decoding, then the default. Measured on an H100
 * (docs/perf-notes.md): GPU Huffman makes the loader alone 48% faster (4.6k against 3.1k samples/s
 * of 3 cameras at batch 64), but its kernels share the SMs with the model: in a GR00T-sized step
 * it cost 3.0% against the engines' 0.8%, so the engines stay first (robocache.frames.jpeg passes
 * ROBOCACHE_NVJPEG_BACKEND as `choice` for loader-bound runs). */
int backends(int choice, int *out) {
    if (choice >= 0) {
        out[0] = choice;
        return 1;
    }
    out[0] = NVJPEG_BACKEND_HARDWARE;
    out[1] = NVJPEG_BACKEND_GPU_HYBRID;
    out[2] = NVJPEG_BACKEND_DEFAULT;
    return 3;
}

const char *const kBackendNames[] = {"default", "hybrid", "gpu_hybrid", "hardware"};

/* The decoder of (device, choice), or NULL after rc_fail for an argument out of range. */
decoder *decoder_for(int device, int choice) {
    if (device < 0 || device >= 64) {
        rc_fail(RC_ERR_VALUE, "device %d out of range", device);
        return nullptr;
    }
    if (choice < -1 || choice > NVJPEG_BACKEND_HARDWARE) {
        rc_fail(RC_ERR_VALUE, "nvJPEG backend %d out of range (-1 auto, 0..3)", choice);
        return nullptr;
    }
    return &g_dec[device][choice + 1];
}

/* Creates the decoder (lock held, device current) with the first backend of `choice` that the
 * library and GPU have; a backend named alone that is missing fails naming it. */
rc_status open_decoder(decoder *d, int choice) {
    if (d->handle) return RC_OK;
    int order[3], n = backends(choice, order), s = 0;
    for (int i = 0; i < n; i++) {
        s = g_api.create_ex(order[i], nullptr, nullptr, 0, &d->handle);
        if (s == 0) {
            d->backend = order[i];
            break;
        }
        d->handle = nullptr;
    }
    if (!d->handle && choice >= 0)
        return rc_fail(RC_ERR_UNSUPPORTED, "nvJPEG has no %s backend here (nvjpegCreateEx: "
                       "NVJPEG_STATUS_%s); unset ROBOCACHE_NVJPEG_BACKEND to let robocache choose",
                       kBackendNames[choice], status_name(s));
    if (!d->handle) return jpeg_fail(s, "nvjpegCreateEx");
    s = g_api.state_create(d->handle, &d->state);
    if (s != 0) {
        g_api.destroy(d->handle);
        d->handle = nullptr;
        return jpeg_fail(s, "nvjpegJpegStateCreate");
    }
    return RC_OK;
}

}  // namespace

extern "C" rc_status rc_jpeg_backend_cuda(char *name, int name_len, const char *library, int device,
                                     int choice) {
    decoder *d = decoder_for(device, choice);
    if (!d) return RC_ERR_VALUE;
    rc_status st = load(library);
    if (st != RC_OK) return st;
    rc_device_guard guard;
    if ((st = guard.enter(device)) != RC_OK) return st;
    pthread_mutex_lock(&d->lock);
    st = open_decoder(d, choice);
    const int b = d->backend;
    pthread_mutex_unlock(&d->lock);
    rc_status left = guard.leave();
    if (st != RC_OK) return st;
    int major = 0, minor = 0, patch = 0;
    g_api.get_property(0, &major);
    g_api.get_property(1, &minor);
    g_api.get_property(2, &patch);
    snprintf(name, (size_t)name_len, "%s (nvJPEG %d.%d.%d, %s)", b >= 0 && b <= 3 ? kBackendNames[b] : "?",
             major, minor, patch, g_api.path);
    return left;
}

extern "C" rc_status rc_decode_jpeg_cuda(uint8_t *out, const uint8_t *const *data,
                                         const size_t *lengths, int64_t count, int64_t height,
                                         int64_t width, const char *library, int device,
                                         int choice, void *stream) {
    if (count <= 0) return RC_OK;
    decoder *d = decoder_for(device, choice);
    if (!d) return RC_ERR_VALUE;
    if (count > (1 << 20)) return rc_fail(RC_ERR_VALUE, "%lld frames in one call (max 2^20)", (long long)count);
    rc_status st = load(library);
    if (st != RC_OK) return st;
    const int64_t ch = (height + 1) / 2, cw = (width + 1) / 2;
    const int64_t row = height * width + 2 * ch * cw;
    nvjpegImage_t *dst = (nvjpegImage_t *)calloc((size_t)count, sizeof(nvjpegImage_t));
    if (!dst) return rc_fail(RC_ERR_NOMEM, "no host memory for %lld image descriptors", (long long)count);
    for (int64_t m = 0; m < count; m++) {
        uint8_t *y = out + m * row;
        dst[m].channel[0] = y;
        dst[m].pitch[0] = (size_t)width;
        dst[m].channel[1] = y + height * width;
        dst[m].pitch[1] = (size_t)cw;
        dst[m].channel[2] = y + height * width + ch * cw;
        dst[m].pitch[2] = (size_t)cw;
    }
    rc_device_guard guard;
    /* cudaSetDevice even when `device` is already the current one: a thread that never touched
     * CUDA (the loader's batch thread) may have no context current yet for nvJPEG's own runtime */
    if ((st = guard.enter(device)) != RC_OK ||
        (st = RC_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice")) != RC_OK) {
        free(dst);
        rc_status left = guard.leave();
        return st != RC_OK ? st : left;
    }
    pthread_mutex_lock(&d->lock);
    st = open_decoder(d, choice);
    if (st == RC_OK && d->batch != (int)count) {
        /* re-initialized only when the batch size changes (the loader's is fixed) */
        int s = g_api.batched_init(d->handle, d->state, (int)count, 1, NVJPEG_OUTPUT_YUV);
        d->batch = s == 0 ? (int)count : 0;
        if (s != 0) st = jpeg_fail(s, "nvjpegDecodeBatchedInitialize");
    }
    if (st == RC_OK && d->backend == NVJPEG_BACKEND_HARDWARE) {
        /* The JPEG engines write `out` when nvjpegDecodeBatched is called, not after the work queued
         * on `stream` before it (measured by torchcodec#1634 on H100s, nvJPEG 12.3-13.2; a device-side
         * wait on a second stream does not gate the write either). `out` may be a block the caching
         * allocator handed back while queued kernels still read it: only a host wait for the stream
         * orders the write. The decode holds this thread until the frames are written anyway. */
        st = RC_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
    }
    if (st == RC_OK) {
        int s = g_api.batched(d->handle, d->state, (const unsigned char *const *)data, lengths, dst,
                              (cudaStream_t)stream);
        if (s != 0) {
            d->batch = 0; /* a failed batch needs a fresh initialization */
            st = jpeg_fail(s, "nvjpegDecodeBatched");
        } else {
            st = RC_CUDA_CHECK(cudaGetLastError(), "nvJPEG decode launch");
        }
    }
    pthread_mutex_unlock(&d->lock);
    free(dst);
    rc_status left = guard.leave();
    return st != RC_OK ? st : left;
}
