"""Decoding in processes: PyAV decoders in forked processes, each writing its jobs' rows into one file
(the cache entry's, or a temporary one) with pwrite while it goes on decoding.

Threads of one process share its GIL, and every frame takes it a few times (PyAV's frame objects, the
copy's call): on the H100 host, 32 real AV1 files on 16 workers decoded with planes copied out at
1,677-2,361 frames/s on threads against 3,174-3,340 in processes (PyAV alone, planes untouched:
2,299-3,162 on threads, 4,033-5,192 in processes). On 2 cores threads were as fast, and a process pool
costs 0.1-0.2 s to start.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import time
import warnings
from typing import Any
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from .._util import ReaderError
from ..video import FrameSpec, Job, Rows, decode_job
from .pool import end_pool, errors, raise_first
from .writes import Done

# ROBOCACHE_DECODE_PROCESSES=1 / 0: PyAV decoders in processes of their own or threads of this one;
# unset: processes from PROCESS_MIN_WORKERS jobs at once (decode_in_processes)
_env_procs = os.environ.get("ROBOCACHE_DECODE_PROCESSES")
DECODE_PROCESSES = bool(int(_env_procs)) if _env_procs not in (None, "") else None
PROCESS_MIN_WORKERS = 8
# a decode process that hands back no frame for this long (stopped, hung in the decoder) fails the ingest;
# ROBOCACHE_DECODE_STALL_S overrides it (seconds)
STALL_SECONDS = float(os.environ.get("ROBOCACHE_DECODE_STALL_S") or 300)
_PR_SET_PDEATHSIG = 1
_PRCTL: Any
try:
    # resolved here, in the parent: a forked child that calls dlopen can hang for good on the loader's
    # lock when another thread of the parent held it at the fork (CI once saw decode processes hand back
    # no frame for 300 s); with the symbol looked up already, the child makes a plain call
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def decode_in_processes(workers: int, backend: str) -> bool:
    """Whether jobs decode in processes of their own (PyAV only): DECODE_PROCESSES when set; else
    from PROCESS_MIN_WORKERS jobs at once (see the module's docstring for the measurements)."""
    if backend != "pyav" or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return False
    if DECODE_PROCESSES is not None:
        return DECODE_PROCESSES
    return workers >= PROCESS_MIN_WORKERS


class Flag:
    """threading.Event's set and is_set over a shared byte: the parent's stop, seen by its decode
    processes."""

    def __init__(self, value):
        self.value = value

    def set(self) -> None:
        self.value.value = 1

    def is_set(self) -> bool:
        return bool(self.value.value)


class _Counter:
    """A decode process's frames done, in the shared array the parent's progress bar reads."""

    def __init__(self, done, i: int):
        self.done, self.i = done, i

    def __call__(self, n=1):
        self.done[self.i] += n


_SHARED: dict = {}  # in a decode process: the parent's stop flag and progress array (_start_decoder)


def _start_decoder(stop, done, lock_dir) -> None:
    _SHARED.update(stop=Flag(stop), done=done)
    _close_inherited_locks(lock_dir)
    # a decode process dies with its parent (SIGTERM from a scheduler, the OOM killer's SIGKILL): it
    # must not outlive the job, holding memory and a pipe no one reads
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _close_inherited_locks(lock_dir) -> None:
    """The fork gave this process the parent's descriptors, the cache entries' flock'ed lock files among
    them: a decode process must not keep an entry locked once its parent is gone (the next load of the
    dataset would wait on it forever). Closing the copies leaves the parent's lock held."""
    if not lock_dir:
        return
    lock_dir = os.path.realpath(lock_dir)
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(lock_dir) and target.endswith(".lock"):
                os.close(int(fd))
        except (OSError, ValueError):
            continue


def _decode_job_to(i: int, job: Job, data_path: str, spec: FrameSpec, threads: int, chunk: int):
    """In a decode process: `job` into its store rows of the file at `data_path`, from a ring of two
    halves whose writes run on a thread while the decoder goes on. Returns the spans' times (None when
    stopped)."""
    fb = spec.frame_bytes
    fd = os.open(data_path, os.O_WRONLY)
    pool = ThreadPoolExecutor(1, thread_name_prefix="robocache-write")
    ring = np.empty((min(2 * chunk, job.n), fb), np.uint8)

    def write(first, sl):
        rows = ring[sl]
        return Done(None, pool.submit(_write_pieces, fd, job, first, rows, fb))

    try:
        out = Rows(job.n, ring, write, chunk=chunk)
        times = decode_job("pyav", job, out, spec, threads=threads, tick=_Counter(_SHARED["done"], i),
                           stop=_SHARED["stop"])
        if times is not None:
            out.finish(job.n)
        return times
    finally:
        pool.shutdown(wait=True)
        os.close(fd)


def _write_pieces(fd, job: Job, first: int, rows: np.ndarray, fb: int) -> None:
    for off, store_row, n in job.pieces(first, len(rows)):
        pwrite(fd, rows[off:off + n], store_row * fb)


def pwrite(fd: int, rows: np.ndarray, offset: int) -> None:
    view = memoryview(rows.reshape(-1))  # type: ignore[arg-type]  # ndarray is a buffer
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def decode_processes(jobs, spec, *, workers, threads, data_path, chunk, bar, on_job, lock_dir=None) -> list:
    """Every job, in `workers` processes, into the file at `data_path` (each job's rows at its store
    rows); `on_job(j)` runs in this process once job j is written. Returns the times by job.

    A decode process killed (the OOM killer, a signal) or handing back no frame for STALL_SECONDS (stopped,
    hung) fails the ingest with an error naming the files being decoded and the cause."""
    # forked, as torch's DataLoader workers are: ready at once with every module imported, and the
    # caller's script is not run again in each (spawn and forkserver re-import the main module, which
    # a script without an `if __name__ == "__main__"` guard would run again). A decode process runs
    # PyAV, NumPy and pwrite only: none of the locks a thread of this process may hold at the fork
    ctx = multiprocessing.get_context("fork")
    stop, done = ctx.RawValue("b", 0), ctx.RawArray("q", len(jobs))
    shown = 0
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_decoder,
                               initargs=(stop, done, str(lock_dir) if lock_dir else ""))
    futures = []
    progress_at, last = time.monotonic(), -1
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            # the pool forks its processes in submit. Frozen: the garbage this process holds at the fork is
            # not a decode process's to collect; seen hanging one for good: its gc freed an inherited PyAV
            # codec context, whose free waits on decoder threads that exist only in this process
            gc.freeze()
            try:
                futures = [pool.submit(_decode_job_to, j, job, str(data_path), spec, threads, chunk)
                           for j, job in enumerate(jobs)]
            finally:
                gc.unfreeze()
        index = {f: j for j, f in enumerate(futures)}
        left = set(futures)
        while left:
            finished, left = wait(left, timeout=0.1, return_when=FIRST_COMPLETED)
            total = sum(done)
            if bar is not None:
                bar.update(total - shown)
                shown = total
            if total != last or finished:
                progress_at, last = time.monotonic(), total
            elif time.monotonic() - progress_at > STALL_SECONDS:
                # a stopped process never ends: shutting the pool down would wait on it forever
                for proc in list(getattr(pool, "_processes", {}).values()):  # the stdlib's own table
                    proc.kill()
                raise ReaderError(_in_flight(jobs, futures, index, done) + f": no frame decoded for "
                                  f"{STALL_SECONDS:g} s; a decode process is stopped or hung (ROBOCACHE_DECODE_STALL_S "
                                  f"sets the limit; ROBOCACHE_DECODE_PROCESSES=0 decodes on threads)")
            for f in sorted(finished, key=lambda f: index[f]):
                if f.exception() is None:
                    on_job(index[f])
            if errors(finished):
                break
    finally:
        end_pool(pool, futures, Flag(stop), bar)
    try:
        raise_first(futures)
    except BrokenProcessPool as e:
        raise ReaderError(_in_flight(jobs, futures, {f: j for j, f in enumerate(futures)}, done)
                          + ": a decode process died (killed by a signal, or by the OOM killer: too little "
                          "memory for this many decoders; ROBOCACHE_DECODE_PROCESSES=0 or fewer workers)") from e
    return [f.result() for f in futures]


def _in_flight(jobs, futures, index, done) -> str:
    """The files of the jobs not finished when the pool broke or stalled, as an error's subject."""
    open_ = sorted({jobs[index[f]].path for f in futures
                    if not f.done() or (f.exception() is not None and isinstance(f.exception(), BrokenProcessPool))})
    names = ", ".join(open_[:3]) + (f" and {len(open_) - 3} more" if len(open_) > 3 else "")
    return names or "decoding in processes"
