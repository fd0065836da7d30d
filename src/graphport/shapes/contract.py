"""The shape contract: every shape fact of a program, as one typed record.

It says which symbols the program has, where each one's value comes from at call time (an
input dimension, or later a value computed in the graph), the range each is valid for,
the sizes below which the capture's decisions do not hold, how every dynamic input
dimension relates to the symbols, and the relations kept for Dim.AUTO dims. The program's
`range_constraints` and the checks `ep.module()` runs on every call are derived from it.

It serializes to plain JSON (`to_json` / `from_json`) with the expression codec of
shapes/expr_json.py (the artifact's too), so floor division and modulo survive a round
trip without `str()` and `eval`, and a hostile contract is refused rather than run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from ..errors import ArtifactError
from ..source import SourceLocation
from .expr import INF, ValueRange, bounds
from .expr_json import expr_from_json, expr_to_json, short, size_symbol, symbol_kind, symbol_of_kind


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

    def in_order(self, syms) -> list[sympy.Symbol]:
        """`syms` in the contract's order: the order the capture made them (input sizes,
        then data-dependent values)."""
        order = {s: i for i, s in enumerate(self.symbols)}
        return sorted(syms, key=order.__getitem__)

    def display_symbols(self) -> dict[sympy.Symbol, sympy.Symbol]:
        """Symbol -> a symbol named after the user's Dim: how every tool shows sizes. A
        data-dependent size keeps its `u` name (its label is a sentence, not a name)."""
        return {s: sympy.Symbol(f.name) for s, f in self.symbols.items()
                if f.name and isinstance(f.source, InputDimension)}

    def range_constraints(self) -> dict[sympy.Basic, ValueRange]:
        """torch.export's `range_constraints`: each symbol, and each derived dimension."""
        out: dict[sympy.Basic, ValueRange] = {}
        ranges = self.ranges
        for _, _, expr in self.dims:
            if expr.is_Integer:
                continue
            for sym in self.in_order(expr.free_symbols):
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
        table = {s.name: s for s in self.symbols}
        return {
            "symbols": [self._symbol_json(f) for f in self.symbols.values()],
            "dims": [{"input": i, "dim": d, "expr": expr_to_json(e, table)} for i, d, e in self.dims],
            "relations": [{"rel": expr_to_json(r.rel, table), "location": location_to_json(r.location)}
                          for r in self.relations],
        }

    @staticmethod
    def _symbol_json(f: SymbolFact) -> dict[str, Any]:
        entry = {
            "symbol": f.symbol.name, "name": f.name, "range": range_to_json(f.range),
            "source": ({"input": f.source.index, "dim": f.source.dim, "coeff": f.source.coeff,
                        "offset": f.source.offset} if isinstance(f.source, InputDimension)
                       else {"node": f.source.node}),
            "valid_from": f.valid_from, "assumed_at": location_to_json(f.assumed_at), "reason": f.reason,
        }
        if f.symbol != size_symbol(f.symbol.name):   # a data-dependent value that is not a size
            entry["kind"] = symbol_kind(f.symbol)
        return entry

    @classmethod
    def from_json(cls, data: Any) -> "ShapeContract":
        """The contract `data` describes; anything malformed is an ArtifactError (a contract
        may come from a file: an archive, or a torch program that carries one)."""
        try:
            return cls._from_json(data)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            if isinstance(e, ArtifactError):
                raise
            raise ArtifactError(f"malformed shape contract: {type(e).__name__}: {short(str(e))}") from None

    @classmethod
    def _from_json(cls, data: Any) -> "ShapeContract":
        symbols = {}
        for s in data["symbols"]:
            sym = symbol_of_kind(s["symbol"], s.get("kind", "size"))
            src = s["source"]
            if "input" in src:
                dim = None if src["dim"] is None else _integer(src["dim"])   # None: a dynamic int input
                source = InputDimension(_integer(src["input"]), dim, _integer(src["coeff"]), _integer(src["offset"]))
            else:
                source = ComputedValue(_text(src["node"]))
            if sym in symbols or s["valid_from"] is not None and type(s["valid_from"]) is not int:
                raise ArtifactError(f"malformed shape contract entry for {short(sym.name)}")
            symbols[sym] = SymbolFact(sym, _text(s["name"]), range_from_json(s["range"]), source, s["valid_from"],
                                      location_from_json(s["assumed_at"]), _text(s["reason"]))
        table = {s.name: s for s in symbols}
        dims = [(_integer(d["input"]), _integer(d["dim"]), expr_from_json(d["expr"], table)) for d in data["dims"]]
        relations = [Relation(expr_from_json(r["rel"], table), location_from_json(r["location"]))
                     for r in data["relations"]]
        return cls(symbols, dims, relations)


def range_to_json(r: ValueRange) -> list:
    """[lower, upper]: integers, "inf" / "-inf", or (a data-dependent float's bound) the
    number as an expression."""
    return [_bound_json(r.lower), _bound_json(r.upper)]


def _bound_json(v) -> int | str | list:
    if v == INF or v == -INF:
        return "inf" if v == INF else "-inf"
    if isinstance(v, int) or getattr(v, "is_Integer", False):
        return int(v)
    return expr_to_json(sympy.sympify(v))


def range_from_json(data: Any) -> ValueRange:
    if not isinstance(data, list) or len(data) != 2:
        raise ArtifactError(f"malformed value range {short(data)}")
    bounds_ = []
    for v in data:
        if v == "inf" or v == "-inf":
            bounds_.append(INF if v == "inf" else -INF)
        elif type(v) is int:
            bounds_.append(v)
        elif isinstance(v, list) and (number := expr_from_json(v)).is_Number:
            bounds_.append(number)
        else:
            raise ArtifactError(f"malformed value range {short(data)}")
    return ValueRange(*bounds_)


def _integer(v: Any) -> int:
    if type(v) is not int:
        raise ArtifactError(f"malformed shape contract: {short(v)} where an integer belongs")
    return v


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise ArtifactError(f"malformed shape contract: {short(v)} where a string belongs")
    return v


def location_to_json(loc: SourceLocation | None):
    return None if loc is None else [loc.filename, loc.lineno, loc.function]


def location_from_json(data) -> SourceLocation | None:
    if data is None:
        return None
    if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], str) and type(data[1]) is int
            and isinstance(data[2], str)):
        raise ArtifactError(f"malformed source location {short(data)}")
    return SourceLocation(data[0], data[1], data[2])
