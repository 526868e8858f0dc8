"""Benchmark robocache._C.gather_frames, the loader's image path: 64 random 480x640 frames
gathered from device storage and from pinned host storage (read by the kernel over the bus),
stored as RGB or as YUV 4:2:0, into uint8 HWC, float32 CHW (/255, planar) or float32 HWC (/255,
channels-last: the loader's BTCHW image window) or float16 HWC, with and without a 224x224 resize. Each config is checked against plain PyTorch first, then timed with CUDA
events (median of many; the 64 ids change every call and the storage is larger than L2)
against that PyTorch code and the floor: bytes moved / measured copy bandwidth.

    python benchmarks/bench_frames.py [--frames N] [--iters K] [--cpu] [--sweep] [--json PATH]
                                      [--where device,pinned] [--outs u8_hwc,f32_chw,f32_hwc,f16_hwc]
    python benchmarks/bench_frames.py --smoke      # CI: the CPU path's checks, in seconds

--sweep reruns the robocache rows with other shared-memory stage sizes
(ROBOCACHE_FRAMES_STAGE_BYTES, read once per process, hence the subprocesses).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from robocache import _C

H, W, C, B, R = 480, 640, 3, 64, 224
YUV_BYTES = H * W + 2 * (H // 2) * (W // 2)
# BT.601 limited range in 2^-13 (csrc/frames_math.h): y, yoff, vr, ug, vg, ub
K601 = (9539, 128, 13075, -3209, -6660, 16525)


def torch_yuv_to_rgb(rows):
    """What a PyTorch user would write: the same fixed point as the kernel, [B, H, W, 3] uint8."""
    y = rows[:, : H * W].view(-1, H, W).int()
    u = rows[:, H * W: H * W + YUV_BYTES // 6].view(-1, H // 2, W // 2).int()
    v = rows[:, H * W + YUV_BYTES // 6:].view(-1, H // 2, W // 2).int()
    u = u.repeat_interleave(2, 1).repeat_interleave(2, 2) * 8 - 1024
    v = v.repeat_interleave(2, 1).repeat_interleave(2, 2) * 8 - 1024
    ky, yoff, vr, ug, vg, ub = K601
    luma = ((y * 8 - yoff) * ky) >> 16
    rgb = torch.stack([luma + ((v * vr) >> 16), luma + ((u * ug) >> 16) + ((v * vg) >> 16),
                       luma + ((u * ub) >> 16)], -1)
    return rgb.clamp_(0, 255).to(torch.uint8)


def torch_batch(frames_u8_hwc, out_kind, resize):
    """uint8 [B, H, W, 3] -> the batch the loader wants, in plain PyTorch."""
    if resize is None:
        if out_kind == "u8_hwc":
            return frames_u8_hwc
        if out_kind in ("f32_hwc", "f16_hwc"):
            x = frames_u8_hwc.float().div_(255.0)
            return (x.half() if out_kind == "f16_hwc" else x).permute(0, 3, 1, 2)
        return frames_u8_hwc.permute(0, 3, 1, 2).float().div_(255.0)
    x = F.interpolate(frames_u8_hwc.permute(0, 3, 1, 2).float(), size=(resize, resize), mode="bilinear",
                      align_corners=False, antialias=False)
    if out_kind == "u8_hwc":
        return x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
    if out_kind in ("f32_hwc", "f16_hwc"):
        x = x.div_(255.0).contiguous(memory_format=torch.channels_last)
        return x.half() if out_kind == "f16_hwc" else x
    return x.div_(255.0)


def output(out_kind, b, oh, ow, dev):
    """(the batch tensor, its [b, oh, ow, C] view that gather_frames writes, gather_frames' scale keyword)."""
    if out_kind == "u8_hwc":
        out = torch.empty(b, oh, ow, C, dtype=torch.uint8, device=dev)
        return out, out, {}
    if out_kind in ("f32_hwc", "f16_hwc"):      # [b, 3, H, W] channels-last, as the loader's
        dt = torch.float16 if out_kind == "f16_hwc" else torch.float32
        view = torch.empty(b, oh, ow, C, dtype=dt, device=dev)
        return view.permute(0, 3, 1, 2), view, {"scale": 255.0}
    out = torch.empty(b, C, oh, ow, dtype=torch.float32, device=dev)
    return out, out.permute(0, 2, 3, 1), {"scale": 255.0}


def max_diff(got, ref, out_kind, resize):
    """(largest difference of robocache's batch from PyTorch's, what it may be)."""
    diff = (got.float() - ref.float()).abs().max().item()
    # uint8: exact without resize, torch's rounding of ties with it; float: torch on CUDA divides by
    # 255 as a multiply by 1/255 (an ulp from robocache's true division)
    tol = (0.0 if resize is None else 1.0) if out_kind == "u8_hwc" else 1e-6
    if out_kind == "f16_hwc":
        tol = 1e-3  # a float16 ulp near 1: torch rounds its x * (1/255) product, robocache x / 255
    return diff, tol


def smoke() -> int:
    """CI (--smoke): the CPU path of every storage format and output, with and without the resize, on a
    few frames, checked against the PyTorch batch; 1 on any difference. Nothing is timed."""
    gen = torch.Generator().manual_seed(0)
    stores = {"rgb": torch.randint(0, 256, (6, H, W, C), dtype=torch.uint8, generator=gen),
              "yuv420": torch.randint(0, 256, (6, YUV_BYTES), dtype=torch.uint8, generator=gen)}
    ids = torch.randint(0, 6, (3,), generator=gen)
    failed = 0
    for fmt, storage in stores.items():
        frames = storage[ids] if fmt == "rgb" else torch_yuv_to_rgb(storage[ids])
        for out_kind in ("u8_hwc", "f32_chw", "f32_hwc", "f16_hwc"):
            for resize in (None, R):
                oh, ow = (resize, resize) if resize else (H, W)
                out, view, kw = output(out_kind, len(ids), oh, ow, "cpu")
                _C.gather_frames(storage, ids, view, format=fmt, height=H, width=W, channels=C, **kw)
                diff, tol = max_diff(out, torch_batch(frames, out_kind, resize), out_kind, resize)
                print(f"bench_frames smoke: {fmt} {out_kind} resize={resize}: max diff {diff:g} (tolerance {tol:g})")
                failed += not diff <= tol
    return 1 if failed else 0


def median_ms(fn, iters, warmup=5, cuda=True):
    for i in range(warmup):
        fn(i)
    times = []
    if cuda:
        torch.cuda.synchronize()
        for i in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(i)
            b.record()
            times.append((a, b))
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in times)
    for i in range(iters):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def wall_ms(fn, iters, warmup=3):
    """For baselines with CPU work: host time per call, the GPU drained each time."""
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        t0 = time.perf_counter()
        fn(i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def copy_bandwidths(nbytes=1 << 29):
    """(device-to-device, host-to-device from pinned) in GB/s; d2d counts read + write bytes."""
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    d2d = median_ms(lambda i: b.copy_(a), 20)
    h = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    h2d = median_ms(lambda i: a.copy_(h, non_blocking=True), 20)
    return 2 * nbytes / d2d / 1e6, nbytes / h2d / 1e6


def run(args):
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    n = args.frames
    print(f"storage: {n} frames of {H}x{W} ({n * H * W * 3 / 1e9:.2f} GB RGB, {n * YUV_BYTES / 1e9:.2f} GB YUV)",
          file=sys.stderr)
    rgb_cpu = torch.randint(0, 256, (n, H, W, C), dtype=torch.uint8, generator=gen)
    # smooth-ish YUV content is irrelevant to speed; random bytes are fine
    yuv_cpu = torch.randint(0, 256, (n, YUV_BYTES), dtype=torch.uint8, generator=gen)
    stores = {("rgb", "device"): rgb_cpu.to(dev), ("yuv420", "device"): yuv_cpu.to(dev),
              ("rgb", "pinned"): rgb_cpu.pin_memory(), ("yuv420", "pinned"): yuv_cpu.pin_memory()}
    del rgb_cpu, yuv_cpu
    K = 32  # id sets, rotated
    ids_cpu = [torch.randint(0, n, (B,), generator=gen) for _ in range(K)]
    ids_dev = [i.to(dev) for i in ids_cpu]
    d2d, h2d = copy_bandwidths()
    rows = []
    for fmt in ("rgb", "yuv420"):
        for where in args.where.split(","):
            storage = stores[(fmt, where)]
            frame_bytes = H * W * C if fmt == "rgb" else YUV_BYTES
            for out_kind in args.outs.split(","):
                for resize in (None, R):
                    oh = ow = resize or None
                    oh, ow = (oh, ow) if resize else (H, W)
                    out, view, kw = output(out_kind, B, oh, ow, dev)

                    def ours(i, storage=storage, view=view, kw=kw, fmt=fmt):
                        _C.gather_frames(storage, ids_dev[i % K], view, format=fmt, height=H, width=W, channels=C,
                                         **kw)

                    if where == "device":
                        def theirs(i, storage=storage, fmt=fmt, out_kind=out_kind, resize=resize):
                            x = storage[ids_dev[i % K]]
                            return torch_batch(x if fmt == "rgb" else torch_yuv_to_rgb(x), out_kind, resize)
                    else:
                        stage = torch.empty((B,) + tuple(storage.shape[1:]), dtype=torch.uint8).pin_memory()

                        def theirs(i, storage=storage, fmt=fmt, out_kind=out_kind, resize=resize, stage=stage):
                            # a DataLoader's way: gather on the CPU into pinned memory, copy, convert
                            torch.index_select(storage, 0, ids_cpu[i % K], out=stage)
                            x = stage.to(dev, non_blocking=True)
                            return torch_batch(x if fmt == "rgb" else torch_yuv_to_rgb(x), out_kind, resize)

                    # correctness first: robocache against the PyTorch batch
                    ours(0)
                    diff, tol = max_diff(out, theirs(0), out_kind, resize)
                    if not diff <= tol:
                        print(f"CHECK FAILED: {fmt} {where} {out_kind} resize={resize}: max diff {diff}", file=sys.stderr)
                    t_ours = median_ms(ours, args.iters)
                    if args.ours_only:
                        t_theirs = float("nan")
                    elif where == "device":
                        t_theirs = median_ms(theirs, args.iters)
                    else:
                        t_theirs = wall_ms(theirs, args.iters)
                    read = B * frame_bytes
                    written = out.numel() * out.element_size()
                    floor = (read + written) / d2d / 1e6 if where == "device" else max(read / h2d, (read + written) / d2d) / 1e6
                    rows.append(dict(op="gather_frames", storage=f"{fmt}/{where}", shape=f"{B}x{H}x{W}->{oh}x{ow}",
                                     dtype=out_kind, robocache_ms=t_ours, torch_ms=t_theirs, floor_ms=floor,
                                     x_vs_torch=t_theirs / t_ours, pct_of_floor=100 * floor / t_ours,
                                     read_GBps=read / t_ours / 1e6, max_diff=diff, check=diff <= tol))
    if args.cpu:
        torch.set_num_threads(os.cpu_count() or 1)
        for fmt in ("rgb", "yuv420"):
            storage = stores[(fmt, "pinned")]
            for out_kind, resize in (("u8_hwc", None), ("f32_chw", R)):
                oh, ow = (resize, resize) if resize else (H, W)
                if out_kind == "u8_hwc":
                    view, kw = torch.empty(B, oh, ow, C, dtype=torch.uint8), {}
                else:
                    view, kw = torch.empty(B, C, oh, ow).permute(0, 2, 3, 1), {"scale": 255.0}
                t_ours = median_ms(lambda i: _C.gather_frames(storage, ids_cpu[i % K], view, format=fmt, height=H,
                                                              width=W, channels=C, **kw), 5, 1, cuda=False)
                t_theirs = median_ms(lambda i: torch_batch(
                    storage[ids_cpu[i % K]] if fmt == "rgb" else torch_yuv_to_rgb(storage[ids_cpu[i % K]]),
                    out_kind, resize), 5, 1, cuda=False)
                rows.append(dict(op="gather_frames(cpu)", storage=f"{fmt}/host", shape=f"{B}x{H}x{W}->{oh}x{ow}",
                                 dtype=out_kind, robocache_ms=t_ours, torch_ms=t_theirs, floor_ms=float("nan"),
                                 x_vs_torch=t_theirs / t_ours, pct_of_floor=float("nan"),
                                 read_GBps=float("nan"), max_diff=float("nan")))
    return dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, d2d_GBps=d2d, h2d_GBps=h2d,
                frames=n, stage_bytes=os.environ.get("ROBOCACHE_FRAMES_STAGE_BYTES", "default"), rows=rows)


