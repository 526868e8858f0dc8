"""File readers: LeRobot v2.x/v3 (+ GR00T modality.json), robomimic HDF5, diffusion-policy zarr.

Each ``from_<format>`` reads the files once (read-only) into NumPy episodes and hands them to
``Dataset.from_episodes``; ``read_<format>`` stops before that and returns the ``Episodes``
(the constructor's keyword arguments), for inspection or custom pipelines. Optional
dependencies are imported when used: ``pip install robocache[lerobot]`` (pyarrow, av),
``robocache[robomimic]`` (h5py), ``robocache[zarr]`` (zarr). A missing, corrupt or truncated
file raises ``ReaderError`` (a ValueError) naming the file. Differences from LeRobot / GR00T /
robomimic / diffusion-policy semantics: docs/dataset.md, "Readers".
"""

from __future__ import annotations

from ._common import Episodes, ReaderError
from .lerobot import read_lerobot, read_modality, read_stats
from .robomimic import read_robomimic
from .video import available_backends, decode_video, decode_videos
from .zarr_store import read_zarr

__all__ = ["Episodes", "ReaderError", "available_backends", "decode_video", "decode_videos", "from_lerobot",
           "from_robomimic", "from_zarr", "read_lerobot", "read_modality", "read_robomimic", "read_stats",
           "read_zarr"]


def from_lerobot(path, *, load_video: bool = True, video_resize=None, video_backend: str = "auto",
                 episodes=None, device=None, modality_subkeys: bool = True, annotations: str = "text",
                 video_timestamps: str = "pts", show_progress: bool | None = None, max_workers: int | None = None,
                 validate: bool = True):
    """Load a LeRobot v2.0/v2.1/v3.0 dataset folder (GR00T flavour included) as a Dataset.

    Parameters
    ----------
    path : str or PathLike
        The dataset root (holding ``meta/info.json``).
    load_video : bool
        Decode the video features once, at load, to uint8 ``[F, H, W, 3]`` image streams with
        their frame times (default). False leaves videos out.
    video_resize : (height, width), optional
        Resize frames while decoding.
    video_backend : "auto", "pyav", "opencv" or "torchvision"
        "auto" takes PyAV, else OpenCV, else torchvision.io.
    episodes : list of int, optional
        Episode indices (``episode_index``) to load; default all.
    device : optional
        Where the Dataset lives (default: cuda when available).
    modality_subkeys : bool
        With GR00T ``meta/modality.json``, add ``state.<part>`` / ``action.<part>`` streams: the
        ``[start, end)`` slices of their original key, copied, sharing its times.
    annotations : "text" or "index"
        GR00T ``annotation.<key>`` columns hold task indices; "text" turns them into text streams
        of the task strings (GR00T), "index" keeps the integers (LeRobot).
    video_timestamps : "pts" or "parquet"
        Frame times from the video's pts (default; what LeRobot/GR00T's decoders match the
        ``timestamp`` column against), or the parquet ``timestamp`` of the row with the same
        index (needs one frame per row).
    show_progress : bool, optional
        Progress bar for video decoding (default: when stderr is a TTY and tqdm is installed).

    Streams keep LeRobot's keys (``observation.state``, ``action``,
    ``observation.images.ego_view``); times are the ``timestamp`` column (seconds).
    """
    eps = read_lerobot(path, load_video=load_video, video_resize=video_resize, video_backend=video_backend,
                       episodes=episodes, modality_subkeys=modality_subkeys, annotations=annotations,
                       video_timestamps=video_timestamps, show_progress=show_progress, max_workers=max_workers)
    return eps.to_dataset(device=device, validate=validate)


def from_robomimic(path, obs_keys=None, filter_key: str | None = None, rate: float | None = None, *,
                   include_next_obs: bool = False, device=None, validate: bool = True):
    """Load a robomimic HDF5 file as a Dataset.

    Parameters
    ----------
    path : str or PathLike
    obs_keys : list of str, optional
        Keys under ``data/demo_i/obs`` (default: all of the first demo's).
    filter_key : str, optional
        A ``mask/<filter_key>`` demo list (e.g. "train", "valid", "20_percent").
    rate : float, optional
        Control rate in Hz; sample i is at ``i / rate`` seconds. Default: ``control_freq`` from
        ``data.attrs["env_args"]`` when the file has it, else 20 Hz (robosuite's default).
    include_next_obs : bool
        Also load ``next_obs/<key>`` streams.

    Streams: ``obs/<key>``, ``actions``, ``rewards``, ``dones`` (paths inside the demo group);
    demos in numeric order (demo_2 before demo_10).
    """
    eps = read_robomimic(path, obs_keys=obs_keys, filter_key=filter_key, rate=rate,
                         include_next_obs=include_next_obs)
    return eps.to_dataset(device=device, validate=validate)


def from_zarr(path, rate: float = 10.0, keys=None, *, device=None, validate: bool = True,
              show_progress: bool | None = None):
    """Load a diffusion-policy ReplayBuffer (``data/<key>``, ``meta/episode_ends``) as a Dataset.

    Parameters
    ----------
    path : str or PathLike
        A zarr directory store (or a ``.zarr.zip``).
    rate : float
        Steps per second: step i of an episode is at ``i / rate`` seconds (PushT: 10 Hz).
    keys : list of str, optional
        Arrays under ``data/`` to load (default all). Dtypes are kept (PushT ``img`` is float32).
    """
    eps = read_zarr(path, rate=rate, keys=keys, show_progress=show_progress)
    return eps.to_dataset(device=device, validate=validate)
