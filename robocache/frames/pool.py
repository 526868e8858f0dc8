"""How a decode pool (threads or processes) ends, however it ends, and which file's error is raised."""

from __future__ import annotations


def errors(futures) -> list:
    return [f.exception() for f in futures if f.done() and not f.cancelled() and f.exception() is not None]


def end_pool(pool, futures, stop, bar) -> None:
    """After an error or an interrupt `stop` is set, so the other decoders stop at their next frame;
    then the pool is shut down (queued jobs cancelled) and the progress bar closed."""
    if not all(f.done() for f in futures) or errors(futures):
        stop.set()
    pool.shutdown(wait=True, cancel_futures=True)
    if bar is not None:
        bar.close()


def raise_first(futures) -> None:
    """Raises the error of the first failing job in the order of submission, if any."""
    found = errors(futures)
    if found:
        raise found[0]
