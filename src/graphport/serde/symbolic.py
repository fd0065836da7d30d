"""Size expressions, symbolic values and the shape environment, as JSON.

A program's sizes are sympy expressions over graphport's size symbols, wrapped in our
SymNodes (shapes/node.py) behind torch.SymInt / SymFloat / SymBool. Saving writes each
expression as a tree of named operations (no `str()` to parse back, no `eval`); loading
rebuilds one ShapeEnv with the same symbols, example values (hints), ranges and
replacements, and SymNodes over it, so the loaded program prints and reasons as the
captured one did.
"""
from __future__ import annotations

from typing import Any, Callable

import sympy
import torch

from ..errors import ArtifactError
from ..shapes.contract import size_symbol
from ..shapes.env import ShapeEnv, SymbolInfo
from ..shapes.expr import INF, FloorDiv, Mod, ValueRange
from ..shapes.node import _PYTHON as RECIPE_OPERATIONS
from ..shapes.node import Opaque, SymNode

# Operations by name: how each is rebuilt. Relations keep their written form (evaluate=False).
_FUNCTIONS: dict[str, Callable] = {
    "add": sympy.Add, "mul": sympy.Mul, "pow": sympy.Pow, "max": sympy.Max, "min": sympy.Min,
    "floordiv": FloorDiv, "mod": Mod, "floor": sympy.floor, "ceiling": sympy.ceiling, "abs": sympy.Abs,
    "and": sympy.And, "or": sympy.Or, "not": sympy.Not, "opaque": Opaque,
}
_RELATIONS = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge}
_REL_NAMES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_ATOMS = {"true": sympy.true, "false": sympy.false, "inf": sympy.oo, "-inf": -sympy.oo, "nan": sympy.nan,
          "zoo": sympy.zoo}
_PYTYPES = {"int": int, "float": float, "bool": bool}


def expr_to_json(e: sympy.Basic) -> list:
    """An expression as ["operation", operands...]."""
    for name, atom in _ATOMS.items():
        if e is atom:   # sympy's singletons
            return [name]
    if isinstance(e, sympy.Symbol):
        if e.name.startswith("u"):   # data-dependent symbols: load could not rebind them to their nodes
            raise ArtifactError(
                f"cannot save the program: it has a data-dependent size ({e.name}, from .item(), nonzero, a "
                "boolean mask or the like), which the artifact format cannot hold yet",
                fix="keep the program in memory (ep.module()), or convert it with graphport.interop.to_torch "
                    "and save that with torch.export.save")
        if e != size_symbol(e.name):
            raise ArtifactError(f"cannot save the size symbol {e.name}: it is not one of graphport's size symbols")
        return ["sym", e.name]
    if isinstance(e, sympy.Integer):
        return ["int", int(e)]
    if isinstance(e, sympy.Rational):
        return ["rational", int(e.p), int(e.q)]
    if isinstance(e, sympy.Float):
        return ["float", repr(float(e))]
    if isinstance(e, sympy.core.relational.Relational):
        return [_REL_NAMES[e.rel_op], expr_to_json(e.lhs), expr_to_json(e.rhs)]
    for name, fn in _FUNCTIONS.items():
        if isinstance(fn, type) and isinstance(e, fn):
            return [name, *(expr_to_json(a) for a in e.args)]
    raise ArtifactError(f"cannot save the size expression {e} ({type(e).__name__}): no encoding for it")


def expr_from_json(data: Any) -> sympy.Basic:
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ArtifactError(f"malformed size expression {_short(data)}")
    head, rest = data[0], data[1:]
    if head in _ATOMS and not rest:
        return _ATOMS[head]
    if head == "sym" and len(rest) == 1 and isinstance(rest[0], str) and rest[0].isidentifier():
        return size_symbol(rest[0])
    if head == "int" and len(rest) == 1 and type(rest[0]) is int:
        return sympy.Integer(rest[0])
    if head == "rational" and len(rest) == 2 and all(type(v) is int for v in rest) and rest[1] > 0:
        return sympy.Rational(rest[0], rest[1])
    if head == "float" and len(rest) == 1 and isinstance(rest[0], str):
        return sympy.Float(_parse_float(rest[0]))
    args = [expr_from_json(a) for a in rest]
    if head == "pow" and (len(args) != 2 or not _small_exponent(args[1])):
        raise ArtifactError(f"a size expression raises to the power {_short(rest[1:])}; sizes only use small powers")
    if head in _RELATIONS and len(args) == 2:
        return _RELATIONS[head](*args, evaluate=False)
    if head in _FUNCTIONS and args:
        return _FUNCTIONS[head](*args)
    raise ArtifactError(f"unknown size expression operation {_short(head)} with {len(rest)} operands")


