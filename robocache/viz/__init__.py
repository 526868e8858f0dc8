"""robocache.viz: matplotlib views of a Dataset and of voxel grids, for notebooks.

- ``plot_episode``: each stream's raw samples (markers, at their own timestamps) against the
  curve ``Dataset.resample`` gives on one uniform grid (line): multi-rate alignment at a glance.
- ``show_frames``: a strip of an image stream's frames with their timestamps.
- ``voxels``: a voxel grid ``[X,Y,Z]`` as three max-projections or a 3-D scatter.
- ``episode_view``: an episode's camera frames and its joint/action curves on one time axis, with a
  time slider in Jupyter (ipywidgets), a static grid of frames + curves otherwise.
- ``rate_table`` / ``plot_rates``: per-stream rates and episode lengths, as a table and histograms.
- ``show_batch``: a loader batch as pictures, its padded (``{key}_is_pad``) steps marked.

The plotting functions return the matplotlib ``Figure`` (drawn into ``ax=`` when given). Only
what is drawn is copied to the host, so CUDA datasets work as they are. matplotlib is imported
when a function is called: ``pip install "robocache[viz]"`` (from a checkout:
``pip install -e ".[viz]"``); ipywidgets, for the slider, is optional.
"""

from .streams import plot_episode, show_frames
from .voxel_grid import voxels
from .episode import EpisodeView, episode_view
from .rates import Table, plot_rates, rate_table
from .batch import show_batch

__all__ = ["EpisodeView", "Table", "episode_view", "plot_episode", "plot_rates", "rate_table", "show_batch",
           "show_frames", "voxels"]
