"""LeRobot sets as LeRobot's own tools leave them (issue 44, item 5): episodes deleted, split, aggregated
into several data and video files, a feature removed, images stored in the parquet (RGB and 0.6's depth
maps), ``names: null`` with no image statistics (the v2.1 -> v3.0 converter's output, lerobot#3786).

With LeRobot importable, the sets are made by its tools (``lerobot.datasets.dataset_tools``, what
``lerobot-edit-dataset`` runs, and ``aggregate_datasets``) and every batch of ``DataLoader(ds, B,
delta_timestamps=dt)`` and every ``ds[i]`` is compared with LeRobotDataset's items, frames too, exactly
(its default decoder, torchcodec or PyAV, converts to RGB as robocache does). Without LeRobot, sets written
with pyarrow in LeRobot's layout check what can be checked from the files alone: parquet images (8-bit,
16-bit and float depth maps), ``names: null``, a stats.json without image statistics, and the errors.
"""

from __future__ import annotations

import io
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

import robocache  # noqa: E402
from robocache import DataLoader, ReaderError  # noqa: E402
from lerobot_forge import assert_lerobot_batch  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")
FPS = 10
H, W = 6, 10          # smaller than infer_kind's 8 x 8: an image feature is an image whatever its size


def load(root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(root, device="cpu", **kw)


# ---------------------------------------------------------------------------------------------
# without LeRobot: parquet images, names: null, no image statistics


def png(a):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def tiff(a):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="TIFF")
    return buf.getvalue()


