"""The lossless frame tier's coder, measured on real frames: bytes per frame and CPU rates.

Frames: the CR5 arm's AV1 episodes (480x640; ROBOCACHE_DATA or ../shared/data), decoded with PyAV as the
host tier stores them (I420 rows), at full size and resized to 180x320 as issue 32 measured. Per size:

  raw I420            the host tier's bytes
  deflate             zlib level 6 of each frame's I420 bytes (what a generic codec gives)
  row-delta + H0      each pixel minus the one above (left on a band's first row), order-0 entropy of
                      the residuals per plane and frame: a bound an entropy coder approaches
  MED + H0            LOCO-I's median predictor (left, up, up-left), order-0 entropy per plane
  MED + H0/chunk      the same with one table per chunk (a band of rows), each table's bytes not counted
  robocache           the tier's coder (robocache._C.encode_lossless: MED + interleaved rANS, 12-bit
                      tables per plane, bands of `band` rows): real bytes, tables and states included
  encode / decode     its CPU rates, frames/s on one thread (per second of this process's CPU time, which
                      a shared machine does not distort) and on every core (wall time)

The estimates (H0) are per band of --band rows, the predictor restarting at each band's first row, as
the coder does. Every coded frame is decoded and compared with its source before anything is timed.

--gpu (a CUDA GPU; the 180x320 frames): the GPU decode (decode_lossless from pinned host memory: the
copy over the bus, then a warp per chunk) of 3 x B sampled frames per call, checked against the frames
first, timed with CUDA events (median of 30 calls, ids rotated); then the loader on a DROID-shaped set
(bench_scale.py's: 3 cameras, 300-step episodes, --set-frames camera frames laid out from the coded real
frames) in the lossless tier, samples/s at each --batches with a global shuffle, and the host RAM held.

    python benchmarks/bench_lossless.py                  # 300 frames of 3 episodes, both sizes
    python benchmarks/bench_lossless.py --frames 600 --json out.json
    python benchmarks/bench_lossless.py --gpu --set-frames 3060000 --json gpu.json
    python benchmarks/bench_lossless.py --smoke          # generated 48x64 frames, seconds (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_frames import real_rows  # noqa: E402


def planes(row: np.ndarray, h: int, w: int):
    """The Y, U, V planes of one I420 row (views)."""
    ch, cw = (h + 1) // 2, (w + 1) // 2
    return (row[:h * w].reshape(h, w), row[h * w:h * w + ch * cw].reshape(ch, cw),
            row[h * w + ch * cw:].reshape(ch, cw))


def band_residuals(p: np.ndarray, band: int, predictor: str) -> np.ndarray:
    """Residuals (pixel - prediction) mod 256 of a plane, the predictor restarting at each band of rows
    (first row: left neighbour; first pixel: 128; first column: up)."""
    x = p.astype(np.int32)
    pred = np.empty_like(x)
    left = np.concatenate([np.full((x.shape[0], 1), 0, np.int32), x[:, :-1]], 1)
    up = np.concatenate([np.zeros((1, x.shape[1]), np.int32), x[:-1]], 0)
    upleft = np.concatenate([np.zeros((1, x.shape[1]), np.int32), left[:-1]], 0)
    if predictor == "med":
        mx, mn = np.maximum(left, up), np.minimum(left, up)
        pred = np.where(upleft >= mx, mn, np.where(upleft <= mn, mx, left + up - upleft))
    else:                                           # row delta: the pixel above
        pred = up.copy()
    pred[:, 0] = up[:, 0]
    first = np.arange(x.shape[0]) % band == 0       # a band's first row: left only
    pred[first] = left[first]
    pred[first, 0] = 128
    return ((x - pred) & 255).astype(np.uint8)


def h0_bytes(sym: np.ndarray) -> float:
    """n x order-0 entropy of the symbols, in bytes."""
    counts = np.bincount(sym.ravel(), minlength=256).astype(np.float64)
    p = counts[counts > 0] / sym.size
    return float(-(counts[counts > 0] * np.log2(p)).sum() / 8)


def estimates(rows: np.ndarray, h: int, w: int, band: int) -> dict:
    """Mean bytes per frame of each estimate over the rows."""
    out = {"raw I420": float(rows.shape[1]), "deflate": 0.0, "row-delta + H0": 0.0, "MED + H0": 0.0,
           "MED + H0/chunk": 0.0}
    for row in rows:
        out["deflate"] += len(zlib.compress(row.tobytes(), 6))
        for p in planes(row, h, w):
            out["row-delta + H0"] += h0_bytes(band_residuals(p, band, "delta"))
            med = band_residuals(p, band, "med")
            out["MED + H0"] += h0_bytes(med)
            out["MED + H0/chunk"] += sum(h0_bytes(med[a:a + band]) for a in range(0, len(med), band))
    return {k: (v if k == "raw I420" else v / len(rows)) for k, v in out.items()}


def coder(rows: np.ndarray, h: int, w: int, band: int, threads: int) -> dict:
    """The tier's coder: bytes per frame (checked round trip) and CPU rates."""
    from robocache._C import decode_lossless, encode_lossless, lossless_bound, set_num_threads
    n = len(rows)
    cap = lossless_bound(h, w)
    coded = np.empty((n, cap), np.uint8)
    sizes = np.empty(n, np.int64)
    result = {}
    for label, t in (("1 thread", 1), (f"{threads} threads", threads)):
        set_num_threads(t)
        clock = time.process_time if t == 1 else time.perf_counter
        t0 = clock()
        encode_lossless(coded, sizes, rows, height=h, width=w, band=band)
        enc = clock() - t0
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = np.concatenate([coded[i, :sizes[i]] for i in range(n)])
        out = np.full_like(rows, 0xAB)
        decode_lossless(out, data, offsets, np.arange(n, dtype=np.int64), height=h, width=w)
        if not np.array_equal(out, rows):
            raise SystemExit(f"round trip failed at {h}x{w} ({label})")
        best = np.inf
        for _ in range(3):
            t0 = clock()
            decode_lossless(out, data, offsets, np.arange(n, dtype=np.int64), height=h, width=w)
            best = min(best, clock() - t0)
        result[f"encode {label} frames/s"] = n / enc
        result[f"decode {label} frames/s"] = n / best
        result["robocache"] = float(sizes.mean())
    set_num_threads(threads)
    return result


