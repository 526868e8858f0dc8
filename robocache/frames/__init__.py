"""Frame storage: where an image stream's frames live and how a batch reads them (DESIGN.md §3b).

- ``store.py``   ``FrameStore``: one image stream's frames (RGB, YUV 4:2:0 as the decoder hands them back, or
                 those planes coded) and ``gather``: "these frames into this batch", one
                 ``robocache._C.gather_frames`` pass (color conversion, layout, dtype, resize).
- ``tiers/``     where the frames live, one class per tier (device, cpu, pinned host, disk, JPEG, JPEG atlas,
                 lossless) behind ``tiers.base.Tier``, registered in ``tiers/__init__.py``.
- ``plan.py``    the memory plan: each stream's bytes per tier from metadata, before anything is decoded.
- ``videos.py``  a reader's video sources into stores: probe, plan, ingest, frame times reconciled.
- ``entry.py``   a cache entry's life, written once: lock, look up, check, reuse, decode into a sink, commit.
- ``ingest.py``  video files decoded in parallel straight into their place in the tier's buffer.
- ``compress.py`` ingest into a coded tier (JPEG, lossless, the atlas).
- ``cache.py``   the persistent decoded-frame cache (``ROBOCACHE_CACHE_DIR``, ``~/.cache/robocache``).

docs/architecture.md names every file.

``data.stream.Stream`` holds a ``FrameStore`` for image streams and the loader asks it for frames; neither
knows which tier it is.
"""
