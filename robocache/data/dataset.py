"""robocache.Dataset: episodes of named, timestamped streams held ragged on one device.

The public facade over rooms by job: the stream model (``robocache.data.stream``: ``Stream``, ``Episode``,
``PointClouds``), the episode builder that checks and lays out what a reader read (``robocache.data.build``),
statistics (``robocache.data.stats``) and the readers (``robocache.readers``). A Dataset holds its streams and
episodes' metadata and answers the loader's one call per stream and batch, ``resample``.

Timestamps are validated once, at build (finite, non-decreasing per episode), which is why the
loader can call resample with ``check=False`` and never sync. torch is imported lazily:
``import robocache`` works with numpy alone. See docs/dataset.md.
"""

from __future__ import annotations

import html
import math
from typing import Iterable, Mapping, Sequence

import numpy as np

from .._C import resample as _resample
from .._util import dtype_name, fmt_bytes, fmt_seconds, plural, resolve_device
from .._util import torch as _torch
from .build import EpisodeBuilder
from ..loader.identity import lerobot_index
from ..loader.shard import lerobot_shard as _lerobot_shard    # (its name before it moved to shard.py)
from .stream import Episode, PointClouds, Stream, Streams  # PointClouds: public here as before the split

__all__ = ["Dataset", "Episode", "FramesView", "PointClouds", "Stream"]


