"""A DataLoader's batches on a GPU: prefetch on a side stream, graph replays, the staging thread.

Batch k+1 is enqueued on a side stream before batch k is handed over; events order the consumer
after it, and nothing reads the device back: no host sync per batch. Full batches are replays of a
captured CUDA graph into static output slots the handed-out batches alias (batch_graph.py), captured
at the second batch; the others (the first, the last short one, one while the caller holds every
slot) are made eagerly in fresh memory (``record_stream``). A loader whose windows do host work per
batch (frames staged from disk or decoded by nvJPEG) makes its batches on threads of its own instead,
``STAGED_AHEAD`` ahead, and never captures (a replay cannot repeat host work). Two ahead on two threads:
nvJPEG's batched decode holds its thread until the frames are decoded (9.8-11 ms for 256 atlases on an
H100), so with one thread the batch's other host work (frame ids, launches: ~4 ms) waited behind it;
with two, one batch's decode overlaps the next one's other work (docs/perf-notes.md, the atlas).

The loader gives an epoch's tables (computed inside ``stream()``) and what a batch is (a
plans.BatchPlan, ``recipe``); this file says when and on which stream each batch is made, and calls
nothing of the loader back.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Generator, Iterator

#: ``(k, batch)`` pairs of an epoch; close it to end the epoch early
Run = Generator[tuple[int, dict], None, None]

#: host-staged batches in flight at once (each made on its own staging thread)
STAGED_AHEAD = 2

from .._util import torch as _torch
from ..user_warning import warn


def make(recipe, tables, k: int, batch_size: int, host_samples: Callable) -> dict:
    """Batch k of an epoch's ``tables`` ``(episodes, times, host_order)``: a slice of them (a view) made
    by ``recipe``; ``host_samples(rows)`` gives the samples ``rows`` on the host to a window that asks."""
    episodes, times, host_order = tables
    a, b = k * batch_size, (k + 1) * batch_size
    return recipe.make(episodes[a:b], times[a:b], lambda: host_samples(host_order[a:b]))


class CpuBatches:
    """Batches on the CPU: each made when asked for."""

    graphs = False

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def forget(self) -> None:
        pass

    def stream(self):
        """Where an epoch's tables are computed: the current stream (the CPU has one)."""
        return contextlib.nullcontext()

    def run(self, recipe, tables, start: int, n: int, host_samples: Callable, staged: bool) -> Run:
        """``(k, batch)`` for batches ``start`` to ``n - 1`` of an epoch's ``tables``."""
        for k in range(start, n):
            yield k, make(recipe, tables, k, self.batch_size, host_samples)