def write_image_set(root: Path, rng, lengths=(4, 6)) -> dict:
    """A v3.0 set as ``LeRobotDataset.create(use_videos=False)`` writes it: each image a ``{bytes, path}``
    cell (RGB PNG; depth maps flagged ``is_depth_map``, 16-bit in millimetres and float in metres, as
    TIFF), every feature ``names: null``, stats.json without the cameras. Returns the arrays written."""
    n = sum(lengths)
    src = {"state": rng.standard_normal((n, 3)).astype(np.float32),
           "rgb": rng.integers(0, 256, (n, H, W, 3), dtype=np.uint8),
           "mm": rng.integers(0, 4000, (n, H, W), dtype=np.uint16),
           "m": rng.uniform(0.2, 3.0, (n, H, W)).astype(np.float32)}
    cell = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    episode = np.repeat(np.arange(len(lengths)), lengths)
    frame = np.concatenate([np.arange(k) for k in lengths])
    images = {"rgb": [png(a) for a in src["rgb"]], "mm": [tiff(a) for a in src["mm"]],
              "m": [tiff(a) for a in src["m"]]}
    cols = {"observation.state": pa.array(list(src["state"]), pa.list_(pa.float32(), 3))}
    for k, blobs in images.items():
        cols[f"observation.images.{k}"] = pa.array([{"bytes": b, "path": f"frame-{i:06d}.png"}
                                                    for i, b in enumerate(blobs)], cell)
    cols.update({"timestamp": pa.array(frame / FPS, pa.float32()), "frame_index": frame, "episode_index": episode,
                 "index": np.arange(n), "task_index": episode % 2})
    (root / "data/chunk-000").mkdir(parents=True)
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(cols), root / "data/chunk-000/file-000.parquet")
    ends = np.cumsum(lengths)
    pq.write_table(pa.table({"episode_index": np.arange(len(lengths)),
                             "tasks": [[f"task {e % 2}"] for e in range(len(lengths))], "length": list(lengths),
                             "data/chunk_index": [0] * len(lengths), "data/file_index": [0] * len(lengths),
                             "dataset_from_index": ends - lengths, "dataset_to_index": ends}),
                   root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": [0, 1], "task": ["task 0", "task 1"]}), root / "meta/tasks.parquet")
    depth = {"is_depth_map": True}
    features = {"observation.state": {"dtype": "float32", "shape": [3], "names": None},
                "observation.images.rgb": {"dtype": "image", "shape": [H, W, 3], "names": None},
                "observation.images.mm": {"dtype": "image", "shape": [H, W, 1], "names": None,
                                          "info": {**depth, "depth_unit": "mm"}},
                "observation.images.m": {"dtype": "image", "shape": [H, W, 1], "names": None,
                                         "info": {**depth, "depth_unit": "m"}}}
    features.update({k: {"dtype": t, "shape": [1], "names": None} for k, t in (
        ("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"), ("index", "int64"),
        ("task_index", "int64"))})
    (root / "meta/info.json").write_text(json.dumps({
        "codebase_version": "v3.0", "fps": FPS, "chunks_size": 1000, "total_episodes": len(lengths),
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "video_path": None,
        "features": features}))
    state = src["state"].astype(np.float64)
    (root / "meta/stats.json").write_text(json.dumps({"observation.state": {
        "min": state.min(0).tolist(), "max": state.max(0).tolist(), "mean": state.mean(0).tolist(),
        "std": state.std(0).tolist(), "count": [n]}}))
    return src


def test_parquet_images_load_as_lerobot_items(tmp_path, rng):
    src = write_image_set(tmp_path, rng)
    ds = load(tmp_path)
    cams = ["observation.images.rgb", "observation.images.mm", "observation.images.m"]
    assert all(ds.streams[k].kind == "image" for k in cams)
    # LeRobot's values: RGB / 255; depth in its native unit, millimetres where the feature records metres
    want = {"observation.images.rgb": torch.from_numpy(src["rgb"]).permute(0, 3, 1, 2).float() / 255,
            "observation.images.mm": torch.from_numpy(src["mm"].astype(np.float32))[:, None],
            "observation.images.m": torch.from_numpy(src["m"])[:, None] * 1000}
    for i in range(ds.num_frames):
        item = ds[i]
        assert int(item["index"]) == i
        assert torch.equal(item["observation.images.rgb"], torch.from_numpy(src["rgb"][i]))
        for k in cams[1:]:
            assert item[k].dtype == torch.float32 and torch.equal(item[k].permute(2, 0, 1), want[k][i])
    dt = {k: [-0.1, 0.0] for k in cams}
    seen = []
    for b in DataLoader(ds, 4, shuffle=True, seed=0, delta_timestamps=dt):
        idx = b["index"]
        ep = torch.from_numpy(np.repeat([0, 1], [4, 6]))[idx]
        first = torch.where(ep == 0, 0, 4)
        prev = torch.maximum(idx - 1, first)                  # clamped into the episode, padded
        for k in cams:
            assert b[k].dtype == torch.float32 and b[k].shape == (len(idx), 2, want[k].shape[1], H, W)
            assert torch.equal(b[k], torch.stack([want[k][prev], want[k][idx]], 1)), k
            assert b[f"{k}_is_pad"].tolist() == [[bool(p), False] for p in (idx == first)]
        seen += idx.tolist()
    assert sorted(seen) == list(range(10))
    # names: null is no names; stats.json's state statistics are used, the cameras' computed
    assert all(s.feature_names is None for s in ds.streams.values())
    assert ds.streams["observation.state"].stats_source == "dataset"
    # the file's figures are float32 means of O(1) values: equal to float32 rounding, near zero too
    np.testing.assert_allclose(ds.streams["observation.state"].file_stats["mean"], src["state"].mean(0), rtol=1e-6,
                               atol=1e-6)
    assert all(not ds.streams[k].file_stats for k in cams)


def test_image_cell_without_bytes_is_an_error(tmp_path, rng):
    write_image_set(tmp_path, rng)
    f = tmp_path / "data/chunk-000/file-000.parquet"
    t = pq.read_table(f)
    k = "observation.images.rgb"
    cells = t.column(k).to_pylist()
    cells[3] = {"bytes": None, "path": "images/frame-000003.png"}
    pq.write_table(t.set_column(t.schema.get_field_index(k), k, pa.array(cells, t.schema.field(k).type)), f)
    with pytest.raises(ReaderError, match=r"file-000\.parquet, episode 0: column 'observation\.images\.rgb' row 3 "
                                          r"holds no image bytes \(only the path 'images/frame-000003\.png'\)"):
        load(tmp_path)


def test_depth_video_is_an_error(tmp_path, rng):
    """LeRobot 0.6 stores depth videos as 12-bit codes: decoded as colour they would be wrong values."""
    write_image_set(tmp_path, rng)
    info = json.loads((tmp_path / "meta/info.json").read_text())
    info["video_path"] = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    info["features"]["observation.images.depth"] = {"dtype": "video", "shape": [H, W, 1], "names": None,
                                                    "info": {"video.codec": "hevc", "is_depth_map": True}}
    (tmp_path / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ReaderError, match=r"info\.json: camera 'observation\.images\.depth' is a depth-map video "
                                          r"\(info\.is_depth_map\).*load_video=False"):
        load(tmp_path)
    assert "observation.images.depth" not in load(tmp_path, load_video=False).streams


# ---------------------------------------------------------------------------------------------
# with LeRobot: sets made by its own tools, against its own items


def make(root: Path, repo: str, lengths, seed: int, *, videos: bool = True, depth: bool = False):
    """A set recorded through LeRobot's API: ``create``, ``add_frame``, ``save_episode``, ``finalize``."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    feats = {"observation.state": {"dtype": "float32", "shape": (3,), "names": ["a", "b", "c"]},
             "action": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
             "observation.images.cam": {"dtype": "video" if videos else "image", "shape": (24, 32, 3),
                                        "names": ["height", "width", "channels"]}}
    if depth:
        feats["observation.images.depth"] = {"dtype": "image", "shape": (24, 32, 1), "names": None,
                                             "info": {"is_depth_map": True, "depth_unit": "m"}}
    ds = LeRobotDataset.create(repo_id=repo, fps=FPS, features=feats, root=root, use_videos=videos)
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:24, 0:32]
    for e, n in enumerate(lengths):
        for i in range(n):
            img = np.stack([(xx * 7 + i * 9 + e * 30) % 256, (yy * 9 + i * 5) % 256, np.full_like(xx, 40 * e + seed)],
                           -1).astype(np.uint8)
            frame = {"observation.state": g.normal(size=3).astype(np.float32),
                     "action": g.normal(size=2).astype(np.float32), "observation.images.cam": img,
                     "task": f"task {e % 2} of {repo}"}
            if depth:
                frame["observation.images.depth"] = g.uniform(0.2, 3.0, (24, 32, 1)).astype(np.float32)
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()


def without_names_and_image_stats(src: Path, dst: Path) -> None:
    """``src`` as the v2.1 -> v3.0 converter leaves a set recorded without names or camera statistics
    (lerobot#3786): every feature ``names: null``, no camera in stats.json or the episodes' stats."""
    shutil.copytree(src, dst)
    info = json.loads((dst / "meta/info.json").read_text())
    for f in info["features"].values():
        f["names"] = None
    (dst / "meta/info.json").write_text(json.dumps(info, indent=4))
    cams = [k for k, f in info["features"].items() if f["dtype"] in ("video", "image")]
    stats = json.loads((dst / "meta/stats.json").read_text())
    (dst / "meta/stats.json").write_text(json.dumps({k: v for k, v in stats.items() if k not in cams}, indent=4))
    for f in (dst / "meta/episodes").glob("**/*.parquet"):
        t = pq.read_table(f)
        pq.write_table(t.select([c for c in t.column_names if not c.startswith(tuple(f"stats/{k}/" for k in cams))]),
                       f)


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    pytest.importorskip("lerobot", reason="the sets are made by LeRobot's own tools")
    from lerobot.datasets.aggregate import aggregate_datasets
    from lerobot.datasets.dataset_tools import delete_episodes, remove_feature, split_dataset
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out = tmp_path_factory.mktemp("edited")
    make(out / "a", "local/a", [8, 11, 6, 9, 7], 0)
    make(out / "b", "local/b", [5, 10, 7], 1)
    make(out / "images", "local/images", [6, 9, 5], 2, videos=False)
    # files of a few KB: the aggregate spreads over several data and video files, which the edits below keep,
    # copy or re-encode file by file
    aggregate_datasets(["local/a", "local/b"], "local/merged", roots=[out / "a", out / "b"], aggr_root=out / "merged",
                       data_files_size_in_mb=0.004, video_files_size_in_mb=0.004)
    merged = LeRobotDataset("local/merged", root=out / "merged")
    eps = pa.concat_tables([pq.read_table(f) for f in sorted((out / "merged/meta/episodes").glob("**/*.parquet"))])
    files = eps.column("videos/observation.images.cam/file_index").to_pylist()
    assert max(files) >= 1, "the aggregate should span several video files"
    delete_episodes(merged, [0, 3, 6], output_dir=out / "deleted", repo_id="local/deleted")
    # every episode of the first files: the rest are copied whole, the file numbers start after a gap
    delete_episodes(merged, [e for e, f in zip(eps.column("episode_index").to_pylist(), files) if f == 0],
                    output_dir=out / "file_deleted", repo_id="local/file_deleted")
    split_dataset(merged, {"train": [1, 2, 4, 7], "val": [0, 3, 5, 6]}, output_dir=out / "split")
    remove_feature(merged, "observation.state", output_dir=out / "removed", repo_id="local/removed")
    delete_episodes(LeRobotDataset("local/images", root=out / "images"), [1], output_dir=out / "images_deleted",
                    repo_id="local/images_deleted")
    without_names_and_image_stats(out / "deleted", out / "bare")
    sets = {k: out / k for k in ("merged", "deleted", "file_deleted", "removed", "images", "images_deleted", "bare")}
    sets.update({"split_train": out / "split/train", "split_val": out / "split/val"})
    try:
        from lerobot.configs import is_depth_map  # noqa: F401  # LeRobot 0.6: depth maps as image features
    except ImportError:
        return sets
    make(out / "depth", "local/depth", [5, 7], 3, videos=False, depth=True)
    sets["depth"] = out / "depth"
    return sets


KINDS = ["merged", "deleted", "file_deleted", "split_train", "split_val", "removed", "images", "images_deleted", "bare",
         "depth"]


def lerobot_items(root, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    return LeRobotDataset("local/edited", root=root, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_batches_and_items_are_lerobots(edited, kind):
    from torch.utils.data import default_collate

    if kind not in edited:
        pytest.skip("depth maps as image features need LeRobot 0.6")
    root = edited[kind]
    features = json.loads((root / "meta/info.json").read_text())["features"]
    cams = [k for k, f in features.items() if f["dtype"] in ("video", "image")]
    dt = {k: d for k, d in {"observation.state": [-0.2, 0.0], "action": [0.0, 0.1, 0.3]}.items() if k in features}
    dt.update({k: [-0.1, 0.0] for k in cams})
    ref = lerobot_items(root, delta_timestamps=dt)
    at = {int(i): p for p, i in enumerate(ref.hf_dataset["index"])}      # dataset-wide index -> LeRobot's item
    ds = load(root)
    assert ds.num_frames == len(ref)
    assert ds.episode_index.tolist() == sorted({int(e) for e in ref.hf_dataset["episode_index"]})
    seen = []
    for b in DataLoader(ds, 8, shuffle=True, seed=1, delta_timestamps=dt):
        idx = b["index"].tolist()
        assert_lerobot_batch(b, default_collate([ref[at[i]] for i in idx]), f"{kind}, indices {idx}")
        seen += idx
    assert sorted(seen) == sorted(at)
    plain = lerobot_items(root)
    for i in range(0, len(plain), 2):
        item = ds[i]
        for k in cams:           # ds[i] keeps frames as stored, [H, W, C]; LeRobot's are float CHW
            item[k] = item[k].permute(2, 0, 1).float() / (255 if item[k].dtype == torch.uint8 else 1)
        item["timestamp"] = item["timestamp"].float()
        assert_lerobot_batch(item, plain[i], f"{kind}, ds[{i}]", contiguous=False)


def test_a_subset_of_a_merged_set_is_lerobots(edited):
    from torch.utils.data import default_collate

    eps = [1, 4, 5]
    dt = {"observation.images.cam": [0.0, 0.1], "action": [-0.1, 0.0]}
    ref = lerobot_items(edited["merged"], episodes=eps, delta_timestamps=dt)
    at = {int(i): p for p, i in enumerate(ref.hf_dataset["index"])}
    ds = load(edited["merged"], episodes=eps)
    seen = []
    for b in DataLoader(ds, 8, delta_timestamps=dt):
        idx = b["index"].tolist()
        assert_lerobot_batch(b, default_collate([ref[at[i]] for i in idx]), f"indices {idx}")
        seen += idx
    assert sorted(seen) == sorted(at)
