"""Forged DLPack producers, for tests/test_dlpack_abuse.py and tools/fuzz_args.py.

`Forged(array, **faults)` wraps a numpy array and exports it through `__dlpack__` as a
handcrafted `DLManagedTensorVersioned` (or legacy `DLManagedTensor`) built with ctypes, laid out
as in csrc/dlpack.h. Without faults it is a correct producer; each keyword breaks one thing a
real producer could get wrong (see `Forged.__init__`).

Ownership follows the spec: the capsule's destructor (ours) calls the deleter when the capsule
is still unused (its name unchanged); a consumer that renames it to "used_*" owes the deleter
itself. Every export's deleter is a ctypes callback that counts its calls, so a test can check
that each managed tensor was released exactly once (`Forged.deleter_counts()`), whoever did it.

`ForgedExchange` makes a type whose `__dlpack_c_exchange_api__` is junk or a forged table.
"""

from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16,
                    c_uint32, c_uint64, c_void_p)

import numpy as np

# ----------------------------------------------------------------------------
# the ABI (csrc/dlpack.h)


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)  # void (*)(DLManagedTensor[Versioned] *)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", DELETER),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(DLManagedTensorVersioned) == 80

READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
CPU, CUDA, CUDA_HOST, OPENCL, VULKAN, METAL, CUDA_MANAGED = 1, 2, 3, 4, 7, 8, 13
INT, UINT, FLOAT, OPAQUE, BFLOAT, COMPLEX, BOOL = 0, 1, 2, 3, 4, 5, 6

_DL_CODES = {"i": INT, "u": UINT, "f": FLOAT, "b": BOOL, "c": COMPLEX}


def dl_dtype(dtype) -> tuple[int, int, int]:
    """(code, bits, lanes) of a numpy dtype."""
    dtype = np.dtype(dtype)
    return _DL_CODES[dtype.kind], dtype.itemsize * 8, 1


# ----------------------------------------------------------------------------
# capsules

_DESTRUCTOR = CFUNCTYPE(None, c_void_p)  # takes the raw PyObject*: no reference games in dealloc


def _capi(name, restype, *argtypes):
    """Our own prototype of a C API function (ctypes.pythonapi.<name> is shared: setting its
    argtypes would change them for everyone)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


class _API:
    PyCapsule_New = _capi("PyCapsule_New", ctypes.py_object, c_void_p, c_void_p, _DESTRUCTOR)
    PyCapsule_GetContext = _capi("PyCapsule_GetContext", c_void_p, c_void_p)
    PyCapsule_SetContext = _capi("PyCapsule_SetContext", ctypes.c_int, ctypes.py_object, c_void_p)
    PyCapsule_GetName = _capi("PyCapsule_GetName", c_char_p, c_void_p)


_api = _API

_NAMES: dict[bytes, ctypes.Array] = {}  # capsule names must outlive their capsules: never freed
_LIVE: dict[int, "Export"] = {}         # context id -> export, while its capsule lives
_next_id = [1]


def _name_ptr(name: bytes | None):
    if name is None:
        return None
    if name not in _NAMES:
        _NAMES[name] = ctypes.create_string_buffer(name)
    return ctypes.addressof(_NAMES[name])


@_DESTRUCTOR
def _capsule_destructor(capsule):
    """The producer's side of the protocol: an unused capsule frees its tensor."""
    export = _LIVE.pop(_api.PyCapsule_GetContext(capsule) or 0, None)
    if export is not None and _api.PyCapsule_GetName(capsule) == export.capsule_name:
        export.call_deleter()


def capsule(pointer: int, name: bytes | None, export: "Export | None" = None):
    """A PyCapsule around `pointer` with our destructor; `export` is released by it when unused."""
    cap = _api.PyCapsule_New(pointer, _name_ptr(name), _capsule_destructor)
    if export is not None:
        key = _next_id[0]
        _next_id[0] += 1
        _LIVE[key] = export
        export.capsule_name = name
        _api.PyCapsule_SetContext(cap, key)
    return cap


