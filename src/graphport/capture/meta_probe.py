"""dtypes (and static shapes) of an operator's outputs, read from the operator itself.

The closed-form metadata (pointwise_meta.py, layer_meta.py, reduction_meta.py) works out
sizes and strides; what type promotion gives, and the shapes that depend on static sizes
only (batch norm's per-channel statistics), come from running the operator on tiny meta
tensors of the same dtypes and static sizes. That also raises eager's error for a call
eager rejects. Results are cached per signature: a model asks the same few many times.
"""
from __future__ import annotations

import torch

_PROBES: dict = {}


def tiny(value):
    """The argument with every symbolic size 2: a meta tensor of the same dtype (static sizes
    kept; 1 would make batch norm's unbiased variance divide by zero), a number for a
    symbolic scalar."""
    if isinstance(value, torch.Tensor):
        return torch.empty(tuple(2 if isinstance(s, torch.SymInt) else s for s in value.shape), dtype=value.dtype,
                           device="meta")
    if isinstance(value, torch.SymInt):
        return 2
    if isinstance(value, torch.SymFloat):
        return 2.0
    return value


def probe(func, args: tuple, kwargs: dict | None = None) -> list[tuple[torch.dtype, tuple]]:
    """(dtype, shape) of each output of `func` on the tiny version of its arguments."""
    small, small_kwargs = tuple(tiny(a) for a in args), {k: tiny(v) for k, v in (kwargs or {}).items()}
    key = (func, tuple(_key(a) for a in small), tuple((k, _key(v)) for k, v in sorted(small_kwargs.items())))
    found = _PROBES.get(key)
    if found is None:
        out = func(*small, **small_kwargs)
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        found = _PROBES[key] = [(t.dtype, tuple(t.shape)) for t in outputs]
    return found


def _key(value):
    if isinstance(value, torch.Tensor):
        return ("T", value.dtype, tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    return (type(value), value)
