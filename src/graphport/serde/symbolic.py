"""Size expressions, symbolic values and the shape environment, as JSON.

A program's sizes are sympy expressions over graphport's size symbols, wrapped in our
SymNodes (shapes/node.py) behind torch.SymInt / SymFloat / SymBool. Saving writes each
expression as a tree of named operations (no `str()` to parse back, no `eval`); loading
rebuilds one ShapeEnv with the same symbols, example values (hints), ranges and
replacements, and SymNodes over it, so the loaded program prints and reasons as the
captured one did. Data-dependent symbols (u0, ...) come back with their assumptions, ranges,
the node bound to each and the facts the program stated about them. Expressions go
through the one codec of shapes/expr_json.py, which bounds what a hostile file can build.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from ..errors import ArtifactError
from ..shapes.contract import location_from_json, location_to_json, range_from_json, range_to_json
from ..shapes.env import ShapeEnv, SymbolInfo
from ..shapes.expr_json import (expr_from_json, expr_to_json, parse_float as _parse_float, short as _short,
                                size_symbol, small_exponent as _small_exponent, symbol_kind, symbol_of_kind)
from ..shapes.node import _PYTHON as RECIPE_OPERATIONS
from ..shapes.node import SymNode
from ..shapes.unbacked import UnbackedInfo

_PYTYPES = {"int": int, "float": float, "bool": bool}


def symbol_table(env: ShapeEnv | None) -> dict[str, sympy.Symbol]:
    """The program's data-dependent symbols by name: expressions name them, and their
    assumptions (a size, an integer, a real) come from the environment's table."""
    return {} if env is None else {s.name: s for s in env.unbacked.infos}


# -- symbolic values --------------------------------------------------------------------------

def symnode_to_json(node: SymNode) -> dict:
    """A SymNode: its Python type, expression, and the recipe that recomputes a float value."""
    out: dict[str, Any] = {"type": node.pytype.__name__, "expr": expr_to_json(node._expr, symbol_table(node.env))}
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
    expr = expr_from_json(data.get("expr"), symbol_table(env))
    unknown = [s.name for s in expr.free_symbols if s not in env.symbols and s not in env.unbacked.infos]
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
    table = symbol_table(env)
    doc = {
        "symbols": [{"symbol": s.name, "hint": info.hint, "range": range_to_json(info.declared),
                     "name": info.dim_name, "source": list(info.source), "auto": info.auto,
                     "affine": list(info.source_affine)} for s, info in env.symbols.items()],
        "replacements": [[s.name, expr_to_json(e, table)] for s, e in env.replacements.items()],
        "assumed_min": [[s.name, v] for s, v in env.assumed_min.items()],
    }
    if env.proven_min:   # written only where there are some: other programs' bytes are unchanged
        doc["proven_min"] = [[s.name, v] for s, v in env.proven_min.items()]
    if env.unbacked.infos:   # written only where there are some: other programs' bytes are unchanged
        doc["data_dependent"] = _unbacked_to_json(env, table)
    return doc


def _unbacked_to_json(env: ShapeEnv, table: dict[str, sympy.Symbol]) -> dict:
    """Data-dependent symbols: each one's assumptions, Python type, range, where the
    program computes it (origin, source line, the graph node it is bound to), and the facts
    the program stated about them (each `diff >= 0`, `== 0` or `!= 0`)."""
    return {
        "symbols": [{"symbol": s.name, "kind": symbol_kind(s), "type": info.pytype.__name__,
                     "range": range_to_json(info.range), "origin": info.origin,
                     "location": location_to_json(info.location), "size_like": info.size_like,
                     "node": info.node} for s, info in env.unbacked.infos.items()],
        "facts": [[expr_to_json(diff, table), op] for diff, op in env.unbacked.facts],
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
        env.add_symbol(SymbolInfo(sym, entry["hint"], range_from_json(entry.get("range")),
                                  str(entry.get("name", name)), source, bool(entry.get("auto", False)), affine))
        if source[1] is None:   # a dynamic int: never assumed >= 2 (shapes/spec.py)
            env.exact.add(sym)
    if "data_dependent" in data:
        _unbacked_from_json(data["data_dependent"], env)
    table = symbol_table(env)
    for pair in _list(data.get("replacements")):
        sym, expr = _symbol_of(pair, env), expr_from_json(pair[1], table)
        env.replacements[sym] = expr
    for key, into in (("assumed_min", env.assumed_min), ("proven_min", env.proven_min)):
        for pair in _list(data.get(key)) if key in data or key == "assumed_min" else ():
            sym = _symbol_of(pair, env)
            if type(pair[1]) is not int:
                raise ArtifactError(f"malformed assumption {_short(pair)}")
            into[sym] = pair[1]
    return env


_FACT_OPS = (">=", "==", "!=")


def _unbacked_from_json(data: Any, env: ShapeEnv) -> None:
    if not isinstance(data, dict):
        raise ArtifactError("malformed data-dependent symbols")
    infos = env.unbacked.infos
    for entry in _list(data.get("symbols")):
        if not isinstance(entry, dict) or entry.get("type") not in _PYTYPES or not isinstance(entry.get("origin"), str) \
                or not isinstance(entry.get("size_like"), bool) or not (entry.get("node") is None
                                                                       or isinstance(entry.get("node"), str)):
            raise ArtifactError(f"malformed data-dependent symbol entry {_short(entry)}")
        sym = symbol_of_kind(entry.get("symbol"), entry.get("kind"))
        if sym.name in {s.name for s in (*env.symbols, *infos)}:
            raise ArtifactError(f"the symbol {sym.name} is defined twice")
        env.unbacked.add(UnbackedInfo(sym, _PYTYPES[entry["type"]], range_from_json(entry.get("range")),
                                      entry["origin"], location_from_json(entry.get("location")), entry["size_like"],
                                      entry["node"]))
    table = symbol_table(env)
    for fact in _list(data.get("facts")):
        if not isinstance(fact, list) or len(fact) != 2 or fact[1] not in _FACT_OPS:
            raise ArtifactError(f"malformed fact {_short(fact)} about data-dependent symbols")
        diff = expr_from_json(fact[0], table)
        undefined = [s.name for s in diff.free_symbols if s not in env.symbols and s not in infos]
        if undefined:
            raise ArtifactError(f"a fact uses the symbol {undefined[0]}, which the program does not define")
        env.unbacked.facts.append((diff, fact[1]))


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
    sym = symbol_table(env).get(pair[0], sym)
    if sym not in env.symbols and sym not in env.unbacked.infos:
        raise ArtifactError(f"the entry {_short(pair)} names an undefined size symbol")
    return sym