def table(res):
    print(f"GPU {res['gpu']}, torch {res['torch']}; copy bandwidth: device-to-device {res['d2d_GBps']:.0f} GB/s "
          f"(read + write), pinned host-to-device {res['h2d_GBps']:.1f} GB/s; stage {res['stage_bytes']}")
    print(f"{'op':<20} {'storage':<15} {'shape':<20} {'dtype':<8} {'robocache':>10} {'torch':>10} {'floor':>9} "
          f"{'x vs torch':>10} {'% floor':>8} {'read GB/s':>9}  check")
    for r in res["rows"]:
        print(f"{r['op']:<20} {r['storage']:<15} {r['shape']:<20} {r['dtype']:<8} {r['robocache_ms'] * 1e3:>8.1f}us "
              f"{r['torch_ms'] * 1e3:>8.1f}us {r['floor_ms'] * 1e3:>7.1f}us {r['x_vs_torch']:>9.1f}x "
              f"{r['pct_of_floor']:>7.0f}% {r['read_GBps']:>9.1f}  {'ok' if r.get('check', True) else 'DIFF'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=400, help="frames in each storage (default 400: 369 MB RGB)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--cpu", action="store_true", help="also time the CPU path (pinned storage as host memory)")
    ap.add_argument("--sweep", action="store_true", help="robocache rows at other stage sizes")
    ap.add_argument("--ours-only", action="store_true", help="skip the PyTorch timings (the sweep's runs)")
    ap.add_argument("--where", default="device,pinned", help="storages to time (default device,pinned)")
    ap.add_argument("--outs", default="u8_hwc,f32_chw",
                    help="outputs to time, of u8_hwc, f32_chw, f32_hwc, f16_hwc (default u8_hwc,f32_chw)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--smoke", action="store_true", help="CI: the CPU path checked on a few frames, not timed")
    args = ap.parse_args(argv)
    if args.smoke:
        return smoke()
    if not torch.cuda.is_available() or not _C.WITH_CUDA:
        print("bench_frames: needs a CUDA GPU and a CUDA build of robocache", file=sys.stderr)
        return 1
    res = run(args)
    if args.json != "/dev/stdout":
        table(res)
    if args.sweep:
        res["sweep"] = {}
        for stage in (4096, 8192, 32768, 49152):
            env = dict(os.environ, ROBOCACHE_FRAMES_STAGE_BYTES=str(stage))
            out = subprocess.run([sys.executable, __file__, "--frames", str(args.frames), "--iters", str(args.iters),
                                  "--where", args.where, "--outs", args.outs, "--ours-only", "--json", "/dev/stdout"],
                                 env=env, capture_output=True, text=True)
            try:
                sub = json.loads(out.stdout[out.stdout.index("{"):])
            except ValueError:
                print(out.stdout, out.stderr, file=sys.stderr)
                continue
            res["sweep"][stage] = {f"{r['storage']} {r['shape']} {r['dtype']}": r["robocache_ms"] for r in sub["rows"]}
        base = {f"{r['storage']} {r['shape']} {r['dtype']}": r["robocache_ms"] for r in res["rows"]}
        stages = sorted(res["sweep"])
        print("\nstage sweep (robocache us):", "default(16384)", *stages)
        for key, t in base.items():
            print(f"  {key:<50} {t * 1e3:8.1f}", *(f"{res['sweep'][s].get(key, float('nan')) * 1e3:8.1f}" for s in stages))
    if args.json:
        text = json.dumps(res, indent=1)
        if args.json == "/dev/stdout":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    return 1 if any(not r.get("check", True) for r in res["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