class Dataset:
    """Episodes of named, timestamped streams, held ragged on one device.

    Build one with :meth:`from_episodes` (or a reader). ``len(ds)`` is the number of episodes;
    ``ds.streams[name]`` is a :class:`Stream`; ``ds.episode(e)`` returns views of one episode;
    ``ds.resample(...)`` is the loader's one call per stream and batch.

    Attributes
    ----------
    streams : dict[str, Stream]
        In the order they first appear; the first is the ``anchor``.
    episodes : list[Episode]
    tasks : list[str]
        The distinct task strings over all episodes, in first-seen order; a LeRobot dataset's are its
        task table in ``task_index`` order (``meta/tasks``), so an index into ``ds.tasks`` is LeRobot's
        ``task_index``. ``subset`` and ``to`` keep the list whole: a task's index is the same in every
        subset and shard (a sample's ``task_index`` in batches and ``ds[i]``).
    device : torch.device
    time_origin_ns : int or None
        When times were given as int64 nanoseconds, the smallest of them: stored times are
        ``(t_ns - time_origin_ns) / 1e9`` seconds. None for float-second input.
    source : str or None
    """

    def __init__(self, streams: Mapping[str, Stream], episodes: Sequence[Episode], *, device,
                 time_origin_ns: int | None = None, source: str | None = None, tasks: Sequence[str] | None = None):
        self.streams = Streams(streams)
        self.episodes = list(episodes)
        self.device = device
        self.time_origin_ns = time_origin_ns
        self.source = source
        # `tasks` given: the source's task table or a parent's list (subset, to), so a task's index stays
        # the same in every subset and shard; the episodes' own tasks follow in first-seen order
        self.tasks = list(dict.fromkeys([*(tasks or ()), *(t for ep in self.episodes for t in ep.tasks)]))
        # (rank, world_size, samples per rank) when loaded as one rank's episodes (from_lerobot's
        # shard_episodes): the DataLoader then takes it as this rank's shard as it is
        self.shard = None
        # LeRobot's metadata (readers.lerobot.LeRobotMeta) when read from a LeRobot set, kept by subset/to
        self.meta = None

    # --- construction --------------------------------------------------------------------

    @classmethod
    def from_episodes(cls, episodes: Iterable[Mapping[str, tuple]], *, kinds: Mapping[str, str] | None = None,
                      modes: Mapping[str, str] | None = None, rates: Mapping[str, float] | None = None,
                      tasks: Sequence | None = None, stats: Mapping[str, Mapping] | None = None,
                      feature_names: Mapping[str, Sequence[str]] | None = None, device=None,
                      source: str | None = None, validate: bool = True,
                      frames: Mapping[str, tuple] | None = None,
                      episode_index: Sequence[int] | None = None) -> "Dataset":
        """Build a Dataset from in-memory episodes.

        Parameters
        ----------
        episodes : list of dict
            One dict per episode, stream name -> ``(values, times)``; numpy arrays or torch
            tensors. ``times`` are float seconds (any float dtype, stored as float64) or int64
            nanoseconds (stored as float64 seconds since ``time_origin_ns``, the smallest
            timestamp of the dataset). ``values [n, ...]`` of any numeric dtype; a 1-D array or
            list of strings makes a text stream (int64 indices into ``stream.vocab``); a list of
            ``[P_i, C]`` arrays, or ``{"points": [P, C], "frame_offsets": [n+1]}``, makes a
            point-cloud stream (one time per frame). A stream missing from an episode is empty
            there.
        kinds, modes, rates, stats, feature_names : dict, optional
            Per stream: kind (else inferred: uint8 ``[H,W,C]`` image, float continuous, other
            numbers discrete), default resample mode (else by kind), nominal rate in Hz,
            statistics from the source (kept as ``stream.file_stats``), feature names.
        tasks : list, optional
            Per episode, a task string or a list of them.
        device : str or torch.device, optional
            Default ``"cuda"`` when torch sees a GPU and robocache was built with CUDA, else CPU.
        source : str, optional
            Named in error messages (a path).
        validate : bool
            Check times finite and non-decreasing per episode (default). Only skip it for data
            already validated: resample on the GPU trusts this check.
        frames : dict, optional
            Image streams whose frames are already in a :class:`robocache.frames.FrameStore` (e.g. video
            decoded by ``robocache.frames.load_videos`` into the tier a memory plan chose): stream name ->
            ``(store, [frame times per episode])``, the store's rows being every episode's frames in order.
        episode_index : list of int, optional
            The source's own number of each episode (LeRobot ``episode_index``), kept as ``Episode.index``
            and ``ds.episode_index`` and shown in repr, plots, batches and errors; default ``0 .. E-1``.
            Methods that take an episode (``ds.episode(e)``, ``resample``, ``subset``) take its position
            ``0 .. E-1``; ``ds.position(n)`` maps a source number to it.

        Raises
        ------
        ImportError without torch; TypeError/ValueError naming source, episode, stream and index.
        """
        builder = EpisodeBuilder(episodes, kinds, modes, rates, stats, feature_names, device, source, validate, frames)
        if episode_index is not None:
            ids = [int(i) for i in episode_index]
            if len(ids) != len(builder.episodes) or any(i != x for i, x in zip(ids, episode_index)):
                raise ValueError(f"{builder.source}: episode_index must hold one integer per episode "
                                 f"({len(builder.episodes)}), got {list(episode_index)[:8]}")
            builder.episode_ids = ids
        streams, origin = builder.run()
        E = len(builder.episodes)
        if tasks is None:
            tasks = [[] for _ in range(E)]
        else:
            tasks = list(tasks)
            if len(tasks) != E:
                raise ValueError(f"{builder.source}: tasks has {len(tasks)} entries for {E} episodes")
            tasks = [[t] if isinstance(t, str) else list(t) for t in tasks]
        anchor = next(iter(streams), None)
        eps = []
        for e in range(E):
            lengths = {n: int(s.lengths[e]) for n, s in streams.items()}
            eps.append(Episode(index=builder.episode_ids[e] if builder.episode_ids is not None else e,
                               length=lengths[anchor] if anchor else 0, lengths=lengths, tasks=tasks[e]))
        return cls(streams, eps, device=builder.device, time_origin_ns=origin, source=source)

    @classmethod
    def _from_read(cls, eps, device, validate: bool, frames: Mapping[str, tuple] | None = None,
                   shard=None) -> "Dataset":
        """A Dataset from a reader's ``Episodes`` (readers return plain episode data), with the frame stores
        its videos were loaded into (``robocache.frames.videos.load_reader_videos``) when it has any, and the
        shard plan its episodes were chosen by (``robocache.loader.shard``) when only a rank's were read."""
        ds = cls._with_task_table(cls.from_episodes(eps.episodes, device=device, validate=validate, frames=frames,
                                                    episode_index=eps.extra.get("episode_index"),
                                                    **eps.kwargs()), eps)
        ds.shard = shard
        return ds

    @staticmethod
    def _with_task_table(ds: "Dataset", eps) -> "Dataset":
        """``ds.tasks`` led by the source's task table (LeRobot ``meta/tasks``: task_index -> text) in
        index order, so a task's index is the source's ``task_index`` whatever episodes were loaded."""
        table = eps.extra.get("task_table") or {}
        if table and sorted(table) == list(range(len(table))):
            ds.tasks = list(dict.fromkeys([*(table[k] for k in range(len(table))), *ds.tasks]))
        ds.meta = eps.extra.get("meta")   # LeRobot's metadata (fps, features, first index per episode)
        return ds

    @classmethod
    def from_lerobot(cls, path, *, load_video: bool = True, video_resize=None, video_backend: str = "auto",
                     episodes=None, device=None, modality_subkeys: bool = True, annotations: str = "text",
                     video_timestamps: str = "pts", show_progress: bool | None = None, max_workers: int | None = None,
                     validate: bool = True, frames="auto", device_memory: int | None = None,
                     host_memory: int | None = None, cache: bool = True, missing_files: str = "error",
                     missing_videos: str = "error", jpeg_qscale: int = 2, shard_episodes=False,
                     storage_options: dict | None = None) -> "Dataset":
        """Load a LeRobot v2.0/v2.1/v3.0 dataset folder (GR00T flavour included) as a Dataset.

        Parameters
        ----------
        path : str or PathLike
            The dataset root (holding ``meta/info.json``), or a Hub repo id (``"lerobot/pusht"``) of a set
            LeRobot has downloaded (``$HF_LEROBOT_HOME/<repo_id>``, where ``LeRobotDataset(repo_id)`` keeps
            it), or a URL (``s3://``, ``gs://``, ``hf://datasets/org/name``, ``https://``): this rank's
            episodes are then fetched by byte range into a node-local mirror first (robocache.remote,
            docs/remote.md).
        load_video : bool
            Decode the video features once, at load, into image streams (default). False leaves
            videos out. Frames are kept as YUV 4:2:0, as the decoder hands them back (1.5 bytes per
            pixel); batches convert them to RGB on the device (docs/frames.md).
        video_resize : (height, width), optional
            Resize frames while decoding.
        video_backend : "auto", "pyav", "opencv" or "torchvision"
            "auto" takes PyAV, else OpenCV, else torchvision.io.
        episodes : list of int, optional
            Episode indices (``episode_index``) to load; default all. They stay the episodes' numbers
            (``Episode.index``, ``ds.episode_index``, repr, plots, batches' ``episode_index``): ``episodes=[1, 2]``
            gives episodes 1 and 2 at positions 0 and 1 (``ds.position(2) == 1``), as ``ds.subset([1, 2])`` does.
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
            index (needs one frame per row; row i is frame i, whatever the times). With "pts", each
            episode's timestamps are checked against its frames' times by LeRobot's rule: a frame within its
            ``tolerance_s`` (1e-4 s) of each row's timestamp, a row within a frame past the video's end taking
            the last frame (GR00T's PickNPlace), and with a frame per row, the rows stepping as the frames do.
            The message names the file, the episode, the first row off and both times. An error (ReaderError)
            where no frame of the episode could be trusted: timestamps in milliseconds (or us, ns), or no row
            on a frame (a shifted clock). A warning where rows are off from some row on, or here and there (a
            gap in the timestamps the video does not have: frames dropped while recording can be meant): those
            rows get the frame nearest their timestamp; "parquet" pairs them by index instead. In either
            mode a v3.0 episode's rows more than 1/fps from its span's frames are an error.
        show_progress : bool, optional
            Progress bar for video decoding (default: when stderr is a TTY and tqdm is installed).
        frames : "auto", "device", "host", "disk", "lossless", "compressed" or dict stream -> tier
            Where video frames live (robocache.frames.plan): GPU memory, pinned host memory the GPU
            reads per batch, or a memory-mapped cache file; batches are identical whatever the tier.
            "lossless" keeps each frame's planes coded without loss (~5x smaller), decoded per batch on
            the GPU; "compressed" keeps each frame as a JPEG the GPU decodes per batch (lossy:
            ``jpeg_qscale``). "auto" fills the device up to its budget, then host RAM, then disk, then
            lossless, and only then compressed (with a warning).
        jpeg_qscale : int
            The compressed tier's quality: FFmpeg's MJPEG ``-q:v``, 1 finest .. 31 (default 2).
        storage_options : dict, optional
            For a URL: fsspec's options (an S3-compatible endpoint, credentials, a Hub endpoint).
        shard_episodes : bool or (rank, world_size)
            Read, decode and hold only this rank's episodes (True: the rank of torch.distributed). The
            episodes are split from the metadata before anything is read, heaviest first (rows x the
            pixels of a frame of every camera) to the rank holding the least; pass
            ``shard_episodes=True`` to the DataLoader too, which takes the dataset as this rank's shard.
            Normalization statistics come from the set's meta/stats.json or episodes_stats.jsonl (the
            whole set's); a set without them gets each rank's own.
        device_memory, host_memory : int, optional
            Budgets in bytes for the plan (defaults: 25% of the GPU's free memory, 50% of available RAM).
        missing_files : "error" or "skip"
            Episodes whose data or video files are missing (a set published in part): an error that names
            the present episodes to pass as ``episodes=``, or "skip" them with a warning.
        missing_videos : "error" or "drop"
            A camera listed in meta/info.json whose video file is missing (for any episode): an error naming
            the camera, the episodes and the file (default), or "drop" the camera and load the rest, with a
            warning. (A camera that a GR00T ``meta/modality.json`` does not name and that has no file at all
            is left out with a warning either way: GR00T's loader never reads it.)
        cache : bool
            Keep decoded frames in the cache (``ROBOCACHE_CACHE_DIR``, ``~/.cache/robocache``) and map
            them on the next load instead of decoding.

        Streams keep LeRobot's keys (``observation.state``, ``action``,
        ``observation.images.ego_view``); times are the ``timestamp`` column (seconds).
        """
        from ..frames.videos import load_reader_videos
        from ..readers import lerobot_root, read_lerobot
        from ..remote import is_url, open_lerobot
        from ..video import check_resize, resolve_backend
        from ..video.times import check_timestamps_mode
        video_resize = check_resize(video_resize)
        if load_video:
            resolve_backend(video_backend)      # a bad name or no decoder: before anything is read
        check_timestamps_mode(video_timestamps)
        if is_url(path):    # s3://, gs://, hf://, https://: this rank's bytes into a node-local mirror (docs/remote.md)
            path = open_lerobot(path, episodes=episodes, shard=shard_episodes or None, load_video=load_video,
                                video_resize=video_resize, storage_options=storage_options)
        path = lerobot_root(path)           # a folder, or a Hub repo id LeRobot has downloaded
        episodes, shard = (_lerobot_shard(path, shard_episodes, episodes, video_resize) if shard_episodes
                           else (episodes, None))
        eps = read_lerobot(path, load_video=load_video, episodes=episodes, modality_subkeys=modality_subkeys,
                           annotations=annotations, max_workers=max_workers, missing_files=missing_files,
                           missing_videos=missing_videos)
        device = resolve_device(device)
        stored = load_reader_videos(eps.extra.get("videos") or {}, eps.episodes, eps.extra.get("episode_index"),
                                    video_timestamps=video_timestamps, device=device, source=str(path), frames=frames,
                                    device_memory=device_memory, host_memory=host_memory, resize=video_resize,
                                    backend=video_backend, cache=cache, workers=max_workers,
                                    show_progress=show_progress, jpeg_qscale=jpeg_qscale)
        return cls._from_read(eps, device, validate, frames=stored or None, shard=shard)

    @classmethod
    def from_robomimic(cls, path, obs_keys=None, filter_key: str | None = None, rate: float | None = None, *,
                       include_next_obs: bool = False, device=None, validate: bool = True) -> "Dataset":
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
        from ..readers import read_robomimic
        eps = read_robomimic(path, obs_keys=obs_keys, filter_key=filter_key, rate=rate,
                             include_next_obs=include_next_obs)
        return cls._from_read(eps, device, validate)

    @classmethod
    def from_zarr(cls, path, rate: float = 10.0, keys=None, *, device=None, validate: bool = True,
                  show_progress: bool | None = None) -> "Dataset":
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
        from ..readers import read_zarr
        eps = read_zarr(path, rate=rate, keys=keys, show_progress=show_progress)
        return cls._from_read(eps, device, validate)

    @classmethod
    def from_rosbag(cls, path, *, topics: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                    fields: Mapping[str, Sequence[str]] | None = None, rename: Mapping[str, str] | None = None,
                    modes: Mapping[str, str] | None = None, clock: str | Mapping[str, str] = "header",
                    dtype="float32", joint_fill: str = "interp", point_fields=("x", "y", "z"),
                    drop_invalid_points: bool = True, load_images: bool = True, image_size=None,
                    split_gap: float | None = None, split_topic: str | None = None, typestore=None,
                    recover: bool = False, device=None, validate: bool = True,
                    show_progress: bool | None = None) -> "Dataset":
        """Load ROS 1 bags, ROS 2 bags (MCAP or SQLite3 storage) or bare ``.mcap`` files as a Dataset.

        Parameters
        ----------
        path : str, PathLike or list of them
            A ``.bag`` / ``.mcap`` / ``.db3`` file or a ROS 2 bag folder (one episode each), or a
            folder of them (searched recursively) or a list: one episode per bag.
        topics, exclude : list of str, optional
            Topics to read / leave out (names or globs, ``"/fmu/out/*"``). Default: every topic
            except logging ones (``/rosout``, ``/parameter_events``).
        fields : dict, optional
            Per topic (or glob): the parts of a known type to keep (``["position"]`` of a
            JointState) or, for other types, the fields to flatten (``["force", "q"]``).
        rename : dict, optional
            Stream or topic -> new name (``{"/imu/data": "imu"}`` gives ``imu.orientation``...).
        modes : dict, optional
            Stream -> resample mode (defaults: quaternions ``slerp``, integers ``previous``,
            the rest by kind).
        clock : "header" or "log", or dict topic -> clock
            Row times: the header stamp (sensor time; the log time for types without a header)
            or the log (receive) time. Times are int64 ns, kept exact.
        dtype : float dtype or None
            Float streams' dtype (default float32; None keeps ROS's float64).
        joint_fill : "interp", "previous" or "nan"
            JointState joints missing from some messages: from that joint's own samples
            (linear in time), held, or NaN.
        point_fields : list of str or dict topic -> list
            PointCloud2 fields per point (default x, y, z); ``drop_invalid_points`` drops points
            with a non-finite x, y or z.
        load_images : bool
            Decode Image / CompressedImage topics once, here, to ``[n, H, W, C]`` (RGB for
            colour); ``image_size=(H, W)`` resizes them.
        split_gap, split_topic : optional
            Cut each bag into episodes at log-time gaps longer than ``split_gap`` seconds, or at
            every message on ``split_topic``.
        typestore : str or rosbags Typestore, optional
            Types for bags that embed no definitions (default: the bag's ROS distro).
        recover : bool
            Read a truncated MCAP file (a recording that did not stop cleanly) up to the damage.

        Streams are named after their topic (``/md/state``), plus a part for multi-stream types
        (``/joint_states.position``, ``/imu/data.orientation``,
        ``/tf:world->base_link.translation``). See docs/rosbag.md.
        """
        from ..readers import read_rosbag
        eps = read_rosbag(path, topics=topics, exclude=exclude, fields=fields, rename=rename, modes=modes,
                          clock=clock, dtype=dtype, joint_fill=joint_fill, point_fields=point_fields,
                          drop_invalid_points=drop_invalid_points, load_images=load_images, image_size=image_size,
                          split_gap=split_gap, split_topic=split_topic, typestore=typestore, recover=recover,
                          show_progress=show_progress)
        return cls._from_read(eps, device, validate)

    # --- inspection ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def anchor(self) -> str | None:
        """The first stream: ``Episode.length`` and the ``frames`` total count its samples."""
        return next(iter(self.streams), None)

    @property
    def num_frames(self) -> int:
        """Samples of the anchor stream over all episodes: what ``ds[i]`` indexes (LeRobotDataset's
        ``num_frames``, its ``len``)."""
        anchor = self.anchor
        return self.streams[anchor].num_samples if anchor is not None else 0

    @property
    def num_episodes(self) -> int:
        """The number of episodes, ``len(ds)`` (LeRobotDataset's ``num_episodes``)."""
        return len(self.episodes)

    @property
    def episode_index(self) -> np.ndarray:
        """The source's number of each episode by position, int64 numpy ``[E]`` (``Episode.index``):
        ``from_lerobot(path, episodes=[1, 2])`` and ``ds.subset([1, 2])`` both give ``[1, 2]``. Methods
        taking an episode (``episode``, ``resample``, ``subset``, ``robocache.viz``) take positions;
        ``position(n)`` maps a source number back."""
        return np.array([ep.index for ep in self.episodes], dtype=np.int64)

    def position(self, episode_index: int) -> int:
        """The position (``0 .. len(ds)-1``) of the episode the source numbers ``episode_index``."""
        hit = np.flatnonzero(self.episode_index == int(episode_index))
        if not hit.size:
            ids = self.episode_index
            shown = ", ".join(map(str, ids[:10])) + (", ..." if ids.size > 10 else "")
            raise ValueError(f"no episode numbered {episode_index} in this dataset; its episodes are [{shown}] "
                             f"(ds.episode_index)")
        return int(hit[0])

    def _task_index(self) -> np.ndarray:
        """Per episode position, the index in ``ds.tasks`` of its first task, -1 when it has none
        (int64 numpy ``[E]``)."""
        pos = {t: k for k, t in enumerate(self.tasks)}
        return np.array([pos[ep.tasks[0]] if ep.tasks else -1 for ep in self.episodes], dtype=np.int64)

    def frame_task_index(self, episode, time) -> np.ndarray:
        """The ``task_index`` (into ``ds.tasks``) of each sample ``(episode position, time)``, int64 numpy:
        the task of the frame nearest ``time`` where the source gives a task per frame (LeRobot's
        ``task_index`` column: a task may change within an episode), else the episode's first task (-1 when
        it has none). Once per loader (its construction may sync): the identity tables are built from it."""
        episode = np.asarray(episode, np.int64).reshape(-1)
        time = np.asarray(time, np.float64).reshape(-1)
        s = self.streams.get("task_index")
        if s is None or s.kind not in ("discrete", "continuous") or s.values.ndim != 1 \
                or s.values.dtype.is_floating_point:
            return self._task_index()[episode]
        # the stream's nearest row: one resample launch (the one nearest rule, ties to the earlier row)
        torch = _torch()
        at = torch.as_tensor(time, dtype=torch.float64, device=self.device)[:, None]
        picked = self.resample("task_index", torch.as_tensor(episode, device=self.device), at, mode="nearest")
        out = np.where(s.lengths[episode] > 0, picked[:, 0].cpu().numpy().astype(np.int64),
                       self._task_index()[episode])   # an episode without rows keeps its first task
        return np.where((out >= 0) & (out < len(self.tasks)), out, -1)

    # --- map-style access: one frame, as LeRobotDataset's ds[i] ------------------------------

    def __getitem__(self, i) -> dict:
        """Frame ``i`` of the anchor stream (``0 <= i < ds.num_frames``, LeRobot's global frame index;
        negative counts from the end) as a dict, as ``LeRobotDataset[i]``:

        - every stream's value at that frame's time (``resample`` with the stream's mode): a tensor of the
          per-sample shape on the dataset's device (images ``[H, W, C]`` as stored, uint8), the text of a
          text stream, the ``[P, C]`` points of a point-cloud stream; outside a stream's span its
          first/last value (resample's edge rule);
        - ``episode_index`` (the source's number), ``frame_index`` (within the episode), ``index``
          (LeRobot's dataset-wide ``index`` column, whatever episodes are loaded; ``i`` for a set without
          it), ``task_index`` (into ``ds.tasks``, -1 when none) as 0-d int64 CPU tensors,
          ``timestamp`` (the frame's time, 0-d float64 on the device) and ``task`` (str, "" when none).
          A stream of the same name (LeRobot's own ``task_index`` column) takes precedence.

        For inspection and porting: one small resample launch per stream (text and point-cloud streams
        read their pick back to the host). Training batches come from ``robocache.DataLoader``.
        ``len(ds)`` stays the number of episodes; ``ds.frames_view`` has ``len == num_frames`` for code
        that needs both (``torch.utils.data.DataLoader``).
        """
        torch = _torch()
        if isinstance(i, (bool, np.bool_)) or not hasattr(i, "__index__"):
            raise TypeError(f"ds[i] takes an int frame index (0 <= i < ds.num_frames), got {type(i).__name__}; "
                            f"an episode is ds.episode(e)")
        i = int(i.__index__())
        N = self.num_frames
        if not -N <= i < N:
            raise IndexError(f"frame {i} out of range for the {N} frames of the anchor stream {self.anchor!r} "
                             f"(len(ds) = {len(self)} counts episodes; ds.num_frames counts frames)")
        i %= N
        anchor = self.anchor
        assert anchor is not None  # N > 0: there is a stream
        a = self.streams[anchor]
        e = int(np.searchsorted(a.offsets_host, i, side="right") - 1)
        task = int(self.frame_task_index([e], [float(a.times[i])])[0])
        step = i - int(a.offsets_host[e])
        wide = lerobot_index(self, [e], [step])         # LeRobot's dataset-wide index, as its items give
        out = {"episode_index": torch.tensor(self.episodes[e].index),
               "frame_index": torch.tensor(step), "timestamp": a.times[i],
               "index": torch.tensor(int(wide[0]) if wide is not None else i), "task_index": torch.tensor(task),
               "task": self.tasks[task] if task >= 0 else ""}
        idx = torch.tensor([e], dtype=torch.int64, device=self.device)
        t = a.times[i:i + 1].reshape(1, 1)
        for name, s in self.streams.items():
            v = self.resample(name, idx, t)[0, 0]
            if s.kind == "pointcloud":
                fo = s.frame_offsets_host
                assert fo is not None  # a point-cloud stream has frame offsets
                m = int(v)
                v = s.values[int(fo[m]):int(fo[m + 1])] if s.lengths[e] else s.values[:0]
            elif s.kind == "text" and s.vocab is not None:
                v = s.vocab[int(v)] if s.lengths[e] else ""
            out[name] = v
        return out

    def __getitems__(self, indices):
        # torch's DataLoader fetches through __getitems__ (torch >= 2.1): over a Dataset it would sample
        # range(len(ds)), the episode count, and silently read only that many frames
        raise TypeError(f"torch.utils.data.DataLoader over a robocache.Dataset would see len(ds) = {len(self)} "
                        f"episodes, not its {self.num_frames} frames (ds[i] is frame i): make batches with "
                        "robocache.DataLoader(ds, batch_size, ...) (on the device, no workers), or give torch's "
                        "DataLoader ds.frames_view (len = frames)")

    @property
    def frames_view(self) -> "FramesView":
        """The dataset as a map-style sequence of frames: ``len(view) == ds.num_frames``, ``view[i] == ds[i]``
        (pass it where ``len`` must count frames, e.g. ``torch.utils.data.DataLoader``)."""
        return FramesView(self)

    def __iter__(self):
        # len(ds) counts episodes and ds[i] frames: iterating would be ambiguous, and slow
        raise TypeError("a robocache.Dataset is not iterable: iterate ds.episodes (metadata), "
                        "range(len(ds)) with ds.episode(e) (one episode's storage), or ds.frames_view (frames)")

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.streams.values())

    @property
    def durations(self):
        """Per-episode span over all streams (latest last time - earliest first time), float64
        ``[E]`` on the device; 0 for episodes with no samples."""
        torch = _torch()
        if not self.streams:
            return torch.zeros(len(self), dtype=torch.float64)
        firsts, lasts = zip(*(s.episode_ends() for s in self.streams.values()))
        first = torch.stack(firsts).nan_to_num(math.inf).amin(0)
        last = torch.stack(lasts).nan_to_num(-math.inf).amax(0)
        return torch.where(last >= first, last - first, torch.zeros_like(first))

    @property
    def duration(self) -> float:
        return float(self.durations.sum())

    @property
    def stats(self) -> dict:
        """``{name: stream.stats}`` (computed on first use)."""
        return {n: s.stats for n, s in self.streams.items()}

    def episode(self, e: int) -> dict:
        """``{name: (values, times)}`` for the episode at position e, views of the storage (no copy)."""
        E = len(self)
        if not -E <= e < E:
            renumbered = "" if np.array_equal(self.episode_index, np.arange(E)) else \
                " (positions; ds.position(n) finds the source's episode n)"
            raise IndexError(f"episode {e} out of range for {E} episodes{renumbered}")
        e %= E
        return {n: s.episode(e) for n, s in self.streams.items()}

    def subset(self, episodes: Sequence[int], device=None) -> "Dataset":
        """A Dataset of only ``episodes`` (indices into this one, in that order), copied onto ``device``
        (default: this one's): ``ds.subset(mine, device="cuda")`` puts just a rank's shard on its GPU,
        its frames copied once (as ``ds.subset(mine).to("cuda")``, without the copy in between).
        ``stats`` stay the full dataset's. ``Episode.index`` keeps the original index."""
        eps = np.asarray(list(episodes), dtype=np.int64).reshape(-1)
        E = len(self)
        if eps.size and (eps.min() < -E or eps.max() >= E):
            raise IndexError(f"episodes: index out of range for {E} episodes")
        eps %= max(E, 1)
        dest = self.device if device is None else resolve_device(device)
        streams = {n: s.subset(eps, dest) for n, s in self.streams.items()}
        out = Dataset(streams, [self.episodes[e] for e in eps], device=dest,
                      time_origin_ns=self.time_origin_ns, source=self.source, tasks=self.tasks)
        out.meta = self.meta
        return out

    # --- the loader's call ---------------------------------------------------------------

    def resample(self, name: str, episode_index, new_times, mode: str | None = None, return_mask: bool = False, *,
                 out=None, tolerance: float = 1e-4):
        """Stream ``name`` at ``new_times [B,T]`` (float64 seconds, the dataset's time base) in
        episodes ``episode_index [B]`` (int64): one ragged ``robocache.resample`` call on the
        storage, ``[B,T,...]`` on the dataset's device (with ``is_pad [B,T]`` when
        ``return_mask``). No host sync on the GPU: the storage was validated at load.

        Point-cloud streams return the global frame index ``[B,T]`` int64 of the chosen frame
        (``mode`` nearest/previous/next); its points are
        ``values[frame_offsets[i]:frame_offsets[i+1]]``.
        """
        torch = _torch()
        s = self.streams[name]
        dev, idx, x = self.device, episode_index, new_times
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64 or idx.device != dev:
            idx = torch.as_tensor(idx, device=dev).to(torch.int64)
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float64 or x.device != dev:
            x = torch.as_tensor(x, device=dev).to(torch.float64)
        store = s.frames
        if store is not None:
            ids, pad = self.frame_ids(name, idx, x, mode, tolerance=tolerance)
            frames = store.gather(ids)
            if out is not None:
                out.copy_(frames)
                frames = out
            return (frames, pad) if return_mask else frames
        values = s.values
        if s.kind == "pointcloud":
            values = s.frame_ids()
        return _resample(values, s.times, x, mode=mode or s.mode, offsets=s.offsets, index=idx, out=out,
                        return_mask=return_mask, tolerance=tolerance,
                        check=False if dev.type == "cuda" else None)

    def frame_ids(self, name: str, episode_index, new_times, mode: str | None = None, *, tolerance: float = 1e-4):
        """Global frame index ``[B,T]`` int64 of image or point-cloud stream ``name`` at ``new_times``
        (mode nearest/previous/next; default the stream's), and ``is_pad [B,T]``: one ragged resample of the
        frame numbers. ``stream.frames.gather(ids)`` then decodes those frames, wherever they live."""
        s = self.streams[name]
        return _resample(s.frame_ids(), s.times, new_times, mode=mode or s.mode, offsets=s.offsets,
                         index=episode_index, return_mask=True, tolerance=tolerance,
                         check=False if self.device.type == "cuda" else None)

    def to(self, device) -> "Dataset":
        """A Dataset with every tensor on ``device``; self when it is there already (as
        ``torch.Tensor.to``). The original is left as it was."""
        device = resolve_device(device)
        if all(s.device == device for s in self.streams.values()) and self.device == device:
            return self
        streams = {n: s.to(device) for n, s in self.streams.items()}
        out = Dataset(streams, self.episodes, device=device, time_origin_ns=self.time_origin_ns, source=self.source,
                      tasks=self.tasks)
        out.shard, out.meta = self.shard, self.meta
        return out

    # --- LeRobotDataset's metadata (robocache/lerobot/contract.py) -----------------------------------

    @property
    def fps(self) -> float | None:
        """Frames per second: LeRobot's ``fps`` for a LeRobot set, else the anchor stream's nominal rate."""
        if self.meta is not None:
            return float(self.meta.fps)
        return self.streams[self.anchor].rate if self.anchor is not None else None

    @property
    def features(self) -> dict:
        """LeRobot's ``info.json`` features (``{key: {"dtype", "shape", "names", ...}}``) for a LeRobot set;
        else one entry per stream (dtype, per-sample shape) in the same form."""
        if self.meta is not None:
            return dict(self.meta.features)
        return {n: {"dtype": "video" if s.kind == "image" else dtype_name(s.dtype), "shape": list(s.shape),
                    "names": s.feature_names} for n, s in self.streams.items()}

    @property
    def camera_keys(self) -> list[str]:
        """The image streams (LeRobot's ``camera_keys``: video and image features)."""
        return [n for n, s in self.streams.items() if s.kind == "image"]

    # --- display -------------------------------------------------------------------------

    def _header(self) -> str:
        src = f"{self.source!r}, " if self.source else ""
        ids = self.episode_index
        if ids.size and not np.array_equal(ids, np.arange(ids.size)):     # the source's numbers
            src += f"episodes [{', '.join(map(str, ids[:8]))}{', ...' if ids.size > 8 else ''}], "
        return (f"Dataset({src}{plural(len(self), 'episode')}, {plural(len(self.streams), 'stream')}, "
                f"{plural(self.num_frames, 'frame')}, {fmt_seconds(self.duration)}, {fmt_bytes(self.nbytes)}, "
                f"device {self.device})")

    def __repr__(self) -> str:
        rows = [s.summary() for s in self.streams.values()]
        if not rows:
            return self._header()
        cols = ("name", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes", "duration", "memory",
                "storage")
        left = ("name", "kind", "dtype", "shape", "mode", "storage")
        heads = dict(zip(cols, _COLUMN_HEADS))
        width = {c: max(len(str(r[c])) for r in rows + [heads]) for c in cols}
        cell = lambda r, c: str(r[c]).ljust(width[c]) if c in left else str(r[c]).rjust(width[c])
        lines = ["  " + "  ".join(cell(r, c) for c in cols).rstrip() for r in [heads] + rows]
        return "\n".join([self._header()] + lines + [self._stats_line()])

    def _stats_line(self) -> str:
        """Which streams normalize with the dataset's own statistics and which with computed ones."""
        own = [n for n, s in self.streams.items() if s.kind != "text" and s.stats_source == "dataset"]
        rest = [n for n, s in self.streams.items() if s.kind != "text" and n not in own]
        parts = ([f"dataset ({', '.join(own)})"] if own else []) + \
            ([f"computed on use ({', '.join(rest)})"] if rest else [])
        return "  statistics: " + "; ".join(parts)

    def _repr_html_(self) -> str:
        esc = lambda x: html.escape(str(x))
        cols = ("name", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes", "duration", "memory",
                "storage")
        head = "".join(f"<th>{c}</th>" for c in _COLUMN_HEADS)
        body = "".join("<tr>" + "".join(f"<td>{esc(s.summary()[c])}</td>" for c in cols) + "</tr>"
                       for s in self.streams.values())
        totals = (("episode" if len(self) == 1 else "episodes", len(self)),
                  ("frame" if self.num_frames == 1 else "frames", self.num_frames),
                  ("duration", fmt_seconds(self.duration)), ("memory", fmt_bytes(self.nbytes)),
                  ("device", self.device))
        tot = " &middot; ".join(f"<b>{esc(v)}</b> {k}" for k, v in totals)
        src = f"<code>{esc(self.source)}</code><br>" if self.source else ""
        tasks = f"<br>{plural(len(self.tasks), 'task')}" if self.tasks else ""
        return (f"<div class='robocache-dataset'><b>robocache.Dataset</b> {src}{tot}{tasks}"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


#: the column titles of Dataset's repr and _repr_html_, in Stream.summary's order

#: the column titles of Dataset's repr and _repr_html_, in Stream.summary's order
_COLUMN_HEADS = ("stream", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes", "duration", "memory",
                 "storage")


class FramesView:
    """A Dataset as a map-style sequence of its anchor stream's frames (``ds.frames_view``):
    ``len(view) == ds.num_frames`` and ``view[i] == ds[i]``."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return self.dataset.num_frames

    def __getitem__(self, i) -> dict:
        return self.dataset[i]

    def __repr__(self) -> str:
        return f"FramesView({plural(len(self), 'frame')} of {self.dataset.anchor!r}, {plural(len(self.dataset), 'episode')})"
