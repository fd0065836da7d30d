"""`torch.tensor(data)` where `data` holds data-dependent values (`torch.tensor(x.tolist())`,
`torch.tensor([n.item(), 0])`): torch's constructor needs Python numbers, which capture does
not have, so the tensor is built in the graph instead, one `scalar_tensor` per value, stacked
into the nested shape, as torch.export records it."""
from __future__ import annotations

from typing import Any

import torch

from .sizes import is_sym


def has_data_dependent_values(data: Any) -> bool:
    """Whether `data` holds a data-dependent value. Sizes of inputs are left to torch's
    constructor, which specializes them (the program then says the dim is fixed)."""
    if isinstance(data, (list, tuple)):
        return any(has_data_dependent_values(d) for d in data)
    return is_sym(data) and bool(data.node.env.unbacked.involved(data.node.expr))


def tensor_from_symbolic(data: Any, dtype: torch.dtype | None = None, device=None, requires_grad: bool = False,
                         pin_memory: bool = False) -> torch.Tensor:
    """What `torch.tensor(data, dtype=..., device=...)` gives, computed in the graph."""
    dtype = dtype if dtype is not None else _inferred_dtype(data)

    def build(d):
        if isinstance(d, (list, tuple)):
            if not d:
                return torch.empty((0,), dtype=dtype, device=device)
            return torch.stack([build(e) for e in d])
        return torch.scalar_tensor(d, dtype=dtype, device=device)
    out = build(data)
    return out.requires_grad_() if requires_grad else out


def _inferred_dtype(data: Any) -> torch.dtype:
    """torch.tensor's choice for Python values: any float gives the default float dtype,
    all bools give bool, else int64."""
    leaves = _leaves(data)
    if any(isinstance(v, (float, torch.SymFloat)) for v in leaves):
        return torch.get_default_dtype()
    if leaves and all(isinstance(v, (bool, torch.SymBool)) for v in leaves):
        return torch.bool
    return torch.int64


def _leaves(data: Any) -> list:
    if isinstance(data, (list, tuple)):
        return [leaf for d in data for leaf in _leaves(d)]
    return [data]