class CudaBatches:
    """One loader's CUDA state, kept across its epochs: the side stream and its two events, the
    batch graph and the static tables it reads, the staging thread. ``graphs``: capture full batches
    (turns False when a capture fails: not retried)."""

    def __init__(self, device, batch_size: int, graphs: bool) -> None:
        self.device, self.batch_size = device, batch_size
        self.graphs = graphs
        self.graph: Any = None          # batch_graph.BatchGraph, built at the second batch
        self.side: Any = None           # the side stream, made at the first epoch
        self._tables: Any = None        # the static (episodes, times) the graph reads
        self._warm = False              # a batch was made eagerly: every kernel loaded, lazy table built
        self._stager: Any = None        # the thread of host-staged batches
        # one iterator at a time replays the graph (it owns the static tables, the cursor, the
        # slots); a second live iterator of the same loader makes its batches eagerly
        self._lock = threading.Lock()

    def forget(self) -> None:
        """The loader holds another dataset: a graph captured over the old one reads its tables;
        dropping it waits for its queued replays (BatchGraph.__del__)."""
        self.graph, self._tables = None, None

    @contextlib.contextmanager
    def stream(self):
        """The side stream, after whatever the consumer enqueued so far (e.g. the dataset's upload):
        where an epoch's tables are computed."""
        torch = _torch()
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            yield side

    def run(self, recipe, tables, start: int, n: int, host_samples: Callable, staged: bool) -> Run:
        """``(k, batch)`` for batches ``start`` to ``n - 1`` of an epoch's ``tables`` ``(episodes, times,
        host_order)`` (made on the side stream); ``staged``: the batches do host work (made on the
        staging thread). Close it to release the graph for another iterator."""
        torch = _torch()
        consumer = torch.cuda.current_stream(self.device)
        graphed = self.graphs and self._lock.acquire(blocking=False)
        try:
            if graphed:
                with torch.cuda.stream(self.side):
                    tables = (*self._static(*tables[:2]), tables[2])
                    if self.graph is not None:
                        self.graph.reset(start)
            run = _Epoch(self, recipe, consumer, tables, host_samples, graphed)
            yield from run.batches(start, n, self._thread() if staged else None)
        finally:
            if graphed:
                if self.graph is not None:
                    self.graph.pending.clear()     # a prefetched batch nobody will take
                self._lock.release()

    def _side_stream(self):
        if self.side is None:
            torch = _torch()
            # above the training step's priority: a batch is a few short kernels the step will
            # wait for, and behind the step's long ones its cost in the GR00T-style step was 1.9%
            # against 0.4% ahead of them (docs/perf-notes.md v10)
            self.side = torch.cuda.Stream(self.device, priority=-1)
            # two in turn for replays and prefetch; STAGED_AHEAD + 1 for staged batches (the one the
            # consumer holds and those in flight)
            self.events = tuple(torch.cuda.Event() for _ in range(max(2, STAGED_AHEAD + 1)))
            for e in self.events:
                e.record(self.side)    # torch creates the CUDA event at its first record
            self.handles = tuple(e.cuda_event for e in self.events)
        return self.side

    def _static(self, episodes, times):
        """The epoch's tables copied into the buffers a captured graph reads."""
        torch = _torch()
        n = int(times.shape[0])
        if self._tables is None or int(self._tables[0].shape[0]) != n:
            # a sampler whose length changed: the graph reads the old tables; dropping it waits
            # for its queued replays (BatchGraph.__del__)
            self.graph = None
            self._tables = (torch.empty(n, dtype=torch.int64, device=self.device),
                            torch.empty(n, dtype=torch.float64, device=self.device))
        self._tables[0].copy_(episodes)
        self._tables[1].copy_(times)
        return self._tables

    def _thread(self):
        """The loader's thread for host-staged batches (made once, kept with the loader)."""
        if self._stager is None:
            from concurrent.futures import ThreadPoolExecutor
            self._stager = ThreadPoolExecutor(STAGED_AHEAD, thread_name_prefix="robocache-batch")
        return self._stager

    def capture(self, make_rows: Callable, tables, k: int) -> None:
        """Capture the batch graph's slots over the static tables (after one eager batch: every
        kernel loaded, every lazy table built); on failure, warn once and stay eager."""
        from . import batch_graph
        torch = _torch()
        try:
            if not batch_graph.supported():
                raise RuntimeError(f"torch {torch.__version__} lacks the storage use count or the raw graph "
                                   "handle (torch >= 2.9 has both)")
            try:
                self.graph = batch_graph.BatchGraph(make_rows, tables, self.batch_size)
            except torch.cuda.OutOfMemoryError:
                # the memory pools of dead graphs (earlier loaders') go back to the device only when
                # the allocator empties its cache, which it cannot do inside a capture (measured: 61
                # GB of them on an H100 after one loader per epoch for a minute); once, not per batch
                torch.cuda.empty_cache()
                self.graph = batch_graph.BatchGraph(make_rows, tables, self.batch_size)
        except Exception as e:  # noqa: BLE001 - any capture failure: the eager path still works
            self.graphs = False
            warn(f"robocache.DataLoader: CUDA graph capture failed ({type(e).__name__}: {e}); batches are made "
                 "without it (cuda_graph=False silences this)", RuntimeWarning)
            return
        self.graph.reset(k)