_MAX_EXPONENT = 64


def _small_exponent(exponent: Any) -> bool:
    """Powers in sizes are small (squares, square roots): a huge one would make sympy or the
    hint's replay compute for ever on a hostile file."""
    if isinstance(exponent, sympy.Basic):
        return bool(exponent.is_Rational) and abs(exponent) <= _MAX_EXPONENT
    return isinstance(exponent, (int, float)) and abs(exponent) <= _MAX_EXPONENT


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ArtifactError(f"malformed float {_short(text)} in a size expression") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def range_to_json(r: ValueRange) -> list:
    return [_bound(r.lower), _bound(r.upper)]


def _bound(v) -> int | str:
    return "inf" if v == INF else "-inf" if v == -INF else int(v)


def range_from_json(data: Any) -> ValueRange:
    if not isinstance(data, list) or len(data) != 2:
        raise ArtifactError(f"malformed value range {_short(data)}")
    bounds = []
    for v in data:
        if v == "inf" or v == "-inf":
            bounds.append(INF if v == "inf" else -INF)
        elif type(v) is int:
            bounds.append(v)
        else:
            raise ArtifactError(f"malformed value range {_short(data)}")
    return ValueRange(*bounds)


# -- symbolic values --------------------------------------------------------------------------

def symnode_to_json(node: SymNode) -> dict:
    """A SymNode: its Python type, expression, and the recipe that recomputes a float value."""
    out: dict[str, Any] = {"type": node.pytype.__name__, "expr": expr_to_json(node._expr)}
    if node.recipe is not None:
        op, *args = node.recipe
        out["recipe"] = [op, *({"node": symnode_to_json(a)} if isinstance(a, SymNode) else {"value": _number(a)}
                               for a in args)]
        out["exact"] = node.exact
    if node.constant is not None:
        out["constant"] = _number(node.constant)
    return out


def _number(v):
    if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
        return {"float": repr(v)}
    if isinstance(v, (bool, int, float)):
        return v
    raise ArtifactError(f"cannot save the constant {v!r} of a symbolic value")


def _number_from_json(v):
    if isinstance(v, dict) and set(v) == {"float"} and isinstance(v["float"], str):
        return _parse_float(v["float"])
    if isinstance(v, (bool, int, float)):
        return v
    raise ArtifactError(f"malformed constant {_short(v)} in a symbolic value")


def symnode_from_json(data: Any, env: ShapeEnv) -> SymNode:
    if not isinstance(data, dict) or data.get("type") not in _PYTYPES:
        raise ArtifactError(f"malformed symbolic value {_short(data)}")
    expr = expr_from_json(data.get("expr"))
    unknown = [s.name for s in expr.free_symbols if s not in env.symbols]
    if unknown:
        raise ArtifactError(f"a symbolic value uses the size symbol {unknown[0]}, which the program does not define")
    recipe = None
    if "recipe" in data:
        raw = data["recipe"]
        if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
            raise ArtifactError(f"malformed recipe {_short(raw)}")
        args = []
        for a in raw[1:]:
            if isinstance(a, dict) and set(a) == {"node"}:
                args.append(symnode_from_json(a["node"], env))
            elif isinstance(a, dict) and set(a) == {"value"}:
                args.append(_number_from_json(a["value"]))
            else:
                raise ArtifactError(f"malformed recipe operand {_short(a)}")
        recipe = (raw[0], *args)
    constant = _number_from_json(data["constant"]) if "constant" in data else None
    node = SymNode(expr, env, _PYTYPES[data["type"]], recipe, bool(data.get("exact", True)), constant)
    if recipe is not None:
        _check_recipe(node)
    return node


