"""Size expressions as JSON, and back: the one codec of the shape contract and the artifact.

An expression is a JSON list whose head names the operation: ["sym", "s0"], ["int", 3],
["rational", p, q], ["float", "repr"], ["add", a, b, ...], ["mul", ...], ["pow", a, n],
["floordiv", a, b], ["mod", a, b], ["max", ...], ["min", ...], ["floor", a],
["ceiling", a], ["abs", a], ["eq", a, b] (and ne, lt, le, gt, ge), ["and", ...],
["or", ...], ["not", a], ["opaque", tag, example, *symbols], and the atoms ["true"],
["false"], ["inf"], ["-inf"], ["nan"], ["zoo"]. No `str()` to parse back, no `eval`.

Decoding trusts nothing: the input may come from a stranger's file (an archive, a torch
program carrying a contract). It is bounded in depth and in size, integers are bounded,
and every power it builds has a small constant exponent, because a relation such as
`s0 ** (10 ** 9) >= 1` would make the call-time check (or sympy) compute for ever.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import sympy

from ..errors import ArtifactError, short
from .expr import FloorDiv, Mod
from .opaque import Opaque

MAX_DEPTH = 64            # nesting of one expression
MAX_NODES = 20_000        # operations and atoms in one expression
MAX_EXPONENT = 64         # |n| of any power (squares, square roots: sizes use small ones)
MAX_INT_BITS = 64         # integer literals fit a size or a stride

_FUNCTIONS: dict[str, Callable] = {
    "add": sympy.Add, "mul": sympy.Mul, "pow": sympy.Pow, "max": sympy.Max, "min": sympy.Min,
    "floordiv": FloorDiv, "mod": Mod, "floor": sympy.floor, "ceiling": sympy.ceiling, "abs": sympy.Abs,
    "and": sympy.And, "or": sympy.Or, "not": sympy.Not, "opaque": Opaque,
}
_ARITY = {"pow": 2, "floordiv": 2, "mod": 2, "floor": 1, "ceiling": 1, "abs": 1, "not": 1}
_RELATIONS = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge}
_REL_NAMES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_ATOMS = {"true": sympy.true, "false": sympy.false, "inf": sympy.oo, "-inf": -sympy.oo, "nan": sympy.nan,
          "zoo": sympy.zoo}


def size_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol graphport uses for a size read from an input (nonnegative integer)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


# The assumptions of a data-dependent symbol, by name: a size or a value (`.item()` of an
# integer, a float or a bool tensor).
_KINDS = {"size": {"integer": True, "nonnegative": True}, "integer": {"integer": True}, "real": {"real": True}}


def symbol_kind(sym: sympy.Symbol) -> str:
    for kind, assumptions in _KINDS.items():
        if sym == sympy.Symbol(sym.name, **assumptions):
            return kind
    raise ArtifactError(f"cannot save the symbol {sym.name}: its assumptions {sym.assumptions0} are none of "
                        f"{sorted(_KINDS)}")


def symbol_of_kind(name: Any, kind: Any) -> sympy.Symbol:
    if not isinstance(name, str) or not name.isidentifier() or kind not in _KINDS:
        raise ArtifactError(f"malformed symbol {short(name)} of kind {short(kind)}")
    return sympy.Symbol(name, **_KINDS[kind])


def expr_to_json(e: sympy.Basic, symbols: Mapping[str, sympy.Symbol] | None = None) -> list:
    """`e` as JSON. Each symbol must be a size symbol, or the one `symbols` holds under its
    name (a data-dependent symbol, whose assumptions the reader gets from the same table)."""
    for name, atom in _ATOMS.items():
        if e is atom:   # sympy's singletons
            return [name]
    if isinstance(e, sympy.Symbol):
        known = symbols.get(e.name) if symbols is not None else None
        if e != known and e != size_symbol(e.name):
            raise ArtifactError(f"cannot save the size symbol {e.name}: it is not one of the program's symbols")
        return ["sym", e.name]
    if isinstance(e, sympy.Integer):
        return ["int", int(e)]
    if isinstance(e, sympy.Rational):
        return ["rational", int(e.p), int(e.q)]
    if isinstance(e, sympy.Float):
        return ["float", repr(float(e))]
    if isinstance(e, sympy.core.relational.Relational):
        return [_REL_NAMES[e.rel_op], expr_to_json(e.lhs, symbols), expr_to_json(e.rhs, symbols)]
    for name, fn in _FUNCTIONS.items():
        if isinstance(e, fn):
            return [name, *(expr_to_json(a, symbols) for a in e.args)]
    raise ArtifactError(f"cannot save the size expression {e} ({type(e).__name__}): no encoding for it")


def expr_from_json(data: Any, symbols: Mapping[str, sympy.Symbol] | None = None) -> sympy.Basic:
    """The expression `data` encodes; a name in `symbols` gives that symbol, any other name
    a size symbol. Anything malformed, too deep, too large or with a large power is an
    ArtifactError."""
    return _Decoder(symbols or {}).decode(data, 0)


class _Decoder:
    def __init__(self, symbols: Mapping[str, sympy.Symbol]):
        self.symbols = symbols
        self.nodes = 0

    def decode(self, data: Any, depth: int) -> sympy.Basic:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise ArtifactError(f"a size expression is deeper than {MAX_DEPTH} levels or larger than {MAX_NODES} "
                                "operations")
        if not isinstance(data, list) or not data or not isinstance(data[0], str):
            raise ArtifactError(f"malformed size expression {short(data)}")
        head, rest = data[0], data[1:]
        if head in _ATOMS and not rest:
            return _ATOMS[head]
        if head == "sym" and len(rest) == 1 and isinstance(rest[0], str) and rest[0].isidentifier():
            return self.symbols.get(rest[0]) or size_symbol(rest[0])
        if head == "int" and len(rest) == 1 and _small_int(rest[0]):
            return sympy.Integer(rest[0])
        if head == "rational" and len(rest) == 2 and all(_small_int(v) for v in rest) and rest[1] > 0:
            return sympy.Rational(rest[0], rest[1])
        if head == "float" and len(rest) == 1 and isinstance(rest[0], str) and len(rest[0]) <= 40:
            return sympy.Float(parse_float(rest[0]))
        if head not in _RELATIONS and head not in _FUNCTIONS or not rest \
                or len(rest) != _ARITY.get(head, len(rest)) or head in _RELATIONS and len(rest) != 2:
            raise ArtifactError(f"unknown size expression operation {short(head)} with {len(rest)} operands")
        args = [self.decode(a, depth + 1) for a in rest]
        if head == "pow" and not small_exponent(args[1]):
            raise ArtifactError(f"a size expression raises to the power {short(rest[1])}; sizes only use small "
                                "powers")
        if head in _RELATIONS:
            return _RELATIONS[head](*args, evaluate=False)
        built = _FUNCTIONS[head](*args)
        _check_powers(built)
        return built


def _small_int(value: Any) -> bool:
    return type(value) is int and value.bit_length() <= MAX_INT_BITS


def small_exponent(exponent: Any) -> bool:
    """Powers in sizes are small (squares, square roots): a huge one would make sympy or a
    check replaying it compute for ever on a hostile input."""
    if isinstance(exponent, sympy.Basic):
        return bool(exponent.is_Rational) and abs(exponent) <= MAX_EXPONENT
    return isinstance(exponent, (int, float)) and abs(exponent) <= MAX_EXPONENT


def _check_powers(built: sympy.Basic) -> None:
    """sympy merges powers as it builds ((x**64)**64 is x**4096, x**64 * x**64 is x**128):
    the bound holds for what was built, not only for what was written."""
    if isinstance(built, sympy.Pow):
        powers = (built,)
    elif isinstance(built, sympy.Mul):
        powers = tuple(a for a in built.args if isinstance(a, sympy.Pow))
    else:
        return
    for p in powers:
        if not small_exponent(p.exp):
            raise ArtifactError(f"a size expression builds the power {short(p)}; sizes only use small powers "
                                "of sizes")


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ArtifactError(f"malformed float {short(text)} in a size expression") from None
