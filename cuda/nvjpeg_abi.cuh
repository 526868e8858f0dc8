/* nvjpeg_abi.cuh: the part of NVIDIA's nvJPEG C ABI that cuda/jpeg.cu calls, declared here so the
 * build needs no nvJPEG headers (the library is loaded with dlopen at first use). Values and
 * layouts as in nvjpeg.h of CUDA 11-13, which keep them stable. */
#ifndef RC_NVJPEG_ABI_CUH
#define RC_NVJPEG_ABI_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#define NVJPEG_MAX_COMPONENT 4

/* nvjpegBackend_t */
enum {
    NVJPEG_BACKEND_DEFAULT = 0,
    NVJPEG_BACKEND_HYBRID = 1,     /* Huffman decoding on the CPU */
    NVJPEG_BACKEND_GPU_HYBRID = 2, /* Huffman decoding on the GPU (batched, baseline) */
    NVJPEG_BACKEND_HARDWARE = 3,   /* the JPEG engines of A100/H100-class GPUs */
};

/* nvjpegOutputFormat_t: YUV = the planes as coded (4:2:0 stays 4:2:0), one per channel[] */
enum { NVJPEG_OUTPUT_YUV = 1 };

typedef struct {
    unsigned char *channel[NVJPEG_MAX_COMPONENT]; /* device pointers, one per plane */
    size_t pitch[NVJPEG_MAX_COMPONENT];           /* bytes per row of each plane */
} nvjpegImage_t;

typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;

/* Every call returns nvjpegStatus_t: 0 = success (names in jpeg.cu). */
typedef int (*nvjpeg_create_ex_fn)(int backend, void *dev_allocator, void *pinned_allocator,
                                   unsigned int flags, nvjpegHandle_t *handle);
typedef int (*nvjpeg_destroy_fn)(nvjpegHandle_t handle);
typedef int (*nvjpeg_state_create_fn)(nvjpegHandle_t handle, nvjpegJpegState_t *state);
typedef int (*nvjpeg_batched_init_fn)(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                      int batch_size, int max_cpu_threads, int output_format);
typedef int (*nvjpeg_batched_fn)(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                 const unsigned char *const *data, const size_t *lengths,
                                 nvjpegImage_t *destinations, cudaStream_t stream);
/* libraryPropertyType: 0 major, 1 minor, 2 patch */
typedef int (*nvjpeg_get_property_fn)(int type, int *value);

#endif
