"""Video streams into frame stores: probe every file (metadata only), make the memory plan, then ingest
each stream into the tier the plan gave it (decoded in parallel, or mapped from the cache)."""

from __future__ import annotations

from typing import Mapping, Sequence

from .ingest import ingest_videos, probe_videos
from .plan import Need, budgets, plan
from .store import FrameStore


def load_videos(videos: Mapping[str, Sequence[str]], *, device, frames="auto", device_memory=None,
                host_memory=None, resize=None, backend: str = "auto", cache: bool = True, workers=None,
                show_progress=None, other_device_bytes: int = 0, source: str = "") -> dict:
    """``{stream: (FrameStore, [frame times per file])}`` for ``{stream: [one video file per episode]}``.

    The plan is made before anything is decoded (see robocache.frames.plan); ``frames`` is "auto", a
    tier, or ``{stream: tier}``.
    """
    probed = {k: probe_videos(list(paths), resize=resize, backend=backend, workers=workers)
              for k, paths in videos.items()}
    needs = [Need(k, int(counts.sum()), spec.frame_bytes, spec.height, spec.width)
             for k, (spec, counts, _) in probed.items()]
    b = budgets(device, device_memory=device_memory, host_memory=host_memory,
                other_device_bytes=other_device_bytes)
    tiers = plan(needs, frames, b, device=device, hint=f"{source}: " if source else "")
    out = {}
    for k, paths in videos.items():
        spec, counts, _ = probed[k]
        tier = tiers[k]
        got = ingest_videos(list(paths), tier="host" if tier == "cpu" else tier,
                            device=device if tier == "device" else None, resize=resize,
                            backend=backend, cache=cache, workers=workers, show_progress=show_progress,
                            desc=f"decoding {k}", spec=spec, counts=counts)
        store = FrameStore(got.data, format=spec.format, height=spec.height, width=spec.width,
                           channels=spec.channels, tier=tier, device=device, matrix=spec.matrix,
                           full_range=spec.full_range, path=got.cache_path)
        out[k] = (store, list(got.times))
    return out
