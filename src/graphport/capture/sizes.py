"""Size expressions as graph values: `aten.sym_size.int` of an input, then `operator.*`.

A SymInt reaching an operator (`x.view(x.shape[0] * 2, -1)`) must be computed at run time
from the actual inputs, so its sympy expression is rebuilt in the graph from the input
dimension each symbol was first read from. Values are cached per expression.
"""
from __future__ import annotations

import operator
from typing import Callable

import sympy
import torch
import torch.fx as fx

from ..errors import UnsupportedFeatureError
from ..shapes.env import ShapeEnv
from ..shapes.expr import FloorDiv, Mod
from ..shapes.node import SymNode

aten = torch.ops.aten


class SizeValues:
    def __init__(self, env: ShapeEnv, input_nodes: dict[int, fx.Node]):
        self.env = env
        self.input_nodes = input_nodes
        self.cache: dict[sympy.Expr, fx.Node] = {}

    def value(self, v, emit: Callable, cache: bool = True):
        """The graph value (node or int) of a SymInt/SymBool/SymFloat."""
        expr = self.env.simplify(v.node.expr)
        if expr.is_Integer:
            return int(expr)
        if expr is sympy.true or expr is sympy.false:
            return bool(expr)
        return self._build(expr, emit, cache)

    def _build(self, expr: sympy.Expr, emit: Callable, cache: bool):
        if expr.is_Integer:
            return int(expr)
        found = self.cache.get(expr)
        if found is not None:
            return found
        if expr.is_Symbol:
            info = self.env.symbols[expr]
            i, d = info.source
            node = emit(aten.sym_size.int, (self.input_nodes[i], d), {})
            coeff, offset = info.source_affine   # that dim is coeff * symbol + offset
            if offset:
                node = emit(operator.sub, (node, offset), {})
            if coeff != 1:
                node = emit(operator.floordiv, (node, coeff), {})
        elif expr.is_Add or expr.is_Mul:
            fn = operator.add if expr.is_Add else operator.mul
            terms = sorted(expr.args, key=lambda a: a.is_Number)   # symbolic terms first
            node = self._build(terms[0], emit, cache)
            for term in terms[1:]:
                node = emit(fn, (node, self._build(term, emit, cache)), {})
        elif isinstance(expr, FloorDiv):
            node = emit(operator.floordiv, tuple(self._build(a, emit, cache) for a in expr.args), {})
        elif isinstance(expr, Mod):
            node = emit(operator.mod, tuple(self._build(a, emit, cache) for a in expr.args), {})
        elif isinstance(expr, (sympy.Max, sympy.Min)):
            fn = torch.sym_max if isinstance(expr, sympy.Max) else torch.sym_min
            args = [self._build(a, emit, cache) for a in expr.args]
            node = args[0]
            for arg in args[1:]:
                node = emit(fn, (node, arg), {})
        elif expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
            node = emit(operator.pow, (self._build(expr.base, emit, cache), int(expr.exp)), {})
        else:
            raise UnsupportedFeatureError(f"the size expression {expr} cannot be computed in the graph yet",
                                          fix="keep size arithmetic to +, -, *, // and % on integers")
        if cache:
            self.cache[expr] = node
        return node


def is_sym(v) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)) and isinstance(v.node, SymNode)
