"""Video: the only code that opens a video file (PyAV, OpenCV, torchvision.io), below ``readers/`` and
``frames/``.

- ``source.py``  ``VideoSource``: one episode's frames in a file, ``(file, stream, [start, end))`` (LeRobot
                 v2.x: the whole file; v3.0: the episode's span of a shared mp4), and the span rule.
- ``probe.py``   what a file says about itself without decoding; ``probe_sources``: the frame format and
                 the frame count of every source of a stream (the memory plan starts from it).
- ``decode.py``  the one decoder implementation: a job (a file and its wanted spans, one pass, seeking to
                 the first) into a ``Rows`` sink; ``decode_video``, the in-memory sink.
- ``rows.py``    ``Rows``: where a decoder's frames go (in place, or a ring handed over a chunk at a time).
- ``layout.py``  ``FrameSpec``: a decoded frame's row (YUV 4:2:0 or RGB), and the planes' copy into it.
- ``times.py``   frame times against row times: each episode's timestamps checked against its frames' (by
                 LeRobot's ``tolerance_s`` rule) and the frame times a dataset keeps (``video_timestamps``);
                 the load and the doctor share it.
"""

from .decode import Job, decode_job, decode_video, decode_videos, make_jobs
from .layout import FrameSpec, yuv420_bytes
from .probe import (VideoInfo, as_sources, available_backends, check_resize, frame_times, probe_sources, probe_video,
                    resolve_backend)
from .rows import Rows, Ticker
from .source import VideoSource

__all__ = ["FrameSpec", "Job", "Rows", "Ticker", "VideoInfo", "VideoSource", "as_sources", "available_backends", "check_resize",
           "decode_job", "decode_video", "decode_videos", "frame_times", "make_jobs", "probe_sources", "probe_video",
           "resolve_backend", "yuv420_bytes"]
