"""Hold a CUDA stream until the test lets it go: GPU ordering shown with an event the test controls, never
with a sleep that has to win a race (STYLE.md, issue 47 item 2).

    with hold(stream) as gate:     # the stream waits for a host function that waits for the test
        op(..., stream=stream)     # queued behind it: it cannot have run, however fast the GPU
        assert gate.pending(), "..."
    # leaving the block lets the host function return; the work queued behind it runs

The hold is a host function on the stream (cuLaunchHostFunc) blocked on a threading.Event, so nothing
occupies the GPU while the stream is held and no verdict depends on how long anything takes. A call that
wrongly waits on the host for the held stream would hang; the host function gives up after `safety`
seconds and the block then fails saying so (a hang guard, not a timing: a correct call never comes near
it). The driver runs a context's host functions on one thread, so hold one stream at a time.

Run the work once before holding a stream: under CUDA's lazy module loading the first launch of a kernel
loads its module, which waits for the work already queued, the held stream's included (seen on an H200:
a first `x * 2` inside the block hung until the safety limit; after one warm-up call it queued at once).
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

import torch

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_launch = None


def _launch_host_func():
    global _launch
    if _launch is None:
        fn = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc
        fn.argtypes = [ctypes.c_void_p, _HOST_FN, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _launch = fn
    return _launch


class Gate:
    """A stream held at a point of its queue until `release()` (or the end of the `hold` block)."""

    def __init__(self, stream: torch.cuda.Stream, safety: float):
        self.stream = stream
        self.forced = False
        self._open = threading.Event()

        def wait(_):   # on the driver's host-function thread
            if not self._open.wait(safety):
                self.forced = True

        self._fn = _HOST_FN(wait)   # referenced here until the driver has called it
        rc = _launch_host_func()(ctypes.c_void_p(stream.cuda_stream), self._fn, None)
        if rc != 0:
            raise RuntimeError(f"cuLaunchHostFunc failed with CUresult {rc}: the stream cannot be held")
        self._passed = torch.cuda.Event()
        self._passed.record(stream)   # reached once the stream is past the gate, before the work behind it

    def pending(self) -> bool:
        """True while the stream still waits at the gate (the work queued behind it has not started)."""
        return not self._passed.query()

    def release(self):
        self._open.set()
        self._passed.synchronize()    # the host function returned: `forced` is final


@contextmanager
def hold(stream: torch.cuda.Stream | None = None, safety: float = 60.0, let_go_after: float | None = None):
    """Hold `stream` (default: the current stream) for the duration of the block; yields the Gate.

    let_go_after: for a call documented to wait on the host for the held stream (a workspace freed only
    once its kernel ran): the gate opens by itself after that many seconds, and a call that returns with
    the gate still shut (`gate.pending()`) did not wait. A correct call always passes; a wrong one passes
    only if it spent that long on the host."""
    gate = Gate(stream or torch.cuda.current_stream(), let_go_after or safety)
    try:
        yield gate
    finally:
        gate.release()
    assert let_go_after or not gate.forced, (
        f"the held stream was let go after the {safety:.0f} s safety limit: something in the block waited on "
        f"the host for work queued behind the gate")

def queued(stream: torch.cuda.Stream | None = None) -> bool:
    """True while work enqueued on `stream` so far has not finished (an event recorded now is not reached)."""
    done = torch.cuda.Event()
    done.record(stream or torch.cuda.current_stream())
    return not done.query()
