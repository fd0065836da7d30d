"""`graphport.export`: the pipeline from a user program to an ExportedProgram.

    spec      resolve dynamic_shapes against the inputs: symbols and declared ranges
    capture   run the program once on tracers, recording one functional graph
    passes    drop what capture made for itself and nobody uses
    shapes    check the guards against the spec; prove sizes 0 and 1 by tracing there
    program   the ExportedProgram, checked by the verifier
"""
from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable

import torch
import torch.fx as fx

from .capture import Captured, argument_names, capture, input_paths
from .errors import UnsupportedInputError
from .passes.dead_code import eliminate_dead_code
from .passes.small_sizes import prove_small_sizes
from .passes.verifier import verify
from .program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .shapes.check import build_contract, check
from .shapes.contract import ShapeContract
from .shapes.spec import InputShapes, resolve
from .shapes.unbacked import with_data_dependent


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
    arg_names = argument_names(fn, args, kwargs)
    shapes = None
    if dynamic_shapes is not None:
        shapes = resolve(dynamic_shapes, args, kwargs, arg_names, input_paths(args, kwargs, arg_names))

    def trace(shapes_: InputShapes | None, locations: bool = True) -> Captured:
        captured = capture(fn, args, kwargs, root, shapes_, locations=locations)
        eliminate_dead_code(captured.graph, captured.user_calls)
        return captured

    captured = trace(shapes)
    contract = None if shapes is None else _shape_contract(shapes, captured, trace)
    contract = with_data_dependent(contract, captured.shape_env)
    for note in [] if shapes is None else shapes.specialized:
        warnings.warn(f"graphport: {note}", stacklevel=2)
    call_graph = [ModuleCallEntry("", ModuleCallSignature([], [], captured.in_spec, captured.out_spec,
                                                          captured.forward_arg_names))]
    if root is not None:
        call_graph += [ModuleCallEntry(name) for name, _ in root.named_modules() if name]
    ep = ExportedProgram(
        fx.GraphModule(torch.nn.Module(), captured.graph, class_name="GraphModule"),
        captured.signature, captured.state_dict,
        range_constraints=contract.range_constraints() if contract is not None else {},
        module_call_graph=call_graph, example_inputs=(args, kwargs), constants=captured.constants,
        input_paths=captured.input_paths, input_aliases=captured.input_aliases, shape_contract=contract,
        shape_report=list(shapes.specialized) if shapes is not None else [])
    verify(ep)
    return ep


def _shape_contract(shapes: InputShapes, captured: Captured, trace: Callable) -> ShapeContract:
    """Check the guards against the spec, prove the small sizes, and write the contract."""
    def retrace(pinned: InputShapes, locations: bool = True):
        again = trace(pinned, locations)
        return again.graph, again.constants
    report = prove_small_sizes(retrace, shapes, captured.graph, captured.constants)
    # A size where the program computes something else than at the example breaks the
    # declared range; one where the program fails (as eager would) is refused at call time.
    differs = {(sym, size): (refusal.reason, refusal.where) for (sym, size), refusal in report.refused.items()
               if not refusal.fails_in_eager and shapes.kinds.get(sym) != "auto"}
    kept = check(shapes, differs)
    valid_from = {}
    for sym, least in shapes.env.assumed_min.items():
        valid = set(report.valid.get(sym, []))
        lowest = least
        while lowest - 1 in valid:
            lowest -= 1
        if lowest > shapes.env.symbols[sym].declared.lower:
            refusal = report.refused.get((sym, lowest - 1))
            reason = refusal.reason if refusal is not None else "the capture's decisions assumed larger sizes"
            valid_from[sym] = (lowest, reason)
            what = "narrows Dim.AUTO's range" if shapes.kinds.get(sym) == "auto" else "is refused at call time"
            shapes.specialized.append(f"{shapes.env.symbols[sym].dim_name} < {lowest} {what}: {reason}")
    return build_contract(shapes, kept, valid_from, report.exclusions)


def _resolve(mod) -> tuple[Callable, torch.nn.Module | None]:
    if isinstance(mod, torch.nn.Module):
        return mod, mod
    if inspect.ismethod(mod) and isinstance(mod.__self__, torch.nn.Module):
        return mod, mod.__self__
    if callable(mod):
        return mod, None
    raise UnsupportedInputError(f"export expects an nn.Module or a function, got a {type(mod).__qualname__}",
                                fix="pass the model itself, e.g. graphport.export(model, (x,))")
