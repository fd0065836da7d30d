"""Size values of a subgraph replayed on its own: computed from the sizes it receives.

A control-flow branch or loop body is a graph with its own placeholders; the operator
using it passes exactly those values, so a size the subgraph computes with must come from
them, never from the outer graph (whose nodes it cannot see). What a subgraph receives:

- a SymInt / SymBool / SymFloat placeholder: the value of its expression itself;
- a tensor placeholder: each dynamic dim, read with `aten.sym_size.int` inside the
  subgraph where it is first needed.

Any other size (`n * k`, `s0 - 1`, a decomposition's `numel`) is rebuilt from those with
the IR's size operators, as the program's own sizes are rebuilt from its inputs
(`sizes.py`). A symbol the subgraph receives only inside an expression `c * s + o` (a
`Sym(2*s0)` operand) is recovered as `(value - o) // c`; a multiple of a product it receives
(`2*s0*s1` from an operand of `s0*s1` elements) is that product times the factor.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx

from ..errors import UnsupportedFeatureError
from ..shapes.env import ShapeEnv
from .sizes import SizeValues, is_sym

aten = torch.ops.aten


class ReceivedSizes(SizeValues):
    def __init__(self, env: ShapeEnv, placeholders: list[tuple[fx.Node, Any]]):
        """`placeholders`: (placeholder node, the value it stands for in the replay)."""
        super().__init__(env, {})
        self.received: dict[sympy.Expr, tuple[fx.Node, int | None]] = {}   # expr -> (placeholder, dim or None)
        for node, value in placeholders:          # sizes given as values first: they need no node
            if is_sym(value):
                if value.node.recipe is not None:
                    self.made[id(value.node)] = (value.node, node)
                else:
                    self._receive(env.simplify(value.node.expr), node, None)
        for node, value in placeholders:
            if isinstance(value, torch.Tensor):
                for dim, size in enumerate(value.shape):
                    if is_sym(size):
                        self._receive(env.simplify(size.node.expr), node, dim)
        self.solved = _symbols_from(self.received)

    def _receive(self, expr: sympy.Basic, node: fx.Node, dim: int | None) -> None:
        if getattr(expr, "free_symbols", None):
            self.received.setdefault(expr, (node, dim))

    def _build(self, expr: sympy.Expr, emit: Callable, cache: bool):
        if expr.is_Integer or expr in self.cache:
            return super()._build(expr, emit, cache)
        source = self.received.get(expr)
        if source is not None:
            node, dim = source
            value = node if dim is None else emit(aten.sym_size.int, (node, dim), {})
        elif expr.is_Mul and (multiple := self._multiple_of_received(expr)) is not None:
            received, factor = multiple
            value = emit(operator.mul, (self._build(received, emit, cache), factor), {})
        elif expr.is_Symbol:
            if expr not in self.solved:
                raise UnsupportedFeatureError(
                    f"run_decompositions needs the size {expr} inside a control-flow branch or loop body that "
                    "receives it neither as an operand nor as a dimension of a tensor operand",
                    fix="pass the size to the branch as an operand, or keep the operator that needs it whole "
                        "(delete it from the decomposition table)")
            received, coeff, offset = self.solved[expr]
            value = self._build(received, emit, cache)
            if offset:
                value = emit(operator.sub, (value, offset), {})
            if coeff != 1:
                value = emit(operator.floordiv, (value, coeff), {})
        else:
            return super()._build(expr, emit, cache)
        if cache:
            self.cache[expr] = value
        return value

    def _multiple_of_received(self, expr: sympy.Expr) -> tuple[sympy.Expr, int] | None:
        """(received expression, integer factor) when `expr` is that multiple of a product the
        subgraph receives (`2*s0*s1` from a tensor operand of `s0*s1` elements), whose
        symbols it may not receive one by one."""
        for received in self.received:
            if received.is_Mul and len(received.free_symbols) > 1:
                factor = expr / received
                if factor.is_Integer:
                    return received, int(factor)
        return None


def _symbols_from(received: dict[sympy.Expr, Any]) -> dict[sympy.Symbol, tuple[sympy.Expr, int, int]]:
    """symbol -> (received expression, coeff, offset) with expression == coeff * symbol + offset,
    preferring the simplest (smallest coeff, then offset)."""
    found: dict[sympy.Symbol, tuple[sympy.Expr, int, int]] = {}
    for expr in received:
        if len(expr.free_symbols) != 1:
            continue
        (sym,) = expr.free_symbols
        coeff, offset = expr.coeff(sym), expr.subs(sym, 0)
        if not (coeff.is_Integer and offset.is_Integer and coeff > 0) or sympy.expand(expr - coeff * sym - offset) != 0:
            continue
        candidate = (expr, int(coeff), int(offset))
        best = found.get(sym)
        if best is None or (candidate[1], abs(candidate[2])) < (best[1], abs(best[2])):
            found[sym] = candidate
    return found