def _check_recipe(node: SymNode) -> None:
    """A recipe names one of the operations SymNode replays (no other code is reachable)."""
    op, *args = node.recipe
    if op != "const" and op not in RECIPE_OPERATIONS:
        raise ArtifactError(f"unknown operation {_short(op)} in a symbolic value's recipe")
    if op in ("pow", "float_pow") and len(args) == 2 and not isinstance(args[1], SymNode) \
            and not _small_exponent(args[1]):
        raise ArtifactError(f"a symbolic value's recipe raises to the power {_short(args[1])}")
    if op in ("pow", "float_pow") and len(args) == 2 and isinstance(args[1], SymNode) \
            and not _small_exponent(args[1]._expr):
        raise ArtifactError("a symbolic value's recipe raises to a power that is not a small constant")


def sym_to_json(value: torch.SymInt | torch.SymFloat | torch.SymBool) -> dict:
    node = value.node
    if not isinstance(node, SymNode):
        raise ArtifactError(f"cannot save the symbolic value {value}: it was not made by graphport")
    return symnode_to_json(node)


def sym_from_json(data: Any, env: ShapeEnv | None):
    if env is None:
        raise ArtifactError("a symbolic value appears in a program that defines no size symbols")
    node = symnode_from_json(data, env)
    wrap = {int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool}[node.pytype]
    return wrap(node)


# -- the shape environment --------------------------------------------------------------------

def env_to_json(env: ShapeEnv) -> dict:
    return {
        "symbols": [{"symbol": s.name, "hint": info.hint, "range": range_to_json(info.declared),
                     "name": info.dim_name, "source": list(info.source), "auto": info.auto,
                     "affine": list(info.source_affine)} for s, info in env.symbols.items()],
        "replacements": [[s.name, expr_to_json(e)] for s, e in env.replacements.items()],
        "assumed_min": [[s.name, v] for s, v in env.assumed_min.items()],
    }


def env_from_json(data: Any) -> ShapeEnv:
    if not isinstance(data, dict):
        raise ArtifactError("malformed shape environment")
    env = ShapeEnv()
    for entry in _list(data.get("symbols")):
        if not isinstance(entry, dict):
            raise ArtifactError("malformed size symbol entry")
        name = entry.get("symbol")
        if not isinstance(name, str) or not name.isidentifier() or type(entry.get("hint")) is not int:
            raise ArtifactError(f"malformed size symbol entry {_short(entry)}")
        sym = size_symbol(name)
        if sym in env.symbols:
            raise ArtifactError(f"the size symbol {name} is defined twice")
        source, affine = _source(entry.get("source")), _int_pair(entry.get("affine"))
        env.symbols[sym] = SymbolInfo(sym, entry["hint"], range_from_json(entry.get("range")),
                                      str(entry.get("name", name)), source, bool(entry.get("auto", False)), affine)
        if source[1] is None:   # a dynamic int: never assumed >= 2 (shapes/spec.py)
            env.exact.add(sym)
    for pair in _list(data.get("replacements")):
        sym, expr = _symbol_of(pair, env), expr_from_json(pair[1])
        env.replacements[sym] = expr
    for pair in _list(data.get("assumed_min")):
        sym = _symbol_of(pair, env)
        if type(pair[1]) is not int:
            raise ArtifactError(f"malformed assumption {_short(pair)}")
        env.assumed_min[sym] = pair[1]
    return env


def _list(value: Any) -> list:
    if not isinstance(value, list):
        raise ArtifactError(f"expected a list, found {_short(value)}")
    return value


def _int_pair(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2 or not all(type(v) is int for v in value):
        raise ArtifactError(f"expected a pair of integers, found {_short(value)}")
    return value[0], value[1]


def _source(value: Any) -> tuple[int, int | None]:
    """(flat input, dimension) a symbol is read from; dimension null for a dynamic int input."""
    if isinstance(value, list) and len(value) == 2 and type(value[0]) is int and value[1] is None:
        return value[0], None
    return _int_pair(value)


def _symbol_of(pair: Any, env: ShapeEnv) -> sympy.Symbol:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str):
        raise ArtifactError(f"malformed entry {_short(pair)}")
    sym = size_symbol(pair[0]) if pair[0].isidentifier() else None
    if sym not in env.symbols:
        raise ArtifactError(f"the entry {_short(pair)} names an undefined size symbol")
    return sym