class Export:
    """One managed tensor handed out by __dlpack__, with its deleter's call count."""

    def __init__(self, struct, has_deleter: bool):
        self.struct = struct
        self.deleted = 0
        self.has_deleter = has_deleter
        self.capsule_name = None
        self._deleter = DELETER(self._on_delete) if has_deleter else DELETER()
        struct.deleter = self._deleter

    def _on_delete(self, ptr):
        self.deleted += 1

    def call_deleter(self):
        if self.has_deleter:
            self._deleter(ctypes.addressof(self.struct))


_UNSET = object()


class Forged:
    """A DLPack producer around numpy array `array` (kept alive; its bytes back the export).

    Faults (all optional; defaults describe `array` correctly):
      versioned      False: legacy DLManagedTensor in a "dltensor" capsule
      legacy_only    __dlpack__ rejects max_version= with TypeError (a pre-1.0 producer)
      version        (major, minor) of a versioned export
      capsule_name   bytes or None (NULL name)
      flags          DLPACK_FLAG_* of a versioned export (READ_ONLY = 1)
      data           int address (0 = NULL) instead of the array's
      device         (device_type, device_id) written into the DLTensor
      dtype          (code, bits, lanes)
      ndim           the ndim field (shape/strides arrays keep their own length)
      shape, strides sequences of int, or None for a NULL pointer (strides None = compact)
      byte_offset    int
      null_deleter   the deleter pointer is NULL
      dlpack_raises  an exception instance raised by __dlpack__
      dlpack_returns any object returned by __dlpack__ instead of a capsule
      device_raises  an exception instance raised by __dlpack_device__
      device_returns any object returned by __dlpack_device__ (default: the `device` pair)
      reuse_capsule  __dlpack__ returns the same capsule every time (consumed twice)
    """

    def __init__(self, array, *, versioned=True, legacy_only=False, version=(1, 3), capsule_name=_UNSET,
                 flags=0, data=_UNSET, device=(CPU, 0), dtype=_UNSET, ndim=_UNSET, shape=_UNSET,
                 strides=_UNSET, byte_offset=0, null_deleter=False, dlpack_raises=None, dlpack_returns=_UNSET,
                 device_raises=None, device_returns=_UNSET, reuse_capsule=False):
        array = np.asarray(array)
        self.array = array
        self.snapshot = array.tobytes() if array.size < 2**24 else None
        self.versioned = versioned and not legacy_only
        self.legacy_only = legacy_only
        self.version = version
        self.capsule_name = (b"dltensor_versioned" if self.versioned else b"dltensor") \
            if capsule_name is _UNSET else capsule_name
        self.flags = flags
        self.data = array.ctypes.data if data is _UNSET else data
        self.device = device
        self.dtype = dl_dtype(array.dtype) if dtype is _UNSET else dtype
        if shape is _UNSET:
            shape = array.shape
        if strides is _UNSET:
            assert all(s % array.itemsize == 0 for s in array.strides), "strides not in elements"
            strides = tuple(s // array.itemsize for s in array.strides)
        self.shape, self.strides = shape, strides
        self.ndim = (len(shape) if shape is not None else array.ndim) if ndim is _UNSET else ndim
        self.byte_offset = byte_offset
        self.null_deleter = null_deleter
        self.dlpack_raises, self.dlpack_returns = dlpack_raises, dlpack_returns
        self.device_raises, self.device_returns = device_raises, device_returns
        self.reuse_capsule = reuse_capsule
        self.exports: list[Export] = []
        self.dlpack_calls = []  # the keyword arguments of each __dlpack__ call
        self._keep = []         # ctypes arrays the exports point at
        self._capsule = None

    # -- the protocol

    def __dlpack_device__(self):
        if self.device_raises is not None:
            raise self.device_raises
        if self.device_returns is not _UNSET:
            return self.device_returns
        return tuple(self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None, **extra):
        if extra:
            raise TypeError(f"__dlpack__() got unexpected keywords {sorted(extra)}")
        if self.legacy_only and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.dlpack_calls.append({"stream": stream, "max_version": max_version})
        if self.dlpack_raises is not None:
            raise self.dlpack_raises
        if self.dlpack_returns is not _UNSET:
            return self.dlpack_returns
        if self.reuse_capsule and self._capsule is not None:
            return self._capsule
        cap = self.export()
        if self.reuse_capsule:
            self._capsule = cap
        return cap

    # -- building one export

    def _int64s(self, values):
        if values is None:
            return None
        arr = (c_int64 * max(len(values), 1))(*[int(v) for v in values])
        self._keep.append(arr)
        return ctypes.cast(arr, POINTER(c_int64))

    def export(self):
        """A fresh capsule (the name in self.capsule_name) around a new managed tensor."""
        struct = DLManagedTensorVersioned() if self.versioned else DLManagedTensor()
        t = struct.dl_tensor
        t.data = self.data or None
        t.device.device_type, t.device.device_id = self.device
        t.ndim = self.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = self.dtype
        t.shape = self._int64s(self.shape)
        t.strides = self._int64s(self.strides)
        t.byte_offset = self.byte_offset
        if self.versioned:
            struct.version.major, struct.version.minor = self.version
            struct.flags = self.flags
        export = Export(struct, has_deleter=not self.null_deleter)
        self.exports.append(export)
        return capsule(ctypes.addressof(struct), self.capsule_name, export)

    # -- what tests check

    def deleter_counts(self) -> list[int]:
        """Deleter calls per export that has a deleter (each must be exactly 1 once released)."""
        return [e.deleted for e in self.exports if e.has_deleter]

    def unchanged(self) -> bool:
        return self.snapshot is None or self.array.tobytes() == self.snapshot

    def release(self):
        """Drop a reused capsule (its destructor then does what the protocol says)."""
        self._capsule = None


# ----------------------------------------------------------------------------
# the DLPack C exchange API


class DLPackExchangeAPIHeader(Structure):
    pass


DLPackExchangeAPIHeader._fields_ = [("version", DLPackVersion), ("prev_api", POINTER(DLPackExchangeAPIHeader))]


class DLPackExchangeAPI(Structure):
    _fields_ = [("header", DLPackExchangeAPIHeader), ("managed_tensor_allocator", c_void_p),
                ("managed_tensor_from_py_object_no_sync", c_void_p),
                ("managed_tensor_to_py_object_no_sync", c_void_p),
                ("dltensor_from_py_object_no_sync", c_void_p), ("current_work_stream", c_void_p)]


_TABLES = []  # forged tables live as long as the process, as the spec says real ones do


def exchange_attr(kind: str):
    """A value for a type's __dlpack_c_exchange_api__ attribute:
    'int' (not a capsule), 'wrong-name' (a capsule of another name), 'old' (version 0.9),
    'future' (2.0), 'null-functions' (1.3 with every function NULL), 'cycle' (a 0.1 table whose
    prev_api points at itself)."""
    if kind == "int":
        return 12345
    table = DLPackExchangeAPI()
    _TABLES.append(table)
    major, minor = {"wrong-name": (1, 3), "old": (0, 9), "future": (2, 0), "null-functions": (1, 3),
                    "cycle": (0, 1)}[kind]
    table.header.version.major, table.header.version.minor = major, minor
    if kind == "cycle":
        table.header.prev_api = ctypes.pointer(table.header)
    name = b"not_the_exchange_api" if kind == "wrong-name" else b"dlpack_exchange_api"
    return capsule(ctypes.addressof(table), name)


def forged_type_with_exchange(kind: str):
    """A Forged subclass (a new type) carrying exchange_attr(kind) as its type attribute."""
    return type(f"ForgedExchange_{kind.replace('-', '_')}", (Forged,),
                {"__dlpack_c_exchange_api__": exchange_attr(kind), "__module__": __name__})
