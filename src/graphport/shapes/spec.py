"""From the user's `dynamic_shapes` to symbolic sizes for every input tensor.

Each input leaf's pytree path is walked through the spec, so a dict keyed by argument
name, a tuple in argument order, nested containers and a ShapesCollection all align the
same way. One symbol is created per Dim (named s0, s1, ... in order of first use); a
derived dim is an expression over its root's symbol; Dim.AUTO and Dim.DYNAMIC get a
symbol of their own. Example sizes are checked against every Dim's range and relations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .. import _torch
from ..errors import ConstraintViolationError, InvalidDimError, UnsupportedInputError
from ..pytree import flatten_with_paths
from .dims import INT_OO, DerivedDim, Dim, ShapesCollection, _DimHint
from .env import ShapeEnv
from .expr import ValueRange

pytree = _torch.pytree


@dataclass
class InputShapes:
    env: ShapeEnv
    sizes: dict[int, list]                          # flat leaf index -> per-dim int or sympy expr
    dims: dict[sympy.Symbol, Dim] = field(default_factory=dict)    # root symbol -> its Dim
    kinds: dict[sympy.Symbol, str] = field(default_factory=dict)   # "dim", "auto" or "dynamic"
    specialized: list[str] = field(default_factory=list)           # what ended up static, and why
    scalars: dict[int, Any] = field(default_factory=dict)          # flat leaf index of a dynamic int -> its symbol

    def pinned(self, pins: dict[sympy.Symbol, int]) -> "InputShapes":
        """The same inputs with some symbols fixed to sizes, the others symbolic as before,
        in a fork of the environment (this one is left as it is)."""
        return InputShapes(self.env.fork(pins.keys()), {i: [_pinned_size(s, pins) for s in dims]
                                                        for i, dims in self.sizes.items()},
                           {s: d for s, d in self.dims.items() if s not in pins},
                           {s: k for s, k in self.kinds.items() if s not in pins},
                           scalars={i: _pinned_size(s, pins) for i, s in self.scalars.items()})


def _pinned_size(size, pins: dict[sympy.Symbol, int]):
    if not isinstance(size, sympy.Basic):
        return size
    value = sympy.sympify(size.xreplace(pins))
    return int(value) if value.is_Integer else value


def _describe(tree) -> str:
    def show(x):
        if isinstance(x, torch.Tensor):
            return f"Tensor{list(x.shape)}"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k!r}: {show(v)}" for k, v in x.items()) + "}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(show(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
        return repr(x)
    return show(tree)


def _spec_error(what: str, inputs, spec, cls: type = UnsupportedInputError,
                torch_phrase: str | None = None) -> UnsupportedInputError:
    return cls(
        f"dynamic_shapes does not match the inputs: {what}\n"
        f"    inputs:         {_describe(inputs)}\n"
        f"    dynamic_shapes: {_describe(spec)}",
        fix="give dynamic_shapes the inputs' structure: a dict keyed by argument name (or a tuple in argument "
            "order), and per tensor a dict {dim: Dim(...)} or a tuple with one entry per dim (None = static)",
        torch_phrase=torch_phrase)


def _top_level(spec, args: tuple, kwargs: dict, arg_names: list[str]):
    """The spec as (positional specs, keyword specs), aligned with (args, kwargs)."""
    inputs = {**dict(zip(arg_names, args)), **kwargs}
    if isinstance(spec, dict):
        unknown = [k for k in spec if k not in inputs]
        if unknown:
            raise _spec_error(f"keys {unknown} name no argument (arguments: {list(inputs)})", inputs, spec,
                              torch_phrase=f"When `dynamic_shapes` is specified as a dict, its top-level keys must "
                                           f"be the arg names {list(inputs)} of `inputs`, but here they are "
                                           f"{list(spec)}.")
        return [spec.get(n) for n in arg_names], {k: spec.get(k) for k in kwargs}
    if isinstance(spec, (tuple, list)):
        if len(spec) == len(args):
            return list(spec), {k: None for k in kwargs}
        if len(spec) == len(args) + len(kwargs):
            return list(spec[:len(args)]), dict(zip(kwargs, spec[len(args):]))
        raise _spec_error(f"{len(spec)} entries for {len(args)} positional and {len(kwargs)} keyword arguments",
                          inputs, spec)
    raise _spec_error(f"expected a dict or a tuple, got a {type(spec).__qualname__}", inputs, spec)


def _walk(spec, path: tuple, steps: tuple, inputs, whole_spec):
    """The part of `spec` at a leaf's path below the top level; None means static.

    `steps` gives, per key of the path, the child's position in its container, whether that
    container is a registered class rather than a builtin one, and how many children it has.
    As in torch.export, a registered class (transformers' DynamicCache, a dataclass) may be
    specified by a list of its children's specs, in the order its pytree flatten gives them.
    """
    for key, (position, registered, count) in zip(path, steps):
        if spec is None:
            return None
        if registered and isinstance(spec, (list, tuple)) and not _is_tensor_spec(spec):
            if len(spec) != count:
                raise _spec_error(f"the spec lists {len(spec)} entries for a registered container with {count} "
                                  "children (in its flattening order)", inputs, whole_spec)
            spec = spec[position]
        elif isinstance(key, pytree.MappingKey):
            if not isinstance(spec, dict):
                raise _spec_error(f"expected a dict of specs at key {key.key!r}, got {spec!r}", inputs, whole_spec)
            spec = spec.get(key.key)
        elif isinstance(key, pytree.SequenceKey):
            if not isinstance(spec, (list, tuple)) or _is_tensor_spec(spec):
                raise _spec_error(f"expected a list/tuple of specs at index {key.idx}, got {spec!r}", inputs,
                                  whole_spec)
            if key.idx >= len(spec):
                raise _spec_error(f"the spec has {len(spec)} entries where the input has more", inputs, whole_spec)
            spec = spec[key.idx]
        elif isinstance(key, pytree.GetAttrKey):
            spec = spec.get(key.name) if isinstance(spec, dict) else getattr(spec, key.name, None)
    return spec


def _is_tensor_spec(spec) -> bool:
    items = spec.values() if isinstance(spec, dict) else spec if isinstance(spec, (list, tuple)) else ()
    return any(isinstance(v, (Dim, DerivedDim, _DimHint, int)) for v in items)


def _per_dim(spec, tensor: torch.Tensor, where: str, inputs, whole_spec) -> dict[int, Any]:
    if spec is None:
        return {}
    if isinstance(spec, _DimHint):
        return {d: spec for d in range(tensor.dim())}
    if isinstance(spec, dict):
        out = {}
        for d, item in spec.items():
            if not isinstance(d, int) or not -tensor.dim() <= d < tensor.dim():
                raise _spec_error(f"{where} has {tensor.dim()} dims; the spec names dim {d!r}", inputs, whole_spec)
            out[d % tensor.dim()] = item
        return out
    if isinstance(spec, (list, tuple)):
        if len(spec) != tensor.dim():
            raise _spec_error(f"{where} has {tensor.dim()} dims; its spec has {len(spec)} entries", inputs,
                              whole_spec)
        return dict(enumerate(spec))
    raise _spec_error(f"the spec of {where} is {spec!r}; expected a dict, tuple or list of Dims", inputs,
                      whole_spec)


def resolve(dynamic_shapes, args: tuple, kwargs: dict, arg_names: list[str], paths: list[str]) -> InputShapes:
    """Symbolic sizes for every tensor input, and the shape environment that owns them."""
    flat = flatten_with_paths((args, kwargs))[0]
    inputs = {**dict(zip(arg_names, args)), **kwargs}
    per_leaf: dict[int, dict[int, Any]] = {}
    if isinstance(dynamic_shapes, ShapesCollection):
        for i, (_, leaf) in enumerate(flat):
            if isinstance(leaf, torch.Tensor):
                per_leaf[i] = _per_dim(dynamic_shapes.spec_for(leaf), leaf, paths[i], inputs, dynamic_shapes)
    else:
        positional, keyword = _top_level(dynamic_shapes, args, kwargs, arg_names)
        steps = _container_steps(pytree.tree_structure((args, kwargs)))
        for i, (path, leaf) in enumerate(flat):
            group, first, rest = path[0].idx, path[1], path[2:]
            top = positional[first.idx] if group == 0 else keyword.get(first.key)
            spec = _walk(top, rest, steps[i][2:], inputs, dynamic_shapes)
            if _is_dynamic_int(leaf, spec, paths[i], inputs, dynamic_shapes):
                per_leaf[i] = {None: spec}
                continue
            if not isinstance(leaf, torch.Tensor):
                if spec is not None and not _is_static_hint(spec):
                    raise _spec_error(f"{paths[i]} is a {type(leaf).__qualname__}, not a tensor, so it takes no "
                                      f"shape spec (got {spec!r}); Python values are specialized", inputs,
                                      dynamic_shapes, InvalidDimError)
                continue
            per_leaf[i] = _per_dim(spec, leaf, paths[i], inputs, dynamic_shapes)
    return _create_symbols(flat, per_leaf, paths)


def _is_static_hint(spec) -> bool:
    return isinstance(spec, _DimHint) and spec.kind == "STATIC"


def _is_dynamic_int(leaf, spec, path: str, inputs, whole_spec) -> bool:
    """Whether a Python int input is marked dynamic (Dim.AUTO / Dim.DYNAMIC): it then becomes a
    symbolic integer input of the program instead of a constant baked into it."""
    if type(leaf) is not int or spec is None or _is_static_hint(spec):
        return False
    if isinstance(spec, _DimHint):
        return True
    if isinstance(spec, (Dim, DerivedDim)):
        raise _spec_error(f"{path} is an int, which cannot take a named {spec!r} (as in torch.export): mark it "
                          "Dim.DYNAMIC or Dim.AUTO, with min= / max= for its range", inputs, whole_spec,
                          InvalidDimError)
    return False


def _container_steps(treespec) -> list[tuple]:
    """Per leaf, per level of its path: (its position among the container's children,
    whether the container is a registered class rather than a builtin one, how many
    children it has)."""
    if treespec.is_leaf():
        return [()]
    registered = treespec.type not in pytree.BUILTIN_TYPES
    children = treespec.children()
    return [((position, registered, len(children)),) + rest
            for position, child in enumerate(children)
            for rest in _container_steps(child)]


def _create_symbols(flat, per_leaf: dict[int, dict[int, Any]], paths: list[str]) -> InputShapes:
    env = ShapeEnv()
    shapes = InputShapes(env, {})
    by_name: dict[str, tuple[Dim, sympy.Symbol]] = {}
    violations = []
    torch_phrases = []   # torch.export's words for the same violations
    for i, (_, leaf) in enumerate(flat):
        if type(leaf) is int and None in per_leaf.get(i, {}):
            _int_symbol(shapes, i, leaf, per_leaf[i][None], paths[i], violations)
            continue
        if not isinstance(leaf, torch.Tensor):
            continue
        sizes: list = list(leaf.shape)
        for d, item in per_leaf.get(i, {}).items():
            size = leaf.shape[d]
            where = f"{paths[i]}.shape[{d}]"
            if item is None or (isinstance(item, _DimHint) and item.kind == "STATIC") or isinstance(item, int):
                if isinstance(item, int) and item != size:
                    violations.append(f"- {where} is {size} in the example, but the spec fixes it to {item}")
                    torch_phrases.append(f"Static shape constraint of {item} does not match input size of {size}, "
                                         f"for {where}")
                continue
            if isinstance(item, _DimHint):
                if size in (0, 1):
                    message = (f"{where} is marked Dim.{item.kind} but its example size is {size}; sizes 0 and 1 "
                               f"are specialized, so it is static. Use an example with {where} >= 2 to keep it "
                               "dynamic")
                    if item.kind == "DYNAMIC":
                        violations.append("- " + message)
                    else:
                        shapes.specialized.append(message)
                    continue
                lo, hi = item.range
                if not lo <= size <= hi:
                    violations.append(f"- {where} is {size} in the example, outside the range [{lo}, "
                                      f"{'inf' if hi is INT_OO else hi}] of {item!r}")
                    torch_phrases.append(_not_in_range(size, lo, hi))
                    continue
                sym = env.create_symbol(size, ValueRange(lo, hi), f"{paths[i]}_size_{d}", (i, d),
                                        auto=item.kind == "AUTO")
                shapes.kinds[sym] = "auto" if item.kind == "AUTO" else "dynamic"
                sizes[d] = sym
                continue
            if not isinstance(item, (Dim, DerivedDim)):
                raise _spec_error(f"the spec of {where} is {item!r}; expected a Dim, Dim.AUTO/DYNAMIC/STATIC or None",
                                  paths, per_leaf)
            root = item.root if isinstance(item, DerivedDim) else item
            coeff, offset = (item.coeff, item.offset) if isinstance(item, DerivedDim) else (1, 0)
            if size in (0, 1) and isinstance(item, Dim):
                violations.append(
                    f"- {where} is marked dynamic by {root!r}, but its example size is {size}: sizes 0 and 1 are "
                    f"specialized (as in torch.export), so the capture could not be valid for the range. Use an "
                    f"example input with {where} >= 2")
                continue
            if not item.min <= size <= item.max:
                violations.append(f"- {where} is {size} in the example, outside the range [{item.min}, "
                                  f"{'inf' if item.max is INT_OO else item.max}] of {item!r}")
                torch_phrases.append(_not_in_range(size, item.min, item.max))
                continue
            if (size - offset) % coeff:
                violations.append(f"- {where} is {size}, which is not of the form {item.name} for an integer "
                                  f"{root.name}")
                continue
            root_hint = (size - offset) // coeff
            known = by_name.get(root.name)
            if known is None:
                sym = env.create_symbol(root_hint, ValueRange(root.min, root.max), root.name, (i, d),
                                        source_affine=(coeff, offset))
                by_name[root.name] = (root, sym)
                shapes.dims[sym] = root
                shapes.kinds[sym] = "dim"
            else:
                known_dim, sym = known
                if (known_dim.min, known_dim.max) != (root.min, root.max):
                    violations.append(f"- two different Dims are named '{root.name}': {known_dim!r} and {root!r}")
                    continue
                if env.symbols[sym].hint != root_hint:
                    violations.append(
                        f"- {where} is {size}, so {root.name} would be {root_hint}, but an earlier input makes "
                        f"{root.name} = {env.symbols[sym].hint}: inputs sharing a Dim need consistent example sizes")
                    continue
            sizes[d] = coeff * sym + offset
            if offset < 0:   # a size is never negative: d - 1 needs d >= 1
                info = env.symbols[sym]
                floor = -(offset // coeff)
                if info.declared.lower < floor:
                    info.declared = ValueRange(floor, info.declared.upper)
        shapes.sizes[i] = sizes
    if violations:
        raise ConstraintViolationError("the example inputs do not fit dynamic_shapes:\n" + "\n".join(violations),
                                       fix="change the example inputs or the Dims so that every example size lies "
                                           "in its Dim's range and relations",
                                       torch_phrase="\n".join(torch_phrases) or None)
    return shapes


def _not_in_range(size: int, lo: int, hi) -> str:
    """torch.export's words for an example size outside its Dim's range."""
    return f"{size} not in range [{lo}, {'int_oo' if hi is INT_OO else hi}]"


def _int_symbol(shapes: InputShapes, i: int, value: int, hint: _DimHint, path: str, violations: list[str]) -> None:
    """A dynamic int input: a symbol of its own, valid in the hint's range (torch's default for
    ints: [0, inf]). Unlike sizes, ints are not specialized at 0 and 1, and the capture never
    assumes them >= 2 (env.exact): every question its range does not settle is a guard."""
    lo, hi = hint.min or 0, INT_OO if hint.max is None else hint.max
    if not lo <= value <= hi:
        violations.append(f"- {path} is {value} in the example, outside the range [{lo}, "
                          f"{'inf' if hi is INT_OO else hi}] of {hint!r}")
        return
    sym = shapes.env.create_symbol(value, ValueRange(lo, hi), path, (i, None), auto=hint.kind == "AUTO")
    shapes.env.exact.add(sym)
    shapes.kinds[sym] = "auto" if hint.kind == "AUTO" else "dynamic"
    shapes.scalars[i] = sym
