"""`graphport.export`: the pipeline from a user program to an ExportedProgram."""
from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable

import torch
import torch.fx as fx

from .capture import argument_names, capture, input_paths
from .errors import UnsupportedInputError
from .shapes.check import check_and_contract
from .shapes.spec import resolve
from .passes.dead_code import eliminate_dead_code
from .passes.verifier import verify
from .program import ExportedProgram, ModuleCallEntry, ModuleCallSignature


def export(mod: torch.nn.Module | Callable, args: tuple, kwargs: dict | None = None, *,
           dynamic_shapes: Any = None, strict: bool = False,
           preserve_module_call_signature: tuple[str, ...] = ()) -> ExportedProgram:
    """Capture `mod(*args, **kwargs)` as one functional ATen graph.

    `mod` may be an nn.Module, a bound method of one (its module's state is lifted), or a
    plain function. `strict` is accepted for compatibility: graphport has one capture
    mode, which checks the program as strictly as torch.export's strict mode would.
    """
    if not isinstance(args, tuple):
        raise UnsupportedInputError(
            f"export expects args as a tuple of positional arguments, got a {type(args).__qualname__}",
            fix="wrap a single input in a tuple: graphport.export(model, (x,))")
    kwargs = dict(kwargs or {})
    fn, root = _resolve(mod)
    shapes = None
    if dynamic_shapes is not None:
        arg_names = argument_names(fn, args, kwargs)
        shapes = resolve(dynamic_shapes, args, kwargs, arg_names, input_paths(args, kwargs, arg_names))
    captured = capture(fn, args, kwargs, root, shapes)
    range_constraints, contract = ({}, None) if shapes is None else check_and_contract(shapes)
    shape_report = [] if shapes is None else shapes.specialized
    for note in shape_report:
        warnings.warn(f"graphport: {note}", stacklevel=2)
    eliminate_dead_code(captured.graph)
    holder = torch.nn.Module()
    graph_module = fx.GraphModule(holder, captured.graph, class_name="GraphModule")
    call_graph = [ModuleCallEntry("", ModuleCallSignature([], [], captured.in_spec, captured.out_spec,
                                                          captured.forward_arg_names))]
    if root is not None:
        call_graph += [ModuleCallEntry(name) for name, _ in root.named_modules() if name]
    ep = ExportedProgram(graph_module, captured.signature, captured.state_dict, range_constraints, call_graph,
                         example_inputs=(args, kwargs), constants=captured.constants,
                         input_paths=captured.input_paths, input_aliases=captured.input_aliases,
                         shape_contract=contract)
    ep.shape_report = shape_report   # which Dim.AUTO / Dim.DYNAMIC dims became static, and why
    verify(ep)
    return ep


def _resolve(mod) -> tuple[Callable, torch.nn.Module | None]:
    if isinstance(mod, torch.nn.Module):
        return mod, mod
    if inspect.ismethod(mod) and isinstance(mod.__self__, torch.nn.Module):
        return mod, mod.__self__
    if callable(mod):
        return mod, None
    raise UnsupportedInputError(f"export expects an nn.Module or a function, got a {type(mod).__qualname__}",
                                fix="pass the model itself, e.g. graphport.export(model, (x,))")
