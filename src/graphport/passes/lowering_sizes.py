"""Small sizes of a lowered program: proven by lowering the program again at those sizes.

A decomposition may decide a size question as for large sizes (a broadcast, a layout, "is
it empty?"), and the program's proof covers the graph it captured, not the decisions of
the decompositions, so the lowered graph is not yet known to be valid at the small sizes
the program accepts. As export does for the program
(passes/small_sizes.py), the lowering is made again with the symbol pinned to each such
size, replaying the program's graph with its inputs' sizes pinned, and the two lowered graphs are
compared modulo the pin. Where they agree, the lowered program is valid there; where they
do not (or the lowering fails there), the lowered program refuses calls at that size and
below, with the reason, as export does for a size where the program itself fails: it never
runs a graph the proof did not see.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy
import torch
import torch.fx as fx

from ..capture.inputs import laid_out
from ..shapes.env import ShapeEnv
from ..shapes.node import symint
from ..shapes.spec import InputShapes
from ..signature import InputKind
from ..values import graph_copy
from .small_sizes import prove_small_sizes
from ..graph_code import keyword_safe


@dataclass(frozen=True)
class LoweredValidity:
    """Where the lowered program is not proven: sizes below `valid_from` of a symbol (with
    the reason), or combinations of small sizes it computes something else at."""
    valid_from: dict[sympy.Symbol, tuple[int, str]]
    exclusions: list[dict[sympy.Symbol, int]]


def lowered_validity(ep, env: ShapeEnv, assumed: list[tuple[sympy.Symbol, int]], lowered: fx.Graph,
                     constants: dict, lower_again: Callable[[fx.GraphModule, ShapeEnv], tuple]) -> LoweredValidity:
    """The smaller sizes the program accepts, below what the lowering's decisions assumed
    (`assumed`: symbol -> that size), at which the lowered graph is not valid: traced again
    there by `lower_again(program, env)` (the program with its inputs' sizes pinned) and
    compared. A size is valid only if every size between it and the assumption is."""
    contract = ep.shape_contract.symbols if ep.shape_contract is not None else {}
    below = {}
    for sym, least in assumed:
        fact = contract.get(sym)
        lowest = max(env.symbols[sym].declared.lower,
                     fact.valid_from if fact is not None and fact.valid_from is not None else 0)
        if lowest < least:
            below[sym] = (least, lowest)
    if not below:
        return LoweredValidity({}, [])
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
    shapes = _input_shapes(ep.graph, user, env)

    def retrace(pinned: InputShapes, locations: bool = True, pins: dict | None = None):
        return lower_again(_inputs_pinned(ep.graph_module, user, pinned), pinned.env)

    report = prove_small_sizes(retrace, shapes, lowered, constants, only=set(below))
    valid_from = {}
    for sym, (least, lowest) in below.items():
        for size in range(least - 1, lowest - 1, -1):
            if size not in report.valid.get(sym, []):
                refusal = report.refused.get((sym, size))
                valid_from[sym] = (size + 1, refusal.reason if refusal is not None else
                                   "the lowering assumed larger sizes")
                break
    return LoweredValidity(valid_from, list(report.exclusions))


def _input_shapes(graph: fx.Graph, user: list[str], env: ShapeEnv) -> InputShapes:
    """The program's user inputs as the small-size proof reads them: sizes by flat input."""
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    sizes: dict[int, list] = {}
    scalars: dict[int, sympy.Expr] = {}
    for i, name in enumerate(user):
        val = placeholders[name].meta.get("val")
        if isinstance(val, torch.Tensor):
            sizes[i] = [s.node.expr if isinstance(s, torch.SymInt) else s for s in val.shape]
        elif isinstance(val, torch.SymInt):
            scalars[i] = val.node.expr
    return InputShapes(env, sizes, scalars=scalars)


def _inputs_pinned(gm: fx.GraphModule, user: list[str], pinned: InputShapes) -> fx.GraphModule:
    """A copy of the program whose user inputs' recorded values are at the pinned sizes (laid
    out in the same stride order). Only the inputs change: a replay recomputes every other
    node from its arguments. The program itself is not touched (another thread may be
    printing, saving or lowering it)."""
    graph = graph_copy(gm.graph)
    by_name = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    for i, name in enumerate(user):
        val = by_name[name].meta.get("val")
        if isinstance(val, torch.Tensor) and i in pinned.sizes:
            by_name[name].meta["val"] = laid_out(pinned.sizes[i], [_hint(s) for s in val.stride()], val.dtype,
                                                   pinned.env)
        elif isinstance(val, torch.SymInt) and i in pinned.scalars:
            by_name[name].meta["val"] = symint(pinned.scalars[i], pinned.env)
    return fx.GraphModule(gm, keyword_safe(graph), class_name=gm._get_name())


def _hint(size) -> int:
    return size.node.hint if isinstance(size, torch.SymInt) else size
