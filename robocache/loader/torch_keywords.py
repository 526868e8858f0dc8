"""torch DataLoader's keywords in robocache's DataLoader: what each means here, said where it differs.

Code ported from a torch training script passes ``num_workers=8, pin_memory=True, collate_fn=...``.
robocache makes every batch on the dataset's device with its kernels, so the worker keywords have
nothing to act on: they are accepted (the script runs unchanged) and named once in a warning that
says so, rather than ignored without a word. ``collate_fn`` keeps its place in the pipeline but gets
the finished batch dict: torch's own ``default_collate`` is then a no-op, and a function written for
torch's list of samples that fails on the dict gets a note saying why.
"""

from __future__ import annotations

from typing import Any, Callable

from ..user_warning import warn

__all__ = ["WORKER_KEYWORDS", "warn_worker_keywords", "batch_collate"]

# torch's value for each: a keyword left at it says nothing
WORKER_KEYWORDS = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None,
                   "worker_init_fn": None, "timeout": 0, "multiprocessing_context": None, "pin_memory_device": "",
                   "in_order": True}


def warn_worker_keywords(given: dict) -> None:
    """One warning naming the worker keywords in ``given`` (name -> value, None: not passed) whose value
    would change what torch's DataLoader does."""
    changed = [f"{k}={v!r}" for k, v in given.items()
               if v is not None and v != WORKER_KEYWORDS[k] and not (k == "pin_memory_device" and not v)]
    if changed:
        warn(f"DataLoader: {', '.join(changed)} ignored: robocache makes each batch on the dataset's device with "
             "its kernels, with no worker processes and no host batch to pin (a worker_init_fn is never "
             "called); these keywords can be dropped")


def batch_collate(collate_fn: Callable[[dict], Any] | None) -> Callable[[dict], Any] | None:
    """``collate_fn`` as the loader calls it, on the finished batch dict ``{key: tensor [B, ...]}``:
    None for torch's ``default_collate`` (the batch is collated already), else the function, with a
    note on what it receives added to any exception it raises."""
    if collate_fn is None or _is_default_collate(collate_fn):
        return None
    if not callable(collate_fn):
        raise TypeError(f"collate_fn: expected a callable taking the batch dict, got {type(collate_fn).__name__}")

    def call(batch: dict):
        try:
            return collate_fn(batch)
        except Exception as e:
            if hasattr(e, "add_note"):            # Python 3.11+
                e.add_note("robocache: collate_fn receives the finished batch, a dict {key: tensor [B, ...]}, "
                           "not torch's list of samples; a function written for that list needs rewriting")
            raise

    call.__wrapped__ = collate_fn                 # type: ignore[attr-defined]  # the user's, for inspection
    return call


def _is_default_collate(fn) -> bool:
    try:
        from torch.utils.data import default_collate
    except ImportError:                           # an older torch without the public name
        return False
    return fn is default_collate
