"""One batch's launches captured once in a CUDA graph, replayed for every full batch.

Why: a batch is ~15 small launches from Python (target times, one resample or fuse per key,
casts, normalization, masks); their host time, not the GPU, is what a training step waits for
(docs/perf-notes.md v8). Replayed, a batch costs one graph launch, one copy of the small
outputs and one op per large output, whatever the number of keys.

The graph reads the epoch's sample tables (static buffers the loader refills per epoch) at rows
``cursor * B + arange(B)`` and increments the device-side ``cursor`` itself, so a replay needs
no host input. Its outputs are static memory, overwritten by the next replay; the batch handed
out must not be (the caller may keep it), so each replay is followed by copies into fresh
tensors: the small outputs packed in one buffer copied with one ``clone`` and handed out as
views of it; large ones cloned one by one; ``BTCHW`` frames converted from the static uint8
gather by the same single pass the eager path uses (so no extra copy of the biggest output).
"""

from __future__ import annotations

from typing import Callable

from .dataset import _torch

# outputs at least this big are copied out one by one instead of through the packed buffer
# (their own copy is one pass; packing would add a second)
LARGE = 1 << 20
ALIGN = 16


class BatchGraph:
    """``make(episodes [B], times [B], late) -> dict`` captured over ``tables`` (episode [N]
    int64, time [N] float64: the loader's static epoch tables) on the current stream, which must
    not be the default stream. ``late[key] = finish`` marks outputs whose last op runs after the
    replay: ``finish(static) -> fresh tensor``."""

    def __init__(self, make: Callable, tables, batch_size: int):
        torch = _torch()
        episodes, times = tables
        dev = episodes.device
        self.cursor = torch.zeros((), dtype=torch.int64, device=dev)
        # every tensor the graph reads stays referenced here: memory freed after the capture would
        # go back to the allocator while replays still read it (steps did, and read garbage rows)
        self.steps = torch.arange(batch_size, dtype=torch.int64, device=dev)
        self.stream = torch.cuda.current_stream(dev)   # where the loader replays it
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: other threads may keep using CUDA (and cudaMalloc) while this captures
        self.graph.capture_begin(capture_error_mode="thread_local")
        try:
            rows = self.cursor * batch_size + self.steps
            late: dict = {}
            out = make(episodes.index_select(0, rows), times.index_select(0, rows), late)
            self.cursor.add_(1)
            self._pack(out, late)
        except BaseException:
            try:
                self.graph.capture_end()
            except Exception:       # the capture was invalidated: the first error is the one to see
                pass
            raise
        self.graph.capture_end()

    def _pack(self, out: dict, late: dict) -> None:
        torch = _torch()
        nbytes = {k: x.numel() * x.element_size() for k, x in out.items()}
        small = [k for k in out if k not in late and nbytes[k] < LARGE]
        room = lambda k: -(-nbytes[k] // ALIGN) * ALIGN
        total = sum(room(k) for k in small)
        self.flat = torch.empty(total, dtype=torch.uint8, device=self.cursor.device) if small else None
        self.dtypes = list(dict.fromkeys(out[k].dtype for k in small))
        self.plan = []                 # (key, how, what) in the eager dict's key order
        at = 0
        for k, x in out.items():
            if k in late:
                self.plan.append((k, "late", (x, late[k])))
            elif k in small:
                stride = _dense_strides(x)        # keep channels-last frames channels-last
                offset = at // x.element_size()
                at += room(k)
                self.flat.view(x.dtype).as_strided(x.shape, stride, offset).copy_(x)
                self.plan.append((k, "small", (x.dtype, x.shape, stride, offset)))
            else:
                self.plan.append((k, "large", x))

    def __del__(self):
        # the graph's memory pool goes back to the caching allocator with it, for any stream to
        # reuse: replays still queued (a prefetched batch nobody took, a loop left with break)
        # must have run first. A host sync, but on teardown, not per batch.
        try:
            self.stream.synchronize()
        except Exception:  # noqa: BLE001 - interpreter shutdown, a dead context: nothing to protect
            pass

    def reset(self, batch: int) -> None:
        """The next replay makes batch ``batch`` of the tables."""
        self.cursor.fill_(batch)

    def __call__(self):
        """Replay on the current stream: ``(batch dict, tensors owning its memory)``."""
        self.graph.replay()
        owners, typed = [], {}
        if self.flat is not None:
            flat = self.flat.clone()
            owners.append(flat)
            typed = {dt: flat.view(dt) for dt in self.dtypes}
        out = {}
        for k, how, what in self.plan:
            if how == "small":               # one op per key: host time is what this file saves
                dtype, shape, stride, offset = what
                out[k] = typed[dtype].as_strided(shape, stride, offset)
                continue
            x = what.clone() if how == "large" else what[1](what[0])
            out[k] = x
            owners.append(x)
        return out, owners


def _dense_strides(x) -> tuple[int, ...]:
    """x's strides when its elements tile a block without gaps or overlap (any dim order, as
    ``clone`` would keep them), else the contiguous ones (e.g. for a broadcast view)."""
    want, stride = 1, [0] * x.dim()
    for d in sorted(range(x.dim()), key=lambda d: (x.stride(d), -d)):
        if x.size(d) != 1 and x.stride(d) != want:
            break
        stride[d] = x.stride(d) if x.size(d) != 1 else want
        want *= x.size(d)
    else:
        return tuple(stride)
    want, stride = 1, [0] * x.dim()
    for d in reversed(range(x.dim())):
        stride[d] = want
        want *= x.size(d)
    return tuple(stride)
