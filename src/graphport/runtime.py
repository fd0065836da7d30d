"""Running an exported program: an nn.Module that refuses inputs the capture is not valid for.

Calls are checked before anything runs (structure, dtypes, shapes, specialized
scalars), so a wrong input is an error that names it, never a wrong answer. Buffer and
input mutations captured as graph outputs are written back, as eager would.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from . import _torch
from .errors import InputGuardError, InputStructureError, RuntimeCheckError
from .shapes.contract import ComputedValue
from .shapes.unbacked import ASSERT_PREFIX
from .signature import ConstantArgument, InputKind, OutputKind

pytree = _torch.pytree

_SHORT = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
          torch.bool: "b8", torch.complex64: "c64"}


def _set_attr(root: torch.nn.Module, fqn: str, value: torch.Tensor, kind: str, persistent: bool = True) -> None:
    *path, leaf = fqn.split(".")
    mod = root
    for part in path:
        if not hasattr(mod, part):
            mod.add_module(part, torch.nn.Module())
        mod = getattr(mod, part)
    if kind == "parameter":
        param = value if isinstance(value, torch.nn.Parameter) else torch.nn.Parameter(value, requires_grad=False)
        mod.register_parameter(leaf, param)
    elif kind == "buffer":
        mod.register_buffer(leaf, value, persistent=persistent)
    else:
        setattr(mod, leaf, value)


def _get_attr(root: torch.nn.Module, fqn: str) -> torch.Tensor:
    owner, _, leaf = fqn.rpartition(".")
    return getattr(root.get_submodule(owner), leaf)


class ExportedModule(torch.nn.Module):
    """The module returned by `ExportedProgram.module()`."""

    def __init__(self, ep):
        super().__init__()
        self._ep = ep
        self._graph_module = ep.graph_module
        sig = ep.graph_signature
        self._state_kinds: list[tuple[str, str]] = []   # (kind, target) per state placeholder
        for spec in sig.input_specs:
            if spec.kind is InputKind.PARAMETER:
                _set_attr(self, spec.target, ep.state_dict[spec.target], "parameter")
                self._state_kinds.append(("parameter", spec.target))
            elif spec.kind is InputKind.BUFFER:
                value = ep.state_dict.get(spec.target, ep.constants.get(spec.target))
                _set_attr(self, spec.target, value, "buffer", spec.persistent is not False)
                self._state_kinds.append(("buffer", spec.target))
            elif spec.kind is InputKind.CONSTANT_TENSOR:
                _set_attr(self, spec.target, ep.constants[spec.target], "constant")
                self._state_kinds.append(("constant", spec.target))
        self._user_inputs = [s for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
        self._placeholder_vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
        self._mutations = [(s.kind, s.target) for s in sig.output_specs if s.kind is not OutputKind.USER_OUTPUT]
        call = ep.call_spec
        self._in_spec, self._out_spec = call.in_spec, call.out_spec
        self._paths = ep.input_paths

    def _state_values(self) -> list[torch.Tensor]:
        return [_get_attr(self, target) for _, target in self._state_kinds]

    def forward(self, *args, **kwargs):
        leaves = self._check_inputs(args, kwargs)
        state = self._state_values()
        try:
            outputs = self._graph_module(*state, *leaves)
        except RuntimeError as e:
            raise failed_check(e) or e
        n_mut = len(self._mutations)
        user_inputs_by_name = {s.arg.name: leaf for s, leaf in zip(self._user_inputs, leaves)}
        with torch.no_grad():
            for (kind, target), value in zip(self._mutations, outputs[:n_mut]):
                if kind is OutputKind.USER_INPUT_MUTATION:
                    user_inputs_by_name[target].copy_(value)
                else:
                    _get_attr(self, target).copy_(value)
        return pytree.tree_unflatten(list(outputs[n_mut:]), self._out_spec)

    def _check_inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            where, what = _first_difference(self._in_spec, spec, self._ep.call_spec.forward_arg_names or [])
            raise InputStructureError(
                f"input {where} {what}; the program was exported for inputs structured as\n"
                f"  {_tree_summary(self._in_spec)}\n  and was called with\n  {_tree_summary(spec)}",
                fix=f"call with {where} structured as at export (same arguments, keywords, keys and lengths)")
        for i, (leaf, spec_) in enumerate(zip(flat, self._user_inputs)):
            path = self._paths[i] if i < len(self._paths) else spec_.arg.name
            expected = self._placeholder_vals[spec_.arg.name]
            if isinstance(spec_.arg, ConstantArgument):
                if type(leaf) is not type(expected) or leaf != expected:
                    raise InputGuardError(
                        f"input {path} is {leaf!r}, but the program was exported with {path} = {expected!r}; "
                        "Python values are baked into the graph",
                        fix=f"call with {path} = {expected!r}, or export again with the value you need")
                continue
            if not isinstance(leaf, torch.Tensor):
                raise InputStructureError(f"input {path} is a {type(leaf).__qualname__}, expected a tensor "
                                          f"{_SHORT.get(expected.dtype, expected.dtype)}{list(expected.shape)}",
                                          fix=f"pass a tensor for {path}")
            if leaf.dtype != expected.dtype:
                raise InputGuardError(
                    f"input {path} has dtype {leaf.dtype}, but the program was exported for {expected.dtype}",
                    fix=f"convert it first: {path}.to({expected.dtype})")
            if leaf.dim() != expected.dim():
                raise InputGuardError(
                    f"input {path} has {leaf.dim()} dimensions {list(leaf.shape)}, expected {expected.dim()} "
                    f"{list(expected.shape)}", fix=f"reshape {path} to {list(expected.shape)}")
            for d, (got, want) in enumerate(zip(leaf.shape, expected.shape)):
                if type(want) is int and got != want:
                    raise InputGuardError(
                        f"input {path} has size {got} at dimension {d}, but the program was exported for size "
                        f"{want} there (shape {list(expected.shape)}); that dimension is static",
                        fix=f"pass {path} with shape {list(expected.shape)}, or export with dynamic_shapes "
                            f"marking dimension {d} of {path} as a graphport.Dim")
        if self._ep.shape_contract is not None:
            check_shapes(self._ep.shape_contract, flat, self._paths)
        for i, first in self._ep.input_aliases.items():
            if flat[i] is not flat[first]:
                raise InputGuardError(
                    f"input {self._paths[i]} must be the same tensor object as {self._paths[first]}: the program "
                    "was exported with one tensor passed for both, and may have taken a path that relies on it",
                    fix=f"pass the same tensor for both, or export with distinct example tensors for "
                        f"{self._paths[first]} and {self._paths[i]}")
        return flat


def failed_check(error: RuntimeError) -> RuntimeCheckError | None:
    """A failed runtime assertion of the program's own (capture/data_dependent.py), as a
    graphport error naming the check and the line that stated it."""
    text = str(error)
    start = text.find(ASSERT_PREFIX)
    if start < 0:
        return None
    message = text[start:].splitlines()[0]
    check, _, where = message.partition(" (stated at ")
    return RuntimeCheckError(
        f"the inputs break a check on a data-dependent value, stated by the program (torch._check) or needed by "
        f"an operator there: {check.strip()}"
        + (f", stated at {where.rstrip(')')}" if where else ""),
        find_location=False,
        fix="pass inputs for which the stated check holds, or correct the torch._check / torch._constrain_as_size "
            "call if the data can legitimately break it")


def check_shapes(contract, flat: list, paths: list[str]) -> None:
    """Dynamic dims: each symbol in its range and at a size the capture holds for, every dim
    equal to its expression, every relation true."""
    names = contract.names
    values, where = {}, {}
    for sym, fact in contract.symbols.items():
        src = fact.source
        if isinstance(src, ComputedValue):
            continue   # a data-dependent value: the graph's own assertions check it
        size = int(flat[src.index].shape[src.dim])
        at = f"{paths[src.index]}.shape[{src.dim}]"
        if (size - src.offset) % src.coeff:
            readable = src.coeff * sympy.Symbol(fact.name) + src.offset
            raise InputGuardError(
                f"input {at} is {size}, which is not of the form {readable} the program was exported for",
                fix=f"pass {paths[src.index]} with shape[{src.dim}] of the form {readable}")
        values[sym] = value = (size - src.offset) // src.coeff
        where[sym] = at if (src.coeff, src.offset) == (1, 0) else f"{at} = {src.coeff * sympy.Symbol(fact.name) + src.offset}"
        if not fact.range.contains(value):
            raise InputGuardError(
                f"input {where[sym]} is {value}, outside the range {fact.range} of dimension {fact.name} the program "
                f"was exported for", fix=f"pass {where[sym]} within {fact.range}, or export again with a wider "
                                         f"Dim('{fact.name}')")
        if fact.valid_from is not None and value < fact.valid_from:
            site = f" at {fact.assumed_at}" if fact.assumed_at else ""
            raise InputGuardError(
                f"input {where[sym]} is {value}, but the program is valid only for {fact.name} >= {fact.valid_from}"
                f"{site}: {fact.reason}",
                fix=f"export a separate program for {where[sym]} = {value} (an example input of that size with that "
                    "dimension static)")
    for i, d, expr in contract.dims:
        want = expr.xreplace(values)
        got = int(flat[i].shape[d])
        if want != got:
            if expr.is_Integer:
                raise InputGuardError(
                    f"input {paths[i]}.shape[{d}] is {got}, but the program fixed that Dim.AUTO dimension to {want} "
                    "while tracing", fix=f"pass {paths[i]} with shape[{d}] == {want}")
            readable = expr.xreplace({s: sympy.Symbol(names[s]) for s in expr.free_symbols})
            known = ", ".join(f"{names[s]} = {values[s]} from {where[s]}" for s in expr.free_symbols if s in where)
            raise InputGuardError(
                f"input {paths[i]}.shape[{d}] is {got}, but the program requires it to be {readable} = {want} "
                f"({known})",
                fix=f"pass {paths[i]} with shape[{d}] == {want}, keeping the relations declared in dynamic_shapes")
    for relation in contract.relations:
        if relation.rel.xreplace(values) is not sympy.true:
            readable = relation.rel.xreplace({s: sympy.Symbol(names[s]) for s in relation.rel.free_symbols})
            site = f" (recorded at {relation.location})" if relation.location else ""
            shown = {names[s]: v for s, v in values.items()}
            raise InputGuardError(f"the inputs' sizes {shown} break the program's shape relation {readable}{site}",
                                  fix="pass sizes that satisfy the relation, or export with examples that take "
                                      "the path you need")


def _first_difference(expected: pytree.TreeSpec, got: pytree.TreeSpec, arg_names: list[str]) -> tuple[str, str]:
    """(path, what differs) for the first place two input trees part ways."""
    exp_args, exp_kwargs = expected.children()
    got_args, got_kwargs = got.children()
    if exp_args.num_children != got_args.num_children:
        return "args", f"has {got_args.num_children} positional arguments, expected {exp_args.num_children}"
    for i in range(exp_args.num_children):
        name = arg_names[i] if i < len(arg_names) else f"args[{i}]"
        found = _walk(exp_args.child(i), got_args.child(i), name)
        if found:
            return found
    return _walk(exp_kwargs, got_kwargs, "kwargs") or ("", "differs")


def _walk(exp: pytree.TreeSpec, got: pytree.TreeSpec, path: str) -> tuple[str, str] | None:
    if exp == got:
        return None
    if exp.type is not got.type:
        def kind(s):
            return "a tensor or value" if s.is_leaf() else f"a {s.type.__name__}"
        return path, f"is {kind(got)}, expected {kind(exp)}"
    if exp.context != got.context:
        if isinstance(exp.context, list) and isinstance(got.context, list):
            missing = [k for k in exp.context if k not in got.context]
            extra = [k for k in got.context if k not in exp.context]
            parts = ([f"lacks keys {missing}"] if missing else []) + ([f"has extra keys {extra}"] if extra else [])
            return path, " and ".join(parts) or f"has keys in order {got.context}, expected {exp.context}"
        return path, f"has context {got.context!r}, expected {exp.context!r}"
    if exp.num_children != got.num_children:
        return path, f"has {got.num_children} elements, expected {exp.num_children}"
    keys = exp.context if isinstance(exp.context, list) and len(exp.context) == exp.num_children else None
    for i in range(exp.num_children):
        child = f"{path}[{keys[i]!r}]" if keys else f"{path}[{i}]"
        found = _walk(exp.child(i), got.child(i), child)
        if found:
            return found
    return path, "differs"


def _tree_summary(spec: pytree.TreeSpec) -> str:
    text = str(spec).replace("\n", "")
    return " ".join(text.split())
