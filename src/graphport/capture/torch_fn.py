"""Which torch-level function each recorded operator runs inside (`torch.add`, `F.linear`,
`Tensor.view`): the `torch_fn` and `source_fn_stack` metadata torch.export's consumers read
(quantization and partitioning passes group nodes by the function that made them).

The same mode builds `torch.tensor(data)` in the graph when `data` holds data-dependent
values (tensor_data.py): torch's constructor would need their Python values."""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from ..audit import PythonAudit
from ..shapes.env import ChoiceUndecided
from .tensor_data import has_data_dependent_values, tensor_from_symbolic


class TorchFunctionTracker(TorchFunctionMode):
    """Remembers the outermost torch function being run; a mode is off while its own handler
    runs, so functions called inside that one are not seen (they belong to it). With a
    `recorder`, tells it of the program's view-or-copy choices and of its reads of strides
    (capture/recorder.py, local_proofs.py). With an `audit`, its hooks are off while a call
    that cannot run user code is handled."""

    def __init__(self, on_enter: Callable[[tuple | None], None] | None, recorder=None,
                 audit: PythonAudit | None = None):
        super().__init__()
        self.on_enter = on_enter
        self.recorder = recorder
        self.audit = audit
        self.counts: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None) -> Any:
        paused = self.audit.pause_for(func, args, kwargs) if self.audit is not None else None
        if paused is None:
            return self._handle(func, args, kwargs)
        try:
            return self._handle(func, args, kwargs)
        finally:
            self.audit.resume(paused)

    def _handle(self, func, args, kwargs) -> Any:
        forwards_to_torch = True   # noqa: F841 (an error raised by `func` is torch's: passes/small_sizes.py)
        if func is torch.tensor and args and has_data_dependent_values(args[0]):
            return tensor_from_symbolic(*args, **(kwargs or {}))
        args, kwargs = _decided_flags(func, args, kwargs)
        if self.on_enter is None:   # a re-trace without source locations: no names to give
            return self._layout_call(func, args, kwargs or {})
        name = getattr(func, "__name__", type(func).__name__)
        self.counts[name] = count = self.counts.get(name, 0) + 1
        self.on_enter((f"{name}_{count}", f"{type(func).__name__}.{name}", func))
        try:
            return self._layout_call(func, args, kwargs or {})
        finally:
            self.on_enter(None)

    def _layout_call(self, func, args, kwargs):
        forwards_to_torch = True   # noqa: F841 (as in _handle)
        layout = _LAYOUT_CALLS.get(func) if self.recorder is not None else None
        if layout is None:
            return func(*args, **kwargs)
        if layout == "reads":
            self.recorder.layout_read(args[0] if args else None)
            return func(*args, **kwargs)
        return self._view_or_copy(func, args, kwargs)

    def _view_or_copy(self, func, args, kwargs):
        """A reshape, flatten or contiguous() call. Where its choice between a view and a copy
        turns on sizes the ranges do not settle (a slice of a buffer is viewable only where it
        spans the whole buffer), eager's values are the same either way: the call is made on a
        contiguous copy of its input instead of guarding, and a later write into the result or
        the input, the one thing that could tell the two apart, is refused."""
        source = args[0] if args else None
        try:
            with self.recorder.view_or_copy(source, copy_if_undecided=isinstance(source, torch.Tensor)) as result:
                result.append(func(*args, **kwargs))
            return result[0]
        except ChoiceUndecided as undecided:
            copy = source.clone(memory_format=torch.contiguous_format)
            with self.recorder.view_or_copy(copy) as result:
                result.append(func(copy, *args[1:], **kwargs))
            self.recorder.unsettled_choice(source, result[0], undecided.question)
            return result[0]


# Flags that torch's operators take as a Python bool only (the argument parser rejects a
# SymBool with a TypeError): `F.dropout(x, training=x.shape[0] > 2)`.
_BOOL_FLAGS = frozenset({"training", "train", "inplace"})


def _decided_flags(func, args: tuple, kwargs: dict | None) -> tuple[tuple, dict | None]:
    """The call with each symbolic bool passed for a flag of `_BOOL_FLAGS` decided: from the
    ranges where they settle it, else guarded at the example's answer (bool() of a SymBool)."""
    if not _any_sym_bool(args) and not (kwargs and _any_sym_bool(kwargs.values())):
        return args, kwargs
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return args, kwargs
    args = tuple(bool(a) if isinstance(a, torch.SymBool) and i < len(names) and names[i] in _BOOL_FLAGS else a
                 for i, a in enumerate(args))
    kwargs = {k: bool(v) if isinstance(v, torch.SymBool) and k in _BOOL_FLAGS else v for k, v in (kwargs or {}).items()}
    return args, kwargs


def _any_sym_bool(values) -> bool:
    """Whether any of `values` is a SymBool (a loop: this runs for every torch function call)."""
    for a in values:
        if isinstance(a, torch.SymBool):
            return True
    return False


# Calls that return a view or a copy depending on the layout, and calls that read it.
_LAYOUT_CALLS = {
    **{f: "chooses" for f in (torch.Tensor.contiguous, torch.Tensor.reshape, torch.reshape, torch.Tensor.reshape_as,
                              torch.Tensor.flatten, torch.flatten)},
    **{f: "reads" for f in (torch.Tensor.stride, torch.Tensor.storage_offset, torch.Tensor.untyped_storage)},
}
