"""robomimic HDF5 reader: ``data/demo_<i>/{obs/<key>, actions, rewards, dones}``, filter keys
under ``mask/<name>`` (arrays of demo names), the env rate from ``data.attrs["env_args"]``.

Streams are named by their path inside the demo group: ``obs/<key>``, ``actions``,
``rewards``, ``dones``. The file is opened read-only; errors name it.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from ..user_warning import warn
from ._common import Episodes, ReaderError, infer_kind, require, step_times

DEFAULT_RATE = 20.0  # robosuite's default control_freq


def _demo_order(name: str):
    m = re.search(r"(\d+)$", name)
    return (0, int(m.group(1)), name) if m else (1, 0, name)


def env_rate(f) -> float | None:
    """control_freq from data.attrs['env_args'] (robosuite env kwargs), None when absent. An env_args that
    is there but is not JSON, or whose control_freq is not a positive number, is warned about (naming the
    file): the rate then falls back to DEFAULT_RATE, which silently changes every window's time step."""
    raw = f["data"].attrs.get("env_args") if "data" in f else None
    if raw is None:
        return None
    try:
        args = json.loads(raw if isinstance(raw, str) else bytes(raw).decode())
        hz = (args.get("env_kwargs") or {}).get("control_freq")
        if hz is None:
            return None
        if isinstance(hz, bool) or not float(hz) > 0:
            raise ValueError(f"control_freq is {hz!r}")
        return float(hz)
    except (ValueError, TypeError, AttributeError, OverflowError) as e:
        warn(f"{f.filename}: data.attrs['env_args'] is not robosuite's JSON env kwargs ({type(e).__name__}: "
             f"{str(e)[:120]}); the rate is {DEFAULT_RATE:g} Hz unless rate= is given")
        return None


def read_robomimic(path, *, obs_keys=None, filter_key=None, rate=None, include_next_obs=False,
                   show_progress=None) -> Episodes:
    """Read a robomimic HDF5 file into memory; see ``robocache.readers.from_robomimic``."""
    h5py = require("h5py", "robomimic", "from_robomimic")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ReaderError(f"{path}: file not found")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ReaderError(f"{path}: cannot open HDF5 file (corrupt or truncated?): {e}") from e
    try:
        return _read(f, path, obs_keys, filter_key, rate, include_next_obs)
    except ReaderError:
        raise
    except (OSError, RuntimeError, KeyError) as e:  # h5py raises these on damaged datasets
        raise ReaderError(f"{path}: cannot read HDF5 data (corrupt or truncated?): {e}") from e
    finally:
        f.close()


def _read(f, path, obs_keys, filter_key, rate, include_next_obs) -> Episodes:
    if "data" not in f:
        raise ReaderError(f"{path}: no 'data' group (not a robomimic file)")
    data = f["data"]
    if filter_key is not None:
        key = f"mask/{filter_key}"
        if key not in f:
            have = sorted(f["mask"].keys()) if "mask" in f else []
            raise ReaderError(f"{path}: no filter key '{filter_key}' under mask/ (has {have})")
        demos = [d.decode() if isinstance(d, bytes) else str(d) for d in f[key][()]]
        missing = [d for d in demos if d not in data]
        if missing:
            raise ReaderError(f"{path}: mask/{filter_key} lists {missing[:3]} which data/ does not have")
    else:
        demos = list(data.keys())
    demos = sorted(demos, key=_demo_order)
    if not demos:
        raise ReaderError(f"{path}: no demos" + (f" in mask/{filter_key}" if filter_key else ""))
    hz = float(rate) if rate is not None else (env_rate(f) or DEFAULT_RATE)

    first = data[demos[0]]
    if obs_keys is None:
        obs_keys = sorted(first["obs"].keys()) if "obs" in first else []
    names = [f"obs/{k}" for k in obs_keys]
    if include_next_obs:
        names += [f"next_obs/{k}" for k in obs_keys]
    names += [k for k in ("actions", "rewards", "dones") if k in first]

    episodes: list[dict] = []
    kinds: dict[str, str] = {}
    for d in demos:
        g = data[d]
        streams, n = {}, None
        for name in names:
            if name not in g:
                raise ReaderError(f"{path}: data/{d} has no '{name}'" +
                                  (f" (obs keys: {sorted(g['obs'].keys())})" if "obs" in g else ""))
            values = g[name][()]
            if values.ndim == 0:
                raise ReaderError(f"{path}: data/{d}/{name} is a scalar, expected one row per step")
            if n is None:
                n = values.shape[0]
            elif values.shape[0] != n:
                raise ReaderError(f"{path}: data/{d}/{name} has {values.shape[0]} steps, "
                                  f"data/{d}/{names[0]} has {n}")
            streams[name] = values
            kinds.setdefault(name, infer_kind(values))
        declared = g.attrs.get("num_samples")
        if declared is not None and n is not None and int(declared) != n:
            raise ReaderError(f"{path}: data/{d} declares num_samples={int(declared)} but holds {n} steps")
        t = step_times(n or 0, hz)
        episodes.append({k: (v, t) for k, v in streams.items()})
    kinds.update({k: "discrete" for k in ("dones",) if k in kinds})
    return Episodes(episodes=episodes, kinds=kinds, rates={k: hz for k in kinds}, tasks=None,
                    source=path, extra={"demos": demos, "rate": hz, "filter_key": filter_key})
