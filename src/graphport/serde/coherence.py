"""Load-time agreement between sections of graphport.json that the schema checks one by one.

The runtime indexes the flat user inputs with numbers the file holds (shape-contract
sources and dims, input aliases, input paths) and rebuilds inputs and outputs with the
root call's pytree specs. A damaged file whose numbers point past the inputs, at a
dimension an input does not have, or whose specs disagree with the signature would load
and then fail inside a call; here it is an ArtifactError at load instead. The fields are
checked before the program is built from them (and verified), so that a damaged file is
named as such rather than as a program breaking the IR contract.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from ..errors import ArtifactError
from ..values import RuntimeValue
from ..signature import (InputKind, OutputKind, SymBoolArgument, SymFloatArgument, SymIntArgument,
                         TensorArgument)

# The value a placeholder records for each kind of input: what the call checks inputs against.
_PLACEHOLDER_VALUES = {TensorArgument: (torch.Tensor, RuntimeValue), SymIntArgument: (int, torch.SymInt),
                       SymFloatArgument: (float, torch.SymFloat), SymBoolArgument: (bool, torch.SymBool)}


def check_coherence(fields: dict[str, Any]) -> None:
    """`fields`: the keyword arguments the program is about to be built with."""
    ep = SimpleNamespace(**fields)
    sig = ep.graph_signature
    user_inputs = [s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
    user_outputs = sum(1 for s in sig.output_specs if s.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT))
    call = ep.module_call_graph[0].signature
    if call.in_spec.num_leaves != len(user_inputs):
        _fail(f"the program's input structure has {call.in_spec.num_leaves} leaves, but its signature "
              f"{len(user_inputs)} user inputs")
    if call.out_spec.num_leaves != user_outputs:
        _fail(f"the program's output structure has {call.out_spec.num_leaves} leaves, but its signature "
              f"{user_outputs} user outputs")
    if ep.input_paths and len(ep.input_paths) != len(user_inputs):
        _fail(f"input_paths names {len(ep.input_paths)} inputs, but the program has {len(user_inputs)}")
    _check_placeholders(ep)
    values = _placeholder_values(ep, user_inputs)
    for i, first in ep.input_aliases.items():
        if not 0 <= first < i < len(values):
            _fail(f"input_aliases pairs input {i} with input {first}, which is not an earlier input")
    contract = ep.shape_contract
    if contract is None:
        return
    from ..shapes.contract import InputDimension   # a dynamic program's: the shape algebra
    for sym, fact in contract.symbols.items():
        if isinstance(fact.source, InputDimension):
            src = fact.source
            _check_dimension(values, src.index, src.dim, f"the shape contract's symbol {sym}")
            if src.coeff < 1:
                _fail(f"the shape contract reads {sym} with the coefficient {src.coeff}")
    for index, dim, expr in contract.dims:
        _check_dimension(values, index, dim, "a dimension of the shape contract")
        _check_symbols(expr, contract.symbols, f"dimension {dim} of input {index}")
    for relation in contract.relations:
        _check_symbols(relation.rel, contract.symbols, "a relation")


def _check_symbols(expr, defined, what: str) -> None:
    unknown = sorted(s.name for s in expr.free_symbols if s not in defined)
    if unknown:
        _fail(f"the shape contract's {what} uses the symbol {unknown[0]}, which the contract does not define")


def _check_placeholders(ep: SimpleNamespace) -> None:
    found = {n.name: n.meta.get("val") for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    for spec in ep.graph_signature.input_specs:
        wanted = _PLACEHOLDER_VALUES.get(type(spec.arg))
        value = found.get(spec.arg.name)
        if wanted is not None and (not isinstance(value, wanted) or isinstance(value, bool) and bool not in wanted):
            _fail(f"the input {spec.arg.name} is a {type(spec.arg).__name__}, but its placeholder records "
                  f"{type(value).__name__}")


def _placeholder_values(ep: SimpleNamespace, names: list[str]) -> list[Any]:
    found = {n.name: n.meta.get("val") for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    return [found.get(name) for name in names]


def _check_dimension(values: list[Any], index: int, dim: int | None, what: str) -> None:
    if not 0 <= index < len(values):
        _fail(f"{what} is read from input {index}, and the program has {len(values)} inputs")
    value = values[index]
    if dim is None:
        if not isinstance(value, (int, torch.SymInt)) or isinstance(value, bool):
            _fail(f"{what} is the value of input {index}, which is not an integer input")
        return
    rank = value.gp_meta.dim() if isinstance(value, RuntimeValue) else value.dim() \
        if isinstance(value, torch.Tensor) else None
    if rank is None or not 0 <= dim < rank:
        _fail(f"{what} is read from dimension {dim} of input {index}, which has no such dimension")


def _fail(what: str):
    raise ArtifactError(f"graphport.json does not hold together: {what}",
                        fix="the file is damaged or was not written by graphport.save; save the program again")
