"""Augment: a list of transforms made into one pass of the frame gather.

The list is read as torchvision would run it, one transform after the other, and laid out on the
kernel's fixed chain (csrc/augment_math.h): crop -> resize -> crop (out's window) -> the op list
(colour ops and the affine, in the list's order) -> normalize, with a flip before or after the
affine (a flip before a crop mirrors that crop's box, which is the same image). What cannot be laid
out so is refused by name: a crop or resize after a colour op or the affine (contrast means,
sharpness neighbours and the warp's fill would change), two resizes, more than 8 ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .._util import torch as _torch
from . import draw as D
from .transforms import (ColorJitter, FractionCrop, Normalize, RandomAdjustSharpness, RandomAffine,
                         RandomCrop, RandomGrayscale, RandomHorizontalFlip, RandomResizedCrop, RandomRotation,
                         RandomSubset, Resize, SharpnessJitter, Transform)


@dataclass
class Layout:
    """The chain for frames of one size: sizes through it, and where each transform went."""
    crop1: Transform | None       # on the stored frame (RandomResizedCrop includes its resize)
    crop1_size: tuple[int, int]   # (h, w) of crop1's box (the frame when None)
    resize: tuple[int, int]       # (h, w) the box is resized to
    antialias: bool
    crop2: Transform | None       # out's window of the resized box
    out: tuple[int, int]          # (Ho, Wo)
    flip: RandomHorizontalFlip | None
    flip_mirrors: tuple[bool, bool]   # the flip comes before crop1 / crop2 (their boxes mirror)
    flip_after_affine: bool
    ops: list                     # colour transforms, RandomSubset, the top-level affine, in order
    normalize: Normalize | None
    entries: int                  # op-list length
    contrast: bool                # some row may hold a contrast op (the kernel needs scratch)


def _entries(t: Transform) -> int:
    """Op-list entries a colour-phase transform takes."""
    if isinstance(t, ColorJitter):
        return sum(r is not None for _, r in t.ranges)
    if isinstance(t, RandomSubset):
        return sum(_entries(m) for m in t.transforms)
    return 1


def _has_contrast(t: Transform) -> bool:
    if isinstance(t, ColorJitter):
        return t.contrast is not None
    return isinstance(t, RandomSubset) and any(_has_contrast(m) for m in t.transforms)


def _has_affine(t: Transform) -> bool:
    return isinstance(t, RandomAffine) or (isinstance(t, RandomSubset)
                                           and any(isinstance(m, RandomAffine) for m in t.transforms))


class Augment:
    """Per-sample random image transforms applied inside the frame gather (GPU or C CPU kernels).

    Parameters
    ----------
    transforms : sequence of transforms
        From ``robocache.augment`` (named and parametrized as torchvision v2's: ``RandomResizedCrop``,
        ``RandomCrop``, ``CenterCrop``, ``Resize``, ``RandomHorizontalFlip``, ``RandomRotation``,
        ``RandomAffine``, ``ColorJitter``, ``RandomAdjustSharpness``, ``RandomGrayscale``, ``Normalize``;
        GR00T's ``FractionCrop``; LeRobot's ``SharpnessJitter`` and ``RandomSubset``). A torchvision v2
        ``Compose`` is taken by :meth:`from_torchvision`.
    share_cameras : bool
        Every camera of a sample gets the same parameters (GR00T: one draw per sample for all views)
        instead of its own (LeRobot: each camera key is transformed separately). The time steps of one
        window always share their sample's parameters (torchvision on a ``[T, C, H, W]`` clip).
    training : bool
        Train mode draws; eval mode (``.eval()``) centers the crops and turns off every random op.
    """

    transforms: tuple

    def __init__(self, transforms: Sequence[Transform], *, share_cameras: bool = False, training: bool = True):
        ts: list = list(transforms)
        for t in ts:
            if not isinstance(t, Transform):
                raise TypeError(f"Augment: {t!r} is not a robocache.augment transform (a torchvision Compose goes "
                                "through Augment.from_torchvision)")
        self.transforms = tuple(ts)
        self.share_cameras = bool(share_cameras)
        self.training = bool(training)
        self._layouts: dict[tuple[int, int], Layout] = {}
        self._slots: dict[tuple[int, int, bool], int] = {}
        self._templates: dict[Any, Any] = {}
        self._consts: dict[Any, Any] = {}
        self.layout(256, 256, strict=False)       # structure errors now, not at the first batch

    @classmethod
    def from_torchvision(cls, compose, **kw) -> "Augment":
        """An Augment from a torchvision v2 ``Compose`` (or list) of the supported transforms; any other
        transform is an error naming it."""
        from .torchvision import convert
        return cls(convert(compose), **kw)

    def train(self, mode: bool = True) -> "Augment":
        self.training = bool(mode)
        return self

    def eval(self) -> "Augment":
        return self.train(False)

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Augment([{inner}], share_cameras={self.share_cameras}, training={self.training})"

    # --- layout ---------------------------------------------------------------------------------

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        """``(H', W')`` of the output for stored frames of ``height x width``."""
        return self.layout(height, width).out

    def layout(self, height: int, width: int, strict: bool = True) -> Layout:
        """The chain for frames of this size (sizes checked against the frame when ``strict``)."""
        key = (int(height), int(width))
        if strict and key in self._layouts:
            return self._layouts[key]
        H, W = key
        crop1 = crop2 = flip = norm = None
        resize, antialias, size = (H, W), True, (H, W)
        crop1_size = (H, W)
        resized = False
        mirrors = [False, False]
        flip_after_affine = False
        ops: list = []
        where = "Augment"
        for t in self.transforms:
            name = type(t).__name__
            if norm is not None:
                raise ValueError(f"{where}: {name} after Normalize; Normalize comes last")
            if t.kind in ("crop", "resize") and ops:
                raise ValueError(f"{where}: {name} after {type(ops[-1]).__name__}: robocache crops and resizes "
                                 "before the colour ops and the affine (an image mean, a sharpness neighbourhood "
                                 "or the warp's fill would change); move it before them")
            if isinstance(t, RandomResizedCrop):
                if crop1 is not None or resized:
                    raise ValueError(f"{where}: RandomResizedCrop must be the first crop and resize")
                crop1, resized, antialias = t, True, t.antialias
                crop1_size = (0, 0)                     # varies per sample
                size = (t.size[0], t.size[-1])
                resize = size
            elif t.kind == "crop":
                box = self._crop_size(t, size, strict)
                if not resized and crop2 is None and crop1 is None:
                    crop1, crop1_size = t, box
                    if flip is not None:
                        mirrors[0] = True
                    resize = box
                elif crop2 is None:
                    if resized or crop1 is not None:
                        crop2 = t
                        if flip is not None:
                            mirrors[1] = True
                else:
                    raise ValueError(f"{where}: more than two crops")
                size = box
            elif isinstance(t, Resize):
                if resized:
                    raise ValueError(f"{where}: two resizes (robocache resizes once, from the stored frame); "
                                     "keep the last one")
                if crop2 is not None:
                    raise ValueError(f"{where}: Resize after a second crop")
                resized, antialias = True, t.antialias
                size = self._resized_size(t, size)
                resize = size
            elif isinstance(t, RandomHorizontalFlip):
                if flip is not None:
                    raise ValueError(f"{where}: two RandomHorizontalFlips")
                flip = t
            elif isinstance(t, Normalize):
                norm = t
            else:                                   # colour ops, subsets, the affine
                if _has_affine(t) and any(_has_affine(o) for o in ops):
                    raise ValueError(f"{where}: two affines/rotations (robocache warps once)")
                ops.append(t)
            if isinstance(t, RandomHorizontalFlip) and any(_has_affine(o) for o in ops):
                flip_after_affine = True
        if crop2 is not None and not resized:       # crop of a crop: one box, out's window inside it
            resize = crop1_size
        entries = sum(_entries(o) for o in ops)
        if entries > D.MAX_COLOR:
            raise ValueError(f"{where}: {entries} ops in the colour/affine list, at most {D.MAX_COLOR}")
        lay = Layout(crop1, crop1_size, resize, antialias, crop2, size, flip, (mirrors[0], mirrors[1]),
                     flip_after_affine, ops, norm, entries, any(_has_contrast(o) for o in ops))
        if strict:
            self._layouts[key] = lay
        return lay

    @staticmethod
    def _crop_size(t: Any, size: tuple[int, int], strict: bool) -> tuple[int, int]:
        h, w = size
        if isinstance(t, FractionCrop):
            box = (max(1, int(h * t.fraction)), max(1, int(w * t.fraction)))
        else:
            box = (t.size[0], t.size[-1])
        if strict and (box[0] > h or box[1] > w):
            raise ValueError(f"{type(t).__name__}: a {box[0]}x{box[1]} crop does not fit the {h}x{w} image it "
                             "is given (robocache does not pad)")
        return box

    @staticmethod
    def _resized_size(t: Resize, size: tuple[int, int]) -> tuple[int, int]:
        """torchvision's ``_compute_resized_output_size``."""
        if len(t.size) == 2:
            return t.size[0], t.size[1]
        h, w = size
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = t.size[0], int(t.size[0] * long / short)
        if t.max_size is not None and new_long > t.max_size:
            new_short, new_long = int(t.max_size * new_short / new_long), t.max_size
        return (new_long, new_short) if w <= h else (new_short, new_long)

    # --- drawing --------------------------------------------------------------------------------

    def needs_scratch(self, height: int, width: int) -> bool:
        return self.training and self.layout(height, width).contrast

    def params(self, key, episodes, times, camera: int, height: int, width: int):
        """Parameter rows ``[B, RC_AUG_NPARAMS]`` float32 on the device of ``episodes``: one per sample
        (episode, anchor time), for stored frames of ``height x width``; ``key``: a one-element int64
        tensor on that device (``draw.epoch_key(seed, epoch)``), read on the device (graph-safe)."""
        lay = self.layout(height, width)
        cam = 0 if self.share_cameras else int(camera)
        n = self._slot_count(lay, height, width)
        u = D.uniforms(key, episodes, times, cam, max(n, 1))
        return self._rows(lay, D.Slots(u), height, width, int(episodes.shape[0]), episodes.device)

    def _slot_count(self, lay: Layout, height: int, width: int) -> int:
        """Uniforms one sample takes (a dry run on one CPU sample, once per size and mode)."""
        k = (height, width, self.training)
        if k not in self._slots:
            torch = _torch()
            slots = D.Slots(torch.zeros(1, 256, dtype=torch.float64))
            self._rows(lay, slots, height, width, 1, torch.device("cpu"))
            self._slots[k] = slots.count
        return self._slots[k]

    def _template(self, lay: Layout, height: int, width: int, device):
        """The row every sample starts from (identity geometry, no ops), on ``device``."""
        k = (height, width, str(device), self.training)
        if k not in self._templates:
            torch = _torch()
            row = torch.zeros(D.NPARAMS, dtype=torch.float32)
            row[D.CROP_H], row[D.CROP_W] = lay.crop1_size if lay.crop1_size[0] else (height, width)
            row[D.RESIZE_H], row[D.RESIZE_W] = lay.resize
            row[D.THETA:D.THETA + 6] = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])
            row[D.NCOLOR] = lay.entries if self.training else 0
            self._templates[k] = row.to(device)
        return self._templates[k]

    def _const(self, values, dtype, device):
        """A small constant tensor on ``device``, made once (a host-to-device copy is a sync, and cannot
        happen inside a CUDA-graph capture; the first, eager batch makes every one)."""
        k = (tuple(values), str(dtype), str(device))
        if k not in self._consts:
            self._consts[k] = _torch().tensor(list(values), dtype=dtype).to(device)
        return self._consts[k]

    def _rows(self, lay: Layout, slots: D.Slots, H: int, W: int, B: int, device):
        torch = _torch()
        f64 = dict(dtype=torch.float64, device=device)
        cols: dict[int, Any] = {}
        train = self.training
        # crop1 on the stored frame
        if isinstance(lay.crop1, RandomResizedCrop):
            t = lay.crop1
            if train:
                top, left, h, w = D.resized_crop_box(slots, H, W, t.scale, t.ratio)
            else:
                top, left, h, w = (torch.full((B,), float(v), **f64) for v in D.resized_crop_fallback(H, W, t.ratio))
            cols.update({D.CROP_TOP: top, D.CROP_LEFT: left, D.CROP_H: h, D.CROP_W: w})
            w1 = w
        elif lay.crop1 is not None:
            ch, cw = lay.crop1_size
            top, left = self._position(lay.crop1, slots, H - ch, W - cw, B, f64)
            cols.update({D.CROP_TOP: top, D.CROP_LEFT: left})
            w1 = float(cw)
        if lay.crop2 is not None:
            rh, rw = lay.resize
            oh, ow = lay.out
            top2, left2 = self._position(lay.crop2, slots, rh - oh, rw - ow, B, f64)
            cols.update({D.OUT_TOP: top2, D.OUT_LEFT: left2})
        # the flip, and the boxes it mirrors
        if lay.flip is not None and train:
            flipped = slots.take() < lay.flip.p
            code = 1.0 if lay.flip_after_affine else 2.0
            cols[D.FLIP] = torch.where(flipped, code, 0.0)
            if lay.flip_mirrors[0] and lay.crop1 is not None:
                cols[D.CROP_LEFT] = torch.where(flipped, W - cols[D.CROP_LEFT] - w1, cols[D.CROP_LEFT])
            if lay.flip_mirrors[1] and lay.crop2 is not None:
                rw, ow = lay.resize[1], lay.out[1]
                cols[D.OUT_LEFT] = torch.where(flipped, rw - cols[D.OUT_LEFT] - ow, cols[D.OUT_LEFT])
        # the op list (train only)
        if train and lay.ops:
            codes, factors, affine = self._ops(lay, slots, B, f64)
            ops = torch.stack([codes, factors], dim=2).reshape(B, -1)
            for j in range(ops.shape[1]):
                cols[D.COLOR + j] = ops[:, j]
            if affine is not None:
                interp, theta = affine
                cols[D.AFFINE] = interp
                for j in range(6):
                    cols[D.THETA + j] = theta[:, j]
        row = self._template(lay, H, W, device).repeat(B, 1)
        if cols:
            idx = sorted(cols)
            vals = torch.stack([torch.as_tensor(cols[i], **f64).expand(B) for i in idx], dim=1)
            row.index_copy_(1, self._const(idx, torch.int64, device), vals.to(torch.float32))
        return row

    def _position(self, t: Transform, slots: D.Slots, dh: int, dw: int, B: int, f64):
        """(top, left) of a crop with dh, dw pixels to spare: uniform (train, random crops) or centered."""
        torch = _torch()
        if self.training and isinstance(t, (RandomCrop, FractionCrop)):
            return D.randint(slots.take(), dh + 1), D.randint(slots.take(), dw + 1)
        return (torch.full((B,), float(int(round(dh / 2.0))), **f64),
                torch.full((B,), float(int(round(dw / 2.0))), **f64))

    def _ops(self, lay: Layout, slots: D.Slots, B: int, f64):
        """The op list ``(codes [B, L], factors [B, L], affine (interp [B], theta [B, 6]) or None)``."""
        torch = _torch()
        codes, factors = [], []
        affine = None
        for t in lay.ops:
            if isinstance(t, RandomSubset):
                c, f, a = self._subset(t, lay, slots, B, f64)
            else:
                c, f, a = self._member(t, lay, slots, B, f64)
            codes.append(c)
            factors.append(f)
            affine = affine if a is None else a
        L = D.MAX_COLOR
        pad = L - sum(c.shape[1] for c in codes)
        if pad:
            codes.append(torch.zeros(B, pad, **f64))
            factors.append(torch.zeros(B, pad, **f64))
        return torch.cat(codes, dim=1), torch.cat(factors, dim=1), affine

    def _member(self, t: Transform, lay: Layout, slots: D.Slots, B: int, f64):
        """One transform's entries ``(codes [B, k], factors [B, k], affine or None)``, always applied."""
        torch = _torch()
        if isinstance(t, ColorJitter):
            present = [(D.JITTER_CODES[name], r) for name, r in t.ranges if r is not None]
            fac = torch.stack([D.uniform(slots.take(), r[0], r[1]) for _, r in present], dim=1)
            code = self._const([float(c) for c, _ in present], torch.float64, f64["device"]).expand(B, -1)
            if len(present) > 1 and not t.fixed_order:
                perm = slots.take(len(present)).argsort(dim=1)     # torch.randperm per sample
                code, fac = code.gather(1, perm), fac.gather(1, perm)
            return code, fac, None
        if isinstance(t, SharpnessJitter):
            f = D.uniform(slots.take(), t.sharpness[0], t.sharpness[1])
            return torch.full((B, 1), float(D.SHARPNESS), **f64), f[:, None], None
        if isinstance(t, RandomAdjustSharpness):
            on = slots.take() < t.p
            return (torch.where(on, float(D.SHARPNESS), 0.0)[:, None],
                    torch.full((B, 1), float(t.sharpness_factor), **f64), None)
        if isinstance(t, RandomGrayscale):
            on = slots.take() < t.p
            return torch.where(on, float(D.GRAYSCALE), 0.0)[:, None], torch.zeros(B, 1, **f64), None
        if isinstance(t, RandomAffine):
            theta = self._affine_theta(t, lay, slots, B, f64)
            interp = torch.full((B,), 1.0 if t.interpolation == "nearest" else 2.0, **f64)
            return torch.full((B, 1), float(D.AFFINE_AT), **f64), torch.zeros(B, 1, **f64), (interp, theta)
        raise TypeError(f"Augment: {type(t).__name__} has no op-list entry")

    def _affine_theta(self, t: RandomAffine, lay: Layout, slots: D.Slots, B: int, f64):
        """torchvision's RandomAffine.make_params + the inverse matrix (RandomRotation: rotate's -angle)."""
        torch = _torch()
        Ho, Wo = lay.out
        angle = D.uniform(slots.take(), t.degrees[0], t.degrees[1])
        zero = torch.zeros(B, **f64)
        tx = ty = zero
        if t.translate is not None:
            mx, my = float(t.translate[0] * Wo), float(t.translate[1] * Ho)
            tx = D.round_half_even(D.uniform(slots.take(), -mx, mx))
            ty = D.round_half_even(D.uniform(slots.take(), -my, my))
        scale = D.uniform(slots.take(), t.scale[0], t.scale[1]) if t.scale is not None else zero + 1.0
        sx = sy = zero
        if t.shear is not None:
            sx = D.uniform(slots.take(), t.shear[0], t.shear[1])
            if len(t.shear) == 4:
                sy = D.uniform(slots.take(), t.shear[2], t.shear[3])
        if isinstance(t, RandomRotation):
            angle = -angle
        return D.inverse_affine(angle, tx, ty, scale, sx, sy)

    def _subset(self, t: RandomSubset, lay: Layout, slots: D.Slots, B: int, f64):
        """LeRobot's RandomSubsetApply: n members without replacement, weights as torch.multinomial's
        (exponential race: the same law, the draw order by descending key), in list or drawn order."""
        torch = _torch()
        m = len(t.transforms)
        u = slots.take(m) if m > 1 else slots.take()[:, None]
        w = self._const(t.weights, torch.float64, f64["device"])
        race = torch.log(1.0 - u) / w                     # larger = drawn earlier
        rank = (-race).argsort(dim=1).argsort(dim=1)      # each member's place in the draw order
        chosen = rank < t.n
        parts = [self._member(x, lay, slots, B, f64) for x in t.transforms]
        affine = None
        codes, factors = [], []
        for j, (c, f, a) in enumerate(parts):
            on = chosen[:, j:j + 1]
            codes.append(torch.where(on, c, 0.0))
            factors.append(f)
            if a is not None:
                affine = (torch.where(chosen[:, j], a[0], 0.0), a[1])
        if t.random_order:
            if any(c.shape[1] != 1 for c in codes):
                raise ValueError("RandomSubset(random_order=True): each member must be one op (a ColorJitter "
                                 "with one factor, a sharpness, a grayscale or an affine)")
            order = torch.where(chosen, rank, m + torch.arange(m, device=rank.device)).argsort(dim=1)
            return (torch.cat(codes, dim=1).gather(1, order), torch.cat(factors, dim=1).gather(1, order), affine)
        return torch.cat(codes, dim=1), torch.cat(factors, dim=1), affine
