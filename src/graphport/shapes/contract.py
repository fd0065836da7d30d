"""The shape contract: every shape fact of a program, as one typed record.

It says which symbols the program has, where each one's value comes from at call time (an
input dimension, or later a value computed in the graph), the range each is valid for,
the sizes below which the capture's decisions do not hold, how every dynamic input
dimension relates to the symbols, and the relations kept for Dim.AUTO dims. The program's
`range_constraints` and the checks `ep.module()` runs on every call are derived from it.

It serializes to plain JSON (`to_json` / `from_json`) with an expression encoding of its
own, so floor division and modulo survive a round trip without `str()` and `eval`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from ..source import SourceLocation
from .expr import INF, FloorDiv, Mod, ValueRange, bounds


@dataclass(frozen=True)
class InputDimension:
    """A symbol read from `flat input[index].shape[dim] == coeff * symbol + offset`, or (dim
    None) the value of a dynamic int input."""
    index: int
    dim: int | None
    coeff: int = 1
    offset: int = 0


@dataclass(frozen=True)
class ComputedValue:
    """A symbol bound to the value a graph node produces (a data-dependent size)."""
    node: str


@dataclass
class SymbolFact:
    symbol: sympy.Symbol
    name: str                                   # the user's Dim name, or an `input.size(d)` label
    range: ValueRange                           # the values the program is valid for
    source: InputDimension | ComputedValue
    valid_from: int | None = None               # sizes below this need their own export (None: whole range)
    assumed_at: SourceLocation | None = None    # the line whose decision needed `valid_from`
    reason: str = ""                            # why sizes below `valid_from` are refused


@dataclass
class Relation:
    """A relation between sizes that every call must satisfy, with the line that made it."""
    rel: sympy.Basic
    location: SourceLocation | None = None


@dataclass
class ShapeContract:
    symbols: dict[sympy.Symbol, SymbolFact] = field(default_factory=dict)
    dims: list[tuple[int, int, sympy.Expr]] = field(default_factory=list)   # (flat input, dim, expression)
    relations: list[Relation] = field(default_factory=list)

    @property
    def ranges(self) -> dict[sympy.Symbol, ValueRange]:
        return {s: f.range for s, f in self.symbols.items()}

    @property
    def names(self) -> dict[sympy.Symbol, str]:
        return {s: f.name for s, f in self.symbols.items()}

    def range_constraints(self) -> dict[sympy.Basic, ValueRange]:
        """torch.export's `range_constraints`: each symbol, and each derived dimension."""
        out: dict[sympy.Basic, ValueRange] = {}
        ranges = self.ranges
        for _, _, expr in self.dims:
            if expr.is_Integer:
                continue
            for sym in sorted(expr.free_symbols, key=_symbol_order):
                out.setdefault(sym, ranges[sym])
            if not expr.is_Symbol:
                lo, hi = bounds(expr, ranges)
                out.setdefault(expr, ValueRange(max(lo, 0), hi))
        for sym, fact in self.symbols.items():
            if isinstance(fact.source, ComputedValue) or fact.source.dim is None:   # data-dependent, or a dynamic int
                out.setdefault(sym, fact.range)
        return out

    # -- serialization ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "symbols": [{
                "symbol": f.symbol.name, "name": f.name, "range": _range_json(f.range),
                "source": ({"input": f.source.index, "dim": f.source.dim, "coeff": f.source.coeff,
                            "offset": f.source.offset} if isinstance(f.source, InputDimension)
                           else {"node": f.source.node}),
                "valid_from": f.valid_from, "assumed_at": _location_json(f.assumed_at), "reason": f.reason,
            } for f in self.symbols.values()],
            "dims": [{"input": i, "dim": d, "expr": expr_to_json(e)} for i, d, e in self.dims],
            "relations": [{"rel": expr_to_json(r.rel), "location": _location_json(r.location)}
                          for r in self.relations],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ShapeContract":
        symbols = {}
        for s in data["symbols"]:
            sym = size_symbol(s["symbol"])
            src = s["source"]
            source = (InputDimension(src["input"], src["dim"], src["coeff"], src["offset"]) if "input" in src
                      else ComputedValue(src["node"]))
            symbols[sym] = SymbolFact(sym, s["name"], _range_from_json(s["range"]), source, s["valid_from"],
                                      _location_from_json(s["assumed_at"]), s["reason"])
        dims = [(d["input"], d["dim"], expr_from_json(d["expr"])) for d in data["dims"]]
        relations = [Relation(expr_from_json(r["rel"]), _location_from_json(r["location"]))
                     for r in data["relations"]]
        return cls(symbols, dims, relations)


