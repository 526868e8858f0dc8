"""diffusion-policy ReplayBuffer reader (zarr): ``data/<key>`` arrays of all steps back to back,
``meta/episode_ends`` (exclusive end index of each episode); time is the step index / rate.

Works with zarr 2 and zarr 3 (``zarr.open(path, mode="r")`` reads a v2 store in both). For a
local v2 directory store chunked along time only (the ReplayBuffer layout), chunks are decoded
directly with numcodecs in threads: zarr 3 spends ~6 s on PushT's 709 MB image array where
the same decode takes ~1 s. Anything else goes through zarr. Dtypes are kept (PushT images are
float32 0..255). Missing chunk files, which zarr would silently read as the fill value, are an
error here.

No code from a dataset runs: numcodecs' pickle codec unpickles whatever a chunk (or, for a structured
dtype with object fields, the fill value in the metadata) holds, and zarr 2 decodes that fill value as
soon as an array is opened. So before zarr opens anything, every array's metadata in the store (.zarray,
.zmetadata, zarr.json and its consolidated metadata; directory or zip) is read as plain JSON and a store
that names the pickle codec anywhere is refused (``check_store``), whatever zarr or numcodecs is
installed and whatever NUMCODECS_ALLOW_UNSAFE_PICKLE_DECODE says.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..machine.memory import available_host_memory
from ._common import Episodes, ReaderError, infer_kind, progress, require, step_times


def _v2_meta(root, key):
    p = os.path.join(root, key, ".zarray")
    if not os.path.isfile(p):
        return None
    try:
        with open(p, "rb") as f:
            meta = json.load(f)
    except ValueError as e:
        raise ReaderError(f"{p}: not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise ReaderError(f"{p}: array '{key}' metadata must be a JSON object, got {type(meta).__name__}")
    _check_chunks(p, key, meta.get("shape"), meta.get("chunks"))
    return meta


#: codec ids (v2 ``id``, v3 ``name``) whose decode unpickles the data: code from the dataset would run
PICKLE_CODECS = ("pickle", "numcodecs.pickle")
_META_NAMES = (".zarray", ".zmetadata", "zarr.json")


def _names_pickle(meta: dict) -> bool:
    """Whether an array's metadata holds a codec dict ({"id": ...} or {"name": ...}) of PICKLE_CODECS at
    any depth (compressor, filters, object_codec, a v3 codec chain, a sharding codec's inner chain); its
    user ``attributes`` (free JSON) are not codecs. Iterative: a deeply nested document must not stop the
    check with a RecursionError."""
    stack: list = [v for k, v in meta.items() if k != "attributes"]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if any(isinstance(x.get(k), str) and x[k].lower() in PICKLE_CODECS for k in ("id", "name")):
                return True
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


def _pickled_arrays(name: str, doc, prefix: str) -> list[str]:
    """Array names (under ``prefix``) that metadata file ``name`` declares with a pickle codec: the array
    itself (.zarray, a v3 array's zarr.json) or those of consolidated metadata (.zmetadata: "<key>/.zarray"
    items; a v3 group's ``consolidated_metadata``: array nodes)."""
    if not isinstance(doc, dict):
        return []
    if name == ".zmetadata":
        inner = doc.get("metadata")
        arrays = {k.rsplit(".zarray", 1)[0].rstrip("/"): v for k, v in inner.items()
                  if isinstance(k, str) and k.endswith(".zarray")} if isinstance(inner, dict) else {}
    elif name == "zarr.json" and doc.get("node_type") == "group":
        inner = doc.get("consolidated_metadata")
        inner = inner.get("metadata") if isinstance(inner, dict) else None
        arrays = {k: v for k, v in inner.items() if isinstance(v, dict) and v.get("node_type") == "array"} \
            if isinstance(inner, dict) else {}
    else:
        arrays = {"": doc}
    return [f"{prefix}{k}".rstrip("/") or "." for k, v in sorted(arrays.items())
            if isinstance(v, dict) and _names_pickle(v)]


def _metadata_docs(path: str):
    """(file named in errors, its name, array prefix, parsed JSON) of every metadata file of a store; a
    file that does not parse is left to zarr and _metadata_error (no codec of it can run)."""
    if os.path.isdir(path):
        for dirpath, dirnames, names in os.walk(path):
            dirnames.sort()
            rel = os.path.relpath(dirpath, path)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            array = ".zarray" in names
            for n in sorted(set(names) & set(_META_NAMES)):
                p = os.path.join(dirpath, n)
                try:
                    with open(p, "rb") as f:
                        doc = json.load(f)
                except (OSError, ValueError, RecursionError):
                    continue
                array = array or isinstance(doc, dict) and doc.get("node_type") == "array"
                yield p, n, prefix, doc
            if array:
                dirnames[:] = []   # an array's subfolders hold chunks only
        return
    try:
        with zipfile.ZipFile(path) as z:
            for member in sorted(z.namelist()):
                head, _, n = member.rpartition("/")
                if n in _META_NAMES:
                    try:
                        doc = json.loads(z.read(member))
                    except (OSError, ValueError, RecursionError, zipfile.BadZipFile):
                        continue
                    yield f"{path}/{member}", n, f"{head}/" if head else "", doc
    except (OSError, zipfile.BadZipFile):
        return    # not a zip: zarr says what it is


def check_store(path) -> None:
    """The metadata of every array of the store at ``path``, read as plain JSON before zarr opens it:
    ReaderError naming the metadata file, the array and the field when an array uses the pickle codec
    (PICKLE_CODECS, see the module docstring), or (v2) has a dtype NumPy does not know or a compressor or
    filter numcodecs does not have (zarr's own errors name no file)."""
    path = os.fspath(path)
    for where, name, prefix, doc in _metadata_docs(path):
        bad = _pickled_arrays(name, doc, prefix)
        if bad:
            raise ReaderError(f"{where}: array '{bad[0]}' uses the pickle codec, which runs code stored in the "
                              f"dataset when it is decoded; robocache does not read stores that hold one. Re-save "
                              f"the array with a safe codec (numcodecs.VLenUTF8 for strings, numcodecs.JSON or "
                              f"numcodecs.MsgPack for other objects) or as a numeric array")
        if name == ".zarray" and isinstance(doc, dict):
            _check_v2_fields(where, prefix.rstrip("/"), doc)


def _np_dtype(dt) -> np.dtype:
    """A v2 .zarray's dtype: a string, or for a structured dtype a JSON list of [name, type(, shape)]."""
    return np.dtype(dt if isinstance(dt, str) else [tuple(f) for f in dt])


def _check_v2_fields(where: str, key: str, meta: dict) -> None:
    """ReaderError naming the field of a v2 array's metadata that NumPy or numcodecs cannot take."""
    dt = meta.get("dtype")
    try:
        _np_dtype(dt)
    except (TypeError, ValueError, SyntaxError):
        raise ReaderError(f"{where}: array '{key}' has dtype {dt!r}, which is not a NumPy dtype "
                          f"(e.g. '<f4', '|u1')") from None
    numcodecs = require("numcodecs", "zarr", "from_zarr")
    for field in ("compressor", "filters"):
        codecs = meta.get(field)
        for c in (codecs if isinstance(codecs, list) else [] if codecs is None else [codecs]):
            try:
                numcodecs.get_codec(dict(c))
            except Exception as e:   # not a dict, no id, an unknown id, arguments the codec refuses
                raise ReaderError(f"{where}: array '{key}' has {field} {c!r}, which numcodecs cannot make "
                                  f"({type(e).__name__}: {e})") from None


def _check_size(where: str, key: str, shape, dtype, steps: int | None = None) -> None:
    """ReaderError naming the array's shape when it cannot be the array the reader is about to hold whole:
    a data array whose steps differ from meta/episode_ends' (``steps``), or more bytes than this process
    may take (a damaged shape of 10^12 would otherwise fail in NumPy's allocator, naming no file)."""
    if steps is not None and shape and shape[0] != steps:
        raise ReaderError(f"{where}: array '{key}' has shape {list(shape)}: {shape[0]} steps, "
                          f"meta/episode_ends ends at {steps}")
    nbytes = int(np.dtype(dtype).itemsize) * math.prod(int(v) for v in shape)
    free = available_host_memory()
    if nbytes > free:
        raise ReaderError(f"{where}: array '{key}' has shape {list(shape)} of {np.dtype(dtype)}: "
                          f"{nbytes / 1e9:,.1f} GB, more than the {free / 1e9:,.1f} GB of memory this process "
                          f"may take (a damaged shape{', or pass keys= to leave the array out' if steps else ''})")


def _check_chunks(where, key, shape, chunks) -> None:
    """ReaderError naming the array when its shape and chunks are not lists of integers of one length,
    chunk sizes >= 1 (zarr and the chunk count would divide by a chunk size of 0)."""
    def ints(x):
        return isinstance(x, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
    if not ints(shape) or not ints(chunks) or len(shape) != len(chunks) or any(v < 0 for v in shape):
        raise ReaderError(f"{where}: array '{key}' has shape {shape!r} and chunks {chunks!r}; expected two lists "
                          f"of integers of the same length")
    if any(c < 1 for c in chunks):
        raise ReaderError(f"{where}: array '{key}' has chunks {list(chunks)}; every chunk size must be >= 1")


def _metadata_error(path, e) -> ReaderError:
    """zarr raises a bare JSONDecodeError/UnicodeDecodeError for a damaged .zarray/.zgroup that
    names no file: find the metadata file that does not parse and name it (else the store)."""
    if os.path.isdir(path):
        for dirpath, dirnames, names in os.walk(path):
            dirnames.sort()
            for n in sorted(names):
                if n in (".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json"):
                    p = os.path.join(dirpath, n)
                    try:
                        with open(p, "rb") as f:
                            json.load(f)
                    except (ValueError, OSError) as err:
                        return ReaderError(f"{p}: not valid JSON ({err})")
    return ReaderError(f"{path}: cannot read zarr metadata (corrupt?): {e}")


def _chunk_files(root, key, meta):
    """Paths of the chunk files of a v2 array chunked along axis 0 only, in order."""
    shape, chunks = meta["shape"], meta["chunks"]
    sep = meta.get("dimension_separator") or "."
    n = -(-shape[0] // chunks[0]) if shape[0] else 0
    tail = sep.join("0" for _ in shape[1:])
    return [os.path.join(root, key, *(f"{i}{sep}{tail}" if tail else str(i)).split("/")) for i in range(n)]


def _fast_readable(meta) -> bool:
    return (meta is not None and meta.get("zarr_format") == 2 and meta.get("order", "C") == "C"
            and len(meta["shape"]) >= 1 and list(meta["chunks"][1:]) == list(meta["shape"][1:])
            and np.dtype(meta["dtype"]).kind in "biuf")


def _read_fast(root, key, meta, workers):
    """Decode every chunk with numcodecs straight into one array (threads; blosc releases the GIL)."""
    numcodecs = require("numcodecs", "zarr", "from_zarr")
    shape, rows = meta["shape"], meta["chunks"][0]
    dtype = np.dtype(meta["dtype"])
    comp = numcodecs.get_codec(meta["compressor"]) if meta.get("compressor") else None
    filters = [numcodecs.get_codec(c) for c in (meta.get("filters") or [])]
    out = np.empty(shape, dtype)
    files = _chunk_files(root, key, meta)
    row_elems = int(np.prod(shape[1:], dtype=np.int64))

    def one(i):
        p = files[i]
        try:
            with open(p, "rb") as fh:
                buf = fh.read()
        except FileNotFoundError:
            raise ReaderError(f"{p}: chunk file of '{key}' is missing") from None
        lo, hi = i * rows, min((i + 1) * rows, shape[0])
        try:
            if comp is not None and not filters and hi - lo == rows:
                # full chunk: decompress straight into the output (saves a copy of every byte)
                dest = out[lo:hi].reshape(-1).view(np.uint8)
                comp.decode(buf, out=dest)
                return
            raw = comp.decode(buf) if comp else buf
            for flt in reversed(filters):
                raw = flt.decode(raw)
            arr = np.frombuffer(raw, dtype=dtype)
        except Exception as e:
            raise ReaderError(f"{p}: cannot decode chunk {i} of '{key}' (corrupt or truncated?): {e}") from e
        if arr.size != rows * row_elems:
            raise ReaderError(f"{p}: chunk {i} of '{key}' holds {arr.size} elements, expected {rows * row_elems}")
        out[lo:hi] = arr[: (hi - lo) * row_elems].reshape((hi - lo,) + tuple(shape[1:]))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, range(len(files))))
    return out


def _read_zarr(group, key, path, steps: int):
    """Through zarr (``steps``: meta/episode_ends' last end); on a decode failure, find the bad chunk
    (along time) to name it."""
    try:
        arr = group[key]
    except ValueError as e:
        raise _metadata_error(path, e) from e
    name = os.path.join(path, "data", key)
    _check_chunks(name, f"data/{key}", list(arr.shape), list(arr.chunks))
    _check_size(name, f"data/{key}", arr.shape, arr.dtype, steps)
    try:
        return arr[...]
    except Exception as e:
        rows = arr.chunks[0] if arr.ndim else 0
        for i in range(-(-arr.shape[0] // rows) if rows else 0):
            try:
                arr[i * rows:(i + 1) * rows]
            except Exception:
                raise ReaderError(f"{name}: cannot read chunk {i} (rows {i * rows}..{min((i + 1) * rows, arr.shape[0])}"
                                  f"; corrupt or truncated?): {e}") from e
        raise ReaderError(f"{name}: cannot read zarr array (corrupt chunk?): {e}") from e


def read_zarr(path, *, rate: float = 10.0, keys=None, fast: bool = True, show_progress=None,
              max_workers: int | None = None) -> Episodes:
    """Read a diffusion-policy ReplayBuffer; see ``robocache.readers.from_zarr``."""
    zarr = require("zarr", "zarr", "from_zarr")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ReaderError(f"{path}: no such zarr store")
    local_dir = os.path.isdir(path)
    check_store(path)
    try:
        if local_dir:
            root = zarr.open(path, mode="r")
        else:  # a .zarr.zip
            store = zarr.storage.ZipStore(path, mode="r")
            root = zarr.open(store, mode="r")
    except ValueError as e:  # a damaged root .zgroup
        raise _metadata_error(path, e) from e
    except Exception as e:
        raise ReaderError(f"{path}: cannot open zarr store: {e}") from e
    try:
        ends_arr = root["meta/episode_ends"]
    except KeyError:
        raise ReaderError(f"{path}: no meta/episode_ends (not a diffusion-policy ReplayBuffer)") from None
    except ValueError as e:
        raise _metadata_error(path, e) from e
    _check_chunks(os.path.join(path, "meta", "episode_ends"), "meta/episode_ends", list(ends_arr.shape),
                  list(ends_arr.chunks))
    _check_size(os.path.join(path, "meta", "episode_ends"), "meta/episode_ends", ends_arr.shape, ends_arr.dtype)
    try:
        ends = np.asarray(ends_arr[...], dtype=np.int64)
    except Exception as e:
        raise ReaderError(f"{os.path.join(path, 'meta', 'episode_ends')}: cannot read: {e}") from e
    if ends.ndim != 1 or len(ends) == 0:
        raise ReaderError(f"{path}: meta/episode_ends must be a non-empty 1-D array, got shape {ends.shape}")
    if ends[0] < 0 or np.any(np.diff(ends) < 0):
        raise ReaderError(f"{path}: meta/episode_ends is not non-decreasing from 0: {ends[:8]}...")
    try:
        data = root["data"]
        available = sorted(data.array_keys()) if hasattr(data, "array_keys") else sorted(data.keys())
    except KeyError:
        raise ReaderError(f"{path}: no data/ group") from None
    except ValueError as e:
        raise _metadata_error(path, e) from e
    if keys is None:
        keys = available
    else:
        keys = list(keys)
        unknown = [k for k in keys if k not in available]
        if unknown:
            raise KeyError(f"{path}: data/ has no {unknown} (has {available})")
    total = int(ends[-1])
    workers = max_workers or min(16, os.cpu_count() or 1)

    arrays = {}
    for key in progress(keys, total=len(keys), desc="reading zarr", enable=show_progress):
        meta = _v2_meta(path, f"data/{key}") if local_dir else None
        if meta is not None:   # before the chunk files are listed: a shape of 10^12 lists 10^12 names
            _check_size(os.path.join(path, "data", key, ".zarray"), f"data/{key}", meta["shape"],
                        _np_dtype(meta["dtype"]), total)
        if fast and _fast_readable(meta):
            arrays[key] = _read_fast(path, f"data/{key}", meta, workers)
        else:
            if meta is not None:  # zarr reads a missing chunk as the fill value: refuse instead
                for p in _chunk_files(path, f"data/{key}", meta) if list(meta["chunks"][1:]) == list(
                        meta["shape"][1:]) else []:
                    if not os.path.isfile(p):
                        raise ReaderError(f"{p}: chunk file of 'data/{key}' is missing")
            arrays[key] = _read_zarr(data, key, path, total)
        if arrays[key].shape[0] != total:
            raise ReaderError(f"{os.path.join(path, 'data', key)}: {arrays[key].shape[0]} steps, "
                              f"meta/episode_ends ends at {total}")

    starts = np.concatenate([[0], ends[:-1]])
    episodes = []
    for first, end in zip(starts, ends):
        t = step_times(int(end - first), rate)
        episodes.append({k: (a[first:end], t) for k, a in arrays.items()})
    kinds = {k: infer_kind(a) for k, a in arrays.items()}
    return Episodes(episodes=episodes, kinds=kinds, rates={k: float(rate) for k in arrays}, source=path,
                    extra={"episode_ends": ends, "keys": keys})
