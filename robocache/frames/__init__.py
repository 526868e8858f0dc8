"""Frame storage: where an image stream's frames live and how a batch reads them (DESIGN.md §3b).

- ``store.py``   ``FrameStore``: one image stream's frames (RGB, or YUV 4:2:0 as the video decoder hands
                 them back, or those planes as JPEG) in one tier (device memory, pinned host memory the
                 GPU reads directly, a memory-mapped file on local disk, or compressed), and ``gather``:
                 "these frames into this batch", one ``robocache._C.gather_frames`` pass (color
                 conversion, layout, dtype, resize).
- ``plan.py``    the memory plan: each stream's bytes per tier from metadata, before anything is decoded.
- ``ingest.py``  video files decoded in parallel straight into their place in the tier's buffer.
- ``cache.py``   the persistent decoded-frame cache (``ROBOCACHE_CACHE_DIR``, ``~/.cache/robocache``).
- ``jpeg.py``    the compressed tier's codec: decoded planes -> JPEG at ingest, nvJPEG per batch on a GPU.
- ``compress.py`` ingest into the compressed tier (decode + code per file in parallel, cached).
- ``planes.py``  a decoder plane into an I420 row; the cores a decode may use.

``dataset.Stream`` holds a ``FrameStore`` for image streams and the loader asks it for frames; neither
knows which tier it is.
"""
