"""The frame cache reuses what it holds across episode subsets (issue 33, item 7): loading episodes A and
then B overlapping A decodes only B's files that A does not hold, for whole files (LeRobot v2.x) and
spans of shared files (v3.0), fixed-size rows (tiers host, disk, device) and JPEG spans (compressed);
the frames equal a fresh decode's bit for bit."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames import compress as rc_compress  # noqa: E402
from robocache.frames import ingest as rc_ingest  # noqa: E402
from robocache.frames.compress import ingest_compressed  # noqa: E402
from robocache.frames.ingest import ingest_videos  # noqa: E402
from robocache.video import VideoSource  # noqa: E402
from noise_clips import write_noise_h264  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")


def write_clip(path, n, seed, h=32, w=48):
    return write_noise_h264(str(path), n, np.random.default_rng(seed), height=h, width=w)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Four small H.264 files (episodes), 5-8 frames of 32x48 noise each."""
    root = tmp_path_factory.mktemp("reuse-clips")
    return [write_clip(root / f"episode_{i}.mp4", n, seed=i) for i, n in enumerate((5, 8, 6, 7))]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One mp4 of 24 frames at 10 fps holding four episodes as spans (LeRobot v3.0)."""
    path = write_clip(tmp_path_factory.mktemp("reuse-v30") / "file-000.mp4", 24, seed=9)
    return [VideoSource(path, 0, a / 10, b / 10) for a, b in ((0, 5), (5, 11), (11, 18), (18, 24))]


@pytest.fixture
def decoded(monkeypatch):
    """The files each decode job opened, in order (the decoder of ingest and of the compressed tier)."""
    seen: list[str] = []
    for module in (rc_ingest, rc_compress):
        real = module.decode_job

        def counting(backend, job, *a, real=real, **k):
            seen.append(Path(job.path).name)
            return real(backend, job, *a, **k)

        monkeypatch.setattr(module, "decode_job", counting)
    return seen


@pytest.fixture
def fresh(decoded):
    """A decode without the cache (its decodes not counted)."""
    def run(sources):
        n = len(decoded)
        out = ingest_videos(sources, tier="host", cache=False, workers=2)
        del decoded[n:]
        return out
    return run


def same(a, b):
    assert a.data.shape == b.data.shape and torch.equal(a.data.cpu(), b.data.cpu())
    assert np.array_equal(a.counts, b.counts)
    assert all(np.array_equal(x, y) for x, y in zip(a.times, b.times))


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_an_overlapping_subset_decodes_only_what_no_entry_holds(clips, decoded, fresh, tier):
    a = ingest_videos(clips[:2], tier=tier, workers=2)
    assert sorted(decoded) == ["episode_0.mp4", "episode_1.mp4"] and a.reused == 0
    decoded.clear()

    b = ingest_videos([clips[1], clips[0], clips[2]], tier=tier, workers=2)   # another order, one new file
    assert decoded == ["episode_2.mp4"] and b.reused == 2 and not b.from_cache
    same(b, fresh([clips[1], clips[0], clips[2]]))
    decoded.clear()

    c = ingest_videos([clips[2]], tier=tier, workers=2)                     # held by b's entry alone
    assert decoded == [] and c.reused == 1 and c.from_cache
    same(c, fresh([clips[2]]))

    again = ingest_videos([clips[1], clips[0], clips[2]], tier=tier, workers=2)   # its own entry now
    assert decoded == [] and again.from_cache and again.reused == 0
    same(again, b)
    assert len(rc_cache.list_entries()) == 3


def test_a_subset_of_spans_of_a_shared_file(shared, decoded, fresh):
    a = ingest_videos(shared[:3], tier="host", workers=1)
    assert decoded == ["file-000.mp4"]
    decoded.clear()
    b = ingest_videos([shared[2], shared[0]], tier="host", workers=1)
    assert decoded == [] and b.reused == 2
    same(b, fresh([shared[2], shared[0]]))
    c = ingest_videos(shared[2:], tier="disk", workers=1)
    assert decoded == ["file-000.mp4"] and c.reused == 1          # the fourth span only
    same(c, fresh(shared[2:]))
    del a


def test_a_changed_file_is_decoded_again(clips, tmp_path, decoded, fresh):
    mine = [tmp_path / Path(p).name for p in clips[:2]]
    for src, dst in zip(clips, mine):
        dst.write_bytes(Path(src).read_bytes())
    mine = [str(p) for p in mine]
    ingest_videos(mine, tier="host", workers=2)
    decoded.clear()
    st = Path(mine[0]).stat()
    import os
    os.utime(mine[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # touched: not the same frames
    b = ingest_videos(mine[::-1], tier="host", workers=2)
    assert decoded == [Path(mine[0]).name] and b.reused == 1   # the unchanged file's rows still serve
    same(b, fresh(mine[::-1]))


def test_other_decode_options_are_not_reused(clips, decoded):
    ingest_videos(clips[:2], tier="host", workers=2)
    decoded.clear()
    b = ingest_videos(clips[:1], tier="host", resize=(16, 24), workers=2)
    assert decoded == ["episode_0.mp4"] and b.reused == 0


def test_a_damaged_donor_is_not_copied(clips, decoded, fresh):
    a = ingest_videos(clips[:2], tier="host", workers=2)
    data = Path(a.cache_path)
    del a
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF                                       # the first frame: sampled by the checksum
    data.write_bytes(bytes(raw))
    decoded.clear()
    b = ingest_videos(clips[:1], tier="host", workers=2)
    assert decoded == ["episode_0.mp4"] and b.reused == 0
    same(b, fresh(clips[:1]))


def test_the_compressed_tier_reuses_jpeg_spans(clips, decoded):
    a = ingest_compressed(clips[:2], qscale=3, workers=2)
    assert sorted(decoded) == ["episode_0.mp4", "episode_1.mp4"]
    decoded.clear()
    b = ingest_compressed([clips[1], clips[2]], qscale=3, workers=2)
    assert decoded == ["episode_2.mp4"]
    ref = ingest_compressed([clips[1], clips[2]], qscale=3, workers=2, cache=False)
    del decoded[1:]
    assert np.array_equal(b.offsets, ref.offsets) and np.array_equal(np.asarray(b.data), np.asarray(ref.data))
    assert all(np.array_equal(x, y) for x, y in zip(b.times, ref.times))
    first = a.offsets[a.counts[0]]          # episode_1's bitstreams, copied byte for byte
    assert np.array_equal(np.asarray(b.data)[:b.offsets[b.counts[0]]], np.asarray(a.data)[first:])
    decoded.clear()
    other_quality = ingest_compressed(clips[:1], qscale=5, workers=2)
    assert decoded == ["episode_0.mp4"] and other_quality.qscale == 5


def test_a_donor_being_built_is_not_waited_on(clips, decoded):
    a = ingest_videos(clips[:2], tier="host", workers=2)
    donor = rc_cache.Entry(Path(a.cache_path).name.split(".")[0], Path(a.cache_path).parent)
    del a
    with donor.lock():                           # another process building or checking it
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            b = ingest_videos(clips[:1], tier="host", workers=2)
    assert b.reused == 0 and decoded[-1:] == ["episode_0.mp4"]


def test_a_subsets_plan_takes_its_layout_from_the_entries(shared, decoded, monkeypatch):
    """load_videos of a subset every source of which other entries hold: no file probed nor decoded, and
    the plan counts the entry it will write (not cached)."""
    from robocache.frames import videos as rc_videos

    cpu = torch.device("cpu")
    first = rc_videos.load_videos({"cam": shared[:3]}, device=cpu, frames="host")
    monkeypatch.setattr(rc_videos, "probe_sources", lambda *a, **k: pytest.fail("probed the files again"))
    needs = []
    real_plan = rc_videos.plan
    monkeypatch.setattr(rc_videos, "plan", lambda n, *a, **k: needs.extend(n) or real_plan(n, *a, **k))
    decoded.clear()
    got = rc_videos.load_videos({"cam": shared[1:3]}, device=cpu, frames="host")
    assert decoded == [] and [n.cached for n in needs] == [False]
    store, times = got["cam"]
    ref_store, ref_times = first["cam"]
    n0 = len(ref_times[0])
    assert torch.equal(store.data, ref_store.data[n0:])
    assert all(np.array_equal(a, b) for a, b in zip(times, ref_times[1:]))


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_a_readers_load_copies_while_the_rest_decode(clips, decoded, fresh, tier):
    """load_videos knows the counts before decoding (its plan), so held rows are copied on a thread while
    the other files decode: the same frames."""
    from robocache.frames.videos import load_videos

    cpu = torch.device("cpu")
    load_videos({"cam": clips[:2]}, device=cpu, frames=tier, workers=2)
    decoded.clear()
    got = load_videos({"cam": [clips[3], clips[1], clips[0], clips[2]]}, device=cpu, frames=tier, workers=2)
    assert sorted(decoded) == ["episode_2.mp4", "episode_3.mp4"]
    store, times = got["cam"]
    ref = fresh([clips[3], clips[1], clips[0], clips[2]])
    assert torch.equal(store.data, ref.data) and all(np.array_equal(a, b) for a, b in zip(times, ref.times))
