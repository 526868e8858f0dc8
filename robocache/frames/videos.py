"""Video streams into frame stores: probe every source (metadata only), make the memory plan, then ingest
each stream into the tier the plan gave it (decoded in parallel, or mapped from the cache).

``load_reader_videos`` is the one way a reader's videos become a Dataset's frames, whatever the reader: the
sources loaded, each episode's frame times checked against its rows' times and kept as the caller chose
(``robocache.video.times``), ready for ``Dataset.from_episodes(frames=...)``."""

from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import numpy as np

from . import atlas
from .atlas import TimesDiffer
from .compress import ingest_atlas, ingest_compressed
from ..video import probe_sources
from ..video.times import check_span_counts, reconcile
from .ingest import cached_layout, ingest_videos, reused_layout
from .jpeg import check_qscale
from .plan import Need, budgets, plan
from .store import FrameStore
from .tiers import tier_of


def load_reader_videos(videos: Mapping[str, dict], episodes: Sequence[Mapping], ids: Sequence[int] | None, *,
                       video_timestamps: str = "pts", device, source: str = "", **options) -> dict:
    """``{stream: (FrameStore, [frame times per episode])}`` of the videos a reader returned; ``{}`` for none.

    ``videos``: the reader's ``{stream: {"sources": [one VideoSource per episode], "fps": float, "rows": [rows
    per episode]}}`` (LeRobot's ``extra["videos"]``); ``episodes``: its ``[{stream: (values, times)}]``, whose
    first stream's times are the episode's row times (a reader's row streams share one time column: LeRobot's
    ``timestamp``) and whose bytes the memory plan leaves room for; ``ids``: the source's episode numbers,
    named in errors (None: 0 .. E-1). A v3.0 span must hold a frame per row before anything is decoded;
    ``video_timestamps`` ("pts" or "parquet") and the checks on each episode's times are
    ``robocache.video.times.reconcile``'s. ``options``: ``load_videos``'s (frames, budgets, resize, backend,
    cache, workers, ...).
    """
    if not videos:
        return {}
    ids = list(range(len(episodes))) if ids is None else list(ids)
    other = sum(np.asarray(v).nbytes + np.asarray(t).nbytes for ep in episodes for v, t in ep.values()
                if not isinstance(v, list))
    loaded = load_videos({k: v["sources"] for k, v in videos.items()}, device=device, other_device_bytes=other,
                         source=source, check=lambda k, counts: check_span_counts(videos[k], counts, ids), **options)
    row_times = [next(iter(ep.values()))[1] if ep else None for ep in episodes]
    return {k: (store, reconcile(k, times, videos[k], row_times, ids, video_timestamps))
            for k, (store, times) in loaded.items()}


