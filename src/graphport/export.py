"""`graphport.export`: the pipeline from a user program to an ExportedProgram."""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
import torch.fx as fx

from .capture import capture
from .errors import UnsupportedFeatureError, UnsupportedInputError
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
    if dynamic_shapes is not None:
        raise UnsupportedFeatureError(
            "dynamic_shapes is not supported yet: this version exports static shapes only",
            fix="pass dynamic_shapes=None; the program is then valid for the example inputs' shapes")
    fn, root = _resolve(mod)
    captured = capture(fn, args, kwargs, root)
    eliminate_dead_code(captured.graph)
    holder = torch.nn.Module()
    graph_module = fx.GraphModule(holder, captured.graph, class_name="GraphModule")
    call_graph = [ModuleCallEntry("", ModuleCallSignature([], [], captured.in_spec, captured.out_spec,
                                                          captured.forward_arg_names))]
    if root is not None:
        call_graph += [ModuleCallEntry(name) for name, _ in root.named_modules() if name]
    ep = ExportedProgram(graph_module, captured.signature, captured.state_dict, {}, call_graph,
                         example_inputs=(args, kwargs), constants=captured.constants,
                         input_paths=captured.input_paths, input_aliases=captured.input_aliases)
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
