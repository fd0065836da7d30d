"""Capture: run the user's program once on tracer tensors and record it as one graph.

    inputs.py        flatten the arguments, name them, make their placeholders
    state.py         lift parameters, buffers and tensor attributes
    environment.py   the process-wide changes capture needs, entered and left as one
    scope.py         graphs being recorded, and what each value is in them
    recorder.py      graph values, metadata, and the functional form of writes
    mode.py          the dispatch mode that sees every ATen call (rules.py: special ops)
    control_flow.py  cond / map / while_loop / scan: branches and bodies traced as subgraphs
    sizes.py         symbolic sizes as graph values
    outputs.py       the output node and the signature
"""
from __future__ import annotations

import contextlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx

from ..audit import PythonAudit
from ..ops.policy import EXPORT_DEFAULT, DispatchPolicy
from ..shapes.env import ShapeEnv
from ..shapes.spec import InputShapes
from ..signature import ExportGraphSignature
from ..source import SourceLocation
from .control_flow import attach_subgraphs, program_module
from .calls import CallBoundary, ModuleCalls
from .environment import ModuleSnapshot, capture_environment
from .inputs import argument_names, input_paths, trace_inputs
from .local_proofs import DeferredAssumptions
from .mode import CaptureMode
from .outputs import finish_graph
from .recorder import Recorder
from .sizes import SizeValues
from .torch_fn import TorchFunctionTracker
from .tensor_state import TensorStateReads
from .state import ModuleState

__all__ = ["Captured", "capture", "argument_names", "input_paths", "program_module"]


@dataclass
class Captured:
    """What capture hands to the rest of the pipeline."""
    graph: fx.Graph
    signature: ExportGraphSignature
    state_dict: dict[str, torch.Tensor]
    constants: dict[str, torch.Tensor]
    in_spec: Any
    out_spec: Any
    input_paths: list[str] = field(default_factory=list)   # printable path of each flat user input
    input_aliases: dict[int, int] = field(default_factory=dict)  # flat input index -> earlier index it must be
    forward_arg_names: list[str] = field(default_factory=list)
    user_calls: set[fx.Node] = field(default_factory=set)  # nodes the program asked for: never dead code
    boundaries: dict[str, CallBoundary] = field(default_factory=dict)  # preserved module fqn -> its call
    shape_env: ShapeEnv | None = None   # its symbols, data-dependent ones (u0, ...) included


def capture(fn: Callable, args: tuple, kwargs: dict, root: torch.nn.Module | None,
            shapes: InputShapes | None = None, policy: DispatchPolicy = EXPORT_DEFAULT,
            locations: bool = True, preserve: tuple[str, ...] = (), prove_locally: bool = False,
            audit: PythonAudit | None = None) -> Captured:
    """Run `fn` once on tracers; `shapes` gives input tensors symbolic sizes. `locations`
    False leaves out each node's source location and module stack (a re-trace that is only
    compared with the capture: walking the Python stack per node is a good part of tracing).
    `preserve` names the submodules whose call boundary is recorded (calls.py).
    `prove_locally`: assumptions about small sizes made computing one operator's metadata
    are kept in `shapes.env.deferral` for a proof operator by operator (local_proofs.py).
    `audit` watches the program's own Python while it runs (graphport.audit)."""
    rec = Recorder(entry_frame=sys._getframe(0), locations=locations)
    if shapes is not None and prove_locally:
        rec.defer_assumptions(DeferredAssumptions(shapes.env))
        shapes.env.deferral = rec.deferred
    state = ModuleState(root, rec) if root is not None else None
    if root is not None:
        rec.objects.find_in(root)
    arg_names = argument_names(fn, args, kwargs)
    inputs = trace_inputs(rec, args, kwargs, arg_names, shapes)
    if shapes is not None:
        rec.sizes = SizeValues(shapes.env, inputs.nodes)
    calls = ModuleCalls(rec, state.module_names) if state is not None and locations else None
    hooks = (calls.push, calls.pop) if calls is not None else None
    snapshot = ModuleSnapshot(root) if root is not None else None
    with contextlib.ExitStack() as stack:
        if snapshot is not None:
            stack.callback(snapshot.restore)
        stack.enter_context(capture_environment(hooks, symbolic=shapes is not None))
        if calls is not None:
            stack.enter_context(calls.preserving(root, preserve))
        # a re-trace proving small sizes tracks view-or-copy choices as the capture does
        stack.enter_context(TorchFunctionTracker(rec.enter_torch_fn if locations else None,
                                                 rec if locations or rec.deferred is not None else None, audit))
        rec.state_reads = stack.enter_context(TensorStateReads(rec, audit))   # on top: the program's reads of autograd state
        rec.until_done = stack   # contexts capture enters on the way (capture/data_dependent.py)
        with state.swapped() if state is not None else contextlib.nullcontext(), CaptureMode(rec, policy):
            tracer_args, tracer_kwargs = inputs.rebuild()
            with audit.watching(fn, (tracer_args, tracer_kwargs, root)) if audit is not None \
                    else contextlib.nullcontext():
                out = fn(*tracer_args, **tracer_kwargs)
        rec.module_stack.clear()
        # still inside the environment: size arithmetic needs torch's Python meta kernels
        signature, out_spec = finish_graph(rec, out, inputs, state, _definition_site(fn))
    attach_subgraphs(rec.graph, rec.root.modules)
    captured = Captured(
        graph=rec.graph,
        signature=signature,
        state_dict=state.state_dict() if state is not None else {},
        constants={**(state.non_persistent() if state is not None else {}), **rec.constant_values,
                   **rec.objects.values()},
        in_spec=inputs.in_spec,
        out_spec=out_spec,
        input_paths=inputs.paths,
        input_aliases=inputs.aliases,
        forward_arg_names=list(arg_names),
        user_calls=rec.user_calls,
        boundaries=calls.boundaries if calls is not None else {},
        shape_env=rec.sizes.env if rec.sizes is not None else None,
    )
    rec.release()
    return captured


def _definition_site(fn: Callable) -> tuple[SourceLocation, ...]:
    """Where the captured function is defined: the location of values made outside any op."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        code = inspect.unwrap(target).__code__
    except AttributeError:
        return ()
    return (SourceLocation(code.co_filename, code.co_firstlineno, code.co_name),)

