"""NumPy references for robocache tests, and the comparisons the tests share.

`resample_ref` follows docs/resample.md line by line, one output row at a time,
so that it can be read against the doc rather than trusted; `interp_ref` is an
independent cross-check for linear mode that only uses `numpy.interp`.
Both accept numpy arrays and torch tensors (CPU or CUDA) and return numpy.
bfloat16 has no numpy dtype: it is carried as float32 holding exactly the
bfloat16 values, and torch does the one rounding to bfloat16.
"""

from __future__ import annotations

import math

import numpy as np

try:
    import torch
except ModuleNotFoundError:  # the references work without torch; bf16 does not
    torch = None

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
EXACT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "bool")
ALL_DTYPES = FLOAT_DTYPES + EXACT_DTYPES
COPY_MODES = ("nearest", "previous", "next")
FLOAT_MODES = ("linear",) + COPY_MODES + ("slerp",)
TIME_DTYPES = ("float64", "float32", "int64")


def modes_for(dtype: str) -> tuple[str, ...]:
    return FLOAT_MODES if dtype in FLOAT_DTYPES else COPY_MODES


# ----------------------------------------------------------------------------
# conversions


def is_torch(a) -> bool:
    return torch is not None and isinstance(a, torch.Tensor)


def dtype_name(a) -> str:
    """'float32', 'bfloat16', 'bool', ... for numpy arrays and torch tensors."""
    if is_torch(a):
        return str(a.dtype).removeprefix("torch.")
    return np.dtype(a.dtype).name


