"""Sizes 0 and 1 after run_decompositions: prove the lowered graph there, by lowering there.

The program's small-size proof (`small_sizes.py`) covers the graph as exported. A
decomposition can decide a size question under the same "sizes are at least 2" assumption
(torch's `roll` asks whether the tensor is empty and, told no, computes `% size`), so the
lowered graph needs its own proof at the small sizes the program accepts. For each symbol
whose lowering needed such an assumption, the program is lowered again with the symbol
pinned to each small size it accepts (largest first) and the two lowered graphs are
compared modulo the pin, as export compares its traces. Where they differ, the lowered
program refuses that size and the smaller ones at call time, saying why, instead of
computing something else there; the program as exported still runs them.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..capture.sizes import is_sym
from ..errors import GraphportError
from ..shapes.contract import Relation, ShapeContract
from ..shapes.env import ShapeEnv
from ..source import SourceLocation
from .decided_conds import inline_decided_conds
from .small_sizes import compare

_MAX_COMBINATIONS = 8
pytree = _torch.pytree


def prove_lowering_at_small_sizes(contract: ShapeContract, report: list[str], lowered: fx.GraphModule, env: ShapeEnv,
                                  relied: dict[sympy.Symbol, int], relower: Callable[[], fx.GraphModule]
                                  ) -> tuple[ShapeContract, list[str]]:
    """The lowered program's contract and shape report: `contract` with `valid_from` raised
    where the lowered graph differs at a small size, and a relation excluding combinations
    of small sizes it differs at. `relied`: symbol -> the smallest size the lowering's
    decisions hold for; `relower()` lowers the program again under the current pins."""
    symbols, relations, report = dict(contract.symbols), list(contract.relations), list(report)
    proven: dict[sympy.Symbol, list[int]] = {}
    for sym, least in relied.items():
        fact = symbols.get(sym)
        if fact is None:
            continue
        accepted = max(int(fact.range.lower), fact.valid_from or 0)
        for size in range(least - 1, accepted - 1, -1):
            difference = _difference_at({sym: size}, lowered, env, relower)
            if difference is None:
                proven.setdefault(sym, []).append(size)
                continue
            what, where = difference
            reason = (f"run_decompositions' graph is not proven there: lowered again at {fact.name} = {size}, "
                      f"{what} (the program as exported runs it)")
            symbols[sym] = dataclasses.replace(fact, valid_from=size + 1, assumed_at=where, reason=reason)
            report.append(f"{fact.name} < {size + 1} is refused at call time by the lowered program: {reason}")
            break
    if len(proven) > 1:
        combos = [dict(zip(proven, sizes)) for sizes in itertools.product(*proven.values())]
        for pins in combos:
            difference = (("is not proven there", None) if len(combos) > _MAX_COMBINATIONS
                          else _difference_at(pins, lowered, env, relower))
            if difference is not None:
                relations.append(Relation(sympy.Not(sympy.And(*[sympy.Eq(s, v) for s, v in pins.items()])),
                                          difference[1]))
    if symbols == contract.symbols and relations == contract.relations:
        return contract, report   # proven at every small size: the program's own contract
    return ShapeContract(symbols, list(contract.dims), relations), report


def _difference_at(pins: dict[sympy.Symbol, int], lowered: fx.GraphModule, env: ShapeEnv,
                   relower: Callable[[], fx.GraphModule]) -> tuple[str, SourceLocation | None] | None:
    """None if the program lowered with the symbols pinned computes what `lowered` does."""
    pins = {sym: sympy.Integer(size) for sym, size in pins.items()}
    saved = env.replacements
    env.replacements = {**{k: v.xreplace(pins) for k, v in saved.items()}, **pins}
    env._simplified.clear()
    env._decisions.clear()
    try:
        pinned = relower()
    except GraphportError as e:   # a decomposition needs another fact there: no proof
        return f"cannot be made there ({e.what})", e.location
    except Exception as e:   # an operator fails there while lowering: no proof either
        return f"cannot be made there ({type(e).__name__}: {e})", None
    finally:
        env.replacements = saved
        env._simplified.clear()
        env._decisions.clear()
    difference = compare(lowered.graph, inline_decided_conds(pinned.graph, pins), pins)
    if difference is not None and _empty_and_runs(lowered, env, pins):
        return None
    return difference


def _empty_and_runs(lowered: fx.GraphModule, env: ShapeEnv, pins: dict[sympy.Symbol, sympy.Integer]) -> bool:
    """Whether the lowered graph, run on meta tensors at the pinned sizes (the example's for
    the other symbols), gets through and returns only tensors with no elements, of the
    shapes and dtypes it declares: then it computes what the program does there, whatever
    path the decompositions took (a restride of an empty result), and a size computation
    that fails there (`% 0`) is caught."""
    sizes = {**env.hints(), **pins}

    def at(size) -> int:
        return int(sympy.sympify(env.simplify(size.node.expr) if is_sym(size) else size).xreplace(sizes))

    inputs = []
    for node in lowered.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                inputs.append(torch.empty([at(s) for s in val.shape], dtype=val.dtype, device="meta"))
            else:
                inputs.append(at(val) if is_sym(val) else val)
    expected = [v for v in pytree.tree_leaves(lowered.graph.output_node().args[0])]
    try:
        with _torch.outside_dispatch_modes():
            outputs = pytree.tree_leaves(fx.Interpreter(lowered).run(*inputs))
    except Exception:
        return False
    return len(outputs) == len(expected) and all(
        isinstance(out, torch.Tensor) and isinstance(node, fx.Node) and isinstance(node.meta.get("val"), torch.Tensor)
        and out.numel() == 0 and out.dtype == node.meta["val"].dtype
        and list(out.shape) == [at(s) for s in node.meta["val"].shape] for out, node in zip(outputs, expected))
