"""LeRobot sets on object storage and the Hub, read by byte range into a node-local mirror (issue 48).

``open_lerobot(url, shard=...)`` resolves ``s3://``, ``gs://``, ``hf://`` or ``http(s)://`` with fsspec, reads
``meta/`` whole, picks this rank's episodes with the loader's own shard plan, and fetches only what loading
them reads: v3.0 data files' row groups that hold them, the byte ranges of the mp4s the decoder reads for
their spans (found from the container's index), v2.x files whole; in parallel, with retries and timeouts,
into sparse local files that robocache then reads as any local set. A second run on the node fetches nothing.

- ``lerobot.py``  open_lerobot / mirror_lerobot: meta, the rank's episodes, what their files need
- ``mirror.py``   per file: versions, the index, the ranges or row groups not held, fetched, recorded
- ``sparse.py``   the local copies and their records (what each holds of which remote version)
- ``objects.py``  the remote: fsspec, versions (ETag...), ranged reads with retries, RemoteError
- ``mp4.py``      the bytes an mp4's spans need, from its moov (no video library)
- ``parquet.py``  the row groups that hold episodes, and a parquet file of just those
- ``ranges.py``   byte-range arithmetic

docs/remote.md is the guide.
"""

from .lerobot import MirrorReport, is_url, mirror_lerobot, open_lerobot
from .objects import RemoteChanged, RemoteError

__all__ = ["MirrorReport", "RemoteChanged", "RemoteError", "is_url", "mirror_lerobot", "open_lerobot"]
