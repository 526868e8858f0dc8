/* dlpack.h: robocache's own declarations of the DLPack 1.3 ABI.
 *
 * Layout-compatible with dmlc/dlpack's dlpack.h (v1.3), written here so the build needs
 * nothing from the frameworks. Only what robocache uses is declared; every field keeps the
 * spec's meaning. Units: shape and strides count elements, byte_offset counts bytes.
 */
#ifndef RC_DLPACK_H
#define RC_DLPACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/* int32 on every ABI that matters: the spec's enum is declared `: int32_t` in C++. */
typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3, /* pinned host memory: CPU-addressable */
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
    kDLMAIA = 17,
    kDLTrn = 18,
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
} DLDataTypeCode;

typedef struct {
    uint8_t code;   /* DLDataTypeCode */
    uint8_t bits;   /* bits per lane */
    uint16_t lanes; /* 1 for scalars; robocache rejects vector types */
} DLDataType;

typedef struct {
    void *data;           /* base pointer; the first element is at data + byte_offset */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;       /* [ndim], owned by the producer */
    int64_t *strides;     /* [ndim] in elements, or NULL for compact row-major */
    uint64_t byte_offset; /* bytes */
} DLTensor;

/* Legacy (pre-1.0) managed tensor: capsule "dltensor", renamed "used_dltensor" once consumed. */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self); /* may be NULL */
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)

/* Versioned managed tensor: capsule "dltensor_versioned", renamed "used_dltensor_versioned". */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; /* a consumer must not read past this unless major matches */
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self); /* may be NULL */
    uint64_t flags;        /* DLPACK_FLAG_BITMASK_* */
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- The C exchange API (DLPack 1.2+): `type(x).__dlpack_c_exchange_api__`, a capsule named
 * "dlpack_exchange_api" pointing at a process-lifetime DLPackExchangeAPI. Each function returns
 * 0 on success and -1 with a Python exception set (the allocator reports through SetError). */

typedef int (*DLPackManagedTensorAllocator)(
    DLTensor *prototype, /* only dtype, ndim, shape and device are read */
    DLManagedTensorVersioned **out, void *error_ctx,
    void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object,
                                                      DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor, /* stolen */
                                                    void **out_py_object);       /* new ref */
/* Fills a caller-owned DLTensor whose shape/strides stay owned by the object: valid only while
 * the object is alive and unchanged. No stream sync: use current_work_stream. */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void **out_current_stream);

typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    DLPackManagedTensorAllocator managed_tensor_allocator;
    DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
    DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
    DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
    DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
}
#endif
#endif /* RC_DLPACK_H */
