"""Python's cycle collector paused while graphport builds or decodes a graph.

Capture, replay, save and load allocate hundreds of thousands of long-lived objects (graph
nodes, meta tensors, metadata, decoded JSON) and free few of them. The collector counts
allocations, not garbage, so it keeps scanning the growing live graph, and every object of
the process with it (a large model's included): at thousands of layers that is about 40%
of the export's time and the part that grows faster than the graph, and it made load
several times slower. Pausing it costs nothing in memory here (the objects stay alive
anyway); cycles made meanwhile are collected as usual once the collector is back on.
Reference counting is not affected.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """The collector off inside, restored to its previous state afterwards (nested uses
    leave it off until the outermost one ends). Also a decorator:
    `@cycle_collection_paused()`."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
