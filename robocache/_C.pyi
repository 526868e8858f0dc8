"""Type stubs for robocache._C, the compiled core."""
from typing import Any, Literal, overload

__version__: str
WITH_CUDA: int

class CudaError(RuntimeError): ...

Mode = Literal["linear", "nearest", "previous", "next", "slerp"]

@overload
def resample(values: Any, times: Any, new_times: Any, *, mode: Mode = "linear",
             offsets: Any | None = None, index: Any | None = None, lengths: Any | None = None,
             out: Any | None = None, return_mask: Literal[False] = False,
             tolerance: float = 1e-4, check: bool | None = None,
             stream: Any | None = None) -> Any: ...
@overload
def resample(values: Any, times: Any, new_times: Any, *, mode: Mode = "linear",
             offsets: Any | None = None, index: Any | None = None, lengths: Any | None = None,
             out: Any | None = None, return_mask: Literal[True],
             tolerance: float = 1e-4, check: bool | None = None,
             stream: Any | None = None) -> tuple[Any, Any]: ...
@overload   # a mode or return_mask only known at run time (a config's str, a bool variable)
def resample(values: Any, times: Any, new_times: Any, *, mode: str = "linear",
             offsets: Any | None = None, index: Any | None = None, lengths: Any | None = None,
             out: Any | None = None, return_mask: bool = False,
             tolerance: float = 1e-4, check: bool | None = None,
             stream: Any | None = None) -> Any: ...
VoxelMode = Literal["occupancy", "count", "sum", "mean", "max"]

@overload
def voxelize(points: Any, *, features: Any | None = None, lengths: Any | None = None,
             offsets: Any | None = None, grid: int | tuple[int, int, int],
             voxel_size: float | tuple[float, float, float], origin: tuple[float, float, float],
             mode: VoxelMode = "occupancy", dtype: Any | None = None, out: Any | None = None,
             deterministic: bool = True, return_dropped: Literal[False] = False,
             check: bool | None = None, stream: Any | None = None) -> Any: ...
@overload
def voxelize(points: Any, *, features: Any | None = None, lengths: Any | None = None,
             offsets: Any | None = None, grid: int | tuple[int, int, int],
             voxel_size: float | tuple[float, float, float], origin: tuple[float, float, float],
             mode: VoxelMode = "occupancy", dtype: Any | None = None, out: Any | None = None,
             deterministic: bool = True, return_dropped: Literal[True],
             check: bool | None = None, stream: Any | None = None) -> tuple[Any, Any]: ...
@overload   # mode or return_dropped only known at run time
def voxelize(points: Any, *, features: Any | None = None, lengths: Any | None = None,
             offsets: Any | None = None, grid: int | tuple[int, int, int],
             voxel_size: float | tuple[float, float, float], origin: tuple[float, float, float],
             mode: str = "occupancy", dtype: Any | None = None, out: Any | None = None,
             deterministic: bool = True, return_dropped: bool = False,
             check: bool | None = None, stream: Any | None = None) -> Any: ...
Stream = tuple[Any, Any] | tuple[Any, Any, Any]  # (values, times) or ragged (values, times, offsets)

@overload
def fuse(streams: list[Stream] | tuple[Stream, ...] | dict[Any, Stream], new_times: Any, *,
         modes: Mode | list[Mode] | tuple[Mode, ...] | dict[Any, Mode] | None = None,
         index: Any | None = None, out: Any | None = None, return_mask: Literal[False] = False,
         tolerance: float = 1e-4, check: bool | None = None,
         stream: Any | None = None) -> Any: ...
@overload
def fuse(streams: list[Stream] | tuple[Stream, ...] | dict[Any, Stream], new_times: Any, *,
         modes: Mode | list[Mode] | tuple[Mode, ...] | dict[Any, Mode] | None = None,
         index: Any | None = None, out: Any | None = None, return_mask: Literal[True],
         tolerance: float = 1e-4, check: bool | None = None,
         stream: Any | None = None) -> tuple[Any, Any]: ...
@overload   # modes or return_mask only known at run time
def fuse(streams: list[Stream] | tuple[Stream, ...] | dict[Any, Stream], new_times: Any, *,
         modes: str | list[str] | tuple[str, ...] | dict[Any, str] | None = None,
         index: Any | None = None, out: Any | None = None, return_mask: bool = False,
         tolerance: float = 1e-4, check: bool | None = None,
         stream: Any | None = None) -> Any: ...
FrameFormat = Literal["rgb", "yuv420"]
ColorMatrix = Literal["bt601", "bt709", "bt2020"]

def gather_frames(storage: Any, ids: Any, out: Any, *, format: FrameFormat, height: int, width: int,
                  channels: int, matrix: ColorMatrix = "bt601", full_range: bool = False,
                  scale: float | None = None, augment: Any | None = None, augment_group: int = 1,
                  scratch: Any | None = None, antialias: bool = True,
                  mean: tuple[float, float, float] | None = None, std: tuple[float, float, float] | None = None,
                  stream: Any | None = None) -> Any: ...
JpegBackend = Literal["auto", "hardware", "gpu_hybrid", "hybrid", "default"]
def decode_jpeg(storage: Any, offsets: Any, ids: Any, out: Any, *, height: int, width: int,
                library: str | None = None, backend: JpegBackend = "auto", stream: Any | None = None) -> Any: ...
def jpeg_backend(device: int, library: str | None = None, backend: JpegBackend = "auto", /) -> str: ...
def copy_planes(dst: Any, planes: Any, geometry: Any, /) -> None: ...
def encode_lossless(out: Any, sizes: Any, rows: Any, *, height: int, width: int, band: int | None = None,
                    threads: int | None = None) -> Any: ...
def decode_lossless(out: Any, data: Any, offsets: Any, ids: Any, *, height: int, width: int,
                    scratch: Any | None = None, stream: Any | None = None) -> Any: ...
def lossless_bound(height: int, width: int, band: int | None = None, /) -> int: ...
def set_num_threads(n: int, /) -> None: ...
def get_num_threads() -> int: ...
def _build_info() -> dict[str, Any]: ...
def _host_register(ptr: int, nbytes: int, read_only: bool, /) -> None: ...
def _host_unregister(ptr: int, /) -> None: ...
def _graph_launch(exec: int, stream: int, consumer: int, consumer_event: int, done: int, ready: int,
                  device: int, /) -> None: ...
