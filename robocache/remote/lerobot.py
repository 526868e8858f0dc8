"""``open_lerobot(url)``: a LeRobot v2.x/v3.0 set on object storage or the Hub as a node-local folder holding
what this rank's load reads, for ``Dataset.from_lerobot`` to read as any local set.

1. ``meta/`` whole (small; listed, or for HTTP, which cannot list, the names LeRobot writes probed); the
   versions of the other files from listings of just the folders that hold this rank's files;
2. this rank's episodes, from that metadata: ``episodes=``, or the shard plan ``from_lerobot(shard_episodes=)``
   uses (``robocache.loader.shard.lerobot_shard`` on the same files: the same episodes on every node);
3. their files: v2.x data and videos whole (one file per episode); v3.0 data files as the row groups that
   hold the episodes, v3.0 mp4s as the byte ranges the decoder reads for the episodes' spans;
4. v3.0 episodes whose rows are not all where the metadata says (LeRobot 0.4.0-0.4.4's converter, lerobot#2401)
   looked for in the set's other data files, as the reader looks for them.

The folder is ``<cache>/remote/<name>-<hash of the URL and endpoint>/set`` (``cache``: ``cache_dir=``, else
robocache's cache folder, ``ROBOCACHE_CACHE_DIR``: the node's local disk), the same path on every run, so the
frame cache's entries for its videos stay valid: a second job on the node fetches nothing and decodes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from .mirror import Mirror, Need
from .objects import Store
from .sparse import SET, STATE, write_atomic

#: meta/ files LeRobot (and GR00T) write, probed by name where the remote cannot list (HTTP)
META_NAMES = ("info.json", "stats.json", "episodes.jsonl", "tasks.jsonl", "episodes_stats.jsonl", "tasks.parquet",
              "modality.json")
V30_EPISODES = "meta/episodes/chunk-{chunk:03d}/file-{file:03d}.parquet"


@dataclass
class MirrorReport:
    """What ``mirror_lerobot`` did: the local dataset folder (``root``), the episodes it holds for this
    rank, the files the load reads, what was asked of the remote (``fetched``: data ``bytes``, range
    ``requests``, ``stats``, ``retries``), the bytes those files hold on the local disk, the seconds taken,
    and the mp4s read whole because their layout was not understood."""
    root: Path
    episodes: list
    files: int
    fetched: dict
    held: int
    seconds: float
    whole_mp4s: list = field(default_factory=list)


def is_url(path) -> bool:
    """Whether ``path`` names a remote folder (``s3://``, ``gs://``, ``hf://``, ``http(s)://``, any fsspec
    protocol but ``file://``)."""
    return isinstance(path, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None \
        and not path.startswith("file://")


def open_lerobot(url: str, *, episodes=None, shard=None, load_video: bool = True, video_resize=None,
                 cache_dir=None, storage_options: dict | None = None, workers: int | None = None,
                 retries: int = 5, timeout: float = 60.0, revalidate: bool = True) -> Path:
    """The local folder holding what loading ``url``'s episodes reads (see ``mirror_lerobot``)."""
    return mirror_lerobot(url, episodes=episodes, shard=shard, load_video=load_video, video_resize=video_resize,
                          cache_dir=cache_dir, storage_options=storage_options, workers=workers, retries=retries,
                          timeout=timeout, revalidate=revalidate).root


def mirror_lerobot(url: str, *, episodes=None, shard=None, load_video: bool = True, video_resize=None,
                   cache_dir=None, storage_options: dict | None = None, workers: int | None = None,
                   retries: int = 5, timeout: float = 60.0, revalidate: bool = True) -> MirrorReport:
    """Mirror what this rank's load of the LeRobot set at ``url`` reads into a node-local folder.

    Parameters
    ----------
    url : str
        ``s3://bucket/set``, ``gs://bucket/set``, ``hf://datasets/org/name`` (``@revision`` optional: pinned to
        its commit for the run), ``https://host/set``.
    episodes : list of int, optional
        The episodes to hold (default all); with ``shard``, those to split between the ranks.
    shard : True or (rank, world_size), optional
        This rank's episodes only: ``from_lerobot(shard_episodes=...)``'s plan (True: torch.distributed's rank).
    load_video : bool
        Mirror the videos too (False: metadata and data only).
    cache_dir : path, optional
        Where mirrors live (default ``<robocache cache folder>/remote``): the node's local disk.
    storage_options : dict, optional
        fsspec options: an S3-compatible endpoint (``{"client_kwargs": {"endpoint_url": ...}}``), credentials,
        ``{"endpoint": ...}`` for a Hub mirror.
    workers : int, optional
        Range requests in flight (default 16).
    retries, timeout : int, float
        Attempts after the first for a request that failed in a way that may pass; seconds per request.
    revalidate : bool
        Check each file's remote version (a listing of each folder read; HTTP: a HEAD per file) even when the
        mirror holds what the load reads (default). False trusts the mirror and asks the remote nothing when it has it all.

    Returns a MirrorReport; ``.root`` is the folder to give ``Dataset.from_lerobot``.
    """
    from ..readers.lerobot import episode_table, open_info
    from ..readers.lerobot_info import chunks_size
    t0 = time.perf_counter()
    opts = dict(storage_options or {})
    home = Path(cache_dir) if cache_dir is not None else _default_dir()
    folder = home / _folder_name(url, opts)
    mirror = Mirror(folder, lambda: Store(url, opts, retries=retries, timeout=timeout), workers=workers or 16,
                    revalidate=revalidate)
    root = folder / SET
    _sync_meta(mirror, folder, revalidate)
    _, _, info, major = open_info(root)
    chunks = chunks_size(info, root / "meta" / "info.json")
    table = episode_table(root, info, major, info["data_path"], chunks)
    mine = _episodes(root, table, episodes, shard, video_resize)
    needs = _data_needs(root, table, mine, major) + (_video_needs(root, info, table, mine, major, chunks)
                                                      if load_video else [])
    done = mirror.sync(needs)
    if major == 3:
        done += _misplaced_rows(mirror, root, table, mine, needs)
    return MirrorReport(root=root, episodes=list(mine), files=sum(d.present for d in done),
                        fetched=mirror.counts(), held=sum(d.held for d in done), seconds=time.perf_counter() - t0,
                        whole_mp4s=[d.rel for d in done if d.whole])


def _default_dir() -> Path:
    from ..frames.cache_folder import cache_dir
    return cache_dir() / "remote"


def _folder_name(url: str, opts: dict) -> str:
    """A readable label of the URL and a hash of it and of the endpoint it is read from (two stores with a
    bucket of the same name are two mirrors)."""
    client = opts.get("client_kwargs") or {}
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url") or opts.get("endpoint") or ""
    key = json.dumps({"url": url.rstrip("/"), "endpoint": str(endpoint)}, sort_keys=True)
    label = re.sub(r"[^A-Za-z0-9_-]+", "_", url.split("://", 1)[-1]).strip("_-")[-48:]
    return f"{label}-{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}"


# ---------------------------------------------------------------------------------------------
# meta/


def _sync_meta(mirror: Mirror, folder: Path, revalidate: bool) -> None:
    """meta/ whole. Listed where the remote lists; HTTP: info.json, the other names LeRobot writes, and
    v3.0's episode files probed in order (chunk by chunk, file by file, to the first missing). The names
    synced are recorded (``state/meta.json``), so ``revalidate=False`` can reuse them without asking."""
    record = folder / STATE / "meta.json"
    if not revalidate and record.is_file():
        names = json.loads(record.read_text())
        done = mirror.sync([Need(rel) for rel in names])
        if all(d.present for d in done):
            return
    listing = None if mirror.store.http else mirror.listing("meta", recursive=True)
    if listing is not None:
        names = sorted(listing)
        if "meta/info.json" not in names:
            from ..readers import ReaderError
            raise ReaderError(f"{mirror.store.url}: no meta/info.json; this is not a LeRobot dataset "
                              f"(its meta/ holds {len(listing)} files: {names[:5]})")
        done = mirror.sync([Need(rel) for rel in names])
    else:
        # no listing: info.json, the other names, and the first v3.0 episode files, all at once
        done = mirror.sync([Need("meta/info.json")]
                           + [Need(f"meta/{n}") for n in META_NAMES if n != "info.json"]
                           + _episode_files(0, 0))
        if not done[0].present:
            from ..readers import ReaderError
            raise ReaderError(f"{mirror.store.name('meta/info.json')}: not found; {mirror.store.url} is not a "
                              f"LeRobot dataset (or not readable)")
        done += _more_episode_files(mirror, {d.rel for d in done if d.present})
    write_atomic(record, json.dumps(sorted({d.rel for d in done if d.present})).encode())


#: v3.0 episode files asked for at once where the remote cannot list them
PROBE_BATCH = 8


def _episode_files(chunk: int, first: int) -> list:
    """Needs of a batch of v3.0 episode files by LeRobot's names: ``PROBE_BATCH`` files of ``chunk`` from
    ``first``, and the next chunk's first file (where the chunk ends)."""
    return [Need(V30_EPISODES.format(chunk=chunk, file=f)) for f in range(first, first + PROBE_BATCH)] \
        + [Need(V30_EPISODES.format(chunk=chunk + 1, file=0))]


def _more_episode_files(mirror: Mirror, present: set) -> list:
    """The v3.0 episode files after the first batch: LeRobot numbers them file by file within a chunk, then
    the next chunk; asked for a batch at a time, to the first one missing."""
    out: list = []
    chunk, first = 0, 0
    while True:
        run = 0                                       # files of the chunk present in a row from ``first``
        while run < PROBE_BATCH and V30_EPISODES.format(chunk=chunk, file=first + run) in present:
            run += 1
        if run == PROBE_BATCH:                        # the whole batch: the chunk may go on
            first += PROBE_BATCH
        elif first + run > 0 and V30_EPISODES.format(chunk=chunk + 1, file=0) in present:
            chunk, first = chunk + 1, 1               # the chunk ended where the next one's first file is
        else:
            return out
        done = mirror.sync(_episode_files(chunk, first))
        out += [d for d in done if d.present]
        present |= {d.rel for d in done if d.present}


# ---------------------------------------------------------------------------------------------
# the rank's episodes and their files


def _episodes(root: Path, table: dict, episodes, shard, video_resize) -> list:
    if shard:
        from ..loader.shard import lerobot_shard
        return list(lerobot_shard(root, shard, episodes, video_resize)[0])
    if episodes is None:
        return sorted(table)
    chosen = [int(e) for e in episodes]
    missing = [e for e in chosen if e not in table]
    if missing:
        raise ValueError(f"episodes {missing[:10]} are not in the set (it has {len(table)}: {sorted(table)[:10]}...)")
    return chosen


def _rel(root: Path, path) -> str:
    return Path(path).relative_to(root).as_posix()


def _rows(entry: dict):
    row = entry.get("row") or {}
    lo, hi = row.get("dataset_from_index"), row.get("dataset_to_index")
    return (int(lo), int(hi)) if lo is not None and hi is not None else None


def _data_needs(root: Path, table: dict, mine: list, major: int) -> list:
    if major == 2:
        return [Need(_rel(root, table[e]["data"])) for e in mine]
    by_file: dict = {}
    for e in mine:
        by_file.setdefault(_rel(root, table[e]["data"]), []).append(e)
    return [Need(rel, "rowgroups", episodes=eps, rows={e: _rows(table[e]) for e in eps})
            for rel, eps in sorted(by_file.items())]


def _video_needs(root: Path, info: dict, table: dict, mine: list, major: int, chunks: int) -> list:
    from ..readers.lerobot import video_file
    keys = [k for k, f in (info.get("features") or {}).items() if f.get("dtype") == "video"]
    if not keys or not info.get("video_path"):
        return []
    if major == 2:
        return [Need(_rel(root, video_file(root, info, table, e, k, major, chunks))) for e in mine for k in keys]
    spans: dict = {}
    for e in mine:
        row = table[e]["row"]
        for k in keys:
            try:
                t0, t1 = float(row[f"videos/{k}/from_timestamp"]), float(row[f"videos/{k}/to_timestamp"])
                rel = _rel(root, video_file(root, info, table, e, k, major, chunks))
            except (KeyError, TypeError, ValueError):
                continue                     # the reader says what is wrong with this episode's metadata
            spans.setdefault(rel, []).append((t0, t1))
    return [Need(rel, "spans", spans={0: s}) for rel, s in sorted(spans.items())]


def _misplaced_rows(mirror: Mirror, root: Path, table: dict, mine: list, needs: list) -> list:
    """v3.0 episodes with fewer rows in their named data file than their metadata promises: their row groups
    in the set's other data files (those any episode names), as the reader looks for them there."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # no stubs
    want = {e: _rows(table[e]) for e in mine}
    counts = dict.fromkeys(mine, 0)
    for n in needs:
        if n.kind != "rowgroups" or not (root / n.rel).is_file():
            continue
        path = root / n.rel
        names = pq.read_schema(path).names
        col = "episode_index" if "episode_index" in names else "index" if "index" in names else None
        if col is None:
            return []
        keys = pq.read_table(path, columns=[col]).column(col).to_numpy()
        for e in mine:
            if col == "episode_index":
                counts[e] += int((keys == e).sum())
            elif want[e] is not None:
                counts[e] += int(((keys >= want[e][0]) & (keys < want[e][1])).sum())
    short = [e for e in mine if want[e] is not None and counts[e] < want[e][1] - want[e][0]]
    if not short:
        return []
    named = {n.rel for n in needs if n.kind == "rowgroups"}
    others = sorted({_rel(root, entry["data"]) for entry in table.values()} - named)
    done = mirror.sync([Need(rel, "rowgroups", episodes=short, rows={e: want[e] for e in short}) for rel in others])
    return [d for d in done if d.present]

