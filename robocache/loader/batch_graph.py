"""Full batches as CUDA graph replays into a ring of static output slots.

Why a graph: a batch is ~15 small launches from Python (target times, one resample or fuse per
key, casts, normalization, masks); their host time is what a training step waits for
(docs/perf-notes.md v8). A replay is one launch, whatever the number of keys.

Why slots: a batch handed out must stay as it is while the caller holds it. Copying each replay's
outputs into fresh memory (allocation, the copy, ``record_stream``, the allocator's deferred
frees) cost the GR00T-style training step 5-9%, where the same GPU work into static memory cost
nothing measurable (docs/perf-notes.md v10). So ``SLOTS`` copies of the graph are
captured, each writing its own static outputs, and a replay goes to a slot that no handed-out
batch still uses. The batch's tensors are fresh aliases of the slot's outputs; they, and any view
the caller makes of them, hold a reference to the slot's storages, so a slot whose storages are
back to the references this file keeps is free. When every slot is in use (a caller keeping
batches, e.g. ``list(loader)``) the loader makes that batch eagerly, in fresh memory.

The graphs read the epoch's sample tables (static buffers the loader refills per epoch) at rows
``cursor * B + arange(B)`` and increment the shared device-side ``cursor``, so a replay needs no
host input and any slot makes the next batch.
"""

from __future__ import annotations

from typing import Callable

from .._C import _graph_launch
from .._util import torch as _torch

# a plain loop holds the previous batch while asking for the next, the loader holds the one it
# hands out and prefetches one more: 3; one spare for a caller that looks one batch ahead (as
# accelerate's loaders do)
SLOTS = 4


def supported() -> bool:
    """Slots need the storage use count (to see a slot is free) and the raw graph handle (to
    launch it without a stream switch in Python); torch has both since 2.9."""
    torch = _torch()
    return hasattr(torch._C, "_storage_Use_Count") and hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec")


class BatchGraph:
    """``make(episodes [B], times [B]) -> dict`` captured ``slots`` times over ``tables``
    (episode [N] int64, time [N] float64: the loader's static epoch tables) on the current
    stream, which must not be the default stream and is where the loader replays."""

    def __init__(self, make: Callable, tables, batch_size: int, slots: int = SLOTS):
        torch = _torch()
        episodes, times = tables
        dev = episodes.device
        self.device = dev.index if dev.index is not None else torch.cuda.current_device()
        self.cursor = torch.zeros((), dtype=torch.int64, device=dev)
        # every tensor the graphs read stays referenced here: memory freed after the capture would
        # go back to the allocator while replays still read it (steps did, and read garbage rows)
        self.steps = torch.arange(batch_size, dtype=torch.int64, device=dev)
        self.stream = torch.cuda.current_stream(dev)
        # a pool per slot: in a shared one a later capture may place its outputs in memory an
        # earlier slot uses for intermediates, which that slot's next replay would overwrite
        self.slots = [_Slot(self, make, episodes, times, batch_size) for _ in range(slots)]
        self.pending: set = set()        # replayed, not handed out yet: in use though unreferenced
        # the consumer's queue at a replay, which the replay waits for
        self.consumer_event = torch.cuda.Event()
        self.consumer_event.record(self.stream)   # (torch creates the CUDA event at its first record)
        self._handles = (self.stream.cuda_stream, self.consumer_event.cuda_event)
        self._consumer = None
        self._next = 0

    def __del__(self):
        # the graphs' memory pool goes back to the caching allocator with them, for any stream to
        # reuse: replays still queued (a prefetched batch nobody took, a loop left with break)
        # must have run first. A host sync, but on teardown, not per batch.
        try:
            self.stream.synchronize()
        except Exception:  # noqa: BLE001 - interpreter shutdown, a dead context: nothing to protect
            pass

    def reset(self, batch: int) -> None:
        """The next replay makes batch ``batch`` of the tables (enqueued on the current stream)."""
        self.cursor.fill_(batch)

    def replay(self, consumer, done: int, ready: int = 0) -> "_Slot | None":
        """Replay the next batch into a free slot on ``self.stream``, after the work queued so far
        on ``consumer`` (the slot's last batch may still be read there), record the event
        ``done`` after it, then make ``consumer`` wait for the event ``ready`` (0: no wait): the
        batch it takes now. Events as raw handles (``cuda_event``, which torch creates at the
        first record). None when every slot is in use, with nothing enqueued: the caller makes
        the batch another way."""
        if consumer is not self._consumer:
            if self._consumer is not None and consumer != self._consumer:
                # batches of an earlier iterator were read on its stream, which a replay must also
                # wait for (once per change of stream, not per batch)
                self.stream.wait_stream(self._consumer)
            self._consumer, self._consumer_handle = consumer, consumer.cuda_stream
        n = len(self.slots)
        for i in range(n):
            slot = self.slots[(self._next + i) % n]
            if slot not in self.pending and slot.outputs.free():
                stream, consumer_event = self._handles
                _graph_launch(slot.exec, stream, self._consumer_handle, consumer_event, done, ready, self.device)
                self.pending.add(slot)
                self._next = (self._next + i + 1) % n
                return slot
        return None

    def hand_out(self, slot: "_Slot") -> dict:
        """The batch ``slot`` holds, as fresh aliases of its outputs (which keep it in use)."""
        self.pending.discard(slot)
        return slot.outputs.aliases()


