"""Size expressions as graph values: `aten.sym_size.int` of an input, then `operator.*`.

A SymInt reaching an operator (`x.view(x.shape[0] * 2, -1)`) must be computed at run time
from the actual inputs, so its sympy expression is rebuilt in the graph from the input
dimension each symbol was first read from. Values are cached per expression.

Floats (`x * (x.shape[0] / 2)`, `q / q.shape[-1] ** 0.5`) and values computed from them
are rebuilt from their recipe instead, operation by operation as eager Python computes
them (`torch.sym_float`, `operator.truediv`, `operator.pow`, `torch.sym_sqrt`, ...), so
the graph's float is the eager float bit for bit. floor / ceil / trunc of a float are
`torch.sym_int` of `x // 1` / `-(-x // 1)` / `x`, which the IR's symbolic operators express.
"""
from __future__ import annotations

import operator
from typing import Callable

import sympy
import torch
import torch.fx as fx

from ..errors import InternalError, UnsupportedFeatureError
from ..ops.vocabulary import SYMBOLIC_SIZE_OPERATORS
from ..shapes.env import ShapeEnv
from ..shapes.expr import FloorDiv, Mod
from ..shapes.node import SymNode

aten = torch.ops.aten


class SizeValues:
    def __init__(self, env: ShapeEnv, input_nodes: dict[int, fx.Node]):
        self.env = env
        self.input_nodes = input_nodes
        self.cache: dict[sympy.Expr, fx.Node] = {}
        self.made: dict[int, tuple[SymNode, fx.Node]] = {}   # id(node) -> (node, its value), for recipes

    def value(self, v, emit: Callable, cache: bool = True):
        """The graph value (node or int) of a SymInt/SymBool/SymFloat."""
        return self._node_value(v.node, emit, cache)

    def _node_value(self, node: SymNode, emit: Callable, cache: bool):
        if node.recipe is None:
            expr = self.env.simplify(node.expr)
            if expr.is_Integer:
                return int(expr)
            if expr is sympy.true or expr is sympy.false:
                return bool(expr)
            return self._build(expr, emit, cache)
        if not self.env.simplify(node.expr).free_symbols:   # its sizes were fixed: a constant
            return node.hint
        found = self.made.get(id(node))
        if found is not None:
            return found[1]
        op, *args = node.recipe
        values = [self._node_value(a, emit, cache) if isinstance(a, SymNode) else a for a in args]
        out = emit_recipe(op, values, emit)
        if cache:
            self.made[id(node)] = (node, out)
        return out

    def _build(self, expr: sympy.Expr, emit: Callable, cache: bool):
        if expr.is_Integer:
            return int(expr)
        found = self.cache.get(expr)
        if found is not None:
            return found
        if expr.is_Symbol and expr not in self.env.symbols:
            # a data-dependent symbol is bound when it is made (capture/data_dependent.py)
            raise InternalError(f"the data-dependent value {expr} is used where its node is not visible")
        if expr.is_Symbol:
            info = self.env.symbols[expr]
            i, d = info.source   # d is None for a dynamic int input: the placeholder is the value
            node = self.input_nodes[i] if d is None else emit(aten.sym_size.int, (self.input_nodes[i], d), {})
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
        elif type(expr) in _RELATIONS:   # a size predicate (torch.cond on `x.shape[0] > 4`)
            node = emit(_RELATIONS[type(expr)], (self._build(expr.lhs, emit, cache), self._build(expr.rhs, emit, cache)), {})
        elif isinstance(expr, (sympy.And, sympy.Or)):
            fn = operator.and_ if isinstance(expr, sympy.And) else operator.or_
            args = [self._build(a, emit, cache) for a in expr.args]
            node = args[0]
            for arg in args[1:]:
                node = emit(fn, (node, arg), {})
        elif isinstance(expr, sympy.Not):
            node = emit(torch.sym_not, (self._build(expr.args[0], emit, cache),), {})
        elif expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
            node = emit(operator.pow, (self._build(expr.base, emit, cache), int(expr.exp)), {})
        else:
            raise UnsupportedFeatureError(f"the size expression {expr} cannot be computed in the graph yet",
                                          fix="keep size arithmetic to +, -, *, // and % on integers")
        if cache:
            self.cache[expr] = node
        return node


_RELATIONS = {sympy.StrictGreaterThan: operator.gt, sympy.GreaterThan: operator.ge, sympy.StrictLessThan: operator.lt,
              sympy.LessThan: operator.le, sympy.Eq: operator.eq, sympy.Ne: operator.ne}

# the shape engine's recipe operations, as the IR's symbolic-size operators that compute them
_OPERATORS = {recipe: SYMBOLIC_SIZE_OPERATORS[name] for recipe, name in {
    "add": "operator.add", "sub": "operator.sub", "mul": "operator.mul", "truediv": "operator.truediv",
    "floordiv": "operator.floordiv", "mod": "operator.mod", "pow": "operator.pow", "neg": "operator.neg",
    "sym_max": "torch.sym_max", "sym_min": "torch.sym_min", "sqrt": "torch.sym_sqrt", "sym_float": "torch.sym_float",
    "trunc": "torch.sym_int", "eq": "operator.eq", "ne": "operator.ne", "lt": "operator.lt", "le": "operator.le",
    "gt": "operator.gt", "ge": "operator.ge", "and": "operator.and_", "or": "operator.or_", "not": "torch.sym_not",
}.items()}


def recomputed_inside(node) -> bool:
    """Whether a value used inside a subgraph is computed there rather than lifted in: a
    float or bool made by Python operations on sizes (control-flow operators take only
    tensors and integers as operands)."""
    return isinstance(node, SymNode) and node.recipe is not None and node.pytype is not int


def as_sym(node: SymNode):
    """The torch value (SymInt, SymFloat, SymBool) of one of our nodes."""
    return {int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool}[node.pytype](node)


def emit_recipe(op: str, args: list, emit: Callable):
    """One recipe operation on graph values (nodes or Python constants)."""
    def call(fn, *a):
        if not any(isinstance(x, fx.Node) for x in a):
            return fn(*a)
        return emit(fn, a, {})

    if op == "const":
        return args[0]
    if op in _OPERATORS:
        return call(_OPERATORS[op], *args)
    (a,) = args
    if op == "abs":
        return call(torch.sym_max, a, call(operator.neg, a))
    if op == "floor":
        return call(torch.sym_int, call(operator.floordiv, a, 1))
    if op == "ceil":
        return call(torch.sym_int, call(operator.neg, call(operator.floordiv, call(operator.neg, a), 1)))
    if op == "is_integer":
        return call(operator.eq, call(operator.mod, a, 1.0), 0.0)
    raise UnsupportedFeatureError(f"the size computation {op} cannot be recorded in the graph yet",
                                  fix="keep size arithmetic to +, -, *, / and // on sizes")


def is_sym(v) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)) and isinstance(v.node, SymNode)
