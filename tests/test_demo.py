"""`python -m robocache demo` (robocache/demo.py): the main job trains, on the CPU here, with the
generated multi-rate dataset and with the GR00T LeRobot fixture."""

import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from robocache import demo  # noqa: E402


def test_generated_dataset_is_multi_rate():
    ds = demo.generate(num_episodes=3, seed=1, device="cpu")
    rates = {n: s.rate for n, s in ds.streams.items()}
    assert {n: round(r) for n, r in rates.items()} == {"joints": 100, "gripper": 50, "camera": 15, "actions": 50}
    assert ds.streams["camera"].kind == "image" and ds.streams["camera"].shape == (32, 32, 3)
    assert ds.streams["joints"].shape == (14,) and ds.streams["actions"].shape == (7,)


def test_demo_generated_loss_goes_down(capsys):
    lines = []
    res = demo.run(["--device", "cpu", "--steps", "60", "--batch-size", "32", "--episodes", "8", "--seed", "0",
                    "--no-progress"], out=lines.append)
    text = "\n".join(lines)
    assert "samples/s" in text and "loader alone" in text and "loss: first" in text
    assert res["steps"] == 60 and res["device"] == "cpu"
    assert res["loader_samples_per_s"] > 0 and res["step_samples_per_s"] > 0
    assert np.isfinite(res["losses"]).all() and len(res["losses"]) == 60
    assert math.isfinite(res["loss_last"]) and res["loss_last"] < 0.8 * res["loss_first"]


def test_demo_cli_entry(capsys):
    from robocache.__main__ import main

    assert main(["demo", "--device", "cpu", "--steps", "3", "--batch-size", "4", "--episodes", "2",
                 "--no-progress"]) == 0
    assert "samples/s" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*none of its files exist")
def test_demo_lerobot_groot(DATA):
    from robocache.readers import available_backends

    path = DATA / "groot_picknplace"
    if not path.is_dir():
        pytest.skip(f"{path} is not present")
    argv = ["--lerobot", str(path), "--device", "cpu", "--steps", "20", "--batch-size", "16", "--no-progress"]
    if not available_backends():
        argv.append("--no-video")
    lines = []
    res = demo.run(argv, out=lines.append)
    text = "\n".join(lines)
    assert "observation.state x4" in text and "action action x16" in text
    assert ("observation.images.ego_view" in text) == bool(available_backends())
    assert res["source"] == str(path)
    assert np.isfinite(res["losses"]).all() and res["step_samples_per_s"] > 0



def test_demo_rosbag_px4(DATA):
    pytest.importorskip("rosbags")
    path = DATA / "rosbags" / "px4_flight_2025-12-03"
    lines = []
    nan = r"'/fmu/out/vehicle_local_position': 2657 of 2657 samples hold NaN or inf"  # the bag's own, said at load
    with pytest.warns(UserWarning, match=nan):
        res = demo.run(["--rosbag", str(path), "--action", "/controller/out/servo_positions.position",
                        "--state", "/fmu/out/vehicle_attitude", "/fmu/out/vehicle_angular_velocity",
                        "--device", "cpu", "--steps", "8", "--batch-size", "16", "--no-progress"], out=lines.append)
    assert res["source"] == str(path) and len(res["losses"]) == 8 and np.isfinite(res["losses"]).all()
    assert any("/fmu/out/vehicle_attitude" in line for line in lines)
    with pytest.warns(UserWarning, match=nan), pytest.raises(ValueError, match="no stream '/nope'"):
        demo.run(["--rosbag", str(path), "--action", "/nope", "--device", "cpu", "--steps", "2"], out=lines.append)


# --------------------------------------------------------------------------------------------
# the demo task written as a LeRobot v3.0 dataset (what the README's blocks train on)

EPISODE_META = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                "dataset_to_index", "videos/observation.images.top/chunk_index",
                "videos/observation.images.top/file_index", "videos/observation.images.top/from_timestamp",
                "videos/observation.images.top/to_timestamp", "meta/episodes/chunk_index", "meta/episodes/file_index"]


@pytest.fixture(scope="module")
def demo_lerobot(tmp_path_factory):
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    return demo.write_lerobot(tmp_path_factory.mktemp("demo") / "set", num_episodes=4, seed=3)


