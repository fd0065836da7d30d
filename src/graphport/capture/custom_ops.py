"""Custom operators that mutate their arguments, made functional in torch's own form.

An operator registered with `torch.library` (`custom_op(..., mutates_args=...)`, or a
`Library.define` schema with `Tensor(a!)` arguments) has no functional counterpart in its
namespace. Capture records it as torch does: one `torch.ops.higher_order.auto_functionalized`
node, `auto_functionalized(op, **arguments)`, whose result is the op's own outputs followed
by the new values of the arguments it mutates; those values are then written back to the
tensors the program passed (so an input or a buffer becomes a mutation output, as for any
in-place write). torch's ecosystem reads the node, and it runs eagerly in `ep.module()`
(the operator runs on copies of the mutated arguments).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import _torch
from ..errors import DataDependentError, UnsupportedFeatureError

pytree = _torch.pytree


def is_custom(op) -> bool:
    """An operator of a namespace of the user's (not one torch ships)."""
    return isinstance(op, _torch.OpOverload) and op.namespace not in ("aten", "prims", "prim", "quantized",
                                                                       "_quantized", "mkldnn", "higher_order")


def run_fake_kernel(op: _torch.OpOverload, meta_args: tuple, meta_kwargs: dict) -> Any:
    """A custom op's output metadata, from its fake kernel when it has a Python one. A fake
    kernel that asks for a data-dependent output size (`torch.library.get_ctx()
    .new_dynamic_size()`) is refused with graphport's error: capture has no data-dependent
    size symbols yet."""
    kernel = _torch.fake_kernel(op)
    if kernel is None:
        return op(*meta_args, **meta_kwargs)
    with _torch.fake_kernel_context(lambda: _NoDynamicSizes(op)):
        return kernel(*meta_args, **meta_kwargs)


class _NoDynamicSizes:
    """The context a fake kernel gets from `torch.library.get_ctx()` during capture."""

    def __init__(self, op):
        self.op = op

    def new_dynamic_size(self, *args, **kwargs):
        raise DataDependentError(
            f"the custom operator {self.op.name()} returns a tensor whose size depends on its input's values "
            "(its fake kernel calls ctx.new_dynamic_size()); graphport cannot capture data-dependent sizes yet",
            fix="give the operator an output of a size computed from its inputs' shapes (for example pad to the "
                "largest possible size and return the count as a tensor), or call it outside the exported code")

    create_unbacked_symint = new_dynamic_size


def functionalize(mode, op: _torch.OpOverload, bound: dict[str, Any], mutated: tuple[str, ...]) -> Any:
    """Record a call of the mutating custom op `op` (arguments `bound` by name) as an
    `auto_functionalized` node, write the new values back, and return the op's outputs."""
    schema = op._schema
    if any(r.alias_info is not None for r in schema.returns):
        raise UnsupportedFeatureError(
            f"the custom operator {op.name()} returns a view of one of its arguments, which cannot be made functional",
            fix="return a fresh tensor (for example `.clone()` inside the operator) or return nothing and mutate "
                "the argument only")
    if any(isinstance(bound.get(name), (list, tuple)) for name in mutated):
        raise UnsupportedFeatureError(
            f"the custom operator {op.name()} mutates a list of tensors, which graphport cannot write back yet",
            fix="pass the mutated tensors as separate arguments of the operator")
    outs = mode.run_meta(op, (), bound)   # the fake kernel: output metadata, and torch's argument checks
    news = [None if bound.get(name) is None else _fresh(bound[name]) for name in mutated]
    first = list(outs) if isinstance(outs, tuple) else [outs]
    val = tuple(first + news)
    node_kwargs = pytree.tree_map(mode.rec.graph_arg, bound)
    hop = _torch.auto_functionalized()
    node = mode.rec.node(hop, (op,), node_kwargs, val)
    mode.rec.user_calls.add(node)
    results = mode.rec.wrap(val, node, mode._device((), bound))
    for name, new in zip(mutated, results[len(first):]):
        if bound.get(name) is not None:
            mode.write(bound[name], new)
    kept = results[:len(first)]
    return kept[0] if not isinstance(outs, tuple) else tuple(kept)


def _fresh(meta_or_tracer) -> torch.Tensor:
    """Metadata of an argument's new value: a copy keeping its layout."""
    m = getattr(meta_or_tracer, "gp_meta", meta_or_tracer)
    return torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="meta")