def size_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol graphport uses for a size (nonnegative integer)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def _symbol_order(sym: sympy.Symbol):
    digits = "".join(ch for ch in sym.name if ch.isdigit())
    return (sym.name.rstrip("0123456789"), int(digits) if digits else 0)


def _range_json(r: ValueRange) -> list:
    return [_bound_json(r.lower), _bound_json(r.upper)]


def _bound_json(v) -> int | str:
    return "inf" if v == INF else "-inf" if v == -INF else int(v)


def _range_from_json(r: list) -> ValueRange:
    return ValueRange(*(INF if v == "inf" else -INF if v == "-inf" else int(v) for v in r))


def _location_json(loc: SourceLocation | None):
    return None if loc is None else [loc.filename, loc.lineno, loc.function]


def _location_from_json(data) -> SourceLocation | None:
    return None if data is None else SourceLocation(data[0], int(data[1]), data[2])


# -- expressions as JSON ------------------------------------------------------------------------
#
# An expression is a JSON list whose head names the operation: ["sym", "s0"], ["int", 3],
# ["add", a, b, ...], ["mul", ...], ["pow", a, n], ["floordiv", a, b], ["mod", a, b],
# ["max", ...], ["min", ...], ["eq", a, b] (and ne, lt, le, gt, ge), ["and", ...],
# ["or", ...], ["not", a], ["rational", p, q], ["float", "repr"], ["true"], ["false"].

_NARY = {"add": sympy.Add, "mul": sympy.Mul, "max": sympy.Max, "min": sympy.Min, "and": sympy.And,
         "or": sympy.Or}
_BINARY = {"floordiv": FloorDiv, "mod": Mod, "pow": sympy.Pow}
_RELATIONS = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge}
_REL_NAMES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


def expr_to_json(e: sympy.Basic) -> list:
    if e is sympy.true or e is sympy.false:
        return [str(bool(e)).lower()]
    if isinstance(e, sympy.Symbol):
        return ["sym", e.name]
    if isinstance(e, sympy.Integer):
        return ["int", int(e)]
    if isinstance(e, sympy.Rational):
        return ["rational", int(e.p), int(e.q)]
    if isinstance(e, sympy.Float):
        return ["float", repr(float(e))]
    if isinstance(e, sympy.core.relational.Relational):
        return [_REL_NAMES[e.rel_op], expr_to_json(e.lhs), expr_to_json(e.rhs)]
    if isinstance(e, sympy.Not):
        return ["not", expr_to_json(e.args[0])]
    for name, fn in {**_NARY, **_BINARY}.items():
        if isinstance(e, fn):
            return [name, *(expr_to_json(a) for a in e.args)]
    raise ValueError(f"cannot encode the size expression {e} ({type(e).__name__})")


def expr_from_json(data: list) -> sympy.Basic:
    head, rest = data[0], data[1:]
    if head == "true":
        return sympy.true
    if head == "false":
        return sympy.false
    if head == "sym":
        return size_symbol(rest[0])
    if head == "int":
        return sympy.Integer(rest[0])
    if head == "rational":
        return sympy.Rational(rest[0], rest[1])
    if head == "float":
        return sympy.Float(float(rest[0]))
    if head == "not":
        return sympy.Not(expr_from_json(rest[0]))
    args = [expr_from_json(a) for a in rest]
    if head in _RELATIONS:
        return _RELATIONS[head](*args, evaluate=False)
    if head in _NARY:
        return _NARY[head](*args)
    if head in _BINARY:
        return _BINARY[head](*args)
    raise ValueError(f"unknown size expression operation {head!r}")
