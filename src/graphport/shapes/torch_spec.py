"""Specs written with torch.export's own objects, read as the equivalent graphport spec.

Code that mixes both imports, and torch's ExportDB cases, build `dynamic_shapes` with
`torch.export.Dim`, derived torch dims and `Dim.AUTO`/`DYNAMIC`/`STATIC`. The package may
not depend on torch.export, so the objects are recognised by their class name and module and
read through the attributes torch documents (`__name__`, `min`, `max`, `root`, `fn`, `type`).
"""
from __future__ import annotations

from typing import Any

from .dims import DerivedDim, Dim

_TORCH_MODULE = "torch.export"


def is_torch_object(obj: Any, *class_names: str) -> bool:
    cls = type(obj)
    return cls.__module__.startswith(_TORCH_MODULE) and cls.__name__ in class_names


def from_torch(spec: Any) -> Any:
    """`spec` with every torch.export dimension object replaced by graphport's; the
    containers (dicts, tuples, lists) keep their structure."""
    roots: dict[int, Dim] = {}
    return _convert(spec, roots)


def _convert(spec: Any, roots: dict[int, Dim]) -> Any:
    if isinstance(spec, dict):
        return {k: _convert(v, roots) for k, v in spec.items()}
    if isinstance(spec, (tuple, list)) and not hasattr(spec, "_fields"):
        return type(spec)(_convert(v, roots) for v in spec)
    if is_torch_object(spec, "_DimHint"):
        hint = getattr(Dim, spec.type.name)
        lo, hi = getattr(spec, "min", None), getattr(spec, "max", None)
        return hint if lo is None and hi is None else hint(min=lo, max=_bound(hi))
    if is_torch_object(spec, "_DerivedDim"):
        root = _root(spec.root, roots)
        offset = int(spec.fn(0))
        coeff = int(spec.fn(1)) - offset
        return DerivedDim(root, coeff, offset)
    if is_torch_object(spec, "Dim", "_StaticDim"):
        return _root(spec, roots)
    return spec


def _root(dim: Any, roots: dict[int, Dim]) -> Dim:
    if id(dim) not in roots:
        value = getattr(dim, "value", None)    # a static torch dim (Dim("n", min=4, max=4))
        if value is not None:
            roots[id(dim)] = Dim(dim.__name__, min=value, max=value)
        else:
            roots[id(dim)] = Dim(dim.__name__, min=int(dim.min), max=_bound(dim.max))
    return roots[id(dim)]


def _bound(value: Any) -> int | None:
    """torch's unbounded max is `int_oo` (not a Python int)."""
    return value if isinstance(value, int) else None
