"""Names for what a program holds, as people read them: `aten.add.Tensor`, `float32[batch, 3]`.

Shared by `graphport inspect` and the viewer, so both show a program the same way.
"""
from __future__ import annotations

import torch

from .program import ExportedProgram


def op_name(target) -> str:
    """`aten.add.Tensor` for an operator overload, the function's name otherwise."""
    if isinstance(target, str):
        return target
    name = str(target)
    return name if not name.startswith("<") else getattr(target, "__name__", name)


def describe_value(val, readable: dict | None = None) -> str:
    """`float32[batch, 3]` for a tensor value (dims named after the user's Dims when
    `readable` maps symbols to names), the value itself otherwise."""
    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).removeprefix("torch.")
        return f"{dtype}[{', '.join(describe_size(d, readable) for d in val.shape)}]"
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return describe_size(val, readable)
    return repr(val)


def describe_size(d, readable: dict | None = None) -> str:
    expr = getattr(getattr(d, "node", None), "expr", None)
    if expr is None:
        return str(d)
    return str(expr.xreplace(readable) if readable else expr)


def readable_names(ep: ExportedProgram) -> dict:
    """Symbol -> a symbol named after the user's Dim, for printing."""
    return ep.shape_contract.display_symbols() if ep.shape_contract else {}