def to_numpy(a):
    """A numpy copy-or-view of `a`; bfloat16 becomes float32 (exact)."""
    if a is None:
        return None
    if is_torch(a):
        a = a.detach().cpu()
        if a.dtype == torch.bfloat16:
            a = a.float()
        return a.numpy()
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float32/float64 results once to the output dtype (round to nearest even)."""
    if dtype == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).float().numpy()
    return x.astype(dtype)


# ----------------------------------------------------------------------------
# row extraction: every form of the API becomes a list of (times, values[n, D])
# rows, the [B, T] targets, the shape of is_pad and the trailing feature dims


def _rows(values, times, new_times, lengths, offsets, index):
    v, t, x = to_numpy(values), to_numpy(times), to_numpy(new_times)
    if offsets is not None:  # ragged: values [N, ...], times [N], new_times [B, T]
        offsets, index = to_numpy(offsets), to_numpy(index)
        feat = v.shape[1:]
        D = math.prod(feat)
        rows = []
        for e in index:
            a, b = int(offsets[e]), int(offsets[e + 1])
            rows.append((t[a:b], v[a:b].reshape(b - a, D)))
        return rows, x, x.shape, feat
    if t.ndim == 2:  # dense: values [B, S, ...], times [B, S], new_times [B, T]
        feat = v.shape[2:]
        D = math.prod(feat)
        S = t.shape[1]
        n = [S] * t.shape[0] if lengths is None else [int(k) for k in to_numpy(lengths)]
        rows = [(t[b, : n[b]], v[b, : n[b]].reshape(n[b], D)) for b in range(t.shape[0])]
        return rows, x, x.shape, feat
    # one row: values [S, ...], times [S], new_times [T]
    feat = v.shape[1:]
    return [(t, v.reshape(t.shape[0], math.prod(feat)))], x[None], x.shape, feat


def _weight(t0, t1, x):
    """w = (x - t[j]) / (t[j+1] - t[j]) in the precision of the times."""
    if t0.dtype == np.int64:  # exact int64 differences, divided in float64
        return (x - t0).astype(np.float64) / (t1 - t0).astype(np.float64)
    return (x - t0) / (t1 - t0)  # float32 stays float32, float64 stays float64


def _normalize(q):
    return q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True))


def _slerp(q0, q1, w):
    """Shortest-arc slerp of quaternions [M, K, 4] by weights [M], in float64."""
    q0, q1 = q0.astype(np.float64), q1.astype(np.float64)
    w = w.astype(np.float64)[:, None, None]
    d = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(d < 0, -q1, q1)
    d = np.abs(d)
    nlerp = q0 + w * (q1 - q0)
    theta = np.arccos(np.minimum(d, 1.0))
    s = np.sin(theta)
    with np.errstate(divide="ignore", invalid="ignore"):  # only used where d <= 0.9995
        arc = (np.sin((1 - w) * theta) / s) * q0 + (np.sin(w * theta) / s) * q1
    return _normalize(np.where(d > 0.9995, nlerp, arc))


def _row_ref(t, v, x, mode, tol, out_dtype):
    """One output row: (out [T, D], is_pad [T])."""
    n, T, D = t.shape[0], x.shape[0], v.shape[1]
    if n == 0:
        return np.zeros((T, D), v.dtype), np.ones(T, bool)

    # the last sample with t[j] <= x: among duplicates the later one wins
    j = np.searchsorted(t, x, side="right") - 1
    below, above = j < 0, j >= n - 1
    mid = ~(below | above)
    idx = np.where(below, 0, np.where(above, n - 1, j))  # edge samples (numpy.interp)
    jm, xm = j[mid], x[mid]
    t0, t1 = t[jm], t[jm + 1]

    if t.dtype == np.int64:
        tol_ns = tol * 1e9
        # int64 differences are exact; comparing them as float64 is exact here
        # because the tests keep |x - t| < 2**53 ns.
        is_pad = ((x - t[0]).astype(np.float64) < -tol_ns) | ((x - t[-1]).astype(np.float64) > tol_ns)
    else:
        xd = x.astype(np.float64)
        is_pad = (xd < np.float64(t[0]) - tol) | (xd > np.float64(t[-1]) + tol)

    if mode in COPY_MODES:
        if mode == "previous":
            idx[mid] = jm
        elif mode == "next":
            idx[mid] = np.where(t0 == xm, jm, jm + 1)
        else:  # nearest: the differences in the times' own precision, ties go to the earlier sample
            idx[mid] = np.where((t1 - xm) < (xm - t0), jm + 1, jm)
        return v[idx], is_pad

    w = _weight(t0, t1, xm)
    if mode == "linear":
        cd = np.float64 if v.dtype == np.float64 else np.float32
        out = v[idx].astype(cd)
        v0, v1 = v[jm].astype(cd), v[jm + 1].astype(cd)
        # three separately rounded operations, the documented formula (no FMA); w == 0 (the
        # target exactly on sample j, or a weight that underflows) copies v[j], so an inf/NaN
        # in sample j+1 does not reach a target that sits on a finite sample
        lerp = v0 + w.astype(cd)[:, None] * (v1 - v0)
        out[mid] = np.where((w == 0)[:, None], v0, lerp)
        return round_to(out, out_dtype), is_pad

    if mode == "slerp":
        q = v.reshape(n, D // 4, 4)
        out = _normalize(q[idx].astype(np.float64))
        out[mid] = _slerp(q[jm], q[jm + 1], w)
        return round_to(out.reshape(T, D), out_dtype), is_pad

    raise ValueError(f"unknown mode {mode!r}")


def resample_ref(values, times, new_times, mode="linear", lengths=None, offsets=None, index=None,
                 tolerance=1e-4):
    """(out, is_pad) as numpy arrays, following docs/resample.md.

    `out` has the dtype of `values`, except bfloat16 which comes back as float32
    holding bfloat16-rounded values (compare with `to_numpy(actual)`).
    Slerp is evaluated in float64 whatever the values' dtype (the most accurate
    answer; the tests compare slerp with a tolerance).
    """
    out_dtype = dtype_name(values)
    rows, x, pad_shape, feat = _rows(values, times, new_times, lengths, offsets, index)
    B, T = x.shape
    out = np.zeros((B, T, math.prod(feat)), to_numpy(values).dtype)
    pad = np.ones((B, T), bool)
    for b, (t, v) in enumerate(rows):
        out[b], pad[b] = _row_ref(t, v, x[b], mode, tolerance, out_dtype)
    return out.reshape(pad_shape + feat), pad.reshape(pad_shape)


def interp_ref(values, times, new_times, lengths=None, offsets=None, index=None):
    """Linear mode via numpy.interp, per row and feature, in float64.

    int64 times are taken relative to the row's first sample first (exact in
    int64), so epoch nanoseconds do not lose precision in float64. Rows must
    have strictly increasing times (numpy.interp leaves duplicates undefined).
    """
    rows, x, pad_shape, feat = _rows(values, times, new_times, lengths, offsets, index)
    B, T = x.shape
    D = math.prod(feat)
    out = np.zeros((B, T, D), np.float64)
    for b, (t, v) in enumerate(rows):
        if t.shape[0] == 0:
            continue
        if t.dtype == np.int64:
            tr, xr = (t - t[0]).astype(np.float64), (x[b] - t[0]).astype(np.float64)
        else:
            tr, xr = t.astype(np.float64), x[b].astype(np.float64)
        for d in range(D):
            out[b, :, d] = np.interp(xr, tr, v[:, d].astype(np.float64))
    return out.reshape(pad_shape + feat)


# ----------------------------------------------------------------------------
# comparisons: say where and by how much, with the seed, so a failure is
# reproducible from its message alone


def _where(bad, actual, expected, limit=5):
    pos = np.argwhere(bad)[:limit]
    return "; ".join(f"at {tuple(int(i) for i in p)}: got {actual[tuple(p)]!r}, want {expected[tuple(p)]!r}"
                     for p in pos)


def assert_equal(actual, expected, msg=""):
    """Bit-for-bit equal values (bool compared as bytes, so a 0xFF poison shows)."""
    a = np.ascontiguousarray(to_numpy(actual))
    e = np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}. {msg}"
    if e.dtype == np.bool_ or a.dtype == np.bool_:
        a, e = a.view(np.uint8), np.ascontiguousarray(e).astype(bool).view(np.uint8)
    if a.dtype.kind == "f" or e.dtype.kind == "f":
        # == so that -0.0 == 0.0; NaN never equals (the references make none)
        bad = ~(a == e)
    else:
        bad = a != e
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements differ: {_where(bad, a, e)}. {msg}"


def assert_close(actual, expected, *, rtol=0.0, atol=0.0, msg=""):
    a = np.asarray(to_numpy(actual), np.float64)
    e = np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}. {msg}"
    bad = ~(np.abs(a - e) <= atol + rtol * np.abs(e))  # NaN counts as bad
    if bad.any():
        err = np.abs(a - e)
        raise AssertionError(f"{int(bad.sum())} of {bad.size} elements off by more than "
                             f"{atol} + {rtol}*|want| (max error {np.nanmax(err)!r}): "
                             f"{_where(bad, a, e)}. {msg}")


# ----------------------------------------------------------------------------
# buffers

def bf16_round(x):
    """float32 array holding the bfloat16 rounding of x (numpy has no bfloat16)."""
    return torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16).float().numpy()


def poisoned(shape, dtype, like):
    """An output buffer of the framework/device of `like`, every byte 0xFF:
    NaN for float types, -1/255 for integers, an invalid byte for bool."""
    if is_torch(like):
        tdt = getattr(torch, dtype)
        buf = torch.empty(shape, dtype=tdt, device=like.device)
        buf.view(torch.uint8).fill_(0xFF)
        return buf
    buf = np.empty(shape, dtype)
    buf.view(np.uint8).fill(0xFF)
    return buf


def snapshot(arrays):
    """Bytes of every array, to prove a call left its inputs alone."""
    return {k: (tuple(a.shape), dtype_name(a), np.ascontiguousarray(to_numpy(a)).tobytes())
            for k, a in arrays.items() if a is not None}


# tolerance of slerp results against the float64 reference, per output dtype:
# float32 keeps ~1e-7 relative through acos/sin; half types are one output
# rounding (0.5 ulp at 1.0) plus their inputs not being exactly unit length.
SLERP_ATOL = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


# ----------------------------------------------------------------------------
# voxelize (docs/voxelize.md): np.floor binning in float64, np.add.at /
# np.maximum.at reductions in float64, one rounding to the output dtype


def _vox_clouds(points, features, lengths, offsets):
    """[(points [n,3] float64, features [n,F] float64 or None)] per cloud, and
    whether the call was one unbatched cloud."""
    p = np.asarray(to_numpy(points), np.float64)
    f = None if features is None else np.asarray(to_numpy(features), np.float64)
    if offsets is not None:
        off = [int(k) for k in to_numpy(offsets)]
        return [(p[a:b], None if f is None else f[a:b]) for a, b in zip(off[:-1], off[1:])], False
    if p.ndim == 2:
        return [(p, f)], True
    n = [p.shape[1]] * p.shape[0] if lengths is None else [int(k) for k in to_numpy(lengths)]
    return [(p[b, : n[b]], None if f is None else f[b, : n[b]]) for b in range(p.shape[0])], False


def voxel_index_ref(p, voxel_size, origin):
    """floor((p - origin) / voxel_size) per axis in float64 (p: [n, 3])."""
    vs = np.broadcast_to(np.asarray(voxel_size, np.float64), (3,))
    return np.floor((np.asarray(p, np.float64) - np.asarray(origin, np.float64)) / vs)


def voxelize_ref(points, *, features=None, lengths=None, offsets=None, grid, voxel_size, origin,
                 mode="occupancy", dtype=None):
    """(out, dropped) as numpy arrays, following docs/voxelize.md.

    out is [B,X,Y,Z] (occupancy, count) or [B,F,X,Y,Z] (sum, mean, max), without
    the B dim for one unbatched cloud; bfloat16 outputs come back as float32
    holding bfloat16 values. Accepts numpy arrays and torch tensors.
    """
    grid = (grid,) * 3 if np.ndim(grid) == 0 else tuple(int(g) for g in grid)
    clouds, unbatched = _vox_clouds(points, features, lengths, offsets)
    feat = mode in ("sum", "mean", "max")
    if dtype is None:
        fdt = None if features is None else dtype_name(features)
        dtype = {"occupancy": "float32", "count": "int32"}.get(mode, "float64" if fdt == "float64" else "float32")
    F = clouds[0][1].shape[1] if feat and clouds else (to_numpy(features).shape[-1] if feat else 0)
    B = len(clouds)
    lead = (B, F) if feat else (B,)
    acc = np.zeros(lead + grid, np.float64)
    dropped = np.zeros(B, np.int64)
    for b, (p, f) in enumerate(clouds):
        idx = voxel_index_ref(p, voxel_size, origin)
        with np.errstate(invalid="ignore"):
            keep = np.all((idx >= 0) & (idx < np.asarray(grid)), axis=1)  # NaN fails both
        dropped[b] = len(p) - int(keep.sum())
        lin = np.ravel_multi_index(idx[keep].astype(np.int64).T, grid) if keep.any() else np.zeros(0, np.int64)
        count = np.zeros(math.prod(grid), np.int64)
        np.add.at(count, lin, 1)
        if mode == "occupancy":
            acc[b].reshape(-1)[lin] = 1
        elif mode == "count":
            acc[b] = count.reshape(grid)
        else:
            for c in range(F):
                vals = f[keep, c]
                if mode == "max":
                    m = np.full(math.prod(grid), -np.inf)
                    with np.errstate(invalid="ignore"):
                        np.maximum.at(m, lin, vals)
                else:
                    m = np.zeros(math.prod(grid))
                    with np.errstate(invalid="ignore", over="ignore"):
                        np.add.at(m, lin, vals)
                        if mode == "mean":
                            m = np.where(count > 0, m / np.maximum(count, 1), 0.0)
                m[count == 0] = 0.0  # empty voxels are 0 in every mode
                acc[b, c] = m.reshape(grid)
    if unbatched:
        acc, dropped = acc[0], dropped[0]
    if dtype in ("bool", "uint8", "int32", "int64"):
        return acc.astype(dtype), dropped
    with np.errstate(over="ignore"):
        return round_to(acc, dtype), dropped


# ----------------------------------------------------------------------------
# gather_frames (docs/frames.md): FFmpeg's fixed-point yuv420p -> rgb24 (derived
# here from Kr, Kb; the C table must agree), torch's bilinear resize in float32
# (its source coordinate rounded once, as after torch's FMA), one output conversion

YUV_KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}


def _c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def yuv_coeffs(matrix: str, full_range: bool) -> dict:
    """2^-13 fixed-point coefficients: the matrix's terms scaled to limited range
    (255/224 chroma, 255/219 luma) and rounded to 16.16, then to 2^-13."""
    kr, kb = YUV_KR_KB[matrix]
    kg = 1 - kr - kb
    chroma = 255 / 224 * 65536  # 16.16 values for limited-range chroma
    crv, cbu = round(2 * (1 - kr) * chroma), round(2 * (1 - kb) * chroma)
    cgu, cgv = -round(2 * kb * (1 - kb) / kg * chroma), -round(2 * kr * (1 - kr) / kg * chroma)
    cy = 1 << 16
    if full_range:  # chroma back to full scale, truncated as C does
        crv, cbu, cgu, cgv = (_c_div(c * 224, 255) for c in (crv, cbu, cgu, cgv))
    else:
        cy = cy * 255 // 219
    q = lambda c: (c * 8192 + (1 << 15)) >> 16  # 16.16 -> 2^-13, rounded
    return {"y": q(cy), "yoff": 0 if full_range else 128, "vr": q(crv), "ug": q(cgu), "vg": q(cgv), "ub": q(cbu)}


def yuv420_to_rgb_ref(y, u, v, matrix="bt601", full_range=False):
    """uint8 [H, W, 3] from I420 planes y [H, W], u and v [ceil(H/2), ceil(W/2)]:
    each term floor((8 * sample - offset) * coefficient / 2^16), summed, clamped;
    one chroma sample per 2x2 block."""
    k = yuv_coeffs(matrix, full_range)
    H, W = y.shape
    uu = u.astype(np.int64).repeat(2, 0).repeat(2, 1)[:H, :W]
    vv = v.astype(np.int64).repeat(2, 0).repeat(2, 1)[:H, :W]
    hi = lambda a, c: (a * c) >> 16  # numpy shifts signed ints arithmetically: floor
    luma = hi(y.astype(np.int64) * 8 - k["yoff"], k["y"])
    cu, cv = (uu - 128) * 8, (vv - 128) * 8
    rgb = np.stack([luma + hi(cv, k["vr"]), luma + hi(cu, k["ug"]) + hi(cv, k["vg"]), luma + hi(cu, k["ub"])], -1)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def split_i420(row, height, width):
    """(y, u, v) planes of one I420 frame stored as a flat uint8 row."""
    ch, cw = (height + 1) // 2, (width + 1) // 2
    row = np.asarray(row)
    y = row[: height * width].reshape(height, width)
    u = row[height * width: height * width + ch * cw].reshape(ch, cw)
    v = row[height * width + ch * cw: height * width + 2 * ch * cw].reshape(ch, cw)
    return y, u, v


def pack_i420(y, u, v):
    """One flat uint8 row: Y, then U, then V (the layout of format='yuv420')."""
    return np.concatenate([np.asarray(p, np.uint8).reshape(-1) for p in (y, u, v)])


def _axis_ref(n_in, n_out):
    """(i0, i1, l0, l1) per output index, in float32 as torch computes them."""
    f32 = np.float32
    scale = f32(n_in) / f32(n_out)
    mid = np.arange(n_out, dtype=np.float32) + f32(0.5)
    # (mid * scale - 0.5) rounded once (torch's contracted FMA): exact in float64
    src = (np.float64(scale) * mid.astype(np.float64) - 0.5).astype(np.float32)
    src = np.maximum(src, f32(0))
    i0 = np.minimum(src.astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    l1 = src - i0.astype(np.float32)
    return i0, i1, f32(1) - l1, l1


def resize_ref(frame, out_h, out_w):
    """float32 [out_h, out_w, C] from a decoded float32 frame [H, W, C]:
    l0y*(l0x*p00 + l1x*p01) + l1y*(l0x*p10 + l1x*p11), every operation in float32."""
    H, W, _ = frame.shape
    yi0, yi1, yl0, yl1 = _axis_ref(H, out_h)
    xi0, xi1, xl0, xl1 = _axis_ref(W, out_w)
    r0, r1 = frame[yi0], frame[yi1]  # [h, W, C]
    lx0, lx1 = xl0[None, :, None], xl1[None, :, None]
    top = lx0 * r0[:, xi0] + lx1 * r0[:, xi1]
    bot = lx0 * r1[:, xi0] + lx1 * r1[:, xi1]
    return yl0[:, None, None] * top + yl1[:, None, None] * bot


def gather_frames_ref(storage, ids, out_hw, *, format, height, width, channels, out_dtype,
                      matrix="bt601", full_range=False, scale=None):
    """out [M, H', W', C] as numpy, following docs/frames.md: decode, resize when
    (H', W') != (height, width), convert; ids < 0 give zeros. bfloat16 comes back
    as float32 holding bfloat16 values."""
    s = to_numpy(storage)
    ids = to_numpy(ids).reshape(-1)
    oh, ow = out_hw
    f32 = np.float32
    out = np.zeros((len(ids), oh, ow, channels), np.float32)
    for m, i in enumerate(ids):
        if i < 0:
            continue
        if format == "yuv420":
            frame = yuv420_to_rgb_ref(*split_i420(s[i], height, width), matrix, full_range).astype(np.float32)
        else:
            frame = s[i].reshape(height, width, channels).astype(np.float32)
        out[m] = frame if (oh, ow) == (height, width) else resize_ref(frame, oh, ow)
    if out_dtype == "uint8":
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(out), 0, np.clip(np.rint(out), 0, 255)).astype(np.uint8)
    if scale is not None:
        out = out / f32(scale)
    if out_dtype == "bfloat16":
        return bf16_round(out)
    return out.astype(out_dtype)


# ---- the lossless frame tier (csrc/lossless_math.h), read against its format comment ----------


def med_symbols(plane, band):
    """Symbols of one plane: MED residuals (pixel - prediction) mod 256, zigzag-mapped (0, -1, 1, -2..
    -> 0, 1, 2, 3..), the predictor restarting at each band of rows: left on a band's first row (128
    for its first pixel), up in the first column, else the median of left, up and left + up - upleft."""
    x = np.asarray(plane, np.int32)
    rows, cols = x.shape
    left = np.pad(x, ((0, 0), (1, 0)))[:, :cols]
    up = np.pad(x, ((1, 0), (0, 0)))[:rows]
    upleft = np.pad(x, ((1, 0), (1, 0)))[:rows, :cols]
    pred = np.median(np.stack([left, up, left + up - upleft]), axis=0).astype(np.int32)
    pred[:, 0] = up[:, 0]
    first = np.arange(rows) % band == 0
    pred[first] = left[first]
    pred[first, 0] = 128
    r = ((x - pred) & 255).astype(np.uint8).view(np.int8).astype(np.int32)
    return np.where(r >= 0, 2 * r, -2 * r - 1).astype(np.uint8)


def lossless_decode_ref(buf, height, width):
    """One coded frame -> (I420 row, [symbols of each plane]), in plain Python: the header, the three
    tables, the chunk directory, then each chunk's 32 rANS states decoding its rows in wavefront order
    (pass by pass of 32 rows; at step s row t takes column s - t; lanes in order, each reading a 16-bit
    word when its state falls below 2^16), and the inverse predictor."""
    b = bytes(buf)
    u16 = lambda i: b[i] | b[i + 1] << 8                                    # noqa: E731
    u32 = lambda i: u16(i) | u16(i + 2) << 16                               # noqa: E731
    assert u32(0) == 0x314C4352 and u32(4) == height and u32(8) == width
    band, ends = u16(12), [20 + u16(14 + 2 * k) for k in range(3)]
    tables, start = [], 20
    for end in ends:
        freq, i = [], start
        while len(freq) < 256:
            v = b[i]
            if v == 0:
                freq += [0] * (b[i + 1] + 1)
                i += 2
            elif v < 0x80:
                freq.append(v)
                i += 1
            else:
                freq.append((v & 0x7F) << 8 | b[i + 1])
                i += 2
        assert i == end and sum(freq) == 4096
        tables.append((freq, np.concatenate([[0], np.cumsum(freq)])))
        start = end
    ch, cw = (height + 1) // 2, (width + 1) // 2
    shapes = [(height, width), (ch, cw), (ch, cw)]
    planes = [np.zeros(s, np.int32) for s in shapes]
    syms = [np.zeros(s, np.uint8) for s in shapes]
    chunks = [(k, r) for k in range(3) for r in range(0, shapes[k][0], band)]
    dir_at = (start + 3) & ~3
    streams = dir_at + 4 * len(chunks)
    first_byte = 0
    for c, (k, r0) in enumerate(chunks):
        end = u32(dir_at + 4 * c)
        rows, cols = min(band, shapes[k][0] - r0), shapes[k][1]
        freq, cum = tables[k]
        lanes = min(32, rows)
        at = streams + first_byte
        x = [u32(at + 4 * t) for t in range(lanes)]
        word = at + 4 * lanes
        for q in range(0, rows, 32):
            active = min(32, rows - q)
            for s in range(cols + active - 1):
                for t in range(active):
                    col = s - t
                    if not 0 <= col < cols:
                        continue
                    slot = x[t] & 4095
                    v = int(np.searchsorted(cum, slot, side="right") - 1)
                    x[t] = freq[v] * (x[t] >> 12) + slot - cum[v]
                    if x[t] < 1 << 16:
                        x[t] = x[t] << 16 | u16(word)
                        word += 2
                    syms[k][r0 + q + t, col] = v
        assert all(s == 1 << 16 for s in x) and (word - at + 3) & ~3 == end - first_byte
        first_byte = end
        for r in range(r0, r0 + rows):                   # the inverse predictor, row by row
            for col in range(cols):
                p = planes[k]
                a, u, ul = (p[r, col - 1] if col else 0), p[r - 1, col], p[r - 1, col - 1]
                pred = (128 if col == 0 else a) if r == r0 else (u if col == 0 else sorted([a, u, a + u - ul])[1])
                v = int(syms[k][r, col])
                p[r, col] = (pred + (-(v + 1) // 2 if v & 1 else v // 2)) & 255
    return pack_i420(*(p.astype(np.uint8) for p in planes)), syms


def lossless_size_bound(row, height, width, band=None):
    """An upper bound on one coded frame's bytes (csrc/lossless_math.h), from first principles rather
    than a measured ratio: each plane's MED symbols at their order-0 entropy, which rANS with one static
    table per plane approaches (12-bit frequencies lose a few percent: 3% allowed), plus the format's
    fixed parts: the 20-byte header, three tables (at most 512 bytes each, 4-byte aligned), per chunk one
    directory word, up to 32 four-byte lane states and 4 bytes of alignment, and the padding to 16."""
    if band is None:   # the encoder's default: the smallest multiple of 32 giving 32768 pixels of luma a chunk
        band = -(-(-(-32768 // width)) // 32) * 32
    total = 20 + 3 * (512 + 4) + 16
    for plane in split_i420(row, height, width):
        sym = np.asarray(med_symbols(plane, band)).ravel()
        p = np.bincount(sym, minlength=256) / max(sym.size, 1)
        p = p[p > 0]
        total += 1.03 * sym.size * float(-(p * np.log2(p)).sum()) / 8
        total += -(-plane.shape[0] // band) * (4 + 4 * min(32, band) + 4)
    return total