class _Slot:
    """One capture of the batch, writing ``outputs``."""

    def __init__(self, owner: BatchGraph, make: Callable, episodes, times, batch_size: int):
        torch = _torch()
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: other threads may keep using CUDA (and cudaMalloc) while this captures
        self.graph.capture_begin(capture_error_mode="thread_local")
        try:
            rows = owner.cursor * batch_size + owner.steps
            # no name keeps make's dict: its tensors would count as references in Outputs
            out = _owned(make(episodes.index_select(0, rows), times.index_select(0, rows)))
            owner.cursor.add_(1)
        except BaseException:
            try:
                self.graph.capture_end()
            except Exception:       # the capture was invalidated: the first error is the one to see
                pass
            raise
        self.graph.capture_end()
        self.exec = self.graph.raw_cuda_graph_exec()
        self.outputs = Outputs(out)


class Outputs:
    """A slot's static outputs (from ``_owned``: each over a storage of its own), handed out as
    aliases, and whether any alias, or a view of one, is still alive."""

    def __init__(self, out: dict):
        torch = _torch()
        self.tensors = out
        count = torch._C._storage_Use_Count
        cdata = [x.untyped_storage()._cdata for x in out.values()]   # the storage objects dropped
        self._counts = [(c, count(c)) for c in cdata]                 # ... before counting

    def free(self) -> bool:
        """No alias handed out (nor a view of one) still references the outputs' memory."""
        count = _torch()._C._storage_Use_Count
        # (a count below the baseline cannot happen: self.tensors hold theirs)
        return all(count(c) == n for c, n in self._counts)

    def aliases(self) -> dict:
        """The batch: fresh tensors over the outputs' memory (each holds a storage reference)."""
        return {k: x.detach() for k, x in self.tensors.items()}


def _owned(out: dict) -> dict:
    """The outputs, each over a storage of its own that nothing else references: one shared with
    another key, a view into a larger buffer or a broadcast is copied, inside the capture, into
    fresh slot memory. A whole view of a fresh intermediate (a reshaped voxel grid) is its own
    already. (An output that is itself a long-lived tensor would pass: the plans return none;
    test_graph_views_and_in_place_writes scribbles over every output to catch one.)"""
    torch = _torch()
    count = torch._C._storage_Use_Count
    seen, owned = set(), {}
    for k, x in out.items():
        st = x.untyped_storage()
        # references to the storage: x's, `st`'s, and the base's if x is a view
        alone = (count(st._cdata) == 2 + (x._base is not None)
                 and x.numel() * x.element_size() == st.nbytes() and st.data_ptr() not in seen)
        if not alone:
            x = x.clone(memory_format=torch.preserve_format)   # channels-last frames stay so
            st = x.untyped_storage()
        seen.add(st.data_ptr())
        owned[k] = x
    return owned
