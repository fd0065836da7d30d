"""Python's cycle collector paused while graphport builds a graph.

Capture, replay and load allocate hundreds of thousands of long-lived objects (graph
nodes, meta tensors, metadata) and free few of them. The collector counts allocations,
not garbage, so it keeps scanning the growing live graph: at thousands of layers that is
about 40% of the export's time and the part that grows faster than the graph. Pausing it
costs nothing in memory here (the objects stay alive anyway); cycles made meanwhile are
collected as usual once the collector is back on. Reference counting is not affected.
"""
from __future__ import annotations

import functools
import gc
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def cycle_collection_paused(fn: F) -> F:
    """Run `fn` with the cycle collector off, restoring its previous state afterwards
    (nested calls leave it off until the outermost one returns)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper  # type: ignore[return-value]