def test_from_lerobot_finds_a_repo_id_where_lerobot_downloaded_it(demo_lerobot, tmp_path, monkeypatch):
    """``from_lerobot("owner/name")`` reads LeRobot's downloaded copy, in the folder LeRobot's own
    constants name ($HF_LEROBOT_HOME, else $HF_HOME/lerobot, else $XDG_CACHE_HOME/huggingface/lerobot);
    a local folder of that name comes first; a set in neither is an error giving the download command."""
    import shutil

    import robocache
    from robocache.readers import ReaderError, lerobot_home, lerobot_root
    for var in ("HF_LEROBOT_HOME", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert lerobot_home() == tmp_path / "user" / ".cache" / "huggingface" / "lerobot"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert lerobot_home() == tmp_path / "xdg" / "huggingface" / "lerobot"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert lerobot_home() == tmp_path / "hf" / "lerobot"
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lerobot-home"))
    assert lerobot_home() == tmp_path / "lerobot-home"

    cached = tmp_path / "lerobot-home" / "someone" / "demo_set"
    shutil.copytree(demo_lerobot, cached)
    monkeypatch.chdir(tmp_path)
    assert lerobot_root("someone/demo_set") == cached
    by_id = robocache.Dataset.from_lerobot("someone/demo_set", load_video=False, device="cpu")
    by_path = robocache.Dataset.from_lerobot(demo_lerobot, load_video=False, device="cpu")
    assert by_id.episode_index.tolist() == by_path.episode_index.tolist() == [0, 1, 2, 3]
    assert np.array_equal(by_id.streams["action"].values, by_path.streams["action"].values)

    from robocache.doctor import diagnose
    report = diagnose("someone/demo_set")                    # `python -m robocache doctor owner/name` too
    assert report.format == "lerobot" and report.source == str(cached)

    local = tmp_path / "someone" / "demo_set"          # a folder of that name here is read first
    shutil.copytree(demo_lerobot, local)
    assert lerobot_root("someone/demo_set") == Path("someone/demo_set")
    with pytest.raises(ReaderError, match=r"someone/absent: no such dataset folder, nor LeRobot's downloaded copy "
                       r".*lerobot-home/someone/absent.*`hf download someone/absent --repo-type dataset"):
        robocache.Dataset.from_lerobot("someone/absent", load_video=False, device="cpu")
    for not_an_id in ("./someone/absent", "a/b/c", "/abs/path"):
        with pytest.raises(ReaderError, match=r": no such dataset folder$"):
            lerobot_root(not_an_id)


def test_write_lerobot_layout_is_lerobots_v30(demo_lerobot, DATA):
    import json

    import pyarrow.parquet as pq

    root = demo_lerobot
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 4 and info["fps"] == 15
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert info["features"]["observation.images.top"]["dtype"] == "video"
    for f in ("meta/stats.json", "meta/tasks.parquet", "data/chunk-000/file-000.parquet",
              "videos/observation.images.top/chunk-000/file-000.mp4"):
        assert (root / f).is_file(), f
    meta = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    assert [c for c in meta.column_names if not c.startswith("stats/")] == EPISODE_META
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert data.column_names == ["observation.state", "action", "timestamp", "frame_index", "episode_index",
                                 "index", "task_index"]
    assert info["total_frames"] == data.num_rows == sum(meta.column("length").to_pylist())
    # the real v3.0 set LeRobot 0.4 wrote: the same columns, schema types and info.json keys
    real = DATA / "cr5_v30"
    if real.is_dir():
        real_meta = pq.read_table(real / "meta/episodes/chunk-000/file-000.parquet")
        assert [c for c in real_meta.column_names if not c.startswith("stats/")] == EPISODE_META
        assert {c: str(meta.schema.field(c).type) for c in EPISODE_META} == \
               {c: str(real_meta.schema.field(c).type) for c in EPISODE_META}
        real_data = pq.read_table(real / "data/chunk-000/file-000.parquet")
        assert [str(data.schema.field(c).type).split("[")[0] for c in data.column_names] == \
               [str(real_data.schema.field(c).type).split("[")[0] for c in real_data.column_names]
        assert pq.read_table(root / "meta/tasks.parquet").schema.names == \
               pq.read_table(real / "meta/tasks.parquet").schema.names
        assert set(info) == set(json.loads((real / "meta/info.json").read_text()))


def test_write_lerobot_loads_episode_by_episode(demo_lerobot):
    """from_lerobot reads it back: rows per episode, timestamps frame_index / fps, tasks, and each
    episode's frames are the mp4's frames of its [from_timestamp, to_timestamp) span."""
    import av
    import pyarrow.parquet as pq

    import robocache

    ds = robocache.Dataset.from_lerobot(demo_lerobot, device="cpu")
    meta = pq.read_table(demo_lerobot / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    data = pq.read_table(demo_lerobot / "data/chunk-000/file-000.parquet").to_pydict()
    with av.open(str(demo_lerobot / "videos/observation.images.top/chunk-000/file-000.mp4")) as c:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    assert len(ds) == 4 and frames.shape[0] == len(data["index"])
    for e, m in enumerate(meta):
        a, b = m["dataset_from_index"], m["dataset_to_index"]
        v, t = ds.streams["observation.state"].episode(e)
        np.testing.assert_array_equal(v.numpy(), np.asarray(data["observation.state"][a:b], np.float32))
        np.testing.assert_allclose(t.numpy(), np.arange(b - a) / 15, atol=1e-6)
        img, _ = ds.streams["observation.images.top"].episode(e)
        assert img.shape == (b - a, 96, 128, 3)
        # the same frames: RGB from the loader's YUV against PyAV's conversion, within rounding
        diff = np.abs(img.numpy().astype(np.int16) - frames[a:b].astype(np.int16))
        assert diff.mean() < 2.0, (e, diff.mean())
        assert ds.episodes[e].tasks == m["tasks"]
    # the episodes are distinct where they meet (a wrong span would repeat or shift frames)
    assert np.abs(frames[meta[1]["dataset_from_index"]].astype(int)
                  - frames[meta[1]["dataset_from_index"] - 1].astype(int)).mean() > 1.0


def test_write_lerobot_refuses_bad_arguments(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    with pytest.raises(ValueError, match="num_episodes must be an int >= 1, got 0"):
        demo.write_lerobot(tmp_path / "a", 0)
    with pytest.raises(ValueError, match=r"fps must be an int in 1..240 .*got 12.5"):
        demo.write_lerobot(tmp_path / "a", fps=12.5)
    with pytest.raises(ValueError, match=r"image_size must be \(height, width\), even"):
        demo.write_lerobot(tmp_path / "a", image_size=(15, 32))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(FileExistsError, match="exists, is not empty and is not a demo set"):
        demo.write_lerobot(tmp_path / "full", 1)
    assert (tmp_path / "full" / "x").read_text() == "keep me"


def _files(root):
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def test_write_lerobot_overwrite_keeps_what_comes_out_the_same(tmp_path, cache_env):
    """A notebook cell that writes the demo set and loads it, run twice: the second write leaves the
    unchanged files untouched (mtimes too), so the second load maps the first one's cached frames
    instead of finding the entry stale and decoding again. Another seed replaces what differs, and the
    folder then holds exactly a fresh write's files (a stray file and folder removed)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    import warnings

    import robocache
    from robocache.frames.cache import CacheWarning
    root = tmp_path / "demo"
    demo.write_lerobot(root, 2)
    first = robocache.Dataset.from_lerobot(root, device="cpu", show_progress=False)
    before = {k: p.stat().st_mtime_ns for k, p in _files(root).items()}
    assert demo.write_lerobot(root, 2, overwrite=True) == root
    assert {k: p.stat().st_mtime_ns for k, p in _files(root).items()} == before
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)        # a stale entry warns: none here
        again = robocache.Dataset.from_lerobot(root, device="cpu", show_progress=False)
    cam = "observation.images.top"
    assert np.array_equal(again.streams[cam].frames.data, first.streams[cam].frames.data)

    (root / "stray.txt").write_text("x")
    (root / "old" / "deep").mkdir(parents=True)
    (root / "old" / "deep" / "f.bin").write_bytes(b"1")
    demo.write_lerobot(root, 3, seed=1, overwrite=True)
    demo.write_lerobot(tmp_path / "fresh", 3, seed=1)
    got, want = _files(root), _files(tmp_path / "fresh")
    assert sorted(got) == sorted(want) and not (root / "old").exists()
    assert all(got[k].read_bytes() == want[k].read_bytes() for k in want)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".demo.writing")]   # no temporary left
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is not a folder"):
        demo.write_lerobot(tmp_path / "file", 1, overwrite=True)


def test_demo_cli_writes_then_trains_on_it(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    from robocache.__main__ import main

    path = tmp_path / "demo_lerobot"
    assert main(["demo", "--write-lerobot", str(path), "--episodes", "2"]) == 0
    assert f"python -m robocache demo --lerobot {path}" in capsys.readouterr().out
    assert main(["demo", "--lerobot", str(path), "--device", "cpu", "--steps", "2", "--batch-size", "4",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 episodes" in out and "observation.images.top" in out
    before = {p: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()}
    assert main(["demo", "--write-lerobot", str(path), "--episodes", "2"]) == 0     # the README's command, rerun
    assert {p: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()} == before   # same bytes: untouched
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("a user's file")
    with pytest.raises(SystemExit) as e:          # no silent overwrite of a folder the demo did not write
        main(["demo", "--write-lerobot", str(foreign)])
    assert e.value.code == 2 and "--overwrite" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "a user's file"


def test_demo_missing_files_is_a_message_not_a_traceback(demo_lerobot, tmp_path, capsys):
    """A set whose files are missing: the reader's message with this command's options, exit 2."""
    import shutil

    from robocache.__main__ import main

    broken = tmp_path / "broken"
    shutil.copytree(demo_lerobot, broken)
    (broken / "data/chunk-000/file-000.parquet").unlink()
    assert main(["demo", "--lerobot", str(broken), "--device", "cpu", "--steps", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "file-000.parquet: parquet file not found" in err
    assert "--missing-files skip" in err and "--episodes" in err and "Traceback" not in err


@pytest.mark.filterwarnings("ignore:.*skipping 38 of 52 episodes")
def test_demo_lerobot_options_the_message_names(DATA, capsys):
    """The CR5 set lists 52 episodes and ships 14: --episodes and --missing-files skip load it."""
    path = DATA / "cr5_flashdrive_av1"
    if not path.is_dir():
        pytest.skip(f"{path} is not present")
    from robocache.__main__ import main

    assert main(["demo", "--lerobot", str(path), "--device", "cpu", "--steps", "2", "--no-progress",
                 "--no-video"]) == 2
    assert "--missing-files skip" in capsys.readouterr().err
    lines = []
    res = demo.run(["--lerobot", str(path), "--episodes", "0,1", "3", "--device", "cpu", "--steps", "2",
                    "--batch-size", "4", "--no-progress", "--no-video"], out=lines.append)
    assert "3 episodes" in lines[0] and len(res["losses"]) == 2
    lines = []
    demo.run(["--lerobot", str(path), "--missing-files", "skip", "--device", "cpu", "--steps", "2",
              "--batch-size", "4", "--no-progress", "--no-video"], out=lines.append)
    assert "14 episodes" in lines[0]


def test_demo_episodes_argument_errors(capsys):
    from robocache.__main__ import main

    for argv, msg in ((["--episodes", "3", "4"], "a count of generated episodes, got [3, 4]"),
                      (["--episodes", "0"], "a count >= 1, got 0"),
                      (["--episodes", "x"], "expected episode numbers like 0 1 2 or 0,1,2, got 'x'")):
        with pytest.raises(SystemExit) as e:
            main(["demo", *argv])
        assert e.value.code == 2 and msg in capsys.readouterr().err, argv


def test_demo_trains_on_zarr_and_robomimic(tmp_path):
    """demo --zarr (a diffusion-policy ReplayBuffer) and --robomimic (an HDF5 file), written here, with --lr:
    each loads through its reader and trains a few steps on the CPU."""
    zarr = pytest.importorskip("zarr")
    h5py = pytest.importorskip("h5py")
    import json
    rng = np.random.default_rng(0)
    store = tmp_path / "replay.zarr"
    v3 = hasattr(zarr, "create_array")                # zarr 3 writes v2 stores when asked, by another name
    g = zarr.open_group(str(store), mode="w", **({"zarr_format": 2} if v3 else {}))
    put = g.create_array if v3 else g.create_dataset
    put("data/state", data=rng.standard_normal((130, 5)).astype(np.float32))
    put("data/action", data=rng.standard_normal((130, 2)).astype(np.float32))
    put("meta/episode_ends", data=np.array([40, 90, 130], np.int64))
    path = tmp_path / "demo.hdf5"
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "env_kwargs": {"control_freq": 20}})
        for i, n in enumerate((30, 40)):
            e = data.create_group(f"demo_{i}")
            e.attrs["num_samples"] = n
            e.create_dataset("obs/robot0_eef_pos", data=rng.standard_normal((n, 3)))
            e.create_dataset("actions", data=rng.standard_normal((n, 7)).astype(np.float32))
    common = ["--device", "cpu", "--steps", "3", "--batch-size", "4", "--no-progress", "--lr", "0.01"]
    for flag, src, episodes in (("--zarr", store, 3), ("--robomimic", path, 2)):
        lines = []
        r = demo.run([flag, str(src), *common], out=lines.append)
        assert r["steps"] == 3 and r["source"] == str(src) and np.isfinite(r["losses"]).all(), (flag, r)
        assert f"{episodes} episodes" in lines[0], lines[0]


def test_lerobot_item_against_the_files(demo_lerobot):
    """robocache.lerobot_item on the demo set (no LeRobot needed) against the files read independently: the
    parquet row's state and bookkeeping, the action window of delta_timestamps with LeRobot's padding past the
    episode's end, and the camera frame as PyAV decodes it (float32 CHW in [0, 1])."""
    import av
    import pyarrow.parquet as pq
    import torch

    import robocache
    ds = robocache.Dataset.from_lerobot(demo_lerobot, device="cpu", show_progress=False)
    rows = pq.read_table(demo_lerobot / "data/chunk-000/file-000.parquet").to_pydict()
    with av.open(str(demo_lerobot / "videos/observation.images.top/chunk-000/file-000.mp4")) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    dt = {"action": [0.0, 1 / 15, 2 / 15]}
    last = max(i for i, e in enumerate(rows["episode_index"]) if e == 0)      # episode 0's last row
    for i in (0, 5, last - 1, last, len(rows["index"]) - 1):
        item = robocache.lerobot_item(ds, i, delta_timestamps=dt)
        assert int(item["index"]) == rows["index"][i] and int(item["episode_index"]) == rows["episode_index"][i]
        assert int(item["frame_index"]) == rows["frame_index"][i] and item["task"] in ds.tasks
        assert torch.equal(item["observation.state"], torch.tensor(rows["observation.state"][i]))
        ep = rows["episode_index"][i]
        end = max(j for j, e in enumerate(rows["episode_index"]) if e == ep)
        want = [rows["action"][min(i + k, end)] for k in range(3)]            # the last row repeated past the end
        assert torch.equal(item["action"], torch.tensor(want))
        assert item["action_is_pad"].tolist() == [i + k > end for k in range(3)]
        img = torch.from_numpy(frames[i]).permute(2, 0, 1).float() / 255
        assert item["observation.images.top"].shape == img.shape
        assert torch.equal(item["observation.images.top"], img)


def test_from_lerobot_modality_subkeys(demo_lerobot, tmp_path):
    """from_lerobot(modality_subkeys=): a GR00T meta/modality.json on the demo set (arm = joints 0-6 of the
    7-dim state, gripper = 6-7) gives sliced streams sharing the parent's times, with the parent's names and
    statistics sliced; modality_subkeys=False leaves only the parent streams."""
    import json
    import shutil

    import robocache
    root = tmp_path / "groot_style"
    shutil.copytree(demo_lerobot, root)
    (root / "meta/modality.json").write_text(json.dumps({
        "state": {"arm": {"start": 0, "end": 6}, "gripper": {"start": 6, "end": 7}},
        "action": {"arm": {"start": 0, "end": 6}}, "video": {"top": {"original_key": "observation.images.top"}}}))
    ds = robocache.Dataset.from_lerobot(root, device="cpu", load_video=False, show_progress=False)
    state = ds.streams["observation.state"]
    for name, parent, sl in (("state.arm", state, slice(0, 6)), ("state.gripper", state, slice(6, 7)),
                             ("action.arm", ds.streams["action"], slice(0, 6))):
        s = ds.streams[name]
        assert np.array_equal(s.values.numpy(), parent.values.numpy()[:, sl]), name
        assert np.array_equal(s.times.numpy(), parent.times.numpy()) and s.rate == parent.rate
        assert list(s.feature_names) == list(parent.feature_names)[sl]
        for stat in ("min", "max", "mean"):
            assert np.allclose(np.asarray(s.stats[stat]), np.asarray(parent.stats[stat])[sl]), (name, stat)
    plain = robocache.Dataset.from_lerobot(root, device="cpu", load_video=False, modality_subkeys=False,
                                           show_progress=False)
    assert not [k for k in plain.streams if k.startswith(("state.", "action."))]
