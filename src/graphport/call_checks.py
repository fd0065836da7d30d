"""The input checks of `ep.module()`, as straight-line Python generated once per program.

Walking the input specs and the shape contract (pytree flattening, sympy substitution) on
every call costs tens of microseconds, more than a small model's graph. So the module
compiles, once, a function that takes the call's `args` and `kwargs` apart exactly as the
export's input structure says and checks every leaf with plain comparisons: types, dtypes,
ranks, static sizes, each symbol's range and divisibility, every dynamic dimension against
its expression, the kept relations, and tensors passed twice. It answers the leaves in the
graph's order, or None as soon as anything differs.

It never raises and never words an error: on None the module runs the general checks
(`runtime.py`), which refuse the call with the precise message, or accept a call the
generated code does not cover (a dict argument whose keys come in another order, a tensor
subclass), so
the generated code only has to be sound: it accepts nothing the general checks refuse.
The source is built only from the program's validated data (specs, dtypes, integers and
sympy expressions of our own closed grammar); constants go in through the function's
globals, never into the text, except integers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from . import _torch

if TYPE_CHECKING:   # the shape algebra (sympy) is imported where a program has a shape contract
    import sympy

pytree = _torch.pytree

_CONSTANT_TYPES = (bool, int, float, str)
_RELATIONS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


class _Unsupported(Exception):
    """The program has a structure or an expression the generator does not cover."""


class _Source:
    def __init__(self):
        self.lines: list[str] = []
        self.globals: dict[str, Any] = {}
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def constant(self, value: Any) -> str:
        for name, known in self.globals.items():
            if type(known) is type(value) and known == value:
                return name
        name = self.fresh("_c")
        self.globals[name] = value
        return name

    def line(self, text: str) -> None:
        self.lines.append("    " + text)


def build_input_checker(in_spec: pytree.TreeSpec, expected: list[tuple[bool, Any]], contract,
                        aliases: dict[int, int], keywords_by_name: bool) -> Callable[[tuple, dict], list | None] | None:
    """`check(args, kwargs) -> leaves or None` for a program whose user inputs are
    `expected`, in the graph's order: (True, the value) for an input baked in as a constant,
    (False, the capture's meta tensor) for a tensor; or None when the program has something
    the generator does not cover."""
    try:
        return _build(in_spec, expected, contract, aliases, keywords_by_name)
    except _Unsupported:
        return None


def _build(in_spec, expected, contract, aliases, keywords_by_name):
    src = _Source()
    leaves: list[str] = []
    if in_spec.type is not tuple or in_spec.num_children != 2:
        raise _Unsupported
    args_spec, kwargs_spec = in_spec.children()
    src.line(f"if len(args) != {args_spec.num_children}: return None")
    for i, child in enumerate(args_spec.children()):
        _destructure(src, child, f"args[{i}]", leaves)
    _destructure_kwargs(src, kwargs_spec, leaves, keywords_by_name)
    if len(leaves) != len(expected):
        raise _Unsupported
    shapes = {}
    for i, (leaf, (is_constant, want)) in enumerate(zip(leaves, expected)):
        if is_constant and want is None:
            src.line(f"if {leaf} is not None: return None")
            continue
        if is_constant:
            if type(want) not in _CONSTANT_TYPES:
                raise _Unsupported
            src.line(f"if type({leaf}) is not {type(want).__name__} or {leaf} != {src.constant(want)}: return None")
            continue
        if not isinstance(want, torch.Tensor):
            raise _Unsupported
        shape = shapes[i] = src.fresh("s")
        src.line(f"if (type({leaf}) is not _Tensor and type({leaf}) is not _Parameter) "
                 f"or {leaf}.dtype is not {src.constant(want.dtype)}: return None")
        src.line(f"{shape} = {leaf}.shape")
        src.line(f"if len({shape}) != {want.dim()}: return None")
        static = [(d, size) for d, size in enumerate(want.shape) if type(size) is int]
        if static:
            src.line("if " + " or ".join(f"{shape}[{d}] != {size}" for d, size in static) + ": return None")
    if contract is not None:
        _contract_checks(src, contract, shapes)
    for i, first in aliases.items():
        src.line(f"if {leaves[i]} is not {leaves[first]}: return None")
    src.line(f"return [{', '.join(leaves)}]")
    body = "\n".join(src.lines)
    text = f"def check(args, kwargs):\n    try:\n{_indent(body)}\n    except ZeroDivisionError:\n        return None\n"
    namespace = {"_Tensor": torch.Tensor, "_Parameter": torch.nn.Parameter, **src.globals}
    exec(compile(text, "<graphport input checks>", "exec"), namespace)   # our own source, built above
    check = namespace["check"]
    check.source = text
    return check


def _indent(body: str) -> str:
    return "\n".join("    " + line for line in body.splitlines())


def _destructure(src: _Source, spec: pytree.TreeSpec, value: str, leaves: list[str]) -> None:
    """Lines that bind the leaves under `value`, returning None unless its structure is
    exactly `spec`'s (the node types pytree flattens the same way, with the same keys)."""
    name = src.fresh("v")
    src.line(f"{name} = {value}")
    if spec.is_leaf():
        leaves.append(name)
        return
    kind, n = spec.type, spec.num_children
    if kind is tuple or kind is list:
        src.line(f"if type({name}) is not {kind.__name__} or len({name}) != {n}: return None")
        for i, child in enumerate(spec.children()):
            _destructure(src, child, f"{name}[{i}]", leaves)
    elif kind is dict:
        keys = list(spec.context)
        src.line(f"if type({name}) is not dict or tuple({name}) != {src.constant(tuple(keys))}: return None")
        for key, child in zip(keys, spec.children()):
            _destructure(src, child, f"{name}[{src.constant(key)}]", leaves)
    else:
        raise _Unsupported   # namedtuples, OrderedDicts, registered classes: the general checks


def _destructure_kwargs(src: _Source, spec: pytree.TreeSpec, leaves: list[str], keywords_by_name: bool) -> None:
    """The keyword arguments: in the export's order, or in any order when each binds a
    named parameter (the general checks accept both)."""
    if spec.type is not dict:
        raise _Unsupported
    keys = list(spec.context)
    if keywords_by_name:
        src.line(f"if len(kwargs) != {len(keys)}: return None")
        for key in keys:
            src.line(f"if {src.constant(key)} not in kwargs: return None")
    else:
        src.line(f"if tuple(kwargs) != {src.constant(tuple(keys))}: return None")
    for key, child in zip(keys, spec.children()):
        _destructure(src, child, f"kwargs[{src.constant(key)}]", leaves)


def _contract_checks(src: _Source, contract, shapes: dict[int, str]) -> None:
    """Each symbol read from its dimension and checked against its range (and the size it
    is valid from); every dynamic dimension equal to its expression; every relation true."""
    from .shapes.contract import ComputedValue
    from .shapes.expr import INF
    names: dict[sympy.Symbol, str] = {}
    read_as_is: set = set()
    for sym, fact in contract.symbols.items():
        source = fact.source
        if isinstance(source, ComputedValue):
            continue
        if source.index not in shapes:
            raise _Unsupported
        value = src.fresh("z")
        read = f"{shapes[source.index]}[{_integer(source.dim)}]"
        coeff, offset = _integer(source.coeff), _integer(source.offset)
        if (coeff, offset) == (1, 0):
            src.line(f"{value} = {read}")
            read_as_is.add((source.index, source.dim, sym))
        else:
            src.line(f"if ({read} - {offset}) % {coeff}: return None")
            src.line(f"{value} = ({read} - {offset}) // {coeff}")
        lower, upper = fact.range.lower, fact.range.upper
        bounds = ([f"{value} < {_integer(lower)}"] if lower != -INF else []) + (
            [f"{value} > {_integer(upper)}"] if upper != INF else []) + (
            [f"{value} < {_integer(fact.valid_from)}"] if fact.valid_from is not None else [])
        if bounds:
            src.line(f"if {' or '.join(bounds)}: return None")
        names[sym] = value
    for index, dim, expr in contract.dims:
        if index not in shapes:
            raise _Unsupported
        if (index, dim, expr) in read_as_is:
            continue   # the dimension the symbol was just read from
        src.line(f"if {shapes[index]}[{_integer(dim)}] != {_python(expr, names)}: return None")
    for relation in contract.relations:
        src.line(f"if not {_python(relation.rel, names)}: return None")


def _integer(value) -> int:
    """An integer written into the source: only ints (a loaded program's contract is data)."""
    import sympy
    if type(value) is int or (isinstance(value, sympy.Basic) and value.is_Integer):
        return int(value)
    raise _Unsupported


def _python(expr: sympy.Basic, names: dict[sympy.Symbol, str]) -> str:
    """Python source computing `expr` on Python ints as substituting the sizes into the sympy
    expression does (integers only: any other number is left to the general checks)."""
    import sympy

    from .shapes.expr import FloorDiv, Mod
    if expr is sympy.true or expr is sympy.false:
        return str(bool(expr))
    if isinstance(expr, sympy.Symbol):
        if expr not in names:
            raise _Unsupported   # a data-dependent value: the graph's own assertions check it
        return names[expr]
    if isinstance(expr, sympy.Integer):
        return f"({int(expr)})"
    parts = [_python(a, names) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(parts) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(parts) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp >= 0:
        return f"({parts[0]} ** {parts[1]})"
    if isinstance(expr, FloorDiv):
        return f"({parts[0]} // {parts[1]})"
    if isinstance(expr, Mod):
        return f"({parts[0]} % {parts[1]})"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return f"{'max' if isinstance(expr, sympy.Max) else 'min'}({', '.join(parts)})"
    if isinstance(expr, sympy.core.relational.Relational) and expr.rel_op in _RELATIONS:
        return f"({parts[0]} {_RELATIONS[expr.rel_op]} {parts[1]})"
    if isinstance(expr, sympy.Not):
        return f"(not {parts[0]})"
    if isinstance(expr, (sympy.And, sympy.Or)):
        return "(" + f" {'and' if isinstance(expr, sympy.And) else 'or'} ".join(parts) + ")"
    raise _Unsupported


def build_output_builder(out_spec: pytree.TreeSpec) -> Callable[[Any], Any]:
    """`build(outputs)`: the graph's flat outputs in the program's output structure, as
    `tree_unflatten` builds them, generated as one expression for tuples, lists and dicts
    (anything else is built by `tree_unflatten`)."""
    src = _Source()
    counter = iter(range(out_spec.num_leaves))
    try:
        expression = _rebuild(src, out_spec, counter)
    except _Unsupported:
        return lambda outputs: pytree.tree_unflatten(list(outputs), out_spec)
    text = f"def build(o):\n    return {expression}\n"
    namespace = dict(src.globals)
    exec(compile(text, "<graphport outputs>", "exec"), namespace)   # our own source, built above
    return namespace["build"]


def _rebuild(src: _Source, spec: pytree.TreeSpec, counter) -> str:
    if spec.is_leaf():
        return f"o[{next(counter)}]"
    kind = spec.type
    children = [_rebuild(src, child, counter) for child in spec.children()]
    if kind is tuple:
        return "(" + "".join(f"{c}, " for c in children) + ")"
    if kind is list:
        return "[" + ", ".join(children) + "]"
    if kind is dict:
        return "{" + ", ".join(f"{src.constant(k)}: {c}" for k, c in zip(spec.context, children)) + "}"
    raise _Unsupported