def default_band(h: int, w: int) -> int:
    """encode_lossless's band when none is given: >= 32768 luma pixels a chunk, no more rows than the
    frame's (rounded up to 32)."""
    b = -(-32768 // w)
    return min(-(-b // 32) * 32, -(-h // 32) * 32)


def gpu(rows: np.ndarray, h: int, w: int, batches, set_frames: int) -> dict:
    """The GPU decode's rate and the loader's on a DROID-shaped lossless set (see the module docstring)."""
    import statistics
    import torch
    import bench_scale as scale
    import robocache
    from robocache._C import decode_lossless
    from robocache.frames.lossless import GpuSource, encode_all
    from robocache.frames.store import FrameStore
    dev = torch.device("cuda", 0)
    data, offsets = encode_all(rows, h, w)
    src = GpuSource(data, offsets, dev)
    out = {"gpu": torch.cuda.get_device_name(dev), "decode": {}, "loader": {}}
    for B in batches:
        M = 3 * B
        ids = [torch.randint(0, len(rows), (M,), device=dev) for _ in range(8)]
        planes = torch.empty((M, rows.shape[1]), dtype=torch.uint8, device=dev)
        scratch = torch.empty((M, src.max_bytes), dtype=torch.uint8, device=dev)
        decode_lossless(planes, src.data, src.offsets, ids[0], height=h, width=w, scratch=scratch)
        if not np.array_equal(planes.cpu().numpy(), rows[ids[0].cpu().numpy()]):
            raise SystemExit(f"GPU decode differs from the frames (batch {B})")
        ms = []
        for k in range(30):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            decode_lossless(planes, src.data, src.offsets, ids[k % 8], height=h, width=w, scratch=scratch)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        med = statistics.median(ms)
        out["decode"][B] = {"frames": M, "ms": med, "frames_per_s": M / med * 1e3,
                            "bytes_per_frame": float(np.diff(offsets).mean())}
        print(f"GPU decode of {M} frames: {med:.3f} ms ({M / med * 1e3:.0f} frames/s)", flush=True)
    E = -(-set_frames // (len(scale.CAMS) * scale.EP_LEN))
    stores = {}
    for k, c in enumerate(scale.CAMS):      # one camera at a time: its bytes laid out, then pinned
        d, o = scale.replicate(data, offsets, E, seed=k)
        stores[c] = FrameStore(d, format="lossless", height=h, width=w, channels=3, tier="lossless", device=dev,
                               offsets=o)
        del d
    times = [np.arange(scale.EP_LEN) / scale.FPS] * E
    ds = robocache.Dataset.from_episodes(scale.lowdim(E, np.random.default_rng(0)), device=dev,
                                         frames={c: (st, times) for c, st in stores.items()})
    out["set"] = {"episodes": E, "camera_frames": E * scale.EP_LEN * len(scale.CAMS),
                  "lossless_gb": sum(st.nbytes for st in stores.values()) / 1e9, "host_rss_gb": scale.rss_gb()}
    print(ds, out["set"], flush=True)
    for B in batches:
        loader = robocache.DataLoader(ds, B, shuffle=True, seed=0, windows=scale.windows(), drop_last=True)
        torch.cuda.reset_peak_memory_stats(dev)
        r = scale.rate(lambda: iter(loader), B, 200, 5, dev)
        r["gpu_peak_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
        r["cuda_graph"] = loader.cuda_graph
        out["loader"][B] = r
        print(f"loader batch {B}: {r['samples_per_s']:.0f} samples/s", r, flush=True)
    return out


def nvcomp_compare(rows: np.ndarray, h: int, w: int, batches) -> dict:
    """nvCOMP's batched decoders (its Python API, ``pip install nvidia-nvcomp-cu13``) against the tier's own
    decoder on the same frames, in GPU memory: nvCOMP decodes each sampled frame's MED residual planes
    (the symbols the tier's rANS codes; the inverse predictor, which the tier's decoder runs in the same
    loop, would still be left to do), ANS, GDeflate (entropy only) and LZ4, and, for scale, ANS on the raw
    I420 bytes; the sampled frames back to back in one buffer, in 64 KiB chunks. Bytes per frame include
    nvCOMP's headers. Decode rates: the tier's from CUDA events, nvCOMP's
from the wall time of each call with the device synchronized around it (it decodes on a stream of its
own), medians of 20; its host-side setup per call is in its figure, as it would be in a loader's."""
    import statistics
    import cupy as cp
    import torch
    from nvidia import nvcomp
    from robocache._C import decode_lossless
    from robocache.frames.lossless import encode_all
    band = default_band(h, w)
    resid = np.stack([np.concatenate([band_residuals(p, band, "med").ravel() for p in planes(r, h, w)])
                      for r in rows])
    out: dict = {"nvcomp": getattr(nvcomp, "__version__", "?"), "frames": len(rows), "cases": {}}
    dev = torch.device("cuda", 0)
    data, offsets = encode_all(rows, h, w)
    ours = {"bytes_per_frame": float(np.diff(offsets).mean())}
    d_data, d_off = torch.as_tensor(data).to(dev), torch.as_tensor(offsets).to(dev)
    for B in batches:
        M = 3 * B
        ids = [torch.randint(0, len(rows), (M,), device=dev) for _ in range(8)]
        dst = torch.empty((M, rows.shape[1]), dtype=torch.uint8, device=dev)
        decode_lossless(dst, d_data, d_off, ids[0], height=h, width=w)
        assert np.array_equal(dst.cpu().numpy(), rows[ids[0].cpu().numpy()])
        ms = []
        for k in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            decode_lossless(dst, d_data, d_off, ids[k % 8], height=h, width=w)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        ours[f"frames_per_s_{M}"] = M / statistics.median(ms) * 1e3
    out["cases"]["robocache MED + rANS (full decode)"] = ours
    print("robocache", ours, flush=True)
    for label, algo, src, kw in (("nvCOMP ANS, MED residuals", "ANS", resid, {}),
                                 ("nvCOMP GDeflate entropy-only, MED residuals", "GDeflate", resid, {"algorithm_type": 0}),
                                 ("nvCOMP LZ4, MED residuals", "LZ4", resid, {}),
                                 ("nvCOMP ANS, raw I420", "ANS", rows, {})):
        try:
            # nvCOMP's Python decode takes one buffer: the sampled frames laid out back to back, coded in
            # its default 64 KiB chunks, which its batched decoder decodes in parallel (as its C API would
            # chunks of the sampled frames wherever each lies)
            codec = nvcomp.Codec(algorithm=algo, **kw)
            r = {}
            for B in batches:
                M = 3 * B
                pick = np.random.default_rng(B).integers(0, len(src), M)
                want = np.ascontiguousarray(src[pick]).ravel()
                enc = codec.encode(nvcomp.as_array(cp.asarray(want)))
                r["bytes_per_frame"] = enc.buffer_size / M
                back = cp.asnumpy(cp.asarray(codec.decode(enc))).view(np.uint8).ravel()
                if not np.array_equal(back, want):
                    raise RuntimeError("round trip differs")
                ms = []
                for k in range(22):
                    cp.cuda.Device().synchronize()
                    t = time.perf_counter()
                    cp.asarray(codec.decode(enc))       # asynchronous on the codec's stream: synchronized
                    cp.cuda.Device().synchronize()
                    if k >= 2:
                        ms.append((time.perf_counter() - t) * 1e3)
                r[f"frames_per_s_{M}"] = M / statistics.median(ms) * 1e3
            out["cases"][label] = r
        except Exception as e:  # noqa: BLE001 (reported: one codec failing leaves the others measured)
            out["cases"][label] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(label, out["cases"][label], flush=True)
    return out


def generated_rows(n, h, w, seed=0):
    """Smooth moving fields plus sensor noise, as I420 rows (the --smoke input)."""
    rng = np.random.default_rng(seed)
    ch, cw = (h + 1) // 2, (w + 1) // 2
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((n, h * w + 2 * ch * cw), np.uint8)
    for i in range(n):
        Y = 128 + 80 * np.sin(x / 9 + i / 5) * np.cos(y / 11) + rng.normal(0, 3, (h, w))
        C = 128 + 40 * np.sin(x[::2, ::2][:ch, :cw] / 7 - i / 3) + rng.normal(0, 2, (ch, cw))
        out[i] = np.concatenate([np.clip(Y, 0, 255).astype(np.uint8).ravel()] +
                                [np.clip(C + k, 0, 255).astype(np.uint8).ravel() for k in (0, 9)])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--band", type=int, default=0, help="rows per chunk, a multiple of 32 (0: the coder's "
                    "default, >= 32768 luma pixels a chunk)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--smoke", action="store_true", help="generated 48x64 frames, a few seconds")
    ap.add_argument("--no-coder", action="store_true", help="the estimates only")
    ap.add_argument("--gpu", action="store_true", help="the GPU decode and the loader (a CUDA GPU)")
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--set-frames", type=int, default=3_060_000, help="--gpu: camera frames of the set")
    ap.add_argument("--nvcomp", action="store_true", help="--gpu: nvCOMP's decoders against the tier's, "
                    "instead of the loader")
    ap.add_argument("--rows", type=Path, help="--gpu: the 180x320 frames from this .npz (--save-rows), not the videos")
    ap.add_argument("--save-rows", type=Path, help="write the 180x320 frames as .npz and stop (for a machine "
                    "without PyAV)")
    a = ap.parse_args(argv)
    if a.save_rows:
        rows, h, w = real_rows(a.frames, (180, 320))
        np.savez_compressed(a.save_rows, rows=rows, h=h, w=w)
        return 0
    if a.gpu:
        if a.rows:
            z = np.load(a.rows)
            rows, h, w = z["rows"], int(z["h"]), int(z["w"])
        else:
            rows, h, w = real_rows(a.frames, (180, 320))
        got = nvcomp_compare(rows, h, w, a.batches) if a.nvcomp else gpu(rows, h, w, a.batches, a.set_frames)
        if a.json:
            Path(a.json).write_text(json.dumps(got, indent=1, default=str))
        return 0
    threads = os.cpu_count() or 1
    cases = []
    if a.smoke:
        cases.append(("generated 48x64", generated_rows(8, 48, 64), 48, 64))
    else:
        for size in (None, (180, 320)):
            rows, h, w = real_rows(a.frames, size)
            cases.append((f"CR5 AV1 {h}x{w}", rows, h, w))
    results = []
    for label, rows, h, w in cases:
        band = a.band or default_band(h, w)
        r = {"case": label, "frames": len(rows), "band": band, **estimates(rows, h, w, band)}
        if not a.no_coder:
            r.update(coder(rows, h, w, band, threads))
        results.append(r)
        print(f"\n{label}: {len(rows)} frames, bands of {band} rows")
        print(f"  {'coder':<28}{'KB/frame':>10}{'x vs I420':>11}")
        for k, v in r.items():
            if isinstance(v, float) and "frames/s" not in k:
                print(f"  {k:<28}{v / 1000:>10.1f}{r['raw I420'] / v:>11.2f}")
        for k, v in r.items():
            if "frames/s" in k:
                print(f"  {k:<28}{v:>10.0f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                            "cpus": threads, "python": sys.version.split()[0],
                                            "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
