"""Progress of long work (export of deep models, run_decompositions, check), reported to an
optional listener: `with graphport.on_progress(callback): ...` calls
`callback(stage, done, total)` as each stage advances. Nothing listens by default, and then
reporting costs one context-variable read. The `graphport` command shows it as a progress
bar on a terminal."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

Listener = Callable[[str, int, int], None]
_LISTENER: contextvars.ContextVar[Listener | None] = contextvars.ContextVar("graphport_progress", default=None)


@contextlib.contextmanager
def on_progress(callback: Listener) -> Iterator[None]:
    """Within: graphport reports its progress to `callback(stage, done, total)`."""
    token = _LISTENER.set(callback)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def listening() -> bool:
    return _LISTENER.get() is not None


def report(stage: str, done: int, total: int) -> None:
    listener = _LISTENER.get()
    if listener is not None:
        listener(stage, done, total)


@contextlib.contextmanager
def module_calls(root, stage: str) -> Iterator[None]:
    """While a deep model runs under capture, report each submodule call against the number
    of submodules: the stage's progress through the model. Only when someone listens; the
    hook is removed on leaving."""
    if not listening() or root is None:
        yield
        return
    import torch
    total = sum(1 for _ in root.modules())
    calls = 0

    def count(module, args):
        nonlocal calls
        calls += 1
        report(stage, min(calls, total), total)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        yield
    finally:
        handle.remove()
        report(stage, total, total)