class _Epoch:
    """One iterator's pass over an epoch's tables: which batches replay, which are made eagerly,
    and the consumer's waits."""

    def __init__(self, owner: CudaBatches, recipe, consumer, tables, host_samples: Callable, graphed: bool) -> None:
        self.owner, self.recipe, self.consumer, self.graphed = owner, recipe, consumer, graphed
        self.tables, self.host_samples = tables, host_samples
        self.episodes, self.times = tables[0], tables[1]
        # batches of batch_size samples (of this part of the epoch: a resumed one's rest is shorter)
        self.full = int(self.times.shape[0]) // owner.batch_size

    def batches(self, start: int, n: int, stager) -> Iterator[tuple[int, dict]]:
        """``(k, batch)`` for k in ``start..n-1``, batch k+1 enqueued before batch k is handed
        over (made on ``stager``'s threads, STAGED_AHEAD ahead, when it is not None)."""
        if stager is not None:
            yield from self._staged(start, n, stager)
            return
        owner, consumer = self.owner, self.consumer
        nxt: Any = None if start >= n else self.prepare(start, 0)
        for k in range(start, n):
            slot, batch, ready = nxt
            # batch k+1 is enqueued before the consumer's work on k; a replay queues the
            # consumer's wait for batch k in the same C call (host time is the loader's cost
            # in a host-bound step: docs/perf-notes.md v11)
            nxt = None if k + 1 >= n else self.prepare(k + 1, owner.handles[k % 2])
            if nxt is None or nxt[0] is None:
                consumer.wait_event(ready)
            yield k, self._take(slot, batch)

    def _staged(self, start: int, n: int, stager) -> Iterator[tuple[int, dict]]:
        """Batches made on the staging threads, STAGED_AHEAD in flight: batch k + STAGED_AHEAD is
        submitted when batch k is handed over. Each batch's event is its own until the consumer has
        queued its wait (events in turn, STAGED_AHEAD + 1 of them)."""
        from collections import deque
        ahead = deque(stager.submit(self._on_device, j) for j in range(start, min(n, start + STAGED_AHEAD)))
        for k in range(start, n):
            slot, batch, ready = ahead.popleft().result()
            self.consumer.wait_event(ready)
            if k + STAGED_AHEAD < n:
                ahead.append(stager.submit(self._on_device, k + STAGED_AHEAD))
            yield k, self._take(slot, batch)

    def _on_device(self, k: int):
        with _torch().cuda.device(self.owner.device):
            return self.prepare(k)

    def _take(self, slot, batch) -> dict:
        """The batch handed over: a slot's aliases, or an eager batch kept alive for the consumer."""
        if slot is not None:
            return self.owner.graph.hand_out(slot)
        for v in batch.values():
            # made on the side stream, used on the consumer's: the allocator must not hand the
            # memory back to the side stream before the consumer's work on it has run
            v.record_stream(self.consumer)
        return batch

    def prepare(self, k: int, wait: int = 0):
        """Batch k enqueued on the side stream: (graph slot or None, eager batch or None, its event).
        A replay also makes the consumer wait for the event handle ``wait`` (batch k-1's)."""
        owner = self.owner
        # events in turn: batch k's is waited on before batch k + len(events) records it again
        ready = owner.events[k % 2] if self.graphed else owner.events[k % (STAGED_AHEAD + 1)]
        if self.graphed and k < self.full:
            slot = self._replay(k, wait)
            if slot is not None:
                return slot, None, ready
        # eager: the first batch (warm-up), the last short one, a batch when every graph
        # slot is still held by the caller
        torch = _torch()
        with torch.cuda.stream(owner.side):
            batch = make(self.recipe, self.tables, k, owner.batch_size, self.host_samples)
            if self.graphed and owner.graph is not None:
                owner.graph.reset(k + 1)            # replays go on after this batch
            ready.record(owner.side)
        owner._warm = True
        return None, batch, ready

    def _replay(self, k: int, wait: int):
        """Batch k replayed into a free graph slot (captured first, after one eager batch), or None."""
        owner = self.owner
        # (graphs turns False when a capture fails: not retried every batch)
        if owner.graph is None and owner._warm and owner.graphs:
            with _torch().cuda.stream(owner.side):
                owner.capture(self.recipe.make, (self.episodes, self.times), k)
        if owner.graph is None:
            return None
        return owner.graph.replay(self.consumer, owner.handles[k % 2], wait)