def load_videos(videos: Mapping[str, Sequence], *, device, frames="auto", device_memory=None,
                host_memory=None, resize=None, backend: str = "auto", cache: bool = True, workers=None,
                show_progress=None, other_device_bytes: int = 0, source: str = "", jpeg_qscale: int = 2,
                check=None) -> dict:
    """``{stream: (FrameStore, [frame times per source])}`` for ``{stream: [one video source per episode]}``
    (``robocache.video.VideoSource``, or paths of whole files).

    The plan is made before anything is decoded (see robocache.frames.plan); ``frames`` is "auto", a
    tier, or ``{stream: tier}``. ``jpeg_qscale``: the compressed tier's quantizer (robocache.frames.jpeg).
    ``check(stream, counts)``: called with each stream's per-source frame counts once probed, before
    anything is decoded (a reader's consistency check: it raises to stop the load).
    """
    check_qscale(jpeg_qscale)
    probed = {k: _layout(k, list(paths), resize, backend, workers, cache) for k, paths in videos.items()}
    if check is not None:
        for k, (_, counts, _, _) in probed.items():
            check(k, counts)
    needs = [Need(k, int(counts.sum()), spec.frame_bytes, spec.height, spec.width, cached=cached)
             for k, (spec, counts, _, cached) in probed.items()]
    b = budgets(device, device_memory=device_memory, host_memory=host_memory,
                other_device_bytes=other_device_bytes)
    tiers = plan(needs, frames, b, device=device, hint=f"{source}: " if source else "")
    out = {}
    kinds = {k: tier_of(t) for k, t in tiers.items()}
    host_left = b.host - sum(n.nbytes for n in needs if kinds[n.name].decoded_in_host)
    for k in videos:
        asked = frames.get(k, "auto") if isinstance(frames, dict) else frames
        if asked == "auto" and kinds[k].lossy:
            warnings.warn(f"{source + ': ' if source else ''}frames of {k!r} do not fit the device, host or disk "
                          f"budgets decoded, so they are kept compressed as JPEG at jpeg_qscale={jpeg_qscale} "
                          f"(lossy; docs/frame-storage.md gives the PSNR per setting). Raise a budget or pass "
                          f"frames='disk' with a bigger ROBOCACHE_CACHE_DIR to keep them lossless.",
                          stacklevel=3)
    for names in _atlas_groups(probed, kinds):
        try:
            group = _load_atlas(names, videos, probed, jpeg_qscale, resize, cache, workers, show_progress,
                                max(0, host_left), device)
        except TimesDiffer as e:
            warnings.warn(f"{source + ': ' if source else ''}cameras {', '.join(map(repr, names))} have the same "
                          f"frame counts but not the same frame times ({e}); each is coded on its own",
                          stacklevel=2)
            continue
        out.update(group)
        host_left -= sum(s.nbytes for s, _ in group.values() if not isinstance(s.data, np.memmap))
    for k, paths in videos.items():
        if k in out:
            continue
        spec, counts, infos, _ = probed[k]
        kind = kinds[k]
        if kind.coded:
            codec = kind.formats[0]
            coded = ingest_compressed(list(paths), qscale=jpeg_qscale, resize=resize, cache=cache, workers=workers,
                                      show_progress=show_progress, desc=f"coding {k}", spec=spec, counts=counts,
                                      infos=infos, host_budget=max(0, host_left), codec=codec)
            if not coded.mapped:
                host_left -= coded.data.nbytes
            store = FrameStore(coded.data, format=codec, height=spec.height, width=spec.width, channels=3,
                               tier=kind, device=device, matrix=spec.matrix, full_range=spec.full_range,
                               path=coded.cache_path, offsets=coded.offsets, qscale=coded.qscale,
                               origin=coded.origin(k) if kind.lossy else None)
            out[k] = (store, list(coded.times))
            continue
        got = ingest_videos(list(paths), tier=kind.ingest_into,
                            device=device if kind.on_gpu else None, resize=resize,
                            backend=backend, cache=cache, workers=workers, show_progress=show_progress,
                            desc=f"decoding {k}", spec=spec, counts=counts, infos=infos)
        store = FrameStore(got.data, format=spec.format, height=spec.height, width=spec.width,
                           channels=spec.channels, tier=kind, device=device, matrix=spec.matrix,
                           full_range=spec.full_range, path=got.cache_path)
        out[k] = (store, list(got.times))
    return out


def _atlas_groups(probed: dict, kinds: dict) -> list:
    """The compressed-tier streams that share an atlas (robocache.frames.atlas): two or more with the same
    geometry, color and frames per episode, in the order given."""
    if not atlas.enabled():
        return []
    groups: dict = {}
    for k, (spec, counts, _, _) in probed.items():
        if kinds[k].shares_atlas and spec.format == "yuv420":
            groups.setdefault(atlas.group_key(spec, counts), []).append(k)
    return [names for names in groups.values() if len(names) > 1]


def _load_atlas(names, videos, probed, qscale, resize, cache, workers, show_progress, host_budget, device) -> dict:
    """``{stream: (FrameStore, times)}`` of cameras ``names`` coded as atlases: one store per camera over
    the shared atlas."""
    spec, counts, _, _ = probed[names[0]]
    infos = [probed[k][2] for k in names]
    coded = ingest_atlas([list(videos[k]) for k in names], qscale=qscale, resize=resize, cache=cache,
                         workers=workers, show_progress=show_progress, desc=f"coding {'+'.join(names)}", spec=spec,
                         counts=counts, infos=None if any(i is None for i in infos) else infos,
                         host_budget=host_budget)
    made = atlas.stores(coded.data, coded.offsets, names, height=spec.height, width=spec.width, device=device,
                        qscale=int(qscale), matrix=spec.matrix, full_range=spec.full_range, path=coded.cache_path,
                        origin=coded.origin("+".join(names)))
    return {k: (store, list(coded.times)) for k, store in made.items()}


def _layout(key, sources, resize, backend, workers, cache) -> tuple:
    """``(spec, counts, infos, cached)`` of a stream's sources: from its cache entry when one looks current
    (cached: nothing to write), or from the entries of other episode subsets that hold every source (an
    entry of its own still to write); infos None: nothing was opened. Else probed."""
    if cache:
        known = cached_layout(sources, resize=resize, backend=backend, desc=f"decoding {key}")
        if known is not None:
            return (*known, None, True)
        held = reused_layout(sources, resize=resize, backend=backend, desc=f"decoding {key}")
        if held is not None:
            return (*held, None, False)
    return (*probe_sources(sources, resize=resize, backend=backend, workers=workers), False)
