"""Tier "device" of robocache.frames.ingest (cuda marker: skipped without a GPU).

The cache-load tests need no PyAV (the GPU machines have none): the entry is written here from
random frames, its "sources" are plain files (the cache only stats them). The decode test needs PyAV
and skips without it.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import mapped_file  # noqa: E402
from robocache.frames import buffers as rc_buffers  # noqa: E402
from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames import ingest as rc_ingest  # noqa: E402
from robocache.frames import processes as rc_processes  # noqa: E402
from robocache.frames.ingest import FrameSpec, ingest_videos  # noqa: E402
from noise_clips import write_noise_h264  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cache_env")]


def write_entry(tmp_path, rng, counts, spec, desc="cam"):
    """Source files (any bytes) and a valid cache entry of random frames for them."""
    paths = []
    for i in range(len(counts)):
        p = tmp_path / f"ep{i}.mp4"
        p.write_bytes(rng.bytes(100))
        paths.append(str(p))
    n = int(sum(counts))
    frames = rng.integers(0, 256, (n, spec.frame_bytes), dtype=np.uint8)
    times = np.concatenate([np.arange(c) / 10.0 for c in counts])
    options = {"resize": None, "backend": "pyav"}
    entry = rc_cache.open_entry(paths, options, desc)
    w = rc_cache.EntryWriter(entry.root, entry.name, frames.nbytes)
    w.write(0, frames)
    sources = rc_cache.stat_sources(paths)
    w.commit(key=rc_cache.entry_key(sources, options), spec=spec.to_dict(), counts=counts, times=times,
             sources=sources, options=options)
    return paths, frames, times


@pytest.mark.parametrize("chunk_frames", [1000, 3])  # one chunk; many, through both pinned buffers
def test_device_tier_from_cache(tmp_path, rng, monkeypatch, chunk_frames):
    spec = FrameSpec.make("yuv420", 45, 62)  # odd sizes: chroma rounds up
    counts = np.array([5, 7, 3], np.int64)
    paths, frames, times = write_entry(tmp_path, rng, counts, spec)
    monkeypatch.setattr(rc_buffers, "UPLOAD_CHUNK", chunk_frames * spec.frame_bytes)
    res = ingest_videos(paths, tier="device", backend="pyav", desc="cam", spec=spec, counts=counts)
    assert res.from_cache and res.data.is_cuda and res.data.dtype == torch.uint8
    assert tuple(res.data.shape) == (15, spec.frame_bytes)
    np.testing.assert_array_equal(res.data.cpu().numpy(), frames)
    np.testing.assert_array_equal(np.concatenate(res.times), times)

    dev1 = f"cuda:{torch.cuda.device_count() - 1}"
    other = ingest_videos(paths, tier="device", device=dev1, backend="pyav", desc="cam", spec=spec, counts=counts)
    assert str(other.data.device) == dev1 and torch.equal(other.data.cpu(), res.data.cpu())


@pytest.mark.parametrize("in_place", [True, False], ids=["file-pages", "refused"])
def test_host_tier_from_the_cache_is_pinned(tmp_path, rng, monkeypatch, in_place):
    """From the cache the host tier is the cache file's own pages, pinned in place (read-only);
    where the driver refuses that, fresh memory read from the file in parallel and then pinned.
    Either way the GPU reads it over the bus (a gather) and gets the frames, and no CUDA error is
    left behind for a later launch check."""
    import robocache._C as C
    spec = FrameSpec.make("yuv420", 32, 48)
    counts = np.array([4, 6], np.int64)
    paths, frames, _ = write_entry(tmp_path, rng, counts, spec)
    if not in_place:
        import robocache._C as C
        real = C._host_register

        def refuse_read_only(ptr, nbytes, read_only):
            if read_only:
                raise C.CudaError("cudaHostRegister failed: injected refusal")
            return real(ptr, nbytes, read_only)

        monkeypatch.setattr(C, "_host_register", refuse_read_only)
    res = ingest_videos(paths, tier="host", backend="pyav", desc="cam", spec=spec, counts=counts)
    assert res.from_cache and res.data.is_pinned() and not res.data.is_cuda
    assert (mapped_file(res.data.data_ptr()) == res.cache_path) == in_place
    np.testing.assert_array_equal(res.data.numpy(), frames)
    ids = torch.tensor([9, 0, 4, -1], device="cuda")
    out = torch.full((4, 32, 48, 3), 7, dtype=torch.uint8, device="cuda")
    C.gather_frames(res.data, ids, out, format="yuv420", height=32, width=48, channels=3)
    ref = torch.empty_like(out)
    C.gather_frames(torch.from_numpy(frames).cuda(), ids, ref, format="yuv420", height=32, width=48, channels=3)
    assert torch.equal(out, ref) and not out[3].any()
    torch.cuda.synchronize()                                # no error left for a later launch check


def encode_clips(tmp_path, counts):
    """H.264 clips of random 64x96 frames, `counts[i]` frames in clip i (needs PyAV)."""
    av = pytest.importorskip("av")
    paths = []
    for i, n in enumerate(counts):
        p = str(tmp_path / f"v{i}.mp4")
        write_noise_h264(p, n, np.random.default_rng(i), height=64, width=96)
        paths.append(p)
    return paths


def test_device_tier_decodes_like_host(tmp_path, monkeypatch):
    paths = encode_clips(tmp_path, (9, 14))
    host = ingest_videos(paths, tier="host", cache=False)
    monkeypatch.setattr(rc_ingest, "STAGE_BYTES", 4 * host.spec.frame_bytes)  # the ring wraps
    dev = ingest_videos(paths, tier="device")
    assert not dev.from_cache and dev.data.is_cuda
    assert torch.equal(dev.data.cpu(), host.data)
    again = ingest_videos(paths, tier="device")
    assert again.from_cache and torch.equal(again.data.cpu(), host.data)


@pytest.mark.parametrize("tier", ["device", "host"])
def test_processes_decode_like_threads(tmp_path, monkeypatch, tier):
    """Decoded in processes, the device tier uploads each file's rows as the file is complete and
    the host tier is the entry file's pages pinned in place: the bytes the threads decode."""
    paths = encode_clips(tmp_path, (9, 14, 5))
    ref = ingest_videos(paths, tier="host", cache=False)
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setattr(rc_buffers, "UPLOAD_CHUNK", 4 * ref.spec.frame_bytes)  # both pinned buffers, many times
    res = ingest_videos(paths, tier=tier, workers=3)
    assert not res.from_cache and res.data.is_cuda == (tier == "device")
    assert torch.equal(res.data.cpu(), ref.data)
    assert all(np.array_equal(a, b) for a, b in zip(res.times, ref.times))
    if tier == "host":
        assert res.data.is_pinned() and mapped_file(res.data.data_ptr()) == res.cache_path
        out = torch.empty((2, 64, 96, 3), dtype=torch.uint8, device="cuda")
        import robocache._C as C
        C.gather_frames(res.data, torch.tensor([20, 3], device="cuda"), out, format="yuv420", height=64, width=96,
                        channels=3)
        ref_out = torch.empty_like(out)
        C.gather_frames(ref.data.cuda(), torch.tensor([20, 3], device="cuda"), ref_out, format="yuv420", height=64,
                        width=96, channels=3)
        assert torch.equal(out, ref_out)
    nocache = ingest_videos(paths, tier=tier, workers=3, cache=False)
    assert torch.equal(nocache.data.cpu(), ref.data) and nocache.cache_path is None
