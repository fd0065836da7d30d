"""Size expressions across the boundary: graphport's sympy forms <-> torch's.

Both sides write sizes as sympy expressions, but over different symbol assumptions and
different function classes (graphport's FloorDiv/Mod vs torch's FloorDiv/PythonMod/Max/...).
sympy compares symbols by name *and* assumptions, so an expression must be rebuilt on the
other side's symbols and functions, never passed through: a torch `s0` is not our `s0`.
"""
from __future__ import annotations

from typing import Callable

import sympy
import torch.utils._sympy.functions as tfn
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

from ..errors import UnsupportedFeatureError
from ..shapes.contract import size_symbol
from ..shapes.expr import INF, FloorDiv, Mod, ValueRange

_RELATIONS = (sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)
_LOGIC = (sympy.And, sympy.Or, sympy.Not)


def torch_size_symbol(name: str) -> sympy.Symbol:
    """An input size symbol as torch's shape environment makes it: a positive integer.
    (torch makes its data-dependent symbols itself, see interop/to_torch.py.)"""
    return sympy.Symbol(name, positive=True, integer=True)


def _rebuild(expr: sympy.Basic, symbol: Callable[[sympy.Symbol], sympy.Basic], functions: dict,
             memo: dict) -> sympy.Basic:
    if expr in memo:
        return memo[expr]
    if isinstance(expr, sympy.Symbol):
        out = symbol(expr)
    elif isinstance(expr, sympy.Number) or expr in (sympy.true, sympy.false):
        out = expr
    else:
        args = [_rebuild(a, symbol, functions, memo) for a in expr.args]
        maker = next((fn for cls, fn in functions.items() if isinstance(expr, cls)), None)
        if maker is None:
            raise UnsupportedFeatureError(
                f"the size expression {expr} uses {type(expr).__name__}, which has no counterpart across the "
                "graphport / torch.export boundary", fix="export the program with that dimension static")
        out = maker(*args)
    memo[expr] = out
    return out


def _pow_to_torch(base, exp):
    if exp.is_Integer and exp >= 0 and base.is_integer:
        return tfn.PowByNatural(base, exp)
    return sympy.Pow(base, exp)


_TO_TORCH = {
    sympy.Add: sympy.Add, sympy.Mul: sympy.Mul, sympy.Pow: _pow_to_torch,
    # unevaluated: torch would fold (s//2)//2 into s//4, equal but printed otherwise on the way back
    FloorDiv: lambda a, b: tfn.FloorDiv(a, b, evaluate=False), Mod: lambda a, b: tfn.PythonMod(a, b, evaluate=False),
    sympy.Max: tfn.Max, sympy.Min: tfn.Min,
    # unevaluated: torch's size symbols are positive, ours nonnegative; `Ne(s0, 0)` must stay a check
    **{r: (lambda r: lambda a, b: r(a, b, evaluate=False))(r) for r in _RELATIONS}, **{op: op for op in _LOGIC},
}

_FROM_TORCH = {
    sympy.Add: sympy.Add, sympy.Mul: sympy.Mul, sympy.Pow: sympy.Pow, tfn.PowByNatural: sympy.Pow,
    tfn.CleanDiv: FloorDiv, tfn.FloorDiv: FloorDiv, tfn.PythonMod: Mod, tfn.Mod: Mod,
    tfn.Max: sympy.Max, tfn.Min: sympy.Min, tfn.IntTrueDiv: lambda a, b: a / b,
    tfn.FloatTrueDiv: lambda a, b: a / b,
    **{r: (lambda r: lambda a, b: r(a, b))(r) for r in _RELATIONS}, **{op: op for op in _LOGIC},
}


class SymbolMap:
    """One-to-one correspondence between graphport's size symbols and torch's."""

    def __init__(self) -> None:
        self.to_torch_symbols: dict[sympy.Symbol, sympy.Symbol] = {}
        self._to_torch_memo: dict = {}
        self._from_torch_memo: dict = {}

    def bind(self, ours: sympy.Symbol, theirs: sympy.Symbol) -> None:
        self.to_torch_symbols[ours] = theirs

    def to_torch(self, expr: sympy.Basic) -> sympy.Basic:
        def symbol(s: sympy.Symbol) -> sympy.Basic:
            if s not in self.to_torch_symbols:
                raise UnsupportedFeatureError(
                    f"the size symbol {s} is not in the program's shape contract, so torch.export cannot be told "
                    "where its value comes from", fix="export the program again with graphport.export")
            return self.to_torch_symbols[s]
        return _rebuild(expr, symbol, _TO_TORCH, self._to_torch_memo)

    def from_torch(self, expr: sympy.Basic) -> sympy.Basic:
        return _rebuild(expr, lambda s: size_symbol(s.name), _FROM_TORCH, self._from_torch_memo)


def range_to_torch(r: ValueRange) -> ValueRanges:
    return ValueRanges(int(r.lower), int_oo if r.upper == INF else int(r.upper))


def range_from_torch(r: ValueRanges) -> ValueRange:
    lower = -INF if r.lower in (-int_oo, -sympy.oo) else int(r.lower)
    return ValueRange(lower, INF if r.upper in (int_oo, sympy.oo) else int(r.upper))
