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

import sympy
import torch

from .. import _torch
from ..errors import DataDependentError, UnsupportedFeatureError
from ..shapes.expr import INF
from ..shapes.node import SymNode
from .data_dependent import assert_fact, bind_symbol, shape_env

pytree = _torch.pytree


def is_custom(op) -> bool:
    """An operator of a namespace of the user's (not one torch ships)."""
    return isinstance(op, _torch.OpOverload) and op.namespace not in ("aten", "prims", "prim", "quantized",
                                                                       "_quantized", "mkldnn", "higher_order")


def run_fake_kernel(op: _torch.OpOverload, meta_args: tuple, meta_kwargs: dict, mode) -> Any:
    """A custom op's output metadata, from its fake kernel when it has a Python one. A size
    the fake kernel asks for with `torch.library.get_ctx().new_dynamic_size()` is a fresh
    data-dependent symbol, bound to the output's size once the op is recorded
    (`bind_output_sizes`), as for `nonzero`."""
    kernel = _torch.fake_kernel(op)
    if kernel is None:
        return op(*meta_args, **meta_kwargs)
    with _torch.fake_kernel_context(lambda: _FakeKernelContext(op, mode)):
        return kernel(*meta_args, **meta_kwargs)


class _FakeKernelContext:
    """What `torch.library.get_ctx()` gives a fake kernel during capture."""

    def __init__(self, op, mode):
        self.op = op
        self.mode = mode

    def new_dynamic_size(self, *, min: int = 0, max: int | None = None) -> torch.SymInt:
        # bounds given as symbolic sizes stay unknown to reasoning (and unchecked): a size is >= 0
        min = min if isinstance(min, int) else 0
        max = max if isinstance(max, int) else None
        if min < 0 or (max is not None and max < min):
            raise DataDependentError(
                f"the fake kernel of {self.op.name()} asks for a data-dependent size in [{min}, {max}]",
                fix="give new_dynamic_size a range of sizes: 0 <= min <= max")
        env = shape_env(self.mode)
        sym = env.unbacked.new(int, min, INF if max is None else max, f"an output size of {self.op.name()}",
                               size_like=True)
        return torch.SymInt(SymNode(sym, env, int))

    create_unbacked_symint = new_dynamic_size


def bind_output_sizes(mode, outputs: Any) -> None:
    """Bind each data-dependent size a fake kernel made to `sym_size` of the first output
    dimension that is that size, so the program computes it at run time. A size no output
    dimension is exactly (`2 * u0`) cannot be computed back and is refused."""
    rec = mode.rec
    if rec.sizes is None:
        return
    env, pending = rec.sizes.env, []
    for t in pytree.tree_leaves(outputs):
        if not isinstance(t, torch.Tensor):
            continue
        for dim, size in enumerate(t.shape):
            if isinstance(size, torch.SymInt):
                for sym in env.unbacked.involved(size.node.expr):
                    if sym not in rec.sizes.cache:
                        pending.append((sym, size.node.expr == sym, t, dim))
    for sym, exact, t, dim in sorted(pending, key=lambda p: not p[1]):   # a dimension that is the size first
        if sym in rec.sizes.cache:
            continue
        if not exact:
            raise DataDependentError(
                f"the fake kernel of a custom operator gives an output size {t.shape[dim]} computed from a "
                "data-dependent size, which graphport cannot read back at run time",
                fix="make one output dimension the size new_dynamic_size() returned, as it is")
        node = rec.node(torch.ops.aten.sym_size.int, (rec.value(t), dim), {}, torch.SymInt(SymNode(sym, env, int)))
        bind_symbol(rec, sym, node)
        declared = env.unbacked.infos[sym].range   # the fake kernel's promise, checked where it runs
        if declared.lower > 0:
            assert_fact(rec, SymNode(sympy.Ge(sym, declared.lower, evaluate=False), env, bool))
        if declared.upper != INF:
            assert_fact(rec, SymNode(sympy.Le(sym, declared.upper, evaluate=False), env, bool))


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
    bind_output_sizes(mode, results)
    for name, new in zip(mutated, results[len(first):]):
        if bound.get(name) is not None:
            mode.write(bound[name], new)
    kept = results[:len(first)]
    return kept[0] if not isinstance(outs, tuple) else tuple(kept)


def _fresh(meta_or_tracer) -> torch.Tensor:
    """Metadata of an argument's new value: a copy keeping its layout."""
    m = getattr(meta_or_tracer, "gp_meta", meta_or_tracer)
    return torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="meta")

