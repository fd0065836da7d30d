"""Outputs: the graph's output node and the signature, in the IR contract's order.

Outputs are parameter and buffer mutations, then user-input mutations, then the user's
outputs (flattened); placeholders are parameters, buffers, constants, then user inputs.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import UnsupportedInputError
from ..pytree import flatten_with_paths, path_to_str
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                         SymBoolArgument, SymFloatArgument, SymIntArgument, TensorArgument)
from ..source import stack_trace_formatter
from .inputs import SCALAR_TYPES, UserInputs
from .recorder import Recorder
from .sizes import is_sym
from .state import ModuleState
from .tracer import TracerTensor

pytree = _torch.pytree


def finish_graph(rec: Recorder, out: Any, inputs: UserInputs, state: ModuleState | None,
                 fallback_stack: tuple) -> tuple[ExportGraphSignature, Any]:
    """Write the output node, order the placeholders; return the signature and out spec."""
    flat_out, out_spec = flatten_with_paths(out)
    # Values made from here on (sizes returned, views re-derived) have no frame of their
    # own: they are attributed to the program's last recorded line.
    last = next((n for n in reversed(rec.graph.nodes) if n.meta.get("gp_stack")), None)
    rec.fallback_stack = last.meta["gp_stack"] if last is not None else fallback_stack
    values, kinds = [], []
    if state is not None:
        for tracer, kind, target in state.mutations():
            values.append(rec.value(tracer))
            kinds.append((kind, target))
    for i, (leaf, spec) in enumerate(zip(inputs.leaves, inputs.specs)):
        if i not in inputs.aliases and isinstance(leaf, TracerTensor) and rec.value(leaf) is not inputs.nodes[i]:
            values.append(rec.value(leaf))
            kinds.append((OutputKind.USER_INPUT_MUTATION, spec.arg.name))
    for path, leaf in flat_out:
        values.append(_output_value(rec, path, leaf))
        kinds.append((OutputKind.USER_OUTPUT, None))
    rec.graph.output(tuple(values))

    input_specs = (state.input_specs() if state is not None else []) + _constant_specs(rec) + inputs.specs
    _order_placeholders(rec.graph, [s.arg.name for s in input_specs])
    output_specs = [OutputSpec(kind, _argument(value), target) for value, (kind, target) in zip(values, kinds)]
    formatted = stack_trace_formatter()
    for node in rec.graph.nodes:
        stack = node.meta.pop("gp_stack", None)
        if stack is not None:
            node.meta["stack_trace"] = formatted(stack)
    return ExportGraphSignature(input_specs, output_specs), out_spec


def _output_value(rec: Recorder, path: tuple, leaf: Any) -> Any:
    if isinstance(leaf, TracerTensor):
        return rec.output_value(leaf)
    if isinstance(leaf, torch.Tensor) or is_sym(leaf) or isinstance(leaf, SCALAR_TYPES):
        return rec.graph_arg(leaf)   # a constant tensor, a size, or a Python value
    raise UnsupportedInputError(
        f"output {path_to_str('output', path)} is a {type(leaf).__qualname__}, which graphport cannot flatten into "
        "tensors and constants",
        fix="return tensors, Python scalars, or containers of them (register your own with "
            "graphport.register_dataclass)")


_SYMBOLIC_ARGUMENTS = {torch.SymInt: SymIntArgument, torch.SymFloat: SymFloatArgument, torch.SymBool: SymBoolArgument}


def _argument(value: Any):
    if isinstance(value, fx.Node):
        return _SYMBOLIC_ARGUMENTS.get(type(value.meta.get("val")), TensorArgument)(value.name)
    return ConstantArgument("", value)


def _constant_specs(rec: Recorder) -> list[InputSpec]:
    """Constant tensors and custom objects, in the order the program first used them (as torch.export lists them)."""
    specs = {name: InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name), target)
             for name, target in rec.constant_targets.items()}
    specs.update(rec.objects.input_specs())
    return [specs[n.name] for n in rec.placeholders if n.name in specs]


def _order_placeholders(graph: fx.Graph, names: list[str]) -> None:
    """Placeholders in signature order: parameters, buffers, constants, user inputs."""
    by_name = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    anchor = next((n for n in graph.nodes if n.op != "placeholder"), None)
    for name in names:
        anchor.prepend(by_name[name])
